//! What the interposer knows and decides: the mode, the history's verdicts, each call site's
//! allocation count (its ordinals), the blocks it pinned or demoted, and its counters.
//!
//! A forked child never takes the lock here (another thread of the parent may have held it
//! at the fork): every entry point checks [`forked`] first.

use std::{
    collections::BTreeMap,
    ffi::c_void,
    path::PathBuf,
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
};

use hotpin::{
    Mode,
    callsite::Resolver,
    pressure::{Level, Pressure},
};
use hotpin_history::store::{self, ProgramKey, Store};
use hotpin_policy::{
    hot::HotPolicy,
    set::{HotSet, Request, SiteKey, Why, decide},
};

use crate::{
    chunks,
    counters::{
        self, Counters, Decision, LONGEST_UNREGISTER_NS, MAX_LOGGED, PYTHON_STACK_MAX_NS,
        PYTHON_STACK_NS, PYTHON_STACKS,
    },
    cuda,
    guard::{Busy, judged, overlapping},
    online::{BlockRef, Decisions, GroupKey, Learner, Pin},
    real::__libc_free,
    settings::{STRICT_FAILED, say_once, size_setting, strict, switch_setting},
    shelf::Shelf,
};

/// Calls at or above this many bytes are judged (`HOTPIN_MALLOC_FLOOR`); until `init` ran,
/// none are.
pub static FLOOR: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Whether the interposer acts at all (not in profile mode, nor after a failed set-up).
pub static ENABLED: AtomicBool = AtomicBool::new(false);
/// Whether any block is registered by us: frees look nothing up until one is.
pub static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Whether any block the program believes pinned is pageable (a demoted request or a
/// registration not carried out): until one is, copies and questions about pointers look
/// nothing up for it.
pub static BELIEVED_PINNED: AtomicBool = AtomicBool::new(false);
/// Set in a forked child: CUDA does not survive fork, so no CUDA call of ours is made there.
static FORKED: AtomicBool = AtomicBool::new(false);

const DEFAULT_FLOOR: usize = 1 << 20;
/// A pinned request served from libc.
struct Demoted {
    size: usize,
    /// The request's flags (none, or portable): those it is pinned with on demand, and what
    /// `cudaHostGetFlags` answers for it.
    flags: u32,
    /// Registered since, because the program used it as only pinned memory can be used.
    pinned_on_demand: bool,
}

struct State {
    mode: Mode,
    hot: Option<HotSet>,
    budget: Option<u64>,
    resolver: Resolver,
    ordinals: rustc_hash::FxHashMap<SiteKey, u32>,
    /// Blocks we registered in place: address -> size. Ordered, so that a copy's host
    /// memory is looked up by interval.
    registered: BTreeMap<usize, usize>,
    registered_bytes: u64,
    /// Pinned requests served from libc: address -> size, and whether it was pinned on
    /// demand since (a question or a capture that needs it pinned).
    demoted: BTreeMap<usize, Demoted>,
    /// Program registrations not carried out (or of blocks registered by us already):
    /// address -> (size, the program's registration flags).
    skipped: BTreeMap<usize, (usize, u32)>,
    /// Blocks the program freed, kept registered (and in `registered`) for reuse.
    cache: Shelf,
    /// Auto mode: pageable blocks the program freed of a group that was to be pinned but
    /// found no room (the budget, or the node's lease): kept, their pages faulted in, for the
    /// next block of that size.
    warm: Shelf,
    /// What both shelves may hold together (`HOTPIN_CACHE`, default 1 GiB).
    cache_limit: usize,
    /// How short of memory the machine is (MemAvailable, sampled at most every 100 ms).
    pressure: Pressure,
    counters: Counters,
    log: Vec<Decision>,
    report: Option<PathBuf>,
    /// Use mode: judged allocations the history knew (by call site, ordinal and size, or as
    /// a recycled group or a hot site), and those it did not.
    matched: u64,
    judged_unknown: u64,
    /// Auto mode: what the program's copies taught so far.
    learner: Option<Learner>,
    /// Auto mode: where what was learned is written at exit (`HOTPIN_LEARN_TO`).
    learn_to: Option<PathBuf>,
    /// What that file was when this process started (runs sharing it merge at the end).
    learn_to_at_start: Option<crate::shared_history::Stamp>,
    /// Bytes of the program's pinned requests kept pinned and live (for the peak).
    kept_live_bytes: u64,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);
/// Allocations judged, for a cheap check in tests and the report.
static JUDGED: AtomicU64 = AtomicU64::new(0);
/// Auto mode is on: copies are counted (and may pin what they touch).
pub static LEARNING: AtomicBool = AtomicBool::new(false);
/// An allocation's Python lines are read (auto mode, and use mode from a history that judges
/// by them).
static READS_LINES: AtomicBool = AtomicBool::new(false);
/// Bumped whenever a block becomes or stops being registered behind the program's back: a
/// copy that saw it change while it ran is waited for (it may have been queued as a copy of
/// pinned memory).
pub static EPOCH: AtomicU64 = AtomicU64::new(0);
/// Guarded copies inside CUDA right now (auto mode): a block is unregistered only once none
/// is, or after a bound.
pub static COPIES_IN_CALL: AtomicUsize = AtomicUsize::new(0);
/// Auto mode has registered a part of a block on its own at least once: copies are then
/// checked for crossing a part's edge (`unpin_straddled`).
pub static PARTS: AtomicBool = AtomicBool::new(false);
/// Whether pinning pays on this machine: asked of CUDA once, at the first pin auto mode
/// decides (0 unknown, 1 pays, 2 does not).
static PLATFORM: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

thread_local! {
    /// The call site of the pinned request this thread is about to serve pageable.
    /// And its Python frames (CPython), read as it was judged.
    static DEMOTING: std::cell::RefCell<Option<(SiteKey, Vec<crate::python::PyFrame>)>> =
        const { std::cell::RefCell::new(None) };
}

fn lock() -> MutexGuard<'static, Option<State>> {
    STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Reads the environment and the history; on any problem says so once on stderr and leaves
/// the program untouched.
pub fn init() {
    let Some(_busy) = Busy::enter() else { return };
    match State::from_env() {
        Ok(Some(state)) => {
            let floor = size_setting("HOTPIN_MALLOC_FLOOR", DEFAULT_FLOOR);
            OFF_THREAD_ABOVE.store(
                size_setting(
                    "HOTPIN_OFF_THREAD_ABOVE",
                    OFF_THREAD_ABOVE.load(Ordering::Relaxed),
                ),
                Ordering::Relaxed,
            );
            chunks::set_chunk(size_setting(
                "HOTPIN_REGISTER_CHUNK",
                chunks::CHUNK.load(Ordering::Relaxed),
            ));
            crate::turns::ON.store(
                switch_setting("HOTPIN_BETWEEN_COPIES", false),
                Ordering::Relaxed,
            );
            let learning = state.learner.is_some();
            // Use mode reads Python lines too where its history judges by them (a recording
            // knows a Python program's large buffers only by the lines of their mappings).
            let reads_lines = learning || state.hot.as_ref().is_some_and(HotSet::knows_lines);
            let writes_at_exit = learning || state.report.is_some();
            *lock() = Some(state);
            if reads_lines {
                // The interpreter's functions are looked up now, at load, never from inside
                // an allocation (where the loader may be at work: loader.rs).
                crate::python::find_interpreter();
                READS_LINES.store(true, Ordering::Release);
            }
            if learning {
                // Every free at or above the floor is looked up: a learned block is forgotten.
                ACTIVE.store(true, Ordering::Release);
                LEARNING.store(true, Ordering::Release);
            }
            // SAFETY: registering plain extern "C" functions without captured state.
            unsafe {
                libc::pthread_atfork(None, None, Some(forked_child));
                libc::atexit(at_exit);
            }
            if writes_at_exit {
                crate::signals::init(|| {
                    let _ = write_what_was_learned();
                });
            }
            FLOOR.store(floor.max(1), Ordering::Relaxed);
            ENABLED.store(true, Ordering::Release);
        }
        Ok(None) => {}
        Err(why) if strict() => {
            eprintln!("hotpin: {why}; stopping (HOTPIN_STRICT)");
            // SAFETY: ends the process before the program starts, as strict mode asks.
            unsafe { libc::_exit(STRICT_FAILED) };
        }
        Err(why) => say_once(&format!("hotpin: {why}; the program runs untouched")),
    }
}

/// Writes what this run learned (auto mode) and the report, once, whichever comes first:
/// the program's exit, or a signal that ends it (`signals`). Returns whether a use-mode
/// history matched none of the program's allocations (said here); None where nothing was
/// written (a forked child, a second call, no state).
pub fn write_what_was_learned() -> Option<bool> {
    // A forked child never takes the lock (a thread of the parent may have held it at the
    // fork), nor writes the parent's report.
    if FORKED.load(Ordering::Relaxed) || WRITTEN.swap(true, Ordering::AcqRel) {
        return None;
    }
    let _busy = Busy::enter()?;
    let guard = lock();
    let state = guard.as_ref()?;
    let unmatched = state.mode == Mode::Use && state.matched == 0 && state.judged_unknown > 0;
    if unmatched {
        eprintln!(
            "hotpin: the history matched none of the {} allocations this program made at \
             or above the floor (a history of another program, of a build before this one, \
             or without libc call sites, such as the daemon's): nothing was pinned or \
             unpinned from it",
            state.judged_unknown
        );
    }
    if let (Some(learner), Some(path)) = (&state.learner, &state.learn_to)
        && let Err(error) = learner.write_history(path, state.learn_to_at_start)
    {
        eprintln!(
            "hotpin: cannot write what this run learned to {}: {error}",
            path.display()
        );
    }
    if let Some(path) = &state.report {
        let learner = state
            .learner
            .as_ref()
            .map(|l| (l.refusals, l.trusted_pins, l.trusted_let_go));
        counters::write_report(
            state.mode.name(),
            &state.counters,
            learner,
            &state.log,
            path,
        );
    }
    Some(unmatched)
}

/// What this run learned and its report were written already.
static WRITTEN: AtomicBool = AtomicBool::new(false);

extern "C" fn forked_child() {
    FORKED.store(true, Ordering::Relaxed);
    crate::signals::forked();
}

extern "C" fn at_exit() {
    let Some(unmatched) = write_what_was_learned() else {
        return;
    };
    if unmatched && strict() {
        // SAFETY: the program has finished and its report is written; its output still in
        // stdio's buffers goes out first (exit would flush it after this handler); then
        // strict mode makes this run a failure.
        unsafe {
            libc::fflush(std::ptr::null_mut());
            libc::_exit(STRICT_FAILED);
        }
    }
}

/// Use mode without `HOTPIN_HISTORY`: the latest history of this program (its executable,
/// build id and script) in the store (`HOTPIN_STORE`, else /var/lib/hotpin/histories), which
/// is only read.
fn stored_history() -> Result<PathBuf, String> {
    let root = store::default_root();
    let missing = || {
        format!(
            "use mode needs a history (HOTPIN_HISTORY, or one of this program in the store {})",
            root.display()
        )
    };
    let key = ProgramKey::of_current_process()
        .map_err(|e| format!("{}; {:#}", missing(), anyhow::Error::from(e)))?;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    Store::open_existing(&root)
        .histories_for_user(&key, uid)
        .map_err(|e| format!("{}; {:#}", missing(), anyhow::Error::from(e)))?
        .into_iter()
        .next()
        .ok_or_else(|| {
            format!(
                "{}: the store has none of {key} of this user or root",
                missing()
            )
        })
}

/// The hot set a run starts from: auto mode's history (`HOTPIN_HISTORY` if it exists, else
/// the program's latest in the store; none for a first run), use mode's (which must exist),
/// merged with `HOTPIN_MERGE`'s earlier runs; none in the other modes.
fn starting_hot_set(
    mode: Mode,
    policy: HotPolicy,
    budget: Option<u64>,
) -> Result<Option<HotSet>, String> {
    let read_once = |path: &std::path::Path| {
        format!(
            "HOTPIN_HISTORY={} can be read only once (a pipe or a device): give a file",
            path.display()
        )
    };
    match mode {
        Mode::Auto => {
            // A first run has no history yet: the file it will write may not exist.
            let path = std::env::var_os("HOTPIN_HISTORY")
                .map(PathBuf::from)
                .filter(|path| path.exists())
                .or_else(|| stored_history().ok());
            let Some(path) = path else {
                return Ok(None);
            };
            if hotpin_history::files::read_once(&path) {
                return Err(read_once(&path));
            }
            load_runs(&path, policy, budget).map(Some).map_err(|e| {
                format!(
                    "cannot start from the history {}: {:#}",
                    path.display(),
                    anyhow::Error::from(e)
                )
            })
        }
        Mode::Use => {
            let path = match std::env::var_os("HOTPIN_HISTORY") {
                Some(path) => PathBuf::from(path),
                None => stored_history()?,
            };
            if hotpin_history::files::read_once(&path) {
                return Err(read_once(&path));
            }
            load_runs(&path, policy, budget)
                .map(Some)
                .map_err(|e| format!("cannot use the history: {:#}", anyhow::Error::from(e)))
        }
        _ => Ok(None),
    }
}

/// The history at `path`, merged with the earlier runs of the program named in
/// `HOTPIN_MERGE` (paths, `:`-separated; `hotpin run --merge-runs N` sets it), by
/// `HotSet::from_histories`: per allocation and recycled group, hot where most runs found it
/// hot.
fn load_runs(
    path: &std::path::Path,
    policy: HotPolicy,
    budget: Option<u64>,
) -> Result<HotSet, hotpin_history::dump::DumpError> {
    let earlier: Vec<PathBuf> = std::env::var_os("HOTPIN_MERGE")
        .map(|paths| std::env::split_paths(&paths).collect())
        .unwrap_or_default();
    let mut paths = vec![path];
    paths.extend(earlier.iter().map(PathBuf::as_path));
    HotSet::load_merged(&paths, policy, budget)
}

/// Auto mode's budget when none is given: a quarter of the memory this process may use,
/// the cgroup's limit (`memory.max`, what a container may use) where there is one, else
/// the machine's available memory. None if neither can be read.
fn default_budget() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|text| {
            let path = text
                .lines()
                .find_map(|line| line.strip_prefix("0::"))?
                .to_string();
            let max = std::fs::read_to_string(format!("/sys/fs/cgroup{path}/memory.max")).ok()?;
            let current = std::fs::read_to_string(format!("/sys/fs/cgroup{path}/memory.current"))
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0);
            max.trim()
                .parse::<u64>()
                .ok()
                .map(|max| max.saturating_sub(current))
        });
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        });
    let room = match (cgroup, available) {
        (Some(c), Some(a)) => Some(c.min(a)),
        (c, a) => c.or(a),
    }?;
    Some(room / 4)
}

