//! The soft backend: the engine in this process, driven over UDP by the
//! transport's [`Driver`] (its progress thread, its endpoint and the
//! host daemon), with [`RegionMemory`] as the memory MRs describe.

use crate::events::EventQueues;
use crate::region::{Region, RegionMemory};
use crate::{Error, MrKeys, Result, Verbs};
use softverbs_config::{Config, SoftDevice};
use softverbs_engine::{
    AhAttr, AhId, AsyncEvent, CqId, Engine, Gid, MrId, PdId, QpAttr, QpAttrMask, QpCreated, QpId,
    QpInitAttr, RecvWr, SendWr, SrqAttr, SrqAttrMask, SrqId, WorkCompletion,
};
use softverbs_transport::{DeviceFailed, Driver, DriverConfig, Notify, Polled};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// An open soft device.
#[derive(Debug)]
pub struct Soft {
    name: String,
    driver: Driver<RegionMemory>,
    events: Arc<EventQueues>,
}

impl Soft {
    /// Starts the engine of `dev` (its slot from the host daemon, which is
    /// started if none runs).
    pub fn open(dev: &SoftDevice) -> Result<Soft> {
        let program = daemon_program();
        let no_program = program.is_none();
        let cfg = DriverConfig {
            device: dev.device_config(fastrand::u64(..)),
            ip: dev.ip,
            daemon: Config::daemon(program),
        };
        let events = Arc::new(EventQueues::default());
        let notify: Arc<dyn Notify> = events.clone();
        let driver = Driver::start(cfg, RegionMemory::default(), notify)
            .map_err(|e| open_error(&dev.name, &e, no_program))?;
        Ok(Soft {
            name: dev.name.clone(),
            driver,
            events,
        })
    }

    /// Runs `verb` on the engine; EIO once the device has failed.
    fn with<R>(
        &self,
        verb: impl FnOnce(&mut Engine, &mut RegionMemory) -> softverbs_engine::VerbsResult<R>,
    ) -> Result<R> {
        answer(self.driver.try_with(verb))
    }
}

/// A verb's answer; EIO once the device has failed.
fn answer<R>(r: std::result::Result<softverbs_engine::VerbsResult<R>, DeviceFailed>) -> Result<R> {
    match r {
        Ok(r) => r.map_err(Error::from),
        Err(failed) => Err(Error::new(libc::EIO, failed.to_string())),
    }
}

/// Why `name` did not open; without a daemon program, also how one is
/// found (a bare ECONNREFUSED says nothing of it).
fn open_error(name: &str, e: &std::io::Error, no_program: bool) -> Error {
    let mut error = io_error(name, e);
    if no_program {
        error.reason = format!(
            "{}; no host daemon runs, and no `softverbs` command was found to start one \
             (SOFTVERBS_DAEMON names it; else it is looked for beside this program, \
             one directory up, and on PATH)",
            error.reason
        )
        .into();
    }
    error
}

fn io_error(name: &str, e: &std::io::Error) -> Error {
    Error::new(
        e.raw_os_error().unwrap_or(libc::EIO),
        format!("cannot open {name}: {e}"),
    )
}

/// The `softverbs` command that starts the host daemon: `SOFTVERBS_DAEMON`,
/// else one beside this program or one directory up (cargo puts examples
/// and tests in a directory below its binaries), else the first on PATH.
fn daemon_program() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SOFTVERBS_DAEMON").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok();
    let dir = exe.as_deref().and_then(std::path::Path::parent);
    let near = dir.into_iter().chain(dir.and_then(std::path::Path::parent));
    let path = std::env::var_os("PATH").unwrap_or_default();
    near.map(|d| d.join("softverbs"))
        .chain(std::env::split_paths(&path).map(|dir| dir.join("softverbs")))
        .find(|p| p.is_file())
}

impl Verbs for Soft {
    fn name(&self) -> &str {
        &self.name
    }

    fn is_passthrough(&self) -> bool {
        false
    }

    fn query_gid(&self, index: u32) -> Result<Gid> {
        self.with(|e, _| e.query_gid(1, index))
    }

    fn alloc_pd(&self) -> Result<PdId> {
        self.with(|e, _| e.alloc_pd())
    }

    fn dealloc_pd(&self, pd: PdId) -> Result<()> {
        self.with(|e, _| e.dealloc_pd(pd))
    }

