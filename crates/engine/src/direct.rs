//! The same-host path: whole operations instead of packets.
//!
//! When a QP's peer QP lives on the same host, no packets flow. The
//! requester's engine hands the embedder each started WR as a
//! [`DirectOp`] (a whole message); the embedder executes it against the
//! target's published state with [`execute`], which applies the
//! responder's rules (state, rkey, PD, bounds, rights, receive WRs,
//! completions, errors) through a [`DirectTarget`] view, and gives the
//! [`DirectOutcome`] back to the requester, which treats it as the ACK,
//! NAK, RNR NAK, READ response or atomic ACK it stands for. So the side
//! that runs does the work, as a NIC would, and every rule stays in the
//! engine.

/// A range of bytes in a process's address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seg {
    /// First address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
}

use crate::access::AccessFlags;
use crate::datapath::Arrival;
use crate::gid::Gid;
use crate::handles::{PdId, QpId};
use crate::mr_table::{remote_addr, scatter_plan, sge_total, LocalAccessError};
use crate::qp_state::{QpState, QpType};
use crate::responder::{grh_bytes, ud_sl, GRH_LEN};
use crate::wc::{wc_flags, WcOpcode, WcStatus, WorkCompletion};
use crate::wr::{InlineData, RecvWqe};
use slotmap::{Key, KeyData};

pub use crate::mr_table::{MrLookup, SegPlan};

/// What a whole operation does at the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectKind {
    /// SEND (with immediate data if `imm`).
    Send {
        /// Immediate data (host order, as the receiver's completion has it).
        imm: Option<u32>,
        /// SEND_WITH_INV: the rkey to invalidate at the target.
        inv: Option<u32>,
    },
    /// RDMA WRITE (with immediate data if `imm`).
    Write {
        /// The target's rkey.
        rkey: u32,
        /// The target's virtual address.
        va: u64,
        /// Immediate data.
        imm: Option<u32>,
    },
    /// RDMA READ into the local segments.
    Read {
        /// The target's rkey.
        rkey: u32,
        /// The target's virtual address.
        va: u64,
    },
    /// Atomic compare and swap of 8 bytes.
    CompareSwap {
        /// The target's rkey.
        rkey: u32,
        /// The target's virtual address.
        va: u64,
        /// The value expected.
        compare: u64,
        /// The value stored if it matched.
        swap: u64,
    },
    /// Atomic fetch and add of 8 bytes.
    FetchAdd {
        /// The target's rkey.
        rkey: u32,
        /// The target's virtual address.
        va: u64,
        /// The addend.
        add: u64,
    },
}

/// Where the bytes an operation sends come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Ranges of the requester's registered memory, checked against its
    /// lkeys (for READ: where the data goes, checked for LOCAL_WRITE).
    /// The common few in place, so an operation allocates nothing.
    Memory(SegPlan),
    /// Inline data copied at post time, as the send queue holds it.
    Inline(InlineData),
    /// A READ whose local SGEs are unusable (not in a live MR of the QP's
    /// PD with LOCAL_WRITE): the wire path finds that only when the
    /// response arrives, after the target executed the request, so the
    /// target's checks still run first and the WR then fails locally.
    Unusable,
}

/// One started send WR, whole, for the embedder to execute at the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectOp {
    /// The requester's QP.
    pub qp: QpId,
    /// The requester's QP number.
    pub src_qpn: u32,
    /// The target QP number.
    pub dest_qpn: u32,
    /// The requester's transport.
    pub qp_type: QpType,
    /// The WR's first PSN: names the operation in [`crate::Engine::handle_direct`].
    pub psn: u32,
    /// The PSN the requester started at (`sq_psn`, 24 bits).
    pub sq_psn: u32,
    /// What it does.
    pub kind: DirectKind,
    /// Bytes moved (8 for atomics).
    pub len: u32,
    /// How many packets the message is on the wire (its length over the
    /// path MTU): the responder's checks that the wire makes per packet
    /// keep their order.
    pub packets: u32,
    /// The requester's path MTU in bytes: the payload of each of those
    /// packets but the last.
    pub mtu: u32,
    /// The solicited event bit of the last packet.
    pub solicited: bool,
    /// The requester's side of the data.
    pub payload: Payload,
    /// A UD datagram's addressing (`None` for RC and UC).
    pub ud: Option<UdDest>,
}

