//! The IP and UDP headers around a RoCE packet.
//!
//! A transport that sends RoCE packets through a kernel UDP socket never
//! sees the IP header, yet the ICRC covers it. [`Flow`] therefore rebuilds
//! the IP and UDP headers from the addresses, ports and packet length
//! alone. The ICRC ignores the masked fields (IPv4 TOS, TTL, checksum; IPv6
//! traffic class, flow label, hop limit; UDP checksum), but every other
//! field must equal what is on the wire. The values used:
//!
//! * IPv4: version 4, IHL 5 (no options), total length = 28 + RoCE
//!   length, **flags DF with fragment offset 0** (`0x4000`), protocol 17,
//!   and the **identification** the caller names (0 for [`Flow::seal`],
//!   [`Flow::verify`] and [`Flow::headers`]). DF is what Linux rxe sends
//!   (every IPv4 header it prepares has `IP_DF`), and a Linux UDP socket
//!   with `IP_MTU_DISCOVER` = `IP_PMTUDISC_DO` sends DF datagrams; when it
//!   is not connected their identification is 0, and the segments of one
//!   UDP GSO send are numbered 0, 1, 2, ... (measured; see the transport's
//!   `send_batch`). So a sender seals each packet with
//!   [`Flow::seal_with_identification`] and the identification it will
//!   carry. A receiver cannot see the identification through a UDP
//!   socket (rxe draws it from a hashed counter):
//!   [`Flow::verify_recovering_identification`] recovers it from the ICRC
//!   instead, at the cost described in [`crate::identification`].
//! * IPv6: version 6, payload length = 8 + RoCE length, next header 17
//!   (no extension headers). Nothing else is unmasked but the addresses,
//!   so IPv6 flows need no assumption and are checked exactly.
//! * UDP: the ports, length = 8 + RoCE length.
//!
//! For the masked fields the built headers carry ordinary values (TOS and
//! traffic class 0, flow label 0, TTL and hop limit 64, a correct IPv4
//! header checksum, UDP checksum 0 as rxe sends) so they can also be used
//! to write capture files.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::error::{HeaderKind, WireError};
use crate::icrc;
use crate::identification;
use crate::{ICRC_LEN, IPV4_HEADER_LEN, IPV6_HEADER_LEN, UDP_HEADER_LEN};

/// IPv4 identification [`Flow::seal`], [`Flow::verify`] and
/// [`Flow::headers`] use: an unconnected Linux UDP socket's DF datagrams
/// carry it (see the module docs).
pub const IPV4_ASSUMED_IDENTIFICATION: u16 = 0;
/// IPv4 flags and fragment offset assumed by [`Flow`]: DF, offset 0.
pub const IPV4_ASSUMED_FLAGS_FRAGMENT: u16 = 0x4000;
/// TTL and hop limit written into built headers (masked by the ICRC).
pub const DEFAULT_HOP_LIMIT: u8 = 64;
/// The IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;

/// Largest RoCE packet (BTH through ICRC) an IPv4 datagram can carry.
const IPV4_MAX_ROCE_LEN: usize = u16::MAX as usize - IPV4_HEADER_LEN - UDP_HEADER_LEN;
/// Largest RoCE packet the IPv6 payload length (and UDP length) allows.
const IPV6_MAX_ROCE_LEN: usize = u16::MAX as usize - UDP_HEADER_LEN;
/// Where the identification field ends in an IPv4 header (bytes 4 and 5).
const IPV4_IDENTIFICATION_END: usize = 6;

/// Source and destination addresses of one IP version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpPair {
    /// IPv4 addresses.
    V4 {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
    },
    /// IPv6 addresses.
    V6 {
        /// Source address.
        src: Ipv6Addr,
        /// Destination address.
        dst: Ipv6Addr,
    },
}

/// An IP/UDP 4-tuple carrying RoCEv2: enough to rebuild the headers the
/// ICRC covers (see the module docs for the assumed field values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    /// Addresses.
    pub addrs: IpPair,
    /// UDP source port (RoCEv2 uses it for flow entropy).
    pub src_port: u16,
    /// UDP destination port (normally [`crate::ROCE_V2_UDP_PORT`]).
    pub dst_port: u16,
}

