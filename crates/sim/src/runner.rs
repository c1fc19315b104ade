//! The virtual-clock event loop that runs one workload.
//!
//! Each step, at the current virtual time: expired engine timers fire,
//! due packets are delivered (ICRC-checked), the applications post what
//! their pacing allows, every node's outgoing packets are drained into the
//! network, and completions and events are collected. Then the clock jumps
//! to the earliest of the next delivery, engine deadline or application
//! wake-up. The run ends when every stream's last WR has completed and the
//! network is empty. A step budget and a virtual-time limit turn a stuck
//! engine into a "stalled" failure, never a hang.

use crate::agents::{split_wr_id, Receiver, Sender, RECV_TAG};
use crate::checker::{self, Observations, RecvSeen};
use crate::network::{Delivery, Fate, NetConfig, NetStats, Network};
use crate::notify::CqWatch;
use crate::setup::World;
use crate::trace::{self, Trace};
use crate::workload::Workload;
use softverbs_engine::direct::{self, DirectOp, DirectOutcome};
use softverbs_engine::{
    Arrival, AsyncEvent, CqId, EngineTarget, Nanos, WorkCompletion, MAX_PACKET_LEN,
};

/// Bounds that turn a stuck run into a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Loop iterations.
    pub max_steps: u64,
    /// Virtual time.
    pub max_time: Nanos,
}

