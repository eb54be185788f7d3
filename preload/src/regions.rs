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
//!
//! Behind the filter, each thread remembers a few ranges the learner's lookup found no
//! tracked block in (`missed`), with the filter's generation then (one more at every block
//! tracked or let go): while it is unchanged, no block can have come to touch them, so their
//! next copies skip the lock too. Small tensors that share a 2 MiB region with a tracked block
//! (a heap where both live) were looked up under the lock at every copy: about 0.25 us each,
//! 19,200 copies of 16 KiB in the "cannot help" set's `small_copies` (docs/benchmarks.md,
//! section 2).

use std::{
    cell::Cell,
    sync::atomic::{AtomicU32, AtomicU64, Ordering},
    thread::LocalKey,
};

/// log2 of a region's bytes.
const SHIFT: u32 = 21;
/// log2 of the slots.
const SLOT_BITS: u32 = 16;
const SLOTS: usize = 1 << SLOT_BITS;
/// log2 of the ranges a thread remembers as missed: one per entry of a small table, hashed
/// by the range's first page (6 KiB a thread for each filter).
const MISS_BITS: u32 = 8;
const MISSES: usize = 1 << MISS_BITS;
/// A generation no filter has (the table's empty entries).
const NEVER: u64 = u64::MAX;

/// A thread's missed ranges of one filter: start, end, and the filter's generation then.
pub type Missed = [Cell<(usize, usize, u64)>; MISSES];

thread_local! {
    /// This thread's missed ranges of `TRACKED` (and of the tests' filters, which use
    /// addresses of their own).
    static MISSED: Missed = const { [const { Cell::new((0, 0, NEVER)) }; MISSES] };
    /// This thread's missed ranges of `believed::BELIEVED`.
    pub static BELIEVED_MISSED: Missed = const { [const { Cell::new((0, 0, NEVER)) }; MISSES] };
}

/// Blocks counted per region: one filter (`TRACKED`'s, or `believed::BELIEVED`'s).
pub struct Regions {
    slots: [AtomicU32; SLOTS],
    /// Blocks covering at least as many regions as there are slots (128 GiB): they make
    /// every range a maybe.
    wide: AtomicU32,
    /// One more at every block tracked or let go, and at every `forget_misses`.
    generation: AtomicU64,
    /// This thread's missed ranges for this filter: a table of its own, whose entries hold
    /// this filter's generations.
    table: &'static LocalKey<Missed>,
}

/// Auto mode's tracked blocks (`online::Learner`, the one learner of the process).
pub static TRACKED: Regions = Regions::new();

impl Regions {
    const fn new() -> Self {
        Self::with_table(&MISSED)
    }

    /// A filter whose threads remember their missed ranges in `table` (one table a filter).
    pub const fn with_table(table: &'static LocalKey<Missed>) -> Self {
        Self {
            slots: [const { AtomicU32::new(0) }; SLOTS],
            wide: AtomicU32::new(0),
            generation: AtomicU64::new(0),
            table,
        }
    }

    /// Something the lookups behind the filter answer changed other than a block counted or
    /// let go: every range a thread remembers as missed is to be looked up again.
    pub fn forget_misses(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    #[inline(always)]
    fn slot(&self, region: usize) -> &AtomicU32 {
        let hashed = (region as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOT_BITS);
        // Always a slot (the hash has SLOT_BITS bits); else every range would be a maybe.
        self.slots.get(hashed as usize).unwrap_or(&self.wide)
    }

    /// The regions `[start, start + len)` covers, or None where they are as many as the slots.
    #[inline(always)]
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
        self.generation.fetch_add(1, Ordering::AcqRel);
        match Self::span(start, len) {
            Some(regions) => regions.for_each(|r| {
                change(self.slot(r), 1, Ordering::Release);
            }),
            None => {
                change(&self.wide, 1, Ordering::Release);
            }
        }
    }

