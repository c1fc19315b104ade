//! A receive queue (a QP's own or an SRQ) whose WRs several consumers may
//! take: this engine's responder, for messages that arrive as packets,
//! and same-host peers, which execute SENDs against it from their own
//! processes (`direct.rs`).
//!
//! Every consumer takes the *oldest unclaimed* WR by claiming it, and a
//! claim is final. Without an embedder's share the claims are kept here
//! (a cursor over sequence numbers); with one ([`RecvShare`], the
//! embedder's shared-memory ring) the share decides, so a peer in another
//! process and this engine never take the same WR. Every WR carries a
//! sequence number, unique in its queue for the queue's life (across
//! resets too), and a WR a peer claimed leaves the queue when the peer's
//! delivery naming that number is applied: WRs retire out of order by
//! number, while the completion order on the CQ is the order in which
//! messages finished, as on a NIC.

use crate::error::VerbsResult;
use crate::wr::RecvWqe;
use std::collections::VecDeque;
use std::fmt;

/// Which receive queue: a QP's own, or an SRQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvQueueId {
    /// The receive queue of a QP without an SRQ.
    Qp(crate::handles::QpId),
    /// A shared receive queue.
    Srq(crate::handles::SrqId),
}

/// Claims that lose a race to another consumer before a take gives up
/// (each lost race is another consumer's progress).
const CLAIM_TRIES: u32 = 64;

/// The embedder's side of a shared receive queue: an ordered list of
/// receive WRs that consumers in other processes claim from too.
pub trait RecvShare: Send + fmt::Debug {
    /// Appends a WR; its sequence number, or `None` when there is no room
    /// (the queue then stops being shared: see [`RecvQueue::post`]).
    fn push(&mut self, wqe: &RecvWqe) -> Option<u64>;
    /// The sequence number of the oldest unclaimed WR.
    fn peek(&self) -> Option<u64>;
    /// Claims WR `seq` if it is still the oldest unclaimed one.
    fn claim(&self, seq: u64) -> bool;
    /// Claims every unclaimed WR (a flush or reset empties the queue).
    fn claim_all(&self);
    /// How many WRs are unclaimed.
    fn unclaimed(&self) -> u64;
}

/// A receive queue.
#[derive(Debug, Default)]
pub(crate) struct RecvQueue {
    /// Posted WRs not yet retired, in posting order: unclaimed ones and
    /// ones a peer claimed whose delivery is still on its way.
    wrs: VecDeque<RecvWqe>,
    /// WRs this engine claimed and gave back (a UC message lost part-way
    /// returns its WR for the next message): taken first, by this engine.
    held: VecDeque<RecvWqe>,
    /// The next sequence number (without a share).
    next_seq: u64,
    /// WRs numbered below this are claimed (without a share).
    claimed_below: u64,
    share: Option<Box<dyn RecvShare>>,
}

impl RecvQueue {
    /// WRs outstanding (posted and not completed): what `max_wr` bounds.
    pub(crate) fn len(&self) -> usize {
        self.wrs.len() + self.held.len()
    }

    /// WRs no consumer has claimed yet (the SRQ limit counts these).
    pub(crate) fn unclaimed(&self) -> usize {
        match &self.share {
            Some(share) => share.unclaimed() as usize,
            None => self.wrs.len() - self.first_free(),
        }
    }

    fn is_free(&self, seq: u64) -> bool {
        seq >= self.claimed_below
    }

    /// Where the unclaimed WRs start (without a share): claims take the
    /// oldest first and `wrs` is in number order, so the claimed ones
    /// still queued are a prefix.
    fn first_free(&self) -> usize {
        self.wrs.partition_point(|w| !self.is_free(w.seq))
    }

    /// An empty queue with room for `n` WRs (`room.rs`).
    pub(crate) fn with_room(n: usize) -> VerbsResult<RecvQueue> {
        let mut q = RecvQueue::default();
        q.make_room(n)?;
        Ok(q)
    }

    /// Makes room for `n` WRs in all (a larger SRQ).
    pub(crate) fn make_room(&mut self, n: usize) -> VerbsResult<()> {
        crate::room::grow(&mut self.wrs, n)
    }

    /// Appends a posted WR.
    pub(crate) fn post(&mut self, mut wqe: RecvWqe) {
        wqe.seq = self.number(&wqe);
        self.wrs.push_back(wqe);
    }

