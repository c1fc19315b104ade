//! Two drivers exchange RC and UD traffic over real UDP sockets through a
//! host daemon, as two processes sharing softverbs0 would: each holds its
//! own slot, and the daemon passes every packet arriving at UDP 4791 to
//! the one owning its destination QP number. Each test runs its own daemon
//! (on a thread) on its own loopback address, so tests do not meet each
//! other or a real daemon.

mod common;
use common::*;
use softverbs_engine::*;
use softverbs_transport::*;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A daemon of the test's own, on a loopback address of its own.
struct Host {
    ip: Ipv4Addr,
    daemon: DaemonAddress,
    thread: std::thread::JoinHandle<std::io::Result<daemon::DaemonStats>>,
}

fn host() -> Host {
    let ip = Ipv4Addr::new(
        127,
        fastrand::u8(1..255),
        fastrand::u8(..),
        fastrand::u8(1..255),
    );
    let config = daemon::DaemonConfig {
        socket: format!("softverbs-test-{}-{ip}", std::process::id()),
        idle_exit: Duration::from_millis(200),
    };
    let (daemon, thread) = daemon::server::start_thread(config).unwrap();
    Host { ip, daemon, thread }
}

impl Host {
    fn gid(&self) -> Gid {
        Gid::from_ipv4(self.ip)
    }
}

/// Once every context of `h` is gone: its daemon passed no packet on and
/// found none it could not route, so all went straight to their
/// contexts' steered sockets.
fn every_packet_went_straight(h: Host) {
    let stats = h.thread.join().unwrap().unwrap();
    assert_eq!((stats.delivered, stats.unrouted), (0, 0), "{stats:?}");
}

fn side(host: &Host) -> Side {
    let (tx, events) = mpsc::channel();
    let mut device = DeviceConfig::loopback(fastrand::u64(..));
    device.ports[0].gids = vec![host.gid()];
    let cfg = DriverConfig {
        device,
        ip: IpAddr::V4(host.ip),
        daemon: host.daemon.clone(),
    };
    let notify = Arc::new(Events(parking_lot::Mutex::new(tx)));
    let d = Driver::start(cfg, FlatMemory::new(BASE, LEN), notify).unwrap();
    let (pd, cq, key) = d.with(|e, _| {
        let pd = e.alloc_pd().unwrap();
        let (cq, _) = e.create_cq(1024, 0).unwrap();
        let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        let key = e
            .reg_mr(pd, BASE, LEN as u64, BASE, all.bits())
            .unwrap()
            .key;
        (pd, cq, key)
    });
    Side {
        d,
        gid: host.gid(),
        events,
        pd,
        cq,
        key,
    }
}

fn connect(s: &Side, qp: QpId, ty: QpType, remote: u32) {
    let av = AhAttr {
        grh: GlobalRoute {
            dgid: s.gid,
            hop_limit: 64,
            ..GlobalRoute::default()
        },
        is_global: true,
        port_num: 1,
        ..AhAttr::default()
    };
    let steps: [(QpAttr, QpAttrMask); 3] = [
        (
            QpAttr {
                qp_state: QpState::Init as u32,
                port_num: 1,
                qkey: 0x11,
                qp_access_flags: 0xe,
                ..QpAttr::default()
            },
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | if ty == QpType::Ud {
                    QpAttrMask::QKEY
                } else {
                    QpAttrMask::ACCESS_FLAGS
                },
        ),
        (
            QpAttr {
                qp_state: QpState::Rtr as u32,
                path_mtu: Mtu::Mtu4096 as u32,
                dest_qp_num: remote,
                rq_psn: 7,
                max_dest_rd_atomic: 4,
                min_rnr_timer: 1,
                ah_attr: av,
                ..QpAttr::default()
            },
            if ty == QpType::Ud {
                QpAttrMask::STATE
            } else {
                QpAttrMask::STATE
                    | QpAttrMask::AV
                    | QpAttrMask::PATH_MTU
                    | QpAttrMask::DEST_QPN
                    | QpAttrMask::RQ_PSN
                    | QpAttrMask::MAX_DEST_RD_ATOMIC
                    | QpAttrMask::MIN_RNR_TIMER
            },
        ),
        (
            QpAttr {
                qp_state: QpState::Rts as u32,
                sq_psn: 7,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                max_rd_atomic: 4,
                ..QpAttr::default()
            },
            if ty == QpType::Ud {
                QpAttrMask::STATE | QpAttrMask::SQ_PSN
            } else {
                QpAttrMask::STATE
                    | QpAttrMask::SQ_PSN
                    | QpAttrMask::TIMEOUT
                    | QpAttrMask::RETRY_CNT
                    | QpAttrMask::RNR_RETRY
                    | QpAttrMask::MAX_QP_RD_ATOMIC
            },
        ),
    ];
    for (a, m) in steps {
        s.d.with(|e, _| e.modify_qp(qp, &a, m)).unwrap();
    }
}

/// Posts one 2000-byte receive WR (wr_id 5) at BASE on UD QP `qp` of `s`.
fn post_ud_recv(s: &Side, qp: QpId) {
    let recv = [Sge {
        addr: BASE,
        length: 2000,
        lkey: s.key,
    }];
    s.d.with(|e, _| {
        e.post_recv(
            qp,
            &RecvWr {
                wr_id: 5,
                sg_list: &recv,
            },
        )
    })
    .unwrap();
}

/// Sends `bytes` inline from UD QP `qp` of `s` to `dgid`, QP `remote_qpn`.
fn send_ud(s: &Side, qp: QpId, dgid: Gid, remote_qpn: u32, bytes: &[u8]) {
    let av = AhAttr {
        grh: GlobalRoute {
            dgid,
            ..GlobalRoute::default()
        },
        is_global: true,
        port_num: 1,
        ..AhAttr::default()
    };
    let ah = s.d.with(|e, _| e.create_ah(s.pd, &av)).unwrap();
    let w = SendWr {
        wr_id: 1,
        opcode: send_opcode::SEND,
        send_flags: send_flags::INLINE,
        sg_list: &[],
        inline_data: bytes,
        imm_data_or_inv_rkey: 0,
        rdma: RdmaTarget::default(),
        atomic: AtomicTarget::default(),
        ud: Some(UdTarget {
            ah,
            remote_qpn,
            remote_qkey: 0x11,
        }),
    };
    s.d.with(|e, _| e.post_send(qp, &w)).unwrap();
}

