//! The SRQ low-watermark (ibv_modify_srq(3), IBV_SRQ_LIMIT): setting a
//! non-zero limit arms the SRQ; the first time the number of posted WRs
//! drops below the limit, IBV_EVENT_SRQ_LIMIT_REACHED fires once and the
//! SRQ disarms, after which the limit reads back as 0 (IBTA vol. 1
//! chapter 10, SRQ limit; rxe behaves the same way).

/// Arming state of an SRQ's limit event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrqLimit {
    armed: Option<u32>,
}

impl SrqLimit {
    /// Arms with `limit`; 0 disarms.
    pub fn set(&mut self, limit: u32) {
        self.armed = (limit > 0).then_some(limit);
    }

    /// The limit as `ibv_query_srq` reports it: 0 when not armed.
    pub fn limit(&self) -> u32 {
        self.armed.unwrap_or(0)
    }

    /// Whether the event is armed.
    pub fn is_armed(&self) -> bool {
        self.armed.is_some()
    }

    /// Called after a WR was taken from the SRQ, with the number left.
    /// Returns true exactly once per arming, when the event must fire.
    pub fn on_consumed(&mut self, remaining: usize) -> bool {
        match self.armed {
            Some(limit) if remaining < limit as usize => {
                self.armed = None;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SrqLimit;

    #[test]
    fn new_srq_is_disarmed_and_reads_zero() {
        let l = SrqLimit::default();
        assert!(!l.is_armed());
        assert_eq!(l.limit(), 0);
    }

    #[test]
    fn fires_once_when_count_drops_below_limit_then_disarms() {
        let mut l = SrqLimit::default();
        l.set(3);
        assert_eq!(l.limit(), 3);
        assert!(!l.on_consumed(5));
        assert!(!l.on_consumed(3), "at the limit is not below it");
        assert!(l.on_consumed(2));
        assert_eq!(l.limit(), 0, "a fired limit reads back 0");
        assert!(!l.on_consumed(1), "fires only once per arming");
        assert!(!l.on_consumed(0));
    }

    #[test]
    fn rearming_after_firing_fires_again() {
        let mut l = SrqLimit::default();
        l.set(2);
        assert!(l.on_consumed(1));
        l.set(2);
        assert!(l.is_armed());
        assert!(l.on_consumed(0));
    }

    #[test]
    fn setting_zero_disarms() {
        let mut l = SrqLimit::default();
        l.set(4);
        l.set(0);
        assert!(!l.is_armed());
        assert!(!l.on_consumed(0));
    }
}
