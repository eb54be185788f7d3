//! What a run of the interposer counts, and the report file it writes at exit
//! (`HOTPIN_REPORT`, `hotpin run --report`): the state's counters, those the hooks count
//! without its lock, and each judged allocation's decision.

use std::{
    path::PathBuf,
    sync::atomic::{AtomicU64, Ordering},
};

use serde::Serialize;

/// Decisions kept for the report file, at most.
pub(crate) const MAX_LOGGED: usize = 100_000;

/// What became of one judged allocation, for the report file.
#[derive(Clone, Debug, Serialize)]
pub struct Decision {
    /// `malloc`, `cudaHostAlloc`, ...
    pub call: &'static str,
    pub site: String,
    pub ordinal: u32,
    pub size: u64,
    /// `promoted`, `pinned-from-cache`, `spare-from-cache`, `pageable`, `pageable-pressure`
    /// (to be pinned, but memory was critically short), `kept-pinned`, `demoted`,
    /// `register-failed`, `skipped-register`, `framework-staging`.
    pub action: &'static str,
    /// How the history judged it (`known`, `recycled`, `site-hot`, `hands-on`, `unknown`, or
    /// the mode).
    pub why: &'static str,
}

/// Counters, written to `HOTPIN_REPORT` at exit.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Counters {
    /// Pageable allocations registered in place, and their bytes.
    pub promoted: u64,
    pub promoted_bytes: u64,
    /// Pinned requests served pageable, and their bytes (from a history, those it pins are
    /// among them: served pageable at birth, registered whole at their first copy, then
    /// counted in `first_copy_pins` too).
    pub demoted: u64,
    pub demoted_bytes: u64,
    /// Pinned requests kept pinned, and their bytes.
    pub kept_pinned: u64,
    pub kept_pinned_bytes: u64,
    /// Registrations asked for by the program and not carried out (cold).
    pub skipped_registers: u64,
    /// Registrations of ours CUDA refused (the block stays pageable).
    pub register_failures: u64,
    /// Unregistrations of ours CUDA refused (a block not registered, or the runtime torn
    /// down): none is expected while the program runs.
    pub unregister_failures: u64,
    /// Judged allocations left pageable.
    pub pageable: u64,
    /// The most bytes registered by us at once (the cache included).
    pub peak_promoted_bytes: u64,
    /// Allocations served from the cache of freed pinned blocks (no new registration).
    pub cache_hits: u64,
    /// Auto mode: allocations not (yet) worth pinning served a freed pinned block of their
    /// size from the cache anyway: it costs no registration, and left there it would be
    /// pinned memory holding nothing (`module.to("cpu")` after `.to("cuda")` freed the last
    /// block), where neither a hot group that makes blocks again nor a size the history
    /// pins wants it. Let go unless copied twice within a second.
    pub spare_hits: u64,
    /// Of those, let go because not copied twice within a second.
    pub spares_let_go: u64,
    /// Auto mode: allocations to be pinned served a warm block, a freed pageable one of their
    /// size, its pages faulted in already: left pageable where they found no room (budget
    /// or lease), else registered.
    pub warm_hits: u64,
    /// Allocations the CUDA libraries made for themselves, left alone.
    pub cuda_internal: u64,
    /// Allocations to be pinned left pageable because memory was critically short (under
    /// 5% of MemTotal available), and times the cache was emptied because it was short
    /// (under 10%) or the budget was reached.
    pub pressure_fallbacks: u64,
    pub cache_releases: u64,
    /// Pinned requests served pageable, and registrations skipped, that were registered
    /// later because the program used them as only pinned memory can be used.
    pub pinned_on_demand: u64,
    /// Copies that touched memory hotpin registered behind the program's back: made to
    /// complete before they returned, as copies of pageable memory do; and those refused
    /// during stream capture, as CUDA refuses pageable memory there.
    pub copies_waited: u64,
    pub captures_refused: u64,
    /// Questions about a pointer (`cudaPointerGetAttributes`, ...) answered as for pageable
    /// memory, for memory hotpin registered behind the program's back.
    pub questions_hidden: u64,
    /// Questions of a framework that only chooses a copy path with the answer
    /// (`hotpin_policy::callers`): answered truly for a block hotpin registered whole (then
    /// exposed: never let go while held); about a block left pageable, which it then copies
    /// through its own staging buffer, counted as a copy of the block.
    pub questions_shown: u64,
    pub questions_staged: u64,
    /// A framework's staging buffers hotpin pinned at birth and let go once the arrays they
    /// staged were shown pinned (#44).
    pub staging_let_go: u64,
    /// Auto mode: blocks pinned because their copies repaid it, their bytes; blocks the
    /// budget let go for denser ones; candidates it refused.
    pub learned_pins: u64,
    pub learned_pin_bytes: u64,
    pub evictions: u64,
    pub budget_refusals: u64,
    /// Auto mode under a node arbiter: pins it did not lease (decided by the copies, or at
    /// birth), and blocks it reclaimed that were given back.
    pub node_refusals: u64,
    pub node_reclaims: u64,
    /// Auto mode: of the learned pins, those of a part of a large block (what its copies
    /// touched); parts let go because a copy would have crossed their edge.
    pub part_pins: u64,
    pub parts_let_go: u64,
    /// Auto mode: blocks pinned before their first copy because their group is trusted
    /// (`hotpin_policy::online`, "Trusted groups"), and those let go for not being copied
    /// again.
    pub trusted_pins: u64,
    pub trusted_let_go: u64,
    /// Auto mode from a history: blocks the history found cold but handing their pinned block
    /// on to the next hot block (`Verdict::HandOn`), pinned before their first copy.
    pub hands_on_pins: u64,
    /// Auto mode from a history (`HOTPIN_AT_FIRST_COPY`, on by default): blocks the history
    /// pins registered at their first copy rather than at birth (counted once registered).
    pub first_copy_pins: u64,
    /// Auto mode from a history (`HOTPIN_AHEAD`, on by default; `0` turns it off): blocks the
    /// history pins at their first copy, or found handing their pin on, registered ahead on
    /// the pinner thread shortly after their birth instead (counted once registered).
    pub ahead_pins: u64,
    /// The most bytes pinned at once by hotpin and by the program's pinned requests kept.
    pub peak_pinned_bytes: u64,
    /// The longest single registration call of ours, and unregistration call, on any
    /// thread, in nanoseconds.
    pub longest_register_ns: u64,
    pub longest_unregister_ns: u64,
    /// The longest a program thread waited for a registration of ours (the pinner thread's
    /// are not waited for), in nanoseconds.
    pub longest_thread_wait_ns: u64,
    /// Blocks auto mode had the pinner thread register, being larger than
    /// `HOTPIN_OFF_THREAD_ABOVE`; of those, the ones registered in chunks (`chunks`), larger
    /// than `HOTPIN_REGISTER_CHUNK`; copies cut at chunk edges; registrations in chunks let go
    /// because a copy that cannot be cut would have crossed an edge.
    pub off_thread_pins: u64,
    pub chunked_pins: u64,
    pub copies_cut: u64,
    pub chunked_let_go: u64,
    /// Freed blocks registered in chunks that the pinner thread unregistered and freed.
    pub off_thread_releases: u64,
    /// Blocks let go (by the budget, the node's arbiter) that were unregistered off the
    /// program's threads: the budget's, when registered in chunks, by the pinner thread.
    pub off_thread_unpins: u64,
    /// The longest a program thread spent letting a block go (its copies waited for, then
    /// unregistered), in nanoseconds.
    pub longest_thread_unpin_ns: u64,
    /// With turns (`turns`, `HOTPIN_BETWEEN_COPIES=1`): the longest a large copy was held
    /// back for a call and the longest the pinner waited for its turn, in nanoseconds; and
    /// how often a call and a large copy were let beside each other after waiting their
    /// limits (a count).
    pub longest_copy_held_ns: u64,
    pub longest_turn_wait_ns: u64,
    pub calls_beside_copies: u64,
    /// Registrations in chunks given up before any call, the copies before them having
    /// taken longer than `chunks::GRACE_LIMIT` to be queued (the block weighed again later).
    pub registrations_put_off: u64,
    /// Auto mode in CPython: allocations given their Python frames, and the time reading
    /// them took in all (python.rs).
    pub python_stacks: u64,
    pub python_stack_ns: u64,
    pub python_stack_max_ns: u64,
    /// Auto mode: times this process's memory map was read to name a caller's module (at
    /// the first caller, and at each in a module loaded since), and the time that took in all
    /// and at most, in the allocating threads (`hotpin::callsite::Resolver`).
    pub maps_reads: u64,
    pub maps_read_ns: u64,
    pub maps_read_max_ns: u64,
    /// Requests kept pinned without a lease of the node's arbiter: their flags need them
    /// pinned (or no memory was left to serve them pageable), or the program used one served
    /// pageable as only pinned memory can be used (pinned on demand). The daemon counts them
    /// as pins outside leases.
    pub kept_without_lease: u64,
    /// Allocator calls the dynamic loader made (its thread-local tables, its link maps),
    /// served by libc with nothing of ours touched (loader.rs).
    pub loader_calls: u64,
    /// The time the program's threads spent inside hotpin's own work until this report
    /// (lookups, counting, its locks, the CUDA calls it adds, Python lines; not its pinner
    /// and lease threads), in ns, and how many times they entered it (`guard::Busy`).
    pub busy_ns: u64,
    pub busy_entries: u64,
    /// The budget auto mode kept within (bytes), and why pinning was off, if it was.
    pub budget: Option<u64>,
    pub pinning_off: Option<String>,
}

