//! The engine's packet and timer interface: what the transport (UDP
//! sockets, or the simulator) calls.
//!
//! The engine builds RoCE packets from the BTH on, with the 4-byte ICRC
//! field left zero: the ICRC covers the IP and UDP headers, which only the
//! transport knows, so the transport seals it (`softverbs_wire::Flow::seal`)
//! and verifies it on receipt before calling [`Engine::handle_arrival`].

use crate::ctx::Ctx;
use crate::engine::Engine;
use crate::error::{einval, VerbsResult};
use crate::gid::Gid;
use crate::handles::{CqId, QpId};
use crate::memory::HostMemory;
use crate::qp::Qp;
use crate::qp_state::{QpState, QpType};
use crate::requester::{response_gids, transport_of};
use crate::time::Nanos;
use softverbs_wire::{Bth, OpKind, PacketView, Position};

impl Engine {
    /// A packet arrived from `src_gid` for `dst_gid`: the RoCE bytes from
    /// the BTH to the ICRC, whose ICRC the transport has verified.
    /// [`Engine::handle_arrival`] for a packet that did not arrive marked.
    pub fn handle_packet(
        &mut self,
        now: Nanos,
        src_gid: Gid,
        dst_gid: Gid,
        packet: &[u8],
        mem: &mut dyn HostMemory,
    ) {
        let arrival = Arrival {
            src_gid,
            dst_gid,
            marked: false,
            traffic_class: 0,
        };
        self.handle_arrival(now, arrival, packet, mem);
    }

    /// A packet arrived: the RoCE bytes from the BTH to the ICRC, whose
    /// ICRC the transport has verified. Malformed packets, packets for no
    /// QP, packets of another partition (P_Key) and packets from outside
    /// a connection are dropped, as on a NIC. A packet that arrived marked
    /// asks its requester to send less (`congestion.rs`).
    pub fn handle_arrival(
        &mut self,
        now: Nanos,
        arrival: Arrival,
        packet: &[u8],
        mem: &mut dyn HostMemory,
    ) {
        self.stats.rx_marked += u64::from(arrival.marked);
        self.note_fault_time(now);
        if softverbs_wire::is_cnp(packet) {
            return self.handle_cnp(now, arrival, packet);
        }
        let Ok(pkt) = PacketView::parse(packet) else {
            self.stats.rx_malformed += 1;
            return;
        };
        self.stats.rx_becn += u64::from(pkt.bth().becn);
        let dest = pkt.dest_qp().get();
        if dest == crate::mcast::MULTICAST_QPN {
            // A datagram to a group: a copy for every attached QP.
            let members = self
                .mcast
                .members_at(arrival.dst_gid, self.config.address());
            if members.is_empty() {
                self.stats.rx_unknown_qp += 1;
            }
            for id in members {
                self.deliver(id, now, arrival, &pkt, mem);
            }
            return;
        }
        let Some(id) = self.qp_by_num(dest) else {
            self.stats.rx_unknown_qp += 1;
            return;
        };
        self.deliver(id, now, arrival, &pkt, mem);
    }

    /// Hands a parsed packet to QP `id`, after the checks every packet
    /// passes (transport, P_Key, addresses).
    fn deliver(
        &mut self,
        id: QpId,
        now: Nanos,
        arrival: Arrival,
        pkt: &PacketView<'_>,
        mem: &mut dyn HostMemory,
    ) {
        let Arrival {
            src_gid,
            dst_gid,
            marked,
            ..
        } = arrival;
        let verdict = self.with_qp(id, |qp, ctx| {
            ctx.congestion = marked;
            if transport_of(qp.qp_type) != pkt.opcode().transport() {
                return Err(Rejected::WrongTransport);
            }
            if qp.peer_direct {
                return Err(Rejected::PeerOnSameHost);
            }
            if !pkey_matches(pkt.bth().pkey, Bth::DEFAULT_PKEY) {
                return Err(Rejected::BadPkey);
            }
            if !from_the_peer(qp, ctx, src_gid, dst_gid) {
                return Err(Rejected::WrongAddress);
            }
            if pkt.opcode().is_response() {
                qp.requester_receive(ctx, now, pkt, mem);
                return Ok(false);
            }
            let duplicates = ctx.recovery.rx_duplicates;
            qp.responder_receive(ctx, pkt, arrival, mem);
            if ctx.dropped {
                return Err(Rejected::DroppedByQp);
            }
            // A duplicate (resent for an ACK the requester lost) brings the
            // application no new data.
            let new = ctx.recovery.rx_duplicates == duplicates;
            let opcode = pkt.opcode();
            Ok(new
                && opcode.kind() == OpKind::Write
                && matches!(opcode.position(), Position::Last | Position::Only))
        });
        match verdict {
            Some(Err(Rejected::WrongTransport)) => self.stats.rx_wrong_transport += 1,
            Some(Err(Rejected::WrongAddress)) => self.stats.rx_wrong_address += 1,
            Some(Err(Rejected::PeerOnSameHost)) => self.stats.rx_peer_on_same_host += 1,
            Some(Err(Rejected::BadPkey)) => self.stats.rx_bad_pkey += 1,
            Some(Err(Rejected::DroppedByQp)) => self.stats.rx_dropped_by_qp += 1,
            Some(Ok(write_end)) => {
                self.stats.rx_write_ends += u64::from(write_end);
                self.schedule.wake(id);
                self.schedule.wake_transmit(id);
                self.sync_timer(id);
            }
            None => {}
        }
        if self.qps.get(id).is_some_and(|qp| qp.resp.notices.is_due()) {
            // Owed even by a datagram its QP dropped (`cnp.rs`).
            self.schedule.wake_transmit(id);
        }
    }

