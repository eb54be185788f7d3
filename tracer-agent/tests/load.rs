//! Load tests: the tracer at the highest call rates the CUDA stand-in can drive, nothing lost.
//! Needs root.
//!
//! They saturate the machine's cores, so they must never share them with another test: this
//! binary is run on its own with `--test-threads 1` (`cargo xtask test` does), and each test
//! also takes a lock so a plain `cargo test` cannot overlap them either.

mod common;

use common::Find;

#[test]
fn nothing_is_lost_at_the_highest_call_rate_we_can_drive() {
    common::require_root();
    let _serial = common::one_at_a_time();
    let standin = common::standin("load");
    // 4-byte copies as fast as the stand-in allows: every cudaMemcpy is two probed calls
    // (runtime and driver), four probe hits, two events.
    const ROUND_TRIPS: u64 = 100_000;
    let bench = common::bench(
        &standin,
        &[
            "--hot",
            "1",
            "--cold",
            "0",
            "--size",
            "4",
            "--transfers",
            "100000",
        ],
    );
    let (agent, output) = common::trace(&standin, &bench);
    let summary = common::summary(&output);
    let seconds = summary["copy_s"].as_f64().expect("copy_s");
    let history = agent.history();
    let stats = history.stats();
    let calls_per_s = (2 * ROUND_TRIPS) as f64 / seconds;
    eprintln!(
        "load: {} cudaMemcpy in {seconds:.3} s = {calls_per_s:.0} calls/s, {} events, {} lost",
        2 * ROUND_TRIPS,
        stats.calls,
        stats.lost_events()
    );
    assert_eq!(stats.lost_events(), 0, "{stats:?}");
    assert_eq!(stats.kernel.pending_full, 0, "{stats:?}");
    assert_eq!(stats.transfers, 2 * ROUND_TRIPS, "every copy counted once");
    // A copy is its driver call alone (cudaMemcpy is not probed by default); cudaMalloc's
    // and cudaMallocHost's driver calls are nested.
    assert_eq!(stats.nested_calls, 2, "{stats:?}");
}

#[test]
fn eight_threads_at_full_speed_every_event_arrives_or_is_counted_lost() {
    common::require_root();
    let _serial = common::one_at_a_time();
    let standin = common::standin("threads");
    let program = common::compile_c(&standin, "threads");
    const PER_THREAD: u64 = 100_000;
    let args = [
        standin.runtime.clone().into(),
        standin.driver.clone().into(),
        PER_THREAD.to_string().into(),
    ];
    let (agent, output) = common::trace_program(&standin, &program, &args, &[], Find::Named, || {});
    assert!(output.status.success(), "threads failed: {}", output.status);
    let seconds: f64 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("seconds");
    let history = agent.history();
    let stats = history.stats();
    // Every cudaMemcpy is one event, its driver call's (the runtime's is not probed by
    // default). cudaMalloc adds two.
    // (The threads' own mmaps and faults are host memory events, lost or not, counted apart.)
    let emitted = 8 * PER_THREAD + 2;
    eprintln!(
        "threads: {} cudaMemcpy in {seconds:.2} s = {:.0} events/s, {} received, {} lost",
        8 * PER_THREAD,
        emitted as f64 / seconds,
        stats.calls,
        stats.lost_events()
    );
    assert_eq!(
        stats.calls + stats.kernel.ringbuf_full,
        emitted,
        "every event arrived or was counted lost, exactly: {stats:?}"
    );
    assert_eq!(stats.kernel.pending_full, 0, "{stats:?}");
    // The recorder runs at real-time priority (SCHED_FIFO 1), so the target cannot starve it
    // (61% were lost at normal priority).
    assert_eq!(stats.kernel.ringbuf_full, 0, "none lost: {stats:?}");
}
