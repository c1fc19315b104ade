//! [`CrossProcess`] for the same-host path: other processes' memory through
//! cross-memory attach, and shared regions through memfd mappings.
//!
//! A requester whose peer QP lives in another process on this host moves
//! the payload itself, with one kernel copy: `process_vm_writev` for a
//! WRITE or SEND, `process_vm_readv` for a READ (docs/architecture.md,
//! "Same host: the side that runs does the work"). The kernel checks
//! every address against the right page tables and returns EFAULT where a
//! plain copy would crash, so an unmapped buffer on either side becomes an
//! error completion; which side faulted decides which error
//! ([`PeerFault::Local`] or [`PeerFault::Remote`]).
//!
//! Memory is named by address only ([`Seg`]): no Rust reference to
//! application memory, ours or the peer's, is ever formed.
//!
//! Regions are memfds sealed against shrinking, mapped shared and seen as
//! [`AtomicU64`] words ([`MappedWords`]): a peer can neither make our
//! mapping fault (SIGBUS past the end of a shrunk file) nor race us
//! non-atomically.

use softverbs_transport::same_host::{CrossProcess, PeerFault, Seg, Words};
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// The most iovecs the kernel takes on either side of one call
/// (`UIO_MAXIOV`; more is EINVAL).
const IOV_MAX: usize = 1024;

/// The most bytes asked of one call: the kernel stops a call at about
/// 2 GiB (`MAX_RW_COUNT`); asking less keeps every count in range.
const MAX_CALL_BYTES: u64 = 1 << 30;

/// One side's iovecs of a call, the common few in place.
type Iovecs = smallvec::SmallVec<[libc::iovec; 4]>;

/// A peer address no process maps (below `mmap_min_addr`): the permission
/// probe reads it.
const NEVER_MAPPED: u64 = 0;

/// Cross-memory attach and shared regions, over the kernel's system calls.
/// It holds nothing (not even our pid, which a fork changes).
#[derive(Debug, Clone, Copy)]
pub struct CrossProcessAccess;

impl CrossProcessAccess {
    /// Access from this process.
    pub fn new() -> CrossProcessAccess {
        CrossProcessAccess
    }
}

impl Default for CrossProcessAccess {
    fn default() -> Self {
        CrossProcessAccess::new()
    }
}

/// Whether we may reach process `pid`'s memory. A call with no iovec is
/// no probe (the kernel returns 0 before it looks the process up, checked
/// on Linux 6.18), so this reads one byte at an address no process maps:
/// EFAULT means the kernel let us in and found nothing there; ESRCH and
/// EPERM are the answers we look for.
pub fn cross_memory_allowed(pid: i32) -> Result<(), PeerFault> {
    let mut scratch = [0u8; 1];
    let local = [iovec(scratch.as_mut_ptr() as u64, 1)];
    let remote = [iovec(NEVER_MAPPED, 1)];
    match vm_call(pid, &local, &remote, Direction::Read) {
        // A process that mapped page 0 anyway (CAP_SYS_RAWIO) let us read.
        Ok(_) => Ok(()),
        Err(libc::EFAULT) => Ok(()),
        Err(errno) => Err(fault_of(errno)),
    }
}

/// Which way bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// From our memory to the peer's (`process_vm_writev`).
    Write,
    /// From the peer's memory to ours (`process_vm_readv`).
    Read,
}

impl CrossProcess for CrossProcessAccess {
    fn write_peer(&self, pid: i32, local: &[Seg], remote: &[Seg]) -> Result<(), PeerFault> {
        self.transfer(pid, local, remote, Direction::Write)
    }

    fn write_peer_bytes(&self, pid: i32, data: &[u8], remote: &[Seg]) -> Result<(), PeerFault> {
        let local = [Seg {
            addr: data.as_ptr() as u64,
            len: data.len() as u64,
        }];
        // `data` is readable: a fault is the peer's.
        self.transfer(pid, &local, remote, Direction::Write)
    }

