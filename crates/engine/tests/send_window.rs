//! The send window (`DeviceConfig::send_window_bytes`): an RC QP keeps at
//! most a window of packets unacknowledged, and a READ longer than the
//! window is asked for one window at a time, so what one QP sends never
//! overflows a peer's receive buffer sized to the window.

mod common;
use common::pair::*;
use softverbs_engine::*;
use softverbs_wire::{OpKind, PacketView, Psn};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

/// 4 packets of the links' 1024-byte MTU.
const WINDOW: u32 = 4 * 1024;

fn pattern(n: &mut Node, offset: u64, len: usize) -> Vec<u8> {
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
    n.mem.write(MEM_BASE + offset, &data).unwrap();
    data
}

fn read_wr(sge: &[Sge], remote: u64, rkey: u32) -> SendWr<'_> {
    SendWr {
        rdma: RdmaTarget {
            remote_addr: MEM_BASE + remote,
            rkey,
        },
        ..wr(1, send_opcode::RDMA_READ, sge)
    }
}

/// What a test saw on the wire: request PSNs beyond the window from the
/// last acknowledged PSN, READ requests' lengths, NAKs.
#[derive(Default)]
struct Seen {
    acked: Option<Psn>,
    beyond_window: Vec<u32>,
    read_lengths: Vec<u32>,
    naks: usize,
    requests: usize,
}

/// A filter recording `Seen` and delivering everything but the packets
/// `drop` picks (by the count of packets of that kind so far).
fn watch(p: &mut Pair, first_psn: u32, drop: fn(OpKind, usize) -> bool) -> Rc<RefCell<Seen>> {
    let seen = Rc::new(RefCell::new(Seen {
        acked: Some(Psn::new_masked(first_psn.wrapping_sub(1))),
        ..Seen::default()
    }));
    let record = seen.clone();
    let mut counts = std::collections::HashMap::new();
    p.filter = Box::new(move |from_a, v| {
        let mut s = record.borrow_mut();
        let kind = v.opcode().kind();
        let n = counts.entry((from_a, kind)).or_insert(0usize);
        *n += 1;
        if drop(kind, *n) {
            return Fate::Drop;
        }
        if from_a {
            s.requests += 1;
            let ahead = s.acked.map_or(0, |a| a.distance(v.psn()));
            if ahead > (WINDOW / 1024) as i32 {
                s.beyond_window.push(v.psn().get());
            }
            if kind == OpKind::ReadRequest {
                s.read_lengths.push(v.reth().map_or(0, |r| r.dma_len));
            }
        } else if kind == OpKind::Ack {
            if v.aeth().is_some_and(|a| a.syndrome.is_nak()) {
                s.naks += 1;
            } else {
                s.acked = Some(v.psn());
            }
        }
        Fate::Deliver
    });
    seen
}

/// A 40 KiB WRITE (40 packets) leaves 4 packets at a time: no request
/// packet is sent more than the window past the last acknowledged PSN,
/// and the data arrives whole. A window counted in what packets cost the
/// peer's buffer, here twice their MTU, holds as many fewer.
#[test]
fn unacknowledged_packets_stay_within_the_window() {
    let doubled = PacketCost::from_fn(|mtu| 2 * mtu);
    for mut p in [
        Pair::with_window(WINDOW),
        Pair::with_costed_window(2 * WINDOW, doubled),
    ] {
        write_within_the_window(&mut p);
    }
}

fn write_within_the_window(p: &mut Pair) {
    let link = Link::default();
    let (qa, _) = p.connect(QpType::Rc, link);
    let data = post_write(p, qa, 40 * 1024, 0x2_0000);
    let seen = watch(p, link.psn_a, |_, _| false);
    p.run(10_000);
    assert_eq!(p.b.mem.slice(MEM_BASE + 0x2_0000, 40 * 1024), &data[..]);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    let s = seen.borrow();
    assert_eq!(
        s.beyond_window,
        Vec::<u32>::new(),
        "PSNs sent past the window"
    );
    assert_eq!((s.requests, s.naks), (40, 0), "no packet was resent");
    assert_eq!(p.a.e.stats().tx_resent, 0);
}

