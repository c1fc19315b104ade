//! The send side of a QP, as the requester and the completer see it.
//!
//! rxe keeps its requester, completer and responder apart; here the
//! requester (`requester.rs`, `requester_direct.rs`), the completer
//! (`completer.rs`) and flow control (`flow_control.rs`) work on a
//! [`SendSide`]: the send queue, the requester's state and the QP's state
//! to change, the QP's identity and attributes to read, and nothing of
//! the receive side or the responder. When a send error takes the whole
//! QP into the error state, the send side does its half (its WRs flushed,
//! the requester reset) and says so in [`SendSide::failed`]; the QP then
//! does the other half ([`Qp::with_send_side`]) before anything else runs.

use crate::ctx::Ctx;
use crate::device::DeviceConfig;
use crate::direct::{DirectOp, DirectOutcome};
use crate::handles::{CqId, PdId, QpId};
use crate::memory::HostMemory;
use crate::qp::Qp;
use crate::qp_attr::QpAttr;
use crate::qp_state::{QpState, QpType};
use crate::requester::{Requester, SentRequest};
use crate::time::Nanos;
use crate::transmit::PacketSink;
use crate::wc::{WcOpcode, WorkCompletion};
use crate::wr::SendWqe;
use softverbs_wire::PacketView;
use std::collections::VecDeque;

/// What the requester and completer may touch of their QP.
#[derive(Debug)]
pub(crate) struct SendSide<'q> {
    pub(crate) req: &'q mut Requester,
    /// Posted send WRs not yet started.
    pub(crate) sq: &'q mut VecDeque<SendWqe>,
    pub(crate) state: &'q mut QpState,
    pub(crate) id: QpId,
    pub(crate) qp_num: u32,
    pub(crate) qp_type: QpType,
    pub(crate) pd: PdId,
    pub(crate) send_cq: CqId,
    pub(crate) attr: &'q QpAttr,
    /// Bytes per packet of the port (the UD path MTU).
    pub(crate) port_mtu: u32,
    /// The device's least local ACK timeout.
    pub(crate) min_ack_timeout: Nanos,
    /// On the same-host path (`requester_direct.rs`).
    pub(crate) direct: bool,
    /// The QP entered the error state: its receive side is to be flushed.
    pub(crate) failed: bool,
}

impl Qp {
    /// Runs `f` on the QP's send side, then, if the send side took the QP
    /// into the error state, flushes its receive side.
    pub(crate) fn with_send_side<R>(
        &mut self,
        ctx: &mut Ctx<'_>,
        f: impl FnOnce(&mut SendSide<'_>, &mut Ctx<'_>) -> R,
    ) -> R {
        let mut side = self.send_side();
        let result = f(&mut side, ctx);
        if side.failed {
            self.flush_receive_side(ctx);
        }
        result
    }

