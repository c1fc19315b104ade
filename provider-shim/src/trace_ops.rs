//! The verbs trace (`SOFTVERBS_TRACE`, the `softverbs_trace` crate) at the
//! provider's entry points. A context of a tracing process gets
//! [`TRACED_OPS`] instead of `ops::CONTEXT_OPS`: each member calls the
//! verb it stands for, then writes a record of its arguments, result and
//! errno. Extended CQs and QPs get traced polling and `ibv_wr_complete`
//! members the same way. A process that does not trace never reaches this
//! module, so tracing off costs nothing per verb.
//!
//! A pass-through context (`passthrough.rs`) that is traced or has fault
//! rules gets the same members; there they call the real provider's
//! originals instead of softverbs' verbs ([`next`]), and the post and poll
//! members apply the rules on the way (`Hooked::post`,
//! `Hooked::rewrite_completions`).
//!
//! The wrappers read only what the verb itself read or wrote (the
//! caller's WR list up to what was posted, the completions just written,
//! the attributes passed), and a destroy verb's object only before it is
//! destroyed. Each record is made under [`guard`], so nothing here can
//! unwind into C.

use crate::context::state;
use crate::event_acks::EventElement;
use crate::ffi::*;
use crate::guard::{errno, guard};
use crate::passthrough::{Hooked, PostFn, WrList};
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use softverbs_faults::names::{wc_opcode_name, wc_status_name, wr_opcode_name};
use softverbs_faults::Queue;
use softverbs_trace::{address, event_name, Completion, Event, Record, Verb, Wr};
use std::collections::HashMap;
use std::os::raw::{c_int, c_void};
use std::ptr::{addr_of, addr_of_mut};
use std::sync::LazyLock;

/// The `context` member of an object (`ctx!(*pd)`), read as a plain field.
macro_rules! ctx {
    ($object:expr) => {
        // SAFETY: a live object of a context (the verbs API contract).
        unsafe { addr_of!(($object).context).read() }
    };
}

/// Calls member `op` of the ops `context`'s verbs go to ([`next`]) with
/// `args`, or evaluates `missing` if it has no such member.
macro_rules! forward {
    ($context:expr, $op:ident($($arg:expr),*), $missing:expr) => {{
        let next = next($context);
        match next.ops().$op {
            // SAFETY: the member of the provider that made the objects (a
            // real one, or softverbs), called with the arguments
            // libibverbs gave the member that forwards to it.
            Some(f) => unsafe { f($($arg),*) },
            None => $missing,
        }
    }};
}

/// Where a traced member's verb goes: a hooked pass-through context's
/// real provider, or softverbs' own verbs.
struct Next(Option<&'static Hooked>);

impl Next {
    fn ops(&self) -> &verbs_context_ops {
        match &self.0 {
            Some(h) => &h.originals,
            None => &crate::ops::CONTEXT_OPS.0,
        }
    }
}

/// Where the verbs of `context` go.
fn next(context: *mut ibv_context) -> Next {
    Next(crate::passthrough::hooked(context))
}

/// The delay state of a hooked pass-through context with delay rules.
fn delays_of(context: *mut ibv_context) -> Option<&'static crate::passthrough_delay::Delays> {
    crate::passthrough::hooked(context).and_then(|h| h.delays.as_ref())
}

