//! `softverbs daemon`: the host's owner of UDP 4791.
//!
//! Standard RoCEv2 sends every packet to UDP port 4791, and only one
//! socket can own that port on an address, yet several processes on one
//! host open the same device. The daemon owns the port, hands each
//! context blocks of 4,096 QP numbers, and passes every packet that
//! arrives to the context that owns its destination QP (one table lookup
//! on the QPN's upper 12 bits). Contexts send directly from their own
//! sockets; only arriving packets take the extra hop. A context's death
//! is its control socket's close: its blocks are free at once, and no
//! other context notices (docs/architecture.md, "The host daemon").
//!
//! For the same-host path it also keeps each context's published region
//! (a memfd and a doorbell eventfd) and hands them to the contexts of the
//! same user that look up one of its QP numbers.
//!
//! For rdma_cm it is the host's port space (which context holds which
//! port of which port space on which address, and which of those listen)
//! and the router of QP1: the CM's MADs all arrive at QP1, in block 0,
//! which no context holds. A REQ or SIDR_REQ goes to the context listening
//! on its service's port at the packet's destination address (or on the
//! unspecified address), and is answered by the daemon, as the kernel's CM
//! answers it, when nobody listens (after a short wait for a listener,
//! waiting_requests.rs); every other CM message goes to the holder of the
//! block its recipient's comm ID names (crate::gsi).
//!
//! One thread, one poll loop; it exits when it has had no client for the
//! configured idle time.

use super::address_claim::AddressClaim;
use super::cm_connections::{CmConnections, CmPeer, Farewell, Stage};
use super::cm_requests::{CmRequests, RoutedRequest, SentRequest};
use super::protocol::{udp_port, Ending, FrameHeader, Reply, Request};
use super::record;
use super::steering;
use super::waiting_requests::{WaitingRequest, WaitingRequests};
use crate::capture::Capture;
use crate::endpoint::{bind_udp, bind_udp_shared, cmsg_buffer, recv_segments, Datagrams};
use crate::gsi::{self, GsiRoute};
use crate::slots::{slot_of, MAX_SLOT};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use rustix::net::{
    accept_with, bind, listen, send, socket_with, sockopt, AddressFamily, SendFlags,
    SocketAddrUnix, SocketFlags, SocketType,
};
use softverbs_wire::u24::Qpn;
use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// How much a slow client may have waiting in the daemon before newer
/// packets for it are dropped (RoCE's retransmission recovers them).
const MAX_QUEUED: usize = 16 << 20;

/// How much all clients together may have waiting beyond
/// [`QUEUED_ANYWAY`] each: without it, sessions that never read (one
/// unprivileged user may open a thousand) held 16 MiB each.
const MAX_QUEUED_TOTAL: usize = 256 << 20;

/// What a client may have waiting whatever the others hold, so that
/// sessions that never read cannot starve one that reads.
const QUEUED_ANYWAY: usize = 256 << 10;

/// Consecutive failed receives after which a socket is left until its
/// next readiness.
const MAX_RECV_ERRORS: u32 = 64;

const LISTENER: Token = Token(0);
/// Client `n`'s control socket is `Token(n)`, its data socket
/// `Token(DATA + n)`; UDP socket `i` is `Token(UDP + i)`.
const DATA: usize = 1 << 24;
const UDP: usize = 2 << 24;
/// Free member `m` of UDP socket `i`'s group is `Token(MEMBER + i * MEMBERS + m)`.
const MEMBER: usize = 3 << 24;
const MEMBERS: usize = 1 << 16;

/// How the daemon is reached and when it leaves.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// The abstract Unix socket name it listens on.
    pub socket: String,
    /// Exit after this long without any client.
    pub idle_exit: Duration,
}

/// What the daemon counted, for `softverbs daemon` logs and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DaemonStats {
    /// Packets passed on to a context.
    pub delivered: u64,
    /// Packets for a QP number no context holds (or too short to name one).
    pub unrouted: u64,
    /// Packets dropped because their context had too much waiting.
    pub overflowed: u64,
    /// REQs and SIDR_REQs nobody listened for, answered by the daemon
    /// (REJ "invalid service ID", SIDR_REP "service ID not supported").
    pub gsi_answered: u64,
    /// REQs and SIDR_REQs that came before their listener and reached it
    /// when it came (`waiting_requests.rs`).
    pub gsi_waited: u64,
    /// CM messages to QP1 for a comm ID whose block no context holds.
    pub gsi_unrouted: u64,
    /// Other packets to QP1 dropped: a bad ICRC, not a UD SEND_ONLY with
    /// QP1's keys, not a CM MAD the kernel would take, a CM attribute
    /// nobody handles, an answer that could not be sent.
    pub gsi_dropped: u64,
}

/// The first and last ephemeral port, as Linux's default
/// `ip_local_port_range`, from which the kernel's rdma_cm picks a port for
/// a bind to port 0.
const EPHEMERAL_PORTS: (u16, u16) = (32768, 60999);

/// A client's hold on a port of an rdma_cm port space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reservation {
    /// The address, or the unspecified address for every address.
    ip: IpAddr,
    client: usize,
    /// Whether the CM's requests for the port reach the client.
    listening: bool,
    /// Address-family only (`Request::Reserve`): shares the port with a
    /// reservation of the other family that is too, and, listening on a
    /// wildcard, takes requests of its own family alone.
    afonly: bool,
}

impl Reservation {
    /// Whether a request for an address of the given family is for this
    /// wildcard, as the kernel's `cma_match_private_data`: one of its
    /// family, or any unless address-family only.
    fn takes_family(&self, ipv4: bool) -> bool {
        self.ip.is_ipv4() == ipv4 || !self.afonly
    }
}

/// Where the packets of a run go: a context (or nobody, counted as
/// unrouted), or nowhere more, the daemon having dealt with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    Client(Option<usize>),
    Handled,
}

/// A context connected to the daemon.
#[derive(Debug)]
struct Client {
    control: OwnedFd,
    data: Option<OwnedFd>,
    /// Its device address (from its hello): where it joins groups.
    ip: Option<IpAddr>,
    /// Frames not yet taken by the data socket.
    queued: Vec<u8>,
    /// Whether the data socket is registered for writability.
    waiting_writable: bool,
    /// Its process and user (SO_PEERCRED when it connected); `None` if
    /// the kernel would not say, and then nobody sees its region, nor it
    /// anyone's.
    cred: Option<Cred>,
    /// Its same-host region, once published.
    published: Option<Published>,
    /// rdma_cm port reservations it holds ([`MAX_RESERVATIONS`]).
    reservations: usize,
}

/// The part of the blocks of QP numbers, and of the daemon's descriptors,
/// the contexts of one user other than the daemon's may hold at once: 1 in
/// 4.
const GUEST_SHARE: usize = 4;
/// Descriptors the daemon holds for one client at most: its connection,
/// its data stream, its region, its doorbell and UDP 4791 on an address
/// no other context has.
const FDS_PER_CLIENT: u64 = 5;

/// rdma_cm port reservations one client may hold: every port of four
/// port spaces. Without a limit one connection's reservations (on made-up
/// addresses) grew the daemon without end.
const MAX_RESERVATIONS: usize = 4 << 16;

/// Ports of the rdma_cm port spaces that only a process with
/// CAP_NET_BIND_SERVICE may take, as for sockets (`PROT_SOCK`).
const PRIVILEGED_PORTS_END: u16 = 1024;
/// The capability's number (linux/capability.h).
const CAP_NET_BIND_SERVICE: u32 = 10;

/// Whether a process whose `/proc/PID/status` reads `status` holds
/// capability `cap` in its effective set.
fn has_capability(status: &str, cap: u32) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|set| cap < 64 && set & (1 << cap) != 0)
}

/// The most multicast groups the daemon keeps a socket open for at once:
/// the device's `max_mcast_grp` (rxe's too), and no more than a quarter
/// of the daemon's descriptors, the rest kept for contexts.
fn max_groups() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let quarter = usize::try_from(limit / 4).unwrap_or(usize::MAX);
    let device = softverbs_engine::DeviceLimits::default().max_mcast_grp;
    quarter.min(usize::try_from(device).unwrap_or(usize::MAX))
}

/// Whether process `pid` may still hold a descriptor of `socket` (see
/// [`sockets_held`]). A process that is gone holds none; one that cannot
/// be told about may.
fn still_held(pid: i32, socket: &std::net::UdpSocket) -> bool {
    match (sockets_held(pid), socket_inode(socket)) {
        (Some(held), Some(inode)) => held.contains(&inode),
        _ => true,
    }
}

/// The inodes of the sockets process `pid` holds descriptors of (none
/// for a process that is gone); `None` where that cannot be told: its
/// descriptors cannot be read, or one of its threads is ending.
///
/// Each thread's view of the descriptors is read, not the process's:
/// `/proc/PID/fd` shows none once the main thread has ended
/// (`pthread_exit`) while others live on with them. And an ending thread
/// shows none from the moment its table is detached, while the sockets
/// it held are released only later in its exit (a descriptor at a time,
/// the process preemptible between them): a steering group the daemon
/// closed in between would live on with that process's member alone, and
/// a context opening on that address meanwhile would share the port with
/// it ([`Daemon::open`] finds the port taken and steers nothing) and lose
/// packets to it until the process is gone.
fn sockets_held(pid: i32) -> Option<HashSet<u64>> {
    use procfs::process::{FDTarget, Process, StatFlags};
    use procfs::ProcError;
    let tasks = match Process::new(pid).and_then(|p| p.tasks()) {
        Ok(tasks) => tasks,
        Err(ProcError::NotFound(_)) => return Some(HashSet::new()),
        Err(_) => return None,
    };
    let mut held = HashSet::new();
    for task in tasks {
        // A thread gone since the listing held nothing when it went.
        let stat = match task.and_then(|t| t.stat()) {
            Ok(stat) => stat,
            Err(ProcError::NotFound(_)) => continue,
            Err(_) => return None,
        };
        // A zombie has released everything (its exit ran to the end).
        if matches!(stat.state, 'Z' | 'X' | 'x') {
            continue;
        }
        if stat.flags & StatFlags::PF_EXITING.bits() != 0 {
            return None;
        }
        let root = format!("/proc/{pid}/task/{}", stat.pid).into();
        let fds = match Process::new_with_root(root).and_then(|t| t.fd()) {
            Ok(fds) => fds,
            Err(ProcError::NotFound(_)) => continue,
            Err(_) => return None,
        };
        held.extend(fds.flatten().filter_map(|fd| match fd.target {
            FDTarget::Socket(inode) => Some(inode),
            _ => None,
        }));
    }
    Some(held)
}

fn socket_inode(socket: &std::net::UdpSocket) -> Option<u64> {
    rustix::fs::fstat(socket).ok().map(|s| s.st_ino)
}

/// Frees the retired members whose process no longer holds them (it
/// closed them, or ended): one look at each such process's descriptors.
/// Without it every context whose process forked with its device open,
/// or kept its member after closing the device, cost the daemon one
/// descriptor until it ended.
fn release_retired(members: &mut [Member]) {
    // Pid 0: a holder nobody could name, kept for good.
    let mut holders: Vec<i32> = members
        .iter()
        .filter_map(|m| m.retired)
        .filter(|&pid| pid > 0)
        .collect();
    holders.sort_unstable();
    holders.dedup();
    for pid in holders {
        let Some(held) = sockets_held(pid) else {
            continue;
        };
        for m in members.iter_mut().filter(|m| m.retired == Some(pid)) {
            if socket_inode(&m.socket).is_some_and(|inode| !held.contains(&inode)) {
                m.retired = None;
            }
        }
    }
}

/// Whether `ip` is the unspecified address or one of this host's (in
/// the daemon's network namespace), as binding a UDP socket to it tells.
/// An IPv6 link-local address cannot be bound without its interface,
/// which the request does not carry: taken as local.
fn is_local(ip: IpAddr) -> bool {
    let link_local = matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xFFC0 == 0xFE80);
    ip.is_unspecified() || link_local || std::net::UdpSocket::bind((ip, 0)).is_ok()
}

/// Whether a context may name `ip` as its device's address: a unicast
/// address. The daemon binds UDP 4791 there for good; the unspecified
/// address would take every packet of the namespace's later contexts, and
/// a multicast or broadcast address is no device's.
fn is_device_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => !(v4.is_unspecified() || v4.is_multicast() || v4.is_broadcast()),
        IpAddr::V6(v6) => !(v6.is_unspecified() || v6.is_multicast()),
    }
}

/// Who a client is: its process, as the kernel told when it connected,
/// and its user, as the kernel told with its last record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cred {
    pid: i32,
    uid: u32,
}

impl Client {
    /// The client's last record came from user `uid` (`None`: the kernel
    /// did not say). A process that connected as one user and then became
    /// another (a privileged program dropping its rights) is that other
    /// user from then on: it no longer sees the regions of the user it
    /// was, which `SO_PEERCRED`, fixed at connect, would still claim.
    fn sent_as(&mut self, uid: Option<u32>) {
        match (uid, self.cred.as_mut()) {
            (Some(uid), Some(cred)) => cred.uid = uid,
            (None, _) => self.cred = None,
            (Some(_), None) => {}
        }
    }
}

