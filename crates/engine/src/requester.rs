//! The requester: turns send WRs into request packets.
//!
//! Started WRs move from the QP's send queue into `inflight`, where each
//! owns a fixed PSN range. Transmission walks `inflight` from `send_idx`;
//! a go-back-N resend only moves `send_idx` and the packet cursors back.
//! How much may be in flight is flow_control.rs; what comes back, and the
//! completions, are the completer's (completer.rs): RC WRs complete when
//! acknowledged (SEND, WRITE) or answered (READ, atomics); UC and UD WRs
//! complete once their last packet is out. WRs always complete in posting
//! order.

use crate::ctx::Ctx;
use crate::early_go_back::EarlyGoBack;
use crate::gid::Gid;
use crate::loss_window::LossWindow;
use crate::memory::HostMemory;
use crate::mr_table::{sge_total, LocalAccessError};
use crate::pacing::Pacer;
use crate::qp_attr::QpAttr;
use crate::qp_state::{QpState, QpType};
use crate::rnr_probe::RnrProbe;
use crate::send_side::SendSide;
use crate::time::Nanos;
use crate::transmit::{emit, EmitError, PacketSink, Transmit};
use crate::wc::WcStatus;
use crate::wr::{send_flags, send_opcode, SendWqe};
use softverbs_wire::{
    AtomicEth, Bth, Deth, ExtHeaders, Ieth, ImmDt, OpKind, Opcode, PacketBuilder, Position, Psn,
    Qpn, Reth, Suffix, Transport,
};
use std::collections::VecDeque;

use crate::flow_control::MAX_UNACKED_PSNS;

/// What a send WR does, as the requester sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReqOp {
    Send(Suffix),
    Write(Suffix),
    Read,
    CmpSwap,
    FetchAdd,
    LocalInv,
}

impl ReqOp {
    pub(crate) fn of(opcode: u32) -> ReqOp {
        match opcode {
            send_opcode::SEND_WITH_IMM => ReqOp::Send(Suffix::Imm),
            send_opcode::SEND_WITH_INV => ReqOp::Send(Suffix::Inv),
            send_opcode::RDMA_WRITE => ReqOp::Write(Suffix::None),
            send_opcode::RDMA_WRITE_WITH_IMM => ReqOp::Write(Suffix::Imm),
            send_opcode::RDMA_READ => ReqOp::Read,
            send_opcode::ATOMIC_CMP_AND_SWP => ReqOp::CmpSwap,
            send_opcode::ATOMIC_FETCH_AND_ADD => ReqOp::FetchAdd,
            send_opcode::LOCAL_INV => ReqOp::LocalInv,
            _ => ReqOp::Send(Suffix::None),
        }
    }

    /// READ and atomics need responder resources and are answered with data.
    pub(crate) fn is_rd_atomic(self) -> bool {
        matches!(self, ReqOp::Read | ReqOp::CmpSwap | ReqOp::FetchAdd)
    }
}

/// A started send WR.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub(crate) wqe: SendWqe,
    pub(crate) op: ReqOp,
    pub(crate) first_psn: Psn,
    /// PSNs the WR uses (0 for local operations).
    pub(crate) npkts: u32,
    pub(crate) len: u32,
    /// Next packet to (re)transmit; a READ or atomic request is one packet
    /// covering the PSNs from `resp_pkts` on.
    pub(crate) next_pkt: u32,
    /// READ response packets received, in order.
    pub(crate) resp_pkts: u32,
    /// A READ: the response packet the request last sent asks the
    /// responder to start from (its READ_RESPONSE_FIRST or _ONLY).
    pub(crate) asked_from: u32,
    /// A READ or atomic asked for again from `resp_pkts` after a lost
    /// response, and the highest PSN of its responses sent before that may
    /// still arrive. Those are no new loss: responses ahead of the one
    /// awaited are ignored while their PSNs rise past this one (the stream
    /// from before going on). One at or below it comes from the stream
    /// asked for again, whose first packets were lost in turn.
    pub(crate) asked_again: Option<Psn>,
    /// A READ on the wire: the response packet at which the request last
    /// sent ends. A READ larger than the send window is asked for one
    /// window at a time ([`Qp::read_request_end`]), so that its responses
    /// fit the requester's receive buffer; `npkts` otherwise.
    pub(crate) req_end: u32,
    /// Some packet of the WR was transmitted (so an ACK may cover it).
    pub(crate) sent_once: bool,
    pub(crate) done: bool,
    pub(crate) status: WcStatus,
    /// The WR failed here with this status while WRs before it were still
    /// unanswered: it fails in its turn ([`SendSide::fail_in_turn`]),
    /// unless an ACK covers it first (its packets went out once before a
    /// go-back could not build them again), when it succeeds.
    pub(crate) held: Option<WcStatus>,
    /// A UD datagram of a QP on the same-host path whose destination is
    /// not on this host: it goes out as a packet (`requester_direct.rs`).
    pub(crate) wire: bool,
}

