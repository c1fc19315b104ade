//! The host daemon as rdma_cm's port space and the router of QP1: ports
//! reserved, listened on and released through endpoints, and CM MADs sent
//! with `Endpoint::send_gsi` reaching the listener of their service or the
//! holder of their recipient's comm ID (or answered by the daemon as the
//! kernel's CM answers, or dropped and counted). Each test runs its own
//! daemon (on a thread) on its own loopback address.

use softverbs_transport::daemon::protocol::FrameHeader;
use softverbs_transport::daemon::{self, DaemonStats};
use softverbs_transport::endpoint::{Endpoint, Receiver};
use softverbs_transport::gsi::{comm_ids_of, gsi_packet, parse_gsi};
use softverbs_transport::DaemonAddress;
use softverbs_wire::cm::{
    ip_service_id, CmDrep, CmDreq, CmMessage, CmRej, CmRep, CmReq, CmRtu, CmSidrRep, CmSidrReq,
    MessageKind, PortSpace,
};
use softverbs_wire::mad::{MadHeader, MAD_LEN};
use softverbs_wire::u24::Qpn;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const TCP: u16 = 0x0106;
const UDP: u16 = 0x0111;
const IB: u16 = 0x013F;

/// A daemon of the test's own, on a loopback address of its own.
struct Host {
    ip: IpAddr,
    daemon: DaemonAddress,
    thread: JoinHandle<io::Result<DaemonStats>>,
}

fn host() -> Host {
    let ip = Ipv4Addr::new(
        127,
        fastrand::u8(1..255),
        fastrand::u8(..),
        fastrand::u8(1..254),
    );
    let config = daemon::DaemonConfig {
        socket: format!("softverbs-test-cm-{}-{ip}", std::process::id()),
        idle_exit: Duration::from_millis(200),
    };
    let (daemon, thread) = daemon::server::start_thread(config).unwrap();
    Host {
        ip: IpAddr::V4(ip),
        daemon,
        thread,
    }
}

impl Host {
    fn endpoint(&self) -> Endpoint {
        Endpoint::open(self.ip, &self.daemon).unwrap()
    }

    /// What the daemon counted, once every endpoint is closed (it leaves
    /// when idle).
    fn stats(self) -> DaemonStats {
        self.thread.join().unwrap().unwrap()
    }
}

fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    r.unwrap_err().raw_os_error().unwrap()
}

/// A comm ID (or SIDR request ID) of `e`'s first block.
fn comm_id(e: &Endpoint, n: u32) -> u32 {
    comm_ids_of(e.slots()[0]).start() + n
}

fn mad(message: CmMessage, tid: u64) -> [u8; MAD_LEN] {
    let mut mad = [0; MAD_LEN];
    message.emit_mad(tid, 0, &mut mad).unwrap();
    mad
}

/// The QP number a REQ from requester `local_comm_id` names as its own
/// (a DREQ to the requester must name it).
fn requester_qpn(local_comm_id: u32) -> Qpn {
    Qpn::new_masked(0x40_0000 | (local_comm_id & 0xffff))
}

fn req(local_comm_id: u32, ps: PortSpace, port: u16) -> [u8; MAD_LEN] {
    let req = CmReq {
        local_comm_id,
        service_id: ip_service_id(ps, port),
        local_qpn: requester_qpn(local_comm_id),
        ..CmReq::default()
    };
    mad(
        CmMessage::Req(req),
        0x0000_0006_3600_0001 | u64::from(local_comm_id) << 8,
    )
}

/// The next packet that reaches `e` (within 5 s), with its frame header.
fn next_packet(e: &mut Endpoint) -> (FrameHeader, Vec<u8>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut got = Vec::new();
        e.receive(Receiver::ProgressThread, |h, bytes, _| {
            let segment = usize::from(h.segment).max(1);
            got.extend(bytes.chunks(segment).map(|p| (h, p.to_vec())));
        })
        .unwrap();
        assert!(got.len() <= 1, "one packet expected, got {}", got.len());
        if let Some(p) = got.pop() {
            return p;
        }
        assert!(Instant::now() < deadline, "no packet arrived");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The MAD of the next packet to reach `e`, checked as QP1 checks it.
fn next_mad(e: &mut Endpoint) -> (FrameHeader, [u8; MAD_LEN]) {
    let (h, packet) = next_packet(e);
    let mad = parse_gsi(h.src, h.dst, &packet).expect("a GSI packet");
    (h, mad)
}

/// The CM message of the next packet to reach `e`, with its MAD header.
fn next_cm(e: &mut Endpoint) -> (MadHeader, CmMessage) {
    CmMessage::parse_mad(&next_mad(e).1).expect("a CM message")
}

/// The MADs of the next `n` packets to reach `e` (within 5 s), however
/// they are framed.
fn next_mads(e: &mut Endpoint, n: usize) -> Vec<[u8; MAD_LEN]> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while got.len() < n {
        e.receive(Receiver::ProgressThread, |h, bytes, _| {
            let segment = usize::from(h.segment).max(1);
            got.extend(
                bytes
                    .chunks(segment)
                    .filter_map(|p| parse_gsi(h.src, h.dst, p)),
            );
        })
        .unwrap();
        assert!(
            Instant::now() < deadline,
            "{} of {n} packets arrived",
            got.len()
        );
        std::thread::sleep(Duration::from_millis(2)); // the poll interval
    }
    got
}

/// Nothing reaches any of `es` for a while.
fn quiet(es: &mut [&mut Endpoint]) {
    std::thread::sleep(Duration::from_millis(300));
    for (i, e) in es.iter_mut().enumerate() {
        let mut n = 0;
        e.receive(Receiver::ProgressThread, |_, _, _| n += 1)
            .unwrap();
        assert_eq!(n, 0, "endpoint {i} got something");
    }
}

