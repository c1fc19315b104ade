//! `memcpy-bw`: single-thread memory copy bandwidth for buffers far larger
//! than the caches, the ceiling `make bench` sets beside softverbs'
//! bandwidth (every byte softverbs moves on loopback is copied at least
//! twice: into a datagram by the sender, out of one by the receiver).
//!
//! ```text
//! memcpy-bw [--mib 256] [--reps 10]
//! ```
//!
//! Copies a `--mib` MiB buffer into another `--reps` times with
//! `copy_from_slice` (the C library's memcpy) and prints one line:
//!
//! ```text
//! memcpy-bw bytes=268435456 reps=10 gbps_best=.. gbps_mean=..
//! ```
//!
//! in GB/s (10^9 bytes copied per second; each byte is read once and
//! written once).

use softverbs_baselines::Args;
use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1), &[]) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("memcpy-bw: {e}");
            return ExitCode::from(2);
        }
    };
    let (mib, reps) = match (args.num("mib", 256), args.num("reps", 10)) {
        (Ok(m), Ok(r)) if m > 0 && r > 0 => (m as usize, r as usize),
        _ => {
            eprintln!("memcpy-bw: --mib and --reps take positive numbers");
            return ExitCode::from(2);
        }
    };
    let bytes = mib << 20;
    // Non-zero contents, and both buffers written once before timing, so
    // every page is mapped and the first copy pays no page faults.
    let src: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
    let mut dst = vec![1u8; bytes];
    dst.copy_from_slice(&src);

    let mut rates = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t0 = Instant::now();
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
        rates.push(bytes as f64 / t0.elapsed().as_secs_f64() / 1e9);
    }
    let best = rates.iter().cloned().fold(0.0, f64::max);
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    println!("memcpy-bw bytes={bytes} reps={reps} gbps_best={best:.2} gbps_mean={mean:.2}");
    ExitCode::SUCCESS
}
