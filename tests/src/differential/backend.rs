//! One backend: the executor (tests/conformance/verbs_exec.c) running on
//! one device in its own process, fed one verb line at a time. A process
//! per backend keeps a provider's crash or hang from taking the runner
//! with it, and needs no unsafe code here.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long one verb may take before the backend counts as hung: far
/// more than any verb needs, also in an emulated VM.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
/// The verbs whose answer "ok N" is followed by N more lines.
const COUNTED: [&str; 3] = ["poll_cq", "wait_cq", "events"];
/// How much of the executor's standard error is kept for a report.
const STDERR_KEPT: usize = 4096;

/// How to start a backend.
#[derive(Debug, Clone)]
pub struct BackendSpec {
    /// Its name in reports, such as the device name.
    pub label: String,
    /// The executor program.
    pub program: PathBuf,
    /// The device it opens.
    pub device: String,
    /// Environment it runs with (the provider preloaded, device
    /// configuration, ...).
    pub env: Vec<(String, String)>,
}

/// A running executor.
#[derive(Debug)]
pub struct Backend {
    label: String,
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    /// Closed once the executor's standard error has been read to its end.
    stderr_done: Receiver<()>,
}

impl Backend {
    /// Starts the executor and waits until its device is open.
    pub fn start(spec: &BackendSpec) -> Result<Backend, String> {
        let mut child = Command::new(&spec.program)
            .arg(&spec.device)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                format!(
                    "{}: cannot start {}: {e}",
                    spec.label,
                    spec.program.display()
                )
            })?;
        let stdin = child.stdin.take().expect("piped stdin");
        let lines = forward_lines(BufReader::new(child.stdout.take().expect("piped stdout")));
        let (stderr, stderr_done) =
            keep_tail(BufReader::new(child.stderr.take().expect("piped stderr")));
        let mut backend = Backend {
            label: spec.label.clone(),
            child,
            stdin,
            lines,
            stderr,
            stderr_done,
        };
        match backend.next_line()? {
            ready if ready == "ready" => Ok(backend),
            other => Err(backend.died(&format!("said {other:?} instead of ready"))),
        }
    }

    /// Runs one verb line; the answer's lines (the first, then one per
    /// completion or event it announced).
    pub fn ask(&mut self, line: &str) -> Result<Vec<String>, String> {
        writeln!(self.stdin, "{line}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| self.died(&format!("cannot be written to ({e})")))?;
        let first = self.next_line()?;
        let verb = line.split(' ').next().unwrap_or("");
        let more = match first.split_whitespace().collect::<Vec<_>>()[..] {
            ["ok", n] if COUNTED.contains(&verb) => n.parse().unwrap_or(0),
            _ => 0,
        };
        let mut answer = vec![first];
        for _ in 0..more {
            answer.push(self.next_line()?);
        }
        Ok(answer)
    }

    fn next_line(&mut self) -> Result<String, String> {
        match self.lines.recv_timeout(ANSWER_TIMEOUT) {
            Ok(line) => Ok(line),
            Err(RecvTimeoutError::Timeout) => {
                Err(self.died(&format!("gave no answer in {} s", ANSWER_TIMEOUT.as_secs())))
            }
            Err(RecvTimeoutError::Disconnected) => Err(self.died("ended")),
        }
    }

    /// A report of a backend that stopped answering: what happened, its
    /// exit status and the end of its standard error.
    fn died(&mut self, what: &str) -> String {
        let _ = self.child.kill();
        let status = self
            .child
            .wait()
            .map_or_else(|e| e.to_string(), |s| s.to_string());
        // The last lines may still be on their way; a process the executor
        // started may hold the pipe open, so the wait is bounded.
        let _ = self.stderr_done.recv_timeout(Duration::from_secs(1));
        let stderr = self.stderr.lock().map(|s| s.clone()).unwrap_or_default();
        format!(
            "backend {} {what} ({status}); its stderr: {}",
            self.label,
            stderr.trim()
        )
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A thread that forwards every line of `out`; the channel closes at its end.
fn forward_lines(out: impl BufRead + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in out.lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// A thread that keeps the last few KiB of `err`; the receiver is closed
/// when it has read everything.
fn keep_tail(err: impl BufRead + Send + 'static) -> (Arc<Mutex<String>>, Receiver<()>) {
    let kept = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&kept);
    let (done, finished) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let _done = done;
        for line in err.lines() {
            let Ok(line) = line else { break };
            let Ok(mut s) = sink.lock() else { break };
            s.push_str(&line);
            s.push('\n');
            if s.len() > STDERR_KEPT {
                let cut = s.len() - STDERR_KEPT;
                let cut = (cut..s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(0);
                s.drain(..cut);
            }
        }
    });
    (kept, finished)
}
