//! The provider-private ABI of rdma-core v44 (`libibverbs/driver.h`,
//! `IBVERBS_PRIVATE_34`), x86_64 layout. These types are not in any installed
//! header; `tests/layout.rs` checks them against the measured sizes and
//! offsets in `docs/rdma-core-provider-abi.md`.

use core::ffi::{c_char, c_int, c_uint, c_void};

use super::{ffi_struct, ffi_union};
use super::{
    ibv_ah, ibv_ah_attr, ibv_async_event, ibv_comp_channel, ibv_context, ibv_cq, ibv_cq_ex,
    ibv_cq_init_attr_ex, ibv_device, ibv_device_attr_ex, ibv_ece, ibv_gid, ibv_modify_cq_attr,
    ibv_mr, ibv_mw, ibv_mw_bind, ibv_parent_domain_init_attr, ibv_pd, ibv_port_attr, ibv_qp,
    ibv_qp_attr, ibv_qp_ex, ibv_qp_init_attr, ibv_qp_init_attr_ex, ibv_qp_open_attr,
    ibv_qp_rate_limit_attr, ibv_query_device_ex_input, ibv_recv_wr, ibv_rwq_ind_table, ibv_send_wr,
    ibv_sge, ibv_srq, ibv_srq_attr, ibv_srq_init_attr, ibv_srq_init_attr_ex, ibv_td,
    ibv_td_init_attr, ibv_values_ex, ibv_wc, ibv_xrcd, ibv_xrcd_init_attr, verbs_context,
};
use super::{IBV_SYSFS_NAME_MAX, IBV_SYSFS_PATH_MAX};

/// `struct verbs_ex_private`: libibverbs-internal, only ever behind a pointer
/// (`verbs_context.priv_`).
#[repr(C)]
#[derive(Debug)]
pub struct verbs_ex_private {
    _opaque: [u8; 0],
}

ffi_struct! {
    /// ccan `struct list_node` (intrusive doubly linked list).
    pub struct list_node {
        pub next: *mut list_node,
        pub prev: *mut list_node,
    }
}

ffi_union! {
    #[zeroed_by(driver_id)]
    /// `u` member of [`verbs_match_ent`].
    pub union verbs_match_ent_u {
        /// `VERBS_MATCH_MODALIAS`: an fnmatch pattern.
        pub modalias: *const c_char,
        /// `VERBS_MATCH_DRIVER_ID`.
        pub driver_id: u64,
    }
}

