//! Enum values and flags of verbs.h and driver.h (rdma-core v44), named
//! exactly as in C. Each constant has the type of the field or argument it
//! is used with: `u32` for most enums and flag sets, `c_int` for the enums
//! with negative members (`ibv_node_type`, `ibv_transport_type`), `u8` for
//! byte fields (`link_layer`, `verbs_match_ent.kind`), `u64` for 64-bit flag
//! fields (`wc_flags` of `ibv_cq_init_attr_ex`, `send_ops_flags`,
//! `device_cap_flags_ex`).

use core::ffi::c_int;

// ---- private ABI version --------------------------------------------------

/// The `IBVERBS_PRIVATE_` ABI this crate is declared for
/// (`verbs_register_driver_34`, `-rdmav34.so`).
pub const IBVERBS_PABI_VERSION: u32 = 34;

// ---- sysfs name sizes ------------------------------------------------------

pub const IBV_SYSFS_NAME_MAX: usize = 64;
pub const IBV_SYSFS_PATH_MAX: usize = 256;

// ---- enum ibv_gid_type (verbs.h) / ibv_gid_type_sysfs (driver.h) -----------

pub const IBV_GID_TYPE_IB: u32 = 0;
pub const IBV_GID_TYPE_ROCE_V1: u32 = 1;
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;
pub const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: u32 = 0;
pub const IBV_GID_TYPE_SYSFS_ROCE_V2: u32 = 1;

// ---- enum ibv_node_type ----------------------------------------------------

pub const IBV_NODE_UNKNOWN: c_int = -1;
pub const IBV_NODE_CA: c_int = 1;
pub const IBV_NODE_SWITCH: c_int = 2;
pub const IBV_NODE_ROUTER: c_int = 3;
pub const IBV_NODE_RNIC: c_int = 4;
pub const IBV_NODE_USNIC: c_int = 5;
pub const IBV_NODE_USNIC_UDP: c_int = 6;
pub const IBV_NODE_UNSPECIFIED: c_int = 7;

// ---- enum ibv_transport_type -----------------------------------------------

pub const IBV_TRANSPORT_UNKNOWN: c_int = -1;
pub const IBV_TRANSPORT_IB: c_int = 0;
pub const IBV_TRANSPORT_IWARP: c_int = 1;
pub const IBV_TRANSPORT_USNIC: c_int = 2;
pub const IBV_TRANSPORT_USNIC_UDP: c_int = 3;
pub const IBV_TRANSPORT_UNSPECIFIED: c_int = 4;

// ---- enum ibv_device_cap_flags (ibv_device_attr.device_cap_flags) ---------

