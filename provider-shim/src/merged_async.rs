//! The async event descriptor of a pass-through context whose fault rules
//! raise events (`qp_error`): the kernel's events and the raised ones,
//! merged into the one descriptor the application watches.
//!
//! softverbs cannot add to the kernel's descriptor, so the context's
//! `async_fd` becomes an epoll descriptor that watches the kernel's and an
//! eventfd readable while raised events wait. An epoll descriptor is
//! readable (to poll, select and epoll) exactly when one of the two is,
//! and it keeps the application's `O_NONBLOCK`. It cannot be `read`, so
//! preload mode's `ibv_get_async_event` takes events through
//! [`MergedAsync::next`]: raised ones first, then the kernel's.
//!
//! libibverbs' destroy of a QP waits until the application has acked as
//! many of the QP's events as the kernel reported for it. Raised events
//! are not the kernel's, so the acks of those handed out are taken back
//! before the destroy ([`MergedAsync::forget`]), and the ones still
//! waiting are dropped, as the kernel drops a destroyed object's.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::raw::c_int;

/// One async event as the kernel's descriptor carries it
/// (`ib_uverbs_async_event_desc`): the object's user handle (its address)
/// or a port number, and the `IBV_EVENT_*` type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncRecord {
    pub element: u64,
    pub event_type: u32,
}

/// Raised events: those waiting, and how many of each object's were
/// handed out.
#[derive(Debug, Default)]
struct Raised {
    waiting: VecDeque<AsyncRecord>,
    handed_out: HashMap<u64, u32>,
}

/// The merged descriptor of one context.
#[derive(Debug)]
pub struct MergedAsync {
    /// The kernel's descriptor (the context's own, closed by libibverbs
    /// when the context closes; set non-blocking here).
    kernel: RawFd,
    /// What the application gets as `async_fd`.
    epoll: OwnedFd,
    /// Readable while `raised.waiting` is not empty.
    raised_ready: OwnedFd,
    raised: Mutex<Raised>,
}

/// Makes a libc call's -1 an error.
fn check(ret: c_int) -> io::Result<c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

impl MergedAsync {
    /// Merges raised events into the kernel's descriptor `kernel`.
    pub fn new(kernel: RawFd) -> io::Result<MergedAsync> {
        // SAFETY: creates a descriptor, owned just below.
        let epoll =
            unsafe { OwnedFd::from_raw_fd(check(libc::epoll_create1(libc::EPOLL_CLOEXEC))?) };
        let flags = libc::EFD_CLOEXEC | libc::EFD_NONBLOCK;
        // SAFETY: as above.
        let raised_ready = unsafe { OwnedFd::from_raw_fd(check(libc::eventfd(0, flags))?) };
        for fd in [kernel, raised_ready.as_raw_fd()] {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: 0,
            };
            // SAFETY: both descriptors are open; `ev` is read during the call.
            check(unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        }
        // Only softverbs reads it from now on; it waits on the epoll one.
        // SAFETY: F_GETFL/F_SETFL on an open descriptor.
        unsafe {
            let fl = check(libc::fcntl(kernel, libc::F_GETFL))?;
            check(libc::fcntl(kernel, libc::F_SETFL, fl | libc::O_NONBLOCK))?;
        }
        Ok(MergedAsync {
            kernel,
            epoll,
            raised_ready,
            raised: Mutex::new(Raised::default()),
        })
    }

    /// The descriptor the application watches (the context's `async_fd`).
    pub fn fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// The kernel's descriptor (given back to the context when it closes).
    pub fn kernel_fd(&self) -> RawFd {
        self.kernel
    }

    /// Raises an event, after those already waiting.
    pub fn raise(&self, record: AsyncRecord) {
        let mut raised = self.raised.lock();
        raised.waiting.push_back(record);
        self.set_ready(true);
    }