impl State {
    /// None without HOTPIN_MODE: nothing to do. Profile mode changes nothing (the tracer
    /// records the program as it is) and keeps no cache of freed blocks (the tracer must see
    /// every allocation and free).
    fn from_env() -> Result<Option<Self>, String> {
        let Some(name) = std::env::var("HOTPIN_MODE").ok() else {
            return Ok(None);
        };
        let mode = Mode::from_name(&name).ok_or_else(|| {
            format!("HOTPIN_MODE={name:?} is not one of auto, pin-none, pin-all, profile, use")
        })?;
        let budget = match std::env::var("HOTPIN_PINNED_BUDGET") {
            Ok(text) => Some(hotpin::parse_budget(&text).map_err(|e| e.to_string())?),
            Err(_) => None,
        };
        let policy = HotPolicy::configured()
            .map_err(|e| format!("cost file: {:#}", anyhow::Error::from(e)))?;
        let learn_to = std::env::var_os("HOTPIN_LEARN_TO").map(PathBuf::from);
        let learn_to_at_start = learn_to.as_deref().and_then(crate::shared_history::stamp);
        let hot = starting_hot_set(mode, policy, budget)?;
        let learner = (mode == Mode::Auto).then(|| {
            let limit = budget.or_else(default_budget);
            Learner::new(policy.cost.unwrap_or_default(), limit)
        });
        // Auto mode asks the node's arbiter before it pins (docs/leases.md).
        // A socket asked for (`--lease-socket`, `HOTPIN_LEASE_SOCKET`) that has no daemon is
        // said; the default one only with `HOTPIN_VERBOSE=1` (`hotpin run --verbose`): a
        // job wrapped on a node without the daemon runs quietly. The report says it always.
        let verbose = std::env::var_os("HOTPIN_VERBOSE").is_some_and(|v| v == "1");
        crate::lease::configure(
            match std::env::var("HOTPIN_LEASE_SOCKET") {
                _ if mode != Mode::Auto => None,
                Ok(path) if path == "off" => None,
                Ok(path) => Some((PathBuf::from(path), true)),
                Err(_) => Some((PathBuf::from(hotpin_lease::DEFAULT_SOCKET), verbose)),
            },
            crate::lease::Answers {
                give_back,
                lease_scores,
            },
        );
        let mut counters = Counters::default();
        if let Some(learner) = &learner {
            counters.budget = learner.budget.limit;
        }
        Ok(Some(Self {
            mode,
            hot,
            budget: if mode == Mode::Auto { None } else { budget },
            resolver: Resolver::default(),
            ordinals: Default::default(),
            registered: BTreeMap::new(),
            registered_bytes: 0,
            demoted: BTreeMap::new(),
            skipped: BTreeMap::new(),
            cache: Shelf::default(),
            warm: Shelf::default(),
            cache_limit: match mode {
                Mode::Profile => 0,
                // Said (or refused under --strict) when it is not a size, as every setting.
                _ => size_setting("HOTPIN_CACHE", 1 << 30),
            },
            pressure: Pressure::default(),
            counters,
            log: Vec::new(),
            report: std::env::var_os("HOTPIN_REPORT").map(PathBuf::from),
            matched: 0,
            judged_unknown: 0,
            learner,
            learn_to,
            learn_to_at_start,
            kept_live_bytes: 0,
        }))
    }

