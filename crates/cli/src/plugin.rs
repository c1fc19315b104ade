//! `softverbs setup` / `softverbs teardown`: the device entries libibverbs
//! discovers in plugin mode on a host without an RDMA kernel stack.
//!
//! Without the kernel, libibverbs lists devices from
//! `$SYSFS_PATH/class/infiniband_verbs` (default `/sys`, which cannot be
//! written), so setup writes a small sysfs look-alike under [`SYSFS_ROOT`]
//! and programs must run with `SYSFS_PATH` set to it. Every other
//! top-level entry of `/sys` (and of `/sys/class`) is linked in, so the
//! tree stands in for `/sys` as far as libibverbs looks. Each device also
//! needs `/dev/infiniband/uverbsN`, a character device libibverbs opens as
//! the command fd; a link to `/dev/full` serves (softverbs sends no kernel
//! commands, and a stray write fails cleanly with ENOSPC).

use softverbs_config::{Config, SoftDevice};
use softverbs_engine::Gid;
use std::fs;
use std::io;
use std::path::Path;

/// Where setup writes the sysfs tree: tmpfs-backed on most systems, so,
/// like the `/dev` entries, it does not outlive a reboot.
pub const SYSFS_ROOT: &str = "/run/softverbs/sysfs";
/// Where libibverbs looks for command devices (`RDMA_CDEV_DIR`).
const CDEV_DIR: &str = "/dev/infiniband";
/// What every command device entry links to.
const CDEV_TARGET: &str = "/dev/full";
/// The uverbs ABI version the kernel reports (libibverbs accepts 3..6).
const UVERBS_ABI: u32 = 6;
/// Where `make install` puts the driver file libibverbs reads.
const DRIVER_FILE: &str = "/etc/libibverbs.d/softverbs.driver";

/// `softverbs setup`.
pub fn setup() -> Result<(), String> {
    require_root("setup")?;
    let config = Config::load().map_err(|e| format!("bad configuration: {e}"))?;
    let cdevs = Path::new(CDEV_DIR);
    check_cdevs_free(cdevs, config.devices.len())?;
    let root = Path::new(SYSFS_ROOT);
    write_tree(root, Path::new("/sys"), &config.devices)
        .map_err(|e| format!("cannot write {SYSFS_ROOT}: {e}"))?;
    link_cdevs(cdevs, config.devices.len()).map_err(|e| format!("cannot write {CDEV_DIR}: {e}"))?;
    report(&config);
    Ok(())
}

/// `softverbs teardown`: removes what setup made; nothing else.
pub fn teardown() -> Result<(), String> {
    require_root("teardown")?;
    remove_cdevs(Path::new(CDEV_DIR)).map_err(|e| format!("cannot clean {CDEV_DIR}: {e}"))?;
    remove_tree(Path::new(SYSFS_ROOT)).map_err(|e| format!("cannot remove {SYSFS_ROOT}: {e}"))?;
    println!("removed {SYSFS_ROOT} and the softverbs entries of {CDEV_DIR}");
    Ok(())
}

fn require_root(what: &str) -> Result<(), String> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(format!(
            "`softverbs {what}` must run as root (it writes {CDEV_DIR}); try `sudo softverbs {what}`"
        ))
    }
}

fn report(config: &Config) {
    println!("configuration: {}", config.source);
    for (i, d) in config.devices.iter().enumerate() {
        println!("{}: uverbs{i}, {}", d.name, d.ip);
    }
    if !Path::new(DRIVER_FILE).exists() {
        println!("note: {DRIVER_FILE} is missing; install the provider with `make install`");
    }
    if Path::new("/sys/module/ib_core").exists() {
        println!("note: this host has an RDMA kernel stack; libibverbs lists its devices over netlink and ignores this tree");
    }
    println!("programs find the devices with this in their environment:");
    println!("export SYSFS_PATH={SYSFS_ROOT}");
}

fn uverbs(i: usize) -> String {
    format!("uverbs{i}")
}

/// An existing `uverbsN` that is not ours belongs to a kernel driver.
fn check_cdevs_free(dir: &Path, n: usize) -> Result<(), String> {
    for i in 0..n {
        let path = dir.join(uverbs(i));
        if path.symlink_metadata().is_ok() && !is_ours(&path) {
            return Err(format!(
                "{} exists and is not a softverbs entry; not touching it",
                path.display()
            ));
        }
    }
    Ok(())
}

fn is_ours(path: &Path) -> bool {
    fs::read_link(path).is_ok_and(|t| t == Path::new(CDEV_TARGET))
}

fn link_cdevs(dir: &Path, n: usize) -> io::Result<()> {
    remove_cdevs(dir)?;
    fs::create_dir_all(dir)?;
    for i in 0..n {
        std::os::unix::fs::symlink(CDEV_TARGET, dir.join(uverbs(i)))?;
    }
    Ok(())
}

/// Removes our links, and the directory if that leaves it empty.
fn remove_cdevs(dir: &Path) -> io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let path = entry?.path();
        if is_ours(&path) {
            fs::remove_file(&path)?;
        }
    }
    remove_if_empty(dir)
}

