//! What a requester does with responses a correct responder never sends:
//! a response of the wrong kind for the request its PSN names, a READ
//! response whose AETH is a NAK, a NAK with a reserved code. Each fails
//! the request at once, as rxe's completer does (`check_ack`), instead of
//! being dropped and ending in RETRY_EXC_ERR after the retries; a correct
//! response beside each case completes normally.

mod common;
use common::pair::*;
use softverbs_engine::*;
use softverbs_wire::{
    Aeth, AtomicAckEth, Bth, Msn, Opcode, PacketBuilder, PacketView, Psn, Qpn, Syndrome,
};

/// Where A's READ and atomic results land.
const LOCAL_AT: u64 = 0x100;
/// What a forged READ response carries.
const DATA: [u8; 8] = [0xAB; 8];

/// A connected RC pair whose A posted one WR of `opcode` (8 bytes from
/// or to `LOCAL_AT`) and sent its request, which B never receives.
/// Returns the pair, the request's PSN, and A's QP number.
fn posted(opcode: u32) -> (Pair, u32, u32, Gid, Gid) {
    posted_of(opcode, 8)
}

/// [`posted`], of `len` bytes.
fn posted_of(opcode: u32, len: u32) -> (Pair, u32, u32, Gid, Gid) {
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    let sge = [p.a.sge(LOCAL_AT, len)];
    let mut w = wr(7, opcode, &sge);
    w.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x2000,
        rkey: p.b.key,
    };
    w.atomic = AtomicTarget {
        remote_addr: MEM_BASE + 0x2000,
        compare_add: 1,
        swap: 0,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &w).unwrap();
    let mut buf = vec![0u8; MAX_PACKET_LEN];
    let t = p.a.e.poll_transmit(0, &p.a.mem, &mut buf).unwrap();
    let psn = PacketView::parse(&buf[..t.len]).unwrap().psn().get();
    let qpn = p.a.e.qp_num(qa).unwrap();
    (p, psn, qpn, t.src_gid, t.dst_gid)
}

/// A response to QP `qpn` at `psn`.
fn response(opcode: Opcode, qpn: u32, psn: u32, syndrome: Syndrome, data: &[u8]) -> Vec<u8> {
    let mut b = PacketBuilder::new(Bth::new(opcode, Qpn::new_masked(qpn), Psn::new_masked(psn)))
        .with_payload(data);
    if opcode.has(softverbs_wire::ExtHeader::Aeth) {
        // Written as an ACK, then given the syndrome byte (a reserved one
        // cannot be written).
        b = b.with_aeth(Aeth {
            syndrome: Syndrome::Ack { credits: 0x1F },
            msn: Msn::new_masked(1),
        });
    }
    if opcode == Opcode::RcAtomicAck {
        b = b.with_atomic_ack_eth(AtomicAckEth { orig_data: 5 });
    }
    let mut buf = vec![0u8; MAX_PACKET_LEN];
    let n = b.build_unsealed(&mut buf).unwrap();
    buf.truncate(n);
    let raw = match syndrome {
        Syndrome::Reserved(byte) => byte,
        s => s.encode().unwrap(),
    };
    buf[12] = raw; // the AETH follows the 12-byte BTH
    buf
}

/// A's completions and QP state after `packet` arrived from B.
fn answer(opcode: u32, make: impl Fn(u32, u32) -> Vec<u8>) -> (Vec<WcStatus>, Pair) {
    let (mut p, psn, qpn, a_gid, b_gid) = posted(opcode);
    let packet = make(qpn, psn);
    p.a.e.handle_packet(0, b_gid, a_gid, &packet, &mut p.a.mem);
    let statuses = p.a.poll().iter().map(|w| w.status).collect();
    (statuses, p)
}

#[test]
fn a_read_response_for_a_write_fails_it_as_a_bad_response() {
    let (st, _) = answer(send_opcode::RDMA_WRITE, |qpn, psn| {
        let ack = Syndrome::Ack { credits: 0x1F };
        response(Opcode::RcReadRespOnly, qpn, psn, ack, &DATA)
    });
    assert_eq!(st, [WcStatus::BadRespErr]);
    // Neighbour: an ACK completes it.
    let (st, _) = answer(send_opcode::RDMA_WRITE, |qpn, psn| {
        response(
            Opcode::RcAck,
            qpn,
            psn,
            Syndrome::Ack { credits: 0x1F },
            &[],
        )
    });
    assert_eq!(st, [WcStatus::Success]);
}

