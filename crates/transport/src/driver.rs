//! A device context at work: an engine, the memory it reaches, its UDP
//! endpoints, and a progress thread.
//!
//! Threading model: all state sits behind one mutex. Verbs run on the
//! caller's thread ([`Driver::with`]) between two halves of progress made
//! right there: what arrived is received first, so a `poll_cq` returns the
//! completion a packet just made; due timers and transmission follow, so a
//! `post_send` leaves at once. A `poll_cq` spinning on an empty CQ pulls
//! packets in itself, with no thread hand-off on the fast path. The
//! progress thread sleeps in the poller until a datagram arrives, a timer
//! is due or a verb moved the earliest deadline forward, so a program
//! blocked in `ibv_get_cq_event` is served without anyone busy-polling;
//! while datagrams keep coming and no verb runs, it polls on for a moment
//! after each instead of sleeping (`progress_loop`).
//!
//! A panic in the progress thread leaves the engine's state half changed,
//! so the device fails for good, as a NIC that hits a firmware fault
//! does: the thread marks the driver failed before its lock is released,
//! reports [`Notify::device_fatal`] (IBV_EVENT_DEVICE_FATAL, and the
//! provider wakes every reader of its event descriptors), and every verb
//! from then on gets [`DeviceFailed`] instead of touching the engine.

use crate::clock::Clock;
use crate::daemon::DaemonAddress;
use crate::deadline_timer::DeadlineTimer;
use crate::driver_lock::{DriverGuard, DriverLock};
use crate::endpoint::{Endpoint, Receiver, StreamWaiting};
use crate::group_memberships::GroupMemberships;
use crate::io_step::{Io, IoStats, Outgoing, Sending, StepBy, Stepped};
use crate::kept_packets::{kept_after, Verb, WriteAnswers, KEEP_AT_MOST};
use crate::link_watch::LinkWatch;
use crate::outbox::{Open, Outbox};
use crate::own_threads::{self, OwnThread};
use crate::packet_faults::PacketFaults;
use crate::receive_owner::{AppPolls, Change, Owner, HANDBACK};
pub use crate::same_host::host::ExecLock;
use crate::same_host::host::{DeliveriesWatch, DoorbellAnswer, SameHost, ShmMode};
use crate::same_host::locked_atomics::LockedAtomics;
use crate::same_host::CrossProcess;
use crate::spin_yield;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use parking_lot::Mutex;
use softverbs_engine::{
    AsyncEvent, CqId, CqRing, DeviceConfig, Engine, Gid, HostMemory, Membership, Nanos, QpId,
    VerbsResult, WcOpcode, WcStatus, WorkCompletion,
};
use softverbs_faults::{FaultSpec, Faults, Part};
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

const WAKER: Token = Token(usize::MAX);
/// How long the progress thread keeps polling after a datagram arrived
/// while the application makes no verb calls, before it sleeps again.
const LINGER: Nanos = 100_000;
/// Steps a lingering progress thread makes after each look at its poller
/// before the next (so it looks every 17th step): each look is an
/// `epoll_wait` and a read of the daemon's stream, and with them a
/// lingering step took three system calls where one receives. A datagram
/// waits on average half a step before it is taken in (the READ a
/// responder serves, wire `ib_read_lat`); what else the poller reports
/// (the daemon's stream, a waker, a timer the step runs anyway) waits for
/// the look, microseconds.
const LINGER_STEPS_PER_LOOK: u32 = 16;
/// No verb for this long: the application is not polling, so the
/// progress thread is the only one to take packets in.
const APP_IDLE: Nanos = 50_000;
/// How often a progress thread looks whether the application's threads
/// have all ended (`own_threads.rs`).
const APP_END_LOOK: Nanos = 1_000_000_000;
/// Polls in a row that may find the driver held and return at once
/// ([`Driver::poll_unless_busy`]) before one waits for it.
const BUSY_POLLS_AT_MOST: u32 = 64;

thread_local! {
    /// This thread's polls in a row that found the driver held (over all
    /// contexts: a thread seldom spins on two).
    static BUSY_IN_A_ROW: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}
/// Set (and not `0`), a context prints its packet counters when it
/// closes, or at exit if the program never closed it ([`State::summary`]).
const STATS_VAR: &str = "SOFTVERBS_STATS";
/// The daemon's stream: CM messages, and multicast datagrams where the
/// daemon passes them on.
const STREAM: Token = Token(0);
/// The steered socket datagrams arrive on, unless lent to the application
/// (`receive_owner.rs`).
const DIRECT: Token = Token(1);
/// The sending socket, polled for room while packets wait for it.
const SEND_ROOM: Token = Token(3);
/// How long a context closing at exit waits for its lock to send what a
/// poll kept.
const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_millis(10);
/// The timer a verb arms when it brings the earliest deadline forward.
const DEADLINE: Token = Token(4);
/// The epoll set of the sockets on the multicast groups the context is in
/// (`group_socket.rs`), polled as the steered socket is (lent with it).
const GROUPS: Token = Token(5);
/// rtnetlink's link changes, for the port to follow its interface
/// (`link_watch.rs`).
const LINK: Token = Token(6);

/// Receives what the engine reports, from whichever thread made progress.
/// Implementations must be quick and must not call back into the driver
/// (they run with the driver's lock held).
pub trait Notify: Send + Sync {
    /// A CQ armed with `req_notify_cq` got a qualifying completion.
    fn completion_event(&self, cq: CqId);
    /// An async event was raised.
    fn async_event(&self, event: AsyncEvent);
    /// The device failed (the progress thread panicked): raise
    /// IBV_EVENT_DEVICE_FATAL and wake everyone waiting for an event,
    /// since no more will come. Runs once, without the driver's lock.
    fn device_fatal(&self);
    /// Runs first on the progress thread, without the driver's lock: a
    /// place to set how it is scheduled (the provider asks for a short
    /// time slice, `thread_slice.rs`), and to take the region's exec lock
    /// if it has one (the provider does, `exec_lock.rs`).
    fn progress_thread_started(&self, _exec_lock: Option<&ExecLock<'_>>) {}
    /// Runs last on the progress thread: the exec lock, if it was taken,
    /// is given back (before the thread ends: the kernel would otherwise
    /// mark it at the thread's exit, in a mapping that may be gone).
    fn progress_thread_ending(&self, _exec_lock: Option<&ExecLock<'_>>) {}
}

/// A verb on a device whose progress thread failed: the engine's state
/// can no longer be trusted, so nothing runs on it again (EIO).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceFailed;

impl std::fmt::Display for DeviceFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the device failed (its progress thread panicked)")
    }
}

impl std::error::Error for DeviceFailed {}

impl From<DeviceFailed> for io::Error {
    fn from(_: DeviceFailed) -> io::Error {
        io::Error::from_raw_os_error(libc::EIO)
    }
}

/// Where a driver lives on the network.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// The device (its GID table should hold `ip`'s GID).
    pub device: DeviceConfig,
    /// The local address the endpoints bind.
    pub ip: IpAddr,
    /// The host daemon that passes on the packets arriving at UDP 4791.
    pub daemon: DaemonAddress,
}

struct State<M> {
    engine: Engine,
    mem: M,
    io: Io,
    /// The same-host path, unless it is off (`SOFTVERBS_SHM=0`) or could
    /// not start.
    same_host: Option<SameHost>,
    /// The deadline the progress thread sleeps towards (None: no timer).
    thread_deadline: Option<Nanos>,
    /// Since when the verbs' steps, or the progress thread's, keep the
    /// packets due for a next verb ([`Driver::poll_with`],
    /// `kept_packets.rs`); None: nothing kept.
    held_since: Option<Nanos>,
    /// Whether the application answers the WRITEs it is sent, for the
    /// progress thread to keep their ACKs too (`kept_packets.rs`).
    write_answers: WriteAnswers,
    /// The sending socket is registered with the progress thread's poller
    /// for room (only while packets wait for it: registered for good, it
    /// would wake the thread for every datagram the device sends).
    waiting_for_room: bool,
    /// The multicast groups this context is in, as they travel.
    groups: GroupMemberships,
}

