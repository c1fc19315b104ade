//! Event delivery to file descriptors, the way the kernel does it: async
//! events become 16-byte `ib_uverbs_async_event_desc` records on the
//! context's `async_fd`, completion events 8-byte
//! `ib_uverbs_comp_event_desc` records on a completion channel's fd.
//! libibverbs' `ibv_get_async_event` and `ibv_get_cq_event` read them.
//!
//! The descriptors are socketpairs (SOCK_SEQPACKET: one record per read):
//! writes never block (a reader that never reads loses events rather than
//! stalling the provider) and never raise SIGPIPE.
//!
//! When the device fails ([`Notify::device_fatal`]) an
//! IBV_EVENT_DEVICE_FATAL record goes to the async descriptor and then
//! every write end is shut down: each thread blocked in
//! `ibv_get_async_event` or `ibv_get_cq_event` wakes (the first async
//! reader with the event, the others with end of file, which libibverbs
//! reports as -1) instead of waiting for events that will never come.

use crate::event_acks::{Acks, Delivered};
use parking_lot::Mutex;
use softverbs_engine::{AsyncEvent, CqId, QpId, SrqId};
use softverbs_transport::Notify;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

/// Completion channels: the fd the application reads -> the write end.
/// (Keyed by fd because in plugin mode libibverbs allocates the
/// `ibv_comp_channel` and only tells us the fd.)
pub type Channels = Arc<Mutex<HashMap<RawFd, OwnedFd>>>;

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

