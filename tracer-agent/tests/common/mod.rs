//! Helpers for the privileged integration tests: they load real eBPF programs and trace
//! processes they start themselves, against the CUDA stand-in (a test fixture, not CUDA).
#![allow(dead_code, reason = "each test binary uses a different part")]

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use cuda_standin::{Installed, Scratch};
use tracer_agent::{AgentConfig, TracerAgent, target};

/// Fails loudly unless the tests can load eBPF: these tests must run, not skip, in CI.
/// Prometheus's `promtool`: on PATH (Debian's `prometheus` package), else where `cargo xtask
/// setup` unpacks it (target/tools/bin). Missing, the test fails: it lints the metrics.
pub fn promtool() -> PathBuf {
    let unpacked = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/bin/promtool");
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("promtool"))
            .find(|candidate| candidate.is_file())
    });
    let found = on_path.or_else(|| unpacked.is_file().then_some(unpacked));
    found.expect(
        "no promtool to lint the metrics: `cargo xtask setup` unpacks it into target/tools/bin",
    )
}

pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "the privileged integration tests load eBPF programs and must run as root \
         (CI runs them as root; run `sudo cargo xtask test` locally)"
    );
}

/// Reads a `tracer record` child's stderr until it says it is recording; what it said so far.
/// Panics if it ends first.
pub fn until_recording(stderr: &mut impl std::io::BufRead) -> String {
    let mut said = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).expect("read the tracer") == 0 {
            panic!("the tracer ended before recording: {said}");
        }
        said.push_str(&line);
        if line.starts_with("tracer: recording") {
            return said;
        }
    }
}

/// Installs the stand-in into a fresh directory for this test, removed when it passes.
pub fn standin(test: &str) -> Scratch {
    Scratch::new(test).expect("install the CUDA stand-in")
}

/// The workload binary, built by cargo alongside the tests (`cargo test --workspace` builds
/// every binary); built here when a test runs alone.
pub fn workload() -> PathBuf {
    let deps = std::env::current_exe().expect("test path");
    let profile_dir = deps
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let path = profile_dir.join("transfer-bench");
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let release = profile_dir.ends_with("release");
        let mut build = Command::new(cargo);
        build.args(["build", "-p", "transfer-bench"]);
        if release {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build");
        assert!(status.success(), "building transfer-bench failed");
    }
    path
}

/// hotpin's C library (the allocator crate's cdylib), built alongside the workload.
pub fn hotpin_library() -> PathBuf {
    let path = workload().with_file_name("libhotpin.so");
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "-p", "allocator"]);
        if path.parent().is_some_and(|dir| dir.ends_with("release")) {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build");
        assert!(status.success(), "building libhotpin.so failed");
    }
    path
}

/// A transfer-bench run against the stand-in: the arguments and extra environment.
pub struct Bench {
    pub args: Vec<OsString>,
    pub env: Vec<(String, String)>,
}

pub fn bench(standin: &Installed, args: &[&str]) -> Bench {
    let mut all: Vec<OsString> = vec!["--cudart".into(), standin.runtime.clone().into()];
    all.extend(args.iter().map(OsString::from));
    Bench {
        args: all,
        env: vec![("LD_LIBRARY_PATH".into(), standin.dir.display().to_string())],
    }
}

/// transfer-bench copying 4 KiB back and forth for minutes (2G copies; untraced the stand-in
/// makes about 5M a second): a workload that outlives whatever the test does with it, to be
/// killed at the end.
pub fn long_bench(standin: &Installed) -> Bench {
    bench(
        standin,
        &[
            "--hot",
            "1",
            "--cold",
            "0",
            "--size",
            "4K",
            "--transfers",
            "1000000000",
        ],
    )
}

fn configure(bench: &Bench) -> impl FnOnce(&mut Command) + '_ {
    |command| {
        command
            .envs(bench.env.iter().cloned())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    }
}

/// Starts transfer-bench unpaused and untraced (a bystander).
pub fn spawn_bench(bench: &Bench) -> std::process::Child {
    let mut command = Command::new(workload());
    command.args(&bench.args);
    configure(bench)(&mut command);
    command.spawn().expect("start transfer-bench")
}

