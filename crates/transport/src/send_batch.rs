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
        }
    }

    /// Adds a packet (BTH through ICRC field) going from the socket's
    /// address `src` to `dst`, first sending what is queued if the packet
    /// cannot join it, and seals it with the IPv4 identification its place
    /// gives it (see the module docs). All segments but the last of a GSO
    /// send have one size, so a shorter packet closes the batch. A packet
    /// that cannot be sealed (addresses of two families, too long) is
    /// dropped and counted.
    pub(crate) fn push(
        &mut self,
        socket: &SockRef<'_>,
        packet: &[u8],
        src: SocketAddr,
        dst: SocketAddr,
    ) -> Sent {
        let Ok(flow) = Flow::from_sockets(src, dst) else {
            return Sent::dropped(1);
        };
        let mut sent = Sent::default();
        if !self.fits(packet, dst) {
            sent = self.flush(socket);
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

    /// Sends everything queued.
    pub(crate) fn flush(&mut self, socket: &SockRef<'_>) -> Sent {
        let Some(dst) = self.dst.take() else {
            return Sent::default();
        };
        let count = std::mem::take(&mut self.count) as u64;
        let mut sent = Sent::default();
        let gso = count > 1 && !self.gso_off;
        match gso.then(|| send_segmented(socket, &self.buf, self.segment, dst)) {
            Some(Ok(_)) => sent.packets = count,
            Some(Err(e)) if gso_refused(&e) => {
                self.gso_off = true;
                self.reseal_alone();
                sent = self.send_each(socket, dst);
            }
            // A full socket buffer (or an unreachable peer) drops the whole
            // batch; the reliable transport resends, as for one packet.
            Some(Err(_)) => sent.dropped = count,
            None => sent = self.send_each(socket, dst),
        }
        crate::capture::sent(self.flow, self.segment, &self.buf);
        self.buf.clear();
        self.flow = None;
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

    fn send_each(&self, socket: &SockRef<'_>, dst: SocketAddr) -> Sent {
        let mut sent = Sent::default();
        let addr = SockAddr::from(dst);
        for packet in self.buf.chunks(self.segment) {
            match socket.send_to(packet, &addr) {
                Ok(_) => sent.packets += 1,
                Err(_) => sent.dropped += 1,
            }
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

/// The errors with which Linux refuses a GSO send it cannot do (no
/// UDP_SEGMENT support, or a segment too big for the route), as opposed to
/// a full buffer or an unreachable destination.
fn gso_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::EIO | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
    )
}

/// One `sendmsg` of `buf` that the kernel cuts into `segment`-byte
/// datagrams (the last may be shorter).
fn send_segmented(
    socket: &SockRef<'_>,
    buf: &[u8],
    segment: usize,
    dst: SocketAddr,
) -> io::Result<usize> {
    let gso = segment as u16;
    let addr = SockaddrStorage::from(dst);
    sendmsg(
        socket.as_raw_fd(),
        &[IoSlice::new(buf)],
        &[ControlMessage::UdpGsoSegments(&gso)],
        MsgFlags::empty(),
        Some(&addr),
    )
    .map_err(io::Error::from)
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
