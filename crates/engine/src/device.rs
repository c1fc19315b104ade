//! Device and port attributes: the limits softverbs advertises and enforces.
//! Every number here is documented in docs/conformance.md ("Device limits").

use crate::gid::Gid;
use crate::mtu::Mtu;
use crate::packet_cost::PacketCost;
use crate::time::Nanos;
use std::net::Ipv4Addr;

/// `enum ibv_device_cap_flags` bits softverbs may advertise.
pub mod cap_flags {
    /// IBV_DEVICE_RESIZE_MAX_WR: QP resize through IBV_QP_CAP.
    pub const RESIZE_MAX_WR: u32 = 1 << 0;
    /// IBV_DEVICE_AUTO_PATH_MIG: alternate paths (APM).
    pub const AUTO_PATH_MIG: u32 = 1 << 4;
    /// IBV_DEVICE_CURR_QP_STATE_MOD: IBV_QP_CUR_STATE is honoured.
    pub const CURR_QP_STATE_MOD: u32 = 1 << 7;
    /// IBV_DEVICE_PORT_ACTIVE_EVENT: a port whose link comes back up
    /// raises IBV_EVENT_PORT_ACTIVE.
    pub const PORT_ACTIVE_EVENT: u32 = 1 << 10;
    /// IBV_DEVICE_SYS_IMAGE_GUID: sys_image_guid is meaningful.
    pub const SYS_IMAGE_GUID: u32 = 1 << 11;
    /// IBV_DEVICE_RC_RNR_NAK_GEN: the responder sends RNR NAKs.
    pub const RC_RNR_NAK_GEN: u32 = 1 << 12;
    /// IBV_DEVICE_SRQ_RESIZE: IBV_SRQ_MAX_WR resizes an SRQ.
    pub const SRQ_RESIZE: u32 = 1 << 13;
}

/// `enum ibv_atomic_cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum AtomicCap {
    /// IBV_ATOMIC_NONE
    None = 0,
    /// IBV_ATOMIC_HCA: atomic with respect to other atomics on this device.
    Hca = 1,
    /// IBV_ATOMIC_GLOB
    Glob = 2,
}

/// The fields of `struct ibv_device_attr` (the public query result).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID (network byte order when exported, here a plain number).
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
    /// Largest MR length.
    pub max_mr_size: u64,
    /// Supported page sizes.
    pub page_size_cap: u64,
    /// Vendor ID (IEEE OUI).
    pub vendor_id: u32,
    /// Vendor part ID.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Maximum QPs.
    pub max_qp: u32,
    /// Maximum WRs per send or receive queue.
    pub max_qp_wr: u32,
    /// `ibv_device_cap_flags`.
    pub device_cap_flags: u32,
    /// Maximum SGEs per WR (send and receive).
    pub max_sge: u32,
    /// Maximum SGEs per RDMA READ.
    pub max_sge_rd: u32,
    /// Maximum CQs.
    pub max_cq: u32,
    /// Maximum CQ entries.
    pub max_cqe: u32,
    /// Maximum MRs.
    pub max_mr: u32,
    /// Maximum PDs.
    pub max_pd: u32,
    /// Responder resources per QP (max_dest_rd_atomic limit).
    pub max_qp_rd_atom: u32,
    /// EE contexts: none.
    pub max_ee_rd_atom: u32,
    /// Responder resources on the device.
    pub max_res_rd_atom: u32,
    /// Initiator depth per QP (max_rd_atomic limit).
    pub max_qp_init_rd_atom: u32,
    /// EE initiator depth: none.
    pub max_ee_init_rd_atom: u32,
    /// Atomic guarantees.
    pub atomic_cap: AtomicCap,
    /// EE contexts: none.
    pub max_ee: u32,
    /// RDDs: none.
    pub max_rdd: u32,
    /// Memory windows.
    pub max_mw: u32,
    /// Raw IPv6 QPs: none.
    pub max_raw_ipv6_qp: u32,
    /// Raw Ethertype QPs: none.
    pub max_raw_ethy_qp: u32,
    /// Multicast groups.
    pub max_mcast_grp: u32,
    /// QPs per multicast group.
    pub max_mcast_qp_attach: u32,
    /// QPs attached to multicast groups in total.
    pub max_total_mcast_qp_attach: u32,
    /// Address handles.
    pub max_ah: u32,
    /// FMRs: none.
    pub max_fmr: u32,
    /// FMR remaps: none.
    pub max_map_per_fmr: u32,
    /// Shared receive queues.
    pub max_srq: u32,
    /// WRs per SRQ.
    pub max_srq_wr: u32,
    /// SGEs per SRQ WR.
    pub max_srq_sge: u32,
    /// Partition keys per port.
    pub max_pkeys: u16,
    /// Local CA ACK delay (4.096 us x 2^n).
    pub local_ca_ack_delay: u8,
    /// Ports.
    pub phys_port_cnt: u8,
}

