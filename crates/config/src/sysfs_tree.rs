//! A look-alike of the part of sysfs (and of `/dev/infiniband`) that
//! stacks read to find RDMA devices, holding the soft devices beside the
//! real ones.
//!
//! Two users: `softverbs setup` (root, plugin mode) writes it once for the
//! host, and the preloaded provider writes a per-user copy that its path
//! interposers redirect `/sys/class/infiniband*` and `/dev/infiniband`
//! into (the provider's `device_view`). The tree stands in for `/sys`: every top-level entry of
//! the real one, and of its `class/`, is a link to the real entry, except
//! `class/infiniband` and `class/infiniband_verbs`, which are directories
//! holding links to the real devices' entries and directories for the soft
//! ones. What a soft device's directory holds is what libibverbs, UCX,
//! Open MPI and libfabric read (docs/architecture.md, "The device view").

use crate::SoftDevice;
use softverbs_engine::{DeviceConfig, Gid};
use std::fs;
use std::io;
use std::path::Path;

/// The uverbs ABI version the kernel reports (libibverbs accepts 3..6).
const UVERBS_ABI: u32 = 6;
/// What a soft device's command file (`/dev/infiniband/uverbsN`) links
/// to: softverbs sends no kernel commands, and a stray write fails
/// cleanly with ENOSPC (libibverbs then sends its commands as ioctls,
/// which the provider serves).
pub const CDEV_TARGET: &str = "/dev/full";

/// The command-device name of the `n`th uverbs entry.
pub fn uverbs(n: usize) -> String {
    format!("uverbs{n}")
}

/// The number the first soft device takes: one past the real devices'
/// highest, so that no `uverbsN` names two devices.
pub fn uverbs_base(real_sys: &Path) -> usize {
    let Ok(entries) = fs::read_dir(real_sys.join("class/infiniband_verbs")) else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_prefix("uverbs")?.parse::<usize>().ok()
        })
        .map(|n| n + 1)
        .max()
        .unwrap_or(0)
}

/// Writes the tree under `root` from scratch; the soft devices' command
/// entries are numbered from `base`.
pub fn write_tree(
    root: &Path,
    real_sys: &Path,
    devices: &[SoftDevice],
    base: usize,
) -> io::Result<()> {
    remove_tree(root)?;
    let class = root.join("class");
    fs::create_dir_all(&class)?;
    link_others(real_sys, root, &["class"])?;
    let ours: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
    let real_class = real_sys.join("class");
    link_others(&real_class, &class, &["infiniband", "infiniband_verbs"])?;
    link_others(
        &real_class.join("infiniband"),
        &class.join("infiniband"),
        &ours,
    )?;
    let verbs = class.join("infiniband_verbs");
    link_real_uverbs(&real_class.join("infiniband_verbs"), &verbs, &ours)?;
    write(&verbs.join("abi_version"), &UVERBS_ABI.to_string())?;
    for (i, d) in devices.iter().enumerate() {
        write_uverbs(&verbs.join(uverbs(base + i)), d)?;
        write_device(&class.join("infiniband").join(&d.name), d)?;
    }
    Ok(())
}

/// Writes `dev` as a stand-in for `/dev/infiniband`: links to the real
/// entries of `real_dev` and, for the soft devices, `uverbsN` links to
/// [`CDEV_TARGET`]. A real entry of a soft device's name has no device in
/// sysfs (the soft ones are numbered after sysfs' last): a stale one, or
/// the plugin mode's own stand-in that `softverbs setup` put there; the
/// soft device's takes its place.
pub fn write_cdev_dir(dev: &Path, real_dev: &Path, soft: usize, base: usize) -> io::Result<()> {
    fs::create_dir_all(dev)?;
    let names: Vec<String> = (base..base + soft).map(uverbs).collect();
    let ours: Vec<&str> = names.iter().map(String::as_str).collect();
    link_others(real_dev, dev, &ours)?;
    for i in 0..soft {
        std::os::unix::fs::symlink(CDEV_TARGET, dev.join(uverbs(base + i)))?;
    }
    Ok(())
}

