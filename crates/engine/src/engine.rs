//! The engine: one open device context with all its verbs objects.
//!
//! The engine is sans-IO: it owns no socket, thread or clock. Verbs are
//! method calls; what the engine has to tell the outside world (completions,
//! async events, and with the data path packets and timer deadlines) is
//! queued for the embedder to collect. The verbs are split by object over
//! the `verbs_*` modules.

use crate::completion_events::CompletionEvents;
use crate::ctx::Ctx;
use crate::datapath::{DatapathStats, RecoveryStats};
use crate::device::{
    DeviceAttr, DeviceConfig, LinkState, PortAttr, PHYS_STATE_DISABLED, PHYS_STATE_POLLING,
    PORT_DOWN,
};
use crate::error::{einval, VerbsResult};
use crate::event::AsyncEvent;
use crate::fault_points::FaultState;
use crate::gid::Gid;
use crate::handles::{AhId, CqId, PdId, QpId, SrqId};
use crate::keys::{KeyAllocator, QpnAllocator};
use crate::mr_table::MrTable;
use crate::objects::{Ah, Cq, Pd};
use crate::qp::Qp;
use crate::qp_state::QpState;
use crate::schedule::Schedule;
use crate::send_budget::SendBudget;
use crate::srq::Srq;
use rustc_hash::FxHashMap;
use slotmap::SlotMap;
use std::collections::VecDeque;

/// One device context and every object created in it.
#[derive(Debug)]
pub struct Engine {
    pub(crate) config: DeviceConfig,
    pub(crate) device_attr: DeviceAttr,
    pub(crate) pds: SlotMap<PdId, Pd>,
    pub(crate) mrs: MrTable,
    pub(crate) ahs: SlotMap<AhId, Ah>,
    pub(crate) cqs: SlotMap<CqId, Cq>,
    pub(crate) srqs: SlotMap<SrqId, Srq>,
    pub(crate) qps: SlotMap<QpId, Qp>,
    /// QP numbers to QPs, looked up for every packet: Fx hashing, as
    /// the numbers are ours, not an attacker's choice of keys.
    pub(crate) qp_by_num: FxHashMap<u32, QpId>,
    pub(crate) mcast: crate::mcast::McastTable,
    pub(crate) keys: KeyAllocator,
    pub(crate) qpns: QpnAllocator,
    /// The incarnation the next QP starts at: a QP number used again
    /// starts where no fault about its earlier holder can match.
    pub(crate) next_incarnation: u16,
    pub(crate) events: VecDeque<AsyncEvent>,
    pub(crate) comp_events: CompletionEvents,
    pub(crate) schedule: Schedule,
    pub(crate) stats: DatapathStats,
    pub(crate) send_budget: SendBudget,
    /// QPs whose published view may have changed (`poll_qp_change`).
    pub(crate) qp_changes: Vec<(QpId, u32)>,
    /// Keys of MRs whose published view may have changed.
    pub(crate) mr_changes: Vec<u32>,
    /// SRQs created or destroyed since `poll_srq_change` last asked.
    pub(crate) srq_changes: Vec<SrqId>,
    /// Whether `qp_changes` and `mr_changes` are kept (`track_changes`).
    pub(crate) track_changes: bool,
    /// Fault rules (`Engine::set_faults`), boxed: most engines have none.
    pub(crate) faults: Option<Box<FaultState>>,
    /// The ports' link went down for good (`Engine::link_down`).
    pub(crate) link_down: bool,
    /// The ports' network device (`Engine::set_link`).
    pub(crate) link: LinkState,
}

impl Engine {
    /// Opens a device context.
    pub fn new(config: DeviceConfig) -> Engine {
        Engine {
            device_attr: config.device_attr(),
            keys: KeyAllocator::new(config.seed),
            qpns: QpnAllocator::new(config.qpn_base..config.qpn_limit),
            next_incarnation: 0,
            config,
            pds: SlotMap::with_key(),
            mrs: MrTable::default(),
            ahs: SlotMap::with_key(),
            cqs: SlotMap::with_key(),
            srqs: SlotMap::with_key(),
            qps: SlotMap::with_key(),
            mcast: Default::default(),
            qp_by_num: FxHashMap::default(),
            events: VecDeque::new(),
            link_down: false,
            link: LinkState::Up,
            comp_events: CompletionEvents::default(),
            schedule: Schedule::default(),
            stats: DatapathStats::default(),
            send_budget: SendBudget::default(),
            qp_changes: Vec::new(),
            mr_changes: Vec::new(),
            srq_changes: Vec::new(),
            track_changes: false,
            faults: None,
        }
    }