/// A missing member of a verb that returns an object: NULL, EOPNOTSUPP.
fn missing<T>() -> *mut T {
    crate::guard::set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// The `start_poll`, `next_poll` and `read_vendor_err` of each traced
/// extended CQ as its provider made them, by CQ address.
type Pollers = (
    Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int>,
    Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int>,
    Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
);
static POLLERS: LazyLock<Mutex<HashMap<usize, Pollers>>> = LazyLock::new(Default::default);

/// The `wr_complete` of each traced extended QP as its provider made it.
static COMPLETERS: LazyLock<Mutex<HashMap<usize, unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int>>> =
    LazyLock::new(Default::default);

/// A pass-through context's QP by number, for the rules that fail it.
///
/// # Safety
/// `qp` is NULL or a QP of `context` just made.
unsafe fn remember_qp(context: *mut ibv_context, qp: *mut ibv_qp) {
    if let (Some(h), false) = (crate::passthrough::hooked(context), qp.is_null()) {
        // SAFETY: per the contract.
        let n = unsafe { addr_of!((*qp).qp_num).read() };
        h.add_qp(n, qp as usize);
    }
}

/// Writes `record` for the device of `context`: a soft device, or the
/// pass-through device a hooked real context was opened as.
///
/// # Safety
/// `context` is one of our live soft contexts or a hooked one.
unsafe fn emit(context: *mut ibv_context, record: Record) {
    match crate::passthrough::hooked(context) {
        Some(h) => softverbs_trace::write(&h.name, record),
        // SAFETY: per the contract, a soft context.
        None => softverbs_trace::write(&unsafe { state(context) }.device.config.name, record),
    }
}

/// The record of a verb that returned `ret`, with errno `err` if it
/// failed.
fn verb(name: &str, qp: Option<u32>, args: Value, ret: i64, err: i32) -> Record {
    Record::Verb(Verb {
        verb: name.to_string(),
        qp,
        args: object(args),
        wrs: Vec::new(),
        ret,
        errno: err,
    })
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Traces a verb returning 0 or an errno.
///
/// # Safety
/// `context` is one of our live contexts; `args` reads only what the
/// verb's caller passed.
unsafe fn status(
    context: *mut ibv_context,
    name: &str,
    qp: Option<u32>,
    ret: c_int,
    args: impl FnOnce() -> Value,
) {
    guard((), || {
        if !softverbs_trace::on() {
            return;
        }
        let err = if ret > 0 { ret } else { 0 };
        // SAFETY: per the contract.
        unsafe { emit(context, verb(name, qp, args(), i64::from(ret), err)) };
    });
}

/// Traces a verb returning an object (NULL with errno set on failure).
///
/// # Safety
/// As [`status`].
unsafe fn pointer<T>(
    context: *mut ibv_context,
    name: &str,
    qp: Option<u32>,
    ret: *mut T,
    args: impl FnOnce() -> Value,
) {
    let err = if ret.is_null() { errno() } else { 0 };
    guard((), || {
        if !softverbs_trace::on() {
            return;
        }
        let ok = i64::from(!ret.is_null());
        // SAFETY: per the contract.
        unsafe { emit(context, verb(name, qp, args(), ok, err)) };
    });
}

/// The context members with tracing. Members left NULL are those
/// `CONTEXT_OPS` leaves NULL.
pub static TRACED_OPS: crate::ops::ContextOps = crate::ops::ContextOps(verbs_context_ops {
    query_device_ex: Some(query_device_ex),
    query_port: Some(query_port),
    free_context: Some(free_context),
    alloc_pd: Some(alloc_pd),
    dealloc_pd: Some(dealloc_pd),
    reg_mr: Some(reg_mr),
    dereg_mr: Some(dereg_mr),
    rereg_mr: Some(rereg_mr),
    create_cq: Some(create_cq),
    create_cq_ex: Some(create_cq_ex),
    destroy_cq: Some(destroy_cq),
    resize_cq: Some(resize_cq),
    poll_cq: Some(poll_cq),
    req_notify_cq: Some(req_notify_cq),
    create_ah: Some(create_ah),
    destroy_ah: Some(destroy_ah),
    create_qp: Some(create_qp),
    create_qp_ex: Some(create_qp_ex),
    modify_qp: Some(modify_qp),
    query_qp: Some(query_qp),
    destroy_qp: Some(destroy_qp),
    attach_mcast: Some(attach_mcast),
    detach_mcast: Some(detach_mcast),
    post_send: Some(post_send),
    post_recv: Some(post_recv),
    create_srq: Some(create_srq),
    modify_srq: Some(modify_srq),
    query_srq: Some(query_srq),
    destroy_srq: Some(destroy_srq),
    post_srq_recv: Some(post_srq_recv),
    cq_event: Some(cq_event),
    async_event: Some(async_event),
    ..<verbs_context_ops as Zeroed>::ZEROED
});

/// Traces `ibv_open_device` (the provider's `alloc_context`).
///
/// # Safety
/// `context` is NULL or one of our live contexts.
pub unsafe fn opened(name: &str, context: *mut ibv_context) {
    let err = if context.is_null() { errno() } else { 0 };
    guard((), || {
        if !softverbs_trace::on() {
            return;
        }
        let record = verb(
            "ibv_open_device",
            None,
            Value::Null,
            i64::from(!context.is_null()),
            err,
        );
        softverbs_trace::write(name, record);
    });
}

// Every function below is a member of `TRACED_OPS` or of a traced
// extended CQ or QP.
//
// # Safety (all of them)
// Called through libibverbs with the pointers its C contract promises,
// as the verb they wrap; they forward them unchanged.

unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    let ret = forward!(
        context,
        query_device_ex(context, input, attr, attr_size),
        libc::EOPNOTSUPP
    );
    // SAFETY: our context; no argument is read.
    unsafe { status(context, "ibv_query_device_ex", None, ret, || Value::Null) };
    ret
}

unsafe extern "C" fn query_port(
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    let ret = forward!(context, query_port(context, port, attr), libc::EOPNOTSUPP);
    // SAFETY: our context; the state is read only after success.
    unsafe {
        status(context, "ibv_query_port", None, ret, || {
            let state = (ret == 0).then(|| addr_of!((*attr).state).read());
            json!({ "port": port, "state": state })
        })
    };
    ret
}

unsafe extern "C" fn free_context(context: *mut ibv_context) {
    // The record first: the context is gone afterwards.
    // SAFETY: our context, live until the call below.
    unsafe { status(context, "ibv_close_device", None, 0, || Value::Null) };
    // Where the call goes is settled before the context leaves the table
    // of hooked ones (a hook state outlives its context), and it leaves
    // before its memory is freed and its address can be a new context's.
    let next = next(context);
    // SAFETY: the context libibverbs is closing.
    guard((), || unsafe { crate::passthrough::unhook(context) });
    if let Some(f) = next.ops().free_context {
        // SAFETY: the provider's own member, with libibverbs' argument.
        unsafe { f(context) };
    }
}

unsafe extern "C" fn alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    let pd = forward!(context, alloc_pd(context), missing());
    // SAFETY: our context.
    unsafe {
        pointer(
            context,
            "ibv_alloc_pd",
            None,
            pd,
            || json!({ "pd": address(pd) }),
        )
    };
    pd
}

unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: one of our PDs, live until the call below.
    let context = unsafe { addr_of!((*pd).context).read() };
    let ret = forward!(ctx!(*pd), dealloc_pd(pd), libc::EOPNOTSUPP);
    // SAFETY: our context; only the PD's address is used.
    unsafe {
        status(
            context,
            "ibv_dealloc_pd",
            None,
            ret,
            || json!({ "pd": address(pd) }),
        )
    };
    ret
}

unsafe extern "C" fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    hca_va: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: one of our PDs.
    let context = unsafe { addr_of!((*pd).context).read() };
    let mr = forward!(
        ctx!(*pd),
        reg_mr(pd, addr, length, hca_va, access),
        missing()
    );
    // SAFETY: our context; the MR's keys are read only if it was made.
    unsafe {
        pointer(context, "ibv_reg_mr", None, mr, || {
            let keys =
                (!mr.is_null()).then(|| (addr_of!((*mr).lkey).read(), addr_of!((*mr).rkey).read()));
            json!({
                "pd": address(pd), "addr": addr as u64, "length": length, "iova": hca_va,
                "access": access, "mr": address(mr), "lkey": keys.map(|k| k.0), "rkey": keys.map(|k| k.1),
            })
        })
    };
    mr
}

unsafe extern "C" fn dereg_mr(vmr: *mut verbs_mr) -> c_int {
    // SAFETY: one of our MRs, live until the call below.
    let context = unsafe { addr_of!((*vmr).ibv_mr.context).read() };
    let ret = forward!(ctx!((*vmr).ibv_mr), dereg_mr(vmr), libc::EOPNOTSUPP);
    // SAFETY: our context; only the MR's address is used.
    unsafe {
        status(
            context,
            "ibv_dereg_mr",
            None,
            ret,
            || json!({ "mr": address(vmr) }),
        )
    };
    ret
}

