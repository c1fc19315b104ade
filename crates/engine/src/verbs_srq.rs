//! SRQ verbs.

use crate::attr_mask::SrqAttrMask;
use crate::engine::Engine;
use crate::error::{ebusy, einval, enomem, ensure, VerbsResult};
use crate::handles::{PdId, SrqId};
use crate::srq::{Srq, SrqAttr};

impl Engine {
    /// `ibv_create_srq`: returns the SRQ and its actual attributes.
    pub fn create_srq(&mut self, pd: PdId, attr: &SrqAttr) -> VerbsResult<(SrqId, SrqAttr)> {
        ensure(self.pds.contains_key(pd), einval("unknown PD"))?;
        let srq = Srq::create(pd, attr, &self.config.limits)?;
        ensure(
            self.srqs.len() < self.config.limits.max_srq as usize,
            enomem("max_srq reached"),
        )?;
        let actual = srq.attr();
        crate::room::slot(&mut self.srqs)?;
        self.pd_mut(pd)?.users.get();
        let id = self.srqs.insert(srq);
        self.srq_changed(id);
        Ok((id, actual))
    }

    /// `ibv_modify_srq` (seed 001).
    pub fn modify_srq(&mut self, srq: SrqId, attr: &SrqAttr, mask: SrqAttrMask) -> VerbsResult<()> {
        let limits = &self.config.limits;
        let s = self.srqs.get_mut(srq).ok_or(einval("unknown SRQ"))?;
        s.modify(attr, mask, limits)
    }

    /// `ibv_query_srq`.
    pub fn query_srq(&self, srq: SrqId) -> VerbsResult<SrqAttr> {
        self.srqs
            .get(srq)
            .map(Srq::attr)
            .ok_or(einval("unknown SRQ"))
    }

    /// Number of receive WRs waiting in an SRQ.
    pub fn srq_len(&self, srq: SrqId) -> VerbsResult<usize> {
        self.srqs
            .get(srq)
            .map(|s| s.queue.len())
            .ok_or(einval("unknown SRQ"))
    }

    /// `ibv_destroy_srq`: EBUSY while a QP uses the SRQ.
    pub fn destroy_srq(&mut self, srq: SrqId) -> VerbsResult<()> {
        let s = self.srqs.get(srq).ok_or(einval("unknown SRQ"))?;
        ensure(!s.users.in_use(), ebusy("SRQ still used by a QP"))?;
        let s = self.srqs.remove(srq).expect("checked above");
        self.pds[s.pd].users.put();
        self.srq_changed(srq);
        Ok(())
    }
}
