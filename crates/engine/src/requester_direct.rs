//! The requester on the same-host path: a started WR goes out whole, as a
//! [`DirectOp`], and its [`DirectOutcome`] comes back as the response it
//! stands for. Everything after that is the requester's own machinery:
//! ACKs retire WRs in order, an RNR NAK waits `min_rnr_timer` and counts
//! against `rnr_retry`, a NAK fails the WR and the QP, and an operation
//! that was dropped (target not ready, or gone) is retried by the local
//! ACK timeout until `retry_cnt` runs out, as a lost packet is.
//!
//! One operation per QP is out at a time: execution is synchronous, so
//! nothing is gained by more, and a later operation can never overtake
//! one that was dropped or refused.

use crate::access::AccessFlags;
use crate::ctx::Ctx;
use crate::direct::{DirectKind, DirectOp, DirectOutcome, NakKind, Payload, SegPlan, UdDest};
use crate::gid::Gid;
use crate::mcast::MULTICAST_QPN;
use crate::memory::HostMemory;
use crate::mr_table::gather_plan;
use crate::qp_state::{QpState, QpType};
use crate::requester::{local_status, request_path, ReqOp};
use crate::send_side::SendSide;
use crate::time::Nanos;
use crate::wc::WcStatus;
use crate::wr::send_flags;
use softverbs_wire::{Psn, Suffix};

