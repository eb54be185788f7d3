//! Each process's pinned host memory, as its history saw it (#27): who pinned it, whether
//! copies used it, and what the node's arbiter (`tracer daemon`'s leases) did for it.
//!
//! The history's dump carries these accounts (`pinned` in its JSON), written from the
//! allocations when the dump is written, so that a reader of the file needs none of our code;
//! what the arbiter did can only come from the daemon, which sets it before writing.

use serde::{Deserialize, Serialize};

use super::{HistoryData, module_file_name};

/// One process's pinned host memory. Every allocation pinned when it ended (or at the end of
/// the history) counts, freed or not, folded ones too.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PinnedAccount {
    pub pid: u32,
    pub pinned_bytes: u64,
    /// Of those, registered by hotpin (its interposer's call site): the rest the program
    /// pinned itself.
    pub by_hotpin_bytes: u64,
    /// Of those, the bytes copies touched (of an allocation whose copied part is known, that
    /// part: `HistoryData::copied_extents`; else all of it, if copied at least once); the rest
    /// was pinned and never copied. Of folded allocations (a long run's history keeps their
    /// sum), at most one is counted copied per copy they had together.
    pub copied_bytes: u64,
    pub never_copied_bytes: u64,
    /// What the node's arbiter leased it, where `tracer daemon` granted leases to it.
    #[serde(default)]
    pub leases: Option<LeaseAccount>,
}

/// What the node's arbiter did for one process over its life.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct LeaseAccount {
    /// The most bytes leased to it at once.
    pub peak_leased_bytes: u64,
    /// Leases granted and denied.
    pub granted: u64,
    pub denied: u64,
    /// Blocks it was asked to give back (for a denser process), and their bytes.
    pub reclaimed: u64,
    pub reclaimed_bytes: u64,
    /// Whether it said it let go of a block the tracer still saw pinned.
    pub distrusted: bool,
}

/// The accounts of `data`, per process, from its allocations (and its folded ones); the
/// leases as `data.pinned` holds them.
pub(super) fn accounts(data: &HistoryData) -> Vec<PinnedAccount> {
    let mut accounts: std::collections::BTreeMap<u32, PinnedAccount> = data
        .pinned
        .iter()
        .filter(|account| account.leases.is_some())
        .map(|account| {
            let kept = PinnedAccount {
                pid: account.pid,
                leases: account.leases,
                ..PinnedAccount::default()
            };
            (account.pid, kept)
        })
        .collect();
    let by_hotpin = |site: Option<u32>| {
        site.and_then(|id| data.call_sites.get(id as usize))
            .is_some_and(|site| module_file_name(&site.module).starts_with("libhotpin"))
    };
    let mut add = |pid: u32, bytes: u64, copied: u64, hotpin: bool| {
        let account = accounts.entry(pid).or_insert_with(|| PinnedAccount {
            pid,
            ..PinnedAccount::default()
        });
        account.pinned_bytes += bytes;
        account.copied_bytes += copied;
        account.never_copied_bytes += bytes - copied;
        if hotpin {
            account.by_hotpin_bytes += bytes;
        }
    };
    for a in data.allocations.iter().filter(|a| a.kind.is_pinned()) {
        let copied = match data.copied_extent(a.id) {
            Some((from, to)) => to - from,
            None if a.stats.transfers > 0 => a.size,
            None => 0,
        };
        add(a.pid, a.size, copied, by_hotpin(a.call_site));
    }
    for folded in data.compacted.iter().filter(|f| f.kind.is_pinned()) {
        let bytes = folded.size.saturating_mul(folded.allocations);
        let copied = folded
            .size
            .saturating_mul(folded.allocations.min(folded.stats.transfers));
        add(folded.pid, bytes, copied, by_hotpin(folded.call_site));
    }
    accounts.into_values().collect()
}