#[test]
fn rc_send_write_and_read_between_two_drivers() {
    let h = host();
    let (a, b) = (side(&h), side(&h));
    assert_ne!(a.d.slots(), b.d.slots(), "each context claims its own slot");
    let (qa, na) = create_qp(&a, QpType::Rc);
    let (qb, nb) = create_qp(&b, QpType::Rc);
    connect(&a, qa, QpType::Rc, nb);
    connect(&b, qb, QpType::Rc, na);
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 + 3) as u8).collect();
    a.d.with(|_, m| m.write(BASE, &data)).unwrap();
    let sge = |s: &Side, off: u64, len: u32| Sge {
        addr: BASE + off,
        length: len,
        lkey: s.key,
    };
    let recv = [sge(&b, 0, data.len() as u32)];
    b.d.with(|e, _| {
        e.post_recv(
            qb,
            &RecvWr {
                wr_id: 1,
                sg_list: &recv,
            },
        )
    })
    .unwrap();
    let send = [sge(&a, 0, data.len() as u32)];
    let wr = |id, opcode, sg: &'static [Sge]| SendWr {
        wr_id: id,
        opcode,
        send_flags: 0,
        sg_list: sg,
        inline_data: &[],
        imm_data_or_inv_rkey: 0,
        rdma: RdmaTarget {
            remote_addr: BASE + (2 << 20),
            rkey: b.key,
        },
        atomic: AtomicTarget::default(),
        ud: None,
    };
    let send: &'static [Sge] = Box::leak(Box::new(send));
    a.d.with(|e, _| e.post_send(qa, &wr(10, send_opcode::SEND, send)))
        .unwrap();
    a.d.with(|e, _| e.post_send(qa, &wr(11, send_opcode::RDMA_WRITE, send)))
        .unwrap();
    let back: &'static [Sge] = Box::leak(Box::new([sge(&a, 3 << 20, 1000)]));
    a.d.with(|e, _| e.post_send(qa, &wr(12, send_opcode::RDMA_READ, back)))
        .unwrap();
    let rx = wait_completions(&b, 1);
    assert_eq!(
        (rx[0].status, rx[0].byte_len),
        (WcStatus::Success, data.len() as u32)
    );
    let tx = wait_completions(&a, 3);
    let ids: Vec<_> = tx.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        ids,
        [
            (10, WcStatus::Success),
            (11, WcStatus::Success),
            (12, WcStatus::Success)
        ]
    );
    b.d.with(|_, m| {
        assert!(m.slice(BASE, data.len()) == &data[..]);
        assert!(m.slice(BASE + (2 << 20), data.len()) == &data[..]);
    });
    a.d.with(|_, m| assert!(m.slice(BASE + (3 << 20), 1000) == &data[..1000]));
    assert_eq!(a.d.io_stats().rx_bad_icrc + b.d.io_stats().rx_bad_icrc, 0);
}

/// RC QPs on `a` and `b`, connected to each other.
fn rc_pair(a: &Side, b: &Side) -> (QpId, QpId) {
    let (qa, na) = create_qp(a, QpType::Rc);
    let (qb, nb) = create_qp(b, QpType::Rc);
    connect(a, qa, QpType::Rc, nb);
    connect(b, qb, QpType::Rc, na);
    (qa, qb)
}

/// RDMA WRITEs `len` bytes from `a`'s BASE to `b`'s BASE + 1 MiB over
/// `qa`; the completion.
fn write_and_wait(a: &Side, qa: QpId, b: &Side, len: u32) -> WorkCompletion {
    let sge = [Sge {
        addr: BASE,
        length: len,
        lkey: a.key,
    }];
    let w = signaled_rdma(send_opcode::RDMA_WRITE, &sge, b);
    a.d.with(|e, _| e.post_send(qa, &w)).unwrap();
    wait_completions(a, 1).remove(0)
}

/// A signaled SEND of `sg_list` on an RC QP.
fn signaled_send(wr_id: u64, sg_list: &[Sge]) -> SendWr<'_> {
    SendWr {
        wr_id,
        opcode: send_opcode::SEND,
        send_flags: send_flags::SIGNALED,
        sg_list,
        inline_data: &[],
        imm_data_or_inv_rkey: 0,
        rdma: RdmaTarget::default(),
        atomic: AtomicTarget::default(),
        ud: None,
    }
}

/// A signaled RDMA WR of `opcode` (WRITE or READ) from or into `sg_list`,
/// to or from `b`'s BASE + 1 MiB.
fn signaled_rdma<'a>(opcode: u32, sg_list: &'a [Sge], b: &Side) -> SendWr<'a> {
    SendWr {
        wr_id: 1,
        opcode,
        send_flags: send_flags::SIGNALED,
        sg_list,
        inline_data: &[],
        imm_data_or_inv_rkey: 0,
        rdma: RdmaTarget {
            remote_addr: BASE + (1 << 20),
            rkey: b.key,
        },
        atomic: AtomicTarget::default(),
        ud: None,
    }
}

/// With the daemon's steering (SO_REUSEPORT and a BPF program by QP
/// block), every unicast packet goes straight to its context's own socket:
/// the daemon passes none on.
#[test]
fn packets_go_straight_to_their_context() {
    let h = host();
    {
        let (a, b) = (side(&h), side(&h));
        let (qa, _) = rc_pair(&a, &b);
        let data = vec![5u8; 100_000];
        a.d.with(|_, m| m.slice_mut(BASE, data.len()).copy_from_slice(&data));
        let done = write_and_wait(&a, qa, &b, data.len() as u32);
        assert_eq!(done.status, WcStatus::Success);
        b.d.with(|_, m| assert!(m.slice(BASE + (1 << 20), data.len()) == &data[..]));
    }
    every_packet_went_straight(h);
}

