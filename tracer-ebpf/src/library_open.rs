//! A target opening a CUDA library or hotpin: the agent attaches to it (stopping the target
//! for that moment where asked). When the agent watches every process (`tracer daemon`), any
//! process that opens one becomes a target here, before its first CUDA call.

use aya_ebpf::{
    bindings::BPF_RB_FORCE_WAKEUP,
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns,
        bpf_probe_read_user_str_bytes, bpf_send_signal,
    },
    macros::{map, tracepoint},
    maps::{LruHashMap, PerCpuArray},
    programs::TracePointContext,
};
use tracer_common::{
    CUDA_LIBRARY_PREFIX, Event, EventKind, HEARTBEAT_STALE_NS, HOTPIN_LIBRARY_PREFIX, MAX_TARGETS,
    PATH_BYTES, TRACER_THREAD, config, counter, field,
};

use crate::shared::{CONFIG, EVENTS, TARGETS, bump, header, read_field, traced_thread};

/// Threads inside an openat of a CUDA library or hotpin.
#[map]
static OPENING: LruHashMap<u32, u32> = LruHashMap::with_max_entries(1024, 0);

/// Processes the agent chose not to trace (filtered out by `tracer daemon`): their library
/// opens do not make them targets again.
#[map]
static IGNORED: LruHashMap<u32, u32> = LruHashMap::with_max_entries(MAX_TARGETS, 0);

/// Processes stopped on a library open that the agent has not let go yet (tgid -> unused).
/// A SIGCONT from anyone else (`runuser`, `su`, a shell's `fg`, continuing their child once
/// continued themselves) resumes such a process before the agent attached; its next host
/// memory syscall stops it again ([`renew_hold`]), and the loader maps the library it opened
/// with mmap before any of that library's code can run. The agent takes the process out
/// before its own SIGCONT.
#[map]
static HELD: LruHashMap<u32, u32> = LruHashMap::with_max_entries(MAX_TARGETS, 0);

/// Room to read a path into (too large for the BPF stack).
#[map]
static PATH_SCRATCH: PerCpuArray<[u8; PATH_BYTES]> = PerCpuArray::with_max_entries(1, 0);

const SIGCONT: u32 = 18;
const SIGSTOP: u32 = 19;

