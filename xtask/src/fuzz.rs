//! `cargo xtask fuzz`: the cargo-fuzz targets in fuzz/ (history loaders, event decoder, lease
//! decoder), one after another. The long runs grow and then minimise the committed corpus (fuzz/corpus);
//! `cargo xtask test` runs each briefly from that corpus as a smoke test, writing nothing
//! back. A crash leaves its input in fuzz/artifacts/TARGET and fails the command.

use std::{path::Path, process::Command};

use anyhow::{Context as _, Result};

use crate::sh;

/// Every target in fuzz/Cargo.toml.
pub const TARGETS: [&str; 4] = [
    "history_json",
    "history_binary",
    "event_decoder",
    "lease_decoder",
];

#[derive(clap::Args)]
pub struct FuzzArgs {
    /// Seconds per target.
    #[arg(long, default_value_t = 600)]
    seconds: u64,
    /// Only these targets (default: all).
    targets: Vec<String>,
}

pub fn run(args: FuzzArgs) -> Result<()> {
    let targets: Vec<&str> = if args.targets.is_empty() {
        TARGETS.to_vec()
    } else {
        args.targets.iter().map(String::as_str).collect()
    };
    for target in targets {
        let corpus = format!("corpus/{target}");
        sh(&mut fuzz_command(target, &[&corpus], args.seconds))?;
        // Keep what adds coverage, not every input the run found.
        sh(Command::new("cargo")
            .current_dir("fuzz")
            .args(["+nightly", "fuzz", "cmin", "-O", target, &corpus]))?;
    }
    Ok(())
}

/// A short run of every target from the committed corpus; new inputs go to a scratch
/// directory, so the tree is left as it was.
pub fn smoke(seconds: u64) -> Result<()> {
    for target in TARGETS {
        let scratch = Path::new("target/fuzz-smoke").join(target);
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).context("creating the scratch corpus")?;
        let scratch = std::fs::canonicalize(&scratch).context("scratch corpus path")?;
        let scratch = scratch.to_string_lossy();
        sh(&mut fuzz_command(
            target,
            &[&scratch, &format!("corpus/{target}")],
            seconds,
        ))?;
    }
    Ok(())
}

/// `cargo +nightly fuzz run` for `seconds`; libFuzzer writes new inputs to the first corpus
/// directory and reads all of them.
fn fuzz_command(target: &str, corpora: &[&str], seconds: u64) -> Command {
    let mut command = Command::new("cargo");
    command
        .current_dir("fuzz")
        .args(["+nightly", "fuzz", "run", "-O", target])
        .args(corpora)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg("-rss_limit_mb=2048")
        .arg("-print_final_stats=1");
    command
}
