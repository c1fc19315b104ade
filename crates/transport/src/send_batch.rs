//! Sending packets in batches: consecutive packets of one size to one
//! destination leave in a single `sendmsg` with UDP generic segmentation
//! offload (`UDP_SEGMENT`), which the kernel splits back into one datagram
//! per packet. Half the sender's CPU went into one `sendto` per packet
//! (docs/perf-profile.md). Where the kernel refuses GSO, packets go one by
//! one, as before.
//!
//! The engine writes each packet straight into the batch's buffer
//! ([`SendBatch::reserve`], [`SendBatch::commit`]), computing its ICRC as
//! it copies the payload, from a start the batch gives: the ICRC covers
//! the IPv4 identification, and the kernel chooses it by place. The
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
//! batch stays queued, a packet being written meanwhile is held right
//! after it (sealed as the first of the next batch, and moved to the
//! front once the batch has left), and the caller stops asking the engine
//! for packets and waits for the socket to become writable
//! ([`SendBatch::blocked`]). Dropping it would cost a local ACK timeout
//! per batch.

use crate::send_control::Control;
use socket2::{MsgHdr, SockAddr, SockRef};
use softverbs_engine::{Reservation, MAX_PACKET_LEN};
use softverbs_wire::{Flow, Icrc, IcrcStarts, Opcode};
use std::io::{self, IoSlice};
use std::net::SocketAddr;

/// The kernel's limit on segments in one GSO send (UDP_MAX_SEGMENTS).
const MAX_SEGMENTS: usize = 64;
/// A GSO send is one UDP datagram before segmentation: at most 64 KiB,
/// less the IPv6 and UDP headers.
const MAX_BATCH_BYTES: usize = 65_535 - 40 - 8;

/// Where a batch's datagrams go: a UDP socket, or a test's stand-in.
pub(crate) trait DatagramOut {
    /// One `sendmsg` of `buf` that the kernel cuts into `segment`-byte
    /// datagrams (the last may be shorter), with traffic class `class`.
    fn send_segmented(
        &self,
        buf: &[u8],
        segment: usize,
        dst: SocketAddr,
        class: u8,
    ) -> io::Result<usize>;
    /// One datagram, with traffic class `class`.
    fn send_one(&self, packet: &[u8], dst: SocketAddr, class: u8) -> io::Result<usize>;
}

impl DatagramOut for SockRef<'_> {
    fn send_segmented(
        &self,
        buf: &[u8],
        segment: usize,
        dst: SocketAddr,
        class: u8,
    ) -> io::Result<usize> {
        let segment =
            u16::try_from(segment).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let control = Control::new()
            .segment(segment)
            .traffic_class(dst.is_ipv6(), class);
        send_with(self, buf, dst, &control)
    }

    fn send_one(&self, packet: &[u8], dst: SocketAddr, class: u8) -> io::Result<usize> {
        // Class 0 writes no control message: a plain sendto.
        send_with(
            self,
            packet,
            dst,
            &Control::new().traffic_class(dst.is_ipv6(), class),
        )
    }
}

/// One `sendmsg` of `buf` to `dst` with the messages of `control`.
fn send_with(
    socket: &SockRef<'_>,
    buf: &[u8],
    dst: SocketAddr,
    control: &Control,
) -> io::Result<usize> {
    let addr = SockAddr::from(dst);
    let bufs = [IoSlice::new(buf)];
    let msg = MsgHdr::new()
        .with_addr(&addr)
        .with_buffers(&bufs)
        .with_control(control.bytes());
    socket.sendmsg(&msg, 0)
}

