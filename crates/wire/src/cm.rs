//! InfiniBand Communication Manager messages, as the Linux kernel's CM
//! exchanges them over RoCEv2, and the two conventions rdma_cm layers on
//! top: IP service IDs and the private-data header ([`CmaHdr`]).
//!
//! Each CM message is the 232-byte data part of a MAD ([`crate::mad`])
//! with management class 0x07, class version 2, method SEND, and its type
//! in the MAD attribute ID ([`CmAttr`]). The structs here cover every
//! field of REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ and SIDR_REP at
//! its exact bit position, private data included; `parse` reads the
//! 232-byte data part, `emit` writes it, and [`CmMessage`] handles a whole
//! 256-byte MAD.
//!
//! Offsets in the docs below are within the data part (add 24 for the
//! MAD); bits are numbered from the most significant bit of a byte, as
//! the IBTA tables number them; all multi-byte fields are big-endian.
//! docs/rdma-cm.md, section 4.4, lists the same layouts with their
//! sources (the kernel's `include/rdma/ibta_vol1_c12.h`).
//!
//! Private data is carried as the full fixed-size area of each message:
//! the wire has no length for it, and the kernel reports the whole area
//! to the receiver. [`private_data`] zero-fills a shorter slice into one.
//!
//! Parsing never refuses a field value (reserved bits are ignored), so a
//! peer's message is always readable; emitting refuses values too wide
//! for their field with [`MadError::FieldOutOfRange`] and writes reserved
//! bits as zero.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::mad::{
    self, check_width, method, Block, BlockMut, MadError, MadHeader, BASE_VERSION,
    CM_CLASS_VERSION, MAD_DATA_LEN, MAD_HEADER_LEN, MAD_LEN, MGMT_CLASS_CM,
};
use crate::u24::{Psn, Qpn};

/// Private data room in a REQ.
pub const REQ_PRIVATE_DATA_LEN: usize = 92;
/// Private data room in an MRA.
pub const MRA_PRIVATE_DATA_LEN: usize = 222;
/// Private data room in a REJ.
pub const REJ_PRIVATE_DATA_LEN: usize = 148;
/// Additional Rejection Information room in a REJ.
pub const REJ_ARI_LEN: usize = 72;
/// Private data room in a REP.
pub const REP_PRIVATE_DATA_LEN: usize = 196;
/// Private data room in an RTU.
pub const RTU_PRIVATE_DATA_LEN: usize = 224;
/// Private data room in a DREQ.
pub const DREQ_PRIVATE_DATA_LEN: usize = 220;
/// Private data room in a DREP.
pub const DREP_PRIVATE_DATA_LEN: usize = 224;
/// Private data room in a SIDR_REQ.
pub const SIDR_REQ_PRIVATE_DATA_LEN: usize = 216;
/// Private data room in a SIDR_REP.
pub const SIDR_REP_PRIVATE_DATA_LEN: usize = 136;
/// Additional information room in a SIDR_REP.
pub const SIDR_REP_INFO_LEN: usize = 72;

/// Length of the rdma_cm header at the start of REQ and SIDR_REQ private
/// data for IP addressing.
pub const CMA_HDR_LEN: usize = 36;
/// The only rdma_cm header version.
pub const CMA_VERSION: u8 = 0;
/// What an rdma_cm user may put in a REQ of an IP connection (92 - 36).
pub const IP_REQ_USER_DATA_LEN: usize = REQ_PRIVATE_DATA_LEN - CMA_HDR_LEN;
/// What an rdma_cm user may put in a SIDR_REQ of an IP id (216 - 36).
pub const IP_SIDR_REQ_USER_DATA_LEN: usize = SIDR_REQ_PRIVATE_DATA_LEN - CMA_HDR_LEN;
/// The Q_Key rdma_cm gives UD ids of the UDP and IB port spaces
/// (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// The CM message types, by MAD attribute ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum CmAttr {
    /// Request for communication.
    Req = 0x0010,
    /// Message receipt acknowledgement ("wait longer").
    Mra = 0x0011,
    /// Reject.
    Rej = 0x0012,
    /// Reply to a REQ.
    Rep = 0x0013,
    /// Ready to use.
    Rtu = 0x0014,
    /// Disconnection request.
    Dreq = 0x0015,
    /// Disconnection reply.
    Drep = 0x0016,
    /// Service ID resolution request (UD).
    SidrReq = 0x0017,
    /// Service ID resolution reply (UD).
    SidrRep = 0x0018,
    /// Load alternate path (ignored on RoCE by the kernel).
    Lap = 0x0019,
    /// Alternate path response (ignored on RoCE by the kernel).
    Apr = 0x001A,
}

impl CmAttr {
    /// The attribute with this ID, if the CM defines one.
    pub const fn from_id(id: u16) -> Option<Self> {
        Some(match id {
            0x0010 => Self::Req,
            0x0011 => Self::Mra,
            0x0012 => Self::Rej,
            0x0013 => Self::Rep,
            0x0014 => Self::Rtu,
            0x0015 => Self::Dreq,
            0x0016 => Self::Drep,
            0x0017 => Self::SidrReq,
            0x0018 => Self::SidrRep,
            0x0019 => Self::Lap,
            0x001A => Self::Apr,
            _ => return None,
        })
    }

    /// The MAD attribute ID.
    pub const fn id(self) -> u16 {
        self as u16
    }
}

/// REJ reasons (the kernel's `enum ib_cm_rej_reason`). The field is 16
/// bits and kept as a number so that any value round-trips.
pub mod rej_reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// No EE context available.
    pub const NO_EEC: u16 = 2;
    /// No resources.
    pub const NO_RESOURCES: u16 = 3;
    /// Timeout (the ARI carries the sender's CA GUID).
    pub const TIMEOUT: u16 = 4;
    /// Unsupported request.
    pub const UNSUPPORTED: u16 = 5;
    /// Invalid communication ID.
    pub const INVALID_COMM_ID: u16 = 6;
    /// Invalid communication instance.
    pub const INVALID_COMM_INSTANCE: u16 = 7;
    /// Nothing listens on the service ID.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Transport service type not supported.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// The remote QP is still in timewait from an earlier connection.
    pub const STALE_CONN: u16 = 10;
    /// RDC does not exist.
    pub const RDC_NOT_EXIST: u16 = 11;
    /// The primary path's GID cannot be used.
    pub const INVALID_GID: u16 = 12;
    /// Invalid primary LID.
    pub const INVALID_LID: u16 = 13;
    /// Invalid primary SL.
    pub const INVALID_SL: u16 = 14;
    /// Invalid primary traffic class.
    pub const INVALID_TRAFFIC_CLASS: u16 = 15;
    /// Invalid primary hop limit.
    pub const INVALID_HOP_LIMIT: u16 = 16;
    /// Invalid primary packet rate.
    pub const INVALID_PACKET_RATE: u16 = 17;
    /// Invalid alternate GID.
    pub const INVALID_ALT_GID: u16 = 18;
    /// Invalid alternate LID.
    pub const INVALID_ALT_LID: u16 = 19;
    /// Invalid alternate SL.
    pub const INVALID_ALT_SL: u16 = 20;
    /// Invalid alternate traffic class.
    pub const INVALID_ALT_TRAFFIC_CLASS: u16 = 21;
    /// Invalid alternate hop limit.
    pub const INVALID_ALT_HOP_LIMIT: u16 = 22;
    /// Invalid alternate packet rate.
    pub const INVALID_ALT_PACKET_RATE: u16 = 23;
    /// Port CM redirect.
    pub const PORT_CM_REDIRECT: u16 = 24;
    /// Port redirect.
    pub const PORT_REDIRECT: u16 = 25;
    /// Invalid path MTU.
    pub const INVALID_MTU: u16 = 26;
    /// Insufficient responder resources.
    pub const INSUFFICIENT_RESP_RESOURCES: u16 = 27;
    /// Rejected by the consumer (rdma_reject, or no rdma_cm id matched).
    pub const CONSUMER_DEFINED: u16 = 28;
    /// Invalid RNR retry count.
    pub const INVALID_RNR_RETRY: u16 = 29;
    /// Duplicate local comm ID.
    pub const DUPLICATE_LOCAL_COMM_ID: u16 = 30;
    /// Invalid class version.
    pub const INVALID_CLASS_VERSION: u16 = 31;
    /// Invalid primary flow label.
    pub const INVALID_FLOW_LABEL: u16 = 32;
    /// Invalid alternate flow label.
    pub const INVALID_ALT_FLOW_LABEL: u16 = 33;
    /// ECE vendor option not supported (`rdma_reject_ece`).
    pub const VENDOR_OPTION_NOT_SUPPORTED: u16 = 35;
}

/// SIDR_REP status values.
pub mod sidr_status {
    /// The service is there: QPN and Q_Key are valid.
    pub const SUCCESS: u8 = 0;
    /// Nothing listens on the service ID.
    pub const UNSUPPORTED: u8 = 1;
    /// Rejected by the consumer.
    pub const REJECT: u8 = 2;
    /// No QP.
    pub const NO_QP: u8 = 3;
    /// Redirect (additional information holds where to).
    pub const REDIRECT: u8 = 4;
    /// Class version not supported.
    pub const UNSUPPORTED_VERSION: u8 = 5;
}

/// Transport service type of a REQ (2 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TransportType {
    /// Reliable connected.
    #[default]
    Rc = 0,
    /// Unreliable connected.
    Uc = 1,
    /// Reliable datagram.
    Rd = 2,
    /// See the extended transport type (1 = XRC).
    Extended = 3,
}

impl TransportType {
    const fn from_bits(bits: u8) -> Self {
        match bits & 3 {
            0 => Self::Rc,
            1 => Self::Uc,
            2 => Self::Rd,
            _ => Self::Extended,
        }
    }
}

/// Which message an MRA acknowledges or a REJ rejects (2 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MessageKind {
    /// A REQ.
    #[default]
    Req = 0,
    /// A REP.
    Rep = 1,
    /// Anything else (LAP, or a REJ after the REP stage).
    Other = 2,
    /// Reserved value 3, kept so that parsing never fails.
    Reserved = 3,
}

impl MessageKind {
    const fn from_bits(bits: u8) -> Self {
        match bits & 3 {
            0 => Self::Req,
            1 => Self::Rep,
            2 => Self::Other,
            _ => Self::Reserved,
        }
    }
}

/// Copies `data` into a private-data area of `N` bytes, zero-filling the
/// rest; fails if it does not fit.
pub fn private_data<const N: usize>(data: &[u8]) -> Result<[u8; N], MadError> {
    let mut out = [0u8; N];
    out.get_mut(..data.len())
        .ok_or(MadError::PrivateDataTooLong {
            len: data.len(),
            max: N,
        })?
        .copy_from_slice(data);
    Ok(out)
}

fn check24(field: &'static str, value: u32) -> Result<(), MadError> {
    check_width(field, value.into(), 24)
}

fn check8(field: &'static str, value: u8, bits: u8) -> Result<(), MadError> {
    check_width(field, value.into(), bits)
}

fn gid(b: &Block<'_, MAD_DATA_LEN>, off: usize) -> Ipv6Addr {
    Ipv6Addr::from(b.array::<16>(off))
}

