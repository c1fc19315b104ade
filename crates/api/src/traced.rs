//! The verbs trace (`SOFTVERBS_TRACE`, docs/tracing.md) of the API's
//! devices, soft and pass-through alike: every call as a verb record (its
//! arguments, result and errno), every completion `poll_cq` returns and
//! every event taken, written around the device's own calls. QPs are
//! named by number, as in the provider's trace, other objects by handle.

use crate::{Error, MrKeys, Region, Result, Verbs};
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use softverbs_engine::{
    wc_flags, AhAttr, AhId, AsyncEvent, CqId, Gid, MrId, PdId, QpAttr, QpAttrMask, QpCreated, QpId,
    QpInitAttr, RecvWr, SendWr, SrqAttr, SrqAttrMask, SrqId, WorkCompletion,
};
use softverbs_faults::names::{wc_opcode_name, wc_status_name, wr_opcode_name};
use softverbs_trace::{event_name, Completion, Event, Record, Verb, Wr};
use std::collections::HashMap;
use std::time::Duration;

/// A device whose calls are traced.
#[derive(Debug)]
pub(crate) struct Traced {
    inner: Box<dyn Verbs>,
    /// QP numbers by handle.
    qp_nums: Mutex<HashMap<QpId, u32>>,
}

impl Traced {
    pub(crate) fn new(inner: Box<dyn Verbs>) -> Traced {
        Traced {
            inner,
            qp_nums: Mutex::new(HashMap::new()),
        }
    }

    fn qp_num(&self, qp: QpId) -> Option<u32> {
        self.qp_nums.lock().get(&qp).copied()
    }

    fn write(&self, record: Record) {
        softverbs_trace::write(self.inner.name(), record);
    }

    /// Writes the verb record of a call and returns its result.
    fn verb<T>(
        &self,
        verb: &str,
        qp: Option<u32>,
        args: Value,
        wrs: Vec<Wr>,
        result: Result<T>,
    ) -> Result<T> {
        let (ret, errno) = match &result {
            Ok(_) => (0, 0),
            Err(Error { errno, .. }) => (-1, *errno),
        };
        let args = match args {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        self.write(Record::Verb(Verb {
            verb: verb.to_string(),
            qp,
            args,
            wrs,
            ret,
            errno,
        }));
        result
    }

    /// The record of a post of one WR: the WR if it was accepted, else
    /// its wr_id as `bad_wr`, as the provider's trace writes it.
    fn posted(
        &self,
        verb: &str,
        qp: Option<u32>,
        mut args: Value,
        wr: Wr,
        r: Result<()>,
    ) -> Result<()> {
        let wrs = match &r {
            Ok(()) => vec![wr],
            Err(_) => {
                args["bad_wr"] = json!(wr.wr_id);
                vec![]
            }
        };
        self.verb(verb, qp, args, wrs, r)
    }
}

/// A handle as the trace names it.
fn name(handle: impl std::fmt::Debug) -> String {
    format!("{handle:?}")
}

fn completion(cq: CqId, w: &WorkCompletion) -> Record {
    let imm = w.wc_flags & (wc_flags::WITH_IMM | wc_flags::WITH_INV) != 0;
    Record::Completion(Completion {
        cq: name(cq),
        qp: w.qp_num,
        wr_id: w.wr_id,
        status: wc_status_name(w.status as u32).to_string(),
        opcode: wc_opcode_name(w.opcode as u32).to_string(),
        byte_len: w.byte_len,
        imm: imm.then_some(w.imm_data_or_inv_rkey),
        wc_flags: w.wc_flags,
        vendor_err: w.vendor_err,
        src_qp: w.src_qp,
    })
}

fn send_wr(w: &SendWr<'_>) -> Wr {
    let inline = w.send_flags & softverbs_engine::send_flags::INLINE != 0;
    Wr {
        wr_id: w.wr_id,
        opcode: wr_opcode_name(w.opcode).to_string(),
        len: if inline {
            w.inline_data.len() as u64
        } else {
            w.sg_list.iter().map(|s| u64::from(s.length)).sum()
        },
        flags: w.send_flags,
        remote_addr: None,
        rkey: None,
        imm: Wr::imm_of(w.opcode, w.imm_data_or_inv_rkey),
    }
}

fn recv_wr(w: &RecvWr<'_>) -> Wr {
    Wr {
        wr_id: w.wr_id,
        opcode: "RECV".into(),
        len: w.sg_list.iter().map(|s| u64::from(s.length)).sum(),
        ..Wr::default()
    }
}

impl Verbs for Traced {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn is_passthrough(&self) -> bool {
        self.inner.is_passthrough()
    }

