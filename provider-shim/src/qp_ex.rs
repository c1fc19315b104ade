//! `ibv_create_qp_ex` and the `ibv_wr_*` API: between `ibv_wr_start` and
//! `ibv_wr_complete` the application builds WRs with one call per opcode
//! and setters for their data; `ibv_wr_complete` posts the whole batch
//! or, if any WR is refused, none of it (ibv_wr_post(3)), `ibv_wr_abort`
//! drops it.
//!
//! The builders own what they are given (SGE lists and inline bytes are
//! converted and copied by `ibv_post_send`'s own helpers, with its checks)
//! and the batch goes to the engine's `post_send_batch`, which checks every
//! WR as `post_send` does before posting any. `ibv_wr_start` ..
//! `ibv_wr_complete`/`ibv_wr_abort` is a critical section per QP that the
//! provider holds (ibv_wr_post(3), CONCURRENCY): two threads building
//! batches on one QP take turns.

use crate::call_lock::CallLock;
use crate::context::{state, ContextState};
use crate::convert::imm_from_c;
use crate::ffi::*;
use crate::guard::guard;
use crate::verbs_basic::{ah_in, err, null};
use crate::verbs_qp::{create_qp, inline_bytes, no_memory, qp_id, sges, SoftQp};
use smallvec::SmallVec;
use softverbs_engine::{
    send_flags, send_opcode, AtomicTarget, ErrorKind, InlineData, QpId, RdmaTarget, SendWr, Sge,
    SgeList, UdTarget, VerbsError, VerbsResult,
};
use std::os::raw::{c_int, c_void};
use std::ptr::{addr_of, addr_of_mut};

/// The `send_ops_flags` softverbs can build for an RC QP.
const RC_OPS: u64 = IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_SEND_WITH_INV;

/// Those a UC QP can carry: no READ nor atomic, which need responses
/// (rxe and mlx5 refuse them at creation too; LOCAL_INV as mlx5).
const UC_OPS: u64 = RC_OPS
    & !(IBV_QP_EX_WITH_RDMA_READ
        | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
        | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD);

/// Those a UD QP can carry: SENDs only.
const UD_OPS: u64 = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;

/// The `send_ops_flags` a QP of `qp_type` may ask for.
fn ops_for(qp_type: u32) -> u64 {
    match qp_type {
        IBV_QPT_RC => RC_OPS,
        IBV_QPT_UC => UC_OPS,
        IBV_QPT_UD => UD_OPS,
        _ => 0,
    }
}

/// One WR under construction, owning its data.
#[derive(Debug, Default)]
struct BuiltWr {
    wr_id: u64,
    opcode: u32,
    flags: u32,
    sges: SgeList,
    inline: InlineData,
    imm_or_inv: u32,
    rdma: RdmaTarget,
    atomic: AtomicTarget,
    ud: Option<UdTarget>,
}

impl BuiltWr {
    /// The WR as the engine takes it.
    fn send_wr(&self) -> SendWr<'_> {
        SendWr {
            wr_id: self.wr_id,
            opcode: self.opcode,
            send_flags: self.flags,
            sg_list: &self.sges,
            inline_data: &self.inline,
            imm_data_or_inv_rkey: self.imm_or_inv,
            rdma: self.rdma,
            atomic: self.atomic,
            ud: self.ud,
        }
    }
}

/// The WRs of one `ibv_wr_start` .. `ibv_wr_complete` batch. It is
/// emptied, not dropped, when the batch ends, so that a QP's batches
/// reuse one list: building a WR allocates nothing once the list has
/// grown to the longest batch (only the SGEs and inline bytes beyond
/// those a WR holds in place do), and what does allocate is fallible
/// (a WR that finds no memory fails the batch with ENOMEM).
#[derive(Debug, Default)]
struct Batch {
    wrs: Vec<BuiltWr>,
    /// The first thing a setter refused (the setters return nothing):
    /// `ibv_wr_complete` reports it and posts nothing.
    error: Option<VerbsError>,
}

impl Batch {
    /// Empties the batch for the next, keeping its list's room.
    fn clear(&mut self) {
        self.wrs.clear();
        self.error = None;
    }

