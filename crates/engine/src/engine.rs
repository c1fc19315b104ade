//! The engine: one open device context with all its verbs objects.
//!
//! The engine is sans-IO: it owns no socket, thread or clock. Verbs are
//! method calls; what the engine has to tell the outside world (completions,
//! async events, and with the data path packets and timer deadlines) is
//! queued for the embedder to collect. The verbs are split by object over
//! the `verbs_*` modules.

use crate::ctx::Ctx;
use crate::datapath::DatapathStats;
use crate::device::{DeviceAttr, DeviceConfig, PortAttr};
use crate::error::{einval, VerbsResult};
use crate::event::AsyncEvent;
use crate::gid::Gid;
use crate::handles::{AhId, CqId, PdId, QpId, SrqId};
use crate::keys::{KeyAllocator, QpnAllocator};
use crate::mr_table::MrTable;
use crate::objects::{Ah, Cq, Pd};
use crate::qp::Qp;
use crate::schedule::Schedule;
use crate::srq::Srq;
use slotmap::SlotMap;
use std::collections::{HashMap, VecDeque};

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
    pub(crate) qp_by_num: HashMap<u32, QpId>,
    pub(crate) keys: KeyAllocator,
    pub(crate) qpns: QpnAllocator,
    pub(crate) events: VecDeque<AsyncEvent>,
    pub(crate) comp_events: VecDeque<CqId>,
    /// A QP-level operation lost a completion to a CQ overrun.
    pub(crate) lost_completion: bool,
    pub(crate) schedule: Schedule,
    pub(crate) stats: DatapathStats,
    /// Reused buffer for packet payloads.
    pub(crate) scratch: Vec<u8>,
}

impl Engine {
    /// Opens a device context.
    pub fn new(config: DeviceConfig) -> Engine {
        Engine {
            device_attr: config.device_attr(),
            keys: KeyAllocator::new(config.seed),
            qpns: QpnAllocator::new(config.qpn_base..config.qpn_limit),
            config,
            pds: SlotMap::with_key(),
            mrs: MrTable::default(),
            ahs: SlotMap::with_key(),
            cqs: SlotMap::with_key(),
            srqs: SlotMap::with_key(),
            qps: SlotMap::with_key(),
            qp_by_num: HashMap::new(),
            events: VecDeque::new(),
            comp_events: VecDeque::new(),
            lost_completion: false,
            schedule: Schedule::default(),
            stats: DatapathStats::default(),
            scratch: Vec::new(),
        }
    }

    /// A view of everything but the QPs, for completing WRs and raising
    /// events outside the data path.
    pub(crate) fn ctx(&mut self) -> Ctx<'_> {
        Ctx {
            config: &self.config,
            mrs: &mut self.mrs,
            ahs: &self.ahs,
            cqs: &mut self.cqs,
            srqs: &mut self.srqs,
            events: &mut self.events,
            comp_events: &mut self.comp_events,
            lost_completion: &mut self.lost_completion,
        }
    }

    /// One QP, mutably, beside a view of everything else it may touch.
    pub(crate) fn qp_ctx(&mut self, id: QpId) -> Option<(&mut Qp, Ctx<'_>)> {
        let Engine {
            config,
            mrs,
            ahs,
            cqs,
            srqs,
            qps,
            events,
            comp_events,
            lost_completion,
            ..
        } = self;
        let qp = qps.get_mut(id)?;
        let ctx = Ctx {
            config,
            mrs,
            ahs,
            cqs,
            srqs,
            events,
            comp_events,
            lost_completion,
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
        self.config.port_attr(port).ok_or(einval("no such port"))
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
