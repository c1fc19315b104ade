//! How a verb tells the sleeping progress thread that a timer is now due
//! sooner than the deadline it sleeps towards.
//!
//! Waking the thread for that (through the poller's waker) cost a context
//! switch per `ibv_post_send` whenever the thread slept without a timer:
//! in `ib_write_lat` every post starts a retransmit timer, and the thread
//! woke only to set its sleep anew, taking a CPU from the spinning
//! application for it. A timerfd in the thread's poller wakes it only
//! when the deadline comes, and by then the application has usually
//! handled the timer itself or cancelled it (the ACK came).
//!
//! The provider's merged completion channels (a pass-through device's
//! held completions, `merged_fd` in the provider) use the same timer.

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Duration;

/// A one-shot timer on the monotonic clock, readable when it expires.
#[derive(Debug)]
pub struct DeadlineTimer {
    fd: TimerFd,
}

impl DeadlineTimer {
    pub fn new() -> io::Result<DeadlineTimer> {
        let fd = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        Ok(DeadlineTimer { fd })
    }

    /// Expires `after` from now (a timer already armed is replaced).
    pub fn arm(&self, after: Duration) -> io::Result<()> {
        // A zero expiry would disarm the timer instead: a deadline already
        // past expires at once.
        let after = after.max(Duration::from_nanos(1));
        self.fd.set(
            Expiration::OneShot(TimeSpec::from_duration(after)),
            TimerSetTimeFlags::empty(),
        )?;
        Ok(())
    }

    /// Stops it: it does not expire, and an expiry not taken is dropped
    /// (it is no longer readable).
    pub fn disarm(&self) -> io::Result<()> {
        self.fd.unset()?;
        Ok(())
    }

    /// Takes an expiry, so that the next one is reported anew.
    pub fn clear(&self) {
        let mut ticks = [0u8; 8];
        let _ = nix::unistd::read(self.fd.as_fd(), &mut ticks);
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_fd().as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mio::unix::SourceFd;
    use mio::{Events, Interest, Poll, Token};
    use std::time::Instant;

    /// A timer in a poller of its own, as token 7.
    fn timer_in_poll() -> (DeadlineTimer, Poll) {
        let timer = DeadlineTimer::new().unwrap();
        let poll = Poll::new().unwrap();
        let fd = timer.raw_fd();
        poll.registry()
            .register(&mut SourceFd(&fd), Token(7), Interest::READABLE)
            .unwrap();
        (timer, poll)
    }

    #[test]
    fn an_armed_timer_wakes_the_poller_once_at_its_deadline() {
        let (timer, mut poll) = timer_in_poll();
        let mut events = Events::with_capacity(4);
        let start = Instant::now();
        timer.arm(Duration::from_millis(20)).unwrap();
        poll.poll(&mut events, Some(Duration::from_secs(10)))
            .unwrap();
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert_eq!(events.iter().next().map(|e| e.token()), Some(Token(7)));
        timer.clear();
        poll.poll(&mut events, Some(Duration::from_millis(50)))
            .unwrap();
        assert!(events.is_empty(), "one expiry, reported once");
    }

    #[test]
    fn a_past_deadline_expires_at_once() {
        let (timer, mut poll) = timer_in_poll();
        let mut events = Events::with_capacity(4);
        timer.arm(Duration::ZERO).unwrap();
        poll.poll(&mut events, Some(Duration::from_secs(10)))
            .unwrap();
        assert_eq!(events.iter().next().map(|e| e.token()), Some(Token(7)));
    }
}
