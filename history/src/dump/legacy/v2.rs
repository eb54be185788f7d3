//! Format 2, read and converted: its recording metadata has no checkpoint time (a version 2
//! file is a finished recording).

use serde::Deserialize;

use super::v3::{Allocation, HistoryStats};
use crate::history::{self, AllocId, CallSite, CallSiteId};

#[derive(Deserialize)]
pub struct RecordingMeta {
    tracer: String,
    started_unix_s: u64,
    pids: Vec<u32>,
    command: Vec<String>,
}

impl From<RecordingMeta> for history::RecordingMeta {
    fn from(old: RecordingMeta) -> Self {
        history::RecordingMeta {
            tracer: old.tracer,
            started_unix_s: old.started_unix_s,
            pids: old.pids,
            command: old.command,
            checkpoint_unix_s: None,
        }
    }
}

#[derive(Deserialize)]
pub struct HistoryData {
    meta: RecordingMeta,
    call_sites: Vec<CallSite>,
    allocations: Vec<Allocation>,
    stats: HistoryStats,
    callers: Vec<(AllocId, Vec<CallSiteId>)>,
}

impl From<HistoryData> for history::HistoryData {
    fn from(old: HistoryData) -> Self {
        history::HistoryData {
            meta: old.meta.into(),
            call_sites: old.call_sites,
            allocations: old.allocations.into_iter().map(Into::into).collect(),
            stats: old.stats.into(),
            callers: old.callers.into_iter().collect(),
            compacted: Vec::new(),
            pinned: Vec::new(),
            copied_extents: std::collections::BTreeMap::new(),
        }
    }
}
