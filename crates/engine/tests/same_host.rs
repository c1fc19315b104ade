//! The same-host path (`softverbs_engine::direct`): error cases run once
//! over packets and once as whole operations, and must end the same way:
//! the same completions on both sides, the same async events, the same
//! QP states. The success paths are compared on random workloads by the
//! simulator (crates/sim/tests/same_host.rs).

mod common;
use common::pair::*;
use common::*;
use softverbs_engine::direct::TargetEvent;
use softverbs_engine::*;

/// What a run leaves behind on both nodes.
#[derive(Debug, PartialEq)]
struct Ending {
    a: Vec<(u64, WcStatus, WcOpcode, u32)>,
    b: Vec<(u64, WcStatus, WcOpcode, u32)>,
    a_events: Vec<u32>,
    b_events: Vec<u32>,
    states: (u32, u32),
    /// The rest of every completion (immediate data, flags, QP numbers),
    /// both sides, compared whole.
    rest: Vec<(u32, u32, u32, u32)>,
}

fn ending(p: &mut Pair, qa: QpId, qb: QpId) -> Ending {
    let (wa, wb) = (p.a.poll(), p.b.poll());
    let wcs = |w: &[WorkCompletion]| {
        w.iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len))
            .collect()
    };
    let rest = wa
        .iter()
        .chain(&wb)
        .map(|w| (w.imm_data_or_inv_rkey, w.wc_flags, w.qp_num, w.src_qp))
        .collect();
    let events = |n: &mut Node| n.events().iter().map(|e| e.event_type()).collect();
    Ending {
        a: wcs(&wa),
        b: wcs(&wb),
        a_events: events(&mut p.a),
        b_events: events(&mut p.b),
        states: (
            p.a.e.query_qp(qa).unwrap().0.qp_state,
            p.b.e.query_qp(qb).unwrap().0.qp_state,
        ),
        rest,
    }
}

/// Runs `scenario` on a wire pair and on a same-host pair and checks that
/// both end alike; returns the ending.
fn both_paths(link: Link, scenario: impl Fn(&mut Pair, QpId, QpId)) -> Ending {
    both_paths_of(QpType::Rc, link, scenario)
}

/// [`both_paths`] for QPs of type `ty`.
fn both_paths_of(ty: QpType, link: Link, scenario: impl Fn(&mut Pair, QpId, QpId)) -> Ending {
    both_paths_between("", |p| p.connect(ty, link), scenario)
}

/// [`both_paths`] for the QPs `connect` makes and brings up on each pair
/// (ends that disagree, say); `what` names the case if they differ.
fn both_paths_between(
    what: &str,
    connect: impl Fn(&mut Pair) -> (QpId, QpId),
    scenario: impl Fn(&mut Pair, QpId, QpId),
) -> Ending {
    let mut endings = Vec::new();
    for same_host in [false, true] {
        let mut p = Pair::on(same_host);
        let (qa, qb) = connect(&mut p);
        assert_eq!(p.a.e.is_direct(qa), same_host);
        scenario(&mut p, qa, qb);
        p.run(100_000);
        endings.push(ending(&mut p, qa, qb));
    }
    let host = endings.pop().unwrap();
    let wire = endings.pop().unwrap();
    assert_eq!(
        wire, host,
        "{what}: wire (left) and same host (right) differ"
    );
    host
}

fn write_to(p: &mut Pair, qa: QpId, wr_id: u64, rkey: u32, imm: bool) {
    let sge = [p.a.sge(0, 64)];
    let opcode = if imm {
        send_opcode::RDMA_WRITE_WITH_IMM
    } else {
        send_opcode::RDMA_WRITE
    };
    let mut w = wr(wr_id, opcode, &sge);
    w.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x1000,
        rkey,
    };
    p.a.e.post_send(qa, &w).unwrap();
}

#[test]
fn a_bad_rkey_is_a_remote_access_error_and_both_qps_fail() {
    let end = both_paths(Link::default(), |p, qa, _| {
        let wrong = p.b.key ^ 0x55;
        write_to(p, qa, 1, wrong, false);
        write_to(p, qa, 2, p.b.key, false);
    });
    assert_eq!(
        end.a[0],
        (1, WcStatus::RemAccessErr, WcOpcode::RdmaWrite, 0)
    );
    assert_eq!(end.a[1].1, WcStatus::WrFlushErr);
    assert_eq!(end.b_events, [3], "IBV_EVENT_QP_ACCESS_ERR at the target");
    assert_eq!(end.states, (QpState::Err as u32, QpState::Err as u32));
}

/// Without a receive WR, a WRITE_WITH_IMM is RNR NAK'd before its rkey
/// is looked at (the kernel's order), on both paths.
#[test]
fn a_write_with_imm_and_no_receive_wr_is_rnr_before_a_bad_rkey() {
    let link = Link {
        rnr_retry: 1,
        ..Link::default()
    };
    let end = both_paths(link, |p, qa, _| {
        let wrong = p.b.key ^ 0x55;
        write_to(p, qa, 1, wrong, true);
    });
    assert_eq!(end.a[0].1, WcStatus::RnrRetryExcErr);
    assert_eq!(end.b_events, [] as [u32; 0]);
    assert_eq!(end.states, (QpState::Err as u32, QpState::Rts as u32));
}

/// With a receive WR, a WRITE_ONLY_WITH_IMM's bad rkey fails the receive
/// WR it took as well as the WRITE, on both paths (rxe's order).
#[test]
fn a_write_with_imm_and_a_bad_rkey_fails_the_receive_wr_it_took() {
    let end = both_paths(Link::default(), |p, qa, qb| {
        p.b.post_recv(qb, 7, 0x3000, 16);
        let wrong = p.b.key ^ 0x55;
        write_to(p, qa, 1, wrong, true);
    });
    assert_eq!(end.a[0].1, WcStatus::RemAccessErr);
    assert_eq!(end.b[0].0, 7);
    assert_eq!(end.b[0].1, WcStatus::RemAccessErr);
    assert_eq!(end.b_events, [3], "IBV_EVENT_QP_ACCESS_ERR at the target");
}

