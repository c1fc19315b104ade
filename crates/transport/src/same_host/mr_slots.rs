//! The published MR table: what a peer checks an rkey against.
//!
//! Open addressing by key (see [`super::probing`]), each entry under its
//! own seqlock (see [`super::seqlock`]). Only the owner writes entries,
//! one write at a time (it serialises its table changes); peers only read
//! them.
//!
//! A peer copies into an MR after looking it up, so the owner must not
//! reuse the memory of an MR it withdrew while a peer may still be
//! copying into it. Peers bracket each lookup-and-copy with
//! [`MrTable::begin_access`]; after withdrawing, the owner calls
//! [`MrTable::wait_idle`], which waits for every access that started
//! before the withdrawal (see [`super::accessors`]; an access whose count
//! the owner does not see is ordered after the withdrawal by the SeqCst
//! fences on both sides, so its lookup misses the MR). A peer stopped
//! mid-access keeps the owner waiting until it runs on or dies; only an
//! access whose process the owner cannot judge makes `wait_idle` give
//! up, which the owner must treat as "possibly still in use".
//!
//! A withdrawal that leaves a page of slots empty gives the page back to
//! the kernel (see [`super::vacant_pages`]).
//!
//! Part layout (words): the accessors' words, `live`, the seqlock clock
//! (see [`super::seqlock`]), spare words to a cache line, then per slot
//! `[seq, tag<<32|key, pd, addr, length, iova, access, spare]`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::accessors::{self, AccessGuard, Accessors};
use super::full::Full;
use super::probing::{clearable_run, probe, table_slots};
use super::seqlock;
use super::vacant_pages::{SlotArea, Withdrawal};

const LIVE_COUNT: usize = accessors::WORDS;
const CLOCK: usize = LIVE_COUNT + 1;
/// Slots start on a cache line (the part does), so that none straddles
/// two pages.
const HEADER: usize = (LIVE_COUNT + 2).next_multiple_of(STRIDE);
const STRIDE: usize = 8;
const FIELDS: usize = 6;

const TAG_EMPTY: u64 = 0;
const TAG_LIVE: u64 = 1;
const TAG_TOMBSTONE: u64 = 2;

/// A published memory region, as a peer needs it to check an access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MrInfo {
    /// The key (lkey and rkey are the same).
    pub key: u32,
    /// Handle of its protection domain.
    pub pd: u64,
    /// Start address in the owner's address space.
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// The address peers name it by (equals `addr` unless registered with
    /// an IOVA).
    pub iova: u64,
    /// Access flags (`ibv_access_flags`).
    pub access: u32,
}

impl MrInfo {
    fn encode(&self) -> [u64; FIELDS] {
        [
            TAG_LIVE << 32 | u64::from(self.key),
            self.pd,
            self.addr,
            self.length,
            self.iova,
            u64::from(self.access),
        ]
    }

    fn decode(fields: &[u64; FIELDS]) -> Self {
        let [tag_key, pd, addr, length, iova, access] = *fields;
        MrInfo {
            key: tag_key as u32,
            pd,
            addr,
            length,
            iova,
            access: access as u32,
        }
    }
}

fn tag(tag_key: u64) -> u64 {
    tag_key >> 32
}

/// A view of an MR table part of a region.
#[derive(Debug, Clone, Copy)]
pub struct MrTable<'a> {
    part: &'a [AtomicU64],
    /// Where the part starts in the region, in bytes.
    at: u64,
    capacity: usize,
    slots: usize,
}

impl<'a> MrTable<'a> {
    /// Words of a table part that holds `capacity` MRs (`None`: too big).
    pub fn words_for(capacity: usize) -> Option<usize> {
        table_slots(capacity)?
            .checked_mul(STRIDE)?
            .checked_add(HEADER)
    }

