//! The engine: one open device context with all its verbs objects.
//!
//! The engine is sans-IO: it owns no socket, thread or clock. Verbs are
//! method calls; what the engine has to tell the outside world (completions,
//! async events, and with the data path packets and timer deadlines) is
//! queued for the embedder to collect. The verbs are split by object over
//! the `verbs_*` modules.

use crate::device::{DeviceAttr, DeviceConfig, PortAttr};
use crate::error::{einval, VerbsResult};
use crate::event::AsyncEvent;
use crate::gid::Gid;
use crate::handles::{AhId, CqId, MrId, PdId, QpId, SrqId};
use crate::keys::{KeyAllocator, QpnAllocator};
use crate::objects::{Ah, Cq, Mr, Pd};
use crate::qp::Qp;
use crate::srq::Srq;
use slotmap::SlotMap;
use std::collections::{HashMap, VecDeque};

/// One device context and every object created in it.
#[derive(Debug)]
pub struct Engine {
    pub(crate) config: DeviceConfig,
    pub(crate) device_attr: DeviceAttr,
    pub(crate) pds: SlotMap<PdId, Pd>,
    pub(crate) mrs: SlotMap<MrId, Mr>,
    pub(crate) mr_by_key: HashMap<u32, MrId>,
    pub(crate) ahs: SlotMap<AhId, Ah>,
    pub(crate) cqs: SlotMap<CqId, Cq>,
    pub(crate) srqs: SlotMap<SrqId, Srq>,
    pub(crate) qps: SlotMap<QpId, Qp>,
    pub(crate) qp_by_num: HashMap<u32, QpId>,
    pub(crate) keys: KeyAllocator,
    pub(crate) qpns: QpnAllocator,
    pub(crate) events: VecDeque<AsyncEvent>,
}

impl Engine {
    /// Opens a device context.
    pub fn new(config: DeviceConfig) -> Engine {
        Engine {
            device_attr: config.device_attr(),
            keys: KeyAllocator::new(config.seed),
            qpns: QpnAllocator::new(config.qpn_base),
            config,
            pds: SlotMap::with_key(),
            mrs: SlotMap::with_key(),
            mr_by_key: HashMap::new(),
            ahs: SlotMap::with_key(),
            cqs: SlotMap::with_key(),
            srqs: SlotMap::with_key(),
            qps: SlotMap::with_key(),
            qp_by_num: HashMap::new(),
            events: VecDeque::new(),
        }
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
