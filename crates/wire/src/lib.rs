//! The RoCEv2 wire format: the InfiniBand transport headers carried in UDP
//! (destination port 4791), and the invariant CRC that ends every packet.
//!
//! A RoCEv2 packet, as seen by a UDP socket, is
//!
//! ```text
//! BTH (12) | extension headers | payload | pad (0-3) | ICRC (4)
//! ```
//!
//! where the opcode in the BTH decides which extension headers follow
//! ([`Opcode::ext_headers`]). This crate parses such packets without
//! copying ([`PacketView`]), builds them into caller-provided buffers
//! ([`PacketBuilder`]), and computes the ICRC over IPv4 or IPv6, either
//! from the real IP and UDP headers ([`icrc`]) or from addresses and ports
//! alone ([`Flow`], with the assumed header fields documented in [`ip`]),
//! keeping its start over those headers for the packet shapes a stream
//! repeats ([`IcrcStarts`]).
//!
//! Nothing here allocates or panics on malformed input: every failure is a
//! [`WireError`]. All multi-byte header fields are big-endian; the ICRC is
//! sent little-endian.
//!
//! ```
//! use softverbs_wire::{Bth, Flow, Opcode, PacketBuilder, PacketView, Psn, Qpn};
//! use std::net::Ipv4Addr;
//!
//! let flow = Flow::v4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2), 49152, 4791);
//! let bth = Bth::new(Opcode::RcSendOnly, Qpn::new_masked(0x11), Psn::new_masked(7));
//! let mut buf = [0u8; 64];
//! let len = PacketBuilder::new(bth).with_payload(b"hi").build(&flow, &mut buf)?;
//!
//! let pkt = PacketView::parse(&buf[..len])?;
//! pkt.verify_icrc(&flow)?;
//! assert_eq!(pkt.payload(), b"hi");
//! assert_eq!(pkt.bth().pad_count, 2);
//! # Ok::<(), softverbs_wire::WireError>(())
//! ```

#![warn(missing_docs)]

pub mod aeth;
pub mod bth;
pub mod cm;
pub mod cnp;
mod cursor;
pub mod error;
pub mod ext;
pub mod header;
pub mod icrc;
pub mod icrc_starts;
pub mod identification;
pub mod ip;
pub mod mad;
pub mod opcode;
pub mod packet;
pub mod u24;

pub use aeth::{rnr_timer_micros, Aeth, NakCode, Syndrome};
pub use bth::Bth;
pub use cnp::{cnp_dest_qp, is_cnp, write_cnp, CNP_LEN};
pub use error::{HeaderKind, WireError};
pub use ext::{AtomicAckEth, AtomicEth, Deth, Ieth, ImmDt, Reth};
pub use header::Header;
pub use icrc::Icrc;
pub use icrc_starts::IcrcStarts;
pub use ip::{Flow, IpPacket, IpPair, IpUdpHeaders};
pub use opcode::{Direction, ExtHeader, OpKind, Opcode, OpcodeInfo, Position, Suffix, Transport};
pub use packet::{packet_len, pad_len, payload_len, ExtHeaders, PacketBuilder, PacketView};
pub use u24::{Msn, Psn, Qpn};

/// The IANA-assigned UDP destination port of RoCEv2.
pub const ROCE_V2_UDP_PORT: u16 = 4791;

/// Base Transport Header length.
pub const BTH_LEN: usize = 12;
/// RDMA ETH length.
pub const RETH_LEN: usize = 16;
/// ACK ETH length.
pub const AETH_LEN: usize = 4;
/// Atomic ETH length.
pub const ATOMIC_ETH_LEN: usize = 28;
/// Atomic ACK ETH length.
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
/// Datagram ETH length.
pub const DETH_LEN: usize = 8;
/// Immediate data length.
pub const IMM_DT_LEN: usize = 4;
/// Invalidate ETH length.
pub const IETH_LEN: usize = 4;
/// Invariant CRC length.
pub const ICRC_LEN: usize = 4;
/// IPv4 header length without options.
pub const IPV4_HEADER_LEN: usize = 20;
/// IPv6 fixed header length.
pub const IPV6_HEADER_LEN: usize = 40;
/// UDP header length.
pub const UDP_HEADER_LEN: usize = 8;
/// The longest BTH plus extension headers of any opcode (BTH and AtomicETH
/// of the atomic requests).
pub const MAX_HEADER_LEN: usize = BTH_LEN + ATOMIC_ETH_LEN;
