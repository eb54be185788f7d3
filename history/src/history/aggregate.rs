//! Bounding a history in memory, for processes that live for days: freed allocations are
//! folded into one aggregate per (process, call site, kind, size), oldest first, and event
//! timelines are kept only when asked for.
//!
//! What folding keeps: the totals (the history's statistics are untouched), each site's copies
//! and allocation count, its ordinals (the next allocation at a site still gets its true
//! ordinal, as hotpin's allocator counts them) and the most of its allocations alive at once.
//! What it gives up: the folded allocations' addresses, times and callers. Hotpin's
//! allocator judges folded allocations as a group, by call site and size (as it does recycled
//! buffers), since their ordinals no longer name one allocation each.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{AllocId, AllocKind, Allocation, CallSiteId, MemHistory, TransferStats};

/// What a history keeps in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Keep each allocation's timeline of events (for verbose dumps and `tracer export`).
    pub timelines: bool,
    /// The most allocation entries to keep: past it, the oldest freed allocations are folded
    /// into [`SiteAggregate`]s, down to half of it. `None`: no bound. Live allocations are
    /// never folded: they are bounded by the process's own memory.
    pub max_allocations: Option<usize>,
}

impl Default for Retention {
    /// Everything kept: what a short recording or a test wants.
    fn default() -> Self {
        Self {
            timelines: true,
            max_allocations: None,
        }
    }
}

/// Freed allocations of one process, call site, kind and size, folded together to bound a
/// long-lived process's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteAggregate {
    pub pid: u32,
    pub call_site: Option<CallSiteId>,
    pub kind: AllocKind,
    pub size: u64,
    /// How many allocations were folded into it.
    pub allocations: u64,
    /// The lowest and highest ordinal among them (see [`Allocation::ordinal`]).
    pub first_ordinal: u32,
    pub last_ordinal: u32,
    /// When the first of them was allocated and the last freed.
    pub first_alloc_ns: u64,
    pub last_free_ns: u64,
    /// The most of them alive at the same time, within one fold (folds are far apart, so
    /// this is the group's peak unless its allocations live across a fold).
    pub peak_live: u64,
    /// Their copies and page faults together.
    pub stats: TransferStats,
    /// How many of them existed before the tracer attached.
    pub pre_existing: u64,
}

impl SiteAggregate {
    fn key(&self) -> AggregateKey {
        (self.pid, self.call_site, self.kind, self.size)
    }
}

pub(super) type AggregateKey = (u32, Option<CallSiteId>, AllocKind, u64);

fn key_of(a: &Allocation) -> AggregateKey {
    (a.pid, a.call_site, a.kind, a.size)
}

/// The most of `lives` (allocation and free times) alive at once, at least one; a free sorts
/// before an allocation at the same instant (a block freed and taken again at once is one
/// block). A free stamped before its allocation (events from two CPUs) counts at the
/// allocation.
pub fn peak_alive(lives: &[(u64, u64)]) -> u64 {
    let mut changes: Vec<(u64, i64)> = Vec::with_capacity(lives.len() * 2);
    for &(alloc, free) in lives {
        changes.push((alloc, 1));
        changes.push((free.max(alloc), -1));
    }
    changes.sort_unstable();
    let (mut live, mut peak) = (0i64, 0i64);
    for (_, change) in changes {
        live += change;
        peak = peak.max(live);
    }
    (peak as u64).max(u64::from(!lives.is_empty()))
}

impl MemHistory {
    /// A history that keeps what `retention` says.
    pub fn with_retention(retention: Retention) -> Self {
        Self {
            retention,
            ..Self::default()
        }
    }

    pub fn retention(&self) -> Retention {
        self.retention
    }

    pub fn set_retention(&mut self, retention: Retention) {
        self.retention = retention;
    }

    /// Freed allocations folded to bound the history, by (process, call site, kind, size).
    pub fn compacted(&self) -> &[SiteAggregate] {
        &self.data.compacted
    }

    /// How many allocations were folded into [`Self::compacted`].
    pub fn compacted_allocations(&self) -> u64 {
        self.data.compacted.iter().map(|a| a.allocations).sum()
    }

