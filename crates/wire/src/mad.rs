//! Management datagrams (MADs): the 256-byte messages InfiniBand's
//! management classes exchange as UD SENDs to QP0/QP1, and which the
//! Communication Manager ([`crate::cm`]) uses to set up connections.
//!
//! On RoCEv2 a MAD for the General Services Interface is the payload of a
//! UD SEND_ONLY packet to destination QP [`GSI_QPN`] whose DETH carries
//! Q_Key [`GSI_QKEY`] and source QP 1, with BTH P_Key 0xFFFF. The MAD is
//! always [`MAD_LEN`] bytes: a [`MadHeader`] of [`MAD_HEADER_LEN`] bytes,
//! then [`MAD_DATA_LEN`] bytes whose meaning the class and attribute
//! decide. Everything is big-endian. See docs/rdma-cm.md, section 4, for
//! where each rule comes from.
//!
//! Like the rest of the crate nothing here allocates, and no input makes
//! a parser panic: every failure is a [`MadError`].

use crate::u24::{Psn, Qpn};

/// Length of every IB MAD (the kernel's MAD layer assumes it; a shorter
/// payload is read as garbage, a longer one does not fit rxe's buffers).
pub const MAD_LEN: usize = 256;
/// Length of the MAD common header.
pub const MAD_HEADER_LEN: usize = 24;
/// Length of the class-specific data after the common header.
pub const MAD_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;

/// The only MAD base version InfiniBand defines (0x80 is OPA's).
pub const BASE_VERSION: u8 = 1;
/// Management class of the Communication Manager.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// Class version of the CM the Linux kernel registers for (IBTA 1.2 on).
pub const CM_CLASS_VERSION: u8 = 2;

/// The General Services Interface QP, where CM MADs are sent.
pub const GSI_QPN: Qpn = Qpn::new_masked(1);
/// The Q_Key of QP1 (`IB_QP1_QKEY`); rxe drops QP1 packets with any other.
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The P_Key MADs carry on RoCE (full member of the default partition).
pub const GSI_PKEY: u16 = 0xFFFF;
/// PSN for MAD packets: UD receivers do not check it.
pub const GSI_PSN: Psn = Psn::ZERO;

/// MAD method numbers (the low 7 bits of byte 3; bit 7 marks a response).
pub mod method {
    /// Get an attribute (answered by GET_RESP).
    pub const GET: u8 = 0x01;
    /// Set an attribute (answered by GET_RESP).
    pub const SET: u8 = 0x02;
    /// Send a message that needs no MAD-layer response: every CM message.
    pub const SEND: u8 = 0x03;
    /// Trap.
    pub const TRAP: u8 = 0x05;
    /// Report.
    pub const REPORT: u8 = 0x06;
    /// Trap repress.
    pub const TRAP_REPRESS: u8 = 0x07;
    /// Response to GET or SET.
    pub const GET_RESP: u8 = 0x81;
    /// The response bit.
    pub const RESPONSE: u8 = 0x80;
}

/// MAD status values the kernel's MAD layer produces.
pub mod status {
    /// Unsupported class or version.
    pub const BAD_VERSION: u16 = 0x0004;
    /// Method not supported.
    pub const UNSUPPORTED_METHOD: u16 = 0x0008;
    /// Method/attribute combination not supported: what the kernel answers
    /// to a GET or SET that no agent claims.
    pub const UNSUPPORTED_METHOD_ATTRIB: u16 = 0x000C;
}