    /// A view of `part`, `at` bytes into its region, as a table of
    /// `capacity` MRs. A part too short for that capacity gives a table
    /// that finds nothing and takes nothing.
    pub fn new(part: &'a [AtomicU64], at: u64, capacity: usize) -> Self {
        let fits = Self::words_for(capacity).is_some_and(|words| words <= part.len());
        let slots = if fits {
            table_slots(capacity).unwrap_or(0)
        } else {
            0
        };
        MrTable {
            part,
            at,
            capacity,
            slots,
        }
    }

    /// Publishes `info`, replacing the entry with the same key if there is
    /// one. Owner only.
    pub fn publish(&self, info: &MrInfo) -> Result<(), Full> {
        let mut free = None;
        for slot in probe(info.key, self.slots) {
            let Some(tag_key) = self.tag_key(slot) else {
                break;
            };
            match tag(tag_key) {
                TAG_LIVE if tag_key as u32 == info.key => {
                    self.write(slot, &info.encode());
                    return Ok(());
                }
                TAG_EMPTY => {
                    free.get_or_insert(slot);
                    break;
                }
                TAG_TOMBSTONE => {
                    free.get_or_insert(slot);
                }
                _ => {}
            }
        }
        let live = self.part.get(LIVE_COUNT).ok_or(Full)?;
        let slot = free.ok_or(Full)?;
        if live.load(Ordering::Relaxed) >= self.capacity as u64 {
            return Err(Full);
        }
        self.write(slot, &info.encode());
        live.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Withdraws the MR with `key`, saying whether it was published and
    /// which pages the owner may punch. Owner only. Follow with
    /// [`wait_idle`](Self::wait_idle) before the memory is reused.
    pub fn withdraw(&self, key: u32) -> Withdrawal {
        let slot = match self.find_own(key) {
            Ok(slot) => slot,
            Err(ended_at) => {
                return Withdrawal::missed(self.area(), ended_at, |s| self.is_empty(s))
            }
        };
        let run = clearable_run(
            slot,
            self.slots,
            |s| self.is_empty(s),
            |s| self.tag_key(s).map(tag) == Some(TAG_TOMBSTONE),
        );
        if run.is_empty() {
            self.write(slot, &[TAG_TOMBSTONE << 32, 0, 0, 0, 0, 0]);
        }
        for &cleared in &run {
            self.write(cleared, &[TAG_EMPTY; FIELDS]);
        }
        if let Some(live) = self.part.get(LIVE_COUNT) {
            live.fetch_sub(1, Ordering::Relaxed);
        }
        Withdrawal::cleared(self.area(), slot, run, |s| self.is_empty(s))
    }

    fn area(&self) -> SlotArea {
        SlotArea::of_table(self.at, HEADER, STRIDE, self.slots)
    }

    /// Whether `slot` holds no entry (owner only, as [`Self::tag_key`]).
    fn is_empty(&self, slot: usize) -> bool {
        self.tag_key(slot).map(tag) == Some(TAG_EMPTY)
    }

    /// The published MR with `key`, if any. `None` as well when an entry
    /// on the way could not be read consistently within a second (an
    /// owner that died mid-write).
    pub fn lookup(&self, key: u32) -> Option<MrInfo> {
        for slot in probe(key, self.slots) {
            let (seq, fields) = self.entry(slot)?;
            let fields = seqlock::read(seq, fields)?;
            match tag(fields[0]) {
                TAG_EMPTY => return None,
                TAG_LIVE if fields[0] as u32 == key => return Some(MrInfo::decode(&fields)),
                _ => {}
            }
        }
        None
    }

    /// Starts an access by process `pid` (our own): a lookup and the
    /// copies into the MR it found. The owner's
    /// [`wait_idle`](Self::wait_idle) waits for it to end.
    pub fn begin_access(&self, pid: i32) -> AccessGuard<'a> {
        Accessors::new(self.part).begin(pid)
    }

