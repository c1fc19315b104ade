//! The errno values verbs return (Linux numbering) and the outcome type the
//! model predicts: `Ok` or the exact errno.

/// An argument, attribute or mask is not acceptable.
pub const EINVAL: i32 = 22;
/// The object is still used by another object.
pub const EBUSY: i32 = 16;
/// A queue is full.
pub const ENOMEM: i32 = 12;
/// The device does not implement this.
pub const EOPNOTSUPP: i32 = 95;
/// A GID table entry within the table holds no GID.
pub const ENODATA: i32 = 61;

/// What a verb returns: its value or an errno.
pub type Outcome<T = ()> = Result<T, i32>;

/// `Err(errno)` unless `cond` holds.
pub(crate) fn require(cond: bool, errno: i32) -> Outcome {
    if cond {
        Ok(())
    } else {
        Err(errno)
    }
}