impl Default for Limits {
    /// Far beyond what a healthy run needs (under a thousand steps and a
    /// virtual second at 10% loss), yet a stalled seed fails within about
    /// a second of wall time.
    fn default() -> Limits {
        Limits {
            max_steps: 200_000,
            max_time: 60_000_000_000,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Violated guarantees and anomalies; empty on success.
    pub failures: Vec<String>,
    /// What the network did.
    pub net: NetStats,
    /// Virtual time at the end.
    pub time: Nanos,
    /// Loop iterations.
    pub steps: u64,
}

/// Packets one node may emit in one step before it counts as a runaway.
const MAX_BURST: usize = 100_000;

/// A finished run, before the verdict: the nodes as they ended and what
/// was observed on the way.
#[derive(Debug)]
pub struct Execution {
    /// The nodes, their memory and the plan.
    pub world: World,
    /// Completions and anomalies seen.
    pub obs: Observations,
    /// How the loop ended: `Err` when it stalled or met a fatal anomaly.
    pub ended: Result<(), String>,
    /// What the network did.
    pub net: NetStats,
    /// Virtual time at the end.
    pub time: Nanos,
    /// Loop iterations.
    pub steps: u64,
}

/// Runs `w` over a network with `net` faults. The workload's seed also
/// drives the network and the applications' pacing, each from its own
/// generator. `Err` when the setup fails.
pub fn execute(
    w: &Workload,
    net: NetConfig,
    limits: Limits,
    trace: Trace,
) -> Result<Execution, String> {
    let mut world = World::build(w).map_err(|e| format!("setup: {e}"))?;
    if net.same_host {
        world
            .use_same_host_path()
            .map_err(|e| format!("setup: {e}"))?;
    }
    let network = Network::new(net, w.seed ^ 0x00E7_0C4A_11ED);
    let mut sim = Sim::new(w, world, network, trace);
    let ended = sim.run(limits);
    sim.trace
        .line(sim.now, || format!("end: {:?}", sim.net.stats()));
    Ok(Execution {
        net: sim.net.stats(),
        time: sim.now,
        steps: sim.steps,
        world: sim.world,
        obs: sim.obs,
        ended,
    })
}

/// Runs `w` (see [`execute`]) and checks everything it guarantees.
pub fn run(w: &Workload, net: NetConfig, limits: Limits, trace: Trace) -> Outcome {
    match execute(w, net, limits, trace) {
        Ok(x) => {
            let mut failures: Vec<String> = x.ended.err().into_iter().collect();
            failures.extend(checker::check(w, &x.world, &x.obs));
            Outcome {
                failures,
                net: x.net,
                time: x.time,
                steps: x.steps,
            }
        }
        Err(e) => Outcome {
            failures: vec![e],
            net: NetStats::default(),
            time: 0,
            steps: 0,
        },
    }
}

struct Sim<'a> {
    w: &'a Workload,
    world: World,
    net: Network,
    senders: Vec<Sender>,
    receivers: Vec<Receiver>,
    watches: Vec<CqWatch>,
    /// Paces the applications: a generator of its own, so the network's
    /// fault draws and the pacing draws never share a sequence.
    rng: fastrand::Rng,
    obs: Observations,
    /// Per stream, whether its last WR has completed.
    last_done: Vec<bool>,
    now: Nanos,
    steps: u64,
    trace: Trace,
    buf: Vec<u8>,
}

impl<'a> Sim<'a> {
    fn new(w: &'a Workload, world: World, net: Network, trace: Trace) -> Sim<'a> {
        let watches = world
            .nodes
            .iter()
            .map(|n| CqWatch::new(&[n.send_cq, n.recv_cq]))
            .collect();
        Sim {
            senders: (0..w.streams.len()).map(Sender::new).collect(),
            receivers: (0..world.plan.queues.len()).map(Receiver::new).collect(),
            watches,
            rng: fastrand::Rng::with_seed(w.seed ^ 0xA9E7_5000),
            obs: Observations::new(w.streams.len()),
            last_done: vec![false; w.streams.len()],
            now: 0,
            steps: 0,
            trace,
            buf: vec![0; MAX_PACKET_LEN],
            w,
            world,
            net,
        }
    }

    fn run(&mut self, limits: Limits) -> Result<(), String> {
        for n in 0..self.world.nodes.len() {
            self.watches[n].rearm(&mut self.world.nodes[n].engine)?;
        }
        loop {
            self.step()?;
            if self.done() {
                return Ok(());
            }
            self.steps += 1;
            if self.steps > limits.max_steps {
                return Err(self.stalled("step budget exhausted"));
            }
            let Some(next) = self.next_event() else {
                return Err(self.stalled("nothing in flight, no timer armed, nothing to post"));
            };
            if next > limits.max_time {
                return Err(self.stalled(&format!("next event at {next} ns, past the time limit")));
            }
            self.now = next.max(self.now);
        }
    }

    fn step(&mut self) -> Result<(), String> {
        self.fire_timers();
        self.deliver_due()?;
        self.run_agents()?;
        self.transmit_all()?;
        self.collect()
    }

    fn done(&self) -> bool {
        self.last_done.iter().all(|&d| d)
            && self.senders.iter().all(|s| s.finished(self.w))
            && self.net.in_flight() == 0
    }

    /// The earliest future event; `now` if something can act right away.
    fn next_event(&self) -> Option<Nanos> {
        let timers = self
            .world
            .nodes
            .iter()
            .filter_map(|n| n.engine.poll_timeout());
        let senders = self.senders.iter().filter_map(|s| s.wake(self.w));
        let receivers = self.receivers.iter().filter_map(|r| r.wake(&self.world));
        let next = timers
            .chain(senders)
            .chain(receivers)
            .chain(self.net.next_delivery())
            .min()?;
        Some(next.max(self.now))
    }

    fn fire_timers(&mut self) {
        for (n, node) in self.world.nodes.iter_mut().enumerate() {
            if node.engine.poll_timeout().is_some_and(|t| t <= self.now) {
                self.trace
                    .line(self.now, || format!("node {n}: timers fire"));
                node.engine.handle_timeout(self.now);
            }
        }
    }

    fn deliver_due(&mut self) -> Result<(), String> {
        while let Some(d) = self.net.pop_due(self.now) {
            let p = match d {
                Delivery::Intact(p) => p,
                Delivery::BadIcrc(p) => {
                    self.trace.line(self.now, || {
                        format!("drop (bad ICRC) {}", trace::packet(&p.bytes))
                    });
                    continue;
                }
            };
            let Some(n) = self.world.nodes.iter().position(|n| n.gid == p.dst) else {
                return Err(format!("a packet went to {:?}, which no node has", p.dst));
            };
            self.trace.line(self.now, || {
                let mark = if p.marked { " (marked)" } else { "" };
                format!("-> node {n}{mark}: {}", trace::packet(&p.bytes))
            });
            let node = &mut self.world.nodes[n];
            let arrival = Arrival {
                src_gid: p.src,
                dst_gid: p.dst,
                marked: p.marked,
                // The simulated network carries no IP header.
                traffic_class: 0,
            };
            node.engine
                .handle_arrival(self.now, arrival, &p.bytes, &mut node.mem);
        }
        Ok(())
    }

    fn run_agents(&mut self) -> Result<(), String> {
        for s in &mut self.senders {
            let first = s.next;
            let posted = s.act(self.now, self.w, &mut self.world, &mut self.rng)?;
            if posted.count > 0 {
                let (stream, last) = (s.stream, s.next);
                self.trace.line(self.now, || {
                    let full = if posted.full {
                        " (send queue now full)"
                    } else {
                        ""
                    };
                    format!("stream {stream}: posted ops {first}..{last}{full}")
                });
            }
        }
        for r in &mut self.receivers {
            let posted = r.act(self.now, self.w, &mut self.world, &mut self.rng)?;
            if posted.count > 0 {
                let (queue, total) = (r.queue, r.posted);
                self.trace.line(self.now, || {
                    format!(
                        "queue {queue}: posted {} receive WRs ({total} so far)",
                        posted.count
                    )
                });
            }
        }
        Ok(())
    }

    /// Hands out same-host operations and packets until neither comes:
    /// a same-host UD QP sends a datagram for the wire as a packet, and
    /// the operation after it is handed out only then (as the transport's
    /// step runs the same-host path again after sending).
    fn transmit_all(&mut self) -> Result<(), String> {
        for round in 0.. {
            if round > MAX_BURST {
                return Err(format!(
                    "over {MAX_BURST} rounds of operations and packets at one instant"
                ));
            }
            let executed = self.execute_direct()?;
            if executed + self.transmit_packets()? == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Sends every packet the nodes emit now; how many.
    fn transmit_packets(&mut self) -> Result<usize, String> {
        let mut total = 0;
        for n in 0..self.world.nodes.len() {
            let mut sent = 0;
            loop {
                let node = &mut self.world.nodes[n];
                let Some(t) = node
                    .engine
                    .poll_transmit(self.now, &node.mem, &mut self.buf)
                else {
                    break;
                };
                sent += 1;
                if sent > MAX_BURST {
                    return Err(format!(
                        "node {n} emitted over {MAX_BURST} packets at one instant"
                    ));
                }
                if t.src_gid != node.gid || t.len > self.buf.len() {
                    return Err(format!(
                        "node {n} emitted a packet from {:?} of {} bytes",
                        t.src_gid, t.len
                    ));
                }
                let bytes = self.buf[..t.len].to_vec();
                self.trace.line(self.now, || {
                    format!("<- node {n}: {}", trace::packet(&bytes))
                });
                let fate = self
                    .net
                    .send(self.now, t.src_gid, t.dst_gid, bytes)
                    .map_err(|e| format!("node {n} emitted a packet that cannot be sealed: {e}"))?;
                self.trace_fate(fate);
            }
            total += sent;
        }
        Ok(total)
    }

    /// Executes the same-host operations every node hands out, each
    /// against the node that owns its target QP; how many.
    fn execute_direct(&mut self) -> Result<usize, String> {
        let mut total = 0;
        for n in 0..self.world.nodes.len() {
            for done in 0.. {
                if done > MAX_BURST {
                    return Err(format!(
                        "node {n} handed out over {MAX_BURST} operations at one instant"
                    ));
                }
                let Some(op) = self.world.nodes[n].engine.poll_direct(self.now) else {
                    break;
                };
                self.trace.line(self.now, || {
                    format!(
                        "<- node {n}: {:?} psn {} to qp {:#x}",
                        op.kind, op.psn, op.dest_qpn
                    )
                });
                let outcome = self.execute_at_peer(n, &op)?;
                self.trace
                    .line(self.now, || format!("-> node {n}: {outcome:?}"));
                let node = &mut self.world.nodes[n];
                node.engine
                    .handle_direct(self.now, &op, outcome, &mut node.mem);
                total += 1;
            }
        }
        Ok(total)
    }

    /// Runs `op` of node `n` against the other node, which owns its target.
    fn execute_at_peer(&mut self, n: usize, op: &DirectOp) -> Result<DirectOutcome, String> {
        let (low, high) = self.world.nodes.split_at_mut(1);
        let (me, peer) = if n == 0 {
            (&mut low[0], &mut high[0])
        } else {
            (&mut high[0], &mut low[0])
        };
        if peer.engine.qp_by_num(op.dest_qpn).is_none() {
            return Err(format!(
                "node {n} sent an operation to unknown QP {:#x}",
                op.dest_qpn
            ));
        }
        if op.ud.is_some() && op.psn & 1 == 1 {
            // Every other datagram as to a destination the embedder cannot
            // reach directly: it must then go out as a packet.
            return Ok(DirectOutcome::Wire);
        }
        let mut target =
            EngineTarget::new(&mut peer.engine, &mut peer.mem, &mut me.mem, op.dest_qpn);
        Ok(direct::execute(op, &mut target))
    }

    fn trace_fate(&self, fate: Fate) {
        if fate.lost || fate.copies > 1 || fate.corrupted > 0 || fate.reordered > 0 {
            self.trace.line(self.now, || {
                format!(
                    "   network: {}{}{}{}",
                    if fate.lost { "LOST " } else { "" },
                    if fate.copies > 1 { "DUPLICATED " } else { "" },
                    if fate.corrupted > 0 { "CORRUPTED " } else { "" },
                    if fate.reordered > 0 { "DELAYED" } else { "" },
                )
            });
        }
    }

    /// Async events, completion events and completions of every node.
    fn collect(&mut self) -> Result<(), String> {
        for n in 0..self.world.nodes.len() {
            self.take_async_events(n);
            self.watches[n].take_events(&mut self.world.nodes[n].engine)?;
            let (send_cq, recv_cq) = (self.world.nodes[n].send_cq, self.world.nodes[n].recv_cq);
            for wc in self.poll_cq(n, send_cq)? {
                self.on_send_completion(n, wc);
            }
            for wc in self.poll_cq(n, recv_cq)? {
                self.on_recv_completion(n, wc);
            }
            self.watches[n].rearm(&mut self.world.nodes[n].engine)?;
        }
        Ok(())
    }

    /// Every async event is an error here: nothing is armed (SRQ limits)
    /// and no QP should fail; COMM_EST is informational.
    fn take_async_events(&mut self, n: usize) {
        while let Some(event) = self.world.nodes[n].engine.poll_event() {
            self.trace
                .line(self.now, || format!("node {n}: async event {event:?}"));
            if !matches!(event, AsyncEvent::CommEst(_)) {
                self.obs.anomalies.push(format!(
                    "node {n}: async event {event:?} at {} ns",
                    self.now
                ));
            }
        }
    }

    fn poll_cq(&mut self, n: usize, cq: CqId) -> Result<Vec<WorkCompletion>, String> {
        let mut out = Vec::new();
        while self.world.nodes[n]
            .engine
            .poll_cq(cq, 64, &mut out)
            .map_err(|e| format!("poll_cq: {e}"))?
            > 0
        {}
        self.watches[n].polled(cq, out.len())?;
        Ok(out)
    }

    fn on_send_completion(&mut self, n: usize, wc: WorkCompletion) {
        self.trace.line(self.now, || {
            format!("node {n} send CQ: {}", trace::completion(&wc))
        });
        let (stream, op) = split_wr_id(wc.wr_id);
        let known = wc.wr_id & RECV_TAG == 0
            && self
                .w
                .streams
                .get(stream)
                .is_some_and(|s| s.from == n && op < s.ops.len());
        if !known {
            return self.obs.anomalies.push(format!(
                "node {n}: send completion with unknown wr_id {:#x}",
                wc.wr_id
            ));
        }
        if op + 1 == self.w.streams[stream].ops.len() {
            self.last_done[stream] = true;
        }
        // Completions free send queue room; on the same-host path no
        // later packet may come to wake a sender that found it full.
        self.senders[stream].unblock();
        self.obs.sends[stream].push(wc);
    }

    fn on_recv_completion(&mut self, n: usize, wc: WorkCompletion) {
        self.trace.line(self.now, || {
            format!("node {n} recv CQ: {}", trace::completion(&wc))
        });
        let (queue, buffer) = split_wr_id(wc.wr_id);
        let stream = self.world.stream_into(self.w, n, wc.qp_num);
        let valid = wc.wr_id & RECV_TAG != 0
            && self
                .world
                .plan
                .queues
                .get(queue)
                .is_some_and(|q| q.node == n && buffer < q.buffers.len());
        match stream {
            Some(s) if valid && self.world.plan.streams[s].queue == queue => {
                self.obs.recvs[s].push(RecvSeen { wc, queue, buffer });
            }
            _ => self.obs.anomalies.push(format!(
                "node {n}: receive completion {} matches no stream and queue",
                trace::completion(&wc)
            )),
        }
    }

    /// A failure message describing where every stream stands.
    fn stalled(&self, why: &str) -> String {
        let mut s = format!("stalled at {:.3} ms ({why}):", self.now as f64 / 1e6);
        for (i, spec) in self.w.streams.iter().enumerate() {
            let signaled = spec.ops.iter().filter(|o| o.signaled).count();
            s += &format!(
                " stream {i} {} posted {}/{} completed {}/{} signaled, received {};",
                self.w.pairs[spec.pair].qp_type.name(),
                self.senders[i].next,
                spec.ops.len(),
                self.obs.sends[i].len(),
                signaled,
                self.obs.recvs[i].len(),
            );
        }
        let timers: Vec<_> = self
            .world
            .nodes
            .iter()
            .map(|n| n.engine.poll_timeout())
            .collect();
        s + &format!(
            " {} packets in flight, timers {timers:?}",
            self.net.in_flight()
        )
    }
}
