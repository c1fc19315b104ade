//! The same-host path's shared state and cross-process access.
//!
//! Each context publishes, in a memory region it shares with its peers on
//! the host (a memfd passed through the daemon), what a NIC would read
//! from its own tables: MRs, QPs, receive queues, a ring of deliveries
//! and a lock table for atomics. A requester whose peer QP is on the same
//! host executes its operations against that state itself (see
//! `softverbs_engine::direct`). Everything in a region is an
//! [`AtomicU64`] word, so two processes reading and writing it at once is
//! well defined; the layouts over those words are in the submodules.

pub mod accessors;
pub mod arena;
pub mod atomic_lock;
pub mod deliveries;
pub mod doorbell;
pub mod full;
pub mod host;
pub mod inbound;
pub mod layout;
pub mod liveness;
pub mod locked_atomics;
pub mod mr_slots;
pub mod own_region;
pub mod peer_target;
mod probing;
pub mod qp_slots;
pub mod recv_ring;
pub mod ring_share;
mod seqlock;
pub mod vacant_pages;

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

pub use softverbs_engine::direct::Seg;

/// A region of shared words: a mapping of a memfd in the provider, a
/// plain vector in tests.
pub trait Words: Send + Sync {
    /// The region, as atomic 64-bit words.
    fn words(&self) -> &[AtomicU64];
}

impl Words for Box<[AtomicU64]> {
    fn words(&self) -> &[AtomicU64] {
        self
    }
}

/// Why a cross-process copy failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerFault {
    /// Our own memory could not be reached (EFAULT on a local segment).
    Local,
    /// The peer's memory could not be reached (EFAULT on its segments).
    Remote,
    /// The peer process is gone (ESRCH).
    Gone,
    /// The kernel refused cross-memory attach (EPERM: another user, Yama
    /// ptrace_scope, a seccomp policy).
    Denied,
}

/// Access to other processes on the host, implemented by the provider
/// (over `process_vm_readv`/`process_vm_writev` and `mmap`) and by tests.
pub trait CrossProcess: Send + Sync {
    /// Copies the bytes of our `local` segments, in order, into the
    /// peer's `remote` segments (equal total lengths).
    fn write_peer(&self, pid: i32, local: &[Seg], remote: &[Seg]) -> Result<(), PeerFault>;
    /// Copies `data` into the peer's `remote` segments.
    fn write_peer_bytes(&self, pid: i32, data: &[u8], remote: &[Seg]) -> Result<(), PeerFault>;
    /// Copies the peer's `remote` segments, in order, into our `local`
    /// segments (equal total lengths).
    fn read_peer(&self, pid: i32, remote: &[Seg], local: &[Seg]) -> Result<(), PeerFault>;
    /// Copies the peer's `remote` segments into `out`.
    fn read_peer_bytes(&self, pid: i32, remote: &[Seg], out: &mut [u8]) -> Result<(), PeerFault>;
    /// Whether the kernel lets us reach process `pid`'s memory.
    fn probe(&self, pid: i32) -> Result<(), PeerFault>;
    /// A new shared region of `bytes` bytes (a multiple of 8), zeroed,
    /// with the descriptor that lets a peer map it.
    fn create_region(&self, bytes: usize) -> io::Result<(OwnedFd, Arc<dyn Words>)>;
    /// Maps a peer's region, read and write, `bytes` long.
    fn map_region(&self, fd: &OwnedFd, bytes: usize) -> io::Result<Arc<dyn Words>>;
    /// Our pid, as a peer's shared words name us (asked of the kernel at
    /// every call unless the implementation keeps it).
    fn own_pid(&self) -> i32 {
        liveness::own_pid()
    }
}
