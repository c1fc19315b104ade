//! The rdma_cm character device's command ABI as librdmacm v44 speaks it
//! (docs/rdma-cm.md, section 2): command numbers, where each field sits
//! in a command's body, and the responses and events written back.
//! Offsets count from the start of the write buffer, the 8-byte header
//! included; integers are in host order (x86_64: little-endian) except
//! where an address or GUID is big-endian by definition.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Command numbers (`enum` in `rdma_user_cm.h`).
pub mod cmd {
    pub const CREATE_ID: u32 = 0;
    pub const DESTROY_ID: u32 = 1;
    pub const BIND_IP: u32 = 2;
    pub const RESOLVE_IP: u32 = 3;
    pub const RESOLVE_ROUTE: u32 = 4;
    pub const QUERY_ROUTE: u32 = 5;
    pub const CONNECT: u32 = 6;
    pub const LISTEN: u32 = 7;
    pub const ACCEPT: u32 = 8;
    pub const REJECT: u32 = 9;
    pub const DISCONNECT: u32 = 10;
    pub const INIT_QP_ATTR: u32 = 11;
    pub const GET_EVENT: u32 = 12;
    pub const GET_OPTION: u32 = 13;
    pub const SET_OPTION: u32 = 14;
    pub const NOTIFY: u32 = 15;
    pub const JOIN_IP_MCAST: u32 = 16;
    pub const LEAVE_MCAST: u32 = 17;
    pub const MIGRATE_ID: u32 = 18;
    pub const QUERY: u32 = 19;
    pub const BIND: u32 = 20;
    pub const RESOLVE_ADDR: u32 = 21;
    pub const JOIN_MCAST: u32 = 22;

    /// The command's name, as ucma's `RDMA_USER_CM_CMD_*` without the
    /// prefix (for `SOFTVERBS_CM_TRACE`).
    pub fn name(cmd: u32) -> &'static str {
        const NAMES: [&str; 23] = [
            "CREATE_ID",
            "DESTROY_ID",
            "BIND_IP",
            "RESOLVE_IP",
            "RESOLVE_ROUTE",
            "QUERY_ROUTE",
            "CONNECT",
            "LISTEN",
            "ACCEPT",
            "REJECT",
            "DISCONNECT",
            "INIT_QP_ATTR",
            "GET_EVENT",
            "GET_OPTION",
            "SET_OPTION",
            "NOTIFY",
            "JOIN_IP_MCAST",
            "LEAVE_MCAST",
            "MIGRATE_ID",
            "QUERY",
            "BIND",
            "RESOLVE_ADDR",
            "JOIN_MCAST",
        ];
        usize::try_from(cmd)
            .ok()
            .and_then(|i| NAMES.get(i))
            .copied()
            .unwrap_or("unknown")
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn names_follow_the_numbers() {
            assert_eq!(super::name(super::CREATE_ID), "CREATE_ID");
            assert_eq!(super::name(super::LISTEN), "LISTEN");
            assert_eq!(super::name(super::GET_EVENT), "GET_EVENT");
            assert_eq!(super::name(super::MIGRATE_ID), "MIGRATE_ID");
            assert_eq!(super::name(super::JOIN_MCAST), "JOIN_MCAST");
            assert_eq!(super::name(23), "unknown");
        }
    }
}

/// `enum rdma_cm_event_type`.
pub mod event {
    pub const ADDR_RESOLVED: u32 = 0;
    pub const ADDR_ERROR: u32 = 1;
    pub const ROUTE_RESOLVED: u32 = 2;
    pub const ROUTE_ERROR: u32 = 3;
    pub const CONNECT_REQUEST: u32 = 4;
    pub const CONNECT_RESPONSE: u32 = 5;
    pub const CONNECT_ERROR: u32 = 6;
    pub const UNREACHABLE: u32 = 7;
    pub const REJECTED: u32 = 8;
    pub const ESTABLISHED: u32 = 9;
    pub const DISCONNECTED: u32 = 10;
    pub const DEVICE_REMOVAL: u32 = 11;
    pub const MULTICAST_JOIN: u32 = 12;
    pub const MULTICAST_ERROR: u32 = 13;
    pub const TIMEWAIT_EXIT: u32 = 15;
}

