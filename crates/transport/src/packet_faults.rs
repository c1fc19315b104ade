//! Packet rules of `SOFTVERBS_FAULTS` (loss, duplication, reordering,
//! delay, corruption) applied to the datagrams a context receives, before
//! their ICRC is checked, so a corrupted packet meets the same check as
//! one damaged on a real link. Held packets keep their addresses and go
//! through the ordinary receive path when released.

use softverbs_engine::Nanos;
use softverbs_faults::{Faults, PacketAction};
use std::net::SocketAddr;
use std::time::Duration;

/// The BTH byte the ICRC leaves out (its FECN, BECN and reserved bits).
const ICRC_MASKED_BYTE: usize = 4;

/// How long a packet held for reordering waits for a later one before it
/// is delivered anyway.
const REORDER_WAIT: Nanos = 1_000_000;

/// A context's packet rules and the packets they hold.
#[derive(Debug)]
pub(crate) struct PacketFaults {
    rules: Faults,
    /// When the context opened: rule windows count from it.
    opened: Nanos,
    /// Delayed or reordered packets, in the order they arrived.
    held: Vec<HeldPacket>,
}

/// A received datagram's RoCE bytes and addresses, held back.
#[derive(Debug)]
pub(crate) struct HeldPacket {
    pub(crate) src: SocketAddr,
    pub(crate) dst: SocketAddr,
    /// The traffic class it arrived with.
    pub(crate) class: u8,
    pub(crate) bytes: Vec<u8>,
    /// When it is delivered at the latest.
    due: Nanos,
    /// Delivered as soon as a later packet has been (reordering).
    after_next: bool,
}

/// What becomes of one received packet.
#[derive(Debug)]
pub(crate) enum Fate {
    /// Delivered `n` times (0: lost, 2: duplicated).
    Deliver(usize),
    /// Delivered with one byte flipped.
    Corrupted(Vec<u8>),
    /// Held; it comes back from [`PacketFaults::take_due`].
    Held,
}

impl PacketFaults {
    pub(crate) fn new(rules: Faults, opened: Nanos) -> PacketFaults {
        PacketFaults {
            rules,
            opened,
            held: Vec::new(),
        }
    }

    /// Decides the fate of `packet` (from the BTH on) from `src` to `dst`.
    pub(crate) fn decide(
        &mut self,
        now: Nanos,
        src: SocketAddr,
        dst: SocketAddr,
        class: u8,
        packet: &[u8],
    ) -> Fate {
        let qp = dest_qp(packet);
        let at = Duration::from_nanos(now.saturating_sub(self.opened));
        let Some(action) = self.rules.packet(at, qp, src.ip(), packet.len()) else {
            return Fate::Deliver(1);
        };
        let hold = |due, after_next| HeldPacket {
            src,
            dst,
            class,
            bytes: packet.to_vec(),
            due,
            after_next,
        };
        match action {
            PacketAction::Drop => Fate::Deliver(0),
            PacketAction::Duplicate => Fate::Deliver(2),
            PacketAction::Corrupt => {
                let mut bytes = packet.to_vec();
                // Any byte the ICRC covers: not BTH byte 4 (FECN, BECN and
                // reserved bits), which it masks.
                let mut at = self.rules.below(bytes.len().saturating_sub(1));
                if at >= ICRC_MASKED_BYTE {
                    at += 1;
                }
                if let Some(b) = bytes.get_mut(at) {
                    *b ^= 0x5A;
                }
                Fate::Corrupted(bytes)
            }
            PacketAction::Reorder => {
                self.held.push(hold(now.saturating_add(REORDER_WAIT), true));
                Fate::Held
            }
            PacketAction::Delay(d) => {
                let d = Nanos::try_from(d.as_nanos()).unwrap_or(Nanos::MAX);
                self.held.push(hold(now.saturating_add(d), false));
                Fate::Held
            }
        }
    }

