//! Contexts publish their same-host region (a memfd and a doorbell
//! eventfd) through the host daemon, and a context that looks up a QP
//! number of theirs gets descriptors of the very same memfd and eventfd.
//! Each test runs its own daemon (on a thread) on its own loopback
//! address, as loopback.rs does.

use rustix::event::{eventfd, EventfdFlags};
use rustix::fs::{ftruncate, memfd_create, MemfdFlags};
use rustix::io::{pread, pwrite, read, write};
use softverbs_transport::daemon::server::start_thread;
use softverbs_transport::daemon::{DaemonConfig, LookupRefused, PeerRegion, Session};
use softverbs_transport::slots::{qpns_of, MAX_SLOT};
use softverbs_transport::DaemonAddress;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// A daemon of the test's own, on a loopback address of its own.
fn host() -> (DaemonAddress, IpAddr) {
    let ip = Ipv4Addr::new(
        127,
        fastrand::u8(1..255),
        fastrand::u8(..),
        fastrand::u8(1..255),
    );
    let config = DaemonConfig {
        socket: format!("softverbs-test-publish-{}-{ip}", std::process::id()),
        idle_exit: Duration::from_millis(200),
    };
    let (address, _thread) = start_thread(config).unwrap();
    (address, IpAddr::V4(ip))
}

/// A region of `bytes` bytes whose first word is `marker`, and a doorbell.
fn region(bytes: u64, marker: u64) -> (OwnedFd, OwnedFd) {
    let memfd = memfd_create("softverbs-test-region", MemfdFlags::CLOEXEC).unwrap();
    ftruncate(&memfd, bytes).unwrap();
    pwrite(&memfd, &marker.to_le_bytes(), 0).unwrap();
    let doorbell = eventfd(0, EventfdFlags::CLOEXEC).unwrap();
    (memfd, doorbell)
}

fn word_at(fd: impl AsFd, offset: u64) -> u64 {
    let mut b = [0u8; 8];
    assert_eq!(pread(fd, &mut b, offset).unwrap(), 8);
    u64::from_le_bytes(b)
}

fn found(session: &mut Session, qpn: u32) -> PeerRegion {
    match session.lookup(qpn).unwrap() {
        Ok(peer) => peer,
        Err(refused) => panic!("QP {qpn:#x}: {refused}"),
    }
}

fn refused(session: &mut Session, qpn: u32) -> LookupRefused {
    match session.lookup(qpn).unwrap() {
        Ok(peer) => panic!("QP {qpn:#x} found: {peer:?}"),
        Err(refused) => refused,
    }
}

/// B finds A's region by any QP number of A's block and reaches the same
/// memfd (a write through either descriptor is read through the other) and
/// the same eventfd; A finds its own; a second publish replaces the first.
#[test]
fn a_published_region_reaches_whoever_looks_up_its_qps() {
    let (daemon, ip) = host();
    let (mut a, block_a) = Session::open(&daemon, ip).unwrap();
    let (mut b, _) = Session::open(&daemon, ip).unwrap();
    let (memfd, doorbell) = region(4096, 0x1111);
    a.publish(memfd.as_fd(), doorbell.as_fd(), 4096).unwrap();

    let qpns = qpns_of(block_a);
    let peer = found(&mut b, qpns.start + 17);
    assert_eq!((peer.pid, peer.bytes), (std::process::id() as i32, 4096));
    assert_eq!(word_at(&peer.region, 0), 0x1111);
    pwrite(&peer.region, &0xfeed_u64.to_le_bytes(), 64).unwrap();
    assert_eq!(word_at(&memfd, 64), 0xfeed, "B's write seen through A's fd");
    pwrite(&memfd, &0xbeef_u64.to_le_bytes(), 128).unwrap();
    assert_eq!(word_at(&peer.region, 128), 0xbeef, "and A's through B's");
    write(&peer.doorbell, &3u64.to_ne_bytes()).unwrap();
    let mut rung = [0u8; 8];
    read(&doorbell, &mut rung).unwrap();
    assert_eq!(u64::from_ne_bytes(rung), 3, "B rang A's doorbell");

    let own = found(&mut a, qpns.end - 1);
    assert_eq!(word_at(&own.region, 64), 0xfeed, "A looks itself up");

    let (memfd2, doorbell2) = region(8192, 0x2222);
    a.publish(memfd2.as_fd(), doorbell2.as_fd(), 8192).unwrap();
    let peer = found(&mut b, qpns.start);
    assert_eq!(
        (peer.bytes, word_at(&peer.region, 0)),
        (8192, 0x2222),
        "the second publish replaced the first"
    );
}

/// ENOENT for a block nobody holds (slot 0 included) and for one whose
/// holder published nothing; after the holder closes, its block is
/// nobody's.
#[test]
fn a_lookup_without_a_published_holder_is_refused() {
    let (daemon, ip) = host();
    let (mut a, block_a) = Session::open(&daemon, ip).unwrap();
    let (mut b, block_b) = Session::open(&daemon, ip).unwrap();
    let unheld = (1..=MAX_SLOT)
        .find(|s| ![block_a, block_b].contains(s))
        .unwrap();
    for qpn in [1, qpns_of(unheld).start] {
        let why = refused(&mut b, qpn);
        assert_eq!(why.errno, libc::ENOENT, "QP {qpn:#x}: {why}");
    }
    let why = refused(&mut a, qpns_of(block_b).start);
    assert_eq!(why.errno, libc::ENOENT, "B published nothing: {why}");

    let (memfd, doorbell) = region(4096, 7);
    a.publish(memfd.as_fd(), doorbell.as_fd(), 4096).unwrap();
    let qpn = qpns_of(block_a).start + 1;
    found(&mut b, qpn);
    drop(a);
    // The daemon may serve B's next request before it reads A's hang-up:
    // wait for it to have read it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match b.lookup(qpn).unwrap() {
            Err(why) => {
                assert_eq!(why.errno, libc::ENOENT, "{why}");
                break;
            }
            Ok(_) => assert!(Instant::now() < deadline, "A's region outlived A"),
        }
        std::thread::yield_now();
    }
}
