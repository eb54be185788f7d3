//! Wire types shared by the kernel-side programs (`tracer-ebpf`) and the agent.
//!
//! Every record in the ring buffer is one [`Event`]: a fixed [`EventHeader`] and a payload of
//! raw arguments, the raw return value, the value read through an out-parameter, and the caller's
//! return address. The registry in `tracer-agent` says how to read the payload of each kind.
//! One kind is longer: [`python::PythonCode`], what a Python code object says, which begins
//! with the same header.
#![no_std]

use core::mem::size_of;

/// Arguments captured per call: six in registers, two more from the stack (x86-64 SysV).
pub const MAX_ARGS: usize = 8;
/// Arguments read from the stack at most (the 7th and 8th, e.g. `cudaMemcpy2DAsync`'s stream).
pub const MAX_STACK_ARGS: usize = MAX_ARGS - 6;

/// Header of every event.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventHeader {
    /// An [`EventKind`] as a number; decode with [`EventKind::from_u16`].
    pub kind: u16,
    /// `FLAG_*` bits.
    pub flags: u16,
    pub cpu: u32,
    /// Thread group id (what userspace calls the pid).
    pub pid: u32,
    pub tid: u32,
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) when the event was completed.
    pub ts_ns: u64,
}
const _: () = assert!(size_of::<EventHeader>() == 24);

/// The one event envelope.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    pub header: EventHeader,
    /// Raw arguments in call order; unused ones are zero.
    pub args: [u64; MAX_ARGS],
    /// Raw return register; the registry says its C type (`cudaError_t` is 32 bits).
    pub ret: u64,
    /// The value the callee stored through its out-parameter (e.g. `*devPtr` of `cudaMalloc`).
    pub out: u64,
    /// Entry to return, in ns; zero for one-shot events.
    pub duration_ns: u64,
    /// The call site: the return address in the caller.
    pub caller: u64,
    /// The call site as the kernel resolved it at the time of the call, for probes that ask
    /// for it (allocations): see [`CallSiteRaw`].
    pub site: CallSiteRaw,
}
pub const EVENT_SIZE: usize = 160;
const _: () = assert!(size_of::<Event>() == EVENT_SIZE);

/// A call site resolved by the kernel (`bpf_get_stack` with `BPF_F_USER_BUILD_ID`): the ELF
/// build id of the module the caller is in, and the caller's offset in that file. Resolved at
/// the time of the call, so it holds even when the process exits before the agent reads it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallSiteRaw {
    /// `SITE_*`.
    pub status: u32,
    /// The user stack's id plus one (0: none): its frames, resolved by the kernel, are in the
    /// `CALLER_STACKS` map under that id. Walked by frame pointers where the code keeps them.
    pub stack: u32,
    /// File offset when `status` is [`SITE_BUILD_ID`], else the address.
    pub offset: u64,
    pub build_id: [u8; 20],
    pub _pad2: [u8; 4],
}
const _: () = assert!(size_of::<CallSiteRaw>() == 40);

/// A user stack frame as the kernel resolves it with `BPF_F_USER_BUILD_ID` (the layout of
/// `struct bpf_stack_build_id`): `status` 1 is (build id, file offset), 2 an address only, 0 no
/// frame.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BuildIdFrame {
    pub status: i32,
    pub build_id: [u8; 20],
    pub offset: u64,
}
const _: () = assert!(size_of::<BuildIdFrame>() == 32);

/// Frames kept of an allocation's user stack: its call site and the callers beyond it.
pub const STACK_FRAMES: usize = 9;

/// No call site was asked for or found.
pub const SITE_NONE: u32 = 0;
/// `build_id` and `offset` are valid.
pub const SITE_BUILD_ID: u32 = 1;
/// The module had no build id (or it was not readable): `offset` is the address.
pub const SITE_IP: u32 = 2;

