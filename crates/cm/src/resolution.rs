//! An address resolution waiting for its next hop's link-layer address.
//!
//! As the kernel's (`addr_resolve_neigh`, `dst_fetch_ha`), ADDR_RESOLVED
//! comes only once the host's neighbour table knows the hop the route
//! sends to (ARP or neighbour discovery answered), and ADDR_ERROR with
//! ETIMEDOUT if it does not within the `timeout_ms` that
//! `rdma_resolve_addr` gives: an address on the link that no host has
//! fails there, not after the CM's retries of a REQ nobody answers. The
//! kernel hears of a neighbour's update at once (a netevent); the agent
//! asks the table again at growing intervals instead, from 1 ms (a hop on
//! a veth or a LAN answers well within it) to 50 ms.
//!
//! An id resolved unbound goes back to the wildcard source it was bound
//! to when its resolution fails, as the kernel's `addr_handler` restores
//! the source it had, so a later resolve picks its device afresh.

use std::net::SocketAddr;

use crate::agent::Nanos;

const FIRST_WAIT: Nanos = 1_000_000;
const LONGEST_WAIT: Nanos = 50_000_000;

/// When an id's resolution looks at its next hop again, and gives up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resolving {
    /// When the resolution fails if the hop is still unknown.
    pub(crate) deadline: Nanos,
    /// When to look next.
    pub(crate) at: Nanos,
    wait: Nanos,
    /// The wildcard source (and port) the id goes back to if this
    /// fails: it was unbound when the resolution began.
    pub(crate) restore: Option<SocketAddr>,
}

impl Resolving {
    /// A resolution started at `now` with `timeout_ms` to succeed.
    pub(crate) fn new(now: Nanos, timeout_ms: u32) -> Resolving {
        let deadline = now.saturating_add(u64::from(timeout_ms) * 1_000_000);
        Resolving {
            deadline,
            at: now.saturating_add(FIRST_WAIT).min(deadline),
            wait: FIRST_WAIT,
            restore: None,
        }
    }

    /// The resolution, going back to source `wildcard` if it fails.
    pub(crate) fn restoring(self, wildcard: Option<SocketAddr>) -> Resolving {
        Resolving {
            restore: wildcard,
            ..self
        }
    }

    /// Schedules the next look after one at `now` that found the hop
    /// unknown, never past the deadline.
    pub(crate) fn again(&mut self, now: Nanos) {
        self.wait = (self.wait * 2).min(LONGEST_WAIT);
        self.at = now.saturating_add(self.wait).min(self.deadline);
    }

    /// Whether a look at `now` that found the hop unknown ends it.
    pub(crate) fn expired(&self, now: Nanos) -> bool {
        now >= self.deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_come_more_rarely_and_end_at_the_deadline() {
        let mut r = Resolving::new(0, 200);
        let mut looks = vec![r.at];
        while !r.expired(r.at) {
            r.again(r.at);
            looks.push(r.at);
        }
        assert_eq!(looks[..4], [1_000_000, 3_000_000, 7_000_000, 15_000_000]);
        assert_eq!(*looks.last().unwrap(), 200_000_000);
        assert!(looks.windows(2).all(|w| w[1] - w[0] <= LONGEST_WAIT));
    }

    #[test]
    fn a_zero_timeout_looks_once_at_once() {
        let r = Resolving::new(5, 0);
        assert_eq!(r.at, 5);
        assert!(r.expired(r.at));
    }
}