unsafe extern "C" fn rereg_mr(
    vmr: *mut verbs_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    // SAFETY: one of our MRs.
    let context = unsafe { addr_of!((*vmr).ibv_mr.context).read() };
    let ret = forward!(
        ctx!((*vmr).ibv_mr),
        rereg_mr(vmr, flags, pd, addr, length, access),
        libc::EOPNOTSUPP
    );
    // SAFETY: our context.
    unsafe {
        status(
            context,
            "ibv_rereg_mr",
            None,
            ret,
            || json!({ "mr": address(vmr), "flags": flags, "addr": addr as u64, "length": length, "access": access }),
        )
    };
    ret
}

unsafe extern "C" fn create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    let cq = forward!(
        context,
        create_cq(context, cqe, channel, comp_vector),
        missing()
    );
    if let (Some(d), false) = (delays_of(context), cq.is_null()) {
        // SAFETY: the caller's channel (or NULL), live for the call.
        guard((), || unsafe { d.add_cq(cq as usize, channel) });
    }
    // SAFETY: our context; the CQ's size is read only if it was made.
    unsafe {
        pointer(context, "ibv_create_cq", None, cq, || {
            let actual = (!cq.is_null()).then(|| addr_of!((*cq).cqe).read());
            json!({ "cqe": cqe, "actual_cqe": actual, "channel": !channel.is_null(), "cq": address(cq) })
        })
    };
    cq
}

unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    let cq = forward!(context, create_cq_ex(context, attr), missing());
    if let (Some(d), false) = (delays_of(context), cq.is_null()) {
        // SAFETY: the caller's attr and its channel (or NULL), live for the
        // call; the CQ just made, not yet handed out.
        guard((), || unsafe {
            d.add_cq(cq as usize, addr_of!((*attr).channel).read());
            crate::passthrough_delay_ex::install(d, cq);
        });
    }
    if !cq.is_null() {
        guard((), || {
            // SAFETY: a CQ just made, not yet handed out: its polling
            // members are ours to replace, once the provider's are kept.
            unsafe {
                let own = (
                    addr_of!((*cq).start_poll).read(),
                    addr_of!((*cq).next_poll).read(),
                    addr_of!((*cq).read_vendor_err).read(),
                );
                POLLERS.lock().insert(cq as usize, own);
                addr_of_mut!((*cq).start_poll).write(Some(start_poll));
                addr_of_mut!((*cq).next_poll).write(Some(next_poll));
                addr_of_mut!((*cq).read_vendor_err).write(Some(read_vendor_err));
            }
        });
    }
    // SAFETY: our context and the caller's attr: the fields before
    // `comp_mask` always, `flags` only if the mask says it is there.
    unsafe {
        pointer(context, "ibv_create_cq_ex", None, cq, || {
            let mask = addr_of!((*attr).comp_mask).read();
            let flags =
                (mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0).then(|| addr_of!((*attr).flags).read());
            json!({
                "cqe": addr_of!((*attr).cqe).read(), "wc_flags": addr_of!((*attr).wc_flags).read(),
                "flags": flags, "cq": address(cq),
            })
        })
    };
    cq
}

unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: one of our CQs, live until the call below.
    let context = unsafe { addr_of!((*cq).context).read() };
    // Its polling members leave before the CQ does (its address may be
    // a new CQ's as soon as it is freed), and come back if it stays.
    let pollers = guard(None, || POLLERS.lock().remove(&(cq as usize)));
    // Its held completions go, and events raised for it are not the
    // kernel's: libibverbs' destroy must not wait for their acks.
    // SAFETY: a live CQ of the context.
    let held = delays_of(context).and_then(|d| guard(None, || unsafe { d.remove_cq(cq) }));
    let ret = forward!(ctx!(*cq), destroy_cq(cq), libc::EOPNOTSUPP);
    if let (Some(p), true) = (pollers, ret != 0) {
        guard((), || {
            POLLERS.lock().insert(cq as usize, p);
        });
    }
    if let (Some(d), Some(held), true) = (delays_of(context), held, ret != 0) {
        // SAFETY: the CQ stays, live.
        guard((), || unsafe { d.keep_cq(cq, held) });
    }
    if let (Some(h), 0) = (crate::passthrough::hooked(context), ret) {
        guard((), || h.forget_cq(cq as usize));
    }
    // SAFETY: our context; only the CQ's address is used.
    unsafe {
        status(
            context,
            "ibv_destroy_cq",
            None,
            ret,
            || json!({ "cq": address(cq) }),
        )
    };
    ret
}

unsafe extern "C" fn resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    // SAFETY: one of our CQs.
    let context = unsafe { addr_of!((*cq).context).read() };
    let ret = forward!(ctx!(*cq), resize_cq(cq, cqe), libc::EOPNOTSUPP);
    // SAFETY: our context.
    unsafe {
        status(
            context,
            "ibv_resize_cq",
            None,
            ret,
            || json!({ "cq": address(cq), "cqe": cqe }),
        )
    };
    ret
}

/// Traces each completion `ibv_poll_cq` returned; a failed poll as a verb.
unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    let next = next(ctx!(*cq));
    let n = match (next.ops().poll_cq, &next.0) {
        (Some(f), Some(h)) if h.delays.is_some() => guard(-1, || {
            let delays = h.delays.as_ref().expect("checked");
            // SAFETY: the arguments of this member, to its provider's.
            unsafe { delays.poll(h, f, (cq, num_entries, wc)) }
        }),
        (Some(f), hooked) => {
            // SAFETY: the arguments of this member, to its provider's.
            let n = unsafe { f(cq, num_entries, wc) };
            if let (Some(h), true) = (hooked, n > 0) {
                // SAFETY: the provider just wrote `n` completions there.
                guard((), || unsafe {
                    h.rewrite_completions(wc, n as usize, |_, _| {})
                });
            }
            n
        }
        (None, _) => -1,
    };
    if !softverbs_trace::on() {
        return n;
    }
    if n == 0 {
        return n; // empty polls are not recorded: they would drown the rest
    }
    let err = if n < 0 { errno() } else { 0 };
    guard((), || {
        if !softverbs_trace::on() {
            return;
        }
        // SAFETY: one of our CQs.
        let context = unsafe { addr_of!((*cq).context).read() };
        if n < 0 {
            let record = verb(
                "ibv_poll_cq",
                None,
                json!({ "cq": address(cq) }),
                i64::from(n),
                err,
            );
            // SAFETY: our context.
            unsafe { emit(context, record) };
            return;
        }
        for i in 0..n as usize {
            // SAFETY: the poll just wrote `n` completions there; a copy is read.
            let w = unsafe { wc.add(i).read() };
            // SAFETY: our context.
            unsafe { emit(context, Record::Completion(completion(cq as usize, &w))) };
        }
    });
    n
}

