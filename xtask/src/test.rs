//! `cargo xtask test`: what CI runs. Formatting, lints, unit tests and the privileged
//! integration tests that load real eBPF programs (they fail, not skip, without root), the load
//! tests alone, a short run of each fuzz target, the wheel, the deploy files and the GPU
//! workloads' harness.

use std::{path::PathBuf, process::Command, time::Instant};

use anyhow::{Result, bail};

use crate::{cargo, sh};

/// Integration test binaries that saturate the cores: run alone, one test at a time, after the
/// others, so no other test shares the machine with them (tracer-agent/tests/load.rs).
const LOAD_TESTS: &str = "load";

pub fn run() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { geteuid() } != 0 {
        bail!("the integration tests load eBPF programs: run `cargo xtask test` as root");
    }
    let started = Instant::now();
    crate::setup::run()?;
    sh(cargo().args(["fmt", "--all", "--check"]))?;
    // No files of a crate import each other in a loop (#45).
    crate::circles::check(&crate::workspace_root())?;
    // The kernel side: lints for its own target, then the object every later build embeds.
    sh(ebpf_cargo("clippy").args(["--", "-D", "warnings"]))?;
    let object = build_ebpf_object()?;
    // SAFETY: single-threaded here; every cargo run below inherits it.
    unsafe { std::env::set_var("HOTPIN_EBPF_OBJECT", &object) };
    // The whole workspace, on the host: the eBPF crate compiles to an empty program there.
    sh(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    // `--all-targets` leaves out tests marked `test = false`: the kprobe test, which only
    // `cargo xtask vm-test` runs, and the load tests. They are linted (and so compiled) here.
    sh(cargo()
        .args(["clippy", "--package", "tracer-agent"])
        .args(["--test", "kprobe", "--test", LOAD_TESTS])
        .args(["--", "-D", "warnings"]))?;
    // Also what tests start as processes of their own (transfer-bench, libhotpin.so).
    sh(cargo().args(["build", "--workspace"]))?;
    // Python tools some tests start: moto's S3-compatible server (preload/tests/fleet.rs),
    // and the manifest checkers deploy/check.py uses.
    let python = crate::wheel::python_tools(&["moto[server]", "pyyaml", "kubernetes-validate"])?;
    // Everything but the load tests (`test = false` in tracer-agent's manifest), two at a time.
    sh(cargo()
        .args(["test", "--workspace", "--no-fail-fast"])
        .args(["--", "--test-threads", "2"]))?;
    sh(cargo()
        .args(["test", "--package", "tracer-agent", "--test", LOAD_TESTS])
        .args(["--", "--test-threads", "1"]))?;
    // The allocator's unit tests again under valgrind's memcheck: the concurrent stress test
    // and the double/foreign free tests must not touch memory they should not.
    sh(cargo()
        .args([
            "test",
            "--package",
            "allocator",
            "--lib",
            "--",
            "--test-threads",
            "1",
        ])
        .env(
            "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER",
            "valgrind --tool=memcheck --error-exitcode=9 --leak-check=no --quiet",
        ))?;
    // Each fuzz target briefly, from the committed corpus (the long runs: `cargo xtask fuzz`).
    crate::fuzz::smoke(20)?;
    // The wheel: built with maturin, installed into a fresh virtualenv, a stand-in program
    // run under `hotpin run` and `python -m hotpin run` from it; its size is said.
    let wheel = crate::wheel::build()?;
    crate::wheel::check(&wheel)?;
    // The cluster files (deploy/): YAML, the Kubernetes schemas (kubernetes-validate, which
    // bundles them), the dashboard's metrics against what the daemon exports.
    sh(Command::new(&python).arg("deploy/check.py"))?;
    // The GPU workloads' one-call harness (bench/gpu/workloads/gated.py) on stand-in workloads
    // under the debug build's `hotpin run`: every timed part alone, in order, results checked.
    sh(Command::new(&python)
        .arg("bench/gpu/workloads/check_gated.py")
        .arg("target/debug"))?;
    eprintln!(
        "xtask: test: everything passed in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `cargo +nightly <verb>` of tracer-ebpf for the BPF target, with the flags aya-build uses.
fn ebpf_cargo(verb: &str) -> Command {
    let mut command = Command::new("cargo");
    command
        .args(["+nightly", verb, "--package", "tracer-ebpf", "--release"])
        .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core"])
        .args(["--target-dir", "target/ebpf"])
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            format!(
                "--cfg=bpf_target_arch=\"{}\"\x1f-Cdebuginfo=2\x1f-Clink-arg=--btf",
                std::env::consts::ARCH
            ),
        )
        .env_remove("RUSTC")
        .env_remove("RUSTC_WORKSPACE_WRAPPER");
    command
}

/// Builds the kernel programs once, as aya-build would, and returns the object's path.
fn build_ebpf_object() -> Result<PathBuf> {
    sh(&mut ebpf_cargo("build"))?;
    let object = crate::workspace_root().join("target/ebpf/bpfel-unknown-none/release/tracer-ebpf");
    if !object.is_file() {
        bail!("the eBPF build left no object at {}", object.display());
    }
    Ok(object)
}

unsafe extern "C" {
    fn geteuid() -> u32;
}
