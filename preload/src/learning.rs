//! Auto mode learning from the program's copies: each copy counted against the block it
//! touched, what that decides carried out (`pinner`), the node's arbiter answered (a
//! reclaim's blocks let go, each block's score), and registrations a copy would cross the
//! edge of let go first.

use std::sync::atomic::Ordering;

use crate::{
    chunks,
    online::{Decisions, Learner, Pin},
    pinner::{
        Job, UNPINS_QUEUED, hand_to_pinner, pin_block, pinning_pays, release_blocks, unpin_block,
    },
    regions::TRACKED,
    state::{OFF_THREAD_ABOVE, lock},
};

/// Auto mode: the copy of `ranges` (address, length, whether it was read) completed: its
/// heat is counted, and the blocks it makes worth pinning are pinned (displacing less
/// dense ones under the budget). A range that touched no tracked block is remembered as
/// such on this thread (`Regions::missed`), so that its next copies skip the lock while no
/// block is tracked or let go.
pub fn copied(ranges: &[(usize, usize, bool)], measured: Option<(usize, f64)>) {
    // Read before the lookup: a block tracked after it makes the miss stale.
    let generation = TRACKED.generation();
    let decisions = learn_from(ranges, |learner, start, len, reads, decisions| {
        if !learner.copied(start, len, reads, measured, decisions) {
            TRACKED.missed(start, len, generation);
        }
    });
    carry_out(decisions, false);
}

/// Auto mode, before a copy of `ranges` is made: a block it copies whole for the first time
/// is pinned first, on this thread, where its group is trusted (`Learner::before_first_copy`).
/// Returns the block whose first copy this is worth timing, if any (one whose group's trust
/// its measured time may earn; the first such of the copy's ranges).
pub fn before_copy(ranges: &[(usize, usize, bool)]) -> Option<usize> {
    let mut timed = None;
    let decisions = learn_from(ranges, |learner, start, len, reads, decisions| {
        let block = learner.before_first_copy(start, len, reads, decisions);
        timed = timed.or(block);
    });
    carry_out(decisions, true);
    timed
}

/// What the learner's `look` at each of `ranges` (address, length, read by the copy)
/// decided, under the lock.
fn learn_from(
    ranges: &[(usize, usize, bool)],
    mut look: impl FnMut(&mut Learner, usize, usize, bool, &mut Decisions),
) -> Decisions {
    let mut decisions = Decisions::default();
    let mut guard = lock();
    if let Some(learner) = guard.as_mut().and_then(|s| s.learner.as_mut()) {
        for &(start, len, reads) in ranges {
            if start != 0 {
                look(learner, start, len, reads, &mut decisions);
            }
        }
    }
    decisions
}

/// Carries out what the copies decided: unpins, then pins (`now`: on this thread, before
/// the copy that decided them is made; else where their size says).
fn carry_out(decisions: Decisions, now: bool) {
    if decisions.pin.is_empty() && decisions.unpin.is_empty() {
        return;
    }
    let pays = pinning_pays();
    // Letting a registration in chunks go takes about as long as making it (0.34 s for 16 GiB
    // on the H100): the pinner thread does it for a whole block hidden from the program, whose
    // copies meanwhile are waited for and cut at its chunks' edges. Not for a part (its edges
    // are no longer looked at once it is let go), nor for a block the program asked pinned
    // (its copies in flight are waited for in the program's context, on its thread). While
    // such an unregistration is queued, every pin follows it to the pinner thread, so that
    // what is registered never holds more than the budget.
    let mut to_pinner = UNPINS_QUEUED.load(Ordering::Acquire) > 0;
    for block in decisions.unpin {
        if !block.part && !block.asked_pinned && chunks::chunked_at(block.start) {
            UNPINS_QUEUED.fetch_add(1, Ordering::AcqRel);
            if hand_to_pinner(Job::Unpin(block)) {
                to_pinner = true;
                continue;
            }
            UNPINS_QUEUED.fetch_sub(1, Ordering::AcqRel);
        }
        unpin_block(block, true);
    }
    for block in decisions.pin {
        if pays && now && to_pinner {
            // It would be registered before the unregistration queued ahead of it: not now.
            if let Some(learner) = lock().as_mut().and_then(|s| s.learner.as_mut()) {
                learner.put_off(&block);
            }
        } else if pays {
            let off_thread =
                !now && (to_pinner || block.len > OFF_THREAD_ABOVE.load(Ordering::Relaxed));
            if !(off_thread && hand_to_pinner(Job::Pin(block))) {
                pin_block(block, true);
            }
        } else if let Some(learner) = lock().as_mut().and_then(|s| s.learner.as_mut()) {
            learner.registered(&block, false);
        }
    }
}

