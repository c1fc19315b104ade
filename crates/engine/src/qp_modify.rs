//! `ibv_modify_qp` validation: the mask against the transition table, then
//! the value of every attribute the mask names. Validation is a pure
//! function of the QP and the request, so a failing call changes nothing
//! (ibv_modify_qp(3), NOTES: "none of the attributes will be modified").

use crate::attr_mask::QpAttrMask as M;
use crate::device::DeviceConfig;
use crate::error::{einval, ensure, eopnotsupp, VerbsResult};
use crate::keys::QPN_MAX;
use crate::mtu::Mtu;
use crate::qp::Qp;
use crate::qp_attr::{QpAttr, MIG_MIGRATED};
use crate::qp_state::QpState;
use crate::transition::mask_allowed;

/// Checks a modify request; returns the state the QP moves to.
pub(crate) fn validate(
    dev: &DeviceConfig,
    qp: &Qp,
    attr: &QpAttr,
    mask: M,
) -> VerbsResult<QpState> {
    // libibverbs and the kernel refuse any bit past IBV_QP_DEST_QPN before
    // anything else (IBV_QP_RATE_LIMIT has its own verb,
    // ibv_modify_qp_rate_limit).
    ensure(
        mask.bits() < M::DEST_QPN.bits() << 1,
        eopnotsupp("attr_mask has bits past IBV_QP_DEST_QPN"),
    )?;
    if mask.contains(M::AV) {
        attr.ah_attr.check_sgid(dev)?;
    }
    if mask.contains(M::CUR_STATE) {
        let claimed = QpState::from_raw(attr.cur_qp_state);
        ensure(
            claimed == Some(qp.state),
            einval("cur_qp_state does not match the QP's current state"),
        )?;
    }
    let next = if mask.contains(M::STATE) {
        QpState::from_raw(attr.qp_state).ok_or(einval("qp_state is not a valid state"))?
    } else {
        qp.state
    };
    mask_allowed(qp.state, next, qp.qp_type, mask).map_err(einval)?;
    // While SQD is still draining, the only way out is ERR (rxe
    // `__qp_chk_state`; IBTA: SQD attributes change once drained).
    let draining = qp.state == QpState::Sqd && qp.req.busy();
    ensure(
        !(mask.contains(M::STATE) && draining && next != QpState::Err),
        einval("the send queue is still draining"),
    )?;
    check_values(dev, qp, attr, mask)?;
    Ok(next)
}

/// Value checks of every attribute named in `mask`.
fn check_values(dev: &DeviceConfig, qp: &Qp, attr: &QpAttr, mask: M) -> VerbsResult<()> {
    let limits = &dev.limits;
    if mask.contains(M::PORT) {
        ensure(
            dev.port(attr.port_num).is_some(),
            einval("port_num is not a port of this device"),
        )?;
    }
    if mask.contains(M::PKEY_INDEX) {
        ensure(
            attr.pkey_index < limits.pkey_tbl_len,
            einval("pkey_index beyond the P_Key table"),
        )?;
    }
    if mask.contains(M::PATH_MTU) {
        let mtu = Mtu::from_raw(attr.path_mtu).ok_or(einval("path_mtu is not an ibv_mtu"))?;
        let port = if mask.contains(M::PORT) {
            attr.port_num
        } else {
            qp.attr.port_num
        };
        let max = dev.port_attr(port).map_or(Mtu::Mtu4096, |p| p.max_mtu);
        ensure(mtu <= max, einval("path_mtu above the port's max_mtu"))?;
    }
    if mask.contains(M::AV) {
        attr.ah_attr.validate(dev)?;
    }
    check_timers(attr, mask)?;
    check_rd_atomic(
        attr,
        mask,
        limits.max_qp_init_rd_atom,
        limits.max_qp_rd_atom,
    )?;
    if mask.contains(M::DEST_QPN) {
        ensure(
            attr.dest_qp_num <= QPN_MAX,
            einval("dest_qp_num wider than 24 bits"),
        )?;
    }
    check_paths(attr, mask)
}

