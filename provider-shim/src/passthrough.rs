//! Pass-through devices (`SOFTVERBS_DEVICES="sv_rxe0=passthrough:rxe0"`):
//! a device softverbs lists that fronts a real one. Opening it opens the
//! real device through libibverbs and hands the application the real
//! provider's own context, so every object is the provider's and its
//! direct-verbs calls (`mlx5dv_*`) and events work unchanged.
//!
//! When the process traces (`SOFTVERBS_TRACE`) or has verbs fault rules
//! for the device (`SOFTVERBS_FAULTS`), the real context's ops are
//! replaced, through libibverbs' own `verbs_set_ops`, by the traced ops
//! of `trace_ops`, which call the real provider's originals (kept here,
//! per context) and apply the rules at the C level. Otherwise the context
//! is left exactly as the real provider made it: no cost at all.
//!
//! The originals are read from libibverbs' private copy of the ops
//! (`verbs_context.priv`), whose place is known for rdma-core 44's
//! layout and checked against the public copies libibverbs keeps of the
//! same functions before it is used; a libibverbs whose layout differs
//! gets no hooks, and the open fails saying so.

use crate::device::{DeviceOps, PROVIDER_NAME};
use crate::ffi::*;
use crate::guard::{guard, set_errno};
use crate::libibverbs::verbs_set_ops;
use crate::passthrough_delay::Delays;
use crate::passthrough_qp_error::QpErrors;
use parking_lot::Mutex;
use softverbs_config::PassthroughDevice as Config;
use softverbs_faults::{Action, FaultSpec, Faults, Part};
use std::collections::{HashMap, HashSet};
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::{addr_of, addr_of_mut};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A pass-through device: the `verbs_device` libibverbs lists, and which
/// real device it fronts.
#[repr(C)]
#[derive(Debug)]
pub struct PassthroughDevice {
    /// Must be first: libibverbs hands out `&vdev.device`.
    pub vdev: verbs_device,
    /// Its configuration.
    pub config: Config,
}

/// The device ops of pass-through devices (also how one is recognised).
pub static PASSTHROUGH_DEVICE_OPS: DeviceOps = DeviceOps(verbs_device_ops {
    name: PROVIDER_NAME.as_ptr() as *const c_char,
    match_min_abi_version: 0,
    match_max_abi_version: u32::MAX,
    match_table: std::ptr::null(),
    static_providers: std::ptr::null_mut(),
    match_device: None,
    alloc_context: Some(alloc_context),
    import_context: None,
    alloc_device: None,
    uninit_device: Some(uninit_device),
});

/// The process holds a reference to every pass-through device, so this
/// runs only if libibverbs drops more references than it took.
unsafe extern "C" fn uninit_device(_device: *mut verbs_device) {}

/// Builds the `verbs_device` of a configured pass-through device (once
/// per process, never freed).
pub fn build(config: &Config) -> usize {
    let vdev = crate::device::verbs_device_named(&config.name, &PASSTHROUGH_DEVICE_OPS);
    Box::into_raw(Box::new(PassthroughDevice {
        vdev,
        config: config.clone(),
    })) as usize
}

/// The pass-through device behind `device`, if it is one.
pub fn passthrough(device: *mut ibv_device) -> Option<&'static PassthroughDevice> {
    if device.is_null() {
        return None;
    }
    // SAFETY: every `ibv_device` libibverbs hands out is the first field
    // of a `verbs_device`; only with our table is it a (never freed)
    // `PassthroughDevice`.
    unsafe {
        let vdev = device as *mut verbs_device;
        let ours = std::ptr::eq((*vdev).ops, &PASSTHROUGH_DEVICE_OPS.0);
        ours.then(|| &*(device as *const PassthroughDevice))
    }
}

/// What softverbs keeps for a hooked pass-through context.
#[derive(Debug)]
pub struct Hooked {
    /// The pass-through device's name (the trace's `dev`).
    pub name: String,
    /// The real provider's ops, as they were before the hooks.
    pub originals: verbs_context_ops,
    /// Its verbs fault rules, if any.
    pub faults: Option<Mutex<Faults>>,
    /// When it was opened: rule windows count from it.
    pub opened: Instant,
    /// Its QPs by number, for the rules that move one to ERR. A QP leaves
    /// before it is destroyed, and a rule modifies one only while holding
    /// this lock, so no rule reaches a destroyed QP.
    pub qps: Mutex<HashMap<u32, usize>>,
    /// QPs a completion rule failed: their successes are reported
    /// flushed, as the error state would, until they are reset.
    pub failed: Mutex<HashSet<u32>>,
    /// The vendor error a completion rule gave the current completion of
    /// an extended CQ, by CQ address (`ibv_wc_read_vendor_err` returns it).
    pub current_vendor_err: Mutex<HashMap<usize, u32>>,
    /// With `qp_error` rules: the merged async descriptor their events
    /// are raised on, and the alarm of the timed ones.
    pub qp_errors: Option<QpErrors>,
    /// With `completion delay=` rules: the held completions.
    pub delays: Option<Delays>,
}

