//! A receive queue in shared memory: the owner posts receive WRs, peers
//! that deliver SENDs (or RDMA WRITEs with immediate) claim them.
//!
//! Single producer (the owner), many consumers (its peers). The ring
//! starts with two index words, the producer's and the consumer's, which
//! only grow (64 bits: they never wrap in practice); entry `i` lives in
//! slot `i % capacity`. A consumer reads the entry at the consumer index
//! first, then moves the index past it by compare-and-swap; only a
//! successful swap makes the read valid, because the producer reuses a
//! slot only after the consumer index has passed it, and a consumer that
//! lost the race throws its read away. The owner takes every unclaimed
//! entry at once with [`RecvRing::claim_all`] when its QP enters the error
//! state, to flush them.
//!
//! Layout (words, from the ring's offset in the arena): `[producer,
//! consumer]`, then per slot `[wr_id, num_sge, (addr, length<<32|lkey) x
//! max_sge]`. A peer finds the ring through the QP's published
//! [`RingRef`], so everything read from it is bounds-checked.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use softverbs_engine::{Sge, SgeList};

use super::full::Full;
use super::qp_slots::RingRef;
use super::seqlock::back_off;

const PRODUCER: usize = 0;
const CONSUMER: usize = 1;
const HEADER: usize = 2;
const WR_ID: usize = 0;
const NUM_SGE: usize = 1;
const SGES: usize = 2;

/// Claims that lose the race before a consumer gives up (every lost race
/// is another consumer's progress, so this only bounds a corrupt ring).
const CLAIM_ATTEMPTS: u32 = 10_000;

/// A receive WR as the owner posted it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecvEntry {
    /// The owner's work request id.
    pub wr_id: u64,
    /// Where the message goes, in the owner's memory (the common few in
    /// place: reading an entry allocates nothing).
    pub sges: SgeList,
}

/// A view of one receive ring in an arena.
#[derive(Debug, Clone, Copy)]
pub struct RecvRing<'a> {
    words: &'a [AtomicU64],
    capacity: u64,
    max_sge: usize,
    stride: usize,
}

impl<'a> RecvRing<'a> {
    /// Words a ring of `capacity` entries of `max_sge` SGEs takes in the
    /// arena (`None`: too big, or no capacity).
    pub fn words_for(capacity: u32, max_sge: u32) -> Option<u64> {
        if capacity == 0 {
            return None;
        }
        let stride = u64::from(max_sge)
            .checked_mul(2)?
            .checked_add(SGES as u64)?;
        stride
            .checked_mul(u64::from(capacity))?
            .checked_add(HEADER as u64)
    }

    /// The ring `ring` names in `arena`, or `None` if it does not lie
    /// inside it (a corrupt or stale descriptor).
    pub fn new(arena: &'a [AtomicU64], ring: RingRef) -> Option<Self> {
        let len = usize::try_from(Self::words_for(ring.capacity, ring.max_sge)?).ok()?;
        let start = usize::try_from(ring.offset).ok()?;
        let words = arena.get(start..start.checked_add(len)?)?;
        let max_sge = usize::try_from(ring.max_sge).ok()?;
        Some(RecvRing {
            words,
            capacity: u64::from(ring.capacity),
            max_sge,
            stride: SGES + 2 * max_sge,
        })
    }

    /// Makes the ring empty with both indices at `base`: for the owner,
    /// before it publishes a ring on an extent that may hold anything (a
    /// freed ring's slots). A base no earlier ring of the region used
    /// keeps every index, and so every receive WR's number, unique.
    pub fn start_at(&self, base: u64) {
        for index in [CONSUMER, PRODUCER] {
            if let Some(word) = self.words.get(index) {
                word.store(base, Ordering::Release);
            }
        }
    }

    /// Posts a receive WR; its index, which names it for good (indices
    /// only grow). Owner only. `Err(Full)` when every slot holds an
    /// unclaimed entry, or when `sges` is longer than the ring's `max_sge`
    /// (the verbs layer refuses that earlier).
    pub fn push(&self, wr_id: u64, sges: &[Sge]) -> Result<u64, Full> {
        let (producer, consumer) = self.indices().ok_or(Full)?;
        let next = producer.load(Ordering::Relaxed);
        let claimed = consumer.load(Ordering::Acquire);
        if next.wrapping_sub(claimed) >= self.capacity || sges.len() > self.max_sge {
            return Err(Full);
        }
        let slot = self.slot(next).ok_or(Full)?;
        let mut words = slot.iter();
        let mut put = |value: u64| words.next().map(|w| w.store(value, Ordering::Relaxed));
        put(wr_id);
        put(sges.len() as u64);
        for sge in sges {
            put(sge.addr);
            put(u64::from(sge.length) << 32 | u64::from(sge.lkey));
        }
        producer.store(next.wrapping_add(1), Ordering::Release);
        Ok(next)
    }

