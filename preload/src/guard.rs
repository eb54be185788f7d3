//! The interposer's ground floor, which every other file of it may use and which uses none of
//! them: the guard that sends a thread's own allocations straight to libc while it is inside
//! the interposer ([`Busy`]), the barrier that keeps a panic of ours from unwinding into C
//! ([`judged`]), and the interval lookup the block tables share ([`overlapping`]).

use std::{
    cell::Cell,
    collections::BTreeMap,
    panic::{AssertUnwindSafe, catch_unwind},
};

thread_local! {
    /// This thread is inside the interposer: whatever it allocates goes straight to libc.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread busy while it lives; None if it already was (a nested call).
pub struct Busy(());

impl Busy {
    pub fn enter() -> Option<Self> {
        BUSY.with(|busy| {
            if busy.get() {
                None
            } else {
                busy.set(true);
                Some(Busy(()))
            }
        })
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        BUSY.with(|busy| busy.set(false));
    }
}

/// Runs the judged part of a call; a panic in it (a bug of ours) is reported once and the
/// call is served as libc or CUDA would, never unwound into C.
pub(crate) fn judged(work: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(work)).is_err() {
        eprintln!("hotpin: internal error; this call was served without hotpin");
    }
}

/// The block of `map` (start -> size; blocks do not overlap) that overlaps `[start, start +
/// len)`, if any: only the last block starting before the range's end can.
pub(crate) fn overlapping<V>(
    map: &BTreeMap<usize, V>,
    size: impl Fn(&V) -> usize,
    start: usize,
    len: usize,
) -> Option<(usize, &V)> {
    let end = start.saturating_add(len.max(1));
    let (&block, value) = map.range(..end).next_back()?;
    (block.saturating_add(size(value)) > start).then_some((block, value))
}
