//! 24-bit wire quantities: packet sequence numbers, queue pair numbers and
//! message sequence numbers.
//!
//! Each is a newtype so that a value too wide for its field cannot reach the
//! encoder, and so that a PSN is never confused with a QPN.

use core::fmt;

use crate::error::WireError;

/// Largest value a 24-bit field holds.
const MASK: u32 = 0x00FF_FFFF;

macro_rules! u24_newtype {
    ($(#[$doc:meta])* $name:ident, $field:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(u32);

        impl $name {
            /// The largest value, `0xFF_FFFF`.
            pub const MAX: Self = Self(MASK);
            /// Zero.
            pub const ZERO: Self = Self(0);

            /// Returns `None` if `value` needs more than 24 bits.
            pub const fn new(value: u32) -> Option<Self> {
                if value > MASK {
                    None
                } else {
                    Some(Self(value))
                }
            }

            /// Like [`Self::new`] with a typed error naming the field.
            pub const fn try_new(value: u32) -> Result<Self, WireError> {
                match Self::new(value) {
                    Some(v) => Ok(v),
                    None => Err(WireError::FieldOutOfRange {
                        field: $field,
                        value: value as u64,
                        bits: 24,
                    }),
                }
            }

            /// Keeps the low 24 bits of `value` (modular arithmetic).
            pub const fn new_masked(value: u32) -> Self {
                Self(value & MASK)
            }

            /// The value as a `u32` (always `<= 0xFF_FFFF`).
            pub const fn get(self) -> u32 {
                self.0
            }

            /// Adds `n` modulo 2^24.
            #[must_use]
            pub const fn wrapping_add(self, n: u32) -> Self {
                Self::new_masked(self.0.wrapping_add(n))
            }

            /// Subtracts `n` modulo 2^24.
            #[must_use]
            pub const fn wrapping_sub(self, n: u32) -> Self {
                Self::new_masked(self.0.wrapping_sub(n))
            }
        }

        impl From<$name> for u32 {
            fn from(v: $name) -> u32 {
                v.0
            }
        }

        impl TryFrom<u32> for $name {
            type Error = WireError;
            fn try_from(value: u32) -> Result<Self, WireError> {
                Self::try_new(value)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

u24_newtype!(
    /// A packet sequence number (BTH PSN), modulo 2^24.
    Psn,
    "PSN"
);
u24_newtype!(
    /// A queue pair number (BTH DestQP, DETH SrcQP).
    Qpn,
    "QPN"
);
u24_newtype!(
    /// A message sequence number (AETH MSN), modulo 2^24.
    Msn,
    "MSN"
);

impl Psn {
    /// Signed distance from `self` to `to` in the 24-bit PSN space, in
    /// `-2^23 .. 2^23`: positive when `to` is ahead of `self`.
    ///
    /// PSNs wrap, so ordering is only meaningful within half the space;
    /// this is the comparison the transport's PSN windows are built on.
    pub const fn distance(self, to: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 and back so
        // that bit 23 becomes the sign.
        let diff = to.0.wrapping_sub(self.0) << 8;
        (diff as i32) >> 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_rejects_wide_values() {
        assert_eq!(Psn::new(0xFF_FFFF), Some(Psn::MAX));
        assert_eq!(Psn::new(0x100_0000), None);
        assert!(matches!(
            Qpn::try_new(0x100_0000),
            Err(WireError::FieldOutOfRange { bits: 24, .. })
        ));
        assert_eq!(Msn::new_masked(0x1234_5678).get(), 0x34_5678);
    }

    #[test]
    fn wrapping_arithmetic() {
        assert_eq!(Psn::MAX.wrapping_add(1), Psn::ZERO);
        assert_eq!(Psn::ZERO.wrapping_sub(1), Psn::MAX);
        assert_eq!(Psn::ZERO.distance(Psn::MAX), -1);
        assert_eq!(Psn::MAX.distance(Psn::new_masked(4)), 5);
        assert_eq!(Psn::ZERO.distance(Psn::new_masked(0x7F_FFFF)), 0x7F_FFFF);
        assert_eq!(Psn::ZERO.distance(Psn::new_masked(0x80_0000)), -0x80_0000);
    }
}
