//! Layout of the C-ABI declarations in `softverbs_shim::ffi`.
//!
//! * Public types (verbs.h, and `sched_attr` of linux/sched/types.h): one
//!   table below lists every declared struct, union and field. From it the test writes a C program that includes the
//!   system's `<infiniband/verbs.h>` and prints `sizeof`, `_Alignof` and
//!   `offsetof` of each, compiles it with `cc`, runs it and compares every
//!   number with Rust's. The same table checks the constants of verbs.h.
//!   Each struct's field list is also matched against the Rust declaration
//!   by an exhaustive destructuring pattern, so a field cannot be left out.
//! * Private types (driver.h, no installed header): sizes and offsets from
//!   `docs/rdma-core-provider-abi.md` (rdma-core v44, x86_64).
//!
//! Both report every mismatch at once.

use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use softverbs_shim::ffi::*;

/// One number computed on both sides.
struct Check {
    label: String,
    c_expr: String,
    rust: i128,
}

fn check(v: &mut Vec<Check>, label: String, c_expr: String, rust: usize) {
    v.push(Check {
        label,
        c_expr,
        rust: rust as i128,
    });
}

/// The C name of a Rust field: Rust keywords carry a trailing underscore.
fn c_name(rust_field: &str) -> &str {
    rust_field.trim_end_matches('_')
}

