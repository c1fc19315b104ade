//! PD, MR, AH and CQ verbs.

use crate::access::AccessFlags;
use crate::ah_attr::AhAttr;
use crate::cq_ring::CqRing;
use crate::engine::Engine;
use crate::error::{ebusy, einval, enomem, ensure, eopnotsupp, VerbsResult};
use crate::handles::{AhId, CqId, MrId, PdId};
use crate::objects::{Ah, Cq, Mr, Pd};
use crate::room;
use crate::wc::WorkCompletion;
use std::sync::Arc;

/// What `ibv_rereg_mr` changes (`None`: keep).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReregMr {
    /// IBV_REREG_MR_CHANGE_PD.
    pub pd: Option<PdId>,
    /// IBV_REREG_MR_CHANGE_TRANSLATION: new address and length (the
    /// remote address of the first byte becomes the new address).
    pub range: Option<(u64, u64)>,
    /// IBV_REREG_MR_CHANGE_ACCESS: raw access flags.
    pub access: Option<u32>,
}

/// Fails with ENOMEM when `count` objects already exist.
fn below_limit(count: usize, max: u32, reason: &'static str) -> VerbsResult<()> {
    ensure(count < max as usize, enomem(reason))
}

impl Engine {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self) -> VerbsResult<PdId> {
        below_limit(self.pds.len(), self.config.limits.max_pd, "max_pd reached")?;
        room::slot(&mut self.pds)?;
        Ok(self.pds.insert(Pd::default()))
    }

    /// `ibv_dealloc_pd`: EBUSY while an MR, AH, SRQ or QP uses the PD.
    pub fn dealloc_pd(&mut self, pd: PdId) -> VerbsResult<()> {
        let p = self.pds.get(pd).ok_or(einval("unknown PD"))?;
        ensure(
            !p.users.in_use(),
            ebusy("PD still has MRs, AHs, SRQs or QPs"),
        )?;
        self.pds.remove(pd);
        Ok(())
    }

    pub(crate) fn pd_mut(&mut self, pd: PdId) -> VerbsResult<&mut Pd> {
        self.pds.get_mut(pd).ok_or(einval("unknown PD"))
    }

    /// The checks of `ibv_reg_mr` that need no memory, in the kernel's
    /// order: access flags as its `ib_check_mr_access` (unknown bits
    /// EINVAL; bits in IBV_ACCESS_OPTIONAL_RANGE are hints and ignored;
    /// ON_DEMAND without ODP and the FLUSH flags without FLUSH
    /// EOPNOTSUPP; REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE
    /// EINVAL, ibv_reg_mr(3)), then the range (length 0 EINVAL, as the
    /// kernel refuses to pin nothing). An embedder checks
    /// that the memory is mapped (EFAULT) after these and before
    /// [`Engine::reg_mr`].
    pub fn check_reg_mr(&self, addr: u64, length: u64, iova: u64, access: u32) -> VerbsResult<()> {
        check_mr_access(access)?;
        check_mr_range(addr, length, iova, self.config.limits.max_mr_size)
    }

    /// `ibv_reg_mr`: registers `[addr, addr+length)`, addressed remotely
    /// from `iova`, with the checks of [`Engine::check_reg_mr`].
    pub fn reg_mr(
        &mut self,
        pd: PdId,
        addr: u64,
        length: u64,
        iova: u64,
        access: u32,
    ) -> VerbsResult<&Mr> {
        let access = check_mr_access(access)?;
        check_mr_range(addr, length, iova, self.config.limits.max_mr_size)?;
        below_limit(self.mrs.len(), self.config.limits.max_mr, "max_mr reached")?;
        self.pd_mut(pd)?;
        let mrs = &self.mrs;
        let key = self.keys.next(|k| mrs.key_in_use(k));
        let id = self.mrs.insert(Mr {
            pd,
            addr,
            length,
            iova,
            access,
            key,
        })?;
        self.pds[pd].users.get();
        self.mr_changed(key);
        Ok(self.mrs.get(id).expect("just inserted"))
    }

    /// `ibv_rereg_mr`: moves an MR to another PD, range or access, all or
    /// nothing, with the checks of `reg_mr`; its key stays the same
    /// (ibv_rereg_mr(3) allows either).
    pub fn rereg_mr(&mut self, mr: MrId, change: &ReregMr) -> VerbsResult<()> {
        let old = self.mrs.get(mr).ok_or(einval("unknown MR"))?.clone();
        // As the kernel's `ib_uverbs_rereg_mr`: no flags, nothing to do.
        ensure(
            *change != ReregMr::default(),
            einval("rereg_mr changes nothing"),
        )?;
        let access = match change.access {
            Some(raw) => check_mr_access(raw)?,
            None => old.access,
        };
        let (addr, length, iova) = change
            .range
            .map_or((old.addr, old.length, old.iova), |(a, l)| (a, l, a));
        check_mr_range(addr, length, iova, self.config.limits.max_mr_size)?;
        let pd = change.pd.unwrap_or(old.pd);
        ensure(self.pds.contains_key(pd), einval("unknown PD"))?;
        if pd != old.pd {
            self.pds[old.pd].users.put();
            self.pds[pd].users.get();
        }
        let m = self.mrs.get_mut(mr).expect("checked above");
        (m.pd, m.addr, m.length, m.iova, m.access) = (pd, addr, length, iova, access);
        let key = m.key;
        self.mr_changed(key);
        Ok(())
    }

    /// An MR by handle.
    pub fn mr(&self, mr: MrId) -> Option<&Mr> {
        self.mrs.get(mr)
    }

    /// The MR with lkey/rkey `key`.
    pub fn mr_by_key(&self, key: u32) -> Option<(MrId, &Mr)> {
        self.mrs.by_key(key)
    }

    /// `ibv_dereg_mr`.
    pub fn dereg_mr(&mut self, mr: MrId) -> VerbsResult<()> {
        let m = self.mrs.remove(mr).ok_or(einval("unknown MR"))?;
        self.pds[m.pd].users.put();
        self.mr_changed(m.key);
        Ok(())
    }

    /// `ibv_create_ah`.
    pub fn create_ah(&mut self, pd: PdId, attr: &AhAttr) -> VerbsResult<AhId> {
        ensure(self.pds.contains_key(pd), einval("unknown PD"))?;
        attr.validate(&self.config)?;
        below_limit(self.ahs.len(), self.config.limits.max_ah, "max_ah reached")?;
        room::slot(&mut self.ahs)?;
        self.pd_mut(pd)?.users.get();
        Ok(self.ahs.insert(Ah { pd, attr: *attr }))
    }

    /// The attributes an AH was created with.
    pub fn ah_attr(&self, ah: AhId) -> VerbsResult<AhAttr> {
        self.ahs.get(ah).map(|a| a.attr).ok_or(einval("unknown AH"))
    }

    /// `ibv_destroy_ah`.
    pub fn destroy_ah(&mut self, ah: AhId) -> VerbsResult<()> {
        let a = self.ahs.remove(ah).ok_or(einval("unknown AH"))?;
        self.pds[a.pd].users.put();
        Ok(())
    }

    /// `ibv_create_cq`: 1 <= cqe <= max_cqe and comp_vector below
    /// num_comp_vectors, else EINVAL (the pyverbs suite checks both).
    /// Returns the CQ and its actual size, [`actual_cqe`] of the request.
    pub fn create_cq(&mut self, cqe: u32, comp_vector: u32) -> VerbsResult<(CqId, u32)> {
        self.check_cqe(cqe)?;
        ensure(
            comp_vector < self.config.limits.num_comp_vectors,
            einval("comp_vector not below num_comp_vectors"),
        )?;
        below_limit(self.cqs.len(), self.config.limits.max_cq, "max_cq reached")?;
        let cqe = actual_cqe(cqe, self.config.limits.max_cqe);
        let cq = Cq::new(cqe, comp_vector)?;
        room::slot(&mut self.cqs)?;
        Ok((self.cqs.insert(cq), cqe))
    }

    fn check_cqe(&self, cqe: u32) -> VerbsResult<()> {
        ensure(cqe >= 1, einval("cqe is 0"))?;
        ensure(
            cqe <= self.config.limits.max_cqe,
            einval("cqe above device max_cqe"),
        )
    }

    /// `ibv_resize_cq`: the new size must be valid and hold the
    /// completions not yet polled. Returns the actual size, as
    /// [`Engine::create_cq`]'s.
    pub fn resize_cq(&mut self, cq: CqId, cqe: u32) -> VerbsResult<u32> {
        self.check_cqe(cqe)?;
        let max_cqe = self.config.limits.max_cqe;
        let c = self.cqs.get_mut(cq).ok_or(einval("unknown CQ"))?;
        ensure(
            cqe as usize >= c.entries.len(),
            einval("cqe below the number of completions in the CQ"),
        )?;
        let cqe = actual_cqe(cqe, max_cqe);
        c.entries.make_room(cqe)?;
        c.cqe = cqe;
        Ok(cqe)
    }

    /// The actual size and completion vector of a CQ.
    pub fn query_cq(&self, cq: CqId) -> VerbsResult<(u32, u32)> {
        let c = self.cqs.get(cq).ok_or(einval("unknown CQ"))?;
        Ok((c.cqe, c.comp_vector))
    }

    /// `ibv_destroy_cq`: EBUSY while a QP uses the CQ.
    pub fn destroy_cq(&mut self, cq: CqId) -> VerbsResult<()> {
        let c = self.cqs.get(cq).ok_or(einval("unknown CQ"))?;
        ensure(!c.users.in_use(), ebusy("CQ still used by a QP"))?;
        if let Some(mut c) = self.cqs.remove(cq) {
            self.comp_events.forget(&mut c);
        }
        Ok(())
    }

    /// `ibv_poll_cq`: moves up to `max` completions, oldest first, into
    /// `out`; returns how many.
    pub fn poll_cq(
        &mut self,
        cq: CqId,
        max: usize,
        out: &mut Vec<WorkCompletion>,
    ) -> VerbsResult<usize> {
        self.poll_cq_with(cq, max, |wc| out.push(wc))
    }

    /// `ibv_poll_cq` handing each completion, oldest first, to `take`
    /// (up to `max`); returns how many. A provider writes them straight
    /// into the caller's array, with no buffer in between.
    pub fn poll_cq_with(
        &mut self,
        cq: CqId,
        max: usize,
        take: impl FnMut(WorkCompletion),
    ) -> VerbsResult<usize> {
        let c = self.cqs.get(cq).ok_or(einval("unknown CQ"))?;
        Ok(c.entries.pop_with(max, take))
    }

    /// The completions of CQ `cq`, for polling them without the engine
    /// (see [`CqRing`]).
    pub fn cq_ring(&self, cq: CqId) -> VerbsResult<Arc<CqRing>> {
        let c = self.cqs.get(cq).ok_or(einval("unknown CQ"))?;
        Ok(c.entries.clone())
    }
}

