//! The program's questions about its memory (`cudaPointerGetAttributes`,
//! `cuPointerGetAttribute(s)`, `cudaHostGetFlags`, `cudaHostGetDevicePointer` and the
//! driver's), answered as they would be without hotpin. Frameworks branch on these: PyTorch's
//! `pin_memory()` returns the tensor itself when it is pinned already, XLA copies directly
//! instead of through its bounce buffer.
//!
//! - Memory hotpin registered behind the program's back: CUDA is asked the same question about
//!   a buffer of ours that nobody ever registers, and the program gets that answer (error
//!   code included), with our buffer's address put back to the program's where CUDA echoes
//!   it. So the answer is CUDA's own for pageable memory, not ours.
//! - Memory the program believes pinned that hotpin left pageable: registered first (pinned
//!   on demand), then CUDA answers truly, and the program may use the answer (a mapped device
//!   pointer).
//! - Who asks decides (`hotpin_policy::callers`, told apart by return address): CUDA's own
//!   libraries get the truth; so do frameworks whose only use of the answer is to choose a
//!   copy path (CuPy), for a block registered whole, which is then exposed (never let go
//!   while the program holds it). Their questions about a tracked block left pageable count
//!   as the copy they will make through their own staging buffer, which hotpin never sees.

use std::{
    ffi::{CStr, c_int, c_uint, c_void},
    sync::atomic::{AtomicUsize, Ordering},
};

use hotpin_policy::callers::{self, Caller};

use crate::{
    allocations, chunks,
    counters::{QUESTIONS_HIDDEN, QUESTIONS_SHOWN, QUESTIONS_STAGED},
    cuda::{self, Real},
    guard::{Busy, judged},
    learning,
    state::{self, ACTIVE, BELIEVED_PINNED, HIDDEN, LEARNING},
};

/// Pageable memory of ours that is never registered: what CUDA is asked about in place of a
/// block the program does not know hotpin registered.
#[repr(C, align(4096))]
struct Reference([u8; 4096]);
static REFERENCE: Reference = Reference([0; 4096]);

pub(crate) fn reference() -> usize {
    REFERENCE.0.as_ptr() as usize
}

/// The address CUDA is to be asked about in place of `ptr`: our reference for memory hotpin
/// registered behind the program's back, else `ptr` itself (pinned first if the program
/// believes it pinned). While no block is hidden and none believed pinned, nothing is looked
/// up: auto mode sets [`ACTIVE`] at its start, and every question of a program it cannot help
/// took the state's lock for nothing.
fn ask_about(ptr: usize) -> usize {
    let changed = HIDDEN.load(Ordering::Acquire) > 0 || BELIEVED_PINNED.load(Ordering::Acquire);
    if !changed || ptr == 0 || state::forked() {
        return ptr;
    }
    let Some(_busy) = Busy::enter() else {
        return ptr;
    };
    let mut asked = ptr;
    judged(|| {
        if state::hidden_block(ptr).is_some() {
            QUESTIONS_HIDDEN.fetch_add(1, Ordering::Relaxed);
            asked = reference();
        } else if BELIEVED_PINNED.load(Ordering::Acquire) {
            allocations::pin_on_demand(&[(ptr, 1, true)], !crate::guard::in_copy());
        }
    });
    asked
}

/// Pinned blocks of ours, allocated through one API's allocation call as demoted requests
/// are asked for (no flags, or portable): what CUDA is asked about in place of a demoted
/// block when the answer depends on how the block was pinned (its flags). 4 KiB each, made
/// at the first need, kept.
struct PinnedReference {
    alloc: &'static Real,
    /// By the request's flags: none, portable.
    address: [AtomicUsize; 2],
}

static PINNED_REFERENCE_RUNTIME: PinnedReference = PinnedReference {
    alloc: &cuda::HOST_ALLOC,
    address: [AtomicUsize::new(0), AtomicUsize::new(0)],
};
static PINNED_REFERENCE_DRIVER: PinnedReference = PinnedReference {
    alloc: &cuda::CU_HOST_ALLOC,
    address: [AtomicUsize::new(0), AtomicUsize::new(0)],
};

