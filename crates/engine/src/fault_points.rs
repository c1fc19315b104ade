//! Where the engine applies fault rules (`SOFTVERBS_FAULTS`, the
//! `softverbs_faults` crate): a post refused with the rule's errno, a
//! completion reported with an error status (its QP then enters ERR, as
//! on a device that failed the WR), a completion held back, and a QP moved
//! to ERR with IBV_EVENT_QP_FATAL after N WRs or at a time. An engine
//! without rules pays one `Option` test at each point.

use crate::ctx::{queue_completion, Queued};
use crate::engine::Engine;
use crate::error::{VerbsError, VerbsResult};
use crate::event::AsyncEvent;
use crate::handles::{CqId, QpId};
use crate::qp_state::QpState;
use crate::time::Nanos;
use crate::wc::{WcStatus, WorkCompletion};
use softverbs_faults::{Faults, Queue, TimedQpError};
use std::collections::VecDeque;
use std::time::Duration;

/// A device's rules and what they hold back.
#[derive(Debug)]
pub(crate) struct FaultState {
    pub(crate) rules: Faults,
    /// Completions held back, in the order they were made.
    held: VecDeque<Held>,
    /// `qp_error at=` rules that have not fired, and when they fire.
    timed: Vec<(TimedQpError, Nanos)>,
    /// The latest time the engine was given: a delay counts from it.
    pub(crate) now: Nanos,
    /// When the rules were set (the device opened): rule windows and
    /// `at=` count from it.
    opened: Nanos,
}

/// A completion held back until `due`.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) due: Nanos,
    pub(crate) cq: CqId,
    pub(crate) wc: WorkCompletion,
    pub(crate) solicited: bool,
}

/// What becomes of a completion.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Queued now.
    Queue,
    /// Held back (with [`FaultState::take_due`] it comes later).
    Held,
}

impl FaultState {
    /// `rules` for an engine whose clock reads `now`.
    pub(crate) fn new(rules: Faults, now: Nanos) -> FaultState {
        let timed = rules
            .timed_qp_errors()
            .map(|t| (t, now.saturating_add(nanos(t.at))))
            .collect();
        FaultState {
            rules,
            held: VecDeque::new(),
            timed,
            now,
            opened: now,
        }
    }

    /// The time since the rules were set, as of the latest call.
    pub(crate) fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.now.saturating_sub(self.opened))
    }

    /// When the engine must next be called for a held completion or a
    /// timed QP error.
    pub(crate) fn next_deadline(&self) -> Option<Nanos> {
        let held = self.held.iter().map(|h| h.due);
        held.chain(self.timed.iter().map(|t| t.1)).min()
    }

    /// A completion about to be queued on `cq`, of a WR that carried
    /// `carried` bytes: a successful one may be
    /// rewritten to a rule's error status (`failed` then says so), and any
    /// may be held back: by a delay rule, or behind an earlier completion
    /// of its CQ that is held, so a CQ's order is kept.
    pub(crate) fn on_completion(
        &mut self,
        cq: CqId,
        wc: &mut WorkCompletion,
        carried: u32,
        solicited: bool,
        failed: &mut bool,
    ) -> Verdict {
        let mut delay = None;
        if wc.status == WcStatus::Success {
            let at = self.elapsed();
            let f = (self.rules).completion(at, wc.qp_num, wc.opcode as u32, carried);
            if let Some((status, vendor_err)) = f.fail {
                wc.status = WcStatus::from_c(status).unwrap_or(WcStatus::GeneralErr);
                wc.vendor_err = vendor_err;
                *failed = true;
            }
            delay = f.delay;
        }
        let behind = self.held.iter().filter(|h| h.cq == cq).map(|h| h.due).max();
        let due = match (delay, behind) {
            (None, None) => return Verdict::Queue,
            (d, b) => d
                .map_or(0, |d| self.now.saturating_add(nanos(d)))
                .max(b.unwrap_or(0)),
        };
        self.held.push_back(Held {
            due,
            cq,
            wc: *wc,
            solicited,
        });
        Verdict::Held
    }

    /// The held completions due at `now`, in order; a CQ's stop at its
    /// first one not due.
    pub(crate) fn take_due(&mut self, now: Nanos) -> Vec<Held> {
        let mut waiting: Vec<CqId> = Vec::new();
        let mut due = Vec::new();
        let mut kept = VecDeque::new();
        for h in self.held.drain(..) {
            if h.due <= now && !waiting.contains(&h.cq) {
                due.push(h);
            } else {
                waiting.push(h.cq);
                kept.push_back(h);
            }
        }
        self.held = kept;
        due
    }

    /// The `qp_error at=` rules due at `now` (each fires once).
    pub(crate) fn take_timed(&mut self, now: Nanos) -> Vec<TimedQpError> {
        let (due, kept) = self.timed.iter().partition(|t| t.1 <= now);
        self.timed = kept;
        due.into_iter()
            .map(|t: (TimedQpError, Nanos)| t.0)
            .collect()
    }

    /// QP `qp_num` was reset or destroyed: its held completions on `cq`
    /// go, as its queued ones do.
    pub(crate) fn forget(&mut self, cq: CqId, qp_num: u32) {
        self.held.retain(|h| !(h.cq == cq && h.wc.qp_num == qp_num));
    }
}

