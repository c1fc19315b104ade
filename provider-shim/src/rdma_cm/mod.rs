//! rdma_cm for softverbs devices, in preload mode: the rdma_cm character
//! device librdmacm talks to, emulated (docs/architecture.md, "rdma_cm";
//! the ABI in docs/rdma-cm.md).
//!
//! librdmacm opens `/dev/infiniband/rdma_cm`, checks with `fstat` that it
//! is a character device, `write`s commands to it and `close`s it. These
//! four libc functions are exported with glibc's symbol versions (`open`
//! by `crate::device_view::interpose`, which asks [`open_if_channel`]
//! first), so in preload mode they come first for every library of the
//! process, as libibverbs' functions do (`preload.rs`). Each is one
//! atomic load and the real function for a descriptor that was never a
//! channel (a `write` to a number that was one also takes a share of a
//! lock, `new_channels.rs`); channels are an `open` of that path in a
//! process with softverbs devices, and the descriptors it gave.
//! Where the kernel has an rdma_cm too, the process's channels are
//! softverbs', and an id whose address is not a softverbs device's is
//! served by the kernel's through them (`kernel.rs`;
//! `SOFTVERBS_RDMA_CM=kernel` gives the process the kernel's alone), and
//! `fstat` reports the kernel file's device number, which librdmacm
//! compares with what netlink told it.
//!
//! A command runs in the process ([`service`]); its response is copied
//! to the pointer the command names, as the kernel's `copy_to_user`
//! would, with a bad pointer answered EFAULT, never a crash. GET_EVENT
//! with nothing queued blocks in `poll` on the channel until an event
//! makes it readable, or answers EAGAIN when the application made the
//! descriptor `O_NONBLOCK` (rsockets do).

mod blocking_wait;
mod duplicates;
mod fds;
mod kernel;
mod neighbour;
mod new_channels;
pub mod service;

use crate::guard::{guard, set_errno};
use crate::libc_next::enosys;
use crate::own_memory;
use blocking_wait::{cancellation_point, wait_for_ever, wait_readable};
use softverbs_cm::Reply;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

/// The device file librdmacm opens.
const DEVICE: &CStr = c"/dev/infiniband/rdma_cm";

type OpenFn = unsafe extern "C-unwind" fn(*const c_char, c_int, c_uint) -> c_int;
type WriteFn = unsafe extern "C-unwind" fn(c_int, *const c_void, usize) -> isize;
type CloseFn = unsafe extern "C-unwind" fn(c_int) -> c_int;
type FstatFn = unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int;

fn real_open() -> Option<OpenFn> {
    crate::next_fn!(c"open", OpenFn)
}
fn real_write() -> Option<WriteFn> {
    crate::next_fn!(c"write", WriteFn)
}
fn real_close() -> Option<CloseFn> {
    crate::next_fn!(c"close", CloseFn)
}
fn real_fstat() -> Option<FstatFn> {
    crate::next_fn!(c"fstat", FstatFn)
}

/// Whether `fd` is a channel: marked as one (one atomic load for any
/// other descriptor), and still that channel's file. A channel closed
/// without close(2) (`dup2` over it, `close_range`) keeps its mark until
/// then: it is closed now, and the number is the other file's again
/// (`Service::still_channel`, which looks again under its lock). No lock
/// is taken for a channel that is still one.
fn is_channel_now(fd: c_int) -> bool {
    if !fds::is_channel(fd) {
        return false;
    }
    if file_of(fd).is_some_and(|f| fds::file(fd) == Some(f)) {
        return true;
    }
    service::existing().is_some_and(|s| s.still_channel(fd))
}

/// The device and inode of the file `fd` names.
fn file_of(fd: c_int) -> Option<(u64, u64)> {
    let st = real_file_stat(fd)?;
    Some((st.st_dev, st.st_ino))
}

/// `fstat` of the file itself, past this library's stand-in.
fn real_file_stat(fd: c_int) -> Option<libc::stat> {
    let real = real_fstat()?;
    // SAFETY: a zeroed `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: glibc's fstat writes one `stat` we own.
    (unsafe { real(fd, &mut st) } == 0).then_some(st)
}

