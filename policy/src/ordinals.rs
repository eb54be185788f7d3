//! An allocation's identity within its call site: the rule the allocator and the
//! interposer's judgement share, written once.

use rustc_hash::FxHashMap;

use crate::set::SiteKey;

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
