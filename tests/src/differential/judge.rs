//! Comparing two backends' answers to one step, field by field, with the
//! freedom the verbs rules give devices: sizes may be rounded up, an
//! attribute never set may read as anything, and an error completion
//! carries only wr_id, status and QP (the rest is undefined).

use super::fields::{qp_attr_from, AV_LEN, CAP_LEN, QP_ATTR_LEN, RD_ATOMIC};
use super::steps::{Judge, Step};
use crate::stored::masked_view;
use softverbs_engine::{QpAttr, QpAttrMask as M, QpCap};

/// The names of the two backends, for messages.
pub type Labels<'a> = (&'a str, &'a str);

/// Where the query answer's parts start.
const SQ_DRAINING: usize = QP_ATTR_LEN + AV_LEN;
const CAP: usize = SQ_DRAINING + 1;
const INIT: usize = CAP + CAP_LEN;
const INIT_CAP: usize = INIT + 5;
const QUERY_LEN: usize = INIT_CAP + CAP_LEN;

/// Ok when the answers agree as `step` requires; else what differs.
pub fn judge(step: &Step, labels: Labels, a: &[String], b: &[String]) -> Result<(), String> {
    let differ = |what: &str| {
        Err(format!(
            "{what}: {} answered {:?}, {} answered {:?}",
            labels.0, a, labels.1, b
        ))
    };
    let (va, vb) = match (values(&a[0]), values(&b[0])) {
        (Some(va), Some(vb)) => (va, vb),
        _ if a == b => return Ok(()),
        _ => return differ("outcome"),
    };
    let check = match &step.judge {
        Judge::Exact => (a == b).then_some(()).ok_or("values"),
        Judge::AtLeast(asked) => at_least(&va, asked).and(at_least(&vb, asked)),
        Judge::QueryQp {
            set,
            cap,
            rd_atomic,
        } => query_qp(&va, &vb, *set, cap, *rd_atomic),
        Judge::QuerySrq(max_wr, max_sge, limit_set) => {
            let sizes = [*max_wr, *max_sge];
            let ok = at_least(&va, &sizes).and(at_least(&vb, &sizes));
            let limit = !limit_set || va.get(2) == vb.get(2);
            ok.and(limit.then_some(()).ok_or("srq_limit"))
        }
        Judge::Drained => drained(a, b),
    };
    match check {
        Ok(()) => Ok(()),
        Err(what) => differ(what),
    }
}

/// The numbers of an "ok" line; `None` for anything else.
fn values(line: &str) -> Option<Vec<i64>> {
    let mut words = line.split_whitespace();
    (words.next() == Some("ok")).then(|| words.filter_map(|w| w.parse().ok()).collect())
}

/// Every value at least the one asked for.
fn at_least(got: &[i64], asked: &[u32]) -> Result<(), &'static str> {
    let ok = got.len() >= asked.len() && asked.iter().zip(got).all(|(&a, &g)| g >= i64::from(a));
    ok.then_some(()).ok_or("a size below the one asked for")
}

fn cap_values(cap: &QpCap) -> [u32; CAP_LEN] {
    [
        cap.max_send_wr,
        cap.max_recv_wr,
        cap.max_send_sge,
        cap.max_recv_sge,
        cap.max_inline_data,
    ]
}

