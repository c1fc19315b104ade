//! The engine the `packets` target attacks: one device with a QP of every
//! type in every state it can be in (SQE exists only for UC and UD), plus
//! an RC and a UD QP in RTS on a shared receive queue. Receive WRs are
//! posted and send WRs of every kind are in flight, so that requests,
//! responses and acknowledgements all find something to act on. Memory is
//! a `FlatMemory` with three registered regions, one with an unmapped hole;
//! every byte outside the regions the engine may write is compared after
//! the run.

use crate::bringup::{self, QKEY};
use crate::memory::{first_forbidden_change, patterned};
use softverbs_engine::{
    send_flags, send_opcode, AccessFlags, AhId, AtomicTarget, CqId, DeviceConfig, Engine,
    FlatMemory, Gid, Nanos, PdId, QpAttr, QpAttrMask, QpCap, QpId, QpInitAttr, QpState, QpType,
    RdmaTarget, RecvWr, SendWr, Sge, SrqAttr, SrqId, UdTarget, MAX_PACKET_LEN,
};
use std::net::Ipv4Addr;
use std::sync::OnceLock;

/// First address of the target's memory.
pub const MEM_BASE: u64 = 0x1000_0000;
/// Bytes of memory.
pub const MEM_LEN: usize = 0x1_0000;
/// PSN the target's QPs expect first (close to the 24-bit wrap).
pub const RQ_PSN: u32 = 0x00FF_FFF0;
/// PSN the target's QPs send from.
pub const SQ_PSN: u32 = 0x00FF_FFFA;
/// QP number of the peer of the target's QP `i` is `PEER_QPN + i`.
pub const PEER_QPN: u32 = 0x100;

/// The GID packets come from.
pub fn peer_gid() -> Gid {
    Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 1))
}

/// The target's own GID.
pub fn local_gid() -> Gid {
    Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 2))
}

/// A GID no QP is connected to.
pub fn stranger_gid() -> Gid {
    Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 3))
}

/// A registered region of the target's memory.
#[derive(Debug, Clone, Copy)]
pub struct Region {
    /// Offset from [`MEM_BASE`].
    pub offset: u64,
    /// Length.
    pub len: u64,
    /// Address remote peers use for its first byte.
    pub iova: u64,
    /// Rights.
    pub access: AccessFlags,
}

impl Region {
    /// Local address of the byte at `at`.
    pub fn addr(&self, at: u64) -> u64 {
        MEM_BASE + self.offset + at
    }

    /// Whether the engine may write here (remote writes and atomics need
    /// LOCAL_WRITE too).
    pub fn writable(&self) -> bool {
        self.access.contains(AccessFlags::LOCAL_WRITE)
    }
}

/// Every remote right, the one remote-writable region.
pub const ALL: usize = 0;
/// Remote read only, at a remote address unlike its local one.
pub const READ_ONLY: usize = 1;
/// Local write only: receive buffers, READ and atomic destinations.
pub const LOCAL: usize = 2;

/// The registered regions.
pub fn regions() -> [Region; 3] {
    [
        Region {
            offset: 0x2000,
            len: 0x2000,
            iova: MEM_BASE + 0x2000,
            access: AccessFlags::LOCAL_WRITE | bringup::remote_rights(),
        },
        Region {
            offset: 0x6000,
            len: 0x1000,
            iova: 0x7_0000_0000,
            access: AccessFlags::REMOTE_READ,
        },
        Region {
            offset: 0x9000,
            len: 0x1000,
            iova: MEM_BASE + 0x9000,
            access: AccessFlags::LOCAL_WRITE,
        },
    ]
}

/// Where each of the target's QPs is: type, state, on the SRQ or not.
pub fn layout() -> Vec<(QpType, QpState, bool)> {
    let mut out = Vec::new();
    for ty in QpType::ALL {
        for state in QpState::ALL {
            if !(ty == QpType::Rc && state == QpState::Sqe) {
                out.push((ty, state, false));
            }
        }
    }
    // UC QPs cannot use an SRQ.
    out.extend([QpType::Rc, QpType::Ud].map(|ty| (ty, QpState::Rts, true)));
    out
}

/// One QP of the target.
#[derive(Debug, Clone, Copy)]
pub struct TargetQp {
    /// Handle.
    pub id: QpId,
    /// QP number.
    pub qpn: u32,
}

/// The engine under attack and its memory.
#[derive(Debug)]
pub struct Target {
    /// The engine.
    pub engine: Engine,
    /// Its memory.
    pub mem: FlatMemory,
    /// The QPs, in [`layout`] order.
    pub qps: Vec<TargetQp>,
    /// Keys of the [`regions`], in order.
    pub keys: [u32; 3],
    /// The clock.
    pub now: Nanos,
    pd: PdId,
    cq: CqId,
    srq: SrqId,
    ah: AhId,
}