/// Looks the real functions up now, at load time, so a `write` from a
/// signal handler never runs the dynamic linker.
pub fn resolve() {
    let _ = (real_open(), real_write(), real_close(), real_fstat());
    duplicates::resolve();
}

/// Plugin mode: libibverbs loaded this library with its own scope, so the
/// four functions above come first for nobody. librdmacm, already loaded
/// when it asks libibverbs for devices (its init does so before it opens
/// the device file), calls them through its GOT: those four slots are
/// pointed at ours (`got.rs`, as `ioctl.rs` does for libibverbs). A
/// librdmacm loaded later is not reached (docs/supported.md).
pub fn install_in_librdmacm() -> Result<(), String> {
    let Some(path) = crate::got::loaded("librdmacm.so") else {
        return Ok(()); // no rdma_cm user in this process (yet)
    };
    // The private functions: within this library a reference to an
    // exported one goes through its own GOT, which in this mode holds
    // libc's.
    let ours: [(&[u8], usize); 4] = [
        (b"open", cm_open as OpenFn as usize),
        (b"write", cm_write as WriteFn as usize),
        (b"close", cm_close as CloseFn as usize),
        (b"fstat", cm_fstat as FstatFn as usize),
    ];
    for (symbol, function) in ours {
        let slot = crate::got::find_slot(&path, symbol)?;
        // SAFETY: each function has the C type of the libc function of
        // that name.
        unsafe { slot.replace(function) }?;
    }
    Ok(())
}

/// `open(2)` of the rdma_cm device in a process whose rdma_cm is ours:
/// Some(a new channel, or -1 with errno set); None for any other open.
/// (The exported `open` is `crate::device_view::interpose::open`.)
///
/// # Safety
/// `path` is NULL or a NUL-terminated string (libc's contract for open).
pub unsafe fn open_if_channel(path: *const c_char, flags: c_int) -> Option<c_int> {
    // SAFETY: per the contract (checked non-NULL).
    let ours = !path.is_null() && unsafe { CStr::from_ptr(path) } == DEVICE && emulated();
    ours.then(|| guard(-1, || open_channel(flags)))
}

fn open_channel(flags: c_int) -> c_int {
    match service::get() {
        Ok(s) => match s.open_channel(flags & libc::O_NONBLOCK != 0) {
            Ok(fd) => {
                s.run_in_background();
                fd
            }
            Err(e) => {
                set_errno(e.raw_os_error().unwrap_or(libc::EIO));
                -1
            }
        },
        Err(why) => {
            softverbs_transport::say!("softverbs: {why}");
            set_errno(libc::ENOENT);
            -1
        }
    }
}

/// `open` for librdmacm in plugin mode (its GOT slot).
///
/// # Safety
/// libc's contract: `path` is a NUL-terminated string.
unsafe extern "C-unwind" fn cm_open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's path, under open's contract.
    if let Some(result) = unsafe { open_if_channel(path, flags) } {
        return result;
    }
    let Some(real) = real_open() else {
        return enosys(-1);
    };
    // SAFETY: the caller's path and flags, as it gave them.
    unsafe { real(path, flags, mode) }
}

/// Whether this process's rdma_cm is softverbs': it has softverbs devices
/// (pass-through devices are the kernel's) and was not told to use the
/// kernel's. Where the kernel has an rdma_cm too, ids that are not
/// softverbs' go to it from there (`kernel.rs`).
fn emulated() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let kernel = std::env::var("SOFTVERBS_RDMA_CM").is_ok_and(|v| v == "kernel");
        !kernel && crate::device::all().any(|d| crate::device::soft(d).is_some())
    })
}

/// The device number a channel reports: the kernel rdma_cm file's, if
/// there is one (librdmacm checks it against netlink's answer), else the
/// misc device the kernel would give it.
fn device_number() -> libc::dev_t {
    std::fs::metadata(DEVICE.to_str().unwrap_or_default())
        .map(|m| std::os::unix::fs::MetadataExt::rdev(&m))
        .unwrap_or_else(|_| libc::makedev(10, 58))
}

/// `fstat(2)`: a channel is a character device, as the kernel's file is.
///
/// # Safety
/// libc's contract: `buf` points to a `struct stat` the caller owns.
#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    // SAFETY: the caller's arguments, under the same contract.
    unsafe { cm_fstat(fd, buf) }
}

