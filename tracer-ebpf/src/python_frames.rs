//! The Python lines of an allocation: in a CPython process (the agent put its
//! [`Offsets`] in `PYTHON`), the entry of an allocating call sends the thread's interpreter
//! frames, innermost first, as one [`EventKind::PythonFrames`] event before the call's own.
//!
//! The thread's state is found by walking the interpreter's thread list for the one whose
//! native thread id is this thread's: no thread-local storage is read, and it works while the
//! thread has released the GIL (PyTorch's operators do). From it, the current frame and each
//! previous one give a code object and the instruction the frame is at, packed into one
//! argument each ([`python::pack`]). The agent reads names and lines from the code objects,
//! which outlive the call. A chain that leaves the expected shapes (a code object of another
//! type, an unreadable pointer) ends the walk with what was read.

use aya_ebpf::{
    bindings::BPF_RB_FORCE_WAKEUP, helpers::bpf_probe_read_user, macros::map, maps::HashMap,
};
use tracer_common::{
    Event, EventKind, MAX_TARGETS, counter,
    python::{MAX_STEPS, MAX_THREADS, Offsets, PY_FRAMES, pack},
};

use crate::shared::{EVENTS, bump, header, now};

/// How to read each CPython process's frames, by tgid (set by the agent).
#[map]
static PYTHON: HashMap<u32, Offsets> = HashMap::with_max_entries(MAX_TARGETS, 0);

/// Reads the word at `at` in the traced process; `None` where it cannot be read.
fn word(at: u64) -> Option<u64> {
    // SAFETY: a user read; failure is an error value, not a fault.
    unsafe { bpf_probe_read_user(at as *const u64) }.ok()
}

/// Sends this thread's Python frames, if its process runs CPython the agent recognised.
pub(crate) fn send_python_frames(tgid: u32, tid: u32) {
    // SAFETY: the value is copied out at once; the agent only replaces it whole.
    let Some(offsets) = (unsafe { PYTHON.get(tgid) }).copied() else {
        return;
    };
    let Some(mut entry) = EVENTS.reserve::<Event>(0) else {
        bump(counter::RINGBUF_FULL);
        return;
    };
    let event = entry.as_mut_ptr();
    // SAFETY: `event` is the reserved record, ours until submitted; every field is written.
    unsafe {
        (*event).header = header(EventKind::PythonFrames as u16, 0, tgid, tid, now());
        (*event).args = [0; PY_FRAMES];
        (*event).out = 0;
        (*event).caller = 0;
        (*event).duration_ns = 0;
        (*event).site = Default::default();
        (*event).ret = match this_thread_state(&offsets, tid) {
            Some(tstate) => walk(&offsets, tstate, &mut (*event).args) as u64,
            None => 0,
        };
    }
    // The agent reads the code objects while the process lives: wake it now.
    entry.submit(BPF_RB_FORCE_WAKEUP.into());
}

/// The `PyThreadState` of thread `tid` in the process's first interpreter.
fn this_thread_state(offsets: &Offsets, tid: u32) -> Option<u64> {
    let interpreter = word(offsets.interp_head_at)?;
    let mut tstate = word(interpreter + u64::from(offsets.interp_threads_head))?;
    for _ in 0..MAX_THREADS {
        if tstate == 0 {
            return None;
        }
        if word(tstate + u64::from(offsets.tstate_native_thread_id))? == u64::from(tid) {
            return Some(tstate);
        }
        tstate = word(tstate + u64::from(offsets.tstate_next))?;
    }
    None
}

/// Packs the frames of `tstate` into `out`, innermost first; returns how many.
fn walk(offsets: &Offsets, tstate: u64, out: &mut [u64; PY_FRAMES]) -> usize {
    let Some(cframe) = word(tstate + u64::from(offsets.tstate_cframe)) else {
        return 0;
    };
    let Some(mut frame) = word(cframe + u64::from(offsets.cframe_current)) else {
        return 0;
    };
    let mut count = 0;
    for _ in 0..MAX_STEPS {
        if frame == 0 || count >= PY_FRAMES {
            break;
        }
        let Some(code) = word(frame + u64::from(offsets.frame_code)) else {
            break;
        };
        if code == 0 || word(code + 8) != Some(offsets.code_type) {
            break;
        }
        // SAFETY: a user read of one byte; failure is an error value.
        let owner =
            unsafe { bpf_probe_read_user((frame + u64::from(offsets.frame_owner)) as *const u8) }
                .map_or(0, u32::from);
        if owner != offsets.owner_cstack {
            let first = code + u64::from(offsets.code_adaptive);
            let at = word(frame + u64::from(offsets.frame_prev_instr)).unwrap_or(first);
            let units = at.saturating_sub(first) / 2;
            if let Some(slot) = out.get_mut(count) {
                *slot = pack(code, units);
            }
            count += 1;
        }
        let Some(previous) = word(frame + u64::from(offsets.frame_previous)) else {
            break;
        };
        frame = previous;
    }
    count
}
