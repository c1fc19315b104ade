//! Access to the memory that MRs describe.
//!
//! The engine never owns application memory. It reaches it through
//! [`HostMemory`], which the embedder implements: the provider shim over the
//! process's own address space, the simulator and tests over byte vectors.
//! The engine calls these methods only for ranges it has checked against a
//! registered MR (lkey or rkey, bounds, access rights), so an
//! implementation may assume every address it is given was registered.

/// Reads, writes and 8-byte atomics on registered memory.
pub trait HostMemory {
    /// Copies `dst.len()` bytes starting at `addr` into `dst`.
    fn read(&self, addr: u64, dst: &mut [u8]);
    /// Copies `src` to `addr`.
    fn write(&mut self, addr: u64, src: &[u8]);
    /// Atomically: if the native-endian u64 at `addr` (8-byte aligned)
    /// equals `compare`, stores `swap`. Returns the value found.
    fn compare_swap(&mut self, addr: u64, compare: u64, swap: u64) -> u64;
    /// Atomically adds `add` to the native-endian u64 at `addr` (8-byte
    /// aligned). Returns the value found.
    fn fetch_add(&mut self, addr: u64, add: u64) -> u64;
}

/// A [`HostMemory`] over one contiguous byte vector mapped at `base`, for
/// tests and simulations. Accesses outside it panic: in a test that is an
/// engine bug (the engine checks every range against an MR first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlatMemory {
    base: u64,
    bytes: Vec<u8>,
}

impl FlatMemory {
    /// `len` zero bytes starting at address `base`.
    pub fn new(base: u64, len: usize) -> FlatMemory {
        FlatMemory {
            base,
            bytes: vec![0; len],
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
    fn read(&self, addr: u64, dst: &mut [u8]) {
        dst.copy_from_slice(self.slice(addr, dst.len()));
    }

    fn write(&mut self, addr: u64, src: &[u8]) {
        self.slice_mut(addr, src.len()).copy_from_slice(src);
    }

    fn compare_swap(&mut self, addr: u64, compare: u64, swap: u64) -> u64 {
        let old = self.load_u64(addr);
        if old == compare {
            self.store_u64(addr, swap);
        }
        old
    }

    fn fetch_add(&mut self, addr: u64, add: u64) -> u64 {
        let old = self.load_u64(addr);
        self.store_u64(addr, old.wrapping_add(add));
        old
    }
}
