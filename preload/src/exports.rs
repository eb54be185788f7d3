//! The functions the program's calls land in.
//!
//! Those whose decision depends on the call site are naked one-instruction stubs that pass
//! their caller's return address (at the stack pointer on entry) as one more argument and
//! jump to the `_at` function: the same address the tracer records as the call site when
//! it probes libc or the CUDA runtime, so the identity (module + offset, ordinal, size) the
//! history knows is the one computed here.
//!
//! Below the size floor a libc call costs one load, one compare and a jump more than libc:
//! `hotpin-preload`'s floor benchmark measures it (docs/bench/history.md).

use std::{
    ffi::{CStr, c_int, c_uint, c_void},
    sync::atomic::Ordering,
};

use crate::{
    allocations::{self, PinnedRequest},
    copies,
    cuda::{self, FreeHost, HostAlloc, HostRegister, HostUnregister, MallocHost},
    guard::{Busy, judged},
    loader, questions,
    real::{
        __libc_calloc, __libc_free, __libc_malloc, __libc_memalign, __libc_realloc,
        valid_posix_alignment,
    },
    state::{self, ACTIVE, ENABLED, FLOOR},
};

stub!(malloc(size: usize) -> *mut c_void, "rsi", "x1", malloc_at);
stub!(calloc(count: usize, size: usize) -> *mut c_void, "rdx", "x2", calloc_at);
stub!(realloc(ptr: *mut c_void, size: usize) -> *mut c_void, "rdx", "x2", realloc_at);
stub!(posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int, "rcx", "x3", posix_memalign_at);
stub!(aligned_alloc(align: usize, size: usize) -> *mut c_void, "rdx", "x2", aligned_alloc_at);
stub!(memalign(align: usize, size: usize) -> *mut c_void, "rdx", "x2", memalign_at);
stub!(free(ptr: *mut c_void) -> (), "rsi", "x1", free_at);
stub!(cudaHostAlloc(out: *mut *mut c_void, size: usize, flags: c_uint) -> c_int, "rcx", "x3", host_alloc_at);
stub!(cudaMallocHost(out: *mut *mut c_void, size: usize) -> c_int, "rdx", "x2", malloc_host_at);
stub!(cudaHostRegister(ptr: *mut c_void, size: usize, flags: c_uint) -> c_int, "rcx", "x3", host_register_at);

/// Whether a call of `size` bytes is below the floor (or the interposer is off): libc's.
#[inline(always)]
fn below_floor(size: usize) -> bool {
    size < FLOOR.load(Ordering::Relaxed)
}

/// Whether a call of `size` bytes from `caller` is libc's alone: below the floor, or made by
/// the dynamic loader (`loader`: nothing of ours may be touched then).
#[inline(always)]
fn libcs(size: usize, caller: usize) -> bool {
    below_floor(size) || loader::called_from(caller)
}

/// An allocation at or above the floor: judged, and served by `from_libc` unless a cached
/// pinned block serves it.
fn judged_alloc(
    call: &'static str,
    size: usize,
    align: usize,
    caller: usize,
    from_libc: impl Fn() -> *mut c_void,
) -> *mut c_void {
    if state::forked() {
        return from_libc();
    }
    let Some(_busy) = Busy::enter() else {
        return from_libc();
    };
    let mut ptr = std::ptr::null_mut();
    let mut served = false;
    judged(|| {
        ptr = allocations::allocate(call, size, align, caller, true, &from_libc);
        served = true;
    });
    if served { ptr } else { from_libc() }
}

/// After libc allocated `ptr` (`size` bytes, at or above the floor, not from the cache):
/// judged, and registered in place if it is to be pinned.
fn after_alloc(call: &'static str, ptr: *mut c_void, size: usize, caller: usize) {
    if ptr.is_null() || state::forked() {
        return;
    }
    if let Some(_busy) = Busy::enter() {
        judged(|| {
            allocations::allocate(call, size, 1, caller, false, || ptr);
        });
    }
}

extern "C" fn malloc_at(size: usize, caller: usize) -> *mut c_void {
    if libcs(size, caller) {
        // SAFETY: libc's malloc.
        return unsafe { __libc_malloc(size) };
    }
    // SAFETY: libc's malloc.
    judged_alloc("malloc", size, 16, caller, || unsafe {
        __libc_malloc(size)
    })
}

