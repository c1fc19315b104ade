//! The rdma_cm connections of the daemon's clients, as the CM messages
//! routed to them tell: a REP or RTU makes one known (a REP between two
//! clients makes both ends' known; a client tells of a REP it sends to
//! another host), a DREQ from the peer marks it (the peer waits for a
//! DREP), a REJ ends it, and so does a DREP unless the peer's DREQ
//! crossed the client's. When a client dies, its peers get the DREQ its
//! rdma_cm would have sent, or the DREP for a DREQ of theirs (the
//! kernel's rdma_cm outlives a killed process; a client's does not), or,
//! for a connection without the RTU yet (the client took the REP but sent
//! no RTU, or sent the REP and got no RTU), a REJ, as the kernel's CM
//! rejects a REP in REP_RCVD or REP_SENT (`cm_destroy_id`). The client's
//! RTU is seen only when it goes to a peer of this host (through the
//! daemon); one to another host is taken as sent. Time comes from the
//! caller, so the marks' expiry is tested without waiting.

use softverbs_wire::u24::Qpn;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long a peer that sent a DREQ may still wait for the DREP: the
/// kernel's CM resends a DREQ 15 times, seconds apart, before it gives up.
/// A DREP later than that would answer nobody.
pub(super) const DREQ_ANSWERED_WITHIN: Duration = Duration::from_secs(120);

/// Connections remembered at most (a bound on what a flood of REPs for
/// connections that end unseen can hold).
const CONNECTIONS_MAX: usize = 1 << 16;

/// The far end of a connection of a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CmPeer {
    /// Its comm ID.
    pub comm_id: u32,
    /// Where its messages came from (its QP1).
    pub addr: SocketAddr,
    /// The address they came to, and the UDP socket slot it is.
    pub local: SocketAddr,
    pub slot: usize,
    /// Its QP's number, which a DREQ to it names (the kernel's CM drops
    /// a DREQ whose remote QPN is not its id's QP); zero where no message
    /// to it needs one.
    pub qpn: Qpn,
}

/// How far a client's connection got, as the daemon saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// The client took the peer's REP; its RTU has not passed the daemon
    /// yet (the kernel's CM in REP_RCVD).
    RepTaken,
    /// The client sent its REP; the peer's RTU has not come (REP_SENT).
    RepSent,
    /// The RTU went out or came (or cannot be seen going out): the
    /// connection is established on both sides.
    Established,
}

/// What the peer of a dead client's connection gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Farewell {
    /// A DREQ: the connection ends.
    Dreq,
    /// The DREP for its DREQ of transaction `tid`.
    Drep { tid: u64 },
    /// A REJ: the client died before the RTU, having taken the peer's
    /// REP (`rep_taken`, [`Stage::RepTaken`]) or sent its own
    /// ([`Stage::RepSent`]).
    Rej { rep_taken: bool },
}

#[derive(Debug, Clone, Copy)]
struct Connection {
    peer: CmPeer,
    /// The peer's DREQ came (its transaction ID, and when): it waits for
    /// a DREP, which the client sends when its application destroys the
    /// id or disconnects, and the daemon if the client dies first.
    dreq: Option<(u64, Instant)>,
    /// The client sent its own DREQ (it said so): the daemon sends none.
    dreq_sent: bool,
    stage: Stage,
}

/// The connections, by our end's comm ID.
#[derive(Debug, Default)]
pub(super) struct CmConnections {
    by_ours: HashMap<u32, Connection>,
    /// The connections whose peer sent a DREQ, oldest first: (when, our
    /// comm ID), so that their marks expire in order.
    dreqs: VecDeque<(Instant, u32)>,
}

impl CmConnections {
    /// Connection `ours` to `peer` is known (a REP or RTU), at `stage`.
    pub(super) fn connected(&mut self, ours: u32, peer: CmPeer, stage: Stage) {
        if self.by_ours.len() >= CONNECTIONS_MAX && !self.by_ours.contains_key(&ours) {
            // Full (connections that ended unseen): one goes, so new ones
            // are still known.
            if let Some(&old) = self.by_ours.keys().next() {
                self.by_ours.remove(&old);
            }
        }
        self.by_ours.insert(
            ours,
            Connection {
                peer,
                dreq: None,
                dreq_sent: false,
                stage,
            },
        );
    }

