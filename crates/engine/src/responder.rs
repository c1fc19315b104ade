//! The responder: executes incoming requests and produces ACKs, NAKs, READ
//! responses and atomic ACKs.
//!
//! RC checks PSNs strictly: the expected PSN is executed, an older one is a
//! duplicate (re-acknowledged; a READ re-executed; an atomic answered from
//! the saved result, never applied twice), a newer one means packets were
//! lost (one PSN sequence error NAK until the gap closes). UC accepts the
//! next PSN and drops the rest of a message after a gap. UD checks the
//! Q_Key and delivers whole datagrams with a GRH.

use crate::access::AccessFlags;
use crate::cnp::Notices;
use crate::ctx::Ctx;
use crate::datapath::Arrival;
use crate::event::AsyncEvent;
use crate::memory::{HostMemory, MemResult};
use crate::mr_table::{sge_total, LocalAccessError};
use crate::qp_state::{QpState, QpType};
use crate::recv_side::RecvSide;
use crate::requester::{local_status, Path};
use crate::transmit::{emit, EmitError, PacketSink, Transmit};
use crate::wc::{wc_flags, WcOpcode, WcStatus, WorkCompletion};
use crate::wr::RecvWqe;
use softverbs_wire::{
    Aeth, AtomicAckEth, Bth, ExtHeaders, Msn, NakCode, OpKind, Opcode, PacketView, Position, Psn,
    Qpn, Reth, Syndrome, Transport,
};
use std::collections::VecDeque;

/// Bytes of GRH at the start of every UD receive buffer.
pub const GRH_LEN: usize = 40;

/// A message being received across several packets.
#[derive(Debug)]
enum InProgress {
    Send { wqe: RecvWqe, offset: u32 },
    Write(WriteCursor),
}

/// Where the next packet of a WRITE goes. It keeps the rkey and remote
/// address, not a local one: the MR is looked up again for every packet
/// (rxe `check_rkey`), so a packet arriving after `ibv_dereg_mr` or an
/// invalidation writes nothing.
#[derive(Debug, Clone, Copy)]
struct WriteCursor {
    rkey: u32,
    va: u64,
    remaining: u32,
    total: u32,
}

/// A response waiting to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Response {
    /// ACK or NAK for `psn`.
    Ack { psn: Psn, syndrome: Syndrome },
    /// READ response packets from `psn`, reading `remaining` bytes at the
    /// local address `addr` of the MR named by `rkey` (`first` marks the
    /// first packet's position; `replay` a re-executed duplicate, which
    /// holds no responder resource).
    Read {
        psn: Psn,
        addr: u64,
        remaining: u32,
        first: bool,
        rkey: u32,
        replay: bool,
    },
    /// The atomic ACK for `psn`.
    Atomic { psn: Psn, orig: u64 },
}

impl Response {
    /// The PSN of the (next) packet of this response.
    fn psn(&self) -> Psn {
        match *self {
            Response::Ack { psn, .. }
            | Response::Read { psn, .. }
            | Response::Atomic { psn, .. } => psn,
        }
    }

    /// Whether this is a READ response stream with PSNs left among the
    /// `span` PSNs from `psn`.
    fn read_overlaps(&self, psn: Psn, span: u32, mtu: u32) -> bool {
        match *self {
            Response::Read {
                psn: first,
                remaining,
                ..
            } => {
                let len = remaining.div_ceil(mtu).max(1) as i32;
                first.distance(psn) < len && psn.distance(first) < span as i32
            }
            _ => false,
        }
    }
}

/// A READ the responder executed: a repeated request is served only if
/// it asks for part of it (rxe's responder resources: `find_resource`,
/// then the duplicate's VA, length and rkey checked against the
/// original's). Anything else behind the expected PSN is dropped: a READ
/// never received, or one asking for other memory than it did.
#[derive(Debug, Clone, Copy)]
struct ReadRecord {
    psn: Psn,
    /// PSNs its responses take.
    span: u32,
    rkey: u32,
    va: u64,
    len: u32,
}

impl ReadRecord {
    /// Whether a READ request at `psn` for `reth`, whose responses take
    /// `span` PSNs, repeats part of this one: its responses' PSNs among
    /// this one's too (which rxe does not check; a requester asking again
    /// from a middle PSN asks for the rest).
    fn covers(&self, psn: Psn, span: u32, reth: &Reth) -> bool {
        let offset = self.psn.distance(psn);
        let end = |va: u64, len: u32| u128::from(va) + u128::from(len);
        (0..self.span as i32).contains(&offset)
            && offset as u32 + span <= self.span
            && reth.rkey == self.rkey
            && reth.va >= self.va
            && end(reth.va, reth.dma_len) <= end(self.va, self.len)
    }
}

/// READs remembered for repeated requests, at least: rxe keeps
/// `max_dest_rd_atomic` of them, and a requester that outruns that (which
/// the same-host path allows, docs/supported.md) still has its lost
/// responses served by a softverbs responder.
const MIN_READ_RECORDS: usize = 16;

impl Responder {
    /// READ response streams queued: new READs' (`replay` false), each
    /// holding a responder resource, or repeated ones'.
    fn queued_reads(&self, replay: bool) -> usize {
        self.out
            .iter()
            .filter(|r| matches!(r, Response::Read { replay: rp, .. } if *rp == replay))
            .count()
    }
}

