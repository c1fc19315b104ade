//! `ibv_create_cq_ex` and its polling API: `ibv_start_poll` takes the
//! oldest completion and exposes its status and wr_id in the `ibv_cq_ex`,
//! `ibv_next_poll` moves on, the `ibv_wc_read_*` functions read the
//! current one. Completions are taken from the engine in small batches;
//! those not consumed by `ibv_end_poll` stay for the next poll.
//!
//! `ibv_start_poll` .. `ibv_end_poll` is a critical section per CQ (the
//! `wr_id` and `status` it exposes belong to one thread until its next
//! call), held with the CQ's lock, which `ibv_poll_cq` takes too; a CQ
//! created with `IBV_CREATE_CQ_ATTR_SINGLE_THREADED` has none.

use crate::call_lock::CallLock;
use crate::context::state;
use crate::ffi::*;
use crate::guard::guard;
use crate::verbs_basic::{cq_id, cq_polled, cq_ring, create_cq_locked, null};
use softverbs_engine::WorkCompletion;
use std::collections::VecDeque;
use std::os::raw::{c_int, c_uint};
use std::ptr::addr_of_mut;

/// Completions taken from the engine at a time.
const BATCH: usize = 64;

/// The `wc_flags` softverbs reports (no timestamps, VLANs, flow tags or
/// tag matching).
const SUPPORTED_WC_FLAGS: u64 = IBV_WC_STANDARD_FLAGS;

/// `create_cq_ex`.
///
/// # Safety
/// Called through libibverbs with a live context and a caller-owned attr.
pub unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    guard(std::ptr::null_mut(), || {
        // SAFETY: a caller-provided attr, read as a copy.
        let a = unsafe { attr.read() };
        let flags = if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 {
            a.flags
        } else {
            0
        };
        let flags_ok = flags & !IBV_CREATE_CQ_ATTR_SINGLE_THREADED == 0;
        let mask_ok = a.comp_mask & !IBV_CQ_INIT_ATTR_MASK_FLAGS == 0;
        if a.wc_flags & !SUPPORTED_WC_FLAGS != 0 || !flags_ok || !mask_ok {
            return null(libc::EOPNOTSUPP);
        }
        let Ok(cqe) = c_int::try_from(a.cqe) else {
            return null(libc::EINVAL);
        };
        // A single-threaded CQ is polled without its lock, as the flag
        // allows.
        let locked = flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED == 0;
        // SAFETY: forwarding to create_cq with the same context.
        let cq =
            unsafe { create_cq_locked(context, cqe, a.channel, a.comp_vector as c_int, locked) };
        if !cq.is_null() {
            // SAFETY: a CQ create_cq just made, not yet handed out.
            unsafe { install(cq as *mut ibv_cq_ex) };
        }
        cq as *mut ibv_cq_ex
    })
}

/// Fills in the polling functions of a new extended CQ.
///
/// # Safety
/// `x` is a CQ `create_cq` just made, not yet seen by anyone else.
unsafe fn install(x: *mut ibv_cq_ex) {
    // SAFETY: per the contract; the cq_ex member of the union extends the
    // ibv_cq member, which stays as create_cq set it. Fields are written
    // one by one through raw pointers.
    unsafe {
        addr_of_mut!((*x).start_poll).write(Some(start_poll));
        addr_of_mut!((*x).next_poll).write(Some(next_poll));
        addr_of_mut!((*x).end_poll).write(Some(end_poll));
        addr_of_mut!((*x).read_opcode).write(Some(read_opcode));
        addr_of_mut!((*x).read_vendor_err).write(Some(read_vendor_err));
        addr_of_mut!((*x).read_byte_len).write(Some(read_byte_len));
        addr_of_mut!((*x).read_imm_data).write(Some(read_imm_data));
        addr_of_mut!((*x).read_qp_num).write(Some(read_qp_num));
        addr_of_mut!((*x).read_src_qp).write(Some(read_src_qp));
        addr_of_mut!((*x).read_wc_flags).write(Some(read_wc_flags));
        addr_of_mut!((*x).read_slid).write(Some(read_slid));
        addr_of_mut!((*x).read_sl).write(Some(read_sl));
        addr_of_mut!((*x).read_dlid_path_bits).write(Some(read_dlid_path_bits));
    }
}

/// The CQ's polled completions and lock.
///
/// # Safety
/// `cq` is an extended CQ made by `create_cq_ex`.
unsafe fn polled<'a>(cq: *mut ibv_cq_ex) -> &'a CallLock<VecDeque<WorkCompletion>> {
    // SAFETY: ibv_cq_ex sits at offset 0 of the SoftCq (in verbs_cq's union).
    unsafe { cq_polled(cq as *mut ibv_cq) }
}