pub const IBV_DEVICE_RESIZE_MAX_WR: u32 = 1;
pub const IBV_DEVICE_BAD_PKEY_CNTR: u32 = 1 << 1;
pub const IBV_DEVICE_BAD_QKEY_CNTR: u32 = 1 << 2;
pub const IBV_DEVICE_RAW_MULTI: u32 = 1 << 3;
pub const IBV_DEVICE_AUTO_PATH_MIG: u32 = 1 << 4;
pub const IBV_DEVICE_CHANGE_PHY_PORT: u32 = 1 << 5;
pub const IBV_DEVICE_UD_AV_PORT_ENFORCE: u32 = 1 << 6;
pub const IBV_DEVICE_CURR_QP_STATE_MOD: u32 = 1 << 7;
pub const IBV_DEVICE_SHUTDOWN_PORT: u32 = 1 << 8;
pub const IBV_DEVICE_INIT_TYPE: u32 = 1 << 9;
pub const IBV_DEVICE_PORT_ACTIVE_EVENT: u32 = 1 << 10;
pub const IBV_DEVICE_SYS_IMAGE_GUID: u32 = 1 << 11;
pub const IBV_DEVICE_RC_RNR_NAK_GEN: u32 = 1 << 12;
pub const IBV_DEVICE_SRQ_RESIZE: u32 = 1 << 13;
pub const IBV_DEVICE_N_NOTIFY_CQ: u32 = 1 << 14;
pub const IBV_DEVICE_MEM_WINDOW: u32 = 1 << 17;
pub const IBV_DEVICE_UD_IP_CSUM: u32 = 1 << 18;
pub const IBV_DEVICE_XRC: u32 = 1 << 20;
pub const IBV_DEVICE_MEM_MGT_EXTENSIONS: u32 = 1 << 21;
pub const IBV_DEVICE_MEM_WINDOW_TYPE_2A: u32 = 1 << 23;
pub const IBV_DEVICE_MEM_WINDOW_TYPE_2B: u32 = 1 << 24;
pub const IBV_DEVICE_RC_IP_CSUM: u32 = 1 << 25;
pub const IBV_DEVICE_RAW_IP_CSUM: u32 = 1 << 26;
pub const IBV_DEVICE_MANAGED_FLOW_STEERING: u32 = 1 << 29;
/// `ibv_device_attr_ex.device_cap_flags_ex` only.
pub const IBV_DEVICE_RAW_SCATTER_FCS: u64 = 1 << 34;
/// `ibv_device_attr_ex.device_cap_flags_ex` only.
pub const IBV_DEVICE_PCI_WRITE_END_PADDING: u64 = 1 << 36;

// ---- enum ibv_atomic_cap ---------------------------------------------------

pub const IBV_ATOMIC_NONE: u32 = 0;
pub const IBV_ATOMIC_HCA: u32 = 1;
pub const IBV_ATOMIC_GLOB: u32 = 2;

// ---- enum ibv_odp_transport_cap_bits / ibv_odp_general_caps ---------------

pub const IBV_ODP_SUPPORT_SEND: u32 = 1 << 0;
pub const IBV_ODP_SUPPORT_RECV: u32 = 1 << 1;
pub const IBV_ODP_SUPPORT_WRITE: u32 = 1 << 2;
pub const IBV_ODP_SUPPORT_READ: u32 = 1 << 3;
pub const IBV_ODP_SUPPORT_ATOMIC: u32 = 1 << 4;
pub const IBV_ODP_SUPPORT_SRQ_RECV: u32 = 1 << 5;
/// `ibv_odp_caps.general_caps` (u64).
pub const IBV_ODP_SUPPORT: u64 = 1 << 0;
/// `ibv_odp_caps.general_caps` (u64).
pub const IBV_ODP_SUPPORT_IMPLICIT: u64 = 1 << 1;

// ---- enum ibv_raw_packet_caps / ibv_tm_cap_flags ---------------------------

pub const IBV_RAW_PACKET_CAP_CVLAN_STRIPPING: u32 = 1 << 0;
pub const IBV_RAW_PACKET_CAP_SCATTER_FCS: u32 = 1 << 1;
pub const IBV_RAW_PACKET_CAP_IP_CSUM: u32 = 1 << 2;
pub const IBV_RAW_PACKET_CAP_DELAY_DROP: u32 = 1 << 3;
pub const IBV_TM_CAP_RC: u32 = 1 << 0;

// ---- enum ibv_mtu ----------------------------------------------------------

pub const IBV_MTU_256: u32 = 1;
pub const IBV_MTU_512: u32 = 2;
pub const IBV_MTU_1024: u32 = 3;
pub const IBV_MTU_2048: u32 = 4;
pub const IBV_MTU_4096: u32 = 5;

// ---- enum ibv_port_state ---------------------------------------------------

pub const IBV_PORT_NOP: u32 = 0;
pub const IBV_PORT_DOWN: u32 = 1;
pub const IBV_PORT_INIT: u32 = 2;
pub const IBV_PORT_ARMED: u32 = 3;
pub const IBV_PORT_ACTIVE: u32 = 4;
pub const IBV_PORT_ACTIVE_DEFER: u32 = 5;

