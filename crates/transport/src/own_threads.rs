//! The threads softverbs starts in a process, counted, and whether the
//! application's own threads have all ended.
//!
//! A process lives while any of its threads does. A kernel provider starts
//! none, so a program whose main thread ends with `pthread_exit` ends when
//! its last other thread does: glibc then calls `exit(0)`. softverbs' own
//! threads (each context's progress thread, the rdma_cm service's, a
//! pass-through device's fault alarm) would keep such a process alive for
//! ever. So each counts itself while it runs ([`OwnThread`]), and a
//! progress thread (or the rdma_cm service) looks now and then whether the
//! main thread has ended and the process's thread count is exactly ours
//! ([`application_ended`]); if so it ends the process as glibc would have
//! ([`end_process`]).
//!
//! The look is race-free because it never lists threads: the kernel's
//! count of the process's threads, read once, is compared with ours, which
//! is never above the number of our threads that exist (a thread counts
//! itself once it runs and uncounts itself before it ends), and is read
//! before and after unchanged. Equality then means that no thread of the
//! application existed at that read; and once none exists none can start
//! again (only a thread starts a thread, and ours start only ours).

use crate::same_host::liveness::main_thread_and_threads;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Our running threads and how many have ended, with the process they are
/// counted for: the process id in the high 32 bits, the running count in
/// the next 16, the ended count (wrapping) in the low 16. One word, changed
/// by compare-and-swap: a child that `fork` made while another thread held
/// a lock would wait for it for ever; a word inherited from the parent
/// names the parent's pid, and counts nothing of the child's.
static COUNTS: AtomicU64 = AtomicU64::new(0);

/// Set by the one thread that ends the process.
static ENDING: AtomicBool = AtomicBool::new(false);

/// A thread softverbs started, counted as such until dropped, which the
/// thread does before it ends.
#[must_use = "the thread counts as softverbs' own only while this lives"]
#[derive(Debug)]
pub struct OwnThread {
    pid: u32,
}

impl OwnThread {
    /// Counts the calling thread, which softverbs started (so it exists
    /// whenever it is counted), and blocks the application's signals on it
    /// ([`block_application_signals`]).
    pub fn register() -> OwnThread {
        block_application_signals();
        let pid = std::process::id();
        update(|(counted_for, running, ended)| {
            let running = if counted_for == pid { running } else { 0 };
            (pid, running.saturating_add(1), ended)
        });
        OwnThread { pid }
    }
}

impl Drop for OwnThread {
    fn drop(&mut self) {
        let pid = self.pid;
        update(|(counted_for, running, ended)| match counted_for == pid {
            true => (pid, running.saturating_sub(1), ended.wrapping_add(1)),
            false => (counted_for, running, ended),
        });
    }
}

/// Blocks every signal on the calling thread but the faults it may raise
/// itself. A signal sent to the process then goes to a thread of the
/// application, and its handler runs there, as with a kernel provider,
/// which starts no thread: run on one of softverbs' threads, a handler
/// runs application code where the count above takes it for softverbs'
/// (the process was ended under a handler still running, a helper found),
/// and may find the driver locked by the code it interrupted. The thread
/// inherits the mask of the application thread that started it, which
/// may block a fault: a fault on an unmapped MR buffer must reach the
/// provider's handler (which turns it into an error), or a blocked
/// SIGSEGV kills the process. glibc keeps its own two signals unblocked.
fn block_application_signals() {
    let _ = swap_signal_mask(&application_signals());
}

/// Runs `spawn`, which starts one of softverbs' threads, with the
/// application's signals blocked on the calling thread, then gives it its
/// mask back: the new thread inherits the blocked mask from its first
/// instruction. Blocked by [`OwnThread::register`] alone, a signal sent
/// before the new thread ran that far ran the application's handler on
/// it (a loaded fresh run of main_thread_exit.c's signal mode).
pub fn spawning<R>(spawn: impl FnOnce() -> R) -> R {
    let old = swap_signal_mask(&application_signals());
    let spawned = spawn();
    if let Some(old) = old {
        let _ = swap_signal_mask(&old);
    }
    spawned
}

