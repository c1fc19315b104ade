//! SRQs: `ibv_create_srq`, `ibv_modify_srq` (seed 001 and the rules of
//! `crates/engine/src/srq.rs` docs), `ibv_query_srq`, `ibv_destroy_srq`.

use super::Model;
use crate::device::{MAX_SRQ_SGE, MAX_SRQ_WR};
use crate::errno::{require, Outcome, EBUSY, EINVAL};
use softverbs_engine::{PdId, SrqAttr, SrqId};

/// IBV_SRQ_MAX_WR.
const MAX_WR: u32 = 1 << 0;
/// IBV_SRQ_LIMIT.
const LIMIT: u32 = 1 << 1;

/// The model of one SRQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSrq {
    /// PD.
    pub pd: PdId,
    /// Capacity.
    pub max_wr: u32,
    /// SGEs per WR.
    pub max_sge: u32,
    /// Armed low watermark; 0 = not armed.
    pub limit: u32,
    /// Receive WRs waiting.
    pub posted: usize,
}

impl Model {
    /// `ibv_create_srq`: 1 <= max_wr <= max_srq_wr, max_sge <= max_srq_sge;
    /// returns the actual attributes: max_sge at least 1 (a WR has room
    /// for one SGE, as on rxe), srq_limit zeroed.
    pub fn check_create_srq(&self, pd: PdId, attr: &SrqAttr) -> Outcome<SrqAttr> {
        require(self.pds.contains(&pd), EINVAL)?;
        require((1..=MAX_SRQ_WR).contains(&attr.max_wr), EINVAL)?;
        require(attr.max_sge <= MAX_SRQ_SGE, EINVAL)?;
        Ok(SrqAttr {
            srq_limit: 0,
            max_sge: attr.max_sge.max(1),
            ..*attr
        })
    }

    /// After a successful `ibv_create_srq`.
    pub fn insert_srq(&mut self, id: SrqId, pd: PdId, attr: &SrqAttr) {
        let srq = ModelSrq {
            pd,
            max_wr: attr.max_wr,
            max_sge: attr.max_sge.max(1),
            limit: 0,
            posted: 0,
        };
        self.srqs.insert(id, srq);
    }

    /// `ibv_modify_srq`, all-or-nothing. MAX_WR resizes (the device has
    /// IBV_DEVICE_SRQ_RESIZE): within the device limit, holding the WRs
    /// already posted and, unless the same call sets LIMIT, the armed
    /// limit. LIMIT arms (0 disarms) with a limit not above the new size.
    pub fn modify_srq(&mut self, id: SrqId, attr: &SrqAttr, mask: u32) -> Outcome {
        let srq = self.srqs.get_mut(&id).ok_or(EINVAL)?;
        require(mask & !(MAX_WR | LIMIT) == 0, EINVAL)?;
        let max_wr = if mask & MAX_WR != 0 {
            require((1..=MAX_SRQ_WR).contains(&attr.max_wr), EINVAL)?;
            require(attr.max_wr as usize >= srq.posted, EINVAL)?;
            require(mask & LIMIT != 0 || attr.max_wr >= srq.limit, EINVAL)?;
            attr.max_wr
        } else {
            srq.max_wr
        };
        if mask & LIMIT != 0 {
            require(attr.srq_limit <= max_wr, EINVAL)?;
            srq.limit = attr.srq_limit;
        }
        srq.max_wr = max_wr;
        Ok(())
    }

    /// `ibv_query_srq`: the limit reads 0 when not armed.
    pub fn query_srq(&self, id: SrqId) -> Outcome<SrqAttr> {
        let s = self.srqs.get(&id).ok_or(EINVAL)?;
        Ok(SrqAttr {
            max_wr: s.max_wr,
            max_sge: s.max_sge,
            srq_limit: s.limit,
        })
    }

    /// The SRQ, if it exists.
    pub fn srq(&self, id: SrqId) -> Option<&ModelSrq> {
        self.srqs.get(&id)
    }

    /// `ibv_destroy_srq`: EBUSY while a QP receives through it.
    pub fn destroy_srq(&mut self, id: SrqId) -> Outcome {
        require(self.srqs.contains_key(&id), EINVAL)?;
        require(self.qps.values().all(|q| q.srq != Some(id)), EBUSY)?;
        self.srqs.remove(&id);
        Ok(())
    }
}
