//! The IP multicast groups a context is in, each counted by the MGIDs
//! that travel as it. Two MGIDs can travel as one IPv4 group: an IPv6
//! MGID on an IPv4 device goes as a 239/8 group derived from it
//! (`Gid::route`), beside that group's own MGID, or beside another IPv6
//! MGID of the same hash. The daemon keeps one membership per context and
//! group, so the context joins a group with the first MGID that travels
//! as it and leaves it with the last: leaving one MGID must not stop the
//! datagrams another still receives.

use std::collections::HashMap;
use std::net::IpAddr;

/// MGIDs attached, per group address they travel as.
#[derive(Debug, Default)]
pub(crate) struct GroupMemberships {
    mgids: HashMap<IpAddr, usize>,
}

impl GroupMemberships {
    /// An MGID that travels as `group` was attached: whether it is the
    /// first, so that the context must join `group`.
    pub(crate) fn attached(&mut self, group: IpAddr) -> bool {
        let n = self.mgids.entry(group).or_insert(0);
        *n += 1;
        *n == 1
    }

    /// An MGID that travels as `group` was detached (or its attach
    /// undone): whether it was the last, so that the context must leave
    /// `group`.
    pub(crate) fn detached(&mut self, group: IpAddr) -> bool {
        let Some(n) = self.mgids.get_mut(&group) else {
            return false;
        };
        *n -= 1;
        if *n > 0 {
            return false;
        }
        self.mgids.remove(&group);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_group_is_joined_with_its_first_mgid_and_left_with_its_last() {
        let mut g = GroupMemberships::default();
        assert!(g.attached(ip("239.1.2.3")));
        assert!(!g.attached(ip("239.1.2.3")));
        assert!(g.attached(ip("239.9.9.9")));
        assert!(!g.detached(ip("239.1.2.3")));
        assert!(g.detached(ip("239.1.2.3")));
        assert!(g.detached(ip("239.9.9.9")));
        assert!(
            g.attached(ip("239.1.2.3")),
            "joined again after the last left"
        );
    }

    #[test]
    fn a_group_never_joined_is_not_left() {
        let mut g = GroupMemberships::default();
        assert!(!g.detached(ip("239.1.2.3")));
    }
}