/// The IP and UDP headers of one packet, as built by [`Flow::headers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpUdpHeaders {
    /// IPv4 and UDP.
    V4 {
        /// IPv4 header.
        ip: [u8; IPV4_HEADER_LEN],
        /// UDP header.
        udp: [u8; UDP_HEADER_LEN],
    },
    /// IPv6 and UDP.
    V6 {
        /// IPv6 header.
        ip: [u8; IPV6_HEADER_LEN],
        /// UDP header.
        udp: [u8; UDP_HEADER_LEN],
    },
}

impl IpUdpHeaders {
    /// The IP header bytes.
    pub fn ip(&self) -> &[u8] {
        match self {
            Self::V4 { ip, .. } => ip,
            Self::V6 { ip, .. } => ip,
        }
    }

    /// The UDP header bytes.
    pub fn udp(&self) -> &[u8; UDP_HEADER_LEN] {
        match self {
            Self::V4 { udp, .. } | Self::V6 { udp, .. } => udp,
        }
    }

    /// The headers with traffic class `class` (the IPv4 TOS, its header
    /// checksum updated; the IPv6 traffic class). The ICRC masks the
    /// field: a packet sealed under one class is sealed under any.
    pub fn with_traffic_class(mut self, class: u8) -> Self {
        match &mut self {
            Self::V4 { ip, .. } => {
                ip[1] = class;
                ip[10..12].fill(0);
                let sum = ipv4_checksum(ip).to_be_bytes();
                ip[10..12].copy_from_slice(&sum);
            }
            Self::V6 { ip, .. } => {
                ip[0] = 0x60 | (class >> 4);
                ip[1] = (class << 4) | (ip[1] & 0x0F);
            }
        }
        self
    }
}

impl Flow {
    /// An IPv4 flow.
    pub const fn v4(src: Ipv4Addr, dst: Ipv4Addr, src_port: u16, dst_port: u16) -> Self {
        Self {
            addrs: IpPair::V4 { src, dst },
            src_port,
            dst_port,
        }
    }

    /// An IPv6 flow.
    pub const fn v6(src: Ipv6Addr, dst: Ipv6Addr, src_port: u16, dst_port: u16) -> Self {
        Self {
            addrs: IpPair::V6 { src, dst },
            src_port,
            dst_port,
        }
    }

