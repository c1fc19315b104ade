//! `softverbs daemon`: runs the host daemon that owns UDP 4791 for this
//! network namespace (softverbs_transport::daemon). Programs start it on
//! demand; running it by hand is for watching it.
//!
//! `--detach` is how programs start it: this process starts the daemon
//! as a child in its own process group, waits for the line it prints once
//! it listens, and exits, so the caller can connect at once and the
//! daemon outlives it (adopted by init, never a zombie of the caller).
//!
//! `--pcap FILE` captures every packet the daemon receives, for every
//! process, as softverbs_transport::capture writes them.

use softverbs_transport::capture::Capture;
use softverbs_transport::daemon::{Daemon, DaemonConfig};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The line a daemon prints once it listens.
const READY: &str = "softverbs daemon: listening on @";

/// Runs the daemon in the foreground until it has been idle `idle_exit`.
pub fn run(
    socket: String,
    idle_exit: Duration,
    detach: bool,
    pcap: Option<PathBuf>,
) -> Result<(), String> {
    if detach {
        return start_detached(&socket, idle_exit, pcap.as_deref());
    }
    close_inherited_descriptors();
    unblock_inherited_signals();
    raise_descriptor_limit();
    let config = DaemonConfig {
        socket: socket.clone(),
        idle_exit,
    };
    let mut daemon = match Daemon::bind(config) {
        Ok(d) => d,
        Err(e) if e.raw_os_error() == Some(libc_eaddrinuse()) && pcap.is_some() => {
            return Err(format!(
                "a daemon already serves @{socket}; --pcap needs a daemon started with it"
            ));
        }
        Err(e) if e.raw_os_error() == Some(libc_eaddrinuse()) => {
            // Another daemon serves this namespace: that is success for
            // whoever wanted one running.
            println!("{READY}{socket} (already running)");
            return Ok(());
        }
        Err(e) => return Err(format!("cannot listen on @{socket}: {e}")),
    };
    if let Some(template) = pcap {
        let capture = Capture::create(template.as_os_str())
            .map_err(|e| format!("--pcap {}: {e}", template.display()))?;
        softverbs_transport::say!(
            "softverbs daemon: capturing to {}",
            capture.path().display()
        );
        daemon.capture_to(capture);
    }
    println!("{READY}{socket}");
    let _ = std::io::stdout().flush();
    let stats = daemon.run().map_err(|e| format!("daemon failed: {e}"))?;
    softverbs_transport::say!(
        "softverbs daemon: idle, exiting ({} packets delivered, {} for no context, {} dropped)",
        stats.delivered,
        stats.unrouted,
        stats.overflowed
    );
    Ok(())
}

fn libc_eaddrinuse() -> i32 {
    nix::errno::Errno::EADDRINUSE as i32
}

/// Closes every descriptor above stderr that this process inherited.
/// Programs start the daemon when they first open softverbs0, and it
/// outlives them: a pipe or socket of theirs that is not close-on-exec,
/// held open here, would keep a reader from seeing end of file (a parent
/// waiting for its forked child through a pipe) or a peer from seeing the
/// connection close, for as long as the daemon lives. Nothing of the
/// daemon's own is open yet.
fn close_inherited_descriptors() {
    let Ok(listing) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = listing
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in fds {
        // The listing's own descriptor is closed by now: EBADF, ignored.
        let _ = nix::unistd::close(fd);
    }
}

/// Unblocks every signal: the daemon inherited the signal mask of the
/// thread that started it, which may be one of softverbs' own (they block
/// the application's signals, `own_threads.rs`) or an application thread
/// that blocks SIGTERM; a daemon that outlives them must still end on
/// `kill` as any service does.
fn unblock_inherited_signals() {
    softverbs_transport::own_threads::unblock_all_signals();
}

/// Raises the soft limit on descriptors to the hard one. The daemon holds
/// some five descriptors for each context in the namespace, whatever
/// program it belongs to, and it inherited the soft limit of the program
/// that happened to start it (1024 most often, or a test's `ulimit -n`):
/// past it every later program's `ibv_open_device` failed until the
/// daemon left. A kernel provider's contexts share no such process.
fn raise_descriptor_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        // Where `fs.nr_open` was lowered below the hard limit, no limit
        // can be set (EPERM) but with the hard one lowered to it too.
        let target = hard.min(nr_open().unwrap_or(hard));
        if soft < target && setrlimit(Resource::RLIMIT_NOFILE, target, target).is_err() {
            softverbs_transport::say!(
                "softverbs daemon: cannot raise its descriptor limit from {soft} to {target}"
            );
        }
    }
}

/// The most descriptors a process may have open (`fs.nr_open`).
fn nr_open() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Starts the daemon in its own process group and returns once it listens.
/// One that does not start says why on its standard error, which is
/// passed on (it was dropped, and the error said only the exit status);
/// once the daemon listens, nobody reads it, and what the daemon says
/// later is lost, as before (it ignores a write that fails).
fn start_detached(socket: &str, idle_exit: Duration, pcap: Option<&Path>) -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot find myself: {e}"))?;
    let mut command = Command::new(me);
    command
        .args(["daemon", "--socket", socket, "--idle-exit"])
        .arg(idle_exit.as_secs_f64().to_string());
    if let Some(pcap) = pcap {
        command.arg("--pcap").arg(pcap);
    }
    let mut child = command
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the daemon: {e}"))?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        BufReader::new(out)
            .read_line(&mut line)
            .map_err(|e| format!("daemon: {e}"))?;
    }
    if line.starts_with(READY) {
        return Ok(()); // the daemon lives on; init adopts it when we exit
    }
    // It exits: its standard error ends.
    let mut said = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut said);
    }
    let status = child.wait().map_err(|e| format!("daemon: {e}"))?;
    match said.trim() {
        "" => Err(format!("the daemon did not start ({status})")),
        why => Err(format!("the daemon did not start ({status}): {why}")),
    }
}
