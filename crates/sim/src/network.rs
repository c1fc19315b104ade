//! The simulated network: a seeded, fully deterministic packet switch that
//! loses, duplicates, reorders, delays, corrupts and marks RoCE packets.
//!
//! Packets are sealed (ICRC computed) when they enter the network, from the
//! two nodes' addresses and the RoCEv2 ports, exactly as a UDP transport
//! would, and verified when they leave it, so a corrupted packet is caught
//! by the same check a real receiver makes. No socket is ever opened.

use softverbs_engine::{Gid, Nanos};
use softverbs_wire::{Flow, WireError, ROCE_V2_UDP_PORT};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

/// The UDP source port every simulated node sends from.
pub const SRC_PORT: u16 = 49152;

/// BTH byte 4 (FECN, BECN, reserved) is replaced by ones in the ICRC
/// computation because switches may rewrite it, so the ICRC cannot catch a
/// flip there. Corruption avoids it: every injected flip must be detectable.
const ICRC_MASKED_BYTE: usize = 4;

/// Fault probabilities, each per packet and in `0.0..=1.0`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Faults {
    /// The packet vanishes.
    pub loss: f64,
    /// The packet is delivered twice.
    pub dup: f64,
    /// The packet is held back past the packets sent after it.
    pub reorder: f64,
    /// One bit of the packet is flipped.
    pub corrupt: f64,
    /// The packet arrives marked, as in a receiver's filling queue
    /// (`Arrival::marked`).
    pub mark: f64,
}

/// Faults and latencies of the network.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NetConfig {
    /// Fault probabilities.
    pub faults: Faults,
    /// Smallest one-way delay.
    pub min_delay: Nanos,
    /// Largest one-way delay of an in-order packet.
    pub max_delay: Nanos,
    /// Largest extra delay of a reordered packet.
    pub reorder_delay: Nanos,
    /// Both nodes are on one host: QPs use the same-host path (whole
    /// operations executed against the peer, no packets); UD datagrams
    /// take it or, every other one, the network (as to a destination that
    /// is not reachable directly).
    pub same_host: bool,
}

impl NetConfig {
    /// A network with the given faults and delays of 2-20 us, reordered
    /// packets held up to 50 us more.
    pub fn new(faults: Faults) -> NetConfig {
        NetConfig {
            faults,
            min_delay: 2_000,
            max_delay: 20_000,
            reorder_delay: 50_000,
            same_host: false,
        }
    }
}

/// A packet between two nodes: RoCE bytes from BTH through ICRC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    /// Sender's GID.
    pub src: Gid,
    /// Receiver's GID.
    pub dst: Gid,
    /// BTH through ICRC.
    pub bytes: Vec<u8>,
    /// Marked by the mark fault.
    pub marked: bool,
}

/// Counters of what the network did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Packets handed to the network.
    pub sent: u64,
    /// Packets dropped by the loss fault.
    pub lost: u64,
    /// Extra copies made by the duplication fault.
    pub duplicated: u64,
    /// Copies held back by the reordering fault.
    pub reordered: u64,
    /// Copies with a flipped bit.
    pub corrupted: u64,
    /// Copies marked.
    pub marked: u64,
    /// Copies that failed the ICRC check at delivery.
    pub icrc_dropped: u64,
    /// Copies delivered intact.
    pub delivered: u64,
}

/// What the network did to one packet handed to it, for the trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fate {
    /// Lost: no copy will arrive.
    pub lost: bool,
    /// Copies in flight (0 when lost, 2 when duplicated).
    pub copies: u8,
    /// How many of the copies are corrupted.
    pub corrupted: u8,
    /// How many of the copies are held back.
    pub reordered: u8,
}

/// A packet leaving the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The ICRC checks out: hand it to the receiver.
    Intact(Datagram),
    /// The ICRC check failed: the receiver's transport drops it.
    BadIcrc(Datagram),
}

