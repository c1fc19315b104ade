//! Which soft devices a process sees.
//!
//! By default there is one device, `softverbs0`, on 127.0.0.1. Otherwise,
//! in order of precedence:
//!
//! 1. `SOFTVERBS_DEVICES="name=addr[/mtu] ..."` (space- or comma-separated),
//!    e.g. `SOFTVERBS_DEVICES="softverbs0=10.0.0.1 softverbs1=::1/1500"`;
//! 2. the file named by `SOFTVERBS_CONFIG` (which must be there), else
//!    `$XDG_CONFIG_HOME/softverbs/devices.conf` (or `~/.config/...`), else
//!    `/etc/softverbs/devices.conf`, with lines
//!    `device NAME ADDRESS [mtu LINK_MTU]` and `#` comments.
//!
//! Every device receives on UDP 4791 through the host daemon
//! (`softverbs daemon`); `SOFTVERBS_DAEMON_SOCKET` names the daemon's
//! abstract socket when it must not be the default one (tests).
//!
//! `mtu` is the link MTU (IP packet size); the port's active MTU is the
//! largest RoCE MTU whose packets fit in it. Without it, the MTU of the
//! interface that holds the address is used (65536 for 127.0.0.1 on
//! `lo`, active MTU 4096), or 1500 (active MTU 1024) for an address no
//! interface holds, such as another 127.x address (the tests' own, which
//! loopback routes without holding).

use softverbs_engine::{DeviceConfig, Gid, Mtu, PortConfig};
use softverbs_transport::daemon::{DaemonAddress, DEFAULT_SOCKET};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

/// One configured soft device.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SoftDevice {
    /// Device name, as `ibv_get_device_name` returns it.
    pub name: String,
    /// The address it sends and receives on. Its GID table is rxe's:
    /// index 0 a link-local GID derived from this address, index 1 the
    /// address's own GID (`softverbs_engine::gids_of`).
    pub ip: IpAddr,
    /// The link MTU, if configured.
    pub link_mtu: Option<u32>,
}

/// A device that fronts a real RDMA device (`name=passthrough:REAL`):
/// its verbs go to the real device's own provider, with softverbs' trace
/// and fault rules on the way (docs/passthrough.md).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PassthroughDevice {
    /// Its name, as programs ask for it.
    pub name: String,
    /// The real device's name (`rxe0`, `mlx5_0`).
    pub real: String,
}

/// Every device and the network-wide settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Soft devices, in the order programs see them.
    pub devices: Vec<SoftDevice>,
    /// Pass-through devices, listed after the soft ones.
    pub passthrough: Vec<PassthroughDevice>,
    /// Where the configuration came from, for `softverbs devices`.
    pub source: String,
}

/// A configuration that cannot be used, with where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Default for Config {
    fn default() -> Config {
        Config {
            devices: vec![SoftDevice {
                name: "softverbs0".into(),
                ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
                link_mtu: None,
            }],
            passthrough: Vec::new(),
            source: "built-in default".into(),
        }
    }
}

impl Config {
    /// The configuration this process uses (see the module docs).
    pub fn load() -> Result<Config, ConfigError> {
        if let Ok(inline) = std::env::var("SOFTVERBS_DEVICES") {
            let (devices, passthrough) = parse_inline(&inline)?;
            return Ok(Config {
                devices,
                passthrough,
                source: "SOFTVERBS_DEVICES".into(),
            });
        }
        if let Some(path) = std::env::var_os("SOFTVERBS_CONFIG").filter(|p| !p.is_empty()) {
            // A file the user named: missing is a mistake to say (the
            // built-in device was used in silence), not a place to skip.
            let path = PathBuf::from(path);
            let text = read_config(&path)
                .map_err(|e| ConfigError(format!("SOFTVERBS_CONFIG={}: {e}", path.display())))?;
            return parse_file(&text, &path.display().to_string());
        }
        for path in config_paths() {
            match read_config(&path) {
                Ok(text) => return parse_file(&text, &path.display().to_string()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(ConfigError(format!("{}: {e}", path.display()))),
            }
        }
        Ok(Config::default())
    }

    /// The host daemon devices receive through: its socket
    /// (`SOFTVERBS_DAEMON_SOCKET`, else the default) and `program`, the
    /// `softverbs` command that starts it when none runs.
    pub fn daemon(program: Option<PathBuf>) -> DaemonAddress {
        let socket = std::env::var("SOFTVERBS_DAEMON_SOCKET")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| DEFAULT_SOCKET.into());
        DaemonAddress { socket, program }
    }
}