/// A READ of 10 KiB with a 4 KiB window is asked for in three parts of
/// at most the window, each once its predecessor's responses are in; a
/// WRITE and a SEND posted after it wait for its last part (their PSNs
/// follow all of its responses) and nothing is NAKed.
#[test]
fn a_read_longer_than_the_window_is_asked_for_in_parts() {
    let mut p = Pair::with_window(WINDOW);
    let link = Link::default();
    let (qa, qb) = p.connect(QpType::Rc, link);
    let data = pattern(&mut p.b, 0x1_0000, 10 * 1024);
    let sge = [p.a.sge(0x4_0000, 10 * 1024)];
    p.a.e
        .post_send(qa, &read_wr(&sge, 0x1_0000, p.b.key))
        .unwrap();
    let small = [p.a.sge(0, 100)];
    let mut w = wr(2, send_opcode::RDMA_WRITE, &small);
    w.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x8_0000,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &w).unwrap();
    let rsge = [p.b.sge(0x9_0000, 100)];
    p.b.e
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 9,
                sg_list: &rsge,
            },
        )
        .unwrap();
    p.a.e
        .post_send(qa, &wr(3, send_opcode::SEND, &small))
        .unwrap();
    let seen = watch(&mut p, link.psn_a, |_, _| false);
    p.run(10_000);
    assert_eq!(p.a.mem.slice(MEM_BASE + 0x4_0000, 10 * 1024), &data[..]);
    let done: Vec<_> = p.a.poll().iter().map(|c| (c.wr_id, c.status)).collect();
    let ok = WcStatus::Success;
    assert_eq!(done, [(1, ok), (2, ok), (3, ok)]);
    let s = seen.borrow();
    assert_eq!(s.read_lengths, [4096, 4096, 2048]);
    assert_eq!(s.naks, 0);
}

/// A response lost in the middle of a part is asked for again up to the
/// same part's end: the responses' FIRST/LAST marks keep matching what
/// the requester expects, and the READ completes with every byte.
#[test]
fn a_lost_response_of_a_part_is_asked_for_again_to_the_parts_end() {
    let mut p = Pair::with_window(WINDOW);
    let link = Link::default();
    let (qa, _) = p.connect(QpType::Rc, link);
    let data = pattern(&mut p.b, 0x1_0000, 10 * 1024);
    let sge = [p.a.sge(0x4_0000, 10 * 1024)];
    p.a.e
        .post_send(qa, &read_wr(&sge, 0x1_0000, p.b.key))
        .unwrap();
    // The 6th response: the second of the second part.
    let seen = watch(&mut p, link.psn_a, |kind, n| {
        kind == OpKind::ReadResponse && n == 6
    });
    p.run(10_000);
    assert_eq!(p.a.mem.slice(MEM_BASE + 0x4_0000, 10 * 1024), &data[..]);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    // Parts: 4 packets, 4 (the 2nd lost: asked again from the 6th packet
    // to the part's end, 3 packets), 2.
    assert_eq!(seen.borrow().read_lengths, [4096, 4096, 3072, 2048]);
    assert_eq!(
        p.a.e.stats().tx_resent,
        1,
        "the one READ request asked again"
    );
}

