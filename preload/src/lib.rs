//! `libhotpin_preload.so`: hotpin for programs nobody changed, loaded with `LD_PRELOAD` (by
//! `hotpin run`). It answers the program's own calls:
//!
//! - the CUDA runtime's pinned memory calls (`cudaHostAlloc`, `cudaMallocHost`,
//!   `cudaFreeHost`, `cudaHostRegister`, `cudaHostUnregister`): a pinned request the history
//!   found cold is served pageable (*demoted*), unless the program depends on pinning (mapped,
//!   portable or write-combined flags);
//! - libc's allocator (`malloc`, `calloc`, `realloc`, `posix_memalign`, `aligned_alloc`,
//!   `memalign`, `free`) at or above a size floor (`HOTPIN_MALLOC_FLOOR`, default 1 MiB): a
//!   pageable allocation the history found hot is registered in place (`cudaHostRegister`,
//!   *promoted*) and unregistered before it is freed or moved by `realloc`. Below the floor a
//!   call goes straight to libc: no lock, no lookup;
//! - the asynchronous copies of both APIs (`copies`): one touching a promoted block completes
//!   before it returns, as a copy of pageable memory does, and is refused during stream
//!   capture, as CUDA refuses pageable memory there;
//! - the questions about memory (`questions`): a promoted block is answered as pageable, a
//!   demoted one is pinned on demand and answered truly.
//!
//! So the program computes what it computes without hotpin, takes the same branches and gets
//! the same answers from CUDA; only its copies get faster (docs/transparency.md). The
//! functions a program takes with `dlsym`, `cuGetProcAddress` or the runtime's
//! `cudaGetDriverEntryPoint` are answered with ours too (`exports`).
//!
//! Modes (`HOTPIN_MODE`): `use` decides from the history (`HOTPIN_HISTORY`, else the
//! program's latest in the history store `tracer daemon` writes, `HOTPIN_STORE`) with the cost
//! model (`HOTPIN_COSTS`, else built-in H100 numbers) under `HOTPIN_PINNED_BUDGET`;
//! `pin-all` promotes every allocation at or above the floor and keeps every pinned request;
//! `pin-none` demotes every pinned request it may; `profile` changes nothing (the tracer
//! records the program as it is: `hotpin run --mode profile`).
//!
//! Safety rules: anything the interposer does itself (reading the history, resolving call
//! sites, calling CUDA) is marked per thread, and every allocation made meanwhile, by us or by
//! CUDA inside a call, goes straight to libc. A forked child makes no CUDA calls of ours
//! (CUDA does not survive fork); it only frees. Nothing here fails an allocation libc would
//! satisfy: a failed registration leaves the block pageable, a failed demotion pins.

// Nothing here may panic on what a user, a program, the environment or a file hands it:
// checked by these lints outside tests (an index or an unwrap needs a written reason).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

/// Defines an exported naked stub `$name` that passes the return address in the first free
/// argument register (`$x86` on x86-64, where the return address is at the stack pointer;
/// `$arm` on aarch64, where it is in the link register) and jumps to `$at`.
macro_rules! stub {
    ($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty, $x86:literal, $arm:literal, $at:ident) => {
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            core::arch::naked_asm!(concat!("mov ", $x86, ", [rsp]"), "jmp {at}", at = sym $at)
        }

        #[cfg(target_arch = "aarch64")]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            core::arch::naked_asm!(concat!("mov ", $arm, ", x30"), "b {at}", at = sym $at)
        }
    };
}

mod allocations;
mod believed;
mod chunks;
mod copies;
mod copy_ranges;
mod counters;
mod cuda;
mod exports;
mod guard;
mod learning;
mod lease;
mod loader;
mod online;
mod pinner;
mod python;
mod questions;
mod real;
mod regions;
mod settings;
mod shared_history;
mod shelf;
mod signals;
mod state;
mod turns;

/// Marks this file as hotpin's interposer, which the tracer never probes
/// (`Library::INTERPOSER_MARKER`): it defines CUDA's copy functions only to wrap the real ones.
#[unsafe(no_mangle)]
pub extern "C" fn hotpin_interposer() {}

/// Runs when the library is loaded, before the program's `main`.
#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = init;

extern "C" fn init() {
    loader::find();
    lease::answer_with(lease::Answers {
        give_back: learning::give_back,
        lease_scores: learning::lease_scores,
    });
    state::init();
}
