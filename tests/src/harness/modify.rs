//! Building `ibv_modify_qp` calls from a [`ModifySeed`] and the QP's
//! current state, biased towards legal transitions so that QPs travel
//! through the whole state machine.

use super::{errno, Check, World};
use crate::names::{state_from_raw, state_to_raw};
use crate::ops::{MaskShape, ModifySeed};
use crate::table::{Rule, TransitionTable};
use softverbs_engine::{QpAttr, QpAttrMask as M, QpState, QpType};

/// The usual next step of a QP in `from`: up the bringup ladder, between
/// RTS and SQD, back to RTS from SQE, and out of ERR through RESET.
fn forward(from: QpState) -> QpState {
    use QpState::*;
    match from {
        Reset => Init,
        Init => Rtr,
        Rtr => Rts,
        Rts => Sqd,
        Sqd | Sqe => Rts,
        Err => Reset,
    }
}

/// A legal target: the forward step six times in ten, else any legal one.
fn target(table: &TransitionTable, ty: QpType, from: QpState, roll: u8) -> QpState {
    let targets = table.targets(ty, from);
    let fwd = forward(from);
    if roll % 10 < 6 && targets.contains(&fwd) {
        return fwd;
    }
    targets
        .get(usize::from(roll) % targets.len().max(1))
        .copied()
        .unwrap_or(from)
}

/// The n-th (modulo) bit of `mask`, or STATE when it has none.
fn nth_bit(mask: M, n: u8) -> M {
    let bits: Vec<M> = mask.iter().collect();
    bits.get(usize::from(n) % bits.len().max(1))
        .copied()
        .unwrap_or(M::STATE)
}

fn rule_of(table: &TransitionTable, ty: QpType, from: QpState, to: QpState) -> Rule {
    let none = Rule {
        required: M::empty(),
        optional: M::empty(),
    };
    table.rule(ty, from, to).unwrap_or(none)
}

/// The attributes and mask of one modify of a QP of type `ty` in `cur`
/// (also what the differential runner sends).
pub(crate) fn build(
    table: &TransitionTable,
    ty: QpType,
    cur: QpState,
    seed: &ModifySeed,
) -> (QpAttr, M) {
    let to = target(table, ty, cur, seed.target);
    let rule = rule_of(table, ty, cur, to);
    let some = |r: Rule| r.required | (r.optional & M::from_bits_retain(seed.optional));
    let legal = M::STATE | some(rule);
    let mut attr = QpAttr {
        qp_state: state_to_raw(to),
        cur_qp_state: state_to_raw(cur),
        ..seed.attr
    };
    let mask = match seed.shape {
        MaskShape::Legal => legal,
        MaskShape::DropRequired(n) => legal - nth_bit(rule.required, n),
        MaskShape::AddBit(n) => legal | M::from_bits_retain(1 << (n % 32)),
        MaskShape::NoState => match table.rule(ty, cur, cur) {
            Some(same) => some(same),
            None => legal - M::STATE,
        },
        MaskShape::AnyTarget(raw) => {
            attr.qp_state = raw;
            let other = state_from_raw(raw).and_then(|s| table.rule(ty, cur, s));
            M::STATE | some(other.unwrap_or(rule))
        }
        MaskShape::CurState(raw) => {
            attr.cur_qp_state = raw;
            legal | M::CUR_STATE
        }
        MaskShape::Random(bits) => {
            attr.qp_state = u32::from(seed.target % 8);
            M::from_bits_retain(bits)
        }
    };
    (attr, mask)
}

impl World {
    /// One `ibv_modify_qp`; a QP that does not exist gets a legal-looking
    /// RESET->INIT request, which must still fail.
    pub(super) fn modify_qp(&mut self, seed: &ModifySeed) -> Check {
        let id = self.qp(seed.qp);
        let before = self.model.qp(id).map(|q| (q.ty, q.state));
        let (ty, cur) = before.unwrap_or((QpType::Rc, QpState::Reset));
        let (attr, mask) = build(self.model.table(), ty, cur, seed);
        let expected = self.model.modify_qp(id, &attr, mask);
        let actual = errno(self.engine.modify_qp(id, &attr, mask));
        let done = self.judge("modify_qp", actual, expected)?.is_some();
        if done && mask.contains(M::STATE) {
            let after = self.model.qp(id).expect("modified QP").state;
            let key = (ty as u32, state_to_raw(cur), state_to_raw(after));
            *self.coverage.transitions.entry(key).or_default() += 1;
        }
        Ok(())
    }
}
