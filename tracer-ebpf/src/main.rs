//! Kernel-side programs of the tracer.
//!
//! One entry program and one return program serve every uprobe in the agent's registry: the
//! attach cookie ([`ProbeCookie`]) tells them which function they sit on, where its
//! out-parameter is and which API layer it belongs to. The entry saves the arguments per
//! thread; the return completes them into one [`Event`] in the ring buffer.
#![no_std]
#![no_main]

use aya_ebpf::{
    EbpfContext as _,
    bindings::{
        BPF_F_USER_BUILD_ID, BPF_F_USER_STACK, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP,
        BPF_RB_NO_WAKEUP, bpf_stack_build_id,
    },
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_pid_tgid, bpf_get_smp_processor_id,
        bpf_get_stack, bpf_ktime_get_ns, bpf_probe_read_user,
    },
    macros::{map, uprobe, uretprobe},
    maps::{HashMap, LruHashMap, PerCpuArray, RingBuf},
    programs::{ProbeContext, RetProbeContext},
};
use tracer_common::{
    CallSiteRaw, Event, EventHeader, FLAG_NESTED, FLAG_NO_ENTRY, FLAG_OUT_UNREADABLE, Layer,
    MAX_ARGS, MAX_TARGETS, ProbeCookie, SITE_BUILD_ID, SITE_IP, SITE_NONE, counter,
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

/// How many runtime-API calls each thread is inside.
#[map]
static RUNTIME_DEPTH: LruHashMap<u32, u32> = LruHashMap::with_max_entries(MAX_PENDING, 0);

#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

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
    unsafe { TARGETS.get(&tgid) }.map(|_| (tgid, pid_tgid as u32))
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
    let Some((_, tid)) = traced_thread() else {
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
    let key = PendingKey {
        tid,
        kind: cookie.kind() as u32,
    };
    if PENDING.insert(&key, &pending, 0).is_err() {
        bump(counter::PENDING_FULL);
    }
    if cookie.layer() == Layer::Runtime as u8 {
        let depth = RUNTIME_DEPTH.get_ptr_mut(&tid);
        match depth {
            // SAFETY: the entry belongs to this thread, which is running this program.
            Some(depth) => unsafe { *depth += 1 },
            None => {
                let _ = RUNTIME_DEPTH.insert(&tid, &1, 0);
            }
        }
    }
    Ok(())
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
    let mut flags = 0u16;
    // SAFETY: the value is copied out before the entry is removed.
    let pending = unsafe { PENDING.get(&key) }.copied();
    let _ = PENDING.remove(&key);
    let (args, duration_ns) = match pending {
        Some(p) => (p.args, now.saturating_sub(p.ts_ns)),
        None => {
            flags |= FLAG_NO_ENTRY;
            ([0; MAX_ARGS], 0)
        }
    };

    let depth = RUNTIME_DEPTH.get_ptr_mut(&tid);
    if cookie.layer() == Layer::Runtime as u8 {
        if let Some(depth) = depth {
            // SAFETY: this thread's entry.
            unsafe {
                if *depth > 0 {
                    *depth -= 1;
                }
            }
        }
    } else if cookie.layer() == Layer::Driver as u8 {
        if let Some(depth) = depth {
            // SAFETY: this thread's entry.
            if unsafe { *depth } > 0 {
                flags |= FLAG_NESTED;
            }
        }
    }

    let mut out = 0;
    if let Some(index) = cookie.out_arg() {
        if index < MAX_ARGS && args[index] != 0 {
            // SAFETY: a user read of the out-parameter the callee just wrote.
            match unsafe { bpf_probe_read_user(args[index] as *const u64) } {
                Ok(value) => out = value,
                Err(_) => flags |= FLAG_OUT_UNREADABLE,
            }
        }
    }

    let site = if cookie.want_site() { call_site(ctx) } else { CallSiteRaw::default() };

    let Some(mut entry) = EVENTS.reserve::<Event>(0) else {
        bump(counter::RINGBUF_FULL);
        return Ok(());
    };
    entry.write(Event {
        header: EventHeader {
            kind: cookie.kind(),
            flags,
            // SAFETY: no preconditions.
            cpu: unsafe { bpf_get_smp_processor_id() },
            pid: tgid,
            tid,
            ts_ns: now,
        },
        args,
        ret: ctx.ret::<u64>(),
        out,
        duration_ns,
        caller: return_address(ctx),
        site,
    });
    let wakeup = if EVENTS.query(BPF_RB_AVAIL_DATA.into()) >= WAKEUP_BYTES {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    entry.submit(wakeup.into());
    Ok(())
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
