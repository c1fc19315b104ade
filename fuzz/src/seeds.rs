//! The seed corpus, made from real packets and real verb sequences with
//! crates/wire's builders and the targets' own encoders. The files under
//! `fuzz/corpus/<target>/seed-*` are these, written by
//! `UPDATE_SEEDS=1 cargo test --manifest-path fuzz/Cargo.toml --test corpus`;
//! a test checks the committed ones are current.

use crate::bringup::QKEY;
use crate::bytes::Writer;
use crate::packets::{qp_index, Frame, DEST, PSN, RKEY, TRANSMIT};
use crate::target::{regions, ALL, PEER_QPN};
use crate::verbs::ops::{Caps, Op, Remote, SgeSpec, Step};
use crate::verbs::{AH_FIELDS, QP_FIELDS};
use softverbs_engine::{send_opcode, QpState, QpType};
use softverbs_wire::{
    Aeth, AtomicAckEth, AtomicEth, Bth, Deth, ExtHeader, Flow, Ieth, Msn, Opcode, PacketBuilder,
    Psn, Qpn, Reth, Syndrome, Transport,
};
use std::net::{Ipv4Addr, Ipv6Addr};

/// A named seed.
pub type Seed = (String, Vec<u8>);

/// The seeds of target `name`.
pub fn of(name: &str) -> Vec<Seed> {
    match name {
        "wire" => wire(),
        "packets" => packets(),
        "verbs" => verbs(),
        _ => Vec::new(),
    }
}

fn file_name(opcode: Opcode) -> String {
    opcode.name().to_ascii_lowercase().replace('_', "-")
}

/// A packet of `opcode` with every header it needs (keys zero, for the
/// targets to patch), `payload` bytes if it carries any, and a zero ICRC.
pub fn packet(opcode: Opcode, payload: usize, va: u64) -> Vec<u8> {
    let data: Vec<u8> = (0..payload).map(|i| i as u8 ^ 0x5A).collect();
    let mut b = PacketBuilder::new(Bth::new(opcode, Qpn::new_masked(0x200), Psn::ZERO));
    for &header in opcode.ext_headers() {
        b = match header {
            ExtHeader::Reth => b.with_reth(Reth {
                va,
                rkey: 0,
                dma_len: payload.max(16) as u32,
            }),
            ExtHeader::Aeth => b.with_aeth(Aeth {
                syndrome: Syndrome::Ack {
                    credits: Syndrome::NO_CREDIT_COUNT,
                },
                msn: Msn::ZERO,
            }),
            ExtHeader::AtomicEth => b.with_atomic_eth(AtomicEth {
                va: va & !7,
                rkey: 0,
                swap_add: 1,
                compare: 0,
            }),
            ExtHeader::AtomicAckEth => b.with_atomic_ack_eth(AtomicAckEth { orig_data: 7 }),
            ExtHeader::Deth => b.with_deth(Deth {
                qkey: QKEY,
                src_qp: Qpn::new_masked(PEER_QPN),
            }),
            ExtHeader::ImmDt => b.with_imm(0x0A0B_0C0D),
            ExtHeader::Ieth => b.with_ieth(Ieth { rkey: 0 }),
        };
    }
    if opcode.has_payload() {
        b = b.with_payload(&data);
    }
    let mut buf = vec![0u8; b.wire_len()];
    let len = b
        .build_unsealed(&mut buf)
        .expect("seed packets are well formed");
    buf.truncate(len);
    buf
}

/// Every opcode sealed for a test flow, and two datagrams (IPv4, IPv6)
/// around an RC SEND.
fn wire() -> Vec<Seed> {
    let flow = Flow::v4(
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        49152,
        4791,
    );
    let mut out: Vec<Seed> = Opcode::all()
        .map(|op| {
            let mut p = packet(op, 13, 0x1000);
            flow.seal(&mut p).expect("seals");
            (file_name(op), p)
        })
        .collect();
    let v6 = Flow::v6(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST, 50000, 4791);
    for (name, flow) in [("ipv4-datagram", flow), ("ipv6-datagram", v6)] {
        let mut p = packet(Opcode::RcSendOnlyImm, 9, 0);
        flow.seal(&mut p).expect("seals");
        let headers = flow.headers(p.len()).expect("fits");
        let mut d = headers.ip().to_vec();
        d.extend_from_slice(headers.udp());
        d.extend_from_slice(&p);
        out.push((name.to_string(), d));
    }
    out
}

