//! What a context and the host daemon say to each other.
//!
//! Two channels per context, both Unix sockets:
//!
//! * **control**, a `SOCK_SEQPACKET` connection to the daemon's abstract
//!   socket: requests and their replies, one record each. Its close is the
//!   context's death: the daemon frees what the context held at once.
//! * **data**, one end of a `SOCK_STREAM` socket pair the context creates
//!   and hands over with its `Hello` (SCM_RIGHTS): the daemon writes the
//!   packets that arrive for the context's QP numbers, each as one
//!   [`Frame`]. A stream, not datagrams, because Unix datagram queues are
//!   limited to `net.unix.max_dgram_qlen` messages (10 on many hosts).
//!
//! A context may also publish its same-host region (a memfd and a doorbell
//! eventfd, docs/architecture.md "Same host") with [`Request::Publish`];
//! a context of the same user finds the owner of a QP number and gets
//! those two descriptors back with [`Request::Lookup`].
//!
//! A context that runs the connection manager (the CM agent of rdma_cm)
//! holds ports of the host's rdma_cm port space with [`Request::Reserve`],
//! [`Request::Listen`] and [`Request::Release`]; the daemon passes it the
//! CM's MADs to QP1 that name its listeners or its communication IDs
//! (docs/architecture.md, "Addressing").
//!
//! Records are little-endian and versioned by [`VERSION`]; both ends come
//! from the same build, but a stale daemon from an older build must be
//! refused cleanly, not misread.

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// The UDP port of RoCEv2 (IANA), on which the daemon receives.
pub const ROCE_PORT: u16 = 4791;
/// Where the port softverbs uses instead, if set.
const PORT_VAR: &str = "SOFTVERBS_UDP_PORT";

/// The UDP port softverbs sends to and receives on: [`ROCE_PORT`], unless
/// `SOFTVERBS_UDP_PORT` names another. That is for a host where something
/// else holds 4791 in the network namespace (the kernel's Soft-RoCE, rxe,
/// binds it on every address): softverbs devices there reach only
/// softverbs peers that use the same port.
pub fn udp_port() -> u16 {
    static PORT: std::sync::OnceLock<u16> = std::sync::OnceLock::new();
    *PORT.get_or_init(|| {
        let Ok(text) = std::env::var(PORT_VAR) else {
            return ROCE_PORT;
        };
        match text.parse::<u16>() {
            Ok(port) if port != 0 => port,
            _ => {
                crate::say!("softverbs: {PORT_VAR}={text} is not a UDP port; using {ROCE_PORT}");
                ROCE_PORT
            }
        }
    })
}
/// The abstract socket name the daemon listens on by default. Abstract
/// names live in the network namespace, so each namespace gets its own.
pub const DEFAULT_SOCKET: &str = "softverbs";
/// Protocol version: a daemon refuses a client of another version.
/// Version 2 added `Publish`, `Lookup` and `Peer`; version 3 `Reserve`,
/// `Listen`, `Release` and `Port` (and the daemon's routing of QP1);
/// version 4 `Requesting`; version 5 `Replying`; version 6 `Reserve`'s
/// `afonly`; version 7 `Disconnecting`; version 8 the frame's traffic
/// class.
pub const VERSION: u16 = 8;

const HELLO: u8 = 1;
const MORE_QPNS: u8 = 2;
const JOIN: u8 = 3;
const LEAVE: u8 = 4;
const PUBLISH: u8 = 5;
const LOOKUP: u8 = 6;
const RESERVE: u8 = 7;
const LISTEN: u8 = 8;
const RELEASE: u8 = 9;
const REQUESTING: u8 = 10;
const REPLYING: u8 = 11;
const DISCONNECTING: u8 = 12;
const BLOCK: u8 = 0x81;
const REFUSED: u8 = 0x82;
const DONE: u8 = 0x83;
const PEER: u8 = 0x84;
const PORT: u8 = 0x85;

