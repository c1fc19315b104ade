//! One control record on a `SOCK_SEQPACKET` socket, with up to
//! [`MAX_FDS`] file descriptors attached (SCM_RIGHTS): how a context hands
//! the daemon its data socket and its same-host region, and the daemon
//! hands a context its steered socket and a peer's region.

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// The most descriptors one record carries (a region and its doorbell).
pub const MAX_FDS: usize = 2;

/// Sends `bytes` as one record, with `fds` (at most [`MAX_FDS`]) attached.
pub fn send(socket: impl AsFd, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        ancillary.push(SendAncillaryMessage::ScmRights(fds));
    }
    // A signal is no reason to fail a request (an rdma_cm command on the
    // kernel is not interrupted); nothing was sent then.
    rustix::io::retry_on_intr(|| {
        sendmsg(
            &socket,
            &[IoSlice::new(bytes)],
            &mut ancillary,
            SendFlags::NOSIGNAL,
        )
    })?;
    Ok(())
}

/// Receives one record into `buf`: its length (0 when the peer hung up)
/// and the descriptors it carried, in order (beyond [`MAX_FDS`] the
/// kernel closes them).
pub fn recv(socket: impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let r = recv_from_user(socket, buf)?;
    Ok((r.len, r.fds))
}

/// A record, with who sent it.
#[derive(Debug)]
pub struct Received {
    pub len: usize,
    pub fds: Vec<OwnedFd>,
    /// The sender's real user ID when it sent the record, as the kernel
    /// attaches it on a socket with `SO_PASSCRED` set; `None` without.
    pub sender_uid: Option<u32>,
    /// Descriptors sent with the record were dropped (`MSG_CTRUNC`): the
    /// receiver had no room for them, most often no descriptor to spare.
    pub fds_lost: bool,
    /// The record was longer than the buffer, and cut (`MSG_TRUNC`).
    pub truncated: bool,
}

/// [`recv`], with the sender's user ID as the kernel saw it when the
/// record was sent: unlike `SO_PEERCRED`, which keeps who connected, this
/// follows a process that changed its user ID since.
pub fn recv_from_user(socket: impl AsFd, buf: &mut [u8]) -> io::Result<Received> {
    let mut space =
        [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS), ScmCredentials(1))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    // Interrupted, nothing was received: wait on (as in `send`).
    let msg = rustix::io::retry_on_intr(|| {
        recvmsg(
            &socket,
            &mut [IoSliceMut::new(buf)],
            &mut ancillary,
            RecvFlags::CMSG_CLOEXEC,
        )
    })?;
    let mut fds = Vec::new();
    let mut sender_uid = None;
    for m in ancillary.drain() {
        match m {
            RecvAncillaryMessage::ScmRights(passed) => fds.extend(passed),
            RecvAncillaryMessage::ScmCredentials(cred) => sender_uid = Some(cred.uid.as_raw()),
            _ => {}
        }
    }
    Ok(Received {
        len: msg.bytes,
        fds,
        sender_uid,
        fds_lost: msg.flags.contains(ReturnFlags::CTRUNC),
        truncated: msg.flags.contains(ReturnFlags::TRUNC),
    })
}

/// Sends `bytes` as one record with sixteen descriptors attached (copies
/// of one socket's), more than any receiver here has room for, its room
/// for credentials included: the receiver finds them dropped
/// (`MSG_CTRUNC`), as a process out of descriptors would.
#[cfg(test)]
pub(crate) fn send_with_too_many_fds(socket: impl AsFd, bytes: &[u8]) {
    use rustix::net::{sendmsg, socketpair, AddressFamily, SocketFlags, SocketType};
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage};
    let (passed, _other) = socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    let fds = [passed.as_fd(); 16];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(16))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    assert!(ancillary.push(SendAncillaryMessage::ScmRights(&fds)));
    let sent = sendmsg(
        &socket,
        &[io::IoSlice::new(bytes)],
        &mut ancillary,
        SendFlags::NOSIGNAL,
    );
    assert_eq!(sent.unwrap(), bytes.len());
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};

    fn seqpacket_pair() -> (OwnedFd, OwnedFd) {
        socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap()
    }

    #[test]
    fn a_record_carries_its_descriptors_or_none() {
        let (a, b) = seqpacket_pair();
        let passed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let second = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        send(&a, b"one", &[passed.as_fd()]).unwrap();
        send(&a, b"two", &[]).unwrap();
        send(&a, b"three", &[passed.as_fd(), second.as_fd()]).unwrap();
        let mut buf = [0u8; 8];
        let local_addrs = |fds: Vec<OwnedFd>| -> Vec<_> {
            fds.into_iter()
                .map(|fd| std::net::UdpSocket::from(fd).local_addr().unwrap())
                .collect()
        };
        let (n, fds) = recv(&b, &mut buf).unwrap();
        assert_eq!(
            (&buf[..n], local_addrs(fds)),
            (&b"one"[..], vec![passed.local_addr().unwrap()])
        );
        let (n, fds) = recv(&b, &mut buf).unwrap();
        assert_eq!((&buf[..n], fds.is_empty()), (&b"two"[..], true));
        let (n, fds) = recv(&b, &mut buf).unwrap();
        assert_eq!(
            (&buf[..n], local_addrs(fds)),
            (
                &b"three"[..],
                vec![passed.local_addr().unwrap(), second.local_addr().unwrap()]
            )
        );
        let three = [passed.as_fd(), second.as_fd(), a.as_fd()];
        assert!(send(&a, b"four", &three).is_err(), "more than MAX_FDS");
        drop(a);
        assert_eq!(recv(&b, &mut buf).unwrap().0, 0, "hang-up");
    }

    #[test]
    fn a_record_says_who_sent_it_where_the_receiver_asks() {
        let (a, b) = seqpacket_pair();
        let mut buf = [0u8; 8];
        send(&a, b"anon", &[]).unwrap();
        assert_eq!(recv_from_user(&b, &mut buf).unwrap().sender_uid, None);
        rustix::net::sockopt::set_socket_passcred(&b, true).unwrap();
        send(&a, b"me", &[]).unwrap();
        let me = rustix::process::getuid().as_raw();
        assert_eq!(recv_from_user(&b, &mut buf).unwrap().sender_uid, Some(me));
    }
}
