//! Sending packets in batches: consecutive packets of one size to one
//! destination leave in a single `sendmsg` with UDP generic segmentation
//! offload (`UDP_SEGMENT`), which the kernel splits back into one datagram
//! per packet. Half the sender's CPU went into one `sendto` per packet
//! (docs/perf-profile.md). Where the kernel refuses GSO, packets go one by
//! one, as before.

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, SockaddrStorage};
use socket2::{SockAddr, SockRef};
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
            segment: 0,
            count: 0,
            gso_off: false,
        }
    }

    /// Adds a sealed packet, first sending what is queued if the packet
    /// cannot join it. All segments but the last of a GSO send have one
    /// size, so a shorter packet closes the batch.
    pub(crate) fn push(&mut self, socket: &SockRef<'_>, packet: &[u8], dst: SocketAddr) -> Sent {
        let mut sent = Sent::default();
        if !self.fits(packet.len(), dst) {
            sent = self.flush(socket);
        }
        if self.count == 0 {
            self.dst = Some(dst);
            self.segment = packet.len();
        }
        self.buf.extend_from_slice(packet);
        self.count += 1;
        if packet.len() < self.segment || self.gso_off {
            let more = self.flush(socket);
            sent.packets += more.packets;
            sent.dropped += more.dropped;
        }
        sent
    }

    fn fits(&self, len: usize, dst: SocketAddr) -> bool {
        self.count == 0
            || (self.dst == Some(dst)
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
                sent = self.send_each(socket, dst);
            }
            // A full socket buffer (or an unreachable peer) drops the whole
            // batch; the reliable transport resends, as for one packet.
            Some(Err(_)) => sent.dropped = count,
            None => sent = self.send_each(socket, dst),
        }
        self.buf.clear();
        sent
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

    /// Packets of one size, then a shorter last one, arrive as separate
    /// datagrams with their bytes intact, in order; a packet for another
    /// destination starts a new batch.
    #[test]
    fn a_batch_arrives_as_one_datagram_per_packet() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let rx2 = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (d1, d2) = (rx.local_addr().unwrap(), rx2.local_addr().unwrap());
        let mut batch = SendBatch::new();
        let sock = &SockRef::from(&tx);
        let packets: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 1000]).collect();
        let mut sent = Sent::default();
        for p in &packets {
            sent.packets += batch.push(sock, p, d1).packets;
        }
        sent.packets += batch.push(sock, &[9; 300], d1).packets; // shorter: flushes
        sent.packets += batch.push(sock, &[7; 1000], d2).packets;
        sent.packets += batch.flush(sock).packets;
        assert_eq!(sent.packets, 7);
        let mut buf = [0u8; 2000];
        for p in &packets {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &p[..]);
        }
        assert_eq!(rx.recv(&mut buf).unwrap(), 300);
        assert_eq!(rx2.recv(&mut buf).unwrap(), 1000);
    }
}
