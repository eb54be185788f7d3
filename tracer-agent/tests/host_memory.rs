//! Host memory seen from the kernel, with no allocator of ours: anonymous mappings, mremap,
//! munmap and the heap through syscall tracepoints; user page faults (exceptions:
//! page_fault_user) attributed to the mapping they hit; copies credited to the mapping or heap
//! that holds their host pointer; ioctls of the NVIDIA driver's kind counted. Needs root.

mod common;

use hotpin_history::history::{AllocKind, Allocation};
use tracer_agent::AgentConfig;

/// Compiles tests/c/NAME.c, traces it with the stand-in named and `configure` applied, and
/// returns the stopped agent with the JSON the program printed.
fn trace_c(
    name: &str,
    configure: impl FnOnce(&mut AgentConfig),
) -> (tracer_agent::TracerAgent, serde_json::Value) {
    let standin = common::standin(name);
    let program = common::compile_c(&standin, name);
    let env = vec![
        (
            "HOTPIN_CUDART".to_string(),
            standin.runtime.display().to_string(),
        ),
        ("LD_LIBRARY_PATH".into(), standin.dir.display().to_string()),
    ];
    let (agent, output) = common::trace_configured(
        &standin,
        &program,
        &[],
        &env,
        common::Find::Named,
        configure,
        || {},
    );
    assert!(output.status.success(), "{output:?}");
    let printed = serde_json::from_slice(&output.stdout).expect("the program prints its addresses");
    (agent, printed)
}

#[test]
fn mappings_the_heap_and_page_faults_are_attributed() {
    common::require_root();
    let (agent, printed) = trace_c("host_memory", |config| config.probes.page_faults = true);
    let address = |name: &str| printed[name].as_u64().expect("an address");
    let history = agent.history();
    let at = |start: u64, kind: AllocKind| -> &Allocation {
        history
            .allocations()
            .iter()
            .find(|a| a.start == start && a.kind == kind)
            .unwrap_or_else(|| panic!("no {kind:?} at {start:#x}: {:#?}", history.allocations()))
    };

    // The 8 MiB mapping: 2048 first-touch faults, three copies, ended by the mremap.
    let map = at(address("map"), AllocKind::Mmap);
    assert_eq!(map.size, 8 << 20);
    assert_eq!(map.stats.page_faults, 2048, "{map:?}");
    assert_eq!(map.stats.h2d_count, 3);
    let grown = address("grown");
    if grown != map.start {
        assert!(map.free_ns.is_some(), "moved away: the old mapping ends");
    }
    // The grown mapping: 16 MiB, its new half faulted, one copy back, then unmapped.
    let grown = history
        .allocations()
        .iter()
        .rfind(|a| a.start == grown && a.kind == AllocKind::Mmap)
        .expect("the grown mapping");
    assert_eq!(grown.size, 16 << 20, "{grown:?}");
    assert!(grown.stats.page_faults >= 2048, "{grown:?}");
    assert_eq!(grown.stats.d2h_count, 1);
    assert!(grown.free_ns.is_some(), "unmapped");

    // The heap block's copy is credited to the heap.
    let heap = history
        .allocations()
        .iter()
        .find(|a| a.kind == AllocKind::Heap && a.contains(address("small")))
        .expect("the heap holds the small block");
    assert_eq!(heap.stats.h2d_count, 1, "{heap:?}");

    let stats = history.stats();
    assert_eq!(stats.untracked_transfers, 0, "every copy found its memory");
    assert_eq!(stats.host_memory_calls.get("mremap"), Some(&1));
    assert!(
        stats
            .host_memory_calls
            .get("munmap")
            .is_some_and(|&n| n >= 1)
    );
    assert!(stats.page_faults >= 4096, "{stats:?}");
    assert_eq!(stats.nvidia_ioctls.get("0x2a"), Some(&1), "{stats:?}");
    assert_eq!(stats.lost_events(), 0);
}

/// `--libc-malloc` with a 1 MiB floor: the allocations at or above it (malloc, calloc,
/// posix_memalign, memalign, and a realloc that grows one) are recorded with their call sites
/// and sizes, copies are credited to them, their frees are seen; the 100-byte malloc is not
/// sent at all (its copy goes to the heap).
#[test]
fn libc_allocations_above_the_floor_are_recorded_with_call_sites() {
    common::require_root();
    let (agent, printed) = trace_c("libc_malloc", |config| {
        config.probes.libc_malloc = Some(1 << 20)
    });
    let address = |name: &str| printed[name].as_u64().expect("an address");
    let history = agent.history();
    let libc: Vec<&Allocation> = history
        .allocations()
        .iter()
        .filter(|a| a.kind == AllocKind::Pageable && a.call_site.is_some())
        .collect();
    let mut sizes: Vec<u64> = libc.iter().map(|a| a.size).collect();
    sizes.sort_unstable();
    let mib = 1 << 20;
    assert_eq!(
        sizes,
        vec![mib, 2 * mib, 2 * mib, 3 * mib, 4 * mib],
        "memalign, malloc (before realloc), calloc, posix_memalign, realloc: {libc:#?}"
    );
    for name in ["grown", "zeroed", "aligned", "page_aligned"] {
        let block = libc
            .iter()
            .rfind(|a| a.start == address(name))
            .unwrap_or_else(|| panic!("{name} recorded"));
        assert_eq!(block.stats.h2d_count, 1, "{name}: {block:?}");
        assert!(block.free_ns.is_some(), "{name} freed");
        let site = history
            .call_site(block.call_site.expect("a site"))
            .expect("interned");
        assert!(
            site.module.ends_with("libc_malloc"),
            "{name} called from the program: {site:?}"
        );
    }
    assert!(
        !libc.iter().any(|a| a.size == 100),
        "the small block is not recorded"
    );
    let calls = &history.stats().calls_by_function;
    assert_eq!(
        calls.get("malloc"),
        Some(&1),
        "only the big malloc is sent: {calls:?}"
    );
    assert_eq!(calls.get("realloc"), Some(&1));
    assert_eq!(history.stats().lost_events(), 0);
}

/// An allocation's callers beyond its call site, from the user stack walked in the kernel
/// (frame pointers): cudaMallocHost called from inner, called from outer, called from main.
#[test]
fn an_allocation_keeps_its_callers_where_frame_pointers_allow() {
    common::require_root();
    let (agent, printed) = trace_c("callers", |_| {});
    let history = agent.history();
    let ptr = printed["ptr"].as_u64().expect("a pointer");
    let allocation = history
        .allocations()
        .iter()
        .find(|a| a.start == ptr && a.kind == AllocKind::Pinned)
        .expect("the pinned allocation");
    let name = |site| {
        history
            .call_site(site)
            .and_then(|s| s.symbol.clone())
            .unwrap_or_default()
    };
    assert_eq!(name(allocation.call_site.expect("a call site")), "inner");
    let callers: Vec<String> = history
        .callers(allocation.id)
        .iter()
        .map(|&s| name(s))
        .collect();
    assert!(
        callers.len() >= 2 && callers[0] == "outer" && callers[1] == "main",
        "inner <- outer <- main: {callers:?}"
    );
    // Module first, then the function: `called from callers+0x11b3 outer <- ... main`.
    let report = hotpin_report::Report::new(&history, Default::default(), 10);
    let text = report.render();
    let called_from = text
        .lines()
        .find(|l| l.trim_start().starts_with("called from "))
        .unwrap_or_default();
    assert!(
        called_from.contains("callers+0x") && called_from.contains(" outer <- "),
        "{text}"
    );
}