/// The node's arbiter reclaims the blocks registered at `starts`: each pinned block of auto
/// mode among them is let go as the budget lets blocks go (copies in flight waited for), and
/// each freed block kept in the cache is unregistered and freed. Returns how many were.
pub fn give_back(starts: &[u64]) -> usize {
    let mut blocks = Vec::new();
    let mut cached = Vec::new();
    {
        let mut guard = lock();
        let Some(state) = guard.as_mut() else {
            return 0;
        };
        for &start in starts {
            let start = start as usize;
            if let Some(block) = state.learner.as_mut().and_then(|l| l.give_back(start)) {
                blocks.push(block);
            } else if let Some(size) = state.cache.take_at(start) {
                state.forget_registered(start);
                if let Some(learner) = state.learner.as_mut() {
                    learner.budget.release(size as u64);
                }
                cached.push((start, size));
            }
        }
        state.counters.node_reclaims += (blocks.len() + cached.len()) as u64;
    }
    let given = blocks.len() + cached.len();
    // On the thread that reads the node arbiter's replies, not a program thread.
    for block in blocks {
        unpin_block(block, false);
    }
    release_blocks(cached);
    given
}

/// The current density of auto mode's pinned blocks registered at `starts`.
pub fn lease_scores(starts: &[u64]) -> Vec<(u64, f64)> {
    lock()
        .as_ref()
        .and_then(|state| state.learner.as_ref())
        .map(|learner| learner.scores(starts))
        .unwrap_or_default()
}

/// Auto mode: lets go every registration whose edge a copy of `ranges` would cross (CUDA
/// refuses such a copy), before the copy is made: a part of a block whose edge it crosses;
/// with `chunk_edges` (a copy that cannot be cut), a registration in chunks whose inner edge
/// it crosses; with `all` (a copy whose host memory is not known), every part and every
/// registration in chunks. What is let go is weighed again with that copy counted in; a
/// block whose chunks were crossed is registered in one call next time. Returns whether
/// such a registration is being made or unmade by another thread: the caller waits and asks
/// again.
pub fn unpin_straddled(ranges: &[(usize, usize, bool)], all: bool, chunk_edges: bool) -> bool {
    let mut let_go = Vec::new();
    let mut waiting = false;
    {
        let mut guard = lock();
        let Some(state) = guard.as_mut() else {
            return false;
        };
        let cache = &state.cache;
        let Some(learner) = state.learner.as_mut() else {
            return false;
        };
        let mut crossed = parts_crossed(learner, ranges, all);
        for (at, grid, start, len) in grids_crossed(ranges, all, chunk_edges) {
            match (grid, learner.registered_at(at)) {
                (chunks::GridState::Registered, Some((base, Pin::Pinned))) => {
                    crossed.push((base, start, len, true));
                }
                // A freed block kept registered: no copy may touch it.
                (chunks::GridState::Registered, None) if cache.holds(at) => {}
                // Being registered or unregistered (or about to be) by another thread.
                _ => waiting = true,
            }
        }
        for (base, start, len, chunks) in crossed {
            match learner.blocks.get(&base).map(|b| b.pin) {
                Some(Pin::Registering | Pin::Unpinning) => waiting = true,
                _ => let_go.extend(learner.let_crossed_go(base, start, len, chunks)),
            }
        }
    }
    if !let_go.is_empty()
        && let Some(state) = lock().as_mut()
    {
        for block in &let_go {
            if block.part {
                state.counters.parts_let_go += 1;
            } else {
                state.counters.chunked_let_go += 1;
            }
        }
    }
    // The copy waits: CUDA would refuse it across a registration's edge.
    for registration in let_go {
        unpin_block(registration, true);
    }
    waiting
}

/// A copy's crossings of parts registered on their own: (block, start of the copy, its
/// length, false). With `all`, every part, its whole length.
fn parts_crossed(
    learner: &Learner,
    ranges: &[(usize, usize, bool)],
    all: bool,
) -> Vec<(usize, usize, usize, bool)> {
    let mut crossed = Vec::new();
    let parts = learner.blocks.iter().filter(|(_, b)| b.part.is_some());
    if all {
        crossed.extend(parts.map(|(&base, b)| (base, base, b.size, false)));
    }
    for &(start, len, _) in ranges.iter().filter(|r| r.0 != 0 && !all) {
        let end = start.saturating_add(len.max(1));
        let Some((&base, block)) = learner.blocks.range(..end).next_back() else {
            continue;
        };
        let Some((at, size)) = block.part.filter(|_| base + block.size > start) else {
            continue;
        };
        let inside = start >= at && end <= at + size;
        let apart = end <= at || start >= at + size;
        if !inside && !apart {
            crossed.push((base, start, len, false));
        }
    }
    crossed
}

/// Registrations in chunks, found by address whatever their block's state, with the copy's
/// range that crosses them (none for a copy whose host memory is not known: `all`).
fn grids_crossed(
    ranges: &[(usize, usize, bool)],
    all: bool,
    chunk_edges: bool,
) -> Vec<(usize, chunks::GridState, usize, usize)> {
    if all {
        chunks::all()
            .into_iter()
            .map(|(at, grid)| (at, grid, at, 0))
            .collect()
    } else if chunk_edges {
        ranges
            .iter()
            .filter(|r| r.0 != 0)
            .flat_map(|&(start, len, _)| {
                chunks::crossed(start, start.saturating_add(len))
                    .into_iter()
                    .map(move |(at, grid)| (at, grid, start, len))
            })
            .collect()
    } else {
        Vec::new()
    }
}
