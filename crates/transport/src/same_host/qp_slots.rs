//! Published QP descriptors: what a peer checks an operation's target QP
//! against, and where it finds that QP's receive queue.
//!
//! Open addressing by QP number (see [`super::probing`]). Each entry has
//! two parts:
//!
//! * the *state word*, `qpn<<32 | incarnation<<16 | tag<<8 | state`,
//!   which is both the table's key and occupancy tag and the QP's state
//!   and incarnation (how many times it was reset). Peers change it too:
//!   a requester that finds a fault on the target moves the target QP to
//!   the error state, with a compare-and-swap that names the QPN and the
//!   incarnation it found, so it can only hit the QP it looked up, never
//!   the same QP after a reset;
//! * the *fields*, under a seqlock (see [`super::seqlock`]) that only the
//!   owner writes.
//!
//! The owner's [`QpTable::publish`] writes the fields and, inside the same
//! seqlock window, moves the state word by compare-and-swap from the
//! state it last published, so a state a peer set in between is never
//! overwritten: the publish fails with [`QpPublishError::StateChanged`]
//! instead (and leaves the fields as they were), the owner adopts that
//! state (takes its error path) and publishes again; a publish whose
//! state is the one in the word always goes through, and so does one of
//! a new incarnation (a reset QP starts afresh, whatever a peer found in
//! the old one). The owner changes
//! the state word only inside its seqlock windows and a reader reads it
//! inside its seqlocked read of the fields, so a snapshot's state and
//! fields are from one publish (a peer's change touches the state only,
//! so any fields go with it).
//!
//! A withdrawal that leaves a page of slots empty gives the page back to
//! the kernel (see [`super::vacant_pages`]).
//!
//! Part layout (words): `[live, seqlock clock, 6 spare]`, then per slot
//! `[seq, 6 fields, state word]`, a cache line, so that no slot straddles
//! two pages. The fields hold the state the owner last published (for
//! [`QpTable::publish`] to tell a peer's change from its own), beside
//! what peers read.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use super::full::Full;
use super::probing::{clearable_run, probe, table_slots};
use super::seqlock;
use super::vacant_pages::{SlotArea, Withdrawal};

const LIVE_COUNT: usize = 0;
/// The seqlock clock (see [`super::seqlock`]).
const CLOCK: usize = 1;
const HEADER: usize = 8;
const STRIDE: usize = 8;
const SEQ: usize = 0;
const FIELDS: usize = 6;
/// The state word follows the fields, so a seqlocked read covers both.
const STATE: usize = 1 + FIELDS;
/// Where in the fields the state the owner last published lies (the
/// word of the MTU and receive PSN, above them).
const PUBLISHED_STATE_FIELD: usize = 3;
const PUBLISHED_STATE_SHIFT: u32 = 40;
/// In that word: the receive PSN above the MTU, and above the state
/// whether the QP has a receive queue of its own.
const RQ_PSN_SHIFT: u32 = 16;
const HAS_RQ_SHIFT: u32 = 48;

const TAG_EMPTY: u64 = 0;
const TAG_LIVE: u64 = 1;
const TAG_TOMBSTONE: u64 = 2;

/// Tries of a compare-and-swap, or of a snapshot, that the other side
/// keeps beating (a live owner or peer lets one through long before).
const CAS_ATTEMPTS: u32 = 10_000;

/// Where a QP's receive queue lives in the owner's arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RingRef {
    /// Word offset of the ring in the arena.
    pub offset: u64,
    /// Entries the ring holds.
    pub capacity: u32,
    /// Scatter entries per receive WR.
    pub max_sge: u32,
}

/// A published QP, as a peer needs it to execute an operation on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpInfo {
    /// QP number (24 bits).
    pub qpn: u32,
    /// State, in the engine's encoding.
    pub state: u8,
    /// How many times the QP was reset (wrapping).
    pub incarnation: u16,
    /// Transport type, in the engine's encoding.
    pub qp_type: u8,
    /// Which path the QP uses, in the embedder's encoding.
    pub path: u8,
    /// RNR timer code it answers RNR NAKs with.
    pub min_rnr_timer: u8,
    /// Incoming READ/atomic operations it accepts at once.
    pub max_dest_rd_atomic: u8,
    /// Handle of its protection domain.
    pub pd: u64,
    /// Remote access flags (`ibv_access_flags`).
    pub access_flags: u32,
    /// The QP it is connected to.
    pub dest_qpn: u32,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Path MTU in bytes (at most 4096).
    pub mtu: u16,
    /// The PSN its responder was started at (`rq_psn` at RTR; 24 bits):
    /// a requester's first PSN must be this one, as on the wire.
    pub rq_psn: u32,
    /// Its own receive queue (`None`: it has none, or uses an SRQ).
    pub rq: Option<RingRef>,
}

