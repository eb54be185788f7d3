//! `tracer probes`: what can be attached, and why not where it cannot.

use std::{path::PathBuf, process::ExitCode};

use anyhow::{Context as _, Result, bail};
use tracer_agent::{
    privileges,
    probes::{ProbeOptions, ProbeState, Probes},
    target,
};

use super::ProbesArgs;

/// CUDA libraries the dynamic loader would find, from `ldconfig -p`.
fn loader_libraries() -> Vec<PathBuf> {
    let Ok(output) = std::process::Command::new("ldconfig").arg("-p").output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let path = line.rsplit("=> ").next()?.trim();
            target::is_candidate_name(path).then(|| PathBuf::from(path))
        })
        .collect()
}

pub fn run(args: ProbesArgs) -> Result<ExitCode> {
    privileges::check()?;
    let mut libraries = args.target.files();
    if let Some(pid) = args.pid {
        libraries.extend(target::candidate_files(pid)?);
    } else if libraries.is_empty() {
        libraries = loader_libraries();
    }
    if libraries.is_empty() {
        bail!(
            "no CUDA runtime or driver found{}; name them with --cuda-runtime/--cuda-driver",
            args.pid
                .map(|p| format!(" in process {p}"))
                .unwrap_or_default()
        );
    }
    // Every probe, those off by default included, to show which the kernel allows.
    let options = ProbeOptions {
        page_faults: true,
        runtime_copies: true,
        ..ProbeOptions::default()
    };
    let mut probes =
        Probes::load(1 << 16, options).context("loading the tracer's eBPF programs")?;
    for path in &libraries {
        if let Err(error) = probes.attach_file(path) {
            eprintln!(
                "tracer: {}: {error:#}",
                path.display(),
                error = anyhow::Error::from(error)
            );
        }
    }
    let status = probes.status().to_vec();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        for probe in &status {
            let state = match &probe.state {
                ProbeState::Attached => "attached".to_string(),
                ProbeState::Unavailable { reason } => format!("unavailable: {reason}"),
            };
            println!(
                "{:<30} {:<60} {state}",
                probe.symbol,
                probe.target.describe()
            );
        }
        let attached = status
            .iter()
            .filter(|p| p.state == ProbeState::Attached)
            .count();
        println!("{attached} of {} probes attached", status.len());
    }
    probes.detach_uprobes();
    Ok(ExitCode::SUCCESS)
}
