//! The Python lines of an allocation: in a CPython process (the agent put its
//! [`Offsets`] in `PYTHON`), the entry of an allocating call sends the thread's interpreter
//! frames, innermost first, as one [`EventKind::PythonFrames`] event before the call's own.
//!
//! The thread's state is found by walking the interpreter's thread list for the one whose
//! native thread id is this thread's, then kept per thread: no thread-local storage is read,
//! and it works while the thread has released the GIL (PyTorch's operators do). From it, the
//! current frame and each previous one give a code object and the instruction the frame is
//! at, packed into one argument each ([`python::pack`]). What a code object says (names, first
//! line, location table) is sent too, the first time a frame names it ([`PythonCode`]), so that
//! a process that exits before the agent reads the ring keeps its lines. A chain that leaves
//! the expected shapes (a code object of another type, an unreadable pointer) ends the walk
//! with what was read.

use aya_ebpf::{
    bindings::BPF_RB_NO_WAKEUP,
    helpers::{bpf_probe_read_user, bpf_probe_read_user_str_bytes, generated},
    macros::map,
    maps::{HashMap, LruHashMap, PerCpuArray},
};
use tracer_common::{
    Event, EventKind, MAX_TARGETS, counter,
    python::{
        CODE_HEAD_BYTES, CODE_TABLE_BYTES, FRAME_BYTES, FRAMES_311, Layout, MAX_STEPS, MAX_THREADS,
        NO_CFRAME, Offsets, PY_FRAMES, PY311, PY312, PythonCode, pack, unpack,
    },
};

use crate::shared::{EVENTS, MAX_PENDING, bump, header, now};

/// A frame's fields as words.
const FRAME_WORDS: usize = FRAME_BYTES / 8;

/// How to read each CPython process's frames, by tgid (set by the agent).
#[map]
static PYTHON: HashMap<u32, Offsets> = HashMap::with_max_entries(MAX_TARGETS, 0);

/// Each thread's `PyThreadState`, once found: checked by its native thread id at each use
/// (one read) instead of walking the thread list again.
#[map]
static THREAD_STATES: LruHashMap<u32, u64> = LruHashMap::with_max_entries(MAX_PENDING, 0);

/// Where a [`PythonCode`] record is made before it is sent, as long as its table: one per CPU
/// (a record is too large for the program's stack).
#[map]
static CODE_SCRATCH: PerCpuArray<PythonCode> = PerCpuArray::with_max_entries(1, 0);

/// The frames of the frames event being sent, where [`send_new_codes`] reads them (one per
/// CPU).
#[map]
static FRAMES_SCRATCH: PerCpuArray<[u64; PY_FRAMES]> = PerCpuArray::with_max_entries(1, 0);

/// Code objects already sent in a [`PythonCode`] record, by (tgid, address): the agent keeps
/// what each one says, so none is sent again while it is kept here.
#[map]
static CODES_SENT: LruHashMap<CodeKey, u8> = LruHashMap::with_max_entries(MAX_PENDING, 0);

#[repr(C)]
#[derive(Clone, Copy)]
struct CodeKey {
    tgid: u32,
    _pad: u32,
    code: u64,
}

/// Reads the word at `at` in the traced process; `None` where it cannot be read.
fn word(at: u64) -> Option<u64> {
    // SAFETY: a user read; failure is an error value, not a fault.
    unsafe { bpf_probe_read_user(at as *const u64) }.ok()
}

/// Sends this thread's Python frames, if its process runs CPython the agent recognised, then
/// what their code objects say where it was not sent before; `flags` says what for
/// (`FLAG_FOR_MAPPING`, or 0 for an allocation call). Inlined, so that the two are two calls
/// from the program, not one inside the other: as a chain they passed the 512 bytes of stack
/// Linux 6.1 and 6.12 allow one.
#[inline(always)]
pub(crate) fn send_python_lines(tgid: u32, tid: u32, flags: u16) {
    let count = send_python_frames(tgid, tid, flags);
    if count > 0 {
        send_new_codes(tgid, count);
    }
}

