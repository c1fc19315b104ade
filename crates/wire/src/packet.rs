//! Whole RoCE packets: the UDP payload from the BTH to the ICRC.
//!
//! Layout: BTH (12) | extension headers the opcode implies | payload | pad
//! (PadCnt bytes, so payload plus pad is a multiple of 4) | ICRC (4).
//!
//! [`PacketView`] parses one without copying the payload;
//! [`PacketBuilder`] writes one into a caller-provided buffer. Neither
//! allocates.

use crate::aeth::Aeth;
use crate::bth::Bth;
use crate::error::{HeaderKind, WireError};
use crate::ext::{AtomicAckEth, AtomicEth, Deth, Ieth, ImmDt, Reth};
use crate::header::Header;
use crate::icrc;
use crate::ip::Flow;
use crate::opcode::{ExtHeader, Opcode};
use crate::u24::{Psn, Qpn};
use crate::{BTH_LEN, ICRC_LEN};

/// Every extension header kind, for checking a builder's headers against
/// its opcode.
const ALL_EXT: [ExtHeader; 7] = [
    ExtHeader::Reth,
    ExtHeader::Aeth,
    ExtHeader::AtomicEth,
    ExtHeader::AtomicAckEth,
    ExtHeader::Deth,
    ExtHeader::ImmDt,
    ExtHeader::Ieth,
];

/// Pad bytes that bring `payload_len` to a multiple of 4.
pub const fn pad_len(payload_len: usize) -> usize {
    payload_len.wrapping_neg() & 3
}

/// Length of a whole packet (BTH through ICRC) with `opcode` and
/// `payload_len` payload bytes (saturating: no real payload comes near
/// `usize::MAX`).
pub const fn packet_len(opcode: Opcode, payload_len: usize) -> usize {
    let fixed = opcode.header_len() + ICRC_LEN + pad_len(payload_len);
    payload_len.saturating_add(fixed)
}

/// The length-consistency check of a received packet: given its opcode,
/// its BTH PadCnt and its total length (BTH through ICRC), returns the
/// payload length, or why the lengths cannot belong together.
pub fn payload_len(opcode: Opcode, pad_count: u8, total_len: usize) -> Result<usize, WireError> {
    let needed = opcode.header_len() + ICRC_LEN;
    let body = total_len.checked_sub(needed).ok_or(WireError::Truncated {
        header: HeaderKind::Packet,
        needed,
        available: total_len,
    })?;
    payload_len_of_body(opcode, pad_count, body)
}

/// Payload length from the payload-plus-pad length `body`.
fn payload_len_of_body(opcode: Opcode, pad_count: u8, body: usize) -> Result<usize, WireError> {
    let payload = body
        .checked_sub(usize::from(pad_count))
        .ok_or(WireError::BadPadCount {
            pad: pad_count,
            available: body,
        })?;
    if !opcode.has_payload() && body != 0 {
        return Err(WireError::UnexpectedPayload { opcode, len: body });
    }
    if body & 3 != 0 {
        return Err(WireError::Misaligned { len: body });
    }
    Ok(payload)
}

/// The extension headers of one packet; exactly those its opcode implies
/// are `Some`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExtHeaders {
    /// RDMA ETH (WRITE first/only, READ request).
    pub reth: Option<Reth>,
    /// ACK ETH (ACK, ATOMIC_ACK, READ response first/last/only).
    pub aeth: Option<Aeth>,
    /// Atomic ETH (CMP_SWAP, FETCH_ADD).
    pub atomic_eth: Option<AtomicEth>,
    /// Atomic ACK ETH (ATOMIC_ACK).
    pub atomic_ack_eth: Option<AtomicAckEth>,
    /// Datagram ETH (UD).
    pub deth: Option<Deth>,
    /// Immediate data (*_IMM).
    pub imm_dt: Option<ImmDt>,
    /// Invalidate ETH (SEND_*_INV).
    pub ieth: Option<Ieth>,
}

impl ExtHeaders {
    /// Whether `header` is present.
    pub const fn contains(&self, header: ExtHeader) -> bool {
        match header {
            ExtHeader::Reth => self.reth.is_some(),
            ExtHeader::Aeth => self.aeth.is_some(),
            ExtHeader::AtomicEth => self.atomic_eth.is_some(),
            ExtHeader::AtomicAckEth => self.atomic_ack_eth.is_some(),
            ExtHeader::Deth => self.deth.is_some(),
            ExtHeader::ImmDt => self.imm_dt.is_some(),
            ExtHeader::Ieth => self.ieth.is_some(),
        }
    }

