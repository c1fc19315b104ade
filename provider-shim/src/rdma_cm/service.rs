//! The process's rdma_cm service: the sans-IO agent (`softverbs-cm`), a
//! daemon session per softverbs device (the host's port space, and QP1
//! MADs in and out), the channels' descriptors, and a thread that takes
//! arriving MADs and runs the CM's timers while nobody calls in.
//!
//! A channel is one end of a socket pair, handed to the application as
//! the device file's descriptor. The other end stays here and holds one
//! byte exactly while the channel has an event queued, so the
//! application's `poll`/`epoll` see POLLIN as on the kernel's file.
//!
//! A channel is known by the number it was opened as (its key). A
//! duplicate of it (`dup`, `dup2`, `dup3`, `fcntl(F_DUPFD)`) is an alias:
//! a command written to it runs on the channel, and closing one of the
//! numbers closes the channel only when it was the last, as the kernel's
//! file lives while a descriptor holds it. The key closed first, the
//! channel takes an alias's number as its key (`release_number`).

use super::fds;
use super::kernel::{self, KernelCm, Route};
use parking_lot::Mutex;
use softverbs_cm::abi::{cmd, Command};
use softverbs_cm::{Agent, Device, PortSpace, Reply};
use softverbs_transport::clock::Clock;
use softverbs_transport::endpoint::{Endpoint, Receiver};
use softverbs_transport::own_threads::{self, OwnThread};
use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How long `Service::still_channel` tries for the lock.
const STILL_CHANNEL_WAIT: Duration = Duration::from_millis(10);
/// How often the service looks whether the application's threads have all
/// ended (`own_threads.rs`).
const APP_END_LOOK: Duration = Duration::from_secs(1);

/// One channel's descriptors.
#[derive(Debug)]
struct ChannelIo {
    /// Our end of the pair: a byte written here makes the application's
    /// end readable.
    ours: OwnedFd,
    /// A byte is waiting in the application's end.
    signalled: bool,
}

/// Our end of a channel being closed: the channel's number and file.
/// Closed only after the application's `close` of that number: a plain
/// write that reaches the application's end meanwhile (one that looked
/// at the number before it was a channel, past `new_channels`' bounded
/// wait) puts a few bytes nobody reads into a live pair. Into a pair
/// whose other end was gone it was EPIPE and SIGPIPE, or a reset
/// (ECONNRESET) for bytes left unread there.
#[derive(Debug)]
struct ClosingEnd {
    fd: RawFd,
    file: Option<(u64, u64)>,
    /// Only held, closed when dropped.
    _ours: OwnedFd,
}

/// What the lock guards.
#[derive(Debug)]
struct Inner {
    agent: Agent,
    endpoints: Vec<(IpAddr, Endpoint)>,
    /// The devices whose daemon session broke (the daemon died).
    dead: Vec<IpAddr>,
    channels: HashMap<RawFd, ChannelIo>,
    /// Duplicates of channels: each number's channel key.
    aliases: HashMap<RawFd, RawFd>,
    /// Our ends of channels the application is closing, kept open until
    /// its end is closed ([`Service::unmark`]).
    closing: Vec<ClosingEnd>,
    /// Channel numbers the application is closing, from the service's
    /// part of the close to the number's unmarking: a command through one
    /// meanwhile was overtaken by the close, and the unmarking is the
    /// close's only if the number was not made a channel again meanwhile
    /// (a `dup` can give the number back, naming the same file, before
    /// `unmark`).
    unmarking: HashSet<RawFd>,
    /// The ids the kernel's rdma_cm serves (`kernel.rs`).
    kernel: KernelCm,
}

/// The service.
#[derive(Debug)]
pub struct Service {
    inner: Mutex<Inner>,
    clock: Clock,
    /// Wakes the thread when a command armed an earlier timer.
    wake: OwnedFd,
    /// The thread was started.
    serving: std::sync::atomic::AtomicBool,
    /// The process the service runs in: a child made by `fork` shares the
    /// channels' descriptors but not the rdma_cm behind them.
    pid: u32,
}

/// A started service, or why it could not start.
type Started = Result<Arc<Service>, String>;

/// The process's service, with the process id it was started in.
static SERVICE: Mutex<Option<(u32, Started)>> = Mutex::new(None);
/// The process id the service was started in, read without the lock: a
/// forked child must not take the lock (a thread of its parent may have
/// held it at the fork).
static SERVICE_PID: AtomicU32 = AtomicU32::new(0);

