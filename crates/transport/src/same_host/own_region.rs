//! This context's region: what it publishes for its peers on the host
//! (MRs, QPs, the receive queues of same-host QPs) and the deliveries
//! they leave there, applied to the engine when this context runs.
//!
//! The engine is the source of truth; the region mirrors it. MR, QP and
//! SRQ changes come from the engine (`poll_mr_change`, `poll_qp_change`,
//! `poll_srq_change`). Every receive queue (a QP's own, or an SRQ) gets a
//! ring when first seen, handed to the engine as the queue's share
//! (`ring_share.rs`): from then on the engine posts each receive WR there
//! and its responder claims WRs there like any peer does, so the path a
//! QP uses never decides who may take a WR. A QP on an SRQ publishes the
//! SRQ's ring.

use super::arena::Arena;
use super::deliveries::Delivery;
use super::inbound::Record;
use super::layout::{format_zeroed, RegionLayout, RegionView};
use super::mr_slots::MrInfo;
use super::peer_target::path;
use super::qp_slots::{QpInfo, QpPublishError, RingRef};
use super::recv_ring::RecvRing;
use super::ring_share::RingShare;
use super::vacant_pages::{self, Withdrawal};
use super::{CrossProcess, Words};
use softverbs_engine::direct::pd_to_raw;
use softverbs_engine::{Engine, QpId, QpState, RecvQueueId, SrqId};
use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

/// The region's size. Tables hold the device's limits (an MR the table
/// could not hold would be unknown to peers, whose accesses to it would
/// fail; a QP it could not hold is reached over the wire); a region is a
/// sparse memfd, so untouched parts cost no memory.
pub const LAYOUT: RegionLayout = RegionLayout {
    mr_capacity: 1 << 18,
    qp_capacity: 1 << 17,
    inbound_capacity: 1 << 14,
    lock_stripes: 1024,
    arena_words: 1 << 25,
};

/// How long `ibv_dereg_mr`, `ibv_destroy_qp` and a move to ERR or RESET
/// wait for a peer's copy into this context's memory to end before
/// saying so (a copy is one system call; a peer stopped or starved in
/// the middle of one is the only way to reach this). A live peer's copy
/// is waited for to its end after that; one of a process this one
/// cannot judge (another pid namespace, past 64 peers) no longer.
const DEREG_WAIT: Duration = Duration::from_secs(1);

/// How far apart the index bases of two rings are (2^40 WRs a ring).
const RING_BASE_STEP: u64 = 1 << 40;

/// A receive queue's ring in the arena.
#[derive(Debug, Clone, Copy)]
struct Ring {
    at: RingRef,
    words: u64,
}