    /// How many headers are present.
    fn count(&self) -> usize {
        ALL_EXT.iter().filter(|&&h| self.contains(h)).count()
    }

    /// Parses the headers `opcode` implies from `buf`, which starts right
    /// after the BTH.
    pub fn parse(opcode: Opcode, buf: &[u8]) -> Result<Self, WireError> {
        let mut ext = Self::default();
        let mut offset = 0;
        for &header in opcode.ext_headers() {
            let rest = buf.get(offset..).unwrap_or_default();
            ext.parse_one(header, rest)?;
            offset += header.wire_len();
        }
        Ok(ext)
    }

    fn parse_one(&mut self, header: ExtHeader, buf: &[u8]) -> Result<(), WireError> {
        match header {
            ExtHeader::Reth => self.reth = Some(Reth::parse(buf)?),
            ExtHeader::Aeth => self.aeth = Some(Aeth::parse(buf)?),
            ExtHeader::AtomicEth => self.atomic_eth = Some(AtomicEth::parse(buf)?),
            ExtHeader::AtomicAckEth => self.atomic_ack_eth = Some(AtomicAckEth::parse(buf)?),
            ExtHeader::Deth => self.deth = Some(Deth::parse(buf)?),
            ExtHeader::ImmDt => self.imm_dt = Some(ImmDt::parse(buf)?),
            ExtHeader::Ieth => self.ieth = Some(Ieth::parse(buf)?),
        }
        Ok(())
    }

    /// Checks that exactly the headers `opcode` implies are present.
    pub fn check(&self, opcode: Opcode) -> Result<(), WireError> {
        // Every packet built passes here (twice): the common case costs
        // the opcode's few headers, not a search of its list per header.
        let implied = opcode.ext_headers();
        if implied.iter().all(|&h| self.contains(h)) && self.count() == implied.len() {
            return Ok(());
        }
        for header in ALL_EXT {
            match (opcode.has(header), self.contains(header)) {
                (true, false) => return Err(WireError::MissingHeader { opcode, header }),
                (false, true) => return Err(WireError::UnexpectedHeader { opcode, header }),
                _ => {}
            }
        }
        Ok(())
    }

    /// Writes the headers `opcode` implies, in wire order, to the start of
    /// `buf` and returns their length.
    pub fn write(&self, opcode: Opcode, buf: &mut [u8]) -> Result<usize, WireError> {
        self.check(opcode)?;
        self.write_checked(opcode, buf)
    }

    /// [`ExtHeaders::write`] once [`ExtHeaders::check`] has passed.
    fn write_checked(&self, opcode: Opcode, buf: &mut [u8]) -> Result<usize, WireError> {
        let mut offset = 0;
        for &header in opcode.ext_headers() {
            let rest = buf.get_mut(offset..).unwrap_or_default();
            offset += self.write_one(opcode, header, rest)?;
        }
        Ok(offset)
    }

    fn write_one(
        &self,
        opcode: Opcode,
        header: ExtHeader,
        buf: &mut [u8],
    ) -> Result<usize, WireError> {
        let missing = WireError::MissingHeader { opcode, header };
        match header {
            ExtHeader::Reth => self.reth.ok_or(missing)?.write(buf),
            ExtHeader::Aeth => self.aeth.ok_or(missing)?.write(buf),
            ExtHeader::AtomicEth => self.atomic_eth.ok_or(missing)?.write(buf),
            ExtHeader::AtomicAckEth => self.atomic_ack_eth.ok_or(missing)?.write(buf),
            ExtHeader::Deth => self.deth.ok_or(missing)?.write(buf),
            ExtHeader::ImmDt => self.imm_dt.ok_or(missing)?.write(buf),
            ExtHeader::Ieth => self.ieth.ok_or(missing)?.write(buf),
        }
    }
}

/// A parsed RoCE packet borrowing its payload from the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketView<'a> {
    bytes: &'a [u8],
    bth: Bth,
    ext: ExtHeaders,
    payload: &'a [u8],
    icrc: u32,
}

