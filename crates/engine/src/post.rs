//! Posting work requests: `ibv_post_recv`, `ibv_post_srq_recv` and
//! `ibv_post_send`. A WR is either queued whole or refused with nothing
//! queued; the provider shim walks a WR list and reports the first refused
//! WR as `bad_wr`, with the earlier ones posted, as every provider does.
//! `post_send_batch` (`ibv_wr_complete`) is all or nothing for a batch.
//!
//! Which states accept posts (seed 004 and the IBTA, vol. 1 chapter 10):
//! receive WRs from INIT on (EINVAL in RESET), send WRs from RTS on (EINVAL
//! in RESET, INIT and RTR); in SQD sends are queued but not started; in SQE
//! and ERR WRs are accepted and completed at once with WR_FLUSH_ERR. The
//! errno values are those of the kernel's rxe driver (`rxe_post_recv`,
//! `rxe_post_send`): EINVAL for the state and for bad WRs, ENOMEM for a
//! full queue.
//!
//! Local keys are not checked at post time, as on rxe and mlx5: the MR may
//! change before the WR runs (`ibv_rereg_mr`, `ibv_dereg_mr`), so a WR
//! naming a bad lkey, a range outside its MR or an MR without the rights
//! it needs completes in error when it executes (IBV_WC_LOC_PROT_ERR
//! locally, IBV_WC_REM_OP_ERR at the requester of a SEND it was to take).

use crate::engine::Engine;
use crate::error::{einval, enomem, ensure, VerbsResult};
use crate::handles::{QpId, SrqId};
use crate::mr_table::sge_total;
use crate::qp_state::{QpState, QpType};
use crate::requester::ReqOp;
use crate::room;
use crate::wc::{WcOpcode, WorkCompletion};
use crate::wr::{
    opcode_allowed, send_flags, InlineData, RecvWqe, RecvWr, SendWqe, SendWr, Sge, SgeList,
};
use softverbs_faults::Queue;

impl Engine {
    /// `ibv_post_recv` for one WR.
    pub fn post_recv(&mut self, id: QpId, wr: &RecvWr<'_>) -> VerbsResult<()> {
        let qp = self.qps.get(id).ok_or(einval("unknown QP"))?;
        ensure(qp.srq.is_none(), einval("QP receives from an SRQ"))?;
        ensure(
            qp.state != QpState::Reset,
            einval("receive WRs cannot be posted in RESET"),
        )?;
        // A full queue is found before a bad WR, as rxe and mlx5 check.
        ensure(
            qp.rq.len() < qp.cap.max_recv_wr as usize,
            enomem("receive queue full"),
        )?;
        ensure(
            wr.sg_list.len() <= qp.cap.max_recv_sge as usize,
            einval("more SGEs than max_recv_sge"),
        )?;
        check_recv_length(wr.sg_list)?;
        let qp_num = qp.qp_num;
        self.post_fault(Queue::Recv, qp_num, None, sge_total(wr.sg_list))?;
        let qp = &mut self.qps[id];
        if qp.state == QpState::Err {
            self.with_qp(id, |qp, ctx| {
                let wc = WorkCompletion::flushed(wr.wr_id, WcOpcode::Recv, qp.qp_num);
                ctx.complete(qp.recv_cq, wc, false);
            });
        } else {
            qp.rq.post(RecvWqe::new(wr)?);
        }
        self.count_post(id);
        Ok(())
    }

    /// `ibv_post_srq_recv` for one WR.
    pub fn post_srq_recv(&mut self, id: SrqId, wr: &RecvWr<'_>) -> VerbsResult<()> {
        let srq = self.srqs.get(id).ok_or(einval("unknown SRQ"))?;
        ensure(srq.queue.len() < srq.max_wr as usize, enomem("SRQ full"))?;
        ensure(
            wr.sg_list.len() <= srq.max_sge as usize,
            einval("more SGEs than the SRQ's max_sge"),
        )?;
        check_recv_length(wr.sg_list)?;
        self.post_fault(Queue::SrqRecv, u32::MAX, None, sge_total(wr.sg_list))?;
        let srq = &mut self.srqs[id];
        srq.queue.post(RecvWqe::new(wr)?);
        Ok(())
    }

    /// `ibv_post_send` for one WR.
    pub fn post_send(&mut self, id: QpId, wr: &SendWr<'_>) -> VerbsResult<()> {
        self.post_send_batch(id, std::slice::from_ref(wr))
    }

