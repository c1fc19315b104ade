//! Turns a workload and its memory plan into live engine objects: nodes,
//! SRQs, QPs brought up RESET -> INIT -> RTR -> RTS with the workload's
//! attributes, and the AHs of UD senders. The memory is filled with the
//! messages and READ sources, then snapshotted for the checker.

use crate::node::{gid_of, Node};
use crate::payload::{self, Kind};
use crate::plan::{Plan, QueuePlan};
use crate::workload::{EndSpec, PairSpec, Workload, MAX_INLINE, MAX_RECV_SGE, MAX_SEND_SGE, NODES};
use softverbs_engine::{
    AccessFlags, AhAttr, AhId, FlatMemory, GlobalRoute, QpAttr, QpAttrMask, QpCap, QpId,
    QpInitAttr, QpState, QpType, SrqAttr, SrqId, VerbsResult,
};

/// Where a receive queue's WRs are posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvTarget {
    /// A QP's own receive queue.
    Qp(QpId),
    /// A shared receive queue.
    Srq(SrqId),
}

/// One QP of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpEnd {
    /// Handle.
    pub id: QpId,
    /// QP number.
    pub qpn: u32,
}

/// Everything a run needs besides the network.
#[derive(Debug)]
pub struct World {
    /// The hosts.
    pub nodes: Vec<Node>,
    /// Each node's memory right after setup.
    pub initial: Vec<FlatMemory>,
    /// Where the buffers are.
    pub plan: Plan,
    /// Per pair, the QP on each node.
    pub qps: Vec<[QpEnd; NODES]>,
    /// Per receive queue, where to post.
    pub targets: Vec<RecvTarget>,
    /// Per stream, the AH of a UD sender.
    pub ahs: Vec<Option<AhId>>,
}

impl World {
    /// Builds the world of `w`. A verb failing here is an engine
    /// failure, reported with the verb that failed.
    pub fn build(w: &Workload) -> Result<World, String> {
        let plan = Plan::new(w);
        let depth = cq_depth(w, &plan);
        let mut nodes: Vec<Node> = (0..NODES)
            .map(|n| Node::new(n, w.seed, &plan.arenas[n], depth))
            .collect();
        fill(w, &plan, &mut nodes);
        let targets = create_srqs(&plan, &mut nodes).map_err(|e| format!("create_srq: {e}"))?;
        let mut qps = Vec::new();
        for (p, pair) in w.pairs.iter().enumerate() {
            let ends = create_pair(&mut nodes, &plan, &targets, p, pair)?;
            qps.push(ends);
        }
        let targets = queue_targets(&plan, &qps, targets);
        let ahs = create_ahs(w, &mut nodes).map_err(|e| format!("create_ah: {e}"))?;
        let initial = nodes.iter().map(|n| n.mem.clone()).collect();
        Ok(World {
            nodes,
            initial,
            plan,
            qps,
            targets,
            ahs,
        })
    }

    /// Puts every QP on the same-host path (receiving into their own
    /// receive queues or SRQs alike; an SRQ may then serve QPs on both
    /// paths).
    pub fn use_same_host_path(&mut self) -> VerbsResult<()> {
        for ends in &self.qps {
            for (node, end) in self.nodes.iter_mut().zip(ends) {
                node.engine.set_direct(end.id, true)?;
            }
        }
        Ok(())
    }

    /// The QP stream `s` is sent from and the one it lands in.
    pub fn stream_ends(&self, w: &Workload, s: usize) -> (QpEnd, QpEnd) {
        let spec = &w.streams[s];
        let ends = &self.qps[spec.pair];
        (ends[spec.from], ends[spec.to()])
    }

    /// The stream that lands in QP `qpn` of node `node`, if any.
    pub fn stream_into(&self, w: &Workload, node: usize, qpn: u32) -> Option<usize> {
        w.streams
            .iter()
            .position(|s| s.to() == node && self.qps[s.pair][node].qpn == qpn)
    }
}

/// Room for every completion a node can produce: one per WR (flushes
/// included) and per receive WR.
fn cq_depth(w: &Workload, plan: &Plan) -> u32 {
    let ops: usize = w.streams.iter().map(|s| s.ops.len()).sum();
    let recvs: usize = plan.queues.iter().map(|q| q.buffers.len()).sum();
    u32::try_from(ops + recvs + 16).expect("small workload")
}

