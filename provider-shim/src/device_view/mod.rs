//! The device view (preload mode): the soft devices as files, where
//! stacks that inspect the system look for RDMA devices, with no root.
//!
//! UCX, Open MPI and libfabric read `/sys/class/infiniband*` and
//! `/dev/infiniband` themselves, and programs that `dlopen` libibverbs
//! call its own `ibv_get_device_list`, past the preloaded one. So when
//! this library is preloaded, the process's libc calls that look up a
//! path under those directories are redirected ([`interpose`]) into a
//! per-user sysfs look-alike that holds the soft devices beside the real
//! ones (`softverbs_config::sysfs_tree`), and the provider is registered
//! with libibverbs as plugin mode registers it: libibverbs' own discovery,
//! which reads the same paths, then finds the soft devices too. Why
//! interposition and not a user and mount namespace: docs/architecture.md,
//! "The device view".
//!
//! The view is made at the first look at one of those paths (or the
//! first device list), not when the library loads: a process that never
//! looks pays nothing, and nothing of ours touches the program's heap
//! before its `main` (a program that reads past the end of a string it
//! allocated, as rdma-sys' example client does, finds what it would find
//! without softverbs). Its directory is named by a hash of everything it
//! holds, so it is written once, atomically (a rename), and shared by
//! every process of the user with the same devices; it is never changed
//! after, so a child that outlives its parent still finds it.

pub mod interpose;
mod location;

use softverbs_config::sysfs_tree;
use softverbs_config::{Config, SoftDevice};
use std::cell::Cell;
use std::ffi::{CStr, OsStr};
use std::hash::{Hash, Hasher};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// This library serves the process in preload mode (set by its
/// constructor): only then are paths redirected.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// The view, once made (`None`: it could not be; said once).
static VIEW: OnceLock<Option<View>> = OnceLock::new();

thread_local! {
    /// This thread is making the view: its own file calls (which reach
    /// the interposers too) see the real paths.
    static MAKING: Cell<bool> = const { Cell::new(false) };
}

/// Where the view's two halves are.
#[derive(Debug)]
pub struct View {
    /// Stands in for `/sys`.
    sys: Vec<u8>,
    /// Stands in for `/dev/infiniband`.
    dev: Vec<u8>,
}

/// Preload mode: paths are redirected from now on, the view made at the
/// first that needs it. Called by the library's constructor, which must
/// not allocate (see the module doc).
pub fn enable() {
    ENABLED.store(true, Ordering::Release);
}

/// The view, made now if this is the first need of it; `None` in plugin
/// mode, while this thread makes it, or when it could not be made. Other
/// threads wait for the one making it.
pub fn get() -> Option<&'static View> {
    if !ENABLED.load(Ordering::Acquire) || MAKING.with(Cell::get) {
        return None;
    }
    VIEW.get_or_init(|| {
        MAKING.with(|m| m.set(true));
        let view = make();
        MAKING.with(|m| m.set(false));
        view
    })
    .as_ref()
}

/// Makes the view and registers the provider with libibverbs, which finds
/// the soft devices in it from then on.
fn make() -> Option<View> {
    match build() {
        Ok(Some(view)) => {
            crate::plugin::register("no device view");
            Some(view)
        }
        Ok(None) => None,
        Err(why) => {
            softverbs_transport::say!(
                "softverbs: no device view ({why}); programs that read sysfs or dlopen libibverbs will not see the soft devices"
            );
            None
        }
    }
}

fn build() -> Result<Option<View>, String> {
    let Ok(config) = Config::load() else {
        return Ok(None); // said where devices are listed
    };
    if config.devices.is_empty() {
        return Ok(None);
    }
    let real_sys = real_sys();
    let home = location::user_directory()?;
    let base = sysfs_tree::uverbs_base(&real_sys);
    let name = format!(
        "view-{:016x}",
        fingerprint(&config.devices, &real_sys, base)
    );
    let dir = home.join(name);
    if !dir.join("sys").is_dir() {
        write_once(&home, &dir, &config.devices, &real_sys, base)
            .map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
    }
    Ok(Some(View {
        sys: dir.join("sys").as_os_str().as_bytes().to_vec(),
        dev: dir.join("dev/infiniband").as_os_str().as_bytes().to_vec(),
    }))
}

/// What the real system is, as libibverbs would read it: `SYSFS_PATH`
/// when the user set one (a tree `softverbs setup` wrote), else `/sys`.
fn real_sys() -> PathBuf {
    match std::env::var_os("SYSFS_PATH") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from("/sys"),
    }
}