/// Removes `root` and everything in it; a missing one is fine.
pub fn remove_tree(root: &Path) -> io::Result<()> {
    match fs::remove_dir_all(root) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Links every entry of `from` except `skip` into `to`, which is created
/// (a missing `from` is fine: the tree then holds only the soft devices).
fn link_others(from: &Path, to: &Path, skip: &[&str]) -> io::Result<()> {
    fs::create_dir_all(to)?;
    let Ok(entries) = fs::read_dir(from) else {
        return Ok(());
    };
    for entry in entries {
        let name = entry?.file_name();
        if !skip.iter().any(|s| name == *s) {
            std::os::unix::fs::symlink(from.join(&name), to.join(&name))?;
        }
    }
    Ok(())
}

/// Links the real `uverbsN` entries, except one that names a soft device
/// (a tree `softverbs setup` wrote, read as the real one).
fn link_real_uverbs(from: &Path, to: &Path, ours: &[&str]) -> io::Result<()> {
    fs::create_dir_all(to)?;
    let Ok(entries) = fs::read_dir(from) else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        if name == "abi_version" {
            continue;
        }
        let ibdev = fs::read_to_string(entry.path().join("ibdev")).unwrap_or_default();
        if !ours.contains(&ibdev.trim()) {
            std::os::unix::fs::symlink(entry.path(), to.join(&name))?;
        }
    }
    Ok(())
}

/// `class/infiniband_verbs/uverbsN`: which device, and `dev` 0:0 so that
/// libibverbs does not compare the command device's numbers.
fn write_uverbs(dir: &Path, d: &SoftDevice) -> io::Result<()> {
    write(&dir.join("ibdev"), &d.name)?;
    write(&dir.join("dev"), "0:0")?;
    write(&dir.join("abi_version"), "1")
}

/// `class/infiniband/NAME`: what libibverbs reads from sysfs rather than
/// asking the provider (node GUID, P_Keys), and what stacks that inspect
/// the system read (port state and rate, GID types and network devices),
/// all agreeing with what the verbs report.
fn write_device(dir: &Path, d: &SoftDevice) -> io::Result<()> {
    let cfg = d.device_config(0);
    let attr = cfg.device_attr();
    let guid = guid_text(d.guid());
    write(&dir.join("node_type"), "1: CA")?;
    write(&dir.join("node_guid"), &guid)?;
    write(&dir.join("sys_image_guid"), &guid)?;
    write(&dir.join("node_desc"), &format!("{} softverbs", d.name))?;
    write(&dir.join("fw_ver"), &attr.fw_ver)?;
    write(&dir.join("hw_rev"), &format!("0x{:x}", attr.hw_ver))?;
    write(&dir.join("hca_type"), "softverbs")?;
    write(&dir.join("board_id"), "softverbs")?;
    write(
        &dir.join("device/modalias"),
        &format!("softverbs:N{}", d.name),
    )?;
    write(&dir.join("device/numa_node"), "-1")?;
    // The network device the address is on, as a kernel RoCE device's
    // parent lists its own (pyverbs finds the device's address this way).
    if let Some(name) = interface_name(d) {
        let net = dir.join("device/net");
        fs::create_dir_all(&net)?;
        std::os::unix::fs::symlink(Path::new("/sys/class/net").join(&name), net.join(&name))?;
    }
    write_port(&dir.join("ports/1"), d, &cfg)
}

fn write_port(port: &Path, d: &SoftDevice, cfg: &DeviceConfig) -> io::Result<()> {
    let Some(attr) = cfg.port_attr(1) else {
        return Err(io::Error::other(format!("{} has no port 1", d.name)));
    };
    write(&port.join("link_layer"), "Ethernet")?;
    write(&port.join("state"), "4: ACTIVE")?;
    write(&port.join("phys_state"), "5: LinkUp")?;
    write(
        &port.join("rate"),
        &rate_text(attr.active_width, attr.active_speed),
    )?;
    write(&port.join("lid"), "0x0")?;
    write(&port.join("sm_lid"), "0x0")?;
    write(&port.join("sm_sl"), "0")?;
    write(&port.join("lid_mask_count"), "0")?;
    write(
        &port.join("cap_mask"),
        &format!("0x{:08x}", attr.port_cap_flags),
    )?;
    write(&port.join("pkeys/0"), "0xffff")?;
    write_gids(port, d, cfg)
}

