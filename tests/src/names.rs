//! QP states and types by number (`<infiniband/verbs.h>`) and by the names
//! docs/conformance.md uses. Written here rather than taken from the
//! engine's `from_raw` so that a wrong decoding there is caught.

use softverbs_engine::{QpState, QpType};

/// Every state, in numeric order.
pub const STATES: [QpState; 7] = [
    QpState::Reset,
    QpState::Init,
    QpState::Rtr,
    QpState::Rts,
    QpState::Sqd,
    QpState::Sqe,
    QpState::Err,
];

/// Every QP type softverbs implements.
pub const TYPES: [QpType; 3] = [QpType::Rc, QpType::Uc, QpType::Ud];

/// `enum ibv_qp_state` values 0..=6; IBV_QPS_UNKNOWN (7) and anything
/// larger is not a state.
pub fn state_from_raw(raw: u32) -> Option<QpState> {
    STATES.get(usize::try_from(raw).ok()?).copied()
}

/// IBV_QPT_RC = 2, IBV_QPT_UC = 3, IBV_QPT_UD = 4.
pub fn type_from_raw(raw: u32) -> Option<QpType> {
    match raw {
        2 => Some(QpType::Rc),
        3 => Some(QpType::Uc),
        4 => Some(QpType::Ud),
        _ => None,
    }
}

/// A state as the table writes it.
pub fn state_from_name(name: &str) -> Option<QpState> {
    let names = ["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"];
    let i = names.iter().position(|n| *n == name)?;
    Some(STATES[i])
}

/// A QP type as the table writes it.
pub fn type_from_name(name: &str) -> Option<QpType> {
    match name {
        "RC" => Some(QpType::Rc),
        "UC" => Some(QpType::Uc),
        "UD" => Some(QpType::Ud),
        _ => None,
    }
}

/// The `enum ibv_qp_state` number of a state.
pub fn state_to_raw(state: QpState) -> u32 {
    let i = STATES.iter().position(|s| *s == state);
    i.expect("STATES lists every state") as u32
}
