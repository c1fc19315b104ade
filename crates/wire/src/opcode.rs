//! BTH opcodes and their properties.
//!
//! Everything the transport needs to know about an opcode (which extension
//! headers follow the BTH, whether it carries payload, where it sits in a
//! message) comes from one constant table, [`OPCODE_TABLE`], so the parser,
//! the builder and the engine cannot disagree. The opcode value itself is
//! the transport base (RC 0x00, UC 0x20, UD 0x60) plus the operation.

use core::fmt;

use crate::error::WireError;
use crate::{AETH_LEN, ATOMIC_ACK_ETH_LEN, ATOMIC_ETH_LEN, BTH_LEN, DETH_LEN, IETH_LEN};
use crate::{IMM_DT_LEN, RETH_LEN};

/// Every opcode this crate implements; the discriminant is the wire value.
#[allow(missing_docs)] // The variant names spell out the specification's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    RcSendFirst = 0x00,
    RcSendMiddle = 0x01,
    RcSendLast = 0x02,
    RcSendLastImm = 0x03,
    RcSendOnly = 0x04,
    RcSendOnlyImm = 0x05,
    RcWriteFirst = 0x06,
    RcWriteMiddle = 0x07,
    RcWriteLast = 0x08,
    RcWriteLastImm = 0x09,
    RcWriteOnly = 0x0A,
    RcWriteOnlyImm = 0x0B,
    RcReadRequest = 0x0C,
    RcReadRespFirst = 0x0D,
    RcReadRespMiddle = 0x0E,
    RcReadRespLast = 0x0F,
    RcReadRespOnly = 0x10,
    RcAck = 0x11,
    RcAtomicAck = 0x12,
    RcCmpSwap = 0x13,
    RcFetchAdd = 0x14,
    RcSendLastInv = 0x16,
    RcSendOnlyInv = 0x17,
    UcSendFirst = 0x20,
    UcSendMiddle = 0x21,
    UcSendLast = 0x22,
    UcSendLastImm = 0x23,
    UcSendOnly = 0x24,
    UcSendOnlyImm = 0x25,
    UcWriteFirst = 0x26,
    UcWriteMiddle = 0x27,
    UcWriteLast = 0x28,
    UcWriteLastImm = 0x29,
    UcWriteOnly = 0x2A,
    UcWriteOnlyImm = 0x2B,
    UdSendOnly = 0x64,
    UdSendOnlyImm = 0x65,
}

/// The transport service an opcode belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected.
    Rc,
    /// Unreliable Connected.
    Uc,
    /// Unreliable Datagram.
    Ud,
}

/// The operation an opcode is a packet of, independent of transport and
/// position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// SEND (with or without immediate or invalidate).
    Send,
    /// RDMA WRITE (with or without immediate).
    Write,
    /// RDMA READ request.
    ReadRequest,
    /// RDMA READ response.
    ReadResponse,
    /// Acknowledge (ACK or NAK).
    Ack,
    /// Atomic acknowledge, carrying the original remote data.
    AtomicAck,
    /// Atomic compare and swap.
    CompareSwap,
    /// Atomic fetch and add.
    FetchAdd,
}

impl OpKind {
    /// Whether packets of this kind travel requester to responder.
    pub const fn direction(self) -> Direction {
        match self {
            Self::ReadResponse | Self::Ack | Self::AtomicAck => Direction::Response,
            _ => Direction::Request,
        }
    }
}

/// Which way a packet travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Requester to responder.
    Request,
    /// Responder to requester.
    Response,
}

/// Where a packet sits in its message. Single-packet operations (READ
/// request, ACK, atomics) are `Only`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// Neither first nor last.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The message is this one packet.
    Only,
}

/// An extension header that can follow the BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtHeader {
    /// RDMA ETH: virtual address, R_Key, DMA length.
    Reth,
    /// ACK ETH: syndrome and MSN.
    Aeth,
    /// Atomic ETH: address, R_Key, swap/add and compare data.
    AtomicEth,
    /// Atomic ACK ETH: original remote data.
    AtomicAckEth,
    /// Datagram ETH: Q_Key and source QP.
    Deth,
    /// Immediate data.
    ImmDt,
    /// Invalidate ETH: the R_Key to invalidate.
    Ieth,
}

