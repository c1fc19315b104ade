//! The data path between two engines: every opcode, segmentation, and the
//! reliability rules (ACK/NAK, retransmit, RNR, PSN wrap, duplicates).

mod common;
use common::pair::*;
use common::*;
use softverbs_engine::*;

/// Compares memory without printing kilobytes when it differs.
fn same(got: &[u8], want: &[u8]) -> bool {
    got == want
}

fn fill(n: &mut Node, offset: u64, len: usize, seed: u8) -> Vec<u8> {
    let data: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    n.mem.write(MEM_BASE + offset, &data).unwrap();
    data
}

#[test]
fn rc_send_spans_several_mtus_and_arrives_whole() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let data = fill(&mut p.a, 0, 5000, 1);
    p.b.e
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 9,
                sg_list: &[p.b.sge(0x8000, 8192)],
            },
        )
        .unwrap();
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 5000)]))
        .unwrap();
    p.run(1000);
    let rx = p.b.poll();
    assert_eq!(rx.len(), 1);
    assert_eq!(
        (rx[0].wr_id, rx[0].status, rx[0].opcode, rx[0].byte_len),
        (9, WcStatus::Success, WcOpcode::Recv, 5000)
    );
    assert!(same(p.b.mem.slice(MEM_BASE + 0x8000, 5000), &data));
    let tx = p.a.poll();
    assert_eq!(tx.len(), 1);
    assert_eq!(
        (tx[0].wr_id, tx[0].status, tx[0].opcode),
        (1, WcStatus::Success, WcOpcode::Send)
    );
}

#[test]
fn rc_write_and_write_with_imm() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let data = fill(&mut p.a, 0, 3000, 2);
    let mut w = wr(1, send_opcode::RDMA_WRITE, &[]);
    let sge = [p.a.sge(0, 3000)];
    w.sg_list = &sge;
    w.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x4000,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &w).unwrap();
    p.b.post_recv(qb, 7, 0, 0);
    let imm = SendWr {
        wr_id: 2,
        opcode: send_opcode::RDMA_WRITE_WITH_IMM,
        imm_data_or_inv_rkey: 0xabcd,
        rdma: RdmaTarget {
            remote_addr: MEM_BASE + 0x9000,
            rkey: p.b.key,
        },
        ..w
    };
    p.a.e.post_send(qa, &imm).unwrap();
    p.run(1000);
    assert!(same(p.b.mem.slice(MEM_BASE + 0x4000, 3000), &data));
    assert!(same(p.b.mem.slice(MEM_BASE + 0x9000, 3000), &data));
    let rx = p.b.poll();
    assert_eq!(rx.len(), 1, "a plain WRITE consumes no receive WR");
    assert_eq!(
        (
            rx[0].wr_id,
            rx[0].opcode,
            rx[0].byte_len,
            rx[0].imm_data_or_inv_rkey
        ),
        (7, WcOpcode::RecvRdmaWithImm, 3000, 0xabcd)
    );
    assert_ne!(rx[0].wc_flags & wc_flags::WITH_IMM, 0);
    let tx: Vec<_> =
        p.a.poll()
            .iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect();
    assert_eq!(
        tx,
        [
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::RdmaWrite)
        ]
    );
}

#[test]
fn rc_read_of_several_mtus_and_of_zero_bytes() {
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    let data = fill(&mut p.b, 0x2000, 4500, 3);
    let sge = [p.a.sge(0x6000, 4500)];
    let mut r = wr(1, send_opcode::RDMA_READ, &sge);
    r.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x2000,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &r).unwrap();
    let zero = SendWr {
        wr_id: 2,
        sg_list: &[],
        ..r
    };
    p.a.e.post_send(qa, &zero).unwrap();
    p.run(1000);
    assert!(same(p.a.mem.slice(MEM_BASE + 0x6000, 4500), &data));
    let tx: Vec<_> =
        p.a.poll()
            .iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len))
            .collect();
    assert_eq!(
        tx,
        [
            (1, WcStatus::Success, WcOpcode::RdmaRead, 4500),
            (2, WcStatus::Success, WcOpcode::RdmaRead, 0)
        ]
    );
}

/// An atomic's local buffer may be longer than its 8 bytes (rxe's
/// provider refuses shorter only): the original value lands in the first
/// 8, the rest is left alone, on the wire and on the same host.
#[test]
fn an_atomic_into_a_longer_local_buffer_fills_its_first_8_bytes() {
    for same_host in [false, true] {
        let mut p = Pair::on(same_host);
        let (qa, _) = p.connect(QpType::Rc, Link::default());
        p.a.mem.write(MEM_BASE + 0x800, &[0xEE; 16]).unwrap();
        let sge = [p.a.sge(0x800, 16)];
        let add = add_two(&mut p, &sge);
        p.a.e.post_send(qa, &add).unwrap();
        p.run(100);
        let done: Vec<_> = p.a.poll().iter().map(|w| (w.status, w.byte_len)).collect();
        assert_eq!(done, [(WcStatus::Success, 8)], "same host: {same_host}");
        assert_eq!(p.a.mem.slice(MEM_BASE + 0x800, 8), &40u64.to_ne_bytes());
        assert_eq!(p.a.mem.slice(MEM_BASE + 0x808, 8), &[0xEE; 8]);
        assert_eq!(p.b.mem.slice(MEM_BASE + 0x100, 8), &42u64.to_ne_bytes());
    }
}

/// Rule (`ibv_reg_mr_iova`): an MR's lkey names its bytes in the MR's
/// iova space, as its rkey does; the kernel's providers check and
/// translate local SGEs as they do remote addresses (rxe against
/// `mr->ibmr.iova`, mlx5 with one start address per mkey). So a WRITE's
/// gather, a READ's scatter and a receive's scatter through such an MR
/// use iova addresses, and an SGE at the region's process address is a
/// local protection error. On the wire and on the same host.
#[test]
fn local_sges_name_an_mr_in_its_iova_space() {
    const IOVA: u64 = 0x2000_0000;
    let host = |offset| MEM_BASE + 0x10000 + offset;
    // The key of an MR over `host(0..0x2000)` at IOVA, LOCAL_WRITE.
    let iova_mr = |n: &mut Node| {
        let access = AccessFlags::LOCAL_WRITE.bits();
        n.e.reg_mr(n.pd, host(0), 0x2000, IOVA, access).unwrap().key
    };
    for same_host in [false, true] {
        let mut p = Pair::on(same_host);
        let (qa, _) = p.connect(QpType::Rc, Link::default());
        let key_a = iova_mr(&mut p.a);
        let sge = |key, at, len| Sge {
            addr: at,
            length: len,
            lkey: key,
        };
        let data = fill(&mut p.a, 0x10010, 300, 5);
        let from_iova = [sge(key_a, IOVA + 0x10, 300)];
        let mut write = wr(1, send_opcode::RDMA_WRITE, &from_iova);
        write.rdma = RdmaTarget {
            remote_addr: MEM_BASE + 0x4000,
            rkey: p.b.key,
        };
        let from_va = [sge(key_a, host(0x10), 300)];
        let mut wrong = wr(2, send_opcode::RDMA_WRITE, &from_va);
        wrong.rdma = write.rdma;
        p.a.e.post_send(qa, &write).unwrap();
        p.run(1000);
        p.a.e.post_send(qa, &wrong).unwrap();
        p.run(1000);
        assert!(
            same(p.b.mem.slice(MEM_BASE + 0x4000, 300), &data),
            "same host: {same_host}"
        );
        let done: Vec<_> = p.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(
            done[..2],
            [(1, WcStatus::Success), (2, WcStatus::LocProtErr)]
        );

        // A READ into the MR and a SEND received into B's, on a new pair
        // (the protection error ended that connection).
        let mut p2 = Pair::on(same_host);
        let (qa, qb2) = p2.connect(QpType::Rc, Link::default());
        let (key_a, key_b) = (iova_mr(&mut p2.a), iova_mr(&mut p2.b));
        let wanted = fill(&mut p2.b, 0x5000, 200, 9);
        let into_iova = [sge(key_a, IOVA + 0x100, 200)];
        let mut read = wr(3, send_opcode::RDMA_READ, &into_iova);
        read.rdma = RdmaTarget {
            remote_addr: MEM_BASE + 0x5000,
            rkey: p2.b.key,
        };
        let recv_sge = [sge(key_b, IOVA + 0x800, 64)];
        p2.b.e
            .post_recv(
                qb2,
                &RecvWr {
                    wr_id: 4,
                    sg_list: &recv_sge,
                },
            )
            .unwrap();
        let sent = fill(&mut p2.a, 0x600, 64, 3);
        let send_sge = [p2.a.sge(0x600, 64)];
        p2.a.e.post_send(qa, &read).unwrap();
        p2.a.e
            .post_send(qa, &wr(5, send_opcode::SEND, &send_sge))
            .unwrap();
        p2.run(1000);
        assert!(same(p2.a.mem.slice(host(0x100), 200), &wanted));
        assert!(same(p2.b.mem.slice(host(0x800), 64), &sent));
        let done: Vec<_> = p2.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(done, [(3, WcStatus::Success), (5, WcStatus::Success)]);
        assert_eq!(p2.b.poll()[0].status, WcStatus::Success);
    }
}

