//! Large registrations made in chunks, and the program's copies cut at the chunks' edges.
//!
//! While CUDA registers host memory it holds a lock that every other CUDA call of the process
//! waits for: on the H100, a 16 GiB `cuMemHostRegister` on one thread (0.84 s) held another
//! thread's 64 KiB copies throughout, and its unregistration (0.34 s) too (docs/bench/history.md,
//! "What a large registration costs the program's other threads"). So auto mode's pinner
//! thread registers a block larger than [`CHUNK`] as consecutive registrations of at most
//! that many bytes, on page boundaries, pausing between them so that a waiting thread gets
//! in; and the block is unregistered the same way.
//!
//! CUDA refuses a copy whose host range crosses a registration's edge, so each chunk edge is
//! an edge a copy must not cross. The edges of a block are fixed (its grid) before its first
//! chunk is registered, so a copy cut on the grid is valid whatever has been registered so
//! far:
//! - a copy of one contiguous range (a 1D copy, asynchronous or not) is made as one copy per
//!   chunk it touches, in order, on the same stream, so that the program sees one copy;
//! - any other copy that would cross an edge (2D, 3D, batches) lets the block go first, and
//!   the block is registered in one call when it is pinned again (`state::unpin_straddled`).
//!
//! A copy that looked for edges before a grid was published must not be made after the
//! block's first chunk is registered: every guarded copy is counted in the current
//! generation while it is looked up and queued ([`enter`]), and the pinner thread waits for
//! the copies of the generation before its own to be queued ([`grace`]) before it
//! registers. If that takes longer than [`GRACE_LIMIT`] it registers nothing this time, so
//! that no copy that waits on the program's other threads can hold it forever.
//!
//! A grid stays published while any of its chunks may be registered: from before the first
//! is registered until after the last is unregistered ([`GridState`]). A copy that cannot be
//! cut waits while a grid it crosses is being registered or unregistered
//! (`state::unpin_straddled`), and a new grid waits until no grid overlaps it.

use crate::guard::Busy;
use std::{
    collections::BTreeMap,
    ffi::{c_int, c_void},
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

/// The most bytes registered (or unregistered) in one call by the pinner thread
/// (`HOTPIN_REGISTER_CHUNK`, at most 1 GiB; default 32 MiB: for a 16 GiB block on the H100 the
/// program's calls waited at most 5.4 ms in 32 MiB chunks, against 9.3 ms, once 22 ms, in
/// 64 MiB chunks).
pub static CHUNK: AtomicUsize = AtomicUsize::new(32 << 20);
/// The largest chunk the setting may ask for.
pub const LARGEST_CHUNK: usize = 1 << 30;
/// Chunk edges fall on pages of this size (or of a multiple of it), so no page is in two
/// registrations.
const PAGE: usize = 4096;
/// How long the pinner thread pauses after each chunk: a thread waiting for CUDA's lock
/// takes it meanwhile (without a pause the pinner took it again first: 1 GiB chunks held
/// a copy for 0.3-0.4 s).
const PAUSE: Duration = Duration::from_micros(100);

/// Where a registration in chunks stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GridState {
    /// Its chunks are being registered (some may be already).
    Registering,
    /// Every chunk is registered.
    Registered,
    /// Its chunks are being unregistered (some may be still registered).
    Unregistering,
}

/// Registrations made in chunks: start -> (length, state). Their grids follow from the start,
/// the length and the chunk size, which is set once at start.
static GRIDS: Mutex<BTreeMap<usize, (usize, GridState)>> = Mutex::new(BTreeMap::new());
/// Whether any grid was ever published (copies look for edges only then).
static ANY: AtomicBool = AtomicBool::new(false);
/// The current generation, and the guarded copies being looked up or queued in each of the
/// last two. Both sides read what the other wrote (a store-buffer pattern): sequentially
/// consistent, so that neither can miss the other.
static GENERATION: AtomicUsize = AtomicUsize::new(0);
static IN_CALL: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
/// One grace period at a time; whether the last one gave up on copies still counted.
static GRACE: Mutex<()> = Mutex::new(());
static LAGGING: AtomicBool = AtomicBool::new(false);
/// The longest the pinner thread waits for earlier copies to be queued before it gives a
/// registration up (the block stays pageable, to be weighed again later).
pub const GRACE_LIMIT: Duration = Duration::from_secs(2);

