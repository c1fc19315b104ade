//! Parsing `SOFTVERBS_FAULTS`: the grammar is in docs/fault-injection.md.
//!
//! A rule is a kind followed by words: `key=value` pairs (filters, a
//! selector, the action's arguments) and, for packet rules, the action's
//! name. Rules are separated by newlines or `;`; `#` starts a comment.

use crate::names;
use crate::rule::{Action, Filter, PacketAction, QpErrorWhen, Queue, Rule, Select, Window};
use std::net::IpAddr;
use std::time::Duration;

/// The environment variable holding the rules, or the path of a file
/// holding them.
pub const ENV: &str = "SOFTVERBS_FAULTS";

/// The seed used when the rules name none: runs repeat unless asked not
/// to.
pub const DEFAULT_SEED: u64 = 1;

/// A parsed set of rules.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultSpec {
    /// Seeds the generator of `prob=` selectors.
    pub seed: u64,
    /// In the order written; the first that fires decides.
    pub rules: Vec<Rule>,
}

/// A rule that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{ENV}: rule {line} (`{text}`): {message}")]
pub struct ParseError {
    /// The rule's line or item number, from 1.
    pub line: usize,
    /// The rule's text.
    pub text: String,
    /// What is wrong with it.
    pub message: String,
}

impl FaultSpec {
    /// The rules of `SOFTVERBS_FAULTS`: its value, or the file it names.
    /// `Ok(None)` when it is unset or empty.
    pub fn from_env() -> Result<Option<FaultSpec>, ParseError> {
        let Some(value) = std::env::var_os(ENV).filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        FaultSpec::from_value(&value.to_string_lossy()).map(Some)
    }

    /// The rules of a `SOFTVERBS_FAULTS` value: the rules it holds, or
    /// those of the file it names.
    pub fn from_value(value: &str) -> Result<FaultSpec, ParseError> {
        let value = value.to_string();
        let path = std::path::Path::new(&value);
        let names_a_file = path.is_file() || looks_like_a_path(&value);
        let text = if names_a_file {
            std::fs::read_to_string(path).map_err(|e| ParseError {
                line: 0,
                text: value.clone(),
                message: format!("cannot read the file: {e}"),
            })?
        } else {
            value
        };
        FaultSpec::parse(&text)
    }

    /// Parses rules from text.
    pub fn parse(text: &str) -> Result<FaultSpec, ParseError> {
        let mut spec = FaultSpec {
            seed: DEFAULT_SEED,
            rules: Vec::new(),
        };
        let items = text
            .lines()
            .flat_map(|l| l.split('#').next().unwrap_or("").split(';'));
        for (i, item) in items
            .map(str::trim)
            .enumerate()
            .filter(|(_, s)| !s.is_empty())
        {
            let line = i + 1;
            let fail = |message: String| ParseError {
                line,
                text: item.to_string(),
                message,
            };
            if let Some(seed) = item.strip_prefix("seed=") {
                spec.seed = seed
                    .trim()
                    .parse()
                    .map_err(|_| fail("seed is not a number".into()))?;
                continue;
            }
            spec.rules.push(parse_rule(line, item).map_err(fail)?);
        }
        Ok(spec)
    }

    /// Whether a rule acts on packets.
    pub fn has_packet_rules(&self) -> bool {
        self.rules.iter().any(Rule::is_packet_rule)
    }
}

/// Whether a value that names no file was meant to: one word with a
/// `/` and no `=` is no rule (a rule starts with its kind), so a rules
/// file that is not there is said as such, not as an unknown rule kind.
fn looks_like_a_path(value: &str) -> bool {
    let value = value.trim();
    value.contains('/') && !value.contains('=') && !value.contains(char::is_whitespace)
}

/// The rule kinds.
const KINDS: [&str; 6] = [
    "post_send",
    "post_recv",
    "post_srq_recv",
    "completion",
    "qp_error",
    "packet",
];

fn unknown_kind(kind: &str) -> String {
    format!("unknown rule kind `{kind}` ({})", KINDS.join(", "))
}

