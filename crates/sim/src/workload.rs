//! Random workloads. A workload is pure data derived from one seed: which
//! QP pairs connect the two nodes, how each end is configured, and the
//! ordered list of work requests each direction ("stream") posts. The
//! runner executes it; the checker recomputes from it what must happen.

use softverbs_engine::{send_opcode as op, Mtu, Nanos, QpType};
use std::fmt;

/// Nodes in every workload.
pub const NODES: usize = 2;
/// SGEs per send WR a QP allows.
pub const MAX_SEND_SGE: u32 = 4;
/// SGEs per receive WR a QP or SRQ allows.
pub const MAX_RECV_SGE: u32 = 3;
/// Inline bytes per send WR a QP allows.
pub const MAX_INLINE: u32 = 64;
/// Messages in a stream.
const OPS_PER_STREAM: std::ops::RangeInclusive<usize> = 1..=48;
/// Largest message of a connected QP, in path MTUs.
const MAX_MTUS: u32 = 4;
/// 24-bit PSN space.
const PSN_MASK: u32 = 0xFF_FFFF;

/// One generated workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// The seed everything derives from.
    pub seed: u64,
    /// QP pairs; end 0 of each lives on node 0, end 1 on node 1.
    pub pairs: Vec<PairSpec>,
    /// One-way traffic over a pair.
    pub streams: Vec<StreamSpec>,
    /// How eagerly WRs are posted.
    pub pacing: Pacing,
}

/// Two QPs, one per node, connected (RC, UC) or addressing each other (UD).
#[derive(Debug, Clone, PartialEq)]
pub struct PairSpec {
    /// Transport service.
    pub qp_type: QpType,
    /// Path MTU (RC, UC); the largest UD payload.
    pub mtu: Mtu,
    /// The end on each node.
    pub ends: [EndSpec; NODES],
}

/// The attributes of one QP of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndSpec {
    /// First PSN this end sends; its peer's rq_psn.
    pub sq_psn: u32,
    /// Receives from the node's SRQ of its type (RC and UD only).
    pub srq: bool,
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Outstanding READ/atomic requests this end issues; the peer
    /// provides as many responder resources.
    pub max_rd_atomic: u8,
    /// Local ACK timeout exponent (RC).
    pub timeout: u8,
    /// Transport retries (RC).
    pub retry_cnt: u8,
    /// RNR retries, 7 = forever (RC).
    pub rnr_retry: u8,
    /// RNR NAK timer code this end sends as a responder (RC).
    pub min_rnr_timer: u8,
    /// Q_Key (UD).
    pub qkey: u32,
}

/// The WRs one end of a pair posts to the other, in posting order.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamSpec {
    /// Index into [`Workload::pairs`].
    pub pair: usize,
    /// Sending node (and end) index.
    pub from: usize,
    /// The WRs.
    pub ops: Vec<OpSpec>,
    /// Initial value of the responder word all the stream's atomics hit.
    pub atomic_init: u64,
}

impl StreamSpec {
    /// Receiving node (and end) index.
    pub fn to(&self) -> usize {
        1 - self.from
    }

    /// WRs that consume a receive WR at the responder.
    pub fn recv_count(&self) -> usize {
        self.ops.iter().filter(|o| o.consumes_recv()).count()
    }

    /// The longest message that lands in a receive buffer.
    pub fn max_recv_len(&self) -> u32 {
        self.ops
            .iter()
            .filter(|o| o.is_send())
            .map(|o| o.len)
            .max()
            .unwrap_or(0)
    }
}

/// One send WR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpSpec {
    /// `ibv_wr_opcode`.
    pub opcode: u32,
    /// Message length (8 for atomics).
    pub len: u32,
    /// Lengths of the local SGEs (summing to `len`); empty when inline.
    pub sges: Vec<u32>,
    /// IBV_SEND_SIGNALED.
    pub signaled: bool,
    /// IBV_SEND_INLINE.
    pub inline: bool,
    /// IBV_SEND_FENCE.
    pub fence: bool,
    /// IBV_SEND_SOLICITED.
    pub solicited: bool,
    /// Immediate data (with the _WITH_IMM opcodes).
    pub imm: u32,
    /// Compare value (CMP_AND_SWP) or addend (FETCH_AND_ADD).
    pub compare_add: u64,
    /// Swap value (CMP_AND_SWP).
    pub swap: u64,
}

