//! Model-based tests of the engine's verbs rules against the reference
//! model of `softverbs-conformance`, whose QP transition table is parsed
//! from docs/conformance.md.
//!
//! * Random operation sequences run on engine and model side by side
//!   (`engine_agrees_with_model_on_random_sequences`).
//! * Every table row, walked deterministically: the required bits succeed,
//!   a missing required bit or a bit the row does not allow fails.
//! * Every transition not in the table fails and changes nothing.
//! * The parsed table equals the engine's own table, so docs and code agree.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, TestCaseError, TestRunner};
use softverbs_conformance::bringup::{valid_attr, Fixture};
use softverbs_conformance::coverage::Coverage;
use softverbs_conformance::harness::World;
use softverbs_conformance::names::{state_to_raw, STATES, TYPES};
use softverbs_conformance::ops::op;
use softverbs_conformance::{Row, TransitionTable, EBUSY, EINVAL, ENOMEM, EOPNOTSUPP};
use softverbs_engine::{transition_rule, QpAttr, QpAttrMask as M, QpId, QpState};
use std::cell::RefCell;
use std::time::Instant;

/// Random sequences per run, each of 1 to 60 operations: about 2 s in
/// release mode (what `make test` runs); fewer in debug builds, which are
/// some 25 times slower, yet enough for the coverage assertions.
const CASES: u32 = if cfg!(debug_assertions) { 2000 } else { 10000 };

/// Seeds of failing sequences, replayed first on the next run. The path is
/// absolute because the test runs in the package directory while `file!()`
/// is relative to the workspace.
const REGRESSIONS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/qp_model.proptest-regressions"
);

#[test]
fn parsed_table_matches_engine_transition_rule() {
    let table = TransitionTable::load();
    for ty in TYPES {
        for from in STATES {
            for to in STATES {
                let docs = table.rule(ty, from, to).map(|r| (r.required, r.optional));
                let code = transition_rule(from, to, ty).map(|r| (r.required, r.optional));
                assert_eq!(docs, code, "{ty:?} {from:?}->{to:?}: docs vs engine");
            }
        }
    }
}

#[test]
fn every_table_row_behaves_as_documented() {
    let table = TransitionTable::load();
    let mut fx = Fixture::new(&table);
    for row in table.rows() {
        // SQE is entered only by a send error on the data path (UC, UD);
        // modify_qp cannot bring a QP there, so the rows leaving SQE are
        // checked only against the engine's table above.
        if row.from == QpState::Sqe {
            continue;
        }
        required_bits_suffice(&mut fx, row);
        each_required_bit_is_needed(&mut fx, row);
        bits_outside_the_row_are_refused(&mut fx, row);
        each_optional_bit_is_accepted(&mut fx, row);
    }
}

fn required_bits_suffice(fx: &mut Fixture, row: &Row) {
    let qp = fx.qp_at(row.ty, row.from);
    let mask = M::STATE | row.rule.required;
    assert_eq!(fx.modify(qp, row.from, row.to, mask), Ok(()), "{row:?}");
    let (attr, _) = fx.snapshot(qp);
    assert_eq!(attr.qp_state, state_to_raw(row.to), "{row:?}");
}

fn each_required_bit_is_needed(fx: &mut Fixture, row: &Row) {
    let qp = fx.qp_at(row.ty, row.from);
    let attr = valid_attr(row.from, row.to);
    for bit in row.rule.required.iter() {
        let mask = (M::STATE | row.rule.required) - bit;
        expect_refused(fx, qp, &attr, mask, &format!("{row:?} without {bit:?}"));
    }
}

fn bits_outside_the_row_are_refused(fx: &mut Fixture, row: &Row) {
    let qp = fx.qp_at(row.ty, row.from);
    let attr = valid_attr(row.from, row.to);
    let base = M::STATE | row.rule.required;
    let foreign = M::all() - row.rule.allowed();
    for bit in foreign.iter() {
        expect_refused(fx, qp, &attr, base | bit, &format!("{row:?} with {bit:?}"));
    }
    // Bits enum ibv_qp_attr_mask does not define (EOPNOTSUPP).
    for n in [21, 22, 23, 24, 26, 31] {
        let mask = base | M::from_bits_retain(1 << n);
        expect_refused(
            fx,
            qp,
            &attr,
            mask,
            &format!("{row:?} with unknown bit {n}"),
        );
    }
}

/// An optional bit with a valid value is accepted, except ALT_PATH: the
/// device has no APM, so no alternate path can be loaded (EINVAL).
fn each_optional_bit_is_accepted(fx: &mut Fixture, row: &Row) {
    for bit in row.rule.optional.iter() {
        let qp = fx.qp_at(row.ty, row.from);
        let expected = if bit == M::ALT_PATH {
            Err(EINVAL)
        } else {
            Ok(())
        };
        let mask = M::STATE | row.rule.required | bit;
        assert_eq!(
            fx.modify(qp, row.from, row.to, mask),
            expected,
            "{row:?} with {bit:?}"
        );
    }
}

