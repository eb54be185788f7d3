//! The program's asynchronous copies, in the runtime and in the driver: each one whose host
//! memory hotpin registered behind the program's back keeps the promise CUDA makes for
//! pageable memory.
//!
//! CUDA's rules ("API synchronization behavior"): an asynchronous copy *from* pageable memory
//! returns once the source is staged, so the program may overwrite the source at once; one
//! *into* pageable memory returns only when the data is there, so the program may read it at
//! once; copies of pinned memory are fully asynchronous. So a copy touching a block hotpin
//! promoted is queued as the program asked (at pinned speed), then waited for before it
//! returns. During stream capture it gets CUDA's own answer for pageable memory, asked once:
//! refused (before CUDA 13, and on the stand-in), or captured (CUDA 13 captures copies of
//! pageable memory; the graph then holds this one as it is). Once every such copy has
//! completed when it returns, no
//! DMA can still read or write a promoted block when the program frees it, reallocates it, or
//! hotpin's cache hands it to another allocation.
//!
//! A copy of memory the program believes pinned that hotpin left pageable (a demoted request,
//! a skipped registration) already gets stronger semantics than it asked for, except in
//! stream capture, which refuses pageable memory: such a block is registered first.
//!
//! A copy touching no block hotpin changed costs an atomic load, or while blocks are
//! promoted, one lookup under a lock (docs/benchmarks.md measures it); in auto mode it is
//! counted under the lock only where it may touch a block the learner tracks (`regions`).
//! Synchronous copies are synchronous to the host for pinned memory as for pageable: in auto
//! mode they are only counted, and cut at chunk edges or made to let go what they cross
//! (`chunks`).

use std::{
    ffi::{CStr, c_int, c_void},
    sync::atomic::Ordering,
};

use crate::{
    allocations,
    believed::BELIEVED,
    chunks,
    copy_ranges::{
        Dev, Memcpy2D, Memcpy3D, Memcpy3DParms, READ, Range, WRITE, batch, destination, pitched,
        source,
    },
    counters::{CAPTURES_REFUSED, COPIES_CUT, COPIES_WAITED},
    cuda::{self, Layer, Real, STREAM_PER_THREAD, Stream},
    guard::{self, Busy, judged},
    learning, questions,
    regions::{Regions, TRACKED},
    state::{self, ACTIVE, BELIEVED_PINNED, FLOOR, HIDDEN, Touched},
    turns,
};

/// Whether a block hotpin changed may be touched by a copy of `ranges`: any block registered
/// behind the program's back, or one believed pinned and left pageable in a region of theirs
/// (`believed`: nothing to look up otherwise).
fn changed(ranges: &[Range]) -> bool {
    HIDDEN.load(Ordering::Acquire) > 0
        || (BELIEVED_PINNED.load(Ordering::Acquire) && touches(&BELIEVED, ranges))
}

/// Whether `ranges` (their host sides: a range at 0 is none) may touch a block `filter` counts.
fn touches(filter: &Regions, ranges: &[Range]) -> bool {
    ranges
        .iter()
        .any(|&(start, len, _)| start != 0 && filter.may_touch(start, len))
}

/// Makes the program's copy `call`, marking this thread as inside it, so that the driver
/// copy a runtime copy makes beneath it (through our wrapper) passes straight through: no
/// lookup, no CUDA call of ours from inside CUDA.
fn inside(call: impl FnOnce() -> c_int) -> c_int {
    let outer = guard::mark_in_copy(true);
    let rc = call();
    guard::mark_in_copy(outer);
    rc
}

/// Runs the program's copy `call`, queued on `stream`, touching `ranges`, with the semantics
/// the program was promised for that memory; in auto mode, then counts it (which may pin
/// what it touched). `call` is given where the copy must be cut (`chunks`): only a copy made
/// `in_pieces` can be cut, and one that cannot lets go the registrations it would cross.
fn guarded(
    ranges: &[Range],
    stream: Stream,
    layer: Layer,
    in_pieces: bool,
    call: impl FnOnce(&[usize], bool) -> c_int,
) -> c_int {
    if state::forked() || guard::in_copy() {
        return call(&[], false);
    }
    if !state::LEARNING.load(Ordering::Acquire) {
        return keeping_promises(ranges, stream, layer, |_| call(&[], false)).0;
    }
    if passes_as_it_is(ranges) {
        let _copying = turns::copying(host_bytes(ranges));
        return inside(|| call(&[], false));
    }
    let timed = trusting(ranges);
    let (in_call, cuts) = cleared(ranges, false, in_pieces.then_some(stream));
    let epoch = state::EPOCH.load(Ordering::Acquire);
    state::COPIES_IN_CALL.fetch_add(1, Ordering::AcqRel);
    // Inside CUDA until it returns (and is waited for, if it must be); a copy cut in pieces
    // takes a turn for each piece instead.
    let copying = cuts.is_empty().then(|| turns::copying(host_bytes(ranges)));
    let mut clock = Clock::new(timed.filter(|_| cuts.is_empty()), stream);
    let (mut rc, settled) = keeping_promises(ranges, stream, layer, |settling| {
        let rc = clock.time(|| call(&cuts, settling));
        // Queued: the pinner thread need not wait for it any longer.
        drop(in_call);
        rc
    });
    let measured = clock.read();
    drop(copying);
    state::COPIES_IN_CALL.fetch_sub(1, Ordering::AcqRel);
    if rc == 0 && !settled && state::EPOCH.load(Ordering::Acquire) != epoch {
        // A block it touches may have become registered, or stopped being, behind the
        // program's back while it was queued: waited for, as a pageable copy would have been.
        let _busy = Busy::enter();
        if !cuda::capturing(stream) {
            COPIES_WAITED.fetch_add(1, Ordering::Relaxed);
            rc = cuda::synchronize(stream);
        }
    }
    if rc == 0 {
        count(ranges, measured);
    }
    rc
}

/// The time a copy takes, where it is the first copy of a block worth timing
/// (`Learner::before_first_copy`) and its stream is not being captured and has nothing
/// queued before it: an asynchronous copy of pageable memory returns once its source is
/// staged (to the device) or its data is there (from it), and a synchronous one once
/// complete, so the call's time is the copy's, not the wait for work queued before it. Only
/// the CUDA call is timed, not hotpin's lookups around it. Not timed: a copy cut in pieces, a
/// copy on a stream being captured (a query there would end the capture), or one on a stream
/// with work queued (the legacy stream's query answers for its own work, not for the other
/// blocking streams a copy on it also waits for).
struct Clock {
    block: Option<usize>,
    seconds: Option<f64>,
}