impl InFlight {
    pub(crate) fn last_psn(&self) -> Psn {
        self.first_psn.wrapping_add(self.npkts.saturating_sub(1))
    }

    pub(crate) fn contains(&self, psn: Psn) -> bool {
        let d = self.first_psn.distance(psn);
        d >= 0 && (d as u32) < self.npkts
    }

    pub(crate) fn all_sent(&self) -> bool {
        self.next_pkt >= self.npkts
    }

    /// The PSN of its next request packet: a READ or atomic request's is
    /// that of the first response it asks for.
    pub(crate) fn next_psn(&self) -> Psn {
        let k = if self.op.is_rd_atomic() {
            self.resp_pkts
        } else {
            self.next_pkt
        };
        self.first_psn.wrapping_add(k)
    }

    /// A READ or atomic: the PSN of the last response its request asked
    /// for (the end of the part asked for, for a READ asked in parts).
    pub(crate) fn part_end(&self) -> Psn {
        self.first_psn.wrapping_add(self.req_end.max(1) - 1)
    }
}

/// Requester state of a QP.
#[derive(Debug, Default)]
pub(crate) struct Requester {
    pub(crate) inflight: VecDeque<InFlight>,
    pub(crate) next_psn: Psn,
    pub(crate) send_idx: usize,
    pub(crate) retry_left: u8,
    pub(crate) rnr_left: u8,
    pub(crate) retransmit_at: Option<Nanos>,
    pub(crate) rnr_resume: Option<(Nanos, Psn)>,
    pub(crate) rd_atomic: u32,
    pub(crate) since_ack_req: u32,
    /// The last PSN the responder is known to have received.
    pub(crate) acked: Psn,
    /// The PSN after every one sent so far: a packet before it is sent
    /// again.
    pub(crate) sent_end: Psn,
    /// Request packets sent again (go-back-N after a loss, a timeout or
    /// an RNR wait), for diagnostics.
    pub(crate) resent: u64,
    /// A go-back (after a PSN sequence NAK, a gap in READ responses or a
    /// local ACK timeout) is under way: further NAKs and gaps are ignored
    /// until the requester makes progress (as rxe does), so a burst of
    /// them for one loss, or responses sent before the go-back arriving
    /// after it, cost one retry.
    pub(crate) retrying: bool,
    /// Packets the QP may keep unacknowledged since its last loss, when
    /// fewer than the send window (`loss_window.rs`).
    pub(crate) loss: LossWindow,
    /// The round trip, and going back before the local ACK timeout
    /// (`early_go_back.rs`; on the wire only).
    pub(crate) early: EarlyGoBack,
    /// After an RNR wait, the first packet sent again goes alone until
    /// answered (`rnr_probe.rs`; on the wire only).
    pub(crate) probe: RnrProbe,
    /// A UC or UD QP told of congestion sends at a capped rate
    /// (`pacing.rs`).
    pub(crate) pacer: Pacer,
    /// Raise IBV_EVENT_SQ_DRAINED once the QP in SQD has nothing in flight.
    pub(crate) drain_notify: bool,
    /// A WR in flight is `held`: nothing after it is sent or started.
    pub(crate) holding: bool,
    /// Started (RTR->RTS) since the QP was created or reset.
    started: bool,
    /// Same-host path: the operation handed out and not yet answered
    /// (its first PSN); one at a time, so operations execute in order.
    pub(crate) direct_pending: Option<Psn>,
    /// Same-host path: an operation was dropped; nothing more is handed
    /// out until the retransmission timer goes back to it, as after a
    /// lost packet (later operations must not overtake it).
    pub(crate) direct_stalled: bool,
}

