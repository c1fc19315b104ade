//! Turning a random operation into the verb line both backends run: its
//! picks resolved against the objects the first backend holds, its values
//! kept device-independent ([`Limits`]), and what its answer means for the
//! objects and for the comparison.

use super::fields::{av_args, cap_args, qp_attr_args, RD_ATOMIC};
use super::limits::{fit, Limits};
use super::objects::{MrEntry, Objects, QpEntry, SrqEntry};
use crate::device::ACCESS_LOCAL_WRITE;
use crate::harness::modify::build;
use crate::names::{state_from_raw, type_from_raw};
use crate::ops::{CreateQpSeed, ModifySeed, Op, SgeKind, SgeSeed};
use crate::table::TransitionTable;
use softverbs_engine::{AhAttr, Gid, QpAttr, QpAttrMask, QpCap, QpState, QpType, SrqAttr};

/// Entries of every CQ the runner makes: more than a sequence can fill.
const CQE: i64 = 4096;
/// Length of every MR (the executor's buffers).
const MR_LEN: u64 = 4096;
/// IBV_ACCESS_REMOTE_WRITE and IBV_ACCESS_REMOTE_READ.
const REMOTE_WRITE: u32 = 0x2;
const REMOTE_READ: u32 = 0x4;
/// What the executor reads as the device's own GID 0.
/// A GID index within every device's table that holds no GID.
const EMPTY_SGID_INDEX: u8 = 15;
const SELF_GID: Gid = Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
/// The largest poll the executor does at once.
const MAX_POLL: usize = 1024;

/// How two answers to a step are compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judge {
    /// Every word of every line equal.
    Exact,
    /// A creation: same outcome; on success each value the device gave
    /// at least the one asked for (devices round sizes up differently).
    AtLeast(Vec<u32>),
    /// `query_qp`: state, every attribute ever set, capacities and RD
    /// atomic depths at least those asked for, and the init attributes.
    QueryQp {
        /// The attributes set so far.
        set: QpAttrMask,
        /// The capacities asked for.
        cap: QpCap,
        /// The max_rd_atomic and max_dest_rd_atomic asked for.
        rd_atomic: (u8, u8),
    },
    /// `query_srq`: sizes at least those asked for (max_wr, max_sge), the
    /// same limit once a modify set it.
    QuerySrq(u32, u32, bool),
    /// Completions or events: the same ones, in the same order; the
    /// second backend waits for as many as the first returned.
    Drained,
}

/// What a successful step changes among the objects.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Effect {
    /// Nothing.
    None,
    /// A PD, CQ or AH was made.
    Made(Kind),
    /// An MR was made.
    MadeMr(MrEntry),
    /// An SRQ was made.
    MadeSrq(SrqEntry),
    /// A QP was made.
    MadeQp(QpEntry),
    /// An object was destroyed.
    Gone(Kind, usize),
    /// A QP's attributes were set.
    ModifiedQp(usize, QpAttrMask),
    /// An SRQ was modified with this mask and max_wr.
    ModifiedSrq(usize, u32, u32),
    /// A QP was queried: its state is the answer's first value.
    QueriedQp(usize),
}

/// Kinds of object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Protection domain.
    Pd,
    /// Completion queue.
    Cq,
    /// Address handle.
    Ah,
    /// Memory region.
    Mr,
    /// Shared receive queue.
    Srq,
    /// Queue pair.
    Qp,
}

/// One verb for both backends.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The executor's verb name.
    pub verb: &'static str,
    /// Its arguments.
    pub args: Vec<i64>,
    /// How the answers are compared.
    pub judge: Judge,
    /// What success changes.
    pub effect: Effect,
}

impl Step {
    fn new(verb: &'static str, args: Vec<i64>, judge: Judge, effect: Effect) -> Step {
        Step {
            verb,
            args,
            judge,
            effect,
        }
    }

    /// The line the executor reads.
    pub fn line(&self) -> String {
        let mut line = self.verb.to_string();
        for a in &self.args {
            line.push(' ');
            line.push_str(&a.to_string());
        }
        line
    }

    /// The step for the second backend, once the first answered `first`:
    /// a drain waits for as many entries as the first one returned.
    pub fn for_second(&self, first: &[String]) -> Step {
        let mut step = self.clone();
        if self.judge == Judge::Drained {
            let got = first.len().saturating_sub(1) as i64;
            if let Some(want) = step.args.last_mut() {
                *want = got;
            }
        }
        step
    }

