//! QP and SRQ verbs and posting work requests.

use crate::context::state;
use crate::convert::{cap_from_c, cap_to_c, qp_attr_from_c, qp_attr_to_c, wr_imm_or_rkey};
use crate::ffi::*;
use crate::guard::{guard, verb};
use crate::memory_room::room_for;
use crate::verbs_basic::{ah_in, cq_id, err, null, pd_id};
use softverbs_engine::{
    send_flags, AtomicTarget, Engine, ErrorKind, InlineData, QpAttrMask, QpCap, QpId, QpInitAttr,
    RdmaTarget, RecvWr, SendWr, Sge, SgeList, SrqAttr, SrqAttrMask, SrqId, UdTarget, VerbsError,
    VerbsResult, QPN_EXHAUSTED,
};
use std::os::raw::c_int;

/// A QP.
#[repr(C)]
#[derive(Debug)]
pub struct SoftQp {
    /// Must be first.
    pub vqp: verbs_qp,
    /// Engine handle.
    pub id: QpId,
    /// WRs built with the `ibv_wr_*` API, posted by `ibv_wr_complete`.
    pub builder: crate::qp_ex::WrBuilder,
}

/// An SRQ.
#[repr(C)]
#[derive(Debug)]
pub struct SoftSrq {
    /// Must be first.
    pub vsrq: verbs_srq,
    /// Engine handle.
    pub id: SrqId,
}

/// # Safety
/// `qp` is a live QP of one of our contexts.
pub unsafe fn qp_id(qp: *mut ibv_qp) -> QpId {
    // SAFETY: our QPs are SoftQp, whose first field holds the ibv_qp.
    unsafe { (*(qp as *mut SoftQp)).id }
}

/// # Safety
/// `srq` is a live SRQ of one of our contexts.
unsafe fn srq_id(srq: *mut ibv_srq) -> SrqId {
    // SAFETY: our SRQs are SoftSrq, whose first field holds the ibv_srq.
    unsafe { (*(srq as *mut SoftSrq)).id }
}

/// `create_qp`: libibverbs initialises nothing, so every public field of
/// the `ibv_qp` is set here; the actual caps are written back.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    guard(std::ptr::null_mut(), || {
        // SAFETY: our PD and a caller-provided attr, read as a copy (the
        // application owns it; only `cap` is written back, field-wise).
        let (context, pd_handle, a) = unsafe { ((*pd).context, pd_id(pd), attr.read()) };
        // SAFETY: our context.
        let st = unsafe { state(context) };
        // A raw packet QP is a privilege before anything else (the
        // kernel's `ib_uverbs` create_qp checks CAP_NET_RAW first).
        if a.qp_type == RAW_PACKET && !has_net_raw() {
            return null(libc::EPERM);
        }
        // A type softverbs does not offer is that before its CQs are
        // looked at (an XRC_SEND QP has no receive CQ).
        if softverbs_engine::QpType::is_other_type(a.qp_type) {
            return null(libc::EOPNOTSUPP);
        }
        if a.send_cq.is_null() || a.recv_cq.is_null() {
            return null(libc::EINVAL);
        }
        if !room_for(0) {
            return null(libc::ENOMEM);
        }
        // SAFETY: CQs and SRQ given to our create_qp are ours.
        let init = unsafe {
            QpInitAttr {
                send_cq: cq_id(a.send_cq),
                recv_cq: cq_id(a.recv_cq),
                srq: (!a.srq.is_null()).then(|| srq_id(a.srq)),
                cap: cap_from_c(&a.cap),
                qp_type: a.qp_type,
                sq_sig_all: a.sq_sig_all != 0,
            }
        };
        let created = match create_with_slots(&st, pd_handle, &init) {
            Ok(c) => c,
            Err(e) => return null(err(e)),
        };
        // SAFETY: the caller's attr, its `cap` field written in place.
        unsafe { std::ptr::addr_of_mut!((*attr).cap).write(cap_to_c(&created.cap)) };
        let mut vqp = verbs_qp::ZEROED;
        // SAFETY: writing the ibv_qp member of the union.
        let q = unsafe { &mut vqp.u.qp };
        q.context = context;
        q.qp_context = a.qp_context;
        q.pd = pd;
        q.send_cq = a.send_cq;
        q.recv_cq = a.recv_cq;
        q.srq = a.srq;
        q.qp_num = created.qp_num;
        q.state = IBV_QPS_RESET;
        q.qp_type = a.qp_type;
        let ptr = Box::into_raw(Box::new(SoftQp {
            vqp,
            id: created.id,
            builder: Default::default(),
        }));
        st.events.add_qp(created.id, ptr as usize);
        ptr as *mut ibv_qp
    })
}