impl Requester {
    /// Forgets everything, as a new QP's requester, but keeps the room
    /// taken for the WRs in flight (`room.rs`).
    pub(crate) fn start_over(&mut self) {
        self.start_from(Requester::default());
    }

    /// Becomes `fresh` with this requester's in-flight room: every way of
    /// starting again goes through here, so the room taken when the QP
    /// was created lasts its whole life (a requester rebuilt from the
    /// default had none, and grew it, fallibly no more, as it sent).
    fn start_from(&mut self, fresh: Requester) {
        let mut inflight = std::mem::take(&mut self.inflight);
        inflight.clear();
        *self = Requester { inflight, ..fresh };
    }

    /// Starts sending from `sq_psn` with full retry budgets (RTR->RTS).
    pub(crate) fn start(&mut self, sq_psn: u32, retry_cnt: u8, rnr_retry: u8) {
        self.start_from(Requester {
            next_psn: Psn::new_masked(sq_psn),
            acked: Psn::new_masked(sq_psn).wrapping_sub(1),
            sent_end: Psn::new_masked(sq_psn),
            resent: self.resent,
            retry_left: retry_cnt,
            rnr_left: rnr_retry,
            started: true,
            ..Requester::default()
        });
    }

    /// The PSN its next new request packet takes, once started
    /// (`ibv_query_qp`'s `sq_psn`, as rxe and mlx5 report it).
    pub(crate) fn current_psn(&self) -> Option<u32> {
        self.started.then_some(self.next_psn.get())
    }

    /// After a UC/UD send error flushed every WR: nothing is in flight,
    /// and sending resumes (SQE -> RTS) from the next PSN, at the rate
    /// the congestion it was told of allows (a WR's error leaves the
    /// path as congested as it was).
    pub(crate) fn restart_after_send_error(&mut self) {
        let pacer = std::mem::take(&mut self.pacer);
        self.start_from(Requester {
            next_psn: self.next_psn,
            acked: self.next_psn.wrapping_sub(1),
            sent_end: self.next_psn,
            resent: self.resent,
            pacer,
            started: true,
            ..Requester::default()
        });
    }

