//! Differential conformance: the same random verbs sequences on two
//! devices through libibverbs (softverbs, and a real device through a
//! pass-through device), compared field by field. The operations and their
//! strategies are the in-process suite's ([`crate::ops`]); what differs is
//! that each backend is a process running the executor
//! (tests/conformance/verbs_exec.c), one verb line at a time, and that the
//! reference is the other device instead of the model.
//!
//! * [`objects`]: what the first backend holds, from its answers.
//! * [`limits`], [`steps`], [`fields`]: an operation as a verb line, with
//!   device-independent values.
//! * [`datapath`]: data-path cases (two connected QPs, every opcode).
//! * [`backend`]: one executor process.
//! * [`judge`], [`known`]: comparing two answers; the differences that are
//!   known and explained.
//! * [`runner`], [`repro`]: cases, shrinking, reports and C reproducers.

pub mod backend;
pub mod datapath;
pub mod fields;
pub mod judge;
pub mod known;
pub mod limits;
pub mod objects;
pub mod repro;
pub mod runner;
pub mod steps;

pub use backend::BackendSpec;
pub use runner::{run, Broken, Plan};