/// Responder state of a QP.
#[derive(Debug, Default)]
pub(crate) struct Responder {
    epsn: Psn,
    msn: u32,
    msg: Option<InProgress>,
    nak_sent: bool,
    /// UC: dropping the rest of a message after a PSN gap.
    uc_dropping: bool,
    pub(crate) out: VecDeque<Response>,
    /// Results of executed atomics, for duplicate requests.
    atomics: VecDeque<(Psn, u64)>,
    /// The READs executed last, which a duplicate request must fall in.
    reads: VecDeque<ReadRecord>,
    comm_est: bool,
    /// A request arrived marked: the next response carries BECN
    /// (`congestion.rs`).
    pub(crate) becn_due: bool,
    /// UC and UD: a CNP owed to the sender of a marked request
    /// (`cnp.rs`).
    pub(crate) notices: Notices,
    /// Started (INIT->RTR) since the QP was created or reset.
    started: bool,
}

impl Responder {
    /// Starts receiving at `rq_psn` (INIT->RTR).
    pub(crate) fn start(&mut self, rq_psn: u32) {
        *self = Responder {
            epsn: Psn::new_masked(rq_psn),
            started: true,
            ..Responder::default()
        };
    }

    /// The PSN it expects next, once started (`ibv_query_qp`'s `rq_psn`,
    /// as rxe and mlx5 report it). On the same-host path requests carry
    /// no PSN and it stays where it started.
    pub(crate) fn current_psn(&self) -> Option<u32> {
        self.started.then_some(self.epsn.get())
    }

    /// Notes the first request of the connection; true the first time
    /// (IBV_EVENT_COMM_EST is raised once).
    pub(crate) fn note_comm_est(&mut self) -> bool {
        !std::mem::replace(&mut self.comm_est, true)
    }

    /// The receive WR a message was being received into, if any.
    pub(crate) fn take_receive_wqe(&mut self) -> Option<RecvWqe> {
        match self.msg.take() {
            Some(InProgress::Send { wqe, .. }) => Some(wqe),
            other => {
                self.msg = other;
                None
            }
        }
    }

    /// Whether responses are queued.
    pub(crate) fn pending(&self) -> bool {
        !self.out.is_empty()
    }

    /// The QP entered ERR and executes nothing more. Queued ACKs, NAKs and
    /// atomic ACKs answer requests already executed (or report the error
    /// that stopped the QP) and still go out; READ responses are produced
    /// from memory as they are sent, which a QP in ERR no longer does
    /// (IBTA 10.3.1; rxe drops its READ replies in ERR).
    pub(crate) fn stop(&mut self) {
        self.msg = None;
        self.out.retain(|r| !matches!(r, Response::Read { .. }));
    }

    fn msn(&self) -> Msn {
        Msn::new_masked(self.msn)
    }

    /// Queues an ACK, replacing a queued ACK it supersedes (coalescing).
    fn ack(&mut self, psn: Psn) {
        let syndrome = Syndrome::Ack {
            credits: Syndrome::NO_CREDIT_COUNT,
        };
        if let Some(Response::Ack {
            syndrome: Syndrome::Ack { .. },
            ..
        }) = self.out.back()
        {
            self.out.pop_back();
        }
        self.out.push_back(Response::Ack { psn, syndrome });
    }

    fn nak(&mut self, psn: Psn, syndrome: Syndrome) {
        self.out.push_back(Response::Ack { psn, syndrome });
    }
}

/// Why an in-order request failed at the responder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// NAK Invalid Request; IBV_EVENT_QP_REQ_ERR.
    Invalid,
    /// NAK Remote Access Error; IBV_EVENT_QP_ACCESS_ERR.
    Access,
    /// A receive WR could not take the data: NAK Invalid Request (length)
    /// or Remote Operational Error (protection); the WR completes with the
    /// local status.
    Receive(WcStatus),
    /// No receive WR posted: RNR NAK.
    NotReady,
}

/// The status of a receive WR taken by a request that then failed with
/// `fault`: the error the requester is NAK'd with. None where the WR
/// already completed (`Receive`) or the request is retried (`NotReady`).
fn taken_receive_status(fault: Fault) -> Option<WcStatus> {
    match fault {
        Fault::Access => Some(WcStatus::RemAccessErr),
        Fault::Invalid => Some(WcStatus::RemInvReqErr),
        Fault::Receive(_) | Fault::NotReady => None,
    }
}

