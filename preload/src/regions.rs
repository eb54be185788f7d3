//! Which host memory auto mode tracks, asked without a lock (#40 item 1): a copy that touches
//! none of it (a small tensor below the floor, memory hotpin never saw) teaches the learner
//! nothing, and is not looked up under the state's lock. On the stand-in that lookup was most
//! of the 160 ns hotpin added to each small copy (docs/bench/history.md, "What hotpin's hooks
//! cost").
//!
//! A counting filter over 2 MiB regions of the address space: each tracked block adds one to
//! the slot of every region it covers and takes it back once it is no longer tracked. Slots
//! are shared by regions (hashed), so a copy may be sent the slow way for nothing, but a copy
//! of a tracked block is never skipped. A block is tracked before its allocation returns, so
//! the program cannot copy it before it is counted here.

use std::sync::atomic::{AtomicU32, Ordering};

/// log2 of a region's bytes.
const SHIFT: u32 = 21;
/// log2 of the slots.
const SLOT_BITS: u32 = 16;
const SLOTS: usize = 1 << SLOT_BITS;

/// The tracked blocks, counted per region.
pub struct Regions {
    slots: [AtomicU32; SLOTS],
    /// Blocks covering at least as many regions as there are slots (128 GiB): they make
    /// every range a maybe.
    wide: AtomicU32,
}

/// Auto mode's tracked blocks (`online::Learner`, the one learner of the process).
pub static TRACKED: Regions = Regions::new();

impl Regions {
    const fn new() -> Self {
        Self {
            slots: [const { AtomicU32::new(0) }; SLOTS],
            wide: AtomicU32::new(0),
        }
    }

    fn slot(&self, region: usize) -> &AtomicU32 {
        let hashed = (region as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOT_BITS);
        // Always a slot (the hash has SLOT_BITS bits); else every range would be a maybe.
        self.slots.get(hashed as usize).unwrap_or(&self.wide)
    }

    /// The regions `[start, start + len)` covers, or None where they are as many as the slots.
    fn span(start: usize, len: usize) -> Option<std::ops::RangeInclusive<usize>> {
        let first = start >> SHIFT;
        let last = start.saturating_add(len.max(1) - 1) >> SHIFT;
        (last - first < SLOTS).then_some(first..=last)
    }

    /// A block `[start, start + len)` is tracked from now on.
    pub fn add(&self, start: usize, len: usize) {
        self.count(start, len, AtomicU32::fetch_add);
    }

    /// A block [`Regions::add`] counted is no longer tracked.
    pub fn remove(&self, start: usize, len: usize) {
        self.count(start, len, AtomicU32::fetch_sub);
    }

    /// `change` (one up or down) on the slot of each region the block covers, or on `wide`.
    fn count(&self, start: usize, len: usize, change: fn(&AtomicU32, u32, Ordering) -> u32) {
        match Self::span(start, len) {
            Some(regions) => regions.for_each(|r| {
                change(self.slot(r), 1, Ordering::Release);
            }),
            None => {
                change(&self.wide, 1, Ordering::Release);
            }
        }
    }

    /// Whether `[start, start + len)` may touch a tracked block: false only where none does.
    pub fn may_touch(&self, start: usize, len: usize) -> bool {
        if self.wide.load(Ordering::Acquire) != 0 {
            return true;
        }
        match Self::span(start, len) {
            Some(mut regions) => regions.any(|r| self.slot(r).load(Ordering::Acquire) != 0),
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_touching_a_tracked_block_is_never_skipped() {
        let regions = Regions::new();
        let mib = 1 << 20;
        let block = 0x7f00_0000_0000 + 3 * mib;
        assert!(!regions.may_touch(block, 16 << 10), "nothing tracked yet");
        regions.add(block, 64 * mib);
        for at in [block, block + 63 * mib, block + 64 * mib - 1] {
            assert!(regions.may_touch(at, 1), "inside the block at {at:#x}");
        }
        // Ranges that start before the block and end in it, or cover it whole.
        assert!(regions.may_touch(block - 4 * mib, 4 * mib + 1));
        assert!(regions.may_touch(block - mib, 100 * mib));
        // Far from it (another 2 MiB region, whose slot no block shares here).
        assert!(!regions.may_touch(block + 200 * mib, 16 << 10));
        assert!(!regions.may_touch(0x5555_0000_0000, 16 << 10));
        regions.remove(block, 64 * mib);
        assert!(!regions.may_touch(block, 16 << 10), "no longer tracked");
    }

    #[test]
    fn a_block_as_wide_as_the_slots_makes_every_range_a_maybe() {
        let regions = Regions::new();
        let huge = (SLOTS + 1) << SHIFT;
        regions.add(0x1000_0000_0000, huge);
        assert!(regions.may_touch(0x5555_0000_0000, 8));
        regions.remove(0x1000_0000_0000, huge);
        assert!(!regions.may_touch(0x5555_0000_0000, 8));
        // A range that wide is a maybe on its own.
        assert!(regions.may_touch(0x2000_0000_0000, huge));
    }
}
