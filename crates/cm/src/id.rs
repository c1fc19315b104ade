//! One rdma_cm id: what librdmacm created with CREATE_ID, its addresses,
//! and the state of its connection in the IB CM's terms.

use std::net::{IpAddr, SocketAddr};

use crate::resolution::Resolving;

/// Where an id's connection stands (IBTA 12.9's states, as many as the
/// rdma_cm exposes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Created, bound, or resolved.
    Idle,
    /// Resolving an address: waiting for the host to learn the next hop's
    /// link-layer address (the kernel's ADDR_QUERY).
    AddrQuery,
    /// Listening for REQs.
    Listening,
    /// REQ sent, waiting for the REP (active).
    ReqSent,
    /// REQ received, CONNECT_REQUEST queued, waiting for ACCEPT (passive).
    ReqRcvd,
    /// REP sent, waiting for the RTU (passive).
    RepSent,
    /// REP received, waiting for librdmacm's ACCEPT that sends the RTU
    /// (active).
    RepRcvd,
    Established,
    /// DREQ sent, waiting for the DREP.
    DreqSent,
    /// DREQ received, waiting for DISCONNECT (which sends the DREP).
    DreqRcvd,
    /// After a disconnection: TIMEWAIT_EXIT comes when it ends.
    TimeWait,
    /// Rejected or unreachable: nothing more happens.
    Closed,
}

impl State {
    /// Whether the connection's peer QP is known and the connection not
    /// going down: where the kernel's CM gives a QP's RTR and RTS
    /// attributes (`cm_init_qp_rtr_attr`). Any QP number counts, 0 too,
    /// as there: a REQ naming QP 0 was accepted by the kernel and refused
    /// here (INIT_QP_ATTR EINVAL, so the accept failed and the requester
    /// heard nothing).
    /// Whether a REQ went or came and the connection is not going down:
    /// where the kernel's CM gives a QP's INIT attributes
    /// (`cm_init_qp_init_attr`).
    pub(crate) fn connecting(self) -> bool {
        self == State::ReqSent || self.has_peer_qp()
    }

    pub(crate) fn has_peer_qp(self) -> bool {
        matches!(
            self,
            State::ReqRcvd | State::RepSent | State::RepRcvd | State::Established
        )
    }
}

/// A MAD the id sends again until it is answered.
#[derive(Debug, Clone)]
pub(crate) struct Retransmit {
    pub(crate) mad: [u8; 256],
    pub(crate) at: u64,
    pub(crate) every: u64,
    pub(crate) left: u32,
}

/// A port reservation in the host's port space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub(crate) ps: u16,
    pub(crate) ip: IpAddr,
    pub(crate) port: u16,
}

/// One cm_id.
#[derive(Debug, Clone)]
pub(crate) struct CmId {
    pub(crate) handle: u32,
    /// librdmacm's pointer, echoed in events (0 until ACCEPT for an id a
    /// REQ created).
    pub(crate) uid: u64,
    /// The channel (device file descriptor) its events go to.
    pub(crate) channel: i32,
    pub(crate) ps: u16,
    /// `ibv_qp_type` (RC 2, UC 3, UD 4).
    pub(crate) qp_type: u8,
    pub(crate) state: State,
    pub(crate) src: Option<SocketAddr>,
    /// The `sockaddr_ib` an AF_IB bind gave it (then `src` is `None`):
    /// only the unspecified GID, as librdmacm's probe binds.
    pub(crate) ib_src: Option<[u8; crate::abi::SOCKADDR_IB_LEN]>,
    pub(crate) dst: Option<SocketAddr>,
    /// Index of the softverbs device it is bound to.
    pub(crate) device: Option<usize>,
    pub(crate) reserved: Option<Reservation>,
    pub(crate) addr_resolved: bool,
    /// In [`State::AddrQuery`]: when to look at the next hop again.
    pub(crate) resolving: Option<Resolving>,
    pub(crate) route_resolved: bool,
    /// Events of this id (CONNECT_REQUESTs for a listener) handed out.
    pub(crate) events_reported: u32,
    /// A listener's room for connection requests not yet read by the
    /// application (`rdma_listen`'s backlog, as the kernel's ucma counts
    /// it): a request that finds none is dropped for its sender to retry.
    pub(crate) backlog: u32,
    pub(crate) conn: Conn,
    pub(crate) retransmit: Option<Retransmit>,
    /// When a TimeWait id's TIMEWAIT_EXIT is due.
    pub(crate) timewait_until: Option<u64>,
    /// `RDMA_OPTION_ID_TOS`: the traffic class of the connection's path.
    pub(crate) tos: Option<u8>,
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: the QP's ACK timeout at RTS.
    pub(crate) ack_timeout: Option<u8>,
    /// `RDMA_OPTION_ID_AFONLY`, if set: whether a wildcard listener takes
    /// requests to its own address family only.
    pub(crate) afonly: Option<bool>,
}

