//! Posting rules of the QP bringup (seed 004): receive WRs from INIT on,
//! send WRs from RTS on; WR validation at post time.

mod common;
use common::*;
use softverbs_engine::*;

fn recv(f: &mut Fixture, qp: QpId, sge: &[Sge]) -> i32 {
    errno(f.e.post_recv(
        qp,
        &RecvWr {
            wr_id: 1,
            sg_list: sge,
        },
    ))
}

fn send_wr(sge: &[Sge]) -> SendWr<'_> {
    SendWr {
        wr_id: 5,
        opcode: send_opcode::SEND,
        send_flags: send_flags::SIGNALED,
        sg_list: sge,
        inline_data: &[],
        imm_data_or_inv_rkey: 0,
        rdma: RdmaTarget::default(),
        atomic: AtomicTarget::default(),
        ud: None,
    }
}

#[test]
fn receive_wrs_are_refused_in_reset_and_accepted_from_init() {
    let mut f = fixture();
    let qp = f.qp(QpType::Rc);
    let (addr, lkey) = f.mr(64, AccessFlags::LOCAL_WRITE);
    let sge = [Sge {
        addr,
        length: 64,
        lkey,
    }];
    assert_eq!(recv(&mut f, qp, &sge), EINVAL);
    for state in [QpState::Init, QpState::Rtr, QpState::Rts] {
        f.bring_to(qp, QpType::Rc, state);
        assert_eq!(recv(&mut f, qp, &sge), 0, "{state:?}");
        f.e.modify_qp(qp, &attr(QpState::Reset), QpAttrMask::STATE)
            .unwrap();
    }
}

#[test]
fn send_wrs_are_refused_before_rts() {
    let mut f = fixture();
    let qp = f.qp(QpType::Rc);
    let (addr, lkey) = f.mr(64, AccessFlags::LOCAL_WRITE);
    let sge = [Sge {
        addr,
        length: 64,
        lkey,
    }];
    assert_eq!(errno(f.e.post_send(qp, &send_wr(&sge))), EINVAL, "RESET");
    f.bring_to(qp, QpType::Rc, QpState::Init);
    assert_eq!(errno(f.e.post_send(qp, &send_wr(&sge))), EINVAL, "INIT");
    f.bring_to(qp, QpType::Rc, QpState::Rtr);
    assert_eq!(errno(f.e.post_send(qp, &send_wr(&sge))), EINVAL, "RTR");
    f.bring_to(qp, QpType::Rc, QpState::Rts);
    assert_eq!(errno(f.e.post_send(qp, &send_wr(&sge))), 0, "RTS");
}

#[test]
fn send_wrs_posted_in_err_are_flushed_with_their_opcode() {
    let mut f = fixture();
    let qp = f.qp(QpType::Rc);
    f.bring_to(qp, QpType::Rc, QpState::Rts);
    let (addr, lkey) = f.mr(64, AccessFlags::LOCAL_WRITE);
    let sge = [Sge {
        addr,
        length: 8,
        lkey,
    }];
    let write = SendWr {
        wr_id: 1,
        opcode: send_opcode::RDMA_WRITE,
        ..send_wr(&sge)
    };
    f.e.post_send(qp, &write).unwrap();
    f.e.modify_qp(qp, &attr(QpState::Err), QpAttrMask::STATE)
        .unwrap();
    let read = SendWr {
        wr_id: 2,
        opcode: send_opcode::RDMA_READ,
        ..send_wr(&sge)
    };
    f.e.post_send(qp, &read).unwrap();
    let mut wcs = Vec::new();
    f.e.poll_cq(f.cq, 8, &mut wcs).unwrap();
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::WrFlushErr, WcOpcode::RdmaWrite),
            (2, WcStatus::WrFlushErr, WcOpcode::RdmaRead),
        ]
    );
}

#[test]
fn receive_wr_validation_follows_rxe_and_leaves_keys_to_execution() {
    let mut f = fixture();
    let qp = f.qp(QpType::Rc);
    f.bring_to(qp, QpType::Rc, QpState::Init);
    let (addr, lkey) = f.mr(64, AccessFlags::LOCAL_WRITE);
    let one = |length, lkey| [Sge { addr, length, lkey }];
    let five = [Sge {
        addr,
        length: 1,
        lkey,
    }; 5];
    assert_eq!(recv(&mut f, qp, &five), EINVAL, "above max_recv_sge");
    let huge = [Sge {
        addr,
        length: 1 << 30,
        lkey,
    }; 2];
    assert_eq!(recv(&mut f, qp, &huge), EINVAL, "2^31 bytes or more");
    // Keys, bounds and rights are checked when data arrives (rxe, mlx5):
    // these are accepted and fail then (see the datapath tests).
    assert_eq!(recv(&mut f, qp, &one(65, lkey)), 0, "beyond the MR");
    assert_eq!(recv(&mut f, qp, &one(1, lkey ^ 1)), 0, "unknown lkey");
    assert_eq!(recv(&mut f, qp, &[]), 0, "no SGE");
}

