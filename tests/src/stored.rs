//! What a successful `ibv_modify_qp` stores, and which stored values
//! `ibv_query_qp` must return. Seed 003: attribute values are valid once
//! set by `ibv_modify_qp`, so only the fields of bits that were ever set are
//! compared; the rest may read as anything.

use crate::device::QPN_MAX;
use softverbs_engine::{QpAttr, QpAttrMask as M};

/// The attributes set on a QP so far and which bits set them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoredAttrs {
    values: QpAttr,
    set: M,
}

impl StoredAttrs {
    /// Stores the attributes `mask` names, normalised as the kernel does:
    /// PSNs are 24 bits (wider values masked) and en_sqd_async_notify is a
    /// flag.
    pub fn store(&mut self, attr: &QpAttr, mask: M) {
        let src = normalised(attr);
        for bit in mask.iter() {
            if copy_bit(&mut self.values, &src, bit) {
                self.set |= bit;
            }
        }
    }

    /// The fields that were set, every other field zero.
    pub fn view(&self) -> QpAttr {
        masked_view(&self.values, self.set)
    }

    /// The bits whose fields were set.
    pub fn set(&self) -> M {
        self.set
    }
}

/// The fields of `attr` that the bits in `set` name, every other field zero:
/// applied to a query result it keeps what the model can predict.
pub fn masked_view(attr: &QpAttr, set: M) -> QpAttr {
    let mut out = QpAttr::default();
    for bit in set.iter() {
        copy_bit(&mut out, attr, bit);
    }
    out
}

fn normalised(attr: &QpAttr) -> QpAttr {
    QpAttr {
        rq_psn: attr.rq_psn & QPN_MAX,
        sq_psn: attr.sq_psn & QPN_MAX,
        en_sqd_async_notify: u8::from(attr.en_sqd_async_notify != 0),
        ..*attr
    }
}

/// Copies the field(s) one mask bit sets; false for bits that set nothing
/// the model tracks (STATE and CUR_STATE are the state itself; ALT_PATH,
/// CAP and RATE_LIMIT never succeed on this device).
fn copy_bit(dst: &mut QpAttr, src: &QpAttr, bit: M) -> bool {
    match bit {
        M::EN_SQD_ASYNC_NOTIFY => dst.en_sqd_async_notify = src.en_sqd_async_notify,
        M::ACCESS_FLAGS => dst.qp_access_flags = src.qp_access_flags,
        M::PKEY_INDEX => dst.pkey_index = src.pkey_index,
        M::PORT => dst.port_num = src.port_num,
        M::QKEY => dst.qkey = src.qkey,
        M::AV => dst.ah_attr = src.ah_attr,
        M::PATH_MTU => dst.path_mtu = src.path_mtu,
        M::TIMEOUT => dst.timeout = src.timeout,
        M::RETRY_CNT => dst.retry_cnt = src.retry_cnt,
        M::RNR_RETRY => dst.rnr_retry = src.rnr_retry,
        M::RQ_PSN => dst.rq_psn = src.rq_psn,
        M::SQ_PSN => dst.sq_psn = src.sq_psn,
        M::MAX_QP_RD_ATOMIC => dst.max_rd_atomic = src.max_rd_atomic,
        M::MIN_RNR_TIMER => dst.min_rnr_timer = src.min_rnr_timer,
        M::MAX_DEST_RD_ATOMIC => dst.max_dest_rd_atomic = src.max_dest_rd_atomic,
        M::PATH_MIG_STATE => dst.path_mig_state = src.path_mig_state,
        M::DEST_QPN => dst.dest_qp_num = src.dest_qp_num,
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_named_fields_normalised() {
        let mut s = StoredAttrs::default();
        let attr = QpAttr {
            rq_psn: 0xABCD_EF12,
            sq_psn: 0x0100_0001,
            en_sqd_async_notify: 9,
            qkey: 7,
            ..QpAttr::default()
        };
        s.store(
            &attr,
            M::STATE | M::RQ_PSN | M::SQ_PSN | M::EN_SQD_ASYNC_NOTIFY,
        );
        let v = s.view();
        assert_eq!(
            (v.rq_psn, v.sq_psn, v.en_sqd_async_notify),
            (0xCD_EF12, 1, 1)
        );
        assert_eq!(v.qkey, 0, "QKEY was not in the mask");
        assert_eq!(s.set(), M::RQ_PSN | M::SQ_PSN | M::EN_SQD_ASYNC_NOTIFY);
    }
}