/// WR 1: a FETCH_AND_ADD of 2 to B's 8 bytes at 0x100, which it sets to
/// 40, the original value into `sge`.
fn add_two<'a>(p: &mut Pair, sge: &'a [Sge]) -> SendWr<'a> {
    p.b.mem
        .write(MEM_BASE + 0x100, &40u64.to_ne_bytes())
        .unwrap();
    let mut add = wr(1, send_opcode::ATOMIC_FETCH_AND_ADD, sge);
    add.atomic = AtomicTarget {
        remote_addr: MEM_BASE + 0x100,
        compare_add: 2,
        swap: 0,
        rkey: p.b.key,
    };
    add
}

#[test]
fn rc_atomics_return_the_original_value() {
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    let sge = [p.a.sge(0x800, 8)];
    let add = add_two(&mut p, &sge);
    p.a.e.post_send(qa, &add).unwrap();
    p.run(100);
    assert_eq!(p.a.mem.slice(MEM_BASE + 0x800, 8), &40u64.to_ne_bytes());
    let sge2 = [p.a.sge(0x808, 8)];
    let cas = SendWr {
        wr_id: 2,
        opcode: send_opcode::ATOMIC_CMP_AND_SWP,
        sg_list: &sge2,
        atomic: AtomicTarget {
            compare_add: 42,
            swap: 7,
            ..add.atomic
        },
        ..add
    };
    p.a.e.post_send(qa, &cas).unwrap();
    let miss = SendWr {
        wr_id: 3,
        atomic: AtomicTarget {
            compare_add: 42,
            swap: 9,
            ..add.atomic
        },
        ..cas
    };
    p.a.e.post_send(qa, &miss).unwrap();
    p.run(100);
    assert_eq!(p.b.mem.slice(MEM_BASE + 0x100, 8), &7u64.to_ne_bytes());
    assert_eq!(
        p.a.mem.slice(MEM_BASE + 0x808, 8),
        &7u64.to_ne_bytes(),
        "second CAS saw 7"
    );
    let tx: Vec<_> =
        p.a.poll()
            .iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect();
    assert_eq!(
        tx,
        [
            (1, WcStatus::Success, WcOpcode::FetchAdd),
            (2, WcStatus::Success, WcOpcode::CompSwap),
            (3, WcStatus::Success, WcOpcode::CompSwap)
        ]
    );
}

#[test]
fn uc_send_and_write_complete_without_acks() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Uc, Link::default());
    let data = fill(&mut p.a, 0, 2500, 4);
    p.b.post_recv(qb, 5, 0x3000, 4096);
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 2500)]))
        .unwrap();
    let sge = [p.a.sge(0, 2500)];
    let mut w = wr(2, send_opcode::RDMA_WRITE, &sge);
    w.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x8000,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &w).unwrap();
    let mut acks = 0;
    p.filter = Box::new(move |from_a, _| {
        if !from_a {
            acks += 1;
            assert_eq!(acks, 0, "UC sends no ACKs");
        }
        Fate::Deliver
    });
    p.run(100);
    assert!(same(p.b.mem.slice(MEM_BASE + 0x3000, 2500), &data));
    assert!(same(p.b.mem.slice(MEM_BASE + 0x8000, 2500), &data));
    assert_eq!(p.b.poll().len(), 1);
    assert_eq!(p.a.poll().len(), 2);
}

#[test]
fn ud_send_fills_the_grh_and_reports_the_source() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Ud, Link::default());
    let data = fill(&mut p.a, 0, 1000, 5);
    p.b.post_recv(qb, 8, 0x3000, 2000);
    let av = AhAttr {
        grh: GlobalRoute {
            dgid: p.b.gid,
            ..av().grh
        },
        ..av()
    };
    let ah = p.a.e.create_ah(p.a.pd, &av).unwrap();
    let qpn_b = p.b.e.qp_num(qb).unwrap();
    let sge = [p.a.sge(0, 1000)];
    let mut s = wr(1, send_opcode::SEND_WITH_IMM, &sge);
    s.imm_data_or_inv_rkey = 77;
    s.ud = Some(UdTarget {
        ah,
        remote_qpn: qpn_b,
        remote_qkey: 0x8000_0000,
    });
    p.a.e.post_send(qa, &s).unwrap();
    p.run(100);
    let rx = p.b.poll();
    assert_eq!(rx.len(), 1);
    let wc = rx[0];
    assert_eq!(
        (wc.status, wc.byte_len, wc.src_qp, wc.imm_data_or_inv_rkey),
        (WcStatus::Success, 1040, p.a.e.qp_num(qa).unwrap(), 77)
    );
    assert_eq!(
        wc.wc_flags & (wc_flags::GRH | wc_flags::WITH_IMM),
        wc_flags::GRH | wc_flags::WITH_IMM
    );
    assert_eq!(wc.sl, 2, "mlx5's packet type for RoCEv2 over IPv4");
    let grh = p.b.mem.slice(MEM_BASE + 0x3000, 40);
    assert_eq!(
        &grh[..20],
        &[0; 20],
        "IPv4: 20 zero bytes, then the IPv4 header"
    );
    assert_eq!(grh[20] >> 4, 4);
    assert_eq!(&grh[32..36], &[10, 0, 0, 1], "source address");
    assert_eq!(&grh[36..40], &[10, 0, 0, 2], "destination address");
    assert!(same(p.b.mem.slice(MEM_BASE + 0x3000 + 40, 1000), &data));
}

#[test]
fn ud_wrong_qkey_is_dropped() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Ud, Link::default());
    p.b.post_recv(qb, 8, 0x3000, 2000);
    let av = AhAttr {
        grh: GlobalRoute {
            dgid: p.b.gid,
            ..av().grh
        },
        ..av()
    };
    let ah = p.a.e.create_ah(p.a.pd, &av).unwrap();
    let qpn_b = p.b.e.qp_num(qb).unwrap();
    let mut s = wr(1, send_opcode::SEND, &[]);
    s.ud = Some(UdTarget {
        ah,
        remote_qpn: qpn_b,
        remote_qkey: 0x1234,
    });
    p.a.e.post_send(qa, &s).unwrap();
    p.run(100);
    assert_eq!(p.a.poll().len(), 1, "the sender completes");
    assert!(p.b.poll().is_empty(), "the receiver drops it");
}

/// Rule (IBTA C10-93.1.1): a UD message longer than the MTU sends no
/// packet and is no error: its WR completes with success, in its turn
/// (rxe: "fake a successful UD send"), on the wire and on the same host.
#[test]
fn a_ud_message_above_the_mtu_sends_nothing_and_completes() {
    for same_host in [false, true] {
        let mut p = Pair::on(same_host);
        let (qa, qb) = p.connect(QpType::Ud, Link::default());
        let mtu = p.a.e.query_port(1).unwrap().active_mtu.bytes();
        for id in 0..3 {
            p.b.post_recv(qb, id, 0x10000 * (id + 1), mtu + 64);
        }
        let target = Some(p.ud_target(qb));
        for (id, len) in [(1, 100), (2, mtu + 1), (3, 100)] {
            let sge = [p.a.sge(0, len)];
            let s = SendWr {
                ud: target,
                ..wr(id, send_opcode::SEND, &sge)
            };
            p.a.e.post_send(qa, &s).unwrap();
        }
        let sent = std::rc::Rc::new(std::cell::Cell::new(0));
        let counted = sent.clone();
        p.filter = Box::new(move |from_a, _| {
            counted.set(counted.get() + usize::from(from_a));
            Fate::Deliver
        });
        p.run(100);
        let done: Vec<_> = p.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
        let ok = WcStatus::Success;
        assert_eq!(done, [(1, ok), (2, ok), (3, ok)], "same host: {same_host}");
        let received: Vec<_> = p.b.poll().iter().map(|w| w.byte_len).collect();
        assert_eq!(received, [140, 140], "two datagrams and their GRHs");
        if !same_host {
            assert_eq!(sent.get(), 2, "no packet for the long one");
        }
    }
}

#[test]
fn psns_wrap_around_2_pow_24() {
    let mut p = Pair::new();
    let link = Link {
        psn_a: 0xFF_FFFE,
        psn_b: 0xFF_FFFD,
        mtu: Mtu::Mtu256,
        ..Link::default()
    };
    let (qa, qb) = p.connect(QpType::Rc, link);
    let data = fill(&mut p.a, 0, 2000, 6);
    for i in 0..3 {
        p.b.post_recv(qb, i, 0x4000 * (i + 1), 4096);
        p.a.e
            .post_send(qa, &wr(i, send_opcode::SEND, &[p.a.sge(0, 2000)]))
            .unwrap();
    }
    p.run(1000);
    assert_eq!(p.b.poll().len(), 3);
    assert_eq!(p.a.poll().len(), 3);
    for i in 0..3 {
        assert!(same(
            p.b.mem.slice(MEM_BASE + 0x4000 * (i + 1), 2000),
            &data
        ));
    }
}