    fn read_peer(&self, pid: i32, remote: &[Seg], local: &[Seg]) -> Result<(), PeerFault> {
        self.transfer(pid, local, remote, Direction::Read)
    }

    fn read_peer_bytes(&self, pid: i32, remote: &[Seg], out: &mut [u8]) -> Result<(), PeerFault> {
        let local = [Seg {
            addr: out.as_mut_ptr() as u64,
            len: out.len() as u64,
        }];
        // `out` is writable and ours alone while we hold it mutably: a
        // fault is the peer's, and the kernel's write into it races with
        // nothing.
        self.transfer(pid, &local, remote, Direction::Read)
    }

    fn probe(&self, pid: i32) -> Result<(), PeerFault> {
        cross_memory_allowed(pid)
    }

    fn create_region(&self, bytes: usize) -> io::Result<(OwnedFd, Arc<dyn Words>)> {
        check_region_len(bytes)?;
        let fd = memfd_create()?;
        // SAFETY: ftruncate and fcntl act on the descriptor we own; they
        // touch no memory of ours.
        let sized = unsafe { libc::ftruncate(fd.as_raw_fd(), bytes as libc::off_t) };
        if sized != 0 {
            return Err(io::Error::last_os_error());
        }
        // Sealed at this size for good: a peer that maps it can never meet
        // a shorter file (SIGBUS), and nobody can change that later.
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let words = MappedWords::map(&fd, bytes)?;
        Ok((fd, Arc::new(words)))
    }

    fn map_region(&self, fd: &OwnedFd, bytes: usize) -> io::Result<Arc<dyn Words>> {
        check_region_len(bytes)?;
        check_cannot_shrink_below(fd, bytes)?;
        Ok(Arc::new(MappedWords::map(fd, bytes)?))
    }

    fn own_pid(&self) -> i32 {
        crate::own_memory::own_pid()
    }
}

impl CrossProcessAccess {
    /// Copies between our `local` segments and the peer's `remote` ones
    /// (equal total lengths; of unequal ones, the shorter), in calls of at
    /// most [`IOV_MAX`] iovecs a side, continuing where a call stopped.
    fn transfer(
        &self,
        pid: i32,
        local: &[Seg],
        remote: &[Seg],
        dir: Direction,
    ) -> Result<(), PeerFault> {
        let total = total_len(local).min(total_len(remote));
        debug_assert_eq!(total_len(local), total_len(remote), "unequal lengths");
        let (mut l, mut r) = (Cursor::new(local), Cursor::new(remote));
        // The common few in place: a copy allocates nothing.
        let mut liov = Iovecs::new();
        let mut riov = Iovecs::new();
        let mut done = 0;
        while done < total {
            let want = (total - done).min(MAX_CALL_BYTES);
            let chunk = l.reach(want).min(r.reach(want));
            l.iovecs(chunk, &mut liov);
            r.iovecs(chunk, &mut riov);
            let copied = match vm_call(pid, &liov, &riov, dir) {
                Ok(n) if n > 0 => n,
                Ok(_) | Err(libc::EFAULT) => self.step_over_fault(pid, &l, &r, dir)?,
                Err(errno) => return Err(fault_of(errno)),
            };
            l.advance(copied);
            r.advance(copied);
            done += copied;
        }
        Ok(())
    }

    /// A call made no progress at the cursors: copies the one byte there
    /// if it can (the kernel may stop a little before a fault, so the
    /// fault can be further on), else says whose memory faulted.
    fn step_over_fault(
        &self,
        pid: i32,
        l: &Cursor<'_>,
        r: &Cursor<'_>,
        dir: Direction,
    ) -> Result<u64, PeerFault> {
        let (local, remote) = ([iovec(l.addr(), 1)], [iovec(r.addr(), 1)]);
        match vm_call(pid, &local, &remote, dir) {
            Ok(1) => Ok(1),
            Ok(_) | Err(libc::EFAULT) => Err(self.blame(pid, l.addr(), r.addr(), dir)),
            Err(errno) => Err(fault_of(errno)),
        }
    }