/// A context that goes away frees its member of the steering group; the
/// next context gets it, and packets still go straight to the right one
/// (the group never shrinks, so no member changes index).
#[test]
fn a_member_freed_by_a_dead_context_serves_the_next_one() {
    let h = host();
    {
        let a = side(&h);
        drop(side(&h));
        let c = side(&h);
        let (qa, _) = rc_pair(&a, &c);
        assert_eq!(write_and_wait(&a, qa, &c, 5000).status, WcStatus::Success);
    }
    every_packet_went_straight(h);
}

#[test]
fn ud_datagrams_reach_the_qp_of_another_slot() {
    let h = host();
    let (a, b) = (side(&h), side(&h));
    let (qa, _) = create_qp(&a, QpType::Ud);
    let (qb, nb) = create_qp(&b, QpType::Ud);
    connect(&a, qa, QpType::Ud, 0);
    connect(&b, qb, QpType::Ud, 0);
    post_ud_recv(&b, qb);
    send_ud(&a, qa, b.gid, nb, b"datagram");
    let rx = wait_completions(&b, 1);
    assert_eq!(
        (rx[0].byte_len, rx[0].wc_flags & wc_flags::GRH),
        (48, wc_flags::GRH)
    );
    b.d.with(|_, m| assert_eq!(m.slice(BASE + 40, 8), b"datagram"));
}

#[test]
fn more_qps_than_one_slot_holds_claim_another_slot() {
    let h = host();
    let s = side(&h);
    let before = s.d.slots().len();
    let mut made = 0;
    for _ in 0..4200 {
        let init = QpInitAttr {
            send_cq: s.cq,
            recv_cq: s.cq,
            srq: None,
            cap: QpCap::default(),
            qp_type: QpType::Rc as u32,
            sq_sig_all: false,
        };
        let r = s.d.with(|e, _| e.create_qp(s.pd, &init));
        match r {
            Ok(_) => made += 1,
            Err(err) if err.reason == QPN_EXHAUSTED => s.d.add_slot().unwrap(),
            Err(err) => panic!("{err}"),
        }
    }
    assert!(made >= 4096);
    assert_eq!(s.d.slots().len(), before + 1);
}

/// UD multicast: a datagram sent to a group reaches the QP of another
/// context attached to it, which can then detach and be destroyed.
#[test]
fn multicast_reaches_the_attached_qp_of_another_context() {
    let h = host();
    let (a, b) = (side(&h), side(&h));
    let (qa, qb) = ud_pair(&a, &b);
    let group = Gid::from_ip("239.9.9.9".parse().unwrap());
    b.d.attach_mcast(qb, group).unwrap().unwrap();
    post_ud_recv(&b, qb);
    send_ud(&a, qa, group, MULTICAST_QPN, b"to all");
    let rx = wait_completions(&b, 1);
    assert_eq!((rx[0].wr_id, rx[0].byte_len), (5, 46));
    b.d.with(|_, m| assert_eq!(m.slice(BASE + 40, 6), b"to all"));
    b.d.detach_mcast(qb, group).unwrap().unwrap();
    b.d.with(|e, _| e.destroy_qp(qb)).unwrap();
}

/// Each context attached to a group receives its own copy of a datagram
/// sent to it, on a socket of its own: the daemon passes nothing on. One
/// that detached receives nothing more, while the other still does.
#[test]
fn every_context_in_a_group_gets_the_datagram() {
    let h = host();
    {
        let (a, b, c) = (side(&h), side(&h), side(&h));
        let (qa, qb) = ud_pair(&a, &b);
        let (qc, _) = create_qp(&c, QpType::Ud);
        connect(&c, qc, QpType::Ud, 0);
        let group = Gid::from_ip("239.9.9.10".parse().unwrap());
        for (s, q) in [(&b, qb), (&c, qc)] {
            s.d.attach_mcast(q, group).unwrap().unwrap();
            post_ud_recv(s, q);
        }
        send_ud(&a, qa, group, MULTICAST_QPN, b"to both");
        for s in [&b, &c] {
            let rx = wait_completions(s, 1);
            assert_eq!(rx[0].byte_len, 47);
            s.d.with(|_, m| assert_eq!(m.slice(BASE + 40, 7), b"to both"));
            assert_eq!(s.d.io_stats().rx, 1, "one copy each");
        }
        c.d.detach_mcast(qc, group).unwrap().unwrap();
        post_ud_recv(&b, qb);
        post_ud_recv(&c, qc);
        send_ud(&a, qa, group, MULTICAST_QPN, b"to b only");
        let rx = wait_completions(&b, 1);
        assert_eq!(rx[0].byte_len, 49);
        // c's group socket is closed: nothing of the group can reach it (a
        // check that could only pass late, never fail wrongly).
        assert_eq!(c.d.io_stats().rx, 1, "c received after it detached");
    }
    every_packet_went_straight(h);
}

/// A UD QP on each of `a` and `b`, ready to send and receive.
fn ud_pair(a: &Side, b: &Side) -> (QpId, QpId) {
    let (qa, _) = create_qp(a, QpType::Ud);
    let (qb, _) = create_qp(b, QpType::Ud);
    connect(a, qa, QpType::Ud, 0);
    connect(b, qb, QpType::Ud, 0);
    (qa, qb)
}

/// Two MGIDs that travel as one IPv4 group (an IPv6 MGID on an IPv4
/// device goes as a 239/8 group derived from it, beside which that
/// group's own MGID is attached): detaching one leaves the context in the
/// group for the other.
#[test]
fn detaching_one_of_two_mgids_of_one_group_keeps_the_other_receiving() {
    let h = host();
    let (a, b) = (side(&h), side(&h));
    let (qa, qb) = ud_pair(&a, &b);
    let v6 = Gid::from_ip("ff0e::5:1".parse().unwrap());
    let v4 = Gid::from_ip(v6.route(IpAddr::V4(h.ip)));
    assert!(v4.to_ip().is_ipv4(), "{v4:?}");
    b.d.attach_mcast(qb, v6).unwrap().unwrap();
    b.d.attach_mcast(qb, v4).unwrap().unwrap();
    b.d.detach_mcast(qb, v6).unwrap().unwrap();
    post_ud_recv(&b, qb);
    send_ud(&a, qa, v4, MULTICAST_QPN, b"still in");
    let rx = wait_completions(&b, 1);
    assert_eq!(rx[0].byte_len, 48);
    b.d.with(|_, m| assert_eq!(m.slice(BASE + 40, 8), b"still in"));
    b.d.detach_mcast(qb, v4).unwrap().unwrap();
}

