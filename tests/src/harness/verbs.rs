//! Running each operation on the engine and the model and comparing.

use super::{errno, Check, World};
use crate::device::ACCESS_LOCAL_WRITE;
use crate::model::ModelMr;
use crate::ops::{CreateQpSeed, Op, Pick, SgeSeed};
use crate::Outcome;
use softverbs_engine::{AhAttr, CqId, PdId, QpInitAttr, RecvWr, SrqAttr, SrqAttrMask, WcStatus};
use std::fmt::Debug;

/// Size of the CQs the suite creates: far more than a sequence can fill.
const CQE: u32 = 4096;
/// Length of every MR the suite registers.
const MR_LEN: u64 = 0x1000;
/// IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ.
const REMOTE_WRITE: u32 = 0x2;
const REMOTE_READ: u32 = 0x4;

impl World {
    /// Runs one operation on both sides and compares what it returned.
    pub(super) fn apply(&mut self, op: &Op) -> Check {
        match op {
            Op::CreateQp(seed) => self.create_qp(seed),
            Op::ModifyQp(seed) => self.modify_qp(seed),
            Op::QueryQp(p) => self.query_qp(*p),
            Op::CreateSrq(p, attr) => self.create_srq(*p, attr),
            Op::ModifySrq(p, attr, mask) => self.modify_srq(*p, attr, *mask),
            Op::QuerySrq(p) => {
                let id = self.srq(*p);
                let actual = errno(self.engine.query_srq(id));
                let expected = self.model.query_srq(id);
                self.compare("query_srq", actual, expected)
            }
            Op::PostRecv(p, sges) => self.post_recv(*p, sges),
            Op::PostSrqRecv(p, sges) => self.post_srq_recv(*p, sges),
            Op::PollCq(p, max) => self.poll_cq(self.cq(*p), *max),
            Op::PollEvents => self.poll_events(),
            Op::AllocPd => self.alloc_pd(),
            Op::CreateCq => self.create_cq(),
            Op::RegMr(p, local_write) => self.reg_mr(self.pd(*p), *local_write),
            Op::CreateAh(p, attr) => self.create_ah(self.pd(*p), attr),
            Op::DestroyQp(_)
            | Op::DestroySrq(_)
            | Op::DeallocPd(_)
            | Op::DestroyCq(_)
            | Op::DeregMr(_)
            | Op::DestroyAh(_) => self.destroy(op),
        }
    }

    /// The destroy verbs: each removes the object, or refuses with EINVAL
    /// (unknown handle) or EBUSY (still in use) and changes nothing.
    fn destroy(&mut self, op: &Op) -> Check {
        let (verb, actual, expected) = match *op {
            Op::DestroyQp(p) => {
                let id = self.qp(p);
                (
                    "destroy_qp",
                    errno(self.engine.destroy_qp(id)),
                    self.model.destroy_qp(id),
                )
            }
            Op::DestroySrq(p) => {
                let id = self.srq(p);
                (
                    "destroy_srq",
                    errno(self.engine.destroy_srq(id)),
                    self.model.destroy_srq(id),
                )
            }
            Op::DeallocPd(p) => {
                let id = self.pd(p);
                (
                    "dealloc_pd",
                    errno(self.engine.dealloc_pd(id)),
                    self.model.dealloc_pd(id),
                )
            }
            Op::DestroyCq(p) => {
                let id = self.cq(p);
                (
                    "destroy_cq",
                    errno(self.engine.destroy_cq(id)),
                    self.model.destroy_cq(id),
                )
            }
            Op::DeregMr(p) => {
                let id = self.mr(p);
                (
                    "dereg_mr",
                    errno(self.engine.dereg_mr(id)),
                    self.model.dereg_mr(id),
                )
            }
            Op::DestroyAh(p) => {
                let id = self.ah(p);
                (
                    "destroy_ah",
                    errno(self.engine.destroy_ah(id)),
                    self.model.destroy_ah(id),
                )
            }
            _ => unreachable!("apply sends only destroy verbs here"),
        };
        self.judge(verb, actual, expected).map(drop)
    }

    /// PDs and CQs are always created: nothing in a sequence approaches
    /// the device's max_pd or max_cq.
    fn alloc_pd(&mut self) -> Check {
        let pd = self
            .engine
            .alloc_pd()
            .map_err(|e| format!("alloc_pd: {e}"))?;
        self.model.insert_pd(pd);
        self.ever.pds.push(pd);
        Ok(())
    }

    fn create_cq(&mut self) -> Check {
        let created = self.engine.create_cq(CQE, 0);
        let (cq, _) = created.map_err(|e| format!("create_cq: {e}"))?;
        self.model.insert_cq(cq);
        self.ever.cqs.push(cq);
        Ok(())
    }

    /// Compares two outcomes including the values.
    fn compare<T: PartialEq + Debug>(
        &mut self,
        verb: &'static str,
        actual: Outcome<T>,
        expected: Outcome<T>,
    ) -> Check {
        match self.judge(verb, actual, expected)? {
            Some((a, e)) if a != e => Err(format!(
                "{verb}: engine returned {a:?}, model expects {e:?}"
            )),
            _ => Ok(()),
        }
    }

