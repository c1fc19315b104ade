//! QP states and QP transport types, with the numbering of `<infiniband/verbs.h>`.

/// `enum ibv_qp_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum QpState {
    /// IBV_QPS_RESET: newly created, queues empty.
    Reset = 0,
    /// IBV_QPS_INIT: receive WRs may be posted.
    Init = 1,
    /// IBV_QPS_RTR: ready to receive.
    Rtr = 2,
    /// IBV_QPS_RTS: ready to send.
    Rts = 3,
    /// IBV_QPS_SQD: send queue drained (or draining).
    Sqd = 4,
    /// IBV_QPS_SQE: send queue error (UC and UD only).
    Sqe = 5,
    /// IBV_QPS_ERR: error; all WRs are flushed.
    Err = 6,
}

impl QpState {
    /// Every state, in numeric order.
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Err,
    ];

    /// Decodes a raw `ibv_qp_state`; IBV_QPS_UNKNOWN (7) and anything else
    /// is not a state a QP can be moved to.
    pub fn from_raw(raw: u32) -> Option<QpState> {
        QpState::ALL.get(raw as usize).copied()
    }

    /// The name used in the spec and in docs/conformance.md.
    pub const fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        }
    }
}

/// `enum ibv_qp_type` values softverbs implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum QpType {
    /// IBV_QPT_RC: reliable connected.
    Rc = 2,
    /// IBV_QPT_UC: unreliable connected.
    Uc = 3,
    /// IBV_QPT_UD: unreliable datagram.
    Ud = 4,
}

impl QpType {
    /// Every supported type.
    pub const ALL: [QpType; 3] = [QpType::Rc, QpType::Uc, QpType::Ud];

    /// Decodes a raw `ibv_qp_type`; other types (RAW_PACKET, XRC, DRIVER,
    /// unknown numbers) are not implemented.
    pub fn from_raw(raw: u32) -> Option<QpType> {
        QpType::ALL.into_iter().find(|t| *t as u32 == raw)
    }

    /// The other values of `enum ibv_qp_type`: RAW_PACKET (8), XRC_SEND
    /// (9), XRC_RECV (10) and DRIVER (0xff), types softverbs does not offer.
    pub const fn is_other_type(raw: u32) -> bool {
        matches!(raw, 8..=10 | 0xff)
    }

    /// The name used in docs/conformance.md.
    pub const fn name(self) -> &'static str {
        match self {
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
        }
    }

    /// Connected types have a remote QP, a path and PSNs on both sides.
    pub const fn is_connected(self) -> bool {
        matches!(self, QpType::Rc | QpType::Uc)
    }
}