/// [`fstat`] itself, at an address of this library's own.
///
/// # Safety
/// As [`fstat`].
unsafe extern "C" fn cm_fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    if !is_channel_now(fd) {
        let Some(real) = real_fstat() else {
            return enosys(-1);
        };
        // SAFETY: the caller's arguments, as it gave them.
        return unsafe { real(fd, buf) };
    }
    // SAFETY: a zeroed `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    st.st_mode = libc::S_IFCHR | 0o666;
    st.st_rdev = device_number();
    st.st_nlink = 1;
    st.st_blksize = 4096;
    // SAFETY: `st` is a plain C struct of integers, every one of them
    // initialised (zeroed, then set); it has no implicit padding to read
    // (the libc crate declares Linux's padding as fields, `__pad0` and
    // `__unused`, zeroed with the rest); it lives, unaliased, for the
    // borrow.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (&raw const st).cast::<u8>(),
            std::mem::size_of::<libc::stat>(),
        )
    };
    // Copied as the kernel's `cp_new_stat` copies: a buffer that is not
    // writable memory is EFAULT, not a crash (a direct store was).
    match guard(Err(libc::EFAULT), || write_caller(buf as u64, bytes)) {
        Ok(()) => 0,
        Err(errno) => {
            set_errno(errno);
            -1
        }
    }
}

/// `close(2)`: a channel's ids go first, as when the kernel releases the
/// file.
///
/// # Safety
/// libc's contract.
#[no_mangle]
pub unsafe extern "C-unwind" fn close(fd: c_int) -> c_int {
    // SAFETY: the caller's arguments, under the same contract.
    unsafe { cm_close(fd) }
}

/// [`close`] itself, at an address of this library's own.
///
/// # Safety
/// As [`close`].
unsafe extern "C-unwind" fn cm_close(fd: c_int) -> c_int {
    let Some(real) = real_close() else {
        return enosys(-1);
    };
    let closing = is_channel_now(fd).then(|| fds::file(fd));
    if let Some(file) = closing {
        guard((), || {
            if let Some(s) = service::existing() {
                s.close_channel(fd, file);
            }
        });
    }
    // SAFETY: the caller's descriptor, as it gave it.
    let closed = unsafe { real(fd) };
    if let Some(file) = closing {
        let errno = std::io::Error::last_os_error().raw_os_error();
        // Only now: a write racing the close was a command on a closed
        // channel (EBADF), not a write into its socket pair (SIGPIPE).
        guard((), || {
            if let Some(s) = service::existing() {
                s.unmark(fd, file);
            }
        });
        if let (true, Some(errno)) = (closed != 0, errno) {
            set_errno(errno); // close's, whatever the lock did
        }
    }
    closed
}

/// `write(2)`: on a channel, one rdma_cm command. "C-unwind": a thread
/// cancelled while a GET_EVENT waits leaves through here, as it leaves
/// the kernel's `write` (`blocking_wait`).
///
/// # Safety
/// libc's contract: `buf` holds `count` readable bytes.
#[no_mangle]
pub unsafe extern "C-unwind" fn write(fd: c_int, buf: *const c_void, count: usize) -> isize {
    // SAFETY: the caller's arguments, under the same contract.
    unsafe { cm_write(fd, buf, count) }
}

