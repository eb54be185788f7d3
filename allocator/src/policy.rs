//! What to pin: the modes, and in use mode the hot set read from a saved history.

use std::{collections::HashMap, path::Path};

use tracer_agent::{
    dump::{self, DumpError},
    history::{AllocKind, MemHistory},
    report::HotPolicy,
};

/// How the allocator chooses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Everything pageable (a baseline).
    PinNone,
    /// Everything pinned (a baseline).
    PinAll,
    /// Everything pinned, so transfers are fast while `tracer` records the history.
    Profile,
    /// Pin what the history says was hot.
    Use,
}

impl Mode {
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "pin-none" => Some(Mode::PinNone),
            "pin-all" => Some(Mode::PinAll),
            "profile" => Some(Mode::Profile),
            "use" => Some(Mode::Use),
            _ => None,
        }
    }
}

/// An allocation's identity across runs: its call site as the module's file name and the
/// offset in it (stable under ASLR), then which allocation from that site it is, and its size.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SiteKey {
    pub module: String,
    pub offset: u64,
}

impl SiteKey {
    /// Keys on the file name, so a history recorded with the program at one path applies to
    /// it at another.
    pub fn new(module: &str, offset: u64) -> Self {
        let name = module.rsplit('/').next().unwrap_or(module);
        Self {
            module: name.to_string(),
            offset,
        }
    }
}

/// What the history says of one allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Hot, and within the pinned budget (pin it).
    Pin,
    /// Hot, but the budget went to allocations with more transfers.
    OverBudget,
    Cold,
}

/// The hot set of a history, looked up by (call site, ordinal, size), then by call site.
#[derive(Debug, Default)]
pub struct HotSet {
    allocations: HashMap<(SiteKey, u32, u64), Verdict>,
    /// Per call site: (hot allocations, all allocations).
    sites: HashMap<SiteKey, (u32, u32)>,
}

/// How an allocation was judged, for the statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judged {
    /// The history knows this allocation.
    Known(Verdict),
    /// It does not, but its call site was hot for most of its allocations.
    SiteHot,
    /// Neither it nor its call site is in the history.
    Unknown,
}

impl HotSet {
    /// Reads a history (either format) and judges its host allocations with `policy`. Under a
    /// `budget`, hot allocations are admitted most-transferred first (the most benefit per
    /// pinned byte) until the budget is spent; the rest are `OverBudget`.
    pub fn load(path: &Path, policy: HotPolicy, budget: Option<u64>) -> Result<Self, DumpError> {
        Ok(Self::from_history(&dump::read(path)?, policy, budget))
    }

    pub fn from_history(history: &MemHistory, policy: HotPolicy, budget: Option<u64>) -> Self {
        let mut set = HotSet::default();
        let mut hot = Vec::new();
        for allocation in history.allocations() {
            if !allocation.kind.is_host() || allocation.kind == AllocKind::Untracked {
                continue;
            }
            let Some(site) = allocation.call_site.and_then(|id| history.call_site(id)) else {
                continue;
            };
            let key = SiteKey::new(&site.module, site.offset);
            let is_hot = policy.is_hot(allocation);
            let counts = set.sites.entry(key.clone()).or_default();
            counts.1 += 1;
            if is_hot {
                counts.0 += 1;
                hot.push((
                    allocation.stats.transfers,
                    allocation.size,
                    key.clone(),
                    allocation.ordinal,
                ));
            }
            set.allocations
                .insert((key, allocation.ordinal, allocation.size), Verdict::Cold);
        }
        hot.sort_by_key(|entry| std::cmp::Reverse(entry.0));
        let mut spent = 0u64;
        for (_, size, key, ordinal) in hot {
            let verdict = match budget {
                Some(budget) if spent + size > budget => Verdict::OverBudget,
                _ => {
                    spent += size;
                    Verdict::Pin
                }
            };
            set.allocations.insert((key, ordinal, size), verdict);
        }
        set
    }