/// `enum ibv_port_state` value for an active port.
pub const PORT_ACTIVE: u32 = 4;
/// `enum ibv_port_state` value for a port whose link is down.
pub const PORT_DOWN: u32 = 1;
/// `ibv_port_attr.link_layer` value for Ethernet (RoCE).
pub const LINK_LAYER_ETHERNET: u8 = 2;
/// `ibv_port_attr.phys_state` value "LinkUp".
pub const PHYS_STATE_LINK_UP: u8 = 5;
/// `ibv_port_attr.phys_state` value "Disabled", as rxe reports a port
/// whose network device is down.
pub const PHYS_STATE_DISABLED: u8 = 3;
/// `ibv_port_attr.phys_state` value "Polling", as rxe reports a port
/// whose network device is up without a carrier.
pub const PHYS_STATE_POLLING: u8 = 2;

/// The state of the network device the ports stand on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Up with a carrier: the ports are ACTIVE.
    Up,
    /// Up without a carrier (a cable out, a veth whose peer is down):
    /// DOWN, physical state Polling.
    NoCarrier,
    /// Down (or gone): DOWN, physical state Disabled.
    Down,
}

/// `ibv_port_cap_flags` bit IBV_PORT_IP_BASED_GIDS.
pub const PORT_IP_BASED_GIDS: u32 = 1 << 26;
/// `ibv_port_cap_flags` bit IBV_PORT_CM_SUP: the port runs the
/// communication manager (rdma_cm's connections through QP1), as rxe's
/// and mlx5's RoCE ports say.
pub const PORT_CM_SUP: u32 = 1 << 16;

/// The fields of `struct ibv_port_attr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    /// `enum ibv_port_state`.
    pub state: u32,
    /// Largest path MTU the port accepts.
    pub max_mtu: Mtu,
    /// MTU of the link.
    pub active_mtu: Mtu,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// `ibv_port_cap_flags`.
    pub port_cap_flags: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// P_Key violations seen.
    pub bad_pkey_cntr: u32,
    /// Q_Key violations seen.
    pub qkey_viol_cntr: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// LID: none on Ethernet.
    pub lid: u16,
    /// SM LID: none on Ethernet.
    pub sm_lid: u16,
    /// LMC.
    pub lmc: u8,
    /// Virtual lanes.
    pub max_vl_num: u8,
    /// SM SL.
    pub sm_sl: u8,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// Init type reply.
    pub init_type_reply: u8,
    /// `ibv_width` (1 = 1X).
    pub active_width: u8,
    /// `ibv_speed` (the encoded speed).
    pub active_speed: u8,
    /// Physical state.
    pub phys_state: u8,
    /// Link layer.
    pub link_layer: u8,
    /// Extra flags.
    pub flags: u8,
    /// Capability mask 2.
    pub port_cap_flags2: u16,
}

/// How one port is set up: its addresses and link MTU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    /// GID table entries in index order; the table has
    /// [`DeviceLimits::gid_tbl_len`] slots and unused ones read as zero.
    pub gids: Vec<Gid>,
    /// MTU of the link the port sends on.
    pub active_mtu: Mtu,
}

