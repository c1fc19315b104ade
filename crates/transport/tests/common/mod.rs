//! What the transport's integration tests share: a driver with a PD, a
//! CQ and one MR over its memory, its completion events on a channel, and
//! the QP and completion helpers around it.

use softverbs_engine::*;
use softverbs_transport::*;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Where each side's memory starts, and how long it is.
pub const BASE: u64 = 0x7000_0000;
pub const LEN: usize = 4 << 20;

/// Forwards completion events to a channel.
pub struct Events(pub parking_lot::Mutex<mpsc::Sender<CqId>>);

impl Notify for Events {
    fn completion_event(&self, cq: CqId) {
        let _ = self.0.lock().send(cq);
    }
    fn async_event(&self, _: AsyncEvent) {}
    fn device_fatal(&self) {}
}

/// A driver with a PD, a CQ and one MR over all its memory.
pub struct Side {
    pub d: Driver<FlatMemory>,
    /// The device's GID.
    pub gid: Gid,
    pub events: mpsc::Receiver<CqId>,
    pub pd: PdId,
    pub cq: CqId,
    pub key: u32,
}

/// A QP of type `ty` on `s`'s PD and CQ, signalling every WR.
pub fn create_qp(s: &Side, ty: QpType) -> (QpId, u32) {
    s.d.with(|e, _| {
        let init = QpInitAttr {
            send_cq: s.cq,
            recv_cq: s.cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 128,
                max_recv_wr: 128,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 64,
            },
            qp_type: ty as u32,
            sq_sig_all: true,
        };
        let c = e.create_qp(s.pd, &init).unwrap();
        (c.id, c.qp_num)
    })
}

/// Waits for `n` completions, blocking on completion events only: the
/// progress thread must do all the work.
pub fn wait_completions(s: &Side, n: usize) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < n {
        s.d.with(|e, _| e.req_notify_cq(s.cq, false)).unwrap();
        let mut batch = Vec::new();
        s.d.with(|e, _| e.poll_cq(s.cq, 64, &mut batch)).unwrap();
        got.extend(batch);
        if got.len() >= n {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            s.events.recv_timeout(left).is_ok(),
            "timed out with {} of {n} completions",
            got.len()
        );
    }
    got
}
