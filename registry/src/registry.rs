//! The one probe registry: every function the tracer probes, where it lives, what the kernel
//! must support for it, whether it is on by default, and how to read its arguments.
//!
//! The tracer's loader attaches from this table alone (`tracer_agent::probes::Probes::attach_file`); the decoder
//! reads events with it (see [`crate::events`]).

use tracer_common::{DescriptorLayout, EventKind, FieldRead, Layer, ProbeCookie, field};

/// The library a probed function lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Library {
    /// The CUDA runtime: `libcudart.so*`, or an executable linked with it statically.
    CudaRuntime,
    /// The CUDA driver: `libcuda.so*`.
    CudaDriver,
    /// hotpin's allocator: `libhotpin.so`, or a program linked with it.
    Hotpin,
    /// glibc's allocator (`libc.so.6`), probed only with `--libc-malloc`.
    Libc,
}

impl Library {
    pub const ALL: [Library; 4] = [
        Library::CudaRuntime,
        Library::CudaDriver,
        Library::Hotpin,
        Library::Libc,
    ];

    pub const fn layer(self) -> Layer {
        match self {
            Library::CudaRuntime => Layer::Runtime,
            Library::CudaDriver => Layer::Driver,
            Library::Hotpin => Layer::Allocator,
            Library::Libc => Layer::Libc,
        }
    }

    /// A symbol only this library defines: a file defining it is this library (or carries it
    /// statically linked).
    /// The symbol hotpin's interposer (`libhotpin_preload.so`) defines: a file with it is
    /// never probed, though it defines CUDA's copy functions (its wrappers call the real ones,
    /// which are probed: probing both would count each copy twice).
    pub const INTERPOSER_MARKER: &'static str = "hotpin_interposer";

    pub const fn marker(self) -> &'static str {
        match self {
            Library::CudaRuntime => "cudaMemcpy",
            Library::CudaDriver => "cuMemcpyHtoD_v2",
            Library::Hotpin => "hotpin_malloc",
            Library::Libc => "__libc_malloc",
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Library::CudaRuntime => "cuda-runtime",
            Library::CudaDriver => "cuda-driver",
            Library::Hotpin => "hotpin",
            Library::Libc => "libc",
        }
    }
}

/// What the kernel must offer for a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KernelFeature {
    /// uprobes and uretprobes with BPF attach cookies (Linux 5.15).
    UprobeWithCookie,
    /// Syscall tracepoints (CONFIG_FTRACE_SYSCALLS).
    SyscallTracepoint,
    /// Other kernel tracepoints (CONFIG_TRACEPOINTS).
    Tracepoint,
    /// Kernel kprobes (CONFIG_KPROBES): absent on our kernels, detected and reported.
    Kprobe,
}

/// Memory an allocation function hands out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllocSpace {
    Device,
    /// Host memory from hotpin's allocator: pageable unless a nested pinning call says pinned.
    Host,
    /// Pinned host memory from cudaMallocHost / cudaHostAlloc / cuMemAllocHost / cuMemHostAlloc.
    PinnedHost,
    /// Managed (unified) memory: cudaMallocManaged / cuMemAllocManaged.
    Managed,
    /// A device address range reserved with cuMemAddressReserve, backed later by cuMemMap.
    DeviceReserve,
}

/// Where a copy's direction comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectionFrom {
    /// Fixed by the function (`cuMemcpyHtoD_v2`).
    Fixed(CopyDirection),
    /// A `cudaMemcpyKind` argument at this index.
    KindArg(usize),
    /// Unified addressing (`cuMemcpy`, `cudaMemcpyDefault`): resolved from which pointers are
    /// known device allocations.
    Pointers,
}

/// The direction of a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CopyDirection {
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
    HostToHost,
    /// Unified addressing with neither pointer resolved yet.
    Unresolved,
}

impl CopyDirection {
    /// From a `cudaMemcpyKind` value.
    pub fn from_memcpy_kind(kind: u64) -> Self {
        match kind as u32 {
            0 => CopyDirection::HostToHost,
            1 => CopyDirection::HostToDevice,
            2 => CopyDirection::DeviceToHost,
            3 => CopyDirection::DeviceToDevice,
            _ => CopyDirection::Unresolved,
        }
    }
}

/// How many bytes a copy moves (or an allocation holds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BytesFrom {
    Arg(usize),
    /// `width * height` (2D copies).
    Rect {
        width: usize,
        height: usize,
    },
    /// `*pitch * height`, where `pitch` is an out-parameter the kernel side reads at return
    /// (`cudaMallocPitch`, `cuMemAllocPitch`): rows are pitch bytes apart, not width.
    PitchRows {
        pitch: usize,
        height: usize,
    },
    /// `width * height * depth` (3D copies).
    Volume {
        width: usize,
        height: usize,
        depth: usize,
    },
}

impl BytesFrom {
    /// The highest argument index read.
    pub const fn max_arg(self) -> usize {
        match self {
            BytesFrom::Arg(i) => i,
            BytesFrom::Rect { width, height }
            | BytesFrom::PitchRows {
                pitch: width,
                height,
            } => max(width, height),
            BytesFrom::Volume {
                width,
                height,
                depth,
            } => max(max(width, height), depth),
        }
    }
}

const fn max(a: usize, b: usize) -> usize {
    if a > b { a } else { b }
}

/// Where a call's arguments come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arguments {
    /// Registers and, past the sixth, the stack.
    Registers,
    /// The fields of a structure the first argument points at, read by the kernel side at
    /// entry into the arguments, as the [`Descriptor`]'s layout says.
    Described(Descriptor),
    /// A batch: the first three arguments are arrays of destinations, sources and sizes, the
    /// fourth their length. The kernel side sends each element as a copy of its own, with
    /// (dst, src, size) as its first three arguments.
    Batch,
}

/// A structure describing a copy, read by the kernel side at the call's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Descriptor {
    /// The driver's `CUDA_MEMCPY2D` (`cuMemcpy2D_v2`, `cuMemcpy2DAsync_v2`).
    Memcpy2D,
    /// The driver's `CUDA_MEMCPY3D` (`cuMemcpy3D_v2`, `cuMemcpy3DAsync_v2`).
    Memcpy3D,
    /// The runtime's `cudaMemcpy3DParms` (`cudaMemcpy3D`, `cudaMemcpy3DAsync`).
    Memcpy3DParms,
}

