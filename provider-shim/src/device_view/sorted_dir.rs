//! The view's `class/infiniband_verbs`, read in device order.
//!
//! libibverbs lists devices in the order `readdir` gives that directory
//! (over the sysfs path; rxe's come over netlink, in the kernel's index
//! order), and a file system gives its own order: tmpfs newest first,
//! ext4 by a hash of the names. So a program that takes the first device
//! of the list, as `ibv_devinfo` and perftest do without `-d`, got
//! softverbs1, or another (found by a helper). An `opendir` of that
//! directory through the view reads it whole at once, sorted by uverbs
//! number; `readdir` hands out those entries and `closedir` forgets them.
//! Every other directory stream goes to glibc's functions, after one
//! atomic load. (`rewinddir`, `seekdir` and `telldir` are not replaced:
//! libibverbs reads the directory once, front to back.)

use parking_lot::Mutex;
use std::ffi::CStr;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

type ReaddirFn = unsafe extern "C-unwind" fn(*mut c_void) -> *mut libc::dirent64;

/// The sorted streams open, by their `DIR` address.
static LISTINGS: Mutex<Vec<Listing>> = Mutex::new(Vec::new());
/// How many there are: readdir looks at [`LISTINGS`] only when some are.
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// One sorted stream: its entries, and the next to hand out. The entries
/// are never added to or moved once read, so the pointer handed out
/// stays valid until `closedir` (a move of the `Listing` moves no entry).
struct Listing {
    dir: usize,
    entries: Vec<libc::dirent64>,
    next: usize,
}

/// Whether `path`, as the program gave it to `opendir`, names the uverbs
/// directory libibverbs lists devices from.
pub fn lists_devices(path: &CStr) -> bool {
    let path = path.to_bytes();
    let path = path.strip_suffix(b"/").unwrap_or(path);
    path == b"/sys/class/infiniband_verbs"
}

/// Reads the stream `dir` (just opened, nothing read) whole and keeps
/// its entries sorted, for [`next`] to hand out.
///
/// # Safety
/// `dir` is a live `DIR` that glibc's `opendir` returned.
pub unsafe fn take(dir: *mut c_void) {
    let Some(readdir) = crate::next_fn!(c"readdir64", ReaddirFn) else {
        return;
    };
    let mut entries = Vec::new();
    loop {
        // SAFETY: per the contract; glibc's readdir of a live stream.
        let entry = unsafe { readdir(dir) };
        if entry.is_null() {
            break;
        }
        // SAFETY: a non-NULL entry glibc just returned, valid until the
        // next readdir of the stream; copied field by field (its record
        // may be shorter than the struct).
        entries.push(unsafe { copy(entry) });
    }
    entries.sort_by_key(order);
    LISTINGS.lock().push(Listing {
        dir: dir as usize,
        entries,
        next: 0,
    });
    OPEN.fetch_add(1, Ordering::Release);
}

/// The next entry of a sorted stream (NULL at its end), or `None` for a
/// stream that is not one.
pub fn next(dir: *mut c_void) -> Option<*mut libc::dirent64> {
    if OPEN.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut listings = LISTINGS.lock();
    let listing = listings.iter_mut().find(|l| l.dir == dir as usize)?;
    let entry = match listing.entries.get_mut(listing.next) {
        Some(entry) => entry as *mut libc::dirent64,
        None => std::ptr::null_mut(),
    };
    listing.next = (listing.next + 1).min(listing.entries.len());
    Some(entry)
}

/// Forgets stream `dir`, being closed, if it is a sorted one.
pub fn forget(dir: *mut c_void) {
    if OPEN.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut listings = LISTINGS.lock();
    if let Some(i) = listings.iter().position(|l| l.dir == dir as usize) {
        listings.swap_remove(i);
        OPEN.fetch_sub(1, Ordering::Release);
    }
}

