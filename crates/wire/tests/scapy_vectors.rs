//! Cross-check against scapy's RoCEv2 implementation.
//!
//! `tests/vectors/scapy_roce.txt` holds complete IP packets built by
//! `tests/scapy/gen_vectors.py` with `scapy.contrib.roce`, which also
//! computed their ICRCs, plus the field values the script chose. For every
//! packet this test parses the RoCE part, compares the fields, recomputes
//! the ICRC from the raw headers and (where the IP header has the fields
//! `Flow` assumes) from addresses and ports alone, and rebuilds the packet
//! with `PacketBuilder`, expecting scapy's exact bytes. IPv4 packets whose
//! only departure from `Flow` is a non-zero identification (`flow_id=`)
//! must verify without it, yielding it, and seal to scapy's bytes with it.

use std::collections::{HashMap, HashSet};

use softverbs_wire::{
    icrc, AtomicAckEth, AtomicEth, Deth, Flow, Ieth, IpPacket, IpUdpHeaders, Opcode, PacketBuilder,
    PacketView, Reth, Syndrome, WireError,
};

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/scapy_roce.txt");

/// One line of the vectors file.
struct Vector {
    line: usize,
    ipv6: bool,
    fields: HashMap<String, String>,
    packet: Vec<u8>,
}

impl Vector {
    fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    fn num(&self, key: &str) -> u64 {
        let text = self
            .get(key)
            .unwrap_or_else(|| panic!("line {}: no {key}", self.line));
        parse_num(text)
    }

    /// A comma-separated list of numbers, if the field is present.
    fn list(&self, key: &str) -> Option<Vec<u64>> {
        self.get(key)
            .map(|text| text.split(',').map(parse_num).collect())
    }
}

fn parse_num(text: &str) -> u64 {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    }
    .unwrap_or_else(|e| panic!("bad number {text:?}: {e}"))
}

fn unhex(text: &str) -> Vec<u8> {
    assert_eq!(text.len() % 2, 0, "odd hex length");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

fn load() -> Vec<Vector> {
    let text = std::fs::read_to_string(VECTORS)
        .unwrap_or_else(|e| panic!("cannot read {VECTORS}: {e}; run gen_vectors.py"));
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|(i, l)| {
            let mut tokens = l.split_whitespace();
            let ipv6 = match tokens.next() {
                Some("ipv4") => false,
                Some("ipv6") => true,
                other => panic!("line {}: bad family {other:?}", i + 1),
            };
            let fields: HashMap<String, String> = tokens
                .map(|t| {
                    let (k, v) = t.split_once('=').expect("key=value");
                    (k.to_owned(), v.to_owned())
                })
                .collect();
            let packet = unhex(&fields["pkt"]);
            Vector {
                line: i + 1,
                ipv6,
                fields,
                packet,
            }
        })
        .collect()
}

fn check_bth(v: &Vector, view: &PacketView<'_>) {
    let bth = view.bth();
    let line = v.line;
    assert_eq!(
        u64::from(bth.opcode.as_u8()),
        v.num("opcode"),
        "line {line}"
    );
    assert_eq!(bth.opcode.name(), v.get("name").unwrap(), "line {line}");
    assert_eq!(u64::from(bth.psn.get()), v.num("psn"), "line {line}");
    assert_eq!(u64::from(bth.dest_qp.get()), v.num("dqpn"), "line {line}");
    assert_eq!(u64::from(bth.pkey), v.num("pkey"), "line {line}");
    assert_eq!(u64::from(bth.pad_count), v.num("pad"), "line {line}");
    assert_eq!(u64::from(bth.solicited), v.num("se"), "line {line}");
    assert_eq!(u64::from(bth.migreq), v.num("m"), "line {line}");
    assert_eq!(u64::from(bth.fecn), v.num("fecn"), "line {line}");
    assert_eq!(u64::from(bth.becn), v.num("becn"), "line {line}");
    assert_eq!(u64::from(bth.ack_req), v.num("ackreq"), "line {line}");
    assert_eq!(bth.tver, 0, "line {line}");
    assert_eq!(
        view.payload().len() as u64,
        v.num("payload_len"),
        "line {line}"
    );
}