/// The words of one rule, parsed into it.
fn parse_rule(line: usize, item: &str) -> Result<Rule, String> {
    let mut words = item.split_whitespace();
    let kind = words.next().unwrap_or_default();
    // The kind first: a misspelt one must not be reported as its keys.
    if !kind.is_empty() && !KINDS.contains(&kind) {
        return Err(unknown_kind(kind));
    }
    let mut b = Builder::default();
    let mut seen = Vec::new();
    for word in words {
        match word.split_once('=') {
            Some((key, value)) => {
                check_key(kind, key, &seen)?;
                seen.push(key);
                b.pair(kind, key, value)?;
            }
            None => b.bare(kind, word)?,
        }
    }
    let action = b.action(kind)?;
    Ok(Rule {
        line,
        text: item.to_string(),
        filter: b.filter,
        select: b.select,
        action,
    })
}

/// The selectors every kind but `qp_error` takes (whose `after=` counts
/// the QP's own WRs, and which fires once).
const SELECTORS: [&str; 9] = [
    "every",
    "nth",
    "after",
    "after_bytes",
    "count",
    "prob",
    "from",
    "until",
    "period",
];

/// Whether a rule of `kind` takes `key` (docs/fault-injection.md): a key
/// another kind takes would otherwise be silently ignored, and the rule
/// would fire where its writer did not mean it to.
fn takes(kind: &str, key: &str) -> bool {
    match key {
        "device" | "qp" => true,
        "after" if kind == "qp_error" => true,
        _ if SELECTORS.contains(&key) => kind != "qp_error",
        "opcode" => matches!(kind, "post_send" | "completion"),
        "errno" => matches!(kind, "post_send" | "post_recv" | "post_srq_recv"),
        "status" | "vendor_err" => kind == "completion",
        "delay" => matches!(kind, "completion" | "packet"),
        "at" => kind == "qp_error",
        "peer" => kind == "packet",
        _ => false,
    }
}

/// Refuses a key no kind takes, one this `kind` does not take, and one
/// given twice (the second would silently replace the first).
fn check_key(kind: &str, key: &str, seen: &[&str]) -> Result<(), String> {
    if !KINDS.iter().any(|k| takes(k, key)) {
        return Err(format!("unknown key `{key}`"));
    }
    if !takes(kind, key) {
        return Err(format!("{key}= does not apply to {kind} rules"));
    }
    if seen.contains(&key) {
        return Err(format!("{key}= is given twice"));
    }
    Ok(())
}

/// Why a packet rule with two actions is refused: which would win is
/// not written anywhere, so neither may.
const ONE_PACKET_ACTION: &str =
    "a packet rule has one action: drop, duplicate, reorder, corrupt and delay= are exclusive";

/// What the words of a rule said so far.
#[derive(Default)]
struct Builder {
    filter: Filter,
    select: Select,
    errno: Option<i32>,
    status: Option<u32>,
    vendor_err: Option<u32>,
    delay: Option<Duration>,
    at: Option<Duration>,
    packet: Option<PacketAction>,
}

impl Builder {
    fn pair(&mut self, kind: &str, key: &str, value: &str) -> Result<(), String> {
        let hint = match key {
            "delay" | "at" | "from" | "until" | "period" => {
                " (a time with its unit: 500us, 5ms, 2s)"
            }
            "after_bytes" | "after" | "count" => " (a count, or bytes with K, M or G)",
            "prob" => " (0.01 or 1%)",
            _ => "",
        };
        let bad = || format!("bad value for {key}: `{value}`{hint}");
        match key {
            "device" => self.filter.device = Some(value.to_string()),
            "qp" => self.filter.qp = Some(parse_u32(value).ok_or_else(bad)?),
            "opcode" => {
                // check_key admits opcode= for post_send and completion only.
                let code = if kind == "post_send" {
                    names::wr_opcode(value)
                } else {
                    names::wc_opcode(value)
                };
                self.filter.opcode = Some(code.ok_or_else(bad)?);
            }
            "peer" => self.filter.peer = Some(parse_peer(value).ok_or_else(bad)?),
            "every" => self.select.every = Some(positive(value).ok_or_else(bad)?),
            "nth" => self.select.nth = Some(positive(value).ok_or_else(bad)?),
            "after" => self.select.after = parse_size(value).ok_or_else(bad)?,
            "after_bytes" => self.select.after_bytes = parse_size(value).ok_or_else(bad)?,
            "count" => self.select.count = Some(parse_size(value).ok_or_else(bad)?),
            "prob" => self.select.prob = Some(parse_prob(value).ok_or_else(bad)?),
            "errno" => self.errno = Some(names::errno(value).ok_or_else(bad)?),
            "status" => self.status = Some(names::wc_status(value).ok_or_else(bad)?),
            "vendor_err" => self.vendor_err = Some(parse_u32(value).ok_or_else(bad)?),
            "delay" => self.delay = Some(parse_duration(value).ok_or_else(bad)?),
            "at" => self.at = Some(parse_duration(value).ok_or_else(bad)?),
            "from" | "until" | "period" => {
                let d = parse_duration(value).ok_or_else(bad)?;
                let w = self.select.window.get_or_insert(Window {
                    from: Duration::ZERO,
                    until: None,
                    period: None,
                });
                match key {
                    "from" => w.from = d,
                    "until" => w.until = Some(d),
                    _ if d.is_zero() => return Err(bad()),
                    _ => w.period = Some(d),
                }
            }
            _ => return Err(format!("unknown key `{key}`")),
        }
        Ok(())
    }

