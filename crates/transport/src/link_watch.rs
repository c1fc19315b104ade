//! The device's network interface, watched: a RoCE port is ACTIVE while
//! its network device is up with a carrier, and DOWN otherwise, as rxe's
//! port follows its netdev (`ib_get_curr_port_state`, NETDEV_UP, DOWN
//! and CHANGE). The kernel tells every listener on rtnetlink's link group
//! of a change to any interface (open to any user); the watcher then reads
//! its interface's flags again.

use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};

use crate::netif::{interface_of, link_of};
use softverbs_engine::LinkState;

/// rtnetlink's multicast group of link changes (RTMGRP_LINK).
const LINK_GROUP: u32 = 1;

/// A watch on the interface that holds a device's address.
#[derive(Debug)]
pub struct LinkWatch {
    socket: Socket,
    interface: String,
    link: LinkState,
}

impl LinkWatch {
    /// Watches the interface that holds `ip`; `None` where none does (a
    /// loopback address on no interface of its own) or rtnetlink cannot
    /// be listened to: the port is then taken as up for good.
    pub fn open(ip: IpAddr) -> Option<LinkWatch> {
        let mut socket = Socket::new(NETLINK_ROUTE).ok()?;
        // Listening before the first look, so no change falls between.
        socket.bind(&SocketAddr::new(0, LINK_GROUP)).ok()?;
        socket.set_non_blocking(true).ok()?;
        let interface = interface_of(ip)?;
        let link = link_of(&interface)?;
        Some(LinkWatch {
            socket,
            interface,
            link,
        })
    }

    /// The interface's state, as last seen.
    pub fn link(&self) -> LinkState {
        self.link
    }

    /// The descriptor that becomes readable when some interface changed.
    pub fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// Reads the notifications waiting and looks at the interface again:
    /// its state if it changed. An interface gone (deleted, or moved to
    /// another namespace) is down.
    pub fn changed(&mut self) -> Option<LinkState> {
        let mut buf = vec![0u8; 16 * 1024];
        while self.socket.recv(&mut &mut buf[..], 0).is_ok() {}
        let link = link_of(&self.interface).unwrap_or(LinkState::Down);
        (std::mem::replace(&mut self.link, link) != link).then_some(link)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_watched_and_up() {
        let watch = LinkWatch::open("127.0.0.1".parse().unwrap()).expect("lo holds 127.0.0.1");
        assert_eq!(watch.link(), LinkState::Up);
        assert!(watch.fd() >= 0);
        assert!(LinkWatch::open("192.0.2.77".parse().unwrap()).is_none());
    }
}