    /// A flow between two socket addresses of the same IP version.
    pub fn from_sockets(src: SocketAddr, dst: SocketAddr) -> Result<Self, WireError> {
        match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Ok(Self::v4(s, d, src.port(), dst.port())),
            (IpAddr::V6(s), IpAddr::V6(d)) => Ok(Self::v6(s, d, src.port(), dst.port())),
            _ => Err(WireError::AddressFamilyMismatch),
        }
    }

    /// The same flow seen from the other end (for responses).
    #[must_use]
    pub const fn reversed(&self) -> Self {
        let addrs = match self.addrs {
            IpPair::V4 { src, dst } => IpPair::V4 { src: dst, dst: src },
            IpPair::V6 { src, dst } => IpPair::V6 { src: dst, dst: src },
        };
        Self {
            addrs,
            src_port: self.dst_port,
            dst_port: self.src_port,
        }
    }

    /// Builds the IP and UDP headers of a packet whose UDP payload (BTH
    /// through ICRC) is `roce_len` bytes, with IPv4 identification 0.
    /// Fails with [`WireError::TooLong`] if the lengths do not fit their
    /// 16-bit fields.
    pub fn headers(&self, roce_len: usize) -> Result<IpUdpHeaders, WireError> {
        self.headers_with_identification(roce_len, IPV4_ASSUMED_IDENTIFICATION)
    }

    /// As [`Flow::headers`], with the given IPv4 identification (an IPv6
    /// header has none and ignores it).
    pub fn headers_with_identification(
        &self,
        roce_len: usize,
        identification: u16,
    ) -> Result<IpUdpHeaders, WireError> {
        let max = match self.addrs {
            IpPair::V4 { .. } => IPV4_MAX_ROCE_LEN,
            IpPair::V6 { .. } => IPV6_MAX_ROCE_LEN,
        };
        let too_long = WireError::TooLong { len: roce_len };
        if roce_len > max {
            return Err(too_long);
        }
        let udp_len = u16::try_from(UDP_HEADER_LEN + roce_len).map_err(|_| too_long)?;
        let udp = self.udp_header(udp_len);
        Ok(match self.addrs {
            IpPair::V4 { src, dst } => IpUdpHeaders::V4 {
                // Cannot overflow: roce_len <= IPV4_MAX_ROCE_LEN.
                ip: ipv4_header(
                    src,
                    dst,
                    udp_len.saturating_add(IPV4_HEADER_LEN as u16),
                    identification,
                ),
                udp,
            },
            IpPair::V6 { src, dst } => IpUdpHeaders::V6 {
                ip: ipv6_header(src, dst, udp_len),
                udp,
            },
        })
    }

    fn udp_header(&self, udp_len: u16) -> [u8; UDP_HEADER_LEN] {
        let [s0, s1] = self.src_port.to_be_bytes();
        let [d0, d1] = self.dst_port.to_be_bytes();
        let [l0, l1] = udp_len.to_be_bytes();
        [s0, s1, d0, d1, l0, l1, 0, 0]
    }

    /// The ICRC of a packet of this flow with IPv4 identification 0;
    /// `covered` is BTH through pad.
    pub fn icrc(&self, covered: &[u8]) -> Result<u32, WireError> {
        self.icrc_with_identification(covered, IPV4_ASSUMED_IDENTIFICATION)
    }

    /// The ICRC of a packet of this flow carrying the given IPv4
    /// identification (ignored for IPv6); `covered` is BTH through pad.
    pub fn icrc_with_identification(
        &self,
        covered: &[u8],
        identification: u16,
    ) -> Result<u32, WireError> {
        let roce_len = covered.len().saturating_add(ICRC_LEN);
        let headers = self.headers_with_identification(roce_len, identification)?;
        icrc::icrc(headers.ip(), headers.udp(), covered)
    }

    /// Starts the ICRC of a packet of this flow, `roce_len` bytes from
    /// the BTH through the ICRC, carrying the given IPv4 identification
    /// (ignored for IPv6), for its writer to feed the rest as it writes
    /// it ([`icrc::Icrc`]).
    pub fn icrc_start(
        &self,
        roce_len: usize,
        identification: u16,
    ) -> Result<icrc::Icrc, WireError> {
        let headers = self.headers_with_identification(roce_len, identification)?;
        icrc::Icrc::start(headers.ip(), headers.udp())
    }

    /// Computes the ICRC of `packet` (BTH through ICRC) for IPv4
    /// identification 0 and stores it in its last four bytes.
    pub fn seal(&self, packet: &mut [u8]) -> Result<(), WireError> {
        self.seal_with_identification(packet, IPV4_ASSUMED_IDENTIFICATION)
    }

    /// Computes the ICRC of `packet` (BTH through ICRC) for the IPv4
    /// identification it will carry (ignored for IPv6) and stores it in
    /// its last four bytes.
    pub fn seal_with_identification(
        &self,
        packet: &mut [u8],
        identification: u16,
    ) -> Result<(), WireError> {
        icrc::seal_with(packet, |covered| {
            self.icrc_with_identification(covered, identification)
        })
    }

    /// Checks the ICRC in the last four bytes of `packet` (BTH through
    /// ICRC) exactly, with IPv4 identification 0.
    pub fn verify(&self, packet: &[u8]) -> Result<(), WireError> {
        let (covered, found) = icrc::split_icrc(packet)?;
        icrc::check(self.icrc(covered)?, found)
    }

    /// Checks the ICRC in the last four bytes of `packet` (BTH through
    /// ICRC) without knowing the IPv4 identification: `Ok(Some(id))` with
    /// the identification the packet was sealed with, `Ok(None)` for IPv6
    /// (checked exactly, there is no identification), or
    /// [`WireError::BadIcrc`] (`computed` is the ICRC for identification
    /// 0). On IPv4 every other covered field is checked, but a random
    /// corruption passes with probability 2^-16 rather than 2^-32
    /// ([`crate::identification`]).
    pub fn verify_recovering_identification(
        &self,
        packet: &[u8],
    ) -> Result<Option<u16>, WireError> {
        let start = self.icrc_start(packet.len(), IPV4_ASSUMED_IDENTIFICATION)?;
        self.verify_recovering_identification_from(start, packet)
    }

    /// As [`Flow::verify_recovering_identification`], with the ICRC
    /// already started over the packet's headers for identification 0
    /// (by [`crate::IcrcStarts`], which keeps such starts).
    pub fn verify_recovering_identification_from(
        &self,
        start: icrc::Icrc,
        packet: &[u8],
    ) -> Result<Option<u16>, WireError> {
        let (covered, found) = icrc::split_icrc(packet)?;
        let computed = start.over(covered)?;
        match self.addrs {
            IpPair::V6 { .. } => icrc::check(computed, found).map(|()| None),
            IpPair::V4 { .. } => {
                let bytes_after =
                    IPV4_HEADER_LEN - IPV4_IDENTIFICATION_END + UDP_HEADER_LEN + covered.len();
                identification::recover(computed, found, bytes_after)
                    .map(Some)
                    .ok_or(WireError::BadIcrc { computed, found })
            }
        }
    }
}