/// The seeded network. Given the same seed and the same sequence of
/// `send` and `pop_due` calls it behaves identically.
#[derive(Debug)]
pub struct Network {
    cfg: NetConfig,
    rng: fastrand::Rng,
    /// In flight, keyed by (delivery time, sequence number): the sequence
    /// number makes the order total, so equal times never depend on
    /// anything but the order of `send` calls.
    queue: BTreeMap<(Nanos, u64), Datagram>,
    next_seq: u64,
    /// Per directed link, when the last in-order packet arrives: in-order
    /// packets never overtake each other, as on one real path, so the
    /// reorder fault is the only source of reordering.
    link_clear: HashMap<(Gid, Gid), Nanos>,
    stats: NetStats,
}

/// The IP/UDP flow of a packet from `src` to `dst`, whose ICRC covers it.
pub fn flow(src: Gid, dst: Gid) -> Flow {
    match (src.to_ip(), dst.to_ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Flow::v4(s, d, SRC_PORT, ROCE_V2_UDP_PORT),
        (s, d) => Flow::v6(to_v6(s), to_v6(d), SRC_PORT, ROCE_V2_UDP_PORT),
    }
}

fn to_v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

impl Network {
    /// An empty network drawing its faults from `seed`.
    pub fn new(cfg: NetConfig, seed: u64) -> Network {
        Network {
            cfg,
            rng: fastrand::Rng::with_seed(seed),
            queue: BTreeMap::new(),
            next_seq: 0,
            link_clear: HashMap::new(),
            stats: NetStats::default(),
        }
    }