use softverbs_wire::{OpKind, Syndrome};

/// Whether a packet is a data-carrying request from A.
fn is_request(from_a: bool, v: &softverbs_wire::PacketView<'_>) -> bool {
    from_a && v.opcode().is_request()
}

#[test]
fn lost_request_packet_is_recovered_by_psn_sequence_nak() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let data = fill(&mut p.a, 0, 4096, 7);
    p.b.post_recv(qb, 1, 0x4000, 4096);
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 4096)]))
        .unwrap();
    let (mut n, mut naks) = (0, 0);
    p.filter = Box::new(move |from_a, v| {
        if let Some(a) = v.aeth() {
            if matches!(
                a.syndrome,
                Syndrome::Nak(softverbs_wire::NakCode::PsnSequenceError)
            ) {
                naks += 1;
                assert_eq!(naks, 1, "one NAK per gap");
            }
        }
        n += 1;
        if is_request(from_a, v) && n == 2 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    p.run(100);
    assert!(same(p.b.mem.slice(MEM_BASE + 0x4000, 4096), &data));
    assert_eq!(p.b.poll().len(), 1);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    // Go-back-N from the lost 2nd of 4 packets: 2, 3 and 4 again.
    assert_eq!(p.a.e.stats().tx_resent, 3);
    // The stats line's account: one gap, the two packets after it dropped
    // as ahead of their turn, no duplicate (nothing came late).
    let expected = RecoveryStats {
        go_backs_after_gap: 1,
        ..RecoveryStats::default()
    };
    assert_eq!(p.a.e.stats().recovery, expected);
    let expected = RecoveryStats {
        rx_ahead: 2,
        ..RecoveryStats::default()
    };
    assert_eq!(p.b.e.stats().recovery, expected);
}

/// Connects an RC pair over `link`, sends one 10-byte SEND from `a` into
/// a receive WR of `b` while the first ACK is lost, and runs until the
/// wire is quiet; returns `a`'s QP and the time that took.
fn send_losing_the_first_ack(p: &mut Pair, link: Link) -> (QpId, Nanos) {
    let (qa, qb) = p.connect(QpType::Rc, link);
    p.b.post_recv(qb, 1, 0x4000, 100);
    p.b.post_recv(qb, 2, 0x5000, 100);
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 10)]))
        .unwrap();
    let mut dropped = false;
    p.filter = Box::new(move |from_a, v| {
        if !from_a && v.opcode().kind() == OpKind::Ack && !dropped {
            dropped = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    let before = p.now;
    p.run(100);
    (qa, p.now - before)
}

#[test]
fn lost_ack_is_recovered_by_timeout_and_duplicate_is_reacked_not_redelivered() {
    let mut p = Pair::new();
    let (_, took) = send_losing_the_first_ack(&mut p, Link::default());
    assert!(
        took >= ack_timeout(10).unwrap(),
        "waited for the local ACK timeout"
    );
    assert_eq!(p.b.poll().len(), 1, "the retransmitted SEND is a duplicate");
    assert_eq!(p.a.poll().len(), 1);
    assert_eq!(p.a.e.stats().recovery.go_backs_after_timeout, 1);
    assert_eq!(p.b.e.stats().recovery.rx_duplicates, 1);
}

/// A device's least local ACK timeout holds for a QP that asks for less
/// (as rxe waits at least a jiffy), and `ibv_query_qp` still reports what
/// the QP asked for.
#[test]
fn a_local_ack_timeout_below_the_devices_least_waits_the_least() {
    let floor = DeviceConfig::SOFTWARE_PEER_ACK_TIMEOUT;
    let mut p = Pair::with_config(|cfg| cfg.min_ack_timeout = floor);
    let link = Link {
        timeout: 4,
        ..Link::default()
    };
    let (qa, took) = send_losing_the_first_ack(&mut p, link);
    assert!(took >= floor, "resent before the least timeout");
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    let (attr, _) = p.a.e.query_qp(qa).unwrap();
    assert_eq!(attr.timeout, 4);
}

#[test]
fn retry_exhaustion_fails_with_retry_exc_err_then_flushes_in_order() {
    let mut p = Pair::new();
    let link = Link {
        retry_cnt: 2,
        ..Link::default()
    };
    let (qa, _) = p.connect(QpType::Rc, link);
    for i in 1..=3 {
        p.a.e
            .post_send(qa, &wr(i, send_opcode::SEND, &[p.a.sge(0, 10)]))
            .unwrap();
    }
    p.filter = Box::new(|_, _| Fate::Drop);
    p.run(1000);
    let tx: Vec<_> = p.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        tx,
        [
            (1, WcStatus::RetryExcErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(p.a.e.query_qp(qa).unwrap().0.qp_state, QpState::Err as u32);
}

#[test]
fn rnr_nak_is_retried_after_the_timer_until_a_receive_is_posted() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 10)]))
        .unwrap();
    let rnr = std::rc::Rc::new(std::cell::Cell::new(0));
    let seen = rnr.clone();
    p.filter = Box::new(move |_, v| {
        if v.aeth()
            .is_some_and(|a| matches!(a.syndrome, Syndrome::RnrNak { timer: 1 }))
        {
            seen.set(seen.get() + 1);
        }
        Fate::Deliver
    });
    p.run(40);
    assert!(
        rnr.get() > 8,
        "rnr_retry 7 retries forever: {} RNR NAKs and no failure",
        rnr.get()
    );
    assert!(p.a.poll().is_empty(), "still waiting for a receive WR");
    assert_eq!(p.a.e.stats().recovery.rnr_naks, rnr.get());
    p.b.post_recv(qb, 4, 0x4000, 100);
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    assert_eq!(p.b.poll()[0].wr_id, 4);
}

#[test]
fn rnr_retry_exhaustion_fails_with_rnr_retry_exc_err() {
    let mut p = Pair::new();
    let link = Link {
        rnr_retry: 1,
        ..Link::default()
    };
    let (qa, _) = p.connect(QpType::Rc, link);
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 10)]))
        .unwrap();
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::RnrRetryExcErr);
}

#[test]
fn bad_rkey_naks_remote_access_error_and_both_qps_enter_error() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
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
    let tx: Vec<_> = p.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(tx, [(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]);
    assert_eq!(p.b.events(), [AsyncEvent::QpAccessErr(qb)]);
    assert_eq!(p.b.e.query_qp(qb).unwrap().0.qp_state, QpState::Err as u32);
    let rx: Vec<_> = p.b.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(rx, [(5, WcStatus::WrFlushErr)]);
}

/// A WRITE_ONLY_WITH_IMM that finds no receive WR is RNR NAK'd before
/// its rkey is checked (rxe's order): the requester runs out of RNR
/// retries and the responder stays in RTS, raising nothing. With a
/// receive WR the bad rkey is a remote access error, and the receive WR
/// it took completes with it (rxe's `do_class_ac_error`).
#[test]
fn write_with_imm_without_a_receive_wr_is_rnr_before_its_rkey_is_checked() {
    for with_recv in [false, true] {
        let mut p = Pair::new();
        let link = Link {
            rnr_retry: 1,
            ..Link::default()
        };
        let (qa, qb) = p.connect(QpType::Rc, link);
        if with_recv {
            p.b.post_recv(qb, 5, 0x4000, 100);
        }
        let sge = [p.a.sge(0, 16)];
        let mut w = wr(1, send_opcode::RDMA_WRITE_WITH_IMM, &sge);
        w.rdma = RdmaTarget {
            remote_addr: MEM_BASE,
            rkey: p.b.key ^ 0x55,
        };
        p.a.e.post_send(qa, &w).unwrap();
        p.run(100);
        let status = p.a.poll()[0].status;
        let b_state = p.b.e.query_qp(qb).unwrap().0.qp_state;
        if with_recv {
            assert_eq!(status, WcStatus::RemAccessErr);
            assert_eq!(p.b.events(), [AsyncEvent::QpAccessErr(qb)]);
            assert_eq!(b_state, QpState::Err as u32);
            let rx: Vec<_> = p.b.poll().iter().map(|w| (w.wr_id, w.status)).collect();
            assert_eq!(rx, [(5, WcStatus::RemAccessErr)]);
        } else {
            assert_eq!(status, WcStatus::RnrRetryExcErr);
            assert_eq!(p.b.events(), []);
            assert_eq!(b_state, QpState::Rts as u32);
        }
    }
}