impl SendSide<'_> {
    /// The next operation to execute at the peer, if the rules allow one
    /// now (the same rules that let a packet go out).
    pub(crate) fn direct_next(&mut self, ctx: &mut Ctx<'_>, now: Nanos) -> Option<DirectOp> {
        let req = &self.req;
        let blocked =
            req.rnr_resume.is_some() || req.direct_pending.is_some() || req.direct_stalled;
        if !self.direct || !matches!(*self.state, QpState::Rts | QpState::Sqd) || blocked {
            return None;
        }
        let idx = self.next_to_send(ctx)?;
        if self.req.inflight[idx].held.is_some() {
            return None;
        }
        if self.req.inflight[idx].wire {
            return None; // a datagram for the wire goes first
        }
        if self.qp_type == QpType::Ud && self.dest_qpn_of(&self.req.inflight[idx]) == MULTICAST_QPN
        {
            // A multicast group's members are reached through the wire
            // (the daemon fans its datagrams out to every process).
            self.req.inflight[idx].wire = true;
            return None;
        }
        match self.direct_op(ctx, idx) {
            Ok(op) => {
                self.direct_sent(idx, now);
                // Start what follows as far as the rules allow, as the
                // wire path does once a WR's packets are out: those WRs
                // are then in flight for SQD draining and flushing.
                while self.start_next(ctx) {}
                Some(op)
            }
            Err(status) => {
                self.fail_in_turn(ctx, idx, status);
                None
            }
        }
    }

    /// Whether the next WR of this same-host UD QP is a datagram for the
    /// wire (`DirectOutcome::Wire`, or to a multicast group), which the
    /// packet path sends.
    pub(crate) fn ud_wire_next(&mut self, ctx: &mut Ctx<'_>) -> bool {
        if self.qp_type != QpType::Ud {
            return false;
        }
        self.next_to_send(ctx)
            .is_some_and(|idx| self.req.inflight[idx].wire)
    }

    /// A WR was posted while a dropped operation waits for the timer. On
    /// the wire its packets would reach a responder that is ready by now,
    /// whose PSN sequence NAK sends the requester back to the dropped
    /// WR at once; here the dropped operation is tried again. (With
    /// `timeout` 0, no timer would ever do it.)
    pub(crate) fn direct_probe(&mut self) {
        if self.direct && std::mem::take(&mut self.req.direct_stalled) {
            if let Some(psn) = self.req.oldest_unacked() {
                self.req.go_back(psn);
            }
        }
    }

    /// Bookkeeping once entry `idx` was handed out whole.
    fn direct_sent(&mut self, idx: usize, now: Nanos) {
        let entry = &mut self.req.inflight[idx];
        entry.sent_once = true;
        entry.next_pkt = entry.npkts;
        self.req.direct_pending = Some(entry.first_psn);
        if self.qp_type == QpType::Rc && self.req.retransmit_at.is_none() {
            self.req.retransmit_at = self.local_ack_timeout().map(|t| now + t);
        }
    }

    /// Entry `idx` as a whole operation; a local SGE that is not usable
    /// fails it as it would fail its first packet.
    fn direct_op(&self, ctx: &Ctx<'_>, idx: usize) -> Result<DirectOp, WcStatus> {
        let e = &self.req.inflight[idx];
        let w = &e.wqe;
        let imm = |s: Suffix| (s == Suffix::Imm).then_some(w.imm_data_or_inv_rkey);
        let (rkey, va) = (w.rdma.rkey, w.rdma.remote_addr);
        let a = w.atomic;
        let inv = |s: Suffix| (s == Suffix::Inv).then_some(w.imm_data_or_inv_rkey);
        let kind = match e.op {
            ReqOp::LocalInv => return Err(WcStatus::LocQpOpErr),
            ReqOp::Send(s) => DirectKind::Send {
                imm: imm(s),
                inv: inv(s),
            },
            ReqOp::Write(s) => DirectKind::Write {
                rkey,
                va,
                imm: imm(s),
            },
            ReqOp::Read => DirectKind::Read { rkey, va },
            ReqOp::CmpSwap => DirectKind::CompareSwap {
                rkey: a.rkey,
                va: a.remote_addr,
                compare: a.compare_add,
                swap: a.swap,
            },
            ReqOp::FetchAdd => DirectKind::FetchAdd {
                rkey: a.rkey,
                va: a.remote_addr,
                add: a.compare_add,
            },
        };
        let payload = match e.op {
            _ if w.send_flags & send_flags::INLINE != 0 => Payload::Inline(w.inline_data.clone()),
            ReqOp::Send(_) | ReqOp::Write(_) => {
                self.local_payload(ctx, idx, AccessFlags::empty())?
            }
            ReqOp::Read => self
                .local_payload(ctx, idx, AccessFlags::LOCAL_WRITE)
                .unwrap_or(Payload::Unusable),
            _ => Payload::Memory(SegPlan::new()),
        };
        Ok(DirectOp {
            qp: self.id,
            src_qpn: self.qp_num,
            dest_qpn: self.dest_qpn_of(e),
            qp_type: self.qp_type,
            psn: e.first_psn.get(),
            sq_psn: self.attr.sq_psn,
            kind,
            len: if e.op.is_rd_atomic() && e.op != ReqOp::Read {
                8
            } else {
                e.len
            },
            packets: e.len.div_ceil(self.mtu().max(1)).max(1),
            mtu: self.mtu(),
            solicited: w.send_flags & send_flags::SOLICITED != 0,
            payload,
            ud: self.ud_dest(ctx, idx)?,
        })
    }

    /// A UD datagram's Q_Key and the addresses of its GRH: those its
    /// packet's IP header would carry. A WR whose AH is gone fails as its
    /// packet would.
    fn ud_dest(&self, ctx: &Ctx<'_>, idx: usize) -> Result<Option<UdDest>, WcStatus> {
        if self.qp_type != QpType::Ud {
            return Ok(None);
        }
        let e = &self.req.inflight[idx];
        let path = request_path(self, ctx, idx).ok_or(WcStatus::LocQpOpErr)?;
        let (sgid, dgid) = path.gids;
        let local = ctx.config.address().unwrap_or_else(|| sgid.to_ip());
        Ok(Some(UdDest {
            qkey: self.deth_of(e).qkey,
            src_gid: Gid::from_ip(sgid.route(local)),
            dst_gid: Gid::from_ip(dgid.route(local)),
            traffic_class: path.traffic_class,
        }))
    }

    /// The entry's SGEs as address ranges, checked against the lkeys.
    fn local_payload(
        &self,
        ctx: &Ctx<'_>,
        idx: usize,
        need: AccessFlags,
    ) -> Result<Payload, WcStatus> {
        let e = &self.req.inflight[idx];
        gather_plan(
            &*ctx.mrs,
            self.pd,
            &e.wqe.sg_list,
            0,
            u64::from(e.len),
            need,
        )
        .map(Payload::Memory)
        .map_err(local_status)
    }

    /// The outcome of the operation whose first PSN is `psn`.
    pub(crate) fn direct_outcome(
        &mut self,
        ctx: &mut Ctx<'_>,
        now: Nanos,
        psn: u32,
        outcome: DirectOutcome,
        mem: &mut dyn HostMemory,
    ) {
        let psn = Psn::new_masked(psn);
        if self.req.direct_pending != Some(psn) {
            return; // stale: the QP was reset or failed since
        }
        self.req.direct_pending = None;
        let Some(idx) = self
            .req
            .inflight
            .iter()
            .position(|e| !e.done && e.first_psn == psn)
        else {
            return;
        };
        let progress = self.apply_outcome(ctx, now, idx, outcome, mem);
        if progress && *self.state != QpState::Err {
            self.on_progress(false);
        }
        self.retire(ctx);
        self.keep_retransmit_timer(now);
    }

    /// Applies an outcome to entry `idx`; returns whether it was progress.
    fn apply_outcome(
        &mut self,
        ctx: &mut Ctx<'_>,
        now: Nanos,
        idx: usize,
        outcome: DirectOutcome,
        mem: &mut dyn HostMemory,
    ) -> bool {
        let e = &self.req.inflight[idx];
        let (first, last, op) = (e.first_psn, e.last_psn(), e.op);
        let unreliable = self.qp_type != QpType::Rc;
        let atomic = matches!(op, ReqOp::CmpSwap | ReqOp::FetchAdd);
        let answered = matches!(outcome, DirectOutcome::Atomic(_));
        if answered != atomic && matches!(outcome, DirectOutcome::Done | DirectOutcome::Atomic(_)) {
            // An answer of the wrong kind, as a response packet of the
            // wrong type would be.
            self.fail_requester(ctx, idx, WcStatus::BadRespErr);
            return false;
        }
        match outcome {
            // UC and UD: a message completes once sent, whatever became
            // of it.
            DirectOutcome::Done | DirectOutcome::Dropped if unreliable => {
                self.req.inflight[idx].done = true;
                true
            }
            DirectOutcome::Done if op == ReqOp::Read => {
                self.ack_through(first.wrapping_sub(1));
                let e = &mut self.req.inflight[idx];
                e.resp_pkts = e.npkts;
                e.done = true;
                self.req.recount_rd_atomic();
                true
            }
            DirectOutcome::Done => self.ack_through(last),
            DirectOutcome::Atomic(orig) => {
                self.ack_through(first.wrapping_sub(1));
                let sges = &self.req.inflight[idx].wqe.sg_list;
                let placed = ctx.mrs.scatter(mem, self.pd, sges, 0, &orig.to_ne_bytes());
                if let Err(err) = placed {
                    self.fail_requester(ctx, idx, local_status(err));
                    return false;
                }
                self.req.inflight[idx].done = true;
                self.req.recount_rd_atomic();
                true
            }
            DirectOutcome::Nak(kind) => {
                self.ack_through(first.wrapping_sub(1));
                self.fail_requester(ctx, idx, nak_status(kind));
                false
            }
            DirectOutcome::Rnr { timer } => {
                if self.ack_through(first.wrapping_sub(1)) {
                    self.on_progress(false);
                }
                self.on_rnr_nak(ctx, now, first, timer);
                false
            }
            DirectOutcome::Dropped => {
                self.req.direct_stalled = true;
                false
            }
            DirectOutcome::LocalFault => {
                self.fail_requester(ctx, idx, WcStatus::LocProtErr);
                false
            }
            DirectOutcome::BadResponse => {
                self.ack_through(first.wrapping_sub(1));
                self.fail_requester(ctx, idx, WcStatus::BadRespErr);
                false
            }
            DirectOutcome::Wire if self.qp_type == QpType::Ud => {
                let e = &mut self.req.inflight[idx];
                e.wire = true;
                e.next_pkt = 0;
                e.sent_once = false;
                // The send cursor may have moved past it meanwhile.
                self.req.send_idx = self.req.send_idx.min(idx);
                false
            }
            // Only a datagram has another way to go: as if dropped.
            DirectOutcome::Wire => {
                self.req.direct_stalled = true;
                false
            }
        }
    }
}

/// The requester's completion status for a NAK.
fn nak_status(kind: NakKind) -> WcStatus {
    match kind {
        NakKind::InvalidRequest => WcStatus::RemInvReqErr,
        NakKind::RemoteAccess => WcStatus::RemAccessErr,
        NakKind::RemoteOperational => WcStatus::RemOpErr,
    }
}
