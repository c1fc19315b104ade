//! What a peer tells a region's owner through its deliveries ring
//! (`inbound.rs`): a message it delivered into a receive WR, a request
//! that failed at one of its QPs, a QP's first request in RTR. The owner
//! applies each to its engine when it next runs, with the engine's own
//! completion rules (`Engine::apply_delivery`, `apply_fault`,
//! `apply_comm_est`).

use super::inbound::Record;
use softverbs_engine::direct::TargetEvent;
use softverbs_engine::{WcOpcode, WcStatus, WorkCompletion};

const DELIVERY: u64 = 1;
const COMM_EST: u64 = 2;
const FAULT: u64 = 3;

/// One thing a peer did at one of our QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// A message completed receive WR `seq` of QP `qpn` (claimed from
    /// the ring the QP publishes: its own or its SRQ's).
    Received {
        /// The QP.
        qpn: u32,
        /// The WR's ring index.
        seq: u64,
        /// Its receive completion.
        wc: WorkCompletion,
        /// The message asked for a solicited event.
        solicited: bool,
    },
    /// QP `qpn` in RTR got its first request.
    CommEst {
        /// The QP.
        qpn: u32,
    },
    /// A request failed at QP `qpn`, which enters the error state.
    Fault {
        /// The QP.
        qpn: u32,
        /// The QP's incarnation the request found (a fault from before a
        /// reset is dropped).
        incarnation: u16,
        /// The event it raises.
        event: TargetEvent,
    },
}

fn head(kind: u64, qpn: u32) -> u64 {
    kind | u64::from(qpn) << 32
}

impl Delivery {
    /// The ring record.
    pub fn encode(&self) -> Record {
        match *self {
            Delivery::Received {
                qpn,
                seq,
                wc,
                solicited,
            } => [
                head(DELIVERY, qpn),
                wc.wr_id,
                wc.status as u64 | (wc.opcode as u64) << 32,
                u64::from(wc.byte_len) | u64::from(wc.imm_data_or_inv_rkey) << 32,
                u64::from(wc.wc_flags) | u64::from(solicited) << 32 | u64::from(wc.sl) << 40,
                u64::from(wc.src_qp) | u64::from(wc.qp_num) << 32,
                seq,
            ],
            Delivery::CommEst { qpn } => [head(COMM_EST, qpn), 0, 0, 0, 0, 0, 0],
            Delivery::Fault {
                qpn,
                incarnation,
                event,
            } => {
                let code = match event {
                    TargetEvent::None => 0,
                    TargetEvent::AccessErr => 1,
                    TargetEvent::ReqErr => 2,
                };
                [head(FAULT, qpn), code, u64::from(incarnation), 0, 0, 0, 0]
            }
        }
    }

    /// The delivery a record holds; `None` for a record this build does
    /// not know (a corrupt ring is ignored, never trusted).
    pub fn decode(r: &Record) -> Option<Delivery> {
        let qpn = (r[0] >> 32) as u32;
        match r[0] & 0xffff_ffff {
            DELIVERY => {
                let wc = WorkCompletion {
                    wr_id: r[1],
                    status: WcStatus::from_c(r[2] as u32)?,
                    opcode: opcode((r[2] >> 32) as u32)?,
                    vendor_err: 0,
                    byte_len: r[3] as u32,
                    imm_data_or_inv_rkey: (r[3] >> 32) as u32,
                    qp_num: (r[5] >> 32) as u32,
                    src_qp: r[5] as u32,
                    wc_flags: r[4] as u32,
                    pkey_index: 0,
                    sl: (r[4] >> 40) as u8,
                };
                let solicited = r[4] >> 32 & 1 == 1;
                Some(Delivery::Received {
                    qpn,
                    seq: r[6],
                    wc,
                    solicited,
                })
            }
            COMM_EST => Some(Delivery::CommEst { qpn }),
            FAULT => {
                let event = match r[1] {
                    0 => TargetEvent::None,
                    1 => TargetEvent::AccessErr,
                    2 => TargetEvent::ReqErr,
                    _ => return None,
                };
                Some(Delivery::Fault {
                    qpn,
                    incarnation: r[2] as u16,
                    event,
                })
            }
            _ => None,
        }
    }
}

/// The receive opcodes a delivery can carry.
fn opcode(raw: u32) -> Option<WcOpcode> {
    [WcOpcode::Recv, WcOpcode::RecvRdmaWithImm]
        .into_iter()
        .find(|o| *o as u32 == raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_survive_the_ring_encoding() {
        let wc = WorkCompletion {
            wr_id: u64::MAX - 3,
            status: WcStatus::Success,
            opcode: WcOpcode::RecvRdmaWithImm,
            vendor_err: 0,
            byte_len: 65536,
            imm_data_or_inv_rkey: 0xdead_beef,
            qp_num: 0x12345,
            src_qp: 0,
            wc_flags: 2,
            pkey_index: 0,
            sl: 2,
        };
        let all = [
            Delivery::Received {
                qpn: 0x12345,
                seq: u64::MAX - 1,
                wc,
                solicited: true,
            },
            Delivery::CommEst { qpn: 7 },
            Delivery::Fault {
                qpn: 0xff_ffff,
                incarnation: 0xfffe,
                event: TargetEvent::AccessErr,
            },
        ];
        for d in all {
            assert_eq!(Delivery::decode(&d.encode()), Some(d));
        }
        assert_eq!(Delivery::decode(&[99, 0, 0, 0, 0, 0, 0]), None);
    }

    /// Every status the same-host path completes a receive WR with
    /// crosses the ring (one that did not was dropped, and its WR later
    /// flushed instead).
    #[test]
    fn every_receive_status_of_the_direct_path_survives_the_ring() {
        for status in [
            WcStatus::Success,
            WcStatus::LocLenErr,
            WcStatus::LocProtErr,
            WcStatus::RemInvReqErr,
            WcStatus::RemAccessErr,
        ] {
            let wc = WorkCompletion {
                status,
                ..WorkCompletion::flushed(1, WcOpcode::Recv, 7)
            };
            let d = Delivery::Received {
                qpn: 7,
                seq: 3,
                wc,
                solicited: false,
            };
            assert_eq!(Delivery::decode(&d.encode()), Some(d), "{status:?}");
        }
    }
}