/// What a UD datagram carries besides its payload: the Q_Key and the
/// addresses its GRH names, as the target would read them from the IP
/// header of a packet (the GIDs of the IP addresses: IPv4-mapped for
/// IPv4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest {
    /// The Q_Key the datagram carries (the WR's, or the QP's own).
    pub qkey: u32,
    /// The sender's address.
    pub src_gid: Gid,
    /// The destination's address.
    pub dst_gid: Gid,
    /// The traffic class of the sender's address handle.
    pub traffic_class: u8,
}

/// What happened at the target, as the requester learns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectOutcome {
    /// Executed: the ACK of a SEND or WRITE, or a READ's data placed.
    Done,
    /// An atomic executed; the original value.
    Atomic(u64),
    /// Refused with a NAK (the target QP entered the error state).
    Nak(NakKind),
    /// No receive WR was posted: an RNR NAK with the target's timer.
    Rnr {
        /// The target QP's `min_rnr_timer` code.
        timer: u8,
    },
    /// Nothing happened, as for a packet lost or dropped (the target QP
    /// is not ready, not connected to us, or its process is gone): the
    /// requester's retransmission timer runs.
    Dropped,
    /// The requester's own memory could not be reached during the copy.
    LocalFault,
    /// Executed, but the answer is not what the requester expects: a
    /// READ's responses cut at the target's path MTU, where the
    /// requester's differs (IBV_WC_BAD_RESP_ERR).
    BadResponse,
    /// Not executed: a UD datagram whose destination is not on this host
    /// (or not reachable directly); the requester sends it as a packet.
    Wire,
}

/// The NAK codes a direct operation can end with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NakKind {
    /// Invalid request (IBV_WC_REM_INV_REQ_ERR).
    InvalidRequest,
    /// Remote access error (IBV_WC_REM_ACCESS_ERR).
    RemoteAccess,
    /// Remote operational error (IBV_WC_REM_OP_ERR).
    RemoteOperational,
}

/// A QP as another context published it: what the responder's rules read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerQp {
    /// Its QP number.
    pub qpn: u32,
    /// Its state.
    pub state: QpState,
    /// Its transport.
    pub qp_type: QpType,
    /// Its PD, in its context's handle space ([`pd_to_raw`]).
    pub pd: PdId,
    /// `qp_access_flags`.
    pub access_flags: u32,
    /// The QP it is connected to (RC, UC).
    pub dest_qpn: u32,
    /// Its RNR NAK timer code.
    pub min_rnr_timer: u8,
    /// Its responder resources for READ and atomics.
    pub max_dest_rd_atomic: u8,
    /// Its Q_Key (UD).
    pub qkey: u32,
    /// Its incarnation (how many times it was reset, wrapping).
    pub incarnation: u16,
    /// Its path MTU in bytes (0: not known, nothing checked).
    pub mtu: u32,
    /// The PSN its responder started at (`rq_psn`, 24 bits).
    pub rq_psn: u32,
}

/// The async event a target QP raises when a request fails there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetEvent {
    /// IBV_EVENT_QP_ACCESS_ERR.
    AccessErr,
    /// IBV_EVENT_QP_REQ_ERR.
    ReqErr,
    /// None (a receive WR that could not take the data).
    None,
}

/// A copy that could not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFault {
    /// The requester's memory.
    Local,
    /// The target's memory.
    Remote,
    /// The target process is gone.
    Gone,
}

