//! The private entry points of libibverbs a provider calls
//! (`IBVERBS_PRIVATE_34`).

use crate::ffi::{ibv_device, verbs_context, verbs_context_ops, verbs_device_ops};
use std::os::raw::{c_int, c_void};

#[link(name = "ibverbs")]
extern "C" {
    /// Callocs `alloc_size` bytes, initialises the `verbs_context` at
    /// `context_offset` within them and takes a device reference.
    pub fn _verbs_init_and_alloc_context(
        device: *mut ibv_device,
        cmd_fd: c_int,
        alloc_size: usize,
        context_offset: *mut verbs_context,
        driver_id: u32,
    ) -> *mut c_void;
    /// Undoes `_verbs_init_and_alloc_context` except for the memory.
    pub fn verbs_uninit_context(context: *mut verbs_context);
    /// Installs the provider's ops (NULL members are skipped).
    pub fn verbs_set_ops(context: *mut verbs_context, ops: *const verbs_context_ops);
    /// Registers a provider with libibverbs (plugin mode).
    pub fn verbs_register_driver_34(ops: *const verbs_device_ops);
}