    /// Adds a WR, or records ENOMEM if the list cannot grow.
    fn push(&mut self, wr: BuiltWr) {
        if self.wrs.try_reserve(1).is_err() {
            self.error.get_or_insert(no_memory());
            return;
        }
        self.wrs.push(wr);
    }
}

/// The `ibv_wr_*` state of an extended QP: the batch being built, behind
/// the QP's lock (`ibv_wr_start` enters it, `ibv_wr_complete` and
/// `ibv_wr_abort` leave it), and the QP's limits the setters check before
/// they copy anything.
#[derive(Debug)]
pub struct WrBuilder {
    batch: CallLock<Batch>,
    max_send_sge: u32,
    max_inline_data: u32,
}

impl Default for WrBuilder {
    fn default() -> WrBuilder {
        WrBuilder {
            batch: CallLock::new(Batch::default(), true),
            max_send_sge: 0,
            max_inline_data: 0,
        }
    }
}

/// EINVAL for a WR a setter could not build.
const fn einval(reason: &'static str) -> VerbsError {
    VerbsError {
        kind: ErrorKind::InvalidArgument,
        reason,
    }
}

/// ENOMEM with a reason: a WR that does not fit the queue's WQE, as mlx5's
/// `ibv_wr_*` setters report it.
const fn no_room(reason: &'static str) -> VerbsError {
    VerbsError {
        kind: ErrorKind::NoMemory,
        reason,
    }
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
        // SAFETY: a caller-provided attr, read as a copy.
        let a = unsafe { attr.read() };
        let known =
            IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        let flags_asked = a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0;
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
            return null(libc::EINVAL);
        }
        let with_ops = a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
        if a.comp_mask & !known != 0
            || flags_asked
            || (with_ops && a.send_ops_flags & !ops_for(a.qp_type) != 0)
        {
            return null(libc::EOPNOTSUPP);
        }
        // SAFETY: ibv_qp_init_attr_ex starts with the fields of
        // ibv_qp_init_attr (libibverbs relies on the same prefix).
        let qp = unsafe { create_qp(a.pd, attr as *mut ibv_qp_init_attr) };
        if !qp.is_null() {
            // SAFETY: a QP create_qp just made, not yet handed out; the
            // actual caps were written back into the caller's attr.
            unsafe {
                init_events(qp);
                if with_ops {
                    install_ops(qp as *mut SoftQp, addr_of!((*attr).cap).read());
                }
            }
        }
        qp
    })
}

/// What `ibv_create_qp` does after the provider's `create_qp` and
/// `ibv_create_qp_ex` leaves to the provider: the mutex and condition
/// variable `ibv_ack_async_event` and `ibv_destroy_qp` use.
///
/// # Safety
/// `qp` is a QP `create_qp` just made, not yet seen by anyone else.
unsafe fn init_events(qp: *mut ibv_qp) {
    // SAFETY: per the contract; the fields are written through raw
    // pointers.
    unsafe {
        libc::pthread_mutex_init(addr_of_mut!((*qp).mutex), std::ptr::null());
        libc::pthread_cond_init(addr_of_mut!((*qp).cond), std::ptr::null());
        addr_of_mut!((*qp).events_completed).write(0);
    }
}

