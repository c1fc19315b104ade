//! The verbs trace: `SOFTVERBS_TRACE=FILE` records every verb with its
//! arguments, result and errno, every completion and every event, one
//! JSON object per line; `softverbs trace summarize FILE` reads it back.
//!
//! * [`record`]: what a line holds;
//! * [`writer`]: the process's trace file;
//! * [`own_file`]: a process-wide output file one process writes alone;
//! * [`summary`]: per-QP statistics of a trace.

pub mod own_file;
pub mod record;
pub mod summary;
pub mod writer;

pub use record::{address, event_name, Completion, Event, Fault, Line, Record, Verb, Wr};
pub use summary::Summary;
pub use writer::{observe_faults, on, open_from_env, process_path, write};
