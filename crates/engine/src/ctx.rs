//! What QP-level code may touch besides its own QP: the MRs, AHs, CQs and
//! SRQs of the context and its event queues. Splitting the engine this way
//! lets transport code hold one QP mutably while it completes WRs into CQs
//! and reads memory through MRs.

use crate::completion_events::CompletionEvents;
use crate::datapath::RecoveryStats;
use crate::device::DeviceConfig;
use crate::event::AsyncEvent;
use crate::fault_points::{FaultState, Verdict};
use crate::handles::{AhId, CqId, SrqId};
use crate::mr_table::MrTable;
use crate::objects::{Ah, Cq};
use crate::srq::Srq;
use crate::wc::{WcStatus, WorkCompletion};
use slotmap::SlotMap;
use std::collections::VecDeque;

/// Everything of an engine but its QP table.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    pub(crate) config: &'a DeviceConfig,
    pub(crate) mrs: &'a mut MrTable,
    pub(crate) ahs: &'a SlotMap<AhId, Ah>,
    pub(crate) cqs: &'a mut SlotMap<CqId, Cq>,
    pub(crate) srqs: &'a mut SlotMap<SrqId, Srq>,
    pub(crate) events: &'a mut VecDeque<AsyncEvent>,
    pub(crate) comp_events: &'a mut CompletionEvents,
    /// Set when a completion was lost to a CQ overrun. A `Ctx` serves
    /// one piece of work on one QP, so the loss is that QP's.
    pub(crate) lost_completion: bool,
    /// Bytes of the peer's buffer the QP may newly put in flight, each
    /// packet at its cost (`send_budget.rs`).
    pub(crate) send_room: u64,
    /// Set when the QP had a packet to send and no room for it: it waits
    /// for room.
    pub(crate) short_of_room: bool,
    /// The fault rules, if the device has any (`fault_points.rs`).
    pub(crate) faults: Option<&'a mut FaultState>,
    /// Set when a rule reported one of this QP's completions as failed:
    /// the QP enters the error state, as on a device that failed the WR.
    pub(crate) injected_error: bool,
    /// Set when the QP dropped the packet it was handed without a word to
    /// anyone, as UD and UC do (a wrong Q_Key, no receive WR, a message
    /// outside its MR) and any QP not yet ready to receive: counted, so
    /// that a user can see where the packets went.
    pub(crate) dropped: bool,
    /// The packet being handled arrived marked: the embedder found its
    /// receive queue filling (`congestion.rs`).
    pub(crate) congestion: bool,
    /// What the QP's recovery from lost or reordered packets did in this
    /// piece of work, for the engine's counts.
    pub(crate) recovery: RecoveryStats,
}

impl Ctx<'_> {
    /// Queues a completion ([`queue_completion`]) once the fault rules,
    /// if any, had their say; false if it was lost to an overrun (noted in
    /// `lost_completion`) or its CQ is gone.
    pub(crate) fn complete(&mut self, cq: CqId, wc: WorkCompletion, solicited: bool) -> bool {
        self.complete_carrying(cq, wc, solicited, wc.byte_len)
    }

    /// [`Ctx::complete`] for a WR that carried `carried` bytes: a send
    /// completion says none in `byte_len` (as mlx5's), yet a fault rule's
    /// `after_bytes=` counts what the WRs carried.
    pub(crate) fn complete_carrying(
        &mut self,
        cq: CqId,
        mut wc: WorkCompletion,
        solicited: bool,
        carried: u32,
    ) -> bool {
        if let Some(faults) = self.faults.as_deref_mut() {
            if self.injected_error && wc.status == WcStatus::Success {
                // This QP's WR already failed by a rule in this piece of
                // work: later ones are flushed, as the error state would.
                wc.status = WcStatus::WrFlushErr;
            }
            let verdict =
                faults.on_completion(cq, &mut wc, carried, solicited, &mut self.injected_error);
            if verdict == Verdict::Held {
                return true;
            }
        }
        let queued = queue_completion(self.cqs, self.events, self.comp_events, cq, wc, solicited);
        self.lost_completion |= queued == Queued::Lost;
        queued == Queued::InCq
    }

    /// Removes the completions of QP `qp_num` from `cq` (QP reset).
    pub(crate) fn forget_completions(&mut self, cq: CqId, qp_num: u32) {
        if let Some(c) = self.cqs.get_mut(cq) {
            c.forget_qp(qp_num);
        }
        if let Some(faults) = self.faults.as_deref_mut() {
            faults.forget(cq, qp_num);
        }
    }

    /// Raises an async event.
    pub(crate) fn event(&mut self, event: AsyncEvent) {
        self.events.push_back(event);
    }

    /// A WR of SRQ `id` was taken, here or by a same-host peer: an SRQ
    /// whose unclaimed WRs drop below its armed limit raises
    /// IBV_EVENT_SRQ_LIMIT_REACHED once.
    pub(crate) fn srq_consumed(&mut self, id: SrqId) {
        let Some(srq) = self.srqs.get_mut(id) else {
            return;
        };
        if srq.limit.on_consumed(srq.queue.unclaimed()) {
            self.events.push_back(AsyncEvent::SrqLimitReached(id));
        }
    }
}

/// What became of a completion [`queue_completion`] was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queued {
    /// It is in the CQ.
    InCq,
    /// The CQ overran: it is lost (its QP can no longer report its work).
    Lost,
    /// The CQ no longer exists.
    NoCq,
}

/// Queues a completion. On overrun the completion is lost and
/// IBV_EVENT_CQ_ERR is raised once. If the CQ was armed by
/// `ibv_req_notify_cq` and this completion qualifies (any completion, or
/// for solicited-only a solicited or failed one), a completion event is
/// queued and the CQ disarmed.
pub(crate) fn queue_completion(
    cqs: &mut SlotMap<CqId, Cq>,
    events: &mut VecDeque<AsyncEvent>,
    comp_events: &mut CompletionEvents,
    cq: CqId,
    wc: WorkCompletion,
    solicited: bool,
) -> Queued {
    let Some(c) = cqs.get_mut(cq) else {
        return Queued::NoCq;
    };
    let was_overrun = c.overrun;
    let wakes_solicited = solicited || wc.status != WcStatus::Success;
    if !c.push(wc, wakes_solicited) {
        if !was_overrun {
            events.push_back(AsyncEvent::CqErr(cq));
        }
        return Queued::Lost;
    }
    comp_events.completed(c, cq, wakes_solicited);
    Queued::InCq
}
