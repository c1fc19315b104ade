//! Types of `<infiniband/verbs.h>` (rdma-core v44), x86_64 layout.
//!
//! Big-endian C fields (`__be64`, `__be32`) are plain `u64`/`u32` holding the
//! bytes in network order. Pointers to types this crate does not declare
//! (flow, dm, counters, wq, ...) are `*mut c_void`.

use core::ffi::{c_char, c_int, c_uint, c_void};

use libc::{pthread_cond_t, pthread_mutex_t, timespec};

use super::{ffi_struct, ffi_union};
use super::{verbs_ex_private, IBV_SYSFS_NAME_MAX, IBV_SYSFS_PATH_MAX};

ffi_struct! {
    /// `global` member of [`ibv_gid`].
    pub struct ibv_gid_global {
        /// `__be64`.
        pub subnet_prefix: u64,
        /// `__be64`.
        pub interface_id: u64,
    }
}

ffi_union! {
    #[zeroed_by(raw)]
    /// `union ibv_gid`.
    pub union ibv_gid {
        pub raw: [u8; 16],
        pub global: ibv_gid_global,
    }
}

ffi_struct! {
    /// `struct ibv_gid_entry`.
    pub struct ibv_gid_entry {
        pub gid: ibv_gid,
        pub gid_index: u32,
        pub port_num: u32,
        /// `enum ibv_gid_type` (`IBV_GID_TYPE_*`).
        pub gid_type: u32,
        pub ndev_ifindex: u32,
    }

    /// `struct _ibv_device_ops`: obsolete, both members must stay NULL.
    pub struct _ibv_device_ops {
        pub _dummy1: Option<unsafe extern "C" fn(device: *mut ibv_device, cmd_fd: c_int) -> *mut ibv_context>,
        pub _dummy2: Option<unsafe extern "C" fn(context: *mut ibv_context)>,
    }

    /// `struct ibv_device`.
    pub struct ibv_device {
        pub _ops: _ibv_device_ops,
        /// `enum ibv_node_type` (`IBV_NODE_*`).
        pub node_type: c_int,
        /// `enum ibv_transport_type` (`IBV_TRANSPORT_*`).
        pub transport_type: c_int,
        pub name: [c_char; IBV_SYSFS_NAME_MAX],
        pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
        pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
        pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
    }

    /// `struct ibv_context_ops`: the public (mostly obsolete) ops table that
    /// verbs.h's inline data-path functions call; `verbs_set_ops` fills the
    /// data-path members from `verbs_context_ops`.
    pub struct ibv_context_ops {
        pub _compat_query_device: Option<unsafe extern "C" fn(context: *mut ibv_context, device_attr: *mut ibv_device_attr) -> c_int>,
        /// Last argument: `struct _compat_ibv_port_attr *`.
        pub _compat_query_port: Option<unsafe extern "C" fn(context: *mut ibv_context, port_num: u8, port_attr: *mut c_void) -> c_int>,
        pub _compat_alloc_pd: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_dealloc_pd: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_reg_mr: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_rereg_mr: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_dereg_mr: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub alloc_mw: Option<unsafe extern "C" fn(pd: *mut ibv_pd, type_: u32) -> *mut ibv_mw>,
        pub bind_mw: Option<unsafe extern "C" fn(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int>,
        pub dealloc_mw: Option<unsafe extern "C" fn(mw: *mut ibv_mw) -> c_int>,
        pub _compat_create_cq: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub poll_cq: Option<unsafe extern "C" fn(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int>,
        pub req_notify_cq: Option<unsafe extern "C" fn(cq: *mut ibv_cq, solicited_only: c_int) -> c_int>,
        pub _compat_cq_event: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_resize_cq: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_destroy_cq: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_create_srq: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_modify_srq: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_query_srq: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_destroy_srq: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub post_srq_recv: Option<unsafe extern "C" fn(srq: *mut ibv_srq, recv_wr: *mut ibv_recv_wr, bad_recv_wr: *mut *mut ibv_recv_wr) -> c_int>,
        pub _compat_create_qp: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_query_qp: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_modify_qp: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_destroy_qp: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub post_send: Option<unsafe extern "C" fn(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr) -> c_int>,
        pub post_recv: Option<unsafe extern "C" fn(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int>,
        pub _compat_create_ah: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_destroy_ah: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_attach_mcast: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_detach_mcast: Option<unsafe extern "C" fn() -> *mut c_void>,
        pub _compat_async_event: Option<unsafe extern "C" fn() -> *mut c_void>,
    }

    /// `struct ibv_context`.
    pub struct ibv_context {
        pub device: *mut ibv_device,
        pub ops: ibv_context_ops,
        pub cmd_fd: c_int,
        pub async_fd: c_int,
        pub num_comp_vectors: c_int,
        pub mutex: pthread_mutex_t,
        pub abi_compat: *mut c_void,
    }

    /// `struct ibv_device_attr`.
    pub struct ibv_device_attr {
        pub fw_ver: [c_char; 64],
        /// `__be64`.
        pub node_guid: u64,
        /// `__be64`.
        pub sys_image_guid: u64,
        pub max_mr_size: u64,
        pub page_size_cap: u64,
        pub vendor_id: u32,
        pub vendor_part_id: u32,
        pub hw_ver: u32,
        pub max_qp: c_int,
        pub max_qp_wr: c_int,
        /// `IBV_DEVICE_*` flags (the low 32 bits).
        pub device_cap_flags: c_uint,
        pub max_sge: c_int,
        pub max_sge_rd: c_int,
        pub max_cq: c_int,
        pub max_cqe: c_int,
        pub max_mr: c_int,
        pub max_pd: c_int,
        pub max_qp_rd_atom: c_int,
        pub max_ee_rd_atom: c_int,
        pub max_res_rd_atom: c_int,
        pub max_qp_init_rd_atom: c_int,
        pub max_ee_init_rd_atom: c_int,
        /// `enum ibv_atomic_cap` (`IBV_ATOMIC_*`).
        pub atomic_cap: u32,
        pub max_ee: c_int,
        pub max_rdd: c_int,
        pub max_mw: c_int,
        pub max_raw_ipv6_qp: c_int,
        pub max_raw_ethy_qp: c_int,
        pub max_mcast_grp: c_int,
        pub max_mcast_qp_attach: c_int,
        pub max_total_mcast_qp_attach: c_int,
        pub max_ah: c_int,
        pub max_fmr: c_int,
        pub max_map_per_fmr: c_int,
        pub max_srq: c_int,
        pub max_srq_wr: c_int,
        pub max_srq_sge: c_int,
        pub max_pkeys: u16,
        pub local_ca_ack_delay: u8,
        pub phys_port_cnt: u8,
    }

    /// `struct ibv_query_device_ex_input`.
    pub struct ibv_query_device_ex_input {
        pub comp_mask: u32,
    }

    /// `per_transport_caps` member of [`ibv_odp_caps`].
    pub struct ibv_odp_caps_per_transport_caps {
        pub rc_odp_caps: u32,
        pub uc_odp_caps: u32,
        pub ud_odp_caps: u32,
    }

    /// `struct ibv_odp_caps`.
    pub struct ibv_odp_caps {
        pub general_caps: u64,
        pub per_transport_caps: ibv_odp_caps_per_transport_caps,
    }

    /// `struct ibv_tso_caps`.
    pub struct ibv_tso_caps {
        pub max_tso: u32,
        pub supported_qpts: u32,
    }

    /// `struct ibv_rss_caps`.
    pub struct ibv_rss_caps {
        pub supported_qpts: u32,
        pub max_rwq_indirection_tables: u32,
        pub max_rwq_indirection_table_size: u32,
        pub rx_hash_fields_mask: u64,
        pub rx_hash_function: u8,
    }

    /// `struct ibv_packet_pacing_caps`.
    pub struct ibv_packet_pacing_caps {
        pub qp_rate_limit_min: u32,
        pub qp_rate_limit_max: u32,
        pub supported_qpts: u32,
    }

    /// `struct ibv_tm_caps`.
    pub struct ibv_tm_caps {
        pub max_rndv_hdr_size: u32,
        pub max_num_tags: u32,
        pub flags: u32,
        pub max_ops: u32,
        pub max_sge: u32,
    }

    /// `struct ibv_cq_moderation_caps`.
    pub struct ibv_cq_moderation_caps {
        pub max_cq_count: u16,
        pub max_cq_period: u16,
    }

    /// `struct ibv_pci_atomic_caps`.
    pub struct ibv_pci_atomic_caps {
        pub fetch_add: u16,
        pub swap: u16,
        pub compare_swap: u16,
    }

    /// `struct ibv_device_attr_ex` (400 bytes in v44).
    pub struct ibv_device_attr_ex {
        pub orig_attr: ibv_device_attr,
        pub comp_mask: u32,
        pub odp_caps: ibv_odp_caps,
        pub completion_timestamp_mask: u64,
        pub hca_core_clock: u64,
        pub device_cap_flags_ex: u64,
        pub tso_caps: ibv_tso_caps,
        pub rss_caps: ibv_rss_caps,
        pub max_wq_type_rq: u32,
        pub packet_pacing_caps: ibv_packet_pacing_caps,
        pub raw_packet_caps: u32,
        pub tm_caps: ibv_tm_caps,
        pub cq_mod_caps: ibv_cq_moderation_caps,
        pub max_dm_size: u64,
        pub pci_atomic_caps: ibv_pci_atomic_caps,
        pub xrc_odp_caps: u32,
        pub phys_port_cnt_ex: u32,
    }

    /// `struct ibv_port_attr`.
    pub struct ibv_port_attr {
        /// `enum ibv_port_state` (`IBV_PORT_NOP`..`IBV_PORT_ACTIVE_DEFER`).
        pub state: u32,
        /// `enum ibv_mtu` (`IBV_MTU_*`).
        pub max_mtu: u32,
        /// `enum ibv_mtu` (`IBV_MTU_*`).
        pub active_mtu: u32,
        pub gid_tbl_len: c_int,
        pub port_cap_flags: u32,
        pub max_msg_sz: u32,
        pub bad_pkey_cntr: u32,
        pub qkey_viol_cntr: u32,
        pub pkey_tbl_len: u16,
        pub lid: u16,
        pub sm_lid: u16,
        pub lmc: u8,
        pub max_vl_num: u8,
        pub sm_sl: u8,
        pub subnet_timeout: u8,
        pub init_type_reply: u8,
        pub active_width: u8,
        pub active_speed: u8,
        pub phys_state: u8,
        /// `IBV_LINK_LAYER_*`.
        pub link_layer: u8,
        pub flags: u8,
        pub port_cap_flags2: u16,
    }
}

ffi_union! {
    #[zeroed_by(cq)]
    /// `element` member of [`ibv_async_event`].
    pub union ibv_async_event_element {
        pub cq: *mut ibv_cq,
        pub qp: *mut ibv_qp,
        pub srq: *mut ibv_srq,
        /// `struct ibv_wq *`.
        pub wq: *mut c_void,
        pub port_num: c_int,
    }
}

ffi_struct! {
    /// `struct ibv_async_event`.
    pub struct ibv_async_event {
        pub element: ibv_async_event_element,
        /// `enum ibv_event_type` (`IBV_EVENT_*`).
        pub event_type: u32,
    }

    /// `struct ibv_pd`.
    pub struct ibv_pd {
        pub context: *mut ibv_context,
        pub handle: u32,
    }

    /// `struct ibv_td_init_attr`.
    pub struct ibv_td_init_attr {
        pub comp_mask: u32,
    }

    /// `struct ibv_td`.
    pub struct ibv_td {
        pub context: *mut ibv_context,
    }

    /// `struct ibv_xrcd_init_attr`.
    pub struct ibv_xrcd_init_attr {
        pub comp_mask: u32,
        pub fd: c_int,
        pub oflags: c_int,
    }

    /// `struct ibv_xrcd`.
    pub struct ibv_xrcd {
        pub context: *mut ibv_context,
    }

    /// `struct ibv_mr`.
    pub struct ibv_mr {
        pub context: *mut ibv_context,
        pub pd: *mut ibv_pd,
        pub addr: *mut c_void,
        pub length: usize,
        pub handle: u32,
        pub lkey: u32,
        pub rkey: u32,
    }

    /// `struct ibv_mw`.
    pub struct ibv_mw {
        pub context: *mut ibv_context,
        pub pd: *mut ibv_pd,
        pub rkey: u32,
        pub handle: u32,
        /// `enum ibv_mw_type` (`IBV_MW_TYPE_*`).
        pub type_: u32,
    }

    /// `struct ibv_mw_bind_info`.
    pub struct ibv_mw_bind_info {
        pub mr: *mut ibv_mr,
        pub addr: u64,
        pub length: u64,
        /// `IBV_ACCESS_*` flags.
        pub mw_access_flags: c_uint,
    }

    /// `struct ibv_mw_bind`.
    pub struct ibv_mw_bind {
        pub wr_id: u64,
        /// `IBV_SEND_*` flags.
        pub send_flags: c_uint,
        pub bind_info: ibv_mw_bind_info,
    }

    /// `struct ibv_global_route`.
    pub struct ibv_global_route {
        pub dgid: ibv_gid,
        pub flow_label: u32,
        pub sgid_index: u8,
        pub hop_limit: u8,
        pub traffic_class: u8,
    }

    /// `struct ibv_grh` (the 40 bytes a UD receive buffer starts with).
    pub struct ibv_grh {
        /// `__be32`.
        pub version_tclass_flow: u32,
        /// `__be16`.
        pub paylen: u16,
        pub next_hdr: u8,
        pub hop_limit: u8,
        pub sgid: ibv_gid,
        pub dgid: ibv_gid,
    }

    /// `struct ibv_ah_attr`.
    pub struct ibv_ah_attr {
        pub grh: ibv_global_route,
        pub dlid: u16,
        pub sl: u8,
        pub src_path_bits: u8,
        /// `enum ibv_rate`, stored in a byte.
        pub static_rate: u8,
        pub is_global: u8,
        pub port_num: u8,
    }

    /// `struct ibv_ah`.
    pub struct ibv_ah {
        pub context: *mut ibv_context,
        pub pd: *mut ibv_pd,
        pub handle: u32,
    }

    /// `struct ibv_srq_attr`.
    pub struct ibv_srq_attr {
        pub max_wr: u32,
        pub max_sge: u32,
        pub srq_limit: u32,
    }

    /// `struct ibv_srq_init_attr`.
    pub struct ibv_srq_init_attr {
        pub srq_context: *mut c_void,
        pub attr: ibv_srq_attr,
    }

    /// `struct ibv_tm_cap`.
    pub struct ibv_tm_cap {
        pub max_num_tags: u32,
        pub max_ops: u32,
    }

    /// `struct ibv_srq_init_attr_ex`.
    pub struct ibv_srq_init_attr_ex {
        pub srq_context: *mut c_void,
        pub attr: ibv_srq_attr,
        /// `IBV_SRQ_INIT_ATTR_*` flags.
        pub comp_mask: u32,
        /// `enum ibv_srq_type` (`IBV_SRQT_*`).
        pub srq_type: u32,
        pub pd: *mut ibv_pd,
        pub xrcd: *mut ibv_xrcd,
        pub cq: *mut ibv_cq,
        pub tm_cap: ibv_tm_cap,
    }

    /// `struct ibv_srq`.
    pub struct ibv_srq {
        pub context: *mut ibv_context,
        pub srq_context: *mut c_void,
        pub pd: *mut ibv_pd,
        pub handle: u32,
        pub mutex: pthread_mutex_t,
        pub cond: pthread_cond_t,
        pub events_completed: u32,
    }

    /// `struct ibv_rwq_ind_table`.
    pub struct ibv_rwq_ind_table {
        pub context: *mut ibv_context,
        pub ind_tbl_handle: c_int,
        pub ind_tbl_num: c_int,
        pub comp_mask: u32,
    }

    /// `struct ibv_qp_cap`.
    pub struct ibv_qp_cap {
        pub max_send_wr: u32,
        pub max_recv_wr: u32,
        pub max_send_sge: u32,
        pub max_recv_sge: u32,
        pub max_inline_data: u32,
    }

    /// `struct ibv_qp_init_attr`.
    pub struct ibv_qp_init_attr {
        pub qp_context: *mut c_void,
        pub send_cq: *mut ibv_cq,
        pub recv_cq: *mut ibv_cq,
        pub srq: *mut ibv_srq,
        pub cap: ibv_qp_cap,
        /// `enum ibv_qp_type` (`IBV_QPT_*`).
        pub qp_type: u32,
        pub sq_sig_all: c_int,
    }

    /// `struct ibv_rx_hash_conf`.
    pub struct ibv_rx_hash_conf {
        pub rx_hash_function: u8,
        pub rx_hash_key_len: u8,
        pub rx_hash_key: *mut u8,
        pub rx_hash_fields_mask: u64,
    }

    /// `struct ibv_qp_init_attr_ex`.
    pub struct ibv_qp_init_attr_ex {
        pub qp_context: *mut c_void,
        pub send_cq: *mut ibv_cq,
        pub recv_cq: *mut ibv_cq,
        pub srq: *mut ibv_srq,
        pub cap: ibv_qp_cap,
        /// `enum ibv_qp_type` (`IBV_QPT_*`).
        pub qp_type: u32,
        pub sq_sig_all: c_int,
        /// `IBV_QP_INIT_ATTR_*` flags.
        pub comp_mask: u32,
        pub pd: *mut ibv_pd,
        pub xrcd: *mut ibv_xrcd,
        /// `IBV_QP_CREATE_*` flags.
        pub create_flags: u32,
        pub max_tso_header: u16,
        pub rwq_ind_tbl: *mut ibv_rwq_ind_table,
        pub rx_hash_conf: ibv_rx_hash_conf,
        pub source_qpn: u32,
        /// `IBV_QP_EX_WITH_*` flags.
        pub send_ops_flags: u64,
    }

    /// `struct ibv_qp_open_attr`.
    pub struct ibv_qp_open_attr {
        pub comp_mask: u32,
        pub qp_num: u32,
        pub xrcd: *mut ibv_xrcd,
        pub qp_context: *mut c_void,
        /// `enum ibv_qp_type` (`IBV_QPT_*`).
        pub qp_type: u32,
    }

    /// `struct ibv_qp_attr`.
    pub struct ibv_qp_attr {
        /// `enum ibv_qp_state` (`IBV_QPS_*`).
        pub qp_state: u32,
        /// `enum ibv_qp_state` (`IBV_QPS_*`).
        pub cur_qp_state: u32,
        /// `enum ibv_mtu` (`IBV_MTU_*`).
        pub path_mtu: u32,
        /// `enum ibv_mig_state` (`IBV_MIG_*`).
        pub path_mig_state: u32,
        pub qkey: u32,
        pub rq_psn: u32,
        pub sq_psn: u32,
        pub dest_qp_num: u32,
        /// `IBV_ACCESS_*` flags.
        pub qp_access_flags: c_uint,
        pub cap: ibv_qp_cap,
        pub ah_attr: ibv_ah_attr,
        pub alt_ah_attr: ibv_ah_attr,
        pub pkey_index: u16,
        pub alt_pkey_index: u16,
        pub en_sqd_async_notify: u8,
        pub sq_draining: u8,
        pub max_rd_atomic: u8,
        pub max_dest_rd_atomic: u8,
        pub min_rnr_timer: u8,
        pub port_num: u8,
        pub timeout: u8,
        pub retry_cnt: u8,
        pub rnr_retry: u8,
        pub alt_port_num: u8,
        pub alt_timeout: u8,
        pub rate_limit: u32,
    }

    /// `struct ibv_qp_rate_limit_attr`.
    pub struct ibv_qp_rate_limit_attr {
        pub rate_limit: u32,
        pub max_burst_sz: u32,
        pub typical_pkt_sz: u16,
        pub comp_mask: u32,
    }

    /// `struct ibv_data_buf`.
    pub struct ibv_data_buf {
        pub addr: *mut c_void,
        pub length: usize,
    }

    /// `struct ibv_sge`.
    pub struct ibv_sge {
        pub addr: u64,
        pub length: u32,
        pub lkey: u32,
    }
}

ffi_union! {
    #[zeroed_by(imm_data)]
    /// Anonymous union of [`ibv_send_wr`] (field `u`).
    pub union ibv_send_wr_u {
        /// `__be32`, network byte order (opcodes `*_WITH_IMM`).
        pub imm_data: u32,
        /// Opcodes `*_INV`.
        pub invalidate_rkey: u32,
    }
}

ffi_struct! {
    /// `wr.rdma` of [`ibv_send_wr`].
    pub struct ibv_send_wr_wr_rdma {
        pub remote_addr: u64,
        pub rkey: u32,
    }

    /// `wr.atomic` of [`ibv_send_wr`].
    pub struct ibv_send_wr_wr_atomic {
        pub remote_addr: u64,
        pub compare_add: u64,
        pub swap: u64,
        pub rkey: u32,
    }

    /// `wr.ud` of [`ibv_send_wr`].
    pub struct ibv_send_wr_wr_ud {
        pub ah: *mut ibv_ah,
        pub remote_qpn: u32,
        pub remote_qkey: u32,
    }
}

ffi_union! {
    #[zeroed_by(atomic)]
    /// `wr` member of [`ibv_send_wr`].
    pub union ibv_send_wr_wr {
        pub rdma: ibv_send_wr_wr_rdma,
        pub atomic: ibv_send_wr_wr_atomic,
        pub ud: ibv_send_wr_wr_ud,
    }
}

ffi_struct! {
    /// `qp_type.xrc` of [`ibv_send_wr`].
    pub struct ibv_send_wr_qp_type_xrc {
        pub remote_srqn: u32,
    }
}

ffi_union! {
    #[zeroed_by(xrc)]
    /// `qp_type` member of [`ibv_send_wr`].
    pub union ibv_send_wr_qp_type {
        pub xrc: ibv_send_wr_qp_type_xrc,
    }
}

ffi_struct! {
    /// `bind_mw` of [`ibv_send_wr`] (second anonymous union, field `u2`).
    pub struct ibv_send_wr_u2_bind_mw {
        pub mw: *mut ibv_mw,
        pub rkey: u32,
        pub bind_info: ibv_mw_bind_info,
    }

    /// `tso` of [`ibv_send_wr`] (second anonymous union, field `u2`).
    pub struct ibv_send_wr_u2_tso {
        pub hdr: *mut c_void,
        pub hdr_sz: u16,
        pub mss: u16,
    }
}

ffi_union! {
    #[zeroed_by(bind_mw)]
    /// Second anonymous union of [`ibv_send_wr`] (field `u2`).
    pub union ibv_send_wr_u2 {
        pub bind_mw: ibv_send_wr_u2_bind_mw,
        pub tso: ibv_send_wr_u2_tso,
    }
}

ffi_struct! {
    /// `struct ibv_send_wr`.
    pub struct ibv_send_wr {
        pub wr_id: u64,
        pub next: *mut ibv_send_wr,
        pub sg_list: *mut ibv_sge,
        pub num_sge: c_int,
        /// `enum ibv_wr_opcode` (`IBV_WR_*`).
        pub opcode: u32,
        /// `IBV_SEND_*` flags.
        pub send_flags: c_uint,
        /// C: anonymous union `{ imm_data; invalidate_rkey; }`.
        pub u: ibv_send_wr_u,
        pub wr: ibv_send_wr_wr,
        pub qp_type: ibv_send_wr_qp_type,
        /// C: anonymous union `{ bind_mw; tso; }`.
        pub u2: ibv_send_wr_u2,
    }

    /// `struct ibv_recv_wr`.
    pub struct ibv_recv_wr {
        pub wr_id: u64,
        pub next: *mut ibv_recv_wr,
        pub sg_list: *mut ibv_sge,
        pub num_sge: c_int,
    }

    /// `struct ibv_qp`.
    pub struct ibv_qp {
        pub context: *mut ibv_context,
        pub qp_context: *mut c_void,
        pub pd: *mut ibv_pd,
        pub send_cq: *mut ibv_cq,
        pub recv_cq: *mut ibv_cq,
        pub srq: *mut ibv_srq,
        pub handle: u32,
        pub qp_num: u32,
        /// `enum ibv_qp_state` (`IBV_QPS_*`).
        pub state: u32,
        /// `enum ibv_qp_type` (`IBV_QPT_*`).
        pub qp_type: u32,
        pub mutex: pthread_mutex_t,
        pub cond: pthread_cond_t,
        pub events_completed: u32,
    }

    /// `struct ibv_qp_ex`: `qp_base` at offset 0, then the `ibv_wr_*`
    /// work-request builder members.
    pub struct ibv_qp_ex {
        pub qp_base: ibv_qp,
        pub comp_mask: u64,
        pub wr_id: u64,
        /// `IBV_SEND_*` flags.
        pub wr_flags: c_uint,
        pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, compare: u64, swap: u64)>,
        pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, add: u64)>,
        pub wr_bind_mw: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, mw: *mut ibv_mw, rkey: u32, bind_info: *const ibv_mw_bind_info)>,
        pub wr_local_inv: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, invalidate_rkey: u32)>,
        pub wr_rdma_read: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64)>,
        pub wr_rdma_write: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64)>,
        /// `imm_data` is `__be32`.
        pub wr_rdma_write_imm: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm_data: u32)>,
        pub wr_send: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
        /// `imm_data` is `__be32`.
        pub wr_send_imm: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, imm_data: u32)>,
        pub wr_send_inv: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, invalidate_rkey: u32)>,
        pub wr_send_tso: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, hdr: *mut c_void, hdr_sz: u16, mss: u16)>,
        pub wr_set_ud_addr: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32)>,
        pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, remote_srqn: u32)>,
        pub wr_set_inline_data: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize)>,
        pub wr_set_inline_data_list: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, num_buf: usize, buf_list: *const ibv_data_buf)>,
        pub wr_set_sge: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32)>,
        pub wr_set_sge_list: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge)>,
        pub wr_start: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
        pub wr_complete: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex) -> c_int>,
        pub wr_abort: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
        pub wr_atomic_write: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, atomic_wr: *const c_void)>,
    }

    /// `struct ibv_ece`.
    pub struct ibv_ece {
        pub vendor_id: u32,
        pub options: u32,
        pub comp_mask: u32,
    }

    /// `struct ibv_comp_channel`.
    pub struct ibv_comp_channel {
        pub context: *mut ibv_context,
        pub fd: c_int,
        pub refcnt: c_int,
    }

    /// `struct ibv_cq`.
    pub struct ibv_cq {
        pub context: *mut ibv_context,
        pub channel: *mut ibv_comp_channel,
        pub cq_context: *mut c_void,
        pub handle: u32,
        pub cqe: c_int,
        pub mutex: pthread_mutex_t,
        pub cond: pthread_cond_t,
        pub comp_events_completed: u32,
        pub async_events_completed: u32,
    }

    /// `struct ibv_poll_cq_attr`.
    pub struct ibv_poll_cq_attr {
        pub comp_mask: u32,
    }

    /// `struct ibv_wc_tm_info`.
    pub struct ibv_wc_tm_info {
        pub tag: u64,
        pub priv_: u32,
    }

    /// `struct ibv_cq_ex`: the fields of [`ibv_cq`], then the extended
    /// polling members.
    pub struct ibv_cq_ex {
        pub context: *mut ibv_context,
        pub channel: *mut ibv_comp_channel,
        pub cq_context: *mut c_void,
        pub handle: u32,
        pub cqe: c_int,
        pub mutex: pthread_mutex_t,
        pub cond: pthread_cond_t,
        pub comp_events_completed: u32,
        pub async_events_completed: u32,
        pub comp_mask: u32,
        /// `enum ibv_wc_status` (`IBV_WC_*`).
        pub status: u32,
        pub wr_id: u64,
        pub start_poll: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int>,
        pub next_poll: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> c_int>,
        pub end_poll: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex)>,
        /// Returns `enum ibv_wc_opcode`.
        pub read_opcode: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
        pub read_vendor_err: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
        pub read_byte_len: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
        /// Returns `__be32`.
        pub read_imm_data: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
        pub read_qp_num: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
        pub read_src_qp: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
        pub read_wc_flags: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> c_uint>,
        pub read_slid: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
        pub read_sl: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u8>,
        pub read_dlid_path_bits: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u8>,
        pub read_completion_ts: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u64>,
        pub read_cvlan: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u16>,
        pub read_flow_tag: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
        pub read_tm_info: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex, tm_info: *mut ibv_wc_tm_info)>,
        pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u64>,
    }

    /// `struct ibv_moderate_cq`.
    pub struct ibv_moderate_cq {
        pub cq_count: u16,
        pub cq_period: u16,
    }

    /// `struct ibv_modify_cq_attr`.
    pub struct ibv_modify_cq_attr {
        /// `IBV_CQ_ATTR_*` flags.
        pub attr_mask: u32,
        pub moderate: ibv_moderate_cq,
    }

    /// `struct ibv_cq_init_attr_ex`.
    pub struct ibv_cq_init_attr_ex {
        pub cqe: u32,
        pub cq_context: *mut c_void,
        pub channel: *mut ibv_comp_channel,
        pub comp_vector: u32,
        /// `IBV_WC_EX_WITH_*` flags.
        pub wc_flags: u64,
        /// `IBV_CQ_INIT_ATTR_MASK_*` flags.
        pub comp_mask: u32,
        /// `IBV_CREATE_CQ_ATTR_*` flags.
        pub flags: u32,
        pub parent_domain: *mut ibv_pd,
    }
}

