//! Copies and atomics on application memory that report a fault instead of
//! killing the process, at the cost of a plain copy.
//!
//! The kernel does this for itself with exception tables: the few
//! instructions allowed to touch user memory are listed, and a fault at one
//! of them resumes at a fixup address with an error instead of oopsing.
//! softverbs does the same in user space. Each guarded operation is a tiny
//! assembly routine whose one memory instruction is listed in [`FIXUPS`];
//! a SIGSEGV or SIGBUS handler that finds the faulting instruction pointer
//! in that list moves it to the routine's resume label and sets `r8` to 1,
//! which the routine returns as "faulted". Every other fault is passed on
//! to the handler that was installed before ours (or to the default
//! action), so the application's own crash handling is unchanged.
//!
//! If something replaces our handler later (a runtime or sanitizer that
//! installs its own), a guarded access could crash again; callers check
//! [`installed`] now and then and fall back to the kernel's cross-memory
//! copies (process_memory.rs), which are slower but need no handler.

use std::arch::global_asm;
use std::os::raw::{c_int, c_void};
use std::sync::OnceLock;

// System V calling convention; r8 is the fault flag the handler sets. The
// direction flag is clear on entry (ABI), so `rep movsb` copies upwards,
// and when it faults part-way rcx holds the bytes not yet copied.
global_asm!(
    ".pushsection .text.softverbs_guarded,\"ax\",@progbits",
    ".p2align 4",
    // fn(dst: *mut u8, src: *const u8, len: usize) -> usize (bytes not copied)
    ".globl softverbs_guarded_copy",
    ".hidden softverbs_guarded_copy",
    "softverbs_guarded_copy:",
    "    mov rcx, rdx",
    ".globl softverbs_guarded_copy_insn",
    ".hidden softverbs_guarded_copy_insn",
    "softverbs_guarded_copy_insn:",
    "    rep movsb",
    ".globl softverbs_guarded_copy_resume",
    ".hidden softverbs_guarded_copy_resume",
    "softverbs_guarded_copy_resume:",
    "    mov rax, rcx",
    "    ret",
    ".p2align 4",
    // fn(addr: *mut u64, compare: u64, swap: u64, faulted: *mut u8) -> u64
    ".globl softverbs_guarded_cas",
    ".hidden softverbs_guarded_cas",
    "softverbs_guarded_cas:",
    "    mov rax, rsi",
    "    xor r8d, r8d",
    ".globl softverbs_guarded_cas_insn",
    ".hidden softverbs_guarded_cas_insn",
    "softverbs_guarded_cas_insn:",
    "    lock cmpxchg qword ptr [rdi], rdx",
    ".globl softverbs_guarded_cas_resume",
    ".hidden softverbs_guarded_cas_resume",
    "softverbs_guarded_cas_resume:",
    "    mov byte ptr [rcx], r8b",
    "    ret",
    ".p2align 4",
    // fn(addr: *mut u64, add: u64, faulted: *mut u8) -> u64
    ".globl softverbs_guarded_fetch_add",
    ".hidden softverbs_guarded_fetch_add",
    "softverbs_guarded_fetch_add:",
    "    mov rax, rsi",
    "    xor r8d, r8d",
    ".globl softverbs_guarded_fetch_add_insn",
    ".hidden softverbs_guarded_fetch_add_insn",
    "softverbs_guarded_fetch_add_insn:",
    "    lock xadd qword ptr [rdi], rax",
    ".globl softverbs_guarded_fetch_add_resume",
    ".hidden softverbs_guarded_fetch_add_resume",
    "softverbs_guarded_fetch_add_resume:",
    "    mov byte ptr [rdx], r8b",
    "    ret",
    ".popsection",
);

extern "C" {
    fn softverbs_guarded_copy(dst: *mut u8, src: *const u8, len: usize) -> usize;
    fn softverbs_guarded_cas(addr: *mut u64, compare: u64, swap: u64, faulted: *mut u8) -> u64;
    fn softverbs_guarded_fetch_add(addr: *mut u64, add: u64, faulted: *mut u8) -> u64;
    static softverbs_guarded_copy_insn: u8;
    static softverbs_guarded_copy_resume: u8;
    static softverbs_guarded_cas_insn: u8;
    static softverbs_guarded_cas_resume: u8;
    static softverbs_guarded_fetch_add_insn: u8;
    static softverbs_guarded_fetch_add_resume: u8;
}

