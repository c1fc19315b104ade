//! A lock that a C API takes in one call and releases in a later one:
//! `ibv_start_poll` .. `ibv_end_poll` on an extended CQ and `ibv_wr_start`
//! .. `ibv_wr_complete`/`ibv_wr_abort` on an extended QP are critical
//! sections the provider must provide (ibv_create_cq_ex(3), ibv_wr_post(3),
//! CONCURRENCY), so no guard object can span them. The data it protects is
//! the provider's own state of that CQ or QP.
//!
//! A CQ created with `IBV_CREATE_CQ_ATTR_SINGLE_THREADED` gets an unlocked
//! one: the application promised one thread at a time.

use parking_lot::lock_api::RawMutex as _;
use std::cell::UnsafeCell;

/// Provider state of one CQ or QP, behind a lock held across C calls.
pub struct CallLock<T> {
    raw: parking_lot::RawMutex,
    locked: bool,
    data: UnsafeCell<T>,
}

// SAFETY: the data is reached only inside the critical section (see
// `data`), which the raw mutex makes exclusive; with `locked` false the
// application promised (SINGLE_THREADED) that only one thread uses it.
unsafe impl<T: Send> Sync for CallLock<T> {}

impl<T: std::fmt::Debug> std::fmt::Debug for CallLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallLock")
            .field("locked", &self.locked)
            .finish_non_exhaustive()
    }
}

impl<T> CallLock<T> {
    /// `data` behind a lock, or behind none when `locked` is false.
    pub fn new(data: T, locked: bool) -> CallLock<T> {
        CallLock {
            raw: parking_lot::RawMutex::INIT,
            locked,
            data: UnsafeCell::new(data),
        }
    }

    /// Enters the critical section, waiting for another thread to leave it.
    pub fn enter(&self) {
        if self.locked {
            self.raw.lock();
        }
    }

    /// Leaves the critical section.
    ///
    /// # Safety
    /// The calling thread entered it and has not left it since.
    pub unsafe fn leave(&self) {
        if self.locked {
            // SAFETY: per the contract this thread holds the lock.
            unsafe { self.raw.unlock() };
        }
    }

    /// The protected data.
    ///
    /// # Safety
    /// The calling thread is inside the critical section, and the pointer
    /// is not used after it leaves.
    pub unsafe fn data(&self) -> *mut T {
        self.data.get()
    }

    /// Runs `f` inside the critical section (for a call that is a whole
    /// critical section by itself, such as `ibv_poll_cq`); leaves it even
    /// if `f` panics.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        struct Leave<'a, T>(&'a CallLock<T>);
        impl<T> Drop for Leave<'_, T> {
            fn drop(&mut self) {
                // SAFETY: made right after entering, dropped once.
                unsafe { self.0.leave() };
            }
        }
        self.enter();
        let _leave = Leave(self);
        // SAFETY: inside the section until `_leave` drops, after `f`.
        f(unsafe { &mut *self.data() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_entered_in_one_call_excludes_other_threads_until_left() {
        let lock = std::sync::Arc::new(CallLock::new(Vec::new(), true));
        lock.enter();
        let other = {
            let lock = lock.clone();
            std::thread::spawn(move || lock.with(|v| v.push(2)))
        };
        // SAFETY: this thread is inside the section.
        unsafe { (*lock.data()).push(1) };
        // SAFETY: entered above.
        unsafe { lock.leave() };
        other.join().unwrap();
        assert_eq!(lock.with(|v| v.clone()), [1, 2]);
    }
}
