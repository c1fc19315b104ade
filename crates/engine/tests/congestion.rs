//! Congestion notification (`congestion.rs`): packets a receiver marks
//! as having met its filling queue make their requester keep fewer in
//! flight, without sending anything again; once the marks stop the
//! window grows back.

mod common;
use common::pair::*;
use softverbs_engine::*;
use softverbs_wire::{OpKind, PacketView, Psn};

/// A receiving QP sends CNPs at least this far apart (`cnp.rs`).
const CNP_INTERVAL: u64 = 50_000;
use std::cell::RefCell;
use std::rc::Rc;

/// The send window: 32 packets of the links' 1024-byte MTU.
const WINDOW_PKTS: i32 = 32;
/// The smallest window (`loss_window.rs`).
const MIN_PKTS: i32 = 2;
/// A WRITE long enough for many round trips: 512 packets.
const LEN: u32 = 512 * 1024;

/// What the wire carried: how far past the last PSN answered (by an ACK
/// or a READ response) each request packet was, in sending order, and
/// the responses with BECN.
#[derive(Default)]
struct Seen {
    acked: Option<Psn>,
    ahead: Vec<i32>,
    becn_responses: usize,
    becn_requests: usize,
}

/// Delivers every packet, marking those `mark` picks (by direction and
/// the request packets sent so far), and records `Seen`.
fn watch(p: &mut Pair, first_psn: u32, mark: fn(bool, usize) -> bool) -> Rc<RefCell<Seen>> {
    let seen = Rc::new(RefCell::new(Seen {
        acked: Some(Psn::new_masked(first_psn.wrapping_sub(1))),
        ..Seen::default()
    }));
    let record = seen.clone();
    p.filter = Box::new(move |from_a, v: &PacketView<'_>| {
        let mut s = record.borrow_mut();
        if from_a {
            let ahead = s.acked.map_or(0, |a| a.distance(v.psn()));
            s.ahead.push(ahead);
            s.becn_requests += usize::from(v.bth().becn);
        } else if matches!(v.opcode().kind(), OpKind::Ack | OpKind::ReadResponse) {
            s.acked = Some(v.psn());
            s.becn_responses += usize::from(v.bth().becn);
        }
        if mark(from_a, s.ahead.len()) {
            Fate::Mark
        } else {
            Fate::Deliver
        }
    });
    seen
}

/// Posts on a's `qa` a WRITE `id` of `LEN` bytes from the start of a's
/// memory into b's.
fn post_long_write(p: &mut Pair, qa: QpId, id: u64) {
    let sge = [p.a.sge(0, LEN)];
    let mut w = wr(id, send_opcode::RDMA_WRITE, &sge);
    w.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x8_0000,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &w).unwrap();
}

/// Connects an RC (or `ty`) pair with a 32-packet window, runs one
/// `LEN` WRITE marked as `mark` says, and checks it arrived whole with
/// nothing sent again.
fn write_marked(ty: QpType, mark: fn(bool, usize) -> bool) -> (Pair, Rc<RefCell<Seen>>) {
    let mut p = Pair::with_window(WINDOW_PKTS as u32 * 1024);
    // A UC requester has no window to wait on: it would send all before
    // the responder's turn.
    p.interleaved = ty == QpType::Uc;
    let link = Link::default();
    let (qa, _) = p.connect(ty, link);
    let data: Vec<u8> = (0..LEN as usize)
        .map(|i| (i * 13 + i / 509) as u8)
        .collect();
    p.a.mem.write(MEM_BASE, &data).unwrap();
    post_long_write(&mut p, qa, 1);
    let seen = watch(&mut p, link.psn_a, mark);
    p.run(100_000);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    assert_eq!(p.b.mem.slice(MEM_BASE + 0x8_0000, LEN as usize), &data[..]);
    assert_eq!(p.a.e.stats().tx_resent, 0, "a mark is not a loss");
    (p, seen)
}

/// READs of four packets each, `LEN` in all.
const READ_LEN: u32 = 4 * 1024;
/// The response packets of one READ: more than the smallest window.
const READ_PKTS: i32 = 4;
const _: () = assert!(READ_PKTS > MIN_PKTS);

