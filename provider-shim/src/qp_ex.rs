//! `ibv_create_qp_ex` and the `ibv_wr_*` API: between `ibv_wr_start` and
//! `ibv_wr_complete` the application builds WRs with one call per opcode
//! and setters for their data; `ibv_wr_complete` posts them in order
//! (the first refused one ends the batch with its errno, as
//! `ibv_post_send` reports its `bad_wr`), `ibv_wr_abort` drops them.

use crate::context::state;
use crate::ffi::*;
use crate::guard::guard;
use crate::verbs_basic::{err, null, SoftAh};
use crate::verbs_qp::{create_qp, SoftQp};
use softverbs_engine::{send_flags, send_opcode, AtomicTarget, RdmaTarget, SendWr, Sge, UdTarget};
use std::os::raw::{c_int, c_void};

/// The `send_ops_flags` softverbs can build.
const SUPPORTED_OPS: u64 = IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_SEND_WITH_INV;

/// One WR under construction.
#[derive(Debug, Default)]
struct BuiltWr {
    wr_id: u64,
    opcode: u32,
    flags: u32,
    sges: Vec<Sge>,
    inline: Vec<u8>,
    imm_or_inv: u32,
    rdma: RdmaTarget,
    atomic: AtomicTarget,
    ud: Option<UdTarget>,
}

/// The WRs of one `ibv_wr_start` .. `ibv_wr_complete` batch.
#[derive(Debug, Default)]
pub struct WrBuilder {
    wrs: Vec<BuiltWr>,
}

/// `create_qp_ex`: the base QP as `create_qp` makes it (the extended
/// attributes begin with the same fields), plus the `ibv_wr_*` members
/// when `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` asks for them.
///
/// # Safety
/// Called through libibverbs with a live context and a caller-owned attr.
pub unsafe extern "C" fn create_qp_ex(
    _context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    guard(std::ptr::null_mut(), || {
        // SAFETY: a caller-provided attr.
        let a = unsafe { &mut *attr };
        let known =
            IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        let flags_asked = a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0;
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
            return null(libc::EINVAL);
        }
        let with_ops = a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
        if a.comp_mask & !known != 0
            || flags_asked
            || (with_ops && a.send_ops_flags & !SUPPORTED_OPS != 0)
        {
            return null(libc::EOPNOTSUPP);
        }
        // SAFETY: ibv_qp_init_attr_ex starts with the fields of
        // ibv_qp_init_attr (libibverbs relies on the same prefix).
        let qp = unsafe { create_qp(a.pd, attr as *mut ibv_qp_init_attr) };
        if !qp.is_null() && with_ops {
            // SAFETY: a QP create_qp just made is a SoftQp.
            unsafe { install_ops(&mut *(qp as *mut SoftQp)) };
        }
        qp
    })
}

fn install_ops(qp: &mut SoftQp) {
    qp.vqp.comp_mask |= VERBS_QP_EX;
    // SAFETY: the qp_ex member of the union extends the ibv_qp member,
    // which stays as create_qp set it.
    let x = unsafe { &mut qp.vqp.u.qp_ex };
    x.wr_start = Some(wr_start);
    x.wr_complete = Some(wr_complete);
    x.wr_abort = Some(wr_abort);
    x.wr_send = Some(wr_send);
    x.wr_send_imm = Some(wr_send_imm);
    x.wr_send_inv = Some(wr_send_inv);
    x.wr_rdma_write = Some(wr_rdma_write);
    x.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    x.wr_rdma_read = Some(wr_rdma_read);
    x.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    x.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    x.wr_local_inv = Some(wr_local_inv);
    x.wr_set_sge = Some(wr_set_sge);
    x.wr_set_sge_list = Some(wr_set_sge_list);
    x.wr_set_inline_data = Some(wr_set_inline_data);
    x.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    x.wr_set_ud_addr = Some(wr_set_ud_addr);
}

/// The SoftQp behind an `ibv_qp_ex` of ours.
///
/// # Safety
/// `qp` is an extended QP made by `create_qp_ex`, used by one thread at a
/// time (the `ibv_wr_*` contract).
unsafe fn soft<'a>(qp: *mut ibv_qp_ex) -> &'a mut SoftQp {
    // SAFETY: ibv_qp_ex sits at offset 0 of the SoftQp (in verbs_qp's union).
    unsafe { &mut *(qp as *mut SoftQp) }
}