/// A context's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// First record: the device address the context receives on (the
    /// daemon opens UDP 4791 there if it has not yet). Carries the data
    /// socket. Answered with a block of QP numbers.
    Hello {
        /// The device address.
        ip: IpAddr,
    },
    /// Another block of QP numbers.
    MoreQpns,
    /// Pass on the datagrams sent to this multicast group (on the
    /// context's device address). Answered with `Done`.
    Join {
        /// The group's IP address.
        group: IpAddr,
    },
    /// Stop passing on that group's datagrams. Answered with `Done`.
    Leave {
        /// The group's IP address.
        group: IpAddr,
    },
    /// The context's same-host region: carries two descriptors, the
    /// region's memfd and the doorbell eventfd its peers ring. Replaces
    /// what the context published before. Answered with `Done`.
    Publish {
        /// The region's length in bytes.
        region_bytes: u64,
    },
    /// Who owns the block of `qpn`, and its published region. Answered
    /// with `Peer` (and the two descriptors), or refused: `ENOENT` when
    /// nobody holds the block or its owner published nothing, `EPERM`
    /// when the owner runs as another user.
    Lookup {
        /// Any QP number of the block.
        qpn: u32,
    },
    /// Holds `port` of rdma_cm port space `ps` on `ip` (the unspecified
    /// address: on every address) for this context, as the kernel's
    /// `rdma_bind_addr` does without REUSEADDR. Port 0 picks a free
    /// ephemeral port. Answered with `Port`, or refused: `EADDRINUSE` when
    /// another reservation holds the port on `ip`, `EADDRNOTAVAIL` when
    /// either of the two is on the unspecified address (or no ephemeral
    /// port is free), `EINVAL` for an unknown port space. Two
    /// reservations of different families that are both `afonly` never
    /// conflict.
    Reserve {
        /// The port space (`RDMA_PS_TCP` 0x0106, `RDMA_PS_UDP` 0x0111,
        /// `RDMA_PS_IB` 0x013F, `RDMA_PS_IPOIB` 0x0002).
        ps: u16,
        /// The address, or the unspecified address for all.
        ip: IpAddr,
        /// The port, 0 for any.
        port: u16,
        /// The id is address-family only (the kernel's `afonly`: an
        /// AF_INET id, or an AF_INET6 one with `RDMA_OPTION_ID_AFONLY` or
        /// `bindv6only`): it shares the port with one of the other family
        /// that is too.
        afonly: bool,
    },
    /// Marks this context's reservation of exactly (`ps`, `ip`, `port`)
    /// listening: the CM's REQs and SIDR_REQs for that service now reach
    /// it. Answered with `Done`, or refused with `EINVAL` when the context
    /// holds no such reservation.
    Listen {
        /// The port space.
        ps: u16,
        /// The reserved address.
        ip: IpAddr,
        /// The reserved port.
        port: u16,
    },
    /// Gives a reservation of this context back. Answered with `Done`, or
    /// refused with `EINVAL` when it holds no such reservation.
    Release {
        /// The port space.
        ps: u16,
        /// The reserved address.
        ip: IpAddr,
        /// The reserved port.
        port: u16,
    },
    /// The context sent a CM REQ to QP1 at `peer`: should it end before
    /// the REQ is answered, the daemon gives the REQ up in its name (a
    /// REJ "timeout" with its comm ID and CA GUID, in the REQ's
    /// transaction). Answered with `Done`, or refused with `EINVAL` when
    /// `comm_id` is not in one of the context's blocks.
    Requesting {
        /// Where the REQ went.
        peer: IpAddr,
        /// The REQ's local comm ID, local CA GUID and transaction ID.
        comm_id: u32,
        ca_guid: u64,
        tid: u64,
    },
    /// The context sent a CM REP to QP1 at `peer`: should it end before
    /// the peer's RTU comes, the daemon rejects the REP in its name (a
    /// REJ "consumer defined" with both comm IDs), and once the RTU came,
    /// disconnects (a DREQ), as for a connection whose RTU it saw.
    /// Answered with `Done`, or refused with `EINVAL` when `comm_id` is
    /// not in one of the context's blocks (`EADDRNOTAVAIL` when the daemon
    /// has no socket on the context's address).
    Replying {
        /// Where the REP went.
        peer: IpAddr,
        /// The REP's local and remote comm IDs.
        comm_id: u32,
        remote_comm_id: u32,
    },
    /// The context sent `message` (a DREQ, DREP or REJ) of its comm ID
    /// `comm_id` to `peer`'s `remote_comm_id`, which the daemon does not
    /// see go: it sends nothing in the context's name for what the
    /// message said (after a DREQ, no DREQ; after a DREP or REJ, nothing
    /// for the connection or request), where it sent it again at every
    /// exit. Answered with `Done`, or refused with `EINVAL` when
    /// `comm_id` is not in one of the context's blocks.
    Disconnecting {
        /// Where the message went.
        peer: IpAddr,
        /// Its local and remote comm IDs.
        comm_id: u32,
        remote_comm_id: u32,
        /// Which message it was.
        message: Ending,
    },
}

