//! The GID table of a device and the address each GID travels as.
//!
//! rxe lists RoCE v2 GIDs only: the link-local IPv6 address of its
//! interface at index 0, then the interface's IP addresses (IPv4-mapped
//! for IPv4), and programs hard-code those indexes (`-g 0`, index 1 for
//! IPv4). A softverbs device sends and receives on one address, the one it
//! is configured with, so its link-local GID is *derived from that
//! address* and travels as it:
//!
//! * IPv4 `a.b.c.d`: `fe80::5efe:a.b.c.d`, the link-local address whose
//!   interface identifier holds the IPv4 address (the ISATAP form, RFC
//!   5214 section 6.1); it travels as `a.b.c.d`, wherever that is.
//! * IPv6 `P::I` (`P` the /64 prefix, `I` the interface identifier):
//!   `fe80::I`, the link-local address with the same interface identifier,
//!   as SLAAC relates an interface's addresses. A link-local peer is on
//!   our link, so `fe80::I` seen from a device on `P::J` travels as `P::I`.
//!
//! Any other link-local GID (a kernel device's, derived from its MAC)
//! travels as itself, through the device's interface.
//!
//! An IPv6 multicast GID seen from an IPv4 device (an InfiniBand-style
//! MGID, as perftest's default `ff01:0:2:c985::` or a hard-coded
//! `ff12:...`) has no IPv4 form, and an IPv4 socket can neither join nor
//! send to it; it travels as an IPv4 group of the administratively scoped
//! 239.0.0.0/8 derived from it ([`ipv4_group_of`]), so that programs
//! written for InfiniBand multicast run. Two such MGIDs share a group once
//! in about 16 million pairs (their members then get each other's
//! datagrams); a kernel device would send them as IPv6.
//!
//! RoCE v2 packets carry no GIDs, only IP addresses, so two GIDs that
//! travel as one address are one endpoint: the engine compares a packet's
//! addresses with a connection's GIDs through [`Gid::route`] (as rxe's
//! address check compares IP addresses).

use crate::gid::Gid;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The ISATAP interface identifier's first 32 bits (RFC 5214 section 6.1).
const ISATAP_ID: [u8; 4] = [0x00, 0x00, 0x5e, 0xfe];

/// The RoCE v2 GID table of a port whose address is `address`, in rxe's
/// order: the link-local GID, then the address's own GID.
pub fn gids_of(address: IpAddr) -> Vec<Gid> {
    vec![Gid::link_local_of(address), Gid::from_ip(address)]
}