#[test]
fn an_atomic_ack_for_a_read_and_a_read_response_for_an_atomic_are_bad_responses() {
    let ack = Syndrome::Ack { credits: 0x1F };
    let (st, p) = answer(send_opcode::RDMA_READ, |qpn, psn| {
        response(Opcode::RcAtomicAck, qpn, psn, ack, &[])
    });
    assert_eq!(st, [WcStatus::BadRespErr]);
    assert_eq!(p.a.mem.slice(MEM_BASE + LOCAL_AT, 8), [0; 8]);
    let (st, p) = answer(send_opcode::ATOMIC_FETCH_AND_ADD, |qpn, psn| {
        response(Opcode::RcReadRespOnly, qpn, psn, ack, &DATA)
    });
    assert_eq!(st, [WcStatus::BadRespErr]);
    assert_eq!(p.a.mem.slice(MEM_BASE + LOCAL_AT, 8), [0; 8]);
    // Neighbours: each answered by its own kind completes.
    let (st, p) = answer(send_opcode::RDMA_READ, |qpn, psn| {
        response(Opcode::RcReadRespOnly, qpn, psn, ack, &DATA)
    });
    assert_eq!(st, [WcStatus::Success]);
    assert_eq!(p.a.mem.slice(MEM_BASE + LOCAL_AT, 8), DATA);
    let (st, _) = answer(send_opcode::ATOMIC_FETCH_AND_ADD, |qpn, psn| {
        response(Opcode::RcAtomicAck, qpn, psn, ack, &[])
    });
    assert_eq!(st, [WcStatus::Success]);
}

#[test]
fn a_read_response_whose_aeth_is_a_nak_is_a_bad_response_and_writes_nothing() {
    let nak = Syndrome::decode(0x62); // NAK, remote access error
    let (st, p) = answer(send_opcode::RDMA_READ, |qpn, psn| {
        response(Opcode::RcReadRespOnly, qpn, psn, nak, &DATA)
    });
    assert_eq!(st, [WcStatus::BadRespErr]);
    assert_eq!(p.a.mem.slice(MEM_BASE + LOCAL_AT, 8), [0; 8]);
}

#[test]
fn a_nak_with_a_reserved_code_or_type_is_a_remote_operational_error() {
    for byte in [0x65, 0x7F, 0x40, 0x5F] {
        let (st, p) = answer(send_opcode::SEND, |qpn, psn| {
            response(Opcode::RcAck, qpn, psn, Syndrome::Reserved(byte), &[])
        });
        assert_eq!(st, [WcStatus::RemOpErr], "syndrome {byte:#x}");
        assert_eq!(p.a.e.stats().rx_malformed, 0, "{byte:#x} was dropped");
    }
}

#[test]
fn responses_for_nothing_outstanding_are_ignored() {
    let ack = Syndrome::Ack { credits: 0x1F };
    // A READ response for the PSN after the only request sent.
    let (st, _) = answer(send_opcode::RDMA_WRITE, |qpn, psn| {
        response(Opcode::RcReadRespOnly, qpn, psn + 1, ack, &DATA)
    });
    assert_eq!(st, []);
}

/// A's completions after B answered its READ of three MTUs (1024 bytes
/// each) with `opcodes`, a packet of 1024 bytes each, at the READ's PSN
/// and on.
fn read_answered_with(opcodes: &[Opcode]) -> Vec<WcStatus> {
    let (mut p, psn, qpn, a_gid, b_gid) = posted_of(send_opcode::RDMA_READ, 3 * 1024);
    let ack = Syndrome::Ack { credits: 0x1F };
    for (i, &opcode) in opcodes.iter().enumerate() {
        let packet = response(opcode, qpn, psn + i as u32, ack, &[0xCD; 1024]);
        p.a.e.handle_packet(0, b_gid, a_gid, &packet, &mut p.a.mem);
    }
    p.a.poll().iter().map(|w| w.status).collect()
}

/// READ responses out of their order (a MIDDLE where the FIRST is due, a
/// second FIRST) fail the READ, as rxe's `check_ack` does; FIRST, MIDDLE,
/// LAST completes it.
#[test]
fn read_responses_out_of_their_order_are_bad_responses() {
    use Opcode::{RcReadRespFirst as First, RcReadRespLast as Last, RcReadRespMiddle as Middle};
    assert_eq!(
        read_answered_with(&[Middle, Middle, Last]),
        [WcStatus::BadRespErr]
    );
    assert_eq!(
        read_answered_with(&[First, First, Last]),
        [WcStatus::BadRespErr]
    );
    assert_eq!(
        read_answered_with(&[First, Middle, Last]),
        [WcStatus::Success]
    );
}