    /// Whose byte failed a one-byte copy, found by reading the source
    /// byte alone into a scratch byte of ours (a read changes nothing on
    /// either side): a readable source means the destination faulted.
    /// Writing, the source is ours (probed through our own id); reading, it is
    /// the peer's. Where both sides are bad, the source is blamed.
    fn blame(&self, pid: i32, local: u64, remote: u64, dir: Direction) -> PeerFault {
        let (source_pid, source, source_side, dest_side) = match dir {
            Direction::Write => (own_id(), local, PeerFault::Local, PeerFault::Remote),
            Direction::Read => (pid, remote, PeerFault::Remote, PeerFault::Local),
        };
        let mut scratch = [0u8; 1];
        let into = [iovec(scratch.as_mut_ptr() as u64, 1)];
        match vm_call(source_pid, &into, &[iovec(source, 1)], Direction::Read) {
            Ok(1) => dest_side,
            Ok(_) | Err(libc::EFAULT) => source_side,
            Err(errno) => fault_of(errno),
        }
    }
}

/// The id our own memory is reached through: the calling thread's
/// (own_memory.rs says why).
fn own_id() -> i32 {
    crate::own_memory::own_tid()
}

/// What a failed call's errno means, EFAULT aside (its side is found by
/// probing). A seccomp policy may refuse with ENOSYS instead of EPERM.
fn fault_of(errno: i32) -> PeerFault {
    match errno {
        libc::ESRCH => PeerFault::Gone,
        libc::EPERM | libc::EACCES | libc::ENOSYS => PeerFault::Denied,
        _ => PeerFault::Remote,
    }
}

/// One `process_vm_readv` or `process_vm_writev` into process `pid`: the
/// bytes copied, or the errno. A process whose main thread has ended
/// (`pthread_exit`) while others work on answers ESRCH to its pid, which
/// names that zombie thread with no memory: the call is made again on
/// its other threads, each of which names the same memory, until one
/// answers (one that ended since the listing answers ESRCH too; its id
/// reused by another process in those microseconds would need the whole
/// pid space to wrap).
fn vm_call(
    pid: i32,
    local: &[libc::iovec],
    remote: &[libc::iovec],
    dir: Direction,
) -> Result<u64, i32> {
    match vm_call_on(pid, local, remote, dir) {
        Err(libc::ESRCH) => (0..THREAD_LISTINGS)
            .find_map(|_| {
                let tids = other_threads_of(pid);
                if tids.is_empty() {
                    return Some(Err(libc::ESRCH));
                }
                tids.into_iter()
                    .map(|tid| vm_call_on(tid, local, remote, dir))
                    .find(|done| *done != Err(libc::ESRCH))
            })
            .unwrap_or(Err(libc::ESRCH)),
        done => done,
    }
}

/// How often the threads of a process whose main thread ended are listed
/// while every listed one has ended: the kernel's listing of
/// `/proc/PID/task` stops early, or skips threads, when one ends while it
/// is read, so a running thread may have been left out.
const THREAD_LISTINGS: usize = 3;

/// The threads of process `pid` other than its main one, from
/// `/proc/PID/task` (none: the process is gone, or its main thread is
/// all it has). Not always all of them: a thread that ends during the
/// reading may hide others ([`THREAD_LISTINGS`]).
fn other_threads_of(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&tid| tid != pid)
        .collect()
}

