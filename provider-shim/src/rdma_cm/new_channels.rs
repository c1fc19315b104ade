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
//! round trip may hold.

use parking_lot::lock_api::{RawRwLock as _, RawRwLockTimed as _};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// Taken alone while a channel is made, shared by writes to numbers that
/// were channels.
static LOCK: parking_lot::RawRwLock = parking_lot::RawRwLock::INIT;
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

/// A write's share of the lock: no channel is made while it is held.
/// Not a guard that gives the lock back when dropped: the write is a
/// cancellation point, and a cancelled thread leaves through frames that
/// must hold nothing to drop (`blocking_wait`). Such a thread leaves its
/// share taken, and channels are then made after [`MAKER_WAIT`].
pub struct NoNewChannel(());

/// Takes a share of the lock for a write to `fd` if the number was ever
/// a channel, to hold from its look at the number to its end. Waits
/// without parking the thread, by yields and naps, both safe in a signal
/// handler (the write may come from one).
pub fn no_new_channel(fd: i32) -> Option<NoNewChannel> {
    if !super::fds::ever_channel(fd) || MAKING.with(Cell::get) {
        return None;
    }
    let since = Instant::now();
    for tried in 0.. {
        if LOCK.try_lock_shared() {
            return Some(NoNewChannel(()));
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

/// Gives a write's share back.
pub fn new_channels_again(share: Option<NoNewChannel>) {
    if let Some(NoNewChannel(())) = share {
        // SAFETY: a `NoNewChannel` is only made by `no_new_channel` once
        // it took a share, and is consumed here: each share is given back
        // once, by the one who took it.
        unsafe { LOCK.unlock_shared() }
    }
}

/// Held while a channel is made. Gives the lock back when dropped.
pub struct MakingAChannel(());

/// Takes the lock alone, waiting for writes that hold a share at most
/// [`MAKER_WAIT`] (then the channel is made without it).
pub fn making_a_channel() -> Option<MakingAChannel> {
    // Made only once taken: a guard made and dropped would give back a
    // lock never taken.
    if !LOCK.try_lock_exclusive_for(MAKER_WAIT) {
        return None;
    }
    MAKING.with(|m| m.set(true));
    Some(MakingAChannel(()))
}

impl Drop for MakingAChannel {
    fn drop(&mut self) {
        MAKING.with(|m| m.set(false));
        // SAFETY: made only by `making_a_channel` once it took the lock
        // alone, on this thread; dropped once.
        unsafe { LOCK.unlock_exclusive() }
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
