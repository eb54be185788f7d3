//! The program's allocation calls as the interposer judges them: a pageable allocation at or
//! above the floor (registered at birth, served from the cache, or left pageable and
//! tracked), its free, the program's pinned requests (kept, or served pageable), its own
//! registrations (carried out or skipped), and blocks pinned on demand where the program
//! uses memory it believes pinned as only pinned memory can be used.

use std::{
    ffi::c_void,
    sync::atomic::{AtomicBool, Ordering},
};

use hotpin::pressure::Level;
use hotpin_policy::set::{SiteKey, Why};

use crate::{
    chunks,
    counters::{PYTHON_STACK_MAX_NS, PYTHON_STACK_NS, PYTHON_STACKS},
    cuda,
    guard::overlapping,
    online::{FirstCopy, GroupKey, OnDemand, Pin},
    pinner::{Freed, Job, forget_pinned, hand_to_pinner, pinning_pays, unpin_block, unregister},
    state::{
        ACTIVE, BELIEVED_PINNED, Birth, Demoted, Fate, LEARNING, READS_LINES, State, lock,
        lock_settled,
    },
};

thread_local! {
    /// The call site of the pinned request this thread is about to serve pageable.
    /// And its Python frames (CPython), read as it was judged; and whether the history pins it
    /// (registered whole at its first copy: `State::at_first_copy`).
    static DEMOTING: std::cell::RefCell<Option<Demoting>> =
        const { std::cell::RefCell::new(None) };
}

/// What `pinned_request` tells `demoted` of a request it serves pageable.
struct Demoting {
    site: SiteKey,
    python: Vec<crate::python::PyFrame>,
    at_first_copy: bool,
    /// A framework's staging buffer (pinned by hotpin at birth, or on demand later): let go
    /// once an array is shown pinned, never held for the program.
    staging: bool,
}

impl Demoting {
    fn new(site: SiteKey, python: Vec<crate::python::PyFrame>) -> Self {
        Self {
            site,
            python,
            at_first_copy: false,
            staging: false,
        }
    }
}

/// An allocation of `size` bytes (aligned to `align`) at or above the floor, for the call
/// site `caller` returns to. Where `reuse` allows it (not for calloc's zeroed or realloc's
/// moved blocks): served from the cache of freed pinned blocks if one fits ([`from_cache`]),
/// or, to be pinned, from the warm shelf. Else by `from_libc`, and then registered in place
/// if it is to be pinned and there is room.
pub fn allocate(
    call: &'static str,
    size: usize,
    align: usize,
    caller: usize,
    reuse: bool,
    from_libc: impl Fn() -> *mut c_void,
) -> *mut c_void {
    let python = python_frames();
    let mut guard = lock();
    let Some(state) = guard.as_mut() else {
        drop(guard);
        return from_libc();
    };
    let (site, ordinal) = state.identify(caller);
    if is_cuda_library(&site.module) {
        // The CUDA libraries' own buffers (the driver mallocs its staging memory inside
        // cuInit): not the program's data, and registering them would call CUDA from inside
        // CUDA (JAX crashed so in pin-all mode).
        state.counters.cuda_internal += 1;
        drop(guard);
        return from_libc();
    }
    let group = GroupKey::new(&site, &python);
    let (pin, why) = state.wants_pinned(&site, &group, ordinal, size as u64, false, false);
    let mut birth = Birth {
        call,
        site,
        ordinal,
        why,
        score: 0.0,
        python,
    };
    // Short of memory: the shelves go first; critically short, nothing new is pinned.
    let level = state.pressure.level();
    let mut freed = Freed::default();
    if level >= Level::High {
        freed.take_all(state);
    }
    if reuse {
        match from_cache(state, pin, size, align, birth) {
            Ok(ptr) => {
                drop(guard);
                freed.release();
                return ptr as *mut c_void;
            }
            Err(back) => birth = back,
        }
    }
    if pin && !state.within_budget(size) {
        // Blocks kept for reuse are the first to go.
        freed.pinned.extend(state.take_cache());
    }
    let fate = Fate::of(state, pin, level, size);
    // To be pinned, with no room in the budget or to be registered now: a warm block of its
    // size, if one was kept (registering it finds its pages in, where a fresh block's
    // registration faults every page in: 20-30 ms for 64 MiB on the H200, against 5).
    let warm = ((fate.no_room || fate.register) && reuse)
        .then(|| state.warm.take_fitting(size, align))
        .flatten();
    if warm.is_some() {
        state.counters.warm_hits += 1;
    }
    // A block the history pins and nothing kept serves, registered at its first copy instead
    // of now (`State::at_first_copy`, the default): memory the program writes first (a pool
    // `torch.zeros` fills on all its threads) is then registered with its pages in.
    let fate = if fate.register && warm.is_none() && state.at_first_copy && birth.why.matched() {
        Fate {
            register: false,
            at_first_copy: true,
            ..fate
        }
    } else {
        fate
    };
    // Registered ahead by the pinner thread instead (`State::ahead`), where that is asked.
    let ahead = state.ahead
        && matches!(
            fate.first_copy(birth.why),
            Some(FirstCopy::Whole | FirstCopy::HandsOn)
        );
    let ptr = warm.map_or_else(&from_libc, |ptr| ptr as *mut c_void);
    if ptr.is_null() {
        // Out of memory: what the shelves hold goes back to libc, and libc is asked again.
        freed.take_all(state);
        drop(guard);
        freed.release();
        return from_libc();
    }
    let birth = state.born(birth, ptr as usize, size, &group, fate);
    drop(guard);
    freed.release();
    if ahead {
        crate::pinner::pin_ahead_later(ptr as usize, size);
    }
    match birth {
        Some(birth) => register_at_birth(ptr, size, birth),
        None => ptr,
    }
}

