//! The engine's side of the same-host path (see `direct.rs`): which QPs
//! use it, the operations their requesters hand out and the outcomes that
//! come back, and, for a context whose QPs are targets, the deliveries,
//! faults and events peers executed against its published state, applied
//! to its queues here with the engine's own completion rules.

use crate::direct::{DirectOp, DirectOutcome, PeerQp, TargetEvent};
use crate::engine::Engine;
use crate::error::{einval, eopnotsupp, VerbsResult};
use crate::event::AsyncEvent;
use crate::handles::QpId;
use crate::memory::HostMemory;
use crate::qp_state::{QpState, QpType};
use crate::time::Nanos;
use crate::wc::WorkCompletion;
use crate::wr::RecvWqe;

impl Engine {
    /// Puts QP `id` on the same-host path (its peer QP is on this host
    /// and reachable) or back on the wire. Decided while the QP is not
    /// yet sending: after RTR is reached, before the first WR starts.
    pub fn set_direct(&mut self, id: QpId, on: bool) -> VerbsResult<()> {
        let qp = self.qps.get_mut(id).ok_or(einval("unknown QP"))?;
        if on && qp.qp_type == QpType::Ud {
            return Err(eopnotsupp("UD is not on the same-host path yet"));
        }
        if qp.direct && !on {
            // Back to the wire (the peer turned out to use it): nothing
            // handed out was executed, so its packets go out from there.
            qp.req.direct_pending = None;
            qp.req.direct_stalled = false;
            if let Some(psn) = qp.req.oldest_unacked() {
                qp.req.go_back(psn);
            }
        }
        qp.direct = on;
        self.schedule.set_direct(id, on);
        self.schedule.wake(id);
        Ok(())
    }

    /// Whether QP `id` is on the same-host path.
    pub fn is_direct(&self, id: QpId) -> bool {
        self.qps.get(id).is_some_and(|qp| qp.direct)
    }

    /// The next operation a same-host QP's requester hands out, QPs taking
    /// turns. Execute it with [`crate::direct::execute`] and give the
    /// outcome to [`Engine::handle_direct`] before asking again.
    pub fn poll_direct(&mut self, now: Nanos) -> Option<DirectOp> {
        while let Some(id) = self.schedule.next_direct_ready() {
            let op = self
                .with_qp(id, |qp, ctx| qp.direct_next(ctx, now))
                .flatten();
            self.sync_timer(id);
            if op.is_some() {
                // Its turn comes again after the others' (and after this
                // operation's outcome, which it waits for).
                self.schedule.wake(id);
                return op;
            }
        }
        None
    }

    /// The outcome of an operation [`Engine::poll_direct`] gave, named by
    /// its QP and first PSN; `mem` is this context's memory (an atomic's
    /// original value goes there).
    pub fn handle_direct(
        &mut self,
        now: Nanos,
        op: &DirectOp,
        outcome: DirectOutcome,
        mem: &mut dyn HostMemory,
    ) {
        let id = op.qp;
        self.with_qp(id, |qp, ctx| {
            qp.direct_outcome(ctx, now, op.psn, outcome, mem)
        });
        self.sync_timer(id);
    }

    /// What peers need to know of QP `id` to execute requests against it.
    pub fn peer_qp(&self, id: QpId) -> Option<PeerQp> {
        let qp = self.qps.get(id)?;
        Some(PeerQp {
            qpn: qp.qp_num,
            state: qp.state,
            qp_type: qp.qp_type,
            pd: qp.pd,
            access_flags: qp.attr.qp_access_flags,
            dest_qpn: qp.attr.dest_qp_num,
            min_rnr_timer: qp.attr.min_rnr_timer,
            max_dest_rd_atomic: qp.attr.max_dest_rd_atomic,
            qkey: qp.attr.qkey,
            srq: qp.srq.is_some(),
        })
    }

