//! `ibv_create_cq_ex` and its polling API: `ibv_start_poll` takes the
//! oldest completion and exposes its status and wr_id in the `ibv_cq_ex`,
//! `ibv_next_poll` moves on, the `ibv_wc_read_*` functions read the
//! current one. Completions are taken from the engine in small batches;
//! those not consumed by `ibv_end_poll` stay for the next poll.

use crate::context::state;
use crate::ffi::*;
use crate::guard::guard;
use crate::verbs_basic::{create_cq, null, SoftCq};
use softverbs_engine::WorkCompletion;
use std::os::raw::{c_int, c_uint};

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
        // SAFETY: a caller-provided attr.
        let a = unsafe { &*attr };
        let flags_ok = a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS == 0
            || a.flags & !IBV_CREATE_CQ_ATTR_SINGLE_THREADED == 0;
        let mask_ok = a.comp_mask & !IBV_CQ_INIT_ATTR_MASK_FLAGS == 0;
        if a.wc_flags & !SUPPORTED_WC_FLAGS != 0 || !flags_ok || !mask_ok {
            return null(libc::EOPNOTSUPP);
        }
        let Ok(cqe) = c_int::try_from(a.cqe) else {
            return null(libc::EINVAL);
        };
        // SAFETY: forwarding to create_cq with the same context.
        let cq = unsafe { create_cq(context, cqe, a.channel, a.comp_vector as c_int) };
        if !cq.is_null() {
            // SAFETY: a CQ create_cq just made is a SoftCq.
            install(unsafe { &mut *(cq as *mut SoftCq) });
        }
        cq as *mut ibv_cq_ex
    })
}

fn install(cq: &mut SoftCq) {
    // SAFETY: the cq_ex member of the union extends the ibv_cq member,
    // which stays as create_cq set it.
    let x = unsafe { &mut cq.vcq.u.cq_ex };
    x.start_poll = Some(start_poll);
    x.next_poll = Some(next_poll);
    x.end_poll = Some(end_poll);
    x.read_opcode = Some(read_opcode);
    x.read_vendor_err = Some(read_vendor_err);
    x.read_byte_len = Some(read_byte_len);
    x.read_imm_data = Some(read_imm_data);
    x.read_qp_num = Some(read_qp_num);
    x.read_src_qp = Some(read_src_qp);
    x.read_wc_flags = Some(read_wc_flags);
    x.read_slid = Some(read_slid);
    x.read_sl = Some(read_sl);
    x.read_dlid_path_bits = Some(read_dlid_path_bits);
}

/// # Safety
/// `cq` is an extended CQ made by `create_cq_ex`, polled by one thread at
/// a time (the `ibv_start_poll` contract).
unsafe fn soft<'a>(cq: *mut ibv_cq_ex) -> &'a mut SoftCq {
    // SAFETY: ibv_cq_ex sits at offset 0 of the SoftCq (in verbs_cq's union).
    unsafe { &mut *(cq as *mut SoftCq) }
}

/// Makes the oldest completion current; ENOENT if there is none.
///
/// # Safety
/// As [`soft`].
unsafe fn advance(cq: *mut ibv_cq_ex, first: bool) -> c_int {
    // SAFETY: as the caller's contract.
    let s = unsafe { soft(cq) };
    if !first {
        s.polled.pop_front();
    }
    if s.polled.is_empty() {
        // SAFETY: our CQ; its context is ours.
        let st = unsafe { state((*cq).context) };
        // Allocates only when there are completions: a CQ spun on while
        // empty costs no allocation.
        let mut got = Vec::new();
        if st
            .driver
            .with(|e, _| e.poll_cq(s.id, BATCH, &mut got))
            .is_err()
        {
            return libc::EINVAL;
        }
        s.polled.extend(got);
    }
    let Some(wc) = s.polled.front() else {
        return libc::ENOENT;
    };
    // SAFETY: our CQ.
    unsafe {
        (*cq).status = wc.status as u32;
        (*cq).wr_id = wc.wr_id;
    }
    0
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, _attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: libibverbs' inline ibv_start_poll passes one of our CQs.
    guard(libc::EIO, || unsafe { advance(cq, true) })
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: as start_poll.
    guard(libc::EIO, || unsafe { advance(cq, false) })
}

/// Consumes the current completion; the rest of the batch stays queued.
unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    // SAFETY: as start_poll.
    guard((), || {
        unsafe { soft(cq) }.polled.pop_front();
    })
}

/// The current completion (between a successful start/next_poll and
/// end_poll).
///
/// # Safety
/// As [`soft`].
unsafe fn cur(cq: *mut ibv_cq_ex) -> WorkCompletion {
    // SAFETY: as the caller's contract; the read_* functions are only
    // valid while a completion is current.
    let s = unsafe { soft(cq) };
    *s.polled
        .front()
        .expect("ibv_wc_read_* called with no current completion")
}

macro_rules! reader {
    ($name:ident -> $ty:ty, $default:expr, |$w:ident| $value:expr) => {
        unsafe extern "C" fn $name(cq: *mut ibv_cq_ex) -> $ty {
            // SAFETY: libibverbs' inline ibv_wc_read_* pass one of our CQs.
            guard($default, || {
                let $w = unsafe { cur(cq) };
                $value
            })
        }
    };
}

reader!(read_opcode -> u32, 0, |w| w.opcode as u32);
reader!(read_vendor_err -> u32, 0, |w| w.vendor_err);
reader!(read_byte_len -> u32, 0, |w| w.byte_len);
reader!(read_imm_data -> u32, 0, |w| w.imm_data_or_inv_rkey);
reader!(read_qp_num -> u32, 0, |w| w.qp_num);
reader!(read_src_qp -> u32, 0, |w| w.src_qp);
reader!(read_wc_flags -> c_uint, 0, |w| w.wc_flags);
reader!(read_slid -> u32, 0, |_w| 0);
reader!(read_sl -> u8, 0, |_w| 0);
reader!(read_dlid_path_bits -> u8, 0, |_w| 0);
