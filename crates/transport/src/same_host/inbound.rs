//! The deliveries ring: how peers tell the owner what they did to its
//! QPs (completions to post, state changes), one fixed-size record each.
//!
//! A bounded queue with many producers (peers) and one consumer (the
//! owner), after Vyukov's bounded queue: each slot has a state word that
//! says for which position it is free, claimed or published, so producers
//! race only on a compare-and-swap and the consumer needs none. The state
//! word is `claimant_pid<<32 | position`, the position kept to its low 32
//! bits (compared with wrapping arithmetic, which holds for any capacity
//! up to 2^31): for position `p` in slot `p % capacity` it reads
//! `p` (free), `pid<<32 | p` (claimed by process `pid`) or `p + 1`
//! (published).
//!
//! A producer claims the slot itself (so the claim names it), then moves
//! the shared enqueue position on; a producer that finds a claimed slot
//! at the enqueue position moves the position on for it, so a producer
//! that dies right after claiming does not stop the others.
//!
//! A producer that dies between claiming a slot and publishing it leaves
//! the slot claimed: [`Inbound::pop`] stops there (it returns `None`,
//! whatever comes after), and the queue fills up behind it. The owner
//! recovers with [`Inbound::reap_dead_claim`], which skips that slot once
//! the claimant no longer exists (the record is lost; the producer's QP
//! sees its peer die anyway). A claimant that is alive but stopped (a
//! debugger, SIGSTOP) is waited for: skipping it would let its late write
//! tear the next record in that slot.
//!
//! Layout (words): `[enqueue position, 7 spare, dequeue position, 7
//! spare]`, then per slot `[state, record x 7]`.

use std::sync::atomic::{AtomicU64, Ordering};

use super::full::Full;
use super::liveness::{is_gone, own_pid};
use super::seqlock::back_off;

/// Words of one delivery record.
pub const RECORD_WORDS: usize = 7;
/// One delivery: its meaning is the embedder's.
pub type Record = [u64; RECORD_WORDS];

const ENQUEUE: usize = 0;
const DEQUEUE: usize = 8;
const HEADER: usize = 16;
const STRIDE: usize = 1 + RECORD_WORDS;
/// Largest capacity whose positions survive being cut to 32 bits.
const MAX_CAPACITY: usize = 1 << 31;

/// Tries a producer makes before it reports the queue full; every failed
/// try is another producer's progress, so this only bounds a corrupt ring.
const PUSH_ATTEMPTS: u32 = 10_000;

/// A view of the deliveries ring part of a region.
#[derive(Debug, Clone, Copy)]
pub struct Inbound<'a> {
    part: &'a [AtomicU64],
    capacity: u64,
}

fn position(state: u64) -> u32 {
    state as u32
}

fn claimant(state: u64) -> u32 {
    (state >> 32) as u32
}

/// The state word of a slot free for position `pos`.
fn free_for(pos: u64) -> u64 {
    u64::from(pos as u32)
}

impl<'a> Inbound<'a> {
    /// Words of a ring of `capacity` records (`None`: not a power of two
    /// of at least 2 and at most 2^31, or too big).
    pub fn words_for(capacity: usize) -> Option<usize> {
        if !capacity.is_power_of_two() || !(2..=MAX_CAPACITY).contains(&capacity) {
            return None;
        }
        capacity.checked_mul(STRIDE)?.checked_add(HEADER)
    }

    /// A view of `part` as a ring of `capacity` records. A part too
    /// short, or a bad capacity, gives a ring that is always full and
    /// always empty.
    pub fn new(part: &'a [AtomicU64], capacity: usize) -> Self {
        let fits = Self::words_for(capacity).is_some_and(|words| words <= part.len());
        Inbound {
            part,
            capacity: if fits { capacity as u64 } else { 0 },
        }
    }

