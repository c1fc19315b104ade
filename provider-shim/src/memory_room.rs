//! Whether the process can still allocate what a new object needs.
//!
//! A kernel provider's creating verbs fail with ENOMEM when memory is
//! short (`RLIMIT_AS`, `vm.overcommit_memory=2`); a Rust allocation that
//! fails aborts the process. The engine takes its queues' room fallibly
//! (its `room.rs`), but making an object also allocates a little
//! elsewhere (the handle's slot, the event tables, a context's buffers
//! and its progress thread's stack), and those allocations abort if they
//! fail. So a creating verb first tries an allocation of what it will
//! need and a margin, fallibly, and frees it at once: where that fails the
//! verb fails with ENOMEM, and the process keeps the margin for the work
//! of what it already has (a helper's program under `RLIMIT_AS` aborted in
//! `ibv_create_qp`, `ibv_create_cq`, `ibv_open_device` and, posting to a
//! QP made at the edge, in `ibv_post_recv`).
//!
//! The try is a mapping of that size, unmapped at once (two system
//! calls; creating verbs are not on a data path): it meets the address
//! space limit and the commit limit as the allocations it stands for
//! would, whichever thread's heap they come from, and leaves the C
//! library's thresholds alone (a freed `malloc` of a mebibyte would have
//! raised its mmap threshold for the whole process).

/// What a new object may allocate besides its queues, and what the
/// process keeps for the work of the objects it has.
const MARGIN: usize = 1 << 20;

/// What a new context allocates: its progress thread's stack (the
/// standard library's 2 MiB), its send batch and receive buffers.
pub(crate) const CONTEXT: usize = 4 << 20;

/// Whether `bytes` and the margin can be allocated now.
pub(crate) fn room_for(bytes: usize) -> bool {
    let len = bytes.saturating_add(MARGIN);
    let (prot, flags) = (
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
    );
    // SAFETY: a new anonymous mapping wherever the kernel puts it (no
    // address asked for, so nothing mapped is replaced); nobody else
    // knows of it, and it is unmapped at once, whole, untouched.
    unsafe {
        let at = libc::mmap(std::ptr::null_mut(), len, prot, flags, -1, 0);
        if at == libc::MAP_FAILED {
            return false;
        }
        libc::munmap(at, len);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_there_for_a_little_and_not_for_everything() {
        assert!(room_for(0));
        assert!(!room_for(usize::MAX >> 1));
    }
}