/// Sends this thread's Python frames, and leaves them in `FRAMES_SCRATCH`; how many.
#[inline(never)]
fn send_python_frames(tgid: u32, tid: u32, flags: u16) -> u32 {
    // SAFETY: the value is copied out at once; the agent only replaces it whole.
    let Some(offsets) = (unsafe { PYTHON.get(tgid) }).copied() else {
        return 0;
    };
    let Some(mut entry) = EVENTS.reserve::<Event>(0) else {
        bump(counter::RINGBUF_FULL);
        return 0;
    };
    let event = entry.as_mut_ptr();
    // SAFETY: `event` is the reserved record, ours until submitted; every field is written.
    let count = unsafe {
        (*event).header = header(EventKind::PythonFrames as u16, flags, tgid, tid, now());
        (*event).args = [0; PY_FRAMES];
        (*event).out = 0;
        (*event).caller = 0;
        (*event).duration_ns = 0;
        (*event).site = Default::default();
        let args = &mut (*event).args;
        // Two frame layouts: 3.11's, and 3.12's (which 3.13 keeps).
        let count = match this_thread_state(&offsets, tid) {
            Some(tstate) if offsets.frames == FRAMES_311 => walk::<Py311>(&offsets, tstate, args),
            Some(tstate) => walk::<Py312>(&offsets, tstate, args),
            None => 0,
        };
        (*event).ret = count as u64;
        match FRAMES_SCRATCH.get_ptr_mut(0) {
            Some(scratch) => {
                // Word by word, volatile: a copy the compiler makes a call to memmove (then
                // memcpy), more frames in the chain of calls the kernel bounds.
                for (index, &frame) in args.iter().enumerate() {
                    core::ptr::write_volatile((*scratch).as_mut_ptr().add(index), frame);
                }
                count as u32
            }
            None => 0,
        }
    };
    // The agent needs the frames only with the call or mapping that follows them; a code
    // record (sent next) wakes it where it is new.
    entry.submit(BPF_RB_NO_WAKEUP.into());
    count
}

/// The `PyThreadState` of thread `tid` in the process's first interpreter: the one found
/// before if it is still this thread's, else found in the thread list.
fn this_thread_state(offsets: &Offsets, tid: u32) -> Option<u64> {
    let native = u64::from(offsets.tstate_native_thread_id);
    // SAFETY: the value is copied out at once.
    if let Some(&tstate) = unsafe { THREAD_STATES.get(tid) }
        && word(tstate + native) == Some(u64::from(tid))
    {
        return Some(tstate);
    }
    let interpreter = word(offsets.interp_head_at)?;
    let mut tstate = word(interpreter + u64::from(offsets.interp_threads_head))?;
    for _ in 0..MAX_THREADS {
        if tstate == 0 {
            return None;
        }
        if word(tstate + native)? == u64::from(tid) {
            let _ = THREAD_STATES.insert(tid, tstate, 0);
            return Some(tstate);
        }
        tstate = word(tstate + u64::from(offsets.tstate_next))?;
    }
    None
}

/// The thread's current frame: through its `_PyCFrame`, or held by the thread state (3.13).
fn current_frame(offsets: &Offsets, tstate: u64) -> Option<u64> {
    let held = word(tstate + u64::from(offsets.tstate_cframe))?;
    if offsets.cframe_current == NO_CFRAME {
        return Some(held);
    }
    word(held + u64::from(offsets.cframe_current))
}

/// A frame layout as constants, so that each field is read from the frame's words at a
/// constant index: the verifier refuses a stack read at an offset it cannot bound, and the
/// compiler moves any bounding of a variable one out of its reach.
trait FrameLayout {
    const LAYOUT: Layout;
    const CODE: usize = Self::LAYOUT.frame_code as usize / 8;
    const PREVIOUS: usize = Self::LAYOUT.frame_previous as usize / 8;
    const PREV_INSTR: usize = Self::LAYOUT.frame_prev_instr as usize / 8;
    const OWNER: usize = Self::LAYOUT.frame_owner as usize / 8;
    const OWNER_SHIFT: u32 = (Self::LAYOUT.frame_owner % 8) * 8;
    const CSTACK: Option<u8> = Self::LAYOUT.owner_cstack;
}

struct Py311;
impl FrameLayout for Py311 {
    const LAYOUT: Layout = PY311;
}

struct Py312;
impl FrameLayout for Py312 {
    const LAYOUT: Layout = PY312;
}

/// Packs the frames of `tstate` into `out`, innermost first; returns how many. Each frame's
/// fields are read in one go (its first [`FRAME_BYTES`]), its code object's type in another.
fn walk<L: FrameLayout>(offsets: &Offsets, tstate: u64, out: &mut [u64; PY_FRAMES]) -> usize {
    let Some(mut frame) = current_frame(offsets, tstate) else {
        return 0;
    };
    let mut count = 0;
    for _ in 0..MAX_STEPS {
        if frame == 0 || count >= PY_FRAMES {
            break;
        }
        // SAFETY: a user read into a value of ours; failure is an error value.
        let Ok(fields) = (unsafe { bpf_probe_read_user(frame as *const [u64; FRAME_WORDS]) })
        else {
            break;
        };
        // A shim frame of the C stack: skipped before its code is looked at (3.13 gives it
        // None, not a code object).
        let owner = (fields[L::OWNER] >> L::OWNER_SHIFT) as u8;
        if L::CSTACK != Some(owner) {
            let code = fields[L::CODE];
            if code == 0 || word(code + 8) != Some(offsets.code_type) {
                break;
            }
            let first = code + u64::from(offsets.code_adaptive);
            let units = fields[L::PREV_INSTR].saturating_sub(first) / 2;
            if let Some(slot) = out.get_mut(count) {
                *slot = pack(code, units);
            }
            count += 1;
        }
        frame = fields[L::PREVIOUS];
    }
    count
}

