//! Target `wire`: the RoCEv2 parser of crates/wire on arbitrary bytes.
//!
//! The input is tried both as a RoCE packet (BTH through ICRC, what the
//! engine receives) and as an IP datagram (what the UDP transport splits
//! and checks). Nothing may panic, and whatever parses must survive the
//! trip back (but for a reserved AETH syndrome, which parses for the
//! requester to answer and which the builder refuses to write): building
//! the parsed view again gives a packet of the same
//! length that parses to the same headers and payload, and building is
//! idempotent. Sealing with a flow verifies with that flow, and a flipped
//! covered bit does not; sealing for an IPv4 identification (taken from
//! the input) verifies without knowing it and gives it back, and a flipped
//! bit does not (the receiver's recovery of the identification).

use softverbs_wire::{
    icrc, Flow, IpPacket, IpPair, PacketBuilder, PacketView, Syndrome, WireError, ICRC_LEN,
};
use std::net::Ipv4Addr;

/// Runs every check on one input.
pub fn run(data: &[u8]) {
    check_packet(data);
    check_datagram(data);
}

/// The flow used where the input brings none.
fn test_flow() -> Flow {
    Flow::v4(
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        49152,
        4791,
    )
}

/// Parse, build from the parsed view, parse again.
pub fn check_packet(data: &[u8]) {
    let Ok(view) = PacketView::parse(data) else {
        return;
    };
    if let Some(Syndrome::Reserved(byte)) = view.aeth().map(|a| a.syndrome) {
        let builder = PacketBuilder {
            bth: *view.bth(),
            ext: *view.ext(),
            payload: view.payload(),
        };
        let mut buf = vec![0u8; builder.wire_len()];
        let refused = builder.build_unsealed(&mut buf);
        assert_eq!(refused, Err(WireError::ReservedSyndrome(byte)));
        return;
    }
    let rebuilt = rebuild(&view);
    assert_eq!(rebuilt.len(), data.len(), "rebuilt length differs");
    let again = PacketView::parse(&rebuilt)
        .unwrap_or_else(|e| panic!("a rebuilt packet does not parse: {e}"));
    assert_eq!(again.bth(), view.bth(), "BTH changed on the way back");
    assert_eq!(again.ext(), view.ext(), "extension headers changed");
    assert_eq!(again.payload(), view.payload(), "payload changed");
    assert_eq!(again.icrc(), 0, "an unsealed build carries an ICRC");
    assert_eq!(rebuild(&again), rebuilt, "building is not idempotent");
    check_seal(&test_flow(), rebuilt, identification(data));
}

/// The packet the builder makes from a parsed view (ICRC field zero).
fn rebuild(view: &PacketView<'_>) -> Vec<u8> {
    let builder = PacketBuilder {
        bth: *view.bth(),
        ext: *view.ext(),
        payload: view.payload(),
    };
    let mut buf = vec![0u8; builder.wire_len()];
    let len = builder
        .build_unsealed(&mut buf)
        .unwrap_or_else(|e| panic!("a parsed packet does not build again: {e}"));
    buf.truncate(len);
    buf
}

/// An IPv4 identification chosen by the input.
fn identification(data: &[u8]) -> u16 {
    let first = data.first().copied().unwrap_or(0);
    let last = data.last().copied().unwrap_or(0);
    u16::from_be_bytes([first, last])
}

/// A packet sealed for `flow` verifies for it, and no longer does once a
/// covered bit flips (CRC-32 catches every single-bit error; the last
/// covered byte is payload, pad or a header field the ICRC does not mask).
/// Sealed for IPv4 identification `id`, it verifies without the
/// identification being known and gives `id` back (IPv6: no
/// identification); flipped, it fails (every single-bit error within
/// 26,766 bytes after the field is caught, crates/wire says).
fn check_seal(flow: &Flow, mut packet: Vec<u8>, id: u16) {
    if flow.seal(&mut packet).is_err() {
        return;
    }
    assert_eq!(
        flow.verify(&packet),
        Ok(()),
        "a sealed packet fails its ICRC"
    );
    let last_covered = packet.len() - ICRC_LEN - 1;
    packet[last_covered] ^= 0x01;
    assert!(
        flow.verify(&packet).is_err(),
        "a flipped bit passed the ICRC"
    );
    packet[last_covered] ^= 0x01;
    flow.seal_with_identification(&mut packet, id)
        .expect("sealed once already");
    let expected = match flow.addrs {
        IpPair::V4 { .. } => Some(id),
        IpPair::V6 { .. } => None,
    };
    let recovered = flow.verify_recovering_identification(&packet);
    assert_eq!(
        recovered,
        Ok(expected),
        "identification {id:#06x} not recovered"
    );
    packet[last_covered] ^= 0x01;
    let flipped = flow.verify_recovering_identification(&packet);
    assert!(
        flipped.is_err(),
        "a flipped bit passed identification recovery: {flipped:?}"
    );
}

/// An IP datagram: split it, check its ICRC (whatever the answer), check
/// its RoCE payload, and check that headers rebuilt from its flow give the
/// same ICRC by either route.
pub fn check_datagram(data: &[u8]) {
    let Ok(ip) = IpPacket::parse(data) else {
        return;
    };
    let _ = ip.verify_icrc();
    check_packet(ip.udp_payload);
    let flow = ip.flow();
    let _ = flow.verify_recovering_identification(ip.udp_payload);
    let Ok(headers) = flow.headers(ip.udp_payload.len()) else {
        return;
    };
    let mut datagram = headers.ip().to_vec();
    datagram.extend_from_slice(headers.udp());
    datagram.extend_from_slice(ip.udp_payload);
    let rebuilt = IpPacket::parse(&datagram)
        .unwrap_or_else(|e| panic!("headers built from a flow do not parse: {e}"));
    assert_eq!(rebuilt.flow(), flow, "flow changed through its own headers");
    assert_eq!(rebuilt.udp_payload, ip.udp_payload, "UDP payload changed");
    if let Ok((covered, _)) = icrc::split_icrc(ip.udp_payload) {
        let by_headers = icrc::icrc(rebuilt.ip_header, rebuilt.udp_header, covered);
        if let Ok(by_headers) = by_headers {
            assert_eq!(
                flow.icrc(covered),
                Ok(by_headers),
                "the two ICRC routes differ"
            );
        }
    }
    check_seal(&flow, ip.udp_payload.to_vec(), identification(data));
}