/// A WRITE_WITH_IMM longer than the path MTU has its rkey checked at its
/// first packet, before its last one looks for a receive WR: a bad rkey
/// is a remote access error even without a receive WR, on both paths.
#[test]
fn a_multi_packet_write_with_imm_checks_its_rkey_before_the_receive_wr() {
    let end = both_paths(Link::default(), |p, qa, _| {
        let sge = [p.a.sge(0, 3000)];
        let mut w = wr(1, send_opcode::RDMA_WRITE_WITH_IMM, &sge);
        w.rdma = RdmaTarget {
            remote_addr: MEM_BASE,
            rkey: p.b.key ^ 0x55,
        };
        p.a.e.post_send(qa, &w).unwrap();
    });
    assert_eq!(end.a[0].1, WcStatus::RemAccessErr);
    assert_eq!(end.b_events, [3], "IBV_EVENT_QP_ACCESS_ERR at the target");
}

#[test]
fn a_write_the_qp_does_not_grant_is_an_invalid_request() {
    let link = Link {
        access: AccessFlags::REMOTE_READ,
        ..Link::default()
    };
    let end = both_paths(link, |p, qa, _| write_to(p, qa, 1, p.b.key, false));
    assert_eq!(end.a[0].1, WcStatus::RemInvReqErr);
    assert_eq!(end.b_events, [2], "IBV_EVENT_QP_REQ_ERR at the target");
}

#[test]
fn a_send_longer_than_the_receive_wr_fails_both_sides() {
    let end = both_paths(Link::default(), |p, qa, qb| {
        p.b.post_recv(qb, 7, 0x3000, 16);
        let sge = [p.a.sge(0, 64)];
        p.a.e
            .post_send(qa, &wr(1, send_opcode::SEND, &sge))
            .unwrap();
    });
    assert_eq!(end.a[0].1, WcStatus::RemInvReqErr);
    assert_eq!(end.b[0], (7, WcStatus::LocLenErr, WcOpcode::Recv, 0));
}

#[test]
fn no_receive_wr_and_no_rnr_retries_left_is_rnr_retry_exceeded() {
    let link = Link {
        rnr_retry: 0,
        ..Link::default()
    };
    let end = both_paths(link, |p, qa, _| write_to(p, qa, 1, p.b.key, true));
    assert_eq!(end.a[0].1, WcStatus::RnrRetryExcErr);
    assert_eq!(end.states.0, QpState::Err as u32);
}

#[test]
fn a_receive_posted_during_the_rnr_wait_takes_the_message() {
    let end = both_paths(Link::default(), |p, qa, qb| {
        write_to(p, qa, 1, p.b.key, true);
        p.run(1); // the RNR NAK (or outcome) arrives, the wait begins
        p.b.post_recv(qb, 9, 0x3000, 16);
    });
    assert_eq!(end.a, [(1, WcStatus::Success, WcOpcode::RdmaWrite, 0)]);
    assert_eq!(
        end.b,
        [(9, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 64)]
    );
}

#[test]
fn an_unmapped_target_buffer_is_a_remote_access_error() {
    let end = both_paths(Link::default(), |p, qa, _| {
        p.b.mem.unmap(MEM_BASE + 0x1000..MEM_BASE + 0x1040);
        write_to(p, qa, 1, p.b.key, false);
    });
    assert_eq!(end.a[0].1, WcStatus::RemAccessErr);
}

#[test]
fn an_unmapped_send_buffer_is_a_local_protection_error() {
    let end = both_paths(Link::default(), |p, qa, qb| {
        p.b.post_recv(qb, 7, 0x3000, 64);
        p.a.mem.unmap(MEM_BASE..MEM_BASE + 0x40);
        let sge = [p.a.sge(0, 64)];
        p.a.e
            .post_send(qa, &wr(1, send_opcode::SEND, &sge))
            .unwrap();
    });
    assert_eq!(end.a[0].1, WcStatus::LocProtErr);
}

/// A target whose process died answers nothing: the requester's local
/// ACK timer runs `retry_cnt` times, then the WR fails with
/// RETRY_EXC_ERR and the QP enters the error state, as with a dead peer
/// behind a NIC.
#[test]
fn a_target_gone_ends_in_retry_exceeded_within_the_timeout_budget() {
    let link = Link {
        retry_cnt: 3,
        timeout: 10,
        ..Link::default()
    };
    let mut p = Pair::same_host();
    p.reachable = Box::new(|_| false);
    let (qa, qb) = p.connect(QpType::Rc, link);
    let key = p.b.key;
    write_to(&mut p, qa, 1, key, false);
    p.run(1000);
    let end = ending(&mut p, qa, qb);
    assert_eq!(end.a, [(1, WcStatus::RetryExcErr, WcOpcode::RdmaWrite, 0)]);
    let budget = ack_timeout(10).unwrap() * 4 + 1_000_000;
    assert!(p.now <= budget, "failed at {} ns, budget {budget}", p.now);
}

#[test]
fn operations_leave_as_whole_messages_in_order() {
    let mut p = Pair::same_host();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    for i in 0..4 {
        p.b.post_recv(qb, 10 + i, 0x3000 + i * 0x2000, 5000);
    }
    let sge = [p.a.sge(0, 5000)];
    for i in 0..4 {
        p.a.e
            .post_send(qa, &wr(i, send_opcode::SEND, &sge))
            .unwrap();
    }
    let moved = p.run(1000);
    assert_eq!(moved, 4, "one operation per message, no packets");
    let got: Vec<_> = p.b.poll().iter().map(|w| (w.wr_id, w.byte_len)).collect();
    assert_eq!(got, [(10, 5000), (11, 5000), (12, 5000), (13, 5000)]);
}

