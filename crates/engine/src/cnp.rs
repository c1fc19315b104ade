//! Congestion notification packets (CNPs): how a UC or UD receiver whose
//! queue fills tells its sender.
//!
//! An RC responder answers a marked request with BECN in its next response
//! (`congestion.rs`); UC and UD send no responses, so a marked UC or UD
//! request is answered with a CNP (`softverbs_wire::cnp`) to the QP that
//! sent it: for UC the QP's destination, for UD the source QP of the
//! datagram's DETH. A receiving QP sends at most one every
//! [`CNP_INTERVAL`] (the sender cuts its rate at most that often, and its
//! cut shows a round trip later); for UD, whose datagrams come from many
//! senders, the sender of the latest marked datagram is the one told.
//!
//! A CNP that arrives caps the rate of a UC or UD QP (`pacing.rs`) and
//! halves an RC QP's loss window as BECN does. Any RoCE peer may send
//! them (a NIC with ECN marks from switches does); rxe neither sends nor
//! heeds them.

use crate::ctx::Ctx;
use crate::gid::Gid;
use crate::qp::Qp;
use crate::qp_state::QpType;
use crate::recv_side::RecvSide;
use crate::requester::response_gids;
use crate::time::Nanos;
use crate::transmit::{PacketSink, Reservation, Route, Transmit};
use softverbs_wire::cnp::CNP_COVERED_LEN;
use softverbs_wire::{write_cnp, Bth, PacketView, Qpn, CNP_LEN};

/// A receiving QP sends CNPs at least this far apart.
pub(crate) const CNP_INTERVAL: Nanos = 50_000;

/// The CNPs a receiving QP owes and sent.
#[derive(Debug, Default)]
pub(crate) struct Notices {
    due: Option<Notice>,
    last_sent: Option<Nanos>,
}

/// Where a CNP goes.
#[derive(Debug, Clone, Copy)]
struct Notice {
    /// Our GID, then the sender's.
    gids: (Gid, Gid),
    dest_qpn: u32,
}

impl Notices {
    /// Whether a CNP waits to be sent.
    pub(crate) fn is_due(&self) -> bool {
        self.due.is_some()
    }

    /// Writes the CNP due into `sink`, unless the last one left less than
    /// [`CNP_INTERVAL`] before `now` (it is then not owed any more: the
    /// next marked request owes one again).
    pub(crate) fn transmit(&mut self, now: Nanos, sink: &mut dyn PacketSink) -> Option<Transmit> {
        let notice = self.due.take()?;
        if self
            .last_sent
            .is_some_and(|at| now.saturating_sub(at) < CNP_INTERVAL)
        {
            return None;
        }
        let (src_gid, dst_gid) = notice.gids;
        let route = Route {
            src_gid,
            dst_gid,
            dest_qpn: notice.dest_qpn,
        };
        let Reservation { buf, icrc } = sink.reserve(&route, CNP_LEN);
        if buf.len() < CNP_LEN {
            return None;
        }
        let qpn = Qpn::new_masked(notice.dest_qpn);
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
        self.last_sent = Some(now);
        Some(Transmit {
            len: CNP_LEN,
            src_gid,
            dst_gid,
            dest_qpn: notice.dest_qpn,
        })
    }
}

impl RecvSide<'_> {
    /// A UC or UD request arrived marked: its sender is owed a CNP.
    pub(crate) fn owe_notice(&mut self, ctx: &Ctx<'_>, pkt: &PacketView<'_>, from: (Gid, Gid)) {
        let notice = match self.qp_type {
            QpType::Rc => return,
            QpType::Uc => response_gids(self.attr, ctx).map(|gids| Notice {
                gids,
                dest_qpn: self.attr.dest_qp_num,
            }),
            QpType::Ud => pkt.deth().map(|deth| Notice {
                gids: (from.1, from.0),
                dest_qpn: deth.src_qp.get(),
            }),
        };
        if notice.is_some() {
            self.resp.notices.due = notice;
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
