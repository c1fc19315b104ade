//! Copies between the provider and memory of its own process at addresses
//! an application gave, through `process_vm_readv`/`process_vm_writev` on
//! the calling thread's id: the kernel checks the range against the page
//! tables and fails where a load or store would fault (SIGSEGV, or SIGBUS
//! past a file's end), as `copy_from_user` and `copy_to_user` do for a
//! kernel verb. No Rust reference to the application's memory is formed.
//!
//! The thread's id, not the process's: once the main thread has ended
//! with `pthread_exit` while others work on, the process's id names a
//! zombie thread with no memory, and the calls answer ESRCH; a running
//! thread's id names the same memory for as long as it runs.

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Once;

/// Our pid once asked (0: not yet, or forgotten in a forked child). glibc
/// no longer caches it, and a `getpid` per copy cost about 100 ns of the
/// kernel-checked copy's 1.2 us (docs/perf.md).
static PID: AtomicI32 = AtomicI32::new(0);
static FORGET_IN_CHILDREN: Once = Once::new();

thread_local! {
    /// The calling thread's id once asked (0: not yet, or forgotten in a
    /// forked child, whose one thread has another id).
    static TID: Cell<libc::pid_t> = const { Cell::new(0) };
}

/// A forked child has another pid, and its one thread (the one that
/// forked) another id: the next copy asks again.
extern "C" fn forget_pid() {
    PID.store(0, Ordering::Relaxed);
    TID.with(|tid| tid.set(0));
}

/// Registers [`forget_pid`] to run in forked children, once.
fn forget_in_children() {
    FORGET_IN_CHILDREN.call_once(|| {
        // SAFETY: registers a child handler that only stores to an atomic
        // static and to the forking thread's own thread-local cell (no
        // allocation: its initialiser is const), which is all a handler
        // may do after a fork; it runs in the child before fork returns
        // there, so no copy of the child sees the parent's ids.
        unsafe { libc::pthread_atfork(None, None, Some(forget_pid)) };
    });
}

/// The calling thread's id, in a forked child too: the copies name it.
pub(crate) fn own_tid() -> libc::pid_t {
    forget_in_children();
    TID.with(|cached| match cached.get() {
        0 => {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            cached.set(tid);
            tid
        }
        tid => tid,
    })
}

/// Our pid, in a forked child too: the same-host path's shared words name
/// it.
pub(crate) fn own_pid() -> libc::pid_t {
    forget_in_children();
    match PID.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: getpid has no preconditions.
            let pid = unsafe { libc::getpid() };
            PID.store(pid, Ordering::Relaxed);
            pid
        }
        pid => pid,
    }
}

/// The `len` bytes at `addr`. Err: the errno, EFAULT where they are not
/// all readable; another one (EPERM) where the kernel refuses the call
/// itself (a seccomp policy).
pub fn read(addr: u64, len: usize) -> Result<Vec<u8>, i32> {
    let mut out = vec![0u8; len];
    read_into(addr, &mut out).map(|()| out)
}

/// Fills `dst` with the bytes at `addr`. Err as for [`read`].
pub fn read_into(addr: u64, dst: &mut [u8]) -> Result<(), i32> {
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: dst.len(),
    };
    // SAFETY: the kernel fills `dst`, which we borrow mutably for the
    // call, from our own process's range at `addr`, checked against the
    // page tables (EFAULT, not a fault). A concurrent write by the
    // application to that range is a racing read, as a NIC's DMA makes.
    let n = unsafe { libc::process_vm_readv(own_tid(), &local, 1, &remote, 1, 0) };
    done(n, dst.len())
}

/// Writes `bytes` at `addr`. Err as for [`read`].
pub fn write(addr: u64, bytes: &[u8]) -> Result<(), i32> {
    let local = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: the kernel only reads `bytes` (borrowed for the call) and
    // writes our own process's range at `addr`, checked as in `read`; the
    // application owns that memory and no reference to it is formed.
    let n = unsafe { libc::process_vm_writev(own_tid(), &local, 1, &remote, 1, 0) };
    done(n, bytes.len())
}

/// A copy's outcome: all `len` bytes, or the errno (a short copy stopped
/// at an unmapped page: EFAULT).
fn done(n: isize, len: usize) -> Result<(), i32> {
    match usize::try_from(n) {
        Ok(n) if n == len => Ok(()),
        Ok(_) => Err(libc::EFAULT),
        Err(_) => Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EFAULT)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_memory_is_copied_and_an_unmapped_page_is_efault() {
        let mut word = [1u8, 2, 3, 4];
        let addr = word.as_mut_ptr() as u64;
        assert_eq!(read(addr, 4), Ok(vec![1, 2, 3, 4]));
        assert_eq!(write(addr + 1, &[9, 9]), Ok(()));
        assert_eq!(std::hint::black_box(word), [1, 9, 9, 4]);
        assert_eq!(read(8, 4), Err(libc::EFAULT), "page 0 is never mapped");
        assert_eq!(write(8, &[0]), Err(libc::EFAULT));
        assert_eq!(read(addr, 0), Ok(vec![]));
        let mut two = [0u8; 2];
        assert_eq!(read_into(addr + 2, &mut two), Ok(()));
        assert_eq!(two, [9, 4]);
        assert_eq!(read_into(8, &mut two), Err(libc::EFAULT));
    }

    #[test]
    fn a_forked_child_copies_with_its_own_ids() {
        // SAFETY: getpid and gettid have no preconditions.
        let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
        assert_eq!((own_pid(), own_tid()), (pid, tid));
        // SAFETY: the child only loads and stores atomics and a
        // thread-local cell, asks its ids and leaves with _exit (no
        // allocation, no lock another thread of the test harness could
        // hold); the parent reaps it.
        let status = unsafe {
            match libc::fork() {
                0 => libc::_exit(i32::from(
                    own_pid() != libc::getpid() || own_tid() != libc::gettid(),
                )),
                child => {
                    let mut status = 0;
                    libc::waitpid(child, &mut status, 0);
                    status
                }
            }
        };
        assert_eq!(status, 0, "the child copied with its parent's ids");
    }

    /// Each thread copies with its own id (the process's may name a
    /// main thread that has ended).
    #[test]
    fn each_thread_copies_with_its_own_id() {
        let main = own_tid();
        let other = std::thread::spawn(|| {
            let word = [5u8];
            (own_tid(), read(word.as_ptr() as u64, 1))
        })
        .join()
        .unwrap();
        // SAFETY: gettid has no preconditions.
        assert_eq!(main, unsafe { libc::gettid() });
        assert_ne!(other.0, main);
        assert_eq!(other.1, Ok(vec![5]));
    }
}