/// A driver call made while a runtime call was in progress on the same thread: the runtime
/// event already stands for it.
pub const FLAG_NESTED: u16 = 1 << 0;
/// The return was seen without its entry (the probe was attached mid-call): `args` are zero.
pub const FLAG_NO_ENTRY: u16 = 1 << 1;
/// Reading the out-parameter failed: `out` is zero.
pub const FLAG_OUT_UNREADABLE: u16 = 1 << 2;
/// Sent at entry by a probe with no return probe: no result (taken as success), no duration.
pub const FLAG_AT_ENTRY: u16 = 1 << 3;
/// A [`EventKind::PythonFrames`] event sent for a large mapping (`mapping_lines`), not for an
/// allocation call: the mapping takes it, and a libc allocation that made the mapping keeps
/// the frames its own entry sent.
pub const FLAG_FOR_MAPPING: u16 = 1 << 4;

/// Indexes of the per-CPU counters map `COUNTERS`.
/// The names of the kernel programs' maps the user side opens, one constant per map. The
/// kernel side names each map by its static's identifier (aya's `#[map]`), so those
/// identifiers are these names; the tracer's test `every_shared_map_name_is_a_map_of_the_object`
/// checks each against the built object.
pub mod maps {
    pub const EVENTS: &str = "EVENTS";
    pub const COUNTERS: &str = "COUNTERS";
    pub const CONFIG: &str = "CONFIG";
    pub const FIELDS: &str = "FIELDS";
    pub const DESCRIPTORS: &str = "DESCRIPTORS";
    pub const TARGETS: &str = "TARGETS";
    pub const IGNORED: &str = "IGNORED";
    pub const CALLER_STACKS: &str = "CALLER_STACKS";
    pub const COPY_RUNS: &str = "COPY_RUNS";
    pub const FAULT_RUNS: &str = "FAULT_RUNS";
    pub const PYTHON: &str = "PYTHON";
    pub const HELD: &str = "HELD";
    /// Every name above.
    pub const ALL: [&str; 12] = [
        EVENTS,
        COUNTERS,
        CONFIG,
        FIELDS,
        DESCRIPTORS,
        TARGETS,
        IGNORED,
        CALLER_STACKS,
        COPY_RUNS,
        FAULT_RUNS,
        PYTHON,
        HELD,
    ];
}

pub mod python;

pub mod counter {
    /// CUDA and hotpin calls (and library opens) that found the ring buffer full: lost.
    pub const RINGBUF_FULL: u32 = 0;
    /// Entries that found the pending-call map full: their returns carry `FLAG_NO_ENTRY`.
    pub const PENDING_FULL: u32 = 1;
    /// Host memory syscalls, page-fault runs and ioctls that found the ring buffer full: lost.
    pub const HOST_RINGBUF_FULL: u32 = 2;
    /// Copies whose arguments in user memory (a descriptor, a batch's arrays) could not be
    /// read at entry, or batch elements past [`MAX_BATCH_COPIES`](super::MAX_BATCH_COPIES):
    /// lost.
    pub const UNREAD_COPIES: u32 = 3;
    pub const COUNT: u32 = 4;
}

/// Indexes of the array map `CONFIG`, set by the agent.
pub mod config {
    /// Non-zero: stop a target (SIGSTOP) when it opens a CUDA library, so the agent can attach
    /// before the library runs; the agent continues it (SIGCONT).
    pub const STOP_ON_LIBRARY_OPEN: u32 = 0;
    /// Smallest libc allocation sent, in bytes (with `--libc-malloc`).
    pub const MALLOC_FLOOR: u32 = 1;
    /// Non-zero: the page-fault probe is attached, so threads may hold runs of faults that
    /// must be sent before their other events (with `--page-faults`).
    pub const PAGE_FAULTS: u32 = 2;
    /// Non-zero: any process that opens a CUDA library becomes a target (`tracer daemon`),
    /// not only those the agent named and their children.
    pub const WATCH_LIBRARY_OPENS: u32 = 3;
    /// The agent's last sign of life (`bpf_ktime_get_ns`'s clock, CLOCK_MONOTONIC), written
    /// every [`HEARTBEAT_EVERY_NS`](super::HEARTBEAT_EVERY_NS): a target is stopped on a
    /// library open only while it is at most [`HEARTBEAT_STALE_NS`](super::HEARTBEAT_STALE_NS)
    /// old, so that an agent that is itself stopped, hung or killed freezes no new program.
    pub const HEARTBEAT_NS: u32 = 4;
    pub const COUNT: u32 = 5;
}