struct Shared<M> {
    state: DriverLock<State<M>>,
    /// The send batch, which a step may hand over to leave after the
    /// driver's unlock.
    outbox: Outbox,
    clock: Clock,
    /// Wakes the progress thread to stop.
    waker: Waker,
    /// Wakes the progress thread when a deadline a verb set comes.
    deadline_timer: DeadlineTimer,
    registry: Registry,
    notify: Arc<dyn Notify>,
    stop: AtomicBool,
    /// Set (under the state lock) when the progress thread panicked.
    failed: AtomicBool,
    /// Which process this is, cheaply (the embedder's cached pid where it
    /// keeps one), and the one that opened the context: a child made by
    /// `fork` has a copy of the driver, with its sockets and published
    /// state, but not its progress thread.
    process: Box<dyn Fn() -> u32 + Send + Sync>,
    opened_by: u32,
    /// When the application last ran a verb (clock nanoseconds).
    last_verb: AtomicU64,
    /// Application threads waiting for the driver ([`Shared::lock_for_verb`]).
    verbs_waiting: AtomicU32,
    /// How the application polls its CQs: whether the progress thread
    /// lends it the steered socket (`receive_owner.rs`).
    app_polls: AppPolls,
    /// Frames on the daemon's stream for the application's next poll to
    /// read, noted while the socket is lent.
    stream_waiting: Arc<StreamWaiting>,
    /// The `SOFTVERBS_STATS` line was printed (at exit, before a close
    /// an exit handler makes).
    stats_said: AtomicBool,
    /// rtnetlink said some interface changed: the next step looks at the
    /// device's.
    link_changed: AtomicBool,
    /// What same-host peers delivered and the driver has not applied yet:
    /// a poll that finds the driver held may say "empty" only when there
    /// is none (`Driver::poll_unless_busy`).
    deliveries: Option<DeliveriesWatch>,
    /// What the progress thread tells same-host peers with when it wakes.
    doorbell: Option<DoorbellAnswer>,
    /// Test hook: the progress thread panics at its next step.
    #[cfg(test)]
    inject_panic: AtomicBool,
}

/// One device context driven over UDP.
pub struct Driver<M: HostMemory + Send + 'static> {
    shared: Arc<Shared<M>>,
    thread: Option<JoinHandle<()>>,
    /// The process that opened it: a child made by `fork` has a copy of
    /// the driver but not its progress thread.
    opened_by: u32,
}

impl<M: HostMemory + Send + 'static> std::fmt::Debug for Driver<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").finish_non_exhaustive()
    }
}

