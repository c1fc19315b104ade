//! Fault injection for softverbs devices: the rules of
//! `SOFTVERBS_FAULTS` (grammar and examples in docs/fault-injection.md)
//! and the decisions they make. Pure and seeded, like the engine: the
//! engine asks about posts, completions and QP errors, the transport about
//! packets, and the same rules and seed give the same faults.
//!
//! * [`spec`]: parsing the rules.
//! * [`rule`]: what a rule is.
//! * [`faults`]: one device's rules at run time.
//! * [`names`]: errno, status and opcode names.

pub mod faults;
pub mod names;
pub mod rule;
pub mod spec;

pub use faults::{CompletionFault, Faults, Observer, Part, TimedQpError};
pub use rule::{Action, PacketAction, QpErrorWhen, Queue, Rule};
pub use spec::{FaultSpec, ParseError};
