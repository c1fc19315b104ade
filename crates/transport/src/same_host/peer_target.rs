//! A same-host target as a requester reaches it: the QP, MRs and receive
//! ring its owner published in its region, its memory through
//! cross-memory attach, and its deliveries ring for what the requester
//! did there. `softverbs_engine::direct::execute` runs the responder's
//! rules against it.

use super::accessors::AccessGuard;
use super::deliveries::Delivery;
use super::layout::RegionView;
use super::{CrossProcess, PeerFault, Seg};
use softverbs_engine::direct::{
    pd_from_raw, CopyFault, DirectTarget, MrLookup, Payload, PeerQp, TargetEvent,
};
use softverbs_engine::{AccessFlags, Mr, QpState, QpType, RecvWqe, WorkCompletion};
use std::time::Duration;

/// How a published QP's `path` word reads.
pub mod path {
    /// Not decided yet (the QP has not reached RTR).
    pub const UNDECIDED: u8 = 0;
    /// Its peer is on this host and reachable: whole operations.
    pub const SAME_HOST: u8 = 1;
    /// Packets.
    pub const WIRE: u8 = 2;
}

/// How long an atomic waits for its stripe lock before the target counts
/// as unreachable (a live holder keeps it for one copy).
const LOCK_WAIT: Duration = Duration::from_secs(1);

/// Deliveries ring full: tries before the delivery is given up (the owner
/// drains it whenever it runs; full means it has not run for a long time
/// while peers filled every receive WR it posted).
const PUSH_TRIES: u32 = 1000;

/// Deliveries ring slots kept free beyond a delivery: a fault and a
/// COMM_EST of other peers may need theirs.
const ROOM_FOR_A_DELIVERY: u64 = 64;

/// QP `qpn` of the context that published `region`, process `pid`.
pub struct PeerTarget<'a> {
    region: &'a RegionView,
    access: &'a dyn CrossProcess,
    pid: i32,
    qpn: u32,
    guard: Option<AccessGuard<'a>>,
    /// Something was pushed to the deliveries ring.
    pub(crate) pushed: bool,
    /// The target QP was told of its first request already (set by the
    /// caller, who remembers it across operations).
    pub(crate) comm_est_told: bool,
}

impl std::fmt::Debug for PeerTarget<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerTarget")
            .field("pid", &self.pid)
            .field("qpn", &self.qpn)
            .finish_non_exhaustive()
    }
}

impl<'a> PeerTarget<'a> {
    /// QP `qpn` in `region`, whose owner is process `pid`.
    pub fn new(
        region: &'a RegionView,
        access: &'a dyn CrossProcess,
        pid: i32,
        qpn: u32,
    ) -> PeerTarget<'a> {
        PeerTarget {
            region,
            access,
            pid,
            qpn,
            guard: None,
            pushed: false,
            comm_est_told: false,
        }
    }

    fn push(&mut self, d: Delivery) {
        let inbound = self.region.inbound();
        let pid = self.access.own_pid();
        for attempt in 0..PUSH_TRIES {
            if inbound.push_by(&d.encode(), pid).is_ok() {
                self.pushed = true;
                return;
            }
            if attempt % 64 == 63 {
                std::thread::yield_now();
            }
        }
        crate::say!(
            "softverbs: same host: the deliveries ring of pid {} stayed full; a delivery to QP {:#x} is lost",
            self.pid, self.qpn
        );
    }
}

impl PeerTarget<'_> {
    /// What a failed copy stands for. A fault in the owner's memory is a
    /// bad address of the op's, unless the owner's pid no longer maps the
    /// region (its nonce does not read back where the owner mapped it):
    /// then the pid names a new image after an exec, and the op is lost
    /// as on a dead host, before the daemon's gone word says so.
    fn copy_fault(&self, f: PeerFault) -> CopyFault {
        match f {
            PeerFault::Local => CopyFault::Local,
            PeerFault::Remote if self.owner_replaced() => CopyFault::Gone,
            PeerFault::Remote => CopyFault::Remote,
            PeerFault::Gone | PeerFault::Denied => CopyFault::Gone,
        }
    }

    /// Before a copy into or out of the owner's memory: its pid must still
    /// run the image that maps this region. After an exec the new image
    /// may map the same addresses (the daemon's gone word comes only when
    /// it has run), and a copy there put bytes into, or took them from, a
    /// program that registered nothing: WRITEs landed in an exec'd
    /// target for milliseconds under load, each completing with success.
    /// The owner's exec lock says so without a system call (the kernel
    /// marks it before the exec replaces the image); an owner that does
    /// not hold one is asked with an 8-byte read through the pid, before
    /// the copy (an exec between the two leaves the new image no time to
    /// map anything yet).
    fn owner_still_there(&self) -> Result<(), CopyFault> {
        let gone = self
            .region
            .exec_lock_says_gone()
            .unwrap_or_else(|| self.owner_replaced());
        match gone {
            true => Err(CopyFault::Gone),
            false => Ok(()),
        }
    }

    fn owner_replaced(&self) -> bool {
        let (at, nonce) = self.region.owner_check();
        let mut word = [0u8; 8];
        let read = self
            .access
            .read_peer_bytes(self.pid, &[Seg { addr: at, len: 8 }], &mut word);
        read.is_err() || u64::from_ne_bytes(word) != nonce
    }
}

