//! The Python lines of allocations, for `--pid`, `record` and the daemon (#28): in a process
//! running CPython 3.11 to 3.13, the kernel side sends the allocating thread's frames (code
//! objects and instructions, `tracer-ebpf/src/python_frames.rs`) just before the allocation;
//! here they become call sites, `python:FILE` at the line, in the function. What a code object
//! says the kernel side sends too, the first time a frame names it ([`PythonCode`]), so that a
//! process that exits before the agent reads the ring keeps its lines; a name it could not read
//! and a table longer than its record are read through `/proc/PID/mem` while the process lives.
//!
//! A process is recognised by its interpreter's exported symbols (`_PyRuntime`, `Py_Version`,
//! `PyCode_Type`) in a mapped `python3*` or `libpython3*` file; the version picks the layout
//! ([`tracer_common::python`]). What a code object says is read once per process and kept:
//! the kernel side wakes the agent only for a code object it has not sent before. (A code
//! object freed and another made at its address would be named as the first; the code of a
//! program's functions lives as long as the program.) hotpin's interposer reads the same frames in place
//! (`preload/src/python.rs`).

use std::{
    collections::{HashMap, HashSet},
    fs::File,
    os::unix::fs::FileExt as _,
    path::Path,
};

use hotpin_history::{
    history::{CallSite, PYTHON_MODULE},
    maps::ProcessMaps,
};
use object::{Object as _, ObjectSection as _, ObjectSymbol as _};
use tracer_common::python::{Layout, Offsets, PythonCode, layout, unpack};

use crate::probes::Probes;

/// Longest file or function name read.
const MAX_NAME: usize = 512;
/// Largest line table read (a code object's; a few hundred bytes is usual).
const MAX_LINE_TABLE: usize = 64 << 10;
/// Code objects kept per process before the cache is emptied.
const MAX_CODES: usize = 16384;

/// A CPython process's interpreter, as found in its memory map.
pub struct Interpreter {
    pub layout: &'static Layout,
    /// What the kernel side walks frames with.
    pub offsets: Offsets,
    /// The process's `/proc/PID/mem`, opened to read its version; its code objects are read
    /// through it too.
    pub mem: File,
}

/// What [`find`] found in a process.
pub enum Found {
    /// No CPython interpreter (yet: a process may load one later).
    Nothing,
    /// CPython `major.minor`, whose frames this build does not read.
    Unread {
        major: u8,
        minor: u8,
    },
    Interpreter(Interpreter),
}

/// Finds the CPython interpreter of `pid`, whose memory map is `maps`.
pub fn find(pid: u32, maps: &ProcessMaps) -> std::io::Result<Found> {
    let candidates: Vec<String> = maps
        .files()
        .filter(|path| {
            let name = hotpin_history::history::module_file_name(path);
            name.starts_with("python3") || name.starts_with("libpython3")
        })
        .map(str::to_owned)
        .collect();
    for path in candidates {
        let host = crate::target::host_path(pid, &path);
        let Some(symbols) = interpreter_symbols(&host) else {
            continue;
        };
        let address = |offset| maps.address_of(&path, offset);
        let (Some(runtime), Some(version), Some(code_type)) = (
            address(symbols.runtime),
            address(symbols.version),
            address(symbols.code_type),
        ) else {
            continue;
        };
        let mem = File::open(format!("/proc/{pid}/mem"))?;
        let hex = read_u64(&mem, version)?;
        let (major, minor) = ((hex >> 24) as u8, (hex >> 16) as u8);
        return Ok(match layout(major, minor) {
            Some(layout) => Found::Interpreter(Interpreter {
                layout,
                offsets: Offsets::new(layout, runtime, code_type),
                mem,
            }),
            None => Found::Unread { major, minor },
        });
    }
    Ok(Found::Nothing)
}

/// File offsets of the interpreter's symbols in one ELF file.
struct InterpreterSymbols {
    runtime: u64,
    version: u64,
    code_type: u64,
}