impl<M: HostMemory + Send + 'static> Driver<M> {
    /// Claims a slot at `cfg.ip`, opens the engine and starts the progress
    /// thread; every QP uses the wire.
    pub fn start(cfg: DriverConfig, mem: M, notify: Arc<dyn Notify>) -> io::Result<Driver<M>> {
        Driver::start_with(cfg, mem, notify, None)
    }

    /// [`Driver::start`], with the same-host path through `cross` (cross
    /// memory access and shared regions) unless `SOFTVERBS_SHM=0`.
    pub fn start_with(
        cfg: DriverConfig,
        mem: M,
        notify: Arc<dyn Notify>,
        cross: Option<Arc<dyn CrossProcess>>,
    ) -> io::Result<Driver<M>> {
        crate::capture::open_from_env()?;
        let faults = FaultSpec::from_env()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let endpoint = Endpoint::open(cfg.ip, &cfg.daemon)?;
        let poll = Poll::new()?;
        poll.registry().register(
            &mut SourceFd(&endpoint.data_fd().as_raw_fd()),
            STREAM,
            Interest::READABLE,
        )?;
        if let Some(direct) = endpoint.direct_socket() {
            poll.registry().register(
                &mut SourceFd(&direct.as_raw_fd()),
                DIRECT,
                Interest::READABLE,
            )?;
        }
        poll.registry().register(
            &mut SourceFd(&endpoint.groups_fd().as_raw_fd()),
            GROUPS,
            Interest::READABLE,
        )?;
        let mut device = cfg.device;
        let qpns = endpoint.qpns();
        (device.qpn_base, device.qpn_limit) = (qpns.start, qpns.end);
        device.send_window_bytes = endpoint.send_window();
        device.packet_cost = endpoint.packet_cost();
        // Peers, this process included, answer when the scheduler runs them.
        device.min_ack_timeout = softverbs_engine::DeviceConfig::SOFTWARE_PEER_ACK_TIMEOUT;
        let clock = Clock::start();
        let mut engine = Engine::new(device);
        let link = LinkWatch::open(cfg.ip);
        if let Some(link) = &link {
            poll.registry()
                .register(&mut SourceFd(&link.fd()), LINK, Interest::READABLE)?;
            engine.start_with_link(link.link());
        }
        let stream_waiting = endpoint.stream_waiting();
        let outbox = Outbox::new(endpoint.socket().try_clone()?);
        let mut io = Io::new(endpoint);
        io.link = link;
        if let Some(spec) = &faults {
            let name = engine.config().name.clone();
            if let Some(mut rules) = Faults::new(spec, &name, Part::Verbs) {
                softverbs_trace::observe_faults(&mut rules, &name);
                engine.set_faults(rules, clock.now());
            }
            if let Some(mut rules) = Faults::new(spec, &name, Part::Packets) {
                softverbs_trace::observe_faults(&mut rules, &name);
                io.packet_faults = Some(PacketFaults::new(rules, clock.now()));
            }
        }
        let endpoint = &mut io.endpoint;
        let process: Box<dyn Fn() -> u32 + Send + Sync> = match &cross {
            Some(cross) => {
                let cross = cross.clone();
                Box::new(move || cross.own_pid() as u32)
            }
            None => Box::new(std::process::id),
        };
        let opened_by = process();
        let same_host = start_same_host(cross, endpoint, &mut engine, cfg.ip);
        let deliveries = same_host.as_ref().map(SameHost::deliveries_watch);
        let doorbell = same_host.as_ref().map(SameHost::doorbell_answer);
        if let Some(sh) = &same_host {
            poll.registry().register(
                &mut SourceFd(&sh.doorbell().as_raw_fd()),
                Token(2),
                Interest::READABLE,
            )?;
        }
        let deadline_timer = DeadlineTimer::new()?;
        poll.registry().register(
            &mut SourceFd(&deadline_timer.raw_fd()),
            DEADLINE,
            Interest::READABLE,
        )?;
        let shared = Arc::new(Shared {
            state: DriverLock::new(State {
                engine,
                mem,
                io,
                same_host,
                thread_deadline: None,
                held_since: None,
                write_answers: WriteAnswers::default(),
                waiting_for_room: false,
                groups: GroupMemberships::default(),
            }),
            outbox,
            clock,
            waker: Waker::new(poll.registry(), WAKER)?,
            deadline_timer,
            registry: poll.registry().try_clone()?,
            notify,
            stop: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            process,
            opened_by,
            last_verb: AtomicU64::new(0),
            verbs_waiting: AtomicU32::new(0),
            app_polls: AppPolls::default(),
            stream_waiting,
            stats_said: AtomicBool::new(false),
            link_changed: AtomicBool::new(false),
            deliveries,
            doorbell,
            #[cfg(test)]
            inject_panic: AtomicBool::new(false),
        });
        let flushed: Arc<dyn AtExit> = shared.clone();
        let mut open = OPEN.lock();
        open.retain(|(_, context)| context.strong_count() > 0);
        open.push((std::process::id(), Arc::downgrade(&flushed)));
        drop(open);
        let thread_shared = shared.clone();
        let thread = own_threads::spawning(|| {
            std::thread::Builder::new()
                .name("softverbs-progress".into())
                .spawn(move || progress_thread(&thread_shared, poll))
        })
        .map_err(|e| {
            // pthread_create's EAGAIN most often means no memory for
            // the stack (`RLIMIT_AS`), which a kernel provider's
            // ibv_open_device reports as ENOMEM; and it is not the
            // daemon's silence that EAGAIN tells the user elsewhere.
            crate::say!("softverbs: cannot start a context's progress thread: {e}");
            io::Error::from_raw_os_error(libc::ENOMEM)
        })?;
        Ok(Driver {
            shared,
            thread: Some(thread),
            opened_by: std::process::id(),
        })
    }

    /// Receives what arrived, runs `verb` on the engine, then makes the
    /// rest of the progress (timers, transmission) on this thread;
    /// [`DeviceFailed`] once the progress thread has failed.
    pub fn try_with<R>(
        &self,
        verb: impl FnOnce(&mut Engine, &mut M) -> R,
    ) -> Result<R, DeviceFailed> {
        self.run(verb, VerbKind::Other)
    }

    /// [`Driver::try_with`] for `ibv_post_send` (and `ibv_wr_complete`).
    pub fn try_post_send_with<R>(
        &self,
        verb: impl FnOnce(&mut Engine, &mut M) -> R,
    ) -> Result<R, DeviceFailed> {
        self.run(verb, VerbKind::PostSend)
    }

    /// [`Driver::try_post_send_with`], unwinding as [`Driver::with`].
    pub fn post_send_with<R>(&self, verb: impl FnOnce(&mut Engine, &mut M) -> R) -> R {
        self.try_post_send_with(verb).unwrap_or_else(unwind)
    }

    /// [`Driver::try_with`] for `ibv_post_recv` and `ibv_post_srq_recv`.
    pub fn try_post_recv_with<R>(
        &self,
        verb: impl FnOnce(&mut Engine, &mut M) -> R,
    ) -> Result<R, DeviceFailed> {
        self.run(verb, VerbKind::PostRecv)
    }

    /// [`Driver::try_post_recv_with`], unwinding as [`Driver::with`].
    pub fn post_recv_with<R>(&self, verb: impl FnOnce(&mut Engine, &mut M) -> R) -> R {
        self.try_post_recv_with(verb).unwrap_or_else(unwind)
    }

    /// [`Driver::with`] for a poll of a CQ that found no completion
    /// queued (`verb` says what it took): a thread that keeps polling, and
    /// takes its incoming messages that way, is lent the socket
    /// (`receive_owner.rs`).
    pub fn try_poll_with(
        &self,
        verb: impl FnOnce(&mut Engine, &mut M) -> VerbsResult<Polled>,
    ) -> Result<VerbsResult<Polled>, DeviceFailed> {
        self.run(verb, VerbKind::Poll(|r| r.unwrap_or_default()))
    }

    /// [`Driver::try_poll_with`], unwinding as [`Driver::with`].
    pub fn poll_with(
        &self,
        verb: impl FnOnce(&mut Engine, &mut M) -> VerbsResult<Polled>,
    ) -> VerbsResult<Polled> {
        self.try_poll_with(verb).unwrap_or_else(unwind)
    }

    /// [`Driver::poll_with`] for a caller that found the CQ's ring empty,
    /// unless another thread holds the driver: then None at once. That
    /// thread (most often the progress thread) is taking in what arrived,
    /// and what it completes lands in the ring the caller polls next;
    /// waiting for it instead had the spinning thread sleep on the lock,
    /// and on an otherwise idle CPU its wake-up took tens of microseconds
    /// (docs/perf-profile.md). After [`BUSY_POLLS_AT_MOST`] such polls in
    /// a row the thread waits for its turn: a thread that holds the driver
    /// most of the time (another application thread posting without end)
    /// may take nothing in for it. Nor does it return while a same-host
    /// peer's delivery may wait to be applied: the peer's work request
    /// completed when it delivered, and as on a NIC, whose receive
    /// completion is in the CQ before the sender's ACK leaves, the CQ is
    /// not empty then (a receiver told by its sender that the SEND
    /// completed found nothing; `tests/programs/completion_order.c`). It
    /// waits for the driver then, as any verb does
    /// ([`Shared::lock_for_verb`], which ends a progress thread's linger),
    /// and applies the delivery itself if the holder left it.
    pub fn poll_unless_busy(
        &self,
        verb: impl FnOnce(&mut Engine, &mut M) -> VerbsResult<Polled>,
    ) -> Option<VerbsResult<Polled>> {
        self.ensure_this_process();
        self.poll_unless_busy_checked(verb)
    }

    /// [`Driver::poll_unless_busy`] once the caller checked the process.
    fn poll_unless_busy_checked(
        &self,
        verb: impl FnOnce(&mut Engine, &mut M) -> VerbsResult<Polled>,
    ) -> Option<VerbsResult<Polled>> {
        let guard = match self.shared.try_lock().unwrap_or_else(unwind) {
            Some(guard) => guard,
            None if BUSY_IN_A_ROW.get() < BUSY_POLLS_AT_MOST && self.shared.no_delivery_waits() => {
                BUSY_IN_A_ROW.set(BUSY_IN_A_ROW.get() + 1);
                // Still a verb call: the progress thread must not take the
                // application for idle and linger, polling, against it.
                let now = self.shared.clock.now();
                self.shared.last_verb.store(now, Ordering::Relaxed);
                return None;
            }
            None => self.shared.lock_for_verb().unwrap_or_else(unwind),
        };
        BUSY_IN_A_ROW.set(0);
        let polled = self.run_locked(guard, verb, VerbKind::Poll(|r| r.unwrap_or_default()));
        Some(polled.unwrap_or_else(unwind))
    }

    /// A poll of `cq` as `ibv_poll_cq` makes it, handing up to `max`
    /// completions to `take`: those already in the CQ's `ring` (its
    /// [`Engine::cq_ring`]) without the driver, which the progress thread
    /// may hold while it works; only when there are none, through the
    /// driver, unless another thread holds it
    /// ([`Driver::poll_unless_busy`]). How many it handed over.
    pub fn poll_cq(
        &self,
        cq: CqId,
        ring: &CqRing,
        max: usize,
        mut take: impl FnMut(WorkCompletion),
    ) -> VerbsResult<usize> {
        if max == 0 {
            return Ok(0);
        }
        // The ring is reached without the driver: a forked child stops
        // here too ([`Driver::ensure_this_process`]).
        self.ensure_this_process();
        let from_ring = |take: &mut dyn FnMut(WorkCompletion)| {
            let mut incoming = false;
            let taken = ring.pop_with(max, |wc| {
                incoming |= Polled::is_incoming(&wc);
                take(wc);
            });
            if taken > 0 {
                // Most often taken in by a poll of another CQ
                // (`ib_send_lat`'s poll of its send CQ, for the ACK that
                // came with the peer's SEND): for the lending of the
                // socket.
                self.shared.app_polls.took_from_ring(incoming);
            }
            taken
        };
        let taken = from_ring(&mut take);
        if taken > 0 {
            spin_yield::polled(taken);
            return Ok(taken);
        }
        let taken = match self.poll_unless_busy_checked(|e, _| Polled::poll(e, cq, max, &mut take))
        {
            // The driver's holder may have completed work since the first
            // look: a same-host peer's delivery it applied meanwhile (the
            // poll returned at once only because none waits any more), or
            // anything it took in (on either path).
            None => Ok(from_ring(&mut take)),
            Some(polled) => polled.map(|p| p.taken),
        };
        // With the driver unlocked (`spin_yield.rs`).
        spin_yield::polled(*taken.as_ref().unwrap_or(&0));
        taken
    }

    /// Unwinds as [`Driver::with`] in a child made by `fork`, whose
    /// context is its parent's (`Shared::of_this_process`): for the paths
    /// of a verb that reach state without the driver's lock (a CQ's ring,
    /// the embedder's own leftovers of a poll).
    pub fn ensure_this_process(&self) {
        if let Err(failed) = self.shared.of_this_process() {
            unwind::<()>(failed);
        }
    }

    /// Whether this process opened the context (false in a child made by
    /// `fork`, where no thread of the parent runs).
    pub fn of_this_process(&self) -> bool {
        self.shared.of_this_process().is_ok()
    }

    /// A CQ was armed for an event: its thread may sleep in
    /// `ibv_get_cq_event` now, so the progress thread takes the socket
    /// back if it lent it.
    pub fn armed_for_event(&self) {
        if self.shared.app_polls.armed() {
            let _ = self.shared.waker.wake();
        }
    }

    /// Runs a verb of the given kind between the two halves of progress.
    fn run<R>(
        &self,
        verb: impl FnOnce(&mut Engine, &mut M) -> R,
        kind: VerbKind<R>,
    ) -> Result<R, DeviceFailed> {
        let guard = self.shared.lock_for_verb()?;
        self.run_locked(guard, verb, kind)
    }

    /// [`Driver::run`] with the driver locked.
    fn run_locked<R>(
        &self,
        mut guard: DriverGuard<'_, State<M>>,
        verb: impl FnOnce(&mut Engine, &mut M) -> R,
        kind: VerbKind<R>,
    ) -> Result<R, DeviceFailed> {
        let state = &mut *guard;
        // One reading of the clock serves the whole verb: a verb takes
        // microseconds (a timer it starts may end that much early, which
        // at worst resends a packet the responder takes as a duplicate),
        // and reading the clock three times per verb was a sixth of a
        // thread spinning in ibv_poll_cq.
        let now = self.shared.clock.now();
        state.engine.set_time(now);
        if let Some(sh) = state.same_host.as_mut() {
            // What peers delivered is seen by this very verb (a poll_cq).
            sh.apply_deliveries(&mut state.engine);
        }
        // A batch the last post left part-filled (`corked_batch.rs`)
        // leaves before any other verb, ahead of its receive: a thread
        // that polls for the completion of what it posted must not wait
        // for it.
        let posting = matches!(kind, VerbKind::PostSend);
        if state.io.corked_until().is_some() && !posting {
            self.shared
                .step(state, StepBy::Verb, now, Sending::All, false);
            state.held_since = None;
        }
        // A poll receives first, to return what just arrived. A post of
        // sends does too, if an ACK or READ response is awaited (it may
        // open the send window the post waits for), except while the
        // socket is lent to a thread spinning on its CQs, whose next poll
        // receives anyway: there, receiving first only put a system call
        // on the way to the reply's send. With nothing awaited (UD, UC,
        // the same-host path, an RC QP whose sends are all acknowledged)
        // nothing that arrived can help the post: a failed `recvmsg` per
        // post was an eighth of a same-host `ib_send_bw` client's system
        // calls. A posted receive returns nothing that arrived, while a
        // SEND arriving after it finds it.
        let lent = self.shared.app_polls.lent();
        let receive = match kind {
            VerbKind::Poll(_) | VerbKind::Other => true,
            VerbKind::PostSend => !lent && state.engine.awaits_answers(),
            VerbKind::PostRecv => false,
        };
        let write_ends = state.engine.stats().rx_write_ends;
        if receive {
            let by = match kind {
                VerbKind::Poll(_) => Receiver::Poll,
                _ => Receiver::Verb,
            };
            self.shared.receive(state, now, by);
        }
        // What a poll kept leaves before any verb but a post: a QP
        // destroyed or moved to another state would take its ACK with it.
        if state.held_since.is_some() && matches!(kind, VerbKind::Other) {
            self.shared
                .step(state, StepBy::Verb, now, Sending::All, false);
            state.held_since = None;
        }
        let took_write = state.engine.stats().rx_write_ends != write_ends;
        if took_write {
            state.write_answers.took_write(now);
        }
        let keep_at_most = self.shared.app_polls.stretched(KEEP_AT_MOST);
        if posting {
            state.write_answers.posted(now, keep_at_most);
        }
        let result = verb(&mut state.engine, &mut state.mem);
        // What to keep for the thread's next verb (`kept_packets.rs`).
        let verb_kind = match kind {
            VerbKind::Poll(polled) => Verb::Poll {
                taken: polled(&result).taken,
                write_to_answer: took_write || state.write_answers.answer_awaited(),
            },
            VerbKind::PostRecv => Verb::PostRecv,
            VerbKind::PostSend => Verb::PostSend,
            VerbKind::Other => Verb::Other,
        };
        state.held_since = kept_after(verb_kind, lent, state.held_since, now, keep_at_most);
        let sending = match state.held_since {
            Some(_) => Sending::Kept,
            None if posting => Sending::Corking {
                until: now.saturating_add(keep_at_most),
            },
            None => Sending::All,
        };
        // While the application answers WRITEs, it spins on memory for the
        // next, which its progress thread must take in: a verb preempted
        // in its send (by the thread the send woke) must not keep the
        // driver from it, so the send waits for the unlock (`outbox.rs`).
        // Otherwise it goes first: handed over always, `ib_send_lat` took
        // 0.1-0.2 us longer (docs/perf-profile.md).
        let hand_over = state.write_answers.answering();
        let stepped = self
            .shared
            .step(state, StepBy::Verb, now, sending, hand_over);
        self.shared.last_verb.store(now, Ordering::Relaxed);
        if let VerbKind::Poll(polled) = kind {
            // Dated by its end, a second reading of the clock for polls
            // only: a look then finds a spinning thread's last poll just
            // ended, however long a poll takes (under emulation, tens of
            // microseconds), and the poll's cost stretches the lending's
            // times (`receive_owner.rs`).
            let ended = self.shared.clock.now();
            let took = ended.saturating_sub(now);
            let mut polled = polled(&result);
            // A WRITE this poll took in counts, for the lending, as data
            // its CQ handed over: a peer that keeps its ACK for its next
            // WRITE (`kept_packets.rs`) sends both in one datagram, which
            // this thread's poll for that ACK takes in whole, so the
            // thread learns of the WRITE from its memory at once where
            // only the progress thread, woken, would otherwise take it in
            // (`ib_write_lat`; docs/perf-profile.md).
            polled.incoming |= took_write;
            self.shared.app_polls.polled(ended, took, polled);
        }
        drop(guard);
        self.shared.send_handed(stepped.handoff);
        Ok(result)
    }

    /// [`Driver::try_with`] for callers that answer every failure the same
    /// way.
    ///
    /// # Panics
    /// Once the device has failed, unwinds with a [`DeviceFailed`] payload
    /// (through `resume_unwind`, so no panic message is printed): the
    /// provider's entry-point guard turns any unwind into EIO, which is
    /// what every verb on a failed device answers.
    pub fn with<R>(&self, verb: impl FnOnce(&mut Engine, &mut M) -> R) -> R {
        self.try_with(verb).unwrap_or_else(unwind)
    }

    /// `ibv_req_notify_cq`: `arm` runs before anything that arrived is
    /// taken in, then the call makes progress as any verb does. A
    /// completion the same call takes in is then added after the request
    /// and raises its event (ibv_req_notify_cq(3): "upon the addition of a
    /// new CQE"); taken in first, it was in the CQ before the arming,
    /// raised none, and a program that sleeps for the event right after
    /// arming (UCX's sleep mode, which does not poll again) waited for
    /// ever.
    pub fn try_arm<R>(&self, arm: impl FnOnce(&mut Engine) -> R) -> Result<R, DeviceFailed> {
        let mut guard = self.shared.lock_for_verb()?;
        guard.engine.set_time(self.shared.clock.now());
        let armed = arm(&mut guard.engine);
        self.run_locked(guard, |_, _| (), VerbKind::Other)?;
        Ok(armed)
    }

    /// [`Driver::try_arm`], unwinding as [`Driver::with`].
    pub fn arm<R>(&self, arm: impl FnOnce(&mut Engine) -> R) -> R {
        self.try_arm(arm).unwrap_or_else(unwind)
    }

    /// Makes progress without running a verb; unwinds as [`Driver::with`]
    /// once the device failed.
    pub fn progress(&self) {
        self.with(|_, _| ());
    }

    /// Whether the progress thread has lent the steered socket to an
    /// application thread spinning on its CQs (`receive_owner.rs`), for
    /// diagnostics and tests.
    pub fn receive_lent(&self) -> bool {
        self.shared.app_polls.lent()
    }

    /// Asks the daemon for one more slot (4096 more QP numbers).
    pub fn add_slot(&self) -> io::Result<()> {
        let mut state = self.shared.lock_for_verb()?;
        let qpns = state.io.endpoint.add_slot()?;
        state.engine.add_qpn_range(qpns);
        Ok(())
    }

    /// `ibv_attach_mcast`: the engine's checks, then, for a group this
    /// context was not in, the membership (the group's socket, or the
    /// daemon's: `Endpoint::join`; the attach is undone if it fails).
    pub fn attach_mcast(&self, qp: QpId, gid: Gid) -> io::Result<VerbsResult<()>> {
        let mut state = self.shared.lock_for_verb()?;
        if let Err(e) = state.engine.attach_mcast(qp, gid) {
            return Ok(Err(e));
        }
        if let Err(e) = self.sync_membership(&mut state) {
            let _ = state.engine.detach_mcast(qp, gid);
            let _ = state.engine.poll_membership();
            return Err(e);
        }
        Ok(Ok(()))
    }

    /// `ibv_detach_mcast`; the context leaves the group once no QP of it
    /// is in it.
    pub fn detach_mcast(&self, qp: QpId, gid: Gid) -> io::Result<VerbsResult<()>> {
        let mut state = self.shared.lock_for_verb()?;
        let r = state.engine.detach_mcast(qp, gid);
        self.sync_membership(&mut state)?;
        Ok(r)
    }

    /// Joins or leaves every group the engine joined or left
    /// ([`Endpoint::join`]), as the address each travels as (an IPv6
    /// group from an IPv4 device: an IPv4 one, `Gid::route`), which
    /// several MGIDs may share (`group_memberships.rs`).
    fn sync_membership(&self, state: &mut State<M>) -> io::Result<()> {
        let local = state.io.endpoint.local().ip();
        while let Some(change) = state.engine.poll_membership() {
            match change {
                Membership::Joined(g) => {
                    let group = g.route(local);
                    if state.groups.attached(group) {
                        if let Err(e) = state.io.endpoint.join(group) {
                            // attach_mcast undoes the engine's attach.
                            state.groups.detached(group);
                            return Err(e);
                        }
                    }
                }
                Membership::Left(g) => {
                    let group = g.route(local);
                    // Once the daemon is gone, the group sockets are
                    // closed and its session cannot be told: nothing to
                    // leave.
                    if state.groups.detached(group) && !state.io.link_down {
                        state.io.endpoint.leave(group)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The slots this context holds.
    pub fn slots(&self) -> Vec<u16> {
        self.shared.state.lock().io.endpoint.slots().to_vec()
    }

    /// Socket-layer counters.
    pub fn io_stats(&self) -> IoStats {
        let mut state = self.shared.state.lock();
        state.io.count_handed(&self.shared.outbox);
        state.io.stats
    }
}

impl<M: HostMemory + Send + 'static> Drop for Driver<M> {
    fn drop(&mut self) {
        if std::process::id() != self.opened_by {
            // A forked child closes its copy, as it would close its copy
            // of a kernel device's file: the context is the parent's, with
            // its thread, its packets and its published state (the
            // thread's reference keeps the shared state from being
            // dropped here). Nothing to flush, stop or join.
            if let Some(thread) = self.thread.take() {
                std::mem::forget(thread);
            }
            return;
        }
        if stats_wanted() {
            self.shared.say_stats(&mut self.shared.state.lock());
        }
        self.shared.flush();
        self.shared.stop.store(true, Ordering::Release);
        let _ = self.shared.waker.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl<M: HostMemory> Shared<M> {
    /// Prints the `SOFTVERBS_STATS` line, once.
    fn say_stats(&self, state: &mut State<M>) {
        if self.stats_said.swap(true, Ordering::AcqRel) {
            return;
        }
        state.io.count_handed(&self.outbox);
        let (summary, held) = (state.summary(), state.io.stats.held);
        match self.app_polls.lends() {
            0 => crate::say!("{summary}"),
            n => crate::say!(
                "{summary}; the socket lent to a spinning poller {n} times, \
                 {held} verbs kept what was due for the next"
            ),
        }
    }

    /// Sends what a poll kept for the next verb (`Driver::run`), and a
    /// batch a post left part-filled (`corked_batch.rs`), as the context
    /// closes or the process exits: a NIC would have sent them.
    fn flush(&self) {
        let Some(mut state) = self.state.try_lock_for(FLUSH_WAIT) else {
            return; // a thread holds it through exit: nothing safe to do
        };
        let kept = state.held_since.is_some() || state.io.corked_until().is_some();
        if kept && !self.failed.load(Ordering::Acquire) {
            let now = self.clock.now();
            state.engine.set_time(now);
            self.step(&mut state, StepBy::Verb, now, Sending::All, false);
            state.held_since = None;
        }
    }

    /// Sends the batch a verb's step handed over, once the verb has
    /// unlocked the driver (`outbox.rs`). If it finds no room in the
    /// socket, it stays in the outbox for the progress thread, woken, to
    /// send once there is room: a verb does not wait (`Io::send_all`).
    fn send_handed(&self, handoff: Option<Open<'_>>) {
        if handoff.is_some_and(Open::send) {
            let _ = self.waker.wake();
        }
    }

    /// Whether, for certain, no same-host peer's delivery waits for the
    /// driver to apply it (see [`DeliveriesWatch`]).
    fn no_delivery_waits(&self) -> bool {
        self.deliveries
            .as_ref()
            .is_none_or(DeliveriesWatch::nothing_waiting)
    }

    /// `held` (the state, or `None`), unless the device failed.
    fn unless_failed<T>(&self, held: T) -> Result<T, DeviceFailed> {
        match self.failed.load(Ordering::Acquire) {
            true => Err(DeviceFailed),
            false => Ok(held),
        }
    }

    /// The state, unless the device failed.
    fn lock(&self) -> Result<DriverGuard<'_, State<M>>, DeviceFailed> {
        self.unless_failed(self.state.lock())
    }

    /// [`Shared::lock`] for the progress thread. While the application
    /// answers WRITEs (spinning on memory between them) it waits parked,
    /// without the `sched_yield` that gives its CPU to a spinner
    /// (`driver_lock.rs`); otherwise as a verb does: its yields let the
    /// peer's threads run, and wire `ib_write_bw` and `ib_send_bw` at
    /// 64 KiB lost a tenth of their bandwidth to a thread that parked
    /// instead.
    fn lock_for_thread(&self) -> Result<DriverGuard<'_, State<M>>, DeviceFailed> {
        self.unless_failed(self.state.lock_for_sleeper())
    }

    /// [`Shared::lock`] for an application thread. One that must wait says
    /// so, for a lingering progress thread to stop lingering: parking_lot
    /// does not hand the lock over at unlock, so a thread that takes it
    /// again at once, step after step, kept the verb waiting until the
    /// linger ended (wire `ib_read_lat -e`: its application thread yielded
    /// thousands of times a second, and a run settled at 170 to 200 us a
    /// READ instead of 40).
    fn lock_for_verb(&self) -> Result<DriverGuard<'_, State<M>>, DeviceFailed> {
        self.of_this_process()?;
        if let Some(state) = self.try_lock()? {
            return Ok(state);
        }
        self.verbs_waiting.fetch_add(1, Ordering::Relaxed);
        let state = self.lock();
        self.verbs_waiting.fetch_sub(1, Ordering::Relaxed);
        state
    }

    /// A verb in a child made by `fork` on the context it inherited
    /// fails (EIO) before it touches anything: the sockets are the
    /// parent's (a child's receive took its packets, and the parent's
    /// connections ended in RETRY_EXC_ERR), a lock a parent thread held
    /// stays held in the child, and the state is the parent's. A kernel
    /// provider's child cannot reach the parent's queues either (mlx5's
    /// are not inherited).
    fn of_this_process(&self) -> Result<(), DeviceFailed> {
        if (self.process)() == self.opened_by {
            Ok(())
        } else {
            Err(DeviceFailed)
        }
    }

    /// [`Shared::lock`], unless another thread holds it (None). Not for a
    /// verb unless it checked [`Shared::of_this_process`] first.
    fn try_lock(&self) -> Result<Option<DriverGuard<'_, State<M>>>, DeviceFailed> {
        self.unless_failed(self.state.try_lock())
    }

    /// What arrived, into the engine, before a verb runs (`Io::receive`).
    fn receive(&self, state: &mut State<M>, now: Nanos, by: Receiver) {
        let State {
            engine,
            mem,
            io,
            same_host,
            ..
        } = state;
        with_wire_memory(mem, same_host.as_ref(), |mem| {
            io.receive(engine, mem, now, by)
        });
        if io.more_waiting() {
            // Its poller reports no datagram already waiting: the
            // progress thread takes in the rest, after what is owed left.
            let _ = self.waker.wake();
        }
    }

    /// One progress step, then the reports; on a verb's step, the progress
    /// thread's timer is brought forward if it sleeps past the engine's new
    /// earliest deadline (the thread sets its own sleep after its step).
    /// Whether it sent what was due (`Sending`), and, if it may
    /// `hand_over` its last batch, that batch, to send after the unlock
    /// (`outbox.rs`).
    fn step(
        &self,
        state: &mut State<M>,
        by: StepBy,
        now: Nanos,
        sending: Sending,
        hand_over: bool,
    ) -> Stepped<'_> {
        let State {
            engine,
            mem,
            io,
            same_host,
            ..
        } = state;
        // Same-host work first too: a QP it moves back to the wire (its
        // peer chose the wire) sends its packets in this very step.
        if let Some(sh) = same_host.as_mut() {
            sh.step(engine, mem, &mut io.endpoint, now);
        }
        let mut stepped = with_wire_memory(mem, same_host.as_ref(), |mem| {
            let out = Outgoing {
                outbox: &self.outbox,
                hand_over,
            };
            io.step(engine, mem, now, by, sending, out)
        });
        if let Some(sh) = same_host.as_mut() {
            sh.step(engine, mem, &mut io.endpoint, now);
        }
        // Packets wait for the sending socket to have room; nothing more
        // is taken from the engine until it has.
        let blocked = self.outbox.blocked();
        if blocked != state.waiting_for_room {
            self.wait_for_room(io, blocked);
            state.waiting_for_room = blocked;
        }
        if io.link_down && !io.link_down_handled {
            io.link_down_handled = true;
            // Said, or a user sees only their WRs' retry errors.
            crate::say!(
                "softverbs: the host daemon's session for {} broke (the daemon ended): \
                 this context receives nothing more (its port is down), and its \
                 connections end in IBV_WC_RETRY_EXC_ERR; contexts opened from now on \
                 start a new daemon",
                io.endpoint.local().ip()
            );
            // The daemon is gone: stop polling its closed socket, which
            // would otherwise be readable forever, and leave its steering
            // group, in which a new daemon would otherwise find us.
            let fd = io.endpoint.data_fd().as_raw_fd();
            let _ = self.registry.deregister(&mut SourceFd(&fd));
            if let Some(direct) = io.endpoint.direct_socket() {
                let _ = self.registry.deregister(&mut SourceFd(&direct.as_raw_fd()));
            }
            let groups = io.endpoint.groups_fd().as_raw_fd();
            let _ = self.registry.deregister(&mut SourceFd(&groups));
            io.endpoint.close_receivers();
            // As a RoCE port whose network device went down: the port
            // reads DOWN and IBV_EVENT_PORT_ERR tells an application that
            // only receives (its peers' retries no longer reach it).
            engine.link_down();
        }
        if self.link_changed.load(Ordering::Relaxed)
            && self.link_changed.swap(false, Ordering::Acquire)
        {
            if let Some(link) = io.link.as_mut().and_then(LinkWatch::changed) {
                engine.set_link(link);
            }
        }
        while let Some(cq) = engine.poll_comp_event() {
            self.notify.completion_event(cq);
            stepped.raised_completion_event = true;
        }
        while let Some(event) = engine.poll_event() {
            self.notify.async_event(event);
        }
        let kept_for = self.app_polls.stretched(HANDBACK);
        let deadline = state.deadline(self.app_polls.lent(), kept_for);
        let sooner = match (deadline, state.thread_deadline) {
            (Some(d), Some(t)) => d < t,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if sooner && by == StepBy::Verb {
            state.thread_deadline = deadline;
            if let Some(at) = deadline {
                let _ = self.deadline_timer.arm(self.clock.until(at));
            }
        }
        stepped
    }
}

impl<M> State<M> {
    /// The earliest of the engine's timers, the packets fault rules hold,
    /// and the sending of what verbs kept for the next if no verb sends it
    /// first: a batch a post left part-filled at its bound
    /// (`corked_batch.rs`), what polls kept once `kept_for` old
    /// (`kept_packets.rs`; `HANDBACK`, stretched as the lending's times
    /// are). While the socket is `lent`, the thread's looks at the
    /// spinning application (`Owner::look_again_at`) send both, if its
    /// next poll has not: arming the thread's timer for each batch kept
    /// would cost a system call, and a wake-up, per burst of posts.
    fn deadline(&self, lent: bool, kept_for: Nanos) -> Option<Nanos> {
        let kept = self.held_since.filter(|_| !lent);
        let corked = self.io.corked_until().filter(|_| !lent);
        [
            self.engine.poll_timeout(),
            self.io.held_deadline(),
            corked,
            kept.map(|at| at.saturating_add(kept_for)),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// One line of what the context's packets met: sent (in how many
    /// system calls, and batches kept for a next post), received, sent
    /// again, dropped on receipt and why, waits for socket room, and
    /// congestion marks and notices if there were any.
    fn summary(&self) -> String {
        let io = self.io.stats;
        let e = self.engine.stats();
        let refused = e.rx_malformed
            + e.rx_unknown_qp
            + e.rx_wrong_transport
            + e.rx_wrong_address
            + e.rx_peer_on_same_host
            + e.rx_bad_pkey
            + e.rx_dropped_by_qp;
        format!(
            "softverbs: {} (pid {}): {} packets sent (in {} system calls{}), {} received, \
             {} resent, {} not sent, \
             {} dropped on receipt ({} with a bad ICRC, {} refused by the engine), \
             {} waits for socket room{}{}{}{}",
            self.engine.config().name,
            std::process::id(),
            io.tx,
            io.tx_calls,
            match io.corked {
                0 => String::new(),
                n => format!("; {n} batches kept for a next post"),
            },
            io.rx,
            e.tx_resent,
            io.tx_dropped,
            io.rx_bad_icrc + refused,
            io.rx_bad_icrc,
            refused,
            io.tx_waits,
            match io.rx_dropped_by_rule {
                0 => String::new(),
                n => format!(", {n} dropped by a fault rule"),
            },
            match (e.rx_marked, e.rx_becn) {
                (0, 0) => String::new(),
                (marked, becn) => format!(
                    ", {marked} marked in a filling queue, {becn} congestion notices received"
                ),
            },
            match (e.tx_cnp, e.rx_cnp) {
                (0, 0) => String::new(),
                (sent, received) => format!(", CNPs: {sent} sent, {received} received"),
            },
            recovery_summary(&e.recovery),
        )
    }
}

/// What the stats line says of the RC QPs' recovery, where there was any,
/// the non-zero counts only: a loss shows as packets dropped ahead of
/// their turn and go-backs after a gap; a reordering (a packet that only
/// came late) as duplicates besides; a receiver that posted no receive WR
/// in time as RNR NAKs.
fn recovery_summary(r: &softverbs_engine::RecoveryStats) -> String {
    let counts = [
        ("go-backs after a gap", r.go_backs_after_gap),
        ("go-backs at the ACK timeout", r.go_backs_after_timeout),
        ("early go-backs", r.early_go_backs),
        ("RNR NAKs taken", r.rnr_naks),
        ("packets dropped ahead of their turn", r.rx_ahead),
        ("duplicate packets taken again", r.rx_duplicates),
    ];
    let said: Vec<String> = counts
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(what, n)| format!("{what} {n}"))
        .collect();
    if said.is_empty() {
        return String::new();
    }
    format!("; RC recovery: {}", said.join(", "))
}

impl<M> Shared<M> {
    /// Stops (`lend`) or starts again polling the steered socket and the
    /// group sockets for datagrams. Registered again, a socket that holds
    /// datagrams reports them at once (as `wait_for_room` below).
    fn lend_socket(&self, io: &Io, lend: bool) {
        if io.link_down_handled {
            return; // its sockets are closed
        }
        let endpoint = &io.endpoint;
        let direct = endpoint.direct_socket().map(|s| (s.as_raw_fd(), DIRECT));
        let groups = (endpoint.groups_fd().as_raw_fd(), GROUPS);
        for (fd, token) in direct.into_iter().chain([groups]) {
            let mut source = SourceFd(&fd);
            let _ = if lend {
                self.registry.deregister(&mut source)
            } else {
                self.registry
                    .register(&mut source, token, Interest::READABLE)
            };
        }
    }

    /// Starts (`on`) or stops polling the sending socket for room. The
    /// poller is edge-triggered: a socket that has room by the time it is
    /// registered reports it at once, so no wake-up is missed.
    fn wait_for_room(&self, io: &Io, on: bool) {
        let fd = io.endpoint.socket().as_raw_fd();
        let mut source = SourceFd(&fd);
        let _ = if on {
            self.registry
                .register(&mut source, SEND_ROOM, Interest::WRITABLE)
        } else {
            self.registry.deregister(&mut source)
        };
    }
}

/// Runs `f` on the memory requests from the wire reach: with the
/// same-host path on, through its atomic locks, so that an RDMA atomic is
/// atomic against same-host peers' too.
fn with_wire_memory<M: HostMemory, R>(
    mem: &mut M,
    same_host: Option<&SameHost>,
    f: impl FnOnce(&mut dyn HostMemory) -> R,
) -> R {
    match same_host {
        Some(sh) => f(&mut LockedAtomics {
            mem,
            locks: sh.locks(),
        }),
        None => f(mem),
    }
}

/// The same-host path of a new context, unless it is off or its region
/// cannot be made (then every QP uses the wire, and a log line says why).
fn start_same_host(
    cross: Option<Arc<dyn CrossProcess>>,
    endpoint: &mut Endpoint,
    engine: &mut Engine,
    ip: IpAddr,
) -> Option<SameHost> {
    let mode = ShmMode::from_env();
    let cross = cross.filter(|_| mode != ShmMode::Off)?;
    match SameHost::start(mode, cross, endpoint, engine, ip) {
        Ok(sh) => Some(sh),
        Err(e) => {
            crate::say!("softverbs: the same-host path is off, every QP uses the wire: {e}");
            None
        }
    }
}

/// The progress thread: the loop, and the device's failure if it panics.
fn progress_thread<M: HostMemory>(shared: &Shared<M>, poll: Poll) {
    // Also sets the thread's signal mask: the application's signals go to
    // its own threads, faults reach the provider's handler here.
    let _own = OwnThread::register();
    let exec_lock = shared.doorbell.as_ref().map(DoorbellAnswer::exec_lock);
    shared.notify.progress_thread_started(exec_lock.as_ref());
    let run = catch_unwind(AssertUnwindSafe(|| progress_loop(shared, poll)));
    if run.is_err() {
        // The panic hook has printed what happened.
        shared.failed.store(true, Ordering::Release);
        shared.notify.device_fatal();
    }
    shared.notify.progress_thread_ending(exec_lock.as_ref());
}

/// Every open context, with the process that opened it, to send at exit
/// what its polls kept for a next verb ([`flush_at_exit`]).
static OPEN: Mutex<Vec<(u32, std::sync::Weak<dyn AtExit>)>> = Mutex::new(Vec::new());

/// A context still open as the process exits.
trait AtExit: Send + Sync {
    /// Prints its counters if asked for, and sends what waits.
    fn at_exit(&self);
}

impl<M: HostMemory + Send> AtExit for Shared<M> {
    fn at_exit(&self) {
        if stats_wanted() {
            if let Some(mut state) = self.state.try_lock_for(FLUSH_WAIT) {
                self.say_stats(&mut state);
            }
        }
        self.flush();
    }
}

/// Whether `SOFTVERBS_STATS` asks for the counters.
fn stats_wanted() -> bool {
    // Unset, empty or 0: off (as SOFTVERBS_TRACE and SOFTVERBS_FAULTS
    // take an empty value for unset).
    std::env::var_os(STATS_VAR).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Sends what each open context's last poll kept for a next verb (an ACK
/// the peer waits for): a program that exits right after polling its
/// completion would otherwise take the ACK with it, and its peer's SEND
/// would end in RETRY_EXC_ERR. Prints the `SOFTVERBS_STATS` line of each
/// too: a program often exits without closing a context (librdmacm
/// leaves the ones it opened open). For the provider's `atexit` handler.
pub fn flush_at_exit() {
    let open: Vec<_> = OPEN.lock().drain(..).collect();
    // A child made by `fork` has a copy of its parent's contexts, which
    // are the parent's to flush and count (as in `Driver`'s drop).
    let own = open
        .iter()
        .filter(|(by, _)| *by == std::process::id())
        .filter_map(|(_, context)| context.upgrade());
    for context in own {
        context.at_exit();
    }
}

/// A verb on a failed device unwinds with a [`DeviceFailed`] payload
/// ([`Driver::with`]).
fn unwind<R>(failed: DeviceFailed) -> R {
    std::panic::resume_unwind(Box::new(failed))
}

/// What a poll of a CQ handed the application.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Polled {
    /// Completions.
    pub taken: usize,
    /// One of them was completed by data that came in (a receive, a READ,
    /// an atomic): the application learns of its incoming data from its
    /// CQs, so its polls will take the datagrams.
    pub incoming: bool,
}

impl Polled {
    /// `Engine::poll_cq_with`, counting what it hands `take`: the verb a
    /// [`Driver::poll_with`] runs.
    pub fn poll(
        e: &mut Engine,
        cq: CqId,
        max: usize,
        mut take: impl FnMut(WorkCompletion),
    ) -> VerbsResult<Polled> {
        let mut polled = Polled::default();
        e.poll_cq_with(cq, max, |wc| {
            polled.taken += 1;
            polled.incoming |= Polled::is_incoming(&wc);
            take(wc);
        })?;
        Ok(polled)
    }

    /// Whether data that came in completed `wc`: a receive, a READ, an
    /// atomic, done (a flushed receive is a QP's end, not data).
    pub fn is_incoming(wc: &WorkCompletion) -> bool {
        wc.status == WcStatus::Success
            && matches!(
                wc.opcode,
                WcOpcode::Recv
                    | WcOpcode::RecvRdmaWithImm
                    | WcOpcode::RdmaRead
                    | WcOpcode::CompSwap
                    | WcOpcode::FetchAdd
            )
    }
}

/// Which verb runs, for the progress made around it ([`Driver::run`]).
enum VerbKind<R> {
    /// A poll of a CQ; what it handed over.
    Poll(fn(&R) -> Polled),
    /// A receive posted.
    PostRecv,
    /// Sends posted.
    PostSend,
    /// Any other.
    Other,
}

/// Marks the driver failed if dropped during a panic. Made after the state
/// lock is taken, it is dropped before the lock is released, so no other
/// thread sees the state a panic left half changed.
struct FailOnUnwind<'a>(&'a AtomicBool);

impl Drop for FailOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Release);
        }
    }
}

