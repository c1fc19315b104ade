//! The Base Transport Header, present in every packet.
//!
//! Layout (12 bytes, big-endian): byte 0 OpCode; byte 1 SE (0x80), M (0x40),
//! PadCnt (0x30), TVer (0x0F); bytes 2-3 P_Key; byte 4 FECN (0x80), BECN
//! (0x40), rest reserved; bytes 5-7 DestQP; byte 8 AckReq (0x80), rest
//! reserved; bytes 9-11 PSN.

use crate::cursor::{Reader, Writer};
use crate::error::{HeaderKind, WireError};
use crate::header::Header;
use crate::opcode::Opcode;
use crate::u24::{Psn, Qpn};
use crate::BTH_LEN;

const SE: u8 = 0x80;
const MIGREQ: u8 = 0x40;
const PAD_SHIFT: u8 = 4;
const PAD_MASK: u8 = 0x03;
const TVER_MASK: u8 = 0x0F;
const FECN: u8 = 0x80;
const BECN: u8 = 0x40;
const ACK_REQ: u8 = 0x80;

/// A decoded BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bth {
    /// Operation code.
    pub opcode: Opcode,
    /// Solicited event: the receiver should raise a completion event.
    pub solicited: bool,
    /// MigReq: the path migration state of the sender.
    pub migreq: bool,
    /// Pad bytes after the payload, 0..=3.
    pub pad_count: u8,
    /// Transport header version, 0..=15; only 0 is defined.
    pub tver: u8,
    /// Partition key.
    pub pkey: u16,
    /// Forward explicit congestion notification.
    pub fecn: bool,
    /// Backward explicit congestion notification.
    pub becn: bool,
    /// Destination queue pair.
    pub dest_qp: Qpn,
    /// The requester asks for an acknowledgement.
    pub ack_req: bool,
    /// Packet sequence number.
    pub psn: Psn,
}

impl Bth {
    /// The default partition key (full membership of the default
    /// partition).
    pub const DEFAULT_PKEY: u16 = 0xFFFF;

