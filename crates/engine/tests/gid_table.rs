//! The GID table real devices get (`gids_of`: a link-local GID at index 0,
//! the address's GID at index 1, as rxe lists them) and connections over
//! either index: packets arrive with the GIDs of the IP addresses they
//! travelled as, which must match what the QP was given.

mod common;
use common::pair::*;
use common::*;
use softverbs_engine::*;
use std::net::IpAddr;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A node whose port has the real table of `address`.
fn node(address: IpAddr, qpn_base: u32) -> Node {
    let mut cfg = DeviceConfig::loopback(u64::from(qpn_base));
    cfg.ports[0].gids = gids_of(address);
    cfg.qpn_base = qpn_base;
    let mut e = Engine::new(cfg);
    let pd = e.alloc_pd().unwrap();
    let (cq, _) = e.create_cq(256, 0).unwrap();
    let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let key = e
        .reg_mr(pd, MEM_BASE, MEM_LEN as u64, MEM_BASE, all.bits())
        .unwrap()
        .key;
    Node {
        e,
        mem: FlatMemory::new(MEM_BASE, MEM_LEN),
        gid: Gid::from_ip(address),
        pd,
        cq,
        key,
    }
}

/// Brings `qp` of `n` to RTS towards `remote`'s QP `rqpn` at GID `dgid`,
/// sending from GID index `sgid_index`.
fn connect(n: &mut Node, qp: QpId, rqpn: u32, dgid: Gid, sgid_index: u8) {
    let (a, m) = init_step(QpType::Rc);
    n.e.modify_qp(qp, &a, m).unwrap();
    let (mut a, m) = rtr_step(QpType::Rc);
    a.dest_qp_num = rqpn;
    // The peer's first PSN: both sides start from rts_step's sq_psn.
    a.rq_psn = rts_step(QpType::Rc).0.sq_psn;
    a.ah_attr.grh.dgid = dgid;
    a.ah_attr.grh.sgid_index = sgid_index;
    n.e.modify_qp(qp, &a, m).unwrap();
    let (a, m) = rts_step(QpType::Rc);
    n.e.modify_qp(qp, &a, m).unwrap();
}

/// Moves every packet as the UDP transport does: to the address the
/// destination GID travels as, arriving with the GIDs of the sender's and
/// receiver's IP addresses. Returns the packets moved.
fn run(a: &mut Node, b: &mut Node, a_ip: IpAddr, b_ip: IpAddr) -> usize {
    let mut moved = 0;
    for _ in 0..100 {
        let now = step(a, b, a_ip, b_ip) + step(b, a, b_ip, a_ip);
        if now == 0 {
            break;
        }
        moved += now;
    }
    moved
}

/// Every packet `from` has to send, delivered to `to`.
fn step(from: &mut Node, to: &mut Node, from_ip: IpAddr, to_ip: IpAddr) -> usize {
    let mut buf = vec![0u8; MAX_PACKET_LEN];
    let mut moved = 0;
    while let Some(t) = from.e.poll_transmit(0, &from.mem, &mut buf) {
        assert_eq!(t.dst_gid.route(from_ip), to_ip, "routed to the peer");
        let (src, dst) = (Gid::from_ip(from_ip), Gid::from_ip(to_ip));
        to.e.handle_packet(0, src, dst, &buf[..t.len], &mut to.mem);
        moved += 1;
    }
    moved
}

