//! ibv_modify_qp rules (seeds 000 and 004, docs/conformance.md) and
//! ibv_query_qp results (seed 003).

mod common;
use common::*;
use softverbs_engine::*;

#[test]
fn textbook_bringup_reaches_rts_for_every_type_and_query_reflects_it() {
    for ty in QpType::ALL {
        let mut f = fixture();
        let qp = f.qp(ty);
        f.bring_to(qp, ty, QpState::Rts);
        let (a, _) = f.e.query_qp(qp).unwrap();
        assert_eq!(a.qp_state, QpState::Rts as u32);
        assert_eq!(a.cur_qp_state, QpState::Rts as u32);
        assert_eq!(a.port_num, 1);
        assert_eq!(a.sq_psn, 0x12_3456);
        assert_eq!(a.sq_draining, 0);
        match ty {
            QpType::Ud => assert_eq!(a.qkey, 0x1111_1111),
            _ => {
                assert_eq!(a.qp_access_flags, AccessFlags::REMOTE_WRITE.bits());
                assert_eq!(a.path_mtu, Mtu::Mtu1024 as u32);
                assert_eq!(a.dest_qp_num, 0x1234);
                assert_eq!(a.rq_psn, 0xAB_CDEF);
                assert_eq!(a.ah_attr, av());
            }
        }
        if ty == QpType::Rc {
            assert_eq!((a.timeout, a.retry_cnt, a.rnr_retry), (14, 7, 7));
            assert_eq!((a.max_rd_atomic, a.max_dest_rd_atomic), (4, 4));
            assert_eq!(a.min_rnr_timer, 12);
        }
    }
}

#[test]
fn illegal_transitions_are_einval_and_change_nothing() {
    let mut f = fixture();
    let qp = f.qp(QpType::Rc);
    let before = f.e.query_qp(qp).unwrap();
    for target in [QpState::Rtr, QpState::Rts, QpState::Sqd, QpState::Sqe] {
        let (mut a, m) = rtr_step(QpType::Rc);
        a.qp_state = target as u32;
        assert_eq!(errno(f.e.modify_qp(qp, &a, m)), EINVAL, "RESET->{target:?}");
        assert_eq!(f.e.query_qp(qp).unwrap(), before);
    }
    f.bring_to(qp, QpType::Rc, QpState::Init);
    let (mut a, m) = rts_step(QpType::Rc);
    a.qp_state = QpState::Rts as u32;
    assert_eq!(errno(f.e.modify_qp(qp, &a, m)), EINVAL, "INIT->RTS");
    assert_eq!(f.state(qp), QpState::Init);
}

#[test]
fn invalid_qp_state_values_are_einval() {
    let mut f = fixture();
    let qp = f.qp(QpType::Ud);
    for raw in [7, 8, u32::MAX] {
        let a = QpAttr {
            qp_state: raw,
            ..QpAttr::default()
        };
        assert_eq!(errno(f.e.modify_qp(qp, &a, QpAttrMask::STATE)), EINVAL);
    }
}

#[test]
fn missing_required_bit_is_einval_for_each_required_bit() {
    for ty in QpType::ALL {
        let mut f = fixture();
        let qp = f.qp(ty);
        let steps = [init_step(ty), rtr_step(ty), rts_step(ty)];
        for (a, m) in steps {
            for bit in (m - QpAttrMask::STATE).iter() {
                let before = f.e.query_qp(qp).unwrap();
                assert_eq!(
                    errno(f.e.modify_qp(qp, &a, m - bit)),
                    EINVAL,
                    "{ty:?} {bit:?}"
                );
                assert_eq!(f.e.query_qp(qp).unwrap(), before, "all or nothing");
            }
            f.e.modify_qp(qp, &a, m).unwrap();
        }
    }
}

#[test]
fn attributes_a_type_does_not_have_are_refused() {
    let mut f = fixture();
    let rc = f.qp(QpType::Rc);
    let (a, m) = init_step(QpType::Rc);
    assert_eq!(
        errno(f.e.modify_qp(rc, &a, m | QpAttrMask::QKEY)),
        EINVAL,
        "RC has no Q_Key"
    );
    let ud = f.qp(QpType::Ud);
    let (a, m) = init_step(QpType::Ud);
    assert_eq!(
        errno(f.e.modify_qp(ud, &a, m | QpAttrMask::ACCESS_FLAGS)),
        EINVAL
    );
    f.e.modify_qp(ud, &a, m).unwrap();
    let (a, _) = rtr_step(QpType::Rc);
    for extra in [
        QpAttrMask::AV,
        QpAttrMask::PATH_MTU,
        QpAttrMask::DEST_QPN,
        QpAttrMask::RQ_PSN,
    ] {
        let r = f.e.modify_qp(ud, &a, QpAttrMask::STATE | extra);
        assert_eq!(errno(r), EINVAL, "UD has no {extra:?}");
    }
    let uc = f.qp(QpType::Uc);
    f.bring_to(uc, QpType::Uc, QpState::Init);
    let (a, m) = rtr_step(QpType::Rc);
    assert_eq!(
        errno(f.e.modify_qp(uc, &a, m)),
        EINVAL,
        "UC has no RD atomics or RNR timer"
    );
}

