//! The libc functions that take a path, as the process calls them in
//! preload mode: each looks the path up in the view ([`super::redirect`])
//! and calls the next definition with the view's path, or with the
//! caller's own for every other path (one prefix compare, no allocation).
//!
//! The set is what stacks use to look at devices: the `open` family
//! (with glibc's fortified `__open_2` variants, and `fopen`, whose
//! internal open does not come back through these symbols), `opendir`
//! (with `readdir` and `closedir`, for the one directory read sorted:
//! [`super::sorted_dir`]),
//! the `stat` family (with the `__xstat` entry points of programs built
//! against glibc before 2.33), `access`, `readlink` and `realpath` (with
//! their fortified `_chk` variants) and the extended attribute lookups
//! (`ls -l` asks for them). Every open asks `rdma_cm` first: an open of
//! its device may be one of softverbs' channels. A call relative
//! to a directory descriptor is redirected only for an absolute path,
//! which ignores the descriptor. `open` also serves the rdma_cm device
//! (`crate::rdma_cm`). The version script gives each glibc's version.

use super::sorted_dir;
use crate::libc_next::enosys;
use crate::rdma_cm;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_uint, c_void};

/// Calls `f` with the view's name for `path` if it has one, else `path`.
fn with_path<T>(path: *const c_char, f: impl FnOnce(*const c_char) -> T) -> T {
    if path.is_null() {
        return f(path);
    }
    // SAFETY: libc's contract for every function here: a non-NULL path is
    // a NUL-terminated string, unchanged during the call.
    let given = unsafe { CStr::from_ptr(path) };
    if !super::in_view(given.to_bytes()) {
        return f(path);
    }
    in_view(given, f)
}

/// [`with_path`] for a path the view stands in for, apart so that the
/// path buffer is on the stack only for those (not in the frame of every
/// `open` and `stat` of the process, nor of a signal handler's).
#[cold]
#[inline(never)]
fn in_view<T>(given: &CStr, f: impl FnOnce(*const c_char) -> T) -> T {
    let mut buf = [0u8; libc::PATH_MAX as usize];
    match super::redirect(given, &mut buf) {
        Some(view) => f(view.as_ptr()),
        None => f(given.as_ptr()),
    }
}

type OpenFn = unsafe extern "C-unwind" fn(*const c_char, c_int, c_uint) -> c_int;

/// Defines an interposer whose path is argument `$path`: every one is the
/// same two lines around the next definition of the function.
macro_rules! redirecting {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $at:ty),*) -> $ret:ty, path = $path:ident, fail = $fail:expr $(, channel = $flags:ident)?) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// libc's contract for this function.
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name($($arg: $at),*) -> $ret {
            // An open of the rdma_cm device, if it is ours: a channel.
            $(
                // SAFETY: the caller's path, under open's contract.
                if let Some(result) = unsafe { rdma_cm::open_if_channel($path, $flags) } {
                    return result;
                }
            )?
            // SAFETY: a literal with one NUL, at its end.
            let name = unsafe {
                CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes())
            };
            let Some(next) = crate::next_fn!(name, unsafe extern "C-unwind" fn($($at),*) -> $ret) else {
                return enosys($fail);
            };
            // SAFETY: the caller's arguments, the path replaced by an
            // equally valid NUL-terminated one that lives through the call.
            with_path($path, |$path| unsafe { next($($arg),*) })
        }
    };
}

/// `open(2)`: an rdma_cm channel for the rdma_cm device, else the view's
/// file or the caller's. The mode is read as the third argument whether
/// or not the caller passed one (harmless in the x86-64 calling
/// convention) and passed on unchanged.
///
/// # Safety
/// libc's contract: `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C-unwind" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's path, under open's contract.
    if let Some(result) = unsafe { rdma_cm::open_if_channel(path, flags) } {
        return result;
    }
    let Some(next) = crate::next_fn!(c"open", OpenFn) else {
        return enosys(-1);
    };
    // SAFETY: the caller's arguments, the path possibly the view's.
    with_path(path, |path| unsafe { next(path, flags, mode) })
}

