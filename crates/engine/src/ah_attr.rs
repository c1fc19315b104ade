//! Address vectors (`struct ibv_ah_attr`) and their checks, shared by
//! `ibv_create_ah` and `ibv_modify_qp(IBV_QP_AV)`.

use crate::device::DeviceConfig;
use crate::error::{einval, enodata, ensure, VerbsResult};
use crate::gid::Gid;

/// `struct ibv_global_route`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: Gid,
    /// IPv6 flow label (20 bits).
    pub flow_label: u32,
    /// Source GID table index.
    pub sgid_index: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class / TOS.
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AhAttr {
    /// Global route header fields; used only when `is_global`.
    pub grh: GlobalRoute,
    /// Destination LID (meaningless on RoCE, kept as given).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits (meaningless on RoCE, kept as given).
    pub src_path_bits: u8,
    /// `enum ibv_rate`.
    pub static_rate: u8,
    /// Whether `grh` is valid.
    pub is_global: bool,
    /// Local port.
    pub port_num: u8,
}

impl AhAttr {
    /// Checks an address vector against the device. RoCE ports have
    /// IBV_QPF_GRH_REQUIRED semantics: without a GRH there is no IP
    /// destination (ibv_modify_qp(3); the kernel's rdma_check_ah_attr
    /// returns EINVAL for a RoCE AH without IB_AH_GRH).
    pub fn validate(&self, dev: &DeviceConfig) -> VerbsResult<()> {
        self.check_sgid(dev)?;
        ensure(
            dev.port(self.port_num).is_some(),
            einval("ah_attr.port_num is not a port of this device"),
        )?;
        ensure(
            self.is_global,
            einval("ah_attr.is_global = 0: RoCE requires a GRH"),
        )?;
        ensure(self.sl <= 15, einval("ah_attr.sl above 15"))?;
        ensure(
            self.grh.flow_label <= 0xF_FFFF,
            einval("ah_attr.grh.flow_label wider than 20 bits"),
        )?;
        ensure(!self.grh.dgid.is_zero(), einval("ah_attr.grh.dgid is zero"))
    }

    /// The source GID of a GRH, which the kernel resolves before anything
    /// else of an `ibv_modify_qp` with IBV_QP_AV or an `ibv_create_ah`
    /// (`rdma_fill_sgid_attr`): a port the device lacks or an index past
    /// the table is EINVAL, an entry within it that holds no GID ENODATA.
    /// Without a GRH there is nothing to resolve (and RoCE refuses it
    /// later).
    pub fn check_sgid(&self, dev: &DeviceConfig) -> VerbsResult<()> {
        if !self.is_global {
            return Ok(());
        }
        let sgid = dev
            .gid(self.port_num, u32::from(self.grh.sgid_index))
            .ok_or(einval("ah_attr.grh.sgid_index is past the GID table"))?;
        ensure(
            !sgid.is_zero(),
            enodata("ah_attr.grh.sgid_index names an empty GID table entry"),
        )
    }
}
