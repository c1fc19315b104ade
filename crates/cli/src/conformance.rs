//! `softverbs conformance --against DEVICE`: random verbs sequences run on
//! a softverbs device and on DEVICE, compared field by field
//! (softverbs_conformance::differential; docs/conformance.md). A real
//! device is reached through a pass-through device, so the sequences go
//! through the same provider library either way.

use crate::library;
use softverbs_config::Config;
use softverbs_conformance::differential::{self, BackendSpec, Plan};
use std::path::PathBuf;

/// The command's options.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// The device to compare with: a real one (mlx5_0, rxe0) or another
    /// soft device.
    #[arg(long)]
    against: String,
    /// The softverbs device whose answers are the reference.
    #[arg(long, default_value = "softverbs0")]
    device: String,
    /// Random control-path sequences to run (resources, modify, SRQs,
    /// receive WRs, events).
    #[arg(long, default_value_t = 100)]
    cases: u32,
    /// Random data-path sequences to run (two connected RC QPs, every
    /// opcode, completions and memory compared).
    #[arg(long, default_value_t = 50)]
    data_cases: u32,
    /// The same on two connected UC QPs (SEND, SEND_WITH_IMM, WRITE,
    /// WRITE_WITH_IMM).
    #[arg(long, default_value_t = 20)]
    uc_cases: u32,
    /// Most operations per sequence.
    #[arg(long, default_value_t = 40)]
    ops: usize,
    /// Seed of the sequences (the same seed runs the same sequences).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Most reruns spent shrinking one divergent sequence.
    #[arg(long, default_value_t = 200)]
    shrink: u32,
    /// Where C reproducers are written (default: a directory under the
    /// system's temporary directory).
    #[arg(long, value_name = "DIR")]
    repro_dir: Option<PathBuf>,
    /// Environment for the compared device's process only (NAME=VALUE,
    /// repeatable), such as fault rules to see the runner catch them.
    #[arg(long = "against-env", value_name = "NAME=VALUE")]
    against_env: Vec<String>,
    /// Also print a line for each passing case, with its time.
    #[arg(long)]
    verbose: bool,
}

/// Runs the comparison; fails when a case diverged.
pub fn run(o: Options) -> Result<(), String> {
    library::check_rdma_core()?;
    let provider = library::provider()?.display().to_string();
    let program = library::executor()?;
    let config = Config::load().map_err(|e| format!("bad configuration: {e}"))?;
    let preload = ("LD_PRELOAD".to_string(), provider);
    let first = BackendSpec {
        label: o.device.clone(),
        program: program.clone(),
        device: o.device.clone(),
        env: vec![preload.clone()],
    };
    let soft = config.devices.iter().any(|d| d.name == o.against);
    let mut second = if soft {
        BackendSpec {
            label: o.against.clone(),
            program,
            device: o.against.clone(),
            env: vec![preload],
        }
    } else {
        // The real device behind a pass-through device: the same provider
        // library and libibverbs on both sides.
        let front = format!("sv_{}", o.against);
        let devices = format!("{front}=passthrough:{}", o.against);
        BackendSpec {
            label: o.against.clone(),
            program,
            device: front,
            env: vec![preload, ("SOFTVERBS_DEVICES".into(), devices)],
        }
    };
    for pair in &o.against_env {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("--against-env {pair}: want NAME=VALUE"))?;
        second.env.push((k.into(), v.into()));
    }
    let plan = Plan {
        first,
        second,
        cases: o.cases,
        data_cases: o.data_cases,
        uc_cases: o.uc_cases,
        max_ops: o.ops,
        seed: o.seed,
        shrink_runs: o.shrink,
        repro_dir: o
            .repro_dir
            .unwrap_or_else(|| std::env::temp_dir().join("softverbs-conformance")),
        verbose: o.verbose,
    };
    let (_, failed) = differential::run(&plan, &mut std::io::stdout().lock())
        .map_err(|b| format!("conformance run stopped: {}", b.0))?;
    if failed == 0 {
        Ok(())
    } else {
        Err(format!("{failed} cases diverged"))
    }
}
