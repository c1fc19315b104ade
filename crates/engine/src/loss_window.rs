//! How many packets an RC requester keeps in flight while its path loses
//! packets: TCP's congestion window (RFC 5681, with NewReno's recovery
//! point, RFC 6582) for a go-back-N sender.
//!
//! A go-back resends every packet sent after the lost one, so a loss with
//! a full send window of 1,024 packets in flight costs up to 1,024 packets.
//! Halving at each loss and growing back by half at every ACK refilled the
//! window within a round trip or two: behind a rate-limited link (tbf, 200
//! mbit) the queue overflowed again at once and ~89% of the packets were
//! sent again. So the window halves at a loss and grows by a few packets
//! per window acknowledged (per round trip), as TCP's congestion avoidance
//! does by one, back to the send window. Losses of packets sent before the
//! window last halved belong to that loss: the window halves once for them
//! (a repeated go-back while a peer is paused, or a NAK for a resend lost
//! in the same overflow, is the same episode).
//!
//! Pure state: the send window and the PSNs come from the caller
//! (`flow_control.rs`).

use softverbs_wire::Psn;

/// The smallest window, in packets.
pub(crate) const MIN_PKTS: u32 = 2;
/// Packets the window grows by per window acknowledged. TCP's one packet
/// kept a QP on loopback under 1% injected loss at 100 to 300 MB/s, where
/// its round trip is the peer's scheduling (a 2-CPU machine with both ends
/// spinning); four keep it at 260 to 520 MB/s and behind the 200 mbit tbf
/// at the link's rate, as one does; sixteen overfill the tbf's queue
/// again (docs/perf-profile.md, "Loss window").
const GROWTH_PKTS: u32 = 4;

/// One RC requester's loss window.
#[derive(Debug, Default)]
pub(crate) struct LossWindow {
    /// Packets allowed in flight, when fewer than the send window.
    pkts: Option<u32>,
    /// Packets acknowledged toward the next one-packet growth.
    credit: u32,
    /// The PSN after the last one sent when the window last halved: a
    /// loss before it is part of that episode.
    recover: Option<Psn>,
}

impl LossWindow {
    /// Packets the QP may keep unacknowledged, given its send window.
    pub(crate) fn limit(&self, send_window: u32) -> u32 {
        self.pkts.map_or(send_window, |w| w.min(send_window))
    }

    /// The packet `lost` was found lost while every PSN before `sent_end`
    /// had been sent: the window halves, once per episode.
    pub(crate) fn on_loss(&mut self, send_window: u32, lost: Psn, sent_end: Psn) {
        if self.recover.is_some_and(|r| lost.distance(r) > 0) {
            return;
        }
        let half = (self.limit(send_window) / 2).max(MIN_PKTS);
        self.pkts = Some(half);
        self.credit = 0;
        self.recover = Some(sent_end);
    }

    /// `newly` more packets were acknowledged, every one before `acked`
    /// included (none counted for a response that told of congestion:
    /// it only ends an episode). Past the recovery point, the episode is
    /// over (and a point left behind by half the PSN space would read as
    /// ahead again).
    pub(crate) fn on_acked(&mut self, send_window: u32, newly: u32, acked: Psn) {
        if self.recover.is_some_and(|r| r.distance(acked) >= 0) {
            self.recover = None;
        }
        let Some(w) = self.pkts else {
            return;
        };
        self.credit = self.credit.saturating_add(newly);
        let grown = w.saturating_add(self.credit / w * GROWTH_PKTS);
        self.credit %= w;
        self.pkts = (grown < send_window).then_some(grown);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: u32 = 1024;

    fn psn(n: u32) -> Psn {
        Psn::new_masked(n)
    }

    /// Acknowledges `rounds` full windows one packet at a time.
    fn ack_rounds(w: &mut LossWindow, rounds: u32) {
        for _ in 0..rounds {
            for _ in 0..w.limit(WINDOW) {
                w.on_acked(WINDOW, 1, psn(0));
            }
        }
    }

    #[test]
    fn without_loss_the_send_window_holds() {
        let mut w = LossWindow::default();
        w.on_acked(WINDOW, 100, psn(100));
        assert_eq!(w.limit(WINDOW), WINDOW);
    }

    #[test]
    fn a_loss_halves_and_the_window_grows_a_few_packets_per_round_trip() {
        let mut w = LossWindow::default();
        w.on_loss(WINDOW, psn(10), psn(1000));
        assert_eq!(w.limit(WINDOW), 512);
        ack_rounds(&mut w, 3);
        assert_eq!(w.limit(WINDOW), 512 + 3 * GROWTH_PKTS);
    }

    #[test]
    fn losses_of_one_episode_halve_once() {
        let mut w = LossWindow::default();
        w.on_loss(WINDOW, psn(10), psn(1000));
        w.on_loss(WINDOW, psn(10), psn(1100));
        w.on_loss(WINDOW, psn(999), psn(1200));
        assert_eq!(w.limit(WINDOW), 512);
        w.on_loss(WINDOW, psn(1000), psn(1300));
        assert_eq!(w.limit(WINDOW), 256);
    }

    #[test]
    fn the_episode_ends_once_its_packets_are_acknowledged() {
        let mut w = LossWindow::default();
        w.on_loss(WINDOW, psn(10), psn(1000));
        w.on_acked(WINDOW, 989, psn(998));
        let grown = w.limit(WINDOW);
        w.on_loss(WINDOW, psn(999), psn(1500));
        assert_eq!(w.limit(WINDOW), grown, "still the first episode");
        w.on_acked(WINDOW, 1, psn(1000));
        // Half the PSN space later, a loss that reads as before the old
        // point.
        let far = Psn::new_masked(1000 + (1 << 23) + 5);
        w.on_loss(WINDOW, far, far.wrapping_add(10));
        assert_eq!(w.limit(WINDOW), grown / 2);
    }

    #[test]
    fn the_episode_is_judged_across_the_psn_wrap() {
        let mut w = LossWindow::default();
        let near_end = Psn::new_masked(0xff_fff0);
        w.on_loss(WINDOW, near_end, psn(5));
        w.on_loss(WINDOW, psn(2), psn(40));
        assert_eq!(w.limit(WINDOW), 512);
    }

    #[test]
    fn the_window_never_falls_below_its_minimum() {
        let mut w = LossWindow::default();
        for n in 0..20 {
            w.on_loss(WINDOW, psn(n * 10), psn(n * 10 + 1));
        }
        assert_eq!(w.limit(WINDOW), MIN_PKTS);
        ack_rounds(&mut w, 1);
        assert_eq!(w.limit(WINDOW), MIN_PKTS + GROWTH_PKTS);
    }

    #[test]
    fn grown_back_to_the_send_window_it_follows_the_send_window_again() {
        let mut w = LossWindow::default();
        w.on_loss(8, psn(0), psn(8));
        assert_eq!(w.limit(8), 4);
        w.on_acked(8, 3, psn(3));
        assert_eq!(w.limit(8), 4);
        w.on_acked(8, 1, psn(4));
        assert_eq!(w.limit(WINDOW), WINDOW);
    }

    #[test]
    fn a_send_window_smaller_than_the_loss_window_rules() {
        let mut w = LossWindow::default();
        w.on_loss(WINDOW, psn(0), psn(100));
        assert_eq!(w.limit(64), 64);
    }
}
