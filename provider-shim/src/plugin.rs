//! Plugin mode: libibverbs dlopens this library (it is named in
//! `/etc/libibverbs.d/softverbs.driver`) after finding softverbs devices in
//! the sysfs tree `softverbs setup` writes; an ELF constructor registers the
//! provider, whose match table claims those devices and whose
//! `alloc_device` builds them from the softverbs configuration.
//!
//! The same library is also used in preload mode, where it registers only
//! once it has written the device view (`device_view`): libibverbs then
//! finds the soft devices in that view as in plugin mode, and the preload
//! device list adds only those libibverbs did not list.

use crate::device::{self, DEVICE_OPS};
use crate::ffi::*;
use crate::guard::guard;
use softverbs_config::{Config, SoftDevice};
use std::ffi::CStr;
use std::os::raw::c_void;

/// The match table: devices whose name starts with "softverbs", and any
/// device whose `device/modalias` (written by `softverbs setup`) starts
/// with "softverbs:". [`match_device`] then checks the configuration.
#[derive(Debug)]
pub struct MatchTable(pub [verbs_match_ent; 3]);

// SAFETY: written once by a static initialiser, then only read; it holds
// pointers to static strings.
unsafe impl Sync for MatchTable {}

const fn modalias(pattern: &'static CStr) -> verbs_match_ent {
    verbs_match_ent {
        u: verbs_match_ent_u {
            modalias: pattern.as_ptr(),
        },
        kind: VERBS_MATCH_MODALIAS,
        ..<verbs_match_ent as Zeroed>::ZEROED
    }
}

/// See [`MatchTable`].
pub static MATCH_TABLE: MatchTable = MatchTable([
    modalias(c"rdma_device:*Nsoftverbs*"),
    modalias(c"softverbs:*"),
    <verbs_match_ent as Zeroed>::ZEROED,
]);

#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;

/// Runs when the library is loaded, in either mode.
extern "C" fn constructor() {
    guard((), || {
        crate::rdma_cm::resolve();
        match mode() {
            Mode::Plugin => {
                register("plugin mode unavailable");
                if let Err(e) = crate::rdma_cm::install_in_librdmacm() {
                    softverbs_transport::say!("softverbs: rdma_cm unavailable in plugin mode: {e}");
                }
            }
            // Registered now, while the loader's locks are free (the
            // view comes at the first need of it, device_view); neither
            // allocates on success, so the program's heap is as without
            // softverbs when its main starts.
            Mode::Preload => {
                register("no device view");
                if let Some(ours) = object_of(constructor as *const c_void) {
                    crate::device_view::enable(ours.file);
                }
            }
            Mode::Neither => {}
        }
    })
}

/// Registers the provider with libibverbs, once its kernel commands are
/// served (`ioctl.rs`).
pub(crate) fn register(otherwise: &str) {
    match crate::ioctl::install() {
        // SAFETY: DEVICE_OPS is a static table that outlives libibverbs'
        // use of it.
        Ok(()) => unsafe { crate::libibverbs::verbs_register_driver_34(&DEVICE_OPS.0) },
        Err(e) => softverbs_transport::say!("softverbs: {otherwise}: {e}"),
    }
}

/// How this copy of the library serves the process.
#[derive(Debug, PartialEq, Eq)]
enum Mode {
    /// libibverbs loaded it as a provider; see [`mode`].
    Plugin,
    /// It is the process's `ibv_get_device_list` (LD_PRELOAD).
    Preload,
    /// Another copy serves the process (a preloaded one, when libibverbs
    /// also loads the installed provider), or this is not the provider.
    Neither,
}

