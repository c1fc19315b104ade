//! One step of progress: every packet the daemon passed on goes into the
//! engine (after its ICRC is checked), due timers run, and every packet
//! the engine has to send goes out to UDP 4791. The engine writes each
//! packet straight into the send batch, ICRC included, started by the
//! batch from the IP and UDP headers (it knows each packet's IPv4
//! identification).

use crate::corked_batch::{cork, AfterPost, Cork};
use crate::daemon::udp_port;
use crate::endpoint::{Endpoint, Receiver};
use crate::link_watch::LinkWatch;
use crate::outbox::{Open, Outbox};
use crate::packet_faults::{Fate, PacketFaults};
use crate::send_batch::{DatagramOut, SendBatch, Sent};
use softverbs_engine::{Engine, Gid, HostMemory, Nanos, PacketSink, Reservation, Route};
use softverbs_wire::{Flow, IcrcStarts};
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
    /// System calls that sent them (a GSO send carries several).
    pub tx_calls: u64,
    /// Posts of sends that kept their last batch part-filled for the
    /// next post (`corked_batch.rs`).
    pub corked: u64,
    /// Packets dropped because they could not be sent (an unreachable
    /// destination; the reliable transport resends).
    pub tx_dropped: u64,
    /// Times the socket had no room and sending waited for it.
    pub tx_waits: u64,
    /// Datagrams a packet rule of `SOFTVERBS_FAULTS` dropped.
    pub rx_dropped_by_rule: u64,
    /// Verbs that kept the packets due (an ACK) for the verb after them.
    pub held: u64,
    /// Receives other than the progress thread's looks (a verb's, most
    /// often a spinning poll's) that read the daemon's stream (CM
    /// messages, multicast datagrams passed on) because the progress
    /// thread, having lent the steered socket, noted frames on it
    /// (`endpoint::StreamWaiting`).
    pub stream_by_verb: u64,
}

/// Whether a step sends what is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sending {
    /// Everything due.
    All,
    /// Everything due, from a post of sends: a GSO batch left part-filled
    /// at the end waits for the next post to fill it while answers to
    /// earlier packets are on their way and no CQ is armed for an event
    /// (`corked_batch.rs`), at most until `until` if nothing sends it
    /// first.
    Corking { until: Nanos },
    /// Nothing: a verb keeps it for the next (`kept_packets.rs`).
    Kept,
    /// The progress thread's step, which leaves what is due to the
    /// application's next verb (`kept_packets.rs`) when it runs no timer,
    /// finds nothing waiting for room in the socket, and either takes
    /// nothing in while what a verb kept is young, or, where the
    /// application answers WRITEs with sends of its own (`answering`),
    /// takes in the end of a WRITE, whose ACK is then kept for the answer.
    Thread {
        /// What verbs kept: None, nothing; else whether it is young.
        kept: Option<bool>,
        /// `kept_packets::WriteAnswers::answering`.
        answering: bool,
    },
}

/// What a step saw, for [`Sending::sends`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Saw {
    /// It ran a timer, or packets wait for room in the socket.
    pub(crate) work: bool,
    /// It took packets in ...
    pub(crate) took_in: bool,
    /// ... among them the end of a WRITE.
    pub(crate) took_write: bool,
}

impl Sending {
    /// Whether a step that saw `saw` sends what is due.
    pub(crate) fn sends(self, saw: Saw) -> bool {
        match self {
            Sending::All | Sending::Corking { .. } => true,
            Sending::Kept => false,
            Sending::Thread { kept, answering } => {
                let keep = match (saw.took_in, kept) {
                    (false, kept) => kept == Some(true),
                    (true, Some(false)) => false,
                    (true, _) => answering && saw.took_write,
                };
                saw.work || !keep
            }
        }
    }
}

/// What a step's packets leave through.
#[derive(Clone, Copy)]
pub(crate) struct Outgoing<'o> {
    /// The send batch (`outbox.rs`).
    pub(crate) outbox: &'o Outbox,
    /// The step hands its last batch over, for the caller to send once
    /// it has unlocked the driver.
    pub(crate) hand_over: bool,
}

/// What a step did.
pub(crate) struct Stepped<'o> {
    /// It sent what was due.
    pub(crate) sent: bool,
    /// Its last batch, handed over (`Outgoing::hand_over`), to send once
    /// the driver is unlocked.
    pub(crate) handoff: Option<Open<'o>>,
    /// It raised a completion event: an application thread waiting on a
    /// completion channel was woken.
    pub(crate) raised_completion_event: bool,
}