/// The service, started at the first use in this process; why not, if it
/// cannot be. A forked child starts its own: it has no copy of its
/// parent's thread, and its parent's daemon sessions and state are the
/// parent's (the kernel gives a child that opens the device a file of its
/// own too). The parent's service is left as it is, never dropped: a
/// thread of the parent may have held its lock at the fork.
pub fn get() -> Started {
    let pid = std::process::id();
    let mut current = SERVICE.lock();
    if let Some((owner, service)) = &*current {
        if *owner == pid {
            return service.clone();
        }
    }
    if let Some((_, Ok(parents))) = current.take() {
        std::mem::forget(parents);
    }
    let service = Service::start().map(Arc::new);
    *current = Some((pid, service.clone()));
    SERVICE_PID.store(pid, std::sync::atomic::Ordering::Release);
    service
}

/// This process's service, if it has started one, without starting one:
/// closing a descriptor must not start a service, least of all in a vfork
/// child, which shares its parent's memory and may not start threads. A
/// forked child has none until it opens a channel of its own (the
/// channels it inherited are its parent's).
pub fn existing() -> Option<Arc<Service>> {
    if SERVICE_PID.load(std::sync::atomic::Ordering::Acquire) != std::process::id() {
        return None;
    }
    SERVICE
        .lock()
        .as_ref()
        .and_then(|(_, s)| s.as_ref().ok().cloned())
}

/// The port space, through the daemon sessions.
struct Ports<'a>(&'a mut [(IpAddr, Endpoint)]);

impl Ports<'_> {
    /// The session for an address: its device's, or the first one.
    fn session(&mut self, ip: IpAddr) -> Option<&mut Endpoint> {
        let i = self.0.iter().position(|(a, _)| *a == ip).unwrap_or(0);
        self.0.get_mut(i).map(|(_, e)| e)
    }
}

fn errno_of(e: io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

impl PortSpace for Ports<'_> {
    fn reserve(&mut self, ps: u16, ip: IpAddr, port: u16, afonly: bool) -> Result<u16, i32> {
        let e = self.session(ip).ok_or(libc::ENODEV)?;
        e.reserve(ps, ip, port, afonly).map_err(errno_of)
    }
    fn listen(&mut self, ps: u16, ip: IpAddr, port: u16) -> Result<(), i32> {
        let e = self.session(ip).ok_or(libc::ENODEV)?;
        e.listen(ps, ip, port).map_err(errno_of)
    }
    fn release(&mut self, ps: u16, ip: IpAddr, port: u16) {
        if let Some(e) = self.session(ip) {
            let _ = e.release(ps, ip, port);
        }
    }
    fn requesting(&mut self, from: IpAddr, to: IpAddr, comm_id: u32, ca_guid: u64, tid: u64) {
        if let Some(e) = self.session(from) {
            // Refused only for a comm ID not of the session's blocks,
            // which the agent never makes; the REQ goes out regardless.
            let _ = e.requesting(to, comm_id, ca_guid, tid);
        }
    }
    fn replying(&mut self, from: IpAddr, to: IpAddr, comm_id: u32, remote_comm_id: u32) {
        if let Some(e) = self.session(from) {
            // As for `requesting`: the REP goes out regardless.
            let _ = e.replying(to, comm_id, remote_comm_id);
        }
    }
    /// The kernel's route lookup, as a UDP socket of `from` connecting to
    /// `to` does it (no packet leaves; the port, RoCEv2's, is not looked
    /// at). A socket that cannot be made answers nothing about the route.
    fn route(&mut self, from: IpAddr, to: IpAddr) -> Result<(), i32> {
        let Ok(socket) = std::net::UdpSocket::bind(SocketAddr::new(from, 0)) else {
            return Ok(());
        };
        socket.connect(SocketAddr::new(to, 4791)).map_err(errno_of)
    }
    fn source_for(&mut self, to: IpAddr) -> Option<IpAddr> {
        super::kernel::route_source(SocketAddr::new(to, 4791))
    }
    fn next_hop_known(&mut self, from: IpAddr, to: IpAddr) -> bool {
        super::neighbour::next_hop_known(from, to)
    }
}