/// Where a driver descriptor's fields land among the arguments ([`Semantics::DescribedCopy`]).
pub mod described {
    /// The source's `CUmemorytype` in the low 32 bits, the destination's in the high.
    pub const MEMORY_TYPES: usize = 0;
    pub const SRC_HOST: usize = 1;
    pub const SRC_DEVICE: usize = 2;
    pub const DST_HOST: usize = 3;
    pub const DST_DEVICE: usize = 4;
    pub const WIDTH: usize = 5;
    pub const HEIGHT: usize = 6;
    /// Zero for 2D copies.
    pub const DEPTH: usize = 7;
}

/// `CUmemorytype` values.
const MEMORY_HOST: u32 = 1;
const MEMORY_DEVICE: u32 = 2;
const MEMORY_ARRAY: u32 = 3;

impl Descriptor {
    pub const ALL: [Descriptor; 3] = [
        Descriptor::Memcpy2D,
        Descriptor::Memcpy3D,
        Descriptor::Memcpy3DParms,
    ];

    /// Its index in the kernel side's `DESCRIPTORS` map.
    pub const fn index(self) -> u8 {
        self as u8
    }

    /// The fields read, as (offset, bytes, argument, shift), from the CUDA headers' layouts
    /// (x86-64; stable across CUDA 11-13).
    const fn reads(self) -> &'static [(u16, u8, usize, u8)] {
        use described::*;
        match self {
            // srcXInBytes, srcY, srcMemoryType @16, srcHost @24, srcDevice @32, srcArray,
            // srcPitch, dstXInBytes, dstY, dstMemoryType @72, dstHost @80, dstDevice @88,
            // dstArray, dstPitch, WidthInBytes @112, Height @120.
            Descriptor::Memcpy2D => &[
                (16, 4, MEMORY_TYPES, 0),
                (72, 4, MEMORY_TYPES, 32),
                (24, 8, SRC_HOST, 0),
                (32, 8, SRC_DEVICE, 0),
                (80, 8, DST_HOST, 0),
                (88, 8, DST_DEVICE, 0),
                (112, 8, WIDTH, 0),
                (120, 8, HEIGHT, 0),
            ],
            // srcXInBytes, srcY, srcZ, srcLOD, srcMemoryType @32, srcHost @40, srcDevice
            // @48, srcArray, reserved0, srcPitch, srcHeight, dstXInBytes, dstY, dstZ,
            // dstLOD, dstMemoryType @120, dstHost @128, dstDevice @136, dstArray, reserved1,
            // dstPitch, dstHeight, WidthInBytes @176, Height @184, Depth @192.
            Descriptor::Memcpy3D => &[
                (32, 4, MEMORY_TYPES, 0),
                (120, 4, MEMORY_TYPES, 32),
                (40, 8, SRC_HOST, 0),
                (48, 8, SRC_DEVICE, 0),
                (128, 8, DST_HOST, 0),
                (136, 8, DST_DEVICE, 0),
                (176, 8, WIDTH, 0),
                (184, 8, HEIGHT, 0),
                (192, 8, DEPTH, 0),
            ],
            // srcArray, srcPos, srcPtr {ptr @32, pitch, xsize, ysize}, dstArray, dstPos,
            // dstPtr {ptr @96, ...}, extent {width @128, height @136, depth @144}, kind @152:
            // read as (src, dst, width, height, depth, kind).
            Descriptor::Memcpy3DParms => &[
                (32, 8, 0, 0),
                (96, 8, 1, 0),
                (128, 8, 2, 0),
                (136, 8, 3, 0),
                (144, 8, 4, 0),
                (152, 4, 5, 0),
            ],
        }
    }

    /// The layout the agent gives the kernel side.
    pub fn layout(self) -> DescriptorLayout {
        let mut layout = DescriptorLayout::default();
        for (slot, &(offset, bytes, arg, shift)) in layout.reads.iter_mut().zip(self.reads()) {
            *slot = FieldRead {
                offset,
                bytes,
                arg: arg as u8,
                shift,
                _pad: [0; 3],
            };
        }
        layout
    }
}

/// Which side of a described copy a `CUmemorytype` and its two pointers name: the pointer,
/// and whether it is device memory (`None`: unified, known only from the address).
pub fn described_side(memory_type: u32, host: u64, device: u64) -> (u64, Option<bool>) {
    match memory_type {
        MEMORY_HOST => (host, Some(false)),
        MEMORY_DEVICE | MEMORY_ARRAY => (device, Some(true)),
        _ => (device, None),
    }
}

/// Where an allocation function puts the new pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PtrFrom {
    /// Written through the out-parameter at this index (`cudaMalloc(&ptr, size)`).
    Out(u8),
    /// Returned (`hotpin_malloc(size)`).
    Ret,
    /// Passed in, at this argument index (`cuMemMap(ptr, size, ...)` backs a reserved range).
    Arg(u8),
}

/// What a call does, with the argument indexes to read it from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Semantics {
    /// A new allocation of `size` bytes at the pointer `ptr` gives.
    Alloc {
        ptr: PtrFrom,
        size: BytesFrom,
        space: AllocSpace,
    },
    /// `realloc(ptr, size)`: the block at `ptr` (if any) ends, a new one of `size` starts at the
    /// returned pointer.
    Realloc {
        ptr: usize,
        size: usize,
    },
    Free {
        ptr: usize,
        space: AllocSpace,
    },
    Register {
        ptr: usize,
        size: usize,
    },
    Unregister {
        ptr: usize,
    },
    /// The allocation about to be handed out at `ptr` is pinned (hotpin's marker).
    MarkPinned {
        ptr: usize,
    },
    Copy {
        dst: usize,
        src: usize,
        bytes: BytesFrom,
        direction: DirectionFrom,
    },
    /// A copy described by a driver structure (`CUDA_MEMCPY2D`/`3D`) whose fields the kernel
    /// side read into the arguments at [`described`]'s places: each side is host, device or
    /// unified by its memory type.
    DescribedCopy {
        bytes: BytesFrom,
    },
    /// Managed memory at `ptr` migrated ahead of use (`cudaMemPrefetchAsync`): `bytes` bytes
    /// to the place the `location` argument names.
    Prefetch {
        ptr: usize,
        bytes: usize,
        location: usize,
    },
    /// A call that changes no host or device memory the history tracks (cuMemCreate makes a
    /// handle that cuMemMap then maps; cuMemRelease drops it): counted, nothing more.
    Counted,
}