impl ExtHeader {
    /// Length of the header on the wire.
    pub const fn wire_len(self) -> usize {
        match self {
            Self::Reth => RETH_LEN,
            Self::Aeth => AETH_LEN,
            Self::AtomicEth => ATOMIC_ETH_LEN,
            Self::AtomicAckEth => ATOMIC_ACK_ETH_LEN,
            Self::Deth => DETH_LEN,
            Self::ImmDt => IMM_DT_LEN,
            Self::Ieth => IETH_LEN,
        }
    }
}

impl fmt::Display for ExtHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::error::HeaderKind::from(*self).fmt(f)
    }
}

/// What a SEND or WRITE packet carries after its payload-describing
/// headers; selects between e.g. SEND_LAST, SEND_LAST_IMM and SEND_LAST_INV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Suffix {
    /// Neither immediate data nor invalidate.
    None,
    /// Immediate data (ImmDt).
    Imm,
    /// Invalidate (IETH).
    Inv,
}

/// Properties of one opcode: one row of [`OPCODE_TABLE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The opcode.
    pub opcode: Opcode,
    /// Its name in the specification's style, e.g. `RC_SEND_ONLY`.
    pub name: &'static str,
    /// Transport service.
    pub transport: Transport,
    /// Operation.
    pub kind: OpKind,
    /// Position in the message.
    pub position: Position,
    /// Extension headers after the BTH, in wire order.
    pub headers: &'static [ExtHeader],
    /// Total length of those extension headers.
    pub ext_len: usize,
    /// Whether the opcode may carry payload (possibly empty).
    pub payload: bool,
}

use ExtHeader::{Aeth, AtomicAckEth, AtomicEth, Deth, Ieth, ImmDt, Reth};

const NONE: &[ExtHeader] = &[];
const IMM: &[ExtHeader] = &[ImmDt];
const INV: &[ExtHeader] = &[Ieth];
const RETH: &[ExtHeader] = &[Reth];
const RETH_IMM: &[ExtHeader] = &[Reth, ImmDt];
const AETH: &[ExtHeader] = &[Aeth];
const AETH_ATOMIC_ACK: &[ExtHeader] = &[Aeth, AtomicAckEth];
const ATOMIC: &[ExtHeader] = &[AtomicEth];
const DETH: &[ExtHeader] = &[Deth];
const DETH_IMM: &[ExtHeader] = &[Deth, ImmDt];

const fn sum_len(headers: &[ExtHeader]) -> usize {
    let mut total = 0;
    let mut i = 0;
    while i < headers.len() {
        total += headers[i].wire_len();
        i += 1;
    }
    total
}

/// The transport follows from the opcode's top three bits.
const fn transport_of(opcode: Opcode) -> Transport {
    match (opcode as u8) >> 5 {
        0 => Transport::Rc,
        1 => Transport::Uc,
        _ => Transport::Ud,
    }
}

const fn row(
    opcode: Opcode,
    name: &'static str,
    kind: OpKind,
    position: Position,
    headers: &'static [ExtHeader],
    payload: bool,
) -> OpcodeInfo {
    OpcodeInfo {
        opcode,
        name,
        transport: transport_of(opcode),
        kind,
        position,
        headers,
        ext_len: sum_len(headers),
        payload,
    }
}

use OpKind::{Ack, AtomicAck, CompareSwap, FetchAdd, ReadRequest, ReadResponse, Send, Write};
use Position::{First, Last, Middle, Only};

