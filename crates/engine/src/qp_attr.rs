//! The attribute structures of QP verbs: `struct ibv_qp_attr`,
//! `struct ibv_qp_cap` and `struct ibv_qp_init_attr`.

use crate::ah_attr::AhAttr;
use crate::handles::{CqId, SrqId};

/// `struct ibv_qp_cap`: queue sizes of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpCap {
    /// Outstanding send WRs.
    pub max_send_wr: u32,
    /// Outstanding receive WRs.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send WR.
    pub max_inline_data: u32,
}

/// `enum ibv_mig_state` value IBV_MIG_MIGRATED: no alternate path armed.
pub const MIG_MIGRATED: u32 = 0;

/// `struct ibv_qp_attr`. Fields that are enums in C stay raw numbers here
/// because an application may pass anything; `modify_qp` validates the ones
/// its mask names and ignores the rest, as the verb requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpAttr {
    /// `enum ibv_qp_state`: the state to move to.
    pub qp_state: u32,
    /// `enum ibv_qp_state`: the state the caller believes the QP is in.
    pub cur_qp_state: u32,
    /// `enum ibv_mtu`.
    pub path_mtu: u32,
    /// `enum ibv_mig_state`.
    pub path_mig_state: u32,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Expected PSN of the next incoming request (24 bits).
    pub rq_psn: u32,
    /// PSN of the next request sent (24 bits).
    pub sq_psn: u32,
    /// Remote QP number (RC, UC).
    pub dest_qp_num: u32,
    /// `ibv_access_flags` allowed to remote requesters.
    pub qp_access_flags: u32,
    /// Queue sizes.
    pub cap: QpCap,
    /// Primary path.
    pub ah_attr: AhAttr,
    /// Alternate path.
    pub alt_ah_attr: AhAttr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// Raise IBV_EVENT_SQ_DRAINED when SQD is reached.
    pub en_sqd_async_notify: u8,
    /// Output only: the send queue is still draining.
    pub sq_draining: u8,
    /// Initiator depth: outstanding READ/atomic requests (RC).
    pub max_rd_atomic: u8,
    /// Responder resources for incoming READ/atomic requests (RC).
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code (RC).
    pub min_rnr_timer: u8,
    /// Port number.
    pub port_num: u8,
    /// Local ACK timeout exponent (RC).
    pub timeout: u8,
    /// Transport retries (RC).
    pub retry_cnt: u8,
    /// RNR retries, 7 = forever (RC).
    pub rnr_retry: u8,
    /// Alternate port.
    pub alt_port_num: u8,
    /// Alternate path timeout.
    pub alt_timeout: u8,
    /// Packet pacing limit, kbps.
    pub rate_limit: u32,
}

/// `struct ibv_qp_init_attr` (the fields the engine needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    /// CQ of the send queue.
    pub send_cq: CqId,
    /// CQ of the receive queue.
    pub recv_cq: CqId,
    /// SRQ replacing the receive queue.
    pub srq: Option<SrqId>,
    /// Requested queue sizes; the actual ones are returned.
    pub cap: QpCap,
    /// Raw `enum ibv_qp_type`.
    pub qp_type: u32,
    /// Every send WR generates a completion.
    pub sq_sig_all: bool,
}
