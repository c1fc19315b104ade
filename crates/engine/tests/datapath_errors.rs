//! Errors and hostile conditions in the data path: what a QP does with a
//! request it cannot honour, a region that goes away mid-message, a peer
//! that is not its peer, and how it enters and leaves the error states.
//! Every test names its rule and the source of the rule in its doc
//! comment.

mod common;
use common::pair::*;
use common::*;
use softverbs_engine::*;
use softverbs_wire::{OpKind, PacketView};

/// Takes every packet `from` has to send now.
fn drain(from: &mut Node, now: Nanos) -> Vec<(Transmit, Vec<u8>)> {
    let mut buf = vec![0u8; MAX_PACKET_LEN];
    std::iter::from_fn(|| {
        from.e
            .poll_transmit(now, &from.mem, &mut buf)
            .map(|t| (t, buf[..t.len].to_vec()))
    })
    .collect()
}

fn deliver(to: &mut Node, now: Nanos, (t, bytes): &(Transmit, Vec<u8>)) {
    to.e.handle_packet(now, t.src_gid, t.dst_gid, bytes, &mut to.mem);
}

fn kind(bytes: &[u8]) -> OpKind {
    PacketView::parse(bytes).unwrap().opcode().kind()
}

fn fill(n: &mut Node, offset: u64, len: usize, seed: u8) -> Vec<u8> {
    let data: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    n.mem.write(MEM_BASE + offset, &data).unwrap();
    data
}

fn state(n: &Node, qp: QpId) -> QpState {
    QpState::from_raw(n.e.query_qp(qp).unwrap().0.qp_state).unwrap()
}

fn to_state(n: &mut Node, qp: QpId, s: QpState) {
    n.e.modify_qp(qp, &attr(s), QpAttrMask::STATE).unwrap();
}

/// Registers `[MEM_BASE + offset, +len)` on `n` with `access` and drops
/// the node's whole-memory MR, so that the new MR is the only registered
/// memory of the node. Returns the new key.
fn only_window(n: &mut Node, offset: u64, len: u64, access: AccessFlags) -> u32 {
    let base = MEM_BASE + offset;
    let key =
        n.e.reg_mr(n.pd, base, len, base, access.bits())
            .unwrap()
            .key;
    let (full, _) = n.e.mr_by_key(n.key).unwrap();
    n.e.dereg_mr(full).unwrap();
    key
}

fn dereg(n: &mut Node, key: u32) {
    let (mr, _) = n.e.mr_by_key(key).unwrap();
    n.e.dereg_mr(mr).unwrap();
}

/// Rule: a QP entering the error state completes every receive WR it
/// holds with IBV_WC_WR_FLUSH_ERR, including the one a multi-packet SEND
/// was being received into (ibv_modify_qp(3), IBTA vol. 1 10.3.1 "Error";
/// rxe `check_resource` flushes `qp->resp.wqe` first).
#[test]
fn a_receive_wr_filled_part_way_is_flushed_when_the_qp_enters_error() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    p.b.post_recv(qb, 7, 0x4000, 4096);
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 3000)]))
        .unwrap();
    let sends = drain(&mut p.a, 0);
    assert_eq!(sends.len(), 3);
    deliver(&mut p.b, 0, &sends[0]); // SEND_FIRST only
    to_state(&mut p.b, qb, QpState::Err);
    let rx: Vec<_> = p.b.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(rx, [(7, WcStatus::WrFlushErr)], "the receive WR vanished");
}

/// Rule: the same with an SRQ: a WQE the QP already took from the SRQ for
/// a message in progress is completed (flushed) when the QP enters ERR; it
/// is neither lost nor left in the SRQ (IBTA vol. 1 10.3.1, 11.6.3 Last
/// WQE Reached; rxe `check_resource`).
#[test]
fn an_srq_wqe_in_progress_is_flushed_when_the_qp_enters_error() {
    let mut p = Pair::new();
    let attr_srq = SrqAttr {
        max_wr: 4,
        max_sge: 1,
        srq_limit: 0,
    };
    let (srq, _) = p.b.e.create_srq(p.b.pd, &attr_srq).unwrap();
    let qa = create(&mut p.a, QpType::Rc, None);
    let qb = create(&mut p.b, QpType::Rc, Some(srq));
    p.bring_up(QpType::Rc, qa, qb, Link::default());
    let sge = [p.b.sge(0x4000, 4096)];
    p.b.e
        .post_srq_recv(
            srq,
            &RecvWr {
                wr_id: 7,
                sg_list: &sge,
            },
        )
        .unwrap();
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 3000)]))
        .unwrap();
    let sends = drain(&mut p.a, 0);
    deliver(&mut p.b, 0, &sends[0]);
    to_state(&mut p.b, qb, QpState::Err);
    let rx: Vec<_> = p.b.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(rx, [(7, WcStatus::WrFlushErr)], "the SRQ WQE vanished");
}

