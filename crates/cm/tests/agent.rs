//! Two rdma_cm agents (two processes' worth) connected through an
//! in-memory QP1, driven with the very command buffers librdmacm writes
//! (docs/rdma-cm.md, section 2): every connection sequence and error case
//! librdmacm users meet, checked on the events and QP attributes each
//! side gets.

use softverbs_cm::abi::{self, cmd, event};
use softverbs_cm::{Agent, Device, PortSpace, Reply};
use softverbs_wire::cm::{CmMessage, CmMra, CmRej, MessageKind};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

const PS_TCP: u16 = 0x0106;
const PS_IB: u16 = 0x013F;
const EADDRINUSE: i32 = 98;
const EADDRNOTAVAIL: i32 = 99;
const EINVAL: i32 = 22;
const ENOENT: i32 = 2;
const EBADF: i32 = 9;

/// The host's port space, as the daemon keeps it, and its routes.
#[derive(Default)]
struct Ports {
    held: HashMap<(u16, u16), IpAddr>,
    /// Wildcard reservations refused (another process took the port).
    wildcard_taken: bool,
    /// Every reservation refused (other processes took the port
    /// everywhere).
    every_port_taken: bool,
    listening: Vec<(u16, u16)>,
    next: u16,
    /// Destinations the route lookup refuses, with its errno.
    no_route: Vec<(IpAddr, i32)>,
    /// What the daemon was told of the CM messages sent.
    told: Vec<Told>,
    /// The source the host's routing picks for a destination.
    sources: Vec<(IpAddr, IpAddr)>,
    /// Next hops whose link-layer address the host does not know, and
    /// how many times each was asked for.
    unknown_hops: Vec<(IpAddr, u32)>,
}

/// What the agent tells the daemon of a REQ or REP it sends.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Told {
    /// From, to, comm ID, CA GUID, transaction.
    Requesting(IpAddr, IpAddr, u32, u64, u64),
    /// From, to, comm ID, remote comm ID.
    Replying(IpAddr, IpAddr, u32, u32),
}

impl PortSpace for Ports {
    fn reserve(&mut self, ps: u16, ip: IpAddr, port: u16, _: bool) -> Result<u16, i32> {
        let port = if port == 0 {
            self.next += 1;
            40000 + self.next
        } else {
            port
        };
        if self.held.contains_key(&(ps, port)) {
            return Err(EADDRINUSE);
        }
        if self.every_port_taken {
            return Err(EADDRINUSE);
        }
        if self.wildcard_taken && ip.is_unspecified() {
            return Err(EADDRNOTAVAIL);
        }
        self.held.insert((ps, port), ip);
        Ok(port)
    }
    fn listen(&mut self, ps: u16, _: IpAddr, port: u16) -> Result<(), i32> {
        self.listening.push((ps, port));
        Ok(())
    }
    fn release(&mut self, ps: u16, _: IpAddr, port: u16) {
        self.held.remove(&(ps, port));
        self.listening.retain(|l| *l != (ps, port));
    }
    fn route(&mut self, _: IpAddr, to: IpAddr) -> Result<(), i32> {
        match self.no_route.iter().find(|(ip, _)| *ip == to) {
            Some(&(_, errno)) => Err(errno),
            None => Ok(()),
        }
    }
    fn source_for(&mut self, to: IpAddr) -> Option<IpAddr> {
        self.sources
            .iter()
            .find(|(dst, _)| *dst == to)
            .map(|&(_, src)| src)
    }
    fn next_hop_known(&mut self, _: IpAddr, to: IpAddr) -> bool {
        match self.unknown_hops.iter_mut().find(|(hop, _)| *hop == to) {
            Some((_, asked)) => {
                *asked += 1;
                false
            }
            None => true,
        }
    }
    fn requesting(&mut self, from: IpAddr, to: IpAddr, comm_id: u32, ca_guid: u64, tid: u64) {
        let told = Told::Requesting(from, to, comm_id, ca_guid, tid);
        self.told.push(told);
    }
    fn replying(&mut self, from: IpAddr, to: IpAddr, comm_id: u32, remote_comm_id: u32) {
        let told = Told::Replying(from, to, comm_id, remote_comm_id);
        self.told.push(told);
    }
}

/// One process's rdma_cm on its own device, with one channel (fd 3).
struct Side {
    agent: Agent,
    ip: IpAddr,
    ports: Ports,
    now: u64,
}

const CH: i32 = 3;

impl Side {
    fn new(ip: &str, block: u16) -> Side {
        Side::with_mtu(ip, block, 3)
    }

    /// A side whose device has path MTU `mtu` (an `ibv_mtu`).
    fn with_mtu(ip: &str, block: u16, mtu: u8) -> Side {
        let ip: IpAddr = ip.parse().unwrap();
        let dev = Device {
            node_guid: [0x02, 0, 0, 0, 0, 0, 0, block as u8],
            ip,
            comm_block: block,
            path_mtu: mtu,
        };
        let mut agent = Agent::new(vec![dev], u64::from(block));
        agent.open_channel(CH);
        Side {
            agent,
            ip,
            ports: Ports::default(),
            now: 0,
        }
    }

    /// Runs the agent's timers due at `now`.
    fn tick(&mut self) {
        self.agent.handle_timeout(self.now, &mut self.ports);
    }

    fn run(&mut self, buf: &[u8]) -> Result<Reply, i32> {
        self.agent.command(self.now, CH, buf, &mut self.ports)
    }

    fn ok(&mut self, buf: &[u8]) -> Vec<u8> {
        match self.run(buf).expect("command fails") {
            Reply::Respond { bytes, .. } => bytes,
            Reply::Done => Vec::new(),
            Reply::NoEvent => panic!("no event"),
        }
    }

    fn create(&mut self, uid: u64) -> u32 {
        self.create_in(uid, PS_TCP)
    }

    fn create_in(&mut self, uid: u64, ps: u16) -> u32 {
        let mut b = cmd_buf(cmd::CREATE_ID, 32, 4);
        put64(&mut b, 8, uid);
        put64(&mut b, 16, 0x1000);
        put16(&mut b, 24, ps);
        u32::from_ne_bytes(self.ok(&b)[..4].try_into().unwrap())
    }

    fn bind(&mut self, id: u32, addr: &str) -> Result<Reply, i32> {
        let mut b = cmd_buf(cmd::BIND_IP, 48, 0);
        abi::put_sockaddr(&mut b[16..44], addr.parse().unwrap());
        put32(&mut b, 44, id);
        self.run(&b)
    }

    fn listen(&mut self, id: u32) {
        let mut b = cmd_buf(cmd::LISTEN, 16, 0);
        put32(&mut b, 8, id);
        put32(&mut b, 12, 10);
        self.ok(&b);
    }

    fn resolve(&mut self, id: u32, dst: SocketAddr) {
        let mut b = cmd_buf(cmd::RESOLVE_IP, 72, 0);
        abi::put_sockaddr(&mut b[36..64], dst);
        put32(&mut b, 64, id);
        put32(&mut b, 68, 2000);
        self.ok(&b);
        assert_eq!(self.event().event, event::ADDR_RESOLVED);
        let mut b = cmd_buf(cmd::RESOLVE_ROUTE, 16, 0);
        put32(&mut b, 8, id);
        put32(&mut b, 12, 2000);
        self.ok(&b);
        assert_eq!(self.event().event, event::ROUTE_RESOLVED);
    }

    fn connect(&mut self, id: u32, qpn: u32, data: &[u8]) {
        let mut b = cmd_buf(cmd::CONNECT, 296, 0);
        conn_param(&mut b[8..280], qpn, data);
        put32(&mut b, 280, id);
        self.ok(&b);
    }

    fn accept(
        &mut self,
        id: u32,
        uid: u64,
        qpn: u32,
        data: &[u8],
        valid: bool,
    ) -> Result<Reply, i32> {
        let mut b = cmd_buf(cmd::ACCEPT, 304, 0);
        put64(&mut b, 8, uid);
        conn_param(&mut b[16..288], qpn, data);
        b[16 + 271] = u8::from(valid);
        put32(&mut b, 288, id);
        self.run(&b)
    }

    fn simple(&mut self, command: u32, id: u32) -> Result<Reply, i32> {
        let mut b = cmd_buf(command, 16, 0);
        put32(&mut b, 8, id);
        self.run(&b)
    }

    fn qp_attr(&mut self, id: u32, state: u32) -> Vec<u8> {
        let mut b = cmd_buf(cmd::INIT_QP_ATTR, 24, 144);
        put64(&mut b, 8, 0x2000);
        put32(&mut b, 16, id);
        put32(&mut b, 20, state);
        self.ok(&b)
    }

    fn try_event(&mut self) -> Option<Ev> {
        let mut b = cmd_buf(cmd::GET_EVENT, 16, 336);
        put64(&mut b, 8, 0x3000);
        match self.run(&b).unwrap() {
            Reply::Respond { addr, bytes } => {
                assert_eq!((addr, bytes.len()), (0x3000, 336));
                Some(Ev::decode(&bytes))
            }
            Reply::NoEvent => None,
            Reply::Done => panic!("GET_EVENT answered nothing"),
        }
    }

    fn event(&mut self) -> Ev {
        self.try_event().expect("an event")
    }

    /// The next event's bytes as GET_EVENT writes them (a UD id's
    /// `param.ud` among them, which [`Ev`] does not read).
    fn raw_event(&mut self) -> Vec<u8> {
        let mut g = cmd_buf(cmd::GET_EVENT, 16, 336);
        put64(&mut g, 8, 1);
        let Ok(Reply::Respond { bytes, .. }) = self.run(&g) else {
            panic!("no event");
        };
        bytes
    }
}

#[derive(Debug)]
struct Ev {
    uid: u64,
    id: u32,
    event: u32,
    status: i32,
    qp_num: u32,
    private_data: Vec<u8>,
    responder_resources: u8,
    initiator_depth: u8,
}

impl Ev {
    fn decode(b: &[u8]) -> Ev {
        let len = usize::from(b[284]);
        Ev {
            uid: u64::from_ne_bytes(b[0..8].try_into().unwrap()),
            id: u32::from_ne_bytes(b[8..12].try_into().unwrap()),
            event: u32::from_ne_bytes(b[12..16].try_into().unwrap()),
            status: i32::from_ne_bytes(b[16..20].try_into().unwrap()),
            qp_num: u32::from_ne_bytes(b[20..24].try_into().unwrap()),
            private_data: b[28..28 + len].to_vec(),
            responder_resources: b[286],
            initiator_depth: b[287],
        }
    }
}

fn cmd_buf(command: u32, len: usize, out: u16) -> Vec<u8> {
    let mut b = vec![0u8; len];
    put32(&mut b, 0, command);
    put16(&mut b, 4, (len - 8) as u16);
    put16(&mut b, 6, out);
    b
}

fn conn_param(p: &mut [u8], qpn: u32, data: &[u8]) {
    put32(p, 0, qpn);
    p[8..8 + data.len()].copy_from_slice(data);
    p[264] = data.len() as u8;
    p[266] = 4; // responder resources
    p[267] = 2; // initiator depth
    p[269] = 7;
    p[270] = 6;
    p[271] = 1;
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_ne_bytes());
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}
fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}
fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

/// Carries every MAD either side sent to the other; returns how many.
fn exchange(a: &mut Side, b: &mut Side) -> usize {
    let mut n = 0;
    loop {
        let mut moved = false;
        while let Some(m) = a.agent.poll_mad() {
            assert_eq!((m.src, m.dst), (a.ip, b.ip));
            b.agent.handle_mad(b.now, m.src, m.dst, &m.mad);
            moved = true;
            n += 1;
        }
        while let Some(m) = b.agent.poll_mad() {
            assert_eq!((m.src, m.dst), (b.ip, a.ip));
            a.agent.handle_mad(a.now, m.src, m.dst, &m.mad);
            moved = true;
            n += 1;
        }
        if !moved {
            return n;
        }
    }
}

const RTR: u32 = 2;
const RTS: u32 = 3;

/// `server` (at 10.0.0.2) listening on port 7471 and `client` (at
/// 10.0.0.1) whose REQ to it is queued, not yet delivered; returns
/// (client, server, client id).
fn connecting(mut server: Side, mut client: Side, data: &[u8]) -> (Side, Side, u32) {
    let listener = server.create(100);
    server.bind(listener, "0.0.0.0:7471").unwrap();
    server.listen(listener);
    let id = client.create(200);
    client.resolve(id, "10.0.0.2:7471".parse().unwrap());
    client.connect(id, 0x111, data);
    (client, server, id)
}

/// As [`connecting`], the REQ delivered; returns (client, server, client
/// id, the server's new id).
fn requested_between(server: Side, client: Side, data: &[u8]) -> (Side, Side, u32, u32) {
    let (mut client, mut server, id) = connecting(server, client, data);
    assert_eq!(exchange(&mut client, &mut server), 1, "one REQ");
    let req = server.event();
    assert_eq!((req.event, req.uid), (event::CONNECT_REQUEST, 100));
    (client, server, id, req.id)
}

/// A listening server on 10.0.0.2:7471 and a client that sent a REQ to
/// it; returns (client, server, client id, the server's new id).
fn requested(data: &[u8]) -> (Side, Side, u32, u32) {
    let server = Side::new("10.0.0.2", 0x20);
    requested_between(server, Side::new("10.0.0.1", 0x10), data)
}

/// INIT_QP_ATTR's answer for `id` in `state`: the mask and the access
/// flags, or the errno.
fn qp_attr_mask(side: &mut Side, id: u32, state: u32) -> Result<(u32, u32), i32> {
    let mut b = cmd_buf(cmd::INIT_QP_ATTR, 24, 144);
    put64(&mut b, 8, 0x2000);
    put32(&mut b, 16, id);
    put32(&mut b, 20, state);
    match side.run(&b)? {
        Reply::Respond { bytes, .. } => Ok((get32(&bytes, 0), get32(&bytes, 36))),
        other => panic!("INIT_QP_ATTR answered {other:?}"),
    }
}