/// CAP is in no transition's rule (EINVAL); bits past IBV_QP_DEST_QPN,
/// RATE_LIMIT included, are EOPNOTSUPP in libibverbs and the kernel.
#[test]
fn rate_limit_and_cap_are_refused() {
    let mut f = fixture();
    let qp = f.qp(QpType::Rc);
    f.bring_to(qp, QpType::Rc, QpState::Rts);
    let a = QpAttr {
        rate_limit: 1000,
        cap: caps(),
        ..QpAttr::default()
    };
    assert_eq!(
        errno(f.e.modify_qp(qp, &a, QpAttrMask::RATE_LIMIT)),
        EOPNOTSUPP
    );
    assert_eq!(errno(f.e.modify_qp(qp, &a, QpAttrMask::CAP)), EINVAL);
    let unknown = QpAttrMask::from_bits_retain(1 << 21);
    assert_eq!(errno(f.e.modify_qp(qp, &a, unknown)), EOPNOTSUPP);
}

/// One value check: the mutation makes the otherwise valid step invalid.
type Mutation = fn(&mut QpAttr);

fn rejects(ty: QpType, step: QpState, extra: QpAttrMask, cases: &[(&str, Mutation)]) {
    for (name, mutate) in cases {
        let mut f = fixture();
        let qp = f.qp(ty);
        let prev = match step {
            QpState::Init => None,
            QpState::Rtr => Some(QpState::Init),
            _ => Some(QpState::Rtr),
        };
        if let Some(prev) = prev {
            f.bring_to(qp, ty, prev);
        }
        let (mut a, m) = match step {
            QpState::Init => init_step(ty),
            QpState::Rtr => rtr_step(ty),
            _ => rts_step(ty),
        };
        mutate(&mut a);
        let before = f.e.query_qp(qp).unwrap();
        assert_eq!(errno(f.e.modify_qp(qp, &a, m | extra)), EINVAL, "{name}");
        assert_eq!(f.e.query_qp(qp).unwrap(), before, "{name}: all or nothing");
    }
}

#[test]
fn init_value_checks() {
    rejects(
        QpType::Rc,
        QpState::Init,
        QpAttrMask::empty(),
        &[
            ("port 0", |a| a.port_num = 0),
            ("port 2", |a| a.port_num = 2),
            ("pkey_index 1", |a| a.pkey_index = 1),
        ],
    );
}

/// Access bits a QP has no use for are kept, not refused: the kernel
/// passes qp_access_flags through unchecked (rxe and mlx5 alike), so a
/// program that sets them runs on every kernel device.
#[test]
fn unknown_access_bits_are_kept() {
    let mut f = fixture();
    let qp = f.qp(QpType::Rc);
    let (mut a, m) = init_step(QpType::Rc);
    a.qp_access_flags = 1 << 5 | AccessFlags::REMOTE_READ.bits();
    f.e.modify_qp(qp, &a, m).unwrap();
    assert_eq!(
        f.e.query_qp(qp).unwrap().0.qp_access_flags,
        a.qp_access_flags
    );
}

#[test]
fn rtr_value_checks() {
    rejects(
        QpType::Rc,
        QpState::Rtr,
        QpAttrMask::empty(),
        &[
            ("path_mtu 0", |a| a.path_mtu = 0),
            ("path_mtu 6", |a| a.path_mtu = 6),
            ("min_rnr_timer 32", |a| a.min_rnr_timer = 32),
            ("max_dest_rd_atomic 129", |a| a.max_dest_rd_atomic = 129),
            ("dest_qpn 25 bits", |a| a.dest_qp_num = 1 << 24),
            ("no GRH", |a| a.ah_attr.is_global = false),
            ("sgid_index past the table", |a| {
                a.ah_attr.grh.sgid_index = 16
            }),
            ("ah port 2", |a| a.ah_attr.port_num = 2),
            ("zero dgid", |a| a.ah_attr.grh.dgid = Gid::ZERO),
        ],
    );
    rejects(
        QpType::Rc,
        QpState::Rtr,
        QpAttrMask::ALT_PATH,
        &[("alt path", |_| {})],
    );
}