extern "C" fn calloc_at(count: usize, size: usize, caller: usize) -> *mut c_void {
    // SAFETY: libc's calloc (which checks the product for overflow). Never from the cache,
    // which would need zeroing.
    let ptr = unsafe { __libc_calloc(count, size) };
    let total = count.saturating_mul(size);
    if !libcs(total, caller) {
        after_alloc("calloc", ptr, total, caller);
    }
    ptr
}

extern "C" fn realloc_at(ptr: *mut c_void, size: usize, caller: usize) -> *mut c_void {
    if ptr.is_null() {
        return malloc_at(size, caller);
    }
    // The loader grows its thread-local tables so: nothing of ours is touched.
    if loader::called_from(caller) {
        // SAFETY: libc's realloc of a block libc allocated.
        return unsafe { __libc_realloc(ptr, size) };
    }
    // A block we registered is unregistered before libc may move or free it. Only a block at
    // or above the floor can have been: below it, nothing is looked up (and no thread-local
    // state touched).
    let mut was_registered = false;
    let mut old = 0;
    if ACTIVE.load(Ordering::Acquire) && !state::forked() {
        // SAFETY: a live block of libc's (the caller reallocates it).
        old = unsafe { libc::malloc_usable_size(ptr) };
        if !below_floor(old)
            && let Some(_busy) = Busy::enter()
        {
            judged(|| {
                was_registered = matches!(
                    allocations::releasing(ptr, false),
                    allocations::Release::Unregistered
                );
            });
        }
    }
    // SAFETY: libc's realloc of a block libc allocated.
    let moved = unsafe { __libc_realloc(ptr, size) };
    if moved.is_null() {
        // The old block lives on, pageable now: judged again as it is.
        if was_registered {
            after_alloc("realloc", ptr, old, caller);
        }
        return moved;
    }
    if !below_floor(size) {
        after_alloc("realloc", moved, size, caller);
    }
    moved
}

/// # Safety
/// `out` is writable, as posix_memalign requires.
unsafe extern "C" fn posix_memalign_at(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
    caller: usize,
) -> c_int {
    if !valid_posix_alignment(align) {
        return libc::EINVAL;
    }
    // SAFETY: libc's memalign with a valid alignment.
    let from_libc = || unsafe { __libc_memalign(align, size) };
    let ptr = if libcs(size, caller) {
        from_libc()
    } else {
        judged_alloc("posix_memalign", size, align, caller, from_libc)
    };
    if ptr.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller's out-pointer.
    unsafe { *out = ptr };
    0
}

extern "C" fn aligned_alloc_at(align: usize, size: usize, caller: usize) -> *mut c_void {
    // SAFETY: libc's memalign (glibc's aligned_alloc is memalign).
    let from_libc = || unsafe { __libc_memalign(align, size) };
    if libcs(size, caller) {
        return from_libc();
    }
    judged_alloc("aligned_alloc", size, align, caller, from_libc)
}

extern "C" fn memalign_at(align: usize, size: usize, caller: usize) -> *mut c_void {
    // SAFETY: libc's memalign.
    let from_libc = || unsafe { __libc_memalign(align, size) };
    if libcs(size, caller) {
        return from_libc();
    }
    judged_alloc("memalign", size, align, caller, from_libc)
}

/// `free`: a block we registered is unregistered first. Until one is, nothing is looked up;
/// blocks under the floor, and the loader's, never are.
///
/// # Safety
/// As libc's free.
unsafe extern "C" fn free_at(ptr: *mut c_void, caller: usize) {
    if !ptr.is_null()
        && !loader::called_from(caller)
        && ACTIVE.load(Ordering::Acquire)
        && !state::forked()
        // SAFETY: a live block of libc's (the caller frees it).
        && !below_floor(unsafe { libc::malloc_usable_size(ptr) })
        && let Some(_busy) = Busy::enter()
    {
        let mut cached = false;
        judged(|| {
            cached = matches!(
                allocations::releasing(ptr, true),
                allocations::Release::Cached | allocations::Release::HandedOn
            );
        });
        if cached {
            // Kept registered for the next allocation that fits, or freed by the pinner
            // thread once unregistered.
            return;
        }
    }
    // SAFETY: as the caller's free.
    unsafe { __libc_free(ptr) }
}

