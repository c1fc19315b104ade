//! Allocation of memory keys and QP numbers.

//!
//! Keys are drawn from a seeded generator so that an application cannot
//! guess another region's rkey (the IBTA's reason for keys), while a test
//! with a fixed seed replays exactly. QP numbers are sequential from a
//! configurable base so that several processes sharing one device can be
//! given disjoint ranges.

use std::ops::Range;

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

/// Hands out 24-bit QP numbers from a list of ranges, skipping 0 and 1
/// (the special QPs of IB). A process sharing a device with others is
/// given ranges of its own (the transport's slots); more can be added.
#[derive(Debug)]
pub(crate) struct QpnAllocator {
    ranges: Vec<Range<u32>>,
    /// Where the next search starts: (range index, QP number).
    cursor: (usize, u32),
}

/// The largest QP number (24 bits).
pub(crate) const QPN_MAX: u32 = 0xFF_FFFF;

impl QpnAllocator {
    pub(crate) fn new(range: Range<u32>) -> QpnAllocator {
        let mut a = QpnAllocator {
            ranges: Vec::new(),
            cursor: (0, 0),
        };
        a.add(range);
        a.cursor = (0, a.ranges.first().map_or(0, |r| r.start));
        a
    }

    /// Adds QP numbers `range` (clipped to 2..=QPN_MAX).
    pub(crate) fn add(&mut self, range: Range<u32>) {
        let clipped = range.start.max(2)..range.end.min(QPN_MAX + 1);
        if !clipped.is_empty() {
            self.ranges.push(clipped);
        }
    }

    /// A QP number not in use; `None` if every number of every range is.
    pub(crate) fn next(&mut self, in_use: impl Fn(u32) -> bool) -> Option<u32> {
        let total: u64 = self.ranges.iter().map(|r| u64::from(r.end - r.start)).sum();
        for _ in 0..total {
            let qpn = self.advance();
            if !in_use(qpn) {
                return Some(qpn);
            }
        }
        None
    }

    /// Returns the cursor's number and moves it on, wrapping over ranges.
    fn advance(&mut self) -> u32 {
        let (mut idx, mut qpn) = self.cursor;
        if !self.ranges[idx].contains(&qpn) {
            idx = (idx + 1) % self.ranges.len();
            qpn = self.ranges[idx].start;
        }
        self.cursor = (idx, qpn + 1);
        qpn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qpn_wraps_past_24_bits_skipping_0_and_1() {
        let mut a = QpnAllocator::new(0..QPN_MAX + 1);
        assert_eq!(a.next(|_| false), Some(2));
        let mut a = QpnAllocator::new(QPN_MAX..QPN_MAX + 5);
        a.add(0..3);
        assert_eq!(a.next(|_| false), Some(QPN_MAX));
        assert_eq!(a.next(|_| false), Some(2));
        assert_eq!(a.next(|_| false), Some(QPN_MAX));
    }

    #[test]
    fn qpn_skips_numbers_in_use_and_spans_ranges() {
        let mut a = QpnAllocator::new(10..12);
        assert_eq!(a.next(|q| q == 10), Some(11));
        assert_eq!(a.next(|q| q == 10 || q == 11), None);
        a.add(0x1000..0x1002);
        assert_eq!(a.next(|q| q < 12), Some(0x1000));
        assert_eq!(a.next(|q| q < 12), Some(0x1001));
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