fn frames(list: &[Frame]) -> Vec<u8> {
    let mut w = Writer::default();
    list.iter().for_each(|f| f.encode(&mut w));
    w.out
}

fn own_type(t: Transport) -> QpType {
    match t {
        Transport::Rc => QpType::Rc,
        Transport::Uc => QpType::Uc,
        Transport::Ud => QpType::Ud,
    }
}

/// A frame aimed at the target QP of `ty` in `state`, patched through.
fn aimed(ty: QpType, state: QpState, delta: i8, packet: Vec<u8>) -> Frame {
    Frame {
        qp: qp_index(ty, state),
        flags: DEST | PSN | RKEY | TRANSMIT | ((ALL as u8) << 6),
        psn_delta: delta,
        packet,
    }
}

/// One frame per opcode to the RTS QP of its transport; a SEND to the QP
/// of every type in every state; a WRITE in three packets; an RC READ
/// request answered by a READ response and an ACK.
fn packets() -> Vec<Seed> {
    let va = regions()[ALL].iova + 0x40;
    let mut out: Vec<Seed> = Opcode::all()
        .map(|op| {
            let f = aimed(
                own_type(op.transport()),
                QpState::Rts,
                0,
                packet(op, 24, va),
            );
            (file_name(op), frames(&[f]))
        })
        .collect();
    for ty in QpType::ALL {
        let send = match ty {
            QpType::Rc => Opcode::RcSendOnly,
            QpType::Uc => Opcode::UcSendOnly,
            QpType::Ud => Opcode::UdSendOnly,
        };
        for state in QpState::ALL
            .into_iter()
            .filter(|&s| !(ty == QpType::Rc && s == QpState::Sqe))
        {
            let f = aimed(ty, state, 0, packet(send, 32, va));
            let name = format!("{}-send-in-{}", ty.name(), state.name()).to_ascii_lowercase();
            out.push((name, frames(&[f])));
        }
    }
    let write = [
        Opcode::RcWriteFirst,
        Opcode::RcWriteMiddle,
        Opcode::RcWriteLast,
    ];
    let write: Vec<Frame> = write
        .iter()
        .enumerate()
        .map(|(i, &op)| aimed(QpType::Rc, QpState::Rts, i as i8, packet(op, 1024, va)))
        .collect();
    out.push(("rc-write-in-three".to_string(), frames(&write)));
    let read = [
        aimed(
            QpType::Rc,
            QpState::Rts,
            0,
            packet(Opcode::RcReadRequest, 0, va),
        ),
        aimed(QpType::Rc, QpState::Rts, 0, packet(Opcode::RcAck, 0, va)),
        aimed(
            QpType::Rc,
            QpState::Rts,
            2,
            packet(Opcode::RcReadRespOnly, 64, va),
        ),
        aimed(
            QpType::Rc,
            QpState::Rts,
            3,
            packet(Opcode::RcAtomicAck, 0, va),
        ),
    ];
    out.push(("rc-read-and-responses".to_string(), frames(&read)));
    out
}

fn step(node: u8, op: Op) -> Step {
    Step { node, op }
}

/// A PD, a CQ and an MR over 16 KiB with every right, on both nodes.
fn setup() -> Vec<Step> {
    let mut s = Vec::new();
    for node in 0..2 {
        s.push(step(node, Op::AllocPd {}));
        s.push(step(
            node,
            Op::CreateCq {
                cqe: 256,
                vector: 0,
            },
        ));
        let mr = Op::RegMr {
            pd: 0,
            offset: 0x1000,
            len: 0x4000,
            access: 0x0F,
            mode: 0,
            iova: 0,
        };
        s.push(step(node, mr));
    }
    s
}

