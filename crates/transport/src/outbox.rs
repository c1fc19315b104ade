//! The send batch, and a step's last send made after the driver is
//! unlocked.
//!
//! A `sendto` wakes the peer's progress thread, and the kernel runs the
//! woken thread on the sender's CPU, where it preempts the sender. A
//! thread preempted while it held the driver kept every other thread of
//! its context from it until it ran again: behind an application spinning
//! on memory, at the next scheduler tick, as the other CPU pulled it only
//! once its cache-hot time had passed. In wire `ib_write_lat`, where each
//! side spins on memory for the peer's WRITE, which its progress thread
//! must take in, that bound about one run of 5,000 iterations in two to
//! the tick (docs/perf-profile.md). So the progress thread, and a verb
//! while the application answers WRITEs, hands the batch its step filled
//! over, unlocks the driver, and sends it: preempted then, it holds
//! nothing another thread needs.
//!
//! The batch lives here, behind a lock of its own. A step opens it (under
//! the driver lock) to write its packets, and either sends them and
//! closes it, or hands it, still open, to its caller ([`Open::send`]).
//! Order is kept: the next step to open it waits until the handed batch
//! has left, so no packet overtakes one written before it. What found no
//! room in the socket stays in the batch, which is then
//! [`Outbox::blocked`], and the socket's writability is awaited as for
//! any blocked batch.

use crate::send_batch::{SendBatch, Sent};
use parking_lot::{Mutex, MutexGuard};
use socket2::SockRef;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};

/// The send batch and the socket it leaves by.
#[derive(Debug)]
pub(crate) struct Outbox {
    parcel: Mutex<Parcel>,
    /// The batch waits for room in the socket (set as it is closed).
    blocked: AtomicBool,
}

#[derive(Debug)]
struct Parcel {
    batch: SendBatch,
    /// The driver's sending socket (a duplicate descriptor of it, so that
    /// a handed batch's send needs nothing the driver lock guards).
    socket: UdpSocket,
    /// What left since the counts were last taken.
    sent: Sent,
}

/// The batch, open for writing or handed over for sending; closing it
/// (the drop) publishes whether it waits for room.
#[must_use = "an open batch holds the outbox until it is closed"]
pub(crate) struct Open<'o> {
    parcel: MutexGuard<'o, Parcel>,
    blocked: &'o AtomicBool,
}

impl Outbox {
    /// An outbox sending from `socket` (the driver's, duplicated).
    pub(crate) fn new(socket: UdpSocket) -> Outbox {
        Outbox {
            parcel: Mutex::new(Parcel {
                batch: SendBatch::new(),
                socket,
                sent: Sent::default(),
            }),
            blocked: AtomicBool::new(false),
        }
    }

    /// Whether the batch waits for room in the socket.
    pub(crate) fn blocked(&self) -> bool {
        self.blocked.load(Ordering::Acquire)
    }

    /// Opens the batch, once a batch handed over has left.
    pub(crate) fn open(&self) -> Open<'_> {
        Open {
            parcel: self.parcel.lock(),
            blocked: &self.blocked,
        }
    }

    /// The counts of what left since they were last taken.
    pub(crate) fn take_counts(&self) -> Sent {
        self.open().take_counts()
    }
}

impl Open<'_> {
    /// The batch, and the socket to send it by.
    pub(crate) fn batch(&mut self) -> (&mut SendBatch, SockRef<'_>) {
        let parcel = &mut *self.parcel;
        (&mut parcel.batch, SockRef::from(&parcel.socket))
    }

    /// The counts of what left since they were last taken.
    pub(crate) fn take_counts(&mut self) -> Sent {
        std::mem::take(&mut self.parcel.sent)
    }

    /// Sends what the batch holds (counted for the next
    /// [`Open::take_counts`]) and closes it; whether it found no room in
    /// the socket.
    pub(crate) fn send(mut self) -> bool {
        let parcel = &mut *self.parcel;
        let sent = parcel.batch.flush(&SockRef::from(&parcel.socket));
        parcel.sent.add(sent);
        let blocked = parcel.batch.blocked();
        parcel.sent.waits += u64::from(blocked);
        blocked
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.blocked
            .store(self.parcel.batch.blocked(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send_batch::push;
    use std::net::SocketAddr;

    fn sockets() -> (UdpSocket, UdpSocket, SocketAddr, SocketAddr) {
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (from, to) = (tx.local_addr().unwrap(), rx.local_addr().unwrap());
        (tx, rx, from, to)
    }

    /// A packet of 100 bytes filled with `fill`, for QP block 1.
    fn packet(fill: u8) -> Vec<u8> {
        let mut p = vec![fill; 100];
        p[5..8].copy_from_slice(&[0x00, 0x10, 0x00]);
        p
    }

    /// Writes `packet(fill)` into the open batch.
    fn write(open: &mut Open<'_>, from: SocketAddr, to: SocketAddr, fill: u8) {
        let (batch, socket) = open.batch();
        push(batch, &socket, &packet(fill), from, to);
    }

    /// The fill of the next datagram `rx` receives.
    fn fill_received(rx: &UdpSocket) -> u8 {
        let mut buf = [0u8; 2048];
        let (len, _) = rx.recv_from(&mut buf).unwrap();
        assert_eq!(len, 100);
        buf[50]
    }

    /// Packets written into the open batch leave when it is sent, not
    /// before, and are counted for the next opening.
    #[test]
    fn an_open_batch_leaves_when_sent_and_is_counted_at_the_next_opening() {
        let (tx, rx, from, to) = sockets();
        let outbox = Outbox::new(tx);
        let mut open = outbox.open();
        write(&mut open, from, to, 7);
        write(&mut open, from, to, 7);
        rx.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 2048];
        assert!(
            rx.recv_from(&mut buf).is_err(),
            "nothing left before the send"
        );
        rx.set_nonblocking(false).unwrap();
        assert!(!open.send());
        assert_eq!([fill_received(&rx), fill_received(&rx)], [7, 7]);
        assert!(!outbox.blocked());
        assert_eq!(outbox.take_counts().packets, 2);
        assert_eq!(outbox.take_counts(), Sent::default());
    }

    /// A step that opens the batch while one handed over is being sent
    /// on another thread waits for it: the handed packets arrive first.
    #[test]
    fn an_opening_waits_for_the_handed_batch_to_leave() {
        let (tx, rx, from, to) = sockets();
        let outbox = Outbox::new(tx);
        let mut handed = outbox.open();
        write(&mut handed, from, to, 1);
        std::thread::scope(|s| {
            let next = s.spawn(|| {
                let mut open = outbox.open();
                let sent = open.take_counts();
                write(&mut open, from, to, 2);
                assert!(!open.send());
                sent
            });
            assert!(!handed.send());
            assert_eq!(next.join().unwrap().packets, 1);
        });
        assert_eq!([fill_received(&rx), fill_received(&rx)], [1, 2]);
    }
}
