//! softverbs' Rust verbs API: the engine's verbs called from Rust, on a
//! soft device or on a real one, with the same code.
//!
//! [`open`] takes a device name as `SOFTVERBS_DEVICES` (or the
//! configuration file, docs/architecture.md "Devices") defines it:
//!
//! * a soft device (`softverbs0=127.0.0.1`): the engine runs in this
//!   process with its progress thread and UDP endpoint, as in a program
//!   that opens the device through libibverbs, and talks RoCEv2 to any
//!   peer (other softverbs processes, rxe, a NIC);
//! * a pass-through device (`sv_rxe0=passthrough:rxe0`): every call goes
//!   to the real device through libibverbs and its provider.
//!
//! Either way the calls are the methods of [`Verbs`], with the engine's
//! types (`QpAttr`, `SendWr`, `WorkCompletion`, ...) and its object
//! handles (`PdId`, `QpId`, ...), and the errors carry the errno a C
//! program would get. Memory is a [`Region`], allocated by the API and
//! kept alive while registered.
//!
//! ```no_run
//! use softverbs_api::*;
//! let dev = open("softverbs0")?;
//! let pd = dev.alloc_pd()?;
//! let region = Region::new(4096);
//! let mr = dev.reg_mr(pd, &region, AccessFlags::LOCAL_WRITE.bits())?;
//! let cq = dev.create_cq(16)?;
//! # let _ = (mr, cq);
//! # Ok::<(), Error>(())
//! ```
//!
//! The verbs rules of `SOFTVERBS_FAULTS` apply on both kinds of device
//! (on a pass-through device as the provider applies them on its own:
//! posts, completion statuses, `qp_error after=`).
//!
//! Completion and async events are waited for with a timeout
//! ([`Verbs::get_cq_event`], [`Verbs::get_async_event`]; each is
//! acknowledged as it is taken). `SOFTVERBS_TRACE` traces the calls on
//! both kinds of device. Of the port and device events only
//! IBV_EVENT_PORT_ERR is offered (listed in docs/supported.md).

#![deny(unsafe_code)]

#[allow(unsafe_code)]
pub mod convert;
mod events;
#[allow(unsafe_code)]
mod real;
mod region;
mod soft;
mod traced;
mod verbs_faults;

pub use region::Region;
pub use softverbs_engine::{
    send_flags, send_opcode, wc_flags, AccessFlags, AhAttr, AhId, AsyncEvent, AtomicTarget, CqId,
    Gid, GlobalRoute, MrId, PdId, QpAttr, QpAttrMask, QpCap, QpCreated, QpId, QpInitAttr, QpState,
    QpType, RdmaTarget, RecvWr, SendWr, Sge, SrqAttr, SrqAttrMask, SrqId, UdTarget, WcOpcode,
    WcStatus, WorkCompletion,
};

use softverbs_config::Config;
use std::borrow::Cow;
use std::time::Duration;

/// A failed call: the errno a C program would see, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} (errno {errno})")]
pub struct Error {
    /// The errno.
    pub errno: i32,
    /// What failed.
    pub reason: Cow<'static, str>,
}

impl From<softverbs_engine::VerbsError> for Error {
    fn from(e: softverbs_engine::VerbsError) -> Error {
        Error {
            errno: e.errno(),
            reason: Cow::Borrowed(e.reason),
        }
    }
}

impl Error {
    fn new(errno: i32, reason: impl Into<Cow<'static, str>>) -> Error {
        Error {
            errno,
            reason: reason.into(),
        }
    }
}

/// What the API's calls return.
pub type Result<T> = std::result::Result<T, Error>;

/// A registered region's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrKeys {
    /// Its handle, for [`Verbs::dereg_mr`].
    pub id: MrId,
    /// The key for local SGEs.
    pub lkey: u32,
    /// The key remote peers name it by.
    pub rkey: u32,
}

