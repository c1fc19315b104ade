//! The one error of the bounded shared structures: no room.

use std::fmt;

/// A table, ring or queue in a shared region has no room for another
/// entry (or, for a corrupt region, no usable room).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

impl fmt::Display for Full {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("shared structure full")
    }
}

impl std::error::Error for Full {}