/// Where a prefetch sends memory, from a `cudaMemLocation` passed by value (CUDA 12.2+ and
/// 13: `{type, id}` in one register, type 1 a device, 2-4 the host) or the older `int
/// dstDevice` (`cudaCpuDeviceId`, -1, for the host). Both fit one reading: the low 32 bits
/// are -1 or 2-4 for the host, anything else a device. (With the old signature, devices 2-4
/// would read as the host; the CUDA 13 libraries have the new one.)
pub fn prefetch_to_device(location: u64) -> bool {
    !matches!(location as u32 as i32, -1 | 2..=4)
}

/// One probed function: a uprobe at its entry and a uretprobe at its return.
#[derive(Clone, Copy, Debug)]
pub struct CallProbe {
    pub kind: EventKind,
    pub library: Library,
    /// The exported symbols: the function and its `_ptds`/`_ptsz`/`_v2` variants. Each one the
    /// library exports is probed; the rest are reported unavailable.
    pub symbols: &'static [&'static str],
    pub feature: KernelFeature,
    pub default_on: bool,
    pub semantics: Semantics,
    /// Arguments beyond the sixth, read from the stack at entry.
    pub stack_args: u8,
    /// Where the arguments come from: registers, or user memory read at entry.
    pub arguments: Arguments,
    /// The argument holding the stream an asynchronous copy is queued on, where it is
    /// captured (not for copies read from user memory, nor past the eighth argument).
    pub stream: Option<u8>,
}

impl CallProbe {
    /// The cookie the kernel programs receive for this function.
    pub fn cookie(&self) -> ProbeCookie {
        let out_arg = match self.semantics {
            Semantics::Alloc {
                ptr: PtrFrom::Out(index),
                ..
            } => Some(index),
            _ => None,
        };
        let want_site = matches!(
            self.semantics,
            Semantics::Alloc { .. } | Semantics::Register { .. } | Semantics::Realloc { .. }
        );
        let second_out = match self.semantics {
            Semantics::Alloc {
                size: BytesFrom::PitchRows { pitch, .. },
                ..
            } => Some(pitch as u8),
            _ => None,
        };
        let (size, count) = match self.semantics {
            Semantics::Alloc { size, .. } => match size {
                BytesFrom::Arg(i) => (Some(i as u8), None),
                BytesFrom::Rect { width, height } => (Some(width as u8), Some(height as u8)),
                BytesFrom::PitchRows { .. } | BytesFrom::Volume { .. } => (None, None),
            },
            Semantics::Realloc { size, .. } => (Some(size as u8), None),
            _ => (None, None),
        };
        let cookie = ProbeCookie::new(
            self.kind,
            out_arg,
            self.library.layer(),
            self.stack_args,
            want_site,
        )
        .with_size_args(size, count)
        .with_second_out(second_out);
        let cookie = match self.arguments {
            Arguments::Registers => cookie,
            Arguments::Described(descriptor) => cookie.with_descriptor(Some(descriptor.index())),
            Arguments::Batch => cookie.batch(),
        };
        if self.at_entry() {
            cookie.at_entry()
        } else {
            cookie
        }
    }

    /// Whether the call is probed at entry only (no uretprobe): the driver's copies. Their
    /// arguments are the whole event; a runtime copy around one is probed at entry and
    /// return, which marks the driver's nested. One probe hit fewer per copy (about 0.35 µs
    /// on the H100, docs/bench/history.md); a failed driver copy is counted as done.
    pub fn at_entry(&self) -> bool {
        matches!(
            self.semantics,
            Semantics::Copy { .. } | Semantics::DescribedCopy { .. }
        ) && self.library == Library::CudaDriver
    }
}

use AllocSpace::{Device, DeviceReserve, Host, Managed, PinnedHost};
use CopyDirection::{DeviceToDevice, DeviceToHost, HostToDevice};
use Library::{CudaDriver, CudaRuntime, Hotpin, Libc};
use PtrFrom::{Out, Ret};

const fn call(
    kind: EventKind,
    library: Library,
    symbols: &'static [&'static str],
    semantics: Semantics,
) -> CallProbe {
    CallProbe {
        kind,
        library,
        symbols,
        feature: KernelFeature::UprobeWithCookie,
        default_on: true,
        semantics,
        stack_args: 0,
        arguments: Arguments::Registers,
        stream: None,
    }
}

/// An asynchronous call whose stream is argument `index`.
const fn on_stream(index: u8, probe: CallProbe) -> CallProbe {
    CallProbe {
        stream: Some(index),
        ..probe
    }
}

/// A call whose arguments are read from the structure its first argument points at.
const fn described_call(descriptor: Descriptor, probe: CallProbe) -> CallProbe {
    CallProbe {
        arguments: Arguments::Described(descriptor),
        ..probe
    }
}

/// The runtime's `cudaMemcpy` and `cudaMemcpyAsync`: off by default (`--runtime-copies`).
/// Each makes one driver copy (`cuMemcpyHtoD_v2`, `cuMemcpyDtoHAsync_v2`, ... or the unified
/// `cuMemcpy`/`cuMemcpyAsync` for `cudaMemcpyDefault`), probed at entry, which carries the same
/// copy: one probe hit per copy instead of three (about 1 µs each on the H100 machine;
/// docs/bench/history.md). With them on, a copy that fails in the driver is told apart.
const fn runtime_copy(
    kind: EventKind,
    symbols: &'static [&'static str],
    semantics: Semantics,
) -> CallProbe {
    CallProbe {
        default_on: false,
        ..call(kind, CudaRuntime, symbols, semantics)
    }
}

/// A libc allocation function: off by default (`--libc-malloc`), host memory.
const fn libc_alloc(
    kind: EventKind,
    symbols: &'static [&'static str],
    ptr: PtrFrom,
    size: BytesFrom,
) -> CallProbe {
    CallProbe {
        default_on: false,
        ..call(
            kind,
            Libc,
            symbols,
            Semantics::Alloc {
                ptr,
                size,
                space: AllocSpace::Host,
            },
        )
    }
}

const fn copy(dst: usize, src: usize, bytes: usize, direction: DirectionFrom) -> Semantics {
    Semantics::Copy {
        dst,
        src,
        bytes: BytesFrom::Arg(bytes),
        direction,
    }
}

const fn alloc(ptr: PtrFrom, size: BytesFrom, space: AllocSpace) -> Semantics {
    Semantics::Alloc { ptr, size, space }
}

