//! Which `softverbs` command starts the host daemon when a context finds
//! none running: `SOFTVERBS_DAEMON` if set, else the one beside this
//! provider library (where `make shim` and `make install`'s layout put
//! it: target/release/, or the provider directory next to
//! /usr/local/bin via PATH), else the first on PATH.

use std::ffi::CStr;
use std::path::{Path, PathBuf};

/// The program, if one can be found.
pub fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SOFTVERBS_DAEMON").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let beside = this_library().and_then(|lib| Some(lib.parent()?.join("softverbs")));
    beside.filter(|p| is_executable(p)).or_else(on_path)
}

/// The path this library was loaded from.
fn this_library() -> Option<PathBuf> {
    // SAFETY: dladdr only reads the loader's tables for an address inside
    // this library (a function of ours) and fills `info`, a local; the
    // name it points to belongs to the loader and is copied at once.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let here = find as *const () as *const libc::c_void;
        if libc::dladdr(here, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        let name = CStr::from_ptr(info.dli_fname).to_str().ok()?;
        Some(PathBuf::from(name))
    }
}

fn on_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("softverbs"))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
