//! MemHistory: every host allocation of the traced processes, how often each was copied to
//! and from the GPU, and indexes to answer "which are hot" and "what contains this pointer".
//!
//! One writer records while readers query: the agent keeps it behind an `RwLock` and applies
//! events in batches, so readers wait for at most one batch.

mod aggregate;
mod allocation;
mod pinned;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use hotpin_registry::registry::function_name;

pub use aggregate::peak_alive;
pub use aggregate::{Retention, SiteAggregate};
pub use allocation::{
    AllocEvent, AllocId, AllocKind, Allocation, CallSite, CallSiteId, PYTHON_MODULE, TransferStats,
    module_file_name,
};
pub use pinned::{LeaseAccount, PinnedAccount};
use serde::{Deserialize, Serialize};

use hotpin_registry::{
    events::{ApiCall, HostOp, Op, TraceEvent},
    registry::{AllocSpace, CopyDirection},
};

/// Events the kernel side could not deliver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelCounters {
    /// Events dropped because the ring buffer was full.
    pub ringbuf_full: u64,
    /// Calls whose entry could not be remembered (their event has no arguments).
    pub pending_full: u64,
    /// Host memory syscalls, page-fault runs and ioctls dropped because the ring buffer was
    /// full (counted apart, so CUDA calls' losses stay exact on their own).
    #[serde(default)]
    pub host_ringbuf_full: u64,
    /// Copies whose arguments in user memory (a copy's descriptor, a batch's arrays) could
    /// not be read when the call was made, and batch elements past the kernel side's limit.
    #[serde(default)]
    pub unread_copies: u64,
}

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
    /// User page faults seen (with `--page-faults`), in pages; those in no tracked allocation
    /// or mapping are also counted apart.
    #[serde(default)]
    pub page_faults: u64,
    #[serde(default)]
    pub untracked_page_faults: u64,
    /// Host memory syscalls seen (mmap, munmap, mremap, brk), made outside CUDA and hotpin
    /// calls; failed ones included.
    #[serde(default)]
    pub host_memory_calls: BTreeMap<String, u64>,
    /// ioctls of the NVIDIA driver's kind, by escape number (`_IOC_NR`, in hex: "0x2a").
    #[serde(default)]
    pub nvidia_ioctls: BTreeMap<String, u64>,
    /// What the kernel side could not deliver.
    pub kernel: KernelCounters,
    /// Ring-buffer records that did not decode.
    pub decode_errors: u64,
    /// Copies whose direction could not be known (unified addressing, with neither pointer in
    /// a known allocation nor in the process's address space when the copy was read). Counted
    /// in `transfers`, in neither direction's bytes.
    #[serde(default)]
    pub unresolved_copies: u64,
    /// Device-to-device copies (peer copies included), also counted in `other_copies`.
    #[serde(default)]
    pub device_copies: u64,
    #[serde(default)]
    pub device_copy_bytes: u64,
    /// Managed memory prefetched (cudaMemPrefetchAsync), by direction: migrations, not copies.
    #[serde(default)]
    pub prefetches_to_device: u64,
    #[serde(default)]
    pub prefetch_to_device_bytes: u64,
    #[serde(default)]
    pub prefetches_to_host: u64,
    #[serde(default)]
    pub prefetch_to_host_bytes: u64,
    /// Device memory (device and managed allocations, mapped ranges) by process.
    #[serde(default, with = "pairs")]
    pub device_memory: BTreeMap<u32, DeviceMemory>,
}

/// Where a copy was made: its thread, and the stream it was queued on (0: the default
/// stream, or not known).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Queue {
    pub tid: u32,
    pub stream: u64,
}

/// `count` identical copies a process made (a run the kernel counted, or one copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copies {
    pub pid: u32,
    pub dst: u64,
    pub src: u64,
    /// Bytes of each copy.
    pub bytes: u64,
    pub direction: CopyDirection,
    pub ts_ns: u64,
    pub count: u64,
    pub queue: Queue,
}

/// A process's device memory, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceMemory {
    pub live_bytes: u64,
    pub peak_bytes: u64,
}

impl KernelCounters {
    /// Events the kernel side lost (a full ring buffer, arguments it could not read).
    pub fn lost(&self) -> u64 {
        self.ringbuf_full + self.host_ringbuf_full + self.unread_copies
    }
}