/// (faulting instruction, where to resume) for every guarded access.
fn fixups() -> [(usize, usize); 3] {
    // Only the addresses of the labels are taken; nothing is read.
    [
        (
            std::ptr::addr_of!(softverbs_guarded_copy_insn) as usize,
            std::ptr::addr_of!(softverbs_guarded_copy_resume) as usize,
        ),
        (
            std::ptr::addr_of!(softverbs_guarded_cas_insn) as usize,
            std::ptr::addr_of!(softverbs_guarded_cas_resume) as usize,
        ),
        (
            std::ptr::addr_of!(softverbs_guarded_fetch_add_insn) as usize,
            std::ptr::addr_of!(softverbs_guarded_fetch_add_resume) as usize,
        ),
    ]
}

/// The label table, computed once before the handler is installed so the
/// handler only reads it.
static FIXUPS: OnceLock<[(usize, usize); 3]> = OnceLock::new();

/// The handlers that were installed before ours: SIGSEGV, SIGBUS.
static PREVIOUS: OnceLock<[libc::sigaction; 2]> = OnceLock::new();

/// Installs the fault handler for SIGSEGV and SIGBUS, once per process.
/// Returns whether it is installed. The handlers in place are recorded
/// before ours replaces them, so that a fault on another thread in
/// between is chained to them, not to the default action.
pub fn install() -> bool {
    FIXUPS.get_or_init(fixups);
    let mut fresh = false;
    PREVIOUS.get_or_init(|| {
        fresh = true;
        [current_action(libc::SIGSEGV), current_action(libc::SIGBUS)]
    });
    if fresh {
        replace_handler(libc::SIGSEGV);
        replace_handler(libc::SIGBUS);
    }
    installed()
}

/// Whether our handler is still the one the kernel calls for SIGSEGV and
/// SIGBUS (a later `sigaction` by someone else displaces it).
pub fn installed() -> bool {
    let ours = on_fault as *const () as usize;
    PREVIOUS.get().is_some()
        && [libc::SIGSEGV, libc::SIGBUS]
            .iter()
            .all(|&s| current(s) == ours)
}

fn current(sig: c_int) -> usize {
    current_action(sig).sa_sigaction
}

/// The action in place for `sig`.
fn current_action(sig: c_int) -> libc::sigaction {
    // SAFETY: sigaction with a NULL new action only reads the current one
    // into `old`, a local.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old);
        old
    }
}

fn replace_handler(sig: c_int) {
    // SAFETY: installs `on_fault` (an extern "C" handler with the
    // SA_SIGINFO signature); the struct is a local, fully initialised
    // (zeroed, then set).
    unsafe {
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = on_fault as *const () as usize;
        new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut new.sa_mask);
        libc::sigaction(sig, &new, std::ptr::null_mut());
    }
}

/// The signal handler. Async-signal-safe: it reads two initialised
/// `OnceLock`s, edits the interrupted context, or calls the previous
/// handler.
extern "C" fn on_fault(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    // Only a fault the kernel raised (si_code > 0) can be one of ours; a
    // SIGSEGV sent with kill() goes on as it is.
    if unsafe { (*info).si_code } <= 0 {
        return chain(sig, info, ctx);
    }
    let fixups = FIXUPS.get().copied().unwrap_or_default();
    let uc = ctx as *mut libc::ucontext_t;
    // SAFETY: for an SA_SIGINFO handler the kernel passes the interrupted
    // thread's ucontext, valid and exclusively ours until we return; the
    // registers are plain integers in it.
    let gregs = unsafe { &mut (*uc).uc_mcontext.gregs };
    let rip = gregs[libc::REG_RIP as usize] as usize;
    if let Some(&(_, resume)) = fixups.iter().find(|(insn, _)| *insn == rip) {
        gregs[libc::REG_RIP as usize] = resume as i64;
        gregs[libc::REG_R8 as usize] = 1;
        return;
    }
    chain(sig, info, ctx);
}

/// Hands a fault that is not ours to whoever handled it before us.
fn chain(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let slot = usize::from(sig == libc::SIGBUS);
    let prev = PREVIOUS.get().map(|p| p[slot]);
    match prev {
        Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN => {
            if p.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler was installed with
                // SA_SIGINFO, so it has this signature; we pass it the
                // arguments the kernel gave us.
                let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { std::mem::transmute(p.sa_sigaction) };
                f(sig, info, ctx);
            } else {
                // SAFETY: a plain handler takes the signal number only.
                let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(p.sa_sigaction) };
                f(sig);
            }
        }
        _ => {
            // The default action: restore it. A fault returns and runs the
            // faulting instruction again, ending the process as it would
            // have without us (a core dump where enabled); a signal sent
            // by someone is raised again, to the same end.
            // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask;
            // sigaction and raise are async-signal-safe; `info` is valid.
            unsafe {
                let dfl: libc::sigaction = std::mem::zeroed();
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
                if (*info).si_code <= 0 {
                    libc::raise(sig);
                }
            }
        }
    }
}

