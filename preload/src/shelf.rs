//! Blocks the program freed, kept for the next allocation that fits.
//!
//! Two shelves use it (`state`):
//! - **pinned**: freed blocks still registered, so the next allocation of a hot group needs no
//!   new registration;
//! - **warm**: freed pageable blocks of a group that was to be pinned but found no room in
//!   the budget (or the node's lease). Their pages are faulted in already: a fresh pageable
//!   32 MiB block written by a device-to-host copy costs about 20 ms of first-touch faults on
//!   the H100 (1.7 GB/s), a warm one about 3 ms (docs/bench/history.md).
//!
//! A block on a shelf is still libc's, allocated and unused: handing it to a later
//! `malloc`/`posix_memalign` of about the same size is what an allocator may do (calloc's
//! zeroed and realloc's moved blocks never come from a shelf). Its old contents stay; no
//! program may rely on a fresh block's contents.

/// Freed blocks kept for reuse: `(address, size)`.
#[derive(Debug, Default)]
pub struct Shelf {
    blocks: Vec<(usize, usize)>,
    bytes: usize,
}

impl Shelf {
    /// The bytes it holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn put(&mut self, ptr: usize, size: usize) {
        self.blocks.push((ptr, size));
        self.bytes += size;
    }

    /// A block that serves `size` bytes (`hotpin_policy::reuse`: at most 10% more, or within a
    /// page), aligned to `align`: the smallest such, taken off the shelf.
    pub fn take_fitting(&mut self, size: usize, align: usize) -> Option<usize> {
        let (ptr, _) = self.fitting(size, align)?;
        self.take_at(ptr);
        Some(ptr)
    }

    /// The block [`Shelf::take_fitting`] would take, left on the shelf: `(address, size)`.
    pub fn fitting(&self, size: usize, align: usize) -> Option<(usize, usize)> {
        self.blocks
            .iter()
            .filter(|(ptr, block)| {
                hotpin_policy::reuse::serves(*block, size, hotpin::pool::page_size())
                    && ptr % align.max(1) == 0
            })
            .min_by_key(|(_, block)| *block)
            .copied()
    }

    /// Whether it holds the block at `ptr`.
    pub fn holds(&self, ptr: usize) -> bool {
        self.blocks.iter().any(|&(start, _)| start == ptr)
    }

    /// The block at `ptr`, taken off the shelf: its size.
    pub fn take_at(&mut self, ptr: usize) -> Option<usize> {
        let at = self.blocks.iter().position(|&(start, _)| start == ptr)?;
        let (_, size) = self.blocks.swap_remove(at);
        self.bytes -= size;
        Some(size)
    }

    /// Every block, taken off the shelf.
    pub fn take_all(&mut self) -> Vec<(usize, usize)> {
        self.bytes = 0;
        std::mem::take(&mut self.blocks)
    }
}

#[cfg(test)]
mod tests {
    use super::Shelf;

    /// Sizes in KiB: blocks above a page, as the shelves hold (the floor is 1 MiB).
    const K: usize = 1024;

    #[test]
    fn a_block_fits_within_a_tenth_more_and_its_alignment() {
        let mut shelf = Shelf::default();
        shelf.put(0x10_0000, 1000 * K);
        shelf.put(0x20_0010, 1050 * K);
        shelf.put(0x30_0000, 1200 * K);
        assert_eq!(shelf.bytes(), 3250 * K);
        // 1200 KiB is more than 10% above 1000 KiB; 0x20_0010 is not aligned to 64.
        assert_eq!(shelf.take_fitting(1000 * K, 64), Some(0x10_0000));
        assert_eq!(shelf.take_fitting(1000 * K, 64), None);
        assert_eq!(shelf.take_fitting(1000 * K, 16), Some(0x20_0010));
        assert_eq!(shelf.take_fitting(2000 * K, 16), None);
        assert_eq!(shelf.bytes(), 1200 * K);
        assert_eq!(shelf.take_at(0x30_0000), Some(1200 * K));
        assert_eq!(shelf.take_at(0x30_0000), None);
        assert_eq!(shelf.bytes(), 0);
    }

    #[test]
    fn the_smallest_fitting_block_is_taken_and_all_can_be_emptied() {
        let mut shelf = Shelf::default();
        shelf.put(0x1000, 1090 * K);
        shelf.put(0x2000, 1010 * K);
        assert_eq!(shelf.take_fitting(1000 * K, 1), Some(0x2000));
        shelf.put(0x3000, 1000 * K);
        assert_eq!(
            shelf.take_all(),
            vec![(0x1000, 1090 * K), (0x3000, 1000 * K)]
        );
        assert_eq!(shelf.bytes(), 0);
        assert_eq!(shelf.take_fitting(1000 * K, 1), None);
    }
}