    /// Makes the ring empty, every slot free for its first position. For
    /// the owner, before peers see the region.
    pub fn format(&self) {
        for index in [ENQUEUE, DEQUEUE] {
            if let Some(word) = self.part.get(index) {
                word.store(0, Ordering::Relaxed);
            }
        }
        for pos in 0..self.capacity {
            if let Some(state) = self.state(pos) {
                state.store(free_for(pos), Ordering::Release);
            }
        }
    }

    /// Roughly how many records can still be pushed (positions taken but
    /// not yet popped are counted as used). For peers deciding whether to
    /// start something that ends in a delivery.
    pub fn room(&self) -> u64 {
        let (Some(enqueue), Some(dequeue)) = (self.part.get(ENQUEUE), self.part.get(DEQUEUE))
        else {
            return 0;
        };
        let used = enqueue
            .load(Ordering::Acquire)
            .wrapping_sub(dequeue.load(Ordering::Acquire));
        self.capacity.saturating_sub(used)
    }

    /// Adds a record. For peers, many at once. `Err(Full)` when the owner
    /// has not yet taken the records of a whole ring.
    pub fn push(&self, record: &Record) -> Result<(), Full> {
        self.push_by(record, own_pid())
    }

    /// [`push`](Self::push) by process `pid`, ours, as a caller that
    /// keeps it knows it (`getpid` is a system call per delivery).
    pub fn push_by(&self, record: &Record, pid: i32) -> Result<(), Full> {
        let pos = self.claim(pid)?;
        self.publish(pos, record);
        Ok(())
    }

    /// Takes the oldest record. Owner only. `None` when there is none, or
    /// when the oldest is claimed but not yet published (see the module
    /// doc for a producer that died there).
    pub fn pop(&self) -> Option<Record> {
        self.pop_with(|record| record)
    }

    /// Takes the oldest record, as [`pop`](Self::pop), and hands it to
    /// `apply` before freeing its slot. Owner only. A thread of the
    /// owner's process that finds the slot freed ([`nothing_waiting`])
    /// then sees what `apply` did (a completion it queued).
    ///
    /// [`nothing_waiting`]: Self::nothing_waiting
    pub fn pop_with<R>(&self, apply: impl FnOnce(Record) -> R) -> Option<R> {
        let dequeue = self.part.get(DEQUEUE)?;
        let pos = dequeue.load(Ordering::Relaxed);
        let state = self.state(pos)?;
        let word = state.load(Ordering::Acquire);
        if word != free_for(pos.wrapping_add(1)) {
            return None;
        }
        let record = self
            .record(pos)?
            .each_ref()
            .map(|w| w.load(Ordering::Relaxed));
        let applied = apply(record);
        // Release: the reads above come before a producer reuses the slot,
        // and what `apply` did before a `nothing_waiting` that reads the
        // new dequeue position.
        state.store(free_for(pos.wrapping_add(self.capacity)), Ordering::Release);
        dequeue.store(pos.wrapping_add(1), Ordering::Release);
        Some(applied)
    }

    /// Whether the oldest record is published, so [`pop`](Self::pop)
    /// would take it. Owner only (the progress thread checks it before
    /// sleeping).
    pub fn peek_nonempty(&self) -> bool {
        let Some(dequeue) = self.part.get(DEQUEUE) else {
            return false;
        };
        let pos = dequeue.load(Ordering::Relaxed);
        self.state(pos)
            .is_some_and(|state| state.load(Ordering::Acquire) == free_for(pos.wrapping_add(1)))
    }

    /// Whether, for certain, no record waits for the owner and every
    /// record taken was applied ([`pop_with`](Self::pop_with)). Any thread
    /// of the owner's process, while the owner may be popping: false
    /// (perhaps something waits) unless the slot at the dequeue position
    /// is free or claimed for that very position, which it stays until
    /// popped, so the position read was the current one.
    pub fn nothing_waiting(&self) -> bool {
        let Some(dequeue) = self.part.get(DEQUEUE) else {
            return true;
        };
        // Acquire: pairs with `pop_with`'s store, after its `apply`.
        let pos = dequeue.load(Ordering::Acquire);
        // Free or claimed for `pos` (published reads `pos + 1`, popped
        // `pos + capacity`).
        self.state(pos)
            .is_none_or(|state| position(state.load(Ordering::Acquire)) == pos as u32)
    }

