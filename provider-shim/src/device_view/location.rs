//! Where a user's views live: `$XDG_RUNTIME_DIR/softverbs` (a tmpfs of
//! the user's own on most systems), else `/tmp/softverbs-UID`. The
//! directory must be the user's and closed to others, so that nobody else
//! can plant a view (and with it files the user's programs read).

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The user's view directory, created if missing.
pub fn user_directory() -> Result<PathBuf, String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    // A runtime directory that is gone (a stale variable) is no reason
    // to have no view.
    let dir = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() && Path::new(&d).is_dir() => PathBuf::from(d).join("softverbs"),
        _ => PathBuf::from(format!("/tmp/softverbs-{uid}")),
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(format!("cannot create {}: {e}", dir.display()))
        }
        _ => {}
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{} is not a directory of this user's, closed to others",
            dir.display()
        ));
    }
    Ok(dir)
}