/// Names a view by everything that goes into it: the devices (whose GIDs
/// and network devices follow from their addresses), where the real
/// entries are and which there are, and this build of the library (its
/// file's identity, so that a rebuilt library writing a different tree
/// never reuses an older one's).
fn fingerprint(devices: &[SoftDevice], real_sys: &Path, base: usize) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    env!("CARGO_PKG_VERSION").hash(&mut h);
    let library = crate::plugin::object_of(fingerprint as *const std::ffi::c_void)
        .and_then(|o| std::fs::metadata(OsStr::from_bytes(o.file.to_bytes())).ok());
    if let Some(m) = library {
        (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()).hash(&mut h);
    }
    (devices, real_sys, base).hash(&mut h);
    for d in devices {
        softverbs_config::netif::ifindex_of(d.ip).hash(&mut h);
    }
    for dir in [
        real_sys.join("class"),
        real_sys.join("class/infiniband"),
        real_sys.join("class/infiniband_verbs"),
        PathBuf::from("/dev/infiniband"),
    ] {
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        names.sort();
        (dir, names).hash(&mut h);
    }
    h.finish()
}

/// Writes the view in a private directory and renames it into place; a
/// process that lost the race uses the winner's (they are the same).
fn write_once(
    home: &Path,
    dir: &Path,
    devices: &[SoftDevice],
    real_sys: &Path,
    base: usize,
) -> std::io::Result<()> {
    let unique = format!("tmp-{}-{:x}", std::process::id(), fastrand::u64(..));
    let tmp = home.join(unique);
    let written =
        sysfs_tree::write_tree(&tmp.join("sys"), real_sys, devices, base).and_then(|()| {
            let dev = tmp.join("dev/infiniband");
            sysfs_tree::write_cdev_dir(&dev, Path::new("/dev/infiniband"), devices.len(), base)
        });
    let placed = written.and_then(|()| std::fs::rename(&tmp, dir));
    let _ = sysfs_tree::remove_tree(&tmp);
    match placed {
        Err(_) if dir.join("sys").is_dir() => Ok(()),
        other => other,
    }
}

/// Whether the view stands in for `path` (a prefix compare: every path
/// the process looks up passes here).
pub fn in_view(path: &[u8]) -> bool {
    path.starts_with(b"/sys/class/infiniband") || path.starts_with(b"/dev/infiniband")
}

/// The view's name for `path`, written into `buf`, if `path` is one the
/// view stands in for: `/sys/class/infiniband*` and `/dev/infiniband`
/// with what is below them.
pub fn redirect<'b>(path: &CStr, buf: &'b mut [u8; libc::PATH_MAX as usize]) -> Option<&'b CStr> {
    let bytes = path.to_bytes();
    let (base, rest) = if bytes.starts_with(b"/sys/class/infiniband") {
        (get()?.sys.as_slice(), &bytes[b"/sys".len()..])
    } else if let Some(rest) = bytes.strip_prefix(b"/dev/infiniband") {
        if !(rest.is_empty() || rest[0] == b'/') {
            return None;
        }
        (get()?.dev.as_slice(), rest)
    } else {
        return None;
    };
    let len = base.len() + rest.len();
    if len >= buf.len() {
        return None;
    }
    buf[..base.len()].copy_from_slice(base);
    buf[base.len()..len].copy_from_slice(rest);
    buf[len] = 0;
    CStr::from_bytes_with_nul(&buf[..=len]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> &'static View {
        enable();
        VIEW.get_or_init(|| {
            Some(View {
                sys: b"/v/sys".to_vec(),
                dev: b"/v/dev/infiniband".to_vec(),
            })
        })
        .as_ref()
        .unwrap()
    }

    fn redirected(path: &CStr) -> Option<String> {
        view();
        let mut buf = [0u8; libc::PATH_MAX as usize];
        redirect(path, &mut buf).map(|p| p.to_string_lossy().into_owned())
    }

    #[test]
    fn only_the_rdma_paths_are_redirected() {
        assert_eq!(
            redirected(c"/sys/class/infiniband/softverbs0/ports/1/state").as_deref(),
            Some("/v/sys/class/infiniband/softverbs0/ports/1/state")
        );
        assert_eq!(
            redirected(c"/sys/class/infiniband_verbs").as_deref(),
            Some("/v/sys/class/infiniband_verbs")
        );
        assert_eq!(
            redirected(c"/dev/infiniband/uverbs1").as_deref(),
            Some("/v/dev/infiniband/uverbs1")
        );
        assert_eq!(
            redirected(c"/dev/infiniband").as_deref(),
            Some("/v/dev/infiniband")
        );
        assert_eq!(redirected(c"/dev/infinibandx"), None);
        assert_eq!(redirected(c"/sys/class/net/lo"), None);
        assert_eq!(redirected(c"sys/class/infiniband"), None);
    }
}
