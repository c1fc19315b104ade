//! The attributes of a textbook RESET -> INIT -> RTR -> RTS bring-up, shared
//! by the packet target (which sets its QPs up with them) and the verb
//! sequence target (whose ModifyQp starts from them and then overrides
//! fields, so random inputs reach the connected states often).

use softverbs_engine::{AccessFlags, AhAttr, Gid, GlobalRoute, Mtu, QpAttr, QpAttrMask, QpType};

/// The Q_Key of every UD QP the targets set up.
pub const QKEY: u32 = 0x1111_1111;

/// Every remote right a QP can grant.
pub fn remote_rights() -> AccessFlags {
    AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC
}

/// An address vector to `dgid` through port 1, GID index 0.
pub fn av(dgid: Gid) -> AhAttr {
    AhAttr {
        grh: GlobalRoute {
            dgid,
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

/// RESET -> INIT.
pub fn init(ty: QpType) -> (QpAttr, QpAttrMask) {
    let attr = QpAttr {
        qp_state: 1,
        port_num: 1,
        qkey: QKEY,
        qp_access_flags: remote_rights().bits(),
        ..QpAttr::default()
    };
    let extra = match ty {
        QpType::Ud => QpAttrMask::QKEY,
        _ => QpAttrMask::ACCESS_FLAGS,
    };
    let mask = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | extra;
    (attr, mask)
}

/// INIT -> RTR, connected to `dest_qp` at `dgid`, expecting `rq_psn`.
pub fn rtr(ty: QpType, dest_qp: u32, dgid: Gid, rq_psn: u32) -> (QpAttr, QpAttrMask) {
    let attr = QpAttr {
        qp_state: 2,
        path_mtu: Mtu::Mtu1024 as u32,
        dest_qp_num: dest_qp,
        rq_psn,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        ah_attr: av(dgid),
        ..QpAttr::default()
    };
    let connected = QpAttrMask::AV | QpAttrMask::PATH_MTU | QpAttrMask::DEST_QPN;
    let mask = match ty {
        QpType::Ud => QpAttrMask::STATE,
        QpType::Uc => QpAttrMask::STATE | connected | QpAttrMask::RQ_PSN,
        QpType::Rc => {
            QpAttrMask::STATE
                | connected
                | QpAttrMask::RQ_PSN
                | QpAttrMask::MAX_DEST_RD_ATOMIC
                | QpAttrMask::MIN_RNR_TIMER
        }
    };
    (attr, mask)
}

/// RTR -> RTS, sending from `sq_psn`; short timers so that timeouts fire
/// within a fuzz run.
pub fn rts(ty: QpType, sq_psn: u32) -> (QpAttr, QpAttrMask) {
    let attr = QpAttr {
        qp_state: 3,
        sq_psn,
        timeout: 8,
        retry_cnt: 3,
        rnr_retry: 3,
        max_rd_atomic: 4,
        ..QpAttr::default()
    };
    let mask = match ty {
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
    (attr, mask)
}