fn ipv4_header(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    total_len: u16,
    identification: u16,
) -> [u8; IPV4_HEADER_LEN] {
    let [t0, t1] = total_len.to_be_bytes();
    let [i0, i1] = identification.to_be_bytes();
    let [f0, f1] = IPV4_ASSUMED_FLAGS_FRAGMENT.to_be_bytes();
    let [s0, s1, s2, s3] = src.octets();
    let [d0, d1, d2, d3] = dst.octets();
    #[rustfmt::skip]
    let mut h = [
        0x45, 0, t0, t1,                         // version and IHL, TOS, total length
        i0, i1, f0, f1,                          // identification, flags and offset
        DEFAULT_HOP_LIMIT, IPPROTO_UDP, 0, 0,    // TTL, protocol, checksum (below)
        s0, s1, s2, s3,
        d0, d1, d2, d3,
    ];
    let [c0, c1] = ipv4_checksum(&h).to_be_bytes();
    h[10] = c0;
    h[11] = c1;
    h
}

/// The Internet checksum of an IPv4 header whose checksum field is zero.
fn ipv4_checksum(header: &[u8; IPV4_HEADER_LEN]) -> u16 {
    let mut sum: u32 = header
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    // The loop leaves at most 16 bits.
    !(sum as u16)
}

fn ipv6_header(src: Ipv6Addr, dst: Ipv6Addr, payload_len: u16) -> [u8; IPV6_HEADER_LEN] {
    let mut h = [0u8; IPV6_HEADER_LEN];
    let [p0, p1] = payload_len.to_be_bytes();
    let fixed = [0x60, 0, 0, 0, p0, p1, IPPROTO_UDP, DEFAULT_HOP_LIMIT];
    let (head, addrs) = h.split_at_mut(8);
    head.copy_from_slice(&fixed);
    let (s, d) = addrs.split_at_mut(16);
    s.copy_from_slice(&src.octets());
    d.copy_from_slice(&dst.octets());
    h
}

/// An IP datagram split into its IP header, UDP header and UDP payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpPacket<'a> {
    /// The IP header (IPv4 with any options, or the 40-byte IPv6 header).
    pub ip_header: &'a [u8],
    /// The UDP header.
    pub udp_header: &'a [u8; UDP_HEADER_LEN],
    /// The UDP payload, trimmed to the UDP length (for RoCEv2: BTH through
    /// ICRC).
    pub udp_payload: &'a [u8],
}

