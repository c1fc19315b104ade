//! PDs, MRs, AHs and CQs: existence, use counts (EBUSY) and completions.

use super::Model;
use crate::errno::{require, Outcome, EBUSY, EINVAL};
use crate::values::{av_valid, sgid_check};
use softverbs_engine::{AhAttr, AhId, CqId, MrId, PdId, WorkCompletion};
use std::collections::VecDeque;

/// A registered memory region, as far as receive WRs care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelMr {
    /// Owning PD.
    pub pd: PdId,
    /// First byte.
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// `ibv_access_flags`.
    pub access: u32,
    /// lkey.
    pub key: u32,
}

impl ModelMr {
    /// Whether `[addr, addr + len)` lies inside the region.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        let (start, end) = (
            u128::from(self.addr),
            u128::from(self.addr) + u128::from(self.length),
        );
        u128::from(addr) >= start && u128::from(addr) + u128::from(len) <= end
    }
}

impl Model {
    /// Whether the PD exists.
    pub fn has_pd(&self, pd: PdId) -> bool {
        self.pds.contains(&pd)
    }

    /// Whether the CQ exists.
    pub fn has_cq(&self, cq: CqId) -> bool {
        self.cqs.contains_key(&cq)
    }

    /// The MR, if it exists.
    pub fn mr(&self, id: MrId) -> Option<&ModelMr> {
        self.mrs.get(&id)
    }

    /// Whether the AH exists.
    pub fn has_ah(&self, ah: AhId) -> bool {
        self.ahs.contains_key(&ah)
    }

    /// After a successful `ibv_alloc_pd`.
    pub fn insert_pd(&mut self, pd: PdId) {
        self.pds.insert(pd);
    }

    /// `ibv_dealloc_pd`: EBUSY while an MR, AH, SRQ or QP uses the PD.
    pub fn dealloc_pd(&mut self, pd: PdId) -> Outcome {
        require(self.pds.contains(&pd), EINVAL)?;
        require(!self.pd_in_use(pd), EBUSY)?;
        self.pds.remove(&pd);
        Ok(())
    }

    fn pd_in_use(&self, pd: PdId) -> bool {
        self.mrs.values().any(|m| m.pd == pd)
            || self.ahs.values().any(|p| *p == pd)
            || self.srqs.values().any(|s| s.pd == pd)
            || self.qps.values().any(|q| q.pd == pd)
    }

    /// `ibv_reg_mr` with valid access and range: fails only for an unknown PD.
    pub fn check_reg_mr(&self, pd: PdId) -> Outcome {
        require(self.pds.contains(&pd), EINVAL)
    }

    /// After a successful `ibv_reg_mr`.
    pub fn insert_mr(&mut self, id: MrId, mr: ModelMr) {
        self.mrs.insert(id, mr);
    }

    /// `ibv_dereg_mr`.
    pub fn dereg_mr(&mut self, id: MrId) -> Outcome {
        self.mrs.remove(&id).map(drop).ok_or(EINVAL)
    }

    /// The live MR with lkey `key`.
    pub fn mr_by_key(&self, key: u32) -> Option<&ModelMr> {
        self.mrs.values().find(|m| m.key == key)
    }

    /// `ibv_create_ah`: the PD must exist and the address vector be valid.
    pub fn check_create_ah(&self, pd: PdId, attr: &AhAttr) -> Outcome {
        require(self.pds.contains(&pd), EINVAL)?;
        sgid_check(attr)?;
        require(av_valid(attr), EINVAL)
    }

    /// After a successful `ibv_create_ah`.
    pub fn insert_ah(&mut self, id: AhId, pd: PdId) {
        self.ahs.insert(id, pd);
    }

    /// `ibv_destroy_ah`.
    pub fn destroy_ah(&mut self, id: AhId) -> Outcome {
        self.ahs.remove(&id).map(drop).ok_or(EINVAL)
    }

    /// After a successful `ibv_create_cq`.
    pub fn insert_cq(&mut self, cq: CqId) {
        self.cqs.insert(cq, VecDeque::new());
    }

    /// `ibv_destroy_cq`: EBUSY while a QP sends or receives through it.
    pub fn destroy_cq(&mut self, cq: CqId) -> Outcome {
        require(self.cqs.contains_key(&cq), EINVAL)?;
        let used = self
            .qps
            .values()
            .any(|q| q.send_cq == cq || q.recv_cq == cq);
        require(!used, EBUSY)?;
        self.cqs.remove(&cq);
        Ok(())
    }

    /// `ibv_poll_cq`: up to `max` completions, oldest first.
    pub fn poll_cq(&mut self, cq: CqId, max: usize) -> Outcome<Vec<WorkCompletion>> {
        let entries = self.cqs.get_mut(&cq).ok_or(EINVAL)?;
        let n = max.min(entries.len());
        Ok(entries.drain(..n).collect())
    }

    /// Queues a completion. The CQs the suite creates are far larger than
    /// the number of WRs a sequence posts, so they never overrun.
    pub(crate) fn complete(&mut self, cq: CqId, wc: WorkCompletion) {
        self.cqs
            .get_mut(&cq)
            .expect("a QP's CQs outlive it (destroy_cq is EBUSY)")
            .push_back(wc);
    }
}
