//! Types of `<linux/sched/types.h>`, x86_64 layout (checked against the
//! system header by `tests/layout.rs`).

use super::ffi_struct;

ffi_struct! {
    /// `struct sched_attr`, the argument of `sched_setattr(2)`.
    pub struct sched_attr {
        pub size: u32,
        pub sched_policy: u32,
        pub sched_flags: u64,
        pub sched_nice: i32,
        pub sched_priority: u32,
        /// For `SCHED_OTHER` (Linux 6.12 and later): the time slice asked
        /// for, in nanoseconds (0: the default).
        pub sched_runtime: u64,
        pub sched_deadline: u64,
        pub sched_period: u64,
        pub sched_util_min: u32,
        pub sched_util_max: u32,
    }
}
