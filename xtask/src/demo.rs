//! `cargo xtask demo`: the product's main path on one machine. Builds everything and an
//! unmodified CUDA program (`xtask/demo/workload.c`: memory that pays pinning beside memory
//! that does not, every copy checked), traces it with `tracer` and shows the report, runs it
//! under `hotpin run` (auto mode, no history: it learns), shows what auto mode learned, and
//! runs it again from that, beside the program as written. It uses the real CUDA runtime
//! when the machine has an NVIDIA GPU, and otherwise the CUDA stand-in, a test fixture that
//! is not CUDA, saying which.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::{output, sh};

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Steps of the workload (each copies its 4 hot buffers to the GPU and back).
    #[arg(long, default_value_t = 40)]
    steps: u32,
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
    crate::build_release_of(&["tracer-agent", "transfer-bench", "preload"])?;
    let out = Path::new("target/demo");
    std::fs::create_dir_all(out).context("creating target/demo")?;
    let (cudart, library_path) = cuda_runtime(args.standin)?;
    let workload = out.join("workload");
    compile_workload(&workload, &cudart)?;
    let steps = args.steps.to_string();
    let program = || {
        let mut command = Command::new(&workload);
        command.arg(&steps);
        if let Some(dir) = &library_path {
            command.env("LD_LIBRARY_PATH", dir);
        }
        command
    };
    let hotpin_run = |options: &[&str]| {
        let mut command = Command::new("target/release/hotpin");
        command.arg("run").args(options).arg("--");
        let inner = program();
        command.arg(inner.get_program()).args(inner.get_args());
        command.envs(inner.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))));
        command
    };

    // 1. The tracer's view of the program as written.
    let traced = out.join("traced.hotpin");
    eprintln!("\nxtask: demo: 1. trace the unmodified program (tracer record) and report");
    let inner = program();
    let mut record = Command::new("target/release/tracer");
    record
        .args(["record", "--libc-malloc", "--report", "-o"])
        .arg(&traced)
        .arg("--")
        .arg(inner.get_program())
        .args(inner.get_args())
        .envs(inner.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))));
    sh(&mut record)?;

    // 2. hotpin run, no history: auto mode learns while the program runs.
    let learned = out.join("learned.hotpin");
    let _ = std::fs::remove_file(&learned);
    let learned_arg = learned.to_str().context("a UTF-8 path")?;
    eprintln!("\nxtask: demo: 2. hotpin run (auto mode, no history), then what it learned");
    let first = checked(
        "auto, first run",
        hotpin_run(&["--history", learned_arg, "--report", "target/demo/first"]),
        out.join("first"),
    )?;
    sh(Command::new("target/release/tracer")
        .args(["report", "--top", "6"])
        .arg(&learned))?;

    // 3. Again from what it learned, beside the program as written.
    eprintln!("\nxtask: demo: 3. the program as written, and hotpin run from what it learned");
    let plain = checked("as written", program(), PathBuf::new())?;
    let second = checked(
        "auto, from history",
        hotpin_run(&["--history", learned_arg, "--report", "target/demo/second"]),
        out.join("second"),
    )?;
    summarize(&[&plain, &first, &second], library_path.is_some());
    eprintln!(
        "xtask: demo: histories in {} (traced) and {} (learned)",
        traced.display(),
        learned.display()
    );
    Ok(())
}

/// The runs side by side: time, pinned memory, and what each program checked.
fn summarize(runs: &[&Run], standin: bool) {
    println!(
        "\n{:<20} {:>10} {:>12} {:>8} {:>10}",
        "run", "seconds", "pinned (MiB)", "checks", "mismatches"
    );
    for run in runs {
        println!(
            "{:<20} {:>10.4} {:>12} {:>8} {:>10}",
            run.name,
            run.seconds,
            run.pinned_bytes
                .map_or("-".into(), |b| (b >> 20).to_string()),
            run.checks,
            run.mismatches
        );
    }
    if standin {
        println!(
            "(CUDA stand-in: copies are memcpy, so these times say nothing about pinning; \
             the checks say the program computed the same)"
        );
    }
}

/// Compiles the demo's workload (`xtask/demo/workload.c`) at `workload`, linked against the
/// CUDA runtime at `runtime` (the real one, or the stand-in) and finding it there at run time.
pub fn compile_workload(workload: &Path, runtime: &Path) -> Result<()> {
    let folder = runtime
        .parent()
        .context("the CUDA runtime's folder")?
        .canonicalize()?;
    sh(Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(workload)
        .arg("xtask/demo/workload.c")
        .arg(runtime)
        .arg("-ldl")
        .arg(format!("-Wl,-rpath,{}", folder.display())))
}

/// One run of the workload: its own verdict and hotpin's counters.
struct Run {
    name: &'static str,
    seconds: f64,
    checks: u64,
    mismatches: u64,
    pinned_bytes: Option<u64>,
}

/// Runs `command` (the workload, maybe under `hotpin run --report PREFIX`), shows its output
/// and fails unless it exited 0 having checked its copies with no mismatch.
fn checked(name: &'static str, mut command: Command, report: PathBuf) -> Result<Run> {
    eprintln!("xtask: demo: {name}");
    let reports = |dir: &Path, prefix: &str| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with(&format!("{prefix}.")) && n.ends_with(".json"))
            })
            .map(|e| e.path())
            .collect()
    };
    let (dir, prefix) = match (report.parent(), report.file_name().and_then(|n| n.to_str())) {
        (Some(dir), Some(prefix)) => (dir.to_path_buf(), prefix.to_owned()),
        _ => (PathBuf::new(), String::new()),
    };
    if !prefix.is_empty() {
        for old in reports(&dir, &prefix) {
            let _ = std::fs::remove_file(old);
        }
    }
    let output = command
        .output()
        .with_context(|| format!("running the workload ({name})"))?;
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .with_context(|| format!("the workload ({name}) printed no verdict"))?;
    let verdict: serde_json::Value = serde_json::from_str(line)?;
    let checks = verdict["checks"].as_u64().unwrap_or(0);
    let mismatches = verdict["mismatches"].as_u64().unwrap_or(u64::MAX);
    if !output.status.success() || checks == 0 || mismatches != 0 {
        bail!(
            "the workload ({name}) exited with {} after {checks} checks, {mismatches} \
             mismatches: hotpin must never change what a program computes",
            output.status
        );
    }
    // hotpin writes PREFIX.<pid>.json per process.
    let pinned_bytes = (!prefix.is_empty())
        .then(|| {
            reports(&dir, &prefix)
                .into_iter()
                .filter_map(|path| std::fs::read(path).ok())
                .filter_map(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .filter_map(|v| v["counters"]["peak_pinned_bytes"].as_u64())
                .max()
        })
        .flatten();
    Ok(Run {
        name,
        seconds: verdict["details"]["seconds"].as_f64().unwrap_or(f64::NAN),
        checks,
        mismatches,
        pinned_bytes,
    })
}