/// The target's published state and memory, as a requester reaches them.
/// The embedder implements it over shared memory and cross-memory attach;
/// tests over a second engine.
pub trait DirectTarget: MrLookup {
    /// The target QP, if it exists.
    fn qp(&self) -> Option<PeerQp>;
    /// The oldest receive WR no consumer claimed, without claiming it.
    fn next_recv(&self) -> Option<RecvWqe>;
    /// Claims receive WR `seq` (as `next_recv` gave it) if it is still
    /// the oldest unclaimed one; false if another consumer (a peer, the
    /// target itself, a flush) took it meanwhile. A claim is final.
    fn take_recv(&mut self, seq: u64) -> bool;
    /// Copies the payload into the target's `to` ranges.
    fn write(&mut self, from: &Payload, to: &[Seg]) -> Result<(), CopyFault>;
    /// Copies the target's `from` ranges into our `to` ranges.
    fn read(&mut self, from: Seg, to: &[Seg]) -> Result<(), CopyFault>;
    /// Compare-and-swap (`Some(compare)`) or fetch-and-add at an aligned
    /// target address, atomic with respect to every other atomic on it.
    fn atomic(&mut self, addr: u64, compare: Option<u64>, value: u64) -> Result<u64, CopyFault>;
    /// Queues a completion of receive WR `seq` (claimed) on the target
    /// QP's receive CQ.
    fn deliver(&mut self, seq: u64, wc: WorkCompletion, solicited: bool);
    /// The target QP got its first request in RTR (IBV_EVENT_COMM_EST).
    fn comm_est(&mut self);
    /// The target QP, in the incarnation `incarnation` the request found,
    /// enters the error state, raising `event` (a QP reset since is left
    /// alone).
    fn fail(&mut self, incarnation: u16, event: TargetEvent);
    /// An access begins: the QP and MRs looked up from now until
    /// `access_end` must stay as they were found (`ibv_dereg_mr`,
    /// `ibv_destroy_qp` and a move out of RTR/RTS wait for it).
    fn access_begin(&mut self) {}
    /// The access that `access_begin` opened is over.
    fn access_end(&mut self) {}
}

/// A PD handle as a number another process can hold.
pub fn pd_to_raw(pd: PdId) -> u64 {
    pd.data().as_ffi()
}

/// The PD handle [`pd_to_raw`] gave.
pub fn pd_from_raw(raw: u64) -> PdId {
    KeyData::from_ffi(raw).into()
}

/// Why a request failed at the target (the responder's faults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Invalid,
    Access,
    Receive(WcStatus),
}

/// Where executing an operation stopped early: a responder fault, or an
/// outcome that is not a fault (no receive WR, a copy that failed on the
/// requester's side, a target gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Fault(Fault),
    Outcome(DirectOutcome),
}

impl From<Fault> for Stop {
    fn from(fault: Fault) -> Stop {
        Stop::Fault(fault)
    }
}

type Step = Result<DirectOutcome, Stop>;

/// Executes `op` at the target with the responder's rules.
pub fn execute(op: &DirectOp, target: &mut dyn DirectTarget) -> DirectOutcome {
    // The access begins before the QP is looked at: a target that moves
    // its QP out of RTR/RTS (or destroys it) and then waits for the
    // accesses under way knows that none found it accepting, as a NIC's
    // destroy fences its responder.
    target.access_begin();
    let Some(qp) = target.qp().filter(|qp| accepts(qp, op)) else {
        target.access_end();
        return DirectOutcome::Dropped;
    };
    // COMM_EST is an event of connection establishment: RC and UC only.
    if qp.state == QpState::Rtr && qp.qp_type != QpType::Ud {
        target.comm_est();
    }
    if let Some(ud) = op.ud {
        let result = receive_datagram(op, &ud, &qp, target);
        target.access_end();
        return match result {
            Ok(outcome) | Err(Stop::Outcome(outcome)) => outcome,
            Err(Stop::Fault(_)) => {
                // A receive WR whose memory is unusable: it completed in
                // error and the target QP fails; the sender's datagram
                // was sent all the same.
                target.fail(qp.incarnation, TargetEvent::None);
                DirectOutcome::Done
            }
        };
    }
    let result = run_request(op, &qp, target);
    target.access_end();
    match result {
        Ok(outcome) | Err(Stop::Outcome(outcome)) => outcome,
        Err(Stop::Fault(fault)) if qp.qp_type == QpType::Uc => uc_fault(target, &qp, fault),
        Err(Stop::Fault(fault)) => rc_fault(target, &qp, fault),
    }
}