/// One path of a REQ (primary or alternate; 44 bytes).
///
/// Layout from the path's start: 0 local port LID, 2 remote port LID, 4
/// local port GID, 20 remote port GID, 36 flow label (the top 20 bits of
/// the 32-bit word; 6 reserved bits; packet rate in the low 6), 40
/// traffic class, 41 hop limit, 42 SL (0xF0) and subnet local (0x08), 43
/// local ACK timeout (0xF8). The primary path starts at 52, the alternate
/// at 96.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmPath {
    /// Local port LID (0xFFFF, permissive, when the path leaves the subnet:
    /// what the kernel sends on RoCE).
    pub local_lid: u16,
    /// Remote port LID.
    pub remote_lid: u16,
    /// Local port GID (the sender's; on RoCEv2 its IPv6 address or the
    /// IPv4-mapped form of its IPv4 address).
    pub local_gid: Ipv6Addr,
    /// Remote port GID (the receiver's).
    pub remote_gid: Ipv6Addr,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Packet rate (6 bits; 0 = port current).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// The remote port is in the local subnet (no router between).
    pub subnet_local: bool,
    /// Local ACK timeout (5 bits: 4.096 µs × 2^value).
    pub local_ack_timeout: u8,
}

impl Default for CmPath {
    fn default() -> Self {
        Self {
            local_lid: 0,
            remote_lid: 0,
            local_gid: Ipv6Addr::UNSPECIFIED,
            remote_gid: Ipv6Addr::UNSPECIFIED,
            flow_label: 0,
            packet_rate: 0,
            traffic_class: 0,
            hop_limit: 0,
            sl: 0,
            subnet_local: false,
            local_ack_timeout: 0,
        }
    }
}

impl CmPath {
    /// Length of one path in a REQ.
    pub const LEN: usize = 44;

    fn parse(b: &Block<'_, MAD_DATA_LEN>, at: usize) -> Self {
        let word = b.u32(at + 36);
        Self {
            local_lid: b.u16(at),
            remote_lid: b.u16(at + 2),
            local_gid: gid(b, at + 4),
            remote_gid: gid(b, at + 20),
            flow_label: word >> 12,
            packet_rate: (word & 0x3F) as u8,
            traffic_class: b.u8(at + 40),
            hop_limit: b.u8(at + 41),
            sl: b.bits(at + 42, 0xF0),
            subnet_local: b.flag(at + 42, 0x08),
            local_ack_timeout: b.bits(at + 43, 0xF8),
        }
    }

    fn check(&self) -> Result<(), MadError> {
        check_width("flow label", self.flow_label.into(), 20)?;
        check8("packet rate", self.packet_rate, 6)?;
        check8("SL", self.sl, 4)?;
        check8("local ACK timeout", self.local_ack_timeout, 5)
    }

    fn emit(&self, b: &mut BlockMut<'_, MAD_DATA_LEN>, at: usize) {
        b.u16(at, self.local_lid);
        b.u16(at + 2, self.remote_lid);
        b.put(at + 4, &self.local_gid.octets());
        b.put(at + 20, &self.remote_gid.octets());
        b.u32(
            at + 36,
            (self.flow_label << 12) | u32::from(self.packet_rate & 0x3F),
        );
        b.u8(at + 40, self.traffic_class);
        b.u8(at + 41, self.hop_limit);
        b.bits(at + 42, 0xF0, self.sl);
        b.flag(at + 42, 0x08, self.subnet_local);
        b.bits(at + 43, 0xF8, self.local_ack_timeout);
    }
}

/// REQ: request for communication (attribute 0x0010).
///
/// Layout: 0 local comm ID · 4 reserved · 5 vendor ID (24) · 8 service ID
/// · 16 local CA GUID · 24 reserved · 28 local Q_Key · 32 local QPN (24),
/// 35 responder resources · 36 local EECN (24), 39 initiator depth · 40
/// remote EECN (24), 43 remote CM response timeout (0xF8), transport
/// service type (0x06), end-to-end flow control (0x01) · 44 starting PSN
/// (24), 47 local CM response timeout (0xF8), retry count (0x07) · 48
/// P_Key · 50 path MTU (0xF0), RDC exists (0x08), RNR retry count (0x07)
/// · 51 max CM retries (0xF0), SRQ (0x08), extended transport type (0x07)
/// · 52 primary path · 96 alternate path (its byte 139 also holds SAP
/// supported, 0x04) · 140 private data (92).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmReq {
    /// The requester's communication ID.
    pub local_comm_id: u32,
    /// ECE vendor ID (24 bits; 0 without ECE).
    pub vendor_id: u32,
    /// Service ID (see [`IpServiceId`]).
    pub service_id: u64,
    /// The requester's CA (node) GUID.
    pub local_ca_guid: u64,
    /// The requester's Q_Key (0 for RC).
    pub local_qkey: u32,
    /// The requester's QP.
    pub local_qpn: Qpn,
    /// RDMA READ/atomic requests the requester accepts at once.
    pub responder_resources: u8,
    /// Local EE context (24 bits; 0 for RC/UC).
    pub local_eecn: u32,
    /// RDMA READ/atomic requests the requester issues at once.
    pub initiator_depth: u8,
    /// Remote EE context (24 bits).
    pub remote_eecn: u32,
    /// How long the receiver may take to answer (5 bits; 4.096 µs × 2^v).
    pub remote_cm_response_timeout: u8,
    /// Transport service type.
    pub transport: TransportType,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// The first PSN the receiver will send with (the requester's receive
    /// PSN).
    pub starting_psn: Psn,
    /// How long the requester may take to answer (5 bits).
    pub local_cm_response_timeout: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path MTU (4 bits, IB enum: 1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// RDC exists.
    pub rdc_exists: bool,
    /// RNR retry count (3 bits; 7 = infinite).
    pub rnr_retry_count: u8,
    /// How often the CM retransmits (4 bits).
    pub max_cm_retries: u8,
    /// The requester's QP uses an SRQ.
    pub srq: bool,
    /// Extended transport type (3 bits; 1 = XRC).
    pub extended_transport_type: u8,
    /// Primary path.
    pub primary: CmPath,
    /// Alternate path. All zero when there is none: a non-zero alternate
    /// local LID makes the kernel believe there is one.
    pub alternate: CmPath,
    /// SAP supported.
    pub sap_supported: bool,
    /// Private data; for rdma_cm IP ids it starts with a [`CmaHdr`].
    pub private_data: [u8; REQ_PRIVATE_DATA_LEN],
}

impl Default for CmReq {
    fn default() -> Self {
        Self {
            local_comm_id: 0,
            vendor_id: 0,
            service_id: 0,
            local_ca_guid: 0,
            local_qkey: 0,
            local_qpn: Qpn::ZERO,
            responder_resources: 0,
            local_eecn: 0,
            initiator_depth: 0,
            remote_eecn: 0,
            remote_cm_response_timeout: 0,
            transport: TransportType::Rc,
            end_to_end_flow_control: false,
            starting_psn: Psn::ZERO,
            local_cm_response_timeout: 0,
            retry_count: 0,
            pkey: 0,
            path_mtu: 0,
            rdc_exists: false,
            rnr_retry_count: 0,
            max_cm_retries: 0,
            srq: false,
            extended_transport_type: 0,
            primary: CmPath::default(),
            alternate: CmPath::default(),
            sap_supported: false,
            private_data: [0; REQ_PRIVATE_DATA_LEN],
        }
    }
}

impl CmReq {
    /// The attribute this message is sent as.
    pub const ATTR: CmAttr = CmAttr::Req;
    const WHAT: &'static str = "CM REQ";

    /// Decodes a REQ from the first 232 bytes of `data` (a MAD's data part).
    pub fn parse(data: &[u8]) -> Result<Self, MadError> {
        let b = Block::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        Ok(Self {
            local_comm_id: b.u32(0),
            vendor_id: b.u24(5),
            service_id: b.u64(8),
            local_ca_guid: b.u64(16),
            local_qkey: b.u32(28),
            local_qpn: Qpn::new_masked(b.u24(32)),
            responder_resources: b.u8(35),
            local_eecn: b.u24(36),
            initiator_depth: b.u8(39),
            remote_eecn: b.u24(40),
            remote_cm_response_timeout: b.bits(43, 0xF8),
            transport: TransportType::from_bits(b.bits(43, 0x06)),
            end_to_end_flow_control: b.flag(43, 0x01),
            starting_psn: Psn::new_masked(b.u24(44)),
            local_cm_response_timeout: b.bits(47, 0xF8),
            retry_count: b.bits(47, 0x07),
            pkey: b.u16(48),
            path_mtu: b.bits(50, 0xF0),
            rdc_exists: b.flag(50, 0x08),
            rnr_retry_count: b.bits(50, 0x07),
            max_cm_retries: b.bits(51, 0xF0),
            srq: b.flag(51, 0x08),
            extended_transport_type: b.bits(51, 0x07),
            primary: CmPath::parse(&b, 52),
            alternate: CmPath::parse(&b, 96),
            sap_supported: b.flag(139, 0x04),
            private_data: b.array(140),
        })
    }

    fn check(&self) -> Result<(), MadError> {
        check24("vendor ID", self.vendor_id)?;
        check24("local EECN", self.local_eecn)?;
        check24("remote EECN", self.remote_eecn)?;
        check8(
            "remote CM response timeout",
            self.remote_cm_response_timeout,
            5,
        )?;
        check8(
            "local CM response timeout",
            self.local_cm_response_timeout,
            5,
        )?;
        check8("retry count", self.retry_count, 3)?;
        check8("path MTU", self.path_mtu, 4)?;
        check8("RNR retry count", self.rnr_retry_count, 3)?;
        check8("max CM retries", self.max_cm_retries, 4)?;
        check8("extended transport type", self.extended_transport_type, 3)?;
        self.primary.check()?;
        self.alternate.check()
    }

    /// Encodes the REQ into the first 232 bytes of `data` and returns 232.
    pub fn emit(&self, data: &mut [u8]) -> Result<usize, MadError> {
        self.check()?;
        let mut b = BlockMut::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        b.u32(0, self.local_comm_id);
        b.u24(5, self.vendor_id);
        b.u64(8, self.service_id);
        b.u64(16, self.local_ca_guid);
        b.u32(28, self.local_qkey);
        b.u24(32, self.local_qpn.get());
        b.u8(35, self.responder_resources);
        b.u24(36, self.local_eecn);
        b.u8(39, self.initiator_depth);
        b.u24(40, self.remote_eecn);
        b.bits(43, 0xF8, self.remote_cm_response_timeout);
        b.bits(43, 0x06, self.transport as u8);
        b.flag(43, 0x01, self.end_to_end_flow_control);
        b.u24(44, self.starting_psn.get());
        b.bits(47, 0xF8, self.local_cm_response_timeout);
        b.bits(47, 0x07, self.retry_count);
        b.u16(48, self.pkey);
        b.bits(50, 0xF0, self.path_mtu);
        b.flag(50, 0x08, self.rdc_exists);
        b.bits(50, 0x07, self.rnr_retry_count);
        b.bits(51, 0xF0, self.max_cm_retries);
        b.flag(51, 0x08, self.srq);
        b.bits(51, 0x07, self.extended_transport_type);
        self.primary.emit(&mut b, 52);
        self.alternate.emit(&mut b, 96);
        b.flag(139, 0x04, self.sap_supported);
        b.put(140, &self.private_data);
        Ok(MAD_DATA_LEN)
    }
}

/// MRA: message receipt acknowledgement (attribute 0x0011), "your REQ/REP
/// arrived, wait longer".
///
/// Layout: 0 local comm ID · 4 remote comm ID · 8 message MRAed (0xC0) ·
/// 9 service timeout (0xF8) · 10 private data (222).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmMra {
    /// The sender's comm ID.
    pub local_comm_id: u32,
    /// The receiver's comm ID.
    pub remote_comm_id: u32,
    /// Which message is acknowledged.
    pub message_mraed: MessageKind,
    /// How much longer to wait (5 bits; 4.096 µs × 2^v).
    pub service_timeout: u8,
    /// Private data.
    pub private_data: [u8; MRA_PRIVATE_DATA_LEN],
}