/// Who makes a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StepBy {
    /// A verb, on the application's thread.
    Verb,
    /// The progress thread, woken by its poller (a datagram, a timer, or
    /// room in the sending socket).
    ProgressThread,
    /// The progress thread lingering, polling, between two looks at its
    /// poller: it receives from the steered socket and the group sockets
    /// only. The daemon's stream, which carries only CM messages and
    /// multicast datagrams passed on, waits for the next look (`driver.rs`,
    /// `LINGER_STEPS_PER_LOOK`).
    Linger,
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
    /// The interface holding the device's address, watched for the port
    /// to follow it (`None`: on no interface; the port stays up).
    pub(crate) link: Option<LinkWatch>,
    /// What checks the ICRCs of arriving packets.
    icrc_starts: IcrcStarts,
    /// Packet rules of `SOFTVERBS_FAULTS`, if any.
    pub(crate) packet_faults: Option<PacketFaults>,
    /// A post of sends left the batch part-filled for the next
    /// (`Sending::Corking`).
    corked: Option<Cork>,
}

impl Io {
    pub(crate) fn new(endpoint: Endpoint) -> Io {
        Io {
            endpoint,
            stats: IoStats::default(),
            link_down: false,
            link_down_handled: false,
            link: None,
            icrc_starts: IcrcStarts::default(),
            packet_faults: None,
            corked: None,
        }
    }

