//! Fault rules (`SOFTVERBS_FAULTS`) applied by the engine: posts refused
//! with the rule's errno, completions reported failed (their QP then in
//! ERR) or held back in CQ order, QPs failed with IBV_EVENT_QP_FATAL after
//! N WRs or at a time.

mod common;
use common::pair::*;
use softverbs_engine::*;
use softverbs_faults::{FaultSpec, Faults, Part};

const ERR: u32 = 6;

fn rules(n: &mut Node, now: Nanos, text: &str) {
    let spec = FaultSpec::parse(text).unwrap();
    let faults = Faults::new(&spec, &n.e.config().name, Part::Verbs).unwrap();
    n.e.set_faults(faults, now);
}

fn state(n: &Node, qp: QpId) -> u32 {
    n.e.query_qp(qp).unwrap().0.qp_state
}

fn recv(p: &mut Pair, qp: QpId, wr_id: u64) -> VerbsResult<()> {
    let sge = [p.b.sge(0x8000 + wr_id * 64, 64)];
    p.b.e.post_recv(
        qp,
        &RecvWr {
            wr_id,
            sg_list: &sge,
        },
    )
}

#[test]
fn a_post_rule_refuses_every_nth_matching_wr_with_its_errno() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    rules(
        &mut p.a,
        p.now,
        "post_send opcode=RDMA_WRITE every=2 errno=ENOSPC",
    );
    recv(&mut p, qb, 9).unwrap();
    let sge = [p.a.sge(0, 8)];
    let write = SendWr {
        rdma: RdmaTarget {
            remote_addr: MEM_BASE,
            rkey: p.b.key,
        },
        ..wr(1, send_opcode::RDMA_WRITE, &sge)
    };
    let send = wr(2, send_opcode::SEND, &sge);
    assert_eq!(p.a.e.post_send(qa, &write), Ok(()));
    assert_eq!(
        p.a.e.post_send(qa, &send),
        Ok(()),
        "another opcode is not counted"
    );
    let refused = p.a.e.post_send(qa, &write).unwrap_err();
    assert_eq!(refused.errno(), 28);
    assert_eq!(p.a.e.post_send(qa, &write), Ok(()));
    // The refused WR was not queued: two writes and the send complete.
    p.run(1000);
    let done: Vec<_> = p.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        done,
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (1, WcStatus::Success)
        ]
    );
}

#[test]
fn a_failed_completion_puts_its_qp_in_error_and_flushes_the_rest() {
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    rules(
        &mut p.a,
        p.now,
        "completion opcode=RDMA_WRITE nth=2 status=REM_ACCESS_ERR vendor_err=0x42",
    );
    let sge = [p.a.sge(0, 64)];
    for id in 1..=3 {
        let w = SendWr {
            rdma: RdmaTarget {
                remote_addr: MEM_BASE,
                rkey: p.b.key,
            },
            ..wr(id, send_opcode::RDMA_WRITE, &sge)
        };
        p.a.e.post_send(qa, &w).unwrap();
    }
    p.run(1000);
    let got: Vec<_> =
        p.a.poll()
            .iter()
            .map(|w| (w.wr_id, w.status, w.vendor_err))
            .collect();
    assert_eq!(
        got[..2],
        [(1, WcStatus::Success, 0), (2, WcStatus::RemAccessErr, 0x42)]
    );
    assert_eq!(got[2..], [(3, WcStatus::WrFlushErr, 0)]);
    assert_eq!(state(&p.a, qa), ERR);
    assert_eq!(
        p.a.events(),
        [],
        "an error completion raises no async event"
    );
}

/// A send completion says no `byte_len` (as mlx5's), but `after_bytes=`
/// counts what its WRs carried: the SEND after 3 x 50 bytes fails (the
/// rule never fired on send completions before 2026-12-07).
#[test]
fn after_bytes_counts_what_send_wrs_carried() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    rules(
        &mut p.a,
        p.now,
        "completion opcode=SEND after_bytes=150 count=1 status=REM_OP_ERR",
    );
    let sge = [p.a.sge(0, 50)];
    for id in 1..=4 {
        recv(&mut p, qb, id).unwrap();
        p.a.e
            .post_send(qa, &wr(id, send_opcode::SEND, &sge))
            .unwrap();
    }
    p.run(1000);
    let got: Vec<_> = p.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success),
            (4, WcStatus::RemOpErr)
        ]
    );
}

