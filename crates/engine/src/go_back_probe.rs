//! A go-back's first packet goes alone.
//!
//! When an RC requester goes back (a PSN sequence NAK, an RNR NAK, the
//! local ACK timeout), the packets it sent after the one it goes back to
//! may still wait, unread, in the peer's receive buffer: a peer without a
//! receive WR is one that is behind, and a peer that NAKed a gap reads on
//! while its NAK travels. Sending them all again at once put up to two
//! copies of the window into a buffer sized to one, and the kernel drops
//! what does not fit (after an RNR wait, 15 packets in a buffer for 8:
//! `send_window.rs`, `a_go_back_never_fills_a_slow_receivers_buffer_past_the_window`).
//!
//! So the first packet sent again asks for an ACK and goes alone. The peer
//! reads it after everything sent before it (its socket is a queue), so
//! an answer to it, an ACK that covers it or an RNR NAK for it, says that
//! nothing older is left in the buffer, and the rest follows. A go-back
//! then costs one round trip more, beside an RNR wait or a loss. Needed
//! only when something was sent after the packet's last copy: when that
//! copy was the last packet sent, its answer already says the buffer is
//! empty.
//!
//! Pure state: the requester says what it sent and what came back
//! (`requester.rs`, `completer.rs`).

use softverbs_wire::Psn;

/// One RC requester's probe after a go-back.
#[derive(Debug, Default)]
pub(crate) struct GoBackProbe {
    /// The PSN sent alone, until an answer to it comes.
    pending: Option<Psn>,
    /// The PSN of the last request packet sent.
    last_sent: Option<Psn>,
}

impl GoBackProbe {
    /// The requester went back to `psn`. It goes alone if something was
    /// sent after its last copy, or while an earlier probe is unanswered
    /// (a timeout going back to it again). `single` is false where the
    /// packet is a READ or atomic request, whose answer is responses that
    /// come whatever the requester does next: no probe.
    pub(crate) fn went_back(&mut self, psn: Psn, single: bool) {
        let sent_after = self.last_sent.is_some_and(|last| last != psn);
        self.pending = (single && (self.pending.is_some() || sent_after)).then_some(psn);
    }

    /// A request packet with `psn` was sent.
    pub(crate) fn sent(&mut self, psn: Psn) {
        self.last_sent = Some(psn);
    }

    /// Whether the packet at `psn` waits for the answer to the probe.
    pub(crate) fn holds(&self, psn: Psn) -> bool {
        self.pending.is_some_and(|probe| probe != psn)
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

    /// An RNR NAK for `psn` came. The first one for a PSN answers the copy
    /// sent before the go-back; once the probe was the last packet sent,
    /// one answers the probe.
    pub(crate) fn rnr_nak(&mut self, psn: Psn) {
        if self.pending == Some(psn) && self.last_sent == Some(psn) {
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

    /// Sent 10..=17, went back to 10: 10 goes, 11 waits for its answer.
    fn probing() -> GoBackProbe {
        let mut p = GoBackProbe::default();
        (10..18).for_each(|n| p.sent(psn(n)));
        p.went_back(psn(10), true);
        p
    }

    #[test]
    fn after_a_go_back_the_first_packet_goes_alone_until_acknowledged() {
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
    fn an_rnr_nak_answers_the_probe_only_once_it_was_sent() {
        let mut p = probing();
        p.rnr_nak(psn(10));
        assert!(p.holds(psn(11)), "the RNR NAK for the copy sent before");
        p.sent(psn(10));
        p.rnr_nak(psn(10));
        assert!(!p.holds(psn(11)));
        p.went_back(psn(10), true);
        assert!(
            !p.is_probe(psn(10)),
            "the buffer held nothing after the probe: all goes again"
        );
    }

    #[test]
    fn no_probe_when_nothing_was_sent_after_or_for_reads() {
        let mut p = GoBackProbe::default();
        p.went_back(psn(10), true);
        assert!(!p.holds(psn(11)), "nothing sent on the wire yet");
        p.sent(psn(10));
        p.went_back(psn(10), true);
        assert!(!p.holds(psn(11)), "the last packet sent is the one resent");
        let mut p = probing();
        p.went_back(psn(10), false);
        assert!(!p.holds(psn(11)), "a READ request brings its responses");
    }

    #[test]
    fn a_timeout_keeps_probing_while_the_probe_is_unanswered() {
        let mut p = probing();
        p.sent(psn(10));
        p.went_back(psn(10), true);
        assert!(p.is_probe(psn(10)) && p.holds(psn(11)));
    }
}
