//! `cargo xtask aarch64`: hotpin for aarch64 (Grace, Jetson and Arm servers), cross-built on
//! this x86-64 machine, its interposer checked under user-mode emulation on the CUDA stand-in
//! (a test fixture, not CUDA), and its wheel built.
//!
//! - Debian's cross compiler and C library (`gcc-aarch64-linux-gnu`, `libc6-dev-arm64-cross`)
//!   and `qemu-user`, installed where missing.
//! - Rust's standard library for aarch64 is built from source (`-Z build-std`, with nightly's
//!   rust-src, which the eBPF build uses already): a prebuilt one cannot be downloaded here.
//! - `hotpin`, the interposer and `tracer` (its eBPF object built for aarch64's registers),
//!   into target/aarch64.
//! - qemu-aarch64 is registered with binfmt_misc (as Debian's qemu-user-binfmt would), so that
//!   `hotpin run` can exec an aarch64 program; its C library from the cross one
//!   (`QEMU_LD_PREFIX`).
//! - The stand-in and `preload/tests/c/online.c` compiled for aarch64 and run under `hotpin
//!   run`, each program checking every copy: fresh results under a budget (warm blocks), a
//!   hot set that shifts under a budget, and an offload loop a block short of its budget. What
//!   hotpin did is checked from its report, as the x86-64 tests check it.
//! - The aarch64 wheel, built with maturin; its files checked to be aarch64 ELF.
//!
//! The tracer's eBPF programs cannot run under user-mode emulation (the kernel is this
//! machine's): they are built for aarch64, not loaded.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail, ensure};
use serde_json::Value;

use crate::{output, sh};

const TARGET: &str = "aarch64-unknown-linux-gnu";
const TARGET_DIR: &str = "target/aarch64";
const WORK: &str = "target/aarch64-check";
/// The cross C library's root, where qemu finds the program's dynamic loader.
const SYSROOT: &str = "/usr/aarch64-linux-gnu";
const BINFMT: &str = "/proc/sys/fs/binfmt_misc";
const MIB: u64 = 1 << 20;

pub fn run() -> Result<()> {
    crate::setup::run()?;
    tools()?;
    build()?;
    register_qemu()?;
    let work = Path::new(WORK);
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(work)?;
    let program = standin_program(work)?;
    check_runs(&program, work)?;
    let wheel = wheel()?;
    eprintln!(
        "xtask: aarch64: every check passed; the wheel is {}",
        wheel.display()
    );
    Ok(())
}

/// The cross compiler, the cross C library and qemu, installed where missing.
fn tools() -> Result<()> {
    let mut missing = Vec::new();
    if output(Command::new("aarch64-linux-gnu-gcc").arg("--version")).is_none() {
        missing.extend(["gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"]);
    }
    if output(Command::new("qemu-aarch64").arg("--version")).is_none() {
        missing.push("qemu-user");
    }
    crate::setup::apt_install(&missing)
}

/// The environment of a cross build: nightly (through rustup's `cargo`, not the one running
/// xtask), the linker, and the C compiler of the crates that build C (zstd, ring). The
/// standard library is built from source by `BUILD_STD` on the command line, not in the
/// environment: the eBPF build inside tracer-agent's build script must not inherit it.
fn cross(command: &mut Command) -> &mut Command {
    command
        .env_remove("CARGO")
        .env("RUSTUP_TOOLCHAIN", "nightly")
        .env(
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER",
            "aarch64-linux-gnu-gcc",
        )
        .env("CC_aarch64_unknown_linux_gnu", "aarch64-linux-gnu-gcc")
        .env("AR_aarch64_unknown_linux_gnu", "aarch64-linux-gnu-ar")
}

/// Builds the standard library for the target from nightly's rust-src.
const BUILD_STD: [&str; 2] = ["-Z", "build-std=std,panic_abort"];

/// Where the aarch64 build puts its binaries.
fn built(file: &str) -> PathBuf {
    Path::new(TARGET_DIR)
        .join(TARGET)
        .join("release")
        .join(file)
}

