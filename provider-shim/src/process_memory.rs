//! [`HostMemory`] over the process's own address space: what an MR's
//! addresses mean to a provider running inside the application.
//!
//! A NIC pins registered pages; a software provider cannot, so an
//! application that unmaps (or write-protects) a buffer it registered
//! would crash the whole process at the next peer WRITE or READ if the
//! provider copied with plain loads and stores. Two ways avoid that, and
//! the engine turns the fault either reports into the completion a NIC
//! gives for a translation fault:
//!
//! - **guarded** (the default): copies and atomics through the small
//!   routines of guarded_access.rs, whose faults a signal handler turns
//!   into an error; as fast as a plain copy.
//! - **kernel**: `process_vm_readv`/`process_vm_writev` on our own pid,
//!   which return EFAULT instead of faulting, and for atomics a no-op
//!   atomic add done by the kernel (`FUTEX_WAKE_OP` adding 0) that proves
//!   the word writable first. One system call per access (docs/perf.md);
//!   used where the signal handler cannot be installed or was displaced
//!   by the application's own, and by the same-host path (another pid).
//!
//! Left open, as documented in docs/conformance.md: a buffer unmapped and
//! mapped again at the same address is reached in its new mapping (as an
//! on-demand-paging MR of a real NIC would), and in kernel mode an
//! application thread that unmaps a word between an atomic's probe and the
//! atomic itself can still fault; both are application bugs a NIC would
//! not notice at all.

use crate::{fault_handler_watch, guarded_access, own_memory};
use softverbs_engine::{HostMemory, MemResult, MemoryFault};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// How accesses are made safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Plain instructions whose faults a signal handler recovers.
    Guarded,
    /// Cross-memory attach on the own pid.
    Kernel,
    /// Neither is available (a seccomp policy refusing process_vm_*, and no
    /// handler): plain copies, as before, with a log line.
    Unchecked,
}

/// How many accesses pass between two checks that our fault handler is
/// still installed (a `sigaction` query, one system call).
const RECHECK_EVERY: usize = 4096;

/// The application's memory, reached by address.
#[derive(Debug)]
pub struct ProcessMemory {
    /// The mode asked for.
    mode: Mode,
    /// Whether the kernel allows cross-memory attach on our own pid.
    kernel_works: bool,
    /// Guarded accesses since the handler was last seen installed.
    since_check: AtomicUsize,
    /// [`fault_handler_watch::changes`] at the last check of the handler:
    /// a change since makes the next access check again.
    changes_seen: AtomicU64,
}

impl ProcessMemory {
    /// The calling process's memory, in the safest mode available.
    pub fn new() -> ProcessMemory {
        let mode = if guarded_access::install() {
            Mode::Guarded
        } else {
            Mode::Kernel
        };
        ProcessMemory::with_mode(mode)
    }

    /// The calling process's memory in `mode`; where that mode is not
    /// available accesses fall back to the next one (Guarded, Kernel,
    /// Unchecked).
    pub fn with_mode(mode: Mode) -> ProcessMemory {
        let mut mem = ProcessMemory {
            mode,
            kernel_works: true,
            since_check: AtomicUsize::new(0),
            changes_seen: AtomicU64::new(0),
        };
        let probe = 0x5a5a_u32.to_ne_bytes();
        let mut back = [0u8; 4];
        mem.kernel_works =
            own_memory::read_into(probe.as_ptr() as u64, &mut back).is_ok() && back == probe;
        if mem.mode() == Mode::Unchecked {
            softverbs_transport::say!(
                "softverbs: process_vm_readv is refused here and no fault handler could be \
                 installed; registered memory is accessed directly, so an unmapped MR buffer \
                 crashes the process"
            );
        }
        mem
    }

