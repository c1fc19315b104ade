//! The QP state transition table of `ibv_modify_qp`: which transitions are
//! legal for each QP type and which attribute mask bits each one requires or
//! allows. Sources: the InfiniBand Architecture Specification vol. 1,
//! section 11.2.4.2 (Modify Queue Pair, "QP state transition" table), the
//! required-attribute tables of ibv_modify_qp(3) (seed 000) and the bringup
//! guide (seed 004); the same table is written out in docs/conformance.md,
//! which the conformance suite reads and checks this code against.

use crate::attr_mask::QpAttrMask as M;
use crate::qp_state::{QpState, QpType};

/// What one legal transition asks of the attribute mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransitionRule {
    /// Bits that must be present (besides IBV_QP_STATE).
    pub required: M,
    /// Bits that may be present.
    pub optional: M,
}

const fn rule(required: M, optional: M) -> Option<TransitionRule> {
    Some(TransitionRule { required, optional })
}

const NONE: M = M::empty();

/// The rule for moving a QP of type `ty` from `cur` to `next`, or `None`
/// when the transition is illegal (EINVAL).
pub fn transition_rule(cur: QpState, next: QpState, ty: QpType) -> Option<TransitionRule> {
    use QpState::*;
    match (cur, next) {
        // Any state may be reset, and any but RESET put in error, with no
        // other attribute (the kernel's qp_state_table has no RESET->ERR).
        (Reset, Err) => None,
        (_, Reset) | (_, Err) => rule(NONE, NONE),
        (Reset, Init) => rule(init_bits(ty), NONE),
        (Init, Init) => rule(NONE, init_bits(ty)),
        (Init, Rtr) => init_to_rtr(ty),
        (Rtr, Rts) => rtr_to_rts(ty),
        (Rts, Rts) | (Sqd, Rts) => rts_optional(ty),
        (Rts, Sqd) => rule(NONE, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => sqd_to_sqd(ty),
        (Sqe, Rts) => sqe_to_rts(ty),
        _ => None,
    }
}

/// RESET->INIT requires, and INIT->INIT allows, these.
fn init_bits(ty: QpType) -> M {
    match ty {
        QpType::Ud => M::PKEY_INDEX | M::PORT | M::QKEY,
        QpType::Rc | QpType::Uc => M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
    }
}

fn init_to_rtr(ty: QpType) -> Option<TransitionRule> {
    let connected = M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
    let connected_opt = M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX;
    match ty {
        QpType::Ud => rule(NONE, M::PKEY_INDEX | M::QKEY),
        QpType::Uc => rule(connected, connected_opt),
        QpType::Rc => rule(
            connected | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER,
            connected_opt,
        ),
    }
}

fn rtr_to_rts(ty: QpType) -> Option<TransitionRule> {
    match ty {
        QpType::Ud => rule(M::SQ_PSN, M::CUR_STATE | M::QKEY),
        QpType::Uc => rule(
            M::SQ_PSN,
            M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::PATH_MIG_STATE,
        ),
        QpType::Rc => rule(
            M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC,
            M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::MIN_RNR_TIMER | M::PATH_MIG_STATE,
        ),
    }
}

/// RTS->RTS and SQD->RTS: nothing required, these allowed.
fn rts_optional(ty: QpType) -> Option<TransitionRule> {
    match ty {
        QpType::Ud => rule(NONE, M::CUR_STATE | M::QKEY),
        QpType::Uc => rule(
            NONE,
            M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE,
        ),
        QpType::Rc => rule(
            NONE,
            M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE | M::MIN_RNR_TIMER,
        ),
    }
}

fn sqd_to_sqd(ty: QpType) -> Option<TransitionRule> {
    match ty {
        QpType::Ud => rule(NONE, M::PKEY_INDEX | M::QKEY),
        QpType::Uc => rule(
            NONE,
            M::AV | M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX | M::PATH_MIG_STATE,
        ),
        QpType::Rc => rule(
            NONE,
            M::PORT
                | M::AV
                | M::TIMEOUT
                | M::RETRY_CNT
                | M::RNR_RETRY
                | M::MAX_QP_RD_ATOMIC
                | M::MAX_DEST_RD_ATOMIC
                | M::ALT_PATH
                | M::ACCESS_FLAGS
                | M::PKEY_INDEX
                | M::MIN_RNR_TIMER
                | M::PATH_MIG_STATE,
        ),
    }
}

/// SQE exists only for UC and UD: an RC send error moves the QP to ERR.
fn sqe_to_rts(ty: QpType) -> Option<TransitionRule> {
    match ty {
        QpType::Ud => rule(NONE, M::CUR_STATE | M::QKEY),
        QpType::Uc => rule(NONE, M::CUR_STATE | M::ACCESS_FLAGS),
        QpType::Rc => None,
    }
}

/// Checks a mask against the table: the transition must be legal, every
/// required bit present, and no bit outside required, optional and STATE.
pub fn mask_allowed(cur: QpState, next: QpState, ty: QpType, mask: M) -> Result<(), &'static str> {
    let rule = transition_rule(cur, next, ty).ok_or("illegal QP state transition")?;
    if !mask.contains(rule.required) {
        return Err("attr_mask lacks an attribute this transition requires");
    }
    if !(rule.required | rule.optional | M::STATE).contains(mask) {
        return Err("attr_mask names an attribute this transition and QP type do not allow");
    }
    Ok(())
}