/// A completion as the trace records it.
fn completion(cq: usize, w: &ibv_wc) -> Completion {
    const WITH_IMM: u32 = 1 << 1;
    const WITH_INV: u32 = 1 << 3;
    let imm = crate::convert::wc_imm_or_rkey_from_c(w);
    Completion {
        cq: format!("{cq:#x}"),
        qp: w.qp_num,
        wr_id: w.wr_id,
        status: wc_status_name(w.status).to_string(),
        opcode: wc_opcode_name(w.opcode).to_string(),
        byte_len: w.byte_len,
        imm: (w.wc_flags & (WITH_IMM | WITH_INV) != 0).then_some(imm),
        wc_flags: w.wc_flags,
        vendor_err: w.vendor_err,
        src_qp: w.src_qp,
    }
}

/// `ibv_start_poll` of a traced extended CQ.
unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: libibverbs' arguments.
    unsafe { traced_poll(cq, Some(attr)) }
}

/// `ibv_next_poll` of a traced extended CQ.
unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: libibverbs' argument.
    unsafe { traced_poll(cq, None) }
}

/// `ibv_start_poll` (with its `attr`) or `ibv_next_poll` of a traced
/// extended CQ. On a pass-through device with delay rules the completion
/// is `passthrough_delay_ex`'s; on another the provider's, with the
/// completion rules applied to it (soft devices apply theirs in the
/// engine). The current completion is then recorded.
///
/// # Safety
/// `cq` is one of our extended CQs; `attr` libibverbs' for a start.
unsafe fn traced_poll(cq: *mut ibv_cq_ex, attr: Option<*mut ibv_poll_cq_attr>) -> c_int {
    // SAFETY: per the contract (the context is a plain field).
    let context = unsafe { addr_of!((*cq).context).read() };
    let hooked = crate::passthrough::hooked(context);
    let ret = match (hooked, hooked.and_then(|h| h.delays.as_ref())) {
        // SAFETY: the CQ went through `passthrough_delay_ex::install`
        // when it was made; libibverbs' arguments.
        (Some(h), Some(d)) => guard(libc::EIO, || unsafe {
            match attr {
                Some(attr) => crate::passthrough_delay_ex::start_poll(h, d, cq, attr),
                None => crate::passthrough_delay_ex::next_poll(h, d, cq),
            }
        }),
        _ => {
            let own = POLLERS.lock().get(&(cq as usize)).copied();
            // SAFETY: the provider's own members for this CQ, as
            // libibverbs calls them.
            let ret = match (own, attr) {
                (Some((Some(start), _, _)), Some(attr)) => unsafe { start(cq, attr) },
                (Some((_, Some(next), _)), None) => unsafe { next(cq) },
                _ => libc::EINVAL,
            };
            if let (Some(h), 0) = (hooked, ret) {
                // SAFETY: a completion is current, inside the section.
                guard((), || unsafe {
                    h.rewrite_current(cq);
                });
            }
            ret
        }
    };
    // SAFETY: on success a completion is current, inside the section.
    unsafe { current_completion(cq, ret) };
    ret
}

/// `ibv_wc_read_vendor_err` of a traced extended CQ: what a completion
/// rule gave the current completion, or the provider's answer.
unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: one of our extended CQs (its context is a plain field).
    let context = unsafe { addr_of!((*cq).context).read() };
    let ruled = guard(None, || {
        let held = crate::passthrough_delay_ex::held_vendor_err(cq);
        held.or_else(|| crate::passthrough::hooked(context).and_then(|h| h.vendor_err_of(cq)))
    });
    if let Some(vendor_err) = ruled {
        return vendor_err;
    }
    let own = POLLERS.lock().get(&(cq as usize)).and_then(|p| p.2);
    // SAFETY: the provider's own member for this CQ, as libibverbs calls it.
    own.map_or(0, |f| unsafe { f(cq) })
}

/// Records the current completion of `cq` through its own readers.
///
/// # Safety
/// `cq` is one of our extended CQs; if `ret` is 0 a completion is current
/// on this thread.
unsafe fn current_completion(cq: *mut ibv_cq_ex, ret: c_int) {
    if ret != 0 {
        return;
    }
    guard((), || {
        if !softverbs_trace::on() {
            return;
        }
        // SAFETY: per the contract: the public fields and the readers of
        // the current completion (our own functions, set at creation).
        let (context, w) = unsafe {
            let mut w = ibv_wc::ZEROED;
            w.wr_id = addr_of!((*cq).wr_id).read();
            w.status = addr_of!((*cq).status).read();
            let read =
                |f: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>| f.map_or(0, |f| f(cq));
            w.opcode = read(addr_of!((*cq).read_opcode).read());
            w.byte_len = read(addr_of!((*cq).read_byte_len).read());
            w.vendor_err = read(addr_of!((*cq).read_vendor_err).read());
            w.qp_num = read(addr_of!((*cq).read_qp_num).read());
            w.src_qp = read(addr_of!((*cq).read_src_qp).read());
            w.wc_flags = addr_of!((*cq).read_wc_flags).read().map_or(0, |f| f(cq));
            w.u.imm_data = read(addr_of!((*cq).read_imm_data).read());
            (addr_of!((*cq).context).read(), w)
        };
        // SAFETY: our context.
        unsafe { emit(context, Record::Completion(completion(cq as usize, &w))) };
    });
}

unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    let ret = forward!(
        ctx!(*cq),
        req_notify_cq(cq, solicited_only),
        libc::EOPNOTSUPP
    );
    // SAFETY: one of our CQs.
    if let (Some(d), 0) = (delays_of(unsafe { addr_of!((*cq).context).read() }), ret) {
        guard((), || d.arm(cq as usize));
    }
    // SAFETY: one of our CQs and its context.
    unsafe {
        let context = addr_of!((*cq).context).read();
        status(
            context,
            "ibv_req_notify_cq",
            None,
            ret,
            || json!({ "cq": address(cq), "solicited_only": solicited_only != 0 }),
        )
    };
    ret
}

unsafe extern "C" fn create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    // SAFETY: one of our PDs.
    let context = unsafe { addr_of!((*pd).context).read() };
    let ah = forward!(ctx!(*pd), create_ah(pd, attr), missing());
    // SAFETY: our context and the caller's attr.
    unsafe {
        pointer(context, "ibv_create_ah", None, ah, || {
            let a = attr.read();
            json!({
                "pd": address(pd), "is_global": a.is_global, "dgid": gid(&a.grh.dgid),
                "sgid_index": a.grh.sgid_index, "port": a.port_num, "ah": address(ah),
            })
        })
    };
    ah
}

unsafe extern "C" fn destroy_ah(ah: *mut ibv_ah) -> c_int {
    // SAFETY: one of our AHs, live until the call below.
    let context = unsafe { addr_of!((*ah).context).read() };
    let ret = forward!(ctx!(*ah), destroy_ah(ah), libc::EOPNOTSUPP);
    // SAFETY: our context; only the AH's address is used.
    unsafe {
        status(
            context,
            "ibv_destroy_ah",
            None,
            ret,
            || json!({ "ah": address(ah) }),
        )
    };
    ret
}

fn gid(g: &ibv_gid) -> String {
    crate::convert::gid_from_c(g).to_string()
}

/// The QP number of a QP that exists.
///
/// # Safety
/// `qp` is NULL or one of our live QPs.
unsafe fn qp_num(qp: *mut ibv_qp) -> Option<u32> {
    // SAFETY: per the contract; a plain field read.
    (!qp.is_null()).then(|| unsafe { addr_of!((*qp).qp_num).read() })
}

fn init_args(a: &ibv_qp_init_attr) -> Value {
    json!({
        "qp_type": a.qp_type, "send_cq": address(a.send_cq), "recv_cq": address(a.recv_cq),
        "srq": address(a.srq), "max_send_wr": a.cap.max_send_wr, "max_recv_wr": a.cap.max_recv_wr,
        "max_send_sge": a.cap.max_send_sge, "max_recv_sge": a.cap.max_recv_sge,
        "max_inline_data": a.cap.max_inline_data, "sq_sig_all": a.sq_sig_all,
    })
}

unsafe extern "C" fn create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    // SAFETY: one of our PDs.
    let context = unsafe { addr_of!((*pd).context).read() };
    let qp = forward!(ctx!(*pd), create_qp(pd, attr), missing());
    // SAFETY: NULL or the QP just made.
    guard((), || unsafe { remember_qp(context, qp) });
    // SAFETY: our context, the caller's attr (with the actual caps
    // written back on success) and the new QP.
    unsafe {
        pointer(context, "ibv_create_qp", qp_num(qp), qp, || {
            init_args(&attr.read())
        })
    };
    qp
}

unsafe extern "C" fn create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    let qp = forward!(context, create_qp_ex(context, attr), missing());
    // SAFETY: the caller's attr; `comp_mask` is always there.
    let with_ops =
        unsafe { addr_of!((*attr).comp_mask).read() } & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
    if !qp.is_null() && with_ops {
        guard((), || {
            // SAFETY: a QP just made with the `ibv_wr_*` members, not yet
            // handed out: its `wr_complete` is ours to replace, once the
            // provider's is kept.
            unsafe {
                let x = qp as *mut ibv_qp_ex;
                if let Some(own) = addr_of!((*x).wr_complete).read() {
                    COMPLETERS.lock().insert(x as usize, own);
                    addr_of_mut!((*x).wr_complete).write(Some(wr_complete));
                }
            }
        });
    }
    // SAFETY: NULL or the QP just made.
    guard((), || unsafe { remember_qp(context, qp) });
    // SAFETY: ibv_qp_init_attr_ex starts with ibv_qp_init_attr's fields;
    // `send_ops_flags` is read only if the mask says it is there.
    unsafe {
        pointer(context, "ibv_create_qp_ex", qp_num(qp), qp, || {
            let mut args = init_args(&(attr as *const ibv_qp_init_attr).read());
            if with_ops {
                args["send_ops_flags"] = json!(addr_of!((*attr).send_ops_flags).read());
            }
            args
        })
    };
    qp
}

/// `ibv_wr_complete` of a traced extended QP: the batch is recorded as
/// the WRs it posts (all or none).
unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    // SAFETY: an extended QP, whose base names its context.
    let context = unsafe { addr_of!((*addr_of_mut!((*qp).qp_base)).context).read() };
    // The batch is softverbs' own on a soft QP: recorded before it is
    // taken (inside the section wr_start entered). A real provider's is
    // its own business: only the result is recorded.
    let soft = softverbs_trace::on() && crate::passthrough::hooked(context).is_none();
    // SAFETY: per the above.
    let wrs = guard(Vec::new(), || {
        if soft {
            unsafe { crate::qp_ex::batch_for_trace(qp) }
        } else {
            Vec::new()
        }
    });
    let own = COMPLETERS.lock().get(&(qp as usize)).copied();
    // SAFETY: the provider's own member for this QP.
    let ret = own.map_or(libc::EINVAL, |f| unsafe { f(qp) });
    guard((), || {
        if !softverbs_trace::on() {
            return;
        }
        // SAFETY: our QP; its base names its context (plain field reads).
        let (context, num) = unsafe {
            let base = addr_of_mut!((*qp).qp_base);
            (
                addr_of!((*base).context).read(),
                addr_of!((*base).qp_num).read(),
            )
        };
        let mut record = Verb {
            verb: "ibv_wr_complete".into(),
            qp: Some(num),
            ret: i64::from(ret),
            errno: ret.max(0),
            ..Verb::default()
        };
        if ret == 0 {
            record.wrs = wrs;
        }
        // SAFETY: our context.
        unsafe { emit(context, Record::Verb(record)) };
    });
    ret
}