/// Rule: a completion lost to a CQ overrun puts *the QP that lost it*
/// into ERR with IBV_EVENT_QP_FATAL (docs/conformance.md "Async events";
/// IBTA vol. 1 11.6.3: affiliated events name the affected QP). A
/// completion lost while flushing WRs posted to a QP already in ERR must
/// not fail another, healthy QP of the device later.
#[test]
fn a_completion_lost_on_one_qp_does_not_fail_another_qp() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let (small, _) = p.a.e.create_cq(1, 0).unwrap();
    let init = QpInitAttr {
        send_cq: small,
        recv_cq: small,
        srq: None,
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type: QpType::Rc as u32,
        sq_sig_all: false,
    };
    let qx = p.a.e.create_qp(p.a.pd, &init).unwrap().id;
    let (init_attr, init_mask) = init_step(QpType::Rc);
    p.a.e.modify_qp(qx, &init_attr, init_mask).unwrap();
    to_state(&mut p.a, qx, QpState::Err);
    // Receive WRs posted in ERR are flushed at once; the second overruns.
    p.a.post_recv(qx, 1, 0, 8);
    p.a.post_recv(qx, 2, 0, 8);
    assert_eq!(p.a.events(), [AsyncEvent::CqErr(small)]);
    // Ordinary traffic on the healthy QP.
    p.b.post_recv(qb, 1, 0x4000, 100);
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 10)]))
        .unwrap();
    p.run(100);
    assert_eq!(p.a.events(), [], "no event for the healthy QP");
    assert_eq!(state(&p.a, qa), QpState::Rts);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}

/// Rule: every byte the engine writes lies in a live registered region
/// checked for the access (architecture.md, "The engine calls it only for
/// ranges it checked against an MR"; rxe `check_rkey` looks the rkey up
/// again for every WRITE packet, so a MIDDLE/LAST packet after
/// `ibv_dereg_mr` is a remote access error). Here the MR is deregistered
/// between the FIRST and the later packets of a WRITE, and it was the only
/// registered memory of the node.
#[test]
fn write_packets_after_the_mr_is_deregistered_touch_no_memory() {
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let win = 0x2_0000;
    let rkey = only_window(&mut p.b, win, 0x4000, rw);
    fill(&mut p.a, 0, 3000, 1);
    let sge = [p.a.sge(0, 3000)];
    let mut w = wr(1, send_opcode::RDMA_WRITE, &sge);
    w.rdma = RdmaTarget {
        remote_addr: MEM_BASE + win,
        rkey,
    };
    p.a.e.post_send(qa, &w).unwrap();
    let pkts = drain(&mut p.a, 0);
    assert_eq!(pkts.len(), 3);
    deliver(&mut p.b, 0, &pkts[0]);
    dereg(&mut p.b, rkey);
    deliver(&mut p.b, 1, &pkts[1]);
    deliver(&mut p.b, 1, &pkts[2]);
    let after = p.b.mem.slice(MEM_BASE + win + 1024, 3000 - 1024);
    assert!(
        after.iter().all(|&b| b == 0),
        "MIDDLE/LAST were written into memory that is no longer registered"
    );
}