/// The request itself, between the MR lookups and the last copy.
fn run_request(op: &DirectOp, qp: &PeerQp, target: &mut dyn DirectTarget) -> Step {
    let qp = *qp;
    match op.kind {
        DirectKind::Send { imm, inv } => receive_send(op, &qp, target, imm, inv),
        DirectKind::Write { rkey, va, imm } => write(op, &qp, target, rkey, va, imm),
        DirectKind::Read { rkey, va } => read(op, &qp, target, rkey, va),
        DirectKind::CompareSwap {
            rkey,
            va,
            compare,
            swap,
        } => atomic(&qp, target, rkey, va, Some(compare), swap),
        DirectKind::FetchAdd { rkey, va, add } => atomic(&qp, target, rkey, va, None, add),
    }
}

/// The checks every packet passes before the responder looks at it: the
/// QP receives (RTR and after), the transport matches, and a connected QP
/// takes requests only from the QP it is connected to.
///
/// An RC responder also takes only the PSN it expects. On the same-host
/// path no packet carries one, and both ends move in step, so the ends
/// agree for good exactly when the requester started at the PSN the
/// responder was started at. Where they do not, every packet on the wire
/// is a duplicate or out of sequence and nothing executes (the requester
/// ends in RETRY_EXC_ERR): so here. UC takes a new message at any PSN,
/// as rxe's `check_psn` resyncs at a FIRST or ONLY (this engine's wire
/// responder resyncs only ahead, taking a packet behind for a duplicate:
/// conformance.md).
fn accepts(qp: &PeerQp, op: &DirectOp) -> bool {
    let receiving = matches!(
        qp.state,
        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
    );
    let connected = qp.qp_type == QpType::Ud || qp.dest_qpn == op.src_qpn;
    let in_sequence = qp.qp_type != QpType::Rc || qp.rq_psn == op.sq_psn;
    receiving && qp.qp_type == op.qp_type && connected && in_sequence
}

/// A fatal RC request error: the NAK, the event, the error state.
fn rc_fault(target: &mut dyn DirectTarget, qp: &PeerQp, fault: Fault) -> DirectOutcome {
    let (nak, event) = match fault {
        Fault::Access => (NakKind::RemoteAccess, TargetEvent::AccessErr),
        Fault::Invalid | Fault::Receive(WcStatus::LocLenErr) => {
            (NakKind::InvalidRequest, TargetEvent::ReqErr)
        }
        Fault::Receive(_) => (NakKind::RemoteOperational, TargetEvent::None),
    };
    target.fail(qp.incarnation, event);
    DirectOutcome::Nak(nak)
}

/// UC has no NAKs: the message is dropped and the QP goes on, except
/// that a receive WR whose memory is unusable fails the QP.
fn uc_fault(target: &mut dyn DirectTarget, qp: &PeerQp, fault: Fault) -> DirectOutcome {
    if let Fault::Receive(_) = fault {
        target.fail(qp.incarnation, TargetEvent::None);
    }
    DirectOutcome::Done
}

/// The wire responder's packet length checks (IBTA ch. 9; rxe
/// `check_length`), which fail a message at its first packet: an only
/// packet carries at most the responder's path MTU, a first one exactly
/// that. So ends that disagree on the path MTU fail every message longer
/// than the smaller of the two, on the wire and here alike (the same-host
/// path once moved it, and a program with that mistake worked on one
/// host only).
fn check_packet_sizes(op: &DirectOp, qp: &PeerQp) -> Result<(), Fault> {
    let fits = match op.packets {
        _ if qp.mtu == 0 => true,
        1 => op.len <= qp.mtu,
        _ => op.mtu == qp.mtu,
    };
    if fits {
        Ok(())
    } else {
        Err(Fault::Invalid)
    }
}

