//! `completion delay=` on extended CQs of a pass-through context: the
//! completions `ibv_start_poll` and `ibv_next_poll` make current are held
//! as `ibv_poll_cq`'s are (`passthrough_delay`), and a held one, once
//! due, is made current in the provider's place.
//!
//! A held completion is kept as every reader of the CQ returned it while
//! it was the provider's current one (a snapshot). softverbs puts its own
//! readers and `end_poll` in the CQ, which return the snapshot's fields
//! while a held completion is current and ask the provider's otherwise.
//! A completion that is held is consumed from the provider at once: its
//! polling session is ended right there, so the provider's own state
//! never holds a completion softverbs is keeping. The CQ's session lock
//! (`CqDelay::begin_session`), taken by `ibv_start_poll` and given up by
//! `ibv_end_poll`, makes one thread at a time the reader of the current
//! completion, held or the provider's, as the provider's own CQ lock does.

use crate::ffi::*;
use crate::passthrough::Hooked;
use crate::passthrough_delay::{CqDelay, Delays, HeldCq, Snapshot};
use std::os::raw::{c_int, c_uint};
use std::ptr::{addr_of, addr_of_mut};
use std::sync::Arc;
use std::time::Instant;

type Reader<T> = Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> T>;

/// The provider's own polling members and readers of an extended CQ.
#[derive(Debug, Clone, Copy)]
pub struct Members {
    start: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int>,
    next: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int>,
    end: Option<unsafe extern "C" fn(*mut ibv_cq_ex)>,
    read_opcode: Reader<u32>,
    read_vendor_err: Reader<u32>,
    read_byte_len: Reader<u32>,
    read_imm_data: Reader<u32>,
    read_qp_num: Reader<u32>,
    read_src_qp: Reader<u32>,
    read_wc_flags: Reader<c_uint>,
    read_slid: Reader<u32>,
    read_sl: Reader<u8>,
    read_dlid_path_bits: Reader<u8>,
    read_completion_ts: Reader<u64>,
    read_cvlan: Reader<u16>,
    read_flow_tag: Reader<u32>,
    read_tm_info: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_wc_tm_info)>,
    read_completion_wallclock_ns: Reader<u64>,
}

/// An extended CQ's polling session.
#[derive(Debug)]
pub struct Session {
    members: Members,
    /// The held completion the application is reading, if it is one.
    current: Option<Snapshot>,
    /// A session of the provider's is open (its `end_poll` is owed).
    provider_open: bool,
    /// The application's session holds the CQ's session lock
    /// (`CqDelay::begin_session`), given up at its `ibv_end_poll`.
    holds_session: bool,
}

/// Takes over the polling of extended CQ `cq` of a context with delay
/// rules: keeps the provider's members and puts softverbs' `end_poll` and
/// readers (where the provider has them) in their place. Called before
/// the trace replaces `start_poll`, `next_poll` and `read_vendor_err`,
/// which then call [`start_poll`], [`next_poll`] and [`held_vendor_err`].
///
/// # Safety
/// `cq` is a CQ the provider just made, not yet handed out, and
/// [`Delays::add_cq`] was called for it.
pub unsafe fn install(delays: &Delays, cq: *mut ibv_cq_ex) {
    let Some(state) = delays.state(cq as usize) else {
        return;
    };
    // Each member named `$m` is replaced by softverbs' function of the
    // same name, where the provider has one; the provider's is kept.
    macro_rules! take {
        ($m:ident) => {{
            // SAFETY: per the contract, the CQ is not yet shared.
            let own = unsafe { addr_of!((*cq).$m).read() };
            if own.is_some() {
                // SAFETY: as above; ours has the member's C type.
                unsafe { addr_of_mut!((*cq).$m).write(Some($m)) };
            }
            own
        }};
    }
    // SAFETY: as above.
    let (start, next) = unsafe {
        (
            addr_of!((*cq).start_poll).read(),
            addr_of!((*cq).next_poll).read(),
        )
    };
    // SAFETY: as above.
    let vendor_err = unsafe { addr_of!((*cq).read_vendor_err).read() };
    let members = Members {
        start,
        next,
        end: take!(end_poll),
        read_opcode: take!(read_opcode),
        read_vendor_err: vendor_err,
        read_byte_len: take!(read_byte_len),
        read_imm_data: take!(read_imm_data),
        read_qp_num: take!(read_qp_num),
        read_src_qp: take!(read_src_qp),
        read_wc_flags: take!(read_wc_flags),
        read_slid: take!(read_slid),
        read_sl: take!(read_sl),
        read_dlid_path_bits: take!(read_dlid_path_bits),
        read_completion_ts: take!(read_completion_ts),
        read_cvlan: take!(read_cvlan),
        read_flow_tag: take!(read_flow_tag),
        read_tm_info: take!(read_tm_info),
        read_completion_wallclock_ns: take!(read_completion_wallclock_ns),
    };
    state.lock().ex = Some(Session {
        members,
        current: None,
        provider_open: false,
        holds_session: false,
    });
}

