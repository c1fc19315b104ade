//! The engine alone, without sockets: RC packets processed per second on
//! one core, sender and receiver sides apart, for 64-byte and 4 KiB
//! payloads, with RDMA WRITE and SEND. Engine regressions show here apart
//! from system calls, which dominate the end-to-end numbers of perftest.
//!
//! `cargo bench -p softverbs-engine` (and `make bench`) run it; prints one
//! line per case:
//!
//! ```text
//! engine op=write payload=64 packets=.. acks=.. sender_pps=.. receiver_pps=.. sender_ns=.. receiver_ns=..
//! ```
//!
//! Two engines are joined in memory as in the data-path tests
//! (tests/common/pair.rs). Work goes in batches, each phase timed on its
//! own so each side's cost is measured alone (clock reads are per batch,
//! not per packet):
//!
//! 1. sender: post a batch of one-packet WRs (the last one signaled, as
//!    perftest moderates completions) and build every packet;
//! 2. receiver: (SEND: post the receives) take every packet, build the
//!    ACKs, (SEND: poll the receive completions);
//! 3. sender: take the ACKs and poll the completion.
//!
//! Sender time is phases 1 + 3, receiver time phase 2; packets per second
//! are data packets divided by that side's time. Without `--bench` (as
//! `cargo test --benches` runs it) it does a few batches as a smoke test.

#[path = "../tests/common/mod.rs"]
mod common;

use common::pair::{Link, Pair, MEM_BASE};
use softverbs_engine::*;
use std::time::{Duration, Instant};

/// WRs per batch: half the send queue the test pair creates (256).
const BATCH: usize = 128;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Write,
    Send,
}

/// A packet in flight between the two engines.
struct Wire {
    bufs: Vec<Vec<u8>>,
    meta: Vec<Transmit>,
}

impl Wire {
    fn new() -> Wire {
        Wire {
            bufs: (0..BATCH + 1).map(|_| vec![0u8; MAX_PACKET_LEN]).collect(),
            meta: Vec::with_capacity(BATCH + 1),
        }
    }

    /// Takes every packet `node` has to send.
    fn drain(&mut self, now: Nanos, node: &mut common::pair::Node) {
        self.meta.clear();
        while self.meta.len() < self.bufs.len() {
            let buf = &mut self.bufs[self.meta.len()];
            match node.e.poll_transmit(now, &node.mem, buf) {
                Some(t) => self.meta.push(t),
                None => return,
            }
        }
        panic!("more than {} packets from one batch", self.bufs.len());
    }

    /// Hands every packet to `node`.
    fn deliver(&self, now: Nanos, node: &mut common::pair::Node) {
        for (t, buf) in self.meta.iter().zip(&self.bufs) {
            node.e
                .handle_packet(now, t.src_gid, t.dst_gid, &buf[..t.len], &mut node.mem);
        }
    }
}

/// What one case measured.
struct Measured {
    packets: u64,
    acks: u64,
    sender: Duration,
    receiver: Duration,
}

fn run(op: Op, payload: u32, budget: Duration, max_batches: u64) -> Measured {
    let mut p = Pair::new();
    let link = Link {
        mtu: Mtu::Mtu4096,
        ..Link::default()
    };
    let (qa, qb) = p.connect(QpType::Rc, link);
    let (mut data, mut acks) = (Wire::new(), Wire::new());
    let mut wcs = Vec::with_capacity(BATCH);
    let mut m = Measured {
        packets: 0,
        acks: 0,
        sender: Duration::ZERO,
        receiver: Duration::ZERO,
    };
    // Each WR of a batch uses its own slice of the 1 MiB buffers.
    let sges: Vec<Sge> = (0..BATCH as u64)
        .map(|k| p.a.sge(k * u64::from(payload), payload))
        .collect();
    let recv_sges: Vec<Sge> = (0..BATCH as u64)
        .map(|k| p.b.sge(k * u64::from(payload), payload))
        .collect();
    let start = Instant::now();
    let mut batches = 0u64;
    while batches < max_batches && start.elapsed() < budget {
        // 1. Sender: post and build.
        let t0 = Instant::now();
        for (k, sge) in sges.iter().enumerate() {
            let mut w = common::pair::wr(k as u64, 0, std::slice::from_ref(sge));
            w.send_flags = if k == BATCH - 1 {
                send_flags::SIGNALED
            } else {
                0
            };
            if op == Op::Write {
                w.opcode = send_opcode::RDMA_WRITE;
                w.rdma = RdmaTarget {
                    remote_addr: MEM_BASE + k as u64 * u64::from(payload),
                    rkey: p.b.key,
                };
            } else {
                w.opcode = send_opcode::SEND;
            }
            p.a.e.post_send(qa, &w).expect("post_send");
        }
        data.drain(p.now, &mut p.a);
        let t1 = Instant::now();

        // 2. Receiver: take the packets, answer with ACKs.
        if op == Op::Send {
            for (k, sge) in recv_sges.iter().enumerate() {
                let r = RecvWr {
                    wr_id: k as u64,
                    sg_list: std::slice::from_ref(sge),
                };
                p.b.e.post_recv(qb, &r).expect("post_recv");
            }
        }
        data.deliver(p.now, &mut p.b);
        acks.drain(p.now, &mut p.b);
        if op == Op::Send {
            wcs.clear();
            p.b.e.poll_cq(p.b.cq, BATCH, &mut wcs).expect("poll_cq");
            assert_eq!(wcs.len(), BATCH, "receive completions of a batch");
        }
        let t2 = Instant::now();

        // 3. Sender: take the ACKs, complete the batch.
        acks.deliver(p.now, &mut p.a);
        wcs.clear();
        p.a.e.poll_cq(p.a.cq, BATCH, &mut wcs).expect("poll_cq");
        let t3 = Instant::now();

        assert_eq!(data.meta.len(), BATCH, "one packet per WR");
        assert!(
            wcs.len() == 1 && wcs[0].status == WcStatus::Success,
            "the batch's signaled WR completes: {wcs:?}"
        );
        m.sender += (t1 - t0) + (t3 - t2);
        m.receiver += t2 - t1;
        m.packets += BATCH as u64;
        m.acks += acks.meta.len() as u64;
        p.now += 1_000;
        batches += 1;
    }
    m
}

fn main() {
    // `cargo bench` passes --bench; anything else (cargo test --benches)
    // gets a quick smoke run.
    let full = std::env::args().any(|a| a == "--bench");
    let (budget, max_batches) = if full {
        (Duration::from_secs(2), u64::MAX)
    } else {
        (Duration::from_secs(1), 20)
    };
    for op in [Op::Write, Op::Send] {
        for payload in [64u32, 4096] {
            // A short warm-up, then the measured run.
            run(op, payload, Duration::from_millis(100), 50);
            let m = run(op, payload, budget, max_batches);
            let pps = |d: Duration| m.packets as f64 / d.as_secs_f64();
            let ns = |d: Duration| d.as_nanos() as f64 / m.packets as f64;
            println!(
                "engine op={} payload={payload} packets={} acks={} sender_pps={:.0} receiver_pps={:.0} sender_ns={:.1} receiver_ns={:.1}",
                if op == Op::Write { "write" } else { "send" },
                m.packets,
                m.acks,
                pps(m.sender),
                pps(m.receiver),
                ns(m.sender),
                ns(m.receiver),
            );
        }
    }
}
