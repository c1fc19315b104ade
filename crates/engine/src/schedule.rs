//! Which QPs have packets to send and when QP timers expire.
//!
//! `poll_transmit` serves QPs round-robin from a ready queue instead of
//! scanning every QP, each for a turn of packets in a row up to the one
//! that asks for an ACK, and timer deadlines sit in a min-heap, so the cost
//! of a packet or a timer does not grow with the number of idle QPs. The
//! per-QP marks are secondary maps indexed by the QP's slot, not hash
//! tables: hashing QP ids was 5% of a sender's CPU. Nothing here allocates
//! once grown: a timer moved or cleared leaves its old heap entry behind,
//! skipped when it surfaces (its QP's deadline no longer matches), where an
//! ordered set would allocate a node for nearly every timer set.

use crate::handles::QpId;
use crate::time::Nanos;
use slotmap::SecondaryMap;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Most packets a QP sends in a row before the next ready QP's turn. A
/// requester's turn ends earlier, with the packet that asks for an ACK
/// (at most sixteen packets apart: `flow_control.rs`), so that a QP that
/// the others' turns then keep from sending (the context's send budget
/// full) waits for an ACK it already asked for. With one packet per turn,
/// QPs interleaved packet by packet, the packets that filled the budget
/// asked for ACKs covering one packet each: 64 QPs sharing a budget of 31
/// packets asked for an ACK with 7 packets of 10, and the requester slept
/// and woke for each (perftest `ib_write_bw -q 64`, socket buffer of
/// Debian's default `rmem_max`). A turn's packets can go out in one or a
/// few GSO batches.
pub(crate) const TURN_PKTS: u32 = 16;

/// The engine's transmit and timer schedule.
#[derive(Debug, Default)]
pub(crate) struct Schedule {
    ready: VecDeque<QpId>,
    queued: SecondaryMap<QpId, ()>,
    /// The QP taken from `ready` to send, and the packets left in its turn.
    turn: Option<(QpId, u32)>,
    /// Deadlines, earliest on top; an entry whose QP's `deadline` differs
    /// is stale. The top is never stale (`drop_stale`).
    timers: BinaryHeap<Reverse<(Nanos, QpId)>>,
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
    /// `next_turn` (packets) from now on.
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

    /// The QP to ask for a packet: the one whose turn it is, else the next
    /// ready one, which leaves the queue until woken or its turn ends with
    /// a packet sent.
    pub(crate) fn next_turn(&mut self) -> Option<QpId> {
        if let Some((qp, _)) = self.turn {
            return Some(qp);
        }
        let qp = self.ready.pop_front()?;
        self.queued.remove(qp);
        self.turn = Some((qp, TURN_PKTS));
        Some(qp)
    }

    /// The QP in its turn sent a packet (one asking for an ACK if
    /// `asked_ack`); after its turn's last it is queued again, as it may
    /// have more: at the back, or where something woke it during its
    /// turn.
    pub(crate) fn sent_in_turn(&mut self, asked_ack: bool) {
        if let Some((qp, left)) = &mut self.turn {
            *left -= 1;
            if *left == 0 || asked_ack {
                let qp = *qp;
                self.turn = None;
                self.wake_transmit(qp);
            }
        }
    }

    /// Whether a QP may have packets to send: one in its turn or ready.
    pub(crate) fn may_transmit(&self) -> bool {
        self.turn.is_some() || !self.ready.is_empty()
    }

    /// The QP in its turn had nothing to send: the next ready one's turn.
    pub(crate) fn end_turn(&mut self) {
        self.turn = None;
    }

    /// Sets (or with `None` clears) the QP's timer deadline.
    pub(crate) fn set_timer(&mut self, qp: QpId, at: Option<Nanos>) {
        if self.deadline.get(qp).copied() == at {
            return;
        }
        match at {
            Some(at) => {
                self.deadline.insert(qp, at);
                self.timers.push(Reverse((at, qp)));
            }
            None => {
                self.deadline.remove(qp);
            }
        }
        self.drop_stale();
    }

