//! Multicast groups: which UD QPs a datagram sent to a multicast GID
//! reaches (`ibv_attach_mcast`, `ibv_detach_mcast`).
//!
//! Rules, as the kernel verbs core and rxe give them: only UD QPs attach,
//! only to a multicast GID (an IPv6 multicast address or an IPv4-mapped
//! IPv4 multicast address); attaching twice is a no-op; detaching what is
//! not attached is EINVAL; a QP attached to any group cannot be destroyed
//! (EBUSY, seed 002); the device-wide limits are `max_mcast_grp`,
//! `max_mcast_qp_attach` per group and `max_total_mcast_qp_attach`.
//! The embedder learns when a group gains its first member or loses its
//! last ([`Membership`]), to join or leave the group on the network.

use crate::error::{einval, enomem, ensure, VerbsResult};
use crate::gid::Gid;
use crate::handles::QpId;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

/// The destination QP number of every multicast datagram (IBTA 10.5.2).
pub const MULTICAST_QPN: u32 = 0xFF_FFFF;

/// A change the network must hear of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// This context now has a QP in the group: receive it.
    Joined(Gid),
    /// This context's last QP left the group.
    Left(Gid),
}

/// The groups of one device context and their member QPs.
#[derive(Debug, Default)]
pub(crate) struct McastTable {
    groups: HashMap<Gid, Vec<QpId>>,
    attached: usize,
    changes: VecDeque<Membership>,
}

/// Limits on groups and attachments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct McastLimits {
    pub(crate) groups: u32,
    pub(crate) per_group: u32,
    pub(crate) total: u32,
}

/// Whether `gid` names a multicast group.
pub fn is_multicast(gid: Gid) -> bool {
    match gid.to_ip() {
        IpAddr::V4(v4) => v4.is_multicast(),
        IpAddr::V6(v6) => v6.is_multicast(),
    }
}

impl McastTable {
    pub(crate) fn attach(&mut self, qp: QpId, gid: Gid, limits: McastLimits) -> VerbsResult<()> {
        ensure(is_multicast(gid), einval("not a multicast GID"))?;
        if self.groups.get(&gid).is_some_and(|m| m.contains(&qp)) {
            return Ok(()); // already a member: nothing to do (as rxe)
        }
        let members = self.groups.get(&gid).map_or(0, Vec::len);
        ensure(
            members > 0 || self.groups.len() < limits.groups as usize,
            enomem("max_mcast_grp groups exist"),
        )?;
        ensure(
            members < limits.per_group as usize,
            enomem("max_mcast_qp_attach QPs in this group"),
        )?;
        ensure(
            self.attached < limits.total as usize,
            enomem("max_total_mcast_qp_attach reached"),
        )?;
        let group = self.groups.entry(gid).or_default();
        if group.is_empty() {
            self.changes.push_back(Membership::Joined(gid));
        }
        group.push(qp);
        self.attached += 1;
        Ok(())
    }

    pub(crate) fn detach(&mut self, qp: QpId, gid: Gid) -> VerbsResult<()> {
        let group = self
            .groups
            .get_mut(&gid)
            .ok_or(einval("QP not attached to that group"))?;
        let at = group
            .iter()
            .position(|&q| q == qp)
            .ok_or(einval("QP not attached to that group"))?;
        group.swap_remove(at);
        self.attached -= 1;
        if group.is_empty() {
            self.groups.remove(&gid);
            self.changes.push_back(Membership::Left(gid));
        }
        Ok(())
    }

    /// The QPs attached to `gid`.
    #[cfg(test)]
    pub(crate) fn members(&self, gid: Gid) -> &[QpId] {
        self.groups.get(&gid).map_or(&[], Vec::as_slice)
    }

    /// The QPs a datagram to address `dst` reaches on a device on `local`:
    /// those attached to `dst` itself, then those attached to a group that
    /// travels as `dst` (an IPv6 group seen from an IPv4 device,
    /// `Gid::route`), each once, in the order of their groups.
    pub(crate) fn members_at(&self, dst: Gid, local: Option<IpAddr>) -> Vec<QpId> {
        let mut found = self.groups.get(&dst).cloned().unwrap_or_default();
        let Some(local) = local else {
            return found;
        };
        let ip = dst.to_ip();
        let mut others: Vec<_> = self
            .groups
            .iter()
            .filter(|(g, _)| **g != dst && g.route(local) == ip)
            .collect();
        others.sort_by_key(|(g, _)| g.0);
        for qp in others.into_iter().flat_map(|(_, m)| m) {
            if !found.contains(qp) {
                found.push(*qp);
            }
        }
        found
    }