impl Service {
    fn start() -> Result<Service, String> {
        let daemon = softverbs_config::Config::daemon(crate::daemon_program::find());
        let mut devices = Vec::new();
        let mut endpoints = Vec::new();
        let mut unserved = Vec::new();
        for p in crate::device::all() {
            let Some(d) = crate::device::soft(p) else {
                continue;
            };
            let ip = d.config.ip;
            // A device whose address has no session (the address is on no
            // interface now, say) leaves the others served, as the
            // kernel's rdma_cm serves the addresses that are there.
            let endpoint = match Endpoint::open(ip, &daemon) {
                Ok(e) => e,
                Err(e) => {
                    let why = crate::context::why(d, &e);
                    unserved.push(format!("rdma_cm: no daemon session for {ip}: {why}"));
                    continue;
                }
            };
            let mtu = d.config.device_config(0).ports[0].active_mtu as u8;
            devices.push(Device {
                node_guid: d.config.guid().to_be_bytes(),
                ip,
                comm_block: endpoint.slots()[0],
                path_mtu: mtu,
            });
            endpoints.push((ip, endpoint));
        }
        if devices.is_empty() {
            return Err(match unserved.is_empty() {
                true => "rdma_cm: no softverbs device is configured".into(),
                false => unserved.join("; "),
            });
        }
        for why in unserved {
            softverbs_transport::say!("softverbs: {why}; its address is not served");
        }
        let wake: OwnedFd = nix::sys::eventfd::EventFd::from_value_and_flags(
            0,
            nix::sys::eventfd::EfdFlags::EFD_CLOEXEC | nix::sys::eventfd::EfdFlags::EFD_NONBLOCK,
        )
        .map_err(|e| format!("rdma_cm: eventfd: {e}"))?
        .into();
        let mut agent = Agent::new(devices, fastrand::u64(..));
        agent.set_bindv6only(bindv6only());
        let service = Service {
            inner: Mutex::new(Inner {
                agent,
                endpoints,
                dead: Vec::new(),
                channels: HashMap::new(),
                aliases: HashMap::new(),
                closing: Vec::new(),
                unmarking: HashSet::new(),
                kernel: KernelCm::default(),
            }),
            clock: Clock::start(),
            wake,
            serving: std::sync::atomic::AtomicBool::new(false),
            pid: std::process::id(),
        };
        Ok(service)
    }

    /// Starts the thread that serves arriving MADs and timers, once.
    pub fn run_in_background(self: &Arc<Self>) {
        if self.serving.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        let me = Arc::clone(self);
        let _ = own_threads::spawning(|| {
            std::thread::Builder::new()
                .name("softverbs-cm".into())
                .spawn(move || me.serve())
        });
    }

