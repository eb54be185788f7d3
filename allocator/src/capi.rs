//! The C ABI (see include/hotpin.h), exported by libhotpin.so and by programs linking the
//! crate. Nothing here unwinds into C: a panic turns into plain malloc (alloc) or an error
//! code.

use std::{
    ffi::{CStr, c_char, c_int, c_void},
    panic::{AssertUnwindSafe, catch_unwind},
    path::PathBuf,
};

use crate::{Allocator, Config, Mode, Stats};

// `hotpin_malloc` and `hotpin_free` pass their caller's return address (the call site) on to
// the `_at` functions. They are naked so that the return address is where the call left it
// (at the stack pointer on x86-64, in the link register on arm64): Rust has no other way to
// name it. Each is one instruction and a tail jump, and a real exported symbol, which the
// tracer probes.

/// `void *hotpin_malloc(size_t size)`: see include/hotpin.h.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn hotpin_malloc(size: usize) -> *mut c_void {
    core::arch::naked_asm!("mov rsi, [rsp]", "jmp {at}@PLT", at = sym hotpin_malloc_at)
}

/// `int hotpin_free(void *ptr)`: see include/hotpin.h.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn hotpin_free(ptr: *mut c_void) -> c_int {
    core::arch::naked_asm!("mov rsi, [rsp]", "jmp {at}@PLT", at = sym hotpin_free_at)
}

#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn hotpin_malloc(size: usize) -> *mut c_void {
    core::arch::naked_asm!("mov x1, x30", "b {at}", at = sym hotpin_malloc_at)
}

#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn hotpin_free(ptr: *mut c_void) -> c_int {
    core::arch::naked_asm!("mov x1, x30", "b {at}", at = sym hotpin_free_at)
}

#[unsafe(no_mangle)]
pub extern "C" fn hotpin_malloc_at(size: usize, caller: *const c_void) -> *mut c_void {
    match catch_unwind(|| Allocator::global().alloc_at(size, caller as usize)) {
        Ok(ptr) => ptr.cast(),
        Err(_) => {
            eprintln!("hotpin: internal error; this allocation falls back to malloc");
            // SAFETY: plain malloc. Freeing it through hotpin_free is refused as foreign,
            // which is reported: better than failing an allocation malloc can satisfy.
            unsafe { libc::malloc(size.max(1)) }
        }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn hotpin_free_at(ptr: *mut c_void, _caller: *const c_void) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(|| Allocator::global().free(ptr.cast())));
    match result {
        Ok(Ok(())) => 0,
        Ok(Err(error)) => {
            eprintln!("hotpin: {error}; ignored");
            -1
        }
        Err(_) => -1,
    }
}

/// # Safety
/// `history_path` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hotpin_init(mode: c_int, history_path: *const c_char) -> c_int {
    let mode = match mode {
        0 => Mode::PinNone,
        1 => Mode::PinAll,
        2 => Mode::Profile,
        3 => Mode::Use,
        other => {
            eprintln!("hotpin: unknown mode {other}");
            return -1;
        }
    };
    let mut config = match Config::from_env() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("hotpin: {error}");
            return -1;
        }
    };
    config.mode = mode;
    if !history_path.is_null() {
        // SAFETY: the caller's contract.
        let path = unsafe { CStr::from_ptr(history_path) };
        config.history = Some(PathBuf::from(path.to_string_lossy().into_owned()));
    }
    match catch_unwind(|| Allocator::init(config)) {
        Ok(Ok(_)) => 0,
        Ok(Err(error)) => {
            eprintln!("hotpin: {error}");
            -1
        }
        Err(_) => -1,
    }
}

/// # Safety
/// `out` is null or points to a `struct hotpin_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hotpin_stats(out: *mut Stats) -> c_int {
    if out.is_null() {
        return -1;
    }
    let stats = Allocator::global().stats();
    // SAFETY: the caller's contract; Stats is #[repr(C)] like the header's struct.
    unsafe { out.write(stats) };
    0
}
