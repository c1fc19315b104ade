//! What each op does to the world. Verb results are ignored (refusing bad
//! arguments is the engine's job; a refusal is as good an outcome as a
//! success here), except that objects created are remembered.

use super::attrs::{set_ah_field, set_qp_field, AH_FIELDS, QP_FIELDS};
use super::node::{pick, MrRef, Node, MEM_BASE, MEM_LEN};
use super::ops::{Caps, Op, Remote, SgeSpec, Step};
use super::World;
use crate::bringup;
use softverbs_engine::{
    AtomicTarget, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, RdmaTarget, RecvWr,
    SendWr, Sge, SrqAttr, SrqAttrMask, UdTarget, VerbsResult,
};

/// A verb's answer, which the target does not judge: refusing bad
/// arguments is a correct outcome, and the rules are tested elsewhere.
fn ignore<T>(_: VerbsResult<T>) {}

/// The PSN every textbook connection starts from (close to the wrap).
const PSN: u32 = 0x00FF_FFF8;

impl World {
    /// Runs one step.
    pub fn step(&mut self, step: Step) {
        match step.op {
            Op::Deliver { budget, drop } => {
                self.deliver(step.node, usize::from(budget % 64) + 1, drop);
            }
            Op::Timeout { advance } => self.tick(u64::from(advance) << 10),
            op => {
                let (me, peer) = self.pair(step.node);
                verb(me, peer, op);
            }
        }
    }
}

fn verb(n: &mut Node, peer: &Node, op: Op) {
    match op {
        Op::AllocPd {} => {
            if let Ok(pd) = n.e.alloc_pd() {
                n.pds.push(pd);
            }
        }
        Op::DeallocPd { pd } => ignore(n.e.dealloc_pd(pick(&n.pds, pd))),
        Op::RegMr {
            pd,
            offset,
            len,
            access,
            mode,
            iova,
        } => reg_mr(n, pd, (offset, len), access, mode, iova),
        Op::ReregMr {
            mr,
            change,
            pd,
            offset,
            len,
            access,
        } => rereg_mr(n, mr, change, pd, (offset, len), access),
        Op::DeregMr { mr } => ignore(n.e.dereg_mr(pick(&n.mrs, mr).id)),
        Op::CreateCq { cqe, vector } => {
            if let Ok((cq, _)) = n.e.create_cq(u32::from(cqe), u32::from(vector)) {
                n.cqs.push(cq);
            }
        }
        Op::ResizeCq { cq, cqe } => ignore(n.e.resize_cq(pick(&n.cqs, cq), u32::from(cqe))),
        Op::DestroyCq { cq } => ignore(n.e.destroy_cq(pick(&n.cqs, cq))),
        Op::CreateSrq {
            pd,
            max_wr,
            max_sge,
            limit,
        } => {
            let attr = SrqAttr {
                max_wr: u32::from(max_wr),
                max_sge: u32::from(max_sge),
                srq_limit: u32::from(limit),
            };
            if let Ok((srq, _)) = n.e.create_srq(pick(&n.pds, pd), &attr) {
                n.srqs.push(srq);
            }
        }
        Op::ModifySrq {
            srq,
            mask,
            max_wr,
            limit,
        } => {
            let attr = SrqAttr {
                max_wr: u32::from(max_wr),
                max_sge: 0,
                srq_limit: u32::from(limit),
            };
            let mask = SrqAttrMask::from_bits_retain(u32::from(mask));
            ignore(n.e.modify_srq(pick(&n.srqs, srq), &attr, mask));
        }
        Op::DestroySrq { srq } => ignore(n.e.destroy_srq(pick(&n.srqs, srq))),
        Op::PostSrqRecv { srq, wr_id, sges } => {
            let sg_list = sg_list(n, sges);
            let wr = RecvWr {
                wr_id: u64::from(wr_id),
                sg_list: &sg_list,
            };
            ignore(n.e.post_srq_recv(pick(&n.srqs, srq), &wr));
        }
        Op::CreateQp {
            pd,
            send_cq,
            recv_cq,
            srq,
            qp_type,
            caps,
            sig_all,
        } => create_qp(n, pd, (send_cq, recv_cq, srq), qp_type, caps, sig_all),
        Op::DestroyQp { qp } => ignore(n.e.destroy_qp(pick(&n.qps, qp))),
        Op::ModifyQp {
            qp,
            state,
            flip,
            field1,
            value1,
            field2,
            value2,
        } => {
            let edits = [(field1, value1), (field2, value2)];
            modify_qp(n, peer, qp, state, flip, edits)
        }
        Op::QueryQp { qp } => ignore(n.e.query_qp(pick(&n.qps, qp))),
        Op::PostSend {
            qp,
            opcode,
            flags,
            sges,
            inline,
            imm,
            remote,
            batch,
        } => {
            let wr = (opcode, flags, sges, inline, imm);
            post_send(n, peer, qp, wr, remote, batch)
        }
        Op::PostRecv { qp, wr_id, sges } => {
            let sg_list = sg_list(n, sges);
            let wr = RecvWr {
                wr_id: u64::from(wr_id),
                sg_list: &sg_list,
            };
            ignore(n.e.post_recv(pick(&n.qps, qp), &wr));
        }
        Op::PollCq { cq, max } => {
            let mut out = Vec::new();
            ignore(n.e.poll_cq(pick(&n.cqs, cq), usize::from(max), &mut out));
            while n.e.poll_event().is_some() {}
            while n.e.poll_comp_event().is_some() {}
        }
        Op::ReqNotifyCq { cq, solicited } => ignore(n.e.req_notify_cq(pick(&n.cqs, cq), solicited)),
        Op::CreateAh { pd, field, value } => {
            let mut attr = bringup::av(peer.gid);
            set_ah_field(&mut attr, field % (AH_FIELDS + 1), value);
            if let Ok(ah) = n.e.create_ah(pick(&n.pds, pd), &attr) {
                n.ahs.push(ah);
            }
        }
        Op::DestroyAh { ah } => ignore(n.e.destroy_ah(pick(&n.ahs, ah))),
        Op::Unmap { offset, len } => {
            // The application unmaps registered memory: accesses fault.
            let (addr, len) = clamp((offset, len));
            n.mem.unmap(addr..addr + len);
        }
        Op::Deliver { .. } | Op::Timeout { .. } => unreachable!("handled by World::step"),
    }
}

