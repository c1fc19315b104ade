//! The host's neighbour table, as the kernel's address resolution reads
//! it: whether the link-layer address of a route's next hop is known.
//!
//! The kernel's `rdma_resolve_addr` answers ADDR_RESOLVED only once the
//! neighbour entry of the hop the route sends to is valid (`dst_fetch_ha`),
//! and asks for it otherwise (`neigh_event_send`). Here the route and the
//! entry come from rtnetlink (RTM_GETROUTE as `ip route get`, RTM_GETNEIGH
//! for one entry; both open to any user), and a hop whose entry is missing
//! or failed is asked for by sending it an empty UDP datagram to RoCEv2's
//! port (no unprivileged call starts resolution without a packet; a RoCE
//! stack drops a datagram without a BTH, and a firewall that lets RoCEv2
//! out lets it out).

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_REQUEST};
use netlink_packet_route::link::{LinkFlags, LinkMessage};
use netlink_packet_route::neighbour::NeighbourState;
use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteType, RouteVia,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr as NetlinkAddr};
use std::net::{IpAddr, SocketAddr, UdpSocket};

/// RoCEv2's UDP port, where the datagram that starts a resolution goes.
const ROCE_PORT: u16 = 4791;
/// Room for one rtnetlink answer: a route or a neighbour takes a few
/// hundred bytes, a link a few thousand (one cut short is taken as no
/// answer).
const ANSWER_ROOM: usize = 32768;

/// What the table says of the next hop from `from` to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hop {
    /// No hop needs resolving (a local destination, or a route that is
    /// not a plain unicast one), or its entry is valid.
    Known,
    /// Being resolved (an ARP or neighbour solicitation is out).
    Resolving,
    /// No entry, or a failed one: resolution must be started.
    Unknown,
}

/// Whether the host knows the link-layer address of the next hop from
/// `from` to `to`; where it does not, starts finding it out. Anything
/// rtnetlink cannot answer (no route: the caller's route check fails
/// first) is taken as known, as before the check existed.
pub(super) fn next_hop_known(from: IpAddr, to: IpAddr) -> bool {
    match next_hop(from, to) {
        Ok(Hop::Known) | Err(_) => true,
        Ok(Hop::Resolving) => false,
        Ok(Hop::Unknown) => {
            start_resolution(from, to);
            false
        }
    }
}

fn next_hop(from: IpAddr, to: IpAddr) -> Result<Hop, i32> {
    let socket = open()?;
    let Some((ifindex, hop)) = route(&socket, from, to)? else {
        return Ok(Hop::Known);
    };
    let mut ask = NeighbourMessage::default();
    ask.header.family = family(hop);
    ask.header.ifindex = ifindex;
    ask.attributes
        .push(NeighbourAttribute::Destination(match hop {
            IpAddr::V4(a) => NeighbourAddress::Inet(a),
            IpAddr::V6(a) => NeighbourAddress::Inet6(a),
        }));
    match request(&socket, RouteNetlinkMessage::GetNeighbour(ask)) {
        Ok(RouteNetlinkMessage::NewNeighbour(entry)) => Ok(match entry.header.state {
            NeighbourState::Incomplete => Hop::Resolving,
            NeighbourState::Failed | NeighbourState::None => Hop::Unknown,
            // REACHABLE, STALE, DELAY, PROBE, NOARP, PERMANENT: the
            // kernel's NUD_VALID.
            _ => Hop::Known,
        }),
        Err(libc::ENOENT) => Ok(Hop::Unknown),
        Ok(_) => Ok(Hop::Known),
        Err(errno) => Err(errno),
    }
}

