//! MemHistory: every host allocation of the traced processes, how often each was copied to
//! and from the GPU, and indexes to answer "which are hot" and "what contains this pointer".
//!
//! One writer records while readers query: the agent keeps it behind an `RwLock` and applies
//! events in batches, so readers wait for at most one batch.

mod allocation;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::probes::registry::function_name;

pub use allocation::{
    AllocEvent, AllocId, AllocKind, Allocation, CallSite, CallSiteId, TransferStats,
};
use serde::{Deserialize, Serialize};

use crate::{
    events::{CudaCall, Op},
    probes::{
        KernelCounters,
        registry::{AllocSpace, CopyDirection},
    },
};

/// Totals over the whole recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryStats {
    /// Calls seen per CUDA function (nested ones included).
    pub calls_by_function: BTreeMap<String, u64>,
    /// Failed calls per CUDA function: how many, and the last error code returned.
    pub failed_by_function: BTreeMap<String, (u64, i32)>,
    /// CUDA calls applied (nested driver calls included).
    pub calls: u64,
    /// Host<->device copies counted (each runtime call over a driver call once).
    pub transfers: u64,
    pub h2d_bytes: u64,
    pub d2h_bytes: u64,
    /// Device-to-device and host-to-host copies (not transfers over the bus).
    pub other_copies: u64,
    /// Driver calls made inside runtime calls, not counted again.
    pub nested_calls: u64,
    /// Calls that returned an error: recorded, not counted as transfers or allocations.
    pub failed_calls: u64,
    /// Calls whose entry was not seen (attached mid-call): arguments unknown.
    pub partial_calls: u64,
    /// Transfers whose host pointer was in no tracked allocation (kept in untracked entries).
    pub untracked_transfers: u64,
    /// Frees of pointers no live allocation starts at.
    pub unmatched_frees: u64,
    /// Pages the NVIDIA driver pinned and unpinned for the targets (kprobes; zero where the
    /// kernel has none).
    pub driver_locked_pages: u64,
    pub driver_unlocked_pages: u64,
    /// What the kernel side could not deliver.
    pub kernel: KernelCounters,
    /// Ring-buffer records that did not decode.
    pub decode_errors: u64,
}

impl HistoryStats {
    /// Events lost between the kernel and the history, counted exactly.
    pub fn lost_events(&self) -> u64 {
        self.kernel.ringbuf_full + self.decode_errors
    }
}

/// What was recorded, by whom, when.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingMeta {
    /// The tracer's version.
    pub tracer: String,
    /// Seconds since the Unix epoch when the recording started.
    pub started_unix_s: u64,
    pub pids: Vec<u32>,
    /// The command `tracer record -- CMD` started, if it started one.
    pub command: Vec<String>,
}

/// The serialisable content of a history; the indexes are rebuilt from it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryData {
    pub meta: RecordingMeta,
    pub call_sites: Vec<CallSite>,
    pub allocations: Vec<Allocation>,
    pub stats: HistoryStats,
}

/// Why a history's content is inconsistent (a hand-edited or corrupted dump).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidHistory {
    #[error("allocation at position {position} has id {id}")]
    IdOutOfOrder { position: usize, id: AllocId },
    #[error("allocation {id} names call site {site}, but there are only {count}")]
    UnknownCallSite {
        id: AllocId,
        site: CallSiteId,
        count: usize,
    },
    #[error("allocations {first} and {second} are both live at {start:#x} in process {pid}")]
    DuplicateLive {
        pid: u32,
        start: u64,
        first: AllocId,
        second: AllocId,
    },
}

