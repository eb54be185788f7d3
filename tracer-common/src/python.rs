//! Where CPython keeps what names the Python line of an allocation: the interpreter's threads,
//! their frames and the frames' code objects, per version. The kernel side walks a thread's
//! frames with [`Offsets`] (in the `PYTHON` map, per process); the agent and hotpin's
//! interposer read code objects with [`Layout`].
//!
//! The layouts are CPython's own (`Include/internal/pycore_runtime.h`, `pycore_interp.h`,
//! `pycore_frame.h`, `cpython/pystate.h`, `cpython/code.h`). `bench/gpu/python/layout_check.py`
//! finds every field but the frame's owner by its value in a live interpreter; it agreed with
//! these tables on CPython 3.11.7, 3.12.1 and 3.13.0 (pyenv builds) and on the GPU machine's
//! 3.12.3, and a test compares it with the build machine's `python3`. 3.13's also agree with
//! its `_Py_DebugOffsets`. 3.10 and earlier (no `Py_Version`, other frames and line tables)
//! and 3.14 and later (not checked) have none.

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
    /// `PyThreadState.cframe`, then `_PyCFrame.current_frame` (3.11, 3.12); in 3.13, which
    /// has no `_PyCFrame`, `PyThreadState.current_frame` and `None`.
    pub tstate_cframe: u32,
    pub cframe_current: Option<u32>,
    /// `_PyInterpreterFrame` fields (`f_code`; `f_executable` in 3.13, a code object for the
    /// frames of Python functions).
    pub frame_code: u32,
    pub frame_previous: u32,
    /// `prev_instr` (3.11, 3.12), `instr_ptr` (3.13): the instruction the frame is at.
    pub frame_prev_instr: u32,
    pub frame_owner: u32,
    /// The owner of frames the C stack owns (the shim frames of 3.12 on): skipped. `None` in
    /// 3.11.
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
    cframe_current: Some(8),
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
    cframe_current: Some(0),
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

// The kernel side knows two frame layouts: 3.13's frame fields are 3.12's.
const _: () = {
    assert!(PY313.frame_code == PY312.frame_code);
    assert!(PY313.frame_previous == PY312.frame_previous);
    assert!(PY313.frame_prev_instr == PY312.frame_prev_instr);
    assert!(PY313.frame_owner == PY312.frame_owner);
    assert!(matches!(PY313.owner_cstack, Some(3)) && matches!(PY312.owner_cstack, Some(3)));
};

// Every frame field the kernel side reads is within the first FRAME_BYTES of a frame.
const _: () = {
    let mut i = 0;
    let layouts = [PY311, PY312, PY313];
    while i < layouts.len() {
        let l = &layouts[i];
        assert!(l.frame_code as usize + 8 <= FRAME_BYTES);
        assert!(l.frame_previous as usize + 8 <= FRAME_BYTES);
        assert!(l.frame_prev_instr as usize + 8 <= FRAME_BYTES);
        assert!((l.frame_owner as usize) < FRAME_BYTES);
        i += 1;
    }
};

/// 3.13's, as its `_Py_DebugOffsets` (the start of `_PyRuntime`) also gives it.
pub const PY313: Layout = Layout {
    major: 3,
    minor: 13,
    runtime_interp_head: 632,
    interp_threads_head: 7344,
    tstate_next: 8,
    tstate_native_thread_id: 160,
    tstate_cframe: 72,
    cframe_current: None,
    frame_code: 0,
    frame_previous: 8,
    frame_prev_instr: 56,
    frame_owner: 70,
    owner_cstack: Some(3),
    code_firstlineno: 68,
    code_filename: 112,
    code_qualname: 128,
    code_linetable: 136,
    code_adaptive: 200,
    bytes_data: 32,
    ascii_data: 40,
    ascii_length: 16,
    ascii_state: 32,
};

/// The layout of CPython `major.minor`, if there is one.
pub const fn layout(major: u8, minor: u8) -> Option<&'static Layout> {
    match (major, minor) {
        (3, 11) => Some(&PY311),
        (3, 12) => Some(&PY312),
        (3, 13) => Some(&PY313),
        _ => None,
    }
}

/// What the kernel side needs to find a thread's frames in one process (the `PYTHON` map's
/// value, by tgid): absolute addresses, and the offsets of its [`Layout`].
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
    /// [`NO_CFRAME`] where the thread state holds the current frame itself (3.13).
    pub cframe_current: u32,
    /// Which frame layout: [`FRAMES_311`] or [`FRAMES_312`] (3.13 keeps 3.12's).
    pub frames: u32,
    pub code_adaptive: u32,
    /// What [`PythonCode`] is read with: the code object's fields, a `bytes` object's data,
    /// and a compact ASCII `str`'s data, length and state ([`Layout`]'s).
    pub code_firstlineno: u32,
    pub code_filename: u32,
    pub code_qualname: u32,
    pub code_linetable: u32,
    pub bytes_data: u32,
    pub ascii_data: u32,
    pub ascii_length: u32,
    pub ascii_state: u32,
    pub _pad: u32,
}

