//! The pass-through backend: the API's calls on a real device, through
//! libibverbs and the device's own provider. The engine's handles name
//! the C objects here (slot maps from `PdId`, `QpId`, ... to pointers),
//! and the engine's structs are converted at the call (`convert`).
//!
//! This is the API's C ABI: every `unsafe` block calls libibverbs with
//! objects it returned and that this module owns until it destroys them.

use crate::convert::{ah_to_c, cap_from_c, cap_to_c, gid_from_c, qp_attr_from_c, qp_attr_to_c};
use crate::convert::{send_wr_to_c, sge_to_c, wc_from_c};
use crate::region::Region;
use crate::verbs_faults::VerbsFaults;
use crate::{Error, MrKeys, Result, Verbs};
use parking_lot::Mutex;
use slotmap::SlotMap;
use softverbs_engine::{
    AhAttr, AhId, AsyncEvent, CqId, Gid, MrId, PdId, QpAttr, QpAttrMask, QpCreated, QpId,
    QpInitAttr, QpState, RecvWr, SendWr, SrqAttr, SrqAttrMask, SrqId, WorkCompletion,
};
use softverbs_faults::Queue;
use softverbs_ffi::*;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::time::{Duration, Instant};

#[link(name = "ibverbs")]
extern "C" {
    fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device;
    fn ibv_free_device_list(list: *mut *mut ibv_device);
    fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char;
    fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context;
    fn ibv_close_device(context: *mut ibv_context) -> c_int;
    fn ibv_query_gid(context: *mut ibv_context, port: u8, index: c_int, gid: *mut ibv_gid)
        -> c_int;
    fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd;
    fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int;
    fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr;
    fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int;
    fn ibv_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq;
    fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
    fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int;
    fn ibv_query_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        mask: c_int,
        init: *mut ibv_qp_init_attr,
    ) -> c_int;
    fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int;
    fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah;
    fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int;
    fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq;
    fn ibv_modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int;
    fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int;
    fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int;
    fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel;
    fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int;
    fn ibv_get_cq_event(
        channel: *mut ibv_comp_channel,
        cq: *mut *mut ibv_cq,
        cq_context: *mut *mut c_void,
    ) -> c_int;
    fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: std::ffi::c_uint);
    fn ibv_get_async_event(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int;
    fn ibv_ack_async_event(event: *mut ibv_async_event);
}

/// A C object libibverbs made, owned by this backend.
#[derive(Debug)]
struct Raw<T>(*mut T);

impl<T> Clone for Raw<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Raw<T> {}

// SAFETY: libibverbs objects may be used from any thread (libibverbs and
// its providers are thread-safe, ibv_open_device(3)); the pointer is only
// passed back to libibverbs, never dereferenced into a Rust reference
// except the plain field reads below.
unsafe impl<T> Send for Raw<T> {}
// SAFETY: as above; shared access only reads the pointer value.
unsafe impl<T> Sync for Raw<T> {}

/// The objects made on the real device, by the engine's handle types.
#[derive(Debug, Default)]
struct Objects {
    pds: SlotMap<PdId, Raw<ibv_pd>>,
    mrs: SlotMap<MrId, (Raw<ibv_mr>, Region)>,
    cqs: SlotMap<CqId, Raw<ibv_cq>>,
    qps: SlotMap<QpId, Raw<ibv_qp>>,
    /// The QPs by number (completions name them so).
    qp_nums: HashMap<u32, QpId>,
    ahs: SlotMap<AhId, Raw<ibv_ah>>,
    srqs: SlotMap<SrqId, Raw<ibv_srq>>,
}

/// An open real device.
#[derive(Debug)]
pub struct Real {
    name: String,
    context: Raw<ibv_context>,
    /// The completion channel of every CQ made here.
    channel: Raw<ibv_comp_channel>,
    objects: Mutex<Objects>,
    /// The verbs rules of `SOFTVERBS_FAULTS` for this device.
    faults: Option<VerbsFaults>,
}

/// The errno of the libibverbs call that just failed.
fn last_error(what: &'static str) -> Error {
    let errno = std::io::Error::last_os_error()
        .raw_os_error()
        .filter(|&e| e != 0)
        .unwrap_or(libc::EIO);
    Error::new(errno, what)
}

