//! hotpin's tracer: eBPF probes on the CUDA runtime and driver of a process, a lossless event
//! stream, and the [`MemHistory`](history::MemHistory) of which host allocations are copied to
//! and from the GPU often (hot) and which rarely (cold).

pub mod address_space;
pub mod agent;
pub mod error;
pub mod filter;
pub mod metrics;
pub mod otlp;
pub mod privileges;
pub mod probes;
pub mod recorder;
pub mod sessions;
pub mod target;

/// The history, its dumps and reports live in their own crate (shared with the allocator).
pub use hotpin_history::{dump, events, export, history, store};
pub use hotpin_policy as policy;
pub use hotpin_report as report;

pub use agent::{AgentConfig, TracerAgent};
pub use error::TracerError;