/// Bytes of the command header (`struct rdma_ucm_cmd_hdr`).
pub const HEADER_LEN: usize = 8;

/// Where the id of command `op` is (bytes from the command's start), for
/// the commands that name one (`include/uapi/rdma/rdma_user_cm.h`); for
/// LEAVE_MCAST it is the join's handle, for MIGRATE_ID an id of another
/// channel. `None` for CREATE_ID, GET_EVENT and unknown commands.
pub fn id_offset(op: u32) -> Option<usize> {
    Some(match op {
        cmd::BIND | cmd::RESOLVE_ADDR | cmd::RESOLVE_ROUTE | cmd::LISTEN => 8,
        cmd::REJECT | cmd::DISCONNECT | cmd::NOTIFY => 8,
        cmd::DESTROY_ID | cmd::QUERY_ROUTE | cmd::QUERY | cmd::INIT_QP_ATTR => 16,
        cmd::SET_OPTION | cmd::GET_OPTION | cmd::LEAVE_MCAST | cmd::MIGRATE_ID => 16,
        cmd::JOIN_MCAST => 24,
        cmd::BIND_IP => 44,
        cmd::JOIN_IP_MCAST => 52,
        cmd::RESOLVE_IP => 64,
        cmd::CONNECT => 280,
        cmd::ACCEPT => 288,
        _ => return None,
    })
}
/// Bytes of a GET_EVENT response (`struct rdma_ucm_event_resp`).
pub const EVENT_LEN: usize = 336;
/// A GET_EVENT response buffer shorter than this is refused (ENOSPC):
/// the struct without its trailing reserved word and ECE.
pub const EVENT_MIN_LEN: usize = 324;
/// Bytes of an INIT_QP_ATTR response (`struct ib_uverbs_qp_attr`).
pub const QP_ATTR_LEN: usize = 144;
/// Private data bytes a `conn_param` carries at most.
pub const PRIVATE_DATA_MAX: usize = 256;

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
/// InfiniBand's own address family (`struct sockaddr_ib`, 48 bytes).
pub const AF_IB: u16 = 27;
/// Bytes of a `sockaddr_ib`.
pub const SOCKADDR_IB_LEN: usize = 48;

/// A command as written: its number, the caller's response buffer size,
/// and its body (the whole buffer, so offsets are those of the docs).
#[derive(Debug, Clone, Copy)]
pub struct Command<'a> {
    pub cmd: u32,
    pub out: u16,
    buf: &'a [u8],
    data: &'a [u8],
}

impl<'a> Command<'a> {
    /// Parses the header; EINVAL for a buffer shorter than the header or
    /// than the body it announces (as the kernel's `ucma_write`).
    pub fn parse(buf: &'a [u8]) -> Result<Command<'a>, i32> {
        let hdr = buf.get(..HEADER_LEN).ok_or(EINVAL)?;
        let cmd = u32::from_ne_bytes(hdr[0..4].try_into().map_err(|_| EINVAL)?);
        let inlen = u16::from_ne_bytes([hdr[4], hdr[5]]);
        let out = u16::from_ne_bytes([hdr[6], hdr[7]]);
        if HEADER_LEN + usize::from(inlen) > buf.len() {
            return Err(EINVAL);
        }
        let end = HEADER_LEN + usize::from(inlen);
        Ok(Command {
            cmd,
            out,
            buf: &buf[..end],
            data: &buf[end..],
        })
    }

    /// What follows the command: user memory the command points at,
    /// copied in by the caller as the kernel's `copy_from_user` would
    /// (SET_OPTION's value).
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// The body's bytes from `at`, `len` of them; EINVAL when short.
    pub fn bytes(&self, at: usize, len: usize) -> Result<&'a [u8], i32> {
        self.buf
            .get(at..at.checked_add(len).ok_or(EINVAL)?)
            .ok_or(EINVAL)
    }

