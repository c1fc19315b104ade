//! The verbs rules of `SOFTVERBS_FAULTS` on the API's pass-through
//! devices, as the provider applies them on its own (docs/passthrough.md,
//! docs/fault-injection.md): a post a rule refuses fails with the rule's
//! errno; a success a completion rule fails gets the rule's status, its
//! QP is moved to ERR and the QP's later successes are reported flushed
//! until it is reset or destroyed; `qp_error after=N` moves a QP to ERR
//! after its Nth posted WR. Completion delays and timed QP errors need a
//! timer a real device does not give; they are not applied there. (On a
//! soft device the engine applies every rule itself.)

use crate::{Error, Result};
use parking_lot::Mutex;
use softverbs_engine::{WcStatus, WorkCompletion};
use softverbs_faults::{FaultSpec, Faults, Part, Queue};
use std::collections::HashSet;
use std::time::Instant;

/// The rules of one open pass-through device.
#[derive(Debug)]
pub struct VerbsFaults {
    rules: Mutex<Faults>,
    opened: Instant,
    /// QPs a completion rule failed.
    failed: Mutex<HashSet<u32>>,
}

impl VerbsFaults {
    /// The rules of `SOFTVERBS_FAULTS` for device `name`, if any apply.
    pub fn from_env(name: &str) -> Result<Option<VerbsFaults>> {
        let spec = FaultSpec::from_env()
            .map_err(|e| Error::new(libc::EINVAL, format!("SOFTVERBS_FAULTS: {e}")))?;
        Ok(spec
            .and_then(|s| Faults::new(&s, name, Part::Verbs))
            .map(|rules| VerbsFaults {
                rules: Mutex::new(rules),
                opened: Instant::now(),
                failed: Mutex::new(HashSet::new()),
            }))
    }

    /// A WR of `bytes` posted to `queue` of QP `qp`: the error a rule
    /// gives the post instead, if one fires.
    pub fn post(&self, queue: Queue, qp: u32, opcode: Option<u32>, bytes: u64) -> Result<()> {
        match self
            .rules
            .lock()
            .post(self.opened.elapsed(), queue, qp, opcode, bytes)
        {
            Some(errno) => Err(Error::new(
                errno,
                "a fault rule (SOFTVERBS_FAULTS) refused the WR",
            )),
            None => Ok(()),
        }
    }

    /// A WR was posted to QP `qp`: whether it must now enter ERR.
    pub fn posted(&self, qp: u32) -> bool {
        let mut rules = self.rules.lock();
        rules.counts_posts() && rules.posted(qp)
    }

    /// Applies the completion rules to a poll's completions; the QPs a
    /// rule has just failed (to move to ERR).
    pub fn completions(&self, wcs: &mut [WorkCompletion]) -> Vec<u32> {
        let (mut rules, mut failed) = (self.rules.lock(), self.failed.lock());
        let mut newly = Vec::new();
        for wc in wcs.iter_mut().filter(|w| w.status == WcStatus::Success) {
            if failed.contains(&wc.qp_num) {
                wc.status = WcStatus::WrFlushErr;
                continue;
            }
            let at = self.opened.elapsed();
            let fault = rules.completion(at, wc.qp_num, wc.opcode as u32, wc.byte_len);
            if let Some((status, vendor_err)) = fault.fail {
                wc.status = WcStatus::from_c(status).unwrap_or(WcStatus::GeneralErr);
                wc.vendor_err = vendor_err;
                failed.insert(wc.qp_num);
                newly.push(wc.qp_num);
            }
        }
        newly
    }

    /// QP `qp` was reset or destroyed: it starts again.
    pub fn forget(&self, qp: u32) {
        self.failed.lock().remove(&qp);
        self.rules.lock().forget_qp(qp);
    }
}
