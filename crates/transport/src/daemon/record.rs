//! One control record on a `SOCK_SEQPACKET` socket, with at most one file
//! descriptor attached (SCM_RIGHTS): how a context hands the daemon its
//! data socket and the daemon hands a context its steered socket.

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Sends `bytes` as one record, with `fd` attached if given.
pub fn send(socket: impl AsFd, bytes: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    let fds = fd.map(|f| [f]);
    if let Some(fds) = &fds {
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
/// and the descriptor it carried, if any (any more are closed).
pub fn recv(socket: impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let msg = recvmsg(
        socket,
        &mut [IoSliceMut::new(buf)],
        &mut ancillary,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let fd = ancillary
        .drain()
        .filter_map(|m| match m {
            RecvAncillaryMessage::ScmRights(fds) => Some(fds),
            _ => None,
        })
        .flatten()
        .next();
    Ok((msg.bytes, fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};

    #[test]
    fn a_record_carries_its_descriptor_or_none() {
        let (a, b) = socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let passed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        send(&a, b"one", Some(passed.as_fd())).unwrap();
        send(&a, b"two", None).unwrap();
        let mut buf = [0u8; 8];
        let (n, fd) = recv(&b, &mut buf).unwrap();
        let got = std::net::UdpSocket::from(fd.expect("a descriptor"));
        assert_eq!(
            (&buf[..n], got.local_addr().unwrap()),
            (&b"one"[..], passed.local_addr().unwrap())
        );
        let (n, fd) = recv(&b, &mut buf).unwrap();
        assert_eq!((&buf[..n], fd.is_none()), (&b"two"[..], true));
        drop(a);
        assert_eq!(recv(&b, &mut buf).unwrap().0, 0, "hang-up");
    }
}