/// Every implemented opcode and its properties, in opcode order. Columns:
/// opcode, name, operation, position, extension headers, carries payload.
#[rustfmt::skip]
pub const OPCODE_TABLE: [OpcodeInfo; 37] = {
    use Opcode as O;
    [
        row(O::RcSendFirst,      "RC_SEND_FIRST",       Send,         First,  NONE,            true),
        row(O::RcSendMiddle,     "RC_SEND_MIDDLE",      Send,         Middle, NONE,            true),
        row(O::RcSendLast,       "RC_SEND_LAST",        Send,         Last,   NONE,            true),
        row(O::RcSendLastImm,    "RC_SEND_LAST_IMM",    Send,         Last,   IMM,             true),
        row(O::RcSendOnly,       "RC_SEND_ONLY",        Send,         Only,   NONE,            true),
        row(O::RcSendOnlyImm,    "RC_SEND_ONLY_IMM",    Send,         Only,   IMM,             true),
        row(O::RcWriteFirst,     "RC_WRITE_FIRST",      Write,        First,  RETH,            true),
        row(O::RcWriteMiddle,    "RC_WRITE_MIDDLE",     Write,        Middle, NONE,            true),
        row(O::RcWriteLast,      "RC_WRITE_LAST",       Write,        Last,   NONE,            true),
        row(O::RcWriteLastImm,   "RC_WRITE_LAST_IMM",   Write,        Last,   IMM,             true),
        row(O::RcWriteOnly,      "RC_WRITE_ONLY",       Write,        Only,   RETH,            true),
        row(O::RcWriteOnlyImm,   "RC_WRITE_ONLY_IMM",   Write,        Only,   RETH_IMM,        true),
        row(O::RcReadRequest,    "RC_READ_REQUEST",     ReadRequest,  Only,   RETH,            false),
        row(O::RcReadRespFirst,  "RC_READ_RESP_FIRST",  ReadResponse, First,  AETH,            true),
        row(O::RcReadRespMiddle, "RC_READ_RESP_MIDDLE", ReadResponse, Middle, NONE,            true),
        row(O::RcReadRespLast,   "RC_READ_RESP_LAST",   ReadResponse, Last,   AETH,            true),
        row(O::RcReadRespOnly,   "RC_READ_RESP_ONLY",   ReadResponse, Only,   AETH,            true),
        row(O::RcAck,            "RC_ACK",              Ack,          Only,   AETH,            false),
        row(O::RcAtomicAck,      "RC_ATOMIC_ACK",       AtomicAck,    Only,   AETH_ATOMIC_ACK, false),
        row(O::RcCmpSwap,        "RC_CMP_SWAP",         CompareSwap,  Only,   ATOMIC,          false),
        row(O::RcFetchAdd,       "RC_FETCH_ADD",        FetchAdd,     Only,   ATOMIC,          false),
        row(O::RcSendLastInv,    "RC_SEND_LAST_INV",    Send,         Last,   INV,             true),
        row(O::RcSendOnlyInv,    "RC_SEND_ONLY_INV",    Send,         Only,   INV,             true),
        row(O::UcSendFirst,      "UC_SEND_FIRST",       Send,         First,  NONE,            true),
        row(O::UcSendMiddle,     "UC_SEND_MIDDLE",      Send,         Middle, NONE,            true),
        row(O::UcSendLast,       "UC_SEND_LAST",        Send,         Last,   NONE,            true),
        row(O::UcSendLastImm,    "UC_SEND_LAST_IMM",    Send,         Last,   IMM,             true),
        row(O::UcSendOnly,       "UC_SEND_ONLY",        Send,         Only,   NONE,            true),
        row(O::UcSendOnlyImm,    "UC_SEND_ONLY_IMM",    Send,         Only,   IMM,             true),
        row(O::UcWriteFirst,     "UC_WRITE_FIRST",      Write,        First,  RETH,            true),
        row(O::UcWriteMiddle,    "UC_WRITE_MIDDLE",     Write,        Middle, NONE,            true),
        row(O::UcWriteLast,      "UC_WRITE_LAST",       Write,        Last,   NONE,            true),
        row(O::UcWriteLastImm,   "UC_WRITE_LAST_IMM",   Write,        Last,   IMM,             true),
        row(O::UcWriteOnly,      "UC_WRITE_ONLY",       Write,        Only,   RETH,            true),
        row(O::UcWriteOnlyImm,   "UC_WRITE_ONLY_IMM",   Write,        Only,   RETH_IMM,        true),
        row(O::UdSendOnly,       "UD_SEND_ONLY",        Send,         Only,   DETH,            true),
        row(O::UdSendOnlyImm,    "UD_SEND_ONLY_IMM",    Send,         Only,   DETH_IMM,        true),
    ]
};

/// Marks wire values with no table row.
const NO_ROW: u8 = u8::MAX;

/// Maps every byte value to its row in [`OPCODE_TABLE`], so decoding an
/// opcode is one lookup rather than a search.
const ROW_OF: [u8; 256] = {
    let mut map = [NO_ROW; 256];
    let mut i = 0;
    while i < OPCODE_TABLE.len() {
        // Rows must be unique; a duplicate fails the build.
        assert!(map[OPCODE_TABLE[i].opcode as usize] == NO_ROW);
        map[OPCODE_TABLE[i].opcode as usize] = i as u8;
        i += 1;
    }
    map
};