/// Whether the QP grants the remote right `need` (`qp_access_flags`).
fn grants(qp: &PeerQp, need: AccessFlags) -> Result<(), Fault> {
    if AccessFlags::from_bits_truncate(qp.access_flags).contains(need) {
        Ok(())
    } else {
        Err(Fault::Invalid)
    }
}

/// Where `[va, va+len)` under `rkey` is in the target, with `need` rights.
fn translate(
    qp: &PeerQp,
    target: &dyn DirectTarget,
    rkey: u32,
    va: u64,
    len: u32,
    need: AccessFlags,
) -> Result<Seg, Fault> {
    let addr =
        remote_addr(target, qp.pd, rkey, va, u64::from(len), need).map_err(|_| Fault::Access)?;
    Ok(Seg {
        addr,
        len: u64::from(len),
    })
}

/// A copy's failure: on the target's side it is `remote`; on ours the
/// WR fails locally; a target gone is a lost request.
fn copy_stop(fault: CopyFault, remote: Fault) -> Stop {
    match fault {
        CopyFault::Remote => Stop::Fault(remote),
        CopyFault::Local => Stop::Outcome(DirectOutcome::LocalFault),
        CopyFault::Gone => Stop::Outcome(DirectOutcome::Dropped),
    }
}

/// No receive WR: RC waits (RNR NAK); UC drops the message.
fn not_ready(qp: &PeerQp) -> Stop {
    Stop::Outcome(match qp.qp_type {
        QpType::Rc => DirectOutcome::Rnr {
            timer: qp.min_rnr_timer,
        },
        _ => DirectOutcome::Done,
    })
}

fn receive_send(
    op: &DirectOp,
    qp: &PeerQp,
    target: &mut dyn DirectTarget,
    imm: Option<u32>,
    inv: Option<u32>,
) -> Step {
    if let Err(fault) = check_packet_sizes(op, qp) {
        if qp.qp_type == QpType::Rc {
            // Its receive WR taken first (RNR without), as on the wire.
            fail_claimed(op, qp, target, WcStatus::RemInvReqErr)?;
        }
        return Err(fault.into());
    }
    let wqe = claim_recv(op, qp, target, true)?;
    let len = u64::from(op.len);
    let to = match scatter_plan(target, qp.pd, &wqe.sg_list, 0, len) {
        Ok(to) => to,
        Err(err) => {
            let err = first_packet_error(op, qp, target, &wqe).unwrap_or(err);
            return Err(fail_receive(qp, target, &wqe, local_status(err)).into());
        }
    };
    match target.write(&op.payload, &to) {
        Ok(()) => {}
        Err(CopyFault::Remote) => {
            return Err(fail_receive(qp, target, &wqe, WcStatus::LocProtErr).into())
        }
        Err(other) => return Err(copy_stop(other, Fault::Access)),
    }
    if inv.is_some() {
        // Only a fast-register MR or a bound memory window can be
        // invalidated, and softverbs offers neither (as the wire
        // responder's `invalidate_for_send`): an invalid request.
        fail_receive(qp, target, &wqe, WcStatus::RemInvReqErr);
        return Err(Fault::Invalid.into());
    }
    complete_receive(op, qp, target, &wqe, WcOpcode::Recv, imm)
}

/// The error the wire responder meets first for a SEND whose receive WR
/// cannot take it: it scatters packet by packet, so the first packet
/// that reaches an unusable SGE (a protection error) or the end of the
/// list (a length error) decides, where the whole message's plan would
/// name the length first.
fn first_packet_error(
    op: &DirectOp,
    qp: &PeerQp,
    target: &dyn DirectTarget,
    wqe: &RecvWqe,
) -> Option<LocalAccessError> {
    let (len, mtu) = (u64::from(op.len), u64::from(op.mtu.max(1)));
    (0..len.div_ceil(mtu)).find_map(|p| {
        let start = p * mtu;
        let packet = mtu.min(len - start);
        scatter_plan(target, qp.pd, &wqe.sg_list, start, packet).err()
    })
}

