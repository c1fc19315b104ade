//! The responder's checks of a packet's own fields, with hand-made packets
//! that a correct requester never sends: the payload length each position
//! of a multi-packet message must have, and the BTH P_Key. Each rejected
//! case has an accepted neighbour, so that a test fails both if a check
//! disappears and if it grows too strict.

mod common;
use common::pair::*;
use softverbs_engine::*;
use softverbs_wire::{
    Bth, Deth, NakCode, Opcode, PacketBuilder, PacketView, Psn, Qpn, Reth, Syndrome,
};

/// The path MTU of every connection here (Link::default()).
const MTU: usize = 1024;
/// Where B's receive buffer and WRITE target lie.
const RECV_AT: u64 = 0x4000;
const WRITE_AT: u64 = 0x8000;

/// One packet of a message: opcode and payload length.
type Piece = (Opcode, usize);

/// Builds a packet for QP number `qpn` at `psn` with `len` payload bytes
/// (the RETH, when the opcode has one, targets B's WRITE window for
/// `dma_len` bytes).
fn packet(opcode: Opcode, qpn: u32, psn: u32, len: usize, reth: Option<Reth>) -> Vec<u8> {
    let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
    let mut b = PacketBuilder::new(Bth::new(opcode, Qpn::new_masked(qpn), Psn::new_masked(psn)))
        .with_payload(&payload);
    if let Some(reth) = reth {
        b = b.with_reth(reth);
    }
    if opcode.has_imm() {
        b = b.with_imm(0x1234_5678);
    }
    let mut buf = vec![0u8; MAX_PACKET_LEN + MTU];
    let n = b.build_unsealed(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// The same packet with another BTH P_Key.
fn with_pkey(bytes: &[u8], pkey: u16) -> Vec<u8> {
    let v = PacketView::parse(bytes).unwrap();
    let b = PacketBuilder {
        bth: Bth { pkey, ..*v.bth() },
        ext: *v.ext(),
        payload: v.payload(),
    };
    let mut buf = vec![0u8; bytes.len()];
    let n = b.build_unsealed(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// What B's QP did with a message.
#[derive(Debug)]
struct Outcome {
    state: QpState,
    events: Vec<AsyncEvent>,
    /// NAK codes B sent, with their PSNs.
    naks: Vec<(u32, NakCode)>,
    /// B's completions: status and byte count.
    completions: Vec<(WcStatus, u32)>,
    /// Whether any byte of B's WRITE window changed.
    written: bool,
    /// Packets B's QP dropped without an answer (`rx_dropped_by_qp`).
    dropped: u64,
}

/// Connects a QP pair of `ty`, posts one 8 KiB receive WR on B and hands
/// B's QP `pieces` as consecutive packets from A, the first at the PSN B
/// expects. WRITE packets carry a RETH for `dma_len` bytes.
fn deliver(ty: QpType, pieces: &[Piece], dma_len: u32) -> Outcome {
    let mut p = Pair::new();
    let (_, qb) = p.connect(ty, Link::default());
    let sge = [p.b.sge(RECV_AT, 8192)];
    p.b.e
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 1,
                sg_list: &sge,
            },
        )
        .unwrap();
    let qpn = p.b.e.qp_num(qb).unwrap();
    let reth = Reth {
        va: MEM_BASE + WRITE_AT,
        rkey: p.b.key,
        dma_len,
    };
    for (i, &(opcode, len)) in pieces.iter().enumerate() {
        let r = opcode
            .ext_headers()
            .contains(&softverbs_wire::ExtHeader::Reth);
        let bytes = packet(
            opcode,
            qpn,
            Link::default().psn_a + i as u32,
            len,
            r.then_some(reth),
        );
        p.b.e
            .handle_packet(0, p.a.gid, p.b.gid, &bytes, &mut p.b.mem);
    }
    outcome(&mut p, qb)
}

fn outcome(p: &mut Pair, qb: QpId) -> Outcome {
    let mut buf = vec![0u8; MAX_PACKET_LEN];
    let mut naks = Vec::new();
    while let Some(t) = p.b.e.poll_transmit(0, &p.b.mem, &mut buf) {
        let v = PacketView::parse(&buf[..t.len]).unwrap();
        if let Some(Syndrome::Nak(code)) = v.aeth().map(|a| a.syndrome) {
            naks.push((v.psn().get(), code));
        }
    }
    let written =
        p.b.mem
            .slice(MEM_BASE + WRITE_AT, 2 * 4096)
            .iter()
            .any(|&b| b != 0);
    Outcome {
        state: QpState::from_raw(p.b.e.query_qp(qb).unwrap().0.qp_state).unwrap(),
        events: p.b.events(),
        naks,
        completions: p.b.poll().iter().map(|w| (w.status, w.byte_len)).collect(),
        written,
        dropped: p.b.e.stats().rx_dropped_by_qp,
    }
}

/// An RC request rejected for its length: NAK Invalid Request at the
/// offending (last) packet's PSN, IBV_EVENT_QP_REQ_ERR, the QP in ERR and
/// the receive WR not filled: a SEND's completed with the NAK's error (it
/// takes the WR before its length is checked: rxe's `check_resource`,
/// then `check_length` and `do_class_ac_error`), a WRITE's flushed.
fn assert_rc_rejected(pieces: &[Piece], dma_len: u32) {
    let o = deliver(QpType::Rc, pieces, dma_len);
    let psn = Link::default().psn_a + pieces.len() as u32 - 1;
    assert_eq!(
        o.naks,
        [(psn, NakCode::InvalidRequest)],
        "{pieces:?}: {o:?}"
    );
    assert_eq!(o.state, QpState::Err, "{pieces:?}");
    assert!(
        o.events
            .iter()
            .any(|e| matches!(e, AsyncEvent::QpReqErr(_))),
        "{pieces:?}: {o:?}"
    );
    let status = match pieces[0].0 {
        Opcode::RcSendFirst | Opcode::RcSendOnly => WcStatus::RemInvReqErr,
        _ => WcStatus::WrFlushErr,
    };
    assert_eq!(o.completions, [(status, 0)], "{pieces:?}");
}

/// An RC message accepted whole: no NAK, the QP still in RTS.
fn assert_rc_accepted(pieces: &[Piece], dma_len: u32) -> Outcome {
    let o = deliver(QpType::Rc, pieces, dma_len);
    assert_eq!(o.naks, [], "{pieces:?}: {o:?}");
    assert_eq!(o.state, QpState::Rts, "{pieces:?}: {o:?}");
    o
}

/// Rule: the FIRST and MIDDLE packets of a message carry exactly one path
/// MTU of payload, no more and no less (IBTA vol. 1 9.7.5.1.2 length
/// checks; C9-89/C9-90); a request that breaks it is an invalid request
/// (NAK, class C error; rxe `check_length`).
#[test]
fn send_first_and_middle_packets_carry_exactly_one_mtu() {
    use Opcode::{RcSendFirst as F, RcSendLast as L, RcSendMiddle as M};
    for pieces in [
        &[(F, MTU - 1)][..],
        &[(F, MTU + 1)],
        &[(F, MTU), (M, MTU - 4)],
        &[(F, MTU), (M, MTU + 4)],
    ] {
        assert_rc_rejected(pieces, 0);
    }
    let o = assert_rc_accepted(&[(F, MTU), (M, MTU), (L, 1)], 0);
    assert_eq!(o.completions, [(WcStatus::Success, 2 * MTU as u32 + 1)]);
}

/// Rule: a SEND broken off by a packet of another message kind (an
/// opcode sequence error) is an invalid request, and the receive WR its
/// earlier packets filled completes with that error, not flushed (rxe:
/// `RESPST_ERR_MISSING_OPCODE_LAST_C`, then the WR it is filling
/// completes with the class C status).
#[test]
fn a_send_broken_off_by_another_opcode_fails_its_receive_wr() {
    use Opcode::{RcSendFirst as F, RcSendOnly as O, RcWriteMiddle as WM};
    for second in [WM, O] {
        let o = deliver(QpType::Rc, &[(F, MTU), (second, MTU)], 0);
        let psn = Link::default().psn_a + 1;
        assert_eq!(
            o.naks,
            [(psn, NakCode::InvalidRequest)],
            "{second:?}: {o:?}"
        );
        assert_eq!(o.state, QpState::Err);
        assert_eq!(o.completions, [(WcStatus::RemInvReqErr, 0)], "{second:?}");
    }
}

/// Rule: the LAST packet carries 1 to MTU bytes (an empty LAST would be a
/// message whose length the FIRST/MIDDLE packets already ended).
#[test]
fn a_send_last_packet_carries_one_to_mtu_bytes() {
    use Opcode::{RcSendFirst as F, RcSendLast as L};
    assert_rc_rejected(&[(F, MTU), (L, 0)], 0);
    assert_rc_rejected(&[(F, MTU), (L, MTU + 1)], 0);
    for last in [1, MTU] {
        let o = assert_rc_accepted(&[(F, MTU), (L, last)], 0);
        assert_eq!(o.completions, [(WcStatus::Success, (MTU + last) as u32)]);
    }
}

/// Rule: an ONLY packet carries 0 to MTU bytes (a zero-length SEND is a
/// valid message).
#[test]
fn a_send_only_packet_carries_zero_to_mtu_bytes() {
    assert_rc_rejected(&[(Opcode::RcSendOnly, MTU + 1)], 0);
    for len in [0, MTU] {
        let o = assert_rc_accepted(&[(Opcode::RcSendOnly, len)], 0);
        assert_eq!(o.completions, [(WcStatus::Success, len as u32)]);
    }
}

/// Rule: the same lengths hold for the packets of an RDMA WRITE, whatever
/// its RETH announces: a short FIRST or MIDDLE, an empty LAST or an ONLY
/// over the MTU is an invalid request, and its bytes go nowhere.
#[test]
fn write_packets_obey_the_same_lengths() {
    use Opcode::{RcWriteFirst as F, RcWriteLast as L, RcWriteMiddle as M, RcWriteOnly as O};
    let cases: [(&[Piece], u32); 4] = [
        (&[(F, 1000)], 3000),
        (&[(F, MTU), (M, 1000)], 3000),
        (&[(F, MTU), (L, 0)], MTU as u32),
        (&[(O, MTU + 1)], MTU as u32 + 1),
    ];
    for (pieces, dma_len) in cases {
        let o = deliver(QpType::Rc, pieces, dma_len);
        let psn = Link::default().psn_a + pieces.len() as u32 - 1;
        assert_eq!(
            o.naks,
            [(psn, NakCode::InvalidRequest)],
            "{pieces:?}: {o:?}"
        );
        assert_eq!(o.state, QpState::Err, "{pieces:?}");
        if pieces.len() == 1 {
            assert!(!o.written, "{pieces:?} wrote memory");
        }
    }
    let o = assert_rc_accepted(&[(F, MTU), (M, MTU), (L, 10)], 2 * MTU as u32 + 10);
    assert!(o.written);
    assert_rc_accepted(&[(O, MTU)], MTU as u32);
}

/// Rule: a WRITE whose RETH announces more than the largest message
/// (2^31 bytes) is an invalid request, whatever its R_Key and address
/// (C9-94; rxe checks the length before the R_Key); 2^31 itself reaches the
/// R_Key check, here a remote access error for a window of 8 KiB.
#[test]
fn a_write_longer_than_a_message_can_be_is_an_invalid_request() {
    use Opcode::RcWriteFirst as F;
    for dma_len in [(1u32 << 31) + 1, u32::MAX] {
        assert_rc_rejected(&[(F, MTU)], dma_len);
    }
    let o = deliver(QpType::Rc, &[(F, MTU)], 1 << 31);
    assert_eq!(
        o.naks,
        [(Link::default().psn_a, NakCode::RemoteAccessError)]
    );
}

/// Rule: a WRITE_ONLY_WITH_IMM has taken its receive WR when its length
/// is checked (rxe's order), so one whose payload is not its RETH's length
/// is NAK'd as an invalid request and completes that WR with
/// IBV_WC_REM_INV_REQ_ERR, not flushed; its bytes go nowhere.
#[test]
fn a_write_only_with_imm_of_the_wrong_length_fails_the_receive_wr_it_took() {
    let o = deliver(QpType::Rc, &[(Opcode::RcWriteOnlyImm, 100)], 200);
    let psn = Link::default().psn_a;
    assert_eq!(o.naks, [(psn, NakCode::InvalidRequest)], "{o:?}");
    assert_eq!(o.state, QpState::Err);
    assert_eq!(o.completions, [(WcStatus::RemInvReqErr, 0)], "{o:?}");
    assert!(!o.written);
    let o = assert_rc_accepted(&[(Opcode::RcWriteOnlyImm, 100)], 100);
    assert_eq!(o.completions, [(WcStatus::Success, 100)]);
    assert!(o.written);
}

/// Rule: UC has no NAK; a UC packet of the wrong length drops its message
/// (class D) and the QP goes on with the next one, which takes the
/// receive WR the dropped message did not fill. The drop is counted.
#[test]
fn a_uc_send_first_of_the_wrong_length_drops_its_message() {
    use Opcode::{UcSendFirst as F, UcSendOnly as O};
    for first in [MTU - 1, MTU + 1] {
        let o = deliver(QpType::Uc, &[(F, first), (O, 10)], 0);
        assert_eq!(o.state, QpState::Rts, "{o:?}");
        assert_eq!(
            o.completions,
            [(WcStatus::Success, 10)],
            "first {first}: {o:?}"
        );
        assert_eq!(o.dropped, 1, "{o:?}");
    }
}

/// Rule: a UD datagram carries at most one MTU (the port's, for UD); a
/// larger one, or one with another Q_Key, is dropped (and counted) and the
/// next is received.
#[test]
fn a_ud_datagram_over_the_mtu_is_dropped() {
    let mut p = Pair::new();
    let (_, qb) = p.connect(QpType::Ud, Link::default());
    let mtu = p.b.e.query_port(1).unwrap().active_mtu.bytes() as usize;
    let sge = [p.b.sge(RECV_AT, 8192)];
    for wr_id in 0..2 {
        p.b.e
            .post_recv(
                qb,
                &RecvWr {
                    wr_id,
                    sg_list: &sge,
                },
            )
            .unwrap();
    }
    let qpn = p.b.e.qp_num(qb).unwrap();
    for (len, qkey) in [
        (mtu + 1, 0x1111_1111),
        (mtu, 0x2222_2222),
        (mtu, 0x1111_1111),
    ] {
        let payload = vec![7u8; len];
        let b = PacketBuilder::new(Bth::new(
            Opcode::UdSendOnly,
            Qpn::new_masked(qpn),
            Psn::ZERO,
        ))
        .with_deth(Deth {
            qkey,
            src_qp: Qpn::new_masked(0x100),
        })
        .with_payload(&payload);
        let mut buf = vec![0u8; MAX_PACKET_LEN + 8];
        let n = b.build_unsealed(&mut buf).unwrap();
        p.b.e
            .handle_packet(0, p.a.gid, p.b.gid, &buf[..n], &mut p.b.mem);
    }
    let rx: Vec<_> = p.b.poll().iter().map(|w| (w.status, w.byte_len)).collect();
    assert_eq!(rx, [(WcStatus::Success, (40 + mtu) as u32)]);
    assert_eq!(p.b.e.stats().rx_dropped_by_qp, 2);
}

/// Connects an RC pair, has A post a 10-byte SEND and returns A's request
/// packet (B has a receive WR posted).
fn rc_send() -> (Pair, QpId, QpId, Transmit, Vec<u8>) {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let sge = [p.b.sge(RECV_AT, 100)];
    p.b.e
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 1,
                sg_list: &sge,
            },
        )
        .unwrap();
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 10)]))
        .unwrap();
    let mut buf = vec![0u8; MAX_PACKET_LEN];
    let t = p.a.e.poll_transmit(0, &p.a.mem, &mut buf).unwrap();
    let bytes = buf[..t.len].to_vec();
    (p, qa, qb, t, bytes)
}

