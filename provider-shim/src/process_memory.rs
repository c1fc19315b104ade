//! [`HostMemory`] over the process's own address space: what an MR's
//! addresses mean to a provider running inside the application.

use softverbs_engine::HostMemory;
use std::sync::atomic::{AtomicU64, Ordering};

/// The application's memory, reached by address.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessMemory;

// The engine calls these only for ranges it checked against a live MR
// (key, PD, bounds, access), and an application that registers memory
// promises it stays mapped until ibv_dereg_mr: that is the contract of
// every RDMA provider, whose NIC would DMA into the same addresses.
impl HostMemory for ProcessMemory {
    fn read(&self, addr: u64, dst: &mut [u8]) {
        // SAFETY: `addr..addr+dst.len()` lies in a registered MR (see above)
        // and cannot overlap `dst`, which is the engine's own buffer.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, dst.as_mut_ptr(), dst.len()) }
    }

    fn write(&mut self, addr: u64, src: &[u8]) {
        // SAFETY: `addr..addr+src.len()` lies in a registered MR with
        // LOCAL_WRITE or REMOTE_WRITE (see above); `src` is engine memory.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), addr as *mut u8, src.len()) }
    }

    fn compare_swap(&mut self, addr: u64, compare: u64, swap: u64) -> u64 {
        // SAFETY: 8 bytes at an 8-aligned address (the responder refuses
        // misaligned atomics) inside an MR with REMOTE_ATOMIC; an atomic
        // access keeps it atomic against the application's own atomics.
        let word = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
        match word.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(old) | Err(old) => old,
        }
    }

    fn fetch_add(&mut self, addr: u64, add: u64) -> u64 {
        // SAFETY: as in compare_swap.
        let word = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
        word.fetch_add(add, Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_writes_and_atomics_reach_real_memory() {
        let mut buf = vec![0u64; 4];
        let base = buf.as_mut_ptr() as u64;
        let mut mem = ProcessMemory;
        mem.write(base, &7u64.to_ne_bytes());
        assert_eq!(mem.fetch_add(base, 3), 7);
        assert_eq!(mem.compare_swap(base, 10, 99), 10);
        assert_eq!(mem.compare_swap(base, 10, 5), 99);
        let mut out = [0u8; 8];
        mem.read(base, &mut out);
        assert_eq!(u64::from_ne_bytes(out), 99);
        assert_eq!(buf[0], 99);
    }
}