/// Connects an RC pair with a 32-packet window and up to 16 READs
/// outstanding, runs `LEN / READ_LEN` READs marked as `mark` says, and
/// checks they arrived whole with nothing asked for again.
fn reads_marked(mark: fn(bool, usize) -> bool) -> (Pair, Rc<RefCell<Seen>>) {
    let mut p = Pair::with_window(WINDOW_PKTS as u32 * 1024);
    let link = Link {
        rd_atomic: 16,
        ..Link::default()
    };
    let (qa, _) = p.connect(QpType::Rc, link);
    let data: Vec<u8> = (0..LEN as usize).map(|i| (i * 7 + i / 251) as u8).collect();
    p.b.mem.write(MEM_BASE + 0x8_0000, &data).unwrap();
    for i in 0..LEN / READ_LEN {
        let offset = i * READ_LEN;
        let sge = [p.a.sge(u64::from(offset), READ_LEN)];
        let mut r = wr(u64::from(i), send_opcode::RDMA_READ, &sge);
        r.rdma = RdmaTarget {
            remote_addr: MEM_BASE + 0x8_0000 + u64::from(offset),
            rkey: p.b.key,
        };
        p.a.e.post_send(qa, &r).unwrap();
    }
    let seen = watch(&mut p, link.psn_a, mark);
    p.run(100_000);
    let wcs = p.a.poll();
    assert_eq!(wcs.len() as u32, LEN / READ_LEN);
    assert!(wcs.iter().all(|wc| wc.status == WcStatus::Success));
    assert_eq!(p.a.mem.slice(MEM_BASE, LEN as usize), &data[..]);
    assert_eq!(p.a.e.stats().tx_resent, 0, "a mark is not a loss");
    (p, seen)
}

fn most_ahead(ahead: &[i32]) -> i32 {
    ahead.iter().copied().max().unwrap_or(0)
}

/// Unmarked, the requester keeps its whole window in flight.
#[test]
fn unmarked_the_whole_window_is_in_flight() {
    let (p, seen) = write_marked(QpType::Rc, |_, _| false);
    let s = seen.borrow();
    assert_eq!(most_ahead(&s.ahead), WINDOW_PKTS);
    assert_eq!((s.becn_responses, p.a.e.stats().rx_becn), (0, 0));
}

/// Every request marked: the responder's ACKs carry BECN and the
/// requester halves its window at each round trip, down to its two
/// packets, instead of keeping 32 in the receiver's queue.
#[test]
fn marked_requests_bring_becn_back_and_the_window_shrinks() {
    let (p, seen) = write_marked(QpType::Rc, |from_a, _| from_a);
    let s = seen.borrow();
    assert!(s.becn_responses > 0);
    assert_eq!(p.a.e.stats().rx_becn, s.becn_responses as u64);
    assert_eq!(p.b.e.stats().rx_marked, s.ahead.len() as u64);
    assert_eq!(s.becn_requests, 0, "requests carry no notice");
    let late = &s.ahead[s.ahead.len() / 2..];
    assert_eq!(most_ahead(late), MIN_PKTS, "in flight late: {late:?}");
}

/// The requester's own queue filling (its ACKs marked on arrival) makes
/// it send less too, with no BECN on the wire.
#[test]
fn marked_responses_shrink_the_window_too() {
    let (p, seen) = write_marked(QpType::Rc, |from_a, _| !from_a);
    let s = seen.borrow();
    assert_eq!(s.becn_responses, 0);
    assert!(p.a.e.stats().rx_marked > 0);
    let late = &s.ahead[s.ahead.len() / 2..];
    assert_eq!(most_ahead(late), MIN_PKTS, "in flight late: {late:?}");
}

/// Marks on the first 64 request packets only: the window halves, then
/// grows back to the whole window once they stop.
#[test]
fn once_the_marks_stop_the_window_grows_back() {
    let (_, seen) = write_marked(QpType::Rc, |from_a, sent| from_a && sent <= 64);
    let s = seen.borrow();
    let early = &s.ahead[64..192];
    assert!(most_ahead(early) < WINDOW_PKTS, "{early:?}");
    let last = &s.ahead[s.ahead.len() - 64..];
    assert_eq!(most_ahead(last), WINDOW_PKTS);
}