/// The attributes `modify_qp` was given, by mask.
fn qp_attr_args(a: &ibv_qp_attr, mask: u32) -> Value {
    let mut m = Map::new();
    m.insert("attr_mask".into(), json!(format!("{mask:#x}")));
    let mut put = |bit: u32, key: &str, v: Value| {
        if mask & bit != 0 {
            m.insert(key.into(), v);
        }
    };
    put(IBV_QP_STATE, "qp_state", json!(a.qp_state));
    put(IBV_QP_CUR_STATE, "cur_qp_state", json!(a.cur_qp_state));
    put(
        IBV_QP_ACCESS_FLAGS,
        "qp_access_flags",
        json!(a.qp_access_flags),
    );
    put(IBV_QP_PKEY_INDEX, "pkey_index", json!(a.pkey_index));
    put(IBV_QP_PORT, "port_num", json!(a.port_num));
    put(IBV_QP_QKEY, "qkey", json!(a.qkey));
    put(IBV_QP_AV, "dgid", json!(gid(&a.ah_attr.grh.dgid)));
    put(IBV_QP_AV, "sgid_index", json!(a.ah_attr.grh.sgid_index));
    put(IBV_QP_PATH_MTU, "path_mtu", json!(a.path_mtu));
    put(IBV_QP_TIMEOUT, "timeout", json!(a.timeout));
    put(IBV_QP_RETRY_CNT, "retry_cnt", json!(a.retry_cnt));
    put(IBV_QP_RNR_RETRY, "rnr_retry", json!(a.rnr_retry));
    put(IBV_QP_RQ_PSN, "rq_psn", json!(a.rq_psn));
    put(
        IBV_QP_MAX_QP_RD_ATOMIC,
        "max_rd_atomic",
        json!(a.max_rd_atomic),
    );
    put(
        IBV_QP_MIN_RNR_TIMER,
        "min_rnr_timer",
        json!(a.min_rnr_timer),
    );
    put(IBV_QP_SQ_PSN, "sq_psn", json!(a.sq_psn));
    put(
        IBV_QP_MAX_DEST_RD_ATOMIC,
        "max_dest_rd_atomic",
        json!(a.max_dest_rd_atomic),
    );
    put(
        IBV_QP_PATH_MIG_STATE,
        "path_mig_state",
        json!(a.path_mig_state),
    );
    put(IBV_QP_DEST_QPN, "dest_qp_num", json!(a.dest_qp_num));
    Value::Object(m)
}

unsafe extern "C" fn modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    let ret = forward!(ctx!(*qp), modify_qp(qp, attr, mask), libc::EOPNOTSUPP);
    // SAFETY: the caller's attr, and our QP.
    let reset = ret == 0
        && mask as u32 & IBV_QP_STATE != 0
        && unsafe { addr_of!((*attr).qp_state).read() } == IBV_QPS_RESET;
    if let (true, Some(h), Some(n)) = (reset, crate::passthrough::hooked(ctx!(*qp)), unsafe {
        qp_num(qp)
    }) {
        // A QP that starts again is no longer failed by a rule.
        guard((), || h.forget_qp(n));
    }
    // SAFETY: one of our QPs and the caller's attr.
    unsafe {
        let context = addr_of!((*qp).context).read();
        status(context, "ibv_modify_qp", qp_num(qp), ret, || {
            qp_attr_args(&attr.read(), mask as u32)
        })
    };
    ret
}

unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    let ret = forward!(
        ctx!(*qp),
        query_qp(qp, attr, mask, init_attr),
        libc::EOPNOTSUPP
    );
    // SAFETY: one of our QPs; the attr is read only as the verb filled it.
    unsafe {
        let context = addr_of!((*qp).context).read();
        status(context, "ibv_query_qp", qp_num(qp), ret, || {
            let state = (ret == 0).then(|| addr_of!((*attr).qp_state).read());
            json!({ "attr_mask": format!("{:#x}", mask), "qp_state": state })
        })
    };
    ret
}

unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: one of our QPs, live until the call below.
    let (context, num) = unsafe { (addr_of!((*qp).context).read(), qp_num(qp)) };
    // What softverbs keeps of the QP leaves before the QP does (a rule on
    // another thread must not modify it, and its address may be a new
    // QP's as soon as it is freed), and comes back if it stays.
    // Events a rule raised for it are not the kernel's: libibverbs' destroy
    // must not wait for their acks.
    let hooked = crate::passthrough::hooked(context);
    let (completer, entry, raised) = guard((None, None, 0), || {
        let completer = COMPLETERS.lock().remove(&(qp as usize));
        let entry = hooked.zip(num).and_then(|(h, n)| h.remove_qp(n));
        // SAFETY: a live QP of the hooked context.
        let raised = hooked.map_or(0, |h| unsafe { h.discount_raised(qp) });
        (completer, entry, raised)
    });
    let ret = forward!(ctx!(*qp), destroy_qp(qp), libc::EOPNOTSUPP);
    guard((), || {
        if ret != 0 {
            if let Some(f) = completer {
                COMPLETERS.lock().insert(qp as usize, f);
            }
            if let Some(h) = hooked {
                // SAFETY: the QP stays, live.
                unsafe { h.recount_raised(qp, raised) };
            }
            if let (Some(h), Some(n), Some(p)) = (hooked, num, entry) {
                h.add_qp(n, p);
            }
        } else if let (Some(h), Some(n)) = (hooked, num) {
            h.forget_qp(n);
        }
    });
    // SAFETY: our context.
    unsafe { status(context, "ibv_destroy_qp", num, ret, || Value::Null) };
    ret
}

unsafe extern "C" fn attach_mcast(qp: *mut ibv_qp, g: *const ibv_gid, lid: u16) -> c_int {
    let ret = forward!(ctx!(*qp), attach_mcast(qp, g, lid), libc::EOPNOTSUPP);
    // SAFETY: one of our QPs and the caller's GID.
    unsafe {
        let context = addr_of!((*qp).context).read();
        status(
            context,
            "ibv_attach_mcast",
            qp_num(qp),
            ret,
            || json!({ "gid": gid(&g.read()) }),
        )
    };
    ret
}

