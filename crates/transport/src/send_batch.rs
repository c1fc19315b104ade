//! Sending packets in batches: consecutive packets of one size to one
//! destination leave in a single `sendmsg` with UDP generic segmentation
//! offload (`UDP_SEGMENT`), which the kernel splits back into one datagram
//! per packet. Half the sender's CPU went into one `sendto` per packet
//! (docs/perf-profile.md). Where the kernel refuses GSO, packets go one by
//! one, as before.
//!
//! Packets are sealed here, once their place is known, because the ICRC
//! covers the IPv4 identification and the kernel chooses it by place. The
//! sockets are unconnected and set `IP_PMTUDISC_DO` (endpoint.rs), so a
//! datagram sent alone carries identification 0, and the segments of one
//! GSO send carry 0, 1, 2, ... Measured on Linux 6.18 (as root, in a fresh
//! network namespace with `ethtool -K lo tx-udp-segmentation off` so the
//! kernel segments before the capture point, `tcpdump -v -i lo`): two GSO
//! sends of five 1000-byte segments and a 300-byte one, then two single
//! datagrams, showed IP IDs 0 1 2 3 4 5, 0 1 2 3 4 5, 0, 0, all DF. With
//! segmentation offload left on, a batch crosses lo as one 5328-byte
//! packet with ID 0 and the receiving host cuts it with the same GSO code
//! (`inet_gso_segment` numbers segments from the header's ID). So packet
//! *i* of a GSO send is sealed with identification *i*, and a packet that
//! leaves alone, or after GSO was refused, with 0. IPv6 has no
//! identification. crates/transport/tests/ip_identification.rs checks the
//! numbering against a capture.
//!
//! A socket that has no room (EAGAIN: its send buffer is full of packets
//! the device has not sent yet) refuses a batch without losing it: the
//! batch stays queued, with a packet that arrived meanwhile held beside
//! it, and the caller stops asking the engine for packets and waits for
//! the socket to become writable ([`SendBatch::blocked`]). Dropping it
//! would cost a local ACK timeout per batch.

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, SockaddrStorage};
use socket2::{SockAddr, SockRef};
use softverbs_wire::Flow;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

/// The kernel's limit on segments in one GSO send (UDP_MAX_SEGMENTS).
const MAX_SEGMENTS: usize = 64;
/// A GSO send is one UDP datagram before segmentation: at most 64 KiB,
/// less the IPv6 and UDP headers.
const MAX_BATCH_BYTES: usize = 65_535 - 40 - 8;

/// Where a batch's datagrams go: a UDP socket, or a test's stand-in.
pub(crate) trait DatagramOut {
    /// One `sendmsg` of `buf` that the kernel cuts into `segment`-byte
    /// datagrams (the last may be shorter).
    fn send_segmented(&self, buf: &[u8], segment: usize, dst: SocketAddr) -> io::Result<usize>;
    /// One datagram.
    fn send_one(&self, packet: &[u8], dst: SocketAddr) -> io::Result<usize>;
}

impl DatagramOut for SockRef<'_> {
    fn send_segmented(&self, buf: &[u8], segment: usize, dst: SocketAddr) -> io::Result<usize> {
        let gso = segment as u16;
        let addr = SockaddrStorage::from(dst);
        sendmsg(
            self.as_raw_fd(),
            &[IoSlice::new(buf)],
            &[ControlMessage::UdpGsoSegments(&gso)],
            MsgFlags::empty(),
            Some(&addr),
        )
        .map_err(io::Error::from)
    }

    fn send_one(&self, packet: &[u8], dst: SocketAddr) -> io::Result<usize> {
        self.send_to(packet, &SockAddr::from(dst))
    }
}

