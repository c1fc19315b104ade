//! A socket on a multicast group's UDP 4791. Every socket bound there
//! reuses the address (`SO_REUSEADDR`), so that the kernel gives each its
//! own copy of every datagram to the group: each member context has one
//! and reads the group's datagrams itself, and so has a daemon that
//! captures (`--pcap`), which passes them on to the contexts that joined
//! through it (its contexts have no steered socket: it must see every
//! packet). Through the daemon a datagram cost a hop and its wake-up, most
//! of the multicast latency, and was dropped once more than the daemon's
//! queue for a context waited (a receiver behind a fast sender: `ib_send_bw
//! -c UD -g` hung). The membership is the socket's: closing it leaves.

use crate::daemon::udp_port;
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV6, UdpSocket};

/// A socket on `group`'s UDP 4791, joined on the interface of device
/// address `ip`.
pub(crate) fn open(group: IpAddr, ip: IpAddr) -> io::Result<UdpSocket> {
    let socket = bind(group, ip)?;
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
    crate::endpoint::bind_udp_beside(addr)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Two members of one group on this host each receive every datagram
    /// sent to it; one that closed receives nothing more.
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
        let tx = UdpSocket::bind(SocketAddr::new(ip, 0)).unwrap();
        socket2::SockRef::from(&tx)
            .set_multicast_if_v4(&"127.0.0.1".parse().unwrap())
            .unwrap();
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