/// The progress thread's loop: a step, then sleep in the poller until a
/// datagram, a timer or a wake-up. While datagrams keep arriving and the
/// application makes no verb calls (a responder serving READs, a target of
/// WRITEs), it polls without sleeping for `LINGER` after each: waking a
/// sleeping thread costs tens of microseconds (a blocking UDP ping-pong
/// takes 35 us per half round trip on the 2-CPU machine of perf.md), which
/// would otherwise be the READ's latency. An application that polls takes
/// the packets in itself, and the thread then sleeps so as not to contend
/// with it for the driver lock.
fn progress_loop<M: HostMemory>(shared: &Shared<M>, mut poll: Poll) {
    let mut events = Events::with_capacity(64);
    let mut linger_until: Nanos = 0;
    let mut owner = Owner::default();
    // The last look took the socket back from a spinning application.
    let mut took_back = false;
    // Steps made without a look at the poller, while lingering.
    let mut steps_unlooked: u32 = 0;
    // When to look next whether the application has ended.
    let mut end_look_at: Nanos = shared.clock.now().saturating_add(APP_END_LOOK);
    while !shared.stop.load(Ordering::Acquire) {
        let by = if steps_unlooked > 0 {
            StepBy::Linger
        } else {
            StepBy::ProgressThread
        };
        let (timeout, lingering) = {
            let Ok(mut state) = shared.lock_for_thread() else {
                return;
            };
            let _fail = FailOnUnwind(&shared.failed);
            #[cfg(test)]
            if shared.inject_panic.swap(false, Ordering::AcqRel) {
                panic!("injected progress-thread panic");
            }
            let received = state.io.stats.rx;
            let write_ends = state.engine.stats().rx_write_ends;
            let started = shared.clock.now();
            state.engine.set_time(started);
            // What a verb kept lately is left to the verb that comes
            // (the answering WRITE it rides with), unless this step has
            // work to send: the thread wakes for it only once it is
            // `HANDBACK` old (`State::deadline`). So is the ACK of a WRITE
            // the thread takes in for an application that answers them.
            let kept_for = shared.app_polls.stretched(HANDBACK);
            let young = |at: Nanos| started.saturating_sub(at) < kept_for;
            let sending = Sending::Thread {
                kept: state.held_since.map(young),
                answering: state.write_answers.answering(),
            };
            let stepped = shared.step(&mut state, by, started, sending, true);
            let stepped_woke = stepped.raised_completion_event;
            if stepped.sent {
                state.held_since = None; // whatever a verb kept has left
            } else {
                state.held_since.get_or_insert(started);
            }
            if state.engine.stats().rx_write_ends != write_ends {
                state.write_answers.took_write(started);
                if took_back {
                    shared.app_polls.write_waited();
                }
            }
            let took_in = state.io.stats.rx != received;
            // The step stopped receiving before the socket was empty
            // (`Endpoint::more_waiting`): the poller would not say so.
            let more_waiting = state.io.more_waiting();
            // What the step wrote leaves now, with the driver unlocked
            // (`outbox.rs`), ahead of the thread's reckoning below: sent
            // after it, a READ's response waited 0.3 us longer.
            let blocked = match stepped.handoff {
                Some(handoff) => {
                    drop(state);
                    let blocked = handoff.send();
                    let Ok(again) = shared.lock_for_thread() else {
                        return;
                    };
                    state = again;
                    blocked
                }
                None => false,
            };
            // Until a WRITE goes unanswered (`WriteAnswers`).
            let answering = state.write_answers.answering();
            state.sleeper_parks(answering);
            let now = shared.clock.now();
            if stepped_woke {
                // The application thread the step woke needs a CPU, and
                // takes its packets in through its verbs: polling on
                // beside it, the thread held a CPU it waited for (on two
                // CPUs, with the peer's thread lingering too, every
                // completion event waited out both lingers: wire
                // `ibv_rc_pingpong -e` 200 to 300 us an iteration).
                linger_until = 0;
            } else if took_in {
                linger_until = now + LINGER;
            }
            let app_idle = now.saturating_sub(shared.last_verb.load(Ordering::Relaxed)) > APP_IDLE;
            // As of when the thread took the driver: its own step may
            // take longer than a spinning thread's gap between polls.
            let change = owner.review(&shared.app_polls, started);
            if let Some(change) = change {
                shared.lend_socket(&state.io, change == Change::Lend);
            }
            took_back = change == Some(Change::TakeBack);
            let deadline = state.deadline(owner.look_again_at().is_some(), kept_for);
            state.thread_deadline = deadline;
            let verb_waits = shared.verbs_waiting.load(Ordering::Relaxed) > 0;
            let linger = app_idle && now < linger_until && !verb_waits;
            let lingering = linger && change.is_none();
            // Peers ring the doorbell only for a thread about to sleep: a
            // lingering one applies their deliveries at every step.
            let delivered =
                !lingering && state.same_host.as_ref().is_some_and(|sh| !sh.may_sleep());
            // What found no room in the socket waits for the next step, at
            // once, which then waits for room as for any batch.
            if blocked || delivered || more_waiting || change == Some(Change::TakeBack) || linger {
                (Some(std::time::Duration::ZERO), lingering)
            } else {
                let look = owner.look_again_at();
                let wake = [deadline, look, Some(end_look_at)]
                    .into_iter()
                    .flatten()
                    .min();
                (wake.map(|at| shared.clock.until(at)), false)
            }
        };
        if lingering && steps_unlooked < LINGER_STEPS_PER_LOOK {
            steps_unlooked += 1;
            continue;
        }
        steps_unlooked = 0;
        end_process_if_the_application_ended(shared, &mut end_look_at);
        let lent = owner.look_again_at().is_some();
        if !wait_for_events(
            &shared.stream_waiting,
            &mut poll,
            &mut events,
            timeout,
            lent,
        ) {
            return;
        }
        if events.iter().any(|e| e.token() == DEADLINE) {
            shared.deadline_timer.clear();
        }
        if events.iter().any(|e| e.token() == LINK) {
            shared.link_changed.store(true, Ordering::Release);
        }
        if let Some(doorbell) = &shared.doorbell {
            doorbell.awake();
        }
    }
}