/// The pinned reference to ask about in place of `ptr` when `ptr` lies in a demoted request:
/// one allocated with the request's flags.
fn demoted_reference(ptr: usize, reference: &PinnedReference) -> Option<usize> {
    if !BELIEVED_PINNED.load(Ordering::Acquire) || ptr == 0 || state::forked() {
        return None;
    }
    let _busy = Busy::enter()?;
    let mut demoted = None;
    judged(|| demoted = state::in_demoted(ptr));
    let flags = demoted? & cuda::HOST_ALLOC_PORTABLE;
    let slot = reference.address.get(flags as usize)?;
    let known = slot.load(Ordering::Acquire);
    if known != 0 {
        return Some(known);
    }
    // SAFETY: `alloc` is cudaHostAlloc or cuMemHostAlloc, of this type.
    let alloc = unsafe { cuda::function::<cuda::HostAlloc>(reference.alloc) }?;
    let mut block = std::ptr::null_mut();
    // SAFETY: an out-pointer to a local; the block is ours and never freed.
    if unsafe { alloc(&mut block, 4096, flags) } != 0 || block.is_null() {
        return None;
    }
    slot.store(block as usize, Ordering::Release);
    Some(block as usize)
}

/// The address to ask CUDA about for a question from `caller` about `ptr`: CUDA's own
/// questions (the runtime asks the driver whether memory is pinned before it copies it) get
/// the truth, so that it copies a promoted block as pinned memory; a framework's get
/// [`shown_to_framework`]'s; the program's get [`ask_about`]'s.
fn asked_by(caller: usize, ptr: usize) -> usize {
    match caller_of(caller) {
        Caller::Cuda => ptr,
        who => asked_by_other(who, ptr),
    }
}

/// The address to ask CUDA about for a question about `ptr` from a framework or the program.
fn asked_by_other(who: Caller, ptr: usize) -> usize {
    if who.is_framework() {
        shown_to_framework(ptr)
    } else {
        ask_about(ptr)
    }
}

/// What a framework's question about a pointer found.
enum Shown {
    /// In a block hotpin registered whole, to be kept so: the truth (the block is exposed).
    Truth,
    /// In a tracked block left pageable (start, size) that the program does not believe
    /// pinned: the framework will copy it through its own staging buffer.
    Staged(usize, usize),
    /// Anything else: what the program is told ([`ask_about`]).
    AsTheProgram,
}

/// What a framework asking about `ptr` is to be told, under the state's lock.
fn shown(ptr: usize) -> Shown {
    let mut guard = state::lock();
    let Some(state) = guard.as_mut() else {
        return Shown::AsTheProgram;
    };
    if let Some(start) = state.hidden_block(ptr, 1) {
        let len = state.registered.get(&start).copied().unwrap_or(0);
        // Outside auto mode a registration is made whole at birth and let go only when the
        // block is freed (or as a freed block in the cache). A part, or a registration in
        // chunks, stays hidden.
        let whole = !chunks::chunked_at(start)
            && state
                .learner
                .as_mut()
                .is_none_or(|learner| learner.expose(start, len));
        return if whole {
            Shown::Truth
        } else {
            Shown::AsTheProgram
        };
    }
    if LEARNING.load(Ordering::Acquire)
        && let Some((start, size)) = state.learner.as_ref().and_then(|l| l.pageable_at(ptr))
    {
        return Shown::Staged(start, size);
    }
    Shown::AsTheProgram
}