/// What a context published for the same-host path.
#[derive(Debug)]
struct Published {
    region: OwnedFd,
    doorbell: OwnedFd,
    bytes: u64,
}

/// Writes the gone word of a region whose context's connection closed
/// (`same_host::layout::GONE_OFFSET`): the context ended, by exit, kill,
/// exec or closing the device, and peers must stop reaching its pid,
/// which after an exec names another image. Written through the
/// descriptor (the daemon maps nothing), and only into what is a region:
/// a memfd sealed against shrinking, long enough. A client can only have
/// the daemon write to a file it gave it, as it could itself.
fn mark_gone(published: &Published) {
    use crate::same_host::layout::GONE_OFFSET;
    let fd = &published.region;
    let sealed = rustix::fs::fcntl_get_seals(fd)
        .is_ok_and(|seals| seals.contains(rustix::fs::SealFlags::SHRINK));
    let long_enough = rustix::fs::fstat(fd).is_ok_and(|st| st.st_size as u64 >= GONE_OFFSET + 8);
    if sealed && long_enough {
        let _ = rustix::io::pwrite(fd, &[0xFF; 8], GONE_OFFSET);
    }
}

/// A UDP socket on port 4791: on a device address (packets go to the
/// owner of their destination QP) or on a multicast group (datagrams go to
/// every context that joined through the daemon: those without a steered
/// socket, which read no group socket of their own, `group_socket.rs`).
#[derive(Debug)]
struct Receiver {
    local: IpAddr,
    socket: std::net::UdpSocket,
    /// For a group: the member contexts and the device addresses the
    /// group was joined on.
    group: Option<McastGroup>,
    /// For a device address: the members of the SO_REUSEPORT group that
    /// steers packets straight to their contexts' sockets (steering.rs),
    /// index `i + 1` in the group for `members[i]`; `None` where the kernel
    /// refused the steering program (everything goes through the data
    /// streams then).
    members: Option<Vec<Member>>,
    /// For a device address: this daemon's claim on it among softverbs
    /// daemons (`address_claim.rs`).
    _claim: Option<AddressClaim>,
}

/// A member of a steering group: the daemon's descriptor of it, and the
/// context it serves (none: free, and read by the daemon).
#[derive(Debug)]
struct Member {
    socket: std::net::UdpSocket,
    client: Option<usize>,
    /// The process of its last context, which still held it when the
    /// context left (a process that closed its device and lives on, or
    /// forked with it open): it may read what reaches the member, so the
    /// member serves no other context until that process lets go of it
    /// ([`release_retired`]); 0 where the client's process was unknown.
    retired: Option<i32>,
}

#[derive(Debug, Default)]
struct McastGroup {
    members: Vec<usize>,
    joined_on: Vec<IpAddr>,
}

/// The daemon: its sockets, clients and routing table.
#[derive(Debug)]
pub struct Daemon {
    config: DaemonConfig,
    poll: Poll,
    listener: OwnedFd,
    clients: HashMap<usize, Client>,
    next_client: usize,
    /// Block (QPN >> 12) -> client id.
    owners: Vec<Option<usize>>,
    next_block: u16,
    /// The UDP sockets on 4791 (slot `i` is `Token(UDP + i)`; a freed
    /// slot is reused).
    udp: Vec<Option<Receiver>>,
    buf: Vec<u8>,
    cmsg: Vec<u8>,
    stats: DaemonStats,
    /// Bytes waiting in all clients' queues.
    queued_total: usize,
    /// `softverbs daemon --pcap`: every packet received is written here.
    capture: Option<Capture>,
    /// The rdma_cm port space: (port space, port) -> who holds it where.
    ports: HashMap<(u16, u16), Vec<Reservation>>,
    /// The rdma_cm connections of this host's clients, learnt from the CM
    /// messages routed to them (`cm_connections.rs`).
    cm: CmConnections,
    /// Which client each REQ went to, for a REJ naming only its sender.
    cm_requests: CmRequests,
    /// The REQs and SIDR_REQs that wait for a listener.
    waiting: WaitingRequests,
    /// The user the daemon runs as: its clients of another user are its
    /// guests.
    uid: u32,
    /// The most multicast groups it keeps a socket open for at once
    /// ([`max_groups`]).
    max_groups: usize,
}