/// The interface and next hop of the route from `from` to `to`, as the
/// kernel picks it; `None` where no neighbour is involved: a local or
/// non-unicast route, or one out of an interface that resolves none
/// (loopback, or NOARP: a tun, a tunnel), which the kernel's
/// `addr_resolve_neigh` does not look up either.
fn route(socket: &Socket, from: IpAddr, to: IpAddr) -> Result<Option<(u32, IpAddr)>, i32> {
    let mut ask = RouteMessage::default();
    let full = if to.is_ipv4() { 32 } else { 128 };
    ask.header.address_family = family(to);
    ask.header.destination_prefix_length = full;
    ask.header.source_prefix_length = full;
    ask.attributes
        .push(RouteAttribute::Destination(RouteAddress::from(to)));
    ask.attributes
        .push(RouteAttribute::Source(RouteAddress::from(from)));
    let RouteNetlinkMessage::NewRoute(found) = request(socket, RouteNetlinkMessage::GetRoute(ask))?
    else {
        return Ok(None);
    };
    if found.header.kind != RouteType::Unicast {
        return Ok(None);
    }
    let (mut ifindex, mut hop) = (None, to);
    for attribute in &found.attributes {
        match attribute {
            RouteAttribute::Oif(index) => ifindex = Some(*index),
            RouteAttribute::Gateway(RouteAddress::Inet(g)) => hop = IpAddr::V4(*g),
            RouteAttribute::Gateway(RouteAddress::Inet6(g)) => hop = IpAddr::V6(*g),
            // A gateway of the other family (an IPv4 route via an IPv6
            // router): its entry is in that family's table.
            RouteAttribute::Via(RouteVia::Inet(g)) => hop = IpAddr::V4(*g),
            RouteAttribute::Via(RouteVia::Inet6(g)) => hop = IpAddr::V6(*g),
            _ => {}
        }
    }
    let Some(ifindex) = ifindex else {
        return Ok(None);
    };
    let mut ask = LinkMessage::default();
    ask.header.index = ifindex;
    let RouteNetlinkMessage::NewLink(link) = request(socket, RouteNetlinkMessage::GetLink(ask))?
    else {
        return Ok(None);
    };
    let resolves = !link
        .header
        .flags
        .intersects(LinkFlags::Loopback | LinkFlags::Noarp);
    Ok(resolves.then_some((ifindex, hop)))
}

/// Sends `to` an empty datagram from `from`: the kernel resolves the next
/// hop before it can send it.
fn start_resolution(from: IpAddr, to: IpAddr) {
    if let Ok(socket) = UdpSocket::bind(SocketAddr::new(from, 0)) {
        let _ = socket.send_to(&[], SocketAddr::new(to, ROCE_PORT));
    }
}

fn open() -> Result<Socket, i32> {
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    let socket = Socket::new(NETLINK_ROUTE).map_err(errno)?;
    socket.connect(&NetlinkAddr::new(0, 0)).map_err(errno)?;
    Ok(socket)
}

/// One rtnetlink request and its answer: the message, or the errno the
/// kernel answered with.
fn request(socket: &Socket, message: RouteNetlinkMessage) -> Result<RouteNetlinkMessage, i32> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    let mut out = NetlinkMessage::new(header, NetlinkPayload::from(message));
    out.finalize();
    let mut bytes = vec![0; out.header.length as usize];
    out.serialize(&mut bytes);
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    socket.send(&bytes, 0).map_err(errno)?;
    let mut answer = vec![0u8; ANSWER_ROOM];
    let n = socket.recv(&mut &mut answer[..], 0).map_err(errno)?;
    let parsed: NetlinkMessage<RouteNetlinkMessage> =
        NetlinkMessage::deserialize(answer.get(..n).unwrap_or_default())
            .map_err(|_| libc::EPROTO)?;
    match parsed.payload {
        NetlinkPayload::InnerMessage(m) => Ok(m),
        NetlinkPayload::Error(e) => Err(e.code.map_or(libc::EPROTO, |c| c.get().saturating_neg())),
        _ => Err(libc::EPROTO),
    }
}

fn family(ip: IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_destination_needs_no_hop() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(next_hop(lo, lo), Ok(Hop::Known));
        assert!(next_hop_known(lo, "127.0.0.2".parse().unwrap()));
    }
}
