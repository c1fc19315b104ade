//! Where buffers go in a node's memory. Placement is planned before the
//! memory exists (so the memory is allocated at its exact size), by a bump
//! allocator that leaves a guard gap after every buffer and remembers
//! which buffers the engine may write. The checker then knows that every
//! byte outside those buffers must still hold its initial value, which
//! catches stray writes: a write past a buffer's end lands in a guard.

/// Bytes left between two buffers.
pub const GUARD: u64 = 64;

/// One planned buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// First address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Whether the engine may write it (receive buffers, WRITE targets,
    /// READ and atomic results, atomic targets).
    pub writable: bool,
}

/// A bump allocator over `[base, base + size)`.
#[derive(Debug, Clone)]
pub struct Arena {
    base: u64,
    next: u64,
    regions: Vec<Region>,
}

impl Arena {
    /// An empty arena starting (after a guard) at `base`.
    pub fn new(base: u64) -> Arena {
        Arena {
            base,
            next: base + GUARD,
            regions: Vec::new(),
        }
    }

    /// Places `len` bytes aligned to `align` (a power of two) and returns
    /// the address. Zero-length buffers get an address too (an SGE or a
    /// remote address may be empty) but take no room.
    pub fn alloc(&mut self, len: u64, align: u64, writable: bool) -> u64 {
        let addr = self.next.next_multiple_of(align.max(1));
        self.regions.push(Region {
            addr,
            len,
            writable,
        });
        self.next = addr + len + GUARD;
        addr
    }

    /// The first address.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Bytes the memory must have to hold every buffer and its guard.
    pub fn size(&self) -> usize {
        usize::try_from(self.next - self.base).expect("simulated memory fits in usize")
    }

    /// Every buffer, in address order.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// The address ranges the engine must not write: guards and
    /// read-only buffers, in address order.
    pub fn protected(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut from = self.base;
        for r in self.regions.iter().filter(|r| r.writable) {
            if r.addr > from {
                out.push((from, r.addr - from));
            }
            from = from.max(r.addr + r.len);
        }
        if self.next > from {
            out.push((from, self.next - from));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_separated_by_guards_and_in_order() {
        let mut a = Arena::new(0x1000);
        let x = a.alloc(10, 1, false);
        let y = a.alloc(8, 8, true);
        let z = a.alloc(0, 1, true);
        assert_eq!(x, 0x1000 + GUARD);
        assert!(y >= x + 10 + GUARD);
        assert_eq!(y % 8, 0);
        assert_eq!(z, y + 8 + GUARD);
        assert_eq!(a.size() as u64, z + GUARD - 0x1000);
        assert!(a.regions().windows(2).all(|w| w[0].addr < w[1].addr));
    }

    #[test]
    fn protected_ranges_cover_everything_but_writable_buffers() {
        let mut a = Arena::new(0);
        let r = a.alloc(100, 1, false);
        let w = a.alloc(50, 8, true);
        let end = a.size() as u64;
        let p = a.protected();
        assert_eq!(p, vec![(0, w), (w + 50, end - w - 50)]);
        assert!(p[0].0 <= r && r + 100 <= p[0].0 + p[0].1);
        let covered: u64 = p.iter().map(|x| x.1).sum();
        assert_eq!(covered + 50, end);
    }
}