    fn bare(&mut self, kind: &str, word: &str) -> Result<(), String> {
        let action = match (kind, word) {
            ("packet", "drop") => PacketAction::Drop,
            ("packet", "duplicate") => PacketAction::Duplicate,
            ("packet", "reorder") => PacketAction::Reorder,
            ("packet", "corrupt") => PacketAction::Corrupt,
            _ => {
                return Err(format!(
                    "unknown word `{word}` (keys are written key=value)"
                ))
            }
        };
        if self.packet.replace(action).is_some() {
            return Err(ONE_PACKET_ACTION.into());
        }
        Ok(())
    }

    /// The action of a rule of `kind`, checking that it has what it needs
    /// (check_key already refused what other kinds take).
    fn action(&mut self, kind: &str) -> Result<Action, String> {
        self.check_window()?;
        let queue = match kind {
            "post_send" => Queue::Send,
            "post_recv" => Queue::Recv,
            "post_srq_recv" => Queue::SrqRecv,
            "completion" => return self.completion(),
            "qp_error" => return self.qp_error(),
            "packet" => return self.packet(),
            "" => return Err("empty rule".into()),
            _ => return Err(unknown_kind(kind)),
        };
        let errno = self.errno.ok_or("a post rule needs errno=")?;
        Ok(Action::FailPost { queue, errno })
    }

    fn check_window(&self) -> Result<(), String> {
        let Some(w) = self.select.window else {
            return Ok(());
        };
        if w.until.is_some_and(|u| u <= w.from) {
            return Err("until= must come after from=".into());
        }
        if w.period
            .is_some_and(|p| w.from >= p || w.until.is_some_and(|u| u > p))
        {
            return Err("from= and until= must lie within period=".into());
        }
        Ok(())
    }

    /// `completion status=S [vendor_err=V]` or `completion delay=T`.
    fn completion(&self) -> Result<Action, String> {
        // vendor_err= is reported with a failed status only.
        if self.vendor_err.is_some() && self.status.is_none() {
            return Err("vendor_err= goes with status=".into());
        }
        match (self.status, self.delay) {
            (Some(_), Some(_)) => Err(
                "status= and delay= are exclusive: a completion rule has one action \
                 (write two rules to fail and delay one completion)"
                    .into(),
            ),
            (Some(0), None) => Err("status= must be an error, not SUCCESS".into()),
            (Some(status), None) => Ok(Action::FailCompletion {
                status,
                vendor_err: self.vendor_err.unwrap_or(0),
            }),
            (None, Some(d)) => Ok(Action::DelayCompletion(d)),
            (None, None) => {
                Err("a completion rule needs one of status= (an error) and delay=".into())
            }
        }
    }