    fn query_gid(&self, index: u32) -> Result<Gid> {
        // Not recorded, as the provider's trace leaves GID queries out.
        self.inner.query_gid(index)
    }

    fn alloc_pd(&self) -> Result<PdId> {
        let r = self.inner.alloc_pd();
        let pd = r.as_ref().ok().map(name);
        self.verb("ibv_alloc_pd", None, json!({ "pd": pd }), vec![], r)
    }

    fn dealloc_pd(&self, pd: PdId) -> Result<()> {
        let r = self.inner.dealloc_pd(pd);
        self.verb("ibv_dealloc_pd", None, json!({ "pd": name(pd) }), vec![], r)
    }

    fn reg_mr(&self, pd: PdId, region: &Region, access: u32) -> Result<MrKeys> {
        let r = self.inner.reg_mr(pd, region, access);
        let keys = r.as_ref().ok();
        let args = json!({
            "pd": name(pd), "length": region.len(), "access": access,
            "mr": keys.map(|k| name(k.id)), "lkey": keys.map(|k| k.lkey), "rkey": keys.map(|k| k.rkey),
        });
        self.verb("ibv_reg_mr", None, args, vec![], r)
    }

    fn dereg_mr(&self, mr: MrId) -> Result<()> {
        let r = self.inner.dereg_mr(mr);
        self.verb("ibv_dereg_mr", None, json!({ "mr": name(mr) }), vec![], r)
    }

    fn create_cq(&self, cqe: u32) -> Result<CqId> {
        let r = self.inner.create_cq(cqe);
        let args = json!({ "cqe": cqe, "cq": r.as_ref().ok().map(name) });
        self.verb("ibv_create_cq", None, args, vec![], r)
    }

    fn destroy_cq(&self, cq: CqId) -> Result<()> {
        let r = self.inner.destroy_cq(cq);
        self.verb("ibv_destroy_cq", None, json!({ "cq": name(cq) }), vec![], r)
    }

    fn poll_cq(&self, cq: CqId, max: usize) -> Result<Vec<WorkCompletion>> {
        let r = self.inner.poll_cq(cq, max);
        match &r {
            // Empty polls are not recorded: they would drown the rest.
            Ok(wcs) => wcs.iter().for_each(|w| self.write(completion(cq, w))),
            Err(_) => {
                let args = json!({ "cq": name(cq) });
                return self.verb("ibv_poll_cq", None, args, vec![], r);
            }
        }
        r
    }

    fn create_qp(&self, pd: PdId, init: &QpInitAttr) -> Result<QpCreated> {
        let r = self.inner.create_qp(pd, init);
        let qp = r.as_ref().ok().map(|c| c.qp_num);
        if let Ok(c) = &r {
            self.qp_nums.lock().insert(c.id, c.qp_num);
        }
        let args = json!({
            "pd": name(pd), "qp_type": init.qp_type, "send_cq": name(init.send_cq),
            "recv_cq": name(init.recv_cq), "srq": init.srq.map(name),
            "max_send_wr": init.cap.max_send_wr, "max_recv_wr": init.cap.max_recv_wr,
        });
        self.verb("ibv_create_qp", qp, args, vec![], r)
    }

    fn modify_qp(&self, qp: QpId, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let r = self.inner.modify_qp(qp, attr, mask);
        let args = json!({ "attr_mask": mask.bits(), "qp_state": attr.qp_state });
        self.verb("ibv_modify_qp", self.qp_num(qp), args, vec![], r)
    }

    fn query_qp(&self, qp: QpId) -> Result<QpAttr> {
        let r = self.inner.query_qp(qp);
        let args = json!({ "qp_state": r.as_ref().ok().map(|a| a.qp_state) });
        self.verb("ibv_query_qp", self.qp_num(qp), args, vec![], r)
    }

    fn destroy_qp(&self, qp: QpId) -> Result<()> {
        let num = self.qp_num(qp);
        let r = self.inner.destroy_qp(qp);
        if r.is_ok() {
            self.qp_nums.lock().remove(&qp);
        }
        self.verb("ibv_destroy_qp", num, json!({}), vec![], r)
    }

