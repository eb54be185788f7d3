//! hotpin's pinning allocator.
//!
//! This crate loads the CUDA runtime at run time ([`cuda`]), so it builds and runs on machines
//! without CUDA.

pub mod cuda;