    /// Whether a CM message naming our comm ID `ours` and its peer's
    /// `theirs` is of connection `ours` as known: none of that ID is
    /// known, or its peer has that comm ID. The kernel's CM finds a
    /// connection by both IDs (`cm_acquire_id`); a message naming our ID
    /// with another peer's, stray or forged, must change nothing here,
    /// lest the client's death go unannounced to its real peer.
    pub(super) fn is_of(&self, ours: u32, theirs: u32) -> bool {
        self.by_ours
            .get(&ours)
            .is_none_or(|c| c.peer.comm_id == theirs)
    }

    /// The RTU of connection `ours` went from the client to its peer on
    /// this host.
    pub(super) fn rtu_passed(&mut self, ours: u32) {
        if let Some(c) = self.by_ours.get_mut(&ours) {
            c.stage = Stage::Established;
        }
    }

    /// The QP number of connection `ours`'s peer, if the connection is
    /// known.
    pub(super) fn peer_qpn(&self, ours: u32) -> Option<Qpn> {
        self.by_ours.get(&ours).map(|c| c.peer.qpn)
    }

    /// The client sent the DREQ of connection `ours`: should it die, its
    /// peer gets no other (a DREP it waits for still goes).
    pub(super) fn dreq_sent(&mut self, ours: u32) {
        if let Some(c) = self.by_ours.get_mut(&ours) {
            c.dreq_sent = true;
        }
    }

    /// Connection `ours` ended (a REJ, or the client's DREP).
    pub(super) fn ended(&mut self, ours: u32) {
        self.by_ours.remove(&ours);
    }

    /// The DREP of the client's DREQ came: the connection ended, unless
    /// the peer's own DREQ crossed the client's (both ends disconnected at
    /// once) and may still wait for the client's DREP, which the daemon
    /// does not see go out: the mark stays for the client's death (a
    /// kernel peer stops waiting at a crossing DREQ, a softverbs peer of
    /// an older build resends its DREQ until answered).
    pub(super) fn drep_passed(&mut self, ours: u32) {
        if self.by_ours.get(&ours).is_some_and(|c| c.dreq.is_none()) {
            self.by_ours.remove(&ours);
        }
    }

    /// The peer of connection `ours` asks to disconnect (transaction
    /// `tid`) at `now`. The mark stays while the peer may wait for the
    /// DREP: the daemon does not see the client's own DREP go out.
    pub(super) fn dreq_came(&mut self, ours: u32, tid: u64, now: Instant) {
        self.expire(now);
        // A resent DREQ (the same transaction) keeps the first one's mark.
        if let Some(c) = self.by_ours.get_mut(&ours) {
            if c.dreq.is_none() {
                c.dreq = Some((tid, now));
                self.dreqs.push_back((now, ours));
            }
        }
    }

    /// Forgets the connections whose DREQ mark is older than
    /// [`DREQ_ANSWERED_WITHIN`] (or the oldest, while too many are
    /// marked): their peers no longer wait. Run at every CM message the
    /// daemon routes, so that marks do not outlive their time while only
    /// new connections come.
    pub(super) fn expire(&mut self, now: Instant) {
        while let Some(&(at, ours)) = self.dreqs.front() {
            let full = self.dreqs.len() >= CONNECTIONS_MAX;
            if !full && now.duration_since(at) < DREQ_ANSWERED_WITHIN {
                break;
            }
            self.dreqs.pop_front();
            // The connection's mark, not that of a later one of its ID.
            let marked_then = self
                .by_ours
                .get(&ours)
                .and_then(|c| c.dreq)
                .is_some_and(|(_, t)| t == at);
            if marked_then {
                self.by_ours.remove(&ours);
            }
        }
    }

