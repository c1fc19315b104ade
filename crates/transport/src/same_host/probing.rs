//! Linear probing shared by the published MR and QP tables.
//!
//! Both tables are open-addressed by a 32-bit key with tombstones, sized
//! to a power of two at least twice their capacity so probe chains stay
//! short. Entries never move once published (a reader racing the owner
//! would otherwise miss a live key), so withdrawn entries become
//! tombstones, and a tombstone turns back into an empty slot only where
//! no probe chain can run through it (see [`clearable_run`]).

/// Slots of a table that holds at most `capacity` live entries: a power
/// of two, at least twice the capacity and at least two. `None` if that
/// does not fit in a `usize`.
pub fn table_slots(capacity: usize) -> Option<usize> {
    capacity.checked_mul(2)?.max(2).checked_next_power_of_two()
}

/// The slots a key's probe visits, in order: every slot once, starting at
/// the key's home. `slots` must be a power of two (the tables ensure it).
pub fn probe(key: u32, slots: usize) -> impl Iterator<Item = usize> {
    let mask = slots.wrapping_sub(1);
    // Fibonacci hashing: keys are often consecutive (QPNs, MR keys), and
    // the high bits of the product spread them over the table.
    let home = (u64::from(key).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize;
    (0..slots).map(move |step| home.wrapping_add(step) & mask)
}

/// Given that slot `slot` is being withdrawn, the slots that can become
/// empty instead of tombstones: `slot` itself and the tombstones just
/// before it, provided the slot after it is empty (then no probe chain
/// continues past `slot`, and none can need it or the tombstones before
/// it). Returns them from `slot` backwards; empty when the next slot is
/// in use. `is_empty`/`is_tombstone` read the table's tags.
pub fn clearable_run(
    slot: usize,
    slots: usize,
    is_empty: impl Fn(usize) -> bool,
    is_tombstone: impl Fn(usize) -> bool,
) -> Vec<usize> {
    let mask = slots.wrapping_sub(1);
    if !is_empty(slot.wrapping_add(1) & mask) {
        return Vec::new();
    }
    let mut run = vec![slot];
    let mut at = slot;
    while run.len() < slots {
        at = at.wrapping_sub(1) & mask;
        if at == slot || !is_tombstone(at) {
            break;
        }
        run.push(at);
    }
    run
}

/// The slots [`clearable_run`] read besides the `run` it gave for `slot`:
/// the one after `slot`, and the one before the run (where its walk back
/// stopped; `slot`'s own when the run is empty, read as `slot` was).
pub fn read_around(slot: usize, run: &[usize], slots: usize) -> [usize; 2] {
    let mask = slots.wrapping_sub(1);
    [slot.wrapping_add(1), slot.wrapping_sub(run.len())].map(|s| s & mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_powers_of_two_at_least_twice_the_capacity() {
        assert_eq!(table_slots(0), Some(2));
        assert_eq!(table_slots(1), Some(2));
        assert_eq!(table_slots(3), Some(8));
        assert_eq!(table_slots(4), Some(8));
        assert_eq!(table_slots(usize::MAX), None);
    }

    #[test]
    fn a_probe_visits_every_slot_once() {
        for key in [0, 1, 77, u32::MAX] {
            let mut seen: Vec<usize> = probe(key, 16).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..16).collect::<Vec<_>>());
        }
    }

    #[test]
    fn tombstones_clear_only_before_an_empty_slot() {
        // Slots: 0 tomb, 1 tomb, 2 withdrawn, 3 empty, 4 used.
        let empty = |s: usize| s == 3;
        let tomb = |s: usize| s <= 1;
        assert_eq!(clearable_run(2, 8, empty, tomb), vec![2, 1, 0]);
        // Slot 3 withdrawn, slot 4 in use: it stays a tombstone.
        assert!(clearable_run(3, 8, |s| s == 5, |_| false).is_empty());
    }

    #[test]
    fn around_a_run_are_the_slot_after_it_and_the_one_before_the_run() {
        assert_eq!(read_around(2, &[2, 1, 0], 8), [3, 7]);
        assert_eq!(read_around(7, &[], 8), [0, 7]);
    }

    #[test]
    fn a_run_of_tombstones_wraps_around_and_stops() {
        // Slots: 0 withdrawn, 1 empty, 2 and 3 tombstones.
        let run = clearable_run(0, 4, |s| s == 1, |s| s >= 2);
        assert_eq!(run, vec![0, 3, 2]);
    }
}