/// Why a MAD, a CM message or an rdma_cm header could not be parsed or
/// built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MadError {
    /// The input ends before `what` does.
    #[error("truncated {what}: need {needed} bytes, have {available}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes it needs.
        needed: usize,
        /// Bytes there were.
        available: usize,
    },
    /// The output buffer cannot hold `what`.
    #[error("buffer too small for {what}: need {needed} bytes, have {available}")]
    BufferTooSmall {
        /// What was being written.
        what: &'static str,
        /// Bytes it needs.
        needed: usize,
        /// Bytes the buffer has.
        available: usize,
    },
    /// A field value does not fit its wire width.
    #[error("{field} value {value} does not fit in {bits} bits")]
    FieldOutOfRange {
        /// Field name.
        field: &'static str,
        /// The rejected value.
        value: u64,
        /// Width of the field on the wire.
        bits: u8,
    },
    /// More private data than the message has room for.
    #[error("{len} bytes of private data, the message holds {max}")]
    PrivateDataTooLong {
        /// Bytes offered.
        len: usize,
        /// Room in the message.
        max: usize,
    },
    /// A MAD base version other than [`BASE_VERSION`].
    #[error("unsupported MAD base version {0}")]
    BadBaseVersion(u8),
    /// Not a CM MAD of the class version this crate speaks.
    #[error("management class {class:#04x} version {version} is not the CM's")]
    NotCm {
        /// Management class found.
        class: u8,
        /// Class version found.
        version: u8,
    },
    /// A CM MAD whose method is not SEND.
    #[error("CM MAD with method {0:#04x} (only SEND is used)")]
    BadMethod(u8),
    /// A CM attribute this crate does not decode (LAP, APR, ClassPortInfo
    /// or unknown).
    #[error("CM attribute {0:#06x} not supported")]
    UnknownAttribute(u16),
    /// An rdma_cm private-data header of an unknown version.
    #[error("rdma_cm header version {0} (only 0 exists)")]
    BadCmaVersion(u8),
    /// An rdma_cm private-data header with an IP version other than 4 or 6.
    #[error("rdma_cm header IP version {0}")]
    BadIpVersion(u8),
    /// Source and destination addresses of different IP versions.
    #[error("source and destination addresses are of different IP versions")]
    AddressFamilyMismatch,
}

/// Fails unless `value` fits in `bits` bits.
pub(crate) fn check_width(field: &'static str, value: u64, bits: u8) -> Result<(), MadError> {
    if bits < 64 && value >> bits != 0 {
        return Err(MadError::FieldOutOfRange { field, value, bits });
    }
    Ok(())
}

/// A fixed-size block of input, read field by field at fixed offsets.
///
/// The length is checked once when the block is taken; after that the
/// offsets are constants of the message layouts, so reads cannot depend
/// on the input. They still go through `get` and yield zeros rather
/// than panic if a layout constant were ever wrong (the unit tests pin
/// every offset).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Block<'a, const N: usize>(&'a [u8; N]);

impl<'a, const N: usize> Block<'a, N> {
    /// The first `N` bytes of `buf`, or why there are fewer.
    pub(crate) fn take(buf: &'a [u8], what: &'static str) -> Result<Self, MadError> {
        buf.first_chunk::<N>().map(Self).ok_or(MadError::Truncated {
            what,
            needed: N,
            available: buf.len(),
        })
    }

    pub(crate) fn array<const L: usize>(&self, off: usize) -> [u8; L] {
        let mut out = [0; L];
        if let Some(src) = self.0.get(off..off.saturating_add(L)) {
            out.copy_from_slice(src);
        }
        out
    }

    pub(crate) fn u8(&self, off: usize) -> u8 {
        self.0.get(off).copied().unwrap_or(0)
    }

    pub(crate) fn u16(&self, off: usize) -> u16 {
        u16::from_be_bytes(self.array(off))
    }

    /// The 24-bit value in the three bytes at `off`.
    pub(crate) fn u24(&self, off: usize) -> u32 {
        let [a, b, c] = self.array(off);
        u32::from_be_bytes([0, a, b, c])
    }

    pub(crate) fn u32(&self, off: usize) -> u32 {
        u32::from_be_bytes(self.array(off))
    }

    pub(crate) fn u64(&self, off: usize) -> u64 {
        u64::from_be_bytes(self.array(off))
    }

    /// The bits of the byte at `off` under `mask`, shifted down.
    pub(crate) fn bits(&self, off: usize, mask: u8) -> u8 {
        (self.u8(off) & mask) >> mask.trailing_zeros()
    }

