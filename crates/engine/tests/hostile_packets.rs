//! Whatever arrives from the network, the engine neither panics nor
//! touches memory outside a registered region: random and half-valid
//! packets (real QP numbers, PSNs near the expected one, real and forged
//! rkeys, addresses around the region) are fed to connected QPs of every
//! type, whose memory outside the MR must stay zero.

mod common;
use common::pair::*;
use proptest::prelude::*;
use softverbs_engine::*;
use softverbs_wire::*;

/// The only registered window of node B's memory.
const WINDOW: (u64, u64) = (0x4_0000, 0x4_0000);

struct Target {
    p: Pair,
    qps: Vec<(QpId, u32)>,
    rkey: u32,
}

fn target() -> Target {
    let mut p = Pair::new();
    let mut qps = Vec::new();
    for ty in QpType::ALL {
        let (_, qb) = p.connect(ty, Link::default());
        let sge = [p.b.sge(WINDOW.0, 512)];
        for i in 0..4 {
            p.b.e
                .post_recv(
                    qb,
                    &RecvWr {
                        wr_id: i,
                        sg_list: &sge,
                    },
                )
                .unwrap();
        }
        qps.push((qb, p.b.e.qp_num(qb).unwrap()));
    }
    // Only the window stays registered; the full-memory MR goes away.
    let all = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let base = MEM_BASE + WINDOW.0;
    let rkey =
        p.b.e
            .reg_mr(p.b.pd, base, WINDOW.1, base, all.bits())
            .unwrap()
            .key;
    let (full, _) = p.b.e.mr_by_key(p.b.key).unwrap();
    p.b.e.dereg_mr(full).unwrap();
    Target { p, qps, rkey }
}

#[derive(Debug, Clone)]
struct Hostile {
    opcode: u8,
    qp: usize,
    psn_delta: i32,
    real_rkey: bool,
    rkey: u32,
    va_offset: i64,
    dma_len: u32,
    payload: Vec<u8>,
    mutate: Option<(usize, u8)>,
}

/// Request opcodes of every transport, which reach the execution paths.
fn request_opcode() -> impl Strategy<Value = u8> {
    let requests: Vec<u8> = Opcode::all()
        .filter(|o| o.is_request())
        .map(Opcode::as_u8)
        .collect();
    prop_oneof![8 => proptest::sample::select(requests), 1 => any::<u8>()]
}

fn hostile() -> impl Strategy<Value = Hostile> {
    (
        request_opcode(),
        0..3usize,
        prop_oneof![6 => Just(0), 1 => -4..4i32],
        prop_oneof![3 => Just(true), 1 => Just(false)],
        any::<u32>(),
        -0x1000..0x5_0000i64,
        prop_oneof![0..64u32, any::<u32>()],
        proptest::collection::vec(any::<u8>(), 0..1100),
        prop_oneof![4 => Just(None), 1 => (0..64usize, any::<u8>()).prop_map(Some)],
    )
        .prop_map(
            |(opcode, qp, psn_delta, real_rkey, rkey, va_offset, dma_len, payload, mutate)| {
                Hostile {
                    opcode,
                    qp,
                    psn_delta,
                    real_rkey,
                    rkey,
                    va_offset,
                    dma_len,
                    payload,
                    mutate,
                }
            },
        )
}

/// Builds a packet as close to valid as the case asks; `None` if the
/// opcode does not exist (then raw bytes are sent instead).
fn build(t: &Target, h: &Hostile, buf: &mut [u8]) -> usize {
    let Ok(opcode) = Opcode::from_u8(h.opcode) else {
        let n = h.payload.len().min(buf.len());
        buf[..n].copy_from_slice(&h.payload[..n]);
        return n;
    };
    // Mostly to the QP of the opcode's transport, at the PSN it expects;
    // a third go to the RC QP whatever their transport.
    let own = match opcode.transport() {
        Transport::Rc => 0,
        Transport::Uc => 1,
        Transport::Ud => 2,
    };
    let (_, qpn) = t.qps[if h.qp == 0 { 0 } else { own }];
    let psn = Psn::new_masked((Link::default().psn_a as i32 + h.psn_delta) as u32);
    let rkey = if h.real_rkey { t.rkey } else { h.rkey };
    let va = (MEM_BASE + WINDOW.0).wrapping_add_signed(h.va_offset);
    let mut ext = ExtHeaders::default();
    for header in opcode.ext_headers() {
        match header {
            ExtHeader::Reth => {
                ext.reth = Some(Reth {
                    va,
                    rkey,
                    dma_len: h.dma_len,
                })
            }
            ExtHeader::Aeth => {
                ext.aeth = Some(Aeth {
                    syndrome: Syndrome::Ack { credits: 0 },
                    msn: Msn::ZERO,
                })
            }
            ExtHeader::AtomicEth => {
                ext.atomic_eth = Some(AtomicEth {
                    va,
                    rkey,
                    swap_add: 1,
                    compare: 0,
                })
            }
            ExtHeader::AtomicAckEth => ext.atomic_ack_eth = Some(AtomicAckEth { orig_data: 9 }),
            ExtHeader::Deth => {
                ext.deth = Some(Deth {
                    qkey: 0x1111_1111,
                    src_qp: Qpn::new_masked(7),
                })
            }
            ExtHeader::ImmDt => ext.imm_dt = Some(ImmDt { imm: 1 }),
            ExtHeader::Ieth => ext.ieth = Some(Ieth { rkey }),
        }
    }
    let payload = if opcode.has_payload() {
        &h.payload[..]
    } else {
        &[][..]
    };
    let payload = &payload[..payload.len().min(4096)];
    let builder = PacketBuilder {
        bth: Bth::new(opcode, Qpn::new_masked(qpn), psn),
        ext,
        payload,
    };
    let mut n = builder.build_unsealed(buf).unwrap_or(0);
    if let Some((at, byte)) = h.mutate {
        if n > 0 {
            buf[at % n] ^= byte;
        }
        n = n.max(1);
    }
    n
}

fn outside_window_is_zero(mem: &FlatMemory) -> bool {
    let before = mem.slice(MEM_BASE, WINDOW.0 as usize);
    let after_start = MEM_BASE + WINDOW.0 + WINDOW.1;
    let after = mem.slice(after_start, MEM_LEN - (WINDOW.0 + WINDOW.1) as usize);
    before.iter().chain(after).all(|b| *b == 0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn hostile_packets_never_panic_or_escape_registered_memory(cases in proptest::collection::vec(hostile(), 1..6)) {
        let mut t = target();
        let mut buf = vec![0u8; MAX_PACKET_LEN + 1100];
        let (src, dst) = (t.p.a.gid, t.p.b.gid);
        for (i, h) in cases.iter().enumerate() {
            let n = build(&t, h, &mut buf);
            t.p.b.e.handle_packet(i as u64, src, dst, &buf[..n], &mut t.p.b.mem);
            t.p.b.e.handle_timeout(i as u64 * 1_000_000_000);
            let mut out = vec![0u8; MAX_PACKET_LEN];
            while t.p.b.e.poll_transmit(i as u64, &t.p.b.mem, &mut out).is_some() {}
        }
        prop_assert!(outside_window_is_zero(&t.p.b.mem));
    }
}
