//! The file a process writes its trace or capture into, alone.
//!
//! `SOFTVERBS_TRACE=FILE` and `SOFTVERBS_PCAP=FILE` name one file for
//! every process given the setting unless FILE holds `%p`. Two processes
//! writing one file each from its own offset overwrote each other's
//! records: a trace of both sides of `ibv_rc_pingpong` kept about half
//! its lines, spliced mid-record, and `softverbs trace summarize` refused
//! it; a capture kept one process's packets. So a process takes an
//! exclusive `flock` on the file it writes, held while it runs (and by
//! the children it forks, which share the open file); a process that
//! finds the file held writes `NAME-PID.EXT` beside it instead, and says
//! so. Only regular files are locked and emptied: `/dev/stderr` or a
//! FIFO is written as it is.

use nix::fcntl::{Flock, FlockArg};
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// A file this process writes alone (while `_lock` is held).
#[derive(Debug)]
pub struct OwnFile {
    /// The file's path (the one asked for, or the one beside it).
    pub path: PathBuf,
    /// Where to write (a second descriptor of the locked file).
    pub file: File,
    /// The lock; None for a file that is not a regular one.
    _lock: Option<Flock<File>>,
}

impl io::Write for OwnFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Creates (or empties) the file `template` names, `%p` replaced by this
/// process's id; or, if another process writes that file, its
/// `NAME-PID.EXT` sibling, saying so on standard error.
pub fn create(template: &OsStr) -> io::Result<OwnFile> {
    let pid = std::process::id();
    let path = crate::writer::process_path(template, pid);
    match take(&path)? {
        Some(own) => Ok(own),
        None => {
            let beside = sibling(&path, pid);
            let said = format!(
                "softverbs: {} is written by another process; this one writes {} \
                 (a %p in the name gives each process its own file)\n",
                path.display(),
                beside.display()
            );
            let _ = io::Write::write_all(&mut io::stderr(), said.as_bytes());
            take(&beside)?.ok_or_else(|| io::Error::from(io::ErrorKind::WouldBlock))
        }
    }
}

/// Opens `path` for writing and, if it is a regular file, locks and
/// empties it; None if another process holds its lock.
fn take(path: &Path) -> io::Result<Option<OwnFile>> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Ok(Some(OwnFile {
            path: path.to_path_buf(),
            file,
            _lock: None,
        }));
    }
    let lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => lock,
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
        Err((_, e)) => return Err(e.into()),
    };
    lock.set_len(0)?;
    Ok(Some(OwnFile {
        path: path.to_path_buf(),
        file: lock.try_clone()?,
        _lock: Some(lock),
    }))
}

/// `path` with `-PID` before its extension.
fn sibling(path: &Path, pid: u32) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}-{pid}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{pid}"),
    };
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A file another process holds sends this one to its sibling; a
    /// file held by no one is emptied and taken. (The lock is per open
    /// file: a second open in this process stands for another process.)
    #[test]
    fn a_held_file_sends_the_next_writer_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(&path, b"an old run\n").unwrap();
        let mut first = create(path.as_os_str()).unwrap();
        assert_eq!(first.path, path);
        first.file.write_all(b"first\n").unwrap();
        let mut second = create(path.as_os_str()).unwrap();
        let pid = std::process::id();
        assert_eq!(second.path, dir.path().join(format!("t-{pid}.json")));
        second.file.write_all(b"second\n").unwrap();
        let mut text = String::new();
        File::open(&path)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "first\n", "emptied, then written by its owner alone");
        drop(first);
        let again = create(path.as_os_str()).unwrap();
        assert_eq!(again.path, path, "free again once its writer let go");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }

    #[test]
    fn a_device_is_written_as_it_is() {
        let a = create(OsStr::new("/dev/null")).unwrap();
        let b = create(OsStr::new("/dev/null")).unwrap();
        assert_eq!(
            (a.path.as_path(), b.path.as_path()),
            (Path::new("/dev/null"), Path::new("/dev/null"))
        );
    }

    #[test]
    fn the_sibling_keeps_the_extension() {
        assert_eq!(
            sibling(Path::new("/tmp/a.b.pcap"), 7),
            Path::new("/tmp/a.b-7.pcap")
        );
        assert_eq!(sibling(Path::new("trace"), 7), Path::new("trace-7"));
    }
}