/// A call's status (0, or an errno as libibverbs returns it).
fn status(ret: c_int, what: &'static str) -> Result<()> {
    match ret {
        0 => Ok(()),
        e if e > 0 => Err(Error::new(e, what)),
        _ => Err(last_error(what)),
    }
}

/// The object a libibverbs create call returned, or the errno it set.
fn made<T>(object: *mut T, what: &'static str) -> Result<Raw<T>> {
    if object.is_null() {
        Err(last_error(what))
    } else {
        Ok(Raw(object))
    }
}

fn unknown(what: &'static str) -> Error {
    Error::new(libc::EINVAL, what)
}

/// Destroys the object `key` names in `table` with `destroy` (the
/// libibverbs call for its type) and forgets it; `what` names it in errors.
fn destroy<K: slotmap::Key, T>(
    table: &mut SlotMap<K, Raw<T>>,
    key: K,
    what: (&'static str, &'static str),
    destroy: unsafe extern "C" fn(*mut T) -> c_int,
) -> Result<()> {
    let raw = *table.get(key).ok_or(unknown(what.0))?;
    // SAFETY: every pointer in a table is a live object libibverbs made
    // on this context, and `destroy` is libibverbs' call for its type; on
    // success the entry goes, so nothing is destroyed twice.
    status(unsafe { destroy(raw.0) }, what.1)?;
    table.remove(key);
    Ok(())
}

impl Real {
    /// Opens the real device `real` for the pass-through device `name`.
    pub fn open(name: &str, real: &str) -> Result<Real> {
        let faults = VerbsFaults::from_env(name)?;
        // SAFETY: a NULL count is allowed; the list is freed below.
        let list = unsafe { ibv_get_device_list(std::ptr::null_mut()) };
        if list.is_null() {
            let why = std::io::Error::last_os_error();
            return Err(Error::new(
                libc::ENODEV,
                format!("{name}: libibverbs has no device {real} (it lists none: {why})"),
            ));
        }
        let mut context = std::ptr::null_mut();
        let mut found = false;
        // SAFETY: a NULL-terminated list of devices, alive until freed;
        // each name is a NUL-terminated string of the device.
        unsafe {
            let mut p = list;
            while !(*p).is_null() {
                if CStr::from_ptr(ibv_get_device_name(*p)).to_bytes() == real.as_bytes() {
                    found = true;
                    context = ibv_open_device(*p);
                    break;
                }
                p = p.add(1);
            }
        }
        let error = last_error("the real device did not open");
        // SAFETY: the list from ibv_get_device_list, freed once; an opened
        // context keeps its own reference to the device.
        unsafe { ibv_free_device_list(list) };
        if !found {
            return Err(Error::new(
                libc::ENODEV,
                format!("{name}: libibverbs has no device {real}"),
            ));
        }
        if context.is_null() {
            return Err(error);
        }
        // SAFETY: the context just opened.
        let channel = unsafe { ibv_create_comp_channel(context) };
        if channel.is_null() {
            let error = last_error("ibv_create_comp_channel failed");
            // SAFETY: the context just opened, with nothing made on it.
            unsafe { ibv_close_device(context) };
            return Err(error);
        }
        Ok(Real {
            name: name.to_string(),
            context: Raw(context),
            channel: Raw(channel),
            objects: Mutex::new(Objects::default()),
            faults,
        })
    }

    /// QP `qp_num`, moved to ERR by a fault rule (through the provider).
    fn fail_qp(&self, qp_num: u32) {
        let qp = self.objects.lock().qp_nums.get(&qp_num).copied();
        if let Some(qp) = qp {
            let err = QpAttr {
                qp_state: QpState::Err as u32,
                ..QpAttr::default()
            };
            // A QP destroyed meanwhile is gone: nothing to fail.
            let _ = self.modify_qp(qp, &err, QpAttrMask::STATE);
        }
    }

    /// SRQ `srq`, if it is ours.
    fn srq(&self, srq: SrqId) -> Result<Raw<ibv_srq>> {
        let o = self.objects.lock();
        o.srqs.get(srq).copied().ok_or(unknown("unknown SRQ"))
    }

    /// CQ `cq`, if it is ours.
    fn cq(&self, cq: CqId) -> Result<Raw<ibv_cq>> {
        let o = self.objects.lock();
        o.cqs.get(cq).copied().ok_or(unknown("unknown CQ"))
    }

    /// QP `qp`, if it is ours.
    fn qp(&self, qp: QpId) -> Result<Raw<ibv_qp>> {
        let o = self.objects.lock();
        o.qps.get(qp).copied().ok_or(unknown("unknown QP"))
    }