/// The limits softverbs enforces. They bound what an application can ask
/// for; the engine allocates lazily, so generous limits cost nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceLimits {
    /// See [`DeviceAttr::max_qp`].
    pub max_qp: u32,
    /// See [`DeviceAttr::max_qp_wr`].
    pub max_qp_wr: u32,
    /// See [`DeviceAttr::max_sge`].
    pub max_sge: u32,
    /// Largest `max_inline_data` a QP may have.
    pub max_inline_data: u32,
    /// See [`DeviceAttr::max_cq`].
    pub max_cq: u32,
    /// See [`DeviceAttr::max_cqe`].
    pub max_cqe: u32,
    /// Completion vectors (`ibv_context.num_comp_vectors`).
    pub num_comp_vectors: u32,
    /// See [`DeviceAttr::max_mr`].
    pub max_mr: u32,
    /// See [`DeviceAttr::max_mr_size`].
    pub max_mr_size: u64,
    /// See [`DeviceAttr::max_pd`].
    pub max_pd: u32,
    /// See [`DeviceAttr::max_qp_rd_atom`].
    pub max_qp_rd_atom: u32,
    /// See [`DeviceAttr::max_qp_init_rd_atom`].
    pub max_qp_init_rd_atom: u32,
    /// See [`DeviceAttr::max_srq`].
    pub max_srq: u32,
    /// See [`DeviceAttr::max_srq_wr`].
    pub max_srq_wr: u32,
    /// See [`DeviceAttr::max_srq_sge`].
    pub max_srq_sge: u32,
    /// See [`DeviceAttr::max_ah`].
    pub max_ah: u32,
    /// See [`DeviceAttr::max_mcast_grp`].
    pub max_mcast_grp: u32,
    /// See [`DeviceAttr::max_mcast_qp_attach`].
    pub max_mcast_qp_attach: u32,
    /// See [`DeviceAttr::max_total_mcast_qp_attach`].
    pub max_total_mcast_qp_attach: u32,
    /// GID table slots per port.
    pub gid_tbl_len: u32,
    /// P_Key table slots per port (RoCE has one: 0xffff).
    pub pkey_tbl_len: u16,
    /// Largest message, bytes.
    pub max_msg_sz: u32,
}

impl Default for DeviceLimits {
    fn default() -> Self {
        DeviceLimits {
            max_qp: 1 << 17,
            max_qp_wr: 1 << 15,
            max_sge: 32,
            max_inline_data: 512,
            max_cq: 1 << 16,
            max_cqe: (1 << 22) - 1,
            num_comp_vectors: 1,
            max_mr: 1 << 18,
            max_mr_size: u64::MAX,
            max_pd: 1 << 16,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            max_srq: 1 << 16,
            max_srq_wr: 1 << 15,
            max_srq_sge: 32,
            max_ah: 1 << 16,
            // rxe's limits (rxe_param.h).
            max_mcast_grp: 8192,
            max_mcast_qp_attach: 56,
            max_total_mcast_qp_attach: 0x70000,
            gid_tbl_len: 16,
            pkey_tbl_len: 1,
            max_msg_sz: 1 << 31,
        }
    }
}