    /// A CNP arrived: the QP it names sends less (`cnp.rs`), if it is
    /// this engine's, of the CNP's partition, and, connected, the CNP
    /// came from its peer.
    fn handle_cnp(&mut self, now: Nanos, arrival: Arrival, packet: &[u8]) {
        let Some((qpn, pkey)) = softverbs_wire::cnp_dest_qp(packet) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let Some(id) = self.qp_by_num(qpn.get()) else {
            self.stats.rx_unknown_qp += 1;
            return;
        };
        let verdict = self.with_qp(id, |qp, ctx| {
            if qp.peer_direct {
                return Err(Rejected::PeerOnSameHost);
            }
            if !pkey_matches(pkey, Bth::DEFAULT_PKEY) {
                return Err(Rejected::BadPkey);
            }
            if !from_the_peer(qp, ctx, arrival.src_gid, arrival.dst_gid) {
                return Err(Rejected::WrongAddress);
            }
            qp.on_cnp(ctx, now);
            Ok(())
        });
        match verdict {
            Some(Err(Rejected::PeerOnSameHost)) => self.stats.rx_peer_on_same_host += 1,
            Some(Err(Rejected::BadPkey)) => self.stats.rx_bad_pkey += 1,
            Some(Err(_)) => self.stats.rx_wrong_address += 1,
            Some(Ok(())) => {
                self.stats.rx_cnp += 1;
                self.sync_timer(id);
            }
            None => {}
        }
    }

    /// Runs the timers due at `now` (local ACK timeout, end of RNR waits).
    pub fn handle_timeout(&mut self, now: Nanos) {
        if self.fault_deadline().is_some_and(|at| at <= now) {
            self.run_fault_timers(now);
        }
        while let Some(id) = self.schedule.pop_expired(now) {
            self.with_qp(id, |qp, ctx| qp.requester_timeout(ctx, now));
            self.schedule.wake(id);
            self.sync_timer(id);
        }
    }

    /// When [`Engine::handle_timeout`] must next be called.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let timers = self.schedule.next_deadline();
        match self.fault_deadline() {
            Some(at) => Some(timers.map_or(at, |t| t.min(at))),
            None => timers,
        }
    }

    /// `ibv_req_notify_cq`: the next completion (with `solicited_only`,
    /// the next solicited or failed one) queues one completion event, as
    /// does one the CQ holds that no event reported
    /// (`completion_events.rs`).
    pub fn req_notify_cq(&mut self, cq: CqId, solicited_only: bool) -> VerbsResult<()> {
        let c = self.cqs.get_mut(cq).ok_or(einval("unknown CQ"))?;
        self.comp_events.arm(c, cq, solicited_only);
        Ok(())
    }

    /// The next completion event (`ibv_get_cq_event`).
    pub fn poll_comp_event(&mut self) -> Option<CqId> {
        self.comp_events.next()
    }

    /// Packet counters, for diagnostics.
    pub fn stats(&self) -> &DatapathStats {
        &self.stats
    }

    /// Brings the timer of QP `id` up to date after work on it.
    pub(crate) fn sync_timer(&mut self, id: QpId) {
        let deadline = self
            .qps
            .get(id)
            .filter(|qp| qp.state != QpState::Err)
            .and_then(|qp| qp.req.deadline());
        self.schedule.set_timer(id, deadline);
    }
}

/// Where a packet came from and went to, whether it arrived marked, and
/// the traffic class of its IP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// The source address of its IP header, as a GID.
    pub src_gid: Gid,
    /// The destination address of its IP header, as a GID.
    pub dst_gid: Gid,
    /// The embedder's receive queue was filling when it arrived (its
    /// requester is asked to send less, `congestion.rs`).
    pub marked: bool,
    /// The traffic class of its IP header (IPv4 TOS, IPv6 traffic
    /// class), which a UD receive's GRH shows (0 where the embedder does
    /// not know it).
    pub traffic_class: u8,
}

