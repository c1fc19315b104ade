//! The next definition of a libc function this library replaces:
//! glibc's, or another preloaded library's that wraps it in turn
//! (rsockets' `librspreload.so` wraps `write` and `close` too, and must
//! see the calls we pass on), so the default version, not a named one.

use std::ffi::CStr;
use std::sync::OnceLock;

/// Looks `name` up after this library, once.
pub fn next(cache: &OnceLock<usize>, name: &CStr) -> usize {
    *cache.get_or_init(|| {
        // SAFETY: the string is NUL-terminated; dlsym only reads it.
        unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
    })
}

/// `next_fn!(c"open", OpenFn)`: the next `open`, as that function type,
/// or None when there is none.
#[macro_export]
macro_rules! next_fn {
    ($name:expr, $ty:ty) => {{
        static CACHE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let addr = $crate::libc_next::next(&CACHE, $name);
        // SAFETY: libc's function of that name has this type (so has a
        // wrapper of it); a missing one (0) is None.
        (addr != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(addr) })
    }};
}

/// What a replaced libc function answers when there is no next
/// definition (never with glibc): `fail`, errno ENOSYS.
pub fn enosys<T>(fail: T) -> T {
    crate::guard::set_errno(libc::ENOSYS);
    fail
}