/// Rule (the kernel's `rdma_init_qp_attr`): an id with no CM id yet (no
/// REQ sent or received) gets its QP's INIT attributes, no access
/// granted, whatever state is asked up to ERR (`cma_ib_init_qp_attr`);
/// a listening id, which has one, gets EINVAL, as an id going down
/// does for every state (`ib_cm_init_qp_attr` answers only a connection
/// being made or made); a state past ERR is EINVAL.
#[test]
fn qp_attributes_follow_whether_the_id_has_a_cm_id() {
    let init = 1 | 8 | 16 | 32; // STATE, ACCESS_FLAGS, PKEY_INDEX, PORT
    let mut client = Side::new("10.0.0.1", 0x10);
    let id = client.create(200);
    client.resolve(id, "10.0.0.2:7471".parse().unwrap());
    for state in [0, 1, 2, 3, 4, 5, 6] {
        assert_eq!(
            qp_attr_mask(&mut client, id, state),
            Ok((init, 0)),
            "{state}"
        );
    }
    assert_eq!(qp_attr_mask(&mut client, id, 7), Err(EINVAL));
    let mut server = Side::new("10.0.0.2", 0x20);
    let listener = server.create(100);
    server.bind(listener, "0.0.0.0:7471").unwrap();
    server.listen(listener);
    assert_eq!(qp_attr_mask(&mut server, listener, 1), Err(EINVAL));
    let (mut client, mut server, cid, sid) = established();
    let (mask, access) = qp_attr_mask(&mut client, cid, 1).unwrap();
    // REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC (responder resources).
    assert_eq!(
        (mask, access),
        (init, 2 | 4 | 8),
        "a connection grants remote access"
    );
    assert!(qp_attr_mask(&mut server, sid, 3).is_ok());
    client.simple(cmd::DISCONNECT, cid).unwrap();
    for state in [1, 2, 3] {
        assert_eq!(
            qp_attr_mask(&mut client, cid, state),
            Err(EINVAL),
            "{state}"
        );
    }
    assert_eq!(qp_attr_mask(&mut client, cid, 0), Err(EINVAL), "RESET");
    exchange(&mut client, &mut server);
}

/// The client's new id `uid` requests a connection to the server's
/// listener from QP `qpn`, the MADs exchanged.
fn another_request(client: &mut Side, server: &mut Side, uid: u64, qpn: u32) {
    let id = client.create(uid);
    client.resolve(id, "10.0.0.2:7471".parse().unwrap());
    client.connect(id, qpn, b"");
    exchange(client, server);
}

/// Rule (the kernel's `cm_match_req`): a REQ from a QP that a live
/// connection already has as its peer (same CA GUID and QP number) is
/// rejected as a stale connection (10) before any listener hears of it,
/// and the established connection is ended with a DREQ; once that one is
/// in timewait, the QP may connect again.
#[test]
fn a_req_from_a_qp_already_connected_is_rejected_as_stale() {
    let (mut client, mut server, cid, sid) = established();
    another_request(&mut client, &mut server, 201, 0x111);
    let rej = client.event();
    assert_eq!((rej.event, rej.status, rej.uid), (event::REJECTED, 10, 201));
    let old = client.event();
    assert_eq!(
        (old.event, old.id),
        (event::DISCONNECTED, cid),
        "a DREQ ended it"
    );
    assert!(server.try_event().is_none(), "no CONNECT_REQUEST");
    client.simple(cmd::DISCONNECT, cid).unwrap();
    exchange(&mut client, &mut server);
    let ended = server.event();
    assert_eq!((ended.event, ended.id), (event::DISCONNECTED, sid));
    another_request(&mut client, &mut server, 202, 0x111);
    assert_eq!(
        server.event().event,
        event::CONNECT_REQUEST,
        "timewait: not stale"
    );
}

/// Rule (the kernel's `cm_rep_handler`): a REP from a QP that a live
/// connection already has as its peer (a server that accepted twice with
/// one QP) is rejected as stale (10): the server's new connection hears
/// REJECTED, the client's id no CONNECT_RESPONSE (its REQ goes unanswered).
#[test]
fn a_rep_from_a_qp_already_connected_is_rejected_as_stale() {
    let (mut client, mut server, _, _) = established();
    another_request(&mut client, &mut server, 201, 0x112);
    let req = server.event();
    assert_eq!(req.event, event::CONNECT_REQUEST);
    server.accept(req.id, 301, 0x222, &[], true).unwrap();
    exchange(&mut client, &mut server);
    let rej = server.event();
    assert_eq!(
        (rej.event, rej.status, rej.id),
        (event::REJECTED, 10, req.id)
    );
    assert!(client.try_event().is_none(), "no CONNECT_RESPONSE");
}

/// Rule (the kernel's `cm_init_qp_rtr_attr` asks the connection's state,
/// not its QP number): a REQ naming QP 0 is accepted, the accepting QP
/// pointed at QP 0, and the requester gets the REP.
#[test]
fn a_req_naming_qp_0_is_accepted() {
    let mut server = Side::new("10.0.0.2", 0x20);
    let listener = server.create(100);
    server.bind(listener, "0.0.0.0:7471").unwrap();
    server.listen(listener);
    let mut client = Side::new("10.0.0.1", 0x10);
    let cid = client.create(200);
    client.resolve(cid, "10.0.0.2:7471".parse().unwrap());
    client.connect(cid, 0, &[]);
    assert_eq!(exchange(&mut client, &mut server), 1, "one REQ");
    let sid = server.event().id;
    assert_eq!(get32(&server.qp_attr(sid, RTR), 32), 0, "dest QPN 0");
    server.qp_attr(sid, RTS);
    server.accept(sid, 300, 0x222, &[], true).unwrap();
    exchange(&mut client, &mut server);
    let rep = client.event();
    assert_eq!((rep.event, rep.id), (event::CONNECT_RESPONSE, cid));
}

#[test]
fn connect_accept_establish_and_disconnect() {
    let (mut client, mut server, cid, sid) = requested(b"hello");
    let qp_rtr = server.qp_attr(sid, RTR);
    assert_eq!(get32(&qp_rtr, 32), 0x111, "dest QPN: the client's QP");
    assert_eq!(&qp_rtr[40..56], &abi::gid_of(client.ip), "the client's GID");
    let server_psn = get32(&qp_rtr, 24);
    let qp_rts = server.qp_attr(sid, RTS);
    let client_psn = get32(&qp_rts, 28);
    server.accept(sid, 300, 0x222, b"world", true).unwrap();
    exchange(&mut client, &mut server);

    let rep = client.event();
    assert_eq!(
        (rep.event, rep.uid, rep.id),
        (event::CONNECT_RESPONSE, 200, cid)
    );
    assert_eq!(rep.qp_num, 0x222);
    assert_eq!(&rep.private_data[..5], b"world");
    assert_eq!(rep.private_data.len(), 196, "a REP's whole private data");
    let rtr = client.qp_attr(cid, RTR);
    assert_eq!(get32(&rtr, 32), 0x222);
    assert_eq!(
        get32(&rtr, 24),
        client_psn,
        "rq_psn: the PSN the REQ offered"
    );
    assert_eq!(get32(&client.qp_attr(cid, RTS), 28), server_psn);
    client.accept(cid, 200, 0, &[], false).unwrap();
    assert_eq!(exchange(&mut client, &mut server), 1, "the RTU");
    let est = server.event();
    assert_eq!((est.event, est.uid, est.id), (event::ESTABLISHED, 300, sid));

    client.simple(cmd::DISCONNECT, cid).unwrap();
    exchange(&mut client, &mut server);
    assert_eq!(server.event().event, event::DISCONNECTED);
    server.simple(cmd::DISCONNECT, sid).unwrap();
    exchange(&mut client, &mut server);
    assert_eq!(client.event().event, event::DISCONNECTED);
    for side in [&mut client, &mut server] {
        assert!(side.try_event().is_none(), "time-wait still runs");
        side.now = side.agent.poll_timeout().expect("time-wait ends");
        side.tick();
        assert_eq!(side.event().event, event::TIMEWAIT_EXIT);
    }
}

/// The passive side's QP takes the path MTU the REQ names, which the
/// active side sends with, not its own device's: two devices of one host
/// can differ (127.0.0.1 on lo, 127.0.0.2 on no interface of its own),
/// and a responder refuses FIRST and MIDDLE packets of another size
/// (qperf -cm1 rc_bw failed with IBV_WC_REM_INV_REQ_ERR).
#[test]
fn the_passive_side_takes_the_path_mtu_of_the_request() {
    let server = Side::with_mtu("10.0.0.2", 0x20, 5);
    let client = Side::with_mtu("10.0.0.1", 0x10, 3);
    let (_, mut server, _, sid) = requested_between(server, client, &[]);
    assert_eq!(get32(&server.qp_attr(sid, RTR), 12), 3, "the REQ's 1024");
}

#[test]
fn a_connection_request_carries_the_callers_private_data_and_parameters() {
    let mut server = Side::new("10.0.0.2", 0x20);
    let mut client = Side::new("10.0.0.1", 0x10);
    let l = server.create(1);
    server.bind(l, "10.0.0.2:9").unwrap();
    server.listen(l);
    let id = client.create(2);
    client.resolve(id, "10.0.0.2:9".parse().unwrap());
    client.connect(id, 0xabcde, &[9; 56]);
    exchange(&mut client, &mut server);
    let req = server.event();
    assert_eq!(req.qp_num, 0xabcde);
    assert_eq!(
        req.private_data,
        vec![9; 56],
        "after the 36-byte rdma_cm header"
    );
    assert_eq!(
        (req.responder_resources, req.initiator_depth),
        (2, 4),
        "the peer's initiator depth is what we must answer"
    );
}

#[test]
fn a_listener_that_rejects_sends_its_private_data_back() {
    let (mut client, mut server, _, sid) = requested(b"x");
    let mut b = cmd_buf(cmd::REJECT, 272, 0);
    put32(&mut b, 8, sid);
    b[12] = 3;
    b[16..19].copy_from_slice(b"no!");
    server.ok(&b);
    exchange(&mut client, &mut server);
    let rej = client.event();
    assert_eq!((rej.event, rej.status), (event::REJECTED, 28));
    assert_eq!(&rej.private_data[..3], b"no!");
}

#[test]
fn nobody_listening_is_rejected_with_invalid_service_id() {
    let mut server = Side::new("10.0.0.2", 0x20);
    let mut client = Side::new("10.0.0.1", 0x10);
    let id = client.create(7);
    client.resolve(id, "10.0.0.2:1".parse().unwrap());
    client.connect(id, 5, &[]);
    exchange(&mut client, &mut server);
    let rej = client.event();
    assert_eq!((rej.event, rej.status, rej.uid), (event::REJECTED, 8, 7));
}

/// A REQ whose path names a P_Key the port does not have (its table holds
/// only the default 0xFFFF) is rejected with "invalid GID" before the
/// listener hears of it, as the kernel's CM does; 0x7FFF, the limited
/// member of the same partition, gets in.
#[test]
fn a_request_in_another_partition_is_rejected_unheard() {
    /// Where the REQ's P_Key lies in its MAD (data offset 48).
    const PKEY_AT: usize = softverbs_wire::mad::MAD_HEADER_LEN + 48;
    for (pkey, admitted) in [(0x1234u16, false), (0x7FFF, true)] {
        let (server, client) = (Side::new("10.0.0.2", 0x20), Side::new("10.0.0.1", 0x10));
        let (mut client, mut server, id) = connecting(server, client, b"");
        let mut m = client.agent.poll_mad().expect("the REQ");
        m.mad[PKEY_AT..PKEY_AT + 2].copy_from_slice(&pkey.to_be_bytes());
        server.agent.handle_mad(server.now, m.src, m.dst, &m.mad);
        exchange(&mut client, &mut server);
        if admitted {
            assert_eq!(server.event().event, event::CONNECT_REQUEST);
            continue;
        }
        assert!(server.try_event().is_none(), "the listener heard nothing");
        let rej = client.event();
        assert_eq!((rej.event, rej.status, rej.uid), (event::REJECTED, 12, 200));
        assert_eq!(id, rej.id);
    }
}

/// A destination the host has no route to fails RESOLVE_IP itself with
/// the route lookup's errno, the id bound (the kernel's `rdma_resolve_ip`);
/// one the device's address cannot send to is an ADDR_ERROR. Neither
/// resolves, to time out in connect's retries. Either leaves the id bound
/// as the kernel restores the source it had: to the source the resolve
/// gave, with its device, else to the wildcard with no device, and a later
/// resolve picks the device afresh.
#[test]
fn an_address_without_a_route_does_not_resolve() {
    const ENETUNREACH: i32 = 101;
    let mut client = Side::new("10.0.0.1", 0x10);
    client.ports.no_route = vec![
        ("10.9.9.9".parse().unwrap(), ENETUNREACH),
        ("8.8.8.8".parse().unwrap(), EINVAL),
    ];
    let resolve_ip = |id: u32, dst: &str| {
        let mut b = cmd_buf(cmd::RESOLVE_IP, 72, 0);
        abi::put_sockaddr(&mut b[36..64], dst.parse().unwrap());
        put32(&mut b, 64, id);
        put32(&mut b, 68, 2000);
        b
    };
    let id = client.create(7);
    assert_eq!(client.run(&resolve_ip(id, "10.9.9.9:1")), Err(ENETUNREACH));
    assert!(client.try_event().is_none(), "no event");
    let wildcard: IpAddr = "0.0.0.0".parse().unwrap();
    assert!(
        client.ports.held.values().any(|ip| *ip == wildcard),
        "bound to the wildcard"
    );
    let other = client.create(8);
    client.ok(&resolve_ip(other, "8.8.8.8:1"));
    let e = client.event();
    assert_eq!((e.event, e.status), (event::ADDR_ERROR, -ENETUNREACH));
    let a = query(&mut client, other, 0);
    assert_eq!(be64(&a, 0), 0, "no device");
    let src = abi::parse_sockaddr(&a[16..44]).expect("a source");
    assert_eq!(src.ip(), wildcard);
    assert_ne!(src.port(), 0, "its port reserved");
    client.resolve(other, "10.0.0.9:1".parse().unwrap());
    let a = query(&mut client, other, 0);
    assert_ne!(be64(&a, 0), 0, "the device");
    assert_eq!(
        abi::parse_sockaddr(&a[16..44]),
        Some(SocketAddr::new(client.ip, src.port()))
    );
    client.resolve(id, "10.0.0.9:1".parse().unwrap());
    // From a source given, the id stays bound to it, with its device.
    let from = client.create(10);
    let mut b = resolve_ip(from, "8.8.8.8:1");
    abi::put_sockaddr(&mut b[8..36], SocketAddr::new(client.ip, 7000));
    client.ok(&b);
    let e = client.event();
    assert_eq!((e.event, e.status), (event::ADDR_ERROR, -ENETUNREACH));
    let a = query(&mut client, from, 0);
    assert_ne!(be64(&a, 0), 0, "the device");
    let bound = SocketAddr::new(client.ip, 7000);
    assert_eq!(abi::parse_sockaddr(&a[16..44]), Some(bound));
    // No device of the destination's family: the IPv6 wildcard.
    let v6 = client.create(11);
    client.ok(&resolve_ip(v6, "[2001:db8::1]:1"));
    let e = client.event();
    assert_eq!((e.event, e.status), (event::ADDR_ERROR, -EADDRNOTAVAIL));
    let a = query(&mut client, v6, 0);
    let src = abi::parse_sockaddr(&a[16..44]).expect("a source");
    assert_eq!(src.ip(), "::".parse::<IpAddr>().unwrap());
    // A multicast group, to join, needs no route (mckey -m ff02::31
    // failed with an ADDR_ERROR: a link-local group has none unscoped).
    client
        .ports
        .no_route
        .push(("239.1.2.3".parse().unwrap(), ENETUNREACH));
    let group = client.create(9);
    client.resolve(group, "239.1.2.3:0".parse().unwrap());
}