/// Packets waiting to leave together.
#[derive(Debug)]
pub(crate) struct SendBatch {
    buf: Vec<u8>,
    dst: Option<SocketAddr>,
    /// The QP-number block (`slots`) of the queued packets' destination:
    /// a batch goes to one block, so that a receiver that steers by block
    /// (the daemon's SO_REUSEPORT group) never gets another's packets in
    /// a coalesced datagram.
    block: Option<u16>,
    /// The flow of the queued packets, to seal them.
    flow: Option<Flow>,
    segment: usize,
    count: usize,
    /// GSO refused once (old kernel, odd route): send one by one from then on.
    gso_off: bool,
    /// Bytes at the start of `buf` already sent (one by one, before the
    /// socket had no more room).
    sent_bytes: usize,
    /// The socket had no room for the queued packets: they wait for it.
    blocked: bool,
    /// A packet that could not join the waiting batch, unsealed, with its
    /// source and destination; it joins once the batch has left.
    held: Option<(Vec<u8>, SocketAddr, SocketAddr)>,
}

/// What a flush did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sent {
    pub(crate) packets: u64,
    pub(crate) dropped: u64,
}

impl SendBatch {
    pub(crate) fn new() -> SendBatch {
        SendBatch {
            buf: Vec::with_capacity(MAX_BATCH_BYTES),
            dst: None,
            block: None,
            flow: None,
            segment: 0,
            count: 0,
            gso_off: false,
            sent_bytes: 0,
            blocked: false,
            held: None,
        }
    }

    /// Whether packets wait for the socket to have room: the caller must
    /// not push more until [`SendBatch::flush`] has sent them (once the
    /// socket is writable again).
    pub(crate) fn blocked(&self) -> bool {
        self.blocked
    }

    /// Adds a packet (BTH through ICRC field) going from the socket's
    /// address `src` to `dst`, first sending what is queued if the packet
    /// cannot join it, and seals it with the IPv4 identification its place
    /// gives it (see the module docs). All segments but the last of a GSO
    /// send have one size, so a shorter packet closes the batch. A packet
    /// that cannot be sealed (addresses of two families, too long) is
    /// dropped and counted.
    ///
    /// If the queued packets cannot leave for want of room, the packet is
    /// held until they have, and the batch is [`SendBatch::blocked`].
    pub(crate) fn push(
        &mut self,
        socket: &impl DatagramOut,
        packet: &[u8],
        src: SocketAddr,
        dst: SocketAddr,
    ) -> Sent {
        debug_assert!(self.held.is_none(), "pushed while blocked");
        let Ok(flow) = Flow::from_sockets(src, dst) else {
            return Sent::dropped(1);
        };
        let mut sent = Sent::default();
        if !self.fits(packet, dst) {
            sent = self.flush(socket);
            if self.blocked {
                self.held = Some((packet.to_vec(), src, dst));
                return sent;
            }
        }
        if !self.append_sealed(packet, flow, dst) {
            sent.dropped += 1;
            return sent;
        }
        if packet.len() < self.segment || self.gso_off {
            let more = self.flush(socket);
            sent.packets += more.packets;
            sent.dropped += more.dropped;
        }
        sent
    }

    /// Appends `packet` sealed as segment `count` of a GSO send (or as a
    /// datagram of its own when GSO is off); false if it cannot be sealed.
    fn append_sealed(&mut self, packet: &[u8], flow: Flow, dst: SocketAddr) -> bool {
        let identification = if self.gso_off { 0 } else { self.count };
        // At most MAX_SEGMENTS (64) packets are queued.
        let Ok(identification) = u16::try_from(identification) else {
            return false;
        };
        let start = self.buf.len();
        self.buf.extend_from_slice(packet);
        if flow
            .seal_with_identification(&mut self.buf[start..], identification)
            .is_err()
        {
            self.buf.truncate(start);
            return false;
        }
        if self.count == 0 {
            self.dst = Some(dst);
            self.block = Some(block_of(packet));
            self.flow = Some(flow);
            self.segment = packet.len();
        }
        self.count += 1;
        true
    }

    fn fits(&self, packet: &[u8], dst: SocketAddr) -> bool {
        let len = packet.len();
        self.count == 0
            || (self.dst == Some(dst)
                && self.block == Some(block_of(packet))
                && len <= self.segment
                && self.count < MAX_SEGMENTS
                && self.buf.len() + len <= MAX_BATCH_BYTES)
    }