#[tracepoint]
pub fn library_open_sys_enter_openat(ctx: TracePointContext) -> u32 {
    match try_library_open_enter(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

#[tracepoint]
pub fn library_open_sys_exit_openat(ctx: TracePointContext) -> u32 {
    match try_library_open_exit(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

/// Whether the path names a file starting with "libcud" or "libhotpin": it starts so, or
/// contains "/" and then the prefix. A few comparisons per position and nothing carried between
/// iterations, so the verifier's work stays linear in the path length. A directory with such a
/// name also matches; the agent looks at the file and lets the process go on.
fn is_probed_library(path: &[u8; PATH_BYTES], len: usize) -> bool {
    // Reads through `get`, never indexing, so no bounds-check panic reaches the verifier.
    let byte = |at: usize| path.get(at).copied().unwrap_or(0);
    let cuda = CUDA_LIBRARY_PREFIX;
    let hotpin = HOTPIN_LIBRARY_PREFIX;
    // Both prefixes start with "libcud"[..3] == "lib"; then "cud" or "hotpin".
    let matches_at = |at: usize| {
        byte(at) == cuda[0]
            && byte(at + 1) == cuda[1]
            && byte(at + 2) == cuda[2]
            && ((byte(at + 3) == cuda[3] && byte(at + 4) == cuda[4] && byte(at + 5) == cuda[5])
                || (byte(at + 3) == hotpin[3]
                    && byte(at + 4) == hotpin[4]
                    && byte(at + 5) == hotpin[5]
                    && byte(at + 6) == hotpin[6]
                    && byte(at + 7) == hotpin[7]
                    && byte(at + 8) == hotpin[8]))
    };
    if len >= cuda.len() && matches_at(0) {
        return true;
    }
    let mut i = 0;
    while i + cuda.len() < PATH_BYTES {
        if i + cuda.len() >= len {
            return false;
        }
        if byte(i) == b'/' && matches_at(i + 1) {
            return true;
        }
        i += 1;
    }
    false
}

/// Whether the agent watches every process's library opens (`config::WATCH_LIBRARY_OPENS`).
fn watching_all() -> bool {
    CONFIG
        .get(config::WATCH_LIBRARY_OPENS)
        .is_some_and(|&watch| watch != 0)
}

/// The current thread's (tgid, tid) if it is traced, or if every process is watched.
fn opening_thread() -> Option<(u32, u32)> {
    if let Some(ids) = traced_thread() {
        return Some(ids);
    }
    if !watching_all() {
        return None;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: only tested for presence.
    if unsafe { IGNORED.get(tgid) }.is_some() {
        return None;
    }
    Some((tgid, pid_tgid as u32))
}

fn try_library_open_enter(ctx: &TracePointContext) -> Result<(), i64> {
    let Some((_, tid)) = opening_thread() else {
        return Ok(());
    };
    let filename: u64 = read_field(ctx, field::OPENAT_FILENAME)?;
    let scratch = PATH_SCRATCH.get_ptr_mut(0).ok_or(0i64)?;
    // SAFETY: per-CPU scratch, used by this program alone while it runs.
    let buffer = unsafe { &mut *scratch };
    // SAFETY: a user read of the path the process passed; the helper bounds it to the buffer.
    let len = unsafe { bpf_probe_read_user_str_bytes(filename as *const u8, buffer) }
        .map_err(i64::from)?
        .len();
    if is_probed_library(buffer, len) {
        OPENING.insert(tid, 1, 0)?;
    }
    Ok(())
}

fn try_library_open_exit(ctx: &TracePointContext) -> Result<(), i64> {
    let Some((tgid, tid)) = opening_thread() else {
        return Ok(());
    };
    // SAFETY: only tested for presence.
    if unsafe { OPENING.get(tid) }.is_none() {
        return Ok(());
    }
    let _ = OPENING.remove(tid);
    let fd: i64 = read_field(ctx, field::SYSCALL_RET)?;
    if fd < 0 {
        return Ok(());
    }
    // A watched process joins the filter before it can make a CUDA call: the library is not
    // even mapped yet. If the filter is full (MAX_TARGETS processes traced at once) it is not
    // traced, and the agent is not told.
    if traced_thread().is_none() {
        TARGETS.insert(tgid, 0, 0)?;
    }
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let mut event = Event {
        header: header(EventKind::LibraryOpen as u16, 0, tgid, tid, now),
        ..Event::default()
    };
    event.args[0] = fd as u64;
    // Reserve first: a process must never be stopped without the agent being told.
    let Some(mut entry) = EVENTS.reserve::<Event>(0) else {
        bump(counter::RINGBUF_FULL);
        return Ok(());
    };
    entry.write(event);
    // Stop before submitting, so the agent's SIGCONT cannot overtake the SIGSTOP. Never a
    // tracer's attaching thread: another tracer stopped there could not let go what it holds.
    if agent_alive(now)
        && !is_tracer_thread()
        && CONFIG
            .get(config::STOP_ON_LIBRARY_OPEN)
            .is_some_and(|&stop| stop != 0)
    {
        // Held before stopped, so the agent, told only after, always finds it to take out.
        // Not held (map full) only loses the renewal.
        let _ = HELD.insert(tgid, 1, 0);
        // SAFETY: signals the current process, which is a target.
        unsafe { bpf_send_signal(SIGSTOP) };
    }
    entry.submit(BPF_RB_FORCE_WAKEUP.into());
    Ok(())
}

/// Whether the current thread is a tracer's that attaches probes (`TRACER_THREAD`).
fn is_tracer_thread() -> bool {
    let name = TRACER_THREAD.as_bytes();
    bpf_get_current_comm().is_ok_and(|comm| {
        let mut same = name.len() <= comm.len();
        let mut i = 0;
        while same && i < name.len() && i < comm.len() {
            same = comm[i] == name[i];
            i += 1;
        }
        same
    })
}

/// Whether the agent shows signs of life: only then is a target stopped, so that one
/// stopped, hung or killed freezes no program.
fn agent_alive(now: u64) -> bool {
    CONFIG
        .get(config::HEARTBEAT_NS)
        .is_some_and(|&beat| now.saturating_sub(beat) <= HEARTBEAT_STALE_NS)
}

/// Called at a target's host memory syscalls: a process held for the agent's attach that
/// someone else continued is stopped again (see [`HELD`]).
pub(crate) fn renew_hold(tgid: u32) {
    // SAFETY: only tested for presence.
    if unsafe { HELD.get(tgid) }.is_none() {
        return;
    }
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    if agent_alive(unsafe { bpf_ktime_get_ns() }) {
        // SAFETY: signals the current process, which is held for the agent.
        unsafe { bpf_send_signal(SIGSTOP) };
        // The agent may have let it go between the look above and the stop (it takes the
        // process out, then continues it): then the stop, still pending while this syscall
        // runs, is taken back, as a SIGCONT takes back a pending stop.
        // SAFETY: only tested for presence.
        if unsafe { HELD.get(tgid) }.is_none() {
            // SAFETY: signals the current process.
            unsafe { bpf_send_signal(SIGCONT) };
        }
    } else {
        let _ = HELD.remove(tgid);
    }
}