/// Claims the receive WR a message goes to, before a byte is written
/// into it: a WR another consumer claimed (a peer, the target's own
/// responder, a flush) is never written. No WR: RNR (RC) or the message
/// is lost (UC, UD). A UC SEND (a UD datagram with its GRH) longer than
/// the WR is dropped and the WR stays for the next one (class D); a
/// WRITE_WITH_IMM's data goes to its RETH's range, not into the WR
/// (`into_wr` false), so the WR's length does not matter.
fn claim_recv(
    op: &DirectOp,
    qp: &PeerQp,
    target: &mut dyn DirectTarget,
    into_wr: bool,
) -> Result<RecvWqe, Stop> {
    let needed = match qp.qp_type {
        _ if !into_wr => 0,
        QpType::Rc => 0,
        QpType::Uc => u64::from(op.len),
        QpType::Ud => GRH_LEN as u64 + u64::from(op.len),
    };
    for _ in 0..CLAIM_TRIES {
        let wqe = target.next_recv().ok_or_else(|| not_ready(qp))?;
        if sge_total(&wqe.sg_list) < needed {
            return Err(Stop::Outcome(DirectOutcome::Done));
        }
        if target.take_recv(wqe.seq) {
            return Ok(wqe);
        }
    }
    // Other consumers kept winning: as a request lost, retried.
    Err(Stop::Outcome(DirectOutcome::Dropped))
}

/// Claims that lose a race to other consumers before the request is
/// given up as lost.
const CLAIM_TRIES: u32 = 64;

/// Completes the receive WR a message arrived in (claimed).
fn complete_receive(
    op: &DirectOp,
    qp: &PeerQp,
    target: &mut dyn DirectTarget,
    wqe: &RecvWqe,
    opcode: WcOpcode,
    imm: Option<u32>,
) -> Step {
    let mut wc = WorkCompletion {
        status: WcStatus::Success,
        byte_len: op.len,
        ..WorkCompletion::flushed(wqe.wr_id, opcode, qp.qpn)
    };
    if let Some(imm) = imm {
        wc.imm_data_or_inv_rkey = imm;
        wc.wc_flags |= wc_flags::WITH_IMM;
    }
    target.deliver(wqe.seq, wc, op.solicited);
    Ok(DirectOutcome::Done)
}

/// A receive WR (claimed) that could not take the data completes in
/// error.
fn fail_receive(
    qp: &PeerQp,
    target: &mut dyn DirectTarget,
    wqe: &RecvWqe,
    status: WcStatus,
) -> Fault {
    deliver_failed(qp, target, wqe, status);
    Fault::Receive(status)
}

/// Claims the receive WR a request takes before it is checked (RNR
/// without one) and completes it with the `status` the request fails
/// with, as the wire responder's `fail_taken_receive` does.
fn fail_claimed(
    op: &DirectOp,
    qp: &PeerQp,
    target: &mut dyn DirectTarget,
    status: WcStatus,
) -> Result<(), Stop> {
    let wqe = claim_recv(op, qp, target, false)?;
    deliver_failed(qp, target, &wqe, status);
    Ok(())
}

/// Completes a claimed receive WR with `status`.
fn deliver_failed(qp: &PeerQp, target: &mut dyn DirectTarget, wqe: &RecvWqe, status: WcStatus) {
    let wc = WorkCompletion {
        status,
        ..WorkCompletion::flushed(wqe.wr_id, WcOpcode::Recv, qp.qpn)
    };
    target.deliver(wqe.seq, wc, false);
}

