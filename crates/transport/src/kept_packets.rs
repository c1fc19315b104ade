//! What a verb of a thread spinning on its CQs keeps for its next verb.
//!
//! While the socket is lent to such a thread (`receive_owner.rs`), a poll
//! that hands it completions keeps what it would send (most often the ACK
//! of the SEND it just completed) for the thread's next verbs, most often
//! a receive posted again and the reply: the ACK and the reply then leave
//! in one send and arrive in one receive, where the ACK, sent first,
//! delayed the reply by a system call on each side. A posted receive goes
//! on keeping; polls that find completions do too (`ib_send_lat` polls
//! its send CQ between the receive and the reply), for at most
//! [`KEEP_AT_MOST`], so that a thread whose every poll finds completions
//! still sends its ACKs. A poll that finds nothing sends them, as does a
//! post of sends (with its own packets), and any other verb before it runs
//! (a QP destroyed or moved to another state would take its ACK with it).
//! The progress thread, which looks again within
//! `receive_owner::HANDBACK` while the socket is lent (longer where polls
//! cost more, as under an emulator), sends them if no
//! verb comes, and so does a context that closes or a process that exits.
//!
//! A poll that took in the end of a peer's WRITE, with the completion it
//! waited for, keeps too, lent or not: `ib_write_lat` answers each WRITE
//! with a WRITE, and the ACK then leaves with that answer, which the
//! peer's poll for the ACK takes in whole. Its application learns of the
//! WRITE from its memory between polls, so only such a datagram spares
//! it waiting for its progress thread to be woken and take the WRITE in,
//! which on a machine whose CPUs both spin takes up to a scheduler tick
//! (docs/perf-profile.md). Kept without the socket lent, what is kept has
//! the progress thread wake within `HANDBACK` to send it if no verb comes
//! (`State::deadline` in driver.rs). Where the application answers each
//! WRITE at once ([`WriteAnswers`]), the progress thread keeps the ACK of
//! a WRITE it takes in as well.
//!
//! The times here are those of a native machine; where polls cost more
//! (an emulated VM), the driver stretches them as the lending's times are
//! (`AppPolls::stretched`), else no poll there keeps at all.

use softverbs_engine::Nanos;

/// How long the verbs go on keeping what the first of them kept: long
/// enough for the polls and the posted receive between a SEND taken and
/// the reply posted, short against usual ACK timeouts (67 ms for a
/// `timeout` of 14). A requester with a `timeout` of 2 or less (16 us or
/// less) may resend, and one of 5 or less when no verb follows and the
/// progress thread sends them (architecture.md, "Threading and progress").
pub(crate) const KEEP_AT_MOST: Nanos = 20_000;

/// WRITEs answered in a row, each by a post of sends within
/// [`KEEP_AT_MOST`], after which the progress thread keeps the ACK of a
/// WRITE it takes in: two, so that one answer, which may be chance, is
/// not enough.
const ANSWERED_IN_A_ROW: u32 = 2;

/// Whether the application answers each WRITE it is sent with a post of
/// its own before the next comes, as `ib_write_lat` does. The progress
/// thread takes such a WRITE in when it wins the race with the
/// application's poll (which it does while the socket is not lent): then
/// it too keeps the ACK for the answer, else the ACK leaves alone and the
/// answer after it, which the peer's poll then misses.
#[derive(Debug, Default)]
pub(crate) struct WriteAnswers {
    /// When the end of a WRITE was last taken in, while not yet answered.
    unanswered: Option<Nanos>,
    /// WRITEs answered in a row, up to [`ANSWERED_IN_A_ROW`].
    answered: u32,
}

impl WriteAnswers {
    /// The end of a WRITE was taken in at `now`.
    pub(crate) fn took_write(&mut self, now: Nanos) {
        if self.unanswered.is_some() {
            self.answered = 0; // two WRITEs in, no post between
        }
        self.unanswered = Some(now);
    }

    /// Sends were posted at `now`: an answer if within `at_most` of the
    /// WRITE ([`KEEP_AT_MOST`], stretched where polls cost more).
    pub(crate) fn posted(&mut self, now: Nanos, at_most: Nanos) {
        if let Some(at) = self.unanswered.take() {
            self.answered = match now.saturating_sub(at) < at_most {
                true => (self.answered + 1).min(ANSWERED_IN_A_ROW),
                false => 0,
            };
        }
    }

