//! hotpin's pinning allocator.
//!
//! In *profile* mode it pins everything while `tracer` records which allocations are copied
//! to and from the GPU often; in *use* mode it reads that history and pins (cudaMallocHost,
//! or cudaHostRegister for large blocks) only the allocations that were hot, with plain malloc
//! for the rest. It works under a pinned budget, falls back to pageable memory whenever pinning
//! is not possible, and never fails an allocation that malloc could satisfy.
//!
//! The CUDA runtime is loaded at run time ([`cuda`]), so this builds and runs without CUDA.
//! There is one allocator per process: the C entry points (`hotpin_malloc`, `hotpin_free`,
//! which `tracer` probes) serve it, and the Rust API goes through them.

pub mod callsite;
mod capi;
pub mod cuda;
pub mod pool;
pub mod pressure;

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    sync::{Mutex, MutexGuard, OnceLock},
};

use hotpin_history::dump::DumpError;
pub use hotpin_policy::Mode;
use hotpin_policy::{
    hot::HotPolicy,
    set::{HotSet, Request, Why, decide},
};
use pool::{PinnedBlock, PinnedPool};
use pressure::{Level, Pressure};

use crate::cuda::CudaRuntime;

/// How the allocator is set up.
#[derive(Clone, Debug)]
pub struct Config {
    pub mode: Mode,
    /// The history to read in use mode.
    pub history: Option<PathBuf>,
    pub policy: HotPolicy,
    /// Most bytes pinned at once (live plus cached); `None`: no limit.
    pub pinned_budget: Option<u64>,
    /// The CUDA runtime to load: a path or a name for the dynamic loader.
    pub cudart: String,
}

impl Config {
    /// With the cost model of this machine's cost file (`hotpin calibrate`), else the
    /// built-in one; an unreadable cost file is said once and the built-in one used.
    pub fn new(mode: Mode) -> Self {
        let policy = HotPolicy::configured().unwrap_or_else(|error| {
            eprintln!("hotpin: the cost file is unusable ({error}); using the built-in costs");
            HotPolicy::default()
        });
        Self {
            mode,
            history: None,
            policy,
            pinned_budget: None,
            cudart: "libcudart.so.13".into(),
        }
    }

    /// From `HOTPIN_MODE` (pin-none, pin-all, profile, use; default pin-none), `HOTPIN_HISTORY`,
    /// `HOTPIN_PINNED_BUDGET` (bytes, or a share of RAM like `10%`) and `HOTPIN_CUDART`.
    pub fn from_env() -> Result<Self, InitError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let mode = match var("HOTPIN_MODE") {
            Some(name) => Mode::from_name(&name).ok_or(InitError::BadMode(name))?,
            None => Mode::PinNone,
        };
        let mut config = Config::new(mode);
        config.history = var("HOTPIN_HISTORY").map(PathBuf::from);
        if let Some(budget) = var("HOTPIN_PINNED_BUDGET") {
            config.pinned_budget = Some(parse_budget(&budget)?);
        }
        if let Some(cudart) = var("HOTPIN_CUDART") {
            config.cudart = cudart;
        }
        Ok(config)
    }
}

/// A budget in bytes (with an optional K, M or G suffix, powers of 1024), or as a share of RAM
/// (`25%`).
pub fn parse_budget(text: &str) -> Result<u64, InitError> {
    let bad = |why: String| InitError::BadBudget(text.to_string(), why);
    if let Some(percent) = text.strip_suffix('%') {
        let share: f64 = percent
            .trim()
            .parse()
            .map_err(|_| bad("not a number before %".into()))?;
        if !(0.0..=100.0).contains(&share) {
            return Err(bad("a share is 0% to 100%".into()));
        }
        // SAFETY: sysconf has no preconditions.
        let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) } as f64;
        return Ok((pages * pool::page_size() as f64 * share / 100.0) as u64);
    }
    hotpin_history::units::parse_bytes(text).map_err(bad)
}

