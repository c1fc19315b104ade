//! Keeping values device-independent. Two devices have different limits
//! (max_qp_wr, max_sge, ...): a request between the smaller and the larger
//! limit succeeds on one and fails on the other, which is a difference of
//! hardware, not of verbs rules. Such values are moved just above the
//! larger limit, where both must refuse them; values within the smaller
//! limit are kept.

/// What the `device` verb reports, the smaller and larger of two devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// max_qp_wr.
    pub qp_wr: (u32, u32),
    /// max_sge.
    pub sge: (u32, u32),
    /// max_srq_wr.
    pub srq_wr: (u32, u32),
    /// max_srq_sge.
    pub srq_sge: (u32, u32),
    /// max_qp_rd_atom: the bound of max_dest_rd_atomic.
    pub rd_atom: (u32, u32),
    /// max_qp_init_rd_atom: the bound of max_rd_atomic.
    pub init_rd_atom: (u32, u32),
    /// The port's pkey_tbl_len.
    pub pkeys: (u32, u32),
}

/// max_inline_data is not reported by any query: requests up to this are
/// kept (every RoCE device allows that much), larger ones are made larger
/// than any device allows.
const INLINE_KEPT: u32 = 64;
const INLINE_REFUSED: u32 = 1 << 20;

/// One device's limits, from its `device` answer.
fn parse(answer: &str) -> Result<[u32; 10], String> {
    let mut words = answer.split_whitespace();
    if words.next() != Some("ok") {
        return Err(format!("device query failed: {answer}"));
    }
    let values: Vec<u32> = words.filter_map(|w| w.parse().ok()).collect();
    values
        .try_into()
        .map_err(|_| format!("device answer not understood: {answer}"))
}

impl Limits {
    /// The limits of two devices from their `device` answers.
    pub fn of(a: &str, b: &str) -> Result<Limits, String> {
        let (a, b) = (parse(a)?, parse(b)?);
        let pair = |i: usize| (a[i].min(b[i]), a[i].max(b[i]));
        Ok(Limits {
            qp_wr: pair(0),
            sge: pair(1),
            srq_wr: pair(3),
            srq_sge: pair(4),
            rd_atom: pair(5),
            init_rd_atom: pair(6),
            pkeys: pair(9),
        })
    }

    /// A QP's requested capacities, each kept or made too large for both.
    pub fn qp_cap(&self, cap: &mut softverbs_engine::QpCap) {
        cap.max_send_wr = fit(cap.max_send_wr, self.qp_wr);
        cap.max_recv_wr = fit(cap.max_recv_wr, self.qp_wr);
        cap.max_send_sge = fit(cap.max_send_sge, self.sge);
        cap.max_recv_sge = fit(cap.max_recv_sge, self.sge);
        if cap.max_inline_data > INLINE_KEPT {
            cap.max_inline_data = INLINE_REFUSED;
        }
    }

    /// An index into a table of `len` entries (P_Keys): kept when in both
    /// tables, else out of both.
    pub fn index(value: u32, len: (u32, u32)) -> u32 {
        fit(value, (len.0.saturating_sub(1), len.1.saturating_sub(1)))
    }
}

/// `value` if within the smaller limit, else just above the larger one.
pub fn fit(value: u32, (small, large): (u32, u32)) -> u32 {
    if value <= small {
        value
    } else {
        large.saturating_add(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_between_two_limits_move_above_both() {
        assert_eq!(fit(5, (16, 32)), 5);
        assert_eq!(fit(16, (16, 32)), 16);
        assert_eq!(fit(17, (16, 32)), 33);
        assert_eq!(fit(u32::MAX, (16, 32)), 33);
    }

    #[test]
    fn device_answers_give_the_smaller_and_larger_limit() {
        let l = Limits::of(
            "ok 32768 32 4194303 32768 32 128 128 1 16 1",
            "ok 16384 32 32767 16384 27 128 128 1 1024 1",
        )
        .unwrap();
        assert_eq!(l.qp_wr, (16384, 32768));
        assert_eq!(l.srq_sge, (27, 32));
        assert_eq!(l.pkeys, (1, 1));
        assert!(Limits::of("err 22", "ok").is_err());
    }
}
