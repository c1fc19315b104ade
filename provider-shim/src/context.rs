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
use std::sync::Arc;

/// The memory libibverbs callocs for a context: its `verbs_context`, then
/// our state (boxed, since calloc'ed memory holds no Rust values).
#[repr(C)]
#[derive(Debug)]
pub struct SoftContext {
    /// Must be first; `ibv_context` sits inside it.
    pub vctx: verbs_context,
    state: *mut ContextState,
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
                    (*raw).state = Box::into_raw(Box::new(state));
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
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn free_context(context: *mut ibv_context) {
    guard((), || {
        let raw = soft_context_ptr(context);
        // SAFETY: `context` came from alloc_context, so `raw` is our
        // allocation; the state box is dropped once (stopping the progress
        // thread) before libibverbs releases the rest and we free it.
        unsafe {
            drop(Box::from_raw((*raw).state));
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

/// The state of a context created by softverbs.
///
/// # Safety
/// `context` must be a live context of one of our devices.
pub unsafe fn state<'a>(context: *mut ibv_context) -> &'a ContextState {
    // SAFETY: per the caller's contract the SoftContext is live and its
    // state was set in alloc_context before the context was returned.
    unsafe { &*(*soft_context_ptr(context)).state }
}

/// The state of `context` if it is one of ours.
///
/// # Safety
/// `context` is NULL or a live context from libibverbs (any provider's).
pub unsafe fn soft_state<'a>(context: *mut ibv_context) -> Option<&'a ContextState> {
    if context.is_null() {
        return None;
    }
    // SAFETY: a non-null context from libibverbs has a valid `device`.
    let device = unsafe { (*context).device };
    soft(device)?;
    // SAFETY: a context of one of our devices was allocated by
    // alloc_context; its state is NULL only while alloc_context runs
    // (plugin mode's ioctl probe comes then).
    let raw = unsafe { (*soft_context_ptr(context)).state };
    // SAFETY: a non-NULL state is the live box set by alloc_context.
    (!raw.is_null()).then(|| unsafe { &*raw })
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