    /// If the oldest record is claimed by a process that no longer
    /// exists, skips it (its record is lost) and returns true. Owner only;
    /// costs a `kill(pid, 0)` when the oldest slot is claimed, so call it
    /// when `pop` keeps returning `None` (before sleeping, on a timer).
    pub fn reap_dead_claim(&self) -> bool {
        let (Some(enqueue), Some(dequeue)) = (self.part.get(ENQUEUE), self.part.get(DEQUEUE))
        else {
            return false;
        };
        let pos = dequeue.load(Ordering::Relaxed);
        let Some(state) = self.state(pos) else {
            return false;
        };
        let word = state.load(Ordering::Acquire);
        let pid = claimant(word);
        if pid == 0 || position(word) != pos as u32 || !is_gone(pid as i32) {
            return false;
        }
        // It may have died before moving the enqueue position past its
        // slot; free slots behind a stale position would stop producers.
        let _ = enqueue.compare_exchange(
            pos,
            pos.wrapping_add(1),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        let next_lap = free_for(pos.wrapping_add(self.capacity));
        if state
            .compare_exchange(word, next_lap, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        dequeue.store(pos.wrapping_add(1), Ordering::Relaxed);
        true
    }

    /// Claims the slot at the enqueue position for process `pid`; returns
    /// its position.
    fn claim(&self, pid: i32) -> Result<u64, Full> {
        let enqueue = self.part.get(ENQUEUE).ok_or(Full)?;
        let claimed_by = u64::from(pid as u32) << 32;
        let mut pos = enqueue.load(Ordering::Acquire);
        for attempt in 0..PUSH_ATTEMPTS {
            let state = self.state(pos).ok_or(Full)?;
            let word = state.load(Ordering::Acquire);
            let ahead = position(word).wrapping_sub(pos as u32) as i32;
            if ahead < 0 {
                // The slot still holds the record of the previous lap.
                return Err(Full);
            }
            if ahead == 0 && claimant(word) == 0 {
                let claim = claimed_by | free_for(pos);
                if state
                    .compare_exchange(word, claim, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    let next = pos.wrapping_add(1);
                    let _ =
                        enqueue.compare_exchange(pos, next, Ordering::AcqRel, Ordering::Relaxed);
                    return Ok(pos);
                }
            } else if ahead == 0 {
                // Claimed by someone else who has not moved the position
                // on yet (or died before it could): move it for them.
                let next = pos.wrapping_add(1);
                let _ = enqueue.compare_exchange(pos, next, Ordering::AcqRel, Ordering::Relaxed);
            }
            back_off(attempt);
            pos = enqueue.load(Ordering::Acquire);
        }
        Err(Full)
    }

    /// Writes the record into the slot claimed for `pos` and publishes it.
    fn publish(&self, pos: u64, record: &Record) {
        if let (Some(words), Some(state)) = (self.record(pos), self.state(pos)) {
            for (word, value) in words.iter().zip(record) {
                word.store(*value, Ordering::Relaxed);
            }
            state.store(free_for(pos.wrapping_add(1)), Ordering::Release);
        }
    }

    fn slot(&self, pos: u64) -> Option<&'a [AtomicU64]> {
        let slot = usize::try_from(pos.checked_rem(self.capacity)?).ok()?;
        let start = slot.checked_mul(STRIDE)?.checked_add(HEADER)?;
        self.part.get(start..start.checked_add(STRIDE)?)
    }

    fn state(&self, pos: u64) -> Option<&'a AtomicU64> {
        self.slot(pos)?.first()
    }

