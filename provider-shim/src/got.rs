//! Plugin mode: redirecting one call a shared library makes through its
//! own GOT. libibverbs calls its exported `execute_ioctl` through its PLT,
//! so the call goes through a GOT slot that a `R_X86_64_JUMP_SLOT` (or,
//! for `-fno-plt` builds, `R_X86_64_GLOB_DAT`) relocation names; writing
//! our function into that slot makes every internal caller reach us
//! without touching any other process-wide symbol.

use std::ffi::{c_int, CStr};
use std::os::raw::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

const PT_DYNAMIC: u32 = 2;
const PT_GNU_RELRO: u32 = 0x6474_e552;
const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_JMPREL: i64 = 23;
const R_X86_64_GLOB_DAT: u64 = 6;
const R_X86_64_JUMP_SLOT: u64 = 7;

/// `Elf64_Dyn`.
#[repr(C)]
struct Dyn {
    tag: i64,
    val: u64,
}

/// `Elf64_Rela`.
#[repr(C)]
struct Rela {
    offset: u64,
    info: u64,
    _addend: i64,
}

/// `Elf64_Sym` (24 bytes); only the name offset is read.
#[repr(C)]
struct Sym {
    name: u32,
    _rest: [u32; 5],
}

/// A loaded shared object, as far as finding a GOT slot needs.
#[derive(Debug, Clone, Copy)]
struct Object {
    base: usize,
    dynamic: usize,
    /// `[start, end)` of its RELRO segment, read-only after relocation.
    relro: Option<(usize, usize)>,
}

struct Search<'a> {
    path: &'a CStr,
    found: Option<Object>,
}

/// A GOT slot of a loaded library.
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    addr: usize,
    in_relro: bool,
}

/// The GOT slot through which the library loaded from `path` (as the
/// dynamic linker names it) calls `symbol`.
pub fn find_slot(path: &CStr, symbol: &[u8]) -> Result<Slot, String> {
    let object =
        find_object(path).ok_or_else(|| format!("{} is not loaded", path.to_string_lossy()))?;
    let tables = object.tables()?;
    let addr = tables.slot_of(object.base, symbol).ok_or_else(|| {
        format!(
            "{} has no GOT slot for {}",
            path.to_string_lossy(),
            String::from_utf8_lossy(symbol)
        )
    })?;
    let in_relro = object
        .relro
        .is_some_and(|(start, end)| (start..end).contains(&addr));
    Ok(Slot { addr, in_relro })
}

impl Slot {
    /// Writes `value` into the slot (atomically: other threads calling
    /// through it see the old or the new function) and returns what it
    /// held.
    ///
    /// # Safety
    /// `value` must be a function with the C type of the slot's symbol.
    pub unsafe fn replace(&self, value: usize) -> Result<usize, String> {
        let page = page_size();
        let start = self.addr & !(page - 1);
        let writable = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: `start` is the page of a GOT slot of a loaded object, so
        // the page is mapped; making it writable changes no contents.
        if unsafe { libc::mprotect(start as *mut c_void, page, writable) } != 0 {
            return Err(format!("mprotect: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: the slot is an aligned, mapped, now writable pointer-sized
        // word that the dynamic linker filled; only its users read it.
        let old =
            unsafe { AtomicUsize::from_ptr(self.addr as *mut usize) }.swap(value, Ordering::SeqCst);
        if self.in_relro {
            // SAFETY: restores RELRO's read-only protection of the page.
            unsafe { libc::mprotect(start as *mut c_void, page, libc::PROT_READ) };
        }
        Ok(old)
    }
}

/// The name, as the dynamic linker has it, of a loaded library whose file
/// name starts with `prefix` (e.g. `librdmacm.so`).
pub fn loaded(prefix: &str) -> Option<std::ffi::CString> {
    struct Find<'a> {
        prefix: &'a str,
        found: Option<std::ffi::CString>,
    }
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info and our `data`.
        let (info, find) = unsafe { (&*info, &mut *(data as *mut Find)) };
        if info.dlpi_name.is_null() {
            return 0;
        }
        // SAFETY: a non-NULL dlpi_name is a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(info.dlpi_name) };
        let file = name
            .to_bytes()
            .rsplit(|&b| b == b'/')
            .next()
            .unwrap_or_default();
        if !file.starts_with(find.prefix.as_bytes()) {
            return 0;
        }
        find.found = Some(name.to_owned());
        1
    }
    let mut find = Find {
        prefix,
        found: None,
    };
    // SAFETY: the callback only reads the info it is given and writes
    // through `data`, which points to `find` for the whole call.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut find as *mut Find).cast()) };
    find.found
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096)
}

