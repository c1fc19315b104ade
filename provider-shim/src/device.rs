//! The soft devices as libibverbs sees them: one `verbs_device` per
//! configured device, built once per process, never freed (the process
//! keeps a reference to each, as mlx5 does for its VFIO devices).

use crate::ffi::*;
use softverbs_config::{Config, SoftDevice};
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

/// A soft device: the `verbs_device` libibverbs knows, and its settings.
#[repr(C)]
#[derive(Debug)]
pub struct SoftVerbsDevice {
    /// Must be first: libibverbs hands out `&vdev.device`.
    pub vdev: verbs_device,
    /// Its configuration.
    pub config: SoftDevice,
    /// Plugin mode: libibverbs found it in sysfs and frees it (through
    /// `uninit_device`) when its last reference goes.
    pub owned_by_libibverbs: bool,
}

/// The provider's `verbs_device_ops`, also how a device is recognised as
/// ours: its `ops` pointer is this table.
#[derive(Debug)]
pub struct DeviceOps(pub verbs_device_ops);

// SAFETY: the table is written once (a `static` initialiser) and only read
// afterwards; its pointers refer to a static string and functions.
unsafe impl Sync for DeviceOps {}

/// The provider's name, as rdma-core prints it.
pub const PROVIDER_NAME: &[u8] = b"softverbs\0";

/// The device ops of softverbs devices.
pub static DEVICE_OPS: DeviceOps = DeviceOps(verbs_device_ops {
    name: PROVIDER_NAME.as_ptr() as *const c_char,
    match_min_abi_version: 0,
    match_max_abi_version: u32::MAX,
    match_table: crate::plugin::MATCH_TABLE.0.as_ptr(),
    static_providers: std::ptr::null_mut(),
    match_device: Some(crate::plugin::match_device),
    alloc_context: Some(crate::context::alloc_context),
    import_context: None,
    alloc_device: Some(crate::plugin::alloc_device),
    uninit_device: Some(uninit_device),
});

/// Frees a plugin-mode device. Preload-mode devices are never freed (this
/// process holds a reference), so for them this runs only if libibverbs is
/// asked to drop more references than it took, and does nothing.
unsafe extern "C" fn uninit_device(device: *mut verbs_device) {
    if let Some(d) = soft(device as *mut ibv_device) {
        if d.owned_by_libibverbs {
            // SAFETY: a plugin-mode device is a Box made by
            // `build_owned_by_libibverbs`, and this was its last reference.
            drop(unsafe { Box::from_raw(device as *mut SoftVerbsDevice) });
        }
    }
}

struct Devices {
    list: Vec<usize>,
    error: Option<String>,
}

static DEVICES: OnceLock<Devices> = OnceLock::new();

fn devices() -> &'static Devices {
    DEVICES.get_or_init(|| match Config::load() {
        Ok(config) => Devices {
            list: (config.devices.iter().map(build))
                .chain(config.passthrough.iter().map(crate::passthrough::build))
                .collect(),
            error: None,
        },
        Err(e) => Devices {
            list: Vec::new(),
            error: Some(e.to_string()),
        },
    })
}

/// The name of one of softverbs' devices, soft or pass-through.
pub fn name_of(device: *mut ibv_device) -> Option<&'static str> {
    soft(device)
        .map(|d| d.config.name.as_str())
        .or_else(|| crate::passthrough::passthrough(device).map(|d| d.config.name.as_str()))
}

/// The devices of this process (soft, then pass-through), as `ibv_device`
/// pointers.
pub fn all() -> impl Iterator<Item = *mut ibv_device> {
    devices().list.iter().map(|&p| p as *mut ibv_device)
}

/// Why no device is listed, if the configuration could not be read.
pub fn config_error() -> Option<&'static str> {
    devices().error.as_deref()
}

/// Takes one more reference on a soft device (for a device list entry).
pub fn hold(device: *mut ibv_device) {
    // SAFETY: `device` is one of ours (callers check), so it is the first
    // field of a live, never-freed `verbs_device` whose `refcount` is the
    // C11 `atomic_int` libibverbs updates atomically too.
    let refcount = unsafe {
        &*(std::ptr::addr_of_mut!((*(device as *mut verbs_device)).refcount) as *const AtomicI32)
    };
    refcount.fetch_add(1, Ordering::SeqCst);
}

/// The soft device behind `device`, if it is one of ours.
pub fn soft(device: *mut ibv_device) -> Option<&'static SoftVerbsDevice> {
    if device.is_null() {
        return None;
    }
    // SAFETY: every `ibv_device` libibverbs hands out is the first field
    // of a `verbs_device`, so reading `ops` is valid; only when it is our
    // table is the whole object a (never freed) `SoftVerbsDevice`.
    unsafe {
        let vdev = device as *mut verbs_device;
        let ours = std::ptr::eq((*vdev).ops, &DEVICE_OPS.0);
        ours.then(|| &*(device as *const SoftVerbsDevice))
    }
}

/// A plugin-mode device (see [`SoftVerbsDevice::owned_by_libibverbs`]).
pub fn build_owned_by_libibverbs(config: &SoftDevice) -> *mut verbs_device {
    let dev = build(config) as *mut SoftVerbsDevice;
    // SAFETY: `build` just made this box and nobody else has it yet.
    unsafe { (*dev).owned_by_libibverbs = true };
    dev.cast()
}

/// The `verbs_device` of a device of softverbs called `name`, with
/// device ops `ops` and the process's own reference (never dropped).
pub fn verbs_device_named(name: &str, ops: &'static DeviceOps) -> verbs_device {
    let mut vdev = verbs_device::ZEROED;
    vdev.device.node_type = IBV_NODE_CA as c_int;
    vdev.device.transport_type = IBV_TRANSPORT_IB as c_int;
    copy_name(&mut vdev.device.name, name);
    copy_name(&mut vdev.device.dev_name, &format!("uverbs-{name}"));
    copy_name(
        &mut vdev.device.dev_path,
        &format!("/dev/infiniband/softverbs/{name}"),
    );
    copy_name(
        &mut vdev.device.ibdev_path,
        &format!("/sys/class/infiniband/{name}"),
    );
    vdev.ops = &ops.0;
    vdev.refcount = 1;
    vdev
}

fn build(config: &SoftDevice) -> usize {
    let vdev = verbs_device_named(&config.name, &DEVICE_OPS);
    let dev = Box::new(SoftVerbsDevice {
        vdev,
        config: config.clone(),
        owned_by_libibverbs: false,
    });
    Box::into_raw(dev) as usize
}

/// Copies `s` into a fixed C char array, NUL-terminated and truncated.
pub fn copy_name(dst: &mut [c_char], s: &str) {
    let bytes = CString::new(s.replace('\0', "")).unwrap_or_default();
    let n = bytes.as_bytes().len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(&bytes.as_bytes()[..n]) {
        *d = *b as c_char;
    }
    dst[n] = 0;
}

/// An opaque pointer for logs.
pub fn addr(p: *const c_void) -> usize {
    p as usize
}