/// A UD datagram: the Q_Key must match (else it is dropped, as a NIC
/// drops it), then it lands in the oldest receive WR behind a GRH of the
/// sender's and the destination's addresses, as from the wire.
fn receive_datagram(
    op: &DirectOp,
    ud: &UdDest,
    qp: &PeerQp,
    target: &mut dyn DirectTarget,
) -> Step {
    if ud.qkey != qp.qkey {
        return Ok(DirectOutcome::Done);
    }
    let wqe = claim_recv(op, qp, target, true)?;
    let len = u64::from(op.len);
    let arrival = Arrival {
        src_gid: ud.src_gid,
        dst_gid: ud.dst_gid,
        marked: false,
        traffic_class: ud.traffic_class,
    };
    let grh = grh_bytes(&arrival, op.len as usize);
    let planned = scatter_plan(target, qp.pd, &wqe.sg_list, 0, GRH_LEN as u64).and_then(|g| {
        let data = scatter_plan(target, qp.pd, &wqe.sg_list, GRH_LEN as u64, len)?;
        Ok((g, data))
    });
    let (to_grh, to_data) = match planned {
        Ok(plan) => plan,
        Err(err) => return Err(fail_receive(qp, target, &wqe, local_status(err)).into()),
    };
    let copied = target
        .write(&Payload::Inline(InlineData::from_slice(&grh)), &to_grh)
        .and_then(|()| target.write(&op.payload, &to_data));
    match copied {
        Ok(()) => {}
        Err(CopyFault::Remote) => {
            return Err(fail_receive(qp, target, &wqe, WcStatus::LocProtErr).into())
        }
        // The datagram is lost; the WR stays claimed until a flush.
        Err(CopyFault::Local) => return Ok(DirectOutcome::LocalFault),
        Err(CopyFault::Gone) => return Ok(DirectOutcome::Dropped),
    }
    let mut wc = WorkCompletion {
        status: WcStatus::Success,
        byte_len: GRH_LEN as u32 + op.len,
        src_qp: op.src_qpn,
        wc_flags: wc_flags::GRH,
        sl: ud_sl(ud.dst_gid),
        ..WorkCompletion::flushed(wqe.wr_id, WcOpcode::Recv, qp.qpn)
    };
    if let DirectKind::Send { imm: Some(imm), .. } = op.kind {
        wc.imm_data_or_inv_rkey = imm;
        wc.wc_flags |= wc_flags::WITH_IMM;
    }
    target.deliver(wqe.seq, wc, op.solicited);
    Ok(DirectOutcome::Done)
}

fn local_status(err: LocalAccessError) -> WcStatus {
    crate::requester::local_status(err)
}

fn write(
    op: &DirectOp,
    qp: &PeerQp,
    target: &mut dyn DirectTarget,
    rkey: u32,
    va: u64,
    imm: Option<u32>,
) -> Step {
    grants(qp, AccessFlags::REMOTE_WRITE)?;
    if imm.is_some() && op.packets == 1 && target.next_recv().is_none() {
        // A WRITE_ONLY_WITH_IMM finds no receive WR before its rkey is
        // looked at, in the kernel's order (rxe: check_resource, then
        // check_rkey), as on the wire; a longer one has its rkey checked
        // at its FIRST packet and wants a receive WR only at its LAST.
        return Err(not_ready(qp));
    }
    if let Err(fault) = check_packet_sizes(op, qp) {
        if let (Some(_), 1, QpType::Rc) = (imm, op.packets, qp.qp_type) {
            // Its receive WR taken first, as for a bad rkey below.
            fail_claimed(op, qp, target, WcStatus::RemInvReqErr)?;
        }
        return Err(fault.into());
    }
    let dest = if op.len > 0 {
        let dest = translate(qp, target, rkey, va, op.len, AccessFlags::REMOTE_WRITE);
        if let (Err(fault), Some(_), 1, QpType::Rc) = (&dest, imm, op.packets, qp.qp_type) {
            // As on the wire, an RC WRITE_ONLY_WITH_IMM has taken its
            // receive WR before its rkey is looked at: the WR fails with
            // it. (UC drops the message and keeps the WR.)
            fail_claimed(op, qp, target, WcStatus::RemAccessErr)?;
            return Err((*fault).into());
        }
        Some(dest?)
    } else {
        None
    };
    // The receive WR is claimed before the data lands, as the wire
    // responder checks for one before it writes (RNR otherwise); a write
    // that then fails leaves it claimed, and the fault's error state
    // flushes it.
    let wqe = match imm {
        Some(_) => Some(claim_recv(op, qp, target, false)?),
        None => None,
    };
    if let Some(dest) = dest {
        // Memory the application unmapped under its MR: a NIC's
        // translation fault, answered as a remote access error.
        target
            .write(&op.payload, &[dest])
            .map_err(|f| copy_stop(f, Fault::Access))?;
    }
    match wqe {
        Some(wqe) => complete_receive(op, qp, target, &wqe, WcOpcode::RecvRdmaWithImm, imm),
        None => Ok(DirectOutcome::Done),
    }
}

