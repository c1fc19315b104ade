//! Pacing of a UC or UD requester told of congestion.
//!
//! RC keeps no more in flight than its window (`flow_control.rs`,
//! `loss_window.rs`); UC and UD have no acknowledgements and so no window:
//! a stream of them into a receiver slower than its sender fills the
//! receiver's socket until the kernel drops datagrams, and a UC message
//! or UD datagram lost is lost. The receiver tells the sender with CNPs
//! (`cnp.rs`), as a RoCE NIC's notification point does when ECN marks
//! reach it, and the sender answers as DCQCN's reaction point does, in a
//! simpler form:
//!
//! - the first notice caps its rate at half of what it was sending, each
//!   later one (at most one per [`CUT_INTERVAL`]) halves the cap; the
//!   rate before a cut is the target;
//! - every [`RAISE_INTERVAL`] without a notice the cap goes halfway to
//!   the target (DCQCN's fast recovery) and the target grows by
//!   [`RAISE_STEP`] (its additive increase), so slowly because a
//!   receiver waiting for a CPU sends no notices while its queue fills
//!   (a cap raised by a fraction each interval, or lifted after 20 ms
//!   without a notice, outgrew what such a receiver takes in);
//! - the cap is lifted once its target passes [`LIFT_RATE`], 1.6 s after
//!   the last notice from the least rate.
//!
//! Packets leave as a token bucket of [`BURST`] bytes lets them, kept as
//! the time by which everything sent would have drained at the rate (so
//! no fraction of a byte earned is lost to rounding): a paced sender
//! still fills a GSO batch at a time.

use crate::time::Nanos;

/// Notices closer together than this cut the rate once: the first
/// notice's cut needs a round trip to show at the receiver.
pub(crate) const CUT_INTERVAL: Nanos = 50_000;
/// A quiet interval this long raises the cap halfway to its target, and
/// the target by [`RAISE_STEP`].
pub(crate) const RAISE_INTERVAL: Nanos = 100_000;
/// What a quiet interval adds to the target, bytes a second: 10 MiB/s a
/// millisecond, 10 GiB/s a second. (8 MiB/s lost datagrams under load:
/// between two notices a receiver waiting for a CPU sent none for 175 ms,
/// in which the target grew past 12 GiB/s.)
const RAISE_STEP: u64 = 1 << 20;
/// A cap whose target grows past this, bytes a second, is lifted.
const LIFT_RATE: u64 = 16 << 30;
/// The bytes a paced sender may send at once after a pause.
pub(crate) const BURST: u64 = 64 << 10;
/// The least cap, bytes a second: a sender is never held much longer
/// than a millisecond for a packet.
const MIN_RATE: u64 = 32 << 20;
/// The rate assumed before anything was measured.
const UNMEASURED_RATE: u64 = 1 << 30;
/// Sending is measured over windows at least this long (and at most
/// twice as long: a longer one was mostly idle).
const MEASURE_WINDOW: Nanos = 1_000_000;
/// A window shorter than this is too short to measure by: the rate
/// of the window before stands for it.
const SHORTEST_MEASURE: Nanos = 100_000;
const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The pacing state of one requester.
#[derive(Debug, Default)]
pub(crate) struct Pacer {
    cap: Option<Cap>,
    /// Bytes sent since `since`, and the rate measured over the window
    /// before: what the first notice halves.
    sent: u64,
    since: Nanos,
    last_rate: Option<u64>,
    /// The next packet waits until then (the requester's timer).
    held_until: Option<Nanos>,
}

/// A cap on the rate, and its token bucket.
#[derive(Debug)]
struct Cap {
    /// Bytes a second.
    rate: u64,
    /// What quiet intervals raise the rate towards: the rate before the
    /// last cut, grown since.
    target: u64,
    /// When the rate was last cut.
    cut_at: Nanos,
    /// When the rate was last cut or raised.
    changed_at: Nanos,
    /// When everything sent so far would have left at the rate: a packet
    /// may leave while that is at most a [`BURST`] ahead of now.
    drained_at: Nanos,
}

impl Pacer {
    /// A CNP arrived for this requester at `now`.
    pub(crate) fn notice(&mut self, now: Nanos) {
        // A cap that quiet has raised past lifting (nothing was sent to
        // find out) counts as lifted.
        let lifted = self.cap.as_mut().is_none_or(|cap| cap.raise(now));
        match self.cap.as_mut().filter(|_| !lifted) {
            Some(cap) => {
                if now.saturating_sub(cap.cut_at) >= CUT_INTERVAL {
                    cap.target = cap.rate;
                    cap.set_rate(now, (cap.rate / 2).max(MIN_RATE));
                    cap.cut_at = now;
                    cap.changed_at = now;
                }
            }
            None => {
                let target = self.recent_rate(now).max(MIN_RATE);
                let rate = (target / 2).max(MIN_RATE);
                // No burst right after the notice: one packet, then the
                // rate.
                self.cap = Some(Cap {
                    rate,
                    target,
                    cut_at: now,
                    changed_at: now,
                    drained_at: now + time_for(BURST, rate),
                });
            }
        }
    }