    /// The send side, for work that completes nothing (and so cannot fail
    /// the QP).
    pub(crate) fn send_side(&mut self) -> SendSide<'_> {
        SendSide {
            req: &mut self.req,
            sq: &mut self.sq,
            state: &mut self.state,
            id: self.id,
            qp_num: self.qp_num,
            qp_type: self.qp_type,
            pd: self.pd,
            send_cq: self.send_cq,
            attr: &self.attr,
            port_mtu: self.port_mtu,
            min_ack_timeout: self.min_ack_timeout,
            direct: self.direct,
            failed: false,
        }
    }

    /// A response (ACK, NAK, READ response, atomic ACK) arrived.
    pub(crate) fn requester_receive(
        &mut self,
        ctx: &mut Ctx<'_>,
        now: Nanos,
        pkt: &PacketView<'_>,
        mem: &mut dyn HostMemory,
    ) {
        self.with_send_side(ctx, |side, ctx| side.receive_response(ctx, now, pkt, mem));
    }

    /// The local ACK timer or an RNR wait ended.
    pub(crate) fn requester_timeout(&mut self, ctx: &mut Ctx<'_>, now: Nanos) {
        self.with_send_side(ctx, |side, ctx| side.timeout(ctx, now));
    }

    /// Writes the next request packet into `sink`, if any.
    pub(crate) fn requester_transmit(
        &mut self,
        ctx: &mut Ctx<'_>,
        now: Nanos,
        mem: &dyn HostMemory,
        sink: &mut dyn PacketSink,
    ) -> Option<SentRequest> {
        self.with_send_side(ctx, |side, ctx| side.transmit(ctx, now, mem, sink))
    }

    /// The next whole operation of a same-host QP (`requester_direct.rs`).
    pub(crate) fn direct_next(&mut self, ctx: &mut Ctx<'_>, now: Nanos) -> Option<DirectOp> {
        self.with_send_side(ctx, |side, ctx| side.direct_next(ctx, now))
    }

    /// Whether the next WR of a same-host UD QP goes to the wire.
    pub(crate) fn ud_wire_next(&mut self, ctx: &mut Ctx<'_>) -> bool {
        self.with_send_side(ctx, |side, ctx| side.ud_wire_next(ctx))
    }

    /// The outcome of a same-host operation.
    pub(crate) fn direct_outcome(
        &mut self,
        ctx: &mut Ctx<'_>,
        now: Nanos,
        psn: u32,
        outcome: DirectOutcome,
        mem: &mut dyn HostMemory,
    ) {
        self.with_send_side(ctx, |side, ctx| {
            side.direct_outcome(ctx, now, psn, outcome, mem)
        });
    }

    /// A WR was posted while a dropped same-host operation waits.
    pub(crate) fn direct_probe(&mut self) {
        self.send_side().direct_probe();
    }

    /// Completes the WRs done in posting order.
    pub(crate) fn retire(&mut self, ctx: &mut Ctx<'_>) {
        self.with_send_side(ctx, |side, ctx| side.retire(ctx));
    }

    /// What this QP has in flight, charged to the send budget.
    pub(crate) fn bytes_in_flight(&mut self, config: &DeviceConfig) -> u64 {
        self.send_side().bytes_in_flight(config)
    }
}

impl SendSide<'_> {
    /// The send half of entering the error state: every WR started or
    /// queued completes with IBV_WC_WR_FLUSH_ERR in posting order, and
    /// the requester starts over; [`SendSide::failed`] asks the QP for the
    /// receive half.
    pub(crate) fn enter_error(&mut self, ctx: &mut Ctx<'_>) {
        if *self.state == QpState::Err {
            return;
        }
        *self.state = QpState::Err;
        self.flush_send_queue(ctx);
        self.req.start_over();
        self.failed = true;
    }

    /// A UC or UD send WR failed (IBTA 10.3.1, Send Queue Error): the send
    /// queue is flushed and stops, the receive queue goes on working, and
    /// SQE -> RTS resumes sending from the next PSN.
    pub(crate) fn enter_send_error(&mut self, ctx: &mut Ctx<'_>) {
        *self.state = QpState::Sqe;
        self.flush_send_queue(ctx);
        self.req.restart_after_send_error();
    }

    /// Completes every started and queued send WR with WR_FLUSH_ERR, in
    /// posting order.
    fn flush_send_queue(&mut self, ctx: &mut Ctx<'_>) {
        let qp_num = self.qp_num;
        let flushed = self
            .req
            .inflight
            .drain(..)
            .map(|e| e.wqe)
            .chain(self.sq.drain(..))
            .map(|w| WorkCompletion::flushed(w.wr_id, WcOpcode::of_send(w.opcode), qp_num));
        for wc in flushed {
            ctx.complete(self.send_cq, wc, false);
        }
    }

    /// Path MTU in bytes: the QP's for RC/UC, the port's for UD.
    pub(crate) fn mtu(&self) -> u32 {
        crate::qp::path_mtu(self.qp_type, self.attr, self.port_mtu)
    }
}