/// A thread spinning in `ibv_poll_cq` is lent the socket, and a poll that
/// hands it a receive completion keeps the ACK for its next verb, to
/// leave with its reply. When it makes no verb after the poll, the
/// progress thread sends the ACK: the sender's SEND completes without
/// being sent again. Whether the last poll keeps the ACK depends on the
/// scheduler (a spinner preempted for a tick gets the socket taken back),
/// so rounds are tried until one does; every round must see its SENDs
/// acknowledged.
#[test]
fn an_ack_kept_for_the_next_verb_leaves_when_none_comes() {
    let h = host();
    let (a, b) = (side(&h), side(&h));
    let (qa, qb) = rc_pair(&a, &b);
    for _ in 0..4 {
        post_small_recv(&b.d, b.key, qb);
    }
    let kept = (0..50).any(|_| {
        let kept = spin_until_lent_then_stop(&a, qa, (&b.d, b.cq, b.key), qb, |_, _| {});
        post_small_recv(&b.d, b.key, qb); // for the next round
        kept
    });
    assert!(kept, "no round's last poll kept its ACK");
    assert_eq!(
        a.d.with(|e, _| e.stats().tx_resent),
        0,
        "every SEND acknowledged without a resend"
    );
}

/// Posts a 64-byte receive at BASE (memory key `key`) on QP `qp` of `d`.
fn post_small_recv(d: &Driver<FlatMemory>, key: u32, qp: QpId) {
    let recv = [Sge {
        addr: BASE,
        length: 64,
        lkey: key,
    }];
    let r = RecvWr {
        wr_id: 0,
        sg_list: &recv,
    };
    d.post_recv_with(|e, _| e.post_recv(qp, &r)).unwrap();
}

/// A QP destroyed right after a poll kept its ACK sends the ACK first, as
/// a NIC would have sent it on receipt: the peer's SEND completes instead
/// of ending in RETRY_EXC_ERR.
#[test]
fn a_qp_destroyed_after_its_ack_was_kept_sends_it_first() {
    let h = host();
    let (a, b) = (side(&h), side(&h));
    let kept = (0..50).any(|_| {
        let (qa, qb) = rc_pair(&a, &b);
        for _ in 0..4 {
            post_small_recv(&b.d, b.key, qb);
        }
        spin_until_lent_then_stop(&a, qa, (&b.d, b.cq, b.key), qb, |d, qb| {
            d.with(|e, _| e.destroy_qp(qb)).unwrap();
        })
    });
    assert!(kept, "no round's last poll kept its ACK");
}

/// A context closed right after a poll kept its ACK sends the ACK as it
/// closes (`Driver`'s drop): the peer's SEND completes instead of ending
/// in RETRY_EXC_ERR, the receiving context gone.
#[test]
fn a_context_closed_after_its_ack_was_kept_sends_it_first() {
    let h = host();
    let a = side(&h);
    // Each round lends a new context's socket from scratch, which a loaded
    // machine may take many rounds to do.
    let kept = some_round_within_a_minute(|_| {
        let b = side(&h);
        let (qa, qb) = rc_pair(&a, &b);
        for _ in 0..4 {
            post_small_recv(&b.d, b.key, qb);
        }
        let owned = (Box::new(b.d), b.cq, b.key);
        spin_until_lent_then_stop(&a, qa, owned, qb, |d, _| drop(d))
    });
    assert!(kept, "no round's last poll kept its ACK");
}

/// Runs `round` (given the deadline, for its own waits) until one says it
/// saw what it looked for, or a minute has passed: for behaviour that a
/// loaded machine's timing can hide from a single round. Whether one did.
fn some_round_within_a_minute(mut round: impl FnMut(Instant) -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if round(deadline) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
    }
}

/// One round: B (its driver, CQ and memory key; the driver borrowed or
/// owned) spins on its CQ, posting a receive again for each it takes,
/// while A sends SENDs one at a time, until B's socket is lent (or 200
/// SENDs); then B takes one more SEND, runs `then` (given the driver) and
/// makes no more verbs, and A's SEND must complete. Whether that last poll
/// kept the ACK for a next verb.
fn spin_until_lent_then_stop<D>(
    a: &Side,
    qa: QpId,
    (bd, bcq, bkey): (D, CqId, u32),
    qb: QpId,
    then: impl FnOnce(D, QpId) + Send,
) -> bool
where
    D: std::ops::Deref<Target = Driver<FlatMemory>> + Send,
{
    let send = [eight_bytes(a)];
    let wr = signaled_send(1, &send);
    let deadline = Instant::now() + Duration::from_secs(30);
    let last = AtomicBool::new(false);
    let lent = AtomicBool::new(false);
    let (took, taken) = mpsc::channel();
    let (last, lent) = (&last, &lent);
    let ring = bd.with(|e, _| e.cq_ring(bcq)).unwrap();
    std::thread::scope(|scope| {
        // (B takes SEND k before A sees it complete, and so before the
        // last one is posted: `last` is read after the poll.)
        let spinner = scope.spawn(move || {
            while Instant::now() < deadline {
                let before = bd.io_stats().held;
                let n = bd
                    .poll_cq(bcq, &ring, 1, |w| assert_eq!(w.status, WcStatus::Success))
                    .unwrap();
                if n == 1 && last.load(Ordering::Acquire) {
                    let kept = bd.io_stats().held > before;
                    then(bd, qb);
                    return kept;
                }
                if n == 1 {
                    post_small_recv(&bd, bkey, qb);
                    lent.store(bd.receive_lent(), Ordering::Release);
                    took.send(()).unwrap();
                }
            }
            panic!("the last SEND did not arrive");
        });
        // Each SEND wakes B's progress thread, which finds B spinning and
        // lends it the socket.
        let mut sent = 0;
        while !lent.load(Ordering::Acquire) && sent < 200 {
            a.d.with(|e, _| e.post_send(qa, &wr)).unwrap();
            sent += 1;
            assert_eq!(wait_completions(a, 1)[0].status, WcStatus::Success);
            let left = deadline.saturating_duration_since(Instant::now());
            taken.recv_timeout(left).expect("B took the SEND");
        }
        last.store(true, Ordering::Release);
        a.d.with(|e, _| e.post_send(qa, &wr)).unwrap();
        let kept = spinner.join().unwrap();
        // B makes no more verbs: its progress thread, or `then` (a QP
        // destroyed, the context closed), sends the ACK.
        assert_eq!(wait_completions(a, 1)[0].status, WcStatus::Success);
        kept
    })
}