impl MrLookup for PeerTarget<'_> {
    fn mr(&self, key: u32) -> Option<Mr> {
        let m = self.region.mrs().lookup(key)?;
        Some(Mr {
            pd: pd_from_raw(m.pd),
            addr: m.addr,
            length: m.length,
            iova: m.iova,
            access: AccessFlags::from_bits_truncate(m.access),
            key: m.key,
        })
    }
}

impl DirectTarget for PeerTarget<'_> {
    fn qp(&self) -> Option<PeerQp> {
        let q = self.region.qps().lookup(self.qpn)?;
        Some(PeerQp {
            qpn: q.qpn,
            state: QpState::from_raw(u32::from(q.state))?,
            qp_type: QpType::from_raw(u32::from(q.qp_type))?,
            pd: pd_from_raw(q.pd),
            access_flags: q.access_flags,
            dest_qpn: q.dest_qpn,
            min_rnr_timer: q.min_rnr_timer,
            max_dest_rd_atomic: q.max_dest_rd_atomic,
            qkey: q.qkey,
            incarnation: q.incarnation,
            mtu: u32::from(q.mtu),
            rq_psn: q.rq_psn,
        })
    }

    fn next_recv(&self) -> Option<RecvWqe> {
        if self.region.inbound().room() < ROOM_FOR_A_DELIVERY {
            // The owner has not run for a long time and its deliveries
            // ring is nearly full: as if no receive WR were posted (an RNR
            // wait, retried), so no delivery is ever lost.
            return None;
        }
        let q = self.region.qps().lookup(self.qpn)?;
        let ring = self.region.recv_ring(q.rq?)?;
        let (index, entry) = ring.peek()?;
        Some(RecvWqe {
            wr_id: entry.wr_id,
            sg_list: entry.sges,
            seq: index,
        })
    }

    fn take_recv(&mut self, seq: u64) -> bool {
        let Some(q) = self.region.qps().lookup(self.qpn) else {
            return false;
        };
        let Some(ring) = q.rq.and_then(|r| self.region.recv_ring(r)) else {
            return false;
        };
        ring.claim_at(seq)
    }

    fn write(&mut self, from: &Payload, to: &[Seg]) -> Result<(), CopyFault> {
        self.owner_still_there()?;
        let done = match from {
            Payload::Memory(local) => self.access.write_peer(self.pid, local, to),
            Payload::Inline(data) => self.access.write_peer_bytes(self.pid, data, to),
            Payload::Unusable => return Err(CopyFault::Local),
        };
        done.map_err(|f| self.copy_fault(f))
    }

    fn read(&mut self, from: Seg, to: &[Seg]) -> Result<(), CopyFault> {
        self.owner_still_there()?;
        self.access
            .read_peer(self.pid, &[from], to)
            .map_err(|f| self.copy_fault(f))
    }

    fn atomic(&mut self, addr: u64, compare: Option<u64>, value: u64) -> Result<u64, CopyFault> {
        let _held = self
            .region
            .locks()
            .lock(addr, LOCK_WAIT)
            .map_err(|_| CopyFault::Gone)?;
        self.owner_still_there()?;
        let at = [Seg { addr, len: 8 }];
        let mut word = [0u8; 8];
        self.access
            .read_peer_bytes(self.pid, &at, &mut word)
            .map_err(|f| self.copy_fault(f))?;
        let old = u64::from_ne_bytes(word);
        let new = match compare {
            Some(c) if old == c => Some(value),
            Some(_) => None,
            None => Some(old.wrapping_add(value)),
        };
        if let Some(new) = new {
            self.access
                .write_peer_bytes(self.pid, &new.to_ne_bytes(), &at)
                .map_err(|f| self.copy_fault(f))?;
        }
        Ok(old)
    }

    fn deliver(&mut self, seq: u64, wc: WorkCompletion, solicited: bool) {
        let qpn = self.qpn;
        self.push(Delivery::Received {
            qpn,
            seq,
            wc,
            solicited,
        });
    }

    fn comm_est(&mut self) {
        if !std::mem::replace(&mut self.comm_est_told, true) {
            let qpn = self.qpn;
            self.push(Delivery::CommEst { qpn });
        }
    }

    fn fail(&mut self, incarnation: u16, event: TargetEvent) {
        // Seen at once by every later request; the owner's engine takes
        // the QP through the error state when it applies the fault. A QP
        // reset since keeps its new incarnation's state, and the owner
        // drops the fault.
        let qps = self.region.qps();
        qps.set_state(self.qpn, incarnation, QpState::Err as u8);
        let qpn = self.qpn;
        self.push(Delivery::Fault {
            qpn,
            incarnation,
            event,
        });
    }

    fn access_begin(&mut self) {
        self.guard = Some(self.region.mrs().begin_access(self.access.own_pid()));
    }

    fn access_end(&mut self) {
        self.guard = None;
    }
}
