//! ibv_create_qp rules (seed 002) and ibv_query_qp init attributes (seed 003).

mod common;
use common::*;
use softverbs_engine::*;

#[test]
fn rc_uc_ud_are_created_in_reset_with_qp_num_not_0_or_1() {
    let mut f = fixture();
    let mut nums = Vec::new();
    for ty in QpType::ALL {
        let init = f.init_attr(ty, None);
        let created = f.e.create_qp(f.pd, &init).unwrap();
        assert!(created.qp_num > 1 && created.qp_num <= 0xFF_FFFF);
        assert_eq!(f.state(created.id), QpState::Reset);
        assert_eq!(f.e.qp_by_num(created.qp_num), Some(created.id));
        nums.push(created.qp_num);
    }
    nums.dedup();
    assert_eq!(nums.len(), 3);
}

#[test]
fn other_qp_types_are_eopnotsupp_and_numbers_that_are_no_type_einval() {
    let mut f = fixture();
    // RAW_PACKET 8, XRC_SEND 9, XRC_RECV 10, DRIVER 0xff: types softverbs
    // does not offer; the rest no ibv_qp_type at all (rxe: EINVAL).
    for (raw, want) in [
        (8, EOPNOTSUPP),
        (9, EOPNOTSUPP),
        (10, EOPNOTSUPP),
        (0xff, EOPNOTSUPP),
        (0, EINVAL),
        (1, EINVAL),
        (5, EINVAL),
        (12345, EINVAL),
    ] {
        let init = QpInitAttr {
            qp_type: raw,
            ..f.init_attr(QpType::Rc, None)
        };
        assert_eq!(errno(f.e.create_qp(f.pd, &init)), want, "type {raw}");
    }
}

#[test]
fn caps_written_back_are_at_least_the_request() {
    let mut f = fixture();
    let init = f.init_attr(QpType::Rc, None);
    let created = f.e.create_qp(f.pd, &init).unwrap();
    let c = created.cap;
    let r = init.cap;
    assert!(c.max_send_wr >= r.max_send_wr && c.max_recv_wr >= r.max_recv_wr);
    assert!(c.max_send_sge >= r.max_send_sge && c.max_recv_sge >= r.max_recv_sge);
    assert!(c.max_inline_data >= r.max_inline_data);
    let (attr, init_back) = f.e.query_qp(created.id).unwrap();
    assert_eq!(attr.cap, c);
    assert_eq!(init_back.cap, c);
    assert_eq!(init_back.qp_type, QpType::Rc as u32);
    assert!(!init_back.sq_sig_all);
    assert_eq!(init_back.srq, None);
}

/// rxe's send WR room: one SGE and no inline data still lets 16 inline
/// bytes through (rdma_xclient relies on it), and inline room brings SGEs.
#[test]
fn the_send_room_serves_sges_and_inline_data_alike() {
    let mut f = fixture();
    let mut init = f.init_attr(QpType::Rc, None);
    for (sge, inline, want_sge, want_inline) in [(1, 0, 1, 16), (2, 64, 4, 64), (0, 0, 0, 0)] {
        init.cap.max_send_sge = sge;
        init.cap.max_inline_data = inline;
        let c = f.e.create_qp(f.pd, &init).unwrap().cap;
        assert_eq!((c.max_send_sge, c.max_inline_data), (want_sge, want_inline));
    }
}

