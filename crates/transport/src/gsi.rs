//! MADs on the General Services Interface (QP1) over RoCEv2: the packets
//! the InfiniBand CM travels in, and how the host daemon routes them.
//!
//! A CM message is one UD SEND_ONLY to QP1 with P_Key 0xFFFF, a DETH with
//! Q_Key 0x80010000 and source QP 1, and the whole 256-byte MAD as payload
//! (docs/rdma-cm.md, section 4). [`gsi_packet`] builds one, sealed for a
//! datagram sent alone (IPv4 identification 0, as every unconnected
//! softverbs socket sends one); [`parse_gsi`] checks one as rxe does and
//! gives the MAD back.
//!
//! The daemon receives everything sent to QP1 (block 0 belongs to no
//! context) and passes CM messages on by what they name
//! ([`route`]): a REQ or SIDR_REQ by its service ID, to the context
//! listening on that rdma_cm port; every other message by the
//! communication ID of its recipient. A context allocates its comm IDs
//! (and SIDR request IDs) inside one of its blocks of QP numbers:
//! `id >> 20` is the block ([`block_of_comm_id`], [`comm_ids_of`]), so the
//! daemon needs no table of connections. A REQ or SIDR_REQ nobody listens
//! for is answered by the daemon as the kernel's CM answers it
//! ([`reject_unmatched`]).

use crate::slots::MAX_SLOT;
use softverbs_wire::cm::{
    rej_reason, sidr_status, CmDrep, CmMessage, CmRej, CmSidrRep, CmaHdr, MessageKind,
};
use softverbs_wire::mad::{MadError, GSI_PKEY, GSI_PSN, GSI_QKEY, GSI_QPN, MAD_LEN};
use softverbs_wire::{Bth, Deth, Flow, Opcode, PacketBuilder, PacketView};
use softverbs_wire::{BTH_LEN, DETH_LEN, ICRC_LEN};
use std::io;
use std::net::SocketAddr;
use std::ops::RangeInclusive;

/// Length of a GSI packet, BTH through ICRC (the UDP payload): 280.
pub const GSI_PACKET_LEN: usize = BTH_LEN + DETH_LEN + MAD_LEN + ICRC_LEN;

/// Bits of a comm ID below its block number.
const COMM_ID_BLOCK_SHIFT: u32 = 20;

/// The block of QP numbers (QPN >> 12) whose holder owns comm ID `id`
/// (or SIDR request ID): the top 12 bits.
pub const fn block_of_comm_id(id: u32) -> u16 {
    (id >> COMM_ID_BLOCK_SHIFT) as u16
}

/// The comm IDs (and SIDR request IDs) that belong to the holder of QP
/// block `block` (1..=4095): 2^20 of them.
pub fn comm_ids_of(block: u16) -> RangeInclusive<u32> {
    let block = u32::from(block.min(MAX_SLOT));
    let start = block << COMM_ID_BLOCK_SHIFT;
    start..=start | ((1 << COMM_ID_BLOCK_SHIFT) - 1)
}

/// The RoCEv2 packet (BTH through ICRC) that carries `mad` to QP1 from
/// socket address `src` to `dst` (normally port 4791): UD SEND_ONLY,
/// P_Key 0xFFFF, PSN 0, DETH Q_Key 0x80010000 from QP1, sealed for a
/// datagram that leaves alone (IPv4 identification 0). The ICRC covers
/// the UDP ports, so both are needed. Fails with `EAFNOSUPPORT` when the
/// two addresses are of different families.
pub fn gsi_packet(src: SocketAddr, dst: SocketAddr, mad: &[u8; MAD_LEN]) -> io::Result<Vec<u8>> {
    let flow = Flow::from_sockets(src, dst)
        .map_err(|_| io::Error::from_raw_os_error(libc::EAFNOSUPPORT))?;
    let deth = Deth {
        qkey: GSI_QKEY,
        src_qp: GSI_QPN,
    };
    let bth = Bth {
        pkey: GSI_PKEY,
        ..Bth::new(Opcode::UdSendOnly, GSI_QPN, GSI_PSN)
    };
    let builder = PacketBuilder::new(bth).with_deth(deth).with_payload(mad);
    let mut packet = vec![0; GSI_PACKET_LEN];
    let len = builder
        .build(&flow, &mut packet)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    packet.truncate(len);
    Ok(packet)
}