/// The multi-indexed history.
#[derive(Debug, Default)]
pub struct MemHistory {
    data: HistoryData,
    /// Call sites by (module, offset).
    site_ids: HashMap<(String, u64), CallSiteId>,
    /// Live allocations by (pid, start).
    live: BTreeMap<(u32, u64), AllocId>,
    /// Host allocations ordered by transfer count.
    by_transfers: BTreeSet<(u64, AllocId)>,
    by_call_site: HashMap<CallSiteId, Vec<AllocId>>,
    /// Allocations made so far per (pid, call site, host or device): the next ordinal.
    ordinals: HashMap<(u32, Option<CallSiteId>, bool), u32>,
    /// Untracked entries by (pid, host pointer).
    untracked: HashMap<(u32, u64), AllocId>,
    /// Blocks hotpin's allocator marked pinned, waiting for the allocation that hands them
    /// out (the marker returns before the allocation call does).
    pinned_marks: std::collections::HashSet<(u32, u64)>,
}

impl PartialEq for MemHistory {
    fn eq(&self, other: &Self) -> bool {
        self.data == other.data
    }
}

impl MemHistory {
    pub fn new() -> Self {
        Self::default()
    }

    /// Rebuilds a history and its indexes from its content, checking it is consistent.
    pub fn from_data(data: HistoryData) -> Result<Self, InvalidHistory> {
        let mut history = MemHistory {
            data: HistoryData::default(),
            ..Default::default()
        };
        for (id, site) in data.call_sites.iter().enumerate() {
            history
                .site_ids
                .insert((site.module.clone(), site.offset), id as CallSiteId);
        }
        for (position, allocation) in data.allocations.iter().enumerate() {
            if allocation.id != position as AllocId {
                return Err(InvalidHistory::IdOutOfOrder {
                    position,
                    id: allocation.id,
                });
            }
            let id = allocation.id;
            if let Some(site) = allocation.call_site {
                if site as usize >= data.call_sites.len() {
                    return Err(InvalidHistory::UnknownCallSite {
                        id,
                        site,
                        count: data.call_sites.len(),
                    });
                }
                history.by_call_site.entry(site).or_default().push(id);
            }
            let next = history
                .ordinals
                .entry((
                    allocation.pid,
                    allocation.call_site,
                    allocation.kind.is_host(),
                ))
                .or_default();
            *next = (*next).max(allocation.ordinal.saturating_add(1));
            if allocation.kind == AllocKind::Untracked {
                history
                    .untracked
                    .insert((allocation.pid, allocation.start), id);
            } else if allocation.is_live()
                && let Some(first) = history.live.insert((allocation.pid, allocation.start), id)
            {
                return Err(InvalidHistory::DuplicateLive {
                    pid: allocation.pid,
                    start: allocation.start,
                    first,
                    second: id,
                });
            }
            if allocation.kind.is_host() {
                history
                    .by_transfers
                    .insert((allocation.stats.transfers, id));
            }
        }
        history.data = data;
        Ok(history)
    }

    pub fn data(&self) -> &HistoryData {
        &self.data
    }

    pub fn into_data(self) -> HistoryData {
        self.data
    }

    pub fn stats(&self) -> &HistoryStats {
        &self.data.stats
    }

    pub fn stats_mut(&mut self) -> &mut HistoryStats {
        &mut self.data.stats
    }

    pub fn meta(&self) -> &RecordingMeta {
        &self.data.meta
    }

    pub fn meta_mut(&mut self) -> &mut RecordingMeta {
        &mut self.data.meta
    }

    pub fn allocations(&self) -> &[Allocation] {
        &self.data.allocations
    }

    pub fn allocation(&self, id: AllocId) -> Option<&Allocation> {
        self.data.allocations.get(id as usize)
    }

    pub fn call_sites(&self) -> &[CallSite] {
        &self.data.call_sites
    }

    pub fn call_site(&self, id: CallSiteId) -> Option<&CallSite> {
        self.data.call_sites.get(id as usize)
    }

    /// The id of a call site, adding it if new.
    pub fn intern_call_site(&mut self, site: CallSite) -> CallSiteId {
        let key = (site.module.clone(), site.offset);
        if let Some(&id) = self.site_ids.get(&key) {
            return id;
        }
        let id = self.data.call_sites.len() as CallSiteId;
        self.data.call_sites.push(site);
        self.site_ids.insert(key, id);
        id
    }

