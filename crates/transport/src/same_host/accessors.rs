//! Who is copying into a context's memory right now: the count each peer
//! process raises around an access (a lookup in the published MR table
//! and the copies into the MR it found), and the owner's wait for the
//! accesses that may have seen an MR it withdrew.
//!
//! The counts come in pairs selected by an epoch word, as in sleepable
//! RCU: the owner waits for the count new accesses do not use, flips the
//! epoch, then waits for the other, so a stream of new accesses cannot
//! keep it waiting. Each peer process counts in a slot that names it
//! (its pid), so the owner can tell an access that will never end, its
//! process having died in the middle of it, and drop it instead of
//! waiting: a peer killed mid-copy would otherwise make every later
//! `ibv_dereg_mr` of the owner wait its whole timeout. A process that
//! finds every slot named by live processes counts in the overflow word,
//! which names nobody (an access counted there is always waited for).
//!
//! Words: `[epoch, overflow, slots...]`; a slot is
//! `pid << 32 | count[1] << 16 | count[0]`, `0` when free. A process has
//! at most one access in progress per thread, so 16 bits of count do not
//! overflow into the other epoch's.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::liveness::is_gone;

/// Words of the accessors' part.
pub const WORDS: usize = FIRST_SLOT + SLOTS;

const EPOCH: usize = 0;
const OVERFLOW: usize = 1;
const FIRST_SLOT: usize = 2;
/// Peer processes counted by name at once.
const SLOTS: usize = 64;
const COUNT_BITS: u32 = 16;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// Slots a process that found none free checks for a dead holder (one
/// `kill(pid, 0)` each) before it counts in the overflow word.
const REAP_PROBES: usize = 4;

/// The accessors' part of a region: `WORDS` words, or nothing (a part too
/// short counts nothing and waits for nothing).
#[derive(Debug, Clone, Copy)]
pub struct Accessors<'a> {
    words: &'a [AtomicU64],
}

/// An access in progress: while it lives, the owner's
/// [`Accessors::wait_idle`] waits for it. Dropping it ends the access.
#[derive(Debug)]
pub struct AccessGuard<'a> {
    word: Option<&'a AtomicU64>,
    one: u64,
}

impl Drop for AccessGuard<'_> {
    fn drop(&mut self) {
        if let Some(word) = self.word {
            word.fetch_sub(self.one, Ordering::Release);
        }
    }
}

impl<'a> Accessors<'a> {
    /// A view of the first `WORDS` words of `part`.
    pub fn new(part: &'a [AtomicU64]) -> Self {
        Accessors {
            words: part.get(..WORDS).unwrap_or(&[]),
        }
    }

