//! Every C entry point runs its body through [`guard`]: a panic becomes
//! the entry point's failure value (with errno set), never an unwind into C.
//!
//! errno follows what a kernel provider leaves: a verb's own failure sets
//! it ([`set_errno`], or [`verb`] for verbs that return an errno value,
//! where the kernel's failing system call would have set the same value),
//! and nothing else does. The system calls softverbs makes on the way (a
//! `recvmsg` that finds nothing sets EAGAIN) are hidden by restoring the
//! caller's errno, so a program that prints `strerror(errno)` after a
//! failed `ibv_modify_qp` reads EINVAL, not "Resource temporarily
//! unavailable".
//!
//! The body also runs with the thread's cancellation disabled, as glibc
//! runs its own functions that are not cancellation points: the system
//! calls softverbs makes (`sendmsg`, `recvmsg`, `write` to an eventfd) are
//! cancellation points, and a `pthread_cancel` acting in one would unwind
//! Rust frames (through `catch_unwind`, which aborts the process on that
//! foreign unwind). A cancellation requested meanwhile acts at the
//! thread's next cancellation point outside softverbs, as with a hardware
//! provider, whose verbs make no system call. An rdma_cm GET_EVENT waits
//! outside the guard, where a cancellation may act, as at the kernel's
//! `write` (`rdma_cm::blocking_wait`); the waits of a pass-through
//! context's merged event channel run inside it and are not cancellation
//! points (docs/supported.md).

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// EIO: what a caller sees if softverbs hit an internal error.
pub const EIO: i32 = libc::EIO;

thread_local! {
    /// Whether the entry point running on this thread set errno itself.
    static ERRNO_SET: Cell<bool> = const { Cell::new(false) };
}

// Not in the libc crate: glibc's <pthread.h>.
extern "C" {
    fn pthread_setcancelstate(state: i32, oldstate: *mut i32) -> i32;
}
/// glibc's `PTHREAD_CANCEL_DISABLE` (`PTHREAD_CANCEL_ENABLE` is 0).
const PTHREAD_CANCEL_DISABLE: i32 = 1;

/// Runs `body` with the calling thread's cancellation disabled (see the
/// module's comment); the state before comes back after it.
fn without_cancellation<R>(body: impl FnOnce() -> R) -> R {
    let mut old = 0;
    // SAFETY: sets the calling thread's own cancellation state; `old` is a
    // local the call writes.
    unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
    let r = body();
    // SAFETY: as above; a nested guard finds it disabled and leaves it so.
    unsafe { pthread_setcancelstate(old, std::ptr::null_mut()) };
    r
}

/// Runs `body`; if it panics, reports the panic once on stderr, sets
/// errno to EIO and returns `on_panic`. Unless the body set errno with
/// [`set_errno`], the caller's errno is left as it was.
pub fn guard<R>(on_panic: R, body: impl FnOnce() -> R) -> R {
    let saved = errno();
    let outer = ERRNO_SET.replace(false);
    // The body only touches state that stays consistent across a panic
    // (engine state behind a lock that parking_lot does not poison, and
    // C structs written field by field), so unwinding out of it is safe.
    let r = match without_cancellation(|| catch_unwind(AssertUnwindSafe(body))) {
        Ok(r) => r,
        Err(_) => {
            set_errno(EIO);
            on_panic
        }
    };
    let set_here = ERRNO_SET.get();
    if !set_here {
        write_errno(saved);
    }
    ERRNO_SET.set(outer || set_here);
    r
}

/// [`guard`] for a verb that returns 0 or an errno value: a failure also
/// sets errno to that value, as a kernel provider's failing command does.
pub fn verb(body: impl FnOnce() -> i32) -> i32 {
    guard(EIO, || {
        let r = body();
        if r > 0 {
            set_errno(r);
        }
        r
    })
}

/// Sets the calling thread's errno, as the result of the running verb.
pub fn set_errno(err: i32) {
    ERRNO_SET.set(true);
    write_errno(err);
}

fn write_errno(err: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot,
    // always valid for writes.
    unsafe { *libc::__errno_location() = err };
}

/// The calling thread's errno.
pub fn errno() -> i32 {
    // SAFETY: as in set_errno, for reads.
    unsafe { *libc::__errno_location() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_the_failure_value_and_eio() {
        let r = guard(-1, || -> i32 { panic!("boom") });
        assert_eq!((r, errno()), (-1, EIO));
        assert_eq!(guard(-1, || 7), 7);
    }

    #[test]
    fn errno_is_the_verbs_own_or_left_alone() {
        write_errno(0);
        // A system call on the way sets EAGAIN: hidden.
        assert_eq!(
            guard(0, || {
                write_errno(libc::EAGAIN);
                0
            }),
            0
        );
        assert_eq!(errno(), 0);
        // A failing errno-returning verb sets errno to its value.
        assert_eq!(
            verb(|| {
                write_errno(libc::EAGAIN);
                libc::EINVAL
            }),
            libc::EINVAL
        );
        assert_eq!(errno(), libc::EINVAL);
        // A verb that fails with NULL sets errno itself.
        write_errno(0);
        guard((), || set_errno(libc::ENOMEM));
        assert_eq!(errno(), libc::ENOMEM);
    }
}