/// What the completion rules make of one completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Reported as the provider made it.
    Keep,
    /// A success of a QP a rule failed: reported flushed.
    Flush,
    /// A rule fired: reported with this status and vendor error, and its
    /// QP is moved to ERR.
    Fail(u32, u32),
}

impl Hooked {
    /// The time since the context opened.
    pub fn elapsed(&self) -> Duration {
        self.opened.elapsed()
    }

    /// QP `qp` (`ptr`) was created.
    pub fn add_qp(&self, qp: u32, ptr: usize) {
        self.qps.lock().insert(qp, ptr);
    }

    /// QP `qp` is about to be destroyed: no rule may reach it from now on.
    /// Returns what to give back to [`Hooked::add_qp`] if the destroy fails.
    pub fn remove_qp(&self, qp: u32) -> Option<usize> {
        self.qps.lock().remove(&qp)
    }

    /// The CQ at `cq` is destroyed: a completion rule's vendor error for
    /// it goes (a new CQ may take its address).
    pub fn forget_cq(&self, cq: usize) {
        self.current_vendor_err.lock().remove(&cq);
    }

    /// QP `qp` is gone (destroyed) or starts again (reset): its counts and
    /// its failure by a rule go.
    pub fn forget_qp(&self, qp: u32) {
        self.failed.lock().remove(&qp);
        if let Some(f) = &self.faults {
            f.lock().forget_qp(qp);
        }
    }
}

/// How many hooked contexts may be open at once.
const MAX_HOOKED: usize = 256;

/// The hooked contexts: slot i holds a context's address (0: free) and
/// its state. Read on every verb of a hooked context, so without a lock:
/// the state is stored before the key is published (Release), and read
/// after the key is seen (Acquire). A state is never freed (a closed
/// context's slot is only cleared), so a reference to it stays valid.
static KEYS: [AtomicUsize; MAX_HOOKED] = [const { AtomicUsize::new(0) }; MAX_HOOKED];
static STATES: [AtomicPtr<Hooked>; MAX_HOOKED] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_HOOKED];
/// Registration is one at a time (lookups need no lock).
static REGISTERING: Mutex<()> = Mutex::new(());
/// How many slots hold a context: a traced soft context's verbs look for
/// themselves here on every call, and need not scan the slots when none
/// does.
static IN_USE: AtomicUsize = AtomicUsize::new(0);

/// The hook state of `context`, if it is a hooked pass-through context.
pub fn hooked(context: *mut ibv_context) -> Option<&'static Hooked> {
    let key = context as usize;
    if key == 0 || IN_USE.load(Ordering::Acquire) == 0 {
        return None; // the key of a free slot, or no slot in use
    }
    let i = KEYS.iter().position(|k| k.load(Ordering::Acquire) == key)?;
    // SAFETY: published after the state was stored, and never freed.
    unsafe { STATES[i].load(Ordering::Acquire).as_ref() }
}

/// Makes `state` the hook state of `context`; gives it back if every
/// slot is taken.
fn register(context: *mut ibv_context, state: Box<Hooked>) -> Result<(), Box<Hooked>> {
    let _one = REGISTERING.lock();
    let Some(i) = KEYS.iter().position(|k| k.load(Ordering::Acquire) == 0) else {
        return Err(state);
    };
    // Kept for the life of the process: a verb racing with the close of
    // its context (the application's mistake) still reads valid memory.
    STATES[i].store(Box::into_raw(state), Ordering::Release);
    IN_USE.fetch_add(1, Ordering::AcqRel);
    KEYS[i].store(context as usize, Ordering::Release);
    Ok(())
}

