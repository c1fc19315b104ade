//! The transmit boundary: the engine writes each packet straight into the
//! buffer it leaves from, as smoltcp emits into the device's buffer.
//!
//! The embedder hands [`Engine::poll_transmit_to`] a [`PacketSink`] (the
//! transport's GSO batch). For each packet the engine asks the sink for
//! room, giving the packet's [`Route`] and length; the sink answers with
//! the place in its buffer and, when it knows the IP and UDP headers the
//! packet will leave with, the packet's ICRC started from them. The engine
//! then writes the headers, copies the payload from application memory
//! into place piece by piece, feeding each piece to the ICRC right after
//! it lands (as rxe's `fill_packet` does), and writes the ICRC: one copy
//! and one CRC pass per payload byte, no staging buffer, no re-parsing.

use crate::engine::Engine;
use crate::gid::Gid;
use crate::handles::QpId;
use crate::memory::HostMemory;
use crate::qp_state::QpType;
use crate::requester::{response_path, Path};
use crate::time::Nanos;
use softverbs_wire::{packet_len, Icrc, PacketBuilder, ICRC_LEN};

/// The largest packet the engine builds: headers, a 4096-byte payload,
/// pad and ICRC. Buffers passed to [`Engine::poll_transmit`] need this.
pub const MAX_PACKET_LEN: usize =
    softverbs_wire::MAX_HEADER_LEN + 4 + 4096 + 3 + softverbs_wire::ICRC_LEN;

/// Where a packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The local GID it leaves from (its source IP).
    pub src_gid: Gid,
    /// The GID it goes to (its destination IP).
    pub dst_gid: Gid,
    /// The QP number in its BTH.
    pub dest_qpn: u32,
    /// The traffic class of its IP header (IPv4 TOS, IPv6 traffic
    /// class): its address vector's GRH `traffic_class`.
    pub traffic_class: u8,
}

/// A packet the engine wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes written, BTH through ICRC.
    pub len: usize,
    /// The local GID it leaves from (its source IP).
    pub src_gid: Gid,
    /// The GID it goes to (its destination IP).
    pub dst_gid: Gid,
    /// The QP number in its BTH.
    pub dest_qpn: u32,
    /// The traffic class of its IP header.
    pub traffic_class: u8,
}

/// Room for one packet in a [`PacketSink`].
#[derive(Debug)]
pub struct Reservation<'a> {
    /// Where the packet goes: as long as asked for (shorter only if the
    /// sink cannot hold it; the packet is then not written).
    pub buf: &'a mut [u8],
    /// The packet's ICRC, started from the IP and UDP headers it will
    /// carry; `None` leaves the ICRC field zero, for a sink that seals
    /// packets itself.
    pub icrc: Option<&'a mut Icrc>,
}

/// Where the engine writes the packets it sends.
pub trait PacketSink {
    /// Room for the next packet, `len` bytes from the BTH through the
    /// ICRC, going along `route`. A packet the sink cannot send (no
    /// address for its GID) still gets room; the sink drops it at
    /// [`PacketSink::commit`], as a network drops it, and the reliable
    /// transport resends.
    fn reserve(&mut self, route: &Route, len: usize) -> Reservation<'_>;

    /// The packet last reserved is written, ICRC included. A reservation
    /// not committed (the payload could not be read) is abandoned.
    fn commit(&mut self);
}

/// A sink of one packet in a caller's buffer, with its ICRC field left
/// zero: [`Engine::poll_transmit`], for embedders that seal packets
/// themselves or need no ICRC (the simulator, tests).
pub(crate) struct BufferSink<'a> {
    pub(crate) buf: &'a mut [u8],
}

impl PacketSink for BufferSink<'_> {
    fn reserve(&mut self, _route: &Route, len: usize) -> Reservation<'_> {
        let end = len.min(self.buf.len());
        Reservation {
            buf: &mut self.buf[..end],
            icrc: None,
        }
    }

    fn commit(&mut self) {}
}

/// Why a packet was not written.
#[derive(Debug)]
pub(crate) enum EmitError<E> {
    /// The headers do not fit the opcode, or the sink had no room.
    Build,
    /// The payload could not be read.
    Fill(E),
}

