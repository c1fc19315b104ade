//! The engine's side of the same-host path (see `direct.rs`): which QPs
//! use it, the operations their requesters hand out and the outcomes that
//! come back, and, for a context whose QPs are targets, the deliveries,
//! faults and events peers executed against its published state, applied
//! to its queues here with the engine's own completion rules.

use crate::direct::{DirectOp, DirectOutcome, PeerQp, TargetEvent};
use crate::engine::Engine;
use crate::error::{einval, VerbsResult};
use crate::event::AsyncEvent;
use crate::handles::{QpId, SrqId};
use crate::memory::HostMemory;
use crate::qp_state::QpState;
use crate::recv_queue::{RecvQueueId, RecvShare};
use crate::time::Nanos;
use crate::wc::{WcOpcode, WorkCompletion};
use crate::wr::RecvWqe;

impl Engine {
    /// Puts QP `id` on the same-host path (its peer QP is on this host
    /// and reachable) or back on the wire. Decided while the QP is not
    /// yet sending: after RTR is reached, before the first WR starts. A UD
    /// QP on the path hands out every datagram whole, and the embedder
    /// answers [`DirectOutcome::Wire`] for those whose destination it
    /// cannot reach directly, which then go out as packets.
    pub fn set_direct(&mut self, id: QpId, on: bool) -> VerbsResult<()> {
        let qp = self.qps.get_mut(id).ok_or(einval("unknown QP"))?;
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
        qp.peer_direct &= on;
        self.schedule.set_direct(id, on);
        self.schedule.wake(id);
        Ok(())
    }

