//! The blocks the program believes pinned that hotpin left pageable (a demoted request, a
//! registration of the program's skipped), kept in a map and counted in a lock-free filter
//! ([`BELIEVED`]) as they come and go, so that a copy touching none of them is not looked up
//! under the state's lock (#40 item 1).
//!
//! Why: once one such block exists, every copy of the process looked for them under the lock.
//! PyTorch's first `.item()` makes a pinned request of 4 bytes; under `--mode pin-none` it is
//! demoted (auto and use modes keep a request under 64 KiB, and demote a larger cold one), and
//! each of small_copies' 19,200 later copies of 16 KiB took the lock: 20,046 entries, about
//! 180 ns a copy on the H100 (docs/benchmarks.md section 2, "small_copies, localized").
//!
//! A block is counted before the program can copy it (the map's insert comes before the
//! pointer or the registration's status is handed back) and until it leaves the map, so a
//! copy of one is never skipped; a copy may still be looked up for nothing (regions share
//! slots), and then its range is remembered as missed by its thread until an entry comes,
//! goes or changes (`copies::keeping_promises`; a change without an entry coming or going,
//! such as hotpin's registration under a skipped one ending, calls `BELIEVED.forget_misses`).

use std::collections::BTreeMap;

use crate::regions::{BELIEVED_MISSED, Regions};

/// The blocks of every [`Believed`] map of the process, counted per region, with each
/// thread's ranges its lookup found none of them in (as `regions::TRACKED` has): a 4-byte
/// demoted request lies in the heap beside the program's small tensors, in their 2 MiB
/// region.
pub static BELIEVED: Regions = Regions::with_table(&BELIEVED_MISSED);

/// A map of blocks by start whose every entry is counted in [`BELIEVED`] while it is in it;
/// `size` reads an entry's length.
pub struct Believed<V> {
    map: BTreeMap<usize, V>,
    size: fn(&V) -> usize,
}

impl<V> Believed<V> {
    pub const fn new(size: fn(&V) -> usize) -> Self {
        Self {
            map: BTreeMap::new(),
            size,
        }
    }

    /// Puts `value` at `start`, counted before it is in; what was there before, no longer
    /// counted.
    pub fn insert(&mut self, start: usize, value: V) -> Option<V> {
        BELIEVED.add(start, (self.size)(&value));
        let old = self.map.insert(start, value);
        if let Some(old) = &old {
            BELIEVED.remove(start, (self.size)(old));
        }
        old
    }

    /// Takes the entry at `start` out, and out of the count.
    pub fn remove(&mut self, start: &usize) -> Option<V> {
        let old = self.map.remove(start);
        if let Some(old) = &old {
            BELIEVED.remove(*start, (self.size)(old));
        }
        old
    }

    pub fn get(&self, start: &usize) -> Option<&V> {
        self.map.get(start)
    }

    /// The entry at `start`, to change what it holds (not its size, which the count holds):
    /// what a lookup answers may change, so remembered misses are forgotten. Only where there
    /// is one: the pinner asks for a demoted entry at every block it pins, and forgetting
    /// every thread's misses there made their next copies look up again for nothing.
    pub fn get_mut(&mut self, start: &usize) -> Option<&mut V> {
        let entry = self.map.get_mut(start);
        if entry.is_some() {
            BELIEVED.forget_misses();
        }
        entry
    }

    pub fn contains_key(&self, start: &usize) -> bool {
        self.map.contains_key(start)
    }

    /// The map itself, to be read.
    pub fn map(&self) -> &BTreeMap<usize, V> {
        &self.map
    }
}

impl<V> Drop for Believed<V> {
    /// A map dropped (a test's state) leaves nothing counted.
    fn drop(&mut self) {
        for (&start, value) in &self.map {
            BELIEVED.remove(start, (self.size)(value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests share the process's one filter: one at a time.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn a_block_is_counted_from_its_insert_to_its_removal_and_a_replaced_one_no_longer() {
        let _one = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Addresses of this test's own, far from any other test's blocks.
        let (a, b) = (0x6e00_0000_0000usize, 0x6f00_0000_0000usize);
        let mut map: Believed<usize> = Believed::new(|size| *size);
        assert!(!BELIEVED.may_touch(a, 16));
        map.insert(a, 4096);
        assert!(BELIEVED.may_touch(a, 16), "an inserted block is counted");
        assert!(BELIEVED.may_touch(a + 100, 1));
        // Replaced by a block of another size at the same start: the old one's count goes.
        map.insert(a, 64 << 20);
        assert!(BELIEVED.may_touch(a + (32 << 20), 1));
        map.insert(b, 4);
        assert_eq!(map.remove(&a), Some(64 << 20));
        assert!(!BELIEVED.may_touch(a, 16), "a removed block is not counted");
        assert!(!BELIEVED.may_touch(a + (32 << 20), 1));
        assert!(BELIEVED.may_touch(b, 4));
        drop(map);
        assert!(
            !BELIEVED.may_touch(b, 4),
            "a dropped map leaves nothing counted"
        );
    }

    #[test]
    fn a_miss_is_remembered_until_an_entry_comes_goes_or_changes() {
        let _one = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let a = 0x6d00_0000_0000usize;
        // A range beside the block, in its 2 MiB region.
        let beside = a + (64 << 10);
        let mut map: Believed<usize> = Believed::new(|size| *size);
        map.insert(a, 4);
        assert!(
            BELIEVED.may_touch(beside, 16 << 10),
            "in the block's region: a maybe"
        );
        BELIEVED.missed(beside, 16 << 10, BELIEVED.generation());
        assert!(
            !BELIEVED.may_touch(beside, 16 << 10),
            "looked up and found none: skipped"
        );
        assert!(
            BELIEVED.may_touch(a, 4),
            "the block itself is never skipped"
        );
        assert!(map.get_mut(&(a + 8)).is_none());
        assert!(
            !BELIEVED.may_touch(beside, 16 << 10),
            "an entry asked for where there is none: nothing changed, still skipped"
        );
        let _ = map.get_mut(&a);
        assert!(
            BELIEVED.may_touch(beside, 16 << 10),
            "an entry changed: looked up again"
        );
        BELIEVED.missed(beside, 16 << 10, BELIEVED.generation());
        map.insert(a + 4096, 4);
        assert!(
            BELIEVED.may_touch(beside, 16 << 10),
            "an entry came: looked up again"
        );
    }
}