unsafe extern "C" fn detach_mcast(qp: *mut ibv_qp, g: *const ibv_gid, lid: u16) -> c_int {
    let ret = forward!(ctx!(*qp), detach_mcast(qp, g, lid), libc::EOPNOTSUPP);
    // SAFETY: one of our QPs and the caller's GID.
    unsafe {
        let context = addr_of!((*qp).context).read();
        status(
            context,
            "ibv_detach_mcast",
            qp_num(qp),
            ret,
            || json!({ "gid": gid(&g.read()) }),
        )
    };
    ret
}

/// The bytes of a WR's SGEs.
///
/// # Safety
/// `sg_list` holds `num_sge` entries (a WR the verb accepted).
unsafe fn sge_bytes(sg_list: *const ibv_sge, num_sge: c_int) -> u64 {
    (0..num_sge.max(0) as usize)
        // SAFETY: per the contract.
        .map(|i| u64::from(unsafe { addr_of!((*sg_list.add(i)).length).read() }))
        .sum()
}

/// A send WR the verb accepted, as the trace records it.
///
/// # Safety
/// `w` is a WR `ibv_post_send` accepted (its SGE list valid).
unsafe fn send_wr(w: &ibv_send_wr) -> Wr {
    // SAFETY: the union member of the WR's opcode.
    let target = unsafe {
        match w.opcode {
            IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_RDMA_READ => {
                Some((w.wr.rdma.remote_addr, w.wr.rdma.rkey))
            }
            IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
                Some((w.wr.atomic.remote_addr, w.wr.atomic.rkey))
            }
            _ => None,
        }
    };
    Wr {
        wr_id: w.wr_id,
        opcode: wr_opcode_name(w.opcode).to_string(),
        // SAFETY: per the contract.
        len: unsafe { sge_bytes(w.sg_list, w.num_sge) },
        flags: w.send_flags,
        remote_addr: target.map(|t| t.0),
        rkey: target.map(|t| t.1),
        imm: Wr::imm_of(
            w.opcode,
            // SAFETY: both union members are a u32; reading either is
            // defined.
            crate::convert::wr_imm_or_rkey(w.opcode, unsafe { w.u.imm_data }),
        ),
    }
}

unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    let next = next(ctx!(*qp));
    // SAFETY: the arguments of this member.
    let ret = unsafe {
        post_through(
            &next,
            Queue::Send,
            qp_num(qp),
            next.ops().post_send,
            (qp, wr, bad_wr),
        )
    };
    guard((), || {
        if !softverbs_trace::on() {
            return;
        }
        let mut record = Verb {
            verb: "ibv_post_send".into(),
            ret: i64::from(ret),
            errno: ret.max(0),
            ..Verb::default()
        };
        // SAFETY: the caller's list, unchanged by the verb; on failure
        // `*bad_wr` is the WR it refused, and the ones before were
        // accepted (their SGE lists read by the verb already). A failure
        // that names no WR records none.
        let stop = unsafe { stopped_at(ret, bad_wr) };
        let bad = stop.unwrap_or(std::ptr::null_mut());
        let mut cur = if stop.is_some() {
            wr
        } else {
            std::ptr::null_mut()
        };
        while !cur.is_null() && cur != bad {
            // SAFETY: as above.
            let w = unsafe { &*cur };
            // SAFETY: an accepted WR.
            record.wrs.push(unsafe { send_wr(w) });
            cur = w.next;
        }
        if !bad.is_null() {
            // SAFETY: the refused WR, a caller-provided struct.
            record.args.insert(
                "bad_wr".into(),
                json!(unsafe { addr_of!((*bad).wr_id).read() }),
            );
        }
        // SAFETY: one of our QPs and its context.
        unsafe {
            record.qp = qp_num(qp);
            emit(addr_of!((*qp).context).read(), Record::Verb(record));
        }
    });
    ret
}

/// Forwards a post verb, through the rules of a hooked pass-through
/// context, with `*bad_wr` cleared first so that it never holds a stale
/// value.
///
/// # Safety
/// The arguments libibverbs gave the post member; `member` is the
/// provider's own for them.
unsafe fn post_through<W: WrList, Q>(
    next: &Next,
    queue: Queue,
    qp_num: Option<u32>,
    member: Option<PostFn<W, Q>>,
    (target, wr, bad_wr): (*mut Q, *mut W, *mut *mut W),
) -> c_int {
    if !bad_wr.is_null() {
        // SAFETY: the caller's out pointer.
        unsafe { *bad_wr = std::ptr::null_mut() };
    }
    match (next.0, member) {
        // SAFETY: per the contract, to the real provider's member.
        (Some(h), Some(f)) => guard(libc::EIO, || unsafe {
            h.post(queue, qp_num, f, (target, wr, bad_wr))
        }),
        // SAFETY: per the contract, to softverbs' own.
        (None, Some(f)) => unsafe { f(target, wr, bad_wr) },
        (_, None) => libc::EOPNOTSUPP,
    }
}

/// Where a post that returned `ret` stopped: `Some(NULL)` when it took
/// every WR, `Some(wr)` for the WR it refused (those before it were
/// taken), `None` when it failed without saying which.
///
/// # Safety
/// `bad_wr` is NULL or the post's out pointer, cleared before the post.
unsafe fn stopped_at<W>(ret: c_int, bad_wr: *mut *mut W) -> Option<*mut W> {
    if ret == 0 {
        return Some(std::ptr::null_mut());
    }
    // SAFETY: per the contract.
    let bad = if bad_wr.is_null() {
        std::ptr::null_mut()
    } else {
        unsafe { *bad_wr }
    };
    (!bad.is_null()).then_some(bad)
}

