//! A device's GID table as `softverbs devices` prints it and plugin mode's
//! sysfs look-alike lists it: every entry RoCE v2, in table order.

use softverbs_config::SoftDevice;
use std::net::Ipv6Addr;

/// One line per entry, as `ibv_devinfo -v` shows them (compact IPv6 text),
/// saying which address a link-local GID travels as.
pub fn lines(d: &SoftDevice) -> Vec<String> {
    d.gid_entries()
        .into_iter()
        .map(|(i, g)| {
            let text = Ipv6Addr::from(g.0);
            if g.is_link_local() {
                let via = g.route(d.ip);
                format!("GID[{i:>3}]: {text}, RoCE v2 (link-local, sent as {via})")
            } else {
                format!("GID[{i:>3}]: {text}, RoCE v2")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(ip: &str) -> SoftDevice {
        SoftDevice {
            name: "softverbs0".into(),
            ip: ip.parse().unwrap(),
            link_mtu: Some(1500),
        }
    }

    #[test]
    fn an_ipv4_device_lists_link_local_then_mapped() {
        assert_eq!(
            lines(&device("127.0.0.1")),
            [
                "GID[  0]: fe80::5efe:7f00:1, RoCE v2 (link-local, sent as 127.0.0.1)",
                "GID[  1]: ::ffff:127.0.0.1, RoCE v2",
            ]
        );
    }

    #[test]
    fn an_ipv6_device_lists_link_local_then_its_address() {
        assert_eq!(
            lines(&device("fd00:e7::1")),
            [
                "GID[  0]: fe80::1, RoCE v2 (link-local, sent as fd00:e7::1)",
                "GID[  1]: fd00:e7::1, RoCE v2",
            ]
        );
    }
}
