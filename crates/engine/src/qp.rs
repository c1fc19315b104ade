//! Queue pairs: creation rules (ibv_create_qp(3), seed 002), the stored
//! attributes `ibv_query_qp` returns (seed 003) and the send and receive
//! queues.

use crate::device::DeviceLimits;
use crate::error::{einval, ensure, VerbsResult};
use crate::handles::{CqId, PdId, SrqId};
use crate::qp_attr::{QpAttr, QpCap, QpInitAttr};
use crate::qp_state::{QpState, QpType};
use crate::wr::{RecvWqe, SendWqe};
use std::collections::VecDeque;

/// A queue pair.
#[derive(Debug)]
pub(crate) struct Qp {
    pub(crate) qp_num: u32,
    pub(crate) qp_type: QpType,
    pub(crate) pd: PdId,
    pub(crate) send_cq: CqId,
    pub(crate) recv_cq: CqId,
    pub(crate) srq: Option<SrqId>,
    pub(crate) sq_sig_all: bool,
    pub(crate) cap: QpCap,
    pub(crate) state: QpState,
    /// Every attribute as last set by `ibv_modify_qp`; the state fields
    /// are kept in `state`.
    pub(crate) attr: QpAttr,
    pub(crate) sq: VecDeque<SendWqe>,
    pub(crate) rq: VecDeque<RecvWqe>,
}

impl Qp {
    /// A new QP in RESET with the given actual caps.
    pub(crate) fn new(pd: PdId, qp_num: u32, qp_type: QpType, init: &QpInitAttr, cap: QpCap) -> Qp {
        Qp {
            qp_num,
            qp_type,
            pd,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            srq: init.srq,
            sq_sig_all: init.sq_sig_all,
            cap,
            state: QpState::Reset,
            attr: QpAttr::default(),
            sq: VecDeque::new(),
            rq: VecDeque::new(),
        }
    }

    /// What `ibv_query_qp` returns: every attribute, the current state and
    /// the actual caps.
    pub(crate) fn query(&self) -> QpAttr {
        QpAttr {
            qp_state: self.state as u32,
            cur_qp_state: self.state as u32,
            cap: self.cap,
            // The engine has no send WR in progress when it enters SQD
            // (the SQ is drained at once), so the QP is never draining.
            sq_draining: 0,
            ..self.attr
        }
    }

    /// The init attributes `ibv_query_qp` returns.
    pub(crate) fn init_attr(&self) -> QpInitAttr {
        QpInitAttr {
            send_cq: self.send_cq,
            recv_cq: self.recv_cq,
            srq: self.srq,
            cap: self.cap,
            qp_type: self.qp_type as u32,
            sq_sig_all: self.sq_sig_all,
        }
    }
}

/// Checks requested caps against the device and returns the actual ones:
/// each exactly as requested (so each >= requested, seed 002), except that
/// with an SRQ the receive caps are ignored and reported as 0 because the
/// QP has no receive queue of its own.
pub(crate) fn actual_caps(req: &QpCap, has_srq: bool, limits: &DeviceLimits) -> VerbsResult<QpCap> {
    ensure(
        req.max_send_wr <= limits.max_qp_wr,
        einval("max_send_wr above device max_qp_wr"),
    )?;
    ensure(
        req.max_send_sge <= limits.max_sge,
        einval("max_send_sge above device max_sge"),
    )?;
    ensure(
        req.max_inline_data <= limits.max_inline_data,
        einval("max_inline_data above the device limit"),
    )?;
    if has_srq {
        return Ok(QpCap {
            max_recv_wr: 0,
            max_recv_sge: 0,
            ..*req
        });
    }
    ensure(
        req.max_recv_wr <= limits.max_qp_wr,
        einval("max_recv_wr above device max_qp_wr"),
    )?;
    ensure(
        req.max_recv_sge <= limits.max_sge,
        einval("max_recv_sge above device max_sge"),
    )?;
    Ok(*req)
}
