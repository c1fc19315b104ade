//! Access to the memory that MRs describe.
//!
//! The engine never owns application memory. It reaches it through
//! [`HostMemory`], which the embedder implements: the provider shim over the
//! process's own address space, the simulator and tests over byte vectors.
//! The engine calls these methods only for ranges it has checked against a
//! registered MR (lkey or rkey, bounds, access rights). Registered memory
//! can still fail to be there: an application may unmap or protect a
//! buffer it registered, which a NIC (whose pages are pinned) never sees
//! but a software provider does. Every access therefore returns a
//! [`MemoryFault`] instead of crashing, and the engine turns it into the
//! completion a NIC gives for a translation fault.

/// Registered memory that could not be reached (unmapped, or not writable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryFault {
    /// The first address of the access that failed.
    pub addr: u64,
}

/// What a memory access returns.
pub type MemResult<T> = Result<T, MemoryFault>;

/// Reads, writes and 8-byte atomics on registered memory.
pub trait HostMemory {
    /// Copies `dst.len()` bytes starting at `addr` into `dst`.
    fn read(&self, addr: u64, dst: &mut [u8]) -> MemResult<()>;
    /// Copies `src` to `addr`.
    fn write(&mut self, addr: u64, src: &[u8]) -> MemResult<()>;
    /// Atomically: if the native-endian u64 at `addr` (8-byte aligned)
    /// equals `compare`, stores `swap`. Returns the value found.
    fn compare_swap(&mut self, addr: u64, compare: u64, swap: u64) -> MemResult<u64>;
    /// Atomically adds `add` to the native-endian u64 at `addr` (8-byte
    /// aligned). Returns the value found.
    fn fetch_add(&mut self, addr: u64, add: u64) -> MemResult<u64>;
}

/// A [`HostMemory`] over one contiguous byte vector mapped at `base`, for
/// tests and simulations. Accesses outside it panic: in a test that is an
/// engine bug (the engine checks every range against an MR first). Ranges
/// marked with [`FlatMemory::unmap`] fault instead, as an application's
/// unmapped buffer does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlatMemory {
    base: u64,
    bytes: Vec<u8>,
    unmapped: Vec<std::ops::Range<u64>>,
}

impl FlatMemory {
    /// `len` zero bytes starting at address `base`.
    pub fn new(base: u64, len: usize) -> FlatMemory {
        FlatMemory {
            base,
            bytes: vec![0; len],
            unmapped: Vec::new(),
        }
    }

    /// From now on, accesses that touch `range` fault.
    pub fn unmap(&mut self, range: std::ops::Range<u64>) {
        self.unmapped.push(range);
    }

    fn check(&self, addr: u64, len: usize) -> MemResult<()> {
        let end = addr.saturating_add(len as u64);
        let hit = self.unmapped.iter().any(|r| addr < r.end && r.start < end);
        if hit {
            Err(MemoryFault { addr })
        } else {
            Ok(())
        }
    }

    /// The first mapped address.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The bytes at `[addr, addr + len)`.
    pub fn slice(&self, addr: u64, len: usize) -> &[u8] {
        let start = self.offset(addr, len);
        &self.bytes[start..start + len]
    }

    /// The bytes at `[addr, addr + len)`, mutably.
    pub fn slice_mut(&mut self, addr: u64, len: usize) -> &mut [u8] {
        let start = self.offset(addr, len);
        &mut self.bytes[start..start + len]
    }

    fn offset(&self, addr: u64, len: usize) -> usize {
        let start = addr
            .checked_sub(self.base)
            .and_then(|o| usize::try_from(o).ok())
            .filter(|o| {
                o.checked_add(len)
                    .is_some_and(|end| end <= self.bytes.len())
            });
        start.unwrap_or_else(|| panic!("access outside FlatMemory: {addr:#x}+{len}"))
    }

    fn load_u64(&self, addr: u64) -> u64 {
        let mut word = [0; 8];
        word.copy_from_slice(self.slice(addr, 8));
        u64::from_ne_bytes(word)
    }

    fn store_u64(&mut self, addr: u64, value: u64) {
        self.slice_mut(addr, 8)
            .copy_from_slice(&value.to_ne_bytes());
    }
}

impl HostMemory for FlatMemory {
    fn read(&self, addr: u64, dst: &mut [u8]) -> MemResult<()> {
        self.check(addr, dst.len())?;
        dst.copy_from_slice(self.slice(addr, dst.len()));
        Ok(())
    }

    fn write(&mut self, addr: u64, src: &[u8]) -> MemResult<()> {
        self.check(addr, src.len())?;
        self.slice_mut(addr, src.len()).copy_from_slice(src);
        Ok(())
    }

    fn compare_swap(&mut self, addr: u64, compare: u64, swap: u64) -> MemResult<u64> {
        self.check(addr, 8)?;
        let old = self.load_u64(addr);
        if old == compare {
            self.store_u64(addr, swap);
        }
        Ok(old)
    }

    fn fetch_add(&mut self, addr: u64, add: u64) -> MemResult<u64> {
        self.check(addr, 8)?;
        let old = self.load_u64(addr);
        self.store_u64(addr, old.wrapping_add(add));
        Ok(old)
    }
}
