//! What QUERY_ROUTE and QUERY (ADDR, GID, PATH) answer about an id: its
//! device, its two addresses and the RoCE path between them, as the
//! kernel's `ucma.c` lays them out (docs/rdma-cm.md, 2.3). librdmacm asks
//! QUERY_ROUTE where it speaks the IP-only command set and the three
//! QUERY options where the AF_IB probe succeeded.

use crate::abi::{self, sockaddr_ib};
use crate::agent::Device;
use crate::id::CmId;
use std::net::SocketAddr;

/// Bytes of a QUERY_ROUTE response (`struct rdma_ucm_query_route_resp`).
pub const ROUTE_LEN: usize = 208;

/// The least QUERY_ROUTE answers into (ENOSPC below): up to its
/// `ibdev_index`, which older librdmacm does not know (ucma's check).
pub const ROUTE_MIN_LEN: usize = 200;

/// Bytes of a QUERY ADDR or GID response (`struct rdma_ucm_query_addr_resp`).
pub const ADDR_LEN: usize = 280;
/// The least room a QUERY ADDR or GID needs: up to `ibdev_index`, which an
/// older caller's struct lacks (the kernel's check).
pub const ADDR_MIN_LEN: usize = 272;
/// Bytes of a QUERY PATH response's head (`num_paths`, reserved).
pub const PATH_HEAD_LEN: usize = 8;
/// Bytes of one path of it (`struct ib_path_rec_data`: flags, reserved,
/// a packed SA PathRecord).
pub const PATH_DATA_LEN: usize = 72;

/// `IB_PATH_GMP | IB_PATH_PRIMARY | IB_PATH_BIDIRECTIONAL` (outbound and
/// inbound-reverse, bits 3 and 5): the flags the kernel gives every path
/// it reports.
const PATH_FLAGS: u32 = 1 << 0 | 1 << 1 | 1 << 3 | 1 << 5;
/// An SA selector meaning "exactly" (`IB_SA_EQ`).
const SELECTOR_EQ: u8 = 2;
/// The default P_Key, the only one on RoCE.
const PKEY: u16 = 0xFFFF;
/// No kernel device index: librdmacm then finds the device by its GUID.
const NO_IBDEV_INDEX: u32 = u32::MAX;

/// The RoCE path of an id, as the kernel's `cma_resolve_iboe_route`
/// builds it: the two addresses' GIDs and the device's MTU.
struct Path {
    sgid: [u8; 16],
    dgid: [u8; 16],
    mtu: u8,
    tclass: u8,
    service_id: u64,
}

/// The id's peer: its resolved destination, or the REQ's sender.
fn peer(id: &CmId) -> Option<SocketAddr> {
    id.dst.or(id.conn.peer_ip.map(|ip| SocketAddr::new(ip, 0)))
}

/// The id's path MTU: on the passive side the one the REQ names, which
/// the active side sends with (the kernel takes the REQ's path record),
/// else the device's. Devices of one host can differ (127.0.0.1 on `lo`
/// has lo's MTU, 127.0.0.2, on no interface of its own, the default), and
/// a responder refuses a FIRST or MIDDLE packet not of its path MTU.
pub fn path_mtu(id: &CmId, d: &Device) -> u8 {
    match id.conn.path_mtu {
        mtu @ 1..=5 => mtu,
        _ => d.path_mtu,
    }
}

fn path(id: &CmId, device: Option<&Device>) -> Option<Path> {
    let d = device?;
    let dst = peer(id)?;
    Some(Path {
        sgid: abi::gid_of(d.ip),
        dgid: abi::gid_of(dst.ip()),
        mtu: path_mtu(id, d),
        tclass: id.tos.unwrap_or(0),
        service_id: service_id(id, Some(dst)),
    })
}

/// How many paths the id has: one once its route is resolved or a REQ
/// made it.
fn num_paths(id: &CmId) -> u32 {
    u32::from(id.route_resolved || id.conn.started)
}

/// `rdma_get_service_id`: the port space above the port.
fn service_id(id: &CmId, addr: Option<SocketAddr>) -> u64 {
    (u64::from(id.ps) << 16) | u64::from(addr.map_or(0, |a| a.port()))
}

/// QUERY_ROUTE: GUID, one `ib_user_path_rec` (host-order fields), both
/// addresses, the path count and the port.
pub fn route(id: &CmId, device: Option<&Device>, hop_limit: u8, life_time: u8) -> Vec<u8> {
    let mut r = vec![0u8; ROUTE_LEN];
    if let Some(d) = device {
        r[0..8].copy_from_slice(&d.node_guid);
        r[196] = 1; // port_num
        let p = &mut r[8..72];
        if let Some(dst) = peer(id) {
            p[0..16].copy_from_slice(&abi::gid_of(dst.ip()));
        }
        p[16..32].copy_from_slice(&abi::gid_of(d.ip));
        p[48..52].copy_from_slice(&u32::from(path_mtu(id, d)).to_ne_bytes());
        p[52..54].copy_from_slice(&PKEY.to_be_bytes());
        p[54] = hop_limit;
        p[56] = 1; // numb_path
        p[62] = life_time;
    }
    if let Some(src) = id.src {
        abi::put_sockaddr(&mut r[136..164], src);
    }
    if let Some(dst) = id.dst {
        abi::put_sockaddr(&mut r[164..192], dst);
    }
    r[192..196].copy_from_slice(&num_paths(id).to_ne_bytes());
    r[200..204].copy_from_slice(&NO_IBDEV_INDEX.to_ne_bytes());
    r
}