    /// A packet was delivered: packets held for reordering may follow it.
    pub(crate) fn delivered(&mut self) {
        for h in &mut self.held {
            if h.after_next {
                h.due = 0;
            }
        }
    }

    /// The held packets due at `now`, in arrival order.
    pub(crate) fn take_due(&mut self, now: Nanos) -> Vec<HeldPacket> {
        if self.held.iter().all(|h| h.due > now) {
            return Vec::new();
        }
        let (due, kept) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.due <= now);
        self.held = kept;
        due
    }

    /// When the next held packet is due.
    pub(crate) fn next_deadline(&self) -> Option<Nanos> {
        self.held.iter().map(|h| h.due).min()
    }

    /// Drops every held packet (the link is down: nothing more arrives).
    pub(crate) fn drop_held(&mut self) {
        self.held.clear();
    }
}

/// The destination QP number of a packet's BTH (0 if it is too short to
/// have one; the engine then drops it as malformed).
fn dest_qp(packet: &[u8]) -> u32 {
    match packet.get(5..8) {
        Some(&[a, b, c]) => u32::from_be_bytes([0, a, b, c]),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softverbs_faults::{FaultSpec, Part};

    fn faults(text: &str) -> PacketFaults {
        let spec = FaultSpec::parse(text).unwrap();
        PacketFaults::new(Faults::new(&spec, "softverbs0", Part::Packets).unwrap(), 0)
    }

    fn bth(qp: u32) -> Vec<u8> {
        let mut p = vec![0u8; 16];
        p[5..8].copy_from_slice(&qp.to_be_bytes()[1..]);
        p
    }

    const A: &str = "10.0.0.1:4791";
    const B: &str = "10.0.0.2:4791";

    #[test]
    fn drop_duplicate_and_corrupt_by_qp() {
        let (a, b) = (A.parse().unwrap(), B.parse().unwrap());
        let mut f =
            faults("packet drop qp=7 nth=1; packet duplicate qp=7 nth=2; packet corrupt qp=8");
        assert!(matches!(f.decide(0, a, b, 0, &bth(7)), Fate::Deliver(0)));
        assert!(matches!(f.decide(0, a, b, 0, &bth(7)), Fate::Deliver(2)));
        assert!(matches!(f.decide(0, a, b, 0, &bth(7)), Fate::Deliver(1)));
        for _ in 0..64 {
            let Fate::Corrupted(bytes) = f.decide(0, a, b, 0, &bth(8)) else {
                panic!("not corrupted");
            };
            let want = bth(8);
            let changed: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i] != want[i]).collect();
            assert_eq!(changed.len(), 1);
            assert_ne!(changed[0], ICRC_MASKED_BYTE, "a byte the ICRC covers");
        }
        let mut f = faults("packet drop peer=10.0.0.2");
        assert!(matches!(f.decide(0, a, b, 0, &bth(1)), Fate::Deliver(1)));
        assert!(matches!(f.decide(0, b, a, 0, &bth(1)), Fate::Deliver(0)));
    }

    #[test]
    fn delayed_and_reordered_packets_come_back_in_time() {
        let (a, b) = (A.parse().unwrap(), B.parse().unwrap());
        let mut f = faults("packet delay=2ms qp=3; packet reorder qp=2");
        assert!(matches!(f.decide(0, a, b, 0, &bth(3)), Fate::Held));
        assert!(matches!(f.decide(0, a, b, 0, &bth(2)), Fate::Held));
        assert_eq!(f.next_deadline(), Some(REORDER_WAIT));
        assert!(f.take_due(10).is_empty());
        f.delivered();
        let due = f.take_due(10);
        assert_eq!(due.len(), 1);
        assert_eq!(dest_qp(&due[0].bytes), 2);
        assert_eq!(f.next_deadline(), Some(2_000_000));
        assert_eq!(f.take_due(2_000_000).len(), 1);
        assert_eq!(f.next_deadline(), None);
    }
}
