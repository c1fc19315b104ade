//! RoCEv2 over UDP for the softverbs engine.
//!
//! * [`daemon`]: the host daemon that owns UDP 4791 and passes each
//!   arriving packet to the context owning its QP, and a context's link
//!   to it;
//! * [`slots`]: the blocks of QP numbers the daemon routes by;
//! * [`endpoint`]: a context's sending socket and daemon session;
//! * [`driver`]: an engine, its memory and endpoints, and the progress
//!   thread; the threading model is described there;
//! * [`gsi`]: the CM's MADs on QP1, as packets, and how the daemon
//!   routes them;
//! * [`clock`]: the engine's time base;
//! * [`capture`]: packet capture to pcap files (`SOFTVERBS_PCAP`);
//! * `packet_faults`: the packet rules of `SOFTVERBS_FAULTS`.
//!
//! Every packet is sealed with its ICRC on the way out and checked on the
//! way in; a packet with a bad ICRC is dropped and counted.

pub mod capture;
pub mod clock;
mod corked_batch;
pub mod daemon;
pub mod deadline_timer;
pub mod driver;
mod driver_lock;
pub mod endpoint;
pub mod gid_addr;
mod group_memberships;
mod group_socket;
pub mod gsi;
mod io_step;
mod kept_packets;
pub mod link_watch;
pub mod netif;
mod outbox;
pub mod own_threads;
mod packet_faults;
mod queue_watch;
mod receive_cost;
mod receive_owner;
pub mod same_host;
pub mod say;
mod send_batch;
mod send_control;
pub mod slots;
mod spin_yield;

pub use daemon::{udp_port, DaemonAddress, ROCE_PORT};
pub use driver::{DeviceFailed, Driver, DriverConfig, Notify, Polled};
pub use io_step::IoStats;

/// A loopback address of its own for a unit test's daemon and contexts:
/// no two calls in this process give the same one. Random ones met now
/// and then, two tests binding UDP 4791 on one address at once
/// (AddrInUse). The second octet varies with the process.
#[cfg(test)]
pub(crate) fn test_loopback_address() -> std::net::Ipv4Addr {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let process = (std::process::id() % 100) as u8;
    let high = u8::try_from(n / 254).expect("fewer than 65,024 test addresses");
    let low = (n % 254) as u8 + 1;
    std::net::Ipv4Addr::new(127, 100 + process, high, low)
}