    /// The earliest timer of the requester.
    pub(crate) fn deadline(&self) -> Option<Nanos> {
        let rnr = self.rnr_resume.map(|(at, _)| at);
        [
            self.retransmit_at,
            rnr,
            self.early.due_at(),
            self.pacer.deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether a send WR is still in progress (`sq_draining`).
    pub(crate) fn busy(&self) -> bool {
        !self.inflight.is_empty()
    }

    /// Moves transmission back so that `psn` is sent next (go-back-N).
    pub(crate) fn go_back(&mut self, psn: Psn) {
        self.early.went_back();
        let Some(idx) = self
            .inflight
            .iter()
            .position(|e| !e.done && e.contains(psn))
        else {
            return;
        };
        self.send_idx = self.send_idx.min(idx);
        for (i, e) in self.inflight.iter_mut().enumerate().skip(idx) {
            if e.done {
                continue;
            }
            e.asked_again = e.op.is_rd_atomic().then(|| e.part_end());
            e.next_pkt = match e.op {
                _ if e.op.is_rd_atomic() => 0,
                _ if i == idx => e.first_psn.distance(psn) as u32,
                _ => 0,
            };
        }
    }

    /// Asks again for the READ or atomic `idx` alone, from its first
    /// missing response, after its responses from there on were lost;
    /// `stale` is the highest PSN of its responses from before that may
    /// still arrive. The later WRs stay as they are: their responses,
    /// arriving whole, are kept (go-back-N would ask again for every one
    /// of them).
    pub(crate) fn ask_again(&mut self, idx: usize, stale: Psn) {
        self.early.went_back();
        let e = &mut self.inflight[idx];
        e.next_pkt = 0;
        e.asked_again = Some(stale);
        self.send_idx = self.send_idx.min(idx);
    }

    /// Counts the READs and atomics that may still hold a responder
    /// resource: every one from the oldest unanswered on, answered or not.
    /// A later READ answered while an earlier one waits for a response
    /// asked again does not free its slot: the responder serves a repeated
    /// request from a resource of its last `max_dest_rd_atomic` requests
    /// (rxe drops one whose resource is gone), so no more than
    /// `max_rd_atomic` may follow the oldest unanswered.
    pub(crate) fn recount_rd_atomic(&mut self) {
        self.rd_atomic = self
            .inflight
            .iter()
            .filter(|e| e.op.is_rd_atomic())
            .skip_while(|e| e.done)
            .count() as u32;
    }

    /// The oldest PSN sent and not known to have arrived: within a
    /// message, PSNs up to `acked` did (a NAK or ACK said so), so a
    /// timeout resends only the rest.
    pub(crate) fn oldest_unacked(&self) -> Option<Psn> {
        let e = self.inflight.iter().find(|e| !e.done && e.npkts > 0)?;
        if e.op.is_rd_atomic() {
            return Some(e.first_psn.wrapping_add(e.resp_pkts));
        }
        let next = self.acked.wrapping_add(1);
        Some(if e.contains(next) { next } else { e.first_psn })
    }
}

/// A request packet written, and whether it asks for an ACK (which ends
/// its QP's turn, `schedule.rs`).
pub(crate) struct SentRequest {
    pub(crate) transmit: Transmit,
    pub(crate) asked_ack: bool,
}

/// One request packet ready to be written: its headers, and which bytes
/// of the WR's message it carries.
struct Request {
    bth: Bth,
    ext: ExtHeaders,
    payload_offset: u64,
    payload_len: usize,
}

impl SendSide<'_> {
    /// Writes the next request packet into `sink`; `None` if the
    /// requester has nothing to send now.
    pub(crate) fn transmit(
        &mut self,
        ctx: &mut Ctx<'_>,
        now: Nanos,
        mem: &dyn HostMemory,
        sink: &mut dyn PacketSink,
    ) -> Option<SentRequest> {
        if !matches!(*self.state, QpState::Rts | QpState::Sqd) || self.req.rnr_resume.is_some() {
            return None;
        }
        let idx = self.next_to_send(ctx)?;
        if self.req.inflight[idx].held.is_some() {
            return None;
        }
        if self.req.probe.holds(self.req.inflight[idx].next_psn()) {
            return None;
        }
        if !self.within_window(ctx, idx) {
            return None;
        }
        let paced = self.qp_type != QpType::Rc;
        if paced && self.req.pacer.hold(now).is_some() {
            return None;
        }
        let Some(path) = request_path(self, ctx, idx) else {
            self.fail_in_turn(ctx, idx, WcStatus::LocQpOpErr);
            return None;
        };
        match self.build_request(ctx, idx, mem, path, sink) {
            Ok(sent) => {
                self.after_transmit(ctx, idx, now, sent.asked_ack);
                if paced {
                    self.req.pacer.sent(now, sent.transmit.len);
                }
                Some(sent)
            }
            Err(status) => {
                self.fail_in_turn(ctx, idx, status);
                None
            }
        }
    }

    /// WR `idx` failed here (a local protection or length error, no path,
    /// an invalidation refused): it fails now if every WR before it has
    /// completed, and is held otherwise, nothing after it sent or started,
    /// until they have ([`SendSide::retire`] fails it at the head). So the
    /// WRs before it, which the peer executes, complete as they end, not
    /// flushed, and the failed WR's is the first error completion, as
    /// rxe's completer meets an errored WQE only at the head of its queue.
    pub(crate) fn fail_in_turn(&mut self, ctx: &mut Ctx<'_>, idx: usize, status: WcStatus) {
        if self.req.inflight.iter().take(idx).all(|e| e.done) {
            self.fail_requester(ctx, idx, status);
            return;
        }
        self.req.inflight[idx].held = Some(status);
        self.req.holding = true;
    }

    /// The started WR with something left to send, starting the next
    /// posted one if the rules allow; `None` if there is none.
    pub(crate) fn next_to_send(&mut self, ctx: &mut Ctx<'_>) -> Option<usize> {
        loop {
            if self.req.send_idx >= self.req.inflight.len() {
                if !self.start_next(ctx) {
                    return None;
                }
                continue;
            }
            let entry = &self.req.inflight[self.req.send_idx];
            if entry.op == ReqOp::Read
                && !entry.done
                && entry.all_sent()
                && entry.req_end < entry.npkts
            {
                // Its next part is asked for once this part is in; later
                // WRs' PSNs come after all of its responses, so they wait.
                return None;
            }
            if entry.done || entry.all_sent() {
                self.req.send_idx += 1;
                continue;
            }
            return Some(self.req.send_idx);
        }
    }

    /// Starts the next posted WR if the rules allow: only in RTS, within
    /// the PSN window, after a fence, and within max_rd_atomic.
    pub(crate) fn start_next(&mut self, ctx: &mut Ctx<'_>) -> bool {
        if *self.state != QpState::Rts || self.req.holding {
            return false;
        }
        let Some(wqe) = self.sq.front() else {
            return false;
        };
        let op = ReqOp::of(wqe.opcode);
        let req = &self.req;
        if let Some(oldest) = req.oldest_unacked() {
            if oldest.distance(req.next_psn) >= MAX_UNACKED_PSNS {
                return false;
            }
        }
        if wqe.send_flags & send_flags::FENCE != 0 && req.rd_atomic > 0 {
            return false;
        }
        if op.is_rd_atomic() && req.rd_atomic >= u32::from(self.attr.max_rd_atomic).max(1) {
            return false;
        }
        let wqe = self.sq.pop_front().expect("front checked");
        let entry = self.new_inflight(wqe, op);
        if op == ReqOp::LocalInv {
            self.local_invalidate(ctx, entry);
            return true;
        }
        if self.qp_type == QpType::Ud && entry.len > self.mtu() {
            self.pass_over(ctx, entry);
            return true;
        }
        self.req.next_psn = self.req.next_psn.wrapping_add(entry.npkts);
        if op.is_rd_atomic() {
            self.req.rd_atomic += 1;
        }
        self.req.inflight.push_back(entry);
        true
    }

    fn new_inflight(&self, wqe: SendWqe, op: ReqOp) -> InFlight {
        let len = if wqe.send_flags & send_flags::INLINE != 0 {
            wqe.inline_data.len() as u32
        } else {
            sge_total(&wqe.sg_list) as u32
        };
        let mtu = self.mtu();
        let npkts = match op {
            ReqOp::LocalInv => 0,
            ReqOp::CmpSwap | ReqOp::FetchAdd => 1,
            _ => len.div_ceil(mtu).max(1),
        };
        InFlight {
            wqe,
            op,
            first_psn: self.req.next_psn,
            npkts,
            len,
            next_pkt: 0,
            resp_pkts: 0,
            asked_from: 0,
            asked_again: None,
            req_end: npkts,
            sent_once: false,
            done: false,
            status: WcStatus::Success,
            held: None,
            wire: false,
        }
    }

    /// LOCAL_INV runs when it is reached, in order, and completes at once.
    /// A key that cannot be invalidated (unknown, of another PD, or an
    /// ordinary MR: every MR here) is a local QP operation error, as rxe's
    /// `rxe_do_local_ops` reports every failed invalidation; the QP goes to
    /// the error state once the WRs before it have completed.
    fn local_invalidate(&mut self, ctx: &mut Ctx<'_>, mut entry: InFlight) {
        let key = entry.wqe.imm_data_or_inv_rkey;
        let ours = ctx.mrs.by_key(key).is_some_and(|(_, mr)| mr.pd == self.pd);
        let invalidated = ours && ctx.mrs.invalidatable(key);
        entry.done = invalidated;
        self.req.inflight.push_back(entry);
        if invalidated {
            self.retire(ctx);
        } else {
            let idx = self.req.inflight.len() - 1;
            self.fail_in_turn(ctx, idx, WcStatus::LocQpOpErr);
        }
    }

    /// A UD message longer than the MTU: no packet and no error (IBTA
    /// C10-93.1.1), so the WR completes with success, in its turn, having
    /// sent nothing (rxe: "fake a successful UD send").
    fn pass_over(&mut self, ctx: &mut Ctx<'_>, mut entry: InFlight) {
        entry.done = true;
        self.req.inflight.push_back(entry);
        self.retire(ctx);
    }

    /// Bookkeeping after a packet of entry `idx` went out (`asked_ack`:
    /// it asked for an ACK).
    fn after_transmit(&mut self, ctx: &mut Ctx<'_>, idx: usize, now: Nanos, asked_ack: bool) {
        let reliable = self.qp_type == QpType::Rc;
        let read_end = self.read_request_end(ctx, &self.req.inflight[idx]);
        let entry = &mut self.req.inflight[idx];
        if entry.op == ReqOp::Read {
            entry.req_end = read_end;
            entry.asked_from = entry.resp_pkts;
        }
        let psn = entry.next_psn();
        let end = if entry.op.is_rd_atomic() {
            entry.first_psn.wrapping_add(entry.req_end)
        } else {
            psn.wrapping_add(1)
        };
        if reliable {
            self.req.probe.sent(psn);
        }
        if psn.distance(self.req.sent_end) > 0 {
            self.req.resent += 1;
        } else {
            self.req.sent_end = end;
            if asked_ack {
                self.req.early.sent_ack_request(psn, now);
            }
        }
        entry.sent_once = true;
        entry.next_pkt = if entry.op.is_rd_atomic() {
            entry.npkts
        } else {
            entry.next_pkt + 1
        };
        if !reliable && entry.all_sent() {
            entry.done = true;
            self.retire(ctx);
            return;
        }
        if reliable && self.req.retransmit_at.is_none() {
            self.arm_retransmit_timer(now);
        }
    }

    /// Writes the packet `next_pkt` of entry `idx` into `sink`: the
    /// headers, then the payload gathered from the WR's memory straight
    /// into its place (no staging copy).
    fn build_request(
        &mut self,
        ctx: &Ctx<'_>,
        idx: usize,
        mem: &dyn HostMemory,
        path: Path,
        sink: &mut dyn PacketSink,
    ) -> Result<SentRequest, WcStatus> {
        let request = self.plan_request(ctx, idx)?;
        let asked_ack = request.bth.ack_req;
        let builder = PacketBuilder {
            bth: request.bth,
            ext: request.ext,
            payload: &[],
        };
        let e = &self.req.inflight[idx];
        let fill = |payload: &mut [u8], landed: &mut dyn FnMut(&[u8])| {
            gather_payload(
                ctx,
                self.pd,
                e,
                request.payload_offset,
                mem,
                payload,
                landed,
            )
        };
        let transmit =
            emit(sink, path, &builder, request.payload_len, fill).map_err(|e| match e {
                EmitError::Build => WcStatus::GeneralErr,
                EmitError::Fill(status) => status,
            })?;
        Ok(SentRequest {
            transmit,
            asked_ack,
        })
    }

    fn plan_request(&mut self, ctx: &Ctx<'_>, idx: usize) -> Result<Request, WcStatus> {
        let mtu = self.mtu();
        let transport = transport_of(self.qp_type);
        let e = &self.req.inflight[idx];
        let k = e.next_pkt;
        let (kind, suffix) = match e.op {
            ReqOp::Send(s) => (OpKind::Send, s),
            ReqOp::Write(s) => (OpKind::Write, s),
            ReqOp::Read => (OpKind::ReadRequest, Suffix::None),
            ReqOp::CmpSwap => (OpKind::CompareSwap, Suffix::None),
            ReqOp::FetchAdd => (OpKind::FetchAdd, Suffix::None),
            ReqOp::LocalInv => return Err(WcStatus::GeneralErr),
        };
        let position = position_of(k, e.npkts, e.op.is_rd_atomic());
        let last = matches!(position, Position::Last | Position::Only);
        let suffix = if last { suffix } else { Suffix::None };
        let opcode =
            Opcode::compose(transport, kind, position, suffix).ok_or(WcStatus::LocQpOpErr)?;
        let psn = e.next_psn();
        let mut ext = ExtHeaders::default();
        let (mut payload_offset, mut payload_len) = (0, 0);
        match e.op {
            ReqOp::Send(_) | ReqOp::Write(_) => {
                let offset = k * mtu;
                payload_len = (e.len - offset).min(mtu) as usize;
                if matches!(e.op, ReqOp::Write(_))
                    && matches!(position, Position::First | Position::Only)
                {
                    ext.reth = Some(Reth {
                        va: e.wqe.rdma.remote_addr,
                        rkey: e.wqe.rdma.rkey,
                        dma_len: e.len,
                    });
                }
                payload_offset = u64::from(offset);
            }
            ReqOp::Read => {
                let offset = e.resp_pkts * mtu;
                let end = self.read_request_end(ctx, e).saturating_mul(mtu).min(e.len);
                ext.reth = Some(Reth {
                    va: e.wqe.rdma.remote_addr.wrapping_add(u64::from(offset)),
                    rkey: e.wqe.rdma.rkey,
                    dma_len: end - offset.min(end),
                });
            }
            ReqOp::CmpSwap | ReqOp::FetchAdd => {
                let a = e.wqe.atomic;
                let (swap_add, compare) = if e.op == ReqOp::CmpSwap {
                    (a.swap, a.compare_add)
                } else {
                    (a.compare_add, 0)
                };
                ext.atomic_eth = Some(AtomicEth {
                    va: a.remote_addr,
                    rkey: a.rkey,
                    swap_add,
                    compare,
                });
            }
            ReqOp::LocalInv => {}
        }
        if last && suffix == Suffix::Imm {
            ext.imm_dt = Some(ImmDt {
                imm: e.wqe.imm_data_or_inv_rkey,
            });
        }
        if last && suffix == Suffix::Inv {
            ext.ieth = Some(Ieth {
                rkey: e.wqe.imm_data_or_inv_rkey,
            });
        }
        let dest_qp = self.dest_qpn_of(e);
        if self.qp_type == QpType::Ud {
            ext.deth = Some(self.deth_of(e));
        }
        let solicited = last && e.wqe.send_flags & send_flags::SOLICITED != 0;
        let first_sending = psn.distance(self.req.sent_end) <= 0;
        let ack_req = self.qp_type == QpType::Rc
            && (last
                || self.req.probe.is_probe(psn)
                || self.req.since_ack_req + 1 >= self.ack_req_interval(ctx)
                || (first_sending && self.fills_the_budget(ctx)));
        // Saturating: UC and UD never ask, and count on forever.
        self.req.since_ack_req = if ack_req {
            0
        } else {
            self.req.since_ack_req.saturating_add(1)
        };
        let mut bth = Bth::new(opcode, Qpn::new_masked(dest_qp), psn);
        bth.solicited = solicited;
        bth.ack_req = ack_req;
        Ok(Request {
            bth,
            ext,
            payload_offset,
            payload_len,
        })
    }

    /// The QP a request goes to. A UD work request's `remote_qpn` is
    /// taken to its low 24 bits, as the BTH carries it (rxe masks it the
    /// same way), so both paths deliver where the wire would.
    pub(crate) fn dest_qpn_of(&self, e: &InFlight) -> u32 {
        match (self.qp_type, e.wqe.ud) {
            (QpType::Ud, Some(ud)) => Qpn::new_masked(ud.remote_qpn).get(),
            _ => self.attr.dest_qp_num,
        }
    }

    /// DETH of a UD send: a Q_Key with the high bit set means "use the
    /// QP's own Q_Key" (ibv_post_send(3)).
    pub(crate) fn deth_of(&self, e: &InFlight) -> Deth {
        let wr_qkey = e.wqe.ud.map_or(0, |ud| ud.remote_qkey);
        let qkey = if wr_qkey & 0x8000_0000 != 0 {
            self.attr.qkey
        } else {
            wr_qkey
        };
        Deth {
            qkey,
            src_qp: Qpn::new_masked(self.qp_num),
        }
    }
}

pub(crate) fn transport_of(ty: QpType) -> Transport {
    match ty {
        QpType::Rc => Transport::Rc,
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
    }
}

/// Position of packet `k` of `npkts`; READ and atomic requests are Only.
fn position_of(k: u32, npkts: u32, single: bool) -> Position {
    match (single || npkts <= 1, k == 0, k + 1 >= npkts) {
        (true, _, _) => Position::Only,
        (false, true, _) => Position::First,
        (false, false, true) => Position::Last,
        _ => Position::Middle,
    }
}

/// Copies the payload of one packet, the WR's message from `offset` on,
/// into `out` (its place in the packet).
fn gather_payload(
    ctx: &Ctx<'_>,
    pd: crate::handles::PdId,
    e: &InFlight,
    offset: u64,
    mem: &dyn HostMemory,
    out: &mut [u8],
    landed: &mut dyn FnMut(&[u8]),
) -> Result<(), WcStatus> {
    if e.wqe.send_flags & send_flags::INLINE != 0 {
        let start = offset as usize;
        out.copy_from_slice(&e.wqe.inline_data[start..start + out.len()]);
        landed(out);
        return Ok(());
    }
    ctx.mrs
        .gather(mem, pd, &e.wqe.sg_list, offset, out, landed)
        .map_err(local_status)
}

/// Where a packet goes: the GIDs it leaves from and goes to, and the
/// traffic class of its IP header (the address vector's GRH
/// `traffic_class`, the IPv4 TOS or IPv6 traffic class, as rxe and the
/// NICs send it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Path {
    pub(crate) gids: (Gid, Gid),
    pub(crate) traffic_class: u8,
}

