//! Errors returned by verbs, each carrying the errno a real provider returns
//! and a short reason so that a failing call can be explained (the provider
//! shim logs the reason; rxe only says EINVAL).

use std::fmt;

/// The errno classes verbs return. Values are Linux's, which is the only
/// platform rdma-core runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// EINVAL: an argument, attribute or mask is not acceptable.
    InvalidArgument,
    /// EBUSY: the object is still used by another object.
    Busy,
    /// ENOMEM: a queue or a device-wide object limit is full.
    NoMemory,
    /// EOPNOTSUPP: the device does not implement this.
    NotSupported,
    /// EFAULT: memory the verb was given is not mapped as it must be.
    BadAddress,
    /// ENODATA: a GID table entry within the table holds no GID.
    NoData,
    /// An errno a fault rule chose (`SOFTVERBS_FAULTS`).
    Chosen(i32),
}

impl ErrorKind {
    /// The errno value for this kind (Linux numbering).
    pub const fn errno(self) -> i32 {
        match self {
            ErrorKind::InvalidArgument => 22,
            ErrorKind::Busy => 16,
            ErrorKind::NoMemory => 12,
            ErrorKind::NotSupported => 95,
            ErrorKind::BadAddress => 14,
            ErrorKind::NoData => 61,
            ErrorKind::Chosen(errno) => errno,
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            ErrorKind::InvalidArgument => "EINVAL",
            ErrorKind::Busy => "EBUSY",
            ErrorKind::NoMemory => "ENOMEM",
            ErrorKind::NotSupported => "EOPNOTSUPP",
            ErrorKind::BadAddress => "EFAULT",
            ErrorKind::NoData => "ENODATA",
            ErrorKind::Chosen(errno) => return write!(f, "errno {errno}"),
        };
        f.write_str(s)
    }
}

/// A failed verb: the errno class and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {reason}")]
pub struct VerbsError {
    /// Which errno the verb returns.
    pub kind: ErrorKind,
    /// A human-readable explanation, for logs.
    pub reason: &'static str,
}

impl VerbsError {
    /// The errno value a C caller sees.
    pub const fn errno(&self) -> i32 {
        self.kind.errno()
    }

    /// The error a fault rule gives a post.
    pub const fn chosen(errno: i32) -> VerbsError {
        VerbsError {
            kind: ErrorKind::Chosen(errno),
            reason: "a fault rule (SOFTVERBS_FAULTS) refused the WR",
        }
    }
}

/// The reason of the ENOMEM `create_qp` returns when every QP number the
/// engine was given is in use: a transport can add a range and retry.
pub const QPN_EXHAUSTED: &str = "QP numbers exhausted";

/// Result of a verb.
pub type VerbsResult<T> = Result<T, VerbsError>;

/// EINVAL with a reason.
pub(crate) const fn einval(reason: &'static str) -> VerbsError {
    VerbsError {
        kind: ErrorKind::InvalidArgument,
        reason,
    }
}

/// EBUSY with a reason.
pub(crate) const fn ebusy(reason: &'static str) -> VerbsError {
    VerbsError {
        kind: ErrorKind::Busy,
        reason,
    }
}

/// ENOMEM with a reason.
pub(crate) const fn enomem(reason: &'static str) -> VerbsError {
    VerbsError {
        kind: ErrorKind::NoMemory,
        reason,
    }
}

/// ENODATA with a reason.
pub(crate) const fn enodata(reason: &'static str) -> VerbsError {
    VerbsError {
        kind: ErrorKind::NoData,
        reason,
    }
}

/// EOPNOTSUPP with a reason.
pub(crate) const fn eopnotsupp(reason: &'static str) -> VerbsError {
    VerbsError {
        kind: ErrorKind::NotSupported,
        reason,
    }
}

/// Returns `Err(err)` unless `cond` holds; keeps validation code flat.
pub(crate) fn ensure(cond: bool, err: VerbsError) -> VerbsResult<()> {
    if cond {
        Ok(())
    } else {
        Err(err)
    }
}
