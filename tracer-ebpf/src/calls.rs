//! One entry program and one return program serve every uprobe in the agent's registry
//! (CUDA runtime and driver, hotpin, libc): the attach cookie ([`ProbeCookie`]) tells them which
//! function they sit on, where its out-parameter is and which API layer it belongs to. The
//! entry saves the arguments per thread; the return completes them into one [`Event`] in the
//! ring buffer. Calls probed at entry only (driver copies) go to [`crate::copy_runs`].

use aya_ebpf::{
    EbpfContext as _,
    bindings::{BPF_F_USER_STACK, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{bpf_get_attach_cookie, bpf_ktime_get_ns, bpf_probe_read_user},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext, tracing::StackIdContext as _},
};
use tracer_common::{
    CallSiteRaw, Event, FLAG_NESTED, FLAG_NO_ENTRY, FLAG_OUT_UNREADABLE, Layer, MAX_ARGS,
    ProbeCookie, SITE_IP, counter,
};

use crate::{
    copy_runs::{send_at_entry, send_copy_run},
    described_copies::{read_descriptor, send_batch},
    libc_blocks::{libc_call_wanted, track_libc_block},
    page_faults::send_fault_run,
    python_frames::send_python_lines,
    shared::{
        DEPTH, ENTRY_SCRATCH, EVENTS, PENDING, Pending, PendingKey, WAKEUP_BYTES, arg_at, arg_slot,
        bump, depth_of, header, inside_probed_call, traced_thread,
    },
    stacks::{STACKS, call_site, keep_stack_frames, return_address, stack_pointer},
};