    fn record(&self, pos: u64) -> Option<&'a [AtomicU64; RECORD_WORDS]> {
        self.slot(pos)?.get(1..)?.try_into().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::same_host::liveness::gone_pid;

    fn ring(capacity: usize) -> Vec<AtomicU64> {
        let words = Inbound::words_for(capacity).unwrap();
        let part: Vec<AtomicU64> = (0..words).map(|_| AtomicU64::new(0)).collect();
        Inbound::new(&part, capacity).format();
        part
    }

    #[test]
    fn room_counts_what_is_pushed_and_not_yet_popped() {
        let part = ring(4);
        let q = Inbound::new(&part, 4);
        assert_eq!(q.room(), 4);
        q.push(&[1; RECORD_WORDS]).unwrap();
        q.push(&[2; RECORD_WORDS]).unwrap();
        assert_eq!(q.room(), 2);
        q.pop().unwrap();
        assert_eq!(q.room(), 3);
        while q.push(&[3; RECORD_WORDS]).is_ok() {}
        assert_eq!(q.room(), 0);
    }

    #[test]
    fn records_come_out_in_order_and_the_ring_fills() {
        let part = ring(4);
        let inbound = Inbound::new(&part, 4);
        assert_eq!(inbound.pop(), None);
        assert!(!inbound.peek_nonempty());
        for round in 0..10u64 {
            for n in 0..4 {
                inbound.push(&[round * 4 + n; RECORD_WORDS]).unwrap();
            }
            assert_eq!(inbound.push(&[0; RECORD_WORDS]), Err(Full));
            for n in 0..4 {
                assert!(inbound.peek_nonempty());
                assert_eq!(inbound.pop(), Some([round * 4 + n; RECORD_WORDS]));
            }
            assert!(!inbound.peek_nonempty());
            assert_eq!(inbound.pop(), None);
        }
    }

    #[test]
    fn bad_capacities_and_short_parts_are_inert() {
        for bad in [0, 1, 3, 6] {
            assert_eq!(Inbound::words_for(bad), None);
        }
        let part = ring(4);
        let short = Inbound::new(&part[..20], 4);
        assert_eq!(short.push(&[1; RECORD_WORDS]), Err(Full));
        assert_eq!(short.pop(), None);
        assert!(!short.reap_dead_claim());
    }

    #[test]
    fn garbage_in_the_ring_neither_panics_nor_hangs() {
        let part = ring(4);
        let inbound = Inbound::new(&part, 4);
        let mut rng = fastrand::Rng::with_seed(3);
        for _ in 0..200 {
            for word in &part {
                word.store(rng.u64(..), Ordering::Relaxed);
            }
            let _ = inbound.push(&[7; RECORD_WORDS]);
            let _ = inbound.pop();
            let _ = inbound.reap_dead_claim();
        }
    }

    /// A producer claims a slot and dies before publishing: the consumer
    /// stops there, producers fill the ring behind it, and reaping the
    /// dead claim lets everything else through.
    #[test]
    fn a_dead_claimant_is_reaped_and_the_ring_goes_on() {
        let part = ring(4);
        let inbound = Inbound::new(&part, 4);
        inbound.push(&[1; RECORD_WORDS]).unwrap();
        let dead = inbound.claim(gone_pid()).unwrap();
        assert_eq!(dead, 1);
        inbound.push(&[3; RECORD_WORDS]).unwrap();
        inbound.push(&[4; RECORD_WORDS]).unwrap();
        assert_eq!(inbound.push(&[5; RECORD_WORDS]), Err(Full));
        assert_eq!(inbound.pop(), Some([1; RECORD_WORDS]));
        assert_eq!(inbound.pop(), None, "stops at the unpublished claim");
        assert!(inbound.reap_dead_claim());
        assert!(!inbound.reap_dead_claim());
        assert_eq!(inbound.pop(), Some([3; RECORD_WORDS]));
        assert_eq!(inbound.pop(), Some([4; RECORD_WORDS]));
        inbound.push(&[5; RECORD_WORDS]).unwrap();
        assert_eq!(inbound.pop(), Some([5; RECORD_WORDS]));
    }

