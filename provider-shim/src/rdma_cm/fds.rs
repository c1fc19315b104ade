//! Which file descriptors are rdma_cm channels, checked on every `write`
//! and `close` of the process: one atomic load for a descriptor that is
//! not one (the common case by far), no lock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Descriptors below this can be channels (a channel's descriptor is
/// made by this module's owner, which refuses a higher one).
pub const MAX_FD: i32 = 1 << 16;

static BITS: [AtomicU64; (MAX_FD / 64) as usize] = [const { AtomicU64::new(0) }; 1024];
/// Any channel was ever opened: until then not even the bitmap is read.
static ANY: AtomicBool = AtomicBool::new(false);

/// Whether `fd` is a channel.
pub fn is_channel(fd: i32) -> bool {
    if !ANY.load(Ordering::Relaxed) || !(0..MAX_FD).contains(&fd) {
        return false;
    }
    let (word, bit) = (fd as usize / 64, fd as u64 % 64);
    BITS[word].load(Ordering::Acquire) & 1 << bit != 0
}

/// Marks `fd` (below [`MAX_FD`]) as a channel, or not.
pub fn set_channel(fd: i32, on: bool) {
    if !(0..MAX_FD).contains(&fd) {
        return;
    }
    let (word, bit) = (fd as usize / 64, fd as u64 % 64);
    if on {
        ANY.store(true, Ordering::Relaxed);
        BITS[word].fetch_or(1 << bit, Ordering::AcqRel);
    } else {
        BITS[word].fetch_and(!(1 << bit), Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_are_marked_and_unmarked() {
        assert!(!is_channel(4095));
        set_channel(4095, true);
        assert!(is_channel(4095) && !is_channel(4094));
        set_channel(4095, false);
        assert!(!is_channel(4095));
        set_channel(MAX_FD, true);
        assert!(!is_channel(MAX_FD) && !is_channel(-1));
    }
}
