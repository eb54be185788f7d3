//! `cargo xtask bench`: the original design's benchmark (bench/gpu/original_bench.sh) with
//! the release binaries, then its medians and plot (bench/gpu/summarize.py). Real CUDA when
//! the machine has a GPU; the stand-in otherwise, whose timings mean nothing.

use std::{path::Path, process::Command};

use anyhow::{Context as _, Result};

use crate::{demo, sh};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Buffer sizes.
    #[arg(long, default_value = "1M 4M 16M 64M 256M")]
    sizes: String,
    /// Runs per size and configuration (the tables show medians).
    #[arg(long, default_value_t = 5)]
    runs: u32,
}

pub fn run(args: BenchArgs) -> Result<()> {
    crate::build_release()?;
    let out = Path::new("target/bench");
    let _ = std::fs::remove_file(out.join("bench.jsonl"));
    std::fs::create_dir_all(out).context("creating target/bench")?;
    let (cudart, library_path) = demo::cuda_runtime(false)?;
    let mut command = Command::new("bash");
    command
        .args([
            "bench/gpu/original_bench.sh",
            &args.sizes,
            &args.runs.to_string(),
        ])
        .env("BIN", "target/release")
        .env("OUT", out)
        .env("CUDART", &cudart);
    if let Some(dir) = library_path {
        command.env("LD_LIBRARY_PATH", dir);
    }
    sh(&mut command)?;
    sh(Command::new("python3")
        .arg("bench/gpu/summarize.py")
        .arg(out.join("bench.jsonl"))
        .arg(out.join("bench.png")))?;
    eprintln!("xtask: bench: results in {}", out.display());
    Ok(())
}
