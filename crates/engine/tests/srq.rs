//! ibv_create_srq / ibv_modify_srq / ibv_query_srq rules (seed 001).

mod common;
use common::*;
use softverbs_engine::*;

fn srq_fixture(max_wr: u32) -> (Fixture, SrqId, u64, u32) {
    let mut f = fixture();
    let (srq, _) =
        f.e.create_srq(
            f.pd,
            &SrqAttr {
                max_wr,
                max_sge: 2,
                srq_limit: 0,
            },
        )
        .unwrap();
    let (addr, lkey) = f.mr(4096, AccessFlags::LOCAL_WRITE);
    (f, srq, addr, lkey)
}

fn post(f: &mut Fixture, srq: SrqId, addr: u64, lkey: u32, n: u64) {
    let sge = [Sge {
        addr,
        length: 16,
        lkey,
    }];
    for wr_id in 0..n {
        f.e.post_srq_recv(
            srq,
            &RecvWr {
                wr_id,
                sg_list: &sge,
            },
        )
        .unwrap();
    }
}

#[test]
fn create_zeroes_the_limit_and_checks_sizes() {
    let mut f = fixture();
    let d = f.e.query_device().clone();
    let (srq, actual) =
        f.e.create_srq(
            f.pd,
            &SrqAttr {
                max_wr: 8,
                max_sge: 2,
                srq_limit: 5,
            },
        )
        .unwrap();
    assert_eq!(
        actual,
        SrqAttr {
            max_wr: 8,
            max_sge: 2,
            srq_limit: 0
        }
    );
    assert_eq!(f.e.query_srq(srq).unwrap(), actual);
    let bad = [
        SrqAttr {
            max_wr: 0,
            max_sge: 1,
            srq_limit: 0,
        },
        SrqAttr {
            max_wr: d.max_srq_wr + 1,
            max_sge: 1,
            srq_limit: 0,
        },
        SrqAttr {
            max_wr: 1,
            max_sge: d.max_srq_sge + 1,
            srq_limit: 0,
        },
    ];
    for attr in bad {
        assert_eq!(errno(f.e.create_srq(f.pd, &attr)), EINVAL, "{attr:?}");
    }
}

#[test]
fn resize_grows_and_shrinks_but_not_below_outstanding_wrs() {
    let (mut f, srq, addr, lkey) = srq_fixture(8);
    post(&mut f, srq, addr, lkey, 5);
    let grow = SrqAttr {
        max_wr: 16,
        ..SrqAttr::default()
    };
    f.e.modify_srq(srq, &grow, SrqAttrMask::MAX_WR).unwrap();
    assert_eq!(f.e.query_srq(srq).unwrap().max_wr, 16);
    let too_small = SrqAttr {
        max_wr: 4,
        ..SrqAttr::default()
    };
    assert_eq!(
        errno(f.e.modify_srq(srq, &too_small, SrqAttrMask::MAX_WR)),
        EINVAL
    );
    let exact = SrqAttr {
        max_wr: 5,
        ..SrqAttr::default()
    };
    f.e.modify_srq(srq, &exact, SrqAttrMask::MAX_WR).unwrap();
    let sge = [Sge {
        addr,
        length: 16,
        lkey,
    }];
    let full = f.e.post_srq_recv(
        srq,
        &RecvWr {
            wr_id: 9,
            sg_list: &sge,
        },
    );
    assert_eq!(errno(full), ENOMEM);
    let zero = SrqAttr {
        max_wr: 0,
        ..SrqAttr::default()
    };
    assert_eq!(
        errno(f.e.modify_srq(srq, &zero, SrqAttrMask::MAX_WR)),
        EINVAL
    );
    let huge = SrqAttr {
        max_wr: u32::MAX,
        ..SrqAttr::default()
    };
    assert_eq!(
        errno(f.e.modify_srq(srq, &huge, SrqAttrMask::MAX_WR)),
        EINVAL
    );
}

