//! Runs operation sequences on an engine and on the model side by side and
//! fails at the first disagreement: a different outcome (Ok or errno), a
//! different value returned, or, after every operation, a different
//! queried state of any live QP or SRQ or a different number of objects.

mod choose;
pub(crate) mod modify;
mod verbs;

use crate::coverage::Coverage;
use crate::model::{Model, ModelMr};
use crate::names::state_to_raw;
use crate::ops::{starter_qp, Op, Pick};
use crate::stored::masked_view;
use crate::table::TransitionTable;
use crate::Outcome;
use softverbs_engine::{
    AhId, CqId, DeviceConfig, Engine, MrId, PdId, QpId, QpType, SrqId, VerbsResult,
};

/// Why a run failed.
pub type Check = Result<(), String>;

/// Every handle ever created, in creation order, destroyed ones included:
/// operations pick from these, which is how stale handles get used.
#[derive(Debug, Default)]
struct Ever {
    pds: Vec<PdId>,
    cqs: Vec<CqId>,
    mrs: Vec<(MrId, ModelMr)>,
    ahs: Vec<AhId>,
    srqs: Vec<SrqId>,
    qps: Vec<QpId>,
}

/// An engine, the model of what it should hold, and the handles used.
#[derive(Debug)]
pub struct World {
    engine: Engine,
    model: Model,
    ever: Ever,
    next_wr_id: u64,
    coverage: Coverage,
}

impl World {
    /// A loopback device with two PDs, two CQs, three MRs (one with
    /// LOCAL_WRITE and one without in the first PD, one with LOCAL_WRITE
    /// in the second) and a QP of each type in the first PD: sequences
    /// start with QPs to move, so that they get deep into the state machine.
    pub fn new(seed: u64, table: TransitionTable) -> Result<World, String> {
        let mut w = World {
            engine: Engine::new(DeviceConfig::loopback(seed)),
            model: Model::new(table),
            ever: Ever::default(),
            next_wr_id: 1,
            coverage: Coverage::default(),
        };
        for op in [Op::AllocPd, Op::AllocPd, Op::CreateCq, Op::CreateCq] {
            w.apply(&op)?;
        }
        let (pd0, pd1) = (w.ever.pds[0], w.ever.pds[1]);
        w.reg_mr(pd0, true)?;
        w.reg_mr(pd0, false)?;
        w.reg_mr(pd1, true)?;
        for qp_type in [QpType::Rc, QpType::Uc, QpType::Ud] {
            // Pick(1) names the first live object here (crate::harness::choose).
            w.apply(&Op::CreateQp(starter_qp(qp_type, Pick(1))))?;
        }
        Ok(w)
    }

    /// Runs `ops`, checking after each, then drains events and CQs and
    /// compares them.
    pub fn run(&mut self, ops: &[Op]) -> Check {
        for (i, op) in ops.iter().enumerate() {
            self.apply(op)
                .and_then(|()| self.check_all())
                .map_err(|e| format!("op {i} {op:?}: {e}"))?;
            self.coverage.ops += 1;
        }
        self.drain().map_err(|e| format!("final drain: {e}"))
    }

    /// What the run reached.
    pub fn coverage(&self) -> &Coverage {
        &self.coverage
    }

    /// Compares the outcomes of one verb; both values when both succeeded.
    fn judge<T, U>(
        &mut self,
        verb: &'static str,
        actual: Outcome<T>,
        expected: Outcome<U>,
    ) -> Result<Option<(T, U)>, String> {
        self.coverage
            .outcome(verb, expected.as_ref().err().copied().unwrap_or(0));
        match (actual, expected) {
            (Ok(a), Ok(e)) => Ok(Some((a, e))),
            (Err(a), Err(e)) if a == e => Ok(None),
            (a, e) => Err(format!(
                "{verb}: engine returned {:?}, model expects {:?}",
                a.map(drop),
                e.map(drop)
            )),
        }
    }

    /// After every operation: object counts, every live QP and SRQ.
    fn check_all(&self) -> Check {
        let (engine, model) = (self.engine.object_counts(), self.model.object_counts());
        if engine != model {
            return Err(format!(
                "object counts (pd, mr, ah, cq, srq, qp): engine {engine:?}, model {model:?}"
            ));
        }
        for &qp in self
            .ever
            .qps
            .iter()
            .filter(|q| self.model.qp(**q).is_some())
        {
            self.check_qp(qp)?;
        }
        for &srq in self
            .ever
            .srqs
            .iter()
            .filter(|s| self.model.srq(**s).is_some())
        {
            self.check_srq(srq)?;
        }
        Ok(())
    }

    /// `query_qp` against the model: state, every attribute ever set, caps,
    /// init attributes, sq_draining (never draining: nothing is in flight),
    /// and the QP number both ways.
    fn check_qp(&self, id: QpId) -> Check {
        let view = self.model.query_qp(id).expect("live QP");
        let (attr, init) = self
            .engine
            .query_qp(id)
            .map_err(|e| format!("query_qp of a live QP: {e}"))?;
        let stored = masked_view(&attr, view.set);
        let facts = [
            ("qp_state", attr.qp_state == state_to_raw(view.state)),
            ("stored attributes", stored == view.stored),
            ("cap", attr.cap == view.init.cap),
            ("sq_draining", attr.sq_draining == 0),
            ("init attributes", init == view.init),
            ("qp_num", errno(self.engine.qp_num(id)) == Ok(view.qp_num)),
            ("qp_by_num", self.engine.qp_by_num(view.qp_num) == Some(id)),
        ];
        match facts.iter().find(|(_, ok)| !ok) {
            None => Ok(()),
            Some((what, _)) => Err(format!(
                "query_qp {what} differs:\n engine {attr:?}\n {init:?}\n model {view:?}"
            )),
        }
    }

    /// `query_srq` and the number of waiting WRs against the model.
    fn check_srq(&self, id: SrqId) -> Check {
        let expected = self.model.query_srq(id);
        let actual = errno(self.engine.query_srq(id));
        let posted = self.model.srq(id).map(|s| s.posted);
        let len = errno(self.engine.srq_len(id)).ok();
        if actual != expected || len != posted {
            return Err(format!(
                "query_srq: engine {actual:?} with {len:?} WRs, model {expected:?} with {posted:?}"
            ));
        }
        Ok(())
    }

    /// Every pending event and every completion left in a live CQ.
    fn drain(&mut self) -> Check {
        self.apply(&Op::PollEvents)?;
        let cqs: Vec<CqId> = self
            .ever
            .cqs
            .iter()
            .copied()
            .filter(|c| self.model.has_cq(*c))
            .collect();
        for cq in cqs {
            self.poll_cq(cq, usize::MAX)?;
        }
        Ok(())
    }
}

/// An engine result as the model writes outcomes.
fn errno<T>(r: VerbsResult<T>) -> Outcome<T> {
    r.map_err(|e| e.errno())
}