/// Unblocks every signal on the calling thread.
pub fn unblock_all_signals() {
    let _ = swap_signal_mask(&nix::sys::signal::SigSet::empty());
}

/// Sets the calling thread's signal mask to `mask`; the mask it had.
fn swap_signal_mask(mask: &nix::sys::signal::SigSet) -> Option<nix::sys::signal::SigSet> {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
    let mut old = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(mask), Some(&mut old)).ok()?;
    Some(old)
}

/// Every signal but the faults a thread raises itself.
fn application_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut blocked = SigSet::all();
    let faults = [
        Signal::SIGSEGV,
        Signal::SIGBUS,
        Signal::SIGFPE,
        Signal::SIGILL,
        Signal::SIGTRAP,
        Signal::SIGSYS,
    ];
    for fault in faults {
        blocked.remove(fault);
    }
    blocked
}

/// Applies `change` to [`COUNTS`] atomically.
fn update(change: impl Fn((u32, u16, u16)) -> (u32, u16, u16)) {
    let _ = COUNTS.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |word| {
        Some(encode(change(decode(word))))
    });
}

fn decode(word: u64) -> (u32, u16, u16) {
    ((word >> 32) as u32, (word >> 16) as u16, word as u16)
}

fn encode((pid, running, ended): (u32, u16, u16)) -> u64 {
    u64::from(pid) << 32 | u64::from(running) << 16 | u64::from(ended)
}

/// Whether the main thread has ended and every thread left in the process
/// is one of softverbs' (see the module's comment for why this cannot be
/// fooled by threads starting and ending meanwhile). False whenever that
/// cannot be told: the process then lives on, as it did before.
pub fn application_ended() -> bool {
    let before = COUNTS.load(Ordering::SeqCst);
    let Some((main_ended, threads)) = main_thread_stat() else {
        return false;
    };
    let after = COUNTS.load(Ordering::SeqCst);
    let (pid, running, _) = decode(before);
    // The ended main thread is in the kernel's count until the process
    // ends.
    before == after && pid == std::process::id() && main_ended && threads == u64::from(running) + 1
}

/// Whether the main thread has ended, and the process's thread count,
/// from `/proc/self/stat`, the main thread's, read once into the stack:
/// it is asked once a second of an idle process and allocates nothing
/// (run.sh counts allocations).
fn main_thread_stat() -> Option<(bool, u64)> {
    use std::io::Read;
    let mut buf = [0u8; 1024];
    let len = std::fs::File::open("/proc/self/stat")
        .and_then(|mut file| file.read(&mut buf))
        .ok()?;
    let (ended, threads) = main_thread_and_threads(&buf[..len])?;
    Some((ended, threads?))
}

/// Ends the process with `exit(0)`, as glibc does after its last thread,
/// once: its exit handlers run as at any exit, on a thread of their own,
/// so that verbs they make are served by the progress threads, which run
/// on until the handlers close their contexts.
pub fn end_process() {
    if ENDING.swap(true, Ordering::SeqCst) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("softverbs-exit".into())
        .spawn(|| {
            // The exit handlers are the application's code: its signals
            // reach them, as they would its last thread.
            unblock_all_signals();
            std::process::exit(0)
        });
    if spawned.is_err() {
        ENDING.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test's main thread runs: the application has not ended, and
    /// each registration counts until dropped.
    #[test]
    fn a_running_main_thread_is_a_running_application() {
        let own = OwnThread::register();
        let (pid, running, _) = decode(COUNTS.load(Ordering::SeqCst));
        assert_eq!(pid, std::process::id());
        assert!(running >= 1);
        assert!(!application_ended());
        let ended = decode(COUNTS.load(Ordering::SeqCst)).2;
        drop(own);
        assert_ne!(decode(COUNTS.load(Ordering::SeqCst)).2, ended);
    }

    /// The test's main thread runs.
    #[test]
    fn our_stat_says_the_main_thread_runs() {
        let (ended, threads) = main_thread_stat().unwrap();
        assert!(!ended);
        assert!(threads >= 1);
    }

    #[test]
    fn the_counts_round_trip_through_the_word() {
        let word = encode((1, 7, 3));
        assert_eq!(decode(word), (1, 7, 3));
    }
}
