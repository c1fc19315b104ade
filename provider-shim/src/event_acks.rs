//! Destroying a CQ, QP or SRQ waits until the application has
//! acknowledged every event it took for the object (ibv_get_cq_event(3),
//! ibv_get_async_event(3)), so no thread is left holding an event that
//! names a freed object.
//!
//! The acknowledgements never reach the provider: `ibv_ack_cq_events` and
//! `ibv_ack_async_event` are libibverbs functions that add to counters in
//! the C objects (`ibv_cq.comp_events_completed` and
//! `async_events_completed`, `ibv_qp.events_completed`,
//! `ibv_srq.events_completed`) under the object's `mutex` and signal its
//! `cond`. What the provider counts is the other side, the events
//! reported: records read from the descriptors, as the kernel counts an
//! event when `read` dequeues it (events.rs keeps the count: records sent,
//! less those a destroy takes back unread). A destroy then waits on the
//! object's `cond` until the acknowledged counts reach the reported ones,
//! as libibverbs does after the kernel's destroy command.

use crate::ffi::*;
use std::collections::HashMap;
use std::ptr::addr_of_mut;

/// Events reported to the application for one object.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    /// Completion events (CQs only).
    pub comp: u32,
    /// Affiliated async events.
    pub async_events: u32,
}

/// Event counts per live object, keyed by the address of its C object
/// (the only thing an event names); an object not added is not counted.
#[derive(Debug, Default)]
pub struct Acks {
    counts: HashMap<usize, Delivered>,
}

impl Acks {
    /// Starts counting for a new object.
    pub fn add(&mut self, object: usize) {
        self.counts.insert(object, Delivered::default());
    }

    /// Stops counting for a destroyed object; its counts.
    pub fn remove(&mut self, object: usize) -> Delivered {
        self.counts.remove(&object).unwrap_or_default()
    }

    /// Adds to a live object's counts.
    pub fn count(&mut self, object: usize, bump: impl FnOnce(&mut Delivered)) {
        if let Some(d) = self.counts.get_mut(&object) {
            bump(d);
        }
    }
}

/// What the element of an async event holds, by the event's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventElement {
    /// A QP pointer.
    Qp,
    /// A CQ pointer.
    Cq,
    /// An SRQ pointer.
    Srq,
    /// A WQ pointer (a real device's; softverbs has no WQs).
    Wq,
    /// A port number (device events).
    Port,
}

/// The element an event of type `kind` carries.
pub fn event_element(kind: u32) -> EventElement {
    match kind {
        IBV_EVENT_QP_FATAL
        | IBV_EVENT_QP_REQ_ERR
        | IBV_EVENT_QP_ACCESS_ERR
        | IBV_EVENT_COMM_EST
        | IBV_EVENT_SQ_DRAINED
        | IBV_EVENT_PATH_MIG
        | IBV_EVENT_PATH_MIG_ERR
        | IBV_EVENT_QP_LAST_WQE_REACHED => EventElement::Qp,
        IBV_EVENT_CQ_ERR => EventElement::Cq,
        IBV_EVENT_SRQ_ERR | IBV_EVENT_SRQ_LIMIT_REACHED => EventElement::Srq,
        IBV_EVENT_WQ_FATAL => EventElement::Wq,
        _ => EventElement::Port,
    }
}

/// Adds `n` (wrapping) to an object's count of acked events, under its
/// mutex as libibverbs' ack functions change it: pass-through objects
/// (`passthrough_qp_error`, `passthrough_delay`) take back the acks of
/// events softverbs raised, which the kernel does not count.
///
/// # Safety
/// `mutex` is the initialised pthread mutex of a live C object and
/// `count` a counter of the same object that is only touched under it.
pub unsafe fn add_acked(mutex: *mut libc::pthread_mutex_t, count: *mut u32, n: u32) {
    if n == 0 {
        return;
    }
    // SAFETY: per the contract; raw pointers only, as libibverbs and the
    // application share the object.
    unsafe {
        libc::pthread_mutex_lock(mutex);
        count.write(count.read().wrapping_add(n));
        libc::pthread_mutex_unlock(mutex);
    }
}