#[test]
fn write_outside_the_region_or_without_rights_is_refused() {
    for (offset, len, access) in [
        (MEM_LEN as u64 - 8, 16, AccessFlags::REMOTE_WRITE),
        (0, 16, AccessFlags::REMOTE_READ),
    ] {
        let mut p = Pair::new();
        let link = Link {
            access,
            ..Link::default()
        };
        let (qa, _) = p.connect(QpType::Rc, link);
        let before = p.b.mem.clone();
        let sge = [p.a.sge(0, len)];
        let mut w = wr(1, send_opcode::RDMA_WRITE, &sge);
        w.rdma = RdmaTarget {
            remote_addr: MEM_BASE + offset,
            rkey: p.b.key,
        };
        p.a.e.post_send(qa, &w).unwrap();
        p.run(100);
        let status = p.a.poll()[0].status;
        assert!(
            matches!(status, WcStatus::RemAccessErr | WcStatus::RemInvReqErr),
            "{status:?}"
        );
        assert!(p.b.mem == before, "nothing written");
    }
}

#[test]
fn read_on_a_qp_without_remote_read_is_an_invalid_request() {
    let mut p = Pair::new();
    let link = Link {
        access: AccessFlags::REMOTE_WRITE,
        ..Link::default()
    };
    let (qa, qb) = p.connect(QpType::Rc, link);
    let sge = [p.a.sge(0, 16)];
    let mut r = wr(1, send_opcode::RDMA_READ, &sge);
    r.rdma = RdmaTarget {
        remote_addr: MEM_BASE,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &r).unwrap();
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::RemInvReqErr);
    assert!(p.b.events().contains(&AsyncEvent::QpReqErr(qb)));
}

#[test]
fn misaligned_atomic_is_an_invalid_request() {
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    let sge = [p.a.sge(0, 8)];
    let mut a = wr(1, send_opcode::ATOMIC_FETCH_AND_ADD, &sge);
    a.atomic = AtomicTarget {
        remote_addr: MEM_BASE + 4,
        compare_add: 1,
        swap: 0,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &a).unwrap();
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::RemInvReqErr);
}

#[test]
fn receive_buffer_too_small_is_loc_len_err_there_and_rem_inv_req_err_here() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    p.b.post_recv(qb, 5, 0x4000, 100);
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 200)]))
        .unwrap();
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::RemInvReqErr);
    assert_eq!(p.b.poll()[0].status, WcStatus::LocLenErr);
}

#[test]
fn receive_into_a_deregistered_region_is_a_remote_operational_error() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let key =
        p.b.e
            .reg_mr(
                p.b.pd,
                MEM_BASE,
                4096,
                MEM_BASE,
                AccessFlags::LOCAL_WRITE.bits(),
            )
            .unwrap()
            .key;
    let sge = [Sge {
        addr: MEM_BASE,
        length: 100,
        lkey: key,
    }];
    p.b.e
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 5,
                sg_list: &sge,
            },
        )
        .unwrap();
    let (mr, _) = p.b.e.mr_by_key(key).unwrap();
    p.b.e.dereg_mr(mr).unwrap();
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 10)]))
        .unwrap();
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::RemOpErr);
    assert_eq!(p.b.poll()[0].status, WcStatus::LocProtErr);
}

#[test]
fn duplicated_atomic_request_is_applied_once() {
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    let sge = [p.a.sge(0x800, 8)];
    let mut add = wr(1, send_opcode::ATOMIC_FETCH_AND_ADD, &sge);
    add.atomic = AtomicTarget {
        remote_addr: MEM_BASE + 0x100,
        compare_add: 5,
        swap: 0,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &add).unwrap();
    p.filter = Box::new(|from_a, v| {
        if from_a && v.atomic_eth().is_some() {
            Fate::Duplicate
        } else {
            Fate::Deliver
        }
    });
    p.run(100);
    assert_eq!(p.b.mem.slice(MEM_BASE + 0x100, 8), &5u64.to_ne_bytes());
    assert_eq!(p.a.poll().len(), 1);
}

#[test]
fn lost_atomic_ack_is_answered_from_the_saved_result() {
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    p.b.mem
        .write(MEM_BASE + 0x100, &10u64.to_ne_bytes())
        .unwrap();
    let sge = [p.a.sge(0x800, 8)];
    let mut add = wr(1, send_opcode::ATOMIC_FETCH_AND_ADD, &sge);
    add.atomic = AtomicTarget {
        remote_addr: MEM_BASE + 0x100,
        compare_add: 5,
        swap: 0,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &add).unwrap();
    let mut dropped = false;
    p.filter = Box::new(move |from_a, v| {
        if !from_a && v.atomic_ack_eth().is_some() && !dropped {
            dropped = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    p.run(100);
    assert_eq!(
        p.b.mem.slice(MEM_BASE + 0x100, 8),
        &15u64.to_ne_bytes(),
        "added once"
    );
    assert_eq!(
        p.a.mem.slice(MEM_BASE + 0x800, 8),
        &10u64.to_ne_bytes(),
        "the original value"
    );
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}

#[test]
fn lost_read_response_is_re_requested() {
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    let data = fill(&mut p.b, 0x2000, 3000, 8);
    let sge = [p.a.sge(0x6000, 3000)];
    let mut r = wr(1, send_opcode::RDMA_READ, &sge);
    r.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x2000,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &r).unwrap();
    let mut n = 0;
    p.filter = Box::new(move |from_a, v| {
        if !from_a && v.opcode().kind() == OpKind::ReadResponse {
            n += 1;
            if n == 2 {
                return Fate::Drop;
            }
        }
        Fate::Deliver
    });
    p.run(100);
    assert!(same(p.a.mem.slice(MEM_BASE + 0x6000, 3000), &data));
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}

/// A READ response after a lost one is an implied sequence NAK: the
/// requester asks again at once, long before its local ACK timeout.
#[test]
fn read_response_gap_is_re_requested_without_waiting_for_the_timeout() {
    let mut p = Pair::new();
    // timeout 20: 4.096 us x 2^20, about 4.3 s.
    let link = Link {
        timeout: 20,
        ..Link::default()
    };
    let (qa, _) = p.connect(QpType::Rc, link);
    let data = fill(&mut p.b, 0x2000, 5000, 8);
    let sge = [p.a.sge(0x6000, 5000)];
    let mut r = wr(1, send_opcode::RDMA_READ, &sge);
    r.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x2000,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &r).unwrap();
    let mut n = 0;
    p.filter = Box::new(move |from_a, v| {
        if !from_a && v.opcode().kind() == OpKind::ReadResponse {
            n += 1;
            if n == 2 {
                return Fate::Drop;
            }
        }
        Fate::Deliver
    });
    let start = p.now;
    p.run(100);
    assert!(same(p.a.mem.slice(MEM_BASE + 0x6000, 5000), &data));
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    assert!(
        p.now - start < 1_000_000_000,
        "recovered in {} ns, not by the 4.3 s timeout",
        p.now - start
    );
}

#[test]
fn first_packet_in_rtr_raises_comm_est() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    // Bring B up again and leave it in RTR.
    p.b.e
        .modify_qp(qb, &attr(QpState::Reset), QpAttrMask::STATE)
        .unwrap();
    let (a, m) = init_step(QpType::Rc);
    p.b.e.modify_qp(qb, &a, m).unwrap();
    let (a, m) = rtr_step(QpType::Rc);
    let mut av = a.ah_attr;
    av.grh.dgid = p.a.gid;
    let dest_qp_num = p.a.e.qp_num(qa).unwrap();
    let a = QpAttr {
        dest_qp_num,
        rq_psn: Link::default().psn_a,
        ah_attr: av,
        ..a
    };
    p.b.e.modify_qp(qb, &a, m).unwrap();
    assert!(p.b.events().is_empty());
    p.b.post_recv(qb, 1, 0x4000, 100);
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 10)]))
        .unwrap();
    p.run(100);
    assert_eq!(p.b.events(), [AsyncEvent::CommEst(qb)]);
    assert_eq!(
        p.a.poll()[0].status,
        WcStatus::Success,
        "a QP in RTR acknowledges"
    );
}