/// A new block of `size` bytes (aligned to `align`) served a freed pinned block from the
/// cache, if one fits (`hotpin_policy::reuse`): where it is to be pinned (`pin`, or would be
/// but for its size: `Why::Large`, and taking a registered block waits on no registration),
/// or, not (yet) worth pinning, where no hot group that makes blocks again and no size the
/// history pins wants that block, and the budget has room for another such block (serving
/// it costs no registration, its pages are in, where left in the cache it holds pinned
/// memory for nothing; auto mode lets it go unless copied twice within a second; under a
/// budget that is nearly full it stays in the cache, which a block to be pinned empties for
/// room). Tracked at the cached block's size (at most a tenth more than asked): what is
/// registered, and what its budget bytes are. Else the birth is handed back.
fn from_cache(
    state: &mut State,
    pin: bool,
    size: usize,
    align: usize,
    birth: Birth,
) -> Result<usize, Birth> {
    let Some((ptr, block)) = state.cache.fitting(size, align) else {
        return Err(birth);
    };
    let to_pin = pin || birth.why == Why::Large;
    let spare = !to_pin
        && state.learner.as_ref().is_some_and(|l| !l.claims(block))
        && state.within_budget(block)
        && !state.history_pins_size(block);
    if !to_pin && !spare {
        return Err(birth);
    }
    state.cache.take_at(ptr);
    if to_pin {
        state.served_from_cache(birth, ptr, block);
    } else {
        state.served_spare(birth, ptr, block);
    }
    Ok(ptr)
}

/// Registers the block `allocate` judged worth pinning at birth (its bytes held in the
/// budget already), on this thread: unless pinning pays nothing here or the node's arbiter
/// leases it no room, in which case it stays pageable and its bytes are given back.
fn register_at_birth(ptr: *mut c_void, size: usize, birth: Birth) -> *mut c_void {
    let Birth {
        call,
        site,
        ordinal,
        why,
        score,
        python,
    } = birth;
    let learning = LEARNING.load(Ordering::Acquire);
    let pays = !learning || pinning_pays();
    // Auto mode asks the node's arbiter (a no-op without one).
    let leased = !learning || !pays || crate::lease::ask(ptr as usize, size, score);
    if !pays || !leased {
        if let Some(state) = lock().as_mut() {
            state.counters.node_refusals += u64::from(!leased);
            state.budget().release(size as u64);
            if let Some(learner) = state.learner.as_mut() {
                learner.track(ptr as usize, size, &site, false, false, python);
                if !leased {
                    learner.no_room(ptr as usize);
                }
            }
        }
        return ptr;
    }
    let began = std::time::Instant::now();
    let registered = cuda::register(ptr, size) == Some(0);
    let waited = began.elapsed().as_nanos() as u64;
    let mut guard = lock();
    let Some(state) = guard.as_mut() else {
        return ptr;
    };
    state.counters.longest_register_ns = state.counters.longest_register_ns.max(waited);
    state.counters.longest_thread_wait_ns = state.counters.longest_thread_wait_ns.max(waited);
    if let Some(learner) = state.learner.as_mut() {
        learner.track(ptr as usize, size, &site, false, registered, python);
    }
    let action = if registered {
        state.note_registered(ptr as usize, size);
        state.counters.promoted += 1;
        state.counters.promoted_bytes += size as u64;
        state.note_peak();
        ACTIVE.store(true, Ordering::Release);
        "promoted"
    } else {
        state.budget().release(size as u64);
        state.counters.register_failures += 1;
        "register-failed"
    };
    state.record(call, &site, ordinal, size as u64, action, why);
    ptr
}

