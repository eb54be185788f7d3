//! Kernel-side programs of the tracer.
//!
//! One entry program and one return program serve every uprobe in the agent's registry: the
//! attach cookie ([`ProbeCookie`]) tells them which function they sit on, where its
//! out-parameter is and which API layer it belongs to. The entry saves the arguments per
//! thread; the return completes them into one [`Event`] in the ring buffer.

use aya_ebpf::{
    EbpfContext as _,
    bindings::{
        BPF_F_USER_BUILD_ID, BPF_F_USER_STACK, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP,
        BPF_RB_NO_WAKEUP, bpf_stack_build_id,
    },
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_get_stack,
        bpf_ktime_get_ns, bpf_probe_read_user, bpf_probe_read_user_str_bytes, bpf_send_signal,
    },
    macros::{kprobe, map, tracepoint, uprobe, uretprobe},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf, StackTrace},
    programs::{ProbeContext, RetProbeContext, TracePointContext, tracing::StackIdContext as _},
};
use tracer_common::{
    BuildIdFrame, COPY_RUN_SLOTS, CUDA_LIBRARY_PREFIX, CallSiteRaw, CopyRuns, Event, EventHeader,
    EventKind, FLAG_AT_ENTRY, FLAG_NESTED, FLAG_NO_ENTRY, FLAG_OUT_UNREADABLE, FaultRun,
    HOTPIN_LIBRARY_PREFIX, Layer, MAX_ARGS, MAX_FAULT_RUN, MAX_TARGETS, NVIDIA_IOCTL_TYPE,
    PAGE_BYTES, PATH_BYTES, ProbeCookie, SITE_BUILD_ID, SITE_IP, SITE_NONE, STACK_FRAMES, config,
    counter, field,
};

/// Default ring size; the agent may set another with `EbpfLoader::map_max_entries`.
const RING_BYTES: u32 = 8 << 20;
/// Wake the reader at once when this much is waiting; otherwise it drains on its own timer.
const WAKEUP_BYTES: u64 = 1 << 20;
/// Calls in flight at once across all traced threads.
const MAX_PENDING: u32 = 16384;

#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BYTES, 0);

/// Processes to trace (tgid -> unused); every program returns at once for any other.
#[map]
static TARGETS: HashMap<u32, u32> = HashMap::with_max_entries(MAX_TARGETS, 0);

/// Calls entered and not yet returned, by (thread, kind).
#[map]
static PENDING: LruHashMap<PendingKey, Pending> = LruHashMap::with_max_entries(MAX_PENDING, 0);

/// How many allocator and runtime calls each thread is inside.
#[map]
static DEPTH: LruHashMap<u32, Depth> = LruHashMap::with_max_entries(MAX_PENDING, 0);

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Depth {
    allocator: u32,
    runtime: u32,
}

/// This thread's depth counters, created at zero if missing.
fn depth_of(tid: u32) -> Option<*mut Depth> {
    if let Some(depth) = DEPTH.get_ptr_mut(tid) {
        return Some(depth);
    }
    DEPTH.insert(tid, Depth::default(), 0).ok()?;
    DEPTH.get_ptr_mut(tid)
}

#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Settings from the agent (`config::*` indexes).
#[map]
static CONFIG: Array<u64> = Array::with_max_entries(config::COUNT, 0);

/// Threads inside an openat of a CUDA library or hotpin.
#[map]
static OPENING: LruHashMap<u32, u32> = LruHashMap::with_max_entries(1024, 0);

/// libc allocations at or above the floor, by (process, pointer): their frees are sent, no
/// other frees are.
#[map]
static LIBC_LIVE: LruHashMap<LibcBlock, u8> = LruHashMap::with_max_entries(1 << 16, 0);

#[repr(C)]
#[derive(Clone, Copy)]
struct LibcBlock {
    tgid: u32,
    _pad: u32,
    ptr: u64,
}

fn libc_block(tgid: u32, ptr: u64) -> LibcBlock {
    LibcBlock { tgid, _pad: 0, ptr }
}