/// Creates a QP, claiming another slot of QP numbers when this context's
/// are all in use.
fn create_with_slots(
    st: &crate::context::ContextState,
    pd: softverbs_engine::PdId,
    init: &QpInitAttr,
) -> VerbsResult<softverbs_engine::QpCreated> {
    match st.driver.with(|e, _| e.create_qp(pd, init)) {
        Err(e) if e.reason == QPN_EXHAUSTED && st.driver.add_slot().is_ok() => {
            st.driver.with(|e, _| e.create_qp(pd, init))
        }
        other => other,
    }
}

/// `modify_qp`.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    verb(|| {
        // SAFETY: our QP and a caller-provided attr.
        let (st, id, a) = unsafe { (state((*qp).context), qp_id(qp), qp_attr_from_c(&*attr)) };
        let mask = QpAttrMask::from_bits_retain(mask as u32);
        if mask.contains(QpAttrMask::QKEY) && a.qkey & CONTROLLED_QKEY != 0 && !has_net_raw() {
            return libc::EPERM;
        }
        st.driver
            .with(|e, _| e.modify_qp(id, &a, mask))
            .map_or_else(err, |()| 0)
    })
}

/// `IBV_QPT_RAW_PACKET`.
const RAW_PACKET: u32 = 8;

/// The Q_Key bit that makes a controlled (privileged) Q_Key, such as
/// the GSI's (IBTA 10.2.5).
const CONTROLLED_QKEY: u32 = 0x8000_0000;

/// Whether this thread may set a controlled Q_Key (as the kernel's
/// `ib_uverbs` decides since Linux 6.5) or create a raw packet QP: with
/// CAP_NET_RAW (for the Q_Key the kernel also allows it to everyone when
/// the host's `rdma system set privileged-qkey on`, which has no
/// counterpart here).
fn has_net_raw() -> bool {
    rustix::thread::capabilities(None)
        .is_ok_and(|c| c.effective.contains(rustix::thread::CapabilitySet::NET_RAW))
}

/// `query_qp`: every attribute, whatever the mask asks.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    verb(|| {
        // SAFETY: our QP.
        let (st, id) = unsafe { (state((*qp).context), qp_id(qp)) };
        let (a, init) = match st.driver.with(|e, _| e.query_qp(id)) {
            Ok(r) => r,
            Err(e) => return err(e),
        };
        // SAFETY: caller-provided outputs; the QP's public fields are ours.
        unsafe {
            attr.write(qp_attr_to_c(&a));
            let mut i = init_attr.read();
            i.qp_context = (*qp).qp_context;
            i.send_cq = (*qp).send_cq;
            i.recv_cq = (*qp).recv_cq;
            i.srq = (*qp).srq;
            i.cap = cap_to_c(&init.cap);
            i.qp_type = init.qp_type;
            i.sq_sig_all = c_int::from(init.sq_sig_all);
            init_attr.write(i);
        }
        0
    })
}

/// `destroy_qp`.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    verb(|| {
        // SAFETY: our QP.
        let (st, id) = unsafe { (state((*qp).context), qp_id(qp)) };
        match st.driver.with(|e, _| e.destroy_qp(id)) {
            Ok(()) => {
                let delivered = st.events.remove_qp(id);
                // SAFETY: our QP, gone from the engine, not yet freed.
                unsafe { crate::event_acks::wait_qp_acks(qp, delivered) };
                // SAFETY: allocated by create_qp, freed once.
                drop(unsafe { Box::from_raw(qp as *mut SoftQp) });
                0
            }
            Err(e) => err(e),
        }
    })
}

/// EINVAL with a reason, for checks the provider makes before the engine
/// sees a WR.
const fn einval(reason: &'static str) -> VerbsError {
    VerbsError {
        kind: ErrorKind::InvalidArgument,
        reason,
    }
}