/// Waits on `cond` (with `mutex`, both libibverbs-owned) until `acked()`.
///
/// # Safety
/// `mutex` and `cond` are initialised pthread objects of a live C object
/// that libibverbs' ack functions lock and signal; `acked` reads counters
/// they guard.
unsafe fn wait_until(
    mutex: *mut libc::pthread_mutex_t,
    cond: *mut libc::pthread_cond_t,
    acked: impl Fn() -> bool,
) {
    // SAFETY: per the contract; the counters are read under the mutex the
    // ack functions update them under.
    unsafe {
        libc::pthread_mutex_lock(mutex);
        while !acked() {
            libc::pthread_cond_wait(cond, mutex);
        }
        libc::pthread_mutex_unlock(mutex);
    }
}

/// Waits until the completion and async events handed out for a CQ are
/// acknowledged.
///
/// # Safety
/// `cq` is a CQ of ours, destroyed in the engine but not yet freed.
pub unsafe fn wait_cq_acks(cq: *mut ibv_cq, d: Delivered) {
    // SAFETY: libibverbs initialised the CQ's mutex and cond
    // (verbs_init_cq, after create_cq or create_cq_ex); the counters are
    // read field by field through raw pointers, never through a reference
    // to memory ibv_ack_cq_events writes.
    unsafe {
        let comp = addr_of_mut!((*cq).comp_events_completed);
        let asy = addr_of_mut!((*cq).async_events_completed);
        wait_until(addr_of_mut!((*cq).mutex), addr_of_mut!((*cq).cond), || {
            comp.read() >= d.comp && asy.read() >= d.async_events
        });
    }
}

/// Waits until the async events handed out for a QP are acknowledged.
///
/// # Safety
/// `qp` is a QP of ours, destroyed in the engine but not yet freed.
pub unsafe fn wait_qp_acks(qp: *mut ibv_qp, d: Delivered) {
    // SAFETY: ibv_create_qp (or our create_qp_ex) initialised the mutex
    // and cond; the counter is read through a raw pointer.
    unsafe {
        let acked = addr_of_mut!((*qp).events_completed);
        wait_until(addr_of_mut!((*qp).mutex), addr_of_mut!((*qp).cond), || {
            acked.read() >= d.async_events
        });
    }
}

/// Waits until the async events handed out for an SRQ are acknowledged.
///
/// # Safety
/// `srq` is an SRQ of ours, destroyed in the engine but not yet freed.
pub unsafe fn wait_srq_acks(srq: *mut ibv_srq, d: Delivered) {
    // SAFETY: ibv_create_srq initialised the mutex and cond; the counter
    // is read through a raw pointer.
    unsafe {
        let acked = addr_of_mut!((*srq).events_completed);
        wait_until(
            addr_of_mut!((*srq).mutex),
            addr_of_mut!((*srq).cond),
            || acked.read() >= d.async_events,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_events_of_live_objects_are_counted() {
        let mut acks = Acks::default();
        acks.add(0x1000);
        acks.count(0x1000, |d| d.comp += 1);
        acks.count(0x1000, |d| d.async_events += 1);
        acks.count(0x2000, |d| d.comp += 1);
        let d = acks.remove(0x1000);
        assert_eq!((d.comp, d.async_events), (1, 1));
        acks.count(0x1000, |d| d.comp += 1);
        assert_eq!(acks.remove(0x1000), Delivered::default());
    }

    #[test]
    fn a_destroy_waits_for_the_ack_of_an_event_it_handed_out() {
        // A zeroed ibv_cq holds statically initialised pthread objects
        // (glibc), as libibverbs' does after verbs_init_cq.
        let cq: &'static mut ibv_cq = Box::leak(Box::new(ibv_cq::ZEROED));
        let cq = cq as *mut ibv_cq as usize;
        let acker = std::thread::spawn(move || {
            let cq = cq as *mut ibv_cq;
            // What ibv_ack_cq_events(cq, 1) does.
            // SAFETY: the leaked CQ lives forever; fields through raw pointers.
            unsafe {
                libc::pthread_mutex_lock(addr_of_mut!((*cq).mutex));
                *addr_of_mut!((*cq).comp_events_completed) += 1;
                libc::pthread_cond_signal(addr_of_mut!((*cq).cond));
                libc::pthread_mutex_unlock(addr_of_mut!((*cq).mutex));
            }
        });
        let d = Delivered {
            comp: 1,
            async_events: 0,
        };
        // SAFETY: as above.
        unsafe { wait_cq_acks(cq as *mut ibv_cq, d) };
        acker.join().unwrap();
    }
}