    /// Says that the peer of QP `id`, an RC or UC QP on the same-host
    /// path, is on it too: the peer then sends it nothing on the wire (a
    /// QP leaves the path only before anything executed), so the packets
    /// of this connection that arrive are forged, by anyone on the host
    /// who can send from its address, or stale, and are dropped and
    /// counted (`rx_peer_on_same_host`). A NIC would take only those at
    /// the PSN its responder expects, which the same-host path, carrying
    /// no PSNs, does not move; so at none. Cleared when the QP leaves the
    /// path. A target whose peer keeps the wire (its requester decided
    /// so) takes its packets as any QP does.
    pub fn set_peer_direct(&mut self, id: QpId) -> VerbsResult<()> {
        let qp = self.qps.get_mut(id).ok_or(einval("unknown QP"))?;
        qp.peer_direct = qp.direct && qp.qp_type != crate::qp_state::QpType::Ud;
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
            let (op, wire_next) = self
                .with_qp(id, |qp, ctx| {
                    let op = qp.direct_next(ctx, now);
                    (op, qp.ud_wire_next(ctx))
                })
                .unwrap_or((None, false));
            self.sync_timer(id);
            if wire_next {
                self.schedule.wake_transmit(id);
            }
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
        if outcome == DirectOutcome::Wire {
            self.schedule.wake_transmit(id);
        }
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
            incarnation: qp.incarnation,
            mtu: crate::qp::path_mtu(qp.qp_type, &qp.attr, qp.port_mtu),
            rq_psn: qp.attr.rq_psn,
        })
    }

    /// The SRQ QP `id` receives from.
    pub fn qp_srq(&self, id: QpId) -> Option<SrqId> {
        self.qps.get(id)?.srq
    }

    /// Shares receive queue `queue` with consumers outside this engine
    /// through `share` (see `recv_queue.rs`): the WRs queued so far move
    /// into it, and from now on every WR is numbered and claimed there,
    /// by this engine's responder as by same-host peers.
    pub fn share_recv(&mut self, queue: RecvQueueId, share: Box<dyn RecvShare>) {
        let q = match queue {
            RecvQueueId::Qp(id) => self.qps.get_mut(id).map(|qp| &mut qp.rq),
            RecvQueueId::Srq(id) => self.srqs.get_mut(id).map(|s| &mut s.queue),
        };
        if let Some(q) = q {
            q.share(share);
        }
    }

    /// The oldest receive WR of QP `qpn` that no consumer claimed: what a
    /// peer's message would take. Claim it with [`Engine::claim_recv`].
    pub fn peek_recv(&self, qpn: u32) -> Option<RecvWqe> {
        let qp = self.qps.get(self.qp_by_num(qpn)?)?;
        let queue = match qp.srq {
            Some(srq) => &self.srqs.get(srq)?.queue,
            None => &qp.rq,
        };
        queue.peek().cloned()
    }

    /// Claims receive WR `seq` of QP `qpn` for a peer, if it is still the
    /// oldest unclaimed one. It stays queued until the peer's delivery
    /// ([`Engine::apply_delivery`]) or a flush retires it.
    pub fn claim_recv(&mut self, qpn: u32, seq: u64) -> bool {
        let Some(id) = self.qp_by_num(qpn) else {
            return false;
        };
        let claimed = self.with_qp(id, |qp, ctx| match qp.srq {
            Some(srq) => {
                let claimed = ctx.srqs.get_mut(srq).is_some_and(|s| s.queue.claim(seq));
                if claimed {
                    ctx.srq_consumed(srq);
                }
                claimed
            }
            None => qp.rq.claim(seq),
        });
        claimed == Some(true)
    }

    /// A peer delivered a message into receive WR `seq` of QP `qpn`
    /// (which it claimed): the WR leaves its queue and `wc` completes on
    /// the QP's receive CQ, with the CQ's rules (overrun, notification).
    /// A QP that stopped receiving since gets the WR flushed instead (it
    /// was taken before the QP stopped; an SRQ's WR must not be lost).
    /// False if the WR is not queued any more (flushed, reset).
    pub fn apply_delivery(
        &mut self,
        qpn: u32,
        seq: u64,
        wc: WorkCompletion,
        solicited: bool,
    ) -> bool {
        let Some(id) = self.qp_by_num(qpn) else {
            return false;
        };
        let applied = self.with_qp(id, |qp, ctx| {
            let wqe = match qp.srq {
                Some(srq) => {
                    let wqe = ctx.srqs.get_mut(srq)?.queue.retire(seq)?;
                    ctx.srq_consumed(srq);
                    wqe
                }
                None => qp.rq.retire(seq)?,
            };
            let wc = if receiving(qp.state) {
                wc
            } else {
                WorkCompletion::flushed(wqe.wr_id, WcOpcode::Recv, qp.qp_num)
            };
            ctx.complete(qp.recv_cq, wc, solicited);
            Some(())
        });
        applied.flatten().is_some()
    }

    /// A peer's request failed at QP `qpn`: it enters the error state
    /// with `event`, as on a NAK the responder sends.
    pub fn apply_fault(&mut self, qpn: u32, incarnation: u16, event: TargetEvent) {
        let Some(id) = self.qp_by_num(qpn) else {
            return;
        };
        self.with_qp(id, |qp, ctx| {
            // A fault from before a reset is about a connection gone.
            if qp.incarnation != incarnation || !receiving(qp.state) {
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

    /// Notes that the MR with key `key` changed, for `poll_mr_change`.
    pub(crate) fn mr_changed(&mut self, key: u32) {
        if self.track_changes && !self.mr_changes.contains(&key) {
            self.mr_changes.push(key);
        }
    }

    /// The next SRQ created or destroyed since last asked (tracked with
    /// [`Engine::track_changes`]; gone from [`Engine::query_srq`] means
    /// destroyed): an embedder shares the receive queue of each.
    pub fn poll_srq_change(&mut self) -> Option<SrqId> {
        self.srq_changes.pop()
    }

    /// Notes that SRQ `id` was created or destroyed.
    pub(crate) fn srq_changed(&mut self, id: SrqId) {
        if self.track_changes {
            self.srq_changes.push(id);
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
