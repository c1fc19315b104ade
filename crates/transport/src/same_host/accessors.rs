//! Who is copying into a context's memory right now: the count each peer
//! process raises around an access (a lookup in the published MR table
//! and the copies into the MR it found), and the owner's wait for the
//! accesses that may have seen an MR it withdrew.
//!
//! The counts come in pairs selected by an epoch word, as in sleepable
//! RCU: the owner waits for the count new accesses do not use, flips the
//! epoch, then waits for the other, so a stream of new accesses cannot
//! keep it waiting. Each peer process counts in a slot that names it
//! (its pid and pid namespace), so the owner can tell an access that will
//! never end, its process having ended in the middle of it, and drop it
//! instead of waiting: a peer killed mid-copy would otherwise make every
//! later `ibv_dereg_mr` of the owner wait its whole timeout. Only a
//! holder of the owner's own pid namespace is judged by its pid (another
//! namespace's pid names another process here). A process that finds
//! every slot named by live processes counts in the overflow word, which
//! names nobody (an access counted there is always waited for).
//!
//! Words: `[epoch, overflow, slots...]`; a slot is two words,
//! `pid << 32 | count[1] << 16 | count[0]` (`0` when free) and the
//! holder's pid namespace, written after it claims the slot and before
//! it counts. A count is only added while the slot still names the
//! process (a compare-and-swap), so a slot freed or taken over meanwhile
//! is never counted in. A process has at most one access in progress per
//! thread, so 16 bits of count do not overflow into the other epoch's.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::liveness::{has_ended, own_pid_namespace};

/// Words of the accessors' part.
pub const WORDS: usize = FIRST_SLOT + SLOTS * SLOT_WORDS;