/// The grids, locked; the thread counts as busy meanwhile.
struct Grids {
    map: MutexGuard<'static, BTreeMap<usize, (usize, GridState)>>,
    /// Dropped after the lock: an allocation made under it (a Vec of cuts growing) goes
    /// straight to libc. Judged, a `realloc` would take the interposer's state lock, which
    /// another thread may hold while it waits for this one (`state::unpin_straddled`).
    _busy: Option<Busy>,
}

impl std::ops::Deref for Grids {
    type Target = BTreeMap<usize, (usize, GridState)>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl std::ops::DerefMut for Grids {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.map
    }
}

fn grids() -> Grids {
    let busy = Busy::enter();
    Grids {
        map: GRIDS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        _busy: busy,
    }
}

/// The chunk size, set from `HOTPIN_REGISTER_CHUNK` (rounded down to pages, between one page
/// and [`LARGEST_CHUNK`]).
pub fn set_chunk(bytes: usize) {
    CHUNK.store(
        (bytes / PAGE * PAGE).clamp(PAGE, LARGEST_CHUNK),
        Ordering::Relaxed,
    );
}

/// The inner edges of a registration of `[start, start + len)` in chunks: page-aligned, at
/// most a chunk apart.
fn edges(start: usize, len: usize) -> impl Iterator<Item = usize> {
    let chunk = CHUNK.load(Ordering::Relaxed);
    let page = start / PAGE * PAGE;
    let end = start.saturating_add(len);
    (1..)
        .map(move |k: usize| page.saturating_add(k.saturating_mul(chunk)))
        .take_while(move |&edge| edge < end)
}

/// The chunks of a registration of `[start, start + len)`: (start, length) each.
fn pieces_of(start: usize, len: usize) -> Vec<(usize, usize)> {
    let end = start.saturating_add(len);
    let mut at = start;
    let mut out = Vec::new();
    for edge in edges(start, len).chain([end]) {
        out.push((at, edge - at));
        at = edge;
    }
    out
}

/// Whether any registration was ever made in chunks.
pub fn any() -> bool {
    ANY.load(Ordering::SeqCst)
}

/// Whether the registration at `start` was made in chunks.
pub fn chunked_at(start: usize) -> bool {
    ANY.load(Ordering::SeqCst) && grids().contains_key(&start)
}

/// Whether a registration of `len` bytes made by the pinner thread is made in chunks.
pub fn chunked(len: usize) -> bool {
    len > CHUNK.load(Ordering::Relaxed)
}

/// A guarded copy being looked up or made, counted in its generation until dropped.
pub struct InCall(usize);

