//! Running many seeds: each workload in isolation, a panic anywhere (the
//! engine's or the simulator's) caught and counted as that seed's failure,
//! seeds spread over threads. Every seed is deterministic on its own, so
//! the thread count changes only the wall time.

use crate::network::{Faults, NetConfig, NetStats};
use crate::runner::{self, Limits, Outcome};
use crate::trace::Trace;
use crate::workload::Workload;
use softverbs_engine::Nanos;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// How every seed of a batch runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunConfig {
    /// Network faults.
    pub faults: Faults,
    /// Stall bounds.
    pub limits: Limits,
    /// Print the trace (use with one seed).
    pub verbose: bool,
    /// Run on one host (see `NetConfig::same_host`).
    pub same_host: bool,
}

/// The result of one seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedResult {
    /// The seed.
    pub seed: u64,
    /// Failures; empty when it passed.
    pub failures: Vec<String>,
    /// What the network did.
    pub net: NetStats,
    /// Virtual time at the end.
    pub time: Nanos,
    /// Loop iterations.
    pub steps: u64,
}

impl SeedResult {
    /// Whether every check held.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Runs the workload of `seed`; a panic becomes a failure.
pub fn run_seed(seed: u64, cfg: &RunConfig) -> SeedResult {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let w = Workload::generate(seed);
        let trace = Trace::new(cfg.verbose);
        if trace.is_on() {
            print!("{w}");
        }
        let net = NetConfig {
            same_host: cfg.same_host,
            ..NetConfig::new(cfg.faults)
        };
        runner::run(&w, net, cfg.limits, trace)
    }));
    let outcome = outcome.unwrap_or_else(|panic| Outcome {
        failures: vec![format!("panicked: {}", panic_message(panic.as_ref()))],
        net: NetStats::default(),
        time: 0,
        steps: 0,
    });
    SeedResult {
        seed,
        failures: outcome.failures,
        net: outcome.net,
        time: outcome.time,
        steps: outcome.steps,
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    }
}

/// Runs `count` seeds from `base` on `jobs` threads; results in seed order.
pub fn run_seeds(base: u64, count: u64, cfg: &RunConfig, jobs: usize) -> Vec<SeedResult> {
    let next = AtomicU64::new(0);
    let results = Mutex::new(Vec::with_capacity(count as usize));
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    break;
                }
                let r = run_seed(base + i, cfg);
                results.lock().expect("no thread panics holding it").push(r);
            });
        }
    });
    let mut results = results.into_inner().expect("no thread panics holding it");
    results.sort_by_key(|r| r.seed);
    results
}
