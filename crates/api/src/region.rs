//! Memory for memory regions, owned by the API: a zeroed heap buffer at a
//! fixed address, shared (reference-counted) between the application and
//! the device that registered it, so it cannot be freed while a device
//! may still reach it.

use parking_lot::Mutex;
use softverbs_engine::{MemResult, MemoryFault, Sge};
use std::sync::Arc;

/// A buffer for [`crate::Verbs::reg_mr`]. Cloning shares it.
///
/// The application reads and writes it with [`Region::read`] and
/// [`Region::write`], which copy. As with any RDMA buffer, what a device
/// writes into it is defined once the completion that reports the write
/// has been polled, and the application must not write where a device is
/// reading or writing.
#[derive(Debug, Clone)]
pub struct Region {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Never resized, so its heap address stays `addr`.
    bytes: Mutex<Box<[u8]>>,
    addr: u64,
}

impl Region {
    /// `len` zero bytes.
    pub fn new(len: usize) -> Region {
        let bytes = vec![0u8; len].into_boxed_slice();
        let addr = bytes.as_ptr() as u64;
        Region {
            inner: Arc::new(Inner {
                bytes: Mutex::new(bytes),
                addr,
            }),
        }
    }

    /// Its address, as SGEs and a peer's RDMA target name it.
    pub fn addr(&self) -> u64 {
        self.inner.addr
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.inner.bytes.lock().len()
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of `len` bytes from `offset`.
    ///
    /// # Panics
    /// If the range is not inside the region.
    pub fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        self.inner.bytes.lock()[offset..offset + len].to_vec()
    }

    /// Copies `data` to `offset`.
    ///
    /// # Panics
    /// If the range is not inside the region.
    pub fn write(&self, offset: usize, data: &[u8]) {
        self.inner.bytes.lock()[offset..offset + data.len()].copy_from_slice(data);
    }

    /// An SGE of `len` bytes from `offset`, with the key `lkey`.
    pub fn sge(&self, offset: usize, len: u32, lkey: u32) -> Sge {
        Sge {
            addr: self.addr() + offset as u64,
            length: len,
            lkey,
        }
    }

    /// Runs `f` on its bytes (the real backend registers their address).
    pub(crate) fn with_bytes<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        f(&mut self.inner.bytes.lock())
    }

    /// The bytes at `[addr, addr + len)` of this region, if they are in it,
    /// as a range of offsets.
    fn offsets(&self, addr: u64, len: usize) -> Option<std::ops::Range<usize>> {
        let start = usize::try_from(addr.checked_sub(self.addr())?).ok()?;
        let end = start.checked_add(len)?;
        (end <= self.len()).then_some(start..end)
    }
}

/// The soft engine's view of memory: the regions registered on it, by
/// address. An access outside every region is a fault (the engine has
/// checked it against an MR, so this happens only if the MR's region
/// were gone, which the MR table prevents).
#[derive(Debug, Default)]
pub struct RegionMemory {
    regions: Vec<Region>,
}

impl RegionMemory {
    /// Makes `region` reachable (once per registration).
    pub fn add(&mut self, region: &Region) {
        self.regions.push(region.clone());
    }

    /// Forgets one registration of the region at `addr`.
    pub fn remove(&mut self, addr: u64) {
        if let Some(i) = self.regions.iter().position(|r| r.addr() == addr) {
            self.regions.swap_remove(i);
        }
    }

    fn find(&self, addr: u64, len: usize) -> MemResult<(&Region, std::ops::Range<usize>)> {
        self.regions
            .iter()
            .find_map(|r| Some((r, r.offsets(addr, len)?)))
            .ok_or(MemoryFault { addr })
    }

    fn update_u64(&mut self, addr: u64, f: impl FnOnce(u64) -> u64) -> MemResult<u64> {
        let (region, range) = self.find(addr, 8)?;
        region.with_bytes(|b| {
            let old = u64::from_ne_bytes(b[range.clone()].try_into().unwrap_or_default());
            b[range].copy_from_slice(&f(old).to_ne_bytes());
            Ok(old)
        })
    }
}

impl softverbs_engine::HostMemory for RegionMemory {
    fn read(&self, addr: u64, dst: &mut [u8]) -> MemResult<()> {
        let (region, range) = self.find(addr, dst.len())?;
        region.with_bytes(|b| dst.copy_from_slice(&b[range]));
        Ok(())
    }

    fn write(&mut self, addr: u64, src: &[u8]) -> MemResult<()> {
        let (region, range) = self.find(addr, src.len())?;
        region.with_bytes(|b| b[range].copy_from_slice(src));
        Ok(())
    }

    fn compare_swap(&mut self, addr: u64, compare: u64, swap: u64) -> MemResult<u64> {
        self.update_u64(addr, |old| if old == compare { swap } else { old })
    }

    fn fetch_add(&mut self, addr: u64, add: u64) -> MemResult<u64> {
        self.update_u64(addr, |old| old.wrapping_add(add))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softverbs_engine::HostMemory;

    #[test]
    fn the_engine_reaches_registered_regions_only() {
        let a = Region::new(64);
        let mut mem = RegionMemory::default();
        mem.add(&a);
        mem.write(a.addr() + 8, b"softverbs").unwrap();
        assert_eq!(a.read(8, 9), b"softverbs");
        assert_eq!(mem.fetch_add(a.addr() + 24, 5).unwrap(), 0);
        assert_eq!(mem.compare_swap(a.addr() + 24, 5, 9).unwrap(), 5);
        assert_eq!(a.read(24, 8), 9u64.to_ne_bytes());
        assert!(mem.write(a.addr() + 60, b"too long").is_err());
        mem.remove(a.addr());
        assert!(mem.read(a.addr(), &mut [0; 4]).is_err());
    }
}