/// UC has no responses to carry a notice and no window: a marked UC
/// request is answered with a CNP (at most one per 50 us), and the
/// requester sends at a capped rate, halved at each CNP down to its least
/// (`cnp.rs`, `pacing.rs`); the WRITE arrives whole, slower.
#[test]
fn marked_uc_requests_bring_cnps_and_the_sender_slows() {
    let (unmarked, _) = write_marked(QpType::Uc, |_, _| false);
    let (p, seen) = write_marked(QpType::Uc, |_, _| true);
    assert!(p.interleaved);
    let s = seen.borrow();
    assert_eq!(s.becn_responses, 0);
    assert_eq!(p.b.e.stats().rx_marked, s.ahead.len() as u64);
    let cnps = p.b.e.stats().tx_cnp;
    assert!(cnps > 1, "{cnps}");
    assert!(cnps <= p.now / CNP_INTERVAL + 1, "{cnps} in {} ns", p.now);
    assert_eq!(p.a.e.stats().rx_cnp, cnps);
    assert_eq!(unmarked.b.e.stats().tx_cnp, 0);
    // Unpaced, the pair moves a packet a microsecond; the least rate,
    // 32 MiB/s, is a 1 KiB packet in about 32.
    assert!(
        p.now > 10 * unmarked.now,
        "paced {} ns, unpaced {} ns",
        p.now,
        unmarked.now
    );
}

/// Once the CNPs stop, the cap rises back and is lifted: a WRITE sent
/// after a quiet while goes as fast as one never paced.
#[test]
fn after_the_cnps_stop_a_uc_sender_is_unpaced_again() {
    let mut p = Pair::new();
    p.interleaved = true;
    let (qa, _) = p.connect(QpType::Uc, Link::default());
    let write = |p: &mut Pair, id: u64| {
        post_long_write(p, qa, id);
        let start = p.now;
        p.run(100_000);
        assert_eq!(p.a.poll()[0].status, WcStatus::Success);
        p.now - start
    };
    let unpaced = write(&mut p, 1);
    p.filter = Box::new(|from_a, _| if from_a { Fate::Mark } else { Fate::Deliver });
    let paced = write(&mut p, 2);
    assert!(
        paced > 10 * unpaced,
        "paced {paced} ns, unpaced {unpaced} ns"
    );
    p.filter = Box::new(|_, _| Fate::Deliver);
    // From the least rate, the cap's target grows past 16 GiB/s in about
    // 1.6 s (`pacing.rs`).
    p.now += 2_000_000_000;
    let after = write(&mut p, 3);
    assert!(
        after <= unpaced + 10_000,
        "{after} ns after the quiet, {unpaced} ns never paced"
    );
}

/// Eight UD datagrams from a's QPs `senders` in turn to b's `qb`, every
/// one marked, with a receive WR for each; runs until idle.
fn marked_ud_sends(p: &mut Pair, senders: &[QpId], qb: QpId) {
    let target = Some(p.ud_target(qb));
    for id in 0..8 {
        p.b.post_recv(qb, id, 0x10000 * (id + 1), 1024);
        let sge = [p.a.sge(0, 512)];
        let s = SendWr {
            ud: target,
            ..wr(id, send_opcode::SEND, &sge)
        };
        p.a.e
            .post_send(senders[id as usize % senders.len()], &s)
            .unwrap();
    }
    p.filter = Box::new(|from_a, _| if from_a { Fate::Mark } else { Fate::Deliver });
    p.run(1_000);
}

/// A marked UD datagram is answered with a CNP to the QP in its DETH.
#[test]
fn a_marked_ud_datagram_brings_a_cnp_to_its_sender() {
    let mut p = Pair::new();
    p.interleaved = true;
    let (qa, qb) = p.connect(QpType::Ud, Link::default());
    marked_ud_sends(&mut p, &[qa], qb);
    assert_eq!(p.b.poll().len(), 8, "every datagram arrived");
    assert!(p.b.e.stats().tx_cnp >= 1);
    assert_eq!(p.a.e.stats().rx_cnp, p.b.e.stats().tx_cnp);
}

/// Two UD QPs sending into one, marked: each is told within the same
/// interval (one CNP per sender, not per receiving QP).
#[test]
fn each_sender_of_a_ud_fan_in_is_told() {
    let mut p = Pair::new();
    p.interleaved = true;
    let (qa1, qb) = p.connect(QpType::Ud, Link::default());
    let (qa2, _) = p.connect(QpType::Ud, Link::default());
    let start = p.now;
    marked_ud_sends(&mut p, &[qa1, qa2], qb);
    assert_eq!(p.b.poll().len(), 8, "every datagram arrived");
    assert!(p.now - start < CNP_INTERVAL, "one interval");
    assert_eq!(p.b.e.stats().tx_cnp, 2, "one to each sender");
    assert_eq!(p.a.e.stats().rx_cnp, 2);
}

