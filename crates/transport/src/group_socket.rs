//! A socket on a multicast group's UDP 4791. The kernel gives every
//! socket bound there its own copy of every datagram to the group, and
//! each reuses the address (`SO_REUSEADDR`) so that several can bind it:
//! each member context has one and reads the group's datagrams itself,
//! and so has the daemon for the contexts that joined through it (those
//! without a steered socket: the daemon captures, `--pcap`, and must see
//! every packet, or serves another user, or the kernel refused its
//! steering program), which it passes them on to. Through the daemon a
//! datagram cost a hop and its wake-up, most of the multicast latency,
//! and was dropped once more than the daemon's queue for a context waited
//! (a receiver behind a fast sender: `ib_send_bw -c UD -g` hung). The
//! membership is the socket's: closing it leaves.
//!
//! A context's group sockets sit behind one epoll set ([`GroupSockets`]):
//! the progress thread polls the set (one descriptor, lent with the
//! steered socket), and a receive asks it which sockets hold datagrams,
//! one system call however many groups the context is in.

use crate::daemon::udp_port;
use rustix::event::epoll;
use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr, SocketAddrV6, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// Ready sockets taken from the set per `epoll_wait`.
const READY_PER_LOOK: usize = 16;

/// The sockets of the multicast groups a context is in, and the epoll set
/// (level-triggered) that says which hold datagrams.
#[derive(Debug)]
pub(crate) struct GroupSockets {
    set: OwnedFd,
    sockets: Vec<(IpAddr, UdpSocket)>,
}

impl GroupSockets {
    pub(crate) fn new() -> io::Result<GroupSockets> {
        Ok(GroupSockets {
            set: epoll::create(epoll::CreateFlags::CLOEXEC)?,
            sockets: Vec::new(),
        })
    }

    /// The epoll set: readable while a group socket holds datagrams.
    pub(crate) fn set_fd(&self) -> BorrowedFd<'_> {
        self.set.as_fd()
    }

    /// Opens `group`'s socket, joined on the interface of device address
    /// `ip`, into the set (once: a group joined already stays as it is).
    pub(crate) fn join(&mut self, group: IpAddr, ip: IpAddr) -> io::Result<()> {
        if self.sockets.iter().any(|(g, _)| *g == group) {
            return Ok(());
        }
        let socket = open(group, ip)?;
        let key = epoll::EventData::new_u64(socket.as_raw_fd() as u64);
        epoll::add(&self.set, &socket, key, epoll::EventFlags::IN)?;
        self.sockets.push((group, socket));
        Ok(())
    }

    /// Closes `group`'s socket; whether there was one.
    pub(crate) fn leave(&mut self, group: IpAddr) -> bool {
        let Some(i) = self.sockets.iter().position(|(g, _)| *g == group) else {
            return false;
        };
        let (_, socket) = self.sockets.swap_remove(i);
        // Out of the set by hand: a child made by fork may hold the
        // socket open, and the set drops only sockets closed everywhere.
        let _ = epoll::delete(&self.set, &socket);
        true
    }

    /// Whether `group` has a socket here.
    #[cfg(test)]
    pub(crate) fn has(&self, group: IpAddr) -> bool {
        self.sockets.iter().any(|(g, _)| *g == group)
    }

    /// Closes every group's socket.
    pub(crate) fn clear(&mut self) {
        for (_, socket) in self.sockets.drain(..) {
            let _ = epoll::delete(&self.set, &socket);
        }
    }

    /// Hands `read` each socket that holds datagrams, with its group
    /// (none, and no system call, without groups): those of one
    /// `epoll_wait` if `one_look`, else until the set is found quiet. The
    /// progress thread's poller reports the set only when a datagram
    /// arrives, so a receiver that must take everything looks again
    /// after a full look, lest sockets left ready wait for the next
    /// datagram.
    pub(crate) fn each_ready(&self, one_look: bool, mut read: impl FnMut(IpAddr, &UdpSocket)) {
        if self.sockets.is_empty() {
            return;
        }
        loop {
            let ready = self.look(&mut read);
            if one_look || ready < READY_PER_LOOK {
                return;
            }
        }
    }

    /// One `epoll_wait` of the set, each ready socket to `read`; how many
    /// were ready.
    fn look(&self, read: &mut impl FnMut(IpAddr, &UdpSocket)) -> usize {
        let mut events = [MaybeUninit::<epoll::Event>::uninit(); READY_PER_LOOK];
        let now = rustix::event::Timespec::default();
        let Ok((ready, _)) = epoll::wait(&self.set, &mut events, Some(&now)) else {
            return 0;
        };
        for event in ready.iter() {
            let fd = event.data.u64();
            let found = self
                .sockets
                .iter()
                .find(|(_, s)| s.as_raw_fd() as u64 == fd);
            if let Some((group, socket)) = found {
                read(*group, socket);
            }
        }
        ready.len()
    }
}

