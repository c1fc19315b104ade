//! The control messages of a send, written into a buffer on the stack
//! (nix's `sendmsg` allocates its control buffer on every call, which was
//! one allocation per batch sent): the segment size that has the kernel
//! cut one send into datagrams of one size (`UDP_SEGMENT`, UDP generic
//! segmentation offload), and the traffic class of the IP header (`IP_TOS`
//! or `IPV6_TCLASS`): one socket carries every QP's packets, each with the
//! traffic class of its own address vector.
//!
//! The layout is `cmsg(3)`'s: each message a `struct cmsghdr` whose fields
//! are placed where the libc crate's definition puts them, then its data
//! at `CMSG_DATA`, the whole padded to `CMSG_SPACE`. The kernel copies the
//! control buffer before it reads it, so the buffer's own alignment does
//! not matter.

use std::mem::{offset_of, size_of};

/// `CMSG_ALIGN`: headers and data are aligned to `size_t`.
const fn cmsg_align(len: usize) -> usize {
    (len + size_of::<usize>() - 1) & !(size_of::<usize>() - 1)
}

/// Where a message's data starts (`CMSG_DATA`).
const DATA_AT: usize = cmsg_align(size_of::<libc::cmsghdr>());

/// `CMSG_SPACE(data)`: the room a message of `data` bytes takes.
const fn space(data: usize) -> usize {
    cmsg_align(DATA_AT + data)
}

/// Room for both messages a send may carry.
const CAPACITY: usize = space(size_of::<u16>()) + space(size_of::<libc::c_int>());

/// The control messages of one send.
pub(crate) struct Control {
    buf: [u8; CAPACITY],
    len: usize,
}

impl Control {
    pub(crate) fn new() -> Control {
        Control {
            buf: [0; CAPACITY],
            len: 0,
        }
    }

    /// The kernel cuts the send into `segment`-byte datagrams (the last
    /// may be shorter).
    pub(crate) fn segment(mut self, segment: u16) -> Control {
        self.push(libc::SOL_UDP, libc::UDP_SEGMENT, &segment.to_ne_bytes());
        self
    }

    /// The datagrams carry traffic class `class` in their IP header (IPv4
    /// TOS, or the IPv6 traffic class); 0, the socket's own, needs no
    /// message.
    pub(crate) fn traffic_class(mut self, ipv6: bool, class: u8) -> Control {
        if class != 0 {
            let (level, kind) = match ipv6 {
                true => (libc::IPPROTO_IPV6, libc::IPV6_TCLASS),
                false => (libc::IPPROTO_IP, libc::IP_TOS),
            };
            self.push(level, kind, &libc::c_int::from(class).to_ne_bytes());
        }
        self
    }

    /// The messages written, for `msg_control`.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Appends one message. Written field by field at the libc crate's
    /// offsets and widths, without building a `cmsghdr` (musl's has
    /// private padding fields, and `cmsg_len` is `size_t` in glibc but
    /// `socklen_t` in musl).
    fn push(&mut self, level: libc::c_int, kind: libc::c_int, data: &[u8]) {
        let at = self.len;
        let message_len = DATA_AT + data.len();
        let len_at = at + offset_of!(libc::cmsghdr, cmsg_len);
        match field_size(|h: &libc::cmsghdr| &h.cmsg_len) {
            4 => self.put(len_at, &(message_len as u32).to_ne_bytes()),
            _ => self.put(len_at, &(message_len as u64).to_ne_bytes()),
        }
        self.put(
            at + offset_of!(libc::cmsghdr, cmsg_level),
            &level.to_ne_bytes(),
        );
        self.put(
            at + offset_of!(libc::cmsghdr, cmsg_type),
            &kind.to_ne_bytes(),
        );
        self.put(at + DATA_AT, data);
        self.len = at + space(data.len());
    }

    fn put(&mut self, at: usize, bytes: &[u8]) {
        self.buf[at..at + bytes.len()].copy_from_slice(bytes);
    }
}

