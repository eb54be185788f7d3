//! The CUDA runtime, loaded at run time with `dlopen` so nothing links against CUDA.

use std::{ffi::c_void, fmt, path::Path};

use libloading::Library;

/// `cudaError_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaError(pub i32);

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            1 => "cudaErrorInvalidValue",
            2 => "cudaErrorMemoryAllocation",
            3 => "cudaErrorInitializationError",
            35 => "cudaErrorInsufficientDriver",
            100 => "cudaErrorNoDevice",
            712 => "cudaErrorHostMemoryAlreadyRegistered",
            713 => "cudaErrorHostMemoryNotRegistered",
            _ => "cudaError",
        };
        write!(f, "{name} ({})", self.0)
    }
}

/// Why the runtime could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot load the CUDA runtime {path}: {source}")]
    Open {
        path: String,
        #[source]
        source: libloading::Error,
    },
    #[error("the CUDA runtime {path} has no symbol {symbol}: {source}")]
    Symbol {
        path: String,
        symbol: &'static str,
        #[source]
        source: libloading::Error,
    },
}

/// `cudaMemcpyKind`.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemcpyKind {
    HostToHost = 0,
    HostToDevice = 1,
    DeviceToHost = 2,
    DeviceToDevice = 3,
    Default = 4,
}

type AllocFn = unsafe extern "C" fn(*mut *mut c_void, usize) -> i32;
type FreeFn = unsafe extern "C" fn(*mut c_void) -> i32;
type RegisterFn = unsafe extern "C" fn(*mut c_void, usize, u32) -> i32;
type MemcpyFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize, i32) -> i32;
type SyncFn = unsafe extern "C" fn() -> i32;
type CountFn = unsafe extern "C" fn(*mut i32) -> i32;

/// The runtime entry points hotpin uses, resolved once.
pub struct CudaRuntime {
    malloc: AllocFn,
    free: FreeFn,
    malloc_host: AllocFn,
    free_host: FreeFn,
    host_register: RegisterFn,
    host_unregister: FreeFn,
    memcpy: MemcpyFn,
    device_synchronize: SyncFn,
    get_device_count: CountFn,
    path: String,
    // Keeps the function pointers above valid; dropped last.
    library: Library,
}

fn check(code: i32) -> Result<(), CudaError> {
    if code == 0 {
        Ok(())
    } else {
        Err(CudaError(code))
    }
}

impl CudaRuntime {
    /// Loads the runtime from `path`: a file, or a library name for the dynamic loader's search
    /// (`libcudart.so.13`).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, LoadError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        // SAFETY: loading a library runs its initialisers; the CUDA runtime's are sound.
        let library = unsafe { Library::new(path) }.map_err(|source| LoadError::Open {
            path: shown.clone(),
            source,
        })?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol has the C signature of the CUDA runtime API it is named
                // after; the pointer stays valid while `library` lives in `Self`.
                *unsafe { library.get(concat!($name, "\0").as_bytes()) }.map_err(|source| {
                    LoadError::Symbol {
                        path: shown.clone(),
                        symbol: $name,
                        source,
                    }
                })?
            };
        }
        Ok(Self {
            malloc: sym!("cudaMalloc"),
            free: sym!("cudaFree"),
            malloc_host: sym!("cudaMallocHost"),
            free_host: sym!("cudaFreeHost"),
            host_register: sym!("cudaHostRegister"),
            host_unregister: sym!("cudaHostUnregister"),
            memcpy: sym!("cudaMemcpy"),
            device_synchronize: sym!("cudaDeviceSynchronize"),
            get_device_count: sym!("cudaGetDeviceCount"),
            path: shown.clone(),
            library,
        })
    }

    /// What it was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether this is the CUDA stand-in (a test fixture that is not CUDA: its copies are
    /// memcpy and its timings mean nothing), which exports `hotpin_cuda_standin` to say so.
    pub fn is_standin(&self) -> bool {
        // SAFETY: only the symbol's presence is asked; nothing is read through it.
        unsafe { self.library.get::<*const u8>(b"hotpin_cuda_standin\0") }.is_ok()
    }

    pub fn device_count(&self) -> Result<i32, CudaError> {
        let mut count = 0;
        // SAFETY: `count` is a valid out-pointer.
        check(unsafe { (self.get_device_count)(&mut count) })?;
        Ok(count)
    }

    /// `cudaMalloc`: device memory.
    pub fn malloc(&self, size: usize) -> Result<*mut c_void, CudaError> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer.
        check(unsafe { (self.malloc)(&mut ptr, size) })?;
        Ok(ptr)
    }

    /// `cudaFree`.
    ///
    /// # Safety
    /// `ptr` came from [`Self::malloc`] and is not used afterwards.
    pub unsafe fn free(&self, ptr: *mut c_void) -> Result<(), CudaError> {
        // SAFETY: the caller's contract.
        check(unsafe { (self.free)(ptr) })
    }

    /// `cudaMallocHost`: pinned host memory.
    pub fn malloc_host(&self, size: usize) -> Result<*mut c_void, CudaError> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer.
        check(unsafe { (self.malloc_host)(&mut ptr, size) })?;
        Ok(ptr)
    }

    /// `cudaFreeHost`.
    ///
    /// # Safety
    /// `ptr` came from [`Self::malloc_host`] and is not used afterwards.
    pub unsafe fn free_host(&self, ptr: *mut c_void) -> Result<(), CudaError> {
        // SAFETY: the caller's contract.
        check(unsafe { (self.free_host)(ptr) })
    }

    /// `cudaHostRegister` with default flags.
    ///
    /// # Safety
    /// `ptr..ptr+size` is host memory owned by the caller for as long as it stays registered.
    pub unsafe fn host_register(&self, ptr: *mut c_void, size: usize) -> Result<(), CudaError> {
        // SAFETY: the caller's contract.
        check(unsafe { (self.host_register)(ptr, size, 0) })
    }

    /// `cudaHostUnregister`.
    ///
    /// # Safety
    /// `ptr` was registered with [`Self::host_register`].
    pub unsafe fn host_unregister(&self, ptr: *mut c_void) -> Result<(), CudaError> {
        // SAFETY: the caller's contract.
        check(unsafe { (self.host_unregister)(ptr) })
    }

    /// `cudaMemcpy`.
    ///
    /// # Safety
    /// `dst` and `src` are valid for `count` bytes in the memory spaces `kind` names.
    pub unsafe fn memcpy(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        count: usize,
        kind: MemcpyKind,
    ) -> Result<(), CudaError> {
        // SAFETY: the caller's contract.
        check(unsafe { (self.memcpy)(dst, src, count, kind as i32) })
    }

    pub fn device_synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: no arguments.
        check(unsafe { (self.device_synchronize)() })
    }
}
