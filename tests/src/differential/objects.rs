//! What the first backend holds, learnt from its answers: which objects
//! live, what each was made with, and each QP's state. Operations pick
//! their targets from here. Unlike the in-process harness, a pick never
//! names a destroyed object: libibverbs dereferences the handle, so a
//! stale one is undefined behaviour on every provider, not a verbs rule.

use crate::ops::Pick;
use softverbs_engine::{QpAttrMask, QpCap, QpState, QpType};

/// A memory region: its PD and access flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrEntry {
    /// Index of its PD.
    pub pd: usize,
    /// `ibv_access_flags` it was registered with.
    pub access: u32,
    /// Not deregistered.
    pub live: bool,
}

/// A shared receive queue: its PD and the sizes asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqEntry {
    /// Index of its PD.
    pub pd: usize,
    /// Requested max_wr (the last one a modify asked for).
    pub max_wr: u32,
    /// Requested max_sge.
    pub max_sge: u32,
    /// A modify set srq_limit (the value given at creation is ignored,
    /// ibv_create_srq(3), so until then it may read as anything).
    pub limit_set: bool,
    /// Not destroyed.
    pub live: bool,
}

/// A queue pair: how it was made, its state and which attributes were set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpEntry {
    /// Index of its PD.
    pub pd: usize,
    /// Its type (RC stands in for a type the table does not know).
    pub ty: QpType,
    /// The state the first backend's last query reported.
    pub state: QpState,
    /// Every mask bit a successful modify named: the attributes whose
    /// queried values both backends must agree on.
    pub set: QpAttrMask,
    /// Requested capacities.
    pub cap: QpCap,
    /// The last max_rd_atomic and max_dest_rd_atomic set.
    pub rd_atomic: (u8, u8),
    /// Not destroyed.
    pub live: bool,
}

/// Every object made so far, by kind, in creation order.
#[derive(Debug, Clone, Default)]
pub struct Objects {
    /// PDs (live or not).
    pub pds: Vec<bool>,
    /// CQs (live or not).
    pub cqs: Vec<bool>,
    /// Address handles (live or not).
    pub ahs: Vec<bool>,
    /// MRs.
    pub mrs: Vec<MrEntry>,
    /// SRQs.
    pub srqs: Vec<SrqEntry>,
    /// QPs.
    pub qps: Vec<QpEntry>,
}

/// The index `pick` chooses among the live entries, if there is one.
fn choose(live: impl Iterator<Item = bool>, pick: Pick) -> Option<usize> {
    let live: Vec<usize> = live
        .enumerate()
        .filter_map(|(i, l)| l.then_some(i))
        .collect();
    live.get(usize::from(pick.0) % live.len().max(1)).copied()
}

impl Objects {
    /// A live PD.
    pub fn pd(&self, pick: Pick) -> Option<usize> {
        choose(self.pds.iter().copied(), pick)
    }

    /// A live CQ.
    pub fn cq(&self, pick: Pick) -> Option<usize> {
        choose(self.cqs.iter().copied(), pick)
    }

    /// A live address handle.
    pub fn ah(&self, pick: Pick) -> Option<usize> {
        choose(self.ahs.iter().copied(), pick)
    }

    /// A live MR.
    pub fn mr(&self, pick: Pick) -> Option<usize> {
        choose(self.mrs.iter().map(|m| m.live), pick)
    }

    /// A live SRQ.
    pub fn srq(&self, pick: Pick) -> Option<usize> {
        choose(self.srqs.iter().map(|s| s.live), pick)
    }

    /// A live QP.
    pub fn qp(&self, pick: Pick) -> Option<usize> {
        choose(self.qps.iter().map(|q| q.live), pick)
    }

    /// The n-th (modulo) live MR of `pd` with `access`, if any.
    pub fn mr_with(&self, pd: usize, access: u32, n: usize) -> Option<usize> {
        let fits = |m: &MrEntry| m.live && m.pd == pd && m.access & access == access;
        choose(self.mrs.iter().map(fits), Pick((n % 0x1_0000) as u16))
    }

    /// Indices of the live QPs.
    pub fn live_qps(&self) -> Vec<usize> {
        (0..self.qps.len()).filter(|&i| self.qps[i].live).collect()
    }

    /// Indices of the live SRQs.
    pub fn live_srqs(&self) -> Vec<usize> {
        (0..self.srqs.len())
            .filter(|&i| self.srqs[i].live)
            .collect()
    }

    /// Indices of the live CQs.
    pub fn live_cqs(&self) -> Vec<usize> {
        (0..self.cqs.len()).filter(|&i| self.cqs[i]).collect()
    }
}
