//! Who takes the datagrams in from the steered socket: the progress
//! thread, or an application thread spinning in `ibv_poll_cq`.
//!
//! A poll of a CQ takes a datagram in before it runs, so an application
//! that spins on its CQs takes every datagram in itself. Yet while the
//! progress thread sleeps in its poller with the socket registered, each
//! datagram wakes it too, and on a machine whose CPUs both spin (two
//! applications in a latency test on two CPUs) the woken thread preempts
//! one of them, only to find the datagram taken: wire `ib_send_lat` paid
//! 0.8 context switches per iteration on each side for it. So while an application
//! spins on CQs that hand it its incoming data (the completions of
//! receives, READs and atomics), the thread lends it the socket (stops
//! polling it) and sleeps until a timer of the engine is due or the
//! application stopped spinning; it takes the socket back when it wakes
//! and finds no poll for about [`HANDBACK`], or no such completion handed
//! over for as long and since then [`OTHERS_AT_MOST`] polls that handed
//! over other completions only, or at once when the application arms a
//! CQ for an event (`ibv_req_notify_cq`: it is about to sleep in
//! `ibv_get_cq_event`, and only the thread can then take in what
//! completes its work). A datagram left waiting when the spinning stopped
//! (come after the last poll, or behind the one datagram a poll takes)
//! waits at most [`HANDBACK`]; a NIC's interrupt moderation holds one back
//! for as long; so does one on a group socket (a multicast group's, lent
//! with the steered socket). So do frames on the daemon's stream (CM
//! messages, multicast datagrams passed on): while the socket is lent,
//! the thread woken for them leaves them to the spinning thread's next
//! poll (`endpoint.rs`, `StreamWaiting`) rather than take the driver from
//! it. An application whose polls hand it only the completions of its
//! SENDs and WRITEs learns of incoming data some other way
//! (`ib_write_lat` spins on memory between polls for the peer's WRITE), so
//! only the thread can take that in at once: it keeps the socket, unless
//! the polls take those WRITEs in themselves (the peer's ACK, kept for
//! its answering WRITE, comes with it: `kept_packets.rs`), which counts
//! as a completion of incoming data handed over. The
//! times are those of a machine where a poll costs a microsecond or
//! two; where polls cost more (an emulated VM), they stretch in
//! proportion.

use crate::driver::Polled;
use softverbs_engine::Nanos;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// An application thread counts as spinning once it polled this many times
/// between two looks of the progress thread ...
const SPIN_POLLS: u64 = 4;
/// ... the last of them ending this recently.
const SPIN_GAP: Nanos = 20_000;
/// No poll for this long: the thread takes the socket back.
pub(crate) const HANDBACK: Nanos = 250_000;
/// The unit the times above stretch by: about what a poll costs where
/// they were measured (a system call and the engine's look, a microsecond
/// or two), so that polls costing less than twice this leave them as they
/// are. Where polls cost more (under an emulator, tens of times more), the
/// times stretch by as many units: else a spinning thread's polls are
/// never recent enough to be lent the socket, and a thread the emulated
/// CPUs stall for a while gets it taken back.
const NATIVE_POLL: Nanos = 2_000;
/// The most the times stretch, so that a poll that was preempted does not
/// keep the socket lent for long.
const STRETCH_AT_MOST: Nanos = 64;
/// Polls handing over completions, none of incoming data, after which an
/// application that took none for [`HANDBACK`] no longer counts as taking
/// its incoming data from its CQs. Counted as well as timed: where a round
/// trip takes longer than even the stretched time (an emulated VM), the
/// count still says the application takes its data from its CQs.
const OTHERS_AT_MOST: u64 = 8;

