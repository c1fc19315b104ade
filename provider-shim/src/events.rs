//! Event delivery to file descriptors, the way the kernel does it: async
//! events become 16-byte `ib_uverbs_async_event_desc` records on the
//! context's `async_fd`, completion events 8-byte
//! `ib_uverbs_comp_event_desc` records on a completion channel's fd.
//! libibverbs' `ibv_get_async_event` and `ibv_get_cq_event` read them.
//!
//! The descriptors are socketpairs (SOCK_SEQPACKET: one record per read):
//! writes never block (a reader that never reads loses events rather than
//! stalling the provider) and never raise SIGPIPE.

use parking_lot::Mutex;
use softverbs_engine::{AsyncEvent, CqId, QpId, SrqId};
use softverbs_transport::Notify;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A record channel: the application reads `reader`, softverbs writes `writer`.
#[derive(Debug)]
pub struct EventPipe {
    /// Handed to the application (blocking, as a kernel fd is).
    pub reader: Option<OwnedFd>,
    /// Kept by softverbs (non-blocking).
    pub writer: OwnedFd,
}

impl EventPipe {
    /// A new channel.
    pub fn new() -> io::Result<EventPipe> {
        let mut fds = [0; 2];
        let flags = libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC;
        // SAFETY: socketpair writes two descriptors into `fds` on success.
        if unsafe { libc::socketpair(libc::AF_UNIX, flags, 0, fds.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned here.
        let (reader, writer) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: F_SETFL on a descriptor we own.
        unsafe { libc::fcntl(writer.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        Ok(EventPipe {
            reader: Some(reader),
            writer,
        })
    }
}

/// Sends one record; a full or closed channel drops it.
fn send_record(fd: RawFd, record: &[u8]) {
    // SAFETY: `record` is a valid buffer of its length; MSG_NOSIGNAL keeps
    // a closed peer from raising SIGPIPE, MSG_DONTWAIT from blocking.
    unsafe {
        libc::send(
            fd,
            record.as_ptr().cast(),
            record.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        );
    }
}

/// Where the events of one context go, and the C objects they name.
#[derive(Debug)]
pub struct EventSink {
    async_writer: OwnedFd,
    objects: Mutex<Objects>,
}

#[derive(Debug, Default)]
struct Objects {
    /// CQ -> (its `ibv_cq *`, the write end of its completion channel).
    cqs: HashMap<CqId, (usize, Option<RawFd>)>,
    qps: HashMap<QpId, usize>,
    srqs: HashMap<SrqId, usize>,
}

impl EventSink {
    /// A sink writing async events to `async_writer`.
    pub fn new(async_writer: OwnedFd) -> EventSink {
        EventSink {
            async_writer,
            objects: Mutex::new(Objects::default()),
        }
    }

    /// Records a CQ's C object and completion channel.
    pub fn add_cq(&self, cq: CqId, ptr: usize, channel: Option<RawFd>) {
        self.objects.lock().cqs.insert(cq, (ptr, channel));
    }

    /// Records a QP's C object.
    pub fn add_qp(&self, qp: QpId, ptr: usize) {
        self.objects.lock().qps.insert(qp, ptr);
    }

    /// Records an SRQ's C object.
    pub fn add_srq(&self, srq: SrqId, ptr: usize) {
        self.objects.lock().srqs.insert(srq, ptr);
    }

    /// Forgets a destroyed CQ.
    pub fn remove_cq(&self, cq: CqId) {
        self.objects.lock().cqs.remove(&cq);
    }

    /// Forgets a destroyed QP.
    pub fn remove_qp(&self, qp: QpId) {
        self.objects.lock().qps.remove(&qp);
    }

    /// Forgets a destroyed SRQ.
    pub fn remove_srq(&self, srq: SrqId) {
        self.objects.lock().srqs.remove(&srq);
    }

    fn element(&self, event: AsyncEvent) -> Option<u64> {
        let o = self.objects.lock();
        let ptr = match event {
            AsyncEvent::CqErr(cq) => o.cqs.get(&cq).map(|c| c.0),
            AsyncEvent::SrqLimitReached(srq) => o.srqs.get(&srq).copied(),
            AsyncEvent::QpFatal(qp)
            | AsyncEvent::QpReqErr(qp)
            | AsyncEvent::QpAccessErr(qp)
            | AsyncEvent::CommEst(qp)
            | AsyncEvent::SqDrained(qp)
            | AsyncEvent::QpLastWqeReached(qp) => o.qps.get(&qp).copied(),
        };
        ptr.map(|p| p as u64)
    }
}

impl Notify for EventSink {
    fn completion_event(&self, cq: CqId) {
        let target = self.objects.lock().cqs.get(&cq).copied();
        if let Some((ptr, Some(fd))) = target {
            send_record(fd, &(ptr as u64).to_ne_bytes());
        }
    }

    fn async_event(&self, event: AsyncEvent) {
        let Some(element) = self.element(event) else {
            return;
        };
        let mut record = [0u8; 16];
        record[..8].copy_from_slice(&element.to_ne_bytes());
        record[8..12].copy_from_slice(&event.event_type().to_ne_bytes());
        send_record(self.async_writer.as_raw_fd(), &record);
    }
}

#[cfg(test)]
mod tests {
    use crate::ffi::*;
    use softverbs_engine::{AsyncEvent, CqId, QpId, SrqId};

    /// The engine's event numbers are verbs.h's (the ffi constants are
    /// checked against the header by tests/layout.rs).
    #[test]
    fn engine_event_numbers_match_verbs_h() {
        let (qp, cq, srq) = (QpId::default(), CqId::default(), SrqId::default());
        let pairs = [
            (AsyncEvent::CqErr(cq), IBV_EVENT_CQ_ERR),
            (AsyncEvent::QpFatal(qp), IBV_EVENT_QP_FATAL),
            (AsyncEvent::QpReqErr(qp), IBV_EVENT_QP_REQ_ERR),
            (AsyncEvent::QpAccessErr(qp), IBV_EVENT_QP_ACCESS_ERR),
            (AsyncEvent::CommEst(qp), IBV_EVENT_COMM_EST),
            (AsyncEvent::SqDrained(qp), IBV_EVENT_SQ_DRAINED),
            (
                AsyncEvent::QpLastWqeReached(qp),
                IBV_EVENT_QP_LAST_WQE_REACHED,
            ),
            (
                AsyncEvent::SrqLimitReached(srq),
                IBV_EVENT_SRQ_LIMIT_REACHED,
            ),
        ];
        for (event, c) in pairs {
            assert_eq!(event.event_type(), c, "{event:?}");
        }
    }
}
