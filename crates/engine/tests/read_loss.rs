//! Lost READ responses: the requester asks again for the READ that lost
//! them, from its first missing PSN, and keeps the whole responses of the
//! READs after it (where go-back-N would ask for every one again); the
//! responder sends a repeated READ ahead of the responses it still has
//! queued for later PSNs, and queues no more repeats than
//! max_dest_rd_atomic. An atomic whose ACK is lost is asked for again alike.

mod common;
use common::pair::*;
use softverbs_engine::*;
use softverbs_wire::{Bth, ExtHeaders, OpKind, Opcode, PacketBuilder, PacketView, Psn, Qpn, Reth};
use std::cell::RefCell;
use std::rc::Rc;

/// Three MTUs of 1,024 bytes: three response packets.
const READ_LEN: u32 = 3000;

/// Posts a READ (wr_id `id`) of `len` bytes from B's memory at `remote`
/// into A's at `local` (offsets from `MEM_BASE`).
fn post_read(p: &mut Pair, qa: QpId, id: u64, local: u64, remote: u64, len: u32) {
    let sge = [p.a.sge(local, len)];
    let mut r = wr(id, send_opcode::RDMA_READ, &sge);
    r.rdma = RdmaTarget {
        remote_addr: MEM_BASE + remote,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &r).unwrap();
}

/// Posts `n` READs of [`READ_LEN`] from B's memory at 0x2000 + i * 0x1000
/// into A's at 0x40000 + i * 0x1000 (wr_id i), and returns the data each
/// must bring.
fn post_reads(p: &mut Pair, qa: QpId, n: u64) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let data: Vec<u8> = (0..READ_LEN as usize)
                .map(|k| (k as u8).wrapping_mul(7).wrapping_add(i as u8))
                .collect();
            p.b.mem
                .write(MEM_BASE + 0x2000 + i * 0x1000, &data)
                .unwrap();
            post_read(
                p,
                qa,
                i,
                0x40000 + i * 0x1000,
                0x2000 + i * 0x1000,
                READ_LEN,
            );
            data
        })
        .collect()
}

/// Every READ completed, in order and successfully, with its data.
fn assert_reads_done(p: &mut Pair, want: &[Vec<u8>]) {
    let wcs = p.a.poll();
    let ids: Vec<u64> = wcs.iter().map(|wc| wc.wr_id).collect();
    assert_eq!(ids, (0..want.len() as u64).collect::<Vec<_>>());
    assert!(wcs.iter().all(|wc| wc.status == WcStatus::Success));
    for (i, data) in want.iter().enumerate() {
        let got =
            p.a.mem
                .slice(MEM_BASE + 0x40000 + i as u64 * 0x1000, data.len());
        assert!(got == data.as_slice(), "READ {i} brought its data");
    }
}

/// What went over the wire: A's READ requests (their PSNs, relative to
/// A's first, and how many READ responses B had sent before each) and the
/// count of B's READ response packets.
#[derive(Default)]
struct Log {
    requests: Vec<u32>,
    responses_before: Vec<usize>,
    responses: usize,
}

/// Logs the READ traffic and drops the B-to-A READ responses at the
/// positions (counted from 1) in `drops`.
fn log_dropping(p: &mut Pair, drops: &'static [usize]) -> Rc<RefCell<Log>> {
    let log = Rc::new(RefCell::new(Log::default()));
    let seen = log.clone();
    let first = Link::default().psn_a;
    p.filter = Box::new(move |from_a, v: &PacketView<'_>| {
        let mut log = seen.borrow_mut();
        match v.opcode().kind() {
            OpKind::ReadRequest if from_a => {
                log.requests.push(v.psn().get() - first);
                let before = log.responses;
                log.responses_before.push(before);
            }
            OpKind::ReadResponse if !from_a => {
                log.responses += 1;
                if drops.contains(&log.responses) {
                    return Fate::Drop;
                }
            }
            _ => {}
        }
        Fate::Deliver
    });
    log
}

#[test]
fn a_lost_read_response_is_asked_for_again_alone() {
    let mut p = Pair::new();
    // A timeout of about 4 s: a recovery by the timer would show in `now`.
    let link = Link {
        timeout: 20,
        ..Link::default()
    };
    let (qa, _) = p.connect(QpType::Rc, link);
    let want = post_reads(&mut p, qa, 4);
    // The second response packet of the first READ.
    let log = log_dropping(&mut p, &[2]);
    let start = p.now;
    p.run(200);
    assert_reads_done(&mut p, &want);
    let log = log.borrow();
    assert_eq!(
        log.requests,
        [0, 3, 6, 9, 1],
        "the first READ asked again from its lost PSN, the others not"
    );
    assert_eq!(log.responses, 12 + 2, "its last two responses sent again");
    assert!(p.now - start < 1_000_000_000, "no local ACK timeout");
}