/// Timer and retry fields are 5- and 3-bit fields on the wire.
fn check_timers(attr: &QpAttr, mask: M) -> VerbsResult<()> {
    let fields = [
        (M::TIMEOUT, attr.timeout, 31, "timeout above 31"),
        (M::RETRY_CNT, attr.retry_cnt, 7, "retry_cnt above 7"),
        (M::RNR_RETRY, attr.rnr_retry, 7, "rnr_retry above 7"),
        (
            M::MIN_RNR_TIMER,
            attr.min_rnr_timer,
            31,
            "min_rnr_timer above 31",
        ),
    ];
    for (bit, value, max, reason) in fields {
        ensure(!mask.contains(bit) || value <= max, einval(reason))?;
    }
    Ok(())
}

fn check_rd_atomic(attr: &QpAttr, mask: M, max_init: u32, max_dest: u32) -> VerbsResult<()> {
    ensure(
        !mask.contains(M::MAX_QP_RD_ATOMIC) || u32::from(attr.max_rd_atomic) <= max_init,
        einval("max_rd_atomic above device max_qp_init_rd_atom"),
    )?;
    ensure(
        !mask.contains(M::MAX_DEST_RD_ATOMIC) || u32::from(attr.max_dest_rd_atomic) <= max_dest,
        einval("max_dest_rd_atomic above device max_qp_rd_atom"),
    )
}

/// Alternate paths: the device does not advertise IBV_DEVICE_AUTO_PATH_MIG
/// and the kernel's core refuses alternate paths on RoCE ports, so
/// IBV_QP_ALT_PATH is EINVAL and the only migration state is MIGRATED.
fn check_paths(attr: &QpAttr, mask: M) -> VerbsResult<()> {
    ensure(
        !mask.contains(M::ALT_PATH),
        einval("alternate paths (APM) are not supported on this RoCE device"),
    )?;
    ensure(
        !mask.contains(M::PATH_MIG_STATE) || attr.path_mig_state == MIG_MIGRATED,
        einval("path_mig_state other than IBV_MIG_MIGRATED needs APM"),
    )
}

/// Copies the attributes `mask` names into the QP's stored attributes.
/// PSNs are 24 bits: wider values are masked, as the kernel's
/// `_ib_modify_qp` does for IB and RoCE ports.
pub(crate) fn store(stored: &mut QpAttr, attr: &QpAttr, mask: M) {
    let copy = |bit: M| mask.contains(bit);
    if copy(M::EN_SQD_ASYNC_NOTIFY) {
        stored.en_sqd_async_notify = u8::from(attr.en_sqd_async_notify != 0);
    }
    if copy(M::ACCESS_FLAGS) {
        stored.qp_access_flags = attr.qp_access_flags;
    }
    if copy(M::PKEY_INDEX) {
        stored.pkey_index = attr.pkey_index;
    }
    if copy(M::PORT) {
        stored.port_num = attr.port_num;
    }
    if copy(M::QKEY) {
        stored.qkey = attr.qkey;
    }
    if copy(M::AV) {
        stored.ah_attr = attr.ah_attr;
    }
    if copy(M::PATH_MTU) {
        stored.path_mtu = attr.path_mtu;
    }
    store_transport(stored, attr, mask);
}

/// The RC/UC transport fields.
fn store_transport(stored: &mut QpAttr, attr: &QpAttr, mask: M) {
    let copy = |bit: M| mask.contains(bit);
    if copy(M::TIMEOUT) {
        stored.timeout = attr.timeout;
    }
    if copy(M::RETRY_CNT) {
        stored.retry_cnt = attr.retry_cnt;
    }
    if copy(M::RNR_RETRY) {
        stored.rnr_retry = attr.rnr_retry;
    }
    if copy(M::RQ_PSN) {
        stored.rq_psn = attr.rq_psn & 0xFF_FFFF;
    }
    if copy(M::SQ_PSN) {
        stored.sq_psn = attr.sq_psn & 0xFF_FFFF;
    }
    if copy(M::MAX_QP_RD_ATOMIC) {
        stored.max_rd_atomic = attr.max_rd_atomic;
    }
    if copy(M::MIN_RNR_TIMER) {
        stored.min_rnr_timer = attr.min_rnr_timer;
    }
    if copy(M::MAX_DEST_RD_ATOMIC) {
        stored.max_dest_rd_atomic = attr.max_dest_rd_atomic;
    }
    if copy(M::PATH_MIG_STATE) {
        stored.path_mig_state = attr.path_mig_state;
    }
    if copy(M::DEST_QPN) {
        stored.dest_qp_num = attr.dest_qp_num;
    }
}
