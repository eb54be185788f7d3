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
/// `cudaHostAllocMapped`, `cudaHostAllocWriteCombined`: what pageable memory cannot stand in
/// for even while nothing asks (a mapped block's address is a device address under unified
/// addressing). A portable request is served pageable when the node's arbiter leases it no
/// room: pageable memory is usable from every context, and pinned on demand (portable) when
/// the program uses it as only pinned memory can be used.
pub const HOST_ALLOC_PINNED_ONLY: c_uint = 2 | 4;
/// `cudaHostAllocPortable` (= `cudaHostRegisterPortable`, `CU_MEMHOSTALLOC_PORTABLE`).
pub const HOST_ALLOC_PORTABLE: c_uint = 1;
/// `cudaHostRegisterIoMemory`: a flag a registration of ours does not carry on for the
/// program (nor `HOST_REGISTER_READ_ONLY`).
pub const HOST_REGISTER_IO_MEMORY: c_uint = 4;
/// `cudaHostRegisterReadOnly`.
pub const HOST_REGISTER_READ_ONLY: c_uint = 8;
/// `cudaHostRegisterPortable`, `Mapped`, `IoMemory`, `ReadOnly`: likewise for registrations.
pub const HOST_REGISTER_KEEP: c_uint = 1 | 2 | HOST_REGISTER_IO_MEMORY | HOST_REGISTER_READ_ONLY;
/// `cudaErrorInitializationError`: what a call answers when no runtime is there to do it.
pub const ERROR_NO_RUNTIME: c_int = 3;

pub type HostAlloc = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> c_int;
pub type MallocHost = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
pub type FreeHost = unsafe extern "C" fn(*mut c_void) -> c_int;
pub type HostRegister = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> c_int;
pub type HostUnregister = unsafe extern "C" fn(*mut c_void) -> c_int;

/// One real function, resolved once.
pub struct Real {
    pub name: &'static CStr,
    /// The files it lives in, tried when it is not in the global scope.
    files: &'static [&'static CStr],
    address: AtomicUsize,
}

impl Real {
    /// A function of the CUDA runtime.
    pub const fn runtime(name: &'static CStr) -> Self {
        Self::in_files(name, &RUNTIMES)
    }

    /// A function of the CUDA driver.
    pub const fn driver(name: &'static CStr) -> Self {
        Self::in_files(name, &DRIVERS)
    }