    /// The next allocation's identity at the call site `caller` returns to.
    fn identify(&mut self, caller: usize) -> (SiteKey, u32) {
        let site = self.resolver.resolve(caller);
        // The site is cloned only the first time it is seen.
        let ordinal = match self.ordinals.get_mut(&site) {
            Some(next) => {
                *next += 1;
                *next - 1
            }
            None => {
                self.ordinals.insert(site.clone(), 1);
                0
            }
        };
        (site, ordinal)
    }

    /// Whether an allocation of `size` bytes at `site` is to be pinned, and why: the policy's
    /// decision (`hotpin_policy::set::decide`), given what the history and auto mode's live
    /// groups say. `asked_pinned`: the program asked for pinned memory (cudaHostAlloc,
    /// cudaHostRegister and the driver's); `lazy`: such a request may be served pageable.
    fn wants_pinned(
        &self,
        site: &SiteKey,
        group: &GroupKey,
        ordinal: u32,
        size: u64,
        asked_pinned: bool,
        lazy: bool,
    ) -> (bool, Why) {
        let line = group.line.as_ref().map(|(file, line)| (&**file, *line));
        let judged = self
            .hot
            .as_ref()
            .map(|h| h.judge(site, line, ordinal, size));
        let group_hot = self.mode == Mode::Auto
            && self
                .learner
                .as_ref()
                .is_some_and(|l| l.group_hot(group, size as usize));
        let request = if asked_pinned {
            Request::Pinned { lazy }
        } else {
            Request::Pageable
        };
        let decision = decide(self.mode, judged, group_hot, request, size);
        (decision.pin, decision.why)
    }

