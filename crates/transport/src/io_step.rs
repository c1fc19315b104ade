//! One step of progress: every datagram waiting on the sockets goes into
//! the engine (after its ICRC is checked), due timers run, and every packet
//! the engine has to send goes out, sealed with its ICRC.

use crate::endpoint::Endpoint;
use crate::send_batch::{SendBatch, Sent};
use crate::slots::SlotPorts;
use socket2::SockRef;
use softverbs_engine::{Engine, Gid, HostMemory, Nanos, MAX_PACKET_LEN};
use softverbs_wire::Flow;
use std::io;

/// Consecutive failed receives after which a step stops reading a socket.
const MAX_RECV_ERRORS: u32 = 64;

/// Counters of what the socket layer did, for diagnostics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Datagrams received.
    pub rx: u64,
    /// Datagrams dropped because their ICRC was wrong.
    pub rx_bad_icrc: u64,
    /// Datagrams sent.
    pub tx: u64,
    /// Packets dropped because a socket would not take them (the
    /// reliable transport resends).
    pub tx_dropped: u64,
}

/// The sockets, buffer and counters a step works with.
#[derive(Debug)]
pub(crate) struct Io {
    pub(crate) endpoints: Vec<Endpoint>,
    pub(crate) ports: SlotPorts,
    pub(crate) stats: IoStats,
    buf: Vec<u8>,
    cmsg: Vec<u8>,
    batch: SendBatch,
}

impl Io {
    pub(crate) fn new(first: Endpoint, ports: SlotPorts) -> Io {
        Io {
            endpoints: vec![first],
            ports,
            stats: IoStats::default(),
            batch: SendBatch::new(),
            cmsg: crate::endpoint::cmsg_buffer(),
            // Room for a GRO datagram (up to 64 KiB of packets); larger
            // datagrams are truncated and then fail their ICRC check.
            buf: vec![0; (MAX_PACKET_LEN + 64).max(1 << 16)],
        }
    }

    /// Receives everything waiting, then sends everything due.
    pub(crate) fn step(&mut self, engine: &mut Engine, mem: &mut dyn HostMemory, now: Nanos) {
        for i in 0..self.endpoints.len() {
            self.receive_all(i, engine, mem, now);
        }
        if engine.poll_timeout().is_some_and(|at| at <= now) {
            engine.handle_timeout(now);
        }
        self.send_all(engine, mem, now);
    }

    fn receive_all(&mut self, i: usize, engine: &mut Engine, mem: &mut dyn HostMemory, now: Nanos) {
        let local = self.endpoints[i].local();
        let mut errors = 0;
        loop {
            let got = self.endpoints[i].recv_segments(&mut self.buf, &mut self.cmsg);
            let (n, from, segment) = match got {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                // A failed receive has usually consumed its datagram (or
                // was interrupted): go on, but never spin on a socket
                // that keeps failing while holding the driver lock.
                Err(_) if errors < MAX_RECV_ERRORS => {
                    errors += 1;
                    continue;
                }
                Err(_) => return,
            };
            let Ok(flow) = Flow::from_sockets(from, local) else {
                self.stats.rx_bad_icrc += 1;
                continue;
            };
            let (src, dst) = (Gid::from_ip(from.ip()), Gid::from_ip(local.ip()));
            for packet in self.buf[..n].chunks(segment.unwrap_or(n).max(1)) {
                self.stats.rx += 1;
                if flow.verify(packet).is_err() {
                    self.stats.rx_bad_icrc += 1;
                    continue;
                }
                engine.handle_packet(now, src, dst, packet, mem);
            }
        }
    }

    fn send_all(&mut self, engine: &mut Engine, mem: &dyn HostMemory, now: Nanos) {
        let Io {
            endpoints,
            ports,
            stats,
            buf,
            batch,
            ..
        } = self;
        let ep = &endpoints[0];
        let socket = SockRef::from(ep.socket());
        while let Some(t) = engine.poll_transmit(now, mem, buf) {
            let packet = &mut buf[..t.len];
            let dest_qpn = u32::from_be_bytes([0, packet[5], packet[6], packet[7]]);
            let Some(dst) =
                crate::gid_addr::socket_addr(t.dst_gid, ep.local(), ports.port_of_qpn(dest_qpn))
            else {
                stats.tx_dropped += 1;
                continue;
            };
            let sealed =
                Flow::from_sockets(ep.local(), dst).is_ok_and(|flow| flow.seal(packet).is_ok());
            if !sealed {
                stats.tx_dropped += 1;
                continue;
            }
            stats.count(batch.push(&socket, packet, dst));
        }
        stats.count(batch.flush(&socket));
    }
}

impl IoStats {
    fn count(&mut self, sent: Sent) {
        self.tx += sent.packets;
        self.tx_dropped += sent.dropped;
    }
}
