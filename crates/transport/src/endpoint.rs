//! A context's place on the network: the UDP socket it sends from, its
//! session with the host daemon, which passes on (or steers to the
//! context's own socket) the packets that arrive at UDP 4791 for its QP
//! numbers, and its sockets on the multicast groups it is in.

use crate::daemon::protocol::FrameHeader;
use crate::daemon::{DaemonAddress, LookupRefused, PeerRegion, Session};
use crate::group_socket::GroupSockets;
use crate::queue_watch::QueueWatch;
use crate::slots::qpns_of;
use nix::sys::socket::sockopt::{
    IpRecvTos, Ipv6RecvTClass, RcvBufForce, SndBufForce, UdpGroSegment,
};
use nix::sys::socket::{recvmsg, setsockopt, ControlMessageOwned, MsgFlags, SockaddrStorage};
use rustix::net::sockopt::{set_ip_mtu_discover, Ipv4PathMtuDiscovery};
use socket2::Socket;
use softverbs_wire::mad::MAD_LEN;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::ops::Range;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Socket buffer size asked for: a burst of a few hundred MTU-sized
/// packets fits, so a busy loopback rarely drops.
const SOCKET_BUFFER: usize = 4 << 20;
/// The receive buffer asked for past `rmem_max` where that is allowed.
const FORCED_RECV_BUFFER: usize = 32 << 20;
/// Sets the socket buffers (bytes: `RECV` for both, or `RECV,SEND`)
/// instead of the defaults above, past `rmem_max`/`wmem_max` where that is
/// allowed: to run as a host with other limits would (`make test` runs its
/// load test with a non-root user's default buffer this way, and makes a
/// sending socket run out of room with a small send buffer).
const SOCKET_BUFFER_VAR: &str = "SOFTVERBS_SOCKET_BUFFER";

/// A context's socket and daemon session, and the slots (blocks of QP
/// numbers) it holds.
#[derive(Debug)]
pub struct Endpoint {
    socket: std::net::UdpSocket,
    local: SocketAddr,
    session: Session,
    slots: Vec<u16>,
    /// Room for one datagram (a GRO batch) from the steered socket.
    direct_buf: Vec<u8>,
    cmsg: Vec<u8>,
    /// How full the steered socket's queue is (`queue_watch.rs`).
    queue: QueueWatch,
    /// The last receive stopped before the steered socket was empty, to
    /// let what it owes the senders leave (`MARKED_AT_MOST`).
    more_waiting: bool,
    /// The daemon's stream has frames a poll should read.
    stream_waiting: Arc<StreamWaiting>,
    /// The context's own sockets on the multicast groups it is in
    /// (`group_socket.rs`), where the daemon steers; read as the steered
    /// socket is. Without a steered socket, the daemon passes the groups'
    /// datagrams on.
    groups: GroupSockets,
}

/// Whether the daemon's stream has frames nobody read yet, as the
/// progress thread's poller reported them (the stream carries CM
/// messages, and multicast datagrams where the daemon passes them on).
/// While the progress thread has lent the steered socket to an
/// application spinning on its CQs, it notes them here instead of
/// contending with the spinning thread for the driver lock, and that
/// thread's next poll (or any verb that receives before it runs,
/// `Driver::run_locked`) reads the stream: a multicast datagram that came
/// through the daemon waited for the lock hand-off, 570 us typical in
/// `ib_send_lat -c UD -g` against 5.5 us for unicast.
#[derive(Debug, Default)]
pub(crate) struct StreamWaiting(AtomicBool);

impl StreamWaiting {
    /// The poller reported frames on the stream.
    pub(crate) fn note(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether frames were noted since the last call. A plain load first:
    /// every poll asks, and a swap would take the cache line from the
    /// progress thread each time.
    pub(crate) fn take(&self) -> bool {
        self.0.load(Ordering::Acquire) && self.0.swap(false, Ordering::AcqRel)
    }
}

impl Endpoint {
    /// Opens a sending socket on `ip` (any port) and a session with the
    /// daemon (started if none runs), which gives the first slot.
    pub fn open(ip: IpAddr, daemon: &DaemonAddress) -> io::Result<Endpoint> {
        let socket = bind_udp(SocketAddr::new(ip, 0))?;
        send_multicast_from(&socket, ip)?;
        let local = socket.local_addr()?;
        let (session, slot) = Session::open(daemon, ip)?;
        Ok(Endpoint {
            socket,
            local,
            session,
            slots: vec![slot],
            direct_buf: vec![0; 1 << 16],
            cmsg: cmsg_buffer(),
            queue: QueueWatch::default(),
            more_waiting: false,
            stream_waiting: Arc::default(),
            groups: GroupSockets::new()?,
        })
    }

    /// The slots held, the first one first.
    pub fn slots(&self) -> &[u16] {
        &self.slots
    }

