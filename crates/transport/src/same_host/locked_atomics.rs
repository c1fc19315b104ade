//! Atomics that are atomic host-wide. A same-host peer executes an atomic
//! on our memory as read, compute, write under one of our region's
//! stripe locks (`peer_target.rs`); so our own engine takes the same lock
//! around the atomics it executes for requests from the wire, and every
//! atomic on a word, whoever executes it, is atomic with respect to every
//! other (IBV_ATOMIC_HCA: with respect to other RDMA atomics, not to the
//! CPU's).

use super::atomic_lock::LockTable;
use softverbs_engine::{HostMemory, MemResult, MemoryFault};
use std::time::Duration;

/// How long an atomic waits for a stripe a peer holds (one copy).
const LOCK_WAIT: Duration = Duration::from_secs(1);

/// `mem` with its atomics taken under `locks`.
pub struct LockedAtomics<'a> {
    /// The memory.
    pub mem: &'a mut dyn HostMemory,
    /// Our region's stripe locks.
    pub locks: LockTable<'a>,
}

impl std::fmt::Debug for LockedAtomics<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockedAtomics").finish_non_exhaustive()
    }
}

impl HostMemory for LockedAtomics<'_> {
    fn read(&self, addr: u64, dst: &mut [u8]) -> MemResult<()> {
        self.mem.read(addr, dst)
    }

    fn write(&mut self, addr: u64, src: &[u8]) -> MemResult<()> {
        self.mem.write(addr, src)
    }

    fn compare_swap(&mut self, addr: u64, compare: u64, swap: u64) -> MemResult<u64> {
        // A stripe held past the wait by a live peer: the word cannot be
        // reached atomically, answered as a fault (remote access error).
        let _held = self
            .locks
            .lock(addr, LOCK_WAIT)
            .map_err(|_| MemoryFault { addr })?;
        self.mem.compare_swap(addr, compare, swap)
    }

    fn fetch_add(&mut self, addr: u64, add: u64) -> MemResult<u64> {
        let _held = self
            .locks
            .lock(addr, LOCK_WAIT)
            .map_err(|_| MemoryFault { addr })?;
        self.mem.fetch_add(addr, add)
    }
}
