//! Auto mode's registrations and their undoing: pinning a block it decided on (on the
//! program's thread, or handed to the pinner thread where it is large or an unregistration
//! is queued), putting one off, letting one go, and giving blocks taken off the shelves back
//! to CUDA and libc once the state's lock is let go. Whether pinning pays on this device is
//! asked here, once.

use std::{
    ffi::{c_int, c_void},
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use crate::{
    chunks,
    counters::{LONGEST_UNREGISTER_NS, UNREGISTER_FAILURES},
    cuda,
    guard::{Busy, judged},
    online::BlockRef,
    real::__libc_free,
    state::{ACTIVE, COPIES_IN_CALL, EPOCH, PARTS, State, lock},
};

/// Whether pinning pays on this machine: asked of CUDA once, at the first pin auto mode
/// decides (0 unknown, 1 pays, 2 does not).
pub(crate) static PLATFORM: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Unregisters a block hotpin registered (whole, or a part of one); once CUDA did, its lease
/// from the node's arbiter, if it had one, ends.
pub(crate) fn unregister(start: usize) {
    // A block CUDA did not unregister (at exit the runtime may be torn down already) stays
    // pinned: its lease ends with the process, not with a false release.
    if chunks::unregister(start, timed_unregister) == Some(0) {
        crate::lease::released(start);
    }
}

/// One unregistration call of ours: timed (the report's `longest_unregister_ns`), and
/// counted where CUDA refused it (`unregister_failures`).
fn timed_unregister(ptr: *mut c_void) -> Option<c_int> {
    let began = std::time::Instant::now();
    let rc = cuda::unregister(ptr);
    LONGEST_UNREGISTER_NS.fetch_max(began.elapsed().as_nanos() as u64, Ordering::Relaxed);
    if rc.is_some_and(|rc| rc != 0) {
        UNREGISTER_FAILURES.fetch_add(1, Ordering::Relaxed);
    }
    rc
}

/// A pinned block (or part) of auto mode at `start`, `len` bytes, that the program freed: no
/// longer looked up as registered, and its bytes let go from the budget.
pub(crate) fn forget_pinned(start: usize, len: usize) {
    if let Some(state) = lock().as_mut() {
        if let Some(learner) = state.learner.as_mut() {
            learner.budget.release(len as u64);
        }
        state.forget_registered(start);
    }
}

/// Unregisters and frees blocks [`State::take_cache`] took. Never called with the lock held:
/// no CUDA call is made under it, because CUDA calls back into the interposer (its own
/// allocations, the driver functions the runtime takes from us) while holding locks of its
/// own, and a thread holding ours while waiting for CUDA's would deadlock with it.
pub(crate) fn release_blocks(blocks: Vec<(usize, usize)>) {
    for (ptr, _) in blocks {
        unregister(ptr);
        // SAFETY: a libc block the program freed, which we kept registered until now.
        unsafe { __libc_free(ptr as *mut c_void) };
    }
}

/// Blocks taken off the shelves under the lock (memory short, the budget full, libc out of
/// memory), given back to CUDA and libc once the lock is let go.
#[derive(Default)]
pub(crate) struct Freed {
    /// Pinned blocks from the cache: unregistered, then freed.
    pub(crate) pinned: Vec<(usize, usize)>,
    /// Warm blocks: freed.
    pub(crate) warm: Vec<(usize, usize)>,
}

impl Freed {
    /// Everything both shelves hold.
    pub(crate) fn take_all(&mut self, state: &mut State) {
        self.pinned.extend(state.take_cache());
        self.warm.extend(state.warm.take_all());
    }

    /// Never called with the lock held (see [`release_blocks`]).
    pub(crate) fn release(self) {
        release_blocks(self.pinned);
        for (ptr, _) in self.warm {
            // SAFETY: a libc block the program freed, which we kept until now.
            unsafe { __libc_free(ptr as *mut c_void) };
        }
    }
}

/// Blocks handed to the pinner thread to be let go and not yet unregistered.
pub(crate) static UNPINS_QUEUED: AtomicUsize = AtomicUsize::new(0);
/// What the pinner thread is handed.
pub(crate) enum Job {
    /// A block auto mode decided to pin.
    Pin(BlockRef),
    /// A whole block hidden from the program that the budget let go, registered in chunks.
    Unpin(BlockRef),
    /// A block a history pins, to be registered ahead once `not_before` has come
    /// (`State::ahead`).
    Ahead {
        block: usize,
        size: usize,
        not_before: Instant,
    },
    /// A block the program freed whose registration at `start` (`len` bytes) is in chunks:
    /// unregistered here, its bytes let go from the budget, then `block` is freed to libc.
    Free {
        start: usize,
        len: usize,
        block: usize,
    },
}

/// The pinner thread's queue, once started.
static PINNER: Mutex<Option<std::sync::mpsc::Sender<Job>>> = Mutex::new(None);

/// Hands `job` to the pinner thread (started at the first); false if it cannot be started.
pub(crate) fn hand_to_pinner(job: Job) -> bool {
    let mut pinner = PINNER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if pinner.is_none() {
        let (queue, jobs) = std::sync::mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name("hotpin-pinner".into())
            .spawn(move || {
                crate::signals::block_all_on_this_thread();
                let _busy = Busy::enter();
                crate::turns::pinner_thread();
                // A panic in one job (a bug of ours) is reported and the next is done: the
                // thread lives on, and the count of queued unpins stays right.
                for job in jobs {
                    match job {
                        Job::Pin(block) => judged(|| pin_block(block, false)),
                        Job::Ahead {
                            block,
                            size,
                            not_before,
                        } => {
                            let wait = not_before.saturating_duration_since(Instant::now());
                            if !wait.is_zero() {
                                std::thread::sleep(wait);
                            }
                            judged(|| pin_ahead(block, size));
                        }
                        Job::Unpin(block) => {
                            judged(|| unpin_block(block, false));
                            UNPINS_QUEUED.fetch_sub(1, Ordering::AcqRel);
                        }
                        Job::Free { start, len, block } => judged(|| {
                            unregister(start);
                            forget_pinned(start, len);
                            // SAFETY: a libc block the program freed, which we kept until
                            // its registration ended.
                            unsafe { __libc_free(block as *mut c_void) };
                            if let Some(state) = lock().as_mut() {
                                state.counters.off_thread_releases += 1;
                            }
                        }),
                    }
                }
            });
        if started.is_err() {
            return false;
        }
        *pinner = Some(queue);
    }
    pinner.as_ref().is_some_and(|queue| queue.send(job).is_ok())
}

/// How long after its birth a block is registered ahead (`State::ahead`): the program has then
/// usually written it (`torch.zeros`, a layer's initialisation), so its pages are in.
pub(crate) const AHEAD_AFTER: Duration = Duration::from_millis(20);

/// Hands the block of `size` bytes just born at `block` to the pinner thread, to be
/// registered ahead `AHEAD_AFTER` from now; left for its first copy where the thread cannot
/// be started. Jobs are done in order: a job queued behind ahead jobs waits for their
/// registrations (each block's populate and registration, in one call).
pub(crate) fn pin_ahead_later(block: usize, size: usize) {
    let not_before = Instant::now() + AHEAD_AFTER;
    let _ = hand_to_pinner(Job::Ahead {
        block,
        size,
        not_before,
    });
}

/// On the pinner thread: registers the block of `size` bytes at `at` ahead, in one call, if
/// the learner still has it pageable and uncopied (`Learner::ahead`), and lets go what that
/// displaces under the budget. Not where the program has no context yet (the block is then
/// left for its first copy), nor where pinning pays nothing, nor while an unregistration is
/// queued (what is registered would hold more than the budget until it is done: the block
/// is left for its first copy, as `learning::carry_out` puts off a pin then).
fn pin_ahead(at: usize, size: usize) {
    if UNPINS_QUEUED.load(Ordering::Acquire) > 0
        || !matches!(cuda::pinning_does_not_pay(), Some(None))
    {
        return;
    }
    let decisions = {
        let mut guard = lock();
        let Some(learner) = guard.as_mut().and_then(|s| s.learner.as_mut()) else {
            return;
        };
        let mut decisions = crate::online::Decisions::default();
        learner.ahead(at, size, &mut decisions);
        decisions
    };
    for block in decisions.unpin {
        unpin_block(block, false);
    }
    for block in decisions.pin {
        // In one call, as the copying thread would have registered it: in chunks, every
        // later copy of it would be cut at their edges.
        pin_block(
            BlockRef {
                one_call: true,
                ..block
            },
            false,
        );
    }
}

/// Whether pinning pays on this device, asked of CUDA once a context exists; said once where
/// it does not.
pub(crate) fn pinning_pays() -> bool {
    match PLATFORM.load(Ordering::Acquire) {
        1 => return true,
        2 => return false,
        _ => {}
    }
    // Not known until the program made a context: asked again at the next pin.
    let Some(why) = cuda::pinning_does_not_pay() else {
        return true;
    };
    PLATFORM.store(if why.is_some() { 2 } else { 1 }, Ordering::Release);
    if let Some(why) = why {
        eprintln!("hotpin: {why}: pinning pays nothing here, so auto mode pins nothing new");
        if let Some(state) = lock().as_mut() {
            state.counters.pinning_off = Some(why);
        }
        return false;
    }
    true
}

/// Pins one block auto mode decided on, on this thread (`program_thread`: the copying
/// thread, which waits; else the pinner thread). A block hidden from the program is marked
/// registered before CUDA is asked, so that copies from then on are waited for; one the
/// program asked pinned is marked pinned on demand once it is.
pub(crate) fn pin_block(block: BlockRef, program_thread: bool) {
    if !crate::lease::ask(block.start, block.len, block.score) {
        if let Some(state) = lock().as_mut() {
            state.counters.node_refusals += 1;
            if let Some(learner) = state.learner.as_mut() {
                learner.put_off(&block);
            }
        }
        return;
    }
    if !block.asked_pinned {
        if let Some(state) = lock().as_mut() {
            // Its bytes are in the budget since the learner admitted it.
            state.note_registered(block.start, block.len);
        }
        ACTIVE.store(true, Ordering::Release);
        EPOCH.fetch_add(1, Ordering::AcqRel);
    }
    // A pinned request served pageable is registered with the flags it asked (none, or
    // portable), as it is pinned on demand: cudaHostGetFlags then answers as it would have.
    let asked_flags = if block.asked_pinned {
        lock()
            .as_ref()
            .and_then(|state| state.in_demoted(block.block))
            .unwrap_or(0)
    } else {
        0
    };
    let began = std::time::Instant::now();
    let register = |ptr: *mut c_void, len: usize| {
        if block.asked_pinned {
            cuda::register_with(ptr, len, asked_flags)
        } else {
            cuda::register(ptr, len)
        }
    };
    let in_chunks = !program_thread && !block.one_call && chunks::chunked(block.len);
    // A copy that looked before this part existed must not be queued across its edge.
    if block.part && !in_chunks && !chunks::grace() {
        put_off(&block);
        return;
    }
    let (rc, longest_call) = if in_chunks {
        let done = chunks::register(block.start, block.len, register, timed_unregister);
        if done.gave_up {
            put_off(&block);
            return;
        }
        (Some(done.rc), done.longest_call_ns)
    } else {
        if !program_thread {
            // Off the program's thread only: on it, the over-pinned program's registrations
            // took 29-36 ms instead of 3 with the pages faulted in first, and its run 1.29 s
            // instead of 1.04 (H100, docs/bench/history.md).
            chunks::populate(block.start, block.len);
        }
        let rc = crate::turns::in_turn(|| register(block.start as *mut c_void, block.len));
        (rc, began.elapsed().as_nanos() as u64)
    };
    let waited = began.elapsed().as_nanos() as u64;
    let ok = rc == Some(0);
    let timing = Timing {
        program_thread,
        in_chunks,
        longest_call,
        waited,
    };
    if !note_registration(&block, ok, timing) {
        return;
    }
    if !ok {
        crate::lease::released(block.start);
    }
    if !block.asked_pinned {
        EPOCH.fetch_add(1, Ordering::AcqRel);
    }
}

/// How a registration was made, for the counters.
struct Timing {
    program_thread: bool,
    in_chunks: bool,
    /// Its longest CUDA call, and how long its thread waited for it all, in ns.
    longest_call: u64,
    waited: u64,
}

/// What a registration's outcome changes under the lock: the learner told, the counters, a
/// failed one no longer looked up as registered. False where the state is gone (exit).
fn note_registration(block: &BlockRef, ok: bool, timing: Timing) -> bool {
    let mut guard = lock();
    let Some(state) = guard.as_mut() else {
        return false;
    };
    if let Some(learner) = state.learner.as_mut() {
        learner.registered(block, ok);
    }
    let counters = &mut state.counters;
    counters.longest_register_ns = counters.longest_register_ns.max(timing.longest_call);
    if timing.program_thread {
        counters.longest_thread_wait_ns = counters.longest_thread_wait_ns.max(timing.waited);
    }
    if ok && !timing.program_thread {
        counters.off_thread_pins += 1;
    }
    if ok && timing.in_chunks {
        counters.chunked_pins += 1;
    }
    if ok {
        state.counters.learned_pins += 1;
        state.counters.learned_pin_bytes += block.len as u64;
        state.note_peak();
        if block.part {
            PARTS.store(true, Ordering::Release);
            state.counters.part_pins += 1;
        } else if let Some(demoted) = state.demoted.get_mut(&block.block) {
            demoted.pinned_on_demand = true;
        }
    } else {
        state.counters.register_failures += 1;
        if !block.asked_pinned {
            state.forget_registered(block.start);
        }
    }
    true
}

/// A block the pinner thread gave up registering in chunks before any call (the copies
/// before it took too long to be queued): its lease ends, and it is pageable again, weighed
/// again later.
pub(crate) fn put_off(block: &BlockRef) {
    crate::lease::released(block.start);
    if let Some(state) = lock().as_mut() {
        state.counters.registrations_put_off += 1;
        if !block.asked_pinned {
            state.forget_registered(block.start);
        }
        if let Some(learner) = state.learner.as_mut() {
            learner.put_off(block);
        }
    }
    if !block.asked_pinned {
        EPOCH.fetch_add(1, Ordering::AcqRel);
    }
}

/// Unpins a block the budget let go. One hidden from the program stays looked up as
/// registered until it is unregistered, so that every copy of it meanwhile is waited for, as
/// a copy of pageable memory is: it is unregistered once no guarded copy is inside CUDA (at
/// most 20 ms later), then forgotten (a copy that saw the change is waited for after it). One
/// the program believes pinned may have copies in flight: the context is synchronized first.
/// `program_thread`: made on a thread of the program, which waits (the report's
/// `longest_thread_unpin_ns`); else on the pinner thread (`off_thread_unpins`).
pub(crate) fn unpin_block(block: BlockRef, program_thread: bool) {
    let began = std::time::Instant::now();
    // The program's asynchronous copies of memory it believes pinned (asked pinned, or
    // registered by it under our registration) are not waited for: they may still run, and
    // memory is not unregistered under a copy in flight.
    let believed_pinned = block.asked_pinned
        || lock()
            .as_ref()
            .is_some_and(|state| state.program_registered_within(block.start, block.len));
    if believed_pinned {
        cuda::context_synchronize();
    }
    if block.asked_pinned {
        if !block.part
            && let Some(demoted) = lock()
                .as_mut()
                .and_then(|s| s.demoted.get_mut(&block.block))
        {
            demoted.pinned_on_demand = false;
        }
    } else {
        while COPIES_IN_CALL.load(Ordering::Acquire) > 0
            && began.elapsed() < std::time::Duration::from_millis(20)
        {
            std::thread::yield_now();
        }
    }
    unregister(block.start);
    let took = began.elapsed().as_nanos() as u64;
    if let Some(state) = lock().as_mut() {
        if !block.asked_pinned {
            state.forget_registered(block.start);
        }
        if let Some(learner) = state.learner.as_mut() {
            learner.unpinned(block.block);
        }
        state.counters.evictions += 1;
        if program_thread {
            state.counters.longest_thread_unpin_ns =
                state.counters.longest_thread_unpin_ns.max(took);
        } else {
            state.counters.off_thread_unpins += 1;
        }
    }
    EPOCH.fetch_add(1, Ordering::AcqRel);
}