impl RecvSide<'_> {
    /// Handles a request packet addressed to this QP.
    pub(crate) fn receive(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketView<'_>,
        arrival: Arrival,
        mem: &mut dyn HostMemory,
    ) {
        if !matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            ctx.dropped = true;
            return;
        }
        // COMM_EST is an event of connection establishment: RC and UC only
        // (IBTA o11-5.1.1).
        if self.state == QpState::Rtr && self.qp_type != QpType::Ud && !self.resp.comm_est {
            self.resp.comm_est = true;
            ctx.event(AsyncEvent::CommEst(self.id));
        }
        self.note_congestion(ctx, pkt, &arrival);
        match self.qp_type {
            QpType::Rc => self.rc_receive(ctx, pkt, mem),
            QpType::Uc => self.uc_receive(ctx, pkt, mem),
            QpType::Ud => self.ud_receive(ctx, pkt, arrival, mem),
        }
    }

    fn rc_receive(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketView<'_>, mem: &mut dyn HostMemory) {
        let psn = pkt.psn();
        let d = self.resp.epsn.distance(psn);
        if d < 0 {
            ctx.recovery.rx_duplicates += 1;
            return self.rc_duplicate(ctx, pkt);
        }
        if d > 0 {
            ctx.recovery.rx_ahead += 1;
            if !self.resp.nak_sent {
                self.resp.nak_sent = true;
                let epsn = self.resp.epsn;
                self.resp
                    .nak(epsn, Syndrome::Nak(NakCode::PsnSequenceError));
            }
            return;
        }
        match self.execute(ctx, pkt, mem) {
            // A message whose completion its CQ had no room for is not
            // acknowledged: the QP enters ERR for the lost completion
            // (`Engine::with_qp`), and its requester, answered no more,
            // ends the WR in RETRY_EXC_ERR, as rxe's `do_complete` goes
            // to its error state before it would acknowledge. (softverbs'
            // and rxe's requesters ask for an ACK at every message's
            // end, so theirs before it were acknowledged; a peer that asks
            // more seldom sees those fail too, as it would against rxe.)
            Ok(()) if ctx.lost_completion => {}
            Ok(()) => {
                self.resp.nak_sent = false;
                if pkt.bth().ack_req && matches!(pkt.opcode().kind(), OpKind::Send | OpKind::Write)
                {
                    self.resp.ack(psn);
                }
            }
            Err(Fault::NotReady) => {
                // The packets behind this one are not a new loss: no PSN
                // sequence NAK for them until `psn` comes back.
                self.resp.nak_sent = true;
                let timer = self.attr.min_rnr_timer;
                self.resp.nak(psn, Syndrome::RnrNak { timer });
            }
            Err(fault) => self.rc_fault(ctx, psn, fault),
        }
    }

    /// A fatal request error: NAK it, raise the event, enter ERR. A
    /// SEND part-way through its receive WR completes that WR with the
    /// error the requester is NAK'd with, as rxe's `do_class_ac_error`
    /// completes the WR it is filling (else entering ERR would flush it).
    fn rc_fault(&mut self, ctx: &mut Ctx<'_>, psn: Psn, fault: Fault) {
        if let Some(status) = taken_receive_status(fault) {
            if let Some(wqe) = self.resp.take_receive_wqe() {
                self.fail_receive(ctx, &wqe, status);
            }
        }
        let (code, event) = match fault {
            Fault::Access => (
                NakCode::RemoteAccessError,
                Some(AsyncEvent::QpAccessErr(self.id)),
            ),
            Fault::Receive(WcStatus::LocLenErr) | Fault::Invalid => {
                (NakCode::InvalidRequest, Some(AsyncEvent::QpReqErr(self.id)))
            }
            _ => (NakCode::RemoteOperationalError, None),
        };
        self.resp.nak(psn, Syndrome::Nak(code));
        if let Some(event) = event {
            ctx.event(event);
        }
        self.enter_error();
    }

    fn rc_duplicate(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketView<'_>) {
        let psn = pkt.psn();
        match pkt.opcode().kind() {
            OpKind::ReadRequest => {
                // The requester asks again for the PSNs from `psn` on,
                // which it lost. A queued stream of those PSNs (the rest
                // of this READ's, not yet sent) is superseded by the
                // re-execution, which goes out ahead of the responses
                // queued for later PSNs: a go-back-N requester (rxe) takes
                // nothing after the lost PSN until it comes, and the
                // later streams queued behind it then arrive in order
                // instead of being dropped and asked for again; a
                // requester that asks again for this READ alone (ours)
                // keeps them either way. The READ is re-executed with its
                // rkey checked again; an MR gone since is a remote access
                // error as for a new READ (rxe `read_reply` rechecks the
                // MR of a replay).
                let Some(reth) = pkt.reth() else {
                    return;
                };
                let mtu = self.mtu();
                let span = reth.dma_len.div_ceil(mtu).max(1);
                if !self.resp.reads.iter().any(|r| r.covers(psn, span, reth)) {
                    return;
                }
                self.resp.out.retain(|r| !r.read_overlaps(psn, span, mtu));
                // A requester repeats at most the READs it has outstanding,
                // max_dest_rd_atomic of them: more repeats queued at once
                // come from a broken or hostile peer, and each would hold
                // a stream here. Dropped, as rxe drops a repeated READ it
                // has no responder resource for.
                if self.resp.queued_reads(true) >= usize::from(self.attr.max_dest_rd_atomic).max(1)
                {
                    return;
                }
                match self.read_response(ctx, pkt, true) {
                    Ok((response, _)) => {
                        let at = self.resp.out.iter().position(|r| psn.distance(r.psn()) > 0);
                        self.resp
                            .out
                            .insert(at.unwrap_or(self.resp.out.len()), response);
                    }
                    Err(fault) => self.rc_fault(ctx, psn, fault),
                }
            }
            OpKind::CompareSwap | OpKind::FetchAdd => {
                if let Some(&(_, orig)) = self.resp.atomics.iter().find(|(p, _)| *p == psn) {
                    self.resp.out.push_back(Response::Atomic { psn, orig });
                }
            }
            _ => {
                let last = self.resp.epsn.wrapping_sub(1);
                self.resp.ack(last);
            }
        }
    }

    /// Executes the expected request; on success the expected PSN moves on.
    fn execute(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketView<'_>,
        mem: &mut dyn HostMemory,
    ) -> Result<(), Fault> {
        let opcode = pkt.opcode();
        self.check_sequence(opcode)?;
        let advance = match opcode.kind() {
            OpKind::Send => self.receive_send(ctx, pkt, mem, 0)?,
            OpKind::Write => self.receive_write(ctx, pkt, mem)?,
            OpKind::ReadRequest => self.receive_read(ctx, pkt)?,
            OpKind::CompareSwap | OpKind::FetchAdd => self.receive_atomic(ctx, pkt, mem)?,
            _ => return Err(Fault::Invalid),
        };
        self.resp.epsn = self.resp.epsn.wrapping_add(advance);
        if opcode.is_last() {
            self.resp.msn = (self.resp.msn + 1) & 0xFF_FFFF;
        }
        Ok(())
    }

    /// FIRST/MIDDLE/LAST must follow each other within one message.
    fn check_sequence(&self, opcode: Opcode) -> Result<(), Fault> {
        let continuing = matches!(opcode.position(), Position::Middle | Position::Last);
        let ok = match (&self.resp.msg, continuing) {
            (None, false) => true,
            (Some(InProgress::Send { .. }), true) => opcode.kind() == OpKind::Send,
            (Some(InProgress::Write(_)), true) => opcode.kind() == OpKind::Write,
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(Fault::Invalid)
        }
    }

    /// The remote-access rights the QP grants (`qp_access_flags`).
    fn grants(&self, need: AccessFlags) -> Result<(), Fault> {
        if AccessFlags::from_bits_truncate(self.attr.qp_access_flags).contains(need) {
            Ok(())
        } else {
            Err(Fault::Invalid)
        }
    }

    /// A SEND packet (or UD datagram, whose data starts after `lead` bytes
    /// of GRH already written).
    fn receive_send(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketView<'_>,
        mem: &mut dyn HostMemory,
        lead: u32,
    ) -> Result<u32, Fault> {
        let opcode = pkt.opcode();
        if let Err(fault) = self.check_payload_size(opcode, pkt.payload().len()) {
            return Err(self.refuse_send_length(ctx, fault));
        }
        let (wqe, offset) = match self.resp.msg.take() {
            Some(InProgress::Send { wqe, offset }) => (wqe, offset),
            _ => (self.take_recv_wqe(ctx).ok_or(Fault::NotReady)?, lead),
        };
        let written = ctx
            .mrs
            .scatter(mem, self.pd, &wqe.sg_list, u64::from(offset), pkt.payload());
        if let Err(err) = written {
            return Err(self.receive_failed(ctx, wqe, offset, err));
        }
        let offset = offset + pkt.payload().len() as u32;
        if !opcode.is_last() {
            self.resp.msg = Some(InProgress::Send { wqe, offset });
            return Ok(1);
        }
        let mut wc = self.recv_completion(&wqe, WcOpcode::Recv, offset);
        if let Some(imm) = pkt.imm() {
            wc.imm_data_or_inv_rkey = imm;
            wc.wc_flags |= wc_flags::WITH_IMM;
        }
        if let Some(ieth) = pkt.ieth() {
            self.invalidate_for_send(ctx, &wqe, ieth.rkey)?;
            wc.imm_data_or_inv_rkey = ieth.rkey;
            wc.wc_flags |= wc_flags::WITH_INV;
        }
        ctx.complete(self.recv_cq, wc, pkt.bth().solicited);
        Ok(1)
    }

    /// A SEND packet of the wrong length (the ends disagree on the path
    /// MTU): RC takes the message's receive WR first, as rxe looks for one
    /// (an RNR NAK without) before it checks the length, and completes it
    /// with IBV_WC_REM_INV_REQ_ERR (`do_class_ac_error`); UC drops the
    /// message.
    fn refuse_send_length(&mut self, ctx: &mut Ctx<'_>, fault: Fault) -> Fault {
        if self.qp_type != QpType::Rc {
            return fault;
        }
        let wqe = match self.resp.msg.take() {
            Some(InProgress::Send { wqe, .. }) => wqe,
            other => {
                self.resp.msg = other;
                match self.take_recv_wqe(ctx) {
                    Some(wqe) => wqe,
                    None => return Fault::NotReady,
                }
            }
        };
        self.fail_receive(ctx, &wqe, WcStatus::RemInvReqErr);
        fault
    }

    /// A receive WR could not take a SEND's data. On UC a message too long
    /// for the WR is dropped and the WR kept for the next message (class
    /// D: rxe RESPST_ERR_LENGTH); otherwise the WR completes in error.
    fn receive_failed(
        &mut self,
        ctx: &mut Ctx<'_>,
        wqe: RecvWqe,
        offset: u32,
        err: LocalAccessError,
    ) -> Fault {
        if self.qp_type == QpType::Uc && err == LocalAccessError::Length {
            self.resp.msg = Some(InProgress::Send { wqe, offset });
            return Fault::Invalid;
        }
        let status = local_status(err);
        self.fail_receive(ctx, &wqe, status);
        Fault::Receive(status)
    }

    /// SEND_WITH_INV invalidates an rkey of this QP's PD that can be
    /// invalidated. Any other key (unknown, of another PD, or an ordinary
    /// MR, which rxe refuses to invalidate) is an invalid request: NAK,
    /// and the QP goes to the error state.
    fn invalidate_for_send(
        &mut self,
        ctx: &mut Ctx<'_>,
        wqe: &RecvWqe,
        rkey: u32,
    ) -> Result<(), Fault> {
        let ours = ctx.mrs.by_key(rkey).is_some_and(|(_, mr)| mr.pd == self.pd);
        if !ours || !ctx.mrs.invalidatable(rkey) {
            self.fail_receive(ctx, wqe, WcStatus::RemInvReqErr);
            return Err(Fault::Invalid);
        }
        Ok(())
    }

    /// FIRST and MIDDLE packets carry exactly one MTU; LAST and ONLY at
    /// most one (IBTA ch. 9, packet length checks).
    fn check_payload_size(&self, opcode: Opcode, len: usize) -> Result<(), Fault> {
        let mtu = self.mtu() as usize;
        let ok = match opcode.position() {
            Position::First | Position::Middle => len == mtu,
            Position::Last => len >= 1 && len <= mtu,
            Position::Only => len <= mtu,
        };
        if ok {
            Ok(())
        } else {
            Err(Fault::Invalid)
        }
    }

    fn receive_write(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketView<'_>,
        mem: &mut dyn HostMemory,
    ) -> Result<u32, Fault> {
        let opcode = pkt.opcode();
        if opcode.has_imm() && opcode.position() == Position::Only {
            // The kernel's order (rxe: check_op_valid, check_resource,
            // then length and rkey): a WRITE_ONLY_WITH_IMM that finds no
            // receive WR is refused with an RNR NAK before its rkey is
            // looked at, so the requester retries rather than fails; one
            // that finds one has taken it, so a bad length or rkey then
            // completes that receive WR in error too.
            self.grants(AccessFlags::REMOTE_WRITE)?;
            self.recv_wqe_available(ctx).ok_or(Fault::NotReady)?;
            let result = self.write_packet(ctx, pkt, mem);
            // UC has no NAK: a message in error is dropped and the WR
            // stays for the next one (rxe's class D1E).
            if let (Err(fault), QpType::Rc) = (result, self.qp_type) {
                self.fail_taken_receive(ctx, fault);
            }
            return result;
        }
        self.write_packet(ctx, pkt, mem)
    }

    /// A WRITE_ONLY_WITH_IMM that failed after it took its receive WR:
    /// the WR completes with the error the requester is NAK'd with (rxe's
    /// `do_class_ac_error`).
    fn fail_taken_receive(&mut self, ctx: &mut Ctx<'_>, fault: Fault) {
        let Some(status) = taken_receive_status(fault) else {
            return;
        };
        if let Some(wqe) = self.take_recv_wqe(ctx) {
            self.fail_receive(ctx, &wqe, status);
        }
    }

    /// One packet of a WRITE: its place checked, its payload written, and
    /// on its last packet a WRITE_WITH_IMM's receive completion.
    fn write_packet(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketView<'_>,
        mem: &mut dyn HostMemory,
    ) -> Result<u32, Fault> {
        let opcode = pkt.opcode();
        self.check_payload_size(opcode, pkt.payload().len())?;
        let w = match self.resp.msg.take() {
            Some(InProgress::Write(w)) => w,
            _ => self.start_write(ctx, pkt)?,
        };
        let len = pkt.payload().len() as u32;
        let too_long = len > w.remaining || (opcode.is_last() && len != w.remaining);
        if too_long {
            return Err(Fault::Invalid);
        }
        if opcode.has_imm() && opcode.is_last() && self.recv_wqe_available(ctx).is_none() {
            // A LAST packet keeps the message open, for its retry to
            // continue; a retried ONLY starts again from its RETH.
            if opcode.position() == Position::Last {
                self.resp.msg = Some(InProgress::Write(w));
            }
            return Err(Fault::NotReady);
        }
        if len > 0 {
            let addr = ctx
                .mrs
                .remote_addr(
                    self.pd,
                    w.rkey,
                    w.va,
                    u64::from(len),
                    AccessFlags::REMOTE_WRITE,
                )
                .map_err(|_| Fault::Access)?;
            // Memory the application unmapped under its MR: a NIC's
            // translation fault, answered as a remote access error.
            mem.write(addr, pkt.payload()).map_err(|_| Fault::Access)?;
        }
        if !opcode.is_last() {
            self.resp.msg = Some(InProgress::Write(WriteCursor {
                va: w.va + u64::from(len),
                remaining: w.remaining - len,
                ..w
            }));
            return Ok(1);
        }
        if let Some(imm) = pkt.imm() {
            let wqe = self.take_recv_wqe(ctx).ok_or(Fault::NotReady)?;
            let mut wc = self.recv_completion(&wqe, WcOpcode::RecvRdmaWithImm, w.total);
            wc.imm_data_or_inv_rkey = imm;
            wc.wc_flags |= wc_flags::WITH_IMM;
            ctx.complete(self.recv_cq, wc, pkt.bth().solicited);
        }
        Ok(1)
    }

    /// Checks a WRITE's RETH against the MR for the whole message.
    fn start_write(&mut self, ctx: &Ctx<'_>, pkt: &PacketView<'_>) -> Result<WriteCursor, Fault> {
        self.grants(AccessFlags::REMOTE_WRITE)?;
        let reth = pkt.reth().ok_or(Fault::Invalid)?;
        // Longer than a message can be: an invalid request before the
        // R_Key is looked at (C9-94; rxe `check_length`), as for a READ.
        if reth.dma_len > ctx.config.limits.max_msg_sz {
            return Err(Fault::Invalid);
        }
        if reth.dma_len > 0 {
            ctx.mrs
                .remote_addr(
                    self.pd,
                    reth.rkey,
                    reth.va,
                    u64::from(reth.dma_len),
                    AccessFlags::REMOTE_WRITE,
                )
                .map_err(|_| Fault::Access)?;
        }
        Ok(WriteCursor {
            rkey: reth.rkey,
            va: reth.va,
            remaining: reth.dma_len,
            total: reth.dma_len,
        })
    }

    fn receive_read(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketView<'_>) -> Result<u32, Fault> {
        self.grants(AccessFlags::REMOTE_READ)?;
        if self.resp.queued_reads(false) >= usize::from(self.attr.max_dest_rd_atomic) {
            return Err(Fault::Invalid); // more READs than responder resources
        }
        let (response, len) = self.read_response(ctx, pkt, false)?;
        self.resp.out.push_back(response);
        let span = len.div_ceil(self.mtu()).max(1);
        if let Some(reth) = pkt.reth() {
            let kept = usize::from(self.attr.max_dest_rd_atomic).max(MIN_READ_RECORDS);
            if self.resp.reads.len() >= kept {
                self.resp.reads.pop_front();
            }
            self.resp.reads.push_back(ReadRecord {
                psn: pkt.psn(),
                span,
                rkey: reth.rkey,
                va: reth.va,
                len: reth.dma_len,
            });
        }
        Ok(span)
    }

    /// Validates a READ request; returns its response stream and length.
    fn read_response(
        &self,
        ctx: &Ctx<'_>,
        pkt: &PacketView<'_>,
        replay: bool,
    ) -> Result<(Response, u32), Fault> {
        let reth = pkt.reth().ok_or(Fault::Invalid)?;
        if reth.dma_len > ctx.config.limits.max_msg_sz {
            return Err(Fault::Invalid);
        }
        let addr = if reth.dma_len == 0 {
            0
        } else {
            ctx.mrs
                .remote_addr(
                    self.pd,
                    reth.rkey,
                    reth.va,
                    u64::from(reth.dma_len),
                    AccessFlags::REMOTE_READ,
                )
                .map_err(|_| Fault::Access)?
        };
        let response = Response::Read {
            psn: pkt.psn(),
            addr,
            remaining: reth.dma_len,
            first: true,
            rkey: reth.rkey,
            replay,
        };
        Ok((response, reth.dma_len))
    }

    fn receive_atomic(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketView<'_>,
        mem: &mut dyn HostMemory,
    ) -> Result<u32, Fault> {
        self.grants(AccessFlags::REMOTE_ATOMIC)?;
        if self.attr.max_dest_rd_atomic == 0 {
            return Err(Fault::Invalid); // no responder resource (IBTA 9.4.4; rxe)
        }
        let a = pkt.atomic_eth().ok_or(Fault::Invalid)?;
        // The R_Key and range first, as rxe (`check_rkey` before its
        // alignment test): a misaligned atomic with a bad R_Key is a
        // remote access error.
        let addr = ctx
            .mrs
            .remote_addr(self.pd, a.rkey, a.va, 8, AccessFlags::REMOTE_ATOMIC)
            .map_err(|_| Fault::Access)?;
        if a.va % 8 != 0 {
            return Err(Fault::Invalid); // IBTA: misaligned atomics are invalid requests
        }
        if addr % 8 != 0 {
            // The host word must be aligned too (HostMemory's atomics need
            // it; rxe checks the translated address). reg_mr keeps an
            // iova at its address's offset within the page, so this
            // holds already; checked again where the memory is touched.
            return Err(Fault::Invalid);
        }
        let orig = if pkt.opcode().kind() == OpKind::CompareSwap {
            mem.compare_swap(addr, a.compare, a.swap_add)
        } else {
            mem.fetch_add(addr, a.swap_add)
        }
        .map_err(|_| Fault::Access)?;
        let psn = pkt.psn();
        let slots = usize::from(self.attr.max_dest_rd_atomic).max(1);
        if self.resp.atomics.len() >= slots {
            self.resp.atomics.pop_front();
        }
        self.resp.atomics.push_back((psn, orig));
        self.resp.out.push_back(Response::Atomic { psn, orig });
        Ok(1)
    }

    fn uc_receive(&mut self, ctx: &mut Ctx<'_>, pkt: &PacketView<'_>, mem: &mut dyn HostMemory) {
        let psn = pkt.psn();
        let d = self.resp.epsn.distance(psn);
        if d < 0 {
            // A duplicate (a network may deliver a packet twice): not
            // executed again, and no message in progress is lost for it.
            // UC has no retransmission to answer.
            ctx.dropped = true;
            return;
        }
        let opcode = pkt.opcode();
        if d > 0 || self.resp.uc_dropping {
            // A gap: whatever message was open is lost; only a new
            // message's first packet resynchronises.
            self.uc_abandon(ctx);
            self.resp.uc_dropping = !matches!(opcode.position(), Position::First | Position::Only);
            self.resp.epsn = psn.wrapping_add(1);
            if self.resp.uc_dropping {
                ctx.dropped = true;
                return;
            }
        } else {
            self.resp.epsn = psn.wrapping_add(1);
        }
        if self.check_sequence(opcode).is_err() {
            self.uc_abandon(ctx);
            self.resp.uc_dropping = !matches!(opcode.position(), Position::First | Position::Only);
            ctx.dropped = true;
            return;
        }
        let result = match opcode.kind() {
            OpKind::Send => self.receive_send(ctx, pkt, mem, 0),
            OpKind::Write => self.receive_write(ctx, pkt, mem),
            _ => Err(Fault::Invalid),
        };
        if let Err(fault) = result {
            self.uc_fault(ctx, fault);
        }
    }

    /// UC: a message lost part-way gives its receive WR back, to take the
    /// next message (the WR never completes for a message it did not get).
    fn uc_abandon(&mut self, ctx: &mut Ctx<'_>) {
        let Some(InProgress::Send { wqe, .. }) = self.resp.msg.take() else {
            return;
        };
        match self.srq.and_then(|srq| ctx.srqs.get_mut(srq)) {
            Some(srq) => srq.queue.give_back(wqe),
            None => self.rq.give_back(wqe),
        }
    }

    /// UC has no NAKs: no receive WR, a malformed message, a message too
    /// long for its receive WR or an rkey violation drops the message and
    /// the QP goes on (IBTA 9.9.3 classes D and E; rxe "UC/non-SRQ Class
    /// E"); only a receive WR whose memory is unusable fails the QP.
    fn uc_fault(&mut self, ctx: &mut Ctx<'_>, fault: Fault) {
        ctx.dropped = true;
        self.uc_abandon(ctx);
        match fault {
            Fault::Receive(_) => self.enter_error(),
            _ => self.resp.uc_dropping = true,
        }
    }

    fn ud_receive(
        &mut self,
        ctx: &mut Ctx<'_>,
        pkt: &PacketView<'_>,
        arrival: Arrival,
        mem: &mut dyn HostMemory,
    ) {
        let Some(deth) = pkt.deth() else {
            ctx.dropped = true;
            return;
        };
        if deth.qkey != self.attr.qkey || pkt.payload().len() > self.mtu() as usize {
            ctx.dropped = true;
            return; // Q_Key violation or oversized datagram: dropped
        }
        // No receive WR: UD has no RNR, the datagram is lost. A WR too
        // short for it: the datagram is dropped and the WR stays for the
        // next one (class D: rxe RESPST_ERR_LENGTH "UC/UD - class D").
        let needed = (GRH_LEN + pkt.payload().len()) as u64;
        let fits = self
            .next_recv_wqe(ctx)
            .is_some_and(|w| sge_total(&w.sg_list) >= needed);
        if !fits {
            ctx.dropped = true;
            return;
        }
        let Some(wqe) = self.take_recv_wqe(ctx) else {
            ctx.dropped = true;
            return;
        };
        // The GRH, then the datagram after it, with no buffer to join
        // them in.
        let grh = grh_bytes(&arrival, pkt.payload().len());
        let parts = [&grh[..], pkt.payload()];
        let scattered = ctx.mrs.scatter_parts(mem, self.pd, &wqe.sg_list, 0, &parts);
        if let Err(err) = scattered {
            self.fail_receive(ctx, &wqe, local_status(err));
            self.enter_error();
            return;
        }
        let mut wc = self.recv_completion(&wqe, WcOpcode::Recv, needed as u32);
        wc.src_qp = deth.src_qp.get();
        wc.wc_flags |= wc_flags::GRH;
        wc.sl = ud_sl(arrival.dst_gid);
        if let Some(imm) = pkt.imm() {
            wc.imm_data_or_inv_rkey = imm;
            wc.wc_flags |= wc_flags::WITH_IMM;
        }
        ctx.complete(self.recv_cq, wc, pkt.bth().solicited);
    }

    /// The receive WR `take_recv_wqe` would take now.
    fn next_recv_wqe<'q>(&'q self, ctx: &'q Ctx<'_>) -> Option<&'q RecvWqe> {
        match self.srq {
            Some(srq) => ctx.srqs.get(srq)?.queue.next(),
            None => self.rq.next(),
        }
    }

    /// Whether a receive WR could be taken now.
    fn recv_wqe_available(&self, ctx: &Ctx<'_>) -> Option<()> {
        self.next_recv_wqe(ctx).map(|_| ())
    }

    /// Takes the next receive WR from the RQ or the SRQ; an SRQ that drops
    /// below its armed limit raises IBV_EVENT_SRQ_LIMIT_REACHED once.
    fn take_recv_wqe(&mut self, ctx: &mut Ctx<'_>) -> Option<RecvWqe> {
        let Some(srq_id) = self.srq else {
            return self.rq.take();
        };
        let wqe = ctx.srqs.get_mut(srq_id)?.queue.take()?;
        ctx.srq_consumed(srq_id);
        Some(wqe)
    }

    fn recv_completion(&self, wqe: &RecvWqe, opcode: WcOpcode, byte_len: u32) -> WorkCompletion {
        WorkCompletion {
            status: WcStatus::Success,
            byte_len,
            ..WorkCompletion::flushed(wqe.wr_id, opcode, self.qp_num)
        }
    }

    /// A receive WR that could not take its data completes in error.
    fn fail_receive(&mut self, ctx: &mut Ctx<'_>, wqe: &RecvWqe, status: WcStatus) {
        let wc = WorkCompletion {
            status,
            ..WorkCompletion::flushed(wqe.wr_id, WcOpcode::Recv, self.qp_num)
        };
        ctx.complete(self.recv_cq, wc, false);
    }

    /// Writes the next response packet into `sink`, sent back along the
    /// QP's `path` (without one the response is dropped).
    pub(crate) fn transmit(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &dyn HostMemory,
        path: Option<Path>,
        sink: &mut dyn PacketSink,
    ) -> Option<Transmit> {
        let response = self.resp.out.pop_front()?;
        let path = path?;
        let dest_qp = Qpn::new_masked(self.attr.dest_qp_num);
        let msn = self.resp.msn();
        let ack = |syndrome| Aeth { syndrome, msn };
        let ok = ack(Syndrome::Ack {
            credits: Syndrome::NO_CREDIT_COUNT,
        });
        // A READ response's data is read from memory straight into its
        // place in the packet once the headers are written.
        let (opcode, psn, ext, read) = match response {
            Response::Ack { psn, syndrome } => {
                let ext = ExtHeaders {
                    aeth: Some(ack(syndrome)),
                    ..ExtHeaders::default()
                };
                (Opcode::RcAck, psn, ext, None)
            }
            Response::Atomic { psn, orig } => {
                let ext = ExtHeaders {
                    aeth: Some(ok),
                    atomic_ack_eth: Some(AtomicAckEth { orig_data: orig }),
                    ..ExtHeaders::default()
                };
                (Opcode::RcAtomicAck, psn, ext, None)
            }
            Response::Read {
                psn,
                addr,
                remaining,
                first,
                rkey,
                replay,
            } => {
                let mtu = self.mtu();
                let len = remaining.min(mtu);
                if !ctx.mrs.still_readable(self.pd, rkey, addr, u64::from(len)) {
                    self.read_access_lost(ctx, psn);
                    return None;
                }
                let last = remaining <= mtu;
                let position = match (first, last) {
                    (true, true) => Position::Only,
                    (true, false) => Position::First,
                    (false, true) => Position::Last,
                    (false, false) => Position::Middle,
                };
                let opcode = Opcode::compose(
                    Transport::Rc,
                    OpKind::ReadResponse,
                    position,
                    softverbs_wire::Suffix::None,
                )?;
                let ext = ExtHeaders {
                    aeth: (position != Position::Middle).then_some(ok),
                    ..ExtHeaders::default()
                };
                if !last {
                    let next = Response::Read {
                        psn: psn.wrapping_add(1),
                        addr: addr + u64::from(len),
                        remaining: remaining - len,
                        first: false,
                        rkey,
                        replay,
                    };
                    self.resp.out.push_front(next);
                }
                (opcode, psn, ext, Some((addr, len as usize)))
            }
        };
        let becn = std::mem::take(&mut self.resp.becn_due);
        let builder = softverbs_wire::PacketBuilder {
            bth: Bth {
                becn,
                ..Bth::new(opcode, dest_qp, psn)
            },
            ext,
            payload: &[],
        };
        let (addr, payload_len) = read.unwrap_or_default();
        let fill = |payload: &mut [u8], landed: &mut dyn FnMut(&[u8])| -> MemResult<()> {
            if payload.is_empty() {
                return Ok(());
            }
            mem.read(addr, payload)?;
            landed(payload);
            Ok(())
        };
        match emit(sink, path, &builder, payload_len, fill) {
            Ok(sent) => Some(sent),
            Err(EmitError::Fill(_)) => {
                self.read_access_lost(ctx, psn);
                None
            }
            Err(EmitError::Build) => {
                // Lost as on the wire (the requester sends again), but
                // the next response still owes the notice.
                self.resp.becn_due |= becn;
                None
            }
        }
    }

    /// The MR of a READ being answered was deregistered
    /// since the READ was accepted: a class C error as for a bad rkey (rxe
    /// `read_reply` -> `rxe_recheck_mr`): NAK remote access error for the
    /// PSN that cannot be sent, IBV_EVENT_QP_ACCESS_ERR, ERR. Nothing
    /// queued behind it goes out: the QP stopped at that PSN.
    fn read_access_lost(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        self.resp.out.clear();
        self.rc_fault(ctx, psn, Fault::Access);
    }
}