#[test]
fn qp_changes_are_reported_once_tracking_is_on() {
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    assert_eq!(p.a.e.poll_qp_change(), None, "not tracked by default");
    p.a.e.track_changes();
    p.a.e
        .modify_qp(qa, &attr(QpState::Err), QpAttrMask::STATE)
        .unwrap();
    let qpn = p.a.e.qp_num(qa).unwrap();
    assert_eq!(p.a.e.poll_qp_change(), Some((qa, qpn)));
    assert_eq!(p.a.e.poll_qp_change(), None);
    p.a.e.destroy_qp(qa).unwrap();
    assert_eq!(p.a.e.poll_qp_change(), Some((qa, qpn)));
}

#[test]
fn send_with_invalidate_fails_at_the_target_as_on_the_wire() {
    let end = both_paths(Link::default(), |p, qa, qb| {
        p.b.post_recv(qb, 7, 0x3000, 64);
        let sge = [p.a.sge(0, 64)];
        let mut w = wr(1, send_opcode::SEND_WITH_INV, &sge);
        w.imm_data_or_inv_rkey = p.b.key;
        p.a.e.post_send(qa, &w).unwrap();
    });
    assert_eq!(end.a[0].1, WcStatus::RemInvReqErr);
    assert_eq!(end.b[0], (7, WcStatus::RemInvReqErr, WcOpcode::Recv, 0));
    assert_eq!(end.states, (QpState::Err as u32, QpState::Err as u32));
}

#[test]
fn a_read_checks_the_target_before_its_own_unusable_sges() {
    let end = both_paths(Link::default(), |p, qa, _| {
        let ro =
            p.a.e
                .reg_mr(p.a.pd, MEM_BASE, 0x100, MEM_BASE, 0)
                .unwrap()
                .key;
        let sge = [Sge {
            addr: MEM_BASE,
            length: 64,
            lkey: ro,
        }];
        let mut w = wr(1, send_opcode::RDMA_READ, &sge);
        w.rdma = RdmaTarget {
            remote_addr: MEM_BASE + 0x1000,
            rkey: p.b.key ^ 0x55,
        };
        p.a.e.post_send(qa, &w).unwrap();
    });
    assert_eq!(
        end.a[0].1,
        WcStatus::RemAccessErr,
        "the bad rkey is found first"
    );
    assert_eq!(end.b_events, [3]);
}

fn read_from(p: &mut Pair, qa: QpId, wr_id: u64, rkey: u32) {
    let sge = [p.a.sge(0x100 * wr_id, 64)];
    let mut w = wr(wr_id, send_opcode::RDMA_READ, &sge);
    w.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x1000,
        rkey,
    };
    p.a.e.post_send(qa, &w).unwrap();
}

/// With `timeout` 0 no timer resends a request the target dropped while
/// it was not ready. On the wire the next request's packets draw a PSN
/// sequence NAK that sends the requester back; the same-host path tries
/// the dropped operation again when the next WR is posted.
#[test]
fn with_an_infinite_timeout_a_dropped_request_is_resent_when_the_next_is_posted() {
    let link = Link {
        timeout: 0,
        ..Link::default()
    };
    let end = both_paths(link, |p, qa, qb| {
        p.b.e
            .modify_qp(qb, &attr(QpState::Reset), QpAttrMask::STATE)
            .unwrap();
        let key = p.b.key;
        write_to(p, qa, 1, key, false);
        p.run(100);
        assert!(
            p.a.poll().is_empty(),
            "nothing completes while the target is down"
        );
        p.bring_up_b(QpType::Rc, qa, qb, link);
        write_to(p, qa, 2, key, false);
    });
    let ok = |id| (id, WcStatus::Success, WcOpcode::RdmaWrite, 0);
    assert_eq!(end.a, [ok(1), ok(2)]);
}

/// Every WR started before SQD was entered completes before
/// IBV_EVENT_SQ_DRAINED, on both paths alike.
#[test]
fn sqd_drains_the_same_wrs_as_on_the_wire() {
    let end = both_paths(Link::default(), |p, qa, qb| {
        let sge = [p.a.sge(0, 64)];
        for id in 1..=3 {
            p.a.e
                .post_send(qa, &wr(id, send_opcode::SEND, &sge))
                .unwrap();
        }
        p.run(2); // the first meets an RNR NAK: no receive WR yet
        let sqd = QpAttr {
            en_sqd_async_notify: 1,
            ..attr(QpState::Sqd)
        };
        p.a.e
            .modify_qp(
                qa,
                &sqd,
                QpAttrMask::STATE | QpAttrMask::EN_SQD_ASYNC_NOTIFY,
            )
            .unwrap();
        for id in 0..3 {
            p.b.post_recv(qb, 10 + id, 0x3000 + 0x100 * id, 64);
        }
    });
    assert_eq!(end.a.len(), 3, "{end:?}");
    assert!(end.a_events.contains(&5), "SQ_DRAINED: {end:?}");
}

/// A READ that fails flushes the started READ behind it, which reports
/// its length as a flushed READ does on the wire.
#[test]
fn a_failed_read_flushes_the_started_read_behind_it_alike() {
    let end = both_paths(Link::default(), |p, qa, _| {
        let key = p.b.key;
        read_from(p, qa, 1, key ^ 0x55);
        read_from(p, qa, 2, key);
    });
    assert_eq!(end.a[0].1, WcStatus::RemAccessErr);
    assert_eq!(end.a[1].1, WcStatus::WrFlushErr);
}

fn atomic_to(p: &mut Pair, qa: QpId, wr_id: u64, va: u64) {
    let rkey = p.b.key;
    atomic_with(p, qa, wr_id, va, rkey);
}

fn atomic_with(p: &mut Pair, qa: QpId, wr_id: u64, va: u64, rkey: u32) {
    let sge = [p.a.sge(0x800, 8)];
    let mut w = wr(wr_id, send_opcode::ATOMIC_FETCH_AND_ADD, &sge);
    w.atomic = AtomicTarget {
        remote_addr: va,
        compare_add: 1,
        swap: 0,
        rkey,
    };
    p.a.e.post_send(qa, &w).unwrap();
}