/// Packets waiting to leave together, written in place by the engine
/// ([`SendBatch::reserve`], then [`SendBatch::commit`]).
#[derive(Debug)]
pub(crate) struct SendBatch {
    /// The queued packets, then room for one more: a held packet, or the
    /// one being written.
    buf: Box<[u8]>,
    /// Bytes of queued packets at the start of `buf`.
    len: usize,
    dst: Option<SocketAddr>,
    /// The QP-number block (`slots`) of the queued packets' destination:
    /// a batch goes to one block, so that a receiver that steers by block
    /// (the daemon's SO_REUSEPORT group) never gets another's packets in
    /// a coalesced datagram.
    block: Option<u16>,
    /// The flow of the queued packets, to seal them again if GSO is
    /// refused.
    flow: Option<Flow>,
    /// The traffic class of the queued packets (one per send).
    class: u8,
    segment: usize,
    count: usize,
    /// GSO refused once (old kernel, odd route): send one by one from then on.
    gso_off: bool,
    /// Bytes at the start of `buf` already sent (one by one, before the
    /// socket had no more room).
    sent_bytes: usize,
    /// The socket had no room for the queued packets: they wait for it.
    blocked: bool,
    /// The queued packets are in the process's capture: written before
    /// their first try to leave, so that nothing they bring back (an
    /// ACK, a response another thread captures) comes first in the file,
    /// and once, however many tries they take. (Packets GSO refuses are
    /// sealed again to leave one by one; the capture keeps them as they
    /// were first sealed.)
    captured: bool,
    /// The packet being written: where it goes once committed.
    pending: Option<Placement>,
    /// A packet written while the batch could not leave, right after the
    /// queued ones and sealed as the first of the next batch; it joins
    /// once the batch has left.
    held: Option<Packet>,
    /// Room for a packet that will be dropped (no address for its
    /// destination, or no flow between the addresses).
    discard: Box<[u8]>,
    /// The ICRC of the packet being written, started here and finished
    /// by the engine.
    icrc: Option<Icrc>,
    /// ICRCs started over the headers of the packet shapes sent lately.
    icrc_starts: IcrcStarts,
    /// Whether a datagram the host refused has been said
    /// ([`SendBatch::refused`]).
    refusal_said: bool,
}

/// A packet's length, where it goes, and its traffic class.
#[derive(Debug, Clone, Copy)]
struct Packet {
    len: usize,
    dst: SocketAddr,
    block: u16,
    flow: Flow,
    class: u8,
}

/// Where the packet being written goes when committed.
#[derive(Debug, Clone, Copy)]
enum Placement {
    /// After the queued packets, as one of them.
    Queued(Packet),
    /// After the queued packets, held until they have left.
    Held(Packet),
    /// Ahead of the one queued packet, which is shorter
    /// ([`SendBatch::goes_ahead`]).
    Ahead(Packet),
    /// Nowhere: dropped and counted.
    Dropped,
}

/// What a flush did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sent {
    pub(crate) packets: u64,
    pub(crate) dropped: u64,
    /// System calls that sent them.
    pub(crate) calls: u64,
    /// Sends of a batch handed over that found no room in the socket
    /// (`outbox.rs`; a step counts its own in `IoStats::tx_waits`).
    pub(crate) waits: u64,
}

impl SendBatch {
    pub(crate) fn new() -> SendBatch {
        SendBatch {
            buf: vec![0; MAX_BATCH_BYTES + MAX_PACKET_LEN].into_boxed_slice(),
            len: 0,
            dst: None,
            block: None,
            flow: None,
            class: 0,
            segment: 0,
            count: 0,
            gso_off: false,
            sent_bytes: 0,
            captured: false,
            blocked: false,
            pending: None,
            held: None,
            discard: vec![0; MAX_PACKET_LEN].into_boxed_slice(),
            icrc: None,
            icrc_starts: IcrcStarts::default(),
            refusal_said: false,
        }
    }

    /// Whether packets wait for the socket to have room: the caller must
    /// not reserve more until [`SendBatch::flush`] has sent them (once the
    /// socket is writable again).
    pub(crate) fn blocked(&self) -> bool {
        self.blocked
    }

