//! Congestion notification packets (CNPs): how a UC or UD receiver whose
//! queue fills tells its sender.
//!
//! An RC responder answers a marked request with BECN in its next response
//! (`congestion.rs`); UC and UD send no responses, so a marked UC or UD
//! request is answered with a CNP (`softverbs_wire::cnp`) to the QP that
//! sent it: for UC the QP's destination, for UD the source QP of the
//! datagram's DETH. A receiving QP sends at most one every
//! [`CNP_INTERVAL`] to each sender (the sender cuts its rate at most that
//! often, and its cut shows a round trip later). A UD QP's datagrams come
//! from many senders: it keeps up to [`SENDERS_TOLD`] at a time, so that
//! every sender of a fan-in slows, not only the latest.
//!
//! A CNP that arrives caps the rate of a UC or UD QP (`pacing.rs`) and
//! halves an RC QP's loss window as BECN does. Any RoCE peer may send
//! them (a NIC with ECN marks from switches does); rxe neither sends nor
//! heeds them.

use crate::ctx::Ctx;
use crate::datapath::Arrival;
use crate::qp::Qp;
use crate::qp_state::QpType;
use crate::recv_side::RecvSide;
use crate::requester::{response_path, Path};
use crate::time::Nanos;
use crate::transmit::{PacketSink, Reservation, Route, Transmit};
use softverbs_wire::cnp::CNP_COVERED_LEN;
use softverbs_wire::{write_cnp, Bth, PacketView, Qpn, CNP_LEN};

/// A receiving QP sends CNPs to one sender at least this far apart.
pub(crate) const CNP_INTERVAL: Nanos = 50_000;

/// The senders a receiving QP keeps track of (UC has one; a UD QP in a
/// fan-in many). A sender's place is kept while it is owed a CNP and for
/// [`CNP_INTERVAL`] after it was told (so that it is told no sooner); a
/// sender marked while every place is kept goes untold until a marked
/// datagram of its own finds one free.
pub(crate) const SENDERS_TOLD: usize = 8;

/// The CNPs a receiving QP owes and sent, per sender.
#[derive(Debug, Default)]
pub(crate) struct Notices {
    senders: [Option<Sender>; SENDERS_TOLD],
    /// How many senders are owed a CNP: asked after every packet a QP
    /// receives, so counted rather than found by a walk of the table.
    due: usize,
}

/// A sender of marked requests.
#[derive(Debug, Clone, Copy)]
struct Sender {
    to: Notice,
    /// A CNP waits to be sent to it.
    due: bool,
    last_sent: Option<Nanos>,
}

/// Where a CNP goes.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Notice {
    /// From our GID to the sender's, with the traffic class of the QP's
    /// path (UC) or of the datagram that owed it (UD).
    path: Path,
    dest_qpn: u32,
}

impl Notices {
    /// Whether a CNP waits to be sent.
    pub(crate) fn is_due(&self) -> bool {
        self.due > 0
    }

    /// `to` sent a marked request: it is owed a CNP, unless it is new and
    /// every place is kept.
    fn owe(&mut self, to: Notice) {
        if let Some(known) = self.senders.iter_mut().flatten().find(|s| s.to == to) {
            if !std::mem::replace(&mut known.due, true) {
                self.due += 1;
            }
        } else if let Some(place) = self.senders.iter_mut().find(|s| s.is_none()) {
            *place = Some(Sender {
                to,
                due: true,
                last_sent: None,
            });
            self.due += 1;
        }
    }

    /// Writes the next CNP due into `sink`. One due to a sender told less
    /// than [`CNP_INTERVAL`] before `now` is not owed any more (its next
    /// marked request owes one again). First frees the places of senders
    /// owed nothing and told at least that long ago.
    pub(crate) fn transmit(&mut self, now: Nanos, sink: &mut dyn PacketSink) -> Option<Transmit> {
        let recent = |at: Nanos| now.saturating_sub(at) < CNP_INTERVAL;
        for place in &mut self.senders {
            if place.is_some_and(|s| !s.due && !s.last_sent.is_some_and(recent)) {
                *place = None;
            }
        }
        for sender in self.senders.iter_mut().flatten() {
            if !std::mem::take(&mut sender.due) {
                continue;
            }
            self.due -= 1;
            if sender.last_sent.is_some_and(recent) {
                continue;
            }
            let sent = write_notice(sender.to, sink)?;
            sender.last_sent = Some(now);
            return Some(sent);
        }
        None
    }
}