const EPOCH: usize = 0;
const OVERFLOW: usize = 1;
const FIRST_SLOT: usize = 2;
/// Peer processes counted by name at once.
const SLOTS: usize = 64;
/// A slot: the counts with the holder's pid, and its pid namespace.
const SLOT_WORDS: usize = 2;
const COUNT_BITS: u32 = 16;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// Slots a process that found none free checks for a holder that ended
/// (a `kill(pid, 0)` each, and a look at `/proc` for one that exists)
/// before it counts in the overflow word.
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
        let named = self
            .slot_of(pid)
            .filter(|slot| {
                // Ours to say before we count (a process of another
                // namespace with our pid number may have named it).
                let ns = own_pid_namespace();
                if slot[1].load(Ordering::SeqCst) != ns {
                    slot[1].store(ns, Ordering::SeqCst);
                }
                count_in(slot, pid, one)
            })
            .map(|slot| &slot[0]);
        let word = named.or_else(|| {
            let overflow = self.words.get(OVERFLOW)?;
            overflow.fetch_add(one, Ordering::SeqCst);
            Some(overflow)
        });
        // Orders the count before the lookup that follows, against the
        // owner's withdrawal and its reading of the counts.
        fence(Ordering::SeqCst);
        AccessGuard { word, one }
    }

    /// The slots, each `[counts and pid, pid namespace]`.
    fn slots(&self) -> std::slice::ChunksExact<'a, AtomicU64> {
        let words: &'a [AtomicU64] = self.words.get(FIRST_SLOT..).unwrap_or(&[]);
        words.chunks_exact(SLOT_WORDS)
    }

    /// The slot that names `pid`: found, claimed free, or taken over from
    /// a holder that ended. `None`: none to be had.
    fn slot_of(&self, pid: i32) -> Option<&'a [AtomicU64]> {
        if pid <= 0 {
            return None;
        }
        let words: &'a [AtomicU64] = self.words.get(FIRST_SLOT..).unwrap_or(&[]);
        let count = words.len() / SLOT_WORDS;
        if count == 0 {
            return None;
        }
        let start = pid as usize % count;
        let slot_at = |i: usize| &words[i * SLOT_WORDS..(i + 1) * SLOT_WORDS];
        let probe = || (0..count).map(|i| slot_at((start + i) % count));
        let ours = u64::from(pid as u32) << 32;
        for slot in probe() {
            let word = slot[0].load(Ordering::Acquire);
            if holder(word) == pid {
                return Some(slot);
            }
            if word == 0 && claim(slot, 0, ours) {
                return Some(slot);
            }
        }
        probe().take(REAP_PROBES).find(|slot| {
            let word = slot[0].load(Ordering::Acquire);
            let other = holder(word);
            other != pid
                && slot[1].load(Ordering::SeqCst) == own_pid_namespace()
                && has_ended(other)
                && claim(slot, word, ours)
        })
    }

    /// Waits until every access that might have seen an MR withdrawn
    /// before this call has ended or its process has died. An access of
    /// a live process of the owner's pid namespace is waited for however
    /// long it takes: a process stopped in the middle of a copy (SIGSTOP,
    /// a debugger) would otherwise write into the memory after the verb
    /// that withdrew it returned, when the application may have reused
    /// it. Past `patience`, `waiting` is told that process's pid (once)
    /// and the looks slow down. An access the owner cannot judge (the
    /// overflow word's, another pid namespace's) is waited for
    /// `patience` at most. Returns whether every access ended. Owner
    /// only, one call at a time.
    pub fn wait_idle(&self, patience: Duration, waiting: &mut dyn FnMut(i32)) -> bool {
        fence(Ordering::SeqCst);
        let mut wait = Wait {
            deadline: Instant::now().checked_add(patience),
            waiting,
            told: false,
        };
        let Some(epoch) = self.words.get(EPOCH) else {
            return true;
        };
        let current = epoch.load(Ordering::SeqCst) & 1;
        if !self.drained(current ^ 1, &mut wait) {
            return false;
        }
        epoch.fetch_xor(1, Ordering::SeqCst);
        self.drained(current, &mut wait)
    }

    /// Waits for the counts of `epoch` to read zero, yielding between
    /// looks until the deadline, then (for a live holder) sleeping a
    /// millisecond between them. From the second look on, the slot of a
    /// process that died is freed (its accesses ended with it).
    fn drained(&self, epoch: u64, wait: &mut Wait<'_>) -> bool {
        let mut first = true;
        loop {
            let look = self.look(epoch, !first);
            if !look.busy {
                return true;
            }
            if first || wait.deadline.is_none_or(|d| Instant::now() < d) {
                std::thread::yield_now();
            } else {
                let Some(pid) = look.live else {
                    return false;
                };
                if !std::mem::replace(&mut wait.told, true) {
                    (wait.waiting)(pid);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            first = false;
        }
    }

    /// Whether an access counted under `epoch` may be in progress, and
    /// a live holder of one (from the second look, `judge`, on: a holder
    /// that ended is freed instead).
    fn look(&self, epoch: u64, judge: bool) -> Look {
        let shift = COUNT_BITS * epoch as u32;
        let counted = |word: u64| (word >> shift) & COUNT_MASK != 0;
        let overflow = self.words.get(OVERFLOW);
        let mut look = Look {
            busy: overflow.is_some_and(|w| counted(w.load(Ordering::SeqCst))),
            live: None,
        };
        for slot in self.slots() {
            let word = slot[0].load(Ordering::SeqCst);
            if !counted(word) {
                continue;
            }
            // The namespace was written before the count we see.
            let judged = judge && slot[1].load(Ordering::SeqCst) == own_pid_namespace();
            let ended = judged && has_ended(holder(word));
            let freed = ended
                && slot[0]
                    .compare_exchange(word, 0, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok();
            if freed {
                continue;
            }
            look.busy = true;
            // An ended holder whose word changed meanwhile (counted again
            // by a process given its pid, or taken over) is looked at
            // again, as a live one.
            if judged {
                look.live = Some(holder(word));
            }
        }
        look
    }
}

/// A wait of [`Accessors::wait_idle`].
struct Wait<'w> {
    /// Past it, only live holders are waited for.
    deadline: Option<Instant>,
    waiting: &'w mut dyn FnMut(i32),
    /// `waiting` was told.
    told: bool,
}

/// What one look at the counts found.
struct Look {
    /// An access may be in progress.
    busy: bool,
    /// A live process of the owner's pid namespace holds one.
    live: Option<i32>,
}

/// Makes `slot`, reading `expected`, name the process whose word is
/// `ours` (no count); false if it changed first to name another.
fn claim(slot: &[AtomicU64], expected: u64, ours: u64) -> bool {
    match slot[0].compare_exchange(expected, ours, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => true,
        // Another thread of ours may have claimed it: then it is ours.
        Err(now) => holder(now) == holder(ours),
    }
}

/// Adds `one` to `slot`'s count while it names `pid`; false once it
/// names another process or none (freed or taken over meanwhile).
fn count_in(slot: &[AtomicU64], pid: i32, one: u64) -> bool {
    let mut word = slot[0].load(Ordering::SeqCst);
    loop {
        if holder(word) != pid {
            return false;
        }
        match slot[0].compare_exchange_weak(word, word + one, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => return true,
            Err(now) => word = now,
        }
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

    /// `wait_idle` where no live holder may be waited for.
    fn idle(accessors: &Accessors<'_>, patience: Duration) -> bool {
        accessors.wait_idle(patience, &mut |pid| panic!("waited for live process {pid}"))
    }

    /// Each slot's first word: its counts and pid.
    fn counts(words: &[AtomicU64]) -> impl Iterator<Item = u64> + '_ {
        words[FIRST_SLOT..]
            .iter()
            .step_by(SLOT_WORDS)
            .map(|w| w.load(Ordering::SeqCst))
    }

    /// Names slot `i` after `pid` with `count` accesses of epoch 0, of
    /// pid namespace `ns`.
    fn name_slot(words: &[AtomicU64], i: usize, pid: i32, count: u64, ns: u64) {
        let at = FIRST_SLOT + i * SLOT_WORDS;
        words[at].store(u64::from(pid as u32) << 32 | count, Ordering::SeqCst);
        words[at + 1].store(ns, Ordering::SeqCst);
    }

    #[test]
    fn wait_idle_waits_for_accesses_in_progress() {
        let words = part();
        let accessors = Accessors::new(&words);
        assert!(idle(&accessors, Duration::ZERO));
        // Counted in the overflow word (no pid), so waited for its
        // patience at most.
        let access = accessors.begin(0);
        assert!(!idle(&accessors, Duration::from_millis(1)));
        drop(access);
        assert!(idle(&accessors, Duration::ZERO));
        // An access started after a flip is counted under the new epoch.
        let access = accessors.begin(0);
        assert!(!idle(&accessors, Duration::from_millis(1)));
        drop(access);
        assert!(idle(&accessors, Duration::ZERO));
    }

    /// A live process's access is waited for to its end, however long
    /// past the patience (a process stopped mid-copy must not write into
    /// memory after the owner's verb returned), and the owner is told
    /// its pid, once.
    #[test]
    fn a_live_holders_access_is_waited_for_to_its_end() {
        let words = part();
        let accessors = Accessors::new(&words);
        let access = accessors.begin(own_pid());
        let (told, waiting) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            let waiter = scope.spawn(move || {
                let mut tell = |pid: i32| told.send(pid).unwrap();
                accessors.wait_idle(Duration::from_millis(1), &mut tell)
            });
            assert_eq!(waiting.recv().unwrap(), own_pid());
            assert!(!waiter.is_finished(), "the access is still held");
            drop(access);
            assert!(waiter.join().unwrap());
        });
        assert!(waiting.try_recv().is_err(), "told once");
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
        assert!(idle(&accessors, Duration::from_secs(30)));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(counts(&words).all(|w| w == 0));
    }

    #[test]
    fn a_process_counts_in_one_slot_that_names_it() {
        let words = part();
        let accessors = Accessors::new(&words);
        let pid = own_pid();
        let first = accessors.begin(pid);
        let second = accessors.begin(pid);
        let named: Vec<u64> = counts(&words).filter(|&w| w != 0).collect();
        assert_eq!(named, [u64::from(pid as u32) << 32 | 2]);
        drop((first, second));
        assert!(idle(&accessors, Duration::ZERO));
    }

    /// With every slot named by a live process, an access counts in the
    /// overflow word, which is waited for like any other; a slot whose
    /// holder died is taken over.
    #[test]
    fn a_full_table_counts_in_the_overflow_word_or_takes_a_dead_slot() {
        let words = part();
        let accessors = Accessors::new(&words);
        let ns = own_pid_namespace();
        for i in 0..SLOTS {
            name_slot(&words, i, own_pid(), 0, ns);
        }
        let stranger = own_pid() + 1;
        let access = accessors.begin(stranger);
        assert_eq!(words[OVERFLOW].load(Ordering::SeqCst), 1);
        assert!(!idle(&accessors, Duration::from_millis(1)));
        drop(access);
        assert!(idle(&accessors, Duration::ZERO));

        let pid = own_pid() + 2;
        let first_probe = pid as usize % SLOTS;
        name_slot(&words, first_probe, gone_pid(), 1, ns);
        let access = accessors.begin(pid);
        let named = words[FIRST_SLOT + first_probe * SLOT_WORDS].load(Ordering::SeqCst);
        assert_eq!(
            named,
            u64::from(pid as u32) << 32 | 1,
            "taken over, counted"
        );
        drop(access);
    }

    /// A holder of another pid namespace is not judged by its pid, which
    /// names another process (or none) here.
    #[test]
    fn a_holder_of_another_pid_namespace_is_waited_for() {
        let words = part();
        let accessors = Accessors::new(&words);
        name_slot(&words, 0, gone_pid(), 1, own_pid_namespace() + 1);
        assert!(!idle(&accessors, Duration::from_millis(10)));
        name_slot(&words, 0, gone_pid(), 1, own_pid_namespace());
        assert!(idle(&accessors, Duration::from_secs(30)));
    }

    /// A count goes only into a slot that still names the process: one
    /// freed or taken over between the lookup and the count is left
    /// alone (a pid reused by a new process must not count in a slot
    /// the owner is freeing as its old holder's).
    #[test]
    fn a_count_goes_only_into_a_slot_that_names_the_process() {
        let words = part();
        name_slot(&words, 0, 7, 0, 0);
        let slot = &words[FIRST_SLOT..FIRST_SLOT + SLOT_WORDS];
        assert!(!count_in(slot, 8, 1));
        assert!(count_in(slot, 7, 1));
        assert_eq!(slot[0].load(Ordering::SeqCst), 7 << 32 | 1);
        slot[0].store(0, Ordering::SeqCst);
        assert!(!count_in(slot, 7, 1), "freed");
        assert_eq!(slot[0].load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_short_part_counts_nothing() {
        let words = part();
        let accessors = Accessors::new(&words[..WORDS - 1]);
        drop(accessors.begin(own_pid()));
        assert!(idle(&accessors, Duration::ZERO));
    }
}