    /// The mode accesses use now: Guarded while our fault handler is
    /// installed (checked every [`RECHECK_EVERY`] accesses, and at once
    /// after the application changed a fault signal's action), else Kernel
    /// where the kernel allows it, else Unchecked.
    pub fn mode(&self) -> Mode {
        if self.mode == Mode::Guarded && faults_reach_handlers() && self.handler_in_place() {
            Mode::Guarded
        } else if self.mode != Mode::Unchecked && self.kernel_works {
            Mode::Kernel
        } else {
            Mode::Unchecked
        }
    }

    /// Whether our fault handler still handles faults. Once it is seen
    /// displaced, the counter stays at the limit so every later access
    /// asks again (only after a displacement, which is rare).
    fn handler_in_place(&self) -> bool {
        let changes = fault_handler_watch::changes();
        if self.since_check.fetch_add(1, Ordering::Relaxed) < RECHECK_EVERY
            && self.changes_seen.load(Ordering::Relaxed) == changes
        {
            return true;
        }
        let still = guarded_access::installed();
        let next = if still { 0 } else { RECHECK_EVERY };
        self.since_check.store(next, Ordering::Relaxed);
        self.changes_seen.store(changes, Ordering::Relaxed);
        still
    }

    /// Proves the aligned 8-byte word at `addr` mapped and writable without
    /// changing it: the kernel atomically adds 0 to its first half
    /// (FUTEX_WAKE_OP), failing with EFAULT where a store would fault.
    fn probe_writable(addr: u64) -> MemResult<()> {
        static NOBODY_WAITS: AtomicU32 = AtomicU32::new(0);
        // FUTEX_OP(ADD, oparg 0, CMP_EQ, cmparg 0): add 0, wake nobody.
        const OP_ADD_ZERO: u32 = (libc::FUTEX_OP_ADD as u32) << 28;
        // SAFETY: FUTEX_WAKE_OP reads and atomically updates the u32 at
        // `addr` (adding 0 keeps its value, so a concurrent application
        // access sees no change) and wakes nobody on NOBODY_WAITS, a live
        // static; on an unmapped or read-only word it returns EFAULT.
        let r = unsafe {
            libc::syscall(
                libc::SYS_futex,
                NOBODY_WAITS.as_ptr(),
                libc::FUTEX_WAKE_OP | libc::FUTEX_PRIVATE_FLAG,
                0,
                0usize,
                addr as *mut u32,
                OP_ADD_ZERO,
            )
        };
        if r < 0 {
            Err(MemoryFault { addr })
        } else {
            Ok(())
        }
    }

    /// The word at `addr` for a kernel-mode or unchecked atomic, once
    /// proven writable (kernel mode).
    fn atomic_word(&self, addr: u64, mode: Mode) -> MemResult<&AtomicU64> {
        if mode == Mode::Kernel {
            ProcessMemory::probe_writable(addr)?;
        }
        // SAFETY: the engine passes an 8-aligned address inside an MR with
        // REMOTE_ATOMIC, and (kernel mode) the probe just showed the word
        // mapped and writable. An AtomicU64 view keeps the access atomic
        // against the application's own atomics on the same word; no
        // non-atomic Rust reference to it exists.
        Ok(unsafe { AtomicU64::from_ptr(addr as *mut u64) })
    }
}

impl Default for ProcessMemory {
    fn default() -> Self {
        ProcessMemory::new()
    }
}

thread_local! {
    /// Whether this thread leaves SIGSEGV and SIGBUS unblocked (asked once
    /// per thread: threads set their mask when they start).
    static FAULTS_UNBLOCKED: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Whether a fault on this thread reaches the signal handlers. A fault on
/// a thread that blocks SIGSEGV or SIGBUS kills the process whatever the
/// handler (applications that block every signal and `sigwait` do that),
/// so there the kernel's checked copies are used instead.
fn faults_reach_handlers() -> bool {
    FAULTS_UNBLOCKED.with(|cached| {
        if let Some(known) = cached.get() {
            return known;
        }
        // SAFETY: pthread_sigmask with a NULL new set only reads this
        // thread's mask into `mask`, a local; sigismember only reads it.
        let unblocked = unsafe {
            let mut mask: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut mask) == 0
                && libc::sigismember(&mask, libc::SIGSEGV) == 0
                && libc::sigismember(&mask, libc::SIGBUS) == 0
        };
        cached.set(Some(unblocked));
        unblocked
    })
}