/// The path of a request: the QP's path, or for UD the WR's address
/// handle (which must still exist).
pub(crate) fn request_path(qp: &SendSide<'_>, ctx: &Ctx<'_>, idx: usize) -> Option<Path> {
    let av = match qp.qp_type {
        QpType::Ud => ctx.ahs.get(qp.req.inflight.get(idx)?.wqe.ud?.ah)?.attr,
        _ => qp.attr.ah_attr,
    };
    let port = if qp.qp_type == QpType::Ud {
        qp.attr.port_num
    } else {
        av.port_num
    };
    let sgid = ctx.config.gid(port, u32::from(av.grh.sgid_index))?;
    Some(Path {
        gids: (sgid, av.grh.dgid),
        traffic_class: av.grh.traffic_class,
    })
}

/// Source and destination GIDs of a response: back along the QP's path
/// (`attr`, the QP's attributes).
pub(crate) fn response_gids(attr: &QpAttr, ctx: &Ctx<'_>) -> Option<(Gid, Gid)> {
    response_path(attr, ctx).map(|path| path.gids)
}

/// The path of a response ([`response_gids`], and the traffic class of
/// the QP's path, as rxe's responder sends with).
pub(crate) fn response_path(attr: &QpAttr, ctx: &Ctx<'_>) -> Option<Path> {
    let av = attr.ah_attr;
    let sgid = ctx.config.gid(av.port_num, u32::from(av.grh.sgid_index))?;
    Some(Path {
        gids: (sgid, av.grh.dgid),
        traffic_class: av.grh.traffic_class,
    })
}

/// The completion status of a local access error.
pub(crate) fn local_status(err: LocalAccessError) -> WcStatus {
    match err {
        LocalAccessError::Protection => WcStatus::LocProtErr,
        LocalAccessError::Length => WcStatus::LocLenErr,
    }
}
