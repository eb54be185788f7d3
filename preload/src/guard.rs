//! The interposer's ground floor, which every other file of it may use and which uses none of
//! them: the guard that sends a thread's own allocations straight to libc while it is inside
//! the interposer ([`Busy`]), the barrier that keeps a panic of ours from unwinding into C
//! ([`judged`]), and the interval lookup the block tables share ([`overlapping`]).

use std::{
    cell::Cell,
    collections::BTreeMap,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::atomic::{AtomicU64, Ordering},
    time::Instant,
};

thread_local! {
    /// This thread is inside a program's copy hotpin guards (`copies`): the driver copy a
    /// runtime copy makes beneath it is not guarded twice, and a CUDA call made then (a
    /// question among them) is CUDA's own.
    static IN_COPY: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is inside a program's copy hotpin guards.
pub(crate) fn in_copy() -> bool {
    IN_COPY.get()
}

/// Marks this thread as inside a guarded copy (`on`) or not; returns what it was.
pub(crate) fn mark_in_copy(on: bool) -> bool {
    IN_COPY.replace(on)
}

thread_local! {
    /// When this thread entered the interposer, None while it is outside: whatever it
    /// allocates meanwhile goes straight to libc.
    static BUSY_SINCE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The time the program's threads spent inside the interposer's own work (everything done
/// under [`Busy`]: lookups, counting, its locks, the CUDA calls hotpin adds, reading Python
/// lines), in ns, and how many times they entered it: the report's `busy_ns` and
/// `busy_entries`, what hotpin costs a program where it pins nothing.
pub static BUSY_NS: AtomicU64 = AtomicU64::new(0);
pub static BUSY_ENTRIES: AtomicU64 = AtomicU64::new(0);

/// Marks this thread busy while it lives; None if it already was (a nested call).
pub struct Busy(());

impl Busy {
    pub fn enter() -> Option<Self> {
        BUSY_SINCE.with(|since| {
            if since.get().is_some() {
                None
            } else {
                // The vDSO's monotonic clock: no system call.
                since.set(Some(Instant::now()));
                Some(Busy(()))
            }
        })
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(since) = BUSY_SINCE.with(|since| since.take()) {
            BUSY_NS.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
            BUSY_ENTRIES.fetch_add(1, Ordering::Relaxed);
        }
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
