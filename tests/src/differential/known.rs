//! Differences between softverbs and kernel providers that are known and
//! explained in docs/conformance.md ("Differential runs"): where softverbs
//! follows the verbs rules and rxe does not check, or where the answers
//! differ only in a way the rules allow. A run counts them instead of
//! failing; anything else that differs is a divergence to fix or to add
//! here with its reason in the docs.

use super::fields::{qp_attr_from, AV_LEN, QP_ATTR_LEN};
use super::judge::drained;
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
        name: "values rxe stores unchecked: EINVAL on softverbs, accepted by rxe",
        stops: true,
        applies: lenient_range,
    },
    Known {
        name: "SQ_DRAINED without en_sqd_async_notify: raised by rxe only",
        stops: false,
        applies: sq_drained_always,
    },
    Known {
        name: "QP error events (QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR): raised by softverbs (IBTA 11.6.3, as mlx5), never by rxe",
        stops: false,
        applies: qp_error_events_here_only,
    },
    Known {
        name: "a SEND longer than its receive WR: REM_INV_REQ_ERR and LOC_LEN_ERR on softverbs (IBTA, mlx5), REM_OP_ERR and LOC_QP_OP_ERR on rxe",
        stops: false,
        applies: too_long_send,
    },
    Known {
        name: "receive WRs posted in ERR: flushed by softverbs, left queued by rxe",
        stops: true,
        applies: unflushed_in_err,
    },
    Known {
        name: "completions of a QP moved to RESET: removed by softverbs (as mlx5), kept by rxe",
        stops: true,
        applies: kept_after_reset,
    },
    Known {
        name: "zero destination GID: EINVAL on softverbs, ENETUNREACH on the kernel",
        stops: false,
        applies: zero_dgid,
    },
    Known {
        name: "queues rxe rounds up: full or too small on softverbs, room on rxe",
        stops: true,
        applies: rounded_queue,
    },
    Known {
        name: "unknown ibv_modify_srq mask bits: EINVAL on softverbs, ignored by rxe",
        stops: true,
        applies: unknown_srq_bits,
    },
    Known {
        name: "SRQ resized and armed at once: limit checked against the new max_wr on softverbs, the old one on rxe",
        stops: true,
        applies: limit_with_resize,
    },
    Known {
        name: "a UC QP with an SRQ: EINVAL on softverbs (seed 002), accepted by rxe",
        stops: true,
        applies: uc_with_srq,
    },
];

/// The known differences of UC data cases (`datapath`), in which they
/// are the only causes of the answers they explain.
pub const UC_KNOWN: &[Known] = &[
    Known {
        name: "a UC SEND longer than its receive WR: dropped by softverbs, which keeps the WR for the next message (IBTA class D1), fails rxe's QP (LOC_QP_OP_ERR, ERR)",
        stops: true,
        applies: uc_too_long_fails_rxe,
    },
    Known {
        name: "a UC WRITE_WITH_IMM that found no receive WR: softverbs drops that message only, rxe's QP takes nothing more",
        stops: true,
        applies: uc_rxe_wedged,
    },
];

/// What a UC data case posted that the UC differences need as their
/// cause: without it, the answers they explain are a divergence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UcCauses {
    /// A SEND longer than a receive WR posted to its peer.
    pub too_long_send: bool,
    /// A WRITE_WITH_IMM of more than one packet (its LAST may find no WR).
    pub long_write_with_imm: bool,
}

impl UcCauses {
    /// The causes among the post steps of a case (`post_send QP WR_ID
    /// OPCODE LOCAL_MR OFFSET LENGTH ...`, `post_recv QP WR_ID N (MR
    /// OFFSET LENGTH KEY)...`), with path MTU `mtu`.
    pub fn of(steps: &[Step], mtu: i64) -> UcCauses {
        let recv_lens = |qp: i64| {
            steps
                .iter()
                .filter(move |s| s.verb == "post_recv" && s.args[0] == qp)
                .map(|s| {
                    s.args[3..]
                        .chunks(4)
                        .map(|sge| sge.get(2).copied().unwrap_or(0))
                        .sum::<i64>()
                })
        };
        let sends = steps.iter().filter(|s| s.verb == "post_send");
        let mut causes = UcCauses::default();
        for s in sends {
            let (qp, opcode, len) = (s.args[0], s.args[2], s.args[5]);
            if matches!(opcode, 2 | 3) && recv_lens(1 - qp).any(|r| r < len) {
                causes.too_long_send = true;
            }
            if opcode == 1 && len > mtu {
                causes.long_write_with_imm = true;
            }
        }
        causes
    }
}