    /// The live allocation of `pid` containing `addr`, in O(log n).
    pub fn find(&self, pid: u32, addr: u64) -> Option<&Allocation> {
        self.find_id(pid, addr)
            .map(|id| &self.data.allocations[id as usize])
    }

    fn find_id(&self, pid: u32, addr: u64) -> Option<AllocId> {
        let (&(found_pid, _), &id) = self.live.range(..=(pid, addr)).next_back()?;
        (found_pid == pid && self.data.allocations[id as usize].contains(addr)).then_some(id)
    }

    /// Every allocation (live or freed) made at a call site.
    pub fn at_call_site(&self, site: CallSiteId) -> impl Iterator<Item = &Allocation> {
        self.by_call_site
            .get(&site)
            .into_iter()
            .flatten()
            .map(|&id| &self.data.allocations[id as usize])
    }

    /// The `n` host allocations transferred most, most first, in O(n + log total).
    pub fn hotspots(&self, n: usize) -> Vec<&Allocation> {
        self.by_transfers
            .iter()
            .rev()
            .take(n)
            .map(|&(_, id)| self.get(id))
            .collect()
    }

    /// The `n` host allocations transferred least, least first.
    pub fn coldspots(&self, n: usize) -> Vec<&Allocation> {
        self.by_transfers
            .iter()
            .take(n)
            .map(|&(_, id)| self.get(id))
            .collect()
    }

    /// Host allocations with at least `min_transfers`, most first.
    pub fn hotspots_threshold(&self, min_transfers: u64) -> Vec<&Allocation> {
        self.by_transfers
            .range((min_transfers, 0)..)
            .rev()
            .map(|&(_, id)| self.get(id))
            .collect()
    }

    /// Host allocations with at most `max_transfers`, least first.
    pub fn coldspots_threshold(&self, max_transfers: u64) -> Vec<&Allocation> {
        self.by_transfers
            .range(..=(max_transfers, AllocId::MAX))
            .map(|&(_, id)| self.get(id))
            .collect()
    }

    fn get(&self, id: AllocId) -> &Allocation {
        &self.data.allocations[id as usize]
    }

    /// Records a new allocation. A live allocation already at the same start (its free was not
    /// seen) is closed first, so an address can carry several histories with one active.
    pub fn alloc(
        &mut self,
        pid: u32,
        start: u64,
        size: u64,
        kind: AllocKind,
        call_site: Option<CallSiteId>,
        ts_ns: u64,
    ) -> AllocId {
        if let Some(previous) = self.live.remove(&(pid, start)) {
            self.close(previous, ts_ns);
        }
        // Host and device allocations are counted apart: one call site can make both (a
        // wrapper, or ctypes, whose calls all come from one place in libffi), and hotpin's
        // allocator, which matches allocations by ordinal, sees only the host ones.
        let ordinal_slot = self
            .ordinals
            .entry((pid, call_site, kind.is_host()))
            .or_default();
        let ordinal = *ordinal_slot;
        *ordinal_slot += 1;
        let id = self.data.allocations.len() as AllocId;
        let mut allocation = Allocation {
            id,
            pid,
            start,
            size,
            kind,
            call_site,
            ordinal,
            alloc_ns: ts_ns,
            free_ns: None,
            stats: TransferStats::default(),
            events: Vec::new(),
        };
        allocation.push_event(AllocEvent::Alloc { ts_ns });
        self.data.allocations.push(allocation);
        if kind != AllocKind::Untracked {
            self.live.insert((pid, start), id);
        }
        if let Some(site) = call_site {
            self.by_call_site.entry(site).or_default().push(id);
        }
        if kind.is_host() {
            self.by_transfers.insert((0, id));
        }
        id
    }