impl SoftDevice {
    /// The engine configuration of this device.
    pub fn device_config(&self, seed: u64) -> DeviceConfig {
        let mut cfg = DeviceConfig::loopback(seed);
        cfg.name.clone_from(&self.name);
        cfg.node_guid = self.guid();
        let link_mtu = self
            .link_mtu
            .or_else(|| crate::netif::mtu_of(self.ip))
            .unwrap_or(1500);
        cfg.ports = vec![PortConfig {
            gids: softverbs_engine::gids_of(self.ip),
            active_mtu: Mtu::largest_fitting(link_mtu, self.ip.is_ipv6()).unwrap_or(Mtu::Mtu256),
        }];
        cfg
    }

    /// The populated GID entries of port 1, with their indexes, in table
    /// order (every one RoCE v2).
    pub fn gid_entries(&self) -> Vec<(usize, Gid)> {
        let cfg = self.device_config(0);
        let gids = cfg
            .ports
            .first()
            .map(|p| p.gids.clone())
            .unwrap_or_default();
        gids.into_iter()
            .enumerate()
            .filter(|(_, g)| !g.is_zero())
            .collect()
    }

    /// A stable node GUID: our vendor prefix and a hash of name and address.
    pub fn guid(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.name.bytes().chain(Gid::from_ip(self.ip).0) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        (u64::from(DeviceConfig::VENDOR_ID) << 48) | (h & 0xFFFF_FFFF_FFFF)
    }
}

/// The most a configuration file may hold: a few devices take a few
/// hundred bytes.
const CONFIG_AT_MOST: u64 = 1 << 20;

/// A configuration file's text, of at most [`CONFIG_AT_MOST`] bytes:
/// `SOFTVERBS_CONFIG=/dev/zero` had every program read for ever. Files of
/// other kinds are read as files are (`/dev/null`, a pipe from `<(...)`).
fn read_config(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind, Read};
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(CONFIG_AT_MOST + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > CONFIG_AT_MOST {
        return Err(Error::new(ErrorKind::InvalidInput, "larger than 1 MiB"));
    }
    Ok(text)
}

/// The files looked for, in order, when `SOFTVERBS_CONFIG` names none.
fn config_paths() -> Vec<PathBuf> {
    let mut paths = Vec::new();
    if let Ok(xdg) = std::env::var("XDG_CONFIG_HOME") {
        paths.push(PathBuf::from(xdg).join("softverbs/devices.conf"));
    } else if let Ok(home) = std::env::var("HOME") {
        paths.push(PathBuf::from(home).join(".config/softverbs/devices.conf"));
    }
    paths.push(PathBuf::from("/etc/softverbs/devices.conf"));
    paths
}