    /// QP `qp`'s number, if it is ours.
    fn qp_num(&self, qp: QpId) -> Result<u32> {
        let o = self.objects.lock();
        let raw = o.qps.get(qp).ok_or(unknown("unknown QP"))?;
        // SAFETY: a live QP of ours: `destroy_qp` frees it only while
        // holding this lock, and then takes it out of the table. A plain
        // field read.
        Ok(unsafe { (*raw.0).qp_num })
    }

    /// The fault rules' say on a post to `queue` of `qp`, then the post
    /// itself (`post`), then the count towards `qp_error after=N`.
    fn post_with_rules(
        &self,
        qp: QpId,
        queue: Queue,
        (opcode, bytes): (Option<u32>, u64),
        post: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let Some(faults) = &self.faults else {
            return post();
        };
        let qp_num = self.qp_num(qp)?;
        faults.post(queue, qp_num, opcode, bytes)?;
        post()?;
        if faults.posted(qp_num) {
            self.fail_qp(qp_num);
        }
        Ok(())
    }
}

impl Drop for Real {
    /// Destroys what is left, dependents first, then closes the device.
    fn drop(&mut self) {
        let o = self.objects.get_mut();
        // SAFETY: each pointer is a live object of this context, destroyed
        // once (the tables are drained); QPs and AHs go before the SRQs,
        // CQs and PDs they use, MRs before their PD and their region.
        unsafe {
            for (_, qp) in o.qps.drain() {
                ibv_destroy_qp(qp.0);
            }
            for (_, srq) in o.srqs.drain() {
                ibv_destroy_srq(srq.0);
            }
            for (_, ah) in o.ahs.drain() {
                ibv_destroy_ah(ah.0);
            }
            for (_, cq) in o.cqs.drain() {
                ibv_destroy_cq(cq.0);
            }
            for (_, (mr, _region)) in o.mrs.drain() {
                ibv_dereg_mr(mr.0);
            }
            for (_, pd) in o.pds.drain() {
                ibv_dealloc_pd(pd.0);
            }
            ibv_destroy_comp_channel(self.channel.0);
            ibv_close_device(self.context.0);
        }
    }
}

impl Verbs for Real {
    fn name(&self) -> &str {
        &self.name
    }

    fn is_passthrough(&self) -> bool {
        true
    }

    fn query_gid(&self, index: u32) -> Result<Gid> {
        let mut gid = ibv_gid::ZEROED;
        let index = c_int::try_from(index).map_err(|_| unknown("GID index too large"))?;
        // SAFETY: our open context and a local out struct.
        let ret = unsafe { ibv_query_gid(self.context.0, 1, index, &mut gid) };
        status(ret, "ibv_query_gid failed")?;
        Ok(gid_from_c(&gid))
    }

    fn alloc_pd(&self) -> Result<PdId> {
        // SAFETY: our open context.
        let pd = unsafe { ibv_alloc_pd(self.context.0) };
        let pd = made(pd, "ibv_alloc_pd failed")?;
        Ok(self.objects.lock().pds.insert(pd))
    }

    fn dealloc_pd(&self, pd: PdId) -> Result<()> {
        let o = &mut *self.objects.lock();
        destroy(
            &mut o.pds,
            pd,
            ("unknown PD", "ibv_dealloc_pd failed"),
            ibv_dealloc_pd,
        )
    }

    fn reg_mr(&self, pd: PdId, region: &Region, access: u32) -> Result<MrKeys> {
        let mut o = self.objects.lock();
        let raw = *o.pds.get(pd).ok_or(unknown("unknown PD"))?;
        // SAFETY: the region's heap buffer is valid for its length and
        // stays at this address while the region lives; the MR table keeps
        // a clone of the region until the MR is deregistered, so the device
        // never reaches freed memory. The device writes it as DMA does,
        // outside the region's lock (Region's documentation).
        let mr = region.with_bytes(|b| unsafe {
            ibv_reg_mr(raw.0, b.as_mut_ptr().cast(), b.len(), access as c_int)
        });
        let mr = made(mr, "ibv_reg_mr failed")?;
        // SAFETY: the MR just registered; plain field reads.
        let (lkey, rkey) = unsafe { ((*mr.0).lkey, (*mr.0).rkey) };
        let id = o.mrs.insert((mr, region.clone()));
        Ok(MrKeys { id, lkey, rkey })
    }