/// Forgets a context that is being closed (giving it back its kernel
/// async descriptor first, if its rules had merged one).
///
/// # Safety
/// `context` is a live context being closed.
pub unsafe fn unhook(context: *mut ibv_context) {
    if let Some(q) = hooked(context).and_then(|h| h.qp_errors.as_ref()) {
        // SAFETY: per the contract; it is the context they were installed on.
        unsafe { q.uninstall(context) };
    }
    let _one = REGISTERING.lock();
    for k in &KEYS {
        if k.load(Ordering::Acquire) == context as usize {
            k.store(0, Ordering::Release);
            IN_USE.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// The fault rules of the process (`SOFTVERBS_FAULTS`), read once.
fn fault_spec() -> Result<Option<&'static FaultSpec>, String> {
    static SPEC: OnceLock<Result<Option<FaultSpec>, String>> = OnceLock::new();
    let spec = SPEC.get_or_init(|| FaultSpec::from_env().map_err(|e| e.to_string()));
    spec.as_ref().map(Option::as_ref).map_err(Clone::clone)
}

/// `verbs_device_ops.alloc_context` of a pass-through device: opens the
/// real device and returns its context, hooked if anything watches it.
///
/// # Safety
/// Called by libibverbs' `ibv_open_device` with one of our pass-through
/// devices and a command descriptor that becomes ours (or -1).
unsafe extern "C" fn alloc_context(
    device: *mut ibv_device,
    cmd_fd: c_int,
    _private_data: *mut c_void,
) -> *mut verbs_context {
    if cmd_fd >= 0 {
        // SAFETY: its ownership passed to us; the real device has its own.
        unsafe { libc::close(cmd_fd) };
    }
    guard(std::ptr::null_mut(), || {
        let Some(dev) = passthrough(device) else {
            set_errno(libc::ENODEV);
            return std::ptr::null_mut();
        };
        let name = &dev.config.name;
        let fail = |errno: c_int, why: String| {
            softverbs_transport::say!("softverbs: cannot open {name}: {why}");
            set_errno(errno);
            std::ptr::null_mut()
        };
        let spec = match fault_spec() {
            Ok(spec) => spec,
            Err(e) => return fail(libc::EINVAL, e),
        };
        if let Err(e) = softverbs_trace::open_from_env() {
            return fail(libc::EINVAL, e.to_string());
        }
        // SAFETY: libibverbs' public API; the name is NUL-free (config).
        let context = match unsafe { open_real(&dev.config.real) } {
            Ok(c) => c,
            Err(e) => {
                return fail(
                    e,
                    format!(
                        "the real device {} did not open ({})",
                        dev.config.real,
                        std::io::Error::from_raw_os_error(e)
                    ),
                )
            }
        };
        // SAFETY: a context libibverbs just opened; it sits at the end of
        // its provider's `verbs_context`.
        let vctx = unsafe { verbs_context_of(context) };
        let mut rules = spec.and_then(|s| Faults::new(s, name, Part::Verbs));
        if let Some(rules) = &mut rules {
            softverbs_trace::observe_faults(rules, name);
        }
        if softverbs_trace::on() || rules.is_some() {
            // SAFETY: the context is not yet handed out.
            if let Err(why) = unsafe { hook(vctx, name, rules) } {
                // SAFETY: ours to close again.
                unsafe { ibv_close_device(context) };
                return fail(libc::EOPNOTSUPP, why);
            }
        }
        if softverbs_trace::on() {
            // SAFETY: the context just opened.
            unsafe { crate::trace_ops::opened(name, context) };
        }
        vctx
    })
}

extern "C" {
    fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device;
    fn ibv_free_device_list(list: *mut *mut ibv_device);
    fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context;
    fn ibv_close_device(context: *mut ibv_context) -> c_int;
    fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char;
}

/// Opens the real device called `real` (not one of softverbs'): its
/// context, or an errno.
///
/// # Safety
/// Calls libibverbs' public API, which may call back into this provider
/// (listing devices); no lock of ours is held.
unsafe fn open_real(real: &str) -> Result<*mut ibv_context, c_int> {
    // SAFETY: a NULL count is allowed.
    let list = unsafe { ibv_get_device_list(std::ptr::null_mut()) };
    if list.is_null() {
        return Err(libc::ENODEV);
    }
    let mut found = std::ptr::null_mut();
    let mut p = list;
    // SAFETY: a NULL-terminated list of live devices.
    unsafe {
        while !(*p).is_null() {
            let d = *p;
            let named =
                std::ffi::CStr::from_ptr(ibv_get_device_name(d)).to_bytes() == real.as_bytes();
            let mine = crate::device::soft(d).is_some() || passthrough(d).is_some();
            if named && !mine {
                found = d;
                break;
            }
            p = p.add(1);
        }
    }
    // SAFETY: the device's own reference keeps it while it is opened.
    let context = if found.is_null() {
        std::ptr::null_mut()
    } else {
        unsafe { ibv_open_device(found) }
    };
    let err = if found.is_null() {
        libc::ENODEV
    } else {
        crate::guard::errno()
    };
    // SAFETY: the list from ibv_get_device_list, freed once.
    unsafe { ibv_free_device_list(list) };
    if context.is_null() {
        Err(err)
    } else {
        Ok(context)
    }
}

/// The `verbs_context` a context is the last field of.
///
/// # Safety
/// `context` is the `context` member of a live `verbs_context`.
pub unsafe fn verbs_context_of(context: *mut ibv_context) -> *mut verbs_context {
    let offset = std::mem::offset_of!(verbs_context, context);
    // SAFETY: per the contract, within the same allocation.
    unsafe { (context as *mut u8).sub(offset) as *mut verbs_context }
}

/// Replaces the ops of a real provider's context with the traced ops,
/// keeping its originals.
///
/// # Safety
/// `vctx` is a live context libibverbs opened, not yet handed out.
unsafe fn hook(vctx: *mut verbs_context, name: &str, rules: Option<Faults>) -> Result<(), String> {
    // SAFETY: per the contract.
    let originals = unsafe { private_ops(vctx) }.ok_or_else(|| {
        "this libibverbs keeps its ops where softverbs does not know (not rdma-core 44's layout)"
            .to_string()
    })?;
    // SAFETY: per the contract; a copy of function pointers.
    let context = unsafe { std::ptr::addr_of_mut!((*vctx).context) };
    let has = |f: fn(&Action) -> bool| {
        rules
            .as_ref()
            .is_some_and(|r| r.rules().any(|r| f(&r.action)))
    };
    let delays = has(|a| matches!(a, Action::DelayCompletion(_))).then(Delays::default);
    let raises = has(|a| matches!(a, Action::QpError(_)));
    let qp_errors = if raises {
        // SAFETY: per the contract, the context is not yet handed out.
        let q = unsafe { QpErrors::install(context) };
        Some(q.map_err(|e| format!("no descriptor for the events of qp_error rules: {e}"))?)
    } else {
        None
    };
    let state = Box::new(Hooked {
        name: name.to_string(),
        // SAFETY: checked by private_ops.
        originals: unsafe { originals.read() },
        faults: rules.map(Mutex::new),
        opened: Instant::now(),
        qps: Mutex::new(HashMap::new()),
        failed: Mutex::new(HashSet::new()),
        current_vendor_err: Mutex::new(HashMap::new()),
        qp_errors,
        delays,
    });
    if let Err(state) = register(context, state) {
        if let Some(q) = &state.qp_errors {
            // SAFETY: installed on this context, which nobody has yet.
            unsafe { q.uninstall(context) };
        }
        return Err(format!(
            "more than {MAX_HOOKED} traced or faulted pass-through contexts are open"
        ));
    }
    if let Some(h) = hooked(context) {
        h.start_alarm();
    }
    // SAFETY: libibverbs' own way to install ops (it fills the private
    // table and the public copies); the context is not yet shared.
    unsafe { verbs_set_ops(vctx, &crate::trace_ops::TRACED_OPS.0) };
    Ok(())
}

/// libibverbs' private copy of a context's ops (`priv->ops`), if it is
/// where rdma-core 44 puts it: after a bitmap with a bit per op and two
/// small fields. Checked against the public copies libibverbs keeps of
/// four of them.
///
/// # Safety
/// `vctx` is a live context libibverbs opened.
unsafe fn private_ops(vctx: *mut verbs_context) -> Option<*const verbs_context_ops> {
    let ptr = std::mem::size_of::<usize>();
    let ops_num = std::mem::size_of::<verbs_context_ops>() / ptr;
    let bitmap = ops_num.div_ceil(usize::BITS as usize) * ptr;
    // driver_id (u32) and use_ioctl_write (bool), then pointer alignment.
    let offset = bitmap + ptr;
    // SAFETY: per the contract `priv` is libibverbs' live private block,
    // which holds at least this much; only function pointers are read,
    // and only compared until the layout is confirmed.
    unsafe {
        let private = (*vctx).priv_ as *const u8;
        if private.is_null() {
            return None;
        }
        let ops = private.add(offset) as *const verbs_context_ops;
        let public = &(*vctx).context.ops;
        let same = |a: Option<usize>, b: Option<usize>| a.is_some() && a == b;
        let ok = same(
            (*ops).post_send.map(|f| f as usize),
            public.post_send.map(|f| f as usize),
        ) && same(
            (*ops).poll_cq.map(|f| f as usize),
            public.poll_cq.map(|f| f as usize),
        ) && same(
            (*ops).alloc_pd.map(|f| f as usize),
            public._compat_alloc_pd.map(|f| f as usize),
        ) && same(
            (*ops).create_qp.map(|f| f as usize),
            public._compat_create_qp.map(|f| f as usize),
        );
        ok.then_some(ops)
    }
}

/// A C list of WRs (`ibv_send_wr`, `ibv_recv_wr`).
pub trait WrList: Sized {
    /// The next WR.
    fn next(&self) -> *mut Self;
    /// Links the next WR.
    fn set_next(&mut self, next: *mut Self);
    /// What a post rule is asked about it: opcode (`ibv_wr_opcode`, none
    /// for a receive) and, if `bytes`, its bytes (else 0).
    ///
    /// # Safety
    /// With `bytes`, the WR's SGE list holds `num_sge` entries, or at
    /// least [`MAX_SGE_READ`].
    unsafe fn shape(&self, bytes: bool) -> (Option<u32>, u64);
}

/// The most SGEs of one WR a byte-counting rule reads.
pub const MAX_SGE_READ: usize = 64;

/// The bytes of `num_sge` SGEs (at most [`MAX_SGE_READ`]).
///
/// # Safety
/// `sg_list` holds that many entries (or `num_sge` is not positive).
unsafe fn sge_bytes(sg_list: *const ibv_sge, num_sge: c_int) -> u64 {
    if sg_list.is_null() {
        return 0;
    }
    (0..(num_sge.max(0) as usize).min(MAX_SGE_READ))
        // SAFETY: per the contract; plain field reads.
        .map(|i| u64::from(unsafe { std::ptr::addr_of!((*sg_list.add(i)).length).read() }))
        .sum()
}

impl WrList for ibv_send_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
    unsafe fn shape(&self, bytes: bool) -> (Option<u32>, u64) {
        // SAFETY: per the contract.
        let len = if bytes {
            unsafe { sge_bytes(self.sg_list, self.num_sge) }
        } else {
            0
        };
        (Some(self.opcode), len)
    }
}

impl WrList for ibv_recv_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
    unsafe fn shape(&self, bytes: bool) -> (Option<u32>, u64) {
        // SAFETY: per the contract.
        let len = if bytes {
            unsafe { sge_bytes(self.sg_list, self.num_sge) }
        } else {
            0
        };
        (None, len)
    }
}

