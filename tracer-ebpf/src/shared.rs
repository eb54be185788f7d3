//! What every program shares: the ring buffer and the one event envelope sent through it,
//! the target filter, calls in flight, per-thread nesting, counters, settings and tracepoint
//! field offsets, and the helpers that stamp and send events.

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns},
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
    programs::TracePointContext,
};
use tracer_common::{Event, EventHeader, EventKind, MAX_ARGS, MAX_TARGETS, config, counter, field};

/// Default ring size; the agent may set another with `EbpfLoader::map_max_entries`.
const RING_BYTES: u32 = 8 << 20;
/// Wake the reader at once when this much is waiting; otherwise it drains on its own timer.
pub(crate) const WAKEUP_BYTES: u64 = 1 << 20;
/// Calls in flight at once across all traced threads.
pub(crate) const MAX_PENDING: u32 = 16384;

#[map]
pub(crate) static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BYTES, 0);

/// Processes to trace (tgid -> unused); every program returns at once for any other.
#[map]
pub(crate) static TARGETS: HashMap<u32, u32> = HashMap::with_max_entries(MAX_TARGETS, 0);

/// Calls entered and not yet returned, by (thread, kind).
#[map]
pub(crate) static PENDING: LruHashMap<PendingKey, Pending> =
    LruHashMap::with_max_entries(MAX_PENDING, 0);

/// How many allocator, runtime and driver allocation calls each thread is inside.
#[map]
pub(crate) static DEPTH: LruHashMap<u32, Depth> = LruHashMap::with_max_entries(MAX_PENDING, 0);

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct Depth {
    pub(crate) allocator: u32,
    pub(crate) runtime: u32,
    /// The driver's allocation calls (`cuMemHostAlloc`, ...): what the driver maps inside one
    /// is that allocation, and the Python lines its entry sent are its own.
    pub(crate) driver_alloc: u32,
}

/// Whether this thread is inside a probed call (the runtime's, an allocator's, or the
/// driver's allocation call): what it does then (memory it maps, copies it makes) is that
/// call's, nested.
pub(crate) fn inside_probed_call(tid: u32) -> bool {
    DEPTH.get_ptr(tid).is_some_and(|depth| {
        // SAFETY: this thread's entry, read while this thread runs this program.
        let depth = unsafe { &*depth };
        depth.runtime > 0 || depth.allocator > 0 || depth.driver_alloc > 0
    })
}

/// This thread's depth counters, created at zero if missing.
pub(crate) fn depth_of(tid: u32) -> Option<*mut Depth> {
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
pub(crate) static CONFIG: Array<u64> = Array::with_max_entries(config::COUNT, 0);

/// Byte offsets of the tracepoint record fields the programs read (`field::*` indexes), set by
/// the agent from the running kernel's format files before anything is attached: no kernel's
/// layout is built in.
#[map]
pub(crate) static FIELDS: Array<u32> = Array::with_max_entries(field::COUNT, 0);

/// Reads field `index` of a tracepoint record at the offset the agent found for it. An offset
/// of 0 (the common header's first field) means the agent found none: an error, not a read.
pub(crate) fn read_field<T>(ctx: &TracePointContext, index: u32) -> Result<T, i64> {
    let offset = FIELDS.get(index).copied().unwrap_or(0);
    if offset == 0 {
        return Err(0);
    }
    // SAFETY: the offset of this field in this tracepoint's record, from its format file
    // (checked there for the size of `T`); the read is bounds-checked by the helper.
    unsafe { ctx.read_at(offset as usize) }.map_err(i64::from)
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct PendingKey {
    pub(crate) tid: u32,
    pub(crate) kind: u32,
}

/// Room to gather a call's [`Pending`] arguments outside the BPF stack.
#[map]
pub(crate) static ENTRY_SCRATCH: PerCpuArray<Pending> = PerCpuArray::with_max_entries(1, 0);

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Pending {
    pub(crate) ts_ns: u64,
    pub(crate) args: [u64; MAX_ARGS],
}

/// `args[index]` for an index taken from an attach cookie or a layout: masked to the array,
/// not checked (a cookie holds its indexes in 3 bits, `ProbeCookie`; the registry's tests
/// check every layout's). LLVM tests a checked index as `index - 1` in one register and reads
/// with another; the verifiers of 6.1 and 6.12 do not carry that bound over (6.18's does),
/// and refused the read once the arguments sat in a map value, whose size they check exactly.
pub(crate) fn arg_at(args: &[u64; MAX_ARGS], index: usize) -> u64 {
    args[index & (MAX_ARGS - 1)]
}

/// [`arg_at`]'s slot, to write.
pub(crate) fn arg_slot(args: &mut [u64; MAX_ARGS], index: usize) -> &mut u64 {
    &mut args[index & (MAX_ARGS - 1)]
}

const _: () = assert!(MAX_ARGS.is_power_of_two());

/// The calling thread as (tgid, tid), if its process is traced.
pub(crate) fn traced_thread() -> Option<(u32, u32)> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: the value is only tested for presence.
    unsafe { TARGETS.get(tgid) }.map(|_| (tgid, pid_tgid as u32))
}

/// The header of an event of `kind` from the current thread, stamped now.
pub(crate) fn header(kind: u16, flags: u16, tgid: u32, tid: u32, ts_ns: u64) -> EventHeader {
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

pub(crate) fn bump(index: u32) {
    bump_by(index, 1);
}

pub(crate) fn bump_by(index: u32, count: u64) {
    if let Some(slot) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU.
        unsafe { *slot += count };
    }
}

pub(crate) fn now() -> u64 {
    // SAFETY: no preconditions.
    unsafe { bpf_ktime_get_ns() }
}

/// Sends an event of `kind` from (tgid, tid) at `ts_ns` with two arguments, the rest zero;
/// a full ring is counted in the `lost` counter.
pub(crate) fn send_short(
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

/// Copies `event` into the ring; a full ring counts `calls` lost (a run stands for many).
pub(crate) fn send_event(event: &Event, calls: u64) {
    let Some(mut entry) = EVENTS.reserve::<Event>(0) else {
        bump_by(counter::RINGBUF_FULL, calls);
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