fn remove_if_empty(dir: &Path) -> io::Result<()> {
    match fs::remove_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound && !is_not_empty(&e) => Err(e),
        _ => Ok(()),
    }
}

fn is_not_empty(e: &io::Error) -> bool {
    e.raw_os_error() == Some(nix::libc::ENOTEMPTY)
}

fn remove_tree(root: &Path) -> io::Result<()> {
    match fs::remove_dir_all(root) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    root.parent().map_or(Ok(()), remove_if_empty)
}

/// Writes the tree under `root` from scratch, linking in `real_sys`'s
/// other entries.
pub fn write_tree(root: &Path, real_sys: &Path, devices: &[SoftDevice]) -> io::Result<()> {
    remove_tree(root)?;
    let class = root.join("class");
    fs::create_dir_all(&class)?;
    link_others(real_sys, root, &["class"])?;
    link_others(
        &real_sys.join("class"),
        &class,
        &["infiniband", "infiniband_verbs"],
    )?;
    let verbs = class.join("infiniband_verbs");
    write(&verbs.join("abi_version"), &UVERBS_ABI.to_string())?;
    for (i, d) in devices.iter().enumerate() {
        write_uverbs(&verbs.join(uverbs(i)), d)?;
        write_device(&class.join("infiniband").join(&d.name), d)?;
    }
    Ok(())
}

/// Links every entry of `from` except `skip` into `to` (a missing `from`
/// is fine: the tree then holds only what libibverbs needs).
fn link_others(from: &Path, to: &Path, skip: &[&str]) -> io::Result<()> {
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

/// `class/infiniband_verbs/uverbsN`: which device, and `dev` 0:0 so that
/// libibverbs does not compare the command device's numbers.
fn write_uverbs(dir: &Path, d: &SoftDevice) -> io::Result<()> {
    write(&dir.join("ibdev"), &d.name)?;
    write(&dir.join("dev"), "0:0")?;
    write(&dir.join("abi_version"), "1")
}

/// `class/infiniband/NAME`: what libibverbs reads from sysfs rather than
/// asking the provider (node GUID, P_Keys), and the GID attributes tools
/// read from it.
fn write_device(dir: &Path, d: &SoftDevice) -> io::Result<()> {
    let guid = guid_text(d.guid());
    write(&dir.join("node_type"), "1: CA")?;
    write(&dir.join("node_guid"), &guid)?;
    write(&dir.join("sys_image_guid"), &guid)?;
    write(
        &dir.join("device/modalias"),
        &format!("softverbs:N{}", d.name),
    )?;
    let port = dir.join("ports/1");
    write(&port.join("link_layer"), "Ethernet")?;
    write(&port.join("pkeys/0"), "0xffff")?;
    write_gids(&port, d)
}

/// `ports/1/gids/N` for every slot of the table (empty ones read as zero,
/// as the kernel shows them), and the type and network device of each
/// populated one.
fn write_gids(port: &Path, d: &SoftDevice) -> io::Result<()> {
    let slots = d.device_config(0).limits.gid_tbl_len as usize;
    let entries = crate::gid_table::entries(d);
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
    let index = softverbs_config::netif::ifindex_of(d.ip)?;
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

    /// A test directory that removes itself.
    struct TempDir(PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn temp(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("softverbs-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn read(path: PathBuf) -> String {
        fs::read_to_string(path).unwrap()
    }

    #[test]
    fn the_tree_has_what_libibverbs_reads() {
        let t = temp("tree");
        let (root, sys) = (t.0.join("run/sysfs"), t.0.join("sys"));
        fs::create_dir_all(sys.join("class/net")).unwrap();
        fs::create_dir_all(sys.join("devices")).unwrap();
        let d = SoftDevice {
            name: "softverbs0".into(),
            ip: "127.0.0.1".parse().unwrap(),
            link_mtu: None,
        };
        write_tree(&root, &sys, std::slice::from_ref(&d)).unwrap();
        write_tree(&root, &sys, std::slice::from_ref(&d)).unwrap();
        let class = root.join("class");
        assert_eq!(read(class.join("infiniband_verbs/abi_version")), "6\n");
        assert_eq!(
            read(class.join("infiniband_verbs/uverbs0/ibdev")),
            "softverbs0\n"
        );
        assert_eq!(read(class.join("infiniband_verbs/uverbs0/dev")), "0:0\n");
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
        assert!(class.join("net").is_dir() && root.join("devices").is_dir());
        remove_tree(&root).unwrap();
        assert!(!root.exists() && !root.parent().unwrap().exists());
    }

    #[test]
    fn guid_text_is_four_groups() {
        assert_eq!(guid_text(0x0123_4567_89ab_cdef), "0123:4567:89ab:cdef");
    }

    #[test]
    fn cdev_links_are_ours_and_others_are_left_alone() {
        let t = temp("cdev");
        let dir = t.0.join("infiniband");
        link_cdevs(&dir, 2).unwrap();
        assert!(is_ours(&dir.join("uverbs1")));
        fs::write(dir.join("uverbs2"), "").unwrap();
        assert!(check_cdevs_free(&dir, 3).is_err());
        remove_cdevs(&dir).unwrap();
        assert!(!dir.join("uverbs0").exists() && dir.join("uverbs2").exists());
    }
}