/// A 2D copy to or from a CUDA array (`dst` and `src` are the array handle and the pointer,
/// whichever way it goes); width (the 6th argument), height (the 7th, on the stack) and kind
/// (the 8th) are at the same places both ways.
const fn array_copy(
    kind: EventKind,
    symbols: &'static [&'static str],
    (dst, src): (usize, usize),
) -> CallProbe {
    CallProbe {
        stack_args: 2,
        ..call(
            kind,
            CudaRuntime,
            symbols,
            Semantics::Copy {
                dst,
                src,
                bytes: BytesFrom::Rect {
                    width: 5,
                    height: 6,
                },
                direction: DirectionFrom::KindArg(7),
            },
        )
    }
}

/// `cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind[, stream])`: the 7th and 8th
/// arguments are on the stack.
const fn copy_2d(kind: EventKind, symbols: &'static [&'static str], stack_args: u8) -> CallProbe {
    CallProbe {
        stack_args,
        ..call(
            kind,
            CudaRuntime,
            symbols,
            Semantics::Copy {
                dst: 0,
                src: 2,
                bytes: BytesFrom::Rect {
                    width: 4,
                    height: 5,
                },
                direction: DirectionFrom::KindArg(6),
            },
        )
    }
}

/// Every probed CUDA function.
pub static CALL_PROBES: &[CallProbe] = &[
    // The runtime API.
    call(
        EventKind::CudaMalloc,
        CudaRuntime,
        &["cudaMalloc"],
        Semantics::Alloc {
            ptr: Out(0),
            size: BytesFrom::Arg(1),
            space: Device,
        },
    ),
    call(
        EventKind::CudaFree,
        CudaRuntime,
        &["cudaFree"],
        Semantics::Free {
            ptr: 0,
            space: Device,
        },
    ),
    call(
        EventKind::CudaMallocHost,
        CudaRuntime,
        &["cudaMallocHost"],
        Semantics::Alloc {
            ptr: Out(0),
            size: BytesFrom::Arg(1),
            space: PinnedHost,
        },
    ),
    call(
        EventKind::CudaHostAlloc,
        CudaRuntime,
        &["cudaHostAlloc"],
        Semantics::Alloc {
            ptr: Out(0),
            size: BytesFrom::Arg(1),
            space: PinnedHost,
        },
    ),
    call(
        EventKind::CudaFreeHost,
        CudaRuntime,
        &["cudaFreeHost"],
        Semantics::Free {
            ptr: 0,
            space: PinnedHost,
        },
    ),
    call(
        EventKind::CudaHostRegister,
        CudaRuntime,
        &["cudaHostRegister"],
        Semantics::Register { ptr: 0, size: 1 },
    ),
    call(
        EventKind::CudaHostUnregister,
        CudaRuntime,
        &["cudaHostUnregister"],
        Semantics::Unregister { ptr: 0 },
    ),
    runtime_copy(
        EventKind::CudaMemcpy,
        &["cudaMemcpy", "cudaMemcpy_ptds"],
        copy(0, 1, 2, DirectionFrom::KindArg(3)),
    ),
    on_stream(
        4,
        runtime_copy(
            EventKind::CudaMemcpyAsync,
            &["cudaMemcpyAsync", "cudaMemcpyAsync_ptsz"],
            copy(0, 1, 2, DirectionFrom::KindArg(3)),
        ),
    ),
    copy_2d(
        EventKind::CudaMemcpy2D,
        &["cudaMemcpy2D", "cudaMemcpy2D_ptds"],
        1,
    ),
    on_stream(
        7,
        copy_2d(
            EventKind::CudaMemcpy2DAsync,
            &["cudaMemcpy2DAsync", "cudaMemcpy2DAsync_ptsz"],
            2,
        ),
    ),
    // cudaMemcpy3D(const cudaMemcpy3DParms *p[, stream]): probed like cudaMemcpy2D, its
    // driver copy nested. Extent widths are bytes for linear memory (elements for arrays).
    described_call(
        Descriptor::Memcpy3DParms,
        call(
            EventKind::CudaMemcpy3D,
            CudaRuntime,
            &["cudaMemcpy3D", "cudaMemcpy3D_ptds"],
            Semantics::Copy {
                dst: 1,
                src: 0,
                bytes: BytesFrom::Volume {
                    width: 2,
                    height: 3,
                    depth: 4,
                },
                direction: DirectionFrom::KindArg(5),
            },
        ),
    ),
    described_call(
        Descriptor::Memcpy3DParms,
        call(
            EventKind::CudaMemcpy3DAsync,
            CudaRuntime,
            &["cudaMemcpy3DAsync", "cudaMemcpy3DAsync_ptsz"],
            Semantics::Copy {
                dst: 1,
                src: 0,
                bytes: BytesFrom::Volume {
                    width: 2,
                    height: 3,
                    depth: 4,
                },
                direction: DirectionFrom::KindArg(5),
            },
        ),
    ),
    // The driver API.
    call(
        EventKind::CuMemAlloc,
        CudaDriver,
        &["cuMemAlloc_v2"],
        Semantics::Alloc {
            ptr: Out(0),
            size: BytesFrom::Arg(1),
            space: Device,
        },
    ),
    call(
        EventKind::CuMemFree,
        CudaDriver,
        &["cuMemFree_v2"],
        Semantics::Free {
            ptr: 0,
            space: Device,
        },
    ),
    call(
        EventKind::CuMemAllocHost,
        CudaDriver,
        &["cuMemAllocHost_v2"],
        Semantics::Alloc {
            ptr: Out(0),
            size: BytesFrom::Arg(1),
            space: PinnedHost,
        },
    ),
    call(
        EventKind::CuMemHostAlloc,
        CudaDriver,
        &["cuMemHostAlloc"],
        Semantics::Alloc {
            ptr: Out(0),
            size: BytesFrom::Arg(1),
            space: PinnedHost,
        },
    ),
    call(
        EventKind::CuMemFreeHost,
        CudaDriver,
        &["cuMemFreeHost"],
        Semantics::Free {
            ptr: 0,
            space: PinnedHost,
        },
    ),
    call(
        EventKind::CuMemHostRegister,
        CudaDriver,
        &["cuMemHostRegister_v2"],
        Semantics::Register { ptr: 0, size: 1 },
    ),
    call(
        EventKind::CuMemHostUnregister,
        CudaDriver,
        &["cuMemHostUnregister"],
        Semantics::Unregister { ptr: 0 },
    ),
    call(
        EventKind::CuMemcpyHtoD,
        CudaDriver,
        &["cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds"],
        copy(0, 1, 2, DirectionFrom::Fixed(HostToDevice)),
    ),
    call(
        EventKind::CuMemcpyDtoH,
        CudaDriver,
        &["cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds"],
        copy(0, 1, 2, DirectionFrom::Fixed(DeviceToHost)),
    ),
    on_stream(
        3,
        call(
            EventKind::CuMemcpyHtoDAsync,
            CudaDriver,
            &["cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz"],
            copy(0, 1, 2, DirectionFrom::Fixed(HostToDevice)),
        ),
    ),
    on_stream(
        3,
        call(
            EventKind::CuMemcpyDtoHAsync,
            CudaDriver,
            &["cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2_ptsz"],
            copy(0, 1, 2, DirectionFrom::Fixed(DeviceToHost)),
        ),
    ),
    call(
        EventKind::CuMemcpy,
        CudaDriver,
        &["cuMemcpy", "cuMemcpy_ptds"],
        copy(0, 1, 2, DirectionFrom::Pointers),
    ),
    call(
        EventKind::HotpinMalloc,
        Hotpin,
        // The functions hotpin_malloc's stub jumps to, with the call site in hand: a uretprobe
        // on the stub itself would replace the return address the stub reads, so a program
        // allocating while any tracer is attached would lose its call sites.
        &["hotpin_malloc_at"],
        Semantics::Alloc {
            ptr: Ret,
            size: BytesFrom::Arg(0),
            space: Host,
        },
    ),
    call(
        EventKind::HotpinFree,
        Hotpin,
        &["hotpin_free_at"],
        Semantics::Free {
            ptr: 0,
            space: Host,
        },
    ),
    call(
        EventKind::HotpinPinned,
        Hotpin,
        &["hotpin_pinned"],
        Semantics::MarkPinned { ptr: 0 },
    ),
    libc_alloc(
        EventKind::Malloc,
        &["malloc"],
        PtrFrom::Ret,
        BytesFrom::Arg(0),
    ),
    libc_alloc(
        EventKind::Calloc,
        &["calloc"],
        PtrFrom::Ret,
        BytesFrom::Rect {
            width: 1,
            height: 0,
        },
    ),
    CallProbe {
        default_on: false,
        ..call(
            EventKind::Realloc,
            Libc,
            &["realloc"],
            Semantics::Realloc { ptr: 0, size: 1 },
        )
    },
    libc_alloc(
        EventKind::PosixMemalign,
        &["posix_memalign"],
        PtrFrom::Out(0),
        BytesFrom::Arg(2),
    ),
    libc_alloc(
        EventKind::AlignedAlloc,
        &["aligned_alloc"],
        PtrFrom::Ret,
        BytesFrom::Arg(1),
    ),
    libc_alloc(
        EventKind::Memalign,
        &["memalign"],
        PtrFrom::Ret,
        BytesFrom::Arg(1),
    ),
    CallProbe {
        default_on: false,
        ..call(
            EventKind::Free,
            Libc,
            &["free"],
            Semantics::Free {
                ptr: 0,
                space: Host,
            },
        )
    },
    on_stream(
        3,
        call(
            EventKind::CuMemcpyAsync,
            CudaDriver,
            &["cuMemcpyAsync", "cuMemcpyAsync_ptsz"],
            copy(0, 1, 2, DirectionFrom::Pointers),
        ),
    ),
    // The rest of the runtime's memory API.
    call(
        EventKind::CudaMallocPitch,
        CudaRuntime,
        &["cudaMallocPitch"],
        alloc(
            Out(0),
            BytesFrom::PitchRows {
                pitch: 1,
                height: 3,
            },
            Device,
        ),
    ),
    call(
        EventKind::CudaMallocManaged,
        CudaRuntime,
        &["cudaMallocManaged"],
        alloc(Out(0), BytesFrom::Arg(1), Managed),
    ),
    call(
        EventKind::CudaMallocAsync,
        CudaRuntime,
        &["cudaMallocAsync", "cudaMallocAsync_ptsz"],
        alloc(Out(0), BytesFrom::Arg(1), Device),
    ),
    call(
        EventKind::CudaFreeAsync,
        CudaRuntime,
        &["cudaFreeAsync", "cudaFreeAsync_ptsz"],
        Semantics::Free {
            ptr: 0,
            space: Device,
        },
    ),
    call(
        EventKind::CudaMallocFromPoolAsync,
        CudaRuntime,
        &["cudaMallocFromPoolAsync", "cudaMallocFromPoolAsync_ptsz"],
        alloc(Out(0), BytesFrom::Arg(1), Device),
    ),
    // cudaMemcpyPeer(dst, dstDevice, src, srcDevice, count[, stream]).
    call(
        EventKind::CudaMemcpyPeer,
        CudaRuntime,
        &["cudaMemcpyPeer"],
        copy(0, 2, 4, DirectionFrom::Fixed(DeviceToDevice)),
    ),
    on_stream(
        5,
        call(
            EventKind::CudaMemcpyPeerAsync,
            CudaRuntime,
            &["cudaMemcpyPeerAsync"],
            copy(0, 2, 4, DirectionFrom::Fixed(DeviceToDevice)),
        ),
    ),
    // cudaMemcpyToSymbol(symbol, src, count, offset, kind[, stream]): the symbol is device
    // memory named by its host shadow; the kind gives the direction.
    call(
        EventKind::CudaMemcpyToSymbol,
        CudaRuntime,
        &["cudaMemcpyToSymbol", "cudaMemcpyToSymbol_ptds"],
        copy(0, 1, 2, DirectionFrom::KindArg(4)),
    ),
    on_stream(
        5,
        call(
            EventKind::CudaMemcpyToSymbolAsync,
            CudaRuntime,
            &["cudaMemcpyToSymbolAsync", "cudaMemcpyToSymbolAsync_ptsz"],
            copy(0, 1, 2, DirectionFrom::KindArg(4)),
        ),
    ),
    // cudaMemcpyFromSymbol(dst, symbol, count, offset, kind[, stream]).
    call(
        EventKind::CudaMemcpyFromSymbol,
        CudaRuntime,
        &["cudaMemcpyFromSymbol", "cudaMemcpyFromSymbol_ptds"],
        copy(0, 1, 2, DirectionFrom::KindArg(4)),
    ),
    on_stream(
        5,
        call(
            EventKind::CudaMemcpyFromSymbolAsync,
            CudaRuntime,
            &[
                "cudaMemcpyFromSymbolAsync",
                "cudaMemcpyFromSymbolAsync_ptsz",
            ],
            copy(0, 1, 2, DirectionFrom::KindArg(4)),
        ),
    ),
    // cudaMemcpy2DToArray(dst, wOffset, hOffset, src, spitch, width, height, kind[, stream]):
    // height and kind on the stack.
    array_copy(
        EventKind::CudaMemcpy2DToArray,
        &["cudaMemcpy2DToArray", "cudaMemcpy2DToArray_ptds"],
        (0, 3),
    ),
    array_copy(
        EventKind::CudaMemcpy2DToArrayAsync,
        &["cudaMemcpy2DToArrayAsync", "cudaMemcpy2DToArrayAsync_ptsz"],
        (0, 3),
    ),
    // cudaMemcpy2DFromArray(dst, dpitch, src, wOffset, hOffset, width, height, kind[, stream]).
    array_copy(
        EventKind::CudaMemcpy2DFromArray,
        &["cudaMemcpy2DFromArray", "cudaMemcpy2DFromArray_ptds"],
        (0, 2),
    ),
    array_copy(
        EventKind::CudaMemcpy2DFromArrayAsync,
        &[
            "cudaMemcpy2DFromArrayAsync",
            "cudaMemcpy2DFromArrayAsync_ptsz",
        ],
        (0, 2),
    ),
    // cudaMemPrefetchAsync(ptr, count, location, flags, stream) (CUDA 13).
    call(
        EventKind::CudaMemPrefetchAsync,
        CudaRuntime,
        &["cudaMemPrefetchAsync", "cudaMemPrefetchAsync_ptsz"],
        Semantics::Prefetch {
            ptr: 0,
            bytes: 1,
            location: 2,
        },
    ),
    // The rest of the driver's.
    call(
        EventKind::CuMemAllocPitch,
        CudaDriver,
        &["cuMemAllocPitch_v2"],
        alloc(
            Out(0),
            BytesFrom::PitchRows {
                pitch: 1,
                height: 3,
            },
            Device,
        ),
    ),
    call(
        EventKind::CuMemAllocManaged,
        CudaDriver,
        &["cuMemAllocManaged"],
        alloc(Out(0), BytesFrom::Arg(1), Managed),
    ),
    call(
        EventKind::CuMemAllocAsync,
        CudaDriver,
        &["cuMemAllocAsync", "cuMemAllocAsync_ptsz"],
        alloc(Out(0), BytesFrom::Arg(1), Device),
    ),
    call(
        EventKind::CuMemFreeAsync,
        CudaDriver,
        &["cuMemFreeAsync", "cuMemFreeAsync_ptsz"],
        Semantics::Free {
            ptr: 0,
            space: Device,
        },
    ),
    call(
        EventKind::CuMemAllocFromPoolAsync,
        CudaDriver,
        &["cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz"],
        alloc(Out(0), BytesFrom::Arg(1), Device),
    ),
    // cuMemAddressReserve(&ptr, size, alignment, addr, flags).
    call(
        EventKind::CuMemAddressReserve,
        CudaDriver,
        &["cuMemAddressReserve"],
        alloc(Out(0), BytesFrom::Arg(1), DeviceReserve),
    ),
    call(
        EventKind::CuMemAddressFree,
        CudaDriver,
        &["cuMemAddressFree"],
        Semantics::Free {
            ptr: 0,
            space: DeviceReserve,
        },
    ),
    call(
        EventKind::CuMemCreate,
        CudaDriver,
        &["cuMemCreate"],
        Semantics::Counted,
    ),
    call(
        EventKind::CuMemRelease,
        CudaDriver,
        &["cuMemRelease"],
        Semantics::Counted,
    ),
    // cuMemMap(ptr, size, offset, handle, flags): device memory at ptr from now on.
    call(
        EventKind::CuMemMap,
        CudaDriver,
        &["cuMemMap"],
        alloc(PtrFrom::Arg(0), BytesFrom::Arg(1), Device),
    ),
    call(
        EventKind::CuMemUnmap,
        CudaDriver,
        &["cuMemUnmap"],
        Semantics::Free {
            ptr: 0,
            space: Device,
        },
    ),
    // cuMemcpyPeer(dst, dstContext, src, srcContext, count[, stream]).
    call(
        EventKind::CuMemcpyPeer,
        CudaDriver,
        &["cuMemcpyPeer", "cuMemcpyPeer_ptds"],
        copy(0, 2, 4, DirectionFrom::Fixed(DeviceToDevice)),
    ),
    on_stream(
        5,
        call(
            EventKind::CuMemcpyPeerAsync,
            CudaDriver,
            &["cuMemcpyPeerAsync", "cuMemcpyPeerAsync_ptsz"],
            copy(0, 2, 4, DirectionFrom::Fixed(DeviceToDevice)),
        ),
    ),
    call(
        EventKind::CuMemcpyDtoD,
        CudaDriver,
        &["cuMemcpyDtoD_v2", "cuMemcpyDtoD_v2_ptds"],
        copy(0, 1, 2, DirectionFrom::Fixed(DeviceToDevice)),
    ),
    on_stream(
        3,
        call(
            EventKind::CuMemcpyDtoDAsync,
            CudaDriver,
            &["cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync_v2_ptsz"],
            copy(0, 1, 2, DirectionFrom::Fixed(DeviceToDevice)),
        ),
    ),
    call(
        EventKind::CuMemPrefetchAsync,
        CudaDriver,
        &["cuMemPrefetchAsync_v2", "cuMemPrefetchAsync_v2_ptsz"],
        Semantics::Prefetch {
            ptr: 0,
            bytes: 1,
            location: 2,
        },
    ),
    // Copies described by a structure, read at entry (the runtime's 2D and 3D copies make
    // them too, nested).
    described_call(
        Descriptor::Memcpy2D,
        call(
            EventKind::CuMemcpy2D,
            CudaDriver,
            &[
                "cuMemcpy2D_v2",
                "cuMemcpy2D_v2_ptds",
                "cuMemcpy2DUnaligned_v2",
                "cuMemcpy2DUnaligned_v2_ptds",
            ],
            described_copy_2d(),
        ),
    ),
    described_call(
        Descriptor::Memcpy2D,
        call(
            EventKind::CuMemcpy2DAsync,
            CudaDriver,
            &["cuMemcpy2DAsync_v2", "cuMemcpy2DAsync_v2_ptsz"],
            described_copy_2d(),
        ),
    ),
    described_call(
        Descriptor::Memcpy3D,
        call(
            EventKind::CuMemcpy3D,
            CudaDriver,
            &["cuMemcpy3D_v2", "cuMemcpy3D_v2_ptds"],
            described_copy_3d(),
        ),
    ),
    described_call(
        Descriptor::Memcpy3D,
        call(
            EventKind::CuMemcpy3DAsync,
            CudaDriver,
            &["cuMemcpy3DAsync_v2", "cuMemcpy3DAsync_v2_ptsz"],
            described_copy_3d(),
        ),
    ),
    // cuMemcpyBatchAsync(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, [failIdx,]
    // stream): CUDA 12.8 has failIdx, 13.0's `_v2` not; the first four are the same. The
    // runtime's cudaMemcpyBatchAsync makes one.
    CallProbe {
        arguments: Arguments::Batch,
        ..call(
            EventKind::CuMemcpyBatchAsync,
            CudaDriver,
            &[
                "cuMemcpyBatchAsync",
                "cuMemcpyBatchAsync_ptsz",
                "cuMemcpyBatchAsync_v2",
                "cuMemcpyBatchAsync_v2_ptsz",
            ],
            copy(0, 1, 2, DirectionFrom::Pointers),
        )
    },
];

