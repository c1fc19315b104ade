//! The network interface that holds an address: its MTU (for the port's
//! active MTU), its index (for GID entries) and whether it is up with a
//! carrier (for the port's state), from the kernel's interface list and
//! sysfs; no root needed.

use nix::ifaddrs::getifaddrs;
use nix::net::if_::InterfaceFlags;
use softverbs_engine::LinkState;
use std::net::IpAddr;

/// The MTU of the interface that has `ip`, if one does.
pub fn mtu_of(ip: IpAddr) -> Option<u32> {
    let name = interface_of(ip)?;
    let text = std::fs::read_to_string(format!("/sys/class/net/{name}/mtu")).ok()?;
    text.trim().parse().ok()
}

/// The index of the interface that has `ip`, if one does.
pub fn ifindex_of(ip: IpAddr) -> Option<u32> {
    nix::net::if_::if_nametoindex(interface_of(ip)?.as_str()).ok()
}

/// Whether `ip` is an address of this host (of this network namespace):
/// a loopback address, or one an interface holds.
pub fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || interface_of(ip).is_some()
}

/// Whether interface `name` is up (IFF_UP) with a carrier (IFF_LOWER_UP),
/// up without one, or down; `None` if there is no such interface.
pub fn link_of(name: &str) -> Option<LinkState> {
    let flags = getifaddrs()
        .ok()?
        .find(|ifa| ifa.interface_name == name)?
        .flags;
    Some(match flags.contains(InterfaceFlags::IFF_UP) {
        false => LinkState::Down,
        true if flags.contains(InterfaceFlags::IFF_LOWER_UP) => LinkState::Up,
        true => LinkState::NoCarrier,
    })
}

/// The name of the interface that has `ip`.
pub fn interface_of(ip: IpAddr) -> Option<String> {
    getifaddrs().ok()?.find_map(|ifa| {
        let addr = ifa.address?;
        let found = match ip {
            IpAddr::V4(v4) => addr.as_sockaddr_in().is_some_and(|a| a.ip() == v4),
            IpAddr::V6(v6) => addr.as_sockaddr_in6().is_some_and(|a| a.ip() == v6),
        };
        found.then_some(ifa.interface_name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_an_mtu_and_an_index() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(mtu_of(lo).expect("lo holds 127.0.0.1") >= 1500);
        assert!(ifindex_of(lo).is_some());
        assert_eq!(mtu_of("192.0.2.77".parse().unwrap()), None);
        assert!(is_local("127.3.4.5".parse().unwrap()));
        assert!(!is_local("192.0.2.77".parse().unwrap()));
    }
}
