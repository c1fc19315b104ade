//! The memory plan of a workload: where every buffer of every WR lives on
//! which node, and which receive queue (a QP's own or an SRQ) each stream
//! lands in. Pure data computed before any engine exists; the setup then
//! sizes each node's memory from its arena.
//!
//! Every buffer is used once: each message has its own source, each WRITE
//! its own target, each READ its own source and destination, each receive
//! WR its own buffer. Nothing is overwritten later, so the checker can read
//! every result from the final memory.

use crate::arena::Arena;
use crate::workload::{cut, OpSpec, StreamSpec, Workload, MAX_RECV_SGE, NODES};
use softverbs_engine::QpType;

/// Bytes of GRH at the start of every UD receive buffer.
pub const GRH_LEN: u32 = 40;

/// A contiguous piece of a buffer: one SGE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Local address.
    pub addr: u64,
    /// Length.
    pub len: u32,
}

/// Where one WR's buffers are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpPlace {
    /// The local SGEs on the sender: the data sent, or where READ data
    /// and atomic original values land.
    pub local: Vec<Piece>,
    /// On the receiver: the WRITE target or READ source (a local address
    /// of the receiver's memory); 0 when the op has none.
    pub remote: u64,
}

/// Where a stream's buffers are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPlace {
    /// Per op.
    pub ops: Vec<OpPlace>,
    /// The receiver's word every atomic of the stream targets.
    pub atomic_word: u64,
    /// Index of the receive queue the stream lands in.
    pub queue: usize,
}

/// A receive queue: the QP's own, or an SRQ shared by QPs of one type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePlan {
    /// Node it lives on.
    pub node: usize,
    /// An SRQ (else the RQ of the pair's end on `node`).
    pub srq: bool,
    /// Type of the QPs it feeds.
    pub qp_type: QpType,
    /// For a QP's own RQ, the pair.
    pub pair: Option<usize>,
    /// Streams landing in it.
    pub streams: Vec<usize>,
    /// Every receive WR it will be given, in posting order.
    pub buffers: Vec<Vec<Piece>>,
}

/// The whole plan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Per node.
    pub arenas: Vec<Arena>,
    /// Per stream.
    pub streams: Vec<StreamPlace>,
    /// Receive queues.
    pub queues: Vec<QueuePlan>,
}

/// Where node `index`'s memory starts: distinct per node so that an
/// address used on the wrong node is out of range.
pub fn node_base(index: usize) -> u64 {
    0x1000_0000 * (index as u64 + 1)
}

impl Plan {
    /// Places every buffer of `w`. Receive buffers are split into SGEs
    /// with randomness drawn from the workload seed.
    pub fn new(w: &Workload) -> Plan {
        let mut rng = fastrand::Rng::with_seed(w.seed ^ 0x5EED_1A70);
        let mut arenas: Vec<Arena> = (0..NODES).map(|n| Arena::new(node_base(n))).collect();
        let queues = assign_queues(w);
        let streams = w
            .streams
            .iter()
            .enumerate()
            .map(|(i, s)| place_stream(&mut arenas, s, queue_of(&queues, w, i)))
            .collect();
        let mut plan = Plan {
            arenas,
            streams,
            queues,
        };
        plan.place_receive_buffers(w, &mut rng);
        plan
    }

    fn place_receive_buffers(&mut self, w: &Workload, rng: &mut fastrand::Rng) {
        for q in &mut self.queues {
            let ud = q.qp_type == QpType::Ud;
            let size = q
                .streams
                .iter()
                .map(|&s| w.streams[s].max_recv_len())
                .max()
                .unwrap_or(0)
                + if ud { GRH_LEN } else { 0 };
            let count: usize = q.streams.iter().map(|&s| recv_wrs(&w.streams[s], ud)).sum();
            let arena = &mut self.arenas[q.node];
            q.buffers = (0..count)
                .map(|_| place_pieces(arena, size, rng, true))
                .collect();
        }
    }
}

/// Receive WRs a stream needs: one per message, plus spares on UD, where
/// duplicated datagrams consume receive WRs too.
fn recv_wrs(s: &StreamSpec, ud: bool) -> usize {
    let n = s.recv_count();
    if ud && n > 0 {
        n + n / 2 + 1
    } else {
        n
    }
}

/// One queue per SRQ (node, type) and per pair end without an SRQ, each
/// listing the streams it receives.
fn assign_queues(w: &Workload) -> Vec<QueuePlan> {
    let mut queues: Vec<QueuePlan> = Vec::new();
    for (p, pair) in w.pairs.iter().enumerate() {
        for (node, end) in pair.ends.iter().enumerate() {
            let found = queues
                .iter()
                .position(|q| end.srq && q.srq && q.node == node && q.qp_type == pair.qp_type);
            if found.is_none() {
                queues.push(QueuePlan {
                    node,
                    srq: end.srq,
                    qp_type: pair.qp_type,
                    pair: (!end.srq).then_some(p),
                    streams: Vec::new(),
                    buffers: Vec::new(),
                });
            }
        }
    }
    for i in 0..w.streams.len() {
        let q = queue_of(&queues, w, i);
        queues[q].streams.push(i);
    }
    queues
}

