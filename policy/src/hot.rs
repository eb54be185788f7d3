//! What makes a recorded allocation (or a recycled group of them) worth pinning, judged
//! from a history with hindsight: the cost model's weighing, or the first version's fixed bar.

use std::collections::{BTreeMap, HashSet};

use hotpin_history::history::{AllocKind, Allocation, CallSiteId, MemHistory, TransferStats};
use serde::{Deserialize, Serialize};

use crate::cost::{CostModel, Weighing};

/// What makes an allocation worth pinning.
///
/// By default a cost model ([`CostModel`]): pin when the copy time pinning saves over the
/// recorded run passes what pinning and unpinning costs. On our H100 registering memory in
/// place costs about 42 ms/GiB while a pageable copy loses about 90 ms/GiB, so one round trip
/// repays a large buffer and memory never copied never does. The first version's fixed bar
/// ("hot = at least N transfers", [`HotPolicy::transfers`]) remains for comparison.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HotPolicy {
    /// Pin when the copy time saved passes the cost of pinning (the default, with our
    /// H100's numbers, or those `hotpin calibrate` measured).
    pub cost: Option<CostModel>,
    /// Without a cost model, a fixed bar: at least this many transfers...
    pub min_transfers: u64,
    /// ... and this many per MiB of the allocation (0 turns it off).
    pub min_transfers_per_mib: f64,
}

impl Default for HotPolicy {
    fn default() -> Self {
        Self {
            cost: Some(CostModel::default()),
            min_transfers: 4,
            min_transfers_per_mib: 0.0,
        }
    }
}

impl HotPolicy {
    /// The fixed bar of the first version: at least `min_transfers` transfers.
    pub fn transfers(min_transfers: u64) -> Self {
        Self {
            cost: None,
            min_transfers,
            min_transfers_per_mib: 0.0,
        }
    }

    /// The cost model this machine was calibrated with (the cost file at
    /// [`CostModel::default_path`], written by `hotpin calibrate`), else the built-in one.
    pub fn configured() -> Result<Self, crate::cost::CostFileError> {
        // A file named by $HOTPIN_COSTS must be there: a typo is an error, not the defaults.
        let named = std::env::var_os("HOTPIN_COSTS").is_some();
        match CostModel::default_path().filter(|path| named || path.exists()) {
            Some(path) => Ok(Self::with_cost(CostModel::load(&path)?.model)),
            None => Ok(Self::default()),
        }
    }

    /// With this cost model.
    pub fn with_cost(cost: CostModel) -> Self {
        Self {
            cost: Some(cost),
            ..Self::default()
        }
    }

    pub fn is_hot(&self, allocation: &Allocation) -> bool {
        self.pays(&allocation.stats, allocation.size, 1)
    }

    /// The cost model's weighing of `blocks` pinned blocks of `size` bytes serving `stats`'s
    /// copies (none with a fixed bar).
    pub fn weigh(&self, stats: &TransferStats, size: u64, blocks: u64) -> Option<Weighing> {
        self.cost.map(|model| model.weigh(stats, size, blocks))
    }

    /// Whether `blocks` pinned blocks of `size` bytes serving `stats`'s copies are worth
    /// pinning.
    /// With a cost model, a block copied once never pays: pinned ahead, at its birth, its
    /// registration faults in every page (23-30 ms for 64 MiB on the H100, against 3.6 ms for
    /// memory already touched), more than its one copy saves.
    pub fn pays(&self, stats: &TransferStats, size: u64, blocks: u64) -> bool {
        if let Some(weighing) = self.weigh(stats, size, blocks) {
            return weighing.pays() && stats.transfers >= 2 * blocks.max(1);
        }
        let transfers = stats.transfers / blocks.max(1);
        let mib = (size.max(1) as f64) / (1 << 20) as f64;
        transfers >= self.min_transfers && transfers as f64 / mib >= self.min_transfers_per_mib
    }

    /// What the budget admits by: net seconds saved per pinned byte under a cost model,
    /// transfers per block under a bar.
    pub fn merit(&self, stats: &TransferStats, size: u64, blocks: u64) -> f64 {
        match self.weigh(stats, size, blocks) {
            Some(weighing) => weighing.net_per_byte(size * blocks.max(1)),
            None => (stats.transfers / blocks.max(1)) as f64,
        }
    }

    /// How the policy reads, for reports.
    pub fn describe(&self) -> String {
        match self.cost {
            Some(_) => "pin when the copy time saved passes the pin and unpin cost".into(),
            None => format!("hot = at least {} transfers", self.min_transfers),
        }
    }