/// The SGEs of a WR. A count above `max_sge` (the queue's or the device's
/// limit) is refused before the application's array is read or anything
/// allocated: `num_sge` comes straight from the application.
///
/// # Safety
/// `sg_list` points to `num_sge` SGEs whenever `0 < num_sge <= max_sge`.
pub unsafe fn sges(sg_list: *const ibv_sge, num_sge: c_int, max_sge: u32) -> VerbsResult<SgeList> {
    let Ok(n) = u32::try_from(num_sge) else {
        return Err(einval("negative num_sge"));
    };
    if n > max_sge {
        return Err(einval("num_sge above the queue's max_sge"));
    }
    if n == 0 {
        return Ok(SgeList::new());
    }
    if sg_list.is_null() {
        return Err(einval("num_sge > 0 with a NULL sg_list"));
    }
    // SAFETY: per the caller's contract, and n <= max_sge bounds the read.
    let list = unsafe { std::slice::from_raw_parts(sg_list, n as usize) };
    // Beyond the few SGEs held in place the list allocates, fallibly: a
    // process short of memory gets ENOMEM, not an abort (`memory_room.rs`).
    let mut out = SgeList::new();
    out.try_reserve_exact(list.len()).map_err(|_| no_memory())?;
    out.extend(list.iter().map(|s| Sge {
        addr: s.addr,
        length: s.length,
        lkey: s.lkey,
    }));
    Ok(out)
}

/// ENOMEM for a WR whose copy found no memory.
pub(crate) const fn no_memory() -> VerbsError {
    VerbsError {
        kind: ErrorKind::NoMemory,
        reason: "no memory for the WR",
    }
}

/// The bytes of an inline WR, copied out of the application's buffers at
/// post time as IBV_SEND_INLINE promises (their keys are not checked).
/// Their total is checked against `max_inline` before anything is copied.
pub fn inline_bytes(sges: &[Sge], max_inline: u32) -> VerbsResult<InlineData> {
    let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
    if total > u64::from(max_inline) {
        return Err(einval("inline data above max_inline_data"));
    }
    let mut data = InlineData::new();
    data.try_reserve_exact(total as usize)
        .map_err(|_| no_memory())?;
    for s in sges {
        // SAFETY: an inline WR's SGEs name application memory readable now
        // (the verbs contract for IBV_SEND_INLINE; a bad pointer here
        // faults in the application's own thread, as with every provider
        // that copies inline data in user space), and their total is at
        // most max_inline_data.
        data.extend_from_slice(unsafe {
            std::slice::from_raw_parts(s.addr as *const u8, s.length as usize)
        });
    }
    Ok(data)
}

/// `post_send`: WRs are posted in order; the first refused one is
/// returned in `bad_wr` with its errno, the earlier ones stay posted.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    verb(|| {
        // SAFETY: the caller's out pointer, if any.
        if !unsafe { clear_bad_wr(bad_wr) } {
            return libc::EINVAL;
        }
        // SAFETY: our QP.
        let (st, id, context) = unsafe { (state((*qp).context), qp_id(qp), (*qp).context) };
        // SAFETY: our QP's public type field, written at its creation.
        let ud_context = (unsafe { (*qp).qp_type } == IBV_QPT_UD).then_some(context);
        st.driver.post_send_with(|e, _| {
            let cap = match e.qp_cap(id) {
                Ok(c) => c,
                Err(error) => return err(error),
            };
            let mut cur = wr;
            while !cur.is_null() {
                // SAFETY: a caller-provided WR list.
                let w = unsafe { &*cur };
                // SAFETY: the WR's SGE array, its count checked first;
                // a UD WR's AH is the application's live AH.
                let r = unsafe { post_one_send(e, id, w, cap, ud_context) };
                if let Err(error) = r {
                    // SAFETY: caller-provided out pointer.
                    unsafe { *bad_wr = cur };
                    return err(error);
                }
                cur = w.next;
            }
            0
        })
    })
}

