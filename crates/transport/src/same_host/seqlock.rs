//! Seqlocked entries in shared words: consistent snapshots of several
//! words that one writer (the region's owner) changes while any number of
//! readers (its peers) read them.
//!
//! The writer makes the sequence word odd, writes the fields and makes it
//! even again; a reader copies the fields between two reads of the
//! sequence and keeps the copy only if both reads are the same even value.
//!
//! The values come from a clock word of the whole table, which only goes
//! up, never from the entry's own sequence: no entry ever takes a value
//! twice, even after the owner gave its page back to the kernel (a hole
//! punched in the region reads as zeros, see `vacant_pages.rs`), so a
//! reader stalled across a write and a punch cannot find its first value
//! again and keep a torn copy. Zero is the one value an entry can have
//! twice (new, and punched): it means that every word of the entry is
//! zero, so a reader that finds it copies nothing and returns zeros.
//! Every word is atomic, so a reader racing the writer reads stale or
//! mixed values, never undefined ones, and the sequence check throws the
//! mixed ones away. The fences are the usual ones for a seqlock over
//! relaxed atomics: the writer's release fence after making the sequence
//! odd orders that store before its field stores, and the reader's acquire
//! fence before its second sequence read orders its field loads before it.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a reader keeps trying before it gives up on an entry, as
/// written by a crashed owner that left the sequence odd for ever. Not a
/// count of tries: a live owner preempted in the middle of its handful of
/// stores keeps the sequence odd for a scheduler time slice or more (many
/// milliseconds on a loaded host), and a reader that gave up then would
/// report a published MR or QP missing, a fatal error for the operation.
/// Readers yield meanwhile, so a writer sharing their CPU gets to finish.
pub(crate) const STUCK_WRITER: Duration = Duration::from_secs(1);
/// Attempts spent spinning before the reader starts yielding.
const SPIN_ATTEMPTS: u32 = 64;
/// Attempts between two looks at the clock.
const ATTEMPTS_PER_CLOCK_CHECK: u32 = 64;

/// A consistent copy of `fields`, or `None` when none could be had within
/// [`STUCK_WRITER`].
pub(crate) fn read<const N: usize>(seq: &AtomicU64, fields: &[AtomicU64; N]) -> Option<[u64; N]> {
    read_within(seq, fields, STUCK_WRITER)
}