    /// The receive WRs queued on QP `id` (not on its SRQ), oldest first.
    pub fn recv_queue(&self, id: QpId) -> impl Iterator<Item = &RecvWqe> + '_ {
        self.qps.get(id).into_iter().flat_map(|qp| qp.rq.iter())
    }

    /// How many receive WRs QP `id` holds (not its SRQ's).
    pub fn recv_queue_len(&self, id: QpId) -> usize {
        self.qps.get(id).map_or(0, |qp| qp.rq.len())
    }

    /// A peer delivered a message into the oldest receive WR of QP `qpn`
    /// (the one it took from the published queue): that WR leaves the
    /// receive queue and `wc` completes on the QP's receive CQ, with the
    /// CQ's rules (overrun, notification). False if the QP has no such WR
    /// any more (it was flushed when the QP entered the error state).
    pub fn apply_delivery(&mut self, qpn: u32, wc: WorkCompletion, solicited: bool) -> bool {
        let Some(id) = self.qp_by_num(qpn) else {
            return false;
        };
        let applied = self.with_qp(id, |qp, ctx| {
            if !receiving(qp.state) || qp.srq.is_some() {
                return false;
            }
            // The WR the peer took is the oldest one; anything else means
            // the queue changed under it (a reset and new WRs).
            if qp.rq.front().is_none_or(|w| w.wr_id != wc.wr_id) {
                return false;
            }
            qp.rq.pop_front();
            ctx.complete(qp.recv_cq, wc, solicited);
            true
        });
        applied == Some(true)
    }

    /// A peer's request failed at QP `qpn`: it enters the error state
    /// with `event`, as on a NAK the responder sends.
    pub fn apply_fault(&mut self, qpn: u32, event: TargetEvent) {
        let Some(id) = self.qp_by_num(qpn) else {
            return;
        };
        self.with_qp(id, |qp, ctx| {
            // A fault from before a reset is about a connection gone.
            if !receiving(qp.state) {
                return;
            }
            match event {
                TargetEvent::AccessErr => ctx.event(AsyncEvent::QpAccessErr(id)),
                TargetEvent::ReqErr => ctx.event(AsyncEvent::QpReqErr(id)),
                TargetEvent::None => {}
            }
            qp.enter_error(ctx);
        });
    }

    /// QP `qpn` in RTR got its first request from a peer:
    /// IBV_EVENT_COMM_EST, once.
    pub fn apply_comm_est(&mut self, qpn: u32) {
        let Some(id) = self.qp_by_num(qpn) else {
            return;
        };
        self.with_qp(id, |qp, ctx| {
            if qp.state == QpState::Rtr && qp.resp.note_comm_est() {
                ctx.event(AsyncEvent::CommEst(id));
            }
        });
    }

    /// From now on, note every QP and MR whose published view may change,
    /// for [`Engine::poll_qp_change`] and [`Engine::poll_mr_change`] (an
    /// embedder that publishes them to same-host peers turns this on;
    /// nobody else pays for it). Objects that exist already are not
    /// noted: turn it on before creating any.
    pub fn track_changes(&mut self) {
        self.track_changes = true;
    }

    /// The key of the next MR registered, changed or deregistered since
    /// last asked (look it up with [`Engine::mr_by_key`]: gone means
    /// deregistered).
    pub fn poll_mr_change(&mut self) -> Option<u32> {
        self.mr_changes.pop()
    }

    /// The next QP that got receive WRs since last asked (tracked with
    /// [`Engine::track_changes`]): a same-host QP's are mirrored to the
    /// ring its peers take them from.
    pub fn poll_recv_posted(&mut self) -> Option<QpId> {
        self.recv_posted.pop()
    }

    /// Notes that QP `id` got a receive WR, for `poll_recv_posted`.
    pub(crate) fn recv_posted(&mut self, id: QpId) {
        if self.track_changes
            && self.recv_posted.last() != Some(&id)
            && !self.recv_posted.contains(&id)
        {
            self.recv_posted.push(id);
        }
    }

    /// Notes that the MR with key `key` changed, for `poll_mr_change`.
    pub(crate) fn mr_changed(&mut self, key: u32) {
        if self.track_changes && !self.mr_changes.contains(&key) {
            self.mr_changes.push(key);
        }
    }

    /// The next QP whose published view may have changed (created,
    /// modified, destroyed, or moved to another state by the engine), with
    /// its number; the embedder republishes it.
    pub fn poll_qp_change(&mut self) -> Option<(QpId, u32)> {
        self.qp_changes.pop()
    }

    /// Notes that QP `id` (number `qpn`) changed, for `poll_qp_change`.
    pub(crate) fn qp_changed(&mut self, id: QpId, qpn: u32) {
        if self.track_changes && !self.qp_changes.contains(&(id, qpn)) {
            self.qp_changes.push((id, qpn));
        }
    }
}

/// The states in which a QP takes requests (RTR and later, not ERR).
fn receiving(state: QpState) -> bool {
    matches!(
        state,
        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
    )
}
