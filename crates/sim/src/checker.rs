//! The checker: after a run, compares what the nodes observed (completions,
//! memory) with what the workload guarantees for each transport service.
//!
//! * every sender (RC, UC, UD): each signaled WR completes exactly once,
//!   in posting order, successfully, with its opcode; unsignaled WRs never
//!   complete;
//! * RC receivers: every SEND and WRITE_WITH_IMM exactly once, in order,
//!   with its byte_len, immediate data and bytes; every WRITE target, READ
//!   result and atomic original value byte-identical to what was sent, and
//!   each atomic target's final value that of the atomics applied once each
//!   in posting order;
//! * UC receivers: an in-order subsequence of the messages, each intact;
//!   WRITE targets hold, byte by byte, the data or their initial contents;
//! * UD receivers: only intact messages that were sent, in any order,
//!   possibly more than once;
//! * everywhere: no byte outside the buffers the engine may write changed,
//!   and RC/UD receive buffers are untouched past the received bytes.

use crate::agents::split_wr_id;
use crate::payload::{self, Kind};
use crate::plan::{Piece, GRH_LEN};
use crate::setup::World;
use crate::workload::{apply_atomic, Workload};
use softverbs_engine::{
    send_opcode as op, wc_flags, FlatMemory, QpType, WcOpcode, WcStatus, WorkCompletion,
};
use std::collections::HashMap;

/// A receive completion and the buffer it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvSeen {
    /// The completion.
    pub wc: WorkCompletion,
    /// Receive queue of the buffer.
    pub queue: usize,
    /// Buffer index in the queue.
    pub buffer: usize,
}

/// What the runner saw, for the checker.
#[derive(Debug, Default)]
pub struct Observations {
    /// Per stream, the sender's completions in polling order.
    pub sends: Vec<Vec<WorkCompletion>>,
    /// Per stream, the receiver's completions in polling order.
    pub recvs: Vec<Vec<RecvSeen>>,
    /// Things that are wrong whatever the workload (async errors, unknown
    /// wr_ids, packets to nowhere), found while running.
    pub anomalies: Vec<String>,
}

impl Observations {
    /// Empty observations of `streams` streams.
    pub fn new(streams: usize) -> Observations {
        Observations {
            sends: vec![Vec::new(); streams],
            recvs: vec![Vec::new(); streams],
            anomalies: Vec::new(),
        }
    }
}

/// Every violated guarantee, as one line each; empty when all hold.
pub fn check(w: &Workload, world: &World, obs: &Observations) -> Vec<String> {
    let mut c = Checker {
        w,
        world,
        obs,
        failures: obs.anomalies.clone(),
    };
    for s in 0..w.streams.len() {
        c.sends(s);
        c.receives(s);
        c.writes(s);
        c.reads(s);
        c.atomics(s);
    }
    c.receive_buffers();
    c.protected_memory();
    c.failures
}

struct Checker<'a> {
    w: &'a Workload,
    world: &'a World,
    obs: &'a Observations,
    failures: Vec<String>,
}

