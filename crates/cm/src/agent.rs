//! The process's rdma_cm: librdmacm's commands, the ids and their
//! channels' event queues, and the IB CM exchange with peers.

use crate::abi::{
    self, cmd, event, qp_mask, Command, ConnParam, Event, EventConn, EventUd, QpAttr, EINVAL,
};
use crate::id::{CmId, Conn, Reservation, Retransmit, State};
use crate::query;
use crate::resolution::Resolving;
use softverbs_wire::cm::{
    rej_reason, sidr_status, CmDrep, CmDreq, CmMessage, CmPath, CmRej, CmRep, CmReq, CmRtu,
    CmSidrRep, CmSidrReq, CmaHdr, IpServiceId, MessageKind, PortSpace as WirePortSpace,
    TransportType, CMA_HDR_LEN, IP_SIDR_REQ_USER_DATA_LEN, REP_PRIVATE_DATA_LEN,
    REQ_PRIVATE_DATA_LEN, SIDR_REP_PRIVATE_DATA_LEN, SIDR_REQ_PRIVATE_DATA_LEN,
};
use softverbs_wire::{Psn, Qpn};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Time in nanoseconds on the embedder's clock.
pub type Nanos = u64;

const ENOSPC: i32 = 28;
const EISCONN: i32 = 106;
const EBADF: i32 = 9;
const ENOSYS: i32 = 38;
const EADDRNOTAVAIL: i32 = 99;
const EAFNOSUPPORT: i32 = 97;
const ETIMEDOUT: i32 = 110;
const ENOENT: i32 = 2;
const EFAULT: i32 = 14;
const ENODEV: i32 = 19;
const EPROTONOSUPPORT: i32 = 93;
const EOPNOTSUPP: i32 = 95;
const ENETUNREACH: i32 = 101;
const EHOSTUNREACH: i32 = 113;

/// The port spaces, as CREATE_ID names them and service IDs carry them.
const PS_TCP: u16 = WirePortSpace::Tcp as u16;
const PS_UDP: u16 = WirePortSpace::Udp as u16;
const PS_IB: u16 = WirePortSpace::Ib as u16;
const PS_IPOIB: u16 = WirePortSpace::Ipoib as u16;
/// The bits of an IP-mapped service ID that hold the port space
/// (`RDMA_IB_IP_PS_MASK`); the low 16 are the port.
const SID_PS_MASK: u64 = 0xFFFF_FFFF_FFFF_0000;

/// IBV_QPS_*.
const QPS_INIT: u32 = 1;
const QPS_RTR: u32 = 2;
const QPS_RTS: u32 = 3;
const QPS_ERR: u32 = 6;
/// IBV_ACCESS_*.
const REMOTE_WRITE: u32 = 2;
const REMOTE_READ: u32 = 4;
const REMOTE_ATOMIC: u32 = 8;
/// `IBV_EVENT_COMM_EST`: NOTIFY with it stands for the RTU.
const COMM_EST: u32 = 4;
/// `IBV_EVENT_PATH_MIG`: NOTIFY with it moves to the alternate path.
const PATH_MIG: u32 = 6;

/// REJ reasons (IBTA table 112).
const REJ_TIMEOUT: u16 = 4;
const REJ_CONSUMER: u16 = 28;
const REJ_VENDOR_ECE: u16 = 35;

/// The kernel's CM timing for RoCE (Linux 6.1 `cma.c`): CM response
/// timeouts of 4.096 µs × 2^20 (about 4.3 s) and 15 retries; paths with
/// a packet lifetime of 2^18 × 4.096 µs, whence an ACK timeout (and the
/// QP's `timeout`) of 19 and a time-wait of about 2.1 s.
const CM_RESPONSE_TIMEOUT: u8 = 20;
const MAX_CM_RETRIES: u8 = 15;
const PACKET_LIFE_TIME: u8 = 18;
const ACK_TIMEOUT: u8 = PACKET_LIFE_TIME + 1;
/// Hop limit of the GRH (an IP TTL).
const HOP_LIMIT: u8 = 64;
/// `IBV_QPT_RC`.
const RC: u8 = 2;
/// `IBV_QPT_UD`.
const UD: u8 = 4;
/// The Q_Key of every UD id of the IP port spaces (`RDMA_UDP_QKEY`).
const UDP_QKEY: u32 = 0x0123_4567;
/// A RoCE GID table index for a device's address (softverbs numbers its
/// GIDs as rxe does: index 1 is the address).
const SGID_INDEX: u8 = 1;

/// 4.096 µs × 2^exp, in nanoseconds.
fn iba_time(exp: u8) -> Nanos {
    4096u64 << exp.min(31)
}

/// A softverbs device the rdma_cm can bind ids to.
#[derive(Debug, Clone)]
pub struct Device {
    /// The node GUID's bytes as `ibv_get_device_guid` returns them (a
    /// big-endian value): how librdmacm finds the device.
    pub node_guid: [u8; 8],
    /// Its address.
    pub ip: IpAddr,
    /// The QP number block of the daemon session its MADs use: comm IDs
    /// are allocated in it (`id >> 20 == block`), so the daemon routes
    /// answers back here.
    pub comm_block: u16,
    /// Its port's active MTU, in the IB encoding (1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
}

/// The host's rdma_cm port space (the daemon's), and its routes: errno on
/// refusal.
pub trait PortSpace {
    /// Reserves (`ps`, `ip`, `port`); port 0 picks a free one. The port.
    fn reserve(&mut self, ps: u16, ip: IpAddr, port: u16, afonly: bool) -> Result<u16, i32>;
    /// The reservation now takes connection requests.
    fn listen(&mut self, ps: u16, ip: IpAddr, port: u16) -> Result<(), i32>;
    /// Gives the reservation back.
    fn release(&mut self, ps: u16, ip: IpAddr, port: u16);
    /// Whether the host routes packets from device address `from` to
    /// `to`: the route lookup's errno where it does not (ENETUNREACH with
    /// no route; EINVAL for a route out of another interface than a
    /// loopback address's). Unknown routes are taken as there.
    fn route(&mut self, from: IpAddr, to: IpAddr) -> Result<(), i32> {
        let _ = (from, to);
        Ok(())
    }
    /// The source address the host's routing picks for packets to `to`,
    /// if it picks one (the kernel's address resolution takes it for an
    /// id bound to no address). Unknown routes pick none.
    fn source_for(&mut self, to: IpAddr) -> Option<IpAddr> {
        let _ = to;
        None
    }
    /// Whether the host knows the link-layer address of the next hop on
    /// the route from device address `from` to `to` (a local destination
    /// needs none); where it does not, it is asked to find it out (the
    /// kernel's `neigh_event_send`). Unknown neighbour tables are taken
    /// as knowing it.
    fn next_hop_known(&mut self, from: IpAddr, to: IpAddr) -> bool {
        let _ = (from, to);
        true
    }
    /// A REQ of comm ID `comm_id`, CA GUID `ca_guid` and transaction
    /// `tid` went from device address `from` to `to`: whoever outlives
    /// this process gives it up in its name, should the process end with
    /// it unanswered (the daemon; `destroy` does it while the process
    /// lives). Nothing to do where nobody outlives it.
    fn requesting(&mut self, from: IpAddr, to: IpAddr, comm_id: u32, ca_guid: u64, tid: u64) {
        let _ = (from, to, comm_id, ca_guid, tid);
    }
    /// A REP of comm ID `comm_id`, answering the REQ of `remote_comm_id`,
    /// is about to go from device address `from` to `to`: whoever
    /// outlives this process rejects it in its name, should the process
    /// end before the RTU comes, and disconnects after it (the daemon).
    /// Nothing to do where nobody outlives it.
    fn replying(&mut self, from: IpAddr, to: IpAddr, comm_id: u32, remote_comm_id: u32) {
        let _ = (from, to, comm_id, remote_comm_id);
    }
}

/// A MAD to send to QP1 of `dst`, from `src`.
#[derive(Debug, Clone)]
pub struct OutMad {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub mad: [u8; 256],
}

/// What a command returns besides success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Done, nothing to write back.
    Done,
    /// Done: copy `bytes` to the caller's memory at `addr` (the command's
    /// `response` pointer), as the kernel's `copy_to_user`.
    Respond {
        /// Where.
        addr: u64,
        /// What.
        bytes: Vec<u8>,
    },
    /// GET_EVENT with no event queued: the caller blocks (or gets EAGAIN
    /// on an `O_NONBLOCK` channel) and asks again.
    NoEvent,
}

/// A queued event and the id whose `events_reported` it counts in.
#[derive(Debug, Clone)]
struct Queued {
    event: Event,
    counts_for: u32,
}

/// The rdma_cm of one process.
#[derive(Debug)]
pub struct Agent {
    devices: Vec<Device>,
    ids: BTreeMap<u32, CmId>,
    next_handle: u32,
    channels: HashMap<i32, VecDeque<Queued>>,
    out: VecDeque<OutMad>,
    rng: fastrand::Rng,
    /// Channels whose queue went from empty to not empty since asked.
    readied: Vec<i32>,
    /// Multicast joins, by handle (from [`MC_HANDLES`] up).
    joins: BTreeMap<u32, Join>,
    /// The host's `net.ipv6.bindv6only` ([`Agent::set_bindv6only`]).
    bindv6only: bool,
}

/// Multicast join handles are apart from id handles: an event counts in
/// one or the other.
const MC_HANDLES: u32 = 0x8000_0000;
/// Id handles start here, above any the kernel's rdma_cm hands out (it
/// gives the lowest free number), so that a process may use both: a
/// number below is the kernel's ([`ID_HANDLES`]..[`MC_HANDLES`] are ours).
pub const ID_HANDLES: u32 = 0x0100_0000;

/// A multicast join of an id.
#[derive(Debug, Clone)]
struct Join {
    id: u32,
    events_reported: u32,
}

impl Agent {
    /// An rdma_cm over `devices`; `seed` picks PSNs and comm IDs.
    pub fn new(devices: Vec<Device>, seed: u64) -> Agent {
        let rng = fastrand::Rng::with_seed(seed);
        Agent {
            devices,
            ids: BTreeMap::new(),
            next_handle: ID_HANDLES,
            channels: HashMap::new(),
            out: VecDeque::new(),
            rng,
            readied: Vec::new(),
            joins: BTreeMap::new(),
            bindv6only: false,
        }
    }

    /// The network namespace's `net.ipv6.bindv6only` (0 unless changed):
    /// as in the kernel's `rdma_bind_addr`, an AF_INET6 wildcard listener
    /// without RDMA_OPTION_ID_AFONLY takes IPv6 requests only when it is
    /// set (`CmId::takes`).
    pub fn set_bindv6only(&mut self, on: bool) {
        self.bindv6only = on;
    }

    /// A channel (an open of the device file) exists from now on.
    pub fn open_channel(&mut self, channel: i32) {
        self.channels.entry(channel).or_default();
    }

    /// The channel was closed: its ids are destroyed, as when the kernel
    /// releases the file.
    pub fn close_channel(&mut self, channel: i32, ports: &mut dyn PortSpace) {
        let ids: Vec<u32> = self
            .ids
            .values()
            .filter(|i| i.channel == channel)
            .map(|i| i.handle)
            .collect();
        for handle in ids {
            self.destroy(handle, ports);
        }
        self.channels.remove(&channel);
    }

    /// Channel `from` is known as `to` from now on, its queue and ids
    /// with it: the application closed the number it was opened as but
    /// holds a duplicate of it, which keeps the kernel's file open.
    pub fn rename_channel(&mut self, from: i32, to: i32) {
        let Some(queue) = self.channels.remove(&from) else {
            return;
        };
        self.channels.insert(to, queue);
        for id in self.ids.values_mut().filter(|id| id.channel == from) {
            id.channel = to;
        }
        for readied in self.readied.iter_mut().filter(|c| **c == from) {
            *readied = to;
        }
    }

    /// Whether `channel` has an event waiting (its descriptor is readable).
    pub fn has_events(&self, channel: i32) -> bool {
        self.channels.get(&channel).is_some_and(|q| !q.is_empty())
    }

    /// A channel whose queue has become non-empty since last asked.
    pub fn poll_ready(&mut self) -> Option<i32> {
        self.readied.pop()
    }

    /// The next MAD to send.
    pub fn poll_mad(&mut self) -> Option<OutMad> {
        self.out.pop_front()
    }