fn create_qp(node: u8, ty: u8, srq: u8) -> Step {
    let caps = Caps {
        send_wr: 32,
        recv_wr: 32,
        send_sge: 4,
        recv_sge: 4,
        inline: 64,
    };
    let op = Op::CreateQp {
        pd: 0,
        send_cq: 0,
        recv_cq: 0,
        srq,
        qp_type: ty,
        caps,
        sig_all: false,
    };
    step(node, op)
}

fn modify(node: u8, qp: u8, state: QpState) -> Step {
    let op = Op::ModifyQp {
        qp,
        state: state as u8,
        flip: 0,
        field1: QP_FIELDS,
        value1: 0,
        field2: QP_FIELDS,
        value2: 0,
    };
    step(node, op)
}

/// QP 0 of type index `ty` (0 RC, 1 UC, 2 UD) on both nodes, in RTS and
/// connected to each other; node 1's on SRQ `srq` (0x80: none).
fn connect(ty: u8, srq: u8) -> Vec<Step> {
    let mut s = vec![create_qp(0, ty, 0x80), create_qp(1, ty, srq)];
    for state in [QpState::Init, QpState::Rtr, QpState::Rts] {
        s.push(modify(0, 0, state));
        s.push(modify(1, 0, state));
    }
    s
}

fn sges(offset: u16, len: u16) -> SgeSpec {
    SgeSpec {
        count: 1,
        mr: 0,
        offset,
        len,
    }
}

fn post_recv(node: u8, offset: u16, len: u16) -> Step {
    step(
        node,
        Op::PostRecv {
            qp: 0,
            wr_id: 1,
            sges: sges(offset, len),
        },
    )
}

fn post_send(opcode: u32, sge: SgeSpec, remote_offset: u16, ah: u8) -> Step {
    let remote = Remote {
        mr: 0,
        offset: remote_offset,
        compare: 0,
        swap: 5,
        ah,
        qp: 0,
        qkey: QKEY,
    };
    let op = Op::PostSend {
        qp: 0,
        opcode: opcode as u8,
        flags: 2,
        sges: sge,
        inline: 0,
        imm: 0x1122_3344,
        remote,
        batch: 0,
    };
    step(0, op)
}

/// Packets both ways a few times, then both CQs polled.
fn exchange(rounds: usize) -> Vec<Step> {
    let mut s = Vec::new();
    for _ in 0..rounds {
        s.push(step(
            0,
            Op::Deliver {
                budget: 15,
                drop: 0,
            },
        ));
        s.push(step(
            1,
            Op::Deliver {
                budget: 15,
                drop: 0,
            },
        ));
    }
    s.push(step(0, Op::PollCq { cq: 0, max: 16 }));
    s.push(step(1, Op::PollCq { cq: 0, max: 16 }));
    s
}

fn sequence(parts: &[Vec<Step>]) -> Vec<u8> {
    Step::encode_all(&parts.concat())
}

