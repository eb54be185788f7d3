//! The library's error type.
//!
//! Each message says what failed and leaves the cause to the error's source, as aya's errors
//! do: `{error:#}` (anyhow) or [`chain`] prints each cause once.

use std::{io, path::PathBuf};

/// Everything the tracer library can fail with, keeping the cause.
#[derive(Debug, thiserror::Error)]
pub enum TracerError {
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("{} is not a readable ELF file", path.display())]
    Elf {
        path: PathBuf,
        #[source]
        source: object::Error,
    },
    #[error(
        "loading the eBPF programs failed (the tracer needs root, or CAP_BPF and CAP_PERFMON, \
         and a kernel with BPF ring buffers and attach cookies)"
    )]
    Load {
        #[source]
        source: aya::EbpfError,
    },
    #[error("the kernel refused eBPF program {program}")]
    Program {
        program: &'static str,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("eBPF map {map}")]
    Map {
        map: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error(
        "kernel {release} is too old: the tracer needs Linux {minimum} or newer (uprobe attach \
         cookies)"
    )]
    KernelTooOld { release: String, minimum: String },
    #[error("process {pid} does not exist (or is not visible to this tracer)")]
    NoSuchProcess { pid: u32 },
    #[error("the tracer is already running")]
    AlreadyRunning,
    #[error("the tracer is not running")]
    NotRunning,
    #[error("the recording thread failed: {0}")]
    Recorder(String),
}

/// An error and its causes, each once: "what failed: why: why".
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