/// A post verb of the real provider.
pub type PostFn<W, Q> = unsafe extern "C" fn(*mut Q, *mut W, *mut *mut W) -> c_int;

impl Hooked {
    /// A post verb with the rules of this context: a WR a rule refuses is
    /// not posted (nor any after it) and is returned as `bad_wr` with the
    /// rule's errno; the ones before it are posted, from copies of the
    /// caller's WRs linked up to it (the caller's list is not written).
    /// Each WR posted counts towards `qp_error after=N` for QP `qp_num`.
    ///
    /// # Safety
    /// The arguments are those libibverbs passed to the post member, and
    /// `post` is the real provider's member for them.
    pub unsafe fn post<W: WrList, Q>(
        &self,
        queue: softverbs_faults::Queue,
        qp_num: Option<u32>,
        post: PostFn<W, Q>,
        (target, wr, bad_wr): (*mut Q, *mut W, *mut *mut W),
    ) -> c_int {
        let Some(faults) = &self.faults else {
            // SAFETY: per the contract.
            return unsafe { post(target, wr, bad_wr) };
        };
        if bad_wr.is_null() {
            return libc::EINVAL; // as rxe answers
        }
        // SAFETY: the caller's out pointer; set, so that a provider that
        // fails without naming a WR leaves no stale value.
        unsafe { *bad_wr = std::ptr::null_mut() };
        let (refused, count) = {
            let mut rules = faults.lock();
            // Bytes are read (as the provider will read them) only for a
            // rule that counts them, and then from at most MAX_SGE_READ
            // SGEs: a WR whose num_sge is more than its QP takes, which the
            // provider refuses unread, is not read past that.
            let bytes = rules.counts_bytes();
            let mut cur = wr;
            let mut count = 0;
            let mut refused = None;
            while !cur.is_null() {
                // SAFETY: the caller's list, valid for the call (the verbs
                // contract); its SGEs are read only as said above.
                let (opcode, len) = unsafe { (*cur).shape(bytes) };
                let qp = qp_num.unwrap_or(u32::MAX);
                if let Some(errno) = rules.post(self.elapsed(), queue, qp, opcode, len) {
                    refused = Some((cur, errno));
                    break;
                }
                count += 1;
                // SAFETY: as above.
                cur = unsafe { (*cur).next() };
            }
            (refused, count)
        };
        let (ret, posted) = match refused {
            None => {
                // SAFETY: per the contract.
                let ret = unsafe { post(target, wr, bad_wr) };
                // SAFETY: the provider set `*bad_wr` (or left it NULL).
                let bad = if ret == 0 {
                    std::ptr::null_mut()
                } else {
                    unsafe { *bad_wr }
                };
                // SAFETY: the caller's list.
                (
                    ret,
                    unsafe { position(wr, bad) }.unwrap_or(if ret == 0 { count } else { 0 }),
                )
            }
            // SAFETY: per the contract; the first `count` WRs precede it.
            Some((at, errno)) => unsafe { post_before(post, target, wr, count, bad_wr, at, errno) },
        };
        if let Some(qp) = qp_num.filter(|_| faults.lock().counts_posts()) {
            for _ in 0..posted {
                if faults.lock().posted(qp) {
                    self.kill_qp(qp);
                }
            }
        }
        ret
    }