/// What the application threads report, shared with the progress thread.
#[derive(Debug, Default)]
pub(crate) struct AppPolls {
    /// Polls that found their CQ empty and received (`ibv_poll_cq` takes
    /// completions already queued without the driver).
    polls: AtomicU64,
    /// When the last of them ended (clock nanoseconds).
    last: AtomicU64,
    /// How long the last of them took.
    took: AtomicU64,
    /// When the last poll that handed over a completion of incoming data
    /// ([`crate::driver::Polled::incoming`]) ended, or took one from a
    /// CQ's ring; 0: none yet.
    last_incoming: AtomicU64,
    /// Polls since, through the driver or from a ring, that handed over
    /// completions none of which was of incoming data.
    others_since_incoming: AtomicU64,
    /// CQs armed for an event.
    arms: AtomicU64,
    /// The progress thread has lent the socket.
    lent: AtomicBool,
    /// Times it lent it (`SOFTVERBS_STATS`).
    lends: AtomicU64,
    /// How many [`NATIVE_POLL`]s a poll costs, as the progress thread last
    /// saw (0: not seen yet, taken as 1): what the times of keeping
    /// (`kept_packets.rs`) stretch by, as the lending's do.
    stretch: AtomicU64,
}

impl AppPolls {
    /// An application thread polled a CQ and received, ending at `ended`
    /// after `took`; `polled`: what it was handed.
    pub(crate) fn polled(&self, ended: Nanos, took: Nanos, polled: Polled) {
        self.polls.fetch_add(1, Ordering::Relaxed);
        self.last.store(ended, Ordering::Relaxed);
        self.took.store(took, Ordering::Relaxed);
        if polled.incoming {
            self.last_incoming.store(ended, Ordering::Relaxed);
            self.others_since_incoming.store(0, Ordering::Relaxed);
        } else if polled.taken > 0 {
            self.others_since_incoming.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An application thread took completions from a CQ's ring;
    /// `incoming`: some were of incoming data. Dated by the last poll
    /// that received, without reading the clock: a thread that spins
    /// polled moments ago.
    pub(crate) fn took_from_ring(&self, incoming: bool) {
        if incoming {
            let last = self.last.load(Ordering::Relaxed);
            self.last_incoming.fetch_max(last, Ordering::Relaxed);
            self.others_since_incoming.store(0, Ordering::Relaxed);
        } else {
            self.others_since_incoming.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The progress thread, taking the socket back, took in the end of a
    /// WRITE that waited for it: the application learns of its WRITEs
    /// from its memory, and its polls did not take this one in (a peer
    /// that sends its ACK at once, as rxe does, and its WRITE later). It
    /// no longer counts as taking its incoming data from its CQs until a
    /// poll hands it some again, so that each such WRITE does not wait
    /// out a lending.
    pub(crate) fn write_waited(&self) {
        self.last_incoming.store(0, Ordering::Relaxed);
        self.others_since_incoming
            .store(OTHERS_AT_MOST, Ordering::Relaxed);
    }

    /// `time` stretched as the lending's times are, by what a poll costs
    /// where polls cost more than on a native machine (an emulated VM).
    pub(crate) fn stretched(&self, time: Nanos) -> Nanos {
        time.saturating_mul(self.stretch.load(Ordering::Relaxed).max(1))
    }

    /// How many times the progress thread lent the socket.
    pub(crate) fn lends(&self) -> u64 {
        self.lends.load(Ordering::Relaxed)
    }

    /// Whether the progress thread has lent the socket.
    pub(crate) fn lent(&self) -> bool {
        self.lent.load(Ordering::Relaxed)
    }

    /// An application thread armed a CQ for an event; true if the
    /// progress thread must be woken to take the socket back.
    pub(crate) fn armed(&self) -> bool {
        // SeqCst with the thread's store of `lent` and load of `arms`
        // (Dekker): either the thread sees this arm and keeps the socket,
        // or this sees the socket lent and wakes the thread.
        self.arms.fetch_add(1, Ordering::SeqCst);
        self.lent.load(Ordering::SeqCst)
    }
}

/// A change of who receives, for the progress thread to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Stop polling the socket: the application spins.
    Lend,
    /// Poll the socket again and receive: the application stopped.
    TakeBack,
}

/// The progress thread's side: what it saw at its last look.
#[derive(Debug, Default)]
pub(crate) struct Owner {
    seen_polls: u64,
    seen_arms: u64,
    lent: bool,
    /// What a poll costs, as last seen: it falls at once to a cheaper
    /// poll and rises by an eighth per look that found new polls, so that
    /// a poll preempted halfway does not stretch the times for long.
    poll_cost: Nanos,
    /// While lent: when to look again (see [`Owner::look_again_at`]).
    look_at: Nanos,
}

impl Owner {
    /// Looks at the application's polls since the last look, and says
    /// whether to lend the socket or take it back.
    pub(crate) fn review(&mut self, app: &AppPolls, now: Nanos) -> Option<Change> {
        let polls = app.polls.load(Ordering::Relaxed);
        let arms = app.arms.load(Ordering::SeqCst);
        let last = app.last.load(Ordering::Relaxed);
        let since_poll = now.saturating_sub(last);
        if polls != self.seen_polls {
            self.note_poll_cost(app.took.load(Ordering::Relaxed));
            app.stretch.store(self.stretch(), Ordering::Relaxed);
        }
        let last_incoming = app.last_incoming.load(Ordering::Relaxed);
        // It takes its incoming data from its CQs: an application whose
        // polls hand it only its SENDs' and WRITEs' completions may be
        // waiting for data the thread must take in. Over a time, not since
        // the last look: the thread may look twice within one message (a
        // datagram, then a timer), and took the socket back then.
        let handback = self.stretched(HANDBACK);
        let by_count = app.others_since_incoming.load(Ordering::Relaxed) < OTHERS_AT_MOST;
        let takes_incoming =
            last_incoming != 0 && (now.saturating_sub(last_incoming) < handback || by_count);
        // The earliest the application may have stopped: its last poll
        // ages, or (unless the count holds, which only polls can change)
        // its last completion of incoming data does.
        self.look_at = match by_count {
            true => last + handback,
            false => last.min(last_incoming) + handback,
        };
        let no_arm = arms == self.seen_arms;
        let spinning = no_arm
            && polls.wrapping_sub(self.seen_polls) >= SPIN_POLLS
            && since_poll < self.stretched(SPIN_GAP)
            && takes_incoming;
        let still_spinning = no_arm && since_poll < handback && takes_incoming;
        self.seen_polls = polls;
        self.seen_arms = arms;
        if !self.lent && spinning {
            app.lent.store(true, Ordering::SeqCst);
            if app.arms.load(Ordering::SeqCst) == arms {
                self.lent = true;
                app.lends.fetch_add(1, Ordering::Relaxed);
                return Some(Change::Lend);
            }
            app.lent.store(false, Ordering::SeqCst);
        } else if self.lent && !still_spinning {
            self.lent = false;
            app.lent.store(false, Ordering::SeqCst);
            return Some(Change::TakeBack);
        }
        None
    }

    /// While lent: when to look again, if no timer comes first (the
    /// earliest the application may have stopped).
    pub(crate) fn look_again_at(&self) -> Option<Nanos> {
        self.lent.then_some(self.look_at)
    }

    fn note_poll_cost(&mut self, took: Nanos) {
        self.poll_cost = if self.poll_cost == 0 {
            took
        } else {
            took.min(self.poll_cost + self.poll_cost / 8 + 1)
        };
    }

    /// How many [`NATIVE_POLL`]s a poll costs.
    fn stretch(&self) -> Nanos {
        (self.poll_cost / NATIVE_POLL).clamp(1, STRETCH_AT_MOST)
    }

    /// `time` stretched by how many [`NATIVE_POLL`]s a poll costs.
    fn stretched(&self, time: Nanos) -> Nanos {
        time.saturating_mul(self.stretch())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kept_packets::KEEP_AT_MOST;

    /// What a poll costs in these tests: as on a native machine.
    const POLL: Nanos = 1_000;
    const INCOMING: Polled = Polled {
        taken: 1,
        incoming: true,
    };
    const OTHER: Polled = Polled {
        taken: 1,
        incoming: false,
    };
    const EMPTY: Polled = Polled {
        taken: 0,
        incoming: false,
    };

    fn spin(app: &AppPolls, at: Nanos) {
        for _ in 0..SPIN_POLLS {
            app.polled(at, POLL, INCOMING);
        }
    }

    /// An application that spun at `at`, lent the socket a microsecond
    /// later.
    fn lent_at(at: Nanos) -> (AppPolls, Owner) {
        let app = AppPolls::default();
        let mut owner = Owner::default();
        spin(&app, at);
        assert_eq!(owner.review(&app, at + 1_000), Some(Change::Lend));
        (app, owner)
    }

    #[test]
    fn a_spinning_application_is_lent_the_socket_until_it_stops() {
        let app = AppPolls::default();
        let mut owner = Owner::default();
        assert_eq!(owner.review(&app, 1_000_000), None, "no polls yet");
        spin(&app, 1_000_000);
        assert_eq!(owner.review(&app, 1_001_000), Some(Change::Lend));
        assert_eq!(owner.look_again_at(), Some(1_000_000 + HANDBACK));
        app.polled(1_100_000, POLL, INCOMING);
        assert_eq!(
            owner.review(&app, 1_000_000 + HANDBACK),
            None,
            "still spinning"
        );
        assert_eq!(
            owner.review(&app, 1_100_000 + HANDBACK),
            Some(Change::TakeBack)
        );
        assert_eq!(owner.look_again_at(), None);
    }

    #[test]
    fn a_write_that_waited_for_the_socket_taken_back_forgets_the_incoming_data() {
        let (app, mut owner) = lent_at(1_000);
        assert_eq!(
            owner.review(&app, 1_000 + HANDBACK),
            Some(Change::TakeBack),
            "no poll since"
        );
        app.write_waited();
        spin(&app, 2 * HANDBACK);
        app.polled(2 * HANDBACK, POLL, OTHER);
        assert_eq!(
            owner.review(&app, 2 * HANDBACK + 1_000),
            Some(Change::Lend),
            "a poll handed incoming data again"
        );
        app.write_waited();
        for _ in 0..SPIN_POLLS {
            app.polled(3 * HANDBACK, POLL, OTHER);
        }
        assert_eq!(
            owner.review(&app, 3 * HANDBACK + 1_000),
            Some(Change::TakeBack),
            "spinning, but on other completions only"
        );
    }

    #[test]
    fn polls_without_incoming_data_for_a_while_take_the_socket_back() {
        let (app, mut owner) = lent_at(1_000);
        app.polled(3_000, POLL, OTHER);
        assert_eq!(owner.review(&app, 4_000), None, "a look soon after");
        assert_eq!(owner.review(&app, 4_500), None, "and another");
        assert_eq!(owner.look_again_at(), Some(3_000 + HANDBACK));
        assert_eq!(owner.review(&app, 1_000 + HANDBACK), None, "too few");
        for _ in 1..OTHERS_AT_MOST {
            app.polled(1_000 + HANDBACK, POLL, OTHER);
        }
        assert_eq!(owner.review(&app, 1_000 + HANDBACK), Some(Change::TakeBack));
    }

    #[test]
    fn incoming_data_taken_from_a_ring_keeps_the_socket_lent() {
        let (app, mut owner) = lent_at(1_000);
        // Its polls that receive now hand over only its sends'
        // completions; its receives' come from their CQ's ring.
        app.polled(1_000 + HANDBACK, POLL, OTHER);
        app.took_from_ring(true);
        assert_eq!(owner.review(&app, 1_000 + HANDBACK), None);
        assert_eq!(owner.look_again_at(), Some(1_000 + 2 * HANDBACK));
        for _ in 0..OTHERS_AT_MOST {
            app.took_from_ring(false);
        }
        app.polled(1_000 + 2 * HANDBACK, POLL, EMPTY);
        assert_eq!(
            owner.review(&app, 1_000 + 2 * HANDBACK),
            Some(Change::TakeBack),
            "none since"
        );
    }

    #[test]
    fn arming_a_cq_takes_the_socket_back_and_wakes_the_thread() {
        let app = AppPolls::default();
        let mut owner = Owner::default();
        assert!(!app.armed(), "not lent: no wake-up needed");
        assert_eq!(owner.review(&app, 500), None, "armed");
        spin(&app, 1_000);
        assert_eq!(owner.review(&app, 2_000), Some(Change::Lend));
        assert!(app.armed(), "lent: the thread must be woken");
        app.polled(3_000, POLL, EMPTY);
        assert_eq!(owner.review(&app, 3_000), Some(Change::TakeBack));
    }

    #[test]
    fn an_application_that_arms_its_cqs_is_never_lent_the_socket() {
        let app = AppPolls::default();
        let mut owner = Owner::default();
        spin(&app, 1_000);
        app.armed();
        assert_eq!(owner.review(&app, 2_000), None);
    }

    #[test]
    fn polls_that_hand_over_no_incoming_data_are_not_lent_the_socket() {
        let app = AppPolls::default();
        let mut owner = Owner::default();
        for _ in 0..SPIN_POLLS {
            app.polled(1_000, POLL, OTHER);
            app.polled(1_000, POLL, EMPTY);
        }
        assert_eq!(owner.review(&app, 2_000), None);
    }

    #[test]
    fn a_few_polls_or_old_ones_are_not_spinning() {
        let app = AppPolls::default();
        let mut owner = Owner::default();
        app.polled(1_000, POLL, INCOMING);
        assert_eq!(owner.review(&app, 2_000), None, "one poll");
        spin(&app, 1_000);
        assert_eq!(
            owner.review(&app, 1_000 + SPIN_GAP),
            None,
            "polled long ago"
        );
    }

    #[test]
    fn where_polls_cost_more_the_times_stretch_in_proportion() {
        let app = AppPolls::default();
        let mut owner = Owner::default();
        assert_eq!(app.stretched(KEEP_AT_MOST), KEEP_AT_MOST, "none seen yet");
        let slow = 30 * NATIVE_POLL;
        for _ in 0..SPIN_POLLS {
            app.polled(1_000_000, slow, EMPTY);
        }
        app.polled(1_000_000, slow, INCOMING);
        // Five times the native gap since the last poll: still spinning.
        let later = 1_000_000 + 5 * SPIN_GAP;
        assert_eq!(owner.review(&app, later), Some(Change::Lend));
        assert_eq!(owner.look_again_at(), Some(1_000_000 + 30 * HANDBACK));
        // The verbs' times of keeping stretch as much.
        assert_eq!(app.stretched(KEEP_AT_MOST), 30 * KEEP_AT_MOST);
        assert_eq!(owner.review(&app, later + HANDBACK), None, "no new poll");
        // A cheap poll brings them back at once.
        app.polled(later, NATIVE_POLL, EMPTY);
        assert_eq!(
            owner.review(&app, later + 2 * HANDBACK),
            Some(Change::TakeBack)
        );
        assert_eq!(app.stretched(KEEP_AT_MOST), KEEP_AT_MOST);
    }

    #[test]
    fn round_trips_longer_than_the_times_keep_the_socket_lent_by_count() {
        // Each round trip takes 10 HANDBACKs; the application polls its
        // send CQ (a completion), then spins on its receive CQ (empty
        // polls) until the reply comes.
        let (app, mut owner) = lent_at(1_000);
        for round in 1..4 {
            let at = round * 10 * HANDBACK;
            app.polled(at, POLL, OTHER);
            app.polled(at, POLL, EMPTY);
            assert_eq!(owner.review(&app, at + 1_000), None, "round {round}");
            app.polled(at + 2_000, POLL, INCOMING);
        }
    }

    #[test]
    fn lent_by_the_count_the_thread_looks_again_after_the_last_poll() {
        let (app, mut owner) = lent_at(1_000);
        // Empty polls long after the last completion of incoming data:
        // the next look is due after the last poll, not in the past.
        let late = 10 * HANDBACK;
        app.polled(late, POLL, EMPTY);
        assert_eq!(owner.review(&app, late + 1_000), None);
        assert_eq!(owner.look_again_at(), Some(late + HANDBACK));
    }

    #[test]
    fn a_preempted_poll_stretches_the_times_only_so_far() {
        let app = AppPolls::default();
        let mut owner = Owner::default();
        spin(&app, 1_000_000);
        app.polled(1_000_000, 1_000_000_000, INCOMING);
        assert_eq!(owner.review(&app, 1_001_000), Some(Change::Lend));
        assert_eq!(
            owner.look_again_at(),
            Some(1_000_000 + STRETCH_AT_MOST * HANDBACK)
        );
    }
}