/// Takes every record waiting at `reader` and puts back, through
/// `writer`, those that do not name `element` (their first 8 bytes). A
/// thread of the application reading meanwhile gets records either way.
fn purge(reader: RawFd, writer: RawFd, element: u64) {
    let mut keep = Vec::new();
    let mut buf = [0u8; 16];
    loop {
        // SAFETY: recv into a local buffer of its length; MSG_DONTWAIT
        // keeps it from blocking on an empty channel. The descriptor is
        // the application's read end, open while the object is.
        let n = unsafe {
            libc::recv(
                reader,
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        let Ok(n) = usize::try_from(n) else {
            break;
        };
        if n == 0 {
            break;
        }
        let record = &buf[..n];
        if record.get(..8) != Some(&element.to_ne_bytes()[..]) {
            keep.push(record.to_vec());
        }
    }
    for record in keep {
        send_record(writer, &record);
    }
}

/// No more records: readers get end of file once they read what is queued.
fn shut_down(fd: RawFd) {
    // SAFETY: shutdown on a descriptor we own; no memory is involved.
    unsafe { libc::shutdown(fd, libc::SHUT_WR) };
}

/// The element of a device event: the port (softverbs has one).
const DEVICE_EVENT_PORT: u64 = 1;

/// Where the events of one context go, and the C objects they name.
#[derive(Debug)]
pub struct EventSink {
    async_writer: OwnedFd,
    /// The read end of the async descriptor (the context's `async_fd`), to
    /// take back the events of a destroyed object.
    async_reader: RawFd,
    channels: Channels,
    objects: Mutex<Objects>,
    /// The events handed to the application, per object.
    pub acks: Acks,
}

#[derive(Debug, Default)]
struct Objects {
    /// CQ -> (its `ibv_cq *`, the write end of its completion channel).
    cqs: HashMap<CqId, (usize, Option<RawFd>)>,
    qps: HashMap<QpId, usize>,
    srqs: HashMap<SrqId, usize>,
}

impl EventSink {
    /// A sink writing async events to `async_writer` (whose read end is
    /// `async_reader`) and completion events to the write ends in
    /// `channels`.
    pub fn new(async_writer: OwnedFd, async_reader: RawFd, channels: Channels) -> EventSink {
        EventSink {
            async_writer,
            async_reader,
            channels,
            objects: Mutex::new(Objects::default()),
            acks: Acks::default(),
        }
    }

    /// Records a CQ's C object and completion channel.
    pub fn add_cq(&self, cq: CqId, ptr: usize, channel: Option<RawFd>) {
        self.acks.add(ptr);
        self.objects.lock().cqs.insert(cq, (ptr, channel));
    }

    /// Records a QP's C object.
    pub fn add_qp(&self, qp: QpId, ptr: usize) {
        self.acks.add(ptr);
        self.objects.lock().qps.insert(qp, ptr);
    }

    /// Records an SRQ's C object.
    pub fn add_srq(&self, srq: SrqId, ptr: usize) {
        self.acks.add(ptr);
        self.objects.lock().srqs.insert(srq, ptr);
    }

    /// Forgets a destroyed CQ and takes back its unread events; the
    /// events the application took for it.
    pub fn remove_cq(&self, cq: CqId) -> Delivered {
        let Some((ptr, channel)) = self.objects.lock().cqs.remove(&cq) else {
            return Delivered::default();
        };
        if let Some(writer) = channel {
            let channels = self.channels.lock();
            let reader = channels.iter().find(|(_, w)| w.as_raw_fd() == writer);
            if let Some((&reader, _)) = reader {
                purge(reader, writer, ptr as u64);
            }
        }
        self.forget(ptr)
    }

    /// Forgets a destroyed QP; the events the application took for it.
    pub fn remove_qp(&self, qp: QpId) -> Delivered {
        let ptr = self.objects.lock().qps.remove(&qp);
        ptr.map_or_else(Delivered::default, |p| self.forget(p))
    }

    /// Forgets a destroyed SRQ; the events the application took for it.
    pub fn remove_srq(&self, srq: SrqId) -> Delivered {
        let ptr = self.objects.lock().srqs.remove(&srq);
        ptr.map_or_else(Delivered::default, |p| self.forget(p))
    }

    /// Takes back the unread async events of a destroyed object, as the
    /// kernel drops them at destroy (libibverbs would otherwise hand the
    /// freed object to whoever reads them), and stops counting its
    /// events.
    fn forget(&self, ptr: usize) -> Delivered {
        purge(self.async_reader, self.async_writer.as_raw_fd(), ptr as u64);
        self.acks.remove(ptr)
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
        self.send_async(element, event.event_type());
    }

    fn device_fatal(&self) {
        self.send_async(DEVICE_EVENT_PORT, crate::ffi::IBV_EVENT_DEVICE_FATAL);
        shut_down(self.async_writer.as_raw_fd());
        for writer in self.channels.lock().values() {
            shut_down(writer.as_raw_fd());
        }
    }

    fn progress_thread_started(&self) {
        // Without it, latency is bound to the scheduler's slice when the
        // application spins on every CPU; nothing else depends on it.
        let _ = crate::thread_slice::ask_for_short_slice();
    }
}

impl EventSink {
    /// One `ib_uverbs_async_event_desc` record.
    fn send_async(&self, element: u64, event_type: u32) {
        let mut record = [0u8; 16];
        record[..8].copy_from_slice(&element.to_ne_bytes());
        record[8..12].copy_from_slice(&event_type.to_ne_bytes());
        send_record(self.async_writer.as_raw_fd(), &record);
    }
}

#[cfg(test)]
mod tests {
    use super::{EventPipe, EventSink};
    use crate::ffi::*;
    use softverbs_engine::{AsyncEvent, CqId, QpId, SrqId};
    use softverbs_transport::Notify;
    use std::os::fd::{AsRawFd, OwnedFd, RawFd};

    /// One read as libibverbs does it: the byte count (0 at end of file).
    fn read_record(fd: RawFd, buf: &mut [u8]) -> isize {
        // SAFETY: `buf` is writable for its length.
        unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) }
    }

    /// A device failure wakes a thread blocked on a completion channel and
    /// readers of the async descriptor: the first gets DEVICE_FATAL, the
    /// rest end of file.
    #[test]
    fn device_fatal_wakes_every_event_reader() {
        let async_pipe = EventPipe::new().unwrap();
        let channel = EventPipe::new().unwrap();
        let async_reader: OwnedFd = async_pipe.reader.unwrap();
        let channel_reader: OwnedFd = channel.reader.unwrap();
        let channels = super::Channels::default();
        channels
            .lock()
            .insert(channel_reader.as_raw_fd(), channel.writer);
        let sink = EventSink::new(async_pipe.writer, async_reader.as_raw_fd(), channels);
        let fd = channel_reader.as_raw_fd();
        let blocked = std::thread::spawn(move || read_record(fd, &mut [0u8; 8]));

        sink.device_fatal();
        assert_eq!(blocked.join().unwrap(), 0, "end of file on the channel");
        let mut record = [0u8; 16];
        assert_eq!(read_record(async_reader.as_raw_fd(), &mut record), 16);
        let kind = u32::from_ne_bytes(record[8..12].try_into().unwrap());
        assert_eq!(kind, IBV_EVENT_DEVICE_FATAL);
        assert_eq!(read_record(async_reader.as_raw_fd(), &mut record), 0);
        drop(channel_reader);
    }

    /// Destroying a CQ or QP takes back its events nobody read yet (the
    /// kernel drops them), keeping the others' in order.
    #[test]
    fn a_destroyed_objects_unread_events_are_taken_back() {
        let async_pipe = EventPipe::new().unwrap();
        let channel = EventPipe::new().unwrap();
        let async_reader: OwnedFd = async_pipe.reader.unwrap();
        let channel_reader: OwnedFd = channel.reader.unwrap();
        let writer = channel.writer.as_raw_fd();
        let channels = super::Channels::default();
        channels
            .lock()
            .insert(channel_reader.as_raw_fd(), channel.writer);
        let sink = EventSink::new(async_pipe.writer, async_reader.as_raw_fd(), channels);
        let mut ids: slotmap::SlotMap<CqId, ()> = slotmap::SlotMap::with_key();
        let (gone, kept) = (ids.insert(()), ids.insert(()));
        let mut qps: slotmap::SlotMap<QpId, ()> = slotmap::SlotMap::with_key();
        let qp = qps.insert(());
        sink.add_cq(gone, 0x1000, Some(writer));
        sink.add_cq(kept, 0x2000, Some(writer));
        sink.add_qp(qp, 0x3000);
        for cq in [gone, kept, gone] {
            sink.completion_event(cq);
        }
        sink.async_event(AsyncEvent::CqErr(gone));
        sink.async_event(AsyncEvent::QpFatal(qp));
        sink.remove_cq(gone);
        let mut record = [0u8; 16];
        let fd = channel_reader.as_raw_fd();
        assert_eq!(read_record(fd, &mut record), 8);
        assert_eq!(u64::from_ne_bytes(record[..8].try_into().unwrap()), 0x2000);
        let mut pending = [0u8; 8];
        // SAFETY: a non-blocking read into a local buffer of its length.
        let n = unsafe { libc::recv(fd, pending.as_mut_ptr().cast(), 8, libc::MSG_DONTWAIT) };
        assert_eq!(n, -1, "nothing else queued");
        sink.remove_qp(qp);
        // SAFETY: as above.
        let n = unsafe {
            libc::recv(
                async_reader.as_raw_fd(),
                record.as_mut_ptr().cast(),
                16,
                libc::MSG_DONTWAIT,
            )
        };
        assert_eq!(n, -1, "both async events named destroyed objects");
    }

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
