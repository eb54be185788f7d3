//! The library's error type.

use std::{io, path::PathBuf};

/// Everything the tracer library can fail with, keeping the cause.
#[derive(Debug, thiserror::Error)]
pub enum TracerError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("{} is not a readable ELF file: {source}", path.display())]
    Elf {
        path: PathBuf,
        #[source]
        source: object::Error,
    },
    #[error(
        "loading the eBPF programs failed: {source}. The tracer needs root, or CAP_BPF and \
         CAP_PERFMON, and a kernel with BPF ring buffers (5.8) and attach cookies (5.15)"
    )]
    Load {
        #[source]
        source: aya::EbpfError,
    },
    #[error("the kernel refused eBPF program {program}: {source}")]
    Program {
        program: &'static str,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("eBPF map {map}: {source}")]
    Map {
        map: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("process {pid} does not exist (or is not visible to this tracer)")]
    NoSuchProcess { pid: u32 },
    #[error("the tracer is already running")]
    AlreadyRunning,
    #[error("the tracer is not running")]
    NotRunning,
    #[error("the recording thread failed: {0}")]
    Recorder(String),
}