impl<'a> IpPacket<'a> {
    /// Splits an IPv4 or IPv6 datagram carrying UDP. Bytes past the IP
    /// length (link-layer padding) are ignored; fragments, IPv6 extension
    /// headers and inconsistent lengths are errors.
    pub fn parse(packet: &'a [u8]) -> Result<Self, WireError> {
        match packet.first().map(|b| b >> 4) {
            Some(4) => Self::parse_v4(packet),
            Some(6) => Self::parse_v6(packet),
            Some(_) => Err(bad(HeaderKind::Ipv4, "IP version is neither 4 nor 6")),
            None => Err(truncated(HeaderKind::Ipv4, IPV4_HEADER_LEN, 0)),
        }
    }

    fn parse_v4(packet: &'a [u8]) -> Result<Self, WireError> {
        let fixed = packet.first_chunk::<IPV4_HEADER_LEN>().ok_or(truncated(
            HeaderKind::Ipv4,
            IPV4_HEADER_LEN,
            packet.len(),
        ))?;
        let header_len = usize::from(fixed[0] & 0x0F) * 4;
        let total_len = usize::from(u16::from_be_bytes([fixed[2], fixed[3]]));
        let flags_fragment = u16::from_be_bytes([fixed[6], fixed[7]]);
        if header_len < IPV4_HEADER_LEN {
            return Err(bad(HeaderKind::Ipv4, "IHL below 5"));
        }
        if fixed[9] != IPPROTO_UDP {
            return Err(bad(HeaderKind::Ipv4, "protocol is not UDP"));
        }
        if flags_fragment & 0x3FFF != 0 {
            return Err(bad(HeaderKind::Ipv4, "fragmented datagram"));
        }
        if total_len < header_len {
            return Err(bad(HeaderKind::Ipv4, "total length below header length"));
        }
        let datagram =
            packet
                .get(..total_len)
                .ok_or(truncated(HeaderKind::Ipv4, total_len, packet.len()))?;
        let (ip_header, rest) = split(datagram, header_len, HeaderKind::Ipv4)?;
        Self::with_udp(ip_header, rest)
    }

    fn parse_v6(packet: &'a [u8]) -> Result<Self, WireError> {
        let (fixed, rest) = packet
            .split_first_chunk::<IPV6_HEADER_LEN>()
            .ok_or(truncated(HeaderKind::Ipv6, IPV6_HEADER_LEN, packet.len()))?;
        let payload_len = usize::from(u16::from_be_bytes([fixed[4], fixed[5]]));
        if fixed[6] != IPPROTO_UDP {
            return Err(bad(
                HeaderKind::Ipv6,
                "next header is not UDP (extension headers are not supported)",
            ));
        }
        let payload = rest.get(..payload_len).ok_or(truncated(
            HeaderKind::Ipv6,
            IPV6_HEADER_LEN + payload_len,
            packet.len(),
        ))?;
        Self::with_udp(fixed, payload)
    }

    fn with_udp(ip_header: &'a [u8], ip_payload: &'a [u8]) -> Result<Self, WireError> {
        let (udp_header, _) = ip_payload
            .split_first_chunk::<UDP_HEADER_LEN>()
            .ok_or(truncated(HeaderKind::Udp, UDP_HEADER_LEN, ip_payload.len()))?;
        let udp_len = usize::from(u16::from_be_bytes([udp_header[4], udp_header[5]]));
        if udp_len < UDP_HEADER_LEN {
            return Err(bad(HeaderKind::Udp, "length below 8"));
        }
        let udp_payload = ip_payload.get(UDP_HEADER_LEN..udp_len).ok_or(truncated(
            HeaderKind::Udp,
            udp_len,
            ip_payload.len(),
        ))?;
        Ok(Self {
            ip_header,
            udp_header,
            udp_payload,
        })
    }

    /// The flow (addresses and ports) of this datagram.
    pub fn flow(&self) -> Flow {
        let [s0, s1, d0, d1, ..] = *self.udp_header;
        let (sport, dport) = (u16::from_be_bytes([s0, s1]), u16::from_be_bytes([d0, d1]));
        match self.addrs() {
            IpPair::V4 { src, dst } => Flow::v4(src, dst, sport, dport),
            IpPair::V6 { src, dst } => Flow::v6(src, dst, sport, dport),
        }
    }