/// Writes one packet into `sink`: the headers of `builder`, a payload of
/// `payload_len` bytes that `fill` copies into place (calling its second
/// argument with each piece right after copying it, for the ICRC), the
/// pad and the ICRC. Commits it and returns what was sent; on an error
/// nothing is committed.
pub(crate) fn emit<E>(
    sink: &mut dyn PacketSink,
    path: Path,
    builder: &PacketBuilder<'_>,
    payload_len: usize,
    fill: impl FnOnce(&mut [u8], &mut dyn FnMut(&[u8])) -> Result<(), E>,
) -> Result<Transmit, EmitError<E>> {
    let opcode = builder.bth.opcode;
    let (src_gid, dst_gid) = path.gids;
    let sent = Transmit {
        len: packet_len(opcode, payload_len),
        src_gid,
        dst_gid,
        dest_qpn: builder.bth.dest_qp.get(),
        traffic_class: path.traffic_class,
    };
    let route = Route {
        src_gid,
        dst_gid,
        dest_qpn: sent.dest_qpn,
        traffic_class: path.traffic_class,
    };
    let Reservation { buf, icrc } = sink.reserve(&route, sent.len);
    let len = builder
        .build_around(buf, payload_len)
        .map_err(|_| EmitError::Build)?
        .0;
    let (headers, body) = buf[..len].split_at_mut(opcode.header_len());
    let (payload, trailer) = body.split_at_mut(payload_len);
    let (pad, icrc_field) = trailer.split_at_mut(trailer.len() - ICRC_LEN);
    match icrc {
        Some(icrc) => {
            icrc.roce_headers(headers).map_err(|_| EmitError::Build)?;
            fill(payload, &mut |piece| icrc.update(piece)).map_err(EmitError::Fill)?;
            icrc.update(pad);
            icrc_field.copy_from_slice(&icrc.finish().to_le_bytes());
        }
        None => fill(payload, &mut |_| {}).map_err(EmitError::Fill)?,
    }
    sink.commit();
    Ok(sent)
}

impl Engine {
    /// The next packet to send, if any, written into `buf` (at least
    /// [`MAX_PACKET_LEN`] bytes) with its ICRC field zero. QPs take turns,
    /// congestion notices and responses first within a QP.
    pub fn poll_transmit(
        &mut self,
        now: Nanos,
        mem: &dyn HostMemory,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        self.poll_transmit_to(now, mem, &mut BufferSink { buf })
    }

    /// The next packet to send, if any, written into `sink` (see the
    /// module docs). QPs take turns, congestion notices and responses
    /// first within a QP.
    pub fn poll_transmit_to(
        &mut self,
        now: Nanos,
        mem: &dyn HostMemory,
        sink: &mut dyn PacketSink,
    ) -> Option<Transmit> {
        self.note_fault_time(now);
        while let Some(id) = self.schedule.next_turn() {
            let (sent, asked_ack) = self.transmit_one(id, now, mem, sink);
            self.sync_timer(id);
            if sent.is_some() {
                self.schedule.sent_in_turn(asked_ack);
                return sent;
            }
            self.schedule.end_turn();
            if self
                .qps
                .get(id)
                .is_some_and(|qp| qp.direct && qp.qp_type == QpType::Ud)
            {
                // Its datagrams for this host go out whole again.
                self.schedule.wake(id);
            }
        }
        None
    }

    fn transmit_one(
        &mut self,
        id: QpId,
        now: Nanos,
        mem: &dyn HostMemory,
        sink: &mut dyn PacketSink,
    ) -> (Option<Transmit>, bool) {
        let (mut resent_now, mut asked_ack, mut cnp) = (0, false, false);
        let sent = self.with_qp(id, |qp, ctx| {
            // A congestion notice before anything (`cnp.rs`).
            if let Some(sent) = qp.resp.notices.transmit(now, sink) {
                cnp = true;
                return Some(sent);
            }
            // Responses; a READ stream whose MR went away turns into
            // a NAK queued in its place, so keep asking.
            while qp.responder_pending() {
                let path = response_path(&qp.attr, ctx);
                if let Some(sent) = qp.responder_transmit(ctx, mem, path, sink) {
                    return Some(sent);
                }
            }
            if qp.direct && !qp.ud_wire_next(ctx) {
                return None; // its requests go out whole (`poll_direct`)
            }
            let resent = qp.req.resent;
            let sent = qp.requester_transmit(ctx, now, mem, sink)?;
            resent_now = qp.req.resent - resent;
            asked_ack = sent.asked_ack;
            Some(sent.transmit)
        });
        self.stats.tx_resent += resent_now;
        self.stats.tx_cnp += u64::from(cnp);
        (sent.flatten(), asked_ack)
    }
}