/// hotpin, the interposer and tracer for aarch64.
fn build() -> Result<()> {
    let mut command = Command::new("cargo");
    cross(&mut command)
        .args([
            "build",
            "--release",
            "--target",
            TARGET,
            "--target-dir",
            TARGET_DIR,
        ])
        .args(BUILD_STD)
        .args(["--package", "preload", "--package", "tracer-agent"]);
    sh(&mut command)?;
    for file in ["hotpin", "tracer", "libhotpin_preload.so"] {
        ensure_aarch64(&built(file))?;
    }
    Ok(())
}

/// Fails unless `path` is an aarch64 ELF file (e_machine 183).
fn ensure_aarch64(path: &Path) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let machine = bytes.get(18..20).map(|b| u16::from_le_bytes([b[0], b[1]]));
    ensure!(
        bytes.starts_with(b"\x7fELF") && machine == Some(183),
        "{} is not an aarch64 ELF file",
        path.display()
    );
    Ok(())
}

/// Registers qemu-aarch64 with binfmt_misc (mounting it if need be), with Debian's own line
/// for it, so that an aarch64 program can be exec'd.
fn register_qemu() -> Result<()> {
    let registered = Path::new(BINFMT).join("qemu-aarch64");
    if registered.exists() {
        return Ok(());
    }
    if !Path::new(BINFMT).join("register").exists() {
        sh(Command::new("mount").args(["-t", "binfmt_misc", "binfmt_misc", BINFMT]))?;
    }
    let line = std::fs::read_to_string("/usr/lib/binfmt.d/qemu-aarch64.conf")
        .context("qemu-user's binfmt line for aarch64")?;
    std::fs::write(Path::new(BINFMT).join("register"), line.trim())
        .context("registering qemu-aarch64 with binfmt_misc (as root)")?;
    ensure!(registered.exists(), "qemu-aarch64 did not register");
    Ok(())
}

