//! The NVIDIA driver's ioctls made by a target.

use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use tracer_common::{EventKind, NVIDIA_IOCTL_TYPE, counter, field};

use crate::{
    copy_runs::send_copy_run,
    page_faults::send_fault_run,
    shared::{now, read_field, send_short, traced_thread},
};

/// A target's ioctl of the NVIDIA driver's kind (the resource manager's escapes on
/// /dev/nvidiactl and /dev/nvidia*): how often the driver is asked for what.
#[tracepoint]
pub fn nvidia_ioctl_sys_enter(ctx: TracePointContext) -> u32 {
    match try_nvidia_ioctl(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

fn try_nvidia_ioctl(ctx: &TracePointContext) -> Result<(), i64> {
    let Some((tgid, tid)) = traced_thread() else {
        return Ok(());
    };
    let cmd: u64 = read_field(ctx, field::IOCTL_CMD)?;
    if (cmd >> 8) & 0xff != NVIDIA_IOCTL_TYPE {
        return Ok(());
    }
    let fd: u64 = read_field(ctx, field::IOCTL_FD)?;
    send_copy_run(tid);
    send_fault_run(tid);
    let event = (EventKind::NvidiaIoctl, tgid, tid, now());
    send_short(
        event,
        [fd, cmd & 0xffff_ffff],
        0,
        counter::HOST_RINGBUF_FULL,
    );
    Ok(())
}
