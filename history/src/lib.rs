//! What hotpin knows of a program's memory, apart from how it was traced: the
//! [`MemHistory`](history::MemHistory) of host allocations and their copies, what each traced
//! function means (the registry's semantics), decoded events, history dumps (JSON and zstd
//! bincode), the store where `tracer daemon` keeps each program's histories. The pinning
//! decision read from a history is `hotpin-policy`'s; the report is `hotpin-report`'s.
//!
//! Both the tracer (which records histories) and the allocator (which acts on them) use this
//! crate; it carries no eBPF, aya or tokio, so the allocator's preload library stays small.

pub mod dump;
pub mod events;
pub mod export;
pub mod files;
pub mod history;
pub mod maps;
pub mod registry;
pub mod store;
pub mod units;

pub use history::{KernelCounters, MemHistory};
