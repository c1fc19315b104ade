//! The driver's lock, which the progress thread may wait for asleep.
//!
//! Application threads take it as parking_lot does: a short spin, a few
//! `sched_yield`s, then sleep. A progress thread whose application
//! spins on memory must not yield: on a machine whose CPUs all run
//! spinning applications (wire `ib_write_lat` between two processes of a
//! 2-CPU host), the holder is often a thread preempted by a woken
//! progress thread, a yield gives the CPU to a spinner, and the fair
//! scheduler (EEVDF) gives it back only when that spinner's slice ends at
//! a tick, up to 4 ms later, while the application waits for a WRITE the
//! thread would have placed (docs/perf-profile.md, "The progress thread
//! yielding the driver"). [`DriverLock::lock_parking`] spins briefly, then
//! parks, and whoever unlocks wakes it: a wake-up the scheduler weighs at
//! once, and the short slice the thread asked for
//! (`Notify::progress_thread_started`) lets it preempt a spinner.

use parking_lot::{Mutex, MutexGuard};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long [`DriverLock::lock_parking`] spins before it parks: about as
/// long as parking_lot's spins and yields take when nothing else runs; a
/// holder's verb lasts a few microseconds, one preempted far longer.
const SPIN_FOR: Duration = Duration::from_micros(8);

/// A mutex that one thread, the sleeper (the progress thread), may wait
/// for asleep, woken by the next unlock ([`DriverLock::lock_for_sleeper`]).
/// It says when it may ([`DriverGuard::sleeper_parks`]): only then does an
/// unlock look whether to wake it, which costs a fence.
pub(crate) struct DriverLock<T> {
    inner: Mutex<T>,
    sleeper: Sleeper,
}

/// The thread that parks for the lock, and whether it is parked; on a
/// cache line of its own, away from the mutex's word.
#[repr(align(64))]
struct Sleeper {
    thread: OnceLock<Thread>,
    parked: AtomicBool,
    /// Whether it waits for the lock parked: written by the sleeper with
    /// the lock held, read by each holder with the lock held.
    may_park: AtomicBool,
}

/// The lock held. Unlocks, then wakes a parked sleeper, when dropped.
pub(crate) struct DriverGuard<'a, T> {
    // Field order is drop order: the mutex is unlocked before the
    // sleeper is woken, so that it finds the lock free.
    guard: MutexGuard<'a, T>,
    wake: WakeOnDrop<'a>,
}

struct WakeOnDrop<'a> {
    sleeper: &'a Sleeper,
    /// Whether the sleeper may park, as of when the lock was taken. A
    /// holder that read `false` needs no look at unlock: the sleeper
    /// parks only after a hold of its own that left `true`, every hold
    /// that begins after that one reads `true` (the lock orders them),
    /// and the holds before it ended before it began.
    may_park: bool,
}

impl<T> DriverLock<T> {
    pub(crate) fn new(value: T) -> DriverLock<T> {
        DriverLock {
            inner: Mutex::new(value),
            sleeper: Sleeper {
                thread: OnceLock::new(),
                parked: AtomicBool::new(false),
                may_park: AtomicBool::new(false),
            },
        }
    }

    fn held<'a>(&'a self, guard: MutexGuard<'a, T>) -> DriverGuard<'a, T> {
        DriverGuard {
            guard,
            wake: WakeOnDrop {
                sleeper: &self.sleeper,
                may_park: self.sleeper.may_park.load(Ordering::Relaxed),
            },
        }
    }

    /// Waits for the lock as parking_lot does (spins, yields, sleeps).
    pub(crate) fn lock(&self) -> DriverGuard<'_, T> {
        self.held(self.inner.lock())
    }

    pub(crate) fn try_lock(&self) -> Option<DriverGuard<'_, T>> {
        self.inner.try_lock().map(|guard| self.held(guard))
    }

    pub(crate) fn try_lock_for(&self, wait: Duration) -> Option<DriverGuard<'_, T>> {
        self.inner.try_lock_for(wait).map(|guard| self.held(guard))
    }

    /// The lock for the sleeper: parked while it may park, else as
    /// [`DriverLock::lock`]. Only ever called by one thread.
    pub(crate) fn lock_for_sleeper(&self) -> DriverGuard<'_, T> {
        match self.sleeper.may_park.load(Ordering::Relaxed) {
            true => self.lock_parking(),
            false => self.lock(),
        }
    }

    /// Waits for the lock without `sched_yield`: spins briefly, then
    /// sleeps until an unlock wakes it.
    fn lock_parking(&self) -> DriverGuard<'_, T> {
        let sleeper = self.sleeper.thread.get_or_init(std::thread::current);
        debug_assert_eq!(sleeper.id(), std::thread::current().id());
        let started = Instant::now();
        loop {
            for _ in 0..16 {
                // Read before trying: a failed try would take the lock's
                // cache line from the holder each time.
                if !self.inner.is_locked() {
                    if let Some(held) = self.try_lock() {
                        return held;
                    }
                }
                std::hint::spin_loop();
            }
            if started.elapsed() >= SPIN_FOR {
                break;
            }
        }
        loop {
            // Say we sleep, then look once more: the unlock of the hold
            // this look sees, or of a later one, sees the mark (the
            // fences order the mark before this look and each unlock
            // before its check); or this look finds the lock free.
            self.sleeper.parked.store(true, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if let Some(held) = self.try_lock() {
                self.sleeper.parked.store(false, Ordering::Relaxed);
                return held;
            }
            // A wake-up given before this park makes it return at once.
            std::thread::park();
        }
    }
}

