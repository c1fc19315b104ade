//! A receive queue of this context shared through its region: the
//! engine's [`RecvShare`] over a [`RecvRing`], so the engine's responder
//! and same-host peers claim receive WRs from one ring, and a WR is never
//! taken twice. The ring index of a WR is its sequence number, which a
//! peer's delivery names.

use super::layout::RegionView;
use super::qp_slots::RingRef;
use super::recv_ring::RecvRing;
use softverbs_engine::{RecvShare, RecvWqe};

/// One ring of our region, as the engine's share of a receive queue.
#[derive(Clone)]
pub struct RingShare {
    region: RegionView,
    at: RingRef,
}

impl std::fmt::Debug for RingShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingShare").field("at", &self.at).finish()
    }
}

impl RingShare {
    /// The ring at `at` in `region` (ours).
    pub fn new(region: RegionView, at: RingRef) -> RingShare {
        RingShare { region, at }
    }

    fn ring(&self) -> Option<RecvRing<'_>> {
        self.region.recv_ring(self.at)
    }
}

impl RecvShare for RingShare {
    fn push(&mut self, wqe: &RecvWqe) -> Option<u64> {
        self.ring()?.push(wqe.wr_id, &wqe.sg_list).ok()
    }

    fn peek(&self) -> Option<u64> {
        self.ring()?.oldest_unclaimed()
    }

    fn claim(&self, seq: u64) -> bool {
        self.ring().is_some_and(|r| r.claim_at(seq))
    }

    fn claim_all(&self) {
        if let Some(r) = self.ring() {
            r.claim_all();
        }
    }

    fn unclaimed(&self) -> u64 {
        self.ring().map_or(0, |r| r.unclaimed())
    }
}
