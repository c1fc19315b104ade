//! Device queries and the PD, MR, CQ and AH verbs.
//!
//! Every entry point runs under [`guard`]. Verbs returning `int` return 0
//! or an errno value (as libibverbs' provider ops do); verbs returning a
//! pointer return NULL with errno set.

use crate::call_lock::CallLock;
use crate::context::state;
use crate::convert::{ah_from_c, wc_to_c};
use crate::device::copy_name;
use crate::ffi::*;
use crate::guard::{guard, set_errno, verb};
use crate::memory_room::room_for;
use softverbs_engine::{
    AhId, CqId, CqRing, DeviceAttr, MrId, PdId, PortAttr, ReregMr, VerbsError, WorkCompletion,
};
use std::collections::VecDeque;
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

/// `errno` of a failed verb.
pub fn err(e: VerbsError) -> c_int {
    e.errno()
}

/// Sets errno and returns NULL.
pub fn null<T>(errno: c_int) -> *mut T {
    set_errno(errno);
    std::ptr::null_mut()
}

/// A PD.
#[repr(C)]
#[derive(Debug)]
pub struct SoftPd {
    /// Must be first.
    pub pd: ibv_pd,
    /// Engine handle.
    pub id: PdId,
}

/// An MR.
#[repr(C)]
#[derive(Debug)]
pub struct SoftMr {
    /// Must be first.
    pub vmr: verbs_mr,
    /// Engine handle.
    pub id: MrId,
}

/// A CQ.
#[repr(C)]
#[derive(Debug)]
pub struct SoftCq {
    /// Must be first.
    pub vcq: verbs_cq,
    /// Engine handle.
    pub id: CqId,
    /// Completions taken from the engine by the `ibv_cq_ex` polling API
    /// and not yet consumed (`ibv_poll_cq` returns them first), behind the
    /// CQ's lock: `ibv_poll_cq` is one critical section,
    /// `ibv_start_poll` .. `ibv_end_poll` another.
    pub polled: CallLock<VecDeque<WorkCompletion>>,
    /// The engine's completions of this CQ, taken without the driver lock
    /// while there are some.
    pub ring: Arc<CqRing>,
}

/// An AH.
#[repr(C)]
#[derive(Debug)]
pub struct SoftAh {
    /// Must be first.
    pub ah: ibv_ah,
    /// Engine handle.
    pub id: AhId,
}

/// The engine handle of a PD made by softverbs.
///
/// # Safety
/// `pd` is a live PD of one of our contexts.
pub unsafe fn pd_id(pd: *mut ibv_pd) -> PdId {
    // SAFETY: our PDs are SoftPd, whose first field is the ibv_pd.
    unsafe { (*(pd as *mut SoftPd)).id }
}

/// The engine handle of a CQ made by softverbs.
///
/// # Safety
/// `cq` is a live CQ of one of our contexts.
pub unsafe fn cq_id(cq: *mut ibv_cq) -> CqId {
    // SAFETY: our CQs are SoftCq, whose first field holds the ibv_cq.
    unsafe { (*(cq as *mut SoftCq)).id }
}

/// The polled completions of a CQ made by softverbs, behind its lock.
///
/// # Safety
/// `cq` is a live CQ of one of our contexts; the reference is not used
/// after it is destroyed.
pub unsafe fn cq_polled<'a>(cq: *mut ibv_cq) -> &'a CallLock<VecDeque<WorkCompletion>> {
    // SAFETY: our CQs are SoftCq; the reference covers only the provider's
    // own field, never the ibv_cq others write.
    unsafe { &(*(cq as *mut SoftCq)).polled }
}

/// The engine's completions of a CQ made by softverbs.
///
/// # Safety
/// `cq` is a live CQ of one of our contexts; the reference is not used
/// after it is destroyed.
pub unsafe fn cq_ring<'a>(cq: *mut ibv_cq) -> &'a CqRing {
    // SAFETY: our CQs are SoftCq; the reference covers only the provider's
    // own field, which is never written after creation, never the ibv_cq
    // others write. CqRing is Sync: threads share it through its lock.
    unsafe { &(*(cq as *mut SoftCq)).ring }
}