/// `(offset, len)` clamped into the node's memory.
fn clamp((offset, len): (u16, u16)) -> (u64, u64) {
    let offset = usize::from(offset) % MEM_LEN;
    let len = usize::from(len) % (MEM_LEN - offset + 1);
    (MEM_BASE + offset as u64, len as u64)
}

/// `mode` bit 0: remote address `iova` (else the local one); bit 1: a
/// wild range starting at `iova` (deregistered at once if accepted, as
/// the memory is not there); bit 2: a hint bit of the optional range;
/// bit 3: an unknown access bit.
fn reg_mr(n: &mut Node, pd: u8, range: (u16, u16), access: u8, mode: u8, iova: u64) {
    let (mut addr, len) = clamp(range);
    let mut access = u32::from(access);
    if mode & 4 != 0 {
        access |= 1 << 20;
    }
    if mode & 8 != 0 {
        access |= 1 << 30;
    }
    let wild = mode & 2 != 0;
    if wild {
        addr = iova;
    }
    let remote = if mode & 1 != 0 { iova } else { addr };
    let Ok(mr) = n.e.reg_mr(pick(&n.pds, pd), addr, len, remote, access) else {
        return;
    };
    let key = mr.key;
    if wild {
        let (id, _) = n.e.mr_by_key(key).expect("just registered");
        n.e.dereg_mr(id).expect("a fresh MR deregisters");
    } else if let Some(r) = n.note_mr(key) {
        n.mrs.push(r);
    }
}

/// `change` bit 0: PD; bit 1: range; bit 2: access.
fn rereg_mr(n: &mut Node, mr: u8, change: u8, pd: u8, range: (u16, u16), access: u8) {
    let at = usize::from(mr) % (n.mrs.len() + 1);
    let target = n.mrs.get(at).copied().unwrap_or_default();
    let req = softverbs_engine::ReregMr {
        pd: (change & 1 != 0).then(|| pick(&n.pds, pd)),
        range: (change & 2 != 0).then(|| clamp(range)),
        access: (change & 4 != 0).then_some(u32::from(access)),
    };
    if n.e.rereg_mr(target.id, &req).is_ok() {
        if let Some(r) = n.note_mr(target.key) {
            n.mrs[at] = r;
        }
    }
}

/// The SGEs a spec describes, with the lkey of the MR it names (0 for
/// none).
fn sg_list(n: &Node, s: SgeSpec) -> Vec<Sge> {
    let mr: MrRef = pick(&n.mrs, s.mr);
    (0..u64::from(s.count % 7))
        .map(|i| Sge {
            addr: mr
                .addr
                .wrapping_add(u64::from(s.offset))
                .wrapping_add(i * u64::from(s.len)),
            length: u32::from(s.len),
            lkey: mr.key,
        })
        .collect()
}