    /// Whether nothing is queued, held or being written.
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0 && self.held.is_none() && self.pending.is_none()
    }

    /// Packets queued that another of their size could still join (0
    /// when none could: a full batch gains nothing by waiting).
    pub(crate) fn joinable(&self) -> usize {
        let room = self.count < MAX_SEGMENTS && self.len + self.segment <= MAX_BATCH_BYTES;
        if room {
            self.count
        } else {
            0
        }
    }

    /// Room for the next packet, `len` bytes (BTH through ICRC) from the
    /// socket's address `src` to `dst` (`None`: no address, dropped) and
    /// QP-number block `block`, with traffic class `class`, its ICRC
    /// started for the IPv4 identification its place gives it (see the
    /// module docs; the ICRC leaves the traffic class out). If the packet
    /// cannot join the queued ones (another destination, block or traffic
    /// class, longer than the segment, the batch full), they are sent first; if
    /// they cannot leave for want of room, the packet is held after them
    /// until they have, and the batch is [`SendBatch::blocked`].
    pub(crate) fn reserve(
        &mut self,
        socket: &impl DatagramOut,
        src: SocketAddr,
        dst: Option<SocketAddr>,
        block: u16,
        class: u8,
        len: usize,
    ) -> (Sent, Reservation<'_>) {
        debug_assert!(self.held.is_none(), "reserved while blocked");
        let flow = dst.and_then(|dst| Some((dst, Flow::from_sockets(src, dst).ok()?)));
        let Some((dst, flow)) = flow.filter(|_| self.held.is_none() && len <= MAX_PACKET_LEN)
        else {
            return (Sent::default(), self.reserve_dropped(len));
        };
        let packet = Packet {
            len,
            dst,
            block,
            flow,
            class,
        };
        let mut sent = Sent::default();
        let ahead = self.goes_ahead(&packet);
        if !ahead && !self.fits(&packet) {
            sent = self.flush(socket);
        }
        // A held packet leads the next batch, so it is sealed as the first;
        // so is one that goes ahead of the queued one.
        let (placement, identification) = if ahead {
            (Placement::Ahead(packet), 0)
        } else if self.blocked {
            (Placement::Held(packet), 0)
        } else if self.gso_off {
            (Placement::Queued(packet), 0)
        } else {
            (Placement::Queued(packet), self.count)
        };
        // At most MAX_SEGMENTS (64) packets are queued.
        let icrc = u16::try_from(identification)
            .ok()
            .and_then(|id| self.icrc_starts.start(&flow, len, id).ok());
        if icrc.is_none() {
            return (sent, self.reserve_dropped(len));
        }
        self.icrc = icrc;
        self.pending = Some(placement);
        let start = self.len;
        let reservation = Reservation {
            buf: &mut self.buf[start..start + len],
            icrc: self.icrc.as_mut(),
        };
        (sent, reservation)
    }

    fn reserve_dropped(&mut self, len: usize) -> Reservation<'_> {
        self.pending = Some(Placement::Dropped);
        let end = len.min(self.discard.len());
        Reservation {
            buf: &mut self.discard[..end],
            icrc: None,
        }
    }

    /// The packet last reserved is written: it joins the queued ones (a
    /// packet shorter than the segment closes the batch and is sent with
    /// it), or is held, or is dropped and counted.
    pub(crate) fn commit(&mut self, socket: &impl DatagramOut) -> Sent {
        match self.pending.take() {
            Some(Placement::Queued(packet)) => self.queue(socket, packet),
            Some(Placement::Held(packet)) => {
                self.held = Some(packet);
                Sent::default()
            }
            Some(Placement::Ahead(packet)) => self.put_ahead(socket, packet),
            Some(Placement::Dropped) => Sent::dropped(1),
            None => Sent::default(),
        }
    }

    /// Counts in the packet written right after the queued ones.
    fn queue(&mut self, socket: &impl DatagramOut, packet: Packet) -> Sent {
        if self.count == 0 {
            self.dst = Some(packet.dst);
            self.block = Some(packet.block);
            self.flow = Some(packet.flow);
            self.class = packet.class;
            self.segment = packet.len;
        }
        self.count += 1;
        self.len += packet.len;
        if packet.len < self.segment || self.gso_off {
            return self.flush(socket);
        }
        Sent::default()
    }

    /// Whether `packet`, longer than the one packet queued, an ACK (or
    /// NAK), goes ahead of it: a GSO send's last segment may be shorter
    /// than the others, so the two leave in one send, the ACK last. That
    /// is a kept ACK and the reply to the peer's SEND (`kept_packets.rs`):
    /// the ACK, a response, leaves first, and a SEND longer than it (more
    /// than 2 bytes of payload) went in a send of its own after it, two
    /// system calls on each side of a round trip of `ib_send_lat -s 64`
    /// instead of one. Only an ACK: it carries no data, and a later
    /// response of its QP acknowledges as much, so the peer may take it
    /// after anything; two requests of one QP must arrive in PSN order.
    fn goes_ahead(&self, packet: &Packet) -> bool {
        self.count == 1
            && self.buf[0] == u8::from(Opcode::RcAck)
            && !self.gso_off
            && !self.blocked
            && self.held.is_none()
            && self.dst == Some(packet.dst)
            && self.block == Some(packet.block)
            && self.flow == Some(packet.flow)
            && self.class == packet.class
            && packet.len > self.segment
            && self.len + packet.len <= MAX_BATCH_BYTES
    }

    /// The packet written right after the one queued moves ahead of it,
    /// the place it was sealed for; the queued one is sealed again as the
    /// second segment, and, shorter, closes the batch, which leaves.
    fn put_ahead(&mut self, socket: &impl DatagramOut, packet: Packet) -> Sent {
        let total = self.len + packet.len;
        self.buf[..total].rotate_right(packet.len);
        if let Some(flow) = self.flow {
            // Sealed once already, so it cannot fail now.
            let _ = flow.seal_with_identification(&mut self.buf[packet.len..total], 1);
        }
        self.segment = packet.len;
        self.count = 2;
        self.len = total;
        self.flush(socket)
    }

    fn fits(&self, packet: &Packet) -> bool {
        self.count == 0
            || (self.dst == Some(packet.dst)
                && self.block == Some(packet.block)
                && self.class == packet.class
                && packet.len <= self.segment
                && self.count < MAX_SEGMENTS
                && self.len + packet.len <= MAX_BATCH_BYTES)
    }

    /// Sends everything queued, then queues the held packet if there is
    /// one. A socket without room leaves the batch queued and
    /// [`SendBatch::blocked`].
    pub(crate) fn flush(&mut self, socket: &impl DatagramOut) -> Sent {
        let start = self.len;
        let mut sent = self.send_queued(socket);
        if self.blocked {
            return sent;
        }
        if let Some(packet) = self.held.take() {
            // The batch has left: the held packet moves to the front, the
            // place it was sealed for.
            self.buf.copy_within(start..start + packet.len, 0);
            let more = self.queue(socket, packet);
            sent.add(more);
        }
        sent
    }

    fn send_queued(&mut self, socket: &impl DatagramOut) -> Sent {
        let Some(dst) = self.dst else {
            return Sent::default();
        };
        let count = self.count as u64;
        let mut sent = Sent::default();
        if !std::mem::replace(&mut self.captured, true) {
            crate::capture::sent(self.flow, self.class, self.segment, &self.buf[..self.len]);
        }
        self.blocked = false;
        let gso = count > 1 && !self.gso_off;
        let queued = &self.buf[..self.len];
        let class = self.class;
        match gso.then(|| socket.send_segmented(queued, self.segment, dst, class)) {
            Some(Ok(_)) => {
                sent.packets = count;
                sent.calls = 1;
            }
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
            Some(Err(e)) => {
                self.refused(dst, &e);
                sent.dropped = count;
            }
            None => sent = self.send_each(socket, dst),
        }
        if self.blocked {
            return sent;
        }
        self.captured = false;
        self.len = 0;
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
        for packet in self.buf[..self.len].chunks_mut(self.segment).skip(1) {
            // Sealed once already, so it cannot fail now.
            let _ = flow.seal(packet);
        }
    }

    /// Sends the queued packets not yet sent one datagram at a time, up
    /// to the first the socket has no room for.
    fn send_each(&mut self, socket: &impl DatagramOut, dst: SocketAddr) -> Sent {
        let mut sent = Sent::default();
        let mut refused = None;
        for packet in self.buf[self.sent_bytes..self.len].chunks(self.segment) {
            match socket.send_one(packet, dst, self.class) {
                Ok(_) => {
                    sent.packets += 1;
                    sent.calls += 1;
                }
                Err(e) if no_room(&e) => {
                    self.blocked = true;
                    break;
                }
                Err(e) => {
                    refused = Some(e);
                    sent.dropped += 1;
                }
            }
            self.sent_bytes += packet.len();
        }
        if let Some(e) = refused {
            self.refused(dst, &e);
        }
        sent
    }

    /// Says, once for this batch's context, a datagram the host refused
    /// for another reason than room. It is counted as not sent
    /// (`SOFTVERBS_STATS`) and the reliable transports resend, but
    /// nothing said it: an IPv6 multicast group on a device at `::1`
    /// (Linux routes no IPv6 multicast through `lo`) lost every datagram
    /// in silence.
    fn refused(&mut self, dst: SocketAddr, e: &io::Error) {
        if !std::mem::replace(&mut self.refusal_said, true) {
            crate::say!(
                "softverbs: the host refused a datagram to {dst}: {e}; datagrams it refuses \
                 are lost (SOFTVERBS_STATS counts them as not sent)"
            );
        }
    }
}