/// Posts signaled WRs of `opcode` one at a time (`a`'s BASE to or from
/// `b`'s BASE + 1 MiB), spinning on `a`'s CQ for each and polling it a
/// few times more before the next (on one host a WR may complete within
/// fewer polls than make a spinning thread), until `a`'s socket is lent
/// (`lent`) or not: whether that came within 30 s. The progress thread
/// looks only when it wakes, for a datagram the polls have not yet taken.
fn spin_on_completions_until(a: &Side, qa: QpId, b: &Side, opcode: u32, lent: bool) -> bool {
    let sge = [eight_bytes(a)];
    let wr = signaled_rdma(opcode, &sge, b);
    let ring = a.d.with(|e, _| e.cq_ring(a.cq)).unwrap();
    let poll = || {
        a.d.poll_cq(a.cq, &ring, 1, |w| assert_eq!(w.status, WcStatus::Success))
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if a.d.receive_lent() == lent {
            return true;
        }
        a.d.with(|e, _| e.post_send(qa, &wr)).unwrap();
        while poll() == 0 {
            assert!(Instant::now() < deadline, "the WR did not complete");
        }
        for _ in 0..8 {
            assert_eq!(poll(), 0);
        }
    }
    false
}

/// A READ's completion is data come in, as a receive's is: a requester
/// spinning on its READs takes their responses in itself, and is lent the
/// socket. A WRITE's completion is not: once the thread spins on WRITEs
/// only, the progress thread takes the socket back, for data the
/// application may await in memory (`receive_owner.rs`).
#[test]
fn a_requester_spinning_on_reads_is_lent_the_socket_and_on_writes_is_not() {
    let h = host();
    let (a, b) = (side(&h), side(&h));
    let (qa, _qb) = rc_pair(&a, &b);
    assert!(
        spin_on_completions_until(&a, qa, &b, send_opcode::RDMA_READ, true),
        "not lent to a thread spinning on READs"
    );
    assert!(
        spin_on_completions_until(&a, qa, &b, send_opcode::RDMA_WRITE, false),
        "still lent to a thread that only completes WRITEs"
    );
}

/// Two threads that each post a WRITE to the other and spin on their CQ
/// until it completes, as `ib_write_lat` does between its looks at memory:
/// a poll that takes the peer's WRITE in with the ACK it waits for keeps
/// its own ACK for its next WRITE, lent the socket or not
/// (`kept_packets.rs`). Each thread's last poll may keep one after its
/// last WRITE, with no verb to follow: its progress thread sends it, and
/// every WRITE of both completes without a resend (a kept ACK the thread
/// forgot would have its peer go back after 32 ms at the least).
#[test]
fn a_write_ping_pong_keeps_its_acks_and_the_last_leaves_without_a_verb() {
    let h = host();
    let (a, b) = (side(&h), side(&h));
    let (qa, qb) = rc_pair(&a, &b);
    let deadline = Instant::now() + Duration::from_secs(30);
    let kept = AtomicBool::new(false);
    // (A `Side` is not shared between threads: its driver, CQ and keys.)
    let ping_pong = |d: &Driver<FlatMemory>, cq: CqId, qp: QpId, wr: &SendWr<'_>| {
        let ring = d.with(|e, _| e.cq_ring(cq)).unwrap();
        let mut writes = 0;
        while writes < 200 || !kept.load(Ordering::Acquire) && Instant::now() < deadline {
            d.with(|e, _| e.post_send(qp, wr)).unwrap();
            writes += 1;
            let (held_before, lent_before) = (d.io_stats().held, d.receive_lent());
            while d
                .poll_cq(cq, &ring, 1, |w| assert_eq!(w.status, WcStatus::Success))
                .unwrap()
                == 0
            {
                let late = deadline + Duration::from_secs(10);
                assert!(Instant::now() < late, "a WRITE did not complete");
            }
            // Kept by a poll while the socket was not lent: only the
            // WRITE it took in made it keep.
            if d.io_stats().held > held_before && !lent_before && !d.receive_lent() {
                kept.store(true, Ordering::Release);
            }
        }
    };
    let (sge_a, sge_b) = ([eight_bytes(&a)], [eight_bytes(&b)]);
    let (wr_a, wr_b) = (
        signaled_rdma(send_opcode::RDMA_WRITE, &sge_a, &b),
        signaled_rdma(send_opcode::RDMA_WRITE, &sge_b, &a),
    );
    std::thread::scope(|scope| {
        scope.spawn(|| ping_pong(&a.d, a.cq, qa, &wr_a));
        scope.spawn(|| ping_pong(&b.d, b.cq, qb, &wr_b));
    });
    assert!(
        kept.into_inner(),
        "no poll kept its ACK without the socket lent in 30 s"
    );
    for (side, name) in [(&a, "a"), (&b, "b")] {
        let resent = side.d.with(|e, _| e.stats().tx_resent);
        assert_eq!(resent, 0, "{name} sent WRITEs again");
    }
}