/// Whether a call site's module is a CUDA library (the driver, the runtime, NVIDIA's
/// user-mode libraries): what they allocate is theirs.
fn is_cuda_library(module: &str) -> bool {
    ["libcuda.so", "libcudart", "libnvidia-"]
        .iter()
        .any(|prefix| module.starts_with(prefix))
}

/// What became of a block being freed.
pub enum Release {
    /// Not registered by us: libc frees it.
    NotOurs,
    /// Unregistered: libc frees it.
    Unregistered,
    /// Kept registered in the cache for the next allocation that fits: not to be freed.
    Cached,
    /// Handed to the pinner thread, which unregisters it, then frees it: not to be freed.
    HandedOn,
}

/// Before a libc block at `ptr` is freed (`keep`: it may go to the cache) or moved by
/// realloc (not kept): unregisters it if we registered it, or caches it.
pub fn releasing(ptr: *mut c_void, keep: bool) -> Release {
    let mut guard = lock_settled(ptr as usize);
    let Some(state) = guard.as_mut() else {
        return Release::NotOurs;
    };
    if let Some(block) = state.learner.as_mut().and_then(|l| l.untrack(ptr as usize)) {
        if block.pin != Pin::Pinned {
            // A pageable block that found no room to be pinned is kept warm for the next of
            // its group, which will find no room either; one of a size the history pins,
            // for the next block of that size, to be registered with its pages in, where the
            // shelf holds no other (freed memory the program gave back is held for one next
            // block, not piled up).
            let wanted =
                block.no_room || (state.warm.bytes() == 0 && state.history_pins_size(block.size));
            if keep
                && wanted
                && block.pin == Pin::Pageable
                && state.try_warm(ptr as usize, block.size)
            {
                return Release::Cached;
            }
            return Release::NotOurs;
        }
        state.skipped.remove(&(ptr as usize));
        // A part registered alone is not a pinned block to hand on: unregistered.
        let (start, len) = block.part.unwrap_or((ptr as usize, block.size));
        if keep && block.part.is_none() && state.try_cache(ptr as usize, len) {
            return Release::Cached;
        }
        drop(guard);
        // A registration in chunks takes a while to undo (0.48 s for 16 GiB on the H100):
        // the pinner thread undoes it, then frees the block. Its bytes stay in the budget
        // until then.
        let block = ptr as usize;
        if keep && chunks::chunked_at(start) && hand_to_pinner(Job::Free { start, len, block }) {
            return Release::HandedOn;
        }
        forget_pinned(start, len);
        unregister(start);
        return Release::Unregistered;
    }
    let Some(&size) = state.registered.get(&(ptr as usize)) else {
        return Release::NotOurs;
    };
    // A registration the program made on top of ours ends with the block too.
    state.skipped.remove(&(ptr as usize));
    if keep && state.try_cache(ptr as usize, size) {
        return Release::Cached;
    }
    state.forget_registered(ptr as usize);
    drop(guard);
    unregister(ptr as usize);
    Release::Unregistered
}

/// How a pinned request (`cudaHostAlloc` / `cudaMallocHost`) is to be served.
pub enum PinnedRequest {
    /// Pass it to CUDA; in auto mode, then lease it from the node's arbiter at this score
    /// (its density: `Learner::birth_score`).
    Pinned { score: Option<f64> },
    /// Serve it pageable.
    Demote,
    /// A framework's staging buffer (#44): served pageable and pinned by hotpin at once
    /// ([`staging_born`]), so that it can be let go once the arrays it stages are shown
    /// pinned ([`let_staging_go`]).
    Staging,
}

