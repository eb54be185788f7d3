//! kprobes in the NVIDIA kernel driver, where the kernel has kprobes: pages locked for DMA.

use aya_ebpf::{macros::kprobe, programs::ProbeContext};
use tracer_common::{EventKind, counter};

use crate::shared::{now, send_short, traced_thread};

/// `os_lock_user_pages(void *address, NvU64 page_count, ...)` in the NVIDIA driver.
#[kprobe]
pub fn driver_pages_os_lock_user_pages(ctx: ProbeContext) -> u32 {
    let args = [
        ctx.arg::<u64>(0).unwrap_or(0),
        ctx.arg::<u64>(1).unwrap_or(0),
    ];
    match emit_driver_pages(EventKind::DriverLockPages, args) {
        Ok(()) | Err(_) => 0,
    }
}

/// `os_unlock_user_pages(NvU64 page_count, void *page_array, ...)` in the NVIDIA driver.
#[kprobe]
pub fn driver_pages_os_unlock_user_pages(ctx: ProbeContext) -> u32 {
    let args = [ctx.arg::<u64>(0).unwrap_or(0), 0];
    match emit_driver_pages(EventKind::DriverUnlockPages, args) {
        Ok(()) | Err(_) => 0,
    }
}

fn emit_driver_pages(kind: EventKind, args: [u64; 2]) -> Result<(), i64> {
    let Some((tgid, tid)) = traced_thread() else {
        return Ok(());
    };
    send_short((kind, tgid, tid, now()), args, 0, counter::RINGBUF_FULL);
    Ok(())
}
