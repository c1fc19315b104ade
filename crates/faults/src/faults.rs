//! The rules of one device at run time: the embedders (the engine for
//! verbs, the transport for packets) ask at fixed points whether a rule
//! fires, and the answer depends only on the rules, the seed and the
//! sequence of questions, so a run repeats.

use crate::rule::{Action, Filter, PacketAction, QpErrorWhen, Queue, Rule, Select};
use crate::spec::FaultSpec;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

/// The rules that apply to one device, with their counters.
#[derive(Debug)]
pub struct Faults {
    rules: Vec<(Rule, Count)>,
    rng: fastrand::Rng,
    /// WRs posted per QP number, for `qp_error after=N`.
    posted: HashMap<u32, u64>,
    /// Told of each firing, if an embedder asked ([`Faults::observe`]).
    observer: Option<Watching>,
}

/// What an embedder is told of each firing: the rule, and the QP it
/// fired on (the local QP number; `None` for an SRQ's receive).
pub type Observer = Box<dyn FnMut(&Rule, Option<u32>) + Send>;

/// An observer, as a field of a `Debug` type.
struct Watching(Observer);

impl std::fmt::Debug for Watching {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

/// What the completion rules do to one completion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompletionFault {
    /// Report this status and vendor_err instead of success.
    pub fail: Option<(u32, u32)>,
    /// Hold it back this long.
    pub delay: Option<Duration>,
}

/// A `qp_error at=TIME` rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedQpError {
    /// Its index among [`Faults::rules`].
    pub rule: usize,
    /// The QP it names (None: every QP).
    pub qp: Option<u32>,
    /// When it fires, after the device was opened.
    pub at: Duration,
}

/// A rule's matches and firings so far.
#[derive(Debug, Default, Clone, Copy)]
struct Count {
    matched: u64,
    bytes: u64,
    fired: u64,
}

/// Which rules a [`Faults`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Rules on verbs: posts, completions, QP errors (the engine's).
    Verbs,
    /// Rules on packets (the transport's).
    Packets,
}

impl Faults {
    /// The rules of `spec` for device `device` of one `part`, or `None`
    /// if there are none. Each part has its own generator, so that packet
    /// decisions do not shift verbs decisions.
    pub fn new(spec: &FaultSpec, device: &str, part: Part) -> Option<Faults> {
        let rules: Vec<_> = spec
            .rules
            .iter()
            .filter(|r| r.filter.device.as_deref().is_none_or(|d| d == device))
            .filter(|r| r.is_packet_rule() == (part == Part::Packets))
            .map(|r| (r.clone(), Count::default()))
            .collect();
        let salt = match part {
            Part::Verbs => 0,
            Part::Packets => 0x9E37_79B9_7F4A_7C15,
        };
        (!rules.is_empty()).then(|| Faults {
            rules,
            rng: fastrand::Rng::with_seed(spec.seed ^ salt),
            posted: HashMap::new(),
            observer: None,
        })
    }

    /// Tells `observer` of every firing from now on (the verbs trace
    /// records them, so injected errors are told from genuine ones).
    pub fn observe(&mut self, observer: Observer) {
        self.observer = Some(Watching(observer));
    }

    /// Rule `index` (of [`Faults::rules`]) fired on QP `qp`.
    pub fn fired(&mut self, index: usize, qp: Option<u32>) {
        if let (Some(Watching(observe)), Some((rule, _))) =
            (&mut self.observer, self.rules.get(index))
        {
            observe(rule, qp);
        }
    }

    /// A WR of `bytes` is posted to `queue` of QP `qp`, `at` this long
    /// after the device opened: the errno the post returns instead, if a
    /// rule fires.
    pub fn post(
        &mut self,
        at: Duration,
        queue: Queue,
        qp: u32,
        opcode: Option<u32>,
        bytes: u64,
    ) -> Option<i32> {
        // An SRQ's receives (which no `qp=` names) come as u32::MAX.
        let on = (qp != u32::MAX).then_some(qp);
        self.first(at, bytes, on, |r| match r.action {
            Action::FailPost { queue: q, errno } if q == queue && on_qp(&r.filter, qp) => {
                (r.filter.opcode.is_none() || r.filter.opcode == opcode).then_some(errno)
            }
            _ => None,
        })
    }

    /// Whether a rule counts bytes (`after_bytes=`): without one, the
    /// bytes given with an event are not looked at, so an embedder need
    /// not compute them.
    pub fn counts_bytes(&self) -> bool {
        self.rules.iter().any(|(r, _)| r.select.after_bytes > 0)
    }

