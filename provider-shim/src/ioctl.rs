//! Plugin mode: the kernel commands libibverbs itself sends for a
//! softverbs context. In plugin mode `cmd_fd` is `/dev/full` (see
//! docs/architecture.md), so libibverbs' own `execute_ioctl` would fail;
//! [`install`] points libibverbs' GOT slot for it at [`execute_ioctl`],
//! which answers, for softverbs contexts only:
//!
//! * the `INVOKE_WRITE` probe of `_verbs_init_and_alloc_context` (ENOSPC,
//!   as the kernel answers a too-short request, so libibverbs sends later
//!   write commands as ioctls that reach us too);
//! * `INVOKE_WRITE CREATE_COMP_CHANNEL` (`ibv_create_comp_channel`);
//! * `QUERY_GID_ENTRY` and `QUERY_GID_TABLE` (`ibv_query_gid*`).
//!
//! `ASYNC_EVENT_ALLOC` is never sent: libibverbs asks for it only when
//! `alloc_context` leaves `async_fd` at -1, and ours always sets it.
//!
//! Every other context's commands go to the original function, with one
//! change for a pass-through context whose `async_fd` or completion
//! channels are softverbs' merged descriptors (`merged_fd`): a create
//! command's event-descriptor or channel attribute names the kernel's
//! descriptor again.

use crate::context::{soft_state, ContextState, StateRef};
use crate::device::soft;
use crate::events::EventPipe;
use crate::ffi::{ibv_context, ibv_gid_entry};
use crate::guard::{set_errno, verb};
use std::os::fd::IntoRawFd;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `struct ib_uverbs_attr` (rdma_user_ioctl_cmds.h).
#[repr(C)]
#[derive(Debug)]
pub struct ib_uverbs_attr {
    attr_id: u16,
    len: u16,
    flags: u16,
    _attr_data: u16,
    /// Inline data of at most 8 bytes, a user pointer, or an fd.
    data: u64,
}

/// `struct ib_uverbs_ioctl_hdr`; the attributes follow it.
#[repr(C)]
#[derive(Debug)]
struct ib_uverbs_ioctl_hdr {
    _length: u16,
    object_id: u16,
    method_id: u16,
    _num_attrs: u16,
    _reserved1: u64,
    _driver_id: u32,
    _reserved2: u32,
}

/// libibverbs' `struct ibv_command_buffer` (cmd_ioctl.h): attributes from
/// `hdr`'s end up to `next_attr`, then those of the `next` chain.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_command_buffer {
    next: *mut ibv_command_buffer,
    next_attr: *mut ib_uverbs_attr,
    _last_attr: *mut ib_uverbs_attr,
    _uhw: [u8; 4],
    /// Bit 0: `buffer_error` (a fill function could not marshal its input).
    bits: u8,
    hdr: ib_uverbs_ioctl_hdr,
}

const _: () = assert!(std::mem::size_of::<ib_uverbs_attr>() == 16);
const _: () = assert!(std::mem::size_of::<ib_uverbs_ioctl_hdr>() == 24);
const _: () = assert!(std::mem::offset_of!(ibv_command_buffer, hdr) == 32);

// Object, method and attribute ids (ib_user_ioctl_cmds.h) and the write
// command (ib_user_verbs.h) softverbs answers.
const UVERBS_OBJECT_DEVICE: u16 = 0;
const UVERBS_METHOD_INVOKE_WRITE: u16 = 0;
const UVERBS_METHOD_QUERY_GID_TABLE: u16 = 5;
const UVERBS_METHOD_QUERY_GID_ENTRY: u16 = 6;
const UVERBS_ATTR_CORE_IN: u16 = 0;
const UVERBS_ATTR_CORE_OUT: u16 = 1;
const UVERBS_ATTR_WRITE_CMD: u16 = 2;
const IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL: u64 = 17;
const UVERBS_ATTR_F_VALID_OUTPUT: u16 = 1 << 1;
/// The create methods that name an async event descriptor, as (object,
/// method, attribute): CQ, QP, SRQ and WQ.
const EVENT_FD_ATTRS: [(u16, u16, u16); 4] = [(3, 0, 7), (4, 0, 12), (5, 0, 10), (12, 0, 5)];
/// CQ create's completion channel attribute (object, method, attribute).
const COMP_CHANNEL_ATTR: (u16, u16, u16) = (3, 0, 3);

