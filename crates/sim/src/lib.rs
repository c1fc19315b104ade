//! A deterministic simulator that proves the engine's transports: two
//! nodes (each an [`softverbs_engine::Engine`] with its memory) exchange
//! random workloads over a seeded network that loses, duplicates,
//! reorders and corrupts packets, on a virtual clock; a checker then
//! verifies every guarantee of RC, UC and UD against what happened.
//!
//! No socket is opened and nothing reads a clock or an OS random source:
//! a seed replays exactly.
//!
//! * [`workload`]: the random workload of a seed (pure data);
//! * [`plan`] and [`arena`]: where every buffer lives;
//! * [`node`] and [`setup`]: engines, memory, QPs brought to RTS;
//! * [`network`]: the faulty network, sealing and checking ICRCs;
//! * [`agents`]: the applications posting WRs;
//! * [`runner`]: the event loop; [`notify`]: completion-event checks;
//! * [`checker`]: the verdict; [`payload`]: message contents;
//! * [`batch`]: many seeds, panics caught; [`trace`]: `--verbose` output.

pub mod agents;
pub mod arena;
pub mod batch;
pub mod checker;
pub mod network;
pub mod node;
pub mod notify;
pub mod payload;
pub mod plan;
pub mod runner;
pub mod setup;
pub mod trace;
pub mod workload;

pub use batch::{run_seed, run_seeds, RunConfig, SeedResult};
pub use network::{Faults, NetConfig};
pub use runner::Limits;
pub use workload::Workload;
