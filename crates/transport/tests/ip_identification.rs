//! The ICRC on the real IP header, against the kernel. Each test needs
//! root (a network namespace of its own, raw and packet sockets): the test
//! process re-runs this binary for the one test under `unshare --net`, so
//! nothing it does (lo's offloads, port 4791) touches the host.
//!
//! * Two drivers exchange multi-packet messages, which leave as GSO
//!   batches; every packet captured on the wire has an ICRC valid for the
//!   IP header it really carried, so each was sealed with the
//!   identification the kernel gave it (send_batch.rs), and every packet
//!   passes the receiver's check.
//! * A datagram with a non-zero IPv4 identification (rxe's kind), crafted
//!   on a raw socket, is received; the same datagram corrupted is not.
//! * An IPv6 datagram with UDP checksum 0 (as rxe sends) is received.

mod common;
use common::*;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use softverbs_engine::*;
use softverbs_transport::*;
use softverbs_wire::{Bth, Deth, Flow, IpPacket, PacketBuilder, Psn, Qpn};
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const QKEY: u32 = 0x11;
const CHILD: &str = "SOFTVERBS_TEST_OWN_NETNS";

/// Whether to run the calling test's body here: in the test process,
/// re-runs this binary for `test` alone in a new network namespace and
/// returns false (the child did the work, and its failure is ours); in
/// that child, brings lo up and returns true. Without root it fails under
/// CI=true and skips loudly elsewhere.
fn in_own_netns(test: &str) -> bool {
    if std::env::var(CHILD).as_deref() == Ok(test) {
        run(&["ip", "link", "set", "lo", "up"]);
        return true;
    }
    if let Err(reason) = can_unshare() {
        let why = format!("{test} needs root (a network namespace, raw sockets): {reason}");
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("SKIPPED {why}");
        return false;
    }
    let out = Command::new("unshare")
        .arg("--net")
        .arg(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, test)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&[out.stdout, out.stderr].concat()).into_owned();
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{test} in its own network namespace failed:\n{text}"
    );
    false
}