/// This context's published state.
pub struct OwnRegion {
    view: RegionView,
    fd: OwnedFd,
    arena: Arena,
    /// The index base of the last ring made (see `new_ring`).
    next_ring_base: u64,
    /// The rings of QPs' own receive queues, by QP number.
    rings: HashMap<u32, Ring>,
    srq_rings: HashMap<SrqId, Ring>,
    paths: HashMap<u32, u8>,
    published_mrs: HashSet<u32>,
    /// The QPs published in a state whose responder takes requests (RTR
    /// and after, short of ERR): leaving it waits for the peers'
    /// accesses under way ([`OwnRegion::wait_for_accesses`]).
    accepting: HashSet<u32>,
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
            next_ring_base: 0,
            rings: HashMap::new(),
            srq_rings: HashMap::new(),
            paths: HashMap::new(),
            published_mrs: HashSet::new(),
            accepting: HashSet::new(),
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
        // SRQs first: a QP created on a new SRQ publishes its ring.
        while let Some(id) = engine.poll_srq_change() {
            self.sync_srq(engine, id);
        }
        let mut undecided = Vec::new();
        while let Some((id, qpn)) = engine.poll_qp_change() {
            if self.sync_qp(engine, id, qpn) {
                undecided.push((id, qpn));
            }
        }
        undecided
    }

    fn sync_mr(&mut self, engine: &Engine, key: u32) {
        let mrs = self.view.mrs();
        let Some((_, mr)) = engine.mr_by_key(key) else {
            self.punch(mrs.withdraw(key));
            self.published_mrs.remove(&key);
            wait_for_copies(&mrs);
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
            crate::say!("softverbs: same host: the MR table is full; MR {key:#x} is not published");
        }
        if existed {
            wait_for_copies(&mrs);
        }
    }

    /// Gives a new SRQ its ring, or frees the ring of one destroyed.
    fn sync_srq(&mut self, engine: &mut Engine, id: SrqId) {
        match engine.query_srq(id) {
            Ok(attr) => {
                if self.srq_rings.contains_key(&id) {
                    return;
                }
                // Room for the most WRs the SRQ can ever hold
                // (ibv_modify_srq may grow it); a region's memory is
                // sparse, so only the slots used cost memory.
                let capacity = engine.query_device().max_srq_wr.max(attr.max_wr);
                if let Some(ring) = self.new_ring(capacity, attr.max_sge) {
                    self.srq_rings.insert(id, ring);
                    self.share(engine, RecvQueueId::Srq(id), ring);
                }
            }
            Err(_) => {
                if let Some(r) = self.srq_rings.remove(&id) {
                    self.free_ring(r);
                }
            }
        }
    }

    /// Republishes QP `id`; true if it now needs a path decided.
    fn sync_qp(&mut self, engine: &mut Engine, id: QpId, qpn: u32) -> bool {
        let Some(peer) = engine.peer_qp(id) else {
            self.forget_qp(qpn);
            if self.accepting.remove(&qpn) {
                self.wait_for_accesses();
            }
            return false;
        };
        if engine.qp_srq(id).is_none() && !self.rings.contains_key(&qpn) {
            let cap = engine.qp_cap(id).ok();
            let ring = cap.and_then(|c| self.new_ring(c.max_recv_wr, c.max_recv_sge));
            if let Some(ring) = ring {
                self.rings.insert(qpn, ring);
                self.share(engine, RecvQueueId::Qp(id), ring);
            }
        }
        if peer.state == QpState::Reset
            && self.paths.insert(qpn, path::UNDECIDED) == Some(path::SAME_HOST)
        {
            let _ = engine.set_direct(id, false);
        }
        self.publish_qp(engine, id, qpn);
        let accepts = !matches!(peer.state, QpState::Reset | QpState::Init | QpState::Err);
        if accepts {
            self.accepting.insert(qpn);
        } else if self.accepting.remove(&qpn) {
            self.wait_for_accesses();
        }
        peer.state == QpState::Rtr && self.path_of(qpn) == path::UNDECIDED
    }

    /// Waits for the peers' accesses under way (`ibv_destroy_qp` and a
    /// move to ERR or RESET of a QP that took requests return after it;
    /// a QP being set up waits for nobody): an access checks the QP
    /// after it begins, so none that began before sees the QP accepting,
    /// and none copies into this context's memory after the verb returns,
    /// as a NIC's responder stops before its destroy or modify returns.
    fn wait_for_accesses(&self) {
        wait_for_copies(&self.view.mrs());
    }

    /// A ring for a receive queue of `capacity` WRs of `max_sge` SGEs.
    fn new_ring(&mut self, capacity: u32, max_sge: u32) -> Option<Ring> {
        let (capacity, max_sge) = (capacity.max(1), max_sge.max(1));
        let words = RecvRing::words_for(capacity, max_sge)?;
        let offset = self.arena.alloc(words)?;
        let at = RingRef {
            offset,
            capacity,
            max_sge,
        };
        // The extent may hold an old ring's slots (the arena reuses and
        // merges freed extents): the index words are set before anyone
        // sees the ring, from a base no earlier ring used, so a peer
        // holding an old index claims nothing, and a delivery of an old
        // ring names a number no WR of this one has.
        self.next_ring_base += RING_BASE_STEP;
        self.view.recv_ring(at)?.start_at(self.next_ring_base);
        Some(Ring { at, words })
    }

    fn share(&self, engine: &mut Engine, queue: RecvQueueId, ring: Ring) {
        let share = RingShare::new(self.view.clone(), ring.at);
        engine.share_recv(queue, Box::new(share));
    }

    fn free_ring(&mut self, r: Ring) {
        if let Some(ring) = self.view.recv_ring(r.at) {
            ring.claim_all();
        }
        self.arena.free(r.at.offset, r.words);
    }

    /// Sets QP `qpn`'s path and republishes it.
    pub fn set_path(&mut self, engine: &Engine, id: QpId, qpn: u32, p: u8) {
        self.paths.insert(qpn, p);
        self.publish_qp(engine, id, qpn);
    }

    fn publish_qp(&mut self, engine: &Engine, id: QpId, qpn: u32) {
        let Some(q) = engine.peer_qp(id) else {
            return;
        };
        let info = QpInfo {
            qpn,
            state: q.state as u8,
            incarnation: q.incarnation,
            qp_type: q.qp_type as u8,
            path: self.path_of(qpn),
            min_rnr_timer: q.min_rnr_timer,
            max_dest_rd_atomic: q.max_dest_rd_atomic,
            pd: pd_to_raw(q.pd),
            access_flags: q.access_flags,
            dest_qpn: q.dest_qpn,
            qkey: q.qkey,
            // A path MTU is 256 to 4096 bytes.
            mtu: u16::try_from(q.mtu).unwrap_or(u16::MAX),
            rq_psn: q.rq_psn,
            rq: self.ring_of(engine, id, qpn).map(|r| r.at),
        };
        match self.view.qps().publish(&info) {
            // A peer moved the QP to ERR since: its fault is on the way in
            // the deliveries, and the QP is published again once applied.
            Ok(()) | Err(QpPublishError::StateChanged { .. }) => {}
            Err(e) => crate::say!("softverbs: same host: QP {qpn:#x} is not published: {e}"),
        }
    }

    /// The ring QP `id` (number `qpn`) receives from: its own, or its
    /// SRQ's.
    fn ring_of(&self, engine: &Engine, id: QpId, qpn: u32) -> Option<Ring> {
        match engine.qp_srq(id) {
            Some(srq) => self.srq_rings.get(&srq).copied(),
            None => self.rings.get(&qpn).copied(),
        }
    }

    fn forget_qp(&mut self, qpn: u32) {
        self.punch(self.view.qps().withdraw(qpn));
        self.paths.remove(&qpn);
        if let Some(r) = self.rings.remove(&qpn) {
            self.free_ring(r);
        }
    }

    /// Gives the kernel back the region's pages a withdrawal emptied.
    fn punch(&self, withdrawal: Withdrawal) {
        vacant_pages::punch(&self.fd, &withdrawal.vacant);
    }

    /// Withdraws every QP and MR this context published (the context is
    /// closing): peers find nothing to reach, as a NIC's peers find a
    /// closed device, and no copy into its memory is under way after.
    pub fn withdraw_all(&mut self) {
        let qpns: Vec<u32> = self.paths.keys().copied().collect();
        for qpn in qpns {
            self.forget_qp(qpn);
        }
        for (_, r) in std::mem::take(&mut self.srq_rings) {
            self.free_ring(r);
        }
        let mrs = self.view.mrs();
        for key in std::mem::take(&mut self.published_mrs) {
            self.punch(mrs.withdraw(key));
        }
        wait_for_copies(&mrs);
    }

    /// Applies what peers delivered since the last step; true if anything.
    /// Each record is applied before its slot is freed, so that a poll
    /// that finds no record waiting finds its completion in the CQ
    /// ([`Inbound::nothing_waiting`](super::inbound::Inbound::nothing_waiting)).
    pub fn drain(&mut self, engine: &mut Engine) -> bool {
        let mut any = false;
        while self
            .view
            .inbound()
            .pop_with(|record| apply(engine, &record))
            .is_some()
        {
            any = true;
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

/// What a peer's delivery record says, done to the engine.
fn apply(engine: &mut Engine, record: &Record) {
    match Delivery::decode(record) {
        Some(Delivery::Received {
            qpn,
            seq,
            wc,
            solicited,
        }) => {
            engine.apply_delivery(qpn, seq, wc, solicited);
        }
        Some(Delivery::CommEst { qpn }) => engine.apply_comm_est(qpn),
        Some(Delivery::Fault {
            qpn,
            incarnation,
            event,
        }) => engine.apply_fault(qpn, incarnation, event),
        None => {}
    }
}

/// Waits for the peers' copies into this context's memory that may have
/// seen what it just withdrew: a live peer's to their end (its bytes must
/// not land after the verb returns, when the application may reuse the
/// memory), saying so past [`DEREG_WAIT`]; one of a process this one
/// cannot judge for `DEREG_WAIT`, saying so if it did not end.
fn wait_for_copies(mrs: &super::mr_slots::MrTable<'_>) {
    let mut say_waiting = |pid: i32| {
        crate::say!(
            "softverbs: same host: process {pid} is stopped (or starved) in the middle of a copy into this context's memory; waiting for it to end or exit, so that no byte lands after this verb returns"
        )
    };
    if !mrs.wait_idle(DEREG_WAIT, &mut say_waiting) {
        crate::say!(
            "softverbs: same host: a peer's copy into this context's memory did not end within {DEREG_WAIT:?}, and its process cannot be looked at from here (another pid namespace, or past 64 peer processes)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softverbs_engine::DeviceLimits;

    /// The region the provider makes puts both tables' slots on cache
    /// lines, so that a lone entry's withdrawal gives its page back (a
    /// table whose slots could straddle pages would punch none).
    #[test]
    fn the_real_layout_lets_both_tables_give_pages_back() {
        use super::super::mr_slots::MrTable;
        use super::super::qp_slots::QpTable;
        use std::sync::atomic::AtomicU64;
        let parts = LAYOUT.parts().unwrap();
        let words = |n: usize| -> Vec<AtomicU64> { (0..n).map(|_| AtomicU64::new(0)).collect() };
        let part = words(MrTable::words_for(4096).unwrap());
        let mrs = MrTable::new(&part, parts.mrs.offset as u64 * 8, 4096);
        let freed = (1..=32)
            .filter(|&key| {
                mrs.publish(&MrInfo {
                    key,
                    ..MrInfo::default()
                })
                .unwrap();
                !mrs.withdraw(key).vacant.is_empty()
            })
            .count();
        assert!(
            freed >= 28,
            "MR withdrawals freed a page {freed} times in 32"
        );
        let part = words(QpTable::words_for(4096).unwrap());
        let qps = QpTable::new(&part, parts.qps.offset as u64 * 8, 4096);
        let freed = (1..=32)
            .filter(|&qpn| {
                qps.publish(&QpInfo {
                    qpn,
                    ..QpInfo::default()
                })
                .unwrap();
                !qps.withdraw(qpn).vacant.is_empty()
            })
            .count();
        assert!(
            freed >= 28,
            "QP withdrawals freed a page {freed} times in 32"
        );
    }

    /// Every MR a context may register is published: a peer that cannot
    /// find an rkey fails the access (REM_ACCESS_ERR), with no wire to
    /// fall back on. (The table once held 65,536 of the device's 262,144.)
    #[test]
    fn the_region_publishes_as_many_mrs_as_the_device_registers() {
        let max_mr = DeviceLimits::default().max_mr as usize;
        assert!(
            LAYOUT.mr_capacity >= max_mr,
            "{} < {max_mr}",
            LAYOUT.mr_capacity
        );
        assert!(LAYOUT.total_bytes().is_some());
    }

    /// Every QP a context may create can be published, so none takes the
    /// wire for want of a slot. (The table once held 32,768 of the
    /// device's 131,072; the rest went over the wire with a log line.)
    #[test]
    fn the_region_publishes_as_many_qps_as_the_device_creates() {
        let max_qp = DeviceLimits::default().max_qp as usize;
        assert!(
            LAYOUT.qp_capacity >= max_qp,
            "{} < {max_qp}",
            LAYOUT.qp_capacity
        );
    }
}