    fn dereg_mr(&self, mr: MrId) -> Result<()> {
        let mut o = self.objects.lock();
        let raw = o.mrs.get(mr).ok_or(unknown("unknown MR"))?.0;
        // SAFETY: a live MR of ours; its region is released only after.
        status(unsafe { ibv_dereg_mr(raw.0) }, "ibv_dereg_mr failed")?;
        o.mrs.remove(mr);
        Ok(())
    }

    fn create_cq(&self, cqe: u32) -> Result<CqId> {
        let cqe = c_int::try_from(cqe).map_err(|_| unknown("cqe too large"))?;
        // SAFETY: our open context and its completion channel; no user
        // context.
        let cq =
            unsafe { ibv_create_cq(self.context.0, cqe, std::ptr::null_mut(), self.channel.0, 0) };
        let cq = made(cq, "ibv_create_cq failed")?;
        Ok(self.objects.lock().cqs.insert(cq))
    }

    fn destroy_cq(&self, cq: CqId) -> Result<()> {
        let o = &mut *self.objects.lock();
        destroy(
            &mut o.cqs,
            cq,
            ("unknown CQ", "ibv_destroy_cq failed"),
            ibv_destroy_cq,
        )
    }

    fn poll_cq(&self, cq: CqId, max: usize) -> Result<Vec<WorkCompletion>> {
        let raw = self.cq(cq)?;
        let mut wc = vec![ibv_wc::ZEROED; max.min(c_int::MAX as usize)];
        // SAFETY: a live CQ of ours (the lock is not held: a provider's
        // poll is thread-safe, and destroying a CQ being polled is the
        // caller's bug as in C); `wc` holds `len` entries. This is what
        // verbs.h's inline ibv_poll_cq does.
        let n = unsafe {
            let poll = (*(*raw.0).context).ops.poll_cq;
            match poll {
                Some(f) => f(raw.0, wc.len() as c_int, wc.as_mut_ptr()),
                None => -1,
            }
        };
        if n < 0 {
            return Err(Error::new(libc::EIO, "ibv_poll_cq failed"));
        }
        wc.truncate(n as usize);
        let mut out: Vec<WorkCompletion> = wc.iter().map(wc_from_c).collect();
        if let Some(faults) = &self.faults {
            for qp_num in faults.completions(&mut out) {
                self.fail_qp(qp_num);
            }
        }
        Ok(out)
    }

    fn create_qp(&self, pd: PdId, init: &QpInitAttr) -> Result<QpCreated> {
        let mut o = self.objects.lock();
        let raw_pd = *o.pds.get(pd).ok_or(unknown("unknown PD"))?;
        let send_cq = *o.cqs.get(init.send_cq).ok_or(unknown("unknown send CQ"))?;
        let recv_cq = *o
            .cqs
            .get(init.recv_cq)
            .ok_or(unknown("unknown receive CQ"))?;
        let srq = match init.srq {
            Some(srq) => o.srqs.get(srq).ok_or(unknown("unknown SRQ"))?.0,
            None => std::ptr::null_mut(),
        };
        let mut c = ibv_qp_init_attr::ZEROED;
        c.send_cq = send_cq.0;
        c.recv_cq = recv_cq.0;
        c.srq = srq;
        c.cap = cap_to_c(&init.cap);
        c.qp_type = init.qp_type;
        c.sq_sig_all = c_int::from(init.sq_sig_all);
        // SAFETY: a live PD, CQs and SRQ (or NULL) of ours, a local
        // attribute struct (libibverbs writes the actual caps back into it).
        let qp = unsafe { ibv_create_qp(raw_pd.0, &mut c) };
        let qp = made(qp, "ibv_create_qp failed")?;
        // SAFETY: the QP just created; a plain field read.
        let qp_num = unsafe { (*qp.0).qp_num };
        let id = o.qps.insert(qp);
        o.qp_nums.insert(qp_num, id);
        Ok(QpCreated {
            id,
            qp_num,
            cap: cap_from_c(&c.cap),
        })
    }

