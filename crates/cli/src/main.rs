//! `softverbs`: run any verbs program on the soft RDMA device, and list
//! the devices programs see.
//!
//! `softverbs run -- PROGRAM ARGS` starts PROGRAM with the provider
//! preloaded (no root, no kernel module); `softverbs devices` prints the
//! configured devices; `softverbs setup` / `teardown` (root) create and
//! remove the device entries plugin mode needs (see [`plugin`]);
//! `softverbs trace summarize FILE` reads a verbs trace; `softverbs
//! conformance --against DEVICE` compares softverbs with another device.

mod conformance;
mod daemon;
mod gid_table;
mod library;
mod plugin;

use clap::{Parser, Subcommand};
use softverbs_config::Config;
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

/// Run RDMA verbs programs on softverbs, a software RoCE device.
#[derive(Debug, Parser)]
#[command(name = "softverbs", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run PROGRAM with the softverbs provider preloaded.
    Run {
        /// The program and its arguments (after `--`).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        program: Vec<String>,
    },
    /// List the soft devices a program would see, and where they come from.
    Devices,
    /// Plugin mode (root): create the sysfs tree and /dev/infiniband entries
    /// through which libibverbs finds the configured devices.
    Setup,
    /// Plugin mode (root): remove what `setup` created.
    Teardown,
    /// Run the host daemon that owns UDP 4791 for this network namespace
    /// (programs start it themselves when needed).
    Daemon {
        /// The abstract Unix socket name to listen on.
        #[arg(long, env = "SOFTVERBS_DAEMON_SOCKET", default_value = softverbs_transport::daemon::DEFAULT_SOCKET, value_parser = socket_name)]
        socket: String,
        /// Exit after this many seconds without a client.
        #[arg(long, env = "SOFTVERBS_DAEMON_IDLE_EXIT", default_value = "30", value_parser = idle_exit)]
        idle_exit: std::time::Duration,
        /// Start the daemon in the background and return once it listens.
        #[arg(long)]
        detach: bool,
        /// Write every packet the daemon receives, for every process, to
        /// this pcap file (`%p` is replaced by the daemon's process id).
        #[arg(long, value_name = "FILE")]
        pcap: Option<std::path::PathBuf>,
    },
    /// Run random verbs sequences on softverbs and on another device
    /// (a real one through a pass-through device) and compare every
    /// answer; one line per divergent case, `N passed, M failed` last.
    Conformance(conformance::Options),
    /// Read a verbs trace (written with SOFTVERBS_TRACE=FILE).
    Trace {
        #[command(subcommand)]
        command: TraceCmd,
    },
}

#[derive(Debug, Subcommand)]
enum TraceCmd {
    /// Per-QP statistics: WRs by opcode, bytes, completions, errors,
    /// failed verbs, and post-to-completion latency.
    Summarize {
        /// The trace file (`-` for standard input).
        file: std::path::PathBuf,
    },
}

/// `--socket`: an empty name is the default one, as programs take an
/// empty `SOFTVERBS_DAEMON_SOCKET` (a daemon on `@` served nobody).
fn socket_name(s: &str) -> Result<String, String> {
    Ok(match s {
        "" => softverbs_transport::daemon::DEFAULT_SOCKET.to_string(),
        name => name.to_string(),
    })
}

