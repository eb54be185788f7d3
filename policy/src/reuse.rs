//! What a freed pinned block may serve: the run-time rule the allocator's pool, the
//! interposer's shelves and a history's sizes share, written once.

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

/// A size at or under the smallest request a freed block of `block` bytes serves: requests
/// of at most a tenth (or a page) less, so that a caller looks only from here up to `block`,
/// asking [`serves`] of each.
pub fn smallest_served_at_least(block: usize, page: usize) -> usize {
    (block - block / 10)
        .saturating_sub(1)
        .min(block.saturating_sub(page))
}

/// Whether a freed block of `block` bytes serves a request of `size` ([`reuse_limit`]).
pub fn serves(block: usize, size: usize, page: usize) -> bool {
    block >= size && block <= reuse_limit(size, page)
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
        for block in [0, 100, 4096, 5000, 1 << 20, (1 << 20) + 7, 64 << 20] {
            let low = smallest_served_at_least(block, page);
            for size in low.saturating_sub(page * 2)..low {
                assert!(
                    !serves(block, size, page),
                    "{block} serves {size} under {low}"
                );
            }
        }
    }
}
