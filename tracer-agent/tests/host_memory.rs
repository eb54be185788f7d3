//! Host memory seen from the kernel, with no allocator of ours: anonymous mappings, mremap,
//! munmap and the heap through syscall tracepoints; user page faults (exceptions:
//! page_fault_user) attributed to the mapping they hit; copies credited to the mapping or heap
//! that holds their host pointer; ioctls of the NVIDIA driver's kind counted. Needs root.

mod common;

use tracer_agent::history::{AllocKind, Allocation};

#[test]
fn mappings_the_heap_and_page_faults_are_attributed() {
    common::require_root();
    let standin = common::standin("host-memory");
    let program = common::compile_c(&standin, "host_memory");
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
        |config| config.probes.page_faults = true,
        || {},
    );
    assert!(output.status.success(), "{output:?}");
    let printed: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("the program prints its addresses");
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
