//! Where a call came from: registers of the probed call, its caller as (build id, offset), and
//! allocation stacks kept once per distinct stack.

use aya_ebpf::{
    EbpfContext as _,
    bindings::{BPF_F_USER_BUILD_ID, BPF_F_USER_STACK, bpf_stack_build_id},
    helpers::bpf_get_stack,
    macros::map,
    maps::{LruHashMap, PerCpuArray, StackTrace},
    programs::{ProbeContext, RetProbeContext},
};
use tracer_common::{BuildIdFrame, CallSiteRaw, SITE_BUILD_ID, SITE_IP, SITE_NONE, STACK_FRAMES};

/// User stacks of allocation calls, by id: the kernel's deduplication of stacks; the ids key
/// `CALLER_STACKS`.
#[map]
pub(crate) static STACKS: StackTrace = StackTrace::with_max_entries(MAX_STACKS, 0);

const MAX_STACKS: u32 = 16384;

/// The first frames of each stack in `STACKS`, resolved to (build id, file offset) while the
/// process's memory map is certain to be there.
#[map]
static CALLER_STACKS: LruHashMap<u32, [BuildIdFrame; STACK_FRAMES]> =
    LruHashMap::with_max_entries(MAX_STACKS, 0);

/// Room to resolve a stack in (too large for the BPF stack).
#[map]
static STACK_SCRATCH: PerCpuArray<[BuildIdFrame; STACK_FRAMES]> =
    PerCpuArray::with_max_entries(1, 0);

/// Keeps the resolved frames of stack `id` the first time it is seen. Not inlined: the return
/// program's own stack is near the BPF limit.
#[inline(never)]
pub(crate) fn keep_stack_frames(ctx: &RetProbeContext, id: u32) {
    // SAFETY: only tested for presence.
    if unsafe { CALLER_STACKS.get(id) }.is_some() {
        return;
    }
    let Some(scratch) = STACK_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU scratch, used by this program alone while it runs.
    let frames = unsafe { &mut *scratch };
    for frame in frames.iter_mut() {
        frame.status = 0;
    }
    // SAFETY: the buffer is STACK_FRAMES frames of bpf_stack_build_id's layout, exactly its
    // size; the helper writes within it.
    let written = unsafe {
        bpf_get_stack(
            ctx.as_ptr(),
            scratch.cast(),
            size_of::<[BuildIdFrame; STACK_FRAMES]>() as u32,
            (BPF_F_USER_STACK | BPF_F_USER_BUILD_ID).into(),
        )
    };
    if written > 0 {
        let _ = CALLER_STACKS.insert(id, frames, 0);
    }
}

#[cfg(bpf_target_arch = "x86_64")]
pub(crate) fn stack_pointer(ctx: &ProbeContext) -> u64 {
    // SAFETY: `regs` points at the probe's pt_regs for the duration of the program.
    unsafe { (*ctx.regs).rsp }
}

#[cfg(bpf_target_arch = "aarch64")]
pub(crate) fn stack_pointer(ctx: &ProbeContext) -> u64 {
    // SAFETY: as above.
    unsafe { (*ctx.regs).sp }
}

/// In a uretprobe the instruction pointer is the original return address: the call site.
#[cfg(bpf_target_arch = "x86_64")]
pub(crate) fn return_address(ctx: &RetProbeContext) -> u64 {
    // SAFETY: `regs` points at the probe's pt_regs for the duration of the program.
    unsafe { (*ctx.regs).rip }
}

#[cfg(bpf_target_arch = "aarch64")]
pub(crate) fn return_address(ctx: &RetProbeContext) -> u64 {
    // SAFETY: as above.
    unsafe { (*ctx.regs).pc }
}

/// The caller as (build id, file offset), resolved by the kernel while the process's memory
/// map is certain to be there.
pub(crate) fn call_site(ctx: &RetProbeContext) -> CallSiteRaw {
    // SAFETY: all-zero is a valid bpf_stack_build_id (a plain C struct with a union of u64s).
    let mut frame: bpf_stack_build_id = unsafe { core::mem::zeroed() };
    // SAFETY: the buffer is one frame, exactly its size; the helper writes within it.
    let written = unsafe {
        bpf_get_stack(
            ctx.as_ptr(),
            (&raw mut frame).cast(),
            size_of::<bpf_stack_build_id>() as u32,
            (BPF_F_USER_STACK | BPF_F_USER_BUILD_ID).into(),
        )
    };
    if written < size_of::<bpf_stack_build_id>() as i64 {
        return CallSiteRaw::default();
    }
    let mut site = CallSiteRaw::default();
    // SAFETY: both union members are u64.
    site.offset = unsafe { frame.__bindgen_anon_1.offset };
    site.status = match frame.status {
        1 => {
            site.build_id = frame.build_id;
            SITE_BUILD_ID
        }
        2 => SITE_IP,
        _ => SITE_NONE,
    };
    site
}