#[test]
fn atomics_answer_alike_and_refuse_alike() {
    let end = both_paths(Link::default(), |p, qa, _| {
        atomic_to(p, qa, 1, MEM_BASE + 0x2000);
        atomic_to(p, qa, 2, MEM_BASE + 0x2000);
    });
    assert_eq!(end.a.len(), 2);
    assert!(end.a.iter().all(|w| w.1 == WcStatus::Success));
    let misaligned = both_paths(Link::default(), |p, qa, _| {
        atomic_to(p, qa, 1, MEM_BASE + 0x2004)
    });
    assert_eq!(misaligned.a[0].1, WcStatus::RemInvReqErr);
    // The R_Key is checked before the alignment, as rxe's responder
    // does: a misaligned atomic with a bad R_Key is an access error.
    let bad_key = both_paths(Link::default(), |p, qa, _| {
        let wrong = p.b.key ^ 0x100;
        atomic_with(p, qa, 1, MEM_BASE + 0x2004, wrong)
    });
    assert_eq!(bad_key.a[0].1, WcStatus::RemAccessErr);
    let no_right = Link {
        access: AccessFlags::REMOTE_WRITE,
        ..Link::default()
    };
    let refused = both_paths(no_right, |p, qa, _| atomic_to(p, qa, 1, MEM_BASE + 0x2000));
    assert_eq!(refused.a[0].1, WcStatus::RemInvReqErr);
    assert_eq!(refused.b_events, [2]);
}

#[test]
fn zero_length_messages_with_immediate_data_arrive_alike() {
    let end = both_paths(Link::default(), |p, qa, qb| {
        p.b.post_recv(qb, 7, 0x3000, 16);
        p.b.post_recv(qb, 8, 0x3100, 16);
        let mut s = wr(1, send_opcode::SEND_WITH_IMM, &[]);
        s.imm_data_or_inv_rkey = 0x1234_5678;
        p.a.e.post_send(qa, &s).unwrap();
        let mut w = wr(2, send_opcode::RDMA_WRITE_WITH_IMM, &[]);
        w.imm_data_or_inv_rkey = 0x9abc_def0;
        w.rdma = RdmaTarget {
            remote_addr: MEM_BASE + 0x1000,
            rkey: p.b.key,
        };
        p.a.e.post_send(qa, &w).unwrap();
    });
    assert_eq!(end.b[0], (7, WcStatus::Success, WcOpcode::Recv, 0));
    assert_eq!(
        end.b[1],
        (8, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 0)
    );
}

/// UC has no NAKs: a WRITE with a bad rkey is dropped, the WR completes,
/// and the QP goes on taking the next message.
#[test]
fn uc_drops_a_bad_write_and_goes_on_alike() {
    let end = both_paths_of(QpType::Uc, Link::default(), |p, qa, qb| {
        let key = p.b.key;
        write_to(p, qa, 1, key ^ 0x55, false);
        p.b.post_recv(qb, 7, 0x3000, 64);
        let sge = [p.a.sge(0, 64)];
        p.a.e
            .post_send(qa, &wr(2, send_opcode::SEND, &sge))
            .unwrap();
    });
    assert_eq!(end.a.len(), 2);
    assert!(end.a.iter().all(|w| w.1 == WcStatus::Success));
    assert_eq!(end.b, [(7, WcStatus::Success, WcOpcode::Recv, 64)]);
    assert_eq!(end.states, (QpState::Rts as u32, QpState::Rts as u32));
}

/// A UC WRITE_WITH_IMM writes its RETH's range, not the receive WR it
/// takes, so a WR shorter than its data takes it (the differential run
/// against rxe found the same-host path dropping it as a too long SEND).
#[test]
fn uc_write_with_imm_takes_a_receive_wr_shorter_than_its_data_alike() {
    let end = both_paths_of(QpType::Uc, Link::default(), |p, qa, qb| {
        p.b.post_recv(qb, 7, 0x3000, 4);
        let key = p.b.key;
        write_to(p, qa, 1, key, true);
    });
    assert_eq!(end.a, [(1, WcStatus::Success, WcOpcode::RdmaWrite, 0)]);
    assert_eq!(
        end.b,
        [(7, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 64)]
    );
}

/// A UC WRITE_WITH_IMM with a bad rkey is dropped without taking the
/// receive WR it would have (no NAK, rxe's class D1E): the next message
/// takes it.
#[test]
fn uc_write_with_imm_with_a_bad_rkey_leaves_its_receive_wr_alike() {
    let end = both_paths_of(QpType::Uc, Link::default(), |p, qa, qb| {
        p.b.post_recv(qb, 7, 0x3000, 64);
        let key = p.b.key;
        write_to(p, qa, 1, key ^ 0x55, true);
        let sge = [p.a.sge(0, 64)];
        p.a.e
            .post_send(qa, &wr(2, send_opcode::SEND, &sge))
            .unwrap();
    });
    assert!(end.a.iter().all(|w| w.1 == WcStatus::Success));
    assert_eq!(end.b, [(7, WcStatus::Success, WcOpcode::Recv, 64)]);
    assert_eq!(end.states, (QpState::Rts as u32, QpState::Rts as u32));
}

/// Node b's QP `qb` receives from a new SRQ of `max_wr` WRs, ids
/// `1..=posted` posted (64 bytes each at 0x4000 + 0x100 * id), its limit
/// armed at `limit`; connected to a new QP of node a. Returns (qa, qb).
fn connect_to_srq(p: &mut Pair, posted: u64, limit: u32, link: Link) -> (QpId, QpId, SrqId) {
    let attr = SrqAttr {
        max_wr: 16,
        max_sge: 4,
        srq_limit: 0,
    };
    let (srq, _) = p.b.e.create_srq(p.b.pd, &attr).unwrap();
    for id in 1..=posted {
        let sge = [p.b.sge(0x4000 + 0x100 * id, 64)];
        let wr = RecvWr {
            wr_id: id,
            sg_list: &sge,
        };
        p.b.e.post_srq_recv(srq, &wr).unwrap();
    }
    let arm = SrqAttr {
        srq_limit: limit,
        ..attr
    };
    p.b.e.modify_srq(srq, &arm, SrqAttrMask::LIMIT).unwrap();
    let qa = create(&mut p.a, QpType::Rc, None);
    let qb = create(&mut p.b, QpType::Rc, Some(srq));
    p.bring_up(QpType::Rc, qa, qb, link);
    (qa, qb, srq)
}

