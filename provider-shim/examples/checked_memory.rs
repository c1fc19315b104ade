//! `checked_memory`: what it costs that registered memory is reached
//! through the kernel (`process_vm_readv`/`process_vm_writev`, and a
//! `FUTEX_WAKE_OP` probe before each atomic) instead of plain loads and
//! stores, which would crash the process on a buffer unmapped under its
//! MR. `make bench` runs it and docs/perf.md shows the table.
//!
//! Prints one line per operation and size:
//!
//! ```text
//! checked-memory op=write bytes=1024 plain_ns=.. checked_ns=..
//! ```
//!
//! (nanoseconds per access, best of 5 rounds).

use softverbs_engine::HostMemory;
use softverbs_shim::process_memory::ProcessMemory;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

const ROUNDS: usize = 5;

/// Best nanoseconds per call of `f` over `iters` calls.
fn ns_per_call(iters: usize, mut f: impl FnMut()) -> f64 {
    (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            t.elapsed().as_nanos() as f64 / iters as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn report(op: &str, bytes: usize, plain: f64, checked: f64) {
    println!("checked-memory op={op} bytes={bytes} plain_ns={plain:.1} checked_ns={checked:.1}");
}

fn main() {
    let mut mem = ProcessMemory::new();
    let mut target = vec![0u8; 1 << 16];
    let source = vec![7u8; 1 << 16];
    for bytes in [64, 1024, 4096, 65536] {
        let iters = (200 << 20) / bytes.max(4096);
        let addr = target.as_mut_ptr() as u64;
        let plain = ns_per_call(iters, || {
            target[..bytes].copy_from_slice(black_box(&source[..bytes]));
            black_box(&target);
        });
        let checked = ns_per_call(iters, || {
            mem.write(addr, black_box(&source[..bytes])).expect("mapped");
        });
        report("write", bytes, plain, checked);
        let mut out = vec![0u8; bytes];
        let plain = ns_per_call(iters, || {
            out.copy_from_slice(black_box(&target[..bytes]));
            black_box(&out);
        });
        let checked = ns_per_call(iters, || {
            mem.read(addr, &mut out).expect("mapped");
            black_box(&out);
        });
        report("read", bytes, plain, checked);
    }
    let word = AtomicU64::new(0);
    let addr = word.as_ptr() as u64;
    let plain = ns_per_call(1 << 20, || {
        black_box(word.fetch_add(1, Ordering::SeqCst));
    });
    let checked = ns_per_call(1 << 20, || {
        black_box(mem.fetch_add(addr, 1).expect("mapped"));
    });
    report("fetch_add", 8, plain, checked);
}
