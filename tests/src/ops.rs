//! The operations of a random sequence and their proptest strategies.
//! Operations carry raw choices, not handles: the harness resolves them
//! against the model's current state when it runs them, so that a modify
//! can aim at a transition that is legal *now*. Values are mostly valid and
//! sometimes not, so that sequences get deep into the state machine while
//! still exercising every error path.

use crate::bringup::valid_av;
use proptest::collection::vec;
use proptest::prelude::*;
use softverbs_engine::{AhAttr, Gid, QpAttr, QpCap, QpType, SrqAttr};
use std::fmt::Debug;

/// Which object an operation targets: mostly a live one, sometimes any
/// handle ever created (maybe destroyed, or the null handle if none), so
/// that stale handles are exercised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick(pub u16);

/// How a modify builds its attribute mask from the QP's current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaskShape {
    /// STATE, the required bits of a legal transition and some optional ones.
    Legal,
    /// As `Legal` without the n-th required bit.
    DropRequired(u8),
    /// As `Legal` plus bit n (0..32), allowed or not.
    AddBit(u8),
    /// No STATE bit: an attribute change in the current state.
    NoState,
    /// STATE with this raw target (maybe illegal, maybe not a state) and
    /// the required bits of some transition.
    AnyTarget(u32),
    /// As `Legal` plus CUR_STATE claiming this raw state.
    CurState(u32),
    /// Any mask at all, with the raw target of the seed.
    Random(u32),
}

/// The random part of an `ibv_modify_qp` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModifySeed {
    /// Target QP.
    pub qp: Pick,
    /// How to build the mask.
    pub shape: MaskShape,
    /// Chooses the target among the legal ones.
    pub target: u8,
    /// Which optional bits to add (about a quarter of them).
    pub optional: u32,
    /// Attribute values: mostly valid.
    pub attr: QpAttr,
}

/// The random part of an `ibv_create_qp` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateQpSeed {
    /// PD.
    pub pd: Pick,
    /// Send CQ.
    pub send_cq: Pick,
    /// Receive CQ.
    pub recv_cq: Pick,
    /// SRQ, if any.
    pub srq: Option<Pick>,
    /// Raw `ibv_qp_type`, mostly RC, UC or UD.
    pub qp_type: u32,
    /// Requested caps, mostly within the device limits.
    pub cap: QpCap,
    /// Every send WR signalled.
    pub sq_sig_all: bool,
}

/// What one SGE of a receive WR points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SgeKind {
    /// Inside a live MR of the right PD with LOCAL_WRITE, if there is one.
    Good,
    /// Inside an MR ever registered (maybe of another PD, without
    /// LOCAL_WRITE, or deregistered).
    AnyMr,
    /// Length 0 with a bogus key: touches no memory, never checked.
    Empty,
    /// A key no MR has.
    BogusKey,
    /// Runs past the end of an MR.
    PastEnd,
}

/// One SGE of a receive WR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SgeSeed {
    /// What it points at.
    pub kind: SgeKind,
    /// Which MR.
    pub mr: Pick,
    /// Offset into the MR.
    pub offset: u16,
    /// Length.
    pub len: u16,
}

/// One operation of a random sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `ibv_create_qp`.
    CreateQp(CreateQpSeed),
    /// `ibv_modify_qp`.
    ModifyQp(Box<ModifySeed>),
    /// `ibv_query_qp` (live QPs are also queried after every operation).
    QueryQp(Pick),
    /// `ibv_destroy_qp`.
    DestroyQp(Pick),
    /// `ibv_create_srq`.
    CreateSrq(Pick, SrqAttr),
    /// `ibv_modify_srq` with a raw mask.
    ModifySrq(Pick, SrqAttr, u32),
    /// `ibv_query_srq`.
    QuerySrq(Pick),
    /// `ibv_destroy_srq`.
    DestroySrq(Pick),
    /// `ibv_post_recv` of one WR.
    PostRecv(Pick, Vec<SgeSeed>),
    /// `ibv_post_srq_recv` of one WR.
    PostSrqRecv(Pick, Vec<SgeSeed>),
    /// `ibv_poll_cq` for up to n completions.
    PollCq(Pick, usize),
    /// `ibv_get_async_event` until none is left.
    PollEvents,
    /// `ibv_alloc_pd`.
    AllocPd,
    /// `ibv_dealloc_pd`.
    DeallocPd(Pick),
    /// `ibv_create_cq`.
    CreateCq,
    /// `ibv_destroy_cq`.
    DestroyCq(Pick),
    /// `ibv_reg_mr`, with or without LOCAL_WRITE.
    RegMr(Pick, bool),
    /// `ibv_dereg_mr`.
    DeregMr(Pick),
    /// `ibv_create_ah`.
    CreateAh(Pick, AhAttr),
    /// `ibv_destroy_ah`.
    DestroyAh(Pick),
}