    /// A new channel: the descriptor the application gets, non-blocking
    /// from the start if `nonblocking` (as the kernel's file opened with
    /// O_NONBLOCK: a write racing the open never finds it blocking).
    pub fn open_channel(&self, nonblocking: bool) -> io::Result<RawFd> {
        use nix::sys::socket::SockFlag;
        let _alone = super::new_channels::making_a_channel();
        let flags = match nonblocking {
            true => SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            false => SockFlag::SOCK_CLOEXEC,
        };
        let (app, ours) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::Stream,
            None,
            flags,
        )?;
        let ours = out_of_the_way(ours);
        let fd = app.as_raw_fd();
        if fd >= fds::MAX_FD {
            return Err(io::Error::from_raw_os_error(libc::EMFILE));
        }
        let file = super::file_of(fd).ok_or_else(io::Error::last_os_error)?;
        let mut inner = self.inner.lock();
        // A channel of this number closed without close(2) (close_range,
        // a dup2 past this library): its ids go now (or stay with its
        // duplicates), not into the new channel.
        inner.release_number(fd);
        inner.unmarking.remove(&fd); // a close of the number is over
        inner.agent.open_channel(fd);
        inner.channels.insert(
            fd,
            ChannelIo {
                ours,
                signalled: false,
            },
        );
        fds::set_file(fd, file);
        fds::set_channel(fd, true);
        // The application owns this end from now on (it closes it).
        let _ = std::os::fd::IntoRawFd::into_raw_fd(app);
        Ok(fd)
    }

    /// The application closes channel number `fd`: if it was the
    /// channel's last (no duplicate holds it), the channel's ids go, as
    /// when the kernel releases the file. The caller closes the
    /// descriptor itself, then
    /// [`unmark`](Self::unmark)s it: until then a write on it (another
    /// thread's GET_EVENT, racing the close) is a command on a closed
    /// channel, EBADF as from the kernel's file, never a write into the
    /// socket pair, and our end stays open until then (`ClosingEnd`).
    /// `file` is the channel's, as the caller found it (and gives it to
    /// `unmark`).
    pub fn close_channel(&self, fd: RawFd, file: Option<(u64, u64)>) {
        if std::process::id() != self.pid {
            // A forked child closing its copy: as with the kernel's file,
            // the parent's ids live on (and a vfork child shares the
            // parent's memory, so not even the mark is cleared).
            return;
        }
        let mut inner = self.inner.lock();
        inner.unmarking.insert(fd);
        if let Some(ours) = inner.release_number(fd) {
            inner.closing.push(ClosingEnd {
                fd,
                file,
                _ours: ours,
            });
        }
    }

    /// `dup` and its kin on channel number `old`, `over` the number
    /// `dup2`/`dup3` name: `dup` is the real call, made here, under the
    /// locks `open_channel` takes (no command or readiness byte sees the
    /// numbers half done, and a write to the new number looks at it
    /// before or after). Its result, the new number an alias of the
    /// channel; a channel number the new one had was closed by it. Where
    /// the result could be no channel, the call is not made: EBADF for a
    /// channel being closed (a `dup` after the close), or a number asked
    /// for that this library cannot mark (as a number past the limit); a
    /// new number it cannot mark is closed again: EMFILE.
    pub fn duplicate(&self, old: RawFd, over: Option<RawFd>, dup: impl FnOnce() -> RawFd) -> RawFd {
        if std::process::id() != self.pid {
            return dup(); // a forked child's channels are its parent's
        }
        let _alone = super::new_channels::making_a_channel();
        let mut inner = self.inner.lock();
        let file = fds::file(old);
        let source = fds::is_channel(old) && super::file_of(old) == file;
        let live = inner.channels.contains_key(&inner.key_of(old));
        let unmarkable = over.is_some_and(|n| !(0..fds::MAX_FD).contains(&n));
        if source && (!live || unmarkable) {
            crate::guard::set_errno(libc::EBADF);
            return -1;
        }
        let new = dup();
        let errno = io::Error::last_os_error().raw_os_error();
        if new < 0 || new == old {
            if let Some(errno) = errno {
                crate::guard::set_errno(errno); // dup's, whatever the lock did
            }
            return new;
        }
        if fds::is_channel(new) {
            // A channel number `dup2` closed, or one closed past this
            // library (`close_range`) that the call reused: it is closed,
            // and nothing can write into its pair any more.
            drop(inner.release_number(new));
            fds::set_channel(new, false);
        }
        inner.unmarking.remove(&new); // a close of the number is over
        if !source {
            return new;
        }
        if new >= fds::MAX_FD {
            if let Some(close) = super::real_close() {
                // SAFETY: the number the call just made, no one else's yet.
                unsafe { close(new) };
            }
            crate::guard::set_errno(libc::EMFILE);
            return -1;
        }
        let key = inner.key_of(old);
        inner.aliases.insert(new, key);
        if let Some(file) = file {
            fds::set_file(new, file);
        }
        fds::set_channel(new, true);
        new
    }

    /// Whether `fd` is still the channel it is marked as. A number that
    /// names another file now (dup2 over it, close_range, or closed and
    /// opened again) loses its channel and its mark. Looked at under the
    /// lock `open_channel` records a new channel's file under: a channel
    /// opened on the number meanwhile is taken for what it is (it was
    /// closed as the old one's, and the write that asked went into its
    /// socket pair). The lock is only tried for a moment: a descriptor
    /// the service closes while it holds it (a socket of its own) could
    /// carry a stale mark, and a number whose file changed is most likely
    /// no channel (it is taken as none, and looked at again next time).
    pub fn still_channel(&self, fd: RawFd) -> bool {
        let Some(mut inner) = self.inner.try_lock_for(STILL_CHANNEL_WAIT) else {
            return false;
        };
        let recorded = fds::file(fd);
        if super::file_of(fd).is_some_and(|f| recorded == Some(f)) {
            return true;
        }
        // A forked child's descriptor table is its own, and a vfork child
        // shares the parent's memory, marks included: only the process
        // that opened the channel forgets it.
        if std::process::id() == self.pid {
            inner.release_number(fd);
            fds::set_channel(fd, false);
        }
        false
    }

    /// Descriptor `fd`, the channel of `file` until it was closed, is no
    /// channel any more, unless the number already names a new one (whose
    /// file `open_channel` records under the same lock). Our end of it
    /// closes now (a GET_EVENT waiting on it hears the hang-up).
    pub fn unmark(&self, fd: RawFd, file: Option<(u64, u64)>) {
        if std::process::id() != self.pid {
            return; // as in `close_channel`
        }
        let mut inner = self.inner.lock();
        inner.closing.retain(|c| (c.fd, c.file) != (fd, file));
        if inner.unmarking.remove(&fd) && fds::file(fd) == file {
            fds::set_channel(fd, false);
        }
    }

    /// Whether channel number `fd` is being closed by this process (from
    /// [`close_channel`](Self::close_channel) to [`unmark`](Self::unmark)).
    pub fn closing(&self, fd: RawFd) -> bool {
        self.inner.lock().unmarking.contains(&fd)
    }

    /// Runs command `original` on channel `fd` in the kernel's rdma_cm if
    /// its id is the kernel's (or moves there now, `kernel.rs`): whether it
    /// did, or the kernel's errno. `extended` is the command as softverbs'
    /// rdma_cm reads it.
    pub fn kernel_command(&self, fd: RawFd, original: &[u8], extended: &[u8]) -> Result<bool, i32> {
        if !kernel::available() {
            return Ok(false);
        }
        let mut inner = self.inner.lock();
        let ours: Vec<IpAddr> = inner.endpoints.iter().map(|(ip, _)| *ip).collect();
        let (key, original) = inner.keyed(fd, original);
        let (_, extended) = inner.keyed(fd, extended);
        let Inner { agent, kernel, .. } = &mut *inner;
        let Route::Kernel { file, cmd } = kernel.route(agent, &ours, key, &original, &extended)?
        else {
            return Ok(false);
        };
        let result = kernel::write_command(file, &cmd);
        drop(inner);
        if tracing() {
            softverbs_transport::say!(
                "softverbs rdma_cm: channel {fd} command {}: to the kernel's rdma_cm: {}",
                u32::from_ne_bytes([cmd[0], cmd[1], cmd[2], cmd[3]]),
                result.map_or_else(traced_errno, |()| "Ok".to_string())
            );
        }
        // The thread watches the channel's kernel file, which may be new.
        let _ = nix::unistd::write(&self.wake, &1u64.to_ne_bytes());
        result.map(|()| true)
    }

    /// An event from channel `fd`'s file of the kernel's rdma_cm, if one
    /// waits: the GET_EVENT response.
    pub fn kernel_event(&self, fd: RawFd) -> Result<Option<Vec<u8>>, i32> {
        let mut inner = self.inner.lock();
        let key = inner.key_of(fd);
        let was_pending = inner.kernel.pending(key);
        let event = inner.kernel.event(key);
        if was_pending && !inner.kernel.pending(key) {
            // Found none: the thread watches the file again, and the
            // channel is readable only for softverbs' events.
            inner.flush();
            drop(inner);
            let _ = nix::unistd::write(&self.wake, &1u64.to_ne_bytes());
        }
        event
    }

    /// Executes one command written to channel `fd`. `Ok(None)`: GET_EVENT
    /// found no event (the caller waits for the descriptor, or answers
    /// EAGAIN).
    pub fn command(&self, fd: RawFd, buf: &[u8]) -> Result<Option<Reply>, i32> {
        let now = self.clock.now();
        let mut inner = self.inner.lock();
        let (key, buf) = inner.keyed(fd, buf);
        let Inner {
            agent,
            endpoints,
            kernel,
            ..
        } = &mut *inner;
        let destroyed_shadow = shadow_before(kernel, &buf);
        let mut reply = agent.command(now, key, &buf, &mut Ports(endpoints));
        if reply.is_ok() {
            let moved_shadow = shadow_after(agent, kernel, key, &buf);
            if let Ok(Reply::Respond { bytes, .. }) = &mut reply {
                count_shadow_events(bytes, destroyed_shadow + moved_shadow);
            }
        }
        inner.flush();
        drop(inner);
        if tracing() {
            let cmd = buf
                .get(..4)
                .map_or(u32::MAX, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
            let answer = match &reply {
                Ok(Reply::Respond { bytes, .. }) => format!("{} bytes", bytes.len()),
                Err(errno) => traced_errno(*errno),
                other => format!("{other:?}"),
            };
            // The number first (tests wait for "command 7: Ok"), its name
            // last.
            let name = cmd::name(cmd);
            softverbs_transport::say!(
                "softverbs rdma_cm: channel {fd} command {cmd}: {answer} ({name})"
            );
        }
        // A retransmission may now be due before the thread's sleep ends.
        let _ = nix::unistd::write(&self.wake, &1u64.to_ne_bytes());
        match reply? {
            Reply::NoEvent => Ok(None),
            r => Ok(Some(r)),
        }
    }

    /// The thread: waits for MADs (on every session's data descriptor),
    /// the next CM timer, or a wake-up.
    fn serve(&self) {
        let _own = OwnThread::register();
        let mut end_look_at = Instant::now() + APP_END_LOOK;
        loop {
            let (timeout, watched, data) = {
                let inner = self.inner.lock();
                (
                    inner.agent.poll_timeout(),
                    inner.kernel.watched(),
                    inner.live_sessions(),
                )
            };
            // At least once a second: whether the application has ended.
            let look_ms = end_look_at
                .saturating_duration_since(Instant::now())
                .as_millis()
                + 1;
            let ms = timeout.map_or(look_ms, |at| self.clock.until(at).as_millis() + 1);
            let ms = i32::try_from(ms.min(look_ms)).unwrap_or(i32::MAX);
            let mut polled: Vec<libc::pollfd> = data
                .iter()
                .chain(std::iter::once(&self.wake.as_raw_fd()))
                .chain(watched.iter().map(|(_, file)| file))
                .map(|&fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            // SAFETY: `polled` is a live array of `polled.len()` pollfds.
            let n = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, ms) };
            if n < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return;
            }
            if Instant::now() >= end_look_at {
                end_look_at = Instant::now() + APP_END_LOOK;
                // As a progress thread would (`own_threads.rs`): a process
                // with an rdma_cm channel and no context has only this one.
                if own_threads::application_ended() {
                    own_threads::end_process();
                }
            }
            let mut buf = [0u8; 8];
            let _ = nix::unistd::read(&self.wake, &mut buf);
            let now = self.clock.now();
            let mut inner = self.inner.lock();
            // A kernel file that became readable holds an event for its
            // channel (it is not watched again until a GET_EVENT finds
            // it empty).
            let files = &polled[data.len() + 1..];
            for ((channel, _), p) in watched.iter().zip(files) {
                if p.revents != 0 {
                    inner.kernel.readable(*channel);
                }
            }
            inner.receive(now);
            let Inner {
                agent, endpoints, ..
            } = &mut *inner;
            agent.handle_timeout(now, &mut Ports(endpoints));
            inner.flush();
        }
    }
}