/// An empty GID entry within the table is ENODATA, found before anything
/// else of the modify (the kernel resolves the source GID first): even a
/// transition the table refuses answers ENODATA.
#[test]
fn an_empty_gid_entry_is_enodata_before_the_transition_checks() {
    let mut f = fixture();
    let qp = f.qp(QpType::Rc);
    f.bring_to(qp, QpType::Rc, QpState::Init);
    let (mut a, m) = rtr_step(QpType::Rc);
    a.ah_attr.grh.sgid_index = 3;
    let before = f.e.query_qp(qp).unwrap();
    assert_eq!(errno(f.e.modify_qp(qp, &a, m)), ENODATA);
    a.qp_state = QpState::Sqd as u32;
    assert_eq!(errno(f.e.modify_qp(qp, &a, m)), ENODATA, "before the table");
    assert_eq!(f.e.query_qp(qp).unwrap(), before, "all or nothing");
    let pd = f.e.alloc_pd().unwrap();
    assert_eq!(errno(f.e.create_ah(pd, &a.ah_attr)), ENODATA);
}

#[test]
fn rts_value_checks() {
    rejects(
        QpType::Rc,
        QpState::Rts,
        QpAttrMask::empty(),
        &[
            ("timeout 32", |a| a.timeout = 32),
            ("retry_cnt 8", |a| a.retry_cnt = 8),
            ("rnr_retry 8", |a| a.rnr_retry = 8),
            ("max_rd_atomic 129", |a| a.max_rd_atomic = 129),
        ],
    );
    rejects(
        QpType::Rc,
        QpState::Rts,
        QpAttrMask::PATH_MIG_STATE,
        &[
            ("mig REARM", |a| a.path_mig_state = 1),
            ("mig ARMED", |a| a.path_mig_state = 2),
        ],
    );
    rejects(
        QpType::Rc,
        QpState::Rts,
        QpAttrMask::CUR_STATE,
        &[
            ("cur_state INIT while in RTR", |a| {
                a.cur_qp_state = QpState::Init as u32
            }),
            ("cur_state garbage", |a| a.cur_qp_state = 99),
        ],
    );
}

#[test]
fn limits_at_the_edge_are_accepted() {
    let mut f = fixture();
    let qp = f.qp(QpType::Rc);
    f.bring_to(qp, QpType::Rc, QpState::Init);
    let (mut a, m) = rtr_step(QpType::Rc);
    a.path_mtu = Mtu::Mtu4096 as u32;
    a.min_rnr_timer = 31;
    a.max_dest_rd_atomic = 128;
    a.dest_qp_num = 0xFF_FFFF;
    f.e.modify_qp(qp, &a, m).unwrap();
    let (mut a, m) = rts_step(QpType::Rc);
    a.timeout = 31;
    a.max_rd_atomic = 128;
    a.cur_qp_state = QpState::Rtr as u32;
    a.path_mig_state = MIG_MIGRATED;
    f.e.modify_qp(
        qp,
        &a,
        m | QpAttrMask::CUR_STATE | QpAttrMask::PATH_MIG_STATE,
    )
    .unwrap();
    assert_eq!(f.state(qp), QpState::Rts);
}

#[test]
fn psns_are_masked_to_24_bits() {
    let mut f = fixture();
    let qp = f.qp(QpType::Uc);
    f.bring_to(qp, QpType::Uc, QpState::Init);
    let (mut a, m) = rtr_step(QpType::Uc);
    a.rq_psn = 0xFF12_3456;
    f.e.modify_qp(qp, &a, m).unwrap();
    let (mut a, m) = rts_step(QpType::Uc);
    a.sq_psn = 0x0100_0001;
    f.e.modify_qp(qp, &a, m).unwrap();
    let (q, _) = f.e.query_qp(qp).unwrap();
    assert_eq!((q.rq_psn, q.sq_psn), (0x12_3456, 1));
}