impl OpSpec {
    /// SEND or SEND_WITH_IMM: the data lands in a receive buffer.
    pub fn is_send(&self) -> bool {
        matches!(self.opcode, op::SEND | op::SEND_WITH_IMM)
    }

    /// RDMA WRITE with or without immediate.
    pub fn is_write(&self) -> bool {
        matches!(self.opcode, op::RDMA_WRITE | op::RDMA_WRITE_WITH_IMM)
    }

    /// RDMA READ.
    pub fn is_read(&self) -> bool {
        self.opcode == op::RDMA_READ
    }

    /// Either atomic.
    pub fn is_atomic(&self) -> bool {
        matches!(
            self.opcode,
            op::ATOMIC_CMP_AND_SWP | op::ATOMIC_FETCH_AND_ADD
        )
    }

    /// Carries immediate data.
    pub fn has_imm(&self) -> bool {
        matches!(self.opcode, op::SEND_WITH_IMM | op::RDMA_WRITE_WITH_IMM)
    }

    /// Consumes a receive WR at the responder.
    pub fn consumes_recv(&self) -> bool {
        self.is_send() || self.opcode == op::RDMA_WRITE_WITH_IMM
    }

    /// The opcode's verbs name.
    pub fn name(&self) -> &'static str {
        opcode_name(self.opcode)
    }
}

/// The `IBV_WR_*` name of a send opcode.
pub fn opcode_name(opcode: u32) -> &'static str {
    match opcode {
        op::SEND => "SEND",
        op::SEND_WITH_IMM => "SEND_WITH_IMM",
        op::RDMA_WRITE => "RDMA_WRITE",
        op::RDMA_WRITE_WITH_IMM => "RDMA_WRITE_WITH_IMM",
        op::RDMA_READ => "RDMA_READ",
        op::ATOMIC_CMP_AND_SWP => "ATOMIC_CMP_AND_SWP",
        op::ATOMIC_FETCH_AND_ADD => "ATOMIC_FETCH_AND_ADD",
        _ => "?",
    }
}

/// How eagerly the applications post: senders in bursts separated by
/// gaps, receivers lazily in bursts so that RC senders meet empty receive
/// queues (RNR) and UC/UD messages meet them too (silent drops).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    /// Largest send burst.
    pub send_burst: u32,
    /// Largest gap between send bursts.
    pub send_gap: Nanos,
    /// Largest receive burst.
    pub recv_burst: u32,
    /// Largest gap between receive bursts.
    pub recv_gap: Nanos,
}

impl Workload {
    /// The workload of `seed`.
    pub fn generate(seed: u64) -> Workload {
        let mut rng = fastrand::Rng::with_seed(seed);
        let pairs: Vec<PairSpec> = (0..rng.usize(1..=4)).map(|_| gen_pair(&mut rng)).collect();
        let mut streams = Vec::new();
        for (index, pair) in pairs.iter().enumerate() {
            for from in gen_directions(&mut rng) {
                streams.push(gen_stream(&mut rng, index, pair, from));
            }
        }
        Workload {
            seed,
            pairs,
            streams,
            pacing: gen_pacing(&mut rng),
        }
    }

    /// The pair a stream runs over.
    pub fn pair_of(&self, stream: usize) -> &PairSpec {
        &self.pairs[self.streams[stream].pair]
    }
}

fn gen_pair(rng: &mut fastrand::Rng) -> PairSpec {
    let qp_type = match rng.u8(..4) {
        0 | 1 => QpType::Rc,
        2 => QpType::Uc,
        _ => QpType::Ud,
    };
    let mtus = [
        Mtu::Mtu256,
        Mtu::Mtu512,
        Mtu::Mtu1024,
        Mtu::Mtu2048,
        Mtu::Mtu4096,
    ];
    PairSpec {
        qp_type,
        mtu: mtus[rng.usize(..mtus.len())],
        ends: [gen_end(rng, qp_type), gen_end(rng, qp_type)],
    }
}