    /// Whether the WRITEs taken in lately were each answered at once.
    pub(crate) fn answering(&self) -> bool {
        self.answered >= ANSWERED_IN_A_ROW
    }

    /// Whether, the application answering, a WRITE taken in waits for its
    /// answer: its ACK, which the progress thread kept if it took the
    /// WRITE in, is for the answer to carry.
    pub(crate) fn answer_awaited(&self) -> bool {
        self.answering() && self.unanswered.is_some()
    }
}

/// A verb, as far as keeping goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    /// A poll of a CQ that handed over `taken` completions, having taken
    /// in the end of a WRITE, or while one the application answers waits
    /// for the answer (`write_to_answer`; `WriteAnswers::answer_awaited`).
    /// The completion handed over then most often came with the WRITE
    /// (the ACK of the application's last one, riding with it), taken in
    /// by the progress thread, which kept the WRITE's ACK for the answer:
    /// sent by this poll, the ACK left alone and the answer after it, in
    /// a datagram of its own, which a peer spinning on memory, its socket
    /// lent, took in only at its progress thread's next look (1 ms;
    /// docs/perf-profile.md).
    Poll { taken: usize, write_to_answer: bool },
    /// A receive posted.
    PostRecv,
    /// Sends posted.
    PostSend,
    /// Any other.
    Other,
}