impl<T> DriverGuard<'_, T> {
    /// Whether the sleeper waits for the lock parked from now on. Called
    /// by the sleeper only.
    pub(crate) fn sleeper_parks(&mut self, parks: bool) {
        let may_park = &self.wake.sleeper.may_park;
        if may_park.load(Ordering::Relaxed) != parks {
            may_park.store(parks, Ordering::Relaxed);
        }
    }
}

impl Drop for WakeOnDrop<'_> {
    fn drop(&mut self) {
        if !self.may_park {
            return;
        }
        fence(Ordering::SeqCst);
        let sleeper = self.sleeper;
        if sleeper.parked.load(Ordering::Relaxed) && sleeper.parked.swap(false, Ordering::Relaxed) {
            if let Some(thread) = sleeper.thread.get() {
                thread.unpark();
            }
        }
    }
}

impl<T> Deref for DriverGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for DriverGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// A sleeper that parks for the lock gets it once the holder lets go,
    /// every time, with the holders' writes visible: many short holds by
    /// other threads race each park, and some long ones (beyond the spin)
    /// make it park; a lost wake-up would hang the test.
    #[test]
    fn the_parked_sleeper_gets_the_lock_after_every_unlock() {
        let lock = Arc::new(DriverLock::new(0u64));
        lock.lock().sleeper_parks(true);
        let done = Arc::new(AtomicU64::new(0));
        let saw_parked = Arc::new(AtomicBool::new(false));
        let holders: Vec<_> = (0..2)
            .map(|_| {
                let (lock, done) = (lock.clone(), done.clone());
                let saw_parked = saw_parked.clone();
                std::thread::spawn(move || {
                    // Until the sleeper has been seen parked, at least.
                    let mut i = 0u64;
                    while i < 20_000 || !saw_parked.load(Ordering::Relaxed) {
                        i += 1;
                        let mut held = lock.lock();
                        *held += 1;
                        if i.is_multiple_of(100) {
                            let started = Instant::now();
                            while started.elapsed() < 4 * SPIN_FOR {
                                std::hint::spin_loop();
                            }
                        }
                        if lock.sleeper.parked.load(Ordering::Relaxed) {
                            saw_parked.store(true, Ordering::Relaxed);
                        }
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                    i
                })
            })
            .collect();
        let mut takes = 0u64;
        while done.load(Ordering::SeqCst) < 2 {
            let mut held = lock.lock_for_sleeper();
            *held += 1;
            takes += 1;
        }
        let held: u64 = holders.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(*lock.lock(), held + takes);
    }

    /// A parked sleeper is woken by the unlock of a guard held while it
    /// parked.
    #[test]
    fn an_unlock_wakes_the_sleeper_parked_for_it() {
        let lock = Arc::new(DriverLock::new(()));
        let mut held = lock.lock();
        held.sleeper_parks(true);
        drop(held);
        let held = lock.lock();
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || drop(lock.lock_for_sleeper()))
        };
        while !lock.sleeper.parked.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        drop(held);
        waiter.join().unwrap();
        assert!(!lock.sleeper.parked.load(Ordering::SeqCst));
    }

    /// A sleeper that may not park takes the lock as any thread does,
    /// and an unlock then looks at nothing.
    #[test]
    fn a_sleeper_that_may_not_park_never_parks() {
        let lock = DriverLock::new(());
        let mut held = lock.lock_for_sleeper();
        assert!(!held.wake.may_park);
        held.sleeper_parks(true);
        drop(held);
        assert!(lock.lock().wake.may_park);
        assert!(lock.sleeper.thread.get().is_none(), "never parked");
    }
}
