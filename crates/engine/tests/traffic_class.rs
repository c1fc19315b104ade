//! The traffic class each packet leaves with (`Transmit::traffic_class`,
//! the IP header's TOS or IPv6 traffic class): its address vector's GRH
//! `traffic_class`, as rxe and the NICs send it.

mod common;
use common::av;
use common::pair::*;
use softverbs_engine::*;

/// Each end of an RC connection sends with its own path's class: a's
/// WRITE and READ request with a's, b's ACK and READ response with b's.
#[test]
fn rc_packets_carry_the_class_of_their_senders_path() {
    let mut p = Pair::new();
    let qa = create(&mut p.a, QpType::Rc, None);
    let qb = create(&mut p.b, QpType::Rc, None);
    let link = |traffic_class| Link {
        traffic_class,
        ..Link::default()
    };
    p.bring_up_each(QpType::Rc, (qa, link(0x60)), (qb, link(0x28)));
    for (id, opcode) in [(1, send_opcode::RDMA_WRITE), (2, send_opcode::RDMA_READ)] {
        let sge = [p.a.sge(0, 4096)];
        let mut w = wr(id, opcode, &sge);
        w.rdma = RdmaTarget {
            remote_addr: MEM_BASE + 0x8_0000,
            rkey: p.b.key,
        };
        p.a.e.post_send(qa, &w).unwrap();
    }
    p.run(1_000);
    assert!(p.a.poll().iter().all(|wc| wc.status == WcStatus::Success));
    assert!(p.classes.iter().any(|&(from_a, _)| from_a));
    assert!(p.classes.iter().any(|&(from_a, _)| !from_a));
    for &(from_a, class) in &p.classes {
        assert_eq!(class, if from_a { 0x60 } else { 0x28 });
    }
}

/// Sends one UD datagram from a to b through an address handle of
/// traffic class `class`; the GRH b's receive got.
fn ud_datagram(p: &mut Pair, class: u8) -> Vec<u8> {
    let (qa, qb) = p.connect(QpType::Ud, Link::default());
    p.b.post_recv(qb, 1, 0x10000, 1024);
    let av = AhAttr {
        grh: GlobalRoute {
            dgid: p.b.gid,
            traffic_class: class,
            ..av().grh
        },
        ..av()
    };
    let ud = UdTarget {
        ah: p.a.e.create_ah(p.a.pd, &av).unwrap(),
        remote_qpn: p.b.e.qp_num(qb).unwrap(),
        remote_qkey: 0x8000_0000,
    };
    let sge = [p.a.sge(0, 64)];
    let s = SendWr {
        ud: Some(ud),
        ..wr(1, send_opcode::SEND, &sge)
    };
    p.a.e.post_send(qa, &s).unwrap();
    p.run(100);
    assert_eq!(p.b.poll().len(), 1);
    p.b.mem.slice(MEM_BASE + 0x10000, 40).to_vec()
}

/// A UD datagram carries the class of its WR's address handle, and the
/// receive's GRH (20 zero bytes, then the IPv4 header) shows it as the
/// TOS, as rxe copies the IP header there: `ibv_init_ah_from_wc` then
/// answers with the same class.
#[test]
fn a_ud_datagram_carries_its_address_handles_class() {
    let mut p = Pair::new();
    let grh = ud_datagram(&mut p, 0xb8);
    assert_eq!(p.classes, [(true, 0xb8)]);
    assert_eq!((grh[20], grh[21]), (0x45, 0xb8));
}

/// On the same-host path too, the GRH carries the class of the sender's
/// address handle.
#[test]
fn a_same_host_ud_receive_shows_the_senders_class() {
    let mut p = Pair::same_host();
    let grh = ud_datagram(&mut p, 0x48);
    assert!(p.classes.is_empty(), "no packets");
    assert_eq!((grh[20], grh[21]), (0x45, 0x48));
}
