//! Posting work requests: `ibv_post_recv`, `ibv_post_srq_recv` and
//! `ibv_post_send`. A WR is either queued whole or refused with nothing
//! queued; the provider shim walks a WR list and reports the first refused
//! WR as `bad_wr`, with the earlier ones posted, as every provider does.
//!
//! Which states accept posts (seed 004 and the IBTA, vol. 1 chapter 10):
//! receive WRs from INIT on (EINVAL in RESET), send WRs from RTS on (EINVAL
//! in RESET, INIT and RTR); in SQD sends are queued but not started; in SQE
//! and ERR WRs are accepted and completed at once with WR_FLUSH_ERR. The
//! errno values are those of the kernel's rxe driver (`rxe_post_recv`,
//! `rxe_post_send`): EINVAL for the state and for bad WRs, ENOMEM for a
//! full queue.

use crate::access::AccessFlags;
use crate::engine::Engine;
use crate::error::{einval, enomem, ensure, VerbsResult};
use crate::handles::{PdId, QpId, SrqId};
use crate::mr_table::sge_total;
use crate::qp_state::{QpState, QpType};
use crate::requester::ReqOp;
use crate::wc::{WcOpcode, WorkCompletion};
use crate::wr::{opcode_allowed, send_flags, RecvWqe, RecvWr, SendWqe, SendWr, Sge};

impl Engine {
    /// `ibv_post_recv` for one WR.
    pub fn post_recv(&mut self, id: QpId, wr: &RecvWr<'_>) -> VerbsResult<()> {
        let qp = self.qps.get(id).ok_or(einval("unknown QP"))?;
        ensure(qp.srq.is_none(), einval("QP receives from an SRQ"))?;
        ensure(
            qp.state != QpState::Reset,
            einval("receive WRs cannot be posted in RESET"),
        )?;
        ensure(
            wr.sg_list.len() <= qp.cap.max_recv_sge as usize,
            einval("more SGEs than max_recv_sge"),
        )?;
        self.check_sges(qp.pd, wr.sg_list, AccessFlags::LOCAL_WRITE)?;
        let qp = &mut self.qps[id];
        ensure(
            qp.rq.len() < qp.cap.max_recv_wr as usize,
            enomem("receive queue full"),
        )?;
        if qp.state == QpState::Err {
            self.with_qp(id, |qp, ctx| {
                let wc = WorkCompletion::flushed(wr.wr_id, WcOpcode::Recv, qp.qp_num);
                ctx.complete(qp.recv_cq, wc, false);
            });
        } else {
            qp.rq.push_back(RecvWqe::new(wr));
        }
        Ok(())
    }

    /// `ibv_post_srq_recv` for one WR.
    pub fn post_srq_recv(&mut self, id: SrqId, wr: &RecvWr<'_>) -> VerbsResult<()> {
        let srq = self.srqs.get(id).ok_or(einval("unknown SRQ"))?;
        ensure(
            wr.sg_list.len() <= srq.max_sge as usize,
            einval("more SGEs than the SRQ's max_sge"),
        )?;
        self.check_sges(srq.pd, wr.sg_list, AccessFlags::LOCAL_WRITE)?;
        let srq = &mut self.srqs[id];
        ensure(srq.queue.len() < srq.max_wr as usize, enomem("SRQ full"))?;
        srq.queue.push_back(RecvWqe::new(wr));
        Ok(())
    }

    /// `ibv_post_send` for one WR.
    pub fn post_send(&mut self, id: QpId, wr: &SendWr<'_>) -> VerbsResult<()> {
        let qp = self.qps.get(id).ok_or(einval("unknown QP"))?;
        ensure(
            qp.state >= QpState::Rts,
            einval("send WRs cannot be posted before RTS"),
        )?;
        ensure(
            opcode_allowed(qp.qp_type, wr.opcode),
            einval("opcode not valid for this QP type"),
        )?;
        ensure(
            wr.send_flags & !send_flags::KNOWN == 0,
            einval("unknown send_flags bits"),
        )?;
        self.check_send_data(id, wr)?;
        if qp.qp_type == QpType::Ud {
            let ah = wr.ud.ok_or(einval("UD send without a destination"))?.ah;
            let ah_pd = self.ahs.get(ah).map(|a| a.pd);
            ensure(ah_pd == Some(qp.pd), einval("AH unknown or of another PD"))?;
        }
        let qp = &mut self.qps[id];
        ensure(
            qp.send_queue_len() < qp.cap.max_send_wr as usize,
            enomem("send queue full"),
        )?;
        let wqe = send_wqe(wr, qp.sq_sig_all);
        if matches!(qp.state, QpState::Sqe | QpState::Err) {
            // A flush lost to a CQ overrun fails this QP (from SQE) or
            // nothing (ERR), never another QP.
            self.with_qp(id, |qp, ctx| {
                let wc =
                    WorkCompletion::flushed(wqe.wr_id, WcOpcode::of_send(wqe.opcode), qp.qp_num);
                ctx.complete(qp.send_cq, wc, false);
            });
        } else {
            qp.sq.push_back(wqe);
            self.schedule.wake(id);
        }
        Ok(())
    }