impl<'a> PacketView<'a> {
    /// Parses a UDP payload (BTH through ICRC).
    ///
    /// Checks: every header is complete; the opcode is known; TVer is 0;
    /// payload plus pad is a multiple of 4 and at least PadCnt; opcodes
    /// without payload have none (a reserved AETH syndrome is not an
    /// error here: the requester answers it). The ICRC is returned, not verified: that needs the IP and UDP headers
    /// (see [`PacketView::verify_icrc`] and [`crate::icrc`]).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, WireError> {
        let bth = Bth::parse(bytes)?;
        if bth.tver != 0 {
            return Err(WireError::UnsupportedTver(bth.tver));
        }
        let opcode = bth.opcode;
        let ext = ExtHeaders::parse(opcode, bytes.get(BTH_LEN..).unwrap_or_default())?;
        let body = bytes.get(opcode.header_len()..).unwrap_or_default();
        let (data, icrc) = icrc::split_icrc(body)?;
        let len = payload_len_of_body(opcode, bth.pad_count, data.len())?;
        let payload = data.get(..len).unwrap_or_default();
        Ok(Self {
            bytes,
            bth,
            ext,
            payload,
            icrc,
        })
    }

    /// The BTH.
    pub const fn bth(&self) -> &Bth {
        &self.bth
    }

    /// The opcode.
    pub const fn opcode(&self) -> Opcode {
        self.bth.opcode
    }

    /// The PSN.
    pub const fn psn(&self) -> Psn {
        self.bth.psn
    }

    /// The destination QP.
    pub const fn dest_qp(&self) -> Qpn {
        self.bth.dest_qp
    }

    /// All extension headers.
    pub const fn ext(&self) -> &ExtHeaders {
        &self.ext
    }

    /// The RETH, if the opcode carries one.
    pub const fn reth(&self) -> Option<&Reth> {
        self.ext.reth.as_ref()
    }

    /// The AETH, if the opcode carries one.
    pub const fn aeth(&self) -> Option<&Aeth> {
        self.ext.aeth.as_ref()
    }

    /// The AtomicETH, if the opcode carries one.
    pub const fn atomic_eth(&self) -> Option<&AtomicEth> {
        self.ext.atomic_eth.as_ref()
    }

    /// The AtomicAckETH, if the opcode carries one.
    pub const fn atomic_ack_eth(&self) -> Option<&AtomicAckEth> {
        self.ext.atomic_ack_eth.as_ref()
    }

    /// The DETH, if the opcode carries one.
    pub const fn deth(&self) -> Option<&Deth> {
        self.ext.deth.as_ref()
    }

    /// The immediate data, if the opcode carries it.
    pub fn imm(&self) -> Option<u32> {
        self.ext.imm_dt.map(|i| i.imm)
    }

    /// The IETH, if the opcode carries one.
    pub const fn ieth(&self) -> Option<&Ieth> {
        self.ext.ieth.as_ref()
    }

    /// The payload, without pad.
    pub const fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// The ICRC the packet carries.
    pub const fn icrc(&self) -> u32 {
        self.icrc
    }

    /// The whole packet, BTH through ICRC.
    pub const fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Checks the carried ICRC against the one computed for `flow`.
    pub fn verify_icrc(&self, flow: &Flow) -> Result<(), WireError> {
        flow.verify(self.bytes)
    }
}

/// Builds a RoCE packet into a caller-provided buffer.
///
/// The BTH's `pad_count` is ignored: the builder derives it from the
/// payload length. The extension headers must be exactly those the opcode
/// implies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketBuilder<'p> {
    /// The BTH (its `pad_count` is recomputed).
    pub bth: Bth,
    /// The extension headers.
    pub ext: ExtHeaders,
    /// The payload.
    pub payload: &'p [u8],
}

impl<'p> PacketBuilder<'p> {
    /// A packet with this BTH, no extension headers and no payload.
    pub fn new(bth: Bth) -> Self {
        Self {
            bth,
            ext: ExtHeaders::default(),
            payload: &[],
        }
    }

    /// Sets the RETH.
    #[must_use]
    pub fn with_reth(mut self, reth: Reth) -> Self {
        self.ext.reth = Some(reth);
        self
    }

    /// Sets the AETH.
    #[must_use]
    pub fn with_aeth(mut self, aeth: Aeth) -> Self {
        self.ext.aeth = Some(aeth);
        self
    }

    /// Sets the AtomicETH.
    #[must_use]
    pub fn with_atomic_eth(mut self, atomic_eth: AtomicEth) -> Self {
        self.ext.atomic_eth = Some(atomic_eth);
        self
    }