    pub fn u8(&self, at: usize) -> Result<u8, i32> {
        Ok(self.bytes(at, 1)?[0])
    }

    pub fn u16(&self, at: usize) -> Result<u16, i32> {
        let b = self.bytes(at, 2)?;
        Ok(u16::from_ne_bytes([b[0], b[1]]))
    }

    pub fn u32(&self, at: usize) -> Result<u32, i32> {
        let b = self.bytes(at, 4)?;
        Ok(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&self, at: usize) -> Result<u64, i32> {
        let b = self.bytes(at, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_ne_bytes(a))
    }

    /// A `sockaddr_in` or `sockaddr_in6` at `at` (`len` bytes room);
    /// `None` for family 0 (no address) and other families.
    pub fn sockaddr(&self, at: usize, len: usize) -> Result<Option<SocketAddr>, i32> {
        Ok(parse_sockaddr(self.bytes(at, len)?))
    }
}

/// EINVAL, as the negative errno the kernel returns.
pub const EINVAL: i32 = 22;

/// A `sockaddr_in`/`sockaddr_in6` in `b`, if it is one.
pub fn parse_sockaddr(b: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes([*b.first()?, *b.get(1)?]);
    let port = u16::from_be_bytes([*b.get(2)?, *b.get(3)?]);
    match family {
        AF_INET => {
            let a: [u8; 4] = b.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(a)), port))
        }
        AF_INET6 => {
            let a: [u8; 16] = b.get(8..24)?.try_into().ok()?;
            Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(a)), port))
        }
        _ => None,
    }
}

/// Writes `addr` as a `sockaddr_in`/`sockaddr_in6` at the start of `out`
/// (which must hold 28 bytes for IPv6, 16 for IPv4).
pub fn put_sockaddr(out: &mut [u8], addr: SocketAddr) {
    match addr.ip() {
        IpAddr::V4(v4) => {
            out[0..2].copy_from_slice(&AF_INET.to_ne_bytes());
            out[2..4].copy_from_slice(&addr.port().to_be_bytes());
            out[4..8].copy_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            out[0..2].copy_from_slice(&AF_INET6.to_ne_bytes());
            out[2..4].copy_from_slice(&addr.port().to_be_bytes());
            out[8..24].copy_from_slice(&v6.octets());
        }
    }
}

/// A `sockaddr_ib`: family, P_Key, GID, service ID and its mask (the
/// big-endian fields big-endian), flow info and scope 0.
pub fn sockaddr_ib(pkey: u16, gid: [u8; 16], sid: u64, sid_mask: u64) -> [u8; SOCKADDR_IB_LEN] {
    let mut b = [0u8; SOCKADDR_IB_LEN];
    b[0..2].copy_from_slice(&AF_IB.to_ne_bytes());
    b[2..4].copy_from_slice(&pkey.to_be_bytes());
    b[8..24].copy_from_slice(&gid);
    b[24..32].copy_from_slice(&sid.to_be_bytes());
    b[32..40].copy_from_slice(&sid_mask.to_be_bytes());
    b
}

/// The size the kernel's `rdma_addr_size` gives a sockaddr of `family`:
/// 0 for a family it does not know.
pub fn family_len(family: u16) -> usize {
    match family {
        AF_INET => 16,
        AF_INET6 => 28,
        AF_IB => SOCKADDR_IB_LEN,
        _ => 0,
    }
}

/// The bytes of a sockaddr for `addr` (its family's size).
pub fn sockaddr_len(addr: SocketAddr) -> usize {
    if addr.is_ipv4() {
        16
    } else {
        28
    }
}

/// A GID as RoCE names an IP address: IPv4-mapped for IPv4.
pub fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// `struct rdma_ucm_conn_param` (272 bytes) at `at` of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnParam {
    pub qp_num: u32,
    pub private_data: Vec<u8>,
    pub srq: bool,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: bool,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub valid: bool,
}