fn send(p: &mut Pair, qa: QpId, wr_id: u64, byte: u8) {
    let offset = 0x100 * wr_id;
    p.a.mem.write(MEM_BASE + offset, &[byte; 48]).unwrap();
    let sge = [p.a.sge(offset, 48)];
    p.a.e
        .post_send(qa, &wr(wr_id, send_opcode::SEND, &sge))
        .unwrap();
}

#[test]
fn sends_to_a_qp_on_an_srq_complete_and_fire_the_limit_alike() {
    let mut endings = Vec::new();
    for same_host in [false, true] {
        let mut p = Pair::on(same_host);
        let (qa, qb, _) = connect_to_srq(&mut p, 4, 3, Link::default());
        assert_eq!(p.b.e.is_direct(qb), same_host, "on the SRQ too");
        for id in 1..=3 {
            send(&mut p, qa, id, id as u8);
        }
        p.run(100_000);
        for id in 1..=3u64 {
            let mut got = [0u8; 48];
            p.b.mem
                .read(MEM_BASE + 0x4000 + 0x100 * id, &mut got)
                .unwrap();
            assert_eq!(got, [id as u8; 48], "message {id} in WR {id}");
        }
        endings.push(ending(&mut p, qa, qb));
    }
    let (host, wire) = (endings.pop().unwrap(), endings.pop().unwrap());
    assert_eq!(wire, host, "wire (left) and same host (right) differ");
    let received: Vec<u64> = host.b.iter().map(|w| w.0).collect();
    assert_eq!(received, [1, 2, 3]);
    assert_eq!(host.b_events, [15], "IBV_EVENT_SRQ_LIMIT_REACHED, once");
}

#[test]
fn an_empty_srq_answers_rnr_alike() {
    let link = Link {
        rnr_retry: 2,
        ..Link::default()
    };
    let mut endings = Vec::new();
    for same_host in [false, true] {
        let mut p = Pair::on(same_host);
        let (qa, qb, _) = connect_to_srq(&mut p, 0, 0, link);
        send(&mut p, qa, 1, 1);
        p.run(100_000);
        endings.push(ending(&mut p, qa, qb));
    }
    let (host, wire) = (endings.pop().unwrap(), endings.pop().unwrap());
    assert_eq!(wire, host, "wire (left) and same host (right) differ");
    assert_eq!(host.a[0].1, WcStatus::RnrRetryExcErr);
}

#[test]
fn a_wire_qp_and_a_same_host_qp_share_one_srq_without_taking_a_wr_twice() {
    let mut p = Pair::same_host();
    let (qa1, qb1, srq) = connect_to_srq(&mut p, 8, 0, Link::default());
    let qa2 = create(&mut p.a, QpType::Rc, None);
    let qb2 = create(&mut p.b, QpType::Rc, Some(srq));
    p.bring_up(QpType::Rc, qa2, qb2, Link::default());
    p.a.e.set_direct(qa2, false).unwrap();
    p.b.e.set_direct(qb2, false).unwrap();
    assert!(p.a.e.is_direct(qa1) && !p.a.e.is_direct(qa2));
    for id in 1..=8u64 {
        let qa = if id % 2 == 1 { qa1 } else { qa2 };
        send(&mut p, qa, id, id as u8);
        p.run(100_000);
    }
    let received = p.b.poll();
    let mut ids: Vec<u64> = received.iter().map(|w| w.wr_id).collect();
    assert!(received.iter().all(|w| w.status == WcStatus::Success));
    ids.sort();
    assert_eq!(ids, (1..=8).collect::<Vec<_>>(), "every WR taken once");
    for w in &received {
        let qp = if w.qp_num == p.b.e.qp_num(qb1).unwrap() {
            "same host"
        } else {
            "wire"
        };
        let mut got = [0u8; 48];
        p.b.mem
            .read(MEM_BASE + 0x4000 + 0x100 * w.wr_id, &mut got)
            .unwrap();
        assert!(
            got.iter().all(|&b| b == got[0] && b != 0),
            "{qp} WR {}",
            w.wr_id
        );
    }
    assert_eq!(p.b.e.srq_len(srq).unwrap(), 0);
}

#[test]
fn a_stale_delivery_from_before_a_reset_completes_nothing() {
    let mut p = Pair::same_host();
    let (_, qb) = p.connect(QpType::Rc, Link::default());
    let qpn = p.b.e.qp_num(qb).unwrap();
    p.b.post_recv(qb, 1, 0x3000, 64);
    let old = p.b.e.peek_recv(qpn).unwrap();
    assert!(p.b.e.claim_recv(qpn, old.seq));
    p.b.e
        .modify_qp(qb, &attr(QpState::Reset), QpAttrMask::STATE)
        .unwrap();
    p.b.e
        .modify_qp(qb, &init_step(QpType::Rc).0, init_step(QpType::Rc).1)
        .unwrap();
    p.b.post_recv(qb, 1, 0x3000, 64);
    let wc = WorkCompletion {
        status: WcStatus::Success,
        ..WorkCompletion::flushed(1, WcOpcode::Recv, qpn)
    };
    assert!(
        !p.b.e.apply_delivery(qpn, old.seq, wc, false),
        "same wr_id, old number"
    );
    assert!(p.b.poll().is_empty());
    assert_eq!(p.b.e.peek_recv(qpn).map(|w| w.wr_id), Some(1));
}

