//! Data-path cases: two RC QPs of one device connected to each other
//! through its own GID, random receive WRs and signaled WRs of every
//! opcode between them (SEND, SEND_WITH_IMM, RDMA WRITE, WRITE_WITH_IMM,
//! READ, compare-and-swap, fetch-and-add; sometimes with a wrong rkey;
//! up to three SGEs a WR: a send's gathered in order, a receive's
//! scattering its range back to front),
//! then every completion (each WR completes exactly once: the sends
//! first, then the receives once both QPs are moved to ERR), the memory
//! of both MRs and the async events, compared between the two devices.
//! No SEND waits for a receive WR: with rnr_retry 0 it fails at once with
//! RNR_RETRY_EXC_ERR on both.
//!
//! UC cases connect two UC QPs and post what UC has (SEND, SEND_WITH_IMM,
//! RDMA WRITE, WRITE_WITH_IMM). A UC send completes once sent, and what
//! its peer did with it is silent; so before the QPs are moved to ERR,
//! a barrier WRITE on each (`barrier` in verbs_ops.h) waits until the
//! peer has taken every message sent before it, and what arrived is
//! known without waiting for a time.

use super::fields::qp_attr_args;
use super::steps::{Effect, Judge, Step};
use proptest::prelude::*;
use softverbs_engine::QpAttr;

/// Bytes of each MR (the executor's buffers).
const MR_LEN: u16 = 4096;
/// `enum ibv_wr_opcode`: SEND, SEND_WITH_IMM, RDMA_WRITE,
/// RDMA_WRITE_WITH_IMM, RDMA_READ, ATOMIC_CMP_AND_SWP, ATOMIC_FETCH_AND_ADD.
const OPCODES: [i64; 7] = [2, 3, 0, 1, 4, 5, 6];
/// An rkey no MR has.
const BAD_RKEY: i64 = 0x5eed_0bad;
/// The most SGEs a WR has (the QPs' max_send_sge and max_recv_sge).
const MAX_SGES: u8 = 3;
/// The transport of a data case's two QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Rc,
    Uc,
}

impl Transport {
    /// Its `enum ibv_qp_type`.
    fn qp_type(self) -> i64 {
        match self {
            Transport::Rc => 2,
            Transport::Uc => 3,
        }
    }

    /// How many of [`OPCODES`] it has (UC: the first four).
    fn opcodes(self) -> usize {
        match self {
            Transport::Rc => OPCODES.len(),
            Transport::Uc => 4,
        }
    }
}

/// The path MTU `connect` gives the QPs (IBV_MTU_1024).
pub const PATH_MTU: i64 = 1024;

/// The MR a UC case's barriers write in (after the QPs' own two).
const BARRIER_MR: i64 = 2;

/// Completion queues: QP n sends to CQ 2n and receives to CQ 2n + 1.
const fn send_cq(qp: usize) -> usize {
    2 * qp
}
const fn recv_cq(qp: usize) -> usize {
    2 * qp + 1
}

/// One operation of a data-path case; QP 0 or 1 (`second`), each with
/// its own MR, aimed at the other's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataOp {
    /// A receive WR into the QP's MR.
    Recv {
        /// QP 1 rather than 0.
        second: bool,
        /// Where in the MR.
        offset: u16,
        /// How many bytes.
        len: u16,
        /// In how many SGEs (1 to [`MAX_SGES`]).
        sges: u8,
    },
    /// A signaled send-queue WR.
    Send {
        /// QP 1 rather than 0.
        second: bool,
        /// Index into the opcodes.
        opcode: u8,
        /// Local offset.
        offset: u16,
        /// Length (8 for atomics).
        len: u16,
        /// Remote offset.
        remote: u16,
        /// A wrong rkey (one in ten).
        bad_rkey: bool,
        /// Immediate data, or the atomic operand.
        imm: u32,
        /// In how many SGEs (1 to [`MAX_SGES`]; an atomic has one).
        sges: u8,
    },
}

/// Any data-path operation, receives as often as sends.
pub fn data_op() -> impl Strategy<Value = DataOp> {
    let recv = (any::<bool>(), any::<u16>(), any::<u16>(), 1..=MAX_SGES).prop_map(
        |(second, offset, len, sges)| DataOp::Recv {
            second,
            offset,
            len,
            sges,
        },
    );
    let send = (
        any::<bool>(),
        0..OPCODES.len() as u8,
        (any::<u16>(), any::<u16>(), any::<u16>()),
        proptest::bool::weighted(0.1),
        any::<u32>(),
        1..=MAX_SGES,
    )
        .prop_map(
            |(second, opcode, (offset, len, remote), bad_rkey, imm, sges)| DataOp::Send {
                second,
                opcode,
                offset,
                len,
                remote,
                bad_rkey,
                imm,
                sges,
            },
        );
    prop_oneof![recv, send]
}

fn step(verb: &'static str, args: Vec<i64>, judge: Judge) -> Step {
    Step {
        verb,
        args,
        judge,
        effect: Effect::None,
    }
}