/// Judges a pinned request of `size` bytes with `flags` from the call site `caller`;
/// `staging_pool`: whether the caller is a framework's pool of staging buffers
/// (`hotpin_policy::callers::Caller::FrameworkPool`).
pub fn pinned_request(
    call: &'static str,
    size: usize,
    flags: u32,
    caller: usize,
    staging_pool: bool,
) -> PinnedRequest {
    let python = python_frames();
    let mut guard = lock();
    let Some(state) = guard.as_mut() else {
        return PinnedRequest::Pinned { score: None };
    };
    let (site, ordinal) = state.identify(caller);
    let group = GroupKey::new(&site, &python);
    let (pin, why) = state.wants_pinned(&site, &group, ordinal, size as u64, true, true);
    // A framework's portable pool (CuPy's) asks for its staging buffers before any array is
    // known hot: pinned now, but by hotpin, so that they can be let go later. So also where a
    // history pins it (it was hot on the run that learned it, before the arrays were shown
    // pinned): kept pinned by CUDA, it would stay pinned beside the arrays to the end.
    // Only where the budget holds it and an array of its size besides: else it would keep
    // out the arrays whose pinning lets it go, and is better left to CUDA, as before.
    let staging = staging_pool
        && flags & cuda::HOST_ALLOC_PINNED_ONLY == 0
        && flags & cuda::HOST_ALLOC_PORTABLE != 0
        && state.learner.is_some();
    if staging && state.within_budget(2 * size) {
        state.record(
            call,
            &site,
            ordinal,
            size as u64,
            "framework-staging",
            Why::Flags,
        );
        DEMOTING.with(|d| {
            *d.borrow_mut() = Some(Demoting {
                staging: true,
                ..Demoting::new(site, python)
            });
        });
        return PinnedRequest::Staging;
    }
    // From a history whose arrays take the budget: kept by CUDA, the staging buffer would stay
    // pinned beside them to the end, though the arrays, pinned and shown so, are copied
    // without it. Served pageable instead (its copies waited for; pinned later if they repay
    // it within the budget), as the first run's staging buffer was once let go. Should the
    // framework pin it on demand (asking whether it is pinned), it is still a staging buffer:
    // let go once an array is shown pinned.
    if staging && state.hot.is_some() {
        state.record(
            call,
            &site,
            ordinal,
            size as u64,
            "demoted",
            Why::OverBudget,
        );
        DEMOTING.with(|d| {
            *d.borrow_mut() = Some(Demoting {
                staging: true,
                ..Demoting::new(site, python)
            });
        });
        return PinnedRequest::Demote;
    }
    // One the history pins, from a history: served pageable and registered whole at its
    // first copy, as a block the history pins is (`State::at_first_copy`): the program has
    // written it by then, so the registration finds its pages in (about 1 ms for 16 MiB on
    // the H200), where CUDA's pinned allocation costs 8-10 ms (a DataLoader's pin thread:
    // 34-44 ms inside hotpin from its history against 7 on its first run, which demotes them).
    if pin
        && state.at_first_copy
        && why.matched()
        && flags & cuda::HOST_ALLOC_PINNED_ONLY == 0
        && state.learner.is_some()
    {
        state.record(call, &site, ordinal, size as u64, "pin-at-first-copy", why);
        DEMOTING.with(|d| {
            *d.borrow_mut() = Some(Demoting {
                at_first_copy: true,
                ..Demoting::new(site, python)
            });
        });
        return PinnedRequest::Demote;
    }
    if pin || flags & cuda::HOST_ALLOC_KEEP != 0 {
        let score = state
            .learner
            .as_ref()
            .map(|learner| learner.birth_score(&group, size));
        state.kept_live_bytes += size as u64;
        state.note_peak();
        state.counters.kept_pinned += 1;
        state.counters.kept_pinned_bytes += size as u64;
        state.record(
            call,
            &site,
            ordinal,
            size as u64,
            "kept-pinned",
            if pin { why } else { Why::Flags },
        );
        if state.learner.is_some() && flags & cuda::HOST_ALLOC_PINNED_ONLY == 0 {
            // Should the node's arbiter lease it no room, it is served pageable, and learned
            // as a demoted request is.
            DEMOTING.with(|d| *d.borrow_mut() = Some(Demoting::new(site, python)));
        }
        PinnedRequest::Pinned { score }
    } else {
        state.record(call, &site, ordinal, size as u64, "demoted", why);
        if state.learner.is_some() {
            DEMOTING.with(|d| *d.borrow_mut() = Some(Demoting::new(site, python)));
        }
        PinnedRequest::Demote
    }
}

