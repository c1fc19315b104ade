//! After an RNR wait, the first packet goes alone.
//!
//! A responder without a receive WR answers the packet it finds none for
//! with an RNR NAK and drops those behind it; the requester goes back to
//! that packet once the RNR wait ends (0.64 ms at perftest's
//! `min_rnr_timer` of 12). A peer without receive WRs is a peer that is
//! behind: the packets sent after the refused one may still wait, unread,
//! in its receive buffer when the wait ends, and sending them all again
//! at once put up to two copies of the window into a buffer sized to one
//! (after an RNR wait, 15 packets in a buffer for 8: `send_window.rs`,
//! `a_go_back_never_fills_a_slow_receivers_buffer_past_the_window`).
//!
//! So the first packet sent again asks for an ACK and goes alone. The peer
//! reads it after everything sent before it (its socket is a queue), so
//! the answer to it, an ACK that covers it or another RNR NAK for it, says
//! that nothing older is left in the buffer, and the rest follows. That
//! costs a round trip per RNR wait. Needed only when something was sent
//! after the refused packet: when it was the last packet sent, the RNR
//! NAK already says the buffer is empty.
//!
//! Not after a loss (a PSN sequence NAK, a timeout): a peer that NAKed a
//! gap reads on while its NAK travels, the loss window halves what is sent
//! again (`loss_window.rs`), and a probe lost on a lossy path stops the
//! QP until the early go-back, 32 ms (with probes after every go-back,
//! SEND under 1% injected loss ran about 10% slower and sent 16% more
//! packets again).
//!
//! Pure state: the requester says what it sent and what came back
//! (`requester.rs`, `completer.rs`).

use softverbs_wire::Psn;

/// One RC requester's probe after an RNR wait.
#[derive(Debug, Default)]
pub(crate) struct RnrProbe {
    /// The PSN sent alone, until an answer to it comes.
    pending: Option<Psn>,
    /// The PSN of the last request packet sent.
    last_sent: Option<Psn>,
}

impl RnrProbe {
    /// An RNR NAK for `psn` came: the requester goes back to it after the
    /// RNR wait, alone if something was sent after it. One that answers
    /// the probe (the last packet sent) ends the probing: nothing older
    /// is left in the peer's buffer.
    pub(crate) fn rnr_nak(&mut self, psn: Psn) {
        let sent_after = self.last_sent.is_some_and(|last| last != psn);
        self.pending = sent_after.then_some(psn);
    }

    /// A request packet with `psn` was sent.
    pub(crate) fn sent(&mut self, psn: Psn) {
        self.last_sent = Some(psn);
    }

    /// Whether the packet at `psn` waits for the answer to the probe:
    /// those after it. One before it (a READ asked for again, its
    /// responses lost) goes: the probe comes after it, and holding it
    /// held the probe too, until the local ACK timeout used up the
    /// retries.
    pub(crate) fn holds(&self, psn: Psn) -> bool {
        self.pending.is_some_and(|probe| probe.distance(psn) > 0)
    }

    /// Whether the packet at `psn` is the probe (it asks for an ACK).
    pub(crate) fn is_probe(&self, psn: Psn) -> bool {
        self.pending == Some(psn)
    }

    /// The responder acknowledged every PSN through `acked`.
    pub(crate) fn acknowledged(&mut self, acked: Psn) {
        if self.pending.is_some_and(|probe| probe.distance(acked) >= 0) {
            self.pending = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn psn(n: u32) -> Psn {
        Psn::new_masked(n)
    }

    /// Sent 10..=17, 10 refused: after the wait 10 goes, 11 waits for
    /// its answer.
    fn probing() -> RnrProbe {
        let mut p = RnrProbe::default();
        (10..18).for_each(|n| p.sent(psn(n)));
        p.rnr_nak(psn(10));
        p
    }

    #[test]
    fn after_an_rnr_nak_the_first_packet_goes_alone_until_acknowledged() {
        let mut p = probing();
        assert!(p.is_probe(psn(10)) && !p.holds(psn(10)));
        p.sent(psn(10));
        assert!(p.holds(psn(11)));
        p.acknowledged(psn(9));
        assert!(p.holds(psn(11)), "an ACK before the probe answers nothing");
        p.acknowledged(psn(10));
        assert!(!p.holds(psn(11)) && !p.is_probe(psn(10)));
    }

    #[test]
    fn an_rnr_nak_for_the_probe_ends_the_probing() {
        let mut p = probing();
        p.rnr_nak(psn(10));
        assert!(p.holds(psn(11)), "a repeated NAK before the probe went");
        p.sent(psn(10));
        p.rnr_nak(psn(10));
        assert!(
            !p.holds(psn(11)) && !p.is_probe(psn(10)),
            "the buffer held nothing after the probe: all goes again"
        );
    }

    #[test]
    fn packets_before_the_probe_are_not_held() {
        let p = probing();
        assert!(!p.holds(psn(9)), "a READ asked for again goes");
    }

    #[test]
    fn no_probe_when_nothing_was_sent_after_the_refused_packet() {
        let mut p = RnrProbe::default();
        p.sent(psn(10));
        p.rnr_nak(psn(10));
        assert!(!p.holds(psn(11)) && !p.is_probe(psn(10)));
    }
}