/// How often the agent writes `config::HEARTBEAT_NS` while it stops targets on library opens.
pub const HEARTBEAT_EVERY_NS: u64 = 100_000_000;
/// A heartbeat older than this stops no target: the agent is not there to continue it.
pub const HEARTBEAT_STALE_NS: u64 = 500_000_000;

/// Fields of tracepoint records the kernel programs read, as indexes of the `FIELDS` map. The
/// agent reads each one's offset from the running kernel's tracefs format files before it
/// attaches anything, so no kernel's record layout is built in.
pub mod field {
    /// `syscalls:sys_enter_*`: `__syscall_nr` (host memory syscalls).
    pub const SYSCALL_NR: u32 = 0;
    /// `syscalls:sys_enter_mmap`: the first argument; the others follow, 8 bytes apart (checked
    /// by the agent for mmap, munmap, mremap and brk).
    pub const SYSCALL_ARGS: u32 = 1;
    /// `syscalls:sys_exit_*`: `ret`.
    pub const SYSCALL_RET: u32 = 2;
    /// `syscalls:sys_enter_openat`: `filename`.
    pub const OPENAT_FILENAME: u32 = 3;
    /// `exceptions:page_fault_user`: `address`.
    pub const FAULT_ADDRESS: u32 = 4;
    /// `syscalls:sys_enter_ioctl`: `fd` and `cmd`.
    pub const IOCTL_FD: u32 = 5;
    pub const IOCTL_CMD: u32 = 6;
    /// `task:task_newtask`: the new task's `pid` and `clone_flags`.
    pub const NEWTASK_PID: u32 = 7;
    pub const NEWTASK_CLONE_FLAGS: u32 = 8;
    /// `syscalls:sys_exit_*`: `__syscall_nr`.
    pub const SYSCALL_EXIT_NR: u32 = 9;
    pub const COUNT: u32 = 10;
}

/// Bytes of a path the kernel side reads to recognise a CUDA library.
pub const PATH_BYTES: usize = 256;
/// The file-name prefix of the CUDA runtime and driver (`libcudart.so*`, `libcuda.so*`).
pub const CUDA_LIBRARY_PREFIX: &[u8; 6] = b"libcud";
/// The file-name prefix of hotpin's allocator (`libhotpin.so`), which Python loads with ctypes
/// whenever it likes.
pub const HOTPIN_LIBRARY_PREFIX: &[u8; 9] = b"libhotpin";
/// The name of a tracer's thread that attaches probes (it opens CUDA libraries to read their
/// symbols): the kernel side of every tracer never stops a thread so named on a library open,
/// so two tracers (two daemons, or a daemon and `tracer record`) cannot stop each other while
/// each holds a program for the other to let go (they did, until their watchdogs let
/// everything go 2 s later, untraced).
pub const TRACER_THREAD: &str = "hotpin-tracer";

/// Anonymous mappings at least this large, made outside any CUDA or hotpin call by a CPython
/// target, are sent with the Python lines that made them (a large `malloc` is a mapping:
/// PyTorch's and NumPy's CPU arrays), as allocation calls are. glibc maps every block from
/// 128 KiB (its threshold, before it adapts).
pub const MAPPING_LINES_FLOOR: u64 = 128 << 10;

