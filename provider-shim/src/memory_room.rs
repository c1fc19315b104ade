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
//! The allocation is large enough that the C library maps it and unmaps
//! it on free (two system calls): creating verbs are not on a data path.

/// What a new object may allocate besides its queues, and what the
/// process keeps for the work of the objects it has.
const MARGIN: usize = 1 << 20;

/// What a new context allocates: its progress thread's stack (the
/// standard library's 2 MiB), its send batch and receive buffers.
pub(crate) const CONTEXT: usize = 4 << 20;

/// Whether `bytes` and the margin can be allocated now.
pub(crate) fn room_for(bytes: usize) -> bool {
    let mut probe: Vec<u8> = Vec::new();
    probe
        .try_reserve_exact(bytes.saturating_add(MARGIN))
        .is_ok()
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