/// Serves a pinned request: CUDA's, or pageable if judged cold. In auto mode a request kept
/// pinned is leased from the node's arbiter like any pin of hotpin's (#40): without a lease
/// it is given back to CUDA (`free`) and served pageable, as a cold one is (a portable one
/// too, pinned portable on demand), unless its flags need it pinned (mapped, write-combined:
/// then it is kept, and counted: the daemon sees it as a pin outside leases).
///
/// # Safety
/// `out` is writable; `pinned` is the real CUDA call for this request, and `free` names the
/// call that frees what it returns.
unsafe fn pinned_request(
    call: &'static str,
    out: *mut *mut c_void,
    size: usize,
    flags: c_uint,
    caller: usize,
    pinned: impl Fn() -> c_int,
    free: &cuda::Real,
) -> c_int {
    if !ENABLED.load(Ordering::Acquire) || state::forked() {
        return pinned();
    }
    let Some(_busy) = Busy::enter() else {
        return pinned();
    };
    let staging_pool = questions::from_staging_pool(caller);
    let mut request = PinnedRequest::Pinned { score: None };
    judged(|| request = allocations::pinned_request(call, size, flags, caller, staging_pool));
    let score = match request {
        PinnedRequest::Demote => {
            // SAFETY: as the caller promises. A portable request keeps its flag: questions
            // about it answer portable (`questions::demoted_reference`).
            if unsafe { serve_demoted(out, size, flags & cuda::HOST_ALLOC_PORTABLE) } {
                return 0;
            }
            return pinned();
        }
        PinnedRequest::Staging => {
            // SAFETY: as the caller promises.
            if unsafe { serve_demoted(out, size, flags & cuda::HOST_ALLOC_PORTABLE) } {
                // SAFETY: the caller's out-pointer, just written.
                let ptr = unsafe { *out };
                judged(|| allocations::staging_born(ptr, size));
                return 0;
            }
            return pinned();
        }
        PinnedRequest::Pinned { score } => score,
    };
    let status = pinned();
    // SAFETY: the caller's out-pointer, written by CUDA on success.
    let ptr = if status == 0 {
        unsafe { *out }
    } else {
        std::ptr::null_mut()
    };
    let Some(score) = score.filter(|_| !ptr.is_null()) else {
        return status;
    };
    if crate::lease::ask(ptr as usize, size, score) {
        return status;
    }
    let must_pin = flags & cuda::HOST_ALLOC_PINNED_ONLY != 0;
    // SAFETY: `free` names the call that frees what `pinned` returned.
    let freed = !must_pin
        && (unsafe { cuda::function::<FreeHost>(free) }).is_some_and(|free| {
            // SAFETY: the block CUDA just returned, not yet the program's.
            unsafe { free(ptr) == 0 }
        });
    // SAFETY: as the caller promises.
    let demoted = freed && unsafe { serve_demoted(out, size, flags & cuda::HOST_ALLOC_PORTABLE) };
    judged(|| allocations::kept_without_lease(size, freed, demoted));
    if freed && !demoted {
        // No memory to serve it pageable: CUDA's answer, as without hotpin.
        return pinned();
    }
    status
}

/// Serves a pinned request of `size` bytes pageable: page-aligned memory from libc, as pinned
/// memory is aligned, written to `out`; false if libc has none. `flags`: the request's (none,
/// or portable), with which it is pinned on demand.
///
/// # Safety
/// `out` is writable.
unsafe fn serve_demoted(out: *mut *mut c_void, size: usize, flags: c_uint) -> bool {
    // SAFETY: libc's memalign with a valid alignment.
    let ptr = unsafe { __libc_memalign(4096, size.max(1)) };
    if ptr.is_null() {
        return false;
    }
    // SAFETY: the caller's out-pointer.
    unsafe { *out = ptr };
    judged(|| allocations::demoted(ptr, size, flags));
    true
}

// The runtime's and the driver's pinned-memory calls have the same C types two by two, and
// are served alike: each entry point names its call and the real function behind it.