/// The address to ask CUDA about for a framework's question about `ptr`
/// (`hotpin_policy::callers`): `ptr` itself where hotpin registered its block whole (the
/// truth: the framework copies straight from it; copies of it still complete before they
/// return, as the program's copies of pageable memory do), else what the program is told
/// ([`ask_about`]: a block pinned meanwhile stays hidden until the next question exposes it;
/// a pinned request hotpin served pageable is pinned on demand first). A question about a
/// tracked block left pageable counts, in auto mode, as a copy of the whole block: the
/// framework copies it through its own staging buffer, a copy hotpin never sees, and pinning
/// it is what would let the framework copy it directly.
fn shown_to_framework(ptr: usize) -> usize {
    if ptr == 0 || state::forked() {
        return ptr;
    }
    let mut truth = false;
    if let Some(_busy) = Busy::enter() {
        judged(|| match shown(ptr) {
            Shown::Truth => {
                QUESTIONS_SHOWN.fetch_add(1, Ordering::Relaxed);
                truth = true;
                // Shown an array pinned (from a history, at birth): it copies that array
                // directly, so its staging buffers are let go, as below.
                allocations::let_staging_go();
            }
            Shown::Staged(start, size) => {
                QUESTIONS_STAGED.fetch_add(1, Ordering::Relaxed);
                ANNOUNCED.set((start, size));
                learning::copied(&[(start, size, true)], None);
                // Pinned whole by that count, on this thread: shown at once, so the framework
                // copies it directly from now, and its staging buffers are let go.
                if matches!(shown(ptr), Shown::Truth) {
                    QUESTIONS_SHOWN.fetch_add(1, Ordering::Relaxed);
                    truth = true;
                    allocations::let_staging_go();
                }
            }
            Shown::AsTheProgram => {}
        });
    }
    if truth { ptr } else { ask_about(ptr) }
}

thread_local! {
    /// The block (start, size) whose copy this thread's last framework question announced
    /// and counted: a copy of it made next on this thread is that copy (a framework's static
    /// CUDA runtime asks before it copies), not counted again. Empty: none.
    static ANNOUNCED: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
}

/// Whether the copy of `ranges` (address, length, read), the next this thread completes, is
/// the one its last framework question announced and counted already. Any copy uses the
/// announcement up: a framework that staged the block copies something else next.
pub(crate) fn announced(ranges: &[(usize, usize, bool)]) -> bool {
    let (start, size) = ANNOUNCED.get();
    if size == 0 {
        return false;
    }
    ANNOUNCED.set((0, 0));
    ranges
        .iter()
        .any(|&(at, _, _)| at >= start && at < start.saturating_add(size))
}

thread_local! {
    /// Return addresses this thread saw lately, and who each belongs to.
    static CALLERS: std::cell::Cell<[(usize, Caller); 8]> =
        const { std::cell::Cell::new([(0, Caller::Program); 8]) };
}

/// Whether `caller` (a return address) lies in a framework whose pinned requests are the
/// staging buffers of its pool (`hotpin_policy::callers`, `Caller::FrameworkPool`).
pub(crate) fn from_staging_pool(caller: usize) -> bool {
    caller_of(caller) == Caller::FrameworkPool
}

/// Who `caller` (a return address) is (`hotpin_policy::callers`, by the file it lies in):
/// the CUDA runtime, the driver or NVIDIA's user-mode libraries, which call the driver's
/// functions through the table `cuGetProcAddress` gave them, ours included; a framework that
/// only chooses a copy path with the answer; or the program. A static runtime inside the
/// program counts as the program: its questions are answered as the program's (promoted
/// memory looks pageable to it, which is slower but correct).
fn caller_of(caller: usize) -> Caller {
    let anything = ACTIVE.load(Ordering::Acquire)
        || BELIEVED_PINNED.load(Ordering::Acquire)
        || LEARNING.load(Ordering::Acquire);
    if caller == 0 || !anything {
        return Caller::Program;
    }
    // Read in place (a copy of the whole table each question was half of this function's
    // cost on the stand-in).
    let known = CALLERS.with(|seen| {
        seen.as_array_of_cells()
            .iter()
            .map(std::cell::Cell::get)
            .find(|&(address, _)| address == caller)
    });
    if let Some((_, who)) = known {
        return who;
    }
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the loader's tables; `info` is ours.
    let found = unsafe { libc::dladdr(caller as *const c_void, &mut info) } != 0;
    let who = if found && !info.dli_fname.is_null() {
        // SAFETY: dladdr gives the file name as a C string.
        callers::caller(unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes())
    } else {
        Caller::Program
    };
    let mut seen = CALLERS.get();
    seen.rotate_right(1);
    seen[0] = (caller, who);
    CALLERS.set(seen);
    who
}