impl Default for CmMra {
    fn default() -> Self {
        Self {
            local_comm_id: 0,
            remote_comm_id: 0,
            message_mraed: MessageKind::Req,
            service_timeout: 0,
            private_data: [0; MRA_PRIVATE_DATA_LEN],
        }
    }
}

impl CmMra {
    /// The attribute this message is sent as.
    pub const ATTR: CmAttr = CmAttr::Mra;
    const WHAT: &'static str = "CM MRA";

    /// Decodes an MRA from the first 232 bytes of `data`.
    pub fn parse(data: &[u8]) -> Result<Self, MadError> {
        let b = Block::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        Ok(Self {
            local_comm_id: b.u32(0),
            remote_comm_id: b.u32(4),
            message_mraed: MessageKind::from_bits(b.bits(8, 0xC0)),
            service_timeout: b.bits(9, 0xF8),
            private_data: b.array(10),
        })
    }

    /// Encodes the MRA into the first 232 bytes of `data` and returns 232.
    pub fn emit(&self, data: &mut [u8]) -> Result<usize, MadError> {
        check8("service timeout", self.service_timeout, 5)?;
        let mut b = BlockMut::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        b.u32(0, self.local_comm_id);
        b.u32(4, self.remote_comm_id);
        b.bits(8, 0xC0, self.message_mraed as u8);
        b.bits(9, 0xF8, self.service_timeout);
        b.put(10, &self.private_data);
        Ok(MAD_DATA_LEN)
    }
}

/// REJ: reject (attribute 0x0012).
///
/// Layout: 0 local comm ID · 4 remote comm ID · 8 message rejected (0xC0)
/// · 9 reject info length (0xFE, 7 bits) · 10 reason (16) · 12 ARI (72) ·
/// 84 private data (148).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmRej {
    /// The sender's comm ID (0 when rejecting a REQ it never accepted).
    pub local_comm_id: u32,
    /// The receiver's comm ID.
    pub remote_comm_id: u32,
    /// Which message is rejected.
    pub message_rejected: MessageKind,
    /// Bytes of the ARI that are meaningful (7 bits).
    pub reject_info_len: u8,
    /// Reason (see [`rej_reason`]).
    pub reason: u16,
    /// Additional rejection information.
    pub ari: [u8; REJ_ARI_LEN],
    /// Private data.
    pub private_data: [u8; REJ_PRIVATE_DATA_LEN],
}

impl Default for CmRej {
    fn default() -> Self {
        Self {
            local_comm_id: 0,
            remote_comm_id: 0,
            message_rejected: MessageKind::Req,
            reject_info_len: 0,
            reason: 0,
            ari: [0; REJ_ARI_LEN],
            private_data: [0; REJ_PRIVATE_DATA_LEN],
        }
    }
}

impl CmRej {
    /// The attribute this message is sent as.
    pub const ATTR: CmAttr = CmAttr::Rej;
    const WHAT: &'static str = "CM REJ";

    /// Decodes a REJ from the first 232 bytes of `data`.
    pub fn parse(data: &[u8]) -> Result<Self, MadError> {
        let b = Block::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        Ok(Self {
            local_comm_id: b.u32(0),
            remote_comm_id: b.u32(4),
            message_rejected: MessageKind::from_bits(b.bits(8, 0xC0)),
            reject_info_len: b.bits(9, 0xFE),
            reason: b.u16(10),
            ari: b.array(12),
            private_data: b.array(84),
        })
    }

    /// Encodes the REJ into the first 232 bytes of `data` and returns 232.
    pub fn emit(&self, data: &mut [u8]) -> Result<usize, MadError> {
        check8("reject info length", self.reject_info_len, 7)?;
        let mut b = BlockMut::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        b.u32(0, self.local_comm_id);
        b.u32(4, self.remote_comm_id);
        b.bits(8, 0xC0, self.message_rejected as u8);
        b.bits(9, 0xFE, self.reject_info_len);
        b.u16(10, self.reason);
        b.put(12, &self.ari);
        b.put(84, &self.private_data);
        Ok(MAD_DATA_LEN)
    }
}

/// REP: reply to a REQ (attribute 0x0013).
///
/// Layout: 0 local comm ID · 4 remote comm ID · 8 local Q_Key · 12 local
/// QPN (24), 15 vendor ID bits 23..16 · 16 local EECN (24), 19 vendor ID
/// bits 15..8 · 20 starting PSN (24), 23 vendor ID bits 7..0 · 24
/// responder resources · 25 initiator depth · 26 target ACK delay
/// (0xF8), failover accepted (0x06), end-to-end flow control (0x01) · 27
/// RNR retry count (0xE0), SRQ (0x10) · 28 local CA GUID · 36 private
/// data (196).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmRep {
    /// The replier's comm ID.
    pub local_comm_id: u32,
    /// The requester's comm ID.
    pub remote_comm_id: u32,
    /// The replier's Q_Key.
    pub local_qkey: u32,
    /// The replier's QP.
    pub local_qpn: Qpn,
    /// ECE vendor ID (24 bits, spread over three otherwise reserved bytes).
    pub vendor_id: u32,
    /// Local EE context (24 bits).
    pub local_eecn: u32,
    /// The first PSN the requester will send with (the replier's receive
    /// PSN).
    pub starting_psn: Psn,
    /// RDMA READ/atomic requests the replier accepts at once.
    pub responder_resources: u8,
    /// RDMA READ/atomic requests the replier issues at once.
    pub initiator_depth: u8,
    /// The replier's CA ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// The replier's QP uses an SRQ.
    pub srq: bool,
    /// The replier's CA (node) GUID.
    pub local_ca_guid: u64,
    /// Private data (no rdma_cm header here).
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

impl Default for CmRep {
    fn default() -> Self {
        Self {
            local_comm_id: 0,
            remote_comm_id: 0,
            local_qkey: 0,
            local_qpn: Qpn::ZERO,
            vendor_id: 0,
            local_eecn: 0,
            starting_psn: Psn::ZERO,
            responder_resources: 0,
            initiator_depth: 0,
            target_ack_delay: 0,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: 0,
            srq: false,
            local_ca_guid: 0,
            private_data: [0; REP_PRIVATE_DATA_LEN],
        }
    }
}

impl CmRep {
    /// The attribute this message is sent as.
    pub const ATTR: CmAttr = CmAttr::Rep;
    const WHAT: &'static str = "CM REP";

    /// Decodes a REP from the first 232 bytes of `data`.
    pub fn parse(data: &[u8]) -> Result<Self, MadError> {
        let b = Block::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        let vendor_id = u32::from_be_bytes([0, b.u8(15), b.u8(19), b.u8(23)]);
        Ok(Self {
            local_comm_id: b.u32(0),
            remote_comm_id: b.u32(4),
            local_qkey: b.u32(8),
            local_qpn: Qpn::new_masked(b.u24(12)),
            vendor_id,
            local_eecn: b.u24(16),
            starting_psn: Psn::new_masked(b.u24(20)),
            responder_resources: b.u8(24),
            initiator_depth: b.u8(25),
            target_ack_delay: b.bits(26, 0xF8),
            failover_accepted: b.bits(26, 0x06),
            end_to_end_flow_control: b.flag(26, 0x01),
            rnr_retry_count: b.bits(27, 0xE0),
            srq: b.flag(27, 0x10),
            local_ca_guid: b.u64(28),
            private_data: b.array(36),
        })
    }

    fn check(&self) -> Result<(), MadError> {
        check24("vendor ID", self.vendor_id)?;
        check24("local EECN", self.local_eecn)?;
        check8("target ACK delay", self.target_ack_delay, 5)?;
        check8("failover accepted", self.failover_accepted, 2)?;
        check8("RNR retry count", self.rnr_retry_count, 3)
    }

    /// Encodes the REP into the first 232 bytes of `data` and returns 232.
    pub fn emit(&self, data: &mut [u8]) -> Result<usize, MadError> {
        self.check()?;
        let mut b = BlockMut::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        let [_, vh, vm, vl] = self.vendor_id.to_be_bytes();
        b.u32(0, self.local_comm_id);
        b.u32(4, self.remote_comm_id);
        b.u32(8, self.local_qkey);
        b.u24(12, self.local_qpn.get());
        b.u8(15, vh);
        b.u24(16, self.local_eecn);
        b.u8(19, vm);
        b.u24(20, self.starting_psn.get());
        b.u8(23, vl);
        b.u8(24, self.responder_resources);
        b.u8(25, self.initiator_depth);
        b.bits(26, 0xF8, self.target_ack_delay);
        b.bits(26, 0x06, self.failover_accepted);
        b.flag(26, 0x01, self.end_to_end_flow_control);
        b.bits(27, 0xE0, self.rnr_retry_count);
        b.flag(27, 0x10, self.srq);
        b.u64(28, self.local_ca_guid);
        b.put(36, &self.private_data);
        Ok(MAD_DATA_LEN)
    }
}

/// RTU: ready to use (attribute 0x0014).
///
/// Layout: 0 local comm ID · 4 remote comm ID · 8 private data (224).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmRtu {
    /// The sender's (requester's) comm ID.
    pub local_comm_id: u32,
    /// The receiver's comm ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; RTU_PRIVATE_DATA_LEN],
}

impl Default for CmRtu {
    fn default() -> Self {
        Self {
            local_comm_id: 0,
            remote_comm_id: 0,
            private_data: [0; RTU_PRIVATE_DATA_LEN],
        }
    }
}

impl CmRtu {
    /// The attribute this message is sent as.
    pub const ATTR: CmAttr = CmAttr::Rtu;
    const WHAT: &'static str = "CM RTU";

    /// Decodes an RTU from the first 232 bytes of `data`.
    pub fn parse(data: &[u8]) -> Result<Self, MadError> {
        let b = Block::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        Ok(Self {
            local_comm_id: b.u32(0),
            remote_comm_id: b.u32(4),
            private_data: b.array(8),
        })
    }

    /// Encodes the RTU into the first 232 bytes of `data` and returns 232.
    pub fn emit(&self, data: &mut [u8]) -> Result<usize, MadError> {
        let mut b = BlockMut::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        b.u32(0, self.local_comm_id);
        b.u32(4, self.remote_comm_id);
        b.put(8, &self.private_data);
        Ok(MAD_DATA_LEN)
    }
}

/// DREQ: disconnection request (attribute 0x0015).
///
/// Layout: 0 local comm ID · 4 remote comm ID · 8 remote QPN/EECN (24) ·
/// 12 private data (220).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmDreq {
    /// The sender's comm ID.
    pub local_comm_id: u32,
    /// The receiver's comm ID.
    pub remote_comm_id: u32,
    /// The **receiver's** QP; the kernel ignores a DREQ whose QPN is not
    /// its local one.
    pub remote_qpn: Qpn,
    /// Private data (not passed up by rdma_cm).
    pub private_data: [u8; DREQ_PRIVATE_DATA_LEN],
}

impl Default for CmDreq {
    fn default() -> Self {
        Self {
            local_comm_id: 0,
            remote_comm_id: 0,
            remote_qpn: Qpn::ZERO,
            private_data: [0; DREQ_PRIVATE_DATA_LEN],
        }
    }
}

impl CmDreq {
    /// The attribute this message is sent as.
    pub const ATTR: CmAttr = CmAttr::Dreq;
    const WHAT: &'static str = "CM DREQ";

    /// Decodes a DREQ from the first 232 bytes of `data`.
    pub fn parse(data: &[u8]) -> Result<Self, MadError> {
        let b = Block::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        Ok(Self {
            local_comm_id: b.u32(0),
            remote_comm_id: b.u32(4),
            remote_qpn: Qpn::new_masked(b.u24(8)),
            private_data: b.array(12),
        })
    }