    /// The rules, in the order written.
    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.rules.iter().map(|(r, _)| r)
    }

    /// Whether a rule counts posted WRs (`qp_error after=N`): without
    /// one, [`Faults::posted`] need not be called.
    pub fn counts_posts(&self) -> bool {
        self.rules
            .iter()
            .any(|(r, _)| matches!(r.action, Action::QpError(QpErrorWhen::AfterOps(_))))
    }

    /// A WR was posted to QP `qp`: whether it must now enter the error
    /// state (`qp_error after=N`, counted per QP).
    pub fn posted(&mut self, qp: u32) -> bool {
        let n = self.posted.entry(qp).or_default();
        *n += 1;
        let n = *n;
        let fires = self.rules.iter().position(|(r, _)| {
            r.action == Action::QpError(QpErrorWhen::AfterOps(n)) && on_qp(&r.filter, qp)
        });
        if let Some(index) = fires {
            self.fired(index, Some(qp));
        }
        fires.is_some()
    }

    /// QP number `qp` was destroyed: a QP that gets its number again
    /// counts its WRs from zero.
    pub fn forget_qp(&mut self, qp: u32) {
        self.posted.remove(&qp);
    }

    /// A successful completion of `opcode` (`ibv_wc_opcode`) and
    /// `byte_len` on QP `qp`: what the rules do to it.
    pub fn completion(
        &mut self,
        at: Duration,
        qp: u32,
        opcode: u32,
        byte_len: u32,
    ) -> CompletionFault {
        let bytes = u64::from(byte_len);
        let admits = |r: &Rule| on_qp(&r.filter, qp) && r.filter.opcode.is_none_or(|o| o == opcode);
        let fail = self.first(at, bytes, Some(qp), |r| match r.action {
            Action::FailCompletion { status, vendor_err } if admits(r) => {
                Some((status, vendor_err))
            }
            _ => None,
        });
        let delay = self.first(at, bytes, Some(qp), |r| match r.action {
            Action::DelayCompletion(d) if admits(r) => Some(d),
            _ => None,
        });
        CompletionFault { fail, delay }
    }

    /// The `qp_error at=TIME` rules: which QP (None: every QP) and when,
    /// after the device was opened, with the rule's index for
    /// [`Faults::fired`].
    pub fn timed_qp_errors(&self) -> impl Iterator<Item = TimedQpError> + '_ {
        (self.rules.iter().enumerate()).filter_map(|(index, (r, _))| match r.action {
            Action::QpError(QpErrorWhen::At(at)) => Some(TimedQpError {
                rule: index,
                qp: r.filter.qp,
                at,
            }),
            _ => None,
        })
    }

    /// A packet of `len` bytes for local QP `qp` arrived from `peer`: what
    /// happens to it, if a rule fires.
    pub fn packet(
        &mut self,
        at: Duration,
        qp: u32,
        peer: IpAddr,
        len: usize,
    ) -> Option<PacketAction> {
        // A dual-stack socket reports an IPv4 peer as ::ffff:a.b.c.d; the
        // rules hold the IPv4 form (spec::parse_peer).
        let peer = peer.to_canonical();
        self.first(at, len as u64, Some(qp), |r| match r.action {
            Action::Packet(a)
                if on_qp(&r.filter, qp) && r.filter.peer.is_none_or(|p| p == peer) =>
            {
                Some(a)
            }
            _ => None,
        })
    }

    /// A number below `n` from the seeded generator (which byte a
    /// corruption flips).
    pub fn below(&mut self, n: usize) -> usize {
        self.rng.usize(..n.max(1))
    }

    /// The first rule whose filter `admits` the event (giving its value)
    /// and whose selector fires at time `at` since the device opened; the
    /// observer is told it fired on `qp`. Every admitting rule whose
    /// window holds `at` counts the event, fired or not, so each rule's
    /// `every=` and `nth=` count its own matches.
    fn first<T>(
        &mut self,
        at: Duration,
        bytes: u64,
        qp: Option<u32>,
        mut admits: impl FnMut(&Rule) -> Option<T>,
    ) -> Option<T> {
        let mut out = None;
        for (index, (rule, count)) in self.rules.iter_mut().enumerate() {
            let Some(value) = admits(rule) else { continue };
            if rule.select.window.is_some_and(|w| !w.contains(at)) {
                continue;
            }
            // Every admitting rule counts the match; only the one that
            // decides uses up one of its `count=` firings.
            let chosen = selects(&rule.select, count, bytes, &mut self.rng);
            if chosen && out.is_none() {
                count.fired += 1;
                out = Some((index, value));
            }
        }
        let (index, value) = out?;
        self.fired(index, qp);
        Some(value)
    }
}

