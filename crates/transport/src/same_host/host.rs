//! The same-host path of one context, as the driver runs it: the region
//! it publishes, the regions of its peers, the decision of each QP's path
//! at RTR, and the execution of the operations its same-host QPs hand
//! out (`softverbs_engine::direct`).

use super::layout::RegionView;
use super::liveness::is_gone;
use super::own_region::OwnRegion;
use super::peer_target::{path, PeerTarget};
use super::CrossProcess;
use crate::endpoint::Endpoint;
use crate::slots::slot_of;
use softverbs_engine::direct::{execute, DirectOp, DirectOutcome};
use softverbs_engine::{Engine, HostMemory, Nanos, QpId, QpType};
use std::collections::{HashMap, HashSet};
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `SOFTVERBS_SHM`: whether same-host QPs use the same-host path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShmMode {
    /// `0`: always the wire.
    Off,
    /// Unset: the same-host path where it works, the wire (with a log
    /// line saying why) where not.
    Auto,
    /// `1`: a same-host peer that cannot be reached directly is an error.
    Required,
}

impl ShmMode {
    /// From the environment (`SOFTVERBS_SHM`). Unset, a process that
    /// captures its packets (`SOFTVERBS_PCAP`) or has packet fault rules
    /// (`SOFTVERBS_FAULTS`) uses the wire, since the same-host path has no
    /// packets to capture or disturb.
    pub fn from_env() -> ShmMode {
        let packet_rules = || {
            softverbs_faults::FaultSpec::from_env()
                .is_ok_and(|spec| spec.is_some_and(|s| s.has_packet_rules()))
        };
        match std::env::var("SOFTVERBS_SHM").as_deref() {
            Ok("0") => return ShmMode::Off,
            Ok("1") => return ShmMode::Required,
            Ok("") | Err(_) => {}
            // Said, as a bad SOFTVERBS_UDP_PORT is: `yes` or `off` were
            // taken as unset in silence.
            Ok(other) => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    crate::say!(
                        "softverbs: SOFTVERBS_SHM={other} is neither 0 nor 1; taken as unset"
                    )
                });
            }
        }
        if std::env::var_os("SOFTVERBS_PCAP").is_some() || packet_rules() {
            ShmMode::Off
        } else {
            ShmMode::Auto
        }
    }
}

/// The progress thread's side of this context's doorbell, reachable
/// without the driver: after each sleep the thread tells peers it is
/// awake, and taking the driver only for that, often from a verb that
/// held it, cost a lock hand-off per wake-up.
#[derive(Debug)]
pub struct DoorbellAnswer {
    region: RegionView,
    doorbell: Arc<OwnedFd>,
}

impl DoorbellAnswer {
    /// The progress thread is awake: peers need not ring. (Only the
    /// progress thread arms and disarms the doorbell:
    /// [`SameHost::may_sleep`] and this.)
    pub fn awake(&self) {
        self.region.doorbell().disarm();
        let mut buf = [0u8; 8];
        let _ = nix::unistd::read(&*self.doorbell, &mut buf);
    }

    /// The exec lock of this context's region, for the progress thread.
    pub fn exec_lock(&self) -> ExecLock<'_> {
        ExecLock {
            region: &self.region,
        }
    }
}

/// The exec lock of a context's region (`layout.rs`, `H_EXEC_LOCK`): the
/// progress thread takes it as it starts and gives it back as it ends,
/// through the embedder (`Notify::progress_thread_started`), which
/// owns the C library's mutex; peers then learn of an exec from it.
#[derive(Debug)]
pub struct ExecLock<'a> {
    region: &'a RegionView,
}

impl ExecLock<'_> {
    /// Where the mutex lies: [`super::layout::EXEC_LOCK_WORDS`] words,
    /// 8-byte aligned, in a mapping that outlives the progress thread.
    pub fn addr(&self) -> usize {
        self.region.exec_lock_addr()
    }

    /// Bytes the mutex may take.
    pub fn bytes(&self) -> usize {
        super::layout::EXEC_LOCK_WORDS * 8
    }

    /// The progress thread holds it (`true`), so peers may trust it, or
    /// is about to give it back (`false`).
    pub fn arm(&self, on: bool) {
        self.region.arm_exec_lock(on);
    }
}

/// A peer context on this host.
struct Peer {
    pid: i32,
    region: RegionView,
    doorbell: OwnedFd,
}

/// What a lookup of a QP block found.
enum Found {
    Peer(Peer),
    /// Not reachable directly, and why; when that was found.
    No(String, Instant),
}

