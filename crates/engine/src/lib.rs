//! The softverbs engine: a sans-IO implementation of the verbs object model
//! and the QP and SRQ state machines of the verbs manual pages and the
//! InfiniBand Architecture Specification.
//!
//! An [`Engine`] is one open device context. Verbs are plain method calls
//! returning [`VerbsResult`], whose error carries the errno a real provider
//! returns. The engine has no I/O, threads or clock inside: completions and
//! async events are queued for the embedder (the provider shim, a
//! simulator, a test) to collect.
//!
//! See docs/architecture.md for how the crates fit together and
//! docs/conformance.md for every rule with its source.

mod access;
mod ah_attr;
mod attr_mask;
mod cnp;
mod completer;
mod completion_events;
mod congestion;
mod cq_ring;
mod ctx;
mod datapath;
mod device;
pub mod direct;
mod direct_engine_target;
mod direct_path;
mod early_go_back;
mod engine;
mod error;
mod event;
mod fault_points;
mod flow_control;
mod gid;
mod gid_route;
mod handles;
mod keys;
mod loss_window;
mod mcast;
mod memory;
mod mr_table;
mod mtu;
mod objects;
mod pacing;
mod packet_cost;
mod post;
mod qp;
mod qp_attr;
mod qp_modify;
mod qp_state;
mod recv_queue;
mod recv_side;
mod requester;
mod requester_direct;
mod responder;
mod rnr_probe;
mod room;
mod schedule;
mod send_budget;
mod send_side;
mod srq;
mod srq_limit;
mod time;
mod transition;
mod transmit;
mod verbs_qp;
mod verbs_resources;
mod verbs_srq;
mod wc;
mod wr;

pub use access::AccessFlags;
pub use ah_attr::{AhAttr, GlobalRoute};
pub use attr_mask::{QpAttrMask, SrqAttrMask};
pub use cq_ring::CqRing;
pub use datapath::{Arrival, DatapathStats, RecoveryStats};
pub use device::{
    cap_flags, AtomicCap, DeviceAttr, DeviceConfig, DeviceLimits, LinkState, PortAttr, PortConfig,
    LINK_LAYER_ETHERNET, PHYS_STATE_DISABLED, PHYS_STATE_LINK_UP, PHYS_STATE_POLLING, PORT_ACTIVE,
    PORT_CM_SUP, PORT_DOWN, PORT_IP_BASED_GIDS,
};
pub use direct_engine_target::EngineTarget;
pub use engine::Engine;
pub use error::{ErrorKind, VerbsError, VerbsResult, QPN_EXHAUSTED};
pub use event::AsyncEvent;
pub use gid::Gid;
pub use gid_route::gids_of;
pub use handles::{AhId, CqId, MrId, PdId, QpId, SrqId};
pub use mcast::{is_multicast, Membership, MULTICAST_QPN};
pub use memory::{FlatMemory, HostMemory, MemResult, MemoryFault};
pub use mtu::Mtu;
pub use objects::Mr;
pub use packet_cost::PacketCost;
pub use qp_attr::{QpAttr, QpCap, QpInitAttr, MIG_MIGRATED};
pub use qp_state::{QpState, QpType};
pub use recv_queue::{RecvQueueId, RecvShare};
pub use responder::GRH_LEN;
pub use srq::SrqAttr;
pub use srq_limit::SrqLimit;
pub use time::{ack_timeout, rnr_delay, Nanos};
pub use transition::{mask_allowed, transition_rule, TransitionRule};
pub use transmit::{PacketSink, Reservation, Route, Transmit, MAX_PACKET_LEN};
pub use verbs_qp::QpCreated;
pub use verbs_resources::ReregMr;
pub use wc::{wc_flags, WcOpcode, WcStatus, WorkCompletion};
pub use wr::{
    opcode_allowed, send_flags, send_opcode, AtomicTarget, InlineData, RdmaTarget, RecvWqe, RecvWr,
    SendWr, Sge, SgeList, UdTarget,
};