    /// The QP numbers of the first slot.
    pub fn qpns(&self) -> Range<u32> {
        qpns_of(self.slots[0])
    }

    /// Asks the daemon for one more slot; returns its QP numbers.
    pub fn add_slot(&mut self) -> io::Result<Range<u32>> {
        let slot = self.session.more_qpns()?;
        self.slots.push(slot);
        Ok(qpns_of(slot))
    }

    /// Receives the datagrams of multicast `group` from now on: on a
    /// socket of its own where the daemon steers (polled through
    /// [`Endpoint::groups_fd`]), else through the daemon.
    pub fn join(&mut self, group: IpAddr) -> io::Result<()> {
        if self.session.direct().is_none() {
            return self.session.join(group);
        }
        self.groups.join(group, self.local.ip())
    }

    /// No more datagrams of `group`.
    pub fn leave(&mut self, group: IpAddr) -> io::Result<()> {
        if self.groups.leave(group) {
            return Ok(());
        }
        self.session.leave(group)
    }

    /// Whether this endpoint receives `group` on a socket of its own.
    #[cfg(test)]
    fn has_group_socket(&self, group: IpAddr) -> bool {
        self.groups.has(group)
    }

    /// The descriptor to poll for datagrams on the group sockets (an
    /// epoll set, readable while one holds some).
    pub fn groups_fd(&self) -> BorrowedFd<'_> {
        self.groups.set_fd()
    }

    /// Publishes this context's same-host region and doorbell through the
    /// daemon ([`Session::publish`]).
    pub fn publish(
        &mut self,
        region: BorrowedFd<'_>,
        doorbell: BorrowedFd<'_>,
        bytes: u64,
    ) -> io::Result<()> {
        self.session.publish(region, doorbell, bytes)
    }

    /// The same-host context holding `qpn`, if the daemon may say
    /// ([`Session::lookup`]).
    pub fn lookup(&mut self, qpn: u32) -> io::Result<Result<PeerRegion, LookupRefused>> {
        self.session.lookup(qpn)
    }

    /// Reserves `port` (0: a free ephemeral one, from 32768..=60999) of
    /// rdma_cm port space `ps` on `ip` (the unspecified address: every
    /// address) in the host's port space, for this endpoint until it is
    /// released or the endpoint closes; returns the port
    /// ([`Session::reserve`] says which errors mean what).
    pub fn reserve(&mut self, ps: u16, ip: IpAddr, port: u16, afonly: bool) -> io::Result<u16> {
        self.session.reserve(ps, ip, port, afonly)
    }

    /// Makes this endpoint's reservation of (`ps`, `ip`, `port`) a
    /// listener: the CM's REQs and SIDR_REQs for that service then arrive
    /// here (through [`Endpoint::receive`]).
    pub fn listen(&mut self, ps: u16, ip: IpAddr, port: u16) -> io::Result<()> {
        self.session.listen(ps, ip, port)
    }

    /// Gives a reservation back.
    pub fn release(&mut self, ps: u16, ip: IpAddr, port: u16) -> io::Result<()> {
        self.session.release(ps, ip, port)
    }

    /// Tells the daemon a CM REQ went to `peer` ([`Session::requesting`]).
    pub fn requesting(
        &mut self,
        peer: IpAddr,
        comm_id: u32,
        ca_guid: u64,
        tid: u64,
    ) -> io::Result<()> {
        self.session.requesting(peer, comm_id, ca_guid, tid)
    }

    /// Tells the daemon a CM REP went to `peer` ([`Session::replying`]).
    pub fn replying(&mut self, peer: IpAddr, comm_id: u32, remote_comm_id: u32) -> io::Result<()> {
        self.session.replying(peer, comm_id, remote_comm_id)
    }

    /// Tells the daemon of a CM message this endpoint sent to `dst` that
    /// ends a connection or request (a DREQ, DREP or REJ; any other MAD
    /// is not its business): it does not see it go, and would send it
    /// again in this process's name when it exits.
    pub fn sent_gsi(&mut self, dst: IpAddr, mad: &[u8; MAD_LEN]) -> io::Result<()> {
        use crate::daemon::protocol::Ending;
        use softverbs_wire::cm::CmMessage;
        let (comm_id, remote_comm_id, message) = match CmMessage::parse_mad(mad) {
            Ok((_, CmMessage::Dreq(m))) => (m.local_comm_id, m.remote_comm_id, Ending::Dreq),
            Ok((_, CmMessage::Drep(m))) => (m.local_comm_id, m.remote_comm_id, Ending::Drep),
            Ok((_, CmMessage::Rej(m))) => (m.local_comm_id, m.remote_comm_id, Ending::Rej),
            _ => return Ok(()),
        };
        self.session
            .disconnecting(dst, comm_id, remote_comm_id, message)
    }