    fn modify_qp(&self, qp: QpId, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let raw = self.qp(qp)?;
        let mut c = qp_attr_to_c(attr);
        // SAFETY: a live QP of ours and a local attribute struct.
        let ret = unsafe { ibv_modify_qp(raw.0, &mut c, mask.bits() as c_int) };
        status(ret, "ibv_modify_qp failed")?;
        let reset = mask.contains(QpAttrMask::STATE) && attr.qp_state == QpState::Reset as u32;
        if let (true, Some(faults)) = (reset, &self.faults) {
            faults.forget(self.qp_num(qp)?);
        }
        Ok(())
    }

    fn query_qp(&self, qp: QpId) -> Result<QpAttr> {
        let raw = self.qp(qp)?;
        let (mut attr, mut init) = (ibv_qp_attr::ZEROED, ibv_qp_init_attr::ZEROED);
        let all = (QpAttrMask::all() - QpAttrMask::RATE_LIMIT).bits() as c_int;
        // SAFETY: a live QP of ours and local out structs.
        let ret = unsafe { ibv_query_qp(raw.0, &mut attr, all, &mut init) };
        status(ret, "ibv_query_qp failed")?;
        Ok(qp_attr_from_c(&attr))
    }

    fn destroy_qp(&self, qp: QpId) -> Result<()> {
        let qp_num = self.qp_num(qp)?;
        let o = &mut *self.objects.lock();
        destroy(
            &mut o.qps,
            qp,
            ("unknown QP", "ibv_destroy_qp failed"),
            ibv_destroy_qp,
        )?;
        o.qp_nums.remove(&qp_num);
        if let Some(faults) = &self.faults {
            faults.forget(qp_num);
        }
        Ok(())
    }

    fn create_ah(&self, pd: PdId, attr: &AhAttr) -> Result<AhId> {
        let mut o = self.objects.lock();
        let raw_pd = *o.pds.get(pd).ok_or(unknown("unknown PD"))?;
        let mut c = ah_to_c(attr);
        // SAFETY: a live PD of ours and a local attribute struct.
        let ah = unsafe { ibv_create_ah(raw_pd.0, &mut c) };
        let ah = made(ah, "ibv_create_ah failed")?;
        Ok(o.ahs.insert(ah))
    }

    fn destroy_ah(&self, ah: AhId) -> Result<()> {
        let o = &mut *self.objects.lock();
        destroy(
            &mut o.ahs,
            ah,
            ("unknown AH", "ibv_destroy_ah failed"),
            ibv_destroy_ah,
        )
    }

    fn post_send(&self, qp: QpId, wr: &SendWr<'_>) -> Result<()> {
        let bytes = if wr.send_flags & softverbs_engine::send_flags::INLINE != 0 {
            wr.inline_data.len() as u64
        } else {
            wr.sg_list.iter().map(|s| u64::from(s.length)).sum()
        };
        let shape = (Some(wr.opcode), bytes);
        self.post_with_rules(qp, Queue::Send, shape, || self.post_send_now(qp, wr))
    }

    fn post_recv(&self, qp: QpId, wr: &RecvWr<'_>) -> Result<()> {
        let bytes = wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
        self.post_with_rules(qp, Queue::Recv, (None, bytes), || {
            self.post_recv_now(qp, wr)
        })
    }