// ---- link layer (ibv_port_attr.link_layer, a byte) -------------------------

pub const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

// ---- enum ibv_port_cap_flags / ibv_port_cap_flags2 -------------------------

pub const IBV_PORT_SM: u32 = 1 << 1;
pub const IBV_PORT_NOTICE_SUP: u32 = 1 << 2;
pub const IBV_PORT_TRAP_SUP: u32 = 1 << 3;
pub const IBV_PORT_OPT_IPD_SUP: u32 = 1 << 4;
pub const IBV_PORT_AUTO_MIGR_SUP: u32 = 1 << 5;
pub const IBV_PORT_SL_MAP_SUP: u32 = 1 << 6;
pub const IBV_PORT_MKEY_NVRAM: u32 = 1 << 7;
pub const IBV_PORT_PKEY_NVRAM: u32 = 1 << 8;
pub const IBV_PORT_LED_INFO_SUP: u32 = 1 << 9;
pub const IBV_PORT_SYS_IMAGE_GUID_SUP: u32 = 1 << 11;
pub const IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP: u32 = 1 << 12;
pub const IBV_PORT_EXTENDED_SPEEDS_SUP: u32 = 1 << 14;
pub const IBV_PORT_CAP_MASK2_SUP: u32 = 1 << 15;
pub const IBV_PORT_CM_SUP: u32 = 1 << 16;
pub const IBV_PORT_SNMP_TUNNEL_SUP: u32 = 1 << 17;
pub const IBV_PORT_REINIT_SUP: u32 = 1 << 18;
pub const IBV_PORT_DEVICE_MGMT_SUP: u32 = 1 << 19;
pub const IBV_PORT_VENDOR_CLASS_SUP: u32 = 1 << 20;
pub const IBV_PORT_DR_NOTICE_SUP: u32 = 1 << 21;
pub const IBV_PORT_CAP_MASK_NOTICE_SUP: u32 = 1 << 22;
pub const IBV_PORT_BOOT_MGMT_SUP: u32 = 1 << 23;
pub const IBV_PORT_LINK_LATENCY_SUP: u32 = 1 << 24;
pub const IBV_PORT_CLIENT_REG_SUP: u32 = 1 << 25;
pub const IBV_PORT_IP_BASED_GIDS: u32 = 1 << 26;
/// `ibv_port_attr.port_cap_flags2` is a u16, hence the u16 flags below.
pub const IBV_PORT_SET_NODE_DESC_SUP: u16 = 1 << 0;
pub const IBV_PORT_INFO_EXT_SUP: u16 = 1 << 1;
pub const IBV_PORT_VIRT_SUP: u16 = 1 << 2;
pub const IBV_PORT_SWITCH_PORT_STATE_TABLE_SUP: u16 = 1 << 3;
pub const IBV_PORT_LINK_WIDTH_2X_SUP: u16 = 1 << 4;
pub const IBV_PORT_LINK_SPEED_HDR_SUP: u16 = 1 << 5;
pub const IBV_PORT_LINK_SPEED_NDR_SUP: u16 = 1 << 10;

// ---- enum ibv_event_type ---------------------------------------------------

pub const IBV_EVENT_CQ_ERR: u32 = 0;
pub const IBV_EVENT_QP_FATAL: u32 = 1;
pub const IBV_EVENT_QP_REQ_ERR: u32 = 2;
pub const IBV_EVENT_QP_ACCESS_ERR: u32 = 3;
pub const IBV_EVENT_COMM_EST: u32 = 4;
pub const IBV_EVENT_SQ_DRAINED: u32 = 5;
pub const IBV_EVENT_PATH_MIG: u32 = 6;
pub const IBV_EVENT_PATH_MIG_ERR: u32 = 7;
pub const IBV_EVENT_DEVICE_FATAL: u32 = 8;
pub const IBV_EVENT_PORT_ACTIVE: u32 = 9;
pub const IBV_EVENT_PORT_ERR: u32 = 10;
pub const IBV_EVENT_LID_CHANGE: u32 = 11;
pub const IBV_EVENT_PKEY_CHANGE: u32 = 12;
pub const IBV_EVENT_SM_CHANGE: u32 = 13;
pub const IBV_EVENT_SRQ_ERR: u32 = 14;
pub const IBV_EVENT_SRQ_LIMIT_REACHED: u32 = 15;
pub const IBV_EVENT_QP_LAST_WQE_REACHED: u32 = 16;
pub const IBV_EVENT_CLIENT_REREGISTER: u32 = 17;
pub const IBV_EVENT_GID_CHANGE: u32 = 18;
pub const IBV_EVENT_WQ_FATAL: u32 = 19;

