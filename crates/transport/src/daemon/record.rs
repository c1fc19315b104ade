//! One control record on a `SOCK_SEQPACKET` socket, with up to
//! [`MAX_FDS`] file descriptors attached (SCM_RIGHTS): how a context hands
//! the daemon its data socket and its same-host region, and the daemon
//! hands a context its steered socket and a peer's region.

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
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
    sendmsg(
        socket,
        &[IoSlice::new(bytes)],
        &mut ancillary,
        SendFlags::NOSIGNAL,
    )?;
    Ok(())
}

/// Receives one record into `buf`: its length (0 when the peer hung up)
/// and the descriptors it carried, in order (beyond [`MAX_FDS`] the
/// kernel closes them).
pub fn recv(socket: impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let msg = recvmsg(
        socket,
        &mut [IoSliceMut::new(buf)],
        &mut ancillary,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let fds = ancillary
        .drain()
        .filter_map(|m| match m {
            RecvAncillaryMessage::ScmRights(fds) => Some(fds),
            _ => None,
        })
        .flatten()
        .collect();
    Ok((msg.bytes, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};

    #[test]
    fn a_record_carries_its_descriptors_or_none() {
        let (a, b) = socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
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
}
