//! Whether a process named in a shared word still exists.
//!
//! Lock words and claimed slots name the process that holds them, so a
//! peer that crashed while holding one can be recognised and its hold
//! broken instead of wedging everyone else. `kill(pid, 0)` sends nothing
//! and only reports whether the process exists.

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

/// True when `pid` names no process (ESRCH), or cannot name a single
/// process at all (zero or negative values, which `kill` would take as a
/// process group: a corrupt word, whose holder is treated as gone). A
/// process of another user (EPERM) is alive. A pid reused by a new
/// process reads as alive: the hold is then kept until that one ends.
pub fn is_gone(pid: i32) -> bool {
    if pid <= 0 {
        return true;
    }
    matches!(kill(Pid::from_raw(pid), None), Err(Errno::ESRCH))
}

/// True when `pid` names no process (see [`is_gone`]) or a zombie: a
/// process that has exited, whose parent has not reaped it yet. A zombie
/// has no memory and runs nothing, but `kill(pid, 0)` still finds it.
/// Reads `/proc/PID/stat` where the process exists. A process whose main
/// thread alone has ended (`pthread_exit`) reads as a zombie there too,
/// but counts its other threads, which run on: it has not ended.
pub fn has_ended(pid: i32) -> bool {
    if is_gone(pid) {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| stat_has_ended(&stat))
}

/// [`has_ended`] for a process whose `/proc/PID/stat` reads `stat`.
fn stat_has_ended(stat: &str) -> bool {
    match main_thread_and_threads(stat.as_bytes()) {
        Some((ended, threads)) => ended && !matches!(threads, Some(n) if n > 1),
        None => false,
    }
}

/// From a `/proc/PID/stat` line, whether its main thread has ended (a
/// zombie: the process's state is its main thread's) and, where the line
/// has it, the process's thread count. "PID (COMM) STATE PPID ...": COMM
/// may hold anything, so the fields follow the last ')'; the thread count
/// is the 20th field, the 18th after COMM. Reads bytes, so that a caller
/// may read the line into the stack (`own_threads.rs` allocates nothing).
pub(crate) fn main_thread_and_threads(stat: &[u8]) -> Option<(bool, Option<u64>)> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let ended = matches!(fields.next(), Some("Z" | "X" | "x"));
    let threads = fields.nth(16).and_then(|n| n.parse().ok());
    Some((ended, threads))
}

/// Our pid namespace, as the inode of `/proc/thread-self/ns/pid` (0:
/// unknown). Pids in shared words are compared within one namespace
/// only. The calling thread's, not `/proc/self`'s: once the main thread
/// has ended (`pthread_exit`) while others work on, `/proc/self` is that
/// zombie thread's, with no namespaces left to read.
pub fn own_pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    static NAMESPACE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NAMESPACE.get_or_init(|| std::fs::metadata("/proc/thread-self/ns/pid").map_or(0, |m| m.ino()))
}

/// Our own pid, as it is written in shared words.
pub fn own_pid() -> i32 {
    std::process::id() as i32
}

/// A pid that names no process: a child that has exited and been reaped
/// (its pid is not reused within the test).
#[cfg(test)]
pub(crate) fn gone_pid() -> i32 {
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("spawn true");
    let pid = child.id() as i32;
    child.wait().expect("wait for true");
    pid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn we_are_alive_and_a_reaped_child_is_gone() {
        assert!(!is_gone(own_pid()));
        assert!(is_gone(gone_pid()));
    }

    #[test]
    fn a_zombie_has_ended() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id() as i32;
        // Not reaped yet: a zombie once it exits.
        while !has_ended(pid) {
            std::thread::yield_now();
        }
        assert!(!is_gone(pid), "kill still finds the zombie");
        child.wait().expect("wait for true");
        assert!(!has_ended(own_pid()));
    }

    /// Lines as Linux 6.18 wrote them: a process whose main thread ended
    /// with `pthread_exit` while a second thread ran, then one that
    /// ended whole, and one running.
    #[test]
    fn a_zombie_main_thread_with_threads_left_has_not_ended() {
        let tail = "25156 25156 13771 0 -1 4227084 95 0 0 0 0 0 0 0 20 0";
        let line = |state: &str, threads: u32| {
            format!("25170 (a) b) {state} {tail} {threads} 0 6101532 0 0")
        };
        assert!(!stat_has_ended(&line("Z", 2)));
        assert!(stat_has_ended(&line("Z", 1)));
        assert!(!stat_has_ended(&line("S", 1)));
        assert!(stat_has_ended("25170 (a) Z"), "no thread count: ended");
        assert!(!stat_has_ended("garbage"));
    }

    #[test]
    fn our_pid_namespace_is_known() {
        assert_ne!(own_pid_namespace(), 0);
    }

    #[test]
    fn group_pids_read_as_gone() {
        assert!(is_gone(0));
        assert!(is_gone(-1));
    }
}