    /// `query_qp` of QP `qp`.
    pub fn query_qp(objects: &Objects, qp: usize) -> Step {
        let q = &objects.qps[qp];
        let judge = Judge::QueryQp {
            set: q.set,
            cap: q.cap,
            rd_atomic: q.rd_atomic,
        };
        Step::new("query_qp", vec![qp as i64], judge, Effect::QueriedQp(qp))
    }

    /// `query_srq` of SRQ `srq`.
    pub fn query_srq(objects: &Objects, srq: usize) -> Step {
        let s = &objects.srqs[srq];
        let judge = Judge::QuerySrq(s.max_wr, s.max_sge, s.limit_set);
        Step::new("query_srq", vec![srq as i64], judge, Effect::None)
    }

    /// Every completion left in CQ `cq`.
    pub fn drain_cq(cq: usize) -> Step {
        poll(cq, MAX_POLL)
    }

    /// Every pending async event.
    pub fn events() -> Step {
        Step::new("events", vec![0], Judge::Drained, Effect::None)
    }

    /// The limits of the device.
    pub fn device() -> Step {
        Step::new("device", vec![], Judge::Exact, Effect::None)
    }
}

fn poll(cq: usize, max: usize) -> Step {
    let args = vec![cq as i64, max.min(MAX_POLL) as i64, 0];
    Step::new("poll_cq", args, Judge::Drained, Effect::None)
}

fn destroy(verb: &'static str, kind: Kind, index: Option<usize>) -> Option<Step> {
    let i = index?;
    Some(Step::new(
        verb,
        vec![i as i64],
        Judge::Exact,
        Effect::Gone(kind, i),
    ))
}

/// Resolves operations into steps; holds the numbering of receive WRs.
#[derive(Debug)]
pub struct Resolver {
    table: TransitionTable,
    limits: Limits,
    next_wr_id: i64,
}

impl Resolver {
    /// A resolver for two devices with `limits`.
    pub fn new(table: TransitionTable, limits: Limits) -> Resolver {
        Resolver {
            table,
            limits,
            next_wr_id: 1,
        }
    }

    /// The step `op` means now, or `None` when its target does not exist
    /// (no live object of the kind).
    pub fn step(&mut self, op: &Op, o: &Objects) -> Option<Step> {
        match op {
            Op::AllocPd => Some(Step::new(
                "pd",
                vec![],
                Judge::Exact,
                Effect::Made(Kind::Pd),
            )),
            Op::CreateCq => Some(Step::new(
                "cq",
                vec![CQE],
                Judge::Exact,
                Effect::Made(Kind::Cq),
            )),
            Op::RegMr(p, local_write) => Some(reg_mr(o.pd(*p)?, *local_write)),
            Op::CreateAh(p, av) => {
                let mut args = vec![o.pd(*p)? as i64];
                args.extend(av_args(&self.av(av)));
                Some(Step::new("ah", args, Judge::Exact, Effect::Made(Kind::Ah)))
            }
            Op::CreateSrq(p, attr) => Some(self.create_srq(o.pd(*p)?, attr)),
            Op::ModifySrq(p, attr, mask) => Some(self.modify_srq(o.srq(*p)?, attr, *mask)),
            Op::QuerySrq(p) => Some(Step::query_srq(o, o.srq(*p)?)),
            Op::CreateQp(seed) => self.create_qp(seed, o),
            Op::ModifyQp(seed) => self.modify_qp(seed, o),
            Op::QueryQp(p) => Some(Step::query_qp(o, o.qp(*p)?)),
            Op::PostRecv(p, sges) => {
                let qp = o.qp(*p)?;
                Some(self.post("post_recv", qp, o.qps[qp].pd, sges, o))
            }
            Op::PostSrqRecv(p, sges) => {
                let srq = o.srq(*p)?;
                Some(self.post("post_srq_recv", srq, o.srqs[srq].pd, sges, o))
            }
            Op::PollCq(p, max) => Some(poll(o.cq(*p)?, *max)),
            Op::PollEvents => Some(Step::events()),
            Op::DeallocPd(p) => destroy("dealloc_pd", Kind::Pd, o.pd(*p)),
            Op::DestroyCq(p) => destroy("destroy_cq", Kind::Cq, o.cq(*p)),
            Op::DeregMr(p) => destroy("dereg_mr", Kind::Mr, o.mr(*p)),
            Op::DestroyAh(p) => destroy("destroy_ah", Kind::Ah, o.ah(*p)),
            Op::DestroySrq(p) => destroy("destroy_srq", Kind::Srq, o.srq(*p)),
            Op::DestroyQp(p) => destroy("destroy_qp", Kind::Qp, o.qp(*p)),
        }
    }

