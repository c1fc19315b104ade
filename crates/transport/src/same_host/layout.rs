//! A region's header and the placement of its parts.
//!
//! A region is one run of words: a header, then the MR table, the QP
//! table, the deliveries ring, the atomic lock stripes and the arena that
//! holds receive rings, each starting on a cache line (8 words). The owner
//! lays it out with [`format`]; anyone maps it and checks it with
//! [`RegionView::open`], which reads the header once: a peer's region is
//! only semi-trusted, so every part must lie inside the mapping, and the
//! view keeps the checked placement rather than re-reading it (a header
//! changed later cannot move a part out of bounds).
//!
//! Header (words): magic, version, owner pid, total words, doorbell, then
//! offset and capacity of each part in the order above (the arena's
//! "capacity" is its length in words), then the *gone* word, the
//! address the owner maps the region at and a random nonce. The magic is
//! written last, so a region being formatted does not open.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::atomic_lock::LockTable;
use super::doorbell::Doorbell;
use super::inbound::Inbound;
use super::mr_slots::MrTable;
use super::qp_slots::{QpTable, RingRef};
use super::recv_ring::RecvRing;
use super::Words;

/// The first word of every region.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SVSHREG\x01");
/// The layout version this code reads and writes.
pub const VERSION: u64 = 6;
/// Words of the header.
pub const HEADER_WORDS: usize = 32;

const H_MAGIC: usize = 0;
const H_VERSION: usize = 1;
const H_PID: usize = 2;
const H_TOTAL_WORDS: usize = 3;
const H_DOORBELL: usize = 4;
/// Offset word of the first part; each part has an offset word then a
/// capacity word.
const H_PARTS: usize = 5;
/// Nonzero once the owning context has ended: its process exited, was
/// killed or replaced its image (exec), or it closed the device. The
/// daemon writes it when the context's connection closes
/// ([`GONE_OFFSET`]); a peer then treats the QPs there as a NIC treats a
/// dead host's, and touches none of the memory the pid now names.
const H_GONE: usize = 15;
/// Where the gone word lies in a region's bytes, for the daemon, which
/// writes it through the region's descriptor, every byte nonzero (so a
/// reader that sees any part of that write sees it nonzero).
pub const GONE_OFFSET: u64 = (H_GONE * 8) as u64;
/// The address the owner maps its region at, and a random number of
/// this region's: a peer whose copy into the owner's memory faults reads
/// the nonce back through the owner's pid at that address. If the owner's
/// process no longer maps this region there, its pid names another image
/// (an exec the daemon has not yet reported through the gone word), and
/// the fault is the owner's end, not a bad address
/// ([`RegionView::owner_check`]).
const H_MAPPED_AT: usize = 16;
const H_NONCE: usize = 17;
/// Nonzero once the owner's progress thread holds the exec lock.
const H_EXEC_ARMED: usize = 18;
/// The exec lock: a robust, process-shared mutex (glibc's
/// `pthread_mutex_t`, whose first 32 bits are its futex word) that the
/// owner's progress thread holds for its life. The kernel marks a robust
/// futex whose holder dies (FUTEX_OWNER_DIED, the holder's thread id
/// cleared) when the thread exits or is killed, and an exec kills every
/// other thread of the process before it replaces the image: so the mark
/// is there before the pid names a new image, and a peer reads it before
/// each copy into the owner's memory without a system call
/// ([`RegionView::exec_lock_says_gone`]). The provider takes and gives
/// it back (`exec_lock.rs`); an embedder that does not leaves it unarmed,
/// and peers read the nonce back instead ([`RegionView::owner_check`]).
const H_EXEC_LOCK: usize = 19;
/// Words the exec lock may take (glibc's mutex is 40 bytes on x86-64, 48
/// on AArch64).
pub const EXEC_LOCK_WORDS: usize = 8;
const _: () = assert!(
    H_PARTS + 2 * PART_NAMES.len() <= H_GONE
        && H_GONE < H_MAPPED_AT
        && H_NONCE < H_EXEC_ARMED
        && H_EXEC_ARMED < H_EXEC_LOCK
        && H_EXEC_LOCK + EXEC_LOCK_WORDS <= HEADER_WORDS
);
// The futex word is the low half of its header word.
const _: () = assert!(cfg!(target_endian = "little"));
const PART_NAMES: [&str; 5] = [
    "MR table",
    "QP table",
    "deliveries",
    "lock stripes",
    "arena",
];
const ALIGN: usize = 8;