fn interpreter_symbols(path: &Path) -> Option<InterpreterSymbols> {
    let file = File::open(path).ok()?;
    // SAFETY: read-only, dropped before returning; only headers and tables are touched.
    let data = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let elf = object::File::parse(&*data).ok()?;
    let mut found = [None; 3];
    for symbol in elf.dynamic_symbols() {
        let slot = match symbol.name() {
            Ok("_PyRuntime") => 0,
            Ok("Py_Version") => 1,
            Ok("PyCode_Type") => 2,
            _ => continue,
        };
        let section = elf.section_by_index(symbol.section_index()?).ok()?;
        let (section_offset, _) = section.file_range()?;
        found[slot] = symbol
            .address()
            .checked_sub(section.address())?
            .checked_add(section_offset);
    }
    Some(InterpreterSymbols {
        runtime: found[0]?,
        version: found[1]?,
        code_type: found[2]?,
    })
}

fn read_u64(mem: &File, at: u64) -> std::io::Result<u64> {
    let mut word = [0u8; 8];
    mem.read_exact_at(&mut word, at)?;
    Ok(u64::from_le_bytes(word))
}

/// The Python frames of every traced CPython process: what each thread's last frames event
/// said, until its allocation takes it.
#[derive(Default)]
pub struct PythonLines {
    processes: HashMap<u32, Process>,
    /// Processes whose interpreter this build does not read: not looked at again.
    unread: HashSet<u32>,
}

struct Process {
    layout: &'static Layout,
    mem: File,
    /// What each code object says, by address: from the kernel side's record, sent once, or
    /// read from the process while it lives, so that any later instruction in it is named
    /// without reading it again.
    codes: HashMap<u64, Code>,
    /// Each thread's packed frames from its last frames event, innermost first, apart by
    /// what they were sent for ([`Sender`]).
    last: HashMap<Sender, Vec<u64>>,
}

impl PythonLines {
    /// Looks for a CPython interpreter in `pid` (once found, or found unreadable, not again):
    /// the kernel side reads its threads' frames from then on.
    pub fn examine(&mut self, pid: u32, probes: &mut Probes) {
        if !self.looks_for(pid, probes) {
            return;
        }
        match ProcessMaps::read(pid) {
            Ok(maps) => self.examine_in(pid, &maps, probes),
            Err(error) => tracing::debug!(pid, %error, "cannot look for a Python interpreter"),
        }
    }

    /// [`Self::examine`], with the memory map the caller read already.
    pub fn examine_in(&mut self, pid: u32, maps: &ProcessMaps, probes: &mut Probes) {
        if !self.looks_for(pid, probes) {
            return;
        }
        let interpreter = match find(pid, maps) {
            Ok(Found::Interpreter(interpreter)) => interpreter,
            Ok(Found::Nothing) => return,
            Ok(Found::Unread { major, minor }) => {
                tracing::info!(
                    pid,
                    "Python {major}.{minor}: its allocations get no Python lines (3.11 to 3.13 \
                     are read)"
                );
                self.unread.insert(pid);
                return;
            }
            Err(error) => {
                tracing::debug!(pid, %error, "cannot look for a Python interpreter");
                return;
            }
        };
        if let Err(error) = probes.set_python(pid, interpreter.offsets) {
            tracing::warn!(pid, error = %crate::error::chain(&error), "no Python lines");
            self.unread.insert(pid);
            return;
        }
        let layout = interpreter.layout;
        tracing::info!(
            pid,
            python = %format!("{}.{}", layout.major, layout.minor),
            "reading the Python lines of its allocations"
        );
        self.processes.insert(
            pid,
            Process {
                layout,
                mem: interpreter.mem,
                codes: HashMap::new(),
                last: HashMap::new(),
            },
        );
    }

    /// Whether `pid` is still to be looked at: lines are read, and it is neither known nor
    /// known unreadable.
    fn looks_for(&self, pid: u32, probes: &Probes) -> bool {
        probes.reads_python_lines()
            && !self.processes.contains_key(&pid)
            && !self.unread.contains(&pid)
    }

