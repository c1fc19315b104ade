//! The exec lock a context's progress thread holds for its life, in the
//! region its same-host peers map (softverbs_transport's `layout.rs`,
//! `H_EXEC_LOCK`): a robust, process-shared pthread mutex. The kernel
//! marks a robust mutex whose holder dies (FUTEX_OWNER_DIED in its futex
//! word), at the thread's exit or kill, and an exec kills every other
//! thread of the process before it replaces the image; so a peer, which
//! reads the mark before each copy into this process's memory, never
//! writes into a new image that took the old one's addresses, and pays
//! no system call for knowing it.

use softverbs_transport::driver::ExecLock;

// The region keeps room for glibc's mutex.
const _: () = assert!(std::mem::size_of::<libc::pthread_mutex_t>() <= 64);
const _: () = assert!(std::mem::align_of::<libc::pthread_mutex_t>() <= 8);

/// Makes the mutex at `lock` and takes it, on the progress thread; then
/// peers may trust it. Left unarmed (peers ask through the pid instead)
/// if any step fails.
pub fn hold(lock: &ExecLock<'_>) {
    let at = lock.addr() as *mut libc::pthread_mutex_t;
    if lock.bytes() < std::mem::size_of::<libc::pthread_mutex_t>() || at.is_null() {
        return;
    }
    // SAFETY: `at` is 8-byte aligned and names `lock.bytes()` bytes of the
    // region's shared mapping (checked above to hold a mutex), which
    // lives until after this thread has ended (the driver's shared state
    // holds it, and the thread gives the mutex back first, `give_back`).
    // Nothing else of this process touches those bytes.
    if unsafe { hold_at(at) } {
        lock.arm(true);
    }
}

/// Makes a robust, process-shared mutex at `at` and takes it: whether it
/// is held.
///
/// # Safety
/// `at` is aligned for a `pthread_mutex_t` and names memory for one that
/// lives until this thread gives it back or ends, and that nothing else
/// of this process touches meanwhile (other processes may read its futex
/// word with atomic loads, as the C library writes it atomically).
unsafe fn hold_at(at: *mut libc::pthread_mutex_t) -> bool {
    // SAFETY: per the contract; only raw pointers are passed, so no Rust
    // reference is formed to memory another process reads; `attr` is a
    // local, initialised by pthread_mutexattr_init before any use.
    unsafe {
        let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
        libc::pthread_mutexattr_init(attr.as_mut_ptr()) == 0
            && libc::pthread_mutexattr_setpshared(attr.as_mut_ptr(), libc::PTHREAD_PROCESS_SHARED)
                == 0
            && libc::pthread_mutexattr_setrobust(attr.as_mut_ptr(), libc::PTHREAD_MUTEX_ROBUST) == 0
            && libc::pthread_mutex_init(at, attr.as_ptr()) == 0
            && libc::pthread_mutex_lock(at) == 0
    }
}

/// Gives the mutex back as the progress thread ends, so that the kernel
/// has nothing to mark at its exit (the mapping may be gone by then).
/// Peers then find it free: the context is ending.
pub fn give_back(lock: &ExecLock<'_>) {
    let at = lock.addr() as *mut libc::pthread_mutex_t;
    // SAFETY: as in `hold`; this thread locked it there, or the unlock
    // fails (EPERM) and changes nothing.
    unsafe { libc::pthread_mutex_unlock(at) };
}

#[cfg(test)]
mod tests {
    use super::hold_at;
    use std::sync::atomic::{AtomicU32, Ordering};

    const OWNER_DIED: u32 = 0x4000_0000;
    const TID: u32 = 0x3fff_ffff;

    /// The kernel's part the peers rely on: a process whose thread holds
    /// the lock and then execs finds the lock marked (owner died) while
    /// the new image runs, before it could map anything at the old
    /// addresses; and held (its thread id) until then.
    #[test]
    fn an_exec_marks_the_lock_its_thread_held() {
        let sleep = c"/bin/sleep";
        let argv = [c"sleep".as_ptr(), c"30".as_ptr(), std::ptr::null()];
        // SAFETY: an anonymous shared page, a pipe and a fork whose child
        // makes only async-signal-safe calls but the mutex's (on memory
        // of its own, fresh) before it execs or _exits; the parent reads
        // the futex word with atomic loads and ends the child.
        unsafe {
            let page = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(page, libc::MAP_FAILED);
            // `fds`: child to parent (its end of file: the exec); `go`:
            // parent to child (exec now).
            let (mut fds, mut go) = ([0; 2], [0; 2]);
            assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
            assert_eq!(libc::pipe2(go.as_mut_ptr(), libc::O_CLOEXEC), 0);
            let child = libc::fork();
            assert!(child >= 0);
            if child == 0 {
                let mut byte = 0u8;
                libc::close(fds[0]);
                libc::close(go[1]);
                if !hold_at(page.cast())
                    || libc::write(fds[1], c"h".as_ptr().cast(), 1) != 1
                    || libc::read(go[0], (&raw mut byte).cast(), 1) != 1
                {
                    libc::_exit(2);
                }
                libc::execv(sleep.as_ptr(), argv.as_ptr());
                libc::_exit(3);
            }
            libc::close(fds[1]);
            libc::close(go[0]);
            let futex = &*page.cast::<AtomicU32>();
            let mut byte = 0u8;
            // Held: its thread id, not marked.
            assert_eq!(libc::read(fds[0], (&raw mut byte).cast(), 1), 1);
            let held = futex.load(Ordering::Acquire);
            assert_eq!((held & TID, held & OWNER_DIED), (child as u32, 0));
            // Exec now; the pipe's end of file: the child has exec'd.
            assert_eq!(libc::write(go[1], c"g".as_ptr().cast(), 1), 1);
            assert_eq!(libc::read(fds[0], (&raw mut byte).cast(), 1), 0);
            let after = futex.load(Ordering::Acquire);
            let alive = libc::kill(child, 0) == 0;
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, std::ptr::null_mut(), 0);
            libc::close(fds[0]);
            libc::close(go[1]);
            libc::munmap(page, 4096);
            assert!(alive, "the new image runs");
            assert_ne!(after & OWNER_DIED, 0, "marked by the exec: {after:#x}");
        }
    }
}
