//! What hotpin knows of a program's memory, apart from how it was traced: the
//! [`MemHistory`](history::MemHistory) of host allocations and their copies, what each traced
//! function means (the registry's semantics), decoded events, history dumps (JSON and zstd
//! bincode), the store where `tracer daemon` keeps each program's histories, and the report
//! and pinning policy read from a history.
//!
//! Both the tracer (which records histories) and the allocator (which acts on them) use this
//! crate; it carries no eBPF, aya or tokio, so the allocator's preload library stays small.

pub mod cost;
pub mod dump;
pub mod events;
pub mod export;
pub mod files;
pub mod history;
pub mod maps;
pub mod names;
pub mod registry;
pub mod report;
pub mod store;

pub use history::{KernelCounters, MemHistory};