    /// The next deadline: a retransmission, the end of a time-wait, or
    /// another look at a resolution's next hop.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.ids
            .values()
            .flat_map(|i| {
                [
                    i.retransmit.as_ref().map(|r| r.at),
                    i.timewait_until,
                    i.resolving.as_ref().map(|r| r.at),
                ]
            })
            .flatten()
            .min()
    }

    /// Runs what is due at `now`.
    pub fn handle_timeout(&mut self, now: Nanos, ports: &mut dyn PortSpace) {
        let handles: Vec<u32> = self.ids.keys().copied().collect();
        for h in handles {
            self.retransmit_due(h, now);
            self.timewait_due(h, now);
            self.resolution_due(h, now, ports);
        }
    }

    /// Executes one command written to `channel`'s descriptor: the whole
    /// buffer librdmacm wrote. `Err` is the errno `write` fails with.
    pub fn command(
        &mut self,
        now: Nanos,
        channel: i32,
        buf: &[u8],
        ports: &mut dyn PortSpace,
    ) -> Result<Reply, i32> {
        let c = Command::parse(buf)?;
        if !self.channels.contains_key(&channel) {
            return Err(EBADF); // closed (or never opened) here
        }
        self.check_named_is_the_channels(channel, &c)?;
        match c.cmd {
            cmd::CREATE_ID => self.create_id(channel, &c),
            cmd::DESTROY_ID => self.destroy_id(&c, ports),
            cmd::BIND_IP => self.bind_ip(&c, ports),
            cmd::BIND => self.bind(&c, ports),
            cmd::RESOLVE_IP => self.resolve_ip(now, &c, ports),
            cmd::RESOLVE_ROUTE => self.resolve_route(&c),
            cmd::QUERY_ROUTE => self.query_route(&c),
            cmd::QUERY => self.query(&c),
            cmd::RESOLVE_ADDR => self.resolve_addr(now, &c, ports),
            cmd::CONNECT => self.connect(now, &c, ports),
            cmd::LISTEN => self.listen(&c, ports),
            cmd::ACCEPT => self.accept(now, &c, ports),
            cmd::REJECT => self.reject(&c),
            cmd::DISCONNECT => self.disconnect(now, &c),
            cmd::INIT_QP_ATTR => self.init_qp_attr(&c),
            cmd::GET_EVENT => self.get_event(channel, &c),
            cmd::SET_OPTION => self.set_option(&c),
            cmd::NOTIFY => self.notify(&c),
            cmd::MIGRATE_ID => self.migrate_id(channel, &c),
            // As the kernel's: librdmacm never asks it.
            cmd::GET_OPTION => Err(ENOSYS),
            cmd::JOIN_IP_MCAST => self.join_ip(&c),
            cmd::JOIN_MCAST => self.join_mcast(&c),
            cmd::LEAVE_MCAST => self.leave(&c),
            _ => Err(EINVAL),
        }
    }

    /// An id (or join) a command names belongs to the channel the
    /// command was written to: another open of the file has its own ids,
    /// and one of them named here is EINVAL, as the kernel's
    /// `ucma_get_ctx` refuses a context of another file (and its leave,
    /// a join of another file). An id nobody has is left to the command
    /// (ENOENT); MIGRATE_ID names one of another channel on purpose.
    fn check_named_is_the_channels(&self, channel: i32, c: &Command<'_>) -> Result<(), i32> {
        let Some(handle) = named_handle(c) else {
            return Ok(());
        };
        let id = match c.cmd {
            cmd::LEAVE_MCAST => self.joins.get(&handle).map(|j| j.id),
            _ => Some(handle),
        };
        let owner = id.and_then(|id| self.ids.get(&id)).map(|id| id.channel);
        match owner {
            Some(owner) if owner != channel => Err(EINVAL),
            _ => Ok(()),
        }
    }

    fn id_mut(&mut self, handle: u32) -> Result<&mut CmId, i32> {
        self.ids.get_mut(&handle).ok_or(ENOENT)
    }

    fn id(&self, handle: u32) -> Result<&CmId, i32> {
        self.ids.get(&handle).ok_or(ENOENT)
    }

    fn queue(&mut self, channel: i32, event: Event, counts_for: u32) {
        let q = self.channels.entry(channel).or_default();
        if q.is_empty() {
            self.readied.push(channel);
        }
        q.push_back(Queued { event, counts_for });
    }

    /// An event of id `handle` on its channel (dropped while the id has
    /// no uid yet: a connection request's id before ACCEPT, as the
    /// kernel drops them).
    fn notify_id(&mut self, handle: u32, kind: u32, status: i32, conn: EventConn) {
        let Some(id) = self.ids.get(&handle) else {
            return;
        };
        if id.uid == 0 {
            return;
        }
        let ev = Event {
            uid: id.uid,
            id: handle,
            event: kind,
            status,
            conn,
            ud: None,
        };
        let channel = id.channel;
        self.queue(channel, ev, handle);
    }

    fn create_id(&mut self, channel: i32, c: &Command<'_>) -> Result<Reply, i32> {
        room_for(c, 4)?;
        let uid = c.u64(8)?;
        let response = c.u64(16)?;
        let ps = c.u16(24)?;
        let qp_type = match ps {
            PS_TCP => 2, // RC
            PS_UDP | PS_IPOIB => 4,
            PS_IB => c.u8(26)?,
            _ => return Err(EINVAL),
        };
        let handle = self.new_handle();
        self.ids
            .insert(handle, CmId::new(handle, uid, channel, ps, qp_type));
        Ok(Reply::Respond {
            addr: response,
            bytes: handle.to_ne_bytes().to_vec(),
        })
    }

    fn destroy_id(&mut self, c: &Command<'_>, ports: &mut dyn PortSpace) -> Result<Reply, i32> {
        room_for(c, 4)?;
        let response = c.u64(8)?;
        let handle = c.u32(16)?;
        let reported = self.id(handle)?.events_reported;
        self.destroy(handle, ports);
        Ok(Reply::Respond {
            addr: response,
            bytes: reported.to_ne_bytes().to_vec(),
        })
    }

    /// Destroys an id as the kernel does: a connection is torn down (DREQ
    /// when established, DREP when a DREQ came, REJ before that), the
    /// port is released, and its events not yet handed out are dropped,
    /// with the connection requests a listener had not handed out.
    fn destroy(&mut self, handle: u32, ports: &mut dyn PortSpace) {
        let Some(id) = self.ids.remove(&handle) else {
            return;
        };
        match id.state {
            // A UD id has no connection: a request it holds is refused.
            State::ReqRcvd if id.qp_type == UD => {
                let _ = self.sidr_rep_of(&id, sidr_status::REJECT, 0, &[]);
            }
            _ if id.qp_type == UD => {}
            State::Established => self.send_dreq(&id),
            State::DreqRcvd => self.send_drep(&id),
            // As the kernel's `cm_destroy_id`: the requester, which the
            // peer knows only by its comm ID and CA GUID, says "timeout"
            // with its GUID in the ARI, where the peer looks it up.
            State::ReqSent => {
                let ari = id.device.map(|d| self.devices[d].node_guid);
                self.send_rej(&id, REJ_TIMEOUT, ari.as_ref().map_or(&[], |g| &g[..]), &[]);
            }
            State::ReqRcvd | State::RepSent | State::RepRcvd => {
                self.send_rej(&id, REJ_CONSUMER, &[], &[]);
            }
            _ => {}
        }
        let joins: Vec<u32> = self
            .joins
            .iter()
            .filter(|(_, j)| j.id == handle)
            .map(|(&mc, _)| mc)
            .collect();
        for mc in joins {
            self.joins.remove(&mc);
            for q in self.channels.values_mut() {
                q.retain(|q| q.counts_for != mc);
            }
        }
        if let Some(r) = id.reserved {
            ports.release(r.ps, r.ip, r.port);
        }
        let orphans: Vec<u32> = self
            .channels
            .values()
            .flatten()
            .filter(|q| q.counts_for == handle && q.event.id != handle)
            .map(|q| q.event.id)
            .collect();
        for q in self.channels.values_mut() {
            q.retain(|q| q.counts_for != handle && q.event.id != handle);
        }
        for orphan in orphans {
            self.destroy(orphan, ports);
        }
    }

    fn bind_ip(&mut self, c: &Command<'_>, ports: &mut dyn PortSpace) -> Result<Reply, i32> {
        let addr = c.sockaddr(16, 28)?.ok_or(EAFNOSUPPORT)?;
        let handle = c.u32(44)?;
        self.bind_to(handle, addr, ports)
    }

    /// BIND: as BIND_IP, with the address's size (the kernel's checks)
    /// and AF_IB, the family librdmacm's probe binds at init.
    fn bind(&mut self, c: &Command<'_>, ports: &mut dyn PortSpace) -> Result<Reply, i32> {
        let handle = c.u32(8)?;
        let (size, family) = (c.u16(12)?, c.u16(16)?);
        if c.u16(14)? != 0 || size == 0 || usize::from(size) != abi::family_len(family) {
            return Err(EINVAL);
        }
        if family == abi::AF_IB {
            return self.bind_ib(handle, c.bytes(16, abi::SOCKADDR_IB_LEN)?, ports);
        }
        let addr = c.sockaddr(16, 128)?.ok_or(EAFNOSUPPORT)?;
        self.bind_to(handle, addr, ports)
    }

    /// Binds id `handle` to an AF_IB `sockaddr_ib`. On RoCE only the
    /// unspecified GID can be bound (the kernel finds no port for any
    /// other: ENODEV); the service ID names the port space and port, as
    /// `cma_select_ib_ps` reads it, and the bound address carries the
    /// port chosen, its mask all ones.
    fn bind_ib(
        &mut self,
        handle: u32,
        sib: &[u8],
        ports: &mut dyn PortSpace,
    ) -> Result<Reply, i32> {
        let id = self.id(handle)?;
        if id.reserved.is_some() || id.state != State::Idle {
            return Err(EINVAL);
        }
        if sib[8..24].iter().any(|&b| b != 0) {
            return Err(ENODEV);
        }
        let be64 = |at: usize| u64::from_be_bytes(sib[at..at + 8].try_into().unwrap_or([0; 8]));
        let (sid, mask) = (be64(24), be64(32));
        let ps = ib_port_space(id.ps, sid, mask).ok_or(EPROTONOSUPPORT)?;
        let any = IpAddr::V6(Ipv6Addr::UNSPECIFIED);
        let port = ports.reserve(ps, any, (sid & mask) as u16, false)?;
        let pkey = u16::from_be_bytes([sib[2], sib[3]]);
        let bound = abi::sockaddr_ib(
            pkey,
            [0; 16],
            u64::from(ps) << 16 | u64::from(port),
            u64::MAX,
        );
        let id = self.id_mut(handle)?;
        id.reserved = Some(Reservation { ps, ip: any, port });
        id.ib_src = Some(bound);
        Ok(Reply::Done)
    }

    /// Binds id `handle` to `addr`: a softverbs device's address, the
    /// unspecified address (every device), or a loopback address no
    /// device has, which the kernel binds too, with no device (libfabric's
    /// verbs provider binds 127.0.0.1 before it looks for its devices);
    /// the port is reserved in the host's port space (0: any free one).
    fn bind_to(
        &mut self,
        handle: u32,
        addr: SocketAddr,
        ports: &mut dyn PortSpace,
    ) -> Result<Reply, i32> {
        let addr = canonical(addr);
        let ip = addr.ip();
        let device = self.device_of(ip);
        if device.is_none() && !ip.is_unspecified() && !ip.is_loopback() {
            return Err(EADDRNOTAVAIL);
        }
        let id = self.id(handle)?;
        if id.reserved.is_some() || id.state != State::Idle {
            return Err(EINVAL);
        }
        let ps = id.ps;
        // As the kernel's `rdma_bind_addr`: the option if set, else
        // AF_INET always and AF_INET6 as `bindv6only` says.
        let afonly = id.afonly.unwrap_or(ip.is_ipv4() || self.bindv6only);
        let port = ports.reserve(ps, addr.ip(), addr.port(), afonly)?;
        let id = self.id_mut(handle)?;
        id.reserved = Some(Reservation {
            ps,
            ip: addr.ip(),
            port,
        });
        id.src = Some(SocketAddr::new(addr.ip(), port));
        id.device = device;
        Ok(Reply::Done)
    }

    fn device_of(&self, ip: IpAddr) -> Option<usize> {
        self.devices.iter().position(|d| same_ip(d.ip, ip))
    }

    fn resolve_ip(
        &mut self,
        now: Nanos,
        c: &Command<'_>,
        ports: &mut dyn PortSpace,
    ) -> Result<Reply, i32> {
        let src = c.sockaddr(8, 28)?;
        let dst = c.sockaddr(36, 28)?.ok_or(EINVAL)?;
        let (handle, timeout_ms) = (c.u32(64)?, c.u32(68)?);
        self.resolve(now, handle, timeout_ms, src, dst, ports)
    }

    /// RESOLVE_ADDR: as RESOLVE_IP, with sizes (the kernel's checks) and
    /// AF_IB destinations, which no RoCE port resolves: the id is bound
    /// as the kernel binds it, then ENODEV (`cma_resolve_ib_dev`).
    fn resolve_addr(
        &mut self,
        now: Nanos,
        c: &Command<'_>,
        ports: &mut dyn PortSpace,
    ) -> Result<Reply, i32> {
        let (handle, timeout_ms) = (c.u32(8)?, c.u32(12)?);
        let (src_size, dst_size) = (c.u16(16)?, c.u16(18)?);
        let (src_family, dst_family) = (c.u16(24)?, c.u16(152)?);
        let sized = |size: u16, family: u16| usize::from(size) == abi::family_len(family);
        if c.u32(20)? != 0
            || (src_size != 0 && !sized(src_size, src_family))
            || dst_size == 0
            || !sized(dst_size, dst_family)
        {
            return Err(EINVAL);
        }
        if dst_family == abi::AF_IB {
            let src = (src_size != 0)
                .then(|| c.bytes(24, usize::from(src_size)))
                .transpose()?;
            return self.resolve_ib(handle, src, ports);
        }
        let src = if src_size == 0 {
            None
        } else {
            c.sockaddr(24, 128)?
        };
        if src_size != 0 && src.is_none() {
            return Err(EINVAL); // an AF_IB source for an IP destination
        }
        let dst = c.sockaddr(152, 128)?.ok_or(EINVAL)?;
        self.resolve(now, handle, timeout_ms, src, dst, ports)
    }

    /// An AF_IB destination, which no RoCE port resolves. A fresh id is
    /// bound first, as `cma_bind_addr` binds it: to the source given (an
    /// IP one, whose family then differs: EINVAL; an AF_IB one with a GID:
    /// ENODEV) or to the unspecified AF_IB address; it stays bound.
    fn resolve_ib(
        &mut self,
        handle: u32,
        src: Option<&[u8]>,
        ports: &mut dyn PortSpace,
    ) -> Result<Reply, i32> {
        let id = self.id(handle)?;
        if id.state != State::Idle || id.src.is_some() {
            return Err(EINVAL);
        }
        if id.ib_src.is_none() {
            match src {
                Some(b) => match abi::parse_sockaddr(b) {
                    Some(ip) => {
                        self.bind_to(handle, ip, ports)?;
                        return Err(EINVAL);
                    }
                    None => self.bind_ib(handle, b, ports)?,
                },
                None => self.bind_ib(handle, &abi::sockaddr_ib(0, [0; 16], 0, 0), ports)?,
            };
        }
        Err(ENODEV)
    }

    /// Resolves id `handle` to `dst`, from `src` if given: picks the
    /// softverbs device, binds the id if it is not, and queues
    /// ADDR_RESOLVED (ADDR_ERROR where no device fits), or waits for the
    /// next hop's link-layer address up to `timeout_ms` first.
    fn resolve(
        &mut self,
        now: Nanos,
        handle: u32,
        timeout_ms: u32,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        ports: &mut dyn PortSpace,
    ) -> Result<Reply, i32> {
        let id = self.id(handle)?;
        // As the kernel's `resolve_prepare_src`: only from IDLE or
        // ADDR_BOUND; an id already resolved (or resolving) is EINVAL,
        // and queues no second ADDR_RESOLVED.
        if id.state != State::Idle || id.ib_src.is_some() || id.addr_resolved {
            return Err(EINVAL);
        }
        let (src, dst) = (src.map(canonical), canonical(dst));
        let device = self.device_for(handle, src, dst, ports)?;
        // An id resolved unbound is bound first, as the kernel's
        // `cma_bind_addr` binds it: to the source given, else the
        // wildcard of the destination's family, which the kernel restores
        // if resolving fails (so a later resolve picks its device afresh);
        // once resolved, to the device's address.
        let unbound = self.id(handle)?.reserved.is_none();
        let port = src.map_or(0, |s| s.port());
        let unresolved = unresolved_source(src, dst);
        let Some(device) = device else {
            if unbound {
                self.bind_to(handle, unresolved, ports)?;
            }
            self.notify_id(
                handle,
                event::ADDR_ERROR,
                -EADDRNOTAVAIL,
                EventConn::default(),
            );
            return Ok(Reply::Done);
        };
        let ip = self.devices[device].ip;
        // As the kernel's address resolution: no route fails the command
        // itself (the id stays bound); a destination the device's address
        // cannot send to (a route out of another interface) is an
        // ADDR_ERROR. Connecting there would only time out, after some
        // 100 s of CM retries. A multicast group (to join) is reached by
        // the device's own interface, whatever the routes say: a
        // link-local group has none without a scope.
        let routed = match dst.ip().is_multicast() {
            true => Ok(()),
            false => ports.route(ip, dst.ip()),
        };
        if unbound {
            let bound = match routed {
                Ok(()) => SocketAddr::new(ip, port),
                Err(_) => unresolved,
            };
            self.bind_to(handle, bound, ports)?;
        }
        match routed {
            Ok(()) => {}
            Err(errno @ (ENETUNREACH | EHOSTUNREACH)) => return Err(errno),
            Err(_) => {
                let status = -ENETUNREACH;
                self.notify_id(handle, event::ADDR_ERROR, status, EventConn::default());
                return Ok(Reply::Done);
            }
        }
        let id = self.id_mut(handle)?;
        let port = id.src.map_or(0, |s| s.port());
        id.src = Some(SocketAddr::new(ip, port));
        id.dst = Some(dst);
        id.device = Some(device);
        if !dst.ip().is_multicast() && !ports.next_hop_known(ip, dst.ip()) {
            let wildcard = unresolved.ip().is_unspecified() && unbound;
            let restore = wildcard.then(|| SocketAddr::new(unresolved.ip(), port));
            id.state = State::AddrQuery;
            id.resolving = Some(Resolving::new(now, timeout_ms).restoring(restore));
            return Ok(Reply::Done);
        }
        id.addr_resolved = true;
        self.notify_id(handle, event::ADDR_RESOLVED, 0, EventConn::default());
        Ok(Reply::Done)
    }

    /// Looks at the next hop of id `handle`'s resolution again, if that
    /// is due: ADDR_RESOLVED once the host knows it, ADDR_ERROR
    /// (ETIMEDOUT) once the resolution's time is up, as the kernel's
    /// `process_one_req`.
    fn resolution_due(&mut self, handle: u32, now: Nanos, ports: &mut dyn PortSpace) {
        let Some(id) = self.ids.get_mut(&handle) else {
            return;
        };
        let (Some(resolving), Some(src), Some(dst)) = (id.resolving.as_mut(), id.src, id.dst)
        else {
            return;
        };
        if resolving.at > now {
            return;
        }
        let restore = resolving.restore;
        let (kind, status) = if ports.next_hop_known(src.ip(), dst.ip()) {
            id.addr_resolved = true;
            (event::ADDR_RESOLVED, 0)
        } else if resolving.expired(now) {
            (event::ADDR_ERROR, -ETIMEDOUT)
        } else {
            resolving.again(now);
            return;
        };
        id.resolving = None;
        id.state = State::Idle;
        if let (Some(wildcard), event::ADDR_ERROR) = (restore, kind) {
            self.rebind(handle, wildcard, ports);
        }
        self.notify_id(handle, kind, status, EventConn::default());
    }

    /// Binds id `handle` to `addr` in place of what it holds (an id whose
    /// resolution failed goes back to the wildcard it was bound to). The
    /// port is given back before it is taken again, so someone may take
    /// it between: the id then keeps the binding it had, or, if that is
    /// gone too, none (a later resolve binds it afresh).
    fn rebind(&mut self, handle: u32, addr: SocketAddr, ports: &mut dyn PortSpace) {
        let Some(id) = self.ids.get_mut(&handle) else {
            return;
        };
        let Some(held) = id.reserved.take() else {
            return;
        };
        ports.release(held.ps, held.ip, held.port);
        let afonly = id.afonly.unwrap_or(held.ip.is_ipv4() || self.bindv6only);
        let (src, device) = (id.src.take(), id.device.take());
        if self.bind_to(handle, addr, ports).is_ok() {
            return;
        }
        if ports.reserve(held.ps, held.ip, held.port, afonly).is_ok() {
            if let Some(id) = self.ids.get_mut(&handle) {
                (id.reserved, id.src, id.device) = (Some(held), src, device);
            }
        }
    }

    /// The device that resolves id `handle` to `dst`: the bound one, the
    /// source's, the destination's when it is local, the one of the
    /// source the host's routing picks (as the kernel's `addr4_resolve`
    /// and `addr6_resolve` take the route's source: another device's
    /// address would send out of one interface and have the answers come
    /// back through another, which a strict reverse-path filter drops),
    /// else the first of the destination's family. None for an id bound
    /// to a loopback address no device has: nothing routes from there
    /// (its port stays where it was reserved).
    fn device_for(
        &self,
        handle: u32,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        ports: &mut dyn PortSpace,
    ) -> Result<Option<usize>, i32> {
        let id = self.id(handle)?;
        let loopback_bound =
            id.device.is_none() && id.reserved.is_some_and(|r| !r.ip.is_unspecified());
        Ok(id
            .device
            .or_else(|| src.and_then(|s| self.device_of(s.ip())))
            .or_else(|| self.device_of(dst.ip()))
            .or_else(|| ports.source_for(dst.ip()).and_then(|s| self.device_of(s)))
            .or_else(|| {
                let family = dst.is_ipv4();
                self.devices.iter().position(|d| d.ip.is_ipv4() == family)
            })
            .filter(|_| !loopback_bound))
    }

    fn resolve_route(&mut self, c: &Command<'_>) -> Result<Reply, i32> {
        let handle = c.u32(8)?;
        if c.u32(12)? == 0 {
            return Err(EINVAL);
        }
        let id = self.id_mut(handle)?;
        // ADDR_RESOLVED only, as the kernel's `rdma_resolve_route`: not
        // before the address, nor a second time.
        if !id.addr_resolved || id.route_resolved || id.state != State::Idle {
            return Err(EINVAL);
        }
        // On RoCE the route is the two addresses: nothing to look up.
        id.route_resolved = true;
        self.notify_id(handle, event::ROUTE_RESOLVED, 0, EventConn::default());
        Ok(Reply::Done)
    }

    fn query_route(&mut self, c: &Command<'_>) -> Result<Reply, i32> {
        room_for(c, query::ROUTE_MIN_LEN)?;
        let response = c.u64(8)?;
        let id = self.id(c.u32(16)?)?;
        let r = query::route(id, self.device(id), HOP_LIMIT, PACKET_LIFE_TIME);
        let len = usize::from(c.out).min(query::ROUTE_LEN);
        Ok(Reply::Respond {
            addr: response,
            bytes: r[..len].to_vec(),
        })
    }

    /// QUERY: the id's addresses (ADDR), their GIDs (GID) or its paths
    /// (PATH); a response buffer too small for the answer is ENOSPC.
    fn query(&mut self, c: &Command<'_>) -> Result<Reply, i32> {
        let response = c.u64(8)?;
        let id = self.id(c.u32(16)?)?;
        let out = usize::from(c.out);
        let device = self.device(id);
        let mut bytes = match c.u32(20)? {
            0 | 2 if out < query::ADDR_MIN_LEN => return Err(ENOSPC),
            0 => query::addr(id, device),
            1 if out < query::PATH_HEAD_LEN => return Err(ENOSPC),
            1 => query::paths(id, device, HOP_LIMIT, PACKET_LIFE_TIME, out),
            2 => query::gid(id, device),
            _ => return Err(ENOSYS),
        };
        // The kernel copies no more than the caller has room for.
        bytes.truncate(out);
        Ok(Reply::Respond {
            addr: response,
            bytes,
        })
    }

    /// The softverbs device id `id` is bound to.
    fn device(&self, id: &CmId) -> Option<&Device> {
        id.device.and_then(|d| self.devices.get(d))
    }

    fn listen(&mut self, c: &Command<'_>, ports: &mut dyn PortSpace) -> Result<Reply, i32> {
        let handle = c.u32(8)?;
        let backlog = listen_backlog(c.u32(12)?);
        let id = self.id(handle)?;
        if id.state == State::Listening {
            // The kernel's ucma sets the new backlog, then its
            // `rdma_listen` fails: the id is no longer IDLE or ADDR_BOUND.
            self.id_mut(handle)?.backlog = backlog;
            return Err(EINVAL);
        }
        if id.state != State::Idle || id.addr_resolved {
            return Err(EINVAL);
        }
        if id.ib_src.is_some() {
            // An AF_IB listener would take IB CM requests by service ID
            // alone; not built (docs/supported.md).
            return Err(EOPNOTSUPP);
        }
        if id.reserved.is_none() {
            // rdma_listen on an unbound id binds it to every address, as
            // the kernel's `rdma_listen` does: an AF_INET one.
            let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
            self.bind_to(handle, any, ports)?;
        }
        let r = self.id(handle)?.reserved.ok_or(EINVAL)?;
        ports.listen(r.ps, r.ip, r.port)?;
        let id = self.id_mut(handle)?;
        id.state = State::Listening;
        id.backlog = backlog;
        Ok(Reply::Done)
    }

    /// Takes room in `listener`'s backlog for a new connection request;
    /// `false` when it is full. The request is then dropped without an
    /// answer, as the kernel does (ucma's handler fails with ENOMEM, and
    /// the CM does not reject on ENOMEM), so the peer's CM sends it again
    /// and it gets in once the application has read what is queued.
    fn take_backlog(&mut self, listener: u32) -> bool {
        match self.ids.get_mut(&listener) {
            Some(l) if l.backlog > 0 => {
                l.backlog -= 1;
                true
            }
            _ => false,
        }
    }

    /// A comm ID for a new connection on `device`: its block (by which the
    /// daemon hands our MADs to us) and 20 random bits, not counted up,
    /// so that one ID seen does not tell the next: a message must name
    /// both IDs of a connection ([`Agent::conn_of`]).
    fn alloc_comm_id(&mut self, device: usize) -> u32 {
        let block = u32::from(self.devices[device].comm_block);
        loop {
            let id = block << 20 | self.rng.u32(1..=0xF_FFFF);
            if !self.ids.values().any(|i| i.conn.local_comm_id == id) {
                return id;
            }
        }
    }

    fn connect(
        &mut self,
        now: Nanos,
        c: &Command<'_>,
        ports: &mut dyn PortSpace,
    ) -> Result<Reply, i32> {
        let param = ConnParam::parse(c, 8)?;
        let handle = c.u32(280)?;
        let id = self.id(handle)?;
        if !param.valid || id.state != State::Idle || !id.route_resolved {
            return Err(EINVAL);
        }
        if id.qp_type == UD {
            return self.sidr_req(now, handle, &param);
        }
        let (Some(src), Some(dst), Some(device)) = (id.src, id.dst, id.device) else {
            return Err(EINVAL);
        };
        if param.private_data.len() > REQ_PRIVATE_DATA_LEN - CMA_HDR_LEN {
            return Err(EINVAL);
        }
        let hdr = CmaHdr { src, dst: dst.ip() };
        let private_data = hdr
            .prepend::<REQ_PRIVATE_DATA_LEN>(&param.private_data)
            .map_err(|_| EINVAL)?;
        let ps = id.ps;
        let qp_type = id.qp_type;
        let traffic_class = id.tos.unwrap_or(0);
        let comm = self.alloc_comm_id(device);
        let seq = self.rng.u32(..) & 0xFF_FFFF;
        let tid = u64::from(self.rng.u32(..)) << 32 | u64::from(comm);
        let d = &self.devices[device];
        let service_id = IpServiceId {
            port_space: softverbs_wire::cm::PortSpace::from_u16(ps).ok_or(EINVAL)?,
            port: dst.port(),
        }
        .to_u64();
        let req = CmReq {
            local_comm_id: comm,
            service_id,
            local_ca_guid: u64::from_be_bytes(d.node_guid),
            local_qpn: Qpn::new_masked(param.qp_num),
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
            remote_cm_response_timeout: CM_RESPONSE_TIMEOUT,
            transport: if qp_type == 3 {
                TransportType::Uc
            } else {
                TransportType::Rc
            },
            end_to_end_flow_control: param.flow_control,
            starting_psn: Psn::new_masked(seq),
            local_cm_response_timeout: CM_RESPONSE_TIMEOUT,
            retry_count: param.retry_count.min(7),
            pkey: 0xFFFF,
            path_mtu: d.path_mtu,
            rnr_retry_count: param.rnr_retry_count.min(7),
            max_cm_retries: MAX_CM_RETRIES,
            srq: param.srq,
            // The path's traffic class is the id's TOS, as the kernel's
            // route carries it: the passive side takes it from here.
            primary: CmPath {
                traffic_class,
                ..path(src.ip(), dst.ip())
            },
            private_data,
            ..CmReq::default()
        };
        let mad = mad_of(&CmMessage::Req(req), tid)?;
        let id = self.id_mut(handle)?;
        id.conn = Conn {
            local_comm_id: comm,
            local_qpn: param.qp_num,
            seq_num: seq,
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
            retry_count: param.retry_count.min(7),
            rnr_retry_count: param.rnr_retry_count.min(7),
            tid,
            peer_ip: Some(dst.ip()),
            started: true,
            ..Conn::default()
        };
        id.state = State::ReqSent;
        let every = 2 * iba_time(PACKET_LIFE_TIME) + iba_time(CM_RESPONSE_TIMEOUT);
        self.send(src.ip(), dst.ip(), mad);
        self.arm(handle, mad, now, every, MAX_CM_RETRIES);
        // Should this process die with the REQ unanswered, the daemon
        // gives it up in our name (the kernel's CM outlives a process).
        let guid = u64::from_be_bytes(self.devices[device].node_guid);
        ports.requesting(src.ip(), dst.ip(), comm, guid, tid);
        Ok(Reply::Done)
    }

    fn accept(
        &mut self,
        now: Nanos,
        c: &Command<'_>,
        ports: &mut dyn PortSpace,
    ) -> Result<Reply, i32> {
        let uid = c.u64(8)?;
        let param = ConnParam::parse(c, 16)?;
        let handle = c.u32(288)?;
        let id = self.id(handle)?;
        let state = id.state;
        if id.qp_type == UD {
            if state != State::ReqRcvd {
                return Err(EINVAL);
            }
            let answered = self.sidr_rep(
                handle,
                sidr_status::SUCCESS,
                param.qp_num,
                &param.private_data,
            );
            if let Err(e) = answered {
                // As the kernel's `rdma_accept` on an error: the request
                // is rejected, so the requester hears UNREACHABLE now.
                let _ = self.sidr_rep(handle, sidr_status::REJECT, 0, &[]);
                self.id_mut(handle)?.state = State::Closed;
                return Err(e);
            }
            let id = self.id_mut(handle)?;
            id.uid = uid;
            id.state = State::Established;
            return Ok(Reply::Done);
        }
        match (state, param.valid) {
            (State::ReqRcvd, true) => {
                let sent = self.send_rep(now, handle, uid, &param, ports);
                if sent.is_err() {
                    // As the kernel's `rdma_accept` on an error: the
                    // request is rejected (consumer defined), so the
                    // active side hears REJECTED instead of waiting.
                    self.reject_request(handle);
                }
                sent
            }
            // librdmacm's ACCEPT after CONNECT_RESPONSE: the RTU.
            (State::RepRcvd, false) => {
                let id = self.id(handle)?.clone();
                let rtu = CmRtu {
                    local_comm_id: id.conn.local_comm_id,
                    remote_comm_id: id.conn.remote_comm_id,
                    ..CmRtu::default()
                };
                self.send_to_peer(&id, &CmMessage::Rtu(rtu))?;
                self.id_mut(handle)?.state = State::Established;
                Ok(Reply::Done)
            }
            _ => Err(EINVAL),
        }
    }

    fn send_rep(
        &mut self,
        now: Nanos,
        handle: u32,
        uid: u64,
        param: &ConnParam,
        ports: &mut dyn PortSpace,
    ) -> Result<Reply, i32> {
        if param.private_data.len() > REP_PRIVATE_DATA_LEN {
            return Err(EINVAL);
        }
        let id = self.id(handle)?;
        let d = &self.devices[id.device.ok_or(EINVAL)?];
        let mut private_data = [0u8; REP_PRIVATE_DATA_LEN];
        private_data[..param.private_data.len()].copy_from_slice(&param.private_data);
        let rep = CmRep {
            local_comm_id: id.conn.local_comm_id,
            remote_comm_id: id.conn.remote_comm_id,
            local_qpn: Qpn::new_masked(param.qp_num),
            starting_psn: Psn::new_masked(id.conn.seq_num),
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
            end_to_end_flow_control: param.flow_control,
            rnr_retry_count: param.rnr_retry_count.min(7),
            srq: param.srq,
            local_ca_guid: u64::from_be_bytes(d.node_guid),
            private_data,
            ..CmRep::default()
        };
        let mad = mad_of(&CmMessage::Rep(rep), id.conn.tid)?;
        let (src, dst) = endpoints(id)?;
        let id = self.id_mut(handle)?;
        id.uid = uid;
        id.conn.local_qpn = param.qp_num;
        id.conn.responder_resources = param.responder_resources;
        id.conn.initiator_depth = param.initiator_depth;
        id.state = State::RepSent;
        // Resent as the REQ asked: every Local CM Response Timeout of the
        // requester's, Max CM Retries times (the kernel's cm_req_handler).
        let every = iba_time(id.conn.peer_response_timeout);
        let retries = id.conn.peer_max_cm_retries;
        // Should this process die before the RTU, the daemon rejects the
        // REP in our name; told first, so that it knows the connection
        // before any RTU can pass it.
        ports.replying(src, dst, rep.local_comm_id, rep.remote_comm_id);
        self.send(src, dst, mad);
        self.arm(handle, mad, now, every, retries);
        Ok(Reply::Done)
    }

    /// Rejects request `handle` in REQ_RCVD as the consumer, with no
    /// private data, and closes it.
    fn reject_request(&mut self, handle: u32) {
        if let Some(id) = self.ids.get(&handle).cloned() {
            self.close_with_rej(&id, REJ_CONSUMER, &[]);
        }
    }

    /// Sends `id`'s REJ (`reason`, `data`) and closes it: nothing more
    /// happens on it.
    fn close_with_rej(&mut self, id: &CmId, reason: u16, data: &[u8]) {
        self.send_rej(id, reason, &[], data);
        if let Some(id) = self.ids.get_mut(&id.handle) {
            id.state = State::Closed;
            id.retransmit = None;
        }
    }

    fn reject(&mut self, c: &Command<'_>) -> Result<Reply, i32> {
        let handle = c.u32(8)?;
        let len = usize::from(c.u8(12)?);
        let reason = match u16::from(c.u8(13)?) {
            0 => REJ_CONSUMER,
            r @ (REJ_CONSUMER | REJ_VENDOR_ECE) => r,
            _ => return Err(EINVAL),
        };
        let data = c.bytes(16, len.min(abi::PRIVATE_DATA_MAX))?.to_vec();
        let id = self.id(handle)?.clone();
        if id.qp_type == UD && id.state == State::ReqRcvd {
            self.sidr_rep(handle, sidr_status::REJECT, 0, &data)?;
            self.id_mut(handle)?.state = State::Closed;
            return Ok(Reply::Done);
        }
        // The states the kernel's CM rejects from (`cm_send_rej_locked`):
        // before ESTABLISHED, on either side, a REP already sent included.
        let rejectable = matches!(
            id.state,
            State::ReqSent | State::ReqRcvd | State::RepSent | State::RepRcvd
        );
        if !rejectable {
            return Err(EINVAL);
        }
        if data.len() > softverbs_wire::cm::REJ_PRIVATE_DATA_LEN {
            return Err(EINVAL);
        }
        self.close_with_rej(&id, reason, &data);
        Ok(Reply::Done)
    }

    fn disconnect(&mut self, now: Nanos, c: &Command<'_>) -> Result<Reply, i32> {
        let handle = c.u32(8)?;
        let id = self.id(handle)?.clone();
        if id.qp_type == UD {
            return Err(EINVAL); // no connection to end
        }
        match id.state {
            State::Established | State::RepSent | State::RepRcvd => {
                self.start_disconnect(now, &id)?;
                Ok(Reply::Done)
            }
            State::DreqRcvd => {
                self.send_drep(&id);
                self.enter_timewait(handle, now);
                Ok(Reply::Done)
            }
            // Already going down: nothing more to send.
            State::DreqSent | State::TimeWait => Ok(Reply::Done),
            // The kernel's rdma_disconnect succeeds once a CM id exists
            // (a REQ went or came), sending what its state allows, here
            // nothing: not yet connected, or rejected, or timed out.
            _ if id.conn.started => Ok(Reply::Done),
            _ => Err(EINVAL),
        }
    }

    /// INIT_QP_ATTR, as the kernel's `rdma_init_qp_attr`: a UD id, and an
    /// id with no CM id yet (no REQ sent or received, not listening), get
    /// the INIT attributes whatever state is asked (`cma_ib_init_qp_attr`;
    /// the modify that follows refuses them for a later state); an id
    /// with a CM id gets each state's from the connection, in the states
    /// of it the kernel's CM answers (`ib_cm_init_qp_attr`), else EINVAL.
    fn init_qp_attr(&mut self, c: &Command<'_>) -> Result<Reply, i32> {
        room_for(c, abi::QP_ATTR_LEN)?;
        let response = c.u64(8)?;
        let id = self.id(c.u32(16)?)?;
        let qp_state = c.u32(20)?;
        let d = id.device.and_then(|d| self.devices.get(d)).ok_or(EINVAL)?;
        if qp_state > QPS_ERR {
            return Err(EINVAL);
        }
        let conn = &id.conn;
        let mut a = QpAttr {
            qp_state,
            port_num: 1,
            ..QpAttr::default()
        };
        let has_cm_id = conn.started || id.state == State::Listening;
        if id.qp_type == UD || !has_cm_id {
            init_attributes(&mut a, id);
        } else {
            match qp_state {
                QPS_INIT if id.state.connecting() => init_attributes(&mut a, id),
                QPS_RTR if id.state.has_peer_qp() => rtr_attributes(&mut a, id, d)?,
                QPS_RTS if id.state.has_peer_qp() => rts_attributes(&mut a, id),
                _ => return Err(EINVAL),
            }
        }
        let len = usize::from(c.out).min(abi::QP_ATTR_LEN);
        Ok(Reply::Respond {
            addr: response,
            bytes: a.encode()[..len].to_vec(),
        })
    }

    fn get_event(&mut self, channel: i32, c: &Command<'_>) -> Result<Reply, i32> {
        let response = c.u64(8)?;
        if usize::from(c.out) < abi::EVENT_MIN_LEN {
            return Err(ENOSPC);
        }
        let Some(q) = self.channels.get_mut(&channel).and_then(|q| q.pop_front()) else {
            return Ok(Reply::NoEvent);
        };
        if let Some(id) = self.ids.get_mut(&q.counts_for) {
            id.events_reported += 1;
            if q.event.event == event::CONNECT_REQUEST {
                id.backlog += 1;
            }
        } else if let Some(join) = self.joins.get_mut(&q.counts_for) {
            join.events_reported += 1;
        }
        let len = usize::from(c.out).min(abi::EVENT_LEN);
        Ok(Reply::Respond {
            addr: response,
            bytes: q.event.encode()[..len].to_vec(),
        })
    }

    /// SET_OPTION, its value in the command's data (`abi::Command::data`).
    /// The kernel's checks: each option's exact size, ACK_TIMEOUT on RC
    /// ids only.
    fn set_option(&mut self, c: &Command<'_>) -> Result<Reply, i32> {
        let (handle, level, name, len) = (c.u32(16)?, c.u32(20)?, c.u32(24)?, c.u32(28)?);
        self.id(handle)?;
        let value = c.data().get(..len as usize).ok_or(EFAULT)?;
        let id = self.id_mut(handle)?;
        let byte = || match value {
            [b] => Ok(*b),
            _ => Err(EINVAL),
        };
        // IDLE and ADDR_BOUND, as the kernel's states: not resolved, not
        // listening or connecting; IDLE is also unbound.
        let bound_at_most = id.state == State::Idle && !id.addr_resolved;
        let idle = bound_at_most && id.reserved.is_none();
        match (level, name) {
            (0, 0) => id.tos = Some(byte()?),
            // REUSEADDR, AFONLY: an int each, refused in the states the
            // kernel's `rdma_set_reuseaddr` (clearing it only while IDLE,
            // setting it not while listening) and `rdma_set_afonly` (IDLE
            // or ADDR_BOUND) refuse. REUSEADDR is accepted and changes
            // nothing (softverbs' port space has no reuse); AFONLY decides
            // which family a wildcard listener takes (`CmId::takes`).
            (0, 1) if len == 4 => {
                let reuse = value.iter().any(|&b| b != 0);
                let allowed = match reuse {
                    true => id.state != State::Listening,
                    false => idle,
                };
                if !allowed {
                    return Err(EINVAL);
                }
            }
            (0, 2) if len == 4 && !bound_at_most => return Err(EINVAL),
            (0, 2) if len == 4 => id.afonly = Some(value.iter().any(|&b| b != 0)),
            (0, 1 | 2) => return Err(EINVAL),
            (0, 3) if id.qp_type != RC => return Err(EINVAL),
            (0, 3) => id.ack_timeout = Some(byte()?),
            _ => return Err(ENOSYS),
        }
        Ok(Reply::Done)
    }

    /// NOTIFY, as the kernel's `rdma_notify` and `ib_cm_notify`: only an
    /// id with a connection (a CM id); COMM_EST (the QP got its first
    /// packet: as good as the RTU) establishes a connection whose REP
    /// went out and is EISCONN once established; PATH_MIG needs an
    /// established connection; any other event is EINVAL.
    fn notify(&mut self, c: &Command<'_>) -> Result<Reply, i32> {
        let handle = c.u32(8)?;
        let id = self.id(handle)?;
        if !id.conn.started || id.qp_type == UD {
            return Err(EINVAL);
        }
        match (c.u32(12)?, id.state) {
            (COMM_EST, State::RepSent) => self.established(handle),
            (COMM_EST, State::Established) => return Err(EISCONN),
            (PATH_MIG, State::Established) => {}
            _ => return Err(EINVAL),
        }
        Ok(Reply::Done)
    }

    /// JOIN_IP_MCAST: on RoCE a join needs no subnet manager; the group's
    /// address is its GID, and MULTICAST_JOIN says how to reach it (QP
    /// 0xFFFFFF, the UD Q_Key). The application then attaches its QP,
    /// and the device joins the IP group (`ibv_attach_mcast`).
    fn join_ip(&mut self, c: &Command<'_>) -> Result<Reply, i32> {
        let (response, uid) = join_head(c)?;
        let group = c.sockaddr(24, 28)?.ok_or(EINVAL)?.ip();
        self.join(response, uid, group, c.u32(52)?)
    }

    /// JOIN_MCAST: as JOIN_IP_MCAST, with the address's size and the
    /// join flags (full member, 0, or send-only full member, 1: on RoCE
    /// both are a join with no subnet manager; only a full member's QP
    /// will take the group's traffic, by its own `ibv_attach_mcast`).
    fn join_mcast(&mut self, c: &Command<'_>) -> Result<Reply, i32> {
        let (response, uid) = join_head(c)?;
        let (size, flags) = (c.u16(28)?, c.u16(30)?);
        if size == 0 || usize::from(size) != abi::family_len(c.u16(32)?) || flags > 1 {
            return Err(EINVAL);
        }
        let group = c.sockaddr(32, 128)?.ok_or(EINVAL)?.ip();
        self.join(response, uid, group, c.u32(24)?)
    }

    fn join(&mut self, response: u64, uid: u64, group: IpAddr, handle: u32) -> Result<Reply, i32> {
        let id = self.id(handle)?;
        if !group.is_multicast() || id.device.is_none() || id.qp_type != UD {
            return Err(EINVAL);
        }
        let channel = id.channel;
        let mc = MC_HANDLES | self.new_handle();
        self.joins.insert(
            mc,
            Join {
                id: handle,
                events_reported: 0,
            },
        );
        let ev = Event {
            uid,
            id: handle,
            event: event::MULTICAST_JOIN,
            ud: Some(EventUd {
                qp_num: 0xFF_FFFF,
                qkey: UDP_QKEY,
                dgid: abi::gid_of(group),
                sgid_index: SGID_INDEX,
                hop_limit: HOP_LIMIT,
                private_data: Vec::new(),
            }),
            ..Event::default()
        };
        self.queue(channel, ev, mc);
        Ok(Reply::Respond {
            addr: response,
            bytes: mc.to_ne_bytes().to_vec(),
        })
    }

    /// LEAVE_MCAST: the join's events not handed out go with it.
    fn leave(&mut self, c: &Command<'_>) -> Result<Reply, i32> {
        let response = c.u64(8)?;
        let mc = c.u32(16)?;
        let join = self.joins.remove(&mc).ok_or(ENOENT)?;
        for q in self.channels.values_mut() {
            q.retain(|q| q.counts_for != mc);
        }
        Ok(Reply::Respond {
            addr: response,
            bytes: join.events_reported.to_ne_bytes().to_vec(),
        })
    }

    fn migrate_id(&mut self, channel: i32, c: &Command<'_>) -> Result<Reply, i32> {
        let response = c.u64(8)?;
        let handle = c.u32(16)?;
        let old = c.u32(20)? as i32;
        let id = self.id_mut(handle)?;
        if id.channel != old {
            return Err(EINVAL);
        }
        id.channel = channel;
        let reported = id.events_reported;
        let moved: Vec<Queued> = match self.channels.get_mut(&old) {
            Some(q) => {
                // Its events, and for a listener the connection requests
                // it has not handed out (the ids they made move too).
                let (mine, rest): (Vec<_>, Vec<_>) = q
                    .drain(..)
                    .partition(|e| e.counts_for == handle || e.event.id == handle);
                q.extend(rest);
                mine
            }
            None => Vec::new(),
        };
        for e in moved {
            if let Some(made) = self.ids.get_mut(&e.event.id) {
                made.channel = channel;
            }
            self.queue(channel, e.event, e.counts_for);
        }
        Ok(Reply::Respond {
            addr: response,
            bytes: reported.to_ne_bytes().to_vec(),
        })
    }

    /// A MAD arrived for QP1 from `src` to `dst` (its IP addresses).
    /// Anything that is not a CM message this agent expects is dropped.
    pub fn handle_mad(&mut self, now: Nanos, src: IpAddr, dst: IpAddr, mad: &[u8]) {
        let Ok((header, msg)) = CmMessage::parse_mad(mad) else {
            return;
        };
        match msg {
            CmMessage::SidrReq(req) => self.on_sidr_req(src, dst, header.tid, &req),
            CmMessage::SidrRep(rep) => self.on_sidr_rep(src, &rep),
            _ => self.handle_connected(now, src, dst, header.tid, msg),
        }
    }

    /// The connected services' messages (all but SIDR).
    fn handle_connected(&mut self, now: Nanos, src: IpAddr, dst: IpAddr, tid: u64, msg: CmMessage) {
        match msg {
            CmMessage::Req(req) => self.on_req(now, src, dst, tid, &req),
            CmMessage::Rep(rep) => self.on_rep(src, &rep),
            CmMessage::Rtu(rtu) => {
                let (ours, theirs) = (rtu.remote_comm_id, rtu.local_comm_id);
                if let Some(h) = self.conn_in(src, ours, theirs, State::RepSent) {
                    self.established(h);
                }
            }
            CmMessage::Rej(rej) => self.on_rej(src, &rej),
            CmMessage::Mra(mra) => {
                // The peer needs longer: wait its service timeout again.
                let theirs = match mra.message_mraed {
                    MessageKind::Req => 0,
                    _ => mra.local_comm_id,
                };
                if let Some(h) = self.conn_of(src, mra.remote_comm_id, theirs) {
                    if let Some(r) = self.ids.get_mut(&h).and_then(|i| i.retransmit.as_mut()) {
                        r.at = now + r.every + iba_time(mra.service_timeout);
                    }
                }
            }
            CmMessage::Dreq(dreq) => self.on_dreq(now, src, dst, tid, &dreq),
            CmMessage::Drep(drep) => {
                let (ours, theirs) = (drep.remote_comm_id, drep.local_comm_id);
                if let Some(h) = self.conn_in(src, ours, theirs, State::DreqSent) {
                    self.notify_id(h, event::DISCONNECTED, 0, EventConn::default());
                    self.enter_timewait(h, now);
                }
            }
            CmMessage::SidrReq(_) | CmMessage::SidrRep(_) => {}
        }
    }

    /// A UD id's CONNECT: a SIDR_REQ asks the peer for the QP and Q_Key
    /// behind the service.
    fn sidr_req(&mut self, now: Nanos, handle: u32, param: &ConnParam) -> Result<Reply, i32> {
        let id = self.id(handle)?;
        let (Some(src), Some(dst), Some(device)) = (id.src, id.dst, id.device) else {
            return Err(EINVAL);
        };
        if param.private_data.len() > IP_SIDR_REQ_USER_DATA_LEN {
            return Err(EINVAL);
        }
        let private_data = CmaHdr { src, dst: dst.ip() }
            .prepend::<SIDR_REQ_PRIVATE_DATA_LEN>(&param.private_data)
            .map_err(|_| EINVAL)?;
        let service_id = IpServiceId {
            port_space: softverbs_wire::cm::PortSpace::from_u16(id.ps).ok_or(EINVAL)?,
            port: dst.port(),
        }
        .to_u64();
        let comm = self.alloc_comm_id(device);
        let tid = u64::from(self.rng.u32(..)) << 32 | u64::from(comm);
        let req = CmSidrReq {
            request_id: comm,
            pkey: 0xFFFF,
            service_id,
            private_data,
        };
        let mad = mad_of(&CmMessage::SidrReq(req), tid)?;
        let id = self.id_mut(handle)?;
        id.conn = Conn {
            local_comm_id: comm,
            tid,
            peer_ip: Some(dst.ip()),
            started: true,
            ..Conn::default()
        };
        id.state = State::ReqSent;
        self.send(src.ip(), dst.ip(), mad);
        self.arm(
            handle,
            mad,
            now,
            iba_time(CM_RESPONSE_TIMEOUT),
            MAX_CM_RETRIES,
        );
        Ok(Reply::Done)
    }

    fn on_sidr_req(&mut self, src: IpAddr, dst: IpAddr, tid: u64, req: &CmSidrReq) {
        if self
            .ids
            .values()
            .any(|i| i.conn.remote_comm_id == req.request_id && i.conn.peer_ip == Some(src))
        {
            return; // sent again while the consumer decides
        }
        let Ok((hdr, user)) = CmaHdr::split(&req.private_data) else {
            return;
        };
        let Some(service) = IpServiceId::from_u64(req.service_id) else {
            return;
        };
        let Some(listener) = self.listener_for(service, dst) else {
            // As the kernel's: its CM answers "unsupported" where nothing
            // listens for the service ID on the device, rdma_cm "reject"
            // where a listener there does not take the address.
            let status = match self.listens_on_device(service, dst) {
                true => sidr_status::REJECT,
                false => sidr_status::UNSUPPORTED,
            };
            let rep = CmSidrRep {
                request_id: req.request_id,
                status,
                service_id: req.service_id,
                ..CmSidrRep::default()
            };
            if let Ok(mad) = mad_of(&CmMessage::SidrRep(rep), tid) {
                self.send(dst, src, mad);
            }
            return;
        };
        let Some(device) = self.device_of(dst) else {
            return;
        };
        if !self.take_backlog(listener.handle) {
            return;
        }
        let handle = self.new_handle();
        let mut id = requested_id(
            handle,
            &listener,
            device,
            SocketAddr::new(dst, service.port),
            hdr.src,
        );
        id.conn = Conn {
            remote_comm_id: req.request_id,
            tid,
            peer_ip: Some(src),
            started: true,
            ..Conn::default()
        };
        self.ids.insert(handle, id);
        let ev = Event {
            uid: listener.uid,
            id: handle,
            event: event::CONNECT_REQUEST,
            ud: Some(EventUd {
                private_data: user.to_vec(),
                ..EventUd::default()
            }),
            ..Event::default()
        };
        self.queue(listener.channel, ev, listener.handle);
    }

    /// A UD id's ACCEPT or REJECT: the SIDR_REP, with our QP and Q_Key or
    /// a refusal.
    fn sidr_rep(&mut self, handle: u32, status: u8, qpn: u32, data: &[u8]) -> Result<(), i32> {
        let id = self.id(handle)?.clone();
        self.sidr_rep_of(&id, status, qpn, data)
    }

    fn sidr_rep_of(&mut self, id: &CmId, status: u8, qpn: u32, data: &[u8]) -> Result<(), i32> {
        if data.len() > SIDR_REP_PRIVATE_DATA_LEN {
            return Err(EINVAL);
        }
        let mut private_data = [0u8; SIDR_REP_PRIVATE_DATA_LEN];
        private_data[..data.len()].copy_from_slice(data);
        let service_id = IpServiceId {
            port_space: softverbs_wire::cm::PortSpace::from_u16(id.ps).ok_or(EINVAL)?,
            port: id.src.map_or(0, |s| s.port()),
        }
        .to_u64();
        let rep = CmSidrRep {
            request_id: id.conn.remote_comm_id,
            status,
            qpn: Qpn::new_masked(qpn),
            service_id,
            qkey: UDP_QKEY,
            private_data,
            ..CmSidrRep::default()
        };
        self.send_to_peer(id, &CmMessage::SidrRep(rep))
    }

    fn on_sidr_rep(&mut self, src: IpAddr, rep: &CmSidrRep) {
        let Some(h) = self.conn_in(src, rep.request_id, 0, State::ReqSent) else {
            return;
        };
        let Some(id) = self.ids.get_mut(&h) else {
            return;
        };
        id.retransmit = None;
        let peer = id.conn.peer_ip;
        if rep.status != sidr_status::SUCCESS {
            id.state = State::Closed;
            // The rejecter's private data comes with it, as the kernel's
            // `cma_sidr_rep_handler` hands it before it looks at the
            // status; no QP, Q_Key or address.
            let ud = EventUd {
                private_data: rep.private_data.to_vec(),
                ..EventUd::default()
            };
            self.notify_ud(h, event::UNREACHABLE, i32::from(rep.status), ud);
            return;
        }
        id.state = State::Established;
        id.conn.remote_qpn = rep.qpn.get();
        let ud = EventUd {
            qp_num: rep.qpn.get(),
            qkey: rep.qkey,
            dgid: peer.map(abi::gid_of).unwrap_or_default(),
            sgid_index: SGID_INDEX,
            hop_limit: HOP_LIMIT,
            private_data: rep.private_data.to_vec(),
        };
        self.notify_ud(h, event::ESTABLISHED, 0, ud);
    }

    fn notify_ud(&mut self, handle: u32, kind: u32, status: i32, ud: EventUd) {
        let Some(id) = self.ids.get(&handle) else {
            return;
        };
        let ev = Event {
            uid: id.uid,
            id: handle,
            event: kind,
            status,
            ud: Some(ud),
            ..Event::default()
        };
        let channel = id.channel;
        self.queue(channel, ev, handle);
    }

    /// The ids listening on `service`'s port space and port, with what
    /// each is bound to.
    fn port_listeners(
        &self,
        service: IpServiceId,
    ) -> impl Iterator<Item = (&CmId, Reservation)> + '_ {
        self.ids.values().filter_map(move |i| {
            let r = i.reserved.filter(|r| r.port == service.port)?;
            let listening = i.state == State::Listening && i.ps == service.port_space as u16;
            listening.then_some((i, r))
        })
    }

    /// The listening id a request for `service` to `dst` goes to.
    fn listener_for(&self, service: IpServiceId, dst: IpAddr) -> Option<CmId> {
        self.port_listeners(service)
            .find(|(i, r)| i.takes(r, dst, self.bindv6only))
            .map(|(i, _)| i.clone())
    }

    /// Whether some id listens for `service` on the device at `dst`
    /// (bound to a wildcard, which listens on every device, or to an
    /// address of that device), whatever addresses it takes: where the
    /// kernel's CM has a listener for the service ID.
    fn listens_on_device(&self, service: IpServiceId, dst: IpAddr) -> bool {
        let device = self.device_of(dst);
        self.port_listeners(service).any(|(_, r)| {
            r.ip.is_unspecified() || self.device_of(r.ip).is_some_and(|d| Some(d) == device)
        })
    }

    fn new_handle(&mut self) -> u32 {
        let handle = self.next_handle;
        self.next_handle = match self.next_handle + 1 {
            MC_HANDLES => ID_HANDLES,
            next => next,
        };
        handle
    }

    /// The device at `ip` can speak the CM no more (the embedder lost the
    /// daemon session that carries its MADs): every id on it gets
    /// RDMA_CM_EVENT_DEVICE_REMOVAL, as the kernel reports a device that
    /// went away, and sends nothing more. Without it a program waiting for
    /// its peer's DREQ, REP or RTU would wait for ever.
    pub fn device_removed(&mut self, ip: IpAddr) {
        let Some(device) = self.device_of(ip) else {
            return;
        };
        let gone: Vec<u32> = self
            .ids
            .values()
            .filter(|i| i.device == Some(device))
            .map(|i| i.handle)
            .collect();
        for handle in gone {
            if let Some(id) = self.ids.get_mut(&handle) {
                id.state = State::Closed;
                id.retransmit = None;
                id.timewait_until = None;
                id.resolving = None;
            }
            self.notify_id(handle, event::DEVICE_REMOVAL, 0, EventConn::default());
        }
    }

    /// Id `handle`, if nothing has been done with it but options (created,
    /// not bound, resolved, joined or connected), so that another rdma_cm
    /// could serve it instead: its uid, port space and QP type.
    pub fn fresh(&self, handle: u32) -> Option<(u64, u16, u8)> {
        let id = self.ids.get(&handle)?;
        let fresh = id.state == State::Idle
            && id.src.is_none()
            && id.dst.is_none()
            && id.reserved.is_none()
            && !id.conn.started
            && !self.joins.values().any(|j| j.id == handle)
            && !self
                .channels
                .values()
                .flatten()
                .any(|q| q.counts_for == handle);
        fresh.then_some((id.uid, id.ps, id.qp_type))
    }

    /// Id `handle`, if it listens on every address (bound to a wildcard,
    /// or to nothing before its LISTEN), so that another rdma_cm may
    /// listen for it too: its uid, port space, QP type and the wildcard
    /// address with its port.
    pub fn wildcard_listener(&self, handle: u32) -> Option<(u64, u16, u8, SocketAddr)> {
        let id = self.ids.get(&handle)?;
        let r = id.reserved.filter(|r| r.ip.is_unspecified())?;
        (id.state == State::Listening).then_some((
            id.uid,
            id.ps,
            id.qp_type,
            SocketAddr::new(r.ip, r.port),
        ))
    }

    /// Forgets a [`Agent::fresh`] id another rdma_cm now serves: nothing
    /// is sent and no event is lost (a fresh id has none).
    pub fn hand_over(&mut self, handle: u32) {
        if self.fresh(handle).is_some() {
            self.ids.remove(&handle);
        }
    }

    /// The id of the connection with the peer at `src` that a message
    /// names: `ours` is our comm ID (the message's remote comm ID),
    /// `theirs` the peer's (the message's local comm ID), 0 where we have
    /// not learnt it yet (a REP, a REJ or an MRA of our REQ, a SIDR_REP).
    /// Both must match, as the kernel's CM matches them (`cm_acquire_id`),
    /// and the sender's address too: our ID alone, which any REP of ours
    /// shows, must not let another host end or hijack a connection.
    fn conn_of(&self, src: IpAddr, ours: u32, theirs: u32) -> Option<u32> {
        self.ids
            .values()
            .find(|i| {
                let c = &i.conn;
                c.started
                    && c.local_comm_id == ours
                    && c.remote_comm_id == theirs
                    && c.peer_ip == Some(src)
            })
            .map(|i| i.handle)
    }

    /// The connection a REJ "timeout" ends: its sender gave up its REQ
    /// before learning our comm ID, so it names itself by its comm ID and,
    /// in the ARI, the CA GUID its REQ carried, which is how the kernel's
    /// CM finds it (`cm_acquire_rejected_id`); the sender's address must
    /// match too.
    fn abandoned_conn(&self, src: IpAddr, rej: &CmRej) -> Option<u32> {
        let guid = u64::from_be_bytes(rej.ari[..8].try_into().ok()?);
        self.ids
            .values()
            .find(|i| {
                let c = &i.conn;
                c.started
                    && c.peer_ip == Some(src)
                    && c.remote_comm_id == rej.local_comm_id
                    && c.peer_ca_guid == guid
                    && (rej.remote_comm_id == 0 || rej.remote_comm_id == c.local_comm_id)
            })
            .map(|i| i.handle)
    }

    /// As [`Agent::conn_of`], the connection in `state`.
    fn conn_in(&self, src: IpAddr, ours: u32, theirs: u32, state: State) -> Option<u32> {
        self.conn_of(src, ours, theirs)
            .filter(|h| self.ids.get(h).is_some_and(|i| i.state == state))
    }

    fn on_req(&mut self, now: Nanos, src: IpAddr, dst: IpAddr, tid: u64, req: &CmReq) {
        // A REQ sent again: answer again what was answered, once.
        if let Some(dup) = self
            .ids
            .values()
            .find(|i| i.conn.remote_comm_id == req.local_comm_id && i.conn.peer_ip == Some(src))
        {
            if let (State::RepSent, Some(r)) = (dup.state, &dup.retransmit) {
                let mad = r.mad;
                self.send(dst, src, mad);
            }
            return;
        }
        if let Some(old) = self.live_conn_to_qp(req.local_ca_guid, req.local_qpn.get()) {
            return self.refuse_stale(now, src, dst, tid, req, old);
        }
        let Ok((hdr, user)) = CmaHdr::split(&req.private_data) else {
            return self.refuse(src, dst, tid, req, REJ_CONSUMER);
        };
        let Some(service) = IpServiceId::from_u64(req.service_id) else {
            return;
        };
        let Some(listener) = self.listener_for(service, dst) else {
            // The daemon gave us a REQ we no longer listen for, or one a
            // listener of the port does not take (its address, or its
            // wildcard's family). As the kernel's: its CM rejects with
            // "invalid service ID" where nothing listens for the service
            // ID on the device, and where something does, rdma_cm finds
            // no listener taking the request (`cma_find_listener`) and
            // the CM rejects it as the consumer (`cm_destroy_id`).
            let reason = match self.listens_on_device(service, dst) {
                true => REJ_CONSUMER,
                false => rej_reason::INVALID_SERVICE_ID,
            };
            return self.refuse(src, dst, tid, req, reason);
        };
        if req.pkey & 0x7FFF != 0x7FFF {
            // A path in a partition the port is not in: the P_Key table's
            // one entry is the default 0xFFFF. The kernel's CM finds no
            // P_Key index for it (`cm_init_av_by_path`) and rejects with
            // "invalid GID" before any application hears of the REQ.
            return self.refuse(src, dst, tid, req, rej_reason::INVALID_GID);
        }
        let Some(device) = self.device_of(dst) else {
            return;
        };
        if !self.take_backlog(listener.handle) {
            return;
        }
        let handle = self.new_handle();
        let comm = self.alloc_comm_id(device);
        let seq = self.rng.u32(..) & 0xFF_FFFF;
        let mut id = requested_id(
            handle,
            &listener,
            device,
            SocketAddr::new(dst, service.port),
            hdr.src,
        );
        // The REQ's path traffic class is the passive side's too (the
        // kernel's `cm_format_paths_from_req`): its QP's GRH and route.
        id.tos = Some(req.primary.traffic_class);
        id.conn = Conn {
            local_comm_id: comm,
            remote_comm_id: req.local_comm_id,
            remote_qpn: req.local_qpn.get(),
            seq_num: seq,
            remote_psn: req.starting_psn.get(),
            // The peer's initiator depth is what we must answer.
            responder_resources: req.initiator_depth,
            initiator_depth: req.responder_resources,
            retry_count: req.retry_count,
            rnr_retry_count: req.rnr_retry_count,
            peer_response_timeout: req.local_cm_response_timeout,
            peer_max_cm_retries: req.max_cm_retries,
            path_mtu: req.path_mtu,
            tid,
            peer_ip: Some(src),
            peer_ca_guid: req.local_ca_guid,
            started: true,
            ..Conn::default()
        };
        self.ids.insert(handle, id);
        let ev = Event {
            uid: listener.uid,
            id: handle,
            event: event::CONNECT_REQUEST,
            status: 0,
            conn: EventConn {
                qp_num: req.local_qpn.get(),
                private_data: user.to_vec(),
                srq: req.srq,
                responder_resources: req.initiator_depth,
                initiator_depth: req.responder_resources,
                flow_control: req.end_to_end_flow_control,
                retry_count: req.retry_count,
                rnr_retry_count: req.rnr_retry_count,
            },
            ud: None,
        };
        self.queue(listener.channel, ev, listener.handle);
    }

    /// Our connection, not yet in timewait, whose peer is QP `qpn` of the
    /// CA `guid`: the kernel's CM keeps each such pair from the REQ (or
    /// the REP) until the connection enters timewait or is rejected
    /// (`cm_insert_remote_qpn`, `cm_remove_remote`).
    fn live_conn_to_qp(&self, guid: u64, qpn: u32) -> Option<u32> {
        self.ids
            .values()
            .find(|i| {
                let live = matches!(
                    i.state,
                    State::ReqRcvd
                        | State::RepSent
                        | State::RepRcvd
                        | State::Established
                        | State::DreqSent
                        | State::DreqRcvd
                );
                live && i.qp_type != UD
                    && i.conn.started
                    && i.conn.peer_ca_guid == guid
                    && i.conn.remote_qpn == qpn
            })
            .map(|i| i.handle)
    }

    /// A REQ from a QP a live connection `old` of ours already has as its
    /// peer: rejected as a stale connection (10), before any listener
    /// hears of it, and `old`, if established, is ended with a DREQ, as
    /// the kernel's `cm_match_req` does (a program that connects one QP
    /// twice learns it at once).
    fn refuse_stale(
        &mut self,
        now: Nanos,
        src: IpAddr,
        dst: IpAddr,
        tid: u64,
        req: &CmReq,
        old: u32,
    ) {
        self.refuse(src, dst, tid, req, rej_reason::STALE_CONN);
        let Some(old) = self.ids.get(&old).cloned() else {
            return;
        };
        if old.state == State::Established {
            let _ = self.start_disconnect(now, &old);
        }
    }

    /// A REP from a QP a live connection of ours already has as its peer:
    /// rejected as stale (10), as the kernel's `cm_rep_handler` does; our
    /// id stays in REQ_SENT, its REQ sent again until it gives up.
    fn refuse_stale_rep(&mut self, h: u32, rep: &CmRep) {
        let Some(id) = self.ids.get(&h).cloned() else {
            return;
        };
        let rej = CmRej {
            local_comm_id: id.conn.local_comm_id,
            remote_comm_id: rep.local_comm_id,
            message_rejected: MessageKind::Rep,
            reason: rej_reason::STALE_CONN,
            ..CmRej::default()
        };
        if let (Ok(mad), Ok((src, dst))) =
            (mad_of(&CmMessage::Rej(rej), id.conn.tid), endpoints(&id))
        {
            self.send(src, dst, mad);
        }
    }

    /// Answers a REQ with a REJ without an id (no listener, a bad header).
    fn refuse(&mut self, src: IpAddr, dst: IpAddr, tid: u64, req: &CmReq, reason: u16) {
        let rej = CmRej {
            remote_comm_id: req.local_comm_id,
            message_rejected: MessageKind::Req,
            reason,
            ..CmRej::default()
        };
        if let Ok(mad) = mad_of(&CmMessage::Rej(rej), tid) {
            self.send(dst, src, mad);
        }
    }

    fn on_rep(&mut self, src: IpAddr, rep: &CmRep) {
        // The first REP finds our REQ's id; one sent again, the id it
        // made known.
        let ours = rep.remote_comm_id;
        let found = self
            .conn_of(src, ours, 0)
            .or_else(|| self.conn_of(src, ours, rep.local_comm_id));
        let Some(h) = found else {
            // No id of ours has that comm ID with that peer: a REP sent
            // again after our id went (its REJ went first), stray, or
            // forged. The kernel's CM drops it, with no answer
            // (`cm_rep_handler` finds no id, `cm_dup_rep_handler` none by
            // both IDs); a REJ for a comm ID that a live connection has
            // with another peer would tell the daemon that it ended.
            return;
        };
        let Some(id) = self.ids.get_mut(&h) else {
            return;
        };
        match id.state {
            State::ReqSent => {}
            // Our RTU was lost: the peer sent its REP again.
            State::Established => {
                let id = id.clone();
                let rtu = CmRtu {
                    local_comm_id: id.conn.local_comm_id,
                    remote_comm_id: id.conn.remote_comm_id,
                    ..CmRtu::default()
                };
                let _ = self.send_to_peer(&id, &CmMessage::Rtu(rtu));
                return;
            }
            _ => return,
        }
        if self
            .live_conn_to_qp(rep.local_ca_guid, rep.local_qpn.get())
            .is_some()
        {
            return self.refuse_stale_rep(h, rep);
        }
        let Some(id) = self.ids.get_mut(&h) else {
            return;
        };
        id.retransmit = None;
        id.state = State::RepRcvd;
        id.conn.remote_comm_id = rep.local_comm_id;
        id.conn.peer_ca_guid = rep.local_ca_guid;
        id.conn.remote_qpn = rep.local_qpn.get();
        id.conn.remote_psn = rep.starting_psn.get();
        id.conn.initiator_depth = id.conn.initiator_depth.min(rep.responder_resources);
        id.conn.rnr_retry_count = rep.rnr_retry_count;
        let conn = EventConn {
            qp_num: rep.local_qpn.get(),
            private_data: rep.private_data.to_vec(),
            srq: rep.srq,
            responder_resources: rep.initiator_depth,
            initiator_depth: rep.responder_resources,
            flow_control: rep.end_to_end_flow_control,
            retry_count: 0,
            rnr_retry_count: rep.rnr_retry_count,
        };
        self.notify_id(h, event::CONNECT_RESPONSE, 0, conn);
    }

    fn on_rej(&mut self, src: IpAddr, rej: &CmRej) {
        let found = if rej.reason == REJ_TIMEOUT {
            self.abandoned_conn(src, rej)
        } else {
            let theirs = match rej.message_rejected {
                MessageKind::Req => 0,
                _ => rej.local_comm_id,
            };
            self.conn_of(src, rej.remote_comm_id, theirs)
        };
        let Some(h) = found else {
            return;
        };
        let Some(id) = self.ids.get_mut(&h) else {
            return;
        };
        // As the kernel's `cm_rej_handler`: a request not yet accepted
        // ends too (its event is dropped, the application has not adopted
        // the id yet, and ACCEPT fails, as with ucma), and so does an
        // established connection (REJECTED, where the peer took the REP
        // as rejected after this side's RTU went out).
        let ends = matches!(
            id.state,
            State::ReqSent
                | State::ReqRcvd
                | State::RepSent
                | State::RepRcvd
                | State::Established
                | State::DreqSent
        );
        if !ends {
            return;
        }
        id.state = State::Closed;
        id.retransmit = None;
        let conn = EventConn {
            private_data: rej.private_data.to_vec(),
            ..EventConn::default()
        };
        self.notify_id(h, event::REJECTED, i32::from(rej.reason), conn);
    }

    fn on_dreq(&mut self, now: Nanos, src: IpAddr, dst: IpAddr, tid: u64, dreq: &CmDreq) {
        let Some(h) = self.conn_of(src, dreq.remote_comm_id, dreq.local_comm_id) else {
            // The connection is gone here (its id destroyed): answer as
            // the kernel's CM does (`cm_issue_drep`), so the peer's
            // disconnection ends now instead of after its retries.
            let drep = CmDrep {
                local_comm_id: dreq.remote_comm_id,
                remote_comm_id: dreq.local_comm_id,
                ..CmDrep::default()
            };
            if let Ok(mad) = mad_of(&CmMessage::Drep(drep), tid) {
                self.send(dst, src, mad);
            }
            return;
        };
        let Some(id) = self.ids.get(&h).cloned() else {
            return;
        };
        match id.state {
            State::Established | State::RepSent | State::RepRcvd => {
                let id = self.ids.get_mut(&h).expect("found above");
                id.state = State::DreqRcvd;
                id.retransmit = None;
                self.notify_id(h, event::DISCONNECTED, 0, EventConn::default());
            }
            // Both ends disconnected at once: answer, and take the peer's
            // DREQ for the answer to ours, as the kernel's CM stops
            // resending its own DREQ then (`cm_dreq_handler`): the peer
            // may be gone before it answers (a process that exits as it
            // disconnects), and the disconnection ends now.
            State::DreqSent => {
                self.send_drep(&id);
                self.notify_id(h, event::DISCONNECTED, 0, EventConn::default());
                self.enter_timewait(h, now);
            }
            // Our DREP was lost: send it again.
            State::TimeWait => self.send_drep(&id),
            _ => {}
        }
    }

    fn established(&mut self, handle: u32) {
        if let Some(id) = self.ids.get_mut(&handle) {
            id.state = State::Established;
            id.retransmit = None;
        }
        self.notify_id(handle, event::ESTABLISHED, 0, EventConn::default());
    }

    fn enter_timewait(&mut self, handle: u32, now: Nanos) {
        if let Some(id) = self.ids.get_mut(&handle) {
            id.state = State::TimeWait;
            id.retransmit = None;
            id.timewait_until = Some(now + iba_time(ACK_TIMEOUT));
        }
    }

    fn timewait_due(&mut self, handle: u32, now: Nanos) {
        let due = self
            .ids
            .get(&handle)
            .and_then(|i| i.timewait_until)
            .is_some_and(|t| t <= now);
        if due {
            if let Some(id) = self.ids.get_mut(&handle) {
                id.timewait_until = None;
                id.state = State::Closed;
            }
            self.notify_id(handle, event::TIMEWAIT_EXIT, 0, EventConn::default());
        }
    }

    fn retransmit_due(&mut self, handle: u32, now: Nanos) {
        let Some(id) = self.ids.get_mut(&handle) else {
            return;
        };
        let Some(r) = id.retransmit.as_mut() else {
            return;
        };
        if r.at > now {
            return;
        }
        if r.left > 0 {
            r.left -= 1;
            r.at = now + r.every;
            let mad = r.mad;
            if let Ok((src, dst)) = endpoints(id) {
                self.send(src, dst, mad);
            }
            return;
        }
        // Unanswered after every retry.
        id.retransmit = None;
        let state = id.state;
        match state {
            State::DreqSent => {
                self.notify_id(
                    handle,
                    event::DISCONNECTED,
                    -ETIMEDOUT,
                    EventConn::default(),
                );
                self.enter_timewait(handle, now);
            }
            _ => {
                if let Some(id) = self.ids.get_mut(&handle) {
                    id.state = State::Closed;
                }
                self.notify_id(handle, event::UNREACHABLE, -ETIMEDOUT, EventConn::default());
            }
        }
    }

    /// Resends `mad` every `every` until answered, `retries` times.
    fn arm(&mut self, handle: u32, mad: [u8; 256], now: Nanos, every: Nanos, retries: u8) {
        if let Some(id) = self.ids.get_mut(&handle) {
            id.retransmit = Some(Retransmit {
                mad,
                at: now + every,
                every,
                left: u32::from(retries),
            });
        }
    }

    fn send(&mut self, src: IpAddr, dst: IpAddr, mad: [u8; 256]) {
        self.out.push_back(OutMad { src, dst, mad });
    }

    fn send_to_peer(&mut self, id: &CmId, msg: &CmMessage) -> Result<(), i32> {
        let mad = mad_of(msg, id.conn.tid)?;
        let (src, dst) = endpoints(id)?;
        self.send(src, dst, mad);
        Ok(())
    }

    fn dreq_mad(&self, id: &CmId) -> Result<[u8; 256], i32> {
        let dreq = CmDreq {
            local_comm_id: id.conn.local_comm_id,
            remote_comm_id: id.conn.remote_comm_id,
            remote_qpn: Qpn::new_masked(id.conn.remote_qpn),
            ..CmDreq::default()
        };
        mad_of(&CmMessage::Dreq(dreq), id.conn.tid)
    }

    /// Sends `id`'s DREQ, and again until answered: the id is then in
    /// DREQ_SENT.
    fn start_disconnect(&mut self, now: Nanos, id: &CmId) -> Result<(), i32> {
        let mad = self.dreq_mad(id)?;
        let (src, dst) = endpoints(id)?;
        self.send(src, dst, mad);
        self.id_mut(id.handle)?.state = State::DreqSent;
        let every = 2 * iba_time(PACKET_LIFE_TIME);
        self.arm(id.handle, mad, now, every, MAX_CM_RETRIES);
        Ok(())
    }

    fn send_dreq(&mut self, id: &CmId) {
        if let (Ok(mad), Ok((src, dst))) = (self.dreq_mad(id), endpoints(id)) {
            self.send(src, dst, mad);
        }
    }

    fn send_drep(&mut self, id: &CmId) {
        let drep = CmDrep {
            local_comm_id: id.conn.local_comm_id,
            remote_comm_id: id.conn.remote_comm_id,
            ..CmDrep::default()
        };
        let _ = self.send_to_peer(id, &CmMessage::Drep(drep));
    }

    /// Sends a REJ of `id`'s connection, which names the message it
    /// rejects and the comm IDs as the kernel's `cm_format_rej` does from
    /// the id's state: a REQ not yet answered is rejected without our ID.
    fn send_rej(&mut self, id: &CmId, reason: u16, ari: &[u8], data: &[u8]) {
        let (message_rejected, local_comm_id) = match id.state {
            State::ReqRcvd => (MessageKind::Req, 0),
            State::RepRcvd => (MessageKind::Rep, id.conn.local_comm_id),
            _ => (MessageKind::Other, id.conn.local_comm_id),
        };
        let mut private_data = [0u8; softverbs_wire::cm::REJ_PRIVATE_DATA_LEN];
        let n = data.len().min(private_data.len());
        private_data[..n].copy_from_slice(&data[..n]);
        let mut rej = CmRej {
            local_comm_id,
            remote_comm_id: id.conn.remote_comm_id,
            message_rejected,
            reason,
            private_data,
            ..CmRej::default()
        };
        let n = ari.len().min(rej.ari.len());
        rej.ari[..n].copy_from_slice(&ari[..n]);
        rej.reject_info_len = n as u8;
        let _ = self.send_to_peer(id, &CmMessage::Rej(rej));
    }
}

