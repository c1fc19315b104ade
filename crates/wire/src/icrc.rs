//! The RoCEv2 invariant CRC (ICRC).
//!
//! The ICRC is a CRC-32 (the Ethernet polynomial, reflected, as zlib's
//! `crc32`) over a pseudo-packet: 8 bytes of 0xFF standing in for the
//! InfiniBand LRH, then the IP header, the UDP header, the BTH, extension
//! headers, payload and pad. Fields that routers may rewrite are replaced
//! by ones first:
//!
//! * IPv4: TOS (byte 1), TTL (byte 8), header checksum (bytes 10-11);
//! * IPv6: traffic class and flow label (the low nibble of byte 0 and
//!   bytes 1-3), hop limit (byte 7);
//! * UDP: checksum (bytes 6-7);
//! * BTH: byte 4 (FECN, BECN, reserved).
//!
//! Everything else, including the IP and UDP length fields and the IPv4
//! identification and flags, is covered as sent. The ICRC value is the
//! finalized CRC (zlib's `crc32` result) and travels as its little-endian
//! bytes, the last four of the UDP payload. scapy's `contrib.roce` and
//! Linux rxe (`rxe_icrc.c`) agree on this; the scapy vectors in
//! `tests/vectors/` check it.
//!
//! Nothing here allocates: masked copies of the small headers live on the
//! stack and are fed to a [`crc32fast::Hasher`] together with the
//! unmodified rest of the packet.

use crc32fast::Hasher;

use crate::error::{HeaderKind, WireError};
use crate::{BTH_LEN, ICRC_LEN, IPV4_HEADER_LEN, IPV6_HEADER_LEN, UDP_HEADER_LEN};

/// The CRC state after the 8 bytes of 0xFF that replace the LRH, so every
/// computation can start there instead of hashing them. `crc32fast`
/// keeps its state in finalized (inverted) form; as a raw `crc32_le`
/// register (Linux) the same state is the 0xDEBB20E3 seed.
const MASKED_LRH_STATE: u32 = 0x2144_DF1C;

/// The longest IPv4 header (IHL 15).
const IPV4_MAX_HEADER_LEN: usize = 60;

const ONES: u8 = 0xFF;

/// Computes the ICRC of a RoCEv2 packet carried over IPv4.
///
/// `ip_header` is the whole IPv4 header (20 bytes, or more with options),
/// `udp_header` the 8-byte UDP header, and `covered` the UDP payload
/// without its trailing ICRC (BTH through pad). Fails if a header has the
/// wrong length or version, or `covered` is shorter than a BTH.
pub fn icrc_ipv4(ip_header: &[u8], udp_header: &[u8], covered: &[u8]) -> Result<u32, WireError> {
    let mut scratch = [0u8; IPV4_MAX_HEADER_LEN];
    let ip = masked_ipv4(ip_header, &mut scratch)?;
    crc_over(ip, udp_header, covered)
}

/// Computes the ICRC of a RoCEv2 packet carried over IPv6; the arguments
/// are as for [`icrc_ipv4`], with a 40-byte IPv6 header (no extension
/// headers: RoCEv2 puts UDP right after the fixed header).
pub fn icrc_ipv6(ip_header: &[u8], udp_header: &[u8], covered: &[u8]) -> Result<u32, WireError> {
    let ip = masked_ipv6(ip_header)?;
    crc_over(&ip, udp_header, covered)
}

/// Computes the ICRC over either IP version, chosen by the version nibble
/// of `ip_header`.
pub fn icrc(ip_header: &[u8], udp_header: &[u8], covered: &[u8]) -> Result<u32, WireError> {
    match ip_header.first().map(|b| b >> 4) {
        Some(6) => icrc_ipv6(ip_header, udp_header, covered),
        _ => icrc_ipv4(ip_header, udp_header, covered),
    }
}

/// Splits a RoCE packet (BTH through ICRC) into the bytes the ICRC covers
/// and the ICRC value it carries.
pub fn split_icrc(packet: &[u8]) -> Result<(&[u8], u32), WireError> {
    let (covered, icrc) = packet
        .split_last_chunk::<ICRC_LEN>()
        .ok_or(WireError::Truncated {
            header: HeaderKind::Icrc,
            needed: ICRC_LEN,
            available: packet.len(),
        })?;
    Ok((covered, u32::from_le_bytes(*icrc)))
}