#[test]
fn a_fault_found_before_a_reset_leaves_the_qp_alone_after_it() {
    let mut p = Pair::same_host();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let qpn = p.b.e.qp_num(qb).unwrap();
    let found = p.b.e.peer_qp(qb).unwrap().incarnation;
    // The owner resets its QP and brings it up again before the fault a
    // peer found in the old incarnation arrives.
    p.b.e
        .modify_qp(qb, &attr(QpState::Reset), QpAttrMask::STATE)
        .unwrap();
    p.bring_up_b(QpType::Rc, qa, qb, Link::default());
    assert_ne!(p.b.e.peer_qp(qb).unwrap().incarnation, found);
    p.b.e.apply_fault(qpn, found, TargetEvent::AccessErr);
    assert_eq!(p.b.e.peer_qp(qb).unwrap().state, QpState::Rts);
    assert!(
        p.b.e.poll_event().is_none(),
        "no event for the old connection"
    );
    // A fault in the current incarnation fails it.
    let now = p.b.e.peer_qp(qb).unwrap().incarnation;
    p.b.e.apply_fault(qpn, now, TargetEvent::AccessErr);
    assert_eq!(p.b.e.peer_qp(qb).unwrap().state, QpState::Err);
}

/// A UD datagram from a's QP to b's: `len` bytes of `byte` at offset 0,
/// with the Q_Key `qkey` (high bit: the QP's own) and immediate data.
fn datagram(p: &mut Pair, qa: QpId, qb: QpId, wr_id: u64, len: u32, qkey: u32) {
    p.a.mem
        .write(MEM_BASE, &vec![wr_id as u8; len as usize])
        .unwrap();
    let sge = [p.a.sge(0, len)];
    let mut s = wr(wr_id, send_opcode::SEND_WITH_IMM, &sge);
    s.imm_data_or_inv_rkey = 0x1000 + wr_id as u32;
    s.ud = Some(UdTarget {
        remote_qkey: qkey,
        ..p.ud_target(qb)
    });
    p.a.e.post_send(qa, &s).unwrap();
}

/// UD over both paths (and with every datagram answered `Wire`): the
/// same completions, and the same GRH and payload in each receive WR.
fn ud_both_ways(scenario: impl Fn(&mut Pair, QpId, QpId)) -> Ending {
    let mut endings = Vec::new();
    let mut bytes = Vec::new();
    for (same_host, via_wire) in [(false, false), (true, false), (true, true)] {
        let mut p = Pair::on(same_host);
        p.ud_via_wire = via_wire;
        let (qa, qb) = p.connect(QpType::Ud, Link::default());
        assert_eq!(p.a.e.is_direct(qa), same_host);
        scenario(&mut p, qa, qb);
        p.run(100_000);
        bytes.push(p.b.mem.slice(MEM_BASE + 0x3000, 0x400).to_vec());
        endings.push(ending(&mut p, qa, qb));
    }
    assert!(
        bytes.windows(2).all(|w| w[0] == w[1]),
        "received bytes differ"
    );
    let last = endings.pop().unwrap();
    for e in &endings {
        assert_eq!(*e, last, "wire, same host, same host via the wire differ");
    }
    last
}

#[test]
fn ud_datagrams_arrive_alike_with_their_grh() {
    let end = ud_both_ways(|p, qa, qb| {
        p.b.post_recv(qb, 7, 0x3000, 40 + 100);
        p.b.post_recv(qb, 8, 0x3100, 40 + 100);
        datagram(p, qa, qb, 1, 100, 0x8000_0000);
        datagram(p, qa, qb, 2, 60, 0x1111_1111);
    });
    let got: Vec<_> = end.b.iter().map(|w| (w.0, w.1, w.3)).collect();
    assert_eq!(
        got,
        [(7, WcStatus::Success, 140), (8, WcStatus::Success, 100)]
    );
    assert_eq!(end.a.len(), 2, "both sends complete");
}

#[test]
fn ud_drops_a_wrong_qkey_and_a_datagram_too_long_for_the_wr_alike() {
    let end = ud_both_ways(|p, qa, qb| {
        p.b.post_recv(qb, 7, 0x3000, 40 + 50);
        datagram(p, qa, qb, 1, 30, 0x2222);
        datagram(p, qa, qb, 2, 100, 0x8000_0000);
        datagram(p, qa, qb, 3, 50, 0x8000_0000);
    });
    assert_eq!(end.b.len(), 1, "only the third arrives");
    assert_eq!(end.b[0], (7, WcStatus::Success, WcOpcode::Recv, 90));
    assert_eq!(end.a.len(), 3, "every send completes");
}

#[test]
fn ud_without_a_receive_wr_loses_the_datagram_alike() {
    let end = ud_both_ways(|p, qa, qb| {
        datagram(p, qa, qb, 1, 30, 0x8000_0000);
    });
    assert!(end.b.is_empty());
    assert_eq!(end.a, [(1, WcStatus::Success, WcOpcode::Send, 0)]);
}

/// A UD work request's `remote_qpn` above 24 bits goes to its low 24
/// bits on both paths, as the BTH carries it (before, the same-host path
/// looked the whole number up, found nothing, and lost the datagram).
#[test]
fn ud_remote_qpn_is_taken_to_24_bits_alike() {
    let end = ud_both_ways(|p, qa, qb| {
        p.b.post_recv(qb, 7, 0x3000, 40 + 50);
        p.a.mem.write(MEM_BASE, &[9; 50]).unwrap();
        let sge = [p.a.sge(0, 50)];
        let mut s = wr(1, send_opcode::SEND, &sge);
        let target = p.ud_target(qb);
        s.ud = Some(UdTarget {
            remote_qpn: target.remote_qpn | 0x0100_0000,
            ..target
        });
        p.a.e.post_send(qa, &s).unwrap();
    });
    assert_eq!(end.b, [(7, WcStatus::Success, WcOpcode::Recv, 90)]);
}

/// QPs of type `ty` brought up with each end's own link settings (a's,
/// then b's): ends that disagree, as a program's mistake makes them.
fn connect_each(p: &mut Pair, ty: QpType, a: Link, b: Link) -> (QpId, QpId) {
    let (qa, qb) = (create(&mut p.a, ty, None), create(&mut p.b, ty, None));
    p.bring_up_each(ty, (qa, a), (qb, b));
    (qa, qb)
}