/// The verbs of one open device, soft or real. Every method is one verb
/// of the same name (`ibv_alloc_pd` is [`Verbs::alloc_pd`], ...), with
/// its rules (the seed pages) and its errno.
pub trait Verbs: Send + Sync + std::fmt::Debug {
    /// The name it was opened by.
    fn name(&self) -> &str;
    /// Whether a real device answers (a pass-through device).
    fn is_passthrough(&self) -> bool;
    /// `ibv_query_gid` on port 1.
    fn query_gid(&self, index: u32) -> Result<Gid>;
    /// `ibv_alloc_pd`.
    fn alloc_pd(&self) -> Result<PdId>;
    /// `ibv_dealloc_pd`.
    fn dealloc_pd(&self, pd: PdId) -> Result<()>;
    /// `ibv_reg_mr` of the whole of `region` (kept alive until
    /// [`Verbs::dereg_mr`]).
    fn reg_mr(&self, pd: PdId, region: &Region, access: u32) -> Result<MrKeys>;
    /// `ibv_dereg_mr`.
    fn dereg_mr(&self, mr: MrId) -> Result<()>;
    /// `ibv_create_cq` without a completion channel, on vector 0.
    fn create_cq(&self, cqe: u32) -> Result<CqId>;
    /// `ibv_destroy_cq`.
    fn destroy_cq(&self, cq: CqId) -> Result<()>;
    /// `ibv_poll_cq`: up to `max` completions, oldest first.
    fn poll_cq(&self, cq: CqId, max: usize) -> Result<Vec<WorkCompletion>>;
    /// `ibv_create_qp` (RC, UC or UD, receiving through its own queue or
    /// an SRQ).
    fn create_qp(&self, pd: PdId, init: &QpInitAttr) -> Result<QpCreated>;
    /// `ibv_modify_qp`.
    fn modify_qp(&self, qp: QpId, attr: &QpAttr, mask: QpAttrMask) -> Result<()>;
    /// `ibv_query_qp` of every attribute.
    fn query_qp(&self, qp: QpId) -> Result<QpAttr>;
    /// `ibv_destroy_qp`.
    fn destroy_qp(&self, qp: QpId) -> Result<()>;
    /// `ibv_create_ah`.
    fn create_ah(&self, pd: PdId, attr: &AhAttr) -> Result<AhId>;
    /// `ibv_destroy_ah`.
    fn destroy_ah(&self, ah: AhId) -> Result<()>;
    /// `ibv_post_send` of one WR.
    fn post_send(&self, qp: QpId, wr: &SendWr<'_>) -> Result<()>;
    /// `ibv_post_recv` of one WR.
    fn post_recv(&self, qp: QpId, wr: &RecvWr<'_>) -> Result<()>;
    /// `ibv_create_srq`: the SRQ and its actual attributes.
    fn create_srq(&self, pd: PdId, attr: &SrqAttr) -> Result<(SrqId, SrqAttr)>;
    /// `ibv_modify_srq`.
    fn modify_srq(&self, srq: SrqId, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()>;
    /// `ibv_query_srq`.
    fn query_srq(&self, srq: SrqId) -> Result<SrqAttr>;
    /// `ibv_destroy_srq`.
    fn destroy_srq(&self, srq: SrqId) -> Result<()>;
    /// `ibv_post_srq_recv` of one WR.
    fn post_srq_recv(&self, srq: SrqId, wr: &RecvWr<'_>) -> Result<()>;
    /// `ibv_req_notify_cq`: the next completion of `cq` (with
    /// `solicited_only`, the next solicited or failed one) raises a
    /// completion event.
    fn req_notify_cq(&self, cq: CqId, solicited_only: bool) -> Result<()>;
    /// `ibv_get_cq_event`, then `ibv_ack_cq_events`: the CQ of the next
    /// completion event, waiting at most `timeout`; `None` if none came.
    fn get_cq_event(&self, timeout: Duration) -> Result<Option<CqId>>;
    /// `ibv_get_async_event`, then `ibv_ack_async_event`: the next event
    /// of a QP, CQ or SRQ, waiting at most `timeout`; `None` if none came.
    fn get_async_event(&self, timeout: Duration) -> Result<Option<AsyncEvent>>;
}

/// Opens the device called `name` in this process's softverbs
/// configuration: a soft device runs the engine here, a pass-through
/// device opens its real device through libibverbs. With
/// `SOFTVERBS_TRACE` set, its calls are traced (docs/tracing.md).
pub fn open(name: &str) -> Result<Box<dyn Verbs>> {
    let config = Config::load().map_err(|e| Error::new(libc::EINVAL, e.to_string()))?;
    softverbs_trace::open_from_env().map_err(|e| Error::new(libc::EINVAL, e.to_string()))?;
    let dev: Box<dyn Verbs> = if let Some(dev) = config.devices.iter().find(|d| d.name == name) {
        Box::new(soft::Soft::open(dev)?)
    } else if let Some(dev) = config.passthrough.iter().find(|d| d.name == name) {
        Box::new(real::Real::open(&dev.name, &dev.real)?)
    } else {
        return Err(Error::new(
            libc::ENODEV,
            format!("no softverbs device is called {name} ({})", config.source),
        ));
    };
    Ok(if softverbs_trace::on() {
        Box::new(traced::Traced::new(dev))
    } else {
        dev
    })
}