    /// The recycled groups of a history, by most transfers per pinned block first.
    ///
    /// A program that builds each batch in a fresh buffer transfers every buffer once or
    /// twice: no allocation is hot alone. But the buffers come from one call site, with one
    /// size, and few are alive at once, so a few pinned blocks reused through the allocator's
    /// cache serve all their transfers. A group is hot when its transfers per block (the
    /// allocations alive at once at most) pass the same test as one allocation's transfers.
    /// Allocations hot alone are judged alone and left out of groups.
    pub fn recycled_groups(&self, history: &MemHistory) -> Vec<RecycledGroup> {
        /// A group's members: allocations kept one by one, and aggregates of folded ones.
        #[derive(Default)]
        struct Members<'a> {
            kept: Vec<&'a Allocation>,
            folded: u64,
            folded_peak: u64,
            stats: TransferStats,
        }
        // Keyed by the Python line that made them too, where one was recorded: the blocks of
        // one C call site (PyTorch's allocator, a bytearray) made at different lines are
        // different buffers of the program (#40: the cold ones were pinned with the hot).
        let mut members: BTreeMap<(u32, CallSiteId, Option<CallSiteId>, u64), Members> =
            BTreeMap::new();
        for a in history.allocations() {
            if !a.kind.is_host() || a.kind == AllocKind::Untracked || self.is_hot(a) {
                continue;
            }
            if let Some(site) = a.call_site {
                let line = history.python_line(a.id);
                let group = members.entry((a.pid, site, line, a.size)).or_default();
                group.kept.push(a);
                group.stats.add(&a.stats);
            }
        }
        // Folded allocations (a long-lived process's bounded history) count in their group
        // whether or not each was hot: their ordinals no longer name one allocation each.
        for g in history.compacted() {
            if !g.kind.is_host() || g.kind == AllocKind::Untracked {
                continue;
            }
            if let Some(site) = g.call_site {
                let group = members.entry((g.pid, site, None, g.size)).or_default();
                group.folded += g.allocations;
                group.folded_peak = group.folded_peak.max(g.peak_live);
                group.stats.add(&g.stats);
            }
        }
        let mut groups: Vec<RecycledGroup> = members
            .into_iter()
            .filter(|(_, m)| m.kept.len() as u64 + m.folded >= 2)
            .map(|((pid, call_site, python, size), m)| RecycledGroup {
                pid,
                call_site,
                python,
                size,
                allocations: m.kept.len() as u64 + m.folded,
                transfers: m.stats.transfers,
                peak_live: peak_live(&m.kept).max(m.folded_peak),
                stats: m.stats,
            })
            .filter(|g| self.pays(&g.stats, g.size, g.peak_live))
            .collect();
        groups.sort_by(|a, b| {
            self.merit(&b.stats, b.size, b.peak_live)
                .total_cmp(&self.merit(&a.stats, a.size, a.peak_live))
        });
        groups
    }
}

/// Allocations of one size from one call site, each too rarely transferred to be hot alone,
/// whose transfers keep a few reused pinned blocks busy: see [`HotPolicy::recycled_groups`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecycledGroup {
    pub pid: u32,
    pub call_site: CallSiteId,
    /// The innermost Python line that made its members (none outside Python, and for
    /// folded allocations, whose callers are not kept).
    pub python: Option<CallSiteId>,
    pub size: u64,
    pub allocations: u64,
    pub transfers: u64,
    /// The most of them alive at once: the pinned blocks the group needs.
    pub peak_live: u64,
    /// Their copies together, by direction.
    pub stats: TransferStats,
}

/// The members of a history's hot recycled groups, keyed as the groups are (process, call
/// site, Python line, size): what the history's verdicts ([`crate::set::HotSet`]) and the
/// report both ask, so that the report advises the groups `hotpin run` pins.
#[derive(Debug, Default)]
pub struct Grouped(HashSet<(u32, CallSiteId, Option<CallSiteId>, u64)>);

impl Grouped {
    pub fn of(groups: &[RecycledGroup]) -> Self {
        Self(
            groups
                .iter()
                .map(|g| (g.pid, g.call_site, g.python, g.size))
                .collect(),
        )
    }

    /// Whether `allocation` of `history` is a member of one of the groups.
    pub fn holds(&self, history: &MemHistory, allocation: &Allocation) -> bool {
        // Reading the Python line is a walk of the allocation's callers: not for nothing.
        !self.0.is_empty()
            && allocation.call_site.is_some_and(|site| {
                self.0.contains(&(
                    allocation.pid,
                    site,
                    history.python_line(allocation.id),
                    allocation.size,
                ))
            })
    }

    /// Whether folded allocations (whose Python lines are not kept) of this process, call
    /// site and size are.
    pub fn holds_folded(&self, pid: u32, site: CallSiteId, size: u64) -> bool {
        self.0.contains(&(pid, site, None, size))
    }
}

impl RecycledGroup {
    /// What pinning the group holds pinned: its peak of live blocks.
    pub fn pinned_bytes(&self) -> u64 {
        self.peak_live * self.size
    }
}

/// The most of `allocations` alive at the same time (one never freed stays alive).
fn peak_live(allocations: &[&Allocation]) -> u64 {
    let lives: Vec<(u64, u64)> = allocations
        .iter()
        .map(|a| (a.alloc_ns, a.free_ns.unwrap_or(u64::MAX)))
        .collect();
    hotpin_history::history::peak_alive(&lives)
}