impl Clock {
    fn new(block: Option<usize>, stream: Stream) -> Self {
        let quiet = || {
            Busy::enter().is_some_and(|_busy| {
                cuda::with_relaxed_capture(|| cuda::not_capturing(stream) && cuda::idle(stream))
            })
        };
        Self {
            block: block.filter(|_| quiet()),
            seconds: None,
        }
    }

    /// Makes the copy `call`, timed where the clock runs.
    fn time(&mut self, call: impl FnOnce() -> c_int) -> c_int {
        if self.block.is_none() {
            return call();
        }
        let began = std::time::Instant::now();
        let rc = call();
        self.seconds = Some(began.elapsed().as_secs_f64());
        rc
    }

    /// The block timed and the seconds its copy took, where it was.
    fn read(&self) -> Option<(usize, f64)> {
        self.block.zip(self.seconds)
    }
}

/// Auto mode, before a copy of `ranges` is made: lets go the registrations it would cross
/// the edge of (a part's; a chunk's too, where it cannot be cut; `all`: every part and every
/// registration in chunks, for a copy whose host memory is not known), waiting for those
/// being made or unmade elsewhere. The copy is then counted in its generation
/// (`chunks::enter`) until the returned guard is dropped; returned with it, where it must be
/// cut. `cut_on`: the copy can be cut, queued on this stream (null: a synchronous copy); one
/// being captured into a graph is not cut (the graph would hold pieces where the program
/// made one copy): what it crosses is let go instead.
fn cleared(ranges: &[Range], all: bool, cut_on: Option<Stream>) -> (chunks::InCall, Vec<usize>) {
    let mut in_pieces = cut_on.is_some();
    loop {
        let in_call = chunks::enter();
        let mut waiting = false;
        if (state::PARTS.load(Ordering::Acquire) || chunks::any())
            && let Some(_busy) = Busy::enter()
        {
            judged(|| waiting = learning::unpin_straddled(ranges, all, !in_pieces));
        }
        if !waiting {
            let cuts = if in_pieces {
                chunks::cuts(ranges)
            } else {
                Vec::new()
            };
            let captured = |stream: Stream| {
                !stream.is_null() && Busy::enter().is_some_and(|_busy| cuda::capturing(stream))
            };
            if !cuts.is_empty() && cut_on.is_some_and(captured) {
                in_pieces = false;
                continue;
            }
            if !cuts.is_empty() {
                COPIES_CUT.fetch_add(1, Ordering::Relaxed);
            }
            return (in_call, cuts);
        }
        // What it crosses is being registered or unregistered by another thread, which may
        // wait for this copy's generation: not counted while it waits.
        drop(in_call);
        std::thread::yield_now();
    }
}

/// Auto mode, before a copy of `ranges` is made: a block it copies whole for the first time
/// is pinned first where its group is trusted (`learning::before_copy`). A copy smaller than the
/// floor copies no block whole: nothing looked up. Returns the block whose first copy this
/// is worth timing, if any.
fn trusting(ranges: &[Range]) -> Option<usize> {
    let mut timed = None;
    if host_bytes(ranges) >= FLOOR.load(Ordering::Relaxed)
        && tracked(ranges)
        && let Some(_busy) = Busy::enter()
    {
        judged(|| timed = learning::before_copy(ranges));
    }
    timed
}

/// Auto mode: whether a copy of `ranges` passes as it is: hotpin changed no block (no
/// promise to keep), registered no part or chunk (no edge to cross), and the copy may touch
/// no block the learner tracks (nothing to count, to pin before it, or to time). A block is
/// tracked from its allocation, so one the copy touches cannot become tracked while the copy
/// is made. Most copies of a program hotpin cannot help (PyTorch's small tensors) are such:
/// the stand-in's 16 KiB copies cost 104-136 ns more in auto mode than as written before, and
/// 30 ns more with hotpin's hooks in place doing nothing (`--mode pin-none`), docs/benchmarks.md
/// section 4.
fn passes_as_it_is(ranges: &[Range]) -> bool {
    !changed(ranges) && !state::PARTS.load(Ordering::Acquire) && !chunks::any() && !tracked(ranges)
}

/// Whether `ranges` may touch a block auto mode tracks: one that touches none teaches it
/// nothing, and is not looked up under the lock (`regions`).
fn tracked(ranges: &[Range]) -> bool {
    touches(&TRACKED, ranges)
}

/// Auto mode: counts a completed copy of `ranges`; `measured`: the block whose first copy it
/// was and the seconds it took, where it was timed ([`Clock`]).
fn count(ranges: &[Range], measured: Option<(usize, f64)>) {
    if !questions::announced(ranges)
        && tracked(ranges)
        && let Some(_busy) = Busy::enter()
    {
        judged(|| learning::copied(ranges, measured));
    }
}

/// A synchronous copy (complete when it returns, pinned or not): only counted, in auto mode
/// (and cut, or what it crosses let go, as [`guarded`] does).
fn counted(
    ranges: &[Range],
    stream: Stream,
    in_pieces: bool,
    call: impl FnOnce(&[usize], bool) -> c_int,
) -> c_int {
    if state::forked() || guard::in_copy() || !state::LEARNING.load(Ordering::Acquire) {
        return call(&[], false);
    }
    if passes_as_it_is(ranges) {
        let _copying = turns::copying(host_bytes(ranges));
        return inside(|| call(&[], false));
    }
    let timed = trusting(ranges);
    let cut_on = in_pieces.then_some(std::ptr::null_mut());
    let (in_call, cuts) = cleared(ranges, false, cut_on);
    let copying = cuts.is_empty().then(|| turns::copying(host_bytes(ranges)));
    let mut clock = Clock::new(timed.filter(|_| cuts.is_empty()), stream);
    let rc = inside(|| clock.time(|| call(&cuts, false)));
    let measured = clock.read();
    drop(copying);
    drop(in_call);
    if rc == 0 {
        count(ranges, measured);
    }
    rc
}

