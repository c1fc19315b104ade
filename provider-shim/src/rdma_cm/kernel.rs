//! The kernel's rdma_cm beside softverbs' in one process.
//!
//! A process with softverbs devices gets softverbs' rdma_cm (`mod.rs`). On
//! a host whose kernel has an rdma_cm too (a real RDMA device, or rxe), an
//! id whose address is not a softverbs device's belongs to the kernel's:
//! its channel then also gets a file of the kernel's rdma_cm, opened when
//! its first id goes there, the id's commands are written to that file
//! (with the id's kernel number), and its events are read from it by the
//! channel's GET_EVENT, so one channel serves ids of both.
//!
//! Which rdma_cm an id belongs to is decided when it is given an address:
//! BIND_IP or BIND with its source; RESOLVE_IP or RESOLVE_ADDR with its
//! source or, without one, the source the host's routing picks for the
//! destination. A softverbs device's address, a wildcard, or a
//! destination that is a softverbs device's address keeps the id
//! softverbs'; any other address moves it to the kernel's, which answers
//! for it from then on (an address no device has gets the kernel's
//! error). Until then the id is softverbs' (CREATE_ID made it there);
//! moving creates it anew in the kernel with the same uid, port space and
//! QP type and sets the options the application gave it again.
//!
//! A wildcard listener is both's: softverbs' id listens, and a shadow id
//! in the kernel's rdma_cm listens on the same wildcard address and port
//! with the same uid, so a connection request from either reaches the
//! application on its listener (the kernel's then makes the new id, whose
//! commands go to the kernel as above). The shadow goes with its id
//! (DESTROY_ID, MIGRATE_ID), and the events it reported count in the
//! id's. Where the kernel's port is taken, the listener is softverbs'
//! only.
//!
//! Numbers: softverbs' ids are numbered from `ID_HANDLES` (2^24) up and
//! the kernel hands out the lowest free number, so an id below is one the
//! kernel made (a connection request on its listener); a moved id keeps
//! the number the application knows, translated here both ways.

use super::real_open;
use softverbs_cm::abi::{cmd, event, id_offset, parse_sockaddr, Command, EVENT_LEN, HEADER_LEN};
use softverbs_cm::{Agent, ID_HANDLES};
use std::collections::HashMap;
use std::ffi::CStr;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::raw::c_void;
use std::sync::OnceLock;

/// The kernel's rdma_cm device file.
const KERNEL_DEVICE: &CStr = c"/dev/infiniband/rdma_cm";

/// One channel's file of the kernel's rdma_cm.
#[derive(Debug)]
struct KernelFile {
    fd: OwnedFd,
    /// It may hold an event: set when it became readable, cleared when a
    /// GET_EVENT found none.
    pending: bool,
}

/// An id that moved to the kernel's rdma_cm.
#[derive(Debug, Clone, Copy)]
struct Moved {
    /// Its number there.
    kernel: u32,
    /// The channel it is on.
    channel: RawFd,
}

/// The kernel's listener beside a wildcard listener of softverbs'.
#[derive(Debug, Clone, Copy)]
struct Shadow {
    /// Its number in the kernel's rdma_cm.
    kernel: u32,
    /// The channel its events go to.
    channel: RawFd,
}

/// An option the application set (level, name, value).
type SetOption = (u32, u32, Vec<u8>);

/// Where a command goes.
#[derive(Debug)]
pub(super) enum Route {
    /// To softverbs' rdma_cm.
    Ours,
    /// To the kernel's: this command to this file.
    Kernel { file: RawFd, cmd: Vec<u8> },
}

/// The kernel's side of the process's rdma_cm.
#[derive(Debug, Default)]
pub(super) struct KernelCm {
    files: HashMap<RawFd, KernelFile>,
    moved: HashMap<u32, Moved>,
    /// Options the application set on ids still softverbs', set again on
    /// the kernel's id if one moves; by id, with the id's channel.
    options: HashMap<u32, (RawFd, Vec<SetOption>)>,
    /// The shadows of softverbs' wildcard listeners, by listener.
    shadows: HashMap<u32, Shadow>,
}

/// Whether the kernel has an rdma_cm this process can open (asked once).
pub(super) fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| open_kernel_file().is_ok())
}

