//! `cargo xtask vm-test`: the tracer on kernels other than ours. Boots Debian's packaged
//! kernels (bookworm's 6.1, bookworm-backports' and trixie's 6.12) in QEMU, with the host's
//! root filesystem shared read-only, and runs inside each: `tracer probes` (what attaches, and
//! why the rest does not), the eBPF load with a memcpy count, a lazy dlopen and fork following
//! against the CUDA stand-in (a test fixture, not CUDA), and the kprobe path (tests/kprobe.rs),
//! which our own kernels lack.
//!
//! QEMU uses KVM where /dev/kvm works, and TCG (emulation, several times slower) where it does
//! not: on this project's machines the host KVM is `kvm_pvm`, which runs only PVM guests, so
//! every run here is under TCG. The shell helpers in xtask/vm/ do the booting.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context as _, Result, bail};

use crate::{cargo, output, sh};

#[derive(clap::Args)]
pub struct VmTestArgs {
    /// Only kernels whose label (6.1, 6.12-bpo, 6.12) contains this.
    #[arg(long)]
    kernel: Option<String>,
    /// Seconds each VM may run.
    #[arg(long, default_value_t = 1500)]
    timeout: u64,
}

/// Debian packages the VMs need on the host.
const PACKAGES: &[(&str, &str)] = &[
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("busybox", "busybox-static"),
    ("cpio", "cpio"),
    ("xz", "xz-utils"),
    ("zstd", "zstd"),
    ("bc", "bc"),
];

/// The integration tests run in each VM: (test binary, test name filter).
const TESTS: &[(&str, &str)] = &[
    (
        "cuda_memcpy",
        "n_memcpy_calls_give_n_transfers_attributed_to_the_right_buffer",
    ),
    (
        "lifecycle",
        "a_runtime_dlopened_after_the_start_is_attached_before_its_first_call",
    ),
    (
        "lifecycle",
        "children_exec_kill_and_library_unload_are_followed",
    ),
    ("kprobe", ""),
];

pub fn run(args: VmTestArgs) -> Result<()> {
    install_packages()?;
    let root = crate::workspace_root();
    let vm_dir = root.join("target/vm");
    std::fs::create_dir_all(&vm_dir)?;
    sh(Command::new("bash")
        .arg(root.join("xtask/vm/fetch-kernels.sh"))
        .arg(vm_dir.join("kernels"))
        .env("APTDIR", vm_dir.join("apt")))?;

    // What runs inside: the release tracer, the test binaries, the stand-in.
    sh(cargo().args(["build", "--release", "--package", "tracer-agent"]))?;
    sh(cargo().args(["build", "--workspace"]))?;
    let binaries = test_binaries()?;
    let standin =
        cuda_standin::install(&vm_dir.join("standin")).context("installing the CUDA stand-in")?;

    let mut kernels: Vec<PathBuf> = std::fs::read_dir(vm_dir.join("kernels"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("KVER").exists())
        .filter(|p| {
            args.kernel.as_deref().is_none_or(|k| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().contains(k))
            })
        })
        .collect();
    kernels.sort();
    if kernels.is_empty() {
        bail!("no kernel was fetched into {}", vm_dir.display());
    }

    let mut results = Vec::new();
    for kernel in &kernels {
        let script = guest_script(&root, &binaries, &standin.runtime)?;
        let release = std::fs::read_to_string(kernel.join("KVER"))?
            .trim()
            .to_string();
        eprintln!("\nxtask: vm-test: kernel {release}");
        let started = Instant::now();
        let status = Command::new("bash")
            .arg(root.join("xtask/vm/vm-run.sh"))
            .args(["-t", &args.timeout.to_string(), "-m", "3G"])
            .arg(kernel)
            .args(["--", "bash", "-c", &script])
            .current_dir(&root)
            .status()
            .context("running xtask/vm/vm-run.sh")?;
        results.push((release, status.code(), started.elapsed().as_secs()));
    }
    eprintln!("\nxtask: vm-test results");
    let mut failed = false;
    for (release, code, seconds) in &results {
        let verdict = match code {
            Some(0) => "passed",
            Some(124) => "timed out",
            Some(125) => "VM failed",
            _ => "FAILED",
        };
        failed |= *code != Some(0);
        eprintln!("  {release:<28} {verdict:<10} {seconds:>5} s");
    }
    let passed = results
        .iter()
        .filter(|(_, code, _)| *code == Some(0))
        .count();
    println!(
        "vm-test: {passed} passed, {} failed",
        results.len() - passed
    );
    if failed {
        bail!("vm-test failed on at least one kernel (its output is above)");
    }
    Ok(())
}

fn install_packages() -> Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(tool, _)| output(Command::new("which").arg(tool)).is_none())
        .map(|(_, package)| *package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: vm-test: installing {}", missing.join(", "));
    let lock = "DPkg::Lock::Timeout=300";
    sh(Command::new("apt-get").args(["update", "-q", "-o", lock]))?;
    sh(Command::new("apt-get")
        .args(["install", "-y", "-q", "-o", lock])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

/// Builds the integration test binaries the VMs run; returns their paths by name.
fn test_binaries() -> Result<Vec<(String, PathBuf)>> {
    let mut command = cargo();
    command.args([
        "test",
        "--package",
        "tracer-agent",
        "--no-run",
        "--message-format=json",
    ]);
    for name in ["cuda_memcpy", "lifecycle", "kprobe"] {
        command.args(["--test", name]);
    }
    let out = command.output().context("cargo test --no-run")?;
    if !out.status.success() {
        bail!(
            "building the test binaries failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut binaries = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (Some(name), Some(executable)) = (
            message["target"]["name"].as_str(),
            message["executable"].as_str(),
        ) else {
            continue;
        };
        if message["target"]["kind"][0] == "test" {
            binaries.push((name.to_string(), PathBuf::from(executable)));
        }
    }
    Ok(binaries)
}

/// The shell script each guest runs: every step says its name and result; the script fails
/// if any step did.
fn guest_script(root: &Path, binaries: &[(String, PathBuf)], runtime: &Path) -> Result<String> {
    let tracer = root.join("target/release/tracer");
    let mut script = String::from(
        "set -u; failed=0\n\
         step() { echo; echo \"== $1\"; shift; \"$@\"; rc=$?; \
         echo \"== rc=$rc\"; [ $rc = 0 ] || failed=1; }\n\
         echo \"== kernel $(uname -r)\"\n",
    );
    script.push_str(&format!(
        "step 'tracer probes' {} probes --cuda-runtime {}\n",
        tracer.display(),
        runtime.display()
    ));
    for (name, filter) in TESTS {
        let binary = binaries
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p)
            .with_context(|| format!("no test binary {name}"))?;
        let filter = if filter.is_empty() {
            String::new()
        } else {
            format!(" {filter} --exact")
        };
        script.push_str(&format!(
            "step '{name}{filter}' {}{filter} --test-threads 1 --nocapture\n",
            binary.display()
        ));
    }
    script.push_str("exit $failed\n");
    Ok(script)
}
