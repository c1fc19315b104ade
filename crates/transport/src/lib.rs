//! RoCEv2 over UDP for the softverbs engine.
//!
//! * [`slots`]: how a destination QP number maps to a UDP port, so that
//!   several processes can share one device address;
//! * [`endpoint`]: a UDP socket serving one slot;
//! * [`driver`]: an engine, its memory and endpoints, and the progress
//!   thread; the threading model is described there;
//! * [`clock`]: the engine's time base.
//!
//! Every packet is sealed with its ICRC on the way out and checked on the
//! way in; a packet with a bad ICRC is dropped and counted.

pub mod clock;
pub mod driver;
pub mod endpoint;
pub mod gid_addr;
mod io_step;
mod send_batch;
pub mod slots;

pub use driver::{DeviceFailed, Driver, DriverConfig, Notify};
pub use io_step::IoStats;
pub use slots::SlotPorts;
