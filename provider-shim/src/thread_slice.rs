//! A short time slice for the progress thread.
//!
//! When the application spins (on a CQ, or on memory as `ib_write_lat`
//! does) on every CPU, a datagram wakes the progress thread, which then
//! waits for a CPU: Linux's fair scheduler (EEVDF) lets a running thread
//! finish its slice (about 3 ms), so each message waited that long
//! (docs/perf.md). A thread that asks for a shorter slice gets an earlier
//! deadline and, since Linux 6.12, preempts a thread with a longer one
//! when it wakes: the progress thread asks for one, unprivileged, so the
//! packet is taken in at once, while the time it runs is still accounted
//! fairly. Older kernels ignore the request.

use crate::ffi::{sched_attr, Zeroed};
use std::io;

/// The slice the progress thread asks for: Linux's smallest (0.1 ms).
const PROGRESS_SLICE_NS: u64 = 100_000;

/// Asks for a short slice for the calling thread if it runs under the
/// fair scheduler (`SCHED_OTHER`, its nice value unchanged); a thread of
/// an application run under a real-time policy keeps it, since a
/// real-time application's spinning threads would starve a fair one.
pub fn ask_for_short_slice() -> io::Result<()> {
    // SAFETY: sched_getscheduler takes a plain integer (0: the calling
    // thread) and touches no memory of ours.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy != libc::SCHED_OTHER {
        return Ok(());
    }
    let mut attr = sched_attr {
        size: std::mem::size_of::<sched_attr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_nice: nice_now(),
        sched_runtime: PROGRESS_SLICE_NS,
        ..sched_attr::ZEROED
    };
    // SAFETY: sched_setattr(pid 0 = the calling thread, attr, flags 0)
    // reads `attr.size` bytes from `attr`, a live local of exactly that
    // size that nothing else references; it writes into it only to report
    // the size it knows (E2BIG), through the pointer, which is mutable
    // and exclusive for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            0,
            &mut attr as *mut sched_attr,
            0u32,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The calling thread's nice value, which `sched_setattr` would otherwise
/// reset to 0.
fn nice_now() -> i32 {
    nix::errno::Errno::clear();
    // SAFETY: getpriority takes plain integers and touches no memory of
    // ours; -1 with errno set is its error, which leaves nice 0.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    if nice == -1 && nix::errno::Errno::last_raw() != 0 {
        0
    } else {
        nice
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request is accepted, and on kernels that keep it (6.12+) it
    /// reads back as asked.
    #[test]
    fn a_thread_gets_the_slice_it_asks_for() {
        std::thread::spawn(|| {
            ask_for_short_slice().expect("sched_setattr");
            let mut got = sched_attr::ZEROED;
            let size = std::mem::size_of::<sched_attr>() as u32;
            // SAFETY: sched_getattr(pid 0, attr, size, flags 0) writes at
            // most `size` bytes into `got`, a live local of that size.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_sched_getattr,
                    0,
                    &mut got as *mut sched_attr,
                    size,
                    0u32,
                )
            };
            assert_eq!(rc, 0);
            assert_eq!(got.sched_policy, libc::SCHED_OTHER as u32);
            assert!(
                got.sched_runtime == PROGRESS_SLICE_NS || got.sched_runtime == 0,
                "slice {}",
                got.sched_runtime
            );
        })
        .join()
        .unwrap();
    }
}
