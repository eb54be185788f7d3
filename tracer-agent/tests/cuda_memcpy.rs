//! The first probe end to end: N cudaMemcpy calls in a child process give N events with the
//! right arguments and return values. Needs root: loads real eBPF programs.

mod common;

use hotpin_history::history::AllocKind;

#[test]
fn n_memcpy_calls_give_n_transfers_attributed_to_the_right_buffer() {
    n_memcpy_calls(false);
}

/// With the runtime's copies probed too, each copy is seen twice and counted once.
#[test]
fn with_runtime_copies_each_copy_is_seen_twice_and_counted_once() {
    n_memcpy_calls(true);
}

fn n_memcpy_calls(runtime_copies: bool) {
    common::require_root();
    let standin = common::standin(if runtime_copies {
        "memcpy-runtime"
    } else {
        "memcpy"
    });
    const N: u64 = 250;
    const SIZE: u64 = 64 * 1024;
    let bench = common::bench(
        &standin,
        &[
            "--mode",
            "pinned",
            "--hot",
            "1",
            "--cold",
            "0",
            "--size",
            "64K",
            "--transfers",
            "250",
        ],
    );
    let (agent, output) = common::trace_configured(
        &standin,
        &common::workload(),
        &bench.args,
        &bench.env,
        common::Find::Named,
        |config| config.probes.runtime_copies = runtime_copies,
        || {},
    );
    let summary = common::summary(&output);
    assert_eq!(summary["copies"], 2 * N, "the workload did what we asked");

    let history = agent.history();
    let stats = history.stats();
    assert_eq!(
        stats.transfers,
        2 * N,
        "one transfer per cudaMemcpy: {stats:?}"
    );
    assert_eq!((stats.h2d_bytes, stats.d2h_bytes), (N * SIZE, N * SIZE));
    assert_eq!(stats.lost_events(), 0, "{stats:?}");
    assert_eq!(
        stats.untracked_transfers, 0,
        "every copy names the pinned buffer: {stats:?}"
    );
    if runtime_copies {
        // Runtime calls: cudaMalloc, cudaMallocHost, 2N cudaMemcpy, cudaFreeHost, cudaFree;
        // each over one driver call, which the kernel marks nested.
        assert_eq!(stats.calls, 2 * (2 * N + 4), "{stats:?}");
        assert_eq!(stats.nested_calls, 2 * N + 4, "{stats:?}");
    } else {
        // The 2N copies are their driver calls alone (cudaMemcpy is not probed by default);
        // the 4 other runtime calls each over one nested driver call.
        assert_eq!(stats.calls, 2 * N + 2 * 4, "{stats:?}");
        assert_eq!(stats.nested_calls, 4, "{stats:?}");
    }
    assert_eq!(stats.failed_calls, 0);

    let hot = history.hotspots(1);
    let buffer = hot.first().expect("one hot buffer");
    assert_eq!(buffer.kind, AllocKind::Pinned);
    assert_eq!(
        buffer.size, SIZE,
        "size read from cudaMallocHost's argument"
    );
    assert_eq!((buffer.stats.h2d_count, buffer.stats.d2h_count), (N, N));
    assert!(
        !buffer.is_live(),
        "cudaFreeHost was seen at the address cudaMallocHost returned"
    );
    let site = buffer
        .call_site
        .and_then(|id| history.call_site(id))
        .expect("a call site");
    assert!(
        site.module.ends_with("transfer-bench"),
        "allocated from the workload: {site:?}"
    );
    let device: Vec<_> = history
        .allocations()
        .iter()
        .filter(|a| a.kind == AllocKind::Device)
        .collect();
    assert_eq!(device.len(), 1, "one cudaMalloc");
    assert_eq!(device[0].size, SIZE);
}