impl HistoryStats {
    /// Events lost between the kernel and the history, counted exactly.
    pub fn lost_events(&self) -> u64 {
        self.kernel.lost() + self.decode_errors
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
    /// Set in a checkpoint (`tracer record --checkpoint`): when it was written, in seconds
    /// since the Unix epoch, while the recording went on. A finished recording has none.
    #[serde(default)]
    pub checkpoint_unix_s: Option<u64>,
}

/// The serialisable content of a history; the indexes are rebuilt from it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryData {
    pub meta: RecordingMeta,
    pub call_sites: Vec<CallSite>,
    pub allocations: Vec<Allocation>,
    pub stats: HistoryStats,
    /// The callers beyond an allocation's call site, innermost first, where the user stack
    /// could be walked (frame pointers): by allocation id. Written as a list of pairs: JSON
    /// object keys are strings, which a map keyed by number does not read back.
    #[serde(default, with = "pairs")]
    pub callers: BTreeMap<AllocId, Vec<CallSiteId>>,
    /// Freed allocations folded together to bound the history (see [`Retention`]).
    #[serde(default)]
    pub compacted: Vec<SiteAggregate>,
    /// Each process's pinned memory ([`PinnedAccount`]): written from the allocations when
    /// the history is dumped ([`HistoryData::pinned_accounts`]); in memory, and of what is
    /// read, only the leases (the rest is computed again).
    #[serde(default)]
    pub pinned: Vec<PinnedAccount>,
    /// The part of each host allocation that copies touched, where one did: (from, to),
    /// offsets from its start, the lowest copy's start to the highest copy's end (#42: a 4 GiB
    /// pinned dataset of which one 64 MiB slice is copied is pinned and mostly wasted). A
    /// span, not the union: copies far apart count what lies between them as touched. A list
    /// of pairs, as `callers`. Only in a dump: in memory each allocation holds its own
    /// ([`Allocation::copied`]); what a dump holds is moved there as it is read
    /// ([`HistoryData::spread_extents`]), so this is empty in a history in memory.
    #[serde(default, with = "pairs")]
    pub copied_extents: BTreeMap<AllocId, (u64, u64)>,
}

impl HistoryData {
    /// The part of allocation `id` its copies touched, inside its present size (a mapping or
    /// the heap may have shrunk since): None where none was seen, or none of it is left.
    pub fn copied_extent(&self, id: AllocId) -> Option<(u64, u64)> {
        let allocation = self.allocations.get(id as usize)?;
        let (from, to) = allocation.copied?;
        (from < allocation.size).then(|| (from, to.min(allocation.size)))
    }

    /// Moves the copied extents a dump holds (`copied_extents`) into their allocations; one
    /// of no allocation, or empty, is an error.
    pub fn spread_extents(&mut self) -> Result<(), InvalidHistory> {
        for (id, (from, to)) in std::mem::take(&mut self.copied_extents) {
            match self.allocations.get_mut(id as usize) {
                Some(allocation) if from < to => allocation.copied = Some((from, to)),
                _ => return Err(InvalidHistory::BadExtent { id, from, to }),
            }
        }
        Ok(())
    }

    /// Each allocation's copied extent, by id: what a dump writes as `copied_extents`.
    pub fn gathered_extents(&self) -> Vec<(AllocId, (u64, u64))> {
        self.allocations
            .iter()
            .filter_map(|a| Some((a.id, a.copied?)))
            .collect()
    }

    /// Each process's pinned host memory, from the allocations (folded ones too); the leases
    /// as `pinned` holds them.
    pub fn pinned_accounts(&self) -> Vec<PinnedAccount> {
        pinned::accounts(self)
    }
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
    #[error("aggregate at position {position} names call site {site}, but there are only {count}")]
    UnknownAggregateSite {
        position: usize,
        site: CallSiteId,
        count: usize,
    },
    #[error("process {pid}'s pinned memory is accounted twice")]
    DuplicateAccount { pid: u32 },
    #[error(
        "the copied part {from}..{to} names allocation {id}, which does not exist, or is empty"
    )]
    BadExtent { id: AllocId, from: u64, to: u64 },
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
    /// Call sites as the kernel gave them, (build id, offset), once resolved: an allocation's
    /// site and caller frames are named once per history, not at every allocation (naming
    /// took a third of the daemon's writer). `None`: a frame that ends the walk.
    raw_site_ids: HashMap<([u8; 20], u64), Option<CallSiteId>>,
    /// Live allocations by (pid, start).
    live: BTreeMap<(u32, u64), AllocId>,
    /// Live anonymous mappings and heaps by (pid, start): they hold allocations, so an address
    /// is looked up in `live` first. They never overlap each other.
    regions: BTreeMap<(u32, u64), AllocId>,
    /// Each process's live heap (the brk region).
    heaps: HashMap<u32, AllocId>,
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
    /// What to keep in memory.
    retention: Retention,
    /// Freed allocations in `data.allocations`: what [`Self::bound`] could fold.
    freed: usize,
}

/// A map written as a list of (key, value) pairs.
pub(crate) mod pairs {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<K: Serialize, V: Serialize, S: Serializer>(
        map: &BTreeMap<K, V>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(map.iter())
    }

    pub fn deserialize<'de, K, V, D>(deserializer: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(deserializer)?
            .into_iter()
            .collect())
    }
}

/// Counts one more `name`, allocating its key only the first time.
fn count(counts: &mut BTreeMap<String, u64>, name: &str) {
    count_n(counts, name, 1);
}