fn check_ext(v: &Vector, view: &PacketView<'_>) {
    let line = v.line;
    let reth = v.list("reth").map(|f| Reth {
        va: f[0],
        rkey: f[1] as u32,
        dma_len: f[2] as u32,
    });
    assert_eq!(view.reth().copied(), reth, "line {line}");
    let atomic = v.list("atomic").map(|f| AtomicEth {
        va: f[0],
        rkey: f[1] as u32,
        swap_add: f[2],
        compare: f[3],
    });
    assert_eq!(view.atomic_eth().copied(), atomic, "line {line}");
    let ack = v
        .list("atomicack")
        .map(|f| AtomicAckEth { orig_data: f[0] });
    assert_eq!(view.atomic_ack_eth().copied(), ack, "line {line}");
    let deth = v.list("deth").map(|f| Deth {
        qkey: f[0] as u32,
        src_qp: softverbs_wire::Qpn::new(f[1] as u32).unwrap(),
    });
    assert_eq!(view.deth().copied(), deth, "line {line}");
    let imm = v.get("imm").map(|_| v.num("imm") as u32);
    assert_eq!(view.imm(), imm, "line {line}");
    let ieth = v.get("ieth").map(|_| Ieth {
        rkey: v.num("ieth") as u32,
    });
    assert_eq!(view.ieth().copied(), ieth, "line {line}");
    let aeth = v.list("aeth");
    assert_eq!(view.aeth().is_some(), aeth.is_some(), "line {line}");
    if let (Some(a), Some(f)) = (view.aeth(), aeth) {
        assert_eq!(Syndrome::decode(f[0] as u8), a.syndrome, "line {line}");
        assert_eq!(a.syndrome.encode(), Ok(f[0] as u8), "line {line}");
        assert_eq!(u64::from(a.msn.get()), f[1], "line {line}");
    }
}

/// The IP header with the fields the ICRC masks zeroed, so headers can be
/// compared on what the ICRC covers.
fn unmasked(ip: &[u8]) -> Vec<u8> {
    let mut ip = ip.to_vec();
    let masked: &[usize] = if ip[0] >> 4 == 6 {
        ip[0] &= 0xF0;
        &[1, 2, 3, 7]
    } else {
        &[1, 8, 10, 11]
    };
    for &i in masked {
        ip[i] = 0;
    }
    ip
}

/// Whether the packet's IP header has exactly the unmasked fields `Flow`
/// assumes, with the given IPv4 identification.
fn has_flow_fields(split: &IpPacket<'_>, flow: &Flow, identification: u16) -> bool {
    let built: IpUdpHeaders = flow
        .headers_with_identification(split.udp_payload.len(), identification)
        .unwrap();
    unmasked(built.ip()) == unmasked(split.ip_header) && built.udp()[..6] == split.udp_header[..6]
}

/// The identification check: an IPv4 packet with `Flow`'s fields but for
/// its identification (the `flow_id=` vectors, and the earlier ones that
/// happen to have DF and no options) verifies without knowing it, yields
/// it, and seals to scapy's bytes with it; any other IPv4 header fails;
/// IPv6 is checked exactly. Returns whether a non-zero identification was
/// recovered.
fn check_identification(v: &Vector, view: &PacketView<'_>, split: &IpPacket<'_>) -> bool {
    let line = v.line;
    let flow = split.flow();
    let roce = split.udp_payload;
    let header_id = u16::from_be_bytes([split.ip_header[4], split.ip_header[5]]);
    let flow_id = (!v.ipv6 && has_flow_fields(split, &flow, header_id)).then_some(header_id);
    if v.get("flow_id").is_some() {
        assert_eq!(
            flow_id.map(u64::from),
            Some(v.num("flow_id")),
            "line {line}"
        );
    }
    let recovered = flow.verify_recovering_identification(roce);
    match (v.ipv6, flow_id) {
        (true, _) => assert_eq!(recovered, Ok(None), "line {line}"),
        (false, None) => assert!(recovered.is_err(), "line {line}: {recovered:?}"),
        (false, Some(id)) => {
            assert_eq!(recovered, Ok(Some(id)), "line {line}");
            let mut buf = vec![0u8; roce.len()];
            let builder = PacketBuilder {
                bth: *view.bth(),
                ext: *view.ext(),
                payload: view.payload(),
            };
            builder.build_unsealed(&mut buf).unwrap();
            flow.seal_with_identification(&mut buf, id).unwrap();
            assert_eq!(buf, roce, "line {line}");
        }
    }
    flow_id.is_some_and(|id| id != 0)
}