/// Parses `name=addr[/mtu]` and `name=passthrough:REAL` entries.
pub fn parse_inline(text: &str) -> Result<(Vec<SoftDevice>, Vec<PassthroughDevice>), ConfigError> {
    let mut devices = Vec::new();
    let mut passthrough = Vec::new();
    for entry in text.split([' ', ',', '\n', '\t']).filter(|e| !e.is_empty()) {
        let bad = || {
            ConfigError(format!(
                "SOFTVERBS_DEVICES: `{entry}` is not name=address[/mtu] or name=passthrough:DEVICE"
            ))
        };
        let in_var = |e: String| ConfigError(format!("SOFTVERBS_DEVICES: {e}"));
        let (name, rest) = entry.split_once('=').ok_or_else(bad)?;
        if let Some(real) = rest.strip_prefix("passthrough:") {
            passthrough.push(passthrough_device(name, real).map_err(in_var)?);
            continue;
        }
        let (addr, mtu) = match rest.split_once('/') {
            Some((a, m)) => (a, Some(m.parse().map_err(|_| bad())?)),
            None => (rest, None),
        };
        devices.push(device(name, addr, mtu).map_err(in_var)?);
    }
    check(devices, passthrough)
}

/// Parses a configuration file.
pub fn parse_file(text: &str, source: &str) -> Result<Config, ConfigError> {
    let mut config = Config {
        devices: Vec::new(),
        passthrough: Vec::new(),
        source: source.into(),
    };
    for (n, line) in text.lines().enumerate() {
        let words: Vec<&str> = line
            .split('#')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let at = |e: String| ConfigError(format!("{source}:{}: {e}", n + 1));
        match words.as_slice() {
            [] => {}
            ["port_base", _] => {
                return Err(at(
                    "port_base is gone: softverbs now uses UDP 4791, the RoCEv2 port, on every \
                     host; remove the line"
                        .into(),
                ))
            }
            ["device", name, addr] => config.devices.push(device(name, addr, None).map_err(at)?),
            ["device", name, addr, "mtu", mtu] => {
                let mtu = mtu.parse().map_err(|_| at(format!("bad mtu `{mtu}`")))?;
                config
                    .devices
                    .push(device(name, addr, Some(mtu)).map_err(at)?);
            }
            ["passthrough", name, real] => config
                .passthrough
                .push(passthrough_device(name, real).map_err(at)?),
            _ => return Err(at(format!("cannot read `{}`", line.trim()))),
        }
    }
    (config.devices, config.passthrough) = check(config.devices, config.passthrough)?;
    Ok(config)
}

fn device(name: &str, addr: &str, link_mtu: Option<u32>) -> Result<SoftDevice, String> {
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| format!("`{addr}` is not an IP address"))?;
    check_name(name)?;
    if link_mtu.is_some_and(|m| Mtu::largest_fitting(m, ip.is_ipv6()).is_none()) {
        return Err(format!(
            "link MTU {} is too small for RoCE",
            link_mtu.unwrap_or(0)
        ));
    }
    Ok(SoftDevice {
        name: name.into(),
        ip,
        link_mtu,
    })
}

/// A device name: what rdma-core's sysfs names allow.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a device name (1-63 letters, digits, - or _)"
        ))
    }
}

fn passthrough_device(name: &str, real: &str) -> Result<PassthroughDevice, String> {
    check_name(name)?;
    check_name(real).map_err(|e| format!("passthrough to {e}"))?;
    if name == real {
        return Err(format!("`{name}` cannot pass through to itself"));
    }
    Ok(PassthroughDevice {
        name: name.into(),
        real: real.into(),
    })
}