fn read(op: &DirectOp, qp: &PeerQp, target: &mut dyn DirectTarget, rkey: u32, va: u64) -> Step {
    grants(qp, AccessFlags::REMOTE_READ)?;
    resources(qp)?;
    if op.len == 0 {
        return Ok(DirectOutcome::Done);
    }
    let from = translate(qp, target, rkey, va, op.len, AccessFlags::REMOTE_READ)?;
    if !responses_fit(op, qp) {
        return Ok(DirectOutcome::BadResponse);
    }
    let Payload::Memory(to) = &op.payload else {
        return Ok(DirectOutcome::LocalFault); // the response finds no place
    };
    target
        .read(from, to)
        .map_err(|f| copy_stop(f, Fault::Access))?;
    Ok(DirectOutcome::Done)
}

/// Whether the READ responses the target would send, one per its path
/// MTU, are those the requester takes, one per its own: the first is
/// then as long as it expects, and an ONLY where it expects one. They are
/// unless the ends disagree on the MTU and the READ is longer than the
/// smaller; then the requester fails the first response (BAD_RESP_ERR,
/// `completer.rs`), before it places any of it in its memory.
fn responses_fit(op: &DirectOp, qp: &PeerQp) -> bool {
    qp.mtu == 0 || op.mtu == qp.mtu || op.len <= op.mtu.min(qp.mtu)
}

/// READs and atomics need a responder resource (IBTA 9.4.4). Each one
/// here is answered before the next is handed out, so it never waits
/// behind others as on the wire, where a responder holding
/// `max_dest_rd_atomic` unanswered READs refuses the next one: that
/// depends on timing there, and cannot happen here.
fn resources(qp: &PeerQp) -> Result<(), Fault> {
    if qp.max_dest_rd_atomic == 0 {
        return Err(Fault::Invalid);
    }
    Ok(())
}

fn atomic(
    qp: &PeerQp,
    target: &mut dyn DirectTarget,
    rkey: u32,
    va: u64,
    compare: Option<u64>,
    value: u64,
) -> Step {
    grants(qp, AccessFlags::REMOTE_ATOMIC)?;
    resources(qp)?;
    // The R_Key and range first, as on the wire (`Responder::receive_atomic`).
    let at = translate(qp, target, rkey, va, 8, AccessFlags::REMOTE_ATOMIC)?;
    if va & 7 != 0 {
        return Err(Fault::Invalid.into()); // IBTA: misaligned atomics are invalid
    }
    if at.addr % 8 != 0 {
        // The host word must be aligned too (rxe checks the translated
        // address). reg_mr keeps an iova at its address's offset within
        // the page, so this holds already; checked again where the
        // memory is touched.
        return Err(Fault::Invalid.into());
    }
    let orig = target
        .atomic(at.addr, compare, value)
        .map_err(|f| copy_stop(f, Fault::Access))?;
    Ok(DirectOutcome::Atomic(orig))
}