#[test]
fn caps_above_device_limits_are_einval() {
    let mut f = fixture();
    let d = f.e.query_device().clone();
    let l = f.e.config().limits.clone();
    let over = [
        QpCap {
            max_send_wr: d.max_qp_wr + 1,
            ..caps()
        },
        QpCap {
            max_recv_wr: d.max_qp_wr + 1,
            ..caps()
        },
        QpCap {
            max_send_sge: d.max_sge + 1,
            ..caps()
        },
        QpCap {
            max_recv_sge: d.max_sge + 1,
            ..caps()
        },
        QpCap {
            max_inline_data: l.max_inline_data + 1,
            ..caps()
        },
    ];
    for cap in over {
        let init = QpInitAttr {
            cap,
            ..f.init_attr(QpType::Rc, None)
        };
        assert_eq!(errno(f.e.create_qp(f.pd, &init)), EINVAL, "{cap:?}");
    }
    let at_limit = QpCap {
        max_send_wr: d.max_qp_wr,
        max_recv_wr: d.max_qp_wr,
        max_send_sge: d.max_sge,
        max_recv_sge: d.max_sge,
        max_inline_data: l.max_inline_data,
    };
    let init = QpInitAttr {
        cap: at_limit,
        ..f.init_attr(QpType::Rc, None)
    };
    assert_eq!(errno(f.e.create_qp(f.pd, &init)), 0);
}

#[test]
fn srq_only_with_rc_and_ud_and_recv_caps_ignored() {
    let mut f = fixture();
    let (srq, _) =
        f.e.create_srq(
            f.pd,
            &SrqAttr {
                max_wr: 8,
                max_sge: 2,
                srq_limit: 0,
            },
        )
        .unwrap();
    let uc = f.init_attr(QpType::Uc, Some(srq));
    assert_eq!(errno(f.e.create_qp(f.pd, &uc)), EINVAL);
    for ty in [QpType::Rc, QpType::Ud] {
        // Receive caps far above the limits are ignored with an SRQ.
        let cap = QpCap {
            max_recv_wr: u32::MAX,
            max_recv_sge: u32::MAX,
            ..caps()
        };
        let init = QpInitAttr {
            cap,
            ..f.init_attr(ty, Some(srq))
        };
        let created = f.e.create_qp(f.pd, &init).unwrap();
        assert_eq!(created.cap.max_recv_wr, 0);
        assert_eq!(created.cap.max_recv_sge, 0);
        assert_eq!(created.cap.max_send_wr, caps().max_send_wr);
        assert_eq!(f.e.query_qp(created.id).unwrap().1.srq, Some(srq));
    }
}

#[test]
fn unknown_cq_srq_or_pd_is_einval() {
    let mut f = fixture();
    let (gone, _) = f.e.create_cq(4, 0).unwrap();
    f.e.destroy_cq(gone).unwrap();
    let init = QpInitAttr {
        send_cq: gone,
        ..f.init_attr(QpType::Rc, None)
    };
    assert_eq!(errno(f.e.create_qp(f.pd, &init)), EINVAL);
    let init = QpInitAttr {
        recv_cq: gone,
        ..f.init_attr(QpType::Rc, None)
    };
    assert_eq!(errno(f.e.create_qp(f.pd, &init)), EINVAL);
    let pd = f.e.alloc_pd().unwrap();
    f.e.dealloc_pd(pd).unwrap();
    let init = f.init_attr(QpType::Rc, None);
    assert_eq!(errno(f.e.create_qp(pd, &init)), EINVAL);
}

#[test]
fn sq_sig_all_is_kept_and_reported() {
    let mut f = fixture();
    let init = QpInitAttr {
        sq_sig_all: true,
        ..f.init_attr(QpType::Ud, None)
    };
    let qp = f.e.create_qp(f.pd, &init).unwrap().id;
    assert!(f.e.query_qp(qp).unwrap().1.sq_sig_all);
}

#[test]
fn max_qp_is_enforced_with_enomem() {
    let mut cfg = DeviceConfig::loopback(1);
    cfg.limits.max_qp = 2;
    let mut e = Engine::new(cfg);
    let pd = e.alloc_pd().unwrap();
    let (cq, _) = e.create_cq(4, 0).unwrap();
    let init = QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: caps(),
        qp_type: QpType::Rc as u32,
        sq_sig_all: false,
    };
    e.create_qp(pd, &init).unwrap();
    let second = e.create_qp(pd, &init).unwrap();
    assert_eq!(errno(e.create_qp(pd, &init)), ENOMEM);
    e.destroy_qp(second.id).unwrap();
    assert_eq!(errno(e.create_qp(pd, &init)), 0);
}
