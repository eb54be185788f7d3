//! User page faults of a target, counted in runs of consecutive pages.

use aya_ebpf::{
    helpers::bpf_ktime_get_ns,
    macros::{map, tracepoint},
    maps::LruHashMap,
    programs::TracePointContext,
};
use tracer_common::{EventKind, FaultRun, MAX_FAULT_RUN, PAGE_BYTES, config, counter, field};

use crate::shared::{CONFIG, MAX_PENDING, read_field, send_short, traced_thread};

/// Each thread's run of page faults on consecutive pages not yet sent.
#[map]
static FAULT_RUNS: LruHashMap<u32, FaultRun> = LruHashMap::with_max_entries(MAX_PENDING, 0);

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
pub(crate) fn send_fault_run(tid: u32) {
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
