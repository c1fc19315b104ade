//! Memory and QP access flags (`enum ibv_access_flags`).

bitflags::bitflags! {
    /// `enum ibv_access_flags`, the bits softverbs knows.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct AccessFlags: u32 {
        /// IBV_ACCESS_LOCAL_WRITE
        const LOCAL_WRITE = 1 << 0;
        /// IBV_ACCESS_REMOTE_WRITE
        const REMOTE_WRITE = 1 << 1;
        /// IBV_ACCESS_REMOTE_READ
        const REMOTE_READ = 1 << 2;
        /// IBV_ACCESS_REMOTE_ATOMIC
        const REMOTE_ATOMIC = 1 << 3;
        /// IBV_ACCESS_MW_BIND
        const MW_BIND = 1 << 4;
        /// IBV_ACCESS_ZERO_BASED
        const ZERO_BASED = 1 << 5;
        /// IBV_ACCESS_ON_DEMAND
        const ON_DEMAND = 1 << 6;
        /// IBV_ACCESS_HUGETLB
        const HUGETLB = 1 << 7;
        /// IBV_ACCESS_FLUSH_GLOBAL (rdma-core 45 on; the FLUSH operation,
        /// which softverbs does not offer)
        const FLUSH_GLOBAL = 1 << 8;
        /// IBV_ACCESS_FLUSH_PERSISTENT (likewise)
        const FLUSH_PERSISTENT = 1 << 9;
        /// IBV_ACCESS_RELAXED_ORDERING (an optional hint, see IBV_ACCESS_OPTIONAL_RANGE)
        const RELAXED_ORDERING = 1 << 20;
    }
}

impl AccessFlags {
    /// Bits 20..=29 are IBV_ACCESS_OPTIONAL_RANGE: hints a provider may
    /// ignore, never a reason to fail (verbs.h).
    pub const OPTIONAL_RANGE: u32 = 0x3ff0_0000;

    /// Flags that need LOCAL_WRITE on an MR (ibv_reg_mr(3): "If
    /// IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then
    /// IBV_ACCESS_LOCAL_WRITE must be set too").
    pub const NEED_LOCAL_WRITE: AccessFlags =
        AccessFlags::REMOTE_WRITE.union(AccessFlags::REMOTE_ATOMIC);
}