/// At least one device, and every name once.
#[allow(clippy::type_complexity)]
fn check(
    devices: Vec<SoftDevice>,
    passthrough: Vec<PassthroughDevice>,
) -> Result<(Vec<SoftDevice>, Vec<PassthroughDevice>), ConfigError> {
    if devices.is_empty() && passthrough.is_empty() {
        return Err(ConfigError("no device configured".into()));
    }
    let names: Vec<&str> = (devices.iter().map(|d| d.name.as_str()))
        .chain(passthrough.iter().map(|d| d.name.as_str()))
        .collect();
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return Err(ConfigError(format!("device name `{name}` used twice")));
        }
    }
    Ok((devices, passthrough))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_is_a_file_of_at_most_a_mebibyte() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("devices.conf");
        std::fs::write(&small, "softverbs0 = 127.0.0.1\n").unwrap();
        assert_eq!(read_config(&small).unwrap(), "softverbs0 = 127.0.0.1\n");
        let big = dir.path().join("big.conf");
        std::fs::write(&big, vec![b'#'; (CONFIG_AT_MOST + 1) as usize]).unwrap();
        assert!(read_config(&big).is_err());
        let zero = read_config(std::path::Path::new("/dev/zero")).unwrap_err();
        assert_eq!(zero.kind(), std::io::ErrorKind::InvalidInput);
        assert_eq!(read_config(std::path::Path::new("/dev/null")).unwrap(), "");
        assert!(read_config(dir.path()).is_err(), "a directory");
    }

    #[test]
    fn inline_devices_parse_with_optional_mtu() {
        let (d, _) = parse_inline("softverbs0=10.0.0.1, softverbs1=::1/1500").unwrap();
        assert_eq!(d[0].ip, "10.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(
            (d[1].name.as_str(), d[1].link_mtu),
            ("softverbs1", Some(1500))
        );
        assert!(parse_inline("x").is_err());
        assert!(
            parse_inline("a=1.2.3.4 a=1.2.3.5").is_err(),
            "duplicate name"
        );
        assert!(parse_inline("a=1.2.3.4/100").is_err(), "MTU too small");
    }

    #[test]
    fn passthrough_devices_parse_inline_and_from_files() {
        let (soft, pt) = parse_inline("sv_rxe0=passthrough:rxe0").unwrap();
        assert!(soft.is_empty());
        assert_eq!(
            pt,
            [PassthroughDevice {
                name: "sv_rxe0".into(),
                real: "rxe0".into()
            }]
        );
        let c = parse_file(
            "device sv0 10.1.0.1
passthrough sv_mlx mlx5_0
",
            "f",
        )
        .unwrap();
        assert_eq!(
            (c.devices.len(), c.passthrough[0].real.as_str()),
            (1, "mlx5_0")
        );
        for (text, says) in [
            ("a=passthrough:a", "to itself"),
            ("a=passthrough:", "passthrough to"),
            ("a=1.2.3.4 a=passthrough:rxe0", "used twice"),
        ] {
            let e = parse_inline(text).unwrap_err();
            assert!(e.0.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn files_parse_and_errors_name_the_line() {
        let c = parse_file("# devices\ndevice sv0 10.1.0.1 mtu 9000\n", "f").unwrap();
        assert_eq!(c.devices[0].link_mtu, Some(9000));
        let e = parse_file("device sv0 nonsense\n", "f").unwrap_err();
        assert!(e.0.starts_with("f:1:"), "{e}");
        let e = parse_file("device a ::1\nport_base 50000\n", "f").unwrap_err();
        assert!(e.0.starts_with("f:2: port_base is gone"), "{e}");
    }

    #[test]
    fn device_config_derives_mtu_and_guid() {
        let d = SoftDevice {
            name: "sv".into(),
            ip: "10.0.0.1".parse().unwrap(),
            link_mtu: Some(1500),
        };
        let cfg = d.device_config(1);
        assert_eq!(cfg.ports[0].active_mtu, Mtu::Mtu1024);
        assert_eq!(cfg.node_guid >> 48, u64::from(DeviceConfig::VENDOR_ID));
        let gids: Vec<String> = cfg.ports[0].gids.iter().map(Gid::to_string).collect();
        assert_eq!(
            gids,
            [
                "fe80:0000:0000:0000:0000:5efe:0a00:0001",
                "0000:0000:0000:0000:0000:ffff:0a00:0001"
            ]
        );
        let v6 = SoftDevice {
            ip: "fd00:e7::1".parse().unwrap(),
            ..d
        };
        let gids = v6.device_config(1).ports[0].gids.clone();
        assert_eq!(gids, softverbs_engine::gids_of(v6.ip));
        assert_eq!(
            gids[0].to_string(),
            "fe80:0000:0000:0000:0000:0000:0000:0001"
        );
    }
}
