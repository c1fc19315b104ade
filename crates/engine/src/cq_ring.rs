//! A CQ's completions, shared with the threads that poll them.
//!
//! The engine is driven under one lock (the provider's driver lock), which
//! the progress thread holds while it receives and sends. A thread polling
//! a CQ that already holds completions should not wait for that: the
//! completions live in a [`CqRing`] of their own, behind a lock held only
//! for a push or a pop, and a provider's `ibv_poll_cq` takes them from
//! there without the engine ([`crate::Engine::cq_ring`]). Only a poll that
//! finds the CQ empty needs the engine, to receive what may have arrived.

use crate::wc::WorkCompletion;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The completions of one CQ, oldest first.
#[derive(Debug, Default)]
pub struct CqRing {
    entries: Mutex<VecDeque<WorkCompletion>>,
    /// `entries.len()`, readable without the lock: an empty CQ is seen
    /// with one load.
    len: AtomicUsize,
}

impl CqRing {
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
    /// how many.
    pub fn pop_with(&self, max: usize, take: impl FnMut(WorkCompletion)) -> usize {
        if max == 0 || self.is_empty() {
            return 0;
        }
        let mut entries = self.entries.lock();
        let n = max.min(entries.len());
        entries.drain(..n).for_each(take);
        self.len.store(entries.len(), Ordering::Release);
        n
    }

    /// Appends `wc` unless `capacity` completions already wait; returns
    /// whether it was added.
    pub(crate) fn push_within(&self, wc: WorkCompletion, capacity: usize) -> bool {
        let mut entries = self.entries.lock();
        if entries.len() >= capacity {
            return false;
        }
        entries.push_back(wc);
        self.len.store(entries.len(), Ordering::Release);
        true
    }

    /// Keeps only the completions `keep` accepts.
    pub(crate) fn retain(&self, keep: impl FnMut(&WorkCompletion) -> bool) {
        let mut entries = self.entries.lock();
        entries.retain(keep);
        self.len.store(entries.len(), Ordering::Release);
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
        assert!(ring.push_within(wc(1, 7), 2));
        assert!(ring.push_within(wc(2, 8), 2));
        assert!(!ring.push_within(wc(3, 7), 2), "full");
        assert_eq!(ring.len(), 2);
        ring.retain(|w| w.qp_num != 7);
        let mut got = Vec::new();
        assert_eq!(ring.pop_with(5, |w| got.push(w.wr_id)), 1);
        assert_eq!(got, [2]);
        assert!(ring.is_empty());
        assert_eq!(ring.pop_with(5, |_| unreachable!()), 0);
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
            while !ring.push_within(wc(i, 1), 16) {
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
