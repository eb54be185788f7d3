//! Driver copies, probed at entry only, counted per thread into runs of identical copies
//! ([`CopyRuns`]) and sent in order before the thread's next other event.

use aya_ebpf::{
    helpers::bpf_probe_read_user,
    macros::map,
    maps::{HashMap, PerCpuArray},
};
use tracer_common::{
    COPY_RUN_SLOTS, CallSiteRaw, CopyRuns, Event, FLAG_AT_ENTRY, FLAG_NESTED, ProbeCookie,
};

use crate::{
    page_faults::send_fault_run,
    shared::{MAX_PENDING, Pending, header, inside_probed_call, send_event},
};

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
pub(crate) fn send_at_entry(cookie: ProbeCookie, tgid: u32, tid: u32, pending: &Pending, sp: u64) {
    let mut flags = FLAG_AT_ENTRY;
    if inside_probed_call(tid) {
        flags |= FLAG_NESTED;
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
pub(crate) fn send_copy_run(tid: u32) {
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
