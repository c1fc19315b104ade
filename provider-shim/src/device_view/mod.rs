//! The device view (preload mode): the soft devices as files, where
//! stacks that inspect the system look for RDMA devices, with no root.
//!
//! UCX, Open MPI and libfabric read `/sys/class/infiniband*` and
//! `/dev/infiniband` themselves, and programs that `dlopen` libibverbs
//! call its own `ibv_get_device_list`, past the preloaded one. So when
//! this library is preloaded, the process's libc calls that look up a
//! path under those directories are redirected ([`interpose`]) into a
//! per-user sysfs look-alike that holds the soft devices beside the real
//! ones (`softverbs_config::sysfs_tree`); the constructor registered the
//! provider with libibverbs as plugin mode does, so libibverbs' own
//! discovery, which reads the same paths, finds the soft devices too. Why
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
//! after, so a child that outlives its parent still finds it. The
//! process holds it as long as it lives, and views no process holds are
//! removed a day after they were written ([`views_in_use`]).

pub mod interpose;
mod location;
mod sorted_dir;
mod views_in_use;

use softverbs_config::sysfs_tree;
use softverbs_config::{Config, SoftDevice};
use std::cell::Cell;
use std::ffi::{CStr, OsStr};
use std::hash::{Hash, Hasher};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::OnceLock;

/// This library serves the process in preload mode (set by its
/// constructor): only then are paths redirected.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// This library's file (the view's name covers its build).
static LIBRARY: OnceLock<&'static CStr> = OnceLock::new();
/// Where making the view stands: [`IDLE`], [`MAKING`] or [`READY`].
static STATE: AtomicU8 = AtomicU8::new(IDLE);
/// The process whose thread makes the view (0 until it says): a forked
/// child finds its parent's pid here if it forked mid-make.
static MAKER: AtomicU32 = AtomicU32::new(0);
/// The view, once [`READY`] (`None`: it could not be made; said once).
static VIEW: OnceLock<Option<View>> = OnceLock::new();

const IDLE: u8 = 0;
const MAKING: u8 = 1;
const READY: u8 = 2;

thread_local! {
    /// This thread is making the view: its own file calls (which reach
    /// the interposers too), and a signal handler's, see the real paths.
    static MAKER_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Where the view's two halves are.
#[derive(Debug)]
pub struct View {
    /// Stands in for `/sys`.
    sys: Vec<u8>,
    /// Stands in for `/dev/infiniband`.
    dev: Vec<u8>,
    /// The view's lock, held shared while the process lives (`None`: it
    /// could not be taken; the view is used all the same).
    _held: Option<std::os::fd::OwnedFd>,
}

/// Preload mode: paths are redirected from now on, the view made at the
/// first that needs it. Called by the library's constructor with the
/// library's file; allocates nothing (see the module doc).
pub fn enable(library: &'static CStr) {
    let _ = LIBRARY.set(library);
    ENABLED.store(true, Ordering::Release);
}

/// The view, made now if this is the first need of it; `None` in plugin
/// mode, while this thread makes it, or when it could not be made. Other
/// threads of the process wait for the one making it (which takes no
/// lock anyone else may hold: no loader call, no libibverbs call); a
/// child forked while its parent was making it makes its own.
pub fn get() -> Option<&'static View> {
    if !ENABLED.load(Ordering::Acquire) || MAKER_THREAD.with(Cell::get) {
        return None;
    }
    let pid = std::process::id();
    loop {
        match STATE.load(Ordering::Acquire) {
            READY => return VIEW.get().and_then(Option::as_ref),
            IDLE if claim(IDLE, pid) => return make_now(),
            MAKING => {
                let maker = MAKER.load(Ordering::Acquire);
                if maker != 0 && maker != pid && claim_from_parent(maker, pid) {
                    return make_now();
                }
                std::thread::yield_now();
            }
            _ => {}
        }
    }
}

/// Takes the making of the view from state `from`.
fn claim(from: u8, pid: u32) -> bool {
    MAKER_THREAD.with(|m| m.set(true));
    let won = STATE
        .compare_exchange(from, MAKING, Ordering::AcqRel, Ordering::Acquire)
        .is_ok();
    if won {
        MAKER.store(pid, Ordering::Release);
    } else {
        MAKER_THREAD.with(|m| m.set(false));
    }
    won
}

/// A forked child whose parent was making the view: the parent's thread
/// did not come along, so the child makes it.
fn claim_from_parent(parent: u32, pid: u32) -> bool {
    MAKER_THREAD.with(|m| m.set(true));
    let won = MAKER
        .compare_exchange(parent, pid, Ordering::AcqRel, Ordering::Acquire)
        .is_ok();
    if !won {
        MAKER_THREAD.with(|m| m.set(false));
    }
    won
}

/// Makes the view (this thread claimed it): errno as the caller left it,
/// a panic only a missing view.
fn make_now() -> Option<&'static View> {
    let errno = crate::guard::errno();
    let view = crate::guard::guard(None, make);
    let _ = VIEW.set(view);
    STATE.store(READY, Ordering::Release);
    MAKER_THREAD.with(|m| m.set(false));
    crate::guard::set_errno(errno);
    VIEW.get().and_then(Option::as_ref)
}

/// Makes the view: the files only. The provider was registered with
/// libibverbs by the constructor, and libibverbs finds the soft devices
/// in the view once its reads of sysfs come here.
fn make() -> Option<View> {
    match build() {
        Ok(view) => view,
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
    let mut held = None;
    // A view another process removes meanwhile is written again (it
    // removes only views a day old: at most once or twice).
    for _ in 0..3 {
        if !dir.join("sys").is_dir() {
            write_once(&home, &dir, &config.devices, &real_sys, base)
                .map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
            views_in_use::remove_unused(&home, &dir, views_in_use::UNUSED_FOR);
        }
        held = views_in_use::hold(&dir);
        if held.is_some() {
            break;
        }
    }
    Ok(Some(View {
        sys: dir.join("sys").as_os_str().as_bytes().to_vec(),
        dev: dir.join("dev/infiniband").as_os_str().as_bytes().to_vec(),
        _held: held,
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
    let library = LIBRARY
        .get()
        .and_then(|file| std::fs::metadata(OsStr::from_bytes(file.to_bytes())).ok());
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
    let written = sysfs_tree::write_tree(&tmp.join("sys"), real_sys, devices, base)
        .and_then(|()| {
            let dev = tmp.join("dev/infiniband");
            sysfs_tree::write_cdev_dir(&dev, Path::new("/dev/infiniband"), devices.len(), base)
        })
        .and_then(|()| std::fs::write(tmp.join(views_in_use::IN_USE), b""));
    let placed = written
        .and_then(|()| seal(&tmp))
        .and_then(|()| std::fs::rename(&tmp, dir));
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

/// Makes every file under `dir` read-only: the view is shared by all of
/// the user's processes and must not change under them (a program that
/// opens a sysfs file for writing gets EACCES, as from sysfs).
fn seal(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            seal(&entry.path())?;
        } else if kind.is_file() {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o444))?;
        }
    }
    Ok(())
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
        enable(c"/nonexistent");
        STATE.store(READY, Ordering::Release);
        VIEW.get_or_init(|| {
            Some(View {
                sys: b"/v/sys".to_vec(),
                dev: b"/v/dev/infiniband".to_vec(),
                _held: None,
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
