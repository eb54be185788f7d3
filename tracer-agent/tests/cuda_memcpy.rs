//! The first probe end to end: N cudaMemcpy calls in a child process give N events with the
//! right arguments and return values. Needs root: loads real eBPF programs.

mod common;

use tracer_agent::history::AllocKind;

#[test]
fn n_memcpy_calls_give_n_transfers_attributed_to_the_right_buffer() {
    common::require_root();
    let standin = common::standin("memcpy");
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
    let (agent, output) = common::trace(&standin, &bench);
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
    // Runtime calls: cudaMalloc, cudaMallocHost, 2N cudaMemcpy, cudaFreeHost, cudaFree; each
    // over one driver call, which the kernel marks nested.
    assert_eq!(stats.calls, 2 * (2 * N + 4), "{stats:?}");
    assert_eq!(stats.nested_calls, 2 * N + 4, "{stats:?}");
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