/// The queue stream `stream` lands in.
fn queue_of(queues: &[QueuePlan], w: &Workload, stream: usize) -> usize {
    let s = &w.streams[stream];
    let pair = &w.pairs[s.pair];
    let node = s.to();
    let srq = pair.ends[node].srq;
    queues
        .iter()
        .position(|q| {
            q.node == node
                && q.srq == srq
                && q.qp_type == pair.qp_type
                && (srq || q.pair == Some(s.pair))
        })
        .expect("every pair end has a queue")
}

fn place_stream(arenas: &mut [Arena], s: &StreamSpec, queue: usize) -> StreamPlace {
    let (local, remote) = two(arenas, s.from);
    let ops = s.ops.iter().map(|o| place_op(local, remote, o)).collect();
    StreamPlace {
        ops,
        atomic_word: remote.alloc(8, 8, true),
        queue,
    }
}

/// The sender's and the receiver's arenas.
fn two(arenas: &mut [Arena], from: usize) -> (&mut Arena, &mut Arena) {
    let (a, b) = arenas.split_at_mut(1);
    if from == 0 {
        (&mut a[0], &mut b[0])
    } else {
        (&mut b[0], &mut a[0])
    }
}

fn place_op(local: &mut Arena, remote: &mut Arena, o: &OpSpec) -> OpPlace {
    // READ and atomics write their local SGEs; SEND and WRITE only read them.
    let results = o.is_read() || o.is_atomic();
    let align = if o.is_atomic() { 8 } else { 1 };
    let pieces = o
        .sges
        .iter()
        .map(|&len| Piece {
            addr: local.alloc(len.into(), align, results),
            len,
        })
        .collect();
    let remote = if o.is_write() || o.is_read() {
        remote.alloc(o.len.into(), 1, o.is_write())
    } else {
        0
    };
    OpPlace {
        local: pieces,
        remote,
    }
}

/// A receive buffer of `size` bytes in 1 to 3 separate pieces (none when
/// empty).
fn place_pieces(
    arena: &mut Arena,
    size: u32,
    rng: &mut fastrand::Rng,
    writable: bool,
) -> Vec<Piece> {
    if size == 0 {
        return Vec::new();
    }
    let pieces = rng.u32(1..=MAX_RECV_SGE);
    cut(rng, size, pieces)
        .into_iter()
        .map(|len| Piece {
            addr: arena.alloc(len.into(), 1, writable),
            len,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stream_has_a_queue_on_its_receiver_of_its_type() {
        for seed in 0..200 {
            let w = Workload::generate(seed);
            let plan = Plan::new(&w);
            for (i, s) in w.streams.iter().enumerate() {
                let q = &plan.queues[plan.streams[i].queue];
                assert_eq!(q.node, s.to());
                assert_eq!(q.qp_type, w.pairs[s.pair].qp_type);
                assert_eq!(q.srq, w.pairs[s.pair].ends[s.to()].srq);
                assert!(q.streams.contains(&i));
            }
        }
    }

    #[test]
    fn receive_buffers_fit_every_message_and_are_counted() {
        for seed in 0..200 {
            let w = Workload::generate(seed);
            let plan = Plan::new(&w);
            for q in &plan.queues {
                let ud = q.qp_type == QpType::Ud;
                let need: usize = q.streams.iter().map(|&s| recv_wrs(&w.streams[s], ud)).sum();
                assert_eq!(q.buffers.len(), need);
                for s in &q.streams {
                    let extra = if ud { GRH_LEN } else { 0 };
                    let want = w.streams[*s].max_recv_len() + extra;
                    for b in &q.buffers {
                        assert!(b.iter().map(|p| p.len).sum::<u32>() >= want);
                        assert!(b.len() <= MAX_RECV_SGE as usize);
                    }
                }
            }
        }
    }

    #[test]
    fn buffers_do_not_overlap_and_fit_the_arena() {
        for seed in 0..100 {
            let plan = Plan::new(&Workload::generate(seed));
            for a in &plan.arenas {
                let end = a.base() + a.size() as u64;
                for w in a.regions().windows(2) {
                    assert!(w[0].addr + w[0].len < w[1].addr);
                }
                assert!(a.regions().iter().all(|r| r.addr + r.len < end));
                assert!(a.size() < 16 << 20, "{} bytes", a.size());
            }
        }
    }
}