/// One SEND each way between `a_ip` and `b_ip`, A's QP using GID index
/// `ia` and B's `ib`, each addressing the other's GID at the index the
/// other uses (as the pingpongs exchange their GIDs).
fn send_both_ways(a_ip: &str, b_ip: &str, ia: u8, ib: u8) {
    let (a_ip, b_ip) = (ip(a_ip), ip(b_ip));
    let (mut a, mut b) = (node(a_ip, 0x100), node(b_ip, 0x200));
    let (qa, qb) = (
        create(&mut a, QpType::Rc, None),
        create(&mut b, QpType::Rc, None),
    );
    let (na, nb) = (a.e.qp_num(qa).unwrap(), b.e.qp_num(qb).unwrap());
    let ga = a.e.query_gid(1, u32::from(ia)).unwrap();
    let gb = b.e.query_gid(1, u32::from(ib)).unwrap();
    connect(&mut a, qa, nb, gb, ia);
    connect(&mut b, qb, na, ga, ib);
    for (n, qp) in [(&mut a, qa), (&mut b, qb)] {
        let sge = [n.sge(0x8000, 64)];
        let recv = RecvWr {
            wr_id: 7,
            sg_list: &sge,
        };
        n.e.post_recv(qp, &recv).unwrap();
        n.e.post_send(qp, &wr(1, send_opcode::SEND, &[n.sge(0, 32)]))
            .unwrap();
    }
    let moved = run(&mut a, &mut b, a_ip, b_ip);
    for n in [&mut a, &mut b] {
        let wcs = n.poll();
        let ctx = format!("{a_ip} index {ia} <-> {b_ip} index {ib}: {wcs:?}");
        assert_eq!(wcs.len(), 2, "{ctx}");
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{ctx}");
        assert_eq!(n.e.stats().rx_wrong_address, 0, "{ctx}");
    }
    assert!(moved >= 4, "two SENDs and two ACKs");
}

#[test]
fn the_table_is_link_local_then_the_address_then_empty() {
    let e = Engine::new({
        let mut cfg = DeviceConfig::loopback(1);
        cfg.ports[0].gids = gids_of(ip("127.0.0.1"));
        cfg
    });
    let g0 = e.query_gid(1, 0).unwrap();
    assert!(g0.is_link_local(), "{g0}");
    assert_eq!(g0.route(ip("127.0.0.1")), ip("127.0.0.1"));
    assert_eq!(e.query_gid(1, 1).unwrap(), Gid::from_ip(ip("127.0.0.1")));
    assert_eq!(e.query_gid(1, 2).unwrap(), Gid::ZERO);
}

#[test]
fn rc_connects_over_either_index_on_loopback() {
    for (ia, ib) in [(0, 0), (1, 1), (0, 1), (1, 0)] {
        send_both_ways("127.0.0.1", "127.0.0.1", ia, ib);
    }
}

#[test]
fn rc_connects_over_either_index_between_hosts() {
    for (ia, ib) in [(0, 0), (1, 1), (0, 1)] {
        send_both_ways("10.231.0.1", "10.231.0.2", ia, ib);
        send_both_ways("fd00:e7::1", "fd00:e7::2", ia, ib);
    }
}

/// A connection over link-local GIDs still takes packets only from its
/// peer's address: another host's address is not the peer's GID 0.
#[test]
fn a_link_local_connection_drops_packets_from_other_addresses() {
    let (a_ip, b_ip) = (ip("10.231.0.1"), ip("10.231.0.2"));
    let (mut a, mut b) = (node(a_ip, 0x100), node(b_ip, 0x200));
    let (qa, qb) = (
        create(&mut a, QpType::Rc, None),
        create(&mut b, QpType::Rc, None),
    );
    let (na, nb) = (a.e.qp_num(qa).unwrap(), b.e.qp_num(qb).unwrap());
    connect(&mut a, qa, nb, Gid::link_local_of(b_ip), 0);
    connect(&mut b, qb, na, Gid::link_local_of(a_ip), 0);
    let sge = [b.sge(0x8000, 64)];
    b.e.post_recv(
        qb,
        &RecvWr {
            wr_id: 7,
            sg_list: &sge,
        },
    )
    .unwrap();
    a.e.post_send(qa, &wr(1, send_opcode::SEND, &[a.sge(0, 32)]))
        .unwrap();
    let mut buf = vec![0u8; MAX_PACKET_LEN];
    let t = a.e.poll_transmit(0, &a.mem, &mut buf).unwrap();
    let stranger = Gid::from_ip(ip("10.231.0.3"));
    let dst = Gid::from_ip(b_ip);
    b.e.handle_packet(0, stranger, dst, &buf[..t.len], &mut b.mem);
    assert_eq!(b.e.stats().rx_wrong_address, 1);
    assert!(b.poll().is_empty());
    b.e.handle_packet(0, Gid::from_ip(a_ip), dst, &buf[..t.len], &mut b.mem);
    assert_eq!(b.poll().len(), 1, "from the peer's address");
}
