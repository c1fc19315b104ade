//! Preload mode (`LD_PRELOAD=libsoftverbs-rdmav34.so`): no root, no
//! kernel RDMA stack, no sysfs. These exported functions replace
//! libibverbs' own (the version script gives them libibverbs' symbol
//! versions, so the dynamic linker picks ours first, for the program and
//! for libibverbs' own internal calls, which go through its PLT). Each
//! serves softverbs devices and contexts and passes everything else to the
//! real function (`dlvsym(RTLD_NEXT, ...)`), so real devices keep working.

use crate::context::{soft_state, ContextState, StateRef};
use crate::device::{self, soft};
use crate::events::EventPipe;
use crate::ffi::*;
use crate::guard::{guard, set_errno, verb};
use std::ffi::c_void;
use std::ffi::CStr;
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::os::raw::c_int;
use std::ptr::{addr_of, addr_of_mut};
use std::sync::OnceLock;

/// The soft state of a context passed to an entry point, if it is ours.
fn ours<'a>(context: *mut ibv_context) -> Option<StateRef<'a>> {
    // SAFETY: the entry points receive NULL or live contexts from their
    // callers (the verbs API contract).
    unsafe { soft_state(context) }
}

/// Looks up the real (next) definition of a versioned libibverbs symbol.
fn real(cache: &OnceLock<usize>, name: &CStr, version: &CStr) -> Option<usize> {
    let addr = *cache.get_or_init(|| {
        // SAFETY: both strings are NUL-terminated; dlvsym only reads them.
        unsafe { libc::dlvsym(libc::RTLD_NEXT, name.as_ptr(), version.as_ptr()) as usize }
    });
    (addr != 0).then_some(addr)
}

macro_rules! real_fn {
    ($name:literal, $version:literal, $ty:ty) => {{
        static CACHE: OnceLock<usize> = OnceLock::new();
        // SAFETY: the symbol of that name and version has this C type.
        real(&CACHE, $name, $version).map(|a| unsafe { std::mem::transmute::<usize, $ty>(a) })
    }};
}

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device;

/// `ibv_get_device_list`: libibverbs' list (the real devices, and the
/// soft ones it found in the device view) followed by the soft devices it
/// did not list (there was no view, or the kernel's netlink listed the
/// devices instead of sysfs).
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    guard(std::ptr::null_mut(), || {
        // The view, before libibverbs looks at sysfs.
        let _ = crate::device_view::get();
        let real_list = real_fn!(c"ibv_get_device_list", c"IBVERBS_1.1", GetDeviceList)
            // SAFETY: calling the real function with our caller's argument
            // contract; a NULL `num` is allowed by it.
            .map_or(std::ptr::null_mut(), |f| unsafe { f(std::ptr::null_mut()) });
        let mut all: Vec<*mut ibv_device> = Vec::new();
        let mut p = real_list;
        // SAFETY: the real list is NULL or NULL-terminated.
        while !p.is_null() && !unsafe { *p }.is_null() {
            all.push(unsafe { *p });
            p = unsafe { p.add(1) };
        }
        if !real_list.is_null() {
            // SAFETY: the array (not the references it took) is ours to free.
            unsafe { libc::free(real_list.cast()) };
        }
        if let Some(e) = device::config_error() {
            softverbs_transport::say!("softverbs: {e}");
        }
        let listed: Vec<&str> = all.iter().filter_map(|&d| device::name_of(d)).collect();
        let missing: Vec<_> = device::all()
            .filter(|&d| device::name_of(d).is_some_and(|name| !listed.contains(&name)))
            .collect();
        for d in missing {
            device::hold(d);
            all.push(d);
        }
        list_to_c(&all, num)
    })
}

fn list_to_c(devices: &[*mut ibv_device], num: *mut c_int) -> *mut *mut ibv_device {
    // SAFETY: calloc of n+1 pointers; libibverbs frees it with free().
    let arr = unsafe { libc::calloc(devices.len() + 1, std::mem::size_of::<*mut ibv_device>()) }
        as *mut *mut ibv_device;
    if arr.is_null() {
        set_errno(libc::ENOMEM);
        return arr;
    }
    for (i, d) in devices.iter().enumerate() {
        // SAFETY: within the n+1 slots just allocated.
        unsafe { *arr.add(i) = *d };
    }
    if !num.is_null() {
        // SAFETY: caller-provided out pointer.
        unsafe { *num = devices.len() as c_int };
    }
    arr
}