fn on_qp(filter: &Filter, qp: u32) -> bool {
    filter.qp.is_none_or(|q| q == qp)
}

/// Counts one match of `bytes` and says whether the selector picks it
/// (the caller counts the firing, if the rule decides).
fn selects(select: &Select, count: &mut Count, bytes: u64, rng: &mut fastrand::Rng) -> bool {
    count.matched += 1;
    let n = count.matched;
    let before = count.bytes;
    count.bytes = count.bytes.saturating_add(bytes);
    n > select.after
        && before >= select.after_bytes
        && select.nth.is_none_or(|k| n == k)
        && select.every.is_none_or(|k| n.is_multiple_of(k))
        && select.count.is_none_or(|c| count.fired < c)
        && select.prob.is_none_or(|p| rng.f64() < p)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Duration = Duration::ZERO;

    fn faults(text: &str, part: Part) -> Faults {
        Faults::new(&FaultSpec::parse(text).unwrap(), "softverbs0", part).unwrap()
    }

    #[test]
    fn every_nth_after_and_count() {
        let mut f = faults("post_send every=3 errno=ENOMEM", Part::Verbs);
        let got: Vec<_> = (0..7)
            .map(|_| f.post(T0, Queue::Send, 1, Some(0), 8))
            .collect();
        assert_eq!(got, [None, None, Some(12), None, None, Some(12), None]);
        let mut f = faults(
            "post_recv nth=2 errno=EAGAIN; post_recv after=3 count=1 errno=EIO",
            Part::Verbs,
        );
        let got: Vec<_> = (0..6)
            .map(|_| f.post(T0, Queue::Recv, 1, None, 8))
            .collect();
        assert_eq!(got, [None, Some(11), None, Some(5), None, None]);
        // A rule that loses to an earlier one keeps its count= firings.
        let mut f = faults(
            "post_send nth=1 errno=EAGAIN; post_send count=1 errno=EIO",
            Part::Verbs,
        );
        let got: Vec<_> = (0..3)
            .map(|_| f.post(T0, Queue::Send, 1, Some(0), 8))
            .collect();
        assert_eq!(got, [Some(11), Some(5), None]);
        // Another queue is not matched.
        assert_eq!(f.post(T0, Queue::Send, 1, Some(0), 8), None);
    }

    #[test]
    fn filters_by_qp_opcode_and_device() {
        let mut f = faults("post_send qp=7 opcode=RDMA_READ errno=EINVAL", Part::Verbs);
        assert_eq!(f.post(T0, Queue::Send, 7, Some(0), 8), None);
        assert_eq!(f.post(T0, Queue::Send, 8, Some(4), 8), None);
        assert_eq!(f.post(T0, Queue::Send, 7, Some(4), 8), Some(22));
        let spec = FaultSpec::parse("packet drop device=other").unwrap();
        assert!(Faults::new(&spec, "softverbs0", Part::Packets).is_none());
        assert!(Faults::new(&spec, "other", Part::Verbs).is_none());
    }

    #[test]
    fn after_bytes_counts_earlier_matches() {
        let mut f = faults(
            "completion after_bytes=100 status=RETRY_EXC_ERR",
            Part::Verbs,
        );
        assert_eq!(f.completion(T0, 1, 0, 60).fail, None);
        assert_eq!(f.completion(T0, 1, 0, 60).fail, None);
        assert_eq!(f.completion(T0, 1, 0, 1).fail, Some((12, 0)));
    }

    #[test]
    fn completions_fail_and_delay_independently() {
        let mut f = faults(
            "completion opcode=RECV status=REM_OP_ERR vendor_err=7; completion delay=3ms",
            Part::Verbs,
        );
        let recv = f.completion(T0, 1, 128, 4);
        assert_eq!(
            (recv.fail, recv.delay),
            (Some((11, 7)), Some(Duration::from_millis(3)))
        );
        assert_eq!(f.completion(T0, 1, 0, 4).fail, None);
    }

    #[test]
    fn qp_errors_count_per_qp() {
        let mut f = faults("qp_error after=2; qp_error qp=9 at=1s", Part::Verbs);
        assert!(f.counts_posts() && !faults("qp_error at=1s", Part::Verbs).counts_posts());
        assert!(
            !f.counts_bytes()
                && faults("post_send after_bytes=1 errno=EIO", Part::Verbs).counts_bytes()
        );
        assert_eq!(f.rules().count(), 2);
        assert!(!f.posted(1));
        assert!(!f.posted(2));
        assert!(f.posted(1));
        assert!(!f.posted(1));
        f.forget_qp(1);
        assert!(!f.posted(1));
        assert!(f.posted(1));
        let timed: Vec<_> = f.timed_qp_errors().collect();
        let at = Duration::from_secs(1);
        assert_eq!(
            timed,
            [TimedQpError {
                rule: 1,
                qp: Some(9),
                at
            }]
        );
    }

    #[test]
    fn probabilities_repeat_with_the_seed() {
        let run = |text: &str| {
            let mut f = faults(text, Part::Packets);
            (0..1000)
                .map(|_| f.packet(T0, 1, "10.0.0.1".parse().unwrap(), 100).is_some())
                .collect::<Vec<_>>()
        };
        let a = run("seed=5; packet drop prob=10%");
        assert_eq!(a, run("seed=5; packet drop prob=10%"));
        assert_ne!(a, run("seed=6; packet drop prob=10%"));
        let dropped = a.iter().filter(|&&d| d).count();
        assert!((50..150).contains(&dropped), "{dropped}");
    }

    #[test]
    fn a_window_limits_when_a_rule_fires_and_what_it_counts() {
        let mut f = faults(
            "packet drop from=1s until=2s period=10s every=2",
            Part::Packets,
        );
        let peer = "10.0.0.1".parse().unwrap();
        let mut at = |ms| f.packet(Duration::from_millis(ms), 1, peer, 10).is_some();
        let got = [
            at(500),
            at(1000),
            at(1500),
            at(2500),
            at(11_000),
            at(19_000),
        ];
        assert_eq!(got, [false, false, true, false, false, false]);
        assert!(
            at(11_500),
            "the 4th match in the window, in its second period"
        );
    }

    #[test]
    fn packets_filter_by_peer_and_the_first_firing_rule_decides() {
        let mut f = faults(
            "packet drop peer=10.0.0.2 nth=1; packet duplicate",
            Part::Packets,
        );
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        assert_eq!(f.packet(T0, 1, a, 10), Some(PacketAction::Duplicate));
        assert_eq!(f.packet(T0, 1, b, 10), Some(PacketAction::Drop));
        assert_eq!(f.packet(T0, 1, b, 10), Some(PacketAction::Duplicate));
    }

    /// `-g 1` GIDs print IPv4 peers as ::ffff:a.b.c.d, and a dual-stack
    /// socket reports them so: either form matches the other.
    #[test]
    fn a_mapped_ipv6_peer_matches_its_ipv4_address() {
        let v4: IpAddr = "127.0.0.37".parse().unwrap();
        let mapped: IpAddr = "::ffff:127.0.0.37".parse().unwrap();
        let mut f = faults("packet drop peer=::ffff:127.0.0.37", Part::Packets);
        assert_eq!(f.packet(T0, 2, v4, 10), Some(PacketAction::Drop));
        assert_eq!(f.packet(T0, 2, mapped, 10), Some(PacketAction::Drop));
        let mut f = faults("packet drop peer=127.0.0.37", Part::Packets);
        assert_eq!(f.packet(T0, 2, mapped, 10), Some(PacketAction::Drop));
        let other: IpAddr = "::ffff:127.0.0.38".parse().unwrap();
        assert_eq!(f.packet(T0, 2, other, 10), None);
    }

    #[test]
    fn the_observer_is_told_each_firing_with_its_rule_and_qp() {
        let mut f = faults(
            "post_send nth=2 errno=ENOMEM\n# a comment\nqp_error after=1 qp=9; post_srq_recv errno=EIO",
            Part::Verbs,
        );
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        f.observe(Box::new(move |rule, qp| {
            log.lock().unwrap().push((rule.line, rule.text.clone(), qp))
        }));
        assert_eq!(f.post(T0, Queue::Send, 7, Some(0), 8), None);
        assert_eq!(f.post(T0, Queue::Send, 7, Some(0), 8), Some(12));
        assert!(!f.posted(8));
        assert!(f.posted(9));
        assert_eq!(f.post(T0, Queue::SrqRecv, u32::MAX, None, 8), Some(5));
        let want = [
            (1, "post_send nth=2 errno=ENOMEM".to_string(), Some(7)),
            (3, "qp_error after=1 qp=9".to_string(), Some(9)),
            (4, "post_srq_recv errno=EIO".to_string(), None),
        ];
        assert_eq!(*seen.lock().unwrap(), want);
    }
}