/// Where CUDA's answer holds the address it was asked about (`asked`), the program's own
/// address (`ptr`) instead.
///
/// # Safety
/// `out` is null or a writable address-sized answer.
unsafe fn put_back(out: *mut usize, asked: usize, ptr: usize) {
    // SAFETY: as the caller promises.
    if asked != ptr
        && let Some(out) = unsafe { out.as_mut() }
        && *out == asked
    {
        *out = ptr;
    }
}

/// `CU_POINTER_ATTRIBUTE_DEVICE_POINTER`, `CU_POINTER_ATTRIBUTE_HOST_POINTER`: the answers
/// that are addresses.
fn is_address(attribute: c_int) -> bool {
    matches!(attribute, 3 | 4)
}

type PointerGetAttribute = unsafe extern "C" fn(*mut c_void, c_int, u64) -> c_int;
type PointerGetAttributes =
    unsafe extern "C" fn(c_uint, *mut c_int, *mut *mut c_void, u64) -> c_int;
type HostGetFlags = unsafe extern "C" fn(*mut c_uint, *mut c_void) -> c_int;
type HostGetDevicePointer = unsafe extern "C" fn(*mut usize, *mut c_void, c_uint) -> c_int;
type RtPointerGetAttributes = unsafe extern "C" fn(*mut c_void, *const c_void) -> c_int;

pub static CU_POINTER_GET_ATTRIBUTE: Real = Real::driver(c"cuPointerGetAttribute");
pub static CU_POINTER_GET_ATTRIBUTES: Real = Real::driver(c"cuPointerGetAttributes");
pub static CU_HOST_GET_FLAGS: Real = Real::driver(c"cuMemHostGetFlags");
pub static CU_HOST_GET_DEVICE_POINTER: Real = Real::driver(c"cuMemHostGetDevicePointer_v2");
pub static RT_POINTER_GET_ATTRIBUTES: Real = Real::runtime(c"cudaPointerGetAttributes");
pub static RT_HOST_GET_FLAGS: Real = Real::runtime(c"cudaHostGetFlags");
pub static RT_HOST_GET_DEVICE_POINTER: Real = Real::runtime(c"cudaHostGetDevicePointer");

stub!(cuPointerGetAttribute(data: *mut c_void, attribute: c_int, ptr: u64) -> c_int, "rcx", "x3", pointer_get_attribute_at);

/// # Safety
/// As cuPointerGetAttribute.
unsafe extern "C" fn pointer_get_attribute_at(
    data: *mut c_void,
    attribute: c_int,
    ptr: u64,
    caller: usize,
) -> c_int {
    // SAFETY: the real function has this C type.
    let Some(real) = (unsafe { cuda::function::<PointerGetAttribute>(&CU_POINTER_GET_ATTRIBUTE) })
    else {
        return cuda::ERROR_NO_RUNTIME;
    };
    let asked = asked_by(caller, ptr as usize);
    // SAFETY: the program's question, about `asked`.
    let rc = unsafe { real(data, attribute, asked as u64) };
    if rc == 0 && is_address(attribute) {
        // SAFETY: CUDA wrote an address there.
        unsafe { put_back(data.cast(), asked, ptr as usize) };
    }
    rc
}

stub!(cuPointerGetAttributes(count: c_uint, attributes: *mut c_int, data: *mut *mut c_void, ptr: u64) -> c_int, "r8", "x4", pointer_get_attributes_at);

/// # Safety
/// As cuPointerGetAttributes.
unsafe extern "C" fn pointer_get_attributes_at(
    count: c_uint,
    attributes: *mut c_int,
    data: *mut *mut c_void,
    ptr: u64,
    caller: usize,
) -> c_int {
    // SAFETY: the real function has this C type.
    let Some(real) =
        (unsafe { cuda::function::<PointerGetAttributes>(&CU_POINTER_GET_ATTRIBUTES) })
    else {
        return cuda::ERROR_NO_RUNTIME;
    };
    let asked = asked_by(caller, ptr as usize);
    // SAFETY: the program's question, about `asked`.
    let rc = unsafe { real(count, attributes, data, asked as u64) };
    if rc == 0 && !attributes.is_null() && !data.is_null() {
        for i in 0..count as usize {
            // SAFETY: `count` attributes and answers, as CUDA requires.
            unsafe {
                if is_address(*attributes.add(i)) {
                    put_back((*data.add(i)).cast(), asked, ptr as usize);
                }
            }
        }
    }
    rc
}