/// Why the allocator could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("HOTPIN_MODE={0:?} is not one of pin-none, pin-all, profile, use")]
    BadMode(String),
    #[error("pinned budget {0:?}: {1}; give bytes (like 512M) or a share of RAM (like 25%)")]
    BadBudget(String, String),
    #[error("use mode needs a history (HOTPIN_HISTORY or Allocator::use_history)")]
    NoHistory,
    #[error("cannot use the history")]
    History(#[from] DumpError),
    #[error("the allocator is already set up (once per process, before the first allocation)")]
    AlreadySet,
}

/// Why a free was refused. Nothing is touched when it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FreeError {
    #[error("double free of {0:#x}")]
    DoubleFree(usize),
    #[error("free of {0:#x}, which hotpin did not allocate")]
    Foreign(usize),
}

/// Counters, exact at any moment (the C ABI's `struct hotpin_stats`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub allocations: u64,
    pub frees: u64,
    /// Live bytes handed out: pinned (at block capacity) and pageable.
    pub pinned_bytes: u64,
    pub pageable_bytes: u64,
    pub peak_pinned_bytes: u64,
    pub pinned_allocations: u64,
    pub pageable_allocations: u64,
    /// Pinned allocations served from freed blocks.
    pub cache_hits: u64,
    pub cached_bytes: u64,
    /// Allocations that should have been pinned and were not, by reason.
    pub fallback_budget: u64,
    pub fallback_pin_failed: u64,
    pub fallback_no_cuda: u64,
    pub fallback_pressure: u64,
    pub double_frees: u64,
    pub foreign_frees: u64,
    /// Time spent in cudaMallocHost / cudaHostRegister.
    pub pin_time_ns: u64,
}

/// What a live pointer is.
#[derive(Debug)]
enum Block {
    Pinned(PinnedBlock),
    Pageable { size: usize },
}

struct State {
    config: Config,
    cuda: Option<CudaRuntime>,
    hot: Option<HotSet>,
    pinned: PinnedPool,
    live: HashMap<usize, Block>,
    /// Pointers freed and not handed out since, to tell a double free from a foreign pointer.
    freed: HashSet<usize>,
    ordinals: hotpin_policy::ordinals::Ordinals,
    sites: callsite::Resolver,
    pressure: Pressure,
    stats: Stats,
}

/// The allocator (one per process).
pub struct Allocator {
    state: Mutex<State>,
}

static GLOBAL: OnceLock<Allocator> = OnceLock::new();

/// Marks, for `tracer`, that the block `hotpin_malloc` is about to hand out is pinned. Called
/// inside `hotpin_malloc` for fresh and cached blocks alike; the tracer probes this symbol.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn hotpin_pinned(ptr: *mut libc::c_void, size: usize) {
    std::hint::black_box((ptr, size));
}

impl Allocator {
    fn new(config: Config) -> Result<Self, InitError> {
        let hot = match config.mode {
            Mode::Use => {
                let path = config.history.as_ref().ok_or(InitError::NoHistory)?;
                Some(HotSet::load(path, config.policy, config.pinned_budget)?)
            }
            // No copy hooks here to learn from: a history if there is one, else nothing pinned.
            Mode::Auto => match config.history.as_ref() {
                Some(path) => Some(HotSet::load(path, config.policy, config.pinned_budget)?),
                None => None,
            },
            _ => None,
        };
        let cuda = if config.mode == Mode::PinNone {
            None
        } else {
            match CudaRuntime::load(&config.cudart) {
                Ok(cuda) => Some(cuda),
                Err(error) => {
                    tracing::warn!(%error, "pinning is unavailable; every allocation is pageable");
                    None
                }
            }
        };
        Ok(Self {
            state: Mutex::new(State {
                config,
                cuda,
                hot,
                pinned: PinnedPool::default(),
                live: HashMap::new(),
                freed: HashSet::new(),
                ordinals: Default::default(),
                sites: callsite::Resolver::default(),
                pressure: Pressure::default(),
                stats: Stats::default(),
            }),
        })
    }

