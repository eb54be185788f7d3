//! hotpin's pinning decision, in one home. The Rust allocator (a pool of pinned blocks), the
//! interposer (registration in place) and `tracer report` (advice) all ask it; each keeps only
//! its own way of pinning.
//!
//! - [`callers`]: who is told the truth about memory hotpin pinned behind the program's back.
//! - [`cost`]: the cost model: what a copy loses pageable, what pinning costs.
//! - [`hot`]: judged from a whole history with hindsight: which allocations and recycled
//!   groups are worth pinning ([`hot::HotPolicy`]).
//! - [`mode`] and [`set`]: the modes, each allocation's identity across runs, the verdict a
//!   history gives it ([`set::HotSet`]) under a budget, and the decision for one allocation
//!   ([`set::decide`]).
//! - [`online`]: judged while the program runs: a block's heat, when it repays pinning (rent
//!   or buy), its density, the budget and what it displaces, recycled groups.
//! - [`ordinals`]: an allocation's ordinal at its call site (with the site and size, its
//!   name across runs).
//! - [`reuse`]: which freed pinned block serves an allocation.

pub mod callers;
pub mod cost;
pub mod hot;
pub mod mode;
pub mod online;
pub mod ordinals;
pub mod reuse;
pub mod set;

pub use mode::Mode;