    /// Applies the completion rules to the `n` completions a poll wrote
    /// at `wc`: a success a rule fails gets the rule's status and its QP
    /// is moved to ERR, and that QP's later completions in the same poll
    /// are reported flushed, as the error state would. `delayed` hears of
    /// each completion (by its place) a delay rule holds back.
    ///
    /// # Safety
    /// `wc` holds `n` completions the provider just wrote for this call.
    pub unsafe fn rewrite_completions(
        &self,
        wc: *mut ibv_wc,
        n: usize,
        mut delayed: impl FnMut(usize, Duration),
    ) {
        if self.faults.is_none() {
            return;
        }
        let mut newly: Vec<u32> = Vec::new();
        for i in 0..n {
            // SAFETY: per the contract: the caller's output array, which
            // this call fills; read and written field by field.
            unsafe {
                let w = wc.add(i);
                let qp = addr_of!((*w).qp_num).read();
                let (verdict, delay) = self.judge(
                    qp,
                    addr_of!((*w).status).read(),
                    addr_of!((*w).opcode).read(),
                    addr_of!((*w).byte_len).read(),
                );
                if let Some(d) = delay {
                    delayed(i, d);
                }
                match verdict {
                    Verdict::Keep => {}
                    Verdict::Flush => addr_of_mut!((*w).status).write(IBV_WC_WR_FLUSH_ERR),
                    Verdict::Fail(status, vendor_err) => {
                        addr_of_mut!((*w).status).write(status);
                        addr_of_mut!((*w).vendor_err).write(vendor_err);
                        newly.push(qp);
                    }
                }
            }
        }
        for qp in newly {
            self.fail_qp(qp);
        }
    }

