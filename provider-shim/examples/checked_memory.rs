//! `checked_memory`: what it costs that registered memory is reached in a
//! way that survives a buffer unmapped under its MR, in each mode of
//! provider-shim/src/process_memory.rs (guarded: plain instructions whose
//! faults a signal handler recovers; kernel: `process_vm_readv`/`writev`,
//! and a `FUTEX_WAKE_OP` probe before each atomic), against plain loads
//! and stores. `make bench` runs it and docs/perf.md shows the table.
//!
//! Prints one line per operation and size:
//!
//! ```text
//! checked-memory op=write bytes=1024 plain_ns=.. guarded_ns=.. kernel_ns=..
//! ```
//!
//! (nanoseconds per access, best of 5 rounds).

use softverbs_engine::HostMemory;
use softverbs_shim::process_memory::{Mode, ProcessMemory};
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

fn report(op: &str, bytes: usize, plain: f64, modes: [f64; 2]) {
    let [guarded, kernel] = modes;
    println!(
        "checked-memory op={op} bytes={bytes} plain_ns={plain:.1} guarded_ns={guarded:.1} \
         kernel_ns={kernel:.1}"
    );
}

fn main() {
    let mut mems = [ProcessMemory::new(), ProcessMemory::with_mode(Mode::Kernel)];
    assert_eq!(
        mems.each_ref().map(|m| m.mode()),
        [Mode::Guarded, Mode::Kernel]
    );
    let mut target = vec![0u8; 1 << 16];
    let source = vec![7u8; 1 << 16];
    for bytes in [64, 1024, 4096, 65536] {
        let iters = (200 << 20) / bytes.max(4096);
        let addr = target.as_mut_ptr() as u64;
        let plain = ns_per_call(iters, || {
            target[..bytes].copy_from_slice(black_box(&source[..bytes]));
            black_box(&target);
        });
        let checked = mems.each_mut().map(|mem| {
            ns_per_call(iters, || {
                mem.write(addr, black_box(&source[..bytes]))
                    .expect("mapped");
            })
        });
        report("write", bytes, plain, checked);
        let mut out = vec![0u8; bytes];
        let plain = ns_per_call(iters, || {
            out.copy_from_slice(black_box(&target[..bytes]));
            black_box(&out);
        });
        let checked = mems.each_mut().map(|mem| {
            ns_per_call(iters, || {
                mem.read(addr, &mut out).expect("mapped");
                black_box(&out);
            })
        });
        report("read", bytes, plain, checked);
    }
    let word = AtomicU64::new(0);
    let addr = word.as_ptr() as u64;
    let plain = ns_per_call(1 << 20, || {
        black_box(word.fetch_add(1, Ordering::SeqCst));
    });
    let checked = mems.each_mut().map(|mem| {
        ns_per_call(1 << 20, || {
            black_box(mem.fetch_add(addr, 1).expect("mapped"));
        })
    });
    report("fetch_add", 8, plain, checked);
}