/// Sends what each code object of the first `count` frames in `FRAMES_SCRATCH` says, where
/// it was not sent before. Not inlined, and called by the program beside the frames (see
/// [`send_python_lines`]); its arguments are numbers, the only kind Linux 6.1 takes for such
/// a function (its offsets and frames are read from maps).
#[inline(never)]
fn send_new_codes(tgid: u32, count: u32) {
    // SAFETY: read only, while this program runs.
    let (Some(offsets), Some(frames)) = (unsafe { PYTHON.get(tgid) }, FRAMES_SCRATCH.get(0)) else {
        return;
    };
    for (index, &frame) in frames.iter().enumerate() {
        if index as u32 >= count {
            break;
        }
        let key = CodeKey {
            tgid,
            _pad: 0,
            code: unpack(frame).0,
        };
        // SAFETY: only tested for presence.
        if unsafe { CODES_SENT.get(key) }.is_none() && send_code(offsets, tgid, key.code) {
            let _ = CODES_SENT.insert(key, 1, 0);
        }
    }
}

/// Sends what `code` says (its names, first line and location table) as one [`PythonCode`]
/// record; whether it was sent. A name that is not a compact ASCII string shorter than the
/// record's room, or a first line that cannot be read, leaves the file name empty, and a
/// table longer than the record holds is cut: the agent reads those from the process while
/// it lives. A full ring sends nothing and loses nothing else (the agent reads the code from
/// the process; a later frame tries again): it is not counted as a lost event.
#[inline(always)]
fn send_code(offsets: &Offsets, tgid: u32, code: u64) -> bool {
    let Some(record) = CODE_SCRATCH.get_ptr_mut(0) else {
        return false;
    };
    // SAFETY: this CPU's scratch record, ours while this program runs; every field is written
    // (the names and the table from their start, as far as they are read; the agent reads no
    // further than the NUL and `table_len`), and only the record's head and the table's
    // `table_len` bytes are sent.
    let sent = unsafe {
        (*record).header = header(EventKind::PythonCode as u16, 0, tgid, 0, now());
        (*record).code = code;
        let first_line = word(code + u64::from(offsets.code_firstlineno));
        (*record).first_line = first_line.unwrap_or(0) as i32;
        ascii(
            offsets,
            code + u64::from(offsets.code_filename),
            &mut (*record).file,
        );
        if first_line.is_none() {
            (*record).file[0] = 0;
        }
        ascii(
            offsets,
            code + u64::from(offsets.code_qualname),
            &mut (*record).function,
        );
        (*record).table_len = 0;
        (*record).table_size = 0;
        if let Some(table) = word(code + u64::from(offsets.code_linetable))
            && let Some(size) = word(table + 16)
        {
            (*record).table_size = size;
            let data = (table + u64::from(offsets.bytes_data)) as *const _;
            let into = (*record).table.as_mut_ptr().cast();
            // A length the verifier can bound by its bits: a table as long as the room or
            // longer is cut one byte short of it, so that a mask bounds every length.
            let read = if size >= CODE_TABLE_BYTES as u64 {
                CODE_TABLE_BYTES as u32 - 1
            } else {
                (size & (CODE_TABLE_BYTES as u64 - 1)) as u32
            };
            if generated::bpf_probe_read_user(into, read, data) == 0 {
                (*record).table_len = read;
            }
        }
        // Bounded by a mask, which the verifier carries through the addition (a comparison's
        // bound it does not, on 6.1).
        let length = CODE_HEAD_BYTES + ((*record).table_len as usize & (CODE_TABLE_BYTES - 1));
        let bytes = core::slice::from_raw_parts(record.cast::<u8>(), length);
        EVENTS.output::<[u8]>(bytes, 0)
    };
    sent.is_ok()
}

/// Reads the compact ASCII `str` whose address is at `field` into `out`, NUL-terminated;
/// leaves `out` empty for any other string, one too long for `out` (a cut name would be taken
/// for a whole one), or an unreadable one.
#[inline(always)]
fn ascii(offsets: &Offsets, field: u64, out: &mut [u8]) {
    out[0] = 0;
    let Some(object) = word(field) else {
        return;
    };
    // Compact and ASCII: bits 5 and 6 of the state (CPython's `Include/cpython/unicodeobject.h`).
    match word(object + u64::from(offsets.ascii_state)) {
        Some(state) if (state >> 5) & 3 == 3 => {}
        _ => return,
    }
    match word(object + u64::from(offsets.ascii_length)) {
        Some(length) if length < out.len() as u64 => {}
        _ => return,
    }
    // SAFETY: a user read into `out`, NUL-terminated and bounded by its length.
    if unsafe {
        bpf_probe_read_user_str_bytes((object + u64::from(offsets.ascii_data)) as *const u8, out)
    }
    .is_err()
    {
        out[0] = 0;
    }
}
