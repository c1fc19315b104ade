//! This context's region: what it publishes for its peers on the host
//! (MRs, QPs, the receive queues of same-host QPs) and the deliveries
//! they leave there, applied to the engine when this context runs.
//!
//! The engine is the source of truth; the region mirrors it. MR and QP
//! changes come from the engine (`poll_mr_change`, `poll_qp_change`).
//! Receive WRs are mirrored by count: the first `mirrored` WRs of a
//! same-host QP's receive queue are in its ring (taken by a peer or not),
//! so the rest were posted since and are pushed at the next step; a
//! delivery applied retires the oldest, and a flush or reset empties both.

use super::arena::Arena;
use super::deliveries::Delivery;
use super::layout::{format_zeroed, RegionLayout, RegionView};
use super::mr_slots::MrInfo;
use super::peer_target::path;
use super::qp_slots::{QpInfo, QpPublishError, RingRef};
use super::recv_ring::RecvRing;
use super::{CrossProcess, Words};
use softverbs_engine::direct::pd_to_raw;
use softverbs_engine::{Engine, QpId, QpState};
use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

/// The region's size. Tables hold the device's limits; a region is a
/// sparse memfd, so untouched parts cost no memory.
pub const LAYOUT: RegionLayout = RegionLayout {
    mr_capacity: 1 << 16,
    qp_capacity: 1 << 15,
    inbound_capacity: 1 << 14,
    lock_stripes: 1024,
    arena_words: 1 << 25,
};

/// How long `ibv_dereg_mr` waits for a peer's copy into the MR to end (a
/// copy is one system call; a peer stopped in the middle of one is the
/// only way to reach this).
const DEREG_WAIT: Duration = Duration::from_secs(1);

/// A same-host QP's receive ring and how much of the engine's receive
/// queue is in it.
#[derive(Debug, Clone, Copy)]
struct Ring {
    at: RingRef,
    words: u64,
    mirrored: usize,
}

/// This context's published state.
pub struct OwnRegion {
    view: RegionView,
    fd: OwnedFd,
    arena: Arena,
    rings: HashMap<u32, Ring>,
    paths: HashMap<u32, u8>,
    published_mrs: HashSet<u32>,
}

impl std::fmt::Debug for OwnRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnRegion")
            .field("rings", &self.rings.len())
            .finish_non_exhaustive()
    }
}

/// A QP that reached RTR and needs its path decided.
pub type Undecided = (QpId, u32);

impl OwnRegion {
    /// A new region for process `pid`, made by `access`.
    pub fn create(access: &dyn CrossProcess, pid: i32) -> io::Result<OwnRegion> {
        let bytes = LAYOUT
            .total_bytes()
            .ok_or_else(|| io::Error::other("same-host region layout overflows"))?;
        let (fd, words): (OwnedFd, Arc<dyn Words>) = access.create_region(bytes)?;
        // A new memfd reads as zeros: only what is not zero is written.
        format_zeroed(words.words(), pid, &LAYOUT).map_err(io::Error::other)?;
        let view = RegionView::open(words).map_err(io::Error::other)?;
        let arena = Arena::new(view.arena().len() as u64);
        Ok(OwnRegion {
            view,
            fd,
            arena,
            rings: HashMap::new(),
            paths: HashMap::new(),
            published_mrs: HashSet::new(),
        })
    }

    /// The region's descriptor and size, for the daemon.
    pub fn fd(&self) -> (&OwnedFd, u64) {
        let bytes = LAYOUT.total_bytes().unwrap_or(0) as u64;
        (&self.fd, bytes)
    }

    /// The region.
    pub fn view(&self) -> &RegionView {
        &self.view
    }

    /// The path of our QP `qpn`.
    pub fn path_of(&self, qpn: u32) -> u8 {
        self.paths.get(&qpn).copied().unwrap_or(path::UNDECIDED)
    }

    /// Publishes what changed in the engine; returns the QPs that reached
    /// RTR with no path decided.
    pub fn sync(&mut self, engine: &mut Engine) -> Vec<Undecided> {
        while let Some(key) = engine.poll_mr_change() {
            self.sync_mr(engine, key);
        }
        let mut undecided = Vec::new();
        while let Some((id, qpn)) = engine.poll_qp_change() {
            if self.sync_qp(engine, id, qpn) {
                undecided.push((id, qpn));
            }
        }
        while let Some(id) = engine.poll_recv_posted() {
            self.mirror_receives(engine, id);
        }
        undecided
    }

