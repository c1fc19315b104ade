//! QP verbs: create, modify, query, destroy, and the side effects of state
//! changes (flushing on ERR, emptying on RESET, SQ drained on SQD).

use crate::attr_mask::QpAttrMask;
use crate::engine::Engine;
use crate::error::{einval, enomem, ensure, eopnotsupp, VerbsResult};
use crate::handles::{PdId, QpId};
use crate::qp::{actual_caps, Qp};
use crate::qp_attr::{QpAttr, QpCap, QpInitAttr};
use crate::qp_modify;
use crate::qp_state::{QpState, QpType};

/// What `ibv_create_qp` returns besides the handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCreated {
    /// Handle of the new QP.
    pub id: QpId,
    /// Its QP number (never 0 or 1).
    pub qp_num: u32,
    /// The actual caps, to write back into `qp_init_attr->cap`.
    pub cap: QpCap,
}

impl Engine {
    /// `ibv_create_qp` (seed 002): RC, UC or UD (the other types of `enum
    /// ibv_qp_type` EOPNOTSUPP, a number that is no type EINVAL, as the
    /// kernel); an SRQ only with RC or UD (EINVAL); caps within the device
    /// limits (EINVAL); the CQs, SRQ and PD must exist.
    pub fn create_qp(&mut self, pd: PdId, init: &QpInitAttr) -> VerbsResult<QpCreated> {
        let qp_type =
            QpType::from_raw(init.qp_type).ok_or(if QpType::is_other_type(init.qp_type) {
                eopnotsupp("QP type not supported")
            } else {
                einval("qp_type is not an ibv_qp_type")
            })?;
        ensure(self.pds.contains_key(pd), einval("unknown PD"))?;
        ensure(
            self.cqs.contains_key(init.send_cq),
            einval("unknown send CQ"),
        )?;
        ensure(
            self.cqs.contains_key(init.recv_cq),
            einval("unknown receive CQ"),
        )?;
        if let Some(srq) = init.srq {
            ensure(self.srqs.contains_key(srq), einval("unknown SRQ"))?;
            ensure(
                qp_type != QpType::Uc,
                einval("an SRQ can only be used with RC and UD QPs"),
            )?;
        }
        let cap = actual_caps(&init.cap, init.srq.is_some(), &self.config.limits)?;
        ensure(
            self.qps.len() < self.config.limits.max_qp as usize,
            enomem("max_qp reached"),
        )?;
        let by_num = &self.qp_by_num;
        let qp_num = self
            .qpns
            .next(|n| by_num.contains_key(&n))
            .ok_or(enomem(crate::error::QPN_EXHAUSTED))?;
        let port_mtu = self
            .config
            .ports
            .first()
            .map_or(4096, |p| p.active_mtu.bytes());
        let qp = Qp::new(QpId::default(), pd, qp_num, qp_type, init, cap, port_mtu)?;
        crate::room::slot(&mut self.qps)?;
        crate::room::entry(&mut self.qp_by_num)?;
        let id = self.qps.insert_with_key(|id| Qp { id, ..qp });
        if let Some(qp) = self.qps.get_mut(id) {
            qp.min_ack_timeout = self.config.min_ack_timeout;
            qp.incarnation = self.next_incarnation;
            // Far past any reset count the QP before it reached.
            self.next_incarnation = self.next_incarnation.wrapping_add(1 << 8);
        }
        self.qp_by_num.insert(qp_num, id);
        self.qp_changed(id, qp_num);
        self.take_qp_references(id);
        Ok(QpCreated { id, qp_num, cap })
    }

    /// The completions of a destroyed QP that fault rules hold back: they
    /// must not reach its CQs later, nor fail a QP that gets the number
    /// again. Those already in its CQs stay there, as on rxe (mlx5's
    /// provider removes them): a program may poll them after the destroy,
    /// as libfabric's verbs provider does when it closes an endpoint
    /// (`rdma_destroy_ep`, then a drain of the CQ that takes every WR it
    /// does not find there for flushed). Moving to RESET removes them
    /// (`qp_modify.rs`).
    fn forget_held_completions(&mut self, qp: &Qp) {
        if let Some(f) = self.faults.as_deref_mut() {
            for cq in [qp.send_cq, qp.recv_cq] {
                f.forget(cq, qp.qp_num);
            }
        }
    }

