//! Flow control on the wire: how much an RC QP may have in flight. A QP
//! keeps at most a send window of packets unacknowledged, a READ longer
//! than the window is asked for in parts, and what every QP of the context
//! has in flight shares the context's send budget (send_budget.rs), so
//! that a peer's receive buffer sized to the window never overflows
//! (architecture.md, "Nothing is lost for want of room").

use crate::ctx::Ctx;
use crate::device::DeviceConfig;
use crate::loss_window;
use crate::qp_state::QpType;
use crate::requester::InFlight;
use crate::send_side::SendSide;
use softverbs_wire::Psn;

/// Most PSNs a QP keeps unacknowledged before it waits for ACKs.
pub(crate) const MAX_UNACKED_PSNS: i32 = 1024;
/// A request packet asks for an ACK at least this often (and at least four
/// times per send window, so that the window keeps opening).
const ACK_REQ_INTERVAL: u32 = 16;
/// The smallest send window, in packets.
const MIN_WINDOW_PKTS: u32 = loss_window::MIN_PKTS;

impl SendSide<'_> {
    /// Packets an RC QP may have unacknowledged on the wire: the device's
    /// send window in packets of its path MTU, at what each costs the
    /// peer's receive buffer (`packet_cost.rs`).
    pub(crate) fn window_pkts(&self, ctx: &Ctx<'_>) -> u32 {
        (ctx.config.send_window_bytes / self.packet_cost(ctx.config))
            .clamp(MIN_WINDOW_PKTS, MAX_UNACKED_PSNS as u32)
    }

    /// What one packet of this QP's path MTU costs the peer's receive
    /// buffer, the unit of the window and the send budget.
    fn packet_cost(&self, config: &DeviceConfig) -> u32 {
        config.packet_cost.of(self.mtu())
    }

    /// Whether the next packet of entry `idx` may leave: for RC, its PSN
    /// (a READ request's, the first response it asks for) lies within the
    /// send window from the oldest unacknowledged PSN, and the PSNs it
    /// newly puts in flight fit the context's send budget
    /// (`send_budget.rs`; else the QP waits for room, `short_of_room`).
    /// Without this, a peer that the scheduler has not run for a while
    /// finds more in its socket than the buffer holds, and the rest is lost
    /// (then resent after a timeout, and under load retried until
    /// RETRY_EXC_ERR). UC and UD have no acknowledgements and no window.
    pub(crate) fn within_window(&self, ctx: &mut Ctx<'_>, idx: usize) -> bool {
        if self.qp_type != QpType::Rc {
            return true;
        }
        let e = &self.req.inflight[idx];
        let psn = e.next_psn();
        let end = if e.op.is_rd_atomic() {
            e.first_psn.wrapping_add(self.read_request_end(ctx, e))
        } else {
            psn.wrapping_add(1)
        };
        let window = self.loss_limited_window(ctx) as i32;
        let in_window = self
            .req
            .oldest_unacked()
            .is_none_or(|oldest| oldest.distance(psn) < window);
        let opens = self.req.sent_end.distance(end).max(0) as u64;
        let needs = opens * u64::from(self.packet_cost(ctx.config));
        if in_window && needs > ctx.send_room {
            ctx.short_of_room = true;
            return false;
        }
        in_window
    }

    /// The send window, or less after a loss: a go-back resends every
    /// packet in flight after the lost one, so while packets are being
    /// lost fewer in flight waste less (`loss_window.rs`). It holds back
    /// new requests; a READ part already asked for still brings a send
    /// window of responses.
    pub(crate) fn loss_limited_window(&self, ctx: &Ctx<'_>) -> u32 {
        self.req.loss.limit(self.window_pkts(ctx))
    }

    /// A go-back for the loss of `lost`: the loss window halves, once for
    /// the losses of one window.
    pub(crate) fn on_loss(&mut self, ctx: &Ctx<'_>, lost: Psn) {
        let window = self.window_pkts(ctx);
        self.req.loss.on_loss(window, lost, self.req.sent_end);
    }

    /// `newly` more PSNs acknowledged: the loss window grows back.
    pub(crate) fn on_acked(&mut self, ctx: &Ctx<'_>, newly: u32) {
        let window = self.window_pkts(ctx);
        let acked = self.req.acked;
        self.req.loss.on_acked(window, newly, acked);
    }

    /// What this RC QP has in flight, charged to the context's send
    /// budget: its PSNs from the oldest unacknowledged one up to the last
    /// sent (READ responses asked for included), each at its packet cost.
    pub(crate) fn bytes_in_flight(&self, config: &DeviceConfig) -> u64 {
        if self.qp_type != QpType::Rc {
            return 0;
        }
        let pkts = self
            .req
            .oldest_unacked()
            .map_or(0, |oldest| oldest.distance(self.req.sent_end).max(0));
        pkts as u64 * u64::from(self.packet_cost(config))
    }

    /// The response packet at which a READ request sent now for entry `e`
    /// ends: the READ is asked for in parts of one send window, at fixed
    /// boundaries, so a part asked for again ends where it first did and
    /// its responses' FIRST/LAST marks never disagree with a late one.
    pub(crate) fn read_request_end(&self, ctx: &Ctx<'_>, e: &InFlight) -> u32 {
        let window = self.window_pkts(ctx);
        (e.resp_pkts / window + 1)
            .saturating_mul(window)
            .min(e.npkts)
    }

    /// Whether a request packet sent for the first time leaves the
    /// context's send budget too little room for another: it then asks
    /// for an ACK whatever the interval, so that while QPs wait for room
    /// an ACK that frees some is always on its way. Without it, QPs that
    /// each had fewer packets in flight than they send between ACK
    /// requests filled the budget with packets asking for none, and all
    /// waited for the local ACK timeout (perftest `-q 16` with a socket
    /// buffer of Debian's default `rmem_max`). One packet is measured per
    /// call (`Engine::with_qp`), so the room is the room before this one.
    pub(crate) fn fills_the_budget(&self, ctx: &Ctx<'_>) -> bool {
        ctx.send_room < 2 * u64::from(self.packet_cost(ctx.config))
    }

    /// How often, in packets, a request asks for an ACK: at least four
    /// times per window in force, the loss window included, so that a
    /// full window always asks for the ACK that opens it (with ACKs asked
    /// for more rarely than the window allows packets, a small loss window
    /// waited for the local ACK timeout each time it filled).
    pub(crate) fn ack_req_interval(&self, ctx: &Ctx<'_>) -> u32 {
        (self.loss_limited_window(ctx) / 4).clamp(1, ACK_REQ_INTERVAL)
    }
}
