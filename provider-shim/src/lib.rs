//! softverbs rdma-core provider shim: the C ABI of `libsoftverbs-rdmav34.so`.
//!
//! Unsafe code lives here and only here: it is what the C ABI needs
//! (raw pointers from libibverbs and applications, libc calls), and every
//! block says why it is sound.
//!
//! * [`device`]: the soft devices as `verbs_device`s (the
//!   `softverbs-config` crate decides which exist);
//! * [`preload`]: the exported functions that make `LD_PRELOAD` work;
//! * [`plugin`]: registration with libibverbs when it loads us as a
//!   provider, with [`ioctl`] answering the kernel commands libibverbs
//!   sends itself (through the GOT slot [`got`] redirects);
//! * [`context`]: `ibv_open_device`/`ibv_close_device`, one engine driver
//!   per context; [`events`]: async and completion event descriptors;
//!   [`event_acks`]: destroys wait for events to be acknowledged;
//! * [`ops`], [`verbs_basic`], [`verbs_qp`], [`qp_ex`], [`cq_ex`]: the verbs;
//!   [`trace_ops`]: the same with the verbs trace (`SOFTVERBS_TRACE`);
//!   [`passthrough`]: devices that front a real one, [`passthrough_qp_error`]
//!   and [`passthrough_delay`] (with [`passthrough_delay_ex`] for extended
//!   CQs) their `qp_error` and `completion delay=` rules, raising events on [`merged_fd`] descriptors;
//!   [`call_lock`]: the per-CQ and per-QP critical sections;
//! * [`convert`]: C structs to engine types; [`process_memory`]: the
//!   engine's view of application memory; [`cross_process`]: other
//!   processes' memory and shared regions for the same-host path;
//!   [`guard`]: no panic crosses C; [`thread_slice`]: the progress
//!   thread's time slice;
//! * [`ffi`]: the C declarations; [`libibverbs`]: its private entry points.

#![allow(unsafe_code)]

pub mod call_lock;
pub mod context;
pub use softverbs_api::convert;
pub mod cq_ex;
pub mod cross_process;
pub mod daemon_program;
pub mod device;
pub mod device_view;
pub mod event_acks;
pub mod events;
pub mod exec_lock;
pub mod fault_handler_watch;
pub use softverbs_ffi as ffi;
pub mod got;
pub mod guard;
pub mod guarded_access;
pub mod ioctl;
pub mod libc_next;
pub mod libibverbs;
pub mod mapping;
pub mod memory_room;
pub mod merged_fd;
pub mod ops;
pub mod own_memory;
pub mod passthrough;
pub mod passthrough_delay;
pub mod passthrough_delay_ex;
pub mod passthrough_qp_error;
pub mod plugin;
pub mod preload;
pub mod process_memory;
pub mod qp_ex;
pub mod rdma_cm;
pub mod thread_slice;
pub mod trace_ops;
pub mod verbs_basic;
pub mod verbs_mcast;
pub mod verbs_qp;