/// Counted by the copy and question hooks without the lock; written into the report's
/// counters at exit.
pub(crate) static COPIES_WAITED: AtomicU64 = AtomicU64::new(0);
pub(crate) static CAPTURES_REFUSED: AtomicU64 = AtomicU64::new(0);
/// Copies cut at the edges of registrations made in chunks (the report's `copies_cut`).
pub(crate) static COPIES_CUT: AtomicU64 = AtomicU64::new(0);
pub(crate) static QUESTIONS_HIDDEN: AtomicU64 = AtomicU64::new(0);
pub(crate) static QUESTIONS_SHOWN: AtomicU64 = AtomicU64::new(0);
pub(crate) static QUESTIONS_STAGED: AtomicU64 = AtomicU64::new(0);
/// The longest single unregistration call of ours, on any thread (the report's
/// `longest_unregister_ns`).
pub(crate) static LONGEST_UNREGISTER_NS: AtomicU64 = AtomicU64::new(0);
/// Unregistrations of ours CUDA refused (the report's `unregister_failures`).
pub(crate) static UNREGISTER_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Python stacks read, and the time it took (the report's `python_stacks`,
/// `python_stack_ns`).
pub(crate) static PYTHON_STACKS: AtomicU64 = AtomicU64::new(0);
pub(crate) static PYTHON_STACK_NS: AtomicU64 = AtomicU64::new(0);
/// The longest one took (the first, which finds the interpreter, is one).
pub(crate) static PYTHON_STACK_MAX_NS: AtomicU64 = AtomicU64::new(0);

/// Writes the state's counters, with those counted without its lock, and its decisions to
/// `PATH.<pid>.json` (one file per process: children inherit the variable).
pub(crate) fn write_report(
    mode: &str,
    counters: Counters,
    log: &[Decision],
    path: &std::path::Path,
) {
    #[derive(Serialize)]
    struct Report<'a> {
        pid: u32,
        mode: &'a str,
        counters: &'a Counters,
        /// The node's arbiter, as this process saw it (auto mode, once it asked).
        leases: Option<crate::lease::LeaseCounters>,
        decisions: &'a [Decision],
    }
    let counters = Counters {
        copies_waited: COPIES_WAITED.load(Ordering::Relaxed),
        copies_cut: COPIES_CUT.load(Ordering::Relaxed),
        captures_refused: CAPTURES_REFUSED.load(Ordering::Relaxed),
        questions_hidden: QUESTIONS_HIDDEN.load(Ordering::Relaxed),
        questions_shown: QUESTIONS_SHOWN.load(Ordering::Relaxed),
        questions_staged: QUESTIONS_STAGED.load(Ordering::Relaxed),
        python_stacks: PYTHON_STACKS.load(Ordering::Relaxed),
        python_stack_ns: PYTHON_STACK_NS.load(Ordering::Relaxed),
        python_stack_max_ns: PYTHON_STACK_MAX_NS.load(Ordering::Relaxed),
        loader_calls: crate::loader::CALLS.load(Ordering::Relaxed) as u64,
        busy_ns: crate::guard::BUSY_NS.load(Ordering::Relaxed),
        busy_entries: crate::guard::BUSY_ENTRIES.load(Ordering::Relaxed),
        longest_unregister_ns: LONGEST_UNREGISTER_NS.load(Ordering::Relaxed),
        unregister_failures: UNREGISTER_FAILURES.load(Ordering::Relaxed),
        longest_copy_held_ns: crate::turns::LONGEST_HELD_NS.load(Ordering::Relaxed),
        longest_turn_wait_ns: crate::turns::LONGEST_TURN_WAIT_NS.load(Ordering::Relaxed),
        calls_beside_copies: crate::turns::CALLS_BESIDE_COPIES.load(Ordering::Relaxed),
        ..counters
    };
    let report = Report {
        pid: std::process::id(),
        mode,
        counters: &counters,
        leases: crate::lease::counters(),
        decisions: log,
    };
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{}.json", std::process::id()));
    let path = PathBuf::from(name);
    let written = serde_json::to_vec_pretty(&report)
        .map_err(std::io::Error::other)
        .and_then(|bytes| hotpin_history::files::write_atomically(&path, &bytes, 0o644));
    if let Err(error) = written {
        eprintln!("hotpin: cannot write {}: {error}", path.display());
    }
}