/// Packets the engine dropped on receipt, by reason, and request packets
/// it sent again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DatapathStats {
    /// Request packets sent again (after a loss, a timeout or an RNR
    /// wait): none where nothing is lost and every receive WR is posted
    /// in time.
    pub tx_resent: u64,
    /// Could not be parsed (truncated, unknown opcode, bad pad).
    pub rx_malformed: u64,
    /// Addressed to a QP number that does not exist.
    pub rx_unknown_qp: u64,
    /// An opcode of another transport than the QP's.
    pub rx_wrong_transport: u64,
    /// An RC/UC packet whose addresses are not those of the QP's
    /// connection.
    pub rx_wrong_address: u64,
    /// An RC/UC packet for a QP whose connection runs on the same-host
    /// path at both ends, which sends nothing on the wire: forged or
    /// stale ([`Engine::set_peer_direct`]).
    pub rx_peer_on_same_host: u64,
    /// A BTH P_Key that does not match the QP's (IBTA 9.6.1.1: dropped
    /// silently, counted).
    pub rx_bad_pkey: u64,
    /// Dropped by its QP without an answer, as UD and UC drop (a wrong
    /// Q_Key, no receive WR or one too short, a UC message outside its MR
    /// or cut short by a lost packet), or by a QP not ready to receive.
    pub rx_dropped_by_qp: u64,
    /// Last or only packets of RDMA WRITEs handed to a responder, not
    /// duplicates: the ends of data an application may learn of only from
    /// its memory (`ib_write_lat` spins on its buffer), for the embedder
    /// to see which of its receives took such data in. (A duplicate
    /// counted once made the embedder keep its ACK for an answer the
    /// application had already sent.)
    pub rx_write_ends: u64,
    /// Packets the embedder handed in marked, its receive queue filling
    /// ([`Engine::handle_arrival`]).
    pub rx_marked: u64,
    /// Packets that carried BECN (a responder's congestion notice).
    pub rx_becn: u64,
    /// CNPs sent: UC and UD requests that arrived marked, answered at
    /// most one per sender every 50 us (`cnp.rs`).
    pub tx_cnp: u64,
    /// CNPs received for a QP of this engine, each capping a UC or UD
    /// QP's rate or halving an RC QP's loss window.
    pub rx_cnp: u64,
    /// How the RC QPs recovered from packets lost, delayed or reordered.
    pub recovery: RecoveryStats,
}

/// What RC QPs met on a path that lost, delayed or reordered packets, by
/// side: for a user to tell a loss (sequence NAKs, timeouts) from a
/// reordering (duplicates of what was sent again) or a receiver with no
/// receive WR posted (RNR NAKs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecoveryStats {
    /// Requesters that went back after a PSN sequence NAK or a gap in
    /// READ or atomic responses.
    pub go_backs_after_gap: u64,
    /// Requesters that went back at their local ACK timeout.
    pub go_backs_after_timeout: u64,
    /// Requesters that went back early, before the timeout, nothing
    /// having been acknowledged for several round trips
    /// (`early_go_back.rs`).
    pub early_go_backs: u64,
    /// RNR NAKs requesters took (the peer had no receive WR posted).
    pub rnr_naks: u64,
    /// Request packets responders dropped for arriving ahead of the PSN
    /// they expected (the first of each gap answered with a sequence
    /// NAK).
    pub rx_ahead: u64,
    /// Request packets responders took in again (a PSN before the one
    /// expected): sent again after a loss, or after one that only came
    /// late.
    pub rx_duplicates: u64,
}

impl RecoveryStats {
    /// Adds `other`'s counts to these.
    pub(crate) fn add(&mut self, other: RecoveryStats) {
        self.go_backs_after_gap += other.go_backs_after_gap;
        self.go_backs_after_timeout += other.go_backs_after_timeout;
        self.early_go_backs += other.early_go_backs;
        self.rnr_naks += other.rnr_naks;
        self.rx_ahead += other.rx_ahead;
        self.rx_duplicates += other.rx_duplicates;
    }
}

/// Why `handle_packet` dropped a packet addressed to an existing QP.
enum Rejected {
    WrongTransport,
    WrongAddress,
    PeerOnSameHost,
    BadPkey,
    DroppedByQp,
}

/// Whether a packet's P_Key matches the QP's, requests and responses alike.
/// Every QP uses the P_Key table's only entry, the default full-member
/// key. Two keys match when their low 15 bits are equal and not both are
/// limited members (IBTA 10.9.3), so 0x7FFF matches 0xFFFF.
fn pkey_matches(packet: u16, ours: u16) -> bool {
    (packet & 0x7FFF) == (ours & 0x7FFF) && (packet | ours) & 0x8000 != 0
}

/// A connected (RC/UC) QP takes packets only from the remote end of its
/// path and to its own source GID (IBTA 9.6.1; rxe `check_addr`), so a
/// host that learns a QP number cannot inject into the connection. UD
/// takes datagrams from anyone. GIDs are compared as the addresses they
/// travel as (`gid_route`): a packet's GIDs are its IP addresses, and a
/// link-local GID travels as the address it was derived from.
fn from_the_peer(qp: &mut Qp, ctx: &Ctx<'_>, src_gid: Gid, dst_gid: Gid) -> bool {
    if qp.qp_type == QpType::Ud || qp.peer_seen == Some((src_gid, dst_gid)) {
        return true;
    }
    let local = dst_gid.to_ip();
    let from_peer = response_gids(&qp.attr, ctx).is_some_and(|(ours, peer)| {
        ours.same_endpoint(dst_gid, local) && peer.same_endpoint(src_gid, local)
    });
    if from_peer {
        qp.peer_seen = Some((src_gid, dst_gid));
    }
    from_peer
}