/// [`write`] itself, at an address of this library's own. Between the
/// command's attempts, while it waits, its frame holds only plain values,
/// so a cancellation may unwind it.
///
/// # Safety
/// As [`write`].
unsafe extern "C-unwind" fn cm_write(fd: c_int, buf: *const c_void, count: usize) -> isize {
    let Some(real) = real_write() else {
        return enosys(-1);
    };
    if !fds::ever_channel(fd) {
        // SAFETY: the caller's arguments, as it gave them.
        return unsafe { real(fd, buf, count) };
    }
    // From the look at the number to the write, or to reading the
    // channel's file and flags (`new_channels`).
    let share = new_channels::no_new_channel(fd);
    if !is_channel_now(fd) {
        // SAFETY: the caller's arguments, as it gave them.
        let written = unsafe { real(fd, buf, count) };
        new_channels::new_channels_again(share);
        return written;
    }
    let file = fds::file(fd);
    let nonblocking_then = nonblocking(fd);
    new_channels::new_channels_again(share);
    let Some(nonblocking_then) = nonblocking_then else {
        // Closed since the look at it: as a write after the close.
        set_errno(libc::EBADF);
        return -1;
    };
    cancellation_point();
    loop {
        let attempt = guard(Attempt::Done(Err(libc::EIO)), || {
            command(fd, buf, count, (file, nonblocking_then))
        });
        let result = match attempt {
            Attempt::Done(result) => result,
            Attempt::Wait => match wait_readable(fd) {
                Ok(()) => continue,
                // A number closed and reused meanwhile fails the wait in
                // other ways; the command never returns then.
                Err(_) if closed_under(fd, file) => wait_for_ever(),
                Err(errno) => Err(errno),
            },
            // The kernel's file lives until the command returns: a
            // blocking GET_EVENT waits for ever (the ids, and so their
            // events, went with our channel), a non-blocking one returns
            // at once. Any other command would run on that file; ours
            // is gone, so it fails as a write just after the close would
            // (before, it waited for ever too: a thread creating ids
            // while another closed the channel hung).
            Attempt::Forever => match guard(false, || is_get_event(buf, count)) {
                true if nonblocking_then => Err(libc::EAGAIN),
                true => wait_for_ever(),
                false => Err(libc::EBADF),
            },
        };
        return match result {
            Ok(()) => count as isize,
            Err(errno) => {
                set_errno(errno);
                -1
            }
        };
    }
}

/// What one attempt at a command came to.
enum Attempt {
    Done(Result<(), i32>),
    /// A GET_EVENT on a blocking channel with none queued: to be tried
    /// again once the channel is readable.
    Wait,
    /// The channel was closed under the command: a blocking GET_EVENT
    /// never returns then.
    Forever,
}

/// Runs the command in `buf` on channel `fd`, which was `file` when the
/// command began, up to where it would wait.
/// `began`: the channel's file and whether it was non-blocking when the
/// command began.
fn command(
    fd: c_int,
    buf: *const c_void,
    count: usize,
    began: (Option<(u64, u64)>, bool),
) -> Attempt {
    let (file, nonblocking_then) = began;
    // Closed while the command waited (the number may name another
    // channel by now, whose events are not this command's).
    if closed_under(fd, file) {
        return Attempt::Forever;
    }
    let service = match service::get() {
        Ok(service) => service,
        Err(_) => return Attempt::Done(Err(libc::EBADF)),
    };
    let prepared = read_command(buf as u64, count).and_then(|original| {
        let event_out = check_event_buffer(&original)?;
        check_migration_source(&original)?;
        let mut bytes = original.clone();
        copy_option_value(&mut bytes)?;
        let to_kernel = service.kernel_command(fd, &original, &bytes)?;
        Ok((bytes, event_out, to_kernel))
    });
    let (bytes, event_out) = match prepared {
        Ok((_, _, true)) => return Attempt::Done(Ok(())),
        Ok((bytes, event_out, false)) => (bytes, event_out),
        Err(errno) => return Attempt::Done(Err(errno)),
    };
    if let Some((addr, out)) = event_out {
        match service.kernel_event(fd) {
            Ok(Some(event)) => {
                return Attempt::Done(write_caller(addr, &event[..out.min(event.len())]))
            }
            Ok(None) => {}
            Err(errno) => return Attempt::Done(Err(errno)),
        }
    }
    match service.command(fd, &bytes) {
        Ok(Some(Reply::Respond {
            addr,
            bytes: answer,
        })) => {
            let written = write_caller(addr, &answer);
            if written.is_err() {
                undo_unanswered(&service, fd, &bytes, &answer);
            }
            Attempt::Done(written)
        }
        Ok(Some(_)) => Attempt::Done(Ok(())),
        Ok(None) if closed_under(fd, file) => Attempt::Forever,
        // A descriptor closed just now has no flags to read: the file's
        // are as they were (the kernel's call holds the file).
        Ok(None) if nonblocking(fd).unwrap_or(nonblocking_then) => Attempt::Done(Err(libc::EAGAIN)),
        Ok(None) => Attempt::Wait,
        // The agent knows no channel `fd`, which was one when the command
        // began: closed under the command, even if the close is still on
        // its way to the number's unmarking (a blocking GET_EVENT woken
        // then failed EBADF: rping's client, once in CI). Not so for a
        // channel this process's service never had (a forked child's
        // inherited one): EBADF. In this order: a close is `closing` from
        // before the agent forgets the channel until the number's
        // unmarking, and closed under the command from then on.
        Err(libc::EBADF) if service.closing(fd) || closed_under(fd, file) => Attempt::Forever,
        Err(errno) => Attempt::Done(Err(errno)),
    }
}