/// [`guarded`]'s promise keeping: the copy's status, and whether it was settled (waited for,
/// or captured) so that nothing more may be done about it. `call` is told whether the copy
/// will be waited for once queued (each of its pieces may then be waited for as it goes).
fn keeping_promises(
    ranges: &[Range],
    stream: Stream,
    layer: Layer,
    call: impl FnOnce(bool) -> c_int,
) -> (c_int, bool) {
    if !changed(ranges) {
        return (inside(|| call(false)), false);
    }
    let Some(busy) = Busy::enter() else {
        return (call(false), false);
    };
    let mut touched = Touched::default();
    let generation = BELIEVED.generation();
    let mut looked = false;
    judged(|| {
        touched = state::touched(ranges);
        looked = true;
    });
    if looked && !touched.believed_pinned {
        // None of these ranges needs looking up for such blocks again on this thread until
        // one comes, goes or changes.
        for &(start, len, _) in ranges.iter().filter(|range| range.0 != 0) {
            BELIEVED.missed(start, len, generation);
        }
    }
    if !touched.hidden && !touched.believed_pinned {
        drop(busy);
        return (inside(|| call(false)), false);
    }
    // Asked once: both answers below depend on it.
    let capturing = cuda::capturing(stream);
    if touched.believed_pinned && capturing {
        judged(|| allocations::pin_on_demand(ranges, false));
    }
    if !touched.hidden {
        drop(busy);
        return (inside(|| call(false)), capturing);
    }
    if capturing {
        // CUDA's own answer for pageable memory: refused (older CUDA, the stand-in), or
        // captured (CUDA 13), as this copy then is.
        let pageable = questions::reference() as *const c_void;
        if cuda::capture_of_pageable(pageable) != 0 {
            let refused = cuda::refuse_as_pageable(stream, pageable, layer);
            if refused != 0 {
                CAPTURES_REFUSED.fetch_add(1, Ordering::Relaxed);
                return (refused, true);
            }
        }
        drop(busy);
        return (inside(|| call(false)), true);
    }
    drop(busy);
    let queued = inside(|| call(true));
    if queued != 0 {
        return (queued, true);
    }
    COPIES_WAITED.fetch_add(1, Ordering::Relaxed);
    let _busy = Busy::enter();
    (cuda::synchronize(stream), true)
}

/// A copy whose host memory cannot be told from its arguments (3D batches, and the runtime's
/// 3D peer copy, whose driver copy beneath is read precisely):
/// while any block is promoted, waited for as a pageable copy is. During capture it passes
/// as it is (a sync there would end the capture): docs/transparency.md names this gap.
fn guarded_unknown(stream: Stream, call: impl FnOnce() -> c_int) -> c_int {
    if state::forked() || guard::in_copy() {
        return call();
    }
    let in_call = state::LEARNING
        .load(Ordering::Acquire)
        .then(|| cleared(&[], true, None));
    if !ACTIVE.load(Ordering::Acquire) {
        return call();
    }
    let capturing = {
        let _busy = Busy::enter();
        cuda::capturing(stream)
    };
    // Its size is not known: taken as large.
    let _copying = turns::copying(usize::MAX);
    let queued = inside(call);
    // Queued: the pinner thread need not wait for it any longer.
    drop(in_call);
    if queued != 0 || capturing {
        return queued;
    }
    COPIES_WAITED.fetch_add(1, Ordering::Relaxed);
    let _busy = Busy::enter();
    cuda::synchronize(stream)
}

/// The most host bytes one of a copy's ranges spans (its size, for a turn).
fn host_bytes(ranges: &[Range]) -> usize {
    ranges.iter().map(|range| range.1).max().unwrap_or(0)
}

/// What stream 0 means to a `_ptsz` entry point: the calling thread's default stream.
fn per_thread(stream: Stream) -> Stream {
    if stream.is_null() {
        STREAM_PER_THREAD as Stream
    } else {
        stream
    }
}

const fn cstr(text: &'static str) -> &'static CStr {
    match CStr::from_bytes_with_nul(text.as_bytes()) {
        Ok(name) => name,
        Err(_) => panic!("a function name with a NUL inside"),
    }
}

/// Defines the exported copy `$name` (the real one behind it: `$real`, in the runtime or the
/// driver), guarded on `$stream` over the host memory `$ranges` (an expression of the
/// arguments), or `unknown`. A copy of one contiguous range names how it is made in pieces:
/// `pieces(|offset, length| the real function's arguments for that piece)`.
macro_rules! copy {
    ($real:ident = $layer:ident $name:ident ($($arg:ident: $ty:ty),*), $stream:expr, $guard:ident $(, $ranges:expr $(, pieces(|$o:ident, $l:ident| $($piece:expr),*))?)?) => {
        pub static $real: Real = Real::$layer(cstr(concat!(stringify!($name), "\0")));

        /// # Safety
        /// As the CUDA function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            // SAFETY: the real function of this name has this C type.
            let Some(real) =
                (unsafe { cuda::function::<unsafe extern "C" fn($($ty),*) -> c_int>(&$real) })
            else {
                return cuda::ERROR_NO_RUNTIME;
            };
            copy!(@guard $guard, $stream, copy!(@layer $layer), real, ($($arg),*) $(, $ranges $(, ($o, $l, $($piece),*))?)?)
        }
    };
    (@guard guarded_unknown, $stream:expr, $layer:expr, $real:ident, ($($arg:ident),*)) => {
        // SAFETY: the program's own call, passed on as it was made.
        guarded_unknown($stream, || unsafe { $real($($arg),*) })
    };
    (@guard $guard:ident, $stream:expr, $layer:expr, $real:ident, ($($arg:ident),*), $ranges:expr) => {{
        // SAFETY: the program's own arguments, read as CUDA reads them.
        #[allow(unused_unsafe)]
        let ranges = unsafe { $ranges };
        // SAFETY: the program's own call, passed on as it was made.
        copy!(@call $guard, $stream, $layer, &ranges, false, |_: &[usize], _: bool| unsafe { $real($($arg),*) })
    }};
    (@guard $guard:ident, $stream:expr, $layer:expr, $real:ident, ($($arg:ident),*), $ranges:expr, ($o:ident, $l:ident, $($piece:expr),*)) => {{
        let ranges = $ranges;
        let len = ranges.first().map_or(0, |range| range.1);
        // SAFETY: the program's own call, or the same call for a piece of its bytes (each
        // piece within them, in order, on the same stream).
        let piece = |$o: usize, $l: usize| unsafe { $real($($piece),*) };
        // A piece that fails after others were queued: those are waited for.
        let settle = || {
            let _busy = Busy::enter();
            cuda::synchronize($stream);
        };
        copy!(@call $guard, $stream, $layer, &ranges, true, |cuts: &[usize], settle_each: bool| chunks::in_pieces(len, cuts, settle_each, piece, settle))
    }};
    (@call guarded, $stream:expr, $layer:expr, $ranges:expr, $in_pieces:expr, $call:expr) => {
        guarded($ranges, $stream, $layer, $in_pieces, $call)
    };
    (@call counted, $stream:expr, $layer:expr, $ranges:expr, $in_pieces:expr, $call:expr) => {
        counted($ranges, $stream, $in_pieces, $call)
    };
    (@layer runtime) => { Layer::Runtime };
    (@layer driver) => { Layer::Driver };
}