/// # Safety
/// As cudaHostAlloc.
unsafe extern "C" fn host_alloc_at(
    out: *mut *mut c_void,
    size: usize,
    flags: c_uint,
    caller: usize,
) -> c_int {
    // SAFETY: as the caller's.
    unsafe {
        host_alloc(
            "cudaHostAlloc",
            &cuda::HOST_ALLOC,
            &cuda::FREE_HOST,
            out,
            size,
            flags,
            caller,
        )
    }
}

/// # Safety
/// As cudaMallocHost.
unsafe extern "C" fn malloc_host_at(out: *mut *mut c_void, size: usize, caller: usize) -> c_int {
    // SAFETY: as the caller's.
    unsafe {
        alloc_host(
            "cudaMallocHost",
            &cuda::MALLOC_HOST,
            &cuda::FREE_HOST,
            out,
            size,
            caller,
        )
    }
}

/// `cudaFreeHost`: a demoted block goes back to libc.
///
/// # Safety
/// As cudaFreeHost.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaFreeHost(ptr: *mut c_void) -> c_int {
    // SAFETY: as the caller's.
    unsafe { free_host(&cuda::FREE_HOST, ptr) }
}

/// # Safety
/// As cudaHostRegister.
unsafe extern "C" fn host_register_at(
    ptr: *mut c_void,
    size: usize,
    flags: c_uint,
    caller: usize,
) -> c_int {
    // SAFETY: as the caller's.
    unsafe { host_register(&cuda::HOST_REGISTER, ptr, size, flags, caller) }
}

/// `cudaHostUnregister`: a registration that was not carried out is not undone.
///
/// # Safety
/// As cudaHostUnregister.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaHostUnregister(ptr: *mut c_void) -> c_int {
    // SAFETY: as the caller's.
    unsafe { host_unregister(&cuda::HOST_UNREGISTER, ptr) }
}

stub!(cuMemHostAlloc(out: *mut *mut c_void, size: usize, flags: c_uint) -> c_int, "rcx", "x3", cu_host_alloc_at);
stub!(cuMemAllocHost_v2(out: *mut *mut c_void, size: usize) -> c_int, "rdx", "x2", cu_alloc_host_at);
stub!(cuMemHostRegister_v2(ptr: *mut c_void, size: usize, flags: c_uint) -> c_int, "rcx", "x3", cu_host_register_at);

/// # Safety
/// As cuMemHostAlloc.
unsafe extern "C" fn cu_host_alloc_at(
    out: *mut *mut c_void,
    size: usize,
    flags: c_uint,
    caller: usize,
) -> c_int {
    // SAFETY: as the caller's.
    unsafe {
        host_alloc(
            "cuMemHostAlloc",
            &cuda::CU_HOST_ALLOC,
            &cuda::CU_FREE_HOST,
            out,
            size,
            flags,
            caller,
        )
    }
}

/// # Safety
/// As cuMemAllocHost_v2.
unsafe extern "C" fn cu_alloc_host_at(out: *mut *mut c_void, size: usize, caller: usize) -> c_int {
    // SAFETY: as the caller's.
    unsafe {
        alloc_host(
            "cuMemAllocHost",
            &cuda::CU_ALLOC_HOST,
            &cuda::CU_FREE_HOST,
            out,
            size,
            caller,
        )
    }
}

/// `cuMemFreeHost`: a demoted block goes back to libc.
///
/// # Safety
/// As cuMemFreeHost.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFreeHost(ptr: *mut c_void) -> c_int {
    // SAFETY: as the caller's.
    unsafe { free_host(&cuda::CU_FREE_HOST, ptr) }
}

/// # Safety
/// As cuMemHostRegister_v2.
unsafe extern "C" fn cu_host_register_at(
    ptr: *mut c_void,
    size: usize,
    flags: c_uint,
    caller: usize,
) -> c_int {
    // SAFETY: as the caller's.
    unsafe { host_register(&cuda::CU_HOST_REGISTER, ptr, size, flags, caller) }
}

/// `cuMemHostUnregister`: a registration that was not carried out is not undone.
///
/// # Safety
/// As cuMemHostUnregister.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostUnregister(ptr: *mut c_void) -> c_int {
    // SAFETY: as the caller's.
    unsafe { host_unregister(&cuda::CU_HOST_UNREGISTER, ptr) }
}