impl Inner {
    /// The key of the channel number `fd` names (itself if no alias).
    fn key_of(&self, fd: RawFd) -> RawFd {
        self.aliases.get(&fd).copied().unwrap_or(fd)
    }

    /// Command `buf`, written to channel number `fd`, as the channel's
    /// key names it: the key, and the command with a MIGRATE_ID's source
    /// number (an alias, maybe) as its key too.
    fn keyed<'b>(&self, fd: RawFd, buf: &'b [u8]) -> (RawFd, std::borrow::Cow<'b, [u8]>) {
        const MIGRATE_FROM: usize = 20; // `struct rdma_ucm_migrate_id`'s fd
        let key = self.key_of(fd);
        let from = match Command::parse(buf) {
            Ok(c) if c.cmd == cmd::MIGRATE_ID => c.u32(MIGRATE_FROM).ok(),
            _ => None,
        };
        let Some(from) = from.map(|f| f as RawFd) else {
            return (key, buf.into());
        };
        let mut keyed = buf.to_vec();
        let from_key = self.key_of(from) as u32;
        keyed[MIGRATE_FROM..MIGRATE_FROM + 4].copy_from_slice(&from_key.to_ne_bytes());
        (key, keyed.into())
    }

    /// Channel number `fd` is closed. An alias goes alone; a key with
    /// aliases hands the channel to the lowest of them that is still its
    /// file (their numbers stay open; the channel lives on). Else the
    /// channel is gone: our end of it, if it was one.
    fn release_number(&mut self, fd: RawFd) -> Option<OwnedFd> {
        if self.aliases.remove(&fd).is_some() {
            return None;
        }
        let file = fds::file(fd);
        // Aliases closed past this library (close_range) are let go.
        self.aliases
            .retain(|&a, &mut key| key != fd || super::file_of(a) == file);
        let heir = self
            .aliases
            .iter()
            .filter(|&(_, &key)| key == fd)
            .map(|(&a, _)| a)
            .min();
        let Some(heir) = heir else {
            return self.close_channel(fd);
        };
        self.aliases.remove(&heir);
        for key in self.aliases.values_mut().filter(|key| **key == fd) {
            *key = heir;
        }
        self.agent.rename_channel(fd, heir);
        self.kernel.rename_channel(fd, heir);
        if let Some(io) = self.channels.remove(&fd) {
            self.channels.insert(heir, io);
        }
        None
    }

    /// Channel `fd` is gone: its ids go. Our end of it, if it was one.
    fn close_channel(&mut self, fd: RawFd) -> Option<OwnedFd> {
        let Inner {
            agent, endpoints, ..
        } = self;
        agent.close_channel(fd, &mut Ports(endpoints));
        let io = self.channels.remove(&fd);
        self.kernel.close_channel(fd);
        self.flush();
        io.map(|io| io.ours)
    }

    /// The daemon sessions to poll: those of devices whose daemon lives
    /// (a dead one's socket would be readable for ever).
    fn live_sessions(&self) -> Vec<RawFd> {
        self.endpoints
            .iter()
            .filter(|(ip, _)| !self.dead.contains(ip))
            .map(|(_, e)| e.data_fd().as_raw_fd())
            .collect()
    }

    /// Hands every MAD the daemon passed on to the agent. A session that
    /// broke (the daemon died) is let go of: its steered socket leaves
    /// the daemon's steering group, where a new daemon would otherwise
    /// steer other contexts' packets to it (every new connection into the
    /// host then failed while this process lived), and the ids on its
    /// address hear that their device is gone.
    fn receive(&mut self, now: u64) {
        let Inner {
            agent,
            endpoints,
            dead,
            ..
        } = self;
        for (ip, endpoint) in endpoints.iter_mut() {
            if dead.contains(ip) {
                continue;
            }
            let got = endpoint.receive(Receiver::ProgressThread, |hdr, bytes, _marked| {
                let seg = usize::from(hdr.segment).max(1);
                for packet in bytes.chunks(seg) {
                    if let Some(mad) = softverbs_transport::gsi::parse_gsi(hdr.src, hdr.dst, packet)
                    {
                        softverbs_transport::capture::received_mad(
                            hdr.src, hdr.dst, hdr.class, packet,
                        );
                        agent.handle_mad(now, hdr.src.ip(), hdr.dst.ip(), &mad);
                    }
                }
            });
            if got.is_err() {
                endpoint.close_receivers();
                dead.push(*ip);
                agent.device_removed(*ip);
                softverbs_transport::say!(
                    "softverbs rdma_cm: the host daemon's session for {ip} broke (it ended): \
                     rdma_cm on {ip} stops in this process, its ids get DEVICE_REMOVAL"
                );
            }
        }
    }

    /// Sends what the agent has to send and brings every channel's
    /// readiness byte in line with its queue.
    fn flush(&mut self) {
        while let Some(m) = self.agent.poll_mad() {
            if let Some((_, e)) = self.endpoints.iter_mut().find(|(ip, _)| same(*ip, m.src)) {
                // A MAD lost here is one lost on the wire: the CM resends.
                if e.send_gsi(m.dst, &m.mad).is_ok() {
                    // A DREQ, DREP or REJ the daemon must not send again
                    // in this process's name (refused for a comm ID not of
                    // ours, as an answer to a stray message has).
                    let _ = e.sent_gsi(m.dst, &m.mad);
                }
            }
        }
        while self.agent.poll_ready().is_some() {}
        for (&fd, io) in self.channels.iter_mut() {
            let want = self.agent.has_events(fd) || self.kernel.pending(fd);
            if want && !io.signalled {
                // MSG_NOSIGNAL: the application may have closed its end.
                let flags = nix::sys::socket::MsgFlags::MSG_NOSIGNAL
                    | nix::sys::socket::MsgFlags::MSG_DONTWAIT;
                io.signalled = nix::sys::socket::send(io.ours.as_raw_fd(), &[1], flags).is_ok();
            } else if !want && io.signalled {
                let mut b = [0u8; 1];
                // SAFETY: `fd` is the application's end of this channel,
                // open while it is in `channels` (`release_number` removes
                // it, or moves the channel to a duplicate's number, before
                // the application's close of the number goes through; a
                // duplicate is this end too); reading one byte into a
                // local buffer, without blocking.
                let r = unsafe { libc::recv(fd, b.as_mut_ptr().cast(), 1, libc::MSG_DONTWAIT) };
                io.signalled = r != 1;
            }
        }
    }
}

