//! The applications on the nodes: a sender per stream posting its WRs in
//! bursts, and a receiver per receive queue posting receive WRs lazily in
//! bursts, so RC senders meet receiver-not-ready and UC/UD messages meet
//! empty queues. Each is a small state machine the runner wakes up.

use crate::node::iova;
use crate::payload::{self, Kind};
use crate::plan::{OpPlace, Piece};
use crate::setup::{RecvTarget, World};
use crate::workload::{OpSpec, Workload};
use softverbs_engine::{
    send_flags, AtomicTarget, ErrorKind, Nanos, RdmaTarget, RecvWr, SendWr, Sge, UdTarget,
    VerbsResult,
};

/// Tags receive wr_ids, so a receive completion can never pass for a send.
pub const RECV_TAG: u64 = 1 << 63;

/// The wr_id of op `op` of stream `stream`.
pub fn send_wr_id(stream: usize, op: usize) -> u64 {
    ((stream as u64) << 32) | op as u64
}

/// The wr_id of receive buffer `buffer` of queue `queue`.
pub fn recv_wr_id(queue: usize, buffer: usize) -> u64 {
    RECV_TAG | ((queue as u64) << 32) | buffer as u64
}

/// Splits a wr_id into its (stream or queue, op or buffer) halves.
pub fn split_wr_id(wr_id: u64) -> (usize, usize) {
    (
        ((wr_id & !RECV_TAG) >> 32) as usize,
        (wr_id & 0xFFFF_FFFF) as usize,
    )
}

/// What an agent did, for the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Posted {
    /// WRs posted.
    pub count: usize,
    /// Stopped by a full queue (ENOMEM).
    pub full: bool,
}

/// Posts one stream's WRs.
#[derive(Debug, Clone)]
pub struct Sender {
    /// Stream index.
    pub stream: usize,
    /// Next op to post.
    pub next: usize,
    wake: Nanos,
    blocked: bool,
}

impl Sender {
    /// A sender that starts at time 0.
    pub fn new(stream: usize) -> Sender {
        Sender {
            stream,
            next: 0,
            wake: 0,
            blocked: false,
        }
    }

    /// Whether every WR is posted.
    pub fn finished(&self, w: &Workload) -> bool {
        self.next == w.streams[self.stream].ops.len()
    }

    /// When it wants to act again: `None` when finished or waiting for
    /// queue room, which only another event can make.
    pub fn wake(&self, w: &Workload) -> Option<Nanos> {
        (!self.finished(w) && !self.blocked).then_some(self.wake)
    }

    /// A WR of the stream completed, so a full send queue has room again.
    pub fn unblock(&mut self) {
        self.blocked = false;
    }

    /// Posts a burst if it is time. Any refusal other than a full send
    /// queue is an engine failure.
    pub fn act(
        &mut self,
        now: Nanos,
        w: &Workload,
        world: &mut World,
        rng: &mut fastrand::Rng,
    ) -> Result<Posted, String> {
        let mut done = Posted {
            count: 0,
            full: false,
        };
        if self.finished(w) || now < self.wake {
            return Ok(done);
        }
        let burst = rng.usize(1..=w.pacing.send_burst as usize);
        while done.count < burst && !self.finished(w) {
            match post_op(w, world, self.stream, self.next) {
                Ok(()) => {
                    self.next += 1;
                    done.count += 1;
                }
                Err(e) if e.kind == ErrorKind::NoMemory => {
                    done.full = true;
                    break;
                }
                Err(e) => {
                    return Err(format!(
                        "post_send stream {} op {}: {e}",
                        self.stream, self.next
                    ))
                }
            }
        }
        self.blocked = done.full;
        if !done.full {
            self.wake = now + rng.u64(0..=w.pacing.send_gap);
        }
        Ok(done)
    }
}

/// Builds and posts op `op` of stream `stream`.
fn post_op(w: &Workload, world: &mut World, stream: usize, op: usize) -> VerbsResult<()> {
    let spec = &w.streams[stream];
    let o = &spec.ops[op];
    let place = &world.plan.streams[stream].ops[op];
    let (from_qp, to) = world.stream_ends(w, stream);
    let rkey = world.nodes[spec.to()].key;
    let sender = &mut world.nodes[spec.from];
    let sges = sges(&place.local, sender.key);
    let inline = inline_data(w, stream, op, o);
    let atomic_word = world.plan.streams[stream].atomic_word;
    let wr = SendWr {
        wr_id: send_wr_id(stream, op),
        opcode: o.opcode,
        send_flags: flags(o),
        sg_list: &sges,
        inline_data: &inline,
        imm_data_or_inv_rkey: o.imm,
        rdma: rdma_target(o, place, rkey),
        atomic: atomic_target(o, atomic_word, rkey),
        ud: world.ahs[stream].map(|ah| UdTarget {
            ah,
            remote_qpn: to.qpn,
            remote_qkey: w.pair_of(stream).ends[spec.to()].qkey,
        }),
    };
    sender.engine.post_send(from_qp.id, &wr)
}