impl Sent {
    fn dropped(n: u64) -> Sent {
        Sent {
            dropped: n,
            ..Sent::default()
        }
    }

    pub(crate) fn add(&mut self, more: Sent) {
        self.packets += more.packets;
        self.dropped += more.dropped;
        self.calls += more.calls;
        self.waits += more.waits;
    }
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
/// What the engine does with a packet (BTH through ICRC field):
/// reserves room for it, writes it there with the ICRC the batch
/// started, and commits it.
pub(crate) fn push(
    batch: &mut SendBatch,
    socket: &impl DatagramOut,
    packet: &[u8],
    src: SocketAddr,
    dst: SocketAddr,
) -> Sent {
    push_classed(batch, socket, packet, (src, dst), 0)
}

#[cfg(test)]
/// [`push`] of a packet with traffic class `class`.
pub(crate) fn push_classed(
    batch: &mut SendBatch,
    socket: &impl DatagramOut,
    packet: &[u8],
    (src, dst): (SocketAddr, SocketAddr),
    class: u8,
) -> Sent {
    let qpn = u32::from_be_bytes([0, packet[5], packet[6], packet[7]]);
    let block = crate::slots::slot_of(qpn);
    let (mut sent, room) = batch.reserve(socket, src, Some(dst), block, class, packet.len());
    let covered = packet.len() - 4;
    if let Some(icrc) = room.icrc {
        room.buf[..covered].copy_from_slice(&packet[..covered]);
        icrc.roce_headers(&packet[..12]).unwrap();
        icrc.update(&packet[12..covered]);
        room.buf[covered..].copy_from_slice(&icrc.finish().to_le_bytes());
    }
    sent.add(batch.commit(socket));
    sent
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    /// A packet of `len` bytes filled with `fill`, for QP block 1 (its
    /// BTH destination QPN 0x001000): packets of one batch go to one block.
    fn packet(fill: u8, len: usize) -> Vec<u8> {
        let mut p = vec![fill; len];
        p[5..8].copy_from_slice(&[0x00, 0x10, 0x00]);
        p
    }

    /// A receiving and a sending socket on loopback, and their addresses.
    fn sockets() -> (UdpSocket, UdpSocket, SocketAddr, SocketAddr) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (dst, src) = (rx.local_addr().unwrap(), tx.local_addr().unwrap());
        (rx, tx, dst, src)
    }

