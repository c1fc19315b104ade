//! Giving the kernel back the pages of a published table that hold no
//! entry.
//!
//! A region is a sparse memfd: a page costs memory once touched. The MR
//! and QP tables are open-addressed by random MR keys and ever-new QP
//! numbers, so a program that registers and deregisters, or creates and
//! destroys, touched page after page, and a withdrawn entry's page stayed
//! resident: some 33 MB per table after long churn. After a withdrawal
//! the owner punches out of the memfd (`fallocate`, PUNCH_HOLE) each page
//! around the slots it read or changed whose every slot is empty (no
//! entry, no tombstone); the page reads as zeros from then on, for the
//! owner and for every peer that maps the region, until a write needs it
//! again.
//!
//! Why a punch is safe under the readers: a page is punched only when all
//! its slots are empty, and only the owner, which is punching, can fill
//! one. An empty slot read as zeros is still empty (tag 0); a reader
//! racing the punch sees its sequence word change (to zero), or reads a
//! zero sequence word and takes the entry for empty (`seqlock.rs`, where
//! sequence values come from a table-wide clock so that none recurs after
//! a punch). A peer's compare-and-swap of a QP's state word names a live
//! word, which an empty slot never holds, punched or not.

use std::ops::Range;
use std::os::fd::AsFd;

use rustix::fs::{fallocate, FallocateFlags};

use super::probing::read_around;

/// What a withdrawal from a published table did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Withdrawal {
    /// Whether the entry was published.
    pub found: bool,
    /// The pages of the region (byte ranges) that hold no entry around
    /// the slots the withdrawal read or changed, for the owner to punch.
    pub vacant: Vec<Range<u64>>,
}

impl Withdrawal {
    /// A withdrawal that found nothing: its probe read the slots up to
    /// `ended_at` (an empty one, if it ended at one), whose page a punch
    /// may have left a hole that the read filled again.
    pub(crate) fn missed(
        area: SlotArea,
        ended_at: Option<usize>,
        is_empty: impl Fn(usize) -> bool,
    ) -> Withdrawal {
        Withdrawal {
            found: false,
            vacant: area.vacant_pages(ended_at, page_size(), is_empty),
        }
    }

    /// The withdrawal of `slot`, which cleared `run`
    /// ([`clearable_run`](super::probing::clearable_run)'s, which read the
    /// slots on either side of it too).
    pub(crate) fn cleared(
        area: SlotArea,
        slot: usize,
        run: Vec<usize>,
        is_empty: impl Fn(usize) -> bool,
    ) -> Withdrawal {
        let around = read_around(slot, &run, area.slots);
        let touched = run.into_iter().chain(around);
        Withdrawal {
            found: true,
            vacant: area.vacant_pages(touched, page_size(), is_empty),
        }
    }
}

/// Where a table's slots lie in the region, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlotArea {
    /// Offset of slot 0 from the start of the region.
    pub(crate) start: u64,
    /// Bytes per slot.
    pub(crate) stride: u64,
    /// Number of slots.
    pub(crate) slots: usize,
}

impl SlotArea {
    /// The slots of a table part `at` bytes into the region, after a
    /// header of `header` words, `stride` words each.
    pub(crate) fn of_table(at: u64, header: usize, stride: usize, slots: usize) -> SlotArea {
        SlotArea {
            start: at + (header * 8) as u64,
            stride: (stride * 8) as u64,
            slots,
        }
    }