/// `open64(2)`: [`open`] (the same function on x86-64).
///
/// # Safety
/// libc's contract: `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C-unwind" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's arguments, under the same contract.
    unsafe { open(path, flags, mode) }
}

redirecting!(
    /// glibc's fortified `open` (no mode).
    fn __open_2(path: *const c_char, flags: c_int) -> c_int, path = path, fail = -1, channel = flags
);
redirecting!(
    /// glibc's fortified `open64` (no mode).
    fn __open64_2(path: *const c_char, flags: c_int) -> c_int, path = path, fail = -1, channel = flags
);
redirecting!(
    /// `openat(2)`.
    fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int, path = path, fail = -1, channel = flags
);
redirecting!(
    /// `openat64(2)`.
    fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int, path = path, fail = -1, channel = flags
);
redirecting!(
    /// glibc's fortified `openat` (no mode).
    fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int, path = path, fail = -1, channel = flags
);
redirecting!(
    /// glibc's fortified `openat64` (no mode).
    fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int, path = path, fail = -1, channel = flags
);
redirecting!(
    /// `fopen(3)`.
    fn fopen(path: *const c_char, mode: *const c_char) -> *mut c_void, path = path, fail = std::ptr::null_mut()
);
redirecting!(
    /// `fopen64(3)`.
    fn fopen64(path: *const c_char, mode: *const c_char) -> *mut c_void, path = path, fail = std::ptr::null_mut()
);
redirecting!(
    /// `stat(2)`.
    fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int, path = path, fail = -1
);
redirecting!(
    /// `stat64(2)`.
    fn stat64(path: *const c_char, buf: *mut libc::stat) -> c_int, path = path, fail = -1
);
redirecting!(
    /// `lstat(2)`.
    fn lstat(path: *const c_char, buf: *mut libc::stat) -> c_int, path = path, fail = -1
);
redirecting!(
    /// `lstat64(2)`.
    fn lstat64(path: *const c_char, buf: *mut libc::stat) -> c_int, path = path, fail = -1
);
redirecting!(
    /// `fstatat(2)`.
    fn fstatat(dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int, path = path, fail = -1
);
redirecting!(
    /// `fstatat64(2)`.
    fn fstatat64(dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int, path = path, fail = -1
);
redirecting!(
    /// `statx(2)`.
    fn statx(dirfd: c_int, path: *const c_char, flags: c_int, mask: c_uint, buf: *mut c_void) -> c_int, path = path, fail = -1
);
redirecting!(
    /// `access(2)`.
    fn access(path: *const c_char, mode: c_int) -> c_int, path = path, fail = -1
);
redirecting!(
    /// `faccessat(2)`.
    fn faccessat(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int, path = path, fail = -1
);
redirecting!(
    /// `readlink(2)`.
    fn readlink(path: *const c_char, buf: *mut c_char, size: usize) -> isize, path = path, fail = -1
);
redirecting!(
    /// `readlinkat(2)`.
    fn readlinkat(dirfd: c_int, path: *const c_char, buf: *mut c_char, size: usize) -> isize, path = path, fail = -1
);
redirecting!(
    /// `realpath(3)`: the view's real path for a redirected one.
    fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char, path = path, fail = std::ptr::null_mut()
);

type OpendirFn = unsafe extern "C-unwind" fn(*const c_char) -> *mut c_void;
type ReaddirFn = unsafe extern "C-unwind" fn(*mut c_void) -> *mut libc::dirent64;
type ClosedirFn = unsafe extern "C-unwind" fn(*mut c_void) -> c_int;

/// `opendir(3)`: the view's directory for a path it stands in for; the
/// uverbs directory libibverbs lists devices from is read whole and
/// handed out sorted ([`super::sorted_dir`]).
///
/// # Safety
/// libc's contract: `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C-unwind" fn opendir(path: *const c_char) -> *mut c_void {
    let Some(next) = crate::next_fn!(c"opendir", OpendirFn) else {
        return enosys(std::ptr::null_mut());
    };
    // SAFETY: the caller's path, possibly the view's.
    let dir = with_path(path, |path| unsafe { next(path) });
    // SAFETY: libc's contract for a non-NULL path: NUL-terminated.
    let devices = !path.is_null() && sorted_dir::lists_devices(unsafe { CStr::from_ptr(path) });
    if devices && !dir.is_null() && super::get().is_some() {
        // SAFETY: the stream glibc just opened, not yet read.
        crate::guard::guard((), || unsafe { sorted_dir::take(dir) });
    }
    dir
}

/// `readdir(3)`: the next entry of a sorted stream, else glibc's.
///
/// # Safety
/// libc's contract: `dir` is a live directory stream.
#[no_mangle]
pub unsafe extern "C-unwind" fn readdir(dir: *mut c_void) -> *mut libc::dirent64 {
    if let Some(entry) = crate::guard::guard(None, || sorted_dir::next(dir)) {
        return entry;
    }
    let Some(next) = crate::next_fn!(c"readdir", ReaddirFn) else {
        return enosys(std::ptr::null_mut());
    };
    // SAFETY: the caller's stream.
    unsafe { next(dir) }
}

/// `readdir64(3)`: [`readdir`] (the same function on x86-64).
///
/// # Safety
/// libc's contract: `dir` is a live directory stream.
#[no_mangle]
pub unsafe extern "C-unwind" fn readdir64(dir: *mut c_void) -> *mut libc::dirent64 {
    // SAFETY: the caller's stream, under the same contract.
    unsafe { readdir(dir) }
}

/// `closedir(3)`: forgets a sorted stream's entries, then glibc's.
///
/// # Safety
/// libc's contract: `dir` is a live directory stream.
#[no_mangle]
pub unsafe extern "C-unwind" fn closedir(dir: *mut c_void) -> c_int {
    crate::guard::guard((), || sorted_dir::forget(dir));
    let Some(next) = crate::next_fn!(c"closedir", ClosedirFn) else {
        return enosys(-1);
    };
    // SAFETY: the caller's stream.
    unsafe { next(dir) }
}
redirecting!(
    /// `getxattr(2)`.
    fn getxattr(path: *const c_char, name: *const c_char, value: *mut c_void, size: usize) -> isize, path = path, fail = -1
);
redirecting!(
    /// `lgetxattr(2)`.
    fn lgetxattr(path: *const c_char, name: *const c_char, value: *mut c_void, size: usize) -> isize, path = path, fail = -1
);
redirecting!(
    /// `listxattr(2)`.
    fn listxattr(path: *const c_char, list: *mut c_char, size: usize) -> isize, path = path, fail = -1
);
redirecting!(
    /// `llistxattr(2)`.
    fn llistxattr(path: *const c_char, list: *mut c_char, size: usize) -> isize, path = path, fail = -1
);
redirecting!(
    /// glibc's fortified `realpath`.
    fn __realpath_chk(path: *const c_char, resolved: *mut c_char, resolvedlen: usize) -> *mut c_char, path = path, fail = std::ptr::null_mut()
);
redirecting!(
    /// glibc's fortified `readlink`.
    fn __readlink_chk(path: *const c_char, buf: *mut c_char, len: usize, buflen: usize) -> isize, path = path, fail = -1
);
redirecting!(
    /// glibc's fortified `readlinkat`.
    fn __readlinkat_chk(dirfd: c_int, path: *const c_char, buf: *mut c_char, len: usize, buflen: usize) -> isize, path = path, fail = -1
);
redirecting!(
    /// `stat` as programs built against glibc before 2.33 call it.
    fn __xstat(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int, path = path, fail = -1
);
redirecting!(
    /// `stat64` as programs built against glibc before 2.33 call it.
    fn __xstat64(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int, path = path, fail = -1
);
redirecting!(
    /// `lstat` as programs built against glibc before 2.33 call it.
    fn __lxstat(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int, path = path, fail = -1
);
redirecting!(
    /// `lstat64` as programs built against glibc before 2.33 call it.
    fn __lxstat64(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int, path = path, fail = -1
);
redirecting!(
    /// `fstatat` as programs built against glibc before 2.33 call it.
    fn __fxstatat(ver: c_int, dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int, path = path, fail = -1
);
redirecting!(
    /// `fstatat64` as programs built against glibc before 2.33 call it.
    fn __fxstatat64(ver: c_int, dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int, path = path, fail = -1
);