/// The MAD in `packet` (BTH through ICRC, as it arrived from `src` at
/// `dst`), if it is one QP1 takes: its ICRC checks (with the IPv4
/// identification recovered, as for every packet), and it is a UD
/// SEND_ONLY to QP1 with P_Key 0xFFFF (or 0x7FFF, which rxe also takes),
/// Q_Key 0x80010000 exactly (rxe's check for QP1) and a 256-byte payload.
pub fn parse_gsi(src: SocketAddr, dst: SocketAddr, packet: &[u8]) -> Option<[u8; MAD_LEN]> {
    let flow = Flow::from_sockets(src, dst).ok()?;
    flow.verify_recovering_identification(packet).ok()?;
    let view = PacketView::parse(packet).ok()?;
    let bth = view.bth();
    let to_qp1 = bth.opcode == Opcode::UdSendOnly && bth.dest_qp == GSI_QPN;
    let default_pkey = bth.pkey & 0x7FFF == 0x7FFF;
    if !to_qp1 || !default_pkey || view.deth()?.qkey != GSI_QKEY {
        return None;
    }
    view.payload().try_into().ok()
}

/// Where the daemon sends a MAD that arrived on QP1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsiRoute {
    /// A REQ or SIDR_REQ: to the context listening for this service at
    /// the packet's destination address; `None` when the service ID is
    /// not one of the IP port spaces' (nobody can listen for it). Without
    /// a listener, [`reject_unmatched`] answers.
    Service(Option<Service>),
    /// Any other CM message: to the holder of the block of this comm ID,
    /// the recipient's ([`block_of_comm_id`]).
    CommId(u32),
    /// A REJ with remote comm ID 0, from a requester that gave up its REQ
    /// before any answer: to the context its REQ went to, found by the
    /// packet's source and this comm ID, the sender's.
    Requester(u32),
    /// Not the CM's (another class, not a SEND, a CM attribute nobody
    /// handles) or malformed: dropped.
    Drop,
}

/// Where a MAD that arrived on QP1 goes: REQ and SIDR_REQ by their
/// service ID; REP, RTU, REJ, MRA, DREQ, DREP, LAP and APR by their
/// remote comm ID (the recipient's; the second word of each), SIDR_REP
/// by its request ID, a REJ without a remote comm ID by its sender's.
/// Only CM MADs the kernel's MAD layer and CM accept are routed
/// (`CmMessage::parse_mad`: base version 1, class 0x07 version 2, method
/// SEND).
pub fn route(mad: &[u8; MAD_LEN]) -> GsiRoute {
    match CmMessage::parse_mad(mad) {
        Ok((_, CmMessage::Req(m))) => service_route(m.service_id, &m.private_data),
        Ok((_, CmMessage::SidrReq(m))) => service_route(m.service_id, &m.private_data),
        Ok((_, CmMessage::SidrRep(m))) => GsiRoute::CommId(m.request_id),
        Ok((_, CmMessage::Rep(m))) => GsiRoute::CommId(m.remote_comm_id),
        Ok((_, CmMessage::Rtu(m))) => GsiRoute::CommId(m.remote_comm_id),
        Ok((_, CmMessage::Rej(m))) if m.remote_comm_id == 0 => GsiRoute::Requester(m.local_comm_id),
        Ok((_, CmMessage::Rej(m))) => GsiRoute::CommId(m.remote_comm_id),
        Ok((_, CmMessage::Mra(m))) => GsiRoute::CommId(m.remote_comm_id),
        Ok((_, CmMessage::Dreq(m))) => GsiRoute::CommId(m.remote_comm_id),
        Ok((_, CmMessage::Drep(m))) => GsiRoute::CommId(m.remote_comm_id),
        // LAP and APR (which the codec does not decode, and the kernel
        // ignores on RoCE) also start with the local and remote comm IDs.
        Err(MadError::UnknownAttribute(0x0019 | 0x001A)) => {
            let remote = mad.get(28..32).and_then(|b| b.try_into().ok());
            remote.map_or(GsiRoute::Drop, |b| GsiRoute::CommId(u32::from_be_bytes(b)))
        }
        Err(_) => GsiRoute::Drop,
    }
}

/// The service a REQ or SIDR_REQ asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Service {
    /// The rdma_cm port space and port of its service ID.
    pub port_space: u16,
    pub port: u16,
    /// Whether it asks for an IPv4 address: the IP version of the
    /// rdma_cm header opening its private data, which decides the family
    /// of listener that takes it (the kernel's `cma_match_private_data`);
    /// `None` without such a header.
    pub ipv4: Option<bool>,
}