    fn record(
        &mut self,
        call: &'static str,
        site: &SiteKey,
        ordinal: u32,
        size: u64,
        action: &'static str,
        why: Why,
    ) {
        JUDGED.fetch_add(1, Ordering::Relaxed);
        if why.matched() {
            self.matched += 1;
        } else if why == Why::Unknown {
            self.judged_unknown += 1;
        }
        if self.report.is_some() && self.log.len() < MAX_LOGGED {
            self.log.push(Decision {
                call,
                site: format!("{}+{:#x}", site.module, site.offset),
                ordinal,
                size,
                action,
                why: why.as_str(),
            });
        }
    }

    fn within_budget(&self, size: usize) -> bool {
        if let Some(learner) = &self.learner {
            return learner
                .budget
                .limit
                .is_none_or(|limit| learner.budget.used + size as u64 <= limit);
        }
        self.budget
            .is_none_or(|budget| self.registered_bytes + size as u64 <= budget)
    }

    /// Whether a freed block of `size` bytes may be kept on a shelf: both shelves stay within
    /// their limit and memory is not short.
    fn room_on_shelf(&mut self, size: usize) -> bool {
        self.cache.bytes() + self.warm.bytes() + size <= self.cache_limit
            && self.pressure.level() == Level::Normal
    }