stub!(cuMemHostGetFlags(flags: *mut c_uint, ptr: *mut c_void) -> c_int, "rdx", "x2", cu_host_get_flags_at);
stub!(cudaHostGetFlags(flags: *mut c_uint, ptr: *mut c_void) -> c_int, "rdx", "x2", host_get_flags_at);

/// # Safety
/// As cuMemHostGetFlags.
unsafe extern "C" fn cu_host_get_flags_at(
    flags: *mut c_uint,
    ptr: *mut c_void,
    caller: usize,
) -> c_int {
    // SAFETY: the real function has this C type.
    unsafe {
        host_get_flags(
            &CU_HOST_GET_FLAGS,
            &PINNED_REFERENCE_DRIVER,
            flags,
            ptr,
            caller,
        )
    }
}

/// # Safety
/// As cudaHostGetFlags.
unsafe extern "C" fn host_get_flags_at(
    flags: *mut c_uint,
    ptr: *mut c_void,
    caller: usize,
) -> c_int {
    // SAFETY: the real function has this C type.
    unsafe {
        host_get_flags(
            &RT_HOST_GET_FLAGS,
            &PINNED_REFERENCE_RUNTIME,
            flags,
            ptr,
            caller,
        )
    }
}

/// # Safety
/// `real` is cudaHostGetFlags or cuMemHostGetFlags; as those.
unsafe fn host_get_flags(
    real: &Real,
    reference: &PinnedReference,
    flags: *mut c_uint,
    ptr: *mut c_void,
    caller: usize,
) -> c_int {
    // SAFETY: as the caller promises.
    let Some(real) = (unsafe { cuda::function::<HostGetFlags>(real) }) else {
        return cuda::ERROR_NO_RUNTIME;
    };
    // A demoted request's flags are those of a block allocated as the program asked (no
    // flags, or portable: requests with other flags are never demoted), in the same API, not
    // a registration's.
    let asked = match caller_of(caller) {
        Caller::Cuda => ptr as usize,
        who => demoted_reference(ptr as usize, reference)
            .unwrap_or_else(|| asked_by_other(who, ptr as usize)),
    };
    // SAFETY: the program's question, about `asked`.
    unsafe { real(flags, asked as *mut c_void) }
}

stub!(cuMemHostGetDevicePointer_v2(out: *mut usize, ptr: *mut c_void, flags: c_uint) -> c_int, "rcx", "x3", cu_host_get_device_pointer_at);
stub!(cudaHostGetDevicePointer(out: *mut usize, ptr: *mut c_void, flags: c_uint) -> c_int, "rcx", "x3", host_get_device_pointer_at);

/// # Safety
/// As cuMemHostGetDevicePointer_v2.
unsafe extern "C" fn cu_host_get_device_pointer_at(
    out: *mut usize,
    ptr: *mut c_void,
    flags: c_uint,
    caller: usize,
) -> c_int {
    // SAFETY: the real function has this C type.
    unsafe { host_get_device_pointer(&CU_HOST_GET_DEVICE_POINTER, out, ptr, flags, caller) }
}

/// # Safety
/// As cudaHostGetDevicePointer.
unsafe extern "C" fn host_get_device_pointer_at(
    out: *mut usize,
    ptr: *mut c_void,
    flags: c_uint,
    caller: usize,
) -> c_int {
    // SAFETY: the real function has this C type.
    unsafe { host_get_device_pointer(&RT_HOST_GET_DEVICE_POINTER, out, ptr, flags, caller) }
}