/// The size of the field `field` names (the closure is never called: it
/// only gives the field's type).
fn field_size<T, F>(_field: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send_batch::DatagramOut;
    use socket2::SockRef;
    use std::net::UdpSocket;
    use std::time::Duration;

    #[test]
    fn the_messages_have_cmsg_3s_sizes_on_this_platform() {
        if cfg!(all(
            target_os = "linux",
            target_env = "gnu",
            target_pointer_width = "64"
        )) {
            assert_eq!((DATA_AT, space(2), space(4)), (16, 24, 24));
            assert_eq!(Control::new().segment(10).bytes().len(), 24);
            let both = Control::new().segment(10).traffic_class(false, 96);
            assert_eq!(both.bytes().len(), 48);
            assert_eq!(&both.bytes()[..8], &18u64.to_ne_bytes(), "cmsg_len");
            assert_eq!(&both.bytes()[24..32], &20u64.to_ne_bytes(), "cmsg_len");
        }
        assert!(Control::new().traffic_class(false, 0).bytes().is_empty());
    }

    /// The kernel takes the message: one send of 25 bytes cut at 10
    /// arrives as three datagrams (10, 10 and 5 bytes), in order. A
    /// malformed message would fail the send (EINVAL), and the batch
    /// would fall back to sending packets one by one.
    #[test]
    fn a_segmented_send_arrives_as_datagrams_of_the_segment_size() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let bytes: Vec<u8> = (0..25).collect();
        let sent = SockRef::from(&tx)
            .send_segmented(&bytes, 10, rx.local_addr().unwrap(), 0)
            .unwrap();
        assert_eq!(sent, 25);
        let mut buf = [0u8; 64];
        for want in [&bytes[..10], &bytes[10..20], &bytes[20..]] {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], want);
        }
    }

    /// Each datagram of a segmented send, and a datagram sent alone,
    /// carries the traffic class asked for in its IP header (read back
    /// with `IP_RECVTOS`, `IPV6_RECVTCLASS`), IPv4 and IPv6 alike.
    #[test]
    fn datagrams_carry_the_traffic_class_asked_for() {
        use nix::sys::socket::{setsockopt, sockopt};
        for (any, class) in [("127.0.0.1:0", 0x60u8), ("[::1]:0", 0xb8)] {
            let ipv6 = any.starts_with('[');
            let Ok(rx) = UdpSocket::bind(any) else {
                assert!(ipv6, "IPv4 loopback must bind");
                continue; // a host without IPv6 on its loopback
            };
            match ipv6 {
                true => setsockopt(&rx, sockopt::Ipv6RecvTClass, &true).unwrap(),
                false => setsockopt(&rx, sockopt::IpRecvTos, &true).unwrap(),
            }
            rx.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let tx = UdpSocket::bind(any).unwrap();
            let to = rx.local_addr().unwrap();
            let out = SockRef::from(&tx);
            out.send_segmented(&[1; 20], 10, to, class).unwrap();
            out.send_one(&[2; 5], to, class).unwrap();
            out.send_one(&[3; 5], to, 0).unwrap();
            for want in [class, class, class, 0] {
                assert_eq!(received_class(&rx), want, "{any}");
            }
        }
    }

    /// The traffic class of the next datagram `rx` receives.
    fn received_class(rx: &UdpSocket) -> u8 {
        use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrStorage};
        use std::os::fd::AsRawFd;
        let mut data = [0u8; 64];
        let mut iov = [std::io::IoSliceMut::new(&mut data)];
        let mut space = nix::cmsg_space!(libc::c_int);
        let flags = MsgFlags::empty();
        let msg = recvmsg::<SockaddrStorage>(rx.as_raw_fd(), &mut iov, Some(&mut space), flags);
        let class = msg.unwrap().cmsgs().unwrap().find_map(|c| match c {
            ControlMessageOwned::Ipv4Tos(class) => Some(class),
            ControlMessageOwned::Ipv6TClass(class) => u8::try_from(class).ok(),
            _ => None,
        });
        class.expect("the datagram's traffic class")
    }
}