/// Two QPs of one context writing at once share its send budget: the
/// packets both have unacknowledged never exceed one window, and both
/// writes complete whole.
#[test]
fn qps_of_one_context_share_one_window() {
    let mut p = Pair::with_window(WINDOW);
    let link = Link::default();
    let (qa1, qb1) = p.connect(QpType::Rc, link);
    let (qa2, qb2) = p.connect(QpType::Rc, link);
    let data = pattern(&mut p.a, 0, 20 * 1024);
    let sge = [p.a.sge(0, 20 * 1024)];
    for (i, qp) in [qa1, qa2].into_iter().enumerate() {
        let mut w = wr(i as u64, send_opcode::RDMA_WRITE, &sge);
        w.rdma = RdmaTarget {
            remote_addr: MEM_BASE + 0x2_0000 + i as u64 * 0x1_0000,
            rkey: p.b.key,
        };
        p.a.e.post_send(qp, &w).unwrap();
    }
    // Per connection, keyed by the responder's QP number (requests are
    // addressed to it; its ACKs to the requester's, mapped back): the
    // first PSN not acknowledged and the PSN after the highest sent.
    let num = |e: &Engine, q| e.qp_num(q).unwrap();
    let responder_of = std::collections::HashMap::from([
        (num(&p.a.e, qa1), num(&p.b.e, qb1)),
        (num(&p.a.e, qa2), num(&p.b.e, qb2)),
    ]);
    let start = Psn::new_masked(link.psn_a);
    let mut flights: std::collections::HashMap<u32, (Psn, Psn)> = responder_of
        .values()
        .map(|&qb| (qb, (start, start)))
        .collect();
    let most = Rc::new(RefCell::new(0i32));
    let record = most.clone();
    p.filter = Box::new(move |from_a, v| {
        let qp = v.dest_qp().get();
        if from_a {
            let f = flights.get_mut(&qp).expect("a request to a known QP");
            let end = v.psn().wrapping_add(1);
            if f.1.distance(end) > 0 {
                f.1 = end;
            }
        } else if v.opcode().kind() == OpKind::Ack {
            let f = flights
                .get_mut(&responder_of[&qp])
                .expect("an ACK to a known QP");
            let next = v.psn().wrapping_add(1);
            if f.0.distance(next) > 0 {
                f.0 = next;
            }
        }
        let total: i32 = flights.values().map(|f| f.0.distance(f.1)).sum();
        let mut m = record.borrow_mut();
        *m = (*m).max(total);
        Fate::Deliver
    });
    p.run(10_000);
    let done: Vec<_> = p.a.poll().iter().map(|c| c.status).collect();
    assert_eq!(done, [WcStatus::Success; 2]);
    for i in 0..2u64 {
        let written = p.b.mem.slice(MEM_BASE + 0x2_0000 + i * 0x1_0000, 20 * 1024);
        assert_eq!(written, &data[..]);
    }
    assert_eq!(
        *most.borrow(),
        (WINDOW / 1024) as i32,
        "one window between both QPs"
    );
}

/// Has each of `qps` of `a` WRITE `len` bytes of a pattern (returned)
/// into `b`'s memory, the `i`th at `WRITES + i * 0x1_0000`.
fn post_writes(p: &mut Pair, qps: &[QpId], len: u32) -> Vec<u8> {
    let data = pattern(&mut p.a, 0, len as usize);
    let sge = [p.a.sge(0, len)];
    for (i, &qp) in qps.iter().enumerate() {
        let mut w = wr(i as u64, send_opcode::RDMA_WRITE, &sge);
        w.rdma = RdmaTarget {
            remote_addr: WRITES + i as u64 * 0x1_0000,
            rkey: p.b.key,
        };
        p.a.e.post_send(qp, &w).unwrap();
    }
    data
}

/// Where `post_writes` writes in `b`'s memory.
const WRITES: u64 = MEM_BASE + 0x2_0000;

/// `n` WRITEs of `post_writes` completed, each `data` whole at its place.
fn assert_writes_done(p: &mut Pair, data: &[u8], n: usize) {
    let done: Vec<_> = p.a.poll().iter().map(|c| c.status).collect();
    assert_eq!(done, vec![WcStatus::Success; n]);
    for i in 0..n as u64 {
        let written = p.b.mem.slice(WRITES + i * 0x1_0000, data.len());
        assert_eq!(written, data);
    }
}

