//! Blocks of QP numbers: how a packet finds the process that owns its
//! destination QP.
//!
//! Every RoCEv2 packet goes to UDP 4791, where the host daemon receives
//! it; the daemon must know from the packet alone which process it is for.
//! The 24-bit QP number is split into a 12-bit *block* (called a slot
//! here) and a 12-bit index: the daemon gives each context whole blocks of
//! 4,096 QP numbers, so routing is one lookup on the upper 12 bits.

use std::ops::Range;

/// Bits of a QPN that select the slot.
pub const SLOT_SHIFT: u32 = 12;
/// QP numbers per slot.
pub const QPNS_PER_SLOT: u32 = 1 << SLOT_SHIFT;
/// Slots are 1..=MAX_SLOT; slot 0 holds the special QPs 0 and 1.
pub const MAX_SLOT: u16 = 4095;

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
    fn qpns_and_slots_agree() {
        for slot in [1, 2, 77, MAX_SLOT] {
            let qpns = qpns_of(slot);
            assert_eq!(slot_of(qpns.start), slot);
            assert_eq!(slot_of(qpns.end - 1), slot);
        }
        assert_eq!(slot_of(1), 0, "QP1 is in no context's slot");
        assert_eq!(qpns_of(MAX_SLOT).end, 1 << 24);
    }
}
