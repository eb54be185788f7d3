//! One host or device allocation and everything that happened to it.

use serde::{Deserialize, Serialize};

use hotpin_registry::registry::CopyDirection;

/// Index of an allocation in its [`super::MemHistory`].
pub type AllocId = u64;
/// Index of a call site in its [`super::MemHistory`].
pub type CallSiteId = u32;

/// Where an allocation was made: the return address of the allocating call, as a module and
/// an offset in that module's file, so it is the same in every run despite ASLR.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CallSite {
    /// The file mapped at the address (or `[anon]` for code outside any file).
    pub module: String,
    pub offset: u64,
    /// The function containing the address, where the module's symbols say.
    pub symbol: Option<String>,
}

/// The prefix of a call site's module that marks a Python frame: the module is
/// `python:FILE`, the offset the line, the symbol the function (`hotpin run` records the
/// Python lines that made an allocation as its callers).
pub const PYTHON_MODULE: &str = "python:";

/// A module's file name (the part after the last `/`): what identifies a call site's module
/// across runs and machines (a history recorded with the program at one path applies to it
/// at another), and what a report shows first.
pub fn module_file_name(module: &str) -> &str {
    module.rsplit('/').next().unwrap_or(module)
}

/// What kind of memory an allocation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AllocKind {
    /// malloc and friends.
    Pageable,
    /// An anonymous mmap made outside CUDA and hotpin calls (malloc's large blocks, Python's
    /// arenas, a program's own buffers).
    Mmap,
    /// cudaMallocHost / cudaHostAlloc / cuMemAllocHost / cuMemHostAlloc.
    Pinned,
    /// Pageable memory registered with cudaHostRegister: pinned in place.
    Registered,
    /// GPU memory (cudaMalloc / cuMemAlloc).
    Device,
    /// A host pointer used in a transfer that no tracked allocation contains: the entry
    /// collects those transfers so none is dropped. Its size is the largest copy seen.
    Untracked,
    /// The process's brk heap (malloc's arena): one region that grows and shrinks.
    Heap,
    /// Managed (unified) memory, cudaMallocManaged / cuMemAllocManaged: device memory the host
    /// may touch; prefetches move it.
    Managed,
    /// A device address range reserved with cuMemAddressReserve; the device memory mapped
    /// into it (cuMemMap) is a [`AllocKind::Device`] allocation inside it.
    DeviceReserved,
}

impl AllocKind {
    /// Host memory that copies fast (no staging).
    pub fn is_pinned(self) -> bool {
        matches!(self, AllocKind::Pinned | AllocKind::Registered)
    }

    pub fn is_host(self) -> bool {
        !self.is_device()
    }

    /// Device memory, or a device range: the device side of a copy.
    pub fn is_device(self) -> bool {
        matches!(
            self,
            AllocKind::Device | AllocKind::Managed | AllocKind::DeviceReserved
        )
    }

    /// Device memory that takes room on the GPU (a reservation takes none until mapped).
    pub fn takes_device_memory(self) -> bool {
        matches!(self, AllocKind::Device | AllocKind::Managed)
    }

    /// Memory that holds allocations (an anonymous mmap, the heap, a reserved device range):
    /// addresses are credited to it only when no allocation inside contains them.
    pub fn is_region(self) -> bool {
        matches!(
            self,
            AllocKind::Mmap | AllocKind::Heap | AllocKind::DeviceReserved
        )
    }
}

/// Something that happened to an allocation.
// Externally tagged (`{"transfer": {...}}`): bincode cannot read internally tagged enums.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllocEvent {
    Alloc {
        ts_ns: u64,
    },
    Transfer {
        ts_ns: u64,
        direction: CopyDirection,
        bytes: u64,
        /// The thread that made the copy (0: not known, as in histories before format 5).
        #[serde(default)]
        tid: u32,
        /// The stream it was queued on (0: the default stream, or not known).
        #[serde(default)]
        stream: u64,
    },
    PageFault {
        ts_ns: u64,
        addr: u64,
    },
    Register {
        ts_ns: u64,
    },
    Unregister {
        ts_ns: u64,
    },
    Free {
        ts_ns: u64,
    },
}

impl AllocEvent {
    pub fn ts_ns(&self) -> u64 {
        match *self {
            AllocEvent::Alloc { ts_ns }
            | AllocEvent::Transfer { ts_ns, .. }
            | AllocEvent::PageFault { ts_ns, .. }
            | AllocEvent::Register { ts_ns }
            | AllocEvent::Unregister { ts_ns }
            | AllocEvent::Free { ts_ns } => ts_ns,
        }
    }
}