fn can_unshare() -> Result<(), String> {
    let out = Command::new("unshare")
        .args(["--net", "true"])
        .output()
        .map_err(|e| format!("cannot run unshare: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

fn run(argv: &[&str]) {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    assert!(
        out.status.success(),
        "{argv:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A daemon of the test's own (the namespace is the test's own too).
fn daemon() -> DaemonAddress {
    let config = daemon::DaemonConfig {
        socket: format!("softverbs-ip-identification-{}", std::process::id()),
        idle_exit: Duration::from_millis(500),
    };
    daemon::server::start_thread(config).unwrap().0
}

fn side(ip: IpAddr, daemon: &DaemonAddress) -> Side {
    let (tx, events) = mpsc::channel();
    let gid = Gid::from_ip(ip);
    let mut device = DeviceConfig::loopback(fastrand::u64(..));
    device.ports[0].gids = vec![gid];
    let cfg = DriverConfig {
        device,
        ip,
        daemon: daemon.clone(),
    };
    let notify = Arc::new(Events(parking_lot::Mutex::new(tx)));
    let d = Driver::start(cfg, FlatMemory::new(BASE, LEN), notify).unwrap();
    let (pd, cq, key) = d.with(|e, _| {
        let pd = e.alloc_pd().unwrap();
        let (cq, _) = e.create_cq(1024, 0).unwrap();
        let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        let key = e
            .reg_mr(pd, BASE, LEN as u64, BASE, all.bits())
            .unwrap()
            .key;
        (pd, cq, key)
    });
    Side {
        d,
        gid,
        events,
        pd,
        cq,
        key,
    }
}

/// INIT, RTR, RTS: an RC QP towards `remote` at `dgid` with path MTU
/// 1024 (so a message is many packets), or a UD QP with Q_Key [`QKEY`].
fn connect(s: &Side, qp: QpId, ty: QpType, dgid: Gid, remote: u32) {
    let rc = ty == QpType::Rc;
    let init = QpAttr {
        qp_state: QpState::Init as u32,
        port_num: 1,
        qkey: QKEY,
        qp_access_flags: 0xe,
        ..QpAttr::default()
    };
    let init_mask = QpAttrMask::STATE
        | QpAttrMask::PKEY_INDEX
        | QpAttrMask::PORT
        | if rc {
            QpAttrMask::ACCESS_FLAGS
        } else {
            QpAttrMask::QKEY
        };
    let rtr = QpAttr {
        qp_state: QpState::Rtr as u32,
        path_mtu: Mtu::Mtu1024 as u32,
        dest_qp_num: remote,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 1,
        ah_attr: AhAttr {
            grh: GlobalRoute {
                dgid,
                hop_limit: 64,
                ..GlobalRoute::default()
            },
            is_global: true,
            port_num: 1,
            ..AhAttr::default()
        },
        ..QpAttr::default()
    };
    let rtr_mask = if rc {
        QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER
    } else {
        QpAttrMask::STATE
    };
    let rts = QpAttr {
        qp_state: QpState::Rts as u32,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..QpAttr::default()
    };
    let rts_mask = if rc {
        QpAttrMask::STATE
            | QpAttrMask::SQ_PSN
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC
    } else {
        QpAttrMask::STATE | QpAttrMask::SQ_PSN
    };
    for (a, m) in [(init, init_mask), (rtr, rtr_mask), (rts, rts_mask)] {
        s.d.with(|e, _| e.modify_qp(qp, &a, m)).unwrap();
    }
}

fn post_recv(s: &Side, qp: QpId, off: u64, len: u32) {
    let sge = [Sge {
        addr: BASE + off,
        length: len,
        lkey: s.key,
    }];
    let wr = RecvWr {
        wr_id: off,
        sg_list: &sge,
    };
    s.d.with(|e, _| e.post_recv(qp, &wr)).unwrap();
}

/// Waits until `cond` holds (the progress thread does the work).
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

/// Every IP packet on every interface of the namespace, read by a thread
/// from a packet socket until stopped.
struct Capture {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Vec<u8>>>,
}

impl Capture {
    fn start() -> Capture {
        // ETH_P_ALL in network byte order; SOCK_DGRAM strips the link header.
        let eth_p_all = Protocol::from(i32::from(0x0003u16.to_be()));
        let socket = Socket::new(Domain::PACKET, Type::DGRAM, Some(eth_p_all)).unwrap();
        let _ = socket.set_recv_buffer_size(8 << 20);
        socket
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut socket, mut packets) = (socket, Vec::new());
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match socket.read(&mut buf) {
                    Ok(n) => packets.push(buf[..n].to_vec()),
                    // Timed out: nothing more is queued.
                    Err(_) if stopped.load(Ordering::Relaxed) => return packets,
                    Err(_) => {}
                }
            }
        });
        Capture { stop, thread }
    }

    fn stop(self) -> Vec<Vec<u8>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

#[test]
fn gso_batches_carry_the_identifications_they_were_sealed_with() {
    if !in_own_netns("gso_batches_carry_the_identifications_they_were_sealed_with") {
        return;
    }
    // The kernel then segments each GSO send before the capture point, as
    // for a device without UDP segmentation offload.
    run(&["ethtool", "-K", "lo", "tx-udp-segmentation", "off"]);
    let capture = Capture::start();
    let daemon = daemon();
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let (a, b) = (side(lo, &daemon), side(lo, &daemon));
    let (qa, na) = create_qp(&a, QpType::Rc);
    let (qb, nb) = create_qp(&b, QpType::Rc);
    connect(&a, qa, QpType::Rc, b.gid, nb);
    connect(&b, qb, QpType::Rc, a.gid, na);
    // 48 KiB each way at MTU 1024: 48 packets, queued at once.
    let len = 48 << 10;
    let data: Vec<u8> = (0..len as u32).map(|i| (i * 7 + 3) as u8).collect();
    for (s, qp) in [(&a, qa), (&b, qb)] {
        s.d.with(|_, m| m.write(BASE, &data)).unwrap();
        post_recv(s, qp, 1 << 20, len as u32);
    }
    for (s, qp) in [(&a, qa), (&b, qb)] {
        let sge = [Sge {
            addr: BASE,
            length: len as u32,
            lkey: s.key,
        }];
        let wr = SendWr {
            wr_id: 1,
            opcode: send_opcode::SEND,
            send_flags: 0,
            sg_list: &sge,
            inline_data: &[],
            imm_data_or_inv_rkey: 0,
            rdma: RdmaTarget::default(),
            atomic: AtomicTarget::default(),
            ud: None,
        };
        s.d.with(|e, _| e.post_send(qp, &wr)).unwrap();
    }
    for s in [&a, &b] {
        let wcs = wait_completions(s, 2);
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
        s.d.with(|_, m| assert!(m.slice(BASE + (1 << 20), len) == &data[..]));
    }
    let packets = capture.stop();

    let (mut roce, mut ids) = (0, std::collections::BTreeSet::new());
    for p in &packets {
        let Ok(ip) = IpPacket::parse(p) else { continue };
        if ip.flow().dst_port != ROCE_PORT {
            continue;
        }
        roce += 1;
        assert_eq!(ip.verify_icrc(), Ok(()), "ICRC of {:02x?}", &p[..28]);
        ids.insert(u16::from_be_bytes([ip.ip_header[4], ip.ip_header[5]]));
    }
    // Each packet crosses lo once out and once in: both copies seen.
    assert!(roce >= 2 * 2 * 48, "only {roce} RoCE packets captured");
    assert!(
        ids.range(2..).next().is_some(),
        "no GSO send of three or more segments: identifications {ids:?}"
    );
    for s in [&a, &b] {
        let st = s.d.io_stats();
        assert_eq!(st.rx_bad_icrc, 0, "{st:?}");
        assert!(st.rx >= 48, "{st:?}");
    }
}

/// A UD SEND ONLY to `qpn` carrying `payload`, as its RoCE bytes sealed
/// for `flow` with IPv4 identification `id`.
fn ud_send(flow: &Flow, qpn: u32, id: u16, payload: &[u8]) -> Vec<u8> {
    let bth = Bth::new(
        softverbs_wire::Opcode::UdSendOnly,
        Qpn::new_masked(qpn),
        Psn::new_masked(1),
    );
    let builder = PacketBuilder::new(bth)
        .with_deth(Deth {
            qkey: QKEY,
            src_qp: Qpn::new_masked(0x4242),
        })
        .with_payload(payload);
    let mut roce = vec![0u8; builder.wire_len()];
    builder.build_unsealed(&mut roce).unwrap();
    flow.seal_with_identification(&mut roce, id).unwrap();
    roce
}

/// A UD QP on a fresh driver at `ip`, with a receive posted at offset 0.
fn ud_receiver(ip: IpAddr) -> (Side, u32) {
    let s = side(ip, &daemon());
    let (qp, qpn) = create_qp(&s, QpType::Ud);
    connect(&s, qp, QpType::Ud, s.gid, 0);
    post_recv(&s, qp, 0, 4096);
    (s, qpn)
}

fn expect_datagram(s: &Side, payload: &[u8]) {
    let wc = wait_completions(s, 1);
    assert_eq!(
        (wc[0].status, wc[0].byte_len),
        (WcStatus::Success, 40 + payload.len() as u32)
    );
    s.d.with(|_, m| assert_eq!(m.slice(BASE + 40, payload.len()), payload));
}

#[test]
fn a_datagram_with_a_nonzero_ipv4_identification_is_received() {
    if !in_own_netns("a_datagram_with_a_nonzero_ipv4_identification_is_received") {
        return;
    }
    let (s, qpn) = ud_receiver(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let flow = Flow::v4(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 50_000, ROCE_PORT);
    // IPPROTO_RAW: the datagram goes out with the header given (the
    // kernel fills in only the header checksum).
    let raw = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(255))).unwrap();
    let to = SockAddr::from(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0));
    let send = |roce: &[u8], id: u16| {
        let h = flow.headers_with_identification(roce.len(), id).unwrap();
        let datagram = [h.ip(), &h.udp()[..], roce].concat();
        assert_eq!(u16::from_be_bytes([datagram[4], datagram[5]]), id);
        raw.send_to(&datagram, &to).unwrap();
    };

    // Corrupted: dropped and counted, no completion.
    let mut bad = ud_send(&flow, qpn, 0xBEEF, b"corrupted");
    bad[30] ^= 0x01;
    send(&bad, 0xBEEF);
    wait_until("the corrupted datagram", || s.d.io_stats().rx_bad_icrc == 1);

    let payload = b"identification 0xBEEF, as rxe's counter might give";
    send(&ud_send(&flow, qpn, 0xBEEF, payload), 0xBEEF);
    expect_datagram(&s, payload);
    assert_eq!(s.d.io_stats().rx_bad_icrc, 1);
}