/// Whether a libc allocator call is worth sending: an allocation of at least the floor, or a
/// free (or realloc) of one that was.
fn libc_call_wanted(tgid: u32, cookie: ProbeCookie, args: &[u64; MAX_ARGS]) -> bool {
    let floor = CONFIG.get(config::MALLOC_FLOOR).copied().unwrap_or(0);
    let arg = |index: Option<usize>| index.and_then(|i| args.get(i).copied());
    let size = match (arg(cookie.size_arg()), arg(cookie.count_arg())) {
        // BPF has no 128-bit multiply (saturating_mul needs one): two factors under 2^32
        // cannot overflow, and a factor above is past any floor anyway.
        (Some(size), Some(count)) if (size | count) >> 32 != 0 => u64::MAX,
        (Some(size), Some(count)) => size * count,
        (Some(size), None) => size,
        _ => 0,
    };
    let tracked = |ptr: u64| {
        // SAFETY: only tested for presence.
        ptr != 0 && unsafe { LIBC_LIVE.get(libc_block(tgid, ptr)) }.is_some()
    };
    let kind = cookie.kind();
    if kind == EventKind::Free as u16 {
        tracked(args[0])
    } else if kind == EventKind::Realloc as u16 {
        size >= floor || tracked(args[0])
    } else {
        size >= floor
    }
}