fn gen_end(rng: &mut fastrand::Rng, ty: QpType) -> EndSpec {
    EndSpec {
        sq_psn: gen_psn(rng),
        srq: ty != QpType::Uc && rng.u8(..10) < 3,
        max_send_wr: rng.u32(4..=32),
        max_rd_atomic: rng.u8(1..=8),
        timeout: rng.u8(8..=12),
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: rng.u8(1..=3),
        // The high bit of a WR's remote_qkey means "use the QP's own".
        qkey: rng.u32(..0x8000_0000),
    }
}

/// A first PSN; often just below 2^24 so that the sequence wraps.
fn gen_psn(rng: &mut fastrand::Rng) -> u32 {
    if rng.u8(..10) < 3 {
        (0xFF_FFF0 + rng.u32(..32)) & PSN_MASK
    } else {
        rng.u32(..=PSN_MASK)
    }
}

fn gen_directions(rng: &mut fastrand::Rng) -> Vec<usize> {
    match rng.u8(..10) {
        0..=3 => vec![0],
        4..=6 => vec![1],
        _ => vec![0, 1],
    }
}

fn gen_stream(rng: &mut fastrand::Rng, pair: usize, spec: &PairSpec, from: usize) -> StreamSpec {
    let atomic_init = rng.u64(..);
    let mut word = atomic_init;
    let mut ops: Vec<OpSpec> = (0..rng.usize(OPS_PER_STREAM))
        .map(|_| gen_op(rng, spec, &mut word))
        .collect();
    enforce_signaling(&mut ops, spec.ends[from].max_send_wr);
    StreamSpec {
        pair,
        from,
        ops,
        atomic_init,
    }
}

/// One WR; `word` tracks the atomic target so that about half the
/// compare-and-swaps are chosen to succeed.
fn gen_op(rng: &mut fastrand::Rng, pair: &PairSpec, word: &mut u64) -> OpSpec {
    let opcode = gen_opcode(rng, pair.qp_type);
    let len = gen_len(rng, pair, opcode);
    let mut spec = OpSpec {
        opcode,
        len,
        sges: Vec::new(),
        signaled: rng.bool(),
        inline: false,
        fence: rng.u8(..20) == 0,
        solicited: false,
        imm: 0,
        compare_add: 0,
        swap: 0,
    };
    spec.inline = (spec.is_send() || spec.is_write()) && len <= MAX_INLINE && rng.u8(..6) == 0;
    spec.solicited = spec.consumes_recv() && rng.u8(..4) == 0;
    if spec.has_imm() {
        spec.imm = rng.u32(..);
    }
    if spec.is_atomic() {
        // The original value lands in exactly one 8-byte SGE.
        spec.sges = vec![8];
        gen_atomic(rng, &mut spec, word);
    } else if !spec.inline {
        spec.sges = split(rng, len);
    }
    spec
}

fn gen_opcode(rng: &mut fastrand::Rng, ty: QpType) -> u32 {
    const RC: [(u32, u8); 7] = [
        (op::SEND, 3),
        (op::SEND_WITH_IMM, 2),
        (op::RDMA_WRITE, 2),
        (op::RDMA_WRITE_WITH_IMM, 2),
        (op::RDMA_READ, 2),
        (op::ATOMIC_CMP_AND_SWP, 1),
        (op::ATOMIC_FETCH_AND_ADD, 1),
    ];
    let table: &[(u32, u8)] = match ty {
        QpType::Rc => &RC,
        QpType::Uc => &RC[..4],
        QpType::Ud => &RC[..2],
    };
    let total: u8 = table.iter().map(|e| e.1).sum();
    let mut pick = rng.u8(..total);
    for &(opcode, weight) in table {
        if pick < weight {
            return opcode;
        }
        pick -= weight;
    }
    unreachable!("pick is below the total weight")
}

/// Lengths from empty to several MTUs, with the MTU multiples and their
/// neighbours that segmentation gets wrong; UD messages fit one packet.
fn gen_len(rng: &mut fastrand::Rng, pair: &PairSpec, opcode: u32) -> u32 {
    if matches!(opcode, op::ATOMIC_CMP_AND_SWP | op::ATOMIC_FETCH_AND_ADD) {
        return 8;
    }
    let m = pair.mtu.bytes();
    let len = match rng.u8(..10) {
        0 => rng.u32(0..=8),
        1..=4 => rng.u32(0..=m),
        5..=7 => rng.u32(m..=3 * m),
        8 => m * rng.u32(1..=MAX_MTUS),
        _ => (m * rng.u32(1..=MAX_MTUS) + 1) - 2 * u32::from(rng.bool()),
    };
    let cap = if pair.qp_type == QpType::Ud {
        m
    } else {
        MAX_MTUS * m
    };
    len.min(cap)
}