/// Converts and posts one send WR.
///
/// # Safety
/// `w` is an application WR whose `sg_list` holds `num_sge` entries; on a
/// UD QP (`ud_context`, the QP's context) its AH is NULL or a live AH.
unsafe fn post_one_send(
    e: &mut Engine,
    id: QpId,
    w: &ibv_send_wr,
    cap: QpCap,
    ud_context: Option<*mut ibv_context>,
) -> VerbsResult<()> {
    // SAFETY: per the caller's contract. Inline WRs too are bounded by
    // max_send_sge (rxe and mlx5 check the count whatever the flags).
    let list = unsafe { sges(w.sg_list, w.num_sge, cap.max_send_sge) }?;
    let inline = if w.send_flags & send_flags::INLINE != 0 {
        inline_bytes(&list, cap.max_inline_data)?
    } else {
        InlineData::new()
    };
    // SAFETY: the WR's unions are read as the QP type means them.
    let sw = unsafe { send_wr(w, &list, &inline, ud_context) }?;
    e.post_send(id, &sw)
}

/// # Safety
/// On a UD QP (`ud_context`, the QP's context), `wr.ud.ah` must be NULL
/// or a live AH; on other QPs the `wr.ud` member is never read, since the
/// union then holds an RDMA or atomic target whose address is no pointer
/// of ours.
pub unsafe fn send_wr<'a>(
    w: &ibv_send_wr,
    list: &'a [Sge],
    inline: &'a [u8],
    ud_context: Option<*mut ibv_context>,
) -> VerbsResult<SendWr<'a>> {
    // SAFETY: plain-data unions; any bit pattern is a valid reading.
    let (rdma, atomic, imm) = unsafe { (w.wr.rdma, w.wr.atomic, w.u.imm_data) };
    let ud_target = match ud_context {
        // SAFETY: a UD WR's union member is `ud`.
        Some(context) => match unsafe { w.wr.ud } {
            ud if ud.ah.is_null() => None,
            ud => Some(UdTarget {
                // SAFETY: a live AH, per the contract.
                ah: unsafe { ah_in(ud.ah, context) }
                    .ok_or_else(|| einval("the AH is not of the QP's context"))?,
                remote_qpn: ud.remote_qpn,
                remote_qkey: ud.remote_qkey,
            }),
        },
        None => None,
    };
    Ok(SendWr {
        wr_id: w.wr_id,
        opcode: w.opcode,
        send_flags: w.send_flags,
        sg_list: list,
        inline_data: inline,
        imm_data_or_inv_rkey: wr_imm_or_rkey(w.opcode, imm),
        rdma: RdmaTarget {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        atomic: AtomicTarget {
            remote_addr: atomic.remote_addr,
            compare_add: atomic.compare_add,
            swap: atomic.swap,
            rkey: atomic.rkey,
        },
        ud: ud_target,
    })
}

/// `post_recv`.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    verb(|| {
        // SAFETY: our QP.
        let (st, id) = unsafe { (state((*qp).context), qp_id(qp)) };
        st.driver.post_recv_with(|e, _| {
            // The device's SGE limit bounds the read; the engine checks the
            // QP's own after finding a full queue, as rxe and mlx5 do.
            let max_sge = e.config().limits.max_sge;
            post_recv_list(wr, bad_wr, max_sge, |rw| e.post_recv(id, rw))
        })
    })
}

/// A post verb's `bad_wr` out pointer: EINVAL (false) when it is NULL,
/// as rxe answers; else set to NULL until a WR fails, as rxe does, so
/// that a caller (or the trace) never reads a stale value.
///
/// # Safety
/// `bad_wr` is NULL or points to a writable pointer (the verbs contract).
unsafe fn clear_bad_wr<W>(bad_wr: *mut *mut W) -> bool {
    if bad_wr.is_null() {
        return false;
    }
    // SAFETY: per the contract.
    unsafe { *bad_wr = std::ptr::null_mut() };
    true
}

/// Posts a receive WR list through `post`, reporting the first failure.
fn post_recv_list(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    max_sge: u32,
    mut post: impl FnMut(&RecvWr<'_>) -> VerbsResult<()>,
) -> c_int {
    // SAFETY: the caller's out pointer, if any.
    if !unsafe { clear_bad_wr(bad_wr) } {
        return libc::EINVAL;
    }
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: a caller-provided WR list.
        let w = unsafe { &*cur };
        // SAFETY: its SGE array, its count checked against max_sge first.
        let r = unsafe { sges(w.sg_list, w.num_sge, max_sge) }.and_then(|list| {
            post(&RecvWr {
                wr_id: w.wr_id,
                sg_list: &list,
            })
        });
        if let Err(error) = r {
            // SAFETY: caller-provided out pointer.
            unsafe { *bad_wr = cur };
            return err(error);
        }
        cur = w.next;
    }
    0
}