/// How big a region's parts are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RegionLayout {
    /// MRs the MR table holds.
    pub mr_capacity: usize,
    /// QPs the QP table holds.
    pub qp_capacity: usize,
    /// Records the deliveries ring holds: a power of two, at least 2.
    pub inbound_capacity: usize,
    /// Lock stripes for atomics: at least 1.
    pub lock_stripes: usize,
    /// Words of the arena for receive rings.
    pub arena_words: usize,
}

/// Where one part lies, in words from the start of the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    /// First word.
    pub offset: usize,
    /// Length in words.
    pub words: usize,
}

impl Span {
    fn end(&self) -> Option<usize> {
        self.offset.checked_add(self.words)
    }
}

/// Where every part of a region lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Parts {
    /// The MR table ([`MrTable`]).
    pub mrs: Span,
    /// The QP table ([`QpTable`]).
    pub qps: Span,
    /// The deliveries ring ([`Inbound`]).
    pub inbound: Span,
    /// The lock stripes ([`LockTable`]).
    pub locks: Span,
    /// The arena of receive rings ([`RecvRing`]).
    pub arena: Span,
}

impl Parts {
    fn spans(&self) -> [Span; 5] {
        [self.mrs, self.qps, self.inbound, self.locks, self.arena]
    }
}

impl RegionLayout {
    /// Where the parts go, one after another after the header; `None` for
    /// a capacity the parts refuse or sizes that overflow.
    pub fn parts(&self) -> Option<Parts> {
        let mut next = HEADER_WORDS;
        let mut place = |words: usize| -> Option<Span> {
            let span = Span {
                offset: next,
                words,
            };
            next = span.end()?.checked_next_multiple_of(ALIGN)?;
            Some(span)
        };
        let [mrs, qps, inbound, locks, arena] = self.sizes()?;
        Some(Parts {
            mrs: place(mrs)?,
            qps: place(qps)?,
            inbound: place(inbound)?,
            locks: place(locks)?,
            arena: place(arena)?,
        })
    }

    /// Words of the whole region.
    pub fn total_words(&self) -> Option<usize> {
        self.parts()?.arena.end()
    }

    /// Bytes of the whole region (what to size the memfd to).
    pub fn total_bytes(&self) -> Option<usize> {
        self.total_words()?.checked_mul(8)
    }

    /// The capacity word of each part, in header order.
    fn capacities(&self) -> [usize; 5] {
        [
            self.mr_capacity,
            self.qp_capacity,
            self.inbound_capacity,
            self.lock_stripes,
            self.arena_words,
        ]
    }

    /// Words of each part, in header order.
    fn sizes(&self) -> Option<[usize; 5]> {
        let [a, b, c, d, e] = self.capacities();
        Some([
            part_words(0, a)?,
            part_words(1, b)?,
            part_words(2, c)?,
            part_words(3, d)?,
            part_words(4, e)?,
        ])
    }
}

/// Words of the part with header index `part` and the given capacity
/// (`None`: a capacity that part refuses).
fn part_words(part: usize, capacity: usize) -> Option<usize> {
    match part {
        0 => MrTable::words_for(capacity),
        1 => QpTable::words_for(capacity),
        2 => Inbound::words_for(capacity),
        3 if capacity > 0 => LockTable::words_for(capacity),
        4 => Some(capacity),
        _ => None,
    }
}

/// Why [`format`] did not lay out a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatError {
    /// A capacity the parts refuse (see [`RegionLayout`]), or sizes that
    /// overflow.
    BadLayout,
    /// The words are fewer than the layout needs.
    TooSmall {
        /// Words the layout needs.
        needed: usize,
        /// Words there are.
        have: usize,
    },
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::BadLayout => f.write_str("invalid shared region layout"),
            FormatError::TooSmall { needed, have } => {
                write!(f, "shared region of {have} words, {needed} needed")
            }
        }
    }
}

impl std::error::Error for FormatError {}

