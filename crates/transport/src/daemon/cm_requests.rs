//! The CM REQs the daemon knows of: those it passed to its clients, by
//! their sender, and those its clients sent, by their comm ID.
//!
//! A requester that gives up before any answer (its application destroys
//! the id while the REQ is unanswered) sends REJ "timeout" with remote
//! comm ID 0, since it never learnt the passive side's, and names itself
//! by its comm ID and, in the ARI, its CA GUID (the kernel's
//! `cm_destroy_id` in REQ_SENT). Every other CM message is routed by the
//! recipient's comm ID, which this one lacks; the kernel's CM finds the
//! passive id in a table of the REQs it took, and so does the daemon
//! with [`CmRequests::routed`]. The client's CM agent then checks the
//! GUID and the address.
//!
//! The same table finds the holder of a REQ sent again, which goes to it
//! whether or not its listener is still there, as the kernel's CM finds a
//! duplicate REQ before it looks for a listener (`cm_match_req`).
//!
//! A client that dies cannot send what its ids' destruction sends: the
//! kernel's rdma_cm outlives a killed process and destroys its ids, a
//! client's dies with it. So the daemon sends it in the client's name: a
//! REJ "timeout" for each REQ it sent that no REP or REJ answered (a
//! client tells the daemon of each, `Request::Requesting`:
//! [`CmRequests::sent`]), and a REJ "consumer defined" for each REQ it
//! was passed that no RTU, REP or REJ ended and it did not answer with a
//! REP of its own (the kernel's `cm_destroy_id` in REQ_RCVD). Time comes
//! from the caller, so expiry is tested without waiting.

use softverbs_wire::u24::Qpn;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long a requester may still give up its REQ: the kernel's rdma_cm
/// sends a REQ up to 16 times, about 4 s apart (`CMA_CM_RESPONSE_TIMEOUT`
/// 20, `CMA_MAX_CM_RETRIES` 15), before it gives up on its own.
pub(super) const REQUEST_ANSWERED_WITHIN: Duration = Duration::from_secs(120);

/// Requests remembered at most in each table (a bound on what a flood
/// holds); beyond, the oldest is forgotten.
const REQUESTS_MAX: usize = 1 << 16;

/// A REQ a client sent, and what the REJ in its name needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SentRequest {
    /// The client's address, which sent it, and where it went.
    pub local: IpAddr,
    pub peer: IpAddr,
    /// Its local comm ID and CA GUID, and its transaction ID.
    pub comm_id: u32,
    pub ca_guid: u64,
    pub tid: u64,
}

/// A REQ passed to a client, and what a REJ in its name needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RoutedRequest {
    /// The client it went to.
    pub client: usize,
    /// The address it came to (the listener's) and its transaction ID.
    pub dst: IpAddr,
    pub tid: u64,
    /// The requester's QP (the REQ's local QPN), which a DREQ to it names.
    pub qpn: Qpn,
    /// The client answered it with a REP (`Request::Replying`): should it
    /// die, the REJ of its REP goes, not one of the REQ. The entry stays,
    /// for the REQ sent again or given up while the REP is on its way.
    pub replied: bool,
}

/// The REQs known to the daemon.
#[derive(Debug, Default)]
pub(super) struct CmRequests {
    /// Passed to a client: (the REQ's source address, the requester's
    /// comm ID) -> where it went.
    pub routed: Expiring<(IpAddr, u32), RoutedRequest>,
    /// Sent by a client: its comm ID -> the REQ.
    pub sent: Expiring<u32, SentRequest>,
}

/// A table whose entries are forgotten [`REQUEST_ANSWERED_WITHIN`] after
/// they were made, or the oldest first once it holds [`REQUESTS_MAX`].
#[derive(Debug)]
pub(super) struct Expiring<K, V> {
    entries: HashMap<K, (V, Instant)>,
    /// The keys in the order their entries were made, so that they
    /// expire in order.
    order: VecDeque<(Instant, K)>,
}

impl<K, V> Default for Expiring<K, V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

impl<K: Copy + Eq + Hash, V: Copy + PartialEq> Expiring<K, V> {
    /// `key` is `value` from `now` (the same value again, as for a REQ
    /// sent again, keeps the first one's time).
    pub(super) fn insert(&mut self, key: K, value: V, now: Instant) {
        self.expire(now);
        if self.entries.get(&key).is_some_and(|(v, _)| *v == value) {
            return;
        }
        self.entries.insert(key, (value, now));
        self.order.push_back((now, key));
    }

    /// What `key` is, if made within [`REQUEST_ANSWERED_WITHIN`] of `now`.
    pub(super) fn get(&mut self, key: K, now: Instant) -> Option<V> {
        self.expire(now);
        self.entries.get(&key).map(|&(v, _)| v)
    }

    /// What `key` is, to change in place (its time stays), if made within
    /// [`REQUEST_ANSWERED_WITHIN`] of `now`.
    pub(super) fn get_mut(&mut self, key: K, now: Instant) -> Option<&mut V> {
        self.expire(now);
        self.entries.get_mut(&key).map(|(v, _)| v)
    }

    /// Forgets `key` (its REQ was answered).
    pub(super) fn remove(&mut self, key: K) {
        self.entries.remove(&key);
    }

    /// The entries `pick` names (given the key and value) among those
    /// made within [`REQUEST_ANSWERED_WITHIN`] of `now`, forgotten.
    pub(super) fn take(&mut self, pick: impl Fn(K, V) -> bool, now: Instant) -> Vec<V> {
        self.take_with_keys(pick, now)
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    }