    /// Applies [`Retention::max_allocations`]: past it, folds the oldest freed allocations
    /// until half of it is left (or no freed one is). Allocation ids change: call it between
    /// batches of events, never while holding an id. Waits until a quarter of the bound is
    /// freed, so the O(n) rebuild is paid once per that many allocations. Returns how many
    /// were folded.
    pub fn bound(&mut self) -> usize {
        let Some(max) = self.retention.max_allocations else {
            return 0;
        };
        let len = self.data.allocations.len();
        if len <= max || self.freed < (max / 4).max(1) {
            return 0;
        }
        self.fold_oldest_freed((len - max / 2).min(self.freed))
    }

    /// Folds the `n` oldest freed allocations into the aggregates and renumbers the rest.
    fn fold_oldest_freed(&mut self, n: usize) -> usize {
        let mut data = std::mem::take(&mut self.data);
        let mut index: HashMap<AggregateKey, usize> = data
            .compacted
            .iter()
            .enumerate()
            .map(|(i, a)| (a.key(), i))
            .collect();
        let mut lives: HashMap<AggregateKey, Vec<(u64, u64)>> = HashMap::new();
        let mut new_ids: Vec<Option<AllocId>> = Vec::with_capacity(data.allocations.len());
        let mut kept = Vec::with_capacity(data.allocations.len().saturating_sub(n));
        let mut folded = 0;
        for mut allocation in std::mem::take(&mut data.allocations) {
            let Some(free_ns) = allocation.free_ns.filter(|_| folded < n) else {
                new_ids.push(Some(kept.len() as AllocId));
                allocation.id = kept.len() as AllocId;
                kept.push(allocation);
                continue;
            };
            folded += 1;
            new_ids.push(None);
            let key = key_of(&allocation);
            lives
                .entry(key)
                .or_default()
                .push((allocation.alloc_ns, free_ns));
            let at = *index.entry(key).or_insert_with(|| {
                data.compacted.push(SiteAggregate {
                    pid: allocation.pid,
                    call_site: allocation.call_site,
                    kind: allocation.kind,
                    size: allocation.size,
                    allocations: 0,
                    first_ordinal: allocation.ordinal,
                    last_ordinal: allocation.ordinal,
                    first_alloc_ns: allocation.alloc_ns,
                    last_free_ns: free_ns,
                    peak_live: 0,
                    stats: TransferStats::default(),
                    pre_existing: 0,
                });
                data.compacted.len() - 1
            });
            let aggregate = &mut data.compacted[at];
            aggregate.allocations += 1;
            aggregate.first_ordinal = aggregate.first_ordinal.min(allocation.ordinal);
            aggregate.last_ordinal = aggregate.last_ordinal.max(allocation.ordinal);
            aggregate.first_alloc_ns = aggregate.first_alloc_ns.min(allocation.alloc_ns);
            aggregate.last_free_ns = aggregate.last_free_ns.max(free_ns);
            aggregate.stats.add(&allocation.stats);
            aggregate.pre_existing += u64::from(allocation.pre_existing);
        }
        for (key, lives) in lives {
            let aggregate = &mut data.compacted[index[&key]];
            aggregate.peak_live = aggregate.peak_live.max(peak_alive(&lives));
        }
        data.allocations = kept;
        data.callers = std::mem::take(&mut data.callers)
            .into_iter()
            .filter_map(|(id, sites)| Some((new_ids.get(id as usize).copied()??, sites)))
            .collect();
        let retention = self.retention;
        let pinned_marks = std::mem::take(&mut self.pinned_marks);
        *self = MemHistory::index(data);
        self.retention = retention;
        self.pinned_marks = pinned_marks;
        folded
    }
}

#[cfg(test)]
mod tests {
    use super::peak_alive;

    #[test]
    fn the_peak_counts_overlaps_and_at_least_one_block() {
        assert_eq!(peak_alive(&[]), 0);
        assert_eq!(peak_alive(&[(5, 5)]), 1, "freed at the instant it was made");
        assert_eq!(
            peak_alive(&[(5, 3)]),
            1,
            "a free stamped before its allocation"
        );
        assert_eq!(
            peak_alive(&[(1, 4), (4, 6), (7, 9)]),
            1,
            "one after another"
        );
        assert_eq!(peak_alive(&[(1, 5), (2, 6), (3, 4), (8, 9)]), 3);
    }
}
