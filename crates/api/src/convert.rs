//! Conversions between the C structs of verbs.h and the engine's types.
//! Enum-like fields pass through as numbers: both sides use the verbs.h
//! numbering, and the engine validates them.

use softverbs_engine::{
    send_flags, AhAttr, Gid, GlobalRoute, QpAttr, QpCap, SendWr, Sge, WcOpcode, WcStatus,
    WorkCompletion,
};
use softverbs_ffi::*;

/// `ibv_gid` -> engine GID.
pub fn gid_from_c(g: &ibv_gid) -> Gid {
    // SAFETY: every bit pattern of the union is a valid byte array.
    Gid(unsafe { g.raw })
}

/// Engine GID -> `ibv_gid`.
pub fn gid_to_c(g: Gid) -> ibv_gid {
    ibv_gid { raw: g.0 }
}

/// The bits of an IPv6 flow label.
const FLOW_LABEL_MASK: u32 = 0xF_FFFF;

/// `ibv_ah_attr` -> engine. The flow label is masked to its 20 bits, as
/// the kernel's uverbs layer does: programs pass wider values (UCX 1.13
/// passes `~0` on RoCE) and kernel providers accept them.
pub fn ah_from_c(a: &ibv_ah_attr) -> AhAttr {
    AhAttr {
        grh: GlobalRoute {
            dgid: gid_from_c(&a.grh.dgid),
            flow_label: a.grh.flow_label & FLOW_LABEL_MASK,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: a.is_global != 0,
        port_num: a.port_num,
    }
}

/// Engine -> `ibv_ah_attr`.
pub fn ah_to_c(a: &AhAttr) -> ibv_ah_attr {
    let mut c = ibv_ah_attr::ZEROED;
    c.grh.dgid = gid_to_c(a.grh.dgid);
    c.grh.flow_label = a.grh.flow_label;
    c.grh.sgid_index = a.grh.sgid_index;
    c.grh.hop_limit = a.grh.hop_limit;
    c.grh.traffic_class = a.grh.traffic_class;
    c.dlid = a.dlid;
    c.sl = a.sl;
    c.src_path_bits = a.src_path_bits;
    c.static_rate = a.static_rate;
    c.is_global = u8::from(a.is_global);
    c.port_num = a.port_num;
    c
}

/// `ibv_qp_cap` -> engine.
pub fn cap_from_c(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// Engine -> `ibv_qp_cap`.
pub fn cap_to_c(c: &QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `ibv_qp_attr` -> engine.
pub fn qp_attr_from_c(a: &ibv_qp_attr) -> QpAttr {
    QpAttr {
        qp_state: a.qp_state,
        cur_qp_state: a.cur_qp_state,
        path_mtu: a.path_mtu,
        path_mig_state: a.path_mig_state,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags,
        cap: cap_from_c(&a.cap),
        ah_attr: ah_from_c(&a.ah_attr),
        alt_ah_attr: ah_from_c(&a.alt_ah_attr),
        pkey_index: a.pkey_index,
        alt_pkey_index: a.alt_pkey_index,
        en_sqd_async_notify: a.en_sqd_async_notify,
        sq_draining: a.sq_draining,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: a.alt_port_num,
        alt_timeout: a.alt_timeout,
        rate_limit: a.rate_limit,
    }
}

/// Engine -> `ibv_qp_attr`.
pub fn qp_attr_to_c(a: &QpAttr) -> ibv_qp_attr {
    let mut c = ibv_qp_attr::ZEROED;
    c.qp_state = a.qp_state;
    c.cur_qp_state = a.cur_qp_state;
    c.path_mtu = a.path_mtu;
    c.path_mig_state = a.path_mig_state;
    c.qkey = a.qkey;
    c.rq_psn = a.rq_psn;
    c.sq_psn = a.sq_psn;
    c.dest_qp_num = a.dest_qp_num;
    c.qp_access_flags = a.qp_access_flags;
    c.cap = cap_to_c(&a.cap);
    c.ah_attr = ah_to_c(&a.ah_attr);
    c.alt_ah_attr = ah_to_c(&a.alt_ah_attr);
    c.pkey_index = a.pkey_index;
    c.alt_pkey_index = a.alt_pkey_index;
    c.en_sqd_async_notify = a.en_sqd_async_notify;
    c.sq_draining = a.sq_draining;
    c.max_rd_atomic = a.max_rd_atomic;
    c.max_dest_rd_atomic = a.max_dest_rd_atomic;
    c.min_rnr_timer = a.min_rnr_timer;
    c.port_num = a.port_num;
    c.timeout = a.timeout;
    c.retry_cnt = a.retry_cnt;
    c.rnr_retry = a.rnr_retry;
    c.alt_port_num = a.alt_port_num;
    c.alt_timeout = a.alt_timeout;
    c.rate_limit = a.rate_limit;
    c
}

/// A WR's `imm_data` (`__be32`: its bytes in memory are the bytes on
/// the wire) -> the engine's number, whose big-endian bytes go on the wire.
pub fn imm_from_c(imm: u32) -> u32 {
    u32::from_be(imm)
}

/// The `imm_data`/`invalidate_rkey` union of a send WR for the engine:
/// immediate data is network order, an rkey to invalidate host order.
pub fn wr_imm_or_rkey(opcode: u32, raw: u32) -> u32 {
    match opcode {
        IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE_WITH_IMM => imm_from_c(raw),
        _ => raw,
    }
}

/// The `imm_data`/`invalidated_rkey` union of a completion for C:
/// immediate data back in network order, an invalidated rkey host order.
pub fn wc_imm_or_rkey(w: &WorkCompletion) -> u32 {
    if w.wc_flags & IBV_WC_WITH_IMM != 0 {
        w.imm_data_or_inv_rkey.to_be()
    } else {
        w.imm_data_or_inv_rkey
    }
}

/// Engine completion -> `ibv_wc`.
pub fn wc_to_c(w: &WorkCompletion) -> ibv_wc {
    let mut c = ibv_wc::ZEROED;
    c.wr_id = w.wr_id;
    c.status = w.status as u32;
    c.opcode = w.opcode as u32;
    c.vendor_err = w.vendor_err;
    c.byte_len = w.byte_len;
    c.u = ibv_wc_u {
        imm_data: wc_imm_or_rkey(w),
    };
    c.qp_num = w.qp_num;
    c.src_qp = w.src_qp;
    c.wc_flags = w.wc_flags;
    c.pkey_index = w.pkey_index;
    c.sl = w.sl;
    c
}

/// The `imm_data`/`invalidated_rkey` union of a C completion as the
/// engine holds it (the inverse of [`wc_imm_or_rkey`]): immediate data in
/// host order, an invalidated rkey as it is.
pub fn wc_imm_or_rkey_from_c(c: &ibv_wc) -> u32 {
    // SAFETY: both members of the union are u32; any value is valid.
    let raw = unsafe { c.u.imm_data };
    if c.wc_flags & IBV_WC_WITH_IMM != 0 {
        u32::from_be(raw)
    } else {
        raw
    }
}

/// `ibv_wc` -> engine completion (the inverse of [`wc_to_c`]); an
/// unknown status or opcode (a newer provider's) reads as a general error
/// or a SEND.
pub fn wc_from_c(c: &ibv_wc) -> WorkCompletion {
    let imm_data_or_inv_rkey = wc_imm_or_rkey_from_c(c);
    WorkCompletion {
        wr_id: c.wr_id,
        status: WcStatus::from_c(c.status).unwrap_or(WcStatus::GeneralErr),
        opcode: WcOpcode::from_c(c.opcode).unwrap_or(WcOpcode::Send),
        vendor_err: c.vendor_err,
        byte_len: c.byte_len,
        imm_data_or_inv_rkey,
        qp_num: c.qp_num,
        src_qp: c.src_qp,
        wc_flags: c.wc_flags,
        pkey_index: c.pkey_index,
        sl: c.sl,
    }
}

/// Engine send WR -> `ibv_send_wr`, its SGEs in `sges` (which must live
/// as long as the WR is used) and, for a UD QP, its AH as `ah`. Inline
/// data becomes one SGE over the bytes, which is how verbs.h passes it.
pub fn send_wr_to_c(w: &SendWr<'_>, sges: &mut Vec<ibv_sge>, ah: *mut ibv_ah) -> ibv_send_wr {
    sges.clear();
    if w.send_flags & send_flags::INLINE != 0 {
        sges.push(ibv_sge {
            addr: w.inline_data.as_ptr() as u64,
            length: w.inline_data.len() as u32,
            lkey: 0,
        });
    } else {
        sges.extend(w.sg_list.iter().map(sge_to_c));
    }
    let mut c = ibv_send_wr::ZEROED;
    c.wr_id = w.wr_id;
    c.sg_list = sges.as_mut_ptr();
    c.num_sge = sges.len() as i32;
    c.opcode = w.opcode;
    c.send_flags = w.send_flags;
    c.u = ibv_send_wr_u {
        imm_data: match w.opcode {
            IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE_WITH_IMM => w.imm_data_or_inv_rkey.to_be(),
            _ => w.imm_data_or_inv_rkey,
        },
    };
    c.wr = match (w.opcode, &w.ud) {
        (_, Some(ud)) => ibv_send_wr_wr {
            ud: ibv_send_wr_wr_ud {
                ah,
                remote_qpn: ud.remote_qpn,
                remote_qkey: ud.remote_qkey,
            },
        },
        (IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD, None) => ibv_send_wr_wr {
            atomic: ibv_send_wr_wr_atomic {
                remote_addr: w.atomic.remote_addr,
                compare_add: w.atomic.compare_add,
                swap: w.atomic.swap,
                rkey: w.atomic.rkey,
            },
        },
        (_, None) => ibv_send_wr_wr {
            rdma: ibv_send_wr_wr_rdma {
                remote_addr: w.rdma.remote_addr,
                rkey: w.rdma.rkey,
            },
        },
    };
    c
}

/// Engine SGE -> `ibv_sge`.
pub fn sge_to_c(s: &Sge) -> ibv_sge {
    ibv_sge {
        addr: s.addr,
        length: s.length,
        lkey: s.lkey,
    }
}
