//! A target's child processes, traced from before they first run.

use aya_ebpf::{bindings::BPF_RB_FORCE_WAKEUP, macros::tracepoint, programs::TracePointContext};
use tracer_common::{EventKind, counter, field};

use crate::shared::{TARGETS, now, read_field, send_short, traced_thread};

const CLONE_THREAD: u64 = 0x10000;

/// A traced process creating a child process: the child is traced from before it first runs,
/// so forked workers (and whatever they exec) are followed. Threads are already traced (the
/// filter is by process).
#[tracepoint]
pub fn process_fork_task_newtask(ctx: TracePointContext) -> u32 {
    match try_process_fork(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

fn try_process_fork(ctx: &TracePointContext) -> Result<(), i64> {
    let Some((tgid, tid)) = traced_thread() else {
        return Ok(());
    };
    let flags: u64 = read_field(ctx, field::NEWTASK_CLONE_FLAGS)?;
    if flags & CLONE_THREAD != 0 {
        return Ok(());
    }
    let child: i32 = read_field(ctx, field::NEWTASK_PID)?;
    TARGETS.insert(child as u32, 0, 0)?;
    // Woken at once: the agent follows the child from here.
    let event = (EventKind::ProcessFork, tgid, tid, now());
    let wakeup = BPF_RB_FORCE_WAKEUP.into();
    send_short(event, [child as u64, 0], wakeup, counter::RINGBUF_FULL);
    Ok(())
}