/// Rule: a READ whose MR is deregistered after the request was accepted
/// fails with IBV_WC_REM_ACCESS_ERR (the responder NAKs remote access
/// error: rxe `read_reply` -> `rxe_recheck_mr` -> RESPST_ERR_RKEY_VIOLATION,
/// class C; IBTA vol. 1 9.7.5.2.4 / ibv_poll_cq(3) REM_ACCESS_ERR). The
/// responder looks the rkey up again as it builds the responses, finds it
/// gone and NAKs; the test asserts that the READ completes with
/// REM_ACCESS_ERR rather than a retry timeout.
#[test]
fn read_from_a_region_deregistered_mid_request_fails_with_remote_access_error() {
    let mut p = Pair::new();
    let link = Link {
        retry_cnt: 2,
        ..Link::default()
    };
    let (qa, _) = p.connect(QpType::Rc, link);
    let r = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    let win = MEM_BASE + 0x2_0000;
    let rkey =
        p.b.e
            .reg_mr(p.b.pd, win, 0x4000, win, r.bits())
            .unwrap()
            .key;
    let sge = [p.a.sge(0x6000, 3000)];
    let mut rd = wr(1, send_opcode::RDMA_READ, &sge);
    rd.rdma = RdmaTarget {
        remote_addr: win,
        rkey,
    };
    p.a.e.post_send(qa, &rd).unwrap();
    let req = drain(&mut p.a, 0);
    deliver(&mut p.b, 0, &req[0]);
    dereg(&mut p.b, rkey);
    p.run(1000);
    let tx: Vec<_> = p.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(tx, [(1, WcStatus::RemAccessErr)]);
}

/// Rule: UC has no NAKs; a WRITE with an invalid rkey on a UC QP without
/// an SRQ is silently dropped (class E) and the QP stays usable (IBTA
/// vol. 1 9.9.3 responder error classes for UC; rxe
/// RESPST_ERR_RKEY_VIOLATION "UC/non-SRQ Class E" -> drop_msg). The test
/// asserts no async event, the QP still in RTS and the SEND that follows
/// received.
#[test]
fn uc_write_with_a_bad_rkey_is_dropped_and_the_qp_keeps_working() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Uc, Link::default());
    p.b.post_recv(qb, 5, 0x4000, 100);
    let sge = [p.a.sge(0, 16)];
    let mut w = wr(1, send_opcode::RDMA_WRITE, &sge);
    w.rdma = RdmaTarget {
        remote_addr: MEM_BASE,
        rkey: p.b.key ^ 0x55,
    };
    p.a.e.post_send(qa, &w).unwrap();
    p.a.e
        .post_send(qa, &wr(2, send_opcode::SEND, &sge))
        .unwrap();
    p.run(100);
    assert_eq!(p.b.events(), [], "no async error for a UC access violation");
    assert_eq!(state(&p.b, qb), QpState::Rts);
    let rx: Vec<_> = p.b.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(rx, [(5, WcStatus::Success)], "the following SEND arrives");
}

/// Rule: a UD datagram that does not fit the receive buffer is a class D
/// error for a QP without an SRQ: the datagram is dropped and the QP keeps
/// receiving (rxe RESPST_ERR_LENGTH "UC/UD - class D" -> drop_msg; IBTA
/// vol. 1 9.9.3). The test asserts the QP still in RTS and the following
/// 10-byte datagram received into the next WR.
#[test]
fn an_oversized_ud_datagram_does_not_kill_the_receiving_qp() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Ud, Link::default());
    p.b.post_recv(qb, 1, 0x3000, 100); // GRH + 60 bytes
    p.b.post_recv(qb, 2, 0x5000, 2000);
    let target = p.ud_target(qb);
    let big = [p.a.sge(0, 500)];
    let small = [p.a.sge(0, 10)];
    for (id, sge) in [(1, &big[..]), (2, &small[..])] {
        let mut s = wr(id, send_opcode::SEND, sge);
        s.ud = Some(target);
        p.a.e.post_send(qa, &s).unwrap();
    }
    p.run(100);
    assert_eq!(state(&p.b, qb), QpState::Rts);
    let rx = p.b.poll();
    assert!(
        rx.iter()
            .any(|w| w.status == WcStatus::Success && w.byte_len == 50),
        "the 10-byte datagram is still received: {rx:?}"
    );
}