/// A request kept pinned that the node's arbiter leased no room (`pinned_request` in
/// exports.rs): given back to CUDA (`freed`) and served pageable (`demoted`), or kept, its
/// flags needing it pinned.
pub fn kept_without_lease(size: usize, freed: bool, demoted: bool) {
    let mut guard = lock();
    let Some(state) = guard.as_mut() else { return };
    state.counters.node_refusals += 1;
    if freed {
        state.kept_live_bytes = state.kept_live_bytes.saturating_sub(size as u64);
        state.counters.kept_pinned -= 1;
        state.counters.kept_pinned_bytes -= size as u64;
    }
    if !demoted {
        state.counters.kept_without_lease += 1;
    }
}

/// A pinned request served pageable at `ptr`.
pub fn demoted(ptr: *mut c_void, size: usize, flags: u32) {
    let demoting = DEMOTING.with(|d| d.borrow_mut().take());
    let mut guard = lock();
    let Some(state) = guard.as_mut() else { return };
    state.demoted.insert(
        ptr as usize,
        Demoted {
            size,
            flags,
            pinned_on_demand: false,
            staging: demoting.as_ref().is_some_and(|d| d.staging),
        },
    );
    BELIEVED_PINNED.store(true, Ordering::Release);
    state.counters.demoted += 1;
    state.counters.demoted_bytes += size as u64;
    if let Some(demoting) = demoting
        && let Some(learner) = state.learner.as_mut()
    {
        learner.track(
            ptr as usize,
            size,
            &demoting.site,
            true,
            false,
            demoting.python,
        );
        if demoting.at_first_copy {
            learner.first_copy(ptr as usize, FirstCopy::Whole);
        }
    }
}

/// Whether a framework's staging buffer pinned by hotpin may be held (set when one is pinned,
/// cleared when they are let go): a framework's question about an exposed array looks for
/// them only then.
static STAGING_HELD: AtomicBool = AtomicBool::new(false);

/// A framework's staging buffer served pageable at `ptr` (`PinnedRequest::Staging`): pinned
/// at once, as the framework believes it is, and remembered as staging.
pub fn staging_born(ptr: *mut c_void, size: usize) {
    // Leased from the node's arbiter first, at the lowest density (the first to give back);
    // without a lease it stays pageable, its copies waited for, as a kept request's would.
    if !crate::lease::ask(ptr as usize, size, 0.0) {
        return;
    }
    // Marked staging at birth (`demoted`): pinned, it is counted and held as one.
    pin_believed_pinned(&[(ptr as usize, size, true)], false, true);
    let pinned = lock()
        .as_ref()
        .and_then(|state| state.demoted.get(&(ptr as usize)))
        .is_some_and(|demoted| demoted.pinned_on_demand);
    if !pinned {
        crate::lease::released(ptr as usize);
    }
}

/// A framework was just shown an array pinned that it would have staged (#44): from now on
/// it copies that array directly, so its staging buffers pinned by hotpin are let go (the
/// device waited for first: a copy from one may be in flight). One it stages through later
/// is a pinned request served pageable, its copies waited for, pinned again if they repay.
pub fn let_staging_go() {
    // Read first: a question about an exposed array comes at every copy, and a swap would
    // write the flag's line each time.
    if !STAGING_HELD.load(Ordering::Acquire) || !STAGING_HELD.swap(false, Ordering::AcqRel) {
        return;
    }
    let blocks: Vec<_> = {
        let mut guard = lock();
        let Some(state) = guard.as_mut() else { return };
        let starts: Vec<usize> = state
            .demoted
            .map()
            .iter()
            .filter(|(_, demoted)| demoted.staging)
            .map(|(&start, _)| start)
            .collect();
        let Some(learner) = state.learner.as_mut() else {
            return;
        };
        starts
            .into_iter()
            .filter_map(|start| learner.give_back(start))
            .collect()
    };
    let count = blocks.len() as u64;
    for block in blocks {
        // Relaxed, so that waiting for the device and unregistering disturb no capture of
        // the program's (a question may come while it captures a stream).
        cuda::with_relaxed_capture(|| unpin_block(block, true));
    }
    if let Some(state) = lock().as_mut() {
        state.counters.staging_let_go += count;
    }
}

