//! What the interposer knows, under one lock: the mode, the history's verdicts, each call
//! site's allocation count (its ordinals), the block tables (registered, demoted, skipped,
//! the cache and warm shelves), the learner, and the counters; set up from the environment at
//! load, and written out (what was learned, the report) at exit. The files above it act on
//! it: `allocations` (the program's allocation calls), `learning` (its copies, the arbiter's
//! questions) and `pinner` (registrations and their undoing); none of them is imported here.
//!
//! A forked child never takes the lock here (another thread of the parent may have held it
//! at the fork): every entry point checks [`forked`] first.

use std::{
    collections::BTreeMap,
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
    online::Budget,
    set::{HotSet, Request, SiteKey, Why, decide},
};

use crate::{
    believed::Believed,
    chunks,
    counters::{self, Counters, Decision, MAX_LOGGED},
    guard::{Busy, overlapping},
    online::{FirstCopy, GroupKey, Learner, Pin},
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
/// How many blocks we registered behind the program's back now (`State::registered`'s
/// length, kept by [`State::note_registered`] and [`State::forget_registered`] under the
/// lock, before the registration's `EPOCH`): while none is, a copy has no promise of
/// pageable memory to keep for them and looks nothing up. Not [`ACTIVE`], which auto mode
/// sets at its start so that frees are looked up.
pub static HIDDEN: AtomicUsize = AtomicUsize::new(0);
/// Whether any block the program believes pinned is pageable (a demoted request or a
/// registration not carried out): until one is, copies and questions about pointers look
/// nothing up for it.
pub static BELIEVED_PINNED: AtomicBool = AtomicBool::new(false);
/// Set in a forked child: CUDA does not survive fork, so no CUDA call of ours is made there.
static FORKED: AtomicBool = AtomicBool::new(false);

const DEFAULT_FLOOR: usize = 1 << 20;
/// A pinned request served from libc.
pub(crate) struct Demoted {
    pub(crate) size: usize,
    /// The request's flags (none, or portable): those it is pinned with on demand, and what
    /// `cudaHostGetFlags` answers for it.
    pub(crate) flags: u32,
    /// Registered since, because the program used it as only pinned memory can be used.
    pub(crate) pinned_on_demand: bool,
    /// A framework's staging buffer hotpin pinned at birth (#44): let go once the arrays it
    /// stages are shown pinned (`allocations::let_staging_go`).
    pub(crate) staging: bool,
}

pub(crate) struct State {
    pub(crate) mode: Mode,
    pub(crate) hot: Option<HotSet>,
    /// Outside auto mode, the pinned bytes held against the budget (auto mode's tally is its
    /// learner's, whose admissions also displace): read through [`State::budget`].
    own_budget: Budget,
    pub(crate) resolver: Resolver,
    pub(crate) ordinals: hotpin_policy::ordinals::Ordinals,
    /// Blocks we registered in place: address -> size. Ordered, so that a copy's host
    /// memory is looked up by interval. Changed through [`State::note_registered`] and
    /// [`State::forget_registered`], which keep `registered_bytes`.
    pub(crate) registered: BTreeMap<usize, usize>,
    /// Their bytes (hidden from the program: promotions, the cache): `peak_promoted_bytes`.
    registered_bytes: u64,
    /// Pinned requests served from libc: address -> size, and whether it was pinned on
    /// demand since (a question or a capture that needs it pinned).
    pub(crate) demoted: Believed<Demoted>,
    /// Program registrations not carried out (or of blocks registered by us already):
    /// address -> (size, the program's registration flags).
    pub(crate) skipped: Believed<(usize, u32)>,
    /// Blocks a thread has claimed to register on demand (`allocations::pin_on_demand`) while
    /// CUDA registers them, no lock held: a skipped registration (out of `skipped`
    /// meanwhile) or a demoted request (marked pinned on demand already): start -> size. The
    /// program's own calls about that block ([`lock_settled`]: its free, cudaFreeHost,
    /// registration, unregistration) and other claims of memory in it wait for the claim to
    /// end.
    pub(crate) in_claim: BTreeMap<usize, usize>,
    /// Blocks the program freed, kept registered (and in `registered`) for reuse.
    pub(crate) cache: Shelf,
    /// Auto mode: pageable blocks the program freed of a group that was to be pinned but
    /// found no room (the budget, or the node's lease), and one at a time of a size the
    /// history pins: kept, their pages faulted in, for the next block of that size to be
    /// pinned (left pageable where it finds no room, else registered on it).
    pub(crate) warm: Shelf,
    /// What both shelves may hold together (`HOTPIN_CACHE`, default 1 GiB).
    pub(crate) cache_limit: usize,
    /// Auto mode with a history (`HOTPIN_AT_FIRST_COPY`, on by default; `0` turns it off): a
    /// block the history pins that no cached or warm block serves is registered at its first
    /// copy rather than at birth (`allocations::allocate`), its pages then in where the
    /// program wrote it first.
    pub(crate) at_first_copy: bool,
    /// Auto mode with a history (`HOTPIN_AHEAD`, on by default; `0` turns it off): a block left
    /// for its first copy, or handing its pin on, is registered ahead by the pinner thread
    /// `pinner::AHEAD_AFTER` after its birth (once the program has likely written it), off
    /// the program's thread (`Learner::ahead`).
    pub(crate) ahead: bool,
    /// How short of memory the machine is (MemAvailable, sampled at most every 100 ms).
    pub(crate) pressure: Pressure,
    pub(crate) counters: Counters,
    pub(crate) log: Vec<Decision>,
    pub(crate) report: Option<PathBuf>,
    /// Use mode: judged allocations the history knew (by call site, ordinal and size, or as
    /// a recycled group or a hot site), and those it did not.
    pub(crate) matched: u64,
    pub(crate) judged_unknown: u64,
    /// Auto mode: what the program's copies taught so far.
    pub(crate) learner: Option<Learner>,
    /// Auto mode: where what was learned is written at exit (`HOTPIN_LEARN_TO`).
    pub(crate) learn_to: Option<PathBuf>,
    /// What that file was when this process started (runs sharing it merge at the end).
    pub(crate) learn_to_at_start: Option<crate::shared_history::Stamp>,
    /// Bytes of the program's pinned requests kept pinned and live (for the peak).
    pub(crate) kept_live_bytes: u64,
}

pub(crate) static STATE: Mutex<Option<State>> = Mutex::new(None);
/// Allocations judged, for a cheap check in tests and the report.
pub(crate) static JUDGED: AtomicU64 = AtomicU64::new(0);
/// Auto mode is on: copies are counted (and may pin what they touch).
pub static LEARNING: AtomicBool = AtomicBool::new(false);
/// An allocation's Python lines are read (auto mode, and use mode from a history that judges
/// by them).
pub(crate) static READS_LINES: AtomicBool = AtomicBool::new(false);
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
pub(crate) fn lock() -> MutexGuard<'static, Option<State>> {
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
        let learner = state.learner.as_ref();
        let counters = Counters {
            budget_refusals: learner.map_or(0, |l| l.refusals),
            trusted_pins: learner.map_or(0, |l| l.trusted_pins),
            trusted_let_go: learner.map_or(0, |l| l.trusted_let_go),
            hands_on_pins: learner.map_or(0, |l| l.hands_on_pins),
            first_copy_pins: learner.map_or(0, |l| l.first_copy_pins),
            ahead_pins: learner.map_or(0, |l| l.ahead_pins),
            spares_let_go: learner.map_or(0, |l| l.spares_let_go),
            maps_reads: state.resolver.maps_reads,
            maps_read_ns: state.resolver.maps_read_ns,
            maps_read_max_ns: state.resolver.maps_read_max_ns,
            ..state.counters.clone()
        };
        counters::write_report(state.mode.name(), counters, &state.log, path);
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
    pub(crate) fn from_env() -> Result<Option<Self>, String> {
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
        crate::lease::configure(match std::env::var("HOTPIN_LEASE_SOCKET") {
            _ if mode != Mode::Auto => None,
            Ok(path) if path == "off" => None,
            Ok(path) => Some((PathBuf::from(path), true)),
            Err(_) => Some((PathBuf::from(hotpin_lease::DEFAULT_SOCKET), verbose)),
        });
        let mut counters = Counters::default();
        if let Some(learner) = &learner {
            counters.budget = learner.budget.limit;
        }
        Ok(Some(Self {
            mode,
            hot,
            own_budget: Budget::new(if mode == Mode::Auto { None } else { budget }),
            resolver: Resolver::default(),
            ordinals: Default::default(),
            registered: BTreeMap::new(),
            registered_bytes: 0,
            demoted: Believed::new(|d: &Demoted| d.size),
            skipped: Believed::new(|&(size, _)| size),
            in_claim: BTreeMap::new(),
            cache: Shelf::default(),
            warm: Shelf::default(),
            cache_limit: match mode {
                Mode::Profile => 0,
                // Said (or refused under --strict) when it is not a size, as every setting.
                _ => size_setting("HOTPIN_CACHE", 1 << 30),
            },
            at_first_copy: learner.is_some() && switch_setting("HOTPIN_AT_FIRST_COPY", true),
            ahead: learner.is_some() && switch_setting("HOTPIN_AHEAD", true),
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
    pub(crate) fn identify(&mut self, caller: usize) -> (SiteKey, u32) {
        let site = self.resolver.resolve(caller);
        let ordinal = self.ordinals.next(&site);
        (site, ordinal)
    }

    /// Whether an allocation of `size` bytes at `site` is to be pinned, and why: the policy's
    /// decision (`hotpin_policy::set::decide`), given what the history and auto mode's live
    /// groups say. `asked_pinned`: the program asked for pinned memory (cudaHostAlloc,
    /// cudaHostRegister and the driver's); `lazy`: such a request may be served pageable.
    pub(crate) fn wants_pinned(
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

    pub(crate) fn record(
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

    /// The one tally of pinned bytes held against the budget (`hotpin_policy::online::Budget`):
    /// auto mode's learner's, else this state's own.
    pub(crate) fn budget(&mut self) -> &mut Budget {
        match self.learner.as_mut() {
            Some(learner) => &mut learner.budget,
            None => &mut self.own_budget,
        }
    }

    fn budget_held(&self) -> &Budget {
        self.learner
            .as_ref()
            .map_or(&self.own_budget, |learner| &learner.budget)
    }

    pub(crate) fn within_budget(&self, size: usize) -> bool {
        self.budget_held().has_room(size as u64)
    }

    /// Whether a freed block of `block` bytes would serve an allocation the history pins
    /// (`HotSet::pins_size_served_by`).
    pub(crate) fn history_pins_size(&self, block: usize) -> bool {
        self.hot
            .as_ref()
            .is_some_and(|hot| hot.pins_size_served_by(block as u64, hotpin::pool::page_size()))
    }

    /// Whether a freed block of `size` bytes may be kept on a shelf: both shelves stay within
    /// their limit and memory is not short.
    pub(crate) fn room_on_shelf(&mut self, size: usize) -> bool {
        self.cache.bytes() + self.warm.bytes() + size <= self.cache_limit
            && self.pressure.level() == Level::Normal
    }

    /// Keeps a freed registered block in the cache for the next allocation that fits, if
    /// there is room on the shelves; whether it was kept.
    pub(crate) fn try_cache(&mut self, ptr: usize, size: usize) -> bool {
        let kept = self.room_on_shelf(size);
        if kept {
            self.cache.put(ptr, size);
        }
        kept
    }

    /// Keeps a freed pageable block, warm, for the next allocation of its size to be pinned
    /// (`allocations::releasing` says which), if there is room on the shelves; whether it was
    /// kept.
    pub(crate) fn try_warm(&mut self, ptr: usize, size: usize) -> bool {
        let kept = self.room_on_shelf(size);
        if kept {
            self.warm.put(ptr, size);
        }
        kept
    }

    /// A block registered behind the program's back at `start`, `len` bytes: looked up as
    /// such from now on.
    pub(crate) fn note_registered(&mut self, start: usize, len: usize) {
        if let Some(old) = self.registered.insert(start, len) {
            self.registered_bytes -= old as u64;
        } else {
            HIDDEN.fetch_add(1, Ordering::AcqRel);
        }
        self.registered_bytes += len as u64;
    }

    /// Forgets a block registered behind the program's back (it is looked up as such no
    /// more); its size, if it was one. Outside auto mode its bytes leave the budget here; in
    /// auto mode they leave the learner's as each block's pin ends: where the learner decides
    /// it (`Learner::registered`, `put_off`, `give_back`, a block let go or displaced) or
    /// where its caller lets a freed or cached block go (`pinner::forget_pinned`,
    /// `allocations::free_demoted`, `State::take_cache`, `learning::give_back`).
    pub(crate) fn forget_registered(&mut self, start: usize) -> Option<usize> {
        let size = self.registered.remove(&start)?;
        // A registration of the program's that was skipped because this one covered it
        // leaves a block the program believes pinned and that is now pageable: copies look
        // for it from now on (`believed_pinned_block`), before no hidden block is left to
        // make them look.
        if self.program_registered_within(start, size) {
            BELIEVED_PINNED.store(true, Ordering::Release);
            crate::believed::BELIEVED.forget_misses();
        }
        HIDDEN.fetch_sub(1, Ordering::AcqRel);
        self.registered_bytes -= size as u64;
        if self.learner.is_none() {
            self.own_budget.release(size as u64);
        }
        Some(size)
    }

    /// Whether the program registered part of `[start, start + len)` itself, a registration
    /// skipped because one of ours covered it: it believes that memory pinned, and its
    /// asynchronous copies of it are not waited for.
    pub(crate) fn program_registered_within(&self, start: usize, len: usize) -> bool {
        overlapping(self.skipped.map(), |(size, _)| *size, start, len).is_some()
    }

    /// Notes the pinned bytes now (hotpin's and the program's kept requests) in the peaks.
    pub(crate) fn note_peak(&mut self) {
        self.counters.peak_promoted_bytes =
            self.counters.peak_promoted_bytes.max(self.registered_bytes);
        let ours = self.budget_held().used.max(self.registered_bytes);
        self.counters.peak_pinned_bytes = self
            .counters
            .peak_pinned_bytes
            .max(ours + self.kept_live_bytes);
    }

    /// Takes every cached block out of the cache and the registered set (the program freed
    /// them already): the caller unregisters and frees them with `pinner::release_blocks`, once
    /// the lock is let go.
    pub(crate) fn take_cache(&mut self) -> Vec<(usize, usize)> {
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

/// What became of a new block that was not served from the cache.
pub(crate) struct Fate {
    /// To be registered now (pinned, and room for it).
    pub(crate) register: bool,
    /// To be pinned, but no room in the budget: tracked as such (kept warm when freed).
    pub(crate) no_room: bool,
    /// To be pinned, but memory is critically short.
    pub(crate) pressured: bool,
    /// To be pinned, at its first copy rather than now (`State::at_first_copy`).
    pub(crate) at_first_copy: bool,
}

impl Fate {
    /// What is said of the first copy of a new block of this fate, made for `why`, where it
    /// is tracked pageable (`State::born`): nothing for a block registered now or that found
    /// no room.
    pub(crate) fn first_copy(&self, why: Why) -> Option<FirstCopy> {
        if self.register || self.no_room {
            None
        } else if self.at_first_copy {
            Some(FirstCopy::Whole)
        } else if self.pressured {
            None
        } else if why.cold_by_history() {
            Some(FirstCopy::Cold)
        } else if why.pinned_at_first_copy() {
            Some(FirstCopy::HandsOn)
        } else {
            None
        }
    }

    /// The fate of a new block of `size` bytes, `pin` or not, memory being as short as `level`.
    pub(crate) fn of(state: &State, pin: bool, level: Level, size: usize) -> Self {
        let register = pin && level != Level::Critical && state.within_budget(size);
        Self {
            register,
            no_room: pin && !register && level != Level::Critical,
            pressured: pin && level == Level::Critical,
            at_first_copy: false,
        }
    }
}

impl State {
    /// A block to be pinned, served from the cache of freed pinned blocks (`size`: the cached
    /// block's): counted, recorded and tracked.
    pub(crate) fn served_from_cache(&mut self, birth: Birth, ptr: usize, size: usize) {
        self.counters.cache_hits += 1;
        self.track_cached(birth, ptr, size, "pinned-from-cache");
    }

    /// A block not judged worth pinning, served a freed pinned block from the cache
    /// (`allocations::from_cache`): counted, recorded, and tracked as pinned on spec (let go
    /// unless copied twice within `TRUST_IDLE_NS`).
    pub(crate) fn served_spare(&mut self, birth: Birth, ptr: usize, size: usize) {
        self.counters.spare_hits += 1;
        self.track_cached(birth, ptr, size, "spare-from-cache");
        if let Some(learner) = self.learner.as_mut() {
            learner.on_spec(ptr);
        }
    }

    /// A block served from the cache: recorded as `action`, and tracked as pinned.
    fn track_cached(&mut self, birth: Birth, ptr: usize, size: usize, action: &'static str) {
        self.record(
            birth.call,
            &birth.site,
            birth.ordinal,
            size as u64,
            action,
            birth.why,
        );
        if let Some(learner) = self.learner.as_mut() {
            learner.track(ptr, size, &birth.site, false, true, birth.python);
        }
    }

    /// A new block at `ptr` from libc or the warm shelf, of `fate`: recorded; if it is to be
    /// registered, its bytes held in the budget and it is handed back (with its density) for
    /// `allocations::register_at_birth`; else tracked as pageable.
    pub(crate) fn born(
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
            self.budget().take(size as u64);
            if let Some(learner) = self.learner.as_ref() {
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
            let action = if fate.at_first_copy {
                "pin-at-first-copy"
            } else {
                "pageable"
            };
            self.record(call, &birth.site, ordinal, size as u64, action, why);
        }
        if let Some(learner) = self.learner.as_mut() {
            learner.track(ptr, size, &birth.site, false, false, birth.python);
            if fate.no_room {
                learner.no_room(ptr);
            } else if let Some(first_copy) = fate.first_copy(why) {
                learner.first_copy(ptr, first_copy);
            }
        }
        None
    }
}

/// A new block to be pinned at birth, as `allocate` judged it.
pub(crate) struct Birth {
    pub(crate) call: &'static str,
    pub(crate) site: SiteKey,
    pub(crate) ordinal: u32,
    pub(crate) why: Why,
    /// Its density, for the node's arbiter.
    pub(crate) score: f64,
    pub(crate) python: Vec<crate::python::PyFrame>,
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
    pub(crate) fn hidden_block(&self, start: usize, len: usize) -> Option<usize> {
        overlapping(&self.registered, |size| *size, start, len)
            .map(|(block, _)| block)
            .filter(|block| !self.skipped.contains_key(block))
    }

    /// The pageable block the program believes pinned that holds part of `[start, start +
    /// len)`: (start, size, the registration flags that pin it as the program asked: a
    /// demoted request's (none, or portable), the program's own for a skipped registration).
    pub(crate) fn believed_pinned_block(
        &self,
        start: usize,
        len: usize,
    ) -> Option<(usize, usize, u32)> {
        if let Some((block, demoted)) =
            overlapping(self.demoted.map(), |d: &Demoted| d.size, start, len)
            && !demoted.pinned_on_demand
        {
            return Some((block, demoted.size, demoted.flags));
        }
        overlapping(self.skipped.map(), |(size, _)| *size, start, len)
            .filter(|(block, _)| !self.registered.contains_key(block))
            .map(|(block, &(size, flags))| (block, size, flags))
    }

    /// The flags of the pinned request served pageable that `ptr` lies in (pinned on demand
    /// or not), if any.
    pub(crate) fn in_demoted(&self, ptr: usize) -> Option<u32> {
        overlapping(self.demoted.map(), |d: &Demoted| d.size, ptr, 1).map(|(_, d)| d.flags)
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

/// Whether CUDA calls of ours may be made in this process.
pub fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// The state's lock, once the block at `ptr` is not being registered or unregistered by
/// another thread (which holds no lock while CUDA does it): a block is never freed, nor
/// registered or unregistered by the program, under one.
/// A registration takes milliseconds for a large block: the waiting thread yields at first,
/// then sleeps between looks, so that it does not take a core from the registering thread.
pub(crate) fn lock_settled(ptr: usize) -> MutexGuard<'static, Option<State>> {
    let mut looked = 0u32;
    loop {
        let guard = lock();
        let registering = guard.as_ref().is_some_and(|state| {
            state.in_claim.contains_key(&ptr)
                || state
                    .learner
                    .as_ref()
                    .and_then(|learner| learner.blocks.get(&ptr))
                    .is_some_and(|block| matches!(block.pin, Pin::Registering | Pin::Unpinning))
        });
        if !registering {
            return guard;
        }
        drop(guard);
        if looked < 64 {
            looked += 1;
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
}

/// Blocks (or parts) larger than this that auto mode decides to pin are registered by the
/// pinner thread, not the copying thread (`HOTPIN_OFF_THREAD_ABOVE`, bytes; default 128 MiB,
/// about 7 ms of registration on the H100): the program's thread does not wait, and the block
/// is copied as pageable memory (its copies waited for) until the registration is done.
pub static OFF_THREAD_ABOVE: AtomicUsize = AtomicUsize::new(128 << 20);
