//! `cargo xtask demo`: the main job on one machine. Builds everything, traces the bundled
//! workload with `tracer` (hotpin's allocator in profile mode), shows the hot/cold report, and
//! reruns the workload with the allocator in use mode beside pin-nothing and pin-everything. It uses the real CUDA runtime when the
//! machine has an NVIDIA GPU, and otherwise the CUDA stand-in, a test fixture that is not CUDA,
//! saying which.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};

use crate::{output, sh};

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Size of every buffer (K, M, G suffixes).
    #[arg(long, default_value = "4M")]
    size: String,
    /// Hot buffers, each copied to the GPU and back --transfers times.
    #[arg(long, default_value_t = 2)]
    hot: usize,
    #[arg(long, default_value_t = 175)]
    transfers: usize,
    /// Cold buffers, copied once each way.
    #[arg(long, default_value_t = 25)]
    cold: usize,
    /// Use the CUDA stand-in even on a machine with a GPU.
    #[arg(long)]
    standin: bool,
}

/// Where the CUDA runtime is, if this machine has a GPU and CUDA 13.
fn real_cuda_runtime() -> Option<PathBuf> {
    output(Command::new("nvidia-smi").arg("-L"))?;
    let listed = output(Command::new("ldconfig").arg("-p")).and_then(|text| {
        text.lines()
            .filter(|l| l.contains("libcudart.so.13"))
            .find_map(|l| l.rsplit("=> ").next().map(|p| PathBuf::from(p.trim())))
    });
    listed.or_else(|| {
        let toolkit = Path::new("/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.13");
        toolkit.exists().then(|| toolkit.to_path_buf())
    })
}

/// The CUDA runtime to use: the real one on a machine with a GPU (unless `standin`), else the
/// stand-in, installed under target/demo, with the directory to put on LD_LIBRARY_PATH.
pub fn cuda_runtime(standin: bool) -> Result<(PathBuf, Option<PathBuf>)> {
    if let Some(path) = real_cuda_runtime().filter(|_| !standin) {
        eprintln!("xtask: real CUDA ({})", path.display());
        return Ok((path, None));
    }
    let standin = cuda_standin::install(Path::new("target/demo/standin"))
        .context("installing the CUDA stand-in")?;
    eprintln!(
        "xtask: no GPU here, so the CUDA STAND-IN runs instead of CUDA (a test fixture: copies \
         are memcpy, timings mean nothing) from {}",
        standin.dir.display()
    );
    Ok((
        standin.runtime.canonicalize()?,
        Some(standin.dir.canonicalize()?),
    ))
}

pub fn run(args: DemoArgs) -> Result<()> {
    // A fresh machine lacks the eBPF toolchain: the same step `cargo xtask test` runs first.
    crate::setup::run()?;
    crate::build_release()?;
    let out = Path::new("target/demo");
    std::fs::create_dir_all(out).context("creating target/demo")?;
    let (cudart, library_path) = cuda_runtime(args.standin)?;
    let bench = |mode: &str| {
        let mut command = Command::new("target/release/transfer-bench");
        command
            .arg("--cudart")
            .arg(&cudart)
            .args(["--mode", mode, "--size", &args.size])
            .args([
                "--hot",
                &args.hot.to_string(),
                "--transfers",
                &args.transfers.to_string(),
            ])
            .args(["--cold", &args.cold.to_string()]);
        if let Some(dir) = &library_path {
            command.env("LD_LIBRARY_PATH", dir);
        }
        command
    };

    // 1. Profile: the allocator pins everything while the tracer records the history.
    let history = out.join("history.json");
    eprintln!("\nxtask: demo: 1. trace the workload (allocator in profile mode) and report");
    let workload = bench("profile");
    let mut record = Command::new("target/release/tracer");
    record
        .args(["record", "--report", "-o"])
        .arg(&history)
        .arg("--");
    record.arg(workload.get_program()).args(workload.get_args());
    record.envs(workload.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))));
    sh(&mut record)?;

    // 2. The same workload pinning nothing, everything, and what the history says.
    eprintln!("\nxtask: demo: 2. rerun: pin nothing, pin everything, allocator in use mode");
    let mut rows = Vec::new();
    for mode in ["pin-none", "pin-all", "use"] {
        let mut command = bench(mode);
        if mode == "use" {
            command.arg("--history").arg(&history);
        }
        let output = command
            .output()
            .with_context(|| format!("running transfer-bench --mode {mode}"))?;
        anyhow::ensure!(
            output.status.success(),
            "transfer-bench --mode {mode} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let summary: serde_json::Value = serde_json::from_slice(&output.stdout)?;
        rows.push((mode, summary));
    }
    println!(
        "\n{:<10} {:>10} {:>14} {:>14} {:>10}",
        "mode", "total s", "bytes pinned", "of allocated", "copy s"
    );
    for (mode, s) in &rows {
        let pinned = s["bytes_pinned"].as_f64().unwrap_or(0.0);
        let allocated = s["bytes_allocated"].as_f64().unwrap_or(1.0);
        println!(
            "{:<10} {:>10.4} {:>14} {:>13.1}% {:>10.4}",
            mode,
            s["total_s"].as_f64().unwrap_or(f64::NAN),
            pinned,
            100.0 * pinned / allocated,
            s["copy_s"].as_f64().unwrap_or(f64::NAN),
        );
    }
    if library_path.is_some() {
        println!("(CUDA stand-in: copies are memcpy, so these times say nothing about pinning)");
    }
    eprintln!("xtask: demo: history in {}", history.display());
    Ok(())
}