/// Lays out a region for owner `pid`: zeroes it, makes every part empty
/// and writes the header, magic last. Before any peer maps it.
pub fn format(words: &[AtomicU64], pid: i32, layout: &RegionLayout) -> Result<(), FormatError> {
    for word in words {
        word.store(0, Ordering::Relaxed);
    }
    format_zeroed(words, pid, layout)
}

/// [`format`] for a region that is all zeros already, as a new memfd is:
/// writes only what is not zero, so the pages of the parts nobody uses
/// yet (most of a large arena) are never touched and cost no memory.
pub fn format_zeroed(
    words: &[AtomicU64],
    pid: i32,
    layout: &RegionLayout,
) -> Result<(), FormatError> {
    let parts = layout.parts().ok_or(FormatError::BadLayout)?;
    let needed = parts.arena.end().ok_or(FormatError::BadLayout)?;
    let Some(region) = words.get(..needed) else {
        return Err(FormatError::TooSmall {
            needed,
            have: words.len(),
        });
    };
    Inbound::new(slice(region, parts.inbound), layout.inbound_capacity).format();
    let mut header = vec![0; HEADER_WORDS];
    header[H_VERSION] = VERSION;
    header[H_PID] = u64::from(pid as u32);
    header[H_TOTAL_WORDS] = needed as u64;
    header[H_MAPPED_AT] = words.as_ptr() as u64;
    header[H_NONCE] = fastrand::u64(1..);
    for (i, (span, capacity)) in parts.spans().iter().zip(layout.capacities()).enumerate() {
        header[H_PARTS + 2 * i] = span.offset as u64;
        header[H_PARTS + 2 * i + 1] = capacity as u64;
    }
    for (word, value) in region.iter().zip(header).skip(1) {
        word.store(value, Ordering::Relaxed);
    }
    region[H_MAGIC].store(MAGIC, Ordering::Release);
    Ok(())
}

/// Why a region did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadRegion {
    /// Shorter than its header, or than the length its header gives.
    TooShort,
    /// Not a region (or not yet formatted).
    Magic,
    /// A layout version this code does not read.
    Version(u64),
    /// This part has a bad capacity or does not lie inside the region.
    Part(&'static str),
}

impl fmt::Display for BadRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadRegion::TooShort => f.write_str("shared region too short"),
            BadRegion::Magic => f.write_str("not a shared region"),
            BadRegion::Version(v) => write!(f, "shared region version {v}, {VERSION} expected"),
            BadRegion::Part(part) => write!(f, "shared region's {part} is malformed"),
        }
    }
}

impl std::error::Error for BadRegion {}

/// A checked region: its parts, placed as the header said when it was
/// opened. A clone shares the mapping.
#[derive(Clone)]
pub struct RegionView {
    words: Arc<dyn Words>,
    layout: RegionLayout,
    parts: Parts,
    pid: i32,
}

impl fmt::Debug for RegionView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegionView")
            .field("pid", &self.pid)
            .field("layout", &self.layout)
            .field("parts", &self.parts)
            .finish_non_exhaustive()
    }
}

impl RegionView {
    /// Checks the region's magic, version and part placement.
    pub fn open(words: Arc<dyn Words>) -> Result<RegionView, BadRegion> {
        let region = words.words();
        let header = region.get(..HEADER_WORDS).ok_or(BadRegion::TooShort)?;
        if header[H_MAGIC].load(Ordering::Acquire) != MAGIC {
            return Err(BadRegion::Magic);
        }
        let header: Vec<u64> = header.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        if header[H_VERSION] != VERSION {
            return Err(BadRegion::Version(header[H_VERSION]));
        }
        let total = usize::try_from(header[H_TOTAL_WORDS]).map_err(|_| BadRegion::TooShort)?;
        if total > region.len() || total < HEADER_WORDS {
            return Err(BadRegion::TooShort);
        }
        let (layout, parts) = read_parts(&header, total)?;
        let pid = header[H_PID] as u32 as i32;
        Ok(RegionView {
            words,
            layout,
            parts,
            pid,
        })
    }

    /// The owner's pid, as its header gives it.
    pub fn owner_pid(&self) -> i32 {
        self.pid
    }

    /// The capacities the header gave.
    pub fn layout(&self) -> RegionLayout {
        self.layout
    }

