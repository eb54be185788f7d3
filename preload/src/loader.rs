//! Where the dynamic loader's code lies, so that what it allocates goes straight to libc.
//!
//! Why: the loader calls `malloc`, `realloc` and `free` (ours, the first in the global scope)
//! from inside itself: to grow a thread's table of thread-local storage blocks (the DTV) while
//! it answers `__tls_get_addr` after a `dlopen`, to allocate those blocks, and for its own
//! link maps. Judging such a call touches our thread-local state, whose first touch after a
//! `dlopen` is itself a `__tls_get_addr` that grows the same table again: on glibc 2.39
//! (Ubuntu 24.04) that recursed until the stack ran out, and `import sklearn` died with
//! SIGSEGV in `ld-linux-x86-64.so.2` (#40). The loader's blocks are never the program's data,
//! so none of them is judged, looked up, counted or registered: each call the loader makes
//! is served by libc before anything of ours is touched (no thread-local state, no lock, no
//! loader call).

use std::sync::atomic::{AtomicUsize, Ordering};

/// The loader's mapped range `[START, END)`; empty until [`find`] ran.
static START: AtomicUsize = AtomicUsize::new(0);
static END: AtomicUsize = AtomicUsize::new(0);
/// Calls the loader made into the allocator, served by libc (the report's `loader_calls`).
pub static CALLS: AtomicUsize = AtomicUsize::new(0);

/// Whether `caller` (a return address) lies in the dynamic loader: counted, and then the call
/// is libc's alone. Two relaxed loads and two compares otherwise.
#[inline(always)]
pub fn called_from(caller: usize) -> bool {
    let inside = caller >= START.load(Ordering::Relaxed) && caller < END.load(Ordering::Relaxed);
    if inside {
        CALLS.fetch_add(1, Ordering::Relaxed);
    }
    inside
}

/// Finds the loader's range: the object loaded at the interpreter's base (`AT_BASE`), or,
/// where the program was started by running the loader itself (`ld.so PROGRAM`, no
/// interpreter), the object named like one. Runs once, at load, before anything is judged.
pub fn find() {
    // SAFETY: getauxval has no preconditions.
    let base = unsafe { libc::getauxval(libc::AT_BASE) } as usize;
    let mut found = Found { base, range: None };
    // SAFETY: the callback only reads the headers dl_iterate_phdr hands it, and `found`
    // outlives the call.
    unsafe {
        libc::dl_iterate_phdr(Some(visit), (&raw mut found).cast::<libc::c_void>());
    }
    if let Some((start, end)) = found.range {
        START.store(start, Ordering::Relaxed);
        END.store(end, Ordering::Relaxed);
    }
}

struct Found {
    base: usize,
    range: Option<(usize, usize)>,
}

/// One loaded object: if it is the loader, its loaded segments' extent goes into `data`.
unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: dl_iterate_phdr hands a valid info, and `data` is the `Found` given to it.
    let (info, found) = unsafe { (&*info, &mut *data.cast::<Found>()) };
    let address = info.dlpi_addr as usize;
    let is_loader = if found.base != 0 {
        address == found.base
    } else {
        // SAFETY: a loaded object's name is null or a C string.
        !info.dlpi_name.is_null()
            && unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }
                .to_bytes()
                .rsplit(|&b| b == b'/')
                .next()
                .is_some_and(|name| name.starts_with(b"ld-linux") || name.starts_with(b"ld.so"))
    };
    if !is_loader || info.dlpi_phdr.is_null() {
        return 0;
    }
    // SAFETY: dlpi_phdr points at dlpi_phnum program headers.
    let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum.into()) };
    let loaded = headers.iter().filter(|h| h.p_type == libc::PT_LOAD);
    let start = loaded.clone().map(|h| h.p_vaddr as usize).min();
    let end = loaded.map(|h| (h.p_vaddr + h.p_memsz) as usize).max();
    if let (Some(start), Some(end)) = (start, end) {
        found.range = Some((address + start, address + end));
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loader_is_found_and_its_code_told_from_ours() {
        find();
        let (start, end) = (START.load(Ordering::Relaxed), END.load(Ordering::Relaxed));
        assert!(start < end, "no loader range found: {start:#x}..{end:#x}");
        // __tls_get_addr is the loader's own function; this test's code is not the loader's.
        // SAFETY: dlsym with a NUL-terminated name.
        let tls_get_addr =
            unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__tls_get_addr".as_ptr()) } as usize;
        assert!(
            called_from(tls_get_addr),
            "{tls_get_addr:#x} not in {start:#x}..{end:#x}"
        );
        let ours = the_loader_is_found_and_its_code_told_from_ours as *const () as usize;
        assert!(!called_from(ours));
    }
}
