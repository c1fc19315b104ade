//! Work requests as posted by the application (`struct ibv_sge`,
//! `struct ibv_recv_wr`, `struct ibv_send_wr`) and the queue entries the
//! engine keeps for them.

use crate::handles::AhId;
use crate::qp_state::QpType;

/// `struct ibv_sge`: one scatter/gather element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Start address in the registered region.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the region.
    pub lkey: u32,
}

/// A receive WR (`struct ibv_recv_wr` without the list link).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where received data goes.
    pub sg_list: &'a [Sge],
}

/// A WR's SGEs as a queue holds them: the common few inline, so posting
/// a WR allocates nothing.
pub type SgeList = smallvec::SmallVec<[Sge; 4]>;

/// A send WR's inline data as the send queue holds it: small messages
/// inline, so posting one allocates nothing.
pub type InlineData = smallvec::SmallVec<[u8; 64]>;

/// A receive WR held by a receive queue or SRQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWqe {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where received data goes.
    pub sg_list: SgeList,
    /// Its number in its queue, unique for the queue's life: what a
    /// same-host peer's delivery names (`recv_queue.rs`).
    pub seq: u64,
}

impl RecvWqe {
    /// Copies a posted WR into a queue entry (numbered when queued);
    /// ENOMEM if its SGEs beyond those held in place find no memory.
    pub fn new(wr: &RecvWr<'_>) -> crate::error::VerbsResult<RecvWqe> {
        Ok(RecvWqe {
            wr_id: wr.wr_id,
            sg_list: crate::room::sge_list(wr.sg_list)?,
            seq: 0,
        })
    }
}

/// `enum ibv_wr_opcode`.
pub mod send_opcode {
    /// IBV_WR_RDMA_WRITE
    pub const RDMA_WRITE: u32 = 0;
    /// IBV_WR_RDMA_WRITE_WITH_IMM
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    /// IBV_WR_SEND
    pub const SEND: u32 = 2;
    /// IBV_WR_SEND_WITH_IMM
    pub const SEND_WITH_IMM: u32 = 3;
    /// IBV_WR_RDMA_READ
    pub const RDMA_READ: u32 = 4;
    /// IBV_WR_ATOMIC_CMP_AND_SWP
    pub const ATOMIC_CMP_AND_SWP: u32 = 5;
    /// IBV_WR_ATOMIC_FETCH_AND_ADD
    pub const ATOMIC_FETCH_AND_ADD: u32 = 6;
    /// IBV_WR_LOCAL_INV
    pub const LOCAL_INV: u32 = 7;
    /// IBV_WR_BIND_MW
    pub const BIND_MW: u32 = 8;
    /// IBV_WR_SEND_WITH_INV
    pub const SEND_WITH_INV: u32 = 9;
}

/// `enum ibv_send_flags`.
pub mod send_flags {
    /// IBV_SEND_FENCE
    pub const FENCE: u32 = 1 << 0;
    /// IBV_SEND_SIGNALED
    pub const SIGNALED: u32 = 1 << 1;
    /// IBV_SEND_SOLICITED
    pub const SOLICITED: u32 = 1 << 2;
    /// IBV_SEND_INLINE
    pub const INLINE: u32 = 1 << 3;
    /// All flags softverbs accepts (IBV_SEND_IP_CSUM is for raw QPs only).
    pub const KNOWN: u32 = FENCE | SIGNALED | SOLICITED | INLINE;
}

/// Whether a QP type can carry an opcode: RC everything but memory-window
/// binds; UC sends and writes (its wire opcodes 0x20-0x2B have no READ,
/// atomic or invalidate); UD sends only (IBTA vol. 1 chapter 9, the
/// operations each transport service supports).
pub fn opcode_allowed(ty: QpType, opcode: u32) -> bool {
    use send_opcode::*;
    match ty {
        QpType::Rc => matches!(
            opcode,
            RDMA_WRITE
                | RDMA_WRITE_WITH_IMM
                | SEND
                | SEND_WITH_IMM
                | RDMA_READ
                | ATOMIC_CMP_AND_SWP
                | ATOMIC_FETCH_AND_ADD
                | LOCAL_INV
                | SEND_WITH_INV
        ),
        QpType::Uc => matches!(
            opcode,
            RDMA_WRITE | RDMA_WRITE_WITH_IMM | SEND | SEND_WITH_IMM | LOCAL_INV
        ),
        QpType::Ud => matches!(opcode, SEND | SEND_WITH_IMM),
    }
}

/// Remote target of RDMA WRITE and READ (`wr.rdma`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RdmaTarget {
    /// Remote virtual address.
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// Remote target and operands of an atomic (`wr.atomic`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AtomicTarget {
    /// Remote virtual address (8-byte aligned).
    pub remote_addr: u64,
    /// Compare value (CMP_AND_SWP) or addend (FETCH_AND_ADD).
    pub compare_add: u64,
    /// Swap value (CMP_AND_SWP).
    pub swap: u64,
    /// Remote key.
    pub rkey: u32,
}

/// Destination of a UD send (`wr.ud`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdTarget {
    /// Address handle.
    pub ah: AhId,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Q_Key; with the high bit set the QP's own Q_Key is used.
    pub remote_qkey: u32,
}

/// A send WR (`struct ibv_send_wr` without the list link). Inline data is
/// passed as bytes: the provider copies it out of the application's buffers
/// at post time, which is what IBV_SEND_INLINE promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// `enum ibv_wr_opcode`.
    pub opcode: u32,
    /// `enum ibv_send_flags`.
    pub send_flags: u32,
    /// Gathered data (ignored with IBV_SEND_INLINE).
    pub sg_list: &'a [Sge],
    /// Inline payload when IBV_SEND_INLINE is set.
    pub inline_data: &'a [u8],
    /// Immediate data (network order) or the rkey to invalidate.
    pub imm_data_or_inv_rkey: u32,
    /// RDMA target.
    pub rdma: RdmaTarget,
    /// Atomic target.
    pub atomic: AtomicTarget,
    /// UD destination.
    pub ud: Option<UdTarget>,
}

/// A send WR held by a send queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWqe {
    /// Returned in the completion.
    pub wr_id: u64,
    /// `enum ibv_wr_opcode`.
    pub opcode: u32,
    /// `enum ibv_send_flags`.
    pub send_flags: u32,
    /// Whether a successful completion is reported.
    pub signaled: bool,
    /// Gathered data.
    pub sg_list: SgeList,
    /// Inline payload.
    pub inline_data: InlineData,
    /// Immediate data or rkey to invalidate.
    pub imm_data_or_inv_rkey: u32,
    /// RDMA target.
    pub rdma: RdmaTarget,
    /// Atomic target.
    pub atomic: AtomicTarget,
    /// UD destination.
    pub ud: Option<UdTarget>,
}