/// A fault met by a guarded access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Faulted;

/// Copies `len` bytes from `src` to `dst`, stopping at a fault: the bytes
/// before it are copied.
///
/// # Safety
/// [`install`] returned true and [`installed`] still holds; `dst` and
/// `src` do not overlap, and whichever of them is engine memory is valid
/// for `len` bytes (only the application side may fault).
pub unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) -> Result<(), Faulted> {
    // SAFETY: per the caller's contract; a fault resumes inside the routine.
    let left = unsafe { softverbs_guarded_copy(dst, src, len) };
    if left == 0 {
        Ok(())
    } else {
        Err(Faulted)
    }
}

/// Atomic compare-and-swap on the u64 at `addr`; returns the value found.
///
/// # Safety
/// As [`copy`]; `addr` is 8-byte aligned.
pub unsafe fn compare_swap(addr: *mut u64, compare: u64, swap: u64) -> Result<u64, Faulted> {
    let mut faulted = 0u8;
    // SAFETY: per the caller's contract; `faulted` is a live local.
    let old = unsafe { softverbs_guarded_cas(addr, compare, swap, &mut faulted) };
    if faulted == 0 {
        Ok(old)
    } else {
        Err(Faulted)
    }
}

/// Atomic fetch-and-add on the u64 at `addr`; returns the value found.
///
/// # Safety
/// As [`compare_swap`].
pub unsafe fn fetch_add(addr: *mut u64, add: u64) -> Result<u64, Faulted> {
    let mut faulted = 0u8;
    // SAFETY: per the caller's contract; `faulted` is a live local.
    let old = unsafe { softverbs_guarded_fetch_add(addr, add, &mut faulted) };
    if faulted == 0 {
        Ok(old)
    } else {
        Err(Faulted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Runs the ignored test `name` alone in a fresh process of this test
    /// binary (the handler state is per process, and installing it once
    /// is for good) and returns how it ended.
    fn in_fresh_process(name: &str) -> std::process::ExitStatus {
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "--nocapture",
                "--test-threads=1",
                name,
            ])
            .status()
            .unwrap()
    }

    fn unmapped_page() -> *mut u8 {
        // SAFETY: maps a fresh page and unmaps it again; nothing refers
        // to it.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            libc::munmap(p, 4096);
            p as *mut u8
        }
    }

    extern "C" fn exit_42(_sig: c_int, _info: *mut libc::siginfo_t, _ctx: *mut c_void) {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(42) }
    }

    /// Faults a plain store into an unmapped page, as an application bug.
    fn plain_fault() {
        // SAFETY: deliberately faulting, in a process of its own, to see
        // who handles the signal.
        unsafe { std::ptr::write_volatile(unmapped_page(), 1) };
    }

    #[test]
    fn guarded_faults_are_errors_and_others_reach_the_earlier_handler() {
        let status = in_fresh_process("guarded_access::tests::child_with_an_application_handler");
        assert_eq!(
            status.code(),
            Some(42),
            "the application's handler ran: {status}"
        );
    }

    #[test]
    #[ignore = "a child process of guarded_faults_are_errors_and_others_reach_the_earlier_handler"]
    fn child_with_an_application_handler() {
        // SAFETY: installs exit_42 for SIGSEGV in this process of its own.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = exit_42 as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut());
        }
        assert!(install());
        let src = [7u8; 64];
        // SAFETY: the handler is installed; `src` is ours.
        assert_eq!(
            unsafe { copy(unmapped_page(), src.as_ptr(), 64) },
            Err(Faulted)
        );
        // SAFETY: as above, for an 8-aligned word.
        assert_eq!(
            unsafe { fetch_add(unmapped_page() as *mut u64, 1) },
            Err(Faulted)
        );
        // SAFETY: as above.
        assert_eq!(
            unsafe { compare_swap(unmapped_page() as *mut u64, 0, 1) },
            Err(Faulted)
        );
        plain_fault();
        unreachable!("the plain fault reached no handler");
    }

    #[test]
    fn other_faults_still_kill_a_process() {
        use std::os::unix::process::ExitStatusExt;
        let status = in_fresh_process("guarded_access::tests::child_without_a_handler");
        assert_eq!(status.signal(), Some(libc::SIGSEGV), "{status}");
    }

    #[test]
    #[ignore = "a child process of other_faults_still_kill_a_process"]
    fn child_without_a_handler() {
        assert!(install());
        plain_fault();
    }
}
