//! Libraries loaded after the start and other processes using the same library. Needs root.

mod common;

use std::{
    process::Stdio,
    time::{Duration, Instant},
};

use common::Find;
use tracer_agent::probes::{ProbeOptions, Probes};

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

fn output_pid(history: &hotpin_history::history::MemHistory) -> u32 {
    history.meta().pids[0]
}

/// Copies (host-to-device plus device-to-host) the history credits to process `pid`.
fn copies_of(history: &hotpin_history::history::MemHistory, pid: u32) -> u64 {
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
    common::require_root();
    let _serial = common::one_at_a_time();
    let standin = common::standin("held-again");
    let (mut probes, child) = held_program(&standin);
    let pid = child.pid();
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

/// Probes that stop a target on its CUDA library opens, and tests/c/held.c started as their
/// target, about to open the stand-in's runtime.
fn held_program(standin: &cuda_standin::Scratch) -> (Probes, tracer_agent::target::PausedChild) {
    let program = common::compile_c(standin, "held");
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
    probes.add_target(child.pid()).expect("a target");
    child.resume().expect("resume");
    (probes, child)
}

/// A process's state letter, from `/proc/PID/stat` (after the command's closing parenthesis).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// An agent that stops answering while a program is held on its library open (hung, or
/// stopped by a debugger) does not freeze it (#41 item 3): its watchdog, a process of its
/// own, lets the program go once the heartbeat is `HOLD_LIMIT_NS` old, not before.
/// (Before: the program stayed stopped until the agent answered again.)
#[test]
fn a_program_held_by_an_agent_that_stops_answering_is_let_go_after_the_limit() {
    common::require_root();
    let _serial = common::one_at_a_time();
    let standin = common::standin("held-hung");
    let (mut probes, child) = held_program(&standin);
    let pid = child.pid();
    let start = Instant::now();
    while state(pid) != Some('T') {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "held on its open"
        );
        probes.heartbeat().expect("heartbeat");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The agent answers no more: no heartbeat, no SIGCONT.
    probes.heartbeat().expect("a last heartbeat");
    let last = Instant::now();
    let output = common::wait_with_timeout(child.child, Duration::from_secs(10));
    let waited = last.elapsed();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "loaded\n");
    let limit = Duration::from_nanos(tracer_agent::watchdog::HOLD_LIMIT_NS);
    assert!(
        waited >= limit && waited < limit + Duration::from_secs(2),
        "let go {waited:?} after the last heartbeat"
    );
}

/// A tracer killed (SIGKILL) while its program is held on a library open does not leave it
/// stopped: its watchdog sees it gone and lets the program go, then ends. (Before: the
/// program stayed stopped for good.)
#[test]
fn a_program_held_by_a_tracer_that_is_killed_runs_on() {
    use std::io::{Read as _, Write as _};
    common::require_root();
    let _serial = common::one_at_a_time();
    let standin = common::standin("held-killed");
    let program = common::compile_c(&standin, "held");
    let out = standin.dir.join("killed.hotpin");
    let mut tracer = std::process::Command::new(env!("CARGO_BIN_EXE_tracer"))
        .arg("record")
        .arg("-o")
        .arg(&out)
        .args(["--", "sh", "-c", "read line; exec \"$0\" \"$1\""])
        .arg(&program)
        .arg(&standin.runtime)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tracer record");
    let tracer_pid = tracer.id();
    // The program, waiting for its line, once the tracer is recording.
    let start = Instant::now();
    let target = loop {
        let children =
            std::fs::read_to_string(format!("/proc/{tracer_pid}/task/{tracer_pid}/children"))
                .unwrap_or_default();
        let shell = children
            .split_whitespace()
            .filter_map(|pid| pid.parse::<u32>().ok())
            .find(|&pid| {
                // Past the start trampoline: the command itself, reading its line.
                std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|command| command.starts_with("sh\0-c\0read line"))
            });
        if let Some(shell) = shell {
            break shell;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the program started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(300));
    // Stopped, with its heartbeat still fresh: the program is held on its open.
    // SAFETY: signals to the test's own child.
    unsafe { libc::kill(tracer_pid as i32, libc::SIGSTOP) };
    let mut stdin = tracer.stdin.take().expect("stdin");
    stdin.write_all(b"go\n").expect("write the line");
    drop(stdin);
    let start = Instant::now();
    while state(target) != Some('T') {
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "held on its open: {:?} {:?} {:?}",
            state(target),
            std::fs::read_to_string(format!("/proc/{target}/cmdline")),
            std::fs::read_to_string(format!("/proc/{target}/wchan")),
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: as above.
    unsafe { libc::kill(tracer_pid as i32, libc::SIGKILL) };
    let killed = Instant::now();
    let _ = tracer.wait();
    let mut stdout = tracer.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut said = String::new();
        let _ = stdout.read_to_string(&mut said);
        let _ = tx.send(said);
    });
    let said = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the program ran on and ended");
    assert_eq!(said, "loaded\n");
    assert!(
        killed.elapsed() < Duration::from_secs(2),
        "{:?}",
        killed.elapsed()
    );
}
