//! Congestion notification (`congestion.rs`): packets a receiver marks
//! as having met its filling queue make their requester keep fewer in
//! flight, without sending anything again; once the marks stop the
//! window grows back.

mod common;
use common::pair::*;
use softverbs_engine::*;
use softverbs_wire::{OpKind, PacketView, Psn};
use std::cell::RefCell;
use std::rc::Rc;

/// The send window: 32 packets of the links' 1024-byte MTU.
const WINDOW_PKTS: i32 = 32;
/// The smallest window (`loss_window.rs`).
const MIN_PKTS: i32 = 2;
/// A WRITE long enough for many round trips: 512 packets.
const LEN: u32 = 512 * 1024;

/// What the wire carried: how far past the last acknowledged PSN each
/// request packet was, in sending order, and the ACKs with BECN.
#[derive(Default)]
struct Seen {
    acked: Option<Psn>,
    ahead: Vec<i32>,
    becn_acks: usize,
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
        } else if v.opcode().kind() == OpKind::Ack {
            s.acked = Some(v.psn());
            s.becn_acks += usize::from(v.bth().becn);
        }
        if mark(from_a, s.ahead.len()) {
            Fate::Mark
        } else {
            Fate::Deliver
        }
    });
    seen
}

/// Connects an RC (or `ty`) pair with a 32-packet window, runs one
/// `LEN` WRITE marked as `mark` says, and checks it arrived whole with
/// nothing sent again.
fn write_marked(ty: QpType, mark: fn(bool, usize) -> bool) -> (Pair, Rc<RefCell<Seen>>) {
    let mut p = Pair::with_window(WINDOW_PKTS as u32 * 1024);
    let link = Link::default();
    let (qa, _) = p.connect(ty, link);
    let data: Vec<u8> = (0..LEN as usize)
        .map(|i| (i * 13 + i / 509) as u8)
        .collect();
    p.a.mem.write(MEM_BASE, &data).unwrap();
    let sge = [p.a.sge(0, LEN)];
    let mut w = wr(1, send_opcode::RDMA_WRITE, &sge);
    w.rdma = RdmaTarget {
        remote_addr: MEM_BASE + 0x8_0000,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &w).unwrap();
    let seen = watch(&mut p, link.psn_a, mark);
    p.run(100_000);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    assert_eq!(p.b.mem.slice(MEM_BASE + 0x8_0000, LEN as usize), &data[..]);
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
    assert_eq!((s.becn_acks, p.a.e.stats().rx_becn), (0, 0));
}

/// Every request marked: the responder's ACKs carry BECN and the
/// requester halves its window at each round trip, down to its two
/// packets, instead of keeping 32 in the receiver's queue.
#[test]
fn marked_requests_bring_becn_back_and_the_window_shrinks() {
    let (p, seen) = write_marked(QpType::Rc, |from_a, _| from_a);
    let s = seen.borrow();
    assert!(s.becn_acks > 0);
    assert_eq!(p.a.e.stats().rx_becn, s.becn_acks as u64);
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
    assert_eq!(s.becn_acks, 0);
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

/// UC has no responses to carry a notice and no window: marks change
/// nothing, and the WRITE arrives whole.
#[test]
fn marks_on_uc_change_nothing() {
    let (p, seen) = write_marked(QpType::Uc, |_, _| true);
    let s = seen.borrow();
    assert_eq!(s.becn_acks, 0);
    assert_eq!(p.b.e.stats().rx_marked, s.ahead.len() as u64);
}