    /// Sends `mad` to QP1 at `dst` (UDP 4791) from this endpoint's socket,
    /// as one datagram ([`crate::gsi::gsi_packet`]). `EAFNOSUPPORT` when
    /// `dst` is of the other IP family than the endpoint's address.
    pub fn send_gsi(&self, dst: IpAddr, mad: &[u8; MAD_LEN]) -> io::Result<()> {
        let port = crate::daemon::udp_port();
        let to = match (dst, self.local) {
            (IpAddr::V4(ip), SocketAddr::V4(_)) => SocketAddr::new(ip.into(), port),
            // A link-local peer is reached through our own interface.
            (IpAddr::V6(ip), SocketAddr::V6(l)) => {
                let link_local = ip.segments()[0] & 0xffc0 == 0xfe80;
                let scope = if link_local { l.scope_id() } else { 0 };
                SocketAddrV6::new(ip, port, 0, scope).into()
            }
            _ => return Err(io::Error::from_raw_os_error(libc::EAFNOSUPPORT)),
        };
        let packet = crate::gsi::gsi_packet(self.local, to, mad)?;
        // Captured before it leaves: the answer it brings, captured by
        // another thread, must not come first in the file.
        if let Ok(flow) = softverbs_wire::Flow::from_sockets(self.local, to) {
            crate::capture::sent(Some(flow), 0, packet.len(), &packet);
        }
        self.socket.send_to(&packet, to)?;
        Ok(())
    }

    /// The send window for the engine
    /// ([`softverbs_engine::DeviceConfig::send_window_bytes`]), in what
    /// packets cost the receiving socket ([`Endpoint::packet_cost`]):
    /// five eighths of the receive buffer packets arrive in, as the
    /// kernel counts it (twice the size asked for), and at most 8 MiB
    /// (about 1,000 packets of 4 KiB, what a larger buffer allowed before
    /// packets were counted at their cost). Of the rest, a quarter is
    /// what Linux keeps charged for datagrams already read: it gives
    /// their memory back in batches of a quarter of the buffer while
    /// more wait (`udp_rmem_release`), so a reader that is behind holds
    /// three quarters of unread datagrams at most (with seven eighths,
    /// one SEND stream at Debian's default `rmem_max` lost datagrams in
    /// 4 runs of 10 with no more than its window unacknowledged);
    /// an eighth is left for the ACKs that share a requester's buffer. A
    /// peer set up as this host is never sent more than it holds; peers
    /// on this host are set up alike, another host's softverbs should be.
    pub fn send_window(&self) -> u32 {
        let buffer = match self.session.direct() {
            Some(socket) => socket2::SockRef::from(socket).recv_buffer_size(),
            None => socket2::SockRef::from(&self.socket).recv_buffer_size(),
        };
        send_window_for(buffer.ok())
    }

    /// What a packet costs the receiving socket's buffer, per path MTU
    /// (`receive_cost.rs`).
    pub fn packet_cost(&self) -> softverbs_engine::PacketCost {
        softverbs_engine::PacketCost::from_fn(crate::receive_cost::udp_receive_cost)
    }

    /// The sending socket's address.
    pub fn local(&self) -> SocketAddr {
        self.local
    }

    /// The socket packets leave from.
    pub fn socket(&self) -> &std::net::UdpSocket {
        &self.socket
    }

