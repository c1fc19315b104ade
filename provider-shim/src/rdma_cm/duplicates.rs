//! `dup`, `dup2`, `dup3` and `fcntl(F_DUPFD)` of a channel: the new number
//! is the same channel, as a duplicate of the kernel's rdma_cm file is the
//! same file (`Service::duplicate`). Before, a duplicate was a plain
//! socket: commands written to it went into the channel's socket pair,
//! did nothing, and after a few hundred the writes blocked.
//!
//! Each function is one atomic load and the real function for numbers
//! that are no channels. A `dup2` over a channel closes that channel, as
//! `close` does. These are exported with glibc's symbol versions, so in
//! preload mode they come first for the whole process; in plugin mode
//! only librdmacm's calls are ours, and it duplicates no channel.

use super::{fds, service};
use crate::guard::guard;
use crate::libc_next::enosys;
use std::os::raw::c_int;

type DupFn = unsafe extern "C" fn(c_int) -> c_int;
type Dup2Fn = unsafe extern "C" fn(c_int, c_int) -> c_int;
type Dup3Fn = unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
type FcntlFn = unsafe extern "C-unwind" fn(c_int, c_int, ...) -> c_int;

fn real_dup() -> Option<DupFn> {
    crate::next_fn!(c"dup", DupFn)
}
fn real_dup2() -> Option<Dup2Fn> {
    crate::next_fn!(c"dup2", Dup2Fn)
}
fn real_dup3() -> Option<Dup3Fn> {
    crate::next_fn!(c"dup3", Dup3Fn)
}
fn real_fcntl() -> Option<FcntlFn> {
    crate::next_fn!(c"fcntl", FcntlFn)
}
fn real_fcntl64() -> Option<FcntlFn> {
    crate::next_fn!(c"fcntl64", FcntlFn)
}

/// Looks the real functions up now, at load time (as `super::resolve`).
pub fn resolve() {
    let _ = (
        real_dup(),
        real_dup2(),
        real_dup3(),
        real_fcntl(),
        real_fcntl64(),
    );
}

/// Runs `dup`, the real call duplicating `old` (onto `over`, for `dup2`
/// and `dup3`), as the service duplicates a channel if either number is
/// one; alone if neither is, or there is no service in this process (a
/// forked child's inherited channels are its parent's).
fn duplicate(old: c_int, over: Option<c_int>, dup: impl FnOnce() -> c_int) -> c_int {
    let touches_a_channel = fds::is_channel(old) || over.is_some_and(fds::is_channel);
    let Some(s) = touches_a_channel.then(service::existing).flatten() else {
        return dup();
    };
    // `dup` runs exactly once, inside; a panic after it (none is known)
    // would lose the new number, never cross into C.
    guard(-1, || s.duplicate(old, over, dup))
}

/// `dup(2)`.
///
/// # Safety
/// libc's contract (none beyond a plain integer).
#[no_mangle]
pub unsafe extern "C" fn dup(old: c_int) -> c_int {
    let Some(real) = real_dup() else {
        return enosys(-1);
    };
    // SAFETY: the caller's argument, as it gave it.
    duplicate(old, None, || unsafe { real(old) })
}

/// `dup2(2)`.
///
/// # Safety
/// libc's contract (none beyond plain integers).
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    let Some(real) = real_dup2() else {
        return enosys(-1);
    };
    // SAFETY: the caller's arguments, as it gave them.
    duplicate(old, Some(new), || unsafe { real(old, new) })
}

/// `dup3(2)`.
///
/// # Safety
/// libc's contract (none beyond plain integers).
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let Some(real) = real_dup3() else {
        return enosys(-1);
    };
    // SAFETY: the caller's arguments, as it gave them.
    duplicate(old, Some(new), || unsafe { real(old, new, flags) })
}

/// `fcntl(2)`, whose third argument, where a command has one, is an
/// integer or a pointer: taken as a word, as the C calling conventions
/// of the platforms glibc's `fcntl` runs on pass a variadic argument of
/// either kind in the register (or stack slot) a named one would take,
/// and handed on unchanged. Only F_DUPFD and F_DUPFD_CLOEXEC of a channel
/// are looked at. "C-unwind": F_SETLKW is a cancellation point, and a
/// thread cancelled in it leaves through here.
///
/// # Safety
/// libc's contract: `arg` is what `cmd` asks for.
#[no_mangle]
pub unsafe extern "C-unwind" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    let Some(real) = real_fcntl() else {
        return enosys(-1);
    };
    // SAFETY: the caller's arguments, as it gave them.
    unsafe { fcntl_with(real, fd, cmd, arg) }
}

/// `fcntl64`, what `fcntl` is for programs built with 64-bit file
/// offsets (glibc 2.28 on).
///
/// # Safety
/// As [`fcntl`].
#[no_mangle]
pub unsafe extern "C-unwind" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    let Some(real) = real_fcntl64().or_else(real_fcntl) else {
        return enosys(-1);
    };
    // SAFETY: the caller's arguments, as it gave them.
    unsafe { fcntl_with(real, fd, cmd, arg) }
}

/// # Safety
/// As [`fcntl`]; `real` is glibc's `fcntl` or `fcntl64`.
unsafe fn fcntl_with(real: FcntlFn, fd: c_int, cmd: c_int, arg: usize) -> c_int {
    if matches!(cmd, libc::F_DUPFD | libc::F_DUPFD_CLOEXEC) && fds::is_channel(fd) {
        // SAFETY: the caller's arguments, as it gave them (the lowest
        // number is an int).
        return duplicate(fd, None, || unsafe { real(fd, cmd, arg as c_int) });
    }
    // SAFETY: the caller's arguments, as it gave them.
    unsafe { real(fd, cmd, arg) }
}
