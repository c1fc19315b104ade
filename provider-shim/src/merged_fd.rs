//! An event descriptor of a pass-through context that softverbs adds
//! events to: the context's async descriptor when its fault rules raise
//! QP_FATAL (`qp_error`), and a completion channel when they hold
//! completions back (`completion delay=`, whose completion events come
//! when the completions do). The kernel's events and the raised ones are
//! merged into the one descriptor the application watches.
//!
//! softverbs cannot add to a descriptor of the kernel's, so the
//! application gets an epoll descriptor that watches the kernel's, an
//! eventfd readable while raised events wait, and, for a channel, a
//! timerfd set for the next held completion's time. An epoll descriptor
//! is readable (to poll, select and epoll) exactly when one of them is,
//! and it keeps the application's `O_NONBLOCK`. It cannot be `read`, so
//! preload mode's `ibv_get_async_event` and `ibv_get_cq_event` take
//! events through [`MergedFd::next`]: raised ones first, then the
//! kernel's.
//!
//! libibverbs' destroy of a QP or CQ waits until the application has
//! acked as many of its events as the kernel reported for it. Raised
//! events are not the kernel's, so the acks of those handed out are taken
//! back before the destroy ([`MergedFd::forget`]), and the ones still
//! waiting are dropped, as the kernel drops a destroyed object's.

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use parking_lot::Mutex;
use softverbs_transport::deadline_timer::DeadlineTimer;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::raw::c_int;
use std::time::Instant;

/// One event as the kernel's descriptors carry it: the object's user
/// handle (its address) or a port number, and for an async event its
/// `IBV_EVENT_*` type (`ib_uverbs_async_event_desc`; a completion event,
/// `ib_uverbs_comp_event_desc`, is the CQ's handle alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub element: u64,
    pub event_type: u32,
}

/// What a descriptor carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A context's async events (16-byte records).
    Async,
    /// A completion channel's events (8-byte records), with a timer.
    Completion,
}

impl Kind {
    fn record_len(self) -> usize {
        match self {
            Kind::Async => 16,
            Kind::Completion => 8,
        }
    }
}

/// Raised events: those waiting, and how many of each object's were
/// handed out.
#[derive(Debug, Default)]
struct Raised {
    waiting: VecDeque<Record>,
    handed_out: HashMap<u64, u32>,
}

/// One merged descriptor.
#[derive(Debug)]
pub struct MergedFd {
    kind: Kind,
    /// The kernel's descriptor (closed by libibverbs with its context or
    /// channel; set non-blocking here).
    kernel: RawFd,
    /// What the application gets.
    epoll: Epoll,
    /// Readable while `raised.waiting` is not empty.
    raised_ready: EventFd,
    /// For a completion channel: readable once the time it was set for
    /// has come; and what it is set for.
    timer: Option<Mutex<(DeadlineTimer, Option<Instant>)>>,
    raised: Mutex<Raised>,
}

