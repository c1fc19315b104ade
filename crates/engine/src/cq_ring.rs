//! A CQ's completions, shared with the threads that poll them.
//!
//! The engine is driven under one lock (the provider's driver lock), which
//! the progress thread holds while it receives and sends. A thread polling
//! a CQ that already holds completions should not wait for that: the
//! completions live in a [`CqRing`] of their own, behind a lock held only
//! for a push or a pop, and a provider's `ibv_poll_cq` takes them from
//! there without the engine ([`crate::Engine::cq_ring`]). Only a poll that
//! finds the CQ empty needs the engine, to receive what may have arrived.

use crate::error::VerbsResult;
use crate::wc::WorkCompletion;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The completions of one CQ, oldest first.
#[derive(Debug, Default)]
pub struct CqRing {
    entries: Mutex<Entries>,
    /// `entries.len()`, readable without the lock: an empty CQ is seen
    /// with one load.
    len: AtomicUsize,
}

#[derive(Debug, Default)]
struct Entries {
    /// Each completion, and whether it would raise the event of a
    /// solicited-only `ibv_req_notify_cq` (solicited, or failed).
    queue: VecDeque<(WorkCompletion, bool)>,
    /// How many of `queue`, from its front, a completion event already
    /// reported: an event reports every completion the CQ holds when it
    /// is queued, until a poll takes some (`pop_with`).
    reported: usize,
}

impl CqRing {
    /// An empty ring with room for `cqe` completions (`room.rs`).
    pub(crate) fn with_room(cqe: u32) -> VerbsResult<CqRing> {
        let ring = CqRing::default();
        ring.make_room(cqe)?;
        Ok(ring)
    }

    /// Makes room for `cqe` completions in all (a resized CQ).
    pub(crate) fn make_room(&self, cqe: u32) -> VerbsResult<()> {
        crate::room::grow(&mut self.entries.lock().queue, cqe as usize)
    }

    /// Completions waiting, as last seen (another thread may be taking
    /// some).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Whether no completion waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hands up to `max` completions, oldest first, to `take`; returns
    /// how many. A poll that takes some answers the event that reported
    /// them: what it leaves counts as unreported again, so that the next
    /// request for an event reports it at once. perftest's bandwidth
    /// tests with `-e` take one event, arm, poll one batch of 16 and arm
    /// again; with more than a batch left and nothing more to come (the
    /// same-host path completes a burst at once) they slept for ever.
    pub fn pop_with(&self, max: usize, mut take: impl FnMut(WorkCompletion)) -> usize {
        if max == 0 || self.is_empty() {
            return 0;
        }
        let mut entries = self.entries.lock();
        let Entries { queue, reported } = &mut *entries;
        let n = max.min(queue.len());
        for (wc, _) in queue.drain(..n) {
            take(wc);
        }
        if n > 0 {
            *reported = 0;
        }
        self.len.store(queue.len(), Ordering::Release);
        n
    }

    /// Appends `wc` unless `capacity` completions already wait; returns
    /// whether it was added. `wakes_solicited`: it would raise the event
    /// of a solicited-only request.
    pub(crate) fn push_within(
        &self,
        wc: WorkCompletion,
        wakes_solicited: bool,
        capacity: usize,
    ) -> bool {
        let mut entries = self.entries.lock();
        if entries.queue.len() >= capacity {
            return false;
        }
        entries.queue.push_back((wc, wakes_solicited));
        self.len.store(entries.queue.len(), Ordering::Release);
        true
    }