/// Rule: a request whose BTH P_Key does not match the QP's is dropped
/// silently: nothing executed, no NAK, no event, the QP unharmed; the drop
/// is counted (IBTA vol. 1 9.6.1.1, 10.9.3: P_Key violations are silent
/// drops counted by the port). A key matches when its low 15 bits are
/// equal and not both keys are limited members: every QP here has the
/// full-member default key 0xFFFF, so 0x7FFF matches it.
#[test]
fn a_request_with_a_foreign_pkey_is_dropped_silently_and_counted() {
    let (mut p, _, qb, t, send) = rc_send();
    let foreign = [0x8001, 0x0001, 0x7FFE, 0xFFFE];
    for pkey in foreign {
        p.b.e.handle_packet(
            0,
            t.src_gid,
            t.dst_gid,
            &with_pkey(&send, pkey),
            &mut p.b.mem,
        );
    }
    let o = outcome(&mut p, qb);
    assert_eq!(o.completions, [], "a packet of another partition executed");
    assert_eq!(o.naks, []);
    assert_eq!(o.events, []);
    assert_eq!(o.state, QpState::Rts);
    assert_eq!(p.b.e.stats().rx_bad_pkey, foreign.len() as u64);
    // The same request in the QP's partition (as a limited member) runs.
    p.b.e.handle_packet(
        0,
        t.src_gid,
        t.dst_gid,
        &with_pkey(&send, 0x7FFF),
        &mut p.b.mem,
    );
    assert_eq!(p.b.poll()[0].status, WcStatus::Success);
    assert_eq!(p.b.e.stats().rx_bad_pkey, foreign.len() as u64);
}

