//! Conformance suite: an independent reference model of the verbs rules
//! softverbs implements, and the machinery to check the engine against it.
//!
//! The model is written from docs/conformance.md and the manual pages in
//! `shared/seeds/`, never by calling the engine's own validation
//! (`transition_rule`, `mask_allowed`, `AhAttr::validate`, ...): a rule the
//! engine gets wrong must show up as a disagreement. The engine's types
//! (handles, attribute structs, masks) are used only as plain data.
//!
//! * [`table`] parses the machine-readable transition table of the docs.
//! * [`values`], [`stored`]: `ibv_modify_qp` value checks and what a
//!   successful call stores.
//! * [`model`]: the expected world (PDs, MRs, AHs, CQs, SRQs, QPs, events)
//!   and the outcome of every verb, as errno or new state.
//! * [`ops`], [`harness`], [`coverage`]: random operation sequences, the
//!   driver that runs them on engine and model side by side, and what the
//!   sequences reached.
//! * [`bringup`]: legal paths and valid attributes for deterministic tests.
//! * [`differential`]: the same sequences on two devices through
//!   libibverbs (`softverbs conformance`).

pub mod bringup;
pub mod coverage;
pub mod device;
pub mod differential;
pub mod errno;
pub mod harness;
pub mod model;
pub mod names;
pub mod ops;
pub mod stored;
pub mod table;
pub mod values;

pub use errno::{Outcome, EBUSY, EINVAL, ENOMEM, EOPNOTSUPP};
pub use model::Model;
pub use table::{Row, Rule, TransitionTable};