/// A QP of type `qp_type` on the PD and CQs `first` picks (the first ones
/// made), room for 4 WRs and 2 SGEs each way: what every sequence starts
/// with.
pub fn starter_qp(qp_type: QpType, first: Pick) -> CreateQpSeed {
    CreateQpSeed {
        pd: first,
        send_cq: first,
        recv_cq: first,
        srq: None,
        qp_type: qp_type as u32,
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    }
}

/// Any operation, weighted towards modify so that QPs travel far.
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => create_qp().prop_map(Op::CreateQp),
        60 => modify().prop_map(|m| Op::ModifyQp(Box::new(m))),
        1 => pick().prop_map(Op::QueryQp),
        3 => pick().prop_map(Op::DestroyQp),
        3 => (pick(), create_srq_attr()).prop_map(|(p, a)| Op::CreateSrq(p, a)),
        4 => (pick(), modify_srq_attr(), srq_mask()).prop_map(|(p, a, m)| Op::ModifySrq(p, a, m)),
        1 => pick().prop_map(Op::QuerySrq),
        2 => pick().prop_map(Op::DestroySrq),
        10 => (pick(), sges()).prop_map(|(p, s)| Op::PostRecv(p, s)),
        4 => (pick(), sges()).prop_map(|(p, s)| Op::PostSrqRecv(p, s)),
        5 => (pick(), 1..=8usize).prop_map(|(p, n)| Op::PollCq(p, n)),
        4 => Just(Op::PollEvents),
        1 => Just(Op::AllocPd),
        2 => pick().prop_map(Op::DeallocPd),
        1 => Just(Op::CreateCq),
        2 => pick().prop_map(Op::DestroyCq),
        2 => (pick(), any::<bool>()).prop_map(|(p, w)| Op::RegMr(p, w)),
        1 => pick().prop_map(Op::DeregMr),
        2 => (pick(), ah_attr()).prop_map(|(p, a)| Op::CreateAh(p, a)),
        1 => pick().prop_map(Op::DestroyAh),
    ]
}

fn pick() -> impl Strategy<Value = Pick> {
    any::<u16>().prop_map(Pick)
}

/// `valid` 24 times in 25, else `invalid`.
fn mostly<T: Debug + Clone + 'static>(
    valid: impl Strategy<Value = T> + 'static,
    invalid: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<T> {
    prop_oneof![24 => valid, 1 => invalid].boxed()
}

fn create_qp() -> impl Strategy<Value = CreateQpSeed> {
    let qp_type = prop_oneof![40 => 2..=4u32, 1 => 0..=16u32, 1 => any::<u32>()];
    let srq = proptest::option::weighted(0.3, pick());
    (
        pick(),
        pick(),
        pick(),
        srq,
        qp_type,
        qp_cap(),
        any::<bool>(),
    )
        .prop_map(
            |(pd, send_cq, recv_cq, srq, qp_type, cap, sq_sig_all)| CreateQpSeed {
                pd,
                send_cq,
                recv_cq,
                srq,
                qp_type,
                cap,
                sq_sig_all,
            },
        )
}

/// Small valid values mostly, the limit itself and values above it rarely.
fn cap_value(small: u32, limit: u32) -> impl Strategy<Value = u32> {
    prop_oneof![40 => 0..=small, 1 => Just(limit), 1 => limit + 1..=u32::MAX]
}

fn qp_cap() -> impl Strategy<Value = QpCap> {
    let wr = || cap_value(6, 32768);
    let sge = || cap_value(4, 32);
    (wr(), wr(), sge(), sge(), cap_value(64, 512)).prop_map(|(sw, rw, ss, rs, inline)| QpCap {
        max_send_wr: sw,
        max_recv_wr: rw,
        max_send_sge: ss,
        max_recv_sge: rs,
        max_inline_data: inline,
    })
}

fn modify() -> impl Strategy<Value = ModifySeed> {
    let shape = prop_oneof![
        70 => Just(MaskShape::Legal),
        8 => any::<u8>().prop_map(MaskShape::DropRequired),
        8 => (0..32u8).prop_map(MaskShape::AddBit),
        4 => Just(MaskShape::NoState),
        4 => prop_oneof![0..=8u32, any::<u32>()].prop_map(MaskShape::AnyTarget),
        3 => (0..=8u32).prop_map(MaskShape::CurState),
        3 => any::<u32>().prop_map(MaskShape::Random),
    ];
    // ALT_PATH always fails (no APM): offer it a quarter as often as the
    // other optional bits so that it does not stall most connected QPs.
    let alt_path = 1 << 14;
    let optional = (any::<u32>(), any::<u32>(), any::<u32>())
        .prop_map(move |(a, b, c)| a & b & (c | !alt_path));
    (pick(), shape, any::<u8>(), optional, qp_attr()).prop_map(
        |(qp, shape, target, optional, attr)| ModifySeed {
            qp,
            shape,
            target,
            optional,
            attr,
        },
    )
}