ffi_struct! {
    /// `struct verbs_match_ent`; a table of them ends with a
    /// `VERBS_MATCH_SENTINEL` (all-zero) entry.
    pub struct verbs_match_ent {
        pub driver_data: *mut c_void,
        pub u: verbs_match_ent_u,
        pub vendor: u16,
        pub device: u16,
        /// `VERBS_MATCH_*`.
        pub kind: u8,
    }

    /// `struct verbs_sysfs_dev`: an RDMA device found in sysfs.
    pub struct verbs_sysfs_dev {
        pub entry: list_node,
        pub provider_data: *mut c_void,
        /// C name `match`.
        pub match_: *const verbs_match_ent,
        /// `VSYSFS_READ_*` flags.
        pub flags: c_uint,
        pub sysfs_name: [c_char; IBV_SYSFS_NAME_MAX],
        pub sysfs_cdev: libc::dev_t,
        pub ibdev_name: [c_char; IBV_SYSFS_NAME_MAX],
        pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
        pub modalias: [c_char; 512],
        pub node_guid: u64,
        pub driver_id: u32,
        /// `enum ibv_node_type` (`IBV_NODE_*`).
        pub node_type: c_int,
        pub ibdev_idx: c_int,
        pub num_ports: u32,
        pub abi_ver: u32,
        pub time_created: libc::timespec,
    }

    /// `struct verbs_device_ops`: what a provider registers with
    /// `verbs_register_driver_34`.
    pub struct verbs_device_ops {
        pub name: *const c_char,
        pub match_min_abi_version: u32,
        pub match_max_abi_version: u32,
        pub match_table: *const verbs_match_ent,
        pub static_providers: *mut *const verbs_device_ops,
        pub match_device: Option<unsafe extern "C" fn(sysfs_dev: *mut verbs_sysfs_dev) -> bool>,
        pub alloc_context: Option<unsafe extern "C" fn(device: *mut ibv_device, cmd_fd: c_int, private_data: *mut c_void) -> *mut verbs_context>,
        pub import_context: Option<unsafe extern "C" fn(device: *mut ibv_device, cmd_fd: c_int) -> *mut verbs_context>,
        pub alloc_device: Option<unsafe extern "C" fn(sysfs_dev: *mut verbs_sysfs_dev) -> *mut verbs_device>,
        pub uninit_device: Option<unsafe extern "C" fn(device: *mut verbs_device)>,
    }

    /// `struct verbs_device`: [`ibv_device`] first.
    pub struct verbs_device {
        pub device: ibv_device,
        pub ops: *const verbs_device_ops,
        /// C `atomic_int`: libibverbs changes it with atomic operations, so
        /// access it through `AtomicI32::from_ptr`.
        pub refcount: c_int,
        pub entry: list_node,
        pub sysfs: *mut verbs_sysfs_dev,
        pub core_support: u64,
    }

    /// `struct verbs_xrcd`.
    pub struct verbs_xrcd {
        pub xrcd: ibv_xrcd,
        /// `VERBS_XRCD_*` flags.
        pub comp_mask: u32,
        pub handle: u32,
    }

    /// `struct verbs_mr`: what `reg_mr` allocates; `dereg_mr` receives it.
    pub struct verbs_mr {
        pub ibv_mr: ibv_mr,
        /// `enum ibv_mr_type` (`IBV_MR_TYPE_*`).
        pub mr_type: u32,
        pub access: c_int,
    }

    /// `struct verbs_srq`.
    pub struct verbs_srq {
        pub srq: ibv_srq,
        /// `enum ibv_srq_type` (`IBV_SRQT_*`).
        pub srq_type: u32,
        pub xrcd: *mut verbs_xrcd,
        pub cq: *mut ibv_cq,
        pub srq_num: u32,
    }
}

ffi_union! {
    #[zeroed_by(qp_ex)]
    /// Anonymous union of [`verbs_qp`] (field `u`); `qp_ex.qp_base` and `qp`
    /// are the same `ibv_qp`.
    pub union verbs_qp_u {
        pub qp: ibv_qp,
        pub qp_ex: ibv_qp_ex,
    }
}

ffi_struct! {
    /// `struct verbs_qp`; `ibv_qp_to_qp_ex` requires `comp_mask & VERBS_QP_EX`.
    pub struct verbs_qp {
        /// C: anonymous union `{ qp; qp_ex; }`.
        pub u: verbs_qp_u,
        /// `VERBS_QP_*` flags.
        pub comp_mask: u32,
        pub xrcd: *mut verbs_xrcd,
    }
}

ffi_union! {
    #[zeroed_by(cq_ex)]
    /// Anonymous union of [`verbs_cq`] (field `u`).
    pub union verbs_cq_u {
        pub cq: ibv_cq,
        pub cq_ex: ibv_cq_ex,
    }
}