/// Local SGE lengths summing to `len`: mostly one, sometimes several;
/// an empty message has no SGE or one empty SGE.
fn split(rng: &mut fastrand::Rng, len: u32) -> Vec<u32> {
    if len == 0 {
        return if rng.bool() { Vec::new() } else { vec![0] };
    }
    let pieces = if rng.u8(..5) == 0 {
        rng.u32(2..=MAX_SEND_SGE)
    } else {
        1
    };
    cut(rng, len, pieces)
}

/// Cuts `len` (> 0) into at most `pieces` non-empty parts.
pub fn cut(rng: &mut fastrand::Rng, len: u32, pieces: u32) -> Vec<u32> {
    let mut cuts: Vec<u32> = (1..pieces.min(len)).map(|_| rng.u32(1..len)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::with_capacity(cuts.len() + 1);
    let mut from = 0;
    for c in cuts.into_iter().chain([len]) {
        out.push(c - from);
        from = c;
    }
    out
}

fn gen_atomic(rng: &mut fastrand::Rng, spec: &mut OpSpec, word: &mut u64) {
    if spec.opcode == op::ATOMIC_CMP_AND_SWP {
        spec.compare_add = if rng.bool() { *word } else { rng.u64(..) };
        spec.swap = rng.u64(..);
    } else {
        spec.compare_add = rng.u64(..);
    }
    *word = apply_atomic(spec, *word);
}

/// The value an atomic leaves in its target that held `old`.
pub fn apply_atomic(spec: &OpSpec, old: u64) -> u64 {
    match spec.opcode {
        op::ATOMIC_CMP_AND_SWP if old == spec.compare_add => spec.swap,
        op::ATOMIC_FETCH_AND_ADD => old.wrapping_add(spec.compare_add),
        _ => old,
    }
}

/// A signaled WR at least every half queue and as the last WR, as real
/// applications do: an unsignaled WR's queue slot is only known to be
/// free once a later signaled WR completes.
fn enforce_signaling(ops: &mut [OpSpec], max_send_wr: u32) {
    let limit = (max_send_wr / 2).max(1);
    let mut run = 0;
    for o in ops.iter_mut() {
        run = if o.signaled { 0 } else { run + 1 };
        if run >= limit {
            o.signaled = true;
            run = 0;
        }
    }
    if let Some(last) = ops.last_mut() {
        last.signaled = true;
    }
}

fn gen_pacing(rng: &mut fastrand::Rng) -> Pacing {
    Pacing {
        send_burst: rng.u32(1..=8),
        send_gap: rng.u64(0..=30_000),
        recv_burst: rng.u32(1..=8),
        recv_gap: rng.u64(2_000..=60_000),
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "workload seed {}: {:?}", self.seed, self.pacing)?;
        for (i, p) in self.pairs.iter().enumerate() {
            writeln!(f, "  pair {i}: {} mtu {}", p.qp_type.name(), p.mtu.bytes())?;
            for (n, e) in p.ends.iter().enumerate() {
                writeln!(f, "    end {n}: {e:?}")?;
            }
        }
        for (i, s) in self.streams.iter().enumerate() {
            writeln!(
                f,
                "  stream {i}: pair {} node {} -> node {}",
                s.pair,
                s.from,
                s.to()
            )?;
            for (n, o) in s.ops.iter().enumerate() {
                let flags = format!(
                    "{}{}{}{}",
                    if o.signaled { " signaled" } else { "" },
                    if o.inline { " inline" } else { "" },
                    if o.fence { " fence" } else { "" },
                    if o.solicited { " solicited" } else { "" },
                );
                writeln!(
                    f,
                    "    op {n}: {} len {} sges {:?}{flags}",
                    o.name(),
                    o.len,
                    o.sges
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn many() -> impl Iterator<Item = Workload> {
        (0..300).map(Workload::generate)
    }

    #[test]
    fn generation_is_deterministic() {
        assert_eq!(Workload::generate(42), Workload::generate(42));
        assert_ne!(Workload::generate(42), Workload::generate(43));
    }

    #[test]
    fn ops_fit_their_qp_type() {
        for w in many() {
            assert!((1..=4).contains(&w.pairs.len()));
            for s in &w.streams {
                let pair = &w.pairs[s.pair];
                assert!(OPS_PER_STREAM.contains(&s.ops.len()));
                for o in &s.ops {
                    assert!(softverbs_engine::opcode_allowed(pair.qp_type, o.opcode));
                    let m = pair.mtu.bytes();
                    match pair.qp_type {
                        QpType::Ud => assert!(o.len <= m),
                        _ => assert!(o.len <= MAX_MTUS * m),
                    }
                    assert_eq!(o.sges.iter().sum::<u32>(), if o.inline { 0 } else { o.len });
                    assert!(o.sges.len() <= MAX_SEND_SGE as usize);
                    assert!(!o.inline || o.len <= MAX_INLINE);
                    if o.is_atomic() {
                        assert_eq!(o.sges, vec![8]);
                    }
                }
            }
        }
    }

    #[test]
    fn signaling_leaves_no_long_unsignaled_run_and_ends_signaled() {
        for w in many() {
            for s in &w.streams {
                let limit = (w.pairs[s.pair].ends[s.from].max_send_wr / 2).max(1) as usize;
                assert!(s.ops.last().expect("non-empty").signaled);
                let mut run = 0;
                for o in &s.ops {
                    run = if o.signaled { 0 } else { run + 1 };
                    assert!(run < limit);
                }
            }
        }
    }

    #[test]
    fn the_mix_covers_every_case_the_brief_asks_for() {
        let (mut wraps, mut srq, mut multi_sge, mut empty, mut cas_hits) = (0, 0, 0, 0, 0);
        let mut opcodes = std::collections::HashSet::new();
        let mut types = std::collections::HashSet::new();
        for w in many() {
            for p in &w.pairs {
                types.insert(p.qp_type);
                wraps += p.ends.iter().filter(|e| e.sq_psn >= 0xFF_FFF0).count();
                srq += p.ends.iter().filter(|e| e.srq).count();
                assert!(p.qp_type != QpType::Uc || p.ends.iter().all(|e| !e.srq));
            }
            for s in &w.streams {
                let mut word = s.atomic_init;
                for o in &s.ops {
                    opcodes.insert(o.opcode);
                    multi_sge += usize::from(o.sges.len() > 1);
                    empty += usize::from(o.len == 0);
                    if o.opcode == op::ATOMIC_CMP_AND_SWP && o.compare_add == word {
                        cas_hits += 1;
                    }
                    word = apply_atomic(o, word);
                }
            }
        }
        assert_eq!(types.len(), 3);
        assert_eq!(opcodes.len(), 7);
        for (name, n) in [
            ("wrapping PSNs", wraps),
            ("SRQ ends", srq),
            ("multi-SGE WRs", multi_sge),
            ("empty messages", empty),
            ("successful CAS", cas_hits),
        ] {
            assert!(n > 10, "{name}: {n}");
        }
    }

    #[test]
    fn cut_makes_non_empty_pieces_summing_to_the_length() {
        let mut rng = fastrand::Rng::with_seed(1);
        for len in 1..200 {
            for pieces in 1..5 {
                let parts = cut(&mut rng, len, pieces);
                assert_eq!(parts.iter().sum::<u32>(), len);
                assert!(parts.iter().all(|&p| p > 0));
                assert!(parts.len() <= pieces as usize);
            }
        }
    }

    #[test]
    fn atomics_follow_cas_and_faa_rules() {
        let mut o = OpSpec {
            opcode: op::ATOMIC_CMP_AND_SWP,
            len: 8,
            sges: vec![8],
            signaled: true,
            inline: false,
            fence: false,
            solicited: false,
            imm: 0,
            compare_add: 5,
            swap: 9,
        };
        assert_eq!(apply_atomic(&o, 5), 9);
        assert_eq!(apply_atomic(&o, 6), 6);
        o.opcode = op::ATOMIC_FETCH_AND_ADD;
        assert_eq!(apply_atomic(&o, u64::MAX), 4);
    }
}
