//! The facts about the loopback device (`DeviceConfig::loopback`) that the
//! rules refer to, as documented (docs/conformance.md, seeds 000-004); the
//! model states them itself rather than reading the engine's limits, so a
//! wrong limit in the engine shows up as a disagreement.

/// The device has one port, numbered 1.
pub const PORT_NUM: u8 = 1;
/// A RoCE port has one P_Key (0xffff) at index 0.
pub const PKEY_TBL_LEN: u16 = 1;
/// Only GID index 0 (the loopback address) is populated; the table has 16
/// slots, the others read as zero.
pub const POPULATED_SGID_INDEX: u8 = 0;
/// The GID table's length.
pub const GID_TBL_LEN: u8 = 16;
/// The port's max_mtu, IBV_MTU_4096.
pub const MAX_PATH_MTU: u32 = 5;
/// max_qp_wr: WRs per send or receive queue.
pub const MAX_QP_WR: u32 = 32768;
/// max_sge: SGEs per send or receive WR.
pub const MAX_SGE: u32 = 32;
/// Largest max_inline_data a QP may ask for.
pub const MAX_INLINE_DATA: u32 = 512;
/// max_qp_init_rd_atom, the bound of max_rd_atomic.
pub const MAX_RD_ATOMIC: u8 = 128;
/// max_qp_rd_atom, the bound of max_dest_rd_atomic.
pub const MAX_DEST_RD_ATOMIC: u8 = 128;
/// max_srq_wr.
pub const MAX_SRQ_WR: u32 = 32768;
/// max_srq_sge.
pub const MAX_SRQ_SGE: u32 = 32;
/// QP numbers and PSNs are 24-bit fields on the wire.
pub const QPN_MAX: u32 = 0xFF_FFFF;
/// LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC | MW_BIND: the
/// bits of qp_access_flags that mean something for a QP (others are
/// accepted and kept, as the kernel does).
pub const QP_ACCESS_VALID: u32 = 0x1f;
/// IBV_ACCESS_LOCAL_WRITE, which a receive buffer's MR needs.
pub const ACCESS_LOCAL_WRITE: u32 = 0x1;
/// IBV_MIG_MIGRATED: without APM the only migration state.
pub const MIG_MIGRATED: u32 = 0;
