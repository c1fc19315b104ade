//! `softverbs setup` / `softverbs teardown`: the device entries libibverbs
//! discovers in plugin mode on a host without an RDMA kernel stack.
//!
//! Without the kernel, libibverbs lists devices from
//! `$SYSFS_PATH/class/infiniband_verbs` (default `/sys`, which cannot be
//! written), so setup writes a small sysfs look-alike under [`SYSFS_ROOT`]
//! and programs must run with `SYSFS_PATH` set to it. Every other
//! top-level entry of `/sys` (and of `/sys/class`) is linked in, so the
//! tree stands in for `/sys` as far as libibverbs looks (the tree itself:
//! `softverbs_config::sysfs_tree`). Each device also needs
//! `/dev/infiniband/uverbsN`, a character device libibverbs opens as the
//! command fd; a link to `/dev/full` serves.

use softverbs_config::sysfs_tree::{self, uverbs, CDEV_TARGET};
use softverbs_config::Config;
use std::fs;
use std::io;
use std::path::Path;

/// Where setup writes the sysfs tree: tmpfs-backed on most systems, so,
/// like the `/dev` entries, it does not outlive a reboot.
pub const SYSFS_ROOT: &str = "/run/softverbs/sysfs";
/// Where libibverbs looks for command devices (`RDMA_CDEV_DIR`).
const CDEV_DIR: &str = "/dev/infiniband";
/// Where `make install` puts the driver file libibverbs reads.
const DRIVER_FILE: &str = "/etc/libibverbs.d/softverbs.driver";

/// `softverbs setup`.
pub fn setup() -> Result<(), String> {
    require_root("setup")?;
    let config = Config::load().map_err(|e| format!("bad configuration: {e}"))?;
    let cdevs = Path::new(CDEV_DIR);
    let (sys, root) = (Path::new("/sys"), Path::new(SYSFS_ROOT));
    let base = sysfs_tree::uverbs_base(sys);
    let numbers = base..base + config.devices.len();
    // Checked before anything changes: an earlier setup stays whole if
    // this one cannot be made (its own links count as free).
    check_cdevs_free(cdevs, numbers.clone())?;
    remove_cdevs(cdevs).map_err(|e| format!("cannot clean {CDEV_DIR}: {e}"))?;
    sysfs_tree::write_tree(root, sys, &config.devices, base)
        .map_err(|e| format!("cannot write {SYSFS_ROOT}: {e}"))?;
    link_cdevs(cdevs, numbers.clone()).map_err(|e| format!("cannot write {CDEV_DIR}: {e}"))?;
    report(&config, base);
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

fn report(config: &Config, base: usize) {
    println!("configuration: {}", config.source);
    for (i, d) in config.devices.iter().enumerate() {
        println!("{}: {}, {}", d.name, uverbs(base + i), d.ip);
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

/// An existing `uverbsN` that is not ours belongs to a kernel driver.
fn check_cdevs_free(dir: &Path, numbers: std::ops::Range<usize>) -> Result<(), String> {
    for i in numbers {
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

fn link_cdevs(dir: &Path, numbers: std::ops::Range<usize>) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    for i in numbers {
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

/// Removes the tree, and `/run/softverbs` if that leaves it empty.
fn remove_tree(root: &Path) -> io::Result<()> {
    sysfs_tree::remove_tree(root)?;
    root.parent().map_or(Ok(()), remove_if_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdev_links_are_ours_and_others_are_left_alone() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("infiniband");
        link_cdevs(&dir, 0..2).unwrap();
        assert!(is_ours(&dir.join("uverbs1")));
        fs::write(dir.join("uverbs2"), "").unwrap();
        assert!(check_cdevs_free(&dir, 0..3).is_err());
        remove_cdevs(&dir).unwrap();
        assert!(!dir.join("uverbs0").exists() && dir.join("uverbs2").exists());
    }
}