    /// Waits until every access that might have seen an MR withdrawn
    /// before this call has ended (or its process died): a live peer's
    /// however long it takes (`waiting` is told its pid past `patience`),
    /// one the owner cannot judge `patience` at most
    /// ([`Accessors::wait_idle`]); returns whether all ended. Owner only,
    /// one call at a time.
    pub fn wait_idle(&self, patience: Duration, waiting: &mut dyn FnMut(i32)) -> bool {
        Accessors::new(self.part).wait_idle(patience, waiting)
    }

    fn entry(&self, slot: usize) -> Option<(&'a AtomicU64, &'a [AtomicU64; FIELDS])> {
        let start = slot.checked_mul(STRIDE)?.checked_add(HEADER)?;
        seqlock::split(self.part.get(start..)?)
    }

    /// The tag and key word of a slot, read directly: only for the owner,
    /// the only writer, which sees its own writes.
    fn tag_key(&self, slot: usize) -> Option<u64> {
        let (_, fields) = self.entry(slot)?;
        Some(fields[0].load(Ordering::Relaxed))
    }

    /// The slot holding `key`; else the empty slot the probe ended at, if
    /// it ended at one.
    fn find_own(&self, key: u32) -> Result<usize, Option<usize>> {
        for slot in probe(key, self.slots) {
            let tag_key = self.tag_key(slot).ok_or(None)?;
            match tag(tag_key) {
                TAG_EMPTY => return Err(Some(slot)),
                TAG_LIVE if tag_key as u32 == key => return Ok(slot),
                _ => {}
            }
        }
        Err(None)
    }

