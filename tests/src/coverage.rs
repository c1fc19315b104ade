//! What random sequences reached: transitions taken, outcomes per verb,
//! flushed completions and events. The property test asserts that its
//! sequences cover every table row and error path, so that a generator
//! change cannot silently stop testing something.

use std::collections::BTreeMap;
use std::fmt::Write;

/// Counters of one or many sequences.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Successful modifies naming IBV_QP_STATE, by (type, from, to) as
    /// raw numbers.
    pub transitions: BTreeMap<(u32, u32, u32), usize>,
    /// Outcomes by verb: 0 for success, else the errno.
    pub outcomes: BTreeMap<(&'static str, i32), usize>,
    /// WR_FLUSH_ERR completions polled.
    pub flushed: usize,
    /// Async events polled, by `ibv_event_type`.
    pub events: BTreeMap<u32, usize>,
    /// Operations run.
    pub ops: usize,
}

impl Coverage {
    /// Adds another run's counters.
    pub fn merge(&mut self, other: &Coverage) {
        for (k, n) in &other.transitions {
            *self.transitions.entry(*k).or_default() += n;
        }
        for (k, n) in &other.outcomes {
            *self.outcomes.entry(*k).or_default() += n;
        }
        for (k, n) in &other.events {
            *self.events.entry(*k).or_default() += n;
        }
        self.flushed += other.flushed;
        self.ops += other.ops;
    }

    /// Counts one verb outcome (0 = success).
    pub fn outcome(&mut self, verb: &'static str, errno: i32) {
        *self.outcomes.entry((verb, errno)).or_default() += 1;
    }

    /// How often `verb` ended with `errno` (0 = success).
    pub fn count(&self, verb: &'static str, errno: i32) -> usize {
        self.outcomes.get(&(verb, errno)).copied().unwrap_or(0)
    }

    /// A readable summary, printed by the property test.
    pub fn summary(&self) -> String {
        let mut s = format!("{} ops, {} flushed completions\n", self.ops, self.flushed);
        for ((verb, errno), n) in &self.outcomes {
            let _ = writeln!(s, "  {verb:<14} {errno:>3}: {n}");
        }
        let _ = writeln!(s, "  events by type: {:?}", self.events);
        let _ = writeln!(s, "  transitions (type, from, to): {:?}", self.transitions);
        s
    }
}