const fn described_copy_2d() -> Semantics {
    Semantics::DescribedCopy {
        bytes: BytesFrom::Rect {
            width: described::WIDTH,
            height: described::HEIGHT,
        },
    }
}

const fn described_copy_3d() -> Semantics {
    Semantics::DescribedCopy {
        bytes: BytesFrom::Volume {
            width: described::WIDTH,
            height: described::HEIGHT,
            depth: described::DEPTH,
        },
    }
}

/// A kernel tracepoint the tracer attaches one program to.
#[derive(Clone, Copy, Debug)]
pub struct TracepointProbe {
    /// The program in tracer-ebpf.
    pub program: &'static str,
    pub category: &'static str,
    pub name: &'static str,
    pub feature: KernelFeature,
    pub default_on: bool,
    /// The record fields its program reads (`tracer_common::field::*`), found in the running
    /// kernel's format files: a probe whose fields are not there is not attached.
    pub fields: &'static [u32],
    /// What it is for, shown by `tracer probes`.
    pub purpose: &'static str,
}

/// Every tracepoint probe. The openat pair notices a target opening a CUDA library (or hotpin)
/// so the agent attaches before the library runs (PyTorch loads CUDA lazily with dlopen). The
/// host memory syscalls record anonymous mappings and the heap, so copies from pageable memory
/// are credited to the mapping that holds them; page faults (off by default) count first
/// touches per allocation; the ioctl probe counts what the process asks the NVIDIA driver.
pub static TRACEPOINT_PROBES: &[TracepointProbe] = &[
    TracepointProbe {
        program: "library_open_sys_enter_openat",
        category: "syscalls",
        name: "sys_enter_openat",
        feature: KernelFeature::SyscallTracepoint,
        default_on: true,
        fields: &[field::OPENAT_FILENAME],
        purpose: "notice a CUDA library or hotpin being opened",
    },
    TracepointProbe {
        program: "library_open_sys_exit_openat",
        category: "syscalls",
        name: "sys_exit_openat",
        feature: KernelFeature::SyscallTracepoint,
        default_on: true,
        fields: &[field::SYSCALL_RET],
        purpose: "hold the process until the library's probes are attached",
    },
    TracepointProbe {
        program: "host_memory_sys_enter",
        category: "syscalls",
        name: "sys_enter_mmap",
        feature: KernelFeature::SyscallTracepoint,
        default_on: true,
        fields: &[field::SYSCALL_NR, field::SYSCALL_ARGS],
        purpose: "mmap: arguments",
    },
    TracepointProbe {
        program: MAPPING_LINES_PROGRAM,
        category: "syscalls",
        name: "sys_enter_mmap",
        feature: KernelFeature::SyscallTracepoint,
        // Where Python lines are read (`ProbeOptions::python_lines`, on by default).
        default_on: false,
        fields: &[field::SYSCALL_ARGS],
        purpose: "mmap: the Python lines of a large anonymous mapping",
    },
    TracepointProbe {
        program: "host_memory_sys_exit",
        category: "syscalls",
        name: "sys_exit_mmap",
        feature: KernelFeature::SyscallTracepoint,
        default_on: true,
        fields: &[field::SYSCALL_EXIT_NR, field::SYSCALL_RET],
        purpose: "mmap: host memory mapped, unmapped or moved",
    },
    TracepointProbe {
        program: "host_memory_sys_enter",
        category: "syscalls",
        name: "sys_enter_munmap",
        feature: KernelFeature::SyscallTracepoint,
        default_on: true,
        fields: &[field::SYSCALL_NR, field::SYSCALL_ARGS],
        purpose: "munmap: arguments",
    },
    TracepointProbe {
        program: "host_memory_sys_exit",
        category: "syscalls",
        name: "sys_exit_munmap",
        feature: KernelFeature::SyscallTracepoint,
        default_on: true,
        fields: &[field::SYSCALL_EXIT_NR, field::SYSCALL_RET],
        purpose: "munmap: host memory mapped, unmapped or moved",
    },
    TracepointProbe {
        program: "host_memory_sys_enter",
        category: "syscalls",
        name: "sys_enter_mremap",
        feature: KernelFeature::SyscallTracepoint,
        default_on: true,
        fields: &[field::SYSCALL_NR, field::SYSCALL_ARGS],
        purpose: "mremap: arguments",
    },
    TracepointProbe {
        program: "host_memory_sys_exit",
        category: "syscalls",
        name: "sys_exit_mremap",
        feature: KernelFeature::SyscallTracepoint,
        default_on: true,
        fields: &[field::SYSCALL_EXIT_NR, field::SYSCALL_RET],
        purpose: "mremap: host memory mapped, unmapped or moved",
    },
    TracepointProbe {
        program: "host_memory_sys_enter",
        category: "syscalls",
        name: "sys_enter_brk",
        feature: KernelFeature::SyscallTracepoint,
        default_on: true,
        fields: &[field::SYSCALL_NR, field::SYSCALL_ARGS],
        purpose: "brk: arguments",
    },
    TracepointProbe {
        program: "host_memory_sys_exit",
        category: "syscalls",
        name: "sys_exit_brk",
        feature: KernelFeature::SyscallTracepoint,
        default_on: true,
        fields: &[field::SYSCALL_EXIT_NR, field::SYSCALL_RET],
        purpose: "brk: host memory mapped, unmapped or moved",
    },
    TracepointProbe {
        program: "page_fault_user",
        category: "exceptions",
        name: "page_fault_user",
        feature: KernelFeature::Tracepoint,
        default_on: false,
        fields: &[field::FAULT_ADDRESS],
        purpose: "user page faults, counted against allocations (--page-faults)",
    },
    TracepointProbe {
        program: "nvidia_ioctl_sys_enter",
        category: "syscalls",
        name: "sys_enter_ioctl",
        feature: KernelFeature::SyscallTracepoint,
        default_on: true,
        fields: &[field::IOCTL_FD, field::IOCTL_CMD],
        purpose: "ioctls of the NVIDIA driver's kind, counted",
    },
    TracepointProbe {
        program: "process_fork_task_newtask",
        category: "task",
        name: "task_newtask",
        feature: KernelFeature::Tracepoint,
        default_on: true,
        fields: &[field::NEWTASK_PID, field::NEWTASK_CLONE_FLAGS],
        purpose: "follow child processes from their first instruction",
    },
];

