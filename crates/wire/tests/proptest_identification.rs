//! Property tests of the IPv4 identification recovery: a packet sealed
//! with any identification verifies without it and yields it back, and a
//! single flipped bit anywhere else in the datagram is rejected.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use softverbs_wire::{icrc, identification, Flow, IpPacket, WireError};

/// Covered bytes after the identification field besides BTH..pad: the
/// rest of the IPv4 header (bytes 6..20) and the UDP header.
const HEADER_BYTES_AFTER_ID: usize = 14 + 8;

fn flow4() -> impl Strategy<Value = Flow> {
    (
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        any::<u16>(),
        any::<u16>(),
    )
        .prop_map(|(s, d, sp, dp)| Flow::v4(Ipv4Addr::from(s), Ipv4Addr::from(d), sp, dp))
}

fn flow6() -> impl Strategy<Value = Flow> {
    (
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        any::<u16>(),
        any::<u16>(),
    )
        .prop_map(|(s, d, sp, dp)| Flow::v6(Ipv6Addr::from(s), Ipv6Addr::from(d), sp, dp))
}

/// A RoCE packet's bytes (BTH through ICRC, ICRC not yet sealed), up to
/// a 4 KiB MTU's worth of payload and headers. The ICRC does not care
/// whether the BTH makes sense.
fn roce() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 16..=4096 + 64)
}

/// Whether flipping byte `at` of an IPv4 datagram (20-byte header, UDP,
/// RoCE) can change the ICRC: not the identification, not a masked field.
fn covered_ipv4(at: usize) -> bool {
    !matches!(at, 1 | 4 | 5 | 8 | 10 | 11 | 26 | 27 | 32)
}

/// What a receiver that sees the whole datagram but ignores its
/// identification recovers: the ICRC over the datagram with the
/// identification zeroed, compared with the one carried. A header the
/// ICRC code refuses (a flipped version or IHL) is a rejection too.
fn recover_from(datagram: &[u8]) -> Option<u16> {
    let (ip, rest) = datagram.split_at(20);
    let (udp, roce) = rest.split_at(8);
    let mut ip: [u8; 20] = ip.try_into().unwrap();
    ip[4] = 0;
    ip[5] = 0;
    let (covered, found) = icrc::split_icrc(roce).unwrap();
    let computed = icrc::icrc(&ip, udp, covered).ok()?;
    identification::recover(computed, found, HEADER_BYTES_AFTER_ID + covered.len())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_sealed_identification_is_recovered(flow in flow4(), mut pkt in roce(), id in any::<u16>()) {
        flow.seal_with_identification(&mut pkt, id).unwrap();
        prop_assert_eq!(flow.verify_recovering_identification(&pkt), Ok(Some(id)));

        // The same ICRC from the real datagram, as an independent check of
        // the sealing side.
        let headers = flow.headers_with_identification(pkt.len(), id).unwrap();
        let datagram = [headers.ip(), &headers.udp()[..], &pkt].concat();
        let split = IpPacket::parse(&datagram).unwrap();
        prop_assert_eq!(split.verify_icrc(), Ok(()));
        prop_assert_eq!(split.flow(), flow);
        prop_assert_eq!(flow.verify(&pkt).is_ok(), id == 0);
    }

    #[test]
    fn ipv6_is_exact_whatever_identification_is_named(
        flow in flow6(),
        mut pkt in roce(),
        id in any::<u16>(),
    ) {
        flow.seal_with_identification(&mut pkt, id).unwrap();
        prop_assert_eq!(flow.verify(&pkt), Ok(()));
        prop_assert_eq!(flow.verify_recovering_identification(&pkt), Ok(None));
    }

    /// The receiver's path: the flow from the socket addresses, the packet
    /// as the UDP socket hands it over.
    #[test]
    fn a_flipped_bit_in_the_packet_is_rejected(
        flow in prop_oneof![flow4(), flow6()],
        mut pkt in roce(),
        id in any::<u16>(),
        pos in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        flow.seal_with_identification(&mut pkt, id).unwrap();
        let at = pos.index(pkt.len());
        // BTH byte 4 (FECN, BECN, reserved) is masked out of the ICRC.
        prop_assume!(at != 4);
        pkt[at] ^= 1 << bit;
        let rejected = matches!(
            flow.verify_recovering_identification(&pkt),
            Err(WireError::BadIcrc { .. })
        );
        prop_assert!(rejected, "flip at byte {} bit {} passed", at, bit);
    }

    /// A flipped address or port: the packet checked against another flow.
    #[test]
    fn a_packet_of_another_flow_is_rejected(
        flow in flow4(),
        mut pkt in roce(),
        id in any::<u16>(),
        which in 0usize..4,
        bit in 0u32..16,
    ) {
        flow.seal_with_identification(&mut pkt, id).unwrap();
        let mut other = flow;
        match (&mut other.addrs, which) {
            (softverbs_wire::IpPair::V4 { src, .. }, 0) => {
                *src = Ipv4Addr::from(u32::from(*src) ^ (1 << bit));
            }
            (softverbs_wire::IpPair::V4 { dst, .. }, 1) => {
                *dst = Ipv4Addr::from(u32::from(*dst) ^ (1 << (bit + 16)));
            }
            (_, 2) => other.src_port ^= 1 << bit,
            _ => other.dst_port ^= 1 << bit,
        }
        prop_assert!(other.verify_recovering_identification(&pkt).is_err());
    }

    /// Every covered bit of the real datagram, headers included: the
    /// receiver computes the ICRC over what arrived with the
    /// identification zeroed and asks for an identification explaining
    /// the rest.
    #[test]
    fn a_flipped_bit_outside_the_identification_is_rejected(
        flow in flow4(),
        pkt in roce(),
        id in any::<u16>(),
        pos in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let mut pkt = pkt;
        flow.seal_with_identification(&mut pkt, id).unwrap();
        let headers = flow.headers_with_identification(pkt.len(), id).unwrap();
        let mut datagram = [headers.ip(), &headers.udp()[..], &pkt].concat();
        prop_assert_eq!(recover_from(&datagram), Some(id));
        let at = pos.index(datagram.len());
        prop_assume!(covered_ipv4(at));
        datagram[at] ^= 1 << bit;
        prop_assert_eq!(recover_from(&datagram), None, "flip at byte {} bit {} passed", at, bit);
    }
}
