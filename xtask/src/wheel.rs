//! `cargo xtask wheel`: the `hotpin` wheel (`pip install hotpin`), built with maturin from
//! `wheel/pyproject.toml`: `hotpin`, `tracer` (its eBPF object embedded) and the interposer
//! `libhotpin_preload.so` beside them on PATH, and the `hotpin` Python package for
//! `python -m hotpin`. No CUDA inside. One wheel for this machine's architecture (manylinux,
//! x86_64); `cargo xtask aarch64` cross-builds the aarch64 one.
//!
//! `check` installs the wheel into a fresh virtualenv and runs a program on the CUDA stand-in
//! (a test fixture, not CUDA) under `hotpin run` and `python -m hotpin run` from it; the
//! program checks every copy it makes.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::sh;

/// Where maturin is installed (a virtualenv of its own, made once).
pub const TOOLS: &str = "target/wheel-tools";
const OUT: &str = "target/wheels";

/// The Python tools the build and the tests use, installed from PyPI into a virtualenv of
/// their own (target/wheel-tools, made once): maturin, moto's S3 server, the manifest
/// checkers. Its python.
pub fn python_tools(packages: &[&str]) -> Result<PathBuf> {
    let python = Path::new(TOOLS).join("bin/python");
    if !python.exists() {
        sh(Command::new("python3").args(["-m", "venv", TOOLS]))?;
    }
    if !packages.is_empty() {
        sh(Command::new(&python)
            .args(["-m", "pip", "install", "--quiet"])
            .args(packages))?;
    }
    Ok(python)
}

/// Builds the wheel; its path.
pub fn build() -> Result<PathBuf> {
    crate::build_release_of(&["tracer-agent", "preload"])?;
    let scripts = Path::new("wheel/hotpin.data/scripts");
    std::fs::create_dir_all(scripts).context("creating wheel/hotpin.data/scripts")?;
    for file in ["tracer", "libhotpin_preload.so"] {
        std::fs::copy(Path::new("target/release").join(file), scripts.join(file))
            .with_context(|| format!("copying target/release/{file} into the wheel"))?;
    }
    python_tools(&["maturin>=1.5,<2"])?;
    let maturin = Path::new(TOOLS).join("bin/maturin");
    let _ = std::fs::remove_dir_all(OUT);
    // maturin reads wheel/pyproject.toml where it runs.
    let root = std::env::current_dir()?;
    sh(Command::new(root.join(&maturin))
        .args(["build", "--release", "--out"])
        .arg(root.join(OUT))
        .current_dir("wheel"))?;
    let wheel = std::fs::read_dir(OUT)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .context("maturin wrote no wheel")?;
    let size = std::fs::metadata(&wheel)?.len();
    eprintln!(
        "xtask: wheel: {} ({:.1} MiB)",
        wheel.display(),
        size as f64 / (1 << 20) as f64
    );
    Ok(wheel)
}

/// Installs `wheel` into a fresh virtualenv and runs a stand-in program from it, both as
/// `hotpin run` and `python -m hotpin run`.
pub fn check(wheel: &Path) -> Result<()> {
    let dir = Path::new("target/wheel-check");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let venv = dir.join("venv");
    sh(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    sh(Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--no-index"])
        .arg(wheel))?;
    for program in ["hotpin", "tracer", "libhotpin_preload.so"] {
        if !venv.join("bin").join(program).exists() {
            bail!("the wheel installed no {program} into the virtualenv's bin");
        }
    }
    // The demo's workload on the stand-in, compiled against it.
    let standin =
        cuda_standin::install(&dir.join("standin")).context("installing the CUDA stand-in")?;
    eprintln!("xtask: wheel: the program runs on the CUDA STAND-IN (a test fixture, not CUDA)");
    let workload = dir.join("workload");
    crate::demo::compile_workload(&workload, &standin.runtime)?;
    let history = dir.join("learned.hotpin");
    let runs: [(&str, Vec<String>); 2] = [
        (
            "hotpin run",
            vec![venv.join("bin/hotpin").display().to_string(), "run".into()],
        ),
        (
            "python -m hotpin run",
            vec![
                venv.join("bin/python").display().to_string(),
                "-m".into(),
                "hotpin".into(),
                "run".into(),
            ],
        ),
    ];
    for (name, command) in runs {
        let output = Command::new(&command[0])
            .args(&command[1..])
            .arg("--history")
            .arg(&history)
            .arg("--")
            .arg(&workload)
            .arg("10")
            // A clean PATH: only the virtualenv's programs, not target/release's.
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", venv.join("bin").display()),
            )
            .env("LD_LIBRARY_PATH", standin.dir.canonicalize()?)
            .output()
            .with_context(|| format!("running {name} from the wheel"))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let verdict: serde_json::Value = stdout
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .and_then(|l| serde_json::from_str(l).ok())
            .with_context(|| {
                format!(
                    "{name} from the wheel: no verdict from the program; stderr: {}",
                    String::from_utf8_lossy(&output.stderr)
                )
            })?;
        let checks = verdict["checks"].as_u64().unwrap_or(0);
        if !output.status.success() || checks == 0 || verdict["mismatches"] != 0 {
            bail!("{name} from the wheel: {} ({verdict})", output.status);
        }
        eprintln!("xtask: wheel: {name}: {checks} checks, 0 mismatches");
    }
    if !history.exists() {
        bail!(
            "hotpin run from the wheel wrote no history at {}",
            history.display()
        );
    }
    Ok(())
}