/// `ibv_get_device_guid`: big-endian node GUID.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    guard(0, || match soft(device) {
        Some(d) => d.config.guid().to_be(),
        None => real_fn!(
            c"ibv_get_device_guid",
            c"IBVERBS_1.1",
            unsafe extern "C" fn(*mut ibv_device) -> u64
        )
        // SAFETY: forwarding the caller's argument.
        .map_or(0, |f| unsafe { f(device) }),
    })
}

/// `ibv_query_gid`: 0 or -1 (errno set).
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    guard(-1, || match ours(context) {
        Some(st) => match st.driver.with(|e, _| e.query_gid(port, index as u32)) {
            Ok(g) => {
                // SAFETY: caller-provided output.
                unsafe { *gid = crate::convert::gid_to_c(g) };
                0
            }
            Err(e) => {
                set_errno(e.errno());
                -1
            }
        },
        None => real_fn!(
            c"ibv_query_gid",
            c"IBVERBS_1.1",
            unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int
        )
        // SAFETY: forwarding the caller's arguments.
        .map_or(-1, |f| unsafe { f(context, port, index, gid) }),
    })
}

/// The GID table entry `index` of a soft context, or the errno.
pub(crate) fn gid_entry(st: &ContextState, port: u32, index: u32) -> Result<ibv_gid_entry, c_int> {
    let port = u8::try_from(port).map_err(|_| libc::EINVAL)?;
    let gid = st
        .driver
        .with(|e, _| e.query_gid(port, index))
        .map_err(|e| e.errno())?;
    if gid.is_zero() {
        return Err(libc::ENODATA);
    }
    Ok(ibv_gid_entry {
        gid: crate::convert::gid_to_c(gid),
        gid_index: index,
        port_num: u32::from(port),
        gid_type: IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: softverbs_config::netif::ifindex_of(st.device.config.ip).unwrap_or(0),
    })
}

/// `_ibv_query_gid_ex` (`ibv_query_gid_ex`): 0 or an errno.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    verb(|| match ours(context) {
        Some(st) => {
            if flags != 0 || entry_size < std::mem::size_of::<ibv_gid_entry>() {
                return libc::EINVAL;
            }
            match gid_entry(&st, port, index) {
                Ok(e) => {
                    // SAFETY: caller-provided output of at least this size.
                    unsafe { *entry = e };
                    0
                }
                Err(errno) => errno,
            }
        }
        None => real_fn!(
            c"_ibv_query_gid_ex",
            c"IBVERBS_1.11",
            unsafe extern "C" fn(
                *mut ibv_context,
                u32,
                u32,
                *mut ibv_gid_entry,
                u32,
                usize,
            ) -> c_int
        )
        // SAFETY: forwarding the caller's arguments.
        .map_or(libc::EOPNOTSUPP, |f| unsafe {
            f(context, port, index, entry, flags, entry_size)
        }),
    })
}

/// `_ibv_query_gid_table`: the number of entries, or a negative errno.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    guard(-(libc::EIO as isize), || match ours(context) {
        Some(st) => {
            if flags != 0 || entry_size < std::mem::size_of::<ibv_gid_entry>() {
                return -(libc::EINVAL as isize);
            }
            let valid = gid_table(&st);
            if valid.len() > max_entries {
                return -(libc::EINVAL as isize);
            }
            for (i, e) in valid.iter().enumerate() {
                // SAFETY: the caller provides `max_entries` entries of
                // `entry_size` bytes each.
                unsafe { *((entries as *mut u8).add(i * entry_size) as *mut ibv_gid_entry) = *e };
            }
            valid.len() as isize
        }
        None => real_fn!(
            c"_ibv_query_gid_table",
            c"IBVERBS_1.11",
            unsafe extern "C" fn(*mut ibv_context, *mut ibv_gid_entry, usize, u32, usize) -> isize
        )
        // SAFETY: forwarding the caller's arguments.
        .map_or(-(libc::EOPNOTSUPP as isize), |f| unsafe {
            f(context, entries, max_entries, flags, entry_size)
        }),
    })
}

/// The populated GID table entries of a soft context.
pub(crate) fn gid_table(st: &ContextState) -> Vec<ibv_gid_entry> {
    let len = st
        .driver
        .with(|e, _| e.query_port(1).map(|p| p.gid_tbl_len))
        .unwrap_or(0);
    (0..len).filter_map(|i| gid_entry(st, 1, i).ok()).collect()
}