/// Rule: the P_Key check covers responses too: an ACK of another
/// partition completes nothing at the requester.
#[test]
fn an_ack_with_a_foreign_pkey_completes_nothing() {
    let (mut p, _, _, t, send) = rc_send();
    p.b.e
        .handle_packet(0, t.src_gid, t.dst_gid, &send, &mut p.b.mem);
    let mut buf = vec![0u8; MAX_PACKET_LEN];
    let ack_t = p.b.e.poll_transmit(0, &p.b.mem, &mut buf).unwrap();
    let ack = buf[..ack_t.len].to_vec();
    p.a.e.handle_packet(
        0,
        ack_t.src_gid,
        ack_t.dst_gid,
        &with_pkey(&ack, 0x1234),
        &mut p.a.mem,
    );
    assert_eq!(
        p.a.poll().len(),
        0,
        "an ACK of another partition completed the SEND"
    );
    assert_eq!(p.a.e.stats().rx_bad_pkey, 1);
    p.a.e
        .handle_packet(0, ack_t.src_gid, ack_t.dst_gid, &ack, &mut p.a.mem);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}

/// B's answers to a READ request from A at `psn` for `len` bytes at `va`
/// under `rkey`: the PSNs of the response packets it sent.
fn read_answers(p: &mut Pair, qb: QpId, psn: u32, va: u64, len: u32, rkey: u32) -> Vec<u32> {
    let qpn = p.b.e.qp_num(qb).unwrap();
    let reth = Reth {
        va,
        rkey,
        dma_len: len,
    };
    let req = packet(Opcode::RcReadRequest, qpn, psn, 0, Some(reth));
    p.b.e.handle_packet(0, p.a.gid, p.b.gid, &req, &mut p.b.mem);
    let mut buf = vec![0u8; MAX_PACKET_LEN];
    let mut psns = Vec::new();
    while let Some(t) = p.b.e.poll_transmit(0, &p.b.mem, &mut buf) {
        psns.push(PacketView::parse(&buf[..t.len]).unwrap().psn().get());
    }
    psns
}

