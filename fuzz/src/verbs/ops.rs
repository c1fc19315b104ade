//! The verbs a `verbs` input is made of, and their byte encoding.
//!
//! An input is a list of steps: a node byte (which of the two engines) and
//! an op, whose tag byte is taken modulo the number of ops and whose fields
//! follow in order. Object arguments are indices into the objects that node
//! has created so far (destroyed ones included, so stale handles are
//! exercised; one index past the end is the null handle). One declaration
//! below gives the enum, the decoder and the encoder, so they cannot
//! disagree.

use crate::bytes::{Field, Reader, Writer};

/// Declares a plain struct of fields that is itself a field.
macro_rules! record {
    ($(#[$doc:meta])* $name:ident { $($field:ident : $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        #[allow(missing_docs)]
        pub struct $name { $(pub $field: $ty),* }

        impl Field for $name {
            fn take(r: &mut Reader<'_>) -> Self {
                // Struct expressions evaluate their fields in source order.
                $name { $($field: r.take()),* }
            }
            fn put(self, w: &mut Writer) {
                $(w.put(self.$field);)*
            }
        }
    };
}

/// Declares the ops: tags must be 0, 1, 2, ... in order.
macro_rules! ops {
    ($($tag:literal => $name:ident { $($field:ident : $ty:ty),* $(,)? }),* $(,)?) => {
        /// One verb (or a step of the network or the clock).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[allow(missing_docs)]
        pub enum Op { $($name { $($field: $ty),* }),* }

        /// Number of ops.
        pub const OP_COUNT: u8 = [$($tag),*].len() as u8;

        impl Field for Op {
            fn take(r: &mut Reader<'_>) -> Self {
                match r.take::<u8>() % OP_COUNT {
                    $($tag => Op::$name { $($field: r.take()),* },)*
                    _ => unreachable!("op tags are 0..OP_COUNT"),
                }
            }
            fn put(self, w: &mut Writer) {
                match self {
                    $(Op::$name { $($field),* } => {
                        w.put($tag as u8);
                        $(w.put($field);)*
                    })*
                }
            }
        }
    };
}

record! {
    /// A scatter/gather list: `count % 7` entries of `len` bytes, one after
    /// the other from `offset` into MR `mr`, with its lkey.
    SgeSpec { count: u8, mr: u8, offset: u16, len: u16 }
}

record! {
    /// Where a send goes on the other node: MR `mr` (its rkey and
    /// `offset` past its iova), atomic operands, and for UD an AH (0xFF:
    /// none), the QP at index `qp` and a Q_Key.
    Remote { mr: u8, offset: u16, compare: u64, swap: u64, ah: u8, qp: u8, qkey: u32 }
}

record! {
    /// Queue sizes asked of `create_qp`.
    Caps { send_wr: u16, recv_wr: u16, send_sge: u8, recv_sge: u8, inline: u16 }
}

ops! {
    0 => AllocPd {},
    1 => DeallocPd { pd: u8 },
    2 => RegMr { pd: u8, offset: u16, len: u16, access: u8, mode: u8, iova: u64 },
    3 => ReregMr { mr: u8, change: u8, pd: u8, offset: u16, len: u16, access: u8 },
    4 => DeregMr { mr: u8 },
    5 => CreateCq { cqe: u16, vector: u8 },
    6 => ResizeCq { cq: u8, cqe: u16 },
    7 => DestroyCq { cq: u8 },
    8 => CreateSrq { pd: u8, max_wr: u16, max_sge: u8, limit: u16 },
    9 => ModifySrq { srq: u8, mask: u8, max_wr: u16, limit: u16 },
    10 => DestroySrq { srq: u8 },
    11 => PostSrqRecv { srq: u8, wr_id: u8, sges: SgeSpec },
    12 => CreateQp { pd: u8, send_cq: u8, recv_cq: u8, srq: u8, qp_type: u8, caps: Caps, sig_all: bool },
    13 => DestroyQp { qp: u8 },
    14 => ModifyQp { qp: u8, state: u8, flip: u32, field1: u8, value1: u32, field2: u8, value2: u32 },
    15 => QueryQp { qp: u8 },
    16 => PostSend { qp: u8, opcode: u8, flags: u8, sges: SgeSpec, inline: u16, imm: u32, remote: Remote, batch: u8 },
    17 => PostRecv { qp: u8, wr_id: u8, sges: SgeSpec },
    18 => PollCq { cq: u8, max: u8 },
    19 => ReqNotifyCq { cq: u8, solicited: bool },
    20 => CreateAh { pd: u8, field: u8, value: u32 },
    21 => DestroyAh { ah: u8 },
    22 => Deliver { budget: u8, drop: u8 },
    23 => Timeout { advance: u32 },
    24 => Unmap { offset: u16, len: u16 },
}

/// One step of an input: an op on node `node & 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Which node (low bit).
    pub node: u8,
    /// What it does.
    pub op: Op,
}

impl Step {
    /// Decodes a whole input.
    pub fn decode_all(data: &[u8]) -> Vec<Step> {
        let mut r = Reader::new(data);
        let mut out = Vec::new();
        while !r.is_empty() {
            let node = r.take();
            out.push(Step { node, op: r.take() });
        }
        out
    }

    /// Encodes steps as an input.
    pub fn encode_all(steps: &[Step]) -> Vec<u8> {
        let mut w = Writer::default();
        for s in steps {
            w.put(s.node);
            w.put(s.op);
        }
        w.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tag_decodes_and_encodes_back() {
        for tag in 0..OP_COUNT {
            let mut input = vec![1, tag];
            input.extend((0..64u8).map(|i| i.wrapping_mul(37)));
            let step = Step::decode_all(&input)[0];
            let again = Step::encode_all(&[step]);
            assert_eq!(Step::decode_all(&again)[0], step);
            assert_eq!(again[1], tag);
        }
    }
}