    pub(crate) fn flag(&self, off: usize, mask: u8) -> bool {
        self.u8(off) & mask != 0
    }
}

/// A fixed-size block of output, zeroed when taken (so reserved bits go
/// out as zero) and written field by field at fixed offsets.
#[derive(Debug)]
pub(crate) struct BlockMut<'a, const N: usize>(&'a mut [u8; N]);

impl<'a, const N: usize> BlockMut<'a, N> {
    /// The first `N` bytes of `buf`, zeroed, or why there are fewer.
    pub(crate) fn take(buf: &'a mut [u8], what: &'static str) -> Result<Self, MadError> {
        let available = buf.len();
        let block = buf.first_chunk_mut::<N>().ok_or(MadError::BufferTooSmall {
            what,
            needed: N,
            available,
        })?;
        block.fill(0);
        Ok(Self(block))
    }

    pub(crate) fn put(&mut self, off: usize, bytes: &[u8]) {
        if let Some(dst) = self.0.get_mut(off..off.saturating_add(bytes.len())) {
            dst.copy_from_slice(bytes);
        }
    }

    pub(crate) fn u8(&mut self, off: usize, v: u8) {
        self.put(off, &[v]);
    }

    pub(crate) fn u16(&mut self, off: usize, v: u16) {
        self.put(off, &v.to_be_bytes());
    }

    /// Writes the low 24 bits of `v` to the three bytes at `off`.
    pub(crate) fn u24(&mut self, off: usize, v: u32) {
        let [_, a, b, c] = v.to_be_bytes();
        self.put(off, &[a, b, c]);
    }

    pub(crate) fn u32(&mut self, off: usize, v: u32) {
        self.put(off, &v.to_be_bytes());
    }

    pub(crate) fn u64(&mut self, off: usize, v: u64) {
        self.put(off, &v.to_be_bytes());
    }

    /// Ors `v`, shifted into place under `mask`, into the byte at `off`
    /// (callers check that `v` fits).
    pub(crate) fn bits(&mut self, off: usize, mask: u8, v: u8) {
        let old = self.0.get(off).copied().unwrap_or(0);
        let shifted = v.checked_shl(mask.trailing_zeros()).unwrap_or(0) & mask;
        self.u8(off, old | shifted);
    }

    pub(crate) fn flag(&mut self, off: usize, mask: u8, set: bool) {
        if set {
            self.bits(off, mask, mask >> mask.trailing_zeros());
        }
    }
}

/// The MAD common header (24 bytes).
///
/// Layout: 0 BaseVersion, 1 MgmtClass, 2 ClassVersion, 3 R bit (0x80)
/// and Method, 4-5 Status, 6-7 ClassSpecific, 8-15 TransactionID, 16-17
/// AttributeID, 18-19 reserved, 20-23 AttributeModifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MadHeader {
    /// Base version; [`BASE_VERSION`].
    pub base_version: u8,
    /// Management class, e.g. [`MGMT_CLASS_CM`].
    pub mgmt_class: u8,
    /// Class version, e.g. [`CM_CLASS_VERSION`].
    pub class_version: u8,
    /// Method, response bit included (see [`method`]).
    pub method: u8,
    /// Status (0 in requests and CM messages; see [`status`]).
    pub status: u16,
    /// Class-specific word (0 for the CM).
    pub class_specific: u16,
    /// Transaction ID. The kernel's CM forms new ones as its MAD agent's
    /// 32-bit `hi_tid` above the local comm ID, and answers with the TID
    /// of the message answered; it never checks them on receipt.
    pub tid: u64,
    /// Attribute ID (for the CM, the message type: [`crate::cm::CmAttr`]).
    pub attr_id: u16,
    /// Attribute modifier (the CM puts the ECE `attr_mod` of REQ and REP
    /// here; otherwise 0).
    pub attr_mod: u32,
}

impl MadHeader {
    /// A CM header: base version 1, class 0x07 version 2, method SEND,
    /// status 0.
    pub const fn cm(attr_id: u16, tid: u64, attr_mod: u32) -> Self {
        Self {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: method::SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod,
        }
    }