// ---- enum ibv_wc_status ----------------------------------------------------

pub const IBV_WC_SUCCESS: u32 = 0;
pub const IBV_WC_LOC_LEN_ERR: u32 = 1;
pub const IBV_WC_LOC_QP_OP_ERR: u32 = 2;
pub const IBV_WC_LOC_EEC_OP_ERR: u32 = 3;
pub const IBV_WC_LOC_PROT_ERR: u32 = 4;
pub const IBV_WC_WR_FLUSH_ERR: u32 = 5;
pub const IBV_WC_MW_BIND_ERR: u32 = 6;
pub const IBV_WC_BAD_RESP_ERR: u32 = 7;
pub const IBV_WC_LOC_ACCESS_ERR: u32 = 8;
pub const IBV_WC_REM_INV_REQ_ERR: u32 = 9;
pub const IBV_WC_REM_ACCESS_ERR: u32 = 10;
pub const IBV_WC_REM_OP_ERR: u32 = 11;
pub const IBV_WC_RETRY_EXC_ERR: u32 = 12;
pub const IBV_WC_RNR_RETRY_EXC_ERR: u32 = 13;
pub const IBV_WC_LOC_RDD_VIOL_ERR: u32 = 14;
pub const IBV_WC_REM_INV_RD_REQ_ERR: u32 = 15;
pub const IBV_WC_REM_ABORT_ERR: u32 = 16;
pub const IBV_WC_INV_EECN_ERR: u32 = 17;
pub const IBV_WC_INV_EEC_STATE_ERR: u32 = 18;
pub const IBV_WC_FATAL_ERR: u32 = 19;
pub const IBV_WC_RESP_TIMEOUT_ERR: u32 = 20;
pub const IBV_WC_GENERAL_ERR: u32 = 21;
pub const IBV_WC_TM_ERR: u32 = 22;
pub const IBV_WC_TM_RNDV_INCOMPLETE: u32 = 23;

// ---- enum ibv_wc_opcode ----------------------------------------------------

pub const IBV_WC_SEND: u32 = 0;
pub const IBV_WC_RDMA_WRITE: u32 = 1;
pub const IBV_WC_RDMA_READ: u32 = 2;
pub const IBV_WC_COMP_SWAP: u32 = 3;
pub const IBV_WC_FETCH_ADD: u32 = 4;
pub const IBV_WC_BIND_MW: u32 = 5;
pub const IBV_WC_LOCAL_INV: u32 = 6;
pub const IBV_WC_TSO: u32 = 7;
pub const IBV_WC_ATOMIC_WRITE: u32 = 9;
/// Receive opcodes have this bit set (`opcode & IBV_WC_RECV`).
pub const IBV_WC_RECV: u32 = 1 << 7;
pub const IBV_WC_RECV_RDMA_WITH_IMM: u32 = 129;
pub const IBV_WC_TM_ADD: u32 = 130;
pub const IBV_WC_TM_DEL: u32 = 131;
pub const IBV_WC_TM_SYNC: u32 = 132;
pub const IBV_WC_TM_RECV: u32 = 133;
pub const IBV_WC_TM_NO_TAG: u32 = 134;
pub const IBV_WC_DRIVER1: u32 = 135;
pub const IBV_WC_DRIVER2: u32 = 136;
pub const IBV_WC_DRIVER3: u32 = 137;