    fn close(&mut self, id: AllocId, ts_ns: u64) {
        let allocation = &mut self.data.allocations[id as usize];
        allocation.free_ns = Some(ts_ns);
        allocation.push_event(AllocEvent::Free { ts_ns });
    }

    /// Records the free of the allocation starting at `addr`.
    pub fn free(&mut self, pid: u32, addr: u64, ts_ns: u64) -> Option<AllocId> {
        match self.live.remove(&(pid, addr)) {
            Some(id) => {
                self.close(id, ts_ns);
                Some(id)
            }
            None => {
                self.data.stats.unmatched_frees += 1;
                None
            }
        }
    }

    /// Records `cudaHostRegister` of `addr..addr+size`: the allocation starting there becomes
    /// registered, or a new registered allocation is recorded if none does.
    pub fn register(
        &mut self,
        pid: u32,
        addr: u64,
        size: u64,
        call_site: Option<CallSiteId>,
        ts_ns: u64,
    ) -> AllocId {
        match self.live.get(&(pid, addr)).copied() {
            Some(id) => {
                let allocation = &mut self.data.allocations[id as usize];
                allocation.kind = AllocKind::Registered;
                allocation.push_event(AllocEvent::Register { ts_ns });
                id
            }
            None => {
                let id = self.alloc(pid, addr, size, AllocKind::Registered, call_site, ts_ns);
                self.data.allocations[id as usize].events[0] = AllocEvent::Register { ts_ns };
                id
            }
        }
    }

    /// Records `cudaHostUnregister`: the memory stays, pageable again.
    pub fn unregister(&mut self, pid: u32, addr: u64, ts_ns: u64) -> Option<AllocId> {
        let id = self.live.get(&(pid, addr)).copied()?;
        let allocation = &mut self.data.allocations[id as usize];
        allocation.kind = AllocKind::Pageable;
        allocation.push_event(AllocEvent::Unregister { ts_ns });
        Some(id)
    }

    /// Records a copy and attributes it to the host allocation it reads or writes.
    pub fn transfer(
        &mut self,
        pid: u32,
        dst: u64,
        src: u64,
        bytes: u64,
        direction: CopyDirection,
        ts_ns: u64,
    ) -> Option<AllocId> {
        let is_device = |history: &Self, addr: u64| {
            history
                .find(pid, addr)
                .is_some_and(|a| a.kind == AllocKind::Device)
        };
        let direction = match direction {
            CopyDirection::Unresolved => match (is_device(self, dst), is_device(self, src)) {
                (true, false) => CopyDirection::HostToDevice,
                (false, true) => CopyDirection::DeviceToHost,
                (true, true) => CopyDirection::DeviceToDevice,
                (false, false) => CopyDirection::Unresolved,
            },
            known => known,
        };
        let host = match direction {
            CopyDirection::HostToDevice => src,
            CopyDirection::DeviceToHost => dst,
            CopyDirection::DeviceToDevice | CopyDirection::HostToHost => {
                self.data.stats.other_copies += 1;
                return None;
            }
            // Neither side is a known device allocation: the side in a known host allocation
            // is the host, else the source.
            CopyDirection::Unresolved => {
                if self.find(pid, dst).is_some() && self.find(pid, src).is_none() {
                    dst
                } else {
                    src
                }
            }
        };
        let id = match self.find_id(pid, host) {
            Some(id) if self.data.allocations[id as usize].kind.is_host() => id,
            _ => {
                self.data.stats.untracked_transfers += 1;
                self.untracked_entry(pid, host, bytes, ts_ns)
            }
        };
        let stats = &mut self.data.stats;
        stats.transfers += 1;
        match direction {
            CopyDirection::HostToDevice => stats.h2d_bytes += bytes,
            CopyDirection::DeviceToHost => stats.d2h_bytes += bytes,
            _ => {}
        }
        let allocation = &mut self.data.allocations[id as usize];
        let old = allocation.stats.transfers;
        let s = &mut allocation.stats;
        s.transfers += 1;
        match direction {
            CopyDirection::HostToDevice => {
                s.h2d_count += 1;
                s.h2d_bytes += bytes;
            }
            CopyDirection::DeviceToHost => {
                s.d2h_count += 1;
                s.d2h_bytes += bytes;
            }
            _ => {
                s.other_count += 1;
                s.other_bytes += bytes;
            }
        }
        s.first_transfer_ns = Some(s.first_transfer_ns.map_or(ts_ns, |t| t.min(ts_ns)));
        s.last_transfer_ns = Some(s.last_transfer_ns.map_or(ts_ns, |t| t.max(ts_ns)));
        let new = s.transfers;
        allocation.push_event(AllocEvent::Transfer {
            ts_ns,
            direction,
            bytes,
        });
        self.by_transfers.remove(&(old, id));
        self.by_transfers.insert((new, id));
        Some(id)
    }