    /// A client died at `now`: its connections (those whose comm ID
    /// `is_dead` names) are forgotten, each with what its peer gets; a peer
    /// whose DREQ is older than [`DREQ_ANSWERED_WITHIN`] gets nothing.
    pub(super) fn take_dead(
        &mut self,
        is_dead: impl Fn(u32) -> bool,
        now: Instant,
    ) -> Vec<(u32, CmPeer, Farewell)> {
        let dead: Vec<u32> = self
            .by_ours
            .keys()
            .copied()
            .filter(|&o| is_dead(o))
            .collect();
        let mut farewells = Vec::with_capacity(dead.len());
        for ours in dead {
            let Some(c) = self.by_ours.remove(&ours) else {
                continue;
            };
            match c.dreq {
                None if c.dreq_sent => {}
                None if c.stage == Stage::Established => {
                    farewells.push((ours, c.peer, Farewell::Dreq));
                }
                None => {
                    let rep_taken = c.stage == Stage::RepTaken;
                    farewells.push((ours, c.peer, Farewell::Rej { rep_taken }));
                }
                Some((tid, at)) if now.duration_since(at) < DREQ_ANSWERED_WITHIN => {
                    farewells.push((ours, c.peer, Farewell::Drep { tid }));
                }
                Some(_) => {}
            }
        }
        farewells
    }

