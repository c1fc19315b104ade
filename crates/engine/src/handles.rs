//! Typed handles of engine objects. Handles are generational: a handle of a
//! destroyed object never reaches a newer object that reused its slot, so a
//! stale handle from an application fails cleanly with EINVAL.

slotmap::new_key_type! {
    /// A protection domain.
    pub struct PdId;
    /// A memory region.
    pub struct MrId;
    /// A completion queue.
    pub struct CqId;
    /// A shared receive queue.
    pub struct SrqId;
    /// A queue pair.
    pub struct QpId;
    /// An address handle.
    pub struct AhId;
}
