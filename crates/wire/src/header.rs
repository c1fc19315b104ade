//! The interface shared by all fixed-size headers.

use crate::error::{HeaderKind, WireError};

/// A fixed-size, big-endian header that can be parsed from and written to
/// byte slices without allocating.
pub trait Header: Sized + Copy {
    /// Length on the wire.
    const LEN: usize;
    /// Which header this is, for error reports.
    const KIND: HeaderKind;

    /// Decodes the header from the first [`Self::LEN`] bytes of `buf`
    /// (later bytes are ignored). Fails with [`WireError::Truncated`] if
    /// `buf` is shorter, or with a field-specific error.
    fn parse(buf: &[u8]) -> Result<Self, WireError>;

    /// Encodes the header into the first [`Self::LEN`] bytes of `buf` and
    /// returns [`Self::LEN`]. Fails with [`WireError::BufferTooSmall`] if
    /// `buf` is shorter, or if a field does not fit its wire width.
    fn write(&self, buf: &mut [u8]) -> Result<usize, WireError>;
}