// The engine calls these only for ranges it checked against a live MR
// (key, PD, bounds, access); whether the memory is still mapped is what
// the guarded routines or the kernel check for us.
impl HostMemory for ProcessMemory {
    fn read(&self, addr: u64, dst: &mut [u8]) -> MemResult<()> {
        match self.mode() {
            // SAFETY: the handler is installed; `dst` is the engine's own
            // buffer (never faults) and cannot overlap application memory.
            Mode::Guarded => {
                unsafe { guarded_access::copy(dst.as_mut_ptr(), addr as *const u8, dst.len()) }
                    .map_err(|_| MemoryFault { addr })
            }
            Mode::Kernel => own_memory::read_into(addr, dst).map_err(|_| MemoryFault { addr }),
            Mode::Unchecked => {
                // SAFETY: the unchecked fallback: `addr..addr+dst.len()`
                // lies in a registered MR and cannot overlap `dst`, the
                // engine's own buffer.
                unsafe {
                    std::ptr::copy_nonoverlapping(addr as *const u8, dst.as_mut_ptr(), dst.len())
                };
                Ok(())
            }
        }
    }

    fn write(&mut self, addr: u64, src: &[u8]) -> MemResult<()> {
        match self.mode() {
            // SAFETY: as in read, the other way round: `src` is engine
            // memory; no Rust reference to the application's bytes exists.
            Mode::Guarded => {
                unsafe { guarded_access::copy(addr as *mut u8, src.as_ptr(), src.len()) }
                    .map_err(|_| MemoryFault { addr })
            }
            Mode::Kernel => own_memory::write(addr, src).map_err(|_| MemoryFault { addr }),
            Mode::Unchecked => {
                // SAFETY: the unchecked fallback: `addr..addr+src.len()`
                // lies in a registered MR with write rights; `src` is
                // engine memory.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), addr as *mut u8, src.len()) };
                Ok(())
            }
        }
    }