/// `ibv_query_gid_type`: every populated soft GID is RoCE v2; an empty
/// entry reads as RoCE v1, as libibverbs answers for one (it keeps the
/// API's answer from before `ibv_query_gid_ex`, which fails ENODATA).
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port: u8,
    index: u32,
    kind: *mut u32,
) -> c_int {
    guard(-1, || match ours(context) {
        Some(st) => {
            let found = match gid_entry(&st, u32::from(port), index) {
                Ok(_) => Ok(IBV_GID_TYPE_SYSFS_ROCE_V2),
                Err(libc::ENODATA) => Ok(IBV_GID_TYPE_SYSFS_IB_ROCE_V1),
                Err(errno) => Err(errno),
            };
            match found {
                Ok(found) => {
                    // SAFETY: caller-provided output.
                    unsafe { *kind = found };
                    0
                }
                Err(errno) => {
                    set_errno(errno);
                    -1
                }
            }
        }
        None => real_fn!(
            c"ibv_query_gid_type",
            c"IBVERBS_PRIVATE_34",
            unsafe extern "C" fn(*mut ibv_context, u8, u32, *mut u32) -> c_int
        )
        // SAFETY: forwarding the caller's arguments.
        .map_or(-1, |f| unsafe { f(context, port, index, kind) }),
    })
}

/// `ibv_query_pkey`: big-endian P_Key, or -1.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    guard(-1, || match ours(context) {
        Some(st) => {
            match u16::try_from(index).map(|i| st.driver.with(|e, _| e.query_pkey(port, i))) {
                Ok(Ok(k)) => {
                    // SAFETY: caller-provided output.
                    unsafe { *pkey = k.to_be() };
                    0
                }
                _ => {
                    set_errno(libc::EINVAL);
                    -1
                }
            }
        }
        None => real_fn!(
            c"ibv_query_pkey",
            c"IBVERBS_1.1",
            unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut u16) -> c_int
        )
        // SAFETY: forwarding the caller's arguments.
        .map_or(-1, |f| unsafe { f(context, port, index, pkey) }),
    })
}

/// `ibv_get_pkey_index`: the index of a big-endian P_Key, or -1.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut ibv_context,
    port: u8,
    pkey: u16,
) -> c_int {
    guard(-1, || match ours(context) {
        Some(st) => match st.driver.with(|e, _| e.query_pkey(port, 0)) {
            Ok(k) if k.to_be() == pkey => 0,
            _ => {
                set_errno(libc::EINVAL);
                -1
            }
        },
        None => real_fn!(
            c"ibv_get_pkey_index",
            c"IBVERBS_1.5",
            unsafe extern "C" fn(*mut ibv_context, u8, u16) -> c_int
        )
        // SAFETY: forwarding the caller's arguments.
        .map_or(-1, |f| unsafe { f(context, port, pkey) }),
    })
}

/// `ibv_import_device`: EOPNOTSUPP for the `cmd_fd` of a softverbs
/// context (softverbs has no kernel objects to share between processes);
/// any other descriptor goes to libibverbs.
///
/// # Safety
/// Called by applications with any integer; only the descriptor table is
/// read.
#[no_mangle]
pub unsafe extern "C" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
    guard(std::ptr::null_mut(), || {
        if is_softverbs_cmd_fd(cmd_fd) {
            set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        }
        real_fn!(
            c"ibv_import_device",
            c"IBVERBS_1.10",
            unsafe extern "C" fn(c_int) -> *mut ibv_context
        )
        // SAFETY: forwarding the caller's argument.
        .map_or(std::ptr::null_mut(), |f| unsafe { f(cmd_fd) })
    })
}

/// Whether `fd` is (a duplicate of) a softverbs context's `cmd_fd`.
fn is_softverbs_cmd_fd(fd: c_int) -> bool {
    let want = format!("/memfd:{} ", crate::context::CMD_FD_NAME.to_string_lossy());
    std::fs::read_link(format!("/proc/thread-self/fd/{fd}"))
        .is_ok_and(|target| target.to_string_lossy().starts_with(&want))
}

