//! Striped locks for atomic operations on the owner's memory.
//!
//! A peer executes an atomic (fetch-and-add, compare-and-swap) on the
//! owner's memory as a read and a write through the kernel, so two peers
//! (or a peer and the owner's own engine) doing atomics on one address
//! must take turns. Addresses hash onto a fixed set of lock words; a lock
//! word holds the pid of its holder (0: free), taken by compare-and-swap.
//!
//! A holder that dies would wedge its stripe, so a waiter that has spun
//! for long checks whether the holder still exists and, if not, takes the
//! lock over with a compare-and-swap from the dead pid (only one waiter
//! wins). The dead holder may have left its 8 bytes half done: the same
//! as a requester dying mid-operation on a NIC. A holder that lives but
//! never lets go (stopped, or a corrupt word naming a live process) is
//! waited for only up to the caller's timeout.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::liveness::{is_gone, own_pid};

const STRIDE: usize = 8;
/// Spins before a waiter asks whether the holder still exists.
const SPINS_BEFORE_LIVENESS_CHECK: u32 = 100_000;
/// Spins of busy waiting before a waiter starts yielding.
const BUSY_SPINS: u32 = 128;
/// Spins between two looks at the clock.
const SPINS_PER_CLOCK_CHECK: u32 = 256;

/// A view of the lock stripes part of a region.
#[derive(Debug, Clone, Copy)]
pub struct LockTable<'a> {
    part: &'a [AtomicU64],
    stripes: usize,
}

/// The lock could not be had in time: its holder is alive and kept it
/// past the timeout, or the table has no stripes (a corrupt region).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockTimeout;

impl std::fmt::Display for LockTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("atomic lock held past the timeout")
    }
}

impl std::error::Error for LockTimeout {}

/// A held stripe; dropping it releases the stripe.
#[derive(Debug)]
pub struct StripeGuard<'a> {
    word: &'a AtomicU64,
    holder: u64,
}

impl Drop for StripeGuard<'_> {
    fn drop(&mut self) {
        // Only if still ours: never free a word a corrupt peer rewrote.
        let _ = self
            .word
            .compare_exchange(self.holder, 0, Ordering::Release, Ordering::Relaxed);
    }
}

impl<'a> LockTable<'a> {
    /// Words of a table of `stripes` locks, one cache line each.
    pub fn words_for(stripes: usize) -> Option<usize> {
        stripes.checked_mul(STRIDE)
    }

    /// A view of `part` as `stripes` locks (as many as fit).
    pub fn new(part: &'a [AtomicU64], stripes: usize) -> Self {
        LockTable {
            part,
            stripes: stripes.min(part.len() / STRIDE),
        }
    }

    /// Locks the stripe of `addr`, waiting at most `timeout` for a live
    /// holder; a dead holder's lock is taken over.
    pub fn lock(&self, addr: u64, timeout: Duration) -> Result<StripeGuard<'a>, LockTimeout> {
        let word = self.stripe(addr).ok_or(LockTimeout)?;
        let holder = u64::from(own_pid() as u32);
        let deadline = Instant::now().checked_add(timeout);
        let mut spins = 0u32;
        loop {
            let current = word.load(Ordering::Relaxed);
            let free = current == 0;
            if free || spins == SPINS_BEFORE_LIVENESS_CHECK && holder_is_gone(current) {
                let taken =
                    word.compare_exchange(current, holder, Ordering::Acquire, Ordering::Relaxed);
                if taken.is_ok() {
                    return Ok(StripeGuard { word, holder });
                }
            }
            spins = if spins == SPINS_BEFORE_LIVENESS_CHECK {
                0
            } else {
                spins + 1
            };
            if spins.is_multiple_of(SPINS_PER_CLOCK_CHECK)
                && deadline.is_some_and(|d| Instant::now() >= d)
            {
                return Err(LockTimeout);
            }
            if spins < BUSY_SPINS {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    fn stripe(&self, addr: u64) -> Option<&'a AtomicU64> {
        // 8-byte atomics: neighbouring words go to different stripes.
        let hash = (addr >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        let stripe = usize::try_from(hash.checked_rem(self.stripes as u64)?).ok()?;
        self.part.get(stripe.checked_mul(STRIDE)?)
    }
}

/// Whether the process named by a lock word is gone (a word that cannot
/// be a pid counts as gone).
fn holder_is_gone(word: u64) -> bool {
    i32::try_from(word).map_or(true, is_gone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::same_host::liveness::gone_pid;

    fn part(stripes: usize) -> Vec<AtomicU64> {
        (0..LockTable::words_for(stripes).unwrap())
            .map(|_| AtomicU64::new(0))
            .collect()
    }

    const LONG: Duration = Duration::from_secs(60);

    #[test]
    fn a_guard_holds_and_releases_its_stripe() {
        let words = part(4);
        let locks = LockTable::new(&words, 4);
        let guard = locks.lock(0x1000, LONG).unwrap();
        assert_eq!(
            locks.lock(0x1000, Duration::from_millis(1)).unwrap_err(),
            LockTimeout
        );
        drop(guard);
        drop(locks.lock(0x1000, Duration::ZERO).unwrap());
        assert!(words.iter().all(|w| w.load(Ordering::Relaxed) == 0));
    }

    #[test]
    fn a_dead_holder_is_taken_over() {
        let words = part(1);
        let locks = LockTable::new(&words, 1);
        words[0].store(u64::from(gone_pid() as u32), Ordering::Relaxed);
        drop(locks.lock(8, LONG).unwrap());
        words[0].store(u64::MAX, Ordering::Relaxed);
        drop(locks.lock(8, LONG).unwrap());
        assert_eq!(words[0].load(Ordering::Relaxed), 0);
    }

    #[test]
    fn no_stripes_means_no_lock() {
        let words = part(2);
        assert_eq!(
            LockTable::new(&words[..3], 2).lock(0, LONG).unwrap_err(),
            LockTimeout
        );
        assert_eq!(
            LockTable::new(&words, 0).lock(0, LONG).unwrap_err(),
            LockTimeout
        );
    }

    /// Threads increment a value with a separate read and write (as a
    /// peer's atomic does through the kernel) under the lock: no
    /// increment is lost.
    #[test]
    fn lock_holders_take_turns() {
        const THREADS: u64 = 3;
        const ROUNDS: u64 = 5_000;
        let words = part(2);
        let locks = LockTable::new(&words, 2);
        let value = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for _ in 0..THREADS {
                scope.spawn(|| {
                    for _ in 0..ROUNDS {
                        let _guard = locks.lock(0x40, LONG).unwrap();
                        let seen = value.load(Ordering::Relaxed);
                        std::hint::spin_loop();
                        value.store(seen + 1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(value.load(Ordering::Relaxed), THREADS * ROUNDS);
    }
}