/// The connection's parameters, both ends'.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Conn {
    pub(crate) local_comm_id: u32,
    pub(crate) remote_comm_id: u32,
    pub(crate) local_qpn: u32,
    pub(crate) remote_qpn: u32,
    /// Our starting PSN: the peer sends from it (our RTR rq_psn).
    pub(crate) seq_num: u32,
    /// The peer's starting PSN (our RTS sq_psn).
    pub(crate) remote_psn: u32,
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
    pub(crate) retry_count: u8,
    pub(crate) rnr_retry_count: u8,
    /// From the peer's REQ: how long it may take to answer our REP (its
    /// Local CM Response Timeout) and how often we may send the REP again.
    pub(crate) peer_response_timeout: u8,
    pub(crate) peer_max_cm_retries: u8,
    /// The path MTU the peer's REQ names (an `ibv_mtu`), which the active
    /// side's packets follow; 0 on the active side (its device's).
    pub(crate) path_mtu: u8,
    /// The transaction ID of the REQ (every message of the exchange
    /// carries it, as the kernel's CM does).
    pub(crate) tid: u64,
    /// The peer's GID (its IP address).
    pub(crate) peer_ip: Option<IpAddr>,
    /// The CA GUID the peer's REQ or REP carried, by which a REJ
    /// "timeout" names its sender.
    pub(crate) peer_ca_guid: u64,
    /// A CM id exists (a REQ went out or came in): INIT_QP_ATTR answers
    /// with the connection's access rights.
    pub(crate) started: bool,
}

impl CmId {
    pub(crate) fn new(handle: u32, uid: u64, channel: i32, ps: u16, qp_type: u8) -> CmId {
        CmId {
            handle,
            uid,
            channel,
            ps,
            qp_type,
            state: State::Idle,
            src: None,
            ib_src: None,
            dst: None,
            device: None,
            reserved: None,
            addr_resolved: false,
            resolving: None,
            route_resolved: false,
            events_reported: 0,
            backlog: 0,
            conn: Conn::default(),
            retransmit: None,
            timewait_until: None,
            tos: None,
            ack_timeout: None,
            afonly: None,
        }
    }

    /// Whether a request to `dst` is for this id's address: its own, or
    /// any of the family a wildcard takes. As the kernel's rdma_cm
    /// (`rdma_bind_addr`, `cma_match_private_data`), a wildcard takes
    /// both families unless it is address-family only: AF_INET always,
    /// AF_INET6 as the host's `bindv6only` says, `RDMA_OPTION_ID_AFONLY`
    /// overriding either default.
    pub(crate) fn takes(&self, r: &Reservation, dst: IpAddr, bindv6only: bool) -> bool {
        if !r.ip.is_unspecified() {
            return crate::agent::same_ip(r.ip, dst);
        }
        let afonly = self.afonly.unwrap_or(r.ip.is_ipv4() || bindv6only);
        !afonly || r.ip.is_ipv4() == (dst.to_canonical().is_ipv4())
    }
}
