//! Engine time and the timer encodings of the verbs.
//!
//! The engine reads no clock: every call that may start or expire a timer
//! takes `now`, nanoseconds on the embedder's monotonic clock (a simulator
//! passes virtual time).

/// A point in time: nanoseconds on the embedder's monotonic clock.
pub type Nanos = u64;

/// The local ACK timeout of `ibv_qp_attr.timeout`: 4.096 us x 2^timeout,
/// `None` for 0, which means "wait forever" (IBTA; ibv_modify_qp(3)).
pub fn ack_timeout(timeout: u8) -> Option<Nanos> {
    (timeout != 0).then(|| 4096u64 << timeout.min(31))
}

/// The delay an RNR NAK with timer code `code` asks for (the table of
/// `min_rnr_timer` values in the IBTA; code 0 is 655.36 ms).
pub fn rnr_delay(code: u8) -> Nanos {
    softverbs_wire::rnr_timer_micros(code & 0x1F).map_or(655_360_000, |us| u64::from(us) * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_timeout_follows_the_exponent() {
        assert_eq!(ack_timeout(0), None);
        assert_eq!(ack_timeout(1), Some(8192));
        assert_eq!(ack_timeout(14), Some(67_108_864));
        assert_eq!(ack_timeout(31), Some(4096 << 31));
    }

    #[test]
    fn rnr_codes_map_to_the_spec_table() {
        assert_eq!(rnr_delay(0), 655_360_000);
        assert_eq!(rnr_delay(1), 10_000);
        assert_eq!(rnr_delay(12), 640_000);
        assert_eq!(rnr_delay(31), 491_520_000);
    }
}