/// Rule: with max_dest_rd_atomic 0 the responder has no resources for
/// READ or atomic requests; both are NAKed invalid request (rxe
/// `check_resource`: RXE_READ_OR_ATOMIC_MASK with max_dest_rd_atomic 0 ->
/// RESPST_ERR_TOO_MANY_RDMA_ATM_REQ, class C; IBTA vol. 1 9.4.4 responder
/// resources). The test asserts the atomic NAKed (REM_INV_REQ_ERR at the
/// requester) and the target word unchanged.
#[test]
fn an_atomic_without_responder_resources_is_an_invalid_request() {
    let mut p = Pair::new();
    let link = Link {
        rd_atomic: 0,
        ..Link::default()
    };
    let (qa, _) = p.connect(QpType::Rc, link);
    p.b.mem
        .write(MEM_BASE + 0x100, &40u64.to_ne_bytes())
        .unwrap();
    let sge = [p.a.sge(0x800, 8)];
    let mut add = wr(1, send_opcode::ATOMIC_FETCH_AND_ADD, &sge);
    add.atomic = AtomicTarget {
        remote_addr: MEM_BASE + 0x100,
        compare_add: 2,
        swap: 0,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &add).unwrap();
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::RemInvReqErr);
    assert_eq!(
        p.b.mem.slice(MEM_BASE + 0x100, 8),
        &40u64.to_ne_bytes(),
        "not executed"
    );
}

/// Rule: a QP the application moves to ERR stops processing: it sends no
/// further READ response data (rxe: once `resp.state` is ERROR, `get_req`
/// drops every request and `read_reply` is never reached again; IBTA vol.
/// 1 10.3.1, Error state). The test asserts that once the responder's QP
/// is moved to ERR between the request and the responses, none of the
/// READ response packets leave.
#[test]
fn a_qp_moved_to_error_sends_no_more_read_responses() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    fill(&mut p.b, 0x2000, 3000, 3);
    let sge = [p.a.sge(0x6000, 3000)];
    let mut r = wr(1, send_opcode::RDMA_READ, &sge);
    r.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x2000,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &r).unwrap();
    let req = drain(&mut p.a, 0);
    deliver(&mut p.b, 0, &req[0]);
    to_state(&mut p.b, qb, QpState::Err);
    let out: Vec<_> = drain(&mut p.b, 1)
        .iter()
        .map(|(_, bytes)| kind(bytes))
        .collect();
    assert!(
        !out.contains(&OpKind::ReadResponse),
        "READ responses sent by a QP in ERR: {out:?}"
    );
}

/// Rule: a send WR completing in error on a UD (or UC) QP moves the QP to
/// the Send Queue Error state, not to ERR: the receive queue keeps working
/// and SQE -> RTS recovers (IBTA vol. 1 10.3.1 "SQEr", 11.2.4.2; the
/// SQE -> RTS rows of docs/conformance.md; verbs_qp.rs: "only a UC/UD send
/// error puts a QP there"; IPoIB relies on hardware doing so). The test
/// asserts LOC_PROT_ERR for the WR and the QP in SQE.
#[test]
fn a_ud_send_error_moves_the_qp_to_sqe_not_err() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Ud, Link::default());
    let lkey = p.a.e.reg_mr(p.a.pd, MEM_BASE, 64, MEM_BASE, 0).unwrap().key;
    let sge = [Sge {
        addr: MEM_BASE,
        length: 16,
        lkey,
    }];
    let mut s = wr(1, send_opcode::SEND, &sge);
    s.ud = Some(p.ud_target(qb));
    p.a.e.post_send(qa, &s).unwrap();
    dereg(&mut p.a, lkey);
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::LocProtErr);
    assert_eq!(state(&p.a, qa), QpState::Sqe);
}

/// Rule: IBV_EVENT_SQ_DRAINED reports that a QP in SQD has drained its
/// send queue; a QP whose in-flight WR fails while draining goes to ERR
/// and is not "drained" (IBTA vol. 1 11.6.3 Send Queue Drained; rxe raises
/// it only from `complete_ack`, on a successful completion). The test
/// asserts RETRY_EXC_ERR, the QP in ERR and no SQ_DRAINED event.
#[test]
fn sq_drained_is_not_raised_when_draining_ends_in_an_error() {
    let mut p = Pair::new();
    let link = Link {
        retry_cnt: 0,
        ..Link::default()
    };
    let (qa, _) = p.connect(QpType::Rc, link);
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 10)]))
        .unwrap();
    let lost = drain(&mut p.a, 0);
    assert_eq!(lost.len(), 1);
    let a = QpAttr {
        en_sqd_async_notify: 1,
        ..attr(QpState::Sqd)
    };
    p.a.e
        .modify_qp(qa, &a, QpAttrMask::STATE | QpAttrMask::EN_SQD_ASYNC_NOTIFY)
        .unwrap();
    p.filter = Box::new(|_, _| Fate::Drop);
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::RetryExcErr);
    assert_eq!(state(&p.a, qa), QpState::Err);
    assert!(
        !p.a.events().contains(&AsyncEvent::SqDrained(qa)),
        "SQ_DRAINED raised for a QP that failed into ERR"
    );
}