    fn create_ah(&self, pd: PdId, attr: &AhAttr) -> Result<AhId> {
        let r = self.inner.create_ah(pd, attr);
        let args = json!({ "pd": name(pd), "ah": r.as_ref().ok().map(name) });
        self.verb("ibv_create_ah", None, args, vec![], r)
    }

    fn destroy_ah(&self, ah: AhId) -> Result<()> {
        let r = self.inner.destroy_ah(ah);
        self.verb("ibv_destroy_ah", None, json!({ "ah": name(ah) }), vec![], r)
    }

    fn post_send(&self, qp: QpId, wr: &SendWr<'_>) -> Result<()> {
        let r = self.inner.post_send(qp, wr);
        self.posted("ibv_post_send", self.qp_num(qp), json!({}), send_wr(wr), r)
    }

    fn post_recv(&self, qp: QpId, wr: &RecvWr<'_>) -> Result<()> {
        let r = self.inner.post_recv(qp, wr);
        self.posted("ibv_post_recv", self.qp_num(qp), json!({}), recv_wr(wr), r)
    }

    fn create_srq(&self, pd: PdId, attr: &SrqAttr) -> Result<(SrqId, SrqAttr)> {
        let r = self.inner.create_srq(pd, attr);
        let args = json!({
            "pd": name(pd), "max_wr": attr.max_wr, "max_sge": attr.max_sge,
            "srq": r.as_ref().ok().map(|(s, _)| name(s)),
        });
        self.verb("ibv_create_srq", None, args, vec![], r)
    }

    fn modify_srq(&self, srq: SrqId, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        let r = self.inner.modify_srq(srq, attr, mask);
        let args =
            json!({ "srq": name(srq), "attr_mask": mask.bits(), "srq_limit": attr.srq_limit });
        self.verb("ibv_modify_srq", None, args, vec![], r)
    }

    fn query_srq(&self, srq: SrqId) -> Result<SrqAttr> {
        let r = self.inner.query_srq(srq);
        self.verb(
            "ibv_query_srq",
            None,
            json!({ "srq": name(srq) }),
            vec![],
            r,
        )
    }

    fn destroy_srq(&self, srq: SrqId) -> Result<()> {
        let r = self.inner.destroy_srq(srq);
        self.verb(
            "ibv_destroy_srq",
            None,
            json!({ "srq": name(srq) }),
            vec![],
            r,
        )
    }

    fn post_srq_recv(&self, srq: SrqId, wr: &RecvWr<'_>) -> Result<()> {
        let r = self.inner.post_srq_recv(srq, wr);
        let args = json!({ "srq": name(srq) });
        self.posted("ibv_post_srq_recv", None, args, recv_wr(wr), r)
    }

    fn req_notify_cq(&self, cq: CqId, solicited_only: bool) -> Result<()> {
        let r = self.inner.req_notify_cq(cq, solicited_only);
        let args = json!({ "cq": name(cq), "solicited_only": solicited_only });
        self.verb("ibv_req_notify_cq", None, args, vec![], r)
    }

    fn get_cq_event(&self, timeout: Duration) -> Result<Option<CqId>> {
        let r = self.inner.get_cq_event(timeout);
        if let Ok(Some(cq)) = &r {
            self.write(Record::Event(Event {
                event: "COMP".into(),
                object: Some(name(cq)),
                ..Event::default()
            }));
        }
        r
    }

    fn get_async_event(&self, timeout: Duration) -> Result<Option<AsyncEvent>> {
        let r = self.inner.get_async_event(timeout);
        if let Ok(Some(ev)) = &r {
            let (qp, object) = match *ev {
                AsyncEvent::CqErr(cq) => (None, Some(name(cq))),
                AsyncEvent::SrqLimitReached(srq) => (None, Some(name(srq))),
                AsyncEvent::PortErr(_) | AsyncEvent::PortActive(_) => (None, None),
                AsyncEvent::QpFatal(q)
                | AsyncEvent::QpReqErr(q)
                | AsyncEvent::QpAccessErr(q)
                | AsyncEvent::CommEst(q)
                | AsyncEvent::SqDrained(q)
                | AsyncEvent::QpLastWqeReached(q) => (self.qp_num(q), None),
            };
            self.write(Record::Event(Event {
                event: event_name(ev.event_type()).into(),
                qp,
                object,
                port: ev.port().map(u32::from),
            }));
        }
        r
    }
}