/// The page-fault program, off unless asked for.
pub const PAGE_FAULT_PROGRAM: &str = "page_fault_user";
/// The program that sends the Python lines of large anonymous mappings.
pub const MAPPING_LINES_PROGRAM: &str = "mapping_lines_sys_enter_mmap";

/// A kprobe on a kernel function.
#[derive(Clone, Copy, Debug)]
pub struct KprobeProbe {
    /// The program in tracer-ebpf.
    pub program: &'static str,
    /// The kernel function.
    pub function: &'static str,
    pub feature: KernelFeature,
    pub default_on: bool,
    pub purpose: &'static str,
}

/// The NVIDIA driver's own page pinning, seen from the kernel where kprobes exist: pages a
/// target has pinned by any route (cudaHostRegister, the driver's staging), counted in the
/// history's statistics.
pub static KPROBE_PROBES: &[KprobeProbe] = &[
    KprobeProbe {
        program: "driver_pages_os_lock_user_pages",
        function: "os_lock_user_pages",
        feature: KernelFeature::Kprobe,
        default_on: true,
        purpose: "pages the NVIDIA driver pins for a target",
    },
    KprobeProbe {
        program: "driver_pages_os_unlock_user_pages",
        function: "os_unlock_user_pages",
        feature: KernelFeature::Kprobe,
        default_on: true,
        purpose: "pages the NVIDIA driver unpins",
    },
];

