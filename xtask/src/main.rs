//! `cargo xtask`: orchestration only. Each command runs one function of a module here.

mod aarch64;
mod bench;
mod bench_chart;
mod circles;
mod demo;
mod fuzz;
mod setup;
mod test;
mod vm_test;
mod wheel;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "hotpin's build tasks")]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what a fresh machine lacks: llvm-22-dev, bpf-linker, nightly rust-src, valgrind,
    /// cargo-fuzz.
    Setup,
    /// setup, cargo fmt --check, clippy (user crates, then tracer-ebpf), unit and privileged
    /// integration tests.
    Test,
    /// Build everything; an unmodified CUDA program traced and reported, then run under
    /// `hotpin run` (learning, then from what it learned), its results checked.
    Demo(demo::DemoArgs),
    /// Fuzz the history loaders and the event decoder (cargo-fuzz, nightly).
    Fuzz(fuzz::FuzzArgs),
    /// The original design's benchmark: unpinned, pinned, profile and use modes per size.
    Bench(bench::BenchArgs),
    /// The chart of bench/gpu/workloads' summary (PNG): times faster than as written.
    BenchChart(bench_chart::BenchChartArgs),
    /// Build the `hotpin` wheel with maturin (target/wheels), install it into a fresh
    /// virtualenv and run a stand-in program from it.
    Wheel,
    /// Cross-build hotpin, its interposer and tracer for aarch64, run the interposer's checks
    /// on the CUDA stand-in under qemu's user-mode emulation, and build the aarch64 wheel.
    Aarch64,
    /// Boot Debian's kernels (6.1, 6.12) in QEMU and run the eBPF load, a subset of the
    /// integration tests and the kprobe check in each.
    VmTest(vm_test::VmTestArgs),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    std::env::set_current_dir(workspace_root()).context("entering the workspace root")?;
    match cli.command {
        Task::Setup => setup::run(),
        Task::Test => test::run(),
        Task::Demo(args) => demo::run(args),
        Task::Bench(args) => bench::run(args),
        Task::BenchChart(args) => bench_chart::run(args),
        Task::Fuzz(args) => fuzz::run(args),
        Task::VmTest(args) => vm_test::run(args),
        Task::Wheel => wheel::build().and_then(|wheel| wheel::check(&wheel)),
        Task::Aarch64 => aarch64::run(),
    }
}

/// The workspace root (xtask's parent directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is in the workspace")
        .to_path_buf()
}

/// Runs a command, echoing it, and fails if it fails.
pub fn sh(command: &mut Command) -> Result<()> {
    eprintln!("xtask: $ {}", shown(command));
    let status = command
        .status()
        .with_context(|| format!("cannot start {}", shown(command)))?;
    if !status.success() {
        bail!("{} failed: {status}", shown(command));
    }
    Ok(())
}

/// Runs a command quietly and returns its stdout, or None if it cannot run or fails.
pub fn output(command: &mut Command) -> Option<String> {
    let output = command.output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

fn shown(command: &Command) -> String {
    let mut text = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// Builds the release `tracer` and `transfer-bench` that demo and bench run.
pub fn build_release() -> Result<()> {
    build_release_of(&["tracer-agent", "transfer-bench"])
}

/// Builds these packages in release.
pub fn build_release_of(packages: &[&str]) -> Result<()> {
    let mut command = cargo();
    command.args(["build", "--release"]);
    for package in packages {
        command.args(["--package", package]);
    }
    sh(&mut command)
}

pub fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}