    /// Sends everything queued, then queues the held packet if there is
    /// one. A socket without room leaves the batch queued and
    /// [`SendBatch::blocked`].
    pub(crate) fn flush(&mut self, socket: &impl DatagramOut) -> Sent {
        let mut sent = self.send_queued(socket);
        if self.blocked {
            return sent;
        }
        if let Some((packet, src, dst)) = self.held.take() {
            let more = self.push(socket, &packet, src, dst);
            sent.packets += more.packets;
            sent.dropped += more.dropped;
        }
        sent
    }

    fn send_queued(&mut self, socket: &impl DatagramOut) -> Sent {
        let Some(dst) = self.dst else {
            return Sent::default();
        };
        let count = self.count as u64;
        let mut sent = Sent::default();
        self.blocked = false;
        let gso = count > 1 && !self.gso_off;
        match gso.then(|| socket.send_segmented(&self.buf, self.segment, dst)) {
            Some(Ok(_)) => sent.packets = count,
            Some(Err(e)) if no_room(&e) => {
                self.blocked = true;
                return sent;
            }
            Some(Err(e)) if gso_refused(&e) => {
                self.gso_off = true;
                self.reseal_alone();
                sent = self.send_each(socket, dst);
            }
            // An unreachable peer (ICMP seen) loses the batch; the
            // reliable transport resends, as for one packet.
            Some(Err(_)) => sent.dropped = count,
            None => sent = self.send_each(socket, dst),
        }
        if self.blocked {
            return sent;
        }
        crate::capture::sent(self.flow, self.segment, &self.buf);
        self.buf.clear();
        self.dst = None;
        self.flow = None;
        self.count = 0;
        self.sent_bytes = 0;
        sent
    }

    /// Seals the queued packets for leaving one by one (identification 0):
    /// all but the first were sealed as later GSO segments.
    fn reseal_alone(&mut self) {
        let Some(flow) = self.flow else { return };
        for packet in self.buf.chunks_mut(self.segment).skip(1) {
            // Sealed once already, so it cannot fail now.
            let _ = flow.seal(packet);
        }
    }

    /// Sends the queued packets not yet sent one datagram at a time, up
    /// to the first the socket has no room for.
    fn send_each(&mut self, socket: &impl DatagramOut, dst: SocketAddr) -> Sent {
        let mut sent = Sent::default();
        for packet in self.buf[self.sent_bytes..].chunks(self.segment) {
            match socket.send_one(packet, dst) {
                Ok(_) => sent.packets += 1,
                Err(e) if no_room(&e) => {
                    self.blocked = true;
                    return sent;
                }
                Err(_) => sent.dropped += 1,
            }
            self.sent_bytes += packet.len();
        }
        sent
    }
}

impl Sent {
    fn dropped(n: u64) -> Sent {
        Sent {
            packets: 0,
            dropped: n,
        }
    }
}

/// The QP-number block of a packet's destination QP (BTH bytes 5..8).
fn block_of(packet: &[u8]) -> u16 {
    let qpn = match packet.get(5..8) {
        Some(q) => u32::from_be_bytes([0, q[0], q[1], q[2]]),
        None => 0,
    };
    crate::slots::slot_of(qpn)
}

/// The errors that say the socket has no room now (its send buffer holds
/// what the device has not sent yet): wait for it to be writable.
fn no_room(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS)
}