    /// When the next packet may leave, if not now; the requester's timer
    /// is then set for it ([`Pacer::deadline`]).
    pub(crate) fn hold(&mut self, now: Nanos) -> Option<Nanos> {
        let cap = self.cap.as_mut()?;
        if cap.raise(now) {
            self.cap = None;
            self.held_until = None;
            return None;
        }
        let may_leave_at = cap.drained_at.saturating_sub(time_for(BURST, cap.rate));
        self.held_until = (may_leave_at > now).then_some(may_leave_at);
        self.held_until
    }

    /// A packet of `len` bytes left at `now`.
    pub(crate) fn sent(&mut self, now: Nanos, len: usize) {
        let len = len as u64;
        if let Some(cap) = self.cap.as_mut() {
            cap.drained_at = cap.drained_at.max(now) + time_for(len, cap.rate);
        }
        let window = now.saturating_sub(self.since);
        if window >= MEASURE_WINDOW {
            // A window stretched by idleness (or the first, from time 0)
            // says nothing of the rate a burst after it sends at.
            self.last_rate = (window < 2 * MEASURE_WINDOW).then(|| rate_of(self.sent, window));
            (self.sent, self.since) = (0, now);
        }
        self.sent += len;
    }

    /// The requester's timer fired at `now`: a hold that ended is over.
    pub(crate) fn release(&mut self, now: Nanos) {
        if self.held_until.is_some_and(|at| at <= now) {
            self.held_until = None;
        }
    }

    /// When the held packet may leave, if one is held.
    pub(crate) fn deadline(&self) -> Option<Nanos> {
        self.held_until
    }

    /// The rate capped, bytes a second, if it is.
    #[cfg(test)]
    pub(crate) fn cap(&self) -> Option<u64> {
        self.cap.as_ref().map(|c| c.rate)
    }

    /// What the requester has been sending at, bytes a second.
    fn recent_rate(&self, now: Nanos) -> u64 {
        let window = now.saturating_sub(self.since);
        let current = (window >= SHORTEST_MEASURE).then(|| rate_of(self.sent, window));
        match (current, self.last_rate) {
            (Some(c), Some(l)) => c.max(l),
            (Some(r), None) | (None, Some(r)) => r,
            (None, None) => UNMEASURED_RATE,
        }
    }
}

impl Cap {
    /// Raises the rate for each quiet interval since it last changed;
    /// true if its target passed [`LIFT_RATE`].
    fn raise(&mut self, now: Nanos) -> bool {
        let mut rate = self.rate;
        while now.saturating_sub(self.changed_at) >= RAISE_INTERVAL {
            if self.target > LIFT_RATE {
                return true;
            }
            self.target += RAISE_STEP;
            rate = (rate + self.target) / 2;
            self.changed_at += RAISE_INTERVAL;
        }
        if rate != self.rate {
            self.set_rate(now, rate);
        }
        false
    }

    /// Changes the rate at `now`: what is still to drain drains at the new
    /// rate.
    fn set_rate(&mut self, now: Nanos, rate: u64) {
        if let Some(left) = self.drained_at.checked_sub(now) {
            let bytes = u128::from(left) * u128::from(self.rate) / NANOS_PER_SEC;
            let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
            self.drained_at = now + time_for(bytes, rate);
        }
        self.rate = rate;
    }
}

/// How long `bytes` take at `rate` bytes a second, rounded up.
fn time_for(bytes: u64, rate: u64) -> Nanos {
    let t = (u128::from(bytes) * NANOS_PER_SEC).div_ceil(u128::from(rate.max(1)));
    Nanos::try_from(t).unwrap_or(Nanos::MAX)
}

