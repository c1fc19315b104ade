//! C-ABI declarations of the libibverbs types a provider touches, for
//! rdma-core v44 (private ABI `IBVERBS_PRIVATE_34`) on x86_64.
//!
//! * [`public`]: types of `<infiniband/verbs.h>` (checked against the system
//!   header by `provider-shim/tests/layout.rs`).
//! * [`private`]: types of rdma-core's `libibverbs/driver.h` (checked against
//!   the measured numbers in `docs/rdma-core-provider-abi.md`).
//! * [`sched`]: `struct sched_attr` of `<linux/sched/types.h>` (checked
//!   like [`public`]).
//! * [`consts`]: enum values and flags, named exactly as in C.
//!
//! Naming: a Rust type is named exactly like its C struct/union and a field
//! exactly like its C field, except Rust keywords, which get a trailing
//! underscore (`type_`, `priv_`, `match_`). Aggregates that C leaves without
//! a type name get one:
//! * a named field of an unnamed struct/union type: `<outer type>_<field>`
//!   (`ibv_gid_global`, `ibv_async_event_element`, `ibv_send_wr_wr`,
//!   `ibv_send_wr_wr_rdma`, `verbs_match_ent_u`, ...);
//! * an anonymous union member: field `u` (the second one in the same struct:
//!   `u2`) of type `<outer type>_u` / `<outer type>_u2` (`ibv_wc.u.imm_data`,
//!   `ibv_send_wr.u.imm_data`, `ibv_send_wr.u2.bind_mw`, `verbs_qp.u.qp_ex`,
//!   `verbs_cq.u.cq`).
//!
//! Enums are plain integer fields (`u32`, or `c_int` for the enums that have
//! negative values) with the values in [`consts`]. Pointers are `*mut T` /
//! `*const T`; every function pointer is `Option<unsafe extern "C" fn(..)>`
//! (nullable, same ABI as the C pointer). Every type is `Copy` and has an
//! all-zero/NULL value: [`Zeroed::ZEROED`] (usable in `const`/`static`
//! initialisers) and `Default::default()`.

#![allow(non_camel_case_types, non_snake_case)]

pub mod consts;
pub mod private;
pub mod public;
pub mod sched;

pub use consts::*;
pub use private::*;
pub use public::*;
pub use sched::*;

/// A type whose all-zero value (zero integers, NULL pointers, `None`
/// function pointers, statically initialised pthread objects) is valid.
pub trait Zeroed: Sized {
    /// The all-zero value.
    const ZEROED: Self;
}

macro_rules! zeroed_scalars {
    ($($t:ty),*) => {$(
        impl Zeroed for $t {
            const ZEROED: Self = 0;
        }
    )*};
}
zeroed_scalars!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

impl<T> Zeroed for *mut T {
    const ZEROED: Self = core::ptr::null_mut();
}

impl<T> Zeroed for *const T {
    const ZEROED: Self = core::ptr::null();
}

impl<T> Zeroed for Option<T> {
    const ZEROED: Self = None;
}

impl<T: Zeroed + Copy, const N: usize> Zeroed for [T; N] {
    const ZEROED: Self = [T::ZEROED; N];
}

impl Zeroed for libc::pthread_mutex_t {
    const ZEROED: Self = libc::PTHREAD_MUTEX_INITIALIZER;
}

impl Zeroed for libc::pthread_cond_t {
    const ZEROED: Self = libc::PTHREAD_COND_INITIALIZER;
}

impl Zeroed for libc::timespec {
    const ZEROED: Self = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
}

/// Declares `#[repr(C)]` structs deriving `Clone, Copy, Debug`, with
/// [`Zeroed`] and `Default` implementations.
macro_rules! ffi_struct {
    ($(
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    )*) => {$(
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $crate::Zeroed for $name {
            const ZEROED: Self = Self {
                $( $field: <$ty as $crate::Zeroed>::ZEROED, )*
            };
        }

        impl Default for $name {
            fn default() -> Self {
                <Self as $crate::Zeroed>::ZEROED
            }
        }
    )*};
}

/// Declares `#[repr(C)]` unions deriving `Clone, Copy`, with a `Debug` that
/// prints only the type name, and [`Zeroed`]/`Default` implementations that
/// initialise the member named in `zeroed_by` (the largest one).
macro_rules! ffi_union {
    ($(
        #[zeroed_by($zfield:ident)]
        $(#[$meta:meta])*
        pub union $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    )*) => {$(
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy)]
        pub union $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $crate::Zeroed for $name {
            const ZEROED: Self = Self {
                $zfield: $crate::Zeroed::ZEROED,
            };
        }

        impl Default for $name {
            fn default() -> Self {
                <Self as $crate::Zeroed>::ZEROED
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.debug_struct(stringify!($name)).finish_non_exhaustive()
            }
        }
    )*};
}

pub(crate) use {ffi_struct, ffi_union};