    /// `ibv_wr_complete`: all or nothing. Every WR is checked as
    /// `post_send` checks one, and the send queue must have room for them
    /// all, before any is posted; the first refusal is returned and
    /// nothing is queued. (Posting a WR never changes what the checks of
    /// the next one see: the QP state stays put, or moves SQE -> ERR,
    /// which accepts the same WRs.)
    pub fn post_send_batch(&mut self, id: QpId, wrs: &[SendWr<'_>]) -> VerbsResult<()> {
        self.qps.get(id).ok_or(einval("unknown QP"))?;
        for wr in wrs {
            self.check_send(id, wr)?;
        }
        self.check_send_room(id, wrs.len())?;
        if self.faults.is_some() {
            let qp_num = self.qps[id].qp_num;
            for wr in wrs {
                self.post_fault(Queue::Send, qp_num, Some(wr.opcode), send_len(wr))?;
            }
        }
        // The queue entries are made before any is queued: one that finds
        // no memory (`room.rs`) refuses the batch whole.
        let sig_all = self.qps[id].sq_sig_all;
        let mut wqes = smallvec::SmallVec::<[SendWqe; 1]>::new();
        wqes.try_reserve_exact(wrs.len())
            .map_err(|_| enomem("no memory for the WRs"))?;
        for wr in wrs {
            wqes.push(send_wqe(wr, sig_all)?);
        }
        for wqe in wqes {
            self.enqueue_send(id, wqe);
            self.count_post(id);
        }
        Ok(())
    }

    /// The checks of one send WR that do not depend on queue space.
    fn check_send(&self, id: QpId, wr: &SendWr<'_>) -> VerbsResult<()> {
        let qp = &self.qps[id];
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
        Ok(())
    }

    /// Room in the send queue for `n` more WRs. In SQE and ERR a WR is
    /// completed at once and takes no room, but a full queue still
    /// refuses it, as it refuses a single post.
    fn check_send_room(&self, id: QpId, n: usize) -> VerbsResult<()> {
        let qp = &self.qps[id];
        let flushing = matches!(qp.state, QpState::Sqe | QpState::Err);
        let needed = if flushing { n.min(1) } else { n };
        ensure(
            qp.send_queue_len() + needed <= qp.cap.max_send_wr as usize,
            enomem("send queue full"),
        )
    }

    /// Queues a checked WR, or completes it with WR_FLUSH_ERR in SQE and
    /// ERR.
    fn enqueue_send(&mut self, id: QpId, wqe: SendWqe) {
        let qp = &mut self.qps[id];
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
            qp.direct_probe();
            self.schedule.wake(id);
        }
    }

    /// Inline size or SGE count, and the message length, by opcode: an
    /// atomic's local buffer holds its 8 bytes (rxe's provider,
    /// `validate_send_wr`); inline data exists only for SEND and WRITE
    /// (ibv_post_send(3): "Valid only for Send and RDMA Write"; rxe's
    /// provider does not check it, and takes a READ's SGEs for its data).
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
            sge_total(wr.sg_list)
        };
        // The atomic's 8 bytes land at the start of its local buffer,
        // which may be longer (rxe's provider refuses shorter only).
        let atomic = matches!(op, ReqOp::CmpSwap | ReqOp::FetchAdd);
        ensure(
            !atomic || len >= 8,
            einval("an atomic's local buffer holds fewer than 8 bytes"),
        )?;
        // A UD message above the MTU is taken, and sends nothing
        // (`Requester::pass_over`).
        ensure(
            len <= u64::from(self.config.limits.max_msg_sz),
            einval("message longer than max_msg_sz"),
        )
    }
}

/// A receive buffer may total at most 2^31 - 1 bytes, the largest IB
/// message (rxe `post_one_recv`).
fn check_recv_length(sges: &[Sge]) -> VerbsResult<()> {
    ensure(
        sge_total(sges) < 1 << 31,
        einval("receive buffer of 2^31 bytes or more"),
    )
}

/// A checked WR's queue entry; ENOMEM if what it copies finds no memory.
fn send_wqe(wr: &SendWr<'_>, sq_sig_all: bool) -> VerbsResult<SendWqe> {
    let inline = wr.send_flags & send_flags::INLINE != 0;
    Ok(SendWqe {
        wr_id: wr.wr_id,
        opcode: wr.opcode,
        send_flags: wr.send_flags,
        signaled: sq_sig_all || wr.send_flags & send_flags::SIGNALED != 0,
        sg_list: if inline {
            SgeList::new()
        } else {
            room::sge_list(wr.sg_list)?
        },
        inline_data: if inline {
            room::inline_data(wr.inline_data)?
        } else {
            InlineData::new()
        },
        imm_data_or_inv_rkey: wr.imm_data_or_inv_rkey,
        rdma: wr.rdma,
        atomic: wr.atomic,
        ud: wr.ud,
    })
}

/// The bytes a send WR carries: its inline data or its SGEs.
fn send_len(wr: &SendWr<'_>) -> u64 {
    if wr.send_flags & send_flags::INLINE != 0 {
        wr.inline_data.len() as u64
    } else {
        sge_total(wr.sg_list)
    }
}