/// Fills in the `ibv_wr_*` members and the limits the setters check.
///
/// # Safety
/// `qp` is a QP `create_qp` just made, not yet seen by anyone else.
unsafe fn install_ops(qp: *mut SoftQp, cap: ibv_qp_cap) {
    // SAFETY: per the contract. The qp_ex member of the union extends the
    // ibv_qp member, which stays as create_qp set it; every field is
    // written through a raw pointer.
    unsafe {
        let b = addr_of_mut!((*qp).builder);
        addr_of_mut!((*b).max_send_sge).write(cap.max_send_sge);
        addr_of_mut!((*b).max_inline_data).write(cap.max_inline_data);
        let mask = addr_of_mut!((*qp).vqp.comp_mask);
        mask.write(mask.read() | VERBS_QP_EX);
        let x = qp as *mut ibv_qp_ex;
        addr_of_mut!((*x).wr_start).write(Some(wr_start));
        addr_of_mut!((*x).wr_complete).write(Some(wr_complete));
        addr_of_mut!((*x).wr_abort).write(Some(wr_abort));
        addr_of_mut!((*x).wr_send).write(Some(wr_send));
        addr_of_mut!((*x).wr_send_imm).write(Some(wr_send_imm));
        addr_of_mut!((*x).wr_send_inv).write(Some(wr_send_inv));
        addr_of_mut!((*x).wr_rdma_write).write(Some(wr_rdma_write));
        addr_of_mut!((*x).wr_rdma_write_imm).write(Some(wr_rdma_write_imm));
        addr_of_mut!((*x).wr_rdma_read).write(Some(wr_rdma_read));
        addr_of_mut!((*x).wr_atomic_cmp_swp).write(Some(wr_atomic_cmp_swp));
        addr_of_mut!((*x).wr_atomic_fetch_add).write(Some(wr_atomic_fetch_add));
        addr_of_mut!((*x).wr_local_inv).write(Some(wr_local_inv));
        addr_of_mut!((*x).wr_set_sge).write(Some(wr_set_sge));
        addr_of_mut!((*x).wr_set_sge_list).write(Some(wr_set_sge_list));
        addr_of_mut!((*x).wr_set_inline_data).write(Some(wr_set_inline_data));
        addr_of_mut!((*x).wr_set_inline_data_list).write(Some(wr_set_inline_data_list));
        addr_of_mut!((*x).wr_set_ud_addr).write(Some(wr_set_ud_addr));
    }
}

/// The `ibv_wr_*` state of one of our extended QPs.
///
/// # Safety
/// `qp` is an extended QP made by `create_qp_ex`; the reference is not used
/// after it is destroyed.
unsafe fn builder<'a>(qp: *mut ibv_qp_ex) -> &'a WrBuilder {
    // SAFETY: ibv_qp_ex sits at offset 0 of the SoftQp (in verbs_qp's
    // union); the reference covers only the provider's own field.
    unsafe { &(*(qp as *mut SoftQp)).builder }
}

/// Runs `f` on the batch of a QP whose critical section this thread is in.
///
/// # Safety
/// `qp` is one of our extended QPs, and this thread called `ibv_wr_start`
/// on it and has not completed or aborted since (the `ibv_wr_*` contract).
unsafe fn with_batch<R>(qp: *mut ibv_qp_ex, f: impl FnOnce(&mut Batch, &WrBuilder) -> R) -> R {
    // SAFETY: per the contract; inside the section the batch is this
    // thread's alone.
    unsafe {
        let b = builder(qp);
        f(&mut *b.batch.data(), b)
    }
}

/// Starts a WR with the `wr_id` and `wr_flags` the application set.
///
/// # Safety
/// As [`with_batch`].
unsafe fn begin(qp: *mut ibv_qp_ex, opcode: u32, fill: impl FnOnce(&mut BuiltWr)) {
    // SAFETY: per the contract; the application wrote these fields before
    // this call on this thread. Read through raw pointers.
    let (wr_id, flags) = unsafe {
        (
            addr_of!((*qp).wr_id).read(),
            addr_of!((*qp).wr_flags).read(),
        )
    };
    let mut wr = BuiltWr {
        wr_id,
        opcode,
        flags,
        ..BuiltWr::default()
    };
    fill(&mut wr);
    // SAFETY: per the contract.
    unsafe { with_batch(qp, |b, _| b.push(wr)) };
}

/// Runs a setter on the WR being built, if any; a setter's refusal is
/// kept for `ibv_wr_complete`.
///
/// # Safety
/// As [`with_batch`].
unsafe fn set(qp: *mut ibv_qp_ex, f: impl FnOnce(&mut BuiltWr, &WrBuilder) -> VerbsResult<()>) {
    // SAFETY: per the contract.
    unsafe {
        with_batch(qp, |batch, limits| {
            let Some(wr) = batch.wrs.last_mut() else {
                return;
            };
            if let Err(e) = f(wr, limits) {
                batch.error.get_or_insert(e);
            }
        })
    }
}

macro_rules! wr_fn {
    ($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*) $body:expr) => {
        $(#[$doc])*
        unsafe extern "C" fn $name(qp: *mut ibv_qp_ex $(, $arg: $ty)*) {
            guard((), || {
                #[allow(clippy::redundant_closure_call)]
                ($body)(qp $(, $arg)*)
            })
        }
    };
}

