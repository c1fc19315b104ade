//! The one error type of the crate.
//!
//! Every parse and build path returns [`WireError`] instead of panicking, so
//! a receiver can drop a malformed packet and count the reason.

use core::fmt;

use crate::opcode::{ExtHeader, Opcode};

/// The part of a packet an error refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeaderKind {
    /// Base Transport Header.
    Bth,
    /// RDMA Extended Transport Header.
    Reth,
    /// ACK Extended Transport Header.
    Aeth,
    /// Atomic Extended Transport Header.
    AtomicEth,
    /// Atomic ACK Extended Transport Header.
    AtomicAckEth,
    /// Datagram Extended Transport Header.
    Deth,
    /// Immediate data.
    ImmDt,
    /// Invalidate Extended Transport Header.
    Ieth,
    /// Payload plus pad.
    Payload,
    /// The 4-byte invariant CRC trailer.
    Icrc,
    /// The whole RoCE packet (BTH through ICRC).
    Packet,
    /// An IPv4 header.
    Ipv4,
    /// An IPv6 header.
    Ipv6,
    /// A UDP header.
    Udp,
}

impl HeaderKind {
    /// The conventional upper-case name, as used by the specification.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Bth => "BTH",
            Self::Reth => "RETH",
            Self::Aeth => "AETH",
            Self::AtomicEth => "AtomicETH",
            Self::AtomicAckEth => "AtomicAckETH",
            Self::Deth => "DETH",
            Self::ImmDt => "ImmDt",
            Self::Ieth => "IETH",
            Self::Payload => "payload",
            Self::Icrc => "ICRC",
            Self::Packet => "packet",
            Self::Ipv4 => "IPv4 header",
            Self::Ipv6 => "IPv6 header",
            Self::Udp => "UDP header",
        }
    }
}

impl fmt::Display for HeaderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<ExtHeader> for HeaderKind {
    fn from(h: ExtHeader) -> Self {
        match h {
            ExtHeader::Reth => Self::Reth,
            ExtHeader::Aeth => Self::Aeth,
            ExtHeader::AtomicEth => Self::AtomicEth,
            ExtHeader::AtomicAckEth => Self::AtomicAckEth,
            ExtHeader::Deth => Self::Deth,
            ExtHeader::ImmDt => Self::ImmDt,
            ExtHeader::Ieth => Self::Ieth,
        }
    }
}

/// Why a packet could not be parsed, built or verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The input ends inside `header`.
    #[error("truncated {header}: need {needed} bytes, have {available}")]
    Truncated {
        /// The header being read.
        header: HeaderKind,
        /// Bytes the header needs.
        needed: usize,
        /// Bytes that were left.
        available: usize,
    },
    /// The output buffer cannot hold `header`.
    #[error("buffer too small for {header}: need {needed} bytes, have {available}")]
    BufferTooSmall {
        /// The header (or whole packet) being written.
        header: HeaderKind,
        /// Bytes it needs.
        needed: usize,
        /// Bytes the buffer has left.
        available: usize,
    },
    /// The BTH opcode is not an RC, UC or UD opcode this crate implements.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// The BTH transport header version is not 0.
    #[error("unsupported transport header version {0}")]
    UnsupportedTver(u8),
    /// PadCnt claims more pad bytes than the packet has after its headers.
    #[error("pad count {pad} exceeds the {available} bytes after the headers")]
    BadPadCount {
        /// The BTH PadCnt value.
        pad: u8,
        /// Payload-plus-pad bytes actually present.
        available: usize,
    },
    /// Payload plus pad is not a multiple of 4 bytes.
    #[error("payload plus pad is {len} bytes, not a multiple of 4")]
    Misaligned {
        /// Payload-plus-pad length.
        len: usize,
    },
    /// An opcode that carries no payload has payload or pad bytes.
    #[error("opcode {opcode} carries no payload, found {len} bytes")]
    UnexpectedPayload {
        /// The packet's opcode.
        opcode: Opcode,
        /// Payload-plus-pad bytes found.
        len: usize,
    },
    /// A builder was not given a header its opcode requires.
    #[error("opcode {opcode} requires a {header}")]
    MissingHeader {
        /// The opcode being built.
        opcode: Opcode,
        /// The header it needs.
        header: ExtHeader,
    },
    /// A builder was given a header its opcode does not carry.
    #[error("opcode {opcode} does not carry a {header}")]
    UnexpectedHeader {
        /// The opcode being built.
        opcode: Opcode,
        /// The superfluous header.
        header: ExtHeader,
    },
    /// An AETH syndrome with a reserved type or NAK code.
    #[error("reserved AETH syndrome {0:#04x}")]
    ReservedSyndrome(u8),
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
    /// The ICRC carried by the packet differs from the computed one.
    #[error("bad ICRC: computed {computed:#010x}, packet carries {found:#010x}")]
    BadIcrc {
        /// ICRC computed over the packet.
        computed: u32,
        /// ICRC found in the packet.
        found: u32,
    },
    /// An IP or UDP header that cannot carry RoCEv2 (wrong version,
    /// protocol, or inconsistent lengths).
    #[error("bad {header}: {reason}")]
    BadIpHeader {
        /// Which header.
        header: HeaderKind,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Source and destination addresses of different IP versions.
    #[error("source and destination addresses are of different IP versions")]
    AddressFamilyMismatch,
    /// The packet does not fit the 16-bit IP or UDP length fields.
    #[error("RoCE packet of {len} bytes is too long for IP/UDP")]
    TooLong {
        /// RoCE packet length (BTH through ICRC).
        len: usize,
    },
}
