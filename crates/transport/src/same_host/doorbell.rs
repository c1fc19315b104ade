//! The owner's doorbell: whether a producer must wake its progress
//! thread after pushing a delivery.
//!
//! The owner's progress thread sleeps on an eventfd when it has nothing
//! to do; writing that eventfd for every delivery would cost a system
//! call each. So the owner *arms* the doorbell before sleeping and then
//! looks at its deliveries once more; a producer, after pushing, *takes*
//! the doorbell, and writes the eventfd only if it was armed. Both sides
//! put a SeqCst fence between their write and their read (owner: arm,
//! then look; producer: push, then take), so at least one of them sees
//! the other's write: either the owner finds the delivery, or the
//! producer finds the doorbell armed. Exactly one producer wins the take.

use std::sync::atomic::{fence, AtomicU64, Ordering};

/// A view of the doorbell word of a region.
#[derive(Debug, Clone, Copy)]
pub struct Doorbell<'a> {
    word: Option<&'a AtomicU64>,
}

impl<'a> Doorbell<'a> {
    /// The doorbell in `word` (`None`: a region too short to have one,
    /// which never rings).
    pub fn new(word: Option<&'a AtomicU64>) -> Self {
        Doorbell { word }
    }

    /// Owner, before sleeping: asks producers to ring. Look at the
    /// deliveries again after this, before sleeping.
    pub fn arm(&self) {
        if let Some(word) = self.word {
            word.store(1, Ordering::SeqCst);
        }
        fence(Ordering::SeqCst);
    }

    /// Owner, awake again: producers need not ring.
    pub fn disarm(&self) {
        if let Some(word) = self.word {
            word.store(0, Ordering::Relaxed);
        }
    }

    /// Producer, after pushing: whether it must wake the owner (write its
    /// eventfd). True for one producer per arming.
    pub fn take(&self) -> bool {
        fence(Ordering::SeqCst);
        self.word
            .is_some_and(|word| word.swap(0, Ordering::SeqCst) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_take_per_arming() {
        let word = AtomicU64::new(0);
        let bell = Doorbell::new(Some(&word));
        assert!(!bell.take());
        bell.arm();
        assert!(bell.take());
        assert!(!bell.take());
        bell.arm();
        bell.disarm();
        assert!(!bell.take());
        assert!(!Doorbell::new(None).take());
    }

    /// The owner arms and then checks for work; a producer adds work and
    /// then takes: in every round, the owner sees the work or the producer
    /// rings (never neither).
    #[test]
    fn a_wakeup_is_never_lost() {
        let word = AtomicU64::new(0);
        let work = AtomicU64::new(0);
        let rounds = 20_000;
        let owner_round = AtomicU64::new(u64::MAX);
        let producer_rang = AtomicU64::new(u64::MAX);
        std::thread::scope(|scope| {
            let bell = Doorbell::new(Some(&word));
            scope.spawn(|| {
                let bell = Doorbell::new(Some(&word));
                for round in 0..rounds {
                    while owner_round.load(Ordering::SeqCst) != round {
                        std::thread::yield_now();
                    }
                    work.store(round + 1, Ordering::SeqCst);
                    if bell.take() {
                        producer_rang.store(round, Ordering::SeqCst);
                    }
                    owner_round.store(round + 1_000_000_000, Ordering::SeqCst);
                }
            });
            for round in 0..rounds {
                bell.disarm();
                owner_round.store(round, Ordering::SeqCst);
                bell.arm();
                let saw_work = work.load(Ordering::SeqCst) == round + 1;
                while owner_round.load(Ordering::SeqCst) != round + 1_000_000_000 {
                    std::thread::yield_now();
                }
                let rang = producer_rang.load(Ordering::SeqCst) == round;
                assert!(saw_work || rang, "round {round}: wakeup lost");
            }
        });
    }
}