    /// Applies the completion rules to the completion `ibv_start_poll` or
    /// `ibv_next_poll` just made current on the extended CQ `cq`, as
    /// [`Hooked::rewrite_completions`] does to a polled one; a rewritten
    /// vendor error is what [`Hooked::vendor_err_of`] then returns. How
    /// long a delay rule holds it back, if one fires.
    ///
    /// # Safety
    /// `cq` is an extended CQ of this context with a current completion,
    /// inside this thread's polling section.
    pub unsafe fn rewrite_current(&self, cq: *mut ibv_cq_ex) -> Option<Duration> {
        // Without rules no vendor error is ever kept.
        self.faults.as_ref()?;
        self.current_vendor_err.lock().remove(&(cq as usize));
        // SAFETY: per the contract: the public status and the provider's
        // readers of the current completion.
        let (status, qp, opcode, len) = unsafe {
            let read =
                |f: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>| f.map_or(0, |f| f(cq));
            (
                addr_of!((*cq).status).read(),
                read(addr_of!((*cq).read_qp_num).read()),
                read(addr_of!((*cq).read_opcode).read()),
                read(addr_of!((*cq).read_byte_len).read()),
            )
        };
        let (verdict, delay) = self.judge(qp, status, opcode, len);
        let written = match verdict {
            Verdict::Keep => return delay,
            Verdict::Flush => IBV_WC_WR_FLUSH_ERR,
            Verdict::Fail(status, vendor_err) => {
                self.current_vendor_err
                    .lock()
                    .insert(cq as usize, vendor_err);
                self.fail_qp(qp);
                status
            }
        };
        // SAFETY: per the contract: the application reads the status from
        // this public field after the call returns.
        unsafe { addr_of_mut!((*cq).status).write(written) };
        delay
    }

    /// The vendor error a completion rule gave the current completion of
    /// `cq`, if one did.
    pub fn vendor_err_of(&self, cq: *mut ibv_cq_ex) -> Option<u32> {
        self.current_vendor_err.lock().get(&(cq as usize)).copied()
    }

    /// What the completion rules make of a completion of QP `qp`, and
    /// how long a delay rule holds it back (asked of successes only, as
    /// on a soft device).
    fn judge(&self, qp: u32, status: u32, opcode: u32, len: u32) -> (Verdict, Option<Duration>) {
        let Some(faults) = &self.faults else {
            return (Verdict::Keep, None);
        };
        if status != IBV_WC_SUCCESS {
            return (Verdict::Keep, None);
        }
        let mut failed = self.failed.lock();
        if failed.contains(&qp) {
            return (Verdict::Flush, None);
        }
        let fault = faults.lock().completion(self.elapsed(), qp, opcode, len);
        let verdict = match fault.fail {
            Some((status, vendor_err)) => {
                failed.insert(qp);
                Verdict::Fail(status, vendor_err)
            }
            None => Verdict::Keep,
        };
        (verdict, fault.delay)
    }

    /// Moves QP `qp_num` of this context to ERR through the real provider
    /// (a completion rule fired: no async event, as for a real error
    /// completion).
    fn fail_qp(&self, qp_num: u32) {
        let qps = self.qps.lock();
        if let Some(&qp) = qps.get(&qp_num) {
            self.to_err(qp);
        }
    }

    /// Moves the QP at `qp` to ERR through the real provider. Called with
    /// `qps` locked, and `qp` in it.
    pub(crate) fn to_err(&self, qp: usize) {
        let mut attr = ibv_qp_attr::ZEROED;
        attr.qp_state = IBV_QPS_ERR;
        if let Some(modify) = self.originals.modify_qp {
            // SAFETY: a live QP of this context: it leaves `qps` before it
            // is destroyed, and the caller holds that lock across the call.
            unsafe { modify(qp as *mut ibv_qp, &mut attr, IBV_QP_STATE as c_int) };
        }
    }
}