impl QpInfo {
    fn encode(&self) -> [u64; FIELDS] {
        let small = u64::from(self.qp_type)
            | u64::from(self.path) << 8
            | u64::from(self.min_rnr_timer) << 16
            | u64::from(self.max_dest_rd_atomic) << 24
            | u64::from(self.access_flags) << 32;
        let rq = self.rq.unwrap_or_default();
        [
            small,
            self.pd,
            u64::from(self.dest_qpn) | u64::from(self.qkey) << 32,
            u64::from(self.mtu)
                | u64::from(self.rq_psn & 0xFF_FFFF) << RQ_PSN_SHIFT
                | u64::from(self.state) << PUBLISHED_STATE_SHIFT
                | u64::from(self.rq.is_some()) << HAS_RQ_SHIFT,
            rq.offset,
            u64::from(rq.capacity) | u64::from(rq.max_sge) << 32,
        ]
    }

    fn decode(qpn: u32, word: u64, fields: &[u64; FIELDS]) -> Self {
        let [small, pd, dest_qkey, mtu_rq, rq_offset, rq_sizes] = *fields;
        let rq = (mtu_rq >> HAS_RQ_SHIFT & 1 == 1).then_some(RingRef {
            offset: rq_offset,
            capacity: rq_sizes as u32,
            max_sge: (rq_sizes >> 32) as u32,
        });
        QpInfo {
            qpn,
            state: state_of(word),
            incarnation: incarnation_of(word),
            qp_type: small as u8,
            path: (small >> 8) as u8,
            min_rnr_timer: (small >> 16) as u8,
            max_dest_rd_atomic: (small >> 24) as u8,
            pd,
            access_flags: (small >> 32) as u32,
            dest_qpn: dest_qkey as u32,
            qkey: (dest_qkey >> 32) as u32,
            mtu: mtu_rq as u16,
            rq_psn: (mtu_rq >> RQ_PSN_SHIFT) as u32 & 0xFF_FFFF,
            rq,
        }
    }
}

/// Why the owner's publish did not go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpPublishError {
    /// The table holds its capacity of QPs.
    Full,
    /// A peer moved the QP to `current` since the owner last published it;
    /// nothing was published.
    StateChanged {
        /// The state the peer set.
        current: u8,
    },
}

impl From<Full> for QpPublishError {
    fn from(_: Full) -> Self {
        QpPublishError::Full
    }
}

impl fmt::Display for QpPublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QpPublishError::Full => f.write_str("QP table full"),
            QpPublishError::StateChanged { current } => {
                write!(f, "a peer moved the QP to state {current}")
            }
        }
    }
}

impl std::error::Error for QpPublishError {}

fn live_word(info: &QpInfo) -> u64 {
    u64::from(info.qpn) << 32
        | u64::from(info.incarnation) << 16
        | TAG_LIVE << 8
        | u64::from(info.state)
}

fn incarnation_of(word: u64) -> u16 {
    (word >> 16) as u16
}

fn tag(word: u64) -> u64 {
    word >> 8 & 0xFF
}

fn state_of(word: u64) -> u8 {
    word as u8
}

fn with_state(word: u64, state: u8) -> u64 {
    word & !0xFF | u64::from(state)
}

fn holds(word: u64, qpn: u32) -> bool {
    tag(word) == TAG_LIVE && (word >> 32) as u32 == qpn
}

/// One slot's words.
struct Entry<'a> {
    seq: &'a AtomicU64,
    /// What the owner writes under the seqlock.
    fields: &'a [AtomicU64; FIELDS],
    /// The fields and the state word after them, as readers read them.
    snapshot: &'a [AtomicU64; FIELDS + 1],
    state: &'a AtomicU64,
}