/// A CNP to an RC QP (a RoCE receiver sends them for marked RC requests
/// too; softverbs answers those with BECN) halves its window as BECN
/// does, sending nothing again.
#[test]
fn a_cnp_to_an_rc_requester_halves_its_window() {
    let mut p = Pair::with_window(WINDOW_PKTS as u32 * 1024);
    let link = Link::default();
    let (qa, _) = p.connect(QpType::Rc, link);
    post_long_write(&mut p, qa, 1);
    let seen = watch(&mut p, link.psn_a, |_, _| false);
    p.run(4 * WINDOW_PKTS as usize);
    let before = seen.borrow().ahead.len();
    assert_eq!(
        most_ahead(&seen.borrow().ahead),
        WINDOW_PKTS,
        "a full window"
    );
    let mut cnp = [0u8; softverbs_wire::CNP_LEN];
    let qpn = softverbs_wire::Qpn::new_masked(p.a.e.qp_num(qa).unwrap());
    softverbs_wire::write_cnp(&mut cnp, qpn, 0xFFFF).unwrap();
    let (a_gid, b_gid) = (p.a.gid, p.b.gid);
    p.a.e.handle_packet(p.now, b_gid, a_gid, &cnp, &mut p.a.mem);
    assert_eq!(p.a.e.stats().rx_cnp, 1);
    p.run(100_000);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    assert_eq!(p.a.e.stats().tx_resent, 0, "a CNP is not a loss");
    let s = seen.borrow();
    // The next window's worth of packets, before growth (a few packets
    // per window acknowledged) brings it back.
    let next = &s.ahead[before..before + WINDOW_PKTS as usize];
    assert!(most_ahead(next) <= WINDOW_PKTS / 2, "{next:?}");
}

/// A CNP for a UC QP from an address that is not its peer's changes
/// nothing (counted as a wrong address); one for a QP that does not exist
/// is counted as such.
#[test]
fn a_cnp_from_a_stranger_is_dropped() {
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Uc, Link::default());
    let qpn = p.a.e.qp_num(qa).unwrap();
    let mut cnp = [0u8; softverbs_wire::CNP_LEN];
    softverbs_wire::write_cnp(&mut cnp, softverbs_wire::Qpn::new_masked(qpn), 0xFFFF).unwrap();
    let stranger = Gid::from_ipv4(std::net::Ipv4Addr::new(10, 9, 9, 9));
    let a_gid = p.a.gid;
    p.a.e.handle_packet(0, stranger, a_gid, &cnp, &mut p.a.mem);
    assert_eq!(p.a.e.stats().rx_wrong_address, 1);
    assert_eq!(p.a.e.stats().rx_cnp, 0);
    assert_eq!(p.a.e.poll_timeout(), None, "nothing held");
    softverbs_wire::write_cnp(&mut cnp, softverbs_wire::Qpn::new_masked(qpn + 1), 0xFFFF).unwrap();
    let b_gid = p.b.gid;
    p.a.e.handle_packet(0, b_gid, a_gid, &cnp, &mut p.a.mem);
    assert_eq!(p.a.e.stats().rx_unknown_qp, 1);
    softverbs_wire::write_cnp(&mut cnp, softverbs_wire::Qpn::new_masked(qpn), 0xFFFF).unwrap();
    p.a.e.handle_packet(0, b_gid, a_gid, &cnp, &mut p.a.mem);
    assert_eq!(p.a.e.stats().rx_cnp, 1, "from its peer");
}