    /// How many connections are known.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_ours.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(comm_id: u32) -> CmPeer {
        CmPeer {
            comm_id,
            addr: "10.0.0.2:4791".parse().unwrap(),
            local: "10.0.0.1:4791".parse().unwrap(),
            slot: 0,
            qpn: Qpn::new_masked(0x100 + comm_id),
        }
    }

    fn all(_: u32) -> bool {
        true
    }

    #[test]
    fn a_dead_clients_peer_gets_a_dreq_or_the_drep_it_waits_for() {
        let t0 = Instant::now();
        let mut c = CmConnections::default();
        c.connected(1, peer(101), Stage::Established);
        c.connected(2, peer(102), Stage::Established);
        c.dreq_came(2, 0xabc, t0);
        let mut got = c.take_dead(all, t0 + Duration::from_secs(1));
        got.sort_by_key(|&(ours, ..)| ours);
        assert_eq!(
            got,
            [
                (1, peer(101), Farewell::Dreq),
                (2, peer(102), Farewell::Drep { tid: 0xabc })
            ]
        );
        assert_eq!(c.len(), 0);
    }

    /// A client that sent its own DREQ (and said so) gets no DREQ sent in
    /// its name; a peer's DREQ that crossed it still gets its DREP.
    #[test]
    fn a_client_that_sent_its_dreq_gets_none_sent_again() {
        let t0 = Instant::now();
        let mut c = CmConnections::default();
        c.connected(1, peer(101), Stage::Established);
        c.connected(2, peer(102), Stage::Established);
        c.dreq_sent(1);
        c.dreq_sent(2);
        c.dreq_came(2, 0xabd, t0);
        let got = c.take_dead(all, t0 + Duration::from_secs(1));
        assert_eq!(got, [(2, peer(102), Farewell::Drep { tid: 0xabd })]);
        assert_eq!(c.len(), 0);
    }

    /// Rule (the kernel's `cm_destroy_id`): a REP the client took and had
    /// not answered with its RTU, or one it sent that no RTU answered, is
    /// rejected; once the RTU passed, the connection is ended with a DREQ.
    #[test]
    fn a_rep_left_unanswered_is_rejected_and_an_answered_one_disconnected() {
        let mut c = CmConnections::default();
        c.connected(1, peer(101), Stage::RepTaken);
        c.connected(2, peer(102), Stage::RepTaken);
        c.rtu_passed(2);
        c.connected(3, peer(103), Stage::RepSent);
        c.connected(4, peer(104), Stage::RepSent);
        c.connected(4, peer(104), Stage::Established);
        let mut got = c.take_dead(all, Instant::now());
        got.sort_by_key(|&(ours, ..)| ours);
        assert_eq!(
            got,
            [
                (1, peer(101), Farewell::Rej { rep_taken: true }),
                (2, peer(102), Farewell::Dreq),
                (3, peer(103), Farewell::Rej { rep_taken: false }),
                (4, peer(104), Farewell::Dreq)
            ]
        );
    }

    /// Both ends disconnecting at once: the DREP of the client's DREQ
    /// passes after the peer's crossing DREQ; the peer still waits for
    /// the client's DREP, so a client that dies before it gets one.
    #[test]
    fn a_crossing_dreq_still_waits_after_the_clients_drep() {
        let t0 = Instant::now();
        let mut c = CmConnections::default();
        c.connected(1, peer(101), Stage::Established);
        c.connected(2, peer(102), Stage::Established);
        c.dreq_came(1, 7, t0);
        c.drep_passed(1);
        c.drep_passed(2);
        assert_eq!(c.len(), 1, "connection 2 ended");
        assert_eq!(
            c.take_dead(all, t0),
            [(1, peer(101), Farewell::Drep { tid: 7 })]
        );
    }

    #[test]
    fn only_the_dead_clients_connections_go() {
        let mut c = CmConnections::default();
        c.connected(1, peer(101), Stage::Established);
        c.connected(0x1000_0001, peer(102), Stage::Established);
        let got = c.take_dead(|ours| ours >> 28 == 1, Instant::now());
        assert_eq!(got, [(0x1000_0001, peer(102), Farewell::Dreq)]);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn a_peer_that_stopped_waiting_gets_nothing() {
        let t0 = Instant::now();
        let mut c = CmConnections::default();
        c.connected(1, peer(101), Stage::Established);
        c.dreq_came(1, 7, t0);
        let late = t0 + DREQ_ANSWERED_WITHIN;
        assert_eq!(c.take_dead(all, late), []);
    }

    #[test]
    fn a_resent_dreq_keeps_the_first_mark() {
        let t0 = Instant::now();
        let mut c = CmConnections::default();
        c.connected(1, peer(101), Stage::Established);
        c.dreq_came(1, 7, t0);
        c.dreq_came(1, 7, t0 + DREQ_ANSWERED_WITHIN / 2);
        let after_first = t0 + DREQ_ANSWERED_WITHIN;
        assert_eq!(c.take_dead(all, after_first), [], "the first mark expired");
    }

    #[test]
    fn expired_marks_are_forgotten_when_the_next_dreq_comes() {
        let t0 = Instant::now();
        let mut c = CmConnections::default();
        c.connected(1, peer(101), Stage::Established);
        c.connected(2, peer(102), Stage::Established);
        c.dreq_came(1, 7, t0);
        c.dreq_came(2, 8, t0 + DREQ_ANSWERED_WITHIN);
        assert_eq!(c.len(), 1, "connection 1's peer no longer waits");
        let got = c.take_dead(all, t0 + DREQ_ANSWERED_WITHIN);
        assert_eq!(got, [(2, peer(102), Farewell::Drep { tid: 8 })]);
    }

    #[test]
    fn expired_marks_are_forgotten_at_the_next_cm_message() {
        let t0 = Instant::now();
        let mut c = CmConnections::default();
        c.connected(1, peer(101), Stage::Established);
        c.dreq_came(1, 7, t0);
        c.expire(t0 + DREQ_ANSWERED_WITHIN / 2);
        assert_eq!(c.len(), 1, "its peer may still wait");
        c.expire(t0 + DREQ_ANSWERED_WITHIN);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn an_old_mark_spares_a_later_connection_of_the_same_id() {
        let t0 = Instant::now();
        let mut c = CmConnections::default();
        c.connected(1, peer(101), Stage::Established);
        c.dreq_came(1, 7, t0);
        c.ended(1);
        c.connected(1, peer(201), Stage::Established);
        c.connected(2, peer(102), Stage::Established);
        c.dreq_came(2, 8, t0 + DREQ_ANSWERED_WITHIN);
        assert_eq!(c.len(), 2, "the new connection 1 stays");
        let mut got = c.take_dead(|ours| ours == 1, t0 + DREQ_ANSWERED_WITHIN);
        got.sort_by_key(|&(ours, ..)| ours);
        assert_eq!(got, [(1, peer(201), Farewell::Dreq)]);
    }

    #[test]
    fn a_full_table_still_learns_new_connections() {
        let mut c = CmConnections::default();
        for ours in 0..CONNECTIONS_MAX as u32 {
            c.connected(ours, peer(ours), Stage::Established);
        }
        c.connected(u32::MAX, peer(1), Stage::Established);
        assert_eq!(c.len(), CONNECTIONS_MAX);
        let got = c.take_dead(|ours| ours == u32::MAX, Instant::now());
        assert_eq!(got, [(u32::MAX, peer(1), Farewell::Dreq)]);
    }
}