/// Eight QPs of one context writing at once, each with fewer packets in
/// flight than it sends between ACK requests: the packet that leaves the
/// budget too little room for the next asks for an ACK, so the context
/// never waits with nothing asked for. (The budget held the tails of
/// eight messages that asked for no ACK, and everything waited for the
/// local ACK timeout; perftest `-q 16` on a socket buffer of Debian's
/// default `rmem_max`.)
#[test]
fn qps_sharing_a_full_budget_never_wait_for_a_timeout() {
    const QPS: u64 = 8;
    let mut p = Pair::with_window(32 * 1024);
    let link = Link {
        timeout: 14,
        ..Link::default()
    };
    let qps: Vec<_> = (0..QPS).map(|_| p.connect(QpType::Rc, link).0).collect();
    let data = post_writes(&mut p, &qps, 16 * 1024);
    let start = p.now;
    p.run(10_000);
    assert_writes_done(&mut p, &data, QPS as usize);
    assert_eq!(p.a.e.stats().tx_resent, 0, "nothing sent again");
    assert!(
        p.now - start < 10_000_000,
        "no timer needed: {} ns",
        p.now - start
    );
}

/// Eight QPs of one context sharing a budget of 32 packets, each with a
/// long WRITE that asks for an ACK every 8 packets (a quarter of the
/// window): each sends its packets in a row up to one that asks for an
/// ACK (`schedule.rs`, turns), so an ACK frees a run of packets and the
/// next QP sends a run, and one packet in 8 asks. Served a packet at a
/// time, the QPs took turns at the packet or two of room each ACK freed,
/// and most packets, filling the budget, asked for an ACK of their own:
/// here 75 of 256, with perftest `ib_write_bw -q 64` on Debian's default
/// `rmem_max` 7 of 10, the requester woken for each ACK.
#[test]
fn qps_sharing_a_full_budget_send_runs_of_packets_between_acks() {
    const QPS: u64 = 8;
    const LEN: u32 = 32 * 1024;
    let mut p = Pair::with_window(32 * 1024);
    let qps: Vec<_> = (0..QPS)
        .map(|_| p.connect(QpType::Rc, Link::default()).0)
        .collect();
    let data = post_writes(&mut p, &qps, LEN);
    // Packets cross one at a time, each answered as it arrives, as on a
    // socket: the requester sees the ACKs one by one.
    let (mut to_b, mut to_a) = (VecDeque::from(drain(&mut p.a, 0)), VecDeque::new());
    let (mut sent, mut asked) = (0, 0);
    while !(to_b.is_empty() && to_a.is_empty()) {
        if let Some(pkt) = to_b.pop_front() {
            let v = PacketView::parse(&pkt.1).unwrap();
            sent += 1;
            asked += u32::from(v.bth().ack_req);
            deliver(&mut p.b, 0, &[pkt]);
            to_a.extend(drain(&mut p.b, 0));
        }
        if let Some(ack) = to_a.pop_front() {
            deliver(&mut p.a, 0, &[ack]);
            to_b.extend(drain(&mut p.a, 0));
        }
    }
    assert_writes_done(&mut p, &data, QPS as usize);
    assert_eq!(sent, QPS as u32 * LEN / 1024, "nothing sent again");
    assert!(
        asked <= sent / 8 + QPS as u32,
        "{asked} of {sent} packets asked for an ACK"
    );
}