impl Opcode {
    /// Decodes a BTH opcode byte.
    pub const fn from_u8(value: u8) -> Result<Self, WireError> {
        let row = ROW_OF[value as usize] as usize;
        if row < OPCODE_TABLE.len() {
            Ok(OPCODE_TABLE[row].opcode)
        } else {
            Err(WireError::UnknownOpcode(value))
        }
    }

    /// The wire value.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// This opcode's row of [`OPCODE_TABLE`].
    pub const fn info(self) -> &'static OpcodeInfo {
        // Every variant has a row: `ROW_OF` is built from the table and the
        // table's unit test walks all variants.
        &OPCODE_TABLE[ROW_OF[self as usize] as usize]
    }

    /// All implemented opcodes, in wire-value order.
    pub fn all() -> impl Iterator<Item = Opcode> {
        OPCODE_TABLE.iter().map(|row| row.opcode)
    }

    /// Finds the opcode for an operation; `None` if the transport does not
    /// have it (e.g. a UC READ or a UD WRITE).
    pub fn compose(
        transport: Transport,
        kind: OpKind,
        position: Position,
        suffix: Suffix,
    ) -> Option<Opcode> {
        OPCODE_TABLE
            .iter()
            .find(|row| {
                row.transport == transport
                    && row.kind == kind
                    && row.position == position
                    && row_suffix(row) == suffix
            })
            .map(|row| row.opcode)
    }

    /// Name in the specification's style, e.g. `RC_SEND_ONLY`.
    pub const fn name(self) -> &'static str {
        self.info().name
    }

    /// Transport service.
    pub const fn transport(self) -> Transport {
        self.info().transport
    }

    /// Operation.
    pub const fn kind(self) -> OpKind {
        self.info().kind
    }

    /// Position in the message.
    pub const fn position(self) -> Position {
        self.info().position
    }

    /// Request or response.
    pub const fn direction(self) -> Direction {
        self.info().kind.direction()
    }

    /// Requester-to-responder packet.
    pub const fn is_request(self) -> bool {
        matches!(self.direction(), Direction::Request)
    }

    /// Responder-to-requester packet (ACK, ATOMIC_ACK, READ responses).
    pub const fn is_response(self) -> bool {
        matches!(self.direction(), Direction::Response)
    }

    /// First packet of its message (`First` or `Only`).
    pub const fn is_first(self) -> bool {
        matches!(self.position(), Position::First | Position::Only)
    }

    /// Last packet of its message (`Last` or `Only`).
    pub const fn is_last(self) -> bool {
        matches!(self.position(), Position::Last | Position::Only)
    }

    /// Extension headers after the BTH, in wire order.
    pub const fn ext_headers(self) -> &'static [ExtHeader] {
        self.info().headers
    }

    /// Whether `header` follows the BTH.
    pub fn has(self, header: ExtHeader) -> bool {
        self.ext_headers().contains(&header)
    }

    /// Whether the packet carries immediate data.
    pub fn has_imm(self) -> bool {
        self.has(ExtHeader::ImmDt)
    }

    /// Whether the packet carries an IETH (SEND with invalidate).
    pub fn has_ieth(self) -> bool {
        self.has(ExtHeader::Ieth)
    }

    /// Whether the opcode may carry payload (possibly empty).
    pub const fn has_payload(self) -> bool {
        self.info().payload
    }

    /// Length of the extension headers.
    pub const fn ext_len(self) -> usize {
        self.info().ext_len
    }

    /// Length of BTH plus extension headers: where the payload starts.
    pub const fn header_len(self) -> usize {
        BTH_LEN + self.ext_len()
    }
}

