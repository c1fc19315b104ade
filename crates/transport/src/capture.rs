//! Packet capture: every RoCE packet a process's devices send and accept,
//! or every packet the daemon receives, written to a pcap file that
//! Wireshark and tshark decode as RoCEv2 with no "Decode As".
//!
//! `SOFTVERBS_PCAP=FILE` turns it on for a process (every context of the
//! process writes into the one file); `softverbs daemon --pcap FILE` for a
//! daemon. A `%p` in FILE is replaced by the process id, so several
//! processes given the same setting each write their own file (without
//! it, a process that finds the file written by another writes its
//! `NAME-PID.pcap` beside it: `softverbs_trace::own_file`).
//!
//! A UDP socket never shows the IP and UDP headers, so each packet is
//! written with headers rebuilt from its addresses and ports
//! ([`Flow::headers_with_identification`]), carrying the IPv4
//! identification it really had (the one its ICRC was sealed with), so
//! that its ICRC checks against the headers written (as scapy's RoCE layer
//! verifies in `make capture`), plus a real UDP checksum (IPv6 forbids
//! zero) and IPv4 header checksum. The file is classic pcap with
//! nanosecond timestamps and link type raw IP (LINKTYPE_RAW), so IPv4 and
//! IPv6 packets can share it. Each packet is one `write` to the file:
//! nothing is buffered in the process, so a program that exits or is
//! killed leaves a complete file up to its last packet.

use byteorder::LittleEndian;
use internet_checksum::Checksum;
use parking_lot::Mutex;
use pcap_file::pcap::{PcapHeader, PcapPacket};
use pcap_file::{DataLink, Endianness, TsResolution};
use softverbs_wire::ip::{IpPair, IpUdpHeaders, IPPROTO_UDP};
use softverbs_wire::Flow;
use std::ffi::OsStr;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// The environment variable naming a process's capture file.
pub const ENV: &str = "SOFTVERBS_PCAP";

/// Longest record: an IPv4 or IPv6 datagram (the pcap header's snaplen).
const SNAPLEN: u32 = 65_535 + 40;

/// The process's capture, once [`open_from_env`] ran (`None` inside: the
/// variable is unset).
static PROCESS: OnceLock<Option<Capture>> = OnceLock::new();

/// A pcap file packets are written to, from any thread.
#[derive(Debug)]
pub struct Capture {
    path: PathBuf,
    out: Mutex<Out>,
}

#[derive(Debug)]
struct Out {
    file: softverbs_trace::own_file::OwnFile,
    /// The IP datagram being written, reused.
    datagram: Vec<u8>,
    /// Its pcap record, reused: written with one `write`.
    record: Vec<u8>,
    /// A write failed: the capture stopped (said once on stderr).
    stopped: bool,
}

/// Opens the process's capture file if `SOFTVERBS_PCAP` names one; later
/// calls do nothing. Every context calls it as it opens, so a file that
/// cannot be created fails the first context rather than passing unseen.
pub fn open_from_env() -> io::Result<()> {
    // Contexts opening at once: one creates the file, the others see it.
    static OPENING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = OPENING.lock();
    if PROCESS.get().is_some() {
        return Ok(());
    }
    let capture = match std::env::var_os(ENV).filter(|v| !v.is_empty()) {
        Some(template) => Some(
            Capture::create(&template)
                .map_err(|e| io::Error::other(format!("{ENV}={template:?}: {e}")))?,
        ),
        None => None,
    };
    let _ = PROCESS.set(capture); // unset until now: checked under the lock
    Ok(())
}

/// The process's capture, if `SOFTVERBS_PCAP` turned one on: one atomic
/// load and a branch per packet when it did not.
#[inline]
pub fn process() -> Option<&'static Capture> {
    PROCESS.get().and_then(Option::as_ref)
}