    /// Inline size or SGE count and keys, and the message length, by
    /// opcode: READ and atomics write the local buffer, so they need
    /// LOCAL_WRITE; atomics move exactly 8 bytes; inline data exists only
    /// for SEND and WRITE; a UD message fits one MTU (rxe `validate_send_wr`).
    fn check_send_data(&self, id: QpId, wr: &SendWr<'_>) -> VerbsResult<()> {
        let qp = &self.qps[id];
        let op = ReqOp::of(wr.opcode);
        let inline = wr.send_flags & send_flags::INLINE != 0;
        let len = if inline {
            ensure(
                matches!(op, ReqOp::Send(_) | ReqOp::Write(_)),
                einval("IBV_SEND_INLINE is only for SEND and RDMA WRITE"),
            )?;
            ensure(
                wr.inline_data.len() <= qp.cap.max_inline_data as usize,
                einval("inline data above max_inline_data"),
            )?;
            wr.inline_data.len() as u64
        } else {
            ensure(
                wr.sg_list.len() <= qp.cap.max_send_sge as usize,
                einval("more SGEs than max_send_sge"),
            )?;
            let need = if op.is_rd_atomic() {
                AccessFlags::LOCAL_WRITE
            } else {
                AccessFlags::empty()
            };
            self.check_sges(qp.pd, wr.sg_list, need)?;
            sge_total(wr.sg_list)
        };
        let atomic = matches!(op, ReqOp::CmpSwap | ReqOp::FetchAdd);
        ensure(
            !atomic || len == 8,
            einval("atomic operations move exactly 8 bytes"),
        )?;
        ensure(
            len <= u64::from(self.config.limits.max_msg_sz),
            einval("message longer than max_msg_sz"),
        )?;
        ensure(
            qp.qp_type != QpType::Ud || len <= u64::from(qp.mtu()),
            einval("UD message longer than the MTU"),
        )
    }

    /// Every SGE with data must lie inside an MR of `pd` whose access
    /// includes `need`; zero-length SGEs touch no memory and are not checked.
    fn check_sges(&self, pd: PdId, sges: &[Sge], need: AccessFlags) -> VerbsResult<()> {
        for sge in sges.iter().filter(|s| s.length > 0) {
            let (_, mr) = self.mr_by_key(sge.lkey).ok_or(einval("SGE lkey unknown"))?;
            ensure(mr.pd == pd, einval("SGE lkey belongs to another PD"))?;
            ensure(
                mr.contains_local(sge.addr, u64::from(sge.length)),
                einval("SGE outside its memory region"),
            )?;
            ensure(
                mr.access.contains(need),
                einval("SGE memory region lacks LOCAL_WRITE"),
            )?;
        }
        Ok(())
    }
}

fn send_wqe(wr: &SendWr<'_>, sq_sig_all: bool) -> SendWqe {
    let inline = wr.send_flags & send_flags::INLINE != 0;
    SendWqe {
        wr_id: wr.wr_id,
        opcode: wr.opcode,
        send_flags: wr.send_flags,
        signaled: sq_sig_all || wr.send_flags & send_flags::SIGNALED != 0,
        sg_list: if inline {
            Box::default()
        } else {
            wr.sg_list.into()
        },
        inline_data: if inline {
            wr.inline_data.into()
        } else {
            Box::default()
        },
        imm_data_or_inv_rkey: wr.imm_data_or_inv_rkey,
        rdma: wr.rdma,
        atomic: wr.atomic,
        ud: wr.ud,
    }
}