    fn addrs(&self) -> IpPair {
        let ip = self.ip_header;
        if ip.first().map(|b| b >> 4) == Some(6) {
            IpPair::V6 {
                src: Ipv6Addr::from(array_at::<16>(ip, 8)),
                dst: Ipv6Addr::from(array_at::<16>(ip, 24)),
            }
        } else {
            IpPair::V4 {
                src: Ipv4Addr::from(array_at::<4>(ip, 12)),
                dst: Ipv4Addr::from(array_at::<4>(ip, 16)),
            }
        }
    }

    /// Checks the ICRC of the UDP payload against these very headers.
    pub fn verify_icrc(&self) -> Result<(), WireError> {
        icrc::verify(self.ip_header, self.udp_header, self.udp_payload)
    }
}

/// `N` bytes of `buf` from `at`, zeros if out of range. Used only where
/// `parse` has already checked the length.
fn array_at<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    buf.get(at..)
        .and_then(|s| s.first_chunk::<N>())
        .copied()
        .unwrap_or([0; N])
}

fn split(buf: &[u8], at: usize, header: HeaderKind) -> Result<(&[u8], &[u8]), WireError> {
    if buf.len() < at {
        return Err(truncated(header, at, buf.len()));
    }
    Ok(buf.split_at(at))
}

fn truncated(header: HeaderKind, needed: usize, available: usize) -> WireError {
    WireError::Truncated {
        header,
        needed,
        available,
    }
}