/// `ibv_create_comp_channel`: a record channel instead of a kernel fd.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    guard(std::ptr::null_mut(), || match ours(context) {
        Some(st) => {
            let pipe = match EventPipe::new() {
                Ok(p) => p,
                Err(e) => {
                    set_errno(e.raw_os_error().unwrap_or(libc::EMFILE));
                    return std::ptr::null_mut();
                }
            };
            // SAFETY: malloc'ed like libibverbs does, so either side frees it.
            let ch = unsafe { libc::malloc(std::mem::size_of::<ibv_comp_channel>()) }
                as *mut ibv_comp_channel;
            if ch.is_null() {
                set_errno(libc::ENOMEM);
                return ch;
            }
            let reader = pipe.reader.map(IntoRawFd::into_raw_fd).unwrap_or(-1);
            // SAFETY: `ch` is a fresh allocation of the right size.
            unsafe {
                ch.write(ibv_comp_channel {
                    context,
                    fd: reader,
                    refcnt: 0,
                })
            };
            st.channels.lock().insert(reader, pipe.writer);
            ch
        }
        None => {
            let channel = real_fn!(
                c"ibv_create_comp_channel",
                c"IBVERBS_1.0",
                unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel
            )
            // SAFETY: forwarding the caller's argument.
            .map_or(std::ptr::null_mut(), |f| unsafe { f(context) });
            if channel.is_null() {
                // The real function's errno is the caller's to see.
                set_errno(crate::guard::errno());
                return channel;
            }
            let delays = crate::passthrough::hooked(context).and_then(|h| h.delays.as_ref());
            if let Some(d) = delays {
                // SAFETY: the channel just made, not yet handed out.
                if let Err(e) = unsafe { d.merge_channel(channel) } {
                    // SAFETY: ours to destroy again; nothing uses it.
                    unsafe { real_destroy_comp_channel(channel) };
                    set_errno(e.raw_os_error().unwrap_or(libc::EMFILE));
                    return std::ptr::null_mut();
                }
            }
            channel
        }
    })
}

/// libibverbs' own `ibv_destroy_comp_channel`.
///
/// # Safety
/// `channel` is a live channel of a real context.
unsafe fn real_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    real_fn!(
        c"ibv_destroy_comp_channel",
        c"IBVERBS_1.0",
        unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int
    )
    // SAFETY: per the contract.
    .map_or(libc::EOPNOTSUPP, |f| unsafe { f(channel) })
}

/// `ibv_destroy_comp_channel`: EBUSY while a CQ still uses it.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    verb(|| {
        // SAFETY: a channel from ibv_create_comp_channel.
        let context = unsafe { (*channel).context };
        match ours(context) {
            Some(st) => {
                // SAFETY: as above; the channel's fields are plain data.
                let (refcnt, fd) = unsafe { ((*channel).refcnt, (*channel).fd) };
                if refcnt != 0 {
                    return libc::EBUSY;
                }
                st.channels.lock().remove(&fd);
                // SAFETY: the reader fd and the allocation are ours to release.
                unsafe {
                    libc::close(fd);
                    libc::free(channel.cast());
                }
                0
            }
            None => {
                // A merged channel (passthrough_delay) gets the kernel's
                // descriptor back for libibverbs to close, unless it stays
                // (a CQ still uses it: EBUSY, descriptor untouched).
                // SAFETY: as above.
                let fd = unsafe { addr_of_mut!((*channel).fd) };
                // SAFETY: as above.
                let in_use = unsafe { addr_of!((*channel).refcnt).read() } != 0;
                // SAFETY: as above.
                let merged = (!in_use)
                    .then(|| crate::passthrough_delay::channel(unsafe { fd.read() }))
                    .flatten();
                if let Some(m) = &merged {
                    // SAFETY: as above; the channel is being destroyed.
                    unsafe { fd.write(m.kernel_fd()) };
                }
                // SAFETY: forwarding the caller's argument.
                let ret = unsafe { real_destroy_comp_channel(channel) };
                if let Some(m) = merged {
                    if ret == 0 {
                        crate::passthrough_delay::forget_channel(m.fd());
                    } else {
                        // SAFETY: the channel stays (EBUSY), live.
                        unsafe { fd.write(m.fd()) };
                    }
                }
                ret
            }
        }
    })
}

