//! No channel is made between a write's look at its number and the write.
//!
//! A `write` looks at its number (`fds`), then writes. A number that was a
//! channel once may become one again between the two: another thread
//! closed the channel and opened a new one, which took the lowest free
//! number. The write went into the new channel's socket pair as plain
//! bytes; librdmacm took them for an answer, logged an unmatched event,
//! and its syslog socket took the number next (other writes then failed
//! with ENOTCONN), where the kernel's file runs such a write as a command.
//! So a write to a number that was ever a channel holds a share of a lock
//! from its look to its end ([`no_new_channel`]), and a channel is made
//! holding it alone ([`making_a_channel`]).
//!
//! Both waits are bounded, and past them each side goes on without the
//! lock (the race comes back, nothing hangs): a write that blocks (a full
//! pipe that took a former channel's number) holds its share as long,
//! and making a channel waits for the service's lock, which a slow daemon
//! round trip may hold. Meanwhile writes to numbers that were channels
//! wait for the channel being made.
//!
//! A `fork` copies the lock as the parent's threads hold it, and a
//! parking_lot lock given back in the child may hand itself to a parked
//! thread the child does not have: a child takes a fresh lock of its own
//! (one of [`GENERATIONS`], one per level of forking; past the last, no
//! lock), and what the forking thread held goes back to the old one.

use parking_lot::lock_api::{RawRwLock as _, RawRwLockTimed as _};
use parking_lot::RawRwLock;
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

/// Forks deep a process can go and still have a lock of its own.
const GENERATIONS: usize = 16;
/// Each is taken alone while a channel is made, shared by writes to
/// numbers that were channels: the process's is `LOCKS[GENERATION]`.
static LOCKS: [RawRwLock; GENERATIONS] = [const { RawRwLock::INIT }; GENERATIONS];
/// How many forks from the first process this one is.
static GENERATION: AtomicUsize = AtomicUsize::new(0);
/// How long making a channel waits for writes in flight at most.
const MAKER_WAIT: Duration = Duration::from_millis(100);
/// How long a write waits for a channel being made at most. Longer than
/// the maker's wait: a maker descheduled on a loaded host holds the lock
/// for a while, and giving up early is the race itself.
const WRITER_WAIT: Duration = Duration::from_secs(1);
/// Tries of a waiting write that only yield the processor; it sleeps
/// briefly between the later ones.
const YIELDS: u32 = 64;
const NAP: Duration = Duration::from_micros(50);

thread_local! {
    /// This thread is making a channel: a write from a signal handler
    /// that interrupted it must not wait for itself.
    static MAKING: Cell<bool> = const { Cell::new(false) };
}

/// This process's lock and its generation, if it has one.
fn lock() -> Option<(usize, &'static RawRwLock)> {
    let generation = GENERATION.load(Ordering::Relaxed);
    LOCKS.get(generation).map(|l| (generation, l))
}

/// A write's share of the lock of a generation: no channel is made while
/// it is held. Not a guard that gives the lock back when dropped: the
/// write is a cancellation point, and a cancelled thread leaves through
/// frames that must hold nothing to drop (`blocking_wait`). Such a thread
/// leaves its share taken for good: each later channel is made after
/// [`MAKER_WAIT`], unprotected, and writes to former channels' numbers
/// wait meanwhile.
pub struct NoNewChannel(usize);

/// Takes a share of the lock for a write to `fd` if the number was ever
/// a channel, to hold from its look at the number to its end. Waits
/// without parking the thread, by yields and naps, both safe in a signal
/// handler (the write may come from one).
pub fn no_new_channel(fd: i32) -> Option<NoNewChannel> {
    if !super::fds::ever_channel(fd) || MAKING.with(Cell::get) {
        return None;
    }
    let (generation, lock) = lock()?;
    if lock.try_lock_shared() {
        return Some(NoNewChannel(generation));
    }
    // Naps are cancellation points: the wait runs with cancellation off,
    // as the shim's own work does.
    crate::guard::guard(None, || wait_for_share(generation, lock))
}

/// Waits for a share while a channel is made, at most [`WRITER_WAIT`].
fn wait_for_share(generation: usize, lock: &RawRwLock) -> Option<NoNewChannel> {
    let since = Instant::now();
    for tried in 0.. {
        if lock.try_lock_shared() {
            return Some(NoNewChannel(generation));
        }
        if since.elapsed() > WRITER_WAIT {
            break;
        }
        match tried < YIELDS {
            true => std::thread::yield_now(),
            false => std::thread::sleep(NAP),
        }
    }
    None
}

/// Gives a write's share back, to the lock it was taken of. The last
/// share given back wakes a maker parked for the lock (parking_lot's
/// parking table has a lock of its own: a write from a signal handler
/// that interrupted a thread holding it would wait for ever; not
/// handled).
pub fn new_channels_again(share: Option<NoNewChannel>) {
    if let Some(NoNewChannel(generation)) = share {
        // SAFETY: a `NoNewChannel` is only made by `no_new_channel` once
        // it took a share of `LOCKS[generation]`, and is consumed here:
        // each share is given back once, to the lock it was taken of.
        unsafe { LOCKS[generation].unlock_shared() }
    }
}

/// Held while a channel is made, on the thread that makes it (it marks
/// that thread). Gives the lock back when dropped.
pub struct MakingAChannel(usize, PhantomData<*const ()>);

/// Takes the lock alone, waiting for writes that hold a share, or another
/// channel being made, at most [`MAKER_WAIT`] (then the channel is made
/// without it).
pub fn making_a_channel() -> Option<MakingAChannel> {
    static AT_FORK: Once = Once::new();
    // SAFETY: registers a function that only adds to an atomic.
    AT_FORK.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(next_generation));
    });
    let (generation, lock) = lock()?;
    // Made only once taken: a guard made and dropped would give back a
    // lock never taken.
    if !lock.try_lock_exclusive_for(MAKER_WAIT) {
        return None;
    }
    MAKING.with(|m| m.set(true));
    Some(MakingAChannel(generation, PhantomData))
}

/// In a child after `fork`: the next lock is this process's.
extern "C" fn next_generation() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

impl Drop for MakingAChannel {
    fn drop(&mut self) {
        MAKING.with(|m| m.set(false));
        // SAFETY: made only by `making_a_channel` once it took
        // `LOCKS[self.0]` alone, on this thread; dropped once.
        unsafe { LOCKS[self.0].unlock_exclusive() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_to_a_former_channel_holds_off_a_new_channel() {
        super::super::fds::set_channel(4091, true);
        super::super::fds::set_channel(4091, false);
        assert!(no_new_channel(4090).is_none(), "never a channel: no lock");
        let share = no_new_channel(4091);
        assert!(share.is_some());
        let maker = std::thread::spawn(|| making_a_channel().is_some());
        // The maker waits its whole bound for the share, then goes on.
        assert!(!maker.join().unwrap());
        new_channels_again(share);
        let making = making_a_channel();
        assert!(making.is_some());
        // A write on the making thread (a signal handler's) does not wait.
        assert!(no_new_channel(4091).is_none());
        let writer = std::thread::spawn(|| {
            let share = no_new_channel(4091);
            let took = share.is_some();
            new_channels_again(share);
            took
        });
        drop(making);
        assert!(
            writer.join().unwrap(),
            "the write waits for the channel to be made"
        );
    }
}