fn row_suffix(row: &OpcodeInfo) -> Suffix {
    if row.headers.contains(&ImmDt) {
        Suffix::Imm
    } else if row.headers.contains(&Ieth) {
        Suffix::Inv
    } else {
        Suffix::None
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl TryFrom<u8> for Opcode {
    type Error = WireError;
    fn try_from(value: u8) -> Result<Self, WireError> {
        Self::from_u8(value)
    }
}

impl From<Opcode> for u8 {
    fn from(op: Opcode) -> u8 {
        op.as_u8()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The expectations, written out independently of the table from the
    /// wire documentation: (value, headers, payload, response).
    fn expected(op: Opcode) -> (u8, &'static [ExtHeader], bool, bool) {
        use Opcode::*;
        match op {
            RcSendFirst => (0x00, &[], true, false),
            RcSendMiddle => (0x01, &[], true, false),
            RcSendLast => (0x02, &[], true, false),
            RcSendLastImm => (0x03, &[ImmDt], true, false),
            RcSendOnly => (0x04, &[], true, false),
            RcSendOnlyImm => (0x05, &[ImmDt], true, false),
            RcWriteFirst => (0x06, &[Reth], true, false),
            RcWriteMiddle => (0x07, &[], true, false),
            RcWriteLast => (0x08, &[], true, false),
            RcWriteLastImm => (0x09, &[ImmDt], true, false),
            RcWriteOnly => (0x0A, &[Reth], true, false),
            RcWriteOnlyImm => (0x0B, &[Reth, ImmDt], true, false),
            RcReadRequest => (0x0C, &[Reth], false, false),
            RcReadRespFirst => (0x0D, &[Aeth], true, true),
            RcReadRespMiddle => (0x0E, &[], true, true),
            RcReadRespLast => (0x0F, &[Aeth], true, true),
            RcReadRespOnly => (0x10, &[Aeth], true, true),
            RcAck => (0x11, &[Aeth], false, true),
            RcAtomicAck => (0x12, &[Aeth, AtomicAckEth], false, true),
            RcCmpSwap => (0x13, &[AtomicEth], false, false),
            RcFetchAdd => (0x14, &[AtomicEth], false, false),
            RcSendLastInv => (0x16, &[Ieth], true, false),
            RcSendOnlyInv => (0x17, &[Ieth], true, false),
            UcSendFirst => (0x20, &[], true, false),
            UcSendMiddle => (0x21, &[], true, false),
            UcSendLast => (0x22, &[], true, false),
            UcSendLastImm => (0x23, &[ImmDt], true, false),
            UcSendOnly => (0x24, &[], true, false),
            UcSendOnlyImm => (0x25, &[ImmDt], true, false),
            UcWriteFirst => (0x26, &[Reth], true, false),
            UcWriteMiddle => (0x27, &[], true, false),
            UcWriteLast => (0x28, &[], true, false),
            UcWriteLastImm => (0x29, &[ImmDt], true, false),
            UcWriteOnly => (0x2A, &[Reth], true, false),
            UcWriteOnlyImm => (0x2B, &[Reth, ImmDt], true, false),
            UdSendOnly => (0x64, &[Deth], true, false),
            UdSendOnlyImm => (0x65, &[Deth, ImmDt], true, false),
        }
    }

    /// Every variant, listed by hand next to the exhaustive `expected`
    /// match so that a new variant without a table row is noticed.
    #[rustfmt::skip]
    const LISTED: [Opcode; 37] = {
        use Opcode::*;
        [
            RcSendFirst, RcSendMiddle, RcSendLast, RcSendLastImm, RcSendOnly, RcSendOnlyImm,
            RcWriteFirst, RcWriteMiddle, RcWriteLast, RcWriteLastImm, RcWriteOnly,
            RcWriteOnlyImm, RcReadRequest, RcReadRespFirst, RcReadRespMiddle, RcReadRespLast,
            RcReadRespOnly, RcAck, RcAtomicAck, RcCmpSwap, RcFetchAdd, RcSendLastInv,
            RcSendOnlyInv, UcSendFirst, UcSendMiddle, UcSendLast, UcSendLastImm, UcSendOnly,
            UcSendOnlyImm, UcWriteFirst, UcWriteMiddle, UcWriteLast, UcWriteLastImm,
            UcWriteOnly, UcWriteOnlyImm, UdSendOnly, UdSendOnlyImm,
        ]
    };

    #[test]
    fn table_matches_independent_expectations() {
        assert!(Opcode::all().eq(LISTED));
        for op in LISTED {
            let (value, headers, payload, response) = expected(op);
            assert_eq!(op.as_u8(), value, "{op}");
            assert_eq!(op.ext_headers(), headers, "{op}");
            assert_eq!(op.has_payload(), payload, "{op}");
            assert_eq!(op.is_response(), response, "{op}");
            assert_eq!(op.is_request(), !response, "{op}");
            let lens: usize = headers.iter().map(|h| h.wire_len()).sum();
            assert_eq!(op.header_len(), BTH_LEN + lens, "{op}");
        }
    }

    #[test]
    fn every_byte_decodes_to_itself_or_unknown() {
        let mut known = 0;
        for value in 0..=u8::MAX {
            match Opcode::from_u8(value) {
                Ok(op) => {
                    known += 1;
                    assert_eq!(op.as_u8(), value);
                    assert_eq!(op.info().opcode, op);
                }
                Err(e) => assert_eq!(e, WireError::UnknownOpcode(value)),
            }
        }
        assert_eq!(known, 37);
        assert_eq!(Opcode::from_u8(0x15), Err(WireError::UnknownOpcode(0x15)));
        assert_eq!(Opcode::from_u8(0x81), Err(WireError::UnknownOpcode(0x81)));
    }

    #[test]
    fn names_and_transports_agree() {
        for op in Opcode::all() {
            let prefix = match op.transport() {
                Transport::Rc => "RC_",
                Transport::Uc => "UC_",
                Transport::Ud => "UD_",
            };
            assert!(op.name().starts_with(prefix), "{op}");
            assert_eq!(op.to_string(), op.name());
        }
    }

    #[test]
    fn positions() {
        assert!(Opcode::RcSendFirst.is_first() && !Opcode::RcSendFirst.is_last());
        assert!(!Opcode::RcSendMiddle.is_first() && !Opcode::RcSendMiddle.is_last());
        assert!(Opcode::RcSendLastInv.is_last() && !Opcode::RcSendLastInv.is_first());
        for op in [Opcode::RcAck, Opcode::RcReadRequest, Opcode::RcCmpSwap] {
            assert_eq!(op.position(), Position::Only);
            assert!(op.is_first() && op.is_last());
        }
    }

    #[test]
    fn compose_finds_each_opcode_and_nothing_else() {
        for op in Opcode::all() {
            let suffix = row_suffix(op.info());
            assert_eq!(
                Opcode::compose(op.transport(), op.kind(), op.position(), suffix),
                Some(op)
            );
        }
        use Suffix as S;
        assert_eq!(
            Opcode::compose(Transport::Uc, ReadRequest, Only, S::None),
            None
        );
        assert_eq!(Opcode::compose(Transport::Ud, Write, Only, S::None), None);
        assert_eq!(Opcode::compose(Transport::Ud, Send, First, S::None), None);
        assert_eq!(Opcode::compose(Transport::Uc, Send, Only, S::Inv), None);
        assert_eq!(
            Opcode::compose(Transport::Rc, Write, Last, S::Imm),
            Some(Opcode::RcWriteLastImm)
        );
    }

    #[test]
    fn max_header_len_is_the_maximum() {
        let max = Opcode::all().map(Opcode::header_len).max();
        assert_eq!(max, Some(crate::MAX_HEADER_LEN));
    }

    #[test]
    fn ext_lengths_match_the_header_types() {
        use crate::{ext, Header};
        let pairs = [
            (ExtHeader::Reth, ext::Reth::LEN),
            (ExtHeader::Aeth, crate::aeth::Aeth::LEN),
            (ExtHeader::AtomicEth, ext::AtomicEth::LEN),
            (ExtHeader::AtomicAckEth, ext::AtomicAckEth::LEN),
            (ExtHeader::Deth, ext::Deth::LEN),
            (ExtHeader::ImmDt, ext::ImmDt::LEN),
            (ExtHeader::Ieth, ext::Ieth::LEN),
        ];
        for (header, len) in pairs {
            assert_eq!(header.wire_len(), len, "{header}");
        }
    }

    #[test]
    fn helpers() {
        assert!(Opcode::RcWriteOnlyImm.has_imm());
        assert!(Opcode::RcWriteOnlyImm.has(ExtHeader::Reth));
        assert!(Opcode::RcSendOnlyInv.has_ieth());
        assert!(!Opcode::RcSendOnly.has_imm());
        assert_eq!(Opcode::try_from(0x65), Ok(Opcode::UdSendOnlyImm));
        assert_eq!(u8::from(Opcode::RcAck), 0x11);
        assert_eq!(Opcode::RcAtomicAck.ext_len(), 12);
        assert_eq!(OpKind::ReadResponse.direction(), Direction::Response);
    }
}