/// As the kernel's address resolution: ADDR_RESOLVED only once the host
/// knows the next hop's link-layer address, ADDR_ERROR (ETIMEDOUT) if it
/// does not within the resolution's timeout; meanwhile the id is in
/// ADDR_QUERY, where resolving again or resolving the route is EINVAL.
#[test]
fn a_resolution_waits_for_the_next_hop_and_fails_if_it_stays_unknown() {
    const ETIMEDOUT: i32 = 110;
    let mut client = Side::new("10.0.0.1", 0x10);
    let (absent, slow): (IpAddr, IpAddr) =
        ("10.0.0.77".parse().unwrap(), "10.0.0.9".parse().unwrap());
    client.ports.unknown_hops = vec![(absent, 0), (slow, 0)];
    let resolve_ip = |id: u32, dst: IpAddr, timeout_ms: u32| {
        let mut b = cmd_buf(cmd::RESOLVE_IP, 72, 0);
        abi::put_sockaddr(&mut b[36..64], SocketAddr::new(dst, 1));
        put32(&mut b, 64, id);
        put32(&mut b, 68, timeout_ms);
        b
    };
    let id = client.create(7);
    client.ok(&resolve_ip(id, absent, 500));
    assert!(
        client.try_event().is_none(),
        "nothing until the hop is known"
    );
    assert_eq!(client.run(&resolve_ip(id, absent, 500)), Err(EINVAL));
    let mut route = cmd_buf(cmd::RESOLVE_ROUTE, 16, 0);
    put32(&mut route, 8, id);
    put32(&mut route, 12, 2000);
    assert_eq!(client.run(&route), Err(EINVAL));
    let start = client.now;
    let e = loop {
        client.now = client
            .agent
            .poll_timeout()
            .expect("a look at the hop is due");
        client.tick();
        if let Some(e) = client.try_event() {
            break e;
        }
    };
    assert_eq!((e.event, e.status), (event::ADDR_ERROR, -ETIMEDOUT));
    assert_eq!(client.now - start, 500_000_000, "at the timeout");
    assert!(
        client.agent.poll_timeout().is_none(),
        "the id's resolution ended"
    );
    let looks = client.ports.unknown_hops[0].1;
    assert!((5..=30).contains(&looks), "looked {looks} times");
    // Resolved unbound, it goes back to the wildcard, its port kept, with
    // no device (the kernel's `addr_handler` restores the source).
    let wildcard: IpAddr = "0.0.0.0".parse().unwrap();
    let a = query(&mut client, id, 0);
    assert_eq!(be64(&a, 0), 0, "no device");
    let src = abi::parse_sockaddr(&a[16..44]).expect("a source");
    assert_eq!(src.ip(), wildcard);
    let held = held_ports(&client.ports);
    assert_eq!(
        held,
        [(src.port(), wildcard)],
        "the port held on the wildcard"
    );
    // The id may resolve again, as one in ADDR_BOUND; a hop the host
    // learns meanwhile resolves at the next look.
    client.ok(&resolve_ip(id, slow, 2000));
    assert!(client.try_event().is_none());
    client.now = client.agent.poll_timeout().unwrap();
    client.tick();
    assert!(client.try_event().is_none());
    client.ports.unknown_hops.retain(|(hop, _)| *hop != slow);
    client.now = client.agent.poll_timeout().unwrap();
    client.tick();
    assert_eq!(client.event().event, event::ADDR_RESOLVED);
    let a = query(&mut client, id, 0);
    assert_eq!(
        abi::parse_sockaddr(&a[16..44]).map(|s| s.ip()),
        Some(client.ip),
        "bound to the device's address"
    );
    client.ok(&route);
    assert_eq!(client.event().event, event::ROUTE_RESOLVED);
    // A destroyed id's resolution ends with it.
    let other = client.create(8);
    client.ok(&resolve_ip(other, absent, 2000));
    destroy(&mut client, other);
    assert!(client.agent.poll_timeout().is_none());
}

/// An id whose resolution fails cannot go back to the wildcard when
/// another process took its port there meanwhile: it keeps the device's
/// address it was bound to.
#[test]
fn a_failed_resolution_keeps_its_binding_when_the_wildcard_is_taken() {
    let (mut client, id) = failed_resolution(|ports| ports.wildcard_taken = true);
    let a = query(&mut client, id, 0);
    let src = abi::parse_sockaddr(&a[16..44]).expect("a source");
    assert_eq!(src.ip(), client.ip, "still on the device's address");
    let held = held_ports(&client.ports);
    assert_eq!(held, [(src.port(), client.ip)]);
}

/// An id whose resolution fails, and whose port others took both on the
/// wildcard and on the device's address meanwhile, holds no port and
/// no source; a later resolution binds it afresh.
#[test]
fn a_failed_resolution_whose_port_is_taken_everywhere_binds_afresh() {
    let (mut client, id) = failed_resolution(|ports| ports.every_port_taken = true);
    assert!(held_ports(&client.ports).is_empty(), "no port held");
    let a = query(&mut client, id, 0);
    assert_eq!(be64(&a, 0), 0, "no device");
    let src = abi::parse_sockaddr(&a[16..44]);
    assert!(
        src.is_none_or(|s| s.ip().is_unspecified() && s.port() == 0),
        "{src:?}"
    );
    client.ports.every_port_taken = false;
    let reachable = SocketAddr::new("10.0.0.2".parse().unwrap(), 1);
    client.ok(&resolve_ip_cmd(id, reachable, 100));
    assert_eq!(client.event().event, event::ADDR_RESOLVED);
    let a = query(&mut client, id, 0);
    let src = abi::parse_sockaddr(&a[16..44]).expect("a source");
    assert_eq!(src.ip(), client.ip, "bound to the device's address");
    assert_eq!(held_ports(&client.ports), [(src.port(), client.ip)]);
}

/// A device that goes away under a resolution ends it: DEVICE_REMOVAL,
/// and no look at the next hop is left to make.
#[test]
fn a_resolution_ends_when_its_device_goes_away() {
    let mut client = Side::new("10.0.0.1", 0x10);
    let absent: IpAddr = "10.0.0.77".parse().unwrap();
    client.ports.unknown_hops = vec![(absent, 0)];
    let id = client.create(7);
    client.ok(&resolve_ip_cmd(id, SocketAddr::new(absent, 1), 2000));
    assert!(client.agent.poll_timeout().is_some(), "a look is due");
    client.agent.device_removed(client.ip);
    assert_eq!(client.event().event, event::DEVICE_REMOVAL);
    assert!(
        client.agent.poll_timeout().is_none(),
        "nothing left to look at"
    );
}

#[test]
fn an_unanswered_request_is_sent_again_then_unreachable() {
    let mut client = Side::new("10.0.0.1", 0x10);
    let id = client.create(7);
    client.resolve(id, "10.0.0.9:1".parse().unwrap());
    client.connect(id, 5, &[]);
    let first = client.agent.poll_mad().unwrap().mad;
    let mut sent = 1;
    while client.try_event().is_none() {
        client.now = client.agent.poll_timeout().expect("a retry is armed");
        client.tick();
        while let Some(m) = client.agent.poll_mad() {
            assert_eq!(m.mad, first, "the same REQ");
            sent += 1;
        }
        assert!(sent <= 16);
    }
    assert_eq!(sent, 16, "the REQ and 15 retries");
    let mut b = cmd_buf(cmd::GET_EVENT, 16, 336);
    put64(&mut b, 8, 1);
    assert_eq!(client.run(&b), Ok(Reply::NoEvent));
}

/// The passive side resends its REP as the REQ asked (the kernel's
/// `cm_req_handler`): every Local CM Response Timeout of the requester's,
/// Max CM Retries times, then UNREACHABLE. A kernel requester asks for 15
/// retries 4.3 s apart; a REQ asking for 2, 16.8 ms apart, got 15, 6.45 s
/// apart, holding the id for 100 s.
#[test]
fn an_unanswered_rep_is_sent_again_as_the_req_asked() {
    let server = Side::new("10.0.0.2", 0x20);
    let (mut client, mut server, _) = connecting(server, Side::new("10.0.0.1", 0x10), &[]);
    let m = client.agent.poll_mad().unwrap();
    let (header, msg) = CmMessage::parse_mad(&m.mad).unwrap();
    let CmMessage::Req(mut req) = msg else {
        panic!("not a REQ")
    };
    req.max_cm_retries = 2;
    req.local_cm_response_timeout = 12;
    let mut mad = [0u8; 256];
    CmMessage::Req(req)
        .emit_mad(header.tid, 0, &mut mad)
        .unwrap();
    server.agent.handle_mad(server.now, m.src, m.dst, &mad);
    let sid = server.event().id;
    server.accept(sid, 300, 0x222, &[], true).unwrap();
    let start = server.now;
    let mut sent_at = Vec::new();
    while server.try_event().is_none() {
        while let Some(rep) = server.agent.poll_mad() {
            assert!(matches!(
                CmMessage::parse_mad(&rep.mad),
                Ok((_, CmMessage::Rep(_)))
            ));
            sent_at.push(server.now - start);
        }
        server.now = server.agent.poll_timeout().expect("a retry is armed");
        server.tick();
        assert!(sent_at.len() <= 3, "{sent_at:?}");
    }
    let every = 4096 << 12;
    assert_eq!(sent_at, [0, every, 2 * every], "the REP and 2 retries");
}

#[test]
fn the_unreachable_event_says_etimedout() {
    let mut client = Side::new("10.0.0.1", 0x10);
    let id = client.create(7);
    client.resolve(id, "10.0.0.9:1".parse().unwrap());
    client.connect(id, 5, &[]);
    let ev = loop {
        client.now = client.agent.poll_timeout().unwrap();
        client.tick();
        while client.agent.poll_mad().is_some() {}
        if let Some(ev) = client.try_event() {
            break ev;
        }
    };
    assert_eq!((ev.event, ev.status), (event::UNREACHABLE, -110));
}

#[test]
fn a_port_held_elsewhere_is_eaddrinuse_and_destroy_gives_it_back() {
    let mut s = Side::new("10.0.0.2", 0x20);
    let a = s.create(1);
    let b = s.create(2);
    s.bind(a, "10.0.0.2:7000").unwrap();
    assert_eq!(s.bind(b, "10.0.0.2:7000"), Err(EADDRINUSE));
    assert_eq!(s.bind(b, "10.9.9.9:7001"), Err(99), "not a device address");
    let mut d = cmd_buf(cmd::DESTROY_ID, 24, 4);
    put64(&mut d, 8, 0x10);
    put32(&mut d, 16, a);
    assert_eq!(get32(&s.ok(&d), 0), 0, "no event handed out");
    s.bind(b, "10.0.0.2:7000").unwrap();
}

/// BIND (the new command set) of a `sockaddr_ib` with `gid`, service ID
/// and mask.
fn bind_ib(s: &mut Side, id: u32, gid: [u8; 16], sid: u64, mask: u64) -> Result<Reply, i32> {
    let mut b = cmd_buf(cmd::BIND, 144, 0);
    put32(&mut b, 8, id);
    put16(&mut b, 12, 48);
    b[16..64].copy_from_slice(&abi::sockaddr_ib(0, gid, sid, mask));
    s.run(&b)
}

/// A side whose unbound id (returned) failed to resolve a destination
/// whose next hop never answers, `meanwhile` changed the port space
/// while it tried.
fn failed_resolution(meanwhile: impl FnOnce(&mut Ports)) -> (Side, u32) {
    let mut client = Side::new("10.0.0.1", 0x10);
    let absent: IpAddr = "10.0.0.77".parse().unwrap();
    client.ports.unknown_hops = vec![(absent, 0)];
    let id = client.create(7);
    client.ok(&resolve_ip_cmd(id, SocketAddr::new(absent, 1), 100));
    meanwhile(&mut client.ports);
    let failed = loop {
        if let Some(ev) = client.try_event() {
            break ev;
        }
        client.now = client.agent.poll_timeout().expect("a look is due");
        client.tick();
    };
    assert_eq!(failed.event, event::ADDR_ERROR);
    (client, id)
}

/// RESOLVE_IP of id `id` to `dst`, from no source, within `timeout_ms`.
fn resolve_ip_cmd(id: u32, dst: SocketAddr, timeout_ms: u32) -> Vec<u8> {
    let mut b = cmd_buf(cmd::RESOLVE_IP, 72, 0);
    abi::put_sockaddr(&mut b[36..64], dst);
    put32(&mut b, 64, id);
    put32(&mut b, 68, timeout_ms);
    b
}

/// The ports held, and on which address.
fn held_ports(ports: &Ports) -> Vec<(u16, IpAddr)> {
    ports.held.iter().map(|(&(_, p), &ip)| (p, ip)).collect()
}

/// QUERY with `option` (0 ADDR, 1 PATH, 2 GID) and a response buffer of
/// librdmacm's size.
fn query(s: &mut Side, id: u32, option: u32) -> Vec<u8> {
    let out = if option == 1 { 440 } else { 280 };
    let mut b = cmd_buf(cmd::QUERY, 24, out);
    put64(&mut b, 8, 0x4000);
    put32(&mut b, 16, id);
    put32(&mut b, 20, option);
    s.ok(&b)
}

