//! Every C entry point runs its body through [`guard`]: a panic becomes
//! the entry point's failure value (with errno set), never an unwind into C.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// EIO: what a caller sees if softverbs hit an internal error.
pub const EIO: i32 = libc::EIO;

/// Runs `body`; if it panics, reports the panic once on stderr, sets
/// errno to EIO and returns `on_panic`.
pub fn guard<R>(on_panic: R, body: impl FnOnce() -> R) -> R {
    // The body only touches state that stays consistent across a panic
    // (engine state behind a lock that parking_lot does not poison, and
    // C structs written field by field), so unwinding out of it is safe.
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(_) => {
            set_errno(EIO);
            on_panic
        }
    }
}

/// Sets the calling thread's errno.
pub fn set_errno(err: i32) {
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
}