/// `cudaHostAlloc` or `cuMemHostAlloc` through `real`, judged.
///
/// # Safety
/// `real` names a function of that type; `out` is writable.
unsafe fn host_alloc(
    call: &'static str,
    real: &cuda::Real,
    free: &cuda::Real,
    out: *mut *mut c_void,
    size: usize,
    flags: c_uint,
    caller: usize,
) -> c_int {
    // SAFETY: as the caller promises.
    let Some(real) = (unsafe { cuda::function::<HostAlloc>(real) }) else {
        return cuda::ERROR_NO_RUNTIME;
    };
    // SAFETY: the program's own call, passed on as it was made.
    unsafe {
        pinned_request(
            call,
            out,
            size,
            flags,
            caller,
            || real(out, size, flags),
            free,
        )
    }
}

/// `cudaMallocHost` or `cuMemAllocHost_v2` through `real`, judged.
///
/// # Safety
/// `real` names a function of that type; `out` is writable.
unsafe fn alloc_host(
    call: &'static str,
    real: &cuda::Real,
    free: &cuda::Real,
    out: *mut *mut c_void,
    size: usize,
    caller: usize,
) -> c_int {
    // SAFETY: as the caller promises.
    let Some(real) = (unsafe { cuda::function::<MallocHost>(real) }) else {
        return cuda::ERROR_NO_RUNTIME;
    };
    // SAFETY: the program's own call, passed on as it was made.
    unsafe { pinned_request(call, out, size, 0, caller, || real(out, size), free) }
}

/// `cudaFreeHost` or `cuMemFreeHost` through `real`; a demoted block goes back to libc.
///
/// # Safety
/// `real` names a function of that type.
unsafe fn free_host(real: &cuda::Real, ptr: *mut c_void) -> c_int {
    if freed_demoted(ptr) {
        return 0;
    }
    // SAFETY: as the caller promises.
    let status = match unsafe { cuda::function::<FreeHost>(real) } {
        // SAFETY: the program's own call, passed on.
        Some(real) => unsafe { real(ptr) },
        None => cuda::ERROR_NO_RUNTIME,
    };
    if status == 0 && ENABLED.load(Ordering::Acquire) && !state::forked() {
        // A kept request's lease, if it had one, ends with it.
        crate::lease::released(ptr as usize);
    }
    status
}

/// `cudaHostRegister` or `cuMemHostRegister_v2` through `real`, unless judged not to be
/// carried out.
///
/// # Safety
/// `real` names a function of that type.
unsafe fn host_register(
    real: &cuda::Real,
    ptr: *mut c_void,
    size: usize,
    flags: c_uint,
    caller: usize,
) -> c_int {
    if skips_register(ptr, size, flags, caller) {
        return 0;
    }
    // SAFETY: as the caller promises.
    match unsafe { cuda::function::<HostRegister>(real) } {
        // SAFETY: the program's own call, passed on.
        Some(real) => unsafe { real(ptr, size, flags) },
        None => cuda::ERROR_NO_RUNTIME,
    }
}

/// `cudaHostUnregister` or `cuMemHostUnregister` through `real`, unless the registration
/// was not carried out.
///
/// # Safety
/// `real` names a function of that type.
unsafe fn host_unregister(real: &cuda::Real, ptr: *mut c_void) -> c_int {
    if skipped_unregister(ptr) {
        return 0;
    }
    // SAFETY: as the caller promises.
    match unsafe { cuda::function::<HostUnregister>(real) } {
        // SAFETY: the program's own call, passed on.
        Some(real) => unsafe { real(ptr) },
        None => cuda::ERROR_NO_RUNTIME,
    }
}

/// `dlsym`: what a program looks up itself (CuPy takes the runtime's and the driver's
/// functions so) is answered with our wrapper when the function found is the very one our
/// wrapper calls (so a second copy of a CUDA library is never redirected to the first);
/// anything else is libc's answer. `dlsym(RTLD_NEXT, ...)` goes straight to libc's, by a
/// tail jump, because libc reads the caller from the return address.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const std::ffi::c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "cmp rdi, -1",
        "jne 2f",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 2f",
        "jmp rax",
        "2:",
        "jmp {hook}",
        real = sym cuda::REAL_DLSYM,
        hook = sym dlsym_hook,
    )
}