/// Writes every message into its send buffers, every READ source, and
/// every atomic target's initial value.
fn fill(w: &Workload, plan: &Plan, nodes: &mut [Node]) {
    for (i, s) in w.streams.iter().enumerate() {
        let place = &plan.streams[i];
        for (n, (o, at)) in s.ops.iter().zip(&place.ops).enumerate() {
            let len = o.len as usize;
            if o.is_send() || o.is_write() {
                let data = payload::bytes(w.seed, i, n, Kind::Message, len);
                scatter(&mut nodes[s.from].mem, &at.local, &data);
            } else if o.is_read() {
                let data = payload::bytes(w.seed, i, n, Kind::ReadSource, len);
                nodes[s.to()]
                    .mem
                    .slice_mut(at.remote, len)
                    .copy_from_slice(&data);
            }
        }
        nodes[s.to()]
            .mem
            .slice_mut(place.atomic_word, 8)
            .copy_from_slice(&s.atomic_init.to_ne_bytes());
    }
}

/// Copies `data` over the pieces in order.
fn scatter(mem: &mut FlatMemory, pieces: &[crate::plan::Piece], data: &[u8]) {
    let mut rest = data;
    for p in pieces {
        let (head, tail) = rest.split_at((p.len as usize).min(rest.len()));
        mem.slice_mut(p.addr, head.len()).copy_from_slice(head);
        rest = tail;
    }
}

/// Creates the SRQs; QP receive queues get their target once the QP exists.
fn create_srqs(plan: &Plan, nodes: &mut [Node]) -> VerbsResult<Vec<Option<SrqId>>> {
    plan.queues
        .iter()
        .map(|q| {
            if !q.srq {
                return Ok(None);
            }
            let node = &mut nodes[q.node];
            let attr = SrqAttr {
                max_wr: wr_room(q),
                max_sge: MAX_RECV_SGE,
                srq_limit: 0,
            };
            Ok(Some(node.engine.create_srq(node.pd, &attr)?.0))
        })
        .collect()
}

fn wr_room(q: &QueuePlan) -> u32 {
    u32::try_from(q.buffers.len().max(1)).expect("small workload")
}

fn queue_targets(plan: &Plan, qps: &[[QpEnd; NODES]], srqs: Vec<Option<SrqId>>) -> Vec<RecvTarget> {
    plan.queues
        .iter()
        .zip(srqs)
        .map(|(q, srq)| match (srq, q.pair) {
            (Some(srq), _) => RecvTarget::Srq(srq),
            (None, Some(p)) => RecvTarget::Qp(qps[p][q.node].id),
            (None, None) => unreachable!("a queue is an SRQ or a QP's own"),
        })
        .collect()
}

/// Creates both QPs of a pair and brings them to RTS.
fn create_pair(
    nodes: &mut [Node],
    plan: &Plan,
    srqs: &[Option<SrqId>],
    p: usize,
    pair: &PairSpec,
) -> Result<[QpEnd; NODES], String> {
    let mut ends = Vec::with_capacity(NODES);
    for (n, end) in pair.ends.iter().enumerate() {
        let q = plan
            .queues
            .iter()
            .position(|q| {
                q.node == n
                    && (q.pair == Some(p) || (q.srq && end.srq && q.qp_type == pair.qp_type))
            })
            .expect("planned");
        let created = create_qp(&mut nodes[n], pair.qp_type, end, &plan.queues[q], srqs[q])
            .map_err(|e| format!("create_qp (pair {p}, node {n}): {e}"))?;
        ends.push(created);
    }
    let ends: [QpEnd; NODES] = ends.try_into().expect("one per node");
    for (n, node) in nodes.iter_mut().enumerate() {
        bring_up(node, pair, n, &ends)
            .map_err(|e| format!("modify_qp (pair {p}, node {n}): {e}"))?;
    }
    Ok(ends)
}

fn create_qp(
    node: &mut Node,
    ty: QpType,
    end: &EndSpec,
    queue: &QueuePlan,
    srq: Option<SrqId>,
) -> VerbsResult<QpEnd> {
    let init = QpInitAttr {
        send_cq: node.send_cq,
        recv_cq: node.recv_cq,
        srq,
        cap: QpCap {
            max_send_wr: end.max_send_wr,
            max_recv_wr: wr_room(queue),
            max_send_sge: MAX_SEND_SGE,
            max_recv_sge: MAX_RECV_SGE,
            max_inline_data: MAX_INLINE,
        },
        qp_type: ty as u32,
        sq_sig_all: false,
    };
    let created = node.engine.create_qp(node.pd, &init)?;
    Ok(QpEnd {
        id: created.id,
        qpn: created.qp_num,
    })
}

