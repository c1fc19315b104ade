//! Checked access to registered memory: rkey checks for remote requests,
//! and scatter/gather over SGE lists. Every byte the engine reads or writes
//! goes through here, after the MR's key, PD, bounds and access rights were
//! checked, so nothing reaches memory outside a registered region whatever
//! arrives from the network.

use crate::access::AccessFlags;
use crate::direct::Seg;
use crate::error::VerbsResult;
use crate::handles::{MrId, PdId};
use crate::memory::HostMemory;
use crate::objects::{range_inside, Mr};
use crate::wr::Sge;
use rustc_hash::FxHashMap;
use slotmap::SlotMap;
use smallvec::SmallVec;

/// The registered MRs, found by handle or by key.
#[derive(Debug, Default)]
pub(crate) struct MrTable {
    mrs: SlotMap<MrId, Mr>,
    /// The key of every registered MR.
    /// Keys to MRs, looked up for every packet and SGE: Fx hashing (the
    /// keys are ours; a peer only chooses what it looks up).
    by_key: FxHashMap<u32, MrId>,
}

/// Why a remote access was refused; each maps to a NAK code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RemoteAccessError {
    /// Unknown rkey, other PD, outside the MR, or rights missing.
    Access,
}

/// Why a local SGE list could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LocalAccessError {
    /// An lkey no longer names a usable MR (IBV_WC_LOC_PROT_ERR).
    Protection,
    /// The data does not fit in the SGEs (IBV_WC_LOC_LEN_ERR).
    Length,
}

impl MrTable {
    pub(crate) fn len(&self) -> usize {
        self.mrs.len()
    }

    /// Whether `key` belongs to a registered MR.
    pub(crate) fn key_in_use(&self, key: u32) -> bool {
        self.by_key.contains_key(&key)
    }

    /// Registers `mr`; ENOMEM if the tables find no room (`room.rs`).
    pub(crate) fn insert(&mut self, mr: Mr) -> VerbsResult<MrId> {
        crate::room::slot(&mut self.mrs)?;
        crate::room::entry(&mut self.by_key)?;
        let key = mr.key;
        let id = self.mrs.insert(mr);
        self.by_key.insert(key, id);
        Ok(id)
    }

    pub(crate) fn remove(&mut self, id: MrId) -> Option<Mr> {
        let mr = self.mrs.remove(id)?;
        self.by_key.remove(&mr.key);
        Some(mr)
    }

    pub(crate) fn get(&self, id: MrId) -> Option<&Mr> {
        self.mrs.get(id)
    }

    pub(crate) fn get_mut(&mut self, id: MrId) -> Option<&mut Mr> {
        self.mrs.get_mut(id)
    }

    /// The MR whose lkey/rkey is `key`.
    pub(crate) fn by_key(&self, key: u32) -> Option<(MrId, &Mr)> {
        let id = *self.by_key.get(&key)?;
        Some((id, &self.mrs[id]))
    }

    /// Whether `key` may be invalidated (SEND_WITH_INV, LOCAL_INV). Only a
    /// fast-register MR or a bound memory window can be (IBTA 10.6.6;
    /// rxe `rxe_invalidate_mr` refuses every other region), and softverbs
    /// offers neither: every MR comes from `ibv_reg_mr`, so no key can.
    pub(crate) fn invalidatable(&self, _key: u32) -> bool {
        false
    }