/// Checks the ICRC carried in the last four bytes of `packet` (BTH
/// through ICRC) against one computed with the given IP and UDP headers.
pub fn verify(ip_header: &[u8], udp_header: &[u8], packet: &[u8]) -> Result<(), WireError> {
    let (covered, found) = split_icrc(packet)?;
    check(icrc(ip_header, udp_header, covered)?, found)
}

/// Computes the ICRC of `packet` (BTH through ICRC) and stores it in the
/// last four bytes.
pub fn seal(ip_header: &[u8], udp_header: &[u8], packet: &mut [u8]) -> Result<(), WireError> {
    seal_with(packet, |covered| icrc(ip_header, udp_header, covered))
}

/// Stores `compute(covered bytes)` in the ICRC field of `packet`.
pub(crate) fn seal_with(
    packet: &mut [u8],
    compute: impl FnOnce(&[u8]) -> Result<u32, WireError>,
) -> Result<(), WireError> {
    let available = packet.len();
    let (covered, field) =
        packet
            .split_last_chunk_mut::<ICRC_LEN>()
            .ok_or(WireError::BufferTooSmall {
                header: HeaderKind::Icrc,
                needed: ICRC_LEN,
                available,
            })?;
    *field = compute(covered)?.to_le_bytes();
    Ok(())
}

/// `Ok` if the computed and carried ICRCs agree.
pub(crate) fn check(computed: u32, found: u32) -> Result<(), WireError> {
    if computed == found {
        Ok(())
    } else {
        Err(WireError::BadIcrc { computed, found })
    }
}

/// The ICRC of `covered` (BTH through pad) under the already masked IP
/// header and `udp_header`: the masked headers and the BTH are hashed as
/// one run of bytes, then the rest where it lies (no copy of the payload).
fn crc_over(masked_ip: &[u8], udp_header: &[u8], covered: &[u8]) -> Result<u32, WireError> {
    let (bth, rest) = covered
        .split_first_chunk::<BTH_LEN>()
        .ok_or(WireError::Truncated {
            header: HeaderKind::Bth,
            needed: BTH_LEN,
            available: covered.len(),
        })?;
    let mut headers = [0u8; IPV4_MAX_HEADER_LEN + UDP_HEADER_LEN + BTH_LEN];
    let ip_end = masked_ip.len();
    let udp_end = ip_end + UDP_HEADER_LEN;
    let end = udp_end + BTH_LEN;
    headers
        .get_mut(..ip_end)
        .ok_or(bad(HeaderKind::Ipv4, "header too long"))?
        .copy_from_slice(masked_ip);
    headers[ip_end..udp_end].copy_from_slice(&masked_udp(udp_header)?);
    headers[udp_end..end].copy_from_slice(bth);
    // FECN, BECN and the reserved bits may be set by the network.
    headers[udp_end + 4] = ONES;
    let mut hasher = Hasher::new_with_initial(MASKED_LRH_STATE);
    hasher.update(&headers[..end]);
    hasher.update(rest);
    Ok(hasher.finalize())
}

/// The ICRC of one packet, computed while the packet is written (as a
/// NIC computes it while the data streams through): started from the IP
/// and UDP headers the packet will leave with, then fed the BTH and
/// extension headers ([`Icrc::roce_headers`]), the payload piece by piece
/// as it is copied, and the pad ([`Icrc::update`]), in order.
#[derive(Clone)]
pub struct Icrc {
    hasher: Hasher,
}

impl std::fmt::Debug for Icrc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Icrc").finish_non_exhaustive()
    }
}

impl Icrc {
    /// Starts the ICRC of a packet with these IP (either version) and UDP
    /// headers; fails as [`icrc`] does on a malformed header.
    pub fn start(ip_header: &[u8], udp_header: &[u8]) -> Result<Icrc, WireError> {
        let mut hasher = Hasher::new_with_initial(MASKED_LRH_STATE);
        match ip_header.first().map(|b| b >> 4) {
            Some(6) => hasher.update(&masked_ipv6(ip_header)?),
            _ => {
                let mut scratch = [0u8; IPV4_MAX_HEADER_LEN];
                hasher.update(masked_ipv4(ip_header, &mut scratch)?);
            }
        }
        hasher.update(&masked_udp(udp_header)?);
        Ok(Icrc { hasher })
    }

