//! A rule: where it applies (filters), which of its matches fire
//! (selector), and what a firing does (action).

use std::net::IpAddr;
use std::time::Duration;

/// One rule of `SOFTVERBS_FAULTS`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Its line (or `;`-separated item) in the text, counted from 1.
    pub line: usize,
    /// Its text as written (a trace's fault records name it).
    pub text: String,
    /// Which events it looks at.
    pub filter: Filter,
    /// Which of those fire.
    pub select: Select,
    /// What a firing does.
    pub action: Action,
}

/// Which events a rule looks at; `None` matches anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// The device's name (`softverbs0`).
    pub device: Option<String>,
    /// The local QP number.
    pub qp: Option<u32>,
    /// An `ibv_wr_opcode` (post rules) or `ibv_wc_opcode` (completion
    /// rules).
    pub opcode: Option<u32>,
    /// The remote address a packet came from (packet rules).
    pub peer: Option<IpAddr>,
}

/// Which matches fire: all of the set conditions hold. Matches are
/// counted per rule from 1, over every QP the rule's filter admits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Select {
    /// Only every Nth match (N, 2N, ...).
    pub every: Option<u64>,
    /// Only the Nth match.
    pub nth: Option<u64>,
    /// Not the first N matches.
    pub after: u64,
    /// Not before the matches so far carried N bytes.
    pub after_bytes: u64,
    /// Each with this probability (0 to 1), from the seeded generator.
    pub prob: Option<f64>,
    /// At most N firings.
    pub count: Option<u64>,
    /// Only while the device's time is in this window.
    pub window: Option<Window>,
}

/// A span of the device's time (since it was opened), repeated every
/// `period` if set: `from=1s until=1.2s period=2s` is 200 ms at the
/// start of every second second (a flapping link).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Start (0 if not given).
    pub from: Duration,
    /// End, exclusive (none: open-ended, or the period's end).
    pub until: Option<Duration>,
    /// Repeats with this period.
    pub period: Option<Duration>,
}

impl Window {
    /// Whether time `t` since the device opened is inside.
    pub fn contains(&self, t: Duration) -> bool {
        let t = match self.period {
            Some(p) if !p.is_zero() => Duration::from_nanos((t.as_nanos() % p.as_nanos()) as u64),
            _ => t,
        };
        t >= self.from && self.until.is_none_or(|u| t < u)
    }
}

/// What a firing does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// The post verb returns this errno, with `bad_wr` at the WR.
    FailPost {
        /// Which post verb.
        queue: Queue,
        /// The errno it returns.
        errno: i32,
    },
    /// A successful completion is reported with this `ibv_wc_status`, and
    /// its QP enters the error state, as on a device that failed the WR.
    FailCompletion {
        /// The status reported.
        status: u32,
        /// The `vendor_err` reported with it.
        vendor_err: u32,
    },
    /// A completion, and every later one of its CQ (their order is kept),
    /// is held back this long.
    DelayCompletion(Duration),
    /// The QP enters the error state with IBV_EVENT_QP_FATAL.
    QpError(QpErrorWhen),
    /// A packet as this device receives it.
    Packet(PacketAction),
}

/// Which post verb a post rule fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// `ibv_post_send` (and `ibv_wr_complete`).
    Send,
    /// `ibv_post_recv`.
    Recv,
    /// `ibv_post_srq_recv`.
    SrqRecv,
}

/// When a `qp_error` rule moves a QP to the error state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpErrorWhen {
    /// Right after the QP's Nth posted WR (counted per QP).
    AfterOps(u64),
    /// This long after the device was opened (every matching QP then in
    /// INIT, RTR, RTS, SQD or SQE).
    At(Duration),
}

/// What happens to a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketAction {
    /// Lost.
    Drop,
    /// Delivered twice.
    Duplicate,
    /// Delivered after the next packet (or after a millisecond if none
    /// comes).
    Reorder,
    /// Delivered this much later.
    Delay(Duration),
    /// One byte flipped: its ICRC no longer holds, so it is dropped and
    /// counted as a bad ICRC, as a NIC does.
    Corrupt,
}

impl Rule {
    /// Whether this rule acts on packets (and so needs the wire path).
    pub fn is_packet_rule(&self) -> bool {
        matches!(self.action, Action::Packet(_))
    }
}
