//! The plain verbs objects the engine keeps: PD, MR, AH, CQ. QPs and SRQs,
//! which have state machines, live in their own modules.

use crate::access::AccessFlags;
use crate::ah_attr::AhAttr;
use crate::cq_ring::CqRing;
use crate::error::VerbsResult;
use crate::handles::PdId;
use crate::wc::WorkCompletion;
use std::sync::Arc;

/// How many other objects still reference an object; a referenced object
/// cannot be destroyed (EBUSY), as with the kernel's `usecnt`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct UseCount(u32);

impl UseCount {
    pub(crate) fn get(&mut self) {
        self.0 += 1;
    }
    pub(crate) fn put(&mut self) {
        self.0 -= 1;
    }
    pub(crate) fn in_use(self) -> bool {
        self.0 > 0
    }
}

/// A protection domain.
#[derive(Debug, Default)]
pub(crate) struct Pd {
    pub(crate) users: UseCount,
}

/// A registered memory region.
#[derive(Debug, Clone)]
pub struct Mr {
    /// Owning PD.
    pub pd: PdId,
    /// Start of the region in the application's address space.
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// The address remote peers use for the first byte (`hca_va`).
    pub iova: u64,
    /// Access rights.
    pub access: AccessFlags,
    /// The lkey, which is also the rkey.
    pub key: u32,
}

impl Mr {
    /// Whether `[addr, addr + len)` lies inside the region (local view).
    pub fn contains_local(&self, addr: u64, len: u64) -> bool {
        range_inside(addr, len, self.addr, self.length)
    }
}

/// `[addr, addr+len)` inside `[start, start+size)`, without overflow.
pub(crate) fn range_inside(addr: u64, len: u64, start: u64, size: u64) -> bool {
    match (addr.checked_sub(start), addr.checked_add(len)) {
        (Some(offset), Some(_)) => offset <= size && len <= size - offset,
        _ => false,
    }
}

/// An address handle.
#[derive(Debug, Clone)]
pub(crate) struct Ah {
    pub(crate) pd: PdId,
    pub(crate) attr: AhAttr,
}

/// A completion queue.
#[derive(Debug)]
pub(crate) struct Cq {
    /// Capacity (the actual `cqe`).
    pub(crate) cqe: u32,
    pub(crate) comp_vector: u32,
    /// The completions, shared with the threads polling them.
    pub(crate) entries: Arc<CqRing>,
    /// Set once the CQ overran; IBV_EVENT_CQ_ERR was raised.
    pub(crate) overrun: bool,
    /// Armed by `ibv_req_notify_cq`: `Some(solicited_only)`. Set and
    /// cleared only by `completion_events.rs`, which counts the armed CQs.
    pub(crate) notify: Option<bool>,
    pub(crate) users: UseCount,
}

impl Cq {
    pub(crate) fn new(cqe: u32, comp_vector: u32) -> VerbsResult<Cq> {
        Ok(Cq {
            cqe,
            comp_vector,
            entries: Arc::new(CqRing::with_room(cqe)?),
            overrun: false,
            notify: None,
            users: UseCount::default(),
        })
    }

    /// Removes the completions of QP `qp_num`: when a QP is reset its
    /// completions leave its CQs, as on mlx5 (pyverbs relies on it), since
    /// they would describe work of a QP that starts over.
    pub(crate) fn forget_qp(&mut self, qp_num: u32) {
        self.entries.retain(|wc| wc.qp_num != qp_num);
    }

    /// Adds a completion (`wakes_solicited`: it would raise the event of
    /// a solicited-only request); returns false when the CQ is full
    /// (overrun).
    pub(crate) fn push(&mut self, wc: WorkCompletion, wakes_solicited: bool) -> bool {
        if !self
            .entries
            .push_within(wc, wakes_solicited, self.cqe as usize)
        {
            self.overrun = true;
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::range_inside;

    #[test]
    fn range_inside_checks_both_ends_without_overflow() {
        assert!(range_inside(100, 10, 100, 10));
        assert!(range_inside(105, 5, 100, 10));
        assert!(range_inside(110, 0, 100, 10));
        assert!(!range_inside(99, 1, 100, 10));
        assert!(!range_inside(105, 6, 100, 10));
        assert!(!range_inside(111, 0, 100, 10));
        assert!(!range_inside(u64::MAX, 2, 0, u64::MAX));
        assert!(range_inside(0, u64::MAX, 0, u64::MAX));
    }
}