/// Plugin when libibverbs loaded this library as a provider and no
/// softverbs library serves the process in preload mode. A preloaded
/// softverbs replaces `ibv_get_device_list` process-wide, so plugin mode
/// is on exactly when the global definition of that symbol is
/// libibverbs' own, or there is none (libibverbs loaded RTLD_LOCAL, as by
/// Python's pyverbs), and preload mode when it is this library's. A
/// provider dlopened with RTLD_LOCAL is not in the global scope; a program
/// that links the Rust crate statically is not a `-rdmav34.so` at all.
fn mode() -> Mode {
    // Objects are told apart by their load address; nothing here
    // allocates (the constructor runs before the program's main).
    let ours = object_of(constructor as *const c_void);
    let is_provider = ours.is_some_and(|o| o.file.to_bytes().ends_with(b"-rdmav34.so"));
    // The handle of the main program searches the global scope only (not
    // this library's own, which RTLD_DEFAULT would include).
    // SAFETY: dlopen(NULL) returns the (never unloaded) main program;
    // dlvsym reads two NUL-terminated strings.
    let listing = unsafe {
        let global = libc::dlopen(std::ptr::null(), libc::RTLD_LAZY);
        libc::dlvsym(
            global,
            c"ibv_get_device_list".as_ptr(),
            c"IBVERBS_1.1".as_ptr(),
        )
    };
    let libibverbs = object_of(crate::libibverbs::verbs_register_driver_34 as *const c_void);
    let (Some(ours), Some(libibverbs)) = (ours, libibverbs) else {
        return Mode::Neither;
    };
    if !is_provider {
        return Mode::Neither;
    }
    match object_of(listing) {
        None => Mode::Plugin,
        Some(found) if found.base == libibverbs.base => Mode::Plugin,
        Some(found) if found.base == ours.base => Mode::Preload,
        _ => Mode::Neither,
    }
}

/// A loaded object: where it is loaded, and its file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Object {
    /// Its load address, which tells it from every other loaded object.
    pub base: usize,
    /// Its file name, as the dynamic linker holds it.
    pub file: &'static CStr,
}

/// The loaded object that contains `addr`.
pub(crate) fn object_of(addr: *const c_void) -> Option<Object> {
    if addr.is_null() {
        return None;
    }
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only writes `info`; dli_fname, when set, is a
    // NUL-terminated string the dynamic linker keeps while the object is
    // loaded, and the objects asked about here (this library, libibverbs,
    // which it links) stay loaded as long as this library's code runs.
    unsafe {
        if libc::dladdr(addr, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        Some(Object {
            base: info.dli_fbase as usize,
            file: CStr::from_ptr(info.dli_fname),
        })
    }
}

/// The configured soft device named like this sysfs device, if any.
fn configured(sysfs_dev: *mut verbs_sysfs_dev) -> Option<SoftDevice> {
    // SAFETY: libibverbs passes a live sysfs device whose ibdev_name is a
    // NUL-terminated string within its array.
    let name = unsafe { CStr::from_ptr((*sysfs_dev).ibdev_name.as_ptr()) };
    let name = name.to_string_lossy();
    let config = match Config::load() {
        Ok(c) => c,
        Err(e) => {
            softverbs_transport::say!("softverbs: {e}");
            return None;
        }
    };
    let found = config.devices.iter().find(|d| d.name == name).cloned();
    if found.is_none() {
        softverbs_transport::say!(
            "softverbs: {name} is in sysfs but not in the configuration ({}); run `softverbs setup` again",
            config.source
        );
    }
    found
}

/// `verbs_device_ops.match_device`: the table matched and the device is
/// configured.
///
/// # Safety
/// Called by libibverbs with a live sysfs device.
pub unsafe extern "C" fn match_device(sysfs_dev: *mut verbs_sysfs_dev) -> bool {
    // SAFETY: per the contract.
    guard(false, || {
        !unsafe { (*sysfs_dev).match_ }.is_null() && configured(sysfs_dev).is_some()
    })
}

/// `verbs_device_ops.alloc_device`: a soft device for a matched sysfs
/// device; libibverbs fills in its names and owns the reference.
///
/// # Safety
/// Called by libibverbs with a live sysfs device.
pub unsafe extern "C" fn alloc_device(sysfs_dev: *mut verbs_sysfs_dev) -> *mut verbs_device {
    guard(std::ptr::null_mut(), || match configured(sysfs_dev) {
        Some(config) => device::build_owned_by_libibverbs(&config),
        None => std::ptr::null_mut(),
    })
}