/// Rule: an MR's iova is at the same offset within its page as its
/// address (the kernel's `ib_uverbs_reg_mr` refuses others with EINVAL
/// before a provider sees them), so an 8-aligned iova is an 8-aligned host
/// word: an atomic never reaches a misaligned one (`HostMemory`'s atomics
/// need it aligned; rxe checks the translated address too). The test
/// asserts the refusal, for `ibv_reg_mr_iova` and at any offset.
#[test]
fn an_iova_at_another_offset_within_the_page_is_refused() {
    let mut p = Pair::new();
    let access = (AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC).bits();
    let host = MEM_BASE + 0x104;
    for iova in [0x10_0000, 0x10_0100, 0x10_0105, 0x10_1004] {
        let refused = p.b.e.reg_mr(p.b.pd, host, 64, iova, access);
        assert_eq!(errno(refused), 22, "{iova:#x}");
    }
    for iova in [0x10_0104, 0x7f_f104, host] {
        let taken = p.b.e.reg_mr(p.b.pd, host, 64, iova, access);
        assert_eq!(errno(taken), 0, "{iova:#x}");
    }
}

/// Rule: a connected (RC/UC) QP accepts packets only from the remote end
/// of its connection: for RoCE the packet's source IP must be the QP's
/// destination GID and its destination IP the QP's source GID (IBTA vol.
/// 1 9.6.1 packet header validation; rxe `check_addr` drops the packet
/// when `saddr`/`daddr` do not match the QP's path), so a host that
/// learns a QP number and PSN cannot inject messages into the connection.
/// The test asserts that a SEND from another address completes nothing.
#[test]
fn an_rc_request_from_a_stranger_address_is_dropped() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    p.b.post_recv(qb, 1, 0x4000, 100);
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 10)]))
        .unwrap();
    let pkts = drain(&mut p.a, 0);
    let (t, bytes) = &pkts[0];
    let stranger = Gid::from_ipv4(std::net::Ipv4Addr::new(10, 0, 0, 99));
    p.b.e
        .handle_packet(0, stranger, t.dst_gid, bytes, &mut p.b.mem);
    assert!(
        p.b.poll().is_empty(),
        "a SEND from 10.0.0.99 was delivered on a QP connected to 10.0.0.1"
    );
}

/// Rule: IBV_EVENT_COMM_EST is for connected QPs; it is not generated for
/// UD QPs (IBTA vol. 1 o11-5.1.1, as quoted by drivers that suppress it
/// for UD; docs/conformance.md lists it for "first packet received while
/// in RTR" of the connected transports' bring-up).
#[test]
fn a_ud_qp_in_rtr_raises_no_comm_est() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Ud, Link::default());
    to_state(&mut p.b, qb, QpState::Reset);
    for (a, m) in [init_step(QpType::Ud), rtr_step(QpType::Ud)] {
        p.b.e.modify_qp(qb, &a, m).unwrap();
    }
    p.b.post_recv(qb, 1, 0x3000, 200);
    let sge = [p.a.sge(0, 10)];
    let mut s = wr(1, send_opcode::SEND, &sge);
    s.ud = Some(p.ud_target(qb));
    p.a.e.post_send(qa, &s).unwrap();
    p.run(100);
    assert_eq!(p.b.poll().len(), 1, "a UD QP in RTR receives");
    assert_eq!(p.b.events(), [], "no COMM_EST for UD");
}

