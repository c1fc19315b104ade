//! Room for an object's queues, taken when the object is made.
//!
//! A kernel provider allocates a QP's, SRQ's and CQ's rings when they are
//! created (rxe's `rxe_queue_init`, mlx5's `mlx5_alloc_qp_buf`) and fails
//! the creation with ENOMEM when memory is short; posting and completing
//! within the sizes it returned then never allocates. A Rust allocation
//! that fails aborts the whole process, so here the queues are reserved
//! up front, fallibly, and what a post copies beyond the few SGEs and
//! bytes of inline data a queue entry holds in place is allocated
//! fallibly too: a process under `RLIMIT_AS` or strict overcommit gets
//! ENOMEM from the verb, as from rxe, instead of an abort.

use crate::error::{enomem, VerbsResult};
use crate::wr::{InlineData, Sge, SgeList};
use slotmap::{Key, SlotMap};
use smallvec::{Array, SmallVec};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash};

/// Room for one more object in `map`, whose slots double as they fill.
pub(crate) fn slot<K: Key, V>(map: &mut SlotMap<K, V>) -> VerbsResult<()> {
    map.try_reserve(1)
        .map_err(|_| enomem("no memory for the object"))
}

/// Room for one more entry in `map`, which doubles as it fills.
pub(crate) fn entry<K: Eq + Hash, V, S: BuildHasher>(
    map: &mut HashMap<K, V, S>,
) -> VerbsResult<()> {
    map.try_reserve(1)
        .map_err(|_| enomem("no memory for the object"))
}

/// A queue with room for `n` entries.
pub(crate) fn deque<T>(n: usize) -> VerbsResult<VecDeque<T>> {
    let mut q = VecDeque::new();
    grow(&mut q, n)?;
    Ok(q)
}

/// Makes room in `q` for `n` entries in all.
pub(crate) fn grow<T>(q: &mut VecDeque<T>, n: usize) -> VerbsResult<()> {
    q.try_reserve_exact(n.saturating_sub(q.len()))
        .map_err(|_| enomem("no memory for the queue"))
}

/// A posted WR's SGEs as a queue entry holds them.
pub(crate) fn sge_list(sges: &[Sge]) -> VerbsResult<SgeList> {
    copied(sges, "no memory for the WR's SGEs")
}

/// A posted WR's inline data as a queue entry holds it.
pub(crate) fn inline_data(bytes: &[u8]) -> VerbsResult<InlineData> {
    copied(bytes, "no memory for the WR's inline data")
}

/// `items` in a list that holds the first few in place; beyond them it
/// allocates, fallibly (ENOMEM for `what`).
fn copied<A: Array>(items: &[A::Item], what: &'static str) -> VerbsResult<SmallVec<A>>
where
    A::Item: Copy,
{
    let mut list = SmallVec::new();
    list.try_reserve_exact(items.len())
        .map_err(|_| enomem(what))?;
    list.extend_from_slice(items);
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn a_queue_has_its_room_and_an_impossible_one_is_enomem() {
        let q: VecDeque<u64> = deque(100).unwrap();
        assert!(q.capacity() >= 100);
        let e = deque::<[u8; 1 << 20]>(usize::MAX >> 8).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NoMemory);
    }

    #[test]
    fn sges_and_inline_data_are_copied_whole() {
        let sges: Vec<Sge> = (0..9)
            .map(|i| Sge {
                addr: i,
                length: 1,
                lkey: 7,
            })
            .collect();
        assert_eq!(&sge_list(&sges).unwrap()[..], &sges[..]);
        assert_eq!(&inline_data(&[5; 200]).unwrap()[..], &[5; 200][..]);
    }
}