    /// Where the parts lie.
    pub fn parts(&self) -> Parts {
        self.parts
    }

    /// The whole region.
    pub fn words(&self) -> &[AtomicU64] {
        self.words.words()
    }

    /// Where, in the owner's address space, its copy of the nonce lies,
    /// and what it must read: a peer compares the two to tell that the
    /// owner's pid still runs the image that maps this region.
    pub fn owner_check(&self) -> (u64, u64) {
        let header = self.words();
        let at = header[H_MAPPED_AT].load(Ordering::Relaxed);
        let nonce = header[H_NONCE].load(Ordering::Relaxed);
        (at.wrapping_add(H_NONCE as u64 * 8), nonce)
    }

    /// Where the exec lock lies in this process's mapping of the region
    /// (see `H_EXEC_LOCK`): [`EXEC_LOCK_WORDS`] words, 8-byte aligned.
    pub fn exec_lock_addr(&self) -> usize {
        self.words()[H_EXEC_LOCK..].as_ptr() as usize
    }

    /// The owner's progress thread holds the exec lock (`on`), or is
    /// about to give it back.
    pub fn arm_exec_lock(&self, on: bool) {
        self.words()[H_EXEC_ARMED].store(u64::from(on), Ordering::Release);
    }

    /// What the exec lock says of the owner: `Some(true)` once the thread
    /// that held it has died (exit, kill, or an exec that killed it) or
    /// gave it back, `Some(false)` while it holds it, `None` if it was
    /// never held (the owner's embedder does not take it).
    pub fn exec_lock_says_gone(&self) -> Option<bool> {
        const TID: u32 = 0x3fff_ffff; // FUTEX_TID_MASK
        const OWNER_DIED: u32 = 0x4000_0000; // FUTEX_OWNER_DIED
        let words = self.words();
        if words[H_EXEC_ARMED].load(Ordering::Acquire) == 0 {
            return None;
        }
        let futex = words[H_EXEC_LOCK].load(Ordering::Acquire) as u32;
        Some(futex & TID == 0 || futex & OWNER_DIED != 0)
    }

    /// Whether the owning context has ended (see [`GONE_OFFSET`]).
    pub fn owner_gone(&self) -> bool {
        self.words()[H_GONE].load(Ordering::Acquire) != 0
    }

    /// The owner's doorbell.
    pub fn doorbell(&self) -> Doorbell<'_> {
        Doorbell::new(self.words().get(H_DOORBELL))
    }

    /// The published MRs.
    pub fn mrs(&self) -> MrTable<'_> {
        let at = self.parts.mrs.offset as u64 * 8;
        MrTable::new(self.part(self.parts.mrs), at, self.layout.mr_capacity)
    }

    /// The published QPs.
    pub fn qps(&self) -> QpTable<'_> {
        let at = self.parts.qps.offset as u64 * 8;
        QpTable::new(self.part(self.parts.qps), at, self.layout.qp_capacity)
    }

    /// The owner's deliveries ring.
    pub fn inbound(&self) -> Inbound<'_> {
        Inbound::new(self.part(self.parts.inbound), self.layout.inbound_capacity)
    }

    /// The locks for atomics on the owner's memory.
    pub fn locks(&self) -> LockTable<'_> {
        LockTable::new(self.part(self.parts.locks), self.layout.lock_stripes)
    }

    /// The arena, whose words receive rings live in.
    pub fn arena(&self) -> &[AtomicU64] {
        self.part(self.parts.arena)
    }

    /// The receive ring `ring` names, if it lies inside the arena.
    pub fn recv_ring(&self, ring: RingRef) -> Option<RecvRing<'_>> {
        RecvRing::new(self.arena(), ring)
    }

    fn part(&self, span: Span) -> &[AtomicU64] {
        slice(self.words(), span)
    }
}

/// The words of `span`, or none if it does not lie inside `words`.
fn slice(words: &[AtomicU64], span: Span) -> &[AtomicU64] {
    span.end()
        .and_then(|end| words.get(span.offset..end))
        .unwrap_or_default()
}