    /// Runs `work` on QP `id` beside a view of everything else it may
    /// touch. A completion the work lost to a CQ overrun leaves this QP
    /// unable to report its work, so it enters the error state with
    /// IBV_EVENT_QP_FATAL (a QP already in ERR has nothing left to lose).
    /// The loss is noted in this call's `Ctx`, so it is charged to this QP
    /// and never to whichever QP runs next.
    pub(crate) fn with_qp<R>(
        &mut self,
        id: QpId,
        work: impl FnOnce(&mut Qp, &mut Ctx<'_>) -> R,
    ) -> Option<R> {
        let (qp, mut ctx) = self.qp_ctx(id)?;
        let before = qp.state;
        let out = work(qp, &mut ctx);
        if ctx.lost_completion && qp.state != QpState::Err {
            ctx.event(AsyncEvent::QpFatal(id));
            qp.enter_error(&mut ctx);
        }
        if ctx.injected_error && qp.state != QpState::Err {
            qp.enter_error(&mut ctx);
        }
        let short_of_room = ctx.short_of_room;
        let recovery = ctx.recovery;
        let in_flight = qp.bytes_in_flight(ctx.config);
        let was = std::mem::replace(&mut qp.charged, in_flight);
        let (after, qpn) = (qp.state, qp.qp_num);
        let freed = self.send_budget.recharge(was, in_flight);
        self.stats.recovery.add(recovery);
        if short_of_room {
            self.send_budget.wait(id);
        }
        if freed {
            self.wake_budget_waiters();
        }
        if after != before {
            self.qp_changed(id, qpn);
        }
        Some(out)
    }

    /// Wakes the QPs the send budget turned away: room was freed.
    pub(crate) fn wake_budget_waiters(&mut self) {
        for qp in self.send_budget.take_waiters() {
            self.schedule.wake_transmit(qp);
        }
    }

    /// One QP, mutably, beside a view of everything else it may touch.
    fn qp_ctx(&mut self, id: QpId) -> Option<(&mut Qp, Ctx<'_>)> {
        let Engine {
            config,
            mrs,
            ahs,
            cqs,
            srqs,
            qps,
            events,
            comp_events,
            send_budget,
            faults,
            ..
        } = self;
        let qp = qps.get_mut(id)?;
        let send_room = send_budget.room(config.send_window_bytes);
        let ctx = Ctx {
            config,
            mrs,
            ahs,
            cqs,
            srqs,
            events,
            comp_events,
            lost_completion: false,
            send_room,
            short_of_room: false,
            faults: faults.as_deref_mut(),
            injected_error: false,
            dropped: false,
            congestion: false,
            recovery: RecoveryStats::default(),
        };
        Some((qp, ctx))
    }

    /// The device configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> &DeviceAttr {
        &self.device_attr
    }

    /// `ibv_query_port`: EINVAL for a port the device does not have.
    pub fn query_port(&self, port: u8) -> VerbsResult<PortAttr> {
        let mut attr = self.config.port_attr(port).ok_or(einval("no such port"))?;
        if self.port_down() {
            attr.state = PORT_DOWN;
            attr.phys_state = match self.link {
                LinkState::NoCarrier if !self.link_down => PHYS_STATE_POLLING,
                _ => PHYS_STATE_DISABLED,
            };
        }
        Ok(attr)
    }

    fn port_down(&self) -> bool {
        self.link_down || self.link != LinkState::Up
    }

    /// Raises `event` for every port.
    fn port_event(&mut self, event: fn(u8) -> AsyncEvent) {
        for port in 1..=self.config.ports.len() {
            self.events.push_back(event(port as u8));
        }
    }

    /// The state of the ports' network device, as a kernel RoCE port
    /// follows its netdev: a port that goes DOWN raises
    /// IBV_EVENT_PORT_ERR, one that comes back ACTIVE
    /// IBV_EVENT_PORT_ACTIVE (not after [`Engine::link_down`]). QPs are
    /// left as they are, as there.
    pub fn set_link(&mut self, link: LinkState) {
        let was_down = self.port_down();
        self.link = link;
        match (was_down, self.port_down()) {
            (false, true) => self.port_event(AsyncEvent::PortErr),
            (true, false) => self.port_event(AsyncEvent::PortActive),
            _ => {}
        }
    }

    /// As [`Engine::set_link`], at open: no event (the state the device
    /// was found in).
    pub fn start_with_link(&mut self, link: LinkState) {
        self.link = link;
    }

    /// The embedder's link is gone for good (softverbs: the host daemon
    /// that carried the device's packets died): every port reads DOWN
    /// from now on and raises IBV_EVENT_PORT_ERR once, as a kernel RoCE
    /// port does when its network device goes down. QPs are left as they
    /// are, as there: what waits for a peer fails by its own timers.
    pub fn link_down(&mut self) {
        let was_down = self.port_down();
        self.link_down = true;
        if !was_down {
            self.port_event(AsyncEvent::PortErr);
        }
    }

    /// `ibv_query_gid`: EINVAL outside the table; empty slots read as zero.
    pub fn query_gid(&self, port: u8, index: u32) -> VerbsResult<Gid> {
        self.config
            .gid(port, index)
            .ok_or(einval("GID index beyond the table"))
    }

    /// `ibv_query_pkey`: EINVAL outside the table.
    pub fn query_pkey(&self, port: u8, index: u16) -> VerbsResult<u16> {
        self.config
            .pkey(port, index)
            .ok_or(einval("P_Key index beyond the table"))
    }

    /// Makes QP numbers `range` available to `create_qp` (a transport
    /// gives a process sharing the device the numbers it owns).
    pub fn add_qpn_range(&mut self, range: std::ops::Range<u32>) {
        self.qpns.add(range);
    }

    /// Whether any RC QP of this context awaits an answer: an
    /// acknowledgement of a request packet it sent, or a READ response it
    /// asked for (what the send budget counts, `send_budget.rs`).
    pub fn awaits_answers(&self) -> bool {
        self.send_budget.used() > 0
    }

    /// Whether a QP may have a packet to send ([`Engine::poll_transmit`]
    /// may return one): false only if none can.
    pub fn may_transmit(&self) -> bool {
        self.schedule.may_transmit()
    }

    /// Whether any CQ is armed for a completion event
    /// (`ibv_req_notify_cq`): its thread may be about to sleep in
    /// `ibv_get_cq_event` rather than poll again.
    pub fn cq_armed(&self) -> bool {
        self.comp_events.any_armed()
    }

    /// The next pending async event (`ibv_get_async_event`).
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    /// Number of live objects of each kind, for leak checks and `softverbs`
    /// diagnostics: (pd, mr, ah, cq, srq, qp).
    pub fn object_counts(&self) -> [usize; 6] {
        [
            self.pds.len(),
            self.mrs.len(),
            self.ahs.len(),
            self.cqs.len(),
            self.srqs.len(),
            self.qps.len(),
        ]
    }
}