// ---- enum ibv_wc_flags (ibv_wc.wc_flags) -----------------------------------

pub const IBV_WC_IP_CSUM_OK_SHIFT: u32 = 2;
pub const IBV_WC_GRH: u32 = 1 << 0;
pub const IBV_WC_WITH_IMM: u32 = 1 << 1;
pub const IBV_WC_IP_CSUM_OK: u32 = 1 << IBV_WC_IP_CSUM_OK_SHIFT;
pub const IBV_WC_WITH_INV: u32 = 1 << 3;
pub const IBV_WC_TM_SYNC_REQ: u32 = 1 << 4;
pub const IBV_WC_TM_MATCH: u32 = 1 << 5;
pub const IBV_WC_TM_DATA_VALID: u32 = 1 << 6;

// ---- enum ibv_create_cq_wc_flags (ibv_cq_init_attr_ex.wc_flags, u64) -------

pub const IBV_WC_EX_WITH_BYTE_LEN: u64 = 1 << 0;
pub const IBV_WC_EX_WITH_IMM: u64 = 1 << 1;
pub const IBV_WC_EX_WITH_QP_NUM: u64 = 1 << 2;
pub const IBV_WC_EX_WITH_SRC_QP: u64 = 1 << 3;
pub const IBV_WC_EX_WITH_SLID: u64 = 1 << 4;
pub const IBV_WC_EX_WITH_SL: u64 = 1 << 5;
pub const IBV_WC_EX_WITH_DLID_PATH_BITS: u64 = 1 << 6;
pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: u64 = 1 << 7;
pub const IBV_WC_EX_WITH_CVLAN: u64 = 1 << 8;
pub const IBV_WC_EX_WITH_FLOW_TAG: u64 = 1 << 9;
pub const IBV_WC_EX_WITH_TM_INFO: u64 = 1 << 10;
pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK: u64 = 1 << 11;
pub const IBV_WC_STANDARD_FLAGS: u64 = IBV_WC_EX_WITH_BYTE_LEN
    | IBV_WC_EX_WITH_IMM
    | IBV_WC_EX_WITH_QP_NUM
    | IBV_WC_EX_WITH_SRC_QP
    | IBV_WC_EX_WITH_SLID
    | IBV_WC_EX_WITH_SL
    | IBV_WC_EX_WITH_DLID_PATH_BITS;
pub const IBV_CREATE_CQ_SUP_WC_FLAGS: u64 = IBV_WC_STANDARD_FLAGS
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
    | IBV_WC_EX_WITH_CVLAN
    | IBV_WC_EX_WITH_FLOW_TAG
    | IBV_WC_EX_WITH_TM_INFO
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;

// ---- enum ibv_cq_init_attr_mask / ibv_create_cq_attr_flags / ibv_cq_attr_mask

pub const IBV_CQ_INIT_ATTR_MASK_FLAGS: u32 = 1 << 0;
pub const IBV_CQ_INIT_ATTR_MASK_PD: u32 = 1 << 1;
pub const IBV_CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1 << 0;
pub const IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: u32 = 1 << 1;
pub const IBV_CQ_ATTR_MODERATE: u32 = 1 << 0;
pub const IBV_CQ_ATTR_RESERVED: u32 = 1 << 1;

// ---- enum ibv_access_flags -------------------------------------------------

pub const IBV_ACCESS_LOCAL_WRITE: u32 = 1;
pub const IBV_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
pub const IBV_ACCESS_REMOTE_READ: u32 = 1 << 2;
pub const IBV_ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;
pub const IBV_ACCESS_MW_BIND: u32 = 1 << 4;
pub const IBV_ACCESS_ZERO_BASED: u32 = 1 << 5;
pub const IBV_ACCESS_ON_DEMAND: u32 = 1 << 6;
pub const IBV_ACCESS_HUGETLB: u32 = 1 << 7;
pub const IBV_ACCESS_OPTIONAL_FIRST: u32 = 1 << 20;
/// Bits 20..=29: optional access flags a provider may ignore.
pub const IBV_ACCESS_OPTIONAL_RANGE: u32 = 0x3ff0_0000;
pub const IBV_ACCESS_RELAXED_ORDERING: u32 = IBV_ACCESS_OPTIONAL_FIRST;