/// A copy of the entry at `entry`.
///
/// # Safety
/// `entry` points at a live directory entry whose name is NUL-terminated.
unsafe fn copy(entry: *const libc::dirent64) -> libc::dirent64 {
    // SAFETY: all-zero bytes are a valid dirent64 (integers and chars).
    let mut out: libc::dirent64 = unsafe { std::mem::zeroed() };
    // SAFETY: per the contract; fields read one by one, in bounds.
    unsafe {
        out.d_ino = (*entry).d_ino;
        out.d_off = (*entry).d_off;
        out.d_type = (*entry).d_type;
        let name = CStr::from_ptr((*entry).d_name.as_ptr()).to_bytes();
        let len = name.len().min(out.d_name.len() - 1);
        for (to, from) in out.d_name.iter_mut().zip(&name[..len]) {
            *to = *from as libc::c_char;
        }
    }
    out.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
    out
}

/// Where an entry sorts: `uverbsN` by N, after everything else by name
/// (`.`, `..`, `abi_version`).
fn order(entry: &libc::dirent64) -> (bool, u64, Vec<u8>) {
    // SAFETY: every entry's name is NUL-terminated (`copy`).
    let name = unsafe { CStr::from_ptr(entry.d_name.as_ptr()) }.to_bytes();
    let number = name
        .strip_prefix(b"uverbs")
        .and_then(|n| std::str::from_utf8(n).ok()?.parse::<u64>().ok());
    (number.is_some(), number.unwrap_or(0), name.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> libc::dirent64 {
        // SAFETY: all-zero bytes are a valid dirent64.
        let mut e: libc::dirent64 = unsafe { std::mem::zeroed() };
        for (to, from) in e.d_name.iter_mut().zip(name.as_bytes()) {
            *to = *from as libc::c_char;
        }
        e
    }

    #[test]
    fn uverbs_entries_sort_by_number_after_the_rest() {
        let mut entries: Vec<_> = [
            "uverbs10",
            "uverbs2",
            "abi_version",
            "uverbs0",
            ".",
            "uverbs1",
        ]
        .map(entry)
        .into_iter()
        .collect();
        entries.sort_by_key(order);
        let names: Vec<_> = entries
            .iter()
            .map(|e| {
                unsafe { CStr::from_ptr(e.d_name.as_ptr()) }
                    .to_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(
            names,
            [
                ".",
                "abi_version",
                "uverbs0",
                "uverbs1",
                "uverbs2",
                "uverbs10"
            ]
        );
    }

    #[test]
    fn only_the_uverbs_directory_is_sorted() {
        assert!(lists_devices(c"/sys/class/infiniband_verbs"));
        assert!(lists_devices(c"/sys/class/infiniband_verbs/"));
        assert!(!lists_devices(c"/sys/class/infiniband"));
        assert!(!lists_devices(c"/sys/class/infiniband_verbs/uverbs0"));
    }

    /// A real directory read through the sorted stream: every entry once,
    /// in order, then NULL; closing forgets it.
    #[test]
    fn a_sorted_stream_hands_out_every_entry_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for n in [3, 0, 12, 1] {
            std::fs::create_dir(dir.path().join(format!("uverbs{n}"))).unwrap();
        }
        let path = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        let stream = unsafe { libc::opendir(path.as_ptr()) }.cast::<c_void>();
        assert!(!stream.is_null());
        // SAFETY: just opened.
        unsafe { take(stream) };
        let mut names = Vec::new();
        while let Some(e) = next(stream).filter(|e| !e.is_null()) {
            // SAFETY: an entry of the listing, alive until forget.
            names.push(
                unsafe { CStr::from_ptr((*e).d_name.as_ptr()) }
                    .to_str()
                    .unwrap()
                    .to_string(),
            );
        }
        assert_eq!(
            names,
            [".", "..", "uverbs0", "uverbs1", "uverbs3", "uverbs12"]
        );
        assert_eq!(next(stream), Some(std::ptr::null_mut()), "stays at its end");
        forget(stream);
        assert_eq!(next(stream), None);
        // SAFETY: the stream opened above.
        unsafe { libc::closedir(stream.cast()) };
    }
}
