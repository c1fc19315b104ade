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
use softverbs_transport::driver::ExecLock;
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

/// Sends one record; a full or closed channel drops it. Whether it went.
fn send_record(fd: RawFd, record: &[u8]) -> bool {
    // SAFETY: `record` is a valid buffer of its length; MSG_NOSIGNAL keeps
    // a closed peer from raising SIGPIPE, MSG_DONTWAIT from blocking.
    let n = unsafe {
        libc::send(
            fd,
            record.as_ptr().cast(),
            record.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    usize::try_from(n) == Ok(record.len())
}

/// Takes every record waiting at `reader` and puts back, through
/// `writer`, those that do not name `element` (their first 8 bytes); how
/// many it took. A thread of the application reading meanwhile gets
/// records either way (and one naming `element` then counts as read).
fn purge(reader: RawFd, writer: RawFd, element: u64) -> u32 {
    let mut taken = 0;
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
        if record.get(..8) == Some(&element.to_ne_bytes()[..]) {
            taken += 1;
        } else {
            keep.push(record.to_vec());
        }
    }
    for record in keep {
        send_record(writer, &record);
    }
    taken
}

/// No more records: readers get end of file once they read what is queued.
fn shut_down(fd: RawFd) {
    // SAFETY: shutdown on a descriptor we own; no memory is involved.
    unsafe { libc::shutdown(fd, libc::SHUT_WR) };
}

/// The element of a device event: the port (softverbs has one).
const DEVICE_EVENT_PORT: u64 = 1;

/// Where the events of one context go, and the C objects they name.
///
/// An event counts as reported to the application once its record has
/// left the descriptor, as the kernel counts it when `read` dequeues it:
/// the records sent for an object, less those its destroy takes back
/// unread. (Counting later, when libibverbs calls the provider's
/// `async_event` op after its read, left a window in which a destroy on
/// another thread waited for nothing and freed the QP under a reader
/// about to dereference it: UCX's async thread, preempted there.)
#[derive(Debug)]
pub struct EventSink {
    async_writer: OwnedFd,
    /// The read end of the async descriptor (the context's `async_fd`), to
    /// take back the events of a destroyed object.
    async_reader: RawFd,
    channels: Channels,
    /// Held while a record is sent and counted, and while an object is
    /// removed and its records taken back: no record naming an object
    /// is sent after its destroy took its records back.
    objects: Mutex<Objects>,
}

#[derive(Debug, Default)]
struct Objects {
    /// CQ -> (its `ibv_cq *`, the write end of its completion channel).
    cqs: HashMap<CqId, (usize, Option<RawFd>)>,
    qps: HashMap<QpId, usize>,
    srqs: HashMap<SrqId, usize>,
    /// The records sent per live object (by its C object's address).
    sent: Acks,
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
        }
    }

    /// Records a CQ's C object and completion channel.
    pub fn add_cq(&self, cq: CqId, ptr: usize, channel: Option<RawFd>) {
        let mut o = self.objects.lock();
        o.sent.add(ptr);
        o.cqs.insert(cq, (ptr, channel));
    }

    /// Records a QP's C object.
    pub fn add_qp(&self, qp: QpId, ptr: usize) {
        let mut o = self.objects.lock();
        o.sent.add(ptr);
        o.qps.insert(qp, ptr);
    }

    /// Records an SRQ's C object.
    pub fn add_srq(&self, srq: SrqId, ptr: usize) {
        let mut o = self.objects.lock();
        o.sent.add(ptr);
        o.srqs.insert(srq, ptr);
    }

    /// Forgets a destroyed CQ and takes back its unread events; the
    /// events the application read for it.
    pub fn remove_cq(&self, cq: CqId) -> Delivered {
        let mut o = self.objects.lock();
        let Some((ptr, channel)) = o.cqs.remove(&cq) else {
            return Delivered::default();
        };
        let mut unread = Delivered::default();
        if let Some(writer) = channel {
            let channels = self.channels.lock();
            let reader = channels.iter().find(|(_, w)| w.as_raw_fd() == writer);
            if let Some((&reader, _)) = reader {
                unread.comp = purge(reader, writer, ptr as u64);
            }
        }
        self.forget(&mut o, ptr, unread)
    }

    /// Forgets a destroyed QP; the events the application read for it.
    pub fn remove_qp(&self, qp: QpId) -> Delivered {
        let mut o = self.objects.lock();
        let ptr = o.qps.remove(&qp);
        ptr.map_or_else(Delivered::default, |p| {
            self.forget(&mut o, p, Delivered::default())
        })
    }

    /// Forgets a destroyed SRQ; the events the application read for it.
    pub fn remove_srq(&self, srq: SrqId) -> Delivered {
        let mut o = self.objects.lock();
        let ptr = o.srqs.remove(&srq);
        ptr.map_or_else(Delivered::default, |p| {
            self.forget(&mut o, p, Delivered::default())
        })
    }

    /// Takes back the unread async events of a destroyed object, as the
    /// kernel drops them at destroy (libibverbs would otherwise hand the
    /// freed object to whoever reads them), and stops counting its
    /// events; those read (sent, less `unread` and the async records
    /// taken back here).
    fn forget(&self, o: &mut Objects, ptr: usize, mut unread: Delivered) -> Delivered {
        unread.async_events = purge(self.async_reader, self.async_writer.as_raw_fd(), ptr as u64);
        let sent = o.sent.remove(ptr);
        Delivered {
            comp: sent.comp.saturating_sub(unread.comp),
            async_events: sent.async_events.saturating_sub(unread.async_events),
        }
    }

    fn element(o: &Objects, event: AsyncEvent) -> Option<usize> {
        match event {
            AsyncEvent::PortErr(_) | AsyncEvent::PortActive(_) => None,
            AsyncEvent::CqErr(cq) => o.cqs.get(&cq).map(|c| c.0),
            AsyncEvent::SrqLimitReached(srq) => o.srqs.get(&srq).copied(),
            AsyncEvent::QpFatal(qp)
            | AsyncEvent::QpReqErr(qp)
            | AsyncEvent::QpAccessErr(qp)
            | AsyncEvent::CommEst(qp)
            | AsyncEvent::SqDrained(qp)
            | AsyncEvent::QpLastWqeReached(qp) => o.qps.get(&qp).copied(),
        }
    }
}