/// The kernel's `net.rdma_ucm.max_backlog` default: the backlog of a
/// listener that asks for none, or for more.
const MAX_BACKLOG: u32 = 1024;

/// `rdma_listen`'s backlog as ucma takes it: a value that is not positive
/// (librdmacm passes an `int`) or above the maximum is the maximum.
fn listen_backlog(asked: u32) -> u32 {
    match asked as i32 {
        n if n <= 0 => MAX_BACKLOG,
        n => (n as u32).min(MAX_BACKLOG),
    }
}

/// The id a connection request (REQ or SIDR_REQ) to `listener` makes,
/// bound to device `device` at `local`, from `peer`. It does not hold the
/// listener's port: destroying the listener releases the port while this
/// connection lives, as in the kernel (a server may bind it again at
/// once).
fn requested_id(
    handle: u32,
    listener: &CmId,
    device: usize,
    local: SocketAddr,
    peer: SocketAddr,
) -> CmId {
    let mut id = CmId::new(handle, 0, listener.channel, listener.ps, listener.qp_type);
    id.state = State::ReqRcvd;
    id.device = Some(device);
    id.src = Some(local);
    id.dst = Some(peer);
    id.addr_resolved = true;
    id.route_resolved = true;
    id
}

/// The id's own and its peer's addresses.
fn endpoints(id: &CmId) -> Result<(IpAddr, IpAddr), i32> {
    let src = id.src.map(|s| s.ip()).ok_or(EINVAL)?;
    let dst = id.conn.peer_ip.ok_or(EINVAL)?;
    Ok((src, dst))
}

