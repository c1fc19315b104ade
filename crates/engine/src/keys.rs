//! Allocation of memory keys and QP numbers.
//!
//! Keys are drawn from a seeded generator so that an application cannot
//! guess another region's rkey (the IBTA's reason for keys), while a test
//! with a fixed seed replays exactly. QP numbers are sequential from a
//! configurable base so that several processes sharing one device can be
//! given disjoint ranges.

/// Hands out lkeys/rkeys.
#[derive(Debug)]
pub(crate) struct KeyAllocator {
    rng: fastrand::Rng,
}

impl KeyAllocator {
    pub(crate) fn new(seed: u64) -> KeyAllocator {
        KeyAllocator {
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// A fresh key, never 0 (commonly a "no key" marker) and not in use.
    pub(crate) fn next(&mut self, in_use: impl Fn(u32) -> bool) -> u32 {
        loop {
            let key = self.rng.u32(1..);
            if !in_use(key) {
                return key;
            }
        }
    }
}

/// Hands out 24-bit QP numbers, skipping 0 and 1 (the special QPs of IB).
#[derive(Debug)]
pub(crate) struct QpnAllocator {
    next: u32,
}

/// The largest QP number (24 bits).
pub(crate) const QPN_MAX: u32 = 0xFF_FFFF;

impl QpnAllocator {
    pub(crate) fn new(base: u32) -> QpnAllocator {
        QpnAllocator {
            next: base.clamp(2, QPN_MAX),
        }
    }

    /// A QP number not in use; `None` if all 2^24 - 2 are taken.
    pub(crate) fn next(&mut self, in_use: impl Fn(u32) -> bool) -> Option<u32> {
        for _ in 0..QPN_MAX {
            let qpn = self.next;
            self.next = if qpn >= QPN_MAX { 2 } else { qpn + 1 };
            if !in_use(qpn) {
                return Some(qpn);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qpn_wraps_past_24_bits_skipping_0_and_1() {
        let mut a = QpnAllocator::new(QPN_MAX);
        assert_eq!(a.next(|_| false), Some(QPN_MAX));
        assert_eq!(a.next(|_| false), Some(2));
    }

    #[test]
    fn qpn_skips_numbers_in_use() {
        let mut a = QpnAllocator::new(10);
        assert_eq!(a.next(|q| q == 10 || q == 11), Some(12));
    }

    #[test]
    fn keys_are_nonzero_unique_and_seeded() {
        let mut a = KeyAllocator::new(7);
        let mut b = KeyAllocator::new(7);
        let first = a.next(|_| false);
        assert_eq!(first, b.next(|_| false));
        assert_ne!(first, 0);
        let second = a.next(|k| k == first);
        assert_ne!(second, first);
    }
}