/// The kernel's rules for binds without REUSEADDR: one holder of a port
/// per address, none beside a holder on the unspecified address; port
/// spaces apart; ephemeral ports from 32768..=60999; listen and release
/// only what one holds; everything freed when the endpoint closes.
#[test]
fn the_port_space_follows_the_kernels_rules() {
    let h = host();
    let (mut a, mut b) = (h.endpoint(), h.endpoint());
    let ip = h.ip;
    let IpAddr::V4(v4) = ip else { unreachable!() };
    let [w, x, y, z] = v4.octets();
    let other: IpAddr = Ipv4Addr::new(w, x, y, z + 1).into();
    let any4: IpAddr = Ipv4Addr::UNSPECIFIED.into();
    let any6: IpAddr = "::".parse().unwrap();
    let v6: IpAddr = "::1".parse().unwrap();

    assert_eq!(a.reserve(TCP, ip, 7000, false).unwrap(), 7000);
    assert_eq!(errno(b.reserve(TCP, ip, 7000, false)), libc::EADDRINUSE);
    assert_eq!(
        errno(a.reserve(TCP, ip, 7000, false)),
        libc::EADDRINUSE,
        "one id each"
    );
    assert_eq!(
        b.reserve(UDP, ip, 7000, false).unwrap(),
        7000,
        "another space"
    );
    assert_eq!(
        b.reserve(TCP, other, 7000, false).unwrap(),
        7000,
        "another address"
    );
    assert_eq!(
        errno(b.reserve(TCP, any4, 7000, false)),
        libc::EADDRNOTAVAIL
    );
    assert_eq!(
        errno(b.reserve(TCP, any6, 7000, false)),
        libc::EADDRNOTAVAIL
    );

    assert_eq!(a.reserve(IB, any4, 7001, false).unwrap(), 7001);
    for addr in [ip, other, v6, any6] {
        assert_eq!(errno(b.reserve(IB, addr, 7001, false)), libc::EADDRNOTAVAIL);
    }
    assert_eq!(errno(b.reserve(0x0107, ip, 7002, false)), libc::EINVAL);

    let p = a.reserve(TCP, ip, 0, false).unwrap();
    let q = a.reserve(TCP, ip, 0, false).unwrap();
    assert!((32768..=60999).contains(&p) && (32768..=60999).contains(&q));
    assert_ne!(p, q);
    assert_eq!(
        b.reserve(TCP, other, p, false).unwrap(),
        p,
        "a holds it elsewhere"
    );
    assert_eq!(errno(b.reserve(TCP, any6, q, false)), libc::EADDRNOTAVAIL);

    assert_eq!(errno(b.listen(TCP, ip, 7000)), libc::EINVAL, "a's, not b's");
    assert_eq!(
        errno(a.listen(TCP, any4, 7000)),
        libc::EINVAL,
        "not that address"
    );
    a.listen(TCP, ip, 7000).unwrap();
    a.listen(TCP, ip, 7000).unwrap();
    assert_eq!(errno(b.release(TCP, ip, 7000)), libc::EINVAL);
    a.release(TCP, ip, 7000).unwrap();
    assert_eq!(
        errno(a.release(TCP, ip, 7000)),
        libc::EINVAL,
        "released once"
    );
    assert_eq!(b.reserve(TCP, ip, 7000, false).unwrap(), 7000);

    // a's close frees its ports (its hang-up may reach the daemon just
    // after b's next request).
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.reserve(IB, any4, 7001, false).is_err() {
        assert!(Instant::now() < deadline, "a's port outlived it");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(b.reserve(TCP, ip, p, false).unwrap(), p);
    drop(b);
    let stats = h.stats();
    assert_eq!(
        stats.gsi_dropped + stats.gsi_unrouted + stats.gsi_answered,
        0
    );
}

/// A REQ reaches the endpoint listening on its service at the packet's
/// destination address (or on the unspecified address), and only it; a
/// SIDR_REQ likewise; a reservation that does not listen gets nothing.
#[test]
fn a_req_reaches_its_listener_only() {
    let h = host();
    let (mut a, mut b, mut c, mut d) = (h.endpoint(), h.endpoint(), h.endpoint(), h.endpoint());
    let ip = h.ip;
    b.reserve(TCP, ip, 18515, false).unwrap();
    b.listen(TCP, ip, 18515).unwrap();
    c.reserve(TCP, ip, 18516, false).unwrap();
    c.listen(TCP, ip, 18516).unwrap();
    d.reserve(UDP, Ipv4Addr::UNSPECIFIED.into(), 18515, false)
        .unwrap();
    d.listen(UDP, Ipv4Addr::UNSPECIFIED.into(), 18515).unwrap();

    let sent = req(comm_id(&a, 1), PortSpace::Tcp, 18515);
    a.send_gsi(ip, &sent).unwrap();
    let (header, got) = next_mad(&mut b);
    assert_eq!(got, sent);
    assert_eq!(header.src, a.local());
    assert_eq!(header.dst, SocketAddr::new(ip, 4791));
    quiet(&mut [&mut a, &mut c, &mut d]);

    let sidr = CmSidrReq {
        request_id: comm_id(&a, 2),
        pkey: 0xFFFF,
        service_id: ip_service_id(PortSpace::Udp, 18515),
        ..CmSidrReq::default()
    };
    let sidr = mad(CmMessage::SidrReq(sidr), 42);
    a.send_gsi(ip, &sidr).unwrap();
    assert_eq!(next_mad(&mut d).1, sidr, "the wildcard listener");
    quiet(&mut [&mut a, &mut b, &mut c]);

    // c holds 18517 without listening: the daemon answers the REQ.
    c.reserve(TCP, ip, 18517, false).unwrap();
    a.send_gsi(ip, &req(comm_id(&a, 3), PortSpace::Tcp, 18517))
        .unwrap();
    let (_, rej) = next_mad(&mut a);
    assert!(matches!(
        CmMessage::parse_mad(&rej),
        Ok((_, CmMessage::Rej(_)))
    ));
    quiet(&mut [&mut b, &mut c, &mut d]);
    // b goes holding a's first REQ, never answered: the daemon rejects
    // it in b's name, as the kernel's CM does for a destroyed request.
    drop(b);
    let (header, CmMessage::Rej(rej)) = next_cm(&mut a) else {
        panic!("not a REJ");
    };
    assert_eq!(
        (rej.local_comm_id, rej.remote_comm_id, rej.reason),
        (0, comm_id(&a, 1), 28)
    );
    assert_eq!(rej.message_rejected, MessageKind::Req);
    assert_eq!(
        header.tid,
        0x0000_0006_3600_0001 | u64::from(comm_id(&a, 1)) << 8
    );
    drop((a, c, d));
    let stats = h.stats();
    assert_eq!(
        (stats.gsi_answered, stats.gsi_unrouted, stats.gsi_dropped),
        (2, 0, 0)
    );
}

/// A REQ for a service nobody listens on comes back as the kernel's REJ:
/// reason 8, local comm ID 0, remote comm ID the REQ's, message rejected
/// REQ, the REQ's TID, from the daemon's QP1 on 4791; a SIDR_REQ as a
/// SIDR_REP with status 1 and its request ID.
#[test]
fn a_req_nobody_listens_for_is_rejected_as_the_kernel_does() {
    let h = host();
    let mut a = h.endpoint();
    let id = comm_id(&a, 7);
    let sent = req(id, PortSpace::Tcp, 4242);
    a.send_gsi(h.ip, &sent).unwrap();
    let (header, rej) = next_mad(&mut a);
    assert_eq!(header.src, SocketAddr::new(h.ip, 4791));
    let (rej_header, message) = CmMessage::parse_mad(&rej).unwrap();
    let sent_header = MadHeader::parse(&sent).unwrap();
    assert_eq!(rej_header, MadHeader::cm(0x0012, sent_header.tid, 0));
    let CmMessage::Rej(rej) = message else {
        panic!("{message:?}")
    };
    assert_eq!(
        rej,
        CmRej {
            local_comm_id: 0,
            remote_comm_id: id,
            message_rejected: MessageKind::Req,
            reason: 8,
            ..CmRej::default()
        }
    );

    let sidr = CmSidrReq {
        request_id: comm_id(&a, 8),
        service_id: ip_service_id(PortSpace::Udp, 4242),
        ..CmSidrReq::default()
    };
    a.send_gsi(h.ip, &mad(CmMessage::SidrReq(sidr), 99))
        .unwrap();
    let (_, rep) = next_mad(&mut a);
    let (rep_header, message) = CmMessage::parse_mad(&rep).unwrap();
    assert_eq!(rep_header.tid, 99);
    let CmMessage::SidrRep(rep) = message else {
        panic!("{message:?}")
    };
    assert_eq!((rep.request_id, rep.status), (sidr.request_id, 1));
    assert_eq!(rep.service_id, sidr.service_id);
    drop(a);
    assert_eq!(h.stats().gsi_answered, 2);
}

/// A REQ and a SIDR_REQ that come while their port is held but not yet
/// listened on (a server between its bind and its listen) wait for the
/// listener and reach it when it listens, with no REJ for their sender.
#[test]
fn a_request_that_comes_before_its_listener_reaches_it() {
    let h = host();
    let (mut a, mut c) = (h.endpoint(), h.endpoint());
    let ip = h.ip;
    c.reserve(TCP, ip, 18601, false).unwrap();
    c.reserve(UDP, ip, 18602, false).unwrap();
    let sent = req(comm_id(&a, 1), PortSpace::Tcp, 18601);
    a.send_gsi(ip, &sent).unwrap();
    let sidr = CmSidrReq {
        request_id: comm_id(&a, 2),
        service_id: ip_service_id(PortSpace::Udp, 18602),
        ..CmSidrReq::default()
    };
    let sidr = mad(CmMessage::SidrReq(sidr), 5);
    a.send_gsi(ip, &sidr).unwrap();
    // The daemon has taken both once it answers what a's next packet, a
    // DREQ for a block nobody holds, asks (its socket reads in order).
    let free = (1..=4095u16)
        .find(|b| !a.slots().contains(b) && !c.slots().contains(b))
        .unwrap();
    let dreq = CmDreq {
        local_comm_id: comm_id(&a, 3),
        remote_comm_id: *comm_ids_of(free).start(),
        ..CmDreq::default()
    };
    a.send_gsi(ip, &mad(CmMessage::Dreq(dreq), 6)).unwrap();
    assert!(matches!(next_cm(&mut a), (_, CmMessage::Drep(_))));

    c.listen(TCP, ip, 18601).unwrap();
    assert_eq!(next_mad(&mut c).1, sent);
    c.listen(UDP, ip, 18602).unwrap();
    assert_eq!(next_mad(&mut c).1, sidr);
    // The REQ's sender gives it up: its REJ follows the REQ.
    let rej = gave_up(comm_id(&a, 1));
    a.send_gsi(ip, &rej).unwrap();
    assert_eq!(next_mad(&mut c).1, rej);
    quiet(&mut [&mut a, &mut c]);
    drop((a, c));
    let stats = h.stats();
    assert_eq!((stats.gsi_waited, stats.gsi_answered), (2, 1));
}

/// The REJ a requester that gave up its REQ before any answer sends, as
/// the kernel's CM: reason "timeout", its own comm ID, no remote one.
fn gave_up(local_comm_id: u32) -> [u8; MAD_LEN] {
    let rej = CmRej {
        local_comm_id,
        message_rejected: MessageKind::Other,
        reason: 4,
        ..CmRej::default()
    };
    mad(CmMessage::Rej(rej), 9)
}

/// Such a REJ, which names no recipient, reaches the client the REQ went
/// to, found by the REQ's source address and comm ID; one naming another
/// comm ID, or from another address, is dropped and counted.
#[test]
fn a_rej_of_a_req_given_up_reaches_the_client_the_req_went_to() {
    let h = host();
    let (mut a, mut b, mut c) = (h.endpoint(), h.endpoint(), h.endpoint());
    b.reserve(TCP, h.ip, 18515, false).unwrap();
    b.listen(TCP, h.ip, 18515).unwrap();
    let requester = comm_id(&a, 1);
    let sent = req(requester, PortSpace::Tcp, 18515);
    a.send_gsi(h.ip, &sent).unwrap();
    assert_eq!(next_mad(&mut b).1, sent);

    a.send_gsi(h.ip, &gave_up(requester + 1)).unwrap();
    let raw = UdpSocket::bind(SocketAddr::new(another_host(&h), 0)).unwrap();
    let to = SocketAddr::new(h.ip, 4791);
    let forged = gsi_packet(raw.local_addr().unwrap(), to, &gave_up(requester)).unwrap();
    raw.send_to(&forged, to).unwrap();
    a.send_gsi(h.ip, &gave_up(requester)).unwrap();
    assert_eq!(next_mad(&mut b).1, gave_up(requester));
    quiet(&mut [&mut a, &mut b, &mut c]);
    drop((a, b, c));
    let stats = h.stats();
    assert_eq!((stats.gsi_unrouted, stats.gsi_dropped), (2, 0));
}

/// A client that dies with REQs unanswered: the daemon sends each peer
/// the REJ "timeout" the kernel's CM sends in a dead process's name (its
/// comm ID, its CA GUID in the ARI, the REQ's TID), through itself to a
/// listener on this host and over the wire to a peer elsewhere; a REQ a
/// REP answered gets the REJ and DREQ of a connection without its RTU
/// instead. A comm ID of another client's is refused.
#[test]
fn a_client_gone_gives_up_its_unanswered_reqs() {
    let h = host();
    let (mut a, mut b) = (h.endpoint(), h.endpoint());
    b.reserve(TCP, h.ip, 18515, false).unwrap();
    b.listen(TCP, h.ip, 18515).unwrap();
    let (unanswered, answered, far_away) = (comm_id(&a, 1), comm_id(&a, 2), comm_id(&a, 3));
    let guid = 0x0200_0000_0000_0042;
    let sent = CmReq {
        local_comm_id: unanswered,
        service_id: ip_service_id(PortSpace::Tcp, 18515),
        local_ca_guid: guid,
        ..CmReq::default()
    };
    a.send_gsi(h.ip, &mad(CmMessage::Req(sent), 77)).unwrap();
    a.requesting(h.ip, unanswered, guid, 77).unwrap();
    next_mad(&mut b);
    a.send_gsi(h.ip, &req(answered, PortSpace::Tcp, 18515))
        .unwrap();
    a.requesting(h.ip, answered, guid, 78).unwrap();
    next_mad(&mut b);
    let rep = CmRep {
        local_comm_id: comm_id(&b, 1),
        remote_comm_id: answered,
        ..CmRep::default()
    };
    b.send_gsi(h.ip, &mad(CmMessage::Rep(rep), 3)).unwrap();
    next_mad(&mut a);
    // A peer on another host (another loopback address, its own 4791).
    let elsewhere = another_host(&h);
    let far = UdpSocket::bind(SocketAddr::new(elsewhere, 4791)).unwrap();
    a.requesting(elsewhere, far_away, guid, 79).unwrap();
    assert_eq!(
        errno(a.requesting(elsewhere, comm_id(&b, 2), guid, 80)),
        libc::EINVAL,
        "another client's comm ID"
    );
    drop(a);

    let mut rejs = Vec::new();
    for m in next_mads(&mut b, 3) {
        match CmMessage::parse_mad(&m).unwrap() {
            (header, CmMessage::Rej(rej)) => rejs.push((header.tid, rej)),
            (_, CmMessage::Dreq(dreq)) => assert_eq!(dreq.local_comm_id, answered),
            other => panic!("{other:?}"),
        }
    }
    rejs.sort_by_key(|(_, rej)| rej.reason);
    let [(gave_up_tid, gave_up), (_, farewell)] = rejs[..] else {
        panic!("{rejs:?}");
    };
    let timeout = |rej: &CmRej, comm_id| {
        assert_eq!(
            (rej.local_comm_id, rej.remote_comm_id, rej.reason),
            (comm_id, 0, 4)
        );
        assert_eq!(rej.message_rejected, MessageKind::Other);
        assert_eq!(rej.ari[..8], u64::to_be_bytes(guid));
    };
    assert_eq!(gave_up_tid, 77);
    timeout(&gave_up, unanswered);
    assert_eq!(
        (
            farewell.local_comm_id,
            farewell.remote_comm_id,
            farewell.reason
        ),
        (answered, rep.local_comm_id, 28)
    );
    let (from, header, CmMessage::Rej(rej)) = far_cm(&far) else {
        panic!("not a REJ");
    };
    assert_eq!((from.ip(), header.tid), (h.ip, 79));
    timeout(&rej, far_away);
    quiet(&mut [&mut b]);
}

/// A REQ sent again (its REP is late) goes to the client holding its
/// request even once that client's listener is gone, as the kernel's CM
/// finds a duplicate REQ before it looks for a listener: not REJ 8.
#[test]
fn a_req_sent_again_reaches_its_request_after_the_listener_went() {
    let h = host();
    let (mut a, mut b) = (h.endpoint(), h.endpoint());
    b.reserve(TCP, h.ip, 18520, false).unwrap();
    b.listen(TCP, h.ip, 18520).unwrap();
    let sent = req(comm_id(&a, 1), PortSpace::Tcp, 18520);
    a.send_gsi(h.ip, &sent).unwrap();
    assert_eq!(next_mad(&mut b).1, sent);
    b.release(TCP, h.ip, 18520).unwrap();
    a.send_gsi(h.ip, &sent).unwrap();
    assert_eq!(next_mad(&mut b).1, sent, "the request's holder");
    quiet(&mut [&mut a]);
    // A REQ of another comm ID finds no listener: REJ 8.
    a.send_gsi(h.ip, &req(comm_id(&a, 2), PortSpace::Tcp, 18520))
        .unwrap();
    let (_, CmMessage::Rej(rej)) = next_cm(&mut a) else {
        panic!("not a REJ");
    };
    assert_eq!((rej.remote_comm_id, rej.reason), (comm_id(&a, 2), 8));
}

/// A request its holder rejected is over: when the holder goes later,
/// its requester gets nothing more in its name.
#[test]
fn a_rejected_request_gets_no_rej_when_its_holder_goes() {
    let h = host();
    let (mut a, mut b) = (h.endpoint(), h.endpoint());
    b.reserve(TCP, h.ip, 18521, false).unwrap();
    b.listen(TCP, h.ip, 18521).unwrap();
    a.send_gsi(h.ip, &req(comm_id(&a, 1), PortSpace::Tcp, 18521))
        .unwrap();
    next_mad(&mut b);
    let rej = CmRej {
        remote_comm_id: comm_id(&a, 1),
        message_rejected: MessageKind::Req,
        reason: 28,
        ..CmRej::default()
    };
    b.send_gsi(h.ip, &mad(CmMessage::Rej(rej), 5)).unwrap();
    assert!(matches!(next_cm(&mut a), (_, CmMessage::Rej(_))));
    drop(b);
    quiet(&mut [&mut a]);
}

/// A daemon that leaves (idle) while a REQ waits for a listener answers
/// it first: the REQ's sender, on another host, gets its REJ instead of
/// waiting for nothing.
#[test]
fn a_daemon_leaving_answers_the_requests_that_wait() {
    let (there, here) = (host(), host());
    let holder = there.endpoint(); // keeps `there` up until the REQ is in
    let mut a = here.endpoint();
    let id = comm_id(&a, 4);
    a.send_gsi(there.ip, &req(id, PortSpace::Tcp, 4243))
        .unwrap();
    // Loopback queues the datagram before the send returns: the daemon
    // takes it before its idle time (200 ms, under the 250 ms a request
    // waits) runs out.
    drop(holder);
    let (_, CmMessage::Rej(rej)) = next_cm(&mut a) else {
        panic!("not a REJ");
    };
    assert_eq!((rej.remote_comm_id, rej.reason), (id, 8));
    let stats = there.stats();
    assert_eq!((stats.gsi_answered, stats.gsi_waited), (1, 0));
    drop(a);
    here.stats();
}

/// REP, RTU, DREQ and SIDR_REP reach the holder of the block their
/// recipient's comm ID names (a second block too); one for a block nobody
/// holds is dropped and counted, and so is what QP1 would not take.
#[test]
fn cm_messages_reach_the_holder_of_their_comm_id() {
    let h = host();
    let (mut a, mut b, mut c) = (h.endpoint(), h.endpoint(), h.endpoint());
    let second = b.add_slot().unwrap();
    let second_block = (second.start >> 12) as u16;
    let rep = CmRep {
        local_comm_id: comm_id(&a, 1),
        remote_comm_id: comm_id(&b, 1),
        ..CmRep::default()
    };
    let rtu = CmRtu {
        local_comm_id: comm_id(&a, 1),
        remote_comm_id: comm_ids_of(second_block).start() + 5,
        ..CmRtu::default()
    };
    let dreq = CmDreq {
        local_comm_id: comm_id(&a, 1),
        remote_comm_id: comm_id(&c, 0xF_FFFF),
        ..CmDreq::default()
    };
    let sidr_rep = CmSidrRep {
        request_id: comm_id(&b, 9),
        ..CmSidrRep::default()
    };
    let for_b = [
        mad(CmMessage::Rep(rep), 1),
        mad(CmMessage::Rtu(rtu), 2),
        mad(CmMessage::SidrRep(sidr_rep), 3),
    ];
    for m in &for_b {
        a.send_gsi(h.ip, m).unwrap();
        assert_eq!(&next_mad(&mut b).1, m);
    }
    let dreq = mad(CmMessage::Dreq(dreq), 4);
    a.send_gsi(h.ip, &dreq).unwrap();
    assert_eq!(next_mad(&mut c).1, dreq);
    quiet(&mut [&mut a, &mut b, &mut c]);

    // A block nobody holds.
    let held: Vec<u16> = [&a, &b, &c]
        .iter()
        .flat_map(|e| e.slots().to_vec())
        .collect();
    let free = (1..=4095u16).find(|b| !held.contains(b)).unwrap();
    let stray = CmRep {
        remote_comm_id: *comm_ids_of(free).start(),
        ..CmRep::default()
    };
    a.send_gsi(h.ip, &mad(CmMessage::Rep(stray), 5)).unwrap();
    // Not the CM's class; then a flipped bit; then the wrong Q_Key.
    let mut other_class = mad(CmMessage::Rep(rep), 6);
    other_class[1] = 0x04;
    a.send_gsi(h.ip, &other_class).unwrap();
    let raw = UdpSocket::bind(SocketAddr::new(h.ip, 0)).unwrap();
    let to = SocketAddr::new(h.ip, 4791);
    let good = gsi_packet(raw.local_addr().unwrap(), to, &for_b[0]).unwrap();
    let mut flipped = good.clone();
    flipped[100] ^= 0x10;
    raw.send_to(&flipped, to).unwrap();
    let mut qkey = good.clone();
    qkey[15] = 1;
    let flow = softverbs_wire::Flow::from_sockets(raw.local_addr().unwrap(), to).unwrap();
    flow.seal(&mut qkey).unwrap();
    raw.send_to(&qkey, to).unwrap();
    raw.send_to(&good[..40], to).unwrap();
    // The good one still arrives, after the rest.
    raw.send_to(&good, to).unwrap();
    assert_eq!(next_mad(&mut b).1, for_b[0]);
    quiet(&mut [&mut a, &mut b, &mut c]);

    // A DREQ for a connection whose holder is gone: the daemon answers
    // with a DREP, as the kernel's CM does, so the peer does not retry.
    let gone = CmDreq {
        local_comm_id: comm_id(&a, 7),
        remote_comm_id: *comm_ids_of(free).start() + 3,
        ..CmDreq::default()
    };
    a.send_gsi(h.ip, &mad(CmMessage::Dreq(gone), 7)).unwrap();
    let (header, CmMessage::Drep(drep)) = next_cm(&mut a) else {
        panic!("not a DREP");
    };
    assert_eq!(header.tid, 7);
    assert_eq!(
        (drep.local_comm_id, drep.remote_comm_id),
        (gone.remote_comm_id, gone.local_comm_id)
    );
    // b learnt two connections (the REP and the RTU routed to it): when it
    // goes, a, their other end, gets a DREQ for each from the daemon, and
    // for the REP b never answered with an RTU a REJ before it.
    drop(b);
    let (mut dreqs, mut rejs) = (0, 0);
    for m in next_mads(&mut a, 3) {
        match CmMessage::parse_mad(&m) {
            Ok((_, CmMessage::Dreq(_))) => dreqs += 1,
            Ok((_, CmMessage::Rej(_))) => rejs += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((dreqs, rejs), (2, 1));
    drop((a, c));
    let stats = h.stats();
    assert_eq!(
        (stats.gsi_unrouted, stats.gsi_dropped, stats.gsi_answered),
        (2, 4, 4)
    );
}

/// An active side that took its peer's REP, on this host: (active,
/// passive, the REP).
fn rep_taken(h: &Host) -> (Endpoint, Endpoint, CmRep) {
    let (mut active, passive) = (h.endpoint(), h.endpoint());
    let rep = CmRep {
        local_comm_id: comm_id(&passive, 3),
        remote_comm_id: comm_id(&active, 4),
        local_qpn: Qpn::new_masked(0x1234),
        ..CmRep::default()
    };
    passive
        .send_gsi(h.ip, &mad(CmMessage::Rep(rep), 9))
        .unwrap();
    next_mad(&mut active);
    (active, passive, rep)
}

/// `rep_taken`, then the active side's RTU, routed to the passive side:
/// the connection is established on both ends, as the daemon saw it.
fn established(h: &Host) -> (Endpoint, Endpoint, CmRep) {
    let (active, mut passive, rep) = rep_taken(h);
    let rtu = CmRtu {
        local_comm_id: rep.remote_comm_id,
        remote_comm_id: rep.local_comm_id,
        ..CmRtu::default()
    };
    active.send_gsi(h.ip, &mad(CmMessage::Rtu(rtu), 9)).unwrap();
    next_mad(&mut passive);
    (active, passive, rep)
}

/// A client killed with live connections: its rdma_cm dies with it, so the
/// daemon, which saw the connection's REP routed to it and its RTU go to
/// the peer, sends its peer the DREQ the kernel's rdma_cm would have sent
/// for a killed process.
#[test]
fn the_peers_of_a_client_gone_get_its_dreq() {
    let h = host();
    let (active, mut passive, rep) = established(&h);
    drop(active);
    let (_, CmMessage::Dreq(dreq)) = next_cm(&mut passive) else {
        panic!("not a DREQ");
    };
    assert_eq!(
        (dreq.local_comm_id, dreq.remote_comm_id),
        (rep.remote_comm_id, rep.local_comm_id),
        "from the dead end, to the living one"
    );
    // The kernel's CM drops a DREQ that names another QP than its id's.
    assert_eq!(dreq.remote_qpn, rep.local_qpn, "the living end's QP");
}

/// Rule (the kernel's CM finds a connection by both comm IDs,
/// `cm_acquire_id`): REP, REJ, DREP, DREQ and RTU messages that name a live
/// connection's comm ID with another peer's, stray or forged, change
/// nothing of it: the client's death still brings its real peer the DREQ
/// (a forged REP made the daemon send it to the forger, the others made
/// it send nothing; found by a helper's campaign of forged CM messages).
#[test]
fn messages_naming_a_connection_with_another_peer_change_nothing() {
    let h = host();
    let (mut active, mut passive, rep) = established(&h);
    let forger = h.endpoint();
    let (theirs, ours) = (0x00BA_DBAD, rep.remote_comm_id);
    let forged = [
        CmMessage::Rep(CmRep {
            local_comm_id: theirs,
            remote_comm_id: ours,
            local_qpn: Qpn::new_masked(0x666),
            ..CmRep::default()
        }),
        CmMessage::Rej(CmRej {
            local_comm_id: theirs,
            remote_comm_id: ours,
            ..CmRej::default()
        }),
        CmMessage::Drep(CmDrep {
            local_comm_id: theirs,
            remote_comm_id: ours,
            ..CmDrep::default()
        }),
        CmMessage::Dreq(CmDreq {
            local_comm_id: theirs,
            remote_comm_id: ours,
            ..CmDreq::default()
        }),
        CmMessage::Rtu(CmRtu {
            local_comm_id: theirs,
            remote_comm_id: ours,
            ..CmRtu::default()
        }),
    ];
    for (tid, message) in forged.into_iter().enumerate() {
        forger
            .send_gsi(h.ip, &mad(message, 100 + tid as u64))
            .unwrap();
        // Routed to the active side: the daemon has read it.
        next_mad(&mut active);
    }
    drop(active);
    let (_, CmMessage::Dreq(dreq)) = next_cm(&mut passive) else {
        panic!("not a DREQ");
    };
    assert_eq!(
        (dreq.local_comm_id, dreq.remote_comm_id, dreq.remote_qpn),
        (rep.remote_comm_id, rep.local_comm_id, rep.local_qpn),
        "to the real peer"
    );
}

/// Rule (the kernel's CM finds a connection by both comm IDs): a client
/// telling the daemon of a DREP (the kernel's `cm_issue_drep` answers a
/// DREQ that names no connection of its id) or a REJ it sent that names
/// its comm ID with another peer's ends none of its connections: its
/// death still brings its peer the DREQ.
#[test]
fn a_client_answering_a_stray_message_keeps_its_connection() {
    let h = host();
    let (mut active, mut passive, rep) = established(&h);
    let (ours, stray) = (rep.remote_comm_id, 0x00BA_DBAD);
    let answers = [
        CmMessage::Drep(CmDrep {
            local_comm_id: ours,
            remote_comm_id: stray,
            ..CmDrep::default()
        }),
        CmMessage::Rej(CmRej {
            local_comm_id: ours,
            remote_comm_id: stray,
            ..CmRej::default()
        }),
    ];
    for (tid, answer) in answers.into_iter().enumerate() {
        active
            .sent_gsi(h.ip, &mad(answer, 200 + tid as u64))
            .unwrap();
    }
    drop(active);
    let (_, CmMessage::Dreq(dreq)) = next_cm(&mut passive) else {
        panic!("not a DREQ");
    };
    assert_eq!(
        (dreq.local_comm_id, dreq.remote_comm_id),
        (ours, rep.local_comm_id)
    );
}

/// A REP answering a REQ the client told the daemon of is its connection
/// from then on, even where the daemon still has its comm ID connected to
/// another peer (a connection that ended unseen, the comm ID used again):
/// the client's death brings the new peer the REJ and DREQ.
#[test]
fn a_rep_answering_a_told_req_replaces_a_stale_connection() {
    let h = host();
    let (mut active, _stale_peer, rep) = established(&h);
    let mut new_peer = h.endpoint();
    let ours = rep.remote_comm_id;
    active.requesting(h.ip, ours, 0x1122, 300).unwrap();
    let answer = CmRep {
        local_comm_id: comm_id(&new_peer, 5),
        remote_comm_id: ours,
        local_qpn: Qpn::new_masked(0x4321),
        ..CmRep::default()
    };
    new_peer
        .send_gsi(h.ip, &mad(CmMessage::Rep(answer), 301))
        .unwrap();
    next_mad(&mut active);
    drop(active);
    // Gone before its RTU: the REJ of that REP, then the DREQ.
    let (rej, dreq) = rej_then_dreq(&mut new_peer);
    assert_eq!(
        (rej.local_comm_id, rej.remote_comm_id),
        (ours, answer.local_comm_id)
    );
    assert_eq!(
        (dreq.local_comm_id, dreq.remote_comm_id, dreq.remote_qpn),
        (ours, answer.local_comm_id, answer.local_qpn)
    );
}

/// The next two CM messages `e` receives, which must be a REJ then a DREQ:
/// what the daemon sends for a client that died in the middle of a
/// connection's set-up.
fn rej_then_dreq(e: &mut Endpoint) -> (CmRej, CmDreq) {
    let got: Vec<CmMessage> = next_mads(e, 2)
        .iter()
        .map(|m| CmMessage::parse_mad(m).expect("a CM message").1)
        .collect();
    let [CmMessage::Rej(rej), CmMessage::Dreq(dreq)] = got.as_slice() else {
        panic!("not a REJ then a DREQ: {got:?}");
    };
    (*rej, *dreq)
}

/// Rule (the kernel's `cm_destroy_id` in REP_RCVD): a client killed
/// holding a REP it never answered with its RTU gets its peer a REJ of
/// that REP (consumer defined), then a DREQ for a peer that went
/// established without the RTU.
#[test]
fn the_peer_of_a_client_gone_before_its_rtu_gets_a_rej() {
    let h = host();
    let (active, mut passive, rep) = rep_taken(&h);
    drop(active);
    let (rej, _) = rej_then_dreq(&mut passive);
    assert_eq!(
        (rej.local_comm_id, rej.remote_comm_id),
        (rep.remote_comm_id, rep.local_comm_id)
    );
    assert_eq!((rej.message_rejected, rej.reason), (MessageKind::Rep, 28));
}

/// Rule (the kernel's `cm_destroy_id` in REP_SENT): a passive side
/// killed after its REP, before the active side's RTU reached it, gets the
/// active side a REJ of that REP (consumer defined), then a DREQ for an
/// active side that sent its RTU and went established.
#[test]
fn the_active_side_of_a_passive_one_gone_before_the_rtu_gets_a_rej() {
    let h = host();
    let (mut active, passive, rep) = rep_taken(&h);
    drop(passive);
    let (rej, dreq) = rej_then_dreq(&mut active);
    assert_eq!(
        (rej.local_comm_id, rej.remote_comm_id),
        (rep.local_comm_id, rep.remote_comm_id)
    );
    // REP_SENT is none of the states `cm_format_rej` names: "other".
    assert_eq!((rej.message_rejected, rej.reason), (MessageKind::Other, 28));
    assert_eq!(
        (dreq.local_comm_id, dreq.remote_comm_id),
        (rep.local_comm_id, rep.remote_comm_id)
    );
}

/// An address of the host's loopback network other than `h`'s: a peer on
/// another host, as far as `h`'s daemon knows.
fn another_host(h: &Host) -> IpAddr {
    let IpAddr::V4(v4) = h.ip else { unreachable!() };
    let [x, y, z, w] = v4.octets();
    IpAddr::V4(Ipv4Addr::new(x, y, z, if w == 1 { 2 } else { w - 1 }))
}

/// The next CM message `far` (a peer's QP1) receives within 5 s, and
/// where it came from.
fn far_cm(far: &UdpSocket) -> (SocketAddr, MadHeader, CmMessage) {
    far.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 512];
    let (n, from) = far.recv_from(&mut buf).unwrap();
    let m = parse_gsi(from, far.local_addr().unwrap(), &buf[..n]).expect("a GSI packet");
    let (header, message) = CmMessage::parse_mad(&m).unwrap();
    (from, header, message)
}

/// Rule (the kernel's `cm_destroy_id` in REP_SENT), for an active side on
/// another host, whose RTU the daemon would see but whose REP it does
/// not: a passive client tells the daemon of its REP, and if it dies
/// before the RTU, the active side gets a REJ of the REP with both comm
/// IDs, then a DREQ, and no REJ of its REQ; once the RTU came, a DREQ
/// alone.
#[test]
fn the_active_side_elsewhere_of_a_passive_one_gone_gets_a_rej() {
    let h = host();
    let mut a = h.endpoint();
    a.reserve(TCP, h.ip, 18515, false).unwrap();
    a.listen(TCP, h.ip, 18515).unwrap();
    let far = UdpSocket::bind(SocketAddr::new(another_host(&h), 4791)).unwrap();
    let to = SocketAddr::new(h.ip, 4791);
    let (first, second) = (0x00ab_0001, 0x00ab_0002);
    for requester in [first, second] {
        let sent = req(requester, PortSpace::Tcp, 18515);
        let packet = gsi_packet(far.local_addr().unwrap(), to, &sent).unwrap();
        far.send_to(&packet, to).unwrap();
        assert_eq!(next_mad(&mut a).1, sent);
    }
    let (ours_first, ours_second) = (comm_id(&a, 1), comm_id(&a, 2));
    let far_ip = another_host(&h);
    a.replying(far_ip, ours_first, first).unwrap();
    a.replying(far_ip, ours_second, second).unwrap();
    // The second connection's RTU comes.
    let rtu = CmRtu {
        local_comm_id: second,
        remote_comm_id: ours_second,
        ..CmRtu::default()
    };
    let packet = gsi_packet(far.local_addr().unwrap(), to, &mad(CmMessage::Rtu(rtu), 5)).unwrap();
    far.send_to(&packet, to).unwrap();
    next_mad(&mut a);
    drop(a);

    let mut got: Vec<CmMessage> = (0..3).map(|_| far_cm(&far).2).collect();
    got.sort_by_key(|m| format!("{m:?}"));
    let [CmMessage::Dreq(d1), CmMessage::Dreq(d2), CmMessage::Rej(rej)] = got[..] else {
        panic!("not two DREQs and a REJ: {got:?}");
    };
    assert_eq!(
        (rej.local_comm_id, rej.remote_comm_id, rej.reason),
        (ours_first, first, 28)
    );
    assert_eq!(rej.message_rejected, MessageKind::Other);
    let mut dreqs = [
        (d1.local_comm_id, d1.remote_comm_id),
        (d2.local_comm_id, d2.remote_comm_id),
    ];
    dreqs.sort();
    assert_eq!(dreqs, [(ours_first, first), (ours_second, second)]);
    for d in [d1, d2] {
        assert_eq!(
            d.remote_qpn,
            requester_qpn(d.remote_comm_id),
            "the requester's QP"
        );
    }
    assert_eq!(h.stats().gsi_answered, 3, "nothing else: no REJ of a REQ");
}

/// A REQ from `far` to `e`'s listener on `port`, passed to `e`; the REQ.
fn request_from(
    h: &Host,
    far: &UdpSocket,
    e: &mut Endpoint,
    requester: u32,
    port: u16,
) -> [u8; MAD_LEN] {
    e.reserve(TCP, h.ip, port, false).unwrap();
    e.listen(TCP, h.ip, port).unwrap();
    let sent = req(requester, PortSpace::Tcp, port);
    send_from(h, far, &sent);
    assert_eq!(next_mad(e).1, sent);
    sent
}

/// Sends `mad` from `far` (a peer's QP1) to `h`'s daemon.
fn send_from(h: &Host, far: &UdpSocket, mad: &[u8; MAD_LEN]) {
    let to = SocketAddr::new(h.ip, 4791);
    let packet = gsi_packet(far.local_addr().unwrap(), to, mad).unwrap();
    far.send_to(&packet, to).unwrap();
}

/// Both ends disconnecting at once, the passive client dying right
/// after (`ib_write_bw -R`'s server exits as it disconnects): the DREP
/// of its DREQ passes the daemon after the peer's crossing DREQ, which
/// may still wait for the client's DREP; the daemon sends it when the
/// client goes (it had forgotten the connection at the DREP, and a
/// softverbs peer, which then kept resending its DREQ, waited half a
/// minute).
#[test]
fn a_crossing_dreq_is_answered_when_its_client_goes() {
    let h = host();
    let (mut active, mut passive) = (h.endpoint(), h.endpoint());
    let (ours, theirs) = (comm_id(&passive, 3), comm_id(&active, 4));
    let rtu = CmRtu {
        local_comm_id: theirs,
        remote_comm_id: ours,
        ..CmRtu::default()
    };
    active.send_gsi(h.ip, &mad(CmMessage::Rtu(rtu), 9)).unwrap();
    next_mad(&mut passive);
    let dreq = CmDreq {
        local_comm_id: theirs,
        remote_comm_id: ours,
        ..CmDreq::default()
    };
    let drep = CmDrep {
        local_comm_id: theirs,
        remote_comm_id: ours,
        ..CmDrep::default()
    };
    active
        .send_gsi(h.ip, &mad(CmMessage::Dreq(dreq), 10))
        .unwrap();
    active
        .send_gsi(h.ip, &mad(CmMessage::Drep(drep), 11))
        .unwrap();
    next_mads(&mut passive, 2);
    drop(passive);
    let (header, CmMessage::Drep(answer)) = next_cm(&mut active) else {
        panic!("not a DREP");
    };
    assert_eq!(header.tid, 10, "the DREQ's transaction");
    assert_eq!(
        (answer.local_comm_id, answer.remote_comm_id),
        (ours, theirs)
    );
}

/// A request its holder answered with a REP stays its: the REQ sent again
/// (the REP lost or late) reaches it after its listener went, as the
/// kernel's CM matches a duplicate REQ before any listener, and so does
/// the REJ "timeout" of a requester that gave up before the REP reached
/// it. Another client telling of a REP for it changes nothing.
#[test]
fn a_request_answered_with_a_rep_stays_its_holders() {
    let h = host();
    let (mut b, mut stranger) = (h.endpoint(), h.endpoint());
    let far = UdpSocket::bind(SocketAddr::new(another_host(&h), 4791)).unwrap();
    let requester = 0x00cd_0001;
    let sent = request_from(&h, &far, &mut b, requester, 18530);
    let far_ip = another_host(&h);
    stranger
        .replying(far_ip, comm_id(&stranger, 1), requester)
        .unwrap();
    assert_eq!(
        errno(stranger.replying(far_ip, comm_id(&b, 1), requester)),
        libc::EINVAL,
        "another client's comm ID"
    );
    b.replying(far_ip, comm_id(&b, 1), requester).unwrap();
    b.release(TCP, h.ip, 18530).unwrap();
    send_from(&h, &far, &sent);
    assert_eq!(next_mad(&mut b).1, sent, "the REQ sent again");
    send_from(&h, &far, &gave_up(requester));
    assert_eq!(next_mad(&mut b).1, gave_up(requester), "the give-up");
    quiet(&mut [&mut stranger]);
}

/// Another client cannot take a request from its holder by telling of a
/// REP for it: the holder's death still rejects the REQ.
#[test]
fn a_rep_told_by_another_client_leaves_the_request_to_its_holder() {
    let h = host();
    let (mut b, mut stranger) = (h.endpoint(), h.endpoint());
    let far = UdpSocket::bind(SocketAddr::new(another_host(&h), 4791)).unwrap();
    let requester = 0x00cd_0002;
    request_from(&h, &far, &mut b, requester, 18531);
    let far_ip = another_host(&h);
    stranger
        .replying(far_ip, comm_id(&stranger, 1), requester)
        .unwrap();
    drop(b);
    let (_, _, CmMessage::Rej(rej)) = far_cm(&far) else {
        panic!("not a REJ");
    };
    assert_eq!(
        (
            rej.local_comm_id,
            rej.remote_comm_id,
            rej.message_rejected,
            rej.reason
        ),
        (0, requester, MessageKind::Req, 28)
    );
    quiet(&mut [&mut stranger]);
}

/// A client that dies after its peer's DREQ came, before its application
/// destroyed the id (qperf 0.4.11's server crashes right there): the
/// daemon sends the peer the DREP the kernel's rdma_cm sends when a dead
/// process's ids are destroyed, with the DREQ's transaction ID, so the
/// peer sees DISCONNECTED at once instead of after its DREQ's retries.
#[test]
fn a_client_gone_after_its_peers_dreq_answers_it() {
    let h = host();
    let (mut active, mut passive) = (h.endpoint(), h.endpoint());
    let rtu = CmRtu {
        local_comm_id: comm_id(&active, 4),
        remote_comm_id: comm_id(&passive, 3),
        ..CmRtu::default()
    };
    active.send_gsi(h.ip, &mad(CmMessage::Rtu(rtu), 9)).unwrap();
    next_mad(&mut passive);
    let dreq = CmDreq {
        local_comm_id: rtu.local_comm_id,
        remote_comm_id: rtu.remote_comm_id,
        ..CmDreq::default()
    };
    active
        .send_gsi(h.ip, &mad(CmMessage::Dreq(dreq), 10))
        .unwrap();
    next_mad(&mut passive);
    drop(passive);
    let (header, CmMessage::Drep(drep)) = next_cm(&mut active) else {
        panic!("not a DREP");
    };
    assert_eq!(header.tid, 10, "the DREQ's transaction");
    assert_eq!(
        (drep.local_comm_id, drep.remote_comm_id),
        (dreq.remote_comm_id, dreq.local_comm_id),
        "from the dead end, to the one that asked"
    );
}

/// Sends `message` from `e` to QP1 at `dst` as a client's CM agent does:
/// the MAD, then the daemon told of a DREQ, DREP or REJ among them.
fn send_as_agent(e: &mut Endpoint, dst: IpAddr, message: CmMessage, tid: u64) {
    let m = mad(message, tid);
    e.send_gsi(dst, &m).unwrap();
    e.sent_gsi(dst, &m).unwrap();
}

/// A connection ended cleanly (the passive side's DREQ, the active
/// side's DREP, both told to the daemon) brings nothing from the daemon
/// when both clients exit: before, the DREP was sent again in the active
/// side's name at its exit.
#[test]
fn a_connection_ended_cleanly_brings_nothing_at_exit() {
    let h = host();
    let (mut active, mut passive, rep) = rep_taken(&h);
    let rtu = CmRtu {
        local_comm_id: rep.remote_comm_id,
        remote_comm_id: rep.local_comm_id,
        ..CmRtu::default()
    };
    send_as_agent(&mut active, h.ip, CmMessage::Rtu(rtu), 9);
    next_mad(&mut passive);
    let dreq = CmDreq {
        local_comm_id: rep.local_comm_id,
        remote_comm_id: rep.remote_comm_id,
        remote_qpn: Qpn::new_masked(0x77),
        ..CmDreq::default()
    };
    send_as_agent(&mut passive, h.ip, CmMessage::Dreq(dreq), 10);
    next_mad(&mut active);
    let drep = CmDrep {
        local_comm_id: rep.remote_comm_id,
        remote_comm_id: rep.local_comm_id,
        ..CmDrep::default()
    };
    send_as_agent(&mut active, h.ip, CmMessage::Drep(drep), 10);
    next_mad(&mut passive);
    drop((active, passive));
    assert_eq!(h.stats().gsi_answered, 0, "nothing sent in a client's name");
}

/// A request its client rejected (told to the daemon) brings no second
/// REJ when the client exits; nor does a DREQ the client sent bring
/// another.
#[test]
fn a_rejected_request_or_a_sent_dreq_brings_nothing_at_exit() {
    let h = host();
    let mut b = h.endpoint();
    let far = UdpSocket::bind(SocketAddr::new(another_host(&h), 4791)).unwrap();
    let far_ip = another_host(&h);
    let requester = 0x00ef_0001;
    request_from(&h, &far, &mut b, requester, 18533);
    let rej = CmRej {
        local_comm_id: comm_id(&b, 1),
        remote_comm_id: requester,
        message_rejected: MessageKind::Req,
        reason: 28,
        ..CmRej::default()
    };
    send_as_agent(&mut b, far_ip, CmMessage::Rej(rej), 1);
    assert!(
        matches!(far_cm(&far).2, CmMessage::Rej(_)),
        "the client's REJ"
    );
    // A connection the client then ends with its DREQ, unanswered.
    let second = 0x00ef_0002;
    request_from(&h, &far, &mut b, second, 18534);
    b.replying(far_ip, comm_id(&b, 2), second).unwrap();
    let rtu = CmRtu {
        local_comm_id: second,
        remote_comm_id: comm_id(&b, 2),
        ..CmRtu::default()
    };
    send_from(&h, &far, &mad(CmMessage::Rtu(rtu), 5));
    next_mad(&mut b);
    let dreq = CmDreq {
        local_comm_id: comm_id(&b, 2),
        remote_comm_id: second,
        ..CmDreq::default()
    };
    send_as_agent(&mut b, far_ip, CmMessage::Dreq(dreq), 6);
    assert!(
        matches!(far_cm(&far).2, CmMessage::Dreq(_)),
        "the client's DREQ"
    );
    drop(b);
    assert_eq!(
        h.stats().gsi_answered,
        0,
        "nothing sent in the client's name"
    );
}