/// RESET -> INIT -> RTR -> RTS with exactly the attributes each
/// transition requires for the type.
fn bring_up(node: &mut Node, pair: &PairSpec, n: usize, ends: &[QpEnd; NODES]) -> VerbsResult<()> {
    let peer = 1 - n;
    let me = &pair.ends[n];
    let attr = QpAttr {
        qkey: me.qkey,
        port_num: 1,
        qp_access_flags: (AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC)
            .bits(),
        path_mtu: pair.mtu as u32,
        dest_qp_num: ends[peer].qpn,
        rq_psn: pair.ends[peer].sq_psn,
        sq_psn: me.sq_psn,
        max_dest_rd_atomic: pair.ends[peer].max_rd_atomic,
        max_rd_atomic: me.max_rd_atomic,
        min_rnr_timer: me.min_rnr_timer,
        timeout: me.timeout,
        retry_cnt: me.retry_cnt,
        rnr_retry: me.rnr_retry,
        ah_attr: ah_to(peer),
        ..QpAttr::default()
    };
    let id = ends[n].id;
    for (state, mask) in transitions(pair.qp_type) {
        let a = QpAttr {
            qp_state: state as u32,
            ..attr
        };
        node.engine.modify_qp(id, &a, mask | QpAttrMask::STATE)?;
    }
    Ok(())
}

/// The masks of the three transitions (docs/conformance.md, required
/// columns).
fn transitions(ty: QpType) -> [(QpState, QpAttrMask); 3] {
    use QpAttrMask as M;
    let init = M::PKEY_INDEX | M::PORT;
    match ty {
        QpType::Rc => [
            (QpState::Init, init | M::ACCESS_FLAGS),
            (
                QpState::Rtr,
                M::AV
                    | M::PATH_MTU
                    | M::DEST_QPN
                    | M::RQ_PSN
                    | M::MAX_DEST_RD_ATOMIC
                    | M::MIN_RNR_TIMER,
            ),
            (
                QpState::Rts,
                M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC,
            ),
        ],
        QpType::Uc => [
            (QpState::Init, init | M::ACCESS_FLAGS),
            (QpState::Rtr, M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN),
            (QpState::Rts, M::SQ_PSN),
        ],
        QpType::Ud => [
            (QpState::Init, init | M::QKEY),
            (QpState::Rtr, M::empty()),
            (QpState::Rts, M::SQ_PSN),
        ],
    }
}

/// The address vector to node `peer`: GRH (RoCE requires one) from GID 0.
fn ah_to(peer: usize) -> AhAttr {
    AhAttr {
        grh: GlobalRoute {
            dgid: gid_of(peer),
            sgid_index: 0,
            hop_limit: 64,
            ..GlobalRoute::default()
        },
        is_global: true,
        port_num: 1,
        ..AhAttr::default()
    }
}

/// An AH on the sender of every UD stream.
fn create_ahs(w: &Workload, nodes: &mut [Node]) -> VerbsResult<Vec<Option<AhId>>> {
    w.streams
        .iter()
        .map(|s| {
            if w.pairs[s.pair].qp_type != QpType::Ud {
                return Ok(None);
            }
            let node = &mut nodes[s.from];
            node.engine.create_ah(node.pd, &ah_to(s.to())).map(Some)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_sets_up_with_qps_in_rts_and_memory_filled() {
        for seed in 0..100 {
            let w = Workload::generate(seed);
            let world = World::build(&w).expect("setup");
            for (p, ends) in world.qps.iter().enumerate() {
                for (n, end) in ends.iter().enumerate() {
                    let (attr, _) = world.nodes[n].engine.query_qp(end.id).expect("QP");
                    assert_eq!(attr.qp_state, QpState::Rts as u32, "pair {p} node {n}");
                }
            }
            for (i, s) in w.streams.iter().enumerate() {
                let (from, to) = world.stream_ends(&w, i);
                assert_eq!(world.stream_into(&w, s.to(), to.qpn), Some(i));
                assert_ne!(from.qpn, to.qpn);
                let word = world.plan.streams[i].atomic_word;
                let got = world.nodes[s.to()].mem.slice(word, 8);
                assert_eq!(u64::from_ne_bytes(got.try_into().unwrap()), s.atomic_init);
            }
        }
    }
}