/// `size_of` the field a closure borrows, without reading it.
fn field_size<T, F>(_field: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

/// A struct: its size and alignment, and offset and size of each field.
/// Fields standing for C anonymous unions go in `anon { .. }`: they are
/// only part of the completeness pattern (C cannot name them; see
/// `c_anon_union!`).
macro_rules! c_struct {
    ($v:ident, $cty:expr, $r:ident { $($f:ident),* $(,)? } $(anon { $($a:ident),* $(,)? })?) => {{
        let cty: &str = $cty;
        let r = stringify!($r);
        check($v, format!("sizeof {r}"), format!("sizeof({cty})"), size_of::<$r>());
        check($v, format!("alignof {r}"), format!("_Alignof({cty})"), align_of::<$r>());
        $(
            let f = stringify!($f);
            let c = c_name(f);
            check($v, format!("offsetof {r}.{f}"), format!("offsetof({cty}, {c})"), offset_of!($r, $f));
            check($v, format!("sizeof {r}.{f}"), format!("sizeof((({cty} *)0)->{c})"), field_size(|x: &$r| &x.$f));
        )*
        // Fails to compile if the Rust struct has a field not listed here.
        let _complete = |x: &$r| {
            let $r { $($f: _,)* $($($a: _,)*)? } = x;
        };
    }};
}

/// A union C can name (`union ibv_gid`, or `__typeof__` of a named member):
/// size, alignment, and offset, size and Rust type of each member.
macro_rules! c_union {
    ($v:ident, $cty:expr, $r:ident { $($f:ident : $t:ty),* $(,)? }) => {{
        let cty: &str = $cty;
        let r = stringify!($r);
        check($v, format!("sizeof {r}"), format!("sizeof({cty})"), size_of::<$r>());
        check($v, format!("alignof {r}"), format!("_Alignof({cty})"), align_of::<$r>());
        $(
            let f = stringify!($f);
            let c = c_name(f);
            check($v, format!("offsetof {r}.{f}"), format!("offsetof({cty}, {c})"), offset_of!($r, $f));
            check($v, format!("sizeof {r}.{f}"), format!("sizeof((({cty} *)0)->{c})"), size_of::<$t>());
            // Fails to compile if the member does not have type `$t`.
            let _typed = |t: $t| $r { $f: t };
        )*
    }};
}

/// An anonymous union of C struct `$cty`, declared in Rust as field `$u` of
/// `$outer` with type `$r`: each member's offset in the outer struct and
/// size, and the union's size and alignment (C side: a union rebuilt from
/// the members' types).
macro_rules! c_anon_union {
    ($v:ident, $cty:expr, $outer:ident . $u:ident : $r:ident { $($f:ident : $t:ty),* $(,)? }) => {{
        let cty: &str = $cty;
        let r = stringify!($r);
        let mut rebuilt = String::from("union { ");
        $(
            let f = stringify!($f);
            let c = c_name(f);
            let _ = write!(rebuilt, "__typeof__((({cty} *)0)->{c}) {c}; ");
            check(
                $v,
                format!("offsetof {}.{}.{f}", stringify!($outer), stringify!($u)),
                format!("offsetof({cty}, {c})"),
                offset_of!($outer, $u) + offset_of!($r, $f),
            );
            check($v, format!("sizeof {r}.{f}"), format!("sizeof((({cty} *)0)->{c})"), size_of::<$t>());
            let _typed = |t: $t| $r { $f: t };
        )*
        rebuilt.push('}');
        check($v, format!("sizeof {r}"), format!("sizeof({rebuilt})"), size_of::<$r>());
        check($v, format!("alignof {r}"), format!("_Alignof({rebuilt})"), align_of::<$r>());
    }};
}

/// Constants of verbs.h, compared by value.
macro_rules! c_consts {
    ($v:ident, $($n:ident),* $(,)?) => {$(
        $v.push(Check {
            label: format!("const {}", stringify!($n)),
            c_expr: stringify!($n).to_string(),
            rust: $n as i128,
        });
    )*};
}

/// `__typeof__` of a member of a C struct, for C types without a name.
fn member_type(cty: &str, member: &str) -> String {
    format!("__typeof__((({cty} *)0)->{member})")
}

/// The table of every public type and constant.
fn public_checks() -> Vec<Check> {
    let mut checks = Vec::new();
    let v = &mut checks;

    c_struct! { v, "struct sched_attr", sched_attr {
        size, sched_policy, sched_flags, sched_nice, sched_priority, sched_runtime,
        sched_deadline, sched_period, sched_util_min, sched_util_max,
    } }
    c_union! { v, "union ibv_gid", ibv_gid { raw: [u8; 16], global: ibv_gid_global } }
    c_struct! { v, &member_type("union ibv_gid", "global"), ibv_gid_global { subnet_prefix, interface_id } }
    c_struct! { v, "struct ibv_gid_entry", ibv_gid_entry { gid, gid_index, port_num, gid_type, ndev_ifindex } }
    c_struct! { v, "struct _ibv_device_ops", _ibv_device_ops { _dummy1, _dummy2 } }
    c_struct! { v, "struct ibv_device", ibv_device {
        _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path,
    } }
    c_struct! { v, "struct ibv_context_ops", ibv_context_ops {
        _compat_query_device, _compat_query_port, _compat_alloc_pd, _compat_dealloc_pd,
        _compat_reg_mr, _compat_rereg_mr, _compat_dereg_mr, alloc_mw, bind_mw, dealloc_mw,
        _compat_create_cq, poll_cq, req_notify_cq, _compat_cq_event, _compat_resize_cq,
        _compat_destroy_cq, _compat_create_srq, _compat_modify_srq, _compat_query_srq,
        _compat_destroy_srq, post_srq_recv, _compat_create_qp, _compat_query_qp,
        _compat_modify_qp, _compat_destroy_qp, post_send, post_recv, _compat_create_ah,
        _compat_destroy_ah, _compat_attach_mcast, _compat_detach_mcast, _compat_async_event,
    } }
    c_struct! { v, "struct ibv_context", ibv_context {
        device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat,
    } }
    c_struct! { v, "struct ibv_device_attr", ibv_device_attr {
        fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
        vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
        max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
        max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
        max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
        max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
        max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt,
    } }
    c_struct! { v, "struct ibv_query_device_ex_input", ibv_query_device_ex_input { comp_mask } }
    c_struct! { v, "struct ibv_odp_caps", ibv_odp_caps { general_caps, per_transport_caps } }
    c_struct! { v, &member_type("struct ibv_odp_caps", "per_transport_caps"), ibv_odp_caps_per_transport_caps {
        rc_odp_caps, uc_odp_caps, ud_odp_caps,
    } }
    c_struct! { v, "struct ibv_tso_caps", ibv_tso_caps { max_tso, supported_qpts } }
    c_struct! { v, "struct ibv_rss_caps", ibv_rss_caps {
        supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size,
        rx_hash_fields_mask, rx_hash_function,
    } }
    c_struct! { v, "struct ibv_packet_pacing_caps", ibv_packet_pacing_caps {
        qp_rate_limit_min, qp_rate_limit_max, supported_qpts,
    } }
    c_struct! { v, "struct ibv_tm_caps", ibv_tm_caps { max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge } }
    c_struct! { v, "struct ibv_cq_moderation_caps", ibv_cq_moderation_caps { max_cq_count, max_cq_period } }
    c_struct! { v, "struct ibv_pci_atomic_caps", ibv_pci_atomic_caps { fetch_add, swap, compare_swap } }
    c_struct! { v, "struct ibv_device_attr_ex", ibv_device_attr_ex {
        orig_attr, comp_mask, odp_caps, completion_timestamp_mask, hca_core_clock,
        device_cap_flags_ex, tso_caps, rss_caps, max_wq_type_rq, packet_pacing_caps,
        raw_packet_caps, tm_caps, cq_mod_caps, max_dm_size, pci_atomic_caps, xrc_odp_caps,
        phys_port_cnt_ex,
    } }
    c_struct! { v, "struct ibv_port_attr", ibv_port_attr {
        state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr,
        qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout,
        init_type_reply, active_width, active_speed, phys_state, link_layer, flags,
        port_cap_flags2,
    } }
    c_struct! { v, "struct ibv_async_event", ibv_async_event { element, event_type } }
    c_union! { v, &member_type("struct ibv_async_event", "element"), ibv_async_event_element {
        cq: *mut ibv_cq, qp: *mut ibv_qp, srq: *mut ibv_srq, wq: *mut core::ffi::c_void,
        port_num: core::ffi::c_int,
    } }
    c_struct! { v, "struct ibv_pd", ibv_pd { context, handle } }
    c_struct! { v, "struct ibv_td_init_attr", ibv_td_init_attr { comp_mask } }
    c_struct! { v, "struct ibv_td", ibv_td { context } }
    c_struct! { v, "struct ibv_xrcd_init_attr", ibv_xrcd_init_attr { comp_mask, fd, oflags } }
    c_struct! { v, "struct ibv_xrcd", ibv_xrcd { context } }
    c_struct! { v, "struct ibv_mr", ibv_mr { context, pd, addr, length, handle, lkey, rkey } }
    c_struct! { v, "struct ibv_mw", ibv_mw { context, pd, rkey, handle, type_ } }
    c_struct! { v, "struct ibv_mw_bind_info", ibv_mw_bind_info { mr, addr, length, mw_access_flags } }
    c_struct! { v, "struct ibv_mw_bind", ibv_mw_bind { wr_id, send_flags, bind_info } }
    c_struct! { v, "struct ibv_global_route", ibv_global_route {
        dgid, flow_label, sgid_index, hop_limit, traffic_class,
    } }
    c_struct! { v, "struct ibv_grh", ibv_grh { version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid } }
    c_struct! { v, "struct ibv_ah_attr", ibv_ah_attr {
        grh, dlid, sl, src_path_bits, static_rate, is_global, port_num,
    } }
    c_struct! { v, "struct ibv_ah", ibv_ah { context, pd, handle } }
    c_struct! { v, "struct ibv_srq_attr", ibv_srq_attr { max_wr, max_sge, srq_limit } }
    c_struct! { v, "struct ibv_srq_init_attr", ibv_srq_init_attr { srq_context, attr } }
    c_struct! { v, "struct ibv_tm_cap", ibv_tm_cap { max_num_tags, max_ops } }
    c_struct! { v, "struct ibv_srq_init_attr_ex", ibv_srq_init_attr_ex {
        srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap,
    } }
    c_struct! { v, "struct ibv_srq", ibv_srq {
        context, srq_context, pd, handle, mutex, cond, events_completed,
    } }
    c_struct! { v, "struct ibv_rwq_ind_table", ibv_rwq_ind_table {
        context, ind_tbl_handle, ind_tbl_num, comp_mask,
    } }
    c_struct! { v, "struct ibv_qp_cap", ibv_qp_cap {
        max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data,
    } }
    c_struct! { v, "struct ibv_qp_init_attr", ibv_qp_init_attr {
        qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all,
    } }
    c_struct! { v, "struct ibv_rx_hash_conf", ibv_rx_hash_conf {
        rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask,
    } }
    c_struct! { v, "struct ibv_qp_init_attr_ex", ibv_qp_init_attr_ex {
        qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd,
        create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn, send_ops_flags,
    } }
    c_struct! { v, "struct ibv_qp_open_attr", ibv_qp_open_attr { comp_mask, qp_num, xrcd, qp_context, qp_type } }
    c_struct! { v, "struct ibv_qp_attr", ibv_qp_attr {
        qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num,
        qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index,
        en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer,
        port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit,
    } }
    c_struct! { v, "struct ibv_qp_rate_limit_attr", ibv_qp_rate_limit_attr {
        rate_limit, max_burst_sz, typical_pkt_sz, comp_mask,
    } }
    c_struct! { v, "struct ibv_data_buf", ibv_data_buf { addr, length } }
    c_struct! { v, "struct ibv_sge", ibv_sge { addr, length, lkey } }

    let wr = "struct ibv_send_wr";
    c_struct! { v, wr, ibv_send_wr {
        wr_id, next, sg_list, num_sge, opcode, send_flags, wr, qp_type,
    } anon { u, u2 } }
    c_anon_union! { v, wr, ibv_send_wr.u: ibv_send_wr_u { imm_data: u32, invalidate_rkey: u32 } }
    c_union! { v, &member_type(wr, "wr"), ibv_send_wr_wr {
        rdma: ibv_send_wr_wr_rdma, atomic: ibv_send_wr_wr_atomic, ud: ibv_send_wr_wr_ud,
    } }
    c_struct! { v, &member_type(wr, "wr.rdma"), ibv_send_wr_wr_rdma { remote_addr, rkey } }
    c_struct! { v, &member_type(wr, "wr.atomic"), ibv_send_wr_wr_atomic { remote_addr, compare_add, swap, rkey } }
    c_struct! { v, &member_type(wr, "wr.ud"), ibv_send_wr_wr_ud { ah, remote_qpn, remote_qkey } }
    c_union! { v, &member_type(wr, "qp_type"), ibv_send_wr_qp_type { xrc: ibv_send_wr_qp_type_xrc } }
    c_struct! { v, &member_type(wr, "qp_type.xrc"), ibv_send_wr_qp_type_xrc { remote_srqn } }
    c_anon_union! { v, wr, ibv_send_wr.u2: ibv_send_wr_u2 {
        bind_mw: ibv_send_wr_u2_bind_mw, tso: ibv_send_wr_u2_tso,
    } }
    c_struct! { v, &member_type(wr, "bind_mw"), ibv_send_wr_u2_bind_mw { mw, rkey, bind_info } }
    c_struct! { v, &member_type(wr, "tso"), ibv_send_wr_u2_tso { hdr, hdr_sz, mss } }

    c_struct! { v, "struct ibv_recv_wr", ibv_recv_wr { wr_id, next, sg_list, num_sge } }
    c_struct! { v, "struct ibv_qp", ibv_qp {
        context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type, mutex,
        cond, events_completed,
    } }
    c_struct! { v, "struct ibv_qp_ex", ibv_qp_ex {
        qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add,
        wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send,
        wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr, wr_set_xrc_srqn,
        wr_set_inline_data, wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_start,
        wr_complete, wr_abort, wr_atomic_write,
    } }
    c_struct! { v, "struct ibv_ece", ibv_ece { vendor_id, options, comp_mask } }
    c_struct! { v, "struct ibv_comp_channel", ibv_comp_channel { context, fd, refcnt } }
    c_struct! { v, "struct ibv_cq", ibv_cq {
        context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
        async_events_completed,
    } }
    c_struct! { v, "struct ibv_poll_cq_attr", ibv_poll_cq_attr { comp_mask } }
    c_struct! { v, "struct ibv_wc_tm_info", ibv_wc_tm_info { tag, priv_ } }
    c_struct! { v, "struct ibv_cq_ex", ibv_cq_ex {
        context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
        async_events_completed, comp_mask, status, wr_id, start_poll, next_poll, end_poll,
        read_opcode, read_vendor_err, read_byte_len, read_imm_data, read_qp_num, read_src_qp,
        read_wc_flags, read_slid, read_sl, read_dlid_path_bits, read_completion_ts, read_cvlan,
        read_flow_tag, read_tm_info, read_completion_wallclock_ns,
    } }
    c_struct! { v, "struct ibv_moderate_cq", ibv_moderate_cq { cq_count, cq_period } }
    c_struct! { v, "struct ibv_modify_cq_attr", ibv_modify_cq_attr { attr_mask, moderate } }
    c_struct! { v, "struct ibv_cq_init_attr_ex", ibv_cq_init_attr_ex {
        cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain,
    } }
    c_struct! { v, "struct ibv_wc", ibv_wc {
        wr_id, status, opcode, vendor_err, byte_len, qp_num, src_qp, wc_flags, pkey_index,
        slid, sl, dlid_path_bits,
    } anon { u } }
    c_anon_union! { v, "struct ibv_wc", ibv_wc.u: ibv_wc_u { imm_data: u32, invalidated_rkey: u32 } }
    c_struct! { v, "struct ibv_parent_domain_init_attr", ibv_parent_domain_init_attr {
        pd, td, comp_mask, alloc, free, pd_context,
    } }
    c_struct! { v, "struct ibv_values_ex", ibv_values_ex { comp_mask, raw_clock } }
    c_struct! { v, "struct verbs_context", verbs_context {
        query_port, advise_mr, alloc_null_mr, read_counters, attach_counters_point_flow,
        create_counters, destroy_counters, reg_dm_mr, alloc_dm, free_dm,
        modify_flow_action_esp, destroy_flow_action, create_flow_action_esp,
        modify_qp_rate_limit, alloc_parent_domain, dealloc_td, alloc_td, modify_cq,
        post_srq_ops, destroy_rwq_ind_table, create_rwq_ind_table, destroy_wq, modify_wq,
        create_wq, query_rt_values, create_cq_ex, priv_, query_device_ex, ibv_destroy_flow,
        ABI_placeholder2, ibv_create_flow, ABI_placeholder1, open_qp, create_qp_ex,
        get_srq_num, create_srq_ex, open_xrcd, close_xrcd, _ABI_placeholder3, sz, context,
    } }

    c_consts! { v,
        IBV_SYSFS_NAME_MAX, IBV_SYSFS_PATH_MAX,
        IBV_GID_TYPE_IB, IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2,
        IBV_NODE_UNKNOWN, IBV_NODE_CA, IBV_NODE_SWITCH, IBV_NODE_ROUTER, IBV_NODE_RNIC,
        IBV_NODE_USNIC, IBV_NODE_USNIC_UDP, IBV_NODE_UNSPECIFIED,
        IBV_TRANSPORT_UNKNOWN, IBV_TRANSPORT_IB, IBV_TRANSPORT_IWARP, IBV_TRANSPORT_USNIC,
        IBV_TRANSPORT_USNIC_UDP, IBV_TRANSPORT_UNSPECIFIED,
        IBV_DEVICE_RESIZE_MAX_WR, IBV_DEVICE_BAD_PKEY_CNTR, IBV_DEVICE_BAD_QKEY_CNTR,
        IBV_DEVICE_RAW_MULTI, IBV_DEVICE_AUTO_PATH_MIG, IBV_DEVICE_CHANGE_PHY_PORT,
        IBV_DEVICE_UD_AV_PORT_ENFORCE, IBV_DEVICE_CURR_QP_STATE_MOD, IBV_DEVICE_SHUTDOWN_PORT,
        IBV_DEVICE_INIT_TYPE, IBV_DEVICE_PORT_ACTIVE_EVENT, IBV_DEVICE_SYS_IMAGE_GUID,
        IBV_DEVICE_RC_RNR_NAK_GEN, IBV_DEVICE_SRQ_RESIZE, IBV_DEVICE_N_NOTIFY_CQ,
        IBV_DEVICE_MEM_WINDOW, IBV_DEVICE_UD_IP_CSUM, IBV_DEVICE_XRC,
        IBV_DEVICE_MEM_MGT_EXTENSIONS, IBV_DEVICE_MEM_WINDOW_TYPE_2A,
        IBV_DEVICE_MEM_WINDOW_TYPE_2B, IBV_DEVICE_RC_IP_CSUM, IBV_DEVICE_RAW_IP_CSUM,
        IBV_DEVICE_MANAGED_FLOW_STEERING, IBV_DEVICE_RAW_SCATTER_FCS,
        IBV_DEVICE_PCI_WRITE_END_PADDING,
        IBV_ATOMIC_NONE, IBV_ATOMIC_HCA, IBV_ATOMIC_GLOB,
        IBV_ODP_SUPPORT_SEND, IBV_ODP_SUPPORT_RECV, IBV_ODP_SUPPORT_WRITE, IBV_ODP_SUPPORT_READ,
        IBV_ODP_SUPPORT_ATOMIC, IBV_ODP_SUPPORT_SRQ_RECV, IBV_ODP_SUPPORT,
        IBV_ODP_SUPPORT_IMPLICIT,
        IBV_RAW_PACKET_CAP_CVLAN_STRIPPING, IBV_RAW_PACKET_CAP_SCATTER_FCS,
        IBV_RAW_PACKET_CAP_IP_CSUM, IBV_RAW_PACKET_CAP_DELAY_DROP, IBV_TM_CAP_RC,
        IBV_MTU_256, IBV_MTU_512, IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_4096,
        IBV_PORT_NOP, IBV_PORT_DOWN, IBV_PORT_INIT, IBV_PORT_ARMED, IBV_PORT_ACTIVE,
        IBV_PORT_ACTIVE_DEFER,
        IBV_LINK_LAYER_UNSPECIFIED, IBV_LINK_LAYER_INFINIBAND, IBV_LINK_LAYER_ETHERNET,
        IBV_PORT_SM, IBV_PORT_NOTICE_SUP, IBV_PORT_TRAP_SUP, IBV_PORT_OPT_IPD_SUP,
        IBV_PORT_AUTO_MIGR_SUP, IBV_PORT_SL_MAP_SUP, IBV_PORT_MKEY_NVRAM, IBV_PORT_PKEY_NVRAM,
        IBV_PORT_LED_INFO_SUP, IBV_PORT_SYS_IMAGE_GUID_SUP, IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP,
        IBV_PORT_EXTENDED_SPEEDS_SUP, IBV_PORT_CAP_MASK2_SUP, IBV_PORT_CM_SUP,
        IBV_PORT_SNMP_TUNNEL_SUP, IBV_PORT_REINIT_SUP, IBV_PORT_DEVICE_MGMT_SUP,
        IBV_PORT_VENDOR_CLASS_SUP, IBV_PORT_DR_NOTICE_SUP, IBV_PORT_CAP_MASK_NOTICE_SUP,
        IBV_PORT_BOOT_MGMT_SUP, IBV_PORT_LINK_LATENCY_SUP, IBV_PORT_CLIENT_REG_SUP,
        IBV_PORT_IP_BASED_GIDS,
        IBV_PORT_SET_NODE_DESC_SUP, IBV_PORT_INFO_EXT_SUP, IBV_PORT_VIRT_SUP,
        IBV_PORT_SWITCH_PORT_STATE_TABLE_SUP, IBV_PORT_LINK_WIDTH_2X_SUP,
        IBV_PORT_LINK_SPEED_HDR_SUP, IBV_PORT_LINK_SPEED_NDR_SUP,
        IBV_EVENT_CQ_ERR, IBV_EVENT_QP_FATAL, IBV_EVENT_QP_REQ_ERR, IBV_EVENT_QP_ACCESS_ERR,
        IBV_EVENT_COMM_EST, IBV_EVENT_SQ_DRAINED, IBV_EVENT_PATH_MIG, IBV_EVENT_PATH_MIG_ERR,
        IBV_EVENT_DEVICE_FATAL, IBV_EVENT_PORT_ACTIVE, IBV_EVENT_PORT_ERR,
        IBV_EVENT_LID_CHANGE, IBV_EVENT_PKEY_CHANGE, IBV_EVENT_SM_CHANGE, IBV_EVENT_SRQ_ERR,
        IBV_EVENT_SRQ_LIMIT_REACHED, IBV_EVENT_QP_LAST_WQE_REACHED,
        IBV_EVENT_CLIENT_REREGISTER, IBV_EVENT_GID_CHANGE, IBV_EVENT_WQ_FATAL,
        IBV_WC_SUCCESS, IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_QP_OP_ERR, IBV_WC_LOC_EEC_OP_ERR,
        IBV_WC_LOC_PROT_ERR, IBV_WC_WR_FLUSH_ERR, IBV_WC_MW_BIND_ERR, IBV_WC_BAD_RESP_ERR,
        IBV_WC_LOC_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_ACCESS_ERR,
        IBV_WC_REM_OP_ERR, IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR,
        IBV_WC_LOC_RDD_VIOL_ERR, IBV_WC_REM_INV_RD_REQ_ERR, IBV_WC_REM_ABORT_ERR,
        IBV_WC_INV_EECN_ERR, IBV_WC_INV_EEC_STATE_ERR, IBV_WC_FATAL_ERR,
        IBV_WC_RESP_TIMEOUT_ERR, IBV_WC_GENERAL_ERR, IBV_WC_TM_ERR, IBV_WC_TM_RNDV_INCOMPLETE,
        IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD,
        IBV_WC_BIND_MW, IBV_WC_LOCAL_INV, IBV_WC_TSO, IBV_WC_ATOMIC_WRITE, IBV_WC_RECV,
        IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_TM_ADD, IBV_WC_TM_DEL, IBV_WC_TM_SYNC,
        IBV_WC_TM_RECV, IBV_WC_TM_NO_TAG, IBV_WC_DRIVER1, IBV_WC_DRIVER2, IBV_WC_DRIVER3,
        IBV_WC_IP_CSUM_OK_SHIFT, IBV_WC_GRH, IBV_WC_WITH_IMM, IBV_WC_IP_CSUM_OK,
        IBV_WC_WITH_INV, IBV_WC_TM_SYNC_REQ, IBV_WC_TM_MATCH, IBV_WC_TM_DATA_VALID,
        IBV_WC_EX_WITH_BYTE_LEN, IBV_WC_EX_WITH_IMM, IBV_WC_EX_WITH_QP_NUM,
        IBV_WC_EX_WITH_SRC_QP, IBV_WC_EX_WITH_SLID, IBV_WC_EX_WITH_SL,
        IBV_WC_EX_WITH_DLID_PATH_BITS, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
        IBV_WC_EX_WITH_CVLAN, IBV_WC_EX_WITH_FLOW_TAG, IBV_WC_EX_WITH_TM_INFO,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK, IBV_WC_STANDARD_FLAGS,
        IBV_CREATE_CQ_SUP_WC_FLAGS,
        IBV_CQ_INIT_ATTR_MASK_FLAGS, IBV_CQ_INIT_ATTR_MASK_PD,
        IBV_CREATE_CQ_ATTR_SINGLE_THREADED, IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN,
        IBV_CQ_ATTR_MODERATE, IBV_CQ_ATTR_RESERVED,
        IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ,
        IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_MW_BIND, IBV_ACCESS_ZERO_BASED,
        IBV_ACCESS_ON_DEMAND, IBV_ACCESS_HUGETLB, IBV_ACCESS_OPTIONAL_FIRST,
        IBV_ACCESS_OPTIONAL_RANGE, IBV_ACCESS_RELAXED_ORDERING,
        IBV_REREG_MR_CHANGE_TRANSLATION, IBV_REREG_MR_CHANGE_PD, IBV_REREG_MR_CHANGE_ACCESS,
        IBV_REREG_MR_FLAGS_SUPPORTED,
        IBV_MW_TYPE_1, IBV_MW_TYPE_2,
        IBV_XRCD_INIT_ATTR_FD, IBV_XRCD_INIT_ATTR_OFLAGS, IBV_XRCD_INIT_ATTR_RESERVED,
        IBV_SRQ_MAX_WR, IBV_SRQ_LIMIT, IBV_SRQT_BASIC, IBV_SRQT_XRC, IBV_SRQT_TM,
        IBV_SRQ_INIT_ATTR_TYPE, IBV_SRQ_INIT_ATTR_PD, IBV_SRQ_INIT_ATTR_XRCD,
        IBV_SRQ_INIT_ATTR_CQ, IBV_SRQ_INIT_ATTR_TM, IBV_SRQ_INIT_ATTR_RESERVED,
        IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND,
        IBV_QPT_XRC_RECV, IBV_QPT_DRIVER,
        IBV_QP_INIT_ATTR_PD, IBV_QP_INIT_ATTR_XRCD, IBV_QP_INIT_ATTR_CREATE_FLAGS,
        IBV_QP_INIT_ATTR_MAX_TSO_HEADER, IBV_QP_INIT_ATTR_IND_TABLE, IBV_QP_INIT_ATTR_RX_HASH,
        IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, IBV_QP_CREATE_SCATTER_FCS,
        IBV_QP_CREATE_CVLAN_STRIPPING, IBV_QP_CREATE_SOURCE_QPN,
        IBV_QP_CREATE_PCI_WRITE_END_PADDING,
        IBV_QP_EX_WITH_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_SEND,
        IBV_QP_EX_WITH_SEND_WITH_IMM, IBV_QP_EX_WITH_RDMA_READ,
        IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
        IBV_QP_EX_WITH_LOCAL_INV, IBV_QP_EX_WITH_BIND_MW, IBV_QP_EX_WITH_SEND_WITH_INV,
        IBV_QP_EX_WITH_TSO, IBV_QP_EX_WITH_ATOMIC_WRITE,
        IBV_QP_OPEN_ATTR_NUM, IBV_QP_OPEN_ATTR_XRCD, IBV_QP_OPEN_ATTR_CONTEXT,
        IBV_QP_OPEN_ATTR_TYPE, IBV_QP_OPEN_ATTR_RESERVED,
        IBV_QP_STATE, IBV_QP_CUR_STATE, IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_ACCESS_FLAGS,
        IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_QKEY, IBV_QP_AV, IBV_QP_PATH_MTU,
        IBV_QP_TIMEOUT, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_RQ_PSN,
        IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_ALT_PATH, IBV_QP_MIN_RNR_TIMER, IBV_QP_SQ_PSN,
        IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_PATH_MIG_STATE, IBV_QP_CAP, IBV_QP_DEST_QPN,
        IBV_QP_RATE_LIMIT,
        IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_SQE,
        IBV_QPS_ERR, IBV_QPS_UNKNOWN,
        IBV_MIG_MIGRATED, IBV_MIG_REARM, IBV_MIG_ARMED,
        IBV_RATE_MAX, IBV_RATE_2_5_GBPS, IBV_RATE_10_GBPS, IBV_RATE_25_GBPS, IBV_RATE_100_GBPS,
        IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM,
        IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
        IBV_WR_LOCAL_INV, IBV_WR_BIND_MW, IBV_WR_SEND_WITH_INV, IBV_WR_TSO, IBV_WR_DRIVER1,
        IBV_WR_ATOMIC_WRITE,
        IBV_SEND_FENCE, IBV_SEND_SIGNALED, IBV_SEND_SOLICITED, IBV_SEND_INLINE,
        IBV_SEND_IP_CSUM,
        IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS, IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
        IBV_VALUES_MASK_RAW_CLOCK, IBV_VALUES_MASK_RESERVED,
    }
    checks
}

/// Writes, compiles and runs the C side; returns its `label -> value` lines.
fn run_c(checks: &[Check]) -> std::collections::BTreeMap<String, i128> {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    let src = dir.join("layout.c");
    let bin = dir.join("layout");

    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\n\
         /* glibc (through verbs.h) defines sched_param too */\n\
         #define sched_param linux_sched_param\n#include <linux/sched/types.h>\n\
         #undef sched_param\n\nint main(void)\n{\n",
    );
    for ch in checks {
        let _ = writeln!(
            c,
            "\tprintf(\"%s\\t%lld\\n\", \"{}\", (long long)({}));",
            ch.label, ch.c_expr
        );
    }
    c.push_str("\treturn 0;\n}\n");
    std::fs::write(&src, c).expect("write C source");

    let out = Command::new("cc")
        .args(["-std=gnu11", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("run cc (a C compiler and libibverbs-dev are needed)");
    assert!(
        out.status.success(),
        "cc failed on {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&bin)
        .output()
        .expect("run the C layout program");
    assert!(out.status.success(), "C layout program failed");
    let _ = std::fs::remove_dir_all(&dir);

    String::from_utf8(out.stdout)
        .expect("utf-8 output")
        .lines()
        .map(|line| {
            let (label, value) = line.rsplit_once('\t').expect("label<TAB>value");
            (label.to_string(), value.parse().expect("a number"))
        })
        .collect()
}

#[test]
fn public_types_match_system_verbs_h() {
    let checks = public_checks();
    let c = run_c(&checks);
    let mut bad = Vec::new();
    for ch in &checks {
        match c.get(&ch.label) {
            Some(&cv) if cv == ch.rust => {}
            Some(&cv) => bad.push(format!(
                "{}: C {} ({}), Rust {}",
                ch.label, cv, ch.c_expr, ch.rust
            )),
            None => bad.push(format!("{}: missing from the C output", ch.label)),
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} layout checks differ:\n{}",
        bad.len(),
        checks.len(),
        bad.join("\n")
    );
    assert!(
        checks.len() > 1000,
        "the table shrank: {} checks",
        checks.len()
    );
}

/// One expected number of the private ABI.
struct Expect {
    what: String,
    expected: usize,
    actual: usize,
}

macro_rules! expect_size {
    ($v:ident, $t:ty, $n:expr) => {
        $v.push(Expect {
            what: format!("sizeof {}", stringify!($t)),
            expected: $n,
            actual: size_of::<$t>(),
        });
    };
}

macro_rules! expect_offsets {
    ($v:ident, $t:ident { $($f:ident @ $n:expr),* $(,)? }) => {$(
        $v.push(Expect {
            what: format!("offsetof {}.{}", stringify!($t), stringify!($f)),
            expected: $n,
            actual: offset_of!($t, $f),
        });
    )*};
}

/// The 76 members of v44 `verbs_context_ops`, in driver.h order; also
/// checks that the Rust struct has exactly these fields.
macro_rules! verbs_context_ops_members {
    ($($f:ident),* $(,)?) => {{
        let _complete = |x: &verbs_context_ops| {
            let verbs_context_ops { $($f: _,)* } = x;
        };
        vec![$((stringify!($f), offset_of!(verbs_context_ops, $f))),*]
    }};
}

#[test]
fn private_types_match_measured_v44_abi() {
    let mut v: Vec<Expect> = Vec::new();

    expect_size! { v, verbs_device_ops, 72 }
    expect_offsets! { v, verbs_device_ops {
        name @ 0, match_min_abi_version @ 8, match_max_abi_version @ 12, match_table @ 16,
        static_providers @ 24, match_device @ 32, alloc_context @ 40, import_context @ 48,
        alloc_device @ 56, uninit_device @ 64,
    } }
    expect_size! { v, verbs_device, 712 }
    expect_offsets! { v, verbs_device {
        device @ 0, ops @ 664, refcount @ 672, entry @ 680, sysfs @ 696, core_support @ 704,
    } }
    expect_size! { v, ibv_device, 664 }
    expect_size! { v, _ibv_device_ops, 16 }
    expect_offsets! { v, ibv_device {
        _ops @ 0, node_type @ 16, transport_type @ 20, name @ 24, dev_name @ 88,
        dev_path @ 152, ibdev_path @ 408,
    } }
    expect_size! { v, list_node, 16 }
    expect_size! { v, verbs_sysfs_dev, 992 }
    expect_offsets! { v, verbs_sysfs_dev {
        entry @ 0, provider_data @ 16, match_ @ 24, flags @ 32, sysfs_name @ 36,
        sysfs_cdev @ 104, ibdev_name @ 112, ibdev_path @ 176, modalias @ 432, node_guid @ 944,
        driver_id @ 952, node_type @ 956, ibdev_idx @ 960, num_ports @ 964, abi_ver @ 968,
        time_created @ 976,
    } }
    expect_size! { v, verbs_match_ent, 24 }
    expect_size! { v, verbs_match_ent_u, 8 }
    expect_offsets! { v, verbs_match_ent { driver_data @ 0, u @ 8, vendor @ 16, device @ 18, kind @ 20 } }

    expect_size! { v, verbs_context_ops, 608 }
    let ops = verbs_context_ops_members! {
        advise_mr, alloc_dm, alloc_mw, alloc_null_mr, alloc_parent_domain, alloc_pd,
        alloc_td, async_event, attach_counters_point_flow, attach_mcast, bind_mw,
        close_xrcd, cq_event, create_ah, create_counters, create_cq, create_cq_ex,
        create_flow, create_flow_action_esp, create_qp, create_qp_ex,
        create_rwq_ind_table, create_srq, create_srq_ex, create_wq, dealloc_mw,
        dealloc_pd, dealloc_td, dereg_mr, destroy_ah, destroy_counters, destroy_cq,
        destroy_flow, destroy_flow_action, destroy_qp, destroy_rwq_ind_table,
        destroy_srq, destroy_wq, detach_mcast, free_context, free_dm, get_srq_num,
        import_dm, import_mr, import_pd, modify_cq, modify_flow_action_esp,
        modify_qp, modify_qp_rate_limit, modify_srq, modify_wq, open_qp, open_xrcd,
        poll_cq, post_recv, post_send, post_srq_ops, post_srq_recv, query_device_ex,
        query_ece, query_port, query_qp, query_qp_data_in_order, query_rt_values,
        query_srq, read_counters, reg_dm_mr, reg_dmabuf_mr, reg_mr, req_notify_cq,
        rereg_mr, resize_cq, set_ece, unimport_dm, unimport_mr, unimport_pd,
    };
    assert_eq!(ops.len(), 76, "v44 verbs_context_ops has 76 members");
    assert!(
        ops.windows(2).all(|w| w[0].0 < w[1].0),
        "driver.h keeps verbs_context_ops sorted"
    );
    for (i, (name, off)) in ops.iter().enumerate() {
        v.push(Expect {
            what: format!("offsetof verbs_context_ops.{name}"),
            expected: i * 8,
            actual: *off,
        });
    }
    // A few by absolute position, as a reader of driver.h would count them.
    expect_offsets! { v, verbs_context_ops {
        alloc_pd @ 5 * 8, create_qp @ 19 * 8, dereg_mr @ 28 * 8, poll_cq @ 53 * 8,
        post_send @ 55 * 8, query_device_ex @ 58 * 8, query_port @ 60 * 8, reg_mr @ 68 * 8,
        req_notify_cq @ 69 * 8, unimport_pd @ 75 * 8,
    } }

    expect_size! { v, verbs_context, 648 }
    expect_offsets! { v, verbs_context { query_port @ 0, priv_ @ 208, query_device_ex @ 216, sz @ 312, context @ 320 } }
    expect_size! { v, ibv_context, 328 }
    expect_size! { v, ibv_context_ops, 256 }
    expect_offsets! { v, ibv_context {
        device @ 0, ops @ 8, cmd_fd @ 264, async_fd @ 268, num_comp_vectors @ 272, mutex @ 280,
        abi_compat @ 320,
    } }
    expect_size! { v, libc::pthread_mutex_t, 40 }
    expect_size! { v, libc::pthread_cond_t, 48 }

    expect_size! { v, ibv_comp_channel, 16 }
    expect_offsets! { v, ibv_comp_channel { context @ 0, fd @ 8, refcnt @ 12 } }
    expect_size! { v, ibv_cq, 128 }
    expect_size! { v, ibv_cq_ex, 288 }
    expect_size! { v, verbs_cq, 288 }
    expect_size! { v, ibv_qp, 160 }
    expect_size! { v, ibv_qp_ex, 352 }
    expect_offsets! { v, ibv_qp_ex { qp_base @ 0 } }
    expect_size! { v, verbs_qp, 368 }
    expect_offsets! { v, verbs_qp { u @ 0, comp_mask @ 352, xrcd @ 360 } }
    expect_size! { v, verbs_mr, 56 }
    expect_offsets! { v, verbs_mr { ibv_mr @ 0, mr_type @ 48, access @ 52 } }
    expect_size! { v, ibv_srq, 128 }
    expect_size! { v, verbs_srq, 160 }
    expect_offsets! { v, verbs_srq { srq @ 0, srq_type @ 128, xrcd @ 136, cq @ 144, srq_num @ 152 } }
    expect_size! { v, verbs_xrcd, 16 }
    expect_offsets! { v, verbs_xrcd { xrcd @ 0, comp_mask @ 8, handle @ 12 } }
    expect_size! { v, ibv_wc, 48 }
    expect_size! { v, ibv_port_attr, 52 }
    expect_offsets! { v, ibv_port_attr { link_layer @ 46 } }
    expect_size! { v, ibv_device_attr, 232 }
    expect_size! { v, ibv_device_attr_ex, 400 }
    expect_size! { v, ibv_send_wr, 128 }
    expect_size! { v, ibv_recv_wr, 32 }
    expect_size! { v, ibv_qp_attr, 144 }
    expect_size! { v, ibv_qp_init_attr_ex, 136 }
    expect_size! { v, ibv_gid_entry, 32 }

    expect_size! { v, ib_uverbs_async_event_desc, 16 }
    expect_offsets! { v, ib_uverbs_async_event_desc { element @ 0, event_type @ 8, reserved @ 12 } }
    expect_size! { v, ib_uverbs_comp_event_desc, 8 }
    expect_offsets! { v, ib_uverbs_comp_event_desc { cq_handle @ 0 } }

    // driver.h constants (no installed header to compare with).
    let consts: [(&str, u64, u64); 17] = [
        ("VERBS_MATCH_SENTINEL", VERBS_MATCH_SENTINEL.into(), 0),
        ("VERBS_MATCH_PCI", VERBS_MATCH_PCI.into(), 1),
        ("VERBS_MATCH_MODALIAS", VERBS_MATCH_MODALIAS.into(), 2),
        ("VERBS_MATCH_DRIVER_ID", VERBS_MATCH_DRIVER_ID.into(), 3),
        ("VSYSFS_READ_MODALIAS", VSYSFS_READ_MODALIAS.into(), 1),
        ("VSYSFS_READ_NODE_GUID", VSYSFS_READ_NODE_GUID.into(), 2),
        ("VERBS_QP_XRCD", VERBS_QP_XRCD.into(), 1),
        ("VERBS_QP_EX", VERBS_QP_EX.into(), 2),
        ("VERBS_XRCD_HANDLE", VERBS_XRCD_HANDLE.into(), 1),
        (
            "IBV_GID_TYPE_SYSFS_IB_ROCE_V1",
            IBV_GID_TYPE_SYSFS_IB_ROCE_V1.into(),
            0,
        ),
        (
            "IBV_GID_TYPE_SYSFS_ROCE_V2",
            IBV_GID_TYPE_SYSFS_ROCE_V2.into(),
            1,
        ),
        ("IBV_MR_TYPE_MR", IBV_MR_TYPE_MR.into(), 0),
        ("IBV_MR_TYPE_NULL_MR", IBV_MR_TYPE_NULL_MR.into(), 1),
        ("IBV_MR_TYPE_IMPORTED_MR", IBV_MR_TYPE_IMPORTED_MR.into(), 2),
        ("IBV_MR_TYPE_DMABUF_MR", IBV_MR_TYPE_DMABUF_MR.into(), 3),
        ("VERBS_LOG_DEBUG", VERBS_LOG_DEBUG.into(), 4),
        ("IBVERBS_PABI_VERSION", IBVERBS_PABI_VERSION.into(), 34),
    ];
    for (name, actual, expected) in consts {
        v.push(Expect {
            what: format!("const {name}"),
            expected: expected as usize,
            actual: actual as usize,
        });
    }

    let bad: Vec<String> = v
        .iter()
        .filter(|e| e.expected != e.actual)
        .map(|e| format!("{}: expected {}, Rust {}", e.what, e.expected, e.actual))
        .collect();
    assert!(
        bad.is_empty(),
        "{} of {} private ABI checks differ:\n{}",
        bad.len(),
        v.len(),
        bad.join("\n")
    );
}

/// The zero values are usable in `const` items and are all-NULL/zero.
#[test]
fn zeroed_values() {
    const OPS: verbs_context_ops = verbs_context_ops {
        poll_cq: None,
        ..verbs_context_ops::ZEROED
    };
    assert!(OPS.alloc_pd.is_none() && OPS.unimport_pd.is_none());
    let attr = ibv_qp_attr::default();
    assert_eq!(
        (attr.qp_state, attr.ah_attr.port_num, attr.rate_limit),
        (IBV_QPS_RESET, 0, 0)
    );
    let vqp = verbs_qp::default();
    assert!(vqp.xrcd.is_null() && vqp.comp_mask == 0);
    let dev = verbs_device::ZEROED;
    assert!(
        dev.device._ops._dummy1.is_none()
            && dev.sysfs.is_null()
            && dev.device.name.iter().all(|&c| c == 0)
    );
}