/// Rebuilds the RoCE packet from the parsed fields.
fn rebuild(view: &PacketView<'_>, split: &IpPacket<'_>) -> Vec<u8> {
    let builder = PacketBuilder {
        bth: *view.bth(),
        ext: *view.ext(),
        payload: view.payload(),
    };
    let mut buf = vec![0u8; builder.wire_len()];
    let n = builder.build_unsealed(&mut buf).unwrap();
    assert_eq!(n, buf.len());
    icrc::seal(split.ip_header, split.udp_header, &mut buf).unwrap();
    buf
}

#[test]
fn scapy_vectors() {
    let vectors = load();
    assert!(vectors.len() >= 50, "only {} vectors", vectors.len());
    let mut opcodes = HashSet::new();
    let (mut v4_flow_checked, mut v6_flow_checked, mut v4_other) = (0, 0, 0);
    let mut pads = HashSet::new();
    let (mut ipv4_options, mut other_ports, mut nonzero_ids) = (0, 0, 0);

    for v in &vectors {
        let line = v.line;
        let split = IpPacket::parse(&v.packet).unwrap_or_else(|e| panic!("line {line}: {e}"));
        assert_eq!(split.ip_header[0] >> 4 == 6, v.ipv6, "line {line}");
        let roce = split.udp_payload;
        let view = PacketView::parse(roce).unwrap_or_else(|e| panic!("line {line}: {e}"));
        check_bth(v, &view);
        check_ext(v, &view);
        opcodes.insert(view.opcode());
        ipv4_options += usize::from(split.ip_header.len() > 20 && !v.ipv6);
        other_ports += usize::from(split.flow().dst_port != softverbs_wire::ROCE_V2_UDP_PORT);
        pads.insert(view.bth().pad_count);

        // The ICRC from the real headers equals scapy's.
        assert_eq!(u64::from(view.icrc()), v.num("icrc"), "line {line}");
        let covered = &roce[..roce.len() - 4];
        assert_eq!(
            icrc::icrc(split.ip_header, split.udp_header, covered),
            Ok(view.icrc()),
            "line {line}"
        );
        assert_eq!(split.verify_icrc(), Ok(()), "line {line}");

        // The ICRC from addresses and ports alone equals scapy's exactly
        // when the header has the assumed fields.
        let flow = split.flow();
        let assumed = v.num("assumed") == 1;
        assert_eq!(has_flow_fields(&split, &flow, 0), assumed, "line {line}");
        assert_eq!(
            flow.icrc(covered) == Ok(view.icrc()),
            assumed,
            "line {line}"
        );
        assert_eq!(view.verify_icrc(&flow).is_ok(), assumed, "line {line}");
        match (assumed, v.ipv6) {
            (true, false) => v4_flow_checked += 1,
            (true, true) => v6_flow_checked += 1,
            (false, _) => v4_other += 1,
        }

        nonzero_ids += usize::from(check_identification(v, &view, &split));

        // The builder reproduces scapy's bytes.
        assert_eq!(rebuild(&view, &split), roce, "line {line}");
        if assumed {
            let mut buf = vec![0u8; roce.len()];
            let builder = PacketBuilder {
                bth: *view.bth(),
                ext: *view.ext(),
                payload: view.payload(),
            };
            assert_eq!(builder.build(&flow, &mut buf), Ok(roce.len()));
            assert_eq!(buf, roce, "line {line}");
        }

        // Any flipped bit outside the masked BTH byte breaks the ICRC.
        let mut corrupt = roce.to_vec();
        let at = (line * 7919) % corrupt.len();
        let at = if at == 4 { 5 } else { at };
        corrupt[at] ^= 0x10;
        assert!(
            matches!(
                icrc::verify(split.ip_header, split.udp_header, &corrupt),
                Err(WireError::BadIcrc { .. })
            ),
            "line {line}"
        );
    }

    // The file covers what it claims to.
    assert_eq!(opcodes.len(), Opcode::all().count(), "every opcode appears");
    assert_eq!(pads.len(), 4, "every pad count appears");
    assert!(v4_flow_checked >= 5, "{v4_flow_checked} IPv4 flow checks");
    assert!(v6_flow_checked >= 5, "{v6_flow_checked} IPv6 flow checks");
    assert!(v4_other >= 5, "{v4_other} IPv4 packets with other fields");
    assert!(ipv4_options >= 1, "no IPv4 header with options");
    assert!(nonzero_ids >= 10, "{nonzero_ids} identifications recovered");
    assert!(other_ports >= 1, "no packet to a port other than 4791");
}
