//! The one place a channel command blocks, made a thread cancellation
//! point as the kernel's is.
//!
//! On the kernel, GET_EVENT blocks in `write(2)`, a cancellation point:
//! `pthread_cancel` of a thread waiting in `rdma_get_cm_event` ends the
//! thread there, glibc unwinding its frames with a forced unwind. Here the
//! command runs in this library's Rust code, which must not be unwound
//! mid-way (a foreign unwind reaching `catch_unwind` aborts the process).
//! So the command's own work runs in `crate::guard::guard`, with
//! cancellation disabled, and the wait happens outside it, in frames that
//! hold nothing to drop and are declared able to unwind ("C-unwind"), the
//! functions they call included: a forced unwind may cross such frames.

use std::os::raw::{c_int, c_void};

// glibc's blocking calls, declared able to unwind: a cancellation in them
// leaves by a forced unwind through their caller.
extern "C-unwind" {
    #[link_name = "recv"]
    fn recv_cancellable(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize;
    #[link_name = "poll"]
    fn poll_cancellable(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int;
    fn pthread_testcancel();
}

/// Where the kernel's `write` looks for a cancellation on entry: a thread
/// already cancelled ends here, before its command runs (an event stays
/// queued for another thread).
pub fn cancellation_point() {
    // SAFETY: no arguments; it returns, or unwinds a cancelled thread
    // through frames declared able to unwind.
    unsafe { pthread_testcancel() }
}

/// Blocks until channel `fd` has an event. A signal interrupts the wait
/// as it does the kernel's command: a handler installed with SA_RESTART
/// restarts it, any other makes it fail with EINTR (`rdma_get_cm_event`
/// returns -1, errno EINTR, and a server whose SIGINT handler sets a flag
/// stops). The wait is a `recv` that peeks at the channel's socket, which
/// the kernel restarts or interrupts by that rule; `poll` would always be
/// interrupted. A channel closed by another thread meanwhile keeps this
/// one waiting for good: the kernel's file lives until the blocked
/// command returns, and none comes (rping's CM thread sits there while
/// its main thread closes the channel and exits).
pub fn wait_readable(fd: c_int) -> Result<(), i32> {
    let mut byte = 0u8;
    // SAFETY: receives at most one byte into a local; MSG_PEEK leaves it
    // in the socket. Nothing in this frame needs dropping if a
    // cancellation unwinds it.
    let n = unsafe { recv_cancellable(fd, (&mut byte as *mut u8).cast(), 1, libc::MSG_PEEK) };
    match n {
        1.. => Ok(()),
        // The service's end is closed (a hang-up).
        0 => wait_for_ever(),
        _ => match std::io::Error::last_os_error().raw_os_error() {
            // Made non-blocking meanwhile: the caller looks again.
            Some(libc::EAGAIN) => Ok(()),
            // The number names no socket any more: closed under us. Or
            // the service's end was closed holding bytes a stray write
            // put there (a channel closed without close(2), whose end
            // goes at once): a reset, hung up as 0 above.
            Some(libc::EBADF | libc::ENOTSOCK | libc::ECONNRESET) => wait_for_ever(),
            e => Err(e.unwrap_or(libc::EIO)),
        },
    }
}

/// Sleeps until the process ends or the thread is cancelled (signals are
/// handled and slept through).
pub fn wait_for_ever() -> ! {
    loop {
        // SAFETY: poll on no descriptors only sleeps.
        unsafe { poll_cancellable(std::ptr::null_mut(), 0, -1) };
    }
}