/// A CM message that ends (or begins to end) a connection or a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// A DREQ: the connection is being ended; the peer answers.
    Dreq,
    /// A DREP: the peer's DREQ is answered; the connection is over.
    Drep,
    /// A REJ: the request (or a REP's connection) is over.
    Rej,
}

impl Ending {
    fn code(self) -> u8 {
        match self {
            Ending::Dreq => 1,
            Ending::Drep => 2,
            Ending::Rej => 3,
        }
    }

    fn from_code(code: u8) -> Option<Ending> {
        match code {
            1 => Some(Ending::Dreq),
            2 => Some(Ending::Drep),
            3 => Some(Ending::Rej),
            _ => None,
        }
    }
}

/// The daemon's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// QP numbers `block << 12 ..= block << 12 | 0xfff` are the context's.
    Block(u16),
    /// The request failed: an errno and why.
    Refused(i32, String),
    /// The request was carried out.
    Done,
    /// The owner of a looked-up QP number: its process and its region's
    /// length; the record carries the region's memfd and the doorbell.
    Peer {
        /// The owner's process id, as the daemon sees it (SO_PEERCRED at
        /// its connection).
        pid: i32,
        /// The published region's length in bytes.
        region_bytes: u64,
    },
    /// The port a `Reserve` holds.
    Port(u16),
}

fn put_ip(out: &mut Vec<u8>, ip: IpAddr) {
    let v6 = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    out.push(u8::from(ip.is_ipv4()));
    out.extend_from_slice(&v6.octets());
}

fn get_ip(b: &[u8]) -> Option<IpAddr> {
    let octets: [u8; 16] = b.get(1..17)?.try_into().ok()?;
    let v6 = Ipv6Addr::from(octets);
    match b.first()? {
        1 => v6.to_ipv4_mapped().map(IpAddr::V4),
        0 => Some(IpAddr::V6(v6)),
        _ => None,
    }
}

/// Port space, address and port, as `Reserve`, `Listen` and `Release`
/// carry them.
fn put_port(out: &mut Vec<u8>, ps: u16, ip: IpAddr, port: u16) {
    out.extend_from_slice(&ps.to_le_bytes());
    put_ip(out, ip);
    out.extend_from_slice(&port.to_le_bytes());
}

fn get_port(b: &[u8]) -> Option<(u16, IpAddr, u16)> {
    if b.len() != 2 + 17 + 2 {
        return None;
    }
    let ps = u16::from_le_bytes([b[0], b[1]]);
    let ip = get_ip(&b[2..19])?;
    let port = u16::from_le_bytes([b[19], b[20]]);
    Some((ps, ip, port))
}

/// A `Requesting` record after its tag: the peer (17 bytes), then the
/// comm ID, CA GUID and transaction ID.
fn get_requesting(b: &[u8]) -> Option<Request> {
    if b.len() != 17 + 4 + 8 + 8 {
        return None;
    }
    Some(Request::Requesting {
        peer: get_ip(&b[..17])?,
        comm_id: u32::from_le_bytes(b[17..21].try_into().ok()?),
        ca_guid: u64::from_le_bytes(b[21..29].try_into().ok()?),
        tid: u64::from_le_bytes(b[29..37].try_into().ok()?),
    })
}