type ExecuteIoctl = unsafe extern "C" fn(*mut ibv_context, *mut ibv_command_buffer) -> c_int;

/// libibverbs' own `execute_ioctl`, for contexts that are not ours.
static ORIGINAL: AtomicUsize = AtomicUsize::new(0);

/// Points libibverbs' internal calls of `execute_ioctl` at ours.
pub fn install() -> Result<(), String> {
    let (path, original) = libibverbs_execute_ioctl()?;
    ORIGINAL.store(original, Ordering::SeqCst);
    let slot = crate::got::find_slot(path, b"execute_ioctl")?;
    // SAFETY: our function has execute_ioctl's C type.
    unsafe { slot.replace(execute_ioctl as ExecuteIoctl as usize) }.map(drop)
}

/// The path libibverbs was loaded from and its `execute_ioctl`.
fn libibverbs_execute_ioctl() -> Result<(&'static std::ffi::CStr, usize), String> {
    let anchor = crate::libibverbs::verbs_register_driver_34 as *const std::ffi::c_void;
    let object = crate::plugin::object_of(anchor).ok_or("libibverbs is not loaded")?;
    let path = object.file;
    // SAFETY: RTLD_NOLOAD only returns a handle to the loaded library
    // (taking a reference, dropped below); dlvsym reads two C strings.
    let original = unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
        if handle.is_null() {
            return Err("cannot reopen libibverbs".into());
        }
        let f = libc::dlvsym(
            handle,
            c"execute_ioctl".as_ptr(),
            c"IBVERBS_PRIVATE_34".as_ptr(),
        );
        libc::dlclose(handle);
        f as usize
    };
    if original == 0 {
        return Err("libibverbs has no execute_ioctl@IBVERBS_PRIVATE_34".into());
    }
    Ok((path, original))
}

/// Our `execute_ioctl`: 0 or an errno value (also left in errno).
///
/// # Safety
/// Called by libibverbs with a live context and a command buffer built by
/// its fill functions.
pub unsafe extern "C" fn execute_ioctl(
    context: *mut ibv_context,
    cmd: *mut ibv_command_buffer,
) -> c_int {
    verb(|| {
        // SAFETY: libibverbs passes a live context (or NULL).
        let ours = !context.is_null() && soft(unsafe { (*context).device }).is_some();
        if !ours {
            if crate::passthrough::hooked(context).is_some() {
                // SAFETY: a command buffer built by libibverbs.
                unsafe { name_kernel_fds(context, cmd) };
            }
            let original = ORIGINAL.load(Ordering::SeqCst);
            // SAFETY: ORIGINAL holds libibverbs' execute_ioctl (set before
            // the slot pointed here) and gets our caller's arguments.
            return unsafe { std::mem::transmute::<usize, ExecuteIoctl>(original)(context, cmd) };
        }
        // SAFETY: as above, for the command buffer.
        match unsafe { serve(context, cmd) } {
            Ok(()) => 0,
            Err(errno) => {
                set_errno(errno);
                errno
            }
        }
    })
}

/// A create command of a hooked pass-through context names the merged
/// descriptors softverbs gave the application (`merged_fd`) as the new
/// object's event descriptor or a CQ's completion channel, which the
/// kernel would refuse: they name the kernel's own again.
///
/// # Safety
/// `context` is a live hooked context; `cmd` a command buffer as
/// libibverbs builds them, not yet sent.
unsafe fn name_kernel_fds(context: *mut ibv_context, cmd: *mut ibv_command_buffer) {
    // SAFETY: per the contract.
    let (object, method) = unsafe { ((*cmd).hdr.object_id, (*cmd).hdr.method_id) };
    let async_fd = EVENT_FD_ATTRS
        .iter()
        .find(|(o, m, _)| (*o, *m) == (object, method))
        .map(|&(_, _, id)| id);
    let channel = ((object, method) == (COMP_CHANNEL_ATTR.0, COMP_CHANNEL_ATTR.1))
        .then_some(COMP_CHANNEL_ATTR.2);
    if async_fd.is_none() && channel.is_none() {
        return;
    }
    let merged_async = crate::passthrough::hooked(context)
        .and_then(|h| h.qp_errors.as_ref())
        .and_then(|q| q.merged());
    // SAFETY: per the contract.
    for a in unsafe { attrs(cmd) } {
        // SAFETY: an attribute of libibverbs' command buffer, which only
        // this thread uses until it is sent.
        let (id, fd) = unsafe { ((*a).attr_id, (*a).data as c_int) };
        let kernel = if Some(id) == async_fd {
            merged_async
                .as_ref()
                .filter(|m| m.fd() == fd)
                .map(|m| m.kernel_fd())
        } else if Some(id) == channel {
            crate::passthrough_delay::channel(fd).map(|m| m.kernel_fd())
        } else {
            None
        };
        if let Some(k) = kernel {
            // SAFETY: as above.
            unsafe { (*a).data = k as u64 };
        }
    }
}

