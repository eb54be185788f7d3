//! The interposer's ground floor, which every other file of it may use and which uses none of
//! them: the guard that sends a thread's own allocations straight to libc while it is inside
//! the interposer ([`Busy`]), the barrier that keeps a panic of ours from unwinding into C
//! ([`judged`]), and the interval lookup the block tables share ([`overlapping`]).

use std::{
    cell::Cell,
    collections::BTreeMap,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::atomic::{AtomicU64, Ordering},
};

thread_local! {
    /// When this thread entered the interposer (monotonic ns), 0 while it is outside: whatever
    /// it allocates meanwhile goes straight to libc.
    static BUSY_SINCE: Cell<u64> = const { Cell::new(0) };
}

/// The time the program's threads spent inside the interposer's own work (everything done
/// under [`Busy`]: lookups, counting, its locks, the CUDA calls hotpin adds, reading Python
/// lines), in ns, and how many times they entered it: the report's `busy_ns` and
/// `busy_entries`, what hotpin costs a program where it pins nothing.
pub static BUSY_NS: AtomicU64 = AtomicU64::new(0);
pub static BUSY_ENTRIES: AtomicU64 = AtomicU64::new(0);

/// The monotonic clock in ns (the vDSO's: no system call); never 0.
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
        .max(1)
}

/// Marks this thread busy while it lives; None if it already was (a nested call).
pub struct Busy(());

impl Busy {
    pub fn enter() -> Option<Self> {
        BUSY_SINCE.with(|since| {
            if since.get() != 0 {
                None
            } else {
                since.set(now_ns());
                Some(Busy(()))
            }
        })
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let since = BUSY_SINCE.with(|since| since.replace(0));
        BUSY_NS.fetch_add(now_ns().saturating_sub(since), Ordering::Relaxed);
        BUSY_ENTRIES.fetch_add(1, Ordering::Relaxed);
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
