//! Where CPython keeps what names the Python line of an allocation: the interpreter's threads,
//! their frames and the frames' code objects, per version. The kernel side walks a thread's
//! frames with [`Offsets`] (in the `PYTHON` map, per process); the agent and hotpin's
//! interposer read code objects with [`Layout`].
//!
//! The layouts are CPython's own (`Include/internal/pycore_runtime.h`, `pycore_interp.h`,
//! `pycore_frame.h`, `cpython/pystate.h`, `cpython/code.h`). `bench/gpu/python/layout_check.py`
//! finds every field but the frame's owner by its value in a live interpreter; it agreed with
//! these tables on CPython 3.11.7 and 3.12.1 (pyenv builds) and on the GPU machine's 3.12, and
//! a test compares it with the build machine's `python3`. 3.10 and earlier (no `Py_Version`,
//! other frames) and 3.13 and later (frames moved again; it publishes `_Py_DebugOffsets`, not
//! read yet) have none.

/// Frames kept per allocation, innermost first: one [`crate::Event`]'s arguments.
pub const PY_FRAMES: usize = crate::MAX_ARGS;
/// Threads of one interpreter looked through for the calling one.
pub const MAX_THREADS: usize = 32;
/// Frames stepped through (shim frames of the C stack included) for [`PY_FRAMES`].
pub const MAX_STEPS: usize = 12;
/// The bytes of a frame read at once: every frame field of every [`Layout`] is in them.
pub const FRAME_BYTES: usize = 72;

/// One CPython version's layout: byte offsets of the fields read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub major: u8,
    pub minor: u8,
    /// `_PyRuntime.interpreters.head`.
    pub runtime_interp_head: u32,
    /// `PyInterpreterState.threads.head`.
    pub interp_threads_head: u32,
    /// `PyThreadState.next` and `.native_thread_id`.
    pub tstate_next: u32,
    pub tstate_native_thread_id: u32,
    /// `PyThreadState.cframe`, then `_PyCFrame.current_frame`.
    pub tstate_cframe: u32,
    pub cframe_current: u32,
    /// `_PyInterpreterFrame` fields.
    pub frame_code: u32,
    pub frame_previous: u32,
    pub frame_prev_instr: u32,
    pub frame_owner: u32,
    /// The owner of frames the C stack owns (3.12's shim frames): skipped. `None` in 3.11.
    pub owner_cstack: Option<u8>,
    /// `PyCodeObject` fields.
    pub code_firstlineno: u32,
    pub code_filename: u32,
    pub code_qualname: u32,
    pub code_linetable: u32,
    pub code_adaptive: u32,
    /// `PyBytesObject.ob_sval`.
    pub bytes_data: u32,
    /// A compact ASCII `str`: where its bytes start (`sizeof(PyASCIIObject)`), its length, its
    /// state word.
    pub ascii_data: u32,
    pub ascii_length: u32,
    pub ascii_state: u32,
}

pub const PY311: Layout = Layout {
    major: 3,
    minor: 11,
    runtime_interp_head: 40,
    interp_threads_head: 16,
    tstate_next: 8,
    tstate_native_thread_id: 160,
    tstate_cframe: 56,
    cframe_current: 8,
    frame_code: 32,
    frame_previous: 48,
    frame_prev_instr: 56,
    frame_owner: 69,
    owner_cstack: None,
    code_firstlineno: 72,
    code_filename: 112,
    code_qualname: 128,
    code_linetable: 136,
    code_adaptive: 184,
    bytes_data: 32,
    ascii_data: 48,
    ascii_length: 16,
    ascii_state: 32,
};

pub const PY312: Layout = Layout {
    major: 3,
    minor: 12,
    runtime_interp_head: 40,
    interp_threads_head: 72,
    tstate_next: 8,
    tstate_native_thread_id: 144,
    tstate_cframe: 56,
    cframe_current: 0,
    frame_code: 0,
    frame_previous: 8,
    frame_prev_instr: 56,
    frame_owner: 70,
    owner_cstack: Some(3),
    code_firstlineno: 68,
    code_filename: 112,
    code_qualname: 128,
    code_linetable: 136,
    code_adaptive: 192,
    bytes_data: 32,
    ascii_data: 40,
    ascii_length: 16,
    ascii_state: 32,
};

// Every frame field the kernel side reads is within the first FRAME_BYTES of a frame.
const _: () = {
    let mut i = 0;
    let layouts = [PY311, PY312];
    while i < layouts.len() {
        let l = &layouts[i];
        assert!(l.frame_code as usize + 8 <= FRAME_BYTES);
        assert!(l.frame_previous as usize + 8 <= FRAME_BYTES);
        assert!(l.frame_prev_instr as usize + 8 <= FRAME_BYTES);
        assert!((l.frame_owner as usize) < FRAME_BYTES);
        i += 1;
    }
};

/// The layout of CPython `major.minor`, if there is one.
pub const fn layout(major: u8, minor: u8) -> Option<&'static Layout> {
    match (major, minor) {
        (3, 11) => Some(&PY311),
        (3, 12) => Some(&PY312),
        _ => None,
    }
}

/// What the kernel side needs to find a thread's frames in one process (the `PYTHON` map's
/// value, by tgid): absolute addresses, the offsets of its [`Layout`] that lead to the
/// current frame, and its version (the frame fields are read with the version's layout built
/// in: constant offsets into one read of the frame).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offsets {
    /// The address of `_PyRuntime.interpreters.head` in the process.
    pub interp_head_at: u64,
    /// The address of `PyCode_Type`: a frame whose code object is of another type ends the
    /// walk.
    pub code_type: u64,
    pub interp_threads_head: u32,
    pub tstate_next: u32,
    pub tstate_native_thread_id: u32,
    pub tstate_cframe: u32,
    pub cframe_current: u32,
    /// CPython 3.`minor`: picks the frame layout ([`PY311`], [`PY312`]).
    pub minor: u32,
}

impl Offsets {
    pub const fn new(layout: &Layout, runtime: u64, code_type: u64) -> Self {
        Self {
            interp_head_at: runtime + layout.runtime_interp_head as u64,
            code_type,
            interp_threads_head: layout.interp_threads_head,
            tstate_next: layout.tstate_next,
            tstate_native_thread_id: layout.tstate_native_thread_id,
            tstate_cframe: layout.tstate_cframe,
            cframe_current: layout.cframe_current,
            minor: layout.minor as u32,
        }
    }
}

/// Bits of a packed frame that hold the code object's address (user addresses are below
/// 2^47); the rest hold the instruction, in code units from the code's first.
const CODE_BITS: u32 = 48;

/// A frame as the kernel side sends it: the code object's address and the instruction the
/// frame is at, in code units (saturated at 0xffff).
pub const fn pack(code: u64, instruction: u64) -> u64 {
    let instruction = if instruction > 0xffff {
        0xffff
    } else {
        instruction
    };
    (code & ((1 << CODE_BITS) - 1)) | (instruction << CODE_BITS)
}

/// A packed frame's code object address and instruction (code units).
pub const fn unpack(frame: u64) -> (u64, u64) {
    (frame & ((1 << CODE_BITS) - 1), frame >> CODE_BITS)
}