/// Errors in the fixed set-up are harness bugs: fail loudly.
fn ok<T>(what: &str, r: softverbs_engine::VerbsResult<T>) -> T {
    r.unwrap_or_else(|e| panic!("target set-up: {what}: {e}"))
}

impl Target {
    /// Builds the target with every QP in place.
    pub fn new() -> Target {
        let mut cfg = DeviceConfig::loopback(7);
        cfg.ports[0].gids = vec![local_gid()];
        cfg.qpn_base = 0x200;
        let mut engine = Engine::new(cfg);
        let pd = ok("alloc_pd", engine.alloc_pd());
        let (cq, _) = ok("create_cq", engine.create_cq(4096, 0));
        let srq_attr = SrqAttr {
            max_wr: 64,
            max_sge: 4,
            srq_limit: 0,
        };
        let (srq, _) = ok("create_srq", engine.create_srq(pd, &srq_attr));
        let ah = ok("create_ah", engine.create_ah(pd, &bringup::av(peer_gid())));
        let keys = regions().map(|r| {
            let mr = engine.reg_mr(pd, r.addr(0), r.len, r.iova, r.access.bits());
            ok("reg_mr", mr).key
        });
        let mut mem = pristine().clone();
        // Part of the remote-writable region is unmapped by the
        // application: accesses there fault.
        let hole = regions()[ALL].addr(0x1000);
        mem.unmap(hole..hole + 0x100);
        let mut t = Target {
            engine,
            mem,
            qps: Vec::new(),
            keys,
            now: 0,
            pd,
            cq,
            srq,
            ah,
        };
        for _ in 0..16 {
            let sge = [t.local_sge(0x800, 256)];
            let wr = RecvWr {
                wr_id: 99,
                sg_list: &sge,
            };
            ok("post_srq_recv", t.engine.post_srq_recv(srq, &wr));
        }
        for (i, (ty, state, on_srq)) in layout().into_iter().enumerate() {
            let qp = t.make_qp(ty, on_srq, PEER_QPN + i as u32, state);
            t.qps.push(qp);
        }
        t.drain();
        t
    }

    fn local_sge(&self, at: u64, length: u32) -> Sge {
        Sge {
            addr: regions()[LOCAL].addr(at),
            length,
            lkey: self.keys[LOCAL],
        }
    }

