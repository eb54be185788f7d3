//! hotpin's allocator in profile mode, recorded by a tracer embedded in the process (it needs
//! root, or CAP_BPF and CAP_PERFMON): [`profile`] sets the allocator up and starts the
//! tracer, [`save`] stops it and writes the history. A crate of its own, so that the
//! allocator, and the `libhotpin.so` built from it, depend on no tracer (no eBPF, aya or
//! tokio).

use std::{path::PathBuf, sync::Mutex};

use hotpin::{Allocator, Config, InitError, Mode};
use hotpin_history::dump::DumpError;
use tracer_agent::{TracerAgent, TracerError};

/// Why an embedded recording could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot set the allocator up")]
    Init(#[from] InitError),
    #[error("cannot start the embedded tracer")]
    Tracer(#[from] TracerError),
}

/// Why an embedded recording could not be saved.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error("no embedded recording is running (start one with hotpin_embedded::profile)")]
    NotRecording,
    #[error("stopping the embedded tracer")]
    Tracer(#[from] TracerError),
    #[error("writing the history")]
    Dump(#[from] DumpError),
}

/// The embedded recording, if one runs: the agent and where [`save`] writes.
static EMBEDDED: Mutex<Option<(TracerAgent, PathBuf)>> = Mutex::new(None);

/// Profile mode (everything pinned) recorded by a tracer in this process: [`save`] stops it
/// and writes the history to `history`. The CUDA runtime and driver are loaded first, since
/// the process cannot hold itself stopped while probes attach to a library it loads later.
pub fn profile(
    mut config: Config,
    history: impl Into<PathBuf>,
) -> Result<&'static Allocator, StartError> {
    config.mode = Mode::Profile;
    let allocator = Allocator::init(config)?;
    allocator.load_cuda();
    let mut agent = TracerAgent::new(std::process::id());
    agent.start()?;
    *EMBEDDED.lock().unwrap_or_else(|p| p.into_inner()) = Some((agent, history.into()));
    Ok(allocator)
}

/// Stops the embedded recording and writes its history (binary, or JSON for `.json`).
pub fn save() -> Result<PathBuf, SaveError> {
    let (mut agent, path) = EMBEDDED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .ok_or(SaveError::NotRecording)?;
    agent.stop()?;
    agent.dump(&path, tracer_agent::dump::Format::from_path(&path), false)?;
    Ok(path)
}
