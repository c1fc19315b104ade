//! Registered memory that is not there any more: the application unmapped
//! (or write-protected) a buffer while its MR was still registered. A NIC
//! has the pages pinned and never notices; a software provider meets a
//! translation fault, which must become the completion a NIC gives for
//! one, never a crash. `FlatMemory::unmap` stands in for the unmapped
//! buffer; the provider's `ProcessMemory` reports the same faults from the
//! kernel (provider-shim/src/process_memory.rs).

mod common;
use common::pair::*;
use softverbs_engine::*;

/// A buffer of `p.b`'s whole-memory MR, unmapped behind the MR's back.
const HOLE: u64 = MEM_BASE + 0x4_0000;

fn statuses(n: &mut Node) -> Vec<(u64, WcStatus)> {
    n.poll().iter().map(|w| (w.wr_id, w.status)).collect()
}

fn qp_state(n: &Node, qp: QpId) -> QpState {
    QpState::from_raw(n.e.query_qp(qp).unwrap().0.qp_state).unwrap()
}

/// Posts one RDMA or atomic WR from `a` at `remote` in `b`'s MR.
fn post_remote(p: &mut Pair, qa: QpId, opcode: u32, remote: u64, len: u32) {
    let sge = [p.a.sge(0x100, len)];
    let mut w = wr(1, opcode, &sge);
    w.rdma = RdmaTarget {
        remote_addr: remote,
        rkey: p.b.key,
    };
    w.atomic = AtomicTarget {
        remote_addr: remote,
        compare_add: 0,
        swap: 1,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &w).unwrap();
    p.run(10_000);
}

/// Rule: a remote access that meets a translation fault in the responder's
/// memory is a remote access error (IBTA class C, NAK remote access error
/// as for a bad rkey): the requester's WR completes with
/// IBV_WC_REM_ACCESS_ERR and its QP goes to ERR; the responder's QP goes
/// to ERR with IBV_EVENT_QP_ACCESS_ERR.
fn remote_fault_is_a_remote_access_error(opcode: u32, len: u32) {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    p.b.mem.unmap(HOLE..HOLE + 0x1000);
    post_remote(&mut p, qa, opcode, HOLE, len);
    assert_eq!(statuses(&mut p.a), [(1, WcStatus::RemAccessErr)]);
    assert_eq!(qp_state(&p.a, qa), QpState::Err);
    assert_eq!(qp_state(&p.b, qb), QpState::Err);
    assert!(p.b.events().contains(&AsyncEvent::QpAccessErr(qb)));
}

#[test]
fn rdma_write_into_unmapped_registered_memory() {
    remote_fault_is_a_remote_access_error(send_opcode::RDMA_WRITE, 3000);
}

#[test]
fn rdma_read_from_unmapped_registered_memory() {
    remote_fault_is_a_remote_access_error(send_opcode::RDMA_READ, 3000);
}

#[test]
fn atomics_on_unmapped_registered_memory() {
    remote_fault_is_a_remote_access_error(send_opcode::ATOMIC_CMP_AND_SWP, 8);
    remote_fault_is_a_remote_access_error(send_opcode::ATOMIC_FETCH_AND_ADD, 8);
}

/// Rule: a fault in the middle of a multi-packet WRITE stops it there:
/// the bytes before the hole landed (as a NIC's DMA up to the fault), none
/// after it, and the WR fails as above.
#[test]
fn a_write_that_runs_into_a_hole_stops_there() {
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    let at = HOLE - 2048;
    p.b.mem.unmap(HOLE..HOLE + 0x1000);
    p.a.mem.write(MEM_BASE + 0x100, &[0xab; 8192]).unwrap();
    post_remote(&mut p, qa, send_opcode::RDMA_WRITE, at, 8192);
    assert_eq!(statuses(&mut p.a), [(1, WcStatus::RemAccessErr)]);
    assert!(p.b.mem.slice(at, 2048).iter().all(|&b| b == 0xab));
    let after = HOLE + 0x1000;
    assert!(p
        .b
        .mem
        .slice(after, 8192 - 2048 - 0x1000)
        .iter()
        .all(|&b| b == 0));
}

/// Rule: a fault in the requester's own memory is a local protection
/// error (IBV_WC_LOC_PROT_ERR), as for a bad lkey: gathering a SEND's
/// payload, and scattering a READ response into the local buffer.
#[test]
fn local_faults_are_local_protection_errors() {
    for opcode in [send_opcode::SEND, send_opcode::RDMA_READ] {
        let mut p = Pair::new();
        let (qa, qb) = p.connect(QpType::Rc, Link::default());
        let rsge = [p.b.sge(0x8000, 4096)];
        let recv = RecvWr {
            wr_id: 9,
            sg_list: &rsge,
        };
        p.b.e.post_recv(qb, &recv).unwrap();
        p.a.mem.unmap(MEM_BASE..MEM_BASE + 0x1000);
        let sge = [p.a.sge(0x100, 1000)];
        let mut w = wr(1, opcode, &sge);
        w.rdma = RdmaTarget {
            remote_addr: MEM_BASE + 0x8000,
            rkey: p.b.key,
        };
        p.a.e.post_send(qa, &w).unwrap();
        p.run(10_000);
        assert_eq!(
            statuses(&mut p.a),
            [(1, WcStatus::LocProtErr)],
            "opcode {opcode}"
        );
        assert_eq!(qp_state(&p.a, qa), QpState::Err);
    }
}

/// Rule: a SEND whose receive buffer is unmapped completes the receive
/// with IBV_WC_LOC_PROT_ERR on the responder (its own memory), and the
/// requester sees the responder's NAK as a remote operational error.
#[test]
fn a_send_into_an_unmapped_receive_buffer() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let rsge = [Sge {
        addr: HOLE,
        length: 4096,
        lkey: p.b.key,
    }];
    let recv = RecvWr {
        wr_id: 9,
        sg_list: &rsge,
    };
    p.b.e.post_recv(qb, &recv).unwrap();
    p.b.mem.unmap(HOLE..HOLE + 0x1000);
    post_remote(&mut p, qa, send_opcode::SEND, 0, 100);
    assert_eq!(statuses(&mut p.b), [(9, WcStatus::LocProtErr)]);
    assert_eq!(statuses(&mut p.a), [(1, WcStatus::RemOpErr)]);
}