/// The name of the function an event kind stands for (its first symbol).
pub fn function_name(kind: EventKind) -> &'static str {
    call_probe(kind).map_or("unknown", |probe| probe.symbols[0])
}

/// The registry row for an event kind.
pub fn call_probe(kind: EventKind) -> Option<&'static CallProbe> {
    CALL_PROBES.iter().find(|probe| probe.kind == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_exactly_one_row() {
        for kind in EventKind::ALL.iter().filter(|k| k.is_call()) {
            let rows = CALL_PROBES.iter().filter(|p| p.kind == *kind).count();
            assert_eq!(rows, 1, "{kind:?} has {rows} registry rows");
        }
    }

    #[test]
    fn argument_indexes_fit_the_captured_arguments() {
        for probe in CALL_PROBES {
            let max = match probe.semantics {
                Semantics::Alloc { ptr, size, .. } => {
                    let size = size.max_arg();
                    match ptr {
                        PtrFrom::Out(index) | PtrFrom::Arg(index) => (index as usize).max(size),
                        PtrFrom::Ret => size,
                    }
                }
                Semantics::Prefetch {
                    ptr,
                    bytes,
                    location,
                } => ptr.max(bytes).max(location),
                Semantics::Counted => 0,
                Semantics::Realloc { ptr, size } => ptr.max(size),
                Semantics::Free { ptr, .. }
                | Semantics::Unregister { ptr }
                | Semantics::MarkPinned { ptr } => ptr,
                Semantics::Register { ptr, size } => ptr.max(size),
                Semantics::Copy {
                    dst,
                    src,
                    bytes,
                    direction,
                } => {
                    let bytes = bytes.max_arg();
                    let kind = match direction {
                        DirectionFrom::KindArg(i) => i,
                        _ => 0,
                    };
                    dst.max(src).max(bytes).max(kind)
                }
                Semantics::DescribedCopy { bytes } => bytes.max_arg(),
            };
            let captured = match probe.arguments {
                // Read from user memory into every argument slot.
                Arguments::Described(descriptor) => {
                    let reads = descriptor.reads();
                    let highest = reads.iter().map(|r| r.2).max().unwrap_or(0);
                    assert!(reads.len() <= tracer_common::DESCRIPTOR_READS);
                    highest + 1
                }
                Arguments::Batch => 3,
                Arguments::Registers => 6 + probe.stack_args as usize,
            };
            if let Some(stream) = probe.stream {
                assert!(
                    matches!(probe.arguments, Arguments::Registers)
                        && (stream as usize) < 6 + probe.stack_args as usize,
                    "{:?}: stream argument {stream} is not captured",
                    probe.kind
                );
            }
            assert!(
                max < captured,
                "{:?} reads argument {max} but captures {captured}",
                probe.kind,
            );
        }
    }

    #[test]
    fn descriptor_layouts_fit_the_kernel_map() {
        for descriptor in Descriptor::ALL {
            assert!((descriptor.index() as u32) < tracer_common::DESCRIPTOR_LAYOUTS);
            let layout = descriptor.layout();
            let used = layout.reads.iter().filter(|r| r.bytes != 0).count();
            assert_eq!(used, descriptor.reads().len(), "{descriptor:?}");
            for read in layout.reads.iter().filter(|r| r.bytes != 0) {
                assert!(matches!(read.bytes, 4 | 8));
                assert!((read.arg as usize) < tracer_common::MAX_ARGS);
                assert!(read.shift == 0 || (read.bytes == 4 && read.shift == 32));
            }
        }
    }
}
