//! The reference model: the objects an engine should hold after a sequence
//! of verbs and the outcome every verb should have. Each verb method
//! returns the expected `Ok` or errno and, on success, updates the model;
//! creation is split into a check (`check_create_*`) and an insert taking
//! the handle the engine handed out, since handles are the engine's to
//! choose.
//!
//! Use counts are not counters here but derived by scanning the objects:
//! a PD is busy while some MR, AH, SRQ or QP names it, and so on.

mod post;
mod qp;
mod resources;
mod srq;

pub use qp::{ModelQp, QpView};
pub use resources::ModelMr;
pub use srq::ModelSrq;

use crate::table::TransitionTable;
use softverbs_engine::{AhId, AsyncEvent, CqId, MrId, PdId, QpId, SrqId, WorkCompletion};
use std::collections::{HashMap, HashSet, VecDeque};

/// The expected state of one device context.
#[derive(Debug, Clone)]
pub struct Model {
    table: TransitionTable,
    pds: HashSet<PdId>,
    mrs: HashMap<MrId, ModelMr>,
    ahs: HashMap<AhId, PdId>,
    cqs: HashMap<CqId, VecDeque<WorkCompletion>>,
    srqs: HashMap<SrqId, ModelSrq>,
    qps: HashMap<QpId, ModelQp>,
    events: VecDeque<AsyncEvent>,
}

impl Model {
    /// An empty device context that follows `table`.
    pub fn new(table: TransitionTable) -> Model {
        Model {
            table,
            pds: HashSet::new(),
            mrs: HashMap::new(),
            ahs: HashMap::new(),
            cqs: HashMap::new(),
            srqs: HashMap::new(),
            qps: HashMap::new(),
            events: VecDeque::new(),
        }
    }

    /// The transition table the model follows.
    pub fn table(&self) -> &TransitionTable {
        &self.table
    }

    /// Number of live objects: (pd, mr, ah, cq, srq, qp), the order of
    /// `Engine::object_counts`.
    pub fn object_counts(&self) -> [usize; 6] {
        [
            self.pds.len(),
            self.mrs.len(),
            self.ahs.len(),
            self.cqs.len(),
            self.srqs.len(),
            self.qps.len(),
        ]
    }

    /// Every async event raised and not yet taken, oldest first.
    pub fn take_events(&mut self) -> Vec<AsyncEvent> {
        self.events.drain(..).collect()
    }
}
