//! Asynchronous events (`struct ibv_async_event`) the engine raises.

use crate::handles::{CqId, QpId, SrqId};

/// `enum ibv_event_type` values, with the object each concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// IBV_EVENT_CQ_ERR (0): the CQ overran.
    CqErr(CqId),
    /// IBV_EVENT_QP_FATAL (1).
    QpFatal(QpId),
    /// IBV_EVENT_QP_REQ_ERR (2).
    QpReqErr(QpId),
    /// IBV_EVENT_QP_ACCESS_ERR (3).
    QpAccessErr(QpId),
    /// IBV_EVENT_COMM_EST (4).
    CommEst(QpId),
    /// IBV_EVENT_SQ_DRAINED (5).
    SqDrained(QpId),
    /// IBV_EVENT_QP_LAST_WQE_REACHED (16).
    QpLastWqeReached(QpId),
    /// IBV_EVENT_SRQ_LIMIT_REACHED (15).
    SrqLimitReached(SrqId),
    /// IBV_EVENT_PORT_ERR (10): the port's link went down (its number).
    PortErr(u8),
    /// IBV_EVENT_PORT_ACTIVE (9): the port's link came back up.
    PortActive(u8),
}

impl AsyncEvent {
    /// The port a port event names (events of a port name no object).
    pub const fn port(&self) -> Option<u8> {
        match self {
            AsyncEvent::PortErr(port) | AsyncEvent::PortActive(port) => Some(*port),
            _ => None,
        }
    }

    /// The `enum ibv_event_type` number.
    pub const fn event_type(&self) -> u32 {
        match self {
            AsyncEvent::CqErr(_) => 0,
            AsyncEvent::QpFatal(_) => 1,
            AsyncEvent::QpReqErr(_) => 2,
            AsyncEvent::QpAccessErr(_) => 3,
            AsyncEvent::CommEst(_) => 4,
            AsyncEvent::SqDrained(_) => 5,
            AsyncEvent::QpLastWqeReached(_) => 16,
            AsyncEvent::SrqLimitReached(_) => 15,
            AsyncEvent::PortErr(_) => 10,
            AsyncEvent::PortActive(_) => 9,
        }
    }
}