/// `cudaFreeHost(ptr)`: true if `ptr` was demoted (and is to be freed to libc); a block
/// pinned on demand since is unregistered first.
pub fn free_demoted(ptr: *mut c_void) -> bool {
    let mut guard = lock_settled(ptr as usize);
    let Some(state) = guard.as_mut() else {
        return false;
    };
    let Some(demoted) = state.demoted.remove(&(ptr as usize)) else {
        return false;
    };
    // Auto mode pinned it (its copies repaid it, or on demand): marked pinned on demand too,
    // unless only a part of it was registered.
    let mut part = None;
    if let Some(learner) = state.learner.as_mut()
        && let Some(block) = learner.untrack(ptr as usize)
        && block.pin == Pin::Pinned
    {
        learner.budget.release(block.pinned_len() as u64);
        part = block.part;
    }
    drop(guard);
    if demoted.pinned_on_demand || part.is_some() {
        // cudaFreeHost waits for the device: no copy of it may still be in flight.
        cuda::context_synchronize();
    }
    if demoted.pinned_on_demand {
        unregister(ptr as usize);
    }
    if let Some((start, _)) = part {
        unregister(start);
    }
    true
}

/// `cudaHostRegister(ptr, size, flags)` from the call site `caller`: true if it is not to be
/// carried out (cold, or a block we registered already).
pub fn skip_register(ptr: *mut c_void, size: usize, flags: u32, caller: usize) -> bool {
    let python = python_frames();
    let mut guard = lock_settled(ptr as usize);
    let Some(state) = guard.as_mut() else {
        return false;
    };
    if state.registered.contains_key(&(ptr as usize)) {
        // Promoted by us before the program asked (PyTorch registers what it mallocs).
        state.skipped.insert(ptr as usize, (size, flags));
        return true;
    }
    let (site, ordinal) = state.identify(caller);
    let group = GroupKey::new(&site, &python);
    let (pin, why) = state.wants_pinned(&site, &group, ordinal, size as u64, true, false);
    if pin || flags & cuda::HOST_REGISTER_KEEP != 0 {
        state.record(
            "cudaHostRegister",
            &site,
            ordinal,
            size as u64,
            "kept-pinned",
            if pin { why } else { Why::Flags },
        );
        state.counters.kept_pinned += 1;
        state.counters.kept_pinned_bytes += size as u64;
        return false;
    }
    state.skipped.insert(ptr as usize, (size, flags));
    BELIEVED_PINNED.store(true, Ordering::Release);
    state.counters.skipped_registers += 1;
    state.record(
        "cudaHostRegister",
        &site,
        ordinal,
        size as u64,
        "skipped-register",
        why,
    );
    true
}

/// `cudaHostUnregister(ptr)`: true if the registration was not carried out by CUDA (so
/// there is nothing for CUDA to undo). One that another thread is registering on demand
/// (`claim_believed_pinned`) is waited for first, and then answered as it now stands.
pub fn skip_unregister(ptr: *mut c_void) -> bool {
    lock_settled(ptr as usize).as_mut().is_some_and(|state| {
        let skipped = state.skipped.remove(&(ptr as usize)).is_some();
        if skipped && let Some(learner) = state.learner.as_mut() {
            learner.program_let_go(ptr as usize);
        }
        skipped
    })
}

/// Registers every block in `ranges` that the program believes pinned and hotpin left
/// pageable, because the program is about to use it as only pinned memory can be used
/// (captured into a CUDA graph, mapped, asked about). A demoted block stays hotpin's to free;
/// a registration that had been skipped becomes the program's own again (its
/// `cudaHostUnregister` goes to CUDA), unless the learner tracks the block: then the
/// registration is the learner's, under the program's skipped one, as before the budget let
/// it go.
/// `room`: room is made under the budget first
/// ([`crate::online::Learner::room_on_demand`]); not during a
/// stream capture (no block is let go while one may be captured) nor inside a copy (whose
/// thread would wait for itself).
pub fn pin_on_demand(ranges: &[(usize, usize, bool)], room: bool) {
    pin_believed_pinned(ranges, true, room);
}

