//! The order of the numbers in the executor's lines
//! (tests/conformance/verbs_ops.h): an address vector is 12 numbers, a
//! QP's attributes 22 numbers and then its address vector, capacities 5.
//! Written once here for both directions, arguments and answers.

use softverbs_engine::{AhAttr, Gid, GlobalRoute, QpAttr, QpCap};

/// Numbers of an address vector.
pub const AV_LEN: usize = 12;
/// Numbers of a QP's attributes before its address vector.
pub const QP_ATTR_LEN: usize = 22;
/// Numbers of a capacity set.
pub const CAP_LEN: usize = 5;
/// Where max_rd_atomic is among a QP's attributes (max_dest_rd_atomic
/// follows).
pub const RD_ATOMIC: usize = 12;

/// An address vector as arguments.
pub fn av_args(av: &AhAttr) -> Vec<i64> {
    let g = &av.grh;
    let (hi, lo) = g.dgid.0.split_at(8);
    let half = |b: &[u8]| u64::from_be_bytes(b.try_into().expect("8 bytes")) as i64;
    vec![
        av.dlid.into(),
        av.sl.into(),
        av.src_path_bits.into(),
        av.static_rate.into(),
        i64::from(av.is_global),
        av.port_num.into(),
        g.flow_label.into(),
        g.sgid_index.into(),
        g.hop_limit.into(),
        g.traffic_class.into(),
        half(hi),
        half(lo),
    ]
}

/// An address vector from 12 numbers (truncated as C stores them).
pub fn av_from(n: &[i64]) -> AhAttr {
    let mut dgid = [0u8; 16];
    dgid[..8].copy_from_slice(&(n[10] as u64).to_be_bytes());
    dgid[8..].copy_from_slice(&(n[11] as u64).to_be_bytes());
    AhAttr {
        grh: GlobalRoute {
            dgid: Gid(dgid),
            flow_label: n[6] as u32,
            sgid_index: n[7] as u8,
            hop_limit: n[8] as u8,
            traffic_class: n[9] as u8,
        },
        dlid: n[0] as u16,
        sl: n[1] as u8,
        src_path_bits: n[2] as u8,
        static_rate: n[3] as u8,
        is_global: n[4] != 0,
        port_num: n[5] as u8,
    }
}

/// A QP's attributes as arguments: 22 numbers, then the address vector.
pub fn qp_attr_args(a: &QpAttr) -> Vec<i64> {
    let mut v: Vec<i64> = vec![
        a.qp_state.into(),
        a.cur_qp_state.into(),
        a.path_mtu.into(),
        a.path_mig_state.into(),
        a.qkey.into(),
        a.rq_psn.into(),
        a.sq_psn.into(),
        a.dest_qp_num.into(),
        a.qp_access_flags.into(),
        a.pkey_index.into(),
        a.alt_pkey_index.into(),
        a.en_sqd_async_notify.into(),
        a.max_rd_atomic.into(),
        a.max_dest_rd_atomic.into(),
        a.min_rnr_timer.into(),
        a.port_num.into(),
        a.timeout.into(),
        a.retry_cnt.into(),
        a.rnr_retry.into(),
        a.alt_port_num.into(),
        a.alt_timeout.into(),
        a.rate_limit.into(),
    ];
    v.extend(av_args(&a.ah_attr));
    v
}

/// A QP's attributes from 34 numbers (a query answer's first ones).
pub fn qp_attr_from(n: &[i64]) -> QpAttr {
    QpAttr {
        qp_state: n[0] as u32,
        cur_qp_state: n[1] as u32,
        path_mtu: n[2] as u32,
        path_mig_state: n[3] as u32,
        qkey: n[4] as u32,
        rq_psn: n[5] as u32,
        sq_psn: n[6] as u32,
        dest_qp_num: n[7] as u32,
        qp_access_flags: n[8] as u32,
        pkey_index: n[9] as u16,
        alt_pkey_index: n[10] as u16,
        en_sqd_async_notify: n[11] as u8,
        max_rd_atomic: n[12] as u8,
        max_dest_rd_atomic: n[13] as u8,
        min_rnr_timer: n[14] as u8,
        port_num: n[15] as u8,
        timeout: n[16] as u8,
        retry_cnt: n[17] as u8,
        rnr_retry: n[18] as u8,
        alt_port_num: n[19] as u8,
        alt_timeout: n[20] as u8,
        rate_limit: n[21] as u32,
        ah_attr: av_from(&n[QP_ATTR_LEN..QP_ATTR_LEN + AV_LEN]),
        ..QpAttr::default()
    }
}

/// Capacities as arguments.
pub fn cap_args(c: &QpCap) -> Vec<i64> {
    [
        c.max_send_wr,
        c.max_recv_wr,
        c.max_send_sge,
        c.max_recv_sge,
        c.max_inline_data,
    ]
    .map(i64::from)
    .to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bringup::{valid_attr, valid_av};
    use softverbs_engine::QpState;

    #[test]
    fn attributes_survive_the_round_trip() {
        let mut attr = valid_attr(QpState::Init, QpState::Rtr);
        attr.ah_attr.grh.dgid = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 0xff]);
        let args = qp_attr_args(&attr);
        assert_eq!(args.len(), QP_ATTR_LEN + AV_LEN);
        assert_eq!(qp_attr_from(&args), attr);
        assert_eq!(av_from(&av_args(&valid_av())), valid_av());
    }
}
