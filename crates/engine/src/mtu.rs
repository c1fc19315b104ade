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

    /// The largest MTU whose packets fit in `link_payload` bytes of IP
    /// payload once IP, UDP, BTH, the largest extension header and the
    /// ICRC are added (as rxe derives its active MTU from the netdev MTU).
    pub fn largest_fitting(link_mtu: u32) -> Option<Mtu> {
        // IPv6 (40) + UDP (8) + BTH (12) + AtomicETH (28) + ICRC (4).
        const OVERHEAD: u32 = 40 + 8 + 12 + 28 + 4;
        [
            Mtu::Mtu4096,
            Mtu::Mtu2048,
            Mtu::Mtu1024,
            Mtu::Mtu512,
            Mtu::Mtu256,
        ]
        .into_iter()
        .find(|m| m.bytes() + OVERHEAD <= link_mtu)
    }
}
