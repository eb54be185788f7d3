//! `tracer export FILE`: a verbose history's timelines as a trace file.

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use tracer_agent::{dump, export};

use super::ExportArgs;

pub fn run(args: ExportArgs) -> Result<ExitCode> {
    let history = dump::read(&args.file)?;
    let trace = export::chrome_trace(&history)
        .with_context(|| format!("cannot export {}", args.file.display()))?;
    let output = args
        .output
        .unwrap_or_else(|| args.file.with_extension("trace.json"));
    let text = serde_json::to_vec(&trace)?;
    std::fs::write(&output, text)
        .with_context(|| format!("cannot write the trace to {}", output.display()))?;
    let events = trace["traceEvents"].as_array().map_or(0, Vec::len);
    eprintln!(
        "tracer: {events} trace events written to {} (open it in ui.perfetto.dev)",
        output.display()
    );
    Ok(ExitCode::SUCCESS)
}