/// 8 bytes at `s`'s BASE.
fn eight_bytes(s: &Side) -> Sge {
    Sge {
        addr: BASE,
        length: 8,
        lkey: s.key,
    }
}

/// Posts a signaled 8-byte WRITE from `a`'s BASE to `b`'s.
fn post_signaled_write(a: &Side, qa: QpId, b: &Side) {
    let sge = [eight_bytes(a)];
    let wr = signaled_rdma(send_opcode::RDMA_WRITE, &sge, b);
    a.d.with(|e, _| e.post_send(qa, &wr)).unwrap();
}

/// What `poll`, run on another thread while this one holds `a`'s driver,
/// returned: within 30 s, or the poll waited for the driver.
fn polled_while_held<R: Send>(
    a: &Side,
    poll: impl FnOnce() -> R + Send,
) -> Result<R, mpsc::RecvTimeoutError> {
    std::thread::scope(|s| {
        let (held, hold) = mpsc::channel();
        let (polled, result) = mpsc::channel();
        s.spawn(move || {
            hold.recv().unwrap();
            let _ = polled.send(poll());
        });
        a.d.with(|_, _| {
            held.send(()).unwrap();
            result.recv_timeout(Duration::from_secs(30))
        })
    })
}

/// A poll that finds its CQ's ring empty while another thread holds the
/// driver (the progress thread taking datagrams in) returns at once with
/// nothing: it does not sleep on the lock. Once the driver is free, such
/// polls receive and take the completion.
#[test]
fn a_poll_returns_at_once_while_another_thread_holds_the_driver() {
    let h = host();
    let (a, b) = (side(&h), side(&h));
    let (qa, _qb) = rc_pair(&a, &b);
    let poll = || {
        a.d.poll_unless_busy(|e, _| Polled::poll(e, a.cq, 1, |_| ()))
    };
    let busy = polled_while_held(&a, poll);
    assert_eq!(busy, Ok(None), "the poll waited for the driver");
    post_signaled_write(&a, qa, &b);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // The progress thread may hold the driver now and then: None.
        if let Some(polled) = poll() {
            if polled.unwrap().taken == 1 {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the WRITE did not complete");
    }
}

/// A thread whose polls found the driver held 64 times in a row waits for
/// its turn with the next: a thread that holds the driver most of the time
/// must not leave it taking nothing in.
#[test]
fn a_poll_that_found_the_driver_held_64_times_waits_for_it() {
    let h = host();
    let a = side(&h);
    let poll = || {
        a.d.poll_unless_busy(|e, _| Polled::poll(e, a.cq, 1, |_| ()))
    };
    std::thread::scope(|s| {
        let (held, hold) = mpsc::channel();
        let (polled, result) = mpsc::channel();
        s.spawn(move || {
            hold.recv().unwrap();
            for _ in 0..64 {
                polled.send(poll()).unwrap();
            }
            polled.send(poll()).unwrap();
        });
        a.d.with(|_, _| {
            held.send(()).unwrap();
            for _ in 0..64 {
                let busy = result.recv_timeout(Duration::from_secs(30));
                assert_eq!(busy, Ok(None), "returned at once");
            }
            // A correct 65th poll never returns while the driver is held.
            let waited = result.recv_timeout(Duration::from_millis(200));
            assert_eq!(waited, Err(mpsc::RecvTimeoutError::Timeout));
        });
        let turn = result.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(turn.map(|p| p.unwrap().taken), Some(0), "its turn");
    });
}

/// A poll for no completions (`ibv_poll_cq` with 0 entries) returns 0 at
/// once, without the driver (here held by another thread), and hands
/// nothing over; the WRITE posted before it then completes as usual.
#[test]
fn a_poll_for_no_completions_returns_at_once_and_hands_nothing_over() {
    let h = host();
    let (a, b) = (side(&h), side(&h));
    let (qa, _qb) = rc_pair(&a, &b);
    let ring = a.d.with(|e, _| e.cq_ring(a.cq)).unwrap();
    post_signaled_write(&a, qa, &b);
    let none = || a.d.poll_cq(a.cq, &ring, 0, |w| panic!("handed {w:?}"));
    let at_once = polled_while_held(&a, none);
    assert_eq!(at_once, Ok(Ok(0)), "the poll waited for the driver");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert_eq!(none(), Ok(0));
        let taken =
            a.d.poll_cq(a.cq, &ring, 1, |w| assert_eq!(w.status, WcStatus::Success));
        if taken == Ok(1) {
            break;
        }
        assert!(Instant::now() < deadline, "the WRITE did not complete");
    }
}