wr_fn!(/// `ibv_wr_send`.
wr_send() |qp| {
    // SAFETY: libibverbs' inline ibv_wr_* pass one of our extended QPs,
    // inside the section ibv_wr_start entered (the same for every builder
    // and setter below).
    unsafe { begin(qp, send_opcode::SEND, |_| ()) }
});
wr_fn!(/// `ibv_wr_send_imm`.
wr_send_imm(imm: u32) |qp, imm| {
    let imm = imm_from_c(imm);
    // SAFETY: as wr_send.
    unsafe { begin(qp, send_opcode::SEND_WITH_IMM, |w| w.imm_or_inv = imm) }
});
wr_fn!(/// `ibv_wr_send_inv`.
wr_send_inv(rkey: u32) |qp, rkey| {
    // SAFETY: as wr_send.
    unsafe { begin(qp, send_opcode::SEND_WITH_INV, |w| w.imm_or_inv = rkey) }
});
wr_fn!(/// `ibv_wr_local_inv`.
wr_local_inv(rkey: u32) |qp, rkey| {
    // SAFETY: as wr_send.
    unsafe { begin(qp, send_opcode::LOCAL_INV, |w| w.imm_or_inv = rkey) }
});
wr_fn!(/// `ibv_wr_rdma_write`.
wr_rdma_write(rkey: u32, addr: u64) |qp, rkey, remote_addr| {
    let rdma = RdmaTarget { remote_addr, rkey };
    // SAFETY: as wr_send.
    unsafe { begin(qp, send_opcode::RDMA_WRITE, |w| w.rdma = rdma) }
});
wr_fn!(/// `ibv_wr_rdma_write_imm`.
wr_rdma_write_imm(rkey: u32, addr: u64, imm: u32) |qp, rkey, remote_addr, imm| {
    let rdma = RdmaTarget { remote_addr, rkey };
    let imm = imm_from_c(imm);
    // SAFETY: as wr_send.
    unsafe {
        begin(qp, send_opcode::RDMA_WRITE_WITH_IMM, |w| {
            w.rdma = rdma;
            w.imm_or_inv = imm;
        })
    }
});
wr_fn!(/// `ibv_wr_rdma_read`.
wr_rdma_read(rkey: u32, addr: u64) |qp, rkey, remote_addr| {
    let rdma = RdmaTarget { remote_addr, rkey };
    // SAFETY: as wr_send.
    unsafe { begin(qp, send_opcode::RDMA_READ, |w| w.rdma = rdma) }
});
wr_fn!(/// `ibv_wr_atomic_cmp_swp`.
wr_atomic_cmp_swp(rkey: u32, addr: u64, compare: u64, swap: u64) |qp, rkey, remote_addr, compare_add, swap| {
    let atomic = AtomicTarget { remote_addr, compare_add, swap, rkey };
    // SAFETY: as wr_send.
    unsafe { begin(qp, send_opcode::ATOMIC_CMP_AND_SWP, |w| w.atomic = atomic) }
});
wr_fn!(/// `ibv_wr_atomic_fetch_add`.
wr_atomic_fetch_add(rkey: u32, addr: u64, add: u64) |qp, rkey, remote_addr, compare_add| {
    let atomic = AtomicTarget { remote_addr, compare_add, swap: 0, rkey };
    // SAFETY: as wr_send.
    unsafe { begin(qp, send_opcode::ATOMIC_FETCH_AND_ADD, |w| w.atomic = atomic) }
});
wr_fn!(/// `ibv_wr_set_sge`.
wr_set_sge(lkey: u32, addr: u64, length: u32) |qp, lkey, addr, length| {
    let sge = Sge { addr, length, lkey };
    // SAFETY: as wr_send.
    unsafe {
        set(qp, |w, _| {
            w.sges = SgeList::from_slice(&[sge]);
            Ok(())
        })
    }
});
wr_fn!(/// `ibv_wr_set_sge_list`: converted as `ibv_post_send` converts a
/// WR's list, its count checked against max_send_sge first: more is
/// ENOMEM here, as mlx5 answers it (rxe ENOSPC; neither EINVAL, which
/// `ibv_post_send` gives).
wr_set_sge_list(n: usize, list: *const ibv_sge) |qp, n: usize, list: *const ibv_sge| {
    let n = c_int::try_from(n).unwrap_or(c_int::MAX);
    // SAFETY: as wr_send; the application passes `n` SGEs at `list`.
    unsafe {
        set(qp, |w, limits| {
            if n as u32 > limits.max_send_sge {
                return Err(no_room("num_sge above the queue's max_send_sge"));
            }
            w.sges = sges(list, n, limits.max_send_sge)?;
            Ok(())
        })
    }
});
wr_fn!(/// `ibv_wr_set_inline_data`: the bytes are copied now.
wr_set_inline_data(addr: *mut c_void, length: usize) |qp, addr: *mut c_void, length: usize| {
    let buf = ibv_data_buf { addr, length };
    // SAFETY: as wr_send; the application passes `length` readable bytes;
    // `buf` is one entry, read while the call runs.
    unsafe { set(qp, |w, limits| set_inline(w, 1, &buf, limits)) }
});
wr_fn!(/// `ibv_wr_set_inline_data_list`: the bytes are copied now.
wr_set_inline_data_list(n: usize, bufs: *const ibv_data_buf) |qp, n: usize, bufs: *const ibv_data_buf| {
    if bufs.is_null() && n > 0 {
        // SAFETY: as wr_send.
        unsafe { set(qp, |_, _| Err(einval("inline data list is NULL"))) };
        return;
    }
    // SAFETY: as wr_send; the application passes `n` entries at `bufs`
    // (ibv_wr_post(3)), each naming bytes readable now.
    unsafe { set(qp, |w, limits| set_inline(w, n, bufs, limits)) }
});
wr_fn!(/// `ibv_wr_set_ud_addr`.
wr_set_ud_addr(ah: *mut ibv_ah, qpn: u32, qkey: u32) |qp: *mut ibv_qp_ex, ah: *mut ibv_ah, remote_qpn, remote_qkey| {
    if ah.is_null() {
        return;
    }
    // SAFETY: a live AH (ibv_wr_set_ud_addr(3)) and our extended QP.
    let Some(ah) = (unsafe { ah_in(ah, (*qp).qp_base.context) }) else {
        // SAFETY: as wr_send.
        unsafe { set(qp, |_, _| Err(einval("the AH is not of the QP's context"))) };
        return;
    };
    let ud = UdTarget { ah, remote_qpn, remote_qkey };
    // SAFETY: as wr_send.
    unsafe {
        set(qp, |w, _| {
            w.ud = Some(ud);
            Ok(())
        })
    }
});