impl Checker<'_> {
    fn fail(&mut self, s: usize, msg: String) {
        let spec = &self.w.streams[s];
        let ty = self.w.pairs[spec.pair].qp_type.name();
        self.failures.push(format!(
            "stream {s} ({ty} node {} -> {}): {msg}",
            spec.from,
            spec.to()
        ));
    }

    fn ty(&self, s: usize) -> QpType {
        self.w.pair_of(s).qp_type
    }

    fn message(&self, s: usize, op: usize) -> Vec<u8> {
        let len = self.w.streams[s].ops[op].len as usize;
        payload::bytes(self.w.seed, s, op, Kind::Message, len)
    }

    fn sender_mem(&self, s: usize) -> &FlatMemory {
        &self.world.nodes[self.w.streams[s].from].mem
    }

    fn receiver_mem(&self, s: usize) -> &FlatMemory {
        &self.world.nodes[self.w.streams[s].to()].mem
    }

    /// Signaled WRs complete once each, in order, successfully.
    fn sends(&mut self, s: usize) {
        let ops = &self.w.streams[s].ops;
        let expected: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].signaled).collect();
        let seen = &self.obs.sends[s];
        let (qp, _) = self.world.stream_ends(self.w, s);
        for (k, wc) in seen.iter().enumerate() {
            let (_, op) = split_wr_id(wc.wr_id);
            let problem = if wc.status != WcStatus::Success {
                Some(format!("op {op} completed with {:?}", wc.status))
            } else if expected.get(k) != Some(&op) {
                Some(format!(
                    "send completion #{k} is op {op}, expected {:?} (signaled WRs complete once each, in order)",
                    expected.get(k)
                ))
            } else if wc.opcode != WcOpcode::of_send(ops[op].opcode) || wc.qp_num != qp.qpn {
                Some(format!(
                    "op {op} completion has opcode {:?} qp {:#x}",
                    wc.opcode, wc.qp_num
                ))
            } else {
                None
            };
            if let Some(p) = problem {
                return self.fail(s, p);
            }
        }
        if seen.len() < expected.len() {
            let missing = expected[seen.len()];
            self.fail(
                s,
                format!(
                    "{} of {} signaled WRs completed; op {missing} did not",
                    seen.len(),
                    expected.len()
                ),
            );
        }
    }

    fn receives(&mut self, s: usize) {
        match self.ty(s) {
            QpType::Rc => self.receives_exact(s),
            QpType::Uc => self.receives_subsequence(s),
            QpType::Ud => self.receives_any(s),
        }
    }

    /// RC: exactly the receive-consuming ops, in order.
    fn receives_exact(&mut self, s: usize) {
        let ops = &self.w.streams[s].ops;
        let expected: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].consumes_recv()).collect();
        let seen = &self.obs.recvs[s];
        for (k, r) in seen.iter().enumerate() {
            let Some(&op) = expected.get(k) else {
                return self.fail(
                    s,
                    format!(
                        "receive #{k} is extra: {} expected (duplicate delivery?)",
                        expected.len()
                    ),
                );
            };
            if let Err(why) = self.matches(s, op, r) {
                return self.fail(s, format!("receive #{k} should be op {op}: {why}"));
            }
        }
        if seen.len() < expected.len() {
            let op = expected[seen.len()];
            self.fail(
                s,
                format!(
                    "{} of {} messages received; op {op} was not",
                    seen.len(),
                    expected.len()
                ),
            );
        }
    }

    /// UC: each receive is an intact message sent after the previous one.
    fn receives_subsequence(&mut self, s: usize) {
        let ops = &self.w.streams[s].ops;
        let mut next = 0;
        for (k, r) in self.obs.recvs[s].iter().enumerate() {
            let found = (next..ops.len())
                .find(|&op| ops[op].consumes_recv() && self.matches(s, op, r).is_ok());
            match found {
                Some(op) => next = op + 1,
                None => {
                    let why = self.explain(s, r);
                    return self.fail(
                        s,
                        format!(
                            "receive #{k} is no intact message sent after op {}: {why}",
                            next as i64 - 1
                        ),
                    );
                }
            }
        }
    }

    /// UD: each receive is an intact message that was sent.
    fn receives_any(&mut self, s: usize) {
        let ops = &self.w.streams[s].ops;
        for (k, r) in self.obs.recvs[s].iter().enumerate() {
            if !(0..ops.len()).any(|op| ops[op].consumes_recv() && self.matches(s, op, r).is_ok()) {
                let why = self.explain(s, r);
                return self.fail(
                    s,
                    format!("receive #{k} is no intact message of the stream: {why}"),
                );
            }
        }
    }

    /// Why receive `r` matches no op: checked against the op its header
    /// names, if it has one.
    fn explain(&self, s: usize, r: &RecvSeen) -> String {
        let offset = if self.ty(s) == QpType::Ud { GRH_LEN } else { 0 };
        let data = gather(
            self.receiver_mem(s),
            &self.world.plan.queues[r.queue].buffers[r.buffer],
            offset,
            8,
        );
        let named = payload::header(&data).filter(|&(st, op)| {
            usize::from(st) == s && (op as usize) < self.w.streams[s].ops.len()
        });
        match named {
            Some((_, op)) => match self.matches(s, op as usize, r) {
                Err(why) => format!("its header names op {op}, but {why}"),
                Ok(()) => format!("it matches op {op}, out of order"),
            },
            None => format!("completion {}", crate::trace::completion(&r.wc)),
        }
    }

    /// Whether receive `r` is op `op`, delivered intact.
    fn matches(&self, s: usize, op: usize, r: &RecvSeen) -> Result<(), String> {
        let grh = if self.ty(s) == QpType::Ud { GRH_LEN } else { 0 };
        self.fields_match(s, op, &r.wc, grh)?;
        self.addresses_match(s, &r.wc)?;
        self.data_matches(s, op, r, grh)
    }

    /// Status, opcode, length and immediate data.
    fn fields_match(
        &self,
        s: usize,
        op: usize,
        wc: &WorkCompletion,
        grh: u32,
    ) -> Result<(), String> {
        let o = &self.w.streams[s].ops[op];
        let want_opcode = if o.opcode == op::RDMA_WRITE_WITH_IMM {
            WcOpcode::RecvRdmaWithImm
        } else {
            WcOpcode::Recv
        };
        let with_imm = wc.wc_flags & wc_flags::WITH_IMM != 0;
        if wc.status != WcStatus::Success {
            return Err(format!("status {:?}", wc.status));
        }
        if wc.opcode != want_opcode {
            return Err(format!("opcode {:?}, expected {want_opcode:?}", wc.opcode));
        }
        if wc.byte_len != o.len + grh {
            return Err(format!(
                "byte_len {}, expected {}",
                wc.byte_len,
                o.len + grh
            ));
        }
        if with_imm != o.has_imm() || (o.has_imm() && wc.imm_data_or_inv_rkey != o.imm) {
            return Err(format!(
                "imm {:#x} (WITH_IMM {with_imm}), expected {:#x} (WITH_IMM {})",
                wc.imm_data_or_inv_rkey,
                o.imm,
                o.has_imm()
            ));
        }
        Ok(())
    }

    /// The receiving QP, and on UD the sender's QP and the GRH flag.
    fn addresses_match(&self, s: usize, wc: &WorkCompletion) -> Result<(), String> {
        let (from, to) = self.world.stream_ends(self.w, s);
        if wc.qp_num != to.qpn {
            return Err(format!("qp_num {:#x}, expected {:#x}", wc.qp_num, to.qpn));
        }
        let ud = self.ty(s) == QpType::Ud;
        if ud && (wc.src_qp != from.qpn || wc.wc_flags & wc_flags::GRH == 0) {
            return Err(format!(
                "src_qp {:#x} flags {:#x}: expected src_qp {:#x} and GRH",
                wc.src_qp, wc.wc_flags, from.qpn
            ));
        }
        Ok(())
    }

    /// The bytes: in the receive buffer for a SEND, at the target for a
    /// WRITE_WITH_IMM.
    fn data_matches(&self, s: usize, op: usize, r: &RecvSeen, grh: u32) -> Result<(), String> {
        let o = &self.w.streams[s].ops[op];
        let want = self.message(s, op);
        let got = if o.is_send() {
            let pieces = &self.world.plan.queues[r.queue].buffers[r.buffer];
            gather(self.receiver_mem(s), pieces, grh, o.len)
        } else {
            let at = self.world.plan.streams[s].ops[op].remote;
            self.receiver_mem(s).slice(at, o.len as usize).to_vec()
        };
        match first_diff(&got, &want) {
            None => Ok(()),
            Some(i) => Err(format!("data differs at byte {i} of {}", want.len())),
        }
    }

    /// WRITE targets: exact on RC; on UC, each byte sent or untouched.
    fn writes(&mut self, s: usize) {
        let uc = self.ty(s) == QpType::Uc;
        let initial = &self.world.initial[self.w.streams[s].to()];
        for (op, o) in self.w.streams[s]
            .ops
            .iter()
            .enumerate()
            .filter(|(_, o)| o.is_write())
        {
            let at = self.world.plan.streams[s].ops[op].remote;
            let len = o.len as usize;
            let got = self.receiver_mem(s).slice(at, len);
            let want = self.message(s, op);
            let before = initial.slice(at, len);
            let bad = (0..len).find(|&i| got[i] != want[i] && !(uc && got[i] == before[i]));
            if let Some(i) = bad {
                let name = o.name();
                return self.fail(
                    s,
                    format!("op {op} ({name}, {len} bytes) target wrong at byte {i}"),
                );
            }
        }
    }

    /// READ results equal the responder's source bytes (RC only has READ).
    fn reads(&mut self, s: usize) {
        for (op, o) in self.w.streams[s]
            .ops
            .iter()
            .enumerate()
            .filter(|(_, o)| o.is_read())
        {
            let len = o.len as usize;
            let want = payload::bytes(self.w.seed, s, op, Kind::ReadSource, len);
            let got = gather(
                self.sender_mem(s),
                &self.world.plan.streams[s].ops[op].local,
                0,
                o.len,
            );
            if let Some(i) = first_diff(&got, &want) {
                return self.fail(
                    s,
                    format!("op {op} (RDMA_READ, {len} bytes) result wrong at byte {i}"),
                );
            }
        }
    }

    /// Atomics applied once each, in order: each original value, and the
    /// target's final value.
    fn atomics(&mut self, s: usize) {
        let spec = &self.w.streams[s];
        let mut word = spec.atomic_init;
        for (op, o) in spec.ops.iter().enumerate().filter(|(_, o)| o.is_atomic()) {
            let got = read_u64(
                self.sender_mem(s),
                self.world.plan.streams[s].ops[op].local[0].addr,
            );
            if got != word {
                let name = o.name();
                return self.fail(
                    s,
                    format!("op {op} ({name}) returned {got:#x}, expected the original {word:#x}"),
                );
            }
            word = apply_atomic(o, word);
        }
        let fin = read_u64(self.receiver_mem(s), self.world.plan.streams[s].atomic_word);
        if fin != word {
            self.fail(
                s,
                format!("atomic target ends at {fin:#x}, expected {word:#x}"),
            );
        }
    }

    /// RC and UD receive buffers: nothing written past the message (or at
    /// all, when never completed); each completed once. UC may leave a
    /// dropped message's partial data in a buffer it reuses, so its
    /// buffers are not checked.
    fn receive_buffers(&mut self) {
        let mut used: HashMap<(usize, usize), u32> = HashMap::new();
        for r in self.obs.recvs.iter().flatten() {
            // A SEND fills byte_len bytes (GRH included on UD); a
            // WRITE_WITH_IMM consumes the WR but writes none of it.
            let len = if r.wc.opcode == WcOpcode::Recv {
                r.wc.byte_len
            } else {
                0
            };
            if used.insert((r.queue, r.buffer), len).is_some() {
                self.failures.push(format!(
                    "receive WR {} of queue {} completed twice",
                    r.buffer, r.queue
                ));
            }
        }
        for (q, plan) in self.world.plan.queues.iter().enumerate() {
            if plan.qp_type == QpType::Uc {
                continue;
            }
            let mem = &self.world.nodes[plan.node].mem;
            let initial = &self.world.initial[plan.node];
            for (b, pieces) in plan.buffers.iter().enumerate() {
                let skip = used.get(&(q, b)).copied().unwrap_or(0);
                if let Some(addr) = changed_after(mem, initial, pieces, skip) {
                    self.failures.push(format!(
                        "node {}: receive buffer {b} of queue {q} written at {addr:#x}, past the {skip} bytes received",
                        plan.node
                    ));
                    return;
                }
            }
        }
    }

    /// Nothing outside the writable buffers changed.
    fn protected_memory(&mut self) {
        for (n, arena) in self.world.plan.arenas.iter().enumerate() {
            let mem = &self.world.nodes[n].mem;
            let initial = &self.world.initial[n];
            for (addr, len) in arena.protected() {
                let len = len as usize;
                if let Some(i) = first_diff(mem.slice(addr, len), initial.slice(addr, len)) {
                    self.failures.push(format!(
                        "node {n}: byte {:#x} changed, outside every buffer the engine may write",
                        addr + i as u64
                    ));
                    break;
                }
            }
        }
    }
}

