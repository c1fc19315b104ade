//! `qp_error` rules on a hooked pass-through context: the QP is moved to
//! ERR through the real provider and IBV_EVENT_QP_FATAL is raised on the
//! context's merged async descriptor ([`MergedFd`]), as a soft device
//! does. `after=N` fires from the post verbs; `at=TIME` from an alarm
//! thread the context starts when it opens and stops when it closes.

use crate::ffi::*;
use crate::merged_fd::{Kind, MergedFd, Record};
use crate::passthrough::Hooked;
use parking_lot::{Condvar, Mutex};
use softverbs_faults::TimedQpError;
use std::io;
use std::os::raw::c_int;
use std::ptr::addr_of_mut;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// What a context with `qp_error` rules keeps to raise their events.
#[derive(Debug)]
pub struct QpErrors {
    /// The merged async descriptor; None once the context closed.
    events: Mutex<Option<Arc<MergedFd>>>,
    /// The thread firing the `at=` rules, if there are any.
    alarm: Mutex<Option<Alarm>>,
}

/// The alarm thread, and how to stop it.
#[derive(Debug)]
struct Alarm {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: JoinHandle<()>,
}

impl QpErrors {
    /// Merges raised events into the async descriptor of `context`.
    ///
    /// # Safety
    /// `context` is a live context libibverbs opened, not yet handed out.
    pub unsafe fn install(context: *mut ibv_context) -> io::Result<QpErrors> {
        // SAFETY: per the contract, nobody else reads or writes it yet.
        let fd = unsafe { addr_of_mut!((*context).async_fd) };
        // SAFETY: as above.
        let merged = MergedFd::new(Kind::Async, unsafe { fd.read() })?;
        // SAFETY: as above.
        unsafe { fd.write(merged.fd()) };
        Ok(QpErrors {
            events: Mutex::new(Some(Arc::new(merged))),
            alarm: Mutex::new(None),
        })
    }

    /// The merged descriptor, while the context is open.
    pub fn merged(&self) -> Option<Arc<MergedFd>> {
        self.events.lock().clone()
    }

    /// Stops the alarm and gives the context its kernel descriptor back
    /// (libibverbs closes it with the context); the merged one closes once
    /// no reader holds it.
    ///
    /// # Safety
    /// `context` is the live context these were installed on, being closed.
    pub unsafe fn uninstall(&self, context: *mut ibv_context) {
        if let Some(alarm) = self.alarm.lock().take() {
            *alarm.stop.0.lock() = true;
            alarm.stop.1.notify_all();
            let _ = alarm.thread.join();
        }
        if let Some(merged) = self.events.lock().take() {
            // SAFETY: per the contract; the application no longer uses the
            // context's descriptor once it closes the context.
            unsafe { addr_of_mut!((*context).async_fd).write(merged.kernel_fd()) };
        }
    }
}

impl Hooked {
    /// Starts the thread that fires this context's `qp_error at=` rules,
    /// if it has any.
    pub fn start_alarm(&'static self) {
        let (Some(faults), Some(q)) = (&self.faults, &self.qp_errors) else {
            return;
        };
        let mut due: Vec<TimedQpError> = faults.lock().timed_qp_errors().collect();
        if due.is_empty() {
            return;
        }
        due.sort_by_key(|d| d.at);
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stopper = Arc::clone(&stop);
        let spawned = softverbs_transport::own_threads::spawning(|| {
            std::thread::Builder::new()
                .name("softverbs-alarm".into())
                .spawn(move || self.run_alarm(&stopper, due))
        });
        match spawned {
            Ok(thread) => *q.alarm.lock() = Some(Alarm { stop, thread }),
            Err(e) => softverbs_transport::say!(
                "softverbs: {}: no thread for the qp_error at= rules: {e}",
                self.name
            ),
        }
    }