    /// Encodes the DREQ into the first 232 bytes of `data` and returns 232.
    pub fn emit(&self, data: &mut [u8]) -> Result<usize, MadError> {
        let mut b = BlockMut::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        b.u32(0, self.local_comm_id);
        b.u32(4, self.remote_comm_id);
        b.u24(8, self.remote_qpn.get());
        b.put(12, &self.private_data);
        Ok(MAD_DATA_LEN)
    }
}

/// DREP: disconnection reply (attribute 0x0016).
///
/// Layout: 0 local comm ID · 4 remote comm ID · 8 private data (224).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmDrep {
    /// The sender's comm ID.
    pub local_comm_id: u32,
    /// The receiver's comm ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; DREP_PRIVATE_DATA_LEN],
}

impl Default for CmDrep {
    fn default() -> Self {
        Self {
            local_comm_id: 0,
            remote_comm_id: 0,
            private_data: [0; DREP_PRIVATE_DATA_LEN],
        }
    }
}

impl CmDrep {
    /// The attribute this message is sent as.
    pub const ATTR: CmAttr = CmAttr::Drep;
    const WHAT: &'static str = "CM DREP";

    /// Decodes a DREP from the first 232 bytes of `data`.
    pub fn parse(data: &[u8]) -> Result<Self, MadError> {
        let b = Block::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        Ok(Self {
            local_comm_id: b.u32(0),
            remote_comm_id: b.u32(4),
            private_data: b.array(8),
        })
    }

    /// Encodes the DREP into the first 232 bytes of `data` and returns 232.
    pub fn emit(&self, data: &mut [u8]) -> Result<usize, MadError> {
        let mut b = BlockMut::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        b.u32(0, self.local_comm_id);
        b.u32(4, self.remote_comm_id);
        b.put(8, &self.private_data);
        Ok(MAD_DATA_LEN)
    }
}

/// SIDR_REQ: service ID resolution request, rdma_cm's "connect" for UD
/// (attribute 0x0017).
///
/// Layout: 0 request ID · 4 P_Key · 6 reserved · 8 service ID · 16
/// private data (216).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmSidrReq {
    /// The requester's ID for this request.
    pub request_id: u32,
    /// Partition key.
    pub pkey: u16,
    /// Service ID.
    pub service_id: u64,
    /// Private data; for rdma_cm IP ids it starts with a [`CmaHdr`].
    pub private_data: [u8; SIDR_REQ_PRIVATE_DATA_LEN],
}

impl Default for CmSidrReq {
    fn default() -> Self {
        Self {
            request_id: 0,
            pkey: 0,
            service_id: 0,
            private_data: [0; SIDR_REQ_PRIVATE_DATA_LEN],
        }
    }
}

impl CmSidrReq {
    /// The attribute this message is sent as.
    pub const ATTR: CmAttr = CmAttr::SidrReq;
    const WHAT: &'static str = "CM SIDR_REQ";

    /// Decodes a SIDR_REQ from the first 232 bytes of `data`.
    pub fn parse(data: &[u8]) -> Result<Self, MadError> {
        let b = Block::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        Ok(Self {
            request_id: b.u32(0),
            pkey: b.u16(4),
            service_id: b.u64(8),
            private_data: b.array(16),
        })
    }

    /// Encodes the SIDR_REQ into the first 232 bytes of `data` and returns
    /// 232.
    pub fn emit(&self, data: &mut [u8]) -> Result<usize, MadError> {
        let mut b = BlockMut::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        b.u32(0, self.request_id);
        b.u16(4, self.pkey);
        b.u64(8, self.service_id);
        b.put(16, &self.private_data);
        Ok(MAD_DATA_LEN)
    }
}

/// SIDR_REP: service ID resolution reply (attribute 0x0018).
///
/// Layout: 0 request ID · 4 status · 5 additional information length · 6
/// vendor ID bits 23..8 (16) · 8 QPN (24), 11 vendor ID bits 7..0 · 12
/// service ID · 20 Q_Key · 24 additional information (72) · 96 private
/// data (136).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmSidrRep {
    /// The request ID of the SIDR_REQ answered.
    pub request_id: u32,
    /// Status (see [`sidr_status`]).
    pub status: u8,
    /// Bytes of the additional information that are meaningful.
    pub additional_info_len: u8,
    /// ECE vendor ID (24 bits).
    pub vendor_id: u32,
    /// The service's QP.
    pub qpn: Qpn,
    /// Service ID.
    pub service_id: u64,
    /// The service QP's Q_Key.
    pub qkey: u32,
    /// Additional information (e.g. a redirect).
    pub additional_info: [u8; SIDR_REP_INFO_LEN],
    /// Private data.
    pub private_data: [u8; SIDR_REP_PRIVATE_DATA_LEN],
}

impl Default for CmSidrRep {
    fn default() -> Self {
        Self {
            request_id: 0,
            status: 0,
            additional_info_len: 0,
            vendor_id: 0,
            qpn: Qpn::ZERO,
            service_id: 0,
            qkey: 0,
            additional_info: [0; SIDR_REP_INFO_LEN],
            private_data: [0; SIDR_REP_PRIVATE_DATA_LEN],
        }
    }
}

impl CmSidrRep {
    /// The attribute this message is sent as.
    pub const ATTR: CmAttr = CmAttr::SidrRep;
    const WHAT: &'static str = "CM SIDR_REP";

    /// Decodes a SIDR_REP from the first 232 bytes of `data`.
    pub fn parse(data: &[u8]) -> Result<Self, MadError> {
        let b = Block::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        Ok(Self {
            request_id: b.u32(0),
            status: b.u8(4),
            additional_info_len: b.u8(5),
            vendor_id: (u32::from(b.u16(6)) << 8) | u32::from(b.u8(11)),
            qpn: Qpn::new_masked(b.u24(8)),
            service_id: b.u64(12),
            qkey: b.u32(20),
            additional_info: b.array(24),
            private_data: b.array(96),
        })
    }

    /// Encodes the SIDR_REP into the first 232 bytes of `data` and returns
    /// 232.
    pub fn emit(&self, data: &mut [u8]) -> Result<usize, MadError> {
        check24("vendor ID", self.vendor_id)?;
        let mut b = BlockMut::<MAD_DATA_LEN>::take(data, Self::WHAT)?;
        b.u32(0, self.request_id);
        b.u8(4, self.status);
        b.u8(5, self.additional_info_len);
        b.u16(6, (self.vendor_id >> 8) as u16);
        b.u24(8, self.qpn.get());
        b.u8(11, self.vendor_id as u8);
        b.u64(12, self.service_id);
        b.u32(20, self.qkey);
        b.put(24, &self.additional_info);
        b.put(96, &self.private_data);
        Ok(MAD_DATA_LEN)
    }
}

/// Any CM message this crate decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmMessage {
    /// REQ.
    Req(CmReq),
    /// MRA.
    Mra(CmMra),
    /// REJ.
    Rej(CmRej),
    /// REP.
    Rep(CmRep),
    /// RTU.
    Rtu(CmRtu),
    /// DREQ.
    Dreq(CmDreq),
    /// DREP.
    Drep(CmDrep),
    /// SIDR_REQ.
    SidrReq(CmSidrReq),
    /// SIDR_REP.
    SidrRep(CmSidrRep),
}

impl CmMessage {
    /// The attribute ID the message is sent with.
    pub const fn attr(&self) -> CmAttr {
        match self {
            Self::Req(_) => CmAttr::Req,
            Self::Mra(_) => CmAttr::Mra,
            Self::Rej(_) => CmAttr::Rej,
            Self::Rep(_) => CmAttr::Rep,
            Self::Rtu(_) => CmAttr::Rtu,
            Self::Dreq(_) => CmAttr::Dreq,
            Self::Drep(_) => CmAttr::Drep,
            Self::SidrReq(_) => CmAttr::SidrReq,
            Self::SidrRep(_) => CmAttr::SidrRep,
        }
    }

    /// Decodes the message in a MAD's 232-byte data part, given its
    /// attribute ID. LAP, APR (which the kernel ignores on RoCE) and
    /// unknown attributes are [`MadError::UnknownAttribute`].
    pub fn parse(attr_id: u16, data: &[u8]) -> Result<Self, MadError> {
        Ok(match CmAttr::from_id(attr_id) {
            Some(CmAttr::Req) => Self::Req(CmReq::parse(data)?),
            Some(CmAttr::Mra) => Self::Mra(CmMra::parse(data)?),
            Some(CmAttr::Rej) => Self::Rej(CmRej::parse(data)?),
            Some(CmAttr::Rep) => Self::Rep(CmRep::parse(data)?),
            Some(CmAttr::Rtu) => Self::Rtu(CmRtu::parse(data)?),
            Some(CmAttr::Dreq) => Self::Dreq(CmDreq::parse(data)?),
            Some(CmAttr::Drep) => Self::Drep(CmDrep::parse(data)?),
            Some(CmAttr::SidrReq) => Self::SidrReq(CmSidrReq::parse(data)?),
            Some(CmAttr::SidrRep) => Self::SidrRep(CmSidrRep::parse(data)?),
            Some(CmAttr::Lap | CmAttr::Apr) | None => {
                return Err(MadError::UnknownAttribute(attr_id))
            }
        })
    }

    /// Encodes the message into a MAD's 232-byte data part; returns 232.
    pub fn emit(&self, data: &mut [u8]) -> Result<usize, MadError> {
        match self {
            Self::Req(m) => m.emit(data),
            Self::Mra(m) => m.emit(data),
            Self::Rej(m) => m.emit(data),
            Self::Rep(m) => m.emit(data),
            Self::Rtu(m) => m.emit(data),
            Self::Dreq(m) => m.emit(data),
            Self::Drep(m) => m.emit(data),
            Self::SidrReq(m) => m.emit(data),
            Self::SidrRep(m) => m.emit(data),
        }
    }

    /// Decodes a whole 256-byte MAD as the kernel's MAD layer and CM would
    /// accept it: base version 1, class 0x07 version 2, method SEND, and an
    /// attribute [`CmMessage::parse`] knows. Returns the header too (its
    /// TID is what an answer echoes, its attribute modifier the ECE
    /// `attr_mod`).
    pub fn parse_mad(mad: &[u8]) -> Result<(MadHeader, Self), MadError> {
        let (header, data) = mad::split(mad)?;
        if header.base_version != BASE_VERSION {
            return Err(MadError::BadBaseVersion(header.base_version));
        }
        if header.mgmt_class != MGMT_CLASS_CM || header.class_version != CM_CLASS_VERSION {
            return Err(MadError::NotCm {
                class: header.mgmt_class,
                version: header.class_version,
            });
        }
        if header.method != method::SEND {
            return Err(MadError::BadMethod(header.method));
        }
        Ok((header, Self::parse(header.attr_id, data)?))
    }

    /// Writes the whole 256-byte MAD: a CM header ([`MadHeader::cm`]) with
    /// this message's attribute ID, `tid` and `attr_mod`, then the message.
    /// Returns 256.
    pub fn emit_mad(&self, tid: u64, attr_mod: u32, buf: &mut [u8]) -> Result<usize, MadError> {
        let available = buf.len();
        let mad = buf
            .first_chunk_mut::<MAD_LEN>()
            .ok_or(MadError::BufferTooSmall {
                what: "MAD",
                needed: MAD_LEN,
                available,
            })?;
        let (header, data) = mad.split_at_mut(MAD_HEADER_LEN);
        // Check and write the body first, so that a refused field leaves no
        // half-written MAD behind a valid-looking header.
        self.emit(data)?;
        MadHeader::cm(self.attr().id(), tid, attr_mod).emit(header)?;
        Ok(MAD_LEN)
    }
}

