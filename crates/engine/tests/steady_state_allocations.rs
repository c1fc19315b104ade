//! The data path allocates nothing per WR once warmed up: posting sends
//! and receives, building and taking packets, ACKs, timers and polling
//! completions reuse what the first rounds grew (send and receive queues
//! with inline SGE arrays, the CQ's ring, the schedule's heap). Counted by
//! dhat's allocator in testing mode, in a plain `main` (`harness = false`
//! in Cargo.toml): dhat counts every thread's allocations, and no other
//! thread runs here.

mod common;
use common::pair::*;
use softverbs_engine::*;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Blocks allocated so far (dhat's count, every thread: this process
/// has no other).
fn allocations() -> u64 {
    dhat::HeapStats::get().total_blocks
}

/// Moves every packet between the two engines until both are idle.
fn exchange(p: &mut Pair, buf: &mut [u8]) {
    loop {
        let mut moved = false;
        for from_a in [true, false] {
            let (src, dst) = if from_a {
                (&mut p.a, &mut p.b)
            } else {
                (&mut p.b, &mut p.a)
            };
            while let Some(t) = src.e.poll_transmit(p.now, &src.mem, buf) {
                dst.e
                    .handle_packet(p.now, t.src_gid, t.dst_gid, &buf[..t.len], &mut dst.mem);
                p.now += 1_000;
                moved = true;
            }
        }
        if !moved {
            return;
        }
    }
}

/// One round: a 3-packet SEND with a receive WR for it, a WRITE with
/// immediate data, a READ and an atomic, each side's completions polled.
fn round(p: &mut Pair, qa: QpId, qb: QpId, buf: &mut [u8]) -> usize {
    let (sges, recv) = ([p.a.sge(0, 3000)], [p.b.sge(0x8000, 4096)]);
    let rwr = RecvWr {
        wr_id: 7,
        sg_list: &recv,
    };
    p.b.e.post_recv(qb, &rwr).unwrap();
    p.b.e.post_recv(qb, &rwr).unwrap();
    p.a.e
        .post_send(qa, &wr(1, send_opcode::SEND, &sges))
        .unwrap();
    let remote = RdmaTarget {
        remote_addr: MEM_BASE + 0x1_0000,
        rkey: p.b.key,
    };
    let write = SendWr {
        rdma: remote,
        imm_data_or_inv_rkey: 5,
        ..wr(2, send_opcode::RDMA_WRITE_WITH_IMM, &sges)
    };
    p.a.e.post_send(qa, &write).unwrap();
    let read = SendWr {
        rdma: remote,
        ..wr(3, send_opcode::RDMA_READ, &sges)
    };
    p.a.e.post_send(qa, &read).unwrap();
    let atomic_sge = [p.a.sge(0x100, 8)];
    let fetch_add = SendWr {
        atomic: AtomicTarget {
            remote_addr: MEM_BASE + 0x2_0000,
            rkey: p.b.key,
            compare_add: 1,
            swap: 0,
        },
        ..wr(4, send_opcode::ATOMIC_FETCH_AND_ADD, &atomic_sge)
    };
    p.a.e.post_send(qa, &fetch_add).unwrap();
    exchange(p, buf);
    let mut ok = 0;
    for n in [&mut p.a, &mut p.b] {
        n.e.poll_cq_with(n.cq, 16, |c| {
            ok += usize::from(c.status == WcStatus::Success)
        })
        .unwrap();
    }
    ok
}

fn main() {
    the_data_path_allocates_nothing_per_wr_once_warm();
    println!("the data path allocates nothing per WR once warm: ok");
}

fn the_data_path_allocates_nothing_per_wr_once_warm() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc, Link::default());
    let mut buf = vec![0u8; MAX_PACKET_LEN];
    for _ in 0..50 {
        assert_eq!(round(&mut p, qa, qb, &mut buf), 6, "warm-up round");
    }
    let before = allocations();
    for _ in 0..200 {
        assert_eq!(round(&mut p, qa, qb, &mut buf), 6);
    }
    assert_eq!(allocations() - before, 0, "allocations in 200 warm rounds");
}