impl Gid {
    /// The link-local GID of a device on `address` (see the module docs).
    pub fn link_local_of(address: IpAddr) -> Gid {
        let mut g = [0u8; 16];
        g[..2].copy_from_slice(&[0xfe, 0x80]);
        match address {
            IpAddr::V4(v4) => {
                g[8..12].copy_from_slice(&ISATAP_ID);
                g[12..].copy_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => g[8..].copy_from_slice(&v6.octets()[8..]),
        }
        Gid(g)
    }

    /// Whether this GID is a link-local IPv6 address (fe80::/10).
    pub fn is_link_local(self) -> bool {
        self.0[0] == 0xfe && self.0[1] & 0xc0 == 0x80
    }

    /// The IP address a packet to or from this GID carries, for a device
    /// whose own address is `local` (see the module docs).
    pub fn route(self, local: IpAddr) -> IpAddr {
        if !self.is_link_local() {
            return match (self.to_ip(), local) {
                (IpAddr::V6(group), IpAddr::V4(_)) if group.is_multicast() => {
                    IpAddr::V4(ipv4_group_of(group))
                }
                (ip, _) => ip,
            };
        }
        if self.0[2..8] == [0; 6] && self.0[8..12] == ISATAP_ID {
            let [a, b, c, d] = [self.0[12], self.0[13], self.0[14], self.0[15]];
            return IpAddr::V4(Ipv4Addr::new(a, b, c, d));
        }
        match local {
            IpAddr::V6(v6) if !Gid::from_ip(local).is_link_local() => {
                let mut a = v6.octets();
                a[8..].copy_from_slice(&self.0[8..]);
                IpAddr::V6(Ipv6Addr::from(a))
            }
            _ => self.to_ip(),
        }
    }

    /// Whether `self` and `other` travel as the same address from a
    /// device on `local`: on the wire they are one endpoint.
    pub fn same_endpoint(self, other: Gid, local: IpAddr) -> bool {
        self == other || self.route(local) == other.route(local)
    }
}

/// The IPv4 group an IPv6 multicast GID travels as from an IPv4 device:
/// 239.x.y.z, `x.y.z` 24 bits of the FNV-1a hash of its 16 bytes (every
/// byte counts: perftest's server and client groups differ only in the
/// last).
fn ipv4_group_of(group: Ipv6Addr) -> Ipv4Addr {
    let hash = group.octets().iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let [_, x, y, z] = hash.to_be_bytes();
    Ipv4Addr::new(239, x, y, z)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn gid(s: &str) -> Gid {
        Gid::from_ip(ip(s))
    }

    #[test]
    fn an_ipv4_device_has_a_link_local_gid_then_its_mapped_address() {
        let t = gids_of(ip("10.231.0.1"));
        assert_eq!(t, vec![gid("fe80::5efe:ae7:1"), gid("::ffff:10.231.0.1")]);
        assert!(t[0].is_link_local() && !t[1].is_link_local());
        assert_eq!(
            gids_of(ip("127.0.0.1"))[0].to_string(),
            "fe80:0000:0000:0000:0000:5efe:7f00:0001"
        );
    }

    #[test]
    fn an_ipv6_device_has_a_link_local_gid_with_its_interface_identifier() {
        let t = gids_of(ip("fd00:e7::1:2"));
        assert_eq!(t, vec![gid("fe80::1:2"), gid("fd00:e7::1:2")]);
        assert_eq!(gids_of(ip("::1"))[0], gid("fe80::1"));
    }

    #[test]
    fn a_derived_link_local_gid_travels_as_the_address_it_came_from() {
        for (device, peer) in [
            ("127.0.0.1", "127.0.0.1"),
            ("10.231.0.2", "10.231.0.1"),
            ("fd00:e7::2", "fd00:e7::1"),
            ("::1", "::1"),
        ] {
            let peer_ll = Gid::link_local_of(ip(peer));
            assert_eq!(peer_ll.route(ip(device)), ip(peer), "{peer} from {device}");
            assert!(peer_ll.same_endpoint(gid(peer), ip(device)));
        }
    }

    #[test]
    fn other_gids_travel_as_themselves() {
        let local = ip("10.0.0.1");
        assert_eq!(gid("::ffff:10.0.0.2").route(local), ip("10.0.0.2"));
        assert_eq!(gid("fd00::5").route(local), ip("fd00::5"));
        // A kernel device's MAC-derived link-local address: on the link.
        let mac_ll = gid("fe80::fc:ff:fe00:1");
        assert_eq!(mac_ll.route(local), ip("fe80::fc:ff:fe00:1"));
        assert_eq!(mac_ll.route(ip("fe80::1")), ip("fe80::fc:ff:fe00:1"));
    }

    #[test]
    fn an_ipv6_group_travels_as_an_ipv4_group_from_an_ipv4_device() {
        let (v4, v6) = (ip("127.0.0.1"), ip("fd00::1"));
        let server = gid("ff01:0:2:c985::");
        let client = gid("ff01:0:2:c985::1");
        let (a, b) = (server.route(v4), client.route(v4));
        for group in [a, b] {
            let IpAddr::V4(g) = group else {
                panic!("{group} is not IPv4")
            };
            assert_eq!(g.octets()[0], 239);
        }
        assert_ne!(a, b, "groups that differ in one byte stay apart");
        assert_eq!(server.route(v4), a, "the same group every time");
        // From an IPv6 device, and an IPv4 group from either: as themselves.
        assert_eq!(server.route(v6), ip("ff01:0:2:c985::"));
        assert_eq!(gid("::ffff:239.1.2.3").route(v4), ip("239.1.2.3"));
        assert_eq!(gid("::ffff:239.1.2.3").route(v6), ip("239.1.2.3"));
    }

    #[test]
    fn distinct_addresses_are_distinct_endpoints() {
        let local = ip("10.0.0.1");
        let ll = Gid::link_local_of(ip("10.0.0.2"));
        assert!(!ll.same_endpoint(gid("10.0.0.3"), local));
        assert!(!ll.same_endpoint(Gid::link_local_of(ip("10.0.0.3")), local));
        let ll6 = Gid::link_local_of(ip("fd00::2"));
        assert!(!ll6.same_endpoint(gid("fd00::3"), ip("fd00::1")));
        // Another /64: a link-local GID reaches only our link's prefix.
        assert!(!ll6.same_endpoint(gid("fd01::2"), ip("fd00::1")));
    }
}
