//! The Python lines that made an allocation (#28): in a process running CPython 3.11 to 3.13,
//! the allocating thread's interpreter frames, innermost first, read in place.
//!
//! Why here and so: PyTorch's generated bindings release the GIL around the operator that
//! allocates, so the interpreter cannot be asked (its API needs the GIL). But the allocating
//! thread is inside C code called from Python: its own frame chain cannot change while it is
//! here, and the code objects those frames hold stay alive. So the chain is read directly:
//! the thread's state (`PyGILState_GetThisThreadState`, which needs no GIL), its current
//! frame, each frame's code object (file and qualified name, compact ASCII strings read in
//! place) and its line (`PyCode_Addr2Line`, which reads only the code object's immutable line
//! table). Nothing is written and no reference count is touched. What a code object says at
//! an instruction is read once and kept.
//!
//! The layouts are CPython's own, per version, shared with the tracer
//! (`tracer_common::python`, where how they are checked is said). A version without a layout
//! (3.10 and earlier, 3.14 and later) gets no Python lines, said once; so does a chain that
//! does not check out (a code object whose type is not `PyCode_Type`). The tracer reads the
//! same frames from the kernel side for `--pid`, `record` and the daemon
//! (`tracer-agent/src/python.rs`).

use tracer_common::python::Layout;

use std::{
    collections::HashMap,
    ffi::{CStr, c_int, c_void},
    sync::{
        Arc, Mutex, OnceLock, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
};

/// Frames kept per allocation, innermost first.
pub const MAX_FRAMES: usize = 6;
/// Longest file or function name kept.
const MAX_NAME: usize = 256;

/// One Python frame: file, line and qualified function name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PyFrame {
    pub file: Arc<str>,
    pub line: u32,
    pub function: Arc<str>,
}

/// Frames already read, by (code object, instruction offset): a code object's names and
/// line table never change, so reading them once is enough. Bounded: emptied when full. (A
/// code object freed and another made at its address could be named as the first; code
/// objects of a program's loops live as long as the program.)
static SEEN: Mutex<Option<HashMap<(usize, isize), PyFrame>>> = Mutex::new(None);
const MAX_SEEN: usize = 8192;

type GetThisThreadState = unsafe extern "C" fn() -> *mut c_void;
type IsInitialized = unsafe extern "C" fn() -> c_int;
type Addr2Line = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;

/// The interpreter's functions and its layout, found once.
struct Interpreter {
    layout: &'static Layout,
    this_thread_state: GetThisThreadState,
    is_initialized: IsInitialized,
    addr2line: Addr2Line,
    code_type: usize,
}

static INTERPRETER: OnceLock<Option<Interpreter>> = OnceLock::new();
/// A chain that did not check out: no more reading, said once.
static GAVE_UP: AtomicBool = AtomicBool::new(false);

fn symbol(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
}

fn find() -> Option<Interpreter> {
    let version = symbol(c"Py_Version");
    if version.is_null() {
        return None; // not CPython, or older than 3.11
    }
    // SAFETY: Py_Version is `const unsigned long` in CPython 3.11+.
    let hex = unsafe { *(version as *const u64) };
    let (major, minor) = ((hex >> 24) as u8, (hex >> 16) as u8);
    let layout = match tracer_common::python::layout(major, minor) {
        Some(layout) => layout,
        None => {
            eprintln!(
                "hotpin: Python {major}.{minor}: allocations are not given their Python lines \
                 (3.11 to 3.13 are read)"
            );
            return None;
        }
    };
    let this_thread_state = symbol(c"PyGILState_GetThisThreadState");
    let is_initialized = symbol(c"Py_IsInitialized");
    let addr2line = symbol(c"PyCode_Addr2Line");
    let code_type = symbol(c"PyCode_Type");
    if [this_thread_state, is_initialized, addr2line, code_type]
        .iter()
        .any(|p| p.is_null())
    {
        return None;
    }
    // SAFETY: the symbols are these functions of CPython's C API, of these types.
    unsafe {
        Some(Interpreter {
            layout,
            this_thread_state: std::mem::transmute::<*mut c_void, GetThisThreadState>(
                this_thread_state,
            ),
            is_initialized: std::mem::transmute::<*mut c_void, IsInitialized>(is_initialized),
            addr2line: std::mem::transmute::<*mut c_void, Addr2Line>(addr2line),
            code_type: code_type as usize,
        })
    }
}

/// A layout's offset as an address difference.
fn at(offset: u32) -> usize {
    offset as usize
}

/// `3.12`, for messages.
fn version(layout: &Layout) -> String {
    format!("{}.{}", layout.major, layout.minor)
}

/// Reads the word at `base + offset`.
///
/// # Safety
/// `base + offset` must be a readable, aligned word.
unsafe fn word(base: usize, offset: usize) -> usize {
    // SAFETY: as the caller promises.
    unsafe { *((base + offset) as *const usize) }
}

/// Looks the interpreter up, once: at load, so that no allocation ever calls into the loader
/// (`dlsym`) to read frames. A program that loads CPython later, with dlopen, gets no lines.
pub fn find_interpreter() {
    INTERPRETER.get_or_init(find);
}