// ---- enum ibv_rereg_mr_flags -----------------------------------------------

pub const IBV_REREG_MR_CHANGE_TRANSLATION: u32 = 1 << 0;
pub const IBV_REREG_MR_CHANGE_PD: u32 = 1 << 1;
pub const IBV_REREG_MR_CHANGE_ACCESS: u32 = 1 << 2;
pub const IBV_REREG_MR_FLAGS_SUPPORTED: u32 = (IBV_REREG_MR_CHANGE_ACCESS << 1) - 1;

// ---- enum ibv_mw_type ------------------------------------------------------

pub const IBV_MW_TYPE_1: u32 = 1;
pub const IBV_MW_TYPE_2: u32 = 2;

// ---- enum ibv_xrcd_init_attr_mask ------------------------------------------

pub const IBV_XRCD_INIT_ATTR_FD: u32 = 1 << 0;
pub const IBV_XRCD_INIT_ATTR_OFLAGS: u32 = 1 << 1;
pub const IBV_XRCD_INIT_ATTR_RESERVED: u32 = 1 << 2;

// ---- enum ibv_srq_attr_mask / ibv_srq_type / ibv_srq_init_attr_mask --------

pub const IBV_SRQ_MAX_WR: u32 = 1 << 0;
pub const IBV_SRQ_LIMIT: u32 = 1 << 1;
pub const IBV_SRQT_BASIC: u32 = 0;
pub const IBV_SRQT_XRC: u32 = 1;
pub const IBV_SRQT_TM: u32 = 2;
pub const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1 << 0;
pub const IBV_SRQ_INIT_ATTR_PD: u32 = 1 << 1;
pub const IBV_SRQ_INIT_ATTR_XRCD: u32 = 1 << 2;
pub const IBV_SRQ_INIT_ATTR_CQ: u32 = 1 << 3;
pub const IBV_SRQ_INIT_ATTR_TM: u32 = 1 << 4;
pub const IBV_SRQ_INIT_ATTR_RESERVED: u32 = 1 << 5;

// ---- enum ibv_qp_type ------------------------------------------------------

pub const IBV_QPT_RC: u32 = 2;
pub const IBV_QPT_UC: u32 = 3;
pub const IBV_QPT_UD: u32 = 4;
pub const IBV_QPT_RAW_PACKET: u32 = 8;
pub const IBV_QPT_XRC_SEND: u32 = 9;
pub const IBV_QPT_XRC_RECV: u32 = 10;
pub const IBV_QPT_DRIVER: u32 = 0xff;

// ---- enum ibv_qp_init_attr_mask / ibv_qp_create_flags ----------------------

pub const IBV_QP_INIT_ATTR_PD: u32 = 1 << 0;
pub const IBV_QP_INIT_ATTR_XRCD: u32 = 1 << 1;
pub const IBV_QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
pub const IBV_QP_INIT_ATTR_MAX_TSO_HEADER: u32 = 1 << 3;
pub const IBV_QP_INIT_ATTR_IND_TABLE: u32 = 1 << 4;
pub const IBV_QP_INIT_ATTR_RX_HASH: u32 = 1 << 5;
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
pub const IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: u32 = 1 << 1;
pub const IBV_QP_CREATE_SCATTER_FCS: u32 = 1 << 8;
pub const IBV_QP_CREATE_CVLAN_STRIPPING: u32 = 1 << 9;
pub const IBV_QP_CREATE_SOURCE_QPN: u32 = 1 << 10;
pub const IBV_QP_CREATE_PCI_WRITE_END_PADDING: u32 = 1 << 11;

