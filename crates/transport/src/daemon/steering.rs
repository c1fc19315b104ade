//! Packets straight to their context: a `SO_REUSEPORT` group on UDP 4791
//! whose classic-BPF program picks each datagram's socket by its
//! destination QP number.
//!
//! The daemon binds every socket of the group itself: its own (index 0,
//! where everything the program does not place lands, and which it routes
//! through a context's data stream) and the members it hands to contexts
//! over SCM_RIGHTS, so that each reads its packets with no hop. The daemon
//! keeps a descriptor of every member for good: the group never shrinks,
//! so no member ever changes index (the kernel fills a closed member's
//! index with the group's last one, which nobody could track reliably
//! across a `kill -9`: a dying process closes its copies in whatever
//! order). A context's death frees its member: the daemon reads and
//! routes what reaches it until the member serves the next context.
//! (The alternative without a daemon, every process binding its own
//! member, was rejected for the same reason: indexes would shift under a
//! `kill -9` with nobody to reprogram.)
//!
//! The program, on the UDP payload (the BTH): load bytes 4..8, keep the
//! 24-bit QPN, shift out the index within its block, then one comparison
//! and one return per block; anything else (too short to hold a BTH, a
//! block nobody holds here) returns index 0.

use nix::sys::socket::setsockopt;
use std::io;
use std::os::fd::AsFd;

// SO_ATTACH_REUSEPORT_CBPF: nix has no type for it; its own macro defines
// one (the setsockopt call it expands to is nix's code, as for nix's own
// options; no unsafe is written in this crate).
use nix::{setsockopt_impl, sockopt_impl};
sockopt_impl!(
    /// `SO_ATTACH_REUSEPORT_CBPF`.
    ReuseportCbpf,
    SetOnly,
    libc::SOL_SOCKET,
    libc::SO_ATTACH_REUSEPORT_CBPF,
    libc::sock_fprog
);

/// Classic BPF opcodes used here.
const LD_W_ABS: u16 = 0x20;
const ALU_AND_K: u16 = 0x54;
const ALU_RSH_K: u16 = 0x74;
const JMP_JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
/// The kernel's limit on a classic BPF program (BPF_MAXINSNS).
const MAX_INSNS: usize = 4096;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The steering program for `(block, index)` pairs. Blocks beyond what
/// fits in one program go to index 0 (the daemon passes them on).
pub fn program(table: &[(u16, u32)]) -> Vec<libc::sock_filter> {
    let fits = (MAX_INSNS - 4) / 2;
    let mut p = vec![
        insn(LD_W_ABS, 0, 0, 4),
        insn(ALU_AND_K, 0, 0, 0x00FF_FFFF),
        insn(ALU_RSH_K, 0, 0, crate::slots::SLOT_SHIFT),
    ];
    for &(block, index) in table.iter().take(fits) {
        p.push(insn(JMP_JEQ_K, 0, 1, u32::from(block)));
        p.push(insn(RET_K, 0, 0, index));
    }
    p.push(insn(RET_K, 0, 0, 0));
    p
}

/// Installs the steering program for `table` on the group `socket`
/// belongs to.
pub fn steer(socket: &impl AsFd, table: &[(u16, u32)]) -> io::Result<()> {
    let mut filter = program(table);
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    setsockopt(socket, ReuseportCbpf, &prog).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_compares_each_block_and_defaults_to_the_daemon() {
        let p = program(&[(5, 1), (9, 2)]);
        assert_eq!(p.len(), 3 + 4 + 1);
        assert_eq!((p[3].code, p[3].k, p[4].k), (JMP_JEQ_K, 5, 1));
        assert_eq!((p.last().unwrap().code, p.last().unwrap().k), (RET_K, 0));
        let big: Vec<(u16, u32)> = (1..=4095).map(|b| (b, 1)).collect();
        assert!(program(&big).len() <= MAX_INSNS);
    }
}
