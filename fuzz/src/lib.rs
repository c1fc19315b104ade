//! Fuzz targets of softverbs and what they share. Each target is a
//! function from bytes to nothing that panics on a finding; the libFuzzer
//! binaries in `fuzz_targets/` call them, and so do the tests, which replay
//! the committed corpus on the stable toolchain. See README.md.

pub mod bringup;
pub mod bytes;
pub mod memory;
pub mod packets;
pub mod seeds;
pub mod target;
pub mod verbs;
pub mod wire;

/// A target: panics on a finding.
pub type Run = fn(&[u8]);

/// The targets by name, as `cargo fuzz` knows them.
pub const TARGETS: [(&str, Run); 3] = [
    ("wire", wire::run),
    ("packets", packets::run),
    ("verbs", verbs::run),
];
