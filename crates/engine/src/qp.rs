//! Queue pairs: creation rules (ibv_create_qp(3), seed 002), the stored
//! attributes `ibv_query_qp` returns (seed 003) and the send and receive
//! queues.

use crate::ctx::Ctx;
use crate::device::DeviceLimits;
use crate::error::{einval, ensure, VerbsResult};
use crate::event::AsyncEvent;
use crate::gid::Gid;
use crate::handles::{CqId, PdId, QpId, SrqId};
use crate::qp_attr::{QpAttr, QpCap, QpInitAttr};
use crate::qp_state::{QpState, QpType};
use crate::recv_queue::RecvQueue;
use crate::requester::Requester;
use crate::responder::Responder;
use crate::wc::{WcOpcode, WorkCompletion};
use crate::wr::SendWqe;
use std::collections::VecDeque;

/// A queue pair.
#[derive(Debug)]
pub(crate) struct Qp {
    pub(crate) id: QpId,
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
    /// Posted send WRs not yet started by the requester.
    pub(crate) sq: VecDeque<SendWqe>,
    pub(crate) rq: RecvQueue,
    /// Bytes per packet of the port (the UD path MTU).
    pub(crate) port_mtu: u32,
    /// The device's least local ACK timeout (`DeviceConfig::min_ack_timeout`).
    pub(crate) min_ack_timeout: crate::time::Nanos,
    pub(crate) req: Requester,
    pub(crate) resp: Responder,
    /// On the same-host path: the requester hands out whole operations
    /// instead of packets (`requester_direct.rs`).
    pub(crate) direct: bool,
    /// On the same-host path, and so is the peer QP (an RC or UC QP's):
    /// nothing of this connection comes on the wire, and a packet that
    /// claims to is forged (or stale) and dropped
    /// ([`crate::Engine::set_peer_direct`]).
    pub(crate) peer_direct: bool,
    /// Which life of its QP number this is: set at creation (the engine
    /// numbers them) and counted up at every RESET (wrapping), so a
    /// same-host peer's fault, which names the incarnation it found,
    /// never fails the QP after a reset, nor a later QP of that number.
    pub(crate) incarnation: u16,
    /// What the context's send budget holds charged to this QP
    /// (`send_budget.rs`); kept through resets, which empty the requester
    /// but not the budget until the next recharge.
    pub(crate) charged: u64,
    /// The (source, destination) GIDs of the last packet found to come
    /// from this connection's peer: a connection's packets repeat them,
    /// so the next ones skip the route comparison (`from_the_peer`).
    /// Forgotten at every `ibv_modify_qp`, which may change the path.
    pub(crate) peer_seen: Option<(Gid, Gid)>,
}

impl Qp {
    /// A new QP in RESET with the given actual caps, its queues' room
    /// taken (`room.rs`): ENOMEM without it.
    pub(crate) fn new(
        id: QpId,
        pd: PdId,
        qp_num: u32,
        qp_type: QpType,
        init: &QpInitAttr,
        cap: QpCap,
        port_mtu: u32,
    ) -> VerbsResult<Qp> {
        let (send_wr, recv_wr) = (cap.max_send_wr as usize, cap.max_recv_wr as usize);
        let recv_wr = if init.srq.is_some() { 0 } else { recv_wr };
        let mut req = Requester::default();
        crate::room::grow(&mut req.inflight, send_wr)?;
        Ok(Qp {
            id,
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
            sq: crate::room::deque(send_wr)?,
            rq: RecvQueue::with_room(recv_wr)?,
            port_mtu,
            min_ack_timeout: 0,
            req,
            resp: Responder::default(),
            direct: false,
            peer_direct: false,
            incarnation: 0,
            charged: 0,
            peer_seen: None,
        })
    }

    /// Send WRs posted and not yet completed.
    pub(crate) fn send_queue_len(&self) -> usize {
        self.sq.len() + self.req.inflight.len()
    }

    /// Enters the error state: every WR still queued or in flight completes
    /// with IBV_WC_WR_FLUSH_ERR, send queue first, each in posting order
    /// (a receive WR a message was being received into is the oldest); an
    /// SRQ-attached QP raises IBV_EVENT_QP_LAST_WQE_REACHED (no more WQEs
    /// will be taken from the SRQ).
    pub(crate) fn enter_error(&mut self, ctx: &mut Ctx<'_>) {
        self.with_send_side(ctx, |side, ctx| side.enter_error(ctx));
    }

    /// The receive half of entering the error state, after the send half
    /// (`SendSide::enter_error`).
    pub(crate) fn flush_receive_side(&mut self, ctx: &mut Ctx<'_>) {
        let receiving = self.resp.take_receive_wqe();
        for wqe in receiving.into_iter().chain(self.rq.drain_all()) {
            ctx.complete(
                self.recv_cq,
                WorkCompletion::flushed(wqe.wr_id, WcOpcode::Recv, self.qp_num),
                false,
            );
        }
        self.resp.stop();
        if self.srq.is_some() {
            ctx.event(AsyncEvent::QpLastWqeReached(self.id));
        }
    }

    /// Back to RESET: queues emptied without completions, transport state
    /// forgotten.
    pub(crate) fn reset(&mut self) {
        self.incarnation = self.incarnation.wrapping_add(1);
        self.sq.clear();
        self.rq.clear();
        self.req.start_over();
        self.resp = Responder::default();
    }

    /// What `ibv_query_qp` returns: every attribute, the current state,
    /// the actual caps, and the PSNs the requester and responder are at
    /// (those set until each starts).
    pub(crate) fn query(&self) -> QpAttr {
        QpAttr {
            qp_state: self.state as u32,
            cur_qp_state: self.state as u32,
            cap: self.cap,
            sq_draining: u8::from(self.state == QpState::Sqd && self.req.busy()),
            sq_psn: self.req.current_psn().unwrap_or(self.attr.sq_psn),
            rq_psn: self.resp.current_psn().unwrap_or(self.attr.rq_psn),
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

/// Path MTU in bytes: the one set for RC/UC (the port's if none was),
/// the port's for UD.
pub(crate) fn path_mtu(qp_type: QpType, attr: &QpAttr, port_mtu: u32) -> u32 {
    match qp_type {
        QpType::Ud => port_mtu,
        _ => crate::mtu::Mtu::from_raw(attr.path_mtu).map_or(port_mtu, |m| m.bytes()),
    }
}

/// Checks requested caps against the device and returns the actual ones
/// (each >= requested, seed 002): as requested, except that a send WR's
/// room serves SGEs and inline data alike, as in rxe (`rxe_init_sq`):
/// `max_inline_data` is at least 16 bytes per send SGE and `max_send_sge`
/// as many SGEs as that room holds (programs such as rdma_xclient post 16
/// inline bytes on a QP created with one SGE and no inline data); and
/// with an SRQ the receive caps are ignored and reported as 0 because the
/// QP has no receive queue of its own.
/// rxe's send WR room: the larger of the SGEs' (16 bytes each) and the
/// inline data's, both reported from it, within the device's limits.
fn send_room(req: &QpCap, limits: &DeviceLimits) -> QpCap {
    let room = req
        .max_inline_data
        .max(req.max_send_sge.saturating_mul(SGE_BYTES))
        .min(limits.max_inline_data.max(req.max_inline_data));
    QpCap {
        max_inline_data: room,
        max_send_sge: req.max_send_sge.max((room / SGE_BYTES).min(limits.max_sge)),
        ..*req
    }
}

/// Bytes of a `struct ib_sge` in a send WR.
const SGE_BYTES: u32 = 16;

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
    let req = &send_room(req, limits);
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