#[uprobe]
pub fn api_call_entry(ctx: ProbeContext) -> u32 {
    match try_api_call_entry(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

#[uretprobe]
pub fn api_call_return(ctx: RetProbeContext) -> u32 {
    match try_api_call_return(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

fn try_api_call_entry(ctx: &ProbeContext) -> Result<(), i64> {
    let Some((tgid, tid)) = traced_thread() else {
        return Ok(());
    };
    // SAFETY: the helper only reads the program's context.
    let cookie = ProbeCookie(unsafe { bpf_get_attach_cookie(ctx.as_ptr()) });
    let Some((pending, sp)) = gather_args(ctx, cookie) else {
        return Ok(());
    };
    // libc's allocator: the floor is applied here, before anything is kept or sent.
    if cookie.layer() == Layer::Libc as u8 && !libc_call_wanted(tgid, cookie, &pending.args) {
        return Ok(());
    }
    // An allocation made outside any other probed call: its Python lines, if any, go first
    // (a nested one is its outer call's). Here, before the paths part: the verifier walks
    // the frames once.
    if cookie.want_site() {
        // SAFETY: read only.
        if !inside_probed_call(tid) {
            send_python_lines(tgid, tid, 0);
        }
    }
    // A copy described in user memory: read now, while the caller holds it. A null
    // descriptor copies nothing (CUDA refuses it); one that cannot be read is a lost copy.
    if let Some(layout) = cookie.descriptor() {
        let described = pending.args[0] != 0;
        if !(described && read_descriptor(layout, &mut pending.args)) {
            if described {
                bump(counter::UNREAD_COPIES);
            }
            if cookie.is_at_entry() {
                return Ok(());
            }
        }
    }
    if cookie.is_batch() {
        send_batch(cookie, tgid, tid, pending, sp);
        return Ok(());
    }
    if cookie.is_at_entry() {
        send_at_entry(cookie, tgid, tid, pending, sp);
        return Ok(());
    }
    let key = PendingKey {
        tid,
        kind: cookie.kind() as u32,
    };
    // By reference: the value stays in the scratch.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let inserted = PENDING.insert(key, &*pending, 0);
    if inserted.is_err() {
        bump(counter::PENDING_FULL);
    }
    if let Some(depth) = depth_of(tid) {
        // SAFETY: the entry belongs to this thread, which is running this program.
        let depth = unsafe { &mut *depth };
        if cookie.layer() == Layer::Allocator as u8 {
            depth.allocator += 1;
        } else if cookie.layer() == Layer::Runtime as u8 {
            depth.runtime += 1;
        } else if cookie.layer() == Layer::Driver as u8 && cookie.want_site() {
            depth.driver_alloc += 1;
        }
    }
    Ok(())
}

/// The call's time and arguments, gathered in per-CPU scratch, not on the BPF stack: with the
/// Python frames walk the entry calls, a 336-byte frame took it past the 512 bytes that 6.1's
/// verifier allows across calls (each frame rounded up to 32). With the stack pointer at
/// entry, above which arguments past the sixth sit.
#[inline(always)]
fn gather_args(ctx: &ProbeContext, cookie: ProbeCookie) -> Option<(&'static mut Pending, u64)> {
    let pending = ENTRY_SCRATCH.get_ptr_mut(0)?;
    // SAFETY: per-CPU scratch, used by this program alone while it runs (uprobe programs run
    // with preemption off and do not nest on a CPU).
    let pending = unsafe { &mut *pending };
    // SAFETY: no preconditions.
    pending.ts_ns = unsafe { bpf_ktime_get_ns() };
    pending.args = [0; MAX_ARGS];
    for (index, slot) in pending.args.iter_mut().take(6).enumerate() {
        *slot = ctx.arg::<u64>(index).unwrap_or(0);
    }
    let sp = stack_pointer(ctx);
    for index in 0..cookie.stack_args() {
        let at = sp + 8 * (index as u64 + 1);
        // SAFETY: a user read; failure leaves the argument 0.
        pending.args[6 + index] = unsafe { bpf_probe_read_user(at as *const u64) }.unwrap_or(0);
    }
    Some((pending, sp))
}

fn try_api_call_return(ctx: &RetProbeContext) -> Result<(), i64> {
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
    // The layer's depth comes down first: whatever happens to the event, the thread has left.
    let mut flags = 0u16;
    leave_layer(tid, cookie, &mut flags);
    let Some(mut entry) = EVENTS.reserve::<Event>(0) else {
        let _ = PENDING.remove(key);
        bump(counter::RINGBUF_FULL);
        return Ok(());
    };
    let event = entry.as_mut_ptr();
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
    // SAFETY: as above: the reserved record.
    let out = unsafe { read_out_params(&mut (*event).args, cookie, &mut flags) };
    // SAFETY: as above: the reserved record.
    let args = unsafe { &(*event).args };
    if cookie.layer() == Layer::Libc as u8 {
        track_libc_block(tgid, cookie, args, ctx.ret::<u64>(), out);
    }
    let site = if cookie.want_site() {
        site_with_stack(ctx)
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

/// This thread leaves a call of `cookie`'s layer: the layer's depth comes down (a driver
/// allocation call's too), and the call is flagged nested when it ran inside another layer's
/// call (a runtime call inside hotpin's allocator, a driver call inside the runtime's).
#[inline(always)]
fn leave_layer(tid: u32, cookie: ProbeCookie, flags: &mut u16) {
    let Some(depth) = DEPTH.get_ptr_mut(tid) else {
        return;
    };
    // SAFETY: the entry belongs to this thread, which is running this program.
    let depth = unsafe { &mut *depth };
    let layer = cookie.layer();
    if layer == Layer::Allocator as u8 {
        depth.allocator = depth.allocator.saturating_sub(1);
    } else if layer == Layer::Runtime as u8 {
        depth.runtime = depth.runtime.saturating_sub(1);
        if depth.allocator > 0 {
            *flags |= FLAG_NESTED;
        }
    } else {
        if layer == Layer::Driver as u8 && cookie.want_site() {
            depth.driver_alloc = depth.driver_alloc.saturating_sub(1);
        }
        if depth.runtime > 0 || depth.allocator > 0 {
            *flags |= FLAG_NESTED;
        }
    }
}

/// The out-parameters the callee wrote, read now: a second one (a pitch) replaces its
/// pointer among `args`; the first is returned (0 without one).
#[inline(always)]
fn read_out_params(args: &mut [u64; MAX_ARGS], cookie: ProbeCookie, flags: &mut u16) -> u64 {
    if let Some(index) = cookie.second_out_arg() {
        let slot = arg_slot(args, index);
        if let Some(value) = read_out_param(*slot, flags) {
            *slot = value;
        }
    }
    cookie
        .out_arg()
        .and_then(|index| read_out_param(arg_at(args, index), flags))
        .unwrap_or(0)
}

/// The call site of the call returning now, with its user stack's id: the same stack gets
/// the same id, so a loop allocating from one place costs one entry; a full map (or a hash
/// collision) just leaves the stack out.
#[inline(always)]
fn site_with_stack(ctx: &RetProbeContext) -> CallSiteRaw {
    let mut site = call_site(ctx);
    if let Ok(id) = ctx.get_stackid(&STACKS, BPF_F_USER_STACK.into()) {
        keep_stack_frames(ctx, id as u32);
        site.stack = id as u32 + 1;
    }
    site
}

/// The value an out-parameter at `at` holds now that the callee wrote it; `None` for a null
/// pointer, and for an unreadable one, which is flagged.
fn read_out_param(at: u64, flags: &mut u16) -> Option<u64> {
    if at == 0 {
        return None;
    }
    // SAFETY: a user read of the out-parameter the callee just wrote.
    match unsafe { bpf_probe_read_user(at as *const u64) } {
        Ok(value) => Some(value),
        Err(_) => {
            *flags |= FLAG_OUT_UNREADABLE;
            None
        }
    }
}