/// A CREATE_ID or JOIN whose answer could not be written (EFAULT) is
/// undone, as the kernel's ucma undoes them when its copy to the caller
/// fails: the id made is destroyed, the group joined left (before, each
/// stayed, unknown to the caller, for as long as the channel).
fn undo_unanswered(service: &service::Service, fd: c_int, command: &[u8], answer: &[u8]) {
    use softverbs_cm::abi::{cmd, HEADER_LEN};
    let word = |b: &[u8]| {
        b.get(..4)
            .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
    };
    let undo = match word(command) {
        Some(cmd::CREATE_ID) => cmd::DESTROY_ID,
        Some(cmd::JOIN_IP_MCAST | cmd::JOIN_MCAST) => cmd::LEAVE_MCAST,
        _ => return,
    };
    let Some(handle) = word(answer) else {
        return;
    };
    // `struct rdma_ucm_destroy_id` (LEAVE_MCAST's too): its response
    // (the events reported), which nobody reads, then the handle.
    let mut undoing = [0u8; HEADER_LEN + 16];
    undoing[..4].copy_from_slice(&undo.to_ne_bytes());
    undoing[4..6].copy_from_slice(&16u16.to_ne_bytes());
    undoing[6..8].copy_from_slice(&4u16.to_ne_bytes());
    undoing[16..20].copy_from_slice(&handle.to_ne_bytes());
    let _ = service.command(fd, &undoing);
}

/// Whether channel `fd`, which was `file` when this command began, has
/// been closed since by another thread. A blocking GET_EVENT then never
/// returns, as the kernel's: the call holds the file, whose events went
/// with its ids (rping's CM thread, woken by an event as its main thread
/// closes the channel, must not see EBADF and exit non-zero); any other
/// command fails EBADF (`cm_write`).
fn closed_under(fd: c_int, file: Option<(u64, u64)>) -> bool {
    !fds::is_channel(fd) || fds::file(fd) != file
}

/// Whether `fd` is non-blocking; `None` if it is not open.
fn nonblocking(fd: c_int) -> Option<bool> {
    // SAFETY: F_GETFL on the caller's descriptor reads its flags only.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    (fl >= 0).then_some(fl & libc::O_NONBLOCK != 0)
}

/// Whether the command in the caller's `buf` is a GET_EVENT.
fn is_get_event(buf: *const c_void, count: usize) -> bool {
    let get_event = softverbs_cm::abi::cmd::GET_EVENT.to_ne_bytes();
    count >= get_event.len()
        && read_caller(buf as u64, get_event.len()).is_ok_and(|w| w == get_event)
}

/// GET_EVENT hands an event out only if it can be written: a response
/// buffer shorter than an event's least is ENOSPC, and one that is long
/// enough is written (with zeros) first, and a bad one is EFAULT before
/// any event leaves the queue, as the kernel keeps the event then. For a
/// GET_EVENT, where its response goes and how long it is.
fn check_event_buffer(cmd: &[u8]) -> Result<Option<(u64, usize)>, i32> {
    let word = |at: usize, n: usize| cmd.get(at..at + n);
    let is_get_event =
        word(0, 4).is_some_and(|w| w == softverbs_cm::abi::cmd::GET_EVENT.to_ne_bytes());
    let (Some(out), Some(addr)) = (word(6, 2), word(8, 8)) else {
        return Ok(None);
    };
    if !is_get_event {
        return Ok(None);
    }
    let out = usize::from(u16::from_ne_bytes([out[0], out[1]]));
    if out < softverbs_cm::abi::EVENT_MIN_LEN {
        // The kernel's first check, before it writes anything.
        return Err(libc::ENOSPC);
    }
    let out = out.min(softverbs_cm::abi::EVENT_LEN);
    let addr = u64::from_ne_bytes(addr.try_into().unwrap_or_default());
    write_caller(addr, &vec![0; out])?;
    Ok(Some((addr, out)))
}