impl Daemon {
    /// Listens on the abstract socket; EADDRINUSE means a daemon already
    /// serves this network namespace.
    pub fn bind(config: DaemonConfig) -> io::Result<Daemon> {
        let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
        let listener = socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, flags, None)?;
        bind(
            &listener,
            &SocketAddrUnix::new_abstract_name(config.socket.as_bytes())?,
        )?;
        // Every record then says who sent it (accepted connections inherit
        // the option): access follows a client's user ID as it is now.
        sockopt::set_socket_passcred(&listener, true)?;
        listen(&listener, 128)?;
        let poll = Poll::new()?;
        poll.registry().register(
            &mut SourceFd(&listener.as_raw_fd()),
            LISTENER,
            Interest::READABLE,
        )?;
        Ok(Daemon {
            config,
            poll,
            listener,
            clients: HashMap::new(),
            next_client: 1,
            owners: vec![None; usize::from(MAX_SLOT) + 1],
            next_block: fastrand::u16(1..=MAX_SLOT),
            udp: Vec::new(),
            buf: vec![0; 1 << 16],
            cmsg: cmsg_buffer(),
            stats: DaemonStats::default(),
            queued_total: 0,
            capture: None,
            ports: HashMap::new(),
            cm: CmConnections::default(),
            cm_requests: CmRequests::default(),
            waiting: WaitingRequests::default(),
            uid: rustix::process::geteuid().as_raw(),
            max_groups: max_groups(),
        })
    }

    /// Serves until it has had no client for `idle_exit`.
    pub fn run(&mut self) -> io::Result<DaemonStats> {
        let mut events = Events::with_capacity(256);
        let mut idle_since = Some(Instant::now());
        loop {
            let idle = idle_since.map(|t| self.config.idle_exit.saturating_sub(t.elapsed()));
            if idle == Some(Duration::ZERO) {
                for request in self.waiting.all() {
                    self.answer_unmatched(request.slot, &request.mad, request.src, request.dst);
                }
                // UDP 4791 is free before the listener closes (when the
                // daemon is dropped): a program that connects meanwhile is
                // refused, starts a new daemon, and that one can bind.
                self.udp.clear();
                return Ok(self.stats);
            }
            let wait_ends = self
                .waiting
                .next_end()
                .map(|t| t.saturating_duration_since(Instant::now()));
            let timeout = match (idle, wait_ends) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            match self.poll.poll(&mut events, timeout) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => r?,
            }
            for ev in events.iter() {
                self.dispatch(ev.token());
            }
            for request in self.waiting.expired(Instant::now()) {
                self.answer_unmatched(request.slot, &request.mad, request.src, request.dst);
            }
            idle_since = match (self.clients.is_empty(), idle_since) {
                (true, None) => Some(Instant::now()),
                (true, since) => since,
                (false, _) => None,
            };
        }
    }

    fn dispatch(&mut self, token: Token) {
        match token.0 {
            0 => self.accept_all(),
            t if t >= MEMBER => {
                let (i, m) = ((t - MEMBER) / MEMBERS, (t - MEMBER) % MEMBERS);
                self.receive_all(i, Some(m));
            }
            t if t >= UDP => self.receive_all(t - UDP, None),
            t if t >= DATA => self.flush(t - DATA),
            id => self.serve_control(id),
        }
    }

    fn accept_all(&mut self) {
        let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
        while let Ok(control) = accept_with(&self.listener, flags) {
            let id = self.new_client_id();
            let registered = self.poll.registry().register(
                &mut SourceFd(&control.as_raw_fd()),
                Token(id),
                Interest::READABLE,
            );
            let cred = sockopt::socket_peercred(&control).ok().map(|c| Cred {
                pid: c.pid.as_raw_pid(),
                uid: c.uid.as_raw(),
            });
            if cred.is_some_and(|c| self.guest_sessions_full(c.uid)) {
                let _ = self
                    .poll
                    .registry()
                    .deregister(&mut SourceFd(&control.as_raw_fd()));
                continue; // closed: the client's hello fails, saying so
            }
            if registered.is_ok() {
                let client = Client {
                    control,
                    data: None,
                    ip: None,
                    queued: Vec::new(),
                    waiting_writable: false,
                    cred,
                    published: None,
                    reservations: 0,
                };
                self.clients.insert(id, client);
            }
        }
    }

    /// An id no client has, below the data-socket tokens.
    fn new_client_id(&mut self) -> usize {
        loop {
            let id = self.next_client;
            self.next_client = self.next_client % (DATA - 1) + 1;
            if !self.clients.contains_key(&id) {
                return id;
            }
        }
    }

    /// Reads the client's requests; its hang-up ends it.
    fn serve_control(&mut self, id: usize) {
        loop {
            let Some(client) = self.clients.get(&id) else {
                return;
            };
            let mut record = [0u8; 64];
            let (len, fds, fds_lost, truncated) =
                match record::recv_from_user(&client.control, &mut record) {
                    Ok(r) if r.len > 0 => {
                        self.clients
                            .get_mut(&id)
                            .expect("served")
                            .sent_as(r.sender_uid);
                        (r.len, r.fds, r.fds_lost, r.truncated)
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    _ => return self.remove(id), // hang-up or broken socket
                };
            let decoded = match truncated {
                // No request is this long: another build's, or garbage.
                true => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a record too long",
                )),
                false => Request::decode(&record[..len]),
            };
            let (reply, pass) = match decoded {
                // The request's descriptor did not reach us: EMFILE, not
                // the EPROTO of a request without one, which told the
                // user of another softverbs build.
                Ok(_) if fds_lost => {
                    let why = "out of descriptors: one passed with the request was dropped";
                    (Reply::Refused(libc::EMFILE, why.into()), Vec::new())
                }
                Ok(request) => self.answer(id, request, fds),
                Err(e) => (Reply::Refused(libc::EPROTO, e.to_string()), Vec::new()),
            };
            let control = &self.clients[&id].control;
            let pass: Vec<BorrowedFd<'_>> = pass.iter().map(AsFd::as_fd).collect();
            if record::send(control, &reply.encode(), &pass).is_err() {
                return self.remove(id);
            }
        }
    }

    /// The reply to `request` (which came with `fds`), and descriptors to
    /// pass with it (the context's steered socket with the reply to its
    /// hello, a peer's region and doorbell with a `Peer`).
    fn answer(&mut self, id: usize, request: Request, fds: Vec<OwnedFd>) -> (Reply, Vec<OwnedFd>) {
        match request {
            Request::Hello { ip } => {
                let (reply, direct) = self.hello(id, ip, fds.into_iter().next());
                (reply, direct.into_iter().collect())
            }
            Request::MoreQpns if self.clients.get(&id).is_none_or(|c| c.data.is_none()) => {
                let why = "more QP numbers before a hello".into();
                (Reply::Refused(libc::EPROTO, why), Vec::new())
            }
            Request::MoreQpns => {
                let reply = self.allocate(id);
                self.restear_for(id);
                (reply, Vec::new())
            }
            Request::Publish { region_bytes } => (self.publish(id, region_bytes, fds), Vec::new()),
            Request::Lookup { qpn } => self.lookup(id, qpn),
            Request::Reserve {
                ps,
                ip,
                port,
                afonly,
            } => (self.reserve(id, ps, ip, port, afonly), Vec::new()),
            Request::Listen { ps, ip, port } => (self.listen(id, ps, ip, port), Vec::new()),
            Request::Release { ps, ip, port } => (self.release(id, ps, ip, port), Vec::new()),
            Request::Requesting {
                peer,
                comm_id,
                ca_guid,
                tid,
            } => (self.requesting(id, peer, comm_id, ca_guid, tid), Vec::new()),
            Request::Replying {
                peer,
                comm_id,
                remote_comm_id,
            } => (self.replying(id, peer, comm_id, remote_comm_id), Vec::new()),
            Request::Disconnecting {
                peer,
                comm_id,
                remote_comm_id,
                message,
            } => {
                let ends = (peer, remote_comm_id, message);
                (self.disconnecting(id, comm_id, ends), Vec::new())
            }
            request => (self.answer_group(id, request), Vec::new()),
        }
    }

    /// Reserves (`ps`, `ip`, `port`) for client `id`, as the kernel's
    /// rdma_cm port space does for a bind without REUSEADDR
    /// (`cma_check_port`): refused with EADDRNOTAVAIL if anyone holds the
    /// port on the unspecified address, or this request is for it and
    /// anyone holds the port anywhere; with EADDRINUSE if anyone holds it
    /// on `ip`. Both IP families share one space, except that two
    /// `afonly` reservations of different families never conflict. Port 0
    /// takes a free ephemeral port, from a random start as the kernel's
    /// `cma_alloc_any_port`.
    fn reserve(&mut self, id: usize, ps: u16, ip: IpAddr, port: u16, afonly: bool) -> Reply {
        if softverbs_wire::cm::PortSpace::from_u16(ps).is_none() {
            return Reply::Refused(libc::EINVAL, format!("no port space {ps:#06x}"));
        }
        if !is_local(ip) {
            // The kernel's rdma_bind_addr: no device has the address.
            return Reply::Refused(libc::EADDRNOTAVAIL, format!("{ip} is no local address"));
        }
        let Some(client) = self.clients.get_mut(&id) else {
            return Reply::Refused(libc::EINVAL, "no such client".into());
        };
        if client.reservations >= MAX_RESERVATIONS {
            let why = format!("this context holds {MAX_RESERVATIONS} port reservations");
            return Reply::Refused(libc::ENOMEM, why);
        }
        if port != 0 && port < PRIVILEGED_PORTS_END && !self.may_bind_privileged(id) {
            let why = format!("port {port} is below {PRIVILEGED_PORTS_END}: CAP_NET_BIND_SERVICE");
            return Reply::Refused(libc::EACCES, why);
        }
        let port = if port == 0 {
            let (low, high) = EPHEMERAL_PORTS;
            let count = high - low + 1;
            let start = fastrand::u16(..count);
            let free = (0..count)
                .map(|k| low + (start + k) % count)
                .find(|p| !self.ports.contains_key(&(ps, *p)));
            match free {
                Some(p) => p,
                None => {
                    let why = format!("every ephemeral port of port space {ps:#06x} is in use");
                    return Reply::Refused(libc::EADDRNOTAVAIL, why);
                }
            }
        } else {
            port
        };
        let holders = self.ports.entry((ps, port)).or_default();
        for held in holders.iter() {
            let errno = if afonly && held.afonly && ip.is_ipv4() != held.ip.is_ipv4() {
                continue;
            } else if ip.is_unspecified() || held.ip.is_unspecified() {
                libc::EADDRNOTAVAIL
            } else if ip == held.ip {
                libc::EADDRINUSE
            } else {
                continue;
            };
            let why = format!("port {port} of port space {ps:#06x} is held on {}", held.ip);
            return Reply::Refused(errno, why);
        }
        holders.push(Reservation {
            ip,
            client: id,
            listening: false,
            afonly,
        });
        if let Some(client) = self.clients.get_mut(&id) {
            client.reservations += 1;
        }
        Reply::Port(port)
    }

    /// Client `id`'s reservation of exactly (`ps`, `ip`, `port`).
    fn reservation(
        &mut self,
        id: usize,
        ps: u16,
        ip: IpAddr,
        port: u16,
    ) -> Option<&mut Reservation> {
        let holders = self.ports.get_mut(&(ps, port))?;
        holders.iter_mut().find(|r| r.client == id && r.ip == ip)
    }

    /// Makes client `id`'s reservation a listener, and hands it the
    /// requests that came for it before (`waiting_requests.rs`).
    fn listen(&mut self, id: usize, ps: u16, ip: IpAddr, port: u16) -> Reply {
        let Some(r) = self.reservation(id, ps, ip, port) else {
            return not_held(ps, ip, port);
        };
        r.listening = true;
        let holders = self.ports.get(&(ps, port)).map_or(&[][..], |h| &h[..]);
        let now_for_it = |r: &WaitingRequest| {
            (r.ps, r.port) == (ps, port) && listener_in(holders, r.dst.ip(), r.ipv4) == Some(id)
        };
        for request in self.waiting.take_if(now_for_it) {
            self.note_request(&request.mad, request.src, request.dst, id);
            let packet = &request.packet;
            let size = (packet.len(), request.class);
            self.deliver(Some(id), packet, size, request.src, request.dst);
            self.stats.gsi_waited += 1;
        }
        Reply::Done
    }

    /// Whether client `id`'s process may take a port below
    /// [`PRIVILEGED_PORTS_END`], as the kernel's rdma_cm asks of a bind
    /// (`cma_use_port`): it holds CAP_NET_BIND_SERVICE. Unknown (no
    /// credentials, a process gone): no.
    fn may_bind_privileged(&self, id: usize) -> bool {
        let Some(cred) = self.clients.get(&id).and_then(|c| c.cred) else {
            return false;
        };
        let status = std::fs::read_to_string(format!("/proc/{}/status", cred.pid));
        status.is_ok_and(|s| has_capability(&s, CAP_NET_BIND_SERVICE))
    }

    /// Frees client `id`'s reservation.
    fn release(&mut self, id: usize, ps: u16, ip: IpAddr, port: u16) -> Reply {
        let Some(holders) = self.ports.get_mut(&(ps, port)) else {
            return not_held(ps, ip, port);
        };
        let before = holders.len();
        holders.retain(|r| !(r.client == id && r.ip == ip));
        let released = holders.len() < before;
        if holders.is_empty() {
            self.ports.remove(&(ps, port));
        }
        if released {
            if let Some(client) = self.clients.get_mut(&id) {
                client.reservations -= 1;
            }
            Reply::Done
        } else {
            not_held(ps, ip, port)
        }
    }

    /// The client listening on (`ps`, `port`) for a request to `ip` for
    /// an address of the given family ([`listener_in`]).
    fn listener(&self, ps: u16, port: u16, ip: IpAddr, ipv4: bool) -> Option<usize> {
        listener_in(self.ports.get(&(ps, port))?, ip, ipv4)
    }

    /// Keeps client `id`'s region and doorbell (replacing any earlier
    /// ones) until it leaves.
    fn publish(&mut self, id: usize, bytes: u64, fds: Vec<OwnedFd>) -> Reply {
        let mut fds = fds.into_iter();
        let (Some(region), Some(doorbell), None) = (fds.next(), fds.next(), fds.next()) else {
            let why = "a publish without exactly a region and a doorbell".into();
            return Reply::Refused(libc::EPROTO, why);
        };
        let client = self.clients.get_mut(&id).expect("serving it");
        client.published = Some(Published {
            region,
            doorbell,
            bytes,
        });
        Reply::Done
    }

    /// The owner of `qpn`'s block and copies of its region's descriptors,
    /// for client `id` if it runs as the same user (its own block
    /// included: a process may connect its QPs to each other).
    fn lookup(&self, id: usize, qpn: u32) -> (Reply, Vec<OwnedFd>) {
        let refused = |errno, why: String| (Reply::Refused(errno, why), Vec::new());
        let owner = self.owners[usize::from(slot_of(qpn))].and_then(|o| self.clients.get(&o));
        let Some(owner) = owner else {
            return refused(libc::ENOENT, format!("no context holds QP {qpn:#x}"));
        };
        let asker = self.clients.get(&id).and_then(|c| c.cred);
        let same_user = matches!((asker, owner.cred), (Some(a), Some(o)) if a.uid == o.uid);
        if !same_user {
            let why = format!("QP {qpn:#x} belongs to another user's process");
            return refused(libc::EPERM, why);
        }
        let Some(published) = &owner.published else {
            let why = format!(
                "the context holding QP {qpn:#x} shares no memory on this host (its process \
                 runs with SOFTVERBS_SHM=0, packet fault rules or SOFTVERBS_PCAP, which put \
                 it on the wire, or could not share it)"
            );
            return refused(libc::ENOENT, why);
        };
        let copies = (published.region.try_clone(), published.doorbell.try_clone());
        let (Ok(region), Ok(doorbell)) = copies else {
            let why = "out of descriptors".to_string();
            return refused(libc::EMFILE, why);
        };
        let pid = owner.cred.map_or(0, |c| c.pid);
        let reply = Reply::Peer {
            pid,
            region_bytes: published.bytes,
        };
        (reply, vec![region, doorbell])
    }

    /// A context's first request: its data socket, its device address,
    /// its first block and, where steering works, its own socket.
    fn hello(&mut self, id: usize, ip: IpAddr, fd: Option<OwnedFd>) -> (Reply, Option<OwnedFd>) {
        let Some(data) = fd else {
            let why = "hello without a data socket".into();
            return (Reply::Refused(libc::EPROTO, why), None);
        };
        if self.clients.get(&id).is_some_and(|c| c.data.is_some()) {
            let why = "a second hello on one connection".into();
            return (Reply::Refused(libc::EPROTO, why), None);
        }
        if !is_device_address(ip) {
            let why = format!("{ip} is not a unicast address a device can have");
            return (Reply::Refused(libc::EADDRNOTAVAIL, why), None);
        }
        if let Err(e) = self.open_port(ip) {
            let why = format!("cannot receive on {}: {e}", SocketAddr::new(ip, udp_port()));
            let errno = match e.kind() {
                io::ErrorKind::AddrInUse => libc::EADDRINUSE,
                _ => e.raw_os_error().unwrap_or(libc::EIO),
            };
            return (Reply::Refused(errno, why), None);
        }
        let client = self.clients.get_mut(&id).expect("serving it");
        client.data = Some(data);
        client.ip = Some(ip);
        let reply = self.allocate(id);
        let direct = self.add_direct(id, ip);
        self.restear(ip);
        (reply, direct)
    }

    /// Gives client `id` a member of `ip`'s steering group, a free one or
    /// a new one; returns the descriptor to hand it (the daemon keeps its
    /// own). Only to a client of the daemon's own user: a member's holder
    /// can read what the group steers to it after its context is gone
    /// (the member is freed and serves the next context) and can detach
    /// the group's program, so that packets of other contexts reach it;
    /// another user's context reads its packets through its data stream.
    fn add_direct(&mut self, id: usize, ip: IpAddr) -> Option<OwnedFd> {
        if self.clients.get(&id)?.cred?.uid != self.uid {
            return None;
        }
        let slot = self.find(ip)?;
        let members = self.udp[slot].as_mut()?.members.as_mut()?;
        let free = |members: &[Member]| {
            members
                .iter()
                .position(|m| m.client.is_none() && m.retired.is_none())
        };
        if free(members).is_none() {
            release_retired(members);
        }
        let m = match free(members) {
            Some(free) => {
                let fd = members[free].socket.as_raw_fd();
                let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
                free
            }
            None if members.len() < MEMBERS => {
                let socket = bind_udp_shared(SocketAddr::new(ip, udp_port())).ok()?;
                members.push(Member {
                    socket,
                    client: None,
                    retired: None,
                });
                members.len() - 1
            }
            None => return None,
        };
        members[m].client = Some(id);
        members[m].socket.try_clone().ok().map(OwnedFd::from)
    }

    /// Frees client `id`'s member of `ip`'s group: the daemon reads it
    /// (and routes what reaches it) until it serves another context,
    /// unless the client's process `pid` still holds it (see
    /// [`Member::retired`]).
    fn free_direct(&mut self, id: usize, ip: IpAddr, pid: Option<i32>) {
        let Some(slot) = self.find(ip) else {
            return;
        };
        let Some(members) = self.udp[slot].as_mut().and_then(|r| r.members.as_mut()) else {
            return;
        };
        if let Some(m) = members.iter().position(|m| m.client == Some(id)) {
            members[m].client = None;
            // A client without credentials: nobody can tell who holds it.
            let holder = pid.unwrap_or(0);
            members[m].retired =
                (pid.is_none() || still_held(holder, &members[m].socket)).then_some(holder);
            let fd = members[m].socket.as_raw_fd();
            let token = Token(MEMBER + slot * MEMBERS + m);
            let _ = self
                .poll
                .registry()
                .register(&mut SourceFd(&fd), token, Interest::READABLE);
            // What arrived before the registration is waiting already.
            self.receive_all(slot, Some(m));
        }
    }

    /// Installs the steering program of `ip`'s group for the blocks its
    /// members' contexts hold now.
    fn restear(&mut self, ip: IpAddr) {
        let Some(slot) = self.find(ip) else {
            return;
        };
        let Some(receiver) = self.udp[slot].as_ref() else {
            return;
        };
        let Some(members) = &receiver.members else {
            return;
        };
        let index_of = |client: usize| {
            let m = members.iter().position(|m| m.client == Some(client))?;
            Some(m as u32 + 1)
        };
        let table: Vec<(u16, u32)> = (1..=MAX_SLOT)
            .filter_map(|b| Some((b, index_of(self.owners[usize::from(b)]?)?)))
            .collect();
        // A refused update leaves the previous program: packets of the new
        // blocks reach the daemon and are passed on through the streams.
        let _ = steering::steer(&receiver.socket, &table);
    }

    /// [`Daemon::restear`] for the device address of client `id`.
    fn restear_for(&mut self, id: usize) {
        if let Some(ip) = self.clients.get(&id).and_then(|c| c.ip) {
            self.restear(ip);
        }
    }

    fn answer_group(&mut self, id: usize, request: Request) -> Reply {
        match request {
            Request::Join { group } => match self.join(id, group) {
                Ok(()) => Reply::Done,
                Err(e) => Reply::Refused(
                    e.raw_os_error().unwrap_or(libc::EINVAL),
                    format!("cannot join {group}: {e}"),
                ),
            },
            Request::Leave { group } => {
                self.leave(id, group);
                Reply::Done
            }
            _ => Reply::Refused(libc::EPROTO, "not a group request".into()),
        }
    }

    /// Makes client `id` a member of multicast `group`, opening the
    /// group's socket and joining it on the client's device address if
    /// needed.
    fn join(&mut self, id: usize, group: IpAddr) -> io::Result<()> {
        if !group.is_multicast() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let ip = self
            .clients
            .get(&id)
            .and_then(|c| c.ip)
            .ok_or(io::ErrorKind::NotConnected)?;
        let slot = match self.find(group) {
            Some(slot) => slot,
            None => {
                if self.groups_open() >= self.max_groups {
                    // As rxe refuses a group beyond its device's
                    // max_mcast_grp; one connection's joins took every
                    // descriptor of the daemon before.
                    return Err(io::Error::from_raw_os_error(libc::ENOMEM));
                }
                let socket = crate::group_socket::bind(group, ip)?;
                self.add(group, socket, Some(McastGroup::default()), None, None)?
            }
        };
        let receiver = self.udp[slot].as_mut().expect("found or opened");
        let g = receiver.group.as_mut().expect("a group socket");
        if !g.joined_on.contains(&ip) {
            if let Err(e) = crate::group_socket::join_on(&receiver.socket, group, ip) {
                // A socket opened for this join closes with it.
                self.leave(id, group);
                return Err(e);
            }
            g.joined_on.push(ip);
        }
        if !g.members.contains(&id) {
            g.members.push(id);
        }
        Ok(())
    }

    /// The multicast groups with a socket open, for all clients.
    fn groups_open(&self) -> usize {
        self.udp
            .iter()
            .flatten()
            .filter(|r| r.group.is_some())
            .count()
    }

    /// Client `id` leaves `group`; the group's socket closes with its last
    /// member.
    fn leave(&mut self, id: usize, group: IpAddr) {
        let Some(slot) = self.find(group) else {
            return;
        };
        let receiver = self.udp[slot].as_mut().expect("found");
        let Some(g) = receiver.group.as_mut() else {
            return;
        };
        g.members.retain(|&m| m != id);
        if g.members.is_empty() {
            let fd = receiver.socket.as_raw_fd();
            let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
            self.udp[slot] = None;
        }
    }

    /// The slot of the socket bound to `local`.
    fn find(&self, local: IpAddr) -> Option<usize> {
        self.udp
            .iter()
            .position(|r| r.as_ref().is_some_and(|r| r.local == local))
    }

    /// Opens UDP 4791 on device address `local` in a free slot.
    fn open(&mut self, local: IpAddr) -> io::Result<usize> {
        let addr = SocketAddr::new(local, udp_port());
        let claim = AddressClaim::take(addr)?;
        // A group left by an earlier daemon's contexts (still closing their
        // members) would give ours an index nobody knows: probe for one,
        // and steer only on a port nobody holds.
        let port_free = bind_udp(addr).is_ok();
        if !port_free {
            // Said, since the kernel then shares this address's packets
            // between that holder and us (no other daemon claims the
            // address: the contexts of one that ended, still closing, or
            // other software).
            crate::say!(
                "softverbs daemon: UDP {addr} is already bound by another process (the \
                 contexts of a softverbs daemon that ended, still closing, or other software): \
                 packets to {local} may go to it and be lost"
            );
        }
        let socket = bind_udp_shared(addr)?;
        // No member but ours yet: everything to index 0 (the daemon) until
        // contexts join; a kernel that refuses the program gets no members.
        // A daemon that captures (--pcap) steers nothing: it must see every
        // packet.
        let steer = port_free && self.capture.is_none();
        let members = (steer && steering::steer(&socket, &[]).is_ok()).then(Vec::new);
        self.add(local, socket, None, members, Some(claim))
    }

    /// Puts `socket`, on UDP 4791 of `local`, in a free slot, polled.
    fn add(
        &mut self,
        local: IpAddr,
        socket: std::net::UdpSocket,
        group: Option<McastGroup>,
        members: Option<Vec<Member>>,
        claim: Option<AddressClaim>,
    ) -> io::Result<usize> {
        let slot = match self.udp.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.udp.push(None);
                self.udp.len() - 1
            }
        };
        self.poll.registry().register(
            &mut SourceFd(&socket.as_raw_fd()),
            Token(UDP + slot),
            Interest::READABLE,
        )?;
        self.udp[slot] = Some(Receiver {
            local,
            socket,
            group,
            members,
            _claim: claim,
        });
        Ok(slot)
    }

    /// Opens UDP 4791 on `ip` unless it is open.
    fn open_port(&mut self, ip: IpAddr) -> io::Result<()> {
        if self.find(ip).is_none() {
            self.open(ip)?;
        }
        Ok(())
    }

    /// Closes UDP 4791 on device address `ip` once no context has it:
    /// any local user may say hello with an address, and a socket kept
    /// for each (until the daemon ends, which it does not while anyone
    /// uses it) let one user take every descriptor of the daemon, and
    /// every address's 4791 from other software. Kept while a process
    /// still holds a member of its steering group (`Member::retired`),
    /// which a new socket on the port would share packets with.
    fn close_unused(&mut self, ip: IpAddr) {
        if self.clients.values().any(|c| c.ip == Some(ip)) {
            return;
        }
        let Some(slot) = self.find(ip) else {
            return;
        };
        let Some(receiver) = self.udp[slot].as_mut() else {
            return;
        };
        if let Some(members) = receiver.members.as_deref_mut() {
            release_retired(members);
        }
        let members = receiver.members.as_deref().unwrap_or_default();
        if receiver.group.is_some()
            || members
                .iter()
                .any(|m| m.retired.is_some() || m.client.is_some())
        {
            return;
        }
        let registry = self.poll.registry();
        let _ = registry.deregister(&mut SourceFd(&receiver.socket.as_raw_fd()));
        for m in members {
            let _ = registry.deregister(&mut SourceFd(&m.socket.as_raw_fd()));
        }
        self.udp[slot] = None;
    }

    /// The next free block of QP numbers, for client `id`.
    fn allocate(&mut self, id: usize) -> Reply {
        if self.over_guest_share(id) {
            let why = "this user's contexts hold a quarter of the blocks of QP numbers";
            return Reply::Refused(libc::ENOSPC, why.into());
        }
        for _ in 0..MAX_SLOT {
            let block = self.next_block;
            self.next_block = block % MAX_SLOT + 1;
            let owner = &mut self.owners[usize::from(block)];
            if owner.is_none() {
                *owner = Some(id);
                return Reply::Block(block);
            }
        }
        Reply::Refused(libc::ENOSPC, "every block of QP numbers is in use".into())
    }

    /// Whether user `uid`, a guest (not the daemon's user), already has
    /// its share of the daemon's descriptors in connections: one user's
    /// connections that never said hello took them all, and every other
    /// context failed to open.
    fn guest_sessions_full(&self, uid: u32) -> bool {
        if uid == self.uid {
            return false;
        }
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        let share = limit / (FDS_PER_CLIENT * GUEST_SHARE as u64);
        let sessions = self
            .clients
            .values()
            .filter(|c| c.cred.is_some_and(|c| c.uid == uid));
        sessions.count() as u64 >= share
    }

    /// Whether client `id` runs as another user than the daemon's (a
    /// guest: root's daemon serving a user's programs) whose user's
    /// contexts already hold [`GUEST_SHARE`] of the blocks of QP numbers.
    /// One user's contexts asking for block after block took every one,
    /// and the next context of anyone failed to open (ENOSPC); the
    /// daemon's own user, whose daemon it is, is not held back.
    fn over_guest_share(&self, id: usize) -> bool {
        let uid_of = |c: usize| self.clients.get(&c).and_then(|c| c.cred).map(|c| c.uid);
        let Some(uid) = uid_of(id) else {
            return false;
        };
        if uid == self.uid {
            return false;
        }
        let held = self
            .owners
            .iter()
            .flatten()
            .filter(|&&o| uid_of(o) == Some(uid))
            .count();
        held >= usize::from(MAX_SLOT) / GUEST_SHARE
    }

    fn remove(&mut self, id: usize) {
        let Some(client) = self.clients.remove(&id) else {
            return;
        };
        self.queued_total -= client.queued.len();
        let registry = self.poll.registry();
        let _ = registry.deregister(&mut SourceFd(&client.control.as_raw_fd()));
        if let Some(data) = &client.data {
            let _ = registry.deregister(&mut SourceFd(&data.as_raw_fd()));
        }
        if let Some(published) = &client.published {
            mark_gone(published);
        }
        let mut blocks = Vec::new();
        for (block, owner) in self.owners.iter_mut().enumerate() {
            if *owner == Some(id) {
                *owner = None;
                blocks.push(block);
            }
        }
        self.disconnect_peers_of(&blocks);
        self.give_up_requests_of(&blocks);
        self.reject_requests_of(id);
        self.ports.retain(|_, holders| {
            holders.retain(|r| r.client != id);
            !holders.is_empty()
        });
        if let Some(ip) = client.ip {
            self.free_direct(id, ip, client.cred.map(|c| c.pid));
            self.restear(ip);
            self.close_unused(ip);
        }
        let groups: Vec<IpAddr> = self
            .udp
            .iter()
            .flatten()
            .filter(|r| r.group.as_ref().is_some_and(|g| g.members.contains(&id)))
            .map(|r| r.local)
            .collect();
        for group in groups {
            self.leave(id, group);
        }
    }

    /// Takes every datagram waiting on UDP socket `i` and passes its
    /// packets on: on a device address one frame per run of packets for
    /// the same context, on a group the whole datagram to every member.
    ///
    /// `member`: a free member of socket `i`'s steering group instead of
    /// the socket itself (what reaches it is routed like the rest).
    fn receive_all(&mut self, i: usize, member: Option<usize>) {
        let mut errors = 0;
        loop {
            let Some(Some(receiver)) = self.udp.get(i) else {
                return;
            };
            let socket = match member {
                None => &receiver.socket,
                Some(m) => match receiver.members.as_ref().and_then(|ms| ms.get(m)) {
                    Some(free) if free.client.is_none() => &free.socket,
                    _ => return, // serving a context again: not ours to read
                },
            };
            let dst = SocketAddr::new(receiver.local, udp_port());
            let got = recv_segments(socket, &mut self.buf, &mut self.cmsg);
            let Datagrams {
                len: n,
                src,
                segment,
                class,
            } = match got {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // A failed receive has usually consumed its datagram; one
                // that keeps failing must not spin the daemon.
                Err(_) if errors < MAX_RECV_ERRORS => {
                    errors += 1;
                    continue;
                }
                Err(_) => return,
            };
            let segment = segment.unwrap_or(n).max(1);
            if let Some(capture) = &self.capture {
                capture.datagram((src, dst), class, segment, &self.buf[..n]);
            }
            let members = receiver.group.as_ref().map(|g| g.members.clone());
            let bytes = std::mem::take(&mut self.buf);
            match members {
                Some(members) => {
                    for m in members {
                        self.deliver(Some(m), &bytes[..n], (segment, class), src, dst);
                    }
                }
                None => self.route(i, &bytes[..n], (segment, class), src, dst),
            }
            self.buf = bytes;
        }
    }

    /// Passes on the packets that arrived at UDP socket `slot`, each run
    /// of packets for one context as one frame; packets to QP1 go where
    /// their MAD says (or are answered, or dropped). `segment` is the
    /// packets' size, `class` their traffic class.
    fn route(
        &mut self,
        slot: usize,
        bytes: &[u8],
        (segment, class): (usize, u8),
        src: SocketAddr,
        dst: SocketAddr,
    ) {
        let mut run_start = 0;
        let mut run_to = To::Handled;
        for (k, packet) in bytes.chunks(segment).enumerate() {
            let to = if packet.get(5..8) == Some(&[0, 0, 1]) {
                self.route_gsi(slot, packet, (src, dst), class)
            } else {
                To::Client(self.owner_of(packet))
            };
            if to != run_to {
                let run = &bytes[run_start..k * segment];
                if let To::Client(owner) = run_to {
                    self.deliver(owner, run, (segment, class), src, dst);
                }
                (run_start, run_to) = (k * segment, to);
            }
        }
        if let To::Client(owner) = run_to {
            self.deliver(owner, &bytes[run_start..], (segment, class), src, dst);
        }
    }

    /// Where a packet to QP1 goes (crate::gsi): a REQ or SIDR_REQ to the
    /// listener of its service on the packet's destination address,
    /// answered here when there is none; any other CM message to the
    /// holder of its recipient's comm ID. The rest is dropped, counted.
    fn route_gsi(
        &mut self,
        slot: usize,
        packet: &[u8],
        (src, dst): (SocketAddr, SocketAddr),
        class: u8,
    ) -> To {
        let Some(mad) = gsi::parse_gsi(src, dst, packet) else {
            self.stats.gsi_dropped += 1;
            return To::Handled;
        };
        match gsi::route(&mad) {
            GsiRoute::Service(Some(service)) => {
                if let Some(holder) = self.request_holder(&mad, src) {
                    return To::Client(Some(holder));
                }
                let (ps, port) = (service.port_space, service.port);
                let ipv4 = service.ipv4.unwrap_or(dst.ip().is_ipv4());
                let listener = self.listener(ps, port, dst.ip(), ipv4);
                if let Some(client) = listener {
                    self.note_request(&mad, src, dst, client);
                    return To::Client(listener);
                }
                if !self.waiting.has_room() {
                    self.answer_unmatched(slot, &mad, src, dst);
                    return To::Handled;
                }
                let request = WaitingRequest {
                    ps,
                    port,
                    ipv4,
                    slot,
                    src,
                    dst,
                    class,
                    packet: packet.to_vec(),
                    mad,
                };
                self.waiting.wait(Instant::now(), request);
            }
            GsiRoute::Service(None) => self.answer_unmatched(slot, &mad, src, dst),
            GsiRoute::CommId(id) => {
                let block = usize::from(gsi::block_of_comm_id(id));
                match self.owners.get(block).copied().flatten() {
                    Some(owner) => {
                        self.note_connection(&mad, slot, src, dst);
                        return To::Client(Some(owner));
                    }
                    None => {
                        self.stats.gsi_unrouted += 1;
                        self.answer_unmatched(slot, &mad, src, dst);
                    }
                }
            }
            GsiRoute::Requester(comm_id) => {
                let now = Instant::now();
                let requester = (src.ip(), comm_id);
                match self.cm_requests.routed.get(requester, now) {
                    Some(r) if self.clients.contains_key(&r.client) => {
                        // The request ends here.
                        self.cm_requests.routed.remove(requester);
                        return To::Client(Some(r.client));
                    }
                    _ => self.stats.gsi_unrouted += 1,
                }
            }
            GsiRoute::Drop => self.stats.gsi_dropped += 1,
        }
        To::Handled
    }

    /// Keeps which client a REQ from `src` to `dst` went to
    /// (`cm_requests.rs`).
    fn note_request(&mut self, mad: &[u8; 256], src: SocketAddr, dst: SocketAddr, client: usize) {
        use softverbs_wire::cm::CmMessage;
        if let Ok((header, CmMessage::Req(req))) = CmMessage::parse_mad(mad) {
            let requester = (src.ip(), req.local_comm_id);
            let routed = RoutedRequest {
                client,
                dst: dst.ip(),
                tid: header.tid,
                qpn: req.local_qpn,
                replied: false,
            };
            self.cm_requests
                .routed
                .insert(requester, routed, Instant::now());
        }
    }

    /// The client holding the request a REQ from `src` is sent again
    /// for, if it is still there: the REQ goes to it, listener or not,
    /// as the kernel's CM finds a duplicate REQ before its listener.
    fn request_holder(&mut self, mad: &[u8; 256], src: SocketAddr) -> Option<usize> {
        use softverbs_wire::cm::CmMessage;
        let Ok((_, CmMessage::Req(req))) = CmMessage::parse_mad(mad) else {
            return None;
        };
        let requester = (src.ip(), req.local_comm_id);
        let holder = self.cm_requests.routed.get(requester, Instant::now())?;
        Some(holder.client).filter(|c| self.clients.contains_key(c))
    }

    /// Keeps a REQ client `id` sent (`cm_requests.rs`), for the REJ the
    /// daemon sends in its name should it end first.
    fn requesting(
        &mut self,
        id: usize,
        peer: IpAddr,
        comm_id: u32,
        ca_guid: u64,
        tid: u64,
    ) -> Reply {
        let local = match self.sender_of(id, comm_id) {
            Ok(local) => local,
            Err(refused) => return refused,
        };
        let request = SentRequest {
            local,
            peer,
            comm_id,
            ca_guid,
            tid,
        };
        self.cm_requests
            .sent
            .insert(comm_id, request, Instant::now());
        Reply::Done
    }

    /// Keeps the connection whose REP client `id` sent (before the REP
    /// goes out: `cm_connections.rs`), for the REJ, or once its RTU came
    /// the DREQ, that the daemon sends in its name should it end first.
    /// The daemon sees the REP itself only when it goes to a peer of this
    /// host; one to another host passes no daemon. The request it answers,
    /// if passed to this client, gets no REJ of the REQ any more, but its
    /// entry stays: a REQ sent again, or a REJ of a requester that gives
    /// up before the REP reaches it, still goes to the client.
    fn replying(&mut self, id: usize, peer: IpAddr, comm_id: u32, remote_comm_id: u32) -> Reply {
        let local = match self.sender_of(id, comm_id) {
            Ok(local) => local,
            Err(refused) => return refused,
        };
        let Some(slot) = self.find(local) else {
            return Reply::Refused(libc::EADDRNOTAVAIL, format!("no socket on {local}"));
        };
        let request = self
            .cm_requests
            .routed
            .get_mut((peer, remote_comm_id), Instant::now());
        let mut qpn = Qpn::ZERO;
        if let Some(r) = request.filter(|r| r.client == id) {
            r.replied = true;
            qpn = r.qpn;
        }
        let port = udp_port();
        let active = CmPeer {
            comm_id: remote_comm_id,
            addr: SocketAddr::new(peer, port),
            local: SocketAddr::new(local, port),
            slot,
            qpn,
        };
        self.cm.connected(comm_id, active, Stage::RepSent);
        Reply::Done
    }

    /// Client `id` sent a DREQ, DREP or REJ of its comm ID `comm_id` to
    /// `peer`'s `remote_comm_id` (`ends`), which passes no daemon: the
    /// daemon does not send it again in the client's name when the client
    /// goes (before, a clean exit brought its peers a second DREP, or a
    /// DREQ after their DREP).
    fn disconnecting(&mut self, id: usize, comm_id: u32, ends: (IpAddr, u32, Ending)) -> Reply {
        if let Err(refused) = self.sender_of(id, comm_id) {
            return refused;
        }
        let (peer, remote_comm_id, message) = ends;
        // The client's answer to a stray message naming its comm ID with
        // another peer's (a DREP to an unknown DREQ, as the kernel's
        // `cm_issue_drep`) ends no connection of its.
        let its_connection = self.cm.is_of(comm_id, remote_comm_id);
        match message {
            _ if !its_connection => {}
            Ending::Dreq => self.cm.dreq_sent(comm_id),
            Ending::Drep => self.cm.ended(comm_id),
            Ending::Rej => {
                self.cm.ended(comm_id);
                // Its own REQ given up, or a REQ passed to it rejected.
                self.cm_requests.sent.remove(comm_id);
                let requester = (peer, remote_comm_id);
                let now = Instant::now();
                if self
                    .cm_requests
                    .routed
                    .get(requester, now)
                    .is_some_and(|r| r.client == id)
                {
                    self.cm_requests.routed.remove(requester);
                }
            }
        }
        Reply::Done
    }

    /// The address client `id` sends CM messages of comm ID `comm_id`
    /// from; refused unless the comm ID is of the client's blocks, as the
    /// messages the daemon sends in its name will be from its address.
    fn sender_of(&self, id: usize, comm_id: u32) -> Result<IpAddr, Reply> {
        let block = usize::from(gsi::block_of_comm_id(comm_id));
        let local = self.clients.get(&id).and_then(|c| c.ip);
        match local {
            Some(local) if self.owners.get(block) == Some(&Some(id)) => Ok(local),
            _ => Err(Reply::Refused(
                libc::EINVAL,
                format!("comm ID {comm_id:#x} is not of this context's blocks"),
            )),
        }
    }

    /// Keeps what a CM message routed to a client says of its connection
    /// (`cm_connections.rs`).
    fn note_connection(&mut self, mad: &[u8; 256], slot: usize, src: SocketAddr, dst: SocketAddr) {
        use softverbs_wire::cm::CmMessage;
        let Ok((header, msg)) = CmMessage::parse_mad(mad) else {
            return;
        };
        let peer = |comm_id, qpn| CmPeer {
            comm_id,
            addr: src,
            local: dst,
            slot,
            qpn,
        };
        let now = Instant::now();
        self.cm.expire(now);
        // A peer on this host sends its RTU through the daemon, where it
        // is seen; one elsewhere does not.
        let peer_slot = self.find(src.ip());
        match msg {
            CmMessage::Rep(m) => {
                // The client's REQ is answered: its connection is known
                // from here on (and, if its REQ passed here, its peer's).
                // A REP that answers no REQ known here and names the
                // connection with another peer's comm ID is stray or
                // forged (the kernel's CM drops it, `cm_dup_rep_handler`).
                let requester = (dst.ip(), m.remote_comm_id);
                let answers_req = self.cm_requests.sent.get(m.remote_comm_id, now).is_some()
                    || self.cm_requests.routed.get(requester, now).is_some();
                if !answers_req && !self.cm.is_of(m.remote_comm_id, m.local_comm_id) {
                    return;
                }
                self.cm_requests.sent.remove(m.remote_comm_id);
                let active_qpn = self.cm_requests.routed.get(requester, now).map(|r| r.qpn);
                self.cm_requests.routed.remove(requester);
                // The client's RTU to a peer of this host will pass here.
                let stage = match peer_slot {
                    Some(_) => Stage::RepTaken,
                    None => Stage::Established,
                };
                let passive = peer(m.local_comm_id, m.local_qpn);
                self.cm.connected(m.remote_comm_id, passive, stage);
                // A passive side on this host is known from its REP too:
                // should it die before the RTU reaches it, the active side
                // gets the REJ the kernel's CM sends for a REP it had sent
                // (`cm_destroy_id` in REP_SENT). The RTU makes it known as
                // established.
                if let Some(slot) = peer_slot {
                    let mut local = src;
                    local.set_port(udp_port());
                    let active = CmPeer {
                        comm_id: m.remote_comm_id,
                        addr: dst,
                        local,
                        slot,
                        qpn: active_qpn.unwrap_or(Qpn::ZERO),
                    };
                    self.cm.connected(m.local_comm_id, active, Stage::RepSent);
                }
            }
            CmMessage::Rtu(m) if !self.cm.is_of(m.remote_comm_id, m.local_comm_id) => {}
            CmMessage::Rtu(m) => {
                // The request passed to the client is a connection now;
                // the requester's QP is the REQ's (or, the REP having
                // passed here too, the connection's already).
                let requester = (src.ip(), m.local_comm_id);
                let qpn = (self.cm_requests.routed.get(requester, now).map(|r| r.qpn))
                    .or_else(|| self.cm.peer_qpn(m.remote_comm_id))
                    .unwrap_or(Qpn::ZERO);
                self.cm_requests.routed.remove(requester);
                if self.cm.is_of(m.local_comm_id, m.remote_comm_id) {
                    self.cm.rtu_passed(m.local_comm_id);
                }
                let active = peer(m.local_comm_id, qpn);
                self.cm
                    .connected(m.remote_comm_id, active, Stage::Established)
            }
            // DREQs, DREPs and REJs count for the connection they name by
            // both comm IDs only.
            CmMessage::Dreq(m) if self.cm.is_of(m.remote_comm_id, m.local_comm_id) => {
                self.cm.dreq_came(m.remote_comm_id, header.tid, now)
            }
            CmMessage::Drep(m) if self.cm.is_of(m.remote_comm_id, m.local_comm_id) => {
                self.cm.drep_passed(m.remote_comm_id)
            }
            CmMessage::Rej(m) => {
                // A request ends: the client's own REQ, rejected; one
                // passed to the client, given up by its requester; or one
                // passed to a client of this host that rejected it.
                self.cm_requests.sent.remove(m.remote_comm_id);
                self.cm_requests.routed.remove((src.ip(), m.local_comm_id));
                self.cm_requests.routed.remove((dst.ip(), m.remote_comm_id));
                if self.cm.is_of(m.remote_comm_id, m.local_comm_id) {
                    self.cm.ended(m.remote_comm_id);
                }
            }
            _ => {}
        }
    }

    /// Client `id` is gone with its rdma_cm: the peers of its connections
    /// get a DREQ from its comm ID, those that asked to disconnect the
    /// DREP they wait for, and those whose REP it never answered a REJ,
    /// as the kernel's rdma_cm sends them when a dead process's file is
    /// released (`rdma_destroy_id` of each id), so they see DISCONNECTED
    /// (or REJECTED) at once.
    fn disconnect_peers_of(&mut self, blocks: &[usize]) {
        use softverbs_wire::cm::{rej_reason, CmDrep, CmDreq, CmMessage, CmRej, MessageKind};
        let is_dead = |ours| blocks.contains(&usize::from(gsi::block_of_comm_id(ours)));
        for (ours, peer, farewell) in self.cm.take_dead(is_dead, Instant::now()) {
            let dreq = CmMessage::Dreq(CmDreq {
                local_comm_id: ours,
                remote_comm_id: peer.comm_id,
                remote_qpn: peer.qpn,
                ..Default::default()
            });
            match farewell {
                Farewell::Drep { tid } => {
                    let drep = CmDrep {
                        local_comm_id: ours,
                        remote_comm_id: peer.comm_id,
                        ..Default::default()
                    };
                    self.farewell(&peer, &CmMessage::Drep(drep), tid);
                }
                Farewell::Rej { rep_taken } => {
                    // As the kernel's `cm_format_rej`: a REP taken is
                    // the message rejected; one sent, "other".
                    let message_rejected = if rep_taken {
                        MessageKind::Rep
                    } else {
                        MessageKind::Other
                    };
                    let rej = CmRej {
                        local_comm_id: ours,
                        remote_comm_id: peer.comm_id,
                        message_rejected,
                        reason: rej_reason::CONSUMER_DEFINED,
                        ..Default::default()
                    };
                    self.farewell(&peer, &CmMessage::Rej(rej), u64::from(ours));
                    // And the DREQ, for a peer that took the connection as
                    // established without the RTU (COMM_EST after a lost
                    // RTU) and might not take the REJ there (the kernel's
                    // CM and softverbs' do, an older softverbs did not);
                    // one that took the REJ ignores the DREQ.
                    self.farewell(&peer, &dreq, u64::from(ours));
                }
                Farewell::Dreq => self.farewell(&peer, &dreq, u64::from(ours)),
            }
        }
    }

    /// Sends `message` (transaction `tid`) to `peer`'s QP1 from the
    /// daemon's socket on the address the connection came to.
    fn farewell(&mut self, peer: &CmPeer, message: &softverbs_wire::cm::CmMessage, tid: u64) {
        let mut mad = [0u8; 256];
        if message.emit_mad(tid, 0, &mut mad).is_err() {
            return;
        }
        let mut to = peer.addr;
        to.set_port(udp_port());
        let Ok(packet) = gsi::gsi_packet(peer.local, to, &mad) else {
            return;
        };
        // (The slot may have been closed and given to another address.)
        let socket = self.udp.get(peer.slot).and_then(Option::as_ref);
        if let Some(r) = socket.filter(|r| r.local == peer.local.ip()) {
            if r.socket.send_to(&packet, to).is_ok() {
                self.stats.gsi_answered += 1;
            }
        }
    }

    /// A client holding `blocks` is gone: the peers of its REQs that no
    /// REP or REJ answered get the REJ "timeout" the kernel's CM sends
    /// when the requester's id is destroyed (`cm_destroy_id` in
    /// REQ_SENT): its comm ID, its CA GUID in the ARI, the REQ's
    /// transaction. So a server does not accept a connection nobody
    /// wants and wait for its RTU.
    fn give_up_requests_of(&mut self, blocks: &[usize]) {
        use softverbs_wire::cm::{rej_reason, CmMessage, CmRej, MessageKind};
        let is_dead =
            |comm_id: u32, _| blocks.contains(&usize::from(gsi::block_of_comm_id(comm_id)));
        for r in self.cm_requests.sent.take(is_dead, Instant::now()) {
            let Some(slot) = self.find(r.local) else {
                continue;
            };
            let mut rej = CmRej {
                local_comm_id: r.comm_id,
                message_rejected: MessageKind::Other,
                reason: rej_reason::TIMEOUT,
                reject_info_len: 8,
                ..CmRej::default()
            };
            rej.ari[..8].copy_from_slice(&r.ca_guid.to_be_bytes());
            let port = udp_port();
            let peer = CmPeer {
                comm_id: 0,
                addr: SocketAddr::new(r.peer, port),
                local: SocketAddr::new(r.local, port),
                slot,
                qpn: Qpn::ZERO, // a REJ names no QP
            };
            self.farewell(&peer, &CmMessage::Rej(rej), r.tid);
        }
    }

    /// Client `id` is gone: its requests are forgotten, and the
    /// requesters whose REQs it was passed and that no RTU or REJ ended,
    /// nor a REP of its own answered, get the REJ "consumer defined" the
    /// kernel's CM sends when a request's id is destroyed
    /// (`cm_destroy_id` in REQ_RCVD: of the REQ, no comm ID of ours), so
    /// that they are rejected now instead of after their retries. (One it
    /// answered gets the REJ of the REP: `disconnect_peers_of`.)
    fn reject_requests_of(&mut self, id: usize) {
        use softverbs_wire::cm::{rej_reason, CmMessage, CmRej, MessageKind};
        let of_dead = |_, r: RoutedRequest| r.client == id;
        let requests = self
            .cm_requests
            .routed
            .take_with_keys(of_dead, Instant::now());
        let unanswered = requests.into_iter().filter(|(_, r)| !r.replied);
        for ((requester, comm_id), r) in unanswered {
            let Some(slot) = self.find(r.dst) else {
                continue;
            };
            let rej = CmRej {
                remote_comm_id: comm_id,
                message_rejected: MessageKind::Req,
                reason: rej_reason::CONSUMER_DEFINED,
                ..CmRej::default()
            };
            let port = udp_port();
            let peer = CmPeer {
                comm_id,
                addr: SocketAddr::new(requester, port),
                local: SocketAddr::new(r.dst, port),
                slot,
                qpn: Qpn::ZERO, // a REJ names no QP
            };
            self.farewell(&peer, &CmMessage::Rej(rej), r.tid);
        }
    }

    /// Answers a REQ or SIDR_REQ nobody listens for, or a DREQ nobody
    /// holds, as the kernel's CM does: to QP1 at the request's source address, UDP 4791, from the
    /// daemon's socket on the address it arrived at.
    fn answer_unmatched(&mut self, slot: usize, mad: &[u8; 256], src: SocketAddr, dst: SocketAddr) {
        let mut to = src; // a link-local source keeps its scope
        to.set_port(udp_port());
        let Some(answer) = gsi::reject_unmatched(mad) else {
            return; // nothing the kernel's CM would answer
        };
        let answer = gsi::gsi_packet(dst, to, &answer).ok();
        // (A request that waited may find its slot another address's.)
        let socket = self
            .udp
            .get(slot)
            .and_then(Option::as_ref)
            .filter(|r| r.local == dst.ip())
            .map(|r| &r.socket);
        let sent = match (answer, socket) {
            (Some(packet), Some(socket)) => match socket.send_to(&packet, to) {
                Ok(_) => {
                    if let Some(capture) = &self.capture {
                        capture.datagram((dst, to), 0, packet.len(), &packet);
                    }
                    true
                }
                Err(_) => false,
            },
            _ => false,
        };
        if sent {
            self.stats.gsi_answered += 1;
        } else {
            self.stats.gsi_dropped += 1;
        }
    }

    /// The client owning the destination QP of `packet` (BTH bytes 5..8).
    fn owner_of(&self, packet: &[u8]) -> Option<usize> {
        let qpn = u32::from_be_bytes([0, *packet.get(5)?, *packet.get(6)?, *packet.get(7)?]);
        self.owners
            .get(usize::from(slot_of(qpn)))
            .copied()
            .flatten()
    }

    fn deliver(
        &mut self,
        owner: Option<usize>,
        packets: &[u8],
        (segment, class): (usize, u8),
        src: SocketAddr,
        dst: SocketAddr,
    ) {
        if packets.is_empty() {
            return;
        }
        let count = packets.len().div_ceil(segment) as u64;
        let Some(client) = owner.and_then(|id| self.clients.get_mut(&id)) else {
            self.stats.unrouted += count;
            return;
        };
        let after = client.queued.len() + packets.len();
        let beyond_share =
            after > QUEUED_ANYWAY && self.queued_total + packets.len() > MAX_QUEUED_TOTAL;
        if client.data.is_none() || after > MAX_QUEUED || beyond_share {
            self.stats.overflowed += count;
            return;
        }
        let header = FrameHeader {
            src,
            dst,
            segment: segment.min(usize::from(u16::MAX)) as u16,
            class,
        };
        let before = client.queued.len();
        header.encode(packets.len(), &mut client.queued);
        client.queued.extend_from_slice(packets);
        self.queued_total += client.queued.len() - before;
        self.stats.delivered += count;
        if !client.waiting_writable {
            let id = owner.expect("found above");
            self.flush(id);
        }
    }

    /// Writes what client `id` has queued; waits for writability if the
    /// socket is full.
    fn flush(&mut self, id: usize) {
        let Some(client) = self.clients.get_mut(&id) else {
            return;
        };
        let Some(data) = &client.data else {
            return;
        };
        let mut written = 0;
        let broken = loop {
            if written == client.queued.len() {
                break false;
            }
            match send(
                data,
                &client.queued[written..],
                SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
            ) {
                Ok(n) => written += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => break false,
                Err(_) => break true,
            }
        };
        client.queued.drain(..written);
        self.queued_total -= written;
        if client.queued.is_empty() {
            // A burst's room beyond the share goes back once it is
            // written (the share stays, for the next burst).
            client.queued.shrink_to(QUEUED_ANYWAY);
        }
        if broken {
            return self.remove(id);
        }
        let want = !client.queued.is_empty();
        if want != client.waiting_writable {
            let fd = data.as_raw_fd();
            let registry = self.poll.registry();
            let done = if want {
                registry.register(&mut SourceFd(&fd), Token(DATA + id), Interest::WRITABLE)
            } else {
                registry.deregister(&mut SourceFd(&fd))
            };
            if done.is_ok() {
                client.waiting_writable = want;
            }
        }
    }

    /// What was counted so far.
    pub fn stats(&self) -> DaemonStats {
        self.stats
    }

    /// Writes every packet received from now on to `capture`, for every
    /// process, and the answers the daemon sends on QP1 (`softverbs
    /// daemon --pcap`).
    pub fn capture_to(&mut self, capture: Capture) {
        self.capture = Some(capture);
    }
}