impl Notify for EventSink {
    fn completion_event(&self, cq: CqId) {
        let mut o = self.objects.lock();
        if let Some(&(ptr, Some(fd))) = o.cqs.get(&cq) {
            if send_record(fd, &(ptr as u64).to_ne_bytes()) {
                o.sent.count(ptr, |d| d.comp += 1);
            }
        }
    }

    fn async_event(&self, event: AsyncEvent) {
        if let Some(port) = event.port() {
            // A port event names no object: no destroy waits for it.
            self.send_async(u64::from(port), event.event_type());
            return;
        }
        let mut o = self.objects.lock();
        let Some(element) = Self::element(&o, event) else {
            return;
        };
        if self.send_async(element as u64, event.event_type()) {
            o.sent.count(element, |d| d.async_events += 1);
        }
    }

    fn device_fatal(&self) {
        let _ = self.send_async(DEVICE_EVENT_PORT, crate::ffi::IBV_EVENT_DEVICE_FATAL);
        shut_down(self.async_writer.as_raw_fd());
        for writer in self.channels.lock().values() {
            shut_down(writer.as_raw_fd());
        }
    }

    fn progress_thread_started(&self, exec_lock: Option<&ExecLock<'_>>) {
        // Without it, latency is bound to the scheduler's slice when the
        // application spins on every CPU; nothing else depends on it.
        let _ = crate::thread_slice::ask_for_short_slice();
        if let Some(lock) = exec_lock {
            crate::exec_lock::hold(lock);
        }
    }

    fn progress_thread_ending(&self, exec_lock: Option<&ExecLock<'_>>) {
        if let Some(lock) = exec_lock {
            crate::exec_lock::give_back(lock);
        }
    }
}

impl EventSink {
    /// One `ib_uverbs_async_event_desc` record; whether it went.
    fn send_async(&self, element: u64, event_type: u32) -> bool {
        let mut record = [0u8; 16];
        record[..8].copy_from_slice(&element.to_ne_bytes());
        record[8..12].copy_from_slice(&event_type.to_ne_bytes());
        send_record(self.async_writer.as_raw_fd(), &record)
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

    /// A read that does not wait: the byte count, -1 if nothing is queued.
    fn try_read_record(fd: RawFd, buf: &mut [u8]) -> isize {
        // SAFETY: `buf` is writable for its length; MSG_DONTWAIT keeps an
        // empty channel from blocking.
        unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) }
    }

    /// A sink with its async descriptor and one completion channel.
    struct Rig {
        sink: EventSink,
        async_reader: OwnedFd,
        channel_reader: OwnedFd,
        /// The channel's write end, as a CQ names it.
        writer: RawFd,
    }

    fn rig() -> Rig {
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
        Rig {
            sink,
            async_reader,
            channel_reader,
            writer,
        }
    }

    /// A device failure wakes a thread blocked on a completion channel and
    /// readers of the async descriptor: the first gets DEVICE_FATAL, the
    /// rest end of file.
    #[test]
    fn device_fatal_wakes_every_event_reader() {
        let Rig {
            sink,
            async_reader,
            channel_reader,
            ..
        } = rig();
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
        let Rig {
            sink,
            async_reader,
            channel_reader,
            writer,
        } = rig();
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
        let n = try_read_record(fd, &mut [0u8; 8]);
        assert_eq!(n, -1, "nothing else queued");
        sink.remove_qp(qp);
        let n = try_read_record(async_reader.as_raw_fd(), &mut record);
        assert_eq!(n, -1, "both async events named destroyed objects");
    }

    /// An event whose record was read counts as reported even if the
    /// reader has not got further (libibverbs calls nothing between its
    /// read and handing the event out): the destroy then waits for its
    /// acknowledgement. Records still unread are taken back, not counted.
    #[test]
    fn an_event_read_before_the_destroy_counts_as_reported() {
        let Rig {
            sink,
            async_reader,
            channel_reader,
            writer,
        } = rig();
        let mut cqs: slotmap::SlotMap<CqId, ()> = slotmap::SlotMap::with_key();
        let cq = cqs.insert(());
        let mut qps: slotmap::SlotMap<QpId, ()> = slotmap::SlotMap::with_key();
        let qp = qps.insert(());
        sink.add_cq(cq, 0x1000, Some(writer));
        sink.add_qp(qp, 0x3000);
        sink.completion_event(cq);
        sink.completion_event(cq);
        sink.async_event(AsyncEvent::QpLastWqeReached(qp));
        sink.async_event(AsyncEvent::QpFatal(qp));
        let mut record = [0u8; 16];
        assert_eq!(read_record(channel_reader.as_raw_fd(), &mut record), 8);
        assert_eq!(read_record(async_reader.as_raw_fd(), &mut record), 16);
        let reported = sink.remove_qp(qp);
        assert_eq!((reported.comp, reported.async_events), (0, 1));
        let reported = sink.remove_cq(cq);
        assert_eq!((reported.comp, reported.async_events), (1, 0));
        sink.completion_event(cq);
        sink.async_event(AsyncEvent::QpFatal(qp));
        let n = try_read_record(async_reader.as_raw_fd(), &mut record);
        assert_eq!(n, -1, "nothing is sent for a destroyed object");
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