    /// Claims the oldest unclaimed entry: its index and contents. For
    /// peers. `None` when the ring is empty, or holds a corrupt entry
    /// (more SGEs than `max_sge`) at its head.
    pub fn claim(&self) -> Option<(u64, RecvEntry)> {
        for attempt in 0..CLAIM_ATTEMPTS {
            let (index, entry) = self.peek()?;
            if self.claim_at(index) {
                return Some((index, entry));
            }
            back_off(attempt);
        }
        None
    }

    /// The oldest unclaimed entry and its index, without claiming it
    /// (`claim_at` claims it afterwards, if it is still the oldest).
    pub fn peek(&self) -> Option<(u64, RecvEntry)> {
        let (producer, consumer) = self.indices()?;
        let index = consumer.load(Ordering::Acquire);
        let pending = producer.load(Ordering::Acquire).wrapping_sub(index);
        if pending == 0 || pending > self.capacity {
            return None;
        }
        Some((index, self.entry(index)?))
    }

    /// Claims entry `index` if it is still the oldest unclaimed one (a
    /// `claim_all` or another consumer may have taken it since `peek`).
    /// Release: the reads of the entry come before the producer, seeing
    /// the index moved, rewrites the slot.
    pub fn claim_at(&self, index: u64) -> bool {
        let Some((_, consumer)) = self.indices() else {
            return false;
        };
        consumer
            .compare_exchange(
                index,
                index.wrapping_add(1),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// The index of the oldest unclaimed entry, if one is waiting (read
    /// in one go: the index is below the producer index, so
    /// [`claim_at`](Self::claim_at) can only claim a posted entry).
    pub fn oldest_unclaimed(&self) -> Option<u64> {
        let (producer, consumer) = self.indices()?;
        let index = consumer.load(Ordering::Acquire);
        let pending = producer.load(Ordering::Acquire).wrapping_sub(index);
        (pending != 0 && pending <= self.capacity).then_some(index)
    }

    /// Whether an unclaimed entry is waiting.
    pub fn peek_available(&self) -> bool {
        self.oldest_unclaimed().is_some()
    }

    /// Takes every unclaimed entry at once, for the owner (flushing a QP
    /// in the error state): their indices, whose contents
    /// [`entry`](Self::entry) reads. Peers claim nothing from then on
    /// until the owner pushes again.
    pub fn claim_all(&self) -> Range<u64> {
        let Some((producer, consumer)) = self.indices() else {
            return 0..0;
        };
        let end = producer.load(Ordering::Relaxed);
        let start = consumer.fetch_max(end, Ordering::AcqRel);
        if start >= end {
            return end..end;
        }
        // A corrupt consumer index far behind: only the ring's worth of
        // entries can exist.
        start.max(end.saturating_sub(self.capacity))..end
    }

    /// The entry at `index`, as last written: valid for an index the
    /// caller claimed (or, for the owner, took with `claim_all`).
    pub fn entry(&self, index: u64) -> Option<RecvEntry> {
        let slot = self.slot(index)?;
        let num_sge = usize::try_from(slot.get(NUM_SGE)?.load(Ordering::Relaxed)).ok()?;
        if num_sge > self.max_sge {
            return None;
        }
        let sges = slot
            .get(SGES..SGES + 2 * num_sge)?
            .chunks_exact(2)
            .map(|pair| {
                let packed = pair[1].load(Ordering::Relaxed);
                Sge {
                    addr: pair[0].load(Ordering::Relaxed),
                    length: (packed >> 32) as u32,
                    lkey: packed as u32,
                }
            })
            .collect();
        let wr_id = slot.get(WR_ID)?.load(Ordering::Relaxed);
        Some(RecvEntry { wr_id, sges })
    }

    /// Entries posted and not yet claimed.
    pub fn unclaimed(&self) -> u64 {
        let Some((producer, consumer)) = self.indices() else {
            return 0;
        };
        let claimed = consumer.load(Ordering::Acquire);
        let pending = producer.load(Ordering::Acquire).wrapping_sub(claimed);
        if pending > self.capacity {
            0 // a corrupt ring
        } else {
            pending
        }
    }

    /// Entries posted so far (the producer index).
    pub fn producer_index(&self) -> u64 {
        self.indices().map_or(0, |(p, _)| p.load(Ordering::Acquire))
    }

    /// Entries claimed so far (the consumer index).
    pub fn consumer_index(&self) -> u64 {
        self.indices().map_or(0, |(_, c)| c.load(Ordering::Acquire))
    }

    fn indices(&self) -> Option<(&'a AtomicU64, &'a AtomicU64)> {
        Some((self.words.get(PRODUCER)?, self.words.get(CONSUMER)?))
    }

    fn slot(&self, index: u64) -> Option<&'a [AtomicU64]> {
        let slot = usize::try_from(index.checked_rem(self.capacity)?).ok()?;
        let start = slot.checked_mul(self.stride)?.checked_add(HEADER)?;
        self.words.get(start..start.checked_add(self.stride)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn arena(words: usize) -> Vec<AtomicU64> {
        (0..words).map(|_| AtomicU64::new(0)).collect()
    }

    /// SGEs that all derive from `n`, so a torn read shows.
    fn sges(n: u64) -> SgeList {
        (0..n % 3 + 1)
            .map(|i| Sge {
                addr: n * 10 + i,
                length: n as u32,
                lkey: (n + i) as u32,
            })
            .collect()
    }

    #[test]
    fn entries_come_out_in_order_and_the_ring_fills() {
        let ring_ref = RingRef {
            offset: 5,
            capacity: 4,
            max_sge: 3,
        };
        let words = arena(5 + RecvRing::words_for(4, 3).unwrap() as usize);
        let ring = RecvRing::new(&words, ring_ref).unwrap();
        assert!(!ring.peek_available());
        assert_eq!(ring.claim(), None);
        for round in 0..10u64 {
            for n in 0..4 {
                ring.push(round * 4 + n, &sges(n)).unwrap();
            }
            assert_eq!(ring.push(99, &[]), Err(Full));
            for n in 0..4 {
                assert!(ring.peek_available());
                let (index, entry) = ring.claim().unwrap();
                assert_eq!(index, round * 4 + n);
                assert_eq!(
                    entry,
                    RecvEntry {
                        wr_id: round * 4 + n,
                        sges: sges(n)
                    }
                );
            }
            assert_eq!(ring.claim(), None);
        }
        assert_eq!(
            ring.push(1, &sges(2)[..1].repeat(4)),
            Err(Full),
            "more SGEs than max_sge"
        );
    }

    #[test]
    fn a_ring_outside_the_arena_is_refused() {
        let words = arena(64);
        let fits = RingRef {
            offset: 0,
            capacity: 2,
            max_sge: 1,
        };
        assert!(RecvRing::new(&words, fits).is_some());
        for bad in [
            RingRef { offset: 60, ..fits },
            RingRef {
                offset: u64::MAX,
                ..fits
            },
            RingRef {
                capacity: 0,
                ..fits
            },
            RingRef {
                capacity: u32::MAX,
                max_sge: u32::MAX,
                ..fits
            },
        ] {
            assert!(RecvRing::new(&words, bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn corrupt_indices_and_sge_counts_are_survived() {
        let words = arena(64);
        let ring = RecvRing::new(
            &words,
            RingRef {
                offset: 0,
                capacity: 4,
                max_sge: 2,
            },
        )
        .unwrap();
        ring.push(1, &sges(1)).unwrap();
        words[HEADER + NUM_SGE].store(1_000, Ordering::Relaxed);
        assert_eq!(ring.claim(), None);
        assert_eq!(ring.entry(0), None);
        words[PRODUCER].store(u64::MAX, Ordering::Relaxed);
        assert_eq!(ring.claim(), None);
        assert!(!ring.peek_available());
        assert_eq!(ring.push(2, &[]), Err(Full));
        assert_eq!(ring.claim_all().count(), 4);
    }

    #[test]
    fn claim_all_takes_what_is_left() {
        let words = arena(128);
        let ring = RecvRing::new(
            &words,
            RingRef {
                offset: 0,
                capacity: 8,
                max_sge: 3,
            },
        )
        .unwrap();
        for n in 0..5 {
            ring.push(n, &sges(n)).unwrap();
        }
        assert_eq!(ring.claim().map(|(i, _)| i), Some(0));
        let (peeked, _) = ring.peek().unwrap();
        let left = ring.claim_all();
        assert!(!ring.claim_at(peeked), "flushed under the peek");
        assert_eq!(left, 1..5);
        assert_eq!(
            ring.entry(3),
            Some(RecvEntry {
                wr_id: 3,
                sges: sges(3)
            })
        );
        assert_eq!(ring.claim(), None);
        assert!(ring.claim_all().is_empty());
        ring.push(5, &sges(5)).unwrap();
        assert_eq!(ring.claim().map(|(i, e)| (i, e.wr_id)), Some((5, 5)));
    }

    /// The owner pushes entries as room appears while two consumers claim
    /// them: every entry is claimed once, at its index, untorn.
    #[test]
    fn concurrent_consumers_claim_every_entry_once() {
        const ENTRIES: u64 = 20_000;
        let words = arena(256);
        let ring = RecvRing::new(
            &words,
            RingRef {
                offset: 3,
                capacity: 8,
                max_sge: 3,
            },
        )
        .unwrap();
        let claimed = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    while ring.consumer_index() < ENTRIES {
                        match ring.claim() {
                            Some((index, entry)) => {
                                assert_eq!(
                                    entry,
                                    RecvEntry {
                                        wr_id: index,
                                        sges: sges(index)
                                    }
                                );
                                mine.push(index);
                            }
                            None => std::thread::yield_now(),
                        }
                    }
                    claimed.lock().unwrap().extend(mine);
                });
            }
            for n in 0..ENTRIES {
                while ring.push(n, &sges(n)).is_err() {
                    std::thread::yield_now();
                }
            }
        });
        let mut claimed = claimed.into_inner().unwrap();
        claimed.sort_unstable();
        assert_eq!(claimed, (0..ENTRIES).collect::<Vec<_>>());
    }
}