/// The objects of a data case: a PD, four CQs, an MR per QP with every
/// access (and for UC one for the barriers), two QPs of `transport` (16
/// WRs and 3 SGEs each way, every WR signaled) connected to each other.
pub fn setup(transport: Transport) -> Vec<Step> {
    let mut steps = vec![step("pd", vec![], Judge::Exact)];
    steps.extend((0..4).map(|_| step("cq", vec![4096], Judge::Exact)));
    // LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC.
    let mrs = if transport == Transport::Uc { 3 } else { 2 };
    steps.extend((0..mrs).map(|_| step("mr", vec![0, 0xf], Judge::Exact)));
    for qp in 0..2 {
        let cqs = [send_cq(qp) as i64, recv_cq(qp) as i64];
        let sges = i64::from(MAX_SGES);
        let ty = transport.qp_type();
        let args = vec![0, cqs[0], cqs[1], -1, ty, 16, 16, sges, sges, 0, 1];
        let at_least = vec![16, 16, u32::from(MAX_SGES), u32::from(MAX_SGES), 0];
        steps.push(step("qp", args, Judge::AtLeast(at_least)));
    }
    steps.push(step("connect", vec![0, 1], Judge::Exact));
    steps.push(step("connect", vec![1, 0], Judge::Exact));
    steps
}

/// The step of `op` on QPs of `transport`; `wr_id` numbers the WRs.
pub fn data_step(op: &DataOp, wr_id: i64, transport: Transport) -> Step {
    match *op {
        DataOp::Recv {
            second,
            offset,
            len,
            sges,
        } => {
            let qp = usize::from(second);
            let offset = offset % MR_LEN;
            let len = len % (MR_LEN - offset) + 1;
            let mut args = vec![qp as i64, wr_id];
            args.extend(scatter(qp, offset, len, sges));
            step("post_recv", args, Judge::Exact)
        }
        DataOp::Send {
            second,
            opcode,
            offset,
            len,
            remote,
            bad_rkey,
            imm,
            sges,
        } => {
            let qp = usize::from(second);
            let opcode = OPCODES[usize::from(opcode) % transport.opcodes()];
            let sges = if opcode >= 5 {
                1
            } else {
                sges.clamp(1, MAX_SGES)
            };
            let (offset, len, remote) = if opcode >= 5 {
                // An atomic: 8 bytes, 8-byte aligned at both ends.
                (offset % (MR_LEN / 8) * 8, 8, remote % (MR_LEN / 8) * 8)
            } else {
                let offset = offset % MR_LEN;
                let len = len % (MR_LEN - offset + 1);
                (offset, len, remote % (MR_LEN - len + 1))
            };
            let rkey = if bad_rkey { BAD_RKEY } else { -1 };
            let args = vec![
                qp as i64,
                wr_id,
                opcode,
                qp as i64,
                offset.into(),
                len.into(),
                1 - qp as i64,
                remote.into(),
                rkey,
                imm.into(),
                sges.into(),
            ];
            step("post_send", args, Judge::Exact)
        }
    }
}

/// The SGE list of a receive into `len` bytes at `offset` of QP `qp`'s
/// MR, in `sges` pieces (at most one per byte) listed back to front, so
/// that the message lands reordered: SGE count, then MR, offset, length
/// and key (-1: the MR's) of each.
fn scatter(qp: usize, offset: u16, len: u16, sges: u8) -> Vec<i64> {
    let n = u16::from(sges.clamp(1, MAX_SGES)).min(len);
    let each = len / n;
    let mut list = vec![n.into()];
    for i in (0..n).rev() {
        let piece = if i + 1 < n { each } else { len - each * i };
        list.extend([qp as i64, (offset + i * each).into(), piece.into(), -1]);
    }
    list
}

/// Whether a completion line of a wait's answer (`wc WR_ID STATUS ...`)
/// failed: an error other than a flush (a flushed WR never ran); its
/// wr_id.
fn failed(line: &str) -> Option<usize> {
    let w: Vec<&str> = line.split(' ').collect();
    let failed = w.get(2).is_some_and(|&s| s != "0" && s != "5");
    failed
        .then(|| w.get(1).and_then(|n| n.parse().ok()))
        .flatten()
}

/// The MRs whose memory a failed WR of QP `qp` left undefined, from the
/// send completions of a wait's answer `done` (WR n is `ops[n - 1]`): a
/// failed SEND or WRITE leaves its target's memory (the peer's MR: a
/// receive buffer or the WRITE's range) undefined, a failed READ or
/// atomic its own.
pub fn undefined_by_failures(
    done: &[String],
    ops: &[DataOp],
    qp: usize,
    transport: Transport,
) -> [bool; 2] {
    let mut undefined = [false; 2];
    for wr in done.iter().skip(1).filter_map(|l| failed(l)) {
        if let Some(DataOp::Send { opcode, .. }) = wr.checked_sub(1).and_then(|i| ops.get(i)) {
            // RDMA_WRITE 0, WRITE_WITH_IMM 1, SEND 2, SEND_WITH_IMM 3.
            let remote = OPCODES[usize::from(*opcode) % transport.opcodes()] <= 3;
            undefined[if remote { 1 - qp } else { qp }] = true;
        }
    }
    undefined
}