/// A `Replying` record after its tag: the peer (17 bytes), then the
/// local and remote comm IDs.
fn get_replying(b: &[u8]) -> Option<Request> {
    if b.len() != 17 + 4 + 4 {
        return None;
    }
    Some(Request::Replying {
        peer: get_ip(&b[..17])?,
        comm_id: u32::from_le_bytes(b[17..21].try_into().ok()?),
        remote_comm_id: u32::from_le_bytes(b[21..25].try_into().ok()?),
    })
}

/// A `Disconnecting` record after its tag: the peer (17 bytes), the local
/// and remote comm IDs, then the message's code.
fn get_disconnecting(b: &[u8]) -> Option<Request> {
    if b.len() != 17 + 4 + 4 + 1 {
        return None;
    }
    Some(Request::Disconnecting {
        peer: get_ip(&b[..17])?,
        comm_id: u32::from_le_bytes(b[17..21].try_into().ok()?),
        remote_comm_id: u32::from_le_bytes(b[21..25].try_into().ok()?),
        message: Ending::from_code(b[25])?,
    })
}

fn bad(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("softverbs daemon protocol: {what}"),
    )
}

impl Request {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(20);
        match self {
            Request::Hello { ip } => {
                out.push(HELLO);
                out.extend_from_slice(&VERSION.to_le_bytes());
                put_ip(&mut out, *ip);
            }
            Request::MoreQpns => out.push(MORE_QPNS),
            Request::Join { group } => {
                out.push(JOIN);
                put_ip(&mut out, *group);
            }
            Request::Leave { group } => {
                out.push(LEAVE);
                put_ip(&mut out, *group);
            }
            Request::Publish { region_bytes } => {
                out.push(PUBLISH);
                out.extend_from_slice(&region_bytes.to_le_bytes());
            }
            Request::Lookup { qpn } => {
                out.push(LOOKUP);
                out.extend_from_slice(&qpn.to_le_bytes());
            }
            Request::Reserve {
                ps,
                ip,
                port,
                afonly,
            } => {
                out.push(RESERVE);
                put_port(&mut out, *ps, *ip, *port);
                out.push(u8::from(*afonly));
            }
            Request::Listen { ps, ip, port } => {
                out.push(LISTEN);
                put_port(&mut out, *ps, *ip, *port);
            }
            Request::Release { ps, ip, port } => {
                out.push(RELEASE);
                put_port(&mut out, *ps, *ip, *port);
            }
            Request::Requesting {
                peer,
                comm_id,
                ca_guid,
                tid,
            } => {
                out.push(REQUESTING);
                put_ip(&mut out, *peer);
                out.extend_from_slice(&comm_id.to_le_bytes());
                out.extend_from_slice(&ca_guid.to_le_bytes());
                out.extend_from_slice(&tid.to_le_bytes());
            }
            Request::Replying {
                peer,
                comm_id,
                remote_comm_id,
            } => {
                out.push(REPLYING);
                put_ip(&mut out, *peer);
                out.extend_from_slice(&comm_id.to_le_bytes());
                out.extend_from_slice(&remote_comm_id.to_le_bytes());
            }
            Request::Disconnecting {
                peer,
                comm_id,
                remote_comm_id,
                message,
            } => {
                out.push(DISCONNECTING);
                put_ip(&mut out, *peer);
                out.extend_from_slice(&comm_id.to_le_bytes());
                out.extend_from_slice(&remote_comm_id.to_le_bytes());
                out.push(message.code());
            }
        }
        out
    }

    /// Parses a record; a Hello of another version is an error that says so.
    pub fn decode(b: &[u8]) -> io::Result<Request> {
        match b.first() {
            Some(&HELLO) => {
                let version = u16::from_le_bytes(
                    b.get(1..3)
                        .ok_or(bad("short hello"))?
                        .try_into()
                        .unwrap_or_default(),
                );
                if version != VERSION {
                    return Err(bad(&format!(
                        "client version {version}, daemon version {VERSION}"
                    )));
                }
                let ip = get_ip(&b[3..]).ok_or(bad("bad address"))?;
                Ok(Request::Hello { ip })
            }
            Some(&MORE_QPNS) => Ok(Request::MoreQpns),
            Some(&JOIN) => Ok(Request::Join {
                group: get_ip(&b[1..]).ok_or(bad("bad group"))?,
            }),
            Some(&LEAVE) => Ok(Request::Leave {
                group: get_ip(&b[1..]).ok_or(bad("bad group"))?,
            }),
            Some(&PUBLISH) => Ok(Request::Publish {
                region_bytes: u64::from_le_bytes(
                    b[1..].try_into().map_err(|_| bad("bad publish"))?,
                ),
            }),
            Some(&LOOKUP) => Ok(Request::Lookup {
                qpn: u32::from_le_bytes(b[1..].try_into().map_err(|_| bad("bad lookup"))?),
            }),
            Some(&RESERVE) => {
                let (&afonly, rest) = b[1..].split_last().ok_or(bad("bad reserve"))?;
                let (ps, ip, port) = get_port(rest).ok_or(bad("bad reserve"))?;
                let afonly = match afonly {
                    0 | 1 => afonly == 1,
                    _ => return Err(bad("bad reserve")),
                };
                Ok(Request::Reserve {
                    ps,
                    ip,
                    port,
                    afonly,
                })
            }
            Some(&LISTEN) => {
                let (ps, ip, port) = get_port(&b[1..]).ok_or(bad("bad listen"))?;
                Ok(Request::Listen { ps, ip, port })
            }
            Some(&RELEASE) => {
                let (ps, ip, port) = get_port(&b[1..]).ok_or(bad("bad release"))?;
                Ok(Request::Release { ps, ip, port })
            }
            Some(&REQUESTING) => get_requesting(&b[1..]).ok_or(bad("bad requesting")),
            Some(&REPLYING) => get_replying(&b[1..]).ok_or(bad("bad replying")),
            Some(&DISCONNECTING) => get_disconnecting(&b[1..]).ok_or(bad("bad disconnecting")),
            _ => Err(bad("unknown request")),
        }
    }
}