/// The UC known difference that explains answers `a` and `b` to `step`
/// of a UC data case whose posts hold `causes`, if any.
pub fn explain_uc(
    step: &Step,
    a: &[String],
    b: &[String],
    causes: UcCauses,
) -> Option<&'static Known> {
    let caused = [causes.too_long_send, causes.long_write_with_imm];
    UC_KNOWN
        .iter()
        .zip(caused)
        .find(|(k, caused)| *caused && (k.applies)(step, a, b))
        .map(|(k, _)| k)
}

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

/// A modify naming a value softverbs refuses and rxe stores without a
/// check: a P_Key index past the table, a path MTU that is no `ibv_mtu`,
/// 5-bit timers above 31, 3-bit retry counts above 7, a QP number wider
/// than 24 bits, a service level above 15, a migration state other than
/// MIGRATED (there is no alternate path).
fn lenient_range(step: &Step, a: &[String], b: &[String]) -> bool {
    if step.verb != "modify_qp" || first(a) != "err 22" || first(b) != "ok" {
        return false;
    }
    let mask = M::from_bits_retain(step.args[1] as u32);
    out_of_range(&modify_attr(step), mask)
}

/// The attributes a modify step sends.
fn modify_attr(step: &Step) -> QpAttr {
    qp_attr_from(&step.args[2..2 + QP_ATTR_LEN + AV_LEN])
}

fn out_of_range(a: &QpAttr, mask: M) -> bool {
    let checks = [
        (M::PKEY_INDEX, a.pkey_index >= 1),
        (M::PATH_MTU, !(1..=5).contains(&a.path_mtu)),
        (M::MIN_RNR_TIMER, a.min_rnr_timer > 31),
        (M::TIMEOUT, a.timeout > 31),
        (M::RETRY_CNT, a.retry_cnt > 7),
        (M::RNR_RETRY, a.rnr_retry > 7),
        (M::DEST_QPN, a.dest_qp_num > 0xFF_FFFF),
        (M::AV, a.ah_attr.sl > 15),
        (M::PATH_MIG_STATE, a.path_mig_state != 0),
    ];
    checks.iter().any(|&(bit, bad)| mask.contains(bit) && bad)
}

/// A poll where softverbs has flush completions (IBV_WC_WR_FLUSH_ERR, 5)
/// that rxe lacks and the rest agrees: rxe completes nothing for a
/// receive WR posted to a QP already in ERR (its user-space post does not
/// wake the kernel, which flushes only on the move to ERR).
fn unflushed_in_err(step: &Step, a: &[String], b: &[String]) -> bool {
    let flushed = |l: &&String| l.split(' ').nth(2) == Some("5");
    let others = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .skip(1)
            .filter(|l| !flushed(l))
            .cloned()
            .collect()
    };
    matches!(step.verb, "poll_cq" | "wait_cq") && a.len() > b.len() && others(a) == others(b)
}

/// The opposite: rxe still has flush completions softverbs removed when
/// their QP was moved to RESET.
fn kept_after_reset(step: &Step, a: &[String], b: &[String]) -> bool {
    unflushed_in_err(step, b, a)
}

/// A zero destination GID: refused by softverbs' check, by the kernel's
/// route lookup.
fn zero_dgid(step: &Step, a: &[String], b: &[String]) -> bool {
    let av = match step.verb {
        "ah" => &step.args[1..],
        "modify_qp" => &step.args[2 + QP_ATTR_LEN..],
        _ => return false,
    };
    av[10] == 0 && av[11] == 0 && first(a) == "err 22" && first(b) == "err 101"
}

/// softverbs' queues hold what was asked for, rxe's what it rounded up
/// to: a post that finds softverbs' queue full (ENOMEM), or an SRQ limit
/// above the asked max_wr (EINVAL), goes through on rxe.
fn rounded_queue(step: &Step, a: &[String], b: &[String]) -> bool {
    let refused = match step.verb {
        "post_recv" | "post_srq_recv" => "err 12",
        "modify_srq" if step.args[1] & 2 != 0 => "err 22",
        _ => return false,
    };
    first(a) == refused && first(b) == "ok"
}