/// Records a receive WR list up to where the post stopped
/// ([`stopped_at`]: all of it, up to a refused WR, or none).
///
/// # Safety
/// The list is the caller's; the WRs before `bad` were accepted.
unsafe fn recv_record(
    name: &str,
    wr: *mut ibv_recv_wr,
    stop: Option<*mut ibv_recv_wr>,
    ret: c_int,
) -> Verb {
    let bad = stop.unwrap_or(std::ptr::null_mut());
    let mut record = Verb {
        verb: name.into(),
        ret: i64::from(ret),
        errno: ret.max(0),
        ..Verb::default()
    };
    let mut cur = if stop.is_some() {
        wr
    } else {
        std::ptr::null_mut()
    };
    while !cur.is_null() && cur != bad {
        // SAFETY: per the contract.
        let w = unsafe { &*cur };
        record.wrs.push(Wr {
            wr_id: w.wr_id,
            opcode: "RECV".into(),
            // SAFETY: an accepted WR.
            len: unsafe { sge_bytes(w.sg_list, w.num_sge) },
            ..Wr::default()
        });
        cur = w.next;
    }
    if !bad.is_null() {
        // SAFETY: the refused WR, a caller-provided struct.
        record.args.insert(
            "bad_wr".into(),
            json!(unsafe { addr_of!((*bad).wr_id).read() }),
        );
    }
    record
}

unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    let next = next(ctx!(*qp));
    // SAFETY: the arguments of this member.
    let ret = unsafe {
        post_through(
            &next,
            Queue::Recv,
            qp_num(qp),
            next.ops().post_recv,
            (qp, wr, bad_wr),
        )
    };
    guard((), || {
        if !softverbs_trace::on() {
            return;
        }
        // SAFETY: as in post_send.
        unsafe {
            let mut record = recv_record("ibv_post_recv", wr, stopped_at(ret, bad_wr), ret);
            record.qp = qp_num(qp);
            emit(addr_of!((*qp).context).read(), Record::Verb(record));
        }
    });
    ret
}

unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    let next = next(ctx!(*srq));
    // SAFETY: the arguments of this member.
    let ret = unsafe {
        post_through(
            &next,
            Queue::SrqRecv,
            None,
            next.ops().post_srq_recv,
            (srq, wr, bad_wr),
        )
    };
    guard((), || {
        if !softverbs_trace::on() {
            return;
        }
        // SAFETY: as in post_send, for one of our SRQs.
        unsafe {
            let mut record = recv_record("ibv_post_srq_recv", wr, stopped_at(ret, bad_wr), ret);
            record.args.insert("srq".into(), json!(address(srq)));
            emit(addr_of!((*srq).context).read(), Record::Verb(record));
        }
    });
    ret
}

unsafe extern "C" fn create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    // SAFETY: one of our PDs.
    let context = unsafe { addr_of!((*pd).context).read() };
    let srq = forward!(ctx!(*pd), create_srq(pd, attr), missing());
    // SAFETY: our context and the caller's attr.
    unsafe {
        pointer(context, "ibv_create_srq", None, srq, || {
            let a = addr_of!((*attr).attr).read();
            json!({ "pd": address(pd), "max_wr": a.max_wr, "max_sge": a.max_sge, "srq_limit": a.srq_limit, "srq": address(srq) })
        })
    };
    srq
}

unsafe extern "C" fn modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int {
    let ret = forward!(ctx!(*srq), modify_srq(srq, attr, mask), libc::EOPNOTSUPP);
    // SAFETY: one of our SRQs and the caller's attr.
    unsafe {
        let context = addr_of!((*srq).context).read();
        status(context, "ibv_modify_srq", None, ret, || {
            let a = attr.read();
            json!({ "srq": address(srq), "attr_mask": mask, "max_wr": a.max_wr, "srq_limit": a.srq_limit })
        })
    };
    ret
}

unsafe extern "C" fn query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    let ret = forward!(ctx!(*srq), query_srq(srq, attr), libc::EOPNOTSUPP);
    // SAFETY: one of our SRQs.
    unsafe {
        let context = addr_of!((*srq).context).read();
        status(
            context,
            "ibv_query_srq",
            None,
            ret,
            || json!({ "srq": address(srq) }),
        )
    };
    ret
}

unsafe extern "C" fn destroy_srq(srq: *mut ibv_srq) -> c_int {
    // SAFETY: one of our SRQs, live until the call below.
    let context = unsafe { addr_of!((*srq).context).read() };
    let ret = forward!(ctx!(*srq), destroy_srq(srq), libc::EOPNOTSUPP);
    // SAFETY: our context; only the SRQ's address is used.
    unsafe {
        status(
            context,
            "ibv_destroy_srq",
            None,
            ret,
            || json!({ "srq": address(srq) }),
        )
    };
    ret
}

/// `ibv_get_cq_event` handed out a completion event.
///
/// # Safety
/// Called with a CQ of this provider.
pub unsafe extern "C" fn cq_event(cq: *mut ibv_cq) {
    forward!(ctx!(*cq), cq_event(cq), ());
    guard((), || {
        if !softverbs_trace::on() {
            return;
        }
        let record = Record::Event(Event {
            event: "COMP".into(),
            object: Some(address(cq)),
            ..Event::default()
        });
        // SAFETY: one of our CQs and its context.
        unsafe { emit(addr_of!((*cq).context).read(), record) };
    });
}

/// `ibv_get_async_event` handed out an event.
///
/// # Safety
/// Called with a context of this provider and the event just filled.
pub unsafe extern "C" fn async_event(context: *mut ibv_context, event: *mut ibv_async_event) {
    forward!(context, async_event(context, event), ());
    guard((), || {
        if !softverbs_trace::on() {
            return;
        }
        // SAFETY: the event libibverbs just filled; the union member its
        // type names (a QP's number is read from the QP, which the event
        // holds a reference to until acked).
        let record = unsafe {
            let kind = addr_of!((*event).event_type).read();
            let element = addr_of!((*event).element).read();
            let mut e = Event {
                event: event_name(kind).to_string(),
                ..Event::default()
            };
            match crate::event_acks::event_element(kind) {
                EventElement::Qp => e.qp = qp_num(element.qp),
                EventElement::Cq => e.object = Some(address(element.cq)),
                EventElement::Srq => e.object = Some(address(element.srq)),
                EventElement::Wq => e.object = Some(address(element.wq)),
                EventElement::Port => e.port = Some(element.port_num as u32),
            }
            Record::Event(e)
        };
        // SAFETY: our context.
        unsafe { emit(context, record) };
    });
}