    /// Decodes the header from the first 24 bytes of `buf`; the reserved
    /// bytes are ignored. No field value is refused here (see
    /// [`crate::cm::CmMessage::parse_mad`] for the CM's checks).
    pub fn parse(buf: &[u8]) -> Result<Self, MadError> {
        let b = Block::<MAD_HEADER_LEN>::take(buf, "MAD header")?;
        Ok(Self {
            base_version: b.u8(0),
            mgmt_class: b.u8(1),
            class_version: b.u8(2),
            method: b.u8(3),
            status: b.u16(4),
            class_specific: b.u16(6),
            tid: b.u64(8),
            attr_id: b.u16(16),
            attr_mod: b.u32(20),
        })
    }

    /// Encodes the header into the first 24 bytes of `buf` (reserved bytes
    /// zero) and returns 24.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, MadError> {
        let mut b = BlockMut::<MAD_HEADER_LEN>::take(buf, "MAD header")?;
        b.u8(0, self.base_version);
        b.u8(1, self.mgmt_class);
        b.u8(2, self.class_version);
        b.u8(3, self.method);
        b.u16(4, self.status);
        b.u16(6, self.class_specific);
        b.u64(8, self.tid);
        b.u16(16, self.attr_id);
        b.u32(20, self.attr_mod);
        Ok(MAD_HEADER_LEN)
    }

    /// Whether the response bit is set.
    pub const fn is_response(&self) -> bool {
        self.method & method::RESPONSE != 0
    }

    /// The header of the answer the kernel's MAD layer sends when no agent
    /// claims this MAD: for GET and SET, the same header with method
    /// GET_RESP and status "unsupported method/attribute" (the data is
    /// echoed unchanged); for anything else, nothing (the MAD is dropped).
    /// This is `generate_unmatched_resp` in the kernel's `mad.c`.
    pub const fn unmatched_response(&self) -> Option<Self> {
        match self.method {
            method::GET | method::SET => Some(Self {
                method: method::GET_RESP,
                status: status::UNSUPPORTED_METHOD_ATTRIB,
                ..*self
            }),
            _ => None,
        }
    }
}