fn bad(header: HeaderKind, reason: &'static str) -> WireError {
    WireError::BadIpHeader { header, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow4() -> Flow {
        Flow::v4(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            1234,
            4791,
        )
    }

    /// The traffic class lands in the IPv4 TOS (the header checksum still
    /// right) and the IPv6 traffic class (version and flow label kept).
    #[test]
    fn the_traffic_class_is_the_tos_or_the_ipv6_class() {
        let h = flow4().headers(32).unwrap().with_traffic_class(0x48);
        let IpUdpHeaders::V4 { ip, .. } = h else {
            panic!("not v4")
        };
        assert_eq!(ip[1], 0x48);
        assert_eq!(ipv4_checksum(&ip), 0, "sums with itself to all ones");
        let six = Flow::v6(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST, 1234, 4791);
        let h = six.headers(32).unwrap().with_traffic_class(0xb8);
        assert_eq!(&h.ip()[..4], &[0x6b, 0x80, 0, 0]);
    }

    #[test]
    fn ipv4_header_fields() {
        let h = flow4().headers(32).unwrap();
        let IpUdpHeaders::V4 { ip, udp } = h else {
            panic!("not v4")
        };
        let mut expected = [
            0x45, 0, 0, 60, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        expected[10] = ip[10];
        expected[11] = ip[11];
        assert_eq!(ip, expected);
        // A correct checksum sums (with itself) to all ones.
        assert_eq!(ipv4_checksum(&ip), 0);
        assert_eq!(udp, [0x04, 0xD2, 0x12, 0xB7, 0, 40, 0, 0]);
    }

    #[test]
    fn identification_is_written_and_recovered() {
        let h = flow4().headers_with_identification(32, 0xBEEF).unwrap();
        let IpUdpHeaders::V4 { ip, .. } = h else {
            panic!("not v4")
        };
        assert_eq!(&ip[4..8], &[0xBE, 0xEF, 0x40, 0]);
        assert_eq!(ipv4_checksum(&ip), 0);

        let mut pkt = [0x5Au8; 40];
        flow4().seal_with_identification(&mut pkt, 0xBEEF).unwrap();
        assert_eq!(
            flow4().verify_recovering_identification(&pkt),
            Ok(Some(0xBEEF))
        );
        assert!(flow4().verify(&pkt).is_err(), "the exact check assumes 0");
        let computed = flow4().icrc(&pkt[..36]).unwrap();
        pkt[39] ^= 0x80;
        assert_eq!(
            flow4().verify_recovering_identification(&pkt),
            Err(WireError::BadIcrc {
                computed,
                found: u32::from_le_bytes([pkt[36], pkt[37], pkt[38], pkt[39]])
            })
        );
        assert!(flow4().verify_recovering_identification(&pkt[..3]).is_err());
    }

    #[test]
    fn ipv6_ignores_the_identification_and_checks_exactly() {
        let v6 = Flow::v6(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST, 1, 4791);
        let mut pkt = [0x33u8; 24];
        v6.seal_with_identification(&mut pkt, 0x1234).unwrap();
        assert_eq!(v6.verify(&pkt), Ok(()));
        assert_eq!(v6.verify_recovering_identification(&pkt), Ok(None));
        pkt[23] ^= 1;
        assert!(v6.verify_recovering_identification(&pkt).is_err());
    }

    #[test]
    fn ipv6_header_fields() {
        let src: Ipv6Addr = "fe80::1".parse().unwrap();
        let dst: Ipv6Addr = "fe80::2".parse().unwrap();
        let h = Flow::v6(src, dst, 5, 4791).headers(100).unwrap();
        let ip = h.ip();
        assert_eq!(&ip[..8], &[0x60, 0, 0, 0, 0, 108, 17, 64]);
        assert_eq!(&ip[8..24], &src.octets());
        assert_eq!(&ip[24..], &dst.octets());
        assert_eq!(h.udp(), &[0, 5, 0x12, 0xB7, 0, 108, 0, 0]);
    }

    #[test]
    fn length_limits() {
        assert!(flow4().headers(IPV4_MAX_ROCE_LEN).is_ok());
        assert_eq!(
            flow4().headers(IPV4_MAX_ROCE_LEN + 1),
            Err(WireError::TooLong {
                len: IPV4_MAX_ROCE_LEN + 1
            })
        );
        let v6 = Flow::v6(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST, 1, 2);
        assert!(v6.headers(IPV6_MAX_ROCE_LEN).is_ok());
        assert!(v6.headers(IPV6_MAX_ROCE_LEN + 1).is_err());
        assert!(v6.headers(usize::MAX).is_err());
    }

    #[test]
    fn from_sockets_and_reversed() {
        let a: SocketAddr = "10.0.0.1:1234".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:4791".parse().unwrap();
        let c: SocketAddr = "[::1]:4791".parse().unwrap();
        assert_eq!(Flow::from_sockets(a, b), Ok(flow4()));
        assert_eq!(
            Flow::from_sockets(a, c),
            Err(WireError::AddressFamilyMismatch)
        );
        let r = flow4().reversed();
        assert_eq!(r.src_port, 4791);
        assert_eq!(r.reversed(), flow4());
    }

    #[test]
    fn split_round_trips_built_headers() {
        let roce = [0x11u8; 20];
        let h = flow4().headers(roce.len()).unwrap();
        let mut pkt = [h.ip(), &h.udp()[..], &roce[..]].concat();
        pkt.extend_from_slice(&[0, 0]); // link-layer padding is ignored
        let split = IpPacket::parse(&pkt).unwrap();
        assert_eq!(split.ip_header, h.ip());
        assert_eq!(split.udp_payload, &roce);
        assert_eq!(split.flow(), flow4());
    }

    #[test]
    fn split_rejects_malformed_datagrams() {
        let roce = [0u8; 16];
        let h = flow4().headers(roce.len()).unwrap();
        let pkt = [h.ip(), &h.udp()[..], &roce[..]].concat();
        assert!(IpPacket::parse(&[]).is_err());
        for len in 0..pkt.len() {
            assert!(IpPacket::parse(&pkt[..len]).is_err(), "{len}");
        }
        let mut bad = pkt.clone();
        bad[9] = 6;
        assert!(IpPacket::parse(&bad).is_err());
        let mut bad = pkt.clone();
        bad[7] = 1; // fragment offset
        assert!(IpPacket::parse(&bad).is_err());
        let mut bad = pkt.clone();
        bad[0] = 0x44;
        assert!(IpPacket::parse(&bad).is_err());
        let mut bad = pkt.clone();
        bad[25] = 4; // UDP length below 8
        assert!(IpPacket::parse(&bad).is_err());
        let mut bad = pkt;
        bad[0] = 0x75;
        assert!(IpPacket::parse(&bad).is_err());
    }
}