/// Starts a WR with the `wr_id` and `wr_flags` the application set.
///
/// # Safety
/// As [`soft`].
unsafe fn begin(qp: *mut ibv_qp_ex, opcode: u32) -> &'static mut BuiltWr {
    // SAFETY: as the caller's contract; the builder lives as long as the QP.
    let (q, wr_id, flags) = unsafe { (soft(qp), (*qp).wr_id, (*qp).wr_flags) };
    q.builder.wrs.push(BuiltWr {
        wr_id,
        opcode,
        flags,
        ..BuiltWr::default()
    });
    let last = q.builder.wrs.last_mut().expect("just pushed");
    // SAFETY: the WR lives in the QP's builder until complete/abort; the
    // caller uses the reference before returning to C.
    unsafe { &mut *(last as *mut BuiltWr) }
}

/// The WR being built, if any.
///
/// # Safety
/// As [`soft`].
unsafe fn current<'a>(qp: *mut ibv_qp_ex) -> Option<&'a mut BuiltWr> {
    // SAFETY: as the caller's contract.
    unsafe { soft(qp) }.builder.wrs.last_mut()
}

macro_rules! wr_fn {
    ($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*) $body:expr) => {
        $(#[$doc])*
        unsafe extern "C" fn $name(qp: *mut ibv_qp_ex $(, $arg: $ty)*) {
            guard((), || {
                // SAFETY: libibverbs' inline ibv_wr_* call this with one
                // of our extended QPs.
                #[allow(clippy::redundant_closure_call)]
                ($body)(qp $(, $arg)*)
            })
        }
    };
}

wr_fn!(/// `ibv_wr_start`.
    wr_start() |qp| unsafe { soft(qp) }.builder.wrs.clear());
wr_fn!(/// `ibv_wr_abort`.
    wr_abort() |qp| unsafe { soft(qp) }.builder.wrs.clear());
wr_fn!(/// `ibv_wr_send`.
    wr_send() |qp| { unsafe { begin(qp, send_opcode::SEND) }; });
wr_fn!(/// `ibv_wr_send_imm`.
    wr_send_imm(imm: u32) |qp, imm| unsafe { begin(qp, send_opcode::SEND_WITH_IMM) }.imm_or_inv = crate::convert::imm_from_c(imm));
wr_fn!(/// `ibv_wr_send_inv`.
    wr_send_inv(rkey: u32) |qp, rkey| unsafe { begin(qp, send_opcode::SEND_WITH_INV) }.imm_or_inv = rkey);
wr_fn!(/// `ibv_wr_local_inv`.
    wr_local_inv(rkey: u32) |qp, rkey| unsafe { begin(qp, send_opcode::LOCAL_INV) }.imm_or_inv = rkey);