fn rate_of(bytes: u64, window: Nanos) -> u64 {
    let r = u128::from(bytes) * NANOS_PER_SEC / u128::from(window.max(1));
    u64::try_from(r).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    /// Sends `len`-byte packets as fast as the pacer lets from `start`
    /// for `for_ns`; returns the bytes sent and the time it ended.
    fn send_paced(p: &mut Pacer, start: Nanos, for_ns: Nanos, len: usize) -> (u64, Nanos) {
        let (mut now, mut bytes) = (start, 0);
        while now < start + for_ns {
            match p.hold(now) {
                Some(at) => {
                    assert!(at > now);
                    now = at;
                    p.release(now);
                }
                None => {
                    p.sent(now, len);
                    bytes += len as u64;
                    now += 100; // 4 KiB in 100 ns: 40 GB/s unpaced
                }
            }
        }
        (bytes, now)
    }

    #[test]
    fn an_unnoticed_sender_is_never_held() {
        let mut p = Pacer::default();
        for i in 0..10_000 {
            assert_eq!(p.hold(i * 10), None);
            p.sent(i * 10, 4096);
        }
        assert_eq!(p.deadline(), None);
    }

    #[test]
    fn the_first_notice_halves_what_was_sent() {
        let mut p = Pacer::default();
        // 1 GB/s for 2 ms: 4 KiB every 4096 ns.
        let mut now = 0;
        while now < 2 * MS {
            p.sent(now, 4096);
            now += 4096;
        }
        p.notice(now);
        let cap = p.cap().unwrap();
        assert!((450_000_000..550_000_000).contains(&cap), "{cap}");
    }

    #[test]
    fn a_burst_after_idleness_is_not_taken_for_a_slow_sender() {
        let mut p = Pacer::default();
        let mut now = 10 * MS;
        // 4 KiB every 4096 ns for 50 us, after 10 ms of nothing (and a
        // first window from time 0).
        while now < 10 * MS + 50_000 {
            p.sent(now, 4096);
            now += 4096;
        }
        p.notice(now);
        assert_eq!(p.cap(), Some(UNMEASURED_RATE / 2));
    }

    #[test]
    fn a_capped_sender_keeps_to_its_cap_after_a_burst() {
        let mut p = Pacer::default();
        p.notice(0);
        let cap = p.cap().unwrap();
        assert_eq!(cap, UNMEASURED_RATE / 2);
        // Within one raise interval.
        let (bytes, end) = send_paced(&mut p, 0, RAISE_INTERVAL - 1, 4096);
        // The notice leaves no credit: one packet, then the rate.
        let at_rate = cap * end / 1_000_000_000;
        assert!(bytes <= at_rate + 2 * 4096, "{bytes} > {at_rate}");
        assert!(bytes + 4096 >= at_rate, "{bytes} far below {at_rate}");
    }

    #[test]
    fn notices_close_together_cut_once() {
        let mut p = Pacer::default();
        p.notice(0);
        let first = p.cap().unwrap();
        p.notice(CUT_INTERVAL / 2);
        assert_eq!(p.cap(), Some(first));
        p.notice(CUT_INTERVAL);
        assert_eq!(p.cap(), Some(first / 2));
    }

    #[test]
    fn the_cap_never_falls_below_the_least_rate() {
        let mut p = Pacer::default();
        for i in 0..64 {
            p.notice(i * CUT_INTERVAL);
        }
        assert_eq!(p.cap(), Some(MIN_RATE));
        assert!(p
            .hold(64 * CUT_INTERVAL)
            .is_none_or(|at| at - 64 * CUT_INTERVAL <= 2 * MS));
    }

    #[test]
    fn quiet_raises_the_cap_towards_its_target_then_lifts_it() {
        let mut p = Pacer::default();
        p.notice(0);
        let cap = p.cap().unwrap();
        assert_eq!(cap, UNMEASURED_RATE / 2);
        assert_eq!(p.hold(RAISE_INTERVAL), None);
        let target = UNMEASURED_RATE + RAISE_STEP;
        assert_eq!(p.cap(), Some((cap + target) / 2));
        // A millisecond adds 10 MiB/s to the target: the cap stays near
        // it, nowhere near unbounded.
        assert_eq!(p.hold(11 * RAISE_INTERVAL), None);
        let near = UNMEASURED_RATE + 11 * RAISE_STEP;
        assert!(p.cap().unwrap() <= near && p.cap().unwrap() > near * 9 / 10);
        // (16 GiB/s - 1 GiB/s) / 1 MiB/s: 15,360 intervals.
        assert_eq!(p.hold(15_300 * RAISE_INTERVAL), None);
        assert!(p.cap().is_some());
        assert_eq!(p.hold(15_400 * RAISE_INTERVAL), None);
        assert_eq!(p.cap(), None);
        assert_eq!(p.deadline(), None);
    }

    #[test]
    fn a_notice_after_a_quiet_long_enough_to_lift_starts_afresh() {
        let mut p = Pacer::default();
        p.notice(0);
        // Nothing sent, nothing held: the cap was never looked at, and
        // is not cut from the 16 GiB/s quiet raised it to, but set from
        // what was sent, nothing: the least rate.
        let later = 20_000 * RAISE_INTERVAL;
        p.notice(later);
        assert_eq!(p.cap(), Some(MIN_RATE));
    }

    #[test]
    fn a_later_notice_cuts_from_the_rate_and_aims_back_at_it() {
        let mut p = Pacer::default();
        p.notice(0);
        let first = p.cap().unwrap();
        p.notice(CUT_INTERVAL);
        assert_eq!(p.cap(), Some(first / 2));
        p.hold(CUT_INTERVAL + RAISE_INTERVAL);
        assert_eq!(p.cap(), Some((first / 2 + first + RAISE_STEP) / 2));
    }

    #[test]
    fn a_release_before_the_hold_ends_keeps_it() {
        let mut p = Pacer::default();
        p.notice(0);
        p.sent(0, BURST as usize + 4096);
        let at = p.hold(0).unwrap();
        p.release(at - 1);
        assert_eq!(p.deadline(), Some(at));
        p.release(at);
        assert_eq!(p.deadline(), None);
        assert_eq!(p.hold(at), None);
    }
}
