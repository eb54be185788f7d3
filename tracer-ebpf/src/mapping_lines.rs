//! The Python lines of a large anonymous mapping: a CPython target's `malloc` of a large block
//! (PyTorch's and NumPy's CPU arrays) is a mapping, which no allocation call names. At the
//! entry of such an mmap made outside any probed call, the thread's Python frames are sent
//! (`python_frames`), as an allocation call's entry sends them; the agent gives them to the
//! mapping `host_memory` sends at the exit. A program of its own: walked by the verifier
//! once, apart from the host memory programs' paths.

use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use tracer_common::{FLAG_FOR_MAPPING, MAPPING_LINES_FLOOR, field};

use crate::{
    host_memory::MAP_ANONYMOUS,
    python_frames::send_python_lines,
    shared::{FIELDS, inside_probed_call, traced_thread},
};

/// Attached to `sys_enter_mmap` where Python lines are read (`tracer record`'s default).
#[tracepoint]
pub fn mapping_lines_sys_enter_mmap(ctx: TracePointContext) -> u32 {
    match try_mapping_lines(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

fn try_mapping_lines(ctx: &TracePointContext) -> Result<(), i64> {
    let Some((tgid, tid)) = traced_thread() else {
        return Ok(());
    };
    let base = FIELDS.get(field::SYSCALL_ARGS).copied().unwrap_or(0) as usize;
    if base == 0 {
        return Err(0);
    }
    // SAFETY: mmap's length and flags, arguments 1 and 3 of its sys_enter record, 8 bytes
    // apart from `base` (checked by the agent).
    let (len, flags): (u64, u64) = unsafe { (ctx.read_at(base + 8)?, ctx.read_at(base + 24)?) };
    if flags & MAP_ANONYMOUS == 0 || len < MAPPING_LINES_FLOOR {
        return Ok(());
    }
    if !inside_probed_call(tid) {
        send_python_lines(tgid, tid, FLAG_FOR_MAPPING);
    }
    Ok(())
}
