//! Format 7, read and converted: it has no copied extents (which part of each allocation
//! copies touched, #42); what it holds is kept whole.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::history::{
    self, AllocId, Allocation, CallSite, CallSiteId, HistoryStats, PinnedAccount, RecordingMeta,
    SiteAggregate,
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
    pinned: Vec<PinnedAccount>,
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
            pinned: old.pinned,
            copied_extents: BTreeMap::new(),
        }
    }
}