#[test]
fn rts_to_rts_changes_optional_attributes_without_state() {
    let mut f = fixture();
    let qp = f.qp(QpType::Rc);
    f.bring_to(qp, QpType::Rc, QpState::Rts);
    let a = QpAttr {
        min_rnr_timer: 20,
        qp_access_flags: AccessFlags::REMOTE_READ.bits(),
        ..QpAttr::default()
    };
    f.e.modify_qp(qp, &a, QpAttrMask::MIN_RNR_TIMER | QpAttrMask::ACCESS_FLAGS)
        .unwrap();
    let (q, _) = f.e.query_qp(qp).unwrap();
    assert_eq!(q.min_rnr_timer, 20);
    assert_eq!(q.qp_access_flags, AccessFlags::REMOTE_READ.bits());
    // RTS->RTS may not touch the path MTU (not in the table).
    let a = QpAttr {
        path_mtu: 2,
        ..QpAttr::default()
    };
    assert_eq!(errno(f.e.modify_qp(qp, &a, QpAttrMask::PATH_MTU)), EINVAL);
    // A modify without IBV_QP_STATE in RTR is RTR->RTR, which is illegal.
    let mut g = fixture();
    let qp = g.qp(QpType::Rc);
    g.bring_to(qp, QpType::Rc, QpState::Rtr);
    assert_eq!(errno(g.e.modify_qp(qp, &a, QpAttrMask::empty())), EINVAL);
}

#[test]
fn sqd_with_notify_raises_sq_drained_and_returns_to_rts() {
    let mut f = fixture();
    let qp = f.qp(QpType::Rc);
    f.bring_to(qp, QpType::Rc, QpState::Rts);
    let a = QpAttr {
        en_sqd_async_notify: 1,
        ..attr(QpState::Sqd)
    };
    f.e.modify_qp(qp, &a, QpAttrMask::STATE | QpAttrMask::EN_SQD_ASYNC_NOTIFY)
        .unwrap();
    assert_eq!(f.state(qp), QpState::Sqd);
    assert_eq!(f.e.query_qp(qp).unwrap().0.sq_draining, 0);
    assert_eq!(f.e.poll_event(), Some(AsyncEvent::SqDrained(qp)));
    // SQD->SQD may change the path; no second drained event.
    let a = QpAttr {
        timeout: 20,
        ..attr(QpState::Sqd)
    };
    f.e.modify_qp(qp, &a, QpAttrMask::STATE | QpAttrMask::TIMEOUT)
        .unwrap();
    assert_eq!(f.e.poll_event(), None);
    f.e.modify_qp(qp, &attr(QpState::Rts), QpAttrMask::STATE)
        .unwrap();
    assert_eq!(f.state(qp), QpState::Rts);
    assert_eq!(f.e.query_qp(qp).unwrap().0.timeout, 20);
    // The notification was that call's: a later RTS->SQD that does not
    // ask (the mask bit absent) gets no event, as on mlx5.
    f.e.modify_qp(qp, &attr(QpState::Sqd), QpAttrMask::STATE)
        .unwrap();
    assert_eq!(f.state(qp), QpState::Sqd);
    assert_eq!(f.e.poll_event(), None);
}

#[test]
fn sqd_without_notify_raises_nothing() {
    let mut f = fixture();
    let qp = f.qp(QpType::Ud);
    f.bring_to(qp, QpType::Ud, QpState::Sqd);
    assert_eq!(f.e.poll_event(), None);
}

#[test]
fn any_state_goes_to_err_and_reset_and_err_to_err() {
    for target in [QpState::Init, QpState::Rtr, QpState::Rts, QpState::Sqd] {
        let mut f = fixture();
        let qp = f.qp(QpType::Rc);
        f.bring_to(qp, QpType::Rc, target);
        f.e.modify_qp(qp, &attr(QpState::Err), QpAttrMask::STATE)
            .unwrap();
        f.e.modify_qp(qp, &attr(QpState::Err), QpAttrMask::STATE)
            .unwrap();
        assert_eq!(f.state(qp), QpState::Err);
        // ERR accepts nothing but the state.
        let a = QpAttr {
            qkey: 1,
            ..attr(QpState::Err)
        };
        assert_eq!(
            errno(f.e.modify_qp(qp, &a, QpAttrMask::STATE | QpAttrMask::PORT)),
            EINVAL
        );
        f.e.modify_qp(qp, &attr(QpState::Reset), QpAttrMask::STATE)
            .unwrap();
        assert_eq!(f.state(qp), QpState::Reset);
        f.bring_to(qp, QpType::Rc, QpState::Rts);
    }
}

