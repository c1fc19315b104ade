//! A simulated host: one engine (device context), the memory its MRs
//! describe, and its address. Each node has one PD, one MR over all its
//! memory, and one send CQ and one receive CQ shared by all its QPs, so
//! the completions of different QPs interleave as they do in real programs.

use crate::arena::Arena;
use softverbs_engine::{AccessFlags, CqId, DeviceConfig, Engine, FlatMemory, Gid, PdId};
use std::net::Ipv4Addr;

/// Work requests address a node's memory (its own SGEs, as its peers'
/// remote addresses) at its local address plus this: the MR's iova
/// differs from its address, so an engine that confuses the two reaches
/// the wrong place and the checker sees it.
pub const IOVA_OFFSET: u64 = 0x7700_0000_0000;

/// One host.
#[derive(Debug)]
pub struct Node {
    /// The device context.
    pub engine: Engine,
    /// Its memory.
    pub mem: FlatMemory,
    /// Its address (GID index 0).
    pub gid: Gid,
    /// Its PD.
    pub pd: PdId,
    /// lkey and rkey of the MR over all of `mem`.
    pub key: u32,
    /// CQ of every send queue.
    pub send_cq: CqId,
    /// CQ of every receive queue.
    pub recv_cq: CqId,
}

/// The GID of node `index`: 10.0.0.(index+1), a simulated address only.
pub fn gid_of(index: usize) -> Gid {
    let last = u8::try_from(index + 1).expect("few nodes");
    Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, last))
}

/// The send window of a workload's nodes: mostly the default, but often
/// a few packets, so that RC QPs wait for ACKs with packets still to send
/// and READs longer than the window are asked for in parts.
fn send_window(seed: u64) -> u32 {
    match seed % 3 {
        0 => DeviceConfig::DEFAULT_SEND_WINDOW,
        1 => 512,  // the smallest window at every MTU: 2 packets
        _ => 5000, // 4 packets of 1024 bytes, 19 of 256
    }
}

/// The iova address (of SGEs and remote addresses) of local address
/// `addr`.
pub fn iova(addr: u64) -> u64 {
    addr + IOVA_OFFSET
}

impl Node {
    /// Node `index` of workload `seed`, with memory sized to `arena` and
    /// filled with seeded junk (so that a stray write of zeros shows too),
    /// its PD, MR and CQs of `cq_depth` entries.
    pub fn new(index: usize, seed: u64, arena: &Arena, cq_depth: u32) -> Node {
        let mut config = DeviceConfig::loopback(seed.wrapping_mul(2).wrapping_add(index as u64));
        config.ports[0].gids = vec![gid_of(index)];
        config.qpn_base = 0x100 * (index as u32 + 1);
        config.send_window_bytes = send_window(seed);
        let mut engine = Engine::new(config);
        let mut mem = FlatMemory::new(arena.base(), arena.size());
        fastrand::Rng::with_seed(seed ^ index as u64)
            .fill(mem.slice_mut(arena.base(), arena.size()));
        let pd = engine.alloc_pd().expect("a PD");
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let len = arena.size() as u64;
        let key = engine
            .reg_mr(pd, arena.base(), len, iova(arena.base()), access.bits())
            .expect("an MR over the node's memory")
            .key;
        let (send_cq, _) = engine.create_cq(cq_depth, 0).expect("send CQ");
        let (recv_cq, _) = engine.create_cq(cq_depth, 0).expect("receive CQ");
        Node {
            engine,
            mem,
            gid: gid_of(index),
            pd,
            key,
            send_cq,
            recv_cq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softverbs_engine::HostMemory;

    #[test]
    fn memory_covers_the_arena_and_the_mr_maps_it_at_the_iova() {
        let mut arena = Arena::new(0x1000_0000);
        let buf = arena.alloc(100, 8, true);
        let mut node = Node::new(0, 1, &arena, 16);
        node.mem.write(buf, &[7; 100]).unwrap();
        assert_eq!(node.mem.slice(buf, 100), &[7; 100]);
        let (_, mr) = node.engine.mr_by_key(node.key).expect("registered");
        assert_eq!(mr.addr, arena.base());
        assert_eq!(mr.iova, iova(arena.base()));
        assert_eq!(mr.length, arena.size() as u64);
        assert_eq!(node.gid, gid_of(0));
        assert_ne!(gid_of(0), gid_of(1));
    }

    #[test]
    fn junk_fill_is_seeded() {
        let mut arena = Arena::new(0x1000);
        arena.alloc(64, 1, false);
        let a = Node::new(0, 5, &arena, 4);
        let b = Node::new(0, 5, &arena, 4);
        let c = Node::new(0, 6, &arena, 4);
        assert_eq!(a.mem, b.mem);
        assert_ne!(a.mem, c.mem);
    }
}