/// The attributes of a command, in order.
///
/// # Safety
/// `cmd` is a command buffer as libibverbs builds them. (Raw pointers
/// throughout: the attributes lie beyond the struct, in the same buffer.)
unsafe fn attrs(cmd: *mut ibv_command_buffer) -> Vec<*mut ib_uverbs_attr> {
    let mut all = Vec::new();
    let mut link = cmd;
    while !link.is_null() {
        // SAFETY: each buffer of the chain is live for the call; its
        // attribute array starts right after its header and ends at
        // `next_attr`.
        unsafe {
            let mut a = std::ptr::addr_of_mut!((*link).hdr).add(1) as *mut ib_uverbs_attr;
            while a < (*link).next_attr {
                all.push(a);
                a = a.add(1);
            }
            link = (*link).next;
        }
    }
    all
}

/// A command's attributes, by id.
struct Attrs(Vec<*mut ib_uverbs_attr>);

impl Attrs {
    fn get(&self, id: u16) -> Option<*mut ib_uverbs_attr> {
        // SAFETY: the pointers are the command's live attributes.
        self.0
            .iter()
            .copied()
            .find(|&a| unsafe { (*a).attr_id } == id)
    }

    /// The inline value of an input attribute (a u64, or a u32 in its low
    /// half on this little-endian target).
    fn value(&self, id: u16) -> Result<u64, c_int> {
        // SAFETY: as in `get`.
        self.get(id)
            .map(|a| unsafe { (*a).data })
            .ok_or(libc::EINVAL)
    }

    /// Copies `bytes` to an output attribute's buffer, zero-filling the
    /// rest like the kernel; EINVAL if it does not fit.
    fn write(&self, id: u16, bytes: &[u8]) -> Result<(), c_int> {
        let a = self.get(id).ok_or(libc::EINVAL)?;
        // SAFETY: an output attribute names a caller buffer of `len` bytes.
        unsafe {
            let len = usize::from((*a).len);
            if len < bytes.len() {
                return Err(libc::EINVAL);
            }
            let dst = (*a).data as *mut u8;
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len());
            std::ptr::write_bytes(dst.add(bytes.len()), 0, len - bytes.len());
            (*a).flags |= UVERBS_ATTR_F_VALID_OUTPUT;
        }
        Ok(())
    }
}

/// Answers one command for a softverbs context.
///
/// # Safety
/// `context` is a live softverbs context (possibly still being set up),
/// `cmd` a command buffer built by libibverbs.
unsafe fn serve(context: *mut ibv_context, cmd: *mut ibv_command_buffer) -> Result<(), c_int> {
    // SAFETY: per this function's contract.
    let (bits, object, method) =
        unsafe { ((*cmd).bits, (*cmd).hdr.object_id, (*cmd).hdr.method_id) };
    if bits & 1 != 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: per this function's contract.
    let attrs = Attrs(unsafe { attrs(cmd) });
    // SAFETY: `context` is live; its state is set once alloc_context is done.
    let state = || unsafe { soft_state(context) }.ok_or(libc::EOPNOTSUPP);
    match (object, method) {
        (UVERBS_OBJECT_DEVICE, UVERBS_METHOD_INVOKE_WRITE) => invoke_write(state, &attrs),
        (UVERBS_OBJECT_DEVICE, UVERBS_METHOD_QUERY_GID_ENTRY) => gid_entry(&*state()?, &attrs),
        (UVERBS_OBJECT_DEVICE, UVERBS_METHOD_QUERY_GID_TABLE) => gid_table(&*state()?, &attrs),
        _ => Err(libc::EOPNOTSUPP),
    }
}

