//! Format 3, read and converted: no copy-direction, prefetch or device-memory counters and no
//! pre-existing allocations (those read as zero and false).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::v4::{AllocEvent, KernelCounters};
use crate::history::{
    self, AllocId, AllocKind, CallSite, CallSiteId, RecordingMeta, TransferStats,
};

// Formats 1 and 2 hold allocations and (2) statistics of this shape too.

#[derive(Deserialize)]
pub struct HistoryData {
    meta: RecordingMeta,
    call_sites: Vec<CallSite>,
    allocations: Vec<Allocation>,
    stats: HistoryStats,
    callers: Vec<(AllocId, Vec<CallSiteId>)>,
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
}

#[derive(Deserialize)]
pub struct HistoryStats {
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
            pre_existing: false,
            copied: None,
        }
    }
}

impl From<HistoryStats> for history::HistoryStats {
    fn from(s: HistoryStats) -> Self {
        history::HistoryStats {
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
            ..Default::default()
        }
    }
}

impl From<HistoryData> for history::HistoryData {
    fn from(old: HistoryData) -> Self {
        history::HistoryData {
            meta: old.meta,
            call_sites: old.call_sites,
            allocations: old.allocations.into_iter().map(Into::into).collect(),
            stats: old.stats.into(),
            callers: old.callers.into_iter().collect(),
            compacted: Vec::new(),
            pinned: Vec::new(),
            copied_extents: BTreeMap::new(),
        }
    }
}
