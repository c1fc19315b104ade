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
use std::net::{IpAddr, SocketAddr, UdpSocket};

/// A socket on `group`'s UDP 4791, joined on the interface of device
/// address `ip`.
pub(crate) fn open(group: IpAddr, ip: IpAddr) -> io::Result<UdpSocket> {
    let socket = bind(group)?;
    join_on(&socket, group, ip)?;
    Ok(socket)
}

/// A socket on `group`'s UDP 4791 beside the others there, joined
/// nowhere yet.
pub(crate) fn bind(group: IpAddr) -> io::Result<UdpSocket> {
    if !group.is_multicast() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    crate::endpoint::bind_udp_beside(SocketAddr::new(group, udp_port()))
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
        let e = bind("127.0.0.1".parse().unwrap()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }
}