/// The lowest number our end of a channel may take, at most.
const OUR_LOWEST_NUMBER: u64 = 512;

/// Our end of a channel, moved above the numbers the application's files
/// take (the lowest free ones), within half the descriptor limit; left
/// where it is if it cannot be moved. A write the application makes to a
/// number it closed (a thread racing a channel's close, still asking for
/// events) then finds no file, or a channel, or a file of its own, as
/// with the kernel's rdma_cm: never our end, where the bytes reached the
/// channel as readiness bytes and, once our end was closed, raised
/// SIGPIPE.
fn out_of_the_way(ours: OwnedFd) -> OwnedFd {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let lowest = limit.map_or(OUR_LOWEST_NUMBER, |l| (l / 2).min(OUR_LOWEST_NUMBER));
    match rustix::io::fcntl_dupfd_cloexec(&ours, lowest as RawFd) {
        Ok(moved) => moved,
        Err(_) => ours,
    }
}

/// Before softverbs' rdma_cm runs command `buf`: a DESTROY_ID of a
/// wildcard listener destroys its shadow in the kernel's rdma_cm
/// (`kernel.rs`; only an id softverbs' knows has one). The events the
/// shadow reported, which count in the command's answer.
fn shadow_before(kernel: &mut KernelCm, buf: &[u8]) -> u32 {
    match Command::parse(buf).map(|c| (c.cmd, c.u32(16))) {
        Ok((cmd::DESTROY_ID, Ok(id))) => kernel.destroy_shadow(id),
        _ => 0,
    }
}

