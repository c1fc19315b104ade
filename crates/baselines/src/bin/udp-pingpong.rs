//! `udp-pingpong`: the half round trip of a minimal UDP ping-pong over
//! loopback, the latency baseline `make bench` sets beside perftest's
//! `ib_*_lat` over softverbs (which sends RoCEv2 in UDP datagrams on the
//! same loopback, so this is the floor it builds on).
//!
//! ```text
//! udp-pingpong [--size BYTES] [--iters N] [--warmup N] [--busy]
//! ```
//!
//! It starts a copy of itself as the echo server, a second process as
//! perftest's server is, on 127.0.0.1 with a port the kernel picks. The
//! client sends `--size` bytes, waits for them to come back, and times each
//! round trip; half of it is what perftest's send and write latency tests
//! report. With `--busy` both sides spin on non-blocking sockets, as
//! perftest spins in `ibv_poll_cq`; without, they sleep in `recv` and the
//! kernel wakes them. It prints one line:
//!
//! ```text
//! udp-pingpong size=2 iters=100000 mode=busy half_rtt_ns median=.. mean=.. p99=.. min=..
//! ```

use softverbs_baselines::{percentile, Args};
use std::io::{self, BufRead, BufReader, ErrorKind};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// An echo server that hears nothing for this long assumes its client died
/// and exits, so no process outlives a broken run.
const IDLE_EXIT: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1), &["busy", "echo"]) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("udp-pingpong: {e}");
            return ExitCode::from(2);
        }
    };
    let busy = args.flag("busy");
    let result = if args.flag("echo") {
        echo(busy)
    } else {
        client(&args, busy).map_err(|e| e.to_string())
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("udp-pingpong: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Receives one datagram into `buf`: spinning on a non-blocking socket
/// when `busy`, else blocking. `Ok(None)` after [`IDLE_EXIT`] of silence.
fn recv(sock: &UdpSocket, buf: &mut [u8], busy: bool) -> io::Result<Option<(usize, SocketAddr)>> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        match sock.recv_from(buf) {
            Ok(got) => return Ok(Some(got)),
            // Blocking: the read timeout (IDLE_EXIT) ran out.
            Err(e) if !busy && matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Ok(None)
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                // Spinning: look at the clock only now and then, so the
                // check adds nothing measurable to the latency measured.
                spins = spins.wrapping_add(1);
                if spins & 4095 == 0 && start.elapsed() > IDLE_EXIT {
                    return Ok(None);
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn bind(busy: bool) -> io::Result<UdpSocket> {
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    if busy {
        sock.set_nonblocking(true)?;
    } else {
        sock.set_read_timeout(Some(IDLE_EXIT))?;
    }
    Ok(sock)
}

/// The server: tells the parent its port on stdout, then echoes every
/// datagram to its sender until an empty one (the client's goodbye) or
/// [`IDLE_EXIT`] of silence.
fn echo(busy: bool) -> Result<(), String> {
    let sock = bind(busy).map_err(|e| format!("echo bind: {e}"))?;
    let port = sock.local_addr().map_err(|e| e.to_string())?.port();
    println!("{port}");
    let mut buf = vec![0u8; 65536];
    while let Some((n, from)) = recv(&sock, &mut buf, busy).map_err(|e| e.to_string())? {
        if n == 0 {
            return Ok(());
        }
        sock.send_to(&buf[..n], from).map_err(|e| e.to_string())?;
    }
    Err("no datagram for 10 s, exiting".into())
}

/// Kills the echo server if the client returns early, so no process is
/// left behind; after a clean goodbye it has already exited.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn client(args: &Args, busy: bool) -> io::Result<()> {
    let bad = |e: String| io::Error::new(ErrorKind::InvalidInput, e);
    let size = args.num("size", 2).map_err(bad)? as usize;
    let iters = args.num("iters", 100_000).map_err(bad)?.max(1) as usize;
    let warmup = args.num("warmup", 1_000).map_err(bad)? as usize;
    if !(1..=65507).contains(&size) {
        return Err(bad(format!("--size {size}: must be 1 to 65507")));
    }

    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("--echo").stdout(Stdio::piped());
    if busy {
        cmd.arg("--busy");
    }
    let mut server = Server(cmd.spawn()?);
    let mut line = String::new();
    let stdout = server.0.stdout.take().expect("piped stdout");
    BufReader::new(stdout).read_line(&mut line)?;
    let port: u16 = line
        .trim()
        .parse()
        .map_err(|_| bad(format!("echo server said {line:?}, not a port")))?;

    let sock = bind(busy)?;
    sock.connect(("127.0.0.1", port))?;
    let msg = vec![0x5au8; size];
    let mut buf = vec![0u8; 65536];
    let mut rtt_ns = Vec::with_capacity(iters);
    for i in 0..warmup + iters {
        let t0 = Instant::now();
        sock.send(&msg)?;
        match recv(&sock, &mut buf, busy)? {
            Some((n, _)) if n == size => {}
            Some((n, _)) => return Err(bad(format!("echo of {size} bytes came back as {n}"))),
            None => return Err(bad("echo server went silent".into())),
        }
        if i >= warmup {
            rtt_ns.push(t0.elapsed().as_nanos() as u64);
        }
    }
    sock.send(&[])?;

    rtt_ns.sort_unstable();
    let half = |ns: u64| ns as f64 / 2.0;
    let mean = rtt_ns.iter().sum::<u64>() as f64 / rtt_ns.len() as f64 / 2.0;
    println!(
        "udp-pingpong size={size} iters={iters} mode={} half_rtt_ns median={:.0} mean={mean:.0} p99={:.0} min={:.0}",
        if busy { "busy" } else { "block" },
        half(percentile(&rtt_ns, 50.0)),
        half(percentile(&rtt_ns, 99.0)),
        half(rtt_ns[0]),
    );
    Ok(())
}
