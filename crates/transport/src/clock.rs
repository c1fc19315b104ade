//! The engine's clock: nanoseconds since the driver started, from the
//! monotonic clock.

use softverbs_engine::Nanos;
use std::time::{Duration, Instant};

/// Converts between `Instant`s and engine time.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch: Instant,
}

impl Clock {
    /// A clock whose time 0 is now.
    pub fn start() -> Clock {
        Clock {
            epoch: Instant::now(),
        }
    }

    /// The current engine time.
    pub fn now(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as Nanos
    }

    /// How long from now until engine time `at` (zero if past).
    pub fn until(&self, at: Nanos) -> Duration {
        Duration::from_nanos(at.saturating_sub(self.now()))
    }
}