    fn reg_mr(&self, pd: PdId, region: &Region, access: u32) -> Result<MrKeys> {
        let (addr, len) = (region.addr(), region.len() as u64);
        self.with(|e, mem| {
            let key = e.reg_mr(pd, addr, len, addr, access)?.key;
            mem.add(region);
            let id = e.mr_by_key(key).map(|(id, _)| id);
            Ok(id.map(|id| MrKeys {
                id,
                lkey: key,
                rkey: key,
            }))
        })?
        .ok_or_else(|| Error::new(libc::EIO, "the MR just registered is gone"))
    }

    fn dereg_mr(&self, mr: MrId) -> Result<()> {
        self.with(|e, mem| {
            let addr = e.mr(mr).map(|m| m.addr);
            e.dereg_mr(mr)?;
            if let Some(addr) = addr {
                mem.remove(addr);
            }
            Ok(())
        })
    }

    fn create_cq(&self, cqe: u32) -> Result<CqId> {
        self.with(|e, _| e.create_cq(cqe, 0).map(|(cq, _)| cq))
    }

    fn destroy_cq(&self, cq: CqId) -> Result<()> {
        self.with(|e, _| e.destroy_cq(cq))
    }

    fn poll_cq(&self, cq: CqId, max: usize) -> Result<Vec<WorkCompletion>> {
        let mut out = Vec::new();
        answer(
            self.driver
                .try_poll_with(|e, _| Polled::poll(e, cq, max, |w| out.push(w))),
        )?;
        Ok(out)
    }

    fn create_qp(&self, pd: PdId, init: &QpInitAttr) -> Result<QpCreated> {
        self.with(|e, _| e.create_qp(pd, init))
    }

    fn modify_qp(&self, qp: QpId, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        self.with(|e, _| e.modify_qp(qp, attr, mask))
    }

    fn query_qp(&self, qp: QpId) -> Result<QpAttr> {
        self.with(|e, _| e.query_qp(qp).map(|(attr, _)| attr))
    }

    fn destroy_qp(&self, qp: QpId) -> Result<()> {
        self.with(|e, _| e.destroy_qp(qp))
    }

    fn create_ah(&self, pd: PdId, attr: &AhAttr) -> Result<AhId> {
        self.with(|e, _| e.create_ah(pd, attr))
    }

    fn destroy_ah(&self, ah: AhId) -> Result<()> {
        self.with(|e, _| e.destroy_ah(ah))
    }

    fn post_send(&self, qp: QpId, wr: &SendWr<'_>) -> Result<()> {
        answer(self.driver.try_post_send_with(|e, _| e.post_send(qp, wr)))
    }

    fn post_recv(&self, qp: QpId, wr: &RecvWr<'_>) -> Result<()> {
        answer(self.driver.try_post_recv_with(|e, _| e.post_recv(qp, wr)))
    }

    fn create_srq(&self, pd: PdId, attr: &SrqAttr) -> Result<(SrqId, SrqAttr)> {
        self.with(|e, _| e.create_srq(pd, attr))
    }

    fn modify_srq(&self, srq: SrqId, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        self.with(|e, _| e.modify_srq(srq, attr, mask))
    }

    fn query_srq(&self, srq: SrqId) -> Result<SrqAttr> {
        self.with(|e, _| e.query_srq(srq))
    }

    fn destroy_srq(&self, srq: SrqId) -> Result<()> {
        self.with(|e, _| e.destroy_srq(srq))
    }

    fn post_srq_recv(&self, srq: SrqId, wr: &RecvWr<'_>) -> Result<()> {
        answer(
            self.driver
                .try_post_recv_with(|e, _| e.post_srq_recv(srq, wr)),
        )
    }

    fn req_notify_cq(&self, cq: CqId, solicited_only: bool) -> Result<()> {
        // Armed before what arrived is taken in (`Driver::try_arm`).
        let armed = answer(self.driver.try_arm(|e| e.req_notify_cq(cq, solicited_only)));
        self.driver.armed_for_event();
        armed
    }

    fn get_cq_event(&self, timeout: Duration) -> Result<Option<CqId>> {
        let cq = self.events.completion(timeout);
        self.failed()?;
        Ok(cq)
    }

    fn get_async_event(&self, timeout: Duration) -> Result<Option<AsyncEvent>> {
        let event = self.events.asynchronous(timeout);
        self.failed()?;
        Ok(event)
    }
}

impl Soft {
    /// EIO once the device has failed (its progress thread panicked).
    fn failed(&self) -> Result<()> {
        if self.events.fatal() {
            return Err(Error::new(libc::EIO, "the device failed"));
        }
        Ok(())
    }
}