// ---- enum ibv_qp_create_send_ops_flags (send_ops_flags, u64) ---------------

pub const IBV_QP_EX_WITH_RDMA_WRITE: u64 = 1 << 0;
pub const IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
pub const IBV_QP_EX_WITH_SEND: u64 = 1 << 2;
pub const IBV_QP_EX_WITH_SEND_WITH_IMM: u64 = 1 << 3;
pub const IBV_QP_EX_WITH_RDMA_READ: u64 = 1 << 4;
pub const IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
pub const IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
pub const IBV_QP_EX_WITH_LOCAL_INV: u64 = 1 << 7;
pub const IBV_QP_EX_WITH_BIND_MW: u64 = 1 << 8;
pub const IBV_QP_EX_WITH_SEND_WITH_INV: u64 = 1 << 9;
pub const IBV_QP_EX_WITH_TSO: u64 = 1 << 10;
pub const IBV_QP_EX_WITH_ATOMIC_WRITE: u64 = 1 << 12;

// ---- enum ibv_qp_open_attr_mask --------------------------------------------

pub const IBV_QP_OPEN_ATTR_NUM: u32 = 1 << 0;
pub const IBV_QP_OPEN_ATTR_XRCD: u32 = 1 << 1;
pub const IBV_QP_OPEN_ATTR_CONTEXT: u32 = 1 << 2;
pub const IBV_QP_OPEN_ATTR_TYPE: u32 = 1 << 3;
pub const IBV_QP_OPEN_ATTR_RESERVED: u32 = 1 << 4;

// ---- enum ibv_qp_attr_mask (modify_qp / query_qp attr_mask) ----------------

pub const IBV_QP_STATE: u32 = 1 << 0;
pub const IBV_QP_CUR_STATE: u32 = 1 << 1;
pub const IBV_QP_EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
pub const IBV_QP_ACCESS_FLAGS: u32 = 1 << 3;
pub const IBV_QP_PKEY_INDEX: u32 = 1 << 4;
pub const IBV_QP_PORT: u32 = 1 << 5;
pub const IBV_QP_QKEY: u32 = 1 << 6;
pub const IBV_QP_AV: u32 = 1 << 7;
pub const IBV_QP_PATH_MTU: u32 = 1 << 8;
pub const IBV_QP_TIMEOUT: u32 = 1 << 9;
pub const IBV_QP_RETRY_CNT: u32 = 1 << 10;
pub const IBV_QP_RNR_RETRY: u32 = 1 << 11;
pub const IBV_QP_RQ_PSN: u32 = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: u32 = 1 << 13;
pub const IBV_QP_ALT_PATH: u32 = 1 << 14;
pub const IBV_QP_MIN_RNR_TIMER: u32 = 1 << 15;
pub const IBV_QP_SQ_PSN: u32 = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
pub const IBV_QP_PATH_MIG_STATE: u32 = 1 << 18;
pub const IBV_QP_CAP: u32 = 1 << 19;
pub const IBV_QP_DEST_QPN: u32 = 1 << 20;
pub const IBV_QP_RATE_LIMIT: u32 = 1 << 25;

// ---- enum ibv_qp_state -----------------------------------------------------

pub const IBV_QPS_RESET: u32 = 0;
pub const IBV_QPS_INIT: u32 = 1;
pub const IBV_QPS_RTR: u32 = 2;
pub const IBV_QPS_RTS: u32 = 3;
pub const IBV_QPS_SQD: u32 = 4;
pub const IBV_QPS_SQE: u32 = 5;
pub const IBV_QPS_ERR: u32 = 6;
pub const IBV_QPS_UNKNOWN: u32 = 7;

// ---- enum ibv_mig_state ----------------------------------------------------

pub const IBV_MIG_MIGRATED: u32 = 0;
pub const IBV_MIG_REARM: u32 = 1;
pub const IBV_MIG_ARMED: u32 = 2;