    /// Receives one datagram and checks its ICRC without knowing the
    /// identification: the payload and the identification it was sealed
    /// with.
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
            sent.packets += push(&mut batch, sock, p, src, d1).packets;
        }
        let (short, other) = (packet(9, 300), packet(7, 1000));
        sent.packets += push(&mut batch, sock, &short, src, d1).packets; // shorter: flushes
        sent.packets += push(&mut batch, sock, &other, src, d2).packets;
        sent.packets += batch.flush(sock).packets;
        assert_eq!(sent.packets, 7);
        for (i, p) in packets.iter().enumerate() {
            assert_eq!(recv_sealed(&rx, src), (p[..996].to_vec(), Some(i as u16)));
        }
        assert_eq!(recv_sealed(&rx, src), (short[..296].to_vec(), Some(5)));
        assert_eq!(recv_sealed(&rx2, src), (other[..996].to_vec(), Some(0)));
    }

    /// A batch that another packet of its size could join says how many
    /// it holds; a full one (15 packets of path MTU 4096: the 64 KiB a
    /// GSO send carries) says none, so that no post keeps it waiting.
    #[test]
    fn a_full_batch_is_not_joinable() {
        let (_rx, tx, dst, src) = sockets();
        let sock = &SockRef::from(&tx);
        let mut batch = SendBatch::new();
        let p = packet(1, 4112);
        for n in 1..15 {
            push(&mut batch, sock, &p, src, dst);
            assert_eq!(batch.joinable(), n);
        }
        push(&mut batch, sock, &p, src, dst);
        assert_eq!(batch.joinable(), 0, "15 of 4,112 bytes: no room for a 16th");
        push(&mut batch, sock, &p, src, dst); // sends the 15, starts anew
        assert_eq!(batch.joinable(), 1);
    }

    /// A packet longer than the one queued, an ACK (a reply after a kept
    /// ACK), goes ahead of it: the two leave in one GSO send, the ACK last,
    /// each sealed for its place there.
    #[test]
    fn a_longer_packet_goes_ahead_of_a_lone_ack() {
        let (rx, tx, dst, src) = sockets();
        let sock = &SockRef::from(&tx);
        let mut batch = SendBatch::new();
        let ack = |fill| {
            let mut p = packet(fill, 20);
            p[0] = u8::from(Opcode::RcAck);
            p
        };
        let (kept, reply) = (ack(1), packet(2, 80));
        assert_eq!(push(&mut batch, sock, &kept, src, dst).packets, 0);
        assert_eq!(push(&mut batch, sock, &reply, src, dst).packets, 2);
        assert_eq!(recv_sealed(&rx, src), (reply[..76].to_vec(), Some(0)));
        assert_eq!(recv_sealed(&rx, src), (kept[..16].to_vec(), Some(1)));
        // Not ahead of two queued packets, nor of a request: requests of
        // one QP leave in PSN order.
        let mut sent = Sent::default();
        let (first, second, request) = (ack(3), ack(4), packet(5, 24));
        for p in [&first, &second, &request, &packet(6, 80)] {
            sent.packets += push(&mut batch, sock, p, src, dst).packets;
        }
        sent.packets += batch.flush(sock).packets;
        assert_eq!(sent.packets, 4);
        assert_eq!(recv_sealed(&rx, src), (first[..16].to_vec(), Some(0)));
        assert_eq!(recv_sealed(&rx, src), (second[..16].to_vec(), Some(1)));
        assert_eq!(recv_sealed(&rx, src), (request[..20].to_vec(), Some(0)));
        assert_eq!(recv_sealed(&rx, src), (packet(6, 76), Some(0)));
    }

    /// The two packets of a reply gone ahead of its ACK wait together for
    /// a socket without room, and leave sealed for their places; where GSO
    /// is refused they leave one by one, both sealed with identification 0.
    #[test]
    fn a_reply_ahead_of_its_ack_waits_for_room_and_survives_refused_gso() {
        let src: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let mut ack = packet(1, 20);
        ack[0] = u8::from(Opcode::RcAck);
        let reply = packet(2, 80);
        let ids = |room: &Room| -> Vec<_> {
            let flow = Flow::from_sockets(src, dst).unwrap();
            let got = room.datagrams.borrow();
            got.iter()
                .map(|(_, p)| (p.len(), flow.verify_recovering_identification(p).unwrap()))
                .collect()
        };
        let room = Room::default();
        let mut batch = SendBatch::new();
        push(&mut batch, &room, &ack, src, dst);
        room.room.set(Some(0));
        assert_eq!(push(&mut batch, &room, &reply, src, dst), Sent::default());
        assert!(batch.blocked(), "no room: both wait");
        room.room.set(None);
        assert_eq!(batch.flush(&room).packets, 2);
        assert_eq!(ids(&room), [(80, Some(0)), (20, Some(1))]);
        let refused = Room {
            no_gso: true,
            ..Room::default()
        };
        let mut batch = SendBatch::new();
        push(&mut batch, &refused, &ack, src, dst);
        assert_eq!(push(&mut batch, &refused, &reply, src, dst).packets, 2);
        assert_eq!(ids(&refused), [(80, Some(0)), (20, Some(0))]);
    }

    /// After GSO is refused, queued packets are sealed again for leaving
    /// alone, and later ones are sealed with identification 0 directly.
    #[test]
    fn packets_sent_one_by_one_carry_identification_zero() {
        let (rx, tx, dst, src) = sockets();
        let sock = &SockRef::from(&tx);
        let mut batch = SendBatch::new();
        for i in 0..3u8 {
            push(&mut batch, sock, &packet(i, 500), src, dst);
        }
        batch.reseal_alone();
        assert_eq!(batch.send_each(sock, dst).packets, 3);
        batch.len = 0;
        batch.count = 0;
        batch.sent_bytes = 0;
        batch.gso_off = true;
        assert_eq!(push(&mut batch, sock, &packet(3, 500), src, dst).packets, 1);
        for i in 0..4u8 {
            assert_eq!(recv_sealed(&rx, src), (packet(i, 496), Some(0)));
        }
    }

    /// Packets for QPs of two blocks never share a batch: a receiver
    /// steering whole datagrams by block would get the other's packets.
    #[test]
    fn a_batch_holds_packets_for_one_block() {
        let (rx, tx, dst, src) = sockets();
        let sock = &SockRef::from(&tx);
        let mut batch = SendBatch::new();
        let mut other = packet(2, 500);
        other[5..8].copy_from_slice(&[0x00, 0x20, 0x00]); // block 2
        push(&mut batch, sock, &packet(1, 500), src, dst);
        push(&mut batch, sock, &other, src, dst);
        batch.flush(sock);
        assert_eq!(recv_sealed(&rx, src), (packet(1, 496), Some(0)));
        assert_eq!(recv_sealed(&rx, src), (other[..496].to_vec(), Some(0)));
    }

    /// A socket stand-in with room for `room` more datagrams (None: any
    /// number; then EAGAIN), refusing GSO if told to, or every datagram
    /// (no route), recording every datagram it took.
    #[derive(Default)]
    struct Room {
        room: std::cell::Cell<Option<u32>>,
        no_gso: bool,
        unreachable: bool,
        datagrams: std::cell::RefCell<Vec<(SocketAddr, Vec<u8>)>>,
        /// The traffic class of each datagram, in order.
        classes: std::cell::RefCell<Vec<u8>>,
    }

    impl Room {
        fn take(&self, n: usize) -> io::Result<()> {
            if self.unreachable {
                return Err(io::Error::from_raw_os_error(libc::ENETUNREACH));
            }
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
        fn send_segmented(
            &self,
            buf: &[u8],
            seg: usize,
            dst: SocketAddr,
            class: u8,
        ) -> io::Result<usize> {
            if self.no_gso {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            self.take(buf.len().div_ceil(seg))?;
            let mut d = self.datagrams.borrow_mut();
            d.extend(buf.chunks(seg).map(|p| (dst, p.to_vec())));
            let n = buf.len().div_ceil(seg);
            self.classes
                .borrow_mut()
                .extend(std::iter::repeat_n(class, n));
            Ok(buf.len())
        }

        fn send_one(&self, packet: &[u8], dst: SocketAddr, class: u8) -> io::Result<usize> {
            self.take(1)?;
            self.datagrams.borrow_mut().push((dst, packet.to_vec()));
            self.classes.borrow_mut().push(class);
            Ok(packet.len())
        }
    }

    fn unsealed(d: &(SocketAddr, Vec<u8>)) -> (SocketAddr, Vec<u8>) {
        (d.0, d.1[..d.1.len() - 4].to_vec())
    }

    /// Packets of two traffic classes to one destination never share a
    /// send (its control message gives all its datagrams one class), and
    /// each leaves with its own, GSO or not.
    #[test]
    fn a_batch_holds_packets_of_one_traffic_class() {
        let src: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let dst: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        for no_gso in [false, true] {
            let room = Room {
                no_gso,
                ..Room::default()
            };
            let mut batch = SendBatch::new();
            let mut sent = Sent::default();
            for (i, class) in [(1, 0x60), (2, 0x60), (3, 0), (4, 0xb8)] {
                sent.add(push_classed(
                    &mut batch,
                    &room,
                    &packet(i, 500),
                    (src, dst),
                    class,
                ));
            }
            sent.add(batch.flush(&room));
            assert_eq!(sent.packets, 4);
            assert_eq!(*room.classes.borrow(), [0x60, 0x60, 0, 0xb8]);
            let batches = if no_gso { 4 } else { 3 };
            assert_eq!(sent.calls, batches, "no_gso {no_gso}");
        }
    }

    /// Datagrams the host refuses (no route: an IPv6 group on `lo`) are
    /// dropped and counted, the batch does not wait for them, and the
    /// first refusal is said (once for the batch's context).
    #[test]
    fn refused_datagrams_are_dropped_counted_and_said() {
        let room = Room {
            unreachable: true,
            ..Room::default()
        };
        let src: SocketAddr = "[::1]:5000".parse().unwrap();
        let dst: SocketAddr = "[ff05::77]:4791".parse().unwrap();
        let mut batch = SendBatch::new();
        for i in 0..2u8 {
            push(&mut batch, &room, &packet(i, 600), src, dst);
        }
        assert!(!batch.refusal_said);
        assert_eq!(batch.flush(&room).dropped, 2);
        assert!(!batch.blocked() && batch.is_empty());
        assert!(batch.refusal_said);
    }

    /// A GSO batch the socket has no room for stays queued (nothing is
    /// dropped); a packet for another destination is held beside it; once
    /// there is room both leave, in order, each exactly once, each with
    /// a valid ICRC.
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
            assert_eq!(push(&mut batch, &room, p, src, d1), Sent::default());
        }
        room.room.set(Some(0));
        let other = packet(9, 600);
        assert_eq!(push(&mut batch, &room, &other, src, d2), Sent::default());
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
        // Each is sealed for its place: the held packet, written after the
        // waiting batch, for the front of the next.
        let ids: Vec<_> = room
            .datagrams
            .borrow()
            .iter()
            .map(|(dst, p)| {
                let flow = Flow::from_sockets(src, *dst).unwrap();
                flow.verify_recovering_identification(p).unwrap()
            })
            .collect();
        assert_eq!(ids, [Some(0), Some(1), Some(2), Some(0)]);
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
            push(&mut batch, &room, p, src, dst);
        }
        let sent = batch.flush(&room);
        assert_eq!((sent.packets, sent.dropped), (1, 0));
        assert!(batch.blocked());
        room.room.set(None);
        let sent = batch.flush(&room);
        assert_eq!((sent.packets, sent.dropped), (2, 0));
        assert!(!batch.blocked());
        let got: Vec<_> = room.datagrams.borrow().iter().map(unsealed).collect();
        let want: Vec<_> = packets.iter().map(|p| (dst, p[..496].to_vec())).collect();
        assert_eq!(got, want);
    }

    /// A packet with no address to go to, or between addresses of two
    /// families, or longer than any the engine builds, is dropped and
    /// counted; the batch goes on.
    #[test]
    fn a_packet_that_cannot_be_sent_is_dropped() {
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sock = &SockRef::from(&tx);
        let mut batch = SendBatch::new();
        let src = tx.local_addr().unwrap();
        let v6: SocketAddr = "[::1]:4791".parse().unwrap();
        assert_eq!(
            push(&mut batch, sock, &packet(1, 100), src, v6),
            Sent::dropped(1)
        );
        let long = packet(1, MAX_PACKET_LEN + 1);
        assert_eq!(push(&mut batch, sock, &long, src, src), Sent::dropped(1));
        let (sent, room) = batch.reserve(sock, src, None, 1, 0, 100);
        assert!(room.icrc.is_none());
        assert_eq!(sent, Sent::default());
        assert_eq!(batch.commit(sock), Sent::dropped(1));
        assert_eq!(batch.flush(sock), Sent::default());
    }
}