/// Attribute values, each field valid 24 times in 25. PSNs and Q_Key have
/// no invalid values; PSNs above 24 bits check the masking.
pub fn qp_attr() -> impl Strategy<Value = QpAttr> {
    let path = (
        mostly(Just(1u8), prop_oneof![Just(0u8), 2..=u8::MAX]),
        mostly(Just(0u16), 1..=u16::MAX),
        mostly(0..=0x1fu32, 0x20..=u32::MAX),
        any::<u32>(),
        ah_attr(),
        mostly(1..=5u32, prop_oneof![Just(0u32), 6..=u32::MAX]),
    );
    let timers = (
        mostly(0..=31u8, 32..=u8::MAX),
        mostly(0..=7u8, 8..=u8::MAX),
        mostly(0..=7u8, 8..=u8::MAX),
        mostly(0..=31u8, 32..=u8::MAX),
        prop_oneof![0..=0xFF_FFFFu32, any::<u32>()],
        prop_oneof![0..=0xFF_FFFFu32, any::<u32>()],
    );
    let rest = (
        mostly(0..=128u8, 129..=u8::MAX),
        mostly(0..=128u8, 129..=u8::MAX),
        mostly(0..=0xFF_FFFFu32, 0x100_0000..=u32::MAX),
        mostly(Just(0u32), 1..=u32::MAX),
        prop_oneof![Just(0u8), Just(1u8), any::<u8>()],
    );
    (path, timers, rest).prop_map(|(p, t, r)| QpAttr {
        port_num: p.0,
        pkey_index: p.1,
        qp_access_flags: p.2,
        qkey: p.3,
        ah_attr: p.4,
        path_mtu: p.5,
        timeout: t.0,
        retry_cnt: t.1,
        rnr_retry: t.2,
        min_rnr_timer: t.3,
        rq_psn: t.4,
        sq_psn: t.5,
        max_rd_atomic: r.0,
        max_dest_rd_atomic: r.1,
        dest_qp_num: r.2,
        path_mig_state: r.3,
        en_sqd_async_notify: r.4,
        ..QpAttr::default()
    })
}

/// An address vector: valid with random SL, flow label and GID, or with
/// exactly one field broken.
pub fn ah_attr() -> impl Strategy<Value = AhAttr> {
    let valid = (0..=15u8, 0..=0xF_FFFFu32, any::<[u8; 16]>(), any::<u8>()).prop_map(
        |(sl, flow, gid, hop)| {
            let mut av = valid_av();
            av.sl = sl;
            av.grh.flow_label = flow;
            av.grh.hop_limit = hop;
            if gid != [0; 16] {
                av.grh.dgid = Gid(gid);
            }
            av
        },
    );
    mostly(
        valid,
        (0..6u8, any::<u8>()).prop_map(|(which, v)| broken_av(which, v)),
    )
}

fn broken_av(which: u8, v: u8) -> AhAttr {
    let mut av = valid_av();
    match which {
        0 => av.port_num = if v == 1 { 0 } else { v },
        1 => av.is_global = false,
        2 => av.sl = 16 + v % 240,
        3 => av.grh.flow_label = 0x10_0000 + u32::from(v),
        4 => av.grh.sgid_index = v.max(1),
        _ => av.grh.dgid = Gid([0; 16]),
    }
    av
}

fn create_srq_attr() -> impl Strategy<Value = SrqAttr> {
    let max_wr =
        prop_oneof![20 => 1..=6u32, 1 => Just(0u32), 1 => Just(32768u32), 1 => 32769..=u32::MAX];
    let max_sge = prop_oneof![20 => 0..=3u32, 1 => Just(32u32), 1 => 33..=u32::MAX];
    (max_wr, max_sge, any::<u32>()).prop_map(|(max_wr, max_sge, srq_limit)| SrqAttr {
        max_wr,
        max_sge,
        srq_limit,
    })
}

fn modify_srq_attr() -> impl Strategy<Value = SrqAttr> {
    let max_wr = prop_oneof![20 => 0..=8u32, 1 => Just(32768u32), 1 => 32769..=u32::MAX];
    let limit = prop_oneof![20 => 0..=8u32, 1 => any::<u32>()];
    (max_wr, any::<u32>(), limit).prop_map(|(max_wr, max_sge, srq_limit)| SrqAttr {
        max_wr,
        max_sge,
        srq_limit,
    })
}

/// IBV_SRQ_MAX_WR and/or IBV_SRQ_LIMIT mostly; sometimes none or junk.
fn srq_mask() -> impl Strategy<Value = u32> {
    prop_oneof![20 => 1..=3u32, 1 => Just(0u32), 1 => any::<u32>()]
}

fn sges() -> impl Strategy<Value = Vec<SgeSeed>> {
    prop_oneof![10 => vec(sge(), 0..=2), 1 => vec(sge(), 3..=6)]
}

fn sge() -> impl Strategy<Value = SgeSeed> {
    let kind = prop_oneof![
        20 => Just(SgeKind::Good),
        3 => Just(SgeKind::AnyMr),
        1 => Just(SgeKind::Empty),
        1 => Just(SgeKind::BogusKey),
        1 => Just(SgeKind::PastEnd),
    ];
    (kind, pick(), any::<u16>(), any::<u16>()).prop_map(|(kind, mr, offset, len)| SgeSeed {
        kind,
        mr,
        offset,
        len,
    })
}