    fn compare_swap(&mut self, addr: u64, compare: u64, swap: u64) -> MemResult<u64> {
        let mode = self.mode();
        if mode == Mode::Guarded {
            // SAFETY: the handler is installed; the engine passes an
            // 8-aligned word inside an MR with REMOTE_ATOMIC; the locked
            // instruction is atomic against the application's atomics.
            return unsafe { guarded_access::compare_swap(addr as *mut u64, compare, swap) }
                .map_err(|_| MemoryFault { addr });
        }
        let word = self.atomic_word(addr, mode)?;
        match word.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(old) | Err(old) => Ok(old),
        }
    }

    fn fetch_add(&mut self, addr: u64, add: u64) -> MemResult<u64> {
        let mode = self.mode();
        if mode == Mode::Guarded {
            // SAFETY: as in compare_swap.
            return unsafe { guarded_access::fetch_add(addr as *mut u64, add) }
                .map_err(|_| MemoryFault { addr });
        }
        Ok(self
            .atomic_word(addr, mode)?
            .fetch_add(add, Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every checked mode, each test runs in.
    fn modes() -> [ProcessMemory; 2] {
        let guarded = ProcessMemory::new();
        assert_eq!(
            guarded.mode(),
            Mode::Guarded,
            "the fault handler installs here"
        );
        let kernel = ProcessMemory::with_mode(Mode::Kernel);
        assert_eq!(
            kernel.mode(),
            Mode::Kernel,
            "cross-memory attach works here"
        );
        [guarded, kernel]
    }

    /// On a thread that blocks SIGSEGV a fault would kill the process
    /// whatever the handler: accesses there go through the kernel.
    #[test]
    fn a_thread_that_blocks_sigsegv_uses_the_kernel() {
        let mem = ProcessMemory::new();
        assert_eq!(mem.mode(), Mode::Guarded);
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: blocks SIGSEGV on this test thread only; the
                // set is a local.
                unsafe {
                    let mut set: libc::sigset_t = std::mem::zeroed();
                    libc::sigemptyset(&mut set);
                    libc::sigaddset(&mut set, libc::SIGSEGV);
                    libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
                }
                assert_eq!(mem.mode(), Mode::Kernel);
                let addr = page(libc::PROT_READ | libc::PROT_WRITE);
                unmap(addr);
                let mut mem = ProcessMemory::new();
                assert!(mem.write(addr, &[1; 8]).is_err(), "a fault, not a crash");
            });
        });
    }

    #[test]
    fn reads_writes_and_atomics_reach_real_memory() {
        for mut mem in modes() {
            let mut buf = vec![0u64; 4];
            let base = buf.as_mut_ptr() as u64;
            mem.write(base, &7u64.to_ne_bytes()).unwrap();
            assert_eq!(mem.fetch_add(base, 3), Ok(7));
            assert_eq!(mem.compare_swap(base, 10, 99), Ok(10));
            assert_eq!(mem.compare_swap(base, 10, 5), Ok(99));
            let mut out = [0u8; 8];
            mem.read(base, &mut out).unwrap();
            assert_eq!(u64::from_ne_bytes(out), 99);
            assert_eq!(buf[0], 99);
        }
    }

    fn page(prot: libc::c_int) -> u64 {
        pages(1, prot)
    }

    /// A fresh anonymous mapping of `n` pages with `prot`.
    fn pages(n: usize, prot: libc::c_int) -> u64 {
        // SAFETY: a new private anonymous mapping; no existing memory is
        // affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096 * n,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as u64
    }

    /// Unmaps one page.
    fn unmap(addr: u64) {
        // SAFETY: unmaps a page this test mapped and no reference points to.
        assert_eq!(unsafe { libc::munmap(addr as *mut libc::c_void, 4096) }, 0);
    }

    #[test]
    fn unmapped_memory_faults_instead_of_crashing() {
        let addr = page(libc::PROT_READ | libc::PROT_WRITE);
        unmap(addr);
        for mut mem in modes() {
            let fault = MemoryFault { addr };
            assert_eq!(mem.read(addr, &mut [0; 16]), Err(fault));
            assert_eq!(mem.write(addr, &[1; 16]), Err(fault));
            assert_eq!(mem.fetch_add(addr, 1), Err(fault));
            assert_eq!(mem.compare_swap(addr, 0, 1), Err(fault));
        }
    }

    #[test]
    fn read_only_memory_can_be_read_but_not_written() {
        let addr = page(libc::PROT_READ);
        for mut mem in modes() {
            assert_eq!(mem.read(addr, &mut [0; 8]), Ok(()));
            assert!(mem.write(addr, &[1; 8]).is_err());
            assert!(mem.fetch_add(addr, 1).is_err());
            assert!(mem.compare_swap(addr, 0, 1).is_err());
        }
        unmap(addr);
    }

    #[test]
    fn a_copy_that_runs_into_a_hole_faults() {
        // Two pages, the second taken away again: the copy starts in the
        // first and runs into the hole.
        let addr = pages(2, libc::PROT_READ | libc::PROT_WRITE);
        unmap(addr + 4096);
        for mut mem in modes() {
            assert!(mem.write(addr + 4000, &[1; 200]).is_err());
            assert!(mem.read(addr + 4000, &mut [0; 200]).is_err());
            assert_eq!(mem.write(addr + 3000, &[1; 200]), Ok(()));
        }
        unmap(addr);
    }
}
