//! Attribute masks of `ibv_modify_qp` and `ibv_modify_srq`, with the bit
//! values of `<infiniband/verbs.h>`.

bitflags::bitflags! {
    /// `enum ibv_qp_attr_mask`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct QpAttrMask: u32 {
        /// IBV_QP_STATE
        const STATE = 1 << 0;
        /// IBV_QP_CUR_STATE
        const CUR_STATE = 1 << 1;
        /// IBV_QP_EN_SQD_ASYNC_NOTIFY
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// IBV_QP_ACCESS_FLAGS
        const ACCESS_FLAGS = 1 << 3;
        /// IBV_QP_PKEY_INDEX
        const PKEY_INDEX = 1 << 4;
        /// IBV_QP_PORT
        const PORT = 1 << 5;
        /// IBV_QP_QKEY
        const QKEY = 1 << 6;
        /// IBV_QP_AV
        const AV = 1 << 7;
        /// IBV_QP_PATH_MTU
        const PATH_MTU = 1 << 8;
        /// IBV_QP_TIMEOUT
        const TIMEOUT = 1 << 9;
        /// IBV_QP_RETRY_CNT
        const RETRY_CNT = 1 << 10;
        /// IBV_QP_RNR_RETRY
        const RNR_RETRY = 1 << 11;
        /// IBV_QP_RQ_PSN
        const RQ_PSN = 1 << 12;
        /// IBV_QP_MAX_QP_RD_ATOMIC
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// IBV_QP_ALT_PATH
        const ALT_PATH = 1 << 14;
        /// IBV_QP_MIN_RNR_TIMER
        const MIN_RNR_TIMER = 1 << 15;
        /// IBV_QP_SQ_PSN
        const SQ_PSN = 1 << 16;
        /// IBV_QP_MAX_DEST_RD_ATOMIC
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// IBV_QP_PATH_MIG_STATE
        const PATH_MIG_STATE = 1 << 18;
        /// IBV_QP_CAP
        const CAP = 1 << 19;
        /// IBV_QP_DEST_QPN
        const DEST_QPN = 1 << 20;
        /// IBV_QP_RATE_LIMIT
        const RATE_LIMIT = 1 << 25;
    }
}

impl QpAttrMask {
    /// The `IBV_QP_*` name of a single bit, as written in docs/conformance.md.
    pub fn bit_name(bit: QpAttrMask) -> Option<&'static str> {
        QP_MASK_NAMES
            .iter()
            .find(|(b, _)| *b == bit)
            .map(|(_, name)| *name)
    }

    /// Parses one `IBV_QP_*` name.
    pub fn from_bit_name(name: &str) -> Option<QpAttrMask> {
        QP_MASK_NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(b, _)| *b)
    }
}

const QP_MASK_NAMES: [(QpAttrMask, &str); 22] = [
    (QpAttrMask::STATE, "IBV_QP_STATE"),
    (QpAttrMask::CUR_STATE, "IBV_QP_CUR_STATE"),
    (
        QpAttrMask::EN_SQD_ASYNC_NOTIFY,
        "IBV_QP_EN_SQD_ASYNC_NOTIFY",
    ),
    (QpAttrMask::ACCESS_FLAGS, "IBV_QP_ACCESS_FLAGS"),
    (QpAttrMask::PKEY_INDEX, "IBV_QP_PKEY_INDEX"),
    (QpAttrMask::PORT, "IBV_QP_PORT"),
    (QpAttrMask::QKEY, "IBV_QP_QKEY"),
    (QpAttrMask::AV, "IBV_QP_AV"),
    (QpAttrMask::PATH_MTU, "IBV_QP_PATH_MTU"),
    (QpAttrMask::TIMEOUT, "IBV_QP_TIMEOUT"),
    (QpAttrMask::RETRY_CNT, "IBV_QP_RETRY_CNT"),
    (QpAttrMask::RNR_RETRY, "IBV_QP_RNR_RETRY"),
    (QpAttrMask::RQ_PSN, "IBV_QP_RQ_PSN"),
    (QpAttrMask::MAX_QP_RD_ATOMIC, "IBV_QP_MAX_QP_RD_ATOMIC"),
    (QpAttrMask::ALT_PATH, "IBV_QP_ALT_PATH"),
    (QpAttrMask::MIN_RNR_TIMER, "IBV_QP_MIN_RNR_TIMER"),
    (QpAttrMask::SQ_PSN, "IBV_QP_SQ_PSN"),
    (QpAttrMask::MAX_DEST_RD_ATOMIC, "IBV_QP_MAX_DEST_RD_ATOMIC"),
    (QpAttrMask::PATH_MIG_STATE, "IBV_QP_PATH_MIG_STATE"),
    (QpAttrMask::CAP, "IBV_QP_CAP"),
    (QpAttrMask::DEST_QPN, "IBV_QP_DEST_QPN"),
    (QpAttrMask::RATE_LIMIT, "IBV_QP_RATE_LIMIT"),
];

bitflags::bitflags! {
    /// `enum ibv_srq_attr_mask`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SrqAttrMask: u32 {
        /// IBV_SRQ_MAX_WR: resize the SRQ.
        const MAX_WR = 1 << 0;
        /// IBV_SRQ_LIMIT: arm the low-watermark event.
        const LIMIT = 1 << 1;
    }
}