    fn create_srq(&self, pd: PdId, attr: &SrqAttr) -> Result<(SrqId, SrqAttr)> {
        let mut o = self.objects.lock();
        let raw_pd = *o.pds.get(pd).ok_or(unknown("unknown PD"))?;
        let mut c = ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: srq_attr_to_c(attr),
        };
        // SAFETY: a live PD of ours and a local attribute struct
        // (libibverbs writes the actual sizes back into it).
        let srq = unsafe { ibv_create_srq(raw_pd.0, &mut c) };
        let srq = made(srq, "ibv_create_srq failed")?;
        Ok((o.srqs.insert(srq), srq_attr_from_c(&c.attr)))
    }

    fn modify_srq(&self, srq: SrqId, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        let raw = self.srq(srq)?;
        let mut c = srq_attr_to_c(attr);
        // SAFETY: a live SRQ of ours and a local attribute struct.
        let ret = unsafe { ibv_modify_srq(raw.0, &mut c, mask.bits() as c_int) };
        status(ret, "ibv_modify_srq failed")
    }

    fn query_srq(&self, srq: SrqId) -> Result<SrqAttr> {
        let raw = self.srq(srq)?;
        let mut c = ibv_srq_attr::ZEROED;
        // SAFETY: a live SRQ of ours and a local out struct.
        let ret = unsafe { ibv_query_srq(raw.0, &mut c) };
        status(ret, "ibv_query_srq failed")?;
        Ok(srq_attr_from_c(&c))
    }

    fn destroy_srq(&self, srq: SrqId) -> Result<()> {
        let o = &mut *self.objects.lock();
        destroy(
            &mut o.srqs,
            srq,
            ("unknown SRQ", "ibv_destroy_srq failed"),
            ibv_destroy_srq,
        )
    }

    fn post_srq_recv(&self, srq: SrqId, wr: &RecvWr<'_>) -> Result<()> {
        let raw = self.srq(srq)?;
        if let Some(faults) = &self.faults {
            // SRQ posts name no QP, as on soft devices.
            let bytes = wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
            faults.post(Queue::SrqRecv, u32::MAX, None, bytes)?;
        }
        // SAFETY: a live SRQ of ours and its context's member for it
        // (verbs.h's inline ibv_post_srq_recv).
        let post = unsafe { (*(*raw.0).context).ops.post_srq_recv };
        post_recv_with(raw, wr, post, "ibv_post_srq_recv failed")
    }

    fn req_notify_cq(&self, cq: CqId, solicited_only: bool) -> Result<()> {
        let raw = self.cq(cq)?;
        // SAFETY: a live CQ of ours (verbs.h's inline ibv_req_notify_cq).
        let ret = unsafe {
            match (*(*raw.0).context).ops.req_notify_cq {
                Some(f) => f(raw.0, c_int::from(solicited_only)),
                None => libc::EOPNOTSUPP,
            }
        };
        status(ret, "ibv_req_notify_cq failed")
    }

    fn get_cq_event(&self, timeout: Duration) -> Result<Option<CqId>> {
        // SAFETY: our channel, alive until this device is dropped.
        let fd = unsafe { (*self.channel.0).fd };
        if !readable(fd, timeout)? {
            return Ok(None);
        }
        let (mut cq, mut cq_context) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: our channel, readable (so the read does not wait), and
        // two local out pointers; the event is acknowledged at once (a CQ
        // is destroyed only once its events are).
        let ret = unsafe { ibv_get_cq_event(self.channel.0, &mut cq, &mut cq_context) };
        status(ret, "ibv_get_cq_event failed")?;
        // SAFETY: the CQ the event names, one of ours.
        unsafe { ibv_ack_cq_events(cq, 1) };
        let o = self.objects.lock();
        Ok(o.cqs.iter().find(|(_, r)| r.0 == cq).map(|(id, _)| id))
    }

    fn get_async_event(&self, timeout: Duration) -> Result<Option<AsyncEvent>> {
        let deadline = Instant::now() + timeout;
        // SAFETY: our open context (a plain field read).
        let fd = unsafe { (*self.context.0).async_fd };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if !readable(fd, left)? {
                return Ok(None);
            }
            let mut ev = ibv_async_event::ZEROED;
            // SAFETY: our context, its descriptor readable; a local out
            // struct, acknowledged right after it is read.
            let ret = unsafe { ibv_get_async_event(self.context.0, &mut ev) };
            status(ret, "ibv_get_async_event failed")?;
            let event = self.async_event_of(&ev);
            // SAFETY: the event just read, acknowledged once.
            unsafe { ibv_ack_async_event(&mut ev) };
            // Device events and port events other than PORT_ERR are not
            // offered: skipped.
            if event.is_some() {
                return Ok(event);
            }
        }
    }
}

impl Real {
    /// The API's event for a C one about an object of ours.
    fn async_event_of(&self, ev: &ibv_async_event) -> Option<AsyncEvent> {
        let o = self.objects.lock();
        // SAFETY: each member is a pointer (or the port number); the one
        // the event type names is read, and only compared.
        let (cq, qp, srq, port) = unsafe {
            (
                ev.element.cq,
                ev.element.qp,
                ev.element.srq,
                ev.element.port_num,
            )
        };
        let cq_id = || o.cqs.iter().find(|(_, r)| r.0 == cq).map(|(id, _)| id);
        let qp_id = || o.qps.iter().find(|(_, r)| r.0 == qp).map(|(id, _)| id);
        let srq_id = || o.srqs.iter().find(|(_, r)| r.0 == srq).map(|(id, _)| id);
        Some(match ev.event_type {
            0 => AsyncEvent::CqErr(cq_id()?),
            1 => AsyncEvent::QpFatal(qp_id()?),
            2 => AsyncEvent::QpReqErr(qp_id()?),
            3 => AsyncEvent::QpAccessErr(qp_id()?),
            4 => AsyncEvent::CommEst(qp_id()?),
            5 => AsyncEvent::SqDrained(qp_id()?),
            15 => AsyncEvent::SrqLimitReached(srq_id()?),
            16 => AsyncEvent::QpLastWqeReached(qp_id()?),
            10 => AsyncEvent::PortErr(u8::try_from(port).ok()?),
            9 => AsyncEvent::PortActive(u8::try_from(port).ok()?),
            _ => return None,
        })
    }
}

