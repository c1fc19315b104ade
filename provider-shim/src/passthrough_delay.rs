//! `completion delay=` rules on a hooked pass-through context: a
//! completion `ibv_poll_cq` takes from the real provider is held back for
//! the rule's time, and every later one of its CQ behind it (their order
//! is kept), as on a soft device. The time counts from when softverbs
//! first sees the completion, in a poll.
//!
//! Its completion event waits with it. The kernel sent the event when the
//! completion arrived; the application, finding nothing to poll, arms the
//! CQ again and waits. So a completion channel of such a context is a
//! merged descriptor (`merged_fd`) whose timer is set for the first
//! held completion of an armed CQ, and when that time comes
//! `ibv_get_cq_event` hands out an event for the CQ, as the device would
//! have once the completion was there.
//!
//! Extended CQs read with `ibv_start_poll` hold theirs the same way, with
//! every field their readers give (`passthrough_delay_ex`).

use crate::ffi::*;
use crate::merged_fd::{Kind, MergedFd, Record};
use crate::passthrough::Hooked;
use parking_lot::lock_api::RawMutex as _;
use parking_lot::{Mutex, MutexGuard, RawMutex};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::RawFd;
use std::os::raw::c_int;
use std::ptr::{addr_of, addr_of_mut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

/// The merged completion channels, by the descriptor the application has.
static CHANNELS: LazyLock<Mutex<HashMap<RawFd, Arc<MergedFd>>>> = LazyLock::new(Default::default);

/// Whether a merged channel was ever made: until then every
/// `ibv_get_cq_event` of the process goes to libibverbs without a lookup.
static ANY: AtomicBool = AtomicBool::new(false);

/// The merged channel the application knows as `fd`, if it is one.
pub fn channel(fd: RawFd) -> Option<Arc<MergedFd>> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    CHANNELS.lock().get(&fd).cloned()
}

/// The merged channel the application knew as `fd` is destroyed.
pub fn forget_channel(fd: RawFd) {
    CHANNELS.lock().remove(&fd);
}

/// A held completion: its work completion, and the fields only an
/// extended CQ's readers give.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot {
    pub wc: ibv_wc,
    pub completion_ts: u64,
    pub completion_wallclock_ns: u64,
    pub cvlan: u16,
    pub flow_tag: u32,
    pub tm_info: ibv_wc_tm_info,
}

impl Snapshot {
    /// A completion `ibv_poll_cq` gave.
    fn of(wc: ibv_wc) -> Snapshot {
        Snapshot {
            wc,
            completion_ts: 0,
            completion_wallclock_ns: 0,
            cvlan: 0,
            flow_tag: 0,
            tm_info: ibv_wc_tm_info { tag: 0, priv_: 0 },
        }
    }
}

/// A CQ's held completions and event state.
#[derive(Debug)]
pub struct HeldCq {
    /// The CQ's address (its handle in completion events).
    cq: usize,
    /// Completions held back, each with when it is due, oldest first.
    pub held: VecDeque<(Instant, Snapshot)>,
    /// Its completion channel, if softverbs merged it.
    channel: Option<Arc<MergedFd>>,
    /// `ibv_req_notify_cq` was called since its last event was handed out.
    armed: bool,
    /// For an extended CQ: its polling session (`passthrough_delay_ex`).
    pub ex: Option<crate::passthrough_delay_ex::Session>,
}

impl HeldCq {
    /// The first held completion, if it is due at `now`.
    pub fn take_due(&mut self, now: Instant) -> Option<Snapshot> {
        if self.held.front().is_some_and(|&(due, _)| due <= now) {
            self.held.pop_front().map(|h| h.1)
        } else {
            None
        }
    }

    /// Holds `snapshot` back `delay` (none: only behind the held ones).
    pub fn hold(&mut self, now: Instant, delay: Option<Duration>, snapshot: Snapshot) {
        let behind = self.held.back().map_or(now, |h| h.0);
        let due = (now + delay.unwrap_or_default()).max(behind);
        self.held.push_back((due, snapshot));
        self.retime();
    }

