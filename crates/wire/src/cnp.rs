//! The RoCEv2 congestion notification packet (CNP).
//!
//! A receiver that finds packets of a flow arriving into a congested queue
//! tells the flow's sender with a CNP, addressed to the sending QP (RoCEv2,
//! annex 17.9.3): a BTH with opcode 0x81 (the CNP "transport", outside
//! RC, UC and UD), BECN set, PSN 0, then 16 reserved bytes and the ICRC.
//! It carries nothing else: its sender is the receiving end, its
//! destination QP the QP to slow down. A CNP is no request or response of
//! any QP, so it has no row in [`crate::OPCODE_TABLE`]: the parser
//! ([`crate::PacketView`]) refuses it as an unknown opcode, and a
//! receiver looks for it with [`cnp_dest_qp`] first.

use crate::u24::Qpn;
use crate::{BTH_LEN, ICRC_LEN};

/// The BTH opcode of a CNP.
pub const CNP_OPCODE: u8 = 0x81;
/// Reserved bytes after the BTH.
pub const CNP_RESERVED_LEN: usize = 16;
/// A CNP's bytes before its ICRC: what the ICRC covers after the IP and
/// UDP headers.
pub const CNP_COVERED_LEN: usize = BTH_LEN + CNP_RESERVED_LEN;
/// A whole CNP, BTH through ICRC.
pub const CNP_LEN: usize = CNP_COVERED_LEN + ICRC_LEN;

/// BTH byte 4: BECN.
const BECN: u8 = 0x40;

/// Writes a CNP to QP `dest_qp` (P_Key `pkey`) into the first
/// [`CNP_COVERED_LEN`] bytes of `buf`, leaving its ICRC to the caller;
/// `None` if `buf` is shorter than that.
pub fn write_cnp(buf: &mut [u8], dest_qp: Qpn, pkey: u16) -> Option<&mut [u8]> {
    let covered = buf.get_mut(..CNP_COVERED_LEN)?;
    covered.fill(0);
    covered[0] = CNP_OPCODE;
    covered[2..4].copy_from_slice(&pkey.to_be_bytes());
    covered[4] = BECN;
    covered[5..8].copy_from_slice(&dest_qp.get().to_be_bytes()[1..]);
    Some(covered)
}

/// The QP a CNP is addressed to, and its P_Key, if `packet` (BTH through
/// ICRC) is a CNP: opcode 0x81, transport header version 0, at least
/// [`CNP_LEN`] bytes.
pub fn cnp_dest_qp(packet: &[u8]) -> Option<(Qpn, u16)> {
    let bth: &[u8; BTH_LEN] = packet.first_chunk()?;
    if bth[0] != CNP_OPCODE || packet.len() < CNP_LEN || bth[1] & 0x0F != 0 {
        return None;
    }
    let qpn = u32::from_be_bytes([0, bth[5], bth[6], bth[7]]);
    Some((Qpn::new_masked(qpn), u16::from_be_bytes([bth[2], bth[3]])))
}

/// Whether `packet` starts with a CNP's opcode (what a receiver checks
/// before parsing it as a request or response).
pub fn is_cnp(packet: &[u8]) -> bool {
    packet.first() == Some(&CNP_OPCODE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PacketView, WireError};

    #[test]
    fn a_cnp_is_written_as_the_annex_lays_it_out() {
        let mut buf = [0xAAu8; CNP_LEN];
        write_cnp(&mut buf, Qpn::new_masked(0x12_3456), 0xFFFF).unwrap();
        let mut expected = [0u8; CNP_COVERED_LEN];
        expected[..12].copy_from_slice(&[
            0x81, 0x00, 0xFF, 0xFF, 0x40, 0x12, 0x34, 0x56, 0x00, 0x00, 0x00, 0x00,
        ]);
        assert_eq!(&buf[..CNP_COVERED_LEN], &expected);
        assert_eq!(
            &buf[CNP_COVERED_LEN..],
            &[0xAA; ICRC_LEN],
            "the ICRC is left"
        );
        assert_eq!(
            cnp_dest_qp(&buf),
            Some((Qpn::new_masked(0x12_3456), 0xFFFF))
        );
    }

    #[test]
    fn a_short_buffer_takes_no_cnp() {
        assert!(write_cnp(&mut [0u8; CNP_COVERED_LEN - 1], Qpn::new_masked(1), 0xFFFF).is_none());
    }

    #[test]
    fn only_a_whole_cnp_of_version_0_is_found() {
        let mut buf = [0u8; CNP_LEN];
        write_cnp(&mut buf, Qpn::new_masked(7), 0xFFFF).unwrap();
        assert!(cnp_dest_qp(&buf[..CNP_LEN - 1]).is_none());
        let mut tver = buf;
        tver[1] = 1;
        assert!(cnp_dest_qp(&tver).is_none());
        let mut other = buf;
        other[0] = 0x80;
        assert!(cnp_dest_qp(&other).is_none());
        assert!(cnp_dest_qp(&[]).is_none());
    }

    #[test]
    fn the_packet_parser_refuses_a_cnp() {
        let mut buf = [0u8; CNP_LEN];
        write_cnp(&mut buf, Qpn::new_masked(7), 0xFFFF).unwrap();
        assert_eq!(
            PacketView::parse(&buf).err(),
            Some(WireError::UnknownOpcode(CNP_OPCODE))
        );
        assert!(is_cnp(&buf));
    }
}
