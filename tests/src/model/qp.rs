//! QPs: `ibv_create_qp` (seed 002), `ibv_modify_qp` (seeds 000, 004 and the
//! transition table), `ibv_query_qp` (seed 003), `ibv_destroy_qp`, and the
//! side effects of entering a state.

use super::Model;
use crate::device::*;
use crate::errno::{require, Outcome, EINVAL, EOPNOTSUPP};
use crate::names::{state_from_raw, type_from_raw};
use crate::stored::StoredAttrs;
use crate::values::{check_values, sgid_check};
use softverbs_engine::{
    AsyncEvent, CqId, PdId, QpAttr, QpAttrMask as M, QpCap, QpId, QpInitAttr, QpState, QpType,
    SrqId, WcOpcode, WcStatus, WorkCompletion,
};
use std::collections::VecDeque;

/// The mask bits `ibv_modify_qp` takes: 0-20 (IBV_QP_STATE to
/// IBV_QP_DEST_QPN); later ones (IBV_QP_RATE_LIMIT has its own verb) are
/// EOPNOTSUPP in libibverbs and the kernel.
const MODIFY_MASK_BITS: u32 = 0x1F_FFFF;

/// The model of one QP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelQp {
    /// Transport type.
    pub ty: QpType,
    /// Current state.
    pub state: QpState,
    /// PD.
    pub pd: PdId,
    /// The init attributes as created, with the actual caps.
    pub init: QpInitAttr,
    /// QP number the engine assigned.
    pub qp_num: u32,
    /// Attributes set by modify.
    pub stored: StoredAttrs,
    /// wr_ids of the receive WRs waiting in the QP's own receive queue.
    pub rq: VecDeque<u64>,
    pub(crate) send_cq: CqId,
    pub(crate) recv_cq: CqId,
    pub(crate) srq: Option<SrqId>,
}

/// What `ibv_query_qp` must report for a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpView {
    /// Current state.
    pub state: QpState,
    /// The stored attributes that were set, other fields zero.
    pub stored: QpAttr,
    /// Which mask bits set them.
    pub set: M,
    /// The init attributes, with the actual caps.
    pub init: QpInitAttr,
    /// QP number.
    pub qp_num: u32,
}

impl Model {
    /// `ibv_create_qp`: the type first (RC, UC, UD; the other values of
    /// `enum ibv_qp_type` are EOPNOTSUPP, other numbers EINVAL), then the objects, the UC + SRQ combination and the caps
    /// (EINVAL). Returns the type and the actual caps: as requested, except
    /// that the send WR's room is rxe's (inline data at least 16 bytes per
    /// send SGE, SGEs as many as the room holds) and that with an SRQ the
    /// receive caps are ignored and read 0.
    pub fn check_create_qp(&self, pd: PdId, init: &QpInitAttr) -> Outcome<(QpType, QpCap)> {
        let other = matches!(init.qp_type, 8..=10 | 0xff);
        let ty = type_from_raw(init.qp_type).ok_or(if other { EOPNOTSUPP } else { EINVAL })?;
        require(self.pds.contains(&pd), EINVAL)?;
        require(self.cqs.contains_key(&init.send_cq), EINVAL)?;
        require(self.cqs.contains_key(&init.recv_cq), EINVAL)?;
        if let Some(srq) = init.srq {
            require(self.srqs.contains_key(&srq), EINVAL)?;
            require(ty != QpType::Uc, EINVAL)?;
        }
        let c = init.cap;
        require(
            c.max_send_wr <= MAX_QP_WR && c.max_send_sge <= MAX_SGE,
            EINVAL,
        )?;
        require(c.max_inline_data <= MAX_INLINE_DATA, EINVAL)?;
        // rxe's send WR room: inline data gets 16 bytes per send SGE at
        // least, and the SGEs as many as that room holds.
        let room =
            (c.max_send_sge * 16).clamp(c.max_inline_data, MAX_INLINE_DATA.max(c.max_inline_data));
        let c = QpCap {
            max_inline_data: room,
            max_send_sge: c.max_send_sge.max((room / 16).min(MAX_SGE)),
            ..c
        };
        if init.srq.is_some() {
            return Ok((
                ty,
                QpCap {
                    max_recv_wr: 0,
                    max_recv_sge: 0,
                    ..c
                },
            ));
        }
        require(
            c.max_recv_wr <= MAX_QP_WR && c.max_recv_sge <= MAX_SGE,
            EINVAL,
        )?;
        Ok((ty, c))
    }

    /// Whether the engine may hand out `qp_num` for a new QP: a 24-bit
    /// number other than 0 and 1 (the special QPs) and not in use.
    pub fn qp_num_is_fresh(&self, qp_num: u32) -> bool {
        (2..=QPN_MAX).contains(&qp_num) && self.qps.values().all(|q| q.qp_num != qp_num)
    }

    /// After a successful `ibv_create_qp`: a new QP in RESET.
    pub fn insert_qp(&mut self, id: QpId, qp_num: u32, pd: PdId, init: &QpInitAttr) {
        let (ty, cap) = self
            .check_create_qp(pd, init)
            .expect("insert_qp after a successful create");
        let qp = ModelQp {
            ty,
            state: QpState::Reset,
            pd,
            init: QpInitAttr { cap, ..*init },
            qp_num,
            stored: StoredAttrs::default(),
            rq: VecDeque::new(),
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            srq: init.srq,
        };
        self.qps.insert(id, qp);
    }