fn count_n(counts: &mut BTreeMap<String, u64>, name: &str, n: u64) {
    match counts.get_mut(name) {
        Some(count) => *count = count.saturating_add(n),
        None => {
            counts.insert(name.to_string(), n);
        }
    }
}

/// Where the first entry of `index` after `addr` in process `pid` starts.
fn next_start(index: &BTreeMap<(u32, u64), AllocId>, pid: u32, addr: u64) -> Option<u64> {
    index
        .range((pid, addr.saturating_add(1))..=(pid, u64::MAX))
        .next()
        .map(|(&(_, start), _)| start)
}

/// Why `data` is not a consistent history, if it is not: ids out of order, call sites that
/// do not exist, two live allocations at one address.
fn check(data: &HistoryData) -> Result<(), InvalidHistory> {
    let sites = data.call_sites.len();
    let mut live = std::collections::HashMap::new();
    for (position, allocation) in data.allocations.iter().enumerate() {
        let id = allocation.id;
        if id != position as AllocId {
            return Err(InvalidHistory::IdOutOfOrder { position, id });
        }
        if let Some(site) = allocation.call_site.filter(|&s| s as usize >= sites) {
            return Err(InvalidHistory::UnknownCallSite {
                id,
                site,
                count: sites,
            });
        }
        let indexed = allocation.kind != AllocKind::Untracked && !allocation.kind.is_region();
        if indexed
            && allocation.is_live()
            && let Some(first) = live.insert((allocation.pid, allocation.start), id)
        {
            return Err(InvalidHistory::DuplicateLive {
                pid: allocation.pid,
                start: allocation.start,
                first,
                second: id,
            });
        }
    }
    // An extent may reach past its allocation's end: a mapping or the heap can shrink after
    // it was copied. Readers keep to the allocation (`copied_extent`).
    for allocation in &data.allocations {
        if let Some((from, to)) = allocation.copied.filter(|(from, to)| from >= to) {
            return Err(InvalidHistory::BadExtent {
                id: allocation.id,
                from,
                to,
            });
        }
    }
    for (&id, callers) in &data.callers {
        if let Some(&site) = callers.iter().find(|&&s| s as usize >= sites) {
            return Err(InvalidHistory::UnknownCallSite {
                id,
                site,
                count: sites,
            });
        }
    }
    for (position, aggregate) in data.compacted.iter().enumerate() {
        if let Some(site) = aggregate.call_site.filter(|&s| s as usize >= sites) {
            return Err(InvalidHistory::UnknownAggregateSite {
                position,
                site,
                count: sites,
            });
        }
    }
    // The tracer writes one account per process (found by the fuzzer: two of one process
    // were merged into one on the next write).
    let mut accounted = std::collections::HashSet::new();
    if let Some(twice) = data.pinned.iter().find(|a| !accounted.insert(a.pid)) {
        return Err(InvalidHistory::DuplicateAccount { pid: twice.pid });
    }
    Ok(())
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
    pub fn from_data(mut data: HistoryData) -> Result<Self, InvalidHistory> {
        data.spread_extents()?;
        check(&data)?;
        Ok(Self::index(data))
    }

    /// Builds the indexes over consistent content (checked by [`check`], or kept consistent
    /// by folding).
    fn index(data: HistoryData) -> Self {
        let mut history = MemHistory::default();
        for (id, site) in data.call_sites.iter().enumerate() {
            history
                .site_ids
                .insert((site.module.clone(), site.offset), id as CallSiteId);
        }
        for allocation in &data.allocations {
            let id = allocation.id;
            if let Some(site) = allocation.call_site {
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
            if !allocation.is_live() {
                history.freed += 1;
            }
            if allocation.kind == AllocKind::Untracked {
                history
                    .untracked
                    .insert((allocation.pid, allocation.start), id);
            } else if allocation.kind.is_region() {
                if allocation.is_live() {
                    history
                        .regions
                        .insert((allocation.pid, allocation.start), id);
                    if allocation.kind == AllocKind::Heap {
                        history.heaps.insert(allocation.pid, id);
                    }
                }
            } else if allocation.is_live() {
                history.live.insert((allocation.pid, allocation.start), id);
            }
            if allocation.kind.is_host() {
                history
                    .by_transfers
                    .insert((allocation.stats.transfers, id));
            }
        }
        // Folded allocations keep their ordinals counted: the next one at a site gets its
        // true ordinal.
        for aggregate in &data.compacted {
            let next = history
                .ordinals
                .entry((aggregate.pid, aggregate.call_site, aggregate.kind.is_host()))
                .or_default();
            *next = (*next).max(aggregate.last_ordinal.saturating_add(1));
        }
        history.data = data;
        // Of the accounts read, the leases are kept: the rest is computed from the
        // allocations whenever asked.
        history.data.pinned = std::mem::take(&mut history.data.pinned)
            .into_iter()
            .filter(|account| account.leases.is_some())
            .map(|account| PinnedAccount {
                pid: account.pid,
                leases: account.leases,
                ..PinnedAccount::default()
            })
            .collect();
        // In the order they are written (by process).
        history.data.pinned.sort_by_key(|account| account.pid);
        history
    }

    pub fn data(&self) -> &HistoryData {
        &self.data
    }

    /// Each process's pinned host memory, by process id: from the allocations, and what the
    /// node's arbiter leased it where [`Self::set_leases`] said.
    pub fn pinned_accounts(&self) -> Vec<PinnedAccount> {
        self.data.pinned_accounts()
    }

    /// What the node's arbiter did for the process `pid` (`tracer daemon`, before writing).
    pub fn set_leases(&mut self, pid: u32, leases: LeaseAccount) {
        match self.data.pinned.iter_mut().find(|a| a.pid == pid) {
            Some(account) => account.leases = Some(leases),
            None => self.data.pinned.push(PinnedAccount {
                pid,
                leases: Some(leases),
                ..PinnedAccount::default()
            }),
        }
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
    /// The id of the call site the kernel gave as `raw`: for a (build id, offset) seen
    /// before by this history, without resolving it again; else `resolve`d (`None`: not a
    /// call site, such as a frame that ends a stack walk) and interned.
    pub fn intern_raw_site(
        &mut self,
        raw: hotpin_registry::events::RawSite,
        resolve: impl FnOnce() -> Option<CallSite>,
    ) -> Option<CallSiteId> {
        let hotpin_registry::events::RawSite::BuildId { build_id, offset } = raw else {
            // An address alone means nothing without the process's maps of the moment.
            return resolve().map(|site| self.intern_call_site(site));
        };
        if let Some(&id) = self.raw_site_ids.get(&(build_id, offset)) {
            return id;
        }
        let id = resolve().map(|site| self.intern_call_site(site));
        self.raw_site_ids.insert((build_id, offset), id);
        id
    }

    pub fn intern_call_site(&mut self, site: CallSite) -> CallSiteId {
        // Called for every allocation and every frame of its callers: the module name is
        // moved into the key, and copied only for a site not seen before.
        let CallSite {
            module,
            offset,
            symbol,
        } = site;
        let key = (module, offset);
        if let Some(&id) = self.site_ids.get(&key) {
            return id;
        }
        let id = self.data.call_sites.len() as CallSiteId;
        self.data.call_sites.push(CallSite {
            module: key.0.clone(),
            offset,
            symbol,
        });
        self.site_ids.insert(key, id);
        id
    }

    /// The live allocation of `pid` containing `addr`, in O(log n).
    pub fn find(&self, pid: u32, addr: u64) -> Option<&Allocation> {
        self.find_id(pid, addr)
            .map(|id| &self.data.allocations[id as usize])
    }

    /// The live allocation containing `addr`, else the mapping (or heap) containing it.
    fn find_id(&self, pid: u32, addr: u64) -> Option<AllocId> {
        let containing = |index: &BTreeMap<(u32, u64), AllocId>| {
            let (&(found_pid, _), &id) = index.range(..=(pid, addr)).next_back()?;
            (found_pid == pid && self.data.allocations[id as usize].contains(addr)).then_some(id)
        };
        containing(&self.live).or_else(|| containing(&self.regions))
    }

    /// Where the next live allocation or mapping after `addr` starts, if any.
    fn next_start(&self, pid: u32, addr: u64) -> Option<u64> {
        match (
            next_start(&self.live, pid, addr),
            next_start(&self.regions, pid, addr),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
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
        let allocation = Allocation {
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
            pre_existing: false,
            copied: None,
        };
        if kind.takes_device_memory() {
            let memory = self.data.stats.device_memory.entry(pid).or_default();
            memory.live_bytes = memory.live_bytes.saturating_add(size);
            memory.peak_bytes = memory.peak_bytes.max(memory.live_bytes);
        }
        self.data.allocations.push(allocation);
        self.note(id, AllocEvent::Alloc { ts_ns });
        if kind.is_region() {
            if let Some(previous) = self.regions.insert((pid, start), id) {
                self.close(previous, ts_ns);
            }
        } else if kind != AllocKind::Untracked {
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
        if allocation.free_ns.is_none() {
            self.freed += 1;
        }
        allocation.free_ns = Some(ts_ns);
        if allocation.kind.takes_device_memory()
            && let Some(memory) = self.data.stats.device_memory.get_mut(&allocation.pid)
        {
            memory.live_bytes = memory.live_bytes.saturating_sub(allocation.size);
        }
        self.note(id, AllocEvent::Free { ts_ns });
    }

    /// Adds `event` to allocation `id`'s timeline, when timelines are kept
    /// ([`Retention::timelines`]).
    fn note(&mut self, id: AllocId, event: AllocEvent) {
        if self.retention.timelines {
            self.data.allocations[id as usize].push_event(event);
        }
    }

    /// Records the end of the region (a reserved device range) starting at `addr`.
    pub fn free_region(&mut self, pid: u32, addr: u64, ts_ns: u64) -> Option<AllocId> {
        let Some(id) = self.regions.remove(&(pid, addr)) else {
            self.data.stats.unmatched_frees += 1;
            return None;
        };
        self.close(id, ts_ns);
        Some(id)
    }

    /// Records memory that existed before the tracer attached, as the process's memory map
    /// showed it (`--pid`): a region (anonymous mapping, stack, heap) or an allocation whose
    /// kind the mapping tells (pinned, managed). Marked [`Allocation::pre_existing`].
    pub fn seed(&mut self, pid: u32, start: u64, size: u64, kind: AllocKind, ts_ns: u64) {
        if self
            .find(pid, start)
            .is_some_and(|a| a.start == start && a.kind == kind)
        {
            return;
        }
        let id = if kind == AllocKind::Heap {
            self.set_break(pid, Some(start), start.saturating_add(size), ts_ns);
            match self.heaps.get(&pid) {
                Some(&id) => id,
                None => return,
            }
        } else {
            self.alloc(pid, start, size, kind, None, ts_ns)
        };
        self.data.allocations[id as usize].pre_existing = true;
    }

    /// The direction of a unified-addressing copy from the allocations known: a pointer in
    /// device memory (or a reserved device range) is the device side.
    pub fn resolve_direction(&self, pid: u32, dst: u64, src: u64) -> CopyDirection {
        let is_device = |addr: u64| self.find(pid, addr).is_some_and(|a| a.kind.is_device());
        match (is_device(dst), is_device(src)) {
            (true, false) => CopyDirection::HostToDevice,
            (false, true) => CopyDirection::DeviceToHost,
            (true, true) => CopyDirection::DeviceToDevice,
            (false, false) => CopyDirection::Unresolved,
        }
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
                self.data.allocations[id as usize].kind = AllocKind::Registered;
                self.note(id, AllocEvent::Register { ts_ns });
                id
            }
            None => {
                let id = self.alloc(pid, addr, size, AllocKind::Registered, call_site, ts_ns);
                if let Some(first) = self.data.allocations[id as usize].events.first_mut() {
                    *first = AllocEvent::Register { ts_ns };
                }
                id
            }
        }
    }

    /// Records `cudaHostUnregister`: the memory stays, pageable again.
    pub fn unregister(&mut self, pid: u32, addr: u64, ts_ns: u64) -> Option<AllocId> {
        let id = self.live.get(&(pid, addr)).copied()?;
        self.data.allocations[id as usize].kind = AllocKind::Pageable;
        self.note(id, AllocEvent::Unregister { ts_ns });
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
        self.transfers_on(Copies {
            pid,
            dst,
            src,
            bytes,
            direction,
            ts_ns,
            count: 1,
            queue: Queue::default(),
        })
    }

    /// Records `count` identical copies (a run the kernel counted) made by a thread on a
    /// stream, as [`Self::transfer`] does one; the allocation's timeline gets one event with
    /// their bytes together, and the thread and stream.
    pub fn transfers_on(&mut self, copies: Copies) -> Option<AllocId> {
        let Copies {
            pid,
            ts_ns,
            count,
            bytes,
            queue,
            ..
        } = copies;
        let total = bytes.saturating_mul(count);
        let (direction, host) = self.host_side(&copies)?;
        let id = match self.find_id(pid, host) {
            Some(id) if self.data.allocations[id as usize].kind.is_host() => id,
            _ => {
                self.data.stats.untracked_transfers =
                    self.data.stats.untracked_transfers.saturating_add(count);
                self.untracked_entry(pid, host, bytes, ts_ns)
            }
        };
        let stats = &mut self.data.stats;
        stats.transfers = stats.transfers.saturating_add(count);
        match direction {
            CopyDirection::HostToDevice => stats.h2d_bytes = stats.h2d_bytes.saturating_add(total),
            CopyDirection::DeviceToHost => stats.d2h_bytes = stats.d2h_bytes.saturating_add(total),
            _ => {}
        }
        let allocation = &mut self.data.allocations[id as usize];
        if allocation.kind != AllocKind::Untracked && bytes > 0 {
            let from = host.saturating_sub(allocation.start).min(allocation.size);
            let to = from.saturating_add(bytes).min(allocation.size);
            if from < to {
                allocation.copied = Some(match allocation.copied {
                    Some((low, high)) => (low.min(from), high.max(to)),
                    None => (from, to),
                });
            }
        }
        let s = &mut allocation.stats;
        let old = s.transfers;
        s.add_copies(direction, count, total, ts_ns);
        let new = s.transfers;
        self.note(
            id,
            AllocEvent::Transfer {
                ts_ns,
                direction,
                bytes: total,
                tid: queue.tid,
                stream: queue.stream,
            },
        );
        self.by_transfers.remove(&(old, id));
        self.by_transfers.insert((new, id));
        Some(id)
    }

    /// The direction of `copies` (resolved where the probe could not tell it) and the host
    /// address they touched. None for copies with no host side (device to device, host to
    /// host), which are only counted.
    fn host_side(&mut self, copies: &Copies) -> Option<(CopyDirection, u64)> {
        let Copies {
            pid,
            dst,
            src,
            count,
            ..
        } = *copies;
        let total = copies.bytes.saturating_mul(count);
        let direction = match copies.direction {
            CopyDirection::Unresolved => self.resolve_direction(pid, dst, src),
            known => known,
        };
        let host = match direction {
            CopyDirection::HostToDevice => src,
            CopyDirection::DeviceToHost => dst,
            CopyDirection::DeviceToDevice | CopyDirection::HostToHost => {
                let stats = &mut self.data.stats;
                stats.other_copies = stats.other_copies.saturating_add(count);
                if direction == CopyDirection::DeviceToDevice {
                    stats.device_copies = stats.device_copies.saturating_add(count);
                    stats.device_copy_bytes = stats.device_copy_bytes.saturating_add(total);
                }
                return None;
            }
            // Neither side is a known device allocation: the side in a known host allocation
            // is the host, else the source.
            CopyDirection::Unresolved => {
                self.data.stats.unresolved_copies =
                    self.data.stats.unresolved_copies.saturating_add(count);
                if self.find(pid, dst).is_some() && self.find(pid, src).is_none() {
                    dst
                } else {
                    src
                }
            }
        };
        Some((direction, host))
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

    /// Records a run of `pages` user page faults from the page at `addr` on: each page is
    /// counted against the allocation (or else the mapping) containing it, with one timeline
    /// event per allocation the run touches; pages in none are counted as untracked.
    pub fn page_faults(&mut self, pid: u32, addr: u64, pages: u64, ts_ns: u64) {
        const PAGE: u64 = tracer_common::PAGE_BYTES;
        self.data.stats.page_faults = self.data.stats.page_faults.saturating_add(pages);
        let end = addr.saturating_add(pages.saturating_mul(PAGE));
        let mut at = addr;
        while at < end {
            let (stop, id) = match self.find_id(pid, at) {
                Some(id) => {
                    let a = &self.data.allocations[id as usize];
                    let mut stop = a.start.saturating_add(a.size.max(1));
                    // A mapping's pages stop where an allocation inside it starts.
                    if a.kind.is_region()
                        && let Some(next) = next_start(&self.live, pid, at)
                    {
                        stop = stop.min(next);
                    }
                    (stop, Some(id))
                }
                None => (self.next_start(pid, at).unwrap_or(end), None),
            };
            // Whole pages from `at` up to the page holding `stop`'s last byte.
            let stop = stop.min(end).max(at + 1);
            let counted = (stop - at).div_ceil(PAGE);
            match id {
                Some(id) => {
                    let allocation = &mut self.data.allocations[id as usize];
                    allocation.stats.page_faults =
                        allocation.stats.page_faults.saturating_add(counted);
                    self.note(id, AllocEvent::PageFault { ts_ns, addr: at });
                }
                None => {
                    let untracked = &mut self.data.stats.untracked_page_faults;
                    *untracked = untracked.saturating_add(counted);
                }
            }
            at = at.saturating_add(counted.saturating_mul(PAGE));
        }
    }

    /// Records an anonymous mapping made outside CUDA and hotpin calls.
    pub fn map(&mut self, pid: u32, addr: u64, len: u64, ts_ns: u64) -> AllocId {
        self.alloc(pid, addr, len, AllocKind::Mmap, None, ts_ns)
    }

    /// Gives the anonymous mapping just made at `addr` the Python lines (call sites of
    /// `PYTHON_MODULE`, innermost first) that made it, as an allocation call's callers.
    pub fn record_mapping_lines(&mut self, pid: u32, addr: u64, python: Vec<CallSiteId>) {
        let made = self.regions.get(&(pid, addr)).copied().filter(|&id| {
            self.allocation(id)
                .is_some_and(|a| a.kind == AllocKind::Mmap)
        });
        if let Some(id) = made {
            self.record_callers(id, python);
        }
    }

    /// Records `munmap(addr, len)`: mappings inside the range end; one that straddles an end
    /// keeps its part outside the range (a part after the range continues as a new mapping).
    pub fn unmap(&mut self, pid: u32, addr: u64, len: u64, ts_ns: u64) {
        let end = addr.saturating_add(len);
        let first = self
            .regions
            .range(..=(pid, addr))
            .next_back()
            .filter(|(key, _)| key.0 == pid)
            .map(|(&key, _)| key);
        let touched: Vec<(u64, AllocId)> = first
            .into_iter()
            .chain(self.regions.range((pid, addr)..(pid, end)).map(|(&k, _)| k))
            .filter_map(|key| self.regions.get(&key).map(|&id| (key.1, id)))
            .collect();
        for (start, id) in touched {
            let (kind, size) = {
                let a = &self.data.allocations[id as usize];
                (a.kind, a.size)
            };
            let region_end = start.saturating_add(size);
            // A reserved device range ends with cuMemAddressFree, not with the host munmap
            // the driver may make inside it.
            if region_end <= addr || start >= end || kind == AllocKind::DeviceReserved {
                continue;
            }
            if start < addr {
                // Keeps its head.
                self.data.allocations[id as usize].size = addr - start;
            } else {
                self.regions.remove(&(pid, start));
                if self.heaps.get(&pid) == Some(&id) {
                    self.heaps.remove(&pid);
                }
                self.close(id, ts_ns);
            }
            if region_end > end {
                self.alloc(pid, end, region_end - end, kind, None, ts_ns);
            }
        }
    }

    /// Records `mremap`: in place the mapping changes size; moved, the old one ends and a new
    /// one starts at `new_addr`.
    pub fn remap(
        &mut self,
        pid: u32,
        old_addr: u64,
        old_len: u64,
        new_addr: u64,
        new_len: u64,
        ts_ns: u64,
    ) {
        if new_addr == old_addr
            && let Some(&id) = self.regions.get(&(pid, old_addr))
        {
            self.data.allocations[id as usize].size = new_len;
            return;
        }
        self.unmap(pid, old_addr, old_len, ts_ns);
        self.map(pid, new_addr, new_len, ts_ns);
    }

    /// Whether the heap of `pid` is known yet.
    pub fn has_heap(&self, pid: u32) -> bool {
        self.heaps.contains_key(&pid)
    }

    /// Records the program break moving to `end` (brk): the heap region, from `start` (where
    /// the heap begins, if known) or from the first break seen, grows or shrinks to it.
    pub fn set_break(&mut self, pid: u32, start: Option<u64>, end: u64, ts_ns: u64) {
        if let Some(&id) = self.heaps.get(&pid) {
            let heap = &mut self.data.allocations[id as usize];
            heap.size = end.saturating_sub(heap.start);
            return;
        }
        let start = start.filter(|&s| s <= end).unwrap_or(end);
        let id = self.alloc(pid, start, end - start, AllocKind::Heap, None, ts_ns);
        self.heaps.insert(pid, id);
    }

    /// Applies an event of the kernel's other probes: host memory syscalls, page faults,
    /// ioctls, the driver's page pinning; CUDA calls go through [`Self::apply`].
    /// `heap_start` tells where a process's heap begins, asked when its break first moves.
    pub fn apply_kernel(
        &mut self,
        event: &TraceEvent,
        heap_start: impl FnOnce(u32) -> Option<u64>,
    ) {
        match *event {
            TraceEvent::DriverPages { locked, pages, .. } => {
                let stats = self.stats_mut();
                if locked {
                    stats.driver_locked_pages += pages;
                } else {
                    stats.driver_unlocked_pages += pages;
                }
            }
            // Memory a CUDA or hotpin call maps for itself is that call's allocation.
            TraceEvent::HostMemory { nested: true, .. } => {}
            TraceEvent::HostMemory {
                pid,
                ts_ns,
                failed,
                op,
                ..
            } => {
                count(&mut self.data.stats.host_memory_calls, op.syscall());
                if failed {
                    return;
                }
                match op {
                    HostOp::Map { addr, len } => {
                        self.map(pid, addr, len, ts_ns);
                    }
                    HostOp::Unmap { addr, len } => self.unmap(pid, addr, len, ts_ns),
                    HostOp::Remap {
                        old_addr,
                        old_len,
                        new_addr,
                        new_len,
                    } => self.remap(pid, old_addr, old_len, new_addr, new_len, ts_ns),
                    HostOp::Break { end } => {
                        let start = if self.has_heap(pid) {
                            None
                        } else {
                            heap_start(pid)
                        };
                        self.set_break(pid, start, end, ts_ns);
                    }
                }
            }
            TraceEvent::PageFaults {
                pid,
                ts_ns,
                addr,
                pages,
            } => self.page_faults(pid, addr, pages, ts_ns),
            TraceEvent::NvidiaIoctl { cmd, .. } => {
                count(
                    &mut self.data.stats.nvidia_ioctls,
                    &format!("{:#x}", cmd & 0xff),
                );
            }
            TraceEvent::ProcessFork { child, .. } => {
                if !self.meta().pids.contains(&child) {
                    self.meta_mut().pids.push(child);
                }
            }
            // Handled by the recorder, which reads what they name while the process lives.
            TraceEvent::Call(_)
            | TraceEvent::LibraryOpen { .. }
            | TraceEvent::PythonFrames { .. } => {}
        }
    }

    /// [`Self::apply`], keeping `callers` (the call site's callers, innermost first) for the
    /// allocation the call makes, if it makes one.
    pub fn apply_with_callers(
        &mut self,
        call: &ApiCall,
        call_site: Option<CallSiteId>,
        callers: Vec<CallSiteId>,
    ) {
        let before = self.data.allocations.len();
        self.apply(call, call_site);
        if self.data.allocations.len() > before {
            self.record_callers(before as AllocId, callers);
        }
    }

    /// Keeps the callers of allocation `id` (call sites interned in this history), innermost
    /// first; none is recorded as nothing.
    pub fn record_callers(&mut self, id: AllocId, callers: Vec<CallSiteId>) {
        if !callers.is_empty() {
            self.data.callers.insert(id, callers);
        }
    }

    /// The part of allocation `id` its copies touched: (from, to), offsets from its start
    /// (see [`HistoryData::copied_extents`]), inside its present size; None where none was
    /// seen.
    pub fn copied_extent(&self, id: AllocId) -> Option<(u64, u64)> {
        self.data.copied_extent(id)
    }

    /// The callers beyond an allocation's call site, innermost first (empty if unknown).
    pub fn callers(&self, id: AllocId) -> &[CallSiteId] {
        self.data.callers.get(&id).map_or(&[], Vec::as_slice)
    }

    /// The innermost Python line that made allocation `id`, as the call site of that frame
    /// (module `python:FILE`, offset the line); None where no Python frame was recorded.
    pub fn python_line(&self, id: AllocId) -> Option<CallSiteId> {
        self.callers(id).iter().copied().find(|&site| {
            self.call_site(site)
                .is_some_and(|site| site.module.starts_with(PYTHON_MODULE))
        })
    }

    /// A Python line's call site as (file, line): what identifies it across runs.
    pub fn python_file_line(&self, site: CallSiteId) -> Option<(&str, u32)> {
        let site = self.call_site(site)?;
        let file = site.module.strip_prefix(PYTHON_MODULE)?;
        Some((file, u32::try_from(site.offset).unwrap_or(u32::MAX)))
    }

    /// Applies one decoded CUDA call. `call_site` is the caller, already interned.
    pub fn apply(&mut self, call: &ApiCall, call_site: Option<CallSiteId>) {
        if self.count_call(call) {
            self.apply_op(call, call_site);
        }
    }

    /// Counts `call` in the statistics; whether what it did is to be applied (not a nested,
    /// partial or failed call).
    fn count_call(&mut self, call: &ApiCall) -> bool {
        let stats = &mut self.data.stats;
        let repeat = u64::from(call.repeat.max(1));
        stats.calls = stats.calls.saturating_add(repeat);
        let name = function_name(call.kind);
        count_n(&mut stats.calls_by_function, name, repeat);
        if call.nested {
            stats.nested_calls = stats.nested_calls.saturating_add(repeat);
            return false;
        }
        if call.partial {
            stats.partial_calls += 1;
            return false;
        }
        if call.result != 0 {
            stats.failed_calls += 1;
            let failed = stats
                .failed_by_function
                .entry(name.to_string())
                .or_default();
            failed.0 += 1;
            failed.1 = call.result;
            return false;
        }
        true
    }

    /// What a successful call did: an allocation made, freed or registered, copies, a
    /// prefetch.
    fn apply_op(&mut self, call: &ApiCall, call_site: Option<CallSiteId>) {
        let (pid, ts) = (call.pid, call.ts_ns);
        let repeat = u64::from(call.repeat.max(1));
        match call.op {
            Op::Alloc { addr: 0, .. } => self.data.stats.failed_calls += 1,
            Op::Alloc { addr, size, space } => {
                let kind = match space {
                    AllocSpace::Device => AllocKind::Device,
                    AllocSpace::Managed => AllocKind::Managed,
                    AllocSpace::DeviceReserve => AllocKind::DeviceReserved,
                    AllocSpace::PinnedHost => AllocKind::Pinned,
                    AllocSpace::Host if self.pinned_marks.remove(&(pid, addr)) => AllocKind::Pinned,
                    AllocSpace::Host => AllocKind::Pageable,
                };
                self.alloc(pid, addr, size, kind, call_site, ts);
            }
            Op::Realloc { old, addr, size } => {
                if old != 0 {
                    self.free(pid, old, ts);
                }
                if addr != 0 {
                    self.alloc(pid, addr, size, AllocKind::Pageable, call_site, ts);
                }
            }
            Op::Free { addr: 0, .. } => {}
            Op::Free {
                addr,
                space: AllocSpace::DeviceReserve,
            } => {
                self.free_region(pid, addr, ts);
            }
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
                let queue = Queue {
                    tid: call.tid,
                    stream: call.stream,
                };
                self.transfers_on(Copies {
                    pid,
                    dst,
                    src,
                    bytes,
                    direction,
                    ts_ns: ts,
                    count: repeat,
                    queue,
                });
            }
            Op::Prefetch {
                bytes, to_device, ..
            } => {
                let stats = &mut self.data.stats;
                let total = bytes.saturating_mul(repeat);
                if to_device {
                    stats.prefetches_to_device += repeat;
                    stats.prefetch_to_device_bytes += total;
                } else {
                    stats.prefetches_to_host += repeat;
                    stats.prefetch_to_host_bytes += total;
                }
            }
            Op::Counted => {}
        }
    }
}

#[cfg(test)]
mod tests;
