//! The threads softverbs started in this process, and whether every
//! thread of the application has ended.
//!
//! A process lives while any of its threads does. A kernel provider
//! starts none, so a program whose main thread ends with `pthread_exit`
//! ends when its last other thread does: glibc then calls `exit(0)`.
//! softverbs' own threads (each context's progress thread, the rdma_cm
//! service's) would keep such a process alive for ever. So each of them
//! is named here while it runs, and a progress thread with no verb to
//! serve looks now and then whether any other thread still runs
//! ([`application_ended`]); if none does, it ends the process as glibc
//! would have (`driver.rs`).

use parking_lot::Mutex;
use procfs::process::Process;
use procfs::ProcError;

/// softverbs' running threads: the process and thread ids (a child made
/// by `fork` inherits its parent's list, whose threads are not its own).
static OWN: Mutex<Vec<(u32, i32)>> = Mutex::new(Vec::new());

/// This thread counted as softverbs' own until dropped, which the thread
/// does before it ends (so an application thread given its id later is
/// never taken for one).
#[must_use = "the thread counts as softverbs' own only while this lives"]
#[derive(Debug)]
pub struct OwnThread {
    id: (u32, i32),
}

impl OwnThread {
    /// Counts the calling thread as softverbs' own.
    pub fn register() -> OwnThread {
        let id = (std::process::id(), this_thread());
        OWN.lock().push(id);
        OwnThread { id }
    }
}

impl Drop for OwnThread {
    fn drop(&mut self) {
        let mut own = OWN.lock();
        if let Some(i) = own.iter().position(|&t| t == self.id) {
            own.swap_remove(i);
        }
    }
}

fn this_thread() -> i32 {
    rustix::thread::gettid().as_raw_nonzero().get()
}

/// Whether every thread of this process that softverbs did not start has
/// ended (is a zombie, or gone). False whenever that cannot be told: the
/// process then lives on, as it did before.
pub fn application_ended() -> bool {
    // The main thread running is the usual answer, in one read.
    if !main_thread_ended() {
        return false;
    }
    let Ok(tasks) = Process::myself().and_then(|me| me.tasks()) else {
        return false;
    };
    let pid = std::process::id();
    let own: Vec<i32> = OWN
        .lock()
        .iter()
        .filter(|&&(p, _)| p == pid)
        .map(|&(_, tid)| tid)
        .collect();
    for task in tasks {
        let stat = match task.and_then(|t| t.stat()) {
            Ok(stat) => stat,
            Err(ProcError::NotFound(_)) => continue, // gone since the listing
            Err(_) => return false,
        };
        if !ended(stat.state) && !own.contains(&stat.pid) {
            return false;
        }
    }
    true
}

/// Whether the main thread has ended: the process's own stat is its
/// main thread's. Read into the stack, as this is asked once a second of
/// every idle process and allocates nothing (run.sh counts allocations).
fn main_thread_ended() -> bool {
    use std::io::Read;
    let mut buf = [0u8; 512];
    let Ok(mut file) = std::fs::File::open("/proc/self/stat") else {
        return false;
    };
    let Ok(len) = file.read(&mut buf) else {
        return false;
    };
    // "pid (comm) state ...": the command may hold anything, so the
    // state follows the last ')'.
    let stat = &buf[..len];
    let Some(close) = stat.iter().rposition(|&b| b == b')') else {
        return false;
    };
    stat.get(close + 2)
        .is_some_and(|&state| ended(char::from(state)))
}

/// Whether a thread in `state` (`/proc/.../stat`) has ended.
fn ended(state: char) -> bool {
    matches!(state, 'Z' | 'X' | 'x')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test's own threads run: the application has not ended, whoever
    /// counts as softverbs'.
    #[test]
    fn a_running_main_thread_is_a_running_application() {
        let _own = OwnThread::register();
        assert!(!application_ended());
    }

    #[test]
    fn the_main_thread_of_a_test_runs() {
        assert!(!main_thread_ended());
    }

    #[test]
    fn a_thread_counts_as_own_until_its_registration_drops() {
        let id = (std::process::id(), this_thread());
        let own = OwnThread::register();
        assert!(OWN.lock().contains(&id));
        drop(own);
        assert!(!OWN.lock().contains(&id));
    }
}