    /// Whether `[start, start + len)` may touch a tracked block: false only where none does
    /// (no tracked block shares a region with it, or this thread found none there since the
    /// last block was tracked or let go, or `forget_misses`).
    #[inline(always)]
    pub fn may_touch(&self, start: usize, len: usize) -> bool {
        // Inlined where it is asked: a range within one region whose slot counts nothing
        // (nearly every copy of a program hotpin cannot help) costs two loads.
        if let Some(regions) = Self::span(start, len)
            && regions.start() == regions.end()
            && self.wide.load(Ordering::Acquire) == 0
            && self.slot(*regions.start()).load(Ordering::Acquire) == 0
        {
            return false;
        }
        self.may_touch_looked_up(start, len)
    }

    /// [`Regions::may_touch`] past its first test.
    #[inline(never)]
    fn may_touch_looked_up(&self, start: usize, len: usize) -> bool {
        if self.wide.load(Ordering::Acquire) == 0
            && let Some(mut regions) = Self::span(start, len)
            && !regions.any(|r| self.slot(r).load(Ordering::Acquire) != 0)
        {
            return false;
        }
        !self.known_missed(start, len)
    }

    /// The filter's generation now: read it before a lookup whose miss is to be remembered.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// This thread's lookup of `[start, start + len)`, made after the filter was at
    /// `generation`, found no tracked block: remembered until the next block is tracked or
    /// let go.
    pub fn missed(&self, start: usize, len: usize, generation: u64) {
        let end = start.saturating_add(len.max(1));
        // try_with: the table has no destructor, so this does not fail; were it ever to, the
        // miss would only go unremembered.
        let _ = self.table.try_with(|missed| {
            if let Some(entry) = missed.get(Self::way(start)) {
                entry.set((start, end, generation));
            }
        });
    }

    /// Whether this thread found no tracked block in a range holding `[start, start + len)`,
    /// and no block was tracked or let go since, nor `forget_misses` called.
    fn known_missed(&self, start: usize, len: usize) -> bool {
        let end = start.saturating_add(len.max(1));
        let now = self.generation.load(Ordering::Acquire);
        self.table
            .try_with(|missed| {
                missed.get(Self::way(start)).is_some_and(|entry| {
                    let (from, to, generation) = entry.get();
                    generation == now && from <= start && end <= to
                })
            })
            .unwrap_or(false)
    }

    /// The entry of the missed table a range starting at `start` takes (by its 4 KiB page).
    fn way(start: usize) -> usize {
        ((start as u64 >> 12).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - MISS_BITS)) as usize
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
    fn a_range_found_untracked_is_skipped_until_a_block_is_tracked_or_let_go() {
        let regions = Regions::new();
        let mib = 1 << 20;
        let block = 0x7f10_0000_0000;
        let small = block + mib + (64 << 10);
        let len = 16 << 10;
        regions.add(block, mib);
        assert!(
            regions.may_touch(small, len),
            "in the block's 2 MiB region: a maybe"
        );
        let generation = regions.generation();
        regions.missed(small, len, generation);
        assert!(!regions.may_touch(small, len), "found untracked");
        assert!(
            !regions.may_touch(small, 4096),
            "a part of it, from its start"
        );
        assert!(regions.may_touch(small, 2 * len), "wider than it");
        assert!(regions.may_touch(small - 4096, len), "starting before it");
        std::thread::scope(|scope| {
            let other = scope.spawn(|| regions.may_touch(small, len));
            assert!(
                other.join().unwrap_or(false),
                "another thread looked up nothing"
            );
        });
        // A block tracked there since: a maybe again, and still once it is let go.
        regions.add(small, len);
        assert!(regions.may_touch(small, len));
        regions.remove(small, len);
        assert!(
            regions.may_touch(small, len),
            "a miss of an older generation"
        );
        // A miss looked up before a block was tracked is stale as soon as it is remembered.
        let before = regions.generation();
        regions.add(small + len, len);
        regions.missed(small, len, before);
        assert!(
            regions.may_touch(small, len),
            "looked up before the block was tracked"
        );
        regions.missed(small, len, regions.generation());
        assert!(!regions.may_touch(small, len));
        regions.remove(small + len, len);
        regions.remove(block, mib);
        assert!(
            !regions.may_touch(small, len),
            "nothing tracked: the filter alone"
        );
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