ffi_union! {
    #[zeroed_by(imm_data)]
    /// Anonymous union of [`ibv_wc`] (field `u`).
    pub union ibv_wc_u {
        /// `__be32`, network byte order (when `wc_flags & IBV_WC_WITH_IMM`).
        pub imm_data: u32,
        /// When `wc_flags & IBV_WC_WITH_INV`.
        pub invalidated_rkey: u32,
    }
}

ffi_struct! {
    /// `struct ibv_wc`.
    pub struct ibv_wc {
        pub wr_id: u64,
        /// `enum ibv_wc_status` (`IBV_WC_SUCCESS`, ...).
        pub status: u32,
        /// `enum ibv_wc_opcode` (`IBV_WC_SEND`, ..., `IBV_WC_RECV`, ...).
        pub opcode: u32,
        pub vendor_err: u32,
        pub byte_len: u32,
        /// C: anonymous union `{ imm_data; invalidated_rkey; }`.
        pub u: ibv_wc_u,
        pub qp_num: u32,
        pub src_qp: u32,
        /// `IBV_WC_GRH`, `IBV_WC_WITH_IMM`, ... flags.
        pub wc_flags: c_uint,
        pub pkey_index: u16,
        pub slid: u16,
        pub sl: u8,
        pub dlid_path_bits: u8,
    }

    /// `struct ibv_parent_domain_init_attr`.
    pub struct ibv_parent_domain_init_attr {
        pub pd: *mut ibv_pd,
        pub td: *mut ibv_td,
        /// `IBV_PARENT_DOMAIN_INIT_ATTR_*` flags.
        pub comp_mask: u32,
        pub alloc: Option<unsafe extern "C" fn(pd: *mut ibv_pd, pd_context: *mut c_void, size: usize, alignment: usize, resource_type: u64) -> *mut c_void>,
        pub free: Option<unsafe extern "C" fn(pd: *mut ibv_pd, pd_context: *mut c_void, ptr: *mut c_void, resource_type: u64)>,
        pub pd_context: *mut c_void,
    }

    /// `struct ibv_values_ex`.
    pub struct ibv_values_ex {
        /// `IBV_VALUES_MASK_*` flags.
        pub comp_mask: u32,
        pub raw_clock: timespec,
    }

    /// `struct verbs_context` (public in verbs.h): the extended ops, `priv`,
    /// `sz`, and [`ibv_context`] last. libibverbs fills these members from
    /// `verbs_context_ops` in `verbs_set_ops`.
    pub struct verbs_context {
        pub query_port: Option<unsafe extern "C" fn(context: *mut ibv_context, port_num: u8, port_attr: *mut ibv_port_attr, port_attr_len: usize) -> c_int>,
        /// `advice` is `enum ibv_advise_mr_advice`.
        pub advise_mr: Option<unsafe extern "C" fn(pd: *mut ibv_pd, advice: u32, flags: u32, sg_list: *mut ibv_sge, num_sges: u32) -> c_int>,
        pub alloc_null_mr: Option<unsafe extern "C" fn(pd: *mut ibv_pd) -> *mut ibv_mr>,
        /// Pointer arguments: `ibv_counters *`.
        pub read_counters: Option<unsafe extern "C" fn(counters: *mut c_void, counters_value: *mut u64, ncounters: u32, flags: u32) -> c_int>,
        /// Pointer arguments: `ibv_counters *`, `ibv_counter_attach_attr *`, `ibv_flow *`.
        pub attach_counters_point_flow: Option<unsafe extern "C" fn(counters: *mut c_void, attr: *mut c_void, flow: *mut c_void) -> c_int>,
        /// Returns `ibv_counters *`; `init_attr` is `ibv_counters_init_attr *`.
        pub create_counters: Option<unsafe extern "C" fn(context: *mut ibv_context, init_attr: *mut c_void) -> *mut c_void>,
        pub destroy_counters: Option<unsafe extern "C" fn(counters: *mut c_void) -> c_int>,
        /// `dm` is `ibv_dm *`.
        pub reg_dm_mr: Option<unsafe extern "C" fn(pd: *mut ibv_pd, dm: *mut c_void, dm_offset: u64, length: usize, access: c_uint) -> *mut ibv_mr>,
        /// Returns `ibv_dm *`; `attr` is `ibv_alloc_dm_attr *`.
        pub alloc_dm: Option<unsafe extern "C" fn(context: *mut ibv_context, attr: *mut c_void) -> *mut c_void>,
        pub free_dm: Option<unsafe extern "C" fn(dm: *mut c_void) -> c_int>,
        /// `ibv_flow_action *`, `ibv_flow_action_esp_attr *`.
        pub modify_flow_action_esp: Option<unsafe extern "C" fn(action: *mut c_void, attr: *mut c_void) -> c_int>,
        pub destroy_flow_action: Option<unsafe extern "C" fn(action: *mut c_void) -> c_int>,
        /// Returns `ibv_flow_action *`; `attr` is `ibv_flow_action_esp_attr *`.
        pub create_flow_action_esp: Option<unsafe extern "C" fn(context: *mut ibv_context, attr: *mut c_void) -> *mut c_void>,
        pub modify_qp_rate_limit: Option<unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_rate_limit_attr) -> c_int>,
        pub alloc_parent_domain: Option<unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_parent_domain_init_attr) -> *mut ibv_pd>,
        pub dealloc_td: Option<unsafe extern "C" fn(td: *mut ibv_td) -> c_int>,
        pub alloc_td: Option<unsafe extern "C" fn(context: *mut ibv_context, init_attr: *mut ibv_td_init_attr) -> *mut ibv_td>,
        pub modify_cq: Option<unsafe extern "C" fn(cq: *mut ibv_cq, attr: *mut ibv_modify_cq_attr) -> c_int>,
        /// `op`/`bad_op` are `ibv_ops_wr *` / `ibv_ops_wr **`.
        pub post_srq_ops: Option<unsafe extern "C" fn(srq: *mut ibv_srq, op: *mut c_void, bad_op: *mut *mut c_void) -> c_int>,
        pub destroy_rwq_ind_table: Option<unsafe extern "C" fn(rwq_ind_table: *mut ibv_rwq_ind_table) -> c_int>,
        /// `init_attr` is `ibv_rwq_ind_table_init_attr *`.
        pub create_rwq_ind_table: Option<unsafe extern "C" fn(context: *mut ibv_context, init_attr: *mut c_void) -> *mut ibv_rwq_ind_table>,
        /// `wq` is `ibv_wq *`.
        pub destroy_wq: Option<unsafe extern "C" fn(wq: *mut c_void) -> c_int>,
        /// `ibv_wq *`, `ibv_wq_attr *`.
        pub modify_wq: Option<unsafe extern "C" fn(wq: *mut c_void, wq_attr: *mut c_void) -> c_int>,
        /// Returns `ibv_wq *`; `wq_init_attr` is `ibv_wq_init_attr *`.
        pub create_wq: Option<unsafe extern "C" fn(context: *mut ibv_context, wq_init_attr: *mut c_void) -> *mut c_void>,
        pub query_rt_values: Option<unsafe extern "C" fn(context: *mut ibv_context, values: *mut ibv_values_ex) -> c_int>,
        pub create_cq_ex: Option<unsafe extern "C" fn(context: *mut ibv_context, init_attr: *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex>,
        /// C name `priv` (`struct verbs_ex_private *`, libibverbs-internal).
        pub priv_: *mut verbs_ex_private,
        pub query_device_ex: Option<unsafe extern "C" fn(context: *mut ibv_context, input: *const ibv_query_device_ex_input, attr: *mut ibv_device_attr_ex, attr_size: usize) -> c_int>,
        /// `flow` is `ibv_flow *`.
        pub ibv_destroy_flow: Option<unsafe extern "C" fn(flow: *mut c_void) -> c_int>,
        pub ABI_placeholder2: Option<unsafe extern "C" fn()>,
        /// Returns `ibv_flow *`; `flow_attr` is `ibv_flow_attr *`.
        pub ibv_create_flow: Option<unsafe extern "C" fn(qp: *mut ibv_qp, flow_attr: *mut c_void) -> *mut c_void>,
        pub ABI_placeholder1: Option<unsafe extern "C" fn()>,
        pub open_qp: Option<unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_qp_open_attr) -> *mut ibv_qp>,
        pub create_qp_ex: Option<unsafe extern "C" fn(context: *mut ibv_context, qp_init_attr_ex: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp>,
        pub get_srq_num: Option<unsafe extern "C" fn(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int>,
        pub create_srq_ex: Option<unsafe extern "C" fn(context: *mut ibv_context, srq_init_attr_ex: *mut ibv_srq_init_attr_ex) -> *mut ibv_srq>,
        pub open_xrcd: Option<unsafe extern "C" fn(context: *mut ibv_context, xrcd_init_attr: *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd>,
        pub close_xrcd: Option<unsafe extern "C" fn(xrcd: *mut ibv_xrcd) -> c_int>,
        pub _ABI_placeholder3: u64,
        /// Must be immediately before `context`; libibverbs sets it to 648.
        pub sz: usize,
        pub context: ibv_context,
    }
}