/// The kernel's `rate` text: "25 Gb/sec (1X EDR)".
fn rate_text(width: u8, speed: u8) -> String {
    let lanes = match width {
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 1,
    };
    let (per_lane, name) = match speed {
        2 => (5.0, "DDR"),
        4 => (10.0, "QDR"),
        8 => (10.0, "FDR10"),
        16 => (14.0, "FDR"),
        32 => (25.0, "EDR"),
        64 => (50.0, "HDR"),
        128 => (100.0, "NDR"),
        _ => (2.5, "SDR"),
    };
    let total = per_lane * f64::from(lanes);
    format!("{total} Gb/sec ({lanes}X {name})")
}

/// `ports/1/gids/N` for every slot of the table (empty ones read as zero,
/// as the kernel shows them), and the type and network device of each
/// populated one.
fn write_gids(port: &Path, d: &SoftDevice, cfg: &DeviceConfig) -> io::Result<()> {
    let slots = cfg.limits.gid_tbl_len as usize;
    let entries = d.gid_entries();
    let ndev = interface_name(d);
    for i in 0..slots {
        let gid = entries.iter().find(|(n, _)| *n == i).map(|(_, g)| *g);
        write(
            &port.join(format!("gids/{i}")),
            &gid.unwrap_or(Gid::ZERO).to_string(),
        )?;
        if gid.is_none() {
            continue;
        }
        write(&port.join(format!("gid_attrs/types/{i}")), "RoCE v2")?;
        if let Some(name) = &ndev {
            write(&port.join(format!("gid_attrs/ndevs/{i}")), name)?;
        }
    }
    Ok(())
}

fn interface_name(d: &SoftDevice) -> Option<String> {
    let index = crate::netif::ifindex_of(d.ip)?;
    let names = nix::net::if_::if_nameindex().ok()?;
    let found = names.iter().find(|i| i.index() == index);
    found.map(|i| i.name().to_string_lossy().into_owned())
}

/// Writes `text` and a newline (as sysfs reads), creating directories.
fn write(path: &Path, text: &str) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(path, format!("{text}\n"))
}