/// Rule: in SQE the receive queue goes on working, sends posted are
/// flushed, and SQE -> RTS resumes sending (IBTA vol. 1 10.3.1 "SQEr",
/// 11.2.4.2).
#[test]
fn a_ud_qp_in_sqe_receives_and_sends_again_after_sqe_to_rts() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Ud, Link::default());
    let lkey = p.a.e.reg_mr(p.a.pd, MEM_BASE, 64, MEM_BASE, 0).unwrap().key;
    let bad = [Sge {
        addr: MEM_BASE,
        length: 16,
        lkey,
    }];
    let to_b = p.ud_target(qb);
    let mut s = wr(1, send_opcode::SEND, &bad);
    s.ud = Some(to_b);
    p.a.e.post_send(qa, &s).unwrap();
    dereg(&mut p.a, lkey);
    p.run(100);
    assert_eq!(state(&p.a, qa), QpState::Sqe);
    // B -> A still arrives.
    p.a.post_recv(qa, 9, 0x3000, 200);
    let to_a = {
        let av = AhAttr {
            grh: GlobalRoute {
                dgid: p.a.gid,
                ..av().grh
            },
            ..av()
        };
        UdTarget {
            ah: p.b.e.create_ah(p.b.pd, &av).unwrap(),
            remote_qpn: p.a.e.qp_num(qa).unwrap(),
            remote_qkey: 0x8000_0000,
        }
    };
    let mut back = wr(1, send_opcode::SEND, &[]);
    back.ud = Some(to_a);
    p.b.e.post_send(qb, &back).unwrap();
    p.run(100);
    let sge = [p.a.sge(0, 10)];
    let mut s = wr(2, send_opcode::SEND, &sge);
    s.ud = Some(to_b);
    p.a.e.post_send(qa, &s).unwrap();
    let a: Vec<_> = p.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        a,
        [
            (1, WcStatus::LocProtErr),
            (9, WcStatus::Success),
            (2, WcStatus::WrFlushErr)
        ]
    );
    let rts = QpAttr {
        cur_qp_state: QpState::Sqe as u32,
        ..attr(QpState::Rts)
    };
    p.a.e
        .modify_qp(qa, &rts, QpAttrMask::STATE | QpAttrMask::CUR_STATE)
        .unwrap();
    p.b.post_recv(qb, 7, 0x3000, 200);
    p.a.e.post_send(qa, &s).unwrap();
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    assert!(p.b.poll().iter().any(|w| w.wr_id == 7 && w.byte_len == 50));
}

/// Rule: a UC SEND too long for its receive WR is dropped (class D) and
/// the WR takes the next message; the QP keeps working (rxe
/// RESPST_ERR_LENGTH "UC/UD - class D"; IBTA vol. 1 9.9.3).
#[test]
fn a_uc_send_too_long_for_its_receive_wr_is_dropped_and_the_wr_kept() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Uc, Link::default());
    p.b.post_recv(qb, 5, 0x4000, 100);
    for (id, len) in [(1, 2000), (2, 10)] {
        p.a.e
            .post_send(qa, &wr(id, send_opcode::SEND, &[p.a.sge(0, len)]))
            .unwrap();
    }
    p.run(100);
    assert_eq!(state(&p.b, qb), QpState::Rts);
    assert_eq!(p.b.events(), []);
    let rx: Vec<_> = p.b.poll().iter().map(|w| (w.wr_id, w.byte_len)).collect();
    assert_eq!(rx, [(5, 10)]);
}

/// Rule: a READ re-requested after its responses were lost is executed
/// again with its rkey checked again; an MR deregistered since makes it a
/// remote access error (rxe `read_reply` rechecks the MR of a replay;
/// IBTA vol. 1 9.7.5.2.4).
#[test]
fn a_re_requested_read_whose_region_is_gone_fails_with_remote_access_error() {
    let mut p = Pair::new();
    let link = Link {
        retry_cnt: 2,
        ..Link::default()
    };
    let (qa, qb) = p.connect(QpType::Rc, link);
    let r = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    let win = MEM_BASE + 0x2_0000;
    let rkey =
        p.b.e
            .reg_mr(p.b.pd, win, 0x4000, win, r.bits())
            .unwrap()
            .key;
    let sge = [p.a.sge(0x6000, 3000)];
    let mut rd = wr(1, send_opcode::RDMA_READ, &sge);
    rd.rdma = RdmaTarget {
        remote_addr: win,
        rkey,
    };
    p.a.e.post_send(qa, &rd).unwrap();
    let req = drain(&mut p.a, 0);
    deliver(&mut p.b, 0, &req[0]);
    let lost = drain(&mut p.b, 0);
    assert_eq!(lost.len(), 3, "every response is lost");
    dereg(&mut p.b, rkey);
    p.run(1000);
    let tx: Vec<_> = p.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(tx, [(1, WcStatus::RemAccessErr)]);
    assert_eq!(p.b.events(), [AsyncEvent::QpAccessErr(qb)]);
}

