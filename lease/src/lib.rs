//! The node's pinned-memory leases (#27): `tracer daemon` grants pinned memory to the
//! `hotpin run` processes of a node within one budget, and asks the least dense holders to
//! give blocks back when a denser block needs the room.
//!
//! - [`wire`]: the messages, one JSON object per line over a Unix socket, and their checked
//!   decoder (fuzzed: `cargo xtask fuzz`, target `lease_decoder`).
//! - [`arbiter`]: the rules, with no socket: budget, caps per user and cgroup, reclaim,
//!   trust.
//!
//! The daemon's server is `tracer_agent::daemon::lease`; the client is the interposer's
//! (`preload/src/lease.rs`). docs/leases.md says how they fit.

pub mod arbiter;
pub mod wire;

/// Where the daemon listens, unless told otherwise (`HOTPIN_LEASE_SOCKET`, `lease_socket`).
pub const DEFAULT_SOCKET: &str = "/run/hotpin/lease.sock";