/// Largest number of processes traced at once.
pub const MAX_TARGETS: u32 = 4096;

/// Elements of one batch copy (`cuMemcpyBatchAsync`) the kernel side reads; those past it are
/// counted in [`counter::UNREAD_COPIES`].
pub const MAX_BATCH_COPIES: u32 = 1024;

/// Reads of one [`DescriptorLayout`] at most.
pub const DESCRIPTOR_READS: usize = 10;
/// Descriptor layouts the `DESCRIPTORS` map holds.
pub const DESCRIPTOR_LAYOUTS: u32 = 4;

/// One field of a structure in user memory: `bytes` bytes (4 or 8; 0 is an unused read) at
/// `offset` from the structure's start, ORed into argument `arg` shifted left by `shift` bits
/// (so two 32-bit enums can share one argument).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FieldRead {
    pub offset: u16,
    pub bytes: u8,
    pub arg: u8,
    pub shift: u8,
    pub _pad: [u8; 3],
}
const _: () = assert!(size_of::<FieldRead>() == 8);

/// How the kernel side reads a copy described by a structure whose address is the first
/// argument (`CUDA_MEMCPY2D`, `CUDA_MEMCPY3D`, `cudaMemcpy3DParms`): at entry, the arguments
/// are replaced by the fields these reads take. Set by the agent from its registry in the
/// `DESCRIPTORS` map, so no structure's layout is built into the kernel programs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DescriptorLayout {
    pub reads: [FieldRead; DESCRIPTOR_READS],
}