    /// `qp_error after=N` or `qp_error at=TIME`: `after` here counts the
    /// QP's own WRs, so it is taken out of the selector (check_key
    /// refused every other selector).
    fn qp_error(&mut self) -> Result<Action, String> {
        let after = std::mem::take(&mut self.select.after);
        match (after, self.at) {
            (n, Some(_)) if n > 0 => Err("after= and at= are exclusive in a qp_error rule".into()),
            (n, None) if n > 0 => Ok(Action::QpError(QpErrorWhen::AfterOps(n))),
            (0, Some(at)) => Ok(Action::QpError(QpErrorWhen::At(at))),
            _ => Err("qp_error needs one of after=N (N > 0) and at=TIME".into()),
        }
    }

    /// `packet drop|duplicate|reorder|corrupt` or `packet delay=T`.
    fn packet(&self) -> Result<Action, String> {
        // QP0 and QP1 (the CM's MADs) go through the host daemon, never
        // past the packet rules: such a rule would silently do nothing.
        if let Some(qp @ (0 | 1)) = self.filter.qp {
            return Err(format!(
                "qp={qp}: CM and management traffic (QP0, QP1) is not subject to packet rules"
            ));
        }
        match (self.packet, self.delay) {
            (Some(_), Some(_)) => Err(ONE_PACKET_ACTION.into()),
            (Some(a), None) => Ok(Action::Packet(a)),
            (None, Some(d)) => Ok(Action::Packet(PacketAction::Delay(d))),
            (None, None) => Err(
                "a packet rule needs one of drop, duplicate, reorder, corrupt and delay=".into(),
            ),
        }
    }
}

/// A decimal or `0x` hexadecimal number.
fn parse_u32(text: &str) -> Option<u32> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// An IP address, an IPv4-mapped IPv6 one (`::ffff:127.0.0.37`, as the
/// GIDs of IPv4 addresses print) taken as the IPv4 address it maps, so
/// that it matches the packets of that IPv4 peer.
fn parse_peer(text: &str) -> Option<IpAddr> {
    text.parse::<IpAddr>().ok().map(|a| a.to_canonical())
}

fn positive(text: &str) -> Option<u64> {
    parse_size(text).filter(|&n| n > 0)
}

