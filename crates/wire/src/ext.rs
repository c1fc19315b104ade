//! The fixed-layout extension headers other than AETH (which has its own
//! module for the syndrome logic). All fields are big-endian.

use crate::cursor::{Reader, Writer};
use crate::error::{HeaderKind, WireError};
use crate::header::Header;
use crate::u24::Qpn;
use crate::{ATOMIC_ACK_ETH_LEN, ATOMIC_ETH_LEN, DETH_LEN, IETH_LEN, IMM_DT_LEN, RETH_LEN};

/// RDMA Extended Transport Header (16 bytes): the remote buffer of a WRITE
/// or READ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reth {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length of the whole transfer in bytes.
    pub dma_len: u32,
}

impl Header for Reth {
    const LEN: usize = RETH_LEN;
    const KIND: HeaderKind = HeaderKind::Reth;

    fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(buf, Self::KIND, Self::LEN)?;
        Ok(Self {
            va: r.u64()?,
            rkey: r.u32()?,
            dma_len: r.u32()?,
        })
    }

    fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let mut w = Writer::new(buf, Self::KIND, Self::LEN)?;
        w.u64(self.va)?;
        w.u32(self.rkey)?;
        w.u32(self.dma_len)?;
        Ok(Self::LEN)
    }
}

/// Atomic Extended Transport Header (28 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AtomicEth {
    /// Remote virtual address of the 8-byte target.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap value (CMP_SWAP) or addend (FETCH_ADD).
    pub swap_add: u64,
    /// Compare value (CMP_SWAP; ignored by FETCH_ADD).
    pub compare: u64,
}

impl Header for AtomicEth {
    const LEN: usize = ATOMIC_ETH_LEN;
    const KIND: HeaderKind = HeaderKind::AtomicEth;

    fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(buf, Self::KIND, Self::LEN)?;
        Ok(Self {
            va: r.u64()?,
            rkey: r.u32()?,
            swap_add: r.u64()?,
            compare: r.u64()?,
        })
    }

    fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let mut w = Writer::new(buf, Self::KIND, Self::LEN)?;
        w.u64(self.va)?;
        w.u32(self.rkey)?;
        w.u64(self.swap_add)?;
        w.u64(self.compare)?;
        Ok(Self::LEN)
    }
}

/// Atomic ACK Extended Transport Header (8 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AtomicAckEth {
    /// The target's value before the atomic operation.
    pub orig_data: u64,
}

impl Header for AtomicAckEth {
    const LEN: usize = ATOMIC_ACK_ETH_LEN;
    const KIND: HeaderKind = HeaderKind::AtomicAckEth;

    fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(buf, Self::KIND, Self::LEN)?;
        Ok(Self {
            orig_data: r.u64()?,
        })
    }

    fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let mut w = Writer::new(buf, Self::KIND, Self::LEN)?;
        w.u64(self.orig_data)?;
        Ok(Self::LEN)
    }
}

/// Datagram Extended Transport Header (8 bytes): Q_Key, a reserved byte,
/// and the source QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Deth {
    /// Queue key the destination QP checks.
    pub qkey: u32,
    /// Sending queue pair.
    pub src_qp: Qpn,
}

impl Header for Deth {
    const LEN: usize = DETH_LEN;
    const KIND: HeaderKind = HeaderKind::Deth;

    /// Decodes a DETH; the reserved byte is ignored.
    fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(buf, Self::KIND, Self::LEN)?;
        let qkey = r.u32()?;
        let _reserved = r.u8()?;
        let src_qp = Qpn::new_masked(r.u24()?);
        Ok(Self { qkey, src_qp })
    }

    /// Encodes a DETH with the reserved byte zero.
    fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let mut w = Writer::new(buf, Self::KIND, Self::LEN)?;
        w.u32(self.qkey)?;
        w.u8(0)?;
        w.u24(self.src_qp.get())?;
        Ok(Self::LEN)
    }
}

/// Immediate data (4 bytes), delivered to the receiver's completion.
///
/// The value is the big-endian reading of the four wire bytes; verbs
/// expose immediate data in network order, so `imm.to_be_bytes()` gives
/// the bytes an application sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ImmDt {
    /// The immediate value.
    pub imm: u32,
}

impl Header for ImmDt {
    const LEN: usize = IMM_DT_LEN;
    const KIND: HeaderKind = HeaderKind::ImmDt;

    fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(buf, Self::KIND, Self::LEN)?;
        Ok(Self { imm: r.u32()? })
    }

    fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let mut w = Writer::new(buf, Self::KIND, Self::LEN)?;
        w.u32(self.imm)?;
        Ok(Self::LEN)
    }
}

/// Invalidate Extended Transport Header (4 bytes): the R_Key a SEND with
/// invalidate asks the receiver to invalidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ieth {
    /// Remote key to invalidate.
    pub rkey: u32,
}

impl Header for Ieth {
    const LEN: usize = IETH_LEN;
    const KIND: HeaderKind = HeaderKind::Ieth;

    fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(buf, Self::KIND, Self::LEN)?;
        Ok(Self { rkey: r.u32()? })
    }

    fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let mut w = Writer::new(buf, Self::KIND, Self::LEN)?;
        w.u32(self.rkey)?;
        Ok(Self::LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aeth::{Aeth, Syndrome};
    use crate::bth::Bth;
    use crate::opcode::Opcode;
    use crate::u24::{Msn, Psn};
    use core::fmt::Debug;

    /// Writes `h`, checks the bytes, parses them back, and checks that every
    /// shorter input and output buffer is refused with the right error.
    fn check<H: Header + PartialEq + Debug>(h: H, wire: &[u8]) {
        assert_eq!(wire.len(), H::LEN);
        let mut buf = [0u8; 64];
        assert_eq!(h.write(&mut buf), Ok(H::LEN));
        assert_eq!(&buf[..H::LEN], wire);
        assert_eq!(H::parse(wire), Ok(h));
        for len in 0..H::LEN {
            assert_eq!(
                H::parse(&wire[..len]),
                Err(WireError::Truncated {
                    header: H::KIND,
                    needed: H::LEN,
                    available: len
                })
            );
            assert_eq!(
                h.write(&mut buf[..len]),
                Err(WireError::BufferTooSmall {
                    header: H::KIND,
                    needed: H::LEN,
                    available: len
                })
            );
        }
    }

    #[test]
    fn reth() {
        let h = Reth {
            va: 0x0102_0304_0506_0708,
            rkey: 0x1112_1314,
            dma_len: 0x2122_2324,
        };
        check(
            h,
            &[
                1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14, 0x21, 0x22, 0x23, 0x24,
            ],
        );
    }

    #[test]
    fn atomic_eth() {
        let h = AtomicEth {
            va: 0x0102_0304_0506_0708,
            rkey: 0x1112_1314,
            swap_add: 0x2122_2324_2526_2728,
            compare: 0x3132_3334_3536_3738,
        };
        check(
            h,
            &[
                1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26,
                0x27, 0x28, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38,
            ],
        );
    }

    #[test]
    fn atomic_ack_eth() {
        let h = AtomicAckEth {
            orig_data: 0xF1F2_F3F4_F5F6_F7F8,
        };
        check(h, &[0xF1, 0xF2, 0xF3, 0xF4, 0xF5, 0xF6, 0xF7, 0xF8]);
    }

    #[test]
    fn deth() {
        let h = Deth {
            qkey: 0x8001_0203,
            src_qp: Qpn::new_masked(0xAB_CDEF),
        };
        check(h, &[0x80, 1, 2, 3, 0, 0xAB, 0xCD, 0xEF]);
        // The reserved byte is ignored on receive.
        assert_eq!(Deth::parse(&[0x80, 1, 2, 3, 0x55, 0xAB, 0xCD, 0xEF]), Ok(h));
    }

    #[test]
    fn imm_dt_and_ieth() {
        check(ImmDt { imm: 0xDEAD_BEEF }, &[0xDE, 0xAD, 0xBE, 0xEF]);
        check(Ieth { rkey: 0x0102_0304 }, &[1, 2, 3, 4]);
    }

    #[test]
    fn aeth_and_bth_truncation() {
        check(
            Aeth {
                syndrome: Syndrome::Ack { credits: 5 },
                msn: Msn::new_masked(7),
            },
            &[0x05, 0, 0, 7],
        );
        check(
            Bth::new(Opcode::RcAck, Qpn::new_masked(0x11), Psn::new_masked(0x22)),
            &[0x11, 0, 0xFF, 0xFF, 0, 0, 0, 0x11, 0, 0, 0, 0x22],
        );
    }
}