macro_rules! event_kinds {
    ($($(#[$doc:meta])* $name:ident = $value:literal,)*) => {
        /// Stable numbers for each kind of event, grouped in ranges: 1-99 the CUDA runtime API,
        /// 100-149 the driver API, 150-199 hotpin's allocator, 200-299 libc, 300-399 the kernel.
        #[repr(u16)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum EventKind {
            $($(#[$doc])* $name = $value,)*
        }

        impl EventKind {
            pub const ALL: &'static [EventKind] = &[$(EventKind::$name,)*];

            /// A probed function call: the CUDA runtime or driver API, hotpin's allocator or
            /// libc's (the ranges below 300).
            pub const fn is_call(self) -> bool {
                (self as u16) < 300
            }

            /// The kind with this number, if there is one.
            pub const fn from_u16(value: u16) -> Option<Self> {
                match value {
                    $($value => Some(EventKind::$name),)*
                    _ => None,
                }
            }
        }
    };
}

event_kinds! {
    CudaMalloc = 1,
    CudaFree = 2,
    CudaMallocHost = 3,
    CudaHostAlloc = 4,
    CudaFreeHost = 5,
    CudaHostRegister = 6,
    CudaHostUnregister = 7,
    CudaMemcpy = 8,
    CudaMemcpyAsync = 9,
    CudaMemcpy2D = 10,
    CudaMemcpy2DAsync = 11,
    CudaMallocPitch = 12,
    CudaMallocManaged = 13,
    CudaMallocAsync = 14,
    CudaFreeAsync = 15,
    CudaMallocFromPoolAsync = 16,
    CudaMemcpyPeer = 17,
    CudaMemcpyPeerAsync = 18,
    CudaMemcpyToSymbol = 19,
    CudaMemcpyToSymbolAsync = 20,
    CudaMemcpyFromSymbol = 21,
    CudaMemcpyFromSymbolAsync = 22,
    CudaMemcpy2DToArray = 23,
    CudaMemcpy2DToArrayAsync = 24,
    CudaMemcpy2DFromArray = 25,
    CudaMemcpy2DFromArrayAsync = 26,
    CudaMemPrefetchAsync = 27,
    /// `cudaMemcpy3D(Async)`: the kernel side reads the `cudaMemcpy3DParms` at entry
    /// ([`DescriptorLayout`]).
    CudaMemcpy3D = 28,
    CudaMemcpy3DAsync = 29,

    CuMemAlloc = 100,
    CuMemFree = 101,
    CuMemAllocHost = 102,
    CuMemHostAlloc = 103,
    CuMemFreeHost = 104,
    CuMemHostRegister = 105,
    CuMemHostUnregister = 106,
    CuMemcpyHtoD = 107,
    CuMemcpyDtoH = 108,
    CuMemcpyHtoDAsync = 109,
    CuMemcpyDtoHAsync = 110,
    CuMemcpy = 111,
    CuMemcpyAsync = 112,
    CuMemAllocPitch = 113,
    CuMemAllocManaged = 114,
    CuMemAllocAsync = 115,
    CuMemFreeAsync = 116,
    CuMemAllocFromPoolAsync = 117,
    /// The virtual memory API (PyTorch's expandable segments): address ranges reserved, physical
    /// memory created, mapped into them and unmapped.
    CuMemAddressReserve = 118,
    CuMemAddressFree = 119,
    CuMemCreate = 120,
    CuMemRelease = 121,
    CuMemMap = 122,
    CuMemUnmap = 123,
    CuMemcpyPeer = 124,
    CuMemcpyPeerAsync = 125,
    CuMemcpyDtoD = 126,
    CuMemcpyDtoDAsync = 127,
    CuMemPrefetchAsync = 128,
    /// Driver copies described by a `CUDA_MEMCPY2D`/`CUDA_MEMCPY3D` the kernel side reads at
    /// entry ([`DescriptorLayout`]).
    CuMemcpy2D = 129,
    CuMemcpy2DAsync = 130,
    CuMemcpy3D = 131,
    CuMemcpy3DAsync = 132,
    /// `cuMemcpyBatchAsync` (CUDA 12.8+): one event per element, read from the `dsts`, `srcs`
    /// and `sizes` arrays at entry (`args` are the element's dst, src and size).
    CuMemcpyBatchAsync = 133,

    /// hotpin's allocator (`hotpin_malloc`, `hotpin_free`): the allocations it hands out, with
    /// the caller's call site.
    HotpinMalloc = 150,
    HotpinFree = 151,
    /// Called inside `hotpin_malloc` for each pinned block it hands out, fresh or cached.
    HotpinPinned = 152,

    /// libc's allocator (uprobes, with `--libc-malloc`): only allocations of at least the
    /// floor are sent, and only frees of those; the kernel side keeps their pointers.
    Malloc = 200,
    Calloc = 201,
    Realloc = 202,
    PosixMemalign = 203,
    AlignedAlloc = 204,
    Memalign = 205,
    Free = 206,

    /// A traced process opened a file named `libcud*` or `libhotpin*` (a library it may be
    /// about to map): `args[0]` is the new file descriptor.
    LibraryOpen = 300,
    /// The NVIDIA driver pinned a target's pages (`os_lock_user_pages`, a kprobe):
    /// `args[0]` is the address, `args[1]` the page count.
    DriverLockPages = 301,
    /// The NVIDIA driver unpinned pages (`os_unlock_user_pages`): `args[0]` is the page count.
    DriverUnlockPages = 302,

    /// Host memory syscalls, from their enter and exit tracepoints: `args` are the syscall's
    /// arguments in order, `ret` its return value. Anonymous mappings only (`mmap` with
    /// `MAP_ANONYMOUS`); `FLAG_NESTED` when made inside a CUDA or hotpin call.
    Mmap = 310,
    Munmap = 311,
    Mremap = 312,
    Brk = 313,
    /// A run of user page faults by one thread on consecutive pages
    /// (`exceptions:page_fault_user`): `args[0]` is the first page, `args[1]` how many pages;
    /// the timestamp is the first fault's.
    PageFaults = 320,
    /// An ioctl of the NVIDIA driver's kind (`_IOC_TYPE(cmd) == 'F'`, the resource manager's
    /// escapes): `args[0]` the fd, `args[1]` the command.
    NvidiaIoctl = 330,
    /// A traced process made a child process (not a thread: `task:task_newtask` without
    /// `CLONE_THREAD`); the kernel side traces the child from its first instruction:
    /// `args[0]` is the child's pid.
    ProcessFork = 340,
    /// The Python frames of a thread of a CPython process, sent at the entry of an allocating
    /// call that wants its call site, before its own event, or at the entry of a large
    /// anonymous mmap made outside probed calls, with [`FLAG_FOR_MAPPING`]
    /// (`python::PY_FRAMES` at most, innermost first, each `python::pack`ed in `args`; `ret`
    /// is how many). Zero frames when the thread runs no Python: the agent then gives the call
    /// none.
    PythonFrames = 350,
    /// What a code object named by a [`EventKind::PythonFrames`] event for the first time
    /// says: a [`python::PythonCode`] record, longer than an [`Event`].
    PythonCode = 351,
}

/// A thread's page faults on consecutive pages not yet sent, kept by thread in the kernel's
/// `FAULT_RUNS` map; sent as one [`EventKind::PageFaults`] when the run breaks, when the thread
/// sends any other event, or read by the agent at the end.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultRun {
    pub pid: u32,
    pub _pad: u32,
    /// The first page's address.
    pub start: u64,
    pub pages: u64,
    pub ts_ns: u64,
}

/// The driver copies a thread made since its last event of another kind: each distinct one
/// (function, arguments, nesting) once, its count in `out`, in the order first seen. Sent
/// before the thread's next event of any other kind, when a new distinct copy finds every
/// slot used, or at the first copy 10 ms after the oldest run began; the rest are read by the
/// agent at the end. A loop copying a few buffers back and
/// forth costs the ring a few events however fast it runs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyRuns {
    /// Slots in use, from the first.
    pub used: u32,
    pub _pad: u32,
    pub runs: [Event; COPY_RUN_SLOTS],
}

/// Distinct copies a thread's [`CopyRuns`] holds.
pub const COPY_RUN_SLOTS: usize = 4;

/// Longest run of faults kept before it is sent (2 MiB of 4 KiB pages).
pub const MAX_FAULT_RUN: u64 = 512;
/// The page size faults are counted in.
pub const PAGE_BYTES: u64 = 4096;
/// `_IOC_TYPE` of the NVIDIA driver's ioctls (`NV_IOCTL_MAGIC`).
pub const NVIDIA_IOCTL_TYPE: u64 = b'F' as u64;

/// Which API layer a probed function belongs to; the kernel side marks a call made inside a
/// call of an outer layer as nested (driver in runtime or allocator, runtime in allocator).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// hotpin's allocator: the outermost layer (its pinning calls go through the runtime).
    Allocator = 0,
    Runtime = 1,
    Driver = 2,
    /// libc's allocator: calls inside the layers above are theirs (nested).
    Libc = 3,
}

