//! A context's side of the host daemon: finding it (starting it when no
//! daemon serves this network namespace), asking for QP numbers, and
//! reading the frames of packets it passes on.

use super::protocol::{FrameHeader, Reply, Request};
use super::record;
use rustix::net::{
    connect, recv, socket_with, socketpair, sockopt, AddressFamily, RecvFlags, SocketAddrUnix,
    SocketFlags, SocketType,
};
use std::io::{self, BufRead, BufReader};
use std::net::IpAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

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

/// An open session with the daemon: the control socket, whose close
/// frees everything the context held, and the data socket frames arrive
/// on.
#[derive(Debug)]
pub struct Session {
    control: OwnedFd,
    data: OwnedFd,
    /// The context's own member of the daemon's steering group on UDP
    /// 4791 (daemon/steering.rs): its packets, with no hop. `None` where
    /// the daemon could not steer; then everything comes on `data`.
    direct: Option<std::net::UdpSocket>,
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
        record::send(&control, &hello, Some(theirs.as_fd()))?;
        drop(theirs);
        let mut session = Session {
            control,
            data,
            direct: None,
            pending: vec![0; 1 << 17],
            filled: 0,
        };
        let (reply, direct) = session.reply()?;
        session.direct = direct.map(std::net::UdpSocket::from);
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

    fn request(&mut self, request: &Request) -> io::Result<Reply> {
        record::send(&self.control, &request.encode(), None)?;
        Ok(self.reply()?.0)
    }

    /// A reply and the descriptor it carried, if any.
    fn reply(&mut self) -> io::Result<(Reply, Option<OwnedFd>)> {
        let mut buf = [0u8; 512];
        let (n, fd) = record::recv(&self.control, &mut buf)?;
        if n == 0 {
            return Err(gone());
        }
        Ok((Reply::decode(&buf[..n])?, fd))
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
    Ok(fd)
}

/// Runs `program daemon --detach --socket NAME`, which prints one line
/// once the daemon listens and exits (the daemon lives on, detached).
fn start(program: &PathBuf, name: &str) -> io::Result<()> {
    // The daemon outlives the program: it must not carry the program's
    // preloaded libraries (this provider, sanitizers) with it.
    let mut child = Command::new(program)
        .args(["daemon", "--detach", "--socket", name])
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot start {} daemon: {e}", program.display()),
            )
        })?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        BufReader::new(out).read_line(&mut line)?;
    }
    let status = child.wait()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{} daemon failed: {status}",
            program.display()
        )))
    }
}