    fn create_qp(&self, seed: &CreateQpSeed, o: &Objects) -> Option<Step> {
        let pd = o.pd(seed.pd)?;
        let (scq, rcq) = (o.cq(seed.send_cq)?, o.cq(seed.recv_cq)?);
        let srq = seed.srq.and_then(|p| o.srq(p)).map_or(-1, |s| s as i64);
        let mut cap = seed.cap;
        self.limits.qp_cap(&mut cap);
        let mut args = vec![pd as i64, scq as i64, rcq as i64, srq, seed.qp_type.into()];
        args.extend(cap_args(&cap));
        args.push(i64::from(seed.sq_sig_all));
        if srq >= 0 {
            // ibv_create_qp(3): with an SRQ the receive sizes are ignored,
            // so nothing is owed for them.
            cap.max_recv_wr = 0;
            cap.max_recv_sge = 0;
        }
        let entry = QpEntry {
            pd,
            ty: type_from_raw(seed.qp_type).unwrap_or(QpType::Rc),
            state: QpState::Reset,
            set: QpAttrMask::empty(),
            cap,
            rd_atomic: (0, 0),
            live: true,
        };
        let judge = Judge::AtLeast(cap_args(&cap).iter().map(|&v| v as u32).collect());
        Some(Step::new("qp", args, judge, Effect::MadeQp(entry)))
    }

    fn modify_qp(&self, seed: &ModifySeed, o: &Objects) -> Option<Step> {
        let qp = o.qp(seed.qp)?;
        let q = &o.qps[qp];
        let (attr, mask) = build(&self.table, q.ty, q.state, seed);
        let mut args = vec![qp as i64, mask.bits().into()];
        args.extend(qp_attr_args(&self.qp_attr(attr)));
        Some(Step::new(
            "modify_qp",
            args,
            Judge::Exact,
            Effect::ModifiedQp(qp, mask),
        ))
    }

    /// Attribute values made device-independent.
    fn qp_attr(&self, mut a: QpAttr) -> QpAttr {
        let l = &self.limits;
        let pkey = Limits::index(a.pkey_index.into(), l.pkeys);
        a.pkey_index = u16::try_from(pkey).unwrap_or(u16::MAX);
        a.max_rd_atomic = byte(fit(a.max_rd_atomic.into(), l.init_rd_atom));
        a.max_dest_rd_atomic = byte(fit(a.max_dest_rd_atomic.into(), l.rd_atom));
        a.ah_attr = self.av(&a.ah_attr);
        a
    }

    /// An address vector made device-independent: only GID index 0 is
    /// known to be populated on every device, so another index becomes 15,
    /// inside every RoCE device's table (softverbs 16 entries, rxe 1024,
    /// mlx5 255 or more) and empty unless a port has 16 addresses (both
    /// answer ENODATA); a destination GID other than zero becomes ::1,
    /// which the executor reads as the device's own GID 0 (a kernel
    /// resolves that at once; a made-up GID costs a neighbour lookup that
    /// takes seconds to fail with ETIMEDOUT).
    fn av(&self, av: &AhAttr) -> AhAttr {
        let mut av = *av;
        if av.grh.sgid_index != 0 {
            av.grh.sgid_index = EMPTY_SGID_INDEX;
        }
        if av.grh.dgid != Gid([0; 16]) {
            av.grh.dgid = SELF_GID;
        }
        av
    }

    fn create_srq(&self, pd: usize, attr: &SrqAttr) -> Step {
        let l = &self.limits;
        let (max_wr, max_sge) = (fit(attr.max_wr, l.srq_wr), fit(attr.max_sge, l.srq_sge));
        // srq_limit 0: ibv_create_srq(3) ignores the value, but rxe keeps
        // it and then refuses a resize below it (docs/conformance.md,
        // "Differential runs"), which would hide every later difference.
        let args = vec![pd as i64, max_wr.into(), max_sge.into(), 0];
        let entry = SrqEntry {
            pd,
            max_wr,
            max_sge,
            limit_set: false,
            live: true,
        };
        let judge = Judge::AtLeast(vec![max_wr, max_sge]);
        Step::new("srq", args, judge, Effect::MadeSrq(entry))
    }

    fn modify_srq(&self, srq: usize, attr: &SrqAttr, mask: u32) -> Step {
        let max_wr = fit(attr.max_wr, self.limits.srq_wr);
        let args = vec![
            srq as i64,
            mask.into(),
            max_wr.into(),
            attr.srq_limit.into(),
        ];
        let effect = Effect::ModifiedSrq(srq, mask, max_wr);
        Step::new("modify_srq", args, Judge::Exact, effect)
    }