    fn sync_mr(&mut self, engine: &Engine, key: u32) {
        let mrs = self.view.mrs();
        let Some((_, mr)) = engine.mr_by_key(key) else {
            mrs.withdraw(key);
            self.published_mrs.remove(&key);
            idle_or_say(mrs.wait_idle(DEREG_WAIT));
            return;
        };
        let info = MrInfo {
            key,
            pd: pd_to_raw(mr.pd),
            addr: mr.addr,
            length: mr.length,
            iova: mr.iova,
            access: mr.access.bits(),
        };
        let existed = !self.published_mrs.insert(key);
        if mrs.publish(&info).is_err() {
            eprintln!("softverbs: same host: the MR table is full; MR {key:#x} is not published");
        }
        if existed {
            idle_or_say(mrs.wait_idle(DEREG_WAIT));
        }
    }

    /// Republishes QP `id`; true if it now needs a path decided.
    fn sync_qp(&mut self, engine: &mut Engine, id: QpId, qpn: u32) -> bool {
        let Some(peer) = engine.peer_qp(id) else {
            self.forget_qp(qpn);
            return false;
        };
        let ring = self.ring_for(engine, id, qpn, peer.srq);
        match peer.state {
            QpState::Reset | QpState::Init => {
                // Indices only grow (claim_all, never a reset), so a peer
                // still holding an index of the old connection claims
                // nothing of the new one.
                if let Some(r) = ring.and_then(|r| self.view.recv_ring(r.at)) {
                    r.claim_all();
                }
                self.set_mirrored(qpn, 0);
                if self.paths.insert(qpn, path::UNDECIDED) == Some(path::SAME_HOST) {
                    let _ = engine.set_direct(id, false);
                }
            }
            QpState::Err => {
                // The engine flushed its receive queue: peers take none.
                if let Some(r) = ring.and_then(|r| self.view.recv_ring(r.at)) {
                    r.claim_all();
                }
                self.set_mirrored(qpn, 0);
            }
            _ => {}
        }
        self.publish_qp(engine, id, qpn);
        peer.state == QpState::Rtr && self.path_of(qpn) == path::UNDECIDED
    }

    fn set_mirrored(&mut self, qpn: u32, n: usize) {
        if let Some(r) = self.rings.get_mut(&qpn) {
            r.mirrored = n;
        }
    }

    /// Sets QP `qpn`'s path and republishes it.
    pub fn set_path(&mut self, engine: &Engine, id: QpId, qpn: u32, p: u8) {
        self.paths.insert(qpn, p);
        self.publish_qp(engine, id, qpn);
        // The receive WRs posted before the path was known.
        self.mirror_receives(engine, id);
    }

    fn publish_qp(&mut self, engine: &Engine, id: QpId, qpn: u32) {
        let Some(q) = engine.peer_qp(id) else {
            return;
        };
        let info = QpInfo {
            qpn,
            state: q.state as u8,
            qp_type: q.qp_type as u8,
            path: self.path_of(qpn),
            min_rnr_timer: q.min_rnr_timer,
            max_dest_rd_atomic: q.max_dest_rd_atomic,
            pd: pd_to_raw(q.pd),
            access_flags: q.access_flags,
            dest_qpn: q.dest_qpn,
            qkey: q.qkey,
            mtu: 0,
            rq: self.rings.get(&qpn).map(|r| r.at),
        };
        match self.view.qps().publish(&info) {
            // A peer moved the QP to ERR since: its fault is on the way in
            // the deliveries, and the QP is published again once applied.
            Ok(()) | Err(QpPublishError::StateChanged { .. }) => {}
            Err(e) => eprintln!("softverbs: same host: QP {qpn:#x} is not published: {e}"),
        }
    }