/// A context's socket on `group`'s UDP 4791, joined on the interface of
/// device address `ip`, receiving only what arrives there, as a NIC's
/// port does: Linux would otherwise hand it the group's datagrams that
/// arrive on any interface where anything on the host joined the group
/// (`IP_MULTICAST_ALL`; for IPv6 a membership does not even say where,
/// so the socket is bound to the interface, `SO_BINDTODEVICE`, which
/// Linux allows without privilege from 5.7 and which is skipped where
/// refused).
pub(crate) fn open(group: IpAddr, ip: IpAddr) -> io::Result<UdpSocket> {
    let socket = bind(group, ip)?;
    let sock = socket2::SockRef::from(&socket);
    match group {
        IpAddr::V4(_) => sock.set_multicast_all_v4(false)?,
        IpAddr::V6(_) => sock.set_multicast_all_v6(false)?,
    }
    if let Some(name) = crate::netif::interface_of(ip) {
        let _ = sock.bind_device(Some(name.as_bytes()));
    }
    join_on(&socket, group, ip)?;
    Ok(socket)
}

/// A socket on `group`'s UDP 4791 beside the others there, joined
/// nowhere yet. An IPv6 group of link- or interface-local scope is bound
/// on the interface of device address `ip` (Linux refuses it unscoped).
pub(crate) fn bind(group: IpAddr, ip: IpAddr) -> io::Result<UdpSocket> {
    let addr = match group {
        IpAddr::V4(v4) if v4.is_multicast() => SocketAddr::new(group, udp_port()),
        IpAddr::V6(v6) if v6.is_multicast() => {
            let local_scope = matches!(v6.segments()[0] & 0x000f, 1 | 2);
            let scope = match local_scope {
                true => crate::netif::ifindex_of(ip).unwrap_or(0),
                false => 0,
            };
            SocketAddrV6::new(v6, udp_port(), 0, scope).into()
        }
        _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    crate::endpoint::bind_udp_reusing_address(addr)
}

/// Joins multicast `group` on the interface of device address `ip`.
pub(crate) fn join_on(socket: &UdpSocket, group: IpAddr, ip: IpAddr) -> io::Result<()> {
    match (group, ip) {
        (IpAddr::V4(g), IpAddr::V4(i)) => socket.join_multicast_v4(&g, &i),
        (IpAddr::V6(g), IpAddr::V6(_)) => {
            let index = crate::netif::ifindex_of(ip).unwrap_or(0);
            socket.join_multicast_v6(&g, index)
        }
        _ => Err(io::Error::from_raw_os_error(libc::EAFNOSUPPORT)),
    }
}

/// Waits (10 s at most) for `fd` to be readable; for tests.
#[cfg(test)]
pub(crate) fn readable_within_10_s(fd: impl AsFd) {
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    let ten_seconds = rustix::event::Timespec {
        tv_sec: 10,
        tv_nsec: 0,
    };
    let ready = rustix::event::poll(&mut fds, Some(&ten_seconds)).unwrap();
    assert_eq!(ready, 1, "nothing arrived in 10 s");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket that sends multicast from loopback.
    fn sender() -> UdpSocket {
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket2::SockRef::from(&tx)
            .set_multicast_if_v4(&"127.0.0.1".parse().unwrap())
            .unwrap();
        tx
    }

    /// Two members of one group on this host each receive every datagram
    /// sent to it; after one closed, the other still does.
    #[test]
    fn each_member_gets_a_copy_of_every_datagram() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let group: IpAddr = "239.9.9.12".parse().unwrap();
        let (a, b) = (open(group, ip).unwrap(), open(group, ip).unwrap());
        for s in [&a, &b] {
            s.set_nonblocking(false).unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
        }
        let tx = sender();
        let to = SocketAddr::new(group, udp_port());
        let mut buf = [0; 64];
        tx.send_to(b"one", to).unwrap();
        assert_eq!(a.recv(&mut buf).unwrap(), 3);
        assert_eq!(b.recv(&mut buf).unwrap(), 3);
        drop(b);
        tx.send_to(b"two", to).unwrap();
        assert_eq!(a.recv(&mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], b"two");
    }

    /// The set says which group sockets hold datagrams, each with its
    /// group, and is readable while one does; a socket left is out of it.
    #[test]
    fn the_set_names_the_sockets_that_hold_datagrams() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let (g1, g2): (IpAddr, IpAddr) =
            ("239.9.9.15".parse().unwrap(), "239.9.9.16".parse().unwrap());
        let mut groups = GroupSockets::new().unwrap();
        groups.join(g1, ip).unwrap();
        groups.join(g2, ip).unwrap();
        let ready = |groups: &GroupSockets| {
            let mut seen = Vec::new();
            groups.each_ready(false, |g, s| {
                let mut buf = [0; 16];
                while s.recv(&mut buf).is_ok() {
                    seen.push(g);
                }
            });
            seen
        };
        assert!(ready(&groups).is_empty());
        let tx = sender();
        tx.send_to(b"to g2", SocketAddr::new(g2, udp_port()))
            .unwrap();
        let set = groups.set.try_clone().unwrap();
        readable_within_10_s(&set);
        assert_eq!(ready(&groups), [g2]);
        assert!(groups.leave(g2));
        assert!(!groups.leave(g2));
        assert!(groups.has(g1) && !groups.has(g2));
        tx.send_to(b"to g2", SocketAddr::new(g2, udp_port()))
            .unwrap();
        tx.send_to(b"to g1", SocketAddr::new(g1, udp_port()))
            .unwrap();
        readable_within_10_s(&set);
        assert_eq!(ready(&groups), [g1]);
    }

    /// With more groups holding datagrams than one look takes, a poll's
    /// one look leaves the rest for the next, while a receiver that takes
    /// everything looks until the set is quiet.
    #[test]
    fn taking_everything_looks_until_the_set_is_quiet() {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let mut groups = GroupSockets::new().unwrap();
        let n = READY_PER_LOOK + 4;
        let group = |i: usize| IpAddr::from([239, 9, 10, i as u8 + 1]);
        (0..n).for_each(|i| groups.join(group(i), ip).unwrap());
        let tx = sender();
        for i in 0..n {
            tx.send_to(b"one", SocketAddr::new(group(i), udp_port()))
                .unwrap();
        }
        let all_arrived = |groups: &GroupSockets| {
            for (_, socket) in &groups.sockets {
                readable_within_10_s(socket);
            }
        };
        all_arrived(&groups);
        let read = std::cell::Cell::new(0);
        let take = |one_look| {
            groups.each_ready(one_look, |_, s| {
                let mut buf = [0; 16];
                while s.recv(&mut buf).is_ok() {
                    read.set(read.get() + 1);
                }
            })
        };
        take(true);
        assert_eq!(read.get(), READY_PER_LOOK, "one look");
        take(true);
        assert_eq!(read.get(), n, "the next look takes the rest");
        for i in 0..n {
            tx.send_to(b"two", SocketAddr::new(group(i), udp_port()))
                .unwrap();
        }
        all_arrived(&groups);
        take(false);
        assert_eq!(read.get(), 2 * n, "taking everything");
    }

    #[test]
    fn a_unicast_address_is_no_group() {
        let ip = "127.0.0.1".parse().unwrap();
        let e = bind(ip, ip).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }

    /// A link-local IPv6 group is bound on the device's interface (here
    /// loopback's: `::1`), a global one unscoped.
    #[test]
    fn a_link_local_group_is_bound_on_the_device_interface() {
        let ip: IpAddr = "::1".parse().unwrap();
        for group in ["ff02::9:1", "ff12::9:1", "ff0e::9:1"] {
            let socket = bind(group.parse().unwrap(), ip).unwrap();
            let SocketAddr::V6(bound) = socket.local_addr().unwrap() else {
                panic!("{group}: bound as IPv4");
            };
            let link_local = group.starts_with("ff02") || group.starts_with("ff12");
            assert_eq!(bound.scope_id() != 0, link_local, "{group}: {bound}");
        }
    }
}