/// The rdma_cm port spaces (`enum rdma_ucm_port_space`): bits 31..16 of an
/// IP service ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum PortSpace {
    /// IP over InfiniBand.
    Ipoib = 0x0002,
    /// Connected (RC) ids: `rdma_create_id(..., RDMA_PS_TCP)`.
    Tcp = 0x0106,
    /// Datagram (UD) ids: `RDMA_PS_UDP`.
    Udp = 0x0111,
    /// Any QP type: `RDMA_PS_IB`.
    Ib = 0x013F,
}

impl PortSpace {
    /// The port space with this number, if rdma_cm defines one.
    pub const fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            0x0002 => Self::Ipoib,
            0x0106 => Self::Tcp,
            0x0111 => Self::Udp,
            0x013F => Self::Ib,
            _ => return None,
        })
    }
}

/// An rdma_cm service ID for an IP port: `(port_space << 16) | port`
/// (`rdma_get_service_id`). For the TCP, UDP and IB port spaces the top
/// 40 bits are `0x0000000001` (`IB_CMA_SERVICE_ID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpServiceId {
    /// Port space.
    pub port_space: PortSpace,
    /// The listener's (destination) port.
    pub port: u16,
}

impl IpServiceId {
    /// The 64-bit service ID.
    pub const fn to_u64(self) -> u64 {
        ((self.port_space as u64) << 16) | self.port as u64
    }

    /// Splits a service ID of the IP port spaces; `None` for any other
    /// service ID (the passive kernel then finds no rdma_cm listener).
    pub const fn from_u64(sid: u64) -> Option<Self> {
        if sid >> 32 != 0 {
            return None;
        }
        match PortSpace::from_u16((sid >> 16) as u16) {
            Some(port_space) => Some(Self {
                port_space,
                port: sid as u16,
            }),
            None => None,
        }
    }
}

/// The service ID of `port` in `port_space`.
pub const fn ip_service_id(port_space: PortSpace, port: u16) -> u64 {
    IpServiceId { port_space, port }.to_u64()
}

/// The header rdma_cm puts at the start of REQ and SIDR_REQ private data
/// for IP addressing (`struct cma_hdr`, 36 bytes).
///
/// Layout: 0 version (0) · 1 IP version in bits 7..4 (4 or 6) · 2 the
/// active side's source port · 4 source address (16) · 20 destination
/// address (16). An IPv4 address sits in the last 4 bytes of its 16-byte
/// field (bytes 16..20 and 32..36), the rest zero.
///
/// The passive kernel takes its own address from `dst` and the peer from
/// `src`/`src.port()`, matches listeners bound to an address against
/// `dst`, and refuses loopback, zero, multicast and broadcast addresses
/// (docs/rdma-cm.md, section 3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHdr {
    /// The active side's address and source port.
    pub src: SocketAddr,
    /// The passive side's address (its port is in the service ID).
    pub dst: IpAddr,
}

impl CmaHdr {
    /// Decodes the header from the first 36 bytes of `buf`. Fails on a
    /// version other than 0 or an IP version other than 4 or 6; the zero
    /// padding around IPv4 addresses is not checked, as the kernel does
    /// not check it.
    pub fn parse(buf: &[u8]) -> Result<Self, MadError> {
        let b = Block::<CMA_HDR_LEN>::take(buf, "rdma_cm header")?;
        if b.u8(0) != CMA_VERSION {
            return Err(MadError::BadCmaVersion(b.u8(0)));
        }
        let port = b.u16(2);
        let (src, dst) = match b.bits(1, 0xF0) {
            4 => (
                IpAddr::V4(Ipv4Addr::from(b.array::<4>(16))),
                IpAddr::V4(Ipv4Addr::from(b.array::<4>(32))),
            ),
            6 => (
                IpAddr::V6(Ipv6Addr::from(b.array::<16>(4))),
                IpAddr::V6(Ipv6Addr::from(b.array::<16>(20))),
            ),
            v => return Err(MadError::BadIpVersion(v)),
        };
        Ok(Self {
            src: SocketAddr::new(src, port),
            dst,
        })
    }

