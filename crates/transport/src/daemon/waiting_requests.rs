//! REQs and SIDR_REQs that came before any listener of their service.
//!
//! The kernel's CM answers such a request at once (REJ "invalid service
//! ID", SIDR_REP "service ID not supported"). Programs whose server tells
//! its client over another channel that it is ready and only then binds
//! and listens (perftest `-R` does, for its QPs) count on the bind and
//! listen, two system calls there, being done before the client's REQ
//! arrives. Here each is a round trip to the daemon, and a server
//! descheduled between them on a busy host lets the REQ come first
//! (perftest then crashes). So a request nobody listens for waits here up
//! to [`WAIT`]: a listener that comes meanwhile gets it, as if it had
//! listened first; when the wait ends, the daemon sends the kernel's
//! answer. Time comes from the caller, so the waits are tested without
//! waiting.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long a request waits for a listener: far above what a bind and a
/// listen take on a loaded host, far below the active side's CM response
/// timeout (seconds), and short enough that a client of a port nobody
/// listens on still fails "at once".
pub(super) const WAIT: Duration = Duration::from_millis(250);

/// Requests kept at most: beyond, a flood of REQs to closed ports is
/// answered at once, as before the wait existed.
const WAITING_MAX: usize = 4096;

/// A request and what its answer or delivery needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct WaitingRequest {
    /// Its rdma_cm port space and port (from its service ID).
    pub ps: u16,
    pub port: u16,
    /// Whether it asks for an IPv4 address (its rdma_cm header says, else
    /// the address it came to), which decides the listeners that take it.
    pub ipv4: bool,
    /// The UDP socket slot it arrived on, its source and destination,
    /// and its traffic class.
    pub slot: usize,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub class: u8,
    /// The packet as it arrived, and its MAD.
    pub packet: Vec<u8>,
    pub mad: [u8; 256],
}

/// The requests waiting, oldest first (all wait as long, so the oldest
/// ends its wait first).
#[derive(Debug, Default)]
pub(super) struct WaitingRequests {
    queue: VecDeque<(Instant, WaitingRequest)>,
}

impl WaitingRequests {
    /// Whether another request may wait (else it is answered at once).
    pub fn has_room(&self) -> bool {
        self.queue.len() < WAITING_MAX
    }

    /// Keeps `request`, arrived at `now`, until a listener comes or its
    /// wait ends.
    pub fn wait(&mut self, now: Instant, request: WaitingRequest) {
        debug_assert!(self.has_room());
        self.queue.push_back((now + WAIT, request));
    }

    /// Takes the requests `for_it` says a new listener would have got,
    /// oldest first.
    pub fn take_if(
        &mut self,
        mut for_it: impl FnMut(&WaitingRequest) -> bool,
    ) -> Vec<WaitingRequest> {
        let (taken, kept) = std::mem::take(&mut self.queue)
            .into_iter()
            .partition(|(_, r)| for_it(r));
        self.queue = kept;
        taken.into_iter().map(|(_, r)| r).collect()
    }

    /// Takes the requests whose wait is over at `now`.
    pub fn expired(&mut self, now: Instant) -> Vec<WaitingRequest> {
        let over = self.queue.iter().take_while(|(until, _)| *until <= now);
        let n = over.count();
        self.queue.drain(..n).map(|(_, r)| r).collect()
    }

    /// Takes every request (the daemon is leaving).
    pub fn all(&mut self) -> Vec<WaitingRequest> {
        self.queue.drain(..).map(|(_, r)| r).collect()
    }

    /// When the next wait ends.
    pub fn next_end(&self) -> Option<Instant> {
        self.queue.front().map(|(until, _)| *until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn request(port: u16, dst: [u8; 4], n: u8) -> WaitingRequest {
        let dst = SocketAddr::new(IpAddr::V4(Ipv4Addr::from(dst)), 4791);
        WaitingRequest {
            ps: 0x0106,
            port,
            ipv4: true,
            slot: 0,
            src: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9)), 4791),
            dst,
            class: 0,
            packet: vec![n],
            mad: [n; 256],
        }
    }

    #[test]
    fn a_listener_takes_the_requests_it_is_for_oldest_first() {
        let t = Instant::now();
        let mut w = WaitingRequests::default();
        for r in [
            request(1, [127, 0, 0, 1], 1),
            request(1, [127, 0, 0, 2], 2),
            request(2, [127, 0, 0, 1], 3),
            request(1, [127, 0, 0, 1], 4),
        ] {
            w.wait(t, r);
        }
        let on = |w: &mut WaitingRequests, port, ip: [u8; 4]| {
            let ip = IpAddr::V4(Ipv4Addr::from(ip));
            let for_it = |r: &WaitingRequest| r.port == port && r.dst.ip() == ip;
            w.take_if(for_it)
                .iter()
                .map(|r| r.packet[0])
                .collect::<Vec<_>>()
        };
        assert_eq!(on(&mut w, 1, [127, 0, 0, 1]), [1, 4], "oldest first");
        assert!(on(&mut w, 1, [127, 0, 0, 1]).is_empty(), "taken once");
        assert_eq!(w.take_if(|_| true).len(), 2, "the rest stayed");
        assert_eq!(w.next_end(), None);
    }

    #[test]
    fn a_wait_ends_after_its_time_oldest_first() {
        let t = Instant::now();
        let mut w = WaitingRequests::default();
        w.wait(t, request(1, [127, 0, 0, 1], 1));
        w.wait(t + WAIT / 2, request(1, [127, 0, 0, 1], 2));
        assert_eq!(w.next_end(), Some(t + WAIT));
        assert!(w.expired(t + WAIT - Duration::from_millis(1)).is_empty());
        assert_eq!(w.expired(t + WAIT)[0].packet, [1]);
        assert_eq!(w.next_end(), Some(t + WAIT / 2 + WAIT));
        assert_eq!(w.all().len(), 1);
        assert_eq!(w.next_end(), None);
    }

    #[test]
    fn its_room_is_bounded() {
        let t = Instant::now();
        let mut w = WaitingRequests::default();
        for n in 0..WAITING_MAX {
            assert!(w.has_room());
            w.wait(t, request(n as u16, [127, 0, 0, 1], 0));
        }
        assert!(!w.has_room());
        w.expired(t + WAIT);
        assert!(w.has_room());
    }
}
