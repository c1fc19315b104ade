//! A device context (`ibv_open_device`): the `verbs_context` libibverbs
//! allocates for us, an engine driven over UDP, and the event channels.

use crate::device::{soft, SoftVerbsDevice};
use crate::events::{Channels, EventPipe, EventSink};
use crate::ffi::*;
use crate::guard::guard;
use crate::libibverbs::{_verbs_init_and_alloc_context, verbs_set_ops, verbs_uninit_context};
use crate::process_memory::ProcessMemory;
use softverbs_transport::{Driver, DriverConfig};
use std::os::fd::IntoRawFd;
use std::os::raw::{c_int, c_void};
use std::ptr::addr_of;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Arc;

/// The memory libibverbs callocs for a context: its `verbs_context`, then
/// our state (boxed, since calloc'ed memory holds no Rust values).
#[repr(C)]
#[derive(Debug)]
pub struct SoftContext {
    /// Must be first; `ibv_context` sits inside it.
    pub vctx: verbs_context,
    /// NULL while alloc_context runs and once the context is closed.
    state: AtomicPtr<ContextState>,
    /// Verbs running on the context now, each holding a [`StateRef`]: the
    /// state goes only once they have left.
    in_verbs: AtomicUsize,
}

/// A context's state, held by a verb for its duration (see
/// [`free_context`]).
#[derive(Debug)]
pub struct StateRef<'a> {
    state: &'a ContextState,
    in_verbs: &'a AtomicUsize,
}

impl std::ops::Deref for StateRef<'_> {
    type Target = ContextState;

    fn deref(&self) -> &ContextState {
        self.state
    }
}

impl Drop for StateRef<'_> {
    fn drop(&mut self) {
        self.in_verbs.fetch_sub(1, Ordering::Release);
    }
}

/// What a context owns besides its C structs.
#[derive(Debug)]
pub struct ContextState {
    /// The device it was opened on.
    pub device: &'static SoftVerbsDevice,
    /// The engine at work.
    pub driver: Driver<ProcessMemory>,
    /// Where events go.
    pub events: Arc<EventSink>,
    /// Completion channels (shared with `events`, which shuts them down
    /// when the device fails).
    pub channels: Channels,
}

/// RDMA_DRIVER_UNKNOWN: softverbs has no kernel driver id.
const DRIVER_ID: u32 = 0;

/// `verbs_device_ops.alloc_context`.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn alloc_context(
    device: *mut ibv_device,
    cmd_fd: c_int,
    _private_data: *mut c_void,
) -> *mut verbs_context {
    guard(std::ptr::null_mut(), || {
        // SAFETY: libibverbs passes one of our devices (our ops table).
        let Some(dev) = soft(device) else {
            return std::ptr::null_mut();
        };
        if !crate::memory_room::room_for(crate::memory_room::CONTEXT) {
            return crate::verbs_basic::null(libc::ENOMEM);
        }
        let cmd_fd_given = cmd_fd >= 0;
        let cmd_fd = if !cmd_fd_given {
            placeholder_cmd_fd()
        } else {
            cmd_fd
        };
        // SAFETY: libibverbs callocs `size_of::<SoftContext>()` bytes and
        // initialises the verbs_context at offset 0 (`context_offset` is
        // an offset in pointer form, as its C macro passes it).
        let raw = unsafe {
            _verbs_init_and_alloc_context(
                device,
                cmd_fd,
                std::mem::size_of::<SoftContext>(),
                std::ptr::null_mut(),
                DRIVER_ID,
            )
        } as *mut SoftContext;
        if raw.is_null() {
            return std::ptr::null_mut();
        }
        if cmd_fd_given && crate::device_view::get().is_some() {
            become_placeholder(cmd_fd);
        }
        match ContextState::open(dev) {
            Ok((state, async_reader)) => {
                // SAFETY: `raw` is the zeroed, initialised allocation above.
                unsafe {
                    (*raw).vctx.context.async_fd = async_reader;
                    (*raw).vctx.context.num_comp_vectors = 1;
                    (*raw)
                        .state
                        .store(Box::into_raw(Box::new(state)), Ordering::SeqCst);
                    let ops = if softverbs_trace::on() {
                        &crate::trace_ops::TRACED_OPS
                    } else {
                        &crate::ops::CONTEXT_OPS
                    };
                    verbs_set_ops(&mut (*raw).vctx, &ops.0);
                }
                // SAFETY: a valid pointer to the verbs_context at offset 0.
                let context = unsafe { &mut (*raw).vctx };
                if softverbs_trace::on() {
                    // SAFETY: the context just made.
                    unsafe { crate::trace_ops::opened(&dev.config.name, &mut context.context) };
                }
                context
            }
            Err(e) => {
                softverbs_transport::say!(
                    "softverbs: cannot open {}: {}",
                    dev.config.name,
                    why(dev, &e)
                );
                // SAFETY: undo libibverbs' allocation as its contract says.
                unsafe {
                    verbs_uninit_context(&mut (*raw).vctx);
                    libc::free(raw.cast());
                }
                crate::guard::set_errno(e.raw_os_error().unwrap_or(libc::EIO));
                if softverbs_trace::on() {
                    // SAFETY: no context (a failed open).
                    unsafe { crate::trace_ops::opened(&dev.config.name, std::ptr::null_mut()) };
                }
                std::ptr::null_mut()
            }
        }
    })
}