    /// Whether `qp` is attached to any group.
    pub(crate) fn has_member(&self, qp: QpId) -> bool {
        self.groups.values().any(|m| m.contains(&qp))
    }

    pub(crate) fn poll_change(&mut self) -> Option<Membership> {
        self.changes.pop_front()
    }
}

impl crate::engine::Engine {
    /// `ibv_attach_mcast`: UD QP `qp` receives the datagrams sent to the
    /// multicast group `gid` (the LID is meaningless on RoCE).
    pub fn attach_mcast(&mut self, qp: QpId, gid: Gid) -> VerbsResult<()> {
        let q = self.qps.get(qp).ok_or(einval("unknown QP"))?;
        ensure(
            q.qp_type == crate::qp_state::QpType::Ud,
            einval("only UD QPs join multicast groups"),
        )?;
        let limits = McastLimits {
            groups: self.device_attr.max_mcast_grp,
            per_group: self.device_attr.max_mcast_qp_attach,
            total: self.device_attr.max_total_mcast_qp_attach,
        };
        self.mcast.attach(qp, gid, limits)
    }

    /// `ibv_detach_mcast`.
    pub fn detach_mcast(&mut self, qp: QpId, gid: Gid) -> VerbsResult<()> {
        ensure(self.qps.contains_key(qp), einval("unknown QP"))?;
        self.mcast.detach(qp, gid)
    }

    /// The next group this context joined or left, for the embedder to
    /// join or leave it on the network.
    pub fn poll_membership(&mut self) -> Option<Membership> {
        self.mcast.poll_change()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slotmap::SlotMap;

    const LIMITS: McastLimits = McastLimits {
        groups: 2,
        per_group: 2,
        total: 3,
    };

    fn gid(s: &str) -> Gid {
        Gid::from_ip(s.parse().unwrap())
    }

    #[test]
    fn attach_detach_and_limits() {
        let mut qps: SlotMap<QpId, ()> = SlotMap::with_key();
        let (a, b, c) = (qps.insert(()), qps.insert(()), qps.insert(()));
        let mut t = McastTable::default();
        let g = gid("239.1.1.1");
        assert_eq!(
            t.attach(a, gid("10.0.0.1"), LIMITS).unwrap_err().errno(),
            22
        );
        t.attach(a, g, LIMITS).unwrap();
        t.attach(a, g, LIMITS).unwrap();
        assert_eq!(t.poll_change(), Some(Membership::Joined(g)));
        assert_eq!(t.poll_change(), None, "a second attach changes nothing");
        t.attach(b, g, LIMITS).unwrap();
        assert_eq!(t.attach(c, g, LIMITS).unwrap_err().errno(), 12, "per group");
        t.attach(c, gid("ff0e::1"), LIMITS).unwrap();
        assert_eq!(
            t.attach(c, gid("ff0e::2"), LIMITS).unwrap_err().errno(),
            12,
            "groups"
        );
        assert_eq!(t.members(g), [a, b]);
        assert!(t.has_member(c));
        assert_eq!(t.detach(c, g).unwrap_err().errno(), 22, "not attached");
        t.detach(a, g).unwrap();
        t.detach(b, g).unwrap();
        assert_eq!(t.poll_change(), Some(Membership::Joined(gid("ff0e::1"))));
        assert_eq!(t.poll_change(), Some(Membership::Left(g)));
        assert!(!t.has_member(a));
    }

    #[test]
    fn an_ipv6_group_is_reached_at_the_ipv4_group_it_travels_as() {
        let mut qps: SlotMap<QpId, ()> = SlotMap::with_key();
        let (a, b) = (qps.insert(()), qps.insert(()));
        let mut t = McastTable::default();
        let ib_style = gid("ff01:0:2:c985::");
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let travels_as = Gid::from_ip(ib_style.route(local));
        t.attach(a, ib_style, LIMITS).unwrap();
        t.attach(b, travels_as, LIMITS).unwrap();
        assert_eq!(t.members_at(travels_as, Some(local)), [b, a]);
        assert_eq!(t.members_at(travels_as, None), [b]);
        assert_eq!(t.members_at(ib_style, Some(local)), [a]);
        let v6: IpAddr = "fd00::1".parse().unwrap();
        assert_eq!(t.members_at(travels_as, Some(v6)), [b]);
    }
}