/// The 40 bytes a RoCEv2 UD receive places before the data: the IPv6
/// header, or for IPv4 20 zero bytes then the IPv4 header (as rxe and
/// mlx5 do), with the addresses and traffic class it arrived with.
pub(crate) fn grh_bytes(arrival: &Arrival, payload_len: usize) -> [u8; GRH_LEN] {
    use std::net::IpAddr;
    let (src, dst) = (arrival.src_gid, arrival.dst_gid);
    let mut grh = [0u8; GRH_LEN];
    let roce_len = softverbs_wire::packet_len(Opcode::UdSendOnly, payload_len);
    let flow = match (src.to_ip(), dst.to_ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            softverbs_wire::Flow::v4(s, d, 0, softverbs_wire::ROCE_V2_UDP_PORT)
        }
        (s, d) => softverbs_wire::Flow::v6(ipv6(s), ipv6(d), 0, softverbs_wire::ROCE_V2_UDP_PORT),
    };
    if let Ok(headers) = flow.headers(roce_len) {
        let headers = headers.with_traffic_class(arrival.traffic_class);
        let ip = headers.ip();
        grh[GRH_LEN - ip.len()..].copy_from_slice(ip);
    }
    grh
}

/// `ibv_wc.sl` of a UD receive addressed to `dst` (see
/// [`crate::wc::SL_ROCE_V2_IPV4`]).
pub(crate) fn ud_sl(dst: crate::gid::Gid) -> u8 {
    match dst.to_ip() {
        std::net::IpAddr::V4(_) => crate::wc::SL_ROCE_V2_IPV4,
        std::net::IpAddr::V6(_) => 0,
    }
}

fn ipv6(ip: std::net::IpAddr) -> std::net::Ipv6Addr {
    match ip {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        std::net::IpAddr::V6(v6) => v6,
    }
}
