//! The names a rule may use for errno values, completion statuses and
//! opcodes, with the numbers of Linux and of rdma-core's `verbs.h` (the
//! public ABI, so they cannot change). Names are case-insensitive and may
//! carry verbs.h's prefix (`IBV_WC_`, `IBV_WR_`); a plain number is taken
//! as it is. The verbs trace (`softverbs-trace`) prints the same names.

/// errno values a verb or an rdma_cm call may plausibly return, with
/// their Linux numbers (`asm-generic/errno-base.h` and `errno.h`, which
/// x86-64 and arm64 use as they are). One name per number, so that
/// `errno_name` is unambiguous: no `EWOULDBLOCK` or `ENOTSUP` aliases.
const ERRNOS: &[(&str, i32)] = &[
    ("EPERM", 1),
    ("ENOENT", 2),
    ("EINTR", 4),
    ("EIO", 5),
    ("ENXIO", 6),
    ("E2BIG", 7),
    ("EBADF", 9),
    ("EAGAIN", 11),
    ("ENOMEM", 12),
    ("EACCES", 13),
    ("EFAULT", 14),
    ("EBUSY", 16),
    ("EEXIST", 17),
    ("ENODEV", 19),
    ("EINVAL", 22),
    ("ENFILE", 23),
    ("EMFILE", 24),
    ("ENOSPC", 28),
    ("ERANGE", 34),
    ("ENOSYS", 38),
    ("ENODATA", 61),
    ("EPROTO", 71),
    ("EOVERFLOW", 75),
    ("EOPNOTSUPP", 95),
    ("EADDRINUSE", 98),
    ("EADDRNOTAVAIL", 99),
    ("ENETDOWN", 100),
    ("ENETUNREACH", 101),
    ("ECONNRESET", 104),
    ("ETIMEDOUT", 110),
    ("ECONNREFUSED", 111),
    ("EHOSTUNREACH", 113),
    ("ESTALE", 116),
    ("ECANCELED", 125),
];

/// `enum ibv_wc_status`.
const WC_STATUSES: &[(&str, u32)] = &[
    ("SUCCESS", 0),
    ("LOC_LEN_ERR", 1),
    ("LOC_QP_OP_ERR", 2),
    ("LOC_EEC_OP_ERR", 3),
    ("LOC_PROT_ERR", 4),
    ("WR_FLUSH_ERR", 5),
    ("MW_BIND_ERR", 6),
    ("BAD_RESP_ERR", 7),
    ("LOC_ACCESS_ERR", 8),
    ("REM_INV_REQ_ERR", 9),
    ("REM_ACCESS_ERR", 10),
    ("REM_OP_ERR", 11),
    ("RETRY_EXC_ERR", 12),
    ("RNR_RETRY_EXC_ERR", 13),
    ("LOC_RDD_VIOL_ERR", 14),
    ("REM_INV_RD_REQ_ERR", 15),
    ("REM_ABORT_ERR", 16),
    ("INV_EECN_ERR", 17),
    ("INV_EEC_STATE_ERR", 18),
    ("FATAL_ERR", 19),
    ("RESP_TIMEOUT_ERR", 20),
    ("GENERAL_ERR", 21),
    ("TM_ERR", 22),
    ("TM_RNDV_INCOMPLETE", 23),
];

/// `enum ibv_wr_opcode`.
const WR_OPCODES: &[(&str, u32)] = &[
    ("RDMA_WRITE", 0),
    ("RDMA_WRITE_WITH_IMM", 1),
    ("SEND", 2),
    ("SEND_WITH_IMM", 3),
    ("RDMA_READ", 4),
    ("ATOMIC_CMP_AND_SWP", 5),
    ("ATOMIC_FETCH_AND_ADD", 6),
    ("LOCAL_INV", 7),
    ("BIND_MW", 8),
    ("SEND_WITH_INV", 9),
];

/// `enum ibv_wc_opcode`.
const WC_OPCODES: &[(&str, u32)] = &[
    ("SEND", 0),
    ("RDMA_WRITE", 1),
    ("RDMA_READ", 2),
    ("COMP_SWAP", 3),
    ("FETCH_ADD", 4),
    ("BIND_MW", 5),
    ("LOCAL_INV", 6),
    ("RECV", 128),
    ("RECV_RDMA_WITH_IMM", 129),
];

/// The largest errno Linux can return (`MAX_ERRNO` in the kernel's
/// `linux/err.h`): a return of -4095..=-1 is an error, anything else is
/// not, so a larger "errno" could never reach the program as one.
const MAX_ERRNO: i32 = 4095;

/// An errno by name (`ENOMEM`) or number (1 to 4095).
pub fn errno(text: &str) -> Option<i32> {
    lookup(ERRNOS, "", text).or_else(|| text.parse().ok().filter(|n| (1..=MAX_ERRNO).contains(n)))
}

