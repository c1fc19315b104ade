//! The provider's `verbs_context_ops`. Members left NULL fall back to
//! libibverbs' dummy ops, which fail with EOPNOTSUPP: that is how an
//! unsupported verb answers (see docs/supported.md).

use crate::context::free_context;
use crate::ffi::{verbs_context_ops, Zeroed};
use crate::verbs_basic::*;
use crate::verbs_qp::*;

/// The ops table (read-only).
#[derive(Debug)]
pub struct ContextOps(pub verbs_context_ops);

// SAFETY: written once by a static initialiser, then only read; it holds
// only function pointers.
unsafe impl Sync for ContextOps {}

/// The verbs softverbs implements.
pub static CONTEXT_OPS: ContextOps = ContextOps(verbs_context_ops {
    query_device_ex: Some(query_device_ex),
    query_port: Some(query_port),
    free_context: Some(free_context),
    alloc_pd: Some(alloc_pd),
    dealloc_pd: Some(dealloc_pd),
    reg_mr: Some(reg_mr),
    dereg_mr: Some(dereg_mr),
    rereg_mr: Some(rereg_mr),
    create_cq: Some(create_cq),
    create_cq_ex: Some(crate::cq_ex::create_cq_ex),
    destroy_cq: Some(destroy_cq),
    resize_cq: Some(resize_cq),
    poll_cq: Some(poll_cq),
    req_notify_cq: Some(req_notify_cq),
    create_ah: Some(create_ah),
    destroy_ah: Some(destroy_ah),
    create_qp: Some(create_qp),
    create_qp_ex: Some(crate::qp_ex::create_qp_ex),
    modify_qp: Some(modify_qp),
    query_qp: Some(query_qp),
    destroy_qp: Some(destroy_qp),
    attach_mcast: Some(crate::verbs_mcast::attach_mcast),
    detach_mcast: Some(crate::verbs_mcast::detach_mcast),
    post_send: Some(post_send),
    post_recv: Some(post_recv),
    create_srq: Some(create_srq),
    modify_srq: Some(modify_srq),
    query_srq: Some(query_srq),
    destroy_srq: Some(destroy_srq),
    post_srq_recv: Some(post_srq_recv),
    ..<verbs_context_ops as Zeroed>::ZEROED
});