/// Waits until `fd` is readable or `timeout` passed: whether it is.
fn readable(fd: c_int, timeout: Duration) -> Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = c_int::try_from(timeout.as_millis()).unwrap_or(c_int::MAX);
    // SAFETY: one live pollfd of ours.
    match unsafe { libc::poll(&mut p, 1, ms) } {
        n if n < 0 => {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => Ok(false),
                errno => Err(Error::new(errno.unwrap_or(libc::EIO), "poll failed")),
            }
        }
        0 => Ok(false),
        _ => Ok(true),
    }
}

/// `struct ibv_srq_attr` of the engine's.
fn srq_attr_to_c(a: &SrqAttr) -> ibv_srq_attr {
    ibv_srq_attr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    }
}

/// The engine's `SrqAttr` of a `struct ibv_srq_attr`.
fn srq_attr_from_c(c: &ibv_srq_attr) -> SrqAttr {
    SrqAttr {
        max_wr: c.max_wr,
        max_sge: c.max_sge,
        srq_limit: c.srq_limit,
    }
}

/// A provider's `post_recv` or `post_srq_recv` member.
type PostRecv<T> = unsafe extern "C" fn(*mut T, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;

/// Posts one receive WR to `object` through `post`, its provider's member
/// for it.
fn post_recv_with<T>(
    object: Raw<T>,
    wr: &RecvWr<'_>,
    post: Option<PostRecv<T>>,
    what: &'static str,
) -> Result<()> {
    let mut sges: Vec<ibv_sge> = wr.sg_list.iter().map(sge_to_c).collect();
    let mut c = ibv_recv_wr {
        wr_id: wr.wr_id,
        next: std::ptr::null_mut(),
        sg_list: sges.as_mut_ptr(),
        num_sge: sges.len() as c_int,
    };
    let mut bad = std::ptr::null_mut();
    let Some(post) = post else {
        return status(libc::EOPNOTSUPP, what);
    };
    // SAFETY: `object` is a live QP or SRQ of ours and `post` its
    // provider's member for it; the WR and its SGEs live across the call,
    // which copies them into the queue.
    status(unsafe { post(object.0, &mut c, &mut bad) }, what)
}

impl Real {
    /// `ibv_post_send` of one WR, through the provider's member.
    fn post_send_now(&self, qp: QpId, wr: &SendWr<'_>) -> Result<()> {
        let (raw, ah) = {
            let o = self.objects.lock();
            let raw = *o.qps.get(qp).ok_or(unknown("unknown QP"))?;
            let ah = match &wr.ud {
                Some(ud) => o.ahs.get(ud.ah).ok_or(unknown("unknown AH"))?.0,
                None => std::ptr::null_mut(),
            };
            (raw, ah)
        };
        let mut sges = Vec::with_capacity(wr.sg_list.len().max(1));
        let mut c = send_wr_to_c(wr, &mut sges, ah);
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP of ours; the WR and its SGEs (and inline
        // bytes) live across the call, which copies them into the send
        // queue. This is what verbs.h's inline ibv_post_send does.
        let ret = unsafe {
            match (*(*raw.0).context).ops.post_send {
                Some(f) => f(raw.0, &mut c, &mut bad),
                None => libc::EOPNOTSUPP,
            }
        };
        status(ret, "ibv_post_send failed")
    }

    /// `ibv_post_recv` of one WR, through the provider's member.
    fn post_recv_now(&self, qp: QpId, wr: &RecvWr<'_>) -> Result<()> {
        let raw = self.qp(qp)?;
        // SAFETY: a live QP of ours and its context's member for it
        // (verbs.h's inline ibv_post_recv).
        let post = unsafe { (*(*raw.0).context).ops.post_recv };
        post_recv_with(raw, wr, post, "ibv_post_recv failed")
    }
}