#[test]
fn sqd_drains_in_flight_wrs_then_raises_sq_drained() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    p.b.post_recv(qb, 1, 0x4000, 100);
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 10)]))
        .unwrap();
    p.a.e
        .post_send(qa, &wr(2, send_opcode::SEND, &[p.a.sge(0, 10)]))
        .unwrap();
    // Send the first WR only, then ask for SQD.
    let mut buf = vec![0u8; MAX_PACKET_LEN];
    let t = p.a.e.poll_transmit(0, &p.a.mem, &mut buf).unwrap();
    let a = QpAttr {
        en_sqd_async_notify: 1,
        ..attr(QpState::Sqd)
    };
    p.a.e
        .modify_qp(qa, &a, QpAttrMask::STATE | QpAttrMask::EN_SQD_ASYNC_NOTIFY)
        .unwrap();
    assert_eq!(p.a.e.query_qp(qa).unwrap().0.sq_draining, 1);
    assert!(p.a.events().is_empty());
    for next in [QpState::Rts, QpState::Sqd, QpState::Reset] {
        let r = p.a.e.modify_qp(qa, &attr(next), QpAttrMask::STATE);
        assert_eq!(
            errno(r),
            EINVAL,
            "only ERR may leave a draining SQD, not {next:?}"
        );
    }
    p.b.e
        .handle_packet(0, t.src_gid, t.dst_gid, &buf[..t.len], &mut p.b.mem);
    p.run(100);
    assert_eq!(p.a.events(), [AsyncEvent::SqDrained(qa)]);
    assert_eq!(p.a.e.query_qp(qa).unwrap().0.sq_draining, 0);
    let ids: Vec<_> = p.a.poll().iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [1], "the second WR was not started in SQD");
    p.a.e
        .modify_qp(qa, &attr(QpState::Rts), QpAttrMask::STATE)
        .unwrap();
    p.b.post_recv(qb, 2, 0x5000, 100);
    p.run(100);
    assert_eq!(p.a.poll()[0].wr_id, 2);
}

#[test]
fn unsignaled_wrs_complete_silently_and_sq_sig_all_signals_all() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    for i in 0..4 {
        p.b.post_recv(qb, i, 0x4000, 100);
        let mut w = wr(i, send_opcode::SEND, &[]);
        w.send_flags = if i == 3 { send_flags::SIGNALED } else { 0 };
        p.a.e.post_send(qa, &w).unwrap();
    }
    p.run(100);
    let ids: Vec<_> = p.a.poll().iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [3]);
    assert_eq!(p.b.poll().len(), 4);
}

#[test]
fn completion_events_follow_req_notify_cq() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let cq = p.b.cq;
    p.b.e.req_notify_cq(cq, true).unwrap();
    p.b.post_recv(qb, 1, 0x4000, 100);
    p.b.post_recv(qb, 2, 0x4000, 100);
    p.a.e.post_send(qa, &wr(1, send_opcode::SEND, &[])).unwrap();
    p.run(100);
    assert_eq!(
        p.b.e.poll_comp_event(),
        None,
        "solicited-only ignores an unsolicited SEND"
    );
    let mut s = wr(2, send_opcode::SEND, &[]);
    s.send_flags |= send_flags::SOLICITED;
    p.a.e.post_send(qa, &s).unwrap();
    p.run(100);
    assert_eq!(p.b.e.poll_comp_event(), Some(cq));
    assert_eq!(p.b.e.poll_comp_event(), None, "disarmed after one event");
}

/// Rule (IBA C11-31, C11-32; rxe, rdmavt): a solicited-only request after
/// one for the next completion leaves the CQ armed for the next
/// completion: an unsolicited one still raises the event.
#[test]
fn a_solicited_only_arm_does_not_narrow_a_next_completion_arm() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let cq = p.b.cq;
    p.b.e.req_notify_cq(cq, false).unwrap();
    p.b.e.req_notify_cq(cq, true).unwrap();
    p.b.post_recv(qb, 1, 0x4000, 100);
    p.a.e.post_send(qa, &wr(1, send_opcode::SEND, &[])).unwrap();
    p.run(100);
    assert_eq!(p.b.e.poll_comp_event(), Some(cq), "the unsolicited SEND");
}

/// Rule (as mlx5, whose arming names the consumer index): a completion
/// already in the CQ, not yet polled, that the request would report
/// raises the event at once; one it would not (unsolicited, for a
/// solicited-only request) leaves the CQ armed.
#[test]
fn arming_a_cq_that_holds_a_completion_raises_the_event_at_once() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let cq = p.b.cq;
    p.b.post_recv(qb, 1, 0x4000, 100);
    p.b.post_recv(qb, 2, 0x4000, 100);
    p.a.e.post_send(qa, &wr(1, send_opcode::SEND, &[])).unwrap();
    p.run(100);
    p.b.e.req_notify_cq(cq, true).unwrap();
    assert_eq!(p.b.e.poll_comp_event(), None, "an unsolicited one waits");
    p.b.e.req_notify_cq(cq, false).unwrap();
    assert_eq!(p.b.e.poll_comp_event(), Some(cq), "any one waits");
    let mut s = wr(2, send_opcode::SEND, &[]);
    s.send_flags |= send_flags::SOLICITED;
    p.a.e.post_send(qa, &s).unwrap();
    p.run(100);
    assert_eq!(p.b.e.poll_comp_event(), None, "disarmed by the first event");
    p.b.e.req_notify_cq(cq, true).unwrap();
    assert_eq!(p.b.e.poll_comp_event(), Some(cq), "a solicited one waits");
    assert_eq!(p.b.poll().len(), 2, "both receives");
    p.b.e.req_notify_cq(cq, false).unwrap();
    assert_eq!(p.b.e.poll_comp_event(), None, "polled empty: armed");
}

/// A completion an event reported raises no second event when the CQ is
/// armed again before it is polled (perftest's latency tests with `-e`:
/// take the event, arm, poll once; an event at the arm was taken for the
/// next operation's, and the next post found the send queue full).
#[test]
fn arming_again_before_polling_what_an_event_reported_raises_none() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let cq = p.b.cq;
    p.b.post_recv(qb, 1, 0x4000, 100);
    p.b.post_recv(qb, 2, 0x4000, 100);
    p.b.e.req_notify_cq(cq, false).unwrap();
    p.a.e.post_send(qa, &wr(1, send_opcode::SEND, &[])).unwrap();
    p.run(100);
    assert_eq!(p.b.e.poll_comp_event(), Some(cq), "the completion's event");
    p.b.e.req_notify_cq(cq, false).unwrap();
    assert_eq!(p.b.e.poll_comp_event(), None, "reported already");
    assert_eq!(p.b.poll().len(), 1);
    p.a.e.post_send(qa, &wr(2, send_opcode::SEND, &[])).unwrap();
    p.run(100);
    assert_eq!(
        p.b.e.poll_comp_event(),
        Some(cq),
        "the next completion's event"
    );
}

#[test]
fn fence_waits_for_earlier_reads() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    p.b.post_recv(qb, 1, 0x4000, 100);
    let sge = [p.a.sge(0x6000, 3000)];
    let mut r = wr(1, send_opcode::RDMA_READ, &sge);
    r.rdma = RdmaTarget {
        remote_addr: MEM_BASE,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &r).unwrap();
    let mut s = wr(2, send_opcode::SEND, &[]);
    s.send_flags |= send_flags::FENCE;
    p.a.e.post_send(qa, &s).unwrap();
    let mut responses = 0;
    p.filter = Box::new(move |from_a, v| {
        if !from_a && v.opcode().kind() == OpKind::ReadResponse {
            responses += 1;
        }
        if from_a && v.opcode().kind() == OpKind::Send {
            assert_eq!(
                responses, 3,
                "the fenced SEND left after the READ completed"
            );
        }
        Fate::Deliver
    });
    p.run(100);
    assert_eq!(p.a.poll().len(), 2);
}

/// Rule: only a fast-register MR or a bound memory window can be
/// invalidated (IBTA 10.6.6), and softverbs has neither. A peer's
/// SEND_WITH_INV naming an ordinary MR is an invalid request (NAK: the
/// requester completes with IBV_WC_REM_INV_REQ_ERR, the responder's QP
/// goes to ERR) and the MR keeps working; a LOCAL_INV of one completes
/// with IBV_WC_LOC_QP_OP_ERR (rxe `rxe_invalidate_mr`, `do_local_ops`).
#[test]
fn an_ordinary_mr_cannot_be_invalidated() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let rw = (AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).bits();
    let victim =
        p.b.e
            .reg_mr(p.b.pd, MEM_BASE, 64, MEM_BASE, rw)
            .unwrap()
            .key;
    p.b.post_recv(qb, 1, 0x4000, 100);
    let mut s = wr(1, send_opcode::SEND_WITH_INV, &[]);
    s.imm_data_or_inv_rkey = victim;
    p.a.e.post_send(qa, &s).unwrap();
    p.run(100);
    let tx: Vec<_> = p.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(tx, [(1, WcStatus::RemInvReqErr)]);
    assert_eq!(p.b.e.query_qp(qb).unwrap().0.qp_state, QpState::Err as u32);
    assert!(p.b.e.mr_by_key(victim).is_some(), "the rkey still works");

    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    let local = p.a.e.reg_mr(p.a.pd, MEM_BASE, 64, MEM_BASE, 0).unwrap().key;
    let mut inv = wr(2, send_opcode::LOCAL_INV, &[]);
    inv.imm_data_or_inv_rkey = local;
    p.a.e.post_send(qa, &inv).unwrap();
    p.run(100);
    let tx: Vec<_> =
        p.a.poll()
            .iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect();
    assert_eq!(tx, [(2, WcStatus::LocQpOpErr, WcOpcode::LocalInv)]);
    assert!(p.a.e.mr_by_key(local).is_some());
}

