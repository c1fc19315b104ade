//! Completion-event checks (`ibv_req_notify_cq` / `ibv_get_cq_event`), the
//! way event-driven programs use them: arm a CQ, wait for its event, poll
//! it empty, re-arm. Because a CQ is re-armed only once it is empty, any
//! completion found in a CQ that is still armed arrived after arming, so
//! its event must already be queued; and an event for a CQ that is not
//! armed is spurious.

use softverbs_engine::{CqId, Engine};

/// The arming state of one node's CQs.
#[derive(Debug, Clone)]
pub struct CqWatch {
    cqs: Vec<(CqId, bool)>,
}

impl CqWatch {
    /// Watches `cqs`, none armed yet.
    pub fn new(cqs: &[CqId]) -> CqWatch {
        CqWatch {
            cqs: cqs.iter().map(|&c| (c, false)).collect(),
        }
    }

    /// Takes the engine's pending completion events; an event for a CQ
    /// not armed is an error.
    pub fn take_events(&mut self, engine: &mut Engine) -> Result<(), String> {
        while let Some(cq) = engine.poll_comp_event() {
            match self.cqs.iter_mut().find(|(c, _)| *c == cq) {
                Some((_, armed @ true)) => *armed = false,
                _ => {
                    return Err(format!(
                        "completion event for CQ {cq:?}, which was not armed"
                    ))
                }
            }
        }
        Ok(())
    }

    /// After polling `cq` empty: a completion found while it was still
    /// armed means its event is missing.
    pub fn polled(&self, cq: CqId, found: usize) -> Result<(), String> {
        let armed = self.cqs.iter().any(|&(c, a)| c == cq && a);
        if armed && found > 0 {
            return Err(format!(
                "{found} completions reached armed CQ {cq:?} without a completion event"
            ));
        }
        Ok(())
    }

    /// Re-arms every CQ whose event was consumed (they are all empty now).
    pub fn rearm(&mut self, engine: &mut Engine) -> Result<(), String> {
        for (cq, armed) in self.cqs.iter_mut().filter(|(_, a)| !*a) {
            engine
                .req_notify_cq(*cq, false)
                .map_err(|e| format!("req_notify_cq: {e}"))?;
            *armed = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softverbs_engine::DeviceConfig;

    #[test]
    fn arming_and_consuming_events_round_trip() {
        let mut e = Engine::new(DeviceConfig::loopback(1));
        let (cq, _) = e.create_cq(4, 0).expect("CQ");
        let mut w = CqWatch::new(&[cq]);
        assert_eq!(w.polled(cq, 1), Ok(()), "not armed yet: nothing expected");
        w.rearm(&mut e).expect("arms");
        assert!(w.polled(cq, 1).is_err(), "armed, completions, no event");
        assert_eq!(w.take_events(&mut e), Ok(()), "no event queued");
        assert_eq!(w.polled(cq, 0), Ok(()));
    }
}