    /// Receives everything waiting (a lingering step, the steered and
    /// group sockets' only, unless frames were noted on the daemon's stream; a
    /// verb's step nothing, for it received before the verb ran:
    /// [`Io::receive`]), runs due timers, then sends everything
    /// due, unless `sending` says otherwise; with `hand_over`, the last
    /// batch is handed to `outbox` instead, to leave once the caller has
    /// unlocked the driver.
    pub(crate) fn step<'o>(
        &mut self,
        engine: &mut Engine,
        mem: &mut dyn HostMemory,
        now: Nanos,
        by: StepBy,
        sending: Sending,
        out: Outgoing<'o>,
    ) -> Stepped<'o> {
        let received = self.stats.rx;
        let write_ends = engine.stats().rx_write_ends;
        match by {
            StepBy::ProgressThread => self.receive(engine, mem, now, Receiver::ProgressThread),
            StepBy::Linger => self.receive(engine, mem, now, Receiver::Verb),
            StepBy::Verb => self.release_held(engine, mem, now),
        }
        let timer_due = engine.poll_timeout().is_some_and(|at| at <= now);
        if timer_due {
            engine.handle_timeout(now);
        }
        let corked_due = self.corked_until().is_some_and(|at| at <= now);
        let send = sending.sends(Saw {
            work: timer_due || corked_due || out.outbox.blocked(),
            took_in: self.stats.rx != received,
            took_write: engine.stats().rx_write_ends != write_ends,
        });
        let mut handoff = None;
        if send {
            let cork_until = match sending {
                Sending::Corking { until } => Some(until),
                _ => None,
            };
            handoff = self.send_all(engine, mem, now, by, cork_until, out);
        } else if sending == Sending::Kept {
            self.stats.held += 1;
        }
        Stepped {
            sent: send,
            handoff,
            raised_completion_event: false,
        }
    }

    /// Counts what the outbox sent since its counts were last taken.
    pub(crate) fn count_handed(&mut self, outbox: &Outbox) {
        self.stats.count(outbox.take_counts());
    }

    /// Receives what waits. A verb receives before it runs, so that an
    /// `ibv_poll_cq` returns what arrived for it at once, not on its next
    /// call. With a steered socket, the daemon's stream carries only CM
    /// messages (a multicast group's datagrams arrive on the context's
    /// own group socket), which are not worth a system call on every
    /// verb: the progress thread, woken by its poller when
    /// the stream has data, reads it then, or, while it lent the socket to
    /// a spinning application, notes it for the next verb to read
    /// (`endpoint::StreamWaiting`).
    pub(crate) fn receive(
        &mut self,
        engine: &mut Engine,
        mem: &mut dyn HostMemory,
        now: Nanos,
        by: Receiver,
    ) {
        if self.link_down {
            // Held packets would stay due, and the progress thread spin.
            if let Some(f) = self.packet_faults.as_mut() {
                f.drop_held();
            }
            return;
        }
        let Io {
            endpoint,
            stats,
            icrc_starts,
            packet_faults,
            ..
        } = self;
        let mut rx = Rx { stats, icrc_starts };
        let got = endpoint.receive(by, |frame, packets, marked| {
            let Some(from) = Received::of(frame.src, frame.dst, marked, frame.class) else {
                rx.stats.rx_bad_icrc += 1;
                return;
            };
            for packet in packets.chunks(usize::from(frame.segment).max(1)) {
                rx.stats.rx += 1;
                let Some(faults) = packet_faults.as_mut() else {
                    deliver(engine, mem, &mut rx, &from, packet, now);
                    continue;
                };
                match faults.decide(now, frame.src, frame.dst, frame.class, packet) {
                    Fate::Deliver(copies) => {
                        rx.stats.rx_dropped_by_rule += u64::from(copies == 0);
                        for _ in 0..copies {
                            deliver(engine, mem, &mut rx, &from, packet, now);
                        }
                        if copies > 0 {
                            // A packet held for reordering follows this one,
                            // unmarked: it waited here, not in the socket's
                            // queue.
                            faults.delivered();
                            for held in faults.take_due(now) {
                                if let Some(from) =
                                    Received::of(held.src, held.dst, false, held.class)
                                {
                                    deliver(engine, mem, &mut rx, &from, &held.bytes, now);
                                }
                            }
                        }
                    }
                    Fate::Corrupted(bytes) => deliver(engine, mem, &mut rx, &from, &bytes, now),
                    Fate::Held => {}
                }
            }
        });
        match got {
            Ok(noted) => self.stats.stream_by_verb += u64::from(noted),
            Err(_) => self.link_down = true,
        }
        self.release_held(engine, mem, now);
    }

    /// Delivers the packets fault rules held back that are due.
    fn release_held(&mut self, engine: &mut Engine, mem: &mut dyn HostMemory, now: Nanos) {
        let Some(faults) = self.packet_faults.as_mut() else {
            return;
        };
        for held in faults.take_due(now) {
            if let Some(from) = Received::of(held.src, held.dst, false, held.class) {
                let mut rx = Rx {
                    stats: &mut self.stats,
                    icrc_starts: &mut self.icrc_starts,
                };
                deliver(engine, mem, &mut rx, &from, &held.bytes, now);
            }
        }
    }

    /// When a packet held by a fault rule is due.
    pub(crate) fn held_deadline(&self) -> Option<Nanos> {
        self.packet_faults
            .as_ref()
            .and_then(PacketFaults::next_deadline)
    }

    /// Whether the last receive left datagrams for the next
    /// (`Endpoint::more_waiting`); never once the link is down, when
    /// nothing is received any more.
    pub(crate) fn more_waiting(&self) -> bool {
        !self.link_down && self.endpoint.more_waiting()
    }

    /// When the part-filled batch a post of sends left leaves at the
    /// latest, if there is one.
    pub(crate) fn corked_until(&self) -> Option<Nanos> {
        self.corked.map(|c| c.until)
    }

    /// Sends what waits for room, then every packet the engine has, until
    /// the socket has no more room (then the rest stays in the engine,
    /// which is where packets wait best: nothing is built twice). Only the
    /// progress thread tries a socket that had no room again: it is woken
    /// when there is room, while a verb spinning in `ibv_poll_cq` would
    /// try a full socket a million times a second. With `cork_until`, a
    /// batch left part-filled at the end may wait for the next post
    /// (`corked_batch.rs`). The last batch is handed to the outbox if
    /// `out` says so, to leave once the driver is unlocked; anything
    /// written waits first for a batch handed earlier to have left.
    fn send_all<'o>(
        &mut self,
        engine: &mut Engine,
        mem: &dyn HostMemory,
        now: Nanos,
        by: StepBy,
        cork_until: Option<Nanos>,
        out: Outgoing<'o>,
    ) -> Option<Open<'o>> {
        let Io {
            endpoint,
            stats,
            corked,
            ..
        } = self;
        // Whatever follows sends the batch, waits with it for room, or
        // keeps it again.
        let was_corked = corked.take();
        // With nothing to write, a poll need not wait for a batch handed
        // over to leave: outside a step, the batch holds packets only if
        // kept (corked) or waiting for room.
        if was_corked.is_none() && !engine.may_transmit() && !out.outbox.blocked() {
            return None;
        }
        let mut open = out.outbox.open();
        stats.count(open.take_counts());
        let (batch, socket) = open.batch();
        let sent_before = stats.tx;
        let awaited_before = engine.awaits_answers();
        if batch.blocked() {
            if by == StepBy::Verb {
                return None;
            }
            stats.count(batch.flush(&socket));
            if batch.blocked() {
                return None;
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
                return None;
            }
        }
        let BatchSink { batch, stats, .. } = sink;
        if let Some(until) = cork_until.filter(|_| !batch.blocked()) {
            let queued = batch.joinable();
            let renewed = stats.tx != sent_before;
            let post = AfterPost {
                until,
                queued,
                awaited_before,
                cq_armed: engine.cq_armed(),
                renewed,
                rx: stats.rx,
                now,
            };
            *corked = cork(post, was_corked);
            if corked.is_some() {
                stats.corked += u64::from(*corked != was_corked);
                return None;
            }
        }
        if out.hand_over && !batch.is_empty() {
            return Some(open);
        }
        stats.count(batch.flush(&socket));
        stats.tx_waits += u64::from(batch.blocked());
        None
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
        let dst = crate::gid_addr::socket_addr(route.dst_gid, self.local, udp_port());
        let block = crate::slots::slot_of(route.dest_qpn);
        let class = route.traffic_class;
        let (sent, reservation) =
            self.batch
                .reserve(self.socket, self.local, dst, block, class, len);
        self.stats.count(sent);
        reservation
    }

    fn commit(&mut self) {
        self.stats.count(self.batch.commit(self.socket));
    }
}