/// A WR that fails here (a bad lkey, a refused LOCAL_INV) while WRs
/// before it still wait for their ACKs waits for them: they complete as
/// they end (success: the peer executed them), then it fails, then the
/// rest flush, as rxe's completer meets an errored WQE at the head of its
/// queue. (It flushed those before it on the wire, an unsignaled one
/// included, and made a FLUSH the first error completion.) On both paths,
/// signaled and unsignaled.
#[test]
fn a_local_error_fails_its_wr_after_those_before_it_complete() {
    for same_host in [false, true] {
        for signaled in [true, false] {
            for invalidate in [false, true] {
                let mut p = Pair::on(same_host);
                let (qa, qb) = p.connect(QpType::Rc, Link::default());
                p.b.post_recv(qb, 7, 0x4000, 100);
                let sge = [p.a.sge(0, 64)];
                let mut send = wr(1, send_opcode::SEND, &sge);
                send.send_flags = if signaled { send_flags::SIGNALED } else { 0 };
                let bad = [Sge {
                    lkey: p.a.key ^ 1,
                    ..sge[0]
                }];
                let mut failing = if invalidate {
                    let mut inv = wr(2, send_opcode::LOCAL_INV, &[]);
                    inv.imm_data_or_inv_rkey = p.a.key;
                    inv
                } else {
                    let mut write = wr(2, send_opcode::RDMA_WRITE, &bad);
                    write.rdma = RdmaTarget {
                        remote_addr: MEM_BASE + 0x8000,
                        rkey: p.b.key,
                    };
                    write
                };
                failing.send_flags = send_flags::SIGNALED;
                let after = wr(3, send_opcode::RDMA_WRITE, &[]);
                for w in [&send, &failing, &after] {
                    p.a.e.post_send(qa, w).unwrap();
                }
                p.run(100);
                let got: Vec<_> = p.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
                let error = if invalidate {
                    WcStatus::LocQpOpErr
                } else {
                    WcStatus::LocProtErr
                };
                let mut want = vec![(2, error), (3, WcStatus::WrFlushErr)];
                if signaled {
                    want.insert(0, (1, WcStatus::Success));
                }
                let case = (same_host, signaled, invalidate);
                assert_eq!(got, want, "same host, signaled, invalidate: {case:?}");
                assert_eq!(p.b.poll()[0].status, WcStatus::Success, "{case:?}");
            }
        }
    }
}

#[test]
fn srq_limit_event_fires_once_when_the_srq_drains_below_it() {
    let mut p = Pair::new();
    let (srq, _) =
        p.b.e
            .create_srq(
                p.b.pd,
                &SrqAttr {
                    max_wr: 8,
                    max_sge: 1,
                    srq_limit: 0,
                },
            )
            .unwrap();
    let qa = create(&mut p.a, QpType::Rc, None);
    let qb = create(&mut p.b, QpType::Rc, Some(srq));
    p.bring_up(QpType::Rc, qa, qb, Link::default());
    for i in 0..4 {
        let sge = [p.b.sge(0x4000, 100)];
        p.b.e
            .post_srq_recv(
                srq,
                &RecvWr {
                    wr_id: i,
                    sg_list: &sge,
                },
            )
            .unwrap();
    }
    p.b.e
        .modify_srq(
            srq,
            &SrqAttr {
                srq_limit: 3,
                ..SrqAttr::default()
            },
            SrqAttrMask::LIMIT,
        )
        .unwrap();
    for i in 0..3 {
        p.a.e.post_send(qa, &wr(i, send_opcode::SEND, &[])).unwrap();
    }
    p.run(100);
    assert_eq!(p.b.events(), [AsyncEvent::SrqLimitReached(srq)]);
    assert_eq!(p.b.e.query_srq(srq).unwrap().srq_limit, 0);
    assert_eq!(p.b.poll().len(), 3);
}

#[test]
fn uc_gap_drops_the_rest_of_the_message_only() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Uc, Link::default());
    p.b.post_recv(qb, 1, 0x4000, 8192);
    p.b.post_recv(qb, 2, 0x8000, 8192);
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 3000)]))
        .unwrap();
    p.a.e
        .post_send(qa, &wr(2, send_opcode::SEND, &[p.a.sge(0, 3000)]))
        .unwrap();
    let mut n = 0;
    p.filter = Box::new(move |_, _| {
        n += 1;
        if n == 2 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    p.run(100);
    let rx: Vec<_> = p.b.poll().iter().map(|w| (w.wr_id, w.byte_len)).collect();
    assert_eq!(
        rx,
        [(1, 3000)],
        "message 1 lost; its receive WR took message 2"
    );
    assert_eq!(p.a.poll().len(), 2);
}

/// Rule (UC retransmits nothing, but a network may deliver a packet
/// twice): a UC packet behind the PSN the responder expects is a
/// duplicate, dropped: a duplicated ONLY packet does not take a second
/// receive WR, and a duplicated FIRST or MIDDLE does not lose its message
/// (a resync at any PSN, as rxe's `check_psn`, did both; conformance.md).
#[test]
fn uc_duplicates_are_dropped_not_executed_again() {
    for len in [64, 3000] {
        let mut p = Pair::new();
        let (qa, qb) = p.connect(QpType::Uc, Link::default());
        for i in 0..4 {
            p.b.post_recv(qb, i, 0x4000 + i * 0x1000, 4096);
        }
        for i in 0..2 {
            p.a.e
                .post_send(qa, &wr(i, send_opcode::SEND, &[p.a.sge(0, len)]))
                .unwrap();
        }
        p.filter = Box::new(|_, _| Fate::Duplicate);
        p.run(100);
        let rx: Vec<_> = p.b.poll().iter().map(|w| (w.wr_id, w.byte_len)).collect();
        assert_eq!(rx, [(0, len), (1, len)], "{len} bytes");
    }
}

#[test]
fn inline_send_carries_the_bytes_given_at_post_time() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    p.b.post_recv(qb, 1, 0x4000, 100);
    let mut s = wr(1, send_opcode::SEND, &[]);
    s.send_flags |= send_flags::INLINE;
    s.inline_data = b"inline hello";
    p.a.e.post_send(qa, &s).unwrap();
    p.run(100);
    assert_eq!(p.b.mem.slice(MEM_BASE + 0x4000, 12), b"inline hello");
}

#[test]
fn max_rd_atomic_limits_reads_in_flight() {
    let mut p = Pair::new();
    let link = Link {
        rd_atomic: 1,
        ..Link::default()
    };
    let (qa, _) = p.connect(QpType::Rc, link);
    for i in 0..3 {
        let sge = [p.a.sge(0x6000 + i * 64, 64)];
        let mut r = wr(i, send_opcode::RDMA_READ, &sge);
        r.rdma = RdmaTarget {
            remote_addr: MEM_BASE,
            rkey: p.b.key,
        };
        p.a.e.post_send(qa, &r).unwrap();
    }
    let (mut requests, mut responses) = (0, 0);
    p.filter = Box::new(move |from_a, v| {
        match v.opcode().kind() {
            OpKind::ReadRequest if from_a => {
                requests += 1;
                assert_eq!(requests, responses + 1, "one READ outstanding at a time");
            }
            OpKind::ReadResponse => responses += 1,
            _ => {}
        }
        Fate::Deliver
    });
    p.run(100);
    assert_eq!(p.a.poll().len(), 3);
}

#[test]
fn a_completion_lost_to_cq_overrun_fails_the_qp_with_qp_fatal() {
    let mut p = Pair::new();
    let (small, _) = p.b.e.create_cq(1, 0).unwrap();
    let qa = create(&mut p.a, QpType::Rc, None);
    let init = QpInitAttr {
        recv_cq: small,
        ..QpInitAttr {
            send_cq: p.b.cq,
            recv_cq: p.b.cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 8,
                max_recv_wr: 8,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: QpType::Rc as u32,
            sq_sig_all: false,
        }
    };
    let qb = p.b.e.create_qp(p.b.pd, &init).unwrap().id;
    p.bring_up(QpType::Rc, qa, qb, Link::default());
    for i in 0..2 {
        p.b.post_recv(qb, i, 0x4000, 100);
        p.a.e.post_send(qa, &wr(i, send_opcode::SEND, &[])).unwrap();
    }
    p.run(100);
    assert_eq!(
        p.b.events(),
        [AsyncEvent::CqErr(small), AsyncEvent::QpFatal(qb)]
    );
    assert_eq!(p.b.e.query_qp(qb).unwrap().0.qp_state, QpState::Err as u32);
}