/// The primary path of a REQ between two addresses, as the kernel fills
/// it on RoCE: permissive LIDs, the addresses' GIDs, the GRH's hop limit,
/// the ACK timeout from the packet lifetime.
fn path(src: IpAddr, dst: IpAddr) -> CmPath {
    CmPath {
        local_lid: 0xFFFF,
        remote_lid: 0xFFFF,
        local_gid: Ipv6Addr::from(abi::gid_of(src)),
        remote_gid: Ipv6Addr::from(abi::gid_of(dst)),
        hop_limit: HOP_LIMIT,
        local_ack_timeout: ACK_TIMEOUT,
        ..CmPath::default()
    }
}

fn mad_of(msg: &CmMessage, tid: u64) -> Result<[u8; 256], i32> {
    let mut mad = [0u8; 256];
    msg.emit_mad(tid, 0, &mut mad).map_err(|_| EINVAL)?;
    Ok(mad)
}

/// An IPv4-mapped IPv6 address as the IPv4 address it maps, which the
/// device, the port space, the datagrams and the rdma_cm header (one IP
/// version for both ends) use: rping's ids were handed mapped addresses
/// where the namespace had a global IPv6 address, and its client's REQ
/// found no listener.
fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// Where a resolve that finds no device or route leaves an unbound id:
/// the source given, else the wildcard of the destination's family with
/// the source's port (as the kernel restores the id's wildcard).
fn unresolved_source(src: Option<SocketAddr>, dst: SocketAddr) -> SocketAddr {
    src.filter(|s| !s.ip().is_unspecified()).unwrap_or_else(|| {
        let any = match dst {
            SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        SocketAddr::new(any, src.map_or(0, |s| s.port()))
    })
}

/// Two addresses are one: IPv4 and its IPv4-mapped IPv6 form alike.
pub(crate) fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    abi::gid_of(a) == abi::gid_of(b)
}