/// Everything that identifies and shapes one soft device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Device name, e.g. `softverbs0`.
    pub name: String,
    /// Node GUID; also the system image GUID.
    pub node_guid: u64,
    /// Limits.
    pub limits: DeviceLimits,
    /// Ports, numbered from 1.
    pub ports: Vec<PortConfig>,
    /// Seed for keys and QP numbers. Production seeds from the OS; tests
    /// fix it so that runs replay exactly.
    pub seed: u64,
    /// QP numbers `qpn_base..qpn_limit` are handed out (never 0 or 1,
    /// which are special); [`crate::Engine::add_qpn_range`] adds more.
    pub qpn_base: u32,
    /// End (exclusive) of the first QP number range.
    pub qpn_limit: u32,
    /// Most an RC QP keeps unacknowledged on the wire, and most a READ
    /// request asks for at once, each packet counted at its
    /// [`Self::packet_cost`]; also what all RC QPs of the device keep
    /// between them. A transport over sockets sizes it to the peer's
    /// receive buffer: a window that fits is never dropped for want of
    /// room, however late the peer runs ([`Self::DEFAULT_SEND_WINDOW`]
    /// otherwise).
    pub send_window_bytes: u32,
    /// What a peer's receive buffer is charged for one packet of each
    /// path MTU (`packet_cost.rs`).
    pub packet_cost: PacketCost,
    /// The shortest local ACK timeout an RC requester waits, whatever its
    /// `timeout` attribute asks (which `ibv_query_qp` still reports), as
    /// rxe waits at least a jiffy: a transport whose peers answer when
    /// their scheduler runs them sets it above what a loaded host makes
    /// them wait ([`Self::SOFTWARE_PEER_ACK_TIMEOUT`]). 0: none.
    pub min_ack_timeout: Nanos,
}

impl DeviceConfig {
    /// A device `softverbs0` on 127.0.0.1, one port, MTU 4096, whose GID
    /// table holds the address's GID alone (at index 0): the fixture
    /// tests and the simulator build on. Real devices get rxe's table,
    /// [`crate::gids_of`], from `softverbs_config`.
    pub fn loopback(seed: u64) -> DeviceConfig {
        DeviceConfig {
            name: "softverbs0".to_string(),
            node_guid: 0x0200_00ff_fe00_0001,
            limits: DeviceLimits::default(),
            ports: vec![PortConfig {
                gids: vec![Gid::from_ipv4(Ipv4Addr::LOCALHOST)],
                active_mtu: Mtu::Mtu4096,
            }],
            seed,
            qpn_base: 0x11,
            qpn_limit: 1 << 24,
            send_window_bytes: DeviceConfig::DEFAULT_SEND_WINDOW,
            packet_cost: PacketCost::PAYLOAD,
            min_ack_timeout: 0,
        }
    }

    /// The local ACK timeout of a `timeout` of 12, 16.8 ms: the least a
    /// requester waits for a peer that runs in user space. A peer's
    /// progress thread on a loaded host may wait for a CPU for several
    /// milliseconds at a time; perftest with `-u 10` (4.2 ms, eight waits
    /// in all) ended in RETRY_EXC_ERR in 4 of 5 runs beside other busy
    /// processes with nothing lost, with `-u 12` in none of 5.
    pub const SOFTWARE_PEER_ACK_TIMEOUT: Nanos = 4096 << 12;

    /// The send window of a device whose peers' buffers are not known:
    /// 1024 packets of the largest MTU.
    pub const DEFAULT_SEND_WINDOW: u32 = 4 << 20;

    /// The capability flags this engine honours.
    pub const CAP_FLAGS: u32 = cap_flags::CURR_QP_STATE_MOD
        | cap_flags::PORT_ACTIVE_EVENT
        | cap_flags::SYS_IMAGE_GUID
        | cap_flags::RC_RNR_NAK_GEN
        | cap_flags::SRQ_RESIZE;

    /// Our vendor ID: not an IEEE OUI, so tools treat the device as generic.
    pub const VENDOR_ID: u32 = 0x5356;