    fn take_qp_references(&mut self, id: QpId) {
        let qp = &self.qps[id];
        self.pds[qp.pd].users.get();
        self.cqs[qp.send_cq].users.get();
        self.cqs[qp.recv_cq].users.get();
        if let Some(srq) = qp.srq {
            self.srqs[srq].users.get();
        }
    }

    /// `ibv_destroy_qp`. Unposted WRs vanish without completions, as on
    /// every provider; completions already in its CQs stay. A QP attached
    /// to a multicast group is EBUSY (seed 002; the kernel counts
    /// attachments as uses of the QP).
    pub fn destroy_qp(&mut self, id: QpId) -> VerbsResult<()> {
        ensure(
            !self.mcast.has_member(id),
            crate::error::ebusy("QP attached to a multicast group"),
        )?;
        let qp = self.qps.remove(id).ok_or(einval("unknown QP"))?;
        if self.send_budget.recharge(qp.charged, 0) {
            self.wake_budget_waiters();
        }
        self.qp_by_num.remove(&qp.qp_num);
        self.forget_held_completions(&qp);
        self.forget_fault_counts(qp.qp_num);
        self.schedule.forget(id);
        self.qp_changed(id, qp.qp_num);
        self.pds[qp.pd].users.put();
        self.cqs[qp.send_cq].users.put();
        self.cqs[qp.recv_cq].users.put();
        if let Some(srq) = qp.srq {
            self.srqs[srq].users.put();
        }
        Ok(())
    }

    /// `ibv_query_qp` (seed 003): every attribute and the init attributes.
    /// The mask is a hint; all attributes are always returned.
    pub fn query_qp(&self, id: QpId) -> VerbsResult<(QpAttr, QpInitAttr)> {
        let qp = self.qps.get(id).ok_or(einval("unknown QP"))?;
        Ok((qp.query(), qp.init_attr()))
    }

    /// The capacities a QP was created with (what posting checks against).
    pub fn qp_cap(&self, id: QpId) -> VerbsResult<QpCap> {
        self.qps.get(id).map(|q| q.cap).ok_or(einval("unknown QP"))
    }

    /// The QP number of a QP.
    pub fn qp_num(&self, id: QpId) -> VerbsResult<u32> {
        self.qps
            .get(id)
            .map(|q| q.qp_num)
            .ok_or(einval("unknown QP"))
    }

    /// The QP with number `qp_num`.
    pub fn qp_by_num(&self, qp_num: u32) -> Option<QpId> {
        self.qp_by_num.get(&qp_num).copied()
    }

    /// `ibv_modify_qp` (seeds 000, 004): all checks happen before any
    /// change, so a failing call leaves the QP exactly as it was.
    pub fn modify_qp(&mut self, id: QpId, attr: &QpAttr, mask: QpAttrMask) -> VerbsResult<()> {
        let qp = self.qps.get(id).ok_or(einval("unknown QP"))?;
        let next = qp_modify::validate(&self.config, qp, attr, mask)?;
        let port_mtu = self
            .config
            .port(attr.port_num)
            .map(|p| p.active_mtu.bytes());
        let qp = &mut self.qps[id];
        qp_modify::store(&mut qp.attr, attr, mask);
        qp.peer_seen = None;
        if let (true, Some(mtu)) = (mask.contains(QpAttrMask::PORT), port_mtu) {
            qp.port_mtu = mtu;
        }
        if mask.contains(QpAttrMask::STATE) {
            // SQ_DRAINED is asked for by the RTS->SQD call itself, as mlx5
            // reads it: a value stored by an earlier call asks nothing.
            let drain_notify =
                mask.contains(QpAttrMask::EN_SQD_ASYNC_NOTIFY) && attr.en_sqd_async_notify != 0;
            self.enter_state(id, next, drain_notify);
        }
        self.schedule.wake(id);
        self.sync_timer(id);
        let qpn = self.qps[id].qp_num;
        self.qp_changed(id, qpn);
        Ok(())
    }