/// After `verb`, run at `now` while the socket is `lent` or not, with
/// packets kept since `kept` (None: nothing kept) and kept for at most
/// `at_most` ([`KEEP_AT_MOST`], stretched where polls cost more): since
/// when packets are kept (None: send them now).
pub(crate) fn kept_after(
    verb: Verb,
    lent: bool,
    kept: Option<Nanos>,
    now: Nanos,
    at_most: Nanos,
) -> Option<Nanos> {
    let young = kept.is_none_or(|since| now.saturating_sub(since) < at_most);
    let keep = young
        && match verb {
            Verb::Poll {
                taken,
                write_to_answer,
            } => taken > 0 && (lent || write_to_answer),
            Verb::PostRecv => lent && kept.is_some(),
            Verb::PostSend | Verb::Other => false,
        };
    keep.then(|| kept.unwrap_or(now))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A poll that handed over `taken` completions and took no WRITE in.
    fn poll(taken: usize) -> Verb {
        Verb::Poll {
            taken,
            write_to_answer: false,
        }
    }

    #[test]
    fn a_poll_that_hands_over_completions_keeps_only_while_lent() {
        assert_eq!(
            kept_after(poll(1), true, None, 100, KEEP_AT_MOST),
            Some(100)
        );
        assert_eq!(kept_after(poll(1), false, None, 100, KEEP_AT_MOST), None);
        assert_eq!(kept_after(poll(0), true, None, 100, KEEP_AT_MOST), None);
    }

    #[test]
    fn the_send_cq_polled_and_a_receive_posted_go_on_keeping_then_the_reply_sends() {
        let kept = kept_after(poll(1), true, None, 1_000, KEEP_AT_MOST);
        let kept = kept_after(Verb::PostRecv, true, kept, 1_300, KEEP_AT_MOST);
        let kept = kept_after(poll(1), true, kept, 1_600, KEEP_AT_MOST);
        assert_eq!(kept, Some(1_000), "kept since the first poll");
        assert_eq!(
            kept_after(Verb::PostSend, true, kept, 1_900, KEEP_AT_MOST),
            None
        );
    }

    #[test]
    fn a_poll_that_finds_nothing_or_another_verb_sends() {
        assert_eq!(
            kept_after(poll(0), true, Some(1_000), 1_100, KEEP_AT_MOST),
            None
        );
        assert_eq!(
            kept_after(Verb::Other, true, Some(1_000), 1_100, KEEP_AT_MOST),
            None
        );
    }

    #[test]
    fn a_receive_posted_keeps_nothing_new() {
        assert_eq!(
            kept_after(Verb::PostRecv, true, None, 1_000, KEEP_AT_MOST),
            None
        );
    }

    #[test]
    fn polls_that_always_find_completions_send_after_keep_at_most() {
        let mut kept = None;
        let mut now = 1_000;
        while now < 1_000 + KEEP_AT_MOST {
            kept = kept_after(poll(4), true, kept, now, KEEP_AT_MOST);
            assert_eq!(kept, Some(1_000));
            now += 1_000;
        }
        assert_eq!(kept_after(poll(4), true, kept, now, KEEP_AT_MOST), None);
    }

    #[test]
    fn a_poll_that_took_in_a_write_with_its_completion_keeps_lent_or_not() {
        let took_write = |taken| Verb::Poll {
            taken,
            write_to_answer: true,
        };
        assert_eq!(
            kept_after(took_write(1), false, None, 1_000, KEEP_AT_MOST),
            Some(1_000)
        );
        assert_eq!(
            kept_after(took_write(0), false, None, 1_000, KEEP_AT_MOST),
            None
        );
        assert_eq!(
            kept_after(
                took_write(1),
                false,
                Some(1_000),
                1_000 + KEEP_AT_MOST,
                KEEP_AT_MOST
            ),
            None,
            "not once KEEP_AT_MOST old"
        );
        assert_eq!(
            kept_after(Verb::PostRecv, false, Some(1_000), 1_100, KEEP_AT_MOST),
            None
        );
    }

    #[test]
    fn writes_answered_at_once_twice_in_a_row_count_as_answering() {
        let mut w = WriteAnswers::default();
        w.took_write(1_000);
        w.posted(2_000, KEEP_AT_MOST);
        assert!(!w.answering(), "once may be chance");
        w.took_write(10_000);
        w.posted(11_000, KEEP_AT_MOST);
        assert!(w.answering());
        w.posted(12_000, KEEP_AT_MOST);
        assert!(w.answering(), "a post with no WRITE to answer");
    }

    /// Only an application that answers awaits an answer, and only from
    /// a WRITE taken in to its answer.
    #[test]
    fn an_answer_is_awaited_from_the_write_to_the_post() {
        let mut w = WriteAnswers::default();
        w.took_write(1_000);
        assert!(!w.answer_awaited(), "not answering yet");
        w.posted(2_000, KEEP_AT_MOST);
        w.took_write(10_000);
        w.posted(11_000, KEEP_AT_MOST);
        assert!(!w.answer_awaited(), "answered");
        w.took_write(20_000);
        assert!(w.answer_awaited());
        w.posted(21_000, KEEP_AT_MOST);
        assert!(!w.answer_awaited());
    }

    #[test]
    fn a_write_left_unanswered_or_answered_late_stops_the_answering() {
        let mut w = WriteAnswers::default();
        for at in [1_000, 10_000] {
            w.took_write(at);
            w.posted(at + 1_000, KEEP_AT_MOST);
        }
        w.took_write(20_000);
        w.took_write(21_000);
        assert!(!w.answering(), "two WRITEs in, no post between");
        for at in [30_000, 40_000] {
            w.took_write(at);
            w.posted(at + 1_000, KEEP_AT_MOST);
        }
        w.took_write(50_000);
        w.posted(50_000 + KEEP_AT_MOST, KEEP_AT_MOST);
        assert!(!w.answering(), "answered late");
    }

    /// Where polls cost more, the windows the driver passes are longer:
    /// what the native window would send, a stretched one still keeps,
    /// up to its own end; an answer as late counts as at once.
    #[test]
    fn stretched_windows_keep_and_count_answers_for_longer() {
        let stretched = 30 * KEEP_AT_MOST;
        let late = 1_000 + 2 * KEEP_AT_MOST;
        assert_eq!(
            kept_after(poll(1), true, Some(1_000), late, KEEP_AT_MOST),
            None
        );
        assert_eq!(
            kept_after(poll(1), true, Some(1_000), late, stretched),
            Some(1_000)
        );
        let end = 1_000 + stretched;
        assert_eq!(kept_after(poll(1), true, Some(1_000), end, stretched), None);
        let mut w = WriteAnswers::default();
        for at in [1_000, 1_000_000] {
            w.took_write(at);
            w.posted(at + 2 * KEEP_AT_MOST, stretched);
        }
        assert!(w.answering());
    }

    #[test]
    fn the_socket_taken_back_sends() {
        assert_eq!(
            kept_after(poll(1), false, Some(1_000), 1_100, KEEP_AT_MOST),
            None
        );
        assert_eq!(
            kept_after(Verb::PostRecv, false, Some(1_000), 1_100, KEEP_AT_MOST),
            None
        );
    }
}