#[test]
fn write_only_with_imm_after_rnr_is_retried_whole() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let data = fill(&mut p.a, 0, 100, 9);
    let sge = [p.a.sge(0, 100)];
    let mut w = wr(1, send_opcode::RDMA_WRITE_WITH_IMM, &sge);
    w.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x4000,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &w).unwrap();
    p.run(6);
    assert!(p.a.poll().is_empty(), "RNR: no receive WR yet");
    p.b.post_recv(qb, 3, 0, 0);
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    let rx = p.b.poll();
    assert_eq!(
        (rx[0].wr_id, rx[0].opcode, rx[0].byte_len),
        (3, WcOpcode::RecvRdmaWithImm, 100)
    );
    assert!(same(p.b.mem.slice(MEM_BASE + 0x4000, 100), &data));
    assert!(p.b.events().is_empty(), "no invalid-request error");
}

#[test]
fn a_duplicate_read_request_replaces_the_queued_response_stream() {
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    fill(&mut p.b, 0x2000, 3000, 10);
    let sge = [p.a.sge(0x6000, 3000)];
    let mut r = wr(1, send_opcode::RDMA_READ, &sge);
    r.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x2000,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &r).unwrap();
    let responses = std::rc::Rc::new(std::cell::Cell::new(0));
    let seen = responses.clone();
    p.filter = Box::new(move |from_a, v| match v.opcode().kind() {
        OpKind::ReadRequest if from_a => Fate::Duplicate,
        OpKind::ReadResponse => {
            seen.set(seen.get() + 1);
            Fate::Deliver
        }
        _ => Fate::Deliver,
    });
    p.run(100);
    assert_eq!(responses.get(), 3, "one stream of 3 packets, not two");
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}

/// A first SEND, completed, so that the requester has measured its round
/// trip and arms the early go-back from then on (its receive completion
/// stays in B's CQ).
fn measure_the_round_trip(p: &mut Pair, qa: QpId, qb: QpId) {
    p.b.post_recv(qb, 100, 0x4000, 100);
    p.a.e
        .post_send(qa, &wr(100, send_opcode::SEND, &[p.a.sge(0, 10)]))
        .unwrap();
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}

/// Once a round trip is measured, a lost sequence NAK (the responder sends
/// one per gap and drops the requests after it) no longer costs the local
/// ACK timeout, nor a retry: the requester goes back on its own after
/// four round trips, at least `early_go_back::FLOOR` (32 ms). With
/// `retry_cnt` 0 a local ACK timeout here would end the QP in
/// RETRY_EXC_ERR.
#[test]
fn a_lost_sequence_nak_is_recovered_before_the_local_ack_timeout() {
    let mut p = Pair::new();
    let link = Link {
        timeout: 14,
        retry_cnt: 0,
        ..Link::default()
    };
    let (qa, qb) = p.connect(QpType::Rc, link);
    measure_the_round_trip(&mut p, qa, qb);
    p.b.post_recv(qb, 2, 0x5000, 4096);
    let data = fill(&mut p.a, 0, 4096, 5);
    p.a.e
        .post_send(qa, &wr(2, send_opcode::SEND, &[p.a.sge(0, 4096)]))
        .unwrap();
    let (mut requests, mut naks) = (0, 0);
    p.filter = Box::new(move |from_a, v| {
        if from_a {
            requests += 1;
            if requests == 2 {
                return Fate::Drop; // its second packet, once
            }
        } else if v.aeth().is_some_and(|a| a.syndrome.is_nak()) {
            naks += 1;
            if naks == 1 {
                return Fate::Drop; // and the NAK that reports it
            }
        }
        Fate::Deliver
    });
    let before = p.now;
    p.run(100);
    assert_eq!(
        p.a.poll()[0].status,
        WcStatus::Success,
        "went back without a local ACK timeout"
    );
    assert!(p.now - before < ack_timeout(14).unwrap());
    assert_eq!(p.b.poll().len(), 2);
    assert!(same(p.b.mem.slice(MEM_BASE + 0x5000, 4096), &data));
    let r = p.a.e.stats().recovery;
    assert_eq!((r.early_go_backs, r.go_backs_after_timeout), (1, 0));
}

/// A READ whose only response is lost, which nothing reports, is asked
/// for again by the early go-back, spending no retry: with `retry_cnt` 0
/// the local ACK timeout would end the QP in RETRY_EXC_ERR.
#[test]
fn a_read_whose_response_is_lost_is_asked_again_before_the_local_ack_timeout() {
    let mut p = Pair::new();
    let link = Link {
        timeout: 14,
        retry_cnt: 0,
        ..Link::default()
    };
    let (qa, qb) = p.connect(QpType::Rc, link);
    measure_the_round_trip(&mut p, qa, qb);
    let data = fill(&mut p.b, 0x2000, 100, 3);
    let sge = [p.a.sge(0x6000, 100)];
    let mut r = wr(1, send_opcode::RDMA_READ, &sge);
    r.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x2000,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &r).unwrap();
    let mut lost = false;
    p.filter = Box::new(move |from_a, v| {
        if !from_a && v.opcode().kind() == OpKind::ReadResponse && !lost {
            lost = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    let before = p.now;
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    assert!(p.now - before < ack_timeout(14).unwrap());
    assert!(same(p.a.mem.slice(MEM_BASE + 0x6000, 100), &data));
}

/// With the early go-back armed, an RNR wait (491.52 ms here, where the
/// early go-back comes after 32 ms) is still waited out whole: the
/// requester sends nothing again until it is over. (The RNR NAK also
/// disarms the early go-back, which would otherwise take the wait for a
/// loss and shrink the loss window; that is not visible here.)
#[test]
fn an_rnr_wait_is_not_cut_short_by_the_early_go_back() {
    let mut p = Pair::new();
    let link = Link {
        timeout: 14,
        min_rnr_timer: 31,
        ..Link::default()
    };
    let (qa, qb) = p.connect(QpType::Rc, link);
    measure_the_round_trip(&mut p, qa, qb);
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 10)]))
        .unwrap();
    p.exchange(); // the SEND, and the RNR NAK: no receive WR is posted
    let nak_at = p.now;
    p.run(1);
    assert!(
        p.now - nak_at >= rnr_delay(31),
        "sent again {} ns after the RNR NAK",
        p.now - nak_at
    );
    p.b.post_recv(qb, 2, 0x4000, 100);
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}

#[test]
fn duplicated_sequence_naks_cost_no_retry_and_resend_only_what_is_missing() {
    let mut p = Pair::new();
    let link = Link {
        retry_cnt: 0,
        ..Link::default()
    };
    let (qa, qb) = p.connect(QpType::Rc, link);
    let data = fill(&mut p.a, 0, 4096, 11);
    p.b.post_recv(qb, 1, 0x4000, 4096);
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 4096)]))
        .unwrap();
    let log = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let seen = log.clone();
    p.filter = Box::new(move |from_a, v| {
        if from_a {
            seen.borrow_mut().push(v.psn().get());
            // Lose the third packet once.
            return if seen.borrow().len() == 3 {
                Fate::Drop
            } else {
                Fate::Deliver
            };
        }
        // Every NAK arrives twice.
        if v.aeth().is_some_and(|a| a.syndrome.is_nak()) {
            Fate::Duplicate
        } else {
            Fate::Deliver
        }
    });
    p.run(100);
    assert_eq!(
        p.a.poll()[0].status,
        WcStatus::Success,
        "retry_cnt 0 was enough"
    );
    assert!(same(p.b.mem.slice(MEM_BASE + 0x4000, 4096), &data));
    let first = Link::default().psn_a;
    let sent: Vec<u32> = log.borrow().iter().map(|psn| psn - first).collect();
    assert_eq!(
        sent,
        [0, 1, 2, 3, 2, 3],
        "go back to the lost packet, not the message start"
    );
}

#[test]
fn a_long_rnr_wait_uses_no_transport_retries() {
    let mut p = Pair::new();
    // ACK timeout 8 us x 2^1 is far shorter than the RNR delay (code 14,
    // 1.28 ms), and no transport retry is allowed.
    let link = Link {
        timeout: 1,
        retry_cnt: 0,
        min_rnr_timer: 14,
        ..Link::default()
    };
    let (qa, qb) = p.connect(QpType::Rc, link);
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 10)]))
        .unwrap();
    p.run(6);
    p.b.post_recv(qb, 4, 0x4000, 100);
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}

#[test]
fn packets_behind_an_rnr_nak_cost_no_transport_retry() {
    let mut p = Pair::new();
    let link = Link {
        retry_cnt: 0,
        ..Link::default()
    };
    let (qa, qb) = p.connect(QpType::Rc, link);
    for i in 0..3 {
        p.a.e
            .post_send(qa, &wr(i, send_opcode::SEND, &[p.a.sge(0, 10)]))
            .unwrap();
    }
    p.run(10);
    for i in 0..3 {
        p.b.post_recv(qb, i, 0x4000, 100);
    }
    p.run(100);
    let tx: Vec<_> = p.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        tx,
        [
            (0, WcStatus::Success),
            (1, WcStatus::Success),
            (2, WcStatus::Success)
        ]
    );
}

/// Takes every packet `from` has to send.
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