/// Udp6InCsumErrors of this network namespace.
fn udp6_checksum_errors() -> u64 {
    let snmp6 = std::fs::read_to_string("/proc/net/snmp6").unwrap();
    snmp6
        .lines()
        .find_map(|l| l.strip_prefix("Udp6InCsumErrors"))
        .and_then(|v| v.trim().parse().ok())
        .expect("Udp6InCsumErrors in /proc/net/snmp6")
}

#[test]
fn an_ipv6_datagram_with_udp_checksum_zero_is_received() {
    if !in_own_netns("an_ipv6_datagram_with_udp_checksum_zero_is_received") {
        return;
    }
    let lo = Ipv6Addr::LOCALHOST;
    let (s, qpn) = ud_receiver(IpAddr::V6(lo));
    let flow = Flow::v6(lo, lo, 50_000, ROCE_PORT);
    let payload = b"UDP checksum 0, as rxe sends IPv6";
    let roce = ud_send(&flow, qpn, 0, payload);
    // The UDP header and payload; a raw IPv6 socket adds the IPv6 header
    // and, IPV6_CHECKSUM being off, leaves the checksum as given: 0.
    let h = flow.headers(roce.len()).unwrap();
    assert_eq!(&h.udp()[6..], &[0, 0]);
    let udp = [&h.udp()[..], &roce].concat();
    let raw = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::UDP)).unwrap();

    // The datagram really has checksum 0: a socket without
    // UDP_NO_CHECK6_RX drops it and the kernel counts it.
    let plain = std::net::UdpSocket::bind((lo, 0)).unwrap();
    let mut to_plain = udp.clone();
    to_plain[2..4].copy_from_slice(&plain.local_addr().unwrap().port().to_be_bytes());
    let before = udp6_checksum_errors();
    let to = SockAddr::from(SocketAddr::new(lo.into(), 0));
    raw.send_to(&to_plain, &to).unwrap();
    wait_until("Udp6InCsumErrors", || udp6_checksum_errors() > before);

    raw.send_to(&udp, &to).unwrap();
    expect_datagram(&s, payload);
    assert_eq!(s.d.io_stats().rx_bad_icrc, 0);
}