    /// The next event: a raised one, else the kernel's. Without
    /// `O_NONBLOCK` on [`MergedAsync::fd`] it waits for one; with it, it
    /// fails with EAGAIN when none waits. An error is an errno.
    pub fn next(&self) -> Result<AsyncRecord, c_int> {
        loop {
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

    /// The destroy that [`MergedAsync::forget`] prepared failed: the
    /// object's `handed_out` raised events count again.
    pub fn remember(&self, element: u64, handed_out: u32) {
        if handed_out > 0 {
            *self.raised.lock().handed_out.entry(element).or_default() += handed_out;
        }
    }

    fn take_raised(&self) -> Option<AsyncRecord> {
        let mut raised = self.raised.lock();
        let record = raised.waiting.pop_front()?;
        *raised.handed_out.entry(record.element).or_default() += 1;
        if raised.waiting.is_empty() {
            self.set_ready(false);
        }
        Some(record)
    }

    /// Makes the eventfd readable or not; called with `raised` locked.
    fn set_ready(&self, ready: bool) {
        let fd = self.raised_ready.as_raw_fd();
        let mut count = 1u64;
        // SAFETY: an 8-byte buffer, as an eventfd reads and writes. A
        // non-blocking eventfd: the read of an unset one fails with EAGAIN,
        // which leaves it unset, as wanted; a write cannot overflow (at
        // most one per raised event).
        unsafe {
            let buf = std::ptr::addr_of_mut!(count).cast();
            if ready {
                libc::write(fd, buf, 8);
            } else {
                libc::read(fd, buf, 8);
            }
        }
    }

    /// One record from the kernel's descriptor, without waiting.
    fn read_kernel(&self) -> Result<AsyncRecord, c_int> {
        let mut desc = [0u8; 16];
        // SAFETY: a 16-byte buffer for a 16-byte record.
        let n = unsafe { libc::read(self.kernel, desc.as_mut_ptr().cast(), desc.len()) };
        match n {
            16 => Ok(AsyncRecord {
                element: u64::from_ne_bytes(desc[..8].try_into().unwrap_or_default()),
                event_type: u32::from_ne_bytes(desc[8..12].try_into().unwrap_or_default()),
            }),
            n if n < 0 => Err(io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)),
            _ => Err(libc::EIO), // the kernel writes whole records
        }
    }

    fn nonblocking(&self) -> bool {
        // SAFETY: F_GETFL on a descriptor we own.
        let fl = unsafe { libc::fcntl(self.epoll.as_raw_fd(), libc::F_GETFL) };
        fl >= 0 && fl & libc::O_NONBLOCK != 0
    }

    /// Waits until either descriptor is readable. A signal only makes it
    /// look again: a read of the kernel's descriptor is restarted after a
    /// stop and continue, where epoll_wait is not.
    fn wait(&self) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: room for one event.
        unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), &mut ev, 1, -1) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A merged descriptor over a socketpair standing in for the kernel's
    /// (one record per read, as the kernel's): (merged, the writing end).
    fn rig() -> (MergedAsync, OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two new descriptors into `fds`.
        assert_eq!(0, unsafe {
            libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, fds.as_mut_ptr())
        });
        // SAFETY: just created, owned here.
        let (kernel, writer) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        (
            MergedAsync::new(kernel.as_raw_fd()).unwrap(),
            kernel,
            writer,
        )
    }

    fn kernel_event(writer: &OwnedFd, r: AsyncRecord) {
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
        assert_eq!(m.next(), Err(libc::EAGAIN));
        let kernel = AsyncRecord {
            element: 0x10,
            event_type: COMM_EST,
        };
        let raised = AsyncRecord {
            element: 0x20,
            event_type: FATAL,
        };
        kernel_event(&w, kernel);
        assert!(readable(m.fd()));
        m.raise(raised);
        assert_eq!(m.next(), Ok(raised));
        assert!(readable(m.fd()), "the kernel's event still waits");
        assert_eq!(m.next(), Ok(kernel));
        assert!(!readable(m.fd()));
        assert_eq!(m.next(), Err(libc::EAGAIN));
    }

    #[test]
    fn a_blocked_reader_wakes_for_a_raised_event() {
        let (m, _k, _w) = rig();
        let raised = AsyncRecord {
            element: 0x20,
            event_type: FATAL,
        };
        std::thread::scope(|s| {
            let reader = s.spawn(|| m.next());
            m.raise(raised);
            assert_eq!(reader.join().unwrap(), Ok(raised));
        });
    }

    #[test]
    fn a_destroy_drops_waiting_events_and_counts_those_handed_out() {
        let (m, _k, _w) = rig();
        set_nonblocking(m.fd());
        let qp = |element| AsyncRecord {
            element,
            event_type: FATAL,
        };
        m.raise(qp(0x20));
        m.raise(qp(0x20));
        m.raise(qp(0x30));
        assert_eq!(m.next(), Ok(qp(0x20)));
        assert_eq!(m.forget(0x20), 1, "one handed out, one dropped");
        assert_eq!(m.next(), Ok(qp(0x30)));
        assert_eq!(m.forget(0x30), 1);
        assert!(!readable(m.fd()));
        m.remember(0x30, 1);
        assert_eq!(m.forget(0x30), 1, "a failed destroy counts them again");
    }
}