    /// As [`Expiring::take`], with their keys.
    pub(super) fn take_with_keys(
        &mut self,
        pick: impl Fn(K, V) -> bool,
        now: Instant,
    ) -> Vec<(K, V)> {
        self.expire(now);
        let keys: Vec<K> = self
            .entries
            .iter()
            .filter(|(&k, &(v, _))| pick(k, v))
            .map(|(&k, _)| k)
            .collect();
        keys.into_iter()
            .filter_map(|k| self.entries.remove(&k).map(|(v, _)| (k, v)))
            .collect()
    }

    /// Forgets the entries older than [`REQUEST_ANSWERED_WITHIN`] (or
    /// the oldest, while too many are kept).
    fn expire(&mut self, now: Instant) {
        while let Some(&(at, key)) = self.order.front() {
            let full = self.order.len() >= REQUESTS_MAX;
            if !full && now.duration_since(at) < REQUEST_ANSWERED_WITHIN {
                break;
            }
            self.order.pop_front();
            // The entry of that time, not a later one of the same key.
            if self.entries.get(&key).is_some_and(|&(_, t)| t == at) {
                self.entries.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn to(client: usize) -> RoutedRequest {
        RoutedRequest {
            client,
            dst: ip("10.0.0.9"),
            tid: 1,
            qpn: Qpn::new_masked(0x11),
            replied: false,
        }
    }

    #[test]
    fn a_requester_is_found_by_its_address_and_comm_id() {
        let mut r = CmRequests::default();
        let t = Instant::now();
        r.routed.insert((ip("10.0.0.1"), 7), to(3), t);
        r.routed.insert((ip("10.0.0.2"), 7), to(4), t);
        assert_eq!(r.routed.get((ip("10.0.0.1"), 7), t), Some(to(3)));
        assert_eq!(r.routed.get((ip("10.0.0.2"), 7), t), Some(to(4)));
        assert_eq!(r.routed.get((ip("10.0.0.1"), 8), t), None);
        assert_eq!(r.routed.get((ip("10.0.0.3"), 7), t), None);
    }

    #[test]
    fn a_request_is_forgotten_once_its_requester_would_have_given_up() {
        let mut r = CmRequests::default();
        let t = Instant::now();
        r.routed.insert((ip("10.0.0.1"), 7), to(3), t);
        // Sent again later: the first REQ's time counts.
        r.routed
            .insert((ip("10.0.0.1"), 7), to(3), t + Duration::from_secs(60));
        let almost = t + REQUEST_ANSWERED_WITHIN - Duration::from_millis(1);
        assert_eq!(r.routed.get((ip("10.0.0.1"), 7), almost), Some(to(3)));
        let after = t + REQUEST_ANSWERED_WITHIN;
        assert_eq!(r.routed.get((ip("10.0.0.1"), 7), after), None);
        assert!(r.routed.order.is_empty());
    }

    /// A comm ID the requester uses again, for a REQ to another client,
    /// names that client; the first REQ's expiry does not forget it.
    #[test]
    fn a_comm_id_used_again_names_its_latest_request() {
        let mut r = CmRequests::default();
        let t = Instant::now();
        r.routed.insert((ip("10.0.0.1"), 7), to(3), t);
        let later = t + Duration::from_secs(100);
        r.routed.insert((ip("10.0.0.1"), 7), to(5), later);
        let first_gone = t + REQUEST_ANSWERED_WITHIN;
        assert_eq!(r.routed.get((ip("10.0.0.1"), 7), first_gone), Some(to(5)));
    }

    #[test]
    fn the_requests_of_a_dead_client_are_taken_once_and_answered_ones_not() {
        let mut r = CmRequests::default();
        let t = Instant::now();
        let sent = |comm_id| SentRequest {
            local: ip("10.0.0.1"),
            peer: ip("10.0.0.2"),
            comm_id,
            ca_guid: 0x0200_0000_0000_0010,
            tid: u64::from(comm_id),
        };
        for comm_id in [0x0010_0001, 0x0010_0002, 0x0010_0003, 0x0020_0001] {
            r.sent.insert(comm_id, sent(comm_id), t);
        }
        r.sent.remove(0x0010_0002); // a REP came
        let mut dead = r.sent.take(|comm_id, _| comm_id >> 20 == 1, t);
        dead.sort_by_key(|d| d.comm_id);
        assert_eq!(dead, [sent(0x0010_0001), sent(0x0010_0003)]);
        assert!(r.sent.take(|comm_id, _| comm_id >> 20 == 1, t).is_empty());
        assert_eq!(r.sent.take(|_, _| true, t), [sent(0x0020_0001)]);
        // Those passed to a dead client, by the client; none once its
        // requesters would have given up.
        r.routed.insert((ip("10.0.0.1"), 7), to(3), t);
        r.routed.insert((ip("10.0.0.1"), 8), to(4), t);
        assert_eq!(r.routed.take(|_, to| to.client == 3, t), [to(3)]);
        let late = t + REQUEST_ANSWERED_WITHIN;
        assert!(r.routed.take(|_, to| to.client == 4, late).is_empty());
    }

    #[test]
    fn a_flood_of_requests_is_bounded() {
        let mut r = CmRequests::default();
        let t = Instant::now();
        for n in 0..REQUESTS_MAX as u32 + 10 {
            r.routed.insert((ip("10.0.0.1"), n), to(1), t);
        }
        assert!(r.routed.entries.len() <= REQUESTS_MAX);
        assert_eq!(
            r.routed.get((ip("10.0.0.1"), 0), t),
            None,
            "the oldest went"
        );
        let newest = REQUESTS_MAX as u32 + 9;
        assert_eq!(r.routed.get((ip("10.0.0.1"), newest), t), Some(to(1)));
    }
}