/// Adds a shadow's reported events to the `events_reported` that leads a
/// DESTROY_ID's or MIGRATE_ID's answer.
fn count_shadow_events(answer: &mut [u8], shadow_events: u32) {
    if shadow_events == 0 {
        return;
    }
    if let Some(b) = answer.get_mut(..4) {
        let n = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]).wrapping_add(shadow_events);
        b.copy_from_slice(&n.to_ne_bytes());
    }
}

/// After softverbs' rdma_cm ran command `buf` of channel `fd`: a LISTEN
/// on a wildcard also listens in the kernel's rdma_cm, where there is
/// one; a MIGRATE_ID of a wildcard listener moves its shadow too. The
/// events a moved shadow reported, which count in the command's answer.
fn shadow_after(agent: &Agent, kernel: &mut KernelCm, fd: RawFd, buf: &[u8]) -> u32 {
    let Ok(c) = Command::parse(buf) else {
        return 0;
    };
    if let (cmd::MIGRATE_ID, Ok(id), Ok(from)) = (c.cmd, c.u32(16), c.u32(20)) {
        let moved = kernel.migrate_shadow(id, from as RawFd, fd);
        if let (Err(e), true) = (moved, tracing()) {
            let why = io::Error::from_raw_os_error(e);
            softverbs_transport::say!(
                "softverbs rdma_cm: channel {fd} id {id}: its kernel listener stays on channel {from} ({why})"
            );
        }
        return moved.unwrap_or(0);
    }
    let (cmd::LISTEN, Ok(id), Ok(backlog)) = (c.cmd, c.u32(8), c.u32(12)) else {
        return 0;
    };
    if !kernel::available() {
        return 0;
    }
    let shadowed = kernel.shadow_listener(agent, fd, id, backlog);
    if tracing() {
        let what = match shadowed {
            Ok(true) => "listens in the kernel's rdma_cm too".to_string(),
            Ok(false) => "is not a wildcard listener".to_string(),
            Err(e) => format!(
                "cannot listen in the kernel's rdma_cm ({})",
                io::Error::from_raw_os_error(e)
            ),
        };
        softverbs_transport::say!("softverbs rdma_cm: channel {fd} id {id} {what}");
    }
    0
}

/// A failed command's answer in the trace: its errno by name and
/// meaning (`Err(EINVAL: Invalid argument)`), not a number to look up.
fn traced_errno(errno: i32) -> String {
    format!("Err({})", nix::errno::Errno::from_raw(errno))
}

/// `SOFTVERBS_CM_TRACE=1`: every command and its answer on standard
/// error, for debugging a program's use of rdma_cm.
fn tracing() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("SOFTVERBS_CM_TRACE").is_some_and(|v| v == "1"))
}

/// One address, IPv4 or IPv4-mapped alike.
fn same(a: IpAddr, b: IpAddr) -> bool {
    let canon = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    canon(a) == canon(b)
}

/// The network namespace's `net.ipv6.bindv6only`, which the kernel's
/// rdma_cm takes as an AF_INET6 wildcard's default AFONLY; 0 (its default)
/// where it cannot be read.
fn bindv6only() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv6/bindv6only").is_ok_and(|v| v.trim() == "1")
}