    /// Sets up the process's allocator; fails if it is set up already.
    pub fn init(config: Config) -> Result<&'static Allocator, InitError> {
        let allocator = Allocator::new(config)?;
        GLOBAL.set(allocator).map_err(|_| InitError::AlreadySet)?;
        Ok(Allocator::global())
    }

    /// Profile mode: pin everything; record with `tracer record -- PROGRAM` (or `--pid`).
    pub fn profile() -> Result<&'static Allocator, InitError> {
        Allocator::init(Config::new(Mode::Profile))
    }

    /// Loads the CUDA runtime, and through it the driver (`cudaGetDeviceCount`), if it is
    /// not yet: a tracer embedded in the process (crate `hotpin-embedded`) attaches to both
    /// before the first CUDA call, since the process cannot hold itself stopped while probes
    /// attach to a library it loads later.
    pub fn load_cuda(&self) {
        if let Some(cuda) = self.lock().cuda.as_ref() {
            let _ = cuda.device_count();
        }
    }

    /// Use mode: pin what the history at `path` says was hot, by `policy`.
    pub fn use_history(
        path: impl Into<PathBuf>,
        policy: HotPolicy,
    ) -> Result<&'static Allocator, InitError> {
        let mut config = Config::new(Mode::Use);
        config.history = Some(path.into());
        config.policy = policy;
        Allocator::init(config)
    }

    /// The process's allocator, set up from the environment if nothing set it up before (an
    /// unusable environment is reported once and gives pin-none).
    pub fn global() -> &'static Allocator {
        GLOBAL.get_or_init(|| {
            let config = Config::from_env().and_then(Allocator::new);
            config.unwrap_or_else(|error| {
                eprintln!("hotpin: {error}; allocating pageable memory only");
                Allocator::new(Config::new(Mode::PinNone)).expect("pin-none needs nothing")
            })
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere must not stop allocation: the state is consistent between calls.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// An owned buffer of `size` bytes, or `None` only when not even malloc can provide it.
    /// Its call site is the caller (this function is inlined into it).
    #[inline(always)]
    pub fn alloc(&'static self, size: usize) -> Option<HostBuffer> {
        // Through the C entry point, so that the call site is this function's caller's.
        let ptr = capi::hotpin_malloc(size);
        (!ptr.is_null()).then(|| HostBuffer {
            ptr: ptr.cast(),
            len: size,
        })
    }

    pub fn stats(&self) -> Stats {
        let state = self.lock();
        let mut stats = state.stats;
        stats.cached_bytes = state.pinned.cached_bytes();
        stats
    }

    /// Unpins and frees every cached free block (pinned memory goes back to the system).
    pub fn trim(&self) {
        let mut state = self.lock();
        let state = &mut *state;
        if let Some(cuda) = state.cuda.as_ref() {
            state.pinned.release_cache(cuda);
        }
    }

    pub fn mode(&self) -> Mode {
        self.lock().config.mode
    }

    /// Allocates `size` bytes for the call site at return address `caller`.
    pub fn alloc_at(&self, size: usize, caller: usize) -> *mut u8 {
        let size = size.max(1);
        let mut state = self.lock();
        let state = &mut *state;
        state.stats.allocations += 1;
        let site = state.sites.resolve(caller);
        let ordinal = state.ordinals.next(&site);
        // The Rust allocator has no copy hooks: auto mode is use mode here. Its profile mode
        // pins everything while the tracer records (the interposer's records the program as
        // it is, pinning what it asked).
        let mode = match state.config.mode {
            Mode::Auto => Mode::Use,
            Mode::Profile => Mode::PinAll,
            mode => mode,
        };
        let judged = state
            .hot
            .as_ref()
            .map(|hot| hot.judge(&site, None, ordinal, size as u64));
        let decision = decide(mode, judged, false, Request::Pageable, size as u64);
        if decision.why == Why::OverBudget {
            state.stats.fallback_budget += 1;
        }
        let want_pin = decision.pin;
        if want_pin && let Some(block) = state.pin(size) {
            let ptr = block.ptr;
            hotpin_pinned(ptr.cast(), size);
            state.stats.pinned_allocations += 1;
            // Counted at capacity (what is pinned), as at free: a reused block may be up to
            // 10% larger than asked for.
            state.stats.pinned_bytes += block.capacity as u64;
            state.stats.peak_pinned_bytes =
                state.stats.peak_pinned_bytes.max(state.stats.pinned_bytes);
            state.freed.remove(&(ptr as usize));
            state.live.insert(ptr as usize, Block::Pinned(block));
            return ptr;
        }
        // SAFETY: plain malloc; null is handled.
        let ptr = unsafe { libc::malloc(size) }.cast::<u8>();
        if ptr.is_null() {
            return ptr;
        }
        state.stats.pageable_allocations += 1;
        state.stats.pageable_bytes += size as u64;
        state.freed.remove(&(ptr as usize));
        state.live.insert(ptr as usize, Block::Pageable { size });
        ptr
    }

    /// Frees what `alloc_at` returned. A pointer it did not hand out, or one freed already, is
    /// refused and counted, and nothing is touched.
    pub fn free(&self, ptr: *mut u8) -> Result<(), FreeError> {
        if ptr.is_null() {
            return Ok(());
        }
        let mut state = self.lock();
        let state = &mut *state;
        let addr = ptr as usize;
        let Some(block) = state.live.remove(&addr) else {
            return Err(if state.freed.contains(&addr) {
                state.stats.double_frees += 1;
                FreeError::DoubleFree(addr)
            } else {
                state.stats.foreign_frees += 1;
                FreeError::Foreign(addr)
            });
        };
        state.stats.frees += 1;
        state.freed.insert(addr);
        match block {
            Block::Pageable { size } => {
                state.stats.pageable_bytes -= size as u64;
                // SAFETY: from malloc in alloc_at, freed once (it was live).
                unsafe { libc::free(ptr.cast()) };
            }
            Block::Pinned(block) => {
                state.stats.pinned_bytes -= block.capacity as u64;
                state.keep_or_release(block);
            }
        }
        Ok(())
    }
}

impl State {
    /// A pinned block for `size`, or `None` after counting why pinning was not possible.
    fn pin(&mut self, size: usize) -> Option<PinnedBlock> {
        let Some(cuda) = self.cuda.as_ref() else {
            self.stats.fallback_no_cuda += 1;
            return None;
        };
        let level = self.pressure.level();
        if level >= Level::High && self.pinned.cached_bytes() > 0 {
            self.pinned.release_cache(cuda);
        }
        if let Some(block) = self.pinned.take_cached(size) {
            self.stats.cache_hits += 1;
            return Some(block);
        }
        if level == Level::Critical {
            self.stats.fallback_pressure += 1;
            return None;
        }
        if let Some(budget) = self.config.pinned_budget {
            let held = self.stats.pinned_bytes + self.pinned.cached_bytes();
            if held + size as u64 > budget {
                // Cached blocks of other sizes are the first to go.
                self.pinned.release_cache(cuda);
                if self.stats.pinned_bytes + size as u64 > budget {
                    self.stats.fallback_budget += 1;
                    return None;
                }
            }
        }
        match PinnedPool::pin_new(cuda, size) {
            Ok((block, ns)) => {
                self.stats.pin_time_ns += ns;
                Some(block)
            }
            Err(error) => {
                tracing::debug!(%error, size, "pinning failed; falling back to pageable memory");
                self.stats.fallback_pin_failed += 1;
                None
            }
        }
    }

    /// A freed pinned block goes back to the cache, unless memory is short or the budget would
    /// be exceeded by keeping it.
    fn keep_or_release(&mut self, block: PinnedBlock) {
        let Some(cuda) = self.cuda.as_ref() else {
            return;
        };
        let over_budget = self.config.pinned_budget.is_some_and(|budget| {
            self.stats.pinned_bytes + self.pinned.cached_bytes() + block.capacity as u64 > budget
        });
        if over_budget || self.pressure.level() >= Level::High {
            pool::release(cuda, block);
        } else {
            self.pinned.give_back(block);
        }
    }
}

/// An owned host buffer from the allocator; freed when dropped.
#[derive(Debug)]
pub struct HostBuffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is plain memory exclusively owned by this value.
unsafe impl Send for HostBuffer {}

impl HostBuffer {
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // The C entry point, on the pointer hotpin_malloc returned.
        capi::hotpin_free(self.ptr.cast());
    }
}

#[cfg(test)]
mod tests;