    /// An armed CQ with held completions: its channel's timer must go off
    /// by its first one's time.
    fn retime(&self) {
        if let (true, Some(c), Some(&(due, _))) = (self.armed, &self.channel, self.held.front()) {
            c.set_timer_by(due);
        }
    }
}

/// A CQ's delay state, and the lock of its polling sessions.
pub struct CqDelay {
    /// Held from an extended CQ's successful `ibv_start_poll` to its
    /// `ibv_end_poll`, and through each `ibv_poll_cq`: what the provider's
    /// own CQ lock does for its completions, for held ones too (one thread
    /// reads the current completion at a time). Taken before `held`,
    /// never while holding it.
    session: RawMutex,
    held: Mutex<HeldCq>,
}

impl std::fmt::Debug for CqDelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqDelay").field("held", &self.held).finish()
    }
}

impl CqDelay {
    /// The CQ's held completions and event state.
    pub fn lock(&self) -> MutexGuard<'_, HeldCq> {
        self.held.lock()
    }

    /// Waits for the CQ's polling session and takes it.
    pub fn begin_session(&self) {
        self.session.lock();
    }

    /// Gives the session up.
    ///
    /// # Safety
    /// This thread took it with [`CqDelay::begin_session`] and has not
    /// given it up since.
    pub unsafe fn end_session(&self) {
        // SAFETY: per the contract, the lock is held by this thread.
        unsafe { self.session.unlock() };
    }
}

/// The delay state of a context with `completion delay=` rules.
#[derive(Debug, Default)]
pub struct Delays {
    cqs: Mutex<HashMap<usize, Arc<CqDelay>>>,
}

/// The real provider's `poll_cq`.
pub type PollFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;

impl Delays {
    /// Makes the completion channel `channel` of this context a merged
    /// one, so that held completions can have their events.
    ///
    /// # Safety
    /// `channel` is a live channel libibverbs just made, not yet handed out.
    pub unsafe fn merge_channel(&self, channel: *mut ibv_comp_channel) -> io::Result<()> {
        // SAFETY: per the contract.
        let fd = unsafe { addr_of_mut!((*channel).fd) };
        // SAFETY: as above.
        let merged = Arc::new(MergedFd::new(Kind::Completion, unsafe { fd.read() })?);
        // SAFETY: as above.
        unsafe { fd.write(merged.fd()) };
        CHANNELS.lock().insert(merged.fd(), merged);
        ANY.store(true, Ordering::Release);
        Ok(())
    }

    /// CQ `cq` was made, with completion channel `channel` (or none).
    ///
    /// # Safety
    /// `channel` is NULL or a live channel.
    pub unsafe fn add_cq(&self, cq: usize, channel: *mut ibv_comp_channel) {
        // SAFETY: per the contract.
        let merged = (!channel.is_null())
            .then(|| unsafe { addr_of!((*channel).fd).read() })
            .and_then(self::channel);
        let state = HeldCq {
            cq,
            held: VecDeque::new(),
            channel: merged,
            armed: false,
            ex: None,
        };
        let delay = CqDelay {
            session: RawMutex::INIT,
            held: Mutex::new(state),
        };
        self.cqs.lock().insert(cq, Arc::new(delay));
    }

    /// CQ `cq` is about to be destroyed: its held completions go, and
    /// its events raised and handed out are taken back from its count of
    /// acked events (libibverbs' destroy compares it with the kernel's).
    /// Returns what [`Delays::keep_cq`] needs if the destroy fails.
    ///
    /// # Safety
    /// `cq` is a live CQ of this context.
    pub unsafe fn remove_cq(&self, cq: *mut ibv_cq) -> Option<(Arc<CqDelay>, u32)> {
        let state = self.cqs.lock().remove(&(cq as usize))?;
        let raised = state
            .lock()
            .channel
            .as_ref()
            .map_or(0, |m| m.forget(cq as u64));
        // SAFETY: per the contract.
        unsafe { add_comp_events_completed(cq, raised.wrapping_neg()) };
        Some((state, raised))
    }