/// An `ibv_wc_status` by name (`RETRY_EXC_ERR`, `IBV_WC_RETRY_EXC_ERR`) or
/// number.
pub fn wc_status(text: &str) -> Option<u32> {
    lookup(WC_STATUSES, "IBV_WC_", text).or_else(|| number(WC_STATUSES, text))
}

/// An `ibv_wr_opcode` by name (`RDMA_WRITE`, `IBV_WR_RDMA_WRITE`) or number.
pub fn wr_opcode(text: &str) -> Option<u32> {
    lookup(WR_OPCODES, "IBV_WR_", text).or_else(|| number(WR_OPCODES, text))
}

/// An `ibv_wc_opcode` by name (`RECV`, `IBV_WC_RECV`) or number.
pub fn wc_opcode(text: &str) -> Option<u32> {
    lookup(WC_OPCODES, "IBV_WC_", text).or_else(|| number(WC_OPCODES, text))
}

/// The name of an errno value, or its number.
pub fn errno_name(errno: i32) -> String {
    ERRNOS
        .iter()
        .find(|(_, n)| *n == errno)
        .map_or_else(|| format!("errno {errno}"), |(name, _)| name.to_string())
}

/// The name of an `ibv_wc_status` number (`UNKNOWN` for others).
pub fn wc_status_name(status: u32) -> &'static str {
    name_of(WC_STATUSES, status)
}

/// The name of an `ibv_wr_opcode` number (`UNKNOWN` for others).
pub fn wr_opcode_name(opcode: u32) -> &'static str {
    name_of(WR_OPCODES, opcode)
}

/// The name of an `ibv_wc_opcode` number (`UNKNOWN` for others).
pub fn wc_opcode_name(opcode: u32) -> &'static str {
    name_of(WC_OPCODES, opcode)
}

fn name_of(table: &[(&'static str, u32)], value: u32) -> &'static str {
    table
        .iter()
        .find(|(_, n)| *n == value)
        .map_or("UNKNOWN", |(name, _)| name)
}

fn lookup<T: Copy>(table: &[(&str, T)], prefix: &str, text: &str) -> Option<T> {
    let upper = text.to_ascii_uppercase();
    let bare = upper.strip_prefix(prefix).unwrap_or(&upper);
    table
        .iter()
        .find(|(name, _)| *name == bare)
        .map(|(_, v)| *v)
}

/// A number that is one of the table's values.
fn number(table: &[(&str, u32)], text: &str) -> Option<u32> {
    let n: u32 = text.parse().ok()?;
    table.iter().any(|(_, v)| *v == n).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_and_without_prefix_and_numbers() {
        assert_eq!(wc_status("RETRY_EXC_ERR"), Some(12));
        assert_eq!(wc_status("ibv_wc_rem_access_err"), Some(10));
        assert_eq!(wc_status("13"), Some(13));
        assert_eq!(wc_status("99"), None);
        assert_eq!(wr_opcode("IBV_WR_RDMA_READ"), Some(4));
        assert_eq!(wc_opcode("recv_rdma_with_imm"), Some(129));
        assert_eq!(errno("ENOMEM"), Some(12));
        assert_eq!(errno("7"), Some(7));
        assert_eq!(errno("ENOTATHING"), None);
        assert_eq!(errno("4095"), Some(4095));
        assert_eq!((errno("4096"), errno("0"), errno("-5")), (None, None, None));
        assert_eq!(wc_status_name(13), "RNR_RETRY_EXC_ERR");
        assert_eq!(
            (wr_opcode_name(4), wc_opcode_name(129)),
            ("RDMA_READ", "RECV_RDMA_WITH_IMM")
        );
        assert_eq!(wc_opcode_name(77), "UNKNOWN");
        assert_eq!(
            (errno_name(12), errno_name(77)),
            ("ENOMEM".to_string(), "errno 77".to_string())
        );
    }

    #[test]
    fn common_errnos_have_their_linux_numbers() {
        for (name, n) in [
            ("EBADF", 9),
            ("EMFILE", 24),
            ("ENODEV", 19),
            ("ENODATA", 61),
            ("EADDRINUSE", 98),
            ("EHOSTUNREACH", 113),
            ("ECANCELED", 125),
        ] {
            assert_eq!(errno(name), Some(n), "{name}");
            assert_eq!(errno_name(n), name);
        }
    }

    #[test]
    fn each_errno_has_one_name_and_one_number() {
        let mut numbers: Vec<i32> = ERRNOS.iter().map(|(_, n)| *n).collect();
        numbers.dedup();
        assert_eq!(numbers.len(), ERRNOS.len(), "sorted, without duplicates");
        assert!(numbers.windows(2).all(|w| w[0] < w[1]));
        assert!(numbers.iter().all(|n| (1..=MAX_ERRNO).contains(n)));
    }
}