    /// Keeps a freed registered block in the cache for the next allocation that fits, if
    /// there is room on the shelves; whether it was kept.
    fn try_cache(&mut self, ptr: usize, size: usize) -> bool {
        let kept = self.room_on_shelf(size);
        if kept {
            self.cache.put(ptr, size);
        }
        kept
    }

    /// Keeps a freed pageable block, warm, for the next allocation of its group that finds
    /// no room to be pinned, if there is room on the shelves; whether it was kept.
    fn try_warm(&mut self, ptr: usize, size: usize) -> bool {
        let kept = self.room_on_shelf(size);
        if kept {
            self.warm.put(ptr, size);
        }
        kept
    }

    /// Forgets a block registered behind the program's back (it is looked up as such no
    /// more); its size, if it was one.
    fn forget_registered(&mut self, start: usize) -> Option<usize> {
        let size = self.registered.remove(&start)?;
        self.registered_bytes -= size as u64;
        Some(size)
    }

    /// Notes the pinned bytes now (hotpin's and the program's kept requests) in the peak.
    fn note_peak(&mut self) {
        let ours = match &self.learner {
            Some(learner) => learner.budget.used.max(self.registered_bytes),
            None => self.registered_bytes,
        };
        self.counters.peak_pinned_bytes = self
            .counters
            .peak_pinned_bytes
            .max(ours + self.kept_live_bytes);
    }

    /// Takes every cached block out of the cache and the registered set (the program freed
    /// them already): the caller unregisters and frees them with [`release_blocks`], once
    /// the lock is let go.
    fn take_cache(&mut self) -> Vec<(usize, usize)> {
        if self.cache.bytes() == 0 {
            return Vec::new();
        }
        self.counters.cache_releases += 1;
        let blocks = self.cache.take_all();
        for &(ptr, size) in &blocks {
            self.forget_registered(ptr);
            if let Some(learner) = self.learner.as_mut() {
                learner.budget.release(size as u64);
            }
        }
        blocks
    }
}

/// Unregisters a block hotpin registered (whole, or a part of one); once CUDA did, its lease
/// from the node's arbiter, if it had one, ends.
fn unregister(start: usize) {
    let timed = |ptr: *mut c_void| {
        let began = std::time::Instant::now();
        let rc = cuda::unregister(ptr);
        LONGEST_UNREGISTER_NS.fetch_max(began.elapsed().as_nanos() as u64, Ordering::Relaxed);
        rc
    };
    // A block CUDA did not unregister (at exit the runtime may be torn down already) stays
    // pinned: its lease ends with the process, not with a false release.
    if chunks::unregister(start, timed) == Some(0) {
        crate::lease::released(start);
    }
}

