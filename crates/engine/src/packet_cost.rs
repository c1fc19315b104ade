//! What a peer's receive buffer is charged for one packet: the unit in
//! which the send window and the context's send budget
//! (`DeviceConfig::send_window_bytes`) count what is in flight.
//!
//! A kernel charges a socket's receive buffer for the memory a datagram
//! occupies, not for its payload. On Linux a datagram that arrives alone
//! occupies a power-of-two buffer holding it and some 430 bytes of the
//! kernel's own, plus the buffer's descriptor: a 4,160-byte RoCE packet
//! (path MTU 4096) is charged 8,448 bytes, a 1,090-byte one (MTU 1024)
//! 2,304. Counting payload against half the buffer (the half the kernel
//! adds to what was asked for) overflowed it whenever a full window
//! arrived as separate datagrams (wire `ib_write_bw -q 64 -s 4096` with a
//! 212,992-byte buffer lost 25), and would by more at smaller MTUs. The
//! transport states the cost per path MTU; the engine's default counts
//! the MTU itself.

/// The cost of one packet of each path MTU, 256 to 4096 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketCost([u32; 5]);

impl PacketCost {
    /// Each packet costs its path MTU.
    pub const PAYLOAD: PacketCost = PacketCost([256, 512, 1024, 2048, 4096]);

    /// Costs given by `cost`, from a path MTU in bytes.
    pub fn from_fn(cost: impl Fn(u32) -> u32) -> PacketCost {
        PacketCost(std::array::from_fn(|i| cost(256 << i).max(1)))
    }

    /// The cost of one packet of path MTU `mtu` bytes (one of 256 to
    /// 4096; anything else is taken as the nearest).
    pub fn of(&self, mtu: u32) -> u32 {
        let index = mtu.max(256).ilog2() - 8;
        self.0[(index as usize).min(4)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_cost_is_the_mtu() {
        for mtu in [256, 512, 1024, 2048, 4096] {
            assert_eq!(PacketCost::PAYLOAD.of(mtu), mtu);
        }
    }

    #[test]
    fn a_cost_function_is_tabled_per_mtu() {
        let cost = PacketCost::from_fn(|mtu| 2 * mtu + 1);
        assert_eq!(cost.of(1024), 2049);
        assert_eq!(cost.of(4096), 8193);
        assert_eq!(cost.of(100), 513, "below 256: as 256");
        assert_eq!(cost.of(65536), 8193, "above 4096: as 4096");
        assert_eq!(PacketCost::from_fn(|_| 0).of(256), 1, "never free");
    }
}