// The driver.
copy!(CU_HTOD = driver cuMemcpyHtoDAsync_v2(dst: Dev, src: *const c_void, n: usize, s: Stream), s, guarded, [(src as usize, n, READ)], pieces(|o, l| dst.wrapping_add(o as Dev), src.wrapping_byte_add(o), l, s));
copy!(CU_HTOD_PTSZ = driver cuMemcpyHtoDAsync_v2_ptsz(dst: Dev, src: *const c_void, n: usize, s: Stream), per_thread(s), guarded, [(src as usize, n, READ)], pieces(|o, l| dst.wrapping_add(o as Dev), src.wrapping_byte_add(o), l, s));
copy!(CU_DTOH = driver cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: Dev, n: usize, s: Stream), s, guarded, [(dst as usize, n, WRITE)], pieces(|o, l| dst.wrapping_byte_add(o), src.wrapping_add(o as Dev), l, s));
copy!(CU_DTOH_PTSZ = driver cuMemcpyDtoHAsync_v2_ptsz(dst: *mut c_void, src: Dev, n: usize, s: Stream), per_thread(s), guarded, [(dst as usize, n, WRITE)], pieces(|o, l| dst.wrapping_byte_add(o), src.wrapping_add(o as Dev), l, s));
copy!(CU_COPY = driver cuMemcpyAsync(dst: Dev, src: Dev, n: usize, s: Stream), s, guarded, [(dst as usize, n, WRITE), (src as usize, n, READ)], pieces(|o, l| dst.wrapping_add(o as Dev), src.wrapping_add(o as Dev), l, s));
copy!(CU_COPY_PTSZ = driver cuMemcpyAsync_ptsz(dst: Dev, src: Dev, n: usize, s: Stream), per_thread(s), guarded, [(dst as usize, n, WRITE), (src as usize, n, READ)], pieces(|o, l| dst.wrapping_add(o as Dev), src.wrapping_add(o as Dev), l, s));
copy!(CU_2D = driver cuMemcpy2DAsync_v2(c: *const Memcpy2D, s: Stream), s, guarded, Memcpy2D::ranges(c));
copy!(CU_2D_PTSZ = driver cuMemcpy2DAsync_v2_ptsz(c: *const Memcpy2D, s: Stream), per_thread(s), guarded, Memcpy2D::ranges(c));
copy!(CU_3D = driver cuMemcpy3DAsync_v2(c: *const Memcpy3D, s: Stream), s, guarded, Memcpy3D::ranges(c));
copy!(CU_3D_PTSZ = driver cuMemcpy3DAsync_v2_ptsz(c: *const Memcpy3D, s: Stream), per_thread(s), guarded, Memcpy3D::ranges(c));
copy!(CU_HTOA = driver cuMemcpyHtoAAsync_v2(a: *mut c_void, o: usize, src: *const c_void, n: usize, s: Stream), s, guarded, [(src as usize, n, READ)], pieces(|at, l| a, o + at, src.wrapping_byte_add(at), l, s));
copy!(CU_HTOA_PTSZ = driver cuMemcpyHtoAAsync_v2_ptsz(a: *mut c_void, o: usize, src: *const c_void, n: usize, s: Stream), per_thread(s), guarded, [(src as usize, n, READ)], pieces(|at, l| a, o + at, src.wrapping_byte_add(at), l, s));
copy!(CU_ATOH = driver cuMemcpyAtoHAsync_v2(dst: *mut c_void, a: *mut c_void, o: usize, n: usize, s: Stream), s, guarded, [(dst as usize, n, WRITE)], pieces(|at, l| dst.wrapping_byte_add(at), a, o + at, l, s));
copy!(CU_ATOH_PTSZ = driver cuMemcpyAtoHAsync_v2_ptsz(dst: *mut c_void, a: *mut c_void, o: usize, n: usize, s: Stream), per_thread(s), guarded, [(dst as usize, n, WRITE)], pieces(|at, l| dst.wrapping_byte_add(at), a, o + at, l, s));
copy!(CU_BATCH = driver cuMemcpyBatchAsync_v2(d: *const Dev, r: *const Dev, z: *const usize, n: usize, a: *mut c_void, i: *mut usize, k: usize, s: Stream), s, guarded, batch(d, r, z, n));
copy!(CU_BATCH_PTSZ = driver cuMemcpyBatchAsync_v2_ptsz(d: *const Dev, r: *const Dev, z: *const usize, n: usize, a: *mut c_void, i: *mut usize, k: usize, s: Stream), per_thread(s), guarded, batch(d, r, z, n));
copy!(CU_BATCH_V1 = driver cuMemcpyBatchAsync(d: *const Dev, r: *const Dev, z: *const usize, n: usize, a: *mut c_void, i: *mut usize, k: usize, f: *mut usize, s: Stream), s, guarded, batch(d, r, z, n));
copy!(CU_BATCH_V1_PTSZ = driver cuMemcpyBatchAsync_ptsz(d: *const Dev, r: *const Dev, z: *const usize, n: usize, a: *mut c_void, i: *mut usize, k: usize, f: *mut usize, s: Stream), per_thread(s), guarded, batch(d, r, z, n));
// `CUDA_MEMCPY3D_PEER` is `CUDA_MEMCPY3D` with the contexts where the latter's reserved
// fields are (cuda.h), so its host sides are read the same way.
copy!(CU_3D_PEER = driver cuMemcpy3DPeerAsync(c: *const Memcpy3D, s: Stream), s, guarded, Memcpy3D::ranges(c));
copy!(CU_3D_PEER_PTSZ = driver cuMemcpy3DPeerAsync_ptsz(c: *const Memcpy3D, s: Stream), per_thread(s), guarded, Memcpy3D::ranges(c));
copy!(CU_3D_BATCH = driver cuMemcpy3DBatchAsync_v2(n: usize, o: *mut c_void, f: u64, s: Stream), s, guarded_unknown);
copy!(CU_3D_BATCH_PTSZ = driver cuMemcpy3DBatchAsync_v2_ptsz(n: usize, o: *mut c_void, f: u64, s: Stream), per_thread(s), guarded_unknown);
copy!(CU_3D_BATCH_V1 = driver cuMemcpy3DBatchAsync(n: usize, o: *mut c_void, x: *mut usize, f: u64, s: Stream), s, guarded_unknown);
copy!(CU_3D_BATCH_V1_PTSZ = driver cuMemcpy3DBatchAsync_ptsz(n: usize, o: *mut c_void, x: *mut usize, f: u64, s: Stream), per_thread(s), guarded_unknown);