/// [`pin_on_demand`]; `ask_lease`: a demoted block is leased from the node's arbiter first
/// (a framework's staging buffer was leased by its caller). One the arbiter leases no room
/// is registered all the same, because the program's use needs it pinned (correctness before
/// the budget), and counted (`kept_without_lease`, `node_refusals`).
fn pin_believed_pinned(ranges: &[(usize, usize, bool)], ask_lease: bool, room: bool) {
    for &(start, len, _) in ranges {
        if start == 0 {
            continue;
        }
        while let Some(claim) = claim_believed_pinned(start, len) {
            let Claim {
                block,
                size,
                flags,
                demoted,
                claimed,
            } = claim;
            let mut undo = Undo {
                block,
                armed: claimed,
                listed: true,
                skipped: (!demoted).then_some((size, flags)),
            };
            // A part of it registered alone: let go, so that the whole can be (before the
            // lease is asked: the part's unregistration ends a lease at its start), then
            // claimed from the learner as a whole block is.
            let part = lock()
                .as_mut()
                .and_then(|s| s.learner.as_mut())
                .and_then(|l| l.let_part_go(block, block, size));
            if let Some(part) = part {
                cuda::with_relaxed_capture(|| unpin_block(part, true));
                undo.armed = claim_from_learner(block);
            }
            let claimed = undo.armed;
            // The budget a ceiling: room reserved, made first where there is none by letting
            // go blocks the learner pinned by its own choice and hid, before what the
            // program's use needs is registered (their copies in flight are waited for).
            if claimed && room {
                let mut displaced = crate::online::Decisions::default();
                if let Some(learner) = lock().as_mut().and_then(|s| s.learner.as_mut()) {
                    learner.room_on_demand(block, &mut displaced);
                }
                for held in displaced.unpin {
                    cuda::with_relaxed_capture(|| unpin_block(held, true));
                }
            }
            let leased = demoted && (!ask_lease || crate::lease::ask(block, size, 0.0));
            let register = || cuda::register_with(block as *mut c_void, size, flags);
            let registered = cuda::with_relaxed_capture(register) == Some(0);
            let mut guard = lock();
            let Some(state) = guard.as_mut() else {
                return;
            };
            let staging = state.demoted.get(&block).is_some_and(|d| d.staging);
            undo.armed = false;
            undo.listed = false;
            state.in_claim.remove(&block);
            // Kept pinned for the program's use (a mapped pointer, a captured copy): not let
            // go for the budget or a reclaim. A staging buffer is let go as the framework's
            // are (`let_staging_go`, which waits for the device first).
            // A skipped registration of a whole block the learner tracks, with no flags a
            // registration of ours must not keep: the learner holds it, and undoes it when
            // the block is freed, so it is ours with the program's on top again, as before
            // the budget let it go. The program's cudaHostUnregister is then not passed to
            // CUDA (which left our unregistration at the free to fail, 713, as the program's
            // last error, and the block's bytes in the budget after it was unpinned). Any
            // other is the program's own, never the learner's to pin or let go.
            let holdable = demoted
                || flags & (cuda::HOST_REGISTER_IO_MEMORY | cuda::HOST_REGISTER_READ_ONLY) == 0
                    && state
                        .learner
                        .as_ref()
                        .is_some_and(|l| l.tracks_whole(block, size));
            let held = match state.learner.as_mut() {
                Some(learner) if holdable => {
                    let held = learner.pinned_on_demand(block, registered, claimed, !staging);
                    if held && !demoted {
                        learner.hold_for_program(block);
                    }
                    held
                }
                Some(learner) => {
                    if claimed {
                        // Claimed from the learner with its part (`let_part_go`): the claim
                        // ends as a refused registration of its own, never tried again.
                        learner.pinned_on_demand(block, false, true, false);
                    }
                    if registered {
                        learner.registered_by_program(block);
                    }
                    false
                }
                None => false,
            };
            if held && !demoted {
                state.note_registered(block, size);
                state.skipped.insert(block, (size, flags));
            }
            if registered {
                state.counters.pinned_on_demand += 1;
                state.note_peak();
                if staging {
                    STAGING_HELD.store(true, Ordering::Release);
                }
                drop(guard);
                if demoted && !leased {
                    kept_without_lease(size, false, false);
                }
                continue;
            }
            // Left as it was: pageable, the program believing it pinned.
            state.counters.register_failures += 1;
            if let Some(demoted) = state.demoted.get_mut(&block) {
                demoted.pinned_on_demand = false;
            } else {
                state.skipped.insert(block, (size, flags));
            }
            drop(guard);
            if leased && ask_lease {
                crate::lease::released(block);
            }
            break;
        }
    }
}

