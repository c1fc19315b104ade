//! What a trace line holds. Each line is one JSON object: when and where
//! ([`Line`]'s header fields), then one record, told apart by `kind`:
//!
//! ```json
//! {"t":1234,"pid":7,"tid":7,"dev":"softverbs0","kind":"verb","verb":"ibv_post_send","qp":4096,"wrs":[{"wr_id":1,"opcode":"SEND","len":8}],"ret":0}
//! {"t":1290,"pid":7,"tid":7,"dev":"softverbs0","kind":"completion","cq":"0x55d0c0","qp":4096,"wr_id":1,"status":"SUCCESS","opcode":"SEND","byte_len":8}
//! {"t":1300,"pid":7,"tid":8,"dev":"softverbs0","kind":"event","event":"QP_FATAL","qp":4096}
//! {"t":1250,"pid":7,"tid":8,"dev":"softverbs0","kind":"fault","rule":1,"text":"qp_error at=1s","qp":4096}
//! ```
//!
//! Names are verbs.h's without their prefix (`RDMA_WRITE`, `RETRY_EXC_ERR`,
//! `QP_FATAL`); objects are named by QP number, or by their address for
//! CQs, PDs, MRs, AHs and SRQs.

use serde::{Deserialize, Serialize};

/// One line of a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    /// CLOCK_MONOTONIC, in nanoseconds: lines of several processes on one
    /// host can be merged by it.
    pub t: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The device's name.
    pub dev: String,
    /// What happened.
    #[serde(flatten)]
    pub record: Record,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// A verb returned.
    Verb(Verb),
    /// A completion was handed to the application.
    Completion(Completion),
    /// An async event or a completion event was handed to it.
    Event(Event),
    /// A fault rule (`SOFTVERBS_FAULTS`) fired.
    Fault(Fault),
}

/// A verb, its arguments and its result.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Verb {
    /// Its name (`ibv_modify_qp`).
    pub verb: String,
    /// The QP it acts on, by number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qp: Option<u32>,
    /// Its other arguments and what it returned through them, by name.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub args: serde_json::Map<String, serde_json::Value>,
    /// The WRs a post verb accepted (a failed one names the WR it
    /// refused in `args.bad_wr`, by wr_id).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wrs: Vec<Wr>,
    /// Its return value (a pointer as 0 or 1: failed or not).
    pub ret: i64,
    /// errno, for a verb that failed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub errno: i32,
}

/// A posted WR.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Wr {
    /// Its wr_id.
    pub wr_id: u64,
    /// `ibv_wr_opcode` name, or `RECV` for a receive WR.
    pub opcode: String,
    /// Bytes: its SGEs' lengths, or its inline data.
    pub len: u64,
    /// `ibv_send_flags`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub flags: u32,
    /// RDMA or atomic target address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_addr: Option<u64>,
    /// RDMA or atomic target key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rkey: Option<u32>,
    /// The immediate data of a `*_WITH_IMM` WR, as `ntohl(imm_data)`
    /// gives it (the number on the wire), or the rkey a `SEND_WITH_INV`
    /// or `LOCAL_INV` invalidates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imm: Option<u32>,
}

impl Wr {
    /// The `imm` of a send WR of `ibv_wr_opcode` `opcode` carrying
    /// `value` (immediate data in host order, or an rkey), if the opcode
    /// carries one.
    pub fn imm_of(opcode: u32, value: u32) -> Option<u32> {
        // verbs.h's numbers: RDMA_WRITE_WITH_IMM, SEND_WITH_IMM,
        // LOCAL_INV, SEND_WITH_INV.
        matches!(opcode, 1 | 3 | 7 | 9).then_some(value)
    }
}

/// A completion.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Completion {
    /// The CQ, by address.
    pub cq: String,
    /// The QP number.
    pub qp: u32,
    /// The WR's wr_id.
    pub wr_id: u64,
    /// `ibv_wc_status` name.
    pub status: String,
    /// `ibv_wc_opcode` name.
    pub opcode: String,
    /// Bytes transferred.
    pub byte_len: u32,
    /// Immediate data, as `ntohl(wc.imm_data)` gives it (the number on
    /// the wire), or the invalidated rkey.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imm: Option<u32>,
    /// `ibv_wc_flags`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wc_flags: u32,
    /// Vendor error syndrome.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub vendor_err: u32,
    /// Remote QP number (UD).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub src_qp: u32,
}

/// An async event (`ibv_get_async_event`) or a completion event
/// (`ibv_get_cq_event`, as `COMP`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Event {
    /// `ibv_event_type` name without `IBV_EVENT_`, or `COMP`.
    pub event: String,
    /// The QP it names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qp: Option<u32>,
    /// The CQ or SRQ it names, by address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// The port it names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
}

/// A fault rule's firing: what it did shows in the records that follow
/// (a failed post, an error completion, an event) or, for packets, in
/// what the QP does next.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Fault {
    /// The rule's line (or `;`-separated item), counted from 1.
    pub rule: usize,
    /// The rule as written.
    pub text: String,
    /// The local QP it fired on (none for an SRQ's receive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qp: Option<u32>,
}

fn is_zero<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// An object's address as a trace names it.
pub fn address<T>(p: *const T) -> String {
    format!("{:#x}", p as usize)
}

/// `enum ibv_event_type` names, by value.
const EVENT_TYPES: [&str; 21] = [
    "CQ_ERR",
    "QP_FATAL",
    "QP_REQ_ERR",
    "QP_ACCESS_ERR",
    "COMM_EST",
    "SQ_DRAINED",
    "PATH_MIG",
    "PATH_MIG_ERR",
    "DEVICE_FATAL",
    "PORT_ACTIVE",
    "PORT_ERR",
    "LID_CHANGE",
    "PKEY_CHANGE",
    "SM_CHANGE",
    "SRQ_ERR",
    "SRQ_LIMIT_REACHED",
    "QP_LAST_WQE_REACHED",
    "CLIENT_REREGISTER",
    "GID_CHANGE",
    "WQ_FATAL",
    "UNKNOWN",
];

/// The name of an `ibv_event_type` value.
pub fn event_name(kind: u32) -> &'static str {
    EVENT_TYPES.get(kind as usize).copied().unwrap_or("UNKNOWN")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_one_flat_json_object_and_reads_back() {
        let line = Line {
            t: 5,
            pid: 1,
            tid: 2,
            dev: "softverbs0".into(),
            record: Record::Verb(Verb {
                verb: "ibv_post_send".into(),
                qp: Some(7),
                wrs: vec![Wr {
                    wr_id: 1,
                    opcode: "SEND".into(),
                    len: 8,
                    ..Wr::default()
                }],
                ..Verb::default()
            }),
        };
        let text = serde_json::to_string(&line).unwrap();
        assert_eq!(
            text,
            r#"{"t":5,"pid":1,"tid":2,"dev":"softverbs0","kind":"verb","verb":"ibv_post_send","qp":7,"wrs":[{"wr_id":1,"opcode":"SEND","len":8}],"ret":0}"#
        );
        assert_eq!(serde_json::from_str::<Line>(&text).unwrap(), line);
        assert_eq!(
            (event_name(1), event_name(16), event_name(99)),
            ("QP_FATAL", "QP_LAST_WQE_REACHED", "UNKNOWN")
        );
    }
}