    /// The destroy after [`Delays::remove_cq`] failed: the CQ stays.
    ///
    /// # Safety
    /// `cq` is a live CQ of this context.
    pub unsafe fn keep_cq(&self, cq: *mut ibv_cq, (state, raised): (Arc<CqDelay>, u32)) {
        if let Some(m) = &state.lock().channel {
            m.remember(cq as u64, raised);
        }
        // SAFETY: per the contract.
        unsafe { add_comp_events_completed(cq, raised) };
        self.cqs.lock().insert(cq as usize, state);
    }

    /// `ibv_req_notify_cq` armed CQ `cq`.
    pub fn arm(&self, cq: usize) {
        if let Some(state) = self.state(cq) {
            let mut s = state.lock();
            s.armed = true;
            s.retime();
        }
    }

    /// An event of CQ `cq` was handed out: it is no longer armed.
    pub fn event_handed_out(&self, cq: usize) {
        if let Some(state) = self.state(cq) {
            state.lock().armed = false;
        }
    }

    /// Raises an event on `channel` for each armed CQ of it whose first
    /// held completion is due, and sets its timer for the next one.
    pub fn raise_due(&self, channel: &Arc<MergedFd>) {
        let now = Instant::now();
        // Unset first, then set by each CQ still waiting: a poll of
        // another thread that holds a completion meanwhile sets it too,
        // and only ever earlier, so its time is not lost.
        channel.set_timer(None);
        for state in self.cqs.lock().values() {
            let mut s = state.lock();
            if !s.armed || !s.channel.as_ref().is_some_and(|c| Arc::ptr_eq(c, channel)) {
                continue;
            }
            let Some(&(due, _)) = s.held.front() else {
                continue;
            };
            if due <= now {
                s.armed = false;
                channel.raise(Record {
                    element: s.cq as u64,
                    event_type: 0,
                });
            } else {
                channel.set_timer_by(due);
            }
        }
    }

    /// `ibv_poll_cq` of CQ `cq` with delay rules: the held completions
    /// that are due first, then (when none is held any more) the
    /// provider's, each judged by the rules of `hooked`, held back if a
    /// delay rule fires or one is already held. How many it wrote at
    /// `wc`, or the provider's failure.
    ///
    /// # Safety
    /// The arguments are those libibverbs passed to `poll_cq`, and `poll`
    /// is the real provider's member for them.
    pub unsafe fn poll(
        &self,
        hooked: &Hooked,
        poll: PollFn,
        (cq, num, wc): (*mut ibv_cq, c_int, *mut ibv_wc),
    ) -> c_int {
        let Some(state) = self.state(cq as usize) else {
            // SAFETY: per the contract.
            return unsafe { poll(cq, num, wc) };
        };
        state.begin_session();
        // SAFETY: as below.
        let n = unsafe { self.poll_in_session(hooked, poll, &state, (cq, num, wc)) };
        // SAFETY: taken just above.
        unsafe { state.end_session() };
        n
    }

