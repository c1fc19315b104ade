//! The rdma_cm of softverbs, sans-IO.
//!
//! librdmacm talks to the kernel's rdma_cm through `write()` commands on
//! `/dev/infiniband/rdma_cm` (docs/rdma-cm.md, section 2). An [`Agent`]
//! is that kernel side for one process: it executes the commands
//! ([`Agent::command`], the buffer librdmacm wrote), keeps the cm_ids and
//! each channel's event queue, and speaks the InfiniBand CM with peers:
//! REQ, REP, RTU, REJ, MRA, DREQ and DREP as MADs to QP1 over RoCEv2
//! (IBTA volume 1 chapter 12), so it interoperates with the kernel's CM.
//!
//! Like the engine it does no I/O: MADs go out through
//! [`Agent::poll_mad`] and come in through [`Agent::handle_mad`], time
//! through [`Agent::poll_timeout`] and [`Agent::handle_timeout`], and the
//! host-wide port space (the daemon's) is reached through the
//! [`PortSpace`] an embedder passes to each command.

pub mod abi;
mod agent;
mod id;
mod query;
mod resolution;

pub use agent::{Agent, Device, Nanos, OutMad, PortSpace, Reply, ID_HANDLES};