    /// Sets the AtomicAckETH.
    #[must_use]
    pub fn with_atomic_ack_eth(mut self, atomic_ack_eth: AtomicAckEth) -> Self {
        self.ext.atomic_ack_eth = Some(atomic_ack_eth);
        self
    }

    /// Sets the DETH.
    #[must_use]
    pub fn with_deth(mut self, deth: Deth) -> Self {
        self.ext.deth = Some(deth);
        self
    }

    /// Sets the immediate data.
    #[must_use]
    pub fn with_imm(mut self, imm: u32) -> Self {
        self.ext.imm_dt = Some(ImmDt { imm });
        self
    }

    /// Sets the IETH.
    #[must_use]
    pub fn with_ieth(mut self, ieth: Ieth) -> Self {
        self.ext.ieth = Some(ieth);
        self
    }

    /// Sets the payload.
    #[must_use]
    pub fn with_payload(mut self, payload: &'p [u8]) -> Self {
        self.payload = payload;
        self
    }

    /// Length of the packet this builder writes, BTH through ICRC.
    pub fn wire_len(&self) -> usize {
        packet_len(self.bth.opcode, self.payload.len())
    }

    /// Writes the packet with its ICRC computed for `flow`; returns its
    /// length.
    pub fn build(&self, flow: &Flow, buf: &mut [u8]) -> Result<usize, WireError> {
        let len = self.build_unsealed(buf)?;
        flow.seal(buf.get_mut(..len).unwrap_or_default())?;
        Ok(len)
    }

    /// Writes the packet with a zero ICRC field (for callers that seal it
    /// later, e.g. with [`crate::icrc::seal`] and real IP headers); returns
    /// its length.
    pub fn build_unsealed(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let (len, payload) = self.build_around(buf, self.payload.len())?;
        payload.copy_from_slice(self.payload);
        Ok(len)
    }

