//! The control message that has the kernel cut one send into datagrams
//! of one size (`UDP_SEGMENT`, UDP generic segmentation offload), written
//! into a buffer on the stack: nix's `sendmsg` allocates its control
//! buffer on every call, which was one allocation per batch sent.
//!
//! The layout is `cmsg(3)`'s: a `struct cmsghdr` whose fields are placed
//! where the libc crate's definition puts them, then the `u16` segment
//! size at `CMSG_DATA`, the whole padded to `CMSG_SPACE`. The kernel copies
//! the control buffer before it reads it, so the buffer's own alignment
//! does not matter.

use std::mem::{offset_of, size_of};

/// `CMSG_ALIGN`: headers and data are aligned to `size_t`.
const fn cmsg_align(len: usize) -> usize {
    (len + size_of::<usize>() - 1) & !(size_of::<usize>() - 1)
}

/// Where the data starts (`CMSG_DATA`).
const DATA_AT: usize = cmsg_align(size_of::<libc::cmsghdr>());

/// `CMSG_LEN(sizeof(u16))`: the header's `cmsg_len`.
const MESSAGE_LEN: usize = DATA_AT + size_of::<u16>();

/// `CMSG_SPACE(sizeof(u16))`: the room the message takes.
pub(crate) const SPACE: usize = cmsg_align(MESSAGE_LEN);

/// The control message of a send the kernel cuts into `segment`-byte
/// datagrams (the last may be shorter). Written field by field at the
/// libc crate's offsets and widths, without building a `cmsghdr` (musl's
/// has private padding fields, and `cmsg_len` is `size_t` in glibc but
/// `socklen_t` in musl).
pub(crate) fn control(segment: u16) -> [u8; SPACE] {
    let mut c = [0u8; SPACE];
    let len_at = offset_of!(libc::cmsghdr, cmsg_len);
    match field_size(|h: &libc::cmsghdr| &h.cmsg_len) {
        4 => put(&mut c, len_at, &(MESSAGE_LEN as u32).to_ne_bytes()),
        _ => put(&mut c, len_at, &(MESSAGE_LEN as u64).to_ne_bytes()),
    }
    let level: libc::c_int = libc::SOL_UDP;
    let kind: libc::c_int = libc::UDP_SEGMENT;
    put(
        &mut c,
        offset_of!(libc::cmsghdr, cmsg_level),
        &level.to_ne_bytes(),
    );
    put(
        &mut c,
        offset_of!(libc::cmsghdr, cmsg_type),
        &kind.to_ne_bytes(),
    );
    put(&mut c, DATA_AT, &segment.to_ne_bytes());
    c
}

/// The size of the field `field` names (the closure is never called: it
/// only gives the field's type).
fn field_size<T, F>(_field: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send_batch::DatagramOut;
    use socket2::SockRef;
    use std::net::UdpSocket;
    use std::time::Duration;

    #[test]
    fn the_message_has_cmsg_3s_sizes_on_this_platform() {
        if cfg!(all(
            target_os = "linux",
            target_env = "gnu",
            target_pointer_width = "64"
        )) {
            assert_eq!((DATA_AT, MESSAGE_LEN, SPACE), (16, 18, 24));
        }
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
            .send_segmented(&bytes, 10, rx.local_addr().unwrap())
            .unwrap();
        assert_eq!(sent, 25);
        let mut buf = [0u8; 64];
        for want in [&bytes[..10], &bytes[10..20], &bytes[20..]] {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], want);
        }
    }
}