    /// A receive WR on QP or SRQ `target`, whose PD is `pd`.
    fn post(
        &mut self,
        verb: &'static str,
        target: usize,
        pd: usize,
        seeds: &[SgeSeed],
        o: &Objects,
    ) -> Step {
        let wr_id = self.next_wr_id;
        self.next_wr_id += 1;
        let mut args = vec![target as i64, wr_id, seeds.len() as i64];
        for s in seeds {
            args.extend(sge(s, pd, o));
        }
        Step::new(verb, args, Judge::Exact, Effect::None)
    }
}

/// A fitted value that was a u8, clamped back.
fn byte(v: u32) -> u8 {
    u8::try_from(v).unwrap_or(u8::MAX)
}

fn reg_mr(pd: usize, local_write: bool) -> Step {
    let access = if local_write {
        ACCESS_LOCAL_WRITE | REMOTE_WRITE
    } else {
        REMOTE_READ
    };
    let entry = MrEntry {
        pd,
        access,
        live: true,
    };
    Step::new(
        "mr",
        vec![pd as i64, access.into()],
        Judge::Exact,
        Effect::MadeMr(entry),
    )
}

/// One SGE as the executor's four numbers: MR (-1: none), offset, length,
/// key (-1: the MR's lkey). As the in-process harness's SGEs: mostly
/// inside a writable MR of the right PD, sometimes in any MR, empty, with
/// an unknown key or running past an MR's end.
fn sge(seed: &SgeSeed, pd: usize, o: &Objects) -> [i64; 4] {
    let n = usize::from(seed.mr.0);
    let any = (!o.mrs.is_empty()).then(|| n % o.mrs.len());
    let mr = match seed.kind {
        SgeKind::Good => o.mr_with(pd, ACCESS_LOCAL_WRITE, n).or(any),
        _ => any,
    };
    let bogus = [-1, seed.offset.into(), 1 + i64::from(seed.len), 0];
    let Some(mr) = mr else { return bogus };
    let mr = mr as i64;
    match seed.kind {
        SgeKind::Good | SgeKind::AnyMr => {
            let offset = u64::from(seed.offset) % MR_LEN;
            let len = 1 + u64::from(seed.len) % (MR_LEN - offset);
            [mr, offset as i64, len as i64, -1]
        }
        SgeKind::PastEnd => {
            let offset = MR_LEN - u64::from(seed.offset % 16);
            [mr, offset as i64, 17 + i64::from(seed.len % 100), -1]
        }
        SgeKind::Empty => [-1, seed.offset.into(), 0, 0],
        SgeKind::BogusKey => bogus,
    }
}

/// What a successful step's answer tells about the objects.
pub fn apply(o: &mut Objects, step: &Step, answer: &[String]) {
    if !answer.first().is_some_and(|l| l.starts_with("ok")) {
        return;
    }
    match step.effect {
        Effect::None => {}
        Effect::Made(Kind::Pd) => o.pds.push(true),
        Effect::Made(Kind::Cq) => o.cqs.push(true),
        Effect::Made(_) => o.ahs.push(true),
        Effect::MadeMr(m) => o.mrs.push(m),
        Effect::MadeSrq(s) => o.srqs.push(s),
        Effect::MadeQp(q) => o.qps.push(q),
        Effect::Gone(kind, i) => match kind {
            Kind::Pd => o.pds[i] = false,
            Kind::Cq => o.cqs[i] = false,
            Kind::Ah => o.ahs[i] = false,
            Kind::Mr => o.mrs[i].live = false,
            Kind::Srq => o.srqs[i].live = false,
            Kind::Qp => o.qps[i].live = false,
        },
        Effect::ModifiedQp(qp, mask) => {
            let q = &mut o.qps[qp];
            q.set |= mask;
            let asked = |i: usize| step.args[2 + i] as u8;
            if mask.contains(QpAttrMask::MAX_QP_RD_ATOMIC) {
                q.rd_atomic.0 = asked(RD_ATOMIC);
            }
            if mask.contains(QpAttrMask::MAX_DEST_RD_ATOMIC) {
                q.rd_atomic.1 = asked(RD_ATOMIC + 1);
            }
        }
        Effect::ModifiedSrq(srq, mask, max_wr) => {
            // IBV_SRQ_MAX_WR (1) resizes, IBV_SRQ_LIMIT (2) arms.
            if mask & 1 != 0 {
                o.srqs[srq].max_wr = max_wr;
            }
            o.srqs[srq].limit_set |= mask & 2 != 0;
        }
        Effect::QueriedQp(qp) => {
            let state = answer[0].split_whitespace().nth(1);
            let state = state.and_then(|s| s.parse().ok()).and_then(state_from_raw);
            if let Some(state) = state {
                o.qps[qp].state = state;
            }
        }
    }
}
