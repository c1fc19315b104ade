//! A context's side of the host daemon: finding it (starting it when no
//! daemon serves this network namespace), asking for QP numbers, reading
//! the frames of packets it passes on, publishing and finding the
//! same-host regions of contexts, and holding ports of the rdma_cm port
//! space.

use super::protocol::{Ending, FrameHeader, Reply, Request};
use super::record;
use rustix::net::{
    connect, recv, socket_with, socketpair, sockopt, AddressFamily, RecvFlags, SocketAddrUnix,
    SocketFlags, SocketType,
};
use std::fmt;
use std::io::{self, BufRead, BufReader};
use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a context waits for the daemon to answer a request.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a context finds its daemon, and how it starts one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonAddress {
    /// The abstract socket name.
    pub socket: String,
    /// The `softverbs` program to start as `softverbs daemon` when none
    /// runs; `None`: never start one (the connection fails instead).
    pub program: Option<PathBuf>,
}

/// A context on this host that owns a looked-up QP number: what a
/// requester needs to reach it without packets.
#[derive(Debug)]
pub struct PeerRegion {
    /// Its process, for `process_vm_readv`/`process_vm_writev`.
    pub pid: i32,
    /// Its published region (a memfd), to map.
    pub region: OwnedFd,
    /// Its doorbell (an eventfd), to ring when its state changed.
    pub doorbell: OwnedFd,
    /// The region's length in bytes.
    pub bytes: u64,
}

/// Why the daemon gave no region for a QP number: not an I/O failure but
/// an answer, after which the QP uses the wire path (and logs `reason`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupRefused {
    /// `ENOENT`: nobody on this host holds the QP number, or its owner
    /// published nothing; `EPERM`: its owner runs as another user.
    pub errno: i32,
    /// The daemon's words.
    pub reason: String,
}

/// The daemon's words alone: they say why, where the errno's text (No
/// such file or directory) read as a fault.
impl fmt::Display for LookupRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// An open session with the daemon: the control socket, whose close
/// frees everything the context held, and the data socket frames arrive
/// on.
#[derive(Debug)]
pub struct Session {
    /// The context's own member of the daemon's steering group on UDP
    /// 4791 (daemon/steering.rs): its packets, with no hop. `None` where
    /// the daemon could not steer; then everything comes on `data`.
    /// Declared first so that it closes first: a daemon that finds the
    /// member still held by a process whose session ended never lends it
    /// to another context.
    direct: Option<std::net::UdpSocket>,
    control: OwnedFd,
    data: OwnedFd,
    /// Bytes read from the data socket that do not yet make a frame.
    pending: Vec<u8>,
    /// How much of `pending` is filled.
    filled: usize,
}

impl Session {
    /// Connects (starting the daemon if needed), says hello for `ip` and
    /// returns the session with its first block of QP numbers. A daemon
    /// that leaves (idle) just as we connect closes our connection: then
    /// we start over, with a new daemon.
    pub fn open(address: &DaemonAddress, ip: IpAddr) -> io::Result<(Session, u16)> {
        let mut attempt = 0;
        loop {
            match Session::try_open(address, ip) {
                Err(e) if attempt < 3 && daemon_went_away(&e) => attempt += 1,
                other => return other,
            }
        }
    }

