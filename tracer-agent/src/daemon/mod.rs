//! What the daemon serves: the node's pinned-memory leases (`lease`), and about what it
//! traced, its Prometheus metrics (`metrics`, with their catalogue) and their OTLP export
//! (`otlp`). The daemon itself is the `tracer daemon`
//! command (`cli/daemon/`); the per-process sessions and the process filter it shares with the
//! recorder stay beside the recorder.

pub mod lease;
pub mod metrics;
pub mod otlp;
