//! Memory for the engine-driving targets: a `FlatMemory` filled with a
//! pattern (so that a stray write of zeros shows), made once and copied for
//! each run, and the check that bytes the engine had no right to write are
//! as they were. Both run on every input, so they work on whole chunks:
//! per-byte loops under coverage instrumentation cost more than the engine.

use softverbs_engine::FlatMemory;

/// A copy of a memory of `len` bytes at `base`, byte `i` holding
/// `i * 7 + salt`.
pub fn patterned(base: u64, len: usize, salt: u8) -> FlatMemory {
    let mut mem = FlatMemory::new(base, len);
    for (i, b) in mem.slice_mut(base, len).iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(7).wrapping_add(salt);
    }
    mem
}

/// Chunk size of the comparison.
const CHUNK: usize = 256;

/// The first offset in `[0, len)` where `now` and `before` differ and
/// `allowed(offset)` is false, if any.
pub fn first_forbidden_change(
    now: &FlatMemory,
    before: &FlatMemory,
    len: usize,
    allowed: impl Fn(usize) -> bool,
) -> Option<usize> {
    let (a, b) = (now.slice(now.base(), len), before.slice(before.base(), len));
    a.chunks(CHUNK)
        .zip(b.chunks(CHUNK))
        .enumerate()
        .filter(|(_, (x, y))| x != y)
        .find_map(|(c, (x, y))| {
            (0..x.len())
                .map(|i| c * CHUNK + i)
                .find(|&at| x[at % CHUNK] != y[at % CHUNK] && !allowed(at))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_change_not_allowed() {
        let before = patterned(0x1000, 4096, 3);
        let mut now = before.clone();
        assert_eq!(first_forbidden_change(&now, &before, 4096, |_| false), None);
        now.slice_mut(0x1000 + 300, 1)[0] ^= 1;
        now.slice_mut(0x1000 + 2000, 1)[0] ^= 1;
        assert_eq!(
            first_forbidden_change(&now, &before, 4096, |_| false),
            Some(300)
        );
        assert_eq!(
            first_forbidden_change(&now, &before, 4096, |at| at < 1000),
            Some(2000)
        );
        assert_eq!(first_forbidden_change(&now, &before, 4096, |_| true), None);
    }
}
