//! The host memory syscalls of a target (anonymous mmap, munmap, mremap, brk): the regions
//! allocations live in.

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::tracepoint, programs::TracePointContext};
use tracer_common::{Event, EventKind, FLAG_NESTED, MAX_ARGS, counter, field};

use crate::{
    copy_runs::send_copy_run,
    library_open,
    page_faults::send_fault_run,
    shared::{
        EVENTS, FIELDS, PENDING, Pending, PendingKey, bump, header, inside_probed_call, read_field,
        traced_thread,
    },
};

/// Arguments of the host memory syscalls read at entry (mmap has the most: six).
const SYSCALL_ARGS: usize = 6;
pub(crate) const MAP_ANONYMOUS: u64 = 0x20;

/// The host memory syscall with this number, by architecture.
#[cfg(bpf_target_arch = "x86_64")]
fn host_memory_kind(nr: i32) -> Option<EventKind> {
    match nr {
        9 => Some(EventKind::Mmap),
        11 => Some(EventKind::Munmap),
        25 => Some(EventKind::Mremap),
        12 => Some(EventKind::Brk),
        _ => None,
    }
}

#[cfg(bpf_target_arch = "aarch64")]
fn host_memory_kind(nr: i32) -> Option<EventKind> {
    match nr {
        222 => Some(EventKind::Mmap),
        215 => Some(EventKind::Munmap),
        216 => Some(EventKind::Mremap),
        214 => Some(EventKind::Brk),
        _ => None,
    }
}

/// Attached to `sys_enter_` mmap, munmap, mremap and brk: keeps the arguments for the exit.
#[tracepoint]
pub fn host_memory_sys_enter(ctx: TracePointContext) -> u32 {
    match try_host_memory_enter(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

/// Attached to `sys_exit_` mmap, munmap, mremap and brk: sends the call with its result.
#[tracepoint]
pub fn host_memory_sys_exit(ctx: TracePointContext) -> u32 {
    match try_host_memory_exit(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

fn try_host_memory_enter(ctx: &TracePointContext) -> Result<(), i64> {
    let Some((tgid, tid)) = traced_thread() else {
        return Ok(());
    };
    library_open::renew_hold(tgid);
    let nr: i32 = read_field(ctx, field::SYSCALL_NR)?;
    let Some(kind) = host_memory_kind(nr) else {
        return Ok(());
    };
    let mut pending = Pending {
        // SAFETY: no preconditions.
        ts_ns: unsafe { bpf_ktime_get_ns() },
        args: [0; MAX_ARGS],
    };
    let base = FIELDS.get(field::SYSCALL_ARGS).copied().unwrap_or(0) as usize;
    if base == 0 {
        return Err(0);
    }
    for (index, slot) in pending.args.iter_mut().take(SYSCALL_ARGS).enumerate() {
        // SAFETY: argument `index` of a sys_enter record: the agent checked that these
        // syscalls' arguments follow `base` 8 bytes apart; a syscall with fewer arguments
        // leaves the rest unread by the user side.
        *slot = unsafe { ctx.read_at(base + 8 * index) }.unwrap_or(0);
    }
    // Mappings of files (libraries, data) are not host buffers.
    if kind == EventKind::Mmap && pending.args[3] & MAP_ANONYMOUS == 0 {
        return Ok(());
    }
    let key = PendingKey {
        tid,
        kind: kind as u32,
    };
    if PENDING.insert(key, pending, 0).is_err() {
        bump(counter::PENDING_FULL);
    }
    Ok(())
}

fn try_host_memory_exit(ctx: &TracePointContext) -> Result<(), i64> {
    let Some((tgid, tid)) = traced_thread() else {
        return Ok(());
    };
    let nr: i32 = read_field(ctx, field::SYSCALL_EXIT_NR)?;
    let Some(kind) = host_memory_kind(nr) else {
        return Ok(());
    };
    let key = PendingKey {
        tid,
        kind: kind as u32,
    };
    // SAFETY: copied out before the entry is removed.
    let Some(pending) = (unsafe { PENDING.get(key) }).copied() else {
        // Filtered at entry (a file mapping), or entered before the probes were attached.
        return Ok(());
    };
    let _ = PENDING.remove(key);
    let ret: i64 = read_field(ctx, field::SYSCALL_RET)?;
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let mut flags = 0;
    // SAFETY: only this thread changes its entry, and it is running this program.
    if inside_probed_call(tid) {
        flags |= FLAG_NESTED;
    }
    send_copy_run(tid);
    send_fault_run(tid);
    let event = Event {
        header: header(kind as u16, flags, tgid, tid, now),
        args: pending.args,
        ret: ret as u64,
        duration_ns: now.saturating_sub(pending.ts_ns),
        ..Event::default()
    };
    if EVENTS.output::<Event>(&event, 0).is_err() {
        bump(counter::HOST_RINGBUF_FULL);
    }
    Ok(())
}