    fn create_qp(&mut self, seed: &CreateQpSeed) -> Check {
        let pd = self.pd(seed.pd);
        let init = QpInitAttr {
            send_cq: self.cq(seed.send_cq),
            recv_cq: self.cq(seed.recv_cq),
            srq: seed.srq.map(|p| self.srq(p)),
            cap: seed.cap,
            qp_type: seed.qp_type,
            sq_sig_all: seed.sq_sig_all,
        };
        let expected = self.model.check_create_qp(pd, &init).map(|(_, cap)| cap);
        let actual = errno(self.engine.create_qp(pd, &init));
        let Some((created, cap)) = self.judge("create_qp", actual, expected)? else {
            return Ok(());
        };
        if created.cap != cap {
            return Err(format!(
                "create_qp: actual caps {:?}, model expects {cap:?}",
                created.cap
            ));
        }
        if !self.model.qp_num_is_fresh(created.qp_num) {
            return Err(format!(
                "create_qp: qp_num {:#x} is special, too wide or in use",
                created.qp_num
            ));
        }
        self.model.insert_qp(created.id, created.qp_num, pd, &init);
        self.ever.qps.push(created.id);
        Ok(())
    }

    fn query_qp(&mut self, p: Pick) -> Check {
        let id = self.qp(p);
        let expected = self.model.query_qp(id).map(drop);
        // The values of a live QP are compared after every operation.
        let actual = errno(self.engine.query_qp(id));
        self.judge("query_qp", actual, expected).map(drop)
    }

    fn create_srq(&mut self, p: Pick, attr: &SrqAttr) -> Check {
        let pd = self.pd(p);
        let expected = self.model.check_create_srq(pd, attr);
        let actual = errno(self.engine.create_srq(pd, attr));
        let Some(((id, actual), expected)) = self.judge("create_srq", actual, expected)? else {
            return Ok(());
        };
        if actual != expected {
            return Err(format!(
                "create_srq: actual {actual:?}, model expects {expected:?}"
            ));
        }
        self.model.insert_srq(id, pd, attr);
        self.ever.srqs.push(id);
        Ok(())
    }

    fn modify_srq(&mut self, p: Pick, attr: &SrqAttr, mask: u32) -> Check {
        let id = self.srq(p);
        let expected = self.model.modify_srq(id, attr, mask);
        let actual = errno(
            self.engine
                .modify_srq(id, attr, SrqAttrMask::from_bits_retain(mask)),
        );
        self.judge("modify_srq", actual, expected).map(drop)
    }

    fn post_recv(&mut self, p: Pick, seeds: &[SgeSeed]) -> Check {
        let id = self.qp(p);
        let sges = self.sges(self.model.qp(id).map(|q| q.pd), seeds);
        let wr_id = self.next_wr_id;
        self.next_wr_id += 1;
        let expected = self.model.post_recv(id, wr_id, &sges);
        let wr = RecvWr {
            wr_id,
            sg_list: &sges,
        };
        let actual = errno(self.engine.post_recv(id, &wr));
        self.judge("post_recv", actual, expected).map(drop)
    }

    fn post_srq_recv(&mut self, p: Pick, seeds: &[SgeSeed]) -> Check {
        let id = self.srq(p);
        let sges = self.sges(self.model.srq(id).map(|s| s.pd), seeds);
        let wr_id = self.next_wr_id;
        self.next_wr_id += 1;
        let expected = self.model.post_srq_recv(id, &sges);
        let wr = RecvWr {
            wr_id,
            sg_list: &sges,
        };
        let actual = errno(self.engine.post_srq_recv(id, &wr));
        self.judge("post_srq_recv", actual, expected).map(drop)
    }

    /// Polls up to `max` completions of `cq` from both and compares them.
    pub(super) fn poll_cq(&mut self, cq: CqId, max: usize) -> Check {
        let mut out = Vec::new();
        let actual = errno(self.engine.poll_cq(cq, max, &mut out)).map(|_| out);
        let expected = self.model.poll_cq(cq, max);
        let flushed = expected.as_ref().map_or(0, |wcs| {
            wcs.iter()
                .filter(|wc| wc.status == WcStatus::WrFlushErr)
                .count()
        });
        self.coverage.flushed += flushed;
        self.compare("poll_cq", actual, expected)
    }

    fn poll_events(&mut self) -> Check {
        let actual: Vec<_> = std::iter::from_fn(|| self.engine.poll_event()).collect();
        let expected = self.model.take_events();
        for e in &expected {
            *self.coverage.events.entry(e.event_type()).or_default() += 1;
        }
        self.compare("poll_events", Ok(actual), Ok(expected))
    }

    /// Registers a 4 KiB MR with LOCAL_WRITE (and REMOTE_WRITE) or with
    /// REMOTE_READ only, at an address no other MR of the run uses.
    pub(super) fn reg_mr(&mut self, pd: PdId, local_write: bool) -> Check {
        let addr = 0x10_0000 * (self.ever.mrs.len() as u64 + 1);
        let access = if local_write {
            ACCESS_LOCAL_WRITE | REMOTE_WRITE
        } else {
            REMOTE_READ
        };
        let expected = self.model.check_reg_mr(pd);
        let actual = errno(
            self.engine
                .reg_mr(pd, addr, MR_LEN, addr, access)
                .map(|m| m.key),
        );
        let Some((key, ())) = self.judge("reg_mr", actual, expected)? else {
            return Ok(());
        };
        let (id, _) = self
            .engine
            .mr_by_key(key)
            .ok_or("reg_mr: lkey does not find the MR")?;
        let mr = ModelMr {
            pd,
            addr,
            length: MR_LEN,
            access,
            key,
        };
        self.model.insert_mr(id, mr);
        self.ever.mrs.push((id, mr));
        Ok(())
    }

    fn create_ah(&mut self, pd: PdId, attr: &AhAttr) -> Check {
        let expected = self.model.check_create_ah(pd, attr);
        let actual = errno(self.engine.create_ah(pd, attr));
        if let Some((ah, ())) = self.judge("create_ah", actual, expected)? {
            self.model.insert_ah(ah, pd);
            self.ever.ahs.push(ah);
        }
        Ok(())
    }
}
