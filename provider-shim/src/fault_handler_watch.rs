//! Notices, in preload mode, when the application installs a handler for
//! SIGSEGV or SIGBUS, the signals our guarded accesses fault with
//! ([`crate::guarded_access`]).
//!
//! A handler installed after ours (a crash reporter that prints and
//! raises the signal again, a runtime's) would take the fault of a
//! guarded copy into memory the application made inaccessible under an
//! MR, and kill the process where a kernel provider, whose pages are
//! pinned, completes with an error. Asking the kernel which handler is in
//! place costs a system call (about 0.2 us), too much for every copy, so
//! copies ask every few thousand accesses and, in preload mode, at once
//! after one of these functions changed either signal's action: each
//! passes the call to glibc's and counts the change, and
//! `process_memory.rs` checks the count before each guarded access.
//! Where the library is loaded as a plugin, or a program sets its
//! handlers with the raw system call, only the periodic check remains.
//!
//! These functions are async-signal-safe and called where little else
//! is: in signal handlers (a crash reporter restoring the default action
//! before raising the signal again) and in forked children before
//! `exec`. Looking glibc's up there (`dlsym`) is not safe, so each is
//! looked up when the library is loaded ([`look_up_at_load`]).

use crate::libc_next::enosys;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU64, Ordering};

/// Changes of the action of SIGSEGV or SIGBUS seen through these
/// functions since the process started.
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// How many times the application changed a fault signal's action.
pub fn changes() -> u64 {
    CHANGES.load(Ordering::Acquire)
}

fn note(sig: c_int) {
    if sig == libc::SIGSEGV || sig == libc::SIGBUS {
        CHANGES.fetch_add(1, Ordering::AcqRel);
    }
}

/// Runs when the library is loaded, before the program's own code.
#[used]
#[link_section = ".init_array"]
static LOOK_UP_AT_LOAD: extern "C" fn() = look_up_at_load;

/// Looks up glibc's definition of every wrapper here: each call with
/// signal 0, which glibc refuses (EINVAL) without changing anything,
/// fills its wrapper's cache. errno is left as it was.
extern "C" fn look_up_at_load() {
    crate::guard::guard((), || {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        // SAFETY: each is the wrapper of a libc function called with an
        // invalid signal and NULL pointers or SIG_DFL: glibc checks the
        // signal number first and fails with EINVAL, touching nothing.
        unsafe {
            sigaction(0, std::ptr::null(), std::ptr::null_mut());
            __sigaction(0, std::ptr::null(), std::ptr::null_mut());
            for wrapper in [
                signal,
                bsd_signal,
                ssignal,
                sysv_signal,
                __sysv_signal,
                sigset,
            ] {
                wrapper(0, libc::SIG_DFL);
            }
        }
        crate::guard::set_errno(errno);
    });
}

type SigactionFn =
    unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
type SignalFn = unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;

/// `sigaction(2)`: glibc's, counted when it sets a fault signal's action.
///
/// # Safety
/// libc's contract for `sigaction`.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let Some(next) = crate::next_fn!(c"sigaction", SigactionFn) else {
        return enosys(-1);
    };
    // SAFETY: the caller's arguments, under sigaction's contract.
    let rc = unsafe { next(sig, act, old) };
    if rc == 0 && !act.is_null() {
        note(sig);
    }
    rc
}

/// `__sigaction`: glibc's other name for [`sigaction`].
///
/// # Safety
/// libc's contract for `sigaction`.
#[no_mangle]
pub unsafe extern "C" fn __sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: the caller's arguments, under the same contract.
    unsafe { sigaction(sig, act, old) }
}

/// Defines a `signal(2)`-like function: glibc's, counted when it sets a
/// fault signal's action.
macro_rules! signal_like {
    ($(#[$doc:meta])* fn $name:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// libc's contract for `signal`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
            // SAFETY: a literal with one NUL, at its end.
            let name = unsafe {
                std::ffi::CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes())
            };
            let Some(next) = crate::next_fn!(name, SignalFn) else {
                return enosys(libc::SIG_ERR);
            };
            // SAFETY: the caller's arguments, under signal's contract.
            let old = unsafe { next(sig, handler) };
            if old != libc::SIG_ERR {
                note(sig);
            }
            old
        }
    };
}

signal_like!(
    /// `signal(2)` (glibc's BSD semantics).
    fn signal
);
signal_like!(
    /// `bsd_signal`: [`signal`] by another name.
    fn bsd_signal
);
signal_like!(
    /// `ssignal`: [`signal`] by another name.
    fn ssignal
);
signal_like!(
    /// `sysv_signal` (System V semantics).
    fn sysv_signal
);
signal_like!(
    /// `__sysv_signal`, what `signal` names in a program built for strict
    /// standard C.
    fn __sysv_signal
);
signal_like!(
    /// `sigset` (System V).
    fn sigset
);