    /// [`Delays::poll`] with the CQ's session taken.
    ///
    /// # Safety
    /// As [`Delays::poll`].
    unsafe fn poll_in_session(
        &self,
        hooked: &Hooked,
        poll: PollFn,
        state: &CqDelay,
        (cq, num, wc): (*mut ibv_cq, c_int, *mut ibv_wc),
    ) -> c_int {
        let mut s = state.lock();
        let num = usize::try_from(num).unwrap_or(0);
        let now = Instant::now();
        let mut out = 0;
        while out < num {
            let Some(held) = s.take_due(now) else {
                break;
            };
            // SAFETY: the caller's array holds `num` completions.
            unsafe { wc.add(out).write(held.wc) };
            out += 1;
        }
        if out == num || !s.held.is_empty() {
            return out as c_int; // later ones wait behind the held
        }
        // SAFETY: per the contract; the rest of the caller's array.
        let m = unsafe { poll(cq, (num - out) as c_int, wc.add(out)) };
        if m <= 0 {
            return if out > 0 { out as c_int } else { m };
        }
        let mut delays: Vec<(usize, Duration)> = Vec::new();
        // SAFETY: the provider just wrote `m` completions there.
        unsafe { hooked.rewrite_completions(wc.add(out), m as usize, |i, d| delays.push((i, d))) };
        let mut kept = out;
        for i in 0..m as usize {
            // SAFETY: one of the `m` completions just written.
            let w = unsafe { wc.add(out + i).read() };
            let delay = delays.iter().find(|d| d.0 == i).map(|d| d.1);
            if delay.is_none() && s.held.is_empty() {
                // SAFETY: `kept` <= out + i: within what was written.
                unsafe { wc.add(kept).write(w) };
                kept += 1;
                continue;
            }
            s.hold(now, delay, Snapshot::of(w));
        }
        kept as c_int
    }

    /// The held state of CQ `cq`, if it has one.
    pub fn state(&self, cq: usize) -> Option<Arc<CqDelay>> {
        self.cqs.lock().get(&cq).cloned()
    }
}