fn query_qp(
    a: &[i64],
    b: &[i64],
    set: M,
    cap: &QpCap,
    rd_atomic: (u8, u8),
) -> Result<(), &'static str> {
    if a.len() != QUERY_LEN || b.len() != QUERY_LEN {
        return Err("query answer length");
    }
    if a[0] != b[0] {
        return Err("qp_state");
    }
    // The state is compared above; what the caller claimed as the current
    // state is not stored.
    let set = set - M::STATE - M::CUR_STATE;
    if stored(a, set) != stored(b, set) {
        return Err("stored attributes");
    }
    let depths = |n: &[i64]| {
        (!set.contains(M::MAX_QP_RD_ATOMIC) || n[RD_ATOMIC] >= i64::from(rd_atomic.0))
            && (!set.contains(M::MAX_DEST_RD_ATOMIC) || n[RD_ATOMIC + 1] >= i64::from(rd_atomic.1))
    };
    if !depths(a) || !depths(b) {
        return Err("an RD atomic depth below the one asked for");
    }
    if a[SQ_DRAINING] != b[SQ_DRAINING] {
        return Err("sq_draining");
    }
    if a[INIT..INIT_CAP] != b[INIT..INIT_CAP] {
        return Err("init attributes (CQs, SRQ, type, sq_sig_all)");
    }
    let asked = cap_values(cap);
    for n in [a, b] {
        at_least(&n[CAP..INIT], &asked)?;
        at_least(&n[INIT_CAP..], &asked)?;
    }
    Ok(())
}

/// The attributes of a query answer that `set` names, as the two devices
/// must agree on them. Left out: the RD atomic depths, which a device may
/// round up (rxe: to a power of two; checked as at least the ask), and
/// known differences (docs/conformance.md, "Differential runs"): the
/// kernel replaces a RoCE path's hop_limit by its route's, rxe reads sl
/// and en_sqd_async_notify back as 0, and keeps a flow label's bits past
/// the 20 that softverbs keeps.
fn stored(n: &[i64], set: M) -> QpAttr {
    let mut a = masked_view(&qp_attr_from(n), set);
    a.max_rd_atomic = 0;
    a.max_dest_rd_atomic = 0;
    a.ah_attr.grh.hop_limit = 0;
    a.ah_attr.sl = 0;
    a.en_sqd_async_notify = 0;
    a.ah_attr.grh.flow_label &= 0xF_FFFF;
    a
}