/// The head every ADDR and GID answer shares: the device's GUID, port
/// and P_Key (zero without a device), and no kernel device index.
fn addr_head(device: Option<&Device>) -> Vec<u8> {
    let mut r = vec![0u8; ADDR_LEN];
    if let Some(d) = device {
        r[0..8].copy_from_slice(&d.node_guid);
        r[8] = 1; // port_num
        r[10..12].copy_from_slice(&PKEY.to_be_bytes());
    }
    r[272..276].copy_from_slice(&NO_IBDEV_INDEX.to_ne_bytes());
    r
}

/// Writes a sockaddr (IP or the id's AF_IB one) and its size at `size_at`.
fn put_addr(r: &mut [u8], size_at: usize, at: usize, addr: Option<Addr<'_>>) {
    let size = match addr {
        Some(Addr::Ip(a)) => {
            abi::put_sockaddr(&mut r[at..at + 28], a);
            abi::sockaddr_len(a)
        }
        Some(Addr::Ib(sib)) => {
            r[at..at + sib.len()].copy_from_slice(sib);
            sib.len()
        }
        None => 0,
    };
    r[size_at..size_at + 2].copy_from_slice(&(size as u16).to_ne_bytes());
}

/// An address an id holds: IP, or an AF_IB `sockaddr_ib` as bound.
#[derive(Clone, Copy)]
enum Addr<'a> {
    Ip(SocketAddr),
    Ib(&'a [u8; abi::SOCKADDR_IB_LEN]),
}

fn source(id: &CmId) -> Option<Addr<'_>> {
    id.ib_src.as_ref().map(Addr::Ib).or(id.src.map(Addr::Ip))
}

/// QUERY ADDR: the device and both addresses as the id holds them.
pub fn addr(id: &CmId, device: Option<&Device>) -> Vec<u8> {
    let mut r = addr_head(device);
    put_addr(&mut r, 12, 16, source(id));
    put_addr(&mut r, 14, 144, id.dst.map(Addr::Ip));
    r
}

/// QUERY GID: both addresses as `sockaddr_ib`s: an AF_IB address as
/// bound, an IP one as its GID (zero without a device) with the P_Key
/// and the service ID of its port.
pub fn gid(id: &CmId, device: Option<&Device>) -> Vec<u8> {
    let mut r = addr_head(device);
    let pkey = if device.is_some() { PKEY } else { 0 };
    let src = match &id.ib_src {
        Some(sib) => *sib,
        None => {
            let gid = device.map_or([0; 16], |d| abi::gid_of(d.ip));
            sockaddr_ib(pkey, gid, service_id(id, id.src), 0)
        }
    };
    let dst_gid = device
        .and(peer(id))
        .map_or([0; 16], |dst| abi::gid_of(dst.ip()));
    let dst = sockaddr_ib(pkey, dst_gid, service_id(id, id.dst), 0);
    put_addr(&mut r, 12, 16, Some(Addr::Ib(&src)));
    put_addr(&mut r, 14, 144, Some(Addr::Ib(&dst)));
    r
}

/// QUERY PATH: the id's paths as packed SA PathRecords (IBTA 15.2.5.16,
/// big-endian), as many as fit in `out_len` bytes.
pub fn paths(
    id: &CmId,
    device: Option<&Device>,
    hop_limit: u8,
    life_time: u8,
    out_len: usize,
) -> Vec<u8> {
    let mut r = vec![0u8; PATH_HEAD_LEN];
    let n = num_paths(id);
    r[0..4].copy_from_slice(&n.to_ne_bytes());
    // The kernel copies a path only where more than its size is left.
    let room = out_len.saturating_sub(PATH_HEAD_LEN) > PATH_DATA_LEN;
    if let (Some(p), true) = (path(id, device), n > 0 && room) {
        let mut data = [0u8; PATH_DATA_LEN];
        data[0..4].copy_from_slice(&PATH_FLAGS.to_ne_bytes());
        let rec = &mut data[8..72];
        rec[0..8].copy_from_slice(&p.service_id.to_be_bytes());
        rec[8..24].copy_from_slice(&p.dgid);
        rec[24..40].copy_from_slice(&p.sgid);
        // raw traffic 0, flow label 0, hop limit.
        rec[44..48].copy_from_slice(&u32::from(hop_limit).to_be_bytes());
        rec[48] = p.tclass;
        rec[49] = 0x80 | 1; // reversible, one path
        rec[50..52].copy_from_slice(&PKEY.to_be_bytes());
        // QoS class and SL 0; rate 0, the port's current.
        rec[54] = SELECTOR_EQ << 6 | p.mtu;
        rec[55] = SELECTOR_EQ << 6;
        rec[56] = SELECTOR_EQ << 6 | life_time;
        r.extend_from_slice(&data);
    }
    r
}