impl MergedFd {
    /// Merges raised events into the kernel's descriptor `kernel`.
    pub fn new(kind: Kind, kernel: RawFd) -> io::Result<MergedFd> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        let raised_ready =
            EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?;
        let timer = match kind {
            Kind::Async => None,
            Kind::Completion => Some(DeadlineTimer::new()?),
        };
        let readable = || EpollEvent::new(EpollFlags::EPOLLIN, 0);
        // SAFETY: the caller's open descriptor, borrowed for these calls.
        let kernel_fd = unsafe { BorrowedFd::borrow_raw(kernel) };
        epoll.add(kernel_fd, readable())?;
        epoll.add(raised_ready.as_fd(), readable())?;
        if let Some(t) = &timer {
            // SAFETY: the timer's own descriptor, open while it lives.
            epoll.add(unsafe { BorrowedFd::borrow_raw(t.raw_fd()) }, readable())?;
        }
        // Only softverbs reads it from now on; it waits on the epoll one.
        // SAFETY: F_GETFL/F_SETFL on an open descriptor.
        unsafe {
            let fl = libc::fcntl(kernel, libc::F_GETFL);
            if fl < 0 || libc::fcntl(kernel, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(MergedFd {
            kind,
            kernel,
            epoll,
            raised_ready,
            timer: timer.map(|t| Mutex::new((t, None))),
            raised: Mutex::new(Raised::default()),
        })
    }

    /// The descriptor the application watches.
    pub fn fd(&self) -> RawFd {
        self.epoll.0.as_raw_fd()
    }

    /// The kernel's descriptor (given back when the application is done).
    pub fn kernel_fd(&self) -> RawFd {
        self.kernel
    }

    /// Raises an event, after those already waiting.
    pub fn raise(&self, record: Record) {
        let mut raised = self.raised.lock();
        raised.waiting.push_back(record);
        self.set_ready(true);
    }

    /// The next event: a raised one, else the kernel's; `before` runs
    /// first each time it looks (it may raise events). Without
    /// `O_NONBLOCK` on [`MergedFd::fd`] it waits for one; with it, it fails
    /// with EAGAIN when none waits. An error is an errno.
    pub fn next(&self, mut before: impl FnMut()) -> Result<Record, c_int> {
        loop {
            before();
            if let Some(record) = self.take_raised() {
                return Ok(record);
            }
            match self.read_kernel() {
                Err(libc::EAGAIN) if !self.nonblocking() => self.wait(),
                other => return other,
            }
        }
    }

    /// The object at `element` is being destroyed: its waiting raised
    /// events go, and the number of its raised events handed out is
    /// returned (their acks are not the kernel's to count).
    pub fn forget(&self, element: u64) -> u32 {
        let mut raised = self.raised.lock();
        raised.waiting.retain(|r| r.element != element);
        if raised.waiting.is_empty() {
            self.set_ready(false);
        }
        raised.handed_out.remove(&element).unwrap_or(0)
    }

    /// The destroy that [`MergedFd::forget`] prepared failed: the
    /// object's `handed_out` raised events count again.
    pub fn remember(&self, element: u64, handed_out: u32) {
        if handed_out > 0 {
            *self.raised.lock().handed_out.entry(element).or_default() += handed_out;
        }
    }

    /// Sets the timer for `at` (None: unset, and an expiry not taken is
    /// dropped); a time already past makes the descriptor readable at
    /// once. Until set again, an expired timer keeps it readable.
    pub fn set_timer(&self, at: Option<Instant>) {
        if let Some(timer) = &self.timer {
            let mut t = timer.lock();
            t.1 = at;
            arm(&t.0, at);
        }
    }

    /// Sets the timer for `at` unless it is set for earlier.
    pub fn set_timer_by(&self, at: Instant) {
        if let Some(timer) = &self.timer {
            let mut t = timer.lock();
            if t.1.is_none_or(|set| at < set) {
                t.1 = Some(at);
                arm(&t.0, Some(at));
            }
        }
    }

    fn take_raised(&self) -> Option<Record> {
        let mut raised = self.raised.lock();
        let record = raised.waiting.pop_front()?;
        *raised.handed_out.entry(record.element).or_default() += 1;
        if raised.waiting.is_empty() {
            self.set_ready(false);
        }
        Some(record)
    }

    /// Makes the eventfd readable or not; called with `raised` locked. It
    /// is non-blocking: reading an unset one fails with EAGAIN, which
    /// leaves it unset, as wanted; a write cannot overflow (one per event).
    fn set_ready(&self, ready: bool) {
        let _ = if ready {
            self.raised_ready.write(1).map(drop)
        } else {
            self.raised_ready.read().map(drop)
        };
    }

    /// One record from the kernel's descriptor, without waiting.
    fn read_kernel(&self) -> Result<Record, c_int> {
        let len = self.kind.record_len();
        let mut desc = [0u8; 16];
        // SAFETY: the kernel's descriptor, open while the context or
        // channel is (libibverbs closes it only after softverbs gave it
        // back).
        let kernel = unsafe { BorrowedFd::borrow_raw(self.kernel) };
        match nix::unistd::read(kernel, &mut desc[..len]) {
            Ok(n) if n == len => {}
            Ok(_) => return Err(libc::EIO), // the kernel writes whole records
            Err(e) => return Err(e as c_int),
        }
        let event_type = match self.kind {
            Kind::Async => u32::from_ne_bytes([desc[8], desc[9], desc[10], desc[11]]),
            Kind::Completion => 0,
        };
        let mut element = [0u8; 8];
        element.copy_from_slice(&desc[..8]);
        Ok(Record {
            element: u64::from_ne_bytes(element),
            event_type,
        })
    }

    fn nonblocking(&self) -> bool {
        // SAFETY: F_GETFL on a descriptor we own.
        let fl = unsafe { libc::fcntl(self.fd(), libc::F_GETFL) };
        fl >= 0 && fl & libc::O_NONBLOCK != 0
    }

    /// Waits until a watched descriptor is readable. A signal only makes
    /// it look again: a read of the kernel's descriptor is restarted after
    /// a stop and continue, where epoll_wait is not.
    fn wait(&self) {
        let mut events = [EpollEvent::empty()];
        let _ = self.epoll.wait(&mut events, EpollTimeout::NONE);
    }
}

/// Arms `timer` for `at` (None: disarms it).
fn arm(timer: &DeadlineTimer, at: Option<Instant>) {
    let _ = match at {
        Some(at) => timer.arm(at.saturating_duration_since(Instant::now())),
        None => timer.disarm(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{FromRawFd, OwnedFd};

    /// A merged descriptor over a socketpair standing in for the kernel's
    /// (one record per read, as the kernel's): the merged one, and the
    /// pair's ends (the kernel's, and the one its events are written to).
    fn rig() -> (MergedFd, OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two new descriptors into `fds`.
        assert_eq!(0, unsafe {
            libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, fds.as_mut_ptr())
        });
        // SAFETY: just created, owned here.
        let (kernel, writer) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        (
            MergedFd::new(Kind::Async, kernel.as_raw_fd()).unwrap(),
            kernel,
            writer,
        )
    }

    fn kernel_event(writer: &OwnedFd, r: Record) {
        let mut desc = [0u8; 16];
        desc[..8].copy_from_slice(&r.element.to_ne_bytes());
        desc[8..12].copy_from_slice(&r.event_type.to_ne_bytes());
        // SAFETY: a 16-byte buffer.
        assert_eq!(16, unsafe {
            libc::write(writer.as_raw_fd(), desc.as_ptr().cast(), 16)
        });
    }

    fn readable(fd: RawFd) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    fn set_nonblocking(fd: RawFd) {
        // SAFETY: F_SETFL on an open descriptor.
        unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) };
    }