/// The errors with which Linux refuses a GSO send it cannot do (no
/// UDP_SEGMENT support, or a segment too big for the route), as opposed to
/// a full buffer or an unreachable destination.
fn gso_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::EIO | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    /// Receives one datagram and checks its ICRC without knowing the
    /// identification: the payload and the identification it was sealed
    /// with.
    /// A packet of `len` bytes filled with `fill`, for QP block 1 (its
    /// BTH destination QPN 0x001000): packets of one batch go to one block.
    fn packet(fill: u8, len: usize) -> Vec<u8> {
        let mut p = vec![fill; len];
        p[5..8].copy_from_slice(&[0x00, 0x10, 0x00]);
        p
    }

    impl Sent {
        fn with_packets(self, packets: u64) -> Sent {
            Sent { packets, ..self }
        }
    }

    fn recv_sealed(rx: &UdpSocket, from: SocketAddr) -> (Vec<u8>, Option<u16>) {
        let mut buf = [0u8; 2000];
        let n = rx.recv(&mut buf).unwrap();
        let flow = Flow::from_sockets(from, rx.local_addr().unwrap()).unwrap();
        let id = flow.verify_recovering_identification(&buf[..n]).unwrap();
        (buf[..n - 4].to_vec(), id)
    }

    /// Packets of one size, then a shorter last one, arrive as separate
    /// datagrams with their bytes intact, in order, each sealed with its
    /// place in the GSO send as identification; a packet for another
    /// destination starts a new batch, and a packet sent alone has 0.
    #[test]
    fn a_batch_arrives_as_one_datagram_per_packet() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let rx2 = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (d1, d2) = (rx.local_addr().unwrap(), rx2.local_addr().unwrap());
        let src = tx.local_addr().unwrap();
        let mut batch = SendBatch::new();
        let sock = &SockRef::from(&tx);
        let packets: Vec<Vec<u8>> = (0..5u8).map(|i| packet(i, 1000)).collect();
        let mut sent = Sent::default();
        for p in &packets {
            sent.packets += batch.push(sock, p, src, d1).packets;
        }
        let (short, other) = (packet(9, 300), packet(7, 1000));
        sent.packets += batch.push(sock, &short, src, d1).packets; // shorter: flushes
        sent.packets += batch.push(sock, &other, src, d2).packets;
        sent.packets += batch.flush(sock).packets;
        assert_eq!(sent.packets, 7);
        for (i, p) in packets.iter().enumerate() {
            assert_eq!(recv_sealed(&rx, src), (p[..996].to_vec(), Some(i as u16)));
        }
        assert_eq!(recv_sealed(&rx, src), (short[..296].to_vec(), Some(5)));
        assert_eq!(recv_sealed(&rx2, src), (other[..996].to_vec(), Some(0)));
    }

    /// After GSO is refused, queued packets are sealed again for leaving
    /// alone, and later ones are sealed with identification 0 directly.
    #[test]
    fn packets_sent_one_by_one_carry_identification_zero() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (dst, src) = (rx.local_addr().unwrap(), tx.local_addr().unwrap());
        let sock = &SockRef::from(&tx);
        let mut batch = SendBatch::new();
        for i in 0..3u8 {
            batch.push(sock, &packet(i, 500), src, dst);
        }
        batch.reseal_alone();
        assert_eq!(batch.send_each(sock, dst).packets, 3);
        batch.buf.clear();
        batch.count = 0;
        batch.sent_bytes = 0;
        batch.gso_off = true;
        assert_eq!(batch.push(sock, &packet(3, 500), src, dst).packets, 1);
        for i in 0..4u8 {
            assert_eq!(recv_sealed(&rx, src), (packet(i, 496), Some(0)));
        }
    }

    /// Packets for QPs of two blocks never share a batch: a receiver
    /// steering whole datagrams by block would get the other's packets.
    #[test]
    fn a_batch_holds_packets_for_one_block() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (dst, src) = (rx.local_addr().unwrap(), tx.local_addr().unwrap());
        let sock = &SockRef::from(&tx);
        let mut batch = SendBatch::new();
        let mut other = packet(2, 500);
        other[5..8].copy_from_slice(&[0x00, 0x20, 0x00]); // block 2
        batch.push(sock, &packet(1, 500), src, dst);
        batch.push(sock, &other, src, dst);
        batch.flush(sock);
        assert_eq!(recv_sealed(&rx, src), (packet(1, 496), Some(0)));
        assert_eq!(recv_sealed(&rx, src), (other[..496].to_vec(), Some(0)));
    }

    /// A socket stand-in with room for `room` more datagrams (None: any
    /// number; then EAGAIN), refusing GSO if told to, recording every
    /// datagram it took.
    #[derive(Default)]
    struct Room {
        room: std::cell::Cell<Option<u32>>,
        no_gso: bool,
        datagrams: std::cell::RefCell<Vec<(SocketAddr, Vec<u8>)>>,
    }

    impl Room {
        fn take(&self, n: usize) -> io::Result<()> {
            let Some(left) = self.room.get() else {
                return Ok(());
            };
            let rest = left
                .checked_sub(n as u32)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EAGAIN))?;
            self.room.set(Some(rest));
            Ok(())
        }
    }

    impl DatagramOut for Room {
        fn send_segmented(&self, buf: &[u8], seg: usize, dst: SocketAddr) -> io::Result<usize> {
            if self.no_gso {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            self.take(buf.len().div_ceil(seg))?;
            let mut d = self.datagrams.borrow_mut();
            d.extend(buf.chunks(seg).map(|p| (dst, p.to_vec())));
            Ok(buf.len())
        }

        fn send_one(&self, packet: &[u8], dst: SocketAddr) -> io::Result<usize> {
            self.take(1)?;
            self.datagrams.borrow_mut().push((dst, packet.to_vec()));
            Ok(packet.len())
        }
    }

    fn unsealed(d: &(SocketAddr, Vec<u8>)) -> (SocketAddr, Vec<u8>) {
        (d.0, d.1[..d.1.len() - 4].to_vec())
    }

    /// A GSO batch the socket has no room for stays queued (nothing is
    /// dropped); a packet for another destination is held beside it; once
    /// there is room both leave, in order, each exactly once.
    #[test]
    fn a_batch_without_room_waits_and_nothing_is_lost() {
        let room = Room::default();
        let src: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let (d1, d2): (SocketAddr, SocketAddr) = (
            "127.0.0.2:4791".parse().unwrap(),
            "127.0.0.3:4791".parse().unwrap(),
        );
        let mut batch = SendBatch::new();
        let packets: Vec<Vec<u8>> = (0..3u8).map(|i| packet(i, 600)).collect();
        for p in &packets {
            assert_eq!(batch.push(&room, p, src, d1), Sent::default());
        }
        room.room.set(Some(0));
        let other = packet(9, 600);
        assert_eq!(batch.push(&room, &other, src, d2), Sent::default());
        assert!(batch.blocked(), "no room: the batch waits");
        assert_eq!(batch.flush(&room), Sent::default());
        assert!(batch.blocked(), "still no room");
        room.room.set(None);
        assert_eq!(
            batch.flush(&room).packets,
            3,
            "the batch, then the held packet queued"
        );
        assert!(!batch.blocked());
        assert_eq!(batch.flush(&room).packets, 1);
        let got: Vec<_> = room.datagrams.borrow().iter().map(unsealed).collect();
        let want: Vec<_> = packets
            .iter()
            .map(|p| (d1, p[..596].to_vec()))
            .chain([(d2, other[..596].to_vec())])
            .collect();
        assert_eq!(got, want);
    }

    /// Sent one by one (GSO refused), a batch the socket runs out of room
    /// for in the middle goes on from the first packet not sent.
    #[test]
    fn packets_sent_one_by_one_resume_after_the_last_sent() {
        let room = Room {
            no_gso: true,
            room: std::cell::Cell::new(Some(1)),
            ..Room::default()
        };
        let src: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let mut batch = SendBatch::new();
        let packets: Vec<Vec<u8>> = (0..3u8).map(|i| packet(i, 500)).collect();
        for p in &packets {
            batch.push(&room, p, src, dst);
        }
        assert_eq!(batch.flush(&room), Sent::default().with_packets(1));
        assert!(batch.blocked());
        room.room.set(None);
        assert_eq!(batch.flush(&room), Sent::default().with_packets(2));
        assert!(!batch.blocked());
        let got: Vec<_> = room.datagrams.borrow().iter().map(unsealed).collect();
        let want: Vec<_> = packets.iter().map(|p| (dst, p[..496].to_vec())).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_packet_that_cannot_be_sealed_is_dropped() {
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sock = &SockRef::from(&tx);
        let mut batch = SendBatch::new();
        let src = tx.local_addr().unwrap();
        let v6: SocketAddr = "[::1]:4791".parse().unwrap();
        assert_eq!(batch.push(sock, &[0; 100], src, v6), Sent::dropped(1));
        assert_eq!(batch.push(sock, &[0; 3], src, src), Sent::dropped(1));
        assert_eq!(batch.flush(sock), Sent::default());
    }
}