/// Claims the demoted block at `block` from the learner (`Learner::claim_on_demand`), once
/// no other thread registers or lets it go: whether it was claimed (else not the learner's
/// to mark).
fn claim_from_learner(block: usize) -> bool {
    loop {
        let mut guard = lock();
        let Some(learner) = guard.as_mut().and_then(|s| s.learner.as_mut()) else {
            return false;
        };
        match learner.claim_on_demand(block) {
            OnDemand::Busy => {
                drop(guard);
                let_the_other_thread_finish();
            }
            OnDemand::Claimed => return true,
            OnDemand::Free => return false,
        }
    }
}

/// Waits a little for the thread registering or letting go of a block (`OnDemand::Busy`).
fn let_the_other_thread_finish() {
    std::thread::sleep(std::time::Duration::from_micros(100));
}

/// A claim of the learner's block at `block` (`Learner::claim_on_demand`), ended as refused
/// should the thread unwind before the registration's end is told (a panic `judged`
/// catches): else the block would stay `Registering`, and every free of it wait for ever.
/// The claim's listing (`State::in_claim`) is ended the same way, and a skipped
/// registration claimed is the program's skipped one again.
struct Undo {
    block: usize,
    armed: bool,
    /// Still listed in `State::in_claim`.
    listed: bool,
    /// A skipped registration claimed: its size and the program's flags.
    skipped: Option<(usize, u32)>,
}

impl Drop for Undo {
    fn drop(&mut self) {
        if !self.armed && !self.listed {
            return;
        }
        let mut guard = lock();
        let Some(state) = guard.as_mut() else {
            return;
        };
        if self.listed
            && state.in_claim.remove(&self.block).is_some()
            && let Some(skipped) = self.skipped
        {
            state.skipped.insert(self.block, skipped);
        }
        if self.armed
            && let Some(learner) = state.learner.as_mut()
        {
            learner.pinned_on_demand(self.block, false, true, false);
        }
    }
}

/// A block [`claim_believed_pinned`] handed to its caller to register.
struct Claim {
    block: usize,
    size: usize,
    flags: u32,
    /// A pinned request served pageable (hotpin's to free), not a skipped registration.
    demoted: bool,
    /// Marked `Registering` in the learner for the caller (`Learner::claim_on_demand`).
    claimed: bool,
}

/// The next block in `[start, start + len)` the program believes pinned that hotpin left
/// pageable, marked as pinned (a demoted block) or given back to the program (a skipped
/// registration) before the lock is let go, so that no other thread registers it too: the
/// caller registers it, and undoes the mark if that fails. A demoted block the learner is
/// registering or letting go of (no lock held while CUDA does) is waited for: once
/// registered whole it is marked pinned on demand, and is not returned.
fn claim_believed_pinned(start: usize, len: usize) -> Option<Claim> {
    loop {
        let mut guard = lock();
        let state = guard.as_mut()?;
        if overlapping(&state.in_claim, |size| *size, start, len).is_some() {
            // Being registered by another thread (out of `skipped`, or a demoted block
            // marked pinned on demand): once that ends, it is registered, or as before.
            drop(guard);
            let_the_other_thread_finish();
            continue;
        }
        let (block, size, flags) = state.believed_pinned_block(start, len)?;
        let demoted = state.demoted.contains_key(&block);
        let mut claimed = false;
        if demoted {
            if let Some(learner) = state.learner.as_mut() {
                match learner.claim_on_demand(block) {
                    OnDemand::Busy => {
                        drop(guard);
                        let_the_other_thread_finish();
                        continue;
                    }
                    OnDemand::Claimed => claimed = true,
                    OnDemand::Free => {}
                }
            }
            if let Some(demoted) = state.demoted.get_mut(&block) {
                demoted.pinned_on_demand = true;
            }
        } else {
            state.skipped.remove(&block);
        }
        state.in_claim.insert(block, size);
        return Some(Claim {
            block,
            size,
            flags,
            demoted,
            claimed,
        });
    }
}

/// The calling thread's Python frames, in auto mode (what it learns names the Python line
/// that made each block); the time taken is counted for the report.
fn python_frames() -> Vec<crate::python::PyFrame> {
    if !READS_LINES.load(Ordering::Acquire) {
        return Vec::new();
    }
    let began = std::time::Instant::now();
    let frames = crate::python::frames();
    if !frames.is_empty() {
        let took = began.elapsed().as_nanos() as u64;
        PYTHON_STACKS.fetch_add(1, Ordering::Relaxed);
        PYTHON_STACK_NS.fetch_add(took, Ordering::Relaxed);
        PYTHON_STACK_MAX_NS.fetch_max(took, Ordering::Relaxed);
    }
    frames
}