    fn write(&self, slot: usize, values: &[u64; FIELDS]) {
        if let (Some((seq, fields)), Some(clock)) = (self.entry(slot), self.part.get(CLOCK)) {
            seqlock::write(seq, clock, fields, values);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::same_host::liveness::own_pid;
    use crate::same_host::seqlock::wait_for_reads;
    use std::sync::atomic::AtomicBool;

    fn part(capacity: usize) -> Vec<AtomicU64> {
        let words = MrTable::words_for(capacity).unwrap();
        (0..words).map(|_| AtomicU64::new(0)).collect()
    }

    fn mr(key: u32) -> MrInfo {
        MrInfo {
            key,
            pd: 7,
            addr: 0x1000 * u64::from(key),
            length: 4096,
            iova: 0x1000 * u64::from(key),
            access: 0xF,
        }
    }

    #[test]
    fn published_mrs_are_found_and_withdrawn_ones_are_not() {
        let words = part(8);
        let table = MrTable::new(&words, 0, 8);
        for key in 1..=8 {
            table.publish(&mr(key)).unwrap();
        }
        assert_eq!(table.publish(&mr(9)), Err(Full));
        for key in 1..=8 {
            assert_eq!(table.lookup(key), Some(mr(key)));
        }
        assert_eq!(table.lookup(9), None);
        assert!(table.withdraw(3).found);
        assert!(!table.withdraw(3).found);
        assert_eq!(table.lookup(3), None);
        for key in (1..=8).filter(|&k| k != 3) {
            assert_eq!(table.lookup(key), Some(mr(key)), "key {key}");
        }
        table.publish(&mr(9)).unwrap();
        assert_eq!(table.lookup(9), Some(mr(9)));
    }

    #[test]
    fn publishing_a_key_again_replaces_it() {
        let words = part(2);
        let table = MrTable::new(&words, 0, 2);
        table.publish(&mr(5)).unwrap();
        let bigger = MrInfo {
            length: 8192,
            ..mr(5)
        };
        table.publish(&bigger).unwrap();
        assert_eq!(table.lookup(5), Some(bigger));
        table.publish(&mr(6)).unwrap();
    }

    #[test]
    fn churn_keeps_every_live_key_reachable() {
        let words = part(16);
        let table = MrTable::new(&words, 0, 16);
        let mut live = std::collections::BTreeSet::new();
        let mut rng = fastrand::Rng::with_seed(10);
        for _ in 0..5_000 {
            let key = rng.u32(0..64);
            if live.contains(&key) {
                assert!(table.withdraw(key).found);
                live.remove(&key);
            } else if live.len() < 16 {
                table.publish(&mr(key)).unwrap();
                live.insert(key);
            }
            for key in 0..64 {
                assert_eq!(
                    table.lookup(key).is_some(),
                    live.contains(&key),
                    "key {key}"
                );
            }
        }
    }

    #[test]
    fn a_short_or_corrupt_part_finds_nothing_and_does_not_panic() {
        let words = part(4);
        let short = MrTable::new(&words[..5], 0, 4);
        assert_eq!(short.publish(&mr(1)), Err(Full));
        assert_eq!(short.lookup(1), None);
        assert!(!short.withdraw(1).found);
        drop(short.begin_access(own_pid()));
        assert!(short.wait_idle(Duration::ZERO, &mut |_| {}));
        // Garbage everywhere: lookups end, and find nothing sensible.
        for (i, w) in words.iter().enumerate() {
            w.store(0xDEAD_BEEF_0000_0000 | (i as u64 * 2), Ordering::Relaxed);
        }
        let table = MrTable::new(&words, 0, 4);
        for key in 0..32 {
            let _ = table.lookup(key);
        }
    }

    /// Readers look an MR up and "copy" into it (mark it in use) inside an
    /// access; the owner withdraws each MR and, once `wait_idle` says so,
    /// no reader may be copying into it any more.
    #[test]
    fn no_access_outlives_wait_idle_after_a_withdrawal() {
        const KEYS: u32 = 64;
        let words = part(KEYS as usize);
        let table = MrTable::new(&words, 0, KEYS as usize);
        for key in 0..KEYS {
            table.publish(&mr(key)).unwrap();
        }
        let in_use: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            for reader in 0..2u32 {
                let (table, in_use, done) = (&table, &in_use, &done);
                scope.spawn(move || {
                    let mut key = reader;
                    while !done.load(Ordering::Relaxed) {
                        key = (key + 1) % KEYS;
                        let access = table.begin_access(own_pid());
                        if table.lookup(key).is_some() {
                            in_use[key as usize].fetch_add(1, Ordering::SeqCst);
                            std::thread::yield_now();
                            in_use[key as usize].fetch_sub(1, Ordering::SeqCst);
                        }
                        drop(access);
                    }
                });
            }
            for key in 0..KEYS {
                assert!(table.withdraw(key).found);
                assert!(table.wait_idle(Duration::from_secs(30), &mut |_| {}));
                assert_eq!(in_use[key as usize].load(Ordering::SeqCst), 0, "key {key}");
            }
            done.store(true, Ordering::Relaxed);
        });
    }

    #[test]
    fn readers_never_see_a_torn_entry() {
        let words = part(4);
        let table = MrTable::new(&words, 0, 4);
        table
            .publish(&MrInfo {
                key: 9,
                ..Default::default()
            })
            .unwrap();
        let done = AtomicBool::new(false);
        // One reader: on two cores, pacing a writer by more readers than
        // cores waits for the scheduler.
        let reads = [AtomicU64::new(0)];
        std::thread::scope(|scope| {
            for reads in &reads {
                let (table, done) = (&table, &done);
                scope.spawn(move || {
                    while !done.load(Ordering::Relaxed) {
                        let info = table.lookup(9).expect("always published");
                        let n = info.pd;
                        assert_eq!((info.addr, info.length, info.iova), (n, n, n), "{info:?}");
                        assert_eq!(u64::from(info.access), n & 0xFFFF_FFFF);
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            for n in 0..20_000u64 {
                let info = MrInfo {
                    key: 9,
                    pd: n,
                    addr: n,
                    length: n,
                    iova: n,
                    access: n as u32,
                };
                table.publish(&info).unwrap();
                wait_for_reads(&reads);
            }
            done.store(true, Ordering::Relaxed);
        });
    }
}
