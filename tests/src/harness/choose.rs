//! Turning an operation's raw choices into arguments: which handle a
//! [`Pick`] means now, and which SGEs an [`SgeSeed`] describes.

use super::World;
use crate::device::ACCESS_LOCAL_WRITE;
use crate::model::ModelMr;
use crate::ops::{Pick, SgeKind, SgeSeed};
use softverbs_engine::{AhId, CqId, MrId, PdId, QpId, Sge, SrqId};

/// One pick in 16 takes any handle ever created (maybe destroyed); the
/// rest take a live one when there is any. The null handle (`default`)
/// stands in when nothing was ever created: it never names an object.
fn choose<K: Copy + Default>(ever: &[K], live: impl Fn(K) -> bool, pick: Pick) -> K {
    let n = usize::from(pick.0);
    let live: Vec<K> = ever.iter().copied().filter(|k| live(*k)).collect();
    if n % 16 != 0 && !live.is_empty() {
        return live[n / 16 % live.len()];
    }
    ever.get(n % ever.len().max(1)).copied().unwrap_or_default()
}

impl World {
    pub(super) fn pd(&self, pick: Pick) -> PdId {
        choose(&self.ever.pds, |p| self.model.has_pd(p), pick)
    }

    pub(super) fn cq(&self, pick: Pick) -> CqId {
        choose(&self.ever.cqs, |c| self.model.has_cq(c), pick)
    }

    pub(super) fn srq(&self, pick: Pick) -> SrqId {
        choose(&self.ever.srqs, |s| self.model.srq(s).is_some(), pick)
    }

    pub(super) fn qp(&self, pick: Pick) -> QpId {
        choose(&self.ever.qps, |q| self.model.qp(q).is_some(), pick)
    }

    pub(super) fn ah(&self, pick: Pick) -> AhId {
        choose(&self.ever.ahs, |a| self.model.has_ah(a), pick)
    }

    pub(super) fn mr(&self, pick: Pick) -> MrId {
        let ids: Vec<MrId> = self.ever.mrs.iter().map(|(id, _)| *id).collect();
        choose(&ids, |m| self.model.mr(m).is_some(), pick)
    }

    /// The SGEs of a receive WR for an object of `pd` (`None`: the target
    /// does not exist, so any MR will do).
    pub(super) fn sges(&self, pd: Option<PdId>, seeds: &[SgeSeed]) -> Vec<Sge> {
        seeds.iter().map(|s| self.sge(pd, s)).collect()
    }

    fn sge(&self, pd: Option<PdId>, seed: &SgeSeed) -> Sge {
        let n = usize::from(seed.mr.0);
        let any_mr = self
            .ever
            .mrs
            .get(n % self.ever.mrs.len().max(1))
            .map(|(_, mr)| *mr);
        let mr = match seed.kind {
            SgeKind::Good => self.good_mr(pd, n).or(any_mr),
            _ => any_mr,
        };
        let Some(mr) = mr else {
            return bogus(seed);
        };
        match seed.kind {
            SgeKind::Good | SgeKind::AnyMr => inside(&mr, seed),
            SgeKind::PastEnd => Sge {
                addr: mr.addr + mr.length - u64::from(seed.offset % 16),
                length: 17 + u32::from(seed.len % 100),
                lkey: mr.key,
            },
            SgeKind::Empty => Sge {
                length: 0,
                ..bogus(seed)
            },
            SgeKind::BogusKey => bogus(seed),
        }
    }

    /// A live MR of `pd` with LOCAL_WRITE, the n-th of them.
    fn good_mr(&self, pd: Option<PdId>, n: usize) -> Option<ModelMr> {
        let fits = |m: &&ModelMr| Some(m.pd) == pd && m.access & ACCESS_LOCAL_WRITE != 0;
        let live = self
            .ever
            .mrs
            .iter()
            .filter_map(|(id, _)| self.model.mr(*id));
        let good: Vec<ModelMr> = live.filter(fits).copied().collect();
        good.get(n % good.len().max(1)).copied()
    }
}

/// A non-empty range inside `mr`.
fn inside(mr: &ModelMr, seed: &SgeSeed) -> Sge {
    let offset = u64::from(seed.offset) % mr.length;
    let length = 1 + u64::from(seed.len) % (mr.length - offset);
    Sge {
        addr: mr.addr + offset,
        length: u32::try_from(length).expect("MRs are small"),
        lkey: mr.key,
    }
}

/// An SGE with key 0: unknown unless some live MR happens to have it, which
/// the model accounts for like any other key.
fn bogus(seed: &SgeSeed) -> Sge {
    Sge {
        addr: u64::from(seed.offset),
        length: 1 + u32::from(seed.len),
        lkey: 0,
    }
}