    /// Translates a remote `[va, va+len)` under `rkey` into a local address,
    /// checking the MR's PD, bounds (in its iova space) and `need` rights.
    pub(crate) fn remote_addr(
        &self,
        pd: PdId,
        rkey: u32,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<u64, RemoteAccessError> {
        remote_addr(self, pd, rkey, va, len, need)
    }

    /// Whether `[addr, addr+len)` (local addresses) is still inside the
    /// live MR `rkey` of `pd` with REMOTE_READ; a zero length always is.
    pub(crate) fn still_readable(&self, pd: PdId, rkey: u32, addr: u64, len: u64) -> bool {
        len == 0
            || self.by_key(rkey).is_some_and(|(_, mr)| {
                mr.pd == pd
                    && mr.access.contains(AccessFlags::REMOTE_READ)
                    && mr.contains_local(addr, len)
            })
    }

    /// Copies `out.len()` bytes starting `offset` bytes into the data the
    /// SGE list describes, calling `landed` with each piece once copied.
    pub(crate) fn gather(
        &self,
        mem: &dyn HostMemory,
        pd: PdId,
        sges: &[Sge],
        offset: u64,
        out: &mut [u8],
        landed: &mut dyn FnMut(&[u8]),
    ) -> Result<(), LocalAccessError> {
        let pieces = gather_plan(
            self,
            pd,
            sges,
            offset,
            out.len() as u64,
            AccessFlags::empty(),
        )?;
        let mut done = 0;
        for piece in pieces {
            let take = piece.len as usize;
            let piece_out = &mut out[done..done + take];
            mem.read(piece.addr, piece_out)
                .map_err(|_| LocalAccessError::Protection)?;
            landed(piece_out);
            done += take;
        }
        Ok(())
    }

    /// Writes `data` starting `offset` bytes into the buffer the SGE list
    /// describes; the SGEs need LOCAL_WRITE.
    pub(crate) fn scatter(
        &self,
        mem: &mut dyn HostMemory,
        pd: PdId,
        sges: &[Sge],
        offset: u64,
        data: &[u8],
    ) -> Result<(), LocalAccessError> {
        self.scatter_parts(mem, pd, sges, offset, &[data])
    }

    /// [`MrTable::scatter`] of `parts` one after the other, as one buffer
    /// (a UD datagram's GRH, then its payload), with one look at the SGEs.
    pub(crate) fn scatter_parts(
        &self,
        mem: &mut dyn HostMemory,
        pd: PdId,
        sges: &[Sge],
        offset: u64,
        parts: &[&[u8]],
    ) -> Result<(), LocalAccessError> {
        let len = parts.iter().map(|p| p.len() as u64).sum();
        let pieces = scatter_plan(self, pd, sges, offset, len)?;
        let mut rest = parts.iter().copied().filter(|p| !p.is_empty());
        let mut part: &[u8] = &[];
        for piece in pieces {
            // A piece may take the end of one part and the start of the
            // next.
            let (mut addr, mut left) = (piece.addr, piece.len as usize);
            while left > 0 {
                if part.is_empty() {
                    part = rest.next().ok_or(LocalAccessError::Length)?;
                }
                let (now, later) = part.split_at(left.min(part.len()));
                // A fault part-way leaves the earlier pieces written, as a
                // NIC's DMA does before it meets a translation fault.
                mem.write(addr, now)
                    .map_err(|_| LocalAccessError::Protection)?;
                addr = addr.wrapping_add(now.len() as u64);
                left -= now.len();
                part = later;
            }
        }
        Ok(())
    }
}

impl MrLookup for MrTable {
    fn mr(&self, key: u32) -> Option<Mr> {
        self.by_key(key).map(|(_, mr)| mr.clone())
    }
}

/// Where the access rules find MRs by key: this context's table, or the
/// table a context on the same host published (`crate::direct`). The
/// rules below are written once against it.
pub trait MrLookup {
    /// The MR whose lkey/rkey is `key`.
    fn mr(&self, key: u32) -> Option<Mr>;
}

/// Translates a remote `[va, va+len)` under `rkey` into a local address,
/// checking the MR's PD, bounds (in its iova space) and `need` rights.
pub(crate) fn remote_addr(
    mrs: &(impl MrLookup + ?Sized),
    pd: PdId,
    rkey: u32,
    va: u64,
    len: u64,
    need: AccessFlags,
) -> Result<u64, RemoteAccessError> {
    let mr = mrs.mr(rkey).ok_or(RemoteAccessError::Access)?;
    let ok = mr.pd == pd && mr.access.contains(need) && range_inside(va, len, mr.iova, mr.length);
    if !ok {
        return Err(RemoteAccessError::Access);
    }
    Ok(mr.addr + (va - mr.iova))
}

/// Where the `len` bytes at `addr` of `sge` are, if they are inside the
/// live MR of `pd` its lkey names, with `need` rights: what to add
/// (wrapping) to an address of the SGE's for the process's. Only the
/// bytes an operation moves are checked, not the whole SGE, as rxe's
/// `copy_data` checks each piece it copies: a receive WR may be longer
/// than its MR where the message that fills it is not, and an atomic's
/// result SGE longer than the 8 bytes it gets. An lkey names its MR in
/// the MR's iova space, as an rkey does (`ibv_reg_mr_iova`; the kernel's
/// providers check and translate local and remote accesses alike); for
/// an MR registered without an iova the two spaces are one. No bytes
/// name no memory.
pub(crate) fn local_sge_shift(
    mrs: &(impl MrLookup + ?Sized),
    pd: PdId,
    sge: &Sge,
    (addr, len): (u64, u64),
    need: AccessFlags,
) -> Option<u64> {
    if len == 0 {
        return Some(0);
    }
    let mr = mrs.mr(sge.lkey)?;
    let ok = mr.pd == pd && mr.access.contains(need) && range_inside(addr, len, mr.iova, mr.length);
    ok.then(|| mr.addr.wrapping_sub(mr.iova))
}

/// The address ranges of a gather or scatter, in order: one per SGE
/// touched, the common few inline (no allocation per packet).
pub type SegPlan = SmallVec<[Seg; 4]>;

/// The address ranges that `len` bytes written `offset` bytes into the
/// buffer an SGE list describes land in, after checking that the list is
/// long enough (Length) and the part of every SGE they land in is inside
/// a live MR of `pd` with LOCAL_WRITE (Protection).
pub(crate) fn scatter_plan(
    mrs: &(impl MrLookup + ?Sized),
    pd: PdId,
    sges: &[Sge],
    offset: u64,
    len: u64,
) -> Result<SegPlan, LocalAccessError> {
    // One pass; a short list is a Length error even where an SGE it
    // touches is unusable too.
    let mut plan = SegPlan::new();
    let mut writable = true;
    let mut covered = 0;
    for (sge, addr, take) in sge_pieces(sges, offset, len as usize) {
        let piece = (addr, take as u64);
        let shift = local_sge_shift(mrs, pd, sge, piece, AccessFlags::LOCAL_WRITE);
        writable = writable && shift.is_some();
        plan.push(Seg {
            addr: addr.wrapping_add(shift.unwrap_or(0)),
            len: take as u64,
        });
        covered += take as u64;
    }
    if covered != len {
        return Err(LocalAccessError::Length);
    }
    if !writable {
        return Err(LocalAccessError::Protection);
    }
    Ok(plan)
}

/// The address ranges of `len` bytes `offset` bytes into an SGE list,
/// after checking that the part of every SGE they take is inside a live
/// MR of `pd` with `need` rights (Protection) and that the list holds
/// them (Length).
pub(crate) fn gather_plan(
    mrs: &(impl MrLookup + ?Sized),
    pd: PdId,
    sges: &[Sge],
    offset: u64,
    len: u64,
    need: AccessFlags,
) -> Result<SegPlan, LocalAccessError> {
    let mut out = SegPlan::new();
    let mut covered = 0;
    for (sge, addr, take) in sge_pieces(sges, offset, len as usize) {
        let shift = local_sge_shift(mrs, pd, sge, (addr, take as u64), need)
            .ok_or(LocalAccessError::Protection)?;
        out.push(Seg {
            addr: addr.wrapping_add(shift),
            len: take as u64,
        });
        covered += take as u64;
    }
    if covered == len {
        Ok(out)
    } else {
        Err(LocalAccessError::Length)
    }
}

/// Total bytes an SGE list describes.
pub(crate) fn sge_total(sges: &[Sge]) -> u64 {
    sges.iter().map(|s| u64::from(s.length)).sum()
}

/// The (SGE, address, length) pieces covering `len` bytes from `offset`
/// into an SGE list; shorter than `len` in total if the list is too short.
pub(crate) fn sge_pieces(
    sges: &[Sge],
    offset: u64,
    len: usize,
) -> impl Iterator<Item = (&Sge, u64, usize)> + '_ {
    let mut skip = offset;
    let mut left = len as u64;
    sges.iter().filter_map(move |sge| {
        let sge_len = u64::from(sge.length);
        if skip >= sge_len {
            skip -= sge_len;
            return None;
        }
        if left == 0 {
            return None;
        }
        let take = (sge_len - skip).min(left);
        let addr = sge.addr + skip;
        skip = 0;
        left -= take;
        Some((sge, addr, take as usize))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_skip_offset_and_span_sges() {
        let sges = [
            Sge {
                addr: 100,
                length: 4,
                lkey: 1,
            },
            Sge {
                addr: 200,
                length: 0,
                lkey: 1,
            },
            Sge {
                addr: 300,
                length: 8,
                lkey: 1,
            },
        ];
        let p: Vec<_> = sge_pieces(&sges, 2, 6).map(|p| (p.1, p.2)).collect();
        assert_eq!(p, [(102, 2), (300, 4)]);
        let p: Vec<_> = sge_pieces(&sges, 5, 100).map(|p| (p.1, p.2)).collect();
        assert_eq!(p, [(301, 7)]);
        assert_eq!(sge_pieces(&sges, 12, 1).count(), 0);
        assert_eq!(sge_total(&sges), 12);
    }

    /// Parts land one after the other across the SGEs' pieces, a piece
    /// taking the end of one part and the start of the next; empty parts
    /// and SGEs take nothing.
    #[test]
    fn parts_scatter_as_one_buffer() {
        use crate::memory::FlatMemory;
        let mut t = MrTable::default();
        let mr = Mr {
            pd: PdId::default(),
            addr: 0x1000,
            length: 64,
            iova: 0x1000,
            access: AccessFlags::LOCAL_WRITE,
            key: 9,
        };
        t.insert(mr).unwrap();
        let sge = |addr, length| Sge {
            addr,
            length,
            lkey: 9,
        };
        let sges = [sge(0x1000, 3), sge(0x1010, 0), sge(0x1020, 16)];
        let mut mem = FlatMemory::new(0x1000, 64);
        let parts: [&[u8]; 3] = [b"grhgr", b"", b"payload"];
        t.scatter_parts(&mut mem, PdId::default(), &sges, 1, &parts)
            .unwrap();
        let mut got = [0; 12];
        mem.read(0x1001, &mut got[..2]).unwrap();
        mem.read(0x1020, &mut got[2..]).unwrap();
        assert_eq!(&got, b"grhgrpayload");
        let too_much: [&[u8]; 2] = [&[1; 10], &[2; 10]];
        assert_eq!(
            t.scatter_parts(&mut mem, PdId::default(), &sges, 0, &too_much),
            Err(LocalAccessError::Length)
        );
    }

    #[test]
    fn an_ordinary_mr_cannot_be_invalidated() {
        let mut t = MrTable::default();
        let id = t
            .insert(Mr {
                pd: PdId::default(),
                addr: 0,
                length: 8,
                iova: 0,
                access: AccessFlags::LOCAL_WRITE,
                key: 7,
            })
            .unwrap();
        assert!(!t.invalidatable(7));
        assert!(t.by_key(7).is_some());
        assert!(t.remove(id).is_some());
        assert!(!t.key_in_use(7));
    }
}
