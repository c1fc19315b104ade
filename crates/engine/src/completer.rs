//! The completer: what comes back for an RC QP's requests. ACKs and NAKs
//! retire WRs, READ responses and atomic ACKs carry their data, a gap
//! or a sequence NAK sends the requester back (go-back-N), the local ACK
//! and RNR timers retry, and WRs complete in posting order. As rxe keeps
//! `rxe_comp.c` apart from `rxe_req.c`: the requester (requester.rs)
//! turns WRs into packets, this side decides what became of them.

use crate::ctx::Ctx;
use crate::memory::HostMemory;
use crate::qp_state::{QpState, QpType};
use crate::requester::{local_status, InFlight, ReqOp};
use crate::send_side::SendSide;
use crate::time::{ack_timeout, rnr_delay, Nanos};
use crate::wc::{WcOpcode, WcStatus, WorkCompletion};
use softverbs_wire::{NakCode, OpKind, PacketView, Position, Psn, Syndrome};

impl SendSide<'_> {
    /// Handles a response (ACK, NAK, READ response, atomic ACK) of an RC QP.
    pub(crate) fn receive_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        now: Nanos,
        pkt: &PacketView<'_>,
        mem: &mut dyn HostMemory,
    ) {
        if self.qp_type != QpType::Rc || !matches!(*self.state, QpState::Rts | QpState::Sqd) {
            return;
        }
        let noticed = self.note_congestion(ctx, pkt);
        let acked_before = self.req.acked;
        let progress = match pkt.opcode().kind() {
            OpKind::Ack => self.on_ack(ctx, now, pkt),
            kind @ (OpKind::ReadResponse | OpKind::AtomicAck) => {
                match self.answered_request(ctx, pkt) {
                    Some(idx) if kind == OpKind::ReadResponse => {
                        self.on_read_response(ctx, idx, pkt, mem)
                    }
                    Some(idx) => self.on_atomic_ack(ctx, idx, pkt, mem),
                    None => false,
                }
            }
            _ => false,
        };
        if progress && *self.state != QpState::Err {
            let seq_nak = matches!(
                pkt.aeth().map(|a| a.syndrome),
                Some(Syndrome::Nak(NakCode::PsnSequenceError))
            );
            self.req.early.acknowledged(self.req.acked, now);
            self.on_progress(seq_nak);
            if !seq_nak {
                // A READ response moves `acked` only to its request's
                // first PSN: each response counts as one. One that told
                // of congestion grows nothing (`congestion.rs`).
                let newly = acked_before.distance(self.req.acked).max(1);
                self.on_acked(ctx, if noticed { 0 } else { newly as u32 });
            }
        }
        self.retire(ctx);
        self.keep_retransmit_timer(now);
    }

    /// The responder confirmed new PSNs: the retry budgets start again.
    pub(crate) fn on_progress(&mut self, seq_nak: bool) {
        self.req.retrying = seq_nak;
        self.req.retry_left = self.attr.retry_cnt;
        self.req.rnr_left = self.attr.rnr_retry;
        self.req.retransmit_at = None;
        self.req.early.disarm();
    }

    /// While anything sent is unacknowledged a local ACK timeout runs,
    /// except during an RNR wait: waiting for the responder's receive WRs
    /// must not use up transport retries.
    pub(crate) fn keep_retransmit_timer(&mut self, now: Nanos) {
        let waiting = self.req.rnr_resume.is_some();
        if *self.state != QpState::Err
            && self.req.retransmit_at.is_none()
            && !waiting
            && self.has_unacked()
        {
            self.arm_retransmit_timer(now);
        }
    }

    /// Starts the local ACK timeout at `now`, and on the wire the early
    /// go-back before it (`early_go_back.rs`).
    pub(crate) fn arm_retransmit_timer(&mut self, now: Nanos) {
        let timeout = self.local_ack_timeout();
        self.req.retransmit_at = timeout.map(|t| now + t);
        if !self.direct {
            self.req.early.arm(now, timeout);
        }
    }

    /// The local ACK timeout the `timeout` attribute asks for, at least the
    /// device's least (`DeviceConfig::min_ack_timeout`); `None`: never.
    pub(crate) fn local_ack_timeout(&self) -> Option<Nanos> {
        ack_timeout(self.attr.timeout).map(|t| t.max(self.min_ack_timeout))
    }

    /// Whether packets are in flight, so that a missing answer means a
    /// loss. On the wire that is PSNs sent and not acknowledged: a WR
    /// partly sent whose packets are all acknowledged waits for its own
    /// window or the context's send budget, not for an answer, and must
    /// not use up transport retries (as an RNR wait must not). On the
    /// same-host path, an operation handed out and not yet answered.
    fn has_unacked(&self) -> bool {
        if self.direct {
            return self.req.inflight.iter().any(|e| !e.done && e.sent_once);
        }
        self.req
            .oldest_unacked()
            .is_some_and(|oldest| oldest.distance(self.req.sent_end) > 0)
    }

    fn on_ack(&mut self, ctx: &mut Ctx<'_>, now: Nanos, pkt: &PacketView<'_>) -> bool {
        let Some(aeth) = pkt.aeth() else {
            return false;
        };
        let psn = pkt.psn();
        match aeth.syndrome {
            Syndrome::Ack { .. } => self.ack_through(psn),
            Syndrome::RnrNak { timer } => {
                // The PSNs it acknowledges reset the budgets first, so
                // that this RNR NAK is counted against the new budget
                // instead of being undone by the reset.
                if self.ack_through(psn.wrapping_sub(1)) {
                    self.on_progress(false);
                }
                // A late RNR NAK for a PSN already acknowledged is stale
                // (a copy the network duplicated or delayed).
                let stale = self.req.acked.distance(psn) <= 0;
                if !stale && self.req.inflight.iter().any(|e| !e.done && e.contains(psn)) {
                    self.on_rnr_nak(ctx, now, psn, timer);
                }
                false
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                let progress = self.ack_through(psn.wrapping_sub(1));
                let stale = self
                    .req
                    .oldest_unacked()
                    .is_none_or(|o| o.distance(psn) < 0);
                // During an RNR wait the resend is already scheduled.
                let waiting = self.req.rnr_resume.is_some();
                if stale || waiting || (self.req.retrying && !progress) {
                    return progress;
                }
                if !progress && !self.consume_retry(ctx) {
                    return false;
                }
                self.req.go_back(psn);
                self.req.retrying = true;
                ctx.recovery.go_backs_after_gap += 1;
                self.on_loss(ctx, psn);
                progress
            }
            Syndrome::Nak(code) => self.fail_at(ctx, psn, nak_status(code)),
            // rxe's completer takes any other syndrome for a remote
            // operational error.
            Syndrome::Reserved(_) => self.fail_at(ctx, psn, WcStatus::RemOpErr),
        }
    }

    /// A NAK for `psn`: what comes before it is acknowledged, and the
    /// request it names, if still outstanding, fails with `status`.
    fn fail_at(&mut self, ctx: &mut Ctx<'_>, psn: Psn, status: WcStatus) -> bool {
        self.ack_through(psn.wrapping_sub(1));
        if let Some(idx) = self.outstanding_at(psn) {
            self.fail_requester(ctx, idx, status);
        }
        false
    }

    /// The request not yet complete that PSN `psn` belongs to.
    fn outstanding_at(&self, psn: Psn) -> Option<usize> {
        self.req
            .inflight
            .iter()
            .position(|e| !e.done && e.contains(psn))
    }

    /// The READ or atomic a READ response or atomic ACK answers: the
    /// outstanding request its PSN names. `None` for a response for
    /// nothing outstanding (stale, ignored), and for one that cannot be
    /// an answer to that request: of the other kind, for a SEND or WRITE,
    /// or with an AETH that is not an ACK. The request then fails with
    /// IBV_WC_BAD_RESP_ERR, "an unexpected transport layer opcode was
    /// returned by the responder" (ibv_poll_cq(3); rxe fails it too).
    fn answered_request(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketView<'_>) -> Option<usize> {
        let idx = self.outstanding_at(pkt.psn())?;
        let op = self.req.inflight[idx].op;
        let fits = match pkt.opcode().kind() {
            OpKind::ReadResponse => op == ReqOp::Read,
            _ => matches!(op, ReqOp::CmpSwap | ReqOp::FetchAdd),
        };
        let acked = pkt
            .aeth()
            .is_none_or(|a| matches!(a.syndrome, Syndrome::Ack { .. }));
        if fits && acked {
            return Some(idx);
        }
        self.fail_requester(ctx, idx, WcStatus::BadRespErr);
        None
    }

    /// Acknowledges every SEND and WRITE whose PSNs are all at or before
    /// `psn`. A READ or atomic covered by the ACK but not yet answered lost
    /// its responses: it alone is requested again. Returns whether the
    /// requester made progress (newly acknowledged PSNs).
    pub(crate) fn ack_through(&mut self, psn: Psn) -> bool {
        if self.req.next_psn.wrapping_sub(1).distance(psn) > 0 {
            return false; // acknowledges PSNs never sent: ignore
        }
        // PSNs the responder newly confirms are progress even when no WR
        // finishes (the middle of a long message).
        let mut progress = self.req.acked.distance(psn) > 0;
        if progress {
            self.req.acked = psn;
            // The probe lies after what was acknowledged when it began (an
            // RNR NAK for an acknowledged PSN is stale), so only new PSNs
            // can answer it; the ACK of the probe sent again does too.
            self.req.probe.acknowledged(psn);
        }
        for idx in 0..self.req.inflight.len() {
            let e = &mut self.req.inflight[idx];
            if e.done || e.npkts == 0 {
                continue;
            }
            if !e.sent_once || e.last_psn().distance(psn) < 0 {
                break;
            }
            if !e.op.is_rd_atomic() {
                e.done = true;
                progress = true;
            } else if e.asked_again.is_none() {
                // Its responses all came before this ACK or were lost.
                let stale = e.part_end();
                self.req.ask_again(idx, stale);
            }
        }
        progress
    }

    pub(crate) fn on_rnr_nak(&mut self, ctx: &mut Ctx<'_>, now: Nanos, psn: Psn, timer: u8) {
        ctx.recovery.rnr_naks += 1;
        if self.attr.rnr_retry != 7 {
            if self.req.rnr_left == 0 {
                if let Some(idx) = self
                    .req
                    .inflight
                    .iter()
                    .position(|e| !e.done && e.contains(psn))
                {
                    self.fail_requester(ctx, idx, WcStatus::RnrRetryExcErr);
                }
                return;
            }
            self.req.rnr_left -= 1;
        }
        self.req.probe.rnr_nak(psn);
        self.req.go_back(psn);
        self.req.retransmit_at = None;
        self.req.early.disarm();
        self.req.rnr_resume = Some((now + rnr_delay(timer), psn));
    }

    /// Uses one transport retry; on exhaustion fails the oldest unacked WR
    /// with RETRY_EXC_ERR and returns false.
    fn consume_retry(&mut self, ctx: &mut Ctx<'_>) -> bool {
        if self.req.retry_left > 0 {
            self.req.retry_left -= 1;
            return true;
        }
        if let Some(idx) = self
            .req
            .inflight
            .iter()
            .position(|e| !e.done && e.npkts > 0)
        {
            self.fail_requester(ctx, idx, WcStatus::RetryExcErr);
        }
        false
    }

    /// A READ response for READ `idx`.
    fn on_read_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        idx: usize,
        pkt: &PacketView<'_>,
        mem: &mut dyn HostMemory,
    ) -> bool {
        let expected = self.awaited_psn(idx);
        let e = &self.req.inflight[idx];
        if pkt.psn() != expected {
            return self.implied_nak(ctx, idx, expected, pkt.psn());
        }
        self.ack_through(e.first_psn.wrapping_sub(1));
        let mtu = self.mtu();
        let e = &self.req.inflight[idx];
        let offset = e.resp_pkts * mtu;
        let want = (e.len - offset.min(e.len)).min(mtu) as usize;
        // Responses come FIRST, MIDDLE..., LAST (or ONLY), as rxe's
        // completer holds them to. A READ asked for again, or in parts,
        // starts over with a FIRST or ONLY at the packet it asked from,
        // where the stream from before may go on with a MIDDLE or LAST.
        let last_ok = pkt.opcode().is_last() == (e.resp_pkts + 1 == e.req_end);
        let starts = matches!(pkt.opcode().position(), Position::First | Position::Only);
        let order_ok = match e.resp_pkts {
            0 => starts,
            n if n == e.asked_from => true,
            _ => !starts,
        };
        if !last_ok || !order_ok || pkt.payload().len() != want {
            self.fail_requester(ctx, idx, WcStatus::BadRespErr);
            return false;
        }
        let written = ctx.mrs.scatter(
            mem,
            self.pd,
            &e.wqe.sg_list,
            u64::from(offset),
            pkt.payload(),
        );
        if let Err(err) = written {
            self.fail_requester(ctx, idx, local_status(err));
            return false;
        }
        let e = &mut self.req.inflight[idx];
        e.resp_pkts += 1;
        e.asked_again = None;
        if e.resp_pkts == e.npkts {
            e.done = true;
            self.req.recount_rd_atomic();
        } else if e.resp_pkts == e.req_end {
            e.next_pkt = 0; // the next part is asked for
        }
        true
    }

    /// An atomic ACK for atomic `idx`.
    fn on_atomic_ack(
        &mut self,
        ctx: &mut Ctx<'_>,
        idx: usize,
        pkt: &PacketView<'_>,
        mem: &mut dyn HostMemory,
    ) -> bool {
        let expected = self.awaited_psn(idx);
        let e = &self.req.inflight[idx];
        let (Some(ack), true) = (pkt.atomic_ack_eth(), pkt.psn() == expected) else {
            return self.implied_nak(ctx, idx, expected, pkt.psn());
        };
        self.ack_through(e.first_psn.wrapping_sub(1));
        let e = &self.req.inflight[idx];
        let orig = ack.orig_data.to_ne_bytes();
        if let Err(err) = ctx.mrs.scatter(mem, self.pd, &e.wqe.sg_list, 0, &orig) {
            self.fail_requester(ctx, idx, local_status(err));
            return false;
        }
        self.req.inflight[idx].done = true;
        self.req.recount_rd_atomic();
        true
    }

    /// The PSN READ or atomic `idx` waits for next.
    fn awaited_psn(&self, idx: usize) -> Psn {
        let e = &self.req.inflight[idx];
        e.first_psn.wrapping_add(e.resp_pkts)
    }

    /// A response for PSN `psn` of the READ or atomic `idx` that does not
    /// continue its responses (`expected` is due): the ones between were
    /// lost, and so were the last ones of every earlier READ or atomic
    /// still unanswered, since responses come in request order. As for a
    /// PSN sequence error NAK (rxe: `check_psn` in rxe_comp.c), each is
    /// asked for again at once from its first missing PSN instead of
    /// waiting for the local ACK timeout, and the loss costs one retry.
    /// Only those: later READs whose responses arrive whole are kept (on
    /// a lossy link go-back-N asked again for every READ in flight after
    /// each loss). Earlier SENDs and WRITEs are acknowledged; a gap
    /// never is progress of its own.
    fn implied_nak(&mut self, ctx: &mut Ctx<'_>, idx: usize, expected: Psn, psn: Psn) -> bool {
        let ahead = expected.distance(psn) > 0;
        let waiting = self.req.rnr_resume.is_some();
        if !ahead || waiting || self.req.retrying {
            return false;
        }
        let e = &mut self.req.inflight[idx];
        let first = e.first_psn;
        let gap = match e.asked_again {
            // The stream from before the last ask going on.
            Some(stale) if stale.distance(psn) > 0 => {
                e.asked_again = Some(psn);
                false
            }
            _ => true,
        };
        let unanswered_before = self
            .req
            .inflight
            .iter()
            .take(idx)
            .any(|e| !e.done && e.op.is_rd_atomic() && e.asked_again.is_none() && e.sent_once);
        if !unanswered_before && !gap {
            return false;
        }
        if !self.consume_retry(ctx) {
            return false;
        }
        let progress = self.ack_through(first.wrapping_sub(1));
        if gap {
            self.req.ask_again(idx, psn);
        }
        ctx.recovery.go_backs_after_gap += 1;
        self.on_loss(ctx, expected);
        progress
    }

    /// Timer expiry: the end of an RNR wait, or the local ACK timeout.
    pub(crate) fn timeout(&mut self, ctx: &mut Ctx<'_>, now: Nanos) {
        self.req.pacer.release(now);
        if let Some((at, psn)) = self.req.rnr_resume {
            if at <= now {
                self.req.rnr_resume = None;
                self.req.go_back(psn);
            }
        }
        let timeout_at = self.req.retransmit_at;
        if timeout_at.is_none_or(|at| at > now) && self.req.early.fire(now, timeout_at) {
            // Early: as the timeout below would, but spending no retry.
            ctx.recovery.early_go_backs += 1;
            self.send_unacked_again(ctx);
        }
        if self.req.retransmit_at.is_some_and(|at| at <= now) {
            self.req.retransmit_at = None;
            self.req.early.disarm();
            self.req.direct_stalled = false;
            if self.consume_retry(ctx) {
                ctx.recovery.go_backs_after_timeout += 1;
                self.send_unacked_again(ctx);
            }
        }
        self.keep_retransmit_timer(now);
    }

    /// Goes back to the oldest unacknowledged PSN after a loss nothing
    /// reported (the local ACK timeout, or the early go-back).
    fn send_unacked_again(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(psn) = self.req.oldest_unacked() {
            self.req.go_back(psn);
            self.on_loss(ctx, psn);
        }
        // Responses already on their way from before the go-back arrive
        // out of sequence: they are no new loss, and must not send the
        // requester back (and use up a retry) again before anything new
        // is acknowledged.
        self.req.retrying = true;
    }

    /// Completes finished WRs at the head of `inflight`, in order.
    pub(crate) fn retire(&mut self, ctx: &mut Ctx<'_>) {
        while self.req.inflight.front().is_some_and(|e| e.done) {
            let e = self.req.inflight.pop_front().expect("front checked");
            self.req.send_idx = self.req.send_idx.saturating_sub(1);
            if e.held.is_some() {
                // Held when its packets could not be built again after a
                // go-back, yet acknowledged: the peer executed it from
                // the first sending. It succeeds, and the WRs after it
                // may go.
                self.req.holding = false;
            }
            if e.wqe.signaled || e.status != WcStatus::Success {
                let wc = self.send_completion(&e);
                ctx.complete_carrying(self.send_cq, wc, false, e.len);
            }
        }
        if *self.state == QpState::Sqd && self.req.drain_notify && !self.req.busy() {
            self.req.drain_notify = false;
            ctx.event(crate::event::AsyncEvent::SqDrained(self.id));
        }
        // A WR held by `fail_in_turn` fails once every WR before it ended.
        if let Some(status) = self.req.inflight.front().and_then(|e| e.held) {
            self.fail_requester(ctx, 0, status);
        }
    }

    fn send_completion(&self, e: &InFlight) -> WorkCompletion {
        // What arrived, on success only (as rxe's `make_send_cqe`): a
        // flushed READ may have had its responses or not.
        let byte_len = match e.op {
            _ if e.status != WcStatus::Success => 0,
            ReqOp::Read => e.len,
            ReqOp::CmpSwap | ReqOp::FetchAdd => 8,
            _ => 0,
        };
        WorkCompletion {
            byte_len,
            status: e.status,
            ..WorkCompletion::flushed(e.wqe.wr_id, WcOpcode::of_send(e.wqe.opcode), self.qp_num)
        }
    }

    /// A WR failed: it completes with `status`, earlier unfinished WRs and
    /// every later one are flushed, and the QP enters the error state (RC)
    /// or the send queue error state (UC, UD: IBTA 10.3.1, SQEr). A send
    /// queue that stops in error has not drained: no SQ_DRAINED (IBTA
    /// 11.6.3; rxe raises it only on success).
    pub(crate) fn fail_requester(&mut self, ctx: &mut Ctx<'_>, idx: usize, status: WcStatus) {
        for (i, e) in self.req.inflight.iter_mut().enumerate() {
            if i == idx {
                e.status = status;
            } else if !e.done {
                e.status = WcStatus::WrFlushErr;
            }
            e.done = true;
        }
        self.req.holding = false;
        self.req.drain_notify = false;
        self.retire(ctx);
        if self.qp_type == QpType::Rc {
            self.enter_error(ctx);
        } else {
            self.enter_send_error(ctx);
        }
    }
}

/// The requester's completion status for a NAK (IBTA; ibv_poll_cq(3)).
fn nak_status(code: NakCode) -> WcStatus {
    match code {
        NakCode::InvalidRequest | NakCode::PsnSequenceError => WcStatus::RemInvReqErr,
        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
        NakCode::RemoteOperationalError => WcStatus::RemOpErr,
        NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
    }
}