/// [`Offsets::cframe_current`] of a version without `_PyCFrame`.
pub const NO_CFRAME: u32 = u32::MAX;
/// [`Offsets::frames`]: the frame layout of [`PY311`], or of [`PY312`] and [`PY313`].
pub const FRAMES_311: u32 = 11;
pub const FRAMES_312: u32 = 12;

impl Offsets {
    pub const fn new(layout: &Layout, runtime: u64, code_type: u64) -> Self {
        Self {
            interp_head_at: runtime + layout.runtime_interp_head as u64,
            code_type,
            interp_threads_head: layout.interp_threads_head,
            tstate_next: layout.tstate_next,
            tstate_native_thread_id: layout.tstate_native_thread_id,
            tstate_cframe: layout.tstate_cframe,
            cframe_current: match layout.cframe_current {
                Some(offset) => offset,
                None => NO_CFRAME,
            },
            frames: if layout.minor == 11 {
                FRAMES_311
            } else {
                FRAMES_312
            },
            code_adaptive: layout.code_adaptive,
            code_firstlineno: layout.code_firstlineno,
            code_filename: layout.code_filename,
            code_qualname: layout.code_qualname,
            code_linetable: layout.code_linetable,
            bytes_data: layout.bytes_data,
            ascii_data: layout.ascii_data,
            ascii_length: layout.ascii_length,
            ascii_state: layout.ascii_state,
            _pad: 0,
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

/// The bytes of a file or function name a [`PythonCode`] holds, its NUL included.
pub const CODE_NAME_BYTES: usize = 256;
/// The room for a location table in a [`PythonCode`] (a power of two: the kernel side bounds
/// its reads and the record's length with a mask); a table as long or longer is cut one byte
/// short of it.
pub const CODE_TABLE_BYTES: usize = 4096;

/// What a code object says, read by the kernel side at the first frame that names it and
/// sent just after that frame's [`crate::EventKind::PythonFrames`] event, so that its lines
/// are named even when the process has exited before the agent reads the ring. Sent as long
/// as its table: [`CODE_HEAD_BYTES`] and `table_len` bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PythonCode {
    /// Kind [`crate::EventKind::PythonCode`]; `pid` the process.
    pub header: crate::EventHeader,
    /// The code object's address.
    pub code: u64,
    /// `co_firstlineno`.
    pub first_line: i32,
    /// Bytes of `table` read (0: none could be).
    pub table_len: u32,
    /// The table's own length (above `table_len` where it was cut).
    pub table_size: u64,
    /// `co_filename` and `co_qualname`, NUL-terminated; empty where the name is not a
    /// compact ASCII string shorter than [`CODE_NAME_BYTES`] or could not be read (the file
    /// also where the first line could not be).
    pub file: [u8; CODE_NAME_BYTES],
    pub function: [u8; CODE_NAME_BYTES],
    /// `co_linetable`'s first `table_len` bytes.
    pub table: [u8; CODE_TABLE_BYTES],
}

/// The bytes of a [`PythonCode`] before its table: what every record holds.
pub const CODE_HEAD_BYTES: usize = core::mem::offset_of!(PythonCode, table);

impl PythonCode {
    /// Reads a record the kernel side sent, checking its length first: its head, and as much
    /// of the table as `table_len` says. The record may be unaligned and longer (the kernel
    /// rounds records to 8 bytes); the table's bytes past `table_len` read as zero.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, crate::DecodeError> {
        let truncated = crate::DecodeError::Truncated { len: bytes.len() };
        if bytes.len() < CODE_HEAD_BYTES {
            return Err(truncated);
        }
        let mut record = Self {
            header: crate::EventHeader::default(),
            code: 0,
            first_line: 0,
            table_len: 0,
            table_size: 0,
            file: [0; CODE_NAME_BYTES],
            function: [0; CODE_NAME_BYTES],
            table: [0; CODE_TABLE_BYTES],
        };
        let length = bytes.len().min(size_of::<Self>());
        // SAFETY: `length` bytes fit in both; every bit pattern is a valid value of every
        // field, and a byte copy needs no alignment.
        unsafe {
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), (&raw mut record).cast::<u8>(), length);
        }
        if record.table_len as usize > (length - CODE_HEAD_BYTES).min(CODE_TABLE_BYTES) {
            return Err(truncated);
        }
        Ok(record)
    }
}
