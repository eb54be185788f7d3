//! hotpin's tracer: eBPF probes on the CUDA runtime and driver of a process, a lossless event
//! stream, and the [`MemHistory`](history::MemHistory) of which host allocations are copied to
//! and from the GPU often (hot) and which rarely (cold).

pub mod address_space;
pub mod agent;
pub mod daemon;
pub mod error;
pub mod filter;
pub mod hold;
pub mod identity;
pub mod privileges;
pub mod probes;
pub mod python;
pub mod recorder;
pub mod sessions;
pub mod target;
pub mod watchdog;

/// The types [`TracerAgent`]'s methods take and return live in `hotpin-history`: re-exported
/// so that a user of the library names them without depending on it.
pub use hotpin_history::{dump, history};

pub use agent::{AgentConfig, TracerAgent};

/// What a history says recorded it (`RecordingMeta::tracer`).
pub const TRACER_NAME: &str = concat!("hotpin tracer ", env!("CARGO_PKG_VERSION"));

/// Ring buffer size by default: 16 MiB holds about 120k events, a second of the heaviest
/// CUDA call rate we have measured, between two drains.
pub const DEFAULT_RING_BYTES: u32 = 16 << 20;

/// Allocation entries a history keeps by default before folding the freed ones (see
/// [`crate::history::Retention`]): about 24 MiB of history at about 240 bytes each, far more
/// than a short run makes, so only a long-lived process's history is folded.
pub const DEFAULT_MAX_ALLOCATIONS: usize = 100_000;

pub use error::TracerError;