    /// The descriptor arriving packets are read from, to poll.
    pub fn data_fd(&self) -> BorrowedFd<'_> {
        self.session.data_fd()
    }

    /// Where the progress thread notes frames on the daemon's stream for
    /// a verb to read.
    pub(crate) fn stream_waiting(&self) -> Arc<StreamWaiting> {
        Arc::clone(&self.stream_waiting)
    }

    /// The steered socket this context's packets arrive on (if the
    /// daemon gave it one), to poll.
    pub fn direct_socket(&self) -> Option<&std::net::UdpSocket> {
        self.session.direct()
    }

    /// Closes the steered socket and the group sockets, once the daemon
    /// is gone: the context receives nothing more.
    pub fn close_receivers(&mut self) {
        self.session.close_direct();
        self.groups.clear();
    }

    /// Hands the packets waiting to `frame`: the datagrams on the steered
    /// socket and on each group socket (what `by` takes of them), then
    /// the frames the daemon passed on, if the receiver is the progress
    /// thread after a look at its poller, or there is no steered socket,
    /// or frames were noted on the stream ([`StreamWaiting`]). Each comes
    /// with whether it is marked: the steered socket's queue was filling
    /// with several senders' data or UC or UD data (`queue_watch.rs`).
    /// Whether it read the stream because frames were noted on it (for a
    /// receiver that would not have read it otherwise).
    pub fn receive(
        &mut self,
        by: Receiver,
        mut frame: impl FnMut(FrameHeader, &[u8], bool),
    ) -> io::Result<bool> {
        let steered = self.session.direct().is_some();
        self.receive_direct(by, &mut frame);
        self.receive_groups(by, &mut frame);
        let noted = self.stream_waiting.take();
        let reads_anyway = !steered || by == Receiver::ProgressThread;
        if !reads_anyway && !noted {
            return Ok(false);
        }
        self.session
            .receive(|header, bytes| frame(header, bytes, false))?;
        Ok(noted && !reads_anyway)
    }

    /// Whether the last receive left datagrams on the steered socket for
    /// the next, so that what the engine owes the senders (CNPs, ACKs with
    /// BECN) could leave first: its caller steps again at once.
    pub fn more_waiting(&self) -> bool {
        self.more_waiting
    }

    fn receive_direct(&mut self, by: Receiver, frame: &mut impl FnMut(FrameHeader, &[u8], bool)) {
        self.more_waiting = false;
        let Some(socket) = self.session.direct() else {
            return;
        };
        // A packet for a QP of another context (the sender's datagrams
        // coalesced by a NIC's GRO before the kernel steered them whole)
        // is dropped by the engine as for an unknown QP, and resent.
        let dst = SocketAddr::new(self.local.ip(), crate::daemon::udp_port());
        let (buf, cmsg, queue) = (&mut self.direct_buf, &mut self.cmsg, &mut self.queue);
        let one = by == Receiver::Poll;
        // While the queue fills faster than it is read, reading until it
        // is empty never ends, and the congestion notices owed for what
        // was read never leave: stop after a while of marked packets.
        let mut marked_bytes = 0;
        let read = read_datagrams(socket, buf, cmsg, one, |bytes, src, (segment, class)| {
            let opcode = bytes.first().copied().unwrap_or_default();
            let marked = queue.read(socket, src, bytes.len(), (usize::from(segment), opcode));
            let header = FrameHeader {
                src,
                dst,
                segment,
                class,
            };
            frame(header, bytes, marked);
            marked_bytes += if marked { bytes.len() } else { 0 };
            marked_bytes < MARKED_AT_MOST
        });
        match read {
            Read::Emptied => queue.emptied(),
            Read::Stopped => self.more_waiting = true,
            Read::Ended => {}
        }
    }

    /// The datagrams waiting on the group sockets, what `by` takes of
    /// each socket's as of the steered socket's.
    fn receive_groups(&mut self, by: Receiver, frame: &mut impl FnMut(FrameHeader, &[u8], bool)) {
        let (buf, cmsg) = (&mut self.direct_buf, &mut self.cmsg);
        let one = by == Receiver::Poll;
        self.groups.each_ready(one, |group, socket| {
            let dst = SocketAddr::new(group, crate::daemon::udp_port());
            read_datagrams(socket, buf, cmsg, one, |bytes, src, (segment, class)| {
                let header = FrameHeader {
                    src,
                    dst,
                    segment,
                    class,
                };
                frame(header, bytes, false);
                true
            });
        });
    }
}

/// Bytes of marked datagrams one receive reads at most from the steered
/// socket: at 4 GB/s, 64 us.
const MARKED_AT_MOST: usize = 256 << 10;

/// How [`read_datagrams`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// It found the socket empty.
    Emptied,
    /// Its caller asked it to stop, with datagrams perhaps left.
    Stopped,
    /// It read the one asked for, or receiving kept failing.
    Ended,
}

/// Reads the datagrams waiting on `socket` (just one if `one`) into `buf`,
/// handing each to `got` with its sender, segment size (UDP GRO) and
/// traffic class, until `got` says to stop (returns false).
fn read_datagrams(
    socket: &std::net::UdpSocket,
    buf: &mut [u8],
    cmsg: &mut [u8],
    one: bool,
    mut got: impl FnMut(&[u8], SocketAddr, (u16, u8)) -> bool,
) -> Read {
    let mut errors = 0;
    loop {
        match recv_segments(socket, buf, cmsg) {
            Ok(Datagrams {
                len,
                src,
                segment,
                class,
            }) => {
                let segment = segment.unwrap_or(len).min(usize::from(u16::MAX)) as u16;
                let go_on = got(&buf[..len], src, (segment, class));
                if one {
                    return Read::Ended;
                }
                if !go_on {
                    return Read::Stopped;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Read::Emptied,
            // A failed receive usually consumed its datagram; one that
            // keeps failing must not hold the driver lock forever.
            Err(_) if errors < 64 => errors += 1,
            Err(_) => return Read::Ended,
        }
    }
}

/// Who receives, which decides how much of the steered socket's queue
/// (and each group socket's) one receive takes. Only the progress thread
/// after a look reads the daemon's stream every time; the others read it
/// when frames were noted on it ([`StreamWaiting`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receiver {
    /// The progress thread after a look at its poller: every datagram
    /// waiting, then the daemon's frames.
    ProgressThread,
    /// A verb other than a poll, or the progress thread lingering between
    /// two looks at its poller: every datagram waiting.
    Verb,
    /// A poll of a CQ: at most one datagram. Only a second system call
    /// finding the queue empty would say that it held one, and on a
    /// request-reply exchange (wire `ib_send_lat`) that call sat between
    /// the request's completion and the reply's post. What is left waits
    /// for the next poll, or wakes the progress thread if the socket is
    /// not lent (its poller reports every datagram arriving, and its step
    /// takes all that waits).
    Poll,
}

/// Multicast datagrams leave through the device's interface (not the
/// default route's) and come back to this host's members too.
fn send_multicast_from(socket: &std::net::UdpSocket, ip: IpAddr) -> io::Result<()> {
    let socket = socket2::SockRef::from(socket);
    match ip {
        IpAddr::V4(v4) => socket.set_multicast_if_v4(&v4)?,
        IpAddr::V6(_) => {
            if let Some(index) = crate::netif::ifindex_of(ip) {
                socket.set_multicast_if_v6(index)?;
            }
        }
    }
    Ok(())
}

/// What [`recv_segments`] received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagrams {
    /// Bytes received.
    pub len: usize,
    /// The sender.
    pub src: SocketAddr,
    /// When the kernel coalesced several packets of one flow (UDP GRO,
    /// which [`bind_udp`] turns on), the size of each but the last.
    pub segment: Option<usize>,
    /// The traffic class of their IP header (`IP_RECVTOS`,
    /// `IPV6_RECVTCLASS`, which [`bind_udp`] turns on; 0 if not said).
    pub class: u8,
}

