//! Format 4, read and converted: its kernel counters have no unread copies, and its copies
//! no thread or stream (read as zero).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::history::{
    self, AllocId, AllocKind, CallSite, CallSiteId, DeviceMemory, RecordingMeta, TransferStats,
};
use hotpin_registry::registry::CopyDirection;

// Formats 1-3 hold timeline events of this shape too.

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllocEvent {
    Alloc {
        ts_ns: u64,
    },
    Transfer {
        ts_ns: u64,
        direction: CopyDirection,
        bytes: u64,
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

impl From<AllocEvent> for history::AllocEvent {
    fn from(old: AllocEvent) -> Self {
        match old {
            AllocEvent::Alloc { ts_ns } => history::AllocEvent::Alloc { ts_ns },
            AllocEvent::Transfer {
                ts_ns,
                direction,
                bytes,
            } => history::AllocEvent::Transfer {
                ts_ns,
                direction,
                bytes,
                tid: 0,
                stream: 0,
            },
            AllocEvent::PageFault { ts_ns, addr } => history::AllocEvent::PageFault { ts_ns, addr },
            AllocEvent::Register { ts_ns } => history::AllocEvent::Register { ts_ns },
            AllocEvent::Unregister { ts_ns } => history::AllocEvent::Unregister { ts_ns },
            AllocEvent::Free { ts_ns } => history::AllocEvent::Free { ts_ns },
        }
    }
}

#[derive(Deserialize)]
pub struct Allocation {
    id: AllocId,
    pid: u32,
    start: u64,
    size: u64,
    kind: AllocKind,
    call_site: Option<CallSiteId>,
    ordinal: u32,
    alloc_ns: u64,
    free_ns: Option<u64>,
    stats: TransferStats,
    events: Vec<AllocEvent>,
    pre_existing: bool,
}

impl From<Allocation> for history::Allocation {
    fn from(a: Allocation) -> Self {
        history::Allocation {
            id: a.id,
            pid: a.pid,
            start: a.start,
            size: a.size,
            kind: a.kind,
            call_site: a.call_site,
            ordinal: a.ordinal,
            alloc_ns: a.alloc_ns,
            free_ns: a.free_ns,
            stats: a.stats,
            events: a.events.into_iter().map(Into::into).collect(),
            pre_existing: a.pre_existing,
            copied: None,
        }
    }
}

// Formats 1-3 hold kernel counters of this shape too.

#[derive(Deserialize)]
pub struct KernelCounters {
    ringbuf_full: u64,
    pending_full: u64,
    #[serde(default)]
    host_ringbuf_full: u64,
}

impl From<KernelCounters> for history::KernelCounters {
    fn from(old: KernelCounters) -> Self {
        history::KernelCounters {
            ringbuf_full: old.ringbuf_full,
            pending_full: old.pending_full,
            host_ringbuf_full: old.host_ringbuf_full,
            unread_copies: 0,
        }
    }
}

#[derive(Deserialize)]
pub struct HistoryData {
    meta: RecordingMeta,
    call_sites: Vec<CallSite>,
    allocations: Vec<Allocation>,
    stats: HistoryStats,
    #[serde(with = "crate::history::pairs")]
    callers: BTreeMap<AllocId, Vec<CallSiteId>>,
}

#[derive(Deserialize)]
struct HistoryStats {
    calls_by_function: BTreeMap<String, u64>,
    failed_by_function: BTreeMap<String, (u64, i32)>,
    calls: u64,
    transfers: u64,
    h2d_bytes: u64,
    d2h_bytes: u64,
    other_copies: u64,
    nested_calls: u64,
    failed_calls: u64,
    partial_calls: u64,
    untracked_transfers: u64,
    unmatched_frees: u64,
    driver_locked_pages: u64,
    driver_unlocked_pages: u64,
    page_faults: u64,
    untracked_page_faults: u64,
    host_memory_calls: BTreeMap<String, u64>,
    nvidia_ioctls: BTreeMap<String, u64>,
    kernel: KernelCounters,
    decode_errors: u64,
    unresolved_copies: u64,
    device_copies: u64,
    device_copy_bytes: u64,
    prefetches_to_device: u64,
    prefetch_to_device_bytes: u64,
    prefetches_to_host: u64,
    prefetch_to_host_bytes: u64,
    #[serde(with = "crate::history::pairs")]
    device_memory: BTreeMap<u32, DeviceMemory>,
}

impl From<HistoryData> for history::HistoryData {
    fn from(old: HistoryData) -> Self {
        let s = old.stats;
        history::HistoryData {
            meta: old.meta,
            call_sites: old.call_sites,
            allocations: old.allocations.into_iter().map(Into::into).collect(),
            stats: history::HistoryStats {
                calls_by_function: s.calls_by_function,
                failed_by_function: s.failed_by_function,
                calls: s.calls,
                transfers: s.transfers,
                h2d_bytes: s.h2d_bytes,
                d2h_bytes: s.d2h_bytes,
                other_copies: s.other_copies,
                nested_calls: s.nested_calls,
                failed_calls: s.failed_calls,
                partial_calls: s.partial_calls,
                untracked_transfers: s.untracked_transfers,
                unmatched_frees: s.unmatched_frees,
                driver_locked_pages: s.driver_locked_pages,
                driver_unlocked_pages: s.driver_unlocked_pages,
                page_faults: s.page_faults,
                untracked_page_faults: s.untracked_page_faults,
                host_memory_calls: s.host_memory_calls,
                nvidia_ioctls: s.nvidia_ioctls,
                kernel: s.kernel.into(),
                decode_errors: s.decode_errors,
                unresolved_copies: s.unresolved_copies,
                device_copies: s.device_copies,
                device_copy_bytes: s.device_copy_bytes,
                prefetches_to_device: s.prefetches_to_device,
                prefetch_to_device_bytes: s.prefetch_to_device_bytes,
                prefetches_to_host: s.prefetches_to_host,
                prefetch_to_host_bytes: s.prefetch_to_host_bytes,
                device_memory: s.device_memory,
            },
            callers: old.callers,
            compacted: Vec::new(),
            pinned: Vec::new(),
            copied_extents: BTreeMap::new(),
        }
    }
}