/// A pinned block (or part) of auto mode at `start`, `len` bytes, that the program freed: no
/// longer looked up as registered, and its bytes let go from the budget.
fn forget_pinned(start: usize, len: usize) {
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
fn release_blocks(blocks: Vec<(usize, usize)>) {
    for (ptr, _) in blocks {
        unregister(ptr);
        // SAFETY: a libc block the program freed, which we kept registered until now.
        unsafe { __libc_free(ptr as *mut c_void) };
    }
}

/// Blocks taken off the shelves under the lock (memory short, the budget full, libc out of
/// memory), given back to CUDA and libc once the lock is let go.
#[derive(Default)]
struct Freed {
    /// Pinned blocks from the cache: unregistered, then freed.
    pinned: Vec<(usize, usize)>,
    /// Warm blocks: freed.
    warm: Vec<(usize, usize)>,
}

impl Freed {
    /// Everything both shelves hold.
    fn take_all(&mut self, state: &mut State) {
        self.pinned.extend(state.take_cache());
        self.warm.extend(state.warm.take_all());
    }

    /// Never called with the lock held (see [`release_blocks`]).
    fn release(self) {
        release_blocks(self.pinned);
        for (ptr, _) in self.warm {
            // SAFETY: a libc block the program freed, which we kept until now.
            unsafe { __libc_free(ptr as *mut c_void) };
        }
    }
}

/// What became of a new block that was not served from the cache.
struct Fate {
    /// To be registered now (pinned, and room for it).
    register: bool,
    /// To be pinned, but no room in the budget: tracked as such (kept warm when freed).
    no_room: bool,
    /// To be pinned, but memory is critically short.
    pressured: bool,
}

impl Fate {
    /// The fate of a new block of `size` bytes, `pin` or not, memory being as short as `level`.
    fn of(state: &State, pin: bool, level: Level, size: usize) -> Self {
        let register = pin && level != Level::Critical && state.within_budget(size);
        Self {
            register,
            no_room: pin && !register && level != Level::Critical,
            pressured: pin && level == Level::Critical,
        }
    }
}

impl State {
    /// A block to be pinned, served from the cache of freed pinned blocks: counted, recorded
    /// and tracked.
    fn served_from_cache(&mut self, birth: Birth, ptr: usize, size: usize) {
        self.counters.cache_hits += 1;
        self.record(
            birth.call,
            &birth.site,
            birth.ordinal,
            size as u64,
            "pinned-from-cache",
            birth.why,
        );
        if let Some(learner) = self.learner.as_mut() {
            learner.track(ptr, size, &birth.site, false, true, birth.python);
        }
    }

    /// A new block at `ptr` from libc or the warm shelf, of `fate`: recorded; if it is to be
    /// registered, its bytes held in the budget and it is handed back (with its density) for
    /// [`register_at_birth`]; else tracked as pageable.
    fn born(
        &mut self,
        mut birth: Birth,
        ptr: usize,
        size: usize,
        group: &GroupKey,
        fate: Fate,
    ) -> Option<Birth> {
        let (call, ordinal, why) = (birth.call, birth.ordinal, birth.why);
        if fate.register {
            // The budget is held for this block while it is registered without the lock.
            self.registered_bytes += size as u64;
            if let Some(learner) = self.learner.as_mut() {
                learner.budget.used += size as u64;
                birth.score = learner.birth_score(group, size);
            }
            return Some(birth);
        }
        if fate.pressured {
            self.counters.pressure_fallbacks += 1;
            self.record(
                call,
                &birth.site,
                ordinal,
                size as u64,
                "pageable-pressure",
                why,
            );
        } else {
            self.counters.pageable += 1;
            self.record(call, &birth.site, ordinal, size as u64, "pageable", why);
        }
        if let Some(learner) = self.learner.as_mut() {
            learner.track(ptr, size, &birth.site, false, false, birth.python);
            if fate.no_room {
                learner.no_room(ptr);
            } else if !fate.pressured && why.cold_by_history() {
                learner.cold_by_history(ptr);
            }
        }
        None
    }
}

/// An allocation of `size` bytes (aligned to `align`) at or above the floor, for the call
/// site `caller` returns to. If it is to be pinned and `reuse` allows it (not for calloc's
/// zeroed or realloc's moved blocks): served from the cache of freed pinned blocks if one fits
/// (within 10%), or, finding no room to pin, from the warm shelf. Else by `from_libc`, and
/// then registered in place if it is to be pinned and there is room.
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
    let birth = Birth {
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
    if pin
        && reuse
        && let Some(ptr) = state.cache.take_fitting(size, align)
    {
        state.served_from_cache(birth, ptr, size);
        drop(guard);
        freed.release();
        return ptr as *mut c_void;
    }
    if pin && !state.within_budget(size) {
        // Blocks kept for reuse are the first to go.
        freed.pinned.extend(state.take_cache());
    }
    let fate = Fate::of(state, pin, level, size);
    // To be pinned, but no room in the budget: a warm block of its size, if one was kept.
    let warm = (fate.no_room && reuse)
        .then(|| state.warm.take_fitting(size, align))
        .flatten();
    if warm.is_some() {
        state.counters.warm_hits += 1;
    }
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
    match birth {
        Some(birth) => register_at_birth(ptr, size, birth),
        None => ptr,
    }
}

/// A new block to be pinned at birth, as `allocate` judged it.
struct Birth {
    call: &'static str,
    site: SiteKey,
    ordinal: u32,
    why: Why,
    /// Its density, for the node's arbiter.
    score: f64,
    python: Vec<crate::python::PyFrame>,
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
            state.registered_bytes -= size as u64;
            if let Some(learner) = state.learner.as_mut() {
                learner.budget.release(size as u64);
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
        if !registered {
            learner.budget.release(size as u64);
        }
    }
    let action = if registered {
        state.registered.insert(ptr as usize, size);
        state.counters.promoted += 1;
        state.counters.promoted_bytes += size as u64;
        state.counters.peak_promoted_bytes = state
            .counters
            .peak_promoted_bytes
            .max(state.registered_bytes);
        state.note_peak();
        ACTIVE.store(true, Ordering::Release);
        "promoted"
    } else {
        state.registered_bytes -= size as u64;
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
            // its group, which will find no room either.
            if keep
                && block.no_room
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
}

/// Judges a pinned request of `size` bytes with `flags` from the call site `caller`.
pub fn pinned_request(call: &'static str, size: usize, flags: u32, caller: usize) -> PinnedRequest {
    let python = python_frames();
    let mut guard = lock();
    let Some(state) = guard.as_mut() else {
        return PinnedRequest::Pinned { score: None };
    };
    let (site, ordinal) = state.identify(caller);
    let group = GroupKey::new(&site, &python);
    let (pin, why) = state.wants_pinned(&site, &group, ordinal, size as u64, true, true);
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
            DEMOTING.with(|d| *d.borrow_mut() = Some((site, python)));
        }
        PinnedRequest::Pinned { score }
    } else {
        state.record(call, &site, ordinal, size as u64, "demoted", why);
        if state.learner.is_some() {
            DEMOTING.with(|d| *d.borrow_mut() = Some((site, python)));
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
    let mut guard = lock();
    let Some(state) = guard.as_mut() else { return };
    state.demoted.insert(
        ptr as usize,
        Demoted {
            size,
            flags,
            pinned_on_demand: false,
        },
    );
    BELIEVED_PINNED.store(true, Ordering::Release);
    state.counters.demoted += 1;
    state.counters.demoted_bytes += size as u64;
    if let Some((site, python)) = DEMOTING.with(|d| d.borrow_mut().take())
        && let Some(learner) = state.learner.as_mut()
    {
        learner.track(ptr as usize, size, &site, true, false, python);
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
/// there is nothing for CUDA to undo).
pub fn skip_unregister(ptr: *mut c_void) -> bool {
    lock()
        .as_mut()
        .is_some_and(|state| state.skipped.remove(&(ptr as usize)).is_some())
}

/// What hotpin changed about the host memory a copy or a question touches.
#[derive(Clone, Copy, Debug, Default)]
pub struct Touched {
    /// Some of it lies in a block hotpin registered that the program believes pageable.
    pub hidden: bool,
    /// Some of it lies in a block the program believes pinned that hotpin left pageable.
    pub believed_pinned: bool,
}

impl State {
    /// The block hotpin registered that holds part of `[start, start + len)` and that the
    /// program believes pageable (not one it registered itself on top of ours).
    fn hidden_block(&self, start: usize, len: usize) -> Option<usize> {
        overlapping(&self.registered, |size| *size, start, len)
            .map(|(block, _)| block)
            .filter(|block| !self.skipped.contains_key(block))
    }

    /// The pageable block the program believes pinned that holds part of `[start, start +
    /// len)`: (start, size, the registration flags that pin it as the program asked: a
    /// demoted request's (none, or portable), the program's own for a skipped registration).
    fn believed_pinned_block(&self, start: usize, len: usize) -> Option<(usize, usize, u32)> {
        if let Some((block, demoted)) = overlapping(&self.demoted, |d: &Demoted| d.size, start, len)
            && !demoted.pinned_on_demand
        {
            return Some((block, demoted.size, demoted.flags));
        }
        overlapping(&self.skipped, |(size, _)| *size, start, len)
            .filter(|(block, _)| !self.registered.contains_key(block))
            .map(|(block, &(size, flags))| (block, size, flags))
    }

    /// The flags of the pinned request served pageable that `ptr` lies in (pinned on demand
    /// or not), if any.
    fn in_demoted(&self, ptr: usize) -> Option<u32> {
        overlapping(&self.demoted, |d: &Demoted| d.size, ptr, 1).map(|(_, d)| d.flags)
    }
}

/// What hotpin changed about the memory in `ranges` (address, length).
pub fn touched(ranges: &[(usize, usize, bool)]) -> Touched {
    let guard = lock();
    let Some(state) = guard.as_ref() else {
        return Touched::default();
    };
    let mut touched = Touched::default();
    for &(start, len, _) in ranges {
        if start == 0 {
            continue;
        }
        touched.hidden |= state.hidden_block(start, len).is_some();
        touched.believed_pinned |= state.believed_pinned_block(start, len).is_some();
    }
    touched
}

/// The start of the block holding `ptr` that hotpin registered and the program believes
/// pageable, if any.
pub fn hidden_block(ptr: usize) -> Option<usize> {
    lock().as_ref()?.hidden_block(ptr, 1)
}

/// The flags of the pinned request hotpin served pageable that `ptr` lies in, if any.
pub fn in_demoted(ptr: usize) -> Option<u32> {
    lock().as_ref()?.in_demoted(ptr)
}

/// Registers every block in `ranges` that the program believes pinned and hotpin left
/// pageable, because the program is about to use it as only pinned memory can be used
/// (captured into a CUDA graph, mapped, asked about). A demoted block stays hotpin's to free;
/// a registration that had been skipped becomes the program's own again (its
/// `cudaHostUnregister` goes to CUDA).
pub fn pin_on_demand(ranges: &[(usize, usize, bool)]) {
    for &(start, len, _) in ranges {
        if start == 0 {
            continue;
        }
        while let Some((block, size, flags)) = claim_believed_pinned(start, len) {
            // A part of it registered alone: let go, so that the whole can be.
            let part = lock()
                .as_mut()
                .and_then(|s| s.learner.as_mut())
                .and_then(|l| l.let_part_go(block, block, size));
            if let Some(part) = part {
                unpin_block(part, true);
            }
            let register = || cuda::register_with(block as *mut c_void, size, flags);
            let registered = cuda::with_relaxed_capture(register) == Some(0);
            let mut guard = lock();
            let Some(state) = guard.as_mut() else {
                return;
            };
            if registered {
                state.counters.pinned_on_demand += 1;
                if let Some(learner) = state.learner.as_mut() {
                    learner.pinned_on_demand(block);
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
            break;
        }
    }
}

/// The next block in `[start, start + len)` the program believes pinned that hotpin left
/// pageable, marked as pinned (a demoted block) or given back to the program (a skipped
/// registration) before the lock is let go, so that no other thread registers it too: the
/// caller registers it, and undoes the mark if that fails.
fn claim_believed_pinned(start: usize, len: usize) -> Option<(usize, usize, u32)> {
    let mut guard = lock();
    let state = guard.as_mut()?;
    let (block, size, flags) = state.believed_pinned_block(start, len)?;
    if let Some(demoted) = state.demoted.get_mut(&block) {
        demoted.pinned_on_demand = true;
    } else {
        state.skipped.remove(&block);
    }
    Some((block, size, flags))
}

/// Whether CUDA calls of ours may be made in this process.
pub fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// The state's lock, once the block at `ptr` is not being registered or unregistered by
/// another thread (which holds no lock while CUDA does it): a block is never freed, nor
/// registered by the program, under one.
fn lock_settled(ptr: usize) -> MutexGuard<'static, Option<State>> {
    loop {
        let guard = lock();
        let registering = guard
            .as_ref()
            .and_then(|state| state.learner.as_ref())
            .and_then(|learner| learner.blocks.get(&ptr))
            .is_some_and(|block| matches!(block.pin, Pin::Registering | Pin::Unpinning));
        if !registering {
            return guard;
        }
        drop(guard);
        std::thread::yield_now();
    }
}

/// Auto mode: the copy of `ranges` (address, length, whether it was read) completed: its
/// heat is counted, and the blocks it makes worth pinning are pinned (displacing less
/// dense ones under the budget).
pub fn copied(ranges: &[(usize, usize, bool)]) {
    carry_out(learn_from(ranges, Learner::copied), false);
}

/// Auto mode, before a copy of `ranges` is made: a block it copies whole for the first time
/// is pinned first, on this thread, where its group is trusted (`Learner::before_first_copy`).
pub fn before_copy(ranges: &[(usize, usize, bool)]) {
    carry_out(learn_from(ranges, Learner::before_first_copy), true);
}

/// What the learner's `look` at each of `ranges` (address, length, read by the copy)
/// decided, under the lock.
fn learn_from(
    ranges: &[(usize, usize, bool)],
    look: fn(&mut Learner, usize, usize, bool, &mut Decisions),
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

/// Blocks (or parts) larger than this that auto mode decides to pin are registered by the
/// pinner thread, not the copying thread (`HOTPIN_OFF_THREAD_ABOVE`, bytes; default 128 MiB,
/// about 7 ms of registration on the H100): the program's thread does not wait, and the block
/// is copied as pageable memory (its copies waited for) until the registration is done.
pub static OFF_THREAD_ABOVE: AtomicUsize = AtomicUsize::new(128 << 20);
/// Blocks handed to the pinner thread to be let go and not yet unregistered.
static UNPINS_QUEUED: AtomicUsize = AtomicUsize::new(0);
/// What the pinner thread is handed.
enum Job {
    /// A block auto mode decided to pin.
    Pin(BlockRef),
    /// A whole block hidden from the program that the budget let go, registered in chunks.
    Unpin(BlockRef),
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
fn hand_to_pinner(job: Job) -> bool {
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

/// Whether pinning pays on this device, asked of CUDA once a context exists; said once where
/// it does not.
fn pinning_pays() -> bool {
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
fn pin_block(block: BlockRef, program_thread: bool) {
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
            state.registered.insert(block.start, block.len);
            state.registered_bytes += block.len as u64;
        }
        ACTIVE.store(true, Ordering::Release);
        EPOCH.fetch_add(1, Ordering::AcqRel);
    }
    let began = std::time::Instant::now();
    let register = |ptr: *mut c_void, len: usize| {
        if block.asked_pinned {
            cuda::register_with(ptr, len, 0)
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
        let done = chunks::register(block.start, block.len, register, cuda::unregister);
        if done.gave_up {
            put_off(&block);
            return;
        }
        (Some(done.rc), done.longest_call_ns)
    } else {
        if !program_thread {
            // Off the program's thread only: on it, the over-pinned program's registrations
            // took 29-36 ms instead of 3 with the pages faulted in first, and its run 1.29 s
            // instead of 1.04 (H100, docs/benchmarks.md).
            chunks::populate(block.start, block.len);
        }
        let rc = crate::turns::in_turn(|| register(block.start as *mut c_void, block.len));
        (rc, began.elapsed().as_nanos() as u64)
    };
    let waited = began.elapsed().as_nanos() as u64;
    let ok = rc == Some(0);
    let mut guard = lock();
    let Some(state) = guard.as_mut() else { return };
    if let Some(learner) = state.learner.as_mut() {
        learner.registered(&block, ok);
    }
    state.counters.longest_register_ns = state.counters.longest_register_ns.max(longest_call);
    if program_thread {
        state.counters.longest_thread_wait_ns = state.counters.longest_thread_wait_ns.max(waited);
    }
    if ok && !program_thread {
        state.counters.off_thread_pins += 1;
    }
    if ok && in_chunks {
        state.counters.chunked_pins += 1;
    }
    if ok {
        state.counters.learned_pins += 1;
        state.counters.learned_pin_bytes += block.len as u64;
        state.counters.peak_promoted_bytes = state
            .counters
            .peak_promoted_bytes
            .max(state.registered_bytes);
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
    drop(guard);
    if !ok {
        crate::lease::released(block.start);
    }
    if !block.asked_pinned {
        EPOCH.fetch_add(1, Ordering::AcqRel);
    }
}

/// A block the pinner thread gave up registering in chunks before any call (the copies
/// before it took too long to be queued): its lease ends, and it is pageable again, weighed
/// again later.
fn put_off(block: &BlockRef) {
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
fn unpin_block(block: BlockRef, program_thread: bool) {
    let began = std::time::Instant::now();
    if block.asked_pinned {
        cuda::context_synchronize();
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
        // (block, start of the copy, its length, whether chunk edges were crossed)
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
        // Registrations in chunks, found by address whatever their block's state, with the
        // copy's range that crosses them (none for a copy whose host memory is not known).
        let grids: Vec<_> = if all {
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
        };
        for (at, grid, start, len) in grids {
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