/// `len` bytes from `pieces`, starting `skip` bytes in (as many as exist).
pub fn gather(mem: &FlatMemory, pieces: &[Piece], skip: u32, len: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(len as usize);
    let mut skip = u64::from(skip);
    for p in pieces {
        let plen = u64::from(p.len);
        if skip >= plen {
            skip -= plen;
            continue;
        }
        let take = (plen - skip).min(u64::from(len) - out.len() as u64);
        out.extend_from_slice(mem.slice(p.addr + skip, take as usize));
        skip = 0;
        if out.len() == len as usize {
            break;
        }
    }
    out
}

/// The first address past `skip` bytes of `pieces` whose byte changed.
fn changed_after(
    mem: &FlatMemory,
    initial: &FlatMemory,
    pieces: &[Piece],
    skip: u32,
) -> Option<u64> {
    let mut skip = u64::from(skip);
    for p in pieces {
        let plen = u64::from(p.len);
        let from = skip.min(plen);
        skip -= from;
        let n = (plen - from) as usize;
        let at = p.addr + from;
        if let Some(i) = first_diff(mem.slice(at, n), initial.slice(at, n)) {
            return Some(at + i as u64);
        }
    }
    None
}

fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or_else(|| (a.len() != b.len()).then_some(a.len().min(b.len())))
}