/// MIGRATE_ID from a descriptor that is not open is ENOENT, as the
/// kernel's `fdget` finding no file; the agent knows only channels, and
/// answers any other descriptor EINVAL, as the kernel answers a file
/// that is not rdma_cm's.
fn check_migration_source(cmd: &[u8]) -> Result<(), i32> {
    let word = |at: usize| {
        cmd.get(at..at + 4)
            .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
    };
    if word(0) != Some(softverbs_cm::abi::cmd::MIGRATE_ID) {
        return Ok(());
    }
    let Some(from) = word(20) else {
        return Ok(()); // too short: the agent's EINVAL
    };
    // SAFETY: F_GETFD reads a descriptor's flags only; any number may be
    // asked about.
    let open = unsafe { libc::fcntl(from as c_int, libc::F_GETFD) } >= 0;
    if open {
        Ok(())
    } else {
        Err(libc::ENOENT)
    }
}

/// SET_OPTION points at its value: it is copied in after the command (the
/// agent reads it there, `softverbs_cm::abi::Command::data`), as the
/// kernel copies it from the caller. A value that cannot be read is left
/// out, and the agent answers EFAULT once it has checked the id, as the
/// kernel does; a command shorter than it says is the agent's EINVAL.
fn copy_option_value(cmd: &mut Vec<u8>) -> Result<(), i32> {
    use softverbs_cm::abi::{cmd::SET_OPTION, HEADER_LEN};
    /// The largest value an option has (an array of path records).
    const MAX_VALUE: usize = 4096;
    let word = |at: usize| {
        cmd.get(at..at + 4)
            .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
    };
    if word(0) != Some(SET_OPTION) || cmd.len() < HEADER_LEN + 24 {
        return Ok(());
    }
    let end = HEADER_LEN + usize::from(u16::from_ne_bytes([cmd[4], cmd[5]]));
    if cmd.len() < end {
        return Ok(());
    }
    let optval = u64::from_ne_bytes(cmd[8..16].try_into().unwrap_or_default());
    let optlen = word(28).unwrap_or(0) as usize;
    if optlen > MAX_VALUE {
        return Err(libc::EINVAL);
    }
    cmd.truncate(end);
    if let Ok(value) = read_caller(optval, optlen) {
        cmd.extend_from_slice(&value);
    }
    Ok(())
}

/// The command the caller wrote at `addr`, `count` bytes: its header,
/// then the `in` bytes the header announces (no more than `count`), as
/// the kernel's ucma reads them. What lies beyond is not read: a command
/// at the end of a mapping, written with a larger `count`, works (before,
/// up to 1,024 bytes were read, EFAULT there, and an `in` above 1,016 was
/// refused). Shorter than a header: EINVAL, before anything is read.
fn read_command(addr: u64, count: usize) -> Result<Vec<u8>, i32> {
    use softverbs_cm::abi::HEADER_LEN;
    if count < HEADER_LEN {
        return Err(libc::EINVAL);
    }
    let header = read_caller(addr, HEADER_LEN)?;
    let announced = usize::from(u16::from_ne_bytes([header[4], header[5]]));
    read_caller(addr, count.min(HEADER_LEN + announced))
}

/// Copies `len` bytes of the caller's memory at `addr`: EFAULT where it
/// is not readable, as the kernel's `copy_from_user`.
fn read_caller(addr: u64, len: usize) -> Result<Vec<u8>, i32> {
    own_memory::read(addr, len).map_err(|_| libc::EFAULT)
}

/// Copies `bytes` to the caller's memory at `addr`: EFAULT where it is not
/// writable, as the kernel's `copy_to_user`.
fn write_caller(addr: u64, bytes: &[u8]) -> Result<(), i32> {
    own_memory::write(addr, bytes).map_err(|_| libc::EFAULT)
}