impl Reply {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Reply::Block(b) => {
                let mut out = vec![BLOCK];
                out.extend_from_slice(&b.to_le_bytes());
                out
            }
            Reply::Refused(errno, why) => {
                let mut out = vec![REFUSED];
                out.extend_from_slice(&errno.to_le_bytes());
                out.extend_from_slice(why.as_bytes());
                out
            }
            Reply::Done => vec![DONE],
            Reply::Peer { pid, region_bytes } => {
                let mut out = vec![PEER];
                out.extend_from_slice(&pid.to_le_bytes());
                out.extend_from_slice(&region_bytes.to_le_bytes());
                out
            }
            Reply::Port(port) => {
                let mut out = vec![PORT];
                out.extend_from_slice(&port.to_le_bytes());
                out
            }
        }
    }

    /// Parses a record.
    pub fn decode(b: &[u8]) -> io::Result<Reply> {
        match b.first() {
            Some(&BLOCK) if b.len() == 3 => Ok(Reply::Block(u16::from_le_bytes([b[1], b[2]]))),
            Some(&REFUSED) if b.len() >= 5 => {
                let errno = i32::from_le_bytes([b[1], b[2], b[3], b[4]]);
                Ok(Reply::Refused(
                    errno,
                    String::from_utf8_lossy(&b[5..]).into_owned(),
                ))
            }
            Some(&DONE) if b.len() == 1 => Ok(Reply::Done),
            Some(&PEER) if b.len() == 13 => Ok(Reply::Peer {
                pid: i32::from_le_bytes([b[1], b[2], b[3], b[4]]),
                region_bytes: u64::from_le_bytes(b[5..13].try_into().unwrap_or_default()),
            }),
            Some(&PORT) if b.len() == 3 => Ok(Reply::Port(u16::from_le_bytes([b[1], b[2]]))),
            _ => Err(bad("unknown reply")),
        }
    }

    /// The block, or the refusal as an error.
    pub fn into_block(self) -> io::Result<u16> {
        match self {
            Reply::Block(b) => Ok(b),
            other => Err(other.into_error()),
        }
    }

    /// `Ok` for `Done`, the refusal as an error.
    pub fn into_done(self) -> io::Result<()> {
        match self {
            Reply::Done => Ok(()),
            other => Err(other.into_error()),
        }
    }

    /// The refusal as an error (a reply that is no refusal is one too).
    pub(crate) fn into_error(self) -> io::Error {
        match self {
            // The errno is what the verb returns (an io::Error with a
            // message of its own would lose it); the reason goes to the
            // program's log, as the provider's other refusals do.
            Reply::Refused(errno, why) => {
                crate::say!("softverbs daemon: {why}");
                io::Error::from_raw_os_error(errno)
            }
            other => bad(&format!("unexpected reply {other:?}")),
        }
    }
}

