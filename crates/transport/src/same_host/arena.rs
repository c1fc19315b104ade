//! The owner's allocator of arena words, for its receive rings.
//!
//! Private to the owner (peers only read rings at the offsets the owner
//! publishes), so a plain map of free extents: first fit by offset, and a
//! freed extent merges with free neighbours so the arena does not
//! fragment into pieces too small for a ring.

use std::collections::BTreeMap;

/// Free extents of an arena of words.
#[derive(Debug, Clone)]
pub struct Arena {
    /// Free extents: offset to length in words, none touching another.
    free: BTreeMap<u64, u64>,
    words: u64,
}

impl Arena {
    /// An arena of `words` words, all free.
    pub fn new(words: u64) -> Self {
        let free = if words == 0 {
            BTreeMap::new()
        } else {
            BTreeMap::from([(0, words)])
        };
        Arena { free, words }
    }

    /// Takes `words` contiguous words; returns their offset, or `None` if
    /// no free extent is that long (or `words` is 0).
    pub fn alloc(&mut self, words: u64) -> Option<u64> {
        if words == 0 {
            return None;
        }
        let (&offset, &len) = self.free.iter().find(|(_, &len)| len >= words)?;
        self.free.remove(&offset);
        if len > words {
            self.free.insert(offset + words, len - words);
        }
        Some(offset)
    }

    /// Gives back `words` words at `offset`. Returns false, changing
    /// nothing, for an extent that is empty, outside the arena or
    /// overlapping a free extent (a double free).
    pub fn free(&mut self, offset: u64, words: u64) -> bool {
        let Some(end) = offset.checked_add(words) else {
            return false;
        };
        if words == 0 || end > self.words || self.overlaps_free(offset, end) {
            return false;
        }
        let mut start = offset;
        let mut len = words;
        if let Some((&before, &before_len)) = self.free.range(..offset).next_back() {
            if before + before_len == offset {
                self.free.remove(&before);
                start = before;
                len += before_len;
            }
        }
        if let Some(after_len) = self.free.remove(&end) {
            len += after_len;
        }
        self.free.insert(start, len);
        true
    }

    /// Words free in all.
    pub fn free_words(&self) -> u64 {
        self.free.values().sum()
    }

    fn overlaps_free(&self, start: u64, end: u64) -> bool {
        let before = self.free.range(..end).next_back();
        before.is_some_and(|(&offset, &len)| offset + len > start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_reuses_freed_extents() {
        let mut arena = Arena::new(100);
        assert_eq!(arena.alloc(30), Some(0));
        assert_eq!(arena.alloc(30), Some(30));
        assert_eq!(arena.alloc(30), Some(60));
        assert_eq!(arena.alloc(30), None);
        assert!(arena.free(30, 30));
        assert_eq!(arena.alloc(10), Some(30));
        assert_eq!(arena.alloc(25), None);
        assert_eq!(arena.alloc(20), Some(40));
        assert_eq!(arena.free_words(), 10);
        assert_eq!(arena.alloc(0), None);
    }

    #[test]
    fn neighbours_merge() {
        let mut arena = Arena::new(90);
        let offsets: Vec<u64> = (0..3).map(|_| arena.alloc(30).unwrap()).collect();
        assert!(arena.free(offsets[0], 30));
        assert!(arena.free(offsets[2], 30));
        assert!(arena.free(offsets[1], 30));
        assert_eq!(arena.alloc(90), Some(0));
    }

    #[test]
    fn bad_frees_change_nothing() {
        let mut arena = Arena::new(64);
        assert_eq!(arena.alloc(32), Some(0));
        assert!(!arena.free(40, 8), "already free");
        assert!(!arena.free(30, 4), "straddles a free extent");
        assert!(!arena.free(60, 8), "past the end");
        assert!(!arena.free(u64::MAX, 2), "overflows");
        assert!(!arena.free(0, 0), "empty");
        assert!(arena.free(0, 32));
        assert!(!arena.free(0, 32), "double free");
        assert_eq!(arena.free_words(), 64);
        assert_eq!(Arena::new(0).alloc(1), None);
    }

    #[test]
    fn churn_never_hands_out_overlapping_extents() {
        let mut arena = Arena::new(1_000);
        let mut rng = fastrand::Rng::with_seed(7);
        let mut held: Vec<(u64, u64)> = Vec::new();
        for _ in 0..5_000 {
            if rng.bool() && !held.is_empty() {
                let (offset, len) = held.swap_remove(rng.usize(..held.len()));
                assert!(arena.free(offset, len));
            } else {
                let len = rng.u64(1..100);
                if let Some(offset) = arena.alloc(len) {
                    assert!(offset + len <= 1_000);
                    for &(o, l) in &held {
                        assert!(offset + len <= o || o + l <= offset, "overlap");
                    }
                    held.push((offset, len));
                }
            }
            let used: u64 = held.iter().map(|&(_, len)| len).sum();
            assert_eq!(arena.free_words() + used, 1_000);
        }
    }
}