/// Counters kept current as events arrive, for fast reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferStats {
    /// Host-to-device plus device-to-host copies.
    pub transfers: u64,
    pub h2d_count: u64,
    pub d2h_count: u64,
    pub h2d_bytes: u64,
    pub d2h_bytes: u64,
    /// Copies whose direction could not be resolved (unified addressing, unknown pointers).
    pub other_count: u64,
    pub other_bytes: u64,
    pub first_transfer_ns: Option<u64>,
    pub last_transfer_ns: Option<u64>,
    pub page_faults: u64,
}

impl TransferStats {
    /// Adds `other`'s counts to these (first and last copy times widened).
    pub fn add(&mut self, other: &TransferStats) {
        self.transfers = self.transfers.saturating_add(other.transfers);
        self.h2d_count = self.h2d_count.saturating_add(other.h2d_count);
        self.d2h_count = self.d2h_count.saturating_add(other.d2h_count);
        self.h2d_bytes = self.h2d_bytes.saturating_add(other.h2d_bytes);
        self.d2h_bytes = self.d2h_bytes.saturating_add(other.d2h_bytes);
        self.other_count = self.other_count.saturating_add(other.other_count);
        self.other_bytes = self.other_bytes.saturating_add(other.other_bytes);
        self.page_faults = self.page_faults.saturating_add(other.page_faults);
        self.first_transfer_ns = match (self.first_transfer_ns, other.first_transfer_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_transfer_ns = self.last_transfer_ns.max(other.last_transfer_ns);
    }

    /// Counts `count` copies of `total` bytes together in `direction`, at `ts_ns`.
    pub fn add_copies(&mut self, direction: CopyDirection, count: u64, total: u64, ts_ns: u64) {
        self.transfers = self.transfers.saturating_add(count);
        match direction {
            CopyDirection::HostToDevice => {
                self.h2d_count = self.h2d_count.saturating_add(count);
                self.h2d_bytes = self.h2d_bytes.saturating_add(total);
            }
            CopyDirection::DeviceToHost => {
                self.d2h_count = self.d2h_count.saturating_add(count);
                self.d2h_bytes = self.d2h_bytes.saturating_add(total);
            }
            _ => {
                self.other_count = self.other_count.saturating_add(count);
                self.other_bytes = self.other_bytes.saturating_add(total);
            }
        }
        self.first_transfer_ns = Some(self.first_transfer_ns.map_or(ts_ns, |t| t.min(ts_ns)));
        self.last_transfer_ns = Some(self.last_transfer_ns.map_or(ts_ns, |t| t.max(ts_ns)));
    }
}

/// An allocation: what it is (the static part) and what happened to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    pub id: AllocId,
    pub pid: u32,
    pub start: u64,
    pub size: u64,
    pub kind: AllocKind,
    pub call_site: Option<CallSiteId>,
    /// This is the nth host (or device) allocation, from 0, made at its call site in its
    /// process.
    pub ordinal: u32,
    pub alloc_ns: u64,
    /// When it was freed; `None` while live.
    pub free_ns: Option<u64>,
    pub stats: TransferStats,
    /// The timeline, ordered by timestamp; empty in summary dumps.
    pub events: Vec<AllocEvent>,
    /// It existed before the tracer attached (`--pid`): seeded from the process's memory map,
    /// so its call site and allocation time are unknown (`alloc_ns` is the attach).
    #[serde(default)]
    pub pre_existing: bool,
    /// The part its copies touched: (from, to), offsets from its start, the lowest copy's
    /// start to the highest copy's end; None where none was seen. Held here for speed (one
    /// write per copy); a dump writes them apart, as `HistoryData::copied_extents`.
    #[serde(skip)]
    pub copied: Option<(u64, u64)>,
}

impl Allocation {
    pub fn is_live(&self) -> bool {
        self.free_ns.is_none()
    }

    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr - self.start < self.size.max(1)
    }

    /// Transfers per MiB of the allocation: how much pinning it would pay back.
    pub fn transfers_per_mib(&self) -> f64 {
        let mib = (self.size.max(1) as f64) / (1 << 20) as f64;
        self.stats.transfers as f64 / mib
    }

    /// Inserts an event keeping the timeline ordered; events arrive nearly in order (one ring
    /// buffer shared by every CPU, reserved in order, but events of two rings and runs held
    /// back in the kernel come in later), so the search starts from the end.
    pub(super) fn push_event(&mut self, event: AllocEvent) {
        let ts = event.ts_ns();
        let at = self
            .events
            .iter()
            .rposition(|e| e.ts_ns() <= ts)
            .map_or(0, |i| i + 1);
        self.events.insert(at, event);
    }
}