/// The calling thread's Python frames, innermost first (at most [`MAX_FRAMES`]); empty where
/// the process runs no CPython this module reads, or the thread runs no Python.
pub fn frames() -> Vec<PyFrame> {
    if GAVE_UP.load(Ordering::Relaxed) {
        return Vec::new();
    }
    let Some(Some(interpreter)) = INTERPRETER.get() else {
        return Vec::new();
    };
    // SAFETY: both need no GIL: the first reads the runtime's flag, the second this thread's
    // thread-specific slot (created once the runtime is initialized).
    let tstate = unsafe {
        if (interpreter.is_initialized)() == 0 {
            return Vec::new();
        }
        (interpreter.this_thread_state)() as usize
    };
    if tstate == 0 {
        return Vec::new();
    }
    // SAFETY: a live PyThreadState of this thread, laid out as `layout` says (the version
    // was checked); its frames are this thread's and cannot change while it is here.
    match unsafe { walk(interpreter, tstate) } {
        Some(frames) => frames,
        None => {
            if !GAVE_UP.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "hotpin: this Python {}'s frames are not as expected: allocations are not \
                     given their Python lines",
                    version(interpreter.layout)
                );
            }
            Vec::new()
        }
    }
}

/// The frame chain from `tstate`; None if a code object is not one.
///
/// # Safety
/// `tstate` must be this thread's live PyThreadState, laid out as `interpreter.layout`.
unsafe fn walk(interpreter: &Interpreter, tstate: usize) -> Option<Vec<PyFrame>> {
    let l = interpreter.layout;
    let mut frames = Vec::new();
    // SAFETY (every read below): fields of live interpreter structures of this thread.
    unsafe {
        // Through the thread's _PyCFrame (3.11, 3.12), or held by the thread state (3.13).
        let held = word(tstate, at(l.tstate_cframe));
        let mut frame = match l.cframe_current {
            Some(_) if held == 0 => return Some(frames),
            Some(offset) => word(held, at(offset)),
            None => held,
        };
        let mut steps = 0;
        while frame != 0 && frames.len() < MAX_FRAMES && steps < 64 {
            steps += 1;
            let owner = *((frame + at(l.frame_owner)) as *const u8);
            // A shim frame of the C stack: skipped before its code is looked at (3.13 gives it
            // None, not a code object).
            if l.owner_cstack != Some(owner) {
                let code = word(frame, at(l.frame_code));
                if code == 0 || word(code, 8) != interpreter.code_type {
                    return None;
                }
                let first = code + at(l.code_adaptive);
                let prev = word(frame, at(l.frame_prev_instr));
                let offset = prev.wrapping_sub(first) as isize;
                let offset = if offset < 0 {
                    -1
                } else {
                    offset.min(i32::MAX as isize)
                };
                frames.push(read_frame(interpreter, code, offset));
            }
            frame = word(frame, at(l.frame_previous));
        }
    }
    Some(frames)
}

/// The frame of `code` at instruction byte `offset`: from [`SEEN`], else read and kept.
///
/// # Safety
/// `code` must be a live code object laid out as `interpreter.layout`.
unsafe fn read_frame(interpreter: &Interpreter, code: usize, offset: isize) -> PyFrame {
    let mut seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
    let seen = seen.get_or_insert_with(HashMap::new);
    if let Some(frame) = seen.get(&(code, offset)) {
        return frame.clone();
    }
    let l = interpreter.layout;
    // SAFETY: a live code object's fields and its immutable line table, as promised.
    let frame = unsafe {
        PyFrame {
            file: ascii(l, word(code, at(l.code_filename)))
                .unwrap_or_else(|| "?".into())
                .into(),
            line: (interpreter.addr2line)(code as *mut c_void, offset as c_int).max(0) as u32,
            function: ascii(l, word(code, at(l.code_qualname)))
                .unwrap_or_else(|| "?".into())
                .into(),
        }
    };
    if seen.len() >= MAX_SEEN {
        seen.clear();
    }
    seen.insert((code, offset), frame.clone());
    frame
}

/// A compact ASCII str's text (what file names and function names nearly always are); None
/// for any other string.
///
/// # Safety
/// `object` must be null or a live `str` object.
unsafe fn ascii(l: &Layout, object: usize) -> Option<String> {
    if object == 0 {
        return None;
    }
    // SAFETY: a live str object's header, as the caller promises.
    unsafe {
        let state = *((object + at(l.ascii_state)) as *const u32);
        let (compact, ascii) = (state >> 5 & 1, state >> 6 & 1);
        if compact == 0 || ascii == 0 {
            return None;
        }
        let length = (word(object, at(l.ascii_length))).min(MAX_NAME);
        let bytes = std::slice::from_raw_parts((object + at(l.ascii_data)) as *const u8, length);
        Some(String::from_utf8_lossy(bytes).into_owned())
    }
}

/// `file:line in function`, for messages and tests.
impl std::fmt::Display for PyFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{} in {}", self.file, self.line, self.function)
    }
}