/// `ibv_start_poll` of an extended CQ of `hooked`, whose delay state is
/// `delays`: a held completion that is due, else (when none is held) the
/// provider's, unless a rule holds it. 0 with a current completion,
/// ENOENT with none (and no session left open), or the provider's error.
///
/// # Safety
/// `cq` is one of the context's extended CQs, passed to [`install`];
/// `attr` the caller's.
pub unsafe fn start_poll(
    hooked: &Hooked,
    delays: &Delays,
    cq: *mut ibv_cq_ex,
    attr: *mut ibv_poll_cq_attr,
) -> c_int {
    let Some(state) = delays.state(cq as usize) else {
        return libc::EINVAL;
    };
    // As the provider's CQ lock: one session at a time, held ones too.
    state.begin_session();
    // SAFETY: per the contract.
    let ret = unsafe { poll(hooked, &state, cq, Step::Start(attr)) };
    let taken = ret == 0 && {
        let mut s = state.lock();
        s.ex.as_mut().map(|e| e.holds_session = true).is_some()
    };
    if !taken {
        // SAFETY: taken above; no session follows a failed start.
        unsafe { state.end_session() };
    }
    ret
}

/// `ibv_next_poll`, as [`start_poll`]. ENOENT leaves the session for the
/// application's `ibv_end_poll`.
///
/// # Safety
/// As [`start_poll`], inside a session it opened.
pub unsafe fn next_poll(hooked: &Hooked, delays: &Delays, cq: *mut ibv_cq_ex) -> c_int {
    let Some(state) = delays.state(cq as usize) else {
        return libc::EINVAL;
    };
    // SAFETY: per the contract.
    unsafe { poll(hooked, &state, cq, Step::Next) }
}

/// The vendor error of the held completion current on `cq`, if one is.
pub fn held_vendor_err(cq: *mut ibv_cq_ex) -> Option<u32> {
    with_session(cq, |_, s| s.current.map(|c| c.wc.vendor_err)).flatten()
}

/// Which verb asks.
#[derive(Clone, Copy)]
enum Step {
    Start(*mut ibv_poll_cq_attr),
    Next,
}

/// What the provider's current completion becomes.
enum Judged {
    /// The application reads it from the provider.
    Current,
    /// Held (the provider's session ended).
    Held,
}

/// # Safety
/// As [`start_poll`].
unsafe fn poll(hooked: &Hooked, state: &CqDelay, cq: *mut ibv_cq_ex, step: Step) -> c_int {
    let now = Instant::now();
    let provider = {
        let mut s = state.lock();
        let Some(members) = s.ex.as_ref().map(|e| e.members) else {
            return libc::EINVAL;
        };
        let reading_held = s.ex.as_ref().is_some_and(|e| e.current.is_some());
        if matches!(step, Step::Start(_)) || reading_held {
            if let Some(due) = s.take_due(now) {
                // SAFETY: per the contract.
                unsafe { present(cq, &mut s, due) };
                return 0;
            }
            if !s.held.is_empty() {
                set_current(&mut s, None);
                return libc::ENOENT; // the provider's wait behind the held
            }
        }
        set_current(&mut s, None);
        let mut none = ibv_poll_cq_attr { comp_mask: 0 };
        // A session of the provider's is opened (by the application's
        // start, or after the held ones it read), or gone on with.
        let (start, next) = (members.start, members.next);
        // SAFETY: the provider's own members of this CQ, as libibverbs
        // calls them, with the caller's attr or an empty one.
        let ret = unsafe {
            match (step, reading_held) {
                (Step::Start(attr), _) => start.map_or(libc::EINVAL, |f| f(cq, attr)),
                (Step::Next, true) => start.map_or(libc::EINVAL, |f| f(cq, &mut none)),
                (Step::Next, false) => next.map_or(libc::EINVAL, |f| f(cq)),
            }
        };
        if let Some(e) = s.ex.as_mut() {
            e.provider_open = ret == 0 || matches!(step, Step::Next) && !reading_held;
        }
        if ret != 0 {
            return ret;
        }
        members
    };
    // The status rules read the completion through the CQ's readers,
    // which take the state's lock: not held here.
    // SAFETY: the provider's current completion.
    let delay = unsafe { hooked.rewrite_current(cq) };
    let mut s = state.lock();
    // SAFETY: as above.
    match unsafe { judge(hooked, &mut s, cq, provider, delay, now) } {
        Judged::Current => 0,
        Judged::Held => {
            // The one just held is due at once only with a zero delay.
            if let Some(due) = s.take_due(now) {
                // SAFETY: per the contract.
                unsafe { present(cq, &mut s, due) };
                return 0;
            }
            libc::ENOENT
        }
    }
}

