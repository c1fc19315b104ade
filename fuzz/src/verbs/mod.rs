//! Target `verbs`: random sequences of verbs on two engines joined by a
//! network the input drives (which packets move, which are lost, when the
//! clock jumps) and memory the application may unmap under its MRs. Nothing may panic; the engines may touch no memory outside
//! their `FlatMemory` (which panics) and change no byte that no MR with
//! LOCAL_WRITE ever covered; after the run the network settles and every
//! object can be destroyed, leaving none.

mod attrs;
mod exec;
mod node;
pub mod ops;

pub use attrs::{AH_FIELDS, QP_FIELDS};
pub use node::{Node, MEM_BASE, MEM_LEN};
pub use ops::{Caps, Op, Remote, SgeSpec, Step};

use softverbs_engine::{Nanos, MAX_PACKET_LEN};

/// The two engines and the clock.
#[derive(Debug)]
pub struct World {
    /// Node 0 (10.0.0.1) and node 1 (10.0.0.2).
    pub nodes: [Node; 2],
    /// The clock, shared.
    pub now: Nanos,
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut w = World::new();
    for step in Step::decode_all(data) {
        w.step(step);
    }
    w.settle();
    for n in &mut w.nodes {
        n.check_memory();
        n.teardown();
    }
}

impl World {
    /// Two fresh engines.
    pub fn new() -> World {
        World {
            nodes: [Node::new(1), Node::new(2)],
            now: 0,
        }
    }

    /// The node a step acts on and the other one.
    pub fn pair(&mut self, node: u8) -> (&mut Node, &mut Node) {
        let [a, b] = &mut self.nodes;
        if node & 1 == 0 {
            (a, b)
        } else {
            (b, a)
        }
    }

    /// Moves up to `budget` packets from node `from` to the other, losing
    /// packet `i` when bit `i % 8` of `drop` is set. Returns how many moved.
    pub fn deliver(&mut self, from: u8, budget: usize, drop: u8) -> usize {
        let mut buf = vec![0u8; MAX_PACKET_LEN];
        let now = &mut self.now;
        let [a, b] = &mut self.nodes;
        let (src, dst) = if from & 1 == 0 { (a, b) } else { (b, a) };
        for i in 0..budget {
            let Some(t) = src.e.poll_transmit(*now, &src.mem, &mut buf) else {
                return i;
            };
            *now += 1_000;
            if drop >> (i % 8) & 1 == 0 {
                let packet = &buf[..t.len];
                dst.e
                    .handle_packet(*now, t.src_gid, t.dst_gid, packet, &mut dst.mem);
            }
        }
        budget
    }

    /// Moves the clock by `by` and runs both nodes' due timers.
    pub fn tick(&mut self, by: Nanos) {
        self.now = self.now.saturating_add(by);
        for n in &mut self.nodes {
            n.e.handle_timeout(self.now);
        }
    }

    /// Lets the network run without loss, jumping to each next timer,
    /// within a bound (RNR and retry loops end, but may take a while).
    fn settle(&mut self) {
        for _ in 0..64 {
            let moved = self.deliver(0, 512, 0) + self.deliver(1, 512, 0);
            if moved > 0 {
                continue;
            }
            let next = self.nodes.iter().filter_map(|n| n.e.poll_timeout()).min();
            let Some(at) = next else { return };
            self.tick(at.saturating_sub(self.now));
        }
    }
}

impl Default for World {
    fn default() -> Self {
        World::new()
    }
}