    const FATAL: u32 = 1;
    const COMM_EST: u32 = 4;

    #[test]
    fn raised_events_come_first_and_the_descriptor_is_readable_while_any_waits() {
        let (m, _k, w) = rig();
        set_nonblocking(m.fd());
        assert!(!readable(m.fd()));
        assert_eq!(m.next(|| {}), Err(libc::EAGAIN));
        let kernel = Record {
            element: 0x10,
            event_type: COMM_EST,
        };
        let raised = Record {
            element: 0x20,
            event_type: FATAL,
        };
        kernel_event(&w, kernel);
        assert!(readable(m.fd()));
        m.raise(raised);
        assert_eq!(m.next(|| {}), Ok(raised));
        assert!(readable(m.fd()), "the kernel's event still waits");
        assert_eq!(m.next(|| {}), Ok(kernel));
        assert!(!readable(m.fd()));
        assert_eq!(m.next(|| {}), Err(libc::EAGAIN));
    }

    #[test]
    fn a_blocked_reader_wakes_for_a_raised_event() {
        let (m, _k, _w) = rig();
        let raised = Record {
            element: 0x20,
            event_type: FATAL,
        };
        std::thread::scope(|s| {
            let reader = s.spawn(|| m.next(|| {}));
            m.raise(raised);
            assert_eq!(reader.join().unwrap(), Ok(raised));
        });
    }

    #[test]
    fn a_destroy_drops_waiting_events_and_counts_those_handed_out() {
        let (m, _k, _w) = rig();
        set_nonblocking(m.fd());
        let qp = |element| Record {
            element,
            event_type: FATAL,
        };
        m.raise(qp(0x20));
        m.raise(qp(0x20));
        m.raise(qp(0x30));
        assert_eq!(m.next(|| {}), Ok(qp(0x20)));
        assert_eq!(m.forget(0x20), 1, "one handed out, one dropped");
        assert_eq!(m.next(|| {}), Ok(qp(0x30)));
        assert_eq!(m.forget(0x30), 1);
        assert!(!readable(m.fd()));
        m.remember(0x30, 1);
        assert_eq!(m.forget(0x30), 1, "a failed destroy counts them again");
    }
}
