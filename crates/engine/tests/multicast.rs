//! UD multicast: `ibv_attach_mcast`/`ibv_detach_mcast`, delivery of a
//! datagram sent to a group to every attached QP, and the rules of
//! attaching (seed 002: `ibv_destroy_qp` fails while attached).

mod common;
use common::pair::*;
use common::{av, errno};
use softverbs_engine::*;

const EINVAL: i32 = 22;
const EBUSY: i32 = 16;

fn group() -> Gid {
    Gid::from_ip("239.7.7.7".parse().unwrap())
}

fn post_recv(n: &mut Node, qp: QpId, wr_id: u64, offset: u64) {
    let sge = [n.sge(offset, 256)];
    n.e.post_recv(
        qp,
        &RecvWr {
            wr_id,
            sg_list: &sge,
        },
    )
    .unwrap();
}

/// Sends `payload` from `qa` on node a to the group.
fn send_to_group(p: &mut Pair, qa: QpId, payload: &[u8]) {
    let av = AhAttr {
        grh: GlobalRoute {
            dgid: group(),
            ..av().grh
        },
        ..av()
    };
    let ah = p.a.e.create_ah(p.a.pd, &av).unwrap();
    let mut w = wr(1, send_opcode::SEND, &[]);
    w.send_flags |= send_flags::INLINE;
    w.inline_data = payload;
    w.ud = Some(UdTarget {
        ah,
        remote_qpn: MULTICAST_QPN,
        remote_qkey: 0x1111_1111,
    });
    p.a.e.post_send(qa, &w).unwrap();
    p.run(100);
}

/// Rule: a datagram sent to a group reaches every QP attached to it, with
/// the sender's QPN and a GRH whose destination is the group; a QP that
/// is not attached gets nothing.
#[test]
fn a_datagram_to_a_group_reaches_every_attached_qp() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Ud, Link::default());
    // Two more UD QPs on b (each brought up beside a QP of a's that is
    // not used).
    let (_, qc) = p.connect(QpType::Ud, Link::default());
    let (_, qd) = p.connect(QpType::Ud, Link::default());
    p.b.e.attach_mcast(qb, group()).unwrap();
    p.b.e.attach_mcast(qc, group()).unwrap();
    assert_eq!(p.b.e.poll_membership(), Some(Membership::Joined(group())));
    assert_eq!(p.b.e.poll_membership(), None, "one join per group");
    for (i, q) in [qb, qc, qd].into_iter().enumerate() {
        post_recv(&mut p.b, q, 10 + i as u64, 0x1000 * (i as u64 + 1));
    }
    send_to_group(&mut p, qa, b"to the group");
    let rx: Vec<_> =
        p.b.poll()
            .iter()
            .map(|w| (w.wr_id, w.status, w.byte_len, w.src_qp))
            .collect();
    let sender = p.a.e.qp_num(qa).unwrap();
    let len = GRH_LEN as u32 + 12;
    assert_eq!(
        rx,
        [
            (10, WcStatus::Success, len, sender),
            (11, WcStatus::Success, len, sender)
        ]
    );
    // RoCEv2 over IPv4 puts the IPv4 header in the GRH's last 20 bytes.
    let grh = p.b.mem.slice(MEM_BASE + 0x1000, GRH_LEN).to_vec();
    assert_eq!(
        &grh[36..40],
        &[239, 7, 7, 7],
        "IPv4 destination is the group"
    );
    assert_eq!(
        p.b.mem.slice(MEM_BASE + 0x1000 + GRH_LEN as u64, 12),
        b"to the group"
    );
}

/// Rules: only UD QPs attach, only to multicast GIDs; attaching twice is
/// a no-op; detaching what is not attached is EINVAL; an attached QP
/// cannot be destroyed (EBUSY) until it is detached; the last member
/// leaving is reported.
#[test]
fn attach_rules() {
    let mut p = Pair::new();
    let (_, qb) = p.connect(QpType::Ud, Link::default());
    let rc = create(&mut p.b, QpType::Rc, None);
    assert_eq!(errno(p.b.e.attach_mcast(rc, group())), EINVAL, "RC");
    let unicast = Gid::from_ip("10.1.2.3".parse().unwrap());
    assert_eq!(
        errno(p.b.e.attach_mcast(qb, unicast)),
        EINVAL,
        "unicast GID"
    );
    assert_eq!(
        errno(p.b.e.detach_mcast(qb, group())),
        EINVAL,
        "not attached"
    );
    p.b.e.attach_mcast(qb, group()).unwrap();
    p.b.e.attach_mcast(qb, group()).unwrap();
    assert_eq!(errno(p.b.e.destroy_qp(qb)), EBUSY);
    p.b.e.detach_mcast(qb, group()).unwrap();
    assert_eq!(p.b.e.poll_membership(), Some(Membership::Joined(group())));
    assert_eq!(p.b.e.poll_membership(), Some(Membership::Left(group())));
    p.b.e.destroy_qp(qb).unwrap();
    let attr = p.b.e.query_device();
    assert_eq!(
        (
            attr.max_mcast_grp,
            attr.max_mcast_qp_attach,
            attr.max_total_mcast_qp_attach
        ),
        (8192, 56, 0x70000),
        "rxe's limits"
    );
}