    fn try_open(address: &DaemonAddress, ip: IpAddr) -> io::Result<(Session, u16)> {
        let control = connect_or_start(address)?;
        sockopt::set_socket_timeout(&control, sockopt::Timeout::Recv, Some(REPLY_TIMEOUT))?;
        let (data, theirs) = socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )?;
        // The daemon buffers what does not fit; a large buffer here lets a
        // burst land while the progress thread is busy.
        let _ = sockopt::set_socket_recv_buffer_size(&data, 4 << 20);
        let hello = Request::Hello { ip }.encode();
        record::send(&control, &hello, &[theirs.as_fd()])?;
        drop(theirs);
        let mut session = Session {
            control,
            data,
            direct: None,
            pending: vec![0; 1 << 17],
            filled: 0,
        };
        let (reply, fds) = session.reply()?;
        session.direct = fds.into_iter().next().map(std::net::UdpSocket::from);
        Ok((session, reply.into_block()?))
    }

    /// One more block of QP numbers.
    pub fn more_qpns(&mut self) -> io::Result<u16> {
        self.request(&Request::MoreQpns)?.into_block()
    }

    /// Asks the daemon to pass on the datagrams of multicast `group`.
    pub fn join(&mut self, group: IpAddr) -> io::Result<()> {
        self.request(&Request::Join { group })?.into_done()
    }

    /// No more datagrams of `group`.
    pub fn leave(&mut self, group: IpAddr) -> io::Result<()> {
        self.request(&Request::Leave { group })?.into_done()
    }

    /// Publishes the context's same-host region (its memfd, `bytes`
    /// long) and doorbell (an eventfd) for the contexts of the same user;
    /// replaces what was published before. The daemon keeps its own
    /// descriptors until this session closes.
    pub fn publish(
        &mut self,
        region: BorrowedFd<'_>,
        doorbell: BorrowedFd<'_>,
        bytes: u64,
    ) -> io::Result<()> {
        let request = Request::Publish {
            region_bytes: bytes,
        };
        self.request_with(&request, &[region, doorbell])?
            .0
            .into_done()
    }

    /// The context on this host that holds `qpn` (this one included), and
    /// its published region. `Ok(Err(..))`: the daemon answered that there
    /// is none to use (see [`LookupRefused`]); `Err`: the daemon could not
    /// be asked or answered nonsense.
    pub fn lookup(&mut self, qpn: u32) -> io::Result<Result<PeerRegion, LookupRefused>> {
        let (reply, fds) = self.request_with(&Request::Lookup { qpn }, &[])?;
        match reply {
            Reply::Peer { pid, region_bytes } => {
                let mut fds = fds.into_iter();
                match (fds.next(), fds.next()) {
                    (Some(region), Some(doorbell)) => Ok(Ok(PeerRegion {
                        pid,
                        region,
                        doorbell,
                        bytes: region_bytes,
                    })),
                    _ => Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "softverbs daemon: a peer without its descriptors",
                    )),
                }
            }
            Reply::Refused(errno, reason) if errno == libc::ENOENT || errno == libc::EPERM => {
                Ok(Err(LookupRefused { errno, reason }))
            }
            other => Err(other.into_error()),
        }
    }

    /// Reserves `port` (0: a free ephemeral one) of rdma_cm port space
    /// `ps` on `ip` (the unspecified address: every address) for this
    /// session, as the kernel's `rdma_bind_addr` without REUSEADDR;
    /// returns the port. Refused with `EADDRINUSE` when another
    /// reservation holds the port on the same address, `EADDRNOTAVAIL`
    /// when one of the two is on the unspecified address (the kernel's
    /// `cma_check_port`) or no ephemeral port is free, `EINVAL` for an
    /// unknown port space; reservations of the two families that are both
    /// `afonly` share a port. It lasts until [`Session::release`] or the
    /// session's end.
    pub fn reserve(&mut self, ps: u16, ip: IpAddr, port: u16, afonly: bool) -> io::Result<u16> {
        let request = Request::Reserve {
            ps,
            ip,
            port,
            afonly,
        };
        match self.request(&request)? {
            Reply::Port(port) => Ok(port),
            other => Err(quiet_error(other)),
        }
    }

    /// Makes this session's reservation of (`ps`, `ip`, `port`) a
    /// listener: the CM's REQs and SIDR_REQs for its service ID that
    /// arrive at `ip` (any address, if unspecified) come to this session.
    /// `EINVAL` if the session holds no such reservation.
    pub fn listen(&mut self, ps: u16, ip: IpAddr, port: u16) -> io::Result<()> {
        self.request(&Request::Listen { ps, ip, port })?.into_done()
    }

    /// Gives the reservation of (`ps`, `ip`, `port`) back. `EINVAL` if
    /// the session holds no such reservation.
    pub fn release(&mut self, ps: u16, ip: IpAddr, port: u16) -> io::Result<()> {
        quiet_done(self.request(&Request::Release { ps, ip, port })?)
    }

    /// Tells the daemon this session sent a CM REQ of comm ID `comm_id`
    /// (one of its blocks'), CA GUID `ca_guid` and transaction `tid` to
    /// `peer`: should the session end first, the daemon gives the REQ up
    /// in its name, as the kernel's CM does for a dead process's id.
    pub fn requesting(
        &mut self,
        peer: IpAddr,
        comm_id: u32,
        ca_guid: u64,
        tid: u64,
    ) -> io::Result<()> {
        let request = Request::Requesting {
            peer,
            comm_id,
            ca_guid,
            tid,
        };
        quiet_done(self.request(&request)?)
    }

    /// Tells the daemon this session sends a CM REP of comm ID `comm_id`
    /// (one of its blocks'), answering `remote_comm_id`'s REQ, to `peer`:
    /// should the session end before the peer's RTU comes, the daemon
    /// rejects the REP in its name, as the kernel's CM does for a dead
    /// process's id, and disconnects after it.
    pub fn replying(&mut self, peer: IpAddr, comm_id: u32, remote_comm_id: u32) -> io::Result<()> {
        let request = Request::Replying {
            peer,
            comm_id,
            remote_comm_id,
        };
        quiet_done(self.request(&request)?)
    }

    /// Tells the daemon this session sent `message` of its comm ID
    /// `comm_id` (one of its blocks') to `peer`'s `remote_comm_id`
    /// ([`Request::Disconnecting`]): should the session end, the daemon
    /// does not send it again in its name.
    pub fn disconnecting(
        &mut self,
        peer: IpAddr,
        comm_id: u32,
        remote_comm_id: u32,
        message: Ending,
    ) -> io::Result<()> {
        let request = Request::Disconnecting {
            peer,
            comm_id,
            remote_comm_id,
            message,
        };
        quiet_done(self.request(&request)?)
    }

    fn request(&mut self, request: &Request) -> io::Result<Reply> {
        Ok(self.request_with(request, &[])?.0)
    }

    /// Sends `request` with `fds` attached; its reply and the descriptors
    /// that came with it.
    fn request_with(
        &mut self,
        request: &Request,
        fds: &[BorrowedFd<'_>],
    ) -> io::Result<(Reply, Vec<OwnedFd>)> {
        record::send(&self.control, &request.encode(), fds)?;
        self.reply()
    }

    /// A reply and the descriptors it carried. Descriptors the kernel
    /// dropped for want of room in this process fail the request with
    /// EMFILE, as opening a kernel provider's device file would.
    fn reply(&mut self) -> io::Result<(Reply, Vec<OwnedFd>)> {
        let mut buf = [0u8; 512];
        let received = record::recv_from_user(&self.control, &mut buf)?;
        if received.len == 0 {
            return Err(gone());
        }
        if received.fds_lost {
            return Err(io::Error::from_raw_os_error(libc::EMFILE));
        }
        Ok((Reply::decode(&buf[..received.len])?, received.fds))
    }

    /// The context's own steered socket, to poll, if it has one.
    pub fn direct(&self) -> Option<&std::net::UdpSocket> {
        self.direct.as_ref()
    }

    /// Closes the steered socket (the daemon is gone: a new daemon must
    /// not find this member in its group).
    pub fn close_direct(&mut self) {
        self.direct = None;
    }

    /// The socket frames arrive on, to poll.
    pub fn data_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.data.as_fd()
    }

    /// Reads what the daemon sent and hands each whole frame (its header
    /// and its packets) to `frame`. Returns when nothing more is waiting.
    pub fn receive(&mut self, mut frame: impl FnMut(FrameHeader, &[u8])) -> io::Result<()> {
        loop {
            if self.filled == self.pending.len() {
                // A frame never exceeds a GRO datagram plus its head; a
                // full buffer without one means the stream is corrupt.
                return Err(io::Error::new(io::ErrorKind::InvalidData, "frame too long"));
            }
            let got = recv(
                &self.data,
                &mut self.pending[self.filled..],
                RecvFlags::DONTWAIT,
            );
            let n = match got {
                Ok((0, _)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "softverbs daemon went away",
                    ))
                }
                Ok((n, _)) => n,
                Err(rustix::io::Errno::AGAIN) => return Ok(()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            };
            self.filled += n;
            let mut used = 0;
            while let Some((header, packets, len)) =
                FrameHeader::decode(&self.pending[used..self.filled])?
            {
                frame(header, packets);
                used += len;
            }
            self.pending.copy_within(used..self.filled, 0);
            self.filled -= used;
        }
    }
}