    /// Starts an access by process `pid` (our own).
    pub fn begin(&self, pid: i32) -> AccessGuard<'a> {
        let Some(epoch) = self.words.get(EPOCH) else {
            return AccessGuard { word: None, one: 0 };
        };
        let one = 1 << (COUNT_BITS * (epoch.load(Ordering::SeqCst) & 1) as u32);
        let word = self.slot_of(pid).or(self.words.get(OVERFLOW));
        if let Some(word) = word {
            word.fetch_add(one, Ordering::SeqCst);
        }
        // Orders the count before the lookup that follows, against the
        // owner's withdrawal and its reading of the counts.
        fence(Ordering::SeqCst);
        AccessGuard { word, one }
    }

    /// The slot that names `pid`: found, claimed free, or taken over from
    /// a holder that died. `None`: none to be had.
    fn slot_of(&self, pid: i32) -> Option<&'a AtomicU64> {
        if pid <= 0 {
            return None;
        }
        let slots = self.words.get(FIRST_SLOT..).filter(|s| !s.is_empty())?;
        let ours = u64::from(pid as u32) << 32;
        let start = pid as usize % slots.len();
        let probe = || (0..slots.len()).map(|i| &slots[(start + i) % slots.len()]);
        for slot in probe() {
            let word = slot.load(Ordering::Acquire);
            let claimed = word == 0
                && match slot.compare_exchange(0, ours, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => true,
                    // Another thread of ours claimed it first.
                    Err(now) => holder(now) == pid,
                };
            if claimed || holder(word) == pid {
                return Some(slot);
            }
        }
        probe().take(REAP_PROBES).find(|slot| {
            let word = slot.load(Ordering::Acquire);
            is_gone(holder(word))
                && slot
                    .compare_exchange(word, ours, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
        })
    }

    /// Waits until every access that might have seen an MR withdrawn
    /// before this call has ended or its process has died, at most
    /// `timeout`; returns whether it did. Owner only, one call at a time.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        fence(Ordering::SeqCst);
        let deadline = Instant::now().checked_add(timeout);
        let Some(epoch) = self.words.get(EPOCH) else {
            return true;
        };
        let current = epoch.load(Ordering::SeqCst) & 1;
        if !self.drained(current ^ 1, deadline) {
            return false;
        }
        epoch.fetch_xor(1, Ordering::SeqCst);
        self.drained(current, deadline)
    }

    /// Waits for the counts of `epoch` to read zero, yielding between
    /// looks, until the deadline (`None`: no deadline). From the second
    /// look on, the slot of a process that died is freed (its accesses
    /// ended with it).
    fn drained(&self, epoch: u64, deadline: Option<Instant>) -> bool {
        let mut first = true;
        loop {
            if !self.busy(epoch, !first) {
                return true;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            first = false;
            std::thread::yield_now();
        }
    }

    /// Whether an access counted under `epoch` may be in progress.
    fn busy(&self, epoch: u64, free_the_dead: bool) -> bool {
        let shift = COUNT_BITS * epoch as u32;
        let counted = |word: u64| (word >> shift) & COUNT_MASK != 0;
        let overflow = self.words.get(OVERFLOW);
        let slots = self.words.get(FIRST_SLOT..).unwrap_or(&[]);
        let mut busy = overflow.is_some_and(|w| counted(w.load(Ordering::SeqCst)));
        for slot in slots {
            let word = slot.load(Ordering::SeqCst);
            if !counted(word) {
                continue;
            }
            let freed = free_the_dead
                && is_gone(holder(word))
                && slot
                    .compare_exchange(word, 0, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok();
            busy |= !freed;
        }
        busy
    }
}

/// The pid a slot word names (0: free).
fn holder(word: u64) -> i32 {
    (word >> 32) as u32 as i32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::same_host::liveness::{gone_pid, own_pid};

    fn part() -> Vec<AtomicU64> {
        (0..WORDS).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn wait_idle_waits_for_accesses_in_progress() {
        let words = part();
        let accessors = Accessors::new(&words);
        assert!(accessors.wait_idle(Duration::ZERO));
        let access = accessors.begin(own_pid());
        assert!(!accessors.wait_idle(Duration::from_millis(1)));
        drop(access);
        assert!(accessors.wait_idle(Duration::ZERO));
        // An access started after a flip is counted under the new epoch.
        let access = accessors.begin(own_pid());
        assert!(!accessors.wait_idle(Duration::from_millis(1)));
        drop(access);
        assert!(accessors.wait_idle(Duration::ZERO));
    }

    /// A peer killed in the middle of a copy never ends its access: the
    /// owner drops it instead of waiting its whole timeout at every
    /// later deregistration, and the slot is free again.
    #[test]
    fn an_access_whose_process_died_is_not_waited_for() {
        let words = part();
        let accessors = Accessors::new(&words);
        let dead = gone_pid();
        std::mem::forget(accessors.begin(dead));
        let started = Instant::now();
        assert!(accessors.wait_idle(Duration::from_secs(30)));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(words[FIRST_SLOT..]
            .iter()
            .all(|w| w.load(Ordering::SeqCst) == 0));
        // A live process's access left open is still waited for.
        std::mem::forget(accessors.begin(own_pid()));
        assert!(!accessors.wait_idle(Duration::from_millis(10)));
    }

    #[test]
    fn a_process_counts_in_one_slot_that_names_it() {
        let words = part();
        let accessors = Accessors::new(&words);
        let pid = own_pid();
        let first = accessors.begin(pid);
        let second = accessors.begin(pid);
        let named: Vec<u64> = words[FIRST_SLOT..]
            .iter()
            .map(|w| w.load(Ordering::SeqCst))
            .filter(|&w| w != 0)
            .collect();
        assert_eq!(named, [u64::from(pid as u32) << 32 | 2]);
        drop((first, second));
        assert!(accessors.wait_idle(Duration::ZERO));
    }

    /// With every slot named by a live process, an access counts in the
    /// overflow word, which is waited for like any other; a slot whose
    /// holder died is taken over.
    #[test]
    fn a_full_table_counts_in_the_overflow_word_or_takes_a_dead_slot() {
        let words = part();
        let accessors = Accessors::new(&words);
        let alive = u64::from(own_pid() as u32) << 32;
        for slot in &words[FIRST_SLOT..] {
            slot.store(alive, Ordering::SeqCst);
        }
        let stranger = own_pid() + 1;
        let access = accessors.begin(stranger);
        assert_eq!(words[OVERFLOW].load(Ordering::SeqCst), 1);
        assert!(!accessors.wait_idle(Duration::from_millis(1)));
        drop(access);
        assert!(accessors.wait_idle(Duration::ZERO));

        let dead = gone_pid();
        let pid = own_pid() + 2;
        let first_probe = FIRST_SLOT + pid as usize % SLOTS;
        words[first_probe].store(u64::from(dead as u32) << 32, Ordering::SeqCst);
        let access = accessors.begin(pid);
        assert_eq!(
            words[first_probe].load(Ordering::SeqCst) >> 32,
            u64::from(pid as u32)
        );
        drop(access);
    }

    #[test]
    fn a_short_part_counts_nothing() {
        let words = part();
        let accessors = Accessors::new(&words[..WORDS - 1]);
        drop(accessors.begin(own_pid()));
        assert!(accessors.wait_idle(Duration::ZERO));
    }
}