    /// Seals `bytes` (BTH through a zero ICRC field) and puts it on the
    /// wire at `now`, subject to the faults. Fails only when the packet
    /// cannot be sealed (too short or too long), which is the sender's bug.
    pub fn send(
        &mut self,
        now: Nanos,
        src: Gid,
        dst: Gid,
        mut bytes: Vec<u8>,
    ) -> Result<Fate, WireError> {
        flow(src, dst).seal(&mut bytes)?;
        self.stats.sent += 1;
        let mut fate = Fate::default();
        if self.chance(self.cfg.faults.loss) {
            self.stats.lost += 1;
            fate.lost = true;
            return Ok(fate);
        }
        let copies = if self.chance(self.cfg.faults.dup) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            self.enqueue(now, src, dst, bytes.clone(), &mut fate);
        }
        Ok(fate)
    }

    /// One copy: maybe corrupted, then scheduled in order or held back.
    fn enqueue(&mut self, now: Nanos, src: Gid, dst: Gid, mut bytes: Vec<u8>, fate: &mut Fate) {
        fate.copies += 1;
        if self.chance(self.cfg.faults.corrupt) {
            self.flip_bit(&mut bytes);
            self.stats.corrupted += 1;
            fate.corrupted += 1;
        }
        // Drawn only when asked for, so that the seeds of runs without
        // marks replay as before marks existed.
        let marked = self.cfg.faults.mark > 0.0 && self.chance(self.cfg.faults.mark);
        self.stats.marked += u64::from(marked);
        let arrive = now + self.rng.u64(self.cfg.min_delay..=self.cfg.max_delay);
        let at = if self.chance(self.cfg.faults.reorder) {
            self.stats.reordered += 1;
            fate.reordered += 1;
            arrive + self.rng.u64(1..=self.cfg.reorder_delay.max(1))
        } else {
            let clear = self.link_clear.entry((src, dst)).or_insert(0);
            *clear = arrive.max(*clear);
            *clear
        };
        self.queue.insert(
            (at, self.next_seq),
            Datagram {
                src,
                dst,
                bytes,
                marked,
            },
        );
        self.next_seq += 1;
    }

    /// Flips one bit anywhere but in the byte the ICRC does not cover.
    fn flip_bit(&mut self, bytes: &mut [u8]) {
        if bytes.is_empty() {
            return;
        }
        let candidates = if bytes.len() > ICRC_MASKED_BYTE {
            bytes.len() - 1
        } else {
            bytes.len()
        };
        let mut index = self.rng.usize(..candidates);
        if bytes.len() > ICRC_MASKED_BYTE && index >= ICRC_MASKED_BYTE {
            index += 1;
        }
        bytes[index] ^= 1 << self.rng.u8(..8);
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.f64() < p
    }

    /// When the next packet arrives, if any is in flight.
    pub fn next_delivery(&self) -> Option<Nanos> {
        self.queue.keys().next().map(|&(at, _)| at)
    }

    /// The next packet due at or before `now`, ICRC-checked.
    pub fn pop_due(&mut self, now: Nanos) -> Option<Delivery> {
        if self.next_delivery()? > now {
            return None;
        }
        let (_, datagram) = self.queue.pop_first()?;
        if flow(datagram.src, datagram.dst)
            .verify(&datagram.bytes)
            .is_ok()
        {
            self.stats.delivered += 1;
            Some(Delivery::Intact(datagram))
        } else {
            self.stats.icrc_dropped += 1;
            Some(Delivery::BadIcrc(datagram))
        }
    }

    /// Copies still in flight.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// What the network has done so far.
    pub fn stats(&self) -> NetStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softverbs_wire::{Bth, Opcode, PacketBuilder, Psn, Qpn};
    use std::net::Ipv4Addr;

    fn gid(last: u8) -> Gid {
        Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, last))
    }

    /// An unsealed RoCE packet whose payload holds `tag`.
    fn packet(tag: u32) -> Vec<u8> {
        let bth = Bth::new(
            Opcode::RcSendOnly,
            Qpn::new_masked(0x11),
            Psn::new_masked(tag),
        );
        let payload = tag.to_be_bytes();
        let builder = PacketBuilder::new(bth).with_payload(&payload);
        let mut buf = vec![0; builder.wire_len()];
        let len = builder.build_unsealed(&mut buf).expect("fits");
        buf.truncate(len);
        buf
    }

    /// Sends `n` packets 1 us apart and drains the network; returns what
    /// arrived (tag, intact) in order, and the counters.
    fn run(faults: Faults, seed: u64, n: u32) -> (Vec<(u32, bool)>, NetStats) {
        let mut net = Network::new(NetConfig::new(faults), seed);
        let mut out = Vec::new();
        let mut now = 0;
        for tag in 0..n {
            net.send(now, gid(1), gid(2), packet(tag)).expect("seals");
            now += 1_000;
            drain(&mut net, now, &mut out);
        }
        drain(&mut net, Nanos::MAX, &mut out);
        (out, net.stats())
    }

    fn drain(net: &mut Network, now: Nanos, out: &mut Vec<(u32, bool)>) {
        while let Some(d) = net.pop_due(now) {
            out.push(match d {
                Delivery::Intact(p) => (tag_of(&p.bytes), true),
                Delivery::BadIcrc(p) => (tag_of(&p.bytes), false),
            });
        }
    }

    fn tag_of(bytes: &[u8]) -> u32 {
        u32::from_be_bytes(bytes[12..16].try_into().expect("4 bytes"))
    }

    fn near(count: u64, n: u32, p: f64) -> bool {
        let expected = f64::from(n) * p;
        (count as f64 - expected).abs() <= 0.2 * expected + 5.0
    }

    const ALL: Faults = Faults {
        loss: 0.1,
        dup: 0.05,
        reorder: 0.1,
        corrupt: 0.02,
        mark: 0.0,
    };

    #[test]
    fn same_seed_same_behaviour_different_seed_differs() {
        assert_eq!(run(ALL, 7, 2000), run(ALL, 7, 2000));
        assert_ne!(run(ALL, 7, 2000).0, run(ALL, 8, 2000).0);
    }

    #[test]
    fn a_perfect_network_delivers_everything_in_order() {
        let (out, stats) = run(Faults::default(), 1, 1000);
        let expected: Vec<_> = (0..1000).map(|t| (t, true)).collect();
        assert_eq!(out, expected);
        assert_eq!(stats.delivered, 1000);
    }

    #[test]
    fn loss_rate_is_roughly_as_configured() {
        let faults = Faults {
            loss: 0.1,
            ..Faults::default()
        };
        let (out, stats) = run(faults, 3, 10_000);
        assert!(near(stats.lost, 10_000, 0.1), "{stats:?}");
        assert_eq!(out.len() as u64, 10_000 - stats.lost);
        assert!(out.windows(2).all(|w| w[0].0 < w[1].0), "still in order");
    }

    #[test]
    fn duplicates_arrive_twice() {
        let faults = Faults {
            dup: 0.05,
            ..Faults::default()
        };
        let (out, stats) = run(faults, 4, 10_000);
        assert!(near(stats.duplicated, 10_000, 0.05), "{stats:?}");
        assert_eq!(out.len() as u64, 10_000 + stats.duplicated);
    }

    #[test]
    fn reordered_packets_arrive_after_later_ones() {
        let faults = Faults {
            reorder: 0.1,
            ..Faults::default()
        };
        let (out, stats) = run(faults, 5, 10_000);
        assert!(near(stats.reordered, 10_000, 0.1), "{stats:?}");
        let inversions = out.windows(2).filter(|w| w[0].0 > w[1].0).count() as u64;
        assert!(inversions > stats.reordered / 2, "{inversions} {stats:?}");
        let mut tags: Vec<_> = out.iter().map(|p| p.0).collect();
        tags.sort_unstable();
        assert_eq!(tags, (0..10_000).collect::<Vec<_>>(), "nothing lost");
    }

    #[test]
    fn marks_are_drawn_at_the_rate_asked_and_only_when_asked() {
        let marking = Faults {
            mark: 0.3,
            ..Faults::default()
        };
        let (out, stats) = run(marking, 8, 10_000);
        assert!(near(stats.marked, 10_000, 0.3), "{stats:?}");
        assert_eq!(out.len(), 10_000, "a mark loses nothing");
        // Without marks none is drawn (nor a random number for one).
        let lossy = Faults {
            loss: 0.1,
            ..Faults::default()
        };
        assert_eq!(run(lossy, 3, 1000).1.marked, 0);
    }

    #[test]
    fn every_corrupted_packet_fails_the_icrc_check() {
        let faults = Faults {
            corrupt: 0.05,
            ..Faults::default()
        };
        let (out, stats) = run(faults, 6, 10_000);
        assert!(near(stats.corrupted, 10_000, 0.05), "{stats:?}");
        assert_eq!(stats.icrc_dropped, stats.corrupted);
        let bad = out.iter().filter(|p| !p.1).count() as u64;
        assert_eq!(bad, stats.corrupted);
        assert_eq!(stats.delivered, 10_000 - stats.corrupted);
    }

    #[test]
    fn packets_are_sealed_with_the_flow_of_their_addresses() {
        let mut net = Network::new(NetConfig::new(Faults::default()), 1);
        net.send(0, gid(1), gid(2), packet(9)).expect("seals");
        let Some(Delivery::Intact(p)) = net.pop_due(Nanos::MAX) else {
            panic!("delivered intact");
        };
        let f = Flow::v4(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            SRC_PORT,
            ROCE_V2_UDP_PORT,
        );
        assert_eq!(f.verify(&p.bytes), Ok(()));
        assert!(flow(gid(2), gid(1)).verify(&p.bytes).is_err());
    }

    #[test]
    fn delays_stay_within_bounds() {
        let mut net = Network::new(NetConfig::new(Faults::default()), 2);
        net.send(1_000, gid(1), gid(2), packet(1)).expect("seals");
        let at = net.next_delivery().expect("in flight");
        assert!((3_000..=21_000).contains(&at), "{at}");
        assert_eq!(net.pop_due(at - 1), None);
        assert!(net.pop_due(at).is_some());
        assert_eq!(net.in_flight(), 0);
    }
}