/// # Safety
/// `real` is cudaHostGetDevicePointer or cuMemHostGetDevicePointer_v2; as those.
unsafe fn host_get_device_pointer(
    real: &Real,
    out: *mut usize,
    ptr: *mut c_void,
    flags: c_uint,
    caller: usize,
) -> c_int {
    // SAFETY: as the caller promises.
    let Some(real) = (unsafe { cuda::function::<HostGetDevicePointer>(real) }) else {
        return cuda::ERROR_NO_RUNTIME;
    };
    let asked = asked_by(caller, ptr as usize);
    // SAFETY: the program's question, about `asked`.
    let rc = unsafe { real(out, asked as *mut c_void, flags) };
    if rc == 0 {
        // SAFETY: CUDA wrote an address there.
        unsafe { put_back(out, asked, ptr as usize) };
    }
    rc
}

/// `cudaPointerAttributes`: {type, device, devicePointer, hostPointer}.
#[repr(C)]
struct PointerAttributes {
    kind: c_int,
    device: c_int,
    device_pointer: usize,
    host_pointer: usize,
}

stub!(cudaPointerGetAttributes(attributes: *mut c_void, ptr: *const c_void) -> c_int, "rdx", "x2", rt_pointer_get_attributes_at);

/// # Safety
/// As cudaPointerGetAttributes.
unsafe extern "C" fn rt_pointer_get_attributes_at(
    attributes: *mut c_void,
    ptr: *const c_void,
    caller: usize,
) -> c_int {
    // SAFETY: the real function has this C type.
    let Some(real) =
        (unsafe { cuda::function::<RtPointerGetAttributes>(&RT_POINTER_GET_ATTRIBUTES) })
    else {
        return cuda::ERROR_NO_RUNTIME;
    };
    let asked = asked_by(caller, ptr as usize);
    // SAFETY: the program's question, about `asked`.
    let rc = unsafe { real(attributes, asked as *const c_void) };
    if rc == 0 && !attributes.is_null() {
        let attributes = attributes.cast::<PointerAttributes>();
        // SAFETY: CUDA filled the caller's structure.
        unsafe {
            put_back(&raw mut (*attributes).device_pointer, asked, ptr as usize);
            put_back(&raw mut (*attributes).host_pointer, asked, ptr as usize);
        }
    }
    rc
}

/// The question functions: (the name `cuGetProcAddress` is asked for, or None for the
/// runtime's; the real function; ours).
pub fn questions() -> [(Option<&'static CStr>, &'static Real, usize); 7] {
    [
        (
            Some(c"cuPointerGetAttribute"),
            &CU_POINTER_GET_ATTRIBUTE,
            cuPointerGetAttribute as *const () as usize,
        ),
        (
            Some(c"cuPointerGetAttributes"),
            &CU_POINTER_GET_ATTRIBUTES,
            cuPointerGetAttributes as *const () as usize,
        ),
        (
            Some(c"cuMemHostGetFlags"),
            &CU_HOST_GET_FLAGS,
            cuMemHostGetFlags as *const () as usize,
        ),
        (
            Some(c"cuMemHostGetDevicePointer"),
            &CU_HOST_GET_DEVICE_POINTER,
            cuMemHostGetDevicePointer_v2 as *const () as usize,
        ),
        (
            None,
            &RT_POINTER_GET_ATTRIBUTES,
            cudaPointerGetAttributes as *const () as usize,
        ),
        (
            None,
            &RT_HOST_GET_FLAGS,
            cudaHostGetFlags as *const () as usize,
        ),
        (
            None,
            &RT_HOST_GET_DEVICE_POINTER,
            cudaHostGetDevicePointer as *const () as usize,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announced_copy_is_not_counted_twice_and_any_copy_uses_the_announcement_up() {
        // A static runtime's question, then its copy of the same block: counted once.
        ANNOUNCED.set((0x10_0000, 0x10_0000));
        assert!(announced(&[(0x18_0000, 4096, true)]));
        assert!(!announced(&[(0x18_0000, 4096, true)]));
        // A framework that staged the block copies its staging buffer next: the block's next
        // copy, later, is counted.
        ANNOUNCED.set((0x10_0000, 0x10_0000));
        assert!(!announced(&[(0x90_0000, 4096, true)]));
        assert!(!announced(&[(0x18_0000, 4096, true)]));
    }
}