/// Rule: a QP the application moves to ERR still sends the ACKs it owes
/// for requests it already executed (the responder of rxe has sent them by
/// then); only READ responses, which read memory, stop (IBTA vol. 1
/// 10.3.1).
#[test]
fn a_qp_moved_to_error_still_acknowledges_what_it_executed() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    p.b.post_recv(qb, 1, 0x4000, 100);
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 10)]))
        .unwrap();
    let req = drain(&mut p.a, 0);
    deliver(&mut p.b, 0, &req[0]);
    to_state(&mut p.b, qb, QpState::Err);
    for ack in drain(&mut p.b, 1) {
        deliver(&mut p.a, 1, &ack);
    }
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    assert_eq!(p.b.poll()[0].status, WcStatus::Success);
}

/// Rule: the address check of a connected QP covers responses too, and
/// the destination: an ACK from a stranger completes nothing, and a
/// request addressed to another GID of ours is dropped (IBTA vol. 1 9.6.1;
/// rxe `check_addr` checks source and destination of every RC/UC packet).
#[test]
fn packets_of_a_connection_from_or_to_other_addresses_are_dropped() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    p.b.post_recv(qb, 1, 0x4000, 100);
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 10)]))
        .unwrap();
    let stranger = Gid::from_ipv4(std::net::Ipv4Addr::new(10, 0, 0, 99));
    let (t, req) = &drain(&mut p.a, 0)[0];
    p.b.e
        .handle_packet(0, t.src_gid, stranger, req, &mut p.b.mem);
    assert!(p.b.poll().is_empty(), "addressed to another GID");
    assert_eq!(p.b.e.stats().rx_wrong_address, 1);
    p.b.e
        .handle_packet(0, t.src_gid, t.dst_gid, req, &mut p.b.mem);
    assert_eq!(p.b.poll().len(), 1);
    // Once the peer's packets are known, a stranger's still are not.
    p.b.e
        .handle_packet(0, stranger, t.dst_gid, req, &mut p.b.mem);
    assert_eq!(p.b.e.stats().rx_wrong_address, 2, "from 10.0.0.99");
    let (t, ack) = &drain(&mut p.b, 0)[0];
    p.a.e
        .handle_packet(0, stranger, t.dst_gid, ack, &mut p.a.mem);
    assert!(p.a.poll().is_empty(), "an ACK from 10.0.0.99");
    p.a.e
        .handle_packet(0, t.src_gid, t.dst_gid, ack, &mut p.a.mem);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}

/// Rule: a completion lost to a receive CQ overrun puts its QP in ERR
/// before the message is acknowledged, so its requester hears nothing
/// more: the WR whose completion was lost ends in RETRY_EXC_ERR, not in
/// success, and nothing after it executes (rxe `do_complete` returns
/// RESPST_ERR_CQ_OVERFLOW ahead of RESPST_ACKNOWLEDGE; IBTA 11.4.2.1: an
/// overrun CQ's QPs enter the error state); those before it succeed. The
/// test sends a burst of two SENDs more than the receiver's CQ holds.
#[test]
fn a_message_whose_completion_overran_its_cq_is_not_acknowledged() {
    let mut p = Pair::new();
    let link = Link {
        retry_cnt: 0,
        ..Link::default()
    };
    let (qa, qb) = p.connect(QpType::Rc, link);
    let room = p.b.e.resize_cq(p.b.cq, 6).unwrap();
    let sends = u64::from(room) + 2;
    for i in 0..sends {
        p.b.post_recv(qb, 100 + i, 64 * i, 64);
    }
    for i in 0..sends {
        let sge = [p.a.sge(8 * i, 8)];
        p.a.e
            .post_send(qa, &wr(i, send_opcode::SEND, &sge))
            .unwrap();
    }
    p.run(1000);
    let done: Vec<(u64, WcStatus)> = p.a.poll().iter().map(|c| (c.wr_id, c.status)).collect();
    let mut want: Vec<(u64, WcStatus)> = (0..u64::from(room))
        .map(|i| (i, WcStatus::Success))
        .collect();
    want.push((u64::from(room), WcStatus::RetryExcErr));
    want.push((u64::from(room) + 1, WcStatus::WrFlushErr));
    assert_eq!(done, want, "the overrun message and the one after it");
    assert_eq!(state(&p.b, qb), QpState::Err);
    assert_eq!(
        p.b.events(),
        [AsyncEvent::CqErr(p.b.cq), AsyncEvent::QpFatal(qb)]
    );
}