    const fn in_files(name: &'static CStr, files: &'static [&'static CStr]) -> Self {
        Self {
            name,
            files,
            address: AtomicUsize::new(0),
        }
    }

    /// The function's address, or None while no CUDA library that has it is loaded.
    pub fn address(&self) -> Option<usize> {
        self.get()
    }

    /// The function's address, or None while no CUDA runtime is loaded. Inlined: once known,
    /// one load in the wrapper that calls it (every copy of the program's calls this).
    #[inline(always)]
    fn get(&self) -> Option<usize> {
        let known = self.address.load(Ordering::Acquire);
        if known != 0 {
            return Some(known);
        }
        self.look_up()
    }

    #[inline(never)]
    fn look_up(&self) -> Option<usize> {
        let found = resolve(self.name, self.files)?;
        self.address.store(found, Ordering::Release);
        Some(found)
    }
}

pub static HOST_ALLOC: Real = Real::runtime(c"cudaHostAlloc");
pub static MALLOC_HOST: Real = Real::runtime(c"cudaMallocHost");
pub static FREE_HOST: Real = Real::runtime(c"cudaFreeHost");
pub static HOST_REGISTER: Real = Real::runtime(c"cudaHostRegister");
pub static HOST_UNREGISTER: Real = Real::runtime(c"cudaHostUnregister");

pub static CU_HOST_ALLOC: Real = Real::driver(c"cuMemHostAlloc");
pub static CU_ALLOC_HOST: Real = Real::driver(c"cuMemAllocHost_v2");
pub static CU_FREE_HOST: Real = Real::driver(c"cuMemFreeHost");
pub static CU_HOST_REGISTER: Real = Real::driver(c"cuMemHostRegister_v2");
pub static CU_HOST_UNREGISTER: Real = Real::driver(c"cuMemHostUnregister");

pub static CU_GET_PROC_ADDRESS: Real = Real::driver(c"cuGetProcAddress_v2");
pub static CU_GET_PROC_ADDRESS_V1: Real = Real::driver(c"cuGetProcAddress");

/// `cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus)`.
pub type GetProcAddress = unsafe extern "C" fn(
    *const std::ffi::c_char,
    *mut *mut c_void,
    c_int,
    u64,
    *mut c_int,
) -> c_int;
/// The legacy `cuGetProcAddress(symbol, pfn, cudaVersion, flags)`.
pub type GetProcAddressV1 =
    unsafe extern "C" fn(*const std::ffi::c_char, *mut *mut c_void, c_int, u64) -> c_int;

/// Runtime files tried when the runtime is not in the global scope.
const RUNTIMES: [&CStr; 3] = [c"libcudart.so.13", c"libcudart.so.12", c"libcudart.so"];
/// The driver (one per process).
const DRIVERS: [&CStr; 1] = [c"libcuda.so.1"];

/// libc's own dlsym, behind ours (exports.rs answers dlsym for the program): found with
/// dlvsym, which we do not define, under either version glibc gives it.
pub static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

type Dlsym = unsafe extern "C" fn(*mut c_void, *const std::ffi::c_char) -> *mut c_void;

/// libc's dlsym (resolved at the first need).
pub fn real_dlsym() -> Option<Dlsym> {
    let mut address = REAL_DLSYM.load(Ordering::Acquire);
    if address == 0 {
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: NUL-terminated names; RTLD_NEXT from this library reaches libc.
            let found =
                unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
            if !found.is_null() {
                address = found as usize;
                REAL_DLSYM.store(address, Ordering::Release);
                break;
            }
        }
    }
    // SAFETY: dlsym's C type; a function pointer is address-sized.
    (address != 0).then(|| unsafe { std::mem::transmute::<usize, Dlsym>(address) })
}

/// `dlsym(handle, name)` through libc's own dlsym (never ours).
pub fn lookup(handle: *mut c_void, name: &CStr) -> *mut c_void {
    match real_dlsym() {
        // SAFETY: a handle the caller has and a NUL-terminated name.
        Some(dlsym) => unsafe { dlsym(handle, name.as_ptr()) },
        None => std::ptr::null_mut(),
    }
}