/// What userspace tells an attached program through `bpf_get_attach_cookie`.
///
/// Bits 0-15: the [`EventKind`]; 16-19: index of the out-parameter plus one (0: none);
/// 20-21: the [`Layer`]; 24-27: how many arguments to read from the stack; 28: resolve the
/// call site in the kernel; 29: no return probe, the event is sent at entry; 32-35: index of
/// the size argument plus one, 36-39: of an argument it is multiplied by (calloc), for the
/// kernel's size floor (0: none); 40-43: index of a second out-parameter plus one (the pitch of
/// `cudaMallocPitch`): at return the value it points at replaces the pointer in `args`;
/// 44-47: the [`DescriptorLayout`] the first argument points at, plus one (0: none); 30: a
/// batch copy, one event per element of the arrays in the first three arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeCookie(pub u64);

impl ProbeCookie {
    pub const fn new(
        kind: EventKind,
        out_arg: Option<u8>,
        layer: Layer,
        stack_args: u8,
        want_site: bool,
    ) -> Self {
        let out = match out_arg {
            Some(index) => (index as u64 & 0x7) + 1,
            None => 0,
        };
        Self(
            kind as u64
                | (out << 16)
                | ((layer as u64 & 0x3) << 20)
                | ((stack_args as u64 & 0xf) << 24)
                | ((want_site as u64) << 28),
        )
    }