/// Copies inline data as `ibv_post_send` does (the same conversion, its
/// total checked against max_inline_data before anything is copied: more
/// is ENOMEM, as mlx5 answers it). The entries are read in order and
/// none after the one that takes the total past the limit, as rxe's and
/// mlx5's setters read them: an application that overstates `n` is
/// outside the contract, but then reads no further here than there
/// (taking all `n` at once crashed).
///
/// # Safety
/// `bufs` points to `n` readable `ibv_data_buf` entries, each naming
/// readable application memory (the `ibv_wr_set_inline_*` contract).
unsafe fn set_inline(
    w: &mut BuiltWr,
    n: usize,
    bufs: *const ibv_data_buf,
    limits: &WrBuilder,
) -> VerbsResult<()> {
    let mut total = 0u64;
    let mut list = SgeList::new();
    for i in 0..n {
        // SAFETY: i < n, within the caller's array (this function's
        // contract); a plain read of the application's entry, which
        // nothing writes while the call runs.
        let b = unsafe { bufs.add(i).read() };
        total = total.saturating_add(b.length as u64);
        if total > u64::from(limits.max_inline_data) {
            return Err(no_room("inline data above max_inline_data"));
        }
        // The length fits u32 now; empty buffers add nothing.
        if b.length > 0 {
            list.try_reserve(1).map_err(|_| no_memory())?;
            list.push(Sge {
                addr: b.addr as u64,
                length: b.length as u32,
                lkey: 0,
            });
        }
    }
    w.inline = inline_bytes(&list, limits.max_inline_data)?;
    w.flags |= send_flags::INLINE;
    Ok(())
}