impl ConnParam {
    pub const LEN: usize = 272;

    pub fn parse(c: &Command<'_>, at: usize) -> Result<ConnParam, i32> {
        let len = usize::from(c.u8(at + 264)?).min(PRIVATE_DATA_MAX);
        Ok(ConnParam {
            qp_num: c.u32(at)? & 0xFF_FFFF,
            private_data: c.bytes(at + 8, len)?.to_vec(),
            srq: c.u8(at + 265)? != 0,
            responder_resources: c.u8(at + 266)?,
            initiator_depth: c.u8(at + 267)?,
            flow_control: c.u8(at + 268)? != 0,
            retry_count: c.u8(at + 269)?,
            rnr_retry_count: c.u8(at + 270)?,
            valid: c.u8(at + 271)? != 0,
        })
    }
}

/// The `param.conn` of an event, from what a REQ or REP carried.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventConn {
    pub qp_num: u32,
    pub private_data: Vec<u8>,
    pub srq: bool,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: bool,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
}

/// The `param.ud` of an event of a UD id: the peer's QP, Q_Key and
/// address, and the private data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventUd {
    pub qp_num: u32,
    pub qkey: u32,
    /// The peer's GID (an address handle's `grh.dgid`); zero: no address.
    pub dgid: [u8; 16],
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub private_data: Vec<u8>,
}

/// One event as GET_EVENT returns it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    pub uid: u64,
    pub id: u32,
    pub event: u32,
    pub status: i32,
    pub conn: EventConn,
    /// For a UD id, `param.ud` instead of `param.conn`.
    pub ud: Option<EventUd>,
}

impl Event {
    /// `struct rdma_ucm_event_resp`.
    pub fn encode(&self) -> [u8; EVENT_LEN] {
        let mut out = [0u8; EVENT_LEN];
        out[0..8].copy_from_slice(&self.uid.to_ne_bytes());
        out[8..12].copy_from_slice(&self.id.to_ne_bytes());
        out[12..16].copy_from_slice(&self.event.to_ne_bytes());
        out[16..20].copy_from_slice(&self.status.to_ne_bytes());
        let p = 20;
        if let Some(ud) = &self.ud {
            out[p..p + 4].copy_from_slice(&ud.qp_num.to_ne_bytes());
            out[p + 4..p + 8].copy_from_slice(&ud.qkey.to_ne_bytes());
            // ah_attr (struct ib_uverbs_ah_attr) at 8: grh.dgid, the GID
            // index, hop limit; is_global and the port when there is one.
            if ud.dgid != [0; 16] {
                let ah = p + 8;
                out[ah..ah + 16].copy_from_slice(&ud.dgid);
                out[ah + 20] = ud.sgid_index;
                out[ah + 21] = ud.hop_limit;
                out[ah + 29] = 1;
                out[ah + 30] = 1;
            }
            let len = ud.private_data.len().min(PRIVATE_DATA_MAX);
            out[p + 40..p + 40 + len].copy_from_slice(&ud.private_data[..len]);
            out[p + 296] = len as u8;
            return out;
        }
        let c = &self.conn;
        out[p..p + 4].copy_from_slice(&c.qp_num.to_ne_bytes());
        let len = c.private_data.len().min(PRIVATE_DATA_MAX);
        out[p + 8..p + 8 + len].copy_from_slice(&c.private_data[..len]);
        out[p + 264] = len as u8;
        out[p + 265] = u8::from(c.srq);
        out[p + 266] = c.responder_resources;
        out[p + 267] = c.initiator_depth;
        out[p + 268] = u8::from(c.flow_control);
        out[p + 269] = c.retry_count;
        out[p + 270] = c.rnr_retry_count;
        out
    }
}

/// `ibv_qp_attr_mask` bits INIT_QP_ATTR answers with.
pub mod qp_mask {
    pub const STATE: u32 = 1;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const QKEY: u32 = 1 << 6;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const DEST_QPN: u32 = 1 << 20;
}