/// A count or size, with an optional binary suffix (`64K`, `1M`, `2G`).
fn parse_size(text: &str) -> Option<u64> {
    let (digits, shift) = match text.as_bytes().last()? {
        b'k' | b'K' => (&text[..text.len() - 1], 10),
        b'm' | b'M' => (&text[..text.len() - 1], 20),
        b'g' | b'G' => (&text[..text.len() - 1], 30),
        _ => (text, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// A probability: `0.01` or `1%`.
fn parse_prob(text: &str) -> Option<f64> {
    let p = match text.strip_suffix('%') {
        Some(pct) => pct.parse::<f64>().ok()? / 100.0,
        None => text.parse().ok()?,
    };
    (0.0..=1.0).contains(&p).then_some(p)
}

/// A duration with its unit (`5ms`, `2s`, `100us`).
fn parse_duration(text: &str) -> Option<Duration> {
    humantime::parse_duration(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value that names a file that is not there is said as such (it
    /// was "unknown rule kind `/tmp/x.rules`").
    #[test]
    fn a_missing_rules_file_is_said_as_one() {
        let e = FaultSpec::from_value("/no/such/dir/x.rules").unwrap_err();
        assert!(e.to_string().contains("cannot read the file"), "{e}");
        assert!(FaultSpec::from_value("packet drop prob=1%").is_ok());
    }

    fn one(text: &str) -> Rule {
        let spec = FaultSpec::parse(text).unwrap();
        assert_eq!(spec.rules.len(), 1, "{text}");
        spec.rules[0].clone()
    }

    #[test]
    fn every_kind_parses() {
        let r = one("post_send qp=0x11 opcode=RDMA_WRITE every=3 errno=ENOMEM");
        assert_eq!(
            r.action,
            Action::FailPost {
                queue: Queue::Send,
                errno: 12
            }
        );
        assert_eq!(
            (r.filter.qp, r.filter.opcode, r.select.every),
            (Some(0x11), Some(0), Some(3))
        );
        let r = one("completion opcode=recv after_bytes=1M status=IBV_WC_REM_ACCESS_ERR");
        assert_eq!(
            r.action,
            Action::FailCompletion {
                status: 10,
                vendor_err: 0
            }
        );
        assert_eq!(
            (r.filter.opcode, r.select.after_bytes),
            (Some(128), 1 << 20)
        );
        assert_eq!(
            one("completion delay=5ms").action,
            Action::DelayCompletion(Duration::from_millis(5))
        );
        assert_eq!(
            one("qp_error after=100").action,
            Action::QpError(QpErrorWhen::AfterOps(100))
        );
        assert_eq!(
            one("qp_error at=2s").action,
            Action::QpError(QpErrorWhen::At(Duration::from_secs(2)))
        );
        let r = one("packet drop prob=1% peer=10.0.0.2 device=softverbs0");
        assert_eq!(r.action, Action::Packet(PacketAction::Drop));
        assert_eq!(r.select.prob, Some(0.01));
        assert_eq!(r.filter.peer, Some("10.0.0.2".parse().unwrap()));
        assert_eq!(r.filter.device.as_deref(), Some("softverbs0"));
        assert_eq!(
            one("packet delay=2ms").action,
            Action::Packet(PacketAction::Delay(Duration::from_millis(2)))
        );
        let w = one("packet drop from=1s until=1200ms period=2s")
            .select
            .window
            .unwrap();
        let ms = Duration::from_millis;
        assert_eq!(
            (w.from, w.until, w.period),
            (ms(1000), Some(ms(1200)), Some(ms(2000)))
        );
        assert!(!w.contains(ms(999)) && w.contains(ms(1000)) && !w.contains(ms(1200)));
        assert!(w.contains(ms(5100)) && !w.contains(ms(4100)));
    }

    #[test]
    fn lists_seeds_and_comments() {
        let spec =
            FaultSpec::parse("seed=42; packet duplicate # twice\n\n post_recv errno=EAGAIN nth=2")
                .unwrap();
        assert_eq!(spec.seed, 42);
        assert_eq!(spec.rules.len(), 2);
        assert!(spec.has_packet_rules());
        assert_eq!(FaultSpec::parse("").unwrap().seed, DEFAULT_SEED);
    }

    #[test]
    fn mistakes_are_named() {
        for (text, says) in [
            ("post_send every=3", "needs errno="),
            ("completion status=SUCCESS", "must be an error"),
            ("completion", "needs one of status="),
            (
                "completion status=RETRY_EXC_ERR delay=5ms",
                "status= and delay= are exclusive",
            ),
            ("packet", "needs one of drop"),
            ("packet drop corrupt", "one action"),
            ("packet drop drop", "one action"),
            ("packet corrupt delay=1ms", "one action"),
            ("packet delay=1ms reorder", "are exclusive"),
            ("qp_error", "needs one of after="),
            ("qp_error after=0", "needs one of after="),
            ("qp_error after=3 at=1s", "after= and at= are exclusive"),
            (
                "qp_error after=3 every=2",
                "every= does not apply to qp_error",
            ),
            ("post_recv opcode=SEND errno=EINVAL", "does not apply"),
            (
                "completion peer=1.2.3.4 delay=1ms",
                "peer= does not apply to completion",
            ),
            ("packet drop prob=150%", "bad value for prob"),
            ("packet drop speed=3", "unknown key"),
            ("explode", "unknown rule kind"),
            ("packt drop peer=1.2.3.4", "unknown rule kind `packt`"),
            ("seed=x", "seed is not a number"),
            ("packet drop from=2s until=1s", "until= must come after"),
            ("packet drop period=0s", "bad value for period"),
            (
                "packet delay=5",
                "bad value for delay: `5` (a time with its unit",
            ),
            ("packet drop until=3s period=2s", "within period="),
            ("packet drop from=2s period=2s", "within period="),
        ] {
            let e = FaultSpec::parse(text).unwrap_err();
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn a_mapped_ipv6_peer_is_its_ipv4_address() {
        let v4: IpAddr = "127.0.0.37".parse().unwrap();
        assert_eq!(
            one("packet drop peer=::ffff:127.0.0.37").filter.peer,
            Some(v4)
        );
        assert_eq!(one("packet drop peer=127.0.0.37").filter.peer, Some(v4));
        let v6: IpAddr = "fe80::1".parse().unwrap();
        assert_eq!(one("packet drop peer=fe80::1").filter.peer, Some(v6));
    }

    #[test]
    fn packet_rules_refuse_the_management_qps() {
        for text in [
            "packet drop qp=1",
            "packet delay=1ms qp=0",
            "packet corrupt qp=0x1",
        ] {
            let e = FaultSpec::parse(text).unwrap_err();
            assert!(
                e.to_string().contains("not subject to packet rules"),
                "{text}: {e}"
            );
        }
        assert!(FaultSpec::parse("packet drop qp=2").is_ok());
        // Verbs rules on QP1 are not packet rules.
        assert!(FaultSpec::parse("completion qp=1 delay=1ms").is_ok());
    }

    /// Every key docs/fault-injection.md does not give a kind is refused,
    /// naming the key and the kind, instead of being ignored.
    #[test]
    fn keys_of_another_kind_are_refused() {
        for (text, says) in [
            (
                "completion status=REM_ACCESS_ERR at=1s",
                "at= does not apply to completion rules",
            ),
            (
                "post_send errno=EIO delay=1ms at=1s",
                "delay= does not apply to post_send rules",
            ),
            (
                "post_recv errno=EIO status=FATAL_ERR",
                "status= does not apply to post_recv rules",
            ),
            (
                "packet drop errno=EIO status=FATAL_ERR",
                "errno= does not apply to packet rules",
            ),
            (
                "packet drop vendor_err=3",
                "vendor_err= does not apply to packet rules",
            ),
            ("packet drop at=1s", "at= does not apply to packet rules"),
            (
                "qp_error after=3 errno=EIO delay=1ms",
                "errno= does not apply to qp_error rules",
            ),
            (
                "qp_error at=1s delay=1ms",
                "delay= does not apply to qp_error",
            ),
            ("qp_error at=1s nth=1", "nth= does not apply to qp_error"),
            ("qp_error after=1 opcode=SEND", "opcode= does not apply"),
            ("qp_error after=1 peer=1.2.3.4", "peer= does not apply"),
            (
                "post_srq_recv errno=EIO opcode=SEND",
                "opcode= does not apply",
            ),
            ("completion delay=1ms errno=EIO", "errno= does not apply"),
            (
                "completion delay=1ms vendor_err=3",
                "vendor_err= goes with status=",
            ),
        ] {
            let e = FaultSpec::parse(text).unwrap_err();
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn a_key_given_twice_is_refused() {
        for (text, key) in [
            ("packet drop nth=1 nth=2", "nth"),
            ("post_send errno=EIO errno=ENOMEM", "errno"),
            ("completion qp=1 qp=2 delay=1ms", "qp"),
            ("packet drop from=1s from=2s", "from"),
            ("qp_error after=1 after=2", "after"),
        ] {
            let e = FaultSpec::parse(text).unwrap_err();
            assert!(
                e.to_string().contains(&format!("{key}= is given twice")),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn errno_must_be_a_linux_errno() {
        let e = FaultSpec::parse("post_send errno=4096").unwrap_err();
        assert!(e.to_string().contains("bad value for errno"), "{e}");
        assert!(FaultSpec::parse("post_send errno=0").is_err());
        assert_eq!(
            one("post_recv errno=4095").action,
            Action::FailPost {
                queue: Queue::Recv,
                errno: 4095
            }
        );
    }

    /// What each kind is documented to take still parses.
    #[test]
    fn every_documented_key_is_taken() {
        for text in [
            "post_send device=softverbs0 qp=3 opcode=SEND every=2 nth=4 after=1 after_bytes=1K \
             count=2 prob=50% from=1s until=2s period=3s errno=EIO",
            "post_recv qp=3 nth=1 errno=EAGAIN",
            "post_srq_recv device=softverbs0 prob=1 errno=ENOMEM",
            "completion qp=3 opcode=RECV every=2 count=1 status=FATAL_ERR vendor_err=7",
            "completion device=softverbs0 from=1s delay=1ms",
            "qp_error device=softverbs0 qp=3 after=2",
            "qp_error qp=3 at=2s",
            "packet drop device=softverbs0 qp=3 peer=10.0.0.1 nth=2 after_bytes=1M",
            "packet delay=1ms until=1s",
        ] {
            assert!(FaultSpec::parse(text).is_ok(), "{text}");
        }
    }
}