#[test]
fn failed_calls_are_recorded_with_their_return_codes() {
    common::require_root();
    let standin = common::standin("failed");
    // The stand-in fails every 2nd pinning call with CUDA_ERROR_OUT_OF_MEMORY (2): the second
    // cudaMallocHost fails and the workload stops there.
    let mut bench = common::bench(
        &standin,
        &[
            "--mode",
            "pinned",
            "--hot",
            "1",
            "--cold",
            "1",
            "--size",
            "4K",
            "--transfers",
            "1",
        ],
    );
    bench
        .env
        .push(("HOTPIN_STANDIN_FAIL_PIN_EVERY".into(), "2".into()));
    let (agent, output) = common::trace(&standin, &bench);
    assert!(
        !output.status.success(),
        "the workload must see cudaMallocHost fail"
    );
    let history = agent.history();
    let stats = history.stats();
    assert_eq!(stats.failed_calls, 1, "{stats:?}");
    let pinned = history
        .allocations()
        .iter()
        .filter(|a| a.kind == AllocKind::Pinned)
        .count();
    assert_eq!(
        pinned, 1,
        "only the successful cudaMallocHost is an allocation"
    );
    assert_eq!(
        stats.failed_by_function.get("cudaMallocHost"),
        Some(&(1, 2)),
        "{stats:?}"
    );
}