fn fill_device_attr(a: &DeviceAttr, out: &mut ibv_device_attr) {
    copy_name(&mut out.fw_ver, &a.fw_ver);
    out.node_guid = a.node_guid.to_be();
    out.sys_image_guid = a.sys_image_guid.to_be();
    out.max_mr_size = a.max_mr_size;
    out.page_size_cap = a.page_size_cap;
    out.vendor_id = a.vendor_id;
    out.vendor_part_id = a.vendor_part_id;
    out.hw_ver = a.hw_ver;
    out.max_qp = a.max_qp as _;
    out.max_qp_wr = a.max_qp_wr as _;
    out.device_cap_flags = a.device_cap_flags as _;
    out.max_sge = a.max_sge as _;
    out.max_sge_rd = a.max_sge_rd as _;
    out.max_cq = a.max_cq as _;
    out.max_cqe = a.max_cqe as _;
    out.max_mr = a.max_mr as _;
    out.max_pd = a.max_pd as _;
    out.max_qp_rd_atom = a.max_qp_rd_atom as _;
    out.max_res_rd_atom = a.max_res_rd_atom as _;
    out.max_qp_init_rd_atom = a.max_qp_init_rd_atom as _;
    out.atomic_cap = a.atomic_cap as _;
    out.max_ah = a.max_ah as _;
    out.max_mcast_grp = a.max_mcast_grp as _;
    out.max_mcast_qp_attach = a.max_mcast_qp_attach as _;
    out.max_total_mcast_qp_attach = a.max_total_mcast_qp_attach as _;
    out.max_srq = a.max_srq as _;
    out.max_srq_wr = a.max_srq_wr as _;
    out.max_srq_sge = a.max_srq_sge as _;
    out.max_pkeys = a.max_pkeys;
    out.local_ca_ack_delay = a.local_ca_ack_delay;
    out.phys_port_cnt = a.phys_port_cnt;
}

/// `query_device_ex`: writes only `attr_size` bytes, as libibverbs asks
/// (232 for `ibv_query_device`, more for `ibv_query_device_ex`).
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    _input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    verb(|| {
        // SAFETY: libibverbs calls this for our contexts only.
        let st = unsafe { state(context) };
        let mut ex = ibv_device_attr_ex::ZEROED;
        let a = st.driver.with(|e, _| e.query_device().clone());
        fill_device_attr(&a, &mut ex.orig_attr);
        ex.device_cap_flags_ex = u64::from(a.device_cap_flags);
        ex.phys_port_cnt_ex = u32::from(a.phys_port_cnt);
        let n = attr_size.min(std::mem::size_of::<ibv_device_attr_ex>());
        // SAFETY: the caller provides `attr_size` writable bytes at `attr`.
        unsafe { std::ptr::copy_nonoverlapping(&ex as *const _ as *const u8, attr as *mut u8, n) };
        0
    })
}

fn fill_port_attr(p: &PortAttr, out: &mut ibv_port_attr) {
    out.state = p.state;
    out.max_mtu = p.max_mtu as u32;
    out.active_mtu = p.active_mtu as u32;
    out.gid_tbl_len = p.gid_tbl_len as _;
    out.port_cap_flags = p.port_cap_flags;
    out.max_msg_sz = p.max_msg_sz;
    out.pkey_tbl_len = p.pkey_tbl_len;
    out.lid = p.lid;
    out.sm_lid = p.sm_lid;
    out.lmc = p.lmc;
    out.max_vl_num = p.max_vl_num;
    out.active_width = p.active_width;
    out.active_speed = p.active_speed;
    out.phys_state = p.phys_state;
    out.link_layer = p.link_layer;
}

/// `query_port`.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn query_port(
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    verb(|| {
        // SAFETY: our context.
        let st = unsafe { state(context) };
        match st.driver.with(|e, _| e.query_port(port)) {
            Ok(p) => {
                let mut out = ibv_port_attr::ZEROED;
                fill_port_attr(&p, &mut out);
                // SAFETY: the caller provides an ibv_port_attr.
                unsafe { *attr = out };
                0
            }
            Err(e) => err(e),
        }
    })
}

