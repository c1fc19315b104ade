//! `softverbs trace summarize`: per-QP statistics of a trace (WRs posted
//! by opcode, bytes, completions, errors, failed verbs, and the time from
//! each WR's post to its completion), then per process what no QP names.

use crate::record::{Line, Record};
use softverbs_faults::names::errno_name;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::{self, Write as _};
use std::io::BufRead;

/// A line that is not a trace record.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct SummaryError {
    /// Its number, from 1.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Where a record happened: process, device, and QP (None: no QP).
type Key = (u32, String, Option<u32>);

/// What a trace says, per QP and per process.
#[derive(Debug, Default)]
pub struct Summary {
    lines: usize,
    qps: BTreeMap<Key, Stats>,
    /// QPs created with `sq_sig_all`: every send WR completes.
    signal_all: Vec<Key>,
}

/// `IBV_SEND_SIGNALED`: a send WR that completes.
const SIGNALED: u32 = 1 << 1;

/// The counts of one QP (or of a process's other verbs).
#[derive(Debug, Default)]
struct Stats {
    posted: BTreeMap<String, u64>,
    bytes_posted: u64,
    completions: u64,
    bytes_completed: u64,
    errors: BTreeMap<String, u64>,
    verbs: u64,
    failed: BTreeMap<(String, i32), u64>,
    events: BTreeMap<String, u64>,
    /// Fault rules that fired, by line and text.
    faults: BTreeMap<(usize, String), u64>,
    send_latency: Vec<u64>,
    recv_latency: Vec<u64>,
    /// Post times of WRs not yet completed, by (receive?, wr_id).
    pending: HashMap<(bool, u64), VecDeque<u64>>,
}

impl Summary {
    /// Reads a trace, line by line.
    pub fn read(input: impl BufRead) -> Result<Summary, SummaryError> {
        let mut s = Summary::default();
        for (i, text) in input.lines().enumerate() {
            let fail = |message: String| SummaryError {
                line: i + 1,
                message,
            };
            let text = text.map_err(|e| fail(e.to_string()))?;
            if text.trim().is_empty() {
                continue;
            }
            let line: Line = serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?;
            s.add(line);
        }
        Ok(s)
    }

    fn add(&mut self, line: Line) {
        self.lines += 1;
        let Line {
            t,
            pid,
            dev,
            record,
            ..
        } = line;
        match record {
            Record::Verb(v) => {
                let key = (pid, dev, v.qp);
                let created = v.verb.starts_with("ibv_create_qp") && v.ret == 1;
                if created
                    && v.args
                        .get("sq_sig_all")
                        .and_then(|x| x.as_i64())
                        .unwrap_or(0)
                        != 0
                {
                    self.signal_all.push(key.clone());
                }
                let all = self.signal_all.contains(&key);
                let st = self.qps.entry(key).or_default();
                st.verbs += 1;
                if v.errno != 0 {
                    *st.failed.entry((v.verb.clone(), v.errno)).or_default() += 1;
                }
                for wr in &v.wrs {
                    *st.posted.entry(wr.opcode.clone()).or_default() += 1;
                    st.bytes_posted += wr.len;
                    let recv = wr.opcode == "RECV";
                    // Only a WR that completes waits for its completion:
                    // an unsignaled send would be paired with a later one.
                    if recv || all || wr.flags & SIGNALED != 0 {
                        st.pending.entry((recv, wr.wr_id)).or_default().push_back(t);
                    }
                }
            }
            Record::Completion(c) => {
                let st = self.qps.entry((pid, dev, Some(c.qp))).or_default();
                st.completions += 1;
                if c.status == "SUCCESS" {
                    st.bytes_completed += u64::from(c.byte_len);
                } else {
                    *st.errors.entry(c.status.clone()).or_default() += 1;
                }
                let recv = c.opcode.starts_with("RECV");
                let posted = st
                    .pending
                    .get_mut(&(recv, c.wr_id))
                    .and_then(VecDeque::pop_front);
                if let Some(at) = posted {
                    let lat = if recv {
                        &mut st.recv_latency
                    } else {
                        &mut st.send_latency
                    };
                    lat.push(t.saturating_sub(at));
                }
            }
            Record::Event(e) => {
                let st = self.qps.entry((pid, dev, e.qp)).or_default();
                *st.events.entry(e.event).or_default() += 1;
            }
            Record::Fault(fault) => {
                let st = self.qps.entry((pid, dev, fault.qp)).or_default();
                *st.faults.entry((fault.rule, fault.text)).or_default() += 1;
            }
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let qps = self.qps.keys().filter(|k| k.2.is_some()).count();
        writeln!(f, "{} records, {} QPs", self.lines, qps)?;
        for ((pid, dev, qp), st) in &self.qps {
            match qp {
                Some(n) => writeln!(f, "pid {pid} {dev} QP {n:#08x}:")?,
                None => writeln!(f, "pid {pid} {dev}, verbs naming no QP:")?,
            }
            st.describe(f)?;
        }
        Ok(())
    }
}

impl Stats {
    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let wrs: u64 = self.posted.values().sum();
        if wrs > 0 {
            writeln!(
                f,
                "  posted: {wrs} WRs ({}), {} bytes",
                counts(&self.posted),
                self.bytes_posted
            )?;
        }
        if self.completions > 0 {
            let errors: u64 = self.errors.values().sum();
            writeln!(
                f,
                "  completions: {} ({errors} in error), {} bytes",
                self.completions, self.bytes_completed
            )?;
        }
        if !self.errors.is_empty() {
            writeln!(f, "  error completions: {}", counts(&self.errors))?;
        }
        latency(f, "send", &self.send_latency)?;
        latency(f, "receive", &self.recv_latency)?;
        let failed: u64 = self.failed.values().sum();
        let mut line = format!("  verbs: {}, {failed} failed", self.verbs);
        for ((verb, errno), n) in &self.failed {
            let _ = write!(line, "; {verb} {} x{n}", errno_name(*errno));
        }
        writeln!(f, "{line}")?;
        if !self.events.is_empty() {
            writeln!(f, "  events: {}", counts(&self.events))?;
        }
        for ((rule, text), n) in &self.faults {
            writeln!(f, "  fault rule {rule} fired x{n}: {text}")?;
        }
        Ok(())
    }
}