fn get16(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

/// The `(size, family)` of the sockaddr a QUERY answer holds at `at`.
fn addr_at(r: &[u8], size_at: usize, at: usize) -> (u16, u16) {
    (get16(r, size_at), get16(r, at))
}

#[test]
fn a_loopback_address_no_device_has_binds_with_no_device_as_in_the_kernel() {
    let mut s = Side::new("10.0.0.2", 0x20);
    let lo = s.create(1);
    s.bind(lo, "127.0.0.1:0").unwrap();
    let a = query(&mut s, lo, 0);
    assert_eq!(be64(&a, 0), 0, "no device");
    assert_eq!(
        abi::parse_sockaddr(&a[16..44]).map(|a| a.ip()),
        Some("127.0.0.1".parse().unwrap())
    );
    s.listen(lo);
    // Nothing routes from there: resolving is ADDR_ERROR.
    let from_lo = s.create(4);
    s.bind(from_lo, "127.0.0.1:0").unwrap();
    let mut r = cmd_buf(cmd::RESOLVE_IP, 72, 0);
    abi::put_sockaddr(&mut r[36..64], "10.0.0.1:7471".parse().unwrap());
    put32(&mut r, 64, from_lo);
    s.ok(&r);
    let ev = s.event();
    assert_eq!((ev.event, ev.status), (event::ADDR_ERROR, -99));
    let v6 = s.create(2);
    s.bind(v6, "[::1]:0").unwrap();
    let other = s.create(3);
    assert_eq!(
        s.bind(other, "10.9.9.9:0"),
        Err(99),
        "EADDRNOTAVAIL elsewhere"
    );
}

#[test]
fn the_af_ib_probe_binds_the_unspecified_gid_in_the_tcp_port_space() {
    let mut s = Side::new("10.0.0.2", 0x20);
    let id = s.create_in(1, PS_IB);
    let (sid, mask) = (0x0106_0000, 0xFFFF_FFFF_FFFF_0000);
    bind_ib(&mut s, id, [0; 16], sid, mask).unwrap();
    let r = query(&mut s, id, 0);
    assert_eq!(r.len(), 280);
    assert_eq!(be64(&r, 0), 0, "no device yet");
    assert_eq!(addr_at(&r, 12, 16), (48, 27), "the source is AF_IB");
    assert_eq!(addr_at(&r, 14, 144), (0, 0), "no destination");
    let port = s
        .ports
        .held
        .keys()
        .find(|k| k.0 == PS_TCP)
        .expect("a TCP port")
        .1;
    assert_eq!(
        be64(&r, 16 + 24),
        0x0106_0000 | u64::from(port),
        "the port chosen"
    );
    assert_eq!(be64(&r, 16 + 32), u64::MAX);
    let g = query(&mut s, id, 2);
    assert_eq!(
        &g[16..64],
        &r[16..64],
        "GID: the bound sockaddr_ib as it is"
    );
    assert_eq!(addr_at(&g, 14, 144), (48, 27));
    assert_eq!(get32(&query(&mut s, id, 1), 0), 0, "no path");
    assert_eq!(s.simple(cmd::LISTEN, id), Err(95), "no AF_IB listeners");
    let mut d = cmd_buf(cmd::DESTROY_ID, 24, 4);
    put32(&mut d, 16, id);
    s.ok(&d);
    assert!(s.ports.held.is_empty(), "destroy gives the port back");
}

#[test]
fn af_ib_addresses_of_devices_and_bad_sizes_are_refused_as_on_roce() {
    let mut s = Side::new("10.0.0.2", 0x20);
    let id = s.create_in(1, PS_IB);
    let gid = abi::gid_of(s.ip);
    assert_eq!(bind_ib(&mut s, id, gid, 0x0106_0000, 0), Err(19), "ENODEV");
    let udp = s.create_in(2, PS_UDP);
    assert_eq!(
        bind_ib(&mut s, udp, [0; 16], 0x0106_0000, 0xFFFF_FFFF_FFFF_0000),
        Err(93),
        "a UDP id cannot take the TCP port space"
    );
    let mut b = cmd_buf(cmd::BIND, 144, 0);
    put32(&mut b, 8, id);
    put16(&mut b, 12, 28);
    abi::put_sockaddr(&mut b[16..44], "10.0.0.2:0".parse().unwrap());
    assert_eq!(s.run(&b), Err(22), "an IPv4 address with an IPv6 size");
    put16(&mut b, 12, 16);
    s.run(&b).unwrap();
    // RESOLVE_ADDR to an AF_IB destination: no RoCE port resolves one.
    let fresh = s.create(3);
    let mut r = cmd_buf(cmd::RESOLVE_ADDR, 280, 0);
    put32(&mut r, 8, fresh);
    put16(&mut r, 18, 48);
    r[152..200].copy_from_slice(&abi::sockaddr_ib(0xFFFF, [1; 16], 0, 0));
    assert_eq!(s.run(&r), Err(19), "ENODEV");
    assert_eq!(
        addr_at(&query(&mut s, fresh, 0), 12, 16),
        (48, 27),
        "bound on the way"
    );
    put32(&mut r, 8, id);
    assert_eq!(s.run(&r), Err(22), "an IPv4 id, an AF_IB destination");
    let ip_src = s.create(4);
    abi::put_sockaddr(&mut r[24..40], "10.0.0.2:0".parse().unwrap());
    put16(&mut r, 16, 16);
    put32(&mut r, 8, ip_src);
    assert_eq!(s.run(&r), Err(22), "an IPv4 source, an AF_IB destination");
    let bound = query(&mut s, ip_src, 0);
    assert_eq!(addr_at(&bound, 12, 16), (16, 2), "bound to it all the same");
}

/// RESOLVE_ADDR with an AF_IB source: one with a GID binds as the kernel
/// binds it, and no RoCE port has it (ENODEV); one for an IP destination
/// is of another family (EINVAL).
#[test]
fn af_ib_sources_are_refused_as_on_roce() {
    let mut s = Side::new("10.0.0.2", 0x20);
    let mut r = cmd_buf(cmd::RESOLVE_ADDR, 280, 0);
    put16(&mut r, 16, 48);
    let with_gid = s.create(1);
    put32(&mut r, 8, with_gid);
    r[24..72].copy_from_slice(&abi::sockaddr_ib(0xFFFF, abi::gid_of(s.ip), 0, 0));
    put16(&mut r, 18, 48);
    r[152..200].copy_from_slice(&abi::sockaddr_ib(0xFFFF, [1; 16], 0, 0));
    assert_eq!(s.run(&r), Err(19), "ENODEV");
    assert_eq!(
        addr_at(&query(&mut s, with_gid, 0), 12, 16),
        (0, 0),
        "the GID was not bound"
    );
    let to_ip = s.create(2);
    put32(&mut r, 8, to_ip);
    r[24..72].copy_from_slice(&abi::sockaddr_ib(0, [0; 16], 0, 0));
    r[152..200].fill(0);
    put16(&mut r, 18, 16);
    abi::put_sockaddr(&mut r[152..168], "10.0.0.1:7471".parse().unwrap());
    assert_eq!(s.run(&r), Err(22), "an AF_IB source, an IPv4 destination");
}

/// RESOLVE_ADDR (the new command set) of `dst`, then RESOLVE_ROUTE.
fn resolve_addr(s: &mut Side, id: u32, dst: SocketAddr) {
    let mut b = cmd_buf(cmd::RESOLVE_ADDR, 280, 0);
    put32(&mut b, 8, id);
    put32(&mut b, 12, 2000);
    put16(&mut b, 18, abi::sockaddr_len(dst) as u16);
    abi::put_sockaddr(&mut b[152..180], dst);
    s.ok(&b);
    assert_eq!(s.event().event, event::ADDR_RESOLVED);
    let mut b = cmd_buf(cmd::RESOLVE_ROUTE, 16, 0);
    put32(&mut b, 8, id);
    put32(&mut b, 12, 2000);
    s.ok(&b);
    assert_eq!(s.event().event, event::ROUTE_RESOLVED);
}

/// The two addresses' GIDs, the service IDs and the P_Key of a GID
/// answer, and of a PATH answer's one path.
fn check_gids_and_path(s: &mut Side, id: u32, peer: SocketAddr) {
    let local = s.ip;
    let g = query(s, id, 2);
    assert_eq!(addr_at(&g, 12, 16), (48, 27));
    assert_eq!(&g[16 + 8..16 + 24], &abi::gid_of(local));
    assert_eq!(&g[144 + 8..144 + 24], &abi::gid_of(peer.ip()));
    assert_eq!(&g[144 + 2..144 + 4], &[0xFF, 0xFF], "P_Key");
    assert_eq!(be64(&g, 144 + 24), 0x0106_0000 | u64::from(peer.port()));
    let p = query(s, id, 1);
    assert_eq!((get32(&p, 0), p.len()), (1, 8 + 72), "one path");
    let rec = &p[16..80];
    assert_eq!(get32(&p, 8), 0x2B, "GMP, primary, bidirectional");
    assert_eq!(&rec[8..24], &abi::gid_of(peer.ip()), "DGID");
    assert_eq!(&rec[24..40], &abi::gid_of(local), "SGID");
    assert_eq!(
        u32::from_be_bytes(rec[44..48].try_into().unwrap()),
        64,
        "hop limit"
    );
    assert_eq!(rec[49], 0x81, "reversible, one path");
    assert_eq!(&rec[50..52], &[0xFF, 0xFF], "P_Key");
    assert_eq!(rec[54] & 0x3F, 3, "the device's MTU");
}

#[test]
fn a_connection_over_the_new_commands_answers_every_query() {
    let mut server = Side::new("10.0.0.2", 0x20);
    let mut client = Side::new("10.0.0.1", 0x10);
    let listener = server.create(100);
    let mut b = cmd_buf(cmd::BIND, 144, 0);
    put32(&mut b, 8, listener);
    put16(&mut b, 12, 16);
    abi::put_sockaddr(&mut b[16..32], "0.0.0.0:7471".parse().unwrap());
    server.ok(&b);
    server.listen(listener);
    let l = query(&mut server, listener, 0);
    assert_eq!(addr_at(&l, 12, 16), (16, 2));
    assert_eq!(
        &l[16 + 2..16 + 4],
        &7471u16.to_be_bytes(),
        "the listener's port"
    );

    let id = client.create(200);
    let server_addr: SocketAddr = "10.0.0.2:7471".parse().unwrap();
    resolve_addr(&mut client, id, server_addr);
    let a = query(&mut client, id, 0);
    assert_eq!(
        &a[0..8],
        &[0x02, 0, 0, 0, 0, 0, 0, 0x10],
        "the device's GUID"
    );
    assert_eq!((a[8], &a[10..12]), (1, &[0xFF, 0xFF][..]), "port 1, P_Key");
    assert_eq!(get32(&a, 272), u32::MAX, "no kernel device index");
    assert_eq!(addr_at(&a, 12, 16), (16, 2));
    assert_eq!(abi::parse_sockaddr(&a[144..172]), Some(server_addr));
    check_gids_and_path(&mut client, id, server_addr);

    client.connect(id, 0x111, b"hi");
    exchange(&mut client, &mut server);
    let req = server.event();
    assert_eq!(req.event, event::CONNECT_REQUEST);
    let r = query(&mut server, req.id, 0);
    assert_eq!(abi::parse_sockaddr(&r[16..44]), Some(server_addr));
    let peer = abi::parse_sockaddr(&r[144..172]).expect("the peer's address");
    assert_eq!(peer.ip(), client.ip);
    check_gids_and_path(&mut server, req.id, peer);
    let mut small = cmd_buf(cmd::QUERY, 24, 200);
    put32(&mut small, 16, req.id);
    assert_eq!(server.run(&small), Err(28), "ENOSPC");
    put32(&mut small, 20, 7);
    put16(&mut small, 6, 280);
    assert_eq!(server.run(&small), Err(38), "no such option");
}

#[test]
fn get_event_needs_room_and_destroy_counts_what_was_handed_out() {
    let (mut client, _server, cid, _) = requested(b"");
    let mut short = cmd_buf(cmd::GET_EVENT, 16, 300);
    put64(&mut short, 8, 1);
    assert_eq!(client.run(&short), Err(28), "ENOSPC");
    let mut d = cmd_buf(cmd::DESTROY_ID, 24, 4);
    put64(&mut d, 8, 0x10);
    put32(&mut d, 16, cid);
    assert_eq!(
        get32(&client.ok(&d), 0),
        2,
        "ADDR_RESOLVED and ROUTE_RESOLVED"
    );
}

#[test]
fn a_destroyed_connecting_id_rejects_and_the_peer_hears_of_it() {
    let (mut client, mut server, _, sid) = requested(b"");
    let mut d = cmd_buf(cmd::DESTROY_ID, 24, 4);
    put64(&mut d, 8, 0x10);
    put32(&mut d, 16, sid);
    server.ok(&d);
    exchange(&mut client, &mut server);
    let rej = client.event();
    assert_eq!((rej.event, rej.status), (event::REJECTED, 28));
}

/// Destroys `id` on `side`, as rdma_destroy_id does.
fn destroy(side: &mut Side, id: u32) {
    let mut d = cmd_buf(cmd::DESTROY_ID, 24, 4);
    put64(&mut d, 8, 0x10);
    put32(&mut d, 16, id);
    side.ok(&d);
}

/// The REJ a client destroyed while its REQ is unanswered sends, as the
/// kernel's CM formats it: reason "timeout", its own comm ID only, and
/// its CA GUID (the REQ's) in the ARI; returns it with its transaction ID.
fn abandoning_rej(client: &mut Side, cid: u32) -> (CmRej, u64) {
    destroy(client, cid);
    let m = client.agent.poll_mad().expect("the client's REJ");
    let (header, CmMessage::Rej(rej)) = CmMessage::parse_mad(&m.mad).unwrap() else {
        panic!("not a REJ");
    };
    assert_eq!((rej.reason, rej.message_rejected), (4, MessageKind::Other));
    assert_eq!(rej.remote_comm_id, 0, "the server's ID is not known yet");
    assert_eq!(rej.reject_info_len, 8);
    assert_eq!(
        rej.ari[..8],
        [0x02, 0, 0, 0, 0, 0, 0, 0x10],
        "the client's GUID"
    );
    (rej, header.tid)
}

/// A client that gives up before its request is accepted ends the
/// server's id: the application has not adopted it yet, so no event
/// comes, and its ACCEPT fails as the kernel's does.
#[test]
fn a_client_destroyed_before_the_accept_ends_the_request() {
    let (mut client, mut server, cid, sid) = requested(b"");
    let (rej, tid) = abandoning_rej(&mut client, cid);
    let m = mad(&CmMessage::Rej(rej), tid);
    server.agent.handle_mad(0, client.ip, server.ip, &m);
    assert_eq!(server.accept(sid, 300, 0x222, &[], true), Err(EINVAL));
    assert!(server.try_event().is_none());
}

/// After the accept, the server's id hears REJECTED with the reason, and
/// only from the client: a REJ "timeout" from another address, or naming
/// another GUID, is ignored.
#[test]
fn a_client_destroyed_after_the_accept_rejects_the_servers_id() {
    let (mut client, mut server, cid, sid) = requested(b"");
    server.accept(sid, 300, 0x222, &[], true).unwrap();
    while server.agent.poll_mad().is_some() {} // the REP is lost
    let (rej, tid) = abandoning_rej(&mut client, cid);
    let mut other_guid = rej;
    other_guid.ari[7] ^= 1;
    let forged = mad(&CmMessage::Rej(other_guid), tid);
    server.agent.handle_mad(0, client.ip, server.ip, &forged);
    let real = mad(&CmMessage::Rej(rej), tid);
    let stranger: IpAddr = "10.0.0.9".parse().unwrap();
    server.agent.handle_mad(0, stranger, server.ip, &real);
    assert!(server.try_event().is_none(), "a forged REJ counted");
    server.agent.handle_mad(0, client.ip, server.ip, &real);
    let ev = server.event();
    assert_eq!((ev.event, ev.id, ev.status), (event::REJECTED, sid, 4));
}

/// Rule (the kernel's `addr4_resolve`, `addr6_resolve`): an id bound to
/// no address takes the source the host's routing picks for its
/// destination, and that address's device; the first device's address
/// would leave through another interface than the answers come back by.
#[test]
fn an_unbound_id_takes_the_source_the_route_picks() {
    let device = |ip: &str, block: u16| Device {
        node_guid: [0x02, 0, 0, 0, 0, 0, 0, block as u8],
        ip: ip.parse().unwrap(),
        comm_block: block,
        path_mtu: 3,
    };
    let mut agent = Agent::new(
        vec![device("10.77.0.2", 0x10), device("10.78.0.2", 0x11)],
        1,
    );
    agent.open_channel(CH);
    let (far, near): (IpAddr, IpAddr) =
        ("10.78.0.1".parse().unwrap(), "10.78.0.2".parse().unwrap());
    let mut side = Side {
        agent,
        ip: near,
        ports: Ports {
            sources: vec![(far, near)],
            ..Ports::default()
        },
        now: 0,
    };
    let id = side.create(1);
    side.resolve(id, SocketAddr::new(far, 7471));
    side.connect(id, 0x111, b"");
    let req = side.agent.poll_mad().expect("the REQ");
    assert_eq!((req.src, req.dst), (near, far));
}

/// Rule: the daemon, which outlives the process, is told of each REQ and
/// REP the process sends, with what it needs to end them in the
/// process's name (the kernel's CM outlives a process and destroys its
/// ids): a REQ's comm ID, CA GUID and transaction, a REP's two comm IDs.
#[test]
fn the_daemon_is_told_of_each_req_and_rep_sent() {
    let server = Side::new("10.0.0.2", 0x20);
    let (mut client, mut server, _) = connecting(server, Side::new("10.0.0.1", 0x10), b"");
    let req = client.agent.poll_mad().expect("the REQ");
    let (header, CmMessage::Req(m)) = CmMessage::parse_mad(&req.mad).unwrap() else {
        panic!("not a REQ");
    };
    let told = Told::Requesting(
        client.ip,
        server.ip,
        m.local_comm_id,
        m.local_ca_guid,
        header.tid,
    );
    assert_eq!(client.ports.told, [told]);
    assert_eq!(
        m.local_ca_guid, 0x0200_0000_0000_0010,
        "the device's node GUID"
    );
    server.agent.handle_mad(0, req.src, req.dst, &req.mad);
    let sid = server.event().id;
    assert_eq!(server.ports.told, []);
    server.accept(sid, 300, 0x222, &[], true).unwrap();
    let rep = server.agent.poll_mad().expect("the REP");
    let (_, CmMessage::Rep(r)) = CmMessage::parse_mad(&rep.mad).unwrap() else {
        panic!("not a REP");
    };
    assert_eq!(r.remote_comm_id, m.local_comm_id);
    let told = Told::Replying(server.ip, client.ip, r.local_comm_id, r.remote_comm_id);
    assert_eq!(server.ports.told, [told]);
}

/// A server destroyed after its REP rejects as the consumer, naming both
/// IDs, as the kernel's CM does (not "timeout", which names a REQ).
#[test]
fn a_server_destroyed_after_its_rep_rejects_the_client() {
    let (mut client, mut server, cid, sid) = requested(b"");
    server.accept(sid, 300, 0x222, &[], true).unwrap();
    exchange(&mut client, &mut server);
    assert_eq!(client.event().event, event::CONNECT_RESPONSE);
    destroy(&mut server, sid);
    exchange(&mut client, &mut server);
    let ev = client.event();
    assert_eq!((ev.event, ev.id, ev.status), (event::REJECTED, cid, 28));
}

#[test]
fn garbage_commands_and_mads_are_refused_without_a_panic() {
    let mut s = Side::new("10.0.0.2", 0x20);
    let mut rng = fastrand::Rng::with_seed(7);
    for _ in 0..20_000 {
        let len = rng.usize(0..400);
        let mut b: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
        if len >= 8 {
            put32(&mut b, 0, rng.u32(0..24));
            put16(&mut b, 4, (len - 8) as u16);
        }
        let _ = s.run(&b);
        let mad: Vec<u8> = (0..rng.usize(0..300)).map(|_| rng.u8(..)).collect();
        s.agent.handle_mad(0, s.ip, s.ip, &mad);
    }
}

/// Rule (the kernel's `cm_rep_handler`, then `cm_dup_rep_handler`, find
/// no id): a REP for no connection of the process it reaches is dropped
/// without an answer, and the accepting side goes on waiting for its RTU
/// (resending the REP as the REQ asked).
#[test]
fn a_rep_for_no_connection_is_dropped_without_an_answer() {
    let (_client, mut server, _cid, sid) = requested(b"");
    server.accept(sid, 300, 0x222, &[], true).unwrap();
    // The REP reaches another process at the client's address, which
    // never sent a REQ.
    let mut stranger = Side::new("10.0.0.1", 0x30);
    assert_eq!(exchange(&mut stranger, &mut server), 1, "the REP alone");
    assert!(server.try_event().is_none());
}

/// Rule (the kernel's `cm_dup_rep_handler`, which finds no id by both
/// comm IDs): a REP naming an established connection's comm ID with
/// another peer's is dropped, without a REJ (which would tell the daemon
/// the connection ended) or an event, and the connection goes on.
#[test]
fn a_rep_naming_a_live_connection_with_another_peer_is_dropped() {
    let (mut client, mut server, cid, sid) = requested(b"");
    server.accept(sid, 300, 0x222, &[], true).unwrap();
    let rep = server.agent.poll_mad().expect("the REP");
    client
        .agent
        .handle_mad(client.now, rep.src, rep.dst, &rep.mad);
    client.event();
    client.accept(cid, 200, 0, &[], false).unwrap();
    exchange(&mut client, &mut server);
    assert_eq!(server.event().event, event::ESTABLISHED);
    let Ok((_, CmMessage::Rep(mut forged))) = CmMessage::parse_mad(&rep.mad) else {
        panic!("not a REP");
    };
    forged.local_comm_id ^= 0x5A5A;
    let mut mad = [0; 256];
    CmMessage::Rep(forged).emit_mad(77, 0, &mut mad).unwrap();
    client.agent.handle_mad(client.now, rep.src, rep.dst, &mad);
    assert!(client.agent.poll_mad().is_none(), "no REJ, no RTU");
    assert!(client.try_event().is_none(), "no event");
    client.simple(cmd::DISCONNECT, cid).unwrap();
    exchange(&mut client, &mut server);
    assert_eq!(server.event().event, event::DISCONNECTED);
}

#[test]
fn a_dreq_for_a_connection_gone_here_is_answered_at_once() {
    let (mut client, mut server, cid, sid) = requested(b"");
    server.accept(sid, 300, 0x222, &[], true).unwrap();
    exchange(&mut client, &mut server);
    client.event();
    client.accept(cid, 200, 0, &[], false).unwrap();
    exchange(&mut client, &mut server);
    server.event();
    let mut d = cmd_buf(cmd::DESTROY_ID, 24, 4);
    put64(&mut d, 8, 0x10);
    put32(&mut d, 16, sid);
    server.ok(&d);
    // The server's own DREQ is lost: the client disconnects later.
    while server.agent.poll_mad().is_some() {}
    client.simple(cmd::DISCONNECT, cid).unwrap();
    exchange(&mut client, &mut server);
    let ev = client.event();
    assert_eq!(
        (ev.event, ev.status),
        (event::DISCONNECTED, 0),
        "a DREP, not a timeout"
    );
}

/// An established connection between `requested`'s client and server;
/// returns (client, server, client id, server id).
fn established() -> (Side, Side, u32, u32) {
    let (mut client, mut server, cid, sid) = requested(b"");
    server.accept(sid, 300, 0x222, &[], true).unwrap();
    exchange(&mut client, &mut server);
    assert_eq!(client.event().event, event::CONNECT_RESPONSE);
    client.accept(cid, 200, 0, &[], false).unwrap();
    exchange(&mut client, &mut server);
    assert_eq!(server.event().event, event::ESTABLISHED);
    (client, server, cid, sid)
}

/// `msg` as a MAD with transaction ID `tid`.
fn mad(msg: &CmMessage, tid: u64) -> [u8; 256] {
    let mut m = [0u8; 256];
    msg.emit_mad(tid, 0, &mut m).unwrap();
    m
}

/// A DREQ ends a connection only when it names both comm IDs and comes
/// from the peer, as the kernel's CM matches both IDs: the server's ID
/// alone, which its REP shows anyone who asks, once let any host
/// disconnect it.
#[test]
fn a_dreq_must_name_both_ids_and_come_from_the_peer() {
    let (mut client, mut server, cid, _) = established();
    client.simple(cmd::DISCONNECT, cid).unwrap();
    let real = client.agent.poll_mad().expect("the client's DREQ");
    let (header, CmMessage::Dreq(dreq)) = CmMessage::parse_mad(&real.mad).unwrap() else {
        panic!("not a DREQ");
    };
    let stranger: IpAddr = "10.0.0.9".parse().unwrap();
    let mut other_id = dreq;
    other_id.local_comm_id ^= 1;
    let forged = mad(&CmMessage::Dreq(other_id), header.tid);
    server.agent.handle_mad(0, client.ip, server.ip, &forged);
    server.agent.handle_mad(0, stranger, server.ip, &real.mad);
    assert!(server.try_event().is_none(), "a forged DREQ disconnected");
    while server.agent.poll_mad().is_some() {}
    server.agent.handle_mad(0, real.src, real.dst, &real.mad);
    assert_eq!(server.event().event, event::DISCONNECTED);
}

/// The same for a REJ of a REP and an RTU while the server waits for the
/// client's answer: only the client's own messages count.
#[test]
fn a_rej_or_rtu_must_name_both_ids_and_come_from_the_peer() {
    let (mut client, mut server, cid, sid) = requested(b"");
    server.accept(sid, 300, 0x222, &[], true).unwrap();
    exchange(&mut client, &mut server);
    assert_eq!(client.event().event, event::CONNECT_RESPONSE);
    client.accept(cid, 200, 0, &[], false).unwrap();
    let real = client.agent.poll_mad().expect("the client's RTU");
    let (header, CmMessage::Rtu(rtu)) = CmMessage::parse_mad(&real.mad).unwrap() else {
        panic!("not an RTU");
    };
    let rej = CmRej {
        local_comm_id: rtu.local_comm_id ^ 1,
        remote_comm_id: rtu.remote_comm_id,
        message_rejected: MessageKind::Rep,
        reason: 28,
        ..CmRej::default()
    };
    server.agent.handle_mad(
        0,
        client.ip,
        server.ip,
        &mad(&CmMessage::Rej(rej), header.tid),
    );
    let mut rtu_other = rtu;
    rtu_other.local_comm_id ^= 1;
    let forged = mad(&CmMessage::Rtu(rtu_other), header.tid);
    server.agent.handle_mad(0, client.ip, server.ip, &forged);
    server
        .agent
        .handle_mad(0, "10.0.0.9".parse().unwrap(), server.ip, &real.mad);
    assert!(server.try_event().is_none(), "a forged REJ or RTU counted");
    server.agent.handle_mad(0, real.src, real.dst, &real.mad);
    assert_eq!(server.event().event, event::ESTABLISHED);
}

/// A REP sent again after the client answered (its RTU was lost) finds the
/// established connection by both IDs and gets the RTU again; one naming
/// another server ID gets none.
#[test]
fn a_rep_sent_again_to_an_established_client_gets_its_rtu_again() {
    let (mut client, mut server, cid, sid) = requested(b"");
    server.accept(sid, 300, 0x222, &[], true).unwrap();
    let rep = server.agent.poll_mad().expect("the REP");
    client.agent.handle_mad(0, rep.src, rep.dst, &rep.mad);
    assert_eq!(client.event().event, event::CONNECT_RESPONSE);
    client.accept(cid, 200, 0, &[], false).unwrap();
    assert!(client.agent.poll_mad().is_some(), "the RTU, lost");
    let (header, CmMessage::Rep(mut other)) = CmMessage::parse_mad(&rep.mad).unwrap() else {
        panic!("not a REP");
    };
    other.local_comm_id ^= 1;
    let forged = mad(&CmMessage::Rep(other), header.tid);
    client.agent.handle_mad(0, rep.src, rep.dst, &forged);
    let answer = client
        .agent
        .poll_mad()
        .map(|m| CmMessage::parse_mad(&m.mad));
    assert!(
        !matches!(answer, Some(Ok((_, CmMessage::Rtu(_))))),
        "an RTU for another server ID"
    );
    client.agent.handle_mad(0, rep.src, rep.dst, &rep.mad);
    let again = client.agent.poll_mad().expect("an answer");
    assert!(matches!(
        CmMessage::parse_mad(&again.mad),
        Ok((_, CmMessage::Rtu(_)))
    ));
}

/// An MRA of the client's REQ, from the server's address, makes the
/// client wait longer before sending its REQ again; one from elsewhere
/// does not.
#[test]
fn an_mra_counts_only_from_the_peer() {
    let server = Side::new("10.0.0.2", 0x20);
    let (mut client, server, _) = connecting(server, Side::new("10.0.0.1", 0x10), &[]);
    let req = client.agent.poll_mad().expect("the REQ");
    let (header, CmMessage::Req(r)) = CmMessage::parse_mad(&req.mad).unwrap() else {
        panic!("not a REQ");
    };
    let first = client.agent.poll_timeout().expect("a retry is armed");
    let mra = CmMra {
        local_comm_id: 0x0200_0001,
        remote_comm_id: r.local_comm_id,
        message_mraed: MessageKind::Req,
        service_timeout: 20,
        ..CmMra::default()
    };
    let mra = mad(&CmMessage::Mra(mra), header.tid);
    let stranger: IpAddr = "10.0.0.9".parse().unwrap();
    client.agent.handle_mad(0, stranger, client.ip, &mra);
    assert_eq!(
        client.agent.poll_timeout(),
        Some(first),
        "an MRA from elsewhere"
    );
    client.agent.handle_mad(0, server.ip, client.ip, &mra);
    assert!(
        client.agent.poll_timeout().unwrap() > first,
        "the peer's MRA"
    );
}

const PS_UDP: u16 = 0x0111;

/// A UD listener on 10.0.0.2:7000 and a client that resolved it.
fn ud_pair(listen: bool) -> (Side, Side, u32) {
    let mut server = Side::new("10.0.0.2", 0x20);
    let mut client = Side::new("10.0.0.1", 0x10);
    if listen {
        let l = server.create_in(100, PS_UDP);
        server.bind(l, "0.0.0.0:7000").unwrap();
        server.listen(l);
    }
    let id = client.create_in(200, PS_UDP);
    client.resolve(id, "10.0.0.2:7000".parse().unwrap());
    (client, server, id)
}

#[test]
fn a_ud_id_learns_the_peers_qp_and_qkey_through_sidr() {
    let (mut client, mut server, cid) = ud_pair(true);
    let init = client.qp_attr(cid, 1);
    assert_eq!(get32(&init, 20), 0x0123_4567, "RDMA_UDP_QKEY");
    client.connect(cid, 0x333, b"ud hello");
    exchange(&mut client, &mut server);
    let req = server.event();
    assert_eq!((req.event, req.uid), (event::CONNECT_REQUEST, 100));
    server
        .accept(req.id, 300, 0x444, b"ud world", true)
        .unwrap();
    exchange(&mut client, &mut server);
    let bytes = client.raw_event();
    assert_eq!(get32(&bytes, 12), event::ESTABLISHED);
    assert_eq!(get32(&bytes, 20), 0x444, "the peer's QP");
    assert_eq!(get32(&bytes, 24), 0x0123_4567, "its Q_Key");
    assert_eq!(
        &bytes[28..44],
        &abi::gid_of(server.ip),
        "an address handle to it"
    );
    assert_eq!(bytes[49], 64, "hop limit");
    assert_eq!((bytes[57], bytes[58]), (1, 1), "is_global, port");
    // param.ud's private data at 60, its length at 316.
    assert_eq!(&bytes[60..68], b"ud world");
    assert_eq!(bytes[316], 136, "a SIDR_REP's whole private data");
    // The kernel answers a UD id with its INIT attributes, whatever the
    // state (`cma_ib_init_qp_attr`): STATE, PKEY_INDEX, PORT, QKEY.
    assert_eq!(get32(&client.qp_attr(cid, 2), 0), 1 | 16 | 32 | 64, "RTR");
}

/// [`ud_pair`] with a listener, the client's SIDR_REQ taken; returns
/// (client, server, the server's new id).
fn ud_requested() -> (Side, Side, u32) {
    let (mut client, mut server, cid) = ud_pair(true);
    client.connect(cid, 0x333, &[]);
    exchange(&mut client, &mut server);
    let req = server.event();
    (client, server, req.id)
}

/// The server's REJECT of request `sid`, with `data`.
fn reject(server: &mut Side, sid: u32, data: &[u8]) {
    let mut b = cmd_buf(cmd::REJECT, 272, 0);
    put32(&mut b, 8, sid);
    b[12] = data.len() as u8;
    b[16..16 + data.len()].copy_from_slice(data);
    server.ok(&b);
}

#[test]
fn a_ud_request_nobody_listens_for_or_rejected_is_unreachable() {
    let (mut client, mut server, cid) = ud_pair(false);
    client.connect(cid, 0x333, &[]);
    exchange(&mut client, &mut server);
    let ev = client.event();
    assert_eq!(
        (ev.event, ev.status),
        (event::UNREACHABLE, 1),
        "no such service"
    );

    let (mut client, mut server, sid) = ud_requested();
    reject(&mut server, sid, &[]);
    exchange(&mut client, &mut server);
    let ev = client.event();
    assert_eq!((ev.event, ev.status), (event::UNREACHABLE, 2), "rejected");
}

/// Rule (the kernel's `cma_sidr_rep_handler`): a SIDR_REP that rejects
/// hands the rejecter's private data with UNREACHABLE, all 136 bytes.
#[test]
fn a_rejected_ud_request_hears_the_rejecters_private_data() {
    let (mut client, mut server, sid) = ud_requested();
    reject(&mut server, sid, b"no ud");
    exchange(&mut client, &mut server);
    let bytes = client.raw_event();
    assert_eq!(get32(&bytes, 12), event::UNREACHABLE);
    assert_eq!(get32(&bytes, 16), 2, "status: rejected");
    assert_eq!(&bytes[60..65], b"no ud", "param.ud's private data");
    assert_eq!(bytes[316], 136, "a SIDR_REP's whole private data");
}

/// Rule (the kernel's `cm_dreq_handler`): both ends disconnecting at
/// once, each takes the other's DREQ as the end of its own: DISCONNECTED
/// at once and no DREQ sent again, even when the peer, gone (a process
/// that exits as it disconnects), never answers with its DREP.
#[test]
fn crossing_dreqs_end_both_sides_at_once() {
    let (mut client, mut server, cid, sid) = established();
    client.simple(cmd::DISCONNECT, cid).unwrap();
    server.simple(cmd::DISCONNECT, sid).unwrap();
    // The server's DREQ reaches the client; nothing of the server's
    // comes after it (it exited).
    let dreq = server.agent.poll_mad().expect("the server's DREQ");
    while server.agent.poll_mad().is_some() {}
    client.agent.handle_mad(0, dreq.src, dreq.dst, &dreq.mad);
    assert_eq!(client.event().event, event::DISCONNECTED);
    let mut sent = Vec::new();
    while let Some(m) = client.agent.poll_mad() {
        sent.push(CmMessage::parse_mad(&m.mad).unwrap().1);
    }
    assert!(
        matches!(sent[..], [CmMessage::Dreq(_), CmMessage::Drep(_)]),
        "its own DREQ, then the DREP: {sent:?}"
    );
    client.now = client.agent.poll_timeout().expect("time-wait");
    client.tick();
    assert_eq!(
        client.event().event,
        event::TIMEWAIT_EXIT,
        "no DREQ retry first"
    );
    assert!(client.agent.poll_mad().is_none(), "its DREQ not sent again");
}

/// Rule (the kernel's `rdma_accept`): an ACCEPT of a UD request that
/// fails (a SIDR_REP's private data over its 136 bytes) rejects it, so
/// the requester hears UNREACHABLE (status 2, rejected) at once.
#[test]
fn a_failed_ud_accept_rejects_the_request() {
    let (mut client, mut server, sid) = ud_requested();
    assert_eq!(server.accept(sid, 300, 0x444, &[1; 137], true), Err(EINVAL));
    exchange(&mut client, &mut server);
    let ev = client.event();
    assert_eq!((ev.event, ev.status), (event::UNREACHABLE, 2));
}

/// Rule (the kernel's `rdma_accept`): an ACCEPT that fails (a REP's
/// private data longer than its 196 bytes) rejects the request as the
/// consumer, so the active side hears REJECTED instead of waiting.
#[test]
fn a_failed_accept_rejects_the_request() {
    let (mut client, mut server, _, sid) = requested(b"");
    assert_eq!(server.accept(sid, 300, 0x222, &[7; 197], true), Err(EINVAL));
    exchange(&mut client, &mut server);
    let ev = client.event();
    assert_eq!((ev.event, ev.status), (event::REJECTED, 28));
}

/// Rule (the kernel's `resolve_prepare_src`, `rdma_resolve_route`,
/// `rdma_listen`): an id resolves its address and its route once each,
/// and listens once; again is EINVAL, and queues no second event.
#[test]
fn resolving_or_listening_again_is_einval() {
    let mut s = Side::new("10.0.0.1", 0x10);
    let id = s.create(1);
    s.resolve(id, "10.0.0.2:7471".parse().unwrap());
    let mut again = cmd_buf(cmd::RESOLVE_IP, 72, 0);
    abi::put_sockaddr(&mut again[36..64], "10.0.0.2:7471".parse().unwrap());
    put32(&mut again, 64, id);
    put32(&mut again, 68, 2000);
    assert_eq!(s.run(&again), Err(EINVAL), "the address again");
    let mut route = cmd_buf(cmd::RESOLVE_ROUTE, 16, 0);
    put32(&mut route, 8, id);
    put32(&mut route, 12, 2000);
    assert_eq!(s.run(&route), Err(EINVAL), "the route again");
    assert!(s.try_event().is_none(), "no second event");
    let listener = s.create(2);
    s.bind(listener, "0.0.0.0:7000").unwrap();
    s.listen(listener);
    let mut listen = cmd_buf(cmd::LISTEN, 16, 0);
    put32(&mut listen, 8, listener);
    put32(&mut listen, 12, 10);
    assert_eq!(s.run(&listen), Err(EINVAL), "listening again");
}

/// Rule (the kernel's `rdma_set_reuseaddr`, `rdma_set_afonly`):
/// REUSEADDR may be cleared only while the id is IDLE (unbound) and not
/// set while it listens; AFONLY only while IDLE or ADDR_BOUND.
#[test]
fn reuseaddr_and_afonly_follow_the_ids_state() {
    let mut s = Side::new("10.0.0.2", 0x20);
    let id = s.create(1);
    let option = |s: &mut Side, name: u32, value: i32| {
        let mut b = cmd_buf(cmd::SET_OPTION, 32, 0);
        put32(&mut b, 16, id);
        put32(&mut b, 24, name);
        put32(&mut b, 28, 4);
        b.extend_from_slice(&value.to_ne_bytes());
        s.run(&b).map(|_| ())
    };
    let (reuse, afonly) = (1, 2);
    assert_eq!(option(&mut s, reuse, 0), Ok(()), "IDLE: clear");
    s.bind(id, "0.0.0.0:7000").unwrap();
    assert_eq!(option(&mut s, reuse, 0), Err(EINVAL), "bound: clear");
    assert_eq!(option(&mut s, reuse, 1), Ok(()), "bound: set");
    assert_eq!(option(&mut s, afonly, 1), Ok(()), "ADDR_BOUND");
    s.listen(id);
    assert_eq!(option(&mut s, reuse, 1), Err(EINVAL), "listening: set");
    assert_eq!(option(&mut s, afonly, 1), Err(EINVAL), "listening");
}

/// Rule (the kernel's `cm_format_paths_from_req`): the traffic class of
/// the active side's TOS travels in the REQ's path, and the passive
/// side's QP takes it.
#[test]
fn the_passive_side_takes_the_traffic_class_of_the_request() {
    let (mut server, mut client) = (Side::new("10.0.0.2", 0x20), Side::new("10.0.0.1", 0x10));
    let listener = server.create(100);
    server.bind(listener, "0.0.0.0:7471").unwrap();
    server.listen(listener);
    let id = client.create(200);
    let mut tos = cmd_buf(cmd::SET_OPTION, 32, 0);
    put32(&mut tos, 16, id);
    put32(&mut tos, 28, 1);
    tos.push(0x48);
    client.ok(&tos);
    client.resolve(id, "10.0.0.2:7471".parse().unwrap());
    client.connect(id, 0x111, b"");
    exchange(&mut client, &mut server);
    let req = server.event();
    assert_eq!(server.qp_attr(req.id, RTR)[62], 0x48, "the traffic class");
}

#[test]
fn a_multicast_join_says_how_to_reach_the_group_and_leave_counts_it() {
    let mut s = Side::new("10.0.0.2", 0x20);
    let id = s.create_in(5, PS_UDP);
    s.bind(id, "10.0.0.2:0").unwrap();
    let mut j = cmd_buf(cmd::JOIN_IP_MCAST, 56, 4);
    put64(&mut j, 8, 0x10);
    put64(&mut j, 16, 77);
    abi::put_sockaddr(&mut j[24..52], "239.1.2.3:0".parse().unwrap());
    put32(&mut j, 52, id);
    let mc = get32(&s.ok(&j), 0);
    let mut g = cmd_buf(cmd::GET_EVENT, 16, 336);
    put64(&mut g, 8, 1);
    let Ok(Reply::Respond { bytes, .. }) = s.run(&g) else {
        panic!("no event");
    };
    assert_eq!(
        u64::from_ne_bytes(bytes[0..8].try_into().unwrap()),
        77,
        "the join's uid"
    );
    assert_eq!(get32(&bytes, 12), 12, "MULTICAST_JOIN");
    assert_eq!(
        (get32(&bytes, 20), get32(&bytes, 24)),
        (0xFF_FFFF, 0x0123_4567)
    );
    assert_eq!(&bytes[28..44], &abi::gid_of("239.1.2.3".parse().unwrap()));
    let mut l = cmd_buf(cmd::LEAVE_MCAST, 24, 4);
    put64(&mut l, 8, 0x10);
    put32(&mut l, 16, mc);
    assert_eq!(get32(&s.ok(&l), 0), 1, "one event of the join handed out");
    assert_eq!(s.run(&l), Err(2), "left already");
    abi::put_sockaddr(&mut j[24..52], "10.1.2.3:0".parse().unwrap());
    assert_eq!(s.run(&j), Err(22), "not a group");
}

#[test]
fn join_mcast_takes_both_full_member_kinds_and_checks_the_size() {
    let mut s = Side::new("10.0.0.2", 0x20);
    let id = s.create_in(5, PS_UDP);
    s.bind(id, "10.0.0.2:0").unwrap();
    let mut j = cmd_buf(cmd::JOIN_MCAST, 160, 4);
    put64(&mut j, 8, 0x10);
    put64(&mut j, 16, 78);
    put32(&mut j, 24, id);
    put16(&mut j, 28, 16);
    abi::put_sockaddr(&mut j[32..48], "239.1.2.4:0".parse().unwrap());
    for flags in [0, 1] {
        put16(&mut j, 30, flags);
        s.ok(&j);
        let ev = s.event();
        assert_eq!(
            (ev.event, ev.uid, ev.qp_num),
            (event::MULTICAST_JOIN, 78, 0xFF_FFFF)
        );
    }
    put16(&mut j, 30, 2);
    assert_eq!(s.run(&j), Err(22), "no such join flag");
    put16(&mut j, 30, 0);
    put16(&mut j, 28, 28);
    assert_eq!(s.run(&j), Err(22), "the size is not the family's");
}

#[test]
fn answers_fit_the_callers_room_as_the_kernels_do() {
    let (mut client, _server, id, _) = requested(b"");
    // QUERY ADDR or GID: at least up to ibdev_index, no more than room.
    let mut q = cmd_buf(cmd::QUERY, 24, 272);
    put32(&mut q, 16, id);
    assert_eq!(client.ok(&q).len(), 272);
    put16(&mut q, 6, 271);
    assert_eq!(client.run(&q), Err(28), "ENOSPC");
    // QUERY PATH: a path only where more than its 72 bytes are left.
    put32(&mut q, 20, 1);
    put16(&mut q, 6, 8 + 72);
    let p = client.ok(&q);
    assert_eq!((get32(&p, 0), p.len()), (1, 8), "one path, none copied");
    // JOIN without room for the handle.
    let mut s = Side::new("10.0.0.2", 0x20);
    let ud = s.create_in(5, PS_UDP);
    s.bind(ud, "10.0.0.2:0").unwrap();
    let mut j = cmd_buf(cmd::JOIN_IP_MCAST, 56, 0);
    abi::put_sockaddr(&mut j[24..52], "239.1.2.5:0".parse().unwrap());
    put32(&mut j, 52, ud);
    assert_eq!(s.run(&j), Err(28), "ENOSPC");
}

#[test]
fn destroying_a_listener_frees_its_port_while_its_connections_live() {
    let (_client, mut server, _, sid) = requested(b"");
    let listener = softverbs_cm::ID_HANDLES; // the first id the server made
    let mut d = cmd_buf(cmd::DESTROY_ID, 24, 4);
    put64(&mut d, 8, 0x10);
    put32(&mut d, 16, listener);
    server.ok(&d);
    let again = server.create(101);
    server.bind(again, "0.0.0.0:7471").unwrap();
    assert!(
        server.qp_attr(sid, 1).len() == 144,
        "the connection's id lives"
    );
}

#[test]
fn a_uc_connection_gets_uc_attributes_and_a_closed_channel_is_ebadf() {
    let mut server = Side::new("10.0.0.2", 0x20);
    let mut client = Side::new("10.0.0.1", 0x10);
    // RDMA_PS_IB with IBV_QPT_UC, both ends.
    let uc = |side: &mut Side, uid: u64| {
        let mut b = cmd_buf(cmd::CREATE_ID, 32, 4);
        put64(&mut b, 8, uid);
        put64(&mut b, 16, 0x1000);
        put16(&mut b, 24, 0x013F);
        b[26] = 3;
        get32(&side.ok(&b), 0)
    };
    let l = uc(&mut server, 1);
    server.bind(l, "0.0.0.0:7").unwrap();
    server.listen(l);
    let id = uc(&mut client, 2);
    client.resolve(id, "10.0.0.2:7".parse().unwrap());
    client.connect(id, 9, &[]);
    exchange(&mut client, &mut server);
    let req = server.event();
    let rtr = server.qp_attr(req.id, 2);
    let rts = server.qp_attr(req.id, 3);
    let (rd_atomic, rnr_timer) = (1 << 17, 1 << 15);
    assert_eq!(
        get32(&rtr, 0) & (rd_atomic | rnr_timer),
        0,
        "no RC-only RTR bits"
    );
    assert_eq!(get32(&rts, 0), 1 | 1 << 16, "RTS: the state and the SQ PSN");
    server.agent.close_channel(CH, &mut server.ports);
    assert_eq!(server.simple(cmd::DISCONNECT, req.id), Err(9), "EBADF");
}

#[test]
fn notify_comm_est_stands_for_a_lost_rtu() {
    let (mut client, mut server, _, sid) = requested(b"");
    server.accept(sid, 300, 0x222, &[], true).unwrap();
    exchange(&mut client, &mut server);
    // The client's RTU never comes; the server's QP got a packet.
    let mut n = cmd_buf(cmd::NOTIFY, 16, 0);
    put32(&mut n, 8, sid);
    put32(&mut n, 12, 4); // IBV_EVENT_COMM_EST
    server.ok(&n);
    let est = server.event();
    assert_eq!((est.event, est.uid), (event::ESTABLISHED, 300));
}

/// NOTIFY as the kernel's `ib_cm_notify`: EINVAL without a connection
/// or for an event other than COMM_EST and PATH_MIG, EISCONN for
/// COMM_EST once established.
#[test]
fn notify_answers_as_the_kernels_cm() {
    let notify = |side: &mut Side, id: u32, event: u32| {
        let mut n = cmd_buf(cmd::NOTIFY, 16, 0);
        put32(&mut n, 8, id);
        put32(&mut n, 12, event);
        side.run(&n).map(|_| ())
    };
    let mut idle = Side::new("10.0.0.3", 0x30);
    let id = idle.create(1);
    assert_eq!(notify(&mut idle, id, 4), Err(EINVAL), "no connection");
    let (_, mut server, _, sid) = established();
    assert_eq!(notify(&mut server, sid, 4), Err(106), "EISCONN");
    assert_eq!(notify(&mut server, sid, 6), Ok(()), "PATH_MIG");
    assert_eq!(notify(&mut server, sid, 11), Err(EINVAL), "LID_CHANGE");
    // A UD id has no connection to establish: its CM id is a SIDR one,
    // which `cm_establish` refuses on both sides.
    let (mut client, mut server, cid) = ud_pair(true);
    client.connect(cid, 0x333, b"");
    exchange(&mut client, &mut server);
    let sid = server.event().id;
    server.accept(sid, 300, 0x444, b"", true).unwrap();
    exchange(&mut client, &mut server);
    assert_eq!(client.event().event, event::ESTABLISHED);
    assert_eq!(notify(&mut client, cid, 4), Err(EINVAL), "UD, active");
    assert_eq!(notify(&mut server, sid, 4), Err(EINVAL), "UD, passive");
}

/// REJECT as the kernel's `cm_send_rej_locked`: also after the REP went
/// out (the client, established by then, hears REJECTED) and from the
/// active side before any answer; DISCONNECT succeeds once a connection
/// was attempted, sending nothing where there is none.
#[test]
fn reject_after_the_rep_and_disconnect_without_a_connection() {
    let (mut client, mut server, cid, sid) = requested(b"");
    server.accept(sid, 300, 0x222, &[], true).unwrap();
    exchange(&mut client, &mut server);
    assert_eq!(client.event().event, event::CONNECT_RESPONSE);
    client.accept(cid, 200, 0, &[], false).unwrap();
    while client.agent.poll_mad().is_some() {} // the RTU is lost
    server.simple(cmd::REJECT, sid).unwrap();
    exchange(&mut client, &mut server);
    let ev = client.event();
    assert_eq!((ev.event, ev.id, ev.status), (event::REJECTED, cid, 28));
    assert_eq!(client.simple(cmd::DISCONNECT, cid), Ok(Reply::Done));
    assert!(client.agent.poll_mad().is_none(), "nothing to disconnect");

    let (mut client, mut server, cid, _) = requested(b"");
    assert_eq!(client.simple(cmd::REJECT, cid), Ok(Reply::Done));
    exchange(&mut client, &mut server);
    assert!(
        server.try_event().is_none(),
        "the kernel's CM matches it to nothing"
    );
    let mut idle = Side::new("10.0.0.3", 0x30);
    let id = idle.create(1);
    assert_eq!(idle.simple(cmd::DISCONNECT, id), Err(EINVAL));
}

/// A REJ naming both IDs ends a connection whose DREQ is on its way too
/// (`cm_rej_handler` in DREQ_SENT): REJECTED, and its DREQ is not sent
/// again.
#[test]
fn a_rej_ends_a_connection_being_disconnected() {
    let (mut client, server, cid, _) = established();
    client.simple(cmd::DISCONNECT, cid).unwrap();
    let dreq = client.agent.poll_mad().expect("the client's DREQ (lost)");
    let (header, CmMessage::Dreq(d)) = CmMessage::parse_mad(&dreq.mad).unwrap() else {
        panic!("not a DREQ");
    };
    let rej = CmRej {
        local_comm_id: d.remote_comm_id,
        remote_comm_id: d.local_comm_id,
        message_rejected: MessageKind::Other,
        reason: 28,
        ..CmRej::default()
    };
    let m = mad(&CmMessage::Rej(rej), header.tid);
    client.agent.handle_mad(0, server.ip, client.ip, &m);
    let ev = client.event();
    assert_eq!((ev.event, ev.id, ev.status), (event::REJECTED, cid, 28));
    assert_eq!(client.agent.poll_timeout(), None, "no DREQ sent again");
}

#[test]
fn set_option_takes_the_id_options_and_refuses_others() {
    let mut s = Side::new("10.0.0.2", 0x20);
    let id = s.create(1);
    // The value follows the command, as the provider copies it in.
    let option = |level: u32, name: u32, value: &[u8]| {
        let mut b = cmd_buf(cmd::SET_OPTION, 32, 0);
        put32(&mut b, 16, id);
        put32(&mut b, 20, level);
        put32(&mut b, 24, name);
        put32(&mut b, 28, value.len() as u32);
        b.extend_from_slice(value);
        b
    };
    let int = 1i32.to_ne_bytes();
    for (name, value) in [(0, &[3u8][..]), (1, &int), (2, &int), (3, &[20])] {
        assert_eq!(
            s.run(&option(0, name, value)),
            Ok(Reply::Done),
            "id option {name}"
        );
    }
    assert_eq!(s.run(&option(0, 0, &int)), Err(22), "TOS is one byte");
    assert_eq!(s.run(&option(0, 1, &[1])), Err(22), "REUSEADDR is an int");
    assert_eq!(
        s.run(&option(1, 1, &[0; 72])),
        Err(38),
        "an IB path record: ENOSYS"
    );
    let mut short = option(0, 3, &[20]);
    short.pop();
    assert_eq!(s.run(&short), Err(14), "a value that is not there: EFAULT");
}

#[test]
fn the_ack_timeout_and_tos_options_reach_the_qp_attributes() {
    let (_client, mut server, _cid, sid) = requested(b"");
    assert_eq!(
        server.qp_attr(sid, RTS)[134],
        19,
        "the default: packet life time + 1"
    );
    for (name, value) in [(0u32, 0x48u8), (3, 21)] {
        let mut b = cmd_buf(cmd::SET_OPTION, 32, 0);
        put32(&mut b, 16, sid);
        put32(&mut b, 24, name);
        put32(&mut b, 28, 1);
        b.push(value);
        server.ok(&b);
    }
    assert_eq!(
        server.qp_attr(sid, RTS)[134],
        21,
        "RDMA_OPTION_ID_ACK_TIMEOUT"
    );
    assert_eq!(
        server.qp_attr(sid, RTR)[62],
        0x48,
        "RDMA_OPTION_ID_TOS: the traffic class"
    );
}

#[test]
fn a_fresh_id_can_be_handed_over_and_a_bound_one_cannot() {
    let mut side = Side::new("10.0.0.1", 0x10);
    let fresh = side.create(7);
    assert!(
        fresh >= softverbs_cm::ID_HANDLES,
        "above the kernel's numbers"
    );
    assert_eq!(side.agent.fresh(fresh), Some((7, PS_TCP, 2)));
    let bound = side.create(8);
    side.bind(bound, "10.0.0.1:7471").unwrap();
    assert_eq!(side.agent.fresh(bound), None, "bound");
    side.agent.hand_over(bound);
    side.agent.hand_over(fresh);
    let destroy = |id: u32| {
        let mut d = cmd_buf(cmd::DESTROY_ID, 24, 4);
        put64(&mut d, 8, 0x10);
        put32(&mut d, 16, id);
        d
    };
    assert_eq!(side.run(&destroy(fresh)).err(), Some(2), "gone: ENOENT");
    assert!(side.run(&destroy(bound)).is_ok(), "kept");
}

#[test]
fn only_a_listener_on_every_address_is_a_wildcard_listener() {
    let mut s = Side::new("10.0.0.1", 1);
    let wild = s.create(7);
    s.bind(wild, "0.0.0.0:7471").unwrap();
    assert_eq!(
        s.agent.wildcard_listener(wild),
        None,
        "bound, not listening"
    );
    s.listen(wild);
    let (uid, ps, _, addr) = s.agent.wildcard_listener(wild).unwrap();
    assert_eq!(
        (uid, ps, addr),
        (7, PS_TCP, "0.0.0.0:7471".parse().unwrap())
    );
    let unbound = s.create(8);
    s.listen(unbound);
    let (_, _, _, any) = s.agent.wildcard_listener(unbound).unwrap();
    assert!(
        any.is_ipv4() && any.ip().is_unspecified() && any.port() != 0,
        "LISTEN bound it to 0.0.0.0 (the kernel's AF_INET) and a port"
    );
    let device = s.create(9);
    s.bind(device, "10.0.0.1:7472").unwrap();
    s.listen(device);
    assert_eq!(
        s.agent.wildcard_listener(device),
        None,
        "a device's address"
    );
}

/// Rule: a listener holds at most its backlog of connection requests the
/// application has not read; one more is dropped without an answer (the
/// kernel's ucma fails it with ENOMEM, which the CM does not reject), and
/// the peer's CM sending it again gets in once the queue was read.
#[test]
fn requests_beyond_the_backlog_wait_for_the_application_to_read() {
    let mut server = Side::new("10.0.0.2", 0x20);
    let mut client = Side::new("10.0.0.1", 0x10);
    let listener = server.create(100);
    server.bind(listener, "0.0.0.0:7471").unwrap();
    server.listen(listener); // backlog 10
    for uid in 0..11 {
        let id = client.create(200 + uid);
        client.resolve(id, "10.0.0.2:7471".parse().unwrap());
        // A QP each: two requests from one QP would be a stale one.
        client.connect(id, 0x111 + uid as u32, b"");
    }
    assert_eq!(exchange(&mut client, &mut server), 11, "11 REQs, no REJ");
    let mut read = 0;
    while let Some(ev) = server.try_event() {
        assert_eq!(ev.event, event::CONNECT_REQUEST);
        read += 1;
    }
    assert_eq!(read, 10, "the backlog");
    client.now = client.agent.poll_timeout().expect("REQ retries armed");
    client.tick();
    exchange(&mut client, &mut server);
    let late = server.event();
    assert_eq!((late.event, late.uid), (event::CONNECT_REQUEST, 100));
    assert!(server.try_event().is_none(), "the others were known");
}

/// Rule: `rdma_listen`'s backlog of 0 or less, or above the kernel's
/// `max_backlog` (1024), is 1024.
#[test]
fn a_backlog_of_zero_is_the_maximum() {
    let mut server = Side::new("10.0.0.2", 0x20);
    let mut client = Side::new("10.0.0.1", 0x10);
    let listener = server.create(100);
    server.bind(listener, "0.0.0.0:7471").unwrap();
    let mut b = cmd_buf(cmd::LISTEN, 16, 0);
    put32(&mut b, 8, listener);
    put32(&mut b, 12, 0);
    server.ok(&b);
    for uid in 1..=1025 {
        let id = client.create(uid);
        client.resolve(id, "10.0.0.2:7471".parse().unwrap());
        client.connect(id, 0x1000 + uid as u32, b"");
    }
    exchange(&mut client, &mut server);
    let mut read = 0;
    while server.try_event().is_some() {
        read += 1;
    }
    assert_eq!(read, 1024);
}

/// The MADs of one whole RC connection (REQ, REP, RTU, DREQ, DREP), of a
/// refused one (REJ) and of a SIDR exchange, as the agents sent them:
/// starting points for mutations that reach past the parser.
fn sample_mads() -> Vec<Vec<u8>> {
    let mut mads = Vec::new();
    let mut record = |a: &mut Side, b: &mut Side| loop {
        let mut moved = false;
        while let Some(m) = a.agent.poll_mad() {
            mads.push(m.mad.to_vec());
            b.agent.handle_mad(b.now, m.src, m.dst, &m.mad);
            moved = true;
        }
        while let Some(m) = b.agent.poll_mad() {
            mads.push(m.mad.to_vec());
            a.agent.handle_mad(a.now, m.src, m.dst, &m.mad);
            moved = true;
        }
        if !moved {
            break;
        }
    };
    let (mut client, mut server, id) = connecting(
        Side::new("10.0.0.2", 0x20),
        Side::new("10.0.0.1", 0x10),
        b"x",
    );
    record(&mut client, &mut server);
    let sid = server.event().id;
    server.accept(sid, 300, 0x222, b"y", true).unwrap();
    record(&mut client, &mut server);
    client.accept(id, 200, 0, &[], false).unwrap();
    record(&mut client, &mut server);
    client.simple(cmd::DISCONNECT, id).unwrap();
    record(&mut client, &mut server);
    let (mut client, mut server, _) = connecting(
        Side::new("10.0.0.2", 0x20),
        Side::new("10.0.0.1", 0x10),
        b"",
    );
    record(&mut client, &mut server);
    let sid = server.event().id;
    server.simple(cmd::REJECT, sid).unwrap();
    record(&mut client, &mut server);
    let (mut client, mut server, cid) = ud_pair(true);
    client.connect(cid, 0x333, b"u");
    record(&mut client, &mut server);
    let sid = server.event().id;
    server.accept(sid, 300, 0x444, b"v", true).unwrap();
    record(&mut client, &mut server);
    assert!(mads.len() >= 8, "{} MADs sampled", mads.len());
    mads
}

/// Rule: no MAD from the network makes an agent panic, in any state of a
/// connection: valid messages with a few bytes changed (comm IDs, QPNs,
/// lengths, attribute IDs, private data) or cut short, delivered to
/// either side at every step of a handshake and a teardown, with timers
/// run between them; the agents still answer commands afterwards.
#[test]
fn mutated_mads_at_every_step_are_handled_without_a_panic() {
    let samples = sample_mads();
    let mut rng = fastrand::Rng::with_seed(13);
    let (mut sent, mut parsed) = (0, 0);
    for round in 0..300 {
        let (mut client, mut server, id) = connecting(
            Side::new("10.0.0.2", 0x20),
            Side::new("10.0.0.1", 0x10),
            b"z",
        );
        for step in 0..6 {
            for _ in 0..rng.usize(1..6) {
                let mut mad = samples[rng.usize(..samples.len())].clone();
                for _ in 0..rng.usize(1..5) {
                    let at = rng.usize(..mad.len());
                    mad[at] = match rng.u8(..4) {
                        0 => 0,
                        1 => 0xff,
                        _ => rng.u8(..),
                    };
                }
                if rng.u8(..8) == 0 {
                    mad.truncate(rng.usize(..mad.len()));
                }
                let (to, from) = if rng.bool() {
                    (&mut client, server.ip)
                } else {
                    (&mut server, client.ip)
                };
                to.agent.handle_mad(to.now, from, to.ip, &mad);
                sent += 1;
                parsed += usize::from(CmMessage::parse_mad(&mad).is_ok());
            }
            exchange(&mut client, &mut server);
            for side in [&mut client, &mut server] {
                while let Some(ev) = side.try_event() {
                    match (step, ev.event) {
                        (_, event::CONNECT_REQUEST) => {
                            let _ = side.accept(ev.id, 300, 0x222, b"", true);
                        }
                        (_, event::CONNECT_RESPONSE) => {
                            let _ = side.accept(ev.id, 200, 0, &[], false);
                        }
                        _ => {}
                    }
                }
                if rng.u8(..3) == 0 {
                    side.now += 1 << rng.u32(20..34);
                    side.tick();
                }
            }
            if step == 3 {
                let _ = client.simple(cmd::DISCONNECT, id);
            }
        }
        // Both still execute commands (`create` fails the test if not).
        client.create(900 + round);
        server.create(900 + round);
    }
    assert!(
        parsed * 3 > sent,
        "only {parsed} of {sent} mutated MADs parse: the mutations stop at the parser"
    );
}

/// Rule (as the kernel reports a device removed): when the embedder can
/// no longer carry a device's MADs (its daemon died), every id on that
/// device gets RDMA_CM_EVENT_DEVICE_REMOVAL and sends nothing more: a
/// connected process would otherwise wait for ever for its peer's DREQ.
#[test]
fn ids_on_a_device_that_can_no_longer_speak_hear_it_was_removed() {
    let (mut client, mut server, cid, sid) = requested(b"");
    server.accept(sid, 300, 0x222, b"", true).unwrap();
    exchange(&mut client, &mut server);
    assert_eq!(client.event().event, event::CONNECT_RESPONSE);
    let other = client.create(201);
    client.bind(other, "10.0.0.1:0").unwrap();
    let unbound = client.create(202);

    client.agent.device_removed(client.ip);
    let mut removed: Vec<u32> = std::iter::from_fn(|| client.try_event())
        .map(|e| {
            assert_eq!((e.event, e.status), (event::DEVICE_REMOVAL, 0));
            e.id
        })
        .collect();
    removed.sort();
    assert_eq!(
        removed,
        [cid, other],
        "the ids on the device, not {unbound}"
    );
    client.accept(cid, 200, 0, &[], false).ok();
    client.now += 60_000_000_000;
    client.tick();
    assert!(
        client.agent.poll_mad().is_none(),
        "nothing sent after the removal"
    );
}

/// Sets the int option `name` (level RDMA_OPTION_ID) of `id` to `value`.
fn set_int_option(s: &mut Side, id: u32, name: u32, value: i32) -> Result<Reply, i32> {
    let mut b = cmd_buf(cmd::SET_OPTION, 32, 0);
    put32(&mut b, 16, id);
    put32(&mut b, 24, name);
    put32(&mut b, 28, 4);
    b.extend_from_slice(&value.to_ne_bytes());
    s.run(&b)
}

/// What a client at `client` connecting to port 7471 of `server` hears
/// from a listener bound to `bound` with `afonly` set as given (None:
/// the default): CONNECT_REQUEST reaches the server, or a REJ reason.
fn listener_family_answer(
    server: &str,
    client: &str,
    bound: &str,
    afonly: Option<i32>,
) -> Result<(), i32> {
    listener_family_answer_on(false, server, client, bound, afonly)
}

/// As [`listener_family_answer`], on a server host whose
/// `net.ipv6.bindv6only` is `bindv6only`.
fn listener_family_answer_on(
    bindv6only: bool,
    server: &str,
    client: &str,
    bound: &str,
    afonly: Option<i32>,
) -> Result<(), i32> {
    let (mut server, mut client) = (Side::new(server, 0x20), Side::new(client, 0x10));
    server.agent.set_bindv6only(bindv6only);
    let listener = server.create(100);
    if let Some(v) = afonly {
        set_int_option(&mut server, listener, 2, v).unwrap();
    }
    server.bind(listener, bound).unwrap();
    server.listen(listener);
    let id = client.create(200);
    let dst = SocketAddr::new(server.ip, 7471);
    client.resolve(id, dst);
    client.connect(id, 0x111, &[]);
    exchange(&mut client, &mut server);
    match server.try_event() {
        Some(ev) if ev.event == event::CONNECT_REQUEST => Ok(()),
        _ => Err(client.event().status),
    }
}

/// Rule (the kernel's `rdma_bind_addr` and `cma_match_private_data`): a
/// wildcard listener bound with AF_INET takes IPv4 requests only; one
/// bound with AF_INET6 takes both families unless RDMA_OPTION_ID_AFONLY
/// is set, and the option overrides either default. A request the
/// wildcard (listening on every device) does not take is rejected as the
/// consumer (28: rdma_cm finds no listener, `cm_destroy_id` rejects).
#[test]
fn a_wildcard_listener_takes_the_families_its_afonly_allows() {
    let (v4, v4c, v6, v6c) = ("10.0.0.2", "10.0.0.1", "fd00::2", "fd00::1");
    let cases = [
        (v4, v4c, "0.0.0.0:7471", None, Ok(())),
        (v6, v6c, "0.0.0.0:7471", None, Err(28)),
        (v6, v6c, "0.0.0.0:7471", Some(0), Ok(())),
        (v6, v6c, "[::]:7471", None, Ok(())),
        (v4, v4c, "[::]:7471", None, Ok(())),
        (v4, v4c, "[::]:7471", Some(1), Err(28)),
        (v6, v6c, "[::]:7471", Some(1), Ok(())),
    ];
    for (server, client, bound, afonly, answer) in cases {
        assert_eq!(
            listener_family_answer(server, client, bound, afonly),
            answer,
            "{client} to a listener on {bound}, AFONLY {afonly:?}"
        );
    }
}

/// Rule (the kernel's `rdma_bind_addr`): where `net.ipv6.bindv6only` is
/// set, an AF_INET6 wildcard listener is address-family only unless
/// RDMA_OPTION_ID_AFONLY says otherwise; AF_INET ones do not change.
#[test]
fn bindv6only_makes_an_ipv6_wildcard_afonly_by_default() {
    let (v4, v4c, v6, v6c) = ("10.0.0.2", "10.0.0.1", "fd00::2", "fd00::1");
    let cases = [
        (v4, v4c, "[::]:7471", None, Err(28)),
        (v6, v6c, "[::]:7471", None, Ok(())),
        (v4, v4c, "[::]:7471", Some(0), Ok(())),
        (v4, v4c, "0.0.0.0:7471", None, Ok(())),
    ];
    for (server, client, bound, afonly, answer) in cases {
        assert_eq!(
            listener_family_answer_on(true, server, client, bound, afonly),
            answer,
            "{client} to a listener on {bound}, AFONLY {afonly:?}, bindv6only 1"
        );
    }
}

/// Rule (the kernel's `cm_destroy_id` from SIDR_REQ_RCVD): a UD request
/// that a listener of the port does not take (an AF_INET wildcard, an
/// IPv6 request) is rejected, UNREACHABLE with status 2, where one to a
/// port nobody listens on is "unsupported", status 1.
#[test]
fn a_ud_request_a_listener_does_not_take_is_rejected() {
    let mut server = Side::new("fd00::2", 0x20);
    let mut client = Side::new("fd00::1", 0x10);
    let l = server.create_in(100, PS_UDP);
    server.bind(l, "0.0.0.0:7000").unwrap();
    server.listen(l);
    let id = client.create_in(200, PS_UDP);
    client.resolve(id, "[fd00::2]:7000".parse().unwrap());
    client.connect(id, 0x333, &[]);
    exchange(&mut client, &mut server);
    assert!(server.try_event().is_none(), "the listener hears nothing");
    let ev = client.event();
    assert_eq!((ev.event, ev.status), (event::UNREACHABLE, 2));
}

/// An id belongs to the open of the file that made it: named through
/// another open, a command is EINVAL and leaves it alone, as the
/// kernel's `ucma_get_ctx` refuses a context of another file (before,
/// any open could destroy, bind or query any id of the process).
#[test]
fn an_id_named_through_another_channel_is_einval() {
    const OTHER: i32 = 9;
    let mut s = Side::new("10.0.0.1", 0x10);
    s.agent.open_channel(OTHER);
    let id = s.create(7);
    let mut d = cmd_buf(cmd::DESTROY_ID, 24, 4);
    put64(&mut d, 8, 0x10);
    put32(&mut d, 16, id);
    let other = s.agent.command(s.now, OTHER, &d, &mut s.ports);
    assert_eq!(other, Err(EINVAL), "destroyed through another channel");
    let mut l = cmd_buf(cmd::LISTEN, 16, 0);
    put32(&mut l, 8, id);
    let other = s.agent.command(s.now, OTHER, &l, &mut s.ports);
    assert_eq!(other, Err(EINVAL), "listened through another channel");
    let unknown = {
        put32(&mut d, 16, id + 1000);
        s.agent.command(s.now, OTHER, &d, &mut s.ports)
    };
    assert_eq!(unknown, Err(ENOENT), "an id nobody has");
    destroy(&mut s, id);
}

/// A channel renamed (the application closed the number it was opened as
/// but holds a duplicate) keeps its queued events and its ids under the
/// new number; the old number is no channel.
#[test]
fn a_renamed_channel_keeps_its_events_and_ids() {
    const DUP: i32 = 9;
    let mut s = Side::new("10.0.0.1", 0x10);
    let id = s.create(7);
    let mut r = cmd_buf(cmd::RESOLVE_IP, 72, 0);
    abi::put_sockaddr(&mut r[36..64], "10.0.0.1:7000".parse().unwrap());
    put32(&mut r, 64, id);
    put32(&mut r, 68, 2000);
    s.ok(&r);
    while s.agent.poll_ready().is_some() {}
    s.agent.rename_channel(CH, DUP);
    assert!(s.agent.has_events(DUP) && !s.agent.has_events(CH));
    let mut g = cmd_buf(cmd::GET_EVENT, 16, 336);
    put64(&mut g, 8, 0x3000);
    let old = s.agent.command(s.now, CH, &g, &mut s.ports);
    assert_eq!(old, Err(EBADF), "the old number is no channel");
    let Ok(Reply::Respond { bytes, .. }) = s.agent.command(s.now, DUP, &g, &mut s.ports) else {
        panic!("no event under the new number");
    };
    assert_eq!(Ev::decode(&bytes).event, event::ADDR_RESOLVED);
    let mut d = cmd_buf(cmd::DESTROY_ID, 24, 4);
    put64(&mut d, 8, 0x10);
    put32(&mut d, 16, id);
    let destroyed = s.agent.command(s.now, DUP, &d, &mut s.ports);
    assert!(
        destroyed.is_ok(),
        "its id, named through the new number: {destroyed:?}"
    );
}