/// Whether a receive of QP `qp` failed (not flushed), from the receive
/// completions of a wait's answer `done`: a message that failed in its
/// receive WR may have written part of it (on UC the sender never hears
/// of it), so the QP's MR is undefined.
pub fn receive_failed(done: &[String]) -> bool {
    done.iter().skip(1).any(|l| failed(l).is_some())
}

/// The barrier of QP `qp` (UC cases): returns once its peer has taken
/// every message QP `qp` sent before it.
pub fn barrier(qp: usize) -> Step {
    step(
        "barrier",
        vec![qp as i64, 1 - qp as i64, BARRIER_MR],
        Judge::Exact,
    )
}

/// Waits for `want` completions of CQ `cq` (the second device waits for
/// as many as the first returned).
pub fn wait(cq: usize, want: u32) -> Step {
    let args = vec![cq as i64, 1024, want.into()];
    step("wait_cq", args, Judge::Drained)
}

/// The completion queue of QP `qp`'s sends or receives.
pub fn cq_of(qp: usize, sends: bool) -> usize {
    if sends {
        send_cq(qp)
    } else {
        recv_cq(qp)
    }
}

/// Moves QP `qp` to ERR, which flushes what it still holds.
pub fn to_error(qp: usize) -> Step {
    let attr = QpAttr {
        qp_state: 6,
        ..QpAttr::default()
    };
    let mut args = vec![qp as i64, 1];
    args.extend(qp_attr_args(&attr));
    step("modify_qp", args, Judge::Exact)
}

/// The memory of MR `mr`, as a hash.
pub fn mr_sum(mr: usize) -> Step {
    step("mr_sum", vec![mr as i64], Judge::Exact)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_wr_leaves_the_memory_it_targeted_undefined() {
        let send = |opcode| DataOp::Send {
            second: false,
            opcode,
            offset: 0,
            len: 1,
            remote: 0,
            bad_rkey: false,
            imm: 0,
            sges: 1,
        };
        // OPCODES[2] is RDMA_WRITE, [0] SEND, [4] RDMA_READ.
        let ops = [send(2), send(0), send(4)];
        let done = |wr: u32, status: u32| {
            vec!["ok 1".to_string(), format!("wc {wr} {status} 0 0 0 0 0 0")]
        };
        assert_eq!(
            undefined_by_failures(&done(1, 13), &ops, 0, Transport::Rc),
            [false, true]
        );
        assert_eq!(
            undefined_by_failures(&done(2, 9), &ops, 1, Transport::Rc),
            [true, false]
        );
        assert_eq!(
            undefined_by_failures(&done(3, 10), &ops, 0, Transport::Rc),
            [true, false]
        );
        assert_eq!(
            undefined_by_failures(&done(1, 5), &ops, 0, Transport::Rc),
            [false, false],
            "flushed: never ran"
        );
        assert_eq!(
            undefined_by_failures(&done(1, 0), &ops, 0, Transport::Rc),
            [false, false]
        );
        assert_eq!(
            undefined_by_failures(&done(9, 13), &ops, 0, Transport::Rc),
            [false, false]
        );
    }

    #[test]
    fn sends_stay_inside_both_mrs_and_atomics_are_aligned() {
        for (offset, len, remote) in [(0, 0, 0), (4095, 4095, 4095), (100, 9000, 4000)] {
            for opcode in 0..7 {
                let op = DataOp::Send {
                    second: false,
                    opcode,
                    offset,
                    len,
                    remote,
                    bad_rkey: false,
                    imm: 1,
                    sges: 3,
                };
                let a = data_step(&op, 1, Transport::Rc).args;
                let (off, len, roff) = (a[4], a[5], a[7]);
                assert!(off + len <= 4096 && roff + len <= 4096, "{a:?}");
                if a[2] >= 5 {
                    assert_eq!((len, off % 8, roff % 8, a[10]), (8, 0, 0, 1));
                }
            }
        }
    }

    #[test]
    fn a_receive_scatters_its_range_back_to_front_without_empty_pieces() {
        // 10 bytes at 100 in 3 pieces: 3 at 100, 3 at 103, 4 at 106,
        // listed last first.
        assert_eq!(
            scatter(1, 100, 10, 3),
            [3, 1, 106, 4, -1, 1, 103, 3, -1, 1, 100, 3, -1]
        );
        assert_eq!(scatter(0, 7, 2, 3), [2, 0, 8, 1, -1, 0, 7, 1, -1]);
        assert_eq!(scatter(0, 0, 5, 1), [1, 0, 0, 5, -1]);
    }
}
