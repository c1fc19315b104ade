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

/// A mutex that the one thread that calls [`DriverLock::lock_parking`]
/// waits for asleep, woken by the next unlock.
pub(crate) struct DriverLock<T> {
    inner: Mutex<T>,
    sleeper: Sleeper,
}

/// The thread that parks for the lock, and whether it is parked.
struct Sleeper {
    thread: OnceLock<Thread>,
    parked: AtomicBool,
}

/// The lock held. Unlocks, then wakes a parked waiter, when dropped.
pub(crate) struct DriverGuard<'a, T> {
    // Field order is drop order: the mutex is unlocked before the
    // waiter is woken, so that it finds the lock free.
    guard: MutexGuard<'a, T>,
    _wake: WakeOnDrop<'a>,
}

struct WakeOnDrop<'a>(&'a Sleeper);

impl<T> DriverLock<T> {
    pub(crate) fn new(value: T) -> DriverLock<T> {
        DriverLock {
            inner: Mutex::new(value),
            sleeper: Sleeper {
                thread: OnceLock::new(),
                parked: AtomicBool::new(false),
            },
        }
    }

    fn held<'a>(&'a self, guard: MutexGuard<'a, T>) -> DriverGuard<'a, T> {
        DriverGuard {
            guard,
            _wake: WakeOnDrop(&self.sleeper),
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

    /// Waits for the lock without yielding the CPU: spins briefly, then
    /// sleeps until an unlock wakes it. Only ever called by one thread
    /// (the progress thread), the one an unlock wakes.
    pub(crate) fn lock_parking(&self) -> DriverGuard<'_, T> {
        let me = self.sleeper.thread.get_or_init(std::thread::current);
        debug_assert_eq!(me.id(), std::thread::current().id());
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
            // Say we sleep, then look once more: an unlock either comes
            // after the mark, and sees it (the fences order the mark
            // before this look and that unlock before its check), or
            // before this look, which then finds the lock free.
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

impl Drop for WakeOnDrop<'_> {
    fn drop(&mut self) {
        fence(Ordering::SeqCst);
        if self.0.parked.load(Ordering::Relaxed) && self.0.parked.swap(false, Ordering::Relaxed) {
            if let Some(thread) = self.0.thread.get() {
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

    /// A thread that parks for the lock gets it once the holder lets go,
    /// every time, with the holders' writes visible: many short holds by
    /// other threads race each park, and a lost wake-up would hang the
    /// test.
    #[test]
    fn the_parked_thread_gets_the_lock_after_every_unlock() {
        let lock = Arc::new(DriverLock::new(0u64));
        let done = Arc::new(AtomicU64::new(0));
        let holders: Vec<_> = (0..2)
            .map(|_| {
                let (lock, done) = (lock.clone(), done.clone());
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        *lock.lock() += 1;
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        let mut takes = 0u64;
        while done.load(Ordering::SeqCst) < 2 {
            let mut held = lock.lock_parking();
            *held += 1;
            takes += 1;
        }
        for holder in holders {
            holder.join().unwrap();
        }
        assert_eq!(*lock.lock(), 40_000 + takes);
    }

    /// An unlock with nobody parked wakes nobody; a parked thread is
    /// woken by the unlock of a guard held while it parked.
    #[test]
    fn an_unlock_wakes_the_thread_parked_for_it() {
        let lock = Arc::new(DriverLock::new(()));
        let held = lock.lock();
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || drop(lock.lock_parking()))
        };
        while !lock.sleeper.parked.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        drop(held);
        waiter.join().unwrap();
        assert!(!lock.sleeper.parked.load(Ordering::SeqCst));
    }
}