wr_fn!(/// `ibv_wr_rdma_write`.
wr_rdma_write(rkey: u32, addr: u64) |qp, rkey, remote_addr| {
    unsafe { begin(qp, send_opcode::RDMA_WRITE) }.rdma = RdmaTarget { remote_addr, rkey };
});
wr_fn!(/// `ibv_wr_rdma_write_imm`.
wr_rdma_write_imm(rkey: u32, addr: u64, imm: u32) |qp, rkey, remote_addr, imm| {
    let w = unsafe { begin(qp, send_opcode::RDMA_WRITE_WITH_IMM) };
    w.rdma = RdmaTarget { remote_addr, rkey };
    w.imm_or_inv = crate::convert::imm_from_c(imm);
});
wr_fn!(/// `ibv_wr_rdma_read`.
wr_rdma_read(rkey: u32, addr: u64) |qp, rkey, remote_addr| {
    unsafe { begin(qp, send_opcode::RDMA_READ) }.rdma = RdmaTarget { remote_addr, rkey };
});
wr_fn!(/// `ibv_wr_atomic_cmp_swp`.
wr_atomic_cmp_swp(rkey: u32, addr: u64, compare: u64, swap: u64) |qp, rkey, remote_addr, compare_add, swap| {
    unsafe { begin(qp, send_opcode::ATOMIC_CMP_AND_SWP) }.atomic = AtomicTarget { remote_addr, compare_add, swap, rkey };
});
wr_fn!(/// `ibv_wr_atomic_fetch_add`.
wr_atomic_fetch_add(rkey: u32, addr: u64, add: u64) |qp, rkey, remote_addr, compare_add| {
    unsafe { begin(qp, send_opcode::ATOMIC_FETCH_AND_ADD) }.atomic = AtomicTarget { remote_addr, compare_add, swap: 0, rkey };
});
wr_fn!(/// `ibv_wr_set_sge`.
wr_set_sge(lkey: u32, addr: u64, length: u32) |qp, lkey, addr, length| {
    if let Some(w) = unsafe { current(qp) } {
        w.sges = vec![Sge { addr, length, lkey }];
    }
});
wr_fn!(/// `ibv_wr_set_sge_list`.
wr_set_sge_list(n: usize, list: *const ibv_sge) |qp, n: usize, list: *const ibv_sge| {
    if let (Some(w), false) = (unsafe { current(qp) }, list.is_null()) {
        // SAFETY: the caller passes `n` SGEs.
        let list = unsafe { std::slice::from_raw_parts(list, n) };
        w.sges = list.iter().map(|s| Sge { addr: s.addr, length: s.length, lkey: s.lkey }).collect();
    }
});
wr_fn!(/// `ibv_wr_set_inline_data`: the bytes are copied now.
wr_set_inline_data(addr: *mut c_void, length: usize) |qp, addr: *mut c_void, length: usize| {
    if let (Some(w), false) = (unsafe { current(qp) }, addr.is_null()) {
        // SAFETY: the caller passes `length` readable bytes.
        w.inline = unsafe { std::slice::from_raw_parts(addr as *const u8, length) }.to_vec();
        w.flags |= send_flags::INLINE;
    }
});
wr_fn!(/// `ibv_wr_set_inline_data_list`: the bytes are copied now.
wr_set_inline_data_list(n: usize, bufs: *const ibv_data_buf) |qp, n: usize, bufs: *const ibv_data_buf| {
    if let (Some(w), false) = (unsafe { current(qp) }, bufs.is_null()) {
        // SAFETY: the caller passes `n` buffers of readable bytes.
        let bufs = unsafe { std::slice::from_raw_parts(bufs, n) };
        w.inline = bufs
            .iter()
            .flat_map(|b| unsafe { std::slice::from_raw_parts(b.addr as *const u8, b.length) }.iter().copied())
            .collect();
        w.flags |= send_flags::INLINE;
    }
});
wr_fn!(/// `ibv_wr_set_ud_addr`.
wr_set_ud_addr(ah: *mut ibv_ah, qpn: u32, qkey: u32) |qp, ah: *mut ibv_ah, remote_qpn, remote_qkey| {
    if let (Some(w), false) = (unsafe { current(qp) }, ah.is_null()) {
        // SAFETY: an AH of ours.
        let ah = unsafe { (*(ah as *mut SoftAh)).id };
        w.ud = Some(UdTarget { ah, remote_qpn, remote_qkey });
    }
});

/// `ibv_wr_complete`: posts the batch; 0 or the errno of the first WR
/// refused (the earlier ones stay posted).
unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: one of our extended QPs; its base QP names its context.
        let q = unsafe { soft(qp) };
        let st = unsafe { state((*qp).qp_base.context) };
        let wrs = std::mem::take(&mut q.builder.wrs);
        let id = q.id;
        st.driver.with(|e, _| {
            for w in &wrs {
                let wr = SendWr {
                    wr_id: w.wr_id,
                    opcode: w.opcode,
                    send_flags: w.flags,
                    sg_list: &w.sges,
                    inline_data: &w.inline,
                    imm_data_or_inv_rkey: w.imm_or_inv,
                    rdma: w.rdma,
                    atomic: w.atomic,
                    ud: w.ud,
                };
                if let Err(error) = e.post_send(id, &wr) {
                    return err(error);
                }
            }
            0
        })
    })
}