/// [`vm_call`] on exactly the task `id` names (a process's or a
/// thread's id).
fn vm_call_on(
    id: i32,
    local: &[libc::iovec],
    remote: &[libc::iovec],
    dir: Direction,
) -> Result<u64, i32> {
    let (lp, ln) = (local.as_ptr(), local.len() as libc::c_ulong);
    let (rp, rn) = (remote.as_ptr(), remote.len() as libc::c_ulong);
    let n = match dir {
        // SAFETY: the kernel reads the iovec arrays (live slices) and the
        // local ranges they name, and writes the peer's ranges; an
        // unmapped or unwritable page on either side is EFAULT, never a
        // fault of ours. The local ranges are application memory named by
        // address (the trait's contract, as for `HostMemory`) or a slice
        // we hold borrowed: the kernel only reads them.
        Direction::Write => unsafe { libc::process_vm_writev(id, lp, ln, rp, rn, 0) },
        // SAFETY: the kernel writes our local ranges: application memory
        // named by address, which no Rust reference covers (the trait's
        // contract: registered memory; an application thread touching it
        // meanwhile races as it would with a NIC's DMA), or a scratch
        // buffer we hold the only borrow of. A range that is unmapped or
        // read-only is EFAULT, not a fault.
        Direction::Read => unsafe { libc::process_vm_readv(id, lp, ln, rp, rn, 0) },
    };
    if n < 0 {
        Err(errno())
    } else {
        Ok(n as u64)
    }
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn iovec(addr: u64, len: u64) -> libc::iovec {
    libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: len as usize,
    }
}

fn total_len(segs: &[Seg]) -> u64 {
    segs.iter().map(|s| s.len).sum()
}

/// A position in a list of segments, never on an empty one (or at the
/// end).
#[derive(Debug)]
struct Cursor<'a> {
    segs: &'a [Seg],
    index: usize,
    offset: u64,
}

impl<'a> Cursor<'a> {
    fn new(segs: &'a [Seg]) -> Cursor<'a> {
        let mut c = Cursor {
            segs,
            index: 0,
            offset: 0,
        };
        c.skip_empty();
        c
    }

    /// The nonempty segments from here, the first one from the cursor on.
    fn pieces(&self) -> impl Iterator<Item = Seg> + 'a {
        let offset = self.offset;
        self.segs[self.index..]
            .iter()
            .enumerate()
            .map(move |(i, s)| {
                let skip = if i == 0 { offset } else { 0 };
                Seg {
                    addr: s.addr.wrapping_add(skip),
                    len: s.len - skip,
                }
            })
            .filter(|s| s.len > 0)
    }

    /// How many of the next `limit` bytes [`IOV_MAX`] iovecs cover.
    fn reach(&self, limit: u64) -> u64 {
        let covered: u64 = self.pieces().take(IOV_MAX).map(|s| s.len).sum();
        covered.min(limit)
    }

    /// Fills `out` with the iovecs of the next `bytes` bytes (at most
    /// [`Cursor::reach`]).
    fn iovecs(&self, bytes: u64, out: &mut Iovecs) {
        out.clear();
        let mut left = bytes;
        for piece in self.pieces() {
            if left == 0 {
                break;
            }
            let len = piece.len.min(left);
            out.push(iovec(piece.addr, len));
            left -= len;
        }
    }

    fn advance(&mut self, mut bytes: u64) {
        while bytes > 0 && self.index < self.segs.len() {
            let step = (self.segs[self.index].len - self.offset).min(bytes);
            self.offset += step;
            bytes -= step;
            self.skip_empty();
        }
    }

    /// Moves past the end of the current segment and any empty ones.
    fn skip_empty(&mut self) {
        while self.index < self.segs.len() && self.offset == self.segs[self.index].len {
            self.index += 1;
            self.offset = 0;
        }
    }

    /// The address of the byte here.
    fn addr(&self) -> u64 {
        self.segs
            .get(self.index)
            .map_or(0, |s| s.addr.wrapping_add(self.offset))
    }
}

/// Regions are whole words, at least one.
fn check_region_len(bytes: usize) -> io::Result<()> {
    if bytes == 0 || !bytes.is_multiple_of(8) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a region of {bytes} bytes is not a whole number of words"),
        ));
    }
    Ok(())
}

