//! The configuration of softverbs devices, shared by the provider and the
//! `softverbs` command (see [`config`] for the format).

mod config;
pub mod sysfs_tree;
pub use softverbs_transport::netif;

pub use config::{parse_file, parse_inline, Config, ConfigError, PassthroughDevice, SoftDevice};