fn invoke_write<'a>(
    state: impl FnOnce() -> Result<StateRef<'a>, c_int>,
    attrs: &Attrs,
) -> Result<(), c_int> {
    match attrs.value(UVERBS_ATTR_WRITE_CMD)? {
        IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL => create_comp_channel(&*state()?, attrs),
        // The probe libibverbs sends while the context is being set up
        // carries no request; the kernel rejects it as too short.
        _ if attrs.get(UVERBS_ATTR_CORE_IN).is_none() => Err(libc::ENOSPC),
        _ => Err(libc::EOPNOTSUPP),
    }
}

/// A completion channel: libibverbs gets the read end as the channel's fd
/// (`struct ib_uverbs_create_comp_channel_resp { u32 fd; }`); the write
/// end is kept under that fd for the CQs created on it.
fn create_comp_channel(st: &ContextState, attrs: &Attrs) -> Result<(), c_int> {
    let pipe = EventPipe::new().map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
    let reader = pipe
        .reader
        .map(IntoRawFd::into_raw_fd)
        .ok_or(libc::EMFILE)?;
    if let Err(e) = attrs.write(UVERBS_ATTR_CORE_OUT, &(reader as u32).to_ne_bytes()) {
        // SAFETY: `reader` was just created and handed to nobody.
        unsafe { libc::close(reader) };
        return Err(e);
    }
    st.channels.lock().insert(reader, pipe.writer);
    Ok(())
}

fn entry_bytes(e: &ibv_gid_entry) -> &[u8] {
    // SAFETY: ibv_gid_entry is plain data without padding (32 bytes).
    unsafe {
        std::slice::from_raw_parts(
            (e as *const ibv_gid_entry).cast(),
            std::mem::size_of::<ibv_gid_entry>(),
        )
    }
}

// QUERY_GID_ENTRY attributes: PORT, GID_INDEX, FLAGS, RESP_ENTRY.
fn gid_entry(st: &ContextState, attrs: &Attrs) -> Result<(), c_int> {
    let port = u32::try_from(attrs.value(0)?).map_err(|_| libc::EINVAL)?;
    let index = u32::try_from(attrs.value(1)?).map_err(|_| libc::EINVAL)?;
    if attrs.value(2)? as u32 != 0 {
        return Err(libc::EINVAL);
    }
    let entry = crate::preload::gid_entry(st, port, index)?;
    attrs.write(3, entry_bytes(&entry))
}

// QUERY_GID_TABLE attributes: ENTRY_SIZE, FLAGS, RESP_ENTRIES,
// RESP_NUM_ENTRIES; entries are `ENTRY_SIZE` bytes apart.
fn gid_table(st: &ContextState, attrs: &Attrs) -> Result<(), c_int> {
    let entry_size = usize::try_from(attrs.value(0)?).map_err(|_| libc::EINVAL)?;
    if attrs.value(1)? as u32 != 0 || entry_size == 0 {
        return Err(libc::EINVAL);
    }
    let out = attrs.get(2).ok_or(libc::EINVAL)?;
    // SAFETY: the command's live output attribute.
    let (buf, len) = unsafe { ((*out).data as *mut u8, usize::from((*out).len)) };
    let valid = crate::preload::gid_table(st);
    let used = entry_size.min(std::mem::size_of::<ibv_gid_entry>());
    if valid.len() > len / entry_size {
        return Err(libc::EINVAL);
    }
    for (i, e) in valid.iter().enumerate() {
        // SAFETY: entry i lies within the caller's `len`-byte buffer.
        unsafe {
            let dst = buf.add(i * entry_size);
            std::ptr::copy_nonoverlapping(entry_bytes(e).as_ptr(), dst, used);
            std::ptr::write_bytes(dst.add(used), 0, entry_size - used);
        }
    }
    attrs.write(3, &(valid.len() as u64).to_ne_bytes())
}