/// Rule: an error completion's `byte_len` is 0, as rxe's `make_send_cqe`
/// fills it on success only: a READ and an atomic sent, then flushed
/// behind a WRITE the peer refused, report 0 (they reported their length
/// and 8, or 0 when flushed before they went out).
#[test]
fn a_flushed_read_or_atomic_reports_no_bytes() {
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    let sge = [p.a.sge(0, 64)];
    let mut refused = wr(1, send_opcode::RDMA_WRITE, &sge);
    refused.rdma = RdmaTarget {
        remote_addr: MEM_BASE,
        rkey: p.b.key ^ 1,
    };
    let mut read = wr(2, send_opcode::RDMA_READ, &sge);
    read.rdma = RdmaTarget {
        remote_addr: MEM_BASE,
        rkey: p.b.key,
    };
    let result = [p.a.sge(0x100, 8)];
    let mut add = wr(3, send_opcode::ATOMIC_FETCH_AND_ADD, &result);
    add.atomic = AtomicTarget {
        remote_addr: MEM_BASE,
        compare_add: 1,
        swap: 0,
        rkey: p.b.key,
    };
    for w in [&refused, &read, &add] {
        p.a.e.post_send(qa, w).unwrap();
    }
    let sent = drain(&mut p.a, 0);
    assert_eq!(sent.len(), 3, "all three went out before the NAK");
    for packet in &sent {
        deliver(&mut p.b, 0, packet);
    }
    p.run(100);
    let got: Vec<_> =
        p.a.poll()
            .iter()
            .map(|w| (w.wr_id, w.status, w.byte_len))
            .collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::RemAccessErr, 0),
            (2, WcStatus::WrFlushErr, 0),
            (3, WcStatus::WrFlushErr, 0)
        ]
    );
}

/// Rule: a WR held because a go-back could not build its packets again
/// (its source MR deregistered after it went out once) succeeds when an
/// ACK covers it, since the peer executed it, and the WRs posted after it
/// go on. (The requester stopped starting WRs for good: a WR posted after
/// never completed, in RTS, with no timer armed; found by a helper.)
#[test]
fn a_held_wr_that_an_ack_covers_succeeds_and_later_wrs_go() {
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    let local = (AccessFlags::LOCAL_WRITE).bits();
    let src_b =
        p.a.e
            .reg_mr(p.a.pd, MEM_BASE + 0x3000, 64, MEM_BASE + 0x3000, local);
    let key_b = src_b.unwrap().key;
    let (sa, sc) = ([p.a.sge(0, 64)], [p.a.sge(0x100, 64)]);
    let sb = [Sge {
        addr: MEM_BASE + 0x3000,
        length: 64,
        lkey: key_b,
    }];
    let rkey = p.b.key;
    for w in [
        write_to(1, &sa, 0x8000, rkey),
        write_to(2, &sb, 0x8100, rkey),
        write_to(3, &sc, 0x8200, rkey),
    ] {
        p.a.e.post_send(qa, &w).unwrap();
    }
    for packet in drain(&mut p.a, 0) {
        deliver(&mut p.b, 0, &packet);
    }
    let lost_acks = drain(&mut p.b, 0);
    assert!(!lost_acks.is_empty());
    dereg(&mut p.a, key_b);
    let timeout = p.a.e.poll_timeout().expect("the local ACK timer");
    p.a.e.handle_timeout(timeout);
    p.now = timeout;
    p.run(100);
    p.a.e
        .post_send(qa, &write_to(4, &sa, 0x8300, rkey))
        .unwrap();
    p.run(100);
    let got: Vec<_> = p.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    let ok = WcStatus::Success;
    assert_eq!(got, [(1, ok), (2, ok), (3, ok), (4, ok)]);
}

/// A WRITE of `sge` to `at` in B's memory under `rkey`.
fn write_to(wr_id: u64, sge: &[Sge], at: u64, rkey: u32) -> SendWr<'_> {
    let mut w = wr(wr_id, send_opcode::RDMA_WRITE, sge);
    w.rdma = RdmaTarget {
        remote_addr: MEM_BASE + at,
        rkey,
    };
    w
}