/// `Done` as success, anything else as [`quiet_error`].
fn quiet_done(reply: Reply) -> io::Result<()> {
    match reply {
        Reply::Done => Ok(()),
        other => Err(quiet_error(other)),
    }
}

/// A refusal that is an ordinary answer (a port in use, say: the kernel
/// logs nothing either) as its errno, without the log line
/// [`Reply::into_error`] writes; anything else as that does.
fn quiet_error(reply: Reply) -> io::Error {
    match reply {
        Reply::Refused(errno, _) => io::Error::from_raw_os_error(errno),
        other => other.into_error(),
    }
}

fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "softverbs daemon went away",
    )
}

/// Whether `e` says the daemon closed our connection (it was leaving).
fn daemon_went_away(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionRefused
    )
}

/// Connects to the daemon's socket; where none listens and a program is
/// known, starts `PROGRAM daemon --detach` (which returns once the new
/// daemon listens) and connects again.
fn connect_or_start(address: &DaemonAddress) -> io::Result<OwnedFd> {
    match connect_to(&address.socket) {
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
            let Some(program) = &address.program else {
                return Err(e);
            };
            start(program, &address.socket)?;
            connect_to(&address.socket)
        }
        other => other,
    }
}

fn connect_to(name: &str) -> io::Result<OwnedFd> {
    let fd = socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    connect(&fd, &SocketAddrUnix::new_abstract_name(name.as_bytes())?)?;
    let daemon = sockopt::socket_peercred(&fd)?;
    let me = rustix::process::geteuid().as_raw();
    if !trusted(daemon.uid.as_raw(), me) {
        crate::say!(
            "softverbs: the host daemon at @{name} (pid {}) runs as uid {}: a context hands its \
             daemon its packets and its memory, so it uses only a daemon of its own user (uid \
             {me}) or root's; end that daemon, or name another with SOFTVERBS_DAEMON_SOCKET \
             (and SOFTVERBS_UDP_PORT if it holds the UDP port)",
            daemon.pid.as_raw_pid(),
            daemon.uid.as_raw(),
        );
        return Err(io::Error::from_raw_os_error(libc::EACCES));
    }
    Ok(fd)
}