fn resolve(name: &CStr, files: &[&CStr]) -> Option<usize> {
    let next = lookup(libc::RTLD_NEXT, name);
    if !next.is_null() {
        return Some(next as usize);
    }
    for file in files {
        // SAFETY: RTLD_NOLOAD only looks a loaded library up; the handle is not closed, as it
        // stays loaded anyway and closing it would drop the reference our lookup took.
        let handle = unsafe { libc::dlopen(file.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            continue;
        }
        let found = lookup(handle, name);
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
#[inline(always)]
pub unsafe fn function<F: Copy>(real: &Real) -> Option<F> {
    let address = real.get()?;
    debug_assert_eq!(size_of::<F>(), size_of::<usize>());
    // SAFETY: the caller names the function's type; a function pointer is address-sized.
    Some(unsafe { std::mem::transmute_copy::<usize, F>(&address) })
}

/// `cudaHostRegisterPortable` / `CU_MEMHOSTREGISTER_PORTABLE`: pinned for every context, so
/// a program copying from another device than the one current here still sees it pinned.
const REGISTER_PORTABLE: c_uint = 1;

/// Registers `size` bytes at `ptr` in place through the driver, in the program's context;
/// where there is none yet, through the runtime (which makes one). The CUDA error code, or
/// None when neither can be asked. A registration CUDA refuses leaves no error behind for the
/// program's next call to report: the driver keeps no last error, and the runtime's is
/// cleared if it was clear before.
pub fn register(ptr: *mut c_void, size: usize) -> Option<c_int> {
    register_with(ptr, size, REGISTER_PORTABLE)
}

/// [`register`] with the registration flags `flags`.
pub fn register_with(ptr: *mut c_void, size: usize, flags: c_uint) -> Option<c_int> {
    // SAFETY: CU_HOST_REGISTER is cuMemHostRegister_v2, of this type.
    if let Some(register) = unsafe { function::<HostRegister>(&CU_HOST_REGISTER) }
        // SAFETY: a block of at least `size` bytes that the caller allocated and owns.
        && let Some(rc) = in_context(|| unsafe { register(ptr, size, flags) })
    {
        return Some(rc);
    }
    // SAFETY: HOST_REGISTER is cudaHostRegister, of this type.
    let register = unsafe { function::<HostRegister>(&HOST_REGISTER) }?;
    let clear_before = last_error(false) == Some(0);
    // SAFETY: as above.
    let rc = unsafe { register(ptr, size, flags) };
    if rc != 0 && clear_before {
        last_error(true);
    }
    Some(rc)
}

type LastError = unsafe extern "C" fn() -> c_int;
static PEEK_AT_LAST_ERROR: Real = Real::runtime(c"cudaPeekAtLastError");
static GET_LAST_ERROR: Real = Real::runtime(c"cudaGetLastError");

/// The runtime's last error on this thread: peeked at, or taken (which clears it).
fn last_error(take: bool) -> Option<c_int> {
    let real = if take {
        &GET_LAST_ERROR
    } else {
        &PEEK_AT_LAST_ERROR
    };
    // SAFETY: both are `cudaError_t f(void)`.
    let f = unsafe { function::<LastError>(real) }?;
    // SAFETY: no arguments.
    Some(unsafe { f() })
}

type CtxGetDevice = unsafe extern "C" fn(*mut c_int) -> c_int;
type DeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
type CtxSynchronize = unsafe extern "C" fn() -> c_int;
static CU_CTX_GET_DEVICE: Real = Real::driver(c"cuCtxGetDevice");
static CU_DEVICE_GET_ATTRIBUTE: Real = Real::driver(c"cuDeviceGetAttribute");
static CU_CTX_SYNCHRONIZE: Real = Real::driver(c"cuCtxSynchronize");
/// `CU_DEVICE_ATTRIBUTE_INTEGRATED`, `_HOST_REGISTER_SUPPORTED`,
/// `_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES` (cuda.h).
const ATTRIBUTE_INTEGRATED: c_int = 18;
const ATTRIBUTE_HOST_REGISTER_SUPPORTED: c_int = 99;
const ATTRIBUTE_PAGEABLE_USES_HOST_PAGE_TABLES: c_int = 100;

/// Why pinning pays nothing on the device of the program's context, if it does not: the
/// device reads pageable memory through the host's page tables (coherent systems such as
/// Grace), cannot register host memory, or is integrated (host and device share memory).
/// Some(None) where it pays; None where no context can be asked yet.
pub fn pinning_does_not_pay() -> Option<Option<String>> {
    // SAFETY: the Reals name driver functions of these types.
    let (get_device, attribute) = unsafe {
        (
            function::<CtxGetDevice>(&CU_CTX_GET_DEVICE)?,
            function::<DeviceGetAttribute>(&CU_DEVICE_GET_ATTRIBUTE)?,
        )
    };
    let mut why = None;
    let mut asked = false;
    in_context(|| {
        let mut device = 0;
        // SAFETY: an out-pointer to a local.
        if unsafe { get_device(&mut device) } != 0 {
            return 0;
        }
        asked = true;
        let ask = |which| {
            let mut value = 0;
            // SAFETY: an out-pointer to a local; a device the context is on.
            (unsafe { attribute(&mut value, which, device) } == 0).then_some(value)
        };
        why = if ask(ATTRIBUTE_PAGEABLE_USES_HOST_PAGE_TABLES) == Some(1) {
            Some(format!(
                "device {device} reads pageable memory through the host's page tables"
            ))
        } else if ask(ATTRIBUTE_HOST_REGISTER_SUPPORTED) == Some(0) {
            Some(format!("device {device} cannot register host memory"))
        } else if ask(ATTRIBUTE_INTEGRATED) == Some(1) {
            Some(format!(
                "device {device} is integrated (it shares the host's memory)"
            ))
        } else {
            None
        };
        0
    });
    asked.then_some(why)
}

/// Waits until everything queued in the program's context is done.
pub fn context_synchronize() {
    // SAFETY: CU_CTX_SYNCHRONIZE is cuCtxSynchronize, of this type.
    if let Some(synchronize) = unsafe { function::<CtxSynchronize>(&CU_CTX_SYNCHRONIZE) } {
        // SAFETY: no arguments.
        in_context(|| unsafe { synchronize() });
    }
}

/// Unregisters a block [`register`] registered, the same way.
pub fn unregister(ptr: *mut c_void) -> Option<c_int> {
    // SAFETY: HOST_UNREGISTER is cudaHostUnregister, of this type.
    if let Some(unregister) = unsafe { function::<HostUnregister>(&HOST_UNREGISTER) } {
        // A refusal of ours is not left as the program's last error (as in `register_with`).
        let clear_before = last_error(false) == Some(0);
        // SAFETY: a block registered by `register` and not yet freed.
        let rc = unsafe { unregister(ptr) };
        if rc != 0 && clear_before {
            last_error(true);
        }
        return Some(rc);
    }
    // SAFETY: CU_HOST_UNREGISTER is cuMemHostUnregister, of this type.
    let unregister = unsafe { function::<HostUnregister>(&CU_HOST_UNREGISTER) }?;
    // SAFETY: as above.
    in_context(|| unsafe { unregister(ptr) })
}

type CtxGetCurrent = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
type DeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type PrimaryCtxGetState = unsafe extern "C" fn(c_int, *mut c_uint, *mut c_int) -> c_int;
type PrimaryCtxRetain = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;
type PrimaryCtxRelease = unsafe extern "C" fn(c_int) -> c_int;
type CtxPush = unsafe extern "C" fn(*mut c_void) -> c_int;
type CtxPop = unsafe extern "C" fn(*mut *mut c_void) -> c_int;

static CU_CTX_GET_CURRENT: Real = Real::driver(c"cuCtxGetCurrent");
static CU_DEVICE_GET: Real = Real::driver(c"cuDeviceGet");
static CU_PRIMARY_CTX_STATE: Real = Real::driver(c"cuDevicePrimaryCtxGetState");
static CU_PRIMARY_CTX_RETAIN: Real = Real::driver(c"cuDevicePrimaryCtxRetain");
static CU_PRIMARY_CTX_RELEASE: Real = Real::driver(c"cuDevicePrimaryCtxRelease_v2");
static CU_CTX_PUSH: Real = Real::driver(c"cuCtxPushCurrent_v2");
static CU_CTX_POP: Real = Real::driver(c"cuCtxPopCurrent_v2");

/// Runs a driver call with a context current: this thread's, or else device 0's primary
/// context if the program made it active (as JAX and CuPy do), pushed for the call and popped
/// after. None when there is neither: a context is never created here.
fn in_context(call: impl FnOnce() -> c_int) -> Option<c_int> {
    // SAFETY: each Real below names the driver function of the type it is read as.
    let (current, device_get, state, retain, release, push, pop) = unsafe {
        (
            function::<CtxGetCurrent>(&CU_CTX_GET_CURRENT)?,
            function::<DeviceGet>(&CU_DEVICE_GET)?,
            function::<PrimaryCtxGetState>(&CU_PRIMARY_CTX_STATE)?,
            function::<PrimaryCtxRetain>(&CU_PRIMARY_CTX_RETAIN)?,
            function::<PrimaryCtxRelease>(&CU_PRIMARY_CTX_RELEASE)?,
            function::<CtxPush>(&CU_CTX_PUSH)?,
            function::<CtxPop>(&CU_CTX_POP)?,
        )
    };
    let mut context = std::ptr::null_mut();
    // SAFETY: out-pointers to locals of the types the driver writes.
    unsafe {
        if current(&mut context) == 0 && !context.is_null() {
            return Some(call());
        }
        let mut device = 0;
        let (mut flags, mut active) = (0, 0);
        if device_get(&mut device, 0) != 0
            || state(device, &mut flags, &mut active) != 0
            || active == 0
            || retain(&mut context, device) != 0
        {
            return None;
        }
        let result = if push(context) == 0 {
            let rc = call();
            let mut popped = std::ptr::null_mut();
            pop(&mut popped);
            Some(rc)
        } else {
            None
        };
        release(device);
        result
    }
}

/// A stream handle (`CUstream` / `cudaStream_t`: the same handles in both APIs).
pub type Stream = *mut c_void;
/// `CU_STREAM_PER_THREAD`: what stream 0 means to a `_ptsz` entry point.
pub const STREAM_PER_THREAD: usize = 2;
/// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` / `cudaErrorStreamCaptureUnsupported`: what CUDA
/// answers a copy of pageable memory during stream capture.
pub const ERROR_CAPTURE_UNSUPPORTED: c_int = 900;
/// `CU_STREAM_CAPTURE_STATUS_ACTIVE`.
const CAPTURE_ACTIVE: c_int = 1;
/// `CU_STREAM_CAPTURE_STATUS_NONE`.
const CAPTURE_NONE: c_int = 0;
/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
const CAPTURE_MODE_RELAXED: c_int = 2;

type StreamSynchronize = unsafe extern "C" fn(Stream) -> c_int;
type StreamIsCapturing = unsafe extern "C" fn(Stream, *mut c_int) -> c_int;
type ExchangeCaptureMode = unsafe extern "C" fn(*mut c_int) -> c_int;

static CU_STREAM_SYNCHRONIZE: Real = Real::driver(c"cuStreamSynchronize");
static CU_STREAM_IS_CAPTURING: Real = Real::driver(c"cuStreamIsCapturing");
static CU_EXCHANGE_CAPTURE_MODE: Real = Real::driver(c"cuThreadExchangeStreamCaptureMode");

/// Waits until everything queued on `stream` so far is done; the CUDA error code.
pub fn synchronize(stream: Stream) -> c_int {
    // SAFETY: CU_STREAM_SYNCHRONIZE is cuStreamSynchronize, of this type.
    match unsafe { function::<StreamSynchronize>(&CU_STREAM_SYNCHRONIZE) } {
        // SAFETY: a stream the program just queued a copy on.
        Some(synchronize) => unsafe { synchronize(stream) },
        None => ERROR_NO_RUNTIME,
    }
}

type StreamQuery = unsafe extern "C" fn(Stream) -> c_int;
static CU_STREAM_QUERY: Real = Real::driver(c"cuStreamQuery");

/// Whether everything queued on `stream` so far is done (false where it cannot be told). Not
/// to be asked of a stream being captured (the query would end the capture: see
/// `not_capturing`), and from a thread whose capture mode is relaxed
/// (`with_relaxed_capture`), so that another thread's capture in global mode is not ended.
pub fn idle(stream: Stream) -> bool {
    // SAFETY: CU_STREAM_QUERY is cuStreamQuery, of this type.
    match unsafe { function::<StreamQuery>(&CU_STREAM_QUERY) } {
        // SAFETY: a stream the program is about to queue a copy on.
        Some(query) => unsafe { query(stream) == 0 },
        None => false,
    }
}

/// `stream`'s capture status (`CU_STREAM_CAPTURE_STATUS_*`), where it can be read.
fn capture_status(stream: Stream) -> Option<c_int> {
    // SAFETY: CU_STREAM_IS_CAPTURING is cuStreamIsCapturing, of this type.
    let is_capturing = unsafe { function::<StreamIsCapturing>(&CU_STREAM_IS_CAPTURING) }?;
    let mut status = 0;
    // SAFETY: a stream the program passed to a copy, and an out-pointer to a local.
    (unsafe { is_capturing(stream, &mut status) } == 0).then_some(status)
}

/// Whether `stream` is known not to be captured into a graph: its capture status read, and
/// none. False where it cannot be read (the legacy stream answers with an error while another
/// thread captures in global mode).
pub fn not_capturing(stream: Stream) -> bool {
    capture_status(stream) == Some(CAPTURE_NONE)
}

/// Whether `stream` is being captured into a graph.
pub fn capturing(stream: Stream) -> bool {
    capture_status(stream) == Some(CAPTURE_ACTIVE)
}

/// Runs `call` with this thread's stream capture mode relaxed, so that a registration made
/// while the program captures a stream is allowed and does not end the capture.
pub fn with_relaxed_capture<T>(call: impl FnOnce() -> T) -> T {
    // SAFETY: CU_EXCHANGE_CAPTURE_MODE is cuThreadExchangeStreamCaptureMode, of this type.
    let Some(exchange) = (unsafe { function::<ExchangeCaptureMode>(&CU_EXCHANGE_CAPTURE_MODE) })
    else {
        return call();
    };
    let mut mode = CAPTURE_MODE_RELAXED;
    // SAFETY: an in/out pointer to a local.
    let exchanged = unsafe { exchange(&mut mode) } == 0;
    let result = call();
    if exchanged {
        // SAFETY: as above: puts the program's mode back.
        unsafe { exchange(&mut mode) };
    }
    result
}

type StreamCreate = unsafe extern "C" fn(*mut Stream, c_uint) -> c_int;
type StreamDestroy = unsafe extern "C" fn(Stream) -> c_int;
type MemAlloc = unsafe extern "C" fn(*mut u64, usize) -> c_int;
type BeginCapture = unsafe extern "C" fn(Stream, c_int) -> c_int;
type EndCapture = unsafe extern "C" fn(Stream, *mut *mut c_void) -> c_int;
type GraphDestroy = unsafe extern "C" fn(*mut c_void) -> c_int;
type CopyHtoDAsync = unsafe extern "C" fn(u64, *const c_void, usize, Stream) -> c_int;

static CU_STREAM_CREATE: Real = Real::driver(c"cuStreamCreate");
static CU_STREAM_DESTROY: Real = Real::driver(c"cuStreamDestroy_v2");
static CU_MEM_ALLOC: Real = Real::driver(c"cuMemAlloc_v2");
static CU_BEGIN_CAPTURE: Real = Real::driver(c"cuStreamBeginCapture_v2");
static CU_END_CAPTURE: Real = Real::driver(c"cuStreamEndCapture");
static CU_GRAPH_DESTROY: Real = Real::driver(c"cuGraphDestroy");

/// What CUDA answered when asked to capture a copy of pageable memory: 0 not asked yet,
/// else the CUDA error code plus one.
static CAPTURE_ANSWER: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
/// Device memory of ours (4 KiB, kept) that refused copies are aimed at.
static REFUSAL_TARGET: AtomicUsize = AtomicUsize::new(0);
const PROBE_SIZE: usize = 4096;

/// What CUDA answers a copy of pageable memory made during stream capture (0: it captures
/// it; CUDA 13 on the H100 does, older CUDA and the stand-in refuse it): asked once, with
/// a copy from `pageable` (memory nobody registers, 4 KiB) on a stream of ours, in relaxed
/// mode so that the question disturbs no capture of the program's.
pub fn capture_of_pageable(pageable: *const c_void) -> c_int {
    let known = CAPTURE_ANSWER.load(Ordering::Acquire);
    if known != 0 {
        return known - 1;
    }
    let answer = with_relaxed_capture(|| ask_capture_of_pageable(pageable))
        .unwrap_or(ERROR_CAPTURE_UNSUPPORTED);
    CAPTURE_ANSWER.store(answer + 1, Ordering::Release);
    answer
}

fn ask_capture_of_pageable(pageable: *const c_void) -> Option<c_int> {
    // SAFETY: each Real names the driver function of the type it is read as.
    let (create, destroy, alloc, begin, end, graph_destroy, copy) = unsafe {
        (
            function::<StreamCreate>(&CU_STREAM_CREATE)?,
            function::<StreamDestroy>(&CU_STREAM_DESTROY)?,
            function::<MemAlloc>(&CU_MEM_ALLOC)?,
            function::<BeginCapture>(&CU_BEGIN_CAPTURE)?,
            function::<EndCapture>(&CU_END_CAPTURE)?,
            function::<GraphDestroy>(&CU_GRAPH_DESTROY)?,
            function::<CopyHtoDAsync>(&CU_COPY_HTOD_ASYNC)?,
        )
    };
    let (mut stream, mut device, mut graph) = (std::ptr::null_mut(), 0u64, std::ptr::null_mut());
    // SAFETY: out-pointers to locals; the stream is ours, made and destroyed here, the device
    // block ours and kept; `pageable` holds PROBE_SIZE bytes.
    unsafe {
        if alloc(&mut device, PROBE_SIZE) != 0 {
            return None;
        }
        REFUSAL_TARGET.store(device as usize, Ordering::Release);
        if create(&mut stream, 1) != 0 {
            return None;
        }
        let answer = if begin(stream, CAPTURE_MODE_RELAXED) == 0 {
            let copied = copy(device, pageable, PROBE_SIZE, stream);
            if end(stream, &mut graph) == 0 && !graph.is_null() {
                graph_destroy(graph);
            }
            Some(copied)
        } else {
            None
        };
        destroy(stream);
        answer
    }
}

/// The API a copy came through: a refusal is made through the same one, so that it sets
/// what that API sets (the runtime's last error).
#[derive(Clone, Copy, Debug)]
pub enum Layer {
    Runtime,
    Driver,
}

type RtCopyAsync = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int, Stream) -> c_int;

/// Makes CUDA refuse, on the capturing `stream`, a copy of the pageable `pageable` (4 KiB)
/// into device memory of ours: as it refuses the program's copy of pageable memory, with
/// the same error and the same end to the capture (invalidated). 0 if CUDA took it after all
/// (then the caller goes on with the program's copy).
pub fn refuse_as_pageable(stream: Stream, pageable: *const c_void, layer: Layer) -> c_int {
    let device = REFUSAL_TARGET.load(Ordering::Acquire);
    if device == 0 {
        return ERROR_CAPTURE_UNSUPPORTED;
    }
    // SAFETY: each Real names the function of the type it is read as; the device block is
    // ours and `pageable` holds PROBE_SIZE bytes.
    unsafe {
        match layer {
            Layer::Runtime => match function::<RtCopyAsync>(&RT_COPY_ASYNC) {
                Some(copy) => copy(device as *mut c_void, pageable, PROBE_SIZE, 1, stream),
                None => ERROR_CAPTURE_UNSUPPORTED,
            },
            Layer::Driver => match function::<CopyHtoDAsync>(&CU_COPY_HTOD_ASYNC) {
                Some(copy) => copy(device as u64, pageable, PROBE_SIZE, stream),
                None => ERROR_CAPTURE_UNSUPPORTED,
            },
        }
    }
}

static CU_COPY_HTOD_ASYNC: Real = Real::driver(c"cuMemcpyHtoDAsync_v2");
static RT_COPY_ASYNC: Real = Real::runtime(c"cudaMemcpyAsync");