/// Links that differ in their path MTU only (a's, then b's).
fn mtus(mtu_a: Mtu, mtu_b: Mtu) -> (Link, Link) {
    let link = Link::default();
    (Link { mtu: mtu_a, ..link }, Link { mtu: mtu_b, ..link })
}

/// Posts a's WR `wr_id`: `opcode` over a's first `len` bytes, a WRITE or
/// READ aimed at b's memory 0x1000 on.
fn post_at_b(p: &mut Pair, qa: QpId, wr_id: u64, opcode: u32, len: u32) {
    let sge = [p.a.sge(0, len)];
    let mut w = wr(wr_id, opcode, &sge);
    w.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x1000,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &w).unwrap();
}

/// A READ longer than the smaller of two disagreeing path MTUs: the
/// target cuts its responses at its own MTU, which the requester does not
/// take (IBV_WC_BAD_RESP_ERR, its QP in error, the WR behind flushed; the
/// target stays in RTS), on both paths alike. A READ that fits both
/// completes.
#[test]
fn a_read_between_ends_that_disagree_on_the_path_mtu_fails_alike() {
    let disagreements = [(Mtu::Mtu4096, Mtu::Mtu1024), (Mtu::Mtu1024, Mtu::Mtu4096)];
    for (mtu_a, mtu_b) in disagreements {
        let (a, b) = mtus(mtu_a, mtu_b);
        let what = format!("{mtu_a:?}/{mtu_b:?}");
        let connect = |p: &mut Pair| connect_each(p, QpType::Rc, a, b);
        let host = both_paths_between(&what, connect, |p, qa, _| {
            let ops = [
                (1, send_opcode::RDMA_READ, 500),
                (2, send_opcode::RDMA_READ, 3000),
                (3, send_opcode::RDMA_WRITE, 100),
            ];
            for (wr_id, opcode, len) in ops {
                post_at_b(p, qa, wr_id, opcode, len);
            }
        });
        let statuses: Vec<_> = host.a.iter().map(|w| (w.0, w.1)).collect();
        assert_eq!(
            statuses,
            [
                (1, WcStatus::Success),
                (2, WcStatus::BadRespErr),
                (3, WcStatus::WrFlushErr)
            ],
            "{mtu_a:?}/{mtu_b:?}"
        );
        assert_eq!(host.states, (QpState::Err as u32, QpState::Rts as u32));
    }
}

/// A responder started at another PSN than its requester (a program that
/// swapped the PSNs it exchanged) takes nothing on the wire: every packet
/// is a duplicate or out of sequence, and the requester ends in
/// RETRY_EXC_ERR. So on the same-host path, for a responder expecting a
/// PSN before the requester's and one after it. UC takes a message from
/// a requester ahead of it on both paths (one behind it: conformance.md).
#[test]
fn a_responder_expecting_another_psn_takes_nothing_alike() {
    for (ty, b_expects) in [(QpType::Rc, 50), (QpType::Rc, 150), (QpType::Uc, 50)] {
        let link = Link::default();
        let b_link = Link {
            psn_a: b_expects,
            ..link
        };
        let what = format!("{ty:?}, b expects {b_expects}");
        let connect = |p: &mut Pair| connect_each(p, ty, link, b_link);
        let host = both_paths_between(&what, connect, |p, qa, qb| {
            p.b.post_recv(qb, 7, 0x3000, 4096);
            for (wr_id, opcode) in [(1, send_opcode::RDMA_WRITE), (2, send_opcode::SEND)] {
                post_at_b(p, qa, wr_id, opcode, 100);
            }
        });
        let statuses: Vec<_> = host.a.iter().map(|w| (w.0, w.1)).collect();
        let b_took: Vec<_> = host.b.iter().map(|w| (w.0, w.1)).collect();
        if ty == QpType::Rc {
            assert_eq!(
                statuses,
                [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)],
                "{host:?}"
            );
            assert_eq!(b_took, [], "{host:?}");
        } else {
            assert_eq!(statuses, [(1, WcStatus::Success), (2, WcStatus::Success)]);
            assert_eq!(b_took, [(7, WcStatus::Success)]);
        }
    }
}

/// Rule (IBTA ch. 9 packet lengths; rxe `check_length`): ends that
/// disagree on the path MTU fail a message longer than the smaller one
/// with an invalid request, the responder's QP in error, on both paths
/// (the same-host path once moved it): a's 4096 against b's 1024, whose
/// only packet is too long, and a's 1024 against b's 4096, whose first
/// packet is not b's MTU; a 500-byte message before it, which fits both,
/// goes through. A SEND's receive WR, and a one-packet WRITE_WITH_IMM's,
/// completes with IBV_WC_REM_INV_REQ_ERR (rxe takes it before it checks
/// the length); the others are flushed.
#[test]
fn ends_that_disagree_on_the_path_mtu_fail_alike() {
    let disagreements = [(Mtu::Mtu4096, Mtu::Mtu1024), (Mtu::Mtu1024, Mtu::Mtu4096)];
    for (mtu_a, mtu_b) in disagreements {
        for opcode in [
            send_opcode::RDMA_WRITE,
            send_opcode::SEND,
            send_opcode::RDMA_WRITE_WITH_IMM,
        ] {
            let (a, b) = mtus(mtu_a, mtu_b);
            let what = format!("{mtu_a:?}/{mtu_b:?} op {opcode}");
            let connect = |p: &mut Pair| connect_each(p, QpType::Rc, a, b);
            let host = both_paths_between(&what, connect, |p, qa, qb| {
                p.b.post_recv(qb, 7, 0x3000, 4096);
                p.b.post_recv(qb, 8, 0x5000, 4096);
                for (wr_id, len) in [(1, 500), (2, 3000)] {
                    post_at_b(p, qa, wr_id, opcode, len);
                }
            });
            let statuses: Vec<_> = host.a.iter().map(|w| (w.0, w.1)).collect();
            assert_eq!(
                statuses,
                [(1, WcStatus::Success), (2, WcStatus::RemInvReqErr)],
                "{mtu_a:?}/{mtu_b:?} op {opcode}"
            );
            assert_eq!(host.states.1, QpState::Err as u32);
            // A SEND's receive WR is taken before its length is looked
            // at, and a WRITE_WITH_IMM's when it is one packet (a longer
            // one takes it at its LAST): completed with the error.
            let only_packet = mtu_a == Mtu::Mtu4096;
            let taken = match opcode {
                send_opcode::SEND => true,
                send_opcode::RDMA_WRITE_WITH_IMM => only_packet,
                _ => false,
            };
            let status = if taken {
                WcStatus::RemInvReqErr
            } else {
                WcStatus::WrFlushErr
            };
            assert_eq!((host.b[1].0, host.b[1].1), (8, status), "{host:?}");
        }
    }
}