/// A new memfd that can be sealed.
fn memfd_create() -> io::Result<OwnedFd> {
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: the name is a NUL-terminated string the kernel only reads.
    let fd = unsafe { libc::memfd_create(c"softverbs-region".as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create just returned this descriptor; nobody else owns
    // it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Refuses a peer's region file that is shorter than `bytes`, or could
/// become shorter (not sealed against shrinking): touching a mapped page
/// past the end of its file is SIGBUS, which would kill us, not the peer.
fn check_cannot_shrink_below(fd: &OwnedFd, bytes: usize) -> io::Result<()> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat fills the stat buffer we own; read only on success.
    if unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded, so it initialized `st`.
    let st = unsafe { st.assume_init() };
    let refuse = |why: String| Err(io::Error::new(io::ErrorKind::InvalidData, why));
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || (st.st_size as u64) < bytes as u64 {
        return refuse(format!(
            "a peer's region is {} bytes, not the {bytes} it announced",
            st.st_size
        ));
    }
    // SAFETY: F_GET_SEALS reads the descriptor's seals; no memory involved.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        return refuse("a peer's region is not sealed against shrinking".into());
    }
    Ok(())
}

/// A shared mapping of a region, seen as atomic words; unmapped on drop.
pub struct MappedWords {
    base: NonNull<AtomicU64>,
    /// Length in words (the mapping is this many bytes times 8, rounded
    /// up to pages by the kernel).
    len: usize,
}

impl MappedWords {
    /// Maps `bytes` bytes (a whole number of words) of `fd` from offset 0,
    /// shared, read and write. The caller made sure the file is at least
    /// that long and stays so.
    fn map(fd: &OwnedFd, bytes: usize) -> io::Result<MappedWords> {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: a new mapping at an address the kernel picks, so no
        // existing memory is replaced; `fd` is a live descriptor.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(at.cast::<AtomicU64>()).ok_or(io::ErrorKind::InvalidData)?;
        Ok(MappedWords {
            base,
            len: bytes / 8,
        })
    }
}

impl Words for MappedWords {
    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `base` is a page-aligned mapping of `len` words, read and
        // write, that lives as long as `self` (unmapped only in drop), and
        // whose file cannot shrink under it (sealed, or made by us). Every
        // access to it, from this process or any other mapping the same
        // memfd, is through AtomicU64 operations, so concurrent changes by
        // other processes are not data races; no `&mut` to it is ever
        // formed.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) }
    }
}

impl Drop for MappedWords {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours, made in `map` with this length, and
        // no borrow of it outlives `self`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len * 8) };
    }
}

// SAFETY: MappedWords owns its mapping (no other Rust value refers to it)
// and only hands out `&[AtomicU64]`, which may be shared and sent between
// threads; munmap in drop is fine from any thread.
unsafe impl Send for MappedWords {}
// SAFETY: as above: every access through `&MappedWords` is atomic.
unsafe impl Sync for MappedWords {}

impl fmt::Debug for MappedWords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedWords")
            .field("base", &self.base)
            .field("words", &self.len)
            .finish()
    }
}

