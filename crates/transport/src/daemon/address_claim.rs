//! A daemon's claim on UDP 4791 of a device address, among softverbs
//! daemons: an abstract Unix socket named after the address, which one
//! live process at a time can bind (the kernel frees the name when the
//! socket closes or its process dies).
//!
//! The UDP port itself cannot say who holds it: the daemon binds it with
//! `SO_REUSEPORT`, so that the steering group its contexts join survives
//! them (and a new daemon can start while an ended one's contexts still
//! close their members), and a second daemon on the address (started with
//! another `SOFTVERBS_DAEMON_SOCKET`) would silently share its packets:
//! each would lose the other's, and the connections would end in retry
//! errors. With the claim, the second daemon refuses the address, and its
//! contexts fail to open the device, saying why. Abstract names live in
//! the network namespace, as the UDP ports do.

use std::io;
use std::net::SocketAddr;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};

/// The claim, held while the daemon receives on the address.
#[derive(Debug)]
pub(super) struct AddressClaim {
    _name: UnixDatagram,
}

impl AddressClaim {
    /// Claims `addr` (a device address and the RoCE UDP port); an error
    /// of kind `AddrInUse` that names the holder when another daemon has.
    pub(super) fn take(addr: SocketAddr) -> io::Result<AddressClaim> {
        let name = UnixAddr::from_abstract_name(name_of(addr))?;
        match UnixDatagram::bind_addr(&name) {
            Ok(socket) => Ok(AddressClaim { _name: socket }),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "another softverbs daemon (one with another SOFTVERBS_DAEMON_SOCKET, \
                     `pgrep -a softverbs` finds it) receives on UDP {addr}: two would \
                     share its packets and lose some; give each daemon its own device \
                     addresses or SOFTVERBS_UDP_PORT"
                ),
            )),
            Err(e) => Err(e),
        }
    }
}

fn name_of(addr: SocketAddr) -> String {
    format!("softverbs-udp-{addr}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_claim_per_address_until_it_is_dropped() {
        let port = 40000 + fastrand::u16(..20000);
        let addr = SocketAddr::new("127.0.0.1".parse().unwrap(), port);
        let claim = AddressClaim::take(addr).unwrap();
        let again = AddressClaim::take(addr).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AddrInUse);
        assert!(
            again.to_string().contains("another softverbs daemon"),
            "{again}"
        );
        let other = SocketAddr::new("::1".parse().unwrap(), port);
        let beside = AddressClaim::take(other).expect("another address is apart");
        drop(claim);
        AddressClaim::take(addr).expect("free once dropped");
        drop(beside);
    }
}
