//! A post of sends that leaves its last GSO batch part-filled keeps it
//! for the next post, as TCP's autocorking holds a small segment while
//! earlier ones are still on their way.
//!
//! A GSO send carries at most 64 KiB, so a 64 KiB message at path MTU
//! 4096 (16 packets and their headers) left in one `sendmsg` of 15 and a
//! `sendto` of the 16th, and every message of one packet (4 KiB and
//! less) in a `sendto` of its own: a system call on each side per
//! message, where the next post's packets could have joined them.
//! perftest's bandwidth tests post a hundred WRs in a row per completion.
//!
//! Only a batch that more packets could join is kept (the 15 packets
//! after a 64 KiB WRITE's first fill one: they leave at once). It is
//! kept only while answers are on their way: when it was
//! started, packets already on the wire awaited an acknowledgement or a
//! READ response, and nothing has been taken in since (which might have
//! been the last of them). Taking those answers in brings the application
//! (a poll) or the progress thread back, which sends it. Nor is one kept
//! while a CQ is armed for a completion event: its thread may sleep in
//! `ibv_get_cq_event` after the posts, and the batch then waited for the
//! progress thread, whose wake-up on a 2-CPU machine whose other CPU
//! spins took 150 us and more (docs/perf-profile.md). Any verb but a
//! post of sends sends it first, before it receives (a thread that polls
//! for the completion of what it posted is not kept waiting), and so does
//! the progress thread once its bound has passed (`KEEP_AT_MOST`,
//! `kept_packets.rs`) without a verb, or, while it has lent the socket to
//! a thread spinning on its CQs (whose next poll sends it), at its next
//! look at that thread (`receive_owner.rs`). A latency test, whose
//! previous message was answered before the next is posted, never waits.

use softverbs_engine::Nanos;

/// A batch kept part-filled for the next post.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cork {
    /// When it leaves at the latest.
    pub(crate) until: Nanos,
    /// Datagrams received when it was started (`IoStats::rx`).
    rx: u64,
}

/// What a post's step found once it had written its packets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AfterPost {
    /// The bound for a batch started now.
    pub(crate) until: Nanos,
    /// Packets left in a batch that more could join (0: none, the batch
    /// is full, as the 15 packets after a 64 KiB WRITE's first are, or
    /// it waits for room in the socket, which sends it).
    pub(crate) queued: usize,
    /// Before this step wrote any, packets awaited answers.
    pub(crate) awaited_before: bool,
    /// A CQ is armed for a completion event: the thread may sleep in
    /// `ibv_get_cq_event` next, with no verb to send the batch.
    pub(crate) cq_armed: bool,
    /// A batch left during this step: the one left part-filled is new.
    pub(crate) renewed: bool,
    /// Datagrams received so far (`IoStats::rx`).
    pub(crate) rx: u64,
    pub(crate) now: Nanos,
}

/// Whether the batch a post left part-filled waits for the next (and
/// until when), given the one kept before (`was`); None: send it now.
pub(crate) fn cork(post: AfterPost, was: Option<Cork>) -> Option<Cork> {
    if post.queued == 0 {
        return None;
    }
    match was {
        Some(kept) if !post.renewed => {
            (kept.rx == post.rx && post.now < kept.until).then_some(kept)
        }
        _ => (post.awaited_before && !post.cq_armed).then_some(Cork {
            until: post.until,
            rx: post.rx,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POST: AfterPost = AfterPost {
        until: 150,
        queued: 1,
        awaited_before: true,
        cq_armed: false,
        renewed: false,
        rx: 7,
        now: 130,
    };
    const KEPT: Cork = Cork { until: 120, rx: 7 };

    #[test]
    fn a_new_batch_waits_only_while_packets_on_the_wire_await_answers() {
        assert_eq!(cork(POST, None), Some(Cork { until: 150, rx: 7 }));
        let alone = AfterPost {
            awaited_before: false,
            ..POST
        };
        assert_eq!(cork(alone, None), None, "nothing to bring a verb back");
        let empty = AfterPost { queued: 0, ..POST };
        assert_eq!(cork(empty, None), None);
        let armed = AfterPost {
            cq_armed: true,
            ..POST
        };
        assert_eq!(cork(armed, None), None, "its thread may sleep instead");
    }

    #[test]
    fn a_batch_kept_on_keeps_its_bound_and_a_new_one_gets_its_own() {
        let early = AfterPost { now: 110, ..POST };
        assert_eq!(cork(early, Some(KEPT)), Some(KEPT));
        let renewed = AfterPost {
            renewed: true,
            ..early
        };
        assert_eq!(cork(renewed, Some(KEPT)), Some(Cork { until: 150, rx: 7 }));
    }

    #[test]
    fn a_batch_leaves_past_its_bound_or_once_anything_came_in() {
        assert_eq!(cork(POST, Some(KEPT)), None, "past its bound");
        let took_in = AfterPost {
            now: 110,
            rx: 8,
            ..POST
        };
        assert_eq!(cork(took_in, Some(KEPT)), None, "the answers may all be in");
    }
}