/// Receives one datagram from `socket` into `buf`. `cmsg` is room for
/// its control messages ([`cmsg_buffer`]).
pub fn recv_segments(
    socket: &impl AsRawFd,
    buf: &mut [u8],
    cmsg: &mut [u8],
) -> io::Result<Datagrams> {
    let mut iov = [IoSliceMut::new(buf)];
    let msg =
        recvmsg::<SockaddrStorage>(socket.as_raw_fd(), &mut iov, Some(cmsg), MsgFlags::empty())
            .map_err(io::Error::from)?;
    let from = msg
        .address
        .and_then(|a| socket_addr(&a))
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))?;
    let (mut segment, mut class) = (None, 0);
    for message in msg.cmsgs().into_iter().flatten() {
        match message {
            ControlMessageOwned::UdpGroSegments(s) if s > 0 => segment = Some(s as usize),
            ControlMessageOwned::Ipv4Tos(tos) => class = tos,
            ControlMessageOwned::Ipv6TClass(tc) => class = tc as u8,
            _ => {}
        }
    }
    Ok(Datagrams {
        len: msg.bytes,
        src: from,
        segment,
        class,
    })
}

/// Room for the control messages [`recv_segments`] reads: the UDP GRO
/// segment size and the traffic class.
pub fn cmsg_buffer() -> Vec<u8> {
    nix::cmsg_space!(i32, i32)
}

fn socket_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    a.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
}

/// The send window for a receive buffer of `buffer` bytes as the kernel
/// reports it (`Endpoint::send_window`); the engine's default when the
/// size is unknown.
fn send_window_for(buffer: Option<usize>) -> u32 {
    let default = softverbs_engine::DeviceConfig::DEFAULT_SEND_WINDOW;
    let most = 2 * default;
    buffer.map_or(default, |b| {
        u32::try_from(b / 8 * 5).map_or(most, |w| w.min(most))
    })
}

/// A non-blocking UDP socket bound to `addr`, set up for RoCEv2.
pub fn bind_udp(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    bind_udp_as(addr, Reuse::None)
}

/// [`bind_udp`] as a member of the `SO_REUSEPORT` group on `addr` (the
/// daemon's steered sockets on 4791, daemon/steering.rs).
pub fn bind_udp_shared(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    bind_udp_as(addr, Reuse::Port)
}

/// [`bind_udp`] beside the other sockets on multicast group `addr`
/// (`SO_REUSEADDR`, `group_socket.rs`).
pub(crate) fn bind_udp_reusing_address(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    bind_udp_as(addr, Reuse::Address)
}

/// How a socket shares its address with others.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reuse {
    None,
    /// `SO_REUSEPORT`: the kernel (or a steering program) picks one.
    Port,
    /// `SO_REUSEADDR`: several bind one multicast group, each getting
    /// its own copy of every datagram.
    Address,
}

/// A UDP socket made by the system call itself, not libc's `socket()`:
/// another preloaded library that wraps `socket()` (rsockets'
/// `librspreload.so` turns stream sockets into rsockets, and from rdma-core
/// 63 datagram sockets too) must not take softverbs' own transport.
fn udp_socket(addr: SocketAddr) -> io::Result<Socket> {
    use rustix::net::{ipproto, AddressFamily, SocketFlags, SocketType};
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    };
    let fd = rustix::net::socket_with(
        family,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        Some(ipproto::UDP),
    )?;
    Ok(Socket::from(fd))
}