fn read_u64(mem: &FlatMemory, addr: u64) -> u64 {
    u64::from_ne_bytes(mem.slice(addr, 8).try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem() -> FlatMemory {
        let mut m = FlatMemory::new(0x100, 64);
        for (i, b) in m.slice_mut(0x100, 64).iter_mut().enumerate() {
            *b = i as u8;
        }
        m
    }

    #[test]
    fn gather_reads_across_pieces_after_a_skip() {
        let m = mem();
        let pieces = [
            Piece {
                addr: 0x100,
                len: 4,
            },
            Piece {
                addr: 0x110,
                len: 4,
            },
        ];
        assert_eq!(gather(&m, &pieces, 0, 6), vec![0, 1, 2, 3, 16, 17]);
        assert_eq!(gather(&m, &pieces, 5, 3), vec![17, 18, 19]);
        assert_eq!(
            gather(&m, &pieces, 0, 20).len(),
            8,
            "no more than the pieces hold"
        );
    }

    #[test]
    fn changes_are_found_only_past_the_skip() {
        let before = mem();
        let mut after = mem();
        after.slice_mut(0x111, 1)[0] = 0xFF;
        let pieces = [
            Piece {
                addr: 0x100,
                len: 4,
            },
            Piece {
                addr: 0x110,
                len: 4,
            },
        ];
        assert_eq!(changed_after(&after, &before, &pieces, 0), Some(0x111));
        assert_eq!(changed_after(&after, &before, &pieces, 5), Some(0x111));
        assert_eq!(changed_after(&after, &before, &pieces, 6), None);
    }

    #[test]
    fn first_diff_reports_length_mismatch() {
        assert_eq!(first_diff(b"abc", b"abc"), None);
        assert_eq!(first_diff(b"abc", b"abd"), Some(2));
        assert_eq!(first_diff(b"ab", b"abc"), Some(2));
    }
}