/// Makes the oldest completion current; ENOENT if there is none.
///
/// # Safety
/// `cq` is one of our extended CQs, and this thread is inside its polling
/// section.
unsafe fn advance(cq: *mut ibv_cq_ex, first: bool) -> c_int {
    // SAFETY: inside the section, so the queue is this thread's.
    let q = unsafe { &mut *polled(cq).data() };
    if !first {
        q.pop_front();
    }
    if q.is_empty() {
        // SAFETY: our CQ (plain field reads); its context is ours.
        let (st, id, ring) = unsafe {
            let plain = cq as *mut ibv_cq;
            (state((*cq).context), cq_id(plain), cq_ring(plain))
        };
        // Into the CQ's own queue, whose room stays once grown: no
        // allocation in the steady state. Completions already there are
        // taken without the driver lock, and the driver is skipped while
        // another thread holds it (as `ibv_poll_cq` does).
        if st
            .driver
            .poll_cq(id, ring, BATCH, |w| q.push_back(w))
            .is_err()
        {
            return libc::EINVAL;
        }
    }
    let Some(wc) = q.front() else {
        return libc::ENOENT;
    };
    // SAFETY: the fields the application reads until its next call; this
    // thread owns them inside the section. Written through raw pointers.
    unsafe {
        addr_of_mut!((*cq).status).write(wc.status as u32);
        addr_of_mut!((*cq).wr_id).write(wc.wr_id);
    }
    0
}

/// `ibv_start_poll` enters the CQ's polling section, which `ibv_end_poll`
/// leaves; when it fails the application does not call `ibv_end_poll`
/// (ibv_create_cq_ex(3)), so it leaves the section itself.
pub(crate) unsafe extern "C" fn start_poll(
    cq: *mut ibv_cq_ex,
    _attr: *mut ibv_poll_cq_attr,
) -> c_int {
    // SAFETY: libibverbs' inline ibv_start_poll passes one of our CQs.
    let lock = unsafe { polled(cq) };
    lock.enter();
    // SAFETY: inside the section just entered.
    let rc = guard(libc::EIO, || unsafe { advance(cq, true) });
    if rc != 0 {
        // SAFETY: entered above; no end_poll will follow a failed start.
        unsafe { lock.leave() };
    }
    rc
}

pub(crate) unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: one of our CQs, inside the section start_poll entered (the
    // polling API's contract).
    guard(libc::EIO, || unsafe { advance(cq, false) })
}

/// Consumes the current completion (the rest of the batch stays queued)
/// and leaves the polling section.
unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    // SAFETY: one of our CQs, inside the section start_poll entered.
    let lock = unsafe { polled(cq) };
    guard((), || {
        // SAFETY: inside the section.
        unsafe { (*lock.data()).pop_front() };
    });
    // SAFETY: start_poll entered and succeeded, so this thread holds it.
    unsafe { lock.leave() };
}

/// The current completion (between a successful start/next_poll and
/// end_poll).
///
/// # Safety
/// `cq` is one of our extended CQs, and this thread is inside its polling
/// section.
unsafe fn cur(cq: *mut ibv_cq_ex) -> WorkCompletion {
    // SAFETY: as the caller's contract; the read_* functions are only
    // valid while a completion is current.
    let q = unsafe { &*polled(cq).data() };
    *q.front()
        .expect("ibv_wc_read_* called with no current completion")
}

macro_rules! reader {
    ($name:ident -> $ty:ty, $default:expr, |$w:ident| $value:expr) => {
        unsafe extern "C" fn $name(cq: *mut ibv_cq_ex) -> $ty {
            guard($default, || {
                // SAFETY: libibverbs' inline ibv_wc_read_* pass one of our
                // CQs, inside the polling section.
                let $w = unsafe { cur(cq) };
                $value
            })
        }
    };
}

reader!(read_opcode -> u32, 0, |w| w.opcode as u32);
reader!(read_vendor_err -> u32, 0, |w| w.vendor_err);
reader!(read_byte_len -> u32, 0, |w| w.byte_len);
reader!(read_imm_data -> u32, 0, |w| crate::convert::wc_imm_or_rkey(&w));
reader!(read_qp_num -> u32, 0, |w| w.qp_num);
reader!(read_src_qp -> u32, 0, |w| w.src_qp);
reader!(read_wc_flags -> c_uint, 0, |w| w.wc_flags);
reader!(read_slid -> u32, 0, |_w| 0);
reader!(read_sl -> u8, 0, |w| w.sl);
reader!(read_dlid_path_bits -> u8, 0, |_w| 0);