impl Capture {
    /// Creates (or empties) the file `template` names, `%p` replaced by
    /// this process's id (or, if another process writes it, the one
    /// beside it: `softverbs_trace::own_file`), and writes the pcap header.
    pub fn create(template: &OsStr) -> io::Result<Capture> {
        let mut file = softverbs_trace::own_file::create(template)?;
        let path = file.path.clone();
        let header = PcapHeader {
            snaplen: SNAPLEN,
            datalink: DataLink::RAW,
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::Little,
            ..PcapHeader::default()
        };
        let mut bytes = Vec::with_capacity(24);
        header.write_to(&mut bytes).map_err(io::Error::other)?;
        file.write_all(&bytes)?;
        Ok(Capture {
            path,
            out: Mutex::new(Out {
                file,
                datagram: Vec::with_capacity(1 << 16),
                record: Vec::with_capacity(1 << 16),
                stopped: false,
            }),
        })
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one RoCE packet (BTH through ICRC) of `flow`, which carried
    /// IPv4 identification `identification` (ignored for IPv6) and
    /// traffic class `class` (the IPv4 TOS or IPv6 traffic class; the
    /// ICRC does not cover it).
    pub fn packet(&self, flow: &Flow, identification: u16, class: u8, roce: &[u8]) {
        let Ok(headers) = flow.headers_with_identification(roce.len(), identification) else {
            return; // longer than a datagram: it never went anywhere
        };
        let headers = headers.with_traffic_class(class);
        let mut out = self.out.lock();
        if out.stopped {
            return;
        }
        let Out {
            file,
            datagram,
            record,
            stopped,
        } = &mut *out;
        build_datagram(datagram, flow, &headers, roce);
        record.clear();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        // The datagram is shorter than SNAPLEN (headers_with_identification
        // checked the lengths), so the record is always valid.
        let len = datagram.len() as u32;
        let written = PcapPacket::new(now, len, datagram)
            .write_to::<_, LittleEndian>(record, TsResolution::NanoSecond, SNAPLEN)
            .map_err(io::Error::other)
            .and_then(|_| file.write_all(record));
        if let Err(e) = written {
            *stopped = true;
            crate::say!("softverbs: capture to {} stopped: {e}", self.path.display());
        }
    }

    /// Writes the packets of one datagram of traffic class `class` as the
    /// daemon received or sent it (UDP GRO may have coalesced several):
    /// see [`Capture::packets`].
    pub fn datagram(
        &self,
        (src, dst): (SocketAddr, SocketAddr),
        class: u8,
        segment: usize,
        bytes: &[u8],
    ) {
        if let Ok(flow) = Flow::from_sockets(src, dst) {
            self.packets(&flow, class, segment, bytes);
        } // else impossible: a socket receives from its own address family
    }

    /// Writes the RoCE packets in `bytes`, `segment` bytes each but the
    /// last, with the IPv4 identification each was sealed with, recovered
    /// from its ICRC (`Flow::verify_recovering_identification`): the one
    /// a packet sent alone or as segment *i* of a GSO send carries, and
    /// the one an arriving packet came with. A packet whose ICRC explains
    /// none is written with 0, and its ICRC does not check against the
    /// header written, which is the truth. All carried traffic class
    /// `class`.
    pub fn packets(&self, flow: &Flow, class: u8, segment: usize, bytes: &[u8]) {
        for packet in bytes.chunks(segment.max(1)) {
            let identification = flow
                .verify_recovering_identification(packet)
                .ok()
                .flatten()
                .unwrap_or(0);
            self.packet(flow, identification, class, packet);
        }
    }
}

/// A packet of traffic class `class` a context accepted (its ICRC
/// checked), if the process captures.
#[inline]
pub fn received(flow: &Flow, class: u8, packet: &[u8]) {
    if let Some(capture) = process() {
        capture.packets(flow, class, packet.len(), packet);
    }
}

/// A CM MAD (a GSI packet, its ICRC checked) of traffic class `class`
/// the process's rdma_cm accepted from `src` at `dst`, if the process
/// captures: it comes from the daemon, past any context's receive path.
pub fn received_mad(src: SocketAddr, dst: SocketAddr, class: u8, packet: &[u8]) {
    if let (Some(capture), Ok(flow)) = (process(), Flow::from_sockets(src, dst)) {
        capture.packets(&flow, class, packet.len(), packet);
    }
}

/// The sealed packets of `flow` a context hands to its socket at once
/// (`segment` bytes each but the last) with traffic class `class`, if the
/// process captures.
#[inline]
pub fn sent(flow: Option<Flow>, class: u8, segment: usize, bytes: &[u8]) {
    if let (Some(capture), Some(flow)) = (process(), flow) {
        capture.packets(&flow, class, segment, bytes);
    }
}

/// Fills `datagram` with the IP header, the UDP header (with its
/// checksum) and the RoCE packet.
fn build_datagram(datagram: &mut Vec<u8>, flow: &Flow, headers: &IpUdpHeaders, roce: &[u8]) {
    let mut udp = *headers.udp();
    let checksum = udp_checksum(flow, &udp, roce);
    udp[6..8].copy_from_slice(&checksum);
    datagram.clear();
    datagram.extend_from_slice(headers.ip());
    datagram.extend_from_slice(&udp);
    datagram.extend_from_slice(roce);
}

/// The UDP checksum over the pseudo-header, the UDP header (its checksum
/// field zero) and the payload (RFC 768, RFC 8200 section 8.1). A sum of
/// zero is sent as 0xFFFF: zero means "no checksum", which IPv6 forbids.
fn udp_checksum(flow: &Flow, udp: &[u8; 8], payload: &[u8]) -> [u8; 2] {
    let mut sum = Checksum::new();
    match flow.addrs {
        IpPair::V4 { src, dst } => {
            sum.add_bytes(&src.octets());
            sum.add_bytes(&dst.octets());
        }
        IpPair::V6 { src, dst } => {
            sum.add_bytes(&src.octets());
            sum.add_bytes(&dst.octets());
        }
    }
    // Protocol and UDP length: the 16-bit UDP length counts the same in
    // IPv4's pseudo-header as in IPv6's 32-bit one (upper bytes zero).
    sum.add_bytes(&[0, IPPROTO_UDP]);
    sum.add_bytes(&udp[4..6]);
    sum.add_bytes(&udp[..6]);
    sum.add_bytes(payload);
    match sum.checksum() {
        [0, 0] => [0xFF, 0xFF],
        c => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcap::PcapReader;
    use softverbs_trace::process_path as expand;
    use softverbs_wire::ip::IpPacket;
    use std::fs::File;

    fn roce_packet(flow: &Flow, identification: u16, len: usize) -> Vec<u8> {
        let mut p: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        flow.seal_with_identification(&mut p, identification)
            .unwrap();
        p
    }

    /// The one's complement sum of a datagram's pseudo-header and UDP
    /// part, checksum included, is all ones when the checksum is right.
    fn udp_sum_ok(flow: &Flow, datagram: &[u8]) -> bool {
        let split = IpPacket::parse(datagram).unwrap();
        let mut udp = *split.udp_header;
        let found = [udp[6], udp[7]];
        udp[6..8].fill(0);
        found == udp_checksum(flow, &udp, split.udp_payload) && found != [0, 0]
    }

    #[test]
    fn percent_p_names_the_process() {
        assert_eq!(
            expand(OsStr::new("/tmp/a-%p.pcap"), 42),
            PathBuf::from("/tmp/a-42.pcap")
        );
        assert_eq!(expand(OsStr::new("%p%p"), 7), PathBuf::from("77"));
        assert_eq!(expand(OsStr::new("plain"), 7), PathBuf::from("plain"));
        assert_eq!(expand(OsStr::new("%"), 7), PathBuf::from("%"));
    }

    /// Packets written are read back by pcap-file's reader as raw IP
    /// with nanosecond timestamps, with headers that split, the real
    /// identification, checksums that check and ICRCs that verify.
    #[test]
    fn written_packets_read_back_with_valid_checksums() {
        let dir = std::env::temp_dir().join(format!("sv-capture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let template = dir.join("t-%p.pcap");
        let capture = Capture::create(template.as_os_str()).unwrap();
        let v4 = Flow::v4(
            "127.0.0.1".parse().unwrap(),
            "127.0.0.2".parse().unwrap(),
            50000,
            4791,
        );
        let v6 = Flow::v6("::1".parse().unwrap(), "::1".parse().unwrap(), 4791, 40000);
        let sent = [
            (v4, 3u16, 0x60, 60usize),
            (v6, 0, 0xb8, 1037),
            (v4, 0, 0, 28),
        ];
        for (flow, id, class, len) in sent {
            capture.packet(&flow, id, class, &roce_packet(&flow, id, len));
        }
        let file = File::open(capture.path()).unwrap();
        let mut reader = PcapReader::new(file).unwrap();
        let header = reader.header();
        assert_eq!(header.datalink, DataLink::RAW);
        assert_eq!(header.ts_resolution, TsResolution::NanoSecond);
        for (flow, id, class, len) in sent {
            let record = reader.next_packet().unwrap().unwrap();
            let split = IpPacket::parse(&record.data).unwrap();
            assert_eq!(split.flow(), flow);
            assert_eq!(split.udp_payload.len(), len);
            if let IpPair::V4 { .. } = flow.addrs {
                assert_eq!(&split.ip_header[4..6], &id.to_be_bytes());
                assert_eq!(split.ip_header[1], class, "the TOS");
                assert_eq!(internet_checksum::checksum(split.ip_header), [0, 0]);
            } else {
                let tclass = u16::from_be_bytes([split.ip_header[0], split.ip_header[1]]) >> 4;
                assert_eq!(tclass as u8, class, "the traffic class");
            }
            assert!(udp_sum_ok(&flow, &record.data));
            assert_eq!(split.verify_icrc(), Ok(()));
        }
        assert!(reader.next_packet().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The daemon's path recovers each coalesced packet's identification.
    #[test]
    fn a_coalesced_datagram_is_written_packet_by_packet() {
        let path = std::env::temp_dir().join(format!("sv-capture-gro-{}.pcap", std::process::id()));
        let capture = Capture::create(path.as_os_str()).unwrap();
        let flow = Flow::v4(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            1,
            4791,
        );
        let bytes: Vec<u8> = (0..3u16)
            .flat_map(|i| roce_packet(&flow, i, if i < 2 { 100 } else { 40 }))
            .collect();
        let (src, dst) = (
            "10.0.0.1:1".parse().unwrap(),
            "10.0.0.2:4791".parse().unwrap(),
        );
        capture.datagram((src, dst), 0x48, 100, &bytes);
        let mut reader = PcapReader::new(File::open(&path).unwrap()).unwrap();
        for id in 0..3u16 {
            let record = reader.next_packet().unwrap().unwrap();
            let split = IpPacket::parse(&record.data).unwrap();
            assert_eq!(&split.ip_header[4..6], &id.to_be_bytes());
            assert_eq!(
                split.ip_header[1], 0x48,
                "each packet has the datagram's TOS"
            );
            assert_eq!(split.verify_icrc(), Ok(()));
        }
        std::fs::remove_file(&path).unwrap();
    }
}