/// Whether a context running as `me` may use a daemon running as
/// `daemon`: its own user's, or root's (which can reach any process's
/// memory anyway). Another user's daemon would see the context's region,
/// whose MR table peers trust, and could rewrite it.
fn trusted(daemon: u32, me: u32) -> bool {
    daemon == me || daemon == 0
}

/// How long a daemon started here may take to say it listens, and the
/// command that started it to exit: far beyond what either takes on a
/// loaded host, and short of leaving `ibv_open_device` waiting for ever on
/// a command that never becomes ready (`SOFTVERBS_DAEMON` naming the
/// wrong program: it hung until killed).
const START_WITHIN: Duration = Duration::from_secs(20);

/// Runs `program daemon --detach --socket NAME`, which prints one line
/// once the daemon listens and exits (the daemon lives on, detached). One
/// that has done neither within [`START_WITHIN`] is killed: ETIMEDOUT.
fn start(program: &PathBuf, name: &str) -> io::Result<()> {
    start_within(program, name, START_WITHIN)
}

/// [`start`], the daemon given `within` to be ready.
fn start_within(program: &PathBuf, name: &str, within: Duration) -> io::Result<()> {
    // The daemon outlives the program: it must not carry the program's
    // preloaded libraries (this provider, sanitizers) with it.
    let mut child = Command::new(program)
        .args(["daemon", "--detach", "--socket", name])
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .inspect_err(|e| {
            // Said here, and the error kept as it is: its errno (EMFILE,
            // say) is what ibv_open_device fails with.
            crate::say!("softverbs: cannot start {} daemon: {e}", program.display());
        })?;
    let deadline = Instant::now() + within;
    let said = match child.stdout.take() {
        Some(out) => line_by(out, deadline),
        None => Ok(()),
    };
    match said.and_then(|()| exit_by(&mut child, deadline)) {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(io::Error::other(format!(
            "{} daemon failed: {status}",
            program.display()
        ))),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            crate::say!(
                "softverbs: {} daemon did not say it listens and exit within {:?} ({e}); \
                 it was killed",
                program.display(),
                within
            );
            Err(io::Error::from_raw_os_error(libc::ETIMEDOUT))
        }
    }
}