/// A new file of the kernel's rdma_cm, non-blocking (GET_EVENT then
/// answers EAGAIN instead of waiting).
fn open_kernel_file() -> Result<OwnedFd, i32> {
    let open = real_open().ok_or(libc::ENOSYS)?;
    let flags = libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: a NUL-terminated path and plain flags.
    let fd = unsafe { open(KERNEL_DEVICE.as_ptr(), flags, 0) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a descriptor just opened here, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn put32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn header(op: u32, len: usize, out: u16) -> Vec<u8> {
    let mut b = vec![0u8; len];
    put32(&mut b, 0, op);
    b[4..6].copy_from_slice(&((len - HEADER_LEN) as u16).to_ne_bytes());
    b[6..8].copy_from_slice(&out.to_ne_bytes());
    b
}

/// Writes one command to a kernel file: its errno if refused.
pub(super) fn write_command(file: RawFd, cmd: &[u8]) -> Result<(), i32> {
    let write = super::real_write().ok_or(libc::ENOSYS)?;
    // SAFETY: `cmd` is a live buffer of that length; the kernel writes
    // responses only where the command's response fields point (the
    // application's memory, or a local of the caller's).
    let n = unsafe { write(file, cmd.as_ptr().cast::<c_void>(), cmd.len()) };
    if n < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

impl KernelCm {
    /// Where command `original` on `channel` goes; `extended` is the same
    /// command with a SET_OPTION's value appended (as softverbs' rdma_cm
    /// reads it). Moves a fresh id to the kernel when its address says so.
    /// Only asked where the kernel has an rdma_cm ([`available`]).
    pub(super) fn route(
        &mut self,
        agent: &mut Agent,
        ours: &[IpAddr],
        channel: RawFd,
        original: &[u8],
        extended: &[u8],
    ) -> Result<Route, i32> {
        let Ok(c) = Command::parse(original) else {
            return Ok(Route::Ours);
        };
        let Some(at) = id_offset(c.cmd) else {
            return Ok(Route::Ours);
        };
        let Ok(id) = c.u32(at) else {
            return Ok(Route::Ours); // too short: softverbs' EINVAL
        };
        if id < ID_HANDLES {
            // Made by the kernel, so on this channel's kernel file (for a
            // MIGRATE_ID, the one it leaves) if it has one; without one
            // the id is no one's (softverbs' ENOENT).
            let on = match c.cmd {
                cmd::MIGRATE_ID => c.u32(20).map_or(channel, |from| from as RawFd),
                _ => channel,
            };
            return match self.files.contains_key(&on) {
                true => self.for_kernel(channel, original, at, id),
                false => Ok(Route::Ours),
            };
        }
        if let Some(m) = self.moved.get(&id).copied() {
            if c.cmd == cmd::DESTROY_ID {
                self.moved.remove(&id);
            }
            return self.for_kernel(channel, original, at, m.kernel);
        }
        match c.cmd {
            cmd::SET_OPTION if agent.fresh(id).is_some() => {
                self.remember_option(channel, id, &c, extended)
            }
            cmd::DESTROY_ID => {
                self.options.remove(&id);
            }
            cmd::BIND_IP | cmd::BIND | cmd::RESOLVE_IP | cmd::RESOLVE_ADDR
                if agent.fresh(id).is_some() && kernels(&c, ours) =>
            {
                let kernel = self.move_id(agent, channel, id)?;
                return self.for_kernel(channel, original, at, kernel);
            }
            _ => {}
        }
        Ok(Route::Ours)
    }

    /// The command with the id at `at` set to `kernel`, to the channel's
    /// kernel file (a MIGRATE_ID names the file its id leaves).
    fn for_kernel(
        &mut self,
        channel: RawFd,
        original: &[u8],
        at: usize,
        kernel: u32,
    ) -> Result<Route, i32> {
        let mut cmd = original.to_vec();
        put32(&mut cmd, at, kernel);
        if u32::from_ne_bytes([cmd[0], cmd[1], cmd[2], cmd[3]]) == cmd::MIGRATE_ID {
            let from = Command::parse(original).and_then(|c| c.u32(20))? as RawFd;
            let from_file = self.files.get(&from).ok_or(libc::EINVAL)?.fd.as_raw_fd();
            put32(&mut cmd, 20, from_file as u32);
            for m in self.moved.values_mut().filter(|m| m.kernel == kernel) {
                m.channel = channel;
            }
        }
        let file = self.file(channel)?;
        Ok(Route::Kernel { file, cmd })
    }

    /// The kernel file of `channel`, opened now if it has none.
    fn file(&mut self, channel: RawFd) -> Result<RawFd, i32> {
        if let Some(f) = self.files.get(&channel) {
            return Ok(f.fd.as_raw_fd());
        }
        let fd = open_kernel_file()?;
        let raw = fd.as_raw_fd();
        self.files
            .insert(channel, KernelFile { fd, pending: false });
        Ok(raw)
    }

    /// Creates fresh id `id` anew in the kernel's rdma_cm and forgets it in
    /// softverbs': its kernel number.
    fn move_id(&mut self, agent: &mut Agent, channel: RawFd, id: u32) -> Result<u32, i32> {
        let (uid, ps, qp_type) = agent.fresh(id).ok_or(libc::EINVAL)?;
        let file = self.file(channel)?;
        let kernel = create_id(file, uid, ps, qp_type)?;
        let (_, options) = self.options.remove(&id).unwrap_or_default();
        set_options(file, kernel, &options);
        agent.hand_over(id);
        self.moved.insert(id, Moved { kernel, channel });
        Ok(kernel)
    }

    /// Softverbs' id `id` on `channel` now listens, with `backlog`: if it
    /// listens on a wildcard, a shadow listens in the kernel's rdma_cm on
    /// the same address and port. Whether one does (or why not).
    pub(super) fn shadow_listener(
        &mut self,
        agent: &Agent,
        channel: RawFd,
        id: u32,
        backlog: u32,
    ) -> Result<bool, i32> {
        let Some((uid, ps, qp_type, addr)) = agent.wildcard_listener(id) else {
            return Ok(false);
        };
        if self.shadows.contains_key(&id) {
            return Ok(true); // shadowed already (a LISTEN succeeds once)
        }
        let file = self.file(channel)?;
        let kernel = create_id(file, uid, ps, qp_type)?;
        let options = self.options.get(&id).map(|(_, o)| o.as_slice());
        set_options(file, kernel, options.unwrap_or_default());
        let mut bind = header(cmd::BIND_IP, HEADER_LEN + 40, 0);
        softverbs_cm::abi::put_sockaddr(&mut bind[16..44], addr);
        put32(&mut bind, 44, kernel);
        let mut listen = header(cmd::LISTEN, HEADER_LEN + 8, 0);
        put32(&mut listen, 8, kernel);
        put32(&mut listen, 12, backlog);
        let listening = write_command(file, &bind).and_then(|()| write_command(file, &listen));
        if let Err(e) = listening {
            let _ = destroy_id(file, kernel);
            return Err(e);
        }
        self.shadows.insert(id, Shadow { kernel, channel });
        Ok(true)
    }

    /// Softverbs' id `id` is being destroyed: its shadow too. The events
    /// the shadow reported (0 without one).
    pub(super) fn destroy_shadow(&mut self, id: u32) -> u32 {
        let Some(s) = self.shadows.remove(&id) else {
            return 0;
        };
        let file = self.files.get(&s.channel).map(|f| f.fd.as_raw_fd());
        file.and_then(|f| destroy_id(f, s.kernel).ok()).unwrap_or(0)
    }

    /// Softverbs' id `id` moves from channel `from` to `to`: its shadow
    /// moves to `to`'s kernel file. The events the shadow reported (0
    /// without one), or the kernel's errno.
    pub(super) fn migrate_shadow(&mut self, id: u32, from: RawFd, to: RawFd) -> Result<u32, i32> {
        let Some(s) = self.shadows.get(&id).copied().filter(|s| s.channel == from) else {
            return Ok(0);
        };
        let from_file = self.files.get(&from).ok_or(libc::EINVAL)?.fd.as_raw_fd();
        let to_file = self.file(to)?;
        let mut reported = 0u32;
        let mut migrate = header(cmd::MIGRATE_ID, HEADER_LEN + 16, 4);
        migrate[8..16].copy_from_slice(&(std::ptr::addr_of_mut!(reported) as u64).to_ne_bytes());
        put32(&mut migrate, 16, s.kernel);
        put32(&mut migrate, 20, from_file as u32);
        // The kernel writes the count through the pointer above.
        write_command(to_file, &migrate)?;
        self.shadows.insert(id, Shadow { channel: to, ..s });
        Ok(reported)
    }

    fn remember_option(&mut self, channel: RawFd, id: u32, c: &Command<'_>, extended: &[u8]) {
        let (Ok(level), Ok(name), Ok(len)) = (c.u32(20), c.u32(24), c.u32(28)) else {
            return;
        };
        let end = HEADER_LEN + usize::from(u16::from_ne_bytes([extended[4], extended[5]]));
        if let Some(value) = extended.get(end..end + len as usize) {
            let (_, options) = self.options.entry(id).or_insert((channel, Vec::new()));
            options.push((level, name, value.to_vec()));
        }
    }

    /// An event of `channel`'s kernel file, if it has one: the response
    /// GET_EVENT gives (a moved id's number translated back).
    pub(super) fn event(&mut self, channel: RawFd) -> Result<Option<Vec<u8>>, i32> {
        let Some(f) = self.files.get_mut(&channel) else {
            return Ok(None);
        };
        if !f.pending {
            return Ok(None);
        }
        let mut ev = vec![0u8; EVENT_LEN];
        let mut get = header(cmd::GET_EVENT, HEADER_LEN + 8, EVENT_LEN as u16);
        get[8..16].copy_from_slice(&(ev.as_mut_ptr() as u64).to_ne_bytes());
        match write_command(f.fd.as_raw_fd(), &get) {
            Ok(()) => {}
            Err(libc::EAGAIN) => {
                f.pending = false;
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
        let kernel = u32::from_ne_bytes([ev[8], ev[9], ev[10], ev[11]]);
        let event = u32::from_ne_bytes([ev[12], ev[13], ev[14], ev[15]]);
        // A multicast event names the join (numbered apart), not the id.
        if matches!(event, event::MULTICAST_JOIN | event::MULTICAST_ERROR) {
            return Ok(Some(ev));
        }
        let moved = self.moved.iter().map(|(&id, m)| (id, m.kernel, m.channel));
        let shadows = self
            .shadows
            .iter()
            .map(|(&id, s)| (id, s.kernel, s.channel));
        if let Some((ours, _, _)) = moved
            .chain(shadows)
            .find(|&(_, k, c)| k == kernel && c == channel)
        {
            put32(&mut ev, 8, ours);
        }
        Ok(Some(ev))
    }

    /// Whether `channel`'s kernel file may hold an event.
    pub(super) fn pending(&self, channel: RawFd) -> bool {
        self.files.get(&channel).is_some_and(|f| f.pending)
    }

    /// The kernel files to watch for events: (channel, file), those not
    /// already known to hold one.
    pub(super) fn watched(&self) -> Vec<(RawFd, RawFd)> {
        self.files
            .iter()
            .filter(|(_, f)| !f.pending)
            .map(|(&c, f)| (c, f.fd.as_raw_fd()))
            .collect()
    }

    /// `channel`'s kernel file became readable.
    pub(super) fn readable(&mut self, channel: RawFd) {
        if let Some(f) = self.files.get_mut(&channel) {
            f.pending = true;
        }
    }

    /// Channel `from` is known as `to` from now on (`Service`'s aliases):
    /// its kernel file and ids go with it.
    pub(super) fn rename_channel(&mut self, from: RawFd, to: RawFd) {
        if let Some(file) = self.files.remove(&from) {
            self.files.insert(to, file);
        }
        let renamed = |c: &mut RawFd| {
            if *c == from {
                *c = to;
            }
        };
        self.moved
            .values_mut()
            .for_each(|m| renamed(&mut m.channel));
        self.options.values_mut().for_each(|(c, _)| renamed(c));
        self.shadows
            .values_mut()
            .for_each(|s| renamed(&mut s.channel));
    }

    /// The application closed `channel`: its kernel file closes too, which
    /// destroys its ids there, as closing the kernel's file does.
    pub(super) fn close_channel(&mut self, channel: RawFd) {
        self.files.remove(&channel);
        self.moved.retain(|_, m| m.channel != channel);
        self.options.retain(|_, (c, _)| *c != channel);
        self.shadows.retain(|_, s| s.channel != channel);
    }
}

/// Creates an id in the kernel's rdma_cm through `file`: its number.
fn create_id(file: RawFd, uid: u64, ps: u16, qp_type: u8) -> Result<u32, i32> {
    let mut kernel = 0u32;
    let mut create = header(cmd::CREATE_ID, HEADER_LEN + 24, 4);
    create[8..16].copy_from_slice(&uid.to_ne_bytes());
    create[16..24].copy_from_slice(&(std::ptr::addr_of_mut!(kernel) as u64).to_ne_bytes());
    create[24..26].copy_from_slice(&ps.to_ne_bytes());
    create[26] = qp_type;
    // The kernel writes the number through the pointer above (exposed by
    // the cast, so the call may write it).
    write_command(file, &create)?;
    Ok(kernel)
}

/// Sets on kernel id `kernel` the options the application set on
/// softverbs' id.
fn set_options(file: RawFd, kernel: u32, options: &[SetOption]) {
    for (level, name, value) in options {
        let mut set = header(cmd::SET_OPTION, HEADER_LEN + 24, 0);
        set[8..16].copy_from_slice(&(value.as_ptr() as u64).to_ne_bytes());
        put32(&mut set, 16, kernel);
        put32(&mut set, 20, *level);
        put32(&mut set, 24, *name);
        put32(&mut set, 28, value.len() as u32);
        // As the application set it on softverbs' id; the kernel's answer
        // to a value it refuses is not the application's to see.
        let _ = write_command(file, &set);
    }
}

/// Destroys kernel id `kernel`: the events it reported.
fn destroy_id(file: RawFd, kernel: u32) -> Result<u32, i32> {
    let mut reported = 0u32;
    let mut destroy = header(cmd::DESTROY_ID, HEADER_LEN + 16, 4);
    destroy[8..16].copy_from_slice(&(std::ptr::addr_of_mut!(reported) as u64).to_ne_bytes());
    put32(&mut destroy, 16, kernel);
    // The kernel writes the count through the pointer above.
    write_command(file, &destroy)?;
    Ok(reported)
}

/// Whether the address command `c` gives its id belongs to the kernel's
/// rdma_cm: an address of none of `ours` (the softverbs devices').
fn kernels(c: &Command<'_>, ours: &[IpAddr]) -> bool {
    let sockaddr = |at: usize, len: usize| c.bytes(at, len).ok().and_then(parse_sockaddr);
    let (src, dst) = match c.cmd {
        cmd::BIND_IP => (sockaddr(16, 28), None),
        cmd::BIND => (sockaddr(16, 128), None),
        cmd::RESOLVE_IP => (sockaddr(8, 28), sockaddr(36, 28)),
        cmd::RESOLVE_ADDR => (sockaddr(24, 128), sockaddr(152, 128)),
        _ => return false,
    };
    let is_ours = |ip: IpAddr| ours.iter().any(|&o| same(o, ip));
    let src = src.map(|a| a.ip()).filter(|ip| !ip.is_unspecified());
    match (src, dst) {
        (Some(ip), _) => !is_ours(ip),
        (None, Some(dst)) if is_ours(dst.ip()) => false,
        (None, Some(dst)) => route_source(dst).is_some_and(|ip| !is_ours(ip)),
        (None, None) => false, // a wildcard bind
    }
}

/// The source address the host's routing picks for `dst`.
pub(super) fn route_source(dst: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = match dst {
        SocketAddr::V4(_) => "0.0.0.0:0".parse().ok()?,
        SocketAddr::V6(_) => "[::]:0".parse().ok()?,
    };
    let socket = UdpSocket::bind(any).ok()?;
    // Connecting a UDP socket sends nothing: it only picks the route.
    let port = dst.port().max(1);
    socket.connect(SocketAddr::new(dst.ip(), port)).ok()?;
    socket.local_addr().ok().map(|a| a.ip())
}

/// One address, IPv4 or IPv4-mapped alike.
fn same(a: IpAddr, b: IpAddr) -> bool {
    let canon = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    canon(a) == canon(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(op: u32, len: usize) -> Vec<u8> {
        header(op, len, 0)
    }

    fn put_addr(b: &mut [u8], at: usize, addr: &str) {
        softverbs_cm::abi::put_sockaddr(&mut b[at..], addr.parse().unwrap());
    }

    #[test]
    fn an_address_of_a_softverbs_device_or_none_stays_ours() {
        let ours: [IpAddr; 1] = ["10.9.0.1".parse().unwrap()];
        let mut bind = command(cmd::BIND_IP, 48);
        put_addr(&mut bind, 16, "10.9.0.1:7471");
        let c = |b: &[u8]| !kernels(&Command::parse(b).unwrap(), &ours);
        assert!(c(&bind), "a softverbs address");
        put_addr(&mut bind, 16, "0.0.0.0:7471");
        assert!(c(&bind), "a wildcard");
        put_addr(&mut bind, 16, "[::ffff:10.9.0.1]:1");
        assert!(c(&bind), "the same address IPv4-mapped");
        put_addr(&mut bind, 16, "10.9.0.2:7471");
        assert!(!c(&bind), "another address is the kernel's");
        let mut resolve = command(cmd::RESOLVE_IP, 72);
        put_addr(&mut resolve, 36, "10.9.0.1:7471");
        assert!(c(&resolve), "a destination that is a softverbs device");
        put_addr(&mut resolve, 8, "192.0.2.7:0");
        assert!(!c(&resolve), "a source decides before the destination");
    }
}
