//! Work completions (`struct ibv_wc`).

/// `enum ibv_wc_status` values the engine produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcStatus {
    /// IBV_WC_SUCCESS
    Success = 0,
    /// IBV_WC_LOC_LEN_ERR
    LocLenErr = 1,
    /// IBV_WC_LOC_QP_OP_ERR
    LocQpOpErr = 2,
    /// IBV_WC_LOC_EEC_OP_ERR (reliable datagram; only injected)
    LocEecOpErr = 3,
    /// IBV_WC_LOC_PROT_ERR
    LocProtErr = 4,
    /// IBV_WC_WR_FLUSH_ERR
    WrFlushErr = 5,
    /// IBV_WC_MW_BIND_ERR (only injected)
    MwBindErr = 6,
    /// IBV_WC_BAD_RESP_ERR
    BadRespErr = 7,
    /// IBV_WC_LOC_ACCESS_ERR
    LocAccessErr = 8,
    /// IBV_WC_REM_INV_REQ_ERR
    RemInvReqErr = 9,
    /// IBV_WC_REM_ACCESS_ERR
    RemAccessErr = 10,
    /// IBV_WC_REM_OP_ERR
    RemOpErr = 11,
    /// IBV_WC_RETRY_EXC_ERR
    RetryExcErr = 12,
    /// IBV_WC_RNR_RETRY_EXC_ERR
    RnrRetryExcErr = 13,
    /// IBV_WC_LOC_RDD_VIOL_ERR (reliable datagram; only injected)
    LocRddViolErr = 14,
    /// IBV_WC_REM_INV_RD_REQ_ERR
    RemInvRdReqErr = 15,
    /// IBV_WC_REM_ABORT_ERR (only injected)
    RemAbortErr = 16,
    /// IBV_WC_INV_EECN_ERR (reliable datagram; only injected)
    InvEecnErr = 17,
    /// IBV_WC_INV_EEC_STATE_ERR (reliable datagram; only injected)
    InvEecStateErr = 18,
    /// IBV_WC_FATAL_ERR
    FatalErr = 19,
    /// IBV_WC_RESP_TIMEOUT_ERR (only injected)
    RespTimeoutErr = 20,
    /// IBV_WC_GENERAL_ERR
    GeneralErr = 21,
    /// IBV_WC_TM_ERR (tag matching; only injected)
    TmErr = 22,
    /// IBV_WC_TM_RNDV_INCOMPLETE (tag matching; only injected)
    TmRndvIncomplete = 23,
}

impl WcStatus {
    /// Every status, in `enum ibv_wc_status` order.
    const ALL: [WcStatus; 24] = {
        use WcStatus::*;
        [
            Success,
            LocLenErr,
            LocQpOpErr,
            LocEecOpErr,
            LocProtErr,
            WrFlushErr,
            MwBindErr,
            BadRespErr,
            LocAccessErr,
            RemInvReqErr,
            RemAccessErr,
            RemOpErr,
            RetryExcErr,
            RnrRetryExcErr,
            LocRddViolErr,
            RemInvRdReqErr,
            RemAbortErr,
            InvEecnErr,
            InvEecStateErr,
            FatalErr,
            RespTimeoutErr,
            GeneralErr,
            TmErr,
            TmRndvIncomplete,
        ]
    };

    /// The status of an `enum ibv_wc_status` value.
    pub fn from_c(value: u32) -> Option<WcStatus> {
        WcStatus::ALL.get(value as usize).copied()
    }
}

/// `enum ibv_wc_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcOpcode {
    /// IBV_WC_SEND
    Send = 0,
    /// IBV_WC_RDMA_WRITE
    RdmaWrite = 1,
    /// IBV_WC_RDMA_READ
    RdmaRead = 2,
    /// IBV_WC_COMP_SWAP
    CompSwap = 3,
    /// IBV_WC_FETCH_ADD
    FetchAdd = 4,
    /// IBV_WC_BIND_MW
    BindMw = 5,
    /// IBV_WC_LOCAL_INV
    LocalInv = 6,
    /// IBV_WC_RECV
    Recv = 128,
    /// IBV_WC_RECV_RDMA_WITH_IMM
    RecvRdmaWithImm = 129,
}

impl WcOpcode {
    /// The completion opcode of a send-queue `ibv_wr_opcode`.
    pub fn of_send(opcode: u32) -> WcOpcode {
        use crate::wr::send_opcode::*;
        match opcode {
            RDMA_WRITE | RDMA_WRITE_WITH_IMM => WcOpcode::RdmaWrite,
            RDMA_READ => WcOpcode::RdmaRead,
            ATOMIC_CMP_AND_SWP => WcOpcode::CompSwap,
            ATOMIC_FETCH_AND_ADD => WcOpcode::FetchAdd,
            LOCAL_INV => WcOpcode::LocalInv,
            BIND_MW => WcOpcode::BindMw,
            _ => WcOpcode::Send,
        }
    }

    /// The opcode of an `enum ibv_wc_opcode` value.
    pub fn from_c(value: u32) -> Option<WcOpcode> {
        use WcOpcode::*;
        [
            Send,
            RdmaWrite,
            RdmaRead,
            CompSwap,
            FetchAdd,
            BindMw,
            LocalInv,
            Recv,
            RecvRdmaWithImm,
        ]
        .into_iter()
        .find(|o| *o as u32 == value)
    }
}

/// `enum ibv_wc_flags` bits.
pub mod wc_flags {
    /// IBV_WC_GRH: the first 40 bytes of the buffer hold a GRH.
    pub const GRH: u32 = 1 << 0;
    /// IBV_WC_WITH_IMM
    pub const WITH_IMM: u32 = 1 << 1;
    /// IBV_WC_WITH_INV
    pub const WITH_INV: u32 = 1 << 3;
}

/// `struct ibv_wc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The WR's wr_id.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// Operation (meaningful on success only, as in verbs).
    pub opcode: WcOpcode,
    /// Vendor error syndrome.
    pub vendor_err: u32,
    /// Bytes transferred.
    pub byte_len: u32,
    /// Immediate data (network order) or the invalidated rkey.
    pub imm_data_or_inv_rkey: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote QP number (UD).
    pub src_qp: u32,
    /// `ibv_wc_flags`.
    pub wc_flags: u32,
    /// P_Key index (UD).
    pub pkey_index: u16,
    /// `ibv_wc.sl`. RoCE has no service level; a UD receive reports
    /// mlx5's convention instead, the packet's network header type (2 for
    /// RoCEv2 over IPv4, else 0), which UCX 1.13 reads to find the IPv4
    /// header in the GRH area.
    pub sl: u8,
}

/// `ibv_wc.sl` of a UD receive whose packet travelled over IPv4.
pub const SL_ROCE_V2_IPV4: u8 = 2;

impl WorkCompletion {
    /// A flushed WR: status WR_FLUSH_ERR, nothing transferred.
    pub fn flushed(wr_id: u64, opcode: WcOpcode, qp_num: u32) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status: WcStatus::WrFlushErr,
            opcode,
            vendor_err: 0,
            byte_len: 0,
            imm_data_or_inv_rkey: 0,
            qp_num,
            src_qp: 0,
            wc_flags: 0,
            pkey_index: 0,
            sl: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::WcStatus;

    #[test]
    fn every_status_converts_from_its_c_value() {
        for value in 0..24 {
            assert_eq!(WcStatus::from_c(value).map(|s| s as u32), Some(value));
        }
        assert_eq!(WcStatus::from_c(24), None);
    }
}
