//! The host daemon that owns UDP 4791 (`softverbs daemon`) and a
//! context's link to it. See docs/architecture.md, "The host daemon".

mod address_claim;
pub mod client;
mod cm_connections;
mod cm_requests;
pub mod protocol;
pub mod record;
pub mod server;
pub mod steering;
mod waiting_requests;

pub use client::{DaemonAddress, LookupRefused, PeerRegion, Session};
pub use protocol::{udp_port, DEFAULT_SOCKET, ROCE_PORT};
pub use server::{Daemon, DaemonConfig, DaemonStats};