impl Drop for InCall {
    fn drop(&mut self) {
        if let Some(count) = IN_CALL.get(self.0) {
            count.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Counts a guarded copy in the current generation, before it looks for edges; dropped once
/// the copy is queued.
pub fn enter() -> InCall {
    loop {
        let generation = GENERATION.load(Ordering::SeqCst);
        let slot = generation % 2;
        if let Some(count) = IN_CALL.get(slot) {
            count.fetch_add(1, Ordering::SeqCst);
        }
        if GENERATION.load(Ordering::SeqCst) == generation {
            return InCall(slot);
        }
        // The generation turned meanwhile: counted in the new one instead.
        drop(InCall(slot));
    }
}

/// Waits until every copy counted before now has been queued (on a thread that holds no
/// copy's count); false if that took longer than [`GRACE_LIMIT`]. Made before a registration
/// that copies may not have looked for: a grid's chunks, or a part of a block. After one that
/// gave up, the next waits for the copies it gave up on too.
pub fn grace() -> bool {
    let _one = GRACE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let generation = GENERATION.fetch_add(1, Ordering::SeqCst);
    let mut slots = vec![generation % 2];
    if LAGGING.load(Ordering::SeqCst) {
        slots.push((generation + 1) % 2);
    }
    let began = std::time::Instant::now();
    for slot in slots {
        let Some(count) = IN_CALL.get(slot) else {
            continue;
        };
        while count.load(Ordering::SeqCst) > 0 {
            if began.elapsed() > GRACE_LIMIT {
                LAGGING.store(true, Ordering::SeqCst);
                return false;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    LAGGING.store(false, Ordering::SeqCst);
    true
}

/// The inner edges of the registrations in chunks that `[start, end)` crosses: (the
/// registration's start, its state, the edge) each, by registration in address order.
fn crossed_edges(
    grids: &BTreeMap<usize, (usize, GridState)>,
    start: usize,
    end: usize,
) -> impl Iterator<Item = (usize, GridState, usize)> + '_ {
    grids
        .range(..end)
        .filter(move |&(&at, &(size, _))| at.saturating_add(size) > start)
        .flat_map(move |(&at, &(size, state))| {
            edges(at, size)
                .filter(move |&edge| edge > start && edge < end)
                .map(move |edge| (at, state, edge))
        })
}

/// Where a copy of `ranges` (each the copy's bytes in order, as a 1D copy's source and
/// destination are) must be cut: offsets into the copy, ascending, strictly inside it, at
/// the chunk edges of the registrations it touches. Empty for nearly every copy.
pub fn cuts(ranges: &[(usize, usize, bool)]) -> Vec<usize> {
    if !ANY.load(Ordering::SeqCst) {
        return Vec::new();
    }
    let grids = grids();
    let mut cuts: Vec<usize> = ranges
        .iter()
        .flat_map(|&(start, len, _)| {
            crossed_edges(&grids, start, start.saturating_add(len)).map(move |(_, _, e)| e - start)
        })
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// The registrations in chunks whose inner edges `[start, end)` crosses: (start, state) each.
pub fn crossed(start: usize, end: usize) -> Vec<(usize, GridState)> {
    if !ANY.load(Ordering::SeqCst) {
        return Vec::new();
    }
    let mut crossed: Vec<_> = crossed_edges(&grids(), start, end)
        .map(|(at, state, _)| (at, state))
        .collect();
    crossed.dedup_by_key(|grid| grid.0);
    crossed
}

/// Every registration in chunks: (start, state) each.
pub fn all() -> Vec<(usize, GridState)> {
    if !ANY.load(Ordering::SeqCst) {
        return Vec::new();
    }
    grids()
        .iter()
        .map(|(&at, &(_, state))| (at, state))
        .collect()
}

/// Makes a copy of `len` bytes as one copy per piece between `cuts` (`copy(offset, length)`),
/// in order; the first failure is the answer, and nothing after it is made. A failure after
/// some pieces were queued calls `settle` (which waits for them), so that none is left in
/// flight behind an error.
///
/// Each piece of a cut copy takes its own turn with the pinner thread's calls
/// (`turns::copying`; an uncut copy took one for the whole). With turns on and `settle_each`
/// (a copy that is waited for before it returns anyway), each piece is waited for within its
/// turn, so that none is still in flight when the pinner calls CUDA between two pieces: on
/// the H100 a registration call made while a piece of a registered chunk was in flight took
/// up to 30-50 ms. Not without turns: waiting for each piece keeps the copy counted in its
/// generation through the transfer, which the pinner's `grace` then waits for.
#[inline(always)]
pub fn in_pieces(
    len: usize,
    cuts: &[usize],
    settle_each: bool,
    copy: impl Fn(usize, usize) -> c_int,
    settle: impl Fn(),
) -> c_int {
    if cuts.is_empty() {
        // Uncut (nearly every copy): the call as it was made, inlined in the wrapper.
        return copy(0, len);
    }
    cut_up(len, cuts, settle_each, copy, settle)
}

/// [`in_pieces`] of a copy with cuts.
#[inline(never)]
fn cut_up(
    len: usize,
    cuts: &[usize],
    settle_each: bool,
    copy: impl Fn(usize, usize) -> c_int,
    settle: impl Fn(),
) -> c_int {
    let mut at = 0;
    for &cut in cuts.iter().chain([&len]) {
        if cut > at {
            let rc = {
                let _copying = crate::turns::copying(cut - at);
                let rc = copy(at, cut - at);
                if rc == 0 && settle_each && crate::turns::on() {
                    settle();
                }
                rc
            };
            if rc != 0 {
                if at > 0 {
                    settle();
                }
                return rc;
            }
            at = cut;
        }
    }
    0
}

/// What registering a block in chunks did: CUDA's status (0: every chunk is registered; else
/// none is), its longest single call, and whether it was given up before any call (earlier
/// copies took longer than [`GRACE_LIMIT`] to be queued).
pub struct Registered {
    pub rc: c_int,
    pub longest_call_ns: u64,
    pub gave_up: bool,
}

/// Registers `[start, start + len)` in chunks with `register` (on the pinner thread): once
/// no grid overlaps it (one being unregistered elsewhere), its grid is published and the
/// copies that may not have seen it are waited for. A chunk CUDA refuses undoes the chunks
/// before it.
pub fn register(
    start: usize,
    len: usize,
    register: impl Fn(*mut c_void, usize) -> Option<c_int>,
    unregister: impl Fn(*mut c_void) -> Option<c_int>,
) -> Registered {
    loop {
        let mut grids = grids();
        if crate::guard::overlapping(&grids, |grid| grid.0, start, len).is_none() {
            grids.insert(start, (len, GridState::Registering));
            break;
        }
        drop(grids);
        std::thread::sleep(PAUSE);
    }
    ANY.store(true, Ordering::SeqCst);
    if !grace() {
        grids().remove(&start);
        return Registered {
            rc: 0,
            longest_call_ns: 0,
            gave_up: true,
        };
    }
    let mut done = Vec::new();
    let mut longest = 0;
    let mut rc = 0;
    for (at, size) in pieces_of(start, len) {
        populate(at, size);
        let began = std::time::Instant::now();
        rc = crate::turns::in_turn(|| register(at as *mut c_void, size))
            .unwrap_or(crate::cuda::ERROR_NO_RUNTIME);
        longest = longest.max(began.elapsed().as_nanos() as u64);
        if rc != 0 {
            break;
        }
        done.push(at);
        std::thread::sleep(PAUSE);
    }
    if rc == 0 {
        set_state(start, GridState::Registered);
    } else {
        set_state(start, GridState::Unregistering);
        for at in done {
            crate::turns::in_turn(|| unregister(at as *mut c_void));
            std::thread::sleep(PAUSE);
        }
        grids().remove(&start);
    }
    Registered {
        rc,
        longest_call_ns: longest,
        gave_up: false,
    }
}

/// Faults in the pages of `[start, start + len)` that are not yet there, writable, without
/// changing a byte (`MADV_POPULATE_WRITE`, Linux 5.14; elsewhere nothing is done), so that
/// registering them does not fault them in itself: CUDA holds its lock meanwhile, and on the
/// H100 a 32 MiB registration of memory never written (a `torch.empty` tensor copied from)
/// took 18-33 ms instead of 2-5 ms, every other CUDA call of the program waiting with it.
/// Called on the pinner thread only: on the program's own thread it cost more than it saved
/// (docs/bench/history.md).
pub fn populate(start: usize, len: usize) {
    let page = start / PAGE * PAGE;
    let end = start.saturating_add(len);
    // SAFETY: advice on pages of a block the program allocated and has not freed (a
    // registration is never made of any other); MADV_POPULATE_WRITE changes no content, and
    // an error (an old kernel, a page that cannot be written) leaves everything as it was.
    unsafe {
        libc::madvise(page as *mut c_void, end - page, libc::MADV_POPULATE_WRITE);
    }
}

fn set_state(start: usize, state: GridState) {
    if let Some(grid) = grids().get_mut(&start) {
        grid.1 = state;
    }
}

/// Unregisters the registration at `start` with `unregister`: chunk by chunk if it was made
/// in chunks, else in one call. `Some(0)` only if every call succeeded. The grid stays
/// published until every chunk is unregistered: a copy cut on it is valid whatever is still
/// registered, and one that cannot be cut waits.
pub fn unregister(
    start: usize,
    unregister: impl Fn(*mut c_void) -> Option<c_int>,
) -> Option<c_int> {
    let len = {
        let mut grids = grids();
        let Some(grid) = grids.get_mut(&start) else {
            drop(grids);
            return crate::turns::in_turn(|| unregister(start as *mut c_void));
        };
        grid.1 = GridState::Unregistering;
        grid.0
    };
    let mut answer = Some(0);
    for (at, _) in pieces_of(start, len) {
        let rc = crate::turns::in_turn(|| unregister(at as *mut c_void));
        if rc != Some(0) {
            answer = rc;
        }
        std::thread::sleep(PAUSE);
    }
    grids().remove(&start);
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grid_falls_on_pages_at_most_a_chunk_apart() {
        set_chunk(1 << 20);
        let start = 0x1000_0010;
        let len = (3 << 20) + 100;
        let pieces = pieces_of(start, len);
        assert_eq!(pieces.len(), 4);
        assert_eq!(pieces[0].0, start);
        assert_eq!(pieces.iter().map(|p| p.1).sum::<usize>(), len);
        for (at, size) in &pieces[1..] {
            assert_eq!(at % PAGE, 0);
            assert!(*size <= 1 << 20);
        }
        assert!(pieces[0].1 <= 1 << 20);
    }

    #[test]
    fn a_copy_is_made_in_order_in_pieces_between_its_cuts() {
        let made = std::cell::RefCell::new(Vec::new());
        let rc = in_pieces(
            100,
            &[10, 60],
            false,
            |at, len| {
                made.borrow_mut().push((at, len));
                0
            },
            || panic!("nothing failed"),
        );
        assert_eq!(rc, 0);
        assert_eq!(*made.borrow(), vec![(0, 10), (10, 50), (60, 40)]);
        made.borrow_mut().clear();
        let settled = std::cell::Cell::new(false);
        assert_eq!(
            in_pieces(
                100,
                &[10, 60],
                false,
                |at, len| {
                    made.borrow_mut().push((at, len));
                    if at == 10 { 1 } else { 0 }
                },
                || settled.set(true),
            ),
            1
        );
        assert_eq!(*made.borrow(), vec![(0, 10), (10, 50)]);
        assert!(settled.get(), "the first piece was waited for");
    }

    #[test]
    fn each_piece_of_a_copy_to_be_waited_for_is_waited_for_as_it_goes() {
        crate::turns::ON.store(true, Ordering::SeqCst);
        let events = std::cell::RefCell::new(Vec::new());
        let rc = in_pieces(
            100,
            &[10, 60],
            true,
            |at, _| {
                events.borrow_mut().push(at);
                0
            },
            || events.borrow_mut().push(usize::MAX),
        );
        assert_eq!(rc, 0);
        let settled = usize::MAX;
        assert_eq!(*events.borrow(), vec![0, settled, 10, settled, 60, settled]);
        // An uncut copy is left to its caller.
        events.borrow_mut().clear();
        assert_eq!(
            in_pieces(
                100,
                &[],
                true,
                |at, _| {
                    events.borrow_mut().push(at);
                    0
                },
                || events.borrow_mut().push(usize::MAX),
            ),
            0
        );
        assert_eq!(*events.borrow(), vec![0]);
    }
}
