//! One of the two engines of the `verbs` target, the objects it has
//! created (live or destroyed: stale handles are inputs too) and its
//! memory, with a record of every byte any MR with LOCAL_WRITE has ever
//! covered: no other byte may ever change.

use crate::memory::{first_forbidden_change, patterned};
use softverbs_engine::{
    AccessFlags, AhId, CqId, DeviceConfig, Engine, FlatMemory, Gid, MrId, PdId, QpId, SrqId,
};
use std::net::Ipv4Addr;
use std::sync::OnceLock;

/// Node `host`'s memory before any run (hosts 1 and 2).
fn pristine(host: u8) -> &'static FlatMemory {
    static PRISTINE: [OnceLock<FlatMemory>; 2] = [OnceLock::new(), OnceLock::new()];
    PRISTINE[usize::from(host) & 1].get_or_init(|| patterned(MEM_BASE, MEM_LEN, host))
}

/// First address of each node's memory.
pub const MEM_BASE: u64 = 0x2000_0000;
/// Bytes of memory per node.
pub const MEM_LEN: usize = 0x1_0000;

/// What the harness remembers of an MR.
#[derive(Debug, Clone, Copy, Default)]
pub struct MrRef {
    /// Handle.
    pub id: MrId,
    /// lkey and rkey.
    pub key: u32,
    /// Local address.
    pub addr: u64,
    /// Remote address of the first byte.
    pub iova: u64,
}

/// One engine and everything the harness knows about it.
#[derive(Debug)]
pub struct Node {
    /// The engine.
    pub e: Engine,
    /// Its memory.
    pub mem: FlatMemory,
    /// Its GID.
    pub gid: Gid,
    /// Every PD created.
    pub pds: Vec<PdId>,
    /// Every MR registered (inside `mem`).
    pub mrs: Vec<MrRef>,
    /// Every CQ created.
    pub cqs: Vec<CqId>,
    /// Every SRQ created.
    pub srqs: Vec<SrqId>,
    /// Every QP created.
    pub qps: Vec<QpId>,
    /// Every AH created.
    pub ahs: Vec<AhId>,
    writable: Vec<bool>,
}

/// Element `i` of `items`, where one index past the end (modulo) is the
/// null handle.
pub fn pick<T: Copy + Default>(items: &[T], i: u8) -> T {
    let at = usize::from(i) % (items.len() + 1);
    items.get(at).copied().unwrap_or_default()
}

impl Node {
    /// Node `host` (1 or 2) at 10.0.0.`host`.
    pub fn new(host: u8) -> Node {
        let gid = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, host));
        let mut cfg = DeviceConfig::loopback(u64::from(host));
        cfg.ports[0].gids = vec![gid];
        cfg.qpn_base = u32::from(host) << 8;
        let mem = pristine(host).clone();
        Node {
            e: Engine::new(cfg),
            mem,
            gid,
            pds: Vec::new(),
            mrs: Vec::new(),
            cqs: Vec::new(),
            srqs: Vec::new(),
            qps: Vec::new(),
            ahs: Vec::new(),
            writable: vec![false; MEM_LEN],
        }
    }

    /// Re-reads MR `key` after a registration succeeded: remembers where
    /// it is and, if it has LOCAL_WRITE, that the engine may write there.
    pub fn note_mr(&mut self, key: u32) -> Option<MrRef> {
        let (id, mr) = self.e.mr_by_key(key)?;
        let r = MrRef {
            id,
            key,
            addr: mr.addr,
            iova: mr.iova,
        };
        if mr.access.contains(AccessFlags::LOCAL_WRITE) {
            let start = (mr.addr - MEM_BASE) as usize;
            self.writable[start..start + mr.length as usize].fill(true);
        }
        Some(r)
    }

    /// Panics at the first byte that changed although no MR with
    /// LOCAL_WRITE ever covered it.
    pub fn check_memory(&self) {
        let host = self.gid.0[15];
        let allowed = |at: usize| self.writable[at];
        if let Some(at) = first_forbidden_change(&self.mem, pristine(host), MEM_LEN, allowed) {
            panic!(
                "node {host}: the engine wrote at {:#x}, which no writable MR ever covered",
                MEM_BASE + at as u64
            );
        }
    }

    /// Destroys every object, dependents first: each must go, and nothing
    /// may be left (a use count that never drops would show here).
    pub fn teardown(&mut self) {
        for qp in std::mem::take(&mut self.qps) {
            let _ = self.e.destroy_qp(qp);
        }
        for srq in std::mem::take(&mut self.srqs) {
            let _ = self.e.destroy_srq(srq);
        }
        for ah in std::mem::take(&mut self.ahs) {
            let _ = self.e.destroy_ah(ah);
        }
        for mr in std::mem::take(&mut self.mrs) {
            let _ = self.e.dereg_mr(mr.id);
        }
        for cq in std::mem::take(&mut self.cqs) {
            let _ = self.e.destroy_cq(cq);
        }
        for pd in std::mem::take(&mut self.pds) {
            let _ = self.e.dealloc_pd(pd);
        }
        assert_eq!(
            self.e.object_counts(),
            [0; 6],
            "objects left after destroying every one (pd, mr, ah, cq, srq, qp)"
        );
    }
}
