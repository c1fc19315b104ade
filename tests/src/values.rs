//! The value checks of `ibv_modify_qp`: every attribute the mask names must
//! be acceptable to the device, else EINVAL (and nothing changes). Fields
//! the mask does not name are ignored, whatever they hold.

use crate::device::*;
use crate::errno::{require, Outcome, EINVAL, ENODATA};
use softverbs_engine::{AhAttr, QpAttr, QpAttrMask as M};

/// Checks the value of every attribute named in `mask`.
pub fn check_values(attr: &QpAttr, mask: M) -> Outcome {
    let checks = [
        (M::PORT, attr.port_num == PORT_NUM),
        (M::PKEY_INDEX, attr.pkey_index < PKEY_TBL_LEN),
        (M::PATH_MTU, (1..=MAX_PATH_MTU).contains(&attr.path_mtu)),
        (M::AV, av_valid(&attr.ah_attr)),
        // 5-bit and 3-bit fields of the wire protocol.
        (M::TIMEOUT, attr.timeout <= 31),
        (M::RETRY_CNT, attr.retry_cnt <= 7),
        (M::RNR_RETRY, attr.rnr_retry <= 7),
        (M::MIN_RNR_TIMER, attr.min_rnr_timer <= 31),
        (M::MAX_QP_RD_ATOMIC, attr.max_rd_atomic <= MAX_RD_ATOMIC),
        (
            M::MAX_DEST_RD_ATOMIC,
            attr.max_dest_rd_atomic <= MAX_DEST_RD_ATOMIC,
        ),
        (M::DEST_QPN, attr.dest_qp_num <= QPN_MAX),
        // No IBV_DEVICE_AUTO_PATH_MIG: no alternate path can be loaded and
        // the only migration state is MIGRATED.
        (M::ALT_PATH, false),
        (M::PATH_MIG_STATE, attr.path_mig_state == MIG_MIGRATED),
    ];
    let all_ok = checks.iter().all(|(bit, ok)| !mask.contains(*bit) || *ok);
    require(all_ok, EINVAL)
}

/// The source GID of an address vector with a GRH, resolved before
/// anything else of a modify with IBV_QP_AV or an AH create (the kernel's
/// `rdma_fill_sgid_attr`): another port or an index past the table is
/// EINVAL, an empty entry within it ENODATA.
pub fn sgid_check(ah: &AhAttr) -> Outcome {
    if !ah.is_global {
        return Ok(());
    }
    require(
        ah.port_num == PORT_NUM && ah.grh.sgid_index < GID_TBL_LEN,
        EINVAL,
    )?;
    require(ah.grh.sgid_index == POPULATED_SGID_INDEX, ENODATA)
}

/// An address vector the RoCE port accepts: its own port, a GRH (RoCE has
/// IBV_QPF_GRH_REQUIRED semantics, seed 000), a 4-bit SL, a 20-bit flow
/// label, a populated source GID and a non-zero destination GID.
pub fn av_valid(ah: &AhAttr) -> bool {
    ah.port_num == PORT_NUM
        && ah.is_global
        && ah.sl <= 15
        && ah.grh.flow_label <= 0xF_FFFF
        && ah.grh.sgid_index == POPULATED_SGID_INDEX
        && ah.grh.dgid.0 != [0; 16]
}