#[test]
fn lost_last_responses_of_a_read_are_asked_for_when_a_later_one_arrives() {
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    let want = post_reads(&mut p, qa, 3);
    // The last response of the first READ and the first of the second:
    // the third READ's response shows both lost.
    let log = log_dropping(&mut p, &[3, 4]);
    p.run(200);
    assert_reads_done(&mut p, &want);
    let log = log.borrow();
    assert_eq!(log.requests, [0, 3, 6, 2, 3]);
    assert_eq!(log.responses, 9 + 1 + 3);
}

#[test]
fn reads_after_an_unanswered_one_stay_within_max_rd_atomic() {
    let mut p = Pair::new();
    let link = Link {
        rd_atomic: 2,
        ..Link::default()
    };
    let (qa, _) = p.connect(QpType::Rc, link);
    let want = post_reads(&mut p, qa, 4);
    // The first READ's last response is lost; the second READ is answered
    // whole, yet the third must wait for the first: the responder keeps
    // resources for its last max_dest_rd_atomic READs only, and a READ
    // asked again must find its own.
    let log = log_dropping(&mut p, &[3]);
    p.run(200);
    assert_reads_done(&mut p, &want);
    let log = log.borrow();
    assert_eq!(log.requests, [0, 3, 2, 6, 9]);
    assert_eq!(
        log.responses_before[3],
        3 + 3 + 1,
        "the third READ asked for once the first was answered"
    );
}

/// A go-back-N requester (as rxe's) asks again for the lost READ and then
/// for every later one. The repeated READ's responses go out ahead of
/// those still queued for the later READs, so these arrive in order after
/// it and are taken, and the later repeated requests find them sent.
#[test]
fn a_repeated_read_goes_out_ahead_of_the_queued_later_responses() {
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc, Link::default());
    let want = post_reads(&mut p, qa, 3);
    // B sees the three requests but sends nothing yet.
    let mut sink = SealingSink::default();
    let mut requests = Vec::new();
    while let Some(t) = p.a.e.poll_transmit_to(p.now, &p.a.mem, &mut sink) {
        requests.push((t.src_gid, t.dst_gid, sink.sealed(&t).to_vec()));
    }
    assert_eq!(requests.len(), 3);
    for (src, dst, pkt) in &requests {
        p.b.e.handle_packet(p.now, *src, *dst, pkt, &mut p.b.mem);
    }
    // The first READ's request arrives again, as a go-back-N requester
    // that lost its responses sends it.
    let (src, dst, pkt) = &requests[0];
    p.b.e.handle_packet(p.now, *src, *dst, pkt, &mut p.b.mem);
    let mut order = Vec::new();
    while let Some(t) = p.b.e.poll_transmit_to(p.now, &p.b.mem, &mut sink) {
        let pkt = sink.sealed(&t);
        let v = PacketView::parse(pkt).unwrap();
        order.push(v.psn().get() - Link::default().psn_a);
        p.a.e
            .handle_packet(p.now, t.src_gid, t.dst_gid, pkt, &mut p.a.mem);
    }
    assert_eq!(
        order,
        [0, 1, 2, 3, 4, 5, 6, 7, 8],
        "one stream per READ, in PSN order"
    );
    assert_reads_done(&mut p, &want);
}

#[test]
fn a_read_asked_again_that_loses_its_first_responses_is_asked_again_at_once() {
    let mut p = Pair::new();
    let link = Link {
        timeout: 20,
        ..Link::default()
    };
    let (qa, _) = p.connect(QpType::Rc, link);
    let want = post_reads(&mut p, qa, 1);
    // PSN 1 is lost, PSN 2 shows it: asked again from 1. Its new stream
    // loses PSN 1 again; its PSN 2, no higher than the last from before,
    // shows that.
    let log = log_dropping(&mut p, &[2, 4]);
    let start = p.now;
    p.run(200);
    assert_reads_done(&mut p, &want);
    assert_eq!(log.borrow().requests, [0, 1, 1]);
    assert!(p.now - start < 1_000_000_000, "no local ACK timeout");
}

