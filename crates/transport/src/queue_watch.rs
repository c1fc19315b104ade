//! Whether the steered socket's receive queue is filling with more than
//! one sender's data, or with UC or UD data, so that what arrives is
//! marked for the engine (`softverbs_engine::Arrival::marked`, the
//! engine's `congestion.rs` and `cnp.rs`).
//!
//! One sender's RC window fits this socket's buffer by construction
//! (`Endpoint::send_window`); two or more senders each keep a window in
//! flight and together overflow it (several processes writing into one,
//! `tests/programs/fan_in.c`), and UC and UD keep no window at all: one
//! sender faster than this reader overflows it (a wire UC `ib_send_bw
//! -a` lost 1,084 datagrams in one run). So the queue is looked at only
//! while data came from more than one sender, or UC or UD data came,
//! since it was last found empty, and then by how full the kernel says
//! it is (`SO_MEMINFO`: one system call per eighth of the buffer's size
//! read in datagram bytes, none otherwise; what the kernel counts
//! includes memory of datagrams already read that it has not yet given
//! back). More than a quarter counts as filling, and the data packets
//! read then are marked, as a switch marks packets above a threshold of
//! its queue: the senders learn of it a round trip later, and what they
//! send meanwhile must still fit. Sixteen processes writing into one at
//! Debian's default buffer size (`tests/programs/fan_in.c`, 1,000 WRITEs
//! of 64 KiB each) lost 1,804 to 2,091 datagrams unmarked (in one run of
//! three a sender ran out of retries), 292 to 567 with half full as the
//! threshold, 23 to 77 with a quarter.

use std::net::SocketAddr;
use std::os::fd::AsFd;

/// Packets this long or longer carry data (an ACK is 20 bytes of RoCE); a
/// peer that only acknowledges what this context sends it does not count
/// as a sender, and its ACKs are not marked: they add little to the queue.
const DATA_BYTES: usize = 256;
/// Read at most this much between two looks at the queue.
const MOST_BETWEEN_LOOKS: usize = 256 << 10;

/// What the reading side saw of the queue since it was last empty.
#[derive(Debug, Default)]
pub(crate) struct QueueWatch {
    /// Bytes read since the queue was last found empty.
    read: usize,
    /// The first sender of data since then.
    data_from: Option<SocketAddr>,
    /// Another sender's data came too.
    several: bool,
    /// UC or UD data came, which no window bounds.
    unbounded: bool,
    /// `read` at which the queue is looked at next.
    next_look: usize,
    /// The last look found it filling.
    filling: bool,
}

impl QueueWatch {
    /// A read found the queue empty: whatever comes next starts afresh.
    pub(crate) fn emptied(&mut self) {
        *self = QueueWatch::default();
    }

    /// A datagram of `len` bytes from `src` was read from `socket`, in
    /// packets of `segment` bytes (several when GRO coalesced them), the
    /// first starting with `opcode`: whether its packets are to be
    /// marked.
    pub(crate) fn read(
        &mut self,
        socket: &impl AsFd,
        src: SocketAddr,
        len: usize,
        (segment, opcode): (usize, u8),
    ) -> bool {
        self.read += len;
        let data = segment >= DATA_BYTES;
        if data {
            match self.data_from {
                None => self.data_from = Some(src),
                Some(first) => self.several |= first != src,
            }
            self.unbounded |= unbounded(opcode);
        }
        if (self.several || self.unbounded) && self.read >= self.next_look {
            let (filling, buffer) = fill_of(socket);
            self.filling = filling;
            let step = match buffer {
                0 => MOST_BETWEEN_LOOKS, // not known: rarely asked again
                b => (b / 8).min(MOST_BETWEEN_LOOKS),
            };
            self.next_look = self.read + step;
        }
        self.filling && data
    }
}

/// Whether a packet of `opcode` is UC or UD (the opcode's top three bits:
/// UC 001, UD 011).
fn unbounded(opcode: u8) -> bool {
    matches!(opcode >> 5, 1 | 3)
}

/// Whether the socket holds more than a quarter of its buffer, and the
/// buffer's size (both as the kernel counts them: each datagram at its
/// memory's cost, and datagrams already read whose memory Linux has not
/// yet given back, up to a quarter of the buffer). Unknown reads as not
/// filling, with a size of 0.
fn fill_of(socket: &impl AsFd) -> (bool, usize) {
    match nix::sys::socket::getsockopt(socket, MemInfo) {
        Ok([queued, buffer]) => (queued > buffer / 4, buffer as usize),
        Err(_) => (false, 0),
    }
}