    fn make_qp(&mut self, ty: QpType, on_srq: bool, peer: u32, state: QpState) -> TargetQp {
        let init = QpInitAttr {
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: on_srq.then_some(self.srq),
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 64,
            },
            qp_type: ty as u32,
            sq_sig_all: false,
        };
        let id = ok("create_qp", self.engine.create_qp(self.pd, &init)).id;
        let qpn = ok("qp_num", self.engine.qp_num(id));
        let qp = TargetQp { id, qpn };
        self.bring_to(qp, ty, on_srq, peer, state);
        qp
    }

    fn modify(&mut self, qp: QpId, (attr, mask): (QpAttr, QpAttrMask)) {
        ok("modify_qp", self.engine.modify_qp(qp, &attr, mask));
    }

    fn bring_to(&mut self, qp: TargetQp, ty: QpType, on_srq: bool, peer: u32, state: QpState) {
        if state == QpState::Reset {
            return;
        }
        self.modify(qp.id, bringup::init(ty));
        if !on_srq {
            self.post_receives(qp.id);
        }
        if state == QpState::Init {
            return;
        }
        self.modify(qp.id, bringup::rtr(ty, peer, peer_gid(), RQ_PSN));
        if state == QpState::Rtr {
            return;
        }
        self.modify(qp.id, bringup::rts(ty, SQ_PSN));
        self.post_sends(qp.id, ty);
        self.drain();
        let next = match state {
            QpState::Sqd | QpState::Err => state,
            QpState::Sqe => return self.fail_a_send(qp.id, ty),
            _ => return,
        };
        let attr = QpAttr {
            qp_state: next as u32,
            ..QpAttr::default()
        };
        self.modify(qp.id, (attr, QpAttrMask::STATE));
    }

    fn post_receives(&mut self, qp: QpId) {
        for i in 0..4 {
            let sge = [self.local_sge(i * 0x100, 0x100)];
            let wr = RecvWr {
                wr_id: i,
                sg_list: &sge,
            };
            ok("post_recv", self.engine.post_recv(qp, &wr));
        }
    }

    /// Send WRs of every opcode the type allows, each reading from or
    /// landing in the local-only region, aimed at the peer's regions.
    fn post_sends(&mut self, qp: QpId, ty: QpType) {
        let opcodes: &[u32] = match ty {
            QpType::Rc => &[
                send_opcode::SEND,
                send_opcode::RDMA_WRITE,
                send_opcode::RDMA_READ,
                send_opcode::ATOMIC_FETCH_AND_ADD,
                send_opcode::ATOMIC_CMP_AND_SWP,
                send_opcode::SEND_WITH_IMM,
            ],
            QpType::Uc => &[send_opcode::SEND, send_opcode::RDMA_WRITE_WITH_IMM],
            QpType::Ud => &[send_opcode::SEND],
        };
        for (i, &opcode) in opcodes.iter().enumerate() {
            let at = 0x400 + i as u64 * 0x40;
            let len = if opcode >= send_opcode::ATOMIC_CMP_AND_SWP {
                8
            } else {
                0x40
            };
            let sge = [self.local_sge(at, len)];
            let wr = self.send_wr(i as u64, opcode, &sge, ty);
            ok("post_send", self.engine.post_send(qp, &wr));
        }
    }

    fn send_wr<'a>(&self, wr_id: u64, opcode: u32, sges: &'a [Sge], ty: QpType) -> SendWr<'a> {
        let remote = regions()[ALL].iova + 0x100;
        SendWr {
            wr_id,
            opcode,
            send_flags: send_flags::SIGNALED,
            sg_list: sges,
            inline_data: &[],
            imm_data_or_inv_rkey: 0x0102_0304,
            rdma: RdmaTarget {
                remote_addr: remote,
                rkey: 0x5151,
            },
            atomic: AtomicTarget {
                remote_addr: remote,
                compare_add: 1,
                swap: 2,
                rkey: 0x5151,
            },
            ud: (ty == QpType::Ud).then_some(UdTarget {
                ah: self.ah,
                remote_qpn: PEER_QPN,
                remote_qkey: QKEY,
            }),
        }
    }

    /// A UC or UD send naming a key nobody registered: when it executes
    /// the QP enters SQE.
    fn fail_a_send(&mut self, qp: QpId, ty: QpType) {
        let sge = [Sge {
            lkey: self.keys[LOCAL] ^ 0x8000_0000,
            ..self.local_sge(0, 16)
        }];
        let wr = self.send_wr(77, send_opcode::SEND, &sge, ty);
        ok("post_send", self.engine.post_send(qp, &wr));
        self.drain();
    }

    /// Sends everything the engine wants to send (into the void), within
    /// a bound: a fuzz input must not make this loop forever.
    pub fn drain(&mut self) {
        let mut buf = vec![0u8; MAX_PACKET_LEN];
        for _ in 0..1024 {
            if self
                .engine
                .poll_transmit(self.now, &self.mem, &mut buf)
                .is_none()
            {
                return;
            }
        }
    }

    /// Moves the clock by `by` and runs whatever timers are due.
    pub fn tick(&mut self, by: Nanos) {
        self.now = self.now.saturating_add(by);
        self.engine.handle_timeout(self.now);
    }

    /// Panics with the first changed byte the engine had no right to
    /// write: one outside every region with LOCAL_WRITE.
    pub fn check_memory(&self) {
        let writable: Vec<Region> = regions().into_iter().filter(Region::writable).collect();
        let allowed = |at: usize| {
            let at = at as u64;
            writable
                .iter()
                .any(|r| (r.offset..r.offset + r.len).contains(&at))
        };
        let changed = first_forbidden_change(&self.mem, pristine(), MEM_LEN, allowed);
        if let Some(at) = changed {
            let addr = MEM_BASE + at as u64;
            panic!("the engine wrote at {addr:#x}, outside every writable region");
        }
    }
}

/// The target's memory before any run.
fn pristine() -> &'static FlatMemory {
    static PRISTINE: OnceLock<FlatMemory> = OnceLock::new();
    PRISTINE.get_or_init(|| patterned(MEM_BASE, MEM_LEN, 3))
}

impl Default for Target {
    fn default() -> Self {
        Target::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_qp_is_in_the_state_its_layout_names() {
        let t = Target::new();
        for ((ty, state, _), qp) in layout().into_iter().zip(&t.qps) {
            let (attr, init) = t.engine.query_qp(qp.id).unwrap();
            assert_eq!(init.qp_type, ty as u32);
            assert_eq!(attr.qp_state, state as u32, "{ty:?} meant to be {state:?}");
        }
        assert_eq!(t.qps.len(), 3 * 7 - 1 + 2);
        t.check_memory();
    }
}