    /// The ring of QP `qpn`, made when the QP is first seen (a QP on an
    /// SRQ has none).
    fn ring_for(&mut self, engine: &Engine, id: QpId, qpn: u32, srq: bool) -> Option<Ring> {
        if srq {
            return None;
        }
        if let Some(r) = self.rings.get(&qpn) {
            return Some(*r);
        }
        let cap = engine.qp_cap(id).ok()?;
        let capacity = cap.max_recv_wr.max(1);
        let max_sge = cap.max_recv_sge.max(1);
        let words = RecvRing::words_for(capacity, max_sge)?;
        let offset = self.arena.alloc(words)?;
        let at = RingRef {
            offset,
            capacity,
            max_sge,
        };
        let ring = Ring {
            at,
            words,
            mirrored: 0,
        };
        // A fresh extent reads as an empty ring (zeros); a reused one was
        // emptied by claim_all when its QP went, and keeps its indices.
        self.rings.insert(qpn, ring);
        Some(ring)
    }

    fn forget_qp(&mut self, qpn: u32) {
        self.view.qps().withdraw(qpn);
        self.paths.remove(&qpn);
        if let Some(r) = self.rings.remove(&qpn) {
            if let Some(ring) = self.view.recv_ring(r.at) {
                ring.claim_all();
            }
            self.arena.free(r.at.offset, r.words);
        }
    }

    /// Withdraws every QP and MR this context published (the context is
    /// closing): peers find nothing to reach, as a NIC's peers find a
    /// closed device, and no copy into its memory is under way after.
    pub fn withdraw_all(&mut self) {
        let qpns: Vec<u32> = self.paths.keys().copied().collect();
        for qpn in qpns {
            self.forget_qp(qpn);
        }
        let mrs = self.view.mrs();
        for key in self.published_mrs.drain() {
            mrs.withdraw(key);
        }
        if !mrs.wait_idle(DEREG_WAIT) {
            eprintln!("softverbs: same host: a peer's copy into this context did not end within {DEREG_WAIT:?}");
        }
    }

    /// Pushes the receive WRs posted to QP `id` since it was last
    /// mirrored to its ring, if it is a same-host QP.
    fn mirror_receives(&mut self, engine: &Engine, id: QpId) {
        let Ok(qpn) = engine.qp_num(id) else {
            return;
        };
        if self.paths.get(&qpn) != Some(&path::SAME_HOST) {
            return;
        }
        let Some(ring) = self.rings.get_mut(&qpn) else {
            return;
        };
        if engine.recv_queue_len(id) <= ring.mirrored {
            return;
        }
        let Some(r) = self.view.recv_ring(ring.at) else {
            return;
        };
        for wqe in engine.recv_queue(id).skip(ring.mirrored) {
            if r.push(wqe.wr_id, &wqe.sg_list).is_err() {
                break;
            }
            ring.mirrored += 1;
        }
    }

    /// Applies what peers delivered since the last step; true if anything.
    pub fn drain(&mut self, engine: &mut Engine) -> bool {
        let mut any = false;
        while let Some(record) = self.view.inbound().pop() {
            any = true;
            match Delivery::decode(&record) {
                Some(Delivery::Received { qpn, wc, solicited })
                    if engine.apply_delivery(qpn, wc, solicited) =>
                {
                    if let Some(r) = self.rings.get_mut(&qpn) {
                        r.mirrored = r.mirrored.saturating_sub(1);
                    }
                }
                Some(Delivery::CommEst { qpn }) => engine.apply_comm_est(qpn),
                Some(Delivery::Fault { qpn, event }) => engine.apply_fault(qpn, event),
                Some(Delivery::Received { .. }) | None => {}
            }
        }
        any
    }

    /// Whether deliveries wait (the progress thread must not sleep). A
    /// slot claimed by a peer that died before filling it is skipped
    /// here, or it would hold back every delivery behind it.
    pub fn has_deliveries(&self) -> bool {
        let inbound = self.view.inbound();
        inbound.peek_nonempty() || inbound.reap_dead_claim()
    }
}

/// A withdrawn MR a peer is still copying into after the wait: a peer
/// stopped (or killed) in the middle of a copy. Said, since the memory
/// may be reused by the application meanwhile.
fn idle_or_say(idle: bool) {
    if !idle {
        eprintln!(
            "softverbs: same host: a peer's copy into a deregistered MR did not end within {DEREG_WAIT:?} (a peer stopped or killed mid-copy)"
        );
    }
}
