//! GIDs: 128-bit port addresses. On RoCE v2 a GID is an IPv6 address or an
//! IPv4-mapped IPv6 address (`::ffff:a.b.c.d`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `union ibv_gid`, raw bytes in network order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The all-zero GID marks an empty table entry.
    pub const ZERO: Gid = Gid([0; 16]);

    /// The RoCE v2 GID of an IP address.
    pub fn from_ip(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }

    /// The IP address this GID stands for.
    pub fn to_ip(self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }

    /// Whether this is an empty table entry.
    pub fn is_zero(self) -> bool {
        self == Gid::ZERO
    }

    /// An IPv4 GID, for tests and defaults.
    pub fn from_ipv4(a: Ipv4Addr) -> Gid {
        Gid::from_ip(IpAddr::V4(a))
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({})", Ipv6Addr::from(self.0))
    }
}

impl fmt::Display for Gid {
    /// The sysfs / ibv_devinfo form: 8 groups of 4 hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}