    /// Encodes the header into the first 36 bytes of `buf` and returns 36.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, MadError> {
        let mut b = BlockMut::<CMA_HDR_LEN>::take(buf, "rdma_cm header")?;
        b.u8(0, CMA_VERSION);
        b.u16(2, self.src.port());
        match (self.src.ip(), self.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                b.bits(1, 0xF0, 4);
                b.put(16, &src.octets());
                b.put(32, &dst.octets());
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                b.bits(1, 0xF0, 6);
                b.put(4, &src.octets());
                b.put(20, &dst.octets());
            }
            _ => return Err(MadError::AddressFamilyMismatch),
        }
        Ok(CMA_HDR_LEN)
    }

    /// A private-data area of `N` bytes (92 for a REQ, 216 for a SIDR_REQ)
    /// holding this header and then `user` data, zero-filled.
    pub fn prepend<const N: usize>(&self, user: &[u8]) -> Result<[u8; N], MadError> {
        let mut out = [0u8; N];
        self.emit(&mut out)?;
        let room = N.saturating_sub(CMA_HDR_LEN);
        out.get_mut(CMA_HDR_LEN..CMA_HDR_LEN + user.len())
            .ok_or(MadError::PrivateDataTooLong {
                len: user.len(),
                max: room,
            })?
            .copy_from_slice(user);
        Ok(out)
    }

    /// Splits REQ or SIDR_REQ private data into the header and the user
    /// data after it (all of it: the wire does not say how much the user
    /// wrote, and the kernel reports the whole rest, 56 bytes for a REQ).
    pub fn split(private_data: &[u8]) -> Result<(Self, &[u8]), MadError> {
        let hdr = Self::parse(private_data)?;
        Ok((hdr, private_data.get(CMA_HDR_LEN..).unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ramp<const N: usize>(start: u8) -> [u8; N] {
        let mut a = [0u8; N];
        for (i, b) in a.iter_mut().enumerate() {
            *b = start.wrapping_add(i as u8);
        }
        a
    }

    fn path(seed: u8) -> CmPath {
        CmPath {
            local_lid: 0x1100 | u16::from(seed),
            remote_lid: 0x2200 | u16::from(seed),
            local_gid: Ipv6Addr::from(ramp::<16>(seed)),
            remote_gid: Ipv6Addr::from(ramp::<16>(seed.wrapping_add(0x40))),
            flow_label: 0xA_BCDE,
            packet_rate: 0x2A,
            traffic_class: 0x5C,
            hop_limit: 0x40,
            sl: 0x9,
            subnet_local: true,
            local_ack_timeout: 0x13,
        }
    }

    fn req() -> CmReq {
        CmReq {
            local_comm_id: 0x1122_3344,
            vendor_id: 0x02_C9AB,
            service_id: 0x0000_0000_0106_1D2F,
            local_ca_guid: 0x0102_0304_0506_0708,
            local_qkey: 0x0A0B_0C0D,
            local_qpn: Qpn::new_masked(0xAB_CDEF),
            responder_resources: 0x10,
            local_eecn: 0x12_3456,
            initiator_depth: 0x20,
            remote_eecn: 0x65_4321,
            remote_cm_response_timeout: 20,
            transport: TransportType::Uc,
            end_to_end_flow_control: true,
            starting_psn: Psn::new_masked(0x7E_DCBA),
            local_cm_response_timeout: 19,
            retry_count: 6,
            pkey: 0xFFFF,
            path_mtu: 3,
            rdc_exists: true,
            rnr_retry_count: 5,
            max_cm_retries: 15,
            srq: true,
            extended_transport_type: 1,
            primary: path(0x30),
            alternate: path(0x80),
            sap_supported: true,
            private_data: ramp(0xA0),
        }
    }

    /// The MAD of `m` with TID 0x55.. and attribute modifier 0x66...
    fn mad(m: CmMessage) -> [u8; MAD_LEN] {
        let mut buf = [0xEEu8; MAD_LEN];
        assert_eq!(
            m.emit_mad(0x5555_5555_0000_0001, 0x6666_6666, &mut buf),
            Ok(MAD_LEN)
        );
        buf
    }

    /// The bytes at MAD offset 24 + `off` (data offset `off`).
    fn at<const L: usize>(mad: &[u8; MAD_LEN], off: usize) -> [u8; L] {
        *mad[MAD_HEADER_LEN + off..].first_chunk::<L>().unwrap()
    }

    #[test]
    fn req_fields_land_at_the_documented_offsets() {
        let m = mad(CmMessage::Req(req()));
        assert_eq!(
            m[..24],
            [
                1, 0x07, 2, 0x03, 0, 0, 0, 0, 0x55, 0x55, 0x55, 0x55, 0, 0, 0, 1, 0x00, 0x10, 0, 0,
                0x66, 0x66, 0x66, 0x66
            ]
        );
        assert_eq!(at::<4>(&m, 0), [0x11, 0x22, 0x33, 0x44]);
        assert_eq!(at::<4>(&m, 4), [0x00, 0x02, 0xC9, 0xAB]);
        assert_eq!(at::<8>(&m, 8), [0, 0, 0, 0, 0x01, 0x06, 0x1D, 0x2F]);
        assert_eq!(at::<8>(&m, 16), [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(at::<4>(&m, 24), [0; 4]);
        assert_eq!(at::<4>(&m, 28), [0x0A, 0x0B, 0x0C, 0x0D]);
        assert_eq!(at::<4>(&m, 32), [0xAB, 0xCD, 0xEF, 0x10]);
        assert_eq!(at::<4>(&m, 36), [0x12, 0x34, 0x56, 0x20]);
        // Remote EECN, then 20 << 3 | UC (1) << 1 | flow control.
        assert_eq!(at::<4>(&m, 40), [0x65, 0x43, 0x21, 0xA3]);
        // Starting PSN, then 19 << 3 | 6.
        assert_eq!(at::<4>(&m, 44), [0x7E, 0xDC, 0xBA, 0x9E]);
        assert_eq!(at::<2>(&m, 48), [0xFF, 0xFF]);
        // MTU 3 << 4 | RDC 0x08 | RNR 5; retries 15 << 4 | SRQ | XRC 1.
        assert_eq!(at::<2>(&m, 50), [0x3D, 0xF9]);
        // Primary path.
        assert_eq!(at::<4>(&m, 52), [0x11, 0x30, 0x22, 0x30]);
        assert_eq!(at::<16>(&m, 56), ramp(0x30));
        assert_eq!(at::<16>(&m, 72), ramp(0x70));
        // Flow label 0xABCDE in the top 20 bits, packet rate 0x2A in the low 6.
        assert_eq!(at::<4>(&m, 88), [0xAB, 0xCD, 0xE0, 0x2A]);
        assert_eq!(at::<4>(&m, 92), [0x5C, 0x40, 0x98, 0x98]);
        // Alternate path, SAP supported in 0x04 of byte 139.
        assert_eq!(at::<4>(&m, 96), [0x11, 0x80, 0x22, 0x80]);
        assert_eq!(at::<16>(&m, 100), ramp(0x80));
        assert_eq!(at::<16>(&m, 116), ramp(0xC0));
        assert_eq!(at::<4>(&m, 132), [0xAB, 0xCD, 0xE0, 0x2A]);
        assert_eq!(at::<4>(&m, 136), [0x5C, 0x40, 0x98, 0x9C]);
        assert_eq!(at::<92>(&m, 140), ramp(0xA0));
        assert_eq!(CmMessage::parse_mad(&m).unwrap().1, CmMessage::Req(req()));
    }

    /// A REQ as a Linux kernel CM sent it over RoCEv2 (rdma_cm connect
    /// from 10.0.0.2 to 10.0.0.4, TCP port 18515, on a ConnectX host with
    /// ECE; the packet bytes are published in a public fuzzing template).
    /// Independent of the IBTA tables this crate was written from: the
    /// flow label is the kernel's hash of the ports, found in the top 20
    /// bits of the word at 88.
    #[test]
    fn a_kernel_req_parses_and_reemits_exactly() {
        let mut mad = [0u8; MAD_LEN];
        let header = [
            0x01, 0x07, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x06, 0x36, 0xEF,
            0x56, 0x09, 0x00, 0x10, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00,
        ];
        let fixed = [
            0x09, 0x56, 0xEF, 0x36, 0x00, 0x00, 0x15, 0xB3, 0x00, 0x00, 0x00, 0x00, 0x01, 0x06,
            0x48, 0x53, 0x10, 0x70, 0xFD, 0x03, 0x00, 0xCB, 0xDF, 0xFE, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x11, 0xF4, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0xB0, 0x94, 0xDC, 0xB0, 0xB7, 0xFF, 0xFF, 0x37, 0xF0, 0xFF, 0xFF, 0xFF, 0xFF,
        ];
        mad[..24].copy_from_slice(&header);
        mad[24..24 + 56].copy_from_slice(&fixed);
        mad[24 + 56..24 + 72]
            .copy_from_slice(&Ipv4Addr::new(10, 0, 0, 2).to_ipv6_mapped().octets());
        mad[24 + 72..24 + 88]
            .copy_from_slice(&Ipv4Addr::new(10, 0, 0, 4).to_ipv6_mapped().octets());
        mad[24 + 88..24 + 96].copy_from_slice(&[0x76, 0x41, 0xE0, 0x00, 0x00, 0x40, 0x00, 0x90]);
        // Alternate path all zero; then the rdma_cm header and 56 zero bytes.
        mad[24 + 140..24 + 144].copy_from_slice(&[0x00, 0x40, 0xBE, 0xD5]);
        mad[24 + 156..24 + 160].copy_from_slice(&[10, 0, 0, 2]);
        mad[24 + 172..24 + 176].copy_from_slice(&[10, 0, 0, 4]);

        let (h, msg) = CmMessage::parse_mad(&mad).unwrap();
        // ECE: the vendor option bits in the attribute modifier, the
        // vendor's OUI (Mellanox, 0x0015B3) in bytes 5..7.
        assert_eq!(h.attr_mod, 0x3000_0000);
        assert_eq!(h.tid, 0x0000_0006_36EF_5609);
        let CmMessage::Req(r) = msg else {
            panic!("{msg:?}")
        };
        assert_eq!(r.local_comm_id, 0x0956_EF36);
        assert_eq!(r.vendor_id, 0x00_15B3);
        assert_eq!(
            IpServiceId::from_u64(r.service_id),
            Some(IpServiceId {
                port_space: PortSpace::Tcp,
                port: 18515
            })
        );
        assert_eq!(r.local_ca_guid, 0x1070_FD03_00CB_DFFE);
        assert_eq!(r.local_qpn.get(), 0x11F4);
        assert_eq!((r.responder_resources, r.initiator_depth), (0, 0));
        assert_eq!(r.remote_cm_response_timeout, 22);
        assert_eq!(r.transport, TransportType::Rc);
        assert!(!r.end_to_end_flow_control);
        assert_eq!(r.starting_psn.get(), 0x94_DCB0);
        assert_eq!((r.local_cm_response_timeout, r.retry_count), (22, 7));
        assert_eq!(r.pkey, 0xFFFF);
        assert_eq!((r.path_mtu, r.rdc_exists, r.rnr_retry_count), (3, false, 7));
        assert_eq!((r.max_cm_retries, r.srq), (15, false));
        let p = r.primary;
        assert_eq!((p.local_lid, p.remote_lid), (0xFFFF, 0xFFFF));
        assert_eq!(p.local_gid, Ipv4Addr::new(10, 0, 0, 2).to_ipv6_mapped());
        assert_eq!(p.remote_gid, Ipv4Addr::new(10, 0, 0, 4).to_ipv6_mapped());
        // cma_get_roce_udp_flow_label: (sport * 31 + dport) & 0xFFFFF.
        assert_eq!(p.flow_label, (48_853 * 31 + 18_515) & 0xF_FFFF);
        assert_eq!(p.flow_label, 0x7_641E);
        assert_eq!(p.packet_rate, 0);
        assert_eq!((p.traffic_class, p.hop_limit, p.sl), (0, 64, 0));
        assert!(!p.subnet_local);
        assert_eq!(p.local_ack_timeout, 18);
        assert_eq!(r.alternate, CmPath::default());
        let (hdr, user) = CmaHdr::split(&r.private_data).unwrap();
        assert_eq!(hdr.src, "10.0.0.2:48853".parse().unwrap());
        assert_eq!(hdr.dst, "10.0.0.4".parse::<IpAddr>().unwrap());
        assert_eq!(user, [0; IP_REQ_USER_DATA_LEN]);

        let mut again = [0u8; MAD_LEN];
        msg.emit_mad(h.tid, h.attr_mod, &mut again).unwrap();
        assert_eq!(again, mad);
    }

    #[test]
    fn rep_fields_land_at_the_documented_offsets() {
        let rep = CmRep {
            local_comm_id: 0xA1A2_A3A4,
            remote_comm_id: 0x1122_3344,
            local_qkey: 0x0000_0001,
            local_qpn: Qpn::new_masked(0x12_3456),
            vendor_id: 0xC1_C2C3,
            local_eecn: 0x65_4321,
            starting_psn: Psn::new_masked(0xFE_DCBA),
            responder_resources: 0x44,
            initiator_depth: 0x55,
            target_ack_delay: 15,
            failover_accepted: 2,
            end_to_end_flow_control: true,
            rnr_retry_count: 7,
            srq: true,
            local_ca_guid: 0x1020_3040_5060_7080,
            private_data: ramp(3),
        };
        let m = mad(CmMessage::Rep(rep));
        assert_eq!(m[16..18], [0x00, 0x13]);
        assert_eq!(at::<4>(&m, 0), [0xA1, 0xA2, 0xA3, 0xA4]);
        assert_eq!(at::<4>(&m, 4), [0x11, 0x22, 0x33, 0x44]);
        assert_eq!(at::<4>(&m, 8), [0, 0, 0, 1]);
        // QPN and vendor ID high byte, EECN and middle byte, PSN and low byte.
        assert_eq!(at::<4>(&m, 12), [0x12, 0x34, 0x56, 0xC1]);
        assert_eq!(at::<4>(&m, 16), [0x65, 0x43, 0x21, 0xC2]);
        assert_eq!(at::<4>(&m, 20), [0xFE, 0xDC, 0xBA, 0xC3]);
        // 15 << 3 | 2 << 1 | 1; RNR 7 << 5 | SRQ 0x10.
        assert_eq!(at::<4>(&m, 24), [0x44, 0x55, 0x7D, 0xF0]);
        assert_eq!(
            at::<8>(&m, 28),
            [0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80]
        );
        // The GUID is at MAD offset 52, not 8-aligned.
        assert_eq!(m[52], 0x10);
        assert_eq!(at::<196>(&m, 36), ramp(3));
        assert_eq!(CmMessage::parse_mad(&m).unwrap().1, CmMessage::Rep(rep));
    }

    #[test]
    fn short_messages_at_the_documented_offsets() {
        let mra = CmMra {
            local_comm_id: 1,
            remote_comm_id: 2,
            message_mraed: MessageKind::Rep,
            service_timeout: 24,
            private_data: ramp(9),
        };
        let m = mad(CmMessage::Mra(mra));
        assert_eq!(m[16..18], [0x00, 0x11]);
        assert_eq!(at::<2>(&m, 8), [0x40, 0xC0]);
        assert_eq!(at::<222>(&m, 10), ramp(9));

        let rej = CmRej {
            local_comm_id: 0,
            remote_comm_id: 0x1122_3344,
            message_rejected: MessageKind::Other,
            reject_info_len: 72,
            reason: rej_reason::INVALID_SERVICE_ID,
            ari: ramp(0x50),
            private_data: ramp(0x90),
        };
        let m = mad(CmMessage::Rej(rej));
        assert_eq!(m[16..18], [0x00, 0x12]);
        assert_eq!(at::<4>(&m, 8), [0x80, 72 << 1, 0, 8]);
        assert_eq!(at::<72>(&m, 12), ramp(0x50));
        assert_eq!(at::<148>(&m, 84), ramp(0x90));

        let rtu = CmRtu {
            local_comm_id: 5,
            remote_comm_id: 6,
            private_data: ramp(1),
        };
        let m = mad(CmMessage::Rtu(rtu));
        assert_eq!(m[16..18], [0x00, 0x14]);
        assert_eq!(at::<8>(&m, 0), [0, 0, 0, 5, 0, 0, 0, 6]);
        assert_eq!(at::<224>(&m, 8), ramp(1));

        let dreq = CmDreq {
            local_comm_id: 7,
            remote_comm_id: 8,
            remote_qpn: Qpn::new_masked(0x00_0011),
            private_data: ramp(2),
        };
        let m = mad(CmMessage::Dreq(dreq));
        assert_eq!(m[16..18], [0x00, 0x15]);
        assert_eq!(at::<4>(&m, 8), [0, 0, 0x11, 0]);
        assert_eq!(at::<220>(&m, 12), ramp(2));

        let drep = CmDrep {
            local_comm_id: 9,
            remote_comm_id: 10,
            private_data: ramp(4),
        };
        let m = mad(CmMessage::Drep(drep));
        assert_eq!(m[16..18], [0x00, 0x16]);
        assert_eq!(at::<224>(&m, 8), ramp(4));

        let sreq = CmSidrReq {
            request_id: 0xDEAD_BEEF,
            pkey: 0xFFFF,
            service_id: ip_service_id(PortSpace::Udp, 7174),
            private_data: ramp(7),
        };
        let m = mad(CmMessage::SidrReq(sreq));
        assert_eq!(m[16..18], [0x00, 0x17]);
        assert_eq!(at::<8>(&m, 0), [0xDE, 0xAD, 0xBE, 0xEF, 0xFF, 0xFF, 0, 0]);
        assert_eq!(at::<8>(&m, 8), [0, 0, 0, 0, 0x01, 0x11, 0x1C, 0x06]);
        assert_eq!(at::<216>(&m, 16), ramp(7));

        let srep = CmSidrRep {
            request_id: 0xDEAD_BEEF,
            status: sidr_status::SUCCESS,
            additional_info_len: 3,
            vendor_id: 0xC1_C2C3,
            qpn: Qpn::new_masked(0x12_3456),
            service_id: 0x0102_0304_0506_0708,
            qkey: RDMA_UDP_QKEY,
            additional_info: ramp(0x11),
            private_data: ramp(0x22),
        };
        let m = mad(CmMessage::SidrRep(srep));
        assert_eq!(m[16..18], [0x00, 0x18]);
        assert_eq!(
            at::<12>(&m, 0),
            [0xDE, 0xAD, 0xBE, 0xEF, 0, 3, 0xC1, 0xC2, 0x12, 0x34, 0x56, 0xC3]
        );
        assert_eq!(at::<8>(&m, 12), [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(at::<4>(&m, 20), [0x01, 0x23, 0x45, 0x67]);
        assert_eq!(at::<72>(&m, 24), ramp(0x11));
        assert_eq!(at::<136>(&m, 96), ramp(0x22));

        for msg in [
            CmMessage::Mra(mra),
            CmMessage::Rej(rej),
            CmMessage::Rtu(rtu),
            CmMessage::Dreq(dreq),
            CmMessage::Drep(drep),
            CmMessage::SidrReq(sreq),
            CmMessage::SidrRep(srep),
        ] {
            let (h, back) = CmMessage::parse_mad(&mad(msg)).unwrap();
            assert_eq!(back, msg);
            assert_eq!(h.attr_id, msg.attr().id());
            assert_eq!((h.tid, h.attr_mod), (0x5555_5555_0000_0001, 0x6666_6666));
        }
    }

    #[test]
    fn every_layout_fills_the_data_part_exactly() {
        assert_eq!(140 + REQ_PRIVATE_DATA_LEN, MAD_DATA_LEN);
        assert_eq!(10 + MRA_PRIVATE_DATA_LEN, MAD_DATA_LEN);
        assert_eq!(84 + REJ_PRIVATE_DATA_LEN, MAD_DATA_LEN);
        assert_eq!(12 + REJ_ARI_LEN, 84);
        assert_eq!(36 + REP_PRIVATE_DATA_LEN, MAD_DATA_LEN);
        assert_eq!(8 + RTU_PRIVATE_DATA_LEN, MAD_DATA_LEN);
        assert_eq!(12 + DREQ_PRIVATE_DATA_LEN, MAD_DATA_LEN);
        assert_eq!(8 + DREP_PRIVATE_DATA_LEN, MAD_DATA_LEN);
        assert_eq!(16 + SIDR_REQ_PRIVATE_DATA_LEN, MAD_DATA_LEN);
        assert_eq!(96 + SIDR_REP_PRIVATE_DATA_LEN, MAD_DATA_LEN);
        assert_eq!(24 + SIDR_REP_INFO_LEN, 96);
        assert_eq!(52 + 2 * CmPath::LEN, 140);
        assert_eq!(IP_REQ_USER_DATA_LEN, 56);
        assert_eq!(IP_SIDR_REQ_USER_DATA_LEN, 180);
    }

    #[test]
    fn reserved_bits_are_ignored_on_parse_and_zero_on_emit() {
        let ones = [0xFFu8; MAD_DATA_LEN];
        let r = CmReq::parse(&ones).unwrap();
        assert_eq!(r.transport, TransportType::Extended);
        let mut out = [0u8; MAD_DATA_LEN];
        r.emit(&mut out).unwrap();
        // Byte 4 and bytes 24..28 are reserved, and so are bits 6..11 of
        // each path's flow-label word and the low bits of bytes 94/95.
        assert_eq!(out[4], 0);
        assert_eq!(out[24..28], [0; 4]);
        assert_eq!(out[88..92], [0xFF, 0xFF, 0xF0, 0x3F]);
        assert_eq!(out[94..96], [0xF8, 0xF8]);
        assert_eq!(out[138..140], [0xF8, 0xFC]);
        assert_eq!(CmReq::parse(&out), Ok(r));

        let rep = CmRep::parse(&ones).unwrap();
        rep.emit(&mut out).unwrap();
        assert_eq!(out[27], 0xF0);
        let dreq = CmDreq::parse(&ones).unwrap();
        dreq.emit(&mut out).unwrap();
        assert_eq!(out[11], 0);
        let srq = CmSidrReq::parse(&ones).unwrap();
        srq.emit(&mut out).unwrap();
        assert_eq!(out[6..8], [0, 0]);
        let rej = CmRej::parse(&ones).unwrap();
        rej.emit(&mut out).unwrap();
        assert_eq!(out[8..10], [0xC0, 0xFE]);
        let mra = CmMra::parse(&ones).unwrap();
        assert_eq!(mra.message_mraed, MessageKind::Reserved);
        mra.emit(&mut out).unwrap();
        assert_eq!(out[8..10], [0xC0, 0xF8]);
    }

    #[test]
    fn too_wide_fields_are_refused_and_nothing_is_written() {
        let cases: [(CmMessage, &str, u64, u8); 8] = [
            (
                CmMessage::Req(CmReq {
                    retry_count: 8,
                    ..req()
                }),
                "retry count",
                8,
                3,
            ),
            (
                CmMessage::Req(CmReq {
                    vendor_id: 1 << 24,
                    ..req()
                }),
                "vendor ID",
                1 << 24,
                24,
            ),
            (
                CmMessage::Req(CmReq {
                    primary: CmPath {
                        flow_label: 1 << 20,
                        ..path(0)
                    },
                    ..req()
                }),
                "flow label",
                1 << 20,
                20,
            ),
            (
                CmMessage::Req(CmReq {
                    alternate: CmPath { sl: 16, ..path(0) },
                    ..req()
                }),
                "SL",
                16,
                4,
            ),
            (
                CmMessage::Rep(CmRep {
                    target_ack_delay: 32,
                    ..CmRep::default()
                }),
                "target ACK delay",
                32,
                5,
            ),
            (
                CmMessage::Mra(CmMra {
                    service_timeout: 0x98,
                    ..CmMra::default()
                }),
                "service timeout",
                0x98,
                5,
            ),
            (
                CmMessage::Rej(CmRej {
                    reject_info_len: 128,
                    ..CmRej::default()
                }),
                "reject info length",
                128,
                7,
            ),
            (
                CmMessage::SidrRep(CmSidrRep {
                    vendor_id: u32::MAX,
                    ..CmSidrRep::default()
                }),
                "vendor ID",
                u64::from(u32::MAX),
                24,
            ),
        ];
        for (msg, field, value, bits) in cases {
            let mut buf = [0xEEu8; MAD_LEN];
            assert_eq!(
                msg.emit_mad(1, 0, &mut buf),
                Err(MadError::FieldOutOfRange { field, value, bits }),
                "{msg:?}"
            );
            assert_eq!(buf, [0xEE; MAD_LEN]);
        }
    }

    #[test]
    fn short_input_and_output_are_refused() {
        let full = mad(CmMessage::Req(req()));
        for len in [0, 1, 23, 24, 100, 255] {
            assert!(matches!(
                CmMessage::parse_mad(&full[..len]),
                Err(MadError::Truncated { needed: 256, .. })
            ));
            let mut out = [0u8; MAD_LEN];
            assert_eq!(
                CmMessage::Req(req()).emit_mad(0, 0, &mut out[..len]),
                Err(MadError::BufferTooSmall {
                    what: "MAD",
                    needed: 256,
                    available: len
                })
            );
        }
        let data = [0u8; MAD_DATA_LEN - 1];
        let mut out = [0u8; MAD_DATA_LEN - 1];
        for attr in 0x10..=0x18 {
            assert!(matches!(
                CmMessage::parse(attr, &data),
                Err(MadError::Truncated {
                    needed: 232,
                    available: 231,
                    ..
                })
            ));
            let msg = CmMessage::parse(attr, &[0u8; MAD_DATA_LEN]).unwrap();
            assert!(matches!(
                msg.emit(&mut out),
                Err(MadError::BufferTooSmall {
                    needed: 232,
                    available: 231,
                    ..
                })
            ));
        }
    }

    #[test]
    fn non_cm_mads_are_refused() {
        let good = mad(CmMessage::Rtu(CmRtu::default()));
        let with = |i: usize, v: u8| {
            let mut m = good;
            m[i] = v;
            CmMessage::parse_mad(&m)
        };
        assert_eq!(with(0, 0x80).unwrap_err(), MadError::BadBaseVersion(0x80));
        assert_eq!(
            with(1, 0x03).unwrap_err(),
            MadError::NotCm {
                class: 3,
                version: 2
            }
        );
        assert_eq!(
            with(2, 1).unwrap_err(),
            MadError::NotCm {
                class: 7,
                version: 1
            }
        );
        assert_eq!(with(3, 0x01).unwrap_err(), MadError::BadMethod(0x01));
        assert_eq!(
            with(17, 0x19).unwrap_err(),
            MadError::UnknownAttribute(0x19)
        );
        assert_eq!(
            with(17, 0x01).unwrap_err(),
            MadError::UnknownAttribute(0x01)
        );
        assert!(with(17, 0x14).is_ok());
    }

    #[test]
    fn attribute_ids() {
        for id in 0..=0xFFFFu16 {
            if let Some(a) = CmAttr::from_id(id) {
                assert_eq!(a.id(), id);
            }
        }
        assert_eq!(CmAttr::from_id(0x0010), Some(CmAttr::Req));
        assert_eq!(CmAttr::from_id(0x0018), Some(CmAttr::SidrRep));
        assert_eq!(CmAttr::from_id(0x001A), Some(CmAttr::Apr));
        assert_eq!(CmAttr::from_id(0x001B), None);
    }

    #[test]
    fn service_ids() {
        // rping's default port 7471 = 0x1D2F.
        assert_eq!(ip_service_id(PortSpace::Tcp, 7471), 0x0000_0000_0106_1D2F);
        assert_eq!(ip_service_id(PortSpace::Udp, 1), 0x0000_0000_0111_0001);
        assert_eq!(ip_service_id(PortSpace::Ib, 0xFFFF), 0x0000_0000_013F_FFFF);
        assert_eq!(ip_service_id(PortSpace::Ipoib, 2), 0x0000_0000_0002_0002);
        assert_eq!(
            IpServiceId::from_u64(0x0000_0000_0106_1D2F),
            Some(IpServiceId {
                port_space: PortSpace::Tcp,
                port: 7471
            })
        );
        // The kernel's IB_CMA_SERVICE_ID prefix covers TCP, UDP and IB.
        for ps in [PortSpace::Tcp, PortSpace::Udp, PortSpace::Ib] {
            assert_eq!(
                ip_service_id(ps, 9) & 0xFFFF_FFFF_FF00_0000,
                0x0000_0000_0100_0000
            );
        }
        assert_eq!(IpServiceId::from_u64(0x0000_0001_0106_1D2F), None);
        assert_eq!(IpServiceId::from_u64(0x0000_0000_0107_1D2F), None);
        assert_eq!(IpServiceId::from_u64(0x0200_0000_0000_0000), None);
    }

    #[test]
    fn cma_header_ipv4() {
        let hdr = CmaHdr {
            src: "192.0.2.1:40000".parse().unwrap(),
            dst: "192.0.2.2".parse().unwrap(),
        };
        let mut buf = [0xEEu8; 36];
        assert_eq!(hdr.emit(&mut buf), Ok(36));
        let mut want = [0u8; 36];
        want[1] = 0x40;
        want[2..4].copy_from_slice(&40000u16.to_be_bytes());
        want[16..20].copy_from_slice(&[192, 0, 2, 1]);
        want[32..36].copy_from_slice(&[192, 0, 2, 2]);
        assert_eq!(buf, want);
        assert_eq!(CmaHdr::parse(&buf), Ok(hdr));

        let pd: [u8; REQ_PRIVATE_DATA_LEN] = hdr.prepend(b"hello").unwrap();
        let (back, user) = CmaHdr::split(&pd).unwrap();
        assert_eq!(back, hdr);
        assert_eq!(user.len(), IP_REQ_USER_DATA_LEN);
        assert_eq!(&user[..5], b"hello");
        assert!(user[5..].iter().all(|&b| b == 0));
        assert_eq!(
            hdr.prepend::<REQ_PRIVATE_DATA_LEN>(&[1; 57]),
            Err(MadError::PrivateDataTooLong { len: 57, max: 56 })
        );
        assert!(hdr.prepend::<REQ_PRIVATE_DATA_LEN>(&[1; 56]).is_ok());
    }

    #[test]
    fn cma_header_ipv6_and_errors() {
        let hdr = CmaHdr {
            src: "[fd00::1]:7471".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
        };
        let mut buf = [0u8; 36];
        hdr.emit(&mut buf).unwrap();
        assert_eq!(buf[..4], [0, 0x60, 0x1D, 0x2F]);
        assert_eq!(buf[4..20], "fd00::1".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(buf[20..36], "fd00::2".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(CmaHdr::parse(&buf), Ok(hdr));

        let mut bad = buf;
        bad[0] = 1;
        assert_eq!(CmaHdr::parse(&bad), Err(MadError::BadCmaVersion(1)));
        bad = buf;
        bad[1] = 0x50;
        assert_eq!(CmaHdr::parse(&bad), Err(MadError::BadIpVersion(5)));
        assert!(matches!(
            CmaHdr::parse(&buf[..35]),
            Err(MadError::Truncated {
                needed: 36,
                available: 35,
                ..
            })
        ));
        let mixed = CmaHdr {
            src: "192.0.2.1:1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
        };
        assert_eq!(mixed.emit(&mut buf), Err(MadError::AddressFamilyMismatch));
        assert!(matches!(
            hdr.emit(&mut [0u8; 35]),
            Err(MadError::BufferTooSmall { .. })
        ));
    }

    #[test]
    fn private_data_helper() {
        let pd: [u8; 4] = private_data(&[1, 2]).unwrap();
        assert_eq!(pd, [1, 2, 0, 0]);
        assert_eq!(
            private_data::<4>(&[0; 5]),
            Err(MadError::PrivateDataTooLong { len: 5, max: 4 })
        );
    }

    fn gid() -> impl Strategy<Value = Ipv6Addr> {
        any::<[u8; 16]>().prop_map(Ipv6Addr::from)
    }

    fn arb_path() -> impl Strategy<Value = CmPath> {
        (
            any::<(u16, u16)>(),
            gid(),
            gid(),
            (0u32..1 << 20, 0u8..64, any::<u8>(), any::<u8>()),
            (0u8..16, any::<bool>(), 0u8..32),
        )
            .prop_map(
                |(
                    (local_lid, remote_lid),
                    local_gid,
                    remote_gid,
                    (flow_label, packet_rate, traffic_class, hop_limit),
                    (sl, subnet_local, local_ack_timeout),
                )| CmPath {
                    local_lid,
                    remote_lid,
                    local_gid,
                    remote_gid,
                    flow_label,
                    packet_rate,
                    traffic_class,
                    hop_limit,
                    sl,
                    subnet_local,
                    local_ack_timeout,
                },
            )
    }

    fn bytes<const N: usize>() -> impl Strategy<Value = [u8; N]> {
        proptest::collection::vec(any::<u8>(), N).prop_map(|v| {
            let mut a = [0u8; N];
            a.copy_from_slice(&v);
            a
        })
    }

    fn arb_req() -> impl Strategy<Value = CmReq> {
        (
            (
                any::<u32>(),
                0u32..1 << 24,
                any::<u64>(),
                any::<u64>(),
                any::<u32>(),
            ),
            (
                0u32..1 << 24,
                any::<u8>(),
                0u32..1 << 24,
                any::<u8>(),
                0u32..1 << 24,
            ),
            (
                0u8..32,
                0u8..4,
                any::<bool>(),
                0u32..1 << 24,
                0u8..32,
                0u8..8,
            ),
            (
                any::<u16>(),
                0u8..16,
                any::<bool>(),
                0u8..8,
                0u8..16,
                any::<bool>(),
                0u8..8,
            ),
            (
                arb_path(),
                arb_path(),
                any::<bool>(),
                bytes::<REQ_PRIVATE_DATA_LEN>(),
            ),
        )
            .prop_map(
                |(
                    (local_comm_id, vendor_id, service_id, local_ca_guid, local_qkey),
                    (qpn, responder_resources, local_eecn, initiator_depth, remote_eecn),
                    (rto, transport, e2e, psn, lto, retry_count),
                    (pkey, path_mtu, rdc_exists, rnr_retry_count, max_cm_retries, srq, ext),
                    (primary, alternate, sap_supported, private_data),
                )| CmReq {
                    local_comm_id,
                    vendor_id,
                    service_id,
                    local_ca_guid,
                    local_qkey,
                    local_qpn: Qpn::new_masked(qpn),
                    responder_resources,
                    local_eecn,
                    initiator_depth,
                    remote_eecn,
                    remote_cm_response_timeout: rto,
                    transport: TransportType::from_bits(transport),
                    end_to_end_flow_control: e2e,
                    starting_psn: Psn::new_masked(psn),
                    local_cm_response_timeout: lto,
                    retry_count,
                    pkey,
                    path_mtu,
                    rdc_exists,
                    rnr_retry_count,
                    max_cm_retries,
                    srq,
                    extended_transport_type: ext,
                    primary,
                    alternate,
                    sap_supported,
                    private_data,
                },
            )
    }

    fn arb_rep() -> impl Strategy<Value = CmRep> {
        (
            any::<(u32, u32, u32)>(),
            (0u32..1 << 24, 0u32..1 << 24, 0u32..1 << 24, 0u32..1 << 24),
            (
                any::<u8>(),
                any::<u8>(),
                0u8..32,
                0u8..4,
                any::<bool>(),
                0u8..8,
                any::<bool>(),
            ),
            any::<u64>(),
            bytes::<REP_PRIVATE_DATA_LEN>(),
        )
            .prop_map(
                |(
                    (local_comm_id, remote_comm_id, local_qkey),
                    (qpn, vendor_id, local_eecn, psn),
                    (
                        responder_resources,
                        initiator_depth,
                        target_ack_delay,
                        failover_accepted,
                        e2e,
                        rnr_retry_count,
                        srq,
                    ),
                    local_ca_guid,
                    private_data,
                )| CmRep {
                    local_comm_id,
                    remote_comm_id,
                    local_qkey,
                    local_qpn: Qpn::new_masked(qpn),
                    vendor_id,
                    local_eecn,
                    starting_psn: Psn::new_masked(psn),
                    responder_resources,
                    initiator_depth,
                    target_ack_delay,
                    failover_accepted,
                    end_to_end_flow_control: e2e,
                    rnr_retry_count,
                    srq,
                    local_ca_guid,
                    private_data,
                },
            )
    }

    fn arb_message() -> impl Strategy<Value = CmMessage> {
        prop_oneof![
            arb_req().prop_map(CmMessage::Req),
            arb_rep().prop_map(CmMessage::Rep),
            (
                any::<(u32, u32)>(),
                0u8..4,
                0u8..32,
                bytes::<MRA_PRIVATE_DATA_LEN>()
            )
                .prop_map(|((l, r), k, t, p)| CmMessage::Mra(CmMra {
                    local_comm_id: l,
                    remote_comm_id: r,
                    message_mraed: MessageKind::from_bits(k),
                    service_timeout: t,
                    private_data: p,
                })),
            (
                any::<(u32, u32, u16)>(),
                0u8..4,
                0u8..128,
                bytes::<REJ_ARI_LEN>(),
                bytes::<REJ_PRIVATE_DATA_LEN>()
            )
                .prop_map(|((l, r, reason), k, n, ari, p)| CmMessage::Rej(CmRej {
                    local_comm_id: l,
                    remote_comm_id: r,
                    message_rejected: MessageKind::from_bits(k),
                    reject_info_len: n,
                    reason,
                    ari,
                    private_data: p,
                })),
            (any::<(u32, u32)>(), bytes::<RTU_PRIVATE_DATA_LEN>()).prop_map(|((l, r), p)| {
                CmMessage::Rtu(CmRtu {
                    local_comm_id: l,
                    remote_comm_id: r,
                    private_data: p,
                })
            }),
            (
                any::<(u32, u32)>(),
                0u32..1 << 24,
                bytes::<DREQ_PRIVATE_DATA_LEN>()
            )
                .prop_map(|((l, r), q, p)| CmMessage::Dreq(CmDreq {
                    local_comm_id: l,
                    remote_comm_id: r,
                    remote_qpn: Qpn::new_masked(q),
                    private_data: p,
                })),
            (any::<(u32, u32)>(), bytes::<DREP_PRIVATE_DATA_LEN>()).prop_map(|((l, r), p)| {
                CmMessage::Drep(CmDrep {
                    local_comm_id: l,
                    remote_comm_id: r,
                    private_data: p,
                })
            }),
            (
                any::<(u32, u16, u64)>(),
                bytes::<SIDR_REQ_PRIVATE_DATA_LEN>()
            )
                .prop_map(|((id, pkey, sid), p)| CmMessage::SidrReq(CmSidrReq {
                    request_id: id,
                    pkey,
                    service_id: sid,
                    private_data: p,
                })),
            (
                any::<(u32, u8, u8, u64, u32)>(),
                (0u32..1 << 24, 0u32..1 << 24),
                bytes::<SIDR_REP_INFO_LEN>(),
                bytes::<SIDR_REP_PRIVATE_DATA_LEN>()
            )
                .prop_map(|((id, status, n, sid, qkey), (vendor_id, qpn), info, p)| {
                    CmMessage::SidrRep(CmSidrRep {
                        request_id: id,
                        status,
                        additional_info_len: n,
                        vendor_id,
                        qpn: Qpn::new_masked(qpn),
                        service_id: sid,
                        qkey,
                        additional_info: info,
                        private_data: p,
                    })
                })
        ]
    }

    proptest! {
        #[test]
        fn messages_round_trip(msg in arb_message(), tid in any::<u64>(), attr_mod in any::<u32>()) {
            let mut buf = [0u8; MAD_LEN];
            prop_assert_eq!(msg.emit_mad(tid, attr_mod, &mut buf), Ok(MAD_LEN));
            let (h, back) = CmMessage::parse_mad(&buf).unwrap();
            prop_assert_eq!(back, msg);
            prop_assert_eq!(h, MadHeader::cm(msg.attr().id(), tid, attr_mod));
        }

        /// Whatever a peer sends parses, and re-emitting it gives the same
        /// bytes with only the reserved bits cleared: parse then emit then
        /// parse is the identity.
        #[test]
        fn any_data_part_parses_and_reemits(attr in 0x10u16..=0x18, data in bytes::<MAD_DATA_LEN>()) {
            let msg = CmMessage::parse(attr, &data).unwrap();
            let mut out = [0u8; MAD_DATA_LEN];
            prop_assert_eq!(msg.emit(&mut out), Ok(MAD_DATA_LEN));
            prop_assert_eq!(CmMessage::parse(attr, &out), Ok(msg));
            // Emitting only clears bits, never sets one the peer did not.
            for (o, d) in out.iter().zip(data.iter()) {
                prop_assert_eq!(o & !d, 0);
            }
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..320)) {
            let _ = CmMessage::parse_mad(&bytes);
            for attr in 0x0Fu16..=0x1B {
                let _ = CmMessage::parse(attr, &bytes);
            }
            let _ = CmaHdr::parse(&bytes);
            let _ = CmaHdr::split(&bytes);
        }

        #[test]
        fn cma_headers_round_trip(
            v6 in any::<bool>(),
            a in any::<[u8; 16]>(),
            b in any::<[u8; 16]>(),
            port in any::<u16>(),
        ) {
            let (src, dst) = if v6 {
                (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)))
            } else {
                let a4: [u8; 4] = *a.first_chunk().unwrap();
                let b4: [u8; 4] = *b.first_chunk().unwrap();
                (IpAddr::V4(Ipv4Addr::from(a4)), IpAddr::V4(Ipv4Addr::from(b4)))
            };
            let hdr = CmaHdr { src: SocketAddr::new(src, port), dst };
            let mut buf = [0u8; CMA_HDR_LEN];
            prop_assert_eq!(hdr.emit(&mut buf), Ok(CMA_HDR_LEN));
            prop_assert_eq!(CmaHdr::parse(&buf), Ok(hdr));
        }

        #[test]
        fn service_ids_round_trip(ps in 0usize..4, port in any::<u16>()) {
            let ps = [PortSpace::Ipoib, PortSpace::Tcp, PortSpace::Udp, PortSpace::Ib][ps];
            let sid = IpServiceId { port_space: ps, port };
            prop_assert_eq!(IpServiceId::from_u64(sid.to_u64()), Some(sid));
        }
    }
}