/// `dlsym` on aarch64, as on x86-64: `RTLD_NEXT` goes to libc's by a tail branch, which keeps
/// the caller's link register for libc to read; anything else to our hook.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const std::ffi::c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "cmn x0, #1",
        "b.ne 2f",
        "adrp x16, {real}",
        "ldr x16, [x16, :lo12:{real}]",
        "cbz x16, 2f",
        "br x16",
        "2:",
        "b {hook}",
        real = sym cuda::REAL_DLSYM,
        hook = sym dlsym_hook,
    )
}

/// One function hotpin answers for: the name `cuGetProcAddress` is asked for (None for the
/// runtime's functions, which it never answers), the real function behind ours, ours.
type Interposed = (Option<&'static CStr>, &'static cuda::Real, usize);

/// Every function `dlsym` (by the real function's name) and `cuGetProcAddress` (by base name,
/// when the driver's answer is the very function ours wraps) may answer with ours: so a
/// second copy of a CUDA library is never redirected to the first, and a version or stream
/// flavour the caller asked for is never swapped for another.
fn interposed() -> impl Iterator<Item = Interposed> {
    let runtime = [
        (&cuda::HOST_ALLOC, cudaHostAlloc as *const () as usize),
        (&cuda::MALLOC_HOST, cudaMallocHost as *const () as usize),
        (&cuda::FREE_HOST, cudaFreeHost as *const () as usize),
        (&cuda::HOST_REGISTER, cudaHostRegister as *const () as usize),
        (
            &cuda::HOST_UNREGISTER,
            cudaHostUnregister as *const () as usize,
        ),
    ]
    .into_iter()
    .chain(copies::runtime_copies())
    .map(|(real, ours)| (None, real, ours));
    let driver = [
        (
            c"cuMemHostAlloc",
            &cuda::CU_HOST_ALLOC,
            cuMemHostAlloc as *const () as usize,
        ),
        (
            c"cuMemAllocHost",
            &cuda::CU_ALLOC_HOST,
            cuMemAllocHost_v2 as *const () as usize,
        ),
        (
            c"cuMemFreeHost",
            &cuda::CU_FREE_HOST,
            cuMemFreeHost as *const () as usize,
        ),
        (
            c"cuMemHostRegister",
            &cuda::CU_HOST_REGISTER,
            cuMemHostRegister_v2 as *const () as usize,
        ),
        (
            c"cuMemHostUnregister",
            &cuda::CU_HOST_UNREGISTER,
            cuMemHostUnregister as *const () as usize,
        ),
        (
            c"cuGetProcAddress",
            &cuda::CU_GET_PROC_ADDRESS,
            cuGetProcAddress_v2 as *const () as usize,
        ),
        (
            c"cuGetProcAddress",
            &cuda::CU_GET_PROC_ADDRESS_V1,
            cuGetProcAddress as *const () as usize,
        ),
    ]
    .into_iter()
    .chain(copies::driver_copies())
    .map(|(base, real, ours)| (Some(base), real, ours));
    runtime.chain(driver).chain(questions::questions())
}

/// # Safety
/// As dlsym: `name` is a NUL-terminated string.
unsafe extern "C" fn dlsym_hook(handle: *mut c_void, name: *const std::ffi::c_char) -> *mut c_void {
    let Some(real) = cuda::real_dlsym() else {
        return std::ptr::null_mut();
    };
    // SAFETY: the program's own lookup, passed on.
    let found = unsafe { real(handle, name) };
    if found.is_null() || name.is_null() || !ENABLED.load(Ordering::Acquire) || state::forked() {
        return found;
    }
    // SAFETY: dlsym found a symbol by this name, so it is a C string.
    let name = unsafe { std::ffi::CStr::from_ptr(name) };
    let Some((_, real_function, ours)) =
        interposed().find(|(_, real_function, _)| real_function.name == name)
    else {
        return found;
    };
    let Some(_busy) = Busy::enter() else {
        return found;
    };
    let mut same = false;
    judged(|| same = real_function.address() == Some(found as usize));
    if same { ours as *mut c_void } else { found }
}