/// `ibv_modify_srq` with bits other than IBV_SRQ_MAX_WR and IBV_SRQ_LIMIT.
fn unknown_srq_bits(step: &Step, a: &[String], b: &[String]) -> bool {
    step.verb == "modify_srq" && step.args[1] & !3 != 0 && first(a) == "err 22" && first(b) == "ok"
}

/// `ibv_modify_srq` with IBV_SRQ_MAX_WR and IBV_SRQ_LIMIT (3) that
/// softverbs accepts and rxe refuses.
fn limit_with_resize(step: &Step, a: &[String], b: &[String]) -> bool {
    step.verb == "modify_srq" && step.args[1] & 3 == 3 && first(a) == "ok" && first(b) == "err 22"
}

/// `ibv_create_qp` of a UC QP (3) with an SRQ.
fn uc_with_srq(step: &Step, a: &[String], b: &[String]) -> bool {
    step.verb == "qp"
        && step.args[4] == 3
        && step.args[3] >= 0
        && first(a) == "err 22"
        && first(b).starts_with("ok")
}

/// rxe raises IBV_EVENT_SQ_DRAINED (5) whenever SQD is reached; softverbs
/// only when the RTS->SQD call set en_sqd_async_notify. Known when the answers
/// are equal without SQ_DRAINED events.
fn sq_drained_always(step: &Step, a: &[String], b: &[String]) -> bool {
    let others = |lines: &[String]| -> Vec<String> {
        let kept = lines.iter().skip(1).filter(|l| !l.starts_with("event 5 "));
        kept.cloned().collect()
    };
    step.verb == "events" && others(a) == others(b)
}

/// A UC QP in ERR on rxe only: a UC barrier (`datapath::barrier`) that
/// went on softverbs and found its own QP (its WR flushed) or its peer in
/// ERR on rxe, or sends that succeeded on softverbs and were flushed on
/// rxe. In the runner's UC cases only a SEND longer than its receive WR
/// fails a UC QP on rxe: rxe 6.1's copy reports the overflow as a
/// malformed WQE, a class A error for every QP type, where its own UC
/// code (class D1) and IBTA drop the message and keep the WR, as
/// softverbs does.
fn uc_too_long_fails_rxe(step: &Step, a: &[String], b: &[String]) -> bool {
    let barrier = step.verb == "barrier"
        && first(a) == "ok"
        && matches!(first(b), "ok unsent 5" | "ok peer in error");
    barrier || (step.verb == "wait_cq" && flushed_on_rxe_only(a, b))
}

/// The same completions (as the judge compares them), except successes
/// of softverbs' that rxe flushed.
fn flushed_on_rxe_only(a: &[String], b: &[String]) -> bool {
    let flushed_there = |x: &String, y: &String| {
        let (x, y): (Vec<&str>, Vec<&str>) = (x.split(' ').collect(), y.split(' ').collect());
        x.get(1) == y.get(1) && x.get(2) == Some(&"0") && y.get(2) == Some(&"5")
    };
    // rxe's answer with softverbs' lines where it flushed them.
    let unflushed: Vec<String> = a
        .iter()
        .zip(b)
        .map(|(x, y)| if flushed_there(x, y) { x } else { y }.clone())
        .collect();
    a.len() == b.len() && unflushed != b && drained(a, &unflushed).is_ok()
}

/// A UC barrier that landed on softverbs and never on rxe, whose peer is
/// not in ERR: rxe 6.1 drops a UC WRITE's LAST packet that finds no
/// receive WR without forgetting the WRITE it continued, so every later
/// packet is out of sequence to it (its class D1 reset needs a WR) and
/// the QP takes nothing more. IBTA drops that message only, as softverbs.
fn uc_rxe_wedged(step: &Step, a: &[String], b: &[String]) -> bool {
    step.verb == "barrier" && first(a) == "ok" && first(b) == "err 110"
}

/// The memory a failed WR targeted (a SEND's receive buffer, a WRITE's
/// range, a READ's or atomic's local buffer): undefined (IBTA: a failed
/// operation leaves the memory it targeted undefined). rxe has written
/// the packets before the failing one (a SEND too long for its receive
/// WR, a WRITE_WITH_IMM's last packet refused for want of one);
/// softverbs' same-host path, which executes a whole message at once,
/// none. The runner counts it rather than compare.
pub const FAILED_WR_TARGET: Known = Known {
    name: "memory a failed WR targeted: undefined, not compared (rxe wrote the packets before the failing one)",
    stops: false,
    applies: |_, _, _| false,
};