/// The handle a command names (an id; for LEAVE_MCAST a join), where
/// the kernel's command structs place it ([`abi::id_offset`]); `None`
/// for commands that name none of the writer's own (CREATE_ID,
/// GET_EVENT, MIGRATE_ID; GET_OPTION, ENOSYS before any id is looked
/// at) and for a command too short to hold it (its handler refuses it).
fn named_handle(c: &Command<'_>) -> Option<u32> {
    if matches!(c.cmd, cmd::MIGRATE_ID | cmd::GET_OPTION) {
        return None;
    }
    c.u32(abi::id_offset(c.cmd)?).ok()
}

/// The start both JOINs share (`response` and `uid` at the same places),
/// after the kernel's first check: room for the join's handle (ENOSPC).
fn join_head(c: &Command<'_>) -> Result<(u64, u64), i32> {
    room_for(c, 4)?;
    Ok((c.u64(8)?, c.u64(16)?))
}

/// The INIT attributes of `id`'s QP: its port and P_Key index, and the
/// Q_Key of a UD id or the access a connection grants (none before it).
fn init_attributes(a: &mut QpAttr, id: &CmId) {
    a.mask = qp_mask::STATE | qp_mask::PKEY_INDEX | qp_mask::PORT;
    if id.qp_type == UD {
        a.mask |= qp_mask::QKEY;
        a.qkey = UDP_QKEY;
    } else {
        a.mask |= qp_mask::ACCESS_FLAGS;
        if id.conn.started {
            a.access_flags = REMOTE_WRITE;
            if id.conn.responder_resources > 0 {
                a.access_flags |= REMOTE_READ | REMOTE_ATOMIC;
            }
        }
    }
}