    /// The `ibv_device_attr` this configuration yields.
    pub fn device_attr(&self) -> DeviceAttr {
        let l = &self.limits;
        DeviceAttr {
            fw_ver: concat!("softverbs ", env!("CARGO_PKG_VERSION")).to_string(),
            node_guid: self.node_guid,
            sys_image_guid: self.node_guid,
            max_mr_size: l.max_mr_size,
            page_size_cap: 0xffff_f000,
            vendor_id: Self::VENDOR_ID,
            vendor_part_id: 1,
            hw_ver: 1,
            max_qp: l.max_qp,
            max_qp_wr: l.max_qp_wr,
            device_cap_flags: Self::CAP_FLAGS,
            max_sge: l.max_sge,
            max_sge_rd: l.max_sge,
            max_cq: l.max_cq,
            max_cqe: l.max_cqe,
            max_mr: l.max_mr,
            max_pd: l.max_pd,
            max_qp_rd_atom: l.max_qp_rd_atom,
            max_ee_rd_atom: 0,
            max_res_rd_atom: l.max_qp_rd_atom.saturating_mul(l.max_qp),
            max_qp_init_rd_atom: l.max_qp_init_rd_atom,
            max_ee_init_rd_atom: 0,
            atomic_cap: AtomicCap::Hca,
            max_ee: 0,
            max_rdd: 0,
            max_mw: 0,
            max_raw_ipv6_qp: 0,
            max_raw_ethy_qp: 0,
            max_mcast_grp: l.max_mcast_grp,
            max_mcast_qp_attach: l.max_mcast_qp_attach,
            max_total_mcast_qp_attach: l.max_total_mcast_qp_attach,
            max_ah: l.max_ah,
            max_fmr: 0,
            max_map_per_fmr: 0,
            max_srq: l.max_srq,
            max_srq_wr: l.max_srq_wr,
            max_srq_sge: l.max_srq_sge,
            max_pkeys: l.pkey_tbl_len,
            local_ca_ack_delay: 15,
            phys_port_cnt: self.ports.len() as u8,
        }
    }

    /// The `ibv_port_attr` of port `port` (1-based), if it exists.
    pub fn port_attr(&self, port: u8) -> Option<PortAttr> {
        let cfg = self.port(port)?;
        Some(PortAttr {
            state: PORT_ACTIVE,
            max_mtu: Mtu::Mtu4096,
            active_mtu: cfg.active_mtu,
            gid_tbl_len: self.limits.gid_tbl_len,
            port_cap_flags: PORT_CM_SUP | PORT_IP_BASED_GIDS,
            max_msg_sz: self.limits.max_msg_sz,
            bad_pkey_cntr: 0,
            qkey_viol_cntr: 0,
            pkey_tbl_len: self.limits.pkey_tbl_len,
            lid: 0,
            sm_lid: 0,
            lmc: 0,
            max_vl_num: 1,
            sm_sl: 0,
            subnet_timeout: 0,
            init_type_reply: 0,
            active_width: 1,
            // IBV_SPEED_EDR (25 Gb/s per lane): a plausible figure for a
            // software link, so that tools computing rates get a number.
            active_speed: 32,
            phys_state: PHYS_STATE_LINK_UP,
            link_layer: LINK_LAYER_ETHERNET,
            flags: 0,
            port_cap_flags2: 0,
        })
    }

    /// The configuration of port `port` (1-based).
    pub fn port(&self, port: u8) -> Option<&PortConfig> {
        (port as usize)
            .checked_sub(1)
            .and_then(|i| self.ports.get(i))
    }

    /// The device's IP address: its first GID that is neither empty nor
    /// link-local (the GID table is made from the address).
    pub fn address(&self) -> Option<std::net::IpAddr> {
        let gids = self.ports.iter().flat_map(|p| &p.gids);
        let mut usable = gids.filter(|g| !g.is_zero() && !g.is_link_local());
        usable.next().map(|g| g.to_ip())
    }

    /// GID `index` of `port`: `None` if the port or slot does not exist,
    /// `Some(Gid::ZERO)` for an empty slot.
    pub fn gid(&self, port: u8, index: u32) -> Option<Gid> {
        let cfg = self.port(port)?;
        if index >= self.limits.gid_tbl_len {
            return None;
        }
        Some(cfg.gids.get(index as usize).copied().unwrap_or(Gid::ZERO))
    }

    /// P_Key `index` of `port`: RoCE ports have the default key only.
    pub fn pkey(&self, port: u8, index: u16) -> Option<u16> {
        self.port(port)?;
        (index < self.limits.pkey_tbl_len).then_some(0xffff)
    }
}