/// Adds `n` (wrapping) to the CQ's count of acked completion events.
///
/// # Safety
/// `cq` is a live CQ.
unsafe fn add_comp_events_completed(cq: *mut ibv_cq, n: u32) {
    // SAFETY: per the contract; libibverbs made the mutex with the CQ and
    // changes the count under it (`ibv_ack_cq_events`).
    unsafe {
        let (mutex, count) = (
            addr_of_mut!((*cq).mutex),
            addr_of_mut!((*cq).comp_events_completed),
        );
        crate::event_acks::add_acked(mutex, count, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passthrough::test_hooked;
    use std::cell::RefCell;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    thread_local! {
        /// The completions the fake provider's CQ holds, as wr_ids.
        static PROVIDER: RefCell<VecDeque<u64>> = const { RefCell::new(VecDeque::new()) };
    }

    /// A provider's poll member: successful RECV completions of QP 7.
    unsafe extern "C" fn fake_poll(_cq: *mut ibv_cq, num: c_int, wc: *mut ibv_wc) -> c_int {
        let mut n = 0;
        while n < num as usize {
            let Some(id) = PROVIDER.with(|p| p.borrow_mut().pop_front()) else {
                break;
            };
            let mut w = ibv_wc::ZEROED;
            (w.wr_id, w.status, w.opcode, w.qp_num) = (id, IBV_WC_SUCCESS, IBV_WC_RECV, 7);
            // SAFETY: the caller's array holds `num` completions.
            unsafe { wc.add(n).write(w) };
            n += 1;
        }
        n as c_int
    }

    const CQ: usize = 0x1000;

    /// A completion channel of `d`'s context, merged, over a socketpair
    /// standing in for the kernel's descriptor: the channel, its merged
    /// descriptor, and the pair's ends (kept open while they are used).
    fn merged_channel(d: &Delays) -> (ibv_comp_channel, Arc<MergedFd>, [OwnedFd; 2]) {
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two new descriptors, owned just below.
        assert_eq!(0, unsafe {
            libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, fds.as_mut_ptr())
        });
        // SAFETY: as above.
        let ends = unsafe { [OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])] };
        let mut channel = ibv_comp_channel {
            context: std::ptr::null_mut(),
            fd: ends[0].as_raw_fd(),
            refcnt: 0,
        };
        // SAFETY: the test's channel, not shared.
        unsafe { d.merge_channel(&mut channel).unwrap() };
        let merged = super::channel(channel.fd).unwrap();
        (channel, merged, ends)
    }

    fn poll(h: &Hooked) -> Vec<u64> {
        let mut wc = [ibv_wc::ZEROED; 8];
        let d = h.delays.as_ref().unwrap();
        // SAFETY: an array of 8 for a poll of 8; the CQ pointer is only a key.
        let n = unsafe { d.poll(h, fake_poll, (CQ as *mut ibv_cq, 8, wc.as_mut_ptr())) };
        wc[..n as usize].iter().map(|w| w.wr_id).collect()
    }

    fn provider_has(ids: &[u64]) {
        PROVIDER.with(|p| p.borrow_mut().extend(ids));
    }

    #[test]
    fn a_held_completion_keeps_the_later_ones_behind_it() {
        let h = test_hooked("completion nth=2 delay=40ms");
        // SAFETY: no channel.
        unsafe { h.delays.as_ref().unwrap().add_cq(CQ, std::ptr::null_mut()) };
        provider_has(&[1, 2, 3]);
        assert_eq!(poll(&h), [1], "the 2nd is held, the 3rd behind it");
        provider_has(&[4]);
        assert_eq!(
            poll(&h),
            [] as [u64; 0],
            "nothing is due, the provider is not asked"
        );
        let start = Instant::now();
        let mut got = Vec::new();
        while got.len() < 3 && start.elapsed() < Duration::from_secs(10) {
            got.extend(poll(&h));
        }
        assert!(
            start.elapsed() >= Duration::from_millis(30),
            "held about 40 ms"
        );
        assert_eq!(
            got,
            [2, 3, 4],
            "in order, the provider's after the held ones"
        );
    }

    #[test]
    fn an_armed_cq_gets_an_event_when_its_held_completion_is_due() {
        let h = test_hooked("completion delay=20ms");
        let d = h.delays.as_ref().unwrap();
        let (mut channel, merged, _kernel_ends) = merged_channel(d);
        // SAFETY: the live channel above.
        unsafe { d.add_cq(CQ, &mut channel) };
        provider_has(&[1]);
        d.arm(CQ);
        assert_eq!(poll(&h), [] as [u64; 0], "held");
        // Blocks until the timer goes off, then the event is the CQ's.
        let record = merged.next(|| d.raise_due(&merged)).unwrap();
        assert_eq!(record.element, CQ as u64);
        d.event_handed_out(CQ);
        assert_eq!(poll(&h), [1]);
        forget_channel(channel.fd);
    }

    #[test]
    fn a_destroy_takes_back_the_acks_of_raised_events_and_a_failed_one_gives_them_back() {
        let h = test_hooked("completion delay=20ms");
        let d = h.delays.as_ref().unwrap();
        let (mut channel, merged, _kernel_ends) = merged_channel(d);
        // A CQ as libibverbs makes it: a zeroed (initialised) mutex, no
        // completion events acked yet.
        let cq_ptr: *mut ibv_cq = Box::into_raw(Box::new(ibv_cq::ZEROED));
        // SAFETY: the test's CQ, freed at the end.
        let acked = || unsafe { std::ptr::addr_of!((*cq_ptr).comp_events_completed).read() };
        // SAFETY: the live channel above.
        unsafe { d.add_cq(cq_ptr as usize, &mut channel) };
        merged.raise(Record {
            element: cq_ptr as u64,
            event_type: 0,
        });
        assert_eq!(merged.next(|| {}).unwrap().element, cq_ptr as u64);
        // SAFETY: the test's CQ, alive for the calls.
        let kept = unsafe { d.remove_cq(cq_ptr) }.unwrap();
        assert_eq!(acked(), u32::MAX, "one ack taken back");
        // SAFETY: as above.
        unsafe { d.keep_cq(cq_ptr, kept) };
        assert_eq!(acked(), 0, "given back");
        // SAFETY: as above.
        unsafe { d.remove_cq(cq_ptr) };
        assert_eq!(acked(), u32::MAX, "and taken back again");
        forget_channel(channel.fd);
        // SAFETY: made by Box::into_raw above, no longer used.
        drop(unsafe { Box::from_raw(cq_ptr) });
    }
}