// ---- enum ibv_rate (ibv_ah_attr.static_rate) -------------------------------

pub const IBV_RATE_MAX: u32 = 0;
pub const IBV_RATE_2_5_GBPS: u32 = 2;
pub const IBV_RATE_10_GBPS: u32 = 3;
pub const IBV_RATE_25_GBPS: u32 = 15;
pub const IBV_RATE_100_GBPS: u32 = 16;

// ---- enum ibv_wr_opcode ----------------------------------------------------

pub const IBV_WR_RDMA_WRITE: u32 = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: u32 = 1;
pub const IBV_WR_SEND: u32 = 2;
pub const IBV_WR_SEND_WITH_IMM: u32 = 3;
pub const IBV_WR_RDMA_READ: u32 = 4;
pub const IBV_WR_ATOMIC_CMP_AND_SWP: u32 = 5;
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: u32 = 6;
pub const IBV_WR_LOCAL_INV: u32 = 7;
pub const IBV_WR_BIND_MW: u32 = 8;
pub const IBV_WR_SEND_WITH_INV: u32 = 9;
pub const IBV_WR_TSO: u32 = 10;
pub const IBV_WR_DRIVER1: u32 = 11;
pub const IBV_WR_ATOMIC_WRITE: u32 = 15;

// ---- enum ibv_send_flags ---------------------------------------------------

pub const IBV_SEND_FENCE: u32 = 1 << 0;
pub const IBV_SEND_SIGNALED: u32 = 1 << 1;
pub const IBV_SEND_SOLICITED: u32 = 1 << 2;
pub const IBV_SEND_INLINE: u32 = 1 << 3;
pub const IBV_SEND_IP_CSUM: u32 = 1 << 4;

// ---- enum ibv_parent_domain_init_attr_mask / ibv_values_mask ---------------

pub const IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS: u32 = 1 << 0;
pub const IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT: u32 = 1 << 1;
pub const IBV_VALUES_MASK_RAW_CLOCK: u32 = 1 << 0;
pub const IBV_VALUES_MASK_RESERVED: u32 = 1 << 1;

// ---- driver.h --------------------------------------------------------------

/// `__verbs_log` levels.
pub const VERBS_LOG_LEVEL_NONE: u32 = 0;
pub const VERBS_LOG_ERR: u32 = 1;
pub const VERBS_LOG_WARN: u32 = 2;
pub const VERBS_LOG_INFO: u32 = 3;
pub const VERBS_LOG_DEBUG: u32 = 4;

/// `enum verbs_xrcd_mask` (`verbs_xrcd.comp_mask`).
pub const VERBS_XRCD_HANDLE: u32 = 1 << 0;
pub const VERBS_XRCD_RESERVED: u32 = 1 << 1;

/// `enum verbs_qp_mask` (`verbs_qp.comp_mask`).
pub const VERBS_QP_XRCD: u32 = 1 << 0;
pub const VERBS_QP_EX: u32 = 1 << 1;

/// `enum ibv_mr_type` (`verbs_mr.mr_type`).
pub const IBV_MR_TYPE_MR: u32 = 0;
pub const IBV_MR_TYPE_NULL_MR: u32 = 1;
pub const IBV_MR_TYPE_IMPORTED_MR: u32 = 2;
pub const IBV_MR_TYPE_DMABUF_MR: u32 = 3;

/// `verbs_match_ent.kind`.
pub const VERBS_MATCH_SENTINEL: u8 = 0;
pub const VERBS_MATCH_PCI: u8 = 1;
pub const VERBS_MATCH_MODALIAS: u8 = 2;
pub const VERBS_MATCH_DRIVER_ID: u8 = 3;

/// `verbs_sysfs_dev.flags`.
pub const VSYSFS_READ_MODALIAS: u32 = 1 << 0;
pub const VSYSFS_READ_NODE_GUID: u32 = 1 << 1;