/// A look at this context's deliveries ring from any thread of the
/// process, without the driver: whether peers' deliveries may wait for
/// it to apply them.
#[derive(Debug, Clone)]
pub struct DeliveriesWatch(RegionView);

impl DeliveriesWatch {
    /// True when, for certain, none waits and every one taken is applied
    /// (its completion is in its CQ).
    pub fn nothing_waiting(&self) -> bool {
        self.0.inbound().nothing_waiting()
    }
}

/// How long a UD sender trusts a block's "not reachable directly" before
/// it asks the daemon again (the block may have a new owner since).
const REFUSAL_KEPT: Duration = Duration::from_secs(1);

/// The same-host path of one context.
pub struct SameHost {
    mode: ShmMode,
    access: Arc<dyn CrossProcess>,
    own: OwnRegion,
    doorbell: Arc<OwnedFd>,
    peers: HashMap<u16, Found>,
    device_ip: IpAddr,
    /// Connections (target pid and QP number, our QP number) whose target
    /// was told its first request arrived: COMM_EST is raised once, so it
    /// is sent once, not with every request to a QP that stays in RTR.
    /// Forgotten when our QP connects again.
    comm_est_told: HashSet<(i32, u32, u32)>,
    /// Whether an IP address is this network namespace's (UD datagrams
    /// ask for every destination; interfaces are listed once per address).
    local_ips: HashMap<IpAddr, bool>,
    /// Our RC and UC QPs on the path whose peer QP's path is not known
    /// yet ([`SameHost::confirm_peers`]).
    unconfirmed: Vec<QpId>,
}

impl std::fmt::Debug for SameHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SameHost")
            .field("mode", &self.mode)
            .field("peers", &self.peers.len())
            .finish_non_exhaustive()
    }
}

impl SameHost {
    /// Creates this context's region and publishes it through the daemon.
    pub fn start(
        mode: ShmMode,
        access: Arc<dyn CrossProcess>,
        endpoint: &mut Endpoint,
        engine: &mut Engine,
        device_ip: IpAddr,
    ) -> io::Result<SameHost> {
        let own = OwnRegion::create(&*access, std::process::id() as i32)?;
        let doorbell: OwnedFd = nix::sys::eventfd::EventFd::from_value_and_flags(
            0,
            nix::sys::eventfd::EfdFlags::EFD_CLOEXEC | nix::sys::eventfd::EfdFlags::EFD_NONBLOCK,
        )?
        .into();
        let (fd, bytes) = own.fd();
        endpoint.publish(fd.as_fd(), doorbell.as_fd(), bytes)?;
        engine.track_changes();
        Ok(SameHost {
            mode,
            access,
            own,
            doorbell: Arc::new(doorbell),
            peers: HashMap::new(),
            device_ip,
            comm_est_told: HashSet::new(),
            local_ips: HashMap::new(),
            unconfirmed: Vec::new(),
        })
    }