/// Waits until `out` gives a whole line, or ends, by `deadline`.
fn line_by(out: std::process::ChildStdout, deadline: Instant) -> io::Result<()> {
    let mut out = BufReader::new(out);
    loop {
        wait_readable_by(out.get_ref().as_fd(), deadline)?;
        let got = out.fill_buf()?;
        if got.is_empty() || got.contains(&b'\n') {
            return Ok(());
        }
        let n = got.len();
        out.consume(n);
    }
}

/// Waits until `child` exits, by `deadline`: its status.
fn exit_by(
    child: &mut std::process::Child,
    deadline: Instant,
) -> io::Result<std::process::ExitStatus> {
    if let Some(status) = child.try_wait()? {
        return Ok(status);
    }
    let pid = rustix::process::Pid::from_raw(child.id() as i32)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
    // Readable once the process has exited.
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())?;
    wait_readable_by(pidfd.as_fd(), deadline)?;
    child.wait()
}

/// Waits until `fd` is readable (or hung up), by `deadline`: TimedOut
/// after it.
fn wait_readable_by(fd: BorrowedFd<'_>, deadline: Instant) -> io::Result<()> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let timeout =
            Timespec::try_from(left).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) => continue,
            Ok(_) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A daemon command made of `script` (a shell script, its arguments
    /// ignored), in a file of this test's own.
    fn daemon_command(tag: &str, script: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path =
            std::env::temp_dir().join(format!("softverbs-start-{tag}-{}", std::process::id()));
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// A daemon command that never says it listens, or says so and never
    /// exits, is killed after the time it is given: ETIMEDOUT (it hung
    /// `ibv_open_device` for ever). One that says so and exits is ready.
    #[test]
    fn a_daemon_command_that_never_gets_ready_times_out() {
        let within = Duration::from_millis(300);
        for (tag, script) in [
            ("silent", "exec sleep 30"),
            ("lingers", "echo listening; exec sleep 30"),
        ] {
            let program = daemon_command(tag, script);
            let started = Instant::now();
            let got = start_within(&program, "unused", within);
            let _ = std::fs::remove_file(&program);
            assert_eq!(
                got.unwrap_err().raw_os_error(),
                Some(libc::ETIMEDOUT),
                "{tag}"
            );
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{tag}: waited beyond its time"
            );
        }
        let program = daemon_command("ready", "echo listening");
        let got = start_within(&program, "unused", Duration::from_secs(30));
        let _ = std::fs::remove_file(&program);
        assert!(got.is_ok(), "{got:?}");
    }

    /// A reply whose descriptors found no room in the process (the
    /// kernel dropped them: `MSG_CTRUNC`) fails with EMFILE, not as a
    /// peer "without its descriptors".
    #[test]
    fn a_reply_whose_descriptors_were_dropped_is_emfile() {
        let (control, daemon) = socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let (data, _other) = socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let peer = Reply::Peer {
            pid: 1,
            region_bytes: 4096,
        };
        record::send_with_too_many_fds(&daemon, &peer.encode());
        let mut session = Session {
            direct: None,
            control,
            data,
            pending: Vec::new(),
            filled: 0,
        };
        let e = session.lookup(0x1001).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EMFILE), "{e}");
    }

    #[test]
    fn a_context_trusts_only_its_own_users_daemon_or_roots() {
        assert!(trusted(1000, 1000));
        assert!(trusted(0, 1000));
        assert!(trusted(0, 0));
        assert!(!trusted(1001, 1000));
        assert!(!trusted(1000, 0), "root does not use a user's daemon");
    }
}