/// MR access rules; returns the flags to store (hints dropped).
fn check_mr_access(raw: u32) -> VerbsResult<AccessFlags> {
    let known = AccessFlags::all().bits() | AccessFlags::OPTIONAL_RANGE;
    ensure(raw & !known == 0, einval("unknown access flag bits"))?;
    let access = AccessFlags::from_bits_truncate(raw);
    ensure(
        !access.contains(AccessFlags::ON_DEMAND),
        eopnotsupp("on-demand paging is not supported"),
    )?;
    // The kernel's answer for a flush access the device lacks.
    ensure(
        !access.intersects(AccessFlags::FLUSH_GLOBAL | AccessFlags::FLUSH_PERSISTENT),
        eopnotsupp("FLUSH (and its MR access flags) is not supported"),
    )?;
    ensure(
        !access.intersects(AccessFlags::NEED_LOCAL_WRITE)
            || access.contains(AccessFlags::LOCAL_WRITE),
        einval("REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE"),
    )?;
    Ok(access)
}

/// The page within which an MR's address and iova must agree: the
/// kernel compares them within its `PAGE_SIZE`, 4 KiB on x86-64.
const MR_PAGE: u64 = 4096;

/// The range rules of `ibv_reg_mr` and `ibv_rereg_mr`.
fn check_mr_range(addr: u64, length: u64, iova: u64, max_mr_size: u64) -> VerbsResult<()> {
    ensure(length > 0, einval("MR of length 0"))?;
    ensure(
        addr.checked_add(length).is_some() && iova.checked_add(length).is_some(),
        einval("MR range wraps around the address space"),
    )?;
    // As the kernel's `ib_uverbs_reg_mr`, before any provider sees it:
    // an iova maps pages, so its offset within one is the address's.
    ensure(
        (addr ^ iova).is_multiple_of(MR_PAGE),
        einval("MR iova at another offset within its page than the address"),
    )?;
    ensure(length <= max_mr_size, einval("MR length above max_mr_size"))
}

/// The size of a CQ asked for `cqe` entries: one less than the power of
/// two above `cqe` (2 gives 3, 4 gives 7), as rxe's and mlx5's providers
/// size their rings, so a program that asked for too few entries and
/// worked on them keeps the same room here; at most `max_cqe`.
pub(crate) fn actual_cqe(cqe: u32, max_cqe: u32) -> u32 {
    let slots = u64::from(cqe) + 1;
    let rounded = slots.next_power_of_two() - 1;
    u32::try_from(rounded)
        .unwrap_or(u32::MAX)
        .min(max_cqe.max(cqe))
}