/// The provider's current completion: read by the application unless a
/// delay rule fired or completions are held before it; then kept, and
/// the provider's session ended (consuming it).
///
/// # Safety
/// `cq` has a provider's current completion in an open session.
unsafe fn judge(
    hooked: &Hooked,
    s: &mut HeldCq,
    cq: *mut ibv_cq_ex,
    members: Members,
    delay: Option<std::time::Duration>,
    now: Instant,
) -> Judged {
    if delay.is_none() && s.held.is_empty() {
        return Judged::Current;
    }
    // SAFETY: per the contract.
    let snapshot = unsafe { snapshot(hooked, cq, &members) };
    s.hold(now, delay, snapshot);
    if let Some(f) = members.end {
        // SAFETY: ends the session the provider opened.
        unsafe { f(cq) };
    }
    if let Some(e) = s.ex.as_mut() {
        e.provider_open = false;
    }
    Judged::Held
}

/// Every field of the provider's current completion of `cq`.
///
/// # Safety
/// As [`judge`].
unsafe fn snapshot(hooked: &Hooked, cq: *mut ibv_cq_ex, m: &Members) -> Snapshot {
    // SAFETY: per the contract: the provider's readers of its current
    // completion, and the public fields its poll wrote.
    unsafe {
        let mut wc = ibv_wc::ZEROED;
        wc.wr_id = addr_of!((*cq).wr_id).read();
        wc.status = addr_of!((*cq).status).read();
        wc.opcode = read(cq, m.read_opcode);
        wc.vendor_err = hooked
            .vendor_err_of(cq)
            .unwrap_or_else(|| read(cq, m.read_vendor_err));
        wc.byte_len = read(cq, m.read_byte_len);
        wc.u.imm_data = read(cq, m.read_imm_data);
        wc.qp_num = read(cq, m.read_qp_num);
        wc.src_qp = read(cq, m.read_src_qp);
        wc.wc_flags = read(cq, m.read_wc_flags);
        wc.slid = read(cq, m.read_slid) as u16;
        wc.sl = read(cq, m.read_sl);
        wc.dlid_path_bits = read(cq, m.read_dlid_path_bits);
        let mut tm_info = ibv_wc_tm_info { tag: 0, priv_: 0 };
        if let Some(f) = m.read_tm_info {
            f(cq, &mut tm_info);
        }
        Snapshot {
            wc,
            completion_ts: read(cq, m.read_completion_ts),
            completion_wallclock_ns: read(cq, m.read_completion_wallclock_ns),
            cvlan: read(cq, m.read_cvlan),
            flow_tag: read(cq, m.read_flow_tag),
            tm_info,
        }
    }
}

/// A provider reader's value (the type's zero where it has none).
///
/// # Safety
/// As [`judge`].
unsafe fn read<T: Default>(cq: *mut ibv_cq_ex, f: Reader<T>) -> T {
    // SAFETY: per the contract.
    f.map_or_else(T::default, |f| unsafe { f(cq) })
}

/// Makes held completion `h` the current one of `cq`.
///
/// # Safety
/// `cq` is live; the application reads its public fields after the call.
unsafe fn present(cq: *mut ibv_cq_ex, s: &mut HeldCq, h: Snapshot) {
    // SAFETY: per the contract.
    unsafe {
        addr_of_mut!((*cq).wr_id).write(h.wc.wr_id);
        addr_of_mut!((*cq).status).write(h.wc.status);
    }
    set_current(s, Some(h));
}