#[test]
fn limit_above_max_wr_is_einval_and_arms_otherwise() {
    let (mut f, srq, _, _) = srq_fixture(8);
    let over = SrqAttr {
        srq_limit: 9,
        ..SrqAttr::default()
    };
    assert_eq!(
        errno(f.e.modify_srq(srq, &over, SrqAttrMask::LIMIT)),
        EINVAL
    );
    let ok = SrqAttr {
        srq_limit: 8,
        ..SrqAttr::default()
    };
    f.e.modify_srq(srq, &ok, SrqAttrMask::LIMIT).unwrap();
    assert_eq!(f.e.query_srq(srq).unwrap().srq_limit, 8);
    let off = SrqAttr {
        srq_limit: 0,
        ..SrqAttr::default()
    };
    f.e.modify_srq(srq, &off, SrqAttrMask::LIMIT).unwrap();
    assert_eq!(f.e.query_srq(srq).unwrap().srq_limit, 0);
}

#[test]
fn modify_is_all_or_nothing() {
    let (mut f, srq, _, _) = srq_fixture(8);
    // A valid resize with an invalid limit changes neither.
    let attr = SrqAttr {
        max_wr: 16,
        max_sge: 0,
        srq_limit: 17,
    };
    let both = SrqAttrMask::MAX_WR | SrqAttrMask::LIMIT;
    assert_eq!(errno(f.e.modify_srq(srq, &attr, both)), EINVAL);
    assert_eq!(
        f.e.query_srq(srq).unwrap(),
        SrqAttr {
            max_wr: 8,
            max_sge: 2,
            srq_limit: 0
        }
    );
    // The limit is checked against the new size when both are set.
    let attr = SrqAttr {
        max_wr: 16,
        max_sge: 0,
        srq_limit: 12,
    };
    f.e.modify_srq(srq, &attr, both).unwrap();
    assert_eq!(
        f.e.query_srq(srq).unwrap(),
        SrqAttr {
            max_wr: 16,
            max_sge: 2,
            srq_limit: 12
        }
    );
}

#[test]
fn shrinking_below_an_armed_limit_is_einval() {
    let (mut f, srq, _, _) = srq_fixture(8);
    let arm = SrqAttr {
        srq_limit: 6,
        ..SrqAttr::default()
    };
    f.e.modify_srq(srq, &arm, SrqAttrMask::LIMIT).unwrap();
    let shrink = SrqAttr {
        max_wr: 4,
        ..SrqAttr::default()
    };
    assert_eq!(
        errno(f.e.modify_srq(srq, &shrink, SrqAttrMask::MAX_WR)),
        EINVAL
    );
}

#[test]
fn unknown_mask_bits_are_einval_and_max_sge_is_ignored() {
    let (mut f, srq, _, _) = srq_fixture(8);
    let attr = SrqAttr {
        max_wr: 8,
        max_sge: 30,
        srq_limit: 1,
    };
    let unknown = SrqAttrMask::from_bits_retain(1 << 2);
    assert_eq!(errno(f.e.modify_srq(srq, &attr, unknown)), EINVAL);
    f.e.modify_srq(srq, &attr, SrqAttrMask::empty()).unwrap();
    assert_eq!(
        f.e.query_srq(srq).unwrap(),
        SrqAttr {
            max_wr: 8,
            max_sge: 2,
            srq_limit: 0
        }
    );
}

#[test]
fn post_srq_recv_checks_sge_count_and_leaves_keys_to_execution() {
    let (mut f, srq, addr, lkey) = srq_fixture(8);
    let mut post = |sges: &[Sge]| {
        errno(f.e.post_srq_recv(
            srq,
            &RecvWr {
                wr_id: 0,
                sg_list: sges,
            },
        ))
    };
    assert_eq!(
        post(
            &[Sge {
                addr,
                length: 1,
                lkey
            }; 3]
        ),
        EINVAL,
        "above max_sge"
    );
    assert_eq!(
        post(&[Sge {
            addr,
            length: 1,
            lkey: lkey ^ 1
        }]),
        0,
        "checked when used"
    );
    assert_eq!(
        post(&[Sge {
            addr: addr + 4090,
            length: 16,
            lkey
        }]),
        0,
        "checked when used"
    );
}