    /// Writes the packet's headers, pad and zero ICRC field around a
    /// payload of `payload_len` bytes (the builder's own `payload` is not
    /// used) and returns the packet's length and the payload's place in
    /// `buf`, for the caller to fill: data read from application memory
    /// then lands in the packet once, with no staging copy.
    pub fn build_around<'b>(
        &self,
        buf: &'b mut [u8],
        payload_len: usize,
    ) -> Result<(usize, &'b mut [u8]), WireError> {
        let opcode = self.bth.opcode;
        self.ext.check(opcode)?;
        if !opcode.has_payload() && payload_len != 0 {
            return Err(WireError::UnexpectedPayload {
                opcode,
                len: payload_len,
            });
        }
        let len = packet_len(opcode, payload_len);
        let available = buf.len();
        let out = buf.get_mut(..len).ok_or(WireError::BufferTooSmall {
            header: HeaderKind::Packet,
            needed: len,
            available,
        })?;
        let pad = pad_len(payload_len);
        let bth = Bth {
            // pad_len is at most 3.
            pad_count: pad as u8,
            ..self.bth
        };
        let (headers, body) = out.split_at_mut(opcode.header_len());
        let (bth_bytes, ext_bytes) = headers.split_at_mut(BTH_LEN);
        bth.write(bth_bytes)?;
        self.ext.write_checked(opcode, ext_bytes)?;
        let (payload, trailer) = body.split_at_mut(payload_len);
        // Pad and ICRC field.
        trailer.fill(0);
        Ok((len, payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aeth::Syndrome;
    use crate::u24::Msn;

    fn bth(opcode: Opcode) -> Bth {
        Bth::new(opcode, Qpn::new_masked(0x11), Psn::new_masked(0x22))
    }

    /// A builder for `opcode` with every header it needs.
    fn full(opcode: Opcode, payload: &[u8]) -> PacketBuilder<'_> {
        let mut b = PacketBuilder::new(bth(opcode));
        for &h in opcode.ext_headers() {
            b = match h {
                ExtHeader::Reth => b.with_reth(Reth {
                    va: 1,
                    rkey: 2,
                    dma_len: 3,
                }),
                ExtHeader::Aeth => b.with_aeth(Aeth {
                    syndrome: Syndrome::Ack { credits: 4 },
                    msn: Msn::new_masked(5),
                }),
                ExtHeader::AtomicEth => b.with_atomic_eth(AtomicEth {
                    va: 6,
                    rkey: 7,
                    swap_add: 8,
                    compare: 9,
                }),
                ExtHeader::AtomicAckEth => b.with_atomic_ack_eth(AtomicAckEth { orig_data: 10 }),
                ExtHeader::Deth => b.with_deth(Deth {
                    qkey: 11,
                    src_qp: Qpn::new_masked(12),
                }),
                ExtHeader::ImmDt => b.with_imm(13),
                ExtHeader::Ieth => b.with_ieth(Ieth { rkey: 14 }),
            };
        }
        if opcode.has_payload() {
            b = b.with_payload(payload);
        }
        b
    }

    #[test]
    fn pad_and_lengths() {
        assert_eq!([0, 1, 2, 3, 4, 5].map(pad_len), [0, 3, 2, 1, 0, 3]);
        assert_eq!(packet_len(Opcode::RcSendOnly, 5), 12 + 8 + 4);
        assert_eq!(packet_len(Opcode::RcAtomicAck, 0), 12 + 12 + 4);
        assert_eq!(payload_len(Opcode::RcSendOnly, 3, 24), Ok(5));
        assert_eq!(
            payload_len(Opcode::RcSendOnly, 0, 15),
            Err(WireError::Truncated {
                header: HeaderKind::Packet,
                needed: 16,
                available: 15
            })
        );
        assert_eq!(
            payload_len(Opcode::RcSendOnly, 0, 18),
            Err(WireError::Misaligned { len: 2 })
        );
        assert_eq!(
            payload_len(Opcode::RcSendOnly, 3, 16),
            Err(WireError::BadPadCount {
                pad: 3,
                available: 0
            })
        );
        assert_eq!(
            payload_len(Opcode::RcAck, 0, 24),
            Err(WireError::UnexpectedPayload {
                opcode: Opcode::RcAck,
                len: 4
            })
        );
    }

    #[test]
    fn every_opcode_builds_and_parses_back() {
        let data: Vec<u8> = (0..=255).collect();
        for opcode in Opcode::all() {
            for len in [0, 1, 2, 3, 4, 7, 64, 255] {
                let b = full(opcode, &data[..len]);
                let mut buf = [0xEEu8; 400];
                let n = b.build_unsealed(&mut buf).unwrap();
                assert_eq!(n, b.wire_len());
                let view = PacketView::parse(&buf[..n]).unwrap();
                assert_eq!(view.opcode(), opcode);
                assert_eq!(view.ext(), &b.ext);
                assert_eq!(view.payload(), b.payload);
                assert_eq!(usize::from(view.bth().pad_count), pad_len(b.payload.len()));
                assert_eq!(view.icrc(), 0);
                assert_eq!(view.as_bytes().len(), n);
            }
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        let data = [0xAB; 9];
        for opcode in Opcode::all() {
            let b = full(opcode, &data);
            let mut buf = [0u8; 128];
            let n = b.build_unsealed(&mut buf).unwrap();
            for len in 0..n {
                // Cutting whole words off a payload can leave a valid,
                // shorter packet: only the ICRC tells them apart.
                let err = match PacketView::parse(&buf[..len]) {
                    Ok(view) => {
                        assert!(view.payload().len() < data.len(), "{opcode} at {len}");
                        continue;
                    }
                    Err(err) => err,
                };
                assert!(
                    matches!(
                        err,
                        WireError::Truncated { .. }
                            | WireError::BadPadCount { .. }
                            | WireError::Misaligned { .. }
                    ),
                    "{opcode} at {len}: {err}"
                );
            }
        }
    }

    #[test]
    fn truncation_names_the_header() {
        let b = full(Opcode::RcAtomicAck, &[]);
        let mut buf = [0u8; 64];
        let n = b.build_unsealed(&mut buf).unwrap();
        let header_at = |len: usize| match PacketView::parse(&buf[..len]) {
            Err(WireError::Truncated { header, .. }) => header,
            other => panic!("{other:?}"),
        };
        assert_eq!(header_at(5), HeaderKind::Bth);
        assert_eq!(header_at(14), HeaderKind::Aeth);
        assert_eq!(header_at(20), HeaderKind::AtomicAckEth);
        assert_eq!(header_at(n - 1), HeaderKind::Icrc);
    }

    #[test]
    fn malformed_packets() {
        let payload = [1u8, 2, 3, 4, 5];
        let mut buf = [0u8; 64];
        let n = full(Opcode::RcSendOnly, &payload)
            .build_unsealed(&mut buf)
            .unwrap();
        assert_eq!(n, 24);

        let mut bad = buf;
        bad[0] = 0x15;
        assert_eq!(
            PacketView::parse(&bad[..n]),
            Err(WireError::UnknownOpcode(0x15))
        );

        let mut bad = buf;
        bad[1] |= 0x01;
        assert_eq!(
            PacketView::parse(&bad[..n]),
            Err(WireError::UnsupportedTver(1))
        );

        // Pad 3: fine with 4 bytes after the headers, not with none.
        let mut bad = buf;
        bad[1] = 0x30;
        assert_eq!(PacketView::parse(&bad[..20]).unwrap().payload(), &[1]);
        assert_eq!(
            PacketView::parse(&bad[..16]),
            Err(WireError::BadPadCount {
                pad: 3,
                available: 0
            })
        );
        assert_eq!(
            PacketView::parse(&buf[..n - 1]),
            Err(WireError::Misaligned { len: 7 })
        );

        // A reserved AETH syndrome parses, for the requester to answer.
        let mut ack = [0u8; 32];
        let m = full(Opcode::RcAck, &[]).build_unsealed(&mut ack).unwrap();
        ack[12] = 0x40;
        assert_eq!(
            PacketView::parse(&ack[..m]).map(|v| v.aeth().map(|a| a.syndrome)),
            Ok(Some(Syndrome::Reserved(0x40)))
        );
        // Payload on an ACK.
        ack[12] = 0;
        assert_eq!(
            PacketView::parse(&ack[..m + 4]),
            Err(WireError::UnexpectedPayload {
                opcode: Opcode::RcAck,
                len: 4
            })
        );
    }

    #[test]
    fn builder_rejects_wrong_headers_payload_and_small_buffers() {
        let mut buf = [0u8; 64];
        let no_reth = PacketBuilder::new(bth(Opcode::RcWriteOnly));
        assert_eq!(
            no_reth.build_unsealed(&mut buf),
            Err(WireError::MissingHeader {
                opcode: Opcode::RcWriteOnly,
                header: ExtHeader::Reth
            })
        );
        let extra = full(Opcode::RcSendOnly, &[]).with_imm(1);
        assert_eq!(
            extra.build_unsealed(&mut buf),
            Err(WireError::UnexpectedHeader {
                opcode: Opcode::RcSendOnly,
                header: ExtHeader::ImmDt
            })
        );
        let payload = full(Opcode::RcReadRequest, &[]).with_payload(&[1]);
        assert!(matches!(
            payload.build_unsealed(&mut buf),
            Err(WireError::UnexpectedPayload { .. })
        ));
        let b = full(Opcode::RcSendOnly, &[1, 2, 3]);
        assert_eq!(
            b.build_unsealed(&mut buf[..19]),
            Err(WireError::BufferTooSmall {
                header: HeaderKind::Packet,
                needed: 20,
                available: 19
            })
        );
    }

    #[test]
    fn builder_overrides_pad_count_and_zeroes_pad() {
        let b = PacketBuilder::new(Bth {
            pad_count: 2,
            ..bth(Opcode::RcSendOnly)
        })
        .with_payload(&[9]);
        let mut buf = [0xEE; 32];
        let n = b.build_unsealed(&mut buf).unwrap();
        assert_eq!(n, 20);
        assert_eq!(buf[1] & 0x30, 0x30);
        assert_eq!(&buf[12..20], &[9, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn sealed_build_verifies() {
        use core::net::Ipv4Addr;
        let flow = Flow::v4(
            Ipv4Addr::new(1, 2, 3, 4),
            Ipv4Addr::new(5, 6, 7, 8),
            9,
            4791,
        );
        let mut buf = [0u8; 64];
        let n = full(Opcode::RcSendOnlyImm, b"hello")
            .build(&flow, &mut buf)
            .unwrap();
        let view = PacketView::parse(&buf[..n]).unwrap();
        assert_eq!(view.verify_icrc(&flow), Ok(()));
        assert_eq!(view.imm(), Some(13));
        assert!(view.verify_icrc(&flow.reversed()).is_err());
        buf[20] ^= 1;
        let view = PacketView::parse(&buf[..n]).unwrap();
        assert!(matches!(
            view.verify_icrc(&flow),
            Err(WireError::BadIcrc { .. })
        ));
    }
}