/// Rule: a READ request behind the expected PSN is served again only if
/// it repeats part of a READ executed (the same rkey, its VA and length
/// inside the original's; rxe `duplicate_request` and its responder
/// resources); any other is dropped silently, the QP unharmed: a READ
/// never received is not executed, and a mismatched repeat does not end
/// the connection.
#[test]
fn a_repeated_read_is_served_only_inside_the_read_it_repeats() {
    let mut p = Pair::new();
    let (_, qb) = p.connect(QpType::Rc, Link::default());
    let psn = Link::default().psn_a;
    let va = MEM_BASE + WRITE_AT;
    let key = p.b.key;
    let mtu = MTU as u32;
    assert_eq!(
        read_answers(&mut p, qb, psn, va, 3 * mtu, key),
        [psn, psn + 1, psn + 2]
    );
    // Its last two packets asked for again, from the middle: served.
    assert_eq!(
        read_answers(&mut p, qb, psn + 1, va + u64::from(mtu), 2 * mtu, key),
        [psn + 1, psn + 2]
    );
    let other =
        p.b.e
            .reg_mr(
                p.b.pd,
                va,
                4 * MTU as u64,
                va,
                AccessFlags::REMOTE_READ.bits(),
            )
            .unwrap()
            .key;
    let strays = [
        (psn - 1, va, mtu, key),     // never received
        (psn, va - 8, 3 * mtu, key), // starts before it
        (psn, va, 4 * mtu, key),     // longer
        (psn, va, 3 * mtu, other),   // another MR
        (psn + 2, va, 3 * mtu, key), // responses past its last PSN
    ];
    for (at, va, len, rkey) in strays {
        assert_eq!(
            read_answers(&mut p, qb, at, va, len, rkey),
            [],
            "{at} {va:#x} {len}"
        );
    }
    let o = outcome(&mut p, qb);
    assert_eq!(
        (o.state, o.events.len(), o.naks.len()),
        (QpState::Rts, 0, 0)
    );
    // The connection goes on: the next READ is served.
    assert_eq!(read_answers(&mut p, qb, psn + 3, va, 8, key), [psn + 3]);
}

