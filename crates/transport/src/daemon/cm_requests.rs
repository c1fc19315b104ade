//! The REQs the daemon passed to its clients, by their sender, so that a
//! REJ naming only its sender reaches the client that got the REQ.
//!
//! A requester that gives up before any answer (its application destroys
//! the id while the REQ is unanswered) sends REJ "timeout" with remote
//! comm ID 0, since it never learnt the passive side's, and names itself
//! by its comm ID and, in the ARI, its CA GUID (the kernel's
//! `cm_destroy_id` in REQ_SENT). Every other CM message is routed by the
//! recipient's comm ID, which this one lacks; the kernel's CM finds the
//! passive id in a table of the REQs it took, and so does the daemon
//! here. The client's CM agent then checks the GUID and the address.
//!
//! A requester on this host that dies with its REQ unanswered is given up
//! by the daemon in its name: the kernel's rdma_cm outlives a killed
//! process and destroys its ids, which sends that REJ; a client's dies
//! with it. Time comes from the caller, so expiry is tested without
//! waiting.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// How long a requester may still give up its REQ: the kernel's rdma_cm
/// sends a REQ up to 16 times, about 4 s apart (`CMA_CM_RESPONSE_TIMEOUT`
/// 20, `CMA_MAX_CM_RETRIES` 15), before it gives up on its own.
pub(super) const REQUEST_ANSWERED_WITHIN: Duration = Duration::from_secs(120);

/// Requests remembered at most (a bound on what a flood of REQs holds);
/// beyond, the oldest is forgotten.
const REQUESTS_MAX: usize = 1 << 16;

/// A requester: the address its REQ came from and its comm ID.
type Requester = (IpAddr, u32);

/// A REQ routed to a client, and what a REJ in its sender's name needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RoutedRequest {
    /// The client it went to.
    pub client: usize,
    /// Where it came from and went to (its QP1 packet's addresses).
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// The requester's comm ID, CA GUID and the REQ's transaction ID.
    pub comm_id: u32,
    pub ca_guid: u64,
    pub tid: u64,
}

/// The requests routed, by requester, with the client that got each.
#[derive(Debug, Default)]
pub(super) struct CmRequests {
    by_requester: HashMap<Requester, (RoutedRequest, Instant)>,
    /// The requesters in the order their REQs came: (when, requester), so
    /// that they expire in order.
    order: VecDeque<(Instant, Requester)>,
}

impl CmRequests {
    /// `request` went to its client at `now` (a REQ sent again keeps the
    /// first one's time).
    pub(super) fn routed(&mut self, request: RoutedRequest, now: Instant) {
        self.expire(now);
        let key = (request.src.ip(), request.comm_id);
        if self
            .by_requester
            .get(&key)
            .is_some_and(|(r, _)| *r == request)
        {
            return;
        }
        self.by_requester.insert(key, (request, now));
        self.order.push_back((now, key));
    }

    /// The client that got the REQ of comm ID `comm_id` from `src`, if it
    /// came within [`REQUEST_ANSWERED_WITHIN`] of `now`.
    pub(super) fn client_of(&mut self, src: IpAddr, comm_id: u32, now: Instant) -> Option<usize> {
        self.expire(now);
        self.by_requester
            .get(&(src, comm_id))
            .map(|(r, _)| r.client)
    }

    /// The REQ of comm ID `comm_id` from `src` was answered with a REP
    /// that reached its requester: a REJ of its now names the recipient.
    pub(super) fn answered(&mut self, src: IpAddr, comm_id: u32) {
        self.by_requester.remove(&(src, comm_id));
    }

    /// The requests whose requester `is_dead` (given its address and
    /// comm ID), forgotten: each gets a REJ in its sender's name.
    pub(super) fn take_dead(
        &mut self,
        is_dead: impl Fn(IpAddr, u32) -> bool,
    ) -> Vec<RoutedRequest> {
        let dead: Vec<Requester> = self
            .by_requester
            .keys()
            .copied()
            .filter(|&(ip, comm_id)| is_dead(ip, comm_id))
            .collect();
        dead.iter()
            .filter_map(|key| self.by_requester.remove(key))
            .map(|(r, _)| r)
            .collect()
    }