/// "A 3, B 1".
fn counts(map: &BTreeMap<String, u64>) -> String {
    let parts: Vec<_> = map.iter().map(|(k, n)| format!("{k} {n}")).collect();
    parts.join(", ")
}

/// One line of completion latency statistics, in microseconds.
fn latency(f: &mut fmt::Formatter<'_>, what: &str, samples: &[u64]) -> fmt::Result {
    if samples.is_empty() {
        return Ok(());
    }
    let mut s = samples.to_vec();
    s.sort_unstable();
    let us = |ns: u64| ns as f64 / 1000.0;
    let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
    let mean = s.iter().sum::<u64>() / s.len() as u64;
    writeln!(
        f,
        "  {what} completion latency (post to completion): {} WRs, mean {:.1} us, p50 {:.1} us, p99 {:.1} us, max {:.1} us",
        s.len(),
        us(mean),
        us(at(0.5)),
        us(at(0.99)),
        us(s[s.len() - 1]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = r#"
{"t":1000,"pid":7,"tid":7,"dev":"softverbs0","kind":"verb","verb":"ibv_post_recv","qp":4096,"wrs":[{"wr_id":9,"opcode":"RECV","len":64}],"ret":0}
{"t":2000,"pid":7,"tid":7,"dev":"softverbs0","kind":"verb","verb":"ibv_post_send","qp":4096,"wrs":[{"wr_id":1,"opcode":"SEND","len":8,"flags":2},{"wr_id":2,"opcode":"RDMA_WRITE","len":100,"flags":2},{"wr_id":3,"opcode":"SEND","len":4}],"ret":0}
{"t":5000,"pid":7,"tid":7,"dev":"softverbs0","kind":"completion","cq":"0x10","qp":4096,"wr_id":1,"status":"SUCCESS","opcode":"SEND","byte_len":8}
{"t":9000,"pid":7,"tid":7,"dev":"softverbs0","kind":"completion","cq":"0x10","qp":4096,"wr_id":2,"status":"RETRY_EXC_ERR","opcode":"RDMA_WRITE","byte_len":0}
{"t":11000,"pid":7,"tid":7,"dev":"softverbs0","kind":"completion","cq":"0x10","qp":4096,"wr_id":9,"status":"SUCCESS","opcode":"RECV","byte_len":8}
{"t":12000,"pid":7,"tid":7,"dev":"softverbs0","kind":"verb","verb":"ibv_post_send","qp":4096,"args":{"bad_wr":3},"ret":12,"errno":12}
{"t":13000,"pid":7,"tid":8,"dev":"softverbs0","kind":"event","event":"QP_FATAL","qp":4096}
{"t":8000,"pid":7,"tid":8,"dev":"softverbs0","kind":"fault","rule":2,"text":"completion opcode=RDMA_WRITE status=RETRY_EXC_ERR","qp":4096}
{"t":8500,"pid":7,"tid":8,"dev":"softverbs0","kind":"fault","rule":1,"text":"post_srq_recv every=2 errno=ENOMEM"}
{"t":500,"pid":7,"tid":7,"dev":"softverbs0","kind":"verb","verb":"ibv_reg_mr","args":{"length":4096},"ret":0,"errno":14}
"#;

    #[test]
    fn per_qp_counts_errors_and_latency_of_signaled_wrs() {
        let s = Summary::read(TRACE.as_bytes()).unwrap();
        let text = s.to_string();
        let want = [
            "10 records, 1 QPs",
            "pid 7 softverbs0, verbs naming no QP:",
            "  verbs: 1, 1 failed; ibv_reg_mr EFAULT x1",
            "  fault rule 1 fired x1: post_srq_recv every=2 errno=ENOMEM",
            "pid 7 softverbs0 QP 0x001000:",
            "  posted: 4 WRs (RDMA_WRITE 1, RECV 1, SEND 2), 176 bytes",
            "  completions: 3 (1 in error), 16 bytes",
            "  error completions: RETRY_EXC_ERR 1",
            "  send completion latency (post to completion): 2 WRs, mean 5.0 us, p50 7.0 us, p99 7.0 us, max 7.0 us",
            "  receive completion latency (post to completion): 1 WRs, mean 10.0 us, p50 10.0 us, p99 10.0 us, max 10.0 us",
            "  verbs: 3, 1 failed; ibv_post_send ENOMEM x1",
            "  events: QP_FATAL 1",
            "  fault rule 2 fired x1: completion opcode=RDMA_WRITE status=RETRY_EXC_ERR",
        ];
        assert_eq!(text.lines().collect::<Vec<_>>(), want, "{text}");
    }

    #[test]
    fn a_line_that_is_not_a_record_is_named() {
        let e = Summary::read("{\"t\":1}\n".as_bytes()).unwrap_err();
        assert_eq!(e.line, 1);
    }
}
