//! The program's real CUDA runtime functions, found behind our own definitions: the next
//! definition in the global scope (`RTLD_NEXT`), or, for a runtime loaded privately
//! (`RTLD_LOCAL`), in that library itself. Resolved at first use and kept.

use std::{
    ffi::{CStr, c_int, c_uint, c_void},
    sync::atomic::{AtomicUsize, Ordering},
};

/// `cudaHostAllocPortable`, `cudaHostAllocMapped`, `cudaHostAllocWriteCombined`: a program
/// asking for these depends on the memory being pinned, so it is never demoted.
pub const HOST_ALLOC_KEEP: c_uint = 1 | 2 | 4;
/// `cudaHostRegisterPortable`, `Mapped`, `IoMemory`, `ReadOnly`: likewise for registrations.
pub const HOST_REGISTER_KEEP: c_uint = 1 | 2 | 4 | 8;
/// `cudaErrorInitializationError`: what a call answers when no runtime is there to do it.
pub const ERROR_NO_RUNTIME: c_int = 3;

pub type HostAlloc = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> c_int;
pub type MallocHost = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
pub type FreeHost = unsafe extern "C" fn(*mut c_void) -> c_int;
pub type HostRegister = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> c_int;
pub type HostUnregister = unsafe extern "C" fn(*mut c_void) -> c_int;

/// One real function, resolved once.
pub struct Real {
    name: &'static CStr,
    address: AtomicUsize,
}

impl Real {
    const fn new(name: &'static CStr) -> Self {
        Self {
            name,
            address: AtomicUsize::new(0),
        }
    }

    /// The function's address, or None while no CUDA runtime is loaded.
    fn get(&self) -> Option<usize> {
        let known = self.address.load(Ordering::Acquire);
        if known != 0 {
            return Some(known);
        }
        let found = resolve(self.name)?;
        self.address.store(found, Ordering::Release);
        Some(found)
    }
}

pub static HOST_ALLOC: Real = Real::new(c"cudaHostAlloc");
pub static MALLOC_HOST: Real = Real::new(c"cudaMallocHost");
pub static FREE_HOST: Real = Real::new(c"cudaFreeHost");
pub static HOST_REGISTER: Real = Real::new(c"cudaHostRegister");
pub static HOST_UNREGISTER: Real = Real::new(c"cudaHostUnregister");

/// Runtime files tried when the runtime is not in the global scope.
const RUNTIMES: [&CStr; 3] = [c"libcudart.so.13", c"libcudart.so.12", c"libcudart.so"];

fn resolve(name: &CStr) -> Option<usize> {
    // SAFETY: a NUL-terminated name; RTLD_NEXT searches the objects loaded after this one.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if !next.is_null() {
        return Some(next as usize);
    }
    for file in RUNTIMES {
        // SAFETY: RTLD_NOLOAD only looks a loaded library up; the handle is not closed, as it
        // stays loaded anyway and closing it would drop the reference our lookup took.
        let handle = unsafe { libc::dlopen(file.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            continue;
        }
        // SAFETY: a live handle and a NUL-terminated name.
        let found = unsafe { libc::dlsym(handle, name.as_ptr()) };
        if !found.is_null() {
            return Some(found as usize);
        }
    }
    None
}

/// `real.get()` as a function of type `F`.
///
/// # Safety
/// `F` must be the C type of the function `real` names.
pub unsafe fn function<F: Copy>(real: &Real) -> Option<F> {
    let address = real.get()?;
    debug_assert_eq!(size_of::<F>(), size_of::<usize>());
    // SAFETY: the caller names the function's type; a function pointer is address-sized.
    Some(unsafe { std::mem::transmute_copy::<usize, F>(&address) })
}

/// Registers `size` bytes at `ptr` in place; the CUDA error code, or None without a runtime.
pub fn register(ptr: *mut c_void, size: usize) -> Option<c_int> {
    // SAFETY: HOST_REGISTER is cudaHostRegister, of this type.
    let register = unsafe { function::<HostRegister>(&HOST_REGISTER) }?;
    // SAFETY: a block of at least `size` bytes that the caller allocated and owns.
    Some(unsafe { register(ptr, size, 0) })
}

/// Unregisters a block [`register`] registered.
pub fn unregister(ptr: *mut c_void) -> Option<c_int> {
    // SAFETY: HOST_UNREGISTER is cudaHostUnregister, of this type.
    let unregister = unsafe { function::<HostUnregister>(&HOST_UNREGISTER) }?;
    // SAFETY: a block registered by `register` and not yet freed.
    Some(unsafe { unregister(ptr) })
}
