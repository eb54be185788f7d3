//! Format 5, read and converted: it has no aggregates of folded allocations.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::history::{
    self, AllocId, Allocation, CallSite, CallSiteId, HistoryStats, RecordingMeta,
};

#[derive(Deserialize)]
pub struct HistoryData {
    meta: RecordingMeta,
    call_sites: Vec<CallSite>,
    allocations: Vec<Allocation>,
    stats: HistoryStats,
    #[serde(with = "crate::history::pairs")]
    callers: BTreeMap<AllocId, Vec<CallSiteId>>,
}

impl From<HistoryData> for history::HistoryData {
    fn from(old: HistoryData) -> Self {
        history::HistoryData {
            meta: old.meta,
            call_sites: old.call_sites,
            allocations: old.allocations,
            stats: old.stats,
            callers: old.callers,
            compacted: Vec::new(),
            pinned: Vec::new(),
            copied_extents: BTreeMap::new(),
        }
    }
}
