//! The link MTU of the interface that holds an address, from the kernel's
//! interface list and sysfs (no root needed).

use std::ffi::CStr;
use std::net::IpAddr;

/// The MTU of the interface that has `ip`, if one does.
pub fn mtu_of(ip: IpAddr) -> Option<u32> {
    let name = interface_of(ip)?;
    let text = std::fs::read_to_string(format!("/sys/class/net/{name}/mtu")).ok()?;
    text.trim().parse().ok()
}

/// The interface index of the interface that has `ip`.
pub fn ifindex_of(ip: IpAddr) -> Option<u32> {
    let name = std::ffi::CString::new(interface_of(ip)?).ok()?;
    // SAFETY: a NUL-terminated interface name.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (index != 0).then_some(index)
}

/// The name of the interface that has `ip`.
fn interface_of(ip: IpAddr) -> Option<String> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = list;
    while !cur.is_null() && found.is_none() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive
        // until freeifaddrs; its name is a NUL-terminated string and its
        // address, when set, a sockaddr of the family it declares.
        let node = unsafe { &*cur };
        if unsafe { sockaddr_ip(node.ifa_addr) } == Some(ip) {
            found = Some(
                unsafe { CStr::from_ptr(node.ifa_name) }
                    .to_string_lossy()
                    .into_owned(),
            );
        }
        cur = node.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    found
}

/// The IP address in a sockaddr, if it is IPv4 or IPv6.
///
/// # Safety
/// `sa` is null or points to a sockaddr as large as its family says.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: non-null and at least a sockaddr (caller's contract); the
    // family tells which larger struct it is.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let v4 = &*(sa as *const libc::sockaddr_in);
                Some(IpAddr::from(u32::from_be(v4.sin_addr.s_addr).to_be_bytes()))
            }
            libc::AF_INET6 => {
                let v6 = &*(sa as *const libc::sockaddr_in6);
                Some(IpAddr::from(v6.sin6_addr.s6_addr))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_an_mtu() {
        let mtu = mtu_of("127.0.0.1".parse().unwrap()).expect("lo holds 127.0.0.1");
        assert!(mtu >= 1500);
    }
}
