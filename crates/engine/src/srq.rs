//! Shared receive queues: `ibv_create_srq`, `ibv_modify_srq`,
//! `ibv_query_srq` and the queue of posted receive WRs (seed 001).

use crate::attr_mask::SrqAttrMask;
use crate::device::DeviceLimits;
use crate::error::{einval, ensure, VerbsResult};
use crate::handles::PdId;
use crate::objects::UseCount;
use crate::recv_queue::RecvQueue;
use crate::srq_limit::SrqLimit;

/// `struct ibv_srq_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrqAttr {
    /// Outstanding WRs the SRQ holds.
    pub max_wr: u32,
    /// SGEs per WR.
    pub max_sge: u32,
    /// Low watermark; 0 = not armed.
    pub srq_limit: u32,
}

/// A shared receive queue.
#[derive(Debug)]
pub(crate) struct Srq {
    pub(crate) pd: PdId,
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
    pub(crate) queue: RecvQueue,
    pub(crate) limit: SrqLimit,
    pub(crate) users: UseCount,
}

impl Srq {
    /// Validates a creation request and returns the SRQ with its actual
    /// attributes: max_wr as requested, max_sge as requested but at least
    /// 1 (a WR always has room for one SGE, as on rxe), srq_limit zeroed
    /// (ibv_create_srq(3): "srq_limit will be zeroed").
    pub(crate) fn create(pd: PdId, req: &SrqAttr, limits: &DeviceLimits) -> VerbsResult<Srq> {
        ensure(req.max_wr >= 1, einval("SRQ max_wr is 0"))?;
        ensure(
            req.max_wr <= limits.max_srq_wr,
            einval("SRQ max_wr above device max_srq_wr"),
        )?;
        ensure(
            req.max_sge <= limits.max_srq_sge,
            einval("SRQ max_sge above device max_srq_sge"),
        )?;
        Ok(Srq {
            pd,
            max_wr: req.max_wr,
            max_sge: req.max_sge.max(1),
            queue: RecvQueue::with_room(req.max_wr as usize)?,
            limit: SrqLimit::default(),
            users: UseCount::default(),
        })
    }

    /// The attributes `ibv_query_srq` returns.
    pub(crate) fn attr(&self) -> SrqAttr {
        SrqAttr {
            max_wr: self.max_wr,
            max_sge: self.max_sge,
            srq_limit: self.limit.limit(),
        }
    }

    /// `ibv_modify_srq`: all checks first, then every change, so a failed
    /// call changes nothing (seed 001, NOTES).
    pub(crate) fn modify(
        &mut self,
        attr: &SrqAttr,
        mask: SrqAttrMask,
        limits: &DeviceLimits,
    ) -> VerbsResult<()> {
        ensure(
            SrqAttrMask::all().contains(mask),
            einval("srq_attr_mask has unknown bits"),
        )?;
        let new_max_wr = if mask.contains(SrqAttrMask::MAX_WR) {
            self.check_resize(attr.max_wr, mask, limits)?;
            attr.max_wr
        } else {
            self.max_wr
        };
        if mask.contains(SrqAttrMask::LIMIT) {
            ensure(
                attr.srq_limit <= new_max_wr,
                einval("srq_limit above the SRQ's max_wr"),
            )?;
        }
        self.queue.make_room(new_max_wr as usize)?;
        self.max_wr = new_max_wr;
        if mask.contains(SrqAttrMask::LIMIT) {
            self.limit.set(attr.srq_limit);
        }
        Ok(())
    }

    /// IBV_SRQ_MAX_WR rules: the device advertises IBV_DEVICE_SRQ_RESIZE;
    /// the new size must hold the WRs already posted and, unless the same
    /// call re-arms, the armed limit.
    fn check_resize(
        &self,
        max_wr: u32,
        mask: SrqAttrMask,
        limits: &DeviceLimits,
    ) -> VerbsResult<()> {
        ensure(max_wr >= 1, einval("SRQ max_wr is 0"))?;
        ensure(
            max_wr <= limits.max_srq_wr,
            einval("SRQ max_wr above device max_srq_wr"),
        )?;
        ensure(
            max_wr as usize >= self.queue.len(),
            einval("SRQ max_wr below the number of outstanding WRs"),
        )?;
        ensure(
            mask.contains(SrqAttrMask::LIMIT) || max_wr >= self.limit.limit(),
            einval("SRQ max_wr below the armed srq_limit"),
        )
    }
}
