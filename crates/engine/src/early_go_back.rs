//! Going back before the local ACK timeout, when the round trip says a
//! packet was lost.
//!
//! A responder sends one PSN sequence NAK per gap and drops the requests
//! after it until the missing one arrives (rxe likewise). If that NAK, the
//! packet sent again after it, or the last packet of a burst is lost,
//! nothing answers the requester until its local ACK timeout: 67 ms for
//! the `timeout` of 14 most programs set, where the round trip is
//! microseconds. Under 1% loss on loopback those timeouts were 60% of a
//! WRITE stream's time (docs/perf-profile.md, "Where the time goes under
//! 1% loss").
//!
//! So an RC requester on the wire measures its round trip (from a packet
//! asking for an ACK to the ACK that covers it, never from a packet sent
//! again: Karn's rule) and, when nothing new has been acknowledged for
//! four round trips, and at least [`FLOOR`] (32 ms), goes back to its oldest
//! unacknowledged PSN as the timeout would, without spending a retry.
//! Each further early go-back without progress waits twice as long; the
//! local ACK timeout runs as before, so `retry_cnt` and RETRY_EXC_ERR keep
//! their meaning. A responder takes what is sent again as duplicates. The
//! early go-back is resending, not a new rule of the protocol: a requester
//! may send again what is unacknowledged at any time.

use crate::time::Nanos;
use softverbs_wire::Psn;

/// The earliest an early go-back comes after the last progress. Longer
/// than a softverbs peer may keep an ACK for its application's next verb
/// (up to 16 ms where polls are slow, as under an emulator: the
/// transport's `kept_packets.rs` and `receive_owner.rs`), with room for
/// scheduler ticks (4 ms at `CONFIG_HZ=250`) on top, so that an ACK kept,
/// or a peer the scheduler merely delays, is not taken for a loss and
/// answered with everything sent again.
pub(crate) const FLOOR: Nanos = 32_000_000;
/// Round trips without progress before an early go-back.
const ROUND_TRIPS: Nanos = 4;
/// Doublings of the wait after as many early go-backs without progress,
/// at most.
const MAX_BACKOFF: u32 = 6;

/// One QP's round trip and early go-back timer.
#[derive(Debug, Default)]
pub(crate) struct EarlyGoBack {
    /// Smoothed round trip, once measured.
    srtt: Option<Nanos>,
    /// The packet being timed: its PSN and when it was sent.
    timing: Option<(Psn, Nanos)>,
    /// When to go back, unless progress comes first.
    at: Option<Nanos>,
    /// Early go-backs since the last progress.
    backoff: u32,
}

impl EarlyGoBack {
    /// A packet asking for an ACK was sent for the first time at `now`.
    pub(crate) fn sent_ack_request(&mut self, psn: Psn, now: Nanos) {
        if self.timing.is_none() {
            self.timing = Some((psn, now));
        }
    }

    /// The responder acknowledged every PSN through `acked` at `now`: new
    /// progress.
    pub(crate) fn acknowledged(&mut self, acked: Psn, now: Nanos) {
        self.backoff = 0;
        if let Some((psn, sent)) = self.timing {
            if psn.distance(acked) >= 0 {
                let sample = now.saturating_sub(sent);
                self.srtt = Some(match self.srtt {
                    Some(srtt) => srtt - srtt / 8 + sample / 8,
                    None => sample,
                });
                self.timing = None;
            }
        }
    }

    /// The requester went back: what it sends again is not timed.
    pub(crate) fn went_back(&mut self) {
        self.timing = None;
    }

    /// The local ACK timeout started at `since` with length `timeout`:
    /// go back early after four round trips, if that comes sooner.
    pub(crate) fn arm(&mut self, since: Nanos, timeout: Option<Nanos>) {
        self.at = self
            .wait()
            .filter(|&wait| timeout.is_none_or(|t| wait < t))
            .map(|wait| since.saturating_add(wait));
    }

    /// No early go-back is due (progress, an RNR wait, the timeout itself).
    pub(crate) fn disarm(&mut self) {
        self.at = None;
    }

    /// When the early go-back is due.
    pub(crate) fn due_at(&self) -> Option<Nanos> {
        self.at
    }

