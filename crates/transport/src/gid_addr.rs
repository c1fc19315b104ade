//! Where a packet for a destination GID goes: the socket address of the
//! IP address the GID travels as (`Gid::route`: an IPv4-mapped GID as its
//! IPv4 address, a device's link-local GID as the address it was derived
//! from), seen from the sending socket's own address.

use softverbs_engine::Gid;
use std::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// The socket address at `port` for `dst`, sent from `local`; `None` when
/// that address is of the other IP family, which `local`'s socket cannot
/// reach (an IPv4 device and a kernel device's link-local GID, say). A
/// link-local destination gets `local`'s scope (its interface).
pub fn socket_addr(dst: Gid, local: SocketAddr, port: u16) -> Option<SocketAddr> {
    match (dst.route(local.ip()), local) {
        (IpAddr::V4(ip), SocketAddr::V4(_)) => Some(SocketAddrV4::new(ip, port).into()),
        (IpAddr::V6(ip), SocketAddr::V6(l)) => {
            let scope = if Gid::from_ip(ip.into()).is_link_local() {
                l.scope_id()
            } else {
                0
            };
            Some(SocketAddrV6::new(ip, port, 0, scope).into())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn gid(s: &str) -> Gid {
        Gid::from_ip(s.parse().unwrap())
    }

    #[test]
    fn both_gids_of_a_device_reach_its_address() {
        let local = sa("10.231.0.2:5000");
        let peer: IpAddr = "10.231.0.1".parse().unwrap();
        for g in softverbs_engine::gids_of(peer) {
            assert_eq!(socket_addr(g, local, 4791), Some(sa("10.231.0.1:4791")));
        }
        let local = sa("[fd00:e7::2]:5000");
        for g in softverbs_engine::gids_of("fd00:e7::1".parse().unwrap()) {
            assert_eq!(socket_addr(g, local, 4791), Some(sa("[fd00:e7::1]:4791")));
        }
        let lo = sa("127.0.0.1:5000");
        let g0 = Gid::link_local_of(lo.ip());
        assert_eq!(socket_addr(g0, lo, 4791), Some(sa("127.0.0.1:4791")));
    }

    #[test]
    fn a_link_local_destination_is_scoped_to_the_local_interface() {
        let local = SocketAddr::V6(SocketAddrV6::new("fe80::2".parse().unwrap(), 5000, 0, 7));
        let Some(SocketAddr::V6(to)) = socket_addr(gid("fe80::fc:ff:fe00:1"), local, 4791) else {
            panic!("no address");
        };
        assert_eq!(
            (*to.ip(), to.port(), to.scope_id()),
            ("fe80::fc:ff:fe00:1".parse().unwrap(), 4791, 7)
        );
    }

    #[test]
    fn the_other_family_is_unreachable() {
        let v4 = sa("10.0.0.1:5000");
        assert_eq!(socket_addr(gid("fe80::fc:ff:fe00:1"), v4, 4791), None);
        assert_eq!(socket_addr(gid("fd00::1"), v4, 4791), None);
        assert_eq!(
            socket_addr(gid("::ffff:10.0.0.2"), sa("[fd00::1]:5000"), 4791),
            None
        );
    }
}