/// One data-channel frame: datagram bytes that arrived from `src` at
/// `dst`, cut into packets of `segment` bytes (the last may be shorter)
/// when the kernel coalesced several (UDP GRO), with the traffic class
/// of their IP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The sender's address and port.
    pub src: SocketAddr,
    /// The address and port it was sent to (the daemon's).
    pub dst: SocketAddr,
    /// Packet size within the bytes.
    pub segment: u16,
    /// The traffic class of their IP header (IPv4 TOS, IPv6 traffic
    /// class).
    pub class: u8,
}

/// Bytes of a frame before its packets: length (u32), then the header.
pub const FRAME_HEAD: usize = 4 + 2 * (17 + 2) + 2 + 1;

impl FrameHeader {
    /// Writes the frame head for `payload_len` bytes of packets.
    pub fn encode(&self, payload_len: usize, out: &mut Vec<u8>) {
        let total = (FRAME_HEAD - 4 + payload_len) as u32;
        out.extend_from_slice(&total.to_le_bytes());
        for a in [self.src, self.dst] {
            put_ip(out, a.ip());
            out.extend_from_slice(&a.port().to_le_bytes());
        }
        out.extend_from_slice(&self.segment.to_le_bytes());
        out.push(self.class);
    }

    /// If `b` starts with a whole frame: its header, its packets and the
    /// bytes it took. `Ok(None)`: not all of it is there yet.
    pub fn decode(b: &[u8]) -> io::Result<Option<(FrameHeader, &[u8], usize)>> {
        let Some(len) = b.get(..4) else {
            return Ok(None);
        };
        let total = u32::from_le_bytes(len.try_into().unwrap_or_default()) as usize;
        if total < FRAME_HEAD - 4 {
            return Err(bad("short frame"));
        }
        let Some(frame) = b.get(4..4 + total) else {
            return Ok(None);
        };
        let addr = |at: usize| -> io::Result<SocketAddr> {
            let ip = get_ip(&frame[at..]).ok_or(bad("bad frame address"))?;
            Ok(SocketAddr::new(
                ip,
                u16::from_le_bytes([frame[at + 17], frame[at + 18]]),
            ))
        };
        let header = FrameHeader {
            src: addr(0)?,
            dst: addr(19)?,
            segment: u16::from_le_bytes([frame[38], frame[39]]),
            class: frame[40],
        };
        Ok(Some((header, &frame[FRAME_HEAD - 4..], 4 + total)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        for ip in ["127.0.0.1", "::1", "fe80::1"] {
            let r = Request::Hello {
                ip: ip.parse().unwrap(),
            };
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
        assert_eq!(
            Request::decode(&Request::MoreQpns.encode()).unwrap(),
            Request::MoreQpns
        );
        for group in ["239.1.2.3", "ff0e::5"] {
            let group = group.parse().unwrap();
            for r in [Request::Join { group }, Request::Leave { group }] {
                assert_eq!(Request::decode(&r.encode()).unwrap(), r);
            }
        }
        for r in [
            Request::Publish {
                region_bytes: u64::MAX - 7,
            },
            Request::Lookup { qpn: 0xab_cdef },
        ] {
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
        assert!(Request::decode(&[PUBLISH, 1, 2]).is_err(), "short publish");
        for (ps, ip, port, afonly) in [
            (0x0106, "0.0.0.0", 0, true),
            (0x013F, "fe80::7", 65535, false),
        ] {
            let ip = ip.parse().unwrap();
            for r in [
                Request::Reserve {
                    ps,
                    ip,
                    port,
                    afonly,
                },
                Request::Listen { ps, ip, port },
                Request::Release { ps, ip, port },
            ] {
                let bytes = r.encode();
                assert_eq!(Request::decode(&bytes).unwrap(), r);
                // Every cut or extended record is refused, never misread.
                for cut in 0..bytes.len() {
                    assert!(Request::decode(&bytes[..cut]).is_err(), "{r:?} cut {cut}");
                }
                let mut long = bytes.clone();
                long.push(0);
                assert!(Request::decode(&long).is_err());
            }
        }
        let mut odd = Request::Reserve {
            ps: 0x0106,
            ip: "::".parse().unwrap(),
            port: 1,
            afonly: true,
        }
        .encode();
        *odd.last_mut().unwrap() = 2;
        assert!(Request::decode(&odd).is_err(), "afonly is 0 or 1");
        let requesting = Request::Requesting {
            peer: "fd00::2".parse().unwrap(),
            comm_id: 0x0030_0007,
            ca_guid: 0x0200_0000_0000_0042,
            tid: u64::MAX - 1,
        };
        let replying = Request::Replying {
            peer: "10.0.0.2".parse().unwrap(),
            comm_id: 0x0030_0008,
            remote_comm_id: 0x1234_5678,
        };
        let disconnecting = Request::Disconnecting {
            peer: "10.0.0.3".parse().unwrap(),
            comm_id: 0x0030_0009,
            remote_comm_id: 0x8765_4321,
            message: Ending::Rej,
        };
        for r in [requesting, replying, disconnecting] {
            let bytes = r.encode();
            assert_eq!(Request::decode(&bytes).unwrap(), r);
            for cut in 0..bytes.len() {
                assert!(Request::decode(&bytes[..cut]).is_err(), "{r:?} cut {cut}");
            }
            let mut long = bytes.clone();
            long.push(0);
            assert!(Request::decode(&long).is_err(), "{r:?} extended");
        }
        let replies = [
            Reply::Block(4095),
            Reply::Refused(98, "in use".into()),
            Reply::Done,
            Reply::Peer {
                pid: 4_194_304,
                region_bytes: 1 << 40,
            },
            Reply::Port(32768),
        ];
        for r in replies {
            assert_eq!(Reply::decode(&r.encode()).unwrap(), r);
        }
        let mut stale = Request::Hello {
            ip: "::1".parse().unwrap(),
        }
        .encode();
        stale[1] = 99;
        assert!(Request::decode(&stale)
            .unwrap_err()
            .to_string()
            .contains("version 99"));
    }

    #[test]
    fn frames_round_trip_and_wait_for_their_last_byte() {
        let h = FrameHeader {
            src: "10.0.0.1:50000".parse().unwrap(),
            dst: "[::1]:4791".parse().unwrap(),
            segment: 1024,
            class: 0x48,
        };
        let mut b = Vec::new();
        h.encode(3, &mut b);
        b.extend_from_slice(&[1, 2, 3]);
        b.push(9); // the next frame's first byte
        for cut in 0..b.len() - 1 {
            assert_eq!(
                FrameHeader::decode(&b[..cut]).unwrap(),
                None,
                "cut at {cut}"
            );
        }
        let (got, packets, used) = FrameHeader::decode(&b).unwrap().unwrap();
        assert_eq!((got, packets, used), (h, &[1u8, 2, 3][..], b.len() - 1));
    }
}