/// `qp_type` picks RC, UC or UD, or from 0xF0 on a raw (mostly invalid)
/// type number; `srq` with its top bit set means none.
fn create_qp(
    n: &mut Node,
    pd: u8,
    (scq, rcq, srq): (u8, u8, u8),
    qp_type: u8,
    caps: Caps,
    all: bool,
) {
    let qp_type = match qp_type {
        0xF0.. => u32::from(qp_type & 0x0F),
        _ => QpType::ALL[usize::from(qp_type % 3)] as u32,
    };
    let init = QpInitAttr {
        send_cq: pick(&n.cqs, scq),
        recv_cq: pick(&n.cqs, rcq),
        srq: (srq & 0x80 == 0).then(|| pick(&n.srqs, srq)),
        cap: QpCap {
            max_send_wr: u32::from(caps.send_wr),
            max_recv_wr: u32::from(caps.recv_wr),
            max_send_sge: u32::from(caps.send_sge),
            max_recv_sge: u32::from(caps.recv_sge),
            max_inline_data: u32::from(caps.inline),
        },
        qp_type,
        sq_sig_all: all,
    };
    if let Ok(created) = n.e.create_qp(pick(&n.pds, pd), &init) {
        n.qps.push(created.id);
    }
}

/// The textbook attributes for moving QP `qp` to `state % 8` (7: no such
/// state), connected to the peer's QP at the same index, then up to two
/// fields overridden and the mask bits in `flip` toggled.
fn modify_qp(n: &mut Node, peer: &Node, qp: u8, state: u8, flip: u32, edits: [(u8, u32); 2]) {
    let id = pick(&n.qps, qp);
    let (ty, current) = match n.e.query_qp(id) {
        Ok((attr, init)) => (
            QpType::from_raw(init.qp_type),
            QpState::from_raw(attr.qp_state),
        ),
        Err(_) => (None, None),
    };
    let ty = ty.unwrap_or(QpType::Rc);
    let peer_qpn = peer
        .qps
        .get(usize::from(qp) % (n.qps.len() + 1))
        .and_then(|&q| peer.e.qp_num(q).ok())
        .unwrap_or(0x1234);
    let target = u32::from(state % 8);
    let (mut attr, mask) = match QpState::from_raw(target) {
        Some(QpState::Init) if current == Some(QpState::Reset) => bringup::init(ty),
        Some(QpState::Rtr) => bringup::rtr(ty, peer_qpn, peer.gid, PSN),
        Some(QpState::Rts) if current == Some(QpState::Rtr) => bringup::rts(ty, PSN),
        _ => (QpAttr::default(), QpAttrMask::STATE),
    };
    attr.qp_state = target;
    for (field, value) in edits {
        set_qp_field(&mut attr, field % (QP_FIELDS + 1), value);
    }
    let mask = QpAttrMask::from_bits_retain(mask.bits() ^ flip);
    ignore(n.e.modify_qp(id, &attr, mask));
}

/// A send WR: `opcode % 12` (8 is BIND_MW, 10 and 11 do not exist), raw
/// flags, `inline % 1024` bytes of inline data, the remote MR, AH and QP
/// from the peer; `batch % 4` copies through `post_send_batch` (0: one
/// through `post_send`).
fn post_send(
    n: &mut Node,
    peer: &Node,
    qp: u8,
    (opcode, flags, sges, inline, imm): (u8, u8, SgeSpec, u16, u32),
    remote: Remote,
    batch: u8,
) {
    let sg_list = sg_list(n, sges);
    let inline_data = vec![0xC3; usize::from(inline % 1024)];
    let rmr: MrRef = pick(&peer.mrs, remote.mr);
    let remote_addr = rmr.iova.wrapping_add(u64::from(remote.offset));
    let remote_qpn = peer
        .qps
        .get(usize::from(remote.qp) % (peer.qps.len() + 1))
        .and_then(|&q| peer.e.qp_num(q).ok())
        .unwrap_or(u32::from(remote.qp));
    let wr = SendWr {
        wr_id: u64::from(imm),
        opcode: u32::from(opcode % 12),
        send_flags: u32::from(flags),
        sg_list: &sg_list,
        inline_data: &inline_data,
        imm_data_or_inv_rkey: imm,
        rdma: RdmaTarget {
            remote_addr,
            rkey: rmr.key,
        },
        atomic: AtomicTarget {
            remote_addr,
            compare_add: remote.compare,
            swap: remote.swap,
            rkey: rmr.key,
        },
        ud: (remote.ah != 0xFF).then(|| UdTarget {
            ah: pick(&n.ahs, remote.ah),
            remote_qpn,
            remote_qkey: remote.qkey,
        }),
    };
    let id = pick(&n.qps, qp);
    match batch % 4 {
        0 => ignore(n.e.post_send(id, &wr)),
        k => ignore(n.e.post_send_batch(id, &vec![wr; usize::from(k)])),
    }
}
