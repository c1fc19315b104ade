//! What QP-level code may touch besides its own QP: the MRs, AHs, CQs and
//! SRQs of the context and its event queues. Splitting the engine this way
//! lets transport code hold one QP mutably while it completes WRs into CQs
//! and reads memory through MRs.

use crate::device::DeviceConfig;
use crate::event::AsyncEvent;
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
    pub(crate) comp_events: &'a mut VecDeque<CqId>,
    /// Set when a completion was lost to a CQ overrun. A `Ctx` serves
    /// one piece of work on one QP, so the loss is that QP's.
    pub(crate) lost_completion: bool,
    /// Bytes the QP may newly put in flight (`send_budget.rs`).
    pub(crate) send_room: u64,
    /// Set when the QP had a packet to send and no room for it: it waits
    /// for room.
    pub(crate) short_of_room: bool,
}

impl Ctx<'_> {
    /// Queues a completion. On overrun the completion is lost and
    /// IBV_EVENT_CQ_ERR is raised once; returns false then. If the CQ was
    /// armed by `ibv_req_notify_cq` and this completion qualifies (any
    /// completion, or for solicited-only a solicited or failed one), a
    /// completion event is queued and the CQ disarmed.
    pub(crate) fn complete(&mut self, cq: CqId, wc: WorkCompletion, solicited: bool) -> bool {
        let Some(c) = self.cqs.get_mut(cq) else {
            return false;
        };
        let was_overrun = c.overrun;
        if !c.push(wc) {
            self.lost_completion = true;
            if !was_overrun {
                self.events.push_back(AsyncEvent::CqErr(cq));
            }
            return false;
        }
        let qualifies =
            |solicited_only: bool| !solicited_only || solicited || wc.status != WcStatus::Success;
        if c.notify.is_some_and(qualifies) {
            c.notify = None;
            self.comp_events.push_back(cq);
        }
        true
    }

    /// Removes the completions of QP `qp_num` from `cq` (QP reset).
    pub(crate) fn forget_completions(&mut self, cq: CqId, qp_num: u32) {
        if let Some(c) = self.cqs.get_mut(cq) {
            c.forget_qp(qp_num);
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