/// The route of a REQ or SIDR_REQ for service ID `sid` with
/// `private_data`.
fn service_route(sid: u64, private_data: &[u8]) -> GsiRoute {
    let id = softverbs_wire::cm::IpServiceId::from_u64(sid);
    let ipv4 = CmaHdr::parse(private_data).ok().map(|h| h.dst.is_ipv4());
    GsiRoute::Service(id.map(|id| Service {
        port_space: id.port_space as u16,
        port: id.port,
        ipv4,
    }))
}

/// The kernel CM's answer to a REQ or SIDR_REQ that no listener takes:
/// for a REQ, a REJ with reason 8 (invalid service ID), local comm ID 0,
/// remote comm ID the REQ's local comm ID, "message rejected" REQ
/// (`cm_issue_rej` in Linux `drivers/infiniband/core/cm.c`); for a
/// SIDR_REQ, a SIDR_REP with status 1 (service ID not supported) echoing
/// its request ID and service ID; for a DREQ whose connection nobody
/// holds, a DREP. All carry the request's transaction ID, method SEND.
/// `None` for anything else. The answer goes to QP1 at the request's
/// source address.
pub fn reject_unmatched(mad: &[u8; MAD_LEN]) -> Option<[u8; MAD_LEN]> {
    let (header, message) = CmMessage::parse_mad(mad).ok()?;
    let answer = match message {
        CmMessage::Req(req) => CmMessage::Rej(CmRej {
            local_comm_id: 0,
            remote_comm_id: req.local_comm_id,
            message_rejected: MessageKind::Req,
            reason: rej_reason::INVALID_SERVICE_ID,
            ..CmRej::default()
        }),
        CmMessage::SidrReq(req) => CmMessage::SidrRep(CmSidrRep {
            request_id: req.request_id,
            status: sidr_status::UNSUPPORTED,
            service_id: req.service_id,
            ..CmSidrRep::default()
        }),
        // A DREQ for a connection nobody holds (its process is gone): the
        // kernel's CM answers it with a DREP (`cm_issue_drep`), so the
        // peer's disconnection ends at once instead of after its retries.
        CmMessage::Dreq(dreq) => CmMessage::Drep(CmDrep {
            local_comm_id: dreq.remote_comm_id,
            remote_comm_id: dreq.local_comm_id,
            ..CmDrep::default()
        }),
        _ => return None,
    };
    let mut out = [0; MAD_LEN];
    answer.emit_mad(header.tid, 0, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use softverbs_wire::cm::{ip_service_id, CmRep, CmReq, CmSidrReq, PortSpace};
    use softverbs_wire::mad::MadHeader;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn mad_of(message: CmMessage, tid: u64) -> [u8; MAD_LEN] {
        let mut mad = [0; MAD_LEN];
        message.emit_mad(tid, 0, &mut mad).unwrap();
        mad
    }

    fn req(local_comm_id: u32, ps: PortSpace, port: u16) -> [u8; MAD_LEN] {
        let req = CmReq {
            local_comm_id,
            service_id: ip_service_id(ps, port),
            ..CmReq::default()
        };
        mad_of(CmMessage::Req(req), 0x1234_5678_9abc_def0)
    }

    /// The packet is what docs/rdma-cm.md 4.1 says, byte for byte where it
    /// matters, and comes back whole over IPv4 and IPv6.
    #[test]
    fn a_gsi_packet_is_a_ud_send_to_qp1_and_parses_back() {
        let mad = req(0x0010_0001, PortSpace::Tcp, 7471);
        for (src, dst) in [
            (sa("10.0.0.1:50000"), sa("10.0.0.2:4791")),
            (sa("[fd00::1]:50000"), sa("[fd00::2]:4791")),
        ] {
            let p = gsi_packet(src, dst, &mad).unwrap();
            assert_eq!(p.len(), 280);
            assert_eq!(p[0], 0x64, "UD SEND_ONLY");
            assert_eq!(p[1] & 0x30, 0, "no pad");
            assert_eq!(&p[2..4], &[0xFF, 0xFF], "P_Key");
            assert_eq!(&p[5..8], &[0, 0, 1], "QP1");
            assert_eq!(&p[12..16], &[0x80, 0x01, 0, 0], "Q_Key");
            assert_eq!(&p[17..20], &[0, 0, 1], "source QP1");
            assert_eq!(&p[20..276], &mad[..]);
            Flow::from_sockets(src, dst).unwrap().verify(&p).unwrap();
            assert_eq!(parse_gsi(src, dst, &p), Some(mad));
            // The ICRC covers the addresses and the ports.
            assert_eq!(parse_gsi(dst, src, &p), None);
        }
        let v6 = sa("[fd00::2]:4791");
        assert!(gsi_packet(sa("10.0.0.1:1"), v6, &mad).is_err());
    }

    /// rxe's checks: what is not a UD SEND_ONLY to QP1 with the GSI keys
    /// and a whole MAD is refused, and so is any flipped bit.
    #[test]
    fn parse_gsi_refuses_what_qp1_would_drop() {
        let (src, dst) = (sa("10.0.0.1:50000"), sa("10.0.0.2:4791"));
        let flow = Flow::from_sockets(src, dst).unwrap();
        let good = gsi_packet(src, dst, &[7; MAD_LEN]).unwrap();
        let resealed = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut p = good.clone();
            edit(&mut p);
            let _ = flow.seal(&mut p);
            parse_gsi(src, dst, &p)
        };
        assert_eq!(resealed(&|_| {}), Some([7; MAD_LEN]));
        assert!(resealed(&|p| p[2] = 0x7F).is_some(), "0x7FFF passes");
        assert_eq!(resealed(&|p| p[3] = 0xFE), None, "another P_Key");
        assert_eq!(resealed(&|p| p[7] = 2), None, "QP2");
        assert_eq!(resealed(&|p| p[15] = 1), None, "another Q_Key");
        assert_eq!(resealed(&|p| p[0] = 0x04), None, "RC SEND_ONLY");
        assert_eq!(
            resealed(&|p| p[0] = 0x65),
            None,
            "UD SEND_ONLY with immediate"
        );
        assert_eq!(
            resealed(&|p| {
                p.truncate(276 - 4);
                p.extend_from_slice(&[0; 4]);
            }),
            None,
            "a short MAD"
        );
        for bit in 0..good.len() * 8 {
            let mut p = good.clone();
            p[bit / 8] ^= 1 << (bit % 8);
            // A single-bit error is always caught by the ICRC, unless it
            // is in the byte the ICRC masks (FECN, BECN, reserved).
            if bit / 8 != 4 {
                assert_eq!(parse_gsi(src, dst, &p), None, "bit {bit}");
            }
        }
        for len in 0..good.len() {
            assert_eq!(parse_gsi(src, dst, &good[..len]), None);
        }
    }

    /// Garbage never panics anything here.
    #[test]
    fn garbage_is_refused_without_panicking() {
        let (src, dst) = (sa("10.0.0.1:50000"), sa("10.0.0.2:4791"));
        let mut rng = fastrand::Rng::with_seed(11);
        for _ in 0..20_000 {
            let len = rng.usize(..400);
            let mut p: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
            if rng.bool() && p.len() > 8 {
                p[5..8].copy_from_slice(&[0, 0, 1]);
            }
            let _ = parse_gsi(src, dst, &p);
            let mut mad = [0; MAD_LEN];
            for (m, b) in mad.iter_mut().zip(p.iter().cycle()) {
                *m = *b;
            }
            if rng.bool() {
                mad[..4].copy_from_slice(&[1, 7, 2, 3]);
                mad[16..18].copy_from_slice(&[0, rng.u8(0x10..0x1B)]);
            }
            let _ = route(&mad);
            let _ = reject_unmatched(&mad);
        }
    }

    #[test]
    fn cm_messages_route_by_service_or_recipient() {
        let ps = PortSpace::Udp;
        let service = |port_space, port, ipv4| {
            GsiRoute::Service(Some(Service {
                port_space,
                port,
                ipv4,
            }))
        };
        assert_eq!(
            route(&req(5, PortSpace::Tcp, 7471)),
            service(0x0106, 7471, None)
        );
        let v6 = CmaHdr {
            src: sa("[fd00::1]:5000"),
            dst: "fd00::2".parse().unwrap(),
        };
        let sidr = CmSidrReq {
            request_id: 9,
            service_id: ip_service_id(ps, 4000),
            private_data: v6.prepend(&[]).unwrap(),
            ..CmSidrReq::default()
        };
        let sidr = mad_of(CmMessage::SidrReq(sidr), 1);
        assert_eq!(route(&sidr), service(0x0111, 4000, Some(false)));
        let v4 = CmaHdr {
            src: sa("10.0.0.1:5000"),
            dst: "10.0.0.2".parse().unwrap(),
        };
        let req_v4 = CmReq {
            service_id: ip_service_id(PortSpace::Tcp, 7471),
            private_data: v4.prepend(&[]).unwrap(),
            ..CmReq::default()
        };
        let req_v4 = mad_of(CmMessage::Req(req_v4), 1);
        assert_eq!(route(&req_v4), service(0x0106, 7471, Some(true)));
        let not_ip = CmReq {
            service_id: 0x1000_0000_0000_0001,
            ..CmReq::default()
        };
        let not_ip = mad_of(CmMessage::Req(not_ip), 1);
        assert_eq!(route(&not_ip), GsiRoute::Service(None));
        let rep = CmRep {
            local_comm_id: 1,
            remote_comm_id: 0x0030_0007,
            ..CmRep::default()
        };
        assert_eq!(
            route(&mad_of(CmMessage::Rep(rep), 1)),
            GsiRoute::CommId(0x0030_0007)
        );
        let rep = CmSidrRep {
            request_id: 0x0040_0001,
            ..CmSidrRep::default()
        };
        assert_eq!(
            route(&mad_of(CmMessage::SidrRep(rep), 1)),
            GsiRoute::CommId(0x0040_0001)
        );
        // LAP: remote comm ID in the second word.
        let mut lap = [0; MAD_LEN];
        MadHeader::cm(0x0019, 1, 0).emit(&mut lap).unwrap();
        lap[28..32].copy_from_slice(&0x0050_0002u32.to_be_bytes());
        assert_eq!(route(&lap), GsiRoute::CommId(0x0050_0002));
        // Another class, another method, ClassPortInfo: dropped.
        let mut other = lap;
        other[1] = 0x04;
        assert_eq!(route(&other), GsiRoute::Drop);
        let mut get = lap;
        get[3] = 0x01;
        assert_eq!(route(&get), GsiRoute::Drop);
        let mut cpi = lap;
        cpi[17] = 0x01;
        assert_eq!(route(&cpi), GsiRoute::Drop);
    }

    /// The daemon's answers are the kernel's (`cm_issue_rej`, SIDR status
    /// 1), with the request's TID.
    #[test]
    fn unmatched_requests_get_the_kernels_answer() {
        let rej = reject_unmatched(&req(0x0020_0003, PortSpace::Tcp, 1)).unwrap();
        let (h, m) = CmMessage::parse_mad(&rej).unwrap();
        assert_eq!(
            (h.tid, h.method, h.attr_id, h.attr_mod),
            (0x1234_5678_9abc_def0, 0x03, 0x0012, 0)
        );
        let CmMessage::Rej(m) = m else {
            panic!("{m:?}")
        };
        assert_eq!(
            (m.local_comm_id, m.remote_comm_id, m.reason),
            (0, 0x0020_0003, 8)
        );
        assert_eq!(m.message_rejected, MessageKind::Req);
        let sidr = CmSidrReq {
            request_id: 0x0020_0004,
            service_id: ip_service_id(PortSpace::Udp, 5),
            ..CmSidrReq::default()
        };
        let rep = reject_unmatched(&mad_of(CmMessage::SidrReq(sidr), 77)).unwrap();
        let (h, m) = CmMessage::parse_mad(&rep).unwrap();
        assert_eq!((h.tid, h.attr_id), (77, 0x0018));
        let CmMessage::SidrRep(m) = m else {
            panic!("{m:?}")
        };
        assert_eq!((m.request_id, m.status), (0x0020_0004, 1));
        assert_eq!(m.service_id, sidr.service_id);
        let rep = mad_of(CmMessage::Rep(CmRep::default()), 1);
        assert_eq!(reject_unmatched(&rep), None, "only requests are answered");
    }

    #[test]
    fn comm_ids_name_their_block() {
        for block in [1, 77, MAX_SLOT] {
            let ids = comm_ids_of(block);
            assert_eq!(block_of_comm_id(*ids.start()), block);
            assert_eq!(block_of_comm_id(*ids.end()), block);
            assert_eq!(ids.end() - ids.start(), 0xF_FFFF);
        }
        assert_eq!(*comm_ids_of(MAX_SLOT).end(), u32::MAX);
    }
}