    /// Judges the `ordinal`th allocation of `size` bytes from `site`.
    pub fn judge(&self, site: &SiteKey, ordinal: u32, size: u64) -> Judged {
        if let Some(&verdict) = self.allocations.get(&(site.clone(), ordinal, size)) {
            return Judged::Known(verdict);
        }
        match self.sites.get(site) {
            Some(&(hot, total)) if 2 * hot > total => Judged::SiteHot,
            _ => Judged::Unknown,
        }
    }

    /// How many allocations the history says to pin.
    pub fn pinned_count(&self) -> usize {
        self.allocations
            .values()
            .filter(|v| **v == Verdict::Pin)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use tracer_agent::{history::CallSite, probes::registry::CopyDirection};

    use super::*;

    const MIB: u64 = 1 << 20;

    /// Site A: two hot 4 MiB buffers and one cold; site B: one cold buffer.
    fn history() -> MemHistory {
        let mut h = MemHistory::new();
        let a = h.intern_call_site(CallSite {
            module: "/old/path/app".into(),
            offset: 0x100,
            symbol: None,
        });
        let b = h.intern_call_site(CallSite {
            module: "/old/path/app".into(),
            offset: 0x200,
            symbol: None,
        });
        let sizes_transfers = [(a, 100), (a, 300), (a, 2), (b, 1)];
        for (i, (site, transfers)) in sizes_transfers.into_iter().enumerate() {
            let start = 0x1000_0000 * (i as u64 + 1);
            h.alloc(1, start, 4 * MIB, AllocKind::Pageable, Some(site), 0);
            for t in 0..transfers {
                h.transfer(
                    1,
                    0xd000_0000,
                    start,
                    4 * MIB,
                    CopyDirection::HostToDevice,
                    t,
                );
            }
        }
        h
    }

    #[test]
    fn judges_by_site_ordinal_and_size_whatever_the_path() {
        let set = HotSet::from_history(&history(), HotPolicy::default(), None);
        let a = SiteKey::new("/new/place/app", 0x100);
        assert_eq!(set.judge(&a, 0, 4 * MIB), Judged::Known(Verdict::Pin));
        assert_eq!(set.judge(&a, 1, 4 * MIB), Judged::Known(Verdict::Pin));
        assert_eq!(set.judge(&a, 2, 4 * MIB), Judged::Known(Verdict::Cold));
        assert_eq!(set.pinned_count(), 2);
    }

    #[test]
    fn an_unknown_allocation_falls_back_to_its_call_site_then_to_unknown() {
        let set = HotSet::from_history(&history(), HotPolicy::default(), None);
        let a = SiteKey::new("app", 0x100);
        assert_eq!(
            set.judge(&a, 7, 4 * MIB),
            Judged::SiteHot,
            "2 of 3 at this site were hot"
        );
        assert_eq!(
            set.judge(&a, 0, 8 * MIB),
            Judged::SiteHot,
            "a changed size is not the same allocation"
        );
        let b = SiteKey::new("app", 0x200);
        assert_eq!(
            set.judge(&b, 5, 4 * MIB),
            Judged::Unknown,
            "site B was cold"
        );
        let new_site = SiteKey::new("app", 0x999);
        assert_eq!(set.judge(&new_site, 0, 4 * MIB), Judged::Unknown);
    }

    #[test]
    fn a_budget_admits_the_most_transferred_first() {
        let set = HotSet::from_history(&history(), HotPolicy::default(), Some(5 * MIB));
        let a = SiteKey::new("app", 0x100);
        assert_eq!(
            set.judge(&a, 1, 4 * MIB),
            Judged::Known(Verdict::Pin),
            "300 transfers"
        );
        assert_eq!(
            set.judge(&a, 0, 4 * MIB),
            Judged::Known(Verdict::OverBudget),
            "100 transfers"
        );
    }
}
