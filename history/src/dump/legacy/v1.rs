//! Format 1, read and converted: its statistics lack the host memory, page fault and ioctl
//! counters of format 2 (they read as zero); everything else is the same.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{v2::RecordingMeta, v3::Allocation};
use crate::{
    history::KernelCounters,
    history::{self, CallSite},
};

#[derive(Deserialize)]
struct KernelCountersV1 {
    ringbuf_full: u64,
    pending_full: u64,
}

#[derive(Deserialize)]
pub struct HistoryData {
    meta: RecordingMeta,
    call_sites: Vec<CallSite>,
    allocations: Vec<Allocation>,
    stats: HistoryStats,
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
    kernel: KernelCountersV1,
    decode_errors: u64,
}

impl From<HistoryData> for history::HistoryData {
    fn from(old: HistoryData) -> Self {
        let s = old.stats;
        history::HistoryData {
            meta: old.meta.into(),
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
                kernel: KernelCounters {
                    ringbuf_full: s.kernel.ringbuf_full,
                    pending_full: s.kernel.pending_full,
                    ..KernelCounters::default()
                },
                decode_errors: s.decode_errors,
                ..Default::default()
            },
            callers: Default::default(),
            compacted: Vec::new(),
            pinned: Vec::new(),
            copied_extents: BTreeMap::new(),
        }
    }
}