// SO_MEMINFO: nix has no type for it; its own macro defines one (the
// getsockopt call it expands to is nix's code, as for nix's own options;
// no unsafe is written in this crate). The first two of the kernel's
// counters are asked for, the bytes queued for reading
// (SK_MEMINFO_RMEM_ALLOC) and the receive buffer (SK_MEMINFO_RCVBUF): the
// kernel copies as many as asked for.
use nix::{getsockopt_impl, sockopt_impl};
sockopt_impl!(
    /// `SO_MEMINFO`, its first two counters.
    MemInfo,
    GetOnly,
    libc::SOL_SOCKET,
    libc::SO_MEMINFO,
    [u32; 2]
);

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    fn sockets() -> (UdpSocket, UdpSocket, UdpSocket) {
        let bind = || UdpSocket::bind("127.0.0.1:0").unwrap();
        let rx = bind();
        rx.set_nonblocking(true).unwrap();
        socket2::SockRef::from(&rx)
            .set_recv_buffer_size(64 << 10)
            .unwrap();
        (rx, bind(), bind())
    }

    /// Reads every datagram waiting, as the progress thread does, and
    /// says how many were marked.
    fn drain(rx: &UdpSocket, watch: &mut QueueWatch) -> usize {
        let mut buf = [0; 2048];
        let mut marked = 0;
        loop {
            match rx.recv_from(&mut buf) {
                Ok((n, src)) => marked += usize::from(watch.read(rx, src, n, (n, buf[0]))),
                Err(_) => {
                    watch.emptied();
                    return marked;
                }
            }
        }
    }

    /// RC SEND_ONLY and UC SEND_ONLY.
    const RC: u8 = 0x04;
    const UC: u8 = 0x24;

    fn fill(rx: &UdpSocket, from: &[&UdpSocket], datagrams: usize, len: usize) {
        fill_with(rx, from, datagrams, len, RC);
    }

    /// Datagrams of `len` bytes whose first is `opcode`.
    fn fill_with(rx: &UdpSocket, from: &[&UdpSocket], datagrams: usize, len: usize, opcode: u8) {
        let to = rx.local_addr().unwrap();
        let mut datagram = vec![0; len];
        datagram[0] = opcode;
        for i in 0..datagrams {
            from[i % from.len()].send_to(&datagram, to).unwrap();
        }
    }

    #[test]
    fn two_senders_filling_the_queue_are_marked() {
        let (rx, a, b) = sockets();
        let mut watch = QueueWatch::default();
        // 64 KiB asked for is 128 KiB counted; 40 datagrams of 1 KiB
        // (2,304 bytes counted each) cost more than a quarter of it, and
        // 4 less.
        fill(&rx, &[&a, &b], 40, 1024);
        assert!(drain(&rx, &mut watch) > 0);
    }

    #[test]
    fn one_uc_sender_filling_the_queue_is_marked() {
        let (rx, a, _) = sockets();
        let mut watch = QueueWatch::default();
        fill_with(&rx, &[&a], 40, 1024, UC);
        assert!(drain(&rx, &mut watch) > 0);
    }

    #[test]
    fn a_short_uc_queue_is_not_marked() {
        let (rx, a, _) = sockets();
        let mut watch = QueueWatch::default();
        for _ in 0..20 {
            fill_with(&rx, &[&a], 4, 1024, UC);
            assert_eq!(drain(&rx, &mut watch), 0);
        }
    }

    #[test]
    fn one_rc_sender_is_never_marked_however_full() {
        let (rx, a, _) = sockets();
        let mut watch = QueueWatch::default();
        fill(&rx, &[&a], 40, 1024);
        assert_eq!(drain(&rx, &mut watch), 0);
    }

    #[test]
    fn a_queue_read_while_it_is_short_is_not_marked() {
        let (rx, a, b) = sockets();
        let mut watch = QueueWatch::default();
        for _ in 0..20 {
            fill(&rx, &[&a, &b], 4, 1024);
            assert_eq!(drain(&rx, &mut watch), 0);
        }
    }

    #[test]
    fn acknowledgements_do_not_make_a_second_sender() {
        let (rx, a, b) = sockets();
        let mut watch = QueueWatch::default();
        fill(&rx, &[&a], 40, 1024);
        fill(&rx, &[&b], 10, 48);
        assert_eq!(drain(&rx, &mut watch), 0);
    }
}