ffi_struct! {
    /// `struct verbs_cq`.
    pub struct verbs_cq {
        /// C: anonymous union `{ cq; cq_ex; }`.
        pub u: verbs_cq_u,
    }

    /// `struct ib_uverbs_async_event_desc`: the 16 bytes `ibv_get_async_event`
    /// reads from `context.async_fd`.
    pub struct ib_uverbs_async_event_desc {
        /// The `ibv_qp*`/`ibv_cq*`/`ibv_srq*`, or the port number.
        pub element: u64,
        /// `IBV_EVENT_*`.
        pub event_type: u32,
        pub reserved: u32,
    }

    /// `struct ib_uverbs_comp_event_desc`: the 8 bytes `ibv_get_cq_event`
    /// reads from a completion channel's fd.
    pub struct ib_uverbs_comp_event_desc {
        /// The `ibv_cq*`.
        pub cq_handle: u64,
    }

    /// `struct verbs_context_ops` (v44, 76 members, sorted by name): the
    /// provider's ops, installed with `verbs_set_ops` (NULL members are
    /// skipped). Signatures are driver.h's, which differ from the public API
    /// for `reg_mr`, `dereg_mr`, `query_port` and `query_device_ex`.
    /// `*mut c_void` stands for pointers to types this crate does not declare
    /// (named in each member's doc).
    pub struct verbs_context_ops {
        /// `advice` is `enum ibv_advise_mr_advice`.
        pub advise_mr: Option<unsafe extern "C" fn(pd: *mut ibv_pd, advice: u32, flags: u32, sg_list: *mut ibv_sge, num_sges: u32) -> c_int>,
        /// Returns `ibv_dm *`; `attr` is `ibv_alloc_dm_attr *`.
        pub alloc_dm: Option<unsafe extern "C" fn(context: *mut ibv_context, attr: *mut c_void) -> *mut c_void>,
        /// `type_` is `enum ibv_mw_type`.
        pub alloc_mw: Option<unsafe extern "C" fn(pd: *mut ibv_pd, type_: u32) -> *mut ibv_mw>,
        pub alloc_null_mr: Option<unsafe extern "C" fn(pd: *mut ibv_pd) -> *mut ibv_mr>,
        pub alloc_parent_domain: Option<unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_parent_domain_init_attr) -> *mut ibv_pd>,
        pub alloc_pd: Option<unsafe extern "C" fn(context: *mut ibv_context) -> *mut ibv_pd>,
        pub alloc_td: Option<unsafe extern "C" fn(context: *mut ibv_context, init_attr: *mut ibv_td_init_attr) -> *mut ibv_td>,
        pub async_event: Option<unsafe extern "C" fn(context: *mut ibv_context, event: *mut ibv_async_event)>,
        /// `ibv_counters *`, `ibv_counter_attach_attr *`, `ibv_flow *`.
        pub attach_counters_point_flow: Option<unsafe extern "C" fn(counters: *mut c_void, attr: *mut c_void, flow: *mut c_void) -> c_int>,
        pub attach_mcast: Option<unsafe extern "C" fn(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int>,
        pub bind_mw: Option<unsafe extern "C" fn(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int>,
        pub close_xrcd: Option<unsafe extern "C" fn(xrcd: *mut ibv_xrcd) -> c_int>,
        pub cq_event: Option<unsafe extern "C" fn(cq: *mut ibv_cq)>,
        pub create_ah: Option<unsafe extern "C" fn(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah>,
        /// Returns `ibv_counters *`; `init_attr` is `ibv_counters_init_attr *`.
        pub create_counters: Option<unsafe extern "C" fn(context: *mut ibv_context, init_attr: *mut c_void) -> *mut c_void>,
        pub create_cq: Option<unsafe extern "C" fn(context: *mut ibv_context, cqe: c_int, channel: *mut ibv_comp_channel, comp_vector: c_int) -> *mut ibv_cq>,
        pub create_cq_ex: Option<unsafe extern "C" fn(context: *mut ibv_context, init_attr: *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex>,
        /// Returns `ibv_flow *`; `flow_attr` is `ibv_flow_attr *`.
        pub create_flow: Option<unsafe extern "C" fn(qp: *mut ibv_qp, flow_attr: *mut c_void) -> *mut c_void>,
        /// Returns `ibv_flow_action *`; `attr` is `ibv_flow_action_esp_attr *`.
        pub create_flow_action_esp: Option<unsafe extern "C" fn(context: *mut ibv_context, attr: *mut c_void) -> *mut c_void>,
        pub create_qp: Option<unsafe extern "C" fn(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp>,
        pub create_qp_ex: Option<unsafe extern "C" fn(context: *mut ibv_context, qp_init_attr_ex: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp>,
        /// `init_attr` is `ibv_rwq_ind_table_init_attr *`.
        pub create_rwq_ind_table: Option<unsafe extern "C" fn(context: *mut ibv_context, init_attr: *mut c_void) -> *mut ibv_rwq_ind_table>,
        pub create_srq: Option<unsafe extern "C" fn(pd: *mut ibv_pd, srq_init_attr: *mut ibv_srq_init_attr) -> *mut ibv_srq>,
        pub create_srq_ex: Option<unsafe extern "C" fn(context: *mut ibv_context, srq_init_attr_ex: *mut ibv_srq_init_attr_ex) -> *mut ibv_srq>,
        /// Returns `ibv_wq *`; `wq_init_attr` is `ibv_wq_init_attr *`.
        pub create_wq: Option<unsafe extern "C" fn(context: *mut ibv_context, wq_init_attr: *mut c_void) -> *mut c_void>,
        pub dealloc_mw: Option<unsafe extern "C" fn(mw: *mut ibv_mw) -> c_int>,
        pub dealloc_pd: Option<unsafe extern "C" fn(pd: *mut ibv_pd) -> c_int>,
        pub dealloc_td: Option<unsafe extern "C" fn(td: *mut ibv_td) -> c_int>,
        /// Provider-private signature: receives the `verbs_mr`.
        pub dereg_mr: Option<unsafe extern "C" fn(vmr: *mut verbs_mr) -> c_int>,
        pub destroy_ah: Option<unsafe extern "C" fn(ah: *mut ibv_ah) -> c_int>,
        /// `counters` is `ibv_counters *`.
        pub destroy_counters: Option<unsafe extern "C" fn(counters: *mut c_void) -> c_int>,
        pub destroy_cq: Option<unsafe extern "C" fn(cq: *mut ibv_cq) -> c_int>,
        /// `flow` is `ibv_flow *`.
        pub destroy_flow: Option<unsafe extern "C" fn(flow: *mut c_void) -> c_int>,
        /// `action` is `ibv_flow_action *`.
        pub destroy_flow_action: Option<unsafe extern "C" fn(action: *mut c_void) -> c_int>,
        pub destroy_qp: Option<unsafe extern "C" fn(qp: *mut ibv_qp) -> c_int>,
        pub destroy_rwq_ind_table: Option<unsafe extern "C" fn(rwq_ind_table: *mut ibv_rwq_ind_table) -> c_int>,
        pub destroy_srq: Option<unsafe extern "C" fn(srq: *mut ibv_srq) -> c_int>,
        /// `wq` is `ibv_wq *`.
        pub destroy_wq: Option<unsafe extern "C" fn(wq: *mut c_void) -> c_int>,
        pub detach_mcast: Option<unsafe extern "C" fn(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int>,
        pub free_context: Option<unsafe extern "C" fn(context: *mut ibv_context)>,
        /// `dm` is `ibv_dm *`.
        pub free_dm: Option<unsafe extern "C" fn(dm: *mut c_void) -> c_int>,
        pub get_srq_num: Option<unsafe extern "C" fn(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int>,
        /// Returns `ibv_dm *`.
        pub import_dm: Option<unsafe extern "C" fn(context: *mut ibv_context, dm_handle: u32) -> *mut c_void>,
        pub import_mr: Option<unsafe extern "C" fn(pd: *mut ibv_pd, mr_handle: u32) -> *mut ibv_mr>,
        pub import_pd: Option<unsafe extern "C" fn(context: *mut ibv_context, pd_handle: u32) -> *mut ibv_pd>,
        pub modify_cq: Option<unsafe extern "C" fn(cq: *mut ibv_cq, attr: *mut ibv_modify_cq_attr) -> c_int>,
        /// `ibv_flow_action *`, `ibv_flow_action_esp_attr *`.
        pub modify_flow_action_esp: Option<unsafe extern "C" fn(action: *mut c_void, attr: *mut c_void) -> c_int>,
        pub modify_qp: Option<unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int>,
        pub modify_qp_rate_limit: Option<unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_rate_limit_attr) -> c_int>,
        pub modify_srq: Option<unsafe extern "C" fn(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr, srq_attr_mask: c_int) -> c_int>,
        /// `ibv_wq *`, `ibv_wq_attr *`.
        pub modify_wq: Option<unsafe extern "C" fn(wq: *mut c_void, wq_attr: *mut c_void) -> c_int>,
        pub open_qp: Option<unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_qp_open_attr) -> *mut ibv_qp>,
        pub open_xrcd: Option<unsafe extern "C" fn(context: *mut ibv_context, xrcd_init_attr: *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd>,
        pub poll_cq: Option<unsafe extern "C" fn(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int>,
        pub post_recv: Option<unsafe extern "C" fn(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int>,
        pub post_send: Option<unsafe extern "C" fn(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr) -> c_int>,
        /// `op`/`bad_op` are `ibv_ops_wr *` / `ibv_ops_wr **`.
        pub post_srq_ops: Option<unsafe extern "C" fn(srq: *mut ibv_srq, op: *mut c_void, bad_op: *mut *mut c_void) -> c_int>,
        pub post_srq_recv: Option<unsafe extern "C" fn(srq: *mut ibv_srq, recv_wr: *mut ibv_recv_wr, bad_recv_wr: *mut *mut ibv_recv_wr) -> c_int>,
        /// Provider-private signature: `input` may be NULL; write only
        /// `attr_size` bytes (232 from `ibv_query_device`, 400 from
        /// `ibv_query_device_ex`).
        pub query_device_ex: Option<unsafe extern "C" fn(context: *mut ibv_context, input: *const ibv_query_device_ex_input, attr: *mut ibv_device_attr_ex, attr_size: usize) -> c_int>,
        pub query_ece: Option<unsafe extern "C" fn(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int>,
        /// Provider-private signature: no length argument.
        pub query_port: Option<unsafe extern "C" fn(context: *mut ibv_context, port_num: u8, port_attr: *mut ibv_port_attr) -> c_int>,
        pub query_qp: Option<unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int, init_attr: *mut ibv_qp_init_attr) -> c_int>,
        /// `op` is `enum ibv_wr_opcode`.
        pub query_qp_data_in_order: Option<unsafe extern "C" fn(qp: *mut ibv_qp, op: u32, flags: u32) -> c_int>,
        pub query_rt_values: Option<unsafe extern "C" fn(context: *mut ibv_context, values: *mut ibv_values_ex) -> c_int>,
        pub query_srq: Option<unsafe extern "C" fn(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr) -> c_int>,
        /// `counters` is `ibv_counters *`.
        pub read_counters: Option<unsafe extern "C" fn(counters: *mut c_void, counters_value: *mut u64, ncounters: u32, flags: u32) -> c_int>,
        /// `dm` is `ibv_dm *`.
        pub reg_dm_mr: Option<unsafe extern "C" fn(pd: *mut ibv_pd, dm: *mut c_void, dm_offset: u64, length: usize, access: c_uint) -> *mut ibv_mr>,
        pub reg_dmabuf_mr: Option<unsafe extern "C" fn(pd: *mut ibv_pd, offset: u64, length: usize, iova: u64, fd: c_int, access: c_int) -> *mut ibv_mr>,
        /// Provider-private signature: `hca_va` is the IOVA (equals `addr`
        /// for `ibv_reg_mr`). Must return the `ibv_mr` of a `verbs_mr`.
        pub reg_mr: Option<unsafe extern "C" fn(pd: *mut ibv_pd, addr: *mut c_void, length: usize, hca_va: u64, access: c_int) -> *mut ibv_mr>,
        pub req_notify_cq: Option<unsafe extern "C" fn(cq: *mut ibv_cq, solicited_only: c_int) -> c_int>,
        pub rereg_mr: Option<unsafe extern "C" fn(vmr: *mut verbs_mr, flags: c_int, pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> c_int>,
        pub resize_cq: Option<unsafe extern "C" fn(cq: *mut ibv_cq, cqe: c_int) -> c_int>,
        pub set_ece: Option<unsafe extern "C" fn(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int>,
        /// `dm` is `ibv_dm *`.
        pub unimport_dm: Option<unsafe extern "C" fn(dm: *mut c_void)>,
        pub unimport_mr: Option<unsafe extern "C" fn(mr: *mut ibv_mr)>,
        pub unimport_pd: Option<unsafe extern "C" fn(pd: *mut ibv_pd)>,
    }
}