    /// With the size argument (and its multiplier, if any) for the kernel's size floor.
    pub const fn with_size_args(self, size: Option<u8>, count: Option<u8>) -> Self {
        const fn field(index: Option<u8>) -> u64 {
            match index {
                Some(i) => (i as u64 & 0x7) + 1,
                None => 0,
            }
        }
        Self(self.0 | (field(size) << 32) | (field(count) << 36))
    }

    /// With a second out-parameter, read at return into its own argument slot.
    pub const fn with_second_out(self, index: Option<u8>) -> Self {
        match index {
            Some(i) => Self(self.0 | (((i as u64 & 0x7) + 1) << 40)),
            None => self,
        }
    }

    /// With the arguments read from a structure at the first argument (layout `index` of the
    /// `DESCRIPTORS` map).
    pub const fn with_descriptor(self, index: Option<u8>) -> Self {
        match index {
            Some(i) => Self(self.0 | (((i as u64 & 0xf) + 1) << 44)),
            None => self,
        }
    }

    pub const fn descriptor(self) -> Option<u32> {
        match (self.0 >> 44) & 0xf {
            0 => None,
            n => Some(n as u32 - 1),
        }
    }

    /// A batch copy: the first three arguments are arrays of destinations, sources and sizes,
    /// the fourth their length; each element is sent as its own copy.
    pub const fn batch(self) -> Self {
        Self(self.0 | (1 << 30))
    }

    pub const fn is_batch(self) -> bool {
        (self.0 >> 30) & 1 == 1
    }

    pub const fn second_out_arg(self) -> Option<usize> {
        match (self.0 >> 40) & 0xf {
            0 => None,
            n => Some(n as usize - 1),
        }
    }

    pub const fn size_arg(self) -> Option<usize> {
        match (self.0 >> 32) & 0xf {
            0 => None,
            n => Some(n as usize - 1),
        }
    }

    pub const fn count_arg(self) -> Option<usize> {
        match (self.0 >> 36) & 0xf {
            0 => None,
            n => Some(n as usize - 1),
        }
    }

    pub const fn want_site(self) -> bool {
        (self.0 >> 28) & 1 == 1
    }

    /// Sent at entry, with no return probe: one probe hit instead of two (a driver copy,
    /// whose result the tracer takes as success: its arguments are all it needs).
    pub const fn at_entry(self) -> Self {
        Self(self.0 | (1 << 29))
    }

    pub const fn is_at_entry(self) -> bool {
        (self.0 >> 29) & 1 == 1
    }

    pub const fn kind(self) -> u16 {
        self.0 as u16
    }

    pub const fn out_arg(self) -> Option<usize> {
        match (self.0 >> 16) & 0xf {
            0 => None,
            n => Some(n as usize - 1),
        }
    }

    pub const fn layer(self) -> u8 {
        ((self.0 >> 20) & 0x3) as u8
    }

    pub const fn stack_args(self) -> usize {
        let n = ((self.0 >> 24) & 0xf) as usize;
        if n > MAX_STACK_ARGS {
            MAX_STACK_ARGS
        } else {
            n
        }
    }
}

/// Why a byte slice from the ring buffer is not an [`Event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The record is shorter than its kind.
    Truncated { len: usize },
}

