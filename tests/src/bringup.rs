//! Bringing a QP to a given state through legal transitions, with valid
//! attribute values (seed 004's recommended ones), for tests that need a QP
//! in a known state.

use crate::device::*;
use crate::names::state_to_raw;
use crate::table::TransitionTable;
use crate::Outcome;
use softverbs_engine::{
    AhAttr, CqId, DeviceConfig, Engine, Gid, GlobalRoute, PdId, QpAttr, QpAttrMask, QpCap, QpId,
    QpInitAttr, QpState, QpType,
};

/// An address vector the loopback port accepts: GRH to fe80::1 from GID 0.
pub fn valid_av() -> AhAttr {
    let mut dgid = [0u8; 16];
    dgid[0] = 0xfe;
    dgid[1] = 0x80;
    dgid[15] = 1;
    AhAttr {
        grh: GlobalRoute {
            dgid: Gid(dgid),
            flow_label: 0,
            sgid_index: POPULATED_SGID_INDEX,
            hop_limit: 64,
            traffic_class: 0,
        },
        is_global: true,
        port_num: PORT_NUM,
        ..AhAttr::default()
    }
}

/// Attributes with every field valid, for a move from `cur` to `to`.
pub fn valid_attr(cur: QpState, to: QpState) -> QpAttr {
    QpAttr {
        qp_state: state_to_raw(to),
        cur_qp_state: state_to_raw(cur),
        path_mtu: 3,
        path_mig_state: MIG_MIGRATED,
        qkey: 0x1111_1111,
        rq_psn: 0x12_3456,
        sq_psn: 0x65_4321,
        dest_qp_num: 0x12,
        qp_access_flags: QP_ACCESS_VALID,
        ah_attr: valid_av(),
        pkey_index: 0,
        en_sqd_async_notify: 1,
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        port_num: PORT_NUM,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..QpAttr::default()
    }
}

/// The states a new QP passes through to reach `to`, RESET excluded. SQE
/// has none: only a send error on the data path enters it.
pub fn path_from_reset(to: QpState) -> Option<&'static [QpState]> {
    use QpState::*;
    Some(match to {
        Reset => &[],
        Init => &[Init],
        Rtr => &[Init, Rtr],
        Rts => &[Init, Rtr, Rts],
        Sqd => &[Init, Rtr, Rts, Sqd],
        Err => &[Init, Err],
        Sqe => return None,
    })
}

/// An engine with one PD and one CQ, to create QPs in.
#[derive(Debug)]
pub struct Fixture {
    /// The engine under test.
    pub engine: Engine,
    /// Its PD.
    pub pd: PdId,
    /// Its CQ, both send and receive CQ of every QP.
    pub cq: CqId,
    table: TransitionTable,
}

impl Fixture {
    /// A loopback device following `table` for bringup.
    pub fn new(table: &TransitionTable) -> Fixture {
        let mut engine = Engine::new(DeviceConfig::loopback(1));
        let pd = engine.alloc_pd().expect("alloc_pd");
        let (cq, _) = engine.create_cq(256, 0).expect("create_cq");
        Fixture {
            engine,
            pd,
            cq,
            table: table.clone(),
        }
    }

    /// A new QP of type `ty` in RESET.
    pub fn create_qp(&mut self, ty: QpType) -> QpId {
        let init = QpInitAttr {
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ty as u32,
            sq_sig_all: false,
        };
        self.engine.create_qp(self.pd, &init).expect("create_qp").id
    }

    /// A new QP of type `ty` brought to `state` with exactly the required
    /// bits of each step; panics for SQE, which cannot be reached.
    pub fn qp_at(&mut self, ty: QpType, state: QpState) -> QpId {
        let qp = self.create_qp(ty);
        let path = path_from_reset(state).expect("SQE cannot be reached by modify_qp");
        let mut cur = QpState::Reset;
        for &next in path {
            let rule = self
                .table
                .rule(ty, cur, next)
                .expect("bringup path is legal");
            let mask = QpAttrMask::STATE | rule.required;
            let step = self.modify(qp, cur, next, mask);
            assert_eq!(step, Ok(()), "{ty:?} {cur:?}->{next:?} bringup");
            cur = next;
        }
        qp
    }

    /// `modify_qp` with [`valid_attr`] for `cur` -> `to`.
    pub fn modify(&mut self, qp: QpId, cur: QpState, to: QpState, mask: QpAttrMask) -> Outcome {
        let attr = valid_attr(cur, to);
        self.engine
            .modify_qp(qp, &attr, mask)
            .map_err(|e| e.errno())
    }

    /// Everything `query_qp` reports, for before/after comparisons.
    pub fn snapshot(&self, qp: QpId) -> (QpAttr, QpInitAttr) {
        self.engine.query_qp(qp).expect("query_qp")
    }
}