/// The stand-in's libraries and the test program `online`, compiled for aarch64 in `work`.
fn standin_program(work: &Path) -> Result<PathBuf> {
    let work = work.canonicalize()?;
    for (source, soname, libs) in [
        (
            "cuda-standin/c/driver.c",
            "libcuda.so.1",
            &["-lpthread"][..],
        ),
        (
            "cuda-standin/c/runtime.c",
            "libcudart.so.13",
            &["-ldl", "-lpthread"][..],
        ),
    ] {
        sh(Command::new("aarch64-linux-gnu-gcc")
            .args(["-O2", "-g", "-fPIC", "-shared", "-fvisibility=hidden"])
            .args(["-fno-omit-frame-pointer", "-Wall", "-Wextra", "-Werror"])
            .arg(format!("-Wl,-soname,{soname}"))
            .arg("-o")
            .arg(work.join(soname))
            .arg(source)
            .args(libs))?;
    }
    let program = work.join("online");
    sh(Command::new("aarch64-linux-gnu-gcc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&program)
        .arg("preload/tests/c/online.c")
        .arg(work.join("libcudart.so.13"))
        .arg("-ldl")
        .arg(format!("-Wl,-rpath,{}", work.display())))?;
    Ok(program)
}

/// One run of `online ARGS` under `hotpin run OPTIONS` (None: as written), emulated: the
/// program's verdict must be clean; hotpin's counters, from its report.
fn emulated(program: &Path, work: &Path, options: Option<&[&str]>, args: &[&str]) -> Result<Value> {
    let report = work.join(format!("report-{}", args.join("-")));
    let mut command = match options {
        Some(options) => {
            let mut command = Command::new(built("hotpin"));
            command
                .args(["run", "--lease-socket", "off", "--report"])
                .arg(&report)
                .args(options)
                .arg("--")
                .arg(program);
            command
        }
        None => Command::new(program),
    };
    command
        .args(args)
        .env("QEMU_LD_PREFIX", SYSROOT)
        .env("LD_LIBRARY_PATH", work.canonicalize()?)
        .env("XDG_STATE_HOME", work.canonicalize()?);
    eprintln!("xtask: aarch64: {} {}", program.display(), args.join(" "));
    let out = command.output().context("running under qemu-aarch64")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let verdict: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .with_context(|| {
            format!(
                "no verdict from {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    ensure!(
        out.status.success()
            && verdict["mismatches"] == 0
            && verdict["checks"].as_u64().unwrap_or(0) > 0,
        "{} computed wrong, or failed ({}): {verdict}",
        args.join(" "),
        out.status
    );
    if options.is_none() {
        return Ok(Value::Null);
    }
    let name = report
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let file = std::fs::read_dir(work)?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{name}.")))
        })
        .context("hotpin wrote no report")?;
    let report: Value = serde_json::from_slice(&std::fs::read(file)?)?;
    Ok(report["counters"].clone())
}

/// The programs under `hotpin run`, their data and what hotpin did checked.
fn check_runs(program: &Path, work: &Path) -> Result<()> {
    emulated(program, work, None, &["fresh"])?;
    let fresh = emulated(program, work, Some(&["--budget", "16M"]), &["fresh"])?;
    let count = |c: &Value, key: &str| c[key].as_u64().unwrap_or(0);
    ensure!(
        count(&fresh, "warm_hits") >= 10
            && count(&fresh, "cache_hits") >= 10
            && count(&fresh, "peak_pinned_bytes") <= 16 * MIB,
        "fresh results under a budget: {fresh}"
    );
    let shift = emulated(program, work, Some(&["--budget", "24M"]), &["shift"])?;
    ensure!(
        count(&shift, "learned_pins") == 5 && count(&shift, "evictions") == 2,
        "a shifting hot set: {shift}"
    );
    let offload = emulated(program, work, Some(&["--budget", "56M"]), &["offload", "8"])?;
    ensure!(
        count(&offload, "evictions") <= 3 && count(&offload, "peak_pinned_bytes") <= 56 * MIB,
        "an offload loop a block short of its budget: {offload}"
    );
    eprintln!(
        "xtask: aarch64: emulated runs checked out: fresh {fresh}\nshift {shift}\noffload \
         {offload}"
    );
    Ok(())
}

/// The aarch64 wheel (target/wheels-aarch64), its files checked to be aarch64's; its path.
fn wheel() -> Result<PathBuf> {
    let scripts = Path::new("wheel/hotpin.data/scripts");
    std::fs::create_dir_all(scripts)?;
    for file in ["tracer", "libhotpin_preload.so"] {
        std::fs::copy(built(file), scripts.join(file))
            .with_context(|| format!("copying the aarch64 {file} into the wheel"))?;
    }
    crate::wheel::python_tools(&["maturin>=1.5,<2"])?;
    let root = std::env::current_dir()?;
    let out = root.join("target/wheels-aarch64");
    let _ = std::fs::remove_dir_all(&out);
    let mut maturin = Command::new(root.join(crate::wheel::TOOLS).join("bin/maturin"));
    cross(&mut maturin)
        .args(["build", "--release", "--target", TARGET])
        .args(BUILD_STD)
        .arg("--out")
        .arg(&out)
        .env("CARGO_TARGET_DIR", root.join(TARGET_DIR))
        .current_dir("wheel");
    let built = sh(&mut maturin);
    // The scripts folder is the x86-64 wheel's too: it gets its own files at its next build.
    for file in ["tracer", "libhotpin_preload.so"] {
        let _ = std::fs::remove_file(scripts.join(file));
    }
    built?;
    let wheel = std::fs::read_dir(&out)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .context("maturin wrote no aarch64 wheel")?;
    let name = wheel
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if !name.contains("aarch64") {
        bail!("{name} is not tagged for aarch64");
    }
    // Its three programs are aarch64's.
    let python = crate::wheel::python_tools(&[])?;
    sh(Command::new(python)
        .arg("-c")
        .arg(
            "import sys, zipfile\n\
             z = zipfile.ZipFile(sys.argv[1])\n\
             names = [n for n in z.namelist() if n.endswith(('/hotpin', '/tracer', \
             'libhotpin_preload.so'))]\n\
             assert len(names) == 3, names\n\
             for n in names:\n\
             \x20   head = z.read(n)[:20]\n\
             \x20   assert head[:4] == b'\\x7fELF' and int.from_bytes(head[18:20], 'little') == 183, n\n\
             print('xtask: aarch64: in the wheel, aarch64 ELF:', ', '.join(names))",
        )
        .arg(&wheel))?;
    let size = std::fs::metadata(&wheel)?.len();
    eprintln!(
        "xtask: aarch64: wheel {name} ({:.1} MiB)",
        size as f64 / MIB as f64
    );
    Ok(wheel)
}
