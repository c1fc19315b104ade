//! Path MTU values (`enum ibv_mtu`).

/// `enum ibv_mtu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum Mtu {
    /// IBV_MTU_256
    Mtu256 = 1,
    /// IBV_MTU_512
    Mtu512 = 2,
    /// IBV_MTU_1024
    Mtu1024 = 3,
    /// IBV_MTU_2048
    Mtu2048 = 4,
    /// IBV_MTU_4096
    Mtu4096 = 5,
}

impl Mtu {
    /// Decodes a raw `ibv_mtu`.
    pub fn from_raw(raw: u32) -> Option<Mtu> {
        match raw {
            1 => Some(Mtu::Mtu256),
            2 => Some(Mtu::Mtu512),
            3 => Some(Mtu::Mtu1024),
            4 => Some(Mtu::Mtu2048),
            5 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }

    /// Payload bytes per packet.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// The largest MTU whose packets fit in a link of `link_mtu` bytes
    /// (the IP packet) once the IP header (IPv6's when `ipv6`), UDP, BTH,
    /// the largest extension headers a packet with a payload carries
    /// (RETH and ImmDt) and the ICRC are added, and at least rxe's 80
    /// bytes (`RXE_MAX_HDR_LENGTH`, as rxe derives its active MTU from the
    /// netdev MTU), so that an IPv4 device reports what rxe reports.
    pub fn largest_fitting(link_mtu: u32, ipv6: bool) -> Option<Mtu> {
        const RXE_HEADERS: u32 = 80;
        let ip = if ipv6 { 40 } else { 20 };
        let overhead = RXE_HEADERS.max(ip + 8 + 12 + 16 + 4 + 4);
        [
            Mtu::Mtu4096,
            Mtu::Mtu2048,
            Mtu::Mtu1024,
            Mtu::Mtu512,
            Mtu::Mtu256,
        ]
        .into_iter()
        .find(|m| m.bytes() + overhead <= link_mtu)
    }
}