    /// The WR's sequence number: the share's, or ours. A share with no
    /// room (it is made for the most WRs the queue can hold, so only a
    /// ring corrupted by a peer gets here) is dropped, and the queue goes
    /// on unshared from the share's own cursor (peers then find it empty).
    fn number(&mut self, wqe: &RecvWqe) -> u64 {
        if let Some(share) = &mut self.share {
            if let Some(seq) = share.push(wqe) {
                return seq;
            }
            let next = self.wrs.back().map_or(0, |w| w.seq + 1);
            self.claimed_below = share.peek().unwrap_or(next);
            self.next_seq = next;
            share.claim_all();
            self.share = None;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Shares the queue through `share`: the WRs queued so far are pushed
    /// to it, and from now on it numbers and arbitrates every WR.
    pub(crate) fn share(&mut self, mut share: Box<dyn RecvShare>) {
        if let Some(old) = self.share.take() {
            old.claim_all();
        }
        for i in self.first_free()..self.wrs.len() {
            match share.push(&self.wrs[i]) {
                Some(seq) => self.wrs[i].seq = seq,
                None => {
                    // No room: the queue stays unshared, and peers find
                    // the ring empty.
                    share.claim_all();
                    return;
                }
            }
        }
        self.share = Some(share);
    }

    /// The WR this engine's next message would take.
    pub(crate) fn next(&self) -> Option<&RecvWqe> {
        self.held.front().or_else(|| self.peek())
    }

    /// The oldest WR nobody claimed (what a peer would claim next).
    pub(crate) fn peek(&self) -> Option<&RecvWqe> {
        let seq = match &self.share {
            Some(share) => share.peek()?,
            None => self.wrs.get(self.first_free())?.seq,
        };
        self.wrs.iter().find(|w| w.seq == seq)
    }

    /// Claims WR `seq` for a consumer (a peer's, or this engine's) if it
    /// is still the oldest unclaimed one.
    pub(crate) fn claim(&mut self, seq: u64) -> bool {
        match &self.share {
            Some(share) => share.claim(seq),
            None => {
                if self
                    .wrs
                    .get(self.first_free())
                    .is_some_and(|w| w.seq == seq)
                {
                    self.claimed_below = seq + 1;
                    true
                } else {
                    false
                }
            }
        }
    }

    /// Takes the oldest unclaimed WR for this engine's own use.
    pub(crate) fn take(&mut self) -> Option<RecvWqe> {
        if let Some(held) = self.held.pop_front() {
            return Some(held);
        }
        if self.share.is_none() {
            // Unshared, the oldest free WR is the first one free: claimed
            // WRs still queued are a prefix (`first_free`), and none is
            // queued when only this engine takes.
            let front = self.wrs.front()?;
            if self.is_free(front.seq) {
                self.claimed_below = front.seq + 1;
                return self.wrs.pop_front();
            }
        }
        for _ in 0..CLAIM_TRIES {
            let seq = self.peek()?.seq;
            if self.claim(seq) {
                return self.retire(seq);
            }
        }
        None
    }

    /// Removes WR `seq`, which a consumer claimed (`None`: not here, e.g.
    /// flushed or reset since).
    pub(crate) fn retire(&mut self, seq: u64) -> Option<RecvWqe> {
        if self.wrs.front().is_some_and(|w| w.seq == seq) {
            return self.wrs.pop_front(); // the usual case: in order
        }
        let at = self.wrs.iter().position(|w| w.seq == seq)?;
        self.wrs.remove(at)
    }

    /// Gives back a WR this engine took, to be taken first next time.
    pub(crate) fn give_back(&mut self, wqe: RecvWqe) {
        self.held.push_front(wqe);
    }

    /// Empties the queue (flush): every WR, claimed or not, in posting
    /// order, the given-back ones first (they are the oldest).
    pub(crate) fn drain_all(&mut self) -> Vec<RecvWqe> {
        self.close_claims();
        self.held.drain(..).chain(self.wrs.drain(..)).collect()
    }

    /// Empties the queue without completions (RESET).
    pub(crate) fn clear(&mut self) {
        self.close_claims();
        self.held.clear();
        self.wrs.clear();
    }

    /// Nobody claims what is queued now: peers find an empty queue.
    fn close_claims(&mut self) {
        match &self.share {
            Some(share) => share.claim_all(),
            None => self.claimed_below = self.next_seq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wr::Sge;
    use std::sync::{Arc, Mutex};

    fn wqe(wr_id: u64) -> RecvWqe {
        RecvWqe {
            wr_id,
            sg_list: [Sge::default()].as_slice().into(),
            seq: 0,
        }
    }

    /// A share as another process would see it: a list and a cursor.
    #[derive(Debug, Default, Clone)]
    struct Ring(Arc<Mutex<(Vec<u64>, u64)>>);

    impl RecvShare for Ring {
        fn push(&mut self, w: &RecvWqe) -> Option<u64> {
            let mut g = self.0.lock().unwrap();
            g.0.push(w.wr_id);
            Some(g.0.len() as u64 - 1 + 100)
        }
        fn peek(&self) -> Option<u64> {
            let g = self.0.lock().unwrap();
            (g.1 < g.0.len() as u64).then_some(g.1 + 100)
        }
        fn claim(&self, seq: u64) -> bool {
            let mut g = self.0.lock().unwrap();
            if g.1 + 100 == seq && g.1 < g.0.len() as u64 {
                g.1 += 1;
                true
            } else {
                false
            }
        }
        fn claim_all(&self) {
            let mut g = self.0.lock().unwrap();
            g.1 = g.0.len() as u64;
        }
        fn unclaimed(&self) -> u64 {
            let g = self.0.lock().unwrap();
            g.0.len() as u64 - g.1
        }
    }

    #[test]
    fn a_peer_claim_hides_the_wr_from_the_engine_until_it_retires() {
        let mut q = RecvQueue::default();
        for id in 1..=3 {
            q.post(wqe(id));
        }
        let first = q.peek().unwrap().seq;
        assert!(q.claim(first), "a peer claims the oldest");
        assert!(!q.claim(first), "a claim is final");
        assert_eq!(q.take().unwrap().wr_id, 2, "the engine takes the next");
        assert_eq!((q.len(), q.unclaimed()), (2, 1));
        assert_eq!(q.retire(first).unwrap().wr_id, 1, "the peer's delivery");
        assert!(q.retire(first).is_none());
        assert_eq!(q.take().unwrap().wr_id, 3);
        assert!(q.take().is_none());
    }

    #[test]
    fn a_shared_queue_numbers_and_claims_through_the_share() {
        let ring = Ring::default();
        let mut q = RecvQueue::default();
        q.post(wqe(1));
        q.share(Box::new(ring.clone()));
        q.post(wqe(2));
        assert_eq!(ring.0.lock().unwrap().0, vec![1, 2], "earlier WRs pushed");
        // Another process claims the oldest through the ring itself.
        assert!(ring.claim(100));
        assert_eq!(q.take().unwrap().wr_id, 2);
        assert!(q.take().is_none());
        assert_eq!(q.retire(100).unwrap().wr_id, 1);
    }

    #[test]
    fn a_flush_closes_every_claim_and_returns_claimed_wrs_too() {
        let ring = Ring::default();
        let mut q = RecvQueue::default();
        q.share(Box::new(ring.clone()));
        for id in 1..=3 {
            q.post(wqe(id));
        }
        assert!(ring.claim(100));
        let flushed: Vec<u64> = q.drain_all().iter().map(|w| w.wr_id).collect();
        assert_eq!(flushed, vec![1, 2, 3]);
        assert_eq!(ring.unclaimed(), 0, "peers claim nothing after a flush");
        q.post(wqe(4));
        assert_eq!(q.peek().unwrap().seq, 103, "numbers never repeat");
    }

    #[test]
    fn a_given_back_wr_is_taken_first_and_flushed_first() {
        let mut q = RecvQueue::default();
        q.post(wqe(1));
        q.post(wqe(2));
        let w = q.take().unwrap();
        q.give_back(w);
        assert_eq!(q.next().unwrap().wr_id, 1);
        assert_eq!(q.peek().unwrap().wr_id, 2, "peers never see it");
        assert_eq!(q.len(), 2);
        let flushed: Vec<u64> = q.drain_all().iter().map(|w| w.wr_id).collect();
        assert_eq!(flushed, vec![1, 2]);
    }

    #[test]
    fn unshared_numbers_survive_a_reset() {
        let mut q = RecvQueue::default();
        q.post(wqe(1));
        let old = q.peek().unwrap().seq;
        q.clear();
        q.post(wqe(2));
        assert!(q.retire(old).is_none(), "a stale delivery finds nothing");
        assert_ne!(q.peek().unwrap().seq, old);
    }
}