#[test]
fn receive_queue_full_is_enomem_and_srq_qp_refuses_post_recv() {
    let mut f = fixture();
    let qp = f.qp(QpType::Ud);
    f.bring_to(qp, QpType::Ud, QpState::Init);
    for _ in 0..caps().max_recv_wr {
        assert_eq!(recv(&mut f, qp, &[]), 0);
    }
    assert_eq!(recv(&mut f, qp, &[]), ENOMEM);
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
    let init = f.init_attr(QpType::Ud, Some(srq));
    let sqp = f.e.create_qp(f.pd, &init).unwrap().id;
    f.bring_to(sqp, QpType::Ud, QpState::Init);
    assert_eq!(recv(&mut f, sqp, &[]), EINVAL);
}

#[test]
fn send_wr_validation() {
    let mut f = fixture();
    let qp = f.qp(QpType::Uc);
    f.bring_to(qp, QpType::Uc, QpState::Rts);
    let (addr, lkey) = f.mr(64, AccessFlags::empty());
    let sge = [Sge {
        addr,
        length: 8,
        lkey,
    }];
    for opcode in [
        send_opcode::RDMA_READ,
        send_opcode::ATOMIC_FETCH_AND_ADD,
        send_opcode::SEND_WITH_INV,
        8,
        42,
    ] {
        let wr = SendWr {
            opcode,
            ..send_wr(&sge)
        };
        assert_eq!(errno(f.e.post_send(qp, &wr)), EINVAL, "UC opcode {opcode}");
    }
    let flags = SendWr {
        send_flags: 1 << 4,
        ..send_wr(&sge)
    };
    assert_eq!(errno(f.e.post_send(qp, &flags)), EINVAL, "IP_CSUM on UC");
    let big = [0u8; 65];
    let inline = SendWr {
        send_flags: send_flags::INLINE,
        inline_data: &big,
        ..send_wr(&[])
    };
    assert_eq!(
        errno(f.e.post_send(qp, &inline)),
        EINVAL,
        "inline above max_inline_data"
    );
    let fits = SendWr {
        inline_data: &big[..64],
        ..inline
    };
    assert_eq!(errno(f.e.post_send(qp, &fits)), 0);
    let five = [Sge {
        addr,
        length: 1,
        lkey,
    }; 5];
    assert_eq!(
        errno(f.e.post_send(qp, &send_wr(&five))),
        EINVAL,
        "above max_send_sge"
    );
    // Sends only read local memory: an MR without LOCAL_WRITE is fine.
    assert_eq!(errno(f.e.post_send(qp, &send_wr(&sge))), 0);
}

#[test]
fn send_queue_fills_with_enomem_and_keys_are_left_to_execution() {
    let mut f = fixture();
    let qp = f.qp(QpType::Rc);
    f.bring_to(qp, QpType::Rc, QpState::Rts);
    let (addr, lkey) = f.mr(64, AccessFlags::empty());
    let sge = [Sge {
        addr,
        length: 8,
        lkey,
    }];
    // A READ into an MR without LOCAL_WRITE is accepted; it fails with
    // IBV_WC_LOC_PROT_ERR when its data comes back.
    let read = SendWr {
        opcode: send_opcode::RDMA_READ,
        ..send_wr(&sge)
    };
    assert_eq!(errno(f.e.post_send(qp, &read)), 0);
    for _ in 1..caps().max_send_wr {
        assert_eq!(errno(f.e.post_send(qp, &send_wr(&sge))), 0);
    }
    assert_eq!(errno(f.e.post_send(qp, &send_wr(&sge))), ENOMEM);
}

#[test]
fn ud_send_needs_an_ah_of_the_same_pd() {
    let mut f = fixture();
    let qp = f.qp(QpType::Ud);
    f.bring_to(qp, QpType::Ud, QpState::Rts);
    assert_eq!(errno(f.e.post_send(qp, &send_wr(&[]))), EINVAL, "no AH");
    let other_pd = f.e.alloc_pd().unwrap();
    let foreign = f.e.create_ah(other_pd, &av()).unwrap();
    let ud = |ah| {
        Some(UdTarget {
            ah,
            remote_qpn: 9,
            remote_qkey: 1,
        })
    };
    let wr = SendWr {
        ud: ud(foreign),
        ..send_wr(&[])
    };
    assert_eq!(errno(f.e.post_send(qp, &wr)), EINVAL, "AH of another PD");
    let ah = f.e.create_ah(f.pd, &av()).unwrap();
    let wr = SendWr {
        ud: ud(ah),
        ..send_wr(&[])
    };
    assert_eq!(errno(f.e.post_send(qp, &wr)), 0);
    let wr = SendWr {
        opcode: send_opcode::RDMA_WRITE,
        ud: ud(ah),
        ..send_wr(&[])
    };
    assert_eq!(errno(f.e.post_send(qp, &wr)), EINVAL, "UD sends only");
}