    /// Whether the early go-back is due at `now`; if so the next waits
    /// twice as long, from `now`, while before `timeout_at`. (What is
    /// timed stops being timed as the requester goes back: `went_back`.)
    pub(crate) fn fire(&mut self, now: Nanos, timeout_at: Option<Nanos>) -> bool {
        if self.at.is_none_or(|at| at > now) {
            return false;
        }
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
        self.at = self
            .wait()
            .map(|wait| now.saturating_add(wait))
            .filter(|&at| timeout_at.is_none_or(|t| at < t));
        true
    }

    /// How long after the last progress to go back: four round trips, at
    /// least the floor, doubled per early go-back without progress
    /// (saturating: the embedder's clock is not checked).
    fn wait(&self) -> Option<Nanos> {
        self.srtt.map(|srtt| {
            ROUND_TRIPS
                .saturating_mul(srtt)
                .max(FLOOR)
                .saturating_mul(1 << self.backoff)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn nothing_is_armed_before_a_round_trip_was_measured() {
        let mut early = EarlyGoBack::default();
        early.arm(0, Some(67 * MS));
        assert_eq!(early.due_at(), None);
    }

    #[test]
    fn after_a_measured_round_trip_it_goes_back_at_the_floor_then_backs_off() {
        let timeout = Some(537 * MS);
        let mut early = EarlyGoBack::default();
        early.sent_ack_request(Psn::new_masked(10), 0);
        early.acknowledged(Psn::new_masked(10), 20_000);
        early.arm(100, timeout);
        assert_eq!(
            early.due_at(),
            Some(100 + FLOOR),
            "4 x 20 us is under the floor"
        );
        assert!(!early.fire(FLOOR, timeout));
        for (fired, next) in [(1, 3), (3, 7), (7, 15)] {
            assert!(early.fire(100 + fired * FLOOR, timeout));
            assert_eq!(early.due_at(), Some(100 + next * FLOOR), "twice as long");
        }
        assert!(early.fire(100 + 15 * FLOOR, timeout));
        assert_eq!(early.due_at(), None, "not past the local ACK timeout");
        early.acknowledged(Psn::new_masked(11), 600 * MS);
        early.arm(600 * MS, timeout);
        assert_eq!(
            early.due_at(),
            Some(600 * MS + FLOOR),
            "progress: from the floor again"
        );
    }

    #[test]
    fn a_long_round_trip_waits_four_of_them() {
        let mut early = EarlyGoBack::default();
        early.sent_ack_request(Psn::new_masked(0), 0);
        early.acknowledged(Psn::new_masked(0), 10 * MS);
        const { assert!(40 * MS > FLOOR) };
        early.arm(0, Some(537 * MS));
        assert_eq!(early.due_at(), Some(40 * MS));
        early.arm(0, Some(40 * MS));
        assert_eq!(early.due_at(), None, "the local ACK timeout comes first");
        early.arm(0, None);
        assert_eq!(early.due_at(), Some(40 * MS), "timeout 0 waits forever");
    }

    #[test]
    fn times_from_a_clock_near_its_end_saturate() {
        let mut early = EarlyGoBack::default();
        early.sent_ack_request(Psn::new_masked(0), 0);
        early.acknowledged(Psn::new_masked(0), u64::MAX / 2);
        early.arm(u64::MAX - 5, None);
        assert_eq!(early.due_at(), Some(u64::MAX));
        assert!(early.fire(u64::MAX, None));
        assert_eq!(early.due_at(), Some(u64::MAX));
    }

    #[test]
    fn a_packet_sent_again_is_not_timed_and_the_average_is_smoothed() {
        let mut early = EarlyGoBack::default();
        early.sent_ack_request(Psn::new_masked(5), 0);
        early.went_back();
        early.acknowledged(Psn::new_masked(5), 50 * MS);
        assert_eq!(early.srtt, None, "Karn: the ACK may be the resend's");
        early.sent_ack_request(Psn::new_masked(6), 0);
        early.sent_ack_request(Psn::new_masked(7), 1_000);
        early.acknowledged(Psn::new_masked(5), 8_000);
        assert_eq!(early.srtt, None, "PSN 6 not yet acknowledged");
        early.acknowledged(Psn::new_masked(7), 8_000);
        assert_eq!(early.srtt, Some(8_000), "timed from PSN 6, the first");
        early.sent_ack_request(Psn::new_masked(8), 10_000);
        early.acknowledged(Psn::new_masked(8), 26_000);
        assert_eq!(early.srtt, Some(8_000 - 1_000 + 2_000));
    }
}