impl ContextState {
    fn open(dev: &'static SoftVerbsDevice) -> std::io::Result<(ContextState, c_int)> {
        softverbs_trace::open_from_env()?;
        let pipe = EventPipe::new()?;
        let reader = pipe.reader.map(IntoRawFd::into_raw_fd).unwrap_or(-1);
        let channels = Channels::default();
        let events = Arc::new(EventSink::new(pipe.writer, reader, channels.clone()));
        let cfg = DriverConfig {
            device: dev.config.device_config(fastrand::u64(..)),
            ip: dev.config.ip,
            daemon: softverbs_config::Config::daemon(crate::daemon_program::find()),
        };
        if softverbs_transport::same_host::host::ShmMode::from_env()
            != softverbs_transport::same_host::host::ShmMode::Off
        {
            crate::cross_process::allow_same_user_attach();
        }
        let cross = Arc::new(crate::cross_process::CrossProcessAccess::new());
        let driver = Driver::start_with(cfg, ProcessMemory::new(), events.clone(), Some(cross))
            .inspect_err(|_| {
                // SAFETY: `reader` was just created and not handed out.
                unsafe { libc::close(reader) };
            })?;
        flush_at_exit_once();
        Ok((
            ContextState {
                device: dev,
                driver,
                events,
                channels,
            },
            reader,
        ))
    }
}

/// Registers, once per process, the handler that sends at exit what
/// the open contexts' polls kept for a next verb
/// (`softverbs_transport::driver::flush_at_exit`).
fn flush_at_exit_once() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: registers a function with no arguments that never
        // unwinds (its body runs under `guard`). glibc's atexit records
        // it with this library's DSO handle, so a dlclose that unloads
        // the library runs and removes it first: it is never called
        // after its code is gone.
        unsafe { libc::atexit(flush_at_exit) };
    });
}

extern "C" fn flush_at_exit() {
    crate::guard::guard((), softverbs_transport::driver::flush_at_exit);
}

