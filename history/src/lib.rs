//! What hotpin knows of a program's memory, apart from how it was traced: the
//! [`MemHistory`](history::MemHistory) of host allocations and their copies, history dumps
//! (JSON and zstd bincode; old formats in `dump/legacy/`), the store where `tracer daemon`
//! keeps each program's histories, and the timeline export. What each traced function means
//! and how events decode is `hotpin-registry`'s; the pinning decision read from a history
//! is `hotpin-policy`'s; the report is `hotpin-report`'s.
//!
//! Both the tracer (which records histories) and the allocator (which acts on them) use this
//! crate; it carries no eBPF, aya or tokio, so the allocator's preload library stays small.

pub mod dump;
pub mod export;
pub mod files;
pub mod history;
pub mod maps;
pub mod store;
pub mod units;

pub use history::{KernelCounters, MemHistory};