/// Who of `holders` (the reservations of one port) takes a request to
/// `ip` for an address of the given family: the listener on `ip` itself,
/// else a wildcard listener that takes the family, else any wildcard
/// listener (whose rdma_cm rejects it as the consumer, as the kernel's
/// CM rejects a request its rdma_cm finds no listener for).
fn listener_in(holders: &[Reservation], ip: IpAddr, ipv4: bool) -> Option<usize> {
    let listening = || holders.iter().filter(|r| r.listening);
    let wildcard = || listening().filter(|r| r.ip.is_unspecified());
    listening()
        .find(|r| r.ip == ip)
        .or_else(|| wildcard().find(|r| r.takes_family(ipv4)))
        .or_else(|| wildcard().next())
        .map(|r| r.client)
}

/// The refusal of a listen or release of a reservation the client does
/// not hold.
fn not_held(ps: u16, ip: IpAddr, port: u16) -> Reply {
    let why = format!("no reservation of port {port} of port space {ps:#06x} on {ip}");
    Reply::Refused(libc::EINVAL, why)
}

/// Runs a daemon on a thread of this process, for tests and embedders
/// that want no separate process: returns the address contexts use (which
/// never starts another daemon) and the thread, which ends after
/// `idle_exit` without clients.
pub fn start_thread(
    config: DaemonConfig,
) -> io::Result<(
    super::DaemonAddress,
    std::thread::JoinHandle<io::Result<DaemonStats>>,
)> {
    let address = super::DaemonAddress {
        socket: config.socket.clone(),
        program: None,
    };
    let mut daemon = Daemon::bind(config)?;
    let thread = std::thread::Builder::new()
        .name("softverbs-daemon".into())
        .spawn(move || daemon.run())?;
    Ok((address, thread))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::{connect, socketpair};

    /// A connection to a daemon of the test's own, on a loopback address
    /// of its own.
    fn connect_to_test_daemon() -> (OwnedFd, IpAddr) {
        let ip = IpAddr::V4(crate::test_loopback_address());
        let name = format!("softverbs-test-{}-{ip}", std::process::id());
        let config = DaemonConfig {
            socket: name.clone(),
            idle_exit: Duration::from_millis(200),
        };
        start_thread(config).unwrap();
        let fd = socket_with(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        connect(
            &fd,
            &SocketAddrUnix::new_abstract_name(name.as_bytes()).unwrap(),
        )
        .unwrap();
        (fd, ip)
    }

    fn ask(control: &OwnedFd, request: &Request, fd: Option<&OwnedFd>) -> io::Result<u16> {
        let fds: Vec<BorrowedFd<'_>> = fd.map(|f| f.as_fd()).into_iter().collect();
        record::send(control, &request.encode(), &fds)?;
        let mut buf = [0u8; 512];
        let (n, _) = record::recv(control, &mut buf)?;
        Reply::decode(&buf[..n])?.into_block()
    }

    /// A daemon that is not running, with clients made up by the test.
    fn idle_daemon() -> Daemon {
        Daemon::bind(DaemonConfig {
            socket: format!(
                "softverbs-test-{}-{}",
                std::process::id(),
                fastrand::u64(..)
            ),
            idle_exit: Duration::from_millis(200),
        })
        .unwrap()
    }

    /// Client `id` running as `uid` (no credentials if `None`).
    fn add_client(daemon: &mut Daemon, id: usize, uid: Option<u32>) {
        let (control, _) = socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let cred = uid.map(|uid| Cred {
            pid: 1000 + id as i32,
            uid,
        });
        let client = Client {
            control,
            data: None,
            ip: None,
            queued: Vec::new(),
            waiting_writable: false,
            cred,
            published: None,
            reservations: 0,
        };
        daemon.clients.insert(id, client);
    }

    /// Sessions that never read hold together at most the daemon-wide
    /// bound beyond the share each may always queue; one that is
    /// written to after them still gets its share; a client's queue
    /// counts no more once it is gone.
    #[test]
    fn sessions_that_never_read_hold_a_bounded_total() {
        let mut daemon = idle_daemon();
        let mut unread = Vec::new();
        let packets = vec![0u8; 64 << 10];
        let (src, dst) = (
            "127.0.0.9:4791".parse().unwrap(),
            "127.0.0.8:4791".parse().unwrap(),
        );
        let sessions = 24;
        for id in 1..=sessions {
            add_client(&mut daemon, id, Some(0));
            let mut pair = two_fds();
            unread.push(pair.pop());
            daemon.clients.get_mut(&id).unwrap().data = pair.pop();
            for _ in 0..(MAX_QUEUED / packets.len()) {
                daemon.deliver(Some(id), &packets, (1024, 0), src, dst);
            }
        }
        let bound = MAX_QUEUED_TOTAL + sessions * (QUEUED_ANYWAY + packets.len());
        assert!(
            daemon.queued_total <= bound,
            "{} queued",
            daemon.queued_total
        );
        assert!(
            daemon.queued_total >= MAX_QUEUED_TOTAL,
            "the bound was reached"
        );
        let last = &daemon.clients[&sessions].queued;
        assert!(!last.is_empty(), "the last session got its share");
        let held: usize = daemon.clients.values().map(|c| c.queued.len()).sum();
        assert_eq!(daemon.queued_total, held);
        daemon.remove(1);
        let held: usize = daemon.clients.values().map(|c| c.queued.len()).sum();
        assert_eq!(
            daemon.queued_total, held,
            "the removed queue counts no more"
        );
    }

    /// Two descriptors that stand for a region and a doorbell.
    fn two_fds() -> Vec<OwnedFd> {
        let (a, b) = socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        vec![a, b]
    }

    /// The owner's region goes to the contexts of its user only: another
    /// uid, or a context whose credentials are unknown, gets EPERM.
    #[test]
    fn a_region_is_shown_to_its_users_contexts_only() {
        let mut daemon = idle_daemon();
        add_client(&mut daemon, 1, Some(1000));
        add_client(&mut daemon, 2, Some(1001));
        add_client(&mut daemon, 3, Some(1000));
        add_client(&mut daemon, 4, None);
        daemon.owners[7] = Some(1);
        let publish = Request::Publish { region_bytes: 4096 };
        let (reply, _) = daemon.answer(1, publish, two_fds());
        assert_eq!(reply, Reply::Done);
        let lookup = Request::Lookup { qpn: 7 << 12 | 5 };
        for asker in [2, 4] {
            let (reply, fds) = daemon.answer(asker, lookup, Vec::new());
            assert!(matches!(reply, Reply::Refused(libc::EPERM, _)), "{reply:?}");
            assert!(fds.is_empty());
        }
        let (reply, fds) = daemon.answer(3, lookup, Vec::new());
        let peer = Reply::Peer {
            pid: 1001,
            region_bytes: 4096,
        };
        assert_eq!((reply, fds.len()), (peer, 2));
    }

    #[test]
    fn capabilities_are_read_from_the_effective_set() {
        let status = "Name:\tx\nCapInh:\t0000000000000400\nCapEff:\t0000000000000000\n";
        assert!(!has_capability(status, CAP_NET_BIND_SERVICE));
        let status = "CapPrm:\t0\nCapEff:\t000001ffffffffff\nCapBnd:\t0\n";
        assert!(has_capability(status, CAP_NET_BIND_SERVICE));
        assert!(!has_capability("no such line", CAP_NET_BIND_SERVICE));
    }

    /// A port below 1024 needs CAP_NET_BIND_SERVICE, as the kernel's
    /// rdma_cm asks; a client whose process cannot be read has none.
    #[test]
    fn a_privileged_port_needs_the_capability() {
        let mut daemon = idle_daemon();
        add_client(&mut daemon, 1, Some(0));
        daemon
            .clients
            .get_mut(&1)
            .unwrap()
            .cred
            .as_mut()
            .unwrap()
            .pid = i32::MAX;
        let ip = "127.0.0.1".parse().unwrap();
        let tcp = 0x0106;
        let reply = daemon.reserve(1, tcp, ip, 80, false);
        assert!(
            matches!(reply, Reply::Refused(libc::EACCES, _)),
            "{reply:?}"
        );
        assert!(matches!(
            daemon.reserve(1, tcp, ip, 1024, false),
            Reply::Port(1024)
        ));
        assert!(matches!(
            daemon.reserve(1, tcp, ip, 0, false),
            Reply::Port(_)
        ));
    }

    /// A guest user's contexts get at most a quarter of the blocks of QP
    /// numbers; the daemon's own user is not held back.
    #[test]
    fn a_guest_user_holds_at_most_a_quarter_of_the_qp_numbers() {
        let mut daemon = idle_daemon();
        let me = rustix::process::geteuid().as_raw();
        let guest = me.wrapping_add(1);
        add_client(&mut daemon, 1, Some(guest));
        add_client(&mut daemon, 2, Some(guest));
        add_client(&mut daemon, 3, Some(me));
        let quarter = usize::from(MAX_SLOT) / GUEST_SHARE;
        for n in 0..quarter {
            let asker = 1 + n % 2;
            assert!(
                matches!(daemon.allocate(asker), Reply::Block(_)),
                "block {n}"
            );
        }
        let reply = daemon.allocate(2);
        assert!(
            matches!(reply, Reply::Refused(libc::ENOSPC, _)),
            "{reply:?}"
        );
        for _ in 0..quarter + 10 {
            assert!(matches!(daemon.allocate(3), Reply::Block(_)));
        }
        daemon.remove(1);
        assert!(matches!(daemon.allocate(2), Reply::Block(_)), "room again");
    }

    /// A guest user's connections get at most a quarter of the daemon's
    /// descriptors (each client may hold 4); the daemon's own user's are
    /// not counted.
    #[test]
    fn a_guest_user_holds_at_most_a_quarter_of_the_descriptors() {
        let mut daemon = idle_daemon();
        let me = rustix::process::geteuid().as_raw();
        let guest = me.wrapping_add(1);
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        let share =
            limit.expect("a descriptor limit") as usize / (FDS_PER_CLIENT as usize * GUEST_SHARE);
        for id in 1..=share {
            assert!(!daemon.guest_sessions_full(guest), "{id} of {share}");
            add_client(&mut daemon, id, Some(guest));
        }
        assert!(daemon.guest_sessions_full(guest));
        assert!(!daemon.guest_sessions_full(me));
    }

    /// A member whose last context's process still holds it is retired;
    /// one whose process let go of it (or is gone) serves again.
    #[test]
    fn a_member_still_held_by_its_process_is_known() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(still_held(std::process::id() as i32, &socket));
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let held = still_held(other.id() as i32, &socket);
        other.kill().unwrap();
        other.wait().unwrap();
        assert!(!held, "a process that never had it");
        assert!(!still_held(i32::MAX, &socket), "no such process");
    }

    /// A record longer than any request (a hello followed by garbage, cut
    /// to the daemon's buffer) and a request for QP numbers before any
    /// hello are refused with EPROTO; the connection goes on serving.
    #[test]
    fn a_record_too_long_and_qp_numbers_before_a_hello_are_eproto() {
        let (control, ip) = connect_to_test_daemon();
        let errno = |r: io::Result<u16>| r.err().and_then(|e| e.raw_os_error());
        assert_eq!(
            errno(ask(&control, &Request::MoreQpns, None)),
            Some(libc::EPROTO)
        );
        let mut long = Request::Hello { ip }.encode();
        long.resize(200, 0xAB);
        let pair = two_fds();
        let data = &pair[0];
        record::send(&control, &long, &[data.as_fd()]).unwrap();
        let mut buf = [0u8; 512];
        let (n, _) = record::recv(&control, &mut buf).unwrap();
        let e = Reply::decode(&buf[..n]).unwrap().into_block().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPROTO));
        assert!(ask(&control, &Request::Hello { ip }, Some(data)).is_ok());
    }

    /// A reservation on an address of no interface here is EADDRNOTAVAIL,
    /// as the kernel's rdma_bind_addr; one client holds at most
    /// MAX_RESERVATIONS (ENOMEM beyond), and a release gives room again.
    #[test]
    fn reservations_are_local_and_bounded() {
        let mut daemon = idle_daemon();
        add_client(&mut daemon, 1, Some(0));
        let nowhere: IpAddr = "192.0.2.1".parse().unwrap();
        let reply = daemon.reserve(1, 0x0106, nowhere, 7000, false);
        assert!(
            matches!(reply, Reply::Refused(libc::EADDRNOTAVAIL, _)),
            "{reply:?}"
        );
        let here: IpAddr = "127.0.0.1".parse().unwrap();
        daemon.clients.get_mut(&1).unwrap().reservations = MAX_RESERVATIONS - 1;
        assert_eq!(
            daemon.reserve(1, 0x0106, here, 7000, false),
            Reply::Port(7000)
        );
        let reply = daemon.reserve(1, 0x0106, here, 7001, false);
        assert!(
            matches!(reply, Reply::Refused(libc::ENOMEM, _)),
            "{reply:?}"
        );
        assert_eq!(daemon.release(1, 0x0106, here, 7000), Reply::Done);
        assert_eq!(
            daemon.reserve(1, 0x0106, here, 7001, false),
            Reply::Port(7001)
        );
    }

    /// A group beyond the daemon's most is refused with ENOMEM (rxe's
    /// answer past max_mcast_grp), and joins of groups already open, or
    /// once one closed, still go: one connection's joins took every
    /// descriptor of the daemon before.
    #[test]
    fn groups_beyond_the_most_are_enomem() {
        let mut daemon = idle_daemon();
        daemon.max_groups = 2;
        let ip = IpAddr::V4(crate::test_loopback_address());
        let uid = daemon.uid;
        for id in [1, 2] {
            add_client(&mut daemon, id, Some(uid));
            let (reply, _) = daemon.hello(id, ip, two_fds().pop());
            assert!(matches!(reply, Reply::Block(_)), "{reply:?}");
        }
        let group = |n: u8| IpAddr::V4(std::net::Ipv4Addr::new(239, 7, 7, n));
        let errno = |r: io::Result<()>| r.err().and_then(|e| e.raw_os_error());
        assert_eq!(errno(daemon.join(1, group(1))), None);
        assert_eq!(errno(daemon.join(1, group(2))), None);
        assert_eq!(errno(daemon.join(1, group(3))), Some(libc::ENOMEM));
        assert_eq!(errno(daemon.join(2, group(2))), None, "an open group");
        daemon.leave(1, group(1));
        assert_eq!(errno(daemon.join(2, group(3))), None, "room again");
    }

    /// A member retired because its process still held it (here a child
    /// that inherited it, as a fork with the device open does) serves
    /// again once that process lets go of it: contexts coming and going
    /// after it do not each cost the daemon a new member.
    #[test]
    fn a_retired_member_serves_again_once_its_process_lets_go() {
        retired_until_the_holder_ends(|| {
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap()
        });
    }

    /// A process whose main thread has ended while another lives on with
    /// the member (`/proc/PID/fd` then lists nothing) still holds it.
    #[test]
    fn a_member_held_by_a_thread_outliving_its_main_thread_is_retired() {
        retired_until_the_holder_ends(|| {
            let main_thread_ends = "import ctypes, threading, time\n\
                threading.Thread(target=time.sleep, args=(30,)).start()\n\
                ctypes.CDLL(None).syscall(60, 0)\n";
            let child = std::process::Command::new("/usr/bin/python3")
                .args(["-c", main_thread_ends])
                .spawn()
                .expect("/usr/bin/python3 runs (make test installs it)");
            let stat = format!("/proc/{}/stat", child.id());
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            let main_ended = || {
                let stat = std::fs::read_to_string(&stat).unwrap_or_default();
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('Z'))
            };
            while !main_ended() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "main thread never ended"
                );
                std::thread::yield_now();
            }
            child
        });
    }

    /// Client 2's member, inherited by the process `spawn_holder` starts,
    /// serves no other context after client 2 leaves until that process
    /// has ended.
    fn retired_until_the_holder_ends(spawn_holder: impl FnOnce() -> std::process::Child) {
        let mut daemon = idle_daemon();
        let ip = IpAddr::V4(crate::test_loopback_address());
        let uid = daemon.uid;
        let hello = |daemon: &mut Daemon, id: usize| {
            add_client(daemon, id, Some(uid));
            let (reply, direct) = daemon.hello(id, ip, two_fds().pop());
            assert!(matches!(reply, Reply::Block(_)), "{reply:?}");
            direct.expect("a member")
        };
        let members = |daemon: &Daemon| {
            let slot = daemon.find(ip).unwrap();
            daemon.udp[slot]
                .as_ref()
                .unwrap()
                .members
                .as_ref()
                .unwrap()
                .len()
        };
        let _keeps_the_address = hello(&mut daemon, 1);
        let direct = hello(&mut daemon, 2);
        // The holder inherits client 2's member (dup: no CLOEXEC).
        let inherited = rustix::io::dup(&direct).unwrap();
        // Killed at the end, and if an assertion fails before.
        struct Holder(std::process::Child);
        impl Drop for Holder {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let holder = Holder(spawn_holder());
        drop((inherited, direct));
        let pid = holder.0.id() as i32;
        daemon
            .clients
            .get_mut(&2)
            .unwrap()
            .cred
            .as_mut()
            .unwrap()
            .pid = pid;
        daemon.remove(2);
        let _third = hello(&mut daemon, 3);
        assert_eq!(members(&daemon), 3, "the retired member serves nobody");
        drop(holder);
        let _fourth = hello(&mut daemon, 4);
        assert_eq!(
            members(&daemon),
            3,
            "the holder let go: its member serves again"
        );
    }

    #[test]
    fn a_device_address_is_unicast() {
        for bad in ["0.0.0.0", "::", "224.0.0.1", "255.255.255.255", "ff02::1"] {
            assert!(!is_device_address(bad.parse().unwrap()), "{bad}");
        }
        for good in ["127.0.0.1", "10.1.2.3", "::1", "fd00::2"] {
            assert!(is_device_address(good.parse().unwrap()), "{good}");
        }
    }

    /// A client that becomes another user after connecting (a privileged
    /// program dropping its rights) is that user from its next record on.
    #[test]
    fn a_client_that_changes_user_is_judged_as_it_is_now() {
        let mut daemon = idle_daemon();
        add_client(&mut daemon, 1, Some(0));
        add_client(&mut daemon, 2, Some(0));
        daemon.owners[7] = Some(1);
        let publish = Request::Publish { region_bytes: 4096 };
        assert_eq!(daemon.answer(1, publish, two_fds()).0, Reply::Done);
        let lookup = Request::Lookup { qpn: 7 << 12 | 5 };
        daemon.clients.get_mut(&2).unwrap().sent_as(Some(1001));
        let (reply, fds) = daemon.answer(2, lookup, Vec::new());
        assert!(matches!(reply, Reply::Refused(libc::EPERM, _)), "{reply:?}");
        assert!(fds.is_empty());
        daemon.clients.get_mut(&2).unwrap().sent_as(None);
        let (reply, _) = daemon.answer(2, lookup, Vec::new());
        assert!(matches!(reply, Reply::Refused(libc::EPERM, _)), "{reply:?}");
    }

    /// A memfd of `bytes` bytes, sealed against shrinking if `sealed`.
    fn memfd(bytes: u64, sealed: bool) -> OwnedFd {
        use rustix::fs::{MemfdFlags, SealFlags};
        let fd =
            rustix::fs::memfd_create("t", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::ftruncate(&fd, bytes).unwrap();
        if sealed {
            rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK).unwrap();
        }
        fd
    }

    fn gone_word(region: &OwnedFd) -> [u8; 8] {
        let mut word = [0u8; 8];
        let offset = crate::same_host::layout::GONE_OFFSET;
        rustix::io::pread(region, &mut word, offset).unwrap();
        word
    }

    /// When a context's connection closes (exit, kill, exec, closing the
    /// device), the daemon marks its region gone, so that peers stop
    /// reaching its pid, which may name a new image; only a region (a
    /// memfd sealed against shrinking) is written.
    #[test]
    fn a_context_that_leaves_has_its_region_marked_gone() {
        let mut daemon = idle_daemon();
        for (id, sealed) in [(1, true), (2, false)] {
            add_client(&mut daemon, id, Some(1000));
            let region = memfd(4096, sealed);
            let fds = vec![region.try_clone().unwrap(), two_fds().pop().unwrap()];
            let publish = Request::Publish { region_bytes: 4096 };
            assert_eq!(daemon.answer(id, publish, fds).0, Reply::Done);
            assert_eq!(gone_word(&region), [0; 8]);
            daemon.remove(id);
            let marked = if sealed { [0xFF; 8] } else { [0; 8] };
            assert_eq!(gone_word(&region), marked, "sealed {sealed}");
        }
    }

    /// A publish carries exactly a region and a doorbell; anything else is
    /// refused with EPROTO and keeps nothing.
    #[test]
    fn a_publish_without_exactly_two_descriptors_is_refused() {
        let mut daemon = idle_daemon();
        add_client(&mut daemon, 1, Some(0));
        daemon.owners[9] = Some(1);
        let publish = Request::Publish { region_bytes: 64 };
        let mut three = two_fds();
        three.extend(two_fds().pop());
        let mut one = two_fds();
        one.pop();
        for fds in [Vec::new(), one, three] {
            let (reply, _) = daemon.answer(1, publish, fds);
            assert!(
                matches!(reply, Reply::Refused(libc::EPROTO, _)),
                "{reply:?}"
            );
        }
        let (reply, _) = daemon.answer(1, Request::Lookup { qpn: 9 << 12 }, Vec::new());
        assert!(
            matches!(reply, Reply::Refused(libc::ENOENT, _)),
            "{reply:?}"
        );
    }

    /// Port 0 takes every ephemeral port once, then none is left (in
    /// that port space only); a listener on the address itself is found
    /// before one on the unspecified address, and a reservation that does
    /// not listen is never found.
    #[test]
    fn ephemeral_ports_run_out_and_listeners_are_found_by_address() {
        let mut daemon = idle_daemon();
        add_client(&mut daemon, 1, Some(0));
        add_client(&mut daemon, 2, Some(0));
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let mut seen = std::collections::HashSet::new();
        for _ in EPHEMERAL_PORTS.0..=EPHEMERAL_PORTS.1 {
            let Reply::Port(p) = daemon.reserve(1, 0x0106, ip, 0, false) else {
                panic!("refused early")
            };
            assert!((EPHEMERAL_PORTS.0..=EPHEMERAL_PORTS.1).contains(&p));
            assert!(seen.insert(p), "port {p} twice");
        }
        let reply = daemon.reserve(2, 0x0106, ip, 0, false);
        assert!(
            matches!(reply, Reply::Refused(libc::EADDRNOTAVAIL, _)),
            "{reply:?}"
        );
        assert!(matches!(
            daemon.reserve(2, 0x0111, ip, 0, false),
            Reply::Port(_)
        ));
        daemon.remove(1);
        assert!(daemon.ports.keys().all(|&(ps, _)| ps == 0x0111));
        add_client(&mut daemon, 1, Some(0));

        let other: IpAddr = "127.0.0.2".parse().unwrap();
        let any: IpAddr = "::".parse().unwrap();
        assert_eq!(
            daemon.reserve(1, 0x013F, ip, 9009, false),
            Reply::Port(9009)
        );
        assert_eq!(
            daemon.listener(0x013F, 9009, ip, true),
            None,
            "not listening"
        );
        assert_eq!(daemon.listen(1, 0x013F, ip, 9009), Reply::Done);
        assert_eq!(daemon.listener(0x013F, 9009, ip, true), Some(1));
        assert_eq!(daemon.listener(0x013F, 9009, other, true), None);
        assert_eq!(daemon.listener(0x0106, 9009, ip, true), None);
        assert_eq!(daemon.release(1, 0x013F, ip, 9009), Reply::Done);
        assert_eq!(
            daemon.reserve(2, 0x013F, any, 9009, false),
            Reply::Port(9009)
        );
        assert_eq!(daemon.listen(2, 0x013F, any, 9009), Reply::Done);
        assert_eq!(daemon.listener(0x013F, 9009, other, true), Some(2));
    }

    /// As the kernel's `cma_check_port`: the IPv4 and IPv6 wildcards
    /// share a port when both are address-family only, and each takes the
    /// requests of its family; an IPv6 wildcard that is not conflicts
    /// with the IPv4 one, and takes both families.
    #[test]
    fn address_family_only_wildcards_of_two_families_share_a_port() {
        let mut daemon = idle_daemon();
        add_client(&mut daemon, 1, Some(0));
        add_client(&mut daemon, 2, Some(0));
        let (any4, any6): (IpAddr, IpAddr) = ("0.0.0.0".parse().unwrap(), "::".parse().unwrap());
        let (v4, v6): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "::1".parse().unwrap());
        let tcp = 0x0106;
        assert_eq!(daemon.reserve(1, tcp, any4, 9100, true), Reply::Port(9100));
        let refused = daemon.reserve(2, tcp, any6, 9100, false);
        assert!(
            matches!(refused, Reply::Refused(libc::EADDRNOTAVAIL, _)),
            "{refused:?}"
        );
        assert_eq!(daemon.reserve(2, tcp, any6, 9100, true), Reply::Port(9100));
        let refused = daemon.reserve(2, tcp, v4, 9100, true);
        assert!(
            matches!(refused, Reply::Refused(libc::EADDRNOTAVAIL, _)),
            "{refused:?}"
        );
        assert_eq!(daemon.listen(1, tcp, any4, 9100), Reply::Done);
        assert_eq!(
            daemon.listener(tcp, 9100, v6, false),
            Some(1),
            "the only listener"
        );
        assert_eq!(daemon.listen(2, tcp, any6, 9100), Reply::Done);
        assert_eq!(daemon.listener(tcp, 9100, v4, true), Some(1));
        assert_eq!(daemon.listener(tcp, 9100, v6, false), Some(2));
        // An IPv6 wildcard that takes both families.
        assert_eq!(daemon.reserve(1, tcp, any6, 9101, false), Reply::Port(9101));
        assert_eq!(daemon.listen(1, tcp, any6, 9101), Reply::Done);
        assert_eq!(daemon.listener(tcp, 9101, v4, true), Some(1));
        let refused = daemon.reserve(2, tcp, any4, 9101, true);
        assert!(
            matches!(refused, Reply::Refused(libc::EADDRNOTAVAIL, _)),
            "{refused:?}"
        );
    }

    /// UDP 4791 on a device address closes with the last context that
    /// has the address: hellos naming address after address, one
    /// connection each, held a socket each until the daemon ended.
    #[test]
    fn a_device_address_closes_with_its_last_context() {
        let mut daemon = idle_daemon();
        let ip = IpAddr::V4(crate::test_loopback_address());
        let uid = daemon.uid;
        for id in [1, 2] {
            add_client(&mut daemon, id, Some(uid));
            let (reply, direct) = daemon.hello(id, ip, two_fds().pop());
            assert!(matches!(reply, Reply::Block(_)), "{reply:?}");
            drop(direct);
        }
        daemon.remove(1);
        assert!(daemon.find(ip).is_some(), "another context has the address");
        daemon.remove(2);
        assert!(daemon.find(ip).is_none(), "its socket is closed");
        let addr = SocketAddr::new(ip, udp_port());
        assert!(bind_udp(addr).is_ok(), "nobody holds {addr}");
    }

    /// A hello without a data socket, or a second hello on one
    /// connection, is refused with EPROTO, and the errno reaches the
    /// context (the reason goes to its log).
    #[test]
    fn a_hello_without_a_data_socket_or_a_second_one_is_refused() {
        let (control, ip) = connect_to_test_daemon();
        let hello = Request::Hello { ip };
        let e = ask(&control, &hello, None).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPROTO));
        let (data, _keep) = socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let block = ask(&control, &hello, Some(&data)).unwrap();
        assert!((1..=MAX_SLOT).contains(&block));
        let e = ask(&control, &hello, Some(&data)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPROTO));
        let more = ask(&control, &Request::MoreQpns, None).unwrap();
        assert_ne!(more, block, "still one client, with one more block");
    }

    /// A request whose descriptors did not all reach the daemon (the
    /// kernel dropped what found no room: `MSG_CTRUNC`, as when the daemon
    /// is out of descriptors) is refused with EMFILE, not with the EPROTO
    /// of a hello that came without one. Sixteen descriptors overflow the
    /// room the daemon keeps for two (and the sender's credentials).
    #[test]
    fn a_request_whose_descriptor_was_dropped_is_emfile() {
        let (control, ip) = connect_to_test_daemon();
        record::send_with_too_many_fds(&control, &Request::Hello { ip }.encode());
        let mut buf = [0u8; 512];
        let (n, _) = record::recv(&control, &mut buf).unwrap();
        let e = Reply::decode(&buf[..n]).unwrap().into_block().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EMFILE));
    }
}