/// The place of `bad` in the list `wr` (how many WRs precede it), if it is
/// in the list.
///
/// # Safety
/// `wr` is the caller's NULL-terminated list.
unsafe fn position<W: WrList>(wr: *mut W, bad: *mut W) -> Option<usize> {
    let mut cur = wr;
    let mut i = 0;
    while !cur.is_null() {
        if cur == bad {
            return Some(i);
        }
        i += 1;
        // SAFETY: per the contract.
        cur = unsafe { (*cur).next() };
    }
    None
}

/// Posts the first `count` WRs of the caller's list `wr` (from copies
/// linked up to the refused one), then reports the refused WR `at` with
/// `errno`, or the provider's own failure among the copies as the
/// caller's WR at the same place. Also returns how many were posted.
///
/// # Safety
/// As [`Hooked::post`]; `at` is the WR after the first `count` of `wr`.
unsafe fn post_before<W: WrList, Q>(
    post: PostFn<W, Q>,
    target: *mut Q,
    wr: *mut W,
    count: usize,
    bad_wr: *mut *mut W,
    at: *mut W,
    errno: c_int,
) -> (c_int, usize) {
    let mut originals = Vec::with_capacity(count);
    let mut copies: Vec<W> = Vec::with_capacity(count);
    let mut cur = wr;
    for _ in 0..count {
        originals.push(cur);
        // SAFETY: a WR of the caller's list, copied bit for bit (C data).
        copies.push(unsafe { cur.read() });
        // SAFETY: as above.
        cur = unsafe { (*cur).next() };
    }
    // Linked through one raw pointer to the copies, which then stay put
    // (no reallocation: `count` was reserved) until the post returns.
    let base = copies.as_mut_ptr();
    for i in 0..count {
        let next = if i + 1 < count {
            base.wrapping_add(i + 1)
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: i < count = copies.len(); only `base` reaches them now.
        unsafe { (*base.add(i)).set_next(next) };
    }
    if count > 0 {
        let mut bad: *mut W = std::ptr::null_mut();
        // SAFETY: the copies, linked within `copies`, live for the call.
        let ret = unsafe { post(target, base, &mut bad) };
        if ret != 0 {
            let i = (bad as usize).wrapping_sub(base as usize) / std::mem::size_of::<W>();
            // SAFETY: the caller's out pointer.
            unsafe { *bad_wr = originals.get(i).copied().unwrap_or(at) };
            return (ret, i.min(count));
        }
    }
    // SAFETY: the caller's out pointer.
    unsafe { *bad_wr = at };
    (errno, count)
}

/// The hook state of a context with `rules`, no real provider behind it
/// (its members are the tests' own).
#[cfg(test)]
pub(crate) fn test_hooked(rules: &str) -> Hooked {
    let spec = FaultSpec::parse(rules).expect("rules parse");
    let delays = spec
        .rules
        .iter()
        .any(|r| matches!(r.action, Action::DelayCompletion(_)));
    Hooked {
        name: "sv".into(),
        originals: verbs_context_ops::ZEROED,
        faults: Faults::new(&spec, "sv", Part::Verbs).map(Mutex::new),
        opened: Instant::now(),
        qps: Mutex::new(HashMap::new()),
        failed: Mutex::new(HashSet::new()),
        current_vendor_err: Mutex::new(HashMap::new()),
        qp_errors: None,
        delays: delays.then(Delays::default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softverbs_faults::Queue;

    thread_local! {
        /// What the fake provider was given, and the wr_id it refuses.
        static POSTED: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    const REFUSED_BY_PROVIDER: u64 = 99;

    /// A provider's post member: takes WRs in order, refusing one wr_id.
    unsafe extern "C" fn fake_post(
        _qp: *mut ibv_qp,
        wr: *mut ibv_recv_wr,
        bad: *mut *mut ibv_recv_wr,
    ) -> c_int {
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: the list the test (or `post_before`) built.
            let w = unsafe { &*cur };
            if w.wr_id == REFUSED_BY_PROVIDER {
                // SAFETY: the caller's out pointer.
                unsafe { *bad = cur };
                return libc::EINVAL;
            }
            POSTED.with(|p| p.borrow_mut().push(w.wr_id));
            cur = w.next;
        }
        0
    }

    fn hooked(rules: &str) -> Hooked {
        test_hooked(rules)
    }

    /// A receive WR list with these wr_ids (no SGEs).
    fn list(ids: &[u64]) -> Vec<ibv_recv_wr> {
        let mut wrs: Vec<ibv_recv_wr> = ids
            .iter()
            .map(|&id| ibv_recv_wr {
                wr_id: id,
                ..ibv_recv_wr::ZEROED
            })
            .collect();
        let base = wrs.as_mut_ptr();
        for i in 0..ids.len().saturating_sub(1) {
            // SAFETY: within the vector, through one pointer.
            unsafe { (*base.add(i)).next = base.add(i + 1) };
        }
        wrs
    }

    fn post(h: &Hooked, ids: &[u64]) -> (c_int, Option<u64>, Vec<u64>, Vec<u64>) {
        POSTED.with(|p| p.borrow_mut().clear());
        let mut wrs = list(ids);
        let before: Vec<u64> = wrs.iter().map(|w| w.next as u64).collect();
        let head = wrs.as_mut_ptr();
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        let qp = std::ptr::null_mut::<ibv_qp>();
        // SAFETY: a well-formed list and a fake provider.
        let ret = unsafe { h.post(Queue::Recv, Some(7), fake_post, (qp, head, &mut bad)) };
        // SAFETY: NULL or one of the caller's WRs.
        let bad_id = (!bad.is_null()).then(|| unsafe { (*bad).wr_id });
        let after: Vec<u64> = wrs.iter().map(|w| w.next as u64).collect();
        (
            ret,
            bad_id,
            POSTED.with(|p| p.borrow().clone()),
            if before == after { Vec::new() } else { after },
        )
    }

    #[test]
    fn a_refused_wr_is_bad_wr_and_the_ones_before_it_are_posted_from_copies() {
        let h = hooked("post_recv nth=3 errno=ENOMEM");
        let (ret, bad, posted, changed) = post(&h, &[1, 2, 3, 4]);
        assert_eq!((ret, bad, posted), (libc::ENOMEM, Some(3), vec![1, 2]));
        assert!(changed.is_empty(), "the caller's list was written");
        // The first WR refused: nothing posted.
        let h = hooked("post_recv nth=1 errno=EAGAIN");
        assert_eq!(
            post(&h, &[5, 6]),
            (libc::EAGAIN, Some(5), Vec::new(), Vec::new())
        );
    }

    #[test]
    fn a_provider_failure_among_the_copies_names_the_callers_wr() {
        let h = hooked("post_recv nth=3 errno=ENOMEM");
        let (ret, bad, posted, _) = post(&h, &[1, REFUSED_BY_PROVIDER, 3]);
        assert_eq!(
            (ret, bad, posted),
            (libc::EINVAL, Some(REFUSED_BY_PROVIDER), vec![1])
        );
    }

    #[test]
    fn without_a_matching_rule_the_list_goes_to_the_provider_whole() {
        let h = hooked("post_send errno=EIO");
        assert_eq!(post(&h, &[1, 2, 3]), (0, None, vec![1, 2, 3], Vec::new()));
    }

    #[test]
    fn a_failed_completion_flushes_the_rest_of_its_qp_in_the_same_poll() {
        let h = hooked("completion nth=1 status=REM_ACCESS_ERR vendor_err=5");
        let mut wc = [ibv_wc::ZEROED; 3];
        for (i, w) in wc.iter_mut().enumerate() {
            w.wr_id = i as u64;
            w.qp_num = if i == 2 { 8 } else { 7 };
        }
        // SAFETY: three completions in a local array.
        unsafe { h.rewrite_completions(wc.as_mut_ptr(), 3, |_, _| {}) };
        let got: Vec<_> = wc.iter().map(|w| (w.status, w.vendor_err)).collect();
        assert_eq!(
            got,
            [
                (IBV_WC_REM_ACCESS_ERR, 5),
                (IBV_WC_WR_FLUSH_ERR, 0),
                (IBV_WC_SUCCESS, 0)
            ]
        );
    }

    /// The provider's readers of a fake extended CQ: every completion is
    /// QP 7's SEND of 12 bytes, with vendor error 0.
    unsafe extern "C" fn qp_7(_: *mut ibv_cq_ex) -> u32 {
        7
    }
    unsafe extern "C" fn send(_: *mut ibv_cq_ex) -> u32 {
        IBV_WC_SEND
    }
    unsafe extern "C" fn twelve(_: *mut ibv_cq_ex) -> u32 {
        12
    }

    #[test]
    fn a_rule_rewrites_the_current_completion_of_an_extended_cq() {
        let h = hooked("completion opcode=SEND nth=2 status=REM_ACCESS_ERR vendor_err=66");
        let mut cq = ibv_cq_ex::ZEROED;
        cq.read_qp_num = Some(qp_7);
        cq.read_opcode = Some(send);
        cq.read_byte_len = Some(twelve);
        let cq = &mut cq as *mut ibv_cq_ex;
        let mut seen = Vec::new();
        for _ in 0..3 {
            // SAFETY: a local CQ whose status the "provider" (this loop)
            // sets to a success before each completion becomes current.
            unsafe {
                (*cq).status = IBV_WC_SUCCESS;
                h.rewrite_current(cq);
                seen.push(((*cq).status, h.vendor_err_of(cq)));
            }
        }
        assert_eq!(
            seen,
            [
                (IBV_WC_SUCCESS, None),
                (IBV_WC_REM_ACCESS_ERR, Some(66)),
                (IBV_WC_WR_FLUSH_ERR, None)
            ]
        );
        h.forget_cq(cq as usize);
        assert_eq!(h.vendor_err_of(cq), None);
    }
}