/// `xxxx:xxxx:xxxx:xxxx`, as sysfs shows a GUID.
pub fn guid_text(guid: u64) -> String {
    let parts: Vec<String> = (0..4)
        .rev()
        .map(|i| format!("{:04x}", (guid >> (16 * i)) & 0xffff))
        .collect();
    parts.join(":")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn read(path: PathBuf) -> String {
        fs::read_to_string(path).unwrap()
    }

    fn device() -> SoftDevice {
        SoftDevice {
            name: "softverbs0".into(),
            ip: "127.0.0.1".parse().unwrap(),
            link_mtu: None,
        }
    }

    /// A fake `/sys` with one real device, `mlx5_0` on uverbs2.
    fn real_sys(at: &Path) -> PathBuf {
        let sys = at.join("sys");
        fs::create_dir_all(sys.join("class/net")).unwrap();
        fs::create_dir_all(sys.join("devices")).unwrap();
        fs::create_dir_all(sys.join("class/infiniband/mlx5_0")).unwrap();
        let uv = sys.join("class/infiniband_verbs/uverbs2");
        fs::create_dir_all(&uv).unwrap();
        fs::write(uv.join("ibdev"), "mlx5_0\n").unwrap();
        fs::write(sys.join("class/infiniband_verbs/abi_version"), "6\n").unwrap();
        sys
    }

    #[test]
    fn the_tree_has_what_libibverbs_reads() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("run/sysfs");
        let sys = real_sys(t.path());
        let d = device();
        let base = uverbs_base(&sys);
        assert_eq!(base, 3);
        write_tree(&root, &sys, std::slice::from_ref(&d), base).unwrap();
        write_tree(&root, &sys, std::slice::from_ref(&d), base).unwrap();
        let class = root.join("class");
        assert_eq!(read(class.join("infiniband_verbs/abi_version")), "6\n");
        assert_eq!(
            read(class.join("infiniband_verbs/uverbs3/ibdev")),
            "softverbs0\n"
        );
        assert_eq!(read(class.join("infiniband_verbs/uverbs3/dev")), "0:0\n");
        let dev = class.join("infiniband/softverbs0");
        assert_eq!(
            read(dev.join("node_guid")),
            format!("{}\n", guid_text(d.guid()))
        );
        let port = dev.join("ports/1");
        assert_eq!(
            read(port.join("gids/0")),
            "fe80:0000:0000:0000:0000:5efe:7f00:0001\n"
        );
        assert_eq!(
            read(port.join("gids/1")),
            "0000:0000:0000:0000:0000:ffff:7f00:0001\n"
        );
        assert_eq!(
            read(port.join("gids/15")),
            "0000:0000:0000:0000:0000:0000:0000:0000\n"
        );
        assert!(!port.join("gids/16").exists());
        for i in 0..2 {
            let ty = port.join(format!("gid_attrs/types/{i}"));
            assert_eq!(read(ty), "RoCE v2\n");
            assert_eq!(read(port.join(format!("gid_attrs/ndevs/{i}"))), "lo\n");
        }
        assert!(!port.join("gid_attrs/types/2").exists());
        assert_eq!(
            fs::read_link(dev.join("device/net/lo")).unwrap(),
            Path::new("/sys/class/net/lo")
        );
        assert_eq!(read(port.join("state")), "4: ACTIVE\n");
        assert_eq!(read(port.join("rate")), "25 Gb/sec (1X EDR)\n");
        assert!(class.join("net").is_dir() && root.join("devices").is_dir());
        // The real device stays visible beside the soft one.
        assert!(class.join("infiniband/mlx5_0").is_dir());
        assert_eq!(
            read(class.join("infiniband_verbs/uverbs2/ibdev")),
            "mlx5_0\n"
        );
        remove_tree(&root).unwrap();
        assert!(!root.exists());
    }

    #[test]
    fn a_tree_read_as_the_real_one_does_not_list_a_soft_device_twice() {
        let t = tempfile::tempdir().unwrap();
        let sys = real_sys(t.path());
        let first = t.path().join("first");
        write_tree(&first, &sys, &[device()], 3).unwrap();
        let second = t.path().join("second");
        write_tree(&second, &first, &[device()], uverbs_base(&first)).unwrap();
        let verbs: Vec<_> = fs::read_dir(second.join("class/infiniband_verbs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(verbs.contains(&"uverbs4".to_string()), "{verbs:?}");
        assert!(!verbs.contains(&"uverbs3".to_string()), "{verbs:?}");
    }

    #[test]
    fn the_command_directory_links_real_and_soft_entries() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().join("real");
        fs::create_dir_all(&real).unwrap();
        fs::write(real.join("uverbs0"), "").unwrap();
        // No sysfs entry: a soft device's number (plugin mode's stand-in).
        fs::write(real.join("uverbs1"), "").unwrap();
        let dev = t.path().join("view");
        write_cdev_dir(&dev, &real, 2, 1).unwrap();
        assert_eq!(
            fs::read_link(dev.join("uverbs1")).unwrap(),
            Path::new(CDEV_TARGET)
        );
        assert_eq!(
            fs::read_link(dev.join("uverbs0")).unwrap(),
            real.join("uverbs0")
        );
        assert_eq!(
            fs::read_link(dev.join("uverbs2")).unwrap(),
            Path::new(CDEV_TARGET)
        );
        assert!(!dev.join("uverbs3").exists());
    }

    #[test]
    fn rate_and_guid_texts_are_the_kernels() {
        assert_eq!(rate_text(2, 16), "56 Gb/sec (4X FDR)");
        assert_eq!(rate_text(1, 1), "2.5 Gb/sec (1X SDR)");
        assert_eq!(guid_text(0x0123_4567_89ab_cdef), "0123:4567:89ab:cdef");
    }
}