/// A QP whose packets are all lost holds the context's whole budget, so a
/// second QP's WRITE waits; when the first QP is destroyed, or moved to
/// the error state, its share comes back and the second QP's WRITE goes
/// out and completes.
#[test]
fn a_qp_destroyed_or_failed_gives_its_budget_back() {
    for destroy in [true, false] {
        let mut p = Pair::with_window(WINDOW);
        let link = Link::default();
        let (qa1, qb1) = p.connect(QpType::Rc, link);
        let (qa2, _) = p.connect(QpType::Rc, link);
        let lost = p.b.e.qp_num(qb1).unwrap();
        let sge = [p.a.sge(0, 8 * 1024)];
        let rkey = p.b.key;
        let write = |id| SendWr {
            rdma: RdmaTarget {
                remote_addr: MEM_BASE + 0x2_0000,
                rkey,
            },
            ..wr(id, send_opcode::RDMA_WRITE, &sge)
        };
        let sent = Rc::new(RefCell::new(0usize));
        let count = sent.clone();
        p.filter = Box::new(move |from_a, v| {
            if from_a && v.dest_qp().get() == lost {
                return Fate::Drop;
            }
            *count.borrow_mut() += usize::from(from_a);
            Fate::Deliver
        });
        // The first QP fills the budget: its window, 4 packets, all lost.
        p.a.e.post_send(qa1, &write(0)).unwrap();
        p.run(4);
        p.a.e.post_send(qa2, &write(1)).unwrap();
        let mut buf = vec![0u8; MAX_PACKET_LEN];
        let next = p.a.e.poll_transmit(p.now, &p.a.mem, &mut buf);
        assert!(next.is_none(), "the second QP waits for room");
        if destroy {
            p.a.e.destroy_qp(qa1).unwrap();
        } else {
            let err = QpAttr {
                qp_state: QpState::Err as u32,
                ..QpAttr::default()
            };
            p.a.e.modify_qp(qa1, &err, QpAttrMask::STATE).unwrap();
        }
        p.run(1000);
        assert_eq!(
            *sent.borrow(),
            8,
            "destroy {destroy}: the second QP's packets"
        );
        let done: Vec<_> = p.a.poll().iter().map(|c| (c.wr_id, c.status)).collect();
        let mut want = vec![(1, WcStatus::Success)];
        if !destroy {
            want.insert(0, (0, WcStatus::WrFlushErr));
        }
        assert_eq!(done, want, "destroy {destroy}");
    }
}

/// Packets sent, each with its bytes.
type Packets = Vec<(Transmit, Vec<u8>)>;

/// Every packet `n` has to send now, with its bytes.
fn drain(n: &mut Node, now: Nanos) -> Packets {
    let mut buf = vec![0; MAX_PACKET_LEN];
    std::iter::from_fn(|| {
        let t = n.e.poll_transmit(now, &n.mem, &mut buf)?;
        Some((t, buf[..t.len].to_vec()))
    })
    .collect()
}

fn deliver(n: &mut Node, now: Nanos, packets: &[(Transmit, Vec<u8>)]) {
    for (t, bytes) in packets {
        n.e.handle_packet(now, t.src_gid, t.dst_gid, bytes, &mut n.mem);
    }
}

fn psns(packets: &[(Transmit, Vec<u8>)]) -> Vec<u32> {
    let psn = |b: &[u8]| softverbs_wire::PacketView::parse(b).unwrap().psn().get();
    packets.iter().map(|(_, b)| psn(b)).collect()
}