/// A consistent copy of `fields`, or `None` when none could be had within
/// `patience`.
pub(crate) fn read_within<const N: usize>(
    seq: &AtomicU64,
    fields: &[AtomicU64; N],
    patience: Duration,
) -> Option<[u64; N]> {
    let mut started = None;
    let mut attempt = 0u32;
    loop {
        let before = seq.load(Ordering::Acquire);
        if before == 0 {
            return Some([0; N]);
        }
        if before & 1 == 0 {
            let copy = fields.each_ref().map(|word| word.load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if seq.load(Ordering::Relaxed) == before {
                return Some(copy);
            }
        }
        if attempt.is_multiple_of(ATTEMPTS_PER_CLOCK_CHECK) {
            let started = *started.get_or_insert_with(Instant::now);
            if started.elapsed() >= patience {
                return None;
            }
        }
        back_off(attempt);
        attempt = attempt.wrapping_add(1);
    }
}

/// Writes `values` into `fields` as one change, with a sequence value of
/// the table's `clock`. Only one writer at a time: the owner of the
/// region serialises its writes.
pub(crate) fn write<const N: usize>(
    seq: &AtomicU64,
    clock: &AtomicU64,
    fields: &[AtomicU64; N],
    values: &[u64; N],
) {
    let even = begin(seq, clock);
    store(fields, values);
    end(seq, clock, even);
}

/// Opens a write: readers retry until [`end`]. Returns the even value to
/// give `end`. For writers that change other words in the same window.
pub(crate) fn begin(seq: &AtomicU64, clock: &AtomicU64) -> u64 {
    // The last value the clock gave, even: only the owner moves it, and
    // at most 2^63 writes never wrap it.
    let even = clock.load(Ordering::Relaxed) & !1;
    seq.store(even.wrapping_add(1), Ordering::Relaxed);
    fence(Ordering::Release);
    even
}

/// Stores `values` into `fields`; only between [`begin`] and [`end`].
pub(crate) fn store<const N: usize>(fields: &[AtomicU64; N], values: &[u64; N]) {
    for (word, value) in fields.iter().zip(values) {
        word.store(*value, Ordering::Relaxed);
    }
}

/// Closes the write that [`begin`] opened; the clock moves on past it.
pub(crate) fn end(seq: &AtomicU64, clock: &AtomicU64, even: u64) {
    let next = even.wrapping_add(2);
    seq.store(next, Ordering::Release);
    clock.store(next, Ordering::Relaxed);
}

/// Splits an entry into its sequence word (the first) and the `N` words
/// after it, or `None` if the entry is shorter than that.
pub(crate) fn split<const N: usize>(entry: &[AtomicU64]) -> Option<(&AtomicU64, &[AtomicU64; N])> {
    let (seq, rest) = entry.split_first()?;
    let fields = rest.get(..N)?.try_into().ok()?;
    Some((seq, fields))
}

/// Waits politely between attempts: spins first, then yields the CPU.
pub(crate) fn back_off(attempt: u32) {
    if attempt < SPIN_ATTEMPTS {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// Test pacing for a writer that rewrites an entry in a loop: returns
/// once every reader has counted another successful read in its word of
/// `reads`. A writer that never pauses can starve a seqlock reader (every
/// read overlaps a write, and the reader gives up); a real owner writes
/// once per verb.
#[cfg(test)]
pub(crate) fn wait_for_reads(reads: &[AtomicU64]) {
    let seen: Vec<u64> = reads.iter().map(|r| r.load(Ordering::Relaxed)).collect();
    let mut attempt = 0;
    while reads
        .iter()
        .zip(&seen)
        .any(|(r, &s)| r.load(Ordering::Relaxed) == s)
    {
        back_off(attempt);
        attempt = attempt.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    fn words(n: usize) -> Vec<AtomicU64> {
        (0..n).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn a_write_is_read_back() {
        let (entry, clock) = (words(4), AtomicU64::new(0));
        let (seq, fields) = split::<3>(&entry).unwrap();
        write(seq, &clock, fields, &[1, 2, 3]);
        assert_eq!(read(seq, fields), Some([1, 2, 3]));
        assert_eq!(seq.load(Ordering::Relaxed), 2);
    }

    /// Every write takes new values from the table's clock, so an entry
    /// whose words went back to zero (a punched page) and was written
    /// again never shows a reader the value it first read.
    #[test]
    fn entries_take_their_values_from_the_tables_clock() {
        let (a, b, clock) = (words(2), words(2), AtomicU64::new(0));
        let (seq_a, fields_a) = split::<1>(&a).unwrap();
        let (seq_b, fields_b) = split::<1>(&b).unwrap();
        write(seq_a, &clock, fields_a, &[1]);
        write(seq_b, &clock, fields_b, &[2]);
        assert_eq!(seq_b.load(Ordering::Relaxed), 4);
        // A (punched) zero entry reads as zeros, whatever else it holds.
        seq_a.store(0, Ordering::Relaxed);
        assert_eq!(read(seq_a, fields_a), Some([0]));
        write(seq_a, &clock, fields_a, &[3]);
        assert_eq!(seq_a.load(Ordering::Relaxed), 6);
        assert_eq!(read(seq_a, fields_a), Some([3]));
    }

    #[test]
    fn a_short_entry_does_not_split() {
        let entry = words(3);
        assert!(split::<3>(&entry).is_none());
        assert!(split::<1>(&[]).is_none());
    }

    #[test]
    fn a_stuck_writer_makes_readers_give_up() {
        let entry = words(3);
        let (seq, fields) = split::<2>(&entry).unwrap();
        let clock = AtomicU64::new(6);
        seq.store(7, Ordering::Relaxed);
        assert_eq!(read_within(seq, fields, Duration::from_millis(10)), None);
        // The next write recovers the entry.
        write(seq, &clock, fields, &[5, 5]);
        assert_eq!(read(seq, fields), Some([5, 5]));
    }

    #[test]
    fn readers_racing_a_writer_never_see_a_torn_entry() {
        let entry = words(6);
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    let (seq, fields) = split::<5>(&entry).unwrap();
                    let mut seen = 0;
                    while !done.load(Ordering::Relaxed) {
                        if let Some(copy) = read(seq, fields) {
                            assert!(copy.iter().all(|&w| w == copy[0]), "torn: {copy:?}");
                            assert!(copy[0] >= seen, "went back in time");
                            seen = copy[0];
                        }
                    }
                });
            }
            let (seq, fields) = split::<5>(&entry).unwrap();
            let clock = AtomicU64::new(0);
            for i in 1..=20_000u64 {
                write(seq, &clock, fields, &[i; 5]);
            }
            done.store(true, Ordering::Relaxed);
        });
    }
}