#[test]
fn entering_err_flushes_receive_wrs_in_order() {
    let mut f = fixture();
    let qp = f.qp(QpType::Rc);
    let qp_num = f.e.qp_num(qp).unwrap();
    f.bring_to(qp, QpType::Rc, QpState::Init);
    let (addr, lkey) = f.mr(256, AccessFlags::LOCAL_WRITE);
    let sge = [Sge {
        addr,
        length: 64,
        lkey,
    }];
    for wr_id in [7, 8, 9] {
        f.e.post_recv(
            qp,
            &RecvWr {
                wr_id,
                sg_list: &sge,
            },
        )
        .unwrap();
    }
    f.e.modify_qp(qp, &attr(QpState::Err), QpAttrMask::STATE)
        .unwrap();
    let mut wcs = Vec::new();
    assert_eq!(f.e.poll_cq(f.cq, 10, &mut wcs).unwrap(), 3);
    let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [7, 8, 9]);
    for wc in &wcs {
        assert_eq!(wc.status, WcStatus::WrFlushErr);
        assert_eq!(wc.opcode, WcOpcode::Recv);
        assert_eq!(wc.qp_num, qp_num);
    }
    // A WR posted in ERR is flushed at once.
    f.e.post_recv(
        qp,
        &RecvWr {
            wr_id: 10,
            sg_list: &sge,
        },
    )
    .unwrap();
    wcs.clear();
    assert_eq!(f.e.poll_cq(f.cq, 10, &mut wcs).unwrap(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (10, WcStatus::WrFlushErr));
}

#[test]
fn reset_discards_queued_wrs_without_completions() {
    let mut f = fixture();
    let qp = f.qp(QpType::Ud);
    f.bring_to(qp, QpType::Ud, QpState::Init);
    let (addr, lkey) = f.mr(64, AccessFlags::LOCAL_WRITE);
    let sge = [Sge {
        addr,
        length: 8,
        lkey,
    }];
    f.e.post_recv(
        qp,
        &RecvWr {
            wr_id: 1,
            sg_list: &sge,
        },
    )
    .unwrap();
    f.e.modify_qp(qp, &attr(QpState::Reset), QpAttrMask::STATE)
        .unwrap();
    // Nothing left to flush once out of RESET and into ERR.
    f.bring_to(qp, QpType::Ud, QpState::Init);
    f.e.modify_qp(qp, &attr(QpState::Err), QpAttrMask::STATE)
        .unwrap();
    let mut wcs = Vec::new();
    assert_eq!(f.e.poll_cq(f.cq, 10, &mut wcs).unwrap(), 0);
}

#[test]
fn srq_attached_qp_entering_err_raises_last_wqe_reached() {
    let mut f = fixture();
    let (srq, _) =
        f.e.create_srq(
            f.pd,
            &SrqAttr {
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    let init = f.init_attr(QpType::Rc, Some(srq));
    let qp = f.e.create_qp(f.pd, &init).unwrap().id;
    f.bring_to(qp, QpType::Rc, QpState::Rts);
    f.e.modify_qp(qp, &attr(QpState::Err), QpAttrMask::STATE)
        .unwrap();
    assert_eq!(f.e.poll_event(), Some(AsyncEvent::QpLastWqeReached(qp)));
}

#[test]
fn stale_qp_handle_is_einval() {
    let mut f = fixture();
    let qp = f.qp(QpType::Rc);
    f.e.destroy_qp(qp).unwrap();
    assert_eq!(errno(f.e.query_qp(qp)), EINVAL);
    assert_eq!(
        errno(f.e.modify_qp(qp, &attr(QpState::Err), QpAttrMask::STATE)),
        EINVAL
    );
    assert_eq!(errno(f.e.destroy_qp(qp)), EINVAL);
}

#[test]
fn reset_removes_the_qps_completions_from_its_cqs_and_destroy_keeps_them() {
    let mut f = fixture();
    let (a, b) = (f.qp(QpType::Ud), f.qp(QpType::Ud));
    for qp in [a, b] {
        f.bring_to(qp, QpType::Ud, QpState::Init);
        f.e.post_recv(
            qp,
            &RecvWr {
                wr_id: 1,
                sg_list: &[],
            },
        )
        .unwrap();
        f.e.modify_qp(qp, &attr(QpState::Err), QpAttrMask::STATE)
            .unwrap();
    }
    f.e.modify_qp(a, &attr(QpState::Reset), QpAttrMask::STATE)
        .unwrap();
    let mut wcs = Vec::new();
    f.e.poll_cq(f.cq, 10, &mut wcs).unwrap();
    let b_num = f.e.qp_num(b).unwrap();
    assert_eq!(
        wcs.iter().map(|w| w.qp_num).collect::<Vec<_>>(),
        [b_num],
        "only B's flush is left"
    );
    f.e.post_recv(
        b,
        &RecvWr {
            wr_id: 2,
            sg_list: &[],
        },
    )
    .unwrap();
    f.e.destroy_qp(b).unwrap();
    wcs.clear();
    f.e.poll_cq(f.cq, 10, &mut wcs).unwrap();
    assert_eq!(
        wcs.iter().map(|w| (w.qp_num, w.wr_id)).collect::<Vec<_>>(),
        [(b_num, 2)],
        "B's flush is left after its destroy, as on rxe"
    );
}