    /// Side effects of entering a state: RTR starts the responder at
    /// rq_psn, RTS (from RTR) the requester at sq_psn; SQD stops starting
    /// WRs and reports SQ_DRAINED, if `drain_notify`, when nothing is left
    /// in flight; ERR flushes; RESET forgets everything queued.
    fn enter_state(&mut self, id: QpId, next: QpState, drain_notify: bool) {
        self.with_qp(id, |qp, ctx| {
            let prev = qp.state;
            match next {
                QpState::Err => return qp.enter_error(ctx),
                QpState::Reset => {
                    qp.reset();
                    let qp_num = qp.qp_num;
                    for cq in [qp.send_cq, qp.recv_cq] {
                        ctx.forget_completions(cq, qp_num);
                    }
                }
                QpState::Rtr if prev == QpState::Init => qp.resp.start(qp.attr.rq_psn),
                QpState::Rts if prev == QpState::Rtr => {
                    let a = qp.attr;
                    qp.req.start(a.sq_psn, a.retry_cnt, a.rnr_retry);
                }
                QpState::Sqd if prev == QpState::Rts => qp.req.drain_notify = drain_notify,
                _ => {}
            }
            qp.state = next;
            if next == QpState::Sqd {
                qp.retire(ctx);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    //! SQE cannot be reached through the verbs (only a UC/UD send error
    //! puts a QP there), so its rules are tested by placing a QP in SQE.
    use super::*;
    use crate::device::DeviceConfig;
    use crate::event::AsyncEvent;

    fn qp_in_sqe(ty: QpType) -> (Engine, QpId) {
        let mut e = Engine::new(DeviceConfig::loopback(1));
        let pd = e.alloc_pd().unwrap();
        let (cq, _) = e.create_cq(8, 0).unwrap();
        let init = QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 4,
                ..QpCap::default()
            },
            qp_type: ty as u32,
            sq_sig_all: false,
        };
        let id = e.create_qp(pd, &init).unwrap().id;
        e.qps[id].state = QpState::Sqe;
        (e, id)
    }

    fn to_rts(extra: QpAttrMask) -> QpAttrMask {
        QpAttrMask::STATE | extra
    }

    #[test]
    fn sqe_to_rts_for_ud_and_uc_with_their_optional_bits() {
        let rts = QpAttr {
            qp_state: QpState::Rts as u32,
            cur_qp_state: QpState::Sqe as u32,
            qkey: 7,
            ..QpAttr::default()
        };
        let (mut e, ud) = qp_in_sqe(QpType::Ud);
        let m = to_rts(QpAttrMask::CUR_STATE | QpAttrMask::QKEY);
        assert_eq!(e.modify_qp(ud, &rts, m), Ok(()));
        assert_eq!(e.qps[ud].state, QpState::Rts);
        assert_eq!(e.qps[ud].attr.qkey, 7);

        let (mut e, uc) = qp_in_sqe(QpType::Uc);
        let m = to_rts(QpAttrMask::QKEY);
        assert!(e.modify_qp(uc, &rts, m).is_err(), "UC has no Q_Key");
        let m = to_rts(QpAttrMask::CUR_STATE | QpAttrMask::ACCESS_FLAGS);
        assert_eq!(e.modify_qp(uc, &rts, m), Ok(()));
    }

    /// The room taken for the WRs in flight when the QP was created lasts
    /// through every start of its requester (RTS, SQE, RESET and ERR):
    /// sending never grows it (`room.rs`).
    #[test]
    fn the_in_flight_room_lasts_through_every_restart() {
        let (mut e, qp) = qp_in_sqe(QpType::Ud);
        let room = |e: &Engine| e.qps[qp].req.inflight.capacity();
        assert!(room(&e) >= 4 && e.qps[qp].sq.capacity() >= 4, "created");
        e.qps[qp].req.start(0, 7, 7);
        assert!(room(&e) >= 4, "RTR -> RTS");
        e.qps[qp].req.restart_after_send_error();
        assert!(room(&e) >= 4, "SQE");
        e.qps[qp].req.start_over();
        assert!(room(&e) >= 4, "RESET, ERR");
    }

    /// A UC or UD QP's send error keeps the cap CNPs set: SQE -> RTS
    /// resumes at the congested path's rate, not unpaced.
    #[test]
    fn a_send_error_keeps_the_rate_cap() {
        let (mut e, qp) = qp_in_sqe(QpType::Ud);
        e.qps[qp].req.pacer.notice(0);
        let cap = e.qps[qp].req.pacer.cap();
        assert!(cap.is_some());
        e.qps[qp].req.restart_after_send_error();
        assert_eq!(e.qps[qp].req.pacer.cap(), cap);
    }

    #[test]
    fn sqe_only_goes_to_rts_reset_or_err() {
        for next in [QpState::Init, QpState::Rtr, QpState::Sqd, QpState::Sqe] {
            let (mut e, qp) = qp_in_sqe(QpType::Ud);
            let a = QpAttr {
                qp_state: next as u32,
                ..QpAttr::default()
            };
            assert!(e.modify_qp(qp, &a, QpAttrMask::STATE).is_err(), "{next:?}");
            assert_eq!(e.qps[qp].state, QpState::Sqe);
        }
    }

    #[test]
    fn sends_posted_in_sqe_are_flushed() {
        let (mut e, qp) = qp_in_sqe(QpType::Ud);
        let pd = e.qps[qp].pd;
        let ah_attr = crate::ah_attr::AhAttr {
            grh: crate::ah_attr::GlobalRoute {
                dgid: crate::gid::Gid::from_ipv4(std::net::Ipv4Addr::LOCALHOST),
                ..Default::default()
            },
            is_global: true,
            port_num: 1,
            ..Default::default()
        };
        let ah = e.create_ah(pd, &ah_attr).unwrap();
        let wr = crate::wr::SendWr {
            wr_id: 3,
            opcode: crate::wr::send_opcode::SEND,
            send_flags: 0,
            sg_list: &[],
            inline_data: &[],
            imm_data_or_inv_rkey: 0,
            rdma: Default::default(),
            atomic: Default::default(),
            ud: Some(crate::wr::UdTarget {
                ah,
                remote_qpn: 5,
                remote_qkey: 0,
            }),
        };
        e.post_send(qp, &wr).unwrap();
        let mut wcs = Vec::new();
        e.poll_cq(e.qps[qp].send_cq, 4, &mut wcs).unwrap();
        assert_eq!(wcs.len(), 1, "unsignaled WRs complete when they fail");
        assert_eq!(wcs[0].status, crate::wc::WcStatus::WrFlushErr);
    }

    #[test]
    fn a_flush_lost_in_sqe_fails_that_qp_with_qp_fatal() {
        let (mut e, qp) = qp_in_sqe(QpType::Uc);
        let cq = e.qps[qp].send_cq;
        e.resize_cq(cq, 1).unwrap();
        for wr_id in 0..2 {
            let wr = crate::wr::SendWr {
                wr_id,
                opcode: crate::wr::send_opcode::SEND,
                send_flags: 0,
                sg_list: &[],
                inline_data: &[],
                imm_data_or_inv_rkey: 0,
                rdma: Default::default(),
                atomic: Default::default(),
                ud: None,
            };
            e.post_send(qp, &wr).unwrap();
        }
        let events: Vec<_> = std::iter::from_fn(|| e.poll_event()).collect();
        assert_eq!(events, [AsyncEvent::CqErr(cq), AsyncEvent::QpFatal(qp)]);
        assert_eq!(e.qps[qp].state, QpState::Err);
    }
}