// The runtime (which, in most programs, makes each of these through the driver's above).
type Kind = c_int;

// Synchronous copies: complete when they return, pinned or not; counted in auto mode.
copy!(CU_HTOD_SYNC = driver cuMemcpyHtoD_v2(dst: Dev, src: *const c_void, n: usize), std::ptr::null_mut(), counted, [(src as usize, n, READ)], pieces(|o, l| dst.wrapping_add(o as Dev), src.wrapping_byte_add(o), l));
copy!(CU_HTOD_SYNC_PTDS = driver cuMemcpyHtoD_v2_ptds(dst: Dev, src: *const c_void, n: usize), STREAM_PER_THREAD as Stream, counted, [(src as usize, n, READ)], pieces(|o, l| dst.wrapping_add(o as Dev), src.wrapping_byte_add(o), l));
copy!(CU_DTOH_SYNC = driver cuMemcpyDtoH_v2(dst: *mut c_void, src: Dev, n: usize), std::ptr::null_mut(), counted, [(dst as usize, n, WRITE)], pieces(|o, l| dst.wrapping_byte_add(o), src.wrapping_add(o as Dev), l));
copy!(CU_DTOH_SYNC_PTDS = driver cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: Dev, n: usize), STREAM_PER_THREAD as Stream, counted, [(dst as usize, n, WRITE)], pieces(|o, l| dst.wrapping_byte_add(o), src.wrapping_add(o as Dev), l));
copy!(CU_COPY_SYNC = driver cuMemcpy(dst: Dev, src: Dev, n: usize), std::ptr::null_mut(), counted, [(dst as usize, n, WRITE), (src as usize, n, READ)], pieces(|o, l| dst.wrapping_add(o as Dev), src.wrapping_add(o as Dev), l));
copy!(CU_COPY_SYNC_PTDS = driver cuMemcpy_ptds(dst: Dev, src: Dev, n: usize), STREAM_PER_THREAD as Stream, counted, [(dst as usize, n, WRITE), (src as usize, n, READ)], pieces(|o, l| dst.wrapping_add(o as Dev), src.wrapping_add(o as Dev), l));
copy!(CU_2D_SYNC = driver cuMemcpy2D_v2(c: *const Memcpy2D), std::ptr::null_mut(), counted, Memcpy2D::ranges(c));
copy!(CU_2D_SYNC_PTDS = driver cuMemcpy2D_v2_ptds(c: *const Memcpy2D), STREAM_PER_THREAD as Stream, counted, Memcpy2D::ranges(c));
copy!(CU_2D_UNALIGNED = driver cuMemcpy2DUnaligned_v2(c: *const Memcpy2D), std::ptr::null_mut(), counted, Memcpy2D::ranges(c));
copy!(CU_2D_UNALIGNED_PTDS = driver cuMemcpy2DUnaligned_v2_ptds(c: *const Memcpy2D), STREAM_PER_THREAD as Stream, counted, Memcpy2D::ranges(c));
copy!(CU_3D_SYNC = driver cuMemcpy3D_v2(c: *const Memcpy3D), std::ptr::null_mut(), counted, Memcpy3D::ranges(c));
copy!(CU_3D_SYNC_PTDS = driver cuMemcpy3D_v2_ptds(c: *const Memcpy3D), STREAM_PER_THREAD as Stream, counted, Memcpy3D::ranges(c));
copy!(CU_HTOA_SYNC = driver cuMemcpyHtoA_v2(a: *mut c_void, o: usize, src: *const c_void, n: usize), std::ptr::null_mut(), counted, [(src as usize, n, READ)], pieces(|at, l| a, o + at, src.wrapping_byte_add(at), l));
copy!(CU_HTOA_SYNC_PTDS = driver cuMemcpyHtoA_v2_ptds(a: *mut c_void, o: usize, src: *const c_void, n: usize), STREAM_PER_THREAD as Stream, counted, [(src as usize, n, READ)], pieces(|at, l| a, o + at, src.wrapping_byte_add(at), l));
copy!(CU_ATOH_SYNC = driver cuMemcpyAtoH_v2(dst: *mut c_void, a: *mut c_void, o: usize, n: usize), std::ptr::null_mut(), counted, [(dst as usize, n, WRITE)], pieces(|at, l| dst.wrapping_byte_add(at), a, o + at, l));
copy!(CU_ATOH_SYNC_PTDS = driver cuMemcpyAtoH_v2_ptds(dst: *mut c_void, a: *mut c_void, o: usize, n: usize), STREAM_PER_THREAD as Stream, counted, [(dst as usize, n, WRITE)], pieces(|at, l| dst.wrapping_byte_add(at), a, o + at, l));
copy!(RT_COPY_SYNC = runtime cudaMemcpy(dst: *mut c_void, src: *const c_void, n: usize, k: Kind), std::ptr::null_mut(), counted, [destination(k, (dst as usize, n, WRITE)), source(k, (src as usize, n, READ))], pieces(|o, l| dst.wrapping_byte_add(o), src.wrapping_byte_add(o), l, k));
copy!(RT_COPY_SYNC_PTDS = runtime cudaMemcpy_ptds(dst: *mut c_void, src: *const c_void, n: usize, k: Kind), STREAM_PER_THREAD as Stream, counted, [destination(k, (dst as usize, n, WRITE)), source(k, (src as usize, n, READ))], pieces(|o, l| dst.wrapping_byte_add(o), src.wrapping_byte_add(o), l, k));
copy!(RT_2D_SYNC = runtime cudaMemcpy2D(dst: *mut c_void, dp: usize, src: *const c_void, sp: usize, w: usize, h: usize, k: Kind), std::ptr::null_mut(), counted, [destination(k, pitched(dst as usize, dp, w, h, WRITE)), source(k, pitched(src as usize, sp, w, h, READ))]);
copy!(RT_2D_SYNC_PTDS = runtime cudaMemcpy2D_ptds(dst: *mut c_void, dp: usize, src: *const c_void, sp: usize, w: usize, h: usize, k: Kind), STREAM_PER_THREAD as Stream, counted, [destination(k, pitched(dst as usize, dp, w, h, WRITE)), source(k, pitched(src as usize, sp, w, h, READ))]);
copy!(RT_3D_SYNC = runtime cudaMemcpy3D(p: *const Memcpy3DParms), std::ptr::null_mut(), counted, Memcpy3DParms::ranges(p));
copy!(RT_3D_SYNC_PTDS = runtime cudaMemcpy3D_ptds(p: *const Memcpy3DParms), STREAM_PER_THREAD as Stream, counted, Memcpy3DParms::ranges(p));
copy!(RT_TO_ARRAY_SYNC = runtime cudaMemcpy2DToArray(a: *mut c_void, x: usize, y: usize, src: *const c_void, sp: usize, w: usize, h: usize, k: Kind), std::ptr::null_mut(), counted, [source(k, pitched(src as usize, sp, w, h, READ))]);
copy!(RT_TO_ARRAY_SYNC_PTDS = runtime cudaMemcpy2DToArray_ptds(a: *mut c_void, x: usize, y: usize, src: *const c_void, sp: usize, w: usize, h: usize, k: Kind), STREAM_PER_THREAD as Stream, counted, [source(k, pitched(src as usize, sp, w, h, READ))]);
copy!(RT_FROM_ARRAY_SYNC = runtime cudaMemcpy2DFromArray(dst: *mut c_void, dp: usize, a: *const c_void, x: usize, y: usize, w: usize, h: usize, k: Kind), std::ptr::null_mut(), counted, [destination(k, pitched(dst as usize, dp, w, h, WRITE))]);
copy!(RT_FROM_ARRAY_SYNC_PTDS = runtime cudaMemcpy2DFromArray_ptds(dst: *mut c_void, dp: usize, a: *const c_void, x: usize, y: usize, w: usize, h: usize, k: Kind), STREAM_PER_THREAD as Stream, counted, [destination(k, pitched(dst as usize, dp, w, h, WRITE))]);
copy!(RT_TO_SYMBOL_SYNC = runtime cudaMemcpyToSymbol(sym: *const c_void, src: *const c_void, n: usize, o: usize, k: Kind), std::ptr::null_mut(), counted, [source(k, (src as usize, n, READ))], pieces(|at, l| sym, src.wrapping_byte_add(at), l, o + at, k));
copy!(RT_TO_SYMBOL_SYNC_PTDS = runtime cudaMemcpyToSymbol_ptds(sym: *const c_void, src: *const c_void, n: usize, o: usize, k: Kind), STREAM_PER_THREAD as Stream, counted, [source(k, (src as usize, n, READ))], pieces(|at, l| sym, src.wrapping_byte_add(at), l, o + at, k));
copy!(RT_FROM_SYMBOL_SYNC = runtime cudaMemcpyFromSymbol(dst: *mut c_void, sym: *const c_void, n: usize, o: usize, k: Kind), std::ptr::null_mut(), counted, [destination(k, (dst as usize, n, WRITE))], pieces(|at, l| dst.wrapping_byte_add(at), sym, l, o + at, k));
copy!(RT_FROM_SYMBOL_SYNC_PTDS = runtime cudaMemcpyFromSymbol_ptds(dst: *mut c_void, sym: *const c_void, n: usize, o: usize, k: Kind), STREAM_PER_THREAD as Stream, counted, [destination(k, (dst as usize, n, WRITE))], pieces(|at, l| dst.wrapping_byte_add(at), sym, l, o + at, k));
copy!(RT_COPY = runtime cudaMemcpyAsync(dst: *mut c_void, src: *const c_void, n: usize, k: Kind, s: Stream), s, guarded, [destination(k, (dst as usize, n, WRITE)), source(k, (src as usize, n, READ))], pieces(|o, l| dst.wrapping_byte_add(o), src.wrapping_byte_add(o), l, k, s));
copy!(RT_COPY_PTSZ = runtime cudaMemcpyAsync_ptsz(dst: *mut c_void, src: *const c_void, n: usize, k: Kind, s: Stream), per_thread(s), guarded, [destination(k, (dst as usize, n, WRITE)), source(k, (src as usize, n, READ))], pieces(|o, l| dst.wrapping_byte_add(o), src.wrapping_byte_add(o), l, k, s));
copy!(RT_2D = runtime cudaMemcpy2DAsync(dst: *mut c_void, dp: usize, src: *const c_void, sp: usize, w: usize, h: usize, k: Kind, s: Stream), s, guarded, [destination(k, pitched(dst as usize, dp, w, h, WRITE)), source(k, pitched(src as usize, sp, w, h, READ))]);
copy!(RT_2D_PTSZ = runtime cudaMemcpy2DAsync_ptsz(dst: *mut c_void, dp: usize, src: *const c_void, sp: usize, w: usize, h: usize, k: Kind, s: Stream), per_thread(s), guarded, [destination(k, pitched(dst as usize, dp, w, h, WRITE)), source(k, pitched(src as usize, sp, w, h, READ))]);
copy!(RT_3D = runtime cudaMemcpy3DAsync(p: *const Memcpy3DParms, s: Stream), s, guarded, Memcpy3DParms::ranges(p));
copy!(RT_3D_PTSZ = runtime cudaMemcpy3DAsync_ptsz(p: *const Memcpy3DParms, s: Stream), per_thread(s), guarded, Memcpy3DParms::ranges(p));
copy!(RT_BATCH = runtime cudaMemcpyBatchAsync(d: *const Dev, r: *const Dev, z: *const usize, n: usize, a: *mut c_void, i: *mut usize, k: usize, s: Stream), s, guarded, batch(d, r, z, n));
copy!(RT_BATCH_PTSZ = runtime cudaMemcpyBatchAsync_ptsz(d: *const Dev, r: *const Dev, z: *const usize, n: usize, a: *mut c_void, i: *mut usize, k: usize, s: Stream), per_thread(s), guarded, batch(d, r, z, n));
copy!(RT_TO_SYMBOL = runtime cudaMemcpyToSymbolAsync(sym: *const c_void, src: *const c_void, n: usize, o: usize, k: Kind, s: Stream), s, guarded, [source(k, (src as usize, n, READ))], pieces(|at, l| sym, src.wrapping_byte_add(at), l, o + at, k, s));
copy!(RT_TO_SYMBOL_PTSZ = runtime cudaMemcpyToSymbolAsync_ptsz(sym: *const c_void, src: *const c_void, n: usize, o: usize, k: Kind, s: Stream), per_thread(s), guarded, [source(k, (src as usize, n, READ))], pieces(|at, l| sym, src.wrapping_byte_add(at), l, o + at, k, s));
copy!(RT_FROM_SYMBOL = runtime cudaMemcpyFromSymbolAsync(dst: *mut c_void, sym: *const c_void, n: usize, o: usize, k: Kind, s: Stream), s, guarded, [destination(k, (dst as usize, n, WRITE))], pieces(|at, l| dst.wrapping_byte_add(at), sym, l, o + at, k, s));
copy!(RT_FROM_SYMBOL_PTSZ = runtime cudaMemcpyFromSymbolAsync_ptsz(dst: *mut c_void, sym: *const c_void, n: usize, o: usize, k: Kind, s: Stream), per_thread(s), guarded, [destination(k, (dst as usize, n, WRITE))], pieces(|at, l| dst.wrapping_byte_add(at), sym, l, o + at, k, s));
copy!(RT_TO_ARRAY = runtime cudaMemcpy2DToArrayAsync(a: *mut c_void, x: usize, y: usize, src: *const c_void, sp: usize, w: usize, h: usize, k: Kind, s: Stream), s, guarded, [source(k, pitched(src as usize, sp, w, h, READ))]);
copy!(RT_TO_ARRAY_PTSZ = runtime cudaMemcpy2DToArrayAsync_ptsz(a: *mut c_void, x: usize, y: usize, src: *const c_void, sp: usize, w: usize, h: usize, k: Kind, s: Stream), per_thread(s), guarded, [source(k, pitched(src as usize, sp, w, h, READ))]);
copy!(RT_FROM_ARRAY = runtime cudaMemcpy2DFromArrayAsync(dst: *mut c_void, dp: usize, a: *const c_void, x: usize, y: usize, w: usize, h: usize, k: Kind, s: Stream), s, guarded, [destination(k, pitched(dst as usize, dp, w, h, WRITE))]);
copy!(RT_FROM_ARRAY_PTSZ = runtime cudaMemcpy2DFromArrayAsync_ptsz(dst: *mut c_void, dp: usize, a: *const c_void, x: usize, y: usize, w: usize, h: usize, k: Kind, s: Stream), per_thread(s), guarded, [destination(k, pitched(dst as usize, dp, w, h, WRITE))]);
copy!(RT_3D_PEER = runtime cudaMemcpy3DPeerAsync(p: *const c_void, s: Stream), s, guarded_unknown);
copy!(RT_3D_PEER_PTSZ = runtime cudaMemcpy3DPeerAsync_ptsz(p: *const c_void, s: Stream), per_thread(s), guarded_unknown);
copy!(RT_3D_BATCH = runtime cudaMemcpy3DBatchAsync(n: usize, o: *mut c_void, f: u64, s: Stream), s, guarded_unknown);
copy!(RT_3D_BATCH_PTSZ = runtime cudaMemcpy3DBatchAsync_ptsz(n: usize, o: *mut c_void, f: u64, s: Stream), per_thread(s), guarded_unknown);

