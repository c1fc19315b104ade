//! The context's send budget: what its RC QPs have in flight (request
//! packets not yet acknowledged, READ responses not yet received) costs
//! the peer's receive buffer, in bytes, each packet at
//! `DeviceConfig::packet_cost` (about twice its payload where it arrives
//! alone), at most the device's send window
//! (`DeviceConfig::send_window_bytes`) between them. One QP's window
//! alone keeps a peer's receive buffer from overflowing only while that
//! QP is the only sender: four QPs of one context sending to one peer put
//! four windows into its buffer (perftest `-q 4` lost one datagram in
//! twenty that way). So a packet that puts new PSNs in flight also needs
//! room in the context's budget, except when nothing at all is in flight,
//! so that one window (or one READ part) always fits.
//!
//! Each QP is charged what it has in flight after every piece of work on
//! it (`Engine::with_qp`) and discharged when it is destroyed, so the sum
//! is exact whenever the engine is between calls; a QP the budget turned
//! away waits in `waiters` and is woken when a charge falls.

use crate::handles::QpId;

/// Bytes of the peer's buffer in flight, and the QPs waiting for room.
#[derive(Debug, Default)]
pub(crate) struct SendBudget {
    used: u64,
    waiters: Vec<QpId>,
}

impl SendBudget {
    /// The room a QP may use now: `limit` less what is in flight, or
    /// unlimited when nothing is (one window always fits).
    pub(crate) fn room(&self, limit: u32) -> u64 {
        if self.used == 0 {
            u64::MAX
        } else {
            u64::from(limit).saturating_sub(self.used)
        }
    }

    /// What is in flight, in bytes of the peers' buffers.
    pub(crate) fn used(&self) -> u64 {
        self.used
    }

    /// Charges a QP that had `was` in flight with `now` instead; returns
    /// whether room was freed (its waiters should be woken).
    pub(crate) fn recharge(&mut self, was: u64, now: u64) -> bool {
        self.used = self.used - was + now;
        now < was
    }

    /// QP `qp` found no room: it is woken when some is freed.
    pub(crate) fn wait(&mut self, qp: QpId) {
        if !self.waiters.contains(&qp) {
            self.waiters.push(qp);
        }
    }

    /// The QPs waiting for room, which the caller wakes.
    pub(crate) fn take_waiters(&mut self) -> std::vec::Drain<'_, QpId> {
        self.waiters.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slotmap::SlotMap;

    #[test]
    fn room_is_the_limit_less_what_is_charged_and_unlimited_when_idle() {
        let mut b = SendBudget::default();
        assert_eq!(b.room(1000), u64::MAX);
        assert!(!b.recharge(0, 600));
        assert_eq!(b.room(1000), 400);
        assert!(!b.recharge(0, 600));
        assert_eq!(b.room(1000), 0, "over the limit: no room, not an underflow");
        assert!(b.recharge(600, 100));
        assert_eq!(b.room(1000), 300);
        assert!(b.recharge(100, 0));
        assert!(b.recharge(600, 0));
        assert_eq!(b.room(1000), u64::MAX);
    }

    #[test]
    fn waiters_are_taken_once_each() {
        let mut ids = SlotMap::<QpId, ()>::with_key();
        let (a, c) = (ids.insert(()), ids.insert(()));
        let mut b = SendBudget::default();
        b.wait(a);
        b.wait(c);
        b.wait(a);
        assert_eq!(b.take_waiters().collect::<Vec<_>>(), [a, c]);
        assert_eq!(b.take_waiters().count(), 0);
    }
}