    /// Keeps only the completions `keep` accepts.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&WorkCompletion) -> bool) {
        let mut entries = self.entries.lock();
        let Entries { queue, reported } = &mut *entries;
        let mut index = 0;
        let mut reported_kept = 0;
        queue.retain(|(wc, _)| {
            let kept = keep(wc);
            reported_kept += usize::from(kept && index < *reported);
            index += 1;
            kept
        });
        *reported = reported_kept;
        self.len.store(queue.len(), Ordering::Release);
    }

    /// Whether a completion waits that no completion event reported yet
    /// and that a request for an event (with `solicited_only`, for a
    /// solicited or failed one) would report.
    pub(crate) fn holds_unreported_for(&self, solicited_only: bool) -> bool {
        let entries = self.entries.lock();
        let mut unreported = entries.queue.iter().skip(entries.reported);
        if solicited_only {
            unreported.any(|(_, wakes)| *wakes)
        } else {
            unreported.next().is_some()
        }
    }

    /// Notes that a completion event was queued: it reports every
    /// completion held now.
    pub(crate) fn mark_reported(&self) {
        let mut entries = self.entries.lock();
        entries.reported = entries.queue.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wc::WcOpcode;
    use std::sync::Arc;

    fn wc(wr_id: u64, qp_num: u32) -> WorkCompletion {
        WorkCompletion::flushed(wr_id, WcOpcode::Send, qp_num)
    }

    #[test]
    fn completions_leave_in_order_within_capacity() {
        let ring = CqRing::default();
        assert!(ring.push_within(wc(1, 7), false, 2));
        assert!(ring.push_within(wc(2, 8), false, 2));
        assert!(!ring.push_within(wc(3, 7), false, 2), "full");
        assert_eq!(ring.len(), 2);
        ring.retain(|w| w.qp_num != 7);
        let mut got = Vec::new();
        assert_eq!(ring.pop_with(5, |w| got.push(w.wr_id)), 1);
        assert_eq!(got, [2]);
        assert!(ring.is_empty());
        assert_eq!(ring.pop_with(5, |_| unreachable!()), 0);
    }

    /// What waits for a request for events is counted through pushes,
    /// pops and removals.
    #[test]
    fn the_ring_knows_whether_a_solicited_completion_waits() {
        let ring = CqRing::default();
        assert!(!ring.holds_unreported_for(false) && !ring.holds_unreported_for(true));
        assert!(ring.push_within(wc(1, 7), false, 8));
        assert!(ring.holds_unreported_for(false) && !ring.holds_unreported_for(true));
        assert!(ring.push_within(wc(2, 8), true, 8));
        assert!(ring.holds_unreported_for(true));
        ring.retain(|w| w.qp_num != 8);
        assert!(!ring.holds_unreported_for(true), "removed with its QP");
        assert!(ring.push_within(wc(3, 9), true, 8));
        assert_eq!(ring.pop_with(1, |_| ()), 1);
        assert!(
            ring.holds_unreported_for(true),
            "the solicited one is second"
        );
        assert_eq!(ring.pop_with(1, |_| ()), 1);
        assert!(!ring.holds_unreported_for(false) && !ring.holds_unreported_for(true));
    }

    /// An event reports what the CQ holds when it is queued; what comes
    /// after is unreported, through removals; a poll that takes some
    /// leaves the rest unreported.
    #[test]
    fn the_ring_knows_which_completions_an_event_reported() {
        let ring = CqRing::default();
        assert!(ring.push_within(wc(1, 7), true, 8));
        assert!(ring.push_within(wc(2, 8), false, 8));
        ring.mark_reported();
        assert!(!ring.holds_unreported_for(false) && !ring.holds_unreported_for(true));
        assert!(ring.push_within(wc(3, 7), false, 8));
        assert!(ring.holds_unreported_for(false) && !ring.holds_unreported_for(true));
        ring.retain(|w| w.qp_num != 8);
        assert!(!ring.holds_unreported_for(true), "the reported first kept");
        assert_eq!(ring.pop_with(1, |_| ()), 1);
        assert!(
            ring.holds_unreported_for(false),
            "the third, after the reported first"
        );
        ring.mark_reported();
        assert!(!ring.holds_unreported_for(false));
        assert!(ring.push_within(wc(4, 7), true, 8));
        assert!(ring.holds_unreported_for(true));
        ring.mark_reported();
        assert_eq!(ring.pop_with(1, |_| ()), 1);
        assert!(
            ring.holds_unreported_for(true),
            "a poll answered the event: what it left is news"
        );
        assert_eq!(ring.pop_with(0, |_| ()), 0);
        ring.mark_reported();
        assert_eq!(ring.pop_with(5, |_| ()), 1);
        assert!(!ring.holds_unreported_for(false), "nothing left");
    }

    /// Threads popping while another pushes each get every completion at
    /// most once, and together all of them.
    #[test]
    fn concurrent_pollers_share_the_completions() {
        const N: u64 = 2000;
        let ring = Arc::new(CqRing::default());
        let taken = Arc::new(AtomicUsize::new(0));
        let pollers: Vec<_> = (0..2)
            .map(|_| {
                let (ring, taken) = (ring.clone(), taken.clone());
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while taken.load(Ordering::Relaxed) < N as usize {
                        let n = ring.pop_with(3, |w| got.push(w.wr_id));
                        taken.fetch_add(n, Ordering::Relaxed);
                    }
                    got
                })
            })
            .collect();
        for i in 0..N {
            while !ring.push_within(wc(i, 1), false, 16) {
                std::thread::yield_now();
            }
        }
        let mut all: Vec<u64> = pollers
            .into_iter()
            .flat_map(|p| p.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..N).collect::<Vec<_>>());
    }
}