    /// Fires each timed rule when its time comes, unless stopped first.
    fn run_alarm(&self, stop: &(Mutex<bool>, Condvar), due: Vec<TimedQpError>) {
        // One of softverbs' threads: counted as such, the application's
        // signals blocked (own_threads.rs).
        let _own = softverbs_transport::own_threads::OwnThread::register();
        for rule in due {
            let when = self.opened + rule.at;
            let mut stopped = stop.0.lock();
            while !*stopped {
                let Some(left) = when.checked_duration_since(Instant::now()) else {
                    break;
                };
                stop.1.wait_for(&mut stopped, left);
            }
            if *stopped {
                return;
            }
            drop(stopped);
            let failed = self.fire_timed(rule.qp);
            if let Some(faults) = &self.faults {
                let mut faults = faults.lock();
                failed
                    .into_iter()
                    .for_each(|n| faults.fired(rule.rule, Some(n)));
            }
        }
    }

    /// A timed rule's time came: every QP it names (None: every QP) that
    /// is in INIT, RTR, RTS, SQD or SQE fails, as on a soft device. The
    /// numbers of those that failed.
    fn fire_timed(&self, filter: Option<u32>) -> Vec<u32> {
        let mut failed = Vec::new();
        let qps = self.qps.lock();
        for (&num, &qp) in qps.iter() {
            if filter.is_some_and(|f| f != num) {
                continue;
            }
            let mut attr = ibv_qp_attr::ZEROED;
            let mut init = ibv_qp_init_attr::ZEROED;
            let Some(query) = self.originals.query_qp else {
                continue;
            };
            // SAFETY: a live QP of this context (it leaves `qps`, locked
            // here, before it is destroyed); the out structs are ours.
            let ret = unsafe {
                query(
                    qp as *mut ibv_qp,
                    &mut attr,
                    IBV_QP_STATE as c_int,
                    &mut init,
                )
            };
            if ret == 0 && (IBV_QPS_INIT..=IBV_QPS_SQE).contains(&attr.qp_state) {
                self.to_err(qp);
                self.raise_fatal(qp);
                failed.push(num);
            }
        }
        failed
    }

    /// A `qp_error after=N` rule fired for QP `qp_num`: it fails.
    pub fn kill_qp(&self, qp_num: u32) {
        let qps = self.qps.lock();
        if let Some(&qp) = qps.get(&qp_num) {
            self.to_err(qp);
            self.raise_fatal(qp);
        }
    }

    /// Raises IBV_EVENT_QP_FATAL for the QP at `qp` (its address is the
    /// element the kernel's events name it by, libibverbs' user handle).
    fn raise_fatal(&self, qp: usize) {
        if let Some(merged) = self.qp_errors.as_ref().and_then(QpErrors::merged) {
            merged.raise(Record {
                element: qp as u64,
                event_type: IBV_EVENT_QP_FATAL,
            });
        }
    }

    /// QP `qp` is about to be destroyed: its waiting raised events go, and
    /// the acks of those handed out are taken back from its count, which
    /// libibverbs' destroy compares with the kernel's count of events.
    /// Returns what to give [`Hooked::recount_raised`] if the destroy fails.
    ///
    /// # Safety
    /// `qp` is a live QP of this context.
    pub unsafe fn discount_raised(&self, qp: *mut ibv_qp) -> u32 {
        let Some(merged) = self.qp_errors.as_ref().and_then(QpErrors::merged) else {
            return 0;
        };
        let n = merged.forget(qp as u64);
        // SAFETY: per the contract.
        unsafe { add_completed(qp, n.wrapping_neg()) };
        n
    }

    /// The destroy after [`Hooked::discount_raised`] failed: the `n`
    /// raised events count again.
    ///
    /// # Safety
    /// `qp` is a live QP of this context.
    pub unsafe fn recount_raised(&self, qp: *mut ibv_qp, n: u32) {
        if let Some(merged) = self.qp_errors.as_ref().and_then(QpErrors::merged) {
            merged.remember(qp as u64, n);
            // SAFETY: per the contract.
            unsafe { add_completed(qp, n) };
        }
    }
}

/// Adds `n` (wrapping) to the QP's count of acked events.
///
/// # Safety
/// `qp` is a live QP.
unsafe fn add_completed(qp: *mut ibv_qp, n: u32) {
    // SAFETY: per the contract; libibverbs made the mutex with the QP and
    // changes the count under it (`ibv_ack_async_event`).
    unsafe {
        let (mutex, count) = (
            addr_of_mut!((*qp).mutex),
            addr_of_mut!((*qp).events_completed),
        );
        crate::event_acks::add_acked(mutex, count, n);
    }
}