/// A requester that asks for READ responses again from a lost one sends
/// every READ request from there again (go-back-N), so a response the
/// responder still has queued at or after that PSN is one the requester
/// will drop: the responder drops them instead of sending them first.
/// Sending them made every loss cost the whole backlog, and under 1%
/// loss `ib_read_bw` ended in RETRY_EXC_ERR while the re-asked responses
/// waited behind stale ones (bench, "Against rxe in a VM").
#[test]
fn a_read_asked_for_again_supersedes_the_responses_queued_after_it() {
    let mut p = Pair::new();
    let link = Link::default();
    let (qa, _) = p.connect(QpType::Rc, link);
    let data = pattern(&mut p.b, 0x1_0000, 4 * 4096);
    let sges: Vec<[Sge; 1]> = (0..4)
        .map(|i| [p.a.sge(0x4_0000 + i * 4096, 4096)])
        .collect();
    for (i, sge) in sges.iter().enumerate() {
        let w = read_wr(sge, 0x1_0000 + i as u64 * 4096, p.b.key);
        p.a.e
            .post_send(
                qa,
                &SendWr {
                    wr_id: i as u64,
                    ..w
                },
            )
            .unwrap();
    }
    let now = 1_000;
    let requests = drain(&mut p.a, now);
    assert_eq!(requests.len(), 4, "four READ requests");
    deliver(&mut p.b, now, &requests);
    // All 16 responses are queued; the first reaches the requester, the
    // second is lost, the rest wait in the responder.
    let mut buf = vec![0; MAX_PACKET_LEN];
    let first = p.b.e.poll_transmit(now, &p.b.mem, &mut buf).unwrap();
    deliver(&mut p.a, now, &[(first, buf[..first.len].to_vec())]);
    p.b.e.poll_transmit(now, &p.b.mem, &mut buf).unwrap();
    // The requester's ACK timer: every READ asked for again, the first
    // from its second response.
    let later = p.a.e.poll_timeout().unwrap();
    p.a.e.handle_timeout(later);
    let again = drain(&mut p.a, later);
    assert_eq!(again.len(), 4);
    deliver(&mut p.b, later, &again);
    let responses = drain(&mut p.b, later);
    let start = link.psn_a + 1;
    assert_eq!(
        psns(&responses),
        (start..start + 15).collect::<Vec<_>>(),
        "the READs' responses from the lost one, each once"
    );
    deliver(&mut p.a, later, &responses);
    p.run(100);
    let done = p.a.poll();
    assert_eq!(done.len(), 4);
    assert!(done.iter().all(|wc| wc.status == WcStatus::Success));
    assert_eq!(p.a.mem.slice(MEM_BASE + 0x4_0000, 4 * 4096), &data[..]);
}

/// Packets in the window of the two RNR tests below.
const PKTS: usize = 8;

/// A pair whose window is `PKTS` packets, with `a` sending one SEND of a
/// pattern as large as the window to `b`'s QP (returned), which has no
/// receive WR yet; also the pattern and the packets, all sent at once.
fn send_a_window() -> (Pair, QpId, Vec<u8>, Packets) {
    let mut p = Pair::with_window(PKTS as u32 * 1024);
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let len = PKTS as u32 * 1024;
    let data = pattern(&mut p.a, 0, len as usize);
    let sge = [p.a.sge(0, len)];
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &sge))
        .unwrap();
    let sent = drain(&mut p.a, p.now);
    (p, qb, data, sent)
}

/// Going back after an RNR wait never puts more than the window into a
/// receiver slow to read its buffer. An 8-packet SEND, the window, reaches
/// a responder without a receive WR: it reads the first packet and
/// answers with an RNR NAK while the other seven still wait in its
/// buffer. After the RNR wait the requester sends the first packet again
/// alone (`rnr_probe.rs`), and the rest only once the answer to it,
/// read after those seven, says they are gone. Sending all eight again at
/// once put fifteen into a buffer sized to eight, after every RNR wait of
/// a receiver slow to post its receive WRs (perftest `ib_send_bw`).
#[test]
fn a_go_back_never_fills_a_slow_receivers_buffer_past_the_window() {
    let (mut p, qb, data, first) = send_a_window();
    let len = data.len() as u32;
    let mut buffer: VecDeque<_> = first.into();
    assert_eq!(buffer.len(), PKTS);
    let read = buffer.pop_front().unwrap();
    deliver(&mut p.b, p.now, &[read]);
    let rnr_nak = drain(&mut p.b, p.now);
    deliver(&mut p.a, p.now, &rnr_nak);
    p.b.post_recv(qb, 7, 0x4_0000, len);
    p.now = p.a.e.poll_timeout().expect("the RNR wait");
    p.a.e.handle_timeout(p.now);
    buffer.extend(drain(&mut p.a, p.now));
    assert!(
        buffer.len() <= PKTS,
        "{} packets in a buffer for {PKTS}",
        buffer.len()
    );
    let queued: Vec<_> = buffer.drain(..).collect();
    deliver(&mut p.b, p.now, &queued);
    let answers = drain(&mut p.b, p.now);
    deliver(&mut p.a, p.now, &answers);
    p.run(1_000);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    assert_eq!(p.b.poll()[0].byte_len, len);
    assert_eq!(p.b.mem.slice(MEM_BASE + 0x4_0000, len as usize), &data[..]);
}

