//! Running random sequences on two backends, shrinking a divergent one
//! and reporting: one line per divergent case, a C reproducer for each,
//! and `N passed, M failed` last.

use super::backend::{Backend, BackendSpec};
use super::datapath::{self, cq_of, data_op, data_step, DataOp, Transport};
use super::judge::judge;
use super::known::{self, explain};
use super::limits::Limits;
use super::objects::Objects;
use super::repro::c_program;
use super::steps::{apply, Resolver, Step};
use crate::ops::{op, starter_qp, Op, Pick};
use crate::table::TransitionTable;
use proptest::collection::vec;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use softverbs_engine::QpType;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The backend whose answers resolve the picks (softverbs).
    pub first: BackendSpec,
    /// The backend compared with it.
    pub second: BackendSpec,
    /// Random control-path sequences to run.
    pub cases: u32,
    /// Random data-path sequences to run (`datapath`), on RC QPs.
    pub data_cases: u32,
    /// The same on UC QPs.
    pub uc_cases: u32,
    /// Most operations per sequence.
    pub max_ops: usize,
    /// Seed of the sequences.
    pub seed: u64,
    /// Most reruns spent shrinking one divergent sequence.
    pub shrink_runs: u32,
    /// Where reproducers are written.
    pub repro_dir: PathBuf,
    /// Also print a line for each passing case, with its time.
    pub verbose: bool,
}

/// Why a case could not be judged at all (a backend that does not start,
/// the runner's own mistake): the run stops.
#[derive(Debug)]
pub struct Broken(pub String);

/// A sequence on which the backends disagreed.
#[derive(Debug, Clone)]
pub struct Divergence {
    /// The steps run, the divergent one last.
    pub steps: Vec<Step>,
    /// What differed.
    pub message: String,
}

/// How one case ended.
#[derive(Debug)]
enum Case {
    /// The devices agreed, apart from these known differences (a case
    /// stops at one that leaves the devices in different states).
    Agreed(BTreeSet<&'static str>),
    /// They diverged.
    Diverged(Divergence),
}

type CaseResult = Result<Case, Broken>;

/// Passed and failed cases and the known differences met, so far.
#[derive(Debug, Default)]
struct Tally {
    passed: u32,
    failed: u32,
    known: BTreeMap<&'static str, u32>,
}

/// Runs the plan, printing to `out`; the counts of passed and failed
/// cases.
pub fn run(plan: &Plan, out: &mut impl Write) -> Result<(u32, u32), Broken> {
    let table = TransitionTable::load();
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&plan.seed.to_le_bytes());
    let mut rng = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed),
    );
    remove_old_reproducers(plan);
    let mut tally = Tally::default();
    let control = vec(op(), 1..=plan.max_ops.max(1));
    let kind = ("case", plan.cases);
    run_kind(plan, kind, &control, &mut rng, &mut tally, out, |ops| {
        run_case(plan, &table, ops)
    })?;
    let data = vec(data_op(), 1..=plan.max_ops.clamp(1, 16));
    let kind = ("data case", plan.data_cases);
    run_kind(plan, kind, &data, &mut rng, &mut tally, out, |ops| {
        run_data_case(plan, Transport::Rc, ops)
    })?;
    let kind = ("UC data case", plan.uc_cases);
    run_kind(plan, kind, &data, &mut rng, &mut tally, out, |ops| {
        run_data_case(plan, Transport::Uc, ops)
    })?;
    for (name, cases) in &tally.known {
        let _ = writeln!(
            out,
            "known difference (docs/conformance.md) in {cases} cases: {name}"
        );
    }
    let _ = writeln!(out, "{} passed, {} failed", tally.passed, tally.failed);
    Ok((tally.passed, tally.failed))
}

/// Runs `count` cases of one kind (`name`) drawn from `strategy`.
fn run_kind<T: std::fmt::Debug>(
    plan: &Plan,
    (name, count): (&str, u32),
    strategy: &impl Strategy<Value = Vec<T>>,
    rng: &mut TestRunner,
    tally: &mut Tally,
    out: &mut impl Write,
    case_of: impl Fn(&[T]) -> CaseResult,
) -> Result<(), Broken> {
    for case in 0..count {
        let mut tree = strategy
            .new_tree(rng)
            .map_err(|e| Broken(format!("generating {name} {case}: {e}")))?;
        let started = Instant::now();
        let first = match case_of(&tree.current())? {
            Case::Diverged(d) => d,
            Case::Agreed(met) => {
                tally.passed += 1;
                if plan.verbose {
                    let took = started.elapsed().as_secs_f64();
                    let _ = writeln!(out, "ok   {name} {case} ({took:.1} s) {met:?}");
                }
                for known in met {
                    *tally.known.entry(known).or_default() += 1;
                }
                continue;
            }
        };
        tally.failed += 1;
        let minimal = shrink(plan, &mut tree, first, &case_of)?;
        report(plan, (name, case), &minimal, out);
    }
    Ok(())
}