#[test]
fn every_registry_probe_fires_with_its_arguments_and_return_values() {
    use hotpin_registry::registry::CALL_PROBES;
    use std::collections::BTreeSet;
    use tracer_agent::probes::ProbeState;
    common::require_root();
    let standin = common::standin("every-call");
    let program = common::compile_c(&standin, "every_call");
    let args = [
        standin.runtime.clone().into(),
        standin.driver.clone().into(),
    ];
    // Every probe, those off by default for CUDA included.
    let (agent, output) = common::trace_configured(
        &standin,
        &program,
        &args,
        &[],
        common::Find::Named,
        |config| config.probes.runtime_copies = true,
        || {},
    );
    assert!(
        output.status.success(),
        "every_call failed: {}",
        output.status
    );

    let unavailable: Vec<_> = agent
        .probes()
        .iter()
        .filter(|p| p.state != ProbeState::Attached)
        .collect();
    let expected_symbols: usize = CALL_PROBES
        .iter()
        .filter(|p| {
            use hotpin_registry::registry::Library;
            matches!(p.library, Library::CudaRuntime | Library::CudaDriver)
        })
        .map(|p| p.symbols.len())
        .sum();
    let attached = agent
        .probes()
        .iter()
        .filter(|p| p.target.path().is_some())
        .count();
    assert_eq!(
        attached, expected_symbols,
        "every CUDA symbol attached: {unavailable:?}"
    );

    // Kprobes on the NVIDIA driver: attached where the kernel has kprobes and the driver is
    // loaded, otherwise reported unavailable with the reason, never fatal.
    let kprobes: Vec<_> = agent
        .probes()
        .iter()
        .filter(|p| matches!(p.target, tracer_agent::probes::ProbeTarget::Kprobe { .. }))
        .collect();
    assert_eq!(kprobes.len(), 2, "both driver kprobes are listed");
    if !std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists() {
        for probe in &kprobes {
            assert!(
                matches!(&probe.state, ProbeState::Unavailable { reason } if reason.contains("no kprobes")),
                "{probe:?}"
            );
        }
    }

    let history = agent.history();
    let stats = history.stats();
    let seen: BTreeSet<_> = stats.calls_by_function.keys().cloned().collect();
    for probe in CALL_PROBES.iter().filter(|p| {
        use hotpin_registry::registry::Library;
        matches!(p.library, Library::CudaRuntime | Library::CudaDriver)
    }) {
        assert!(
            seen.contains(probe.symbols[0]),
            "{} never fired: {seen:?}",
            probe.symbols[0]
        );
    }
    assert_eq!(
        stats.failed_by_function.get("cudaMemcpy"),
        Some(&(1, 21)),
        "{stats:?}"
    );
    assert_eq!(stats.partial_calls, 0);
    // The big batch's elements past the 1024 the kernel side reads: counted lost, exactly.
    let unread = 1100 - u64::from(tracer_common::MAX_BATCH_COPIES);
    assert_eq!(stats.kernel.unread_copies, unread, "{stats:?}");
    assert_eq!(stats.lost_events(), unread, "{stats:?}");
    // Each copy counted once, runtime calls over their driver calls included; copies read
    // from descriptors and batch arrays too (the big batch: 1024 one-byte copies).
    let big_batch = u64::from(tracer_common::MAX_BATCH_COPIES);
    let h2d = [
        101, 102, 103, 104, 110, 130, 201, 202, 205, 206, 209, 211, 213, 121, 122, 123, 124, 143,
        144, 145, 146, 220, 222, 224, 226, 228, 230, 232, 234, 241, 242, 243, 244, 247, 249, 250,
    ];
    let d2h = [
        120, 140, 203, 204, 207, 208, 210, 212, 125, 126, 127, 128, 147, 148, 149, 150, 221, 223,
        225, 229, 231, 233, 235, 245, 246, 248,
    ];
    assert_eq!(
        stats.transfers,
        (h2d.len() + d2h.len()) as u64 + big_batch,
        "{stats:?}"
    );
    assert_eq!(stats.h2d_bytes, h2d.iter().sum::<u64>() + big_batch);
    assert_eq!(stats.d2h_bytes, d2h.iter().sum::<u64>());
    assert_eq!(stats.unresolved_copies, 0, "{stats:?}");
    // Device-to-device copies, peer ones included, each once: apart from transfers.
    assert_eq!(stats.device_copies, 10, "{stats:?}");
    assert_eq!(stats.device_copy_bytes, (301..=310).sum::<u64>());
    // Prefetches by where the location argument sends them.
    assert_eq!(
        (stats.prefetches_to_device, stats.prefetch_to_device_bytes),
        (2, 4000 + 4002)
    );
    assert_eq!(
        (stats.prefetches_to_host, stats.prefetch_to_host_bytes),
        (2, 4001 + 4003)
    );
    // Device memory: everything was live at once with cuMemAlloc's 2048 bytes, and all freed.
    let new_device: u64 = [1536, 3000, 3001, 3002, 3003, 5120, 3004, 3005, 3006, 3007]
        .iter()
        .sum();
    let memory = stats
        .device_memory
        .values()
        .next()
        .expect("device memory of the process");
    assert_eq!(memory.live_bytes, 0, "{memory:?}");
    assert_eq!(
        memory.peak_bytes,
        (1 << 20) + 2048 + new_device + 8192 + 12288 + (1 << 16),
        "{memory:?}"
    );
    // Allocations with the sizes passed, read from arguments and out-parameters.
    let sizes = |kind: AllocKind| -> BTreeSet<u64> {
        history
            .allocations()
            .iter()
            .filter(|a| a.kind == kind)
            .map(|a| a.size)
            .collect()
    };
    assert_eq!(
        sizes(AllocKind::Device),
        BTreeSet::from([
            1 << 20,
            2048,
            1536,
            3000,
            3001,
            3002,
            3003,
            5120,
            3004,
            3005,
            3006,
            3007,
            1 << 16
        ])
    );
    assert_eq!(sizes(AllocKind::Managed), BTreeSet::from([8192, 12288]));
    assert_eq!(sizes(AllocKind::DeviceReserved), BTreeSet::from([1 << 20]));
    assert_eq!(
        sizes(AllocKind::Pinned),
        BTreeSet::from([3 * 4096, 5 * 4096, 4096, 8192])
    );
    let registered: Vec<_> = history
        .allocations()
        .iter()
        .filter(|a| {
            a.events
                .iter()
                .any(|e| matches!(e, hotpin_history::history::AllocEvent::Register { .. }))
        })
        .map(|a| a.size)
        .collect();
    assert_eq!(
        registered,
        vec![7 * 4096, 4096],
        "both registrations recorded"
    );
    let live: Vec<_> = history
        .allocations()
        .iter()
        .filter(|a| {
            matches!(
                a.kind,
                AllocKind::Device
                    | AllocKind::Managed
                    | AllocKind::DeviceReserved
                    | AllocKind::Pinned
            ) && a.is_live()
        })
        .collect();
    assert!(
        live.is_empty(),
        "every free was matched to its allocation: {live:?}"
    );
    let pinned = history
        .allocations()
        .iter()
        .find(|a| a.size == 3 * 4096 && a.kind == AllocKind::Pinned)
        .expect("h");
    assert_eq!(
        pinned.stats.transfers,
        (h2d.len() + d2h.len()) as u64 + big_batch,
        "every copy went through h, the first pinned buffer"
    );
}