/// A lost answer to the probe holds the rest until the probe, sent again
/// when its ACK is overdue, is answered: the retry goes alone too (the
/// buffer may still hold the packets sent before the RNR NAK), and the
/// responder's ACK of the duplicate releases the rest.
#[test]
fn a_probe_whose_ack_is_lost_goes_again_alone() {
    let (mut p, qb, data, first) = send_a_window();
    let len = data.len() as u32;
    deliver(&mut p.b, p.now, &first[..1]);
    deliver(&mut p.a, p.now, &drain(&mut p.b, p.now));
    p.b.post_recv(qb, 7, 0x4_0000, len);
    deliver(&mut p.b, p.now, &first[1..]); // dropped: out of sequence
    drain(&mut p.b, p.now);
    for attempt in ["after the RNR wait", "after the ACK is overdue"] {
        p.now = p.a.e.poll_timeout().expect("a timer");
        p.a.e.handle_timeout(p.now);
        let probe = drain(&mut p.a, p.now);
        assert_eq!(
            psns(&probe),
            [psns(&first)[0]],
            "{attempt}: the probe alone"
        );
        deliver(&mut p.b, p.now, &probe);
        let ack = drain(&mut p.b, p.now);
        assert_eq!(ack.len(), 1);
        if attempt.starts_with("after the RNR") {
            continue; // lost
        }
        deliver(&mut p.a, p.now, &ack);
    }
    // The timeout halved the loss window (`loss_window.rs`): half of it.
    let rest = drain(&mut p.a, p.now);
    assert_eq!(psns(&rest), psns(&first[1..5]), "the rest, released");
    deliver(&mut p.b, p.now, &rest);
    let acks = drain(&mut p.b, p.now);
    deliver(&mut p.a, p.now, &acks);
    p.run(1_000);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    assert_eq!(p.b.mem.slice(MEM_BASE + 0x4_0000, len as usize), &data[..]);
}

/// Has `a` post one RDMA WRITE of `len` bytes of a pattern from the start
/// of its memory to `b`'s at `remote` (an offset); returns the pattern.
fn post_write(p: &mut Pair, qa: QpId, len: u32, remote: u64) -> Vec<u8> {
    let data = pattern(&mut p.a, 0, len as usize);
    let sge = [p.a.sge(0, len)];
    let mut w = wr(1, send_opcode::RDMA_WRITE, &sge);
    w.rdma = RdmaTarget {
        remote_addr: MEM_BASE + remote,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &w).unwrap();
    data
}

/// Records the PSNs of the requests `a` sends in each turn of the wire,
/// dropping the `n`th request sent (counting from 1) where `drop(n)`.
fn record_bursts(p: &mut Pair, drop: fn(usize) -> bool) -> Rc<RefCell<Vec<Vec<u32>>>> {
    let bursts = Rc::new(RefCell::new(vec![Vec::new()]));
    let record = bursts.clone();
    let (mut sent, mut from_a_last) = (0, true);
    p.filter = Box::new(move |from_a, v| {
        let mut b = record.borrow_mut();
        if from_a && !from_a_last {
            b.push(Vec::new());
        }
        from_a_last = from_a;
        if from_a {
            sent += 1;
            b.last_mut().unwrap().push(v.psn().get());
            if drop(sent) {
                return Fate::Drop;
            }
        }
        Fate::Deliver
    });
    bursts
}

