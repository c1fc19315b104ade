//! The same-host path against the wire: random workloads (the
//! simulator's generator) run once over a perfect network and once with
//! both nodes on one host, where connected QPs with their own receive
//! queues exchange whole operations and no packets. Every completion of
//! every stream must come out the same (for a receive, all but which
//! buffer it took: the receiver posts its buffers over time, and the
//! paths' timing differs; and UC's receives not at all, since UC drops a
//! message that finds no receive WR posted yet), and each run passes every check of the
//! checker, which compares every byte of every message, READ result and
//! atomic with what the workload says it must be.

use softverbs_engine::{QpType, WorkCompletion};
use softverbs_sim::checker;
use softverbs_sim::runner::{execute, Execution};
use softverbs_sim::trace::Trace;
use softverbs_sim::{run_seeds, Faults, Limits, NetConfig, RunConfig, Workload};

fn run(w: &Workload, same_host: bool) -> Execution {
    let net = NetConfig {
        same_host,
        ..NetConfig::new(Faults::default())
    };
    let x = execute(w, net, Limits::default(), Trace::new(false)).expect("setup");
    assert_eq!(x.ended, Ok(()), "seed {} (same host: {same_host})", w.seed);
    x
}

/// What a receive completion says about the message, without which
/// buffer took it.
fn message(wc: &WorkCompletion) -> WorkCompletion {
    WorkCompletion { wr_id: 0, ..*wc }
}

#[test]
fn every_completion_and_byte_matches_the_wire() {
    let mut direct_ops = 0;
    for seed in 0..300 {
        let w = Workload::generate(seed);
        let wire = run(&w, false);
        let host = run(&w, true);
        direct_ops += wire.net.sent - host.net.sent;
        for (s, (a, b)) in wire.obs.sends.iter().zip(&host.obs.sends).enumerate() {
            assert_eq!(a, b, "seed {seed} stream {s}: send completions differ");
        }
        for (s, (a, b)) in wire.obs.recvs.iter().zip(&host.obs.recvs).enumerate() {
            if w.pairs[w.streams[s].pair].qp_type != QpType::Rc {
                continue; // UC drops a message that finds no receive WR: timing
            }
            let a: Vec<_> = a.iter().map(|r| (message(&r.wc), r.queue)).collect();
            let b: Vec<_> = b.iter().map(|r| (message(&r.wc), r.queue)).collect();
            assert_eq!(a, b, "seed {seed} stream {s}: receive completions differ");
        }
        for (x, path) in [(&wire, "wire"), (&host, "same host")] {
            let failures = checker::check(&w, &x.world, &x.obs);
            assert!(
                failures.is_empty(),
                "seed {seed} on the {path}: {failures:?}"
            );
        }
    }
    assert!(
        direct_ops > 10_000,
        "the same-host path carried the connected pairs"
    );
}

#[test]
fn same_host_runs_pass_every_check() {
    let cfg = RunConfig {
        faults: Faults::default(),
        limits: Limits::default(),
        verbose: false,
        same_host: true,
    };
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let failed: Vec<_> = run_seeds(1000, 500, &cfg, jobs)
        .into_iter()
        .filter(|r| !r.passed())
        .map(|r| format!("seed {}: {:?}", r.seed, r.failures))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// A same-host UD QP whose datagram went to the wire (its outcome
/// `Wire`) hands out the operation after it once that packet is sent:
/// seed 223 over a lossy network posts a WR for the wire and one for the
/// same host at one instant, and stalled with the second never handed
/// out: the simulator did not ask for operations again after sending
/// packets, as the transport's step does.
#[test]
fn an_operation_after_a_datagram_for_the_wire_is_handed_out() {
    let cfg = RunConfig {
        faults: Faults {
            loss: 0.1,
            dup: 0.05,
            reorder: 0.1,
            ..Faults::default()
        },
        limits: Limits::default(),
        verbose: false,
        same_host: true,
    };
    let report = &run_seeds(223, 1, &cfg, 1)[0];
    assert!(report.passed(), "{:?}", report.failures);
}