/// `alloc_pd`.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    guard(std::ptr::null_mut(), || {
        // SAFETY: our context.
        let st = unsafe { state(context) };
        if !room_for(0) {
            return null(libc::ENOMEM);
        }
        match st.driver.with(|e, _| e.alloc_pd()) {
            Ok(id) => {
                let mut pd = ibv_pd::ZEROED;
                pd.context = context;
                Box::into_raw(Box::new(SoftPd { pd, id })) as *mut ibv_pd
            }
            Err(e) => null(err(e)),
        }
    })
}

/// `dealloc_pd`.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    verb(|| {
        // SAFETY: `pd` is one of our PDs.
        let (st, id) = unsafe { (state((*pd).context), pd_id(pd)) };
        match st.driver.with(|e, _| e.dealloc_pd(id)) {
            Ok(()) => {
                // SAFETY: allocated by alloc_pd, freed once.
                drop(unsafe { Box::from_raw(pd as *mut SoftPd) });
                0
            }
            Err(e) => err(e),
        }
    })
}

/// `reg_mr` (provider signature: the iova remote peers use is `hca_va`).
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    hca_va: u64,
    access: c_int,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        // SAFETY: `pd` is one of our PDs.
        let (st, pd_handle) = unsafe { (state((*pd).context), pd_id(pd)) };
        let (addr, length, access) = (addr as u64, length as u64, access as u32);
        if !room_for(0) {
            return null(libc::ENOMEM);
        }
        let r = st.driver.with(|e, _| {
            e.check_reg_mr(addr, length, hca_va, access)?;
            check_mapped(addr, length, access)?;
            e.reg_mr(pd_handle, addr, length, hca_va, access)
                .map(|m| m.key)
        });
        let key = match r {
            Ok(k) => k,
            Err(e) => return null(err(e)),
        };
        let id = st.driver.with(|e, _| e.mr_by_key(key).map(|(id, _)| id));
        let Some(id) = id else {
            return null(libc::EIO);
        };
        let mut vmr = verbs_mr::ZEROED;
        vmr.ibv_mr.lkey = key;
        vmr.ibv_mr.rkey = key;
        vmr.access = access as c_int;
        Box::into_raw(Box::new(SoftMr { vmr, id })) as *mut ibv_mr
    })
}

/// EFAULT unless the memory of an MR with `access` rights is mapped, and
/// writable where any right writes (the kernel's `ib_access_writable`);
/// the error of the check itself where it could not be made (EMFILE).
fn check_mapped(addr: u64, length: u64, access: u32) -> Result<(), VerbsError> {
    let writes = access
        & (IBV_ACCESS_LOCAL_WRITE
            | IBV_ACCESS_REMOTE_WRITE
            | IBV_ACCESS_REMOTE_ATOMIC
            | IBV_ACCESS_MW_BIND)
        != 0;
    crate::mapping::check(addr, length, writes).map_err(|errno| match errno {
        libc::EFAULT => VerbsError {
            kind: softverbs_engine::ErrorKind::BadAddress,
            reason: "MR memory is not mapped with the rights asked",
        },
        errno => VerbsError {
            kind: softverbs_engine::ErrorKind::Chosen(errno),
            reason: "the MR's memory could not be checked (/proc/thread-self/maps)",
        },
    })
}

/// `dereg_mr`.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn dereg_mr(vmr: *mut verbs_mr) -> c_int {
    verb(|| {
        // SAFETY: `vmr` is one of our MRs; libibverbs set its context.
        let (st, id) = unsafe { (state((*vmr).ibv_mr.context), (*(vmr as *mut SoftMr)).id) };
        match st.driver.with(|e, _| e.dereg_mr(id)) {
            Ok(()) => {
                // SAFETY: allocated by reg_mr, freed once.
                drop(unsafe { Box::from_raw(vmr as *mut SoftMr) });
                0
            }
            Err(e) => err(e),
        }
    })
}

