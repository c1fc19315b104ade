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
//! Time comes from the caller, so expiry is tested without waiting.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
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

/// The requests routed, by requester, with the client that got each.
#[derive(Debug, Default)]
pub(super) struct CmRequests {
    by_requester: HashMap<Requester, (usize, Instant)>,
    /// The requesters in the order their REQs came: (when, requester), so
    /// that they expire in order.
    order: VecDeque<(Instant, Requester)>,
}

impl CmRequests {
    /// The REQ of comm ID `comm_id` from `src` went to `client` at `now`
    /// (a REQ sent again keeps the first one's time).
    pub(super) fn routed(&mut self, src: IpAddr, comm_id: u32, client: usize, now: Instant) {
        self.expire(now);
        let key = (src, comm_id);
        if self
            .by_requester
            .get(&key)
            .is_some_and(|&(c, _)| c == client)
        {
            return;
        }
        self.by_requester.insert(key, (client, now));
        self.order.push_back((now, key));
    }

    /// The client that got the REQ of comm ID `comm_id` from `src`, if it
    /// came within [`REQUEST_ANSWERED_WITHIN`] of `now`.
    pub(super) fn client_of(&mut self, src: IpAddr, comm_id: u32, now: Instant) -> Option<usize> {
        self.expire(now);
        self.by_requester.get(&(src, comm_id)).map(|&(c, _)| c)
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

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_requester_is_found_by_its_address_and_comm_id() {
        let mut r = CmRequests::default();
        let t = Instant::now();
        r.routed(ip("10.0.0.1"), 7, 3, t);
        r.routed(ip("10.0.0.2"), 7, 4, t);
        assert_eq!(r.client_of(ip("10.0.0.1"), 7, t), Some(3));
        assert_eq!(r.client_of(ip("10.0.0.2"), 7, t), Some(4));
        assert_eq!(r.client_of(ip("10.0.0.1"), 8, t), None);
        assert_eq!(r.client_of(ip("10.0.0.3"), 7, t), None);
    }

    #[test]
    fn a_request_is_forgotten_once_its_requester_has_given_up() {
        let mut r = CmRequests::default();
        let t = Instant::now();
        r.routed(ip("10.0.0.1"), 7, 3, t);
        // Sent again later: the first REQ's time counts.
        r.routed(ip("10.0.0.1"), 7, 3, t + Duration::from_secs(60));
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
        r.routed(ip("10.0.0.1"), 7, 3, t);
        let later = t + Duration::from_secs(100);
        r.routed(ip("10.0.0.1"), 7, 5, later);
        let first_gone = t + REQUEST_ANSWERED_WITHIN;
        assert_eq!(r.client_of(ip("10.0.0.1"), 7, first_gone), Some(5));
    }

    #[test]
    fn a_flood_of_requests_is_bounded() {
        let mut r = CmRequests::default();
        let t = Instant::now();
        for n in 0..REQUESTS_MAX as u32 + 10 {
            r.routed(ip("10.0.0.1"), n, 1, t);
        }
        assert!(r.by_requester.len() <= REQUESTS_MAX);
        assert_eq!(r.client_of(ip("10.0.0.1"), 0, t), None, "the oldest went");
        let newest = REQUESTS_MAX as u32 + 9;
        assert_eq!(r.client_of(ip("10.0.0.1"), newest, t), Some(1));
    }
}
