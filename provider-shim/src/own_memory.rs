//! Copies between the provider and memory of its own process at addresses
//! an application gave, through `process_vm_readv`/`process_vm_writev` on
//! our own pid: the kernel checks the range against the page tables and
//! fails where a load or store would fault (SIGSEGV, or SIGBUS past a
//! file's end), as `copy_from_user` and `copy_to_user` do for a kernel
//! verb. No Rust reference to the application's memory is formed.

use std::io;

/// The `len` bytes at `addr`. Err: the errno, EFAULT where they are not
/// all readable; another one (EPERM) where the kernel refuses the call
/// itself (a seccomp policy).
pub fn read(addr: u64, len: usize) -> Result<Vec<u8>, i32> {
    let mut out = vec![0u8; len];
    read_into(addr, &mut out).map(|()| out)
}

/// Fills `dst` with the bytes at `addr`. Err as for [`read`].
pub fn read_into(addr: u64, dst: &mut [u8]) -> Result<(), i32> {
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: dst.len(),
    };
    // SAFETY: the kernel fills `dst`, which we borrow mutably for the
    // call, from our own process's range at `addr`, checked against the
    // page tables (EFAULT, not a fault). A concurrent write by the
    // application to that range is a racing read, as a NIC's DMA makes;
    // getpid (not a pid saved earlier) stays right in a forked child.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    done(n, dst.len())
}

/// Writes `bytes` at `addr`. Err as for [`read`].
pub fn write(addr: u64, bytes: &[u8]) -> Result<(), i32> {
    let local = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: the kernel only reads `bytes` (borrowed for the call) and
    // writes our own process's range at `addr`, checked as in `read`; the
    // application owns that memory and no reference to it is formed.
    let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
    done(n, bytes.len())
}

/// A copy's outcome: all `len` bytes, or the errno (a short copy stopped
/// at an unmapped page: EFAULT).
fn done(n: isize, len: usize) -> Result<(), i32> {
    match usize::try_from(n) {
        Ok(n) if n == len => Ok(()),
        Ok(_) => Err(libc::EFAULT),
        Err(_) => Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EFAULT)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_memory_is_copied_and_an_unmapped_page_is_efault() {
        let mut word = [1u8, 2, 3, 4];
        let addr = word.as_mut_ptr() as u64;
        assert_eq!(read(addr, 4), Ok(vec![1, 2, 3, 4]));
        assert_eq!(write(addr + 1, &[9, 9]), Ok(()));
        assert_eq!(std::hint::black_box(word), [1, 9, 9, 4]);
        assert_eq!(read(8, 4), Err(libc::EFAULT), "page 0 is never mapped");
        assert_eq!(write(8, &[0]), Err(libc::EFAULT));
        assert_eq!(read(addr, 0), Ok(vec![]));
        let mut two = [0u8; 2];
        assert_eq!(read_into(addr + 2, &mut two), Ok(()));
        assert_eq!(two, [9, 4]);
        assert_eq!(read_into(8, &mut two), Err(libc::EFAULT));
    }
}