    /// Feeds the BTH and the extension headers after it (the BTH's
    /// FECN, BECN and reserved bits are covered as ones: the network may
    /// set them). Fails if `headers` is shorter than a BTH.
    pub fn roce_headers(&mut self, headers: &[u8]) -> Result<(), WireError> {
        let (bth, ext) = headers
            .split_first_chunk::<BTH_LEN>()
            .ok_or(WireError::Truncated {
                header: HeaderKind::Bth,
                needed: BTH_LEN,
                available: headers.len(),
            })?;
        let mut bth = *bth;
        bth[4] = ONES;
        self.hasher.update(&bth);
        self.hasher.update(ext);
        Ok(())
    }

    /// The ICRC of a packet whose covered bytes (BTH through pad) are
    /// `covered`, started over its headers; fails if `covered` is shorter
    /// than a BTH.
    pub fn over(mut self, covered: &[u8]) -> Result<u32, WireError> {
        let (bth, rest) = covered.split_at(covered.len().min(BTH_LEN));
        self.roce_headers(bth)?;
        self.hasher.update(rest);
        Ok(self.hasher.finalize())
    }

    /// Feeds the next bytes of the packet.
    pub fn update(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
    }

    /// The ICRC of everything fed (the value the packet carries, as
    /// little-endian bytes in its last four).
    pub fn finish(&self) -> u32 {
        self.hasher.clone().finalize()
    }
}

fn bad(header: HeaderKind, reason: &'static str) -> WireError {
    WireError::BadIpHeader { header, reason }
}

/// Copies a validated IPv4 header into `scratch` with TOS, TTL and
/// checksum set to ones, and returns the copy.
fn masked_ipv4<'s>(
    header: &[u8],
    scratch: &'s mut [u8; IPV4_MAX_HEADER_LEN],
) -> Result<&'s [u8], WireError> {
    let first = header.first().copied().ok_or(WireError::Truncated {
        header: HeaderKind::Ipv4,
        needed: IPV4_HEADER_LEN,
        available: 0,
    })?;
    if first >> 4 != 4 {
        return Err(bad(HeaderKind::Ipv4, "version is not 4"));
    }
    let len = usize::from(first & 0x0F) * 4;
    if len < IPV4_HEADER_LEN || len != header.len() {
        return Err(bad(
            HeaderKind::Ipv4,
            "IHL does not match the header length",
        ));
    }
    let copy = scratch
        .get_mut(..len)
        .ok_or(bad(HeaderKind::Ipv4, "header too long"))?;
    copy.copy_from_slice(header);
    scratch[1] = ONES; // TOS (DSCP and ECN)
    scratch[8] = ONES; // TTL
    scratch[10] = ONES; // header checksum
    scratch[11] = ONES;
    scratch
        .get(..len)
        .ok_or(bad(HeaderKind::Ipv4, "header too long"))
}

/// A copy of a validated IPv6 header with traffic class, flow label and
/// hop limit set to ones.
fn masked_ipv6(header: &[u8]) -> Result<[u8; IPV6_HEADER_LEN], WireError> {
    let mut ip: [u8; IPV6_HEADER_LEN] = header.try_into().map_err(|_| WireError::BadIpHeader {
        header: HeaderKind::Ipv6,
        reason: "header is not 40 bytes",
    })?;
    if ip[0] >> 4 != 6 {
        return Err(bad(HeaderKind::Ipv6, "version is not 6"));
    }
    ip[0] |= 0x0F; // traffic class high nibble (version stays)
    ip[1] = ONES; // traffic class low nibble, flow label
    ip[2] = ONES;
    ip[3] = ONES;
    ip[7] = ONES; // hop limit
    Ok(ip)
}

