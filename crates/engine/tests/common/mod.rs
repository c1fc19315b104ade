//! Shared set-up for the engine's rule tests: a loopback device and the
//! attributes of a textbook RESET->INIT->RTR->RTS bringup (seed 004's
//! recommended values).
#![allow(dead_code)]

pub mod pair;

use softverbs_engine::*;
use std::net::Ipv4Addr;

pub const EINVAL: i32 = 22;
pub const EBUSY: i32 = 16;
pub const ENOMEM: i32 = 12;
pub const EOPNOTSUPP: i32 = 95;
pub const ENODATA: i32 = 61;

pub fn engine() -> Engine {
    Engine::new(DeviceConfig::loopback(42))
}

/// The errno of a result, 0 for success.
pub fn errno<T>(r: VerbsResult<T>) -> i32 {
    r.map_or_else(|e| e.errno(), |_| 0)
}

pub struct Fixture {
    pub e: Engine,
    pub pd: PdId,
    pub cq: CqId,
}

pub fn fixture() -> Fixture {
    let mut e = engine();
    let pd = e.alloc_pd().unwrap();
    let (cq, _) = e.create_cq(64, 0).unwrap();
    Fixture { e, pd, cq }
}

pub fn caps() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 64,
    }
}

impl Fixture {
    pub fn init_attr(&self, ty: QpType, srq: Option<SrqId>) -> QpInitAttr {
        QpInitAttr {
            send_cq: self.cq,
            recv_cq: self.cq,
            srq,
            cap: caps(),
            qp_type: ty as u32,
            sq_sig_all: false,
        }
    }

    pub fn qp(&mut self, ty: QpType) -> QpId {
        let init = self.init_attr(ty, None);
        self.e.create_qp(self.pd, &init).unwrap().id
    }

    pub fn state(&self, qp: QpId) -> QpState {
        QpState::from_raw(self.e.query_qp(qp).unwrap().0.qp_state).unwrap()
    }

    /// Moves a QP through the textbook bringup from its current state up
    /// to `target`.
    pub fn bring_to(&mut self, qp: QpId, ty: QpType, target: QpState) {
        let current = self.state(qp);
        let steps = [
            (QpState::Init, init_step(ty)),
            (QpState::Rtr, rtr_step(ty)),
            (QpState::Rts, rts_step(ty)),
            (QpState::Sqd, (attr(QpState::Sqd), QpAttrMask::STATE)),
        ];
        for (state, (a, m)) in steps.into_iter().filter(|(s, _)| *s > current) {
            self.e.modify_qp(qp, &a, m).unwrap();
            if state == target {
                return;
            }
        }
    }

    pub fn mr(&mut self, len: u64, access: AccessFlags) -> (u64, u32) {
        let addr = 0x10_0000;
        let key = self
            .e
            .reg_mr(self.pd, addr, len, addr, access.bits())
            .unwrap()
            .key;
        (addr, key)
    }
}

pub fn attr(state: QpState) -> QpAttr {
    QpAttr {
        qp_state: state as u32,
        ..QpAttr::default()
    }
}

pub fn av() -> AhAttr {
    AhAttr {
        grh: GlobalRoute {
            dgid: Gid::from_ipv4(Ipv4Addr::LOCALHOST),
            flow_label: 0,
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
        },
        is_global: true,
        port_num: 1,
        ..AhAttr::default()
    }
}

pub fn init_step(ty: QpType) -> (QpAttr, QpAttrMask) {
    let a = QpAttr {
        port_num: 1,
        pkey_index: 0,
        qkey: 0x1111_1111,
        qp_access_flags: AccessFlags::REMOTE_WRITE.bits(),
        ..attr(QpState::Init)
    };
    let m = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT;
    let extra = if ty == QpType::Ud {
        QpAttrMask::QKEY
    } else {
        QpAttrMask::ACCESS_FLAGS
    };
    (a, m | extra)
}

pub fn rtr_step(ty: QpType) -> (QpAttr, QpAttrMask) {
    let a = QpAttr {
        path_mtu: Mtu::Mtu1024 as u32,
        dest_qp_num: 0x1234,
        rq_psn: 0x00AB_CDEF,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 12,
        ah_attr: av(),
        ..attr(QpState::Rtr)
    };
    let m = match ty {
        QpType::Ud => QpAttrMask::STATE,
        QpType::Uc => {
            QpAttrMask::STATE
                | QpAttrMask::AV
                | QpAttrMask::PATH_MTU
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN
        }
        QpType::Rc => {
            QpAttrMask::STATE
                | QpAttrMask::AV
                | QpAttrMask::PATH_MTU
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN
                | QpAttrMask::MAX_DEST_RD_ATOMIC
                | QpAttrMask::MIN_RNR_TIMER
        }
    };
    (a, m)
}

pub fn rts_step(ty: QpType) -> (QpAttr, QpAttrMask) {
    let a = QpAttr {
        sq_psn: 0x0012_3456,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 4,
        ..attr(QpState::Rts)
    };
    let m = match ty {
        QpType::Rc => {
            QpAttrMask::STATE
                | QpAttrMask::SQ_PSN
                | QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::MAX_QP_RD_ATOMIC
        }
        _ => QpAttrMask::STATE | QpAttrMask::SQ_PSN,
    };
    (a, m)
}
