//! A thread that spins on empty CQs yields its CPU now and then, so that a
//! thread woken on that CPU runs without waiting for the scheduler tick.
//!
//! A datagram wakes its receiver's progress thread on the sender's CPU,
//! and the sender is most often an application that then spins in
//! `ibv_poll_cq` for its completion. The kernel's scheduler (EEVDF, with
//! run-to-parity) lets a running thread finish its slice before a thread
//! woken beside it: the woken progress thread waited there for the next
//! tick, up to 4 ms, while the application it served, on the other CPU,
//! spun on memory for the data the thread had to take in (wire
//! `ib_write_lat`: in ten alternating runs of 5,000 iterations with and
//! without the yields, the 99.9th percentile passed 1 ms in 1 and 3;
//! docs/perf-profile.md). On a NIC the data would have landed without
//! any thread. A `sched_yield` every [`YIELD_EVERY`] of empty polling
//! hands the CPU to such a thread; with nothing else runnable it returns
//! at once (a fraction of a microsecond, against the thread's polls of
//! most often a microsecond or more while the socket is lent to it).

use std::cell::Cell;
use std::time::{Duration, Instant};

/// Empty polling after which a spinning thread yields its CPU.
pub(crate) const YIELD_EVERY: Duration = Duration::from_micros(10);

thread_local! {
    /// When this thread's polls began, or last yielded, to come back
    /// empty in a row (over all contexts: a thread seldom spins on two).
    static EMPTY_SINCE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// A poll on this thread came back with `taken` completions.
pub(crate) fn polled(taken: usize) {
    if taken > 0 {
        EMPTY_SINCE.set(None);
        return;
    }
    let now = Instant::now();
    match EMPTY_SINCE.get() {
        None => EMPTY_SINCE.set(Some(now)),
        Some(since) if now.duration_since(since) >= YIELD_EVERY => {
            std::thread::yield_now();
            EMPTY_SINCE.set(Some(Instant::now()));
        }
        Some(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Empty polls start the count; one with a completion ends it; and
    /// after `YIELD_EVERY` of empty polls the thread yields and counts
    /// again from then.
    #[test]
    fn empty_polls_yield_after_a_while_and_a_completion_resets() {
        polled(0);
        let started = EMPTY_SINCE.get().expect("an empty poll starts the count");
        polled(1);
        assert_eq!(EMPTY_SINCE.get(), None);
        polled(0);
        while Instant::now().duration_since(started) < 2 * YIELD_EVERY {
            std::hint::spin_loop();
        }
        let before = Instant::now();
        polled(0);
        let since = EMPTY_SINCE.get().unwrap();
        assert!(since >= before, "the count starts again after the yield");
    }
}
