//! hotpin's allocator end to end: profile mode under the tracer writes a history, use mode
//! reads it back and pins only the hot buffers. Needs root (the tracer loads eBPF).

mod common;

use std::process::Command;

use hotpin_history::dump::Format;
use hotpin_history::history::AllocKind;
use hotpin_policy::hot::HotPolicy;

const SIZE: u64 = 256 * 1024;

fn run_bench(
    standin: &cuda_standin::Installed,
    args: &[&str],
    env: &[(&str, &str)],
) -> serde_json::Value {
    let bench = common::bench(standin, args);
    let output = Command::new(common::workload())
        .args(&bench.args)
        .envs(bench.env.iter().cloned())
        .envs(env.iter().copied())
        .output()
        .expect("run transfer-bench");
    common::summary(&output)
}

fn profile(standin: &cuda_standin::Installed, name: &str) -> std::path::PathBuf {
    let bench = common::bench(
        standin,
        &[
            "--mode",
            "profile",
            "--hot",
            "2",
            "--cold",
            "6",
            "--size",
            "256K",
            "--transfers",
            "30",
        ],
    );
    let (agent, output) = common::trace(standin, &bench);
    let summary = common::summary(&output);
    assert_eq!(
        summary["bytes_pinned"],
        8 * SIZE,
        "profile mode pins everything"
    );
    let history = agent.history();
    let hotpin: Vec<_> = history
        .allocations()
        .iter()
        .filter(|a| a.call_site.is_some() && a.kind == AllocKind::Pinned)
        .collect();
    assert_eq!(
        hotpin.len(),
        8,
        "the tracer saw every hotpin_malloc as a pinned allocation"
    );
    let ordinals: Vec<_> = hotpin.iter().map(|a| a.ordinal).collect();
    assert_eq!(
        ordinals,
        (0..8).collect::<Vec<_>>(),
        "one call site, eight ordinals: {:?}",
        history.call_sites()
    );
    let transfers: Vec<_> = hotpin.iter().map(|a| a.stats.transfers).collect();
    assert_eq!(
        transfers,
        vec![60, 60, 2, 2, 2, 2, 2, 2],
        "transfers credited to each buffer"
    );
    drop(history);
    let path = std::env::temp_dir().join(format!("hotpin-{name}-{}.hotpin", std::process::id()));
    agent
        .dump(&path, Format::Binary, false)
        .expect("write the history");
    path
}

/// transfer-bench in use mode with `history`, the same buffers as `profile` made.
fn use_mode(
    standin: &cuda_standin::Installed,
    history: &std::path::Path,
    env: &[(&str, &str)],
) -> serde_json::Value {
    let history = history.display().to_string();
    let args = [
        "--mode",
        "use",
        "--history",
        &history,
        "--hot",
        "2",
        "--cold",
        "6",
    ];
    let args = [&args[..], &["--size", "256K", "--transfers", "30"]].concat();
    run_bench(standin, &args, env)
}

#[test]
fn use_mode_pins_exactly_the_buffers_the_profile_found_hot() {
    common::require_root();
    let standin = common::standin("alloc-use");
    let history = profile(&standin, "use");
    let summary = use_mode(&standin, &history, &[]);
    assert_eq!(
        summary["bytes_pinned"],
        2 * SIZE,
        "only the two hot buffers: {summary}"
    );
    assert_eq!(summary["allocator"]["pinned_allocations"], 2);
    assert_eq!(summary["allocator"]["pageable_allocations"], 6);
    assert_eq!(summary["allocator"]["fallbacks"], 0);
}

#[test]
fn pinning_failures_fall_back_to_pageable_and_every_allocation_is_satisfied() {
    common::require_root();
    let standin = common::standin("alloc-faults");
    let history = profile(&standin, "faults");
    // The stand-in fails every 2nd pinning call: one of the two hot buffers cannot be pinned.
    let summary = use_mode(
        &standin,
        &history,
        &[("HOTPIN_STANDIN_FAIL_PIN_EVERY", "2")],
    );
    assert_eq!(
        summary["copies"],
        2 * (2 * 30 + 6),
        "the workload ran to the end: {summary}"
    );
    assert_eq!(summary["allocator"]["pinned_allocations"], 1, "{summary}");
    assert_eq!(summary["allocator"]["pageable_allocations"], 7);
    assert_eq!(
        summary["allocator"]["fallbacks"], 1,
        "the failed pin is counted"
    );
}

/// The C ABI from libhotpin.so, loaded with dlopen after the start as Python's ctypes loads
/// it: the tracer notices the library opening and attaches before it runs; the history shows
/// the per-step batch buffers as one recycled group; use mode pins the hot buffer and one
/// reused block for all the batches, and leaves the cold buffers pageable.
#[test]
fn a_batch_buffer_allocated_every_step_is_pinned_once_and_reused() {
    common::require_root();
    let standin = common::standin("alloc-batches");
    let program = common::compile_c(&standin, "batches");
    let env = |mode: &str| {
        vec![
            ("HOTPIN_MODE".to_string(), mode.to_string()),
            (
                "HOTPIN_LIB".into(),
                common::hotpin_library().display().to_string(),
            ),
            (
                "HOTPIN_CUDART".into(),
                standin.runtime.display().to_string(),
            ),
            ("LD_LIBRARY_PATH".into(), standin.dir.display().to_string()),
        ]
    };
    let (agent, output) = common::trace_program(
        &standin,
        &program,
        &[],
        &env("profile"),
        common::Find::WhenOpened,
        || {},
    );
    assert!(output.status.success(), "{output:?}");
    let history = agent.history();
    let groups = HotPolicy::default().recycled_groups(&history);
    assert_eq!(groups.len(), 1, "{groups:?}");
    let group = &groups[0];
    assert_eq!(
        (
            group.size,
            group.allocations,
            group.transfers,
            group.peak_live
        ),
        (4 << 20, 12, 12, 1),
        "{group:?}"
    );
    let hot: Vec<_> = history
        .hotspots_threshold(4)
        .iter()
        .map(|a| a.size)
        .collect();
    assert_eq!(hot, vec![2 << 20], "the one hot buffer");
    drop(history);
    let path = std::env::temp_dir().join(format!("hotpin-batches-{}.hotpin", std::process::id()));
    agent
        .dump(&path, Format::Binary, false)
        .expect("write the history");

    let mut env = env("use");
    env.push(("HOTPIN_HISTORY".into(), path.display().to_string()));
    let output = Command::new(&program)
        .envs(env)
        .output()
        .expect("run the program in use mode");
    assert!(output.status.success(), "{output:?}");
    let stats: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("the program prints its counters");
    assert_eq!(
        stats["pinned_allocations"], 13,
        "the hot buffer and 12 batches: {stats}"
    );
    assert_eq!(
        stats["pageable_allocations"], 2,
        "the cold buffers: {stats}"
    );
    assert_eq!(
        stats["cache_hits"], 11,
        "one block serves every batch: {stats}"
    );
    assert_eq!(stats["peak_pinned_bytes"], (2 << 20) + (4 << 20), "{stats}");
    let _ = std::fs::remove_file(path);
}
