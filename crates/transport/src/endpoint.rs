//! One UDP socket serving one slot.

use crate::slots::{qpns_of, SlotPorts, MAX_SLOT};
use mio::net::UdpSocket;
use nix::sys::socket::sockopt::UdpGroSegment;
use nix::sys::socket::{recvmsg, setsockopt, ControlMessageOwned, MsgFlags, SockaddrStorage};
use rustix::net::sockopt::{set_ip_mtu_discover, Ipv4PathMtuDiscovery};
use socket2::{Domain, Protocol, Socket, Type};
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::os::fd::AsRawFd;

/// Socket buffer size asked for: a burst of a few hundred MTU-sized
/// packets fits, so a busy loopback rarely drops.
const SOCKET_BUFFER: usize = 4 << 20;

/// A bound UDP socket and the slot (QP numbers) it serves.
#[derive(Debug)]
pub struct Endpoint {
    slot: u16,
    local: SocketAddr,
    socket: UdpSocket,
}

impl Endpoint {
    /// Claims the first free slot at `ip`, trying slots from `first` on
    /// (wrapping). A slot is free when its port can be bound; the socket
    /// has no SO_REUSEADDR/SO_REUSEPORT, so a slot has one owner.
    pub fn claim(ip: IpAddr, ports: SlotPorts, first: u16) -> io::Result<Endpoint> {
        let first = first.clamp(1, MAX_SLOT);
        let mut last_err = None;
        for n in 0..MAX_SLOT {
            let slot = (first - 1 + n) % MAX_SLOT + 1;
            match bind(SocketAddr::new(ip, ports.port(slot))) {
                Ok(socket) => return Endpoint::new(slot, socket),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::from(io::ErrorKind::AddrInUse)))
    }

    fn new(slot: u16, socket: std::net::UdpSocket) -> io::Result<Endpoint> {
        let local = socket.local_addr()?;
        Ok(Endpoint {
            slot,
            local,
            socket: UdpSocket::from_std(socket),
        })
    }

    /// The slot served.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The QP numbers this endpoint receives for.
    pub fn qpns(&self) -> Range<u32> {
        qpns_of(self.slot)
    }

    /// The bound address.
    pub fn local(&self) -> SocketAddr {
        self.local
    }

    /// The socket, for polling and I/O.
    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// Receives one datagram into `buf`: its length, its sender, and, when
    /// the kernel coalesced several packets of one flow into it (UDP GRO,
    /// which [`bind`] turns on), the size of each but the last. `cmsg` is
    /// room for that control message ([`cmsg_buffer`]), kept by the caller
    /// so that a CQ polled in a loop allocates nothing per call.
    pub fn recv_segments(
        &self,
        buf: &mut [u8],
        cmsg: &mut [u8],
    ) -> io::Result<(usize, SocketAddr, Option<usize>)> {
        let mut iov = [IoSliceMut::new(buf)];
        let msg = recvmsg::<SockaddrStorage>(
            self.socket.as_raw_fd(),
            &mut iov,
            Some(cmsg),
            MsgFlags::empty(),
        )
        .map_err(io::Error::from)?;
        let from = msg
            .address
            .and_then(|a| socket_addr(&a))
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))?;
        let segment = msg.cmsgs().ok().and_then(|mut c| {
            c.find_map(|m| match m {
                ControlMessageOwned::UdpGroSegments(s) if s > 0 => Some(s as usize),
                _ => None,
            })
        });
        Ok((msg.bytes, from, segment))
    }

    /// The socket, to register with a poller.
    pub fn socket_mut(&mut self) -> &mut UdpSocket {
        &mut self.socket
    }
}

/// Room for the UDP GRO control message [`Endpoint::recv_segments`] reads.
pub fn cmsg_buffer() -> Vec<u8> {
    nix::cmsg_space!(i32)
}

fn socket_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    a.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
}

fn bind(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    // Bigger buffers are a wish, not a requirement (rmem_max may cap them).
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    socket.set_nonblocking(true)?;
    // Packets of one message, sent as one GSO batch, then arrive as one
    // datagram (see recv_segments); a kernel without UDP GRO delivers them
    // one by one, which works too.
    let _ = setsockopt(&socket, UdpGroSegment, &true);
    // DF on an unconnected socket: Linux then sends IP identification 0,
    // the value every ICRC is sealed and checked with (softverbs_wire::ip).
    // Without it the kernel numbers the datagrams and a peer that checks
    // the real header (rxe) drops them.
    if addr.is_ipv4() {
        set_ip_mtu_discover(&socket, Ipv4PathMtuDiscovery::DO)?;
    }
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn a_claimed_slot_is_not_claimed_twice() {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let ports = SlotPorts::default();
        let first = 1000 + fastrand::u16(0..2000);
        let a = Endpoint::claim(ip, ports, first).unwrap();
        let b = Endpoint::claim(ip, ports, a.slot()).unwrap();
        assert_ne!(a.slot(), b.slot());
        assert_eq!(a.local().port(), ports.port(a.slot()));
        assert_eq!(ports.slot_of_port(b.local().port()), Some(b.slot()));
    }

    /// A GSO batch comes back as the same packets, whether the kernel
    /// coalesced them (GRO) or delivered them one by one.
    #[test]
    fn packets_sent_as_one_batch_are_received_intact() {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let rx = Endpoint::claim(ip, SlotPorts::default(), 2000 + fastrand::u16(0..2000)).unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let sent: Vec<Vec<u8>> = (0..6u8)
            .map(|i| vec![i; 1200])
            .chain([vec![9; 100]])
            .collect();
        let mut batch = crate::send_batch::SendBatch::new();
        let sock = socket2::SockRef::from(&tx);
        for p in &sent {
            batch.push(&sock, p, rx.local());
        }
        batch.flush(&sock);
        let mut got = Vec::new();
        let mut buf = vec![0; 1 << 16];
        let mut cmsg = cmsg_buffer();
        while got.len() < sent.len() {
            match rx.recv_segments(&mut buf, &mut cmsg) {
                Ok((n, from, segment)) => {
                    assert_eq!(from, tx.local_addr().unwrap());
                    got.extend(buf[..n].chunks(segment.unwrap_or(n)).map(<[u8]>::to_vec));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, sent);
    }
}
