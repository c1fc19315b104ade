//! Differences between softverbs and kernel providers that are known and
//! explained in docs/conformance.md ("Differential runs"): where softverbs
//! follows the verbs rules and rxe does not check, or where the answers
//! differ only in a way the rules allow. A run counts them instead of
//! failing; anything else that differs is a divergence to fix or to add
//! here with its reason in the docs.

use super::fields::{qp_attr_from, AV_LEN, QP_ATTR_LEN};
use super::steps::Step;
use softverbs_engine::{QpAttr, QpAttrMask as M};

/// One known difference.
#[derive(Debug)]
pub struct Known {
    /// Its name, as docs/conformance.md lists it.
    pub name: &'static str,
    /// The case cannot go on afterwards (one device made a change the
    /// other refused).
    pub stops: bool,
    applies: fn(&Step, &[String], &[String]) -> bool,
}

/// Every known difference.
pub const KNOWN: &[Known] = &[
    Known {
        name: "unsupported QP types: EOPNOTSUPP on softverbs, EINVAL on rxe",
        stops: false,
        applies: other_qp_type,
    },
    Known {
        name: "out-of-range wire fields: EINVAL on softverbs, accepted by rxe",
        stops: true,
        applies: lenient_range,
    },
];

/// The known difference that explains answers `a` (softverbs) and `b` to
/// `step`, if any.
pub fn explain(step: &Step, a: &[String], b: &[String]) -> Option<&'static Known> {
    KNOWN.iter().find(|k| (k.applies)(step, a, b))
}

fn first(answer: &[String]) -> &str {
    answer.first().map_or("", String::as_str)
}

/// RAW_PACKET, XRC_SEND, XRC_RECV, DRIVER: softverbs says it does not
/// offer them (EOPNOTSUPP), rxe that they are invalid (EINVAL).
fn other_qp_type(step: &Step, a: &[String], b: &[String]) -> bool {
    step.verb == "qp"
        && matches!(step.args.get(4), Some(8..=10 | 0xff))
        && first(a) == "err 95"
        && first(b) == "err 22"
}

/// A modify naming a value outside its field's range, which softverbs
/// refuses and rxe stores: a P_Key index past the table, 5-bit timers
/// above 31, 3-bit retry counts above 7, a migration state that is none.
fn lenient_range(step: &Step, a: &[String], b: &[String]) -> bool {
    if step.verb != "modify_qp" || first(a) != "err 22" || first(b) != "ok" {
        return false;
    }
    let mask = M::from_bits_retain(step.args[1] as u32);
    let attr = qp_attr_from(&step.args[2..2 + QP_ATTR_LEN + AV_LEN]);
    out_of_range(&attr, mask)
}

fn out_of_range(a: &QpAttr, mask: M) -> bool {
    let checks = [
        (M::PKEY_INDEX, a.pkey_index >= 1),
        (M::MIN_RNR_TIMER, a.min_rnr_timer > 31),
        (M::TIMEOUT, a.timeout > 31),
        (M::RETRY_CNT, a.retry_cnt > 7),
        (M::RNR_RETRY, a.rnr_retry > 7),
        (M::PATH_MIG_STATE, a.path_mig_state > 2),
    ];
    checks.iter().any(|&(bit, bad)| mask.contains(bit) && bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bringup::valid_attr;
    use crate::differential::fields::qp_attr_args;
    use crate::differential::steps::{Effect, Judge};
    use softverbs_engine::QpState;

    fn modify(attr: &QpAttr, mask: M) -> Step {
        let mut args = vec![0, i64::from(mask.bits())];
        args.extend(qp_attr_args(attr));
        Step {
            verb: "modify_qp",
            args,
            judge: Judge::Exact,
            effect: Effect::None,
        }
    }

    fn lines(s: &str) -> Vec<String> {
        vec![s.to_string()]
    }

    #[test]
    fn a_timer_above_31_refused_here_and_stored_by_rxe_is_known() {
        let mut attr = valid_attr(QpState::Init, QpState::Rtr);
        attr.min_rnr_timer = 44;
        let step = modify(&attr, M::STATE | M::MIN_RNR_TIMER);
        let known = explain(&step, &lines("err 22"), &lines("ok"));
        assert!(known.is_some_and(|k| k.stops));
        // The same answers for valid values are a real divergence.
        attr.min_rnr_timer = 12;
        let step = modify(&attr, M::STATE | M::MIN_RNR_TIMER);
        assert!(explain(&step, &lines("err 22"), &lines("ok")).is_none());
    }

    #[test]
    fn only_the_other_qp_types_have_the_errno_difference() {
        let qp = |ty: i64| Step {
            verb: "qp",
            args: vec![0, 0, 0, -1, ty, 4, 4, 1, 1, 0, 0],
            judge: Judge::Exact,
            effect: Effect::None,
        };
        let (a, b) = (lines("err 95"), lines("err 22"));
        assert!(explain(&qp(8), &a, &b).is_some_and(|k| !k.stops));
        assert!(explain(&qp(5), &a, &b).is_none());
    }
}
