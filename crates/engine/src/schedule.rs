//! Which QPs have packets to send and when QP timers expire.
//!
//! `poll_transmit` serves QPs round-robin from a ready queue instead of
//! scanning every QP, and timer deadlines sit in an ordered set, so the cost
//! of a packet or a timer does not grow with the number of idle QPs. The
//! per-QP marks are secondary maps indexed by the QP's slot, not hash
//! tables: hashing QP ids was 5% of a sender's CPU.

use crate::handles::QpId;
use crate::time::Nanos;
use slotmap::SecondaryMap;
use std::collections::{BTreeSet, VecDeque};

/// The engine's transmit and timer schedule.
#[derive(Debug, Default)]
pub(crate) struct Schedule {
    ready: VecDeque<QpId>,
    queued: SecondaryMap<QpId, ()>,
    timers: BTreeSet<(Nanos, QpId)>,
    deadline: SecondaryMap<QpId, Nanos>,
    /// QPs on the same-host path: woken into `direct_ready`, served by
    /// `poll_direct` instead of `poll_transmit`.
    direct: SecondaryMap<QpId, ()>,
    direct_ready: VecDeque<QpId>,
    direct_queued: SecondaryMap<QpId, ()>,
}

impl Schedule {
    /// Marks a QP as possibly having something to send.
    pub(crate) fn wake(&mut self, qp: QpId) {
        if self.direct.contains_key(qp) {
            if self.direct_queued.insert(qp, ()).is_none() {
                self.direct_ready.push_back(qp);
            }
        } else if self.queued.insert(qp, ()).is_none() {
            self.ready.push_back(qp);
        }
    }

    /// Marks a QP as possibly having packets to send, on either path: a
    /// same-host QP still answers the requests that reach it as packets
    /// (its peer chose the wire), with packets.
    pub(crate) fn wake_transmit(&mut self, qp: QpId) {
        if self.queued.insert(qp, ()).is_none() {
            self.ready.push_back(qp);
        }
    }

    /// Serves QP `qp` through `next_direct_ready` (same-host path) or
    /// `next_ready` (packets) from now on.
    pub(crate) fn set_direct(&mut self, qp: QpId, on: bool) {
        if on {
            self.direct.insert(qp, ());
        } else if self.direct.remove(qp).is_some() && self.direct_queued.remove(qp).is_some() {
            self.direct_ready.retain(|q| *q != qp);
        }
    }

    /// The next same-host QP to ask for an operation; it leaves the queue
    /// until woken.
    pub(crate) fn next_direct_ready(&mut self) -> Option<QpId> {
        let qp = self.direct_ready.pop_front()?;
        self.direct_queued.remove(qp);
        Some(qp)
    }

    /// The next QP to ask for a packet; it leaves the queue until woken.
    pub(crate) fn next_ready(&mut self) -> Option<QpId> {
        let qp = self.ready.pop_front()?;
        self.queued.remove(qp);
        Some(qp)
    }

    /// Sets (or with `None` clears) the QP's timer deadline.
    pub(crate) fn set_timer(&mut self, qp: QpId, at: Option<Nanos>) {
        if self.deadline.get(qp).copied() == at {
            return;
        }
        if let Some(old) = self.deadline.remove(qp) {
            self.timers.remove(&(old, qp));
        }
        if let Some(at) = at {
            self.deadline.insert(qp, at);
            self.timers.insert((at, qp));
        }
    }

    /// The earliest deadline.
    pub(crate) fn next_deadline(&self) -> Option<Nanos> {
        self.timers.first().map(|&(at, _)| at)
    }

    /// A QP whose deadline is at or before `now`; its timer is cleared.
    pub(crate) fn pop_expired(&mut self, now: Nanos) -> Option<QpId> {
        let &(at, qp) = self.timers.first()?;
        if at > now {
            return None;
        }
        self.set_timer(qp, None);
        Some(qp)
    }

    /// Drops everything about a destroyed QP.
    pub(crate) fn forget(&mut self, qp: QpId) {
        self.set_timer(qp, None);
        self.set_direct(qp, false);
        if self.queued.remove(qp).is_some() {
            self.ready.retain(|q| *q != qp);
        }
    }
}