    /// `pid` exited: its frames are no longer read.
    pub fn forget(&mut self, pid: u32, probes: &mut Probes) {
        self.unread.remove(&pid);
        if self.processes.remove(&pid).is_some()
            && let Err(error) = probes.remove_python(pid)
        {
            tracing::debug!(pid, error = %crate::error::chain(&error), "cannot forget a Python process");
        }
    }

    /// A frames event: its packed frames, kept until what they were sent for takes them
    /// (what their code objects say may come after them, in [`PythonCode`] records).
    pub fn frames(&mut self, pid: u32, sender: Sender, packed: &[u64]) {
        if let Some(process) = self.processes.get_mut(&pid) {
            process.last.insert(sender, packed.to_vec());
        }
    }

    /// What a code object says, as the kernel side read it the first time a frame named it:
    /// kept, unless a name was not read (then read from the process when a frame names it).
    /// A table the record cut is read whole from the process while it lives.
    pub fn code(&mut self, record: &PythonCode) {
        let Some(process) = self.processes.get_mut(&record.header.pid) else {
            return;
        };
        // A record is sent for an address the kernel side has not sent before (or forgot):
        // newer than what is kept for it, which may be a freed code object's.
        process.codes.remove(&record.code);
        let (Some(file), Some(function)) = (name(&record.file), name(&record.function)) else {
            return;
        };
        let read = record.table_len as usize;
        let code = if (read as u64) < record.table_size
            && let Some(whole) = process.read_code(record.code)
        {
            whole
        } else {
            Code {
                module: format!("{PYTHON_MODULE}{file}"),
                function,
                first_line: record.first_line,
                line_table: record.table[..read.min(record.table.len())].to_vec(),
            }
        };
        process.keep(record.code, code);
    }

    /// The frames of the allocation or mapping `sender` just made, as call sites (empty
    /// where none were sent).
    pub fn take(&mut self, pid: u32, sender: Sender) -> Vec<CallSite> {
        let Some(process) = self.processes.get_mut(&pid) else {
            return Vec::new();
        };
        let packed = process.last.remove(&sender).unwrap_or_default();
        packed
            .into_iter()
            .filter_map(|frame| process.site(frame))
            .collect()
    }
}

/// Who frames were sent for: a thread, and whether for a large mapping (true) or an
/// allocation call. Apart, so that the mapping a libc allocation makes inside itself does not
/// take the frames the allocation's own entry sent.
pub type Sender = (u32, bool);

/// A NUL-terminated name the kernel side read; `None` where it is empty or not UTF-8.
fn name(bytes: &[u8]) -> Option<String> {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let text = std::str::from_utf8(&bytes[..end]).ok()?;
    (!text.is_empty()).then(|| text.to_owned())
}

/// What a code object says: its file (as a call site's module), its qualified name, its first
/// line and its location table.
struct Code {
    module: String,
    function: String,
    first_line: i32,
    line_table: Vec<u8>,
}

impl Process {
    /// The call site a packed frame names: `python:FILE`, its line, its function. `None`
    /// where the code object could not be read (the process exited before: the allocation
    /// keeps the frames that could be).
    fn site(&mut self, frame: u64) -> Option<CallSite> {
        let (code, instruction) = unpack(frame);
        if !self.codes.contains_key(&code) {
            let read = self.read_code(code)?;
            self.keep(code, read);
        }
        let code = &self.codes[&code];
        let line = line_of(&code.line_table, code.first_line, instruction)
            .unwrap_or(code.first_line.max(0) as u32);
        Some(CallSite {
            module: code.module.clone(),
            offset: u64::from(line),
            symbol: Some(code.function.clone()),
        })
    }

