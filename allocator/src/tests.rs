//! Tests against the CUDA stand-in (a test fixture, not CUDA).

use std::sync::OnceLock;

use hotpin_history::history::{AllocKind, CallSite, MemHistory};
use hotpin_registry::registry::CopyDirection;

use super::*;

const MIB: usize = 1 << 20;

/// Installs the stand-in once and loads its driver, so the runtime's dlopen("libcuda.so.1")
/// finds it by soname without LD_LIBRARY_PATH.
fn standin_runtime() -> String {
    static RUNTIME: OnceLock<String> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let dir = std::env::temp_dir().join(format!("hotpin-alloc-{}", std::process::id()));
            let installed = cuda_standin::install(&dir).expect("install the stand-in");
            // SAFETY: the stand-in's initialisers are trivial.
            let driver = unsafe { libloading::Library::new(&installed.driver) }.expect("load");
            std::mem::forget(driver);
            installed.runtime.display().to_string()
        })
        .clone()
}

fn allocator(mode: Mode) -> Allocator {
    let mut config = Config::new(mode);
    config.cudart = standin_runtime();
    Allocator::new(config).expect("set up")
}

/// Two return addresses inside this test binary: two distinct call sites.
fn caller(n: usize) -> usize {
    allocator as fn(Mode) -> Allocator as usize + 16 * n
}

fn site_of(addr: usize) -> CallSite {
    let key = callsite::Resolver::default().resolve(addr);
    CallSite {
        module: format!("/recorded/elsewhere/{}", key.module),
        offset: key.offset,
        symbol: None,
    }
}

/// A history in which site 0 made 2 hot buffers then 1 cold, and site 1 one cold buffer.
fn recorded_history() -> std::path::PathBuf {
    let mut h = MemHistory::new();
    let a = h.intern_call_site(site_of(caller(0)));
    let b = h.intern_call_site(site_of(caller(1)));
    for (i, (site, transfers)) in [(a, 350), (a, 350), (a, 2), (b, 2)].into_iter().enumerate() {
        let start = 0x1000_0000 * (i as u64 + 1);
        h.alloc(7, start, 4 * MIB as u64, AllocKind::Pinned, Some(site), 0);
        for t in 0..transfers {
            h.transfer(7, 0xd000_0000, start, 8, CopyDirection::HostToDevice, t);
        }
    }
    let path = std::env::temp_dir().join(format!("hotpin-history-{}.json", std::process::id()));
    hotpin_history::dump::write(&h, &path, hotpin_history::dump::Format::Json, false)
        .expect("write");
    path
}

fn use_mode(budget: Option<u64>) -> Allocator {
    let mut config = Config::new(Mode::Use);
    config.cudart = standin_runtime();
    config.history = Some(recorded_history());
    config.pinned_budget = budget;
    // These tests are about identity, budget and fallbacks: judged by the first version's
    // bar, which their synthetic history is written for (the cost model has its own tests).
    config.policy = hotpin_policy::hot::HotPolicy::transfers(4);
    Allocator::new(config).expect("set up")
}

#[test]
fn use_mode_pins_exactly_the_hot_set() {
    let a = use_mode(None);
    let ptrs: Vec<_> = (0..3).map(|_| a.alloc_at(4 * MIB, caller(0))).collect();
    let cold = a.alloc_at(4 * MIB, caller(1));
    let stats = a.stats();
    assert_eq!(stats.pinned_allocations, 2, "{stats:?}");
    assert_eq!(stats.pinned_bytes, 8 * MIB as u64);
    assert_eq!(stats.pageable_allocations, 2);
    for ptr in ptrs.into_iter().chain([cold]) {
        // SAFETY: every allocation is 4 MiB, writable.
        unsafe { std::ptr::write_bytes(ptr, 1, 4 * MIB) };
        a.free(ptr).expect("free");
    }
    assert_eq!((a.stats().pinned_bytes, a.stats().pageable_bytes), (0, 0));
}

#[test]
fn a_changed_program_falls_back_to_the_call_site_then_to_pageable() {
    let a = use_mode(None);
    for _ in 0..3 {
        a.alloc_at(4 * MIB, caller(0));
    }
    // A fourth allocation at site 0 (unknown to the history): the site was mostly hot.
    a.alloc_at(4 * MIB, caller(0));
    // A new call site: pageable.
    a.alloc_at(4 * MIB, caller(5));
    let stats = a.stats();
    assert_eq!(stats.pinned_allocations, 3, "{stats:?}");
    assert_eq!(stats.pageable_allocations, 2);
}

