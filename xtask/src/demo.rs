//! `cargo xtask demo`: the main job on one machine. Builds everything, traces the bundled
//! workload with `tracer`, and shows the hot/cold report. It uses the real CUDA runtime when the
//! machine has an NVIDIA GPU, and otherwise the CUDA stand-in, a test fixture that is not CUDA,
//! saying which.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};

use crate::{cargo, output, sh};

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

pub fn run(args: DemoArgs) -> Result<()> {
    sh(cargo().args([
        "build",
        "--release",
        "--package",
        "tracer-agent",
        "--package",
        "transfer-bench",
    ]))?;
    let out = Path::new("target/demo");
    std::fs::create_dir_all(out).context("creating target/demo")?;
    let (cudart, library_path) = match real_cuda_runtime().filter(|_| !args.standin) {
        Some(path) => {
            eprintln!("xtask: demo: real CUDA ({})", path.display());
            (path, None)
        }
        None => {
            let standin = cuda_standin::install(&out.join("standin"))
                .context("installing the CUDA stand-in")?;
            eprintln!(
                "xtask: demo: no GPU here, so the CUDA STAND-IN runs instead of CUDA (a test \
                 fixture: copies are memcpy, timings mean nothing) from {}",
                standin.dir.display()
            );
            (
                standin.runtime.canonicalize()?,
                Some(standin.dir.canonicalize()?),
            )
        }
    };
    let history = out.join("history.json");
    let mut record = Command::new("target/release/tracer");
    record
        .args(["record", "--report", "-o"])
        .arg(&history)
        .arg("--")
        .arg("target/release/transfer-bench")
        .arg("--cudart")
        .arg(&cudart)
        .args(["--mode", "unpinned", "--size", &args.size])
        .args([
            "--hot",
            &args.hot.to_string(),
            "--transfers",
            &args.transfers.to_string(),
        ])
        .args(["--cold", &args.cold.to_string()]);
    if let Some(dir) = &library_path {
        record.env("LD_LIBRARY_PATH", dir);
    }
    sh(&mut record)?;
    eprintln!("xtask: demo: history in {}", history.display());
    Ok(())
}