    /// Keeps what `code` says. When full, the cache keeps only the code objects that frames
    /// not yet taken name (the kernel side will not send those again).
    fn keep(&mut self, code: u64, read: Code) {
        if self.codes.len() >= MAX_CODES {
            let named: HashSet<u64> = self
                .last
                .values()
                .flatten()
                .map(|&frame| unpack(frame).0)
                .collect();
            self.codes.retain(|code, _| named.contains(code));
        }
        self.codes.insert(code, read);
    }

    fn read_code(&self, code: u64) -> Option<Code> {
        let l = self.layout;
        let field = |offset: u32| read_u64(&self.mem, code + u64::from(offset)).ok();
        let file = self.ascii(field(l.code_filename)?)?;
        let function = self.ascii(field(l.code_qualname)?)?;
        let first_line = field(l.code_firstlineno)? as u32 as i32;
        let line_table = field(l.code_linetable)
            .and_then(|table| self.bytes(table))
            .unwrap_or_default();
        Some(Code {
            module: format!("{PYTHON_MODULE}{file}"),
            function,
            first_line,
            line_table,
        })
    }

    /// A compact ASCII `str`'s text; `None` for any other string or an unreadable one.
    fn ascii(&self, object: u64) -> Option<String> {
        let l = self.layout;
        let state = read_u64(&self.mem, object + u64::from(l.ascii_state)).ok()? as u32;
        if (state >> 5) & 3 != 3 {
            return None;
        }
        let length = read_u64(&self.mem, object + u64::from(l.ascii_length)).ok()?;
        let mut text = vec![0u8; (length as usize).min(MAX_NAME)];
        self.mem
            .read_exact_at(&mut text, object + u64::from(l.ascii_data))
            .ok()?;
        String::from_utf8(text).ok()
    }

    /// A `bytes` object's contents.
    fn bytes(&self, object: u64) -> Option<Vec<u8>> {
        let length = read_u64(&self.mem, object + 16).ok()?; // ob_size
        let mut data = vec![0u8; usize::try_from(length).ok()?.min(MAX_LINE_TABLE)];
        self.mem
            .read_exact_at(&mut data, object + u64::from(self.layout.bytes_data))
            .ok()?;
        Some(data)
    }
}

/// The line of code unit `instruction` in a 3.11+ location table (`co_linetable`, CPython's
/// `Objects/locations.md`): entries of a first byte (high bit set; a 4-bit code; length - 1 in
/// code units) and the code's data. `None` where the table says no line, or ends first.
pub fn line_of(table: &[u8], first_line: i32, instruction: u64) -> Option<u32> {
    let mut bytes = table.iter().copied();
    let mut next = || bytes.next();
    let mut line = i64::from(first_line);
    let mut address = 0u64;
    loop {
        let head = next()?;
        if head & 0x80 == 0 {
            return None;
        }
        let code = (head >> 3) & 15;
        let length = u64::from(head & 7) + 1;
        let delta = match code {
            15 => None,
            14 => {
                let delta = signed_varint(&mut next)?;
                for _ in 0..3 {
                    varint(&mut next)?;
                }
                Some(delta)
            }
            13 => Some(signed_varint(&mut next)?),
            10..=12 => {
                next()?;
                next()?;
                Some(i64::from(code) - 10)
            }
            _ => {
                next()?;
                Some(0)
            }
        };
        if let Some(delta) = delta {
            line += delta;
        }
        if instruction < address + length {
            return delta.and_then(|_| u32::try_from(line).ok());
        }
        address += length;
    }
}

fn varint(next: &mut impl FnMut() -> Option<u8>) -> Option<u64> {
    let mut byte = next()?;
    let mut value = u64::from(byte & 63);
    let mut shift = 0;
    while byte & 64 != 0 && shift < 60 {
        byte = next()?;
        shift += 6;
        value |= u64::from(byte & 63) << shift;
    }
    Some(value)
}

fn signed_varint(next: &mut impl FnMut() -> Option<u8>) -> Option<i64> {
    let value = varint(next)?;
    let magnitude = (value >> 1) as i64;
    Some(if value & 1 != 0 {
        -magnitude
    } else {
        magnitude
    })
}

#[cfg(test)]
mod tests;