/// The RTR attributes of a connected `id`'s QP (RC or UC).
fn rtr_attributes(a: &mut QpAttr, id: &CmId, d: &Device) -> Result<(), i32> {
    let conn = &id.conn;
    let peer = conn.peer_ip.ok_or(EINVAL)?;
    a.mask = qp_mask::STATE | qp_mask::AV | qp_mask::PATH_MTU | qp_mask::DEST_QPN | qp_mask::RQ_PSN;
    if id.qp_type == RC {
        // UC has no responder resources and no RNR NAKs.
        a.mask |= qp_mask::MAX_DEST_RD_ATOMIC | qp_mask::MIN_RNR_TIMER;
    }
    a.dgid = abi::gid_of(peer);
    a.sgid_index = SGID_INDEX;
    a.hop_limit = HOP_LIMIT;
    a.traffic_class = id.tos.unwrap_or(0);
    a.is_global = true;
    a.path_mtu = u32::from(query::path_mtu(id, d));
    a.dest_qp_num = conn.remote_qpn;
    a.rq_psn = conn.seq_num;
    a.max_dest_rd_atomic = conn.responder_resources;
    Ok(())
}

/// The RTS attributes of a connected `id`'s QP (RC or UC).
fn rts_attributes(a: &mut QpAttr, id: &CmId) {
    let conn = &id.conn;
    a.mask = qp_mask::STATE | qp_mask::SQ_PSN;
    if id.qp_type == RC {
        // UC neither retransmits nor reads.
        a.mask |=
            qp_mask::TIMEOUT | qp_mask::RETRY_CNT | qp_mask::RNR_RETRY | qp_mask::MAX_QP_RD_ATOMIC;
    }
    a.sq_psn = conn.remote_psn;
    a.timeout = id.ack_timeout.unwrap_or(ACK_TIMEOUT);
    a.retry_cnt = conn.retry_count;
    a.rnr_retry = conn.rnr_retry_count;
    a.max_rd_atomic = conn.initiator_depth;
}

/// The kernel's first check of a command with a response: its `out`
/// length holds at least `len` bytes, else ENOSPC before anything is
/// done (ucma's `out_len < sizeof(resp)`); nothing is ever written past
/// `out`.
fn room_for(c: &Command<'_>, len: usize) -> Result<(), i32> {
    if usize::from(c.out) < len {
        return Err(ENOSPC);
    }
    Ok(())
}

/// The port space an AF_IB service ID names for an id of port space
/// `id_ps` (`cma_select_ib_ps`): the masked service ID must be one of
/// the IP port spaces the id may use. `None`: EPROTONOSUPPORT.
fn ib_port_space(id_ps: u16, sid: u64, mask: u64) -> Option<u16> {
    let mask = mask & SID_PS_MASK;
    let named = |ps: u16| sid & mask == (u64::from(ps) << 16) & mask;
    match id_ps {
        PS_IB if named(PS_IB) => Some(PS_IB),
        PS_IB | PS_TCP if named(PS_TCP) => Some(PS_TCP),
        PS_IB | PS_UDP if named(PS_UDP) => Some(PS_UDP),
        _ => None,
    }
}