/// Splits a whole MAD into its header and its 232 data bytes. Fails if
/// `mad` is shorter than [`MAD_LEN`]; bytes after the MAD are ignored.
pub fn split(mad: &[u8]) -> Result<(MadHeader, &[u8; MAD_DATA_LEN]), MadError> {
    let whole = Block::<MAD_LEN>::take(mad, "MAD")?;
    let header = MadHeader::parse(whole.0)?;
    let data = whole
        .0
        .last_chunk::<MAD_DATA_LEN>()
        .ok_or(MadError::Truncated {
            what: "MAD",
            needed: MAD_LEN,
            available: mad.len(),
        })?;
    Ok((header, data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> MadHeader {
        MadHeader {
            base_version: 1,
            mgmt_class: 0x07,
            class_version: 2,
            method: 0x03,
            status: 0x1234,
            class_specific: 0x5678,
            tid: 0x0102_0304_0506_0708,
            attr_id: 0x0013,
            attr_mod: 0xA1B2_C3D4,
        }
    }

    #[test]
    fn header_bytes_are_where_the_layout_says() {
        let mut buf = [0xEEu8; 30];
        assert_eq!(header().emit(&mut buf), Ok(24));
        assert_eq!(
            buf[..24],
            [
                1, 0x07, 2, 0x03, 0x12, 0x34, 0x56, 0x78, 1, 2, 3, 4, 5, 6, 7, 8, 0x00, 0x13, 0, 0,
                0xA1, 0xB2, 0xC3, 0xD4
            ]
        );
        // Bytes after the header are not touched.
        assert_eq!(buf[24..], [0xEE; 6]);
        assert_eq!(MadHeader::parse(&buf), Ok(header()));
    }

    #[test]
    fn reserved_bytes_are_ignored_and_written_as_zero() {
        let mut buf = [0u8; 24];
        header().emit(&mut buf).unwrap();
        buf[18] = 0xFF;
        buf[19] = 0xFF;
        assert_eq!(MadHeader::parse(&buf), Ok(header()));
        let mut out = [0xFFu8; 24];
        header().emit(&mut out).unwrap();
        assert_eq!(out[18..20], [0, 0]);
    }

    #[test]
    fn short_buffers_are_refused() {
        for len in 0..24 {
            assert_eq!(
                MadHeader::parse(&[0; 24][..len]),
                Err(MadError::Truncated {
                    what: "MAD header",
                    needed: 24,
                    available: len
                })
            );
            assert_eq!(
                header().emit(&mut [0; 24][..len]),
                Err(MadError::BufferTooSmall {
                    what: "MAD header",
                    needed: 24,
                    available: len
                })
            );
        }
        assert!(matches!(
            split(&[0; 255]),
            Err(MadError::Truncated { needed: 256, .. })
        ));
    }

    #[test]
    fn split_gives_the_data_after_the_header() {
        let mut mad = [0u8; 256];
        header().emit(&mut mad).unwrap();
        for (i, b) in mad[24..].iter_mut().enumerate() {
            *b = i as u8;
        }
        let (h, data) = split(&mad).unwrap();
        assert_eq!(h, header());
        assert_eq!(data[0], 0);
        assert_eq!(data[231], 231);
    }

    #[test]
    fn cm_header_and_unmatched_responses() {
        let h = MadHeader::cm(0x0010, 7, 0);
        assert_eq!(
            (h.base_version, h.mgmt_class, h.class_version, h.method),
            (1, 0x07, 2, 0x03)
        );
        assert!(!h.is_response());
        // A SEND nobody claims is dropped, not answered.
        assert_eq!(h.unmatched_response(), None);
        let get = MadHeader {
            method: method::GET,
            mgmt_class: 0x42,
            ..h
        };
        let resp = get.unmatched_response().unwrap();
        assert_eq!(resp.method, 0x81);
        assert_eq!(resp.status, 0x000C);
        assert_eq!((resp.tid, resp.mgmt_class), (7, 0x42));
        assert!(resp.is_response());
    }

    #[test]
    fn width_checks() {
        assert_eq!(check_width("x", 31, 5), Ok(()));
        assert_eq!(
            check_width("x", 32, 5),
            Err(MadError::FieldOutOfRange {
                field: "x",
                value: 32,
                bits: 5
            })
        );
        assert_eq!(check_width("x", u64::MAX, 64), Ok(()));
    }

    #[test]
    fn block_bit_helpers() {
        let mut buf = [0u8; 4];
        {
            let mut b = BlockMut::<4>::take(&mut buf, "t").unwrap();
            b.bits(0, 0xF8, 0x1F);
            b.bits(0, 0x06, 2);
            b.flag(0, 0x01, true);
            b.u24(1, 0xAB_CDEF);
        }
        assert_eq!(buf, [0xFD, 0xAB, 0xCD, 0xEF]);
        let b = Block::<4>::take(&buf, "t").unwrap();
        assert_eq!(
            (b.bits(0, 0xF8), b.bits(0, 0x06), b.flag(0, 0x01)),
            (0x1F, 2, true)
        );
        assert_eq!(b.u24(1), 0xAB_CDEF);
    }

    proptest! {
        #[test]
        fn header_round_trips(
            fields in any::<(u8, u8, u8, u8, u16, u16, u64, u16, u32)>(),
        ) {
            let (base_version, mgmt_class, class_version, method, status, class_specific, tid, attr_id, attr_mod) = fields;
            let h = MadHeader { base_version, mgmt_class, class_version, method, status, class_specific, tid, attr_id, attr_mod };
            let mut buf = [0u8; 24];
            prop_assert_eq!(h.emit(&mut buf), Ok(24));
            prop_assert_eq!(MadHeader::parse(&buf), Ok(h));
        }

        #[test]
        fn any_input_parses_or_fails_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = MadHeader::parse(&bytes);
            let _ = split(&bytes);
        }
    }
}