/// Ends the process, as glibc ends it when its last thread ends, once
/// the application's threads have all ended (its main thread with
/// `pthread_exit`) and only softverbs' own are left, which would keep it
/// alive for ever (`own_threads.rs`): looked at when `look_at` has come,
/// then a second later.
fn end_process_if_the_application_ended<M: HostMemory>(shared: &Shared<M>, look_at: &mut Nanos) {
    let now = shared.clock.now();
    if now < *look_at {
        return;
    }
    *look_at = now.saturating_add(APP_END_LOOK);
    if own_threads::application_ended() {
        own_threads::end_process();
    }
}

/// Sleeps in the poller until an event or `timeout`; false if polling
/// failed. While the steered socket is `lent` to a spinning application,
/// frames on the daemon's stream alone are noted for its next poll to
/// read (`StreamWaiting`), and the thread sleeps on: taking the driver
/// from the spinning thread to read them itself costs a lock hand-off. The
/// application still spinning is the lending's premise; if it stops, the
/// thread's next look (at the time `Owner::look_again_at` gave, within
/// `timeout`) takes the socket back and reads the stream.
fn wait_for_events(
    stream_waiting: &StreamWaiting,
    poll: &mut Poll,
    events: &mut Events,
    timeout: Option<std::time::Duration>,
    lent: bool,
) -> bool {
    let until = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        let left = until.map(|at| at.saturating_duration_since(std::time::Instant::now()));
        match poll.poll(events, left) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return true,
            Err(_) => return false,
        }
        let only_stream = !events.is_empty() && events.iter().all(|e| e.token() == STREAM);
        if !(lent && only_stream) {
            return true;
        }
        stream_waiting.note();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softverbs_engine::FlatMemory;
    use std::sync::mpsc;
    use std::time::Duration;

    /// While the socket is lent, frames on the daemon's stream alone are
    /// noted and the thread sleeps on until its timeout; frames on the
    /// stream while it is not lent, or anything else with them, end the
    /// wait.
    #[test]
    fn a_lending_thread_notes_the_stream_and_sleeps_on() {
        use std::io::Write;
        use std::os::unix::net::UnixStream;
        let pair = || {
            let (tx, rx) = UnixStream::pair().unwrap();
            rx.set_nonblocking(true).unwrap();
            (tx, rx)
        };
        let ((mut stream, stream_rx), (mut other, other_rx)) = (pair(), pair());
        let mut poll = Poll::new().unwrap();
        let registry = poll.registry();
        let readable = Interest::READABLE;
        let other_token = Token(9);
        registry
            .register(&mut SourceFd(&stream_rx.as_raw_fd()), STREAM, readable)
            .unwrap();
        registry
            .register(&mut SourceFd(&other_rx.as_raw_fd()), other_token, readable)
            .unwrap();
        let mut events = Events::with_capacity(8);
        let waiting = StreamWaiting::default();
        let (short, long) = (Duration::from_millis(50), Duration::from_secs(10));
        let mut wait = |events: &mut Events, timeout, lent| {
            wait_for_events(&waiting, &mut poll, events, Some(timeout), lent)
        };

        stream.write_all(b"a frame").unwrap();
        let started = std::time::Instant::now();
        assert!(wait(&mut events, short, true));
        assert!(started.elapsed() >= short, "woke before its timeout");
        assert!(events.is_empty());
        assert!(waiting.take());

        stream.write_all(b"another").unwrap();
        assert!(wait(&mut events, long, false));
        assert!(events.iter().any(|e| e.token() == STREAM));
        assert!(!waiting.take(), "noted while not lent");

        stream.write_all(b"a third").unwrap();
        other.write_all(b"something else").unwrap();
        assert!(wait(&mut events, long, true));
        assert!(events.iter().any(|e| e.token() == other_token));
    }

    /// Reports `device_fatal` on a channel.
    struct Fatal(parking_lot::Mutex<mpsc::Sender<()>>);

    impl Notify for Fatal {
        fn completion_event(&self, _: CqId) {}
        fn async_event(&self, _: AsyncEvent) {}
        fn device_fatal(&self) {
            let _ = self.0.lock().send(());
        }
    }

    /// A driver on a loopback address and a daemon of its own.
    fn test_driver(notify: Arc<dyn Notify>) -> Driver<FlatMemory> {
        let ip = crate::test_loopback_address();
        let (daemon, _) = crate::daemon::server::start_thread(crate::daemon::DaemonConfig {
            socket: format!("softverbs-test-{}-{ip}", std::process::id()),
            idle_exit: Duration::from_millis(200),
        })
        .unwrap();
        let mut device = DeviceConfig::loopback(1);
        device.ports[0].gids = vec![softverbs_engine::Gid::from_ipv4(ip)];
        let cfg = DriverConfig {
            device,
            ip: IpAddr::V4(ip),
            daemon,
        };
        Driver::start(cfg, FlatMemory::new(0x1000, 4096), notify).unwrap()
    }

    #[test]
    fn a_progress_thread_panic_is_device_fatal_and_verbs_then_fail() {
        let (tx, fatal) = mpsc::channel();
        let d = test_driver(Arc::new(Fatal(parking_lot::Mutex::new(tx))));
        assert!(d.try_with(|e, _| e.alloc_pd()).unwrap().is_ok());

        d.shared.inject_panic.store(true, Ordering::Release);
        d.shared.waker.wake().unwrap();
        fatal
            .recv_timeout(Duration::from_secs(30))
            .expect("device_fatal reported");

        assert_eq!(d.try_with(|e, _| e.alloc_pd()).err(), Some(DeviceFailed));
        let polled = catch_unwind(AssertUnwindSafe(|| {
            d.poll_unless_busy(|_, _| Ok(Polled::default()))
        }));
        let payload = polled.expect_err("a poll unwinds on a failed device");
        assert_eq!(payload.downcast_ref(), Some(&DeviceFailed));
        let unwound = catch_unwind(AssertUnwindSafe(|| d.with(|e, _| e.alloc_pd())));
        let payload = unwound.expect_err("with unwinds on a failed device");
        assert_eq!(payload.downcast_ref(), Some(&DeviceFailed));
        let e = d.add_slot().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        assert!(fatal.try_recv().is_err(), "reported once");
    }

    /// A verb that finds the driver held says it waits, for a lingering
    /// progress thread to stop lingering, and no longer once it has it.
    #[test]
    fn a_verb_waiting_for_the_driver_is_counted() {
        let (tx, _fatal) = mpsc::channel();
        let d = test_driver(Arc::new(Fatal(parking_lot::Mutex::new(tx))));
        let waiting = || d.shared.verbs_waiting.load(Ordering::Relaxed);
        let held = d.shared.lock().unwrap();
        std::thread::scope(|s| {
            let verb = s.spawn(|| d.with(|e, _| e.alloc_pd()));
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while waiting() == 0 {
                assert!(std::time::Instant::now() < deadline, "never said it waits");
                std::hint::spin_loop();
            }
            drop(held);
            assert!(verb.join().unwrap().is_ok());
        });
        assert_eq!(waiting(), 0);
        assert!(
            d.with(|e, _| e.alloc_pd()).is_ok(),
            "a verb that need not wait"
        );
        assert_eq!(waiting(), 0);
    }

    /// The stats line names only the recovery that happened.
    #[test]
    fn the_stats_line_names_the_recovery_that_happened() {
        let none = softverbs_engine::RecoveryStats::default();
        assert_eq!(recovery_summary(&none), "");
        let some = softverbs_engine::RecoveryStats {
            rnr_naks: 1,
            rx_ahead: 31,
            ..none
        };
        assert_eq!(
            recovery_summary(&some),
            "; RC recovery: RNR NAKs taken 1, packets dropped ahead of their turn 31"
        );
    }
}
