//! `tracer report --budget BYTES`: the advice as `hotpin run --budget BYTES` would carry it
//! out. The places to pin are taken densest first (copy time saved per pinned byte under a
//! cost model, else copies per byte), each while policy's [`Budget`] has room for it, as auto
//! mode keeps the densest blocks; the places that do not fit are listed apart. A place of
//! several blocks that does not fit whole keeps as many as fit (their share of its copies), as
//! hotpin run weighs block by block; a place's blocks are taken to be its largest's size.

use hotpin_policy::online::Budget;

use crate::{Report, SiteAdvice, headline, most_copied_first};

impl Report {
    /// This report with its pin advice held to a budget of `limit` bytes.
    pub fn under_budget(mut self, limit: u64) -> Self {
        let costed = self.policy.cost.is_some();
        let density = |site: &SiteAdvice| {
            let gain = if costed {
                site.saving_s
            } else {
                site.transfers as f64
            };
            gain / site.bytes.max(1) as f64
        };
        let mut sites = std::mem::take(&mut self.pin_sites);
        sites.sort_by(|a, b| density(b).total_cmp(&density(a)));
        let mut budget = Budget::new(Some(limit));
        for site in sites {
            if budget.has_room(site.bytes) {
                budget.take(site.bytes);
                self.pin_sites.push(site);
                continue;
            }
            // As many of its blocks as fit (hotpin run weighs block by block); the rest over
            // the budget.
            let each = site.block_bytes.max(1);
            let fit = (budget.room() / each).min(site.bytes / each);
            if fit == 0 {
                self.over_budget_sites.push(site);
                continue;
            }
            let (kept, left) = split(site, fit);
            budget.take(kept.bytes);
            self.pin_sites.push(kept);
            self.over_budget_sites.push(left);
        }
        self.pin_sites.sort_by(most_copied_first);
        self.over_budget_sites.sort_by(most_copied_first);
        self.pin_bytes = budget.used;
        self.budget = Some(limit);
        self.headline = headline(
            &self.pin_sites,
            &self.unpin_sites,
            self.partly_copied.first(),
            costed,
        );
        self
    }
}

impl Report {
    /// What `--budget` says above what it left out (text and HTML alike), if one was given.
    pub(crate) fn budget_summary(&self) -> Option<String> {
        let limit = hotpin_history::units::bytes(self.budget?);
        Some(if self.over_budget_sites.is_empty() {
            format!("a budget of {limit}: everything hot fits")
        } else {
            format!("over a budget of {limit}, not pinned (hotpin run --budget keeps the densest):")
        })
    }
}

/// `site` as two: `blocks` of its blocks (their bytes, and their share of its allocations,
/// copies and weighing), and the rest.
fn split(site: SiteAdvice, blocks: u64) -> (SiteAdvice, SiteAdvice) {
    let mut kept = site.clone();
    kept.bytes = site.block_bytes * blocks;
    let share = kept.bytes as f64 / site.bytes.max(1) as f64;
    kept.allocations = ((site.allocations as f64 * share).round() as u64).max(1);
    kept.transfers = (site.transfers as f64 * share).round() as u64;
    kept.saving_s = site.saving_s * share;
    kept.cost_s = site.cost_s * share;
    kept.pinned_already_bytes = site.pinned_already_bytes.min(kept.bytes);
    let mut left = site;
    left.allocations = left.allocations.saturating_sub(kept.allocations);
    left.bytes -= kept.bytes;
    left.transfers = left.transfers.saturating_sub(kept.transfers);
    left.saving_s -= kept.saving_s;
    left.cost_s -= kept.cost_s;
    left.pinned_already_bytes -= kept.pinned_already_bytes;
    (kept, left)
}

#[cfg(test)]
mod tests {
    use hotpin_history::{MemHistory, history::AllocKind};
    use hotpin_policy::hot::HotPolicy;
    use hotpin_registry::registry::CopyDirection;