/// `ibv_wr_start`: enters the QP's critical section (another thread's
/// batch on this QP completes first).
unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    // SAFETY: libibverbs' inline ibv_wr_start passes one of our extended QPs.
    let lock = unsafe { &builder(qp).batch };
    lock.enter();
    // SAFETY: inside the section just entered; the batch is this
    // thread's alone until it leaves.
    unsafe { (*lock.data()).clear() };
}

/// `ibv_wr_abort`: drops the batch and leaves the critical section.
unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    // SAFETY: one of our extended QPs, inside the section wr_start entered.
    let lock = unsafe { &builder(qp).batch };
    // SAFETY: inside the section.
    unsafe { (*lock.data()).clear() };
    // SAFETY: wr_start entered it on this thread.
    unsafe { lock.leave() };
}

/// `ibv_wr_complete`: posts the whole batch or, if any WR is refused,
/// none of it (ibv_wr_post(3)), returning that WR's errno; then leaves
/// the critical section.
pub(crate) unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    // SAFETY: one of our extended QPs, inside the section wr_start entered.
    let lock = unsafe { &builder(qp).batch };
    // SAFETY: inside the section, where the batch is this thread's
    // alone; the reference ends before the section is left.
    let batch = unsafe { &mut *lock.data() };
    let rc = guard(libc::EIO, || {
        // SAFETY: our QP; its base QP names its context (plain field reads).
        let (st, id) = unsafe {
            let base = addr_of_mut!((*qp).qp_base);
            (state(addr_of!((*base).context).read()), qp_id(base))
        };
        post_batch(&st, id, batch)
    });
    batch.clear();
    // SAFETY: wr_start entered it on this thread.
    unsafe { lock.leave() };
    rc
}

/// The WRs of the batch this thread is building on `qp`, as the verbs
/// trace records them.
///
/// # Safety
/// `qp` is one of our extended QPs, and this thread is inside its
/// critical section (between `ibv_wr_start` and `ibv_wr_complete`).
pub(crate) unsafe fn batch_for_trace(qp: *mut ibv_qp_ex) -> Vec<softverbs_trace::Wr> {
    // SAFETY: per the contract.
    unsafe { with_batch(qp, |b, _| b.wrs.iter().map(BuiltWr::for_trace).collect()) }
}

impl BuiltWr {
    fn for_trace(&self) -> softverbs_trace::Wr {
        use softverbs_engine::send_opcode::*;
        let target = match self.opcode {
            RDMA_WRITE | RDMA_WRITE_WITH_IMM | RDMA_READ => {
                Some((self.rdma.remote_addr, self.rdma.rkey))
            }
            ATOMIC_CMP_AND_SWP | ATOMIC_FETCH_AND_ADD => {
                Some((self.atomic.remote_addr, self.atomic.rkey))
            }
            _ => None,
        };
        let inline = self.flags & send_flags::INLINE != 0;
        softverbs_trace::Wr {
            wr_id: self.wr_id,
            opcode: softverbs_faults::names::wr_opcode_name(self.opcode).to_string(),
            len: if inline {
                self.inline.len() as u64
            } else {
                self.sges.iter().map(|s| u64::from(s.length)).sum()
            },
            flags: self.flags,
            remote_addr: target.map(|t| t.0),
            rkey: target.map(|t| t.1),
            imm: softverbs_trace::Wr::imm_of(self.opcode, self.imm_or_inv),
        }
    }
}

/// Posts a built batch through the engine's all-or-nothing path. The
/// engine's view of a batch of up to [`WRS_IN_PLACE`] WRs (most are of
/// one) is built on the stack.
fn post_batch(st: &ContextState, id: QpId, batch: &Batch) -> c_int {
    if let Some(e) = batch.error {
        return err(e);
    }
    let mut wrs = SmallVec::<[SendWr<'_>; WRS_IN_PLACE]>::new();
    if wrs.try_reserve_exact(batch.wrs.len()).is_err() {
        return err(no_memory());
    }
    wrs.extend(batch.wrs.iter().map(BuiltWr::send_wr));
    st.driver
        .post_send_with(|e, _| e.post_send_batch(id, &wrs))
        .map_or_else(err, |()| 0)
}

/// WRs of a batch the engine's view of it holds without allocating.
const WRS_IN_PLACE: usize = 4;