    /// `ibv_destroy_qp`: waiting WRs vanish without completions; those in
    /// its CQs stay (as on rxe).
    pub fn destroy_qp(&mut self, id: QpId) -> Outcome {
        self.qps.remove(&id).ok_or(EINVAL)?;
        Ok(())
    }

    /// RESET removes a QP's completions from its CQs (as mlx5 does;
    /// pyverbs relies on it).
    fn forget_completions(&mut self, cq: CqId, qp_num: u32) {
        if let Some(entries) = self.cqs.get_mut(&cq) {
            entries.retain(|wc| wc.qp_num != qp_num);
        }
    }

    /// The QP, if it exists.
    pub fn qp(&self, id: QpId) -> Option<&ModelQp> {
        self.qps.get(&id)
    }

    /// `ibv_query_qp`.
    pub fn query_qp(&self, id: QpId) -> Outcome<QpView> {
        let qp = self.qps.get(&id).ok_or(EINVAL)?;
        Ok(QpView {
            state: qp.state,
            stored: qp.stored.view(),
            set: qp.stored.set(),
            init: qp.init,
            qp_num: qp.qp_num,
        })
    }

    /// `ibv_modify_qp`: all-or-nothing (seed 000, NOTES); on success stores
    /// the named attributes, moves the state and applies its side effects.
    pub fn modify_qp(&mut self, id: QpId, attr: &QpAttr, mask: M) -> Outcome {
        let qp = self.qps.get(&id).ok_or(EINVAL)?;
        let next = self.check_modify(qp, attr, mask)?;
        let qp = self.qps.get_mut(&id).expect("checked above");
        qp.stored.store(attr, mask);
        let prev = std::mem::replace(&mut qp.state, next);
        if mask.contains(M::STATE) {
            // SQ_DRAINED is asked for by the RTS->SQD call itself (mlx5).
            let notify = mask.contains(M::EN_SQD_ASYNC_NOTIFY) && attr.en_sqd_async_notify != 0;
            self.enter_state(id, prev, next, notify);
        }
        Ok(())
    }

    /// The state the QP moves to, or the errno.
    fn check_modify(&self, qp: &ModelQp, attr: &QpAttr, mask: M) -> Outcome<QpState> {
        require(mask.bits() & !MODIFY_MASK_BITS == 0, EOPNOTSUPP)?;
        if mask.contains(M::AV) {
            sgid_check(&attr.ah_attr)?;
        }
        if mask.contains(M::CUR_STATE) {
            require(state_from_raw(attr.cur_qp_state) == Some(qp.state), EINVAL)?;
        }
        // Without IBV_QP_STATE the call is the transition to the same state.
        let next = match mask.contains(M::STATE) {
            true => state_from_raw(attr.qp_state).ok_or(EINVAL)?,
            false => qp.state,
        };
        let rule = self.table.rule(qp.ty, qp.state, next).ok_or(EINVAL)?;
        require(mask.contains(rule.required), EINVAL)?;
        require(rule.allowed().contains(mask), EINVAL)?;
        check_values(attr, mask)?;
        Ok(next)
    }

    /// Side effects of a modify that named IBV_QP_STATE (`drain_notify`:
    /// it asked for SQ_DRAINED).
    fn enter_state(&mut self, id: QpId, prev: QpState, next: QpState, drain_notify: bool) {
        let qp = self.qps.get_mut(&id).expect("modified QP exists");
        match next {
            QpState::Reset => {
                qp.rq.clear();
                let (scq, rcq, qp_num) = (qp.send_cq, qp.recv_cq, qp.qp_num);
                self.forget_completions(scq, qp_num);
                self.forget_completions(rcq, qp_num);
            }
            QpState::Err if prev != QpState::Err => self.flush(id),
            QpState::Sqd if prev == QpState::Rts && drain_notify => {
                // Nothing is ever in flight on the send queue, so it is
                // drained the moment SQD is entered.
                self.events.push_back(AsyncEvent::SqDrained(id));
            }
            _ => {}
        }
    }

    /// Entering ERR: every waiting receive WR completes with WR_FLUSH_ERR in
    /// posting order; an SRQ-attached QP raises LAST_WQE_REACHED (IBTA vol.
    /// 1 11.6.3).
    fn flush(&mut self, id: QpId) {
        let qp = self.qps.get_mut(&id).expect("flushed QP exists");
        let (cq, qp_num, has_srq) = (qp.recv_cq, qp.qp_num, qp.srq.is_some());
        let wr_ids: Vec<u64> = qp.rq.drain(..).collect();
        for wr_id in wr_ids {
            self.complete(cq, flushed_recv(wr_id, qp_num));
        }
        if has_srq {
            self.events.push_back(AsyncEvent::QpLastWqeReached(id));
        }
    }
}

/// The completion of a flushed receive WR: status and opcode set, nothing
/// transferred.
pub(crate) fn flushed_recv(wr_id: u64, qp_num: u32) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        status: WcStatus::WrFlushErr,
        opcode: WcOpcode::Recv,
        vendor_err: 0,
        byte_len: 0,
        imm_data_or_inv_rkey: 0,
        qp_num,
        src_qp: 0,
        wc_flags: 0,
        pkey_index: 0,
        sl: 0,
    }
}
