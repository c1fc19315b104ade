//! The `--verbose` trace: one line per packet, fault, post and completion,
//! stamped with the virtual time. Off by default and then free: lines are
//! built only when the trace is on.

use crate::payload;
use softverbs_engine::{Nanos, WorkCompletion};
use softverbs_wire::PacketView;

/// Where trace lines go.
#[derive(Debug, Clone, Copy, Default)]
pub struct Trace {
    on: bool,
}

impl Trace {
    /// A trace printing to stdout when `on`.
    pub fn new(on: bool) -> Trace {
        Trace { on }
    }

    /// Whether lines are printed.
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Prints the line `line()` builds, at virtual time `now`.
    pub fn line(&self, now: Nanos, line: impl FnOnce() -> String) {
        if self.on {
            println!("{:>12.3} us  {}", now as f64 / 1000.0, line());
        }
    }
}

/// A one-line summary of a RoCE packet (BTH through ICRC).
pub fn packet(bytes: &[u8]) -> String {
    let Ok(p) = PacketView::parse(bytes) else {
        return format!("unparsable packet of {} bytes", bytes.len());
    };
    let bth = p.bth();
    let mut s = format!(
        "{} qp {:#x} psn {:#08x}{}{} len {}",
        p.opcode(),
        p.dest_qp().get(),
        p.psn().get(),
        if bth.ack_req { " A" } else { "" },
        if bth.solicited { " S" } else { "" },
        p.payload().len(),
    );
    if let Some(a) = p.aeth() {
        s += &format!(" {:?} msn {}", a.syndrome, a.msn.get());
    }
    if let Some(r) = p.reth() {
        s += &format!(" va {:#x} dma_len {}", r.va, r.dma_len);
    }
    if let Some(imm) = p.imm() {
        s += &format!(" imm {imm:#x}");
    }
    if let Some((stream, op)) = payload::header(p.payload()) {
        s += &format!(" [stream {stream} op {op}]");
    }
    s
}

/// A one-line summary of a completion.
pub fn completion(wc: &WorkCompletion) -> String {
    format!(
        "wr_id {:#x} {:?} {:?} qp {:#x} byte_len {} imm {:#x} flags {:#x} src_qp {:#x}",
        wc.wr_id,
        wc.status,
        wc.opcode,
        wc.qp_num,
        wc.byte_len,
        wc.imm_data_or_inv_rkey,
        wc.wc_flags,
        wc.src_qp
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use softverbs_wire::{Bth, Flow, Opcode, PacketBuilder, Psn, Qpn};
    use std::net::Ipv4Addr;

    #[test]
    fn packets_are_summarised_with_their_headers() {
        let bth = Bth::new(
            Opcode::RcSendOnly,
            Qpn::new_masked(0x101),
            Psn::new_masked(7),
        );
        let data = payload::bytes(1, 2, 3, payload::Kind::Message, 20);
        let flow = Flow::v4(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 1, 2);
        let mut buf = [0u8; 64];
        let len = PacketBuilder::new(bth)
            .with_payload(&data)
            .build(&flow, &mut buf)
            .expect("fits");
        let line = packet(&buf[..len]);
        assert!(line.contains("qp 0x101"), "{line}");
        assert!(line.contains("len 20"), "{line}");
        assert!(line.contains("[stream 2 op 3]"), "{line}");
        assert!(packet(&[1, 2, 3]).starts_with("unparsable"));
    }
}