    /// The pages of `page` bytes that hold any of the `touched` slots, lie
    /// wholly among the slots (the table's header is never punched), and
    /// of whose slots `is_empty` says each is empty: as byte ranges of the
    /// region, in order, each once. None where a slot could straddle two
    /// pages: its emptiness would be read from the neighbouring page,
    /// which the read would bring back if it was a hole.
    pub(crate) fn vacant_pages(
        &self,
        touched: impl IntoIterator<Item = usize>,
        page: u64,
        is_empty: impl Fn(usize) -> bool,
    ) -> Vec<Range<u64>> {
        let Some(end) = (self.slots as u64)
            .checked_mul(self.stride)
            .and_then(|bytes| bytes.checked_add(self.start))
        else {
            return Vec::new();
        };
        if self.stride == 0
            || page == 0
            || !self.start.is_multiple_of(self.stride)
            || !page.is_multiple_of(self.stride)
        {
            return Vec::new();
        }
        let mut pages: Vec<u64> = touched
            .into_iter()
            .filter(|&slot| slot < self.slots)
            .flat_map(|slot| {
                let first = self.start + slot as u64 * self.stride;
                let last = first + self.stride - 1;
                first / page..=last / page
            })
            .collect();
        pages.sort_unstable();
        pages.dedup();
        pages
            .into_iter()
            .map(|p| p * page..(p + 1) * page)
            .filter(|bytes| bytes.start >= self.start && bytes.end <= end)
            .filter(|bytes| {
                let first = (bytes.start - self.start) / self.stride;
                let last = (bytes.end - self.start) / self.stride;
                (first..last).all(|slot| is_empty(slot as usize))
            })
            .collect()
    }
}

/// Punches `pages` (byte ranges of the region) out of the region's memfd
/// `fd`, keeping its size. Best effort: a page the kernel keeps is only
/// memory not given back.
pub(crate) fn punch(fd: impl AsFd, pages: &[Range<u64>]) {
    let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
    for bytes in pages {
        let _ = fallocate(fd.as_fd(), flags, bytes.start, bytes.end - bytes.start);
    }
}

/// The size of the pages to punch: the kernel's.
pub(crate) fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 64-byte slots from byte 192: page 0 holds the header and slots
    /// 0..=60, page 1 slots 61..=124, page 2 slots 125..=188.
    const AREA: SlotArea = SlotArea {
        start: 192,
        stride: 64,
        slots: 1024,
    };

    #[test]
    fn only_pages_wholly_among_empty_slots_are_vacant() {
        let all_empty = |_| true;
        assert_eq!(AREA.vacant_pages([3], 4096, all_empty), vec![]);
        assert_eq!(AREA.vacant_pages([70], 4096, all_empty), vec![4096..8192]);
        assert_eq!(
            AREA.vacant_pages([70, 61, 130], 4096, all_empty),
            vec![4096..8192, 8192..12288]
        );
        // One slot in use anywhere on the page keeps it.
        assert_eq!(AREA.vacant_pages([70], 4096, |s| s != 124), vec![]);
        assert_eq!(AREA.vacant_pages([70], 4096, |s| s != 61), vec![]);
        assert_eq!(
            AREA.vacant_pages([70], 4096, |s| s != 125),
            vec![4096..8192]
        );
    }

    #[test]
    fn the_last_page_must_end_within_the_slots() {
        let area = SlotArea {
            start: 4096,
            stride: 64,
            slots: 100,
        };
        // 100 slots of 64 bytes end at 4096 + 6400: page 1 only.
        assert_eq!(area.vacant_pages([0, 99], 4096, |_| true), vec![4096..8192]);
        assert_eq!(area.vacant_pages([100, 5000], 4096, |_| true), vec![]);
    }

    /// A slot across two pages would be read from both.
    #[test]
    fn slots_that_could_straddle_pages_give_no_page() {
        let odd_start = SlotArea {
            start: 4096 + 32,
            stride: 64,
            slots: 1000,
        };
        assert_eq!(odd_start.vacant_pages([100], 4096, |_| true), vec![]);
        let odd_stride = SlotArea {
            start: 4096,
            stride: 72,
            slots: 1000,
        };
        assert_eq!(odd_stride.vacant_pages([100], 4096, |_| true), vec![]);
    }

    #[test]
    fn a_punched_page_reads_zeros_and_keeps_the_file_size() {
        use std::io::{Read, Seek, SeekFrom, Write};
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&[7u8; 3 * 4096]).unwrap();
        let middle = 4096..8192;
        punch(&file, std::slice::from_ref(&middle));
        let mut back = Vec::new();
        file.seek(SeekFrom::Start(0)).unwrap();
        file.read_to_end(&mut back).unwrap();
        assert_eq!(back.len(), 3 * 4096);
        assert!(back[..4096].iter().all(|&b| b == 7));
        assert!(back[4096..8192].iter().all(|&b| b == 0));
        assert!(back[8192..].iter().all(|&b| b == 7));
    }
}