#[test]
fn transitions_not_in_table_fail_and_change_nothing() {
    let table = TransitionTable::load();
    let mut fx = Fixture::new(&table);
    for ty in TYPES {
        let named = table.rows().iter().filter(|r| r.ty == ty);
        let every_bit = named.fold(M::STATE, |m, r| m | r.rule.allowed()) - M::ALT_PATH;
        // SQE cannot be reached by modify_qp (see above).
        for from in STATES.into_iter().filter(|s| *s != QpState::Sqe) {
            let qp = fx.qp_at(ty, from);
            for to in STATES
                .into_iter()
                .filter(|to| table.rule(ty, from, *to).is_none())
            {
                let attr = valid_attr(from, to);
                let what = format!("{ty:?} {from:?}->{to:?}");
                expect_refused(&mut fx, qp, &attr, M::STATE, &what);
                expect_refused(&mut fx, qp, &attr, every_bit, &format!("{what}, all bits"));
                if to == from {
                    // Without IBV_QP_STATE a modify is the move to the same state.
                    expect_refused(&mut fx, qp, &attr, M::empty(), &format!("{what}, no bits"));
                    expect_refused(
                        &mut fx,
                        qp,
                        &attr,
                        every_bit - M::STATE,
                        &format!("{what}, no STATE"),
                    );
                }
            }
            for raw in [7, 8, u32::MAX] {
                let attr = QpAttr {
                    qp_state: raw,
                    ..valid_attr(from, from)
                };
                expect_refused(
                    &mut fx,
                    qp,
                    &attr,
                    M::STATE,
                    &format!("{ty:?} {from:?}->raw {raw}"),
                );
            }
        }
    }
}

/// The modify fails with EINVAL (EOPNOTSUPP for a mask bit past
/// IBV_QP_DEST_QPN, as libibverbs and the kernel) and the QP, its CQ and
/// the events are as they were (ibv_modify_qp(3): "none of the attributes
/// will be modified").
fn expect_refused(fx: &mut Fixture, qp: QpId, attr: &QpAttr, mask: M, what: &str) {
    while fx.engine.poll_event().is_some() {}
    let before = fx.snapshot(qp);
    let result = fx.engine.modify_qp(qp, attr, mask).map_err(|e| e.errno());
    let errno = if mask.bits() >> 21 != 0 {
        EOPNOTSUPP
    } else {
        EINVAL
    };
    assert_eq!(result, Err(errno), "{what}: mask {mask:?}");
    assert_eq!(
        fx.snapshot(qp),
        before,
        "{what}: a refused modify changed the QP"
    );
    assert_eq!(
        fx.engine.poll_event(),
        None,
        "{what}: a refused modify raised an event"
    );
    let mut wcs = Vec::new();
    let polled = fx.engine.poll_cq(fx.cq, usize::MAX, &mut wcs);
    assert_eq!(polled, Ok(0), "{what}: a refused modify completed WRs");
}

#[test]
fn engine_agrees_with_model_on_random_sequences() {
    let table = TransitionTable::load();
    let total = RefCell::new(Coverage::default());
    let config = ProptestConfig {
        cases: CASES,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(REGRESSIONS))),
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let started = Instant::now();
    let result = runner.run(&(any::<u64>(), vec(op(), 1..=60)), |(seed, ops)| {
        let mut world = World::new(seed, table.clone()).map_err(TestCaseError::fail)?;
        world.run(&ops).map_err(TestCaseError::fail)?;
        total.borrow_mut().merge(world.coverage());
        Ok(())
    });
    if let Err(e) = result {
        panic!("engine and model disagree: {e}");
    }
    let total = total.into_inner();
    println!(
        "{CASES} sequences in {:?}\n{}",
        started.elapsed(),
        total.summary()
    );
    assert_covered(&table, &total);
}

/// The sequences must have reached every table row (SQE aside), side
/// effect and error path; otherwise the generator has drifted and the
/// agreement above proves less than it claims.
fn assert_covered(table: &TransitionTable, c: &Coverage) {
    for row in table.rows().iter().filter(|r| r.from != QpState::Sqe) {
        let key = (row.ty as u32, state_to_raw(row.from), state_to_raw(row.to));
        assert!(c.transitions.contains_key(&key), "never took {row:?}");
    }
    let paths = [
        ("create_qp", 0),
        ("create_qp", EINVAL),
        ("create_qp", EOPNOTSUPP),
        ("modify_qp", 0),
        ("modify_qp", EINVAL),
        ("post_recv", 0),
        ("post_recv", EINVAL),
        ("post_recv", ENOMEM),
        ("post_srq_recv", 0),
        ("post_srq_recv", ENOMEM),
        ("modify_srq", 0),
        ("modify_srq", EINVAL),
        ("dealloc_pd", EBUSY),
        ("destroy_cq", EBUSY),
        ("destroy_srq", EBUSY),
        ("destroy_qp", 0),
        ("create_ah", EINVAL),
    ];
    for (verb, errno) in paths {
        assert!(c.count(verb, errno) > 0, "{verb} never ended with {errno}");
    }
    assert!(c.flushed > 0, "no flushed completion was ever polled");
    for (event, name) in [(5, "SQ_DRAINED"), (16, "QP_LAST_WQE_REACHED")] {
        assert!(
            c.events.contains_key(&event),
            "IBV_EVENT_{name} never raised"
        );
    }
}