/// `cudaFreeHost`/`cuMemFreeHost` of a demoted block: freed to libc here.
fn freed_demoted(ptr: *mut c_void) -> bool {
    if !ENABLED.load(Ordering::Acquire) || ptr.is_null() || state::forked() {
        return false;
    }
    let Some(_busy) = Busy::enter() else {
        return false;
    };
    let mut demoted = false;
    judged(|| demoted = allocations::free_demoted(ptr));
    if demoted {
        // SAFETY: a block __libc_memalign gave for a demoted request.
        unsafe { __libc_free(ptr) };
    }
    demoted
}

/// Whether a registration the program asks for is not to be carried out.
fn skips_register(ptr: *mut c_void, size: usize, flags: c_uint, caller: usize) -> bool {
    if !ENABLED.load(Ordering::Acquire) || state::forked() {
        return false;
    }
    let Some(_busy) = Busy::enter() else {
        return false;
    };
    let mut skip = false;
    judged(|| skip = allocations::skip_register(ptr, size, flags, caller));
    skip
}

/// Whether an unregistration undoes a registration that was not carried out.
fn skipped_unregister(ptr: *mut c_void) -> bool {
    if !ENABLED.load(Ordering::Acquire) || state::forked() {
        return false;
    }
    let Some(_busy) = Busy::enter() else {
        return false;
    };
    let mut skipped = false;
    judged(|| skipped = allocations::skip_unregister(ptr));
    skipped
}

/// After the driver answered `symbol` with `*pfn`: ours instead, if the answer is the very
/// function ours calls (CuPy and the CUDA runtime take the driver's functions this way).
///
/// # Safety
/// `symbol` is a C string and `pfn` the caller's out-pointer, which the driver just wrote.
unsafe fn answer_with_ours(symbol: *const std::ffi::c_char, pfn: *mut *mut c_void) {
    if symbol.is_null() || pfn.is_null() || !ENABLED.load(Ordering::Acquire) || state::forked() {
        return;
    }
    // SAFETY: as the caller promises.
    let (name, found) = unsafe { (std::ffi::CStr::from_ptr(symbol), *pfn) };
    if found.is_null() {
        return;
    }
    let Some(_busy) = Busy::enter() else { return };
    judged(|| {
        for (base, real, ours) in interposed() {
            if base == Some(name) && real.address() == Some(found as usize) {
                // SAFETY: the caller's out-pointer.
                unsafe { *pfn = ours as *mut c_void };
                return;
            }
        }
    });
}

/// `cuGetProcAddress_v2`: the driver's answer, with ours for the pinned-memory functions.
///
/// # Safety
/// As cuGetProcAddress_v2.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const std::ffi::c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    // SAFETY: CU_GET_PROC_ADDRESS is cuGetProcAddress_v2, of this type.
    let Some(real) =
        (unsafe { cuda::function::<cuda::GetProcAddress>(&cuda::CU_GET_PROC_ADDRESS) })
    else {
        return cuda::ERROR_NO_RUNTIME;
    };
    // SAFETY: the program's own call, passed on.
    let rc = unsafe { real(symbol, pfn, version, flags, status) };
    if rc == 0 {
        // SAFETY: the driver answered into `pfn`.
        unsafe { answer_with_ours(symbol, pfn) };
    }
    rc
}

/// The legacy `cuGetProcAddress`, likewise.
///
/// # Safety
/// As cuGetProcAddress.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const std::ffi::c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> c_int {
    // SAFETY: CU_GET_PROC_ADDRESS_V1 is cuGetProcAddress, of this type.
    let Some(real) =
        (unsafe { cuda::function::<cuda::GetProcAddressV1>(&cuda::CU_GET_PROC_ADDRESS_V1) })
    else {
        return cuda::ERROR_NO_RUNTIME;
    };
    // SAFETY: the program's own call, passed on.
    let rc = unsafe { real(symbol, pfn, version, flags) };
    if rc == 0 {
        // SAFETY: the driver answered into `pfn`.
        unsafe { answer_with_ours(symbol, pfn) };
    }
    rc
}