/// The driver's copies: (the name `cuGetProcAddress` is asked for, the real function, ours).
/// The driver answers a base name with the version and stream flavour the caller asked for:
/// ours is given only for the very function it wraps. One line per entry (not reflowed).
#[rustfmt::skip]
pub fn driver_copies() -> [(&'static CStr, &'static Real, usize); 40] {
    macro_rules! entry {
        ($base:literal, $real:ident, $ours:ident) => {
            ($base, &$real, $ours as *const () as usize)
        };
    }
    [
        entry!(c"cuMemcpyHtoD", CU_HTOD_SYNC, cuMemcpyHtoD_v2),
        entry!(c"cuMemcpyHtoD", CU_HTOD_SYNC_PTDS, cuMemcpyHtoD_v2_ptds),
        entry!(c"cuMemcpyDtoH", CU_DTOH_SYNC, cuMemcpyDtoH_v2),
        entry!(c"cuMemcpyDtoH", CU_DTOH_SYNC_PTDS, cuMemcpyDtoH_v2_ptds),
        entry!(c"cuMemcpy", CU_COPY_SYNC, cuMemcpy),
        entry!(c"cuMemcpy", CU_COPY_SYNC_PTDS, cuMemcpy_ptds),
        entry!(c"cuMemcpy2D", CU_2D_SYNC, cuMemcpy2D_v2),
        entry!(c"cuMemcpy2D", CU_2D_SYNC_PTDS, cuMemcpy2D_v2_ptds),
        entry!(c"cuMemcpy2DUnaligned", CU_2D_UNALIGNED, cuMemcpy2DUnaligned_v2),
        entry!(c"cuMemcpy2DUnaligned", CU_2D_UNALIGNED_PTDS, cuMemcpy2DUnaligned_v2_ptds),
        entry!(c"cuMemcpy3D", CU_3D_SYNC, cuMemcpy3D_v2),
        entry!(c"cuMemcpy3D", CU_3D_SYNC_PTDS, cuMemcpy3D_v2_ptds),
        entry!(c"cuMemcpyHtoA", CU_HTOA_SYNC, cuMemcpyHtoA_v2),
        entry!(c"cuMemcpyHtoA", CU_HTOA_SYNC_PTDS, cuMemcpyHtoA_v2_ptds),
        entry!(c"cuMemcpyAtoH", CU_ATOH_SYNC, cuMemcpyAtoH_v2),
        entry!(c"cuMemcpyAtoH", CU_ATOH_SYNC_PTDS, cuMemcpyAtoH_v2_ptds),
        entry!(c"cuMemcpyHtoDAsync", CU_HTOD, cuMemcpyHtoDAsync_v2),
        entry!(c"cuMemcpyHtoDAsync", CU_HTOD_PTSZ, cuMemcpyHtoDAsync_v2_ptsz),
        entry!(c"cuMemcpyDtoHAsync", CU_DTOH, cuMemcpyDtoHAsync_v2),
        entry!(c"cuMemcpyDtoHAsync", CU_DTOH_PTSZ, cuMemcpyDtoHAsync_v2_ptsz),
        entry!(c"cuMemcpyAsync", CU_COPY, cuMemcpyAsync),
        entry!(c"cuMemcpyAsync", CU_COPY_PTSZ, cuMemcpyAsync_ptsz),
        entry!(c"cuMemcpy2DAsync", CU_2D, cuMemcpy2DAsync_v2),
        entry!(c"cuMemcpy2DAsync", CU_2D_PTSZ, cuMemcpy2DAsync_v2_ptsz),
        entry!(c"cuMemcpy3DAsync", CU_3D, cuMemcpy3DAsync_v2),
        entry!(c"cuMemcpy3DAsync", CU_3D_PTSZ, cuMemcpy3DAsync_v2_ptsz),
        entry!(c"cuMemcpyHtoAAsync", CU_HTOA, cuMemcpyHtoAAsync_v2),
        entry!(c"cuMemcpyHtoAAsync", CU_HTOA_PTSZ, cuMemcpyHtoAAsync_v2_ptsz),
        entry!(c"cuMemcpyAtoHAsync", CU_ATOH, cuMemcpyAtoHAsync_v2),
        entry!(c"cuMemcpyAtoHAsync", CU_ATOH_PTSZ, cuMemcpyAtoHAsync_v2_ptsz),
        entry!(c"cuMemcpyBatchAsync", CU_BATCH, cuMemcpyBatchAsync_v2),
        entry!(c"cuMemcpyBatchAsync", CU_BATCH_PTSZ, cuMemcpyBatchAsync_v2_ptsz),
        entry!(c"cuMemcpyBatchAsync", CU_BATCH_V1, cuMemcpyBatchAsync),
        entry!(c"cuMemcpyBatchAsync", CU_BATCH_V1_PTSZ, cuMemcpyBatchAsync_ptsz),
        entry!(c"cuMemcpy3DPeerAsync", CU_3D_PEER, cuMemcpy3DPeerAsync),
        entry!(c"cuMemcpy3DPeerAsync", CU_3D_PEER_PTSZ, cuMemcpy3DPeerAsync_ptsz),
        entry!(c"cuMemcpy3DBatchAsync", CU_3D_BATCH, cuMemcpy3DBatchAsync_v2),
        entry!(c"cuMemcpy3DBatchAsync", CU_3D_BATCH_PTSZ, cuMemcpy3DBatchAsync_v2_ptsz),
        entry!(c"cuMemcpy3DBatchAsync", CU_3D_BATCH_V1, cuMemcpy3DBatchAsync),
        entry!(c"cuMemcpy3DBatchAsync", CU_3D_BATCH_V1_PTSZ, cuMemcpy3DBatchAsync_ptsz),
    ]
}