/// A copy of the UDP header with the checksum set to ones.
fn masked_udp(header: &[u8]) -> Result<[u8; UDP_HEADER_LEN], WireError> {
    let mut udp: [u8; UDP_HEADER_LEN] = header.try_into().map_err(|_| WireError::BadIpHeader {
        header: HeaderKind::Udp,
        reason: "header is not 8 bytes",
    })?;
    udp[6] = ONES;
    udp[7] = ONES;
    Ok(udp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lrh_state_is_the_crc_of_eight_ff_bytes() {
        assert_eq!(crc32fast::hash(&[0xFF; 8]), MASKED_LRH_STATE);
        assert_eq!(!MASKED_LRH_STATE, 0xDEBB_20E3);
    }

    /// A packet made by scapy 2.6.1 (`IP(src="10.0.0.1", dst="10.0.0.2",
    /// flags="DF", id=0, tos=3, ttl=7) / UDP(sport=1234, dport=4791) /
    /// BTH(opcode=4, psn=5, dqpn=17) / b"abcd"`).
    const SCAPY_PACKET: &str = "450300300000400007115fb80a0000010a00000204d212b7001c202c\
                                0400ffff000000110000000561626364\
                                48eaa237";

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn matches_a_scapy_packet() {
        let pkt = unhex(SCAPY_PACKET);
        let (ip, rest) = pkt.split_at(20);
        let (udp, roce) = rest.split_at(8);
        assert_eq!(verify(ip, udp, roce), Ok(()));
        let (covered, found) = split_icrc(roce).unwrap();
        assert_eq!(icrc_ipv4(ip, udp, covered), Ok(found));
        assert_eq!(found, 0x37A2_EA48);
    }

    #[test]
    fn masked_fields_do_not_matter_and_others_do() {
        let pkt = unhex(SCAPY_PACKET);
        let (ip, rest) = pkt.split_at(20);
        let (udp, roce) = rest.split_at(8);
        let (covered, good) = split_icrc(roce).unwrap();
        for (ip_byte, udp_byte, bth_byte, matters) in [
            (Some(1), None, None, false),  // TOS
            (Some(8), None, None, false),  // TTL
            (Some(10), None, None, false), // checksum
            (None, Some(6), None, false),  // UDP checksum
            (None, None, Some(4), false),  // FECN/BECN
            (Some(4), None, None, true),   // identification
            (Some(6), None, None, true),   // flags
            (Some(9), None, None, true),   // protocol
            (Some(12), None, None, true),  // source address
            (None, Some(0), None, true),   // source port
            (None, Some(4), None, true),   // UDP length
            (None, None, Some(1), true),   // SE/M/PadCnt/TVer
            (None, None, Some(8), true),   // AckReq
        ] {
            let (mut ip, mut udp, mut covered) = (ip.to_vec(), udp.to_vec(), covered.to_vec());
            if let Some(i) = ip_byte {
                ip[i] ^= 0xA5;
            }
            if let Some(i) = udp_byte {
                udp[i] ^= 0xA5;
            }
            if let Some(i) = bth_byte {
                covered[i] ^= 0x5A;
            }
            let crc = icrc_ipv4(&ip, &udp, &covered).unwrap();
            assert_eq!(
                crc != good,
                matters,
                "{ip_byte:?} {udp_byte:?} {bth_byte:?}"
            );
        }
    }

    #[test]
    fn ipv6_masks_traffic_class_flow_label_and_hop_limit() {
        let mut ip = [0u8; 40];
        ip[0] = 0x60;
        ip[6] = 17;
        let udp = [0x12, 0x34, 0x12, 0xB7, 0, 24, 0, 0];
        let covered = [0x04, 0, 0xFF, 0xFF, 0, 0, 0, 1, 0, 0, 0, 2];
        let base = icrc_ipv6(&ip, &udp, &covered).unwrap();
        for (i, x) in [(0, 0x0F), (1, 0xFF), (2, 0xFF), (3, 0xFF), (7, 0xFF)] {
            let mut other = ip;
            other[i] ^= x;
            assert_eq!(icrc_ipv6(&other, &udp, &covered), Ok(base));
        }
        for i in [4, 5, 6, 8, 39] {
            let mut other = ip;
            other[i] ^= 1;
            assert_ne!(icrc_ipv6(&other, &udp, &covered), Ok(base));
        }
        assert_eq!(icrc(&ip, &udp, &covered), Ok(base));
    }

    #[test]
    fn rejects_malformed_headers() {
        let covered = [0u8; 12];
        let udp = [0u8; 8];
        let mut ip4 = [0u8; 20];
        ip4[0] = 0x45;
        assert!(icrc_ipv4(&ip4, &udp, &covered).is_ok());
        assert!(matches!(
            icrc_ipv4(&ip4[..19], &udp, &covered),
            Err(WireError::BadIpHeader { .. })
        ));
        assert!(matches!(
            icrc_ipv4(&[], &udp, &covered),
            Err(WireError::Truncated { .. })
        ));
        ip4[0] = 0x46;
        assert!(icrc_ipv4(&ip4, &udp, &covered).is_err());
        ip4[0] = 0x65;
        assert!(icrc_ipv4(&ip4, &udp, &covered).is_err());
        ip4[0] = 0x45;
        assert!(icrc_ipv4(&ip4, &udp[..7], &covered).is_err());
        assert_eq!(
            icrc_ipv4(&ip4, &udp, &covered[..11]),
            Err(WireError::Truncated {
                header: HeaderKind::Bth,
                needed: 12,
                available: 11
            })
        );
        assert!(icrc_ipv6(&[0x60; 39], &udp, &covered).is_err());
        assert!(icrc_ipv6(&[0x40; 40], &udp, &covered).is_err());
    }

    #[test]
    fn ipv4_options_are_covered() {
        let mut ip = [0u8; 24];
        ip[0] = 0x46;
        let udp = [0u8; 8];
        let covered = [0u8; 12];
        let base = icrc_ipv4(&ip, &udp, &covered).unwrap();
        ip[22] = 1;
        assert_ne!(icrc_ipv4(&ip, &udp, &covered).unwrap(), base);
    }

    #[test]
    fn seal_then_verify_and_detect_corruption() {
        let pkt = unhex(SCAPY_PACKET);
        let (ip, rest) = pkt.split_at(20);
        let (udp, roce) = rest.split_at(8);
        let mut copy = roce.to_vec();
        copy[20..].fill(0);
        seal(ip, udp, &mut copy).unwrap();
        assert_eq!(copy, roce);
        copy[13] ^= 1;
        assert!(matches!(
            verify(ip, udp, &copy),
            Err(WireError::BadIcrc {
                found: 0x37A2_EA48,
                ..
            })
        ));
        assert!(seal(ip, udp, &mut [0u8; 3]).is_err());
        assert!(verify(ip, udp, &[0u8; 3]).is_err());
    }

    /// Fed in any pieces, short or long, an [`Icrc`] gives the ICRC of
    /// the whole: a plain CRC over the masked pseudo-packet (LRH ones,
    /// masked IP and UDP headers, BTH with byte 4 as ones, the rest).
    #[test]
    fn fed_in_pieces_it_equals_the_crc_of_the_whole() {
        use proptest::prelude::*;
        let pkt = unhex(SCAPY_PACKET);
        let (ip, rest) = pkt.split_at(20);
        let (udp, _) = rest.split_at(8);
        let strategy = (
            proptest::collection::vec(any::<u8>(), BTH_LEN..5000),
            proptest::collection::vec(1usize..300, 0..40),
        );
        proptest!(|((covered, cuts) in strategy)| {
            let mut icrc = Icrc::start(ip, udp).unwrap();
            let (bth, mut rest) = covered.split_at(BTH_LEN);
            icrc.roce_headers(bth).unwrap();
            for cut in cuts {
                let (piece, after) = rest.split_at(cut.min(rest.len()));
                icrc.update(piece);
                rest = after;
            }
            icrc.update(rest);
            let mut pseudo = [0xFF; 8].to_vec();
            let mut scratch = [0u8; IPV4_MAX_HEADER_LEN];
            pseudo.extend_from_slice(masked_ipv4(ip, &mut scratch).unwrap());
            pseudo.extend_from_slice(&masked_udp(udp).unwrap());
            pseudo.extend_from_slice(&covered);
            pseudo[8 + 20 + 8 + 4] = ONES;
            prop_assert_eq!(icrc.finish(), crc32fast::hash(&pseudo));
        });
    }
}