/// User stacks of allocation calls, by id: the kernel's deduplication of stacks; the ids key
/// `CALLER_STACKS`.
#[map]
static STACKS: StackTrace = StackTrace::with_max_entries(MAX_STACKS, 0);
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
fn keep_stack_frames(ctx: &RetProbeContext, id: u32) {
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

/// Each thread's run of page faults on consecutive pages not yet sent.
#[map]
static FAULT_RUNS: LruHashMap<u32, FaultRun> = LruHashMap::with_max_entries(MAX_PENDING, 0);

/// Room to read a path into (too large for the BPF stack).
#[map]
static PATH_SCRATCH: PerCpuArray<[u8; PATH_BYTES]> = PerCpuArray::with_max_entries(1, 0);

/// Byte offsets of the tracepoint record fields the programs read (`field::*` indexes), set by
/// the agent from the running kernel's format files before anything is attached: no kernel's
/// layout is built in.
#[map]
static FIELDS: Array<u32> = Array::with_max_entries(field::COUNT, 0);

/// Reads field `index` of a tracepoint record at the offset the agent found for it. An offset
/// of 0 (the common header's first field) means the agent found none: an error, not a read.
fn read_field<T>(ctx: &TracePointContext, index: u32) -> Result<T, i64> {
    let offset = FIELDS.get(index).copied().unwrap_or(0);
    if offset == 0 {
        return Err(0);
    }
    // SAFETY: the offset of this field in this tracepoint's record, from its format file
    // (checked there for the size of `T`); the read is bounds-checked by the helper.
    unsafe { ctx.read_at(offset as usize) }.map_err(i64::from)
}

const SIGSTOP: u32 = 19;

#[repr(C)]
#[derive(Clone, Copy)]
struct PendingKey {
    tid: u32,
    kind: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Pending {
    ts_ns: u64,
    args: [u64; MAX_ARGS],
}

#[uprobe]
pub fn cuda_call_uprobe(ctx: ProbeContext) -> u32 {
    match try_cuda_call_uprobe(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

#[uretprobe]
pub fn cuda_call_uretprobe(ctx: RetProbeContext) -> u32 {
    match try_cuda_call_uretprobe(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

/// The calling thread as (tgid, tid), if its process is traced.
fn traced_thread() -> Option<(u32, u32)> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: the value is only tested for presence.
    unsafe { TARGETS.get(tgid) }.map(|_| (tgid, pid_tgid as u32))
}

/// The header of an event of `kind` from the current thread, stamped now.
fn header(kind: u16, flags: u16, tgid: u32, tid: u32, ts_ns: u64) -> EventHeader {
    EventHeader {
        kind,
        flags,
        // SAFETY: no preconditions.
        cpu: unsafe { bpf_get_smp_processor_id() },
        pid: tgid,
        tid,
        ts_ns,
    }
}

fn bump(index: u32) {
    if let Some(slot) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU.
        unsafe { *slot += 1 };
    }
}

#[cfg(bpf_target_arch = "x86_64")]
fn stack_pointer(ctx: &ProbeContext) -> u64 {
    // SAFETY: `regs` points at the probe's pt_regs for the duration of the program.
    unsafe { (*ctx.regs).rsp }
}

#[cfg(bpf_target_arch = "aarch64")]
fn stack_pointer(ctx: &ProbeContext) -> u64 {
    // SAFETY: as above.
    unsafe { (*ctx.regs).sp }
}

/// In a uretprobe the instruction pointer is the original return address: the call site.
#[cfg(bpf_target_arch = "x86_64")]
fn return_address(ctx: &RetProbeContext) -> u64 {
    // SAFETY: `regs` points at the probe's pt_regs for the duration of the program.
    unsafe { (*ctx.regs).rip }
}

#[cfg(bpf_target_arch = "aarch64")]
fn return_address(ctx: &RetProbeContext) -> u64 {
    // SAFETY: as above.
    unsafe { (*ctx.regs).pc }
}

/// The caller as (build id, file offset), resolved by the kernel while the process's memory
/// map is certain to be there.
fn call_site(ctx: &RetProbeContext) -> CallSiteRaw {
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

fn try_cuda_call_uprobe(ctx: &ProbeContext) -> Result<(), i64> {
    let Some((tgid, tid)) = traced_thread() else {
        return Ok(());
    };
    // SAFETY: the helper only reads the program's context.
    let cookie = ProbeCookie(unsafe { bpf_get_attach_cookie(ctx.as_ptr()) });
    let mut pending = Pending {
        // SAFETY: no preconditions.
        ts_ns: unsafe { bpf_ktime_get_ns() },
        args: [0; MAX_ARGS],
    };
    for (index, slot) in pending.args.iter_mut().take(6).enumerate() {
        *slot = ctx.arg::<u64>(index).unwrap_or(0);
    }
    // Arguments past the sixth sit above the return address.
    let sp = stack_pointer(ctx);
    for index in 0..cookie.stack_args() {
        let at = sp + 8 * (index as u64 + 1);
        // SAFETY: a user read; failure leaves the argument 0.
        pending.args[6 + index] = unsafe { bpf_probe_read_user(at as *const u64) }.unwrap_or(0);
    }
    // libc's allocator: the floor is applied here, before anything is kept or sent.
    if cookie.layer() == Layer::Libc as u8 && !libc_call_wanted(tgid, cookie, &pending.args) {
        return Ok(());
    }
    if cookie.is_at_entry() {
        send_at_entry(cookie, tgid, tid, &pending, stack_pointer(ctx));
        return Ok(());
    }
    let key = PendingKey {
        tid,
        kind: cookie.kind() as u32,
    };
    if PENDING.insert(key, pending, 0).is_err() {
        bump(counter::PENDING_FULL);
    }
    if let Some(depth) = depth_of(tid) {
        // SAFETY: the entry belongs to this thread, which is running this program.
        let depth = unsafe { &mut *depth };
        if cookie.layer() == Layer::Allocator as u8 {
            depth.allocator += 1;
        } else if cookie.layer() == Layer::Runtime as u8 {
            depth.runtime += 1;
        }
    }
    Ok(())
}

/// Each thread's driver copies not sent yet ([`CopyRuns`]). A plain hash: when it is full, a
/// copy is sent on its own rather than evict another thread's runs.
#[map]
static COPY_RUNS: HashMap<u32, CopyRuns> = HashMap::with_max_entries(MAX_PENDING, 0);

/// Longest a run of copies is kept before it is sent, in ns.
const RUN_NS: u64 = 10_000_000;

/// Room to build a thread's first [`CopyRuns`] outside the BPF stack.
#[map]
static RUNS_SCRATCH: PerCpuArray<CopyRuns> = PerCpuArray::with_max_entries(1, 0);

/// A call probed at entry only (a driver copy): no result (taken as success), no duration,
/// marked nested when made inside a runtime or hotpin call (their entries raised this
/// thread's depth). A copy identical to one the thread made since its last other event
/// (same function, arguments and nesting) adds one to that run's count instead of an event:
/// see [`CopyRuns`].
fn send_at_entry(cookie: ProbeCookie, tgid: u32, tid: u32, pending: &Pending, sp: u64) {
    let mut flags = FLAG_AT_ENTRY;
    if let Some(depth) = DEPTH.get_ptr(tid) {
        // SAFETY: this thread's entry, read while this thread runs this program.
        let depth = unsafe { &*depth };
        if depth.runtime > 0 || depth.allocator > 0 {
            flags |= FLAG_NESTED;
        }
    }
    let kind = cookie.kind();
    // SAFETY: a user read of the return address at the stack pointer on entry.
    let caller = unsafe { bpf_probe_read_user(sp as *const u64) }.unwrap_or(0);
    let fill = |run: &mut Event| {
        run.header = header(kind, flags, tgid, tid, pending.ts_ns);
        run.args = pending.args;
        run.duration_ns = 0;
        run.ret = 0;
        run.out = 1;
        run.caller = caller;
        run.site = CallSiteRaw::default();
    };
    if let Some(runs) = COPY_RUNS.get_ptr_mut(tid) {
        // SAFETY: the entry belongs to this thread, which is running this program.
        let runs = unsafe { &mut *runs };
        // Runs are sent at least every RUN_NS while the thread copies, so the agent (its
        // checkpoints, live queries) is never more than that behind a busy thread.
        if runs.used > 0 && pending.ts_ns.saturating_sub(runs.runs[0].header.ts_ns) > RUN_NS {
            send_runs(runs);
        }
        let used = runs.used as usize;
        for (index, run) in runs.runs.iter_mut().enumerate() {
            if index >= used {
                break;
            }
            if run.header.kind == kind && run.header.flags == flags && run.args == pending.args {
                run.out += 1;
                return;
            }
        }
        // A new distinct copy: the thread's page faults go first.
        send_fault_run(tid);
        if used >= COPY_RUN_SLOTS {
            send_runs(runs);
        }
        let slot = runs.used as usize;
        if let Some(run) = runs.runs.get_mut(slot) {
            fill(run);
            runs.used += 1;
        }
        return;
    }
    send_fault_run(tid);
    let Some(runs) = RUNS_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU scratch, used by this program alone while it runs.
    let runs = unsafe { &mut *runs };
    fill(&mut runs.runs[0]);
    runs.used = 1;
    // By reference: a copy of the runs (650 bytes) would not fit on the BPF stack.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let inserted = COPY_RUNS.insert(tid, &*runs, 0);
    if inserted.is_err() {
        send_event(&runs.runs[0], 1);
    }
}

/// Sends this thread's runs of copies, if it has any (before another event of the thread).
fn send_copy_run(tid: u32) {
    if let Some(runs) = COPY_RUNS.get_ptr_mut(tid) {
        // SAFETY: the entry belongs to this thread, which is running this program.
        send_runs(unsafe { &mut *runs });
    }
}

/// Sends every run in use, in the order first seen, and empties the slots.
fn send_runs(runs: &mut CopyRuns) {
    let used = runs.used as usize;
    for (index, run) in runs.runs.iter().enumerate() {
        if index >= used {
            break;
        }
        send_event(run, run.out);
    }
    runs.used = 0;
}

/// Copies `event` into the ring; a full ring counts `calls` lost (a run stands for many).
fn send_event(event: &Event, calls: u64) {
    let Some(mut entry) = EVENTS.reserve::<Event>(0) else {
        if let Some(slot) = COUNTERS.get_ptr_mut(counter::RINGBUF_FULL) {
            // SAFETY: per-CPU slot, no concurrent writer on this CPU.
            unsafe { *slot += calls };
        }
        return;
    };
    // SAFETY: the reserved record is an Event's size; ours until submitted.
    unsafe { *entry.as_mut_ptr() = *event };
    let wakeup = if EVENTS.query(BPF_RB_AVAIL_DATA.into()) >= WAKEUP_BYTES {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    entry.submit(wakeup.into());
}

fn try_cuda_call_uretprobe(ctx: &RetProbeContext) -> Result<(), i64> {
    let Some((tgid, tid)) = traced_thread() else {
        return Ok(());
    };
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: the helper only reads the program's context.
    let cookie = ProbeCookie(unsafe { bpf_get_attach_cookie(ctx.as_ptr()) });
    let key = PendingKey {
        tid,
        kind: cookie.kind() as u32,
    };
    let pending = PENDING.get_ptr(key);
    // A libc call under the floor was dropped at entry.
    if pending.is_none() && cookie.layer() == Layer::Libc as u8 {
        return Ok(());
    }
    // This thread's copies and page faults not sent yet go out before this call's event.
    send_copy_run(tid);
    send_fault_run(tid);
    // The event is filled in place in the ring buffer: built on the BPF stack (160 bytes, with
    // the entry's arguments copied there too) it took the return program over the 512-byte
    // stack limit that kernels before 6.x enforce across calls (Debian 6.1 refused it).
    let Some(mut entry) = EVENTS.reserve::<Event>(0) else {
        let _ = PENDING.remove(key);
        bump(counter::RINGBUF_FULL);
        return Ok(());
    };
    let event = entry.as_mut_ptr();
    let mut flags = 0u16;
    // SAFETY: `event` points at the reserved record, ours until it is submitted; `pending`
    // points at this thread's entry, which only this thread changes, read before removal.
    unsafe {
        match pending {
            Some(p) => {
                (*event).args = (*p).args;
                (*event).duration_ns = now.saturating_sub((*p).ts_ns);
            }
            None => {
                flags |= FLAG_NO_ENTRY;
                (*event).args = [0; MAX_ARGS];
                (*event).duration_ns = 0;
            }
        }
    }
    let _ = PENDING.remove(key);

    if let Some(depth) = DEPTH.get_ptr_mut(tid) {
        // SAFETY: the entry belongs to this thread, which is running this program.
        let depth = unsafe { &mut *depth };
        let layer = cookie.layer();
        if layer == Layer::Allocator as u8 {
            depth.allocator = depth.allocator.saturating_sub(1);
        } else if layer == Layer::Runtime as u8 {
            depth.runtime = depth.runtime.saturating_sub(1);
            if depth.allocator > 0 {
                flags |= FLAG_NESTED;
            }
        } else if depth.runtime > 0 || depth.allocator > 0 {
            flags |= FLAG_NESTED;
        }
    }

    // SAFETY: as above: the reserved record.
    let args = unsafe { &(*event).args };
    let mut out = 0;
    if let Some(index) = cookie.out_arg()
        && let Some(&at) = args.get(index)
        && at != 0
    {
        // SAFETY: a user read of the out-parameter the callee just wrote.
        match unsafe { bpf_probe_read_user(at as *const u64) } {
            Ok(value) => out = value,
            Err(_) => flags |= FLAG_OUT_UNREADABLE,
        }
    }

    if cookie.layer() == Layer::Libc as u8 {
        track_libc_block(tgid, cookie, args, ctx.ret::<u64>(), out);
    }

    let site = if cookie.want_site() {
        let mut site = call_site(ctx);
        // The same stack gets the same id, so a loop allocating from one place costs one
        // entry; a full map (or a hash collision) just leaves the stack out.
        if let Ok(id) = ctx.get_stackid(&STACKS, BPF_F_USER_STACK.into()) {
            keep_stack_frames(ctx, id as u32);
            site.stack = id as u32 + 1;
        }
        site
    } else {
        CallSiteRaw::default()
    };

    // SAFETY: as above: the reserved record; every field is written before the submit.
    unsafe {
        (*event).header = header(cookie.kind(), flags, tgid, tid, now);
        (*event).ret = ctx.ret::<u64>();
        (*event).out = out;
        (*event).caller = return_address(ctx);
        (*event).site = site;
    }
    // A call site the kernel could only give as an address must be resolved from the
    // process's memory map while it exists: wake the reader now.
    let wakeup = if site.status == SITE_IP || EVENTS.query(BPF_RB_AVAIL_DATA.into()) >= WAKEUP_BYTES
    {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    entry.submit(wakeup.into());
    Ok(())
}

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

fn try_library_open_enter(ctx: &TracePointContext) -> Result<(), i64> {
    let Some((_, tid)) = traced_thread() else {
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
    let Some((tgid, tid)) = traced_thread() else {
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
    let mut event = Event {
        // SAFETY: bpf_ktime_get_ns has no preconditions.
        header: header(EventKind::LibraryOpen as u16, 0, tgid, tid, unsafe {
            bpf_ktime_get_ns()
        }),
        ..Event::default()
    };
    event.args[0] = fd as u64;
    // Reserve first: a process must never be stopped without the agent being told.
    let Some(mut entry) = EVENTS.reserve::<Event>(0) else {
        bump(counter::RINGBUF_FULL);
        return Ok(());
    };
    entry.write(event);
    // Stop before submitting, so the agent's SIGCONT cannot overtake the SIGSTOP.
    if CONFIG
        .get(config::STOP_ON_LIBRARY_OPEN)
        .is_some_and(|&stop| stop != 0)
    {
        // SAFETY: signals the current process, which is a target.
        unsafe { bpf_send_signal(SIGSTOP) };
    }
    entry.submit(BPF_RB_FORCE_WAKEUP.into());
    Ok(())
}

/// Keeps the pointer a libc allocation returned (so its free is sent) and forgets a freed one.
fn track_libc_block(tgid: u32, cookie: ProbeCookie, args: &[u64; MAX_ARGS], ret: u64, out: u64) {
    let kind = cookie.kind();
    if kind == EventKind::Free as u16 || kind == EventKind::Realloc as u16 {
        let _ = LIBC_LIVE.remove(libc_block(tgid, args[0]));
        if kind == EventKind::Free as u16 {
            return;
        }
    }
    let ptr = if cookie.out_arg().is_some() { out } else { ret };
    if ptr != 0 {
        let _ = LIBC_LIVE.insert(libc_block(tgid, ptr), 1, 0);
    }
}

/// Arguments of the host memory syscalls read at entry (mmap has the most: six).
const SYSCALL_ARGS: usize = 6;
const MAP_ANONYMOUS: u64 = 0x20;

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
    let Some((_, tid)) = traced_thread() else {
        return Ok(());
    };
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
    if let Some(depth) = unsafe { DEPTH.get(tid) }
        && (depth.runtime > 0 || depth.allocator > 0)
    {
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

/// A target's user page fault. Faults on consecutive pages by one thread (a buffer's first
/// touch) are counted into one run and sent as one event, so a 1 GiB first touch is 512
/// events, not 262144.
#[tracepoint]
pub fn page_fault_user(ctx: TracePointContext) -> u32 {
    match try_page_fault_user(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

fn try_page_fault_user(ctx: &TracePointContext) -> Result<(), i64> {
    let Some((tgid, tid)) = traced_thread() else {
        return Ok(());
    };
    let address: u64 = read_field(ctx, field::FAULT_ADDRESS)?;
    let page = address & !(PAGE_BYTES - 1);
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(run) = FAULT_RUNS.get_ptr_mut(tid) {
        // SAFETY: the entry belongs to this thread, which is running this program.
        let run = unsafe { &mut *run };
        if run.pages > 0 && run.start + run.pages * PAGE_BYTES == page && run.pages < MAX_FAULT_RUN
        {
            run.pages += 1;
            return Ok(());
        }
        if run.pages > 0 {
            send_run(run, tid);
        }
        run.start = page;
        run.pages = 1;
        run.ts_ns = now;
        return Ok(());
    }
    let run = FaultRun {
        pid: tgid,
        start: page,
        pages: 1,
        ts_ns: now,
        ..FaultRun::default()
    };
    FAULT_RUNS.insert(tid, run, 0)?;
    Ok(())
}

/// Sends this thread's run of faults, if it has one, before another event of the thread, so
/// the history sees faults in order with the thread's frees and reallocations. Without the
/// page-fault probe there are none: one array read instead of a hash lookup on every call.
fn send_fault_run(tid: u32) {
    if CONFIG
        .get(config::PAGE_FAULTS)
        .is_none_or(|&attached| attached == 0)
    {
        return;
    }
    let Some(run) = FAULT_RUNS.get_ptr_mut(tid) else {
        return;
    };
    // SAFETY: the entry belongs to this thread, which is running this program.
    let run = unsafe { &mut *run };
    if run.pages > 0 {
        send_run(run, tid);
        run.pages = 0;
    }
}

fn send_run(run: &FaultRun, tid: u32) {
    let event = (EventKind::PageFaults, run.pid, tid, run.ts_ns);
    send_short(event, [run.start, run.pages], 0, counter::HOST_RINGBUF_FULL);
}

/// Sends an event of `kind` from (tgid, tid) at `ts_ns` with two arguments, the rest zero;
/// a full ring is counted in the `lost` counter.
fn send_short(
    (kind, tgid, tid, ts_ns): (EventKind, u32, u32, u64),
    args: [u64; 2],
    wakeup: u64,
    lost: u32,
) {
    let mut event = Event {
        header: header(kind as u16, 0, tgid, tid, ts_ns),
        ..Event::default()
    };
    event.args[0] = args[0];
    event.args[1] = args[1];
    if EVENTS.output::<Event>(&event, wakeup).is_err() {
        bump(lost);
    }
}

fn now() -> u64 {
    // SAFETY: no preconditions.
    unsafe { bpf_ktime_get_ns() }
}

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
