//! Which views processes use, and the removal of those none uses.
//!
//! A view is named by a hash of what it holds, the library's build
//! included, so every rebuild, configuration and network namespace writes
//! a new one (some 240 KB), and the user's directory would only grow. So
//! a process holds a shared `flock` on its view's [`IN_USE`] file for its
//! life (the descriptor is inherited by forked children, which keep it
//! held after the parent exits), and a process that writes a new view
//! removes the others that no process holds and that were written more
//! than [`UNUSED_FOR`] ago (a view of an older build has no such file:
//! its processes are not seen, and the age alone protects them).
//!
//! Removal takes the exclusive lock and renames the view away before
//! deleting it; a process about to use a view checks, once it holds the
//! lock, that the file it locked is still the view's, and writes the view
//! again if it went.

use rustix::fs::{flock, FlockOperation};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The file, in every view, that processes using it lock shared.
pub const IN_USE: &str = "in-use";
/// How old an unused view must be before it is removed.
pub const UNUSED_FOR: Duration = Duration::from_secs(24 * 60 * 60);

/// Holds view `dir` for this process: its [`IN_USE`] file, locked shared,
/// to be kept open. `None` if the view is gone or going (write it again).
pub fn hold(dir: &Path) -> Option<OwnedFd> {
    let path = dir.join(IN_USE);
    let file = std::fs::File::open(&path).ok()?;
    lock_if_current(file, &path)
}

/// Locks `file`, opened as `path`, shared, if `path` is still that file
/// once it is locked (a removal may have renamed the view away between
/// the open and the lock).
fn lock_if_current(file: std::fs::File, path: &Path) -> Option<OwnedFd> {
    // Blocks only while a removal holds it, for the time of a rename.
    flock(file.as_fd(), FlockOperation::LockShared).ok()?;
    let locked = file.metadata().ok()?;
    let now = std::fs::metadata(path).ok()?;
    let same = (locked.dev(), locked.ino()) == (now.dev(), now.ino());
    same.then(|| file.into())
}

/// Removes from `home` the views other than `keep` that no process holds
/// and that are older than `unused_for`, and the half-written ones of
/// writers that died that long ago. Failures leave a view in place.
pub fn remove_unused(home: &Path, keep: &Path, unused_for: Duration) {
    let Ok(entries) = std::fs::read_dir(home) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| older_than(t, unused_for));
        if path == keep || !old {
            continue;
        }
        if name.starts_with("view-") {
            remove_if_unheld(home, &path);
        } else if name.starts_with("tmp-") {
            let _ = softverbs_config::sysfs_tree::remove_tree(&path);
        }
    }
}

fn older_than(t: SystemTime, age: Duration) -> bool {
    SystemTime::now()
        .duration_since(t)
        .is_ok_and(|since| since > age)
}

/// Removes view `dir` if no process holds it: renamed away under the
/// exclusive lock (a process that locks after sees its file gone), then
/// deleted.
fn remove_if_unheld(home: &Path, dir: &Path) {
    let lock = std::fs::File::open(dir.join(IN_USE)).ok();
    if let Some(file) = &lock {
        if flock(file.as_fd(), FlockOperation::NonBlockingLockExclusive).is_err() {
            return; // held
        }
    }
    let away = home.join(format!(
        "tmp-gone-{}-{:x}",
        std::process::id(),
        fastrand::u64(..)
    ));
    let moved = std::fs::rename(dir, &away).is_ok();
    drop(lock);
    if moved {
        let _ = softverbs_config::sysfs_tree::remove_tree(&away);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view named `name` in `home` with its in-use file, written `age` ago.
    fn view(home: &Path, name: &str, age: Duration) -> std::path::PathBuf {
        let dir = home.join(name);
        std::fs::create_dir_all(dir.join("sys/class")).unwrap();
        std::fs::write(dir.join(IN_USE), b"").unwrap();
        set_age(&dir, age);
        dir
    }

    fn set_age(dir: &Path, age: Duration) {
        let when = SystemTime::now() - age;
        std::fs::File::open(dir)
            .unwrap()
            .set_modified(when)
            .unwrap();
    }

    const DAY: Duration = Duration::from_secs(24 * 60 * 60);

    #[test]
    fn only_old_views_nobody_holds_are_removed() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        let unused = view(home, "view-unused", 2 * DAY);
        let held = view(home, "view-held", 2 * DAY);
        let young = view(home, "view-young", Duration::from_secs(60));
        let kept = view(home, "view-kept", 2 * DAY);
        let older_build = home.join("view-older-build");
        std::fs::create_dir_all(&older_build).unwrap();
        set_age(&older_build, 2 * DAY);
        let dead_writer = home.join("tmp-123-abc");
        std::fs::create_dir_all(dead_writer.join("sys")).unwrap();
        set_age(&dead_writer, 2 * DAY);
        let _holding = hold(&held).expect("held");

        remove_unused(home, &kept, DAY);

        assert!(!unused.exists() && !older_build.exists() && !dead_writer.exists());
        assert!(held.join(IN_USE).exists() && young.exists() && kept.exists());
        let left: Vec<_> = std::fs::read_dir(home).unwrap().flatten().collect();
        assert_eq!(left.len(), 3, "nothing renamed away is left: {left:?}");
    }

    #[test]
    fn a_view_removed_between_open_and_lock_is_not_held() {
        let home = tempfile::tempdir().unwrap();
        let dir = view(home.path(), "view-a", 2 * DAY);
        let path = dir.join(IN_USE);
        let opened = || std::fs::File::open(&path).unwrap();
        let (first, second) = (opened(), opened());
        std::fs::rename(&dir, home.path().join("tmp-gone")).unwrap();
        assert!(lock_if_current(first, &path).is_none(), "renamed away");
        view(home.path(), "view-a", Duration::ZERO);
        assert!(lock_if_current(second, &path).is_none(), "written again");
        assert!(hold(&dir).is_some(), "the view written again is held");
        std::fs::remove_file(&path).unwrap();
        assert!(hold(&dir).is_none(), "a view without its file is not held");
    }
}