/// The responses of 200 READs of 64 KiB, one response packet in a hundred
/// lost (and one request in a hundred): go-back-N sent 6.3 times the
/// 12,800 packets the READs need, asking for each READ alone about 1.3.
#[test]
fn under_one_percent_loss_reads_cost_little_more_than_their_responses() {
    let mut p = Pair::new();
    let link = Link {
        rd_atomic: 16,
        ..Link::default()
    };
    let (qa, _) = p.connect(QpType::Rc, link);
    let sent = Rc::new(RefCell::new(0usize));
    let counted = sent.clone();
    let mut rng = fastrand::Rng::with_seed(12345);
    p.filter = Box::new(move |from_a, _| {
        if !from_a {
            *counted.borrow_mut() += 1;
        }
        if rng.u32(..100) == 0 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    const READS: u64 = 200;
    let (mut posted, mut done) = (0, 0);
    while done < READS {
        // 64 outstanding, as perftest keeps its send queue full.
        while posted < READS && posted - done < 64 {
            post_read(&mut p, qa, posted, 0x10000, 0x80000, 65536);
            posted += 1;
        }
        if p.exchange() == 0 {
            p.run(1); // the local ACK timeout, after a lost request
        }
        for wc in p.a.poll() {
            assert_eq!(wc.status, WcStatus::Success);
            done += 1;
        }
    }
    let responses = *sent.borrow();
    assert!(
        responses < 12_800 * 3 / 2,
        "{responses} response packets for 12,800"
    );
}

/// A peer that repeats READs it cannot have outstanding (one request per
/// PSN of an answered READ, each for one packet) gets no more repeated
/// streams queued at once than max_dest_rd_atomic: the others are dropped,
/// as rxe drops a repeat it has no resource for.
#[test]
fn repeated_reads_beyond_max_dest_rd_atomic_are_dropped() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    // One READ of 16 packets, answered: B expects the PSN after it.
    post_read(&mut p, qa, 1, 0x40000, 0x2000, 16 * 1024);
    p.run(100);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    let dest = p.b.e.qp_num(qb).unwrap();
    let first = Link::default().psn_a;
    let mut sink = SealingSink::default();
    let mut buf = vec![0u8; 256];
    for k in 0..16 {
        let builder = PacketBuilder {
            bth: Bth::new(
                Opcode::from_u8(0x0C).unwrap(), // RC RDMA READ request
                Qpn::new_masked(dest),
                Psn::new_masked(first + k),
            ),
            ext: ExtHeaders {
                reth: Some(Reth {
                    va: MEM_BASE + 0x2000 + u64::from(k) * 1024,
                    rkey: p.b.key,
                    dma_len: 1024,
                }),
                ..ExtHeaders::default()
            },
            payload: &[],
        };
        let n = builder.build_unsealed(&mut buf).unwrap();
        p.b.e
            .handle_packet(p.now, p.a.gid, p.b.gid, &buf[..n], &mut p.b.mem);
    }
    let mut responses = 0;
    while p.b.e.poll_transmit_to(p.now, &p.b.mem, &mut sink).is_some() {
        responses += 1;
    }
    assert_eq!(responses, usize::from(Link::default().rd_atomic));
    assert!(p.b.events().is_empty(), "no error: repeats are not invalid");
}

/// An atomic whose ACK is lost, then a READ: the READ's response shows the
/// atomic's ACK lost, so the atomic alone is asked for again, and the
/// responder answers it from its saved result instead of adding twice.
#[test]
fn an_atomic_whose_ack_is_lost_is_asked_again_when_a_later_read_is_answered() {
    let mut p = Pair::new();
    let link = Link {
        timeout: 20,
        ..Link::default()
    };
    let (qa, _) = p.connect(QpType::Rc, link);
    p.b.mem
        .write(MEM_BASE + 0x100, &10u64.to_ne_bytes())
        .unwrap();
    let sge = [p.a.sge(0x800, 8)];
    let mut add = wr(0, send_opcode::ATOMIC_FETCH_AND_ADD, &sge);
    add.atomic = AtomicTarget {
        remote_addr: MEM_BASE + 0x100,
        compare_add: 5,
        swap: 0,
        rkey: p.b.key,
    };
    p.a.e.post_send(qa, &add).unwrap();
    let data: Vec<u8> = (0..READ_LEN as usize).map(|k| k as u8).collect();
    p.b.mem.write(MEM_BASE + 0x2000, &data).unwrap();
    post_read(&mut p, qa, 1, 0x40000, 0x2000, READ_LEN);
    let requests = Rc::new(RefCell::new(Vec::new()));
    let seen = requests.clone();
    let mut dropped = false;
    p.filter = Box::new(move |from_a, v: &PacketView<'_>| {
        let request = matches!(v.opcode().kind(), OpKind::ReadRequest) || v.atomic_eth().is_some();
        if from_a && request {
            seen.borrow_mut()
                .push(v.psn().get() - Link::default().psn_a);
        }
        if !from_a && v.atomic_ack_eth().is_some() && !dropped {
            dropped = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    let start = p.now;
    p.run(200);
    assert_eq!(
        *requests.borrow(),
        [0, 1, 0],
        "the atomic asked for again, the READ not"
    );
    assert!(p.now - start < 1_000_000_000, "no local ACK timeout");
    let wcs = p.a.poll();
    assert_eq!(wcs.iter().map(|wc| wc.wr_id).collect::<Vec<_>>(), [0, 1]);
    assert!(wcs.iter().all(|wc| wc.status == WcStatus::Success));
    assert_eq!(
        p.b.mem.slice(MEM_BASE + 0x100, 8),
        &15u64.to_ne_bytes(),
        "added once"
    );
    assert_eq!(
        p.a.mem.slice(MEM_BASE + 0x800, 8),
        &10u64.to_ne_bytes(),
        "the original value, from the saved result"
    );
    assert_eq!(p.a.mem.slice(MEM_BASE + 0x40000, data.len()), &data[..]);
}