    /// Forgets the requests older than [`REQUEST_ANSWERED_WITHIN`] (or
    /// the oldest, while too many are kept).
    fn expire(&mut self, now: Instant) {
        while let Some(&(at, key)) = self.order.front() {
            let full = self.order.len() >= REQUESTS_MAX;
            if !full && now.duration_since(at) < REQUEST_ANSWERED_WITHIN {
                break;
            }
            self.order.pop_front();
            // The entry of that time, not that of a later REQ of the key.
            if self.by_requester.get(&key).is_some_and(|&(_, t)| t == at) {
                self.by_requester.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(src: &str, comm_id: u32, client: usize) -> RoutedRequest {
        RoutedRequest {
            client,
            src: SocketAddr::new(ip(src), 4791),
            dst: "10.0.0.9:4791".parse().unwrap(),
            comm_id,
            ca_guid: 0x0200_0000_0000_0010,
            tid: u64::from(comm_id),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_requester_is_found_by_its_address_and_comm_id() {
        let mut r = CmRequests::default();
        let t = Instant::now();
        r.routed(request("10.0.0.1", 7, 3), t);
        r.routed(request("10.0.0.2", 7, 4), t);
        assert_eq!(r.client_of(ip("10.0.0.1"), 7, t), Some(3));
        assert_eq!(r.client_of(ip("10.0.0.2"), 7, t), Some(4));
        assert_eq!(r.client_of(ip("10.0.0.1"), 8, t), None);
        assert_eq!(r.client_of(ip("10.0.0.3"), 7, t), None);
        r.answered(ip("10.0.0.1"), 7);
        assert_eq!(r.client_of(ip("10.0.0.1"), 7, t), None, "answered");
    }

    #[test]
    fn a_request_is_forgotten_once_its_requester_would_have_given_up() {
        let mut r = CmRequests::default();
        let t = Instant::now();
        r.routed(request("10.0.0.1", 7, 3), t);
        // Sent again later: the first REQ's time counts.
        r.routed(request("10.0.0.1", 7, 3), t + Duration::from_secs(60));
        let almost = t + REQUEST_ANSWERED_WITHIN - Duration::from_millis(1);
        assert_eq!(r.client_of(ip("10.0.0.1"), 7, almost), Some(3));
        let after = t + REQUEST_ANSWERED_WITHIN;
        assert_eq!(r.client_of(ip("10.0.0.1"), 7, after), None);
        assert!(r.order.is_empty());
    }

    /// A comm ID the requester uses again, for a REQ to another client,
    /// names that client; the first REQ's expiry does not forget it.
    #[test]
    fn a_comm_id_used_again_names_its_latest_request() {
        let mut r = CmRequests::default();
        let t = Instant::now();
        r.routed(request("10.0.0.1", 7, 3), t);
        let later = t + Duration::from_secs(100);
        r.routed(request("10.0.0.1", 7, 5), later);
        let first_gone = t + REQUEST_ANSWERED_WITHIN;
        assert_eq!(r.client_of(ip("10.0.0.1"), 7, first_gone), Some(5));
    }

    #[test]
    fn the_requests_of_a_dead_requester_are_taken_once() {
        let mut r = CmRequests::default();
        let t = Instant::now();
        r.routed(request("10.0.0.1", 7, 3), t);
        r.routed(request("10.0.0.1", 8, 3), t);
        r.routed(request("10.0.0.2", 7, 4), t);
        let mut dead = r.take_dead(|from, _| from == ip("10.0.0.1"));
        dead.sort_by_key(|d| d.comm_id);
        assert_eq!(dead, [request("10.0.0.1", 7, 3), request("10.0.0.1", 8, 3)]);
        assert!(r.take_dead(|_, _| false).is_empty());
        assert_eq!(r.take_dead(|_, _| true), [request("10.0.0.2", 7, 4)]);
    }

    #[test]
    fn a_flood_of_requests_is_bounded() {
        let mut r = CmRequests::default();
        let t = Instant::now();
        for n in 0..REQUESTS_MAX as u32 + 10 {
            r.routed(request("10.0.0.1", n, 1), t);
        }
        assert!(r.by_requester.len() <= REQUESTS_MAX);
        assert_eq!(r.client_of(ip("10.0.0.1"), 0, t), None, "the oldest went");
        let newest = REQUESTS_MAX as u32 + 9;
        assert_eq!(r.client_of(ip("10.0.0.1"), newest, t), Some(1));
    }
}