/// The same completions or events in the same order. An error completion
/// is compared on wr_id, status and QP only; a receive without IBV_WC_GRH. A send-queue completion
/// (opcode below IBV_WC_RECV) is compared without imm_data and wc_flags,
/// which ibv_poll_cq(3) defines for receives only (rxe sets WITH_IMM and
/// the immediate on a SEND_WITH_IMM's), and a SEND's or RDMA WRITE's
/// (IBV_WC_SEND 0, IBV_WC_RDMA_WRITE 1) also without byte_len, defined
/// only for receives, READs and atomics (rxe sets it, mlx5 does not).
pub(super) fn drained(a: &[String], b: &[String]) -> Result<(), &'static str> {
    /// A successful completion's fields as compared: IBV_WC_GRH (bit 0 of
    /// the flags) dropped from a receive's, since ibv_poll_cq(3) defines
    /// it for UD only, the data-path cases' QPs are RC, and rxe sets it
    /// on every receive of a user CQ.
    fn fields<'l>(w: &[&'l str]) -> Vec<std::borrow::Cow<'l, str>> {
        let receive = w
            .get(3)
            .and_then(|o| o.parse::<u32>().ok())
            .is_some_and(|o| o >= 128);
        w.iter()
            .enumerate()
            .map(|(i, f)| match (i, receive, f.parse::<u32>()) {
                (6, true, Ok(flags)) => (flags & !1).to_string().into(),
                _ => (*f).into(),
            })
            .collect()
    }
    /// The fields of a "wc" line a comparison skips.
    fn undefined(status: &str, opcode: &str) -> &'static [usize] {
        const BYTE_LEN: usize = 4;
        const IMM: usize = 5;
        const FLAGS: usize = 6;
        match (status, opcode.parse::<u32>()) {
            ("0", Ok(0 | 1)) => &[BYTE_LEN, IMM, FLAGS],
            ("0", Ok(op)) if op < 128 => &[IMM, FLAGS],
            _ => &[],
        }
    }
    if a.len() != b.len() {
        return Err("number of entries");
    }
    for (la, lb) in a.iter().zip(b).skip(1) {
        let (wa, wb): (Vec<&str>, Vec<&str>) = (la.split(' ').collect(), lb.split(' ').collect());
        let same = match (wa.first(), wa.get(2), wa.get(3)) {
            (Some(&"wc"), Some(&status), _) if status != "0" => {
                [1, 2, 7].iter().all(|&i| wa.get(i) == wb.get(i))
            }
            (Some(&"wc"), Some(&status), Some(&opcode)) => {
                let skip = undefined(status, opcode);
                let (fa, fb) = (fields(&wa), fields(&wb));
                (0..fa.len().max(fb.len())).all(|i| skip.contains(&i) || fa.get(i) == fb.get(i))
            }
            _ => wa == wb,
        };
        if !same {
            return Err("entries");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::differential::steps::Effect;

    fn step(judge: Judge) -> Step {
        Step {
            verb: "x",
            args: vec![],
            judge,
            effect: Effect::None,
        }
    }

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn outcomes_and_errnos_must_match() {
        let s = step(Judge::Exact);
        let l = ("a", "b");
        assert!(judge(&s, l, &lines(&["err 22"]), &lines(&["err 22"])).is_ok());
        assert!(judge(&s, l, &lines(&["err 22"]), &lines(&["err 95"])).is_err());
        assert!(judge(&s, l, &lines(&["ok"]), &lines(&["err 22"])).is_err());
    }

    #[test]
    fn sizes_may_be_rounded_up_but_not_down() {
        let s = step(Judge::AtLeast(vec![4, 1]));
        let l = ("a", "b");
        assert!(judge(&s, l, &lines(&["ok 4 1"]), &lines(&["ok 8 2"])).is_ok());
        assert!(judge(&s, l, &lines(&["ok 4 1"]), &lines(&["ok 3 2"])).is_err());
    }

    #[test]
    fn error_completions_compare_wr_id_status_and_qp_only() {
        let s = step(Judge::Drained);
        let l = ("a", "b");
        let a = lines(&["ok 1", "wc 7 5 0 0 0 0 1 0"]);
        let b = lines(&["ok 1", "wc 7 5 0 99 0 3 1 0"]);
        assert!(judge(&s, l, &a, &b).is_ok());
        let c = lines(&["ok 1", "wc 7 4 0 0 0 0 1 0"]);
        assert!(judge(&s, l, &a, &c).is_err());
        let good = lines(&["ok 1", "wc 7 0 128 5 0 0 1 0"]);
        let other_len = lines(&["ok 1", "wc 7 0 128 6 0 0 1 0"]);
        assert!(judge(&s, l, &good, &other_len).is_err());
        // A WRITE's byte_len is not defined; a READ's is.
        let write = lines(&["ok 1", "wc 7 0 1 0 0 0 1 0"]);
        let write_len = lines(&["ok 1", "wc 7 0 1 132 0 0 1 0"]);
        assert!(judge(&s, l, &write, &write_len).is_ok());
        let read = lines(&["ok 1", "wc 7 0 2 0 0 0 1 0"]);
        let read_len = lines(&["ok 1", "wc 7 0 2 132 0 0 1 0"]);
        assert!(judge(&s, l, &read, &read_len).is_err());
        // A send-queue completion's immediate and flags are not defined;
        // a receive's are.
        let send = lines(&["ok 1", "wc 7 0 0 0 0 0 1 0"]);
        let send_imm = lines(&["ok 1", "wc 7 0 0 16 99 2 1 0"]);
        assert!(judge(&s, l, &send, &send_imm).is_ok());
        let read_flags = lines(&["ok 1", "wc 7 0 2 0 0 2 1 0"]);
        assert!(judge(&s, l, &read, &read_flags).is_ok());
        let recv = lines(&["ok 1", "wc 7 0 128 16 99 2 1 0"]);
        let recv_no_imm = lines(&["ok 1", "wc 7 0 128 16 0 0 1 0"]);
        assert!(judge(&s, l, &recv, &recv_no_imm).is_err());
        // IBV_WC_GRH is not compared on a receive (RC here).
        let recv_grh = lines(&["ok 1", "wc 7 0 128 16 99 3 1 0"]);
        assert!(judge(&s, l, &recv, &recv_grh).is_ok());
    }
}