fn find_object(path: &CStr) -> Option<Object> {
    let mut search = Search { path, found: None };
    // SAFETY: the callback only reads the `dl_phdr_info` it is given and
    // writes through `data`, which points to `search` for the whole call.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut search as *mut Search).cast()) };
    search.found
}

unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info and our `data`.
    let (info, search) = unsafe { (&*info, &mut *(data as *mut Search)) };
    if info.dlpi_name.is_null() {
        return 0;
    }
    // SAFETY: a non-NULL dlpi_name is a NUL-terminated string.
    if unsafe { CStr::from_ptr(info.dlpi_name) } != search.path {
        return 0;
    }
    let base = info.dlpi_addr as usize;
    let mut object = Object {
        base,
        dynamic: 0,
        relro: None,
    };
    for i in 0..usize::from(info.dlpi_phnum) {
        // SAFETY: dlpi_phdr has dlpi_phnum entries.
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        let start = base + ph.p_vaddr as usize;
        match ph.p_type {
            PT_DYNAMIC => object.dynamic = start,
            PT_GNU_RELRO => object.relro = Some((start, start + ph.p_memsz as usize)),
            _ => {}
        }
    }
    search.found = (object.dynamic != 0).then_some(object);
    1
}

/// The relocation and symbol tables of an object's dynamic section.
#[derive(Default)]
struct Tables {
    strtab: usize,
    symtab: usize,
    jmprel: (usize, usize),
    rela: (usize, usize),
}

impl Object {
    fn tables(&self) -> Result<Tables, String> {
        let mut t = Tables::default();
        let mut d = self.dynamic as *const Dyn;
        // SAFETY: PT_DYNAMIC of a loaded object is a DT_NULL-terminated
        // array of Elf64_Dyn.
        while unsafe { (*d).tag } != DT_NULL {
            // SAFETY: as above, `d` is within the array.
            let (tag, val) = unsafe { ((*d).tag, (*d).val as usize) };
            match tag {
                DT_STRTAB => t.strtab = self.absolute(val),
                DT_SYMTAB => t.symtab = self.absolute(val),
                DT_JMPREL => t.jmprel.0 = self.absolute(val),
                DT_PLTRELSZ => t.jmprel.1 = val,
                DT_RELA => t.rela.0 = self.absolute(val),
                DT_RELASZ => t.rela.1 = val,
                _ => {}
            }
            // SAFETY: the terminator has not been reached yet.
            d = unsafe { d.add(1) };
        }
        if t.strtab == 0 || t.symtab == 0 {
            return Err("no dynamic symbol table".into());
        }
        Ok(t)
    }

    /// glibc rewrites the address entries of a loaded object's dynamic
    /// section to absolute addresses on most targets; accept both forms.
    fn absolute(&self, val: usize) -> usize {
        if val < self.base {
            self.base + val
        } else {
            val
        }
    }
}

impl Tables {
    fn slot_of(&self, base: usize, symbol: &[u8]) -> Option<usize> {
        [self.jmprel, self.rela]
            .into_iter()
            .filter(|&(addr, _)| addr != 0)
            .flat_map(|(addr, size)| {
                let n = size / std::mem::size_of::<Rela>();
                // SAFETY: DT_JMPREL/DT_RELA point to `size` bytes of Elf64_Rela.
                unsafe { std::slice::from_raw_parts(addr as *const Rela, n) }
            })
            .find(|r| {
                let kind = r.info & 0xffff_ffff;
                (kind == R_X86_64_JUMP_SLOT || kind == R_X86_64_GLOB_DAT)
                    && self.name_of((r.info >> 32) as usize) == Some(symbol)
            })
            .map(|r| base + r.offset as usize)
    }

    fn name_of(&self, index: usize) -> Option<&[u8]> {
        if index == 0 {
            return None;
        }
        // SAFETY: relocation symbol indexes are within the dynamic symbol
        // table, whose names are NUL-terminated strings in its string table.
        unsafe {
            let sym = &*(self.symtab as *const Sym).add(index);
            let name = CStr::from_ptr((self.strtab + sym.name as usize) as *const _);
            Some(name.to_bytes())
        }
    }
}