/// How the tracer finds the CUDA libraries.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Find {
    /// Given up front (`--cuda-runtime`, `--cuda-driver`).
    Named,
    /// Noticed when the workload opens them (the openat tracepoints).
    WhenOpened,
}

/// Starts transfer-bench paused, traces it with probes on the stand-in, lets it run to the
/// end, and returns the stopped agent with the child's output.
pub fn trace(standin: &Installed, bench: &Bench) -> (TracerAgent, Output) {
    trace_with(standin, bench, Find::Named)
}

pub fn trace_with(standin: &Installed, bench: &Bench, find: Find) -> (TracerAgent, Output) {
    trace_full(standin, bench, find, || {})
}

/// [`trace_with`], calling `before_stop` once the workload has exited, before tracing stops.
pub fn trace_full(
    standin: &Installed,
    bench: &Bench,
    find: Find,
    before_stop: impl FnOnce(),
) -> (TracerAgent, Output) {
    trace_program(
        standin,
        &workload(),
        &bench.args,
        &bench.env,
        find,
        before_stop,
    )
}

/// Starts `program args` paused, traces it with probes on the stand-in, lets it run to the
/// end (two minutes at most), calls `before_stop`, and returns the stopped agent with the
/// program's output.
pub fn trace_program(
    standin: &Installed,
    program: &Path,
    args: &[OsString],
    env: &[(String, String)],
    find: Find,
    before_stop: impl FnOnce(),
) -> (TracerAgent, Output) {
    trace_configured(standin, program, args, env, find, |_| {}, before_stop)
}

/// [`trace_program`], with `configure` applied to the agent's configuration first.
pub fn trace_configured(
    standin: &Installed,
    program: &Path,
    args: &[OsString],
    env: &[(String, String)],
    find: Find,
    configure: impl FnOnce(&mut AgentConfig),
    before_stop: impl FnOnce(),
) -> (TracerAgent, Output) {
    let mut child = target::spawn_paused(program.as_os_str(), args, |command| {
        command
            .envs(env.iter().cloned())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    })
    .expect("spawn the workload");
    let mut config = AgentConfig::new(child.pid());
    // Held before exec: nothing of the workload's own is mapped yet.
    config.seed_existing_memory = false;
    match find {
        Find::Named => config.libraries = vec![standin.runtime.clone(), standin.driver.clone()],
        Find::WhenOpened => config.stop_on_library_open = true,
    }
    config.modules = vec![program.to_path_buf()];
    config.libraries.push(program.to_path_buf());
    configure(&mut config);
    let mut agent = TracerAgent::with_config(config);
    agent.start().expect("start tracing (needs root and BPF)");
    child.resume().expect("resume the workload");
    let output = wait_with_timeout(child.child, Duration::from_secs(120));
    before_stop();
    agent.stop().expect("stop tracing");
    (agent, output)
}

/// Compiles tests/c/NAME.c into the stand-in's directory.
pub fn compile_c(standin: &Installed, name: &str) -> PathBuf {
    let program = standin.dir.join(name);
    let source = format!("{}/tests/c/{name}.c", env!("CARGO_MANIFEST_DIR"));
    let include = format!("{}/../allocator/include", env!("CARGO_MANIFEST_DIR"));
    let status = Command::new("cc")
        .args([
            "-O1",
            "-fno-omit-frame-pointer",
            "-pthread",
            "-I",
            &include,
            "-o",
        ])
        .arg(&program)
        .arg(&source)
        .arg("-ldl")
        .status()
        .expect("run cc");
    assert!(status.success(), "compiling {source} failed");
    program
}

pub fn wait_with_timeout(mut child: std::process::Child, limit: Duration) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait for the workload").is_some() {
            return child
                .wait_with_output()
                .expect("collect the workload's output");
        }
        assert!(start.elapsed() < limit, "the workload ran over {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The JSON summary transfer-bench prints.
pub fn summary(output: &Output) -> serde_json::Value {
    assert!(
        output.status.success(),
        "the workload failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("transfer-bench prints one JSON object")
}

/// Tests that must not share the machine with another test of their binary take this lock
/// (a test keeping a core busy would starve another test's tracer).
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOAD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOAD.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
