//! What a freed pinned block may serve, and an allocation's identity within its call site:
//! the two run-time rules the allocator's pool and the interposer's shelves and judgement
//! share, written once.

use rustc_hash::FxHashMap;

use crate::set::SiteKey;

/// The largest freed block that serves a request of `size` bytes: at most 10% larger
/// (PyTorch rounds to powers of two, which can hold 1.78x what was asked, so a block made for
/// one size is not kept busy by a much smaller one), or, for a request smaller than a page,
/// within a page.
pub fn reuse_limit(size: usize, page: usize) -> usize {
    let within_page = size
        .checked_next_multiple_of(page.max(1))
        .unwrap_or(usize::MAX);
    size.saturating_add(size / 10).max(within_page)
}

/// Whether a freed block of `block` bytes serves a request of `size` ([`reuse_limit`]).
pub fn serves(block: usize, size: usize, page: usize) -> bool {
    block >= size && block <= reuse_limit(size, page)
}

/// Each call site's allocations counted as they are made: the ordinal of the next one, which
/// with its site and size names an allocation across runs (what a history's verdicts are
/// keyed by). Asked at every judged allocation: a fast hash, the site cloned only when new.
#[derive(Debug, Default)]
pub struct Ordinals {
    next: FxHashMap<SiteKey, u32>,
}

impl Ordinals {
    /// The ordinal of this allocation at `site` (0 for its first).
    pub fn next(&mut self, site: &SiteKey) -> u32 {
        match self.next.get_mut(site) {
            Some(next) => {
                *next += 1;
                *next - 1
            }
            None => {
                self.next.insert(site.clone(), 1);
                0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_serves_requests_up_to_a_tenth_smaller_or_within_a_page() {
        let page = 4096;
        assert!(serves(1 << 20, 1 << 20, page));
        assert!(serves((1 << 20) + (1 << 20) / 10, 1 << 20, page));
        assert!(!serves((1 << 20) + (1 << 20) / 10 + 1, 1 << 20, page));
        assert!(!serves(999, 1000, page), "smaller never serves");
        assert!(serves(4096, 100, page), "within a page");
        assert!(!serves(8192, 100, page));
        assert_eq!(reuse_limit(usize::MAX, page), usize::MAX, "no overflow");
    }

    #[test]
    fn ordinals_count_per_site_from_zero() {
        let mut ordinals = Ordinals::default();
        let a = SiteKey::new("/lib/a.so", 1);
        let b = SiteKey::new("/lib/b.so", 1);
        assert_eq!(ordinals.next(&a), 0);
        assert_eq!(ordinals.next(&a), 1);
        assert_eq!(ordinals.next(&b), 0);
        assert_eq!(ordinals.next(&a), 2);
    }
}