/// A poll takes at most one datagram from the steered socket (a second
/// system call, to find the queue empty, sat between a request's
/// completion and the reply's post), and leaves the rest for the next
/// receive. Any other receive takes every datagram waiting; that each
/// arrives is all this checks of it, for whether all three are queued
/// when it runs is the kernel's timing.
#[test]
fn a_poll_receives_one_datagram_and_leaves_the_rest_waiting() {
    use softverbs_transport::endpoint::{Endpoint, Receiver};
    let h = host();
    let mut e = Endpoint::open(IpAddr::V4(h.ip), &h.daemon).unwrap();
    // The steering reads only the destination QP number (BTH bytes 5-7);
    // the endpoint hands frames over without parsing them.
    let qpn = slots::qpns_of(e.slots()[0]).start + 2;
    let mut datagram = [0u8; 20];
    datagram[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    let tx = std::net::UdpSocket::bind((h.ip, 0)).unwrap();
    let to = (h.ip, udp_port());
    let deadline = Instant::now() + Duration::from_secs(30);
    for by in [Receiver::Poll, Receiver::Verb] {
        for _ in 0..3 {
            tx.send_to(&datagram, to).unwrap();
        }
        let mut taken = 0;
        let mut most_at_once = 0;
        while taken < 3 {
            assert!(Instant::now() < deadline, "{by:?}: {taken} of 3 datagrams");
            let mut frames = 0;
            e.receive(by, |_, bytes, _| {
                assert_eq!(bytes.len(), datagram.len());
                frames += 1;
            })
            .unwrap();
            taken += frames;
            most_at_once = most_at_once.max(frames);
        }
        assert_eq!(taken, 3, "{by:?}");
        if by == Receiver::Poll {
            assert_eq!(most_at_once, 1);
        }
    }
    drop(e);
    every_packet_went_straight(h);
}

/// SENDs of one QP leave in PSN order even when a longer one follows a
/// shorter one that waits alone in the batch (only an ACK may be
/// overtaken, `send_batch.rs`): the receives complete in order and
/// nothing is sent again.
#[test]
fn a_short_send_then_a_longer_one_arrive_in_order() {
    let h = host();
    let (a, b) = (side(&h), side(&h));
    let (qa, qb) = rc_pair(&a, &b);
    for _ in 0..2 {
        post_small_recv(&b.d, b.key, qb);
    }
    let sge = |length| {
        [Sge {
            addr: BASE,
            length,
            lkey: a.key,
        }]
    };
    let (short, long) = (sge(2), sge(64));
    // Posted in one verb, both leave in the step after it, one batch.
    a.d.with(|e, _| {
        e.post_send(qa, &signaled_send(1, &short))?;
        e.post_send(qa, &signaled_send(2, &long))
    })
    .unwrap();
    let rx = wait_completions(&b, 2);
    let got: Vec<_> = rx.iter().map(|w| (w.status, w.byte_len)).collect();
    assert_eq!(got, [(WcStatus::Success, 2), (WcStatus::Success, 64)]);
    let tx = wait_completions(&a, 2);
    assert!(tx.iter().all(|w| w.status == WcStatus::Success), "{tx:?}");
    assert_eq!(a.d.with(|e, _| e.stats().tx_resent), 0, "a SEND sent again");
}

/// The wire path's steady state allocates nothing per work request: once
/// warm (queues, rings and batches at their working size), a thread that
/// posts receives, SENDs (two at a time, which leave in one GSO send) and
/// WRITEs on two connected contexts and polls their completions makes no
/// allocation. It does much of both ends'
/// work itself: a poll takes in what arrived and sends what is due. (What
/// the progress threads do is not counted: `allocation_counter` counts
/// the measuring thread's allocations.) An allocation per work request
/// would count a thousand or more; under CPU load a buffer may still
/// reach a new working size once inside the measured rounds (one growth
/// of 1,024 bytes, in one CI run and 1 run in 30 beside two busy
/// processes), which is not a per-request allocation.
#[test]
fn the_steady_state_of_sends_and_writes_allocates_nothing() {
    let h = host();
    let (a, b) = (side(&h), side(&h));
    let (qa, qb) = rc_pair(&a, &b);
    let (ring_a, ring_b) = (
        a.d.with(|e, _| e.cq_ring(a.cq)).unwrap(),
        b.d.with(|e, _| e.cq_ring(b.cq)).unwrap(),
    );
    let (sge, sge_write) = ([eight_bytes(&a)], [eight_bytes(&a)]);
    let (send, write) = (
        signaled_send(1, &sge),
        signaled_rdma(send_opcode::RDMA_WRITE, &sge_write, &b),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    // Polls both ends until `a` has `at_a` completions and `b` `at_b`,
    // every one a success.
    let complete = |mut at_a: usize, mut at_b: usize| {
        while at_a + at_b > 0 {
            assert!(Instant::now() < deadline, "{at_a} and {at_b} to complete");
            let ok = |w: WorkCompletion| assert_eq!(w.status, WcStatus::Success, "{w:?}");
            at_a -= a.d.poll_cq(a.cq, &ring_a, at_a, ok).unwrap();
            at_b -= b.d.poll_cq(b.cq, &ring_b, at_b, ok).unwrap();
        }
    };
    let round = || {
        post_small_recv(&b.d, b.key, qb);
        post_small_recv(&b.d, b.key, qb);
        // Two SENDs in one verb leave in one GSO send.
        a.d.with(|e, _| {
            e.post_send(qa, &send)?;
            e.post_send(qa, &send)
        })
        .unwrap();
        complete(2, 2);
        a.d.with(|e, _| e.post_send(qa, &write)).unwrap();
        complete(1, 0);
    };
    for _ in 0..200 {
        round();
    }
    let info = allocation_counter::measure(|| {
        for _ in 0..1000 {
            round();
        }
    });
    assert!(info.count_total <= 2, "{info:?}");
    assert_eq!(a.d.with(|e, _| e.stats().tx_resent), 0, "a WR sent again");
}

/// A QP of `a` connected to a QP of `b` left in RESET, which drops what
/// arrives for it: nothing `a` sends on it is ever answered. Destroy it
/// before its local ACK timeout (67 ms) sends it all again.
fn unanswered_qp(a: &Side, b: &Side) -> QpId {
    let (qa, _) = create_qp(a, QpType::Rc);
    let (_, nb) = create_qp(b, QpType::Rc);
    connect(a, qa, QpType::Rc, nb);
    qa
}

/// Posts an 8-byte signaled SEND on `qa` as `ibv_post_send` does.
fn post_small_send(a: &Side, qa: QpId) {
    let sge = [eight_bytes(a)];
    a.d.post_send_with(|e, _| e.post_send(qa, &signaled_send(0, &sge)))
        .unwrap();
}

/// SENDs posted one at a time while an earlier one awaits its ACK leave
/// together: each post keeps the part-filled batch for the next, and the
/// next verb that is not a post sends it (`corked_batch.rs`), where each
/// SEND was a system call of its own. A kept batch leaves once its bound
/// (20 us from its first packet) has passed, which a test thread
/// preempted between two posts lets happen, so rounds are tried (for up
/// to a minute) until one sees its 8 posts leave in at most two system
/// calls; in every round all of them have left once the verb returns.
#[test]
fn sends_posted_in_a_row_while_one_awaits_its_ack_leave_together() {
    let h = host();
    let (a, b) = (side(&h), side(&h));
    let together = some_round_within_a_minute(|_| {
        let qa = unanswered_qp(&a, &b);
        post_small_send(&a, qa); // alone: nothing else awaited an answer
        let before = a.d.io_stats();
        for _ in 0..8 {
            post_small_send(&a, qa);
        }
        a.d.with(|_, _| ());
        let after = a.d.io_stats();
        a.d.with(|e, _| e.destroy_qp(qa)).unwrap();
        assert!(after.tx - before.tx >= 8, "{before:?} then {after:?}");
        assert!(after.corked > before.corked, "{before:?} then {after:?}");
        after.tx - before.tx == 8 && after.tx_calls - before.tx_calls <= 2
    });
    assert!(together, "no round's 8 SENDs left in two system calls");
}

/// A batch a post kept for a next post that never comes leaves anyway:
/// the progress thread sends it once its bound has passed.
#[test]
fn a_kept_batch_leaves_without_another_verb() {
    let h = host();
    let (a, b) = (side(&h), side(&h));
    let qa = unanswered_qp(&a, &b);
    post_small_send(&a, qa);
    let before = a.d.io_stats();
    post_small_send(&a, qa);
    let after = a.d.io_stats();
    assert_eq!(after.corked, before.corked + 1, "{after:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.d.io_stats().tx < before.tx + 1 {
        assert!(Instant::now() < deadline, "{:?}", a.d.io_stats());
        std::thread::yield_now();
    }
}

/// A batch kept while the socket is lent to a thread spinning on its CQs
/// (no timer armed for it: that thread's next poll would send it) leaves
/// once the thread stops: the progress thread's next look at the lending
/// sends it, before the QP's local ACK timeout would have (the timer
/// sends the first SEND again with it). A round that lost the lending,
/// kept nothing, or met the timer proves nothing, so rounds are tried for
/// up to a minute.
#[test]
fn a_batch_kept_while_the_socket_is_lent_leaves_at_the_next_look() {
    let h = host();
    let (a, b) = (side(&h), side(&h));
    let (qa, _qb) = rc_pair(&a, &b);
    let left = some_round_within_a_minute(|deadline| {
        assert!(
            spin_on_completions_until(&a, qa, &b, send_opcode::RDMA_READ, true),
            "not lent to a thread spinning on READs"
        );
        let unanswered = unanswered_qp(&a, &b);
        post_small_send(&a, unanswered);
        let before = a.d.io_stats();
        let resent = a.d.with(|e, _| e.stats().tx_resent);
        post_small_send(&a, unanswered);
        let kept = a.d.io_stats().corked > before.corked && a.d.receive_lent();
        while a.d.io_stats().tx == before.tx {
            assert!(Instant::now() < deadline, "the kept SEND never left");
            std::thread::yield_now();
        }
        let on_time = a.d.with(|e, _| e.stats().tx_resent) == resent;
        a.d.with(|e, _| e.destroy_qp(unanswered)).unwrap();
        kept && on_time
    });
    assert!(left, "no round kept a batch while lent and saw it leave");
}

/// A context closed right after a post kept its batch sends the batch as
/// it closes (`Driver`'s drop): the peer receives every SEND. The first
/// SEND of a round leaves alone and the second waits for a next post
/// while the first awaits its ACK; a round whose second left at once (the
/// ACK taken in already) proves nothing, so rounds are tried (for up to
/// a minute) until one kept it.
#[test]
fn a_batch_kept_at_close_leaves_as_the_context_closes() {
    let h = host();
    let b = side(&h);
    let kept = some_round_within_a_minute(|deadline| {
        let a = side(&h);
        let (qa, qb) = rc_pair(&a, &b);
        post_small_recv(&b.d, b.key, qb);
        post_small_recv(&b.d, b.key, qb);
        post_small_send(&a, qa);
        let before = a.d.io_stats();
        post_small_send(&a, qa);
        let kept = a.d.io_stats().corked > before.corked;
        drop(a);
        let mut got = Vec::new();
        while got.len() < 2 {
            assert!(
                Instant::now() < deadline,
                "{} of 2 SENDs arrived",
                got.len()
            );
            b.d.with(|e, _| e.poll_cq(b.cq, 2, &mut got)).unwrap();
        }
        assert!(
            got.iter().all(|wc| wc.status == WcStatus::Success),
            "{got:?}"
        );
        b.d.with(|e, _| e.destroy_qp(qb)).unwrap();
        kept
    });
    assert!(kept, "no round's second SEND was kept");
}

/// A post after everything sent was answered (a latency test's next
/// message) is not kept: nothing would bring a verb back for it.
#[test]
fn a_post_with_nothing_awaiting_an_answer_leaves_at_once() {
    let h = host();
    let (a, b) = (side(&h), side(&h));
    let (qa, qb) = rc_pair(&a, &b);
    post_small_recv(&b.d, b.key, qb);
    post_small_recv(&b.d, b.key, qb);
    post_small_send(&a, qa);
    // Polled, not waited for with an armed CQ, which keeps nothing either.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut done = Vec::new();
    while done.is_empty() {
        assert!(Instant::now() < deadline, "the SEND did not complete");
        a.d.with(|e, _| e.poll_cq(a.cq, 1, &mut done)).unwrap();
    }
    assert_eq!(done[0].status, WcStatus::Success);
    let before = a.d.io_stats();
    post_small_send(&a, qa);
    let after = a.d.io_stats();
    assert_eq!(after.tx, before.tx + 1, "{after:?}");
    assert_eq!(after.corked, before.corked, "{after:?}");
}

/// A post while a CQ is armed for a completion event is not kept either:
/// its thread may sleep in `ibv_get_cq_event` next, with no verb to send
/// it.
#[test]
fn a_post_while_a_cq_is_armed_leaves_at_once() {
    let h = host();
    let (a, b) = (side(&h), side(&h));
    let qa = unanswered_qp(&a, &b);
    a.d.arm(|e| e.req_notify_cq(a.cq, false)).unwrap();
    post_small_send(&a, qa);
    let before = a.d.io_stats();
    post_small_send(&a, qa);
    let after = a.d.io_stats();
    assert_eq!(after.tx, before.tx + 1, "{after:?}");
    assert_eq!(after.corked, before.corked, "{after:?}");
}