#[test]
fn data_path_limits_are_checked_at_post_time() {
    let mut f = fixture();
    let rc = f.qp(QpType::Rc);
    f.bring_to(rc, QpType::Rc, QpState::Rts);
    let (addr, lkey) = f.mr(8192, AccessFlags::LOCAL_WRITE);
    let four = [Sge {
        addr,
        length: 4,
        lkey,
    }];
    let atomic = SendWr {
        opcode: send_opcode::ATOMIC_FETCH_AND_ADD,
        ..send_wr(&four)
    };
    assert_eq!(
        errno(f.e.post_send(rc, &atomic)),
        EINVAL,
        "an atomic's 8 bytes need room"
    );
    for length in [8, 16] {
        let room = [Sge { addr, length, lkey }];
        let atomic = SendWr {
            sg_list: &room,
            ..atomic
        };
        assert_eq!(errno(f.e.post_send(rc, &atomic)), 0, "{length} bytes");
    }
    let inline_read = SendWr {
        opcode: send_opcode::RDMA_READ,
        send_flags: send_flags::INLINE,
        inline_data: b"x",
        ..send_wr(&[])
    };
    assert_eq!(
        errno(f.e.post_send(rc, &inline_read)),
        EINVAL,
        "no inline READ"
    );

    let ud = f.qp(QpType::Ud);
    f.bring_to(ud, QpType::Ud, QpState::Rts);
    let ah = f.e.create_ah(f.pd, &av()).unwrap();
    let mtu = f.e.query_port(1).unwrap().active_mtu.bytes();
    let big = [Sge {
        addr,
        length: mtu + 1,
        lkey,
    }];
    let target = Some(UdTarget {
        ah,
        remote_qpn: 2,
        remote_qkey: 1,
    });
    let wr = SendWr {
        ud: target,
        ..send_wr(&big)
    };
    assert_eq!(
        errno(f.e.post_send(ud, &wr)),
        0,
        "a UD message above the MTU is taken (and sends nothing)"
    );
    let fits = [Sge {
        addr,
        length: mtu,
        lkey,
    }];
    let wr = SendWr {
        ud: target,
        ..send_wr(&fits)
    };
    assert_eq!(errno(f.e.post_send(ud, &wr)), 0);
}

/// How many send WRs a QP holds: moving it to ERR flushes each one.
fn flushed_sends(f: &mut Fixture, qp: QpId) -> usize {
    f.e.modify_qp(qp, &attr(QpState::Err), QpAttrMask::STATE)
        .unwrap();
    let mut wcs = Vec::new();
    f.e.poll_cq(f.cq, 64, &mut wcs).unwrap();
    wcs.len()
}

#[test]
fn a_send_batch_with_one_bad_wr_posts_nothing() {
    let mut f = fixture();
    let qp = f.qp(QpType::Rc);
    f.bring_to(qp, QpType::Rc, QpState::Rts);
    let (addr, lkey) = f.mr(64, AccessFlags::LOCAL_WRITE);
    let sge = [Sge {
        addr,
        length: 8,
        lkey,
    }];
    let mut bad = send_wr(&sge);
    bad.send_flags |= 1 << 30;
    let batch = [send_wr(&sge), send_wr(&sge), bad, send_wr(&sge)];
    assert_eq!(errno(f.e.post_send_batch(qp, &batch)), EINVAL);
    assert_eq!(
        flushed_sends(&mut f, qp),
        0,
        "nothing of the batch was posted"
    );
}

#[test]
fn a_send_batch_needs_room_for_all_its_wrs() {
    let mut f = fixture();
    let qp = f.qp(QpType::Rc);
    f.bring_to(qp, QpType::Rc, QpState::Rts);
    let (addr, lkey) = f.mr(64, AccessFlags::LOCAL_WRITE);
    let sge = [Sge {
        addr,
        length: 8,
        lkey,
    }];
    let max = caps().max_send_wr as usize;
    let batch = vec![send_wr(&sge); max + 1];
    assert_eq!(errno(f.e.post_send_batch(qp, &batch)), ENOMEM);
    assert_eq!(errno(f.e.post_send_batch(qp, &batch[..max])), 0);
    assert_eq!(flushed_sends(&mut f, qp), max);
}
