//! Target `packets`: `Engine::handle_packet` on whatever arrives, against
//! the [`Target`]'s QPs of every type in every state.
//!
//! The input is a list of frames, each a header and a packet (BTH through
//! ICRC). The header picks one of the target's QPs and may patch the packet
//! so that it gets past the first checks: its destination QP number, a PSN
//! near the one the QP expects, a real rkey. Mutating a real packet (the
//! seeds are one per opcode) then explores the engine behind those checks.
//! Nothing may panic, the engine may touch no memory outside `FlatMemory`
//! (which panics), and no byte outside the writable regions may change.

use crate::bytes::{Reader, Writer};
use crate::target::{layout, peer_gid, stranger_gid, Target, RQ_PSN, SQ_PSN};
use softverbs_wire::{ExtHeader, Opcode, BTH_LEN};

/// Put the chosen QP's number in the BTH.
pub const DEST: u8 = 0x01;
/// Set the PSN to the one the chosen QP expects plus the frame's delta.
pub const PSN: u8 = 0x02;
/// Put the key of region `flags >> 6` in the RETH, AtomicETH or IETH.
pub const RKEY: u8 = 0x04;
/// Send from a GID no QP is connected to.
pub const STRANGER: u8 = 0x08;
/// Afterwards, move the clock on by a second: every timer due fires.
pub const TICK: u8 = 0x10;
/// Afterwards, send what the engine wants to send.
pub const TRANSMIT: u8 = 0x20;

/// One packet and how to aim it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Index into the target's QPs (modulo their number).
    pub qp: u8,
    /// The flags above; the top two bits choose a region's key.
    pub flags: u8,
    /// Added to the expected PSN when [`PSN`] is set.
    pub psn_delta: i8,
    /// The packet, BTH through ICRC.
    pub packet: Vec<u8>,
}

impl Frame {
    /// Reads the next frame; `None` at the end of the input.
    pub fn decode(r: &mut Reader<'_>) -> Option<Frame> {
        if r.is_empty() {
            return None;
        }
        let qp = r.take();
        let flags = r.take();
        let psn_delta = r.take();
        let len: u16 = r.take();
        let packet = r.bytes(usize::from(len)).to_vec();
        Some(Frame {
            qp,
            flags,
            psn_delta,
            packet,
        })
    }

    /// Appends the frame in the format [`Frame::decode`] reads.
    pub fn encode(&self, w: &mut Writer) {
        w.put(self.qp);
        w.put(self.flags);
        w.put(self.psn_delta);
        w.put(self.packet.len() as u16);
        w.bytes(&self.packet);
    }
}

/// Runs one input against a fresh target.
pub fn run(data: &[u8]) {
    let mut t = Target::new();
    let mut r = Reader::new(data);
    while let Some(frame) = Frame::decode(&mut r) {
        deliver(&mut t, frame);
    }
    t.drain();
    t.tick(10_000_000_000);
    t.drain();
    t.check_memory();
}

/// Delivers one frame to the target, patched as its header says, then
/// ticks or transmits if asked.
pub fn deliver(t: &mut Target, mut frame: Frame) {
    let index = usize::from(frame.qp) % t.qps.len();
    let qpn = t.qps[index].qpn;
    let key = t.keys[usize::from(frame.flags >> 6) % t.keys.len()];
    patch(&mut frame, qpn, key);
    let src = if frame.flags & STRANGER != 0 {
        stranger_gid()
    } else {
        peer_gid()
    };
    t.now += 1_000;
    let dst = crate::target::local_gid();
    t.engine
        .handle_packet(t.now, src, dst, &frame.packet, &mut t.mem);
    if frame.flags & TICK != 0 {
        t.tick(1_000_000_000);
    }
    if frame.flags & TRANSMIT != 0 {
        t.drain();
    }
}

/// Applies the frame's patches to whatever of the packet is there.
fn patch(frame: &mut Frame, qpn: u32, key: u32) {
    let p = &mut frame.packet;
    if frame.flags & DEST != 0 && p.len() >= 8 {
        p[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    }
    let opcode = p.first().and_then(|&b| Opcode::from_u8(b).ok());
    if frame.flags & PSN != 0 && p.len() >= BTH_LEN {
        let base = match opcode {
            Some(o) if o.is_response() => SQ_PSN,
            _ => RQ_PSN,
        };
        let psn = base.wrapping_add_signed(i32::from(frame.psn_delta)) & 0x00FF_FFFF;
        p[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
    }
    if let (true, Some(opcode)) = (frame.flags & RKEY != 0, opcode) {
        if let Some(at) = rkey_offset(opcode) {
            if let Some(field) = p.get_mut(at..at + 4) {
                field.copy_from_slice(&key.to_be_bytes());
            }
        }
    }
}

/// Where the rkey of the RETH, AtomicETH or IETH is, if the opcode has
/// one.
fn rkey_offset(opcode: Opcode) -> Option<usize> {
    let mut offset = BTH_LEN;
    for &header in opcode.ext_headers() {
        match header {
            ExtHeader::Reth | ExtHeader::AtomicEth => return Some(offset + 8),
            ExtHeader::Ieth => return Some(offset),
            _ => offset += header.wire_len(),
        }
    }
    None
}

/// Index of the first target QP of this type and state (not on the SRQ).
pub fn qp_index(ty: softverbs_engine::QpType, state: softverbs_engine::QpState) -> u8 {
    let at = layout()
        .iter()
        .position(|&(t, s, srq)| t == ty && s == state && !srq)
        .expect("every type and state but RC SQE is in the layout");
    at as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let frames = [
            Frame {
                qp: 3,
                flags: DEST | PSN | 0x80,
                psn_delta: -2,
                packet: vec![1, 2, 3],
            },
            Frame {
                qp: 200,
                flags: 0,
                psn_delta: 0,
                packet: vec![],
            },
        ];
        let mut w = Writer::default();
        frames.iter().for_each(|f| f.encode(&mut w));
        let mut r = Reader::new(&w.out);
        for f in &frames {
            assert_eq!(Frame::decode(&mut r).as_ref(), Some(f));
        }
        assert_eq!(Frame::decode(&mut r), None);
    }

    #[test]
    fn rkeys_sit_where_the_headers_put_them() {
        assert_eq!(rkey_offset(Opcode::RcWriteFirst), Some(20));
        assert_eq!(rkey_offset(Opcode::RcFetchAdd), Some(20));
        assert_eq!(rkey_offset(Opcode::RcSendLastInv), Some(12));
        assert_eq!(rkey_offset(Opcode::RcSendOnly), None);
    }
}
