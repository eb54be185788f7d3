//! The tracer's kernel programs, built for `bpfel-unknown-none` by tracer-agent's build script
//! (aya-build) and embedded in the agent.
//!
//! On the host (`cargo build --workspace`, `cargo clippy --workspace`, rust-analyzer) this crate
//! compiles to an empty program, as aya-template arranges it: the programs and their
//! dependency on aya-ebpf exist for the BPF target only.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

#[cfg(target_arch = "bpf")]
mod programs;

#[cfg(not(target_arch = "bpf"))]
fn main() {}

#[cfg(all(target_arch = "bpf", not(test)))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[cfg(target_arch = "bpf")]
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