fn nanos(d: Duration) -> Nanos {
    Nanos::try_from(d.as_nanos()).unwrap_or(Nanos::MAX)
}

impl Engine {
    /// Applies fault rules from now on (`now` is the engine's clock; a
    /// `qp_error at=` rule counts from it).
    pub fn set_faults(&mut self, rules: Faults, now: Nanos) {
        self.faults = Some(Box::new(FaultState::new(rules, now)));
    }

    /// The embedder's clock as it starts a piece of work that may
    /// complete WRs without a call that carries the time (a verb, the
    /// same-host path's deliveries): a completion delay counts from it.
    pub fn set_time(&mut self, now: Nanos) {
        self.note_fault_time(now);
    }

    /// The time of the call the engine is in, for delays.
    pub(crate) fn note_fault_time(&mut self, now: Nanos) {
        if let Some(f) = self.faults.as_deref_mut() {
            f.now = now;
        }
    }

    /// The errno a post rule gives a checked WR of `bytes` for QP number
    /// `qp_num` (`u32::MAX` for an SRQ, which no `qp=` names), if one
    /// fires.
    pub(crate) fn post_fault(
        &mut self,
        queue: Queue,
        qp_num: u32,
        opcode: Option<u32>,
        bytes: u64,
    ) -> VerbsResult<()> {
        let faults = self.faults.as_deref_mut();
        match faults.and_then(|f| f.rules.post(f.elapsed(), queue, qp_num, opcode, bytes)) {
            Some(errno) => Err(VerbsError::chosen(errno)),
            None => Ok(()),
        }
    }

    /// A WR was posted to QP `id`: a `qp_error after=N` rule may fail it.
    pub(crate) fn count_post(&mut self, id: QpId) {
        let Some(f) = self
            .faults
            .as_deref_mut()
            .filter(|f| f.rules.counts_posts())
        else {
            return;
        };
        if f.rules.posted(self.qps[id].qp_num) {
            self.fail_qp(id);
        }
    }

    /// QP number `qp_num` is no more: its WR count starts again.
    pub(crate) fn forget_fault_counts(&mut self, qp_num: u32) {
        if let Some(f) = self.faults.as_deref_mut() {
            f.rules.forget_qp(qp_num);
        }
    }

    /// When held completions or timed QP errors are due.
    pub(crate) fn fault_deadline(&self) -> Option<Nanos> {
        self.faults.as_deref().and_then(FaultState::next_deadline)
    }

    /// Queues the held completions due at `now` and fails the QPs of the
    /// `qp_error at=` rules due.
    pub(crate) fn run_fault_timers(&mut self, now: Nanos) {
        let Some(f) = self.faults.as_deref_mut() else {
            return;
        };
        f.now = now;
        let (due, timed) = (f.take_due(now), f.take_timed(now));
        for h in due {
            let queued = queue_completion(
                &mut self.cqs,
                &mut self.events,
                &mut self.comp_events,
                h.cq,
                h.wc,
                h.solicited,
            );
            if queued == Queued::Lost {
                if let Some(id) = self.qp_by_num(h.wc.qp_num) {
                    self.fail_qp(id);
                }
            }
        }
        for rule in timed {
            let hit: Vec<(QpId, u32)> = (self.qps.iter())
                .filter(|(_, qp)| rule.qp.is_none_or(|n| n == qp.qp_num))
                .map(|(id, qp)| (id, qp.qp_num))
                .collect();
            for (id, qp_num) in hit {
                if let (true, Some(f)) = (self.fail_qp(id), self.faults.as_deref_mut()) {
                    f.rules.fired(rule.rule, Some(qp_num));
                }
            }
        }
    }

    /// Moves QP `id` to ERR with IBV_EVENT_QP_FATAL, as a device does
    /// when it cannot go on with a QP; a QP in RESET or ERR has nothing
    /// to fail. Whether it failed.
    fn fail_qp(&mut self, id: QpId) -> bool {
        let failed = self.with_qp(id, |qp, ctx| {
            let live = !matches!(qp.state, QpState::Reset | QpState::Err);
            if live {
                ctx.event(AsyncEvent::QpFatal(id));
                qp.enter_error(ctx);
            }
            live
        });
        self.schedule.wake(id);
        self.sync_timer(id);
        failed == Some(true)
    }
}