    /// Pops stale entries off the top, so the top is a live deadline; and
    /// rebuilds the heap from the live deadlines when stale ones are most
    /// of it (timers moved later and later, as retransmission timers are,
    /// bury theirs).
    fn drop_stale(&mut self) {
        while let Some(&Reverse((at, qp))) = self.timers.peek() {
            if self.deadline.get(qp) == Some(&at) {
                break;
            }
            self.timers.pop();
        }
        if self.timers.len() > 64 && self.timers.len() > 4 * self.deadline.len() {
            let live = self.deadline.iter().map(|(qp, &at)| Reverse((at, qp)));
            let mut heap = std::mem::take(&mut self.timers).into_vec();
            heap.clear();
            heap.extend(live);
            self.timers = BinaryHeap::from(heap);
        }
    }

    /// The earliest deadline.
    pub(crate) fn next_deadline(&self) -> Option<Nanos> {
        self.timers.peek().map(|&Reverse((at, _))| at)
    }

    /// A QP whose deadline is at or before `now`; its timer is cleared.
    pub(crate) fn pop_expired(&mut self, now: Nanos) -> Option<QpId> {
        let &Reverse((at, qp)) = self.timers.peek()?;
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
        if self.turn.is_some_and(|(q, _)| q == qp) {
            self.turn = None;
        }
        if self.queued.remove(qp).is_some() {
            self.ready.retain(|q| *q != qp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slotmap::SlotMap;

    /// A timer moved many times leaves stale heap entries behind: moved
    /// later, they surface first and are dropped at once; moved earlier,
    /// they are buried, and the heap is rebuilt before they pile up. Only
    /// the live deadline ever fires.
    #[test]
    fn a_timer_moved_many_times_fires_once_at_its_last_deadline() {
        let mut ids = SlotMap::<QpId, ()>::with_key();
        let (a, b) = (ids.insert(()), ids.insert(()));
        let mut s = Schedule::default();
        s.set_timer(b, Some(5_000_000));
        for i in 1..=1000 {
            s.set_timer(a, Some(i * 10));
            assert!(
                s.timers.len() <= 2,
                "moved later: {} entries",
                s.timers.len()
            );
        }
        for i in 1..=1000 {
            s.set_timer(a, Some(1_010_000 - i * 10));
            assert!(
                s.timers.len() <= 65,
                "moved earlier: {} entries",
                s.timers.len()
            );
        }
        assert_eq!(s.next_deadline(), Some(1_000_000));
        assert_eq!(s.pop_expired(999_999), None);
        assert_eq!(s.pop_expired(1_000_000), Some(a));
        assert_eq!(s.pop_expired(4_999_999), None, "a fired once");
        assert_eq!(s.next_deadline(), Some(5_000_000));
        s.set_timer(b, None);
        assert_eq!((s.next_deadline(), s.pop_expired(u64::MAX)), (None, None));
    }

    /// A QP keeps its turn until it sends a packet asking for an ACK, or
    /// `TURN_PKTS` packets, or has nothing to send; then the next ready
    /// QP's turn begins, and a QP that sent goes behind it. A forgotten
    /// QP's turn ends.
    #[test]
    fn a_turn_lasts_until_an_ack_request_or_its_packets_are_used() {
        let mut ids = SlotMap::<QpId, ()>::with_key();
        let (a, b) = (ids.insert(()), ids.insert(()));
        let mut s = Schedule::default();
        s.wake(a);
        s.wake(b);
        for _ in 0..3 {
            assert_eq!(s.next_turn(), Some(a));
            s.sent_in_turn(false);
        }
        assert_eq!(s.next_turn(), Some(a));
        s.sent_in_turn(true);
        assert_eq!(s.next_turn(), Some(b), "a asked for an ACK");
        for _ in 0..TURN_PKTS {
            assert_eq!(s.next_turn(), Some(b));
            s.sent_in_turn(false);
        }
        assert_eq!(s.next_turn(), Some(a), "b used its turn");
        s.end_turn();
        assert_eq!(s.next_turn(), Some(b), "a had nothing to send");
        s.forget(b);
        assert_eq!(s.next_turn(), None);
    }

    /// A timer moved earlier fires at the earlier time, and a forgotten
    /// QP's timer never fires.
    #[test]
    fn a_timer_moved_earlier_or_forgotten() {
        let mut ids = SlotMap::<QpId, ()>::with_key();
        let (a, b) = (ids.insert(()), ids.insert(()));
        let mut s = Schedule::default();
        s.set_timer(a, Some(100));
        s.set_timer(a, Some(50));
        s.set_timer(b, Some(70));
        s.forget(b);
        assert_eq!(s.pop_expired(1_000), Some(a));
        assert_eq!(s.pop_expired(1_000), None);
    }
}
