//! Posting receive WRs: `ibv_post_recv` and `ibv_post_srq_recv` for one WR.
//! A WR is queued whole or refused with nothing queued. Receive WRs may be
//! posted from INIT on (seed 004; EINVAL in RESET); in ERR they complete at
//! once with WR_FLUSH_ERR. Too many SGEs or a buffer of 2^31 bytes or more
//! are EINVAL, a full queue ENOMEM (the kernel's rxe driver); local keys
//! are checked when the WR executes, not when it is posted.

use super::qp::flushed_recv;
use super::Model;
use crate::errno::{require, Outcome, EINVAL, ENOMEM};
use softverbs_engine::{QpId, QpState, Sge, SrqId};

impl Model {
    /// `ibv_post_recv`.
    pub fn post_recv(&mut self, id: QpId, wr_id: u64, sges: &[Sge]) -> Outcome {
        let qp = self.qps.get(&id).ok_or(EINVAL)?;
        require(qp.srq.is_none(), EINVAL)?;
        require(qp.state != QpState::Reset, EINVAL)?;
        // A full queue before a bad WR, the order of rxe and mlx5.
        require(qp.rq.len() < qp.init.cap.max_recv_wr as usize, ENOMEM)?;
        require(sges.len() <= qp.init.cap.max_recv_sge as usize, EINVAL)?;
        check_length(sges)?;
        if qp.state == QpState::Err {
            let (cq, wc) = (qp.recv_cq, flushed_recv(wr_id, qp.qp_num));
            self.complete(cq, wc);
        } else {
            self.qps
                .get_mut(&id)
                .expect("checked above")
                .rq
                .push_back(wr_id);
        }
        Ok(())
    }

    /// `ibv_post_srq_recv`.
    pub fn post_srq_recv(&mut self, id: SrqId, sges: &[Sge]) -> Outcome {
        let srq = self.srqs.get_mut(&id).ok_or(EINVAL)?;
        require(srq.posted < srq.max_wr as usize, ENOMEM)?;
        require(sges.len() <= srq.max_sge as usize, EINVAL)?;
        check_length(sges)?;
        srq.posted += 1;
        Ok(())
    }
}

/// A receive buffer totals less than 2^31 bytes.
fn check_length(sges: &[Sge]) -> Outcome {
    require(
        sges.iter().map(|s| u64::from(s.length)).sum::<u64>() < 1 << 31,
        EINVAL,
    )
}