/// Where a datagram came from and went to: its flow (for the ICRC), and
/// its GIDs, whether it arrived in a filling queue and its traffic class
/// (for the engine).
struct Received {
    flow: Flow,
    arrival: softverbs_engine::Arrival,
}

impl Received {
    /// None for addresses RoCE cannot carry (mixed families).
    fn of(src: SocketAddr, dst: SocketAddr, marked: bool, class: u8) -> Option<Received> {
        Some(Received {
            flow: Flow::from_sockets(src, dst).ok()?,
            arrival: softverbs_engine::Arrival {
                src_gid: Gid::from_ip(src.ip()),
                dst_gid: Gid::from_ip(dst.ip()),
                marked,
                traffic_class: class,
            },
        })
    }
}

/// What receiving counts in and checks packets with.
struct Rx<'a> {
    stats: &'a mut IoStats,
    icrc_starts: &'a mut IcrcStarts,
}

/// One received packet into the engine, once its ICRC holds.
fn deliver(
    engine: &mut Engine,
    mem: &mut dyn HostMemory,
    rx: &mut Rx<'_>,
    from: &Received,
    packet: &[u8],
    now: Nanos,
) {
    // The IPv4 identification is not visible here: recovered from the
    // ICRC (softverbs_wire::identification); IPv6 is checked exactly.
    let checked = rx
        .icrc_starts
        .verify_recovering_identification(&from.flow, packet);
    if checked.is_err() {
        rx.stats.rx_bad_icrc += 1;
        return;
    }
    crate::capture::received(&from.flow, from.arrival.traffic_class, packet);
    engine.handle_arrival(now, from.arrival, packet, mem);
}

impl IoStats {
    fn count(&mut self, sent: Sent) {
        self.tx += sent.packets;
        self.tx_dropped += sent.dropped;
        self.tx_calls += sent.calls;
        self.tx_waits += sent.waits;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOTHING: Saw = Saw {
        work: false,
        took_in: false,
        took_write: false,
    };
    const A_WRITE: Saw = Saw {
        work: false,
        took_in: true,
        took_write: true,
    };
    const A_SEND: Saw = Saw {
        work: false,
        took_in: true,
        took_write: false,
    };

    fn thread(kept: Option<bool>, answering: bool) -> Sending {
        Sending::Thread { kept, answering }
    }

    #[test]
    fn the_thread_leaves_a_young_keeping_to_the_next_verb_unless_it_has_work() {
        assert!(!thread(Some(true), false).sends(NOTHING));
        assert!(thread(Some(false), false).sends(NOTHING), "old");
        assert!(thread(None, false).sends(NOTHING), "nothing kept");
        let work = Saw {
            work: true,
            ..NOTHING
        };
        assert!(thread(Some(true), true).sends(work));
        assert!(thread(Some(true), false).sends(A_WRITE), "took data in");
    }

    #[test]
    fn the_thread_keeps_a_writes_ack_only_for_an_application_that_answers() {
        assert!(!thread(None, true).sends(A_WRITE));
        assert!(!thread(Some(true), true).sends(A_WRITE));
        assert!(thread(Some(false), true).sends(A_WRITE), "kept too long");
        assert!(thread(None, false).sends(A_WRITE), "not answering");
        assert!(thread(None, true).sends(A_SEND), "not a WRITE");
    }
}
