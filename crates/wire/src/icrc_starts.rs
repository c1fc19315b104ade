//! The ICRC over a flow's IP and UDP headers, kept for the few packet
//! shapes a stream repeats.
//!
//! Before the BTH, a packet's ICRC has covered the LRH's stand-in and the
//! masked IP and UDP headers, which depend only on the flow, the packet's
//! length and (IPv4) its identification. A stream sends and receives few
//! lengths (full segments, the last one, ACKs), with the identifications
//! of a GSO batch's first places, so the state after the headers is kept
//! for the last few of them: a packet of a kept shape starts its ICRC
//! without building the headers and hashing their 28 (IPv4) or 48 (IPv6)
//! bytes, about a third of the ICRC's work on a short packet. Places past
//! the eighth in a GSO batch start theirs directly, so that a long batch
//! does not push out the shapes that repeat; where packets of more than
//! eight flows alternate, lookups miss and replace entries round robin:
//! as correct, at the cost of the search.

use crate::error::WireError;
use crate::icrc::Icrc;
use crate::ip::{Flow, IpPair};

/// How many shapes are kept: enough for a request stream's lengths
/// (first, middle, last, only) and its ACKs at a few places in a batch.
const KEPT: usize = 8;

/// ICRCs started over the headers of the packet shapes seen last.
#[derive(Debug, Clone, Default)]
pub struct IcrcStarts {
    kept: [Option<Kept>; KEPT],
    /// The entry the next new shape replaces (round robin).
    next: usize,
}

/// One kept shape and the ICRC after its headers.
#[derive(Debug, Clone)]
struct Kept {
    flow: Flow,
    roce_len: usize,
    identification: u16,
    start: Icrc,
}

impl IcrcStarts {
    /// As [`Flow::icrc_start`]: the ICRC of a packet of `flow`, `roce_len`
    /// bytes from the BTH through the ICRC, carrying `identification`
    /// (ignored for IPv6), after its IP and UDP headers.
    pub fn start(
        &mut self,
        flow: &Flow,
        roce_len: usize,
        identification: u16,
    ) -> Result<Icrc, WireError> {
        let identification = match flow.addrs {
            IpPair::V4 { .. } => identification,
            IpPair::V6 { .. } => 0,
        };
        if usize::from(identification) >= KEPT {
            return flow.icrc_start(roce_len, identification);
        }
        let kept = self.kept.iter().flatten().find(|k| {
            k.roce_len == roce_len && k.identification == identification && k.flow == *flow
        });
        if let Some(k) = kept {
            return Ok(k.start.clone());
        }
        let start = flow.icrc_start(roce_len, identification)?;
        self.kept[self.next] = Some(Kept {
            flow: *flow,
            roce_len,
            identification,
            start: start.clone(),
        });
        self.next = (self.next + 1) % KEPT;
        Ok(start)
    }

    /// As [`Flow::verify_recovering_identification`], starting the ICRC
    /// here.
    pub fn verify_recovering_identification(
        &mut self,
        flow: &Flow,
        packet: &[u8],
    ) -> Result<Option<u16>, WireError> {
        let start = self.start(flow, packet.len(), crate::ip::IPV4_ASSUMED_IDENTIFICATION)?;
        flow.verify_recovering_identification_from(start, packet)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Bth, Opcode, PacketBuilder, Psn, Qpn};
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn flows() -> [Flow; 3] {
        let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        [
            Flow::v4(a, b, 49152, 4791),
            Flow::v4(b, a, 49152, 4791),
            Flow::v6(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST, 49153, 4791),
        ]
    }

    /// A packet of `payload` bytes sealed for `flow` with `identification`.
    fn sealed(flow: &Flow, payload: usize, identification: u16) -> Vec<u8> {
        let bth = Bth::new(Opcode::RcSendOnly, Qpn::new_masked(3), Psn::new_masked(9));
        let data = vec![0x5a; payload];
        let mut buf = vec![0u8; payload + 64];
        let len = PacketBuilder::new(bth)
            .with_payload(&data)
            .build(flow, &mut buf)
            .unwrap();
        buf.truncate(len);
        flow.seal_with_identification(&mut buf, identification)
            .unwrap();
        buf
    }

    #[test]
    fn a_kept_start_is_the_one_computed_whatever_the_order() {
        let mut starts = IcrcStarts::default();
        // More shapes than are kept, each asked for twice in turn, so that
        // both kept and replaced entries answer.
        for round in 0..3 {
            for (i, flow) in flows().iter().enumerate() {
                for len in [16, 20, 64, 1024 + 16] {
                    for id in [0, 1, 7, 8, 63] {
                        let got = starts.start(flow, len, id).unwrap().finish();
                        let want = flow.icrc_start(len, id).unwrap().finish();
                        assert_eq!(got, want, "round {round} flow {i} len {len} id {id}");
                    }
                }
            }
        }
    }

    #[test]
    fn verification_recovers_identifications_and_refuses_corruption() {
        let mut starts = IcrcStarts::default();
        for flow in flows() {
            for (payload, id) in [(2, 0), (2, 1), (2, 0), (300, 5), (300, 5)] {
                let packet = sealed(&flow, payload, id);
                let want = flow.verify_recovering_identification(&packet).unwrap();
                let got = starts.verify_recovering_identification(&flow, &packet);
                assert_eq!(got, Ok(want));
                let mut bad = packet.clone();
                bad[13] ^= 0x10;
                assert!(starts
                    .verify_recovering_identification(&flow, &bad)
                    .is_err());
            }
        }
        assert!(starts
            .verify_recovering_identification(&flows()[0], &[0; 3])
            .is_err());
    }
}
