//! Libraries loaded after the start and other processes using the same library. Needs root.

mod common;

use std::{
    process::Stdio,
    time::{Duration, Instant},
};

use common::Find;

#[test]
fn a_runtime_dlopened_after_the_start_is_attached_before_its_first_call() {
    common::require_root();
    let _serial = common::one_at_a_time();
    let standin = common::standin("dlopen");
    // The workload dlopens libcudart.so.13, which dlopens libcuda.so.1, and copies at once:
    // only holding it while the probes attach sees the first calls.
    let bench = common::bench(
        &standin,
        &[
            "--hot",
            "2",
            "--cold",
            "3",
            "--size",
            "16K",
            "--transfers",
            "50",
        ],
    );
    let (agent, output) = common::trace_with(&standin, &bench, Find::WhenOpened);
    let summary = common::summary(&output);
    let history = agent.history();
    let stats = history.stats();
    assert_eq!(
        stats.transfers,
        summary["copies"].as_u64().expect("copies"),
        "{stats:?}"
    );
    assert_eq!(stats.transfers, 2 * (2 * 50 + 3));
    assert_eq!(stats.lost_events(), 0);
    assert_eq!(
        stats.partial_calls, 0,
        "no call was caught halfway: {stats:?}"
    );
    let attached: Vec<_> = agent
        .probes()
        .iter()
        .filter_map(|p| p.target.path())
        .collect();
    assert!(
        attached.iter().any(|p| p.ends_with("libcudart.so.13"))
            && attached.iter().any(|p| p.ends_with("libcuda.so.1")),
        "both libraries were attached as they were opened: {attached:?}"
    );
}

#[test]
fn another_process_calling_the_same_library_is_not_traced() {
    common::require_root();
    let _serial = common::one_at_a_time();
    let standin = common::standin("bystander");
    // A bystander runs the same stand-in libraries (same files, so the same uprobes) all the
    // while, with far more copies.
    let mut bystander = common::spawn_bench(&common::long_bench(&standin));
    let bench = common::bench(
        &standin,
        &[
            "--hot",
            "1",
            "--cold",
            "0",
            "--size",
            "4K",
            "--transfers",
            "300",
        ],
    );
    let (agent, output) = common::trace_full(&standin, &bench, Find::Named, || {
        assert!(
            bystander.try_wait().expect("poll the bystander").is_none(),
            "the bystander must outlive the traced run, or the test proves nothing"
        );
    });
    common::summary(&output);
    // It has made its point; it would run for minutes more.
    bystander.kill().expect("stop the bystander");
    let _ = bystander.wait();
    let history = agent.history();
    assert_eq!(
        history.stats().transfers,
        600,
        "only the traced process counts"
    );
    assert!(
        history
            .allocations()
            .iter()
            .all(|a| a.pid == output_pid(&history))
    );
}

fn output_pid(history: &tracer_agent::history::MemHistory) -> u32 {
    history.meta().pids[0]
}

/// Copies (host-to-device plus device-to-host) the history credits to process `pid`.
fn copies_of(history: &tracer_agent::history::MemHistory, pid: u32) -> u64 {
    history
        .allocations()
        .iter()
        .filter(|a| a.pid == pid)
        .map(|a| a.stats.h2d_count + a.stats.d2h_count)
        .sum()
}

/// A target that forks a worker, forks a child that execs another program, has a child
/// killed mid-stream, and unloads and reloads the CUDA runtime: every child is followed from
/// its first instruction, each process's copies are all there, the recording ends when the
/// last of them exits, and nothing is lost.
#[test]
fn children_exec_kill_and_library_unload_are_followed() {
    common::require_root();
    let _serial = common::one_at_a_time();
    let standin = common::standin("family");
    let program = common::compile_c(&standin, "family");
    let args = [
        standin.runtime.clone().into_os_string(),
        standin.driver.clone().into_os_string(),
        common::workload().into_os_string(),
    ];
    let env = [(
        "LD_LIBRARY_PATH".to_string(),
        standin.dir.display().to_string(),
    )];
    let (agent, output) =
        common::trace_program(&standin, &program, &args, &env, Find::Named, || {});
    assert!(output.status.success(), "{output:?}");
    // The exec'd transfer-bench prints its summary first; the parent's line is the last.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let pids: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("pids");
    let pid = |name: &str| pids[name].as_u64().expect("a pid") as u32;
    let history = agent.history();
    assert_eq!(
        copies_of(&history, pid("parent")),
        15,
        "10 before, 5 after the reload"
    );
    assert_eq!(copies_of(&history, pid("worker")), 20, "the forked worker");
    assert_eq!(
        copies_of(&history, pid("execd")),
        8,
        "transfer-bench after exec: 1 hot x 3 round trips + 1 cold"
    );
    assert!(
        copies_of(&history, pid("killed")) > 0,
        "copies until killed"
    );
    for name in ["worker", "execd", "killed"] {
        assert!(
            history.meta().pids.contains(&pid(name)),
            "{name} in the metadata"
        );
    }
    assert_eq!(history.stats().lost_events(), 0, "{:?}", history.stats());
    assert_eq!(history.stats().failed_calls, 0);
}

/// A process held on its CUDA library open that someone else continues before the agent let
/// it go (`runuser`, `su` and a shell's `fg` continue their child once they are continued) is
/// stopped again at its next host memory syscall: the loader's mmap of that library, before
/// any of its code runs. Released by the agent, it runs on. (Before: under load, one of two
/// runs under `runuser` beside the daemon ran past the driver's open and lost every copy.)
#[test]
fn a_held_process_continued_by_another_is_stopped_again_until_let_go() {
    use tracer_agent::probes::{ProbeOptions, Probes};
    common::require_root();
    let _serial = common::one_at_a_time();
    let standin = common::standin("held-again");
    let program = common::compile_c(&standin, "held");
    let mut probes = Probes::load(1 << 20, ProbeOptions::default()).expect("load the probes");
    probes
        .set_stop_on_library_open(true)
        .expect("stop on opens");
    let mut child = tracer_agent::target::spawn_paused(
        program.as_os_str(),
        &[standin.runtime.clone().into_os_string()],
        |command| {
            command.stdout(Stdio::piped()).stderr(Stdio::piped());
        },
    )
    .expect("spawn");
    let pid = child.pid();
    probes.add_target(pid).expect("a target");
    child.resume().expect("resume");
    // Kept alive, as the agent's rescan does.
    let stopped_within = |limit: Duration, probes: &mut Probes| {
        let start = Instant::now();
        while start.elapsed() < limit {
            probes.heartbeat().expect("heartbeat");
            if state(pid) == Some('T') {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    };
    assert!(
        stopped_within(Duration::from_secs(10), &mut probes),
        "held on its open"
    );
    for _ in 0..3 {
        // SAFETY: a signal to the test's own child.
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            stopped_within(Duration::from_secs(2), &mut probes),
            "stopped again after someone else's SIGCONT"
        );
    }
    probes.release_hold(pid).expect("release");
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    let output = common::wait_with_timeout(child.child, Duration::from_secs(10));
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "loaded\n");
}

/// A process's state letter, from `/proc/PID/stat` (after the command's closing parenthesis).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}
