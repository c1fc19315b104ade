//! A device context at work: an engine, the memory it reaches, its UDP
//! endpoints, and a progress thread.
//!
//! Threading model: all state sits behind one mutex. Verbs run on the
//! caller's thread ([`Driver::with`]) and then make progress right there
//! (receive, run due timers, transmit), so a `post_send` leaves at once and
//! a `poll_cq` spinning on an empty CQ pulls packets in itself, with no
//! thread hand-off on the fast path. The progress thread sleeps in the
//! poller until a datagram arrives, a timer is due or a verb moved the
//! earliest deadline forward, so a program blocked in `ibv_get_cq_event`
//! is served without anyone busy-polling.

use crate::clock::Clock;
use crate::endpoint::Endpoint;
use crate::io_step::{Io, IoStats};
use crate::slots::{SlotPorts, MAX_SLOT};
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use parking_lot::Mutex;
use softverbs_engine::{AsyncEvent, CqId, DeviceConfig, Engine, HostMemory, Nanos};
use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

const WAKER: Token = Token(usize::MAX);

/// Receives what the engine reports, from whichever thread made progress.
/// Implementations must be quick and must not call back into the driver
/// (they run with the driver's lock held).
pub trait Notify: Send + Sync {
    /// A CQ armed with `req_notify_cq` got a qualifying completion.
    fn completion_event(&self, cq: CqId);
    /// An async event was raised.
    fn async_event(&self, event: AsyncEvent);
}

/// Where a driver lives on the network.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// The device (its GID table should hold `ip`'s GID).
    pub device: DeviceConfig,
    /// The local address the endpoints bind.
    pub ip: IpAddr,
    /// The slot-to-port mapping shared by every softverbs host.
    pub ports: SlotPorts,
}

struct State<M> {
    engine: Engine,
    mem: M,
    io: Io,
    /// The deadline the progress thread sleeps towards (None: no timer).
    thread_deadline: Option<Nanos>,
}

struct Shared<M> {
    state: Mutex<State<M>>,
    clock: Clock,
    waker: Waker,
    registry: Registry,
    notify: Arc<dyn Notify>,
    stop: AtomicBool,
}

/// One device context driven over UDP.
pub struct Driver<M: HostMemory + Send + 'static> {
    shared: Arc<Shared<M>>,
    thread: Option<JoinHandle<()>>,
}

impl<M: HostMemory + Send + 'static> std::fmt::Debug for Driver<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").finish_non_exhaustive()
    }
}

impl<M: HostMemory + Send + 'static> Driver<M> {
    /// Claims a slot at `cfg.ip`, opens the engine and starts the progress
    /// thread.
    pub fn start(cfg: DriverConfig, mem: M, notify: Arc<dyn Notify>) -> io::Result<Driver<M>> {
        let first_slot = fastrand::u16(1..=MAX_SLOT);
        let mut endpoint = Endpoint::claim(cfg.ip, cfg.ports, first_slot)?;
        let poll = Poll::new()?;
        poll.registry()
            .register(endpoint.socket_mut(), Token(0), Interest::READABLE)?;
        let mut device = cfg.device;
        let qpns = endpoint.qpns();
        (device.qpn_base, device.qpn_limit) = (qpns.start, qpns.end);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                engine: Engine::new(device),
                mem,
                io: Io::new(endpoint, cfg.ports),
                thread_deadline: None,
            }),
            clock: Clock::start(),
            waker: Waker::new(poll.registry(), WAKER)?,
            registry: poll.registry().try_clone()?,
            notify,
            stop: AtomicBool::new(false),
        });
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("softverbs-progress".into())
            .spawn(move || progress_thread(&thread_shared, poll))?;
        Ok(Driver {
            shared,
            thread: Some(thread),
        })
    }

    /// Runs `verb` on the engine, then makes progress on this thread.
    pub fn with<R>(&self, verb: impl FnOnce(&mut Engine, &mut M) -> R) -> R {
        let mut guard = self.shared.state.lock();
        let state = &mut *guard;
        let result = verb(&mut state.engine, &mut state.mem);
        self.shared.step(state);
        result
    }

    /// Makes progress without running a verb (a polling application calls
    /// this through `poll_cq`).
    pub fn progress(&self) {
        let mut state = self.shared.state.lock();
        self.shared.step(&mut state);
    }

    /// Claims one more slot (4096 more QP numbers) for this context.
    pub fn add_slot(&self) -> io::Result<()> {
        let mut state = self.shared.state.lock();
        let last = state.io.endpoints.last().map_or(1, Endpoint::slot);
        let ip = state.io.endpoints[0].local().ip();
        let mut endpoint = Endpoint::claim(ip, state.io.ports, last % MAX_SLOT + 1)?;
        let token = Token(state.io.endpoints.len());
        self.shared
            .registry
            .register(endpoint.socket_mut(), token, Interest::READABLE)?;
        state.engine.add_qpn_range(endpoint.qpns());
        state.io.endpoints.push(endpoint);
        Ok(())
    }

    /// The slots this context serves.
    pub fn slots(&self) -> Vec<u16> {
        let state = self.shared.state.lock();
        state.io.endpoints.iter().map(Endpoint::slot).collect()
    }

    /// Socket-layer counters.
    pub fn io_stats(&self) -> IoStats {
        self.shared.state.lock().io.stats
    }
}

impl<M: HostMemory + Send + 'static> Drop for Driver<M> {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        let _ = self.shared.waker.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl<M: HostMemory> Shared<M> {
    /// One progress step, then the reports, then a wake-up of the progress
    /// thread if it sleeps past the engine's new earliest deadline.
    fn step(&self, state: &mut State<M>) {
        let State {
            engine, mem, io, ..
        } = state;
        io.step(engine, mem, self.clock.now());
        while let Some(cq) = engine.poll_comp_event() {
            self.notify.completion_event(cq);
        }
        while let Some(event) = engine.poll_event() {
            self.notify.async_event(event);
        }
        let deadline = engine.poll_timeout();
        let sooner = match (deadline, state.thread_deadline) {
            (Some(d), Some(t)) => d < t,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if sooner {
            state.thread_deadline = deadline;
            let _ = self.waker.wake();
        }
    }
}

fn progress_thread<M: HostMemory>(shared: &Shared<M>, mut poll: Poll) {
    let mut events = Events::with_capacity(64);
    while !shared.stop.load(Ordering::Acquire) {
        let timeout = {
            let mut state = shared.state.lock();
            shared.step(&mut state);
            let deadline = state.engine.poll_timeout();
            state.thread_deadline = deadline;
            deadline.map(|at| shared.clock.until(at))
        };
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() != io::ErrorKind::Interrupted {
                return;
            }
        }
    }
}
