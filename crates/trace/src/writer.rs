//! The process's trace file: `SOFTVERBS_TRACE=FILE` turns it on for every
//! context the process opens (a `%p` in FILE becomes the process id, so
//! the processes of a job each write their own). Each record is one line,
//! written whole as it happens, so a process that crashes loses none.
//! Off, a trace point costs one atomic load ([`on`]).

use crate::record::{Line, Record};
use parking_lot::Mutex;
use std::ffi::OsStr;
use std::io::{self, LineWriter, Write};
use std::path::PathBuf;
use std::sync::OnceLock;

/// The environment variable naming the trace file.
pub const ENV: &str = "SOFTVERBS_TRACE";

/// The process's trace, once a context has looked at the environment.
static PROCESS: OnceLock<Option<TraceFile>> = OnceLock::new();

/// An open trace file.
#[derive(Debug)]
pub struct TraceFile {
    path: PathBuf,
    out: Mutex<Out>,
}

#[derive(Debug)]
struct Out {
    file: LineWriter<crate::own_file::OwnFile>,
    /// A write failed: the trace stopped (said once on standard error).
    stopped: bool,
}

/// Opens the process's trace file if `SOFTVERBS_TRACE` names one. The
/// first context to open does it; later calls return at once.
pub fn open_from_env() -> io::Result<()> {
    static OPENING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = OPENING.lock();
    if PROCESS.get().is_some() {
        return Ok(());
    }
    let trace = match std::env::var_os(ENV).filter(|v| !v.is_empty()) {
        Some(template) => Some(
            TraceFile::create(&template)
                .map_err(|e| io::Error::other(format!("{ENV}={template:?}: {e}")))?,
        ),
        None => None,
    };
    let _ = PROCESS.set(trace); // unset until now: checked under the lock
    Ok(())
}

/// Whether the process traces: one atomic load.
#[inline]
pub fn on() -> bool {
    PROCESS.get().is_some_and(Option::is_some)
}

/// Makes `faults`, the rules of device `dev`, write a record of each
/// firing, if the process traces.
pub fn observe_faults(faults: &mut softverbs_faults::Faults, dev: &str) {
    if on() {
        let dev = dev.to_string();
        faults.observe(Box::new(move |rule, qp| {
            let text = rule.text.clone();
            let fault = crate::record::Fault {
                rule: rule.line,
                text,
                qp,
            };
            write(&dev, Record::Fault(fault));
        }));
    }
}

/// Writes `record` of device `dev`, if the process traces.
pub fn write(dev: &str, record: Record) {
    if let Some(Some(trace)) = PROCESS.get() {
        trace.write(dev, record);
    }
}

impl TraceFile {
    /// Creates (or empties) the file `template` names, `%p` replaced by
    /// this process's id (or, if another process writes it, the one
    /// beside it: [`crate::own_file`]).
    pub fn create(template: &OsStr) -> io::Result<TraceFile> {
        let own = crate::own_file::create(template)?;
        Ok(TraceFile {
            path: own.path.clone(),
            out: Mutex::new(Out {
                file: LineWriter::new(own),
                stopped: false,
            }),
        })
    }

    /// The file written.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Writes one line. A trace that cannot be written (a full disk) is
    /// not the application's failure: it stops, saying so once on
    /// standard error (it lost every line in silence), as a capture does.
    pub fn write(&self, dev: &str, record: Record) {
        let line = Line {
            t: monotonic_ns(),
            pid: std::process::id(),
            tid: nix::unistd::gettid().as_raw() as u32,
            dev: dev.to_string(),
            record,
        };
        let Ok(mut text) = serde_json::to_vec(&line) else {
            return;
        };
        text.push(b'\n');
        let mut out = self.out.lock();
        if out.stopped {
            return;
        }
        if let Err(e) = out.file.write_all(&text) {
            out.stopped = true;
            let path = self.path.display();
            let said = format!("softverbs: the trace to {path} stopped: {e}\n");
            // A standard error that cannot be written either is ignored.
            let _ = io::stderr().write_all(said.as_bytes());
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |ts| {
        (ts.tv_sec() as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec() as u64)
    })
}

/// `template` with every `%p` replaced by `pid`: how a process-wide
/// output file is named (this trace, and `SOFTVERBS_PCAP`'s capture), so
/// that the processes of a job each write their own.
pub fn process_path(template: &OsStr, pid: u32) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let bytes = template.as_bytes();
    let mut out = Vec::with_capacity(bytes.len() + 8);
    let mut rest = bytes;
    while let Some(at) = rest.windows(2).position(|w| w == b"%p") {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(pid.to_string().as_bytes());
        rest = &rest[at + 2..];
    }
    out.extend_from_slice(rest);
    PathBuf::from(OsStr::from_bytes(&out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Event, Verb};

    /// A trace that cannot be written stops at its first failed line,
    /// rather than failing every record in silence.
    #[test]
    fn a_trace_that_cannot_be_written_stops() {
        let trace = TraceFile::create(OsStr::new("/dev/full")).unwrap();
        let record = || {
            Record::Verb(Verb {
                verb: "ibv_alloc_pd".into(),
                ..Verb::default()
            })
        };
        trace.write("softverbs0", record());
        assert!(trace.out.lock().stopped, "a line /dev/full refused");
        trace.write("softverbs0", record()); // nothing more is tried
    }

    #[test]
    fn lines_are_written_whole_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let trace = TraceFile::create(dir.path().join("t-%p.json").as_os_str()).unwrap();
        assert!(trace
            .path()
            .ends_with(format!("t-{}.json", std::process::id())));
        trace.write(
            "softverbs0",
            Record::Verb(Verb {
                verb: "ibv_alloc_pd".into(),
                ret: 1,
                ..Verb::default()
            }),
        );
        trace.write(
            "softverbs0",
            Record::Event(Event {
                event: "PORT_ACTIVE".into(),
                port: Some(1),
                ..Event::default()
            }),
        );
        let text = std::fs::read_to_string(trace.path()).unwrap();
        let lines: Vec<Line> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].t <= lines[1].t && lines[0].t > 0);
        assert_eq!(lines[1].pid, std::process::id());
        assert_eq!(process_path(OsStr::new("%p-%p"), 7), PathBuf::from("7-7"));
    }
}
