//! The checker catches what it claims to: real runs over a perfect network
//! pass, and each is then tampered with the way a broken transport would
//! (a duplicate, a loss, a reordering, a wrong byte, a stray write), which
//! must fail the check.

use softverbs_engine::{FlatMemory, QpType};
use softverbs_sim::checker::check;
use softverbs_sim::runner::{execute, Execution};
use softverbs_sim::trace::Trace;
use softverbs_sim::{Faults, Limits, NetConfig, Workload};

/// A passing run and a stream of it that `pick` accepts.
fn find(pick: impl Fn(&Workload, &Execution, usize) -> bool) -> (Workload, Execution, usize) {
    for seed in 0..300 {
        let w = Workload::generate(seed);
        let net = NetConfig::new(Faults::default());
        let x = execute(&w, net, Limits::default(), Trace::default()).expect("setup");
        if x.ended.is_err() || !check(&w, &x.world, &x.obs).is_empty() {
            continue;
        }
        if let Some(s) = (0..w.streams.len()).find(|&s| pick(&w, &x, s)) {
            return (w, x, s);
        }
    }
    panic!("no passing run has such a stream");
}

fn ty(w: &Workload, s: usize) -> QpType {
    w.pair_of(s).qp_type
}

/// Fails the test unless the checker reports a failure containing `what`.
fn assert_caught(w: &Workload, x: &Execution, what: &str) {
    let failures = check(w, &x.world, &x.obs);
    assert!(
        failures.iter().any(|f| f.contains(what)),
        "expected a failure with {what:?}, got {failures:?}"
    );
}

fn flip(mem: &mut FlatMemory, addr: u64) {
    mem.slice_mut(addr, 1)[0] ^= 0x10;
}

#[test]
fn an_rc_message_delivered_twice() {
    let (w, mut x, s) = find(|w, x, s| ty(w, s) == QpType::Rc && !x.obs.recvs[s].is_empty());
    let first = x.obs.recvs[s][0];
    x.obs.recvs[s].push(first);
    assert_caught(&w, &x, "is extra");
}

#[test]
fn an_rc_message_lost() {
    let (w, mut x, s) = find(|w, x, s| ty(w, s) == QpType::Rc && !x.obs.recvs[s].is_empty());
    x.obs.recvs[s].pop();
    assert_caught(&w, &x, "was not");
}

#[test]
fn an_rc_message_with_the_wrong_length() {
    let (w, mut x, s) = find(|w, x, s| ty(w, s) == QpType::Rc && !x.obs.recvs[s].is_empty());
    x.obs.recvs[s][0].wc.byte_len += 1;
    assert_caught(&w, &x, "byte_len");
}

#[test]
fn send_completions_out_of_order_or_missing() {
    let (w, mut x, s) = find(|_, x, s| x.obs.sends[s].len() >= 2);
    x.obs.sends[s].swap(0, 1);
    assert_caught(&w, &x, "complete once each, in order");
    x.obs.sends[s].swap(0, 1);
    x.obs.sends[s].pop();
    assert_caught(&w, &x, "did not");
}

#[test]
fn a_completion_for_an_unsignaled_wr() {
    let (w, mut x, s) = find(|w, x, s| !w.streams[s].ops[0].signaled && !x.obs.sends[s].is_empty());
    let mut wc = x.obs.sends[s][0];
    wc.wr_id &= !0xFFFF_FFFF; // op 0, unsignaled
    x.obs.sends[s].insert(0, wc);
    assert_caught(&w, &x, "is op 0");
}

#[test]
fn a_wrong_byte_in_an_rc_write_target() {
    let (w, mut x, s) = find(|w, _, s| {
        ty(w, s) == QpType::Rc && w.streams[s].ops.iter().any(|o| o.is_write() && o.len > 0)
    });
    let op = w.streams[s]
        .ops
        .iter()
        .position(|o| o.is_write() && o.len > 0)
        .expect("found");
    let at = x.world.plan.streams[s].ops[op].remote;
    flip(&mut x.world.nodes[w.streams[s].to()].mem, at);
    assert_caught(&w, &x, "target wrong");
}

#[test]
fn a_wrong_byte_in_a_read_result() {
    let (w, mut x, s) = find(|w, _, s| w.streams[s].ops.iter().any(|o| o.is_read() && o.len > 0));
    let op = w.streams[s]
        .ops
        .iter()
        .position(|o| o.is_read() && o.len > 0)
        .expect("found");
    let at = x.world.plan.streams[s].ops[op].local[0].addr;
    flip(&mut x.world.nodes[w.streams[s].from].mem, at);
    assert_caught(&w, &x, "result wrong");
}

#[test]
fn an_atomic_applied_twice() {
    let (w, mut x, s) = find(|w, _, s| w.streams[s].ops.iter().any(|o| o.is_atomic()));
    let at = x.world.plan.streams[s].atomic_word;
    flip(&mut x.world.nodes[w.streams[s].to()].mem, at + 7);
    assert_caught(&w, &x, "atomic target ends");
}

#[test]
fn a_stray_write_outside_every_buffer() {
    let (w, mut x, _) = find(|_, _, _| true);
    let (addr, _) = x.world.plan.arenas[1].protected()[3];
    flip(&mut x.world.nodes[1].mem, addr);
    assert_caught(&w, &x, "outside every buffer");
}

#[test]
fn uc_messages_out_of_order() {
    let (w, mut x, s) = find(|w, x, s| ty(w, s) == QpType::Uc && x.obs.recvs[s].len() >= 2);
    x.obs.recvs[s].swap(0, 1);
    assert_caught(&w, &x, "no intact message sent after");
}

#[test]
fn ud_datagrams_may_arrive_in_any_order_but_intact() {
    let grh = softverbs_sim::plan::GRH_LEN;
    let (w, mut x, s) = find(|w, x, s| {
        ty(w, s) == QpType::Ud && x.obs.recvs[s].len() >= 2 && x.obs.recvs[s][0].wc.byte_len > grh
    });
    x.obs.recvs[s].swap(0, 1);
    assert_eq!(check(&w, &x.world, &x.obs), Vec::<String>::new());
    let r = x.obs.recvs[s][1];
    let pieces = &x.world.plan.queues[r.queue].buffers[r.buffer];
    let first_data_byte = address_at(pieces, grh);
    flip(&mut x.world.nodes[w.streams[s].to()].mem, first_data_byte);
    assert_caught(&w, &x, "no intact message of the stream");
}

/// The address of byte `offset` of a buffer made of `pieces`.
fn address_at(pieces: &[softverbs_sim::plan::Piece], mut offset: u32) -> u64 {
    for p in pieces {
        if offset < p.len {
            return p.addr + u64::from(offset);
        }
        offset -= p.len;
    }
    panic!("offset beyond the buffer");
}