/// `ibv_get_cq_event`: on a merged channel (a pass-through context with
/// `completion delay=` rules, `passthrough_delay`), the event comes from
/// its descriptor, which cannot be read, and is handed out as libibverbs
/// does; held completions that came due give their CQs events there
/// (a wait a `pthread_cancel` does not end: it runs in the guard).
/// Every other channel goes to the real function, a cancellation point
/// ("C-unwind": a cancelled thread leaves through here).
///
/// # Safety
/// Called with a live channel and the caller's out pointers.
#[no_mangle]
pub unsafe extern "C-unwind" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq_out: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    // SAFETY: the caller's live channel.
    let fd = unsafe { addr_of!((*channel).fd).read() };
    let Some(merged) = guard(None, || crate::passthrough_delay::channel(fd)) else {
        type GetCqEvent = unsafe extern "C-unwind" fn(
            *mut ibv_comp_channel,
            *mut *mut ibv_cq,
            *mut *mut c_void,
        ) -> c_int;
        // Outside the guard: the real function's errno is the caller's.
        let real = real_fn!(c"ibv_get_cq_event", c"IBVERBS_1.1", GetCqEvent);
        // SAFETY: forwarding the caller's arguments.
        return real.map_or(-1, |f| unsafe { f(channel, cq_out, cq_context) });
    };
    // SAFETY: the channel's context, live while the channel is.
    let context = unsafe { addr_of!((*channel).context).read() };
    let delays = crate::passthrough::hooked(context).and_then(|h| h.delays.as_ref());
    let record = guard(Err(libc::EIO), || {
        merged.next(|| {
            if let Some(d) = delays {
                d.raise_due(&merged);
            }
        })
    });
    let cq = match record {
        Ok(r) => r.element as usize as *mut ibv_cq,
        Err(errno) => {
            guard((), || set_errno(errno));
            return -1;
        }
    };
    if let Some(d) = delays {
        guard((), || d.event_handed_out(cq as usize));
    }
    // SAFETY: the CQ the event names (live: an event of a destroyed CQ is
    // taken back at its destroy) and the caller's out pointers.
    unsafe {
        cq_out.write(cq);
        cq_context.write(addr_of!((*cq).cq_context).read());
        // What libibverbs' own calls next: the context's cq_event op.
        crate::trace_ops::cq_event(cq);
    }
    0
}

/// The write end of a soft completion channel, for a CQ bound to it:
/// `Ok(None)` for no channel, `Err(EBADF)` for a channel that is not one
/// of this context's (another context's, whose events would never reach
/// it: the kernel's lookup of the channel's file refuses it likewise).
pub(crate) fn channel_writer(
    st: &ContextState,
    channel: *mut ibv_comp_channel,
) -> Result<Option<RawFd>, i32> {
    if channel.is_null() {
        return Ok(None);
    }
    // SAFETY: a live channel the application passes to create_cq.
    let fd = unsafe { (*channel).fd };
    match st.channels.lock().get(&fd) {
        Some(w) => Ok(Some(w.as_raw_fd())),
        None => Err(libc::EBADF),
    }
}

/// `ibv_get_async_event`: on a pass-through context whose fault rules
/// raise events, the context's descriptor is softverbs' merged one
/// (`merged_fd`), which cannot be read: the event comes from it, and
/// is then handed out as libibverbs does (a wait a `pthread_cancel` does
/// not end). Every other context goes to the real function, a
/// cancellation point ("C-unwind", as `ibv_get_cq_event`).
///
/// # Safety
/// Called with a live context and a caller-owned event.
#[no_mangle]
pub unsafe extern "C-unwind" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    let merged = guard(None, || {
        crate::passthrough::hooked(context)
            .and_then(|h| h.qp_errors.as_ref())
            .and_then(|q| q.merged())
    });
    let Some(merged) = merged else {
        type GetAsyncEvent =
            unsafe extern "C-unwind" fn(*mut ibv_context, *mut ibv_async_event) -> c_int;
        // Outside the guard: the real function's errno is the caller's.
        let real = real_fn!(c"ibv_get_async_event", c"IBVERBS_1.1", GetAsyncEvent);
        // SAFETY: forwarding the caller's arguments.
        return real.map_or(-1, |f| unsafe { f(context, event) });
    };
    let record = guard(Err(libc::EIO), || merged.next(|| {}));
    let record = match record {
        Ok(r) => r,
        Err(errno) => {
            guard((), || set_errno(errno));
            return -1;
        }
    };
    // SAFETY: the caller's event, written field by field.
    unsafe {
        addr_of_mut!((*event).event_type).write(record.event_type);
        addr_of_mut!((*event).element).write(event_element(record));
        // What libibverbs' own calls next: the context's async_event op,
        // which a hooked context has from trace_ops.
        crate::trace_ops::async_event(context, event);
    }
    0
}

/// The element of an async event, as libibverbs reads it from the
/// kernel's record: an object's address, or a port number.
fn event_element(r: crate::merged_fd::Record) -> ibv_async_event_element {
    use crate::event_acks::EventElement;
    let ptr = r.element as usize;
    match crate::event_acks::event_element(r.event_type) {
        EventElement::Cq => ibv_async_event_element { cq: ptr as *mut _ },
        EventElement::Qp => ibv_async_event_element { qp: ptr as *mut _ },
        EventElement::Srq => ibv_async_event_element { srq: ptr as *mut _ },
        EventElement::Wq => ibv_async_event_element { wq: ptr as *mut _ },
        EventElement::Port => ibv_async_event_element {
            port_num: r.element as c_int,
        },
    }
}
