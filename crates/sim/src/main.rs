//! `softverbs-sim`: runs seeded workloads over a faulty simulated network
//! and reports every seed whose checks fail. The last line is always
//! `N passed, M failed`; the exit status is non-zero on any failure.

use clap::Parser;
use softverbs_sim::{run_seeds, Faults, Limits, RunConfig, SeedResult};
use std::process::ExitCode;

/// Deterministic simulation of the softverbs transports.
#[derive(Debug, Parser)]
#[command(name = "softverbs-sim", version)]
struct Cli {
    /// Number of workloads (seeds) to run.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    seed_base: u64,
    /// Run this one seed (same as --seed-base S --seeds 1).
    #[arg(long)]
    seed: Option<u64>,
    /// Probability that a packet is lost.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    loss: f64,
    /// Probability that a packet is duplicated.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    dup: f64,
    /// Probability that a packet is held back behind later ones.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    reorder: f64,
    /// Probability that a bit of a packet is flipped.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    corrupt: f64,
    /// Probability that a packet arrives marked, as in a receiver's
    /// filling queue (congestion notification).
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    mark: f64,
    /// Print the workload and a trace of packets, faults, posts and
    /// completions (use with --seed).
    #[arg(long)]
    verbose: bool,
    /// Run both nodes on one host: connected QPs use the same-host path
    /// (whole operations, no packets) where the peer has its own RQ.
    #[arg(long)]
    same_host: bool,
    /// Worker threads (default: available cores; 1 with --verbose).
    #[arg(long)]
    jobs: Option<usize>,
    /// Event-loop iterations before a run counts as stalled.
    #[arg(long, default_value_t = Limits::default().max_steps)]
    max_steps: u64,
}

fn probability(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{p} is not a probability in 0..=1"))
    }
}

impl Cli {
    fn faults(&self) -> Faults {
        Faults {
            loss: self.loss,
            dup: self.dup,
            reorder: self.reorder,
            corrupt: self.corrupt,
            mark: self.mark,
        }
    }

    fn replay(&self, seed: u64) -> String {
        format!(
            "cargo run --release -p softverbs-sim -- --seed {seed} --loss {} --dup {} --reorder {} --corrupt {} --mark {} --verbose",
            self.loss, self.dup, self.reorder, self.corrupt, self.mark
        )
    }
}

/// Failure lines shown per seed (the first is usually the cause).
const SHOWN: usize = 5;

fn report(cli: &Cli, r: &SeedResult) {
    println!("seed {} FAILED: {}", r.seed, r.failures[0]);
    for f in r.failures.iter().skip(1).take(SHOWN - 1) {
        println!("    {f}");
    }
    if r.failures.len() > SHOWN {
        println!("    ... {} more", r.failures.len() - SHOWN);
    }
    println!("    replay: {}", cli.replay(r.seed));
}

/// What the network did over all seeds, and the virtual time they took.
fn totals(results: &[SeedResult]) -> String {
    let sum = |f: fn(&SeedResult) -> u64| results.iter().map(f).sum::<u64>();
    format!(
        "network: {} packets sent, {} lost, {} duplicated, {} reordered, {} corrupted ({} dropped by the ICRC check), {} marked; {:.1} ms virtual time, at most {} steps per seed",
        sum(|r| r.net.sent),
        sum(|r| r.net.lost),
        sum(|r| r.net.duplicated),
        sum(|r| r.net.reordered),
        sum(|r| r.net.corrupted),
        sum(|r| r.net.icrc_dropped),
        sum(|r| r.net.marked),
        sum(|r| r.time) as f64 / 1e6,
        results.iter().map(|r| r.steps).max().unwrap_or(0),
    )
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (base, count) = cli.seed.map_or((cli.seed_base, cli.seeds), |s| (s, 1));
    let cfg = RunConfig {
        faults: cli.faults(),
        limits: Limits {
            max_steps: cli.max_steps,
            ..Limits::default()
        },
        verbose: cli.verbose,
        same_host: cli.same_host,
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let jobs = if cli.verbose {
        1
    } else {
        cli.jobs.unwrap_or(cores)
    };
    let results = run_seeds(base, count, &cfg, jobs);
    for r in results.iter().filter(|r| !r.passed()) {
        report(&cli, r);
    }
    if cli.verbose {
        for r in &results {
            println!(
                "seed {}: {:?}, {} steps, {:.3} ms virtual",
                r.seed,
                r.net,
                r.steps,
                r.time as f64 / 1e6
            );
        }
    }
    println!("{}", totals(&results));
    let failed = results.iter().filter(|r| !r.passed()).count();
    println!("{} passed, {failed} failed", results.len() - failed);
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