fn bind_udp_as(addr: SocketAddr, reuse: Reuse) -> io::Result<std::net::UdpSocket> {
    let socket = udp_socket(addr)?;
    match reuse {
        Reuse::None => {}
        Reuse::Port => socket.set_reuse_port(true)?,
        Reuse::Address => socket.set_reuse_address(true)?,
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    size_buffers(&socket);
    socket.set_nonblocking(true)?;
    // Packets of one message, sent as one GSO batch, then arrive as one
    // datagram (see recv_segments); a kernel without UDP GRO delivers them
    // one by one, which works too.
    let _ = setsockopt(&socket, UdpGroSegment, &true);
    // Each datagram's traffic class, which a UD receive's GRH shows (as
    // rxe copies the IP header there).
    let _ = match addr.is_ipv4() {
        true => setsockopt(&socket, IpRecvTos, &true),
        false => setsockopt(&socket, Ipv6RecvTClass, &true),
    };
    // DF on an unconnected socket: Linux then sends IP identification 0,
    // the value every ICRC is sealed and checked with (softverbs_wire::ip).
    // Without it the kernel numbers the datagrams and a peer that checks
    // the real header (rxe) drops them.
    if addr.is_ipv4() {
        set_ip_mtu_discover(&socket, Ipv4PathMtuDiscovery::DO)?;
    } else {
        // rxe sends IPv6 datagrams with UDP checksum 0 (the ICRC protects
        // them); Linux drops those (Udp6InCsumErrors) unless told not to.
        setsockopt(&socket, UdpNoCheck6Rx, &true)?;
    }
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// Bigger buffers are a wish, not a requirement (rmem_max may cap them).
/// A burst from a fast peer meets a receiver that the scheduler has not
/// run yet; where allowed (CAP_NET_ADMIN), the receive buffer goes past
/// rmem_max, as deep as a NIC's. The send window (`Endpoint::send_window`)
/// follows what the receive buffer became.
fn size_buffers(socket: &Socket) {
    let (recv, send) = configured_buffers().unwrap_or((FORCED_RECV_BUFFER, SOCKET_BUFFER));
    let fallback = recv.min(SOCKET_BUFFER);
    if setsockopt(socket, RcvBufForce, &recv).is_err() {
        let _ = socket.set_recv_buffer_size(fallback);
    }
    if setsockopt(socket, SndBufForce, &send).is_err() {
        let _ = socket.set_send_buffer_size(send);
    }
}

/// `SOFTVERBS_SOCKET_BUFFER`, if set: the receive and send buffer sizes.
fn configured_buffers() -> Option<(usize, usize)> {
    let value = std::env::var(SOCKET_BUFFER_VAR).ok()?;
    let parsed = parse_buffers(&value);
    if parsed.is_none() {
        crate::say!(
            "softverbs: {SOCKET_BUFFER_VAR}={value} is not RECV or RECV,SEND in bytes (each 4096 or more); ignored"
        );
    }
    parsed
}

/// `RECV` (both buffers) or `RECV,SEND`, in bytes, each at least 4 KiB.
fn parse_buffers(value: &str) -> Option<(usize, usize)> {
    let size = |s: &str| s.trim().parse::<usize>().ok().filter(|&n| n >= 4096);
    match value.split_once(',') {
        None => size(value).map(|n| (n, n)),
        Some((recv, send)) => Some((size(recv)?, size(send)?)),
    }
}

// UDP_NO_CHECK6_RX: accept IPv6 UDP datagrams with a zero checksum. nix
// has no type for it; its own macro defines one the way nix defines the
// others (the one setsockopt call it expands to is nix's code, the same
// unsafe block nix's own options use; none is written in this crate).
use nix::{getsockopt_impl, setsockopt_impl, sockopt_impl};
sockopt_impl!(
    /// `UDP_NO_CHECK6_RX`.
    UdpNoCheck6Rx,
    Both,
    libc::IPPROTO_UDP,
    libc::UDP_NO_CHECK6_RX,
    bool
);

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// An endpoint on a loopback address of its own, with a daemon of
    /// the test's own (which captures, and so steers nothing, if
    /// `capture`).
    fn endpoint(capture: bool) -> Endpoint {
        let ip = IpAddr::V4(crate::test_loopback_address());
        let config = crate::daemon::DaemonConfig {
            socket: format!("softverbs-test-{}-{ip}-{capture}", std::process::id()),
            idle_exit: std::time::Duration::from_millis(200),
        };
        let daemon = if capture {
            let mut daemon = crate::daemon::server::Daemon::bind(config.clone()).unwrap();
            let file = std::env::temp_dir().join(format!("softverbs-test-{ip}-%p.pcap"));
            let capture = crate::capture::Capture::create(file.as_os_str()).unwrap();
            let _ = std::fs::remove_file(capture.path());
            daemon.capture_to(capture);
            std::thread::spawn(move || daemon.run());
            crate::daemon::DaemonAddress {
                socket: config.socket,
                program: None,
            }
        } else {
            crate::daemon::server::start_thread(config).unwrap().0
        };
        Endpoint::open(ip, &daemon).unwrap()
    }

    /// Sends a datagram to `group` from `rx`'s address, and returns once
    /// `on` (where it arrives) is readable.
    fn to_the_group(rx: &Endpoint, group: IpAddr, on: BorrowedFd<'_>) {
        let tx = std::net::UdpSocket::bind(SocketAddr::new(rx.local().ip(), 0)).unwrap();
        send_multicast_from(&tx, rx.local().ip()).unwrap();
        let to = SocketAddr::new(group, crate::daemon::udp_port());
        tx.send_to(b"a datagram to the group", to).unwrap();
        crate::group_socket::readable_within_10_s(on);
    }

    /// With a steered socket, a poll reads the daemon's stream only when
    /// frames were noted on it (`StreamWaiting`), and then says so; the
    /// progress thread after a look reads it always. The frames here are
    /// a group's datagrams the daemon passes on to a session that joined
    /// through it.
    #[test]
    fn a_poll_reads_the_stream_only_when_frames_were_noted() {
        let mut rx = endpoint(false);
        assert!(rx.direct_socket().is_some(), "no steered socket");
        let group: IpAddr = "239.9.9.11".parse().unwrap();
        rx.session.join(group).unwrap();
        let stream = rx.data_fd().try_clone_to_owned().unwrap();
        let frames = std::cell::Cell::new(0);
        let count = |_: FrameHeader, _: &[u8], _: bool| frames.set(frames.get() + 1);

        to_the_group(&rx, group, stream.as_fd());
        assert!(!rx.receive(Receiver::Poll, count).unwrap());
        assert!(!rx.receive(Receiver::Verb, count).unwrap());
        assert_eq!(frames.get(), 0, "read without a note");
        rx.stream_waiting().note();
        assert!(rx.receive(Receiver::Poll, count).unwrap());
        assert_eq!(frames.get(), 1);

        to_the_group(&rx, group, stream.as_fd());
        assert!(
            !rx.receive(Receiver::Poll, count).unwrap(),
            "the note was taken"
        );
        assert!(!rx.receive(Receiver::ProgressThread, count).unwrap());
        assert_eq!(frames.get(), 2);
    }

    /// With a steered socket, an endpoint receives a group's datagrams on
    /// a socket of its own, read as the steered socket is: a poll takes
    /// one, a verb the rest. The daemon passes nothing on. Once left,
    /// the group has no socket.
    #[test]
    fn a_steered_endpoint_reads_its_groups_on_sockets_of_its_own() {
        let mut rx = endpoint(false);
        assert!(rx.direct_socket().is_some(), "no steered socket");
        let group: IpAddr = "239.9.9.14".parse().unwrap();
        rx.join(group).unwrap();
        assert!(rx.has_group_socket(group));
        let on = rx.groups_fd().try_clone_to_owned().unwrap();
        let frames = std::cell::Cell::new(0);
        let count = counting_frames_to(group, &frames);
        to_the_group(&rx, group, on.as_fd());
        to_the_group(&rx, group, on.as_fd());
        assert!(!rx.receive(Receiver::Poll, count).unwrap());
        assert_eq!(frames.get(), 1, "a poll takes one datagram");
        // The second may still be on its way (a deferred softirq).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while frames.get() < 2 && std::time::Instant::now() < deadline {
            assert!(!rx.receive(Receiver::Verb, count).unwrap());
        }
        assert_eq!(frames.get(), 2);
        assert!(
            !readable(rx.data_fd()),
            "the daemon passed the datagrams on too"
        );
        rx.leave(group).unwrap();
        assert!(!rx.has_group_socket(group));
    }

    /// Without a steered socket (the daemon captures), an endpoint joins
    /// a group through the daemon, which passes its datagrams on.
    #[test]
    fn without_a_steered_socket_the_daemon_passes_the_group_on() {
        let mut rx = endpoint(true);
        assert!(rx.direct_socket().is_none(), "a capturing daemon steered");
        let group: IpAddr = "239.9.9.13".parse().unwrap();
        rx.join(group).unwrap();
        assert!(!rx.has_group_socket(group));
        let stream = rx.data_fd().try_clone_to_owned().unwrap();
        to_the_group(&rx, group, stream.as_fd());
        let frames = std::cell::Cell::new(0);
        let count = counting_frames_to(group, &frames);
        assert!(!rx.receive(Receiver::Poll, count).unwrap());
        assert_eq!(frames.get(), 1);
        rx.leave(group).unwrap();
    }

    /// Counts in `frames` the frames handed to it, each checked to be
    /// addressed to `group`.
    fn counting_frames_to(
        group: IpAddr,
        frames: &std::cell::Cell<usize>,
    ) -> impl Fn(FrameHeader, &[u8], bool) + Copy + '_ {
        move |h: FrameHeader, _: &[u8], _: bool| {
            assert_eq!(h.dst, SocketAddr::new(group, crate::daemon::udp_port()));
            frames.set(frames.get() + 1)
        }
    }

    /// Whether `fd` has something to read now.
    fn readable(fd: BorrowedFd<'_>) -> bool {
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default())).unwrap() > 0
    }

    #[test]
    fn socket_buffer_sizes_parse_as_one_or_two_sizes() {
        assert_eq!(parse_buffers("212992"), Some((212992, 212992)));
        assert_eq!(parse_buffers(" 212992 , 65536"), Some((212992, 65536)));
        for bad in ["", "12", "4096,", "a,4096", "4096,4096,4096", "-1"] {
            assert_eq!(parse_buffers(bad), None, "{bad:?}");
        }
    }

    /// A window sent to a receiver that is behind fits its buffer beside
    /// the datagrams it has read but Linux still charges to it: having
    /// read `r` of a window (and so acknowledged them), with the rest
    /// unread, it takes `r` more without a drop, for every `r`. Linux
    /// gives the memory of datagrams read back in batches of a quarter
    /// of the buffer while more wait. A window of seven eighths of the
    /// buffer (43 packets of 4 KiB at this size) lost datagrams from 8
    /// read on.
    #[test]
    fn a_window_fits_beside_datagrams_read_and_not_yet_given_back() {
        const MTU: u32 = 4096;
        let datagram = vec![0x5a; MTU as usize + 48];
        let window = {
            let rx = receiver();
            let buffer = socket2::SockRef::from(&rx).recv_buffer_size().ok();
            (send_window_for(buffer) / crate::receive_cost::udp_receive_cost(MTU)) as usize
        };
        assert!(window >= 8, "a window of {window} packets");
        for read in 0..=window {
            let rx = receiver();
            let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let to = rx.local_addr().unwrap();
            let send = |n| {
                (0..n).for_each(|_| assert_eq!(tx.send_to(&datagram, to).unwrap(), datagram.len()))
            };
            send(window);
            let mut buf = vec![0; datagram.len() + 1];
            let mut received = 0;
            let mut receive = |n| {
                for _ in 0..n {
                    match rx.recv(&mut buf) {
                        Ok(len) => {
                            assert_eq!(len, datagram.len());
                            received += 1;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            };
            receive(read);
            send(read);
            receive(window);
            assert_eq!(
                received,
                window + read,
                "read {read} of a window of {window}, then {read} more sent: lost some"
            );
        }
    }

    /// A blocking receiver on loopback with Debian's default `rmem_max`
    /// as its buffer (or less where that is the limit), waiting at most
    /// a second for a datagram: one sent on loopback is queued by the
    /// time its send returns, so only a drop makes it wait.
    fn receiver() -> std::net::UdpSocket {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket2::SockRef::from(&rx)
            .set_recv_buffer_size(212_992)
            .unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(1)))
            .unwrap();
        rx
    }

    /// A GSO batch comes back as the same packets, whether the kernel
    /// coalesced them (GRO) or delivered them one by one, with the traffic
    /// class it was sent with.
    #[test]
    fn packets_sent_as_one_batch_are_received_intact() {
        let rx = bind_udp("127.0.0.1:0".parse().unwrap()).unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let sent: Vec<Vec<u8>> = (0..6u8)
            .map(|i| vec![i; 1200])
            .chain([vec![9; 100]])
            .collect();
        let mut batch = crate::send_batch::SendBatch::new();
        let sock = socket2::SockRef::from(&tx);
        for p in &sent {
            let (src, dst) = (tx.local_addr().unwrap(), rx.local_addr().unwrap());
            crate::send_batch::push_classed(&mut batch, &sock, p, (src, dst), 0x48);
        }
        batch.flush(&sock);
        let mut got = Vec::new();
        let mut buf = vec![0; 1 << 16];
        let mut cmsg = cmsg_buffer();
        while got.len() < sent.len() {
            match recv_segments(&rx, &mut buf, &mut cmsg) {
                Ok(d) => {
                    assert_eq!(d.src, tx.local_addr().unwrap());
                    assert_eq!(d.class, 0x48);
                    let segment = d.segment.unwrap_or(d.len);
                    got.extend(buf[..d.len].chunks(segment).map(<[u8]>::to_vec));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        // The batch sealed each packet: all but the ICRC is as sent.
        let unsealed = |p: &Vec<u8>| p[..p.len() - 4].to_vec();
        assert_eq!(
            got.iter().map(unsealed).collect::<Vec<_>>(),
            sent.iter().map(unsealed).collect::<Vec<_>>()
        );
    }
}