/// Writes a CNP to `to` into `sink`.
fn write_notice(to: Notice, sink: &mut dyn PacketSink) -> Option<Transmit> {
    let (src_gid, dst_gid) = to.path.gids;
    let route = Route {
        src_gid,
        dst_gid,
        dest_qpn: to.dest_qpn,
        traffic_class: to.path.traffic_class,
    };
    let Reservation { buf, icrc } = sink.reserve(&route, CNP_LEN);
    if buf.len() < CNP_LEN {
        return None;
    }
    let qpn = Qpn::new_masked(to.dest_qpn);
    let covered = write_cnp(buf, qpn, Bth::DEFAULT_PKEY)?;
    let sum = match icrc {
        Some(icrc) => {
            icrc.roce_headers(covered).ok()?;
            icrc.finish()
        }
        None => 0,
    };
    buf[CNP_COVERED_LEN..CNP_LEN].copy_from_slice(&sum.to_le_bytes());
    sink.commit();
    Some(Transmit {
        len: CNP_LEN,
        src_gid,
        dst_gid,
        dest_qpn: to.dest_qpn,
        traffic_class: to.path.traffic_class,
    })
}

impl RecvSide<'_> {
    /// A UC or UD request arrived marked: its sender is owed a CNP.
    pub(crate) fn owe_notice(&mut self, ctx: &Ctx<'_>, pkt: &PacketView<'_>, from: &Arrival) {
        let notice = match self.qp_type {
            QpType::Rc => return,
            QpType::Uc => response_path(self.attr, ctx).map(|path| Notice {
                path,
                dest_qpn: self.attr.dest_qp_num,
            }),
            QpType::Ud => pkt.deth().map(|deth| Notice {
                path: Path {
                    gids: (from.dst_gid, from.src_gid),
                    traffic_class: from.traffic_class,
                },
                dest_qpn: deth.src_qp.get(),
            }),
        };
        if let Some(notice) = notice {
            self.resp.notices.owe(notice);
        }
    }
}

impl Qp {
    /// A CNP arrived for this QP at `now`: a UC or UD QP's rate is capped,
    /// an RC QP's loss window halves as for BECN.
    pub(crate) fn on_cnp(&mut self, ctx: &mut Ctx<'_>, now: Nanos) {
        match self.qp_type {
            QpType::Uc | QpType::Ud => self.req.pacer.notice(now),
            QpType::Rc => {
                let side = &mut self.send_side();
                let oldest = side.req.acked.wrapping_add(1);
                side.on_loss(ctx, oldest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gid::Gid;
    use crate::transmit::BufferSink;
    use std::net::Ipv4Addr;

    fn sender(host: u8, dest_qpn: u32) -> Notice {
        Notice {
            path: Path {
                gids: (
                    Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 1)),
                    Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, host)),
                ),
                traffic_class: 0,
            },
            dest_qpn,
        }
    }

    /// The QPs the CNPs sent at `now` went to, in order; the count of
    /// senders owed one agrees with the table before and after.
    fn sent_at(n: &mut Notices, now: Nanos) -> Vec<u32> {
        let owed = |n: &Notices| n.senders.iter().flatten().filter(|s| s.due).count();
        assert_eq!(n.due, owed(n));
        let mut buf = [0u8; CNP_LEN];
        let sent = std::iter::from_fn(|| n.transmit(now, &mut BufferSink { buf: &mut buf }))
            .map(|t| t.dest_qpn)
            .collect();
        assert_eq!(n.due, owed(n));
        sent
    }

    /// Senders marked together (a UD fan-in) are each told, each at most
    /// once per interval.
    #[test]
    fn every_marked_sender_is_told_once_per_interval() {
        let mut n = Notices::default();
        for _ in 0..3 {
            n.owe(sender(2, 20));
            n.owe(sender(3, 30));
            n.owe(sender(2, 20));
        }
        assert_eq!(sent_at(&mut n, 0), [20, 30]);
        n.owe(sender(3, 30));
        assert!(n.is_due());
        assert!(sent_at(&mut n, CNP_INTERVAL - 1).is_empty(), "too soon");
        assert!(!n.is_due(), "not owed any more");
        n.owe(sender(3, 30));
        assert_eq!(sent_at(&mut n, CNP_INTERVAL), [30]);
    }

    /// Past [`SENDERS_TOLD`] senders owed at once, a new one goes untold;
    /// so it does while they are kept for the interval after they were
    /// told (a place freed then would tell its sender again too soon, and
    /// a fan-in of many would bring a CNP per marked datagram); then it
    /// finds a place.
    #[test]
    fn a_sender_past_the_table_waits_for_a_place() {
        let mut n = Notices::default();
        let qpns: Vec<u32> = (1..=SENDERS_TOLD as u32).collect();
        for &q in &qpns {
            n.owe(sender(2, q));
        }
        n.owe(sender(9, 99));
        assert_eq!(sent_at(&mut n, 0), qpns);
        n.owe(sender(9, 99));
        assert!(sent_at(&mut n, 1).is_empty(), "every place kept");
        n.owe(sender(2, 1));
        assert!(sent_at(&mut n, 2).is_empty(), "told 2 ns ago");
        assert!(sent_at(&mut n, CNP_INTERVAL).is_empty(), "places freed");
        n.owe(sender(9, 99));
        n.owe(sender(2, 1));
        assert_eq!(sent_at(&mut n, CNP_INTERVAL), [99, 1]);
    }
}