/// Where the owner's publish goes.
enum Place {
    Existing(usize),
    Free(usize),
}

/// A view of a QP table part of a region.
#[derive(Debug, Clone, Copy)]
pub struct QpTable<'a> {
    part: &'a [AtomicU64],
    /// Where the part starts in the region, in bytes.
    at: u64,
    capacity: usize,
    slots: usize,
}

impl<'a> QpTable<'a> {
    /// Words of a table part that holds `capacity` QPs (`None`: too big).
    pub fn words_for(capacity: usize) -> Option<usize> {
        table_slots(capacity)?
            .checked_mul(STRIDE)?
            .checked_add(HEADER)
    }

    /// A view of `part`, `at` bytes into its region, as a table of
    /// `capacity` QPs. A part too short for that capacity gives a table
    /// that finds nothing and takes nothing.
    pub fn new(part: &'a [AtomicU64], at: u64, capacity: usize) -> Self {
        let fits = Self::words_for(capacity).is_some_and(|words| words <= part.len());
        let slots = if fits {
            table_slots(capacity).unwrap_or(0)
        } else {
            0
        };
        QpTable {
            part,
            at,
            capacity,
            slots,
        }
    }

    /// Publishes `info`, replacing the entry of the same QPN if there is
    /// one (see the module doc for how a state set by a peer is kept).
    /// Owner only, one change at a time.
    pub fn publish(&self, info: &QpInfo) -> Result<(), QpPublishError> {
        match self.place_for(info.qpn).ok_or(Full)? {
            Place::Existing(slot) => self.update(slot, info),
            Place::Free(slot) => Ok(self.insert(slot, info)?),
        }
    }

    /// Withdraws the QP `qpn`, saying whether it was published and which
    /// pages the owner may punch. Owner only. Peers' state changes to it
    /// fail from then on.
    pub fn withdraw(&self, qpn: u32) -> Withdrawal {
        let slot = match self.place_for(qpn) {
            Some(Place::Existing(slot)) => slot,
            _ => {
                let ended_at = self.probe_end(qpn);
                return Withdrawal::missed(self.area(), ended_at, |s| self.is_empty(s));
            }
        };
        let word = |s| self.entry(s).map(|e| e.state.load(Ordering::Relaxed));
        let run = clearable_run(
            slot,
            self.slots,
            |s| self.is_empty(s),
            |s| word(s).map(tag) == Some(TAG_TOMBSTONE),
        );
        if run.is_empty() {
            self.store_state(slot, TAG_TOMBSTONE << 8);
        }
        for &cleared in &run {
            self.store_state(cleared, TAG_EMPTY);
        }
        if let Some(live) = self.part.get(LIVE_COUNT) {
            live.fetch_sub(1, Ordering::Relaxed);
        }
        Withdrawal::cleared(self.area(), slot, run, |s| self.is_empty(s))
    }

    fn area(&self) -> SlotArea {
        SlotArea::of_table(self.at, HEADER, STRIDE, self.slots)
    }

    /// Whether `slot` holds no entry (its state word, as the owner reads
    /// it).
    fn is_empty(&self, slot: usize) -> bool {
        let word = self.entry(slot).map(|e| e.state.load(Ordering::Relaxed));
        word.map(tag) == Some(TAG_EMPTY)
    }

    /// The published QP `qpn`, if any: a snapshot whose state and fields
    /// were current together. `None` as well when no consistent snapshot
    /// could be had within a second (an owner that died mid-write).
    pub fn lookup(&self, qpn: u32) -> Option<QpInfo> {
        for attempt in 0..CAS_ATTEMPTS {
            let (slot, _) = self.find(qpn)?;
            let entry = self.entry(slot)?;
            let snapshot = seqlock::read(entry.seq, entry.snapshot)?;
            let [fields @ .., word] = snapshot;
            if holds(word, qpn) {
                return Some(QpInfo::decode(qpn, word, &fields));
            }
            // Withdrawn, or the slot reused, since the probe: look again.
            seqlock::back_off(attempt);
        }
        None
    }