/// The capacities and placement the header gives, each part checked to
/// lie after the header and inside the region's `total` words.
fn read_parts(header: &[u64], total: usize) -> Result<(RegionLayout, Parts), BadRegion> {
    let mut spans = [Span::default(); 5];
    let mut capacities = [0usize; 5];
    for (i, name) in PART_NAMES.iter().enumerate() {
        let bad = BadRegion::Part(name);
        let offset = header.get(H_PARTS + 2 * i).ok_or(bad)?;
        let capacity = header.get(H_PARTS + 2 * i + 1).ok_or(bad)?;
        spans[i].offset = usize::try_from(*offset).map_err(|_| bad)?;
        capacities[i] = usize::try_from(*capacity).map_err(|_| bad)?;
    }
    for (i, name) in PART_NAMES.iter().enumerate() {
        spans[i].words = part_words(i, capacities[i]).ok_or(BadRegion::Part(name))?;
        let inside = spans[i].end().is_some_and(|end| end <= total);
        if spans[i].offset < HEADER_WORDS || !inside {
            return Err(BadRegion::Part(name));
        }
    }
    let [mr_capacity, qp_capacity, inbound_capacity, lock_stripes, arena_words] = capacities;
    let layout = RegionLayout {
        mr_capacity,
        qp_capacity,
        inbound_capacity,
        lock_stripes,
        arena_words,
    };
    let [mrs, qps, inbound, locks, arena] = spans;
    Ok((
        layout,
        Parts {
            mrs,
            qps,
            inbound,
            locks,
            arena,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::same_host::mr_slots::MrInfo;
    use crate::same_host::qp_slots::QpInfo;

    fn layout() -> RegionLayout {
        RegionLayout {
            mr_capacity: 8,
            qp_capacity: 4,
            inbound_capacity: 16,
            lock_stripes: 4,
            arena_words: 256,
        }
    }

    fn region(words: usize) -> Arc<dyn Words> {
        let words: Box<[AtomicU64]> = (0..words).map(|_| AtomicU64::new(0)).collect();
        Arc::new(words)
    }

    fn formatted() -> Arc<dyn Words> {
        let words = region(layout().total_words().unwrap());
        format(words.words(), 1234, &layout()).unwrap();
        words
    }

    /// The exec lock is trusted only once armed; then a futex word with a
    /// holder's thread id says the owner is there, one marked owner-died
    /// (the kernel's, at the holder's death or exec) or free says gone.
    #[test]
    fn the_exec_lock_speaks_once_armed() {
        let view = RegionView::open(formatted()).unwrap();
        let futex = &view.words()[H_EXEC_LOCK];
        futex.store(4321, Ordering::Relaxed);
        assert_eq!(view.exec_lock_says_gone(), None, "not armed");
        view.arm_exec_lock(true);
        assert_eq!(view.exec_lock_says_gone(), Some(false), "held");
        futex.store(0x4000_0000, Ordering::Relaxed);
        assert_eq!(view.exec_lock_says_gone(), Some(true), "its holder died");
        futex.store(0xC000_0000, Ordering::Relaxed);
        assert_eq!(view.exec_lock_says_gone(), Some(true), "died, with waiters");
        futex.store(0, Ordering::Relaxed);
        assert_eq!(view.exec_lock_says_gone(), Some(true), "given back");
        assert_eq!(view.exec_lock_addr() % 8, 0);
    }

    #[test]
    fn parts_follow_the_header_on_cache_lines_without_overlap() {
        let parts = layout().parts().unwrap();
        let spans = parts.spans();
        assert_eq!(spans[0].offset, HEADER_WORDS);
        for pair in spans.windows(2) {
            assert!(pair[0].end().unwrap() <= pair[1].offset);
            assert_eq!(pair[1].offset % ALIGN, 0);
        }
        assert_eq!(layout().total_words(), parts.arena.end());
        assert_eq!(layout().total_bytes(), parts.arena.end().map(|w| w * 8));
    }

    #[test]
    fn bad_layouts_are_refused() {
        for bad in [
            RegionLayout {
                inbound_capacity: 3,
                ..layout()
            },
            RegionLayout {
                lock_stripes: 0,
                ..layout()
            },
            RegionLayout {
                mr_capacity: usize::MAX,
                ..layout()
            },
            RegionLayout {
                arena_words: usize::MAX,
                ..layout()
            },
        ] {
            assert_eq!(bad.parts(), None, "{bad:?}");
            assert_eq!(format(&[], 1, &bad), Err(FormatError::BadLayout));
        }
        let needed = layout().total_words().unwrap();
        let short = region(needed - 1);
        assert_eq!(
            format(short.words(), 1, &layout()),
            Err(FormatError::TooSmall {
                needed,
                have: needed - 1
            })
        );
    }

    #[test]
    fn a_formatted_region_opens_and_its_parts_work() {
        let view = RegionView::open(formatted()).unwrap();
        assert_eq!(view.owner_pid(), 1234);
        assert_eq!(view.layout(), layout());
        assert_eq!(view.parts(), layout().parts().unwrap());
        let mr = MrInfo {
            key: 5,
            length: 64,
            ..Default::default()
        };
        view.mrs().publish(&mr).unwrap();
        assert_eq!(view.mrs().lookup(5), Some(mr));
        let ring = RingRef {
            offset: 8,
            capacity: 4,
            max_sge: 2,
        };
        let qp = QpInfo {
            qpn: 0x1001,
            state: 4,
            rq: Some(ring),
            ..Default::default()
        };
        view.qps().publish(&qp).unwrap();
        let found = view.qps().lookup(0x1001).and_then(|qp| qp.rq).unwrap();
        let rq = view.recv_ring(found).unwrap();
        rq.push(77, &[]).unwrap();
        assert_eq!(rq.claim().map(|(_, e)| e.wr_id), Some(77));
        assert!(view
            .recv_ring(RingRef {
                offset: 250,
                ..ring
            })
            .is_none());
        view.inbound().push(&[1; 7]).unwrap();
        assert_eq!(view.inbound().pop(), Some([1; 7]));
        drop(
            view.locks()
                .lock(0x10, std::time::Duration::from_secs(60))
                .unwrap(),
        );
        view.doorbell().arm();
        assert!(view.doorbell().take());
        // A second view of the same words sees the same state.
        let again = RegionView::open(view.words.clone()).unwrap();
        assert_eq!(again.mrs().lookup(5), Some(mr));
    }

    #[test]
    fn bad_headers_are_refused() {
        let cases: [(usize, u64, BadRegion); 8] = [
            (H_MAGIC, 0, BadRegion::Magic),
            (H_VERSION, 1, BadRegion::Version(1)),
            (H_TOTAL_WORDS, u64::MAX, BadRegion::TooShort),
            (H_PARTS, 3, BadRegion::Part("MR table")),
            (H_PARTS + 1, 1 << 40, BadRegion::Part("MR table")),
            (H_PARTS + 5, 5, BadRegion::Part("deliveries")),
            (H_PARTS + 7, 0, BadRegion::Part("lock stripes")),
            (H_PARTS + 8, u64::MAX - 2, BadRegion::Part("arena")),
        ];
        for (word, value, error) in cases {
            let words = formatted();
            words.words()[word].store(value, Ordering::Relaxed);
            assert_eq!(
                RegionView::open(words).unwrap_err(),
                error,
                "word {word} = {value}"
            );
        }
        assert_eq!(
            RegionView::open(region(3)).unwrap_err(),
            BadRegion::TooShort
        );
        assert_eq!(RegionView::open(region(64)).unwrap_err(), BadRegion::Magic);
    }

    #[test]
    fn random_headers_never_panic_and_open_only_inside_the_region() {
        let mut rng = fastrand::Rng::with_seed(1);
        let total = layout().total_words().unwrap();
        for _ in 0..2_000 {
            let words = formatted();
            for _ in 0..rng.usize(1..4) {
                let word = rng.usize(1..HEADER_WORDS);
                let value = if rng.bool() {
                    rng.u64(..)
                } else {
                    rng.u64(..total as u64 * 2)
                };
                words.words()[word].store(value, Ordering::Relaxed);
            }
            if let Ok(view) = RegionView::open(words) {
                for span in view.parts().spans() {
                    assert!(span.end().unwrap() <= total);
                }
                let _ = view.mrs().lookup(1);
                let _ = view.qps().lookup(1);
                let _ = view.inbound().pop();
            }
        }
    }
}