/// `verbs_context_ops.free_context` (`ibv_close_device`).
///
/// Objects the application did not destroy keep pointing at the context
/// (ibv_close_device(3) does not release them), and a program may call a
/// verb on one afterwards, or while another thread closes the device: on
/// a kernel provider that is an error, not a crash. So the state leaves
/// the context first, is dropped once the verbs running on it have left
/// (stopping the progress thread, closing the sockets: the device's side
/// of every object ends, as the kernel's does when its file closes), and
/// the context's memory, with libibverbs' part of it, stays while objects
/// remain: their verbs then find no state and fail with EIO.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn free_context(context: *mut ibv_context) {
    guard((), || {
        let raw = soft_context_ptr(context);
        // SAFETY: `context` came from alloc_context, so `raw` is our
        // allocation, live (it is freed below only); the two atomics are
        // only ever accessed atomically.
        let (state, in_verbs) = unsafe { (&*addr_of!((*raw).state), &*addr_of!((*raw).in_verbs)) };
        let state = state.swap(std::ptr::null_mut(), Ordering::SeqCst);
        if state.is_null() {
            return; // closed before, with objects left
        }
        // SAFETY: the box alloc_context made, not dropped yet (below only,
        // by the one caller that took it out of the context).
        let forked_child = !unsafe { &*state }.driver.of_this_process();
        // A verb entered before the swap holds the state: wait for it (an
        // application closing a device another thread uses; no verb waits
        // on the closing thread). In a forked child no other thread runs,
        // and the count may be a parent thread's, copied mid-verb.
        while !forked_child && in_verbs.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
        // SAFETY: the box alloc_context made; no verb holds it any more
        // and none can reach it (the pointer is gone), so it drops once.
        let state = unsafe { Box::from_raw(state) };
        // Completion channels point at the context too.
        let objects_left = !state.channels.lock().is_empty()
            || state
                .driver
                .try_with(|e, _| e.object_counts().iter().any(|&n| n > 0))
                .unwrap_or(true);
        drop(state);
        if objects_left {
            // SAFETY: the descriptors are the context's, closed once here
            // instead of by verbs_uninit_context, which would also free
            // libibverbs' part that the objects' verbs still go through.
            unsafe {
                libc::close((*raw).vctx.context.cmd_fd);
                libc::close((*raw).vctx.context.async_fd);
            }
            return;
        }
        // SAFETY: no object points at the context any more: libibverbs
        // releases its part, then we free the allocation.
        unsafe {
            verbs_uninit_context(&mut (*raw).vctx);
            libc::free(raw.cast());
        }
    })
}

/// The `cmd_fd` of a context opened in preload mode, where libibverbs
/// opened no character device: a real descriptor, so that programs that
/// `dup` or `fcntl` it, as pyverbs' shared-PD test does, get an ordinary
/// descriptor rather than -1. libibverbs closes it with the context. It is
/// an empty memfd named [`CMD_FD_NAME`], by which `ibv_import_device`
/// (preload.rs) knows it and answers EOPNOTSUPP instead of handing it to
/// libibverbs' own import, which looks for a kernel device and crashes
/// when there is none.
fn placeholder_cmd_fd() -> c_int {
    // SAFETY: a NUL-terminated name; the descriptor is handed to
    // libibverbs, which owns it from here on.
    unsafe { libc::memfd_create(CMD_FD_NAME.as_ptr(), libc::MFD_CLOEXEC) }
}

/// In the device view libibverbs opens the soft device's command file (a
/// link to `/dev/full`) as `cmd_fd`; the placeholder takes its place under
/// the same number, so that `ibv_import_device` knows it as in preload
/// mode. No `write(2)` reaches it any more: libibverbs' probe while it set
/// the context up (through `ioctl.rs`) made it send every command as an
/// ioctl, which `ioctl.rs` serves.
fn become_placeholder(cmd_fd: c_int) {
    let placeholder = placeholder_cmd_fd();
    if placeholder < 0 {
        return; // keeps /dev/full: only the import's answer differs
    }
    // SAFETY: both are descriptors of this process; dup3 atomically
    // replaces libibverbs' file under the number it owns, and the spare
    // copy is ours to close.
    unsafe {
        libc::dup3(placeholder, cmd_fd, libc::O_CLOEXEC);
        libc::close(placeholder);
    }
}

/// The memfd name of a preload-mode context's `cmd_fd`.
pub const CMD_FD_NAME: &std::ffi::CStr = c"softverbs-context";

fn soft_context_ptr(context: *mut ibv_context) -> *mut SoftContext {
    let offset = std::mem::offset_of!(verbs_context, context);
    (context as *mut u8).wrapping_sub(offset) as *mut SoftContext
}