    /// Our region's stripe locks, which every atomic on our memory takes.
    pub fn locks(&self) -> super::atomic_lock::LockTable<'_> {
        self.own.view().locks()
    }

    /// A watch on the deliveries peers leave for this context.
    pub fn deliveries_watch(&self) -> DeliveriesWatch {
        DeliveriesWatch(self.own.view().clone())
    }

    /// What the progress thread tells peers with when it wakes.
    pub fn doorbell_answer(&self) -> DoorbellAnswer {
        DoorbellAnswer {
            region: self.own.view().clone(),
            doorbell: self.doorbell.clone(),
        }
    }

    /// The descriptor peers write to wake this context's progress thread.
    pub fn doorbell(&self) -> &OwnedFd {
        &self.doorbell
    }

    /// One step: publish what changed, decide the paths of QPs that
    /// reached RTR, execute what same-host QPs hand out, apply what peers
    /// delivered.
    pub fn step(
        &mut self,
        engine: &mut Engine,
        mem: &mut dyn HostMemory,
        endpoint: &mut Endpoint,
        now: Nanos,
    ) {
        self.own.drain(engine);
        for (id, qpn) in self.own.sync(engine) {
            let p = self.decide(engine, endpoint, id);
            self.own.set_path(engine, id, qpn, p);
        }
        self.confirm_peers(engine, endpoint);
        while let Some(op) = engine.poll_direct(now) {
            if let Some(outcome) = self.run(engine, endpoint, &op) {
                // What the target did comes first, as a responder's
                // completions precede its ACK or NAK: where the target is
                // a QP of this context (one connected to itself), the
                // receive WR a SEND failed in completes with its error
                // before the NAK fails the QP and flushes the rest.
                // Another context's deliveries are its own to apply.
                if endpoint.slots().contains(&slot_of(op.dest_qpn)) {
                    self.own.drain(engine);
                }
                engine.handle_direct(now, &op, outcome, mem);
            }
        }
        self.own.drain(engine);
        for (id, qpn) in self.own.sync(engine) {
            let p = self.decide(engine, endpoint, id);
            self.own.set_path(engine, id, qpn, p);
        }
    }

    /// Applies what peers delivered (before a verb, so a `poll_cq` sees it).
    pub fn apply_deliveries(&mut self, engine: &mut Engine) {
        self.own.drain(engine);
    }

    /// Before the progress thread sleeps: asks peers to ring; false if
    /// deliveries already wait (do not sleep).
    pub fn may_sleep(&self) -> bool {
        self.own.view().doorbell().arm();
        !self.own.has_deliveries()
    }

    /// Executes `op` at its target; `None` when the target uses the wire
    /// and the QP went back to it (the engine then sends packets).
    fn run(
        &mut self,
        engine: &mut Engine,
        endpoint: &mut Endpoint,
        op: &DirectOp,
    ) -> Option<DirectOutcome> {
        if let Some(ud) = op.ud {
            return Some(self.run_datagram(endpoint, op, ud.dst_gid.to_ip()));
        }
        let Some(Found::Peer(peer)) = self.peers.get(&slot_of(op.dest_qpn)) else {
            return Some(DirectOutcome::Dropped);
        };
        let published = peer.region.qps().lookup(op.dest_qpn);
        match published.map(|q| q.path) {
            Some(path::SAME_HOST) => {}
            Some(path::WIRE) => {
                // The peer decided otherwise (SOFTVERBS_SHM=0 there, or it
                // cannot reach us): both ends must use the same path.
                let _ = engine.set_direct(op.qp, false);
                let qpn = op.src_qpn;
                self.own.set_path(engine, op.qp, qpn, path::WIRE);
                return None;
            }
            // Not at RTR yet, or gone: as a packet to such a QP, dropped.
            _ => return Some(DirectOutcome::Dropped),
        }
        self.execute_at(op, slot_of(op.dest_qpn))
    }

    /// Executes `op` at its target QP in the region of block `block`'s
    /// owner (known to be a reachable peer).
    fn execute_at(&mut self, op: &DirectOp, block: u16) -> Option<DirectOutcome> {
        let Some(Found::Peer(peer)) = self.peers.get(&block) else {
            return Some(DirectOutcome::Dropped);
        };
        if peer.region.owner_gone() {
            // Its pid may name a new image now (exec): nothing of it is
            // touched, and the op is lost as on a dead host.
            return Some(DirectOutcome::Dropped);
        }
        let mut target = PeerTarget::new(&peer.region, &*self.access, peer.pid, op.dest_qpn);
        let key = (peer.pid, op.dest_qpn, op.src_qpn);
        target.comm_est_told = self.comm_est_told.contains(&key);
        let outcome = execute(op, &mut target);
        if target.comm_est_told {
            self.comm_est_told.insert(key);
        }
        if target.pushed && peer.region.doorbell().take() {
            let _ = nix::unistd::write(&peer.doorbell, &1u64.to_ne_bytes());
        }
        if matches!(outcome, DirectOutcome::Rnr { .. }) && is_gone(peer.pid) {
            // An empty receive queue of a dead process is no RNR NAK: no
            // answer at all, so the requester's retries run out (with
            // rnr_retry 7 it would wait for ever). Only a killed process
            // whose daemon connection has not been seen closing yet gets
            // here.
            return Some(DirectOutcome::Dropped);
        }
        Some(outcome)
    }

    /// A UD datagram for QP `op.dest_qpn` at address `ip`: executed at a
    /// peer on this host that publishes that QP, or `Wire` (another host,
    /// a peer not reachable directly, or one that keeps the wire).
    fn run_datagram(
        &mut self,
        endpoint: &mut Endpoint,
        op: &DirectOp,
        ip: IpAddr,
    ) -> DirectOutcome {
        if !self.is_local(ip) {
            return DirectOutcome::Wire;
        }
        let block = slot_of(op.dest_qpn);
        let refresh = match self.peers.get(&block) {
            None => true,
            Some(Found::No(_, at)) => at.elapsed() > REFUSAL_KEPT,
            // The owner may have left and the block gone to another.
            Some(Found::Peer(p)) => {
                p.region.owner_gone()
                    || p.region.qps().lookup(op.dest_qpn).is_none() && is_gone(p.pid)
            }
        };
        if refresh {
            let found = self.look_up(endpoint, op.dest_qpn);
            self.remember(block, found);
        }
        let Some(Found::Peer(peer)) = self.peers.get(&block) else {
            return DirectOutcome::Wire;
        };
        match peer.region.qps().lookup(op.dest_qpn).map(|q| q.path) {
            Some(path::SAME_HOST) => self.execute_at(op, block).unwrap_or(DirectOutcome::Dropped),
            // Its context keeps the wire (SOFTVERBS_SHM=0 there).
            Some(path::WIRE) => DirectOutcome::Wire,
            // Not ready to receive (before RTR) or no such QP: a NIC
            // drops such a datagram.
            _ => DirectOutcome::Dropped,
        }
    }

    /// Whether `ip` is an address of this network namespace.
    fn is_local(&mut self, ip: IpAddr) -> bool {
        *self
            .local_ips
            .entry(ip)
            .or_insert_with(|| crate::netif::is_local(ip))
    }

    /// The path of QP `id`, which reached RTR.
    fn decide(&mut self, engine: &mut Engine, endpoint: &mut Endpoint, id: QpId) -> u8 {
        let p = self.choose(engine, endpoint, id);
        let _ = engine.set_direct(id, p == path::SAME_HOST);
        if p == path::SAME_HOST && !self.unconfirmed.contains(&id) {
            self.unconfirmed.push(id);
        }
        if let Ok(qpn) = engine.qp_num(id) {
            self.comm_est_told.retain(|&(_, _, ours)| ours != qpn);
        }
        p
    }

    /// Tells the engine which of our RC and UC QPs on the path have a peer
    /// QP on it too, as its record says once it has decided: that peer
    /// sends nothing on the wire, so packets claiming to come from it are
    /// dropped (`Engine::set_peer_direct`). A peer that keeps the wire (a
    /// target that never sends stays on the path while its requester,
    /// which decided otherwise, sends it packets) leaves our QP taking
    /// them. Asked at each step until the peer has decided.
    fn confirm_peers(&mut self, engine: &mut Engine, endpoint: &Endpoint) {
        if self.unconfirmed.is_empty() {
            return;
        }
        let (peers, own) = (&self.peers, &self.own);
        self.unconfirmed.retain(|&id| {
            let Ok((attr, init)) = engine.query_qp(id) else {
                return false;
            };
            if !engine.is_direct(id) || QpType::from_raw(init.qp_type) == Some(QpType::Ud) {
                return false;
            }
            let dest = attr.dest_qp_num;
            let path = if endpoint.slots().contains(&slot_of(dest)) {
                Some(own.path_of(dest))
            } else {
                match peers.get(&slot_of(dest)) {
                    Some(Found::Peer(p)) => p.region.qps().lookup(dest).map(|q| q.path),
                    _ => None,
                }
            };
            match path {
                Some(path::SAME_HOST) => {
                    let _ = engine.set_peer_direct(id);
                    false
                }
                // Not at RTR yet: asked again at the next step.
                Some(path::UNDECIDED) => true,
                // The wire, or a peer gone.
                _ => false,
            }
        });
    }

    /// [`SameHost::decide`] without the engine's side. A UD QP takes the
    /// path unless it is off: each datagram is then sent directly or as a
    /// packet by its destination (`run_datagram`).
    fn choose(&mut self, engine: &mut Engine, endpoint: &mut Endpoint, id: QpId) -> u8 {
        let ud = engine
            .query_qp(id)
            .ok()
            .and_then(|(_, i)| QpType::from_raw(i.qp_type));
        if ud == Some(QpType::Ud) {
            return if self.mode == ShmMode::Off {
                path::WIRE
            } else {
                path::SAME_HOST
            };
        }
        match self.reachable(engine, endpoint, id) {
            Ok(()) => path::SAME_HOST,
            Err(Some(why)) => {
                let qpn = engine.qp_num(id).unwrap_or(0);
                if self.mode == ShmMode::Required {
                    crate::say!("softverbs: QP {qpn:#x}: SOFTVERBS_SHM=1 and the same-host path is refused: {why}; the QP enters the error state");
                    let _ = engine.modify_qp(
                        id,
                        &softverbs_engine::QpAttr {
                            qp_state: softverbs_engine::QpState::Err as u32,
                            ..Default::default()
                        },
                        softverbs_engine::QpAttrMask::STATE,
                    );
                } else {
                    crate::say!("softverbs: QP {qpn:#x} uses the wire path: {why}");
                }
                path::WIRE
            }
            Err(None) => path::WIRE,
        }
    }

    /// Whether QP `id`'s peer is on this host and reachable directly.
    /// `Err(None)`: not on this host (no log line); `Err(Some(why))`: on
    /// this host but not reachable.
    fn reachable(
        &mut self,
        engine: &Engine,
        endpoint: &mut Endpoint,
        id: QpId,
    ) -> Result<(), Option<String>> {
        if self.mode == ShmMode::Off {
            return Err(None);
        }
        let (attr, _) = engine.query_qp(id).map_err(|_| None)?;
        let dgid = attr.ah_attr.grh.dgid;
        if !crate::netif::is_local(dgid.route(self.device_ip)) {
            return Err(None);
        }
        let block = slot_of(attr.dest_qp_num);
        // A refusal may not last (the daemon restarted, the peer came
        // up), and a peer that is gone gave its block back: ask again.
        let stale = match self.peers.get(&block) {
            // Gone by the daemon's word too: an exec'd owner keeps its pid.
            Some(Found::Peer(p)) => p.region.owner_gone() || is_gone(p.pid),
            Some(Found::No(..)) | None => true,
        };
        if stale {
            let found = self.look_up(endpoint, attr.dest_qp_num);
            self.remember(block, found);
        }
        let peer = match self.peers.get(&block) {
            Some(Found::Peer(p)) => p,
            Some(Found::No(why, _)) => return Err(Some(why.clone())),
            None => return Err(None),
        };
        let qpn = engine.qp_num(id).map_err(|_| None)?;
        let theirs = peer.region.qps().lookup(attr.dest_qp_num);
        match theirs {
            Some(q) if q.dest_qpn == qpn || q.dest_qpn == 0 => {}
            // Their QP of that number is connected elsewhere: the peer is
            // on another host that reuses the number.
            Some(_) => return Err(None),
            None => return Err(Some(format!("QP {:#x} is not published", attr.dest_qp_num))),
        }
        if theirs.is_some_and(|q| q.rq.is_none()) {
            // Its region had no room for a ring of its receive queue.
            return Err(Some("the peer QP publishes no receive queue".into()));
        }
        Ok(())
    }

    /// Keeps what a lookup of `block` found, first letting go of the
    /// peers the daemon has marked gone: each holds a mapping of its
    /// region and descriptors, and a long-lived context that meets peer
    /// after peer (a server taking a new client process each time) kept
    /// them all, with the regions' memory. A later op for a forgotten
    /// block looks it up again.
    fn remember(&mut self, block: u16, found: Found) {
        self.peers.retain(|_, known| match known {
            Found::Peer(p) => !p.region.owner_gone(),
            Found::No(_, at) => at.elapsed() <= REFUSAL_KEPT,
        });
        self.peers.insert(block, found);
        let live: HashSet<i32> = self
            .peers
            .values()
            .filter_map(|known| match known {
                Found::Peer(p) => Some(p.pid),
                Found::No(..) => None,
            })
            .collect();
        self.comm_est_told.retain(|(pid, ..)| live.contains(pid));
    }

    fn look_up(&self, endpoint: &mut Endpoint, qpn: u32) -> Found {
        match self.reach(endpoint, qpn) {
            Ok(peer) => Found::Peer(peer),
            Err(why) => Found::No(why, Instant::now()),
        }
    }

    /// The context that owns QP number `qpn`'s block, if it can be
    /// reached directly; why not otherwise.
    fn reach(&self, endpoint: &mut Endpoint, qpn: u32) -> Result<Peer, String> {
        let region = match endpoint.lookup(qpn) {
            Ok(Ok(region)) => region,
            Ok(Err(refused)) => return Err(refused.to_string()),
            Err(e) => return Err(format!("the daemon's answer did not come through: {e}")),
        };
        if let Err(f) = self.access.probe(region.pid) {
            return Err(format!(
                "cross-memory attach to pid {} is refused ({f:?}: another user, Yama ptrace_scope, or a seccomp policy)",
                region.pid
            ));
        }
        let words = self
            .access
            .map_region(&region.region, region.bytes as usize)
            .map_err(|e| format!("its region does not map: {e}"))?;
        let view =
            RegionView::open(words).map_err(|e| format!("its region is not readable: {e}"))?;
        Ok(Peer {
            pid: region.pid,
            region: view,
            doorbell: region.doorbell,
        })
    }
}

impl Drop for SameHost {
    /// The context closes: peers must find nothing of it any more.
    fn drop(&mut self) {
        self.own.withdraw_all();
    }
}