/// `rereg_mr`: libibverbs has checked the flags and updates the public
/// `ibv_mr` fields itself on success; returns 0 or an errno (also set).
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn rereg_mr(
    vmr: *mut verbs_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    verb(|| {
        // SAFETY: `vmr` is one of our MRs; a new PD, if any, is ours too.
        let (st, id) = unsafe { (state((*vmr).ibv_mr.context), (*(vmr as *mut SoftMr)).id) };
        let flags = flags as u32;
        // libibverbs passes a NULL PD on; the kernel's providers would
        // read through it.
        if flags & IBV_REREG_MR_CHANGE_PD != 0 && pd.is_null() {
            set_errno(libc::EINVAL);
            return libc::EINVAL;
        }
        let change = ReregMr {
            // SAFETY: with CHANGE_PD, `pd` is not NULL (checked above) and,
            // by the C contract, a PD of ours.
            pd: (flags & IBV_REREG_MR_CHANGE_PD != 0).then(|| unsafe { pd_id(pd) }),
            range: (flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0)
                .then_some((addr as u64, length as u64)),
            access: (flags & IBV_REREG_MR_CHANGE_ACCESS != 0).then_some(access as u32),
        };
        // The kernel pins the new translation with the new rights.
        let mapped = |e: &softverbs_engine::Engine| match e.mr(id) {
            Some(old) => {
                let (a, l) = change.range.unwrap_or((old.addr, old.length));
                check_mapped(a, l, change.access.unwrap_or(old.access.bits()))
            }
            None => Ok(()), // rereg_mr refuses an unknown MR itself
        };
        match st
            .driver
            .with(|e, _| mapped(e).and_then(|()| e.rereg_mr(id, &change)))
        {
            Ok(()) => {
                if let Some(a) = change.access {
                    // SAFETY: our MR.
                    unsafe { (*vmr).access = a as c_int };
                }
                0
            }
            Err(e) => {
                set_errno(e.errno());
                e.errno()
            }
        }
    })
}

/// `create_cq`: libibverbs fills in context, channel and cq_context.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: as the caller's contract.
    unsafe { create_cq_locked(context, cqe, channel, comp_vector, true) }
}

/// `create_cq`, with the CQ's polling lock or, for a CQ the application
/// polls from one thread only, without it.
///
/// # Safety
/// As [`create_cq`].
pub unsafe fn create_cq_locked(
    context: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
    locked: bool,
) -> *mut ibv_cq {
    guard(std::ptr::null_mut(), || {
        // SAFETY: our context.
        let st = unsafe { state(context) };
        if cqe < 0 || comp_vector < 0 {
            return null(libc::EINVAL);
        }
        if !room_for(0) {
            return null(libc::ENOMEM);
        }
        let writer = match crate::preload::channel_writer(&st, channel) {
            Ok(w) => w,
            Err(errno) => return null(errno),
        };
        let created = st.driver.with(|e, _| {
            let (id, actual) = e.create_cq(cqe as u32, comp_vector as u32)?;
            Ok((id, actual, e.cq_ring(id)?))
        });
        let (id, actual, ring) = match created {
            Ok(r) => r,
            Err(e) => return null(err(e)),
        };
        let mut vcq = verbs_cq::ZEROED;
        vcq.u.cq.cqe = actual as c_int;
        let ptr = Box::into_raw(Box::new(SoftCq {
            vcq,
            id,
            polled: CallLock::new(VecDeque::new(), locked),
            ring,
        }));
        st.events.add_cq(id, ptr as usize, writer);
        ptr as *mut ibv_cq
    })
}

/// `destroy_cq`.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    verb(|| {
        // SAFETY: one of our CQs.
        let (st, id) = unsafe { (state((*cq).context), cq_id(cq)) };
        match st.driver.with(|e, _| e.destroy_cq(id)) {
            Ok(()) => {
                let delivered = st.events.remove_cq(id);
                // SAFETY: our CQ, gone from the engine, not yet freed.
                unsafe { crate::event_acks::wait_cq_acks(cq, delivered) };
                // SAFETY: allocated by create_cq, freed once.
                drop(unsafe { Box::from_raw(cq as *mut SoftCq) });
                0
            }
            Err(e) => err(e),
        }
    })
}

