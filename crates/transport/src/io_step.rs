//! One step of progress: every packet the daemon passed on goes into the
//! engine (after its ICRC is checked), due timers run, and every packet
//! the engine has to send goes out to UDP 4791. The engine writes each
//! packet straight into the send batch, ICRC included, started by the
//! batch from the IP and UDP headers (it knows each packet's IPv4
//! identification).

use crate::daemon::ROCE_PORT;
use crate::endpoint::Endpoint;
use crate::send_batch::{DatagramOut, SendBatch, Sent};
use socket2::SockRef;
use softverbs_engine::{Engine, Gid, HostMemory, Nanos, PacketSink, Reservation, Route};
use softverbs_wire::Flow;
use std::net::SocketAddr;

/// Counters of what the socket layer did, for diagnostics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Datagrams received.
    pub rx: u64,
    /// Datagrams dropped because their ICRC was wrong.
    pub rx_bad_icrc: u64,
    /// Datagrams sent.
    pub tx: u64,
    /// Packets dropped because they could not be sent (an unreachable
    /// destination; the reliable transport resends).
    pub tx_dropped: u64,
    /// Times the socket had no room and sending waited for it.
    pub tx_waits: u64,
}

/// Who makes a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StepBy {
    /// A verb, on the application's thread.
    Verb,
    /// The progress thread, woken by its poller (a datagram, a timer, or
    /// room in the sending socket).
    ProgressThread,
}

/// The endpoint, buffer and counters a step works with.
#[derive(Debug)]
pub(crate) struct Io {
    pub(crate) endpoint: Endpoint,
    pub(crate) stats: IoStats,
    /// The daemon's session broke (it died): nothing arrives any more, and
    /// the engine's timers fail what waits, as with a dead link.
    pub(crate) link_down: bool,
    /// The driver has stopped polling the dead daemon's sockets.
    pub(crate) link_down_handled: bool,
    batch: SendBatch,
}

impl Io {
    pub(crate) fn new(endpoint: Endpoint) -> Io {
        Io {
            endpoint,
            stats: IoStats::default(),
            link_down: false,
            link_down_handled: false,
            batch: SendBatch::new(),
        }
    }

    /// Receives everything waiting (unless a verb's step, which received
    /// before the verb ran: [`Io::receive`]), runs due timers, then sends
    /// everything due.
    pub(crate) fn step(
        &mut self,
        engine: &mut Engine,
        mem: &mut dyn HostMemory,
        now: Nanos,
        by: StepBy,
    ) {
        if by == StepBy::ProgressThread {
            self.receive(engine, mem, now, by);
        }
        if engine.poll_timeout().is_some_and(|at| at <= now) {
            engine.handle_timeout(now);
        }
        self.send_all(engine, mem, now, by);
    }

    /// Receives what waits. A verb receives before it runs, so that an
    /// `ibv_poll_cq` returns what arrived for it at once, not on its next
    /// call. With a steered socket, the daemon's stream carries only
    /// multicast datagrams and CM messages, which are not worth a system
    /// call on every verb: only the progress thread, woken by its poller
    /// when the stream has data, reads it then.
    pub(crate) fn receive(
        &mut self,
        engine: &mut Engine,
        mem: &mut dyn HostMemory,
        now: Nanos,
        by: StepBy,
    ) {
        if self.link_down {
            return;
        }
        let stats = &mut self.stats;
        let from_daemon = by == StepBy::ProgressThread;
        let got = self.endpoint.receive(from_daemon, |frame, packets| {
            let Ok(flow) = Flow::from_sockets(frame.src, frame.dst) else {
                stats.rx_bad_icrc += 1;
                return;
            };
            let (src, dst) = (Gid::from_ip(frame.src.ip()), Gid::from_ip(frame.dst.ip()));
            for packet in packets.chunks(usize::from(frame.segment).max(1)) {
                stats.rx += 1;
                // The IPv4 identification is not visible here: recovered
                // from the ICRC (softverbs_wire::identification); IPv6 is
                // checked exactly.
                if flow.verify_recovering_identification(packet).is_err() {
                    stats.rx_bad_icrc += 1;
                    continue;
                }
                crate::capture::received(&flow, packet);
                engine.handle_packet(now, src, dst, packet, mem);
            }
        });
        if got.is_err() {
            self.link_down = true;
        }
    }

    /// Whether packets wait for the sending socket to have room; nothing
    /// more is taken from the engine until it has.
    pub(crate) fn blocked(&self) -> bool {
        self.batch.blocked()
    }

    /// Sends what waits for room, then every packet the engine has, until
    /// the socket has no more room (then the rest stays in the engine,
    /// which is where packets wait best: nothing is built twice). Only the
    /// progress thread tries a socket that had no room again: it is woken
    /// when there is room, while a verb spinning in `ibv_poll_cq` would
    /// try a full socket a million times a second.
    fn send_all(&mut self, engine: &mut Engine, mem: &dyn HostMemory, now: Nanos, by: StepBy) {
        let Io {
            endpoint,
            stats,
            batch,
            ..
        } = self;
        let socket = SockRef::from(endpoint.socket());
        if batch.blocked() {
            if by == StepBy::Verb {
                return;
            }
            stats.count(batch.flush(&socket));
            if batch.blocked() {
                return;
            }
        }
        let mut sink = BatchSink {
            batch,
            socket: &socket,
            local: endpoint.local(),
            stats,
        };
        while engine.poll_transmit_to(now, mem, &mut sink).is_some() {
            if sink.batch.blocked() {
                sink.stats.tx_waits += 1;
                return;
            }
        }
        let BatchSink { batch, stats, .. } = sink;
        stats.count(batch.flush(&socket));
        stats.tx_waits += u64::from(batch.blocked());
    }
}

/// The engine writes its packets straight into the send batch, each to
/// the RoCEv2 port of its destination GID's address.
struct BatchSink<'a, S> {
    batch: &'a mut SendBatch,
    socket: &'a S,
    local: SocketAddr,
    stats: &'a mut IoStats,
}

impl<S: DatagramOut> PacketSink for BatchSink<'_, S> {
    fn reserve(&mut self, route: &Route, len: usize) -> Reservation<'_> {
        let dst = crate::gid_addr::socket_addr(route.dst_gid, self.local, ROCE_PORT);
        let block = crate::slots::slot_of(route.dest_qpn);
        let (sent, reservation) = self.batch.reserve(self.socket, self.local, dst, block, len);
        self.stats.count(sent);
        reservation
    }

    fn commit(&mut self) {
        self.stats.count(self.batch.commit(self.socket));
    }
}

impl IoStats {
    fn count(&mut self, sent: Sent) {
        self.tx += sent.packets;
        self.tx_dropped += sent.dropped;
    }
}