/// A WRITE's end handed in again (a duplicate: the requester resends for
/// an ACK it did not get) brings the application no new data, so it is no
/// new WRITE end (`rx_write_ends`): an embedder that keeps the ACK of a
/// WRITE for the application's answer (the transport's `WriteAnswers`)
/// would keep the duplicate's for an answer already sent. It is
/// acknowledged again.
#[test]
fn a_duplicate_write_end_is_no_new_write_end() {
    let mut p = Pair::new();
    let (_, qb) = p.connect(QpType::Rc, Link::default());
    let qpn = p.b.e.qp_num(qb).unwrap();
    let reth = Reth {
        va: MEM_BASE + WRITE_AT,
        rkey: p.b.key,
        dma_len: 64,
    };
    let psn = Link::default().psn_a;
    let bytes = packet(Opcode::RcWriteOnly, qpn, psn, 64, Some(reth));
    // With AckReq, as a requester sets it on a message's last packet.
    let v = PacketView::parse(&bytes).unwrap();
    let asking = PacketBuilder {
        bth: Bth {
            ack_req: true,
            ..*v.bth()
        },
        ext: *v.ext(),
        payload: v.payload(),
    };
    let mut bytes = vec![0u8; bytes.len()];
    let n = asking.build_unsealed(&mut bytes).unwrap();
    bytes.truncate(n);
    let mut acks = Vec::new();
    let mut buf = vec![0u8; MAX_PACKET_LEN];
    for _ in 0..2 {
        p.b.e
            .handle_packet(0, p.a.gid, p.b.gid, &bytes, &mut p.b.mem);
        while let Some(t) = p.b.e.poll_transmit(0, &p.b.mem, &mut buf) {
            acks.push(PacketView::parse(&buf[..t.len]).unwrap().psn().get());
        }
    }
    assert_eq!(p.b.e.stats().rx_write_ends, 1);
    assert_eq!(p.b.e.stats().recovery.rx_duplicates, 1);
    assert_eq!(acks, [psn, psn], "the duplicate acknowledged again");
}