impl Event {
    /// Reads an event from a ring-buffer record, checking its length first. The record may be
    /// unaligned and longer than an event (the kernel rounds records to 8 bytes).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() < EVENT_SIZE {
            return Err(DecodeError::Truncated { len: bytes.len() });
        }
        // SAFETY: the length was checked above, and `Event` is plain old data: every bit
        // pattern is a valid value. `read_unaligned` needs no alignment.
        Ok(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<Event>()) })
    }

    /// The raw kind, if it is one this build knows.
    pub fn kind(&self) -> Option<EventKind> {
        EventKind::from_u16(self.header.kind)
    }
}

#[cfg(feature = "user")]
// SAFETY: `Event` is `#[repr(C)]`, `Copy`, has explicit padding and no invalid bit patterns.
unsafe impl aya::Pod for Event {}

#[cfg(feature = "user")]
// SAFETY: `BuildIdFrame` is `#[repr(C)]`, `Copy`, without padding or invalid bit patterns.
unsafe impl aya::Pod for BuildIdFrame {}

#[cfg(feature = "user")]
// SAFETY: `FaultRun` is `#[repr(C)]`, `Copy`, has explicit padding and no invalid bit patterns.
unsafe impl aya::Pod for FaultRun {}

#[cfg(feature = "user")]
// SAFETY: #[repr(C)], plain integers and events, no padding the kernel leaves unset.
unsafe impl aya::Pod for CopyRuns {}

#[cfg(feature = "user")]
// SAFETY: #[repr(C)], plain integers with explicit padding, no invalid bit patterns.
unsafe impl aya::Pod for DescriptorLayout {}

#[cfg(feature = "user")]
// SAFETY: #[repr(C)], plain integers with explicit padding, no invalid bit patterns.
unsafe impl aya::Pod for python::Offsets {}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn cookie_round_trips_every_field() {
        let cookie = ProbeCookie::new(
            EventKind::CudaMemcpy2DAsync,
            Some(0),
            Layer::Runtime,
            2,
            true,
        );
        assert_eq!(cookie.kind(), EventKind::CudaMemcpy2DAsync as u16);
        assert_eq!(cookie.out_arg(), Some(0));
        assert_eq!(cookie.layer(), Layer::Runtime as u8);
        assert_eq!(cookie.stack_args(), 2);
        assert!(cookie.want_site());
        let none = ProbeCookie::new(EventKind::CuMemcpy, None, Layer::Driver, 0, false);
        assert!(!none.want_site());
        assert_eq!(none.out_arg(), None);
        assert_eq!(none.layer(), Layer::Driver as u8);
        assert_eq!(none.descriptor(), None);
        assert!(!none.is_batch());
        let described = none.with_descriptor(Some(2)).at_entry();
        assert_eq!(described.descriptor(), Some(2));
        assert!(described.is_at_entry() && !described.is_batch());
        let batch = none.batch().at_entry();
        assert!(batch.is_batch() && batch.descriptor().is_none());
        assert_eq!(batch.kind(), EventKind::CuMemcpy as u16);
    }

    #[test]
    fn every_kind_decodes_from_its_number() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::from_u16(*kind as u16), Some(*kind));
        }
        assert_eq!(EventKind::from_u16(0), None);
        assert_eq!(EventKind::from_u16(9999), None);
    }

    #[test]
    fn decode_checks_length_and_reads_unaligned() {
        let mut event = Event::default();
        event.header.kind = EventKind::CudaMemcpy as u16;
        event.args[2] = 4096;
        event.ret = 7;
        // SAFETY: Event is plain old data of EVENT_SIZE bytes.
        let raw: [u8; EVENT_SIZE] = unsafe { core::mem::transmute(event) };
        let mut shifted = std::vec![0u8; EVENT_SIZE + 1];
        shifted[1..].copy_from_slice(&raw);
        assert_eq!(Event::from_bytes(&shifted[1..]), Ok(event));
        assert_eq!(
            Event::from_bytes(&raw[..EVENT_SIZE - 1]),
            Err(DecodeError::Truncated {
                len: EVENT_SIZE - 1
            })
        );
    }
}