/// A SEND whose receive WR has both faults, an SGE past its MR inside
/// the first packet and too little room in all: the wire responder
/// scatters packet by packet and meets the protection error first (the
/// receive WR IBV_WC_LOC_PROT_ERR, the requester IBV_WC_REM_OP_ERR); the
/// same-host path, which plans the whole message, once named the length.
#[test]
fn a_receive_wr_with_two_faults_fails_with_the_first_packets_alike() {
    let end = both_paths_of(QpType::Rc, Link::default(), |p, qa, qb| {
        let outside = Sge {
            addr: MEM_BASE + MEM_LEN as u64 - 100,
            length: 1000,
            lkey: p.b.key,
        };
        let sges = [p.b.sge(0x3000, 64), outside];
        let recv = RecvWr {
            wr_id: 7,
            sg_list: &sges,
        };
        p.b.e.post_recv(qb, &recv).unwrap();
        let sge = [p.a.sge(0, 3000)];
        p.a.e
            .post_send(qa, &wr(1, send_opcode::SEND, &sge))
            .unwrap();
    });
    assert_eq!(end.b[0].1, WcStatus::LocProtErr);
    assert_eq!(end.a[0].1, WcStatus::RemOpErr);
}

/// A SEND too long for the responder's path MTU that finds no receive WR
/// is refused for want of one first (an RNR NAK, as rxe's
/// `check_resource` comes before `check_length`), on both paths: with
/// `rnr_retry` 1 the requester ends in IBV_WC_RNR_RETRY_EXC_ERR, not in
/// an invalid request.
#[test]
fn a_send_too_long_for_the_mtu_without_a_receive_wr_is_rnr_first_alike() {
    let mut endings = Vec::new();
    for same_host in [false, true] {
        let mut p = Pair::on(same_host);
        let (qa, qb) = (
            create(&mut p.a, QpType::Rc, None),
            create(&mut p.b, QpType::Rc, None),
        );
        let link = Link {
            rnr_retry: 1,
            ..Link::default()
        };
        let (a, b) = (
            Link {
                mtu: Mtu::Mtu4096,
                ..link
            },
            Link {
                mtu: Mtu::Mtu1024,
                ..link
            },
        );
        p.bring_up_each(QpType::Rc, (qa, a), (qb, b));
        let sge = [p.a.sge(0, 3000)];
        p.a.e
            .post_send(qa, &wr(1, send_opcode::SEND, &sge))
            .unwrap();
        p.run(100_000);
        endings.push(ending(&mut p, qa, qb));
    }
    let (host, wire) = (endings.pop().unwrap(), endings.pop().unwrap());
    assert_eq!(wire, host, "wire (left) and same host (right) differ");
    assert_eq!(host.a[0].1, WcStatus::RnrRetryExcErr, "{host:?}");
}

/// Rule (a NIC takes a request only at the PSN its responder expects,
/// which every message moves): a connection on the same-host path at
/// both ends sends nothing on the wire, and carries no PSNs, so a packet
/// that arrives for it is forged (by anyone on the host who can send from
/// the peer's address) or stale, and is dropped and counted, after the
/// connection's traffic as before it; a forged SEND at the PSN the
/// responder started at once took a receive WR (a helper's attack). A
/// target whose peer keeps the wire (its requester decided so) takes the
/// packet, as any QP does.
#[test]
fn a_connection_on_the_same_host_path_at_both_ends_takes_no_packets() {
    // The forger's packet: a's first SEND, as a wire pair's a sends it.
    let mut wire = Pair::new();
    let (wa, _) = wire.connect(QpType::Rc, Link::default());
    let sge = [wire.a.sge(0, 16)];
    wire.a
        .e
        .post_send(wa, &wr(1, send_opcode::SEND, &sge))
        .unwrap();
    let mut buf = vec![0u8; MAX_PACKET_LEN];
    let t = wire.a.e.poll_transmit(0, &wire.a.mem, &mut buf).unwrap();
    let forged = buf[..t.len].to_vec();
    for peer_direct in [true, false] {
        let mut p = Pair::same_host();
        let (qa, qb) = p.connect(QpType::Rc, Link::default());
        assert_eq!(p.a.e.qp_num(qa), wire.a.e.qp_num(wa), "the same QP numbers");
        if peer_direct {
            p.a.e.set_peer_direct(qa).unwrap();
            p.b.e.set_peer_direct(qb).unwrap();
        }
        p.b.post_recv(qb, 7, 0x3000, 100);
        p.b.post_recv(qb, 8, 0x3000, 100);
        let legit = [p.a.sge(0, 16)];
        p.a.e
            .post_send(qa, &wr(1, send_opcode::SEND, &legit))
            .unwrap();
        p.run(1000);
        assert_eq!(p.b.poll().len(), 1, "the connection's own SEND");
        p.b.e
            .handle_packet(0, t.src_gid, t.dst_gid, &forged, &mut p.b.mem);
        let taken = p.b.poll().len();
        let counted = p.b.e.stats().rx_peer_on_same_host;
        if peer_direct {
            assert_eq!((taken, counted), (0, 1), "forged");
        } else {
            assert_eq!((taken, counted), (1, 0), "a requester on the wire");
        }
    }
}
