//! What Linux charges a UDP socket's receive buffer for the datagrams
//! softverbs sends, for the engine's send window and budget
//! (`softverbs_engine::PacketCost`).
//!
//! A datagram that arrives alone occupies a buffer of a power of two
//! bytes holding its IP and UDP headers, its payload and some 400 bytes
//! the kernel keeps beside them, plus the buffer's descriptor; measured
//! on loopback (Linux 6.18, IPv4), by UDP payload: 20 to 64 bytes cost
//! 832, 200 to 600 cost 1,280, 1,000 to 1,500 cost 2,304, 2,000 to 2,200
//! cost 4,352, 4,000 to 4,200 cost 8,448. Packets a GSO send carried
//! together and GRO kept together cost about their size, but a window
//! must fit however its packets arrive. The estimate takes a packet's
//! headers as 48 bytes beyond its path MTU (BTH, the largest extension
//! headers, ICRC) and the kernel's share as 512 bytes (IPv6's longer
//! header included), so it is never below what was measured.

/// The receive-buffer cost of one RoCE packet of path MTU `mtu` bytes.
pub(crate) fn udp_receive_cost(mtu: u32) -> u32 {
    const PACKET_HEADERS: u32 = 48;
    const KERNEL_SHARE: u32 = 512;
    const DESCRIPTOR: u32 = 320;
    (mtu + PACKET_HEADERS + KERNEL_SHARE).next_power_of_two() + DESCRIPTOR
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_never_below_what_linux_was_measured_to_charge() {
        // (path MTU, the cost measured for a datagram of that MTU's
        // largest packet, payload plus 48 bytes)
        for (mtu, measured) in [
            (256, 1280),
            (512, 1280),
            (1024, 2304),
            (2048, 4352),
            (4096, 8448),
        ] {
            let cost = udp_receive_cost(mtu);
            assert!(cost >= measured, "MTU {mtu}: {cost} < {measured}");
            assert!(cost <= 2 * measured, "MTU {mtu}: {cost} is too careful");
        }
    }
}
