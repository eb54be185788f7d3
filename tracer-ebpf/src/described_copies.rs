//! Copies whose arguments lie in user memory, read at entry while the caller still holds
//! them: a structure describing the copy (`CUDA_MEMCPY2D`, `CUDA_MEMCPY3D`,
//! `cudaMemcpy3DParms`), whose fields the agent's layouts name ([`DESCRIPTORS`]), and the
//! arrays of a batch copy (`cuMemcpyBatchAsync`), sent as one copy per element.

use aya_ebpf::{
    helpers::bpf_probe_read_user,
    macros::map,
    maps::{Array, PerCpuArray},
};
use tracer_common::{
    CallSiteRaw, DESCRIPTOR_LAYOUTS, DescriptorLayout, Event, FLAG_AT_ENTRY, FLAG_NESTED, MAX_ARGS,
    MAX_BATCH_COPIES, ProbeCookie, counter,
};

use crate::{
    copy_runs::send_copy_run,
    page_faults::send_fault_run,
    shared::{Pending, arg_slot, bump_by, header, inside_probed_call, send_event},
};

/// Layouts of the structures described copies point at, by the index in their cookie; set
/// by the agent from its registry before anything is attached.
#[map]
static DESCRIPTORS: Array<DescriptorLayout> = Array::with_max_entries(DESCRIPTOR_LAYOUTS, 0);

/// Room to build a batch element's event outside the BPF stack.
#[map]
static ELEMENT_SCRATCH: PerCpuArray<Event> = PerCpuArray::with_max_entries(1, 0);

/// Replaces `args` with the fields of the structure at `args[0]`, as layout `index` says.
/// Returns false, with `args` zeroed, when there is no structure or it could not be read.
pub(crate) fn read_descriptor(index: u32, args: &mut [u64; MAX_ARGS]) -> bool {
    let base = args[0];
    *args = [0; MAX_ARGS];
    let Some(layout) = DESCRIPTORS.get(index) else {
        return false;
    };
    if base == 0 {
        return false;
    }
    for read in &layout.reads {
        let at = base + u64::from(read.offset);
        // SAFETY: user reads of the caller's structure; a failure is reported, not trusted.
        let value = match read.bytes {
            4 => unsafe { bpf_probe_read_user(at as *const u32) }.map(u64::from),
            8 => unsafe { bpf_probe_read_user(at as *const u64) },
            _ => continue,
        };
        let Ok(value) = value else {
            *args = [0; MAX_ARGS];
            return false;
        };
        *arg_slot(args, read.arg as usize) |= value << (read.shift & 63);
    }
    true
}

/// Sends each element of a batch copy as a copy of its own, made at entry: `args` are the
/// element's destination, source and size. The thread's earlier copies and faults go first.
pub(crate) fn send_batch(cookie: ProbeCookie, tgid: u32, tid: u32, pending: &Pending, sp: u64) {
    let (dsts, srcs, sizes, count) = (
        pending.args[0],
        pending.args[1],
        pending.args[2],
        pending.args[3],
    );
    send_copy_run(tid);
    send_fault_run(tid);
    let mut flags = FLAG_AT_ENTRY;
    if inside_probed_call(tid) {
        flags |= FLAG_NESTED;
    }
    let Some(event) = ELEMENT_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU scratch, used by this program alone while it runs.
    let event = unsafe { &mut *event };
    event.header = header(cookie.kind(), flags, tgid, tid, pending.ts_ns);
    event.args = [0; MAX_ARGS];
    event.duration_ns = 0;
    event.ret = 0;
    event.out = 1;
    // SAFETY: a user read of the return address at the stack pointer on entry.
    event.caller = unsafe { bpf_probe_read_user(sp as *const u64) }.unwrap_or(0);
    event.site = CallSiteRaw::default();
    let mut unread = count.saturating_sub(u64::from(MAX_BATCH_COPIES));
    for index in 0..MAX_BATCH_COPIES {
        if u64::from(index) >= count {
            break;
        }
        let at = 8 * u64::from(index);
        // SAFETY: user reads of the caller's arrays; a failure is counted, not trusted.
        let element = unsafe {
            (
                bpf_probe_read_user((dsts + at) as *const u64),
                bpf_probe_read_user((srcs + at) as *const u64),
                bpf_probe_read_user((sizes + at) as *const u64),
            )
        };
        let (Ok(dst), Ok(src), Ok(size)) = element else {
            unread += 1;
            continue;
        };
        event.args[0] = dst;
        event.args[1] = src;
        event.args[2] = size;
        send_event(event, 1);
    }
    if unread > 0 {
        bump_by(counter::UNREAD_COPIES, unread);
    }
}
