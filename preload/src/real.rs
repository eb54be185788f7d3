//! libc's own allocator, under the names glibc exports for it: what every interposed call
//! that is not ours to judge goes straight to. (Through `dlsym(RTLD_NEXT, "malloc")` instead,
//! dlsym itself would allocate before the answer came.)

use std::ffi::c_void;

unsafe extern "C" {
    pub fn __libc_malloc(size: usize) -> *mut c_void;
    pub fn __libc_calloc(count: usize, size: usize) -> *mut c_void;
    pub fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    pub fn __libc_free(ptr: *mut c_void);
    pub fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
}

/// Whether `align` is what posix_memalign accepts: a power of two, a multiple of a pointer.
pub fn valid_posix_alignment(align: usize) -> bool {
    align.is_power_of_two() && align.is_multiple_of(size_of::<*mut c_void>())
}