    /// A BTH with the given opcode, destination and PSN, the default P_Key
    /// and every flag clear.
    pub const fn new(opcode: Opcode, dest_qp: Qpn, psn: Psn) -> Self {
        Self {
            opcode,
            solicited: false,
            migreq: false,
            pad_count: 0,
            tver: 0,
            pkey: Self::DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    fn check_fields(&self) -> Result<(), WireError> {
        if self.pad_count > PAD_MASK {
            return Err(out_of_range("PadCnt", self.pad_count, 2));
        }
        if self.tver > TVER_MASK {
            return Err(out_of_range("TVer", self.tver, 4));
        }
        Ok(())
    }
}

fn out_of_range(field: &'static str, value: u8, bits: u8) -> WireError {
    WireError::FieldOutOfRange {
        field,
        value: value.into(),
        bits,
    }
}

const fn flag(byte: u8, mask: u8) -> bool {
    byte & mask != 0
}

const fn bit(set: bool, mask: u8) -> u8 {
    if set {
        mask
    } else {
        0
    }
}

impl Header for Bth {
    const LEN: usize = BTH_LEN;
    const KIND: HeaderKind = HeaderKind::Bth;

    /// Decodes a BTH. Rejects unknown opcodes; reserved bits are ignored,
    /// and TVer is returned as found (the packet parser enforces TVer 0).
    fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(buf, Self::KIND, Self::LEN)?;
        let opcode = Opcode::from_u8(r.u8()?)?;
        let flags = r.u8()?;
        let pkey = r.u16()?;
        let ecn = r.u8()?;
        let dest_qp = Qpn::new_masked(r.u24()?);
        let ack = r.u8()?;
        let psn = Psn::new_masked(r.u24()?);
        Ok(Self {
            opcode,
            solicited: flag(flags, SE),
            migreq: flag(flags, MIGREQ),
            pad_count: (flags >> PAD_SHIFT) & PAD_MASK,
            tver: flags & TVER_MASK,
            pkey,
            fecn: flag(ecn, FECN),
            becn: flag(ecn, BECN),
            dest_qp,
            ack_req: flag(ack, ACK_REQ),
            psn,
        })
    }

    /// Encodes the BTH with reserved bits zero.
    fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        self.check_fields()?;
        let mut w = Writer::new(buf, Self::KIND, Self::LEN)?;
        w.u8(self.opcode.as_u8())?;
        w.u8(bit(self.solicited, SE)
            | bit(self.migreq, MIGREQ)
            | (self.pad_count << PAD_SHIFT)
            | self.tver)?;
        w.u16(self.pkey)?;
        w.u8(bit(self.fecn, FECN) | bit(self.becn, BECN))?;
        w.u24(self.dest_qp.get())?;
        w.u8(bit(self.ack_req, ACK_REQ))?;
        w.u24(self.psn.get())?;
        Ok(Self::LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Bth {
        Bth {
            opcode: Opcode::RcWriteFirst,
            solicited: true,
            migreq: false,
            pad_count: 3,
            tver: 0,
            pkey: 0x8001,
            fecn: false,
            becn: true,
            dest_qp: Qpn::new_masked(0x12_3456),
            ack_req: true,
            psn: Psn::new_masked(0xAB_CDEF),
        }
    }

    #[test]
    fn encodes_the_documented_layout() {
        let mut buf = [0u8; 12];
        assert_eq!(sample().write(&mut buf), Ok(12));
        assert_eq!(
            buf,
            [0x06, 0xB0, 0x80, 0x01, 0x40, 0x12, 0x34, 0x56, 0x80, 0xAB, 0xCD, 0xEF]
        );
        assert_eq!(Bth::parse(&buf), Ok(sample()));
    }

    #[test]
    fn every_flag_round_trips_alone() {
        let base = Bth::new(Opcode::RcSendOnly, Qpn::ZERO, Psn::ZERO);
        let variants = [
            Bth {
                solicited: true,
                ..base
            },
            Bth {
                migreq: true,
                ..base
            },
            Bth { fecn: true, ..base },
            Bth { becn: true, ..base },
            Bth {
                ack_req: true,
                ..base
            },
            Bth { tver: 15, ..base },
            Bth {
                pad_count: 1,
                ..base
            },
        ];
        for bth in variants {
            let mut buf = [0u8; 12];
            bth.write(&mut buf).unwrap();
            assert_eq!(Bth::parse(&buf), Ok(bth));
        }
    }

    #[test]
    fn reserved_bits_are_ignored() {
        let mut buf = [0u8; 12];
        sample().write(&mut buf).unwrap();
        buf[4] |= 0x3F;
        buf[8] |= 0x7F;
        assert_eq!(Bth::parse(&buf), Ok(sample()));
    }

    #[test]
    fn rejects_unknown_opcode_and_short_input() {
        let mut buf = [0u8; 12];
        sample().write(&mut buf).unwrap();
        buf[0] = 0x15;
        assert_eq!(Bth::parse(&buf), Err(WireError::UnknownOpcode(0x15)));
        for len in 0..12 {
            assert_eq!(
                Bth::parse(&buf[..len]),
                Err(WireError::Truncated {
                    header: HeaderKind::Bth,
                    needed: 12,
                    available: len
                })
            );
        }
    }

    #[test]
    fn write_rejects_wide_fields_and_small_buffers() {
        let mut buf = [0u8; 12];
        let bad_pad = Bth {
            pad_count: 4,
            ..sample()
        };
        assert!(matches!(
            bad_pad.write(&mut buf),
            Err(WireError::FieldOutOfRange { bits: 2, .. })
        ));
        let bad_tver = Bth {
            tver: 16,
            ..sample()
        };
        assert!(matches!(
            bad_tver.write(&mut buf),
            Err(WireError::FieldOutOfRange { bits: 4, .. })
        ));
        assert!(matches!(
            sample().write(&mut buf[..11]),
            Err(WireError::BufferTooSmall { needed: 12, .. })
        ));
    }
}