/// A few verb sequences that reach the data path: RC SEND, RC WRITE,
/// READ and atomics, UC WRITE with immediate, UD SEND through an AH, an
/// SRQ, a lost packet recovered by the retry timer, an RNR wait, a WRITE
/// and a READ on memory the application unmapped, and a QP taken to ERR
/// and RESET with work posted.
fn verbs() -> Vec<Seed> {
    let none = 0xFF;
    let rc_send = sequence(&[
        setup(),
        connect(0, 0x80),
        vec![
            post_recv(1, 0x100, 64),
            post_send(send_opcode::SEND, sges(0x200, 64), 0, none),
        ],
        exchange(2),
    ]);
    let rc_rdma = sequence(&[
        setup(),
        connect(0, 0x80),
        vec![
            post_send(send_opcode::RDMA_WRITE, sges(0x200, 256), 0x800, none),
            post_send(send_opcode::RDMA_READ, sges(0x400, 128), 0x800, none),
            post_send(
                send_opcode::ATOMIC_FETCH_AND_ADD,
                sges(0x600, 8),
                0x900,
                none,
            ),
            post_send(send_opcode::ATOMIC_CMP_AND_SWP, sges(0x608, 8), 0x900, none),
        ],
        exchange(3),
    ]);
    let uc_write = sequence(&[
        setup(),
        connect(1, 0x80),
        vec![
            post_recv(1, 0x100, 64),
            post_send(
                send_opcode::RDMA_WRITE_WITH_IMM,
                sges(0x200, 100),
                0x800,
                none,
            ),
        ],
        exchange(1),
    ]);
    let ud_send = sequence(&[
        setup(),
        connect(2, 0x80),
        vec![
            step(
                0,
                Op::CreateAh {
                    pd: 0,
                    field: AH_FIELDS,
                    value: 0,
                },
            ),
            post_recv(1, 0x100, 40 + 64),
            post_send(send_opcode::SEND, sges(0x200, 64), 0, 0),
        ],
        exchange(1),
    ]);
    let srq = sequence(&[
        setup(),
        vec![step(
            1,
            Op::CreateSrq {
                pd: 0,
                max_wr: 16,
                max_sge: 2,
                limit: 0,
            },
        )],
        connect(0, 0),
        vec![
            step(
                1,
                Op::PostSrqRecv {
                    srq: 0,
                    wr_id: 3,
                    sges: sges(0x100, 64),
                },
            ),
            step(
                1,
                Op::PostSrqRecv {
                    srq: 0,
                    wr_id: 4,
                    sges: sges(0x140, 64),
                },
            ),
            step(
                1,
                Op::ModifySrq {
                    srq: 0,
                    mask: 2,
                    max_wr: 0,
                    limit: 1,
                },
            ),
            post_send(send_opcode::SEND, sges(0x200, 64), 0, none),
        ],
        exchange(2),
    ]);
    let lost = sequence(&[
        setup(),
        connect(0, 0x80),
        vec![
            post_recv(1, 0x100, 64),
            post_send(send_opcode::SEND, sges(0x200, 64), 0, none),
            step(
                0,
                Op::Deliver {
                    budget: 0,
                    drop: 0xFF,
                },
            ),
            step(0, Op::Timeout { advance: 1 << 20 }),
        ],
        exchange(2),
    ]);
    let rnr = sequence(&[
        setup(),
        connect(0, 0x80),
        vec![post_send(send_opcode::SEND, sges(0x200, 64), 0, none)],
        exchange(1),
        vec![
            post_recv(1, 0x100, 64),
            step(0, Op::Timeout { advance: 1 << 16 }),
        ],
        exchange(2),
    ]);
    let teardown = sequence(&[
        setup(),
        connect(0, 0x80),
        vec![
            post_recv(1, 0x100, 64),
            post_send(send_opcode::SEND, sges(0x200, 64), 0, none),
            step(0, Op::DeallocPd { pd: 0 }),
            step(0, Op::DestroyCq { cq: 0 }),
            modify(0, 0, QpState::Err),
            post_send(send_opcode::SEND, sges(0x200, 64), 0, none),
            modify(0, 0, QpState::Reset),
            step(0, Op::DestroyQp { qp: 0 }),
            step(0, Op::DeregMr { mr: 0 }),
            step(
                1,
                Op::Deliver {
                    budget: 15,
                    drop: 0,
                },
            ),
        ],
        exchange(1),
    ]);
    let unmapped = sequence(&[
        setup(),
        connect(0, 0x80),
        vec![
            step(
                1,
                Op::Unmap {
                    offset: 0x1800,
                    len: 0x100,
                },
            ),
            post_send(send_opcode::RDMA_WRITE, sges(0x200, 64), 0x800, none),
            post_send(send_opcode::RDMA_READ, sges(0x400, 64), 0x800, none),
        ],
        exchange(2),
    ]);
    [
        ("rc-send", rc_send),
        ("rc-write-to-unmapped", unmapped),
        ("rc-write-read-atomics", rc_rdma),
        ("uc-write-imm", uc_write),
        ("ud-send", ud_send),
        ("rc-srq", srq),
        ("rc-lost-packet-retry", lost),
        ("rc-rnr-wait", rnr),
        ("error-and-teardown", teardown),
    ]
    .into_iter()
    .map(|(n, b)| (n.to_string(), b))
    .collect()
}