/// `resize_cq`.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    verb(|| {
        // SAFETY: one of our CQs.
        let (st, id) = unsafe { (state((*cq).context), cq_id(cq)) };
        if cqe < 0 {
            return libc::EINVAL;
        }
        match st.driver.with(|e, _| e.resize_cq(id, cqe as u32)) {
            Ok(actual) => {
                // SAFETY: one of our CQs.
                unsafe { (*cq).cqe = actual as c_int };
                0
            }
            Err(e) => err(e),
        }
    })
}

/// `poll_cq`: returns how many completions were written, or -1.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    guard(-1, || {
        // SAFETY: one of our CQs.
        let (st, id, polled, ring) =
            unsafe { (state((*cq).context), cq_id(cq), cq_polled(cq), cq_ring(cq)) };
        let max = num_entries.max(0) as usize;
        // Each completion goes straight into the caller's array: slot i
        // for the i-th, i < max <= num_entries, since each source hands
        // at most what is left. `write` forms no reference to the array.
        let put = |i: usize, w: &WorkCompletion| {
            // SAFETY: the caller provides `num_entries` ibv_wc slots and
            // i < num_entries (above).
            unsafe { wc.add(i).write(wc_to_c(w)) };
        };
        // A forked child's copy is its parent's: EIO before any lock.
        st.driver.ensure_this_process();
        // Threads polling one CQ take its completions one batch at a time.
        polled.with(|polled| {
            let earlier = max.min(polled.len());
            for (i, w) in polled.drain(..earlier).enumerate() {
                put(i, &w);
            }
            if earlier == max {
                return earlier as c_int;
            }
            // The ring first, without the driver; the driver only if the
            // ring is empty and no other thread holds it (its completions
            // land in the ring, for the next poll).
            let mut next = earlier;
            let polled = st.driver.poll_cq(id, ring, max - earlier, |w| {
                put(next, &w);
                next += 1;
            });
            match polled {
                Ok(_) => next as c_int,
                Err(_) => -1,
            }
        })
    })
}

/// `req_notify_cq`.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    verb(|| {
        // SAFETY: one of our CQs.
        let (st, id) = unsafe { (state((*cq).context), cq_id(cq)) };
        let armed = st.driver.arm(|e| e.req_notify_cq(id, solicited_only != 0));
        // Its thread may sleep for the event now: only the progress thread
        // can then take in what completes its work.
        st.driver.armed_for_event();
        armed.map_or_else(err, |()| 0)
    })
}

/// The engine handle of `ah` when it is an AH of `context`; None for an
/// AH of another context: another softverbs context's handle would name
/// an AH of this one (another device's AH is no `SoftAh` at all), where
/// rxe fails the WR (the AH's PD is not the QP's).
///
/// # Safety
/// `ah` is a live AH made through libibverbs, which sets its `context`.
pub unsafe fn ah_in(ah: *mut ibv_ah, context: *mut ibv_context) -> Option<AhId> {
    // SAFETY: a live AH's header, written by libibverbs; only an AH of
    // `context`, one of ours, is read as a SoftAh.
    unsafe { ((*ah).context == context).then(|| (*(ah as *mut SoftAh)).id) }
}

/// `create_ah`.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    guard(std::ptr::null_mut(), || {
        // SAFETY: one of our PDs and a caller-provided attr.
        let (st, pd_handle, a) = unsafe { (state((*pd).context), pd_id(pd), ah_from_c(&*attr)) };
        if !room_for(0) {
            return null(libc::ENOMEM);
        }
        match st.driver.with(|e, _| e.create_ah(pd_handle, &a)) {
            Ok(id) => Box::into_raw(Box::new(SoftAh {
                ah: ibv_ah::ZEROED,
                id,
            })) as *mut ibv_ah,
            Err(e) => null(err(e)),
        }
    })
}

/// `destroy_ah`.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn destroy_ah(ah: *mut ibv_ah) -> c_int {
    verb(|| {
        // SAFETY: one of our AHs.
        let (st, id) = unsafe { (state((*ah).context), (*(ah as *mut SoftAh)).id) };
        match st.driver.with(|e, _| e.destroy_ah(id)) {
            Ok(()) => {
                // SAFETY: allocated by create_ah, freed once.
                drop(unsafe { Box::from_raw(ah as *mut SoftAh) });
                0
            }
            Err(e) => err(e),
        }
    })
}