/// After a loss the requester keeps fewer packets in flight: a go-back
/// resends everything after the lost packet, so while packets are being
/// lost a full window wastes a window per loss. The loss window halves
/// at the go-back and grows back with the ACKs; the data arrives whole.
#[test]
fn after_a_loss_fewer_packets_are_in_flight() {
    let mut p = Pair::with_window(8 * 1024);
    let link = Link::default();
    let (qa, _) = p.connect(QpType::Rc, link);
    let data = post_write(&mut p, qa, 32 * 1024, 0x2_0000);
    let bursts = record_bursts(&mut p, |sent| sent == 5);
    p.run(10_000);
    assert_eq!(p.b.mem.slice(MEM_BASE + 0x2_0000, 32 * 1024), &data[..]);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    let first = link.psn_a;
    let bursts = bursts.borrow();
    assert_eq!(
        bursts[0],
        (first..first + 8).collect::<Vec<_>>(),
        "a window"
    );
    // The NAK for the 5th sends the requester back: 4 packets, half the
    // window, from the lost one.
    assert_eq!(bursts[1], (first + 4..first + 8).collect::<Vec<_>>());
}

/// Once halved, the loss window grows back a few packets per round trip
/// (per window acknowledged), not by half at every ACK: behind a
/// rate-limited link whose queue a full window overflowed, growing back
/// within a round trip overflowed it again at once, and most packets were
/// sent again.
#[test]
fn after_a_loss_the_window_grows_back_slowly() {
    let mut p = Pair::with_window(64 * 1024);
    let link = Link::default();
    let (qa, _) = p.connect(QpType::Rc, link);
    let data = post_write(&mut p, qa, 512 * 1024, 0x8_0000);
    let bursts = record_bursts(&mut p, |sent| sent == 5);
    p.run(100_000);
    assert_eq!(p.b.mem.slice(MEM_BASE + 0x8_0000, 512 * 1024), &data[..]);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    let sizes: Vec<usize> = bursts.borrow().iter().map(Vec::len).collect();
    assert_eq!(sizes[0], 64, "a window");
    assert_eq!(sizes[1], 32, "half of it, from the lost packet");
    for (turn, pair) in sizes[1..6].windows(2).enumerate() {
        assert!(
            pair[1] <= pair[0] + 4,
            "turn {} after the loss grew from {} to {} packets: {sizes:?}",
            turn + 2,
            pair[0],
            pair[1]
        );
    }
}

/// A loss window smaller than the interval at which a full send window
/// asks for ACKs still asks for one before it fills. Three losses, each
/// after the window halved for the one before (so each halves it again:
/// 64 packets, then 32, 16, 8), and the WRITE goes on at the pace of its
/// ACKs, with no local ACK timeout (4.2 ms each here; the wire runs 1 us
/// per packet). Asking for ACKs as rarely as the full window allows,
/// every window of 8 packets waited for a timeout.
#[test]
fn a_small_loss_window_still_asks_for_acks() {
    let mut p = Pair::with_window(64 * 1024);
    let link = Link::default();
    let (qa, _) = p.connect(QpType::Rc, link);
    let data = post_write(&mut p, qa, 256 * 1024, 0x4_0000);
    let first = link.psn_a;
    let mut lost = vec![first + 1, first + 80, first + 140];
    p.filter = Box::new(move |from_a, v| {
        if from_a && lost.first() == Some(&v.psn().get()) {
            lost.remove(0);
            return Fate::Drop;
        }
        Fate::Deliver
    });
    p.run(100_000);
    assert_eq!(p.b.mem.slice(MEM_BASE + 0x4_0000, 256 * 1024), &data[..]);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    let timeout = 4_096 << link.timeout;
    assert!(p.now < timeout, "a local ACK timeout: {} ns", p.now);
}