#[test]
fn a_delayed_completion_holds_back_later_ones_of_its_cq_and_their_event() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    rules(&mut p.b, p.now, "completion opcode=RECV nth=1 delay=5ms");
    for id in 1..=2 {
        recv(&mut p, qb, id).unwrap();
    }
    p.b.e.req_notify_cq(p.b.cq, false).unwrap();
    let sge = [p.a.sge(0, 8)];
    for id in 1..=2 {
        p.a.e
            .post_send(qa, &wr(id, send_opcode::SEND, &sge))
            .unwrap();
    }
    let start = p.now;
    p.exchange();
    assert_eq!(p.b.poll(), [], "both wait: the second behind the first");
    assert_eq!(p.b.e.poll_comp_event(), None);
    assert!(p
        .b
        .e
        .poll_timeout()
        .is_some_and(|at| at >= start + 5_000_000));
    p.run(100);
    let ids: Vec<_> = p.b.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(ids, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!(p.b.e.poll_comp_event(), Some(p.b.cq));
    assert!(p.now >= start + 5_000_000);
}

#[test]
fn a_qp_fails_with_a_fatal_event_after_its_nth_wr() {
    let mut p = Pair::new();
    let (_, qb) = p.connect(QpType::Rc, Link::default());
    rules(&mut p.b, p.now, "qp_error after=3");
    for id in 1..=2 {
        recv(&mut p, qb, id).unwrap();
    }
    assert_ne!(state(&p.b, qb), ERR);
    recv(&mut p, qb, 3).unwrap();
    assert_eq!(state(&p.b, qb), ERR);
    assert_eq!(p.b.events(), [AsyncEvent::QpFatal(qb)]);
    let flushed: Vec<_> = p.b.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(flushed, [1, 2, 3].map(|id| (id, WcStatus::WrFlushErr)));
}

#[test]
fn a_timed_rule_fails_the_qps_it_names_once_its_time_comes() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let qpn = p.b.e.query_qp(qb).unwrap().0.dest_qp_num;
    let _ = qa;
    // Also a rule for a QP number no QP has: it fails nothing, and so is
    // not said to fire.
    let spec =
        FaultSpec::parse(&format!("qp_error qp={qpn} at=2ms; qp_error qp=1 at=2ms")).unwrap();
    let mut faults = Faults::new(&spec, &p.a.e.config().name, Part::Verbs).unwrap();
    let fired = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = fired.clone();
    faults.observe(Box::new(move |rule, qp| {
        log.lock().unwrap().push((rule.line, qp))
    }));
    p.a.e.set_faults(faults, p.now);
    let at = p.a.e.poll_timeout().unwrap();
    assert_eq!(at, p.now + 2_000_000);
    p.a.e.handle_timeout(at - 1);
    assert_eq!(p.a.events(), []);
    p.a.e.handle_timeout(at);
    assert_eq!(p.a.events(), [AsyncEvent::QpFatal(qa)]);
    assert_eq!(state(&p.a, qa), ERR);
    assert_eq!(p.a.e.poll_timeout(), None, "it fires once");
    assert_eq!(
        *fired.lock().unwrap(),
        [(1, Some(qpn))],
        "the observer is told"
    );
}

#[test]
fn a_refused_wr_refuses_its_whole_ibv_wr_complete_batch() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    rules(&mut p.a, p.now, "post_send nth=2 errno=EAGAIN");
    recv(&mut p, qb, 1).unwrap();
    let sge = [p.a.sge(0, 8)];
    let batch = [
        wr(1, send_opcode::SEND, &sge),
        wr(2, send_opcode::SEND, &sge),
    ];
    assert_eq!(p.a.e.post_send_batch(qa, &batch).unwrap_err().errno(), 11);
    p.run(1000);
    assert_eq!(p.a.poll(), [], "nothing of the batch was posted");
    assert_eq!(p.a.e.post_send_batch(qa, &batch[..1]), Ok(()));
}

#[test]
fn a_destroyed_qp_loses_its_held_completions() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    rules(&mut p.b, p.now, "completion opcode=RECV delay=5ms");
    recv(&mut p, qb, 1).unwrap();
    let sge = [p.a.sge(0, 8)];
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &sge))
        .unwrap();
    p.exchange();
    p.b.e.destroy_qp(qb).unwrap();
    p.run(100);
    assert_eq!(p.b.poll(), [], "nothing of the destroyed QP reached the CQ");
    assert_eq!(p.b.e.poll_timeout(), None);
}