/// `create_srq`: writes the actual attributes back.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    guard(std::ptr::null_mut(), || {
        // SAFETY: our PD and a caller-provided attr, read as a copy.
        let (st, pd_handle, a) = unsafe { (state((*pd).context), pd_id(pd), attr.read()) };
        let req = SrqAttr {
            max_wr: a.attr.max_wr,
            max_sge: a.attr.max_sge,
            srq_limit: a.attr.srq_limit,
        };
        if !room_for(0) {
            return null(libc::ENOMEM);
        }
        let (id, actual) = match st.driver.with(|e, _| e.create_srq(pd_handle, &req)) {
            Ok(r) => r,
            Err(e) => return null(err(e)),
        };
        let out = ibv_srq_attr {
            max_wr: actual.max_wr,
            max_sge: actual.max_sge,
            srq_limit: actual.srq_limit,
        };
        // SAFETY: the caller's attr, its `attr` field written in place.
        unsafe { std::ptr::addr_of_mut!((*attr).attr).write(out) };
        let ptr = Box::into_raw(Box::new(SoftSrq {
            vsrq: verbs_srq::ZEROED,
            id,
        }));
        st.events.add_srq(id, ptr as usize);
        ptr as *mut ibv_srq
    })
}

/// `modify_srq`.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    verb(|| {
        // SAFETY: our SRQ and a caller-provided attr.
        let (st, id, a) = unsafe { (state((*srq).context), srq_id(srq), *attr) };
        let req = SrqAttr {
            max_wr: a.max_wr,
            max_sge: a.max_sge,
            srq_limit: a.srq_limit,
        };
        let mask = SrqAttrMask::from_bits_retain(mask as u32);
        st.driver
            .with(|e, _| e.modify_srq(id, &req, mask))
            .map_or_else(err, |()| 0)
    })
}

/// `query_srq`.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    verb(|| {
        // SAFETY: our SRQ.
        let (st, id) = unsafe { (state((*srq).context), srq_id(srq)) };
        match st.driver.with(|e, _| e.query_srq(id)) {
            Ok(a) => {
                // SAFETY: caller-provided output.
                unsafe {
                    *attr = ibv_srq_attr {
                        max_wr: a.max_wr,
                        max_sge: a.max_sge,
                        srq_limit: a.srq_limit,
                    }
                };
                0
            }
            Err(e) => err(e),
        }
    })
}

/// `destroy_srq`.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn destroy_srq(srq: *mut ibv_srq) -> c_int {
    verb(|| {
        // SAFETY: our SRQ.
        let (st, id) = unsafe { (state((*srq).context), srq_id(srq)) };
        match st.driver.with(|e, _| e.destroy_srq(id)) {
            Ok(()) => {
                let delivered = st.events.remove_srq(id);
                // SAFETY: our SRQ, gone from the engine, not yet freed.
                unsafe { crate::event_acks::wait_srq_acks(srq, delivered) };
                // SAFETY: allocated by create_srq, freed once.
                drop(unsafe { Box::from_raw(srq as *mut SoftSrq) });
                0
            }
            Err(e) => err(e),
        }
    })
}

/// `post_srq_recv`.
///
/// # Safety
/// Called through libibverbs with the pointers its C contract promises
/// (live objects of this provider, caller-owned buffers of the right size).
pub unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    verb(|| {
        // SAFETY: our SRQ.
        let (st, id) = unsafe { (state((*srq).context), srq_id(srq)) };
        st.driver.post_recv_with(|e, _| {
            // As for a QP: the device's limit bounds the read, the engine
            // checks the SRQ's after finding it full.
            let max_sge = e.config().limits.max_srq_sge;
            post_recv_list(wr, bad_wr, max_sge, |rw| e.post_srq_recv(id, rw))
        })
    })
}
