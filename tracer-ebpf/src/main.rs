//! The tracer's kernel programs, built for `bpfel-unknown-none` by tracer-agent's build script
//! (aya-build) and embedded in the agent.
//!
//! On the host (`cargo build --workspace`, `cargo clippy --workspace`, rust-analyzer) this crate
//! compiles to an empty program, as aya-template arranges it: the programs and their
//! dependency on aya-ebpf exist for the BPF target only.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

// One module per probe family; `shared` holds the maps and helpers they all use.
#[cfg(target_arch = "bpf")]
mod calls;
#[cfg(target_arch = "bpf")]
mod copy_runs;
#[cfg(target_arch = "bpf")]
mod described_copies;
#[cfg(target_arch = "bpf")]
mod driver_pages;
#[cfg(target_arch = "bpf")]
mod host_memory;
#[cfg(target_arch = "bpf")]
mod ioctls;
#[cfg(target_arch = "bpf")]
mod libc_blocks;
#[cfg(target_arch = "bpf")]
mod library_open;
#[cfg(target_arch = "bpf")]
mod mapping_lines;
#[cfg(target_arch = "bpf")]
mod page_faults;
#[cfg(target_arch = "bpf")]
mod process_fork;
#[cfg(target_arch = "bpf")]
mod python_frames;
#[cfg(target_arch = "bpf")]
mod shared;
#[cfg(target_arch = "bpf")]
mod stacks;

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
