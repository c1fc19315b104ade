//! Completion events (`ibv_req_notify_cq`, `ibv_get_cq_event`): the CQs
//! armed for one and the events queued, kept together so that whether
//! any CQ is armed is a count, not a scan of every CQ. The transport
//! asks before it keeps a part-filled send batch for the next post
//! (`corked_batch.rs`): a thread about to sleep for an event must not be
//! left waiting for it.

use crate::handles::CqId;
use crate::objects::Cq;
use std::collections::VecDeque;

/// The engine's completion events.
#[derive(Debug, Default)]
pub(crate) struct CompletionEvents {
    /// Events not yet taken, oldest first.
    queued: VecDeque<CqId>,
    /// CQs whose `notify` is set.
    armed: usize,
}

impl CompletionEvents {
    /// `ibv_req_notify_cq` on CQ `id`: the next completion (with
    /// `solicited_only`, the next solicited or failed one) queues one
    /// event. One the CQ already holds, not yet polled, counts too if no
    /// event reported it: a program that polls its CQ empty, arms it and
    /// sleeps without polling again (UCX) would otherwise sleep through a
    /// completion that came in between (rxe reports none there). One an
    /// event reported does not count until a poll takes some of what the
    /// event reported (`CqRing::pop_with`): perftest's latency tests with
    /// `-e` take the event, arm, then poll once, and an event at the arm
    /// would be taken for the next operation's (rxe, again, reports
    /// none); its bandwidth tests poll one batch after the arm and arm
    /// again, and the rest must then raise the event.
    pub(crate) fn arm(&mut self, c: &mut Cq, id: CqId, solicited_only: bool) {
        if c.entries.holds_unreported_for(solicited_only) {
            self.disarm(c);
            c.entries.mark_reported();
            self.queued.push_back(id);
        } else if c.notify != Some(false) {
            // An arm for the next completion stays one when a
            // solicited-only arm follows (IBA C11-31, C11-32; rxe and
            // rdmavt keep it too): else the event it promised is lost.
            self.armed += usize::from(c.notify.is_none());
            c.notify = Some(solicited_only);
        }
    }

    /// A completion entered CQ `id`; `wakes_solicited`: it is solicited
    /// or failed. If the CQ is armed for it, one event is queued and the
    /// CQ disarmed.
    pub(crate) fn completed(&mut self, c: &mut Cq, id: CqId, wakes_solicited: bool) {
        let qualifies = |solicited_only: bool| !solicited_only || wakes_solicited;
        if c.notify.is_some_and(qualifies) {
            self.disarm(c);
            c.entries.mark_reported();
            self.queued.push_back(id);
        }
    }

    /// CQ `c` is being destroyed.
    pub(crate) fn forget(&mut self, c: &mut Cq) {
        self.disarm(c);
    }

    /// Whether any CQ is armed.
    pub(crate) fn any_armed(&self) -> bool {
        self.armed > 0
    }

    /// The next event (`ibv_get_cq_event`).
    pub(crate) fn next(&mut self) -> Option<CqId> {
        self.queued.pop_front()
    }

    fn disarm(&mut self, c: &mut Cq) {
        if c.notify.take().is_some() {
            self.armed -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slotmap::SlotMap;

    fn two_cqs() -> (SlotMap<CqId, Cq>, CqId, CqId) {
        let mut cqs = SlotMap::with_key();
        let a = cqs.insert(Cq::new(16, 0).unwrap());
        let b = cqs.insert(Cq::new(16, 0).unwrap());
        (cqs, a, b)
    }

    #[test]
    fn a_cq_counts_as_armed_until_its_event_is_queued() {
        let (mut cqs, a, b) = two_cqs();
        let mut ev = CompletionEvents::default();
        assert!(!ev.any_armed());
        ev.arm(&mut cqs[a], a, false);
        ev.arm(&mut cqs[a], a, true);
        ev.arm(&mut cqs[b], b, true);
        ev.completed(&mut cqs[b], b, false);
        assert!(ev.any_armed(), "an unsolicited completion leaves b armed");
        ev.completed(&mut cqs[a], a, false);
        assert_eq!(ev.next(), Some(a), "a stayed armed for any completion");
        assert!(ev.any_armed(), "b still is");
        ev.completed(&mut cqs[b], b, true);
        assert_eq!(ev.next(), Some(b));
        assert_eq!(ev.next(), None);
        assert!(!ev.any_armed());
    }

    #[test]
    fn a_destroyed_cq_is_armed_no_longer() {
        let (mut cqs, a, _) = two_cqs();
        let mut ev = CompletionEvents::default();
        ev.arm(&mut cqs[a], a, false);
        let mut gone = cqs.remove(a).unwrap();
        ev.forget(&mut gone);
        assert!(!ev.any_armed());
        assert_eq!(ev.next(), None);
    }
}