    fn untracked_entry(&mut self, pid: u32, addr: u64, bytes: u64, ts_ns: u64) -> AllocId {
        let id = match self.untracked.get(&(pid, addr)) {
            Some(&id) => id,
            None => {
                let id = self.alloc(pid, addr, bytes, AllocKind::Untracked, None, ts_ns);
                self.untracked.insert((pid, addr), id);
                id
            }
        };
        let allocation = &mut self.data.allocations[id as usize];
        allocation.size = allocation.size.max(bytes);
        id
    }

    /// Records a user page fault at `addr` against the allocation containing it.
    pub fn page_fault(&mut self, pid: u32, addr: u64, ts_ns: u64) -> Option<AllocId> {
        let id = self.find_id(pid, addr)?;
        let allocation = &mut self.data.allocations[id as usize];
        allocation.stats.page_faults += 1;
        allocation.push_event(AllocEvent::PageFault { ts_ns, addr });
        Some(id)
    }

    /// Applies one decoded CUDA call. `call_site` is the caller, already interned.
    pub fn apply(&mut self, call: &CudaCall, call_site: Option<CallSiteId>) {
        let stats = &mut self.data.stats;
        stats.calls += 1;
        let name = function_name(call.kind);
        match stats.calls_by_function.get_mut(name) {
            Some(count) => *count += 1,
            None => {
                stats.calls_by_function.insert(name.to_string(), 1);
            }
        }
        if call.nested {
            self.data.stats.nested_calls += 1;
            return;
        }
        if call.partial {
            self.data.stats.partial_calls += 1;
            return;
        }
        if call.result != 0 {
            self.data.stats.failed_calls += 1;
            let failed = self
                .data
                .stats
                .failed_by_function
                .entry(name.to_string())
                .or_default();
            failed.0 += 1;
            failed.1 = call.result;
            return;
        }
        let (pid, ts) = (call.pid, call.ts_ns);
        match call.op {
            Op::Alloc { addr: 0, .. } => self.data.stats.failed_calls += 1,
            Op::Alloc { addr, size, space } => {
                let kind = match space {
                    AllocSpace::Device => AllocKind::Device,
                    AllocSpace::PinnedHost => AllocKind::Pinned,
                    AllocSpace::Host if self.pinned_marks.remove(&(pid, addr)) => AllocKind::Pinned,
                    AllocSpace::Host => AllocKind::Pageable,
                };
                self.alloc(pid, addr, size, kind, call_site, ts);
            }
            Op::Free { addr: 0, .. } => {}
            Op::Free { addr, .. } => {
                self.free(pid, addr, ts);
            }
            Op::Register { addr, size } => {
                self.register(pid, addr, size, call_site, ts);
            }
            Op::Unregister { addr } => {
                self.unregister(pid, addr, ts);
            }
            Op::MarkPinned { addr } => {
                self.pinned_marks.insert((pid, addr));
            }
            Op::Copy {
                dst,
                src,
                bytes,
                direction,
            } => {
                self.transfer(pid, dst, src, bytes, direction, ts);
            }
        }
    }
}

#[cfg(test)]
mod tests;