/// A CNP of another partition, and one for a QP whose connection runs on
/// the same-host path at both ends (which sends nothing on the wire), are
/// dropped and counted as such; neither holds the QP back.
#[test]
fn a_cnp_of_another_partition_or_for_a_same_host_connection_is_dropped() {
    let mut p = Pair::same_host();
    let (qa, _) = p.connect(QpType::Uc, Link::default());
    let qpn = softverbs_wire::Qpn::new_masked(p.a.e.qp_num(qa).unwrap());
    let (a_gid, b_gid) = (p.a.gid, p.b.gid);
    let mut cnp = [0u8; softverbs_wire::CNP_LEN];
    softverbs_wire::write_cnp(&mut cnp, qpn, 0x1234).unwrap();
    p.a.e.handle_packet(0, b_gid, a_gid, &cnp, &mut p.a.mem);
    assert_eq!(p.a.e.stats().rx_bad_pkey, 1);
    p.a.e.set_peer_direct(qa).unwrap();
    softverbs_wire::write_cnp(&mut cnp, qpn, 0xFFFF).unwrap();
    p.a.e.handle_packet(0, b_gid, a_gid, &cnp, &mut p.a.mem);
    assert_eq!(p.a.e.stats().rx_peer_on_same_host, 1);
    assert_eq!(p.a.e.stats().rx_cnp, 0);
    assert_eq!(p.a.e.poll_timeout(), None, "nothing held");
}

/// Unmarked, READs are asked for up to a window of responses ahead of
/// the last that arrived: the last response a READ asks for lies within
/// the window.
#[test]
fn unmarked_reads_are_asked_a_window_ahead() {
    let (_, seen) = reads_marked(|_, _| false);
    let s = seen.borrow();
    assert_eq!(s.ahead.len() as u32, LEN / READ_LEN);
    assert_eq!(most_ahead(&s.ahead), WINDOW_PKTS - READ_PKTS + 1);
}

/// The requester's queue filling with READ responses (marked on
/// arrival) makes it ask for fewer ahead: its window falls to 2 packets,
/// less than a READ, so each READ waits for all responses before it.
#[test]
fn marked_read_responses_hold_the_next_reads_back() {
    let (p, seen) = reads_marked(|from_a, _| !from_a);
    let s = seen.borrow();
    assert_eq!(s.becn_responses, 0);
    assert!(p.a.e.stats().rx_marked > 0);
    let late = &s.ahead[s.ahead.len() / 2..];
    assert_eq!(most_ahead(late), 1, "asked ahead late: {late:?}");
}

/// Marked READ requests bring BECN back on their responses, and the
/// requester asks for fewer ahead. Less so than for marked responses:
/// the responder owes one notice however many marked requests came
/// before its next response, so one response of a burst carries it and
/// the others grow the window again (the transport marks data packets
/// only, so READ requests are marked only where something else marks).
#[test]
fn marked_read_requests_bring_becn_on_their_responses() {
    let (p, seen) = reads_marked(|from_a, _| from_a);
    let s = seen.borrow();
    assert!(s.becn_responses > 0);
    assert!(s.becn_responses < s.ahead.len());
    assert_eq!(p.a.e.stats().rx_becn, s.becn_responses as u64);
    let late = &s.ahead[s.ahead.len() / 2..];
    assert!(
        most_ahead(late) > 1,
        "as held back as marked responses: {late:?}"
    );
    assert!(
        most_ahead(late) < WINDOW_PKTS / 2,
        "asked ahead late: {late:?}"
    );
}

/// A response the embedder had no room for (`poll_transmit` into a
/// buffer too short for it) is lost as on the wire, and the notice it
/// was to carry rides on the next response instead: the answer to the
/// WRITE sent again.
#[test]
fn a_notice_whose_response_found_no_room_rides_on_the_next() {
    let mut p = Pair::new();
    let link = Link::default();
    let (qa, _) = p.connect(QpType::Rc, link);
    let sge = [p.a.sge(0, 64)];
    let mut w = wr(1, send_opcode::RDMA_WRITE, &sge);
    w.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x8_0000,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &w).unwrap();
    let mut sink = SealingSink::default();
    let t = p.a.e.poll_transmit_to(p.now, &p.a.mem, &mut sink).unwrap();
    let marked = Arrival {
        src_gid: t.src_gid,
        dst_gid: t.dst_gid,
        marked: true,
        traffic_class: t.traffic_class,
    };
    p.b.e
        .handle_arrival(p.now, marked, sink.sealed(&t), &mut p.b.mem);
    let mut no_room = [0u8; 8];
    p.b.e.poll_transmit(p.now, &p.b.mem, &mut no_room);
    let seen = watch(&mut p, link.psn_a, |_, _| false);
    p.run(1_000);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    assert_eq!(p.a.e.stats().tx_resent, 1, "the ACK was lost");
    assert_eq!(seen.borrow().becn_responses, 1);
    assert_eq!(p.a.e.stats().rx_becn, 1);
}
