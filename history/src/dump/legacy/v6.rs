//! Format 6, read and converted: it has no accounts of pinned memory (they are computed from
//! the allocations; only what the node's arbiter leased, which format 6 never held, is lost).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::history::{
    self, AllocId, Allocation, CallSite, CallSiteId, HistoryStats, RecordingMeta, SiteAggregate,
};

#[derive(Deserialize)]
pub struct HistoryData {
    meta: RecordingMeta,
    call_sites: Vec<CallSite>,
    allocations: Vec<Allocation>,
    stats: HistoryStats,
    #[serde(with = "crate::history::pairs")]
    callers: BTreeMap<AllocId, Vec<CallSiteId>>,
    compacted: Vec<SiteAggregate>,
}

impl From<HistoryData> for history::HistoryData {
    fn from(old: HistoryData) -> Self {
        history::HistoryData {
            meta: old.meta,
            call_sites: old.call_sites,
            allocations: old.allocations,
            stats: old.stats,
            callers: old.callers,
            compacted: old.compacted,
            pinned: Vec::new(),
            copied_extents: BTreeMap::new(),
        }
    }
}
