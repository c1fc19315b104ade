//! Overriding one field of a textbook attribute structure with a raw
//! value: how a `verbs` input turns a valid `modify_qp` or `create_ah` into
//! one that is wrong in exactly one (or two) places.

use softverbs_engine::{AhAttr, Gid, QpAttr};

/// Number of [`QpAttr`] fields [`set_qp_field`] can set; selectors at or
/// past it leave the attributes alone.
pub const QP_FIELDS: u8 = 33;

/// Sets field `which` of `attr` to `v` (truncated to the field's width).
pub fn set_qp_field(attr: &mut QpAttr, which: u8, v: u32) {
    let b = v as u8;
    match which {
        0 => attr.qp_state = v,
        1 => attr.cur_qp_state = v,
        2 => attr.path_mtu = v,
        3 => attr.path_mig_state = v,
        4 => attr.qkey = v,
        5 => attr.rq_psn = v,
        6 => attr.sq_psn = v,
        7 => attr.dest_qp_num = v,
        8 => attr.qp_access_flags = v,
        9 => attr.cap.max_send_wr = v,
        10 => attr.cap.max_recv_wr = v,
        11 => attr.cap.max_send_sge = v,
        12 => attr.cap.max_recv_sge = v,
        13 => attr.cap.max_inline_data = v,
        14 => attr.pkey_index = v as u16,
        15 => attr.alt_pkey_index = v as u16,
        16 => attr.en_sqd_async_notify = b,
        17 => attr.max_rd_atomic = b,
        18 => attr.max_dest_rd_atomic = b,
        19 => attr.min_rnr_timer = b,
        20 => attr.port_num = b,
        21 => attr.timeout = b,
        22 => attr.retry_cnt = b,
        23 => attr.rnr_retry = b,
        24 => attr.alt_port_num = b,
        25 => attr.alt_timeout = b,
        26 => attr.rate_limit = v,
        27 => attr.sq_draining = b,
        28 => set_ah_field(&mut attr.ah_attr, (v >> 24) as u8, v & 0x00FF_FFFF),
        29 => set_ah_field(&mut attr.alt_ah_attr, (v >> 24) as u8, v & 0x00FF_FFFF),
        30 => attr.alt_ah_attr = attr.ah_attr,
        31 => attr.ah_attr.grh.dgid = dgid(v),
        32 => attr.ah_attr.port_num = b,
        _ => {}
    }
}

/// Number of [`AhAttr`] fields [`set_ah_field`] can set.
pub const AH_FIELDS: u8 = 11;

/// Sets field `which` of `ah` to `v` (truncated to the field's width).
pub fn set_ah_field(ah: &mut AhAttr, which: u8, v: u32) {
    let b = v as u8;
    match which {
        0 => ah.port_num = b,
        1 => ah.is_global = v & 1 == 1,
        2 => ah.grh.sgid_index = b,
        3 => ah.grh.dgid = dgid(v),
        4 => ah.sl = b,
        5 => ah.grh.flow_label = v,
        6 => ah.grh.hop_limit = b,
        7 => ah.grh.traffic_class = b,
        8 => ah.static_rate = b,
        9 => ah.dlid = v as u16,
        10 => ah.src_path_bits = b,
        _ => {}
    }
}

/// A GID from a raw value: zero, or an IPv4-mapped address.
fn dgid(v: u32) -> Gid {
    if v == 0 {
        Gid::ZERO
    } else {
        Gid::from_ipv4(v.into())
    }
}