/// The line of a divergent case, its reproducer written.
fn report(plan: &Plan, (name, case): (&str, u32), d: &Divergence, out: &mut impl Write) {
    let file = format!("{}-{case}.c", name.replace(' ', "-"));
    let path = write_repro(plan, &file, d);
    let last = d.steps.last().map(Step::line).unwrap_or_default();
    let before = d.steps.len().saturating_sub(1);
    let _ = writeln!(
        out,
        "FAIL {name} {case}: `{last}` after {before} verbs: {} (reproducer: {path})",
        d.message
    );
}

/// Simplifies a divergent sequence while it still diverges, proptest's
/// way: simplify after a failure, complicate after a pass.
fn shrink<T>(
    plan: &Plan,
    tree: &mut impl ValueTree<Value = Vec<T>>,
    first: Divergence,
    case_of: &impl Fn(&[T]) -> CaseResult,
) -> Result<Divergence, Broken> {
    let mut best = first;
    if !tree.simplify() {
        return Ok(best);
    }
    for _ in 0..plan.shrink_runs {
        let more = match case_of(&tree.current())? {
            Case::Diverged(d) => {
                best = d;
                tree.simplify()
            }
            Case::Agreed(_) => tree.complicate(),
        };
        if !more {
            break;
        }
    }
    Ok(best)
}

