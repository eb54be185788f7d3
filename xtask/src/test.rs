//! `cargo xtask test`: what CI runs. Formatting, lints, unit tests and the privileged
//! integration tests that load real eBPF programs (they fail, not skip, without root), and a
//! short run of each fuzz target.

use std::process::Command;

use anyhow::{Result, bail};

use crate::{cargo, sh};

pub fn run() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { geteuid() } != 0 {
        bail!("the integration tests load eBPF programs: run `cargo xtask test` as root");
    }
    crate::setup::run()?;
    sh(cargo().args(["fmt", "--all", "--check"]))?;
    // The user-space crates (the workspace's default members).
    sh(cargo().args(["clippy", "--all-targets", "--", "-D", "warnings"]))?;
    // The kernel side, for its own target, as aya-build builds it.
    sh(Command::new("cargo")
        .args([
            "+nightly",
            "clippy",
            "--package",
            "tracer-ebpf",
            "--release",
        ])
        .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core"])
        .args(["--target-dir", "target/ebpf-clippy", "--", "-D", "warnings"])
        .env("RUSTFLAGS", "--cfg=bpf_target_arch=\"x86_64\""))?;
    // Unit and integration tests; the integration tests start processes of their own, which
    // need the workload and libhotpin.so built first.
    sh(cargo().args([
        "build",
        "--package",
        "transfer-bench",
        "--package",
        "allocator",
    ]))?;
    sh(cargo().args(["test", "--no-fail-fast", "--", "--test-threads", "2"]))?;
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
    Ok(())
}

unsafe extern "C" {
    fn geteuid() -> u32;
}