/// A SEND longer than the receive WR it lands in: softverbs NAKs it as
/// an invalid request (REM_INV_REQ_ERR at the requester, LOC_LEN_ERR on
/// the receive), as IBTA and mlx5 do; rxe 6.1's copy reports the overflow
/// as a malformed WQE (REM_OP_ERR, LOC_QP_OP_ERR). Known when softverbs'
/// completions, with those statuses as rxe's, compare equal.
fn too_long_send(step: &Step, a: &[String], b: &[String]) -> bool {
    let as_rxe = |line: &String| -> String {
        let mut w: Vec<&str> = line.split(' ').collect();
        if w.first() == Some(&"wc") {
            match w.get(2) {
                Some(&"9") => w[2] = "11",
                Some(&"1") => w[2] = "2",
                _ => {}
            }
        }
        w.join(" ")
    };
    let mapped: Vec<String> = a.iter().map(as_rxe).collect();
    matches!(step.verb, "wait_cq" | "poll_cq") && mapped != a && drained(&mapped, b).is_ok()
}

/// A responder that NAKs a request (bad rkey, invalid request) or a QP
/// that fails enters ERR on both, but rxe raises no affiliated event for
/// it (6.1 raises none of IBV_EVENT_QP_FATAL 1, QP_REQ_ERR 2,
/// QP_ACCESS_ERR 3). Known when softverbs' events less those are rxe's.
fn qp_error_events_here_only(step: &Step, a: &[String], b: &[String]) -> bool {
    let others = |lines: &[String]| -> Vec<String> {
        let error_event = |l: &&String| {
            ["event 1 ", "event 2 ", "event 3 "]
                .iter()
                .any(|e| l.starts_with(e))
        };
        lines
            .iter()
            .skip(1)
            .filter(|l| !error_event(l))
            .cloned()
            .collect()
    };
    step.verb == "events" && a.len() > b.len() && others(a) == others(b)
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

    fn drain(verb: &'static str) -> Step {
        Step {
            verb,
            args: vec![0, 1024, 0],
            judge: Judge::Drained,
            effect: Effect::None,
        }
    }

    fn answer(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_extra_flushes_sq_drained_or_qp_error_events_are_known() {
        let poll = drain("poll_cq");
        let here = answer(&["ok 2", "wc 1 0 128 4 0 0 0 0", "wc 2 5 0 0 0 0 0 0"]);
        let rxe = answer(&["ok 1", "wc 1 0 128 4 0 0 0 0"]);
        assert!(explain(&poll, &here, &rxe).is_some_and(|k| k.stops));
        let other = answer(&["ok 1", "wc 1 0 128 5 0 0 0 0"]);
        assert!(explain(&poll, &here, &other).is_none());
        let events = drain("events");
        let rxe = answer(&["ok 1", "event 5 qp 0"]);
        assert!(explain(&events, &answer(&["ok 0"]), &rxe).is_some_and(|k| !k.stops));
        let fatal = answer(&["ok 1", "event 1 qp 0"]);
        assert!(explain(&events, &answer(&["ok 0"]), &fatal).is_none());
        // QP error events: known when softverbs raised them, not rxe.
        let access = answer(&["ok 2", "event 3 qp 1", "event 16 qp 1"]);
        let rxe = answer(&["ok 1", "event 16 qp 1"]);
        assert!(explain(&events, &access, &rxe).is_some_and(|k| !k.stops));
        assert!(explain(&events, &rxe, &access).is_none());
        let other = answer(&["ok 1", "event 15 srq 0"]);
        assert!(explain(&events, &access, &other).is_none());
    }

    #[test]
    fn only_the_statuses_of_a_too_long_send_are_known() {
        let wait = drain("wait_cq");
        let here = answer(&["ok 1", "wc 2 9 0 0 0 0 1 0"]);
        let rxe = answer(&["ok 1", "wc 2 11 0 0 0 0 1 0"]);
        assert!(explain(&wait, &here, &rxe).is_some_and(|k| !k.stops));
        let recv = (
            answer(&["ok 1", "wc 1 1 0 0 0 0 0 0"]),
            answer(&["ok 1", "wc 1 2 0 0 0 0 0 0"]),
        );
        assert!(explain(&wait, &recv.0, &recv.1).is_some());
        let other = answer(&["ok 1", "wc 2 12 0 0 0 0 1 0"]);
        assert!(explain(&wait, &here, &other).is_none());
        let other_wr = answer(&["ok 1", "wc 3 11 0 0 0 0 1 0"]);
        assert!(explain(&wait, &here, &other_wr).is_none());
        // Beside a success whose byte_len is undefined (a WRITE's).
        let here = answer(&["ok 2", "wc 1 0 1 0 0 0 1 0", "wc 4 9 0 0 0 0 1 0"]);
        let rxe = answer(&["ok 2", "wc 1 0 1 2096 0 0 1 0", "wc 4 11 0 0 0 0 1 0"]);
        assert!(explain(&wait, &here, &rxe).is_some());
    }

    #[test]
    fn only_a_barrier_softverbs_got_through_has_the_uc_differences() {
        let barrier = Step {
            verb: "barrier",
            args: vec![0, 1, 2],
            judge: Judge::Exact,
            effect: Effect::None,
        };
        let ok = lines("ok");
        let both = UcCauses {
            too_long_send: true,
            long_write_with_imm: true,
        };
        let none = UcCauses::default();
        for rxe in ["ok unsent 5", "ok peer in error", "err 110"] {
            let rxe = lines(rxe);
            assert!(explain_uc(&barrier, &ok, &rxe, both).is_some_and(|k| k.stops));
            assert!(explain_uc(&barrier, &rxe, &ok, both).is_none());
            assert!(
                explain_uc(&barrier, &ok, &rxe, none).is_none(),
                "no cause posted"
            );
            assert!(explain(&barrier, &ok, &rxe).is_none(), "UC cases only");
        }
        assert!(explain_uc(&barrier, &ok, &lines("ok unsent 12"), both).is_none());
    }

    #[test]
    fn only_sends_flushed_by_rxe_alone_are_the_uc_too_long_difference() {
        let wait = drain("wait_cq");
        let here = answer(&["ok 2", "wc 2 0 0 0 0 0 0 0", "wc 3 0 1 0 0 0 0 0"]);
        let rxe = answer(&["ok 2", "wc 2 0 0 0 0 0 0 0", "wc 3 5 0 0 0 0 0 0"]);
        let causes = UcCauses {
            too_long_send: true,
            long_write_with_imm: false,
        };
        assert!(explain_uc(&wait, &here, &rxe, causes).is_some_and(|k| k.stops));
        assert!(explain_uc(&wait, &rxe, &here, causes).is_none());
        let other = answer(&["ok 2", "wc 2 0 0 0 0 0 0 0", "wc 3 12 0 0 0 0 0 0"]);
        assert!(explain_uc(&wait, &here, &other, causes).is_none());
        // Beside a SEND whose send completion's byte_len rxe sets.
        let rxe = answer(&["ok 2", "wc 2 0 0 578 0 0 0 0", "wc 3 5 0 0 0 0 0 0"]);
        assert!(explain_uc(&wait, &here, &rxe, causes).is_some());
    }

    #[test]
    fn the_uc_causes_are_read_from_the_posts() {
        let post = |verb: &'static str, args: Vec<i64>| Step {
            verb,
            args,
            judge: Judge::Exact,
            effect: Effect::None,
        };
        // QP 1's receive WR of 10 bytes in two SGEs; QP 0 SENDs 11 to it.
        let recv = post("post_recv", vec![1, 1, 2, 1, 0, 4, -1, 1, 8, 6, -1]);
        let send = |opcode, len| post("post_send", vec![0, 2, opcode, 0, 0, len, 1, 0, -1, 0, 1]);
        let of = |steps: &[Step]| UcCauses::of(steps, 1024);
        assert!(of(&[recv.clone(), send(2, 11)]).too_long_send);
        assert!(!of(&[recv.clone(), send(2, 10)]).too_long_send);
        assert!(!of(&[recv.clone(), send(0, 11)]).too_long_send, "a WRITE");
        assert!(of(&[send(1, 1025)]).long_write_with_imm);
        assert!(!of(&[send(1, 1024)]).long_write_with_imm);
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