fn set_current(s: &mut HeldCq, current: Option<Snapshot>) {
    if let Some(e) = s.ex.as_mut() {
        e.current = current;
    }
}

/// The delay state of extended CQ `cq` (found through its context).
fn state_of(cq: *mut ibv_cq_ex) -> Option<Arc<CqDelay>> {
    // SAFETY: a live extended CQ the application passed (its context is
    // a plain field).
    let context = unsafe { addr_of!((*cq).context).read() };
    crate::passthrough::hooked(context)?
        .delays
        .as_ref()?
        .state(cq as usize)
}

/// Runs `f` on the session of `cq`, if it has one.
fn with_session<R>(cq: *mut ibv_cq_ex, f: impl FnOnce(&Members, &mut Session) -> R) -> Option<R> {
    let state = state_of(cq)?;
    let mut s = state.lock();
    let session = s.ex.as_mut()?;
    let members = session.members;
    Some(f(&members, session))
}

/// `ibv_end_poll`: ends the provider's session, if one is open, then
/// gives up the CQ's session lock.
unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    let found = crate::guard::guard(None, || {
        let state = state_of(cq)?;
        let (end, held) = {
            let mut s = state.lock();
            let e = s.ex.as_mut()?;
            e.current = None;
            let end = std::mem::take(&mut e.provider_open).then_some(e.members.end);
            (end.flatten(), std::mem::take(&mut e.holds_session))
        };
        Some((state, end, held))
    });
    let Some((state, end, held)) = found else {
        return;
    };
    if let Some(f) = end {
        // SAFETY: the provider's own member, for the session it opened.
        unsafe { f(cq) };
    }
    if held {
        // SAFETY: taken by this session's start_poll, given up once.
        unsafe { state.end_session() };
    }
}

/// A reader: the held completion's field, or the provider's reader.
fn reader<T: Default>(
    cq: *mut ibv_cq_ex,
    held: impl FnOnce(&Snapshot) -> T,
    own: impl FnOnce(&Members) -> Reader<T>,
) -> T {
    let found = crate::guard::guard(None, || {
        with_session(cq, |m, s| match &s.current {
            Some(h) => Ok(held(h)),
            None => Err(own(m)),
        })
    });
    match found {
        Some(Ok(v)) => v,
        // SAFETY: the provider's own reader of its current completion.
        Some(Err(Some(f))) => unsafe { f(cq) },
        _ => T::default(),
    }
}

macro_rules! readers {
    ($($name:ident: $ty:ty = |$h:ident| $held:expr;)*) => {$(
        unsafe extern "C" fn $name(cq: *mut ibv_cq_ex) -> $ty {
            reader(cq, |$h| $held, |m| m.$name)
        }
    )*};
}

readers! {
    read_opcode: u32 = |h| h.wc.opcode;
    read_byte_len: u32 = |h| h.wc.byte_len;
    // SAFETY: both members of the union are a u32.
    read_imm_data: u32 = |h| unsafe { h.wc.u.imm_data };
    read_qp_num: u32 = |h| h.wc.qp_num;
    read_src_qp: u32 = |h| h.wc.src_qp;
    read_wc_flags: c_uint = |h| h.wc.wc_flags;
    read_slid: u32 = |h| u32::from(h.wc.slid);
    read_sl: u8 = |h| h.wc.sl;
    read_dlid_path_bits: u8 = |h| h.wc.dlid_path_bits;
    read_completion_ts: u64 = |h| h.completion_ts;
    read_cvlan: u16 = |h| h.cvlan;
    read_flow_tag: u32 = |h| h.flow_tag;
    read_completion_wallclock_ns: u64 = |h| h.completion_wallclock_ns;
}

/// `ibv_wc_read_tm_info`.
unsafe extern "C" fn read_tm_info(cq: *mut ibv_cq_ex, out: *mut ibv_wc_tm_info) {
    let found = crate::guard::guard(None, || {
        with_session(cq, |m, s| {
            s.current.map(|h| h.tm_info).ok_or(m.read_tm_info)
        })
    });
    match found {
        // SAFETY: the caller's out pointer.
        Some(Ok(info)) => unsafe { out.write(info) },
        // SAFETY: the provider's own reader.
        Some(Err(Some(f))) => unsafe { f(cq, out) },
        _ => {}
    }
}