#[test]
fn a_budget_pins_the_most_transferred_and_counts_the_rest() {
    let a = use_mode(Some(5 * MIB as u64));
    for _ in 0..3 {
        a.alloc_at(4 * MIB, caller(0));
    }
    let stats = a.stats();
    assert_eq!(stats.pinned_allocations, 1, "{stats:?}");
    assert_eq!(
        stats.fallback_budget, 1,
        "the other hot buffer fell back: {stats:?}"
    );
    assert!(stats.peak_pinned_bytes <= 5 * MIB as u64);
}

#[test]
fn pin_all_under_a_budget_never_exceeds_it() {
    let mut config = Config::new(Mode::PinAll);
    config.cudart = standin_runtime();
    config.pinned_budget = Some(10 * MIB as u64);
    let a = Allocator::new(config).expect("set up");
    let ptrs: Vec<_> = (0..5).map(|_| a.alloc_at(3 * MIB, caller(0))).collect();
    assert!(
        ptrs.iter().all(|p| !p.is_null()),
        "every allocation is satisfied"
    );
    let stats = a.stats();
    assert_eq!(
        (stats.pinned_allocations, stats.fallback_budget),
        (3, 2),
        "{stats:?}"
    );
    assert!(stats.peak_pinned_bytes <= 10 * MIB as u64);
}

#[test]
fn freed_pinned_blocks_are_reused() {
    let a = allocator(Mode::PinAll);
    let first = a.alloc_at(2 * MIB, caller(0));
    a.free(first).expect("free");
    let second = a.alloc_at(2 * MIB - 4096, caller(0));
    let stats = a.stats();
    assert_eq!(stats.cache_hits, 1, "{stats:?}");
    assert_eq!(second, first, "the cached block came back");
    assert!(stats.pin_time_ns > 0);
    a.free(second).expect("free");
    assert_eq!(a.stats().cached_bytes, 2 * MIB as u64);
    a.trim();
    assert_eq!(a.stats().cached_bytes, 0, "trim gives cached blocks back");
}

#[test]
fn missing_cuda_falls_back_to_pageable_and_counts_it() {
    let mut config = Config::new(Mode::PinAll);
    config.cudart = "/nonexistent/libcudart.so.13".into();
    let a = Allocator::new(config).expect("set up without CUDA");
    let ptr = a.alloc_at(MIB, caller(0));
    assert!(!ptr.is_null());
    let stats = a.stats();
    assert_eq!(
        (stats.fallback_no_cuda, stats.pageable_allocations),
        (1, 1),
        "{stats:?}"
    );
}

#[test]
fn double_frees_and_foreign_pointers_are_refused_and_counted() {
    let a = allocator(Mode::PinNone);
    let ptr = a.alloc_at(64, caller(0));
    a.free(ptr).expect("first free");
    assert_eq!(a.free(ptr), Err(FreeError::DoubleFree(ptr as usize)));
    let mut local = 0u8;
    assert_eq!(
        a.free(&raw mut local),
        Err(FreeError::Foreign(&raw mut local as usize))
    );
    let stats = a.stats();
    assert_eq!(
        (stats.frees, stats.double_frees, stats.foreign_frees),
        (1, 1, 1)
    );
}

#[test]
fn eight_threads_allocating_and_freeing_at_once_keep_exact_stats() {
    let a = allocator(Mode::PinAll);
    std::thread::scope(|scope| {
        for t in 0..8 {
            let a = &a;
            scope.spawn(move || {
                for i in 0..200 {
                    let size = 4096 * (1 + (t + i) % 8);
                    let ptr = a.alloc_at(size, caller(t));
                    // SAFETY: `size` bytes were just allocated.
                    unsafe { std::ptr::write_bytes(ptr, t as u8, size) };
                    a.free(ptr).expect("free what was allocated");
                }
            });
        }
    });
    let stats = a.stats();
    assert_eq!((stats.allocations, stats.frees), (1600, 1600), "{stats:?}");
    assert_eq!((stats.pinned_bytes, stats.pageable_bytes), (0, 0));
    assert_eq!(stats.double_frees + stats.foreign_frees, 0);
}

#[test]
fn budgets_parse_as_bytes_or_a_share_of_ram() {
    assert_eq!(parse_budget("1048576").expect("bytes"), 1 << 20);
    assert_eq!(parse_budget("512M").expect("MiB"), 512 << 20);
    assert_eq!(parse_budget("2G").expect("GiB"), 2 << 30);
    assert!(parse_budget("99999999999G").is_err(), "overflow");
    // 16 EiB is past u64: said as too large, not as "not bytes" (#25).
    let error = parse_budget("16E").expect_err("too large").to_string();
    assert!(error.contains("too large"), "{error}");
    assert_eq!(parse_budget("1T").expect("TiB"), 1 << 40);
    assert!(parse_budget("M").is_err());
    assert!(parse_budget("10%").expect("share") > 0);
    assert!(parse_budget("150%").is_err());
    assert!(parse_budget("lots").is_err());
}
