//! `ibv_attach_mcast` and `ibv_detach_mcast`: a UD QP joins or leaves a
//! multicast group (the engine's rules; the context receives the group's
//! datagrams, on a socket of its own or through the host daemon, while
//! any of its QPs is in it).

use crate::context::state;
use crate::convert::gid_from_c;
use crate::ffi::*;
use crate::guard::verb;
use crate::verbs_basic::err;
use crate::verbs_qp::qp_id;
use softverbs_engine::{Gid, QpId, VerbsResult};
use std::io;
use std::os::raw::c_int;

type Change = fn(
    &softverbs_transport::Driver<crate::process_memory::ProcessMemory>,
    QpId,
    Gid,
) -> io::Result<VerbsResult<()>>;

/// Runs `change` for the QP and GID of a provider call: the engine's
/// errno, or the errno of the group's socket or the daemon that refused.
///
/// # Safety
/// `qp` is one of our QPs and `gid` a caller-provided GID.
unsafe fn membership(qp: *mut ibv_qp, gid: *const ibv_gid, change: Change) -> c_int {
    verb(|| {
        if gid.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: per the caller's contract.
        let (st, id, g) = unsafe { (state((*qp).context), qp_id(qp), gid_from_c(&*gid)) };
        match change(&st.driver, id, g) {
            Ok(Ok(())) => 0,
            Ok(Err(e)) => err(e),
            Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    })
}

/// `verbs_context_ops.attach_mcast` (the LID means nothing on RoCE).
///
/// # Safety
/// Called through libibverbs with one of our QPs and a caller-owned GID.
pub unsafe extern "C" fn attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, _lid: u16) -> c_int {
    // SAFETY: per the contract.
    unsafe { membership(qp, gid, |d, q, g| d.attach_mcast(q, g)) }
}

/// `verbs_context_ops.detach_mcast`.
///
/// # Safety
/// As for [`attach_mcast`].
pub unsafe extern "C" fn detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, _lid: u16) -> c_int {
    // SAFETY: per the contract.
    unsafe { membership(qp, gid, |d, q, g| d.detach_mcast(q, g)) }
}
