//! Congestion notification: a requester whose packets meet a full queue
//! sends fewer before it overflows.
//!
//! Every sender's window fits the receiver's buffer on its own
//! (`flow_control.rs`), but several senders into one receiver each keep a
//! window in flight, and together they overflow it: the packets lost cost
//! a go-back each. As a RoCE NIC learns of a switch's full queue from the
//! ECN mark the switch leaves, the receiver here learns of its own: the
//! embedder marks a packet that arrived while its receive queue was
//! filling ([`crate::Arrival::marked`]). What a marked packet
//! means depends on who receives it:
//!
//! - a request reaching an RC responder: its requester is told in the
//!   BECN bit of the BTH of the next response the responder sends
//!   (InfiniBand's backward congestion notice; the ICRC leaves the bit
//!   out, so a peer that does not act on it loses nothing);
//! - a response reaching an RC requester (its own READ responses or ACKs
//!   fill its queue), or a response carrying BECN: the requester's loss
//!   window halves, as for a loss but with nothing sent again, once per
//!   window in flight (`loss_window.rs`), as TCP answers ECN's echo
//!   (RFC 3168); and what such a response acknowledges grows no window,
//!   so that while every response tells of congestion the window keeps
//!   halving, to its minimum (growing by a few packets a round trip, an
//!   engine test marking every request held it at 11 to 14 packets of a
//!   32-packet window). A READ's parts are asked for at the send window,
//!   so for READs the smaller window holds back the next part, not the
//!   responses of one asked for.
//!
//! UC and UD have no window to shrink and no responses to carry a
//! notice: a marked UC or UD request is answered with a CNP, which caps
//! its sender's rate (`cnp.rs`, `pacing.rs`).

use crate::ctx::Ctx;
use crate::datapath::Arrival;
use crate::qp_state::QpType;
use crate::recv_side::RecvSide;
use crate::send_side::SendSide;
use softverbs_wire::PacketView;

impl RecvSide<'_> {
    /// A request arrived (`from`: its addresses and traffic class),
    /// marked if the embedder found its queue filling: an RC QP's next
    /// response carries BECN, a UC or UD QP owes its sender a CNP
    /// (`cnp.rs`).
    pub(crate) fn note_congestion(&mut self, ctx: &Ctx<'_>, pkt: &PacketView<'_>, from: &Arrival) {
        if !ctx.congestion {
            return;
        }
        match self.qp_type {
            QpType::Rc => self.resp.becn_due = true,
            QpType::Uc | QpType::Ud => self.owe_notice(ctx, pkt, from),
        }
    }
}

impl SendSide<'_> {
    /// A response arrived: if it was marked here or carries a
    /// responder's BECN, fewer packets go in flight. True if it told of
    /// congestion: what it acknowledges then grows no window.
    pub(crate) fn note_congestion(&mut self, ctx: &Ctx<'_>, pkt: &PacketView<'_>) -> bool {
        let noticed = ctx.congestion || pkt.bth().becn;
        if noticed {
            // The marked packet was sent before this response's PSN: if
            // the window halved after that, this notice is of the same
            // episode.
            self.on_loss(ctx, pkt.psn());
        }
        noticed
    }
}
