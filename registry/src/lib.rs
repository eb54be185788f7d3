//! The first stages of the data path: the probe registry (what each traced function means,
//! from which the tracer attaches and the kernel reads arguments) and the event envelope's
//! decoding into calls ([`events::ApiCall`]). No eBPF loader and no history: the tracer, the
//! history and the fuzzers use it.

pub mod events;
pub mod registry;