#[test]
fn a_late_rnr_nak_for_an_acknowledged_psn_does_not_stop_the_retransmit_timer() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    for i in 0..2 {
        p.a.e
            .post_send(qa, &wr(i, send_opcode::SEND, &[p.a.sge(0, 10)]))
            .unwrap();
    }
    let sends = drain(&mut p.a, 0);
    assert_eq!(sends.len(), 2);
    deliver(&mut p.b, 0, &sends[0]); // no receive WR: RNR NAK, held back
    let rnr_nak = drain(&mut p.b, 0);
    // The second SEND is lost; a network duplicate of the first arrives
    // once receive WRs are posted and is acknowledged.
    for i in 0..2 {
        p.b.post_recv(qb, i, 0x4000, 100);
    }
    deliver(&mut p.b, 1, &sends[0]);
    for ack in drain(&mut p.b, 1) {
        deliver(&mut p.a, 2, &ack);
    }
    assert_eq!(p.a.poll()[0].wr_id, 0);
    deliver(&mut p.a, 3, &rnr_nak[0]); // stale
    p.now = 3;
    p.run(100);
    let tx: Vec<_> = p.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        tx,
        [(1, WcStatus::Success)],
        "the lost SEND was resent on timeout"
    );
}

/// A late RNR NAK (a copy the network delayed or duplicated) for a PSN
/// already acknowledged, inside a message still in flight, is stale: the
/// requester neither waits nor goes back. Going back sent the
/// acknowledged packet again as the probe after the RNR wait
/// (`rnr_probe.rs`), answered only by a duplicate ACK, and every
/// later packet stayed held until RETRY_EXC_ERR (the simulator).
#[test]
fn a_late_rnr_nak_inside_a_message_in_flight_is_stale() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let sge = [p.a.sge(0, 2048)];
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &sge))
        .unwrap();
    let sends = drain(&mut p.a, 0);
    assert_eq!(sends.len(), 2);
    deliver(&mut p.b, 0, &sends[0]); // no receive WR: RNR NAK
    let rnr_nak = drain(&mut p.b, 0);
    deliver(&mut p.a, 0, &rnr_nak[0]);
    p.b.post_recv(qb, 1, 0x4000, 4096);
    // After the RNR wait the first packet goes alone and is acknowledged;
    // then the second goes.
    let wait_end = p.a.e.poll_timeout().unwrap();
    p.a.e.handle_timeout(wait_end);
    let probe = drain(&mut p.a, wait_end);
    assert_eq!(probe.len(), 1);
    deliver(&mut p.b, wait_end, &probe[0]);
    deliver(&mut p.a, wait_end, &drain(&mut p.b, wait_end)[0]);
    assert_eq!(drain(&mut p.a, wait_end).len(), 1, "the second, lost");
    deliver(&mut p.a, wait_end, &rnr_nak[0]); // stale
    p.now = wait_end;
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    assert_eq!(
        p.a.e.stats().tx_resent,
        3,
        "after the wait the first packet once, the second twice (the local ACK timeout)"
    );
}

/// Rule: progress resets the RNR retry budget, and an RNR NAK that also
/// acknowledges earlier PSNs still uses one retry of the new budget: with
/// rnr_retry 1 the WR fails at the second RNR NAK (IBTA ch. 9, the RNR
/// retry counter; ibv_modify_qp(3) `rnr_retry`).
#[test]
fn an_rnr_nak_that_acknowledges_earlier_psns_still_counts() {
    let mut p = Pair::new();
    let link = Link {
        rnr_retry: 1,
        ..Link::default()
    };
    let (qa, qb) = p.connect(QpType::Rc, link);
    p.b.post_recv(qb, 1, 0x4000, 100);
    for i in 1..=2 {
        p.a.e
            .post_send(qa, &wr(i, send_opcode::SEND, &[p.a.sge(0, 10)]))
            .unwrap();
    }
    let rnr = std::rc::Rc::new(std::cell::Cell::new(0));
    let seen = rnr.clone();
    // Plain ACKs are lost, so the first RNR NAK is what acknowledges WR 1.
    p.filter = Box::new(move |_, v| match v.aeth().map(|a| a.syndrome) {
        Some(Syndrome::Ack { .. }) if v.opcode().kind() == OpKind::Ack => Fate::Drop,
        Some(Syndrome::RnrNak { .. }) => {
            seen.set(seen.get() + 1);
            Fate::Deliver
        }
        _ => Fate::Deliver,
    });
    p.run(100);
    let tx: Vec<_> = p.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(tx, [(1, WcStatus::Success), (2, WcStatus::RnrRetryExcErr)]);
    assert_eq!(rnr.get(), 2, "one RNR retry, then failure");
}

#[test]
fn a_bad_lkey_fails_when_the_wr_executes() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    // Receive side: the WR is accepted, and the SEND that needs it fails:
    // LOC_PROT_ERR there, REM_OP_ERR at the sender.
    let bad = [Sge {
        addr: MEM_BASE,
        length: 64,
        lkey: p.b.key ^ 1,
    }];
    p.b.e
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 3,
                sg_list: &bad,
            },
        )
        .unwrap();
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 8)]))
        .unwrap();
    p.run(100);
    assert_eq!(p.b.poll()[0].status, WcStatus::LocProtErr);
    assert_eq!(p.a.poll()[0].status, WcStatus::RemOpErr);
    // Send side: a gather from a bad lkey completes with LOC_PROT_ERR.
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    let bad = [Sge {
        addr: MEM_BASE,
        length: 8,
        lkey: p.a.key ^ 1,
    }];
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &bad))
        .unwrap();
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::LocProtErr);
}

/// Only the bytes an operation moves must be inside the SGE's MR, as rxe's
/// `copy_data` checks each piece it copies: a 2 KiB receive WR on a 1 KiB
/// MR takes a 100-byte SEND (and fails a 1,500-byte one), and an atomic's
/// 16-byte result SGE on an 8-byte MR gets its 8 bytes.
#[test]
fn only_the_bytes_moved_must_be_inside_the_mr() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let small = |n: &mut Node, offset: u64, len: u64| {
        let mr =
            n.e.reg_mr(n.pd, MEM_BASE + offset, len, MEM_BASE + offset, 1);
        Sge {
            addr: MEM_BASE + offset,
            length: 2 * len as u32,
            lkey: mr.unwrap().key,
        }
    };
    let long = [small(&mut p.b, 0x4000, 1024)];
    for wr_id in [3, 4] {
        let recv = RecvWr {
            wr_id,
            sg_list: &long,
        };
        p.b.e.post_recv(qb, &recv).unwrap();
    }
    p.a.mem.write(MEM_BASE, &[7; 100]).unwrap();
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &[p.a.sge(0, 100)]))
        .unwrap();
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    let got = p.b.poll();
    assert_eq!((got[0].status, got[0].byte_len), (WcStatus::Success, 100));
    assert_eq!(p.b.mem.slice(MEM_BASE + 0x4000, 100), &[7; 100]);
    p.a.e
        .post_send(qa, &wr(2, send_opcode::SEND, &[p.a.sge(0, 1500)]))
        .unwrap();
    p.run(100);
    assert_eq!(p.b.poll()[0].status, WcStatus::LocProtErr);
    assert_eq!(p.a.poll()[0].status, WcStatus::RemOpErr);

    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    let result = [small(&mut p.a, 0x800, 8)];
    let add = add_two(&mut p, &result);
    p.a.e.post_send(qa, &add).unwrap();
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    assert_eq!(p.a.mem.slice(MEM_BASE + 0x800, 8), &40u64.to_ne_bytes());
}

/// `ibv_query_qp` reports the PSNs the requester and responder are at, as
/// rxe (`rxe_qp_to_attr`) and mlx5 do, not those set when the QP was
/// brought up: a 3-packet WRITE and a SEND later, each end has moved 4.
#[test]
fn query_qp_reports_the_psns_each_side_is_at() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let (a0, b0) = (p.a.e.query_qp(qa).unwrap().0, p.b.e.query_qp(qb).unwrap().0);
    assert_eq!(
        (a0.sq_psn, a0.rq_psn, b0.sq_psn, b0.rq_psn),
        (100, 200, 200, 100)
    );
    p.b.post_recv(qb, 9, 0x4000, 64);
    let mut write = wr(1, send_opcode::RDMA_WRITE, &[]);
    let sge = [p.a.sge(0, 3000)];
    write.sg_list = &sge;
    write.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x8000,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &write).unwrap();
    let sge = [p.a.sge(0, 10)];
    p.a.e
        .post_send(qa, &wr(2, send_opcode::SEND, &sge))
        .unwrap();
    p.run(1000);
    assert_eq!(p.a.poll().len(), 2);
    let (a1, b1) = (p.a.e.query_qp(qa).unwrap().0, p.b.e.query_qp(qb).unwrap().0);
    assert_eq!(
        (a1.sq_psn, a1.rq_psn, b1.sq_psn, b1.rq_psn),
        (104, 200, 200, 104)
    );
}