fn flags(o: &OpSpec) -> u32 {
    let mut f = 0;
    for (on, bit) in [
        (o.signaled, send_flags::SIGNALED),
        (o.inline, send_flags::INLINE),
        (o.fence, send_flags::FENCE),
        (o.solicited, send_flags::SOLICITED),
    ] {
        if on {
            f |= bit;
        }
    }
    f
}

/// The SGEs over `pieces`.
pub fn sges(pieces: &[Piece], lkey: u32) -> Vec<Sge> {
    pieces
        .iter()
        .map(|p| Sge {
            addr: iova(p.addr),
            length: p.len,
            lkey,
        })
        .collect()
}

/// The message itself when it goes inline (the provider copies it at
/// post time, so it needs no buffer).
fn inline_data(w: &Workload, stream: usize, op: usize, o: &OpSpec) -> Vec<u8> {
    if !o.inline {
        return Vec::new();
    }
    payload::bytes(w.seed, stream, op, Kind::Message, o.len as usize)
}

fn rdma_target(o: &OpSpec, place: &OpPlace, rkey: u32) -> RdmaTarget {
    if o.is_write() || o.is_read() {
        RdmaTarget {
            remote_addr: iova(place.remote),
            rkey,
        }
    } else {
        RdmaTarget::default()
    }
}

fn atomic_target(o: &OpSpec, word: u64, rkey: u32) -> AtomicTarget {
    if o.is_atomic() {
        AtomicTarget {
            remote_addr: iova(word),
            compare_add: o.compare_add,
            swap: o.swap,
            rkey,
        }
    } else {
        AtomicTarget::default()
    }
}

/// Posts one receive queue's WRs, lazily.
#[derive(Debug, Clone)]
pub struct Receiver {
    /// Queue index.
    pub queue: usize,
    /// Buffers posted so far.
    pub posted: usize,
    wake: Nanos,
    first: bool,
}

impl Receiver {
    /// A receiver whose first burst (of random size, maybe empty or
    /// everything) is at time 0.
    pub fn new(queue: usize) -> Receiver {
        Receiver {
            queue,
            posted: 0,
            wake: 0,
            first: true,
        }
    }

    fn total(&self, world: &World) -> usize {
        world.plan.queues[self.queue].buffers.len()
    }

    /// When it wants to act again; `None` once everything is posted.
    pub fn wake(&self, world: &World) -> Option<Nanos> {
        (self.posted < self.total(world)).then_some(self.wake)
    }

    /// Posts a burst if it is time.
    pub fn act(
        &mut self,
        now: Nanos,
        w: &Workload,
        world: &mut World,
        rng: &mut fastrand::Rng,
    ) -> Result<Posted, String> {
        let total = self.total(world);
        let mut done = Posted {
            count: 0,
            full: false,
        };
        if self.posted >= total || now < self.wake {
            return Ok(done);
        }
        // Half the queues start empty, so the first messages find no
        // receive WR (RNR on RC, drops on UC and UD).
        let burst = if self.first {
            rng.usize(0..=total) * usize::from(rng.bool())
        } else {
            rng.usize(1..=w.pacing.recv_burst as usize)
        };
        self.first = false;
        while done.count < burst && self.posted < total {
            match post_recv(world, self.queue, self.posted) {
                Ok(()) => {
                    self.posted += 1;
                    done.count += 1;
                }
                Err(e) if e.kind == ErrorKind::NoMemory => {
                    done.full = true;
                    break;
                }
                Err(e) => return Err(format!("post_recv queue {}: {e}", self.queue)),
            }
        }
        self.wake = now + rng.u64(1..=w.pacing.recv_gap);
        Ok(done)
    }
}

fn post_recv(world: &mut World, queue: usize, buffer: usize) -> VerbsResult<()> {
    let q = &world.plan.queues[queue];
    let node = &mut world.nodes[q.node];
    let sg_list = sges(&q.buffers[buffer], node.key);
    let wr = RecvWr {
        wr_id: recv_wr_id(queue, buffer),
        sg_list: &sg_list,
    };
    match world.targets[queue] {
        RecvTarget::Qp(qp) => node.engine.post_recv(qp, &wr),
        RecvTarget::Srq(srq) => node.engine.post_srq_recv(srq, &wr),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wr_ids_round_trip_and_receives_are_tagged() {
        assert_eq!(split_wr_id(send_wr_id(3, 17)), (3, 17));
        let r = recv_wr_id(5, 9);
        assert_ne!(r & RECV_TAG, 0);
        assert_eq!(send_wr_id(5, 9) & RECV_TAG, 0);
        assert_eq!(split_wr_id(r), (5, 9));
    }
}