    use crate::Report;

    /// Three hot buffers of three call sites, 8, 4 and 2 MiB, copied 40, 40 and 10 times:
    /// under 10 MiB the densest that fit are kept (4 MiB at 10 copies a MiB, then 8 MiB does
    /// not fit beside it, then 2 MiB at 5 a MiB does), as hotpin run keeps the densest.
    #[test]
    fn a_budget_keeps_the_densest_places_that_fit_and_lists_the_rest() {
        const MIB: u64 = 1 << 20;
        let mut h = MemHistory::new();
        let sites: Vec<_> = (0..3u64)
            .map(|i| {
                h.intern_call_site(hotpin_history::history::CallSite {
                    module: "/bin/app".into(),
                    offset: 0x10 * (i + 1),
                    symbol: Some(format!("load_{i}")),
                })
            })
            .collect();
        for (i, (size, copies)) in [(8 * MIB, 40), (4 * MIB, 40), (2 * MIB, 10)]
            .into_iter()
            .enumerate()
        {
            let host = 0x1000_0000 + i as u64 * 16 * MIB;
            h.alloc(1, host, size, AllocKind::Pageable, Some(sites[i]), 0);
            for t in 0..copies {
                h.transfer(1, 0xd000_0000, host, size, CopyDirection::HostToDevice, t);
            }
        }
        let whole = Report::new(&h, HotPolicy::transfers(5), 10);
        assert_eq!(whole.pin_sites.len(), 3);
        assert_eq!(whole.pin_bytes, 14 * MIB);
        let held = whole.under_budget(10 * MIB);
        let names: Vec<&str> = held
            .pin_sites
            .iter()
            .map(|s| s.call_site.as_str())
            .collect();
        assert_eq!(held.pin_sites.len(), 2, "{names:?}");
        assert!(
            names[0].ends_with("load_1") && names[1].ends_with("load_2"),
            "{names:?}"
        );
        assert_eq!(held.pin_bytes, 6 * MIB);
        assert_eq!(held.over_budget_sites.len(), 1);
        assert!(held.over_budget_sites[0].call_site.ends_with("load_0"));
        assert_eq!(held.budget, Some(10 * MIB));
        // A place of 3 allocations of 2 MiB under 5 MiB keeps 2 of them, with 2/3 of its
        // copies; the third is over the budget.
        let mut h3 = MemHistory::new();
        let site = h3.intern_call_site(hotpin_history::history::CallSite {
            module: "/bin/app".into(),
            offset: 0x40,
            symbol: Some("load_three".into()),
        });
        for i in 0..3u64 {
            let host = 0x2000_0000 + i * 4 * MIB;
            h3.alloc(1, host, 2 * MIB, AllocKind::Pageable, Some(site), 0);
            for t in 0..30 {
                h3.transfer(
                    1,
                    0xd000_0000,
                    host,
                    2 * MIB,
                    CopyDirection::HostToDevice,
                    t,
                );
            }
        }
        let part = Report::new(&h3, HotPolicy::transfers(5), 10).under_budget(5 * MIB);
        assert_eq!(part.pin_sites.len(), 1);
        assert_eq!(
            (part.pin_sites[0].allocations, part.pin_sites[0].bytes),
            (2, 4 * MIB)
        );
        assert_eq!(part.pin_sites[0].transfers, 60);
        assert_eq!(
            (
                part.over_budget_sites[0].allocations,
                part.over_budget_sites[0].bytes
            ),
            (1, 2 * MIB)
        );
        assert_eq!(part.pin_bytes, 4 * MIB);
        let text = held.render();
        assert!(text.contains("over a budget of 10.0 MiB"), "{text}");
        let page = crate::html::render(&held, &h, &Default::default());
        assert!(
            page.contains("over a budget of 10.0 MiB, not pinned"),
            "{page}"
        );
        assert!(held.headline.contains("load_1"), "{}", held.headline);
    }
}
