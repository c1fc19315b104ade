//! Whether memory an application registers is really there, as the kernel
//! checks when it pins an MR's pages (`ib_umem_get`, whose page pinning
//! checks each mapping's flags): every byte mapped, writable when the MR
//! grants any write right and else readable, and none of it the kernel's
//! own pages mapped into the process ([vvar], [vsyscall]: no pages to
//! pin), nor a file's pages past its end (a fault there is SIGBUS, which
//! pinning reports as EFAULT). A provider that skipped this would accept
//! NULL or a read-only buffer and crash later, at the first peer WRITE.

use crate::own_memory;
use procfs::process::{MMPermissions, MMapPath, MemoryMap, Process};

/// `Err(EFAULT)` unless `[addr, addr+len)` is mapped throughout, writable
/// if `write` and else readable, as the kernel's pinning asks (a mapping
/// made with PROT_WRITE alone can be registered for writing). The
/// mappings are read from `/proc/self/maps`, sorted by address, so one
/// pass suffices; a process that cannot open it (out of descriptors:
/// EMFILE) gets that error, not EFAULT, for its memory is not at fault.
pub fn check(addr: u64, len: u64, write: bool) -> Result<(), i32> {
    let maps = this_thread().and_then(|p| p.maps()).map_err(|e| match e {
        procfs::ProcError::Io(e, _) => e.raw_os_error().unwrap_or(libc::EFAULT),
        _ => libc::EFAULT,
    })?;
    let need = if write {
        MMPermissions::WRITE
    } else {
        MMPermissions::READ
    };
    if len == 0 {
        return Ok(()); // nothing to pin; the verb's own rules decide
    }
    let end = addr.checked_add(len).ok_or(libc::EFAULT)?;
    let mut covered = addr;
    for m in maps.iter() {
        let (start, stop) = m.address;
        if stop <= covered {
            continue;
        }
        if start > covered || !m.perms.contains(need) || kernel_pages(m) {
            return Err(libc::EFAULT);
        }
        if matches!(m.pathname, MMapPath::Path(_)) && m.perms.contains(MMPermissions::READ) {
            // A file's pages grow in file order, so if the last page the
            // MR takes from this mapping lies within the file, all do.
            past_the_file_end(stop.min(end) - 1)?;
        }
        covered = stop;
        if covered >= end {
            return Ok(());
        }
    }
    Err(libc::EFAULT)
}

/// The calling thread's `/proc` directory (`/proc/thread-self`, named by
/// the ids it links to), whose `maps` are the process's. Not
/// `/proc/self`'s: once the main thread has ended (`pthread_exit`) while
/// others work on, that directory is the zombie main thread's, whose
/// `maps` are empty. Kernels before 3.17 have no `thread-self`: there,
/// `/proc/self`.
fn this_thread() -> procfs::ProcResult<Process> {
    match std::fs::read_link("/proc/thread-self") {
        Ok(ids) => Process::new_with_root(std::path::Path::new("/proc").join(ids)),
        Err(_) => Process::myself(),
    }
}

/// `Err(EFAULT)` if the byte at `addr`, in a readable file mapping,
/// cannot be read: its page lies past the end of the file. Read through
/// the kernel (`process_vm_readv` on our own thread), which reports the
/// fault as EFAULT where a load would raise SIGBUS. Where the kernel
/// refuses cross-memory attach (a seccomp policy) the page is taken as
/// there: the check is then what it was before it (accesses to such a
/// page still fail cleanly, in guarded mode).
fn past_the_file_end(addr: u64) -> Result<(), i32> {
    match own_memory::read(addr, 1) {
        Err(libc::EFAULT) => Err(libc::EFAULT),
        _ => Ok(()),
    }
}

/// Whether a mapping holds pages of the kernel's rather than memory of
/// the process: [vvar] (also [vvar_vclock]) and [vsyscall], which the
/// kernel maps without pages that could be pinned.
fn kernel_pages(m: &MemoryMap) -> bool {
    match &m.pathname {
        MMapPath::Vvar | MMapPath::Vsyscall => true,
        MMapPath::Other(name) => name.starts_with("[vvar"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(len: usize, prot: libc::c_int) -> u64 {
        // SAFETY: a new private anonymous mapping; nothing else is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as u64
    }

    #[test]
    fn mapped_memory_passes_and_holes_fail() {
        let a = map(3 * 4096, libc::PROT_READ | libc::PROT_WRITE);
        assert_eq!(check(a, 3 * 4096, true), Ok(()));
        assert_eq!(check(a + 100, 10, true), Ok(()));
        // SAFETY: unmaps the middle page of the mapping above, which no
        // reference points to.
        unsafe { libc::munmap((a + 4096) as *mut libc::c_void, 4096) };
        assert_eq!(check(a, 3 * 4096, false), Err(libc::EFAULT));
        assert_eq!(check(a, 4096, false), Ok(()));
        assert_eq!(check(0, 8, false), Err(libc::EFAULT), "NULL");
    }

    #[test]
    fn read_only_memory_cannot_be_registered_for_writing() {
        let a = map(4096, libc::PROT_READ);
        assert_eq!(check(a, 4096, false), Ok(()));
        assert_eq!(check(a, 4096, true), Err(libc::EFAULT));
        let none = map(4096, libc::PROT_NONE);
        assert_eq!(check(none, 4096, false), Err(libc::EFAULT));
        assert_eq!(check(none, 4096, true), Err(libc::EFAULT));
    }

    #[test]
    fn write_only_memory_can_be_registered_for_writing_only() {
        let a = map(4096, libc::PROT_WRITE);
        assert_eq!(check(a, 4096, true), Ok(()));
        assert_eq!(check(a, 4096, false), Err(libc::EFAULT));
    }

    #[test]
    fn a_files_pages_past_its_end_cannot_be_registered() {
        use std::os::fd::AsRawFd;
        let file = tempfile::tempfile().unwrap();
        file.set_len(4096 + 10).unwrap();
        // SAFETY: a new shared mapping of three pages of a file of two
        // (one whole, one partial); no reference points into it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                3 * 4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let a = p as u64;
        assert_eq!(
            check(a, 2 * 4096, true),
            Ok(()),
            "the partial page is the file's"
        );
        assert_eq!(check(a + 4096, 100, false), Ok(()));
        assert_eq!(check(a, 3 * 4096, true), Err(libc::EFAULT));
        assert_eq!(check(a + 2 * 4096, 8, false), Err(libc::EFAULT));
    }

    #[test]
    fn the_kernels_pages_cannot_be_registered() {
        let maps = Process::myself().unwrap().maps().unwrap();
        let vvar = maps
            .iter()
            .find(|m| kernel_pages(m))
            .expect("a [vvar] mapping");
        let (start, _) = vvar.address;
        assert_eq!(check(start, 8, false), Err(libc::EFAULT));
    }
}