/// `struct ib_uverbs_qp_attr`, the fields rdma_cm fills.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QpAttr {
    pub mask: u32,
    pub qp_state: u32,
    pub path_mtu: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub access_flags: u32,
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub is_global: bool,
    pub port_num: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
}

impl QpAttr {
    pub fn encode(&self) -> [u8; QP_ATTR_LEN] {
        let mut o = [0u8; QP_ATTR_LEN];
        let mut put32 = |at: usize, v: u32| o[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        put32(0, self.mask);
        put32(4, self.qp_state);
        put32(12, self.path_mtu);
        put32(20, self.qkey);
        put32(24, self.rq_psn);
        put32(28, self.sq_psn);
        put32(32, self.dest_qp_num);
        put32(36, self.access_flags);
        put32(56, self.flow_label);
        o[40..56].copy_from_slice(&self.dgid);
        o[60] = self.sgid_index;
        o[61] = self.hop_limit;
        o[62] = self.traffic_class;
        o[69] = u8::from(self.is_global);
        o[70] = self.port_num;
        o[130] = self.max_rd_atomic;
        o[131] = self.max_dest_rd_atomic;
        o[132] = self.min_rnr_timer;
        o[133] = self.port_num;
        o[134] = self.timeout;
        o[135] = self.retry_cnt;
        o[136] = self.rnr_retry;
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_found_where_the_kernel_header_puts_it() {
        // Spot checks against rdma_user_cm.h's layouts: the id follows
        // `response` (u64) in DESTROY_ID, leads in LISTEN, follows two
        // sockaddr_in6 in RESOLVE_IP and conn_param in CONNECT.
        assert_eq!(id_offset(cmd::DESTROY_ID), Some(HEADER_LEN + 8));
        assert_eq!(id_offset(cmd::LISTEN), Some(HEADER_LEN));
        assert_eq!(id_offset(cmd::RESOLVE_IP), Some(HEADER_LEN + 2 * 28));
        assert_eq!(id_offset(cmd::CONNECT), Some(HEADER_LEN + 272));
        assert_eq!(id_offset(cmd::CREATE_ID), None);
        assert_eq!(id_offset(cmd::GET_EVENT), None);
    }

    #[test]
    fn sockaddrs_round_trip_both_families() {
        for addr in ["10.1.2.3:4791", "[fd00::7]:18515"] {
            let addr: SocketAddr = addr.parse().unwrap();
            let mut b = [0u8; 28];
            put_sockaddr(&mut b, addr);
            assert_eq!(parse_sockaddr(&b), Some(addr));
        }
        assert_eq!(parse_sockaddr(&[0u8; 28]), None, "family 0: no address");
    }

    #[test]
    fn a_header_announcing_more_than_was_written_is_einval() {
        let mut b = vec![0u8; 16];
        b[4..6].copy_from_slice(&100u16.to_ne_bytes());
        assert_eq!(Command::parse(&b).err(), Some(EINVAL));
        assert_eq!(Command::parse(&b[..4]).err(), Some(EINVAL));
    }

    #[test]
    fn an_event_puts_private_data_and_counts_where_librdmacm_reads_them() {
        let e = Event {
            uid: 0x1122_3344_5566_7788,
            id: 5,
            event: event::CONNECT_REQUEST,
            status: -110,
            conn: EventConn {
                qp_num: 0x12345,
                private_data: vec![7; 56],
                responder_resources: 4,
                initiator_depth: 3,
                rnr_retry_count: 7,
                ..EventConn::default()
            },
            ud: None,
        };
        let b = e.encode();
        assert_eq!(&b[0..8], &0x1122_3344_5566_7788u64.to_ne_bytes());
        assert_eq!(i32::from_ne_bytes(b[16..20].try_into().unwrap()), -110);
        assert_eq!(&b[28..84], &[7; 56]);
        assert_eq!((b[284], b[286], b[287], b[290]), (56, 4, 3, 7));
    }
}