    #[test]
    fn a_claimant_that_died_before_moving_the_position_is_reaped() {
        let part = ring(2);
        let inbound = Inbound::new(&part, 2);
        // Claim slot 0 by hand, as a producer that died right after it.
        part[HEADER].store(u64::from(gone_pid() as u32) << 32, Ordering::Relaxed);
        assert!(inbound.reap_dead_claim());
        inbound.push(&[9; RECORD_WORDS]).unwrap();
        assert_eq!(inbound.pop(), Some([9; RECORD_WORDS]));
    }

    #[test]
    fn a_live_claimant_is_waited_for() {
        let part = ring(2);
        let inbound = Inbound::new(&part, 2);
        let pos = inbound.claim(own_pid()).unwrap();
        assert!(!inbound.peek_nonempty());
        assert_eq!(inbound.pop(), None);
        assert!(!inbound.reap_dead_claim());
        inbound.publish(pos, &[2; RECORD_WORDS]);
        assert_eq!(inbound.pop(), Some([2; RECORD_WORDS]));
    }

    #[test]
    fn nothing_waits_only_when_the_head_is_free_or_claimed() {
        let part = ring(2);
        let inbound = Inbound::new(&part, 2);
        assert!(inbound.nothing_waiting(), "empty");
        let pos = inbound.claim(own_pid()).unwrap();
        assert!(inbound.nothing_waiting(), "claimed, not published");
        inbound.publish(pos, &[1; RECORD_WORDS]);
        assert!(!inbound.nothing_waiting(), "published");
        // The record is applied while its slot is still taken: a thread
        // that finds nothing waiting finds what was applied.
        let seen = inbound.pop_with(|record| (record, inbound.nothing_waiting()));
        assert_eq!(seen, Some(([1; RECORD_WORDS], false)));
        assert!(inbound.nothing_waiting(), "popped");
        for lap in 0..3 {
            inbound.push(&[lap; RECORD_WORDS]).unwrap();
            assert!(!inbound.nothing_waiting(), "lap {lap}");
            assert_eq!(inbound.pop(), Some([lap; RECORD_WORDS]));
            assert!(inbound.nothing_waiting(), "lap {lap}, popped");
        }
    }

    /// Two producers push numbered records as room appears while the
    /// consumer pops: every record arrives once, untorn, and each
    /// producer's records in its order.
    #[test]
    fn concurrent_producers_deliver_every_record_once() {
        const PER_PRODUCER: u64 = 20_000;
        let part = ring(8);
        let inbound = Inbound::new(&part, 8);
        let mut next = [0u64; 2];
        std::thread::scope(|scope| {
            for producer in 0..2u64 {
                let inbound = &inbound;
                scope.spawn(move || {
                    for n in 0..PER_PRODUCER {
                        let record = [producer, n, n, n, n, n, n];
                        while inbound.push(&record).is_err() {
                            std::thread::yield_now();
                        }
                    }
                });
            }
            let mut received = 0;
            while received < 2 * PER_PRODUCER {
                let Some(record) = inbound.pop() else {
                    std::thread::yield_now();
                    continue;
                };
                let producer = record[0] as usize;
                assert!(
                    record[1..].iter().all(|&w| w == record[1]),
                    "torn: {record:?}"
                );
                assert_eq!(
                    record[1], next[producer],
                    "producer {producer} out of order"
                );
                next[producer] += 1;
                received += 1;
            }
        });
        assert_eq!(next, [PER_PRODUCER; 2]);
        assert_eq!(inbound.pop(), None);
    }
}