    /// Moves QP `qpn`, in incarnation `incarnation`, to `state`, whatever
    /// state it is in; for peers (a requester that finds a fault moves the
    /// target to the error state). Returns whether the QP is published in
    /// that incarnation and now in `state`.
    pub fn set_state(&self, qpn: u32, incarnation: u16, state: u8) -> bool {
        for attempt in 0..CAS_ATTEMPTS {
            let Some((slot, word)) = self.find(qpn) else {
                return false;
            };
            if incarnation_of(word) != incarnation {
                return false;
            }
            if state_of(word) == state {
                return true;
            }
            let Some(entry) = self.entry(slot) else {
                return false;
            };
            let moved = entry.state.compare_exchange(
                word,
                with_state(word, state),
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            if moved.is_ok() {
                return true;
            }
            seqlock::back_off(attempt);
        }
        false
    }

    fn insert(&self, slot: usize, info: &QpInfo) -> Result<(), Full> {
        let live = self.part.get(LIVE_COUNT).ok_or(Full)?;
        if live.load(Ordering::Relaxed) >= self.capacity as u64 {
            return Err(Full);
        }
        let entry = self.entry(slot).ok_or(Full)?;
        let clock = self.part.get(CLOCK).ok_or(Full)?;
        let even = seqlock::begin(entry.seq, clock);
        seqlock::store(entry.fields, &info.encode());
        // Peers never write an empty or tombstone word, so a store is
        // enough; release publishes the fields with it to the probe.
        entry.state.store(live_word(info), Ordering::Release);
        seqlock::end(entry.seq, clock, even);
        live.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Rewrites an existing entry. The state word is swapped inside the
    /// fields' seqlock window, so a reader's seqlocked snapshot of fields
    /// and state word has the fields that go with that state.
    fn update(&self, slot: usize, info: &QpInfo) -> Result<(), QpPublishError> {
        let entry = self.entry(slot).ok_or(QpPublishError::Full)?;
        let clock = self.part.get(CLOCK).ok_or(QpPublishError::Full)?;
        let old = entry.fields.each_ref().map(|w| w.load(Ordering::Relaxed));
        let last_published = (old[PUBLISHED_STATE_FIELD] >> PUBLISHED_STATE_SHIFT) as u8;
        let new = live_word(info);
        let mut current = entry.state.load(Ordering::Acquire);
        for attempt in 0..CAS_ATTEMPTS {
            let seen = state_of(current);
            let same_incarnation = incarnation_of(current) == info.incarnation;
            if same_incarnation && seen != last_published && seen != info.state {
                return Err(QpPublishError::StateChanged { current: seen });
            }
            let even = seqlock::begin(entry.seq, clock);
            seqlock::store(entry.fields, &info.encode());
            let swapped =
                entry
                    .state
                    .compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire);
            if let Err(now) = swapped {
                // A peer changed the state meanwhile: put the fields
                // back, and judge the state it set.
                seqlock::store(entry.fields, &old);
                current = now;
            }
            seqlock::end(entry.seq, clock, even);
            if swapped.is_ok() {
                return Ok(());
            }
            seqlock::back_off(attempt);
        }
        Err(QpPublishError::StateChanged {
            current: state_of(current),
        })
    }

    /// The slot holding `qpn` and its state word, by the peers' probe.
    fn find(&self, qpn: u32) -> Option<(usize, u64)> {
        for slot in probe(qpn, self.slots) {
            let word = self.entry(slot)?.state.load(Ordering::Acquire);
            if tag(word) == TAG_EMPTY {
                return None;
            }
            if holds(word, qpn) {
                return Some((slot, word));
            }
        }
        None
    }

    /// The empty slot the probe for `qpn` ends at, if it ends at one.
    fn probe_end(&self, qpn: u32) -> Option<usize> {
        probe(qpn, self.slots).find(|&slot| self.is_empty(slot))
    }

    /// The owner's probe: the slot holding `qpn`, else the first free one.
    fn place_for(&self, qpn: u32) -> Option<Place> {
        let mut free = None;
        for slot in probe(qpn, self.slots) {
            let Some(entry) = self.entry(slot) else { break };
            let word = entry.state.load(Ordering::Relaxed);
            match tag(word) {
                TAG_EMPTY => {
                    free.get_or_insert(slot);
                    break;
                }
                TAG_TOMBSTONE => {
                    free.get_or_insert(slot);
                }
                _ if holds(word, qpn) => return Some(Place::Existing(slot)),
                _ => {}
            }
        }
        free.map(Place::Free)
    }

    fn store_state(&self, slot: usize, word: u64) {
        if let Some(entry) = self.entry(slot) {
            entry.state.store(word, Ordering::Release);
        }
    }

    fn entry(&self, slot: usize) -> Option<Entry<'a>> {
        let start = slot.checked_mul(STRIDE)?.checked_add(HEADER)?;
        let words = self.part.get(start..)?.get(..STRIDE)?;
        let (seq, fields) = seqlock::split::<FIELDS>(words.get(SEQ..)?)?;
        let (_, snapshot) = seqlock::split::<{ FIELDS + 1 }>(words.get(SEQ..)?)?;
        Some(Entry {
            seq,
            fields,
            snapshot,
            state: words.get(STATE)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::same_host::seqlock::wait_for_reads;
    use std::sync::atomic::AtomicBool;

    const RTR: u8 = 3;
    const RTS: u8 = 4;
    const ERR: u8 = 6;
    const RESET: u8 = 0;

    fn part(capacity: usize) -> Vec<AtomicU64> {
        let words = QpTable::words_for(capacity).unwrap();
        (0..words).map(|_| AtomicU64::new(0)).collect()
    }

    fn qp(qpn: u32, state: u8) -> QpInfo {
        QpInfo {
            qpn,
            state,
            incarnation: 0,
            qp_type: 2,
            path: 1,
            min_rnr_timer: 12,
            max_dest_rd_atomic: 16,
            pd: 0xABCD,
            access_flags: 0xE,
            dest_qpn: qpn ^ 0xFF,
            qkey: 0x1111_2222,
            mtu: 4096,
            rq_psn: 0xAB_CDEF,
            rq: Some(RingRef {
                offset: 64,
                capacity: 128,
                max_sge: 4,
            }),
        }
    }

    #[test]
    fn published_qps_round_trip_and_withdrawn_ones_are_gone() {
        let words = part(4);
        let table = QpTable::new(&words, 0, 4);
        for qpn in 0x1000..0x1004 {
            table.publish(&qp(qpn, RTS)).unwrap();
        }
        assert_eq!(table.publish(&qp(0x2000, RTS)), Err(QpPublishError::Full));
        let no_rq = QpInfo {
            rq: None,
            ..qp(0x1001, RTR)
        };
        table.publish(&no_rq).unwrap();
        assert_eq!(table.lookup(0x1000), Some(qp(0x1000, RTS)));
        assert_eq!(table.lookup(0x1001), Some(no_rq));
        assert!(table.withdraw(0x1000).found);
        assert!(!table.withdraw(0x1000).found);
        assert_eq!(table.lookup(0x1000), None);
        assert!(!table.set_state(0x1000, 0, ERR));
        table.publish(&qp(0x2000, RTS)).unwrap();
        assert_eq!(table.lookup(0x2000), Some(qp(0x2000, RTS)));
    }

    #[test]
    fn a_reset_qp_starts_afresh_whatever_a_peer_found_in_the_old_one() {
        let words = part(2);
        let table = QpTable::new(&words, 0, 2);
        table.publish(&qp(7, RTS)).unwrap();
        // A peer fails the QP, and the owner resets it before it hears:
        // the reset goes through, a new incarnation.
        assert!(table.set_state(7, 0, ERR));
        let reset = QpInfo {
            incarnation: 1,
            ..qp(7, RESET)
        };
        table.publish(&reset).unwrap();
        let again = QpInfo {
            incarnation: 1,
            ..qp(7, RTS)
        };
        table.publish(&again).unwrap();
        assert_eq!(table.lookup(7), Some(again));
        // A peer that found the old incarnation cannot touch the new one.
        assert!(!table.set_state(7, 0, ERR));
        assert_eq!(table.lookup(7).map(|q| q.state), Some(RTS));
        assert!(table.set_state(7, 1, ERR));
    }

    #[test]
    fn a_state_set_by_a_peer_is_kept_until_the_owner_adopts_it() {
        let words = part(2);
        let table = QpTable::new(&words, 0, 2);
        table.publish(&qp(7, RTS)).unwrap();
        assert!(table.set_state(7, 0, ERR));
        assert_eq!(table.lookup(7).map(|q| q.state), Some(ERR));
        // The owner, unaware, publishes a change: refused, nothing written.
        let changed = QpInfo {
            mtu: 1024,
            ..qp(7, RTS)
        };
        assert_eq!(
            table.publish(&changed),
            Err(QpPublishError::StateChanged { current: ERR })
        );
        assert_eq!(table.lookup(7), Some(qp(7, ERR)));
        // It adopts the error state, then goes on.
        table.publish(&qp(7, ERR)).unwrap();
        table.publish(&qp(7, RESET)).unwrap();
        assert_eq!(table.lookup(7), Some(qp(7, RESET)));
    }

    #[test]
    fn a_short_or_corrupt_part_finds_nothing_and_does_not_panic() {
        let words = part(4);
        let short = QpTable::new(&words[..20], 0, 4);
        assert_eq!(short.publish(&qp(1, RTS)), Err(QpPublishError::Full));
        assert_eq!(short.lookup(1), None);
        assert!(!short.set_state(1, 0, ERR));
        for (i, w) in words.iter().enumerate() {
            w.store(0x5555_5555_5555_5555 ^ (i as u64) << 1, Ordering::Relaxed);
        }
        let table = QpTable::new(&words, 0, 4);
        for qpn in 0..32 {
            let _ = table.lookup(qpn);
            let _ = table.set_state(qpn, 0, ERR);
        }
    }

    /// QP 42 with fields that all carry `n`, in RTR for even `n`, RTS for
    /// odd.
    fn numbered(n: u64) -> QpInfo {
        let rq = RingRef {
            offset: n,
            capacity: 1,
            max_sge: 1,
        };
        QpInfo {
            state: if n.is_multiple_of(2) { RTR } else { RTS },
            pd: n,
            dest_qpn: n as u32,
            mtu: n as u16,
            rq_psn: n as u32 & 0xFF_FFFF,
            rq: Some(rq),
            ..qp(42, 0)
        }
    }

    /// The owner keeps republishing a QP with fields that all carry one
    /// number and moving it between RTR and RTS; readers must see fields
    /// that agree with each other and with the state; a peer moves it to
    /// the error state once, which the owner must notice and the readers
    /// must then keep seeing.
    #[test]
    fn readers_and_a_peer_racing_the_owner_see_consistent_entries() {
        let words = part(4);
        let table = QpTable::new(&words, 0, 4);
        table.publish(&numbered(0)).unwrap();
        let errored = AtomicBool::new(false);
        let done = AtomicBool::new(false);
        let reads = [AtomicU64::new(0)];
        std::thread::scope(|scope| {
            scope.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    // Read before the lookup: once set, the lookup must
                    // see the error state.
                    let was_errored = errored.load(Ordering::SeqCst);
                    let info = table.lookup(42).expect("always published");
                    let n = info.pd;
                    assert_eq!(u64::from(info.dest_qpn), n & 0xFFFF_FFFF, "{info:?}");
                    assert_eq!(u64::from(info.mtu), n & 0xFFFF, "{info:?}");
                    assert_eq!(u64::from(info.rq_psn), n & 0xFF_FFFF, "{info:?}");
                    assert_eq!(info.rq.map(|r| r.offset), Some(n), "{info:?}");
                    if was_errored {
                        assert_eq!(info.state, ERR);
                    } else if info.state != ERR {
                        assert_eq!(
                            info.state,
                            if n.is_multiple_of(2) { RTR } else { RTS },
                            "{info:?}"
                        );
                    }
                    reads[0].fetch_add(1, Ordering::Relaxed);
                }
            });
            scope.spawn(|| {
                while table.lookup(42).is_none_or(|info| info.pd < 1_000) {
                    std::thread::yield_now();
                }
                assert!(table.set_state(42, 0, ERR));
                errored.store(true, Ordering::SeqCst);
            });
            let mut n = 0u64;
            let refused = loop {
                n += 1;
                let info = numbered(n);
                match table.publish(&info) {
                    Ok(()) => wait_for_reads(&reads),
                    Err(refused) => break refused,
                }
            };
            assert_eq!(refused, QpPublishError::StateChanged { current: ERR });
            while !errored.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            for _ in 0..1_000 {
                assert_eq!(table.lookup(42).map(|q| q.state), Some(ERR));
            }
            done.store(true, Ordering::Relaxed);
        });
    }
}
