//! `cargo xtask setup`: install what building the eBPF side (and valgrind and chromium for the
//! tests) needs, and cargo-fuzz for the fuzz targets, only where missing, saying what it
//! installs. With everything present it only looks (well under 2 s).

use std::{path::Path, process::Command};

use anyhow::{Result, bail};

use crate::{output, sh};

/// The LLVM bpf-linker is built against (shared/notes/platform.md).
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";
const LLVM_PACKAGE: &str = "llvm-22-dev";
const BPF_LINKER_VERSION: &str = "0.13.0";
const CARGO_FUZZ_VERSION: &str = "0.13.2";

pub fn run() -> Result<()> {
    let mut installed = Vec::new();

    debian_packages(&mut installed)?;
    promtool(&mut installed)?;

    let linker = output(Command::new("bpf-linker").arg("--version"));
    if !linker
        .as_deref()
        .is_some_and(|v| v.contains(BPF_LINKER_VERSION))
    {
        eprintln!("xtask: installing bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (about 70 s)");
        sh(crate::cargo()
            .args([
                "install",
                "bpf-linker",
                "--locked",
                "--version",
                BPF_LINKER_VERSION,
            ])
            .args(["--no-default-features", "--features", "llvm-22", "--force"])
            .env("LLVM_PREFIX", LLVM_PREFIX))?;
        installed.push("bpf-linker");
    }

    if !output(Command::new("cargo").args(["fuzz", "--version"]))
        .is_some_and(|v| v.contains(CARGO_FUZZ_VERSION))
    {
        eprintln!(
            "xtask: installing cargo-fuzz {CARGO_FUZZ_VERSION} (the fuzz targets; about 40 s)"
        );
        sh(crate::cargo().args([
            "install",
            "cargo-fuzz",
            "--locked",
            "--version",
            CARGO_FUZZ_VERSION,
        ]))?;
        installed.push("cargo-fuzz");
    }

    let components = output(Command::new("rustup").args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]));
    let Some(components) = components else {
        eprintln!("xtask: installing the nightly toolchain (the eBPF side builds core with it)");
        sh(Command::new("rustup")
            .args(["toolchain", "install", "nightly", "--profile", "minimal"])
            .args(["--component", "rust-src,clippy,rustfmt"]))?;
        installed.push("nightly");
        return report(&installed);
    };
    for component in ["rust-src", "clippy"] {
        if !components.lines().any(|line| line.starts_with(component)) {
            eprintln!("xtask: adding {component} to the nightly toolchain");
            sh(Command::new("rustup").args([
                "component",
                "add",
                component,
                "--toolchain",
                "nightly",
            ]))?;
            installed.push(component);
        }
    }
    report(&installed)
}

/// The Debian packages that are missing, installed in one apt-get run.
fn debian_packages(installed: &mut Vec<&'static str>) -> Result<()> {
    let mut packages = Vec::new();
    // libLLVM.so (the link name bpf-linker needs) comes only with the -dev package; llvm-config
    // alone may be there from llvm-22 without it.
    if !Path::new(LLVM_PREFIX).join("lib/libLLVM.so").exists() {
        eprintln!("xtask: {LLVM_PACKAGE} is missing (bpf-linker links against it)");
        packages.push(LLVM_PACKAGE);
    }
    if output(Command::new("valgrind").arg("--version")).is_none() {
        eprintln!("xtask: valgrind is missing (the allocator's tests run under memcheck)");
        packages.push("valgrind");
    }
    if output(Command::new("c++").arg("--version")).is_none() {
        eprintln!("xtask: g++ is missing (cargo-fuzz builds libFuzzer, which is C++)");
        packages.push("g++");
    }
    if output(Command::new("chromium").arg("--version")).is_none() {
        eprintln!(
            "xtask: chromium is missing (the HTML report's test opens it headless: \
             report/tests/html.rs)"
        );
        packages.push("chromium");
    }
    apt_install(&packages)?;
    installed.extend(packages);
    Ok(())
}

/// Installs Debian's `packages` (none: nothing is done).
pub fn apt_install(packages: &[&str]) -> Result<()> {
    if packages.is_empty() {
        return Ok(());
    }
    // Another apt run (unattended upgrades on a fresh machine) holds the lock for a while:
    // wait for it rather than fail.
    let lock = "DPkg::Lock::Timeout=300";
    sh(Command::new("apt-get").args(["update", "-q", "-o", lock]))?;
    sh(Command::new("apt-get")
        .args(["install", "-y", "-q", "-o", lock])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

/// Where `promtool` is unpacked when it is not on PATH.
const PROMTOOL: &str = "target/tools/bin/promtool";

/// `promtool` (the daemon's test lints its metrics with `promtool check metrics`): Debian's
/// `prometheus` package, downloaded and unpacked into target/tools rather than installed, so
/// that no Prometheus server is started as a service.
fn promtool(installed: &mut Vec<&'static str>) -> Result<()> {
    if output(Command::new("promtool").arg("--version")).is_some() || Path::new(PROMTOOL).exists() {
        return Ok(());
    }
    eprintln!(
        "xtask: promtool is missing (the daemon's metrics are linted with it): unpacking Debian's prometheus package into target/tools"
    );
    let folder = Path::new("target/tools/deb");
    std::fs::create_dir_all(folder)?;
    let lock = "DPkg::Lock::Timeout=300";
    sh(Command::new("apt-get").args(["update", "-q", "-o", lock]))?;
    sh(Command::new("apt-get")
        .args(["download", "-q", "prometheus"])
        .current_dir(folder))?;
    let package = std::fs::read_dir(folder)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|e| e == "deb"))
        .ok_or_else(|| anyhow::anyhow!("apt-get download prometheus left no .deb"))?;
    sh(Command::new("dpkg-deb")
        .arg("-x")
        .arg(&package)
        .arg(folder.join("root")))?;
    std::fs::create_dir_all("target/tools/bin")?;
    std::fs::copy(folder.join("root/usr/bin/promtool"), PROMTOOL)?;
    installed.push("promtool");
    Ok(())
}

fn report(installed: &[&str]) -> Result<()> {
    if installed.is_empty() {
        eprintln!("xtask: setup: everything is in place");
    } else {
        eprintln!("xtask: setup installed: {}", installed.join(", "));
    }
    if output(Command::new("bpf-linker").arg("--version")).is_none() {
        bail!("bpf-linker is still not runnable; is ~/.cargo/bin on PATH?");
    }
    Ok(())
}