/// The state of `raw`'s context, held until the [`StateRef`] drops;
/// `None` while the context is being opened or once it is closed.
///
/// # Safety
/// `raw` is a SoftContext alloc_context made and free_context has not
/// freed (it frees none that objects still point at).
unsafe fn enter<'a>(raw: *mut SoftContext) -> Option<StateRef<'a>> {
    // SAFETY: per the contract `raw` is live; the atomics are only ever
    // accessed atomically.
    let (state, in_verbs) = unsafe { (&*addr_of!((*raw).state), &*addr_of!((*raw).in_verbs)) };
    // SeqCst with free_context's swap then load: either it sees this
    // verb counted, or this verb sees the state gone.
    in_verbs.fetch_add(1, Ordering::SeqCst);
    let held = state.load(Ordering::SeqCst);
    if held.is_null() {
        in_verbs.fetch_sub(1, Ordering::Release);
        return None;
    }
    // SAFETY: a non-NULL state is the live box of alloc_context, which
    // free_context drops only once no verb is counted.
    Some(StateRef {
        state: unsafe { &*held },
        in_verbs,
    })
}

/// The state of a context created by softverbs. A closed context's
/// (objects outlive it) unwinds as a failed device does: the entry
/// point's guard answers EIO.
///
/// # Safety
/// `context` must be a context of one of our devices that objects of it,
/// or the caller, still hold.
pub unsafe fn state<'a>(context: *mut ibv_context) -> StateRef<'a> {
    // SAFETY: per the caller's contract.
    let held = unsafe { enter(soft_context_ptr(context)) };
    held.unwrap_or_else(|| std::panic::resume_unwind(Box::new(softverbs_transport::DeviceFailed)))
}

/// The state of `context` if it is one of ours and open.
///
/// # Safety
/// `context` is NULL or a live context from libibverbs (any provider's).
pub unsafe fn soft_state<'a>(context: *mut ibv_context) -> Option<StateRef<'a>> {
    if context.is_null() {
        return None;
    }
    // SAFETY: a non-null context from libibverbs has a valid `device`.
    let device = unsafe { (*context).device };
    soft(device)?;
    // SAFETY: a context of one of our devices was allocated by
    // alloc_context (its state is NULL while alloc_context runs: plugin
    // mode's ioctl probe comes then).
    unsafe { enter(soft_context_ptr(context)) }
}

/// What an application's user needs to know when a device cannot open:
/// the common causes, in the configuration's terms.
pub(crate) fn why(dev: &SoftVerbsDevice, e: &std::io::Error) -> String {
    let ip = dev.config.ip;
    match e.kind() {
        std::io::ErrorKind::AddrNotAvailable => format!(
            "its address {ip} is on no interface of this host ({e}); see `softverbs devices`"
        ),
        std::io::ErrorKind::AddrInUse => format!(
            "UDP port 4791 on {ip} is taken by another softverbs daemon (one started with \
             another SOFTVERBS_DAEMON_SOCKET) or by other software ({e})"
        ),
        _ => daemon_trouble(e),
    }
}

/// What the user needs to know when the daemon could not be reached.
pub fn daemon_trouble(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound => format!(
            "no softverbs daemon serves this network namespace and none could be started \
             ({e}); put the `softverbs` command beside the provider or on PATH, or set \
             SOFTVERBS_DAEMON to it"
        ),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
            "the softverbs daemon of this network namespace did not answer within 10 s \
             ({e}): is it stopped (SIGSTOP, a debugger)? `pgrep -a softverbs` finds it"
        ),
        _ if e.raw_os_error() == Some(libc::EPROTO) => format!(
            "{e}: a daemon of another softverbs build serves this network namespace (it \
             exits once idle, 30 s by default); stop it or wait (`pgrep -a softverbs` finds it)"
        ),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::daemon_trouble;

    /// A daemon of an older build refuses the hello (EPROTO): the message
    /// says what that is and what to do.
    #[test]
    fn a_daemon_of_another_build_is_named_as_such() {
        let refused = std::io::Error::from_raw_os_error(libc::EPROTO);
        let said = daemon_trouble(&refused);
        assert!(
            said.contains("a daemon of another softverbs build"),
            "{said}"
        );
        assert!(said.contains("pgrep -a softverbs"), "{said}");
    }
}