/// Under Yama `ptrace_scope` 1 a process may attach only to its own
/// descendants, so two sibling processes (a server and a client started
/// by one shell) could not reach each other's memory. The target names
/// who may: softverbs names any process of the user (as `ptrace_scope` 0
/// allows by default), only when the same-host path is on and only under
/// scope 1. Scope 2 and 3 are left alone (the wire is used, with a log
/// line).
pub fn allow_same_user_attach() {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope");
    if !scope.is_ok_and(|s| s.trim() == "1") {
        return;
    }
    // SAFETY: PR_SET_PTRACER takes two integers and changes only this
    // process's Yama exception; it touches no memory of ours.
    let r = unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
    if r != 0 {
        softverbs_transport::say!(
            "softverbs: PR_SET_PTRACER failed ({}); same-host peers may use the wire",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    const PAGE: usize = 4096;

    /// Segments of `sizes` laid one after another in `buf` from `start`,
    /// `gap` bytes apart.
    fn segs_in(buf: &mut [u8], start: usize, sizes: &[u64], gap: usize) -> Vec<Seg> {
        let base = buf.as_mut_ptr() as u64;
        let mut at = start as u64;
        let segs: Vec<Seg> = sizes
            .iter()
            .map(|&len| {
                let s = Seg {
                    addr: base + at,
                    len,
                };
                at += len + gap as u64;
                s
            })
            .collect();
        assert!(at as usize <= buf.len() + gap, "segments fit");
        segs
    }

    /// The bytes of `segs`, in order.
    fn gather(buf: &[u8], segs: &[Seg]) -> Vec<u8> {
        let base = buf.as_ptr() as u64;
        segs.iter()
            .flat_map(|s| {
                let at = (s.addr - base) as usize;
                buf[at..at + s.len as usize].to_vec()
            })
            .collect()
    }

    /// Segments of several sizes on both sides, empty ones and more than
    /// IOV_MAX of them included, copy the same bytes both ways.
    #[test]
    fn segments_of_different_sizes_copy_both_ways() {
        let x = CrossProcessAccess::new();
        let sizes_a: Vec<u64> = [1, 7, 4096, 0, 3000, 2896].to_vec();
        let many: Vec<u64> = (0..2500).map(|i| 1 + i % 7).chain([1]).collect();
        let cases = [
            (sizes_a.clone(), vec![5000, 1, 4999]),
            (vec![10_000], sizes_a),
            (many.clone(), vec![total_len_of(&many)]),
            (many.clone(), many),
        ];
        for (local_sizes, remote_sizes) in cases {
            let total = total_len_of(&local_sizes) as usize;
            assert_eq!(total as u64, total_len_of(&remote_sizes));
            let mut src: Vec<u8> = (0..3 * total).map(|_| fastrand::u8(..)).collect();
            let mut dst = vec![0u8; 3 * total];
            let mut back = vec![0u8; 3 * total];
            let local = segs_in(&mut src, 3, &local_sizes, 1);
            let remote = segs_in(&mut dst, 0, &remote_sizes, 2);
            let again = segs_in(&mut back, 1, &local_sizes, 1);
            x.write_peer(own_id(), &local, &remote).unwrap();
            assert_eq!(gather(&dst, &remote), gather(&src, &local));
            x.read_peer(own_id(), &remote, &again).unwrap();
            assert_eq!(gather(&back, &again), gather(&src, &local));
        }
        let mut dst = [0u8; 16];
        let remote = segs_in(&mut dst, 2, &[5, 6], 1);
        x.write_peer_bytes(own_id(), b"hello world", &remote)
            .unwrap();
        assert_eq!(gather(&dst, &remote), b"hello world");
    }

    fn total_len_of(sizes: &[u64]) -> u64 {
        sizes.iter().sum()
    }

    /// Three pages: read-write, inaccessible, read-only.
    struct Pages {
        base: u64,
    }

    impl Pages {
        fn new() -> Pages {
            let prot = libc::PROT_READ | libc::PROT_WRITE;
            let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
            // SAFETY: a new anonymous mapping at an address the kernel
            // picks; nothing existing is replaced.
            let at = unsafe { libc::mmap(std::ptr::null_mut(), 3 * PAGE, prot, flags, -1, 0) };
            assert_ne!(at, libc::MAP_FAILED);
            let base = at as u64;
            // SAFETY: the second and third pages of our own new mapping,
            // which no Rust reference covers.
            unsafe {
                assert_eq!(libc::mprotect(at.add(PAGE), PAGE, libc::PROT_NONE), 0);
                assert_eq!(libc::mprotect(at.add(2 * PAGE), PAGE, libc::PROT_READ), 0);
            }
            Pages { base }
        }
        fn good(&self, len: u64) -> Seg {
            Seg {
                addr: self.base + PAGE as u64 - len,
                len,
            }
        }
        /// `before` good bytes, then `after` bytes of the inaccessible
        /// page.
        fn across_hole(&self, before: u64, after: u64) -> Seg {
            Seg {
                addr: self.base + PAGE as u64 - before,
                len: before + after,
            }
        }
        fn read_only(&self, len: u64) -> Seg {
            Seg {
                addr: self.base + 2 * PAGE as u64,
                len,
            }
        }
        /// The byte at `addr` of the first page.
        fn byte(&self, addr: u64) -> u8 {
            assert!((self.base..self.base + PAGE as u64).contains(&addr));
            let mut b = [0u8; 1];
            let x = CrossProcessAccess::new();
            let local = [Seg {
                addr: b.as_mut_ptr() as u64,
                len: 1,
            }];
            x.read_peer(own_id(), &[Seg { addr, len: 1 }], &local)
                .unwrap();
            b[0]
        }
    }

    impl Drop for Pages {
        fn drop(&mut self) {
            // SAFETY: our own mapping, made in `new`.
            unsafe { libc::munmap(self.base as *mut libc::c_void, 3 * PAGE) };
        }
    }

    /// An unmapped or read-only page faults the side it is on: Remote for
    /// the peer's, Local for ours, in both directions; the bytes before
    /// the fault are copied.
    #[test]
    fn a_fault_is_blamed_on_the_side_that_faulted() {
        let x = CrossProcessAccess::new();
        let p = Pages::new();
        let mut buf = [0x5au8; 64];
        let ours = Seg {
            addr: buf.as_mut_ptr() as u64,
            len: 64,
        };
        let pid = own_id();
        let hole = p.across_hole(40, 24);
        assert_eq!(x.write_peer(pid, &[ours], &[hole]), Err(PeerFault::Remote));
        assert_eq!(p.byte(hole.addr + 39), 0x5a, "copied up to the hole");
        let ro = p.read_only(64);
        assert_eq!(x.write_peer(pid, &[ours], &[ro]), Err(PeerFault::Remote));
        assert_eq!(
            x.write_peer_bytes(pid, &[1; 64], &[hole]),
            Err(PeerFault::Remote)
        );
        assert_eq!(x.write_peer(pid, &[hole], &[ours]), Err(PeerFault::Local));
        assert_eq!(x.read_peer(pid, &[hole], &[ours]), Err(PeerFault::Remote));
        assert_eq!(x.read_peer(pid, &[ours], &[hole]), Err(PeerFault::Local));
        assert_eq!(x.read_peer(pid, &[ours], &[ro]), Err(PeerFault::Local));
        let split = [p.good(8), ours, p.read_only(8)];
        let mut back = [0u8; 80];
        let mine = Seg {
            addr: back.as_mut_ptr() as u64,
            len: 80,
        };
        assert_eq!(
            x.read_peer(pid, &split, &[mine]),
            Ok(()),
            "read-only is readable"
        );
    }

    /// A process that does not exist is Gone.
    #[test]
    fn a_missing_process_is_gone() {
        let x = CrossProcessAccess::new();
        // Above the kernel's largest pid_max (2^22).
        let nobody = i32::MAX;
        assert_eq!(cross_memory_allowed(nobody), Err(PeerFault::Gone));
        let mut buf = [0u8; 8];
        let seg = Seg {
            addr: buf.as_mut_ptr() as u64,
            len: 8,
        };
        assert_eq!(x.write_peer(nobody, &[seg], &[seg]), Err(PeerFault::Gone));
        assert_eq!(x.read_peer(nobody, &[seg], &[seg]), Err(PeerFault::Gone));
        assert_eq!(cross_memory_allowed(own_id()), Ok(()));
        assert!(other_threads_of(nobody).is_empty());
    }

    /// A process's threads other than its main one are found (the test
    /// runs on one of them), each a way into the process's memory.
    #[test]
    fn a_thread_other_than_the_main_one_is_found() {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        // The test's own thread, which runs: another of the harness's
        // listed first may end before the call. Other tests' threads
        // ending during a listing may hide it from that listing (a CI
        // failure), never from all of a thousand.
        let tid = crate::own_memory::own_tid();
        assert!(
            (0..1000).any(|_| other_threads_of(pid).contains(&tid)),
            "the test's own thread"
        );
        assert_ne!(tid, pid);
        let word = [7u8];
        let mut out = [0u8];
        let (local, remote) = (
            [iovec(out.as_mut_ptr() as u64, 1)],
            [iovec(word.as_ptr() as u64, 1)],
        );
        assert_eq!(vm_call_on(tid, &local, &remote, Direction::Read), Ok(1));
        assert_eq!(out, [7]);
    }

    /// Another user's process is Denied. As root, a child that became
    /// nobody probes us; otherwise we probe init, when it is another
    /// user's.
    #[test]
    fn another_users_process_is_denied() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            let init_is_ours = std::fs::read_to_string("/proc/1/status").is_ok_and(|s| {
                // SAFETY: as above.
                let me = unsafe { libc::geteuid() };
                s.lines().any(|l| {
                    l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some(&me.to_string())
                })
            });
            if !init_is_ours {
                assert_eq!(cross_memory_allowed(1), Err(PeerFault::Denied));
            }
            return;
        }
        let parent = own_id();
        // SAFETY: the child runs only async-signal-safe system calls
        // (setuid by raw syscall, so only this thread changes: it is the
        // only one the child has; process_vm_readv; _exit) and never
        // returns into the test harness.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            // SAFETY: see above.
            unsafe {
                let code = if libc::syscall(libc::SYS_setuid, 65534) != 0 {
                    2
                } else if cross_memory_allowed(parent) == Err(PeerFault::Denied) {
                    0
                } else {
                    1
                };
                libc::_exit(code);
            }
        }
        let mut status = 0;
        // SAFETY: waits for our own child, writing into a local.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), 0, "1: allowed, 2: setuid failed");
    }

    /// A region and a second mapping of its memfd see each other's
    /// writes; a new region is zeroed.
    #[test]
    fn two_mappings_of_a_region_share_its_words() {
        let x = CrossProcessAccess::new();
        let (fd, a) = x.create_region(3 * PAGE).unwrap();
        let b = x.map_region(&fd, 3 * PAGE).unwrap();
        assert_eq!(a.words().len(), 3 * PAGE / 8);
        assert!(b.words().iter().all(|w| w.load(Ordering::Relaxed) == 0));
        a.words()[5].store(0xfeed, Ordering::Release);
        assert_eq!(b.words()[5].load(Ordering::Acquire), 0xfeed);
        let last = b.words().len() - 1;
        b.words()[last].fetch_add(7, Ordering::AcqRel);
        assert_eq!(a.words()[last].load(Ordering::Acquire), 7);
        let smaller = x.map_region(&fd, 64).unwrap();
        assert_eq!(smaller.words()[5].load(Ordering::Acquire), 0xfeed);
        drop(a);
        assert_eq!(b.words()[5].load(Ordering::Acquire), 0xfeed, "b outlives a");
    }

    /// A file shorter than announced, one that may shrink, and lengths that
    /// are no whole words are refused before anything is mapped.
    #[test]
    fn a_region_that_could_fault_us_is_refused() {
        let x = CrossProcessAccess::new();
        let (fd, _) = x.create_region(PAGE).unwrap();
        let e = x.map_region(&fd, 2 * PAGE).err().expect("too short");
        assert!(e.to_string().contains("4096 bytes"), "{e}");
        for bytes in [0, 12] {
            assert!(x.map_region(&fd, bytes).is_err(), "{bytes} bytes");
            assert!(x.create_region(bytes).is_err(), "{bytes} bytes");
        }
        let unsealed = memfd_create().unwrap();
        // SAFETY: resizes our own new memfd.
        assert_eq!(
            unsafe { libc::ftruncate(unsealed.as_raw_fd(), PAGE as libc::off_t) },
            0
        );
        let e = x.map_region(&unsealed, PAGE).err().expect("unsealed");
        assert!(e.to_string().contains("sealed"), "{e}");
    }
}