/// The runtime's copies: (the real function, ours), for `dlsym`.
pub fn runtime_copies() -> [(&'static Real, usize); 34] {
    macro_rules! entry {
        ($real:ident, $ours:ident) => {
            (&$real, $ours as *const () as usize)
        };
    }
    [
        entry!(RT_COPY_SYNC, cudaMemcpy),
        entry!(RT_COPY_SYNC_PTDS, cudaMemcpy_ptds),
        entry!(RT_2D_SYNC, cudaMemcpy2D),
        entry!(RT_2D_SYNC_PTDS, cudaMemcpy2D_ptds),
        entry!(RT_3D_SYNC, cudaMemcpy3D),
        entry!(RT_3D_SYNC_PTDS, cudaMemcpy3D_ptds),
        entry!(RT_TO_ARRAY_SYNC, cudaMemcpy2DToArray),
        entry!(RT_TO_ARRAY_SYNC_PTDS, cudaMemcpy2DToArray_ptds),
        entry!(RT_FROM_ARRAY_SYNC, cudaMemcpy2DFromArray),
        entry!(RT_FROM_ARRAY_SYNC_PTDS, cudaMemcpy2DFromArray_ptds),
        entry!(RT_TO_SYMBOL_SYNC, cudaMemcpyToSymbol),
        entry!(RT_TO_SYMBOL_SYNC_PTDS, cudaMemcpyToSymbol_ptds),
        entry!(RT_FROM_SYMBOL_SYNC, cudaMemcpyFromSymbol),
        entry!(RT_FROM_SYMBOL_SYNC_PTDS, cudaMemcpyFromSymbol_ptds),
        entry!(RT_COPY, cudaMemcpyAsync),
        entry!(RT_COPY_PTSZ, cudaMemcpyAsync_ptsz),
        entry!(RT_2D, cudaMemcpy2DAsync),
        entry!(RT_2D_PTSZ, cudaMemcpy2DAsync_ptsz),
        entry!(RT_3D, cudaMemcpy3DAsync),
        entry!(RT_3D_PTSZ, cudaMemcpy3DAsync_ptsz),
        entry!(RT_BATCH, cudaMemcpyBatchAsync),
        entry!(RT_BATCH_PTSZ, cudaMemcpyBatchAsync_ptsz),
        entry!(RT_TO_SYMBOL, cudaMemcpyToSymbolAsync),
        entry!(RT_TO_SYMBOL_PTSZ, cudaMemcpyToSymbolAsync_ptsz),
        entry!(RT_FROM_SYMBOL, cudaMemcpyFromSymbolAsync),
        entry!(RT_FROM_SYMBOL_PTSZ, cudaMemcpyFromSymbolAsync_ptsz),
        entry!(RT_TO_ARRAY, cudaMemcpy2DToArrayAsync),
        entry!(RT_TO_ARRAY_PTSZ, cudaMemcpy2DToArrayAsync_ptsz),
        entry!(RT_FROM_ARRAY, cudaMemcpy2DFromArrayAsync),
        entry!(RT_FROM_ARRAY_PTSZ, cudaMemcpy2DFromArrayAsync_ptsz),
        entry!(RT_3D_PEER, cudaMemcpy3DPeerAsync),
        entry!(RT_3D_PEER_PTSZ, cudaMemcpy3DPeerAsync_ptsz),
        entry!(RT_3D_BATCH, cudaMemcpy3DBatchAsync),
        entry!(RT_3D_BATCH_PTSZ, cudaMemcpy3DBatchAsync_ptsz),
    ]
}
