//! `tracer export FILE`: a verbose history's timelines as a trace file, or a history as JSON.

use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use hotpin_history::dump;
use hotpin_history::export;

use super::ExportArgs;

/// Whether `-o` names this process's standard output: `-` or `/dev/stdout` (#41 item 13:
/// `/dev/stdout` was refused as a link, and `-` wrote a file named `-`).
fn is_stdout(output: &std::path::Path) -> bool {
    output == std::path::Path::new("-") || output == std::path::Path::new("/dev/stdout")
}

/// Writes `bytes` to standard output.
fn to_stdout(bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .context("cannot write to standard output")
}

pub fn run(args: ExportArgs) -> Result<ExitCode> {
    if let Some(output) = &args.output
        && hotpin_history::files::same_file(output, &args.file)
    {
        bail!(
            "-o {} is the history being exported: give another output file",
            output.display()
        );
    }
    let history = dump::read(&args.file)?;
    if args.format == "json" {
        let output = args
            .output
            .unwrap_or_else(|| args.file.with_extension("json"));
        // Verbose if the history has timelines: nothing it holds is left out.
        let verbose = history.allocations().iter().any(|a| !a.events.is_empty());
        if is_stdout(&output) {
            to_stdout(&dump::encode(history.data(), dump::Format::Json, verbose)?)?;
            return Ok(ExitCode::SUCCESS);
        }
        dump::write(&history, &output, dump::Format::Json, verbose)
            .with_context(|| format!("cannot write the history to {}", output.display()))?;
        eprintln!(
            "tracer: the history written as JSON to {}",
            output.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let trace = export::chrome_trace(&history)
        .with_context(|| format!("cannot export {}", args.file.display()))?;
    let output = args
        .output
        .unwrap_or_else(|| args.file.with_extension("trace.json"));
    let text = serde_json::to_vec(&trace)?;
    if is_stdout(&output) {
        to_stdout(&text)?;
        return Ok(ExitCode::SUCCESS);
    }
    // Written in place (a device or a pipe such as /dev/stdout takes it), never through a link.
    hotpin_history::files::create_streamed(&output, 0o644)
        .and_then(|mut file| std::io::Write::write_all(&mut file, &text))
        .with_context(|| format!("cannot write the trace to {}", output.display()))?;
    let events = trace
        .get("traceEvents")
        .and_then(serde_json::Value::as_array)
        .map_or(0, Vec::len);
    eprintln!(
        "tracer: {events} trace events written to {} (open it in ui.perfetto.dev)",
        output.display()
    );
    Ok(ExitCode::SUCCESS)
}