/// `--idle-exit`: seconds, more than 0 (a daemon that leaves at once
/// serves nobody; `inf` or NaN once made it panic).
fn idle_exit(s: &str) -> Result<std::time::Duration, String> {
    let seconds: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if seconds.is_nan() || seconds <= 0.0 {
        return Err("seconds above 0".into());
    }
    match std::time::Duration::try_from_secs_f64(seconds) {
        Ok(d) if d.is_zero() => Err("seconds above 0 (this rounds to 0)".into()),
        other => other.map_err(|e| e.to_string()),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Run { program } => run(&program),
        Cmd::Devices => devices(),
        Cmd::Setup => plugin::setup(),
        Cmd::Teardown => plugin::teardown(),
        Cmd::Daemon {
            socket,
            idle_exit,
            detach,
            pcap,
        } => daemon::run(socket, idle_exit, detach, pcap),
        Cmd::Conformance(options) => conformance::run(options),
        Cmd::Trace {
            command: TraceCmd::Summarize { file },
        } => summarize(&file),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            // Not eprintln!, which panics when standard error is gone (a
            // detached daemon's, whose starter has exited).
            let _ = writeln!(std::io::stderr(), "softverbs: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Prints the summary of the trace in `file`.
fn summarize(file: &std::path::Path) -> Result<(), String> {
    let summary = if file.as_os_str() == "-" {
        softverbs_trace::Summary::read(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
        softverbs_trace::Summary::read(std::io::BufReader::new(f))
    };
    let summary = summary.map_err(|e| format!("{}: {e}", file.display()))?;
    print_all(&summary.to_string())
}

/// Replaces this process with `program`, the provider preloaded.
fn run(program: &[String]) -> Result<(), String> {
    library::check_rdma_core()?;
    let lib = library::provider()?;
    Config::load().map_err(|e| format!("bad configuration: {e}"))?;
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(existing) if !existing.is_empty() => format!("{} {existing}", lib.display()),
        _ => lib.display().to_string(),
    };
    let err = Command::new(&program[0])
        .args(&program[1..])
        .env("LD_PRELOAD", preload)
        .exec();
    Err(format!("cannot run {}: {err}", program[0]))
}

/// Prints the configured devices.
fn devices() -> Result<(), String> {
    let config = Config::load().map_err(|e| format!("bad configuration: {e}"))?;
    // Checked as a device's open checks it: the devices are not usable.
    let faults = softverbs_faults::FaultSpec::from_env()
        .map_err(|e| format!("bad SOFTVERBS_FAULTS, which fails every device's open: {e}"))?;
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    line(format!("configuration: {}", config.source));
    // A rule for a device no program sees never fires, in silence.
    let soft = config.devices.iter().map(|d| d.name.as_str());
    let names: Vec<&str> = soft
        .chain(config.passthrough.iter().map(|d| d.name.as_str()))
        .collect();
    for rule in faults.iter().flat_map(|f| &f.rules) {
        if let Some(dev) = rule.filter.device.as_deref().filter(|d| !names.contains(d)) {
            line(format!(
                "SOFTVERBS_FAULTS rule {} names device {dev}, which is not configured: it never fires",
                rule.line
            ));
        }
    }
    line(format!("{:<16} {:<40} active MTU", "device", "address"));
    for d in &config.devices {
        let cfg = d.device_config(0);
        let mtu = cfg.ports[0].active_mtu.bytes();
        line(format!("{:<16} {:<40} {}", d.name, d.ip, mtu));
        if let Some(why) = unusable(d.ip) {
            line(format!("    not usable here: {why}"));
        }
        for gid in gid_table::lines(d) {
            line(format!("    {gid}"));
        }
    }
    for d in &config.passthrough {
        line(format!(
            "{:<16} passes through to the real device {} (preload mode)",
            d.name, d.real
        ));
        // Where libibverbs finds the kernel's devices.
        let sysfs = std::path::Path::new("/sys/class/infiniband").join(&d.real);
        if !sysfs.exists() {
            line(format!(
                "    not usable here: this host has no RDMA device {} ({} is not there), \
                 so opening it fails",
                d.real,
                sysfs.display()
            ));
        }
    }
    let daemon = Config::daemon(None);
    line(format!(
        "receives on UDP {} through the host daemon @{} (`softverbs daemon`, started on demand)",
        softverbs_transport::udp_port(),
        daemon.socket
    ));
    line(same_host_line());
    print_all(&out)
}

/// Why a device at `ip` cannot be opened here, if it cannot. A loopback
/// address is local without being on any interface's list, but only
/// while the loopback interface is up: a new network namespace's is
/// down, and the open failed there (EADDRNOTAVAIL) while this command
/// saw nothing wrong.
fn unusable(ip: std::net::IpAddr) -> Option<String> {
    use softverbs_engine::LinkState;
    use softverbs_transport::netif;
    if !netif::is_local(ip) {
        return Some(format!(
            "no interface of this network namespace has {ip}, so opening it fails \
             (add the address, or change the configuration)"
        ));
    }
    let lo_up = !ip.is_loopback()
        || netif::interface_of(ip).is_some()
        || netif::link_of("lo") == Some(LinkState::Up);
    (!lo_up).then(|| {
        "the loopback interface of this network namespace is down, so opening it fails \
         (`ip link set lo up`)"
            .to_string()
    })
}

/// Writes `text` to standard output; a reader that went away (`softverbs
/// devices | head -1`) ends the output quietly, as with other tools,
/// where `println!` panicked.
fn print_all(text: &str) -> Result<(), String> {
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("stdout: {e}")),
        _ => Ok(()),
    }
}

/// Which path a QP whose peer is on this host takes, and why.
fn same_host_line() -> String {
    use softverbs_transport::same_host::host::ShmMode;
    let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u8>().ok());
    let attach = match yama {
        None | Some(0) => "cross-memory attach between processes of one user".to_string(),
        Some(1) => "Yama ptrace_scope 1: cross-memory attach where the target allows it (PR_SET_PTRACER), the wire elsewhere".to_string(),
        Some(n) => format!("Yama ptrace_scope {n}: cross-memory attach refused, so the wire"),
    };
    match ShmMode::from_env() {
        ShmMode::Off => "same host: the wire path (SOFTVERBS_SHM=0, or SOFTVERBS_PCAP or packet fault rules set)".to_string(),
        ShmMode::Auto => format!("same host: the same-host path ({attach}); a refused peer uses the wire, with a log line"),
        ShmMode::Required => format!("same host: the same-host path, required (SOFTVERBS_SHM=1): {attach}"),
    }
}

#[cfg(test)]
mod tests {
    use super::{idle_exit, Cli, Cmd};
    use clap::Parser;
    use std::time::Duration;

    #[test]
    fn an_empty_socket_name_is_the_default_one() {
        let cli = Cli::try_parse_from(["softverbs", "daemon", "--socket", ""]).unwrap();
        let Cmd::Daemon { socket, .. } = cli.command else {
            panic!("not the daemon command");
        };
        assert_eq!(socket, softverbs_transport::daemon::DEFAULT_SOCKET);
    }

    #[test]
    fn idle_exit_is_seconds_above_zero_that_a_duration_holds() {
        assert_eq!(idle_exit("30"), Ok(Duration::from_secs(30)));
        assert_eq!(idle_exit("0.5"), Ok(Duration::from_millis(500)));
        for bad in ["0", "-1", "1e-12", "nan", "inf", "1e30", "abc"] {
            assert!(idle_exit(bad).is_err(), "{bad}");
        }
    }
}
