//! Which file descriptors are rdma_cm channels, checked on every `write`
//! and `close` of the process: one atomic load for a descriptor that is
//! not one (the common case by far), no lock; and which were ever one
//! (`new_channels`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Descriptors below this can be channels (a channel's descriptor is
/// made by this module's owner, which refuses a higher one).
pub const MAX_FD: i32 = 1 << 16;

static BITS: [AtomicU64; (MAX_FD / 64) as usize] = [const { AtomicU64::new(0) }; 1024];
/// The descriptors that were ever channels (never cleared).
static EVER: [AtomicU64; (MAX_FD / 64) as usize] = [const { AtomicU64::new(0) }; 1024];
/// Each channel's file as (device, inode), two words per descriptor: the
/// number may come to name another file without close(2).
static FILES: [AtomicU64; 2 * MAX_FD as usize] = [const { AtomicU64::new(0) }; 2 * MAX_FD as usize];
/// Any channel was ever opened: until then not even the bitmap is read.
static ANY: AtomicBool = AtomicBool::new(false);

/// Whether `fd` is a channel.
pub fn is_channel(fd: i32) -> bool {
    marked(&BITS, fd)
}

/// Whether `fd` was ever a channel (a channel now is one too).
pub fn ever_channel(fd: i32) -> bool {
    marked(&EVER, fd)
}

fn marked(map: &[AtomicU64], fd: i32) -> bool {
    if !ANY.load(Ordering::Relaxed) || !(0..MAX_FD).contains(&fd) {
        return false;
    }
    map[fd as usize / 64].load(Ordering::Acquire) & 1 << (fd as u64 % 64) != 0
}

/// Records the file channel `fd` is (set before it is marked).
pub fn set_file(fd: i32, file: (u64, u64)) {
    if let Ok(i) = usize::try_from(fd) {
        if let (Some(dev), Some(ino)) = (FILES.get(2 * i), FILES.get(2 * i + 1)) {
            dev.store(file.0, Ordering::Relaxed);
            ino.store(file.1, Ordering::Release);
        }
    }
}

/// The file channel `fd` was when it was opened.
pub fn file(fd: i32) -> Option<(u64, u64)> {
    let i = usize::try_from(fd).ok()?;
    let ino = FILES.get(2 * i + 1)?.load(Ordering::Acquire);
    Some((FILES.get(2 * i)?.load(Ordering::Relaxed), ino))
}

/// Marks `fd` (below [`MAX_FD`]) as a channel, or not.
pub fn set_channel(fd: i32, on: bool) {
    if !(0..MAX_FD).contains(&fd) {
        return;
    }
    let (word, bit) = (fd as usize / 64, fd as u64 % 64);
    if on {
        ANY.store(true, Ordering::Relaxed);
        EVER[word].fetch_or(1 << bit, Ordering::AcqRel);
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
        assert!(ever_channel(4095) && !ever_channel(4094));
        set_channel(MAX_FD, true);
        assert!(!is_channel(MAX_FD) && !is_channel(-1));
    }

    #[test]
    fn a_channel_remembers_its_file() {
        set_file(4093, (7, 0x1234_5678_9abc));
        assert_eq!(file(4093), Some((7, 0x1234_5678_9abc)));
        set_file(MAX_FD, (1, 1));
        assert_eq!(file(MAX_FD), None);
        assert_eq!(file(-1), None);
    }
}
