//! The receive side of a QP, as the responder sees it.
//!
//! The responder (`responder.rs`) works on a [`RecvSide`]: the responder
//! state and the receive queue to change, the QP's state, identity and
//! attributes to read, and nothing of the send side. A fault that takes
//! the QP into the error state is only noted ([`RecvSide::failed`]): the
//! QP enters it as soon as the responder returns
//! ([`Qp::with_recv_side`]), flushing its send queue before its receive
//! queue as always, and the responder does nothing more in that call.

use crate::ctx::Ctx;
use crate::datapath::Arrival;
use crate::handles::{CqId, PdId, QpId, SrqId};
use crate::memory::HostMemory;
use crate::qp::Qp;
use crate::qp_attr::QpAttr;
use crate::qp_state::{QpState, QpType};
use crate::recv_queue::RecvQueue;
use crate::requester::Path;
use crate::responder::Responder;
use crate::transmit::{PacketSink, Transmit};
use softverbs_wire::PacketView;

/// What the responder may touch of its QP.
#[derive(Debug)]
pub(crate) struct RecvSide<'q> {
    pub(crate) resp: &'q mut Responder,
    pub(crate) rq: &'q mut RecvQueue,
    pub(crate) state: QpState,
    pub(crate) id: QpId,
    pub(crate) qp_num: u32,
    pub(crate) qp_type: QpType,
    pub(crate) pd: PdId,
    pub(crate) recv_cq: CqId,
    pub(crate) srq: Option<SrqId>,
    pub(crate) attr: &'q QpAttr,
    /// Bytes per packet of the port (the UD path MTU).
    pub(crate) port_mtu: u32,
    /// A fault takes the QP into the error state once the responder is
    /// done.
    pub(crate) failed: bool,
}

impl Qp {
    /// Runs `f` on the QP's receive side, then, if the responder met a
    /// fault, enters the error state.
    pub(crate) fn with_recv_side<R>(
        &mut self,
        ctx: &mut Ctx<'_>,
        f: impl FnOnce(&mut RecvSide<'_>, &mut Ctx<'_>) -> R,
    ) -> R {
        let mut side = RecvSide {
            resp: &mut self.resp,
            rq: &mut self.rq,
            state: self.state,
            id: self.id,
            qp_num: self.qp_num,
            qp_type: self.qp_type,
            pd: self.pd,
            recv_cq: self.recv_cq,
            srq: self.srq,
            attr: &self.attr,
            port_mtu: self.port_mtu,
            failed: false,
        };
        let result = f(&mut side, ctx);
        if side.failed {
            self.enter_error(ctx);
        }
        result
    }

    /// Handles a request packet addressed to this QP.
    pub(crate) fn responder_receive(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketView<'_>,
        arrival: Arrival,
        mem: &mut dyn HostMemory,
    ) {
        self.with_recv_side(ctx, |side, ctx| side.receive(ctx, pkt, arrival, mem));
    }

    /// Whether the responder has responses queued.
    pub(crate) fn responder_pending(&self) -> bool {
        self.resp.pending()
    }

    /// Writes the next response packet into `sink`, sent back along the
    /// QP's path (`gids`; without them the response is dropped).
    pub(crate) fn responder_transmit(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &dyn HostMemory,
        path: Option<Path>,
        sink: &mut dyn PacketSink,
    ) -> Option<Transmit> {
        self.with_recv_side(ctx, |side, ctx| side.transmit(ctx, mem, path, sink))
    }
}

impl RecvSide<'_> {
    /// The QP is to enter the error state once the responder returns.
    pub(crate) fn enter_error(&mut self) {
        self.failed = true;
    }

    /// Path MTU in bytes: the QP's for RC/UC, the port's for UD.
    pub(crate) fn mtu(&self) -> u32 {
        crate::qp::path_mtu(self.qp_type, self.attr, self.port_mtu)
    }
}
