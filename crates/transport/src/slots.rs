//! How a packet finds the process that owns its destination QP.
//!
//! Several processes on one host share a device (one IP address), so each
//! needs its own UDP port, and a sender must derive that port from what it
//! knows: the destination IP (from the GID) and the destination QP number.
//! softverbs splits the 24-bit QPN into a 12-bit *slot* and a 12-bit index;
//! slot `s` is served by UDP port `base + s`. A process claims a slot by
//! binding its port (a failed bind means another process has it), gets
//! that slot's 4096 QP numbers, and claims more slots as it needs them. No
//! registry or daemon is involved, and responses need no source address:
//! every packet names the QP it is for.

use std::ops::Range;

/// Bits of a QPN that select the slot.
pub const SLOT_SHIFT: u32 = 12;
/// QP numbers per slot.
pub const QPNS_PER_SLOT: u32 = 1 << SLOT_SHIFT;
/// Slots are 1..=MAX_SLOT; slot 0 holds the special QPs 0 and 1.
pub const MAX_SLOT: u16 = 4095;
/// Default port of slot 0: slots then use 61441..=65535, above Linux's
/// default ephemeral range (32768-60999), so clients' sockets rarely
/// collide with them.
pub const DEFAULT_PORT_BASE: u16 = 61440;

/// The slot-to-port mapping of a softverbs network (all hosts that talk
/// to each other must use the same base).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotPorts {
    base: u16,
}

impl Default for SlotPorts {
    fn default() -> Self {
        SlotPorts {
            base: DEFAULT_PORT_BASE,
        }
    }
}

impl SlotPorts {
    /// A mapping whose slot `s` is port `base + s`; `None` if the highest
    /// slot would not fit in a port number.
    pub fn new(base: u16) -> Option<SlotPorts> {
        base.checked_add(MAX_SLOT).map(|_| SlotPorts { base })
    }

    /// The UDP port serving `slot`.
    pub fn port(&self, slot: u16) -> u16 {
        self.base + slot.min(MAX_SLOT)
    }

    /// The UDP port serving QP number `qpn`.
    pub fn port_of_qpn(&self, qpn: u32) -> u16 {
        self.port(slot_of(qpn))
    }

    /// The slot a port serves, if it is one of ours.
    pub fn slot_of_port(&self, port: u16) -> Option<u16> {
        port.checked_sub(self.base)
            .filter(|s| (1..=MAX_SLOT).contains(s))
    }
}

/// The slot of a QP number.
pub fn slot_of(qpn: u32) -> u16 {
    ((qpn & 0xFF_FFFF) >> SLOT_SHIFT) as u16
}

/// The QP numbers a slot owns.
pub fn qpns_of(slot: u16) -> Range<u32> {
    let start = u32::from(slot) << SLOT_SHIFT;
    start..start + QPNS_PER_SLOT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qpns_ports_and_slots_agree() {
        let p = SlotPorts::default();
        for slot in [1, 2, 77, MAX_SLOT] {
            let qpns = qpns_of(slot);
            assert_eq!(slot_of(qpns.start), slot);
            assert_eq!(slot_of(qpns.end - 1), slot);
            assert_eq!(p.port_of_qpn(qpns.start + 5), p.port(slot));
            assert_eq!(p.slot_of_port(p.port(slot)), Some(slot));
        }
        assert_eq!(p.port(MAX_SLOT), 65535);
        assert_eq!(
            p.slot_of_port(DEFAULT_PORT_BASE),
            None,
            "slot 0 is not served"
        );
        assert_eq!(p.slot_of_port(80), None);
    }

    #[test]
    fn a_base_too_high_for_every_slot_is_refused() {
        assert!(SlotPorts::new(65535 - MAX_SLOT).is_some());
        assert!(SlotPorts::new(65535 - MAX_SLOT + 1).is_none());
    }
}
