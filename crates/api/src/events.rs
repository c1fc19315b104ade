//! Completion and async events of a soft device: the driver reports them
//! ([`Notify`]) from whichever thread made progress, and the API's
//! `get_cq_event` and `get_async_event` wait for them here.

use parking_lot::{Condvar, Mutex};
use softverbs_engine::{AsyncEvent, CqId};
use softverbs_transport::Notify;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The events reported and not yet taken.
#[derive(Debug, Default)]
pub(crate) struct EventQueues {
    queues: Mutex<Queues>,
    arrived: Condvar,
}

#[derive(Debug, Default)]
struct Queues {
    completion: VecDeque<CqId>,
    asynchronous: VecDeque<AsyncEvent>,
    /// The device failed (IBV_EVENT_DEVICE_FATAL): nothing comes any more.
    fatal: bool,
}

impl EventQueues {
    /// The CQ of the oldest completion event, waiting at most `timeout`.
    pub(crate) fn completion(&self, timeout: Duration) -> Option<CqId> {
        self.wait(timeout, |q| q.completion.pop_front())
    }

    /// The oldest async event, waiting at most `timeout`.
    pub(crate) fn asynchronous(&self, timeout: Duration) -> Option<AsyncEvent> {
        self.wait(timeout, |q| q.asynchronous.pop_front())
    }

    /// Whether the device failed.
    pub(crate) fn fatal(&self) -> bool {
        self.queues.lock().fatal
    }

    fn wait<T>(
        &self,
        timeout: Duration,
        mut take: impl FnMut(&mut Queues) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        let mut q = self.queues.lock();
        loop {
            if let Some(event) = take(&mut q) {
                return Some(event);
            }
            if q.fatal || self.arrived.wait_until(&mut q, deadline).timed_out() {
                return take(&mut q);
            }
        }
    }

    fn push(&self, add: impl FnOnce(&mut Queues)) {
        add(&mut self.queues.lock());
        self.arrived.notify_all();
    }
}

impl Notify for EventQueues {
    fn completion_event(&self, cq: CqId) {
        self.push(|q| q.completion.push_back(cq));
    }

    fn async_event(&self, event: AsyncEvent) {
        self.push(|q| q.asynchronous.push_back(event));
    }

    fn device_fatal(&self) {
        self.push(|q| q.fatal = true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softverbs_engine::SrqId;
    use std::sync::Arc;

    #[test]
    fn a_waiter_gets_what_another_thread_reports_in_order() {
        let events = Arc::new(EventQueues::default());
        let reporter = Arc::clone(&events);
        let cq = CqId::default();
        let t = std::thread::spawn(move || {
            reporter.completion_event(cq);
            reporter.async_event(AsyncEvent::SrqLimitReached(SrqId::default()));
        });
        assert_eq!(events.completion(Duration::from_secs(30)), Some(cq));
        assert_eq!(
            events.asynchronous(Duration::from_secs(30)),
            Some(AsyncEvent::SrqLimitReached(SrqId::default()))
        );
        t.join().unwrap();
        assert_eq!(
            events.completion(Duration::from_millis(10)),
            None,
            "taken once"
        );
    }

    #[test]
    fn a_failed_device_ends_the_wait() {
        let events = EventQueues::default();
        events.device_fatal();
        assert_eq!(events.completion(Duration::from_secs(30)), None);
        assert!(events.fatal());
    }
}