/// Reproducers of an earlier run would read as this run's.
fn remove_old_reproducers(plan: &Plan) {
    let Ok(entries) = std::fs::read_dir(&plan.repro_dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if (name.starts_with("case-") || name.starts_with("data-case-")) && name.ends_with(".c") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn write_repro(plan: &Plan, file: &str, d: &Divergence) -> String {
    let path = plan.repro_dir.join(file);
    let written = std::fs::create_dir_all(&plan.repro_dir)
        .and_then(|()| std::fs::write(&path, c_program(&d.steps, &d.message)));
    match written {
        Ok(()) => path.display().to_string(),
        Err(e) => format!("not written, {}: {e}", path.display()),
    }
}

/// The objects every sequence starts with, as the in-process harness's:
/// two PDs, two CQs, three MRs, an RC, a UC and a UD QP.
fn setup() -> Vec<Op> {
    // Pick(0) names the first live object here (objects::choose).
    let qp = |ty: QpType| Op::CreateQp(starter_qp(ty, Pick(0)));
    vec![
        Op::AllocPd,
        Op::AllocPd,
        Op::CreateCq,
        Op::CreateCq,
        Op::RegMr(Pick(0), true),
        Op::RegMr(Pick(0), false),
        Op::RegMr(Pick(1), true),
        qp(QpType::Rc),
        qp(QpType::Uc),
        qp(QpType::Ud),
    ]
}

/// Both backends, what they hold, and the steps run so far.
struct Session<'a> {
    plan: &'a Plan,
    a: Backend,
    b: Backend,
    objects: Objects,
    steps: Vec<Step>,
    known: BTreeSet<&'static str>,
    /// UC data case: its own known differences apply too, given their
    /// causes among its posts.
    uc: Option<known::UcCauses>,
}

/// Runs `ops` (after the setup) on fresh backends.
fn run_case(plan: &Plan, table: &TransitionTable, ops: &[Op]) -> CaseResult {
    let (mut s, limits) = Session::start(plan)?;
    let mut resolver = Resolver::new(table.clone(), limits);
    let outcome = s.run_ops(&mut resolver, &setup(), ops);
    s.end(outcome)
}

/// Runs a data-path case on fresh backends.
fn run_data_case(plan: &Plan, transport: Transport, ops: &[DataOp]) -> CaseResult {
    let (mut s, _) = Session::start(plan)?;
    let outcome = s.run_data(transport, ops);
    s.end(outcome)
}

impl<'a> Session<'a> {
    /// Both backends started, and the limits of their devices.
    fn start(plan: &'a Plan) -> Result<(Session<'a>, Limits), Broken> {
        let mut a = Backend::start(&plan.first).map_err(Broken)?;
        let mut b = Backend::start(&plan.second).map_err(Broken)?;
        let device = Step::device().line();
        let (da, db) = (
            a.ask(&device).map_err(Broken)?,
            b.ask(&device).map_err(Broken)?,
        );
        let limits = Limits::of(&da[0], &db[0]).map_err(Broken)?;
        let s = Session {
            plan,
            a,
            b,
            objects: Objects::default(),
            steps: Vec::new(),
            known: BTreeSet::new(),
            uc: None,
        };
        Ok((s, limits))
    }

    /// How the case ended, from how its run stopped.
    fn end(self, outcome: Result<(), Stop>) -> CaseResult {
        match outcome {
            Ok(()) | Err(Stop::Known) => Ok(Case::Agreed(self.known)),
            Err(Stop::Diverged(message)) => Ok(Case::Diverged(Divergence {
                steps: self.steps,
                message,
            })),
            Err(Stop::Broken(b)) => Err(b),
        }
    }
}

/// Why a case stopped early.
enum Stop {
    Diverged(String),
    /// At a known difference after which the devices' states differ.
    Known,
    Broken(Broken),
}

impl Session<'_> {
    /// A data-path case: the setup, `ops`, then the sends' completions,
    /// (UC: each QP's barrier), both QPs moved to ERR, the receives'
    /// completions, both MRs' memory and the events. Every WR posted
    /// completes exactly once, so the first device is waited for until
    /// all have.
    fn run_data(&mut self, transport: Transport, ops: &[DataOp]) -> Result<(), Stop> {
        if transport == Transport::Uc {
            let posts: Vec<Step> = (ops.iter().enumerate())
                .map(|(i, op)| data_step(op, i as i64 + 1, transport))
                .collect();
            self.uc = Some(known::UcCauses::of(&posts, datapath::PATH_MTU));
        }
        for step in datapath::setup(transport) {
            self.run(step, true)?;
        }
        // Completions owed by each QP: (receives, sends).
        let mut owed = [(0u32, 0u32); 2];
        for (i, op) in ops.iter().enumerate() {
            let step = data_step(op, i as i64 + 1, transport);
            let (qp, sends) = (step.args[0] as usize, step.verb == "post_send");
            if self.run(step, true)?[0] == "ok" {
                let count = if sends {
                    &mut owed[qp].1
                } else {
                    &mut owed[qp].0
                };
                *count += 1;
            }
        }
        let mut undefined = [false; 2];
        for (qp, &(_, sends)) in owed.iter().enumerate() {
            let done = self.run(datapath::wait(cq_of(qp, true), sends), true)?;
            let by_failures = datapath::undefined_by_failures(&done, ops, qp, transport);
            for (u, f) in undefined.iter_mut().zip(by_failures) {
                *u |= f;
            }
        }
        if transport == Transport::Uc {
            for qp in 0..owed.len() {
                self.run(datapath::barrier(qp), true)?;
            }
        }
        for qp in 0..owed.len() {
            self.run(datapath::to_error(qp), true)?;
        }
        for (qp, &(recvs, _)) in owed.iter().enumerate() {
            let done = self.run(datapath::wait(cq_of(qp, false), recvs), true)?;
            undefined[qp] |= datapath::receive_failed(&done);
        }
        for (mr, &undefined) in undefined.iter().enumerate() {
            self.run_memory(mr, undefined)?;
        }
        self.run(Step::events(), true).map(drop)
    }

    /// Compares MR `mr`'s memory, unless a failed WR left it `undefined`:
    /// then a difference is counted as known.
    fn run_memory(&mut self, mr: usize, undefined: bool) -> Result<(), Stop> {
        if !undefined {
            return self.run(datapath::mr_sum(mr), true).map(drop);
        }
        let step = datapath::mr_sum(mr);
        let a = self.a.ask(&step.line()).map_err(Stop::Diverged)?;
        let b = self.b.ask(&step.line()).map_err(Stop::Diverged)?;
        if a != b {
            self.known.insert(known::FAILED_WR_TARGET.name);
        }
        Ok(())
    }

    fn run_ops(&mut self, resolver: &mut Resolver, setup: &[Op], ops: &[Op]) -> Result<(), Stop> {
        for op in setup.iter().chain(ops) {
            if let Some(step) = resolver.step(op, &self.objects) {
                self.run(step, true)?;
                self.check_all()?;
            }
        }
        self.run(Step::events(), true)?;
        for cq in self.objects.live_cqs() {
            self.run(Step::drain_cq(cq), true)?;
        }
        Ok(())
    }

    /// Runs one step on both, compares, and learns from the first's
    /// answer. Queries are kept among the steps only if they diverge: they
    /// change nothing, so a reproducer needs only the divergent one.
    fn run(&mut self, step: Step, keep: bool) -> Result<Vec<String>, Stop> {
        let a = self.a.ask(&step.line()).map_err(|e| {
            self.steps.push(step.clone());
            Stop::Diverged(e)
        })?;
        let second = step.for_second(&a);
        let b = self.b.ask(&second.line()).map_err(|e| {
            self.steps.push(second.clone());
            Stop::Diverged(e)
        })?;
        if a[0].starts_with("bad") || b[0].starts_with("bad") {
            return Err(Stop::Broken(Broken(format!(
                "the executor refused `{}`: {a:?} {b:?}",
                second.line()
            ))));
        }
        let labels = (
            self.plan.first.label.as_str(),
            self.plan.second.label.as_str(),
        );
        let mut verdict = judge(&step, labels, &a, &b);
        if verdict.is_err() {
            let uc = || self.uc.and_then(|c| known::explain_uc(&step, &a, &b, c));
            if let Some(k) = explain(&step, &a, &b).or_else(uc) {
                self.known.insert(k.name);
                if k.stops {
                    return Err(Stop::Known);
                }
                verdict = Ok(());
            }
        }
        if keep || verdict.is_err() {
            self.steps.push(second);
        }
        verdict.map_err(Stop::Diverged)?;
        apply(&mut self.objects, &step, &a);
        Ok(a)
    }

    /// After every operation: every live QP and SRQ queried on both.
    fn check_all(&mut self) -> Result<(), Stop> {
        for qp in self.objects.live_qps() {
            self.run(Step::query_qp(&self.objects, qp), false)?;
        }
        for srq in self.objects.live_srqs() {
            self.run(Step::query_srq(&self.objects, srq), false)?;
        }
        Ok(())
    }
}
