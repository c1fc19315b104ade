//! A [`DirectTarget`] over another [`Engine`] in the same address space:
//! what the simulator and the tests execute same-host operations
//! against. It reaches the target's state through the same calls an
//! embedder uses for published state (`peer_qp`, `peek_recv`,
//! `claim_recv`, `apply_delivery`, ...), so it exercises the engine's side of the path
//! exactly; only the memory is a pair of [`FlatMemory`]s.

use crate::direct::{CopyFault, DirectTarget, MrLookup, Payload, PeerQp, Seg, TargetEvent};
use crate::engine::Engine;
use crate::memory::{FlatMemory, HostMemory};
use crate::objects::Mr;
use crate::wc::WorkCompletion;
use crate::wr::RecvWqe;

/// Target QP `qpn` of `engine`, whose memory is `mem`; the requester's
/// memory is `local`.
#[derive(Debug)]
pub struct EngineTarget<'a> {
    /// The target context.
    pub engine: &'a mut Engine,
    /// The target's memory.
    pub mem: &'a mut FlatMemory,
    /// The requester's memory.
    pub local: &'a mut FlatMemory,
    /// The target QP number.
    pub qpn: u32,
}

impl<'a> EngineTarget<'a> {
    /// QP `qpn` of `engine` as a target.
    pub fn new(
        engine: &'a mut Engine,
        mem: &'a mut FlatMemory,
        local: &'a mut FlatMemory,
        qpn: u32,
    ) -> EngineTarget<'a> {
        EngineTarget {
            engine,
            mem,
            local,
            qpn,
        }
    }
}

fn fault<T>(r: crate::memory::MemResult<T>, side: CopyFault) -> Result<T, CopyFault> {
    r.map_err(|_| side)
}

impl MrLookup for EngineTarget<'_> {
    fn mr(&self, key: u32) -> Option<Mr> {
        self.engine.mrs.mr(key)
    }
}

impl DirectTarget for EngineTarget<'_> {
    fn qp(&self) -> Option<PeerQp> {
        self.engine.peer_qp(self.engine.qp_by_num(self.qpn)?)
    }

    fn next_recv(&self) -> Option<RecvWqe> {
        self.engine.peek_recv(self.qpn)
    }

    fn take_recv(&mut self, seq: u64) -> bool {
        self.engine.claim_recv(self.qpn, seq)
    }

    fn write(&mut self, from: &Payload, to: &[Seg]) -> Result<(), CopyFault> {
        let bytes = match from {
            Payload::Inline(data) => data.to_vec(),
            Payload::Unusable => return Err(CopyFault::Local),
            Payload::Memory(segs) => {
                let mut out = Vec::new();
                for s in segs {
                    let mut piece = vec![0; s.len as usize];
                    fault(self.local.read(s.addr, &mut piece), CopyFault::Local)?;
                    out.extend_from_slice(&piece);
                }
                out
            }
        };
        let mut done = 0;
        for s in to {
            let piece = &bytes[done..done + s.len as usize];
            fault(self.mem.write(s.addr, piece), CopyFault::Remote)?;
            done += s.len as usize;
        }
        Ok(())
    }

    fn read(&mut self, from: Seg, to: &[Seg]) -> Result<(), CopyFault> {
        let mut bytes = vec![0; from.len as usize];
        fault(self.mem.read(from.addr, &mut bytes), CopyFault::Remote)?;
        let mut done = 0;
        for s in to {
            let piece = &bytes[done..done + s.len as usize];
            fault(self.local.write(s.addr, piece), CopyFault::Local)?;
            done += s.len as usize;
        }
        Ok(())
    }

    fn atomic(&mut self, addr: u64, compare: Option<u64>, value: u64) -> Result<u64, CopyFault> {
        let r = match compare {
            Some(c) => self.mem.compare_swap(addr, c, value),
            None => self.mem.fetch_add(addr, value),
        };
        fault(r, CopyFault::Remote)
    }

    fn deliver(&mut self, seq: u64, wc: WorkCompletion, solicited: bool) {
        self.engine.apply_delivery(self.qpn, seq, wc, solicited);
    }

    fn comm_est(&mut self) {
        self.engine.apply_comm_est(self.qpn);
    }

    fn fail(&mut self, incarnation: u16, event: TargetEvent) {
        self.engine.apply_fault(self.qpn, incarnation, event);
    }
}
