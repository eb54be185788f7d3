use std::{path::Path, process::Command};

use super::*;

/// The build machine's `python3`, which these tests compare with (CPython 3.11 on every
/// machine of this kind, CI's included).
fn python3(script: &str) -> serde_json::Value {
    let output = Command::new("python3")
        .args(["-c", script])
        .output()
        .expect("run python3 (CPython 3.11 is on every build machine)");
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).expect("python3 prints JSON")
}

/// Every code unit of functions of many shapes (long and negative line steps, lines with no
/// location, one-line and long forms) gets the line CPython's own `co_lines` gives it.
#[test]
fn line_tables_read_as_cpython_reads_them() {
    let functions = python3(
        r#"
import json

def simple(a):
    return a + 1

def long_jumps(n):
    total = 0
    for i in range(n):
        if i % 3 == 0:
            total += i



        else:
            total -= 1
    try:
        total //= n
    except ZeroDivisionError:
        pass
    return [x * total for x in range(n)
            if x]

async def coroutine():
    return await other()

class Holder:
    def method(self, *args, **kwargs):
        with open("/dev/null") as f:
            f.read()
        return lambda: (args,
                        kwargs)

def every_code(code):
    yield code
    for const in code.co_consts:
        if hasattr(const, "co_lines"):
            yield from every_code(const)

import json.decoder
codes = [simple.__code__, long_jumps.__code__, coroutine.__code__, Holder.method.__code__]
for module in (json, json.decoder):
    codes += every_code(compile(open(module.__file__).read(), module.__file__, "exec"))
print(json.dumps([{"table": c.co_linetable.hex(), "first": c.co_firstlineno,
                   "lines": list(c.co_lines())} for c in codes]))
"#,
    );
    let mut units = 0;
    for function in functions.as_array().expect("a list") {
        let table = hex(function["table"].as_str().unwrap());
        let first = function["first"].as_i64().unwrap() as i32;
        for range in function["lines"].as_array().unwrap() {
            let (start, end) = (range[0].as_u64().unwrap(), range[1].as_u64().unwrap());
            let line = range[2].as_u64().map(|l| l as u32);
            for unit in start / 2..end / 2 {
                assert_eq!(
                    line_of(&table, first, unit),
                    line,
                    "unit {unit} of {function}"
                );
                units += 1;
            }
        }
    }
    assert!(units > 1000, "{units} code units compared");
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// The layout of the build machine's Python is where `layout_check.py` finds each field in
/// a live interpreter; `HOTPIN_LAYOUT_JSON` names what the script printed elsewhere (the GPU
/// machine's Python 3.12: docs/benchmarks.md).
#[test]
fn the_layout_table_matches_a_live_interpreter() {
    let built = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../bench/gpu/python/layout_check.py"
    );
    let script = if Path::new(built).is_file() {
        built
    } else {
        "bench/gpu/python/layout_check.py"
    };
    // What the script printed on another machine (the GPU machine's Python), or its run here.
    let printed = match std::env::var_os("HOTPIN_LAYOUT_JSON") {
        Some(path) => std::fs::read(&path).expect("read HOTPIN_LAYOUT_JSON"),
        None => {
            let output = Command::new("python3")
                .arg(script)
                .output()
                .expect("run python3");
            assert!(output.status.success(), "{output:?}");
            output.stdout
        }
    };
    let found: serde_json::Value = serde_json::from_slice(&printed).expect("JSON");
    let version: Vec<u8> = found["python"]
        .as_str()
        .unwrap()
        .split('.')
        .take(2)
        .map(|part| part.parse().unwrap())
        .collect();
    let layout = layout(version[0], version[1])
        .unwrap_or_else(|| panic!("no layout for the build machine's Python {found}"));
    let fields = &found["fields"];
    // null where the thread state holds the current frame itself (3.13).
    let hop = serde_json::to_value(layout.cframe_current).unwrap();
    assert!(
        fields["cframe_current"]
            .as_array()
            .is_some_and(|found| found.contains(&hop)),
        "cframe_current: the table says {hop}, a live interpreter: {}",
        fields["cframe_current"]
    );
    for (name, value) in [
        ("runtime_interp_head", layout.runtime_interp_head),
        ("interp_threads_head", layout.interp_threads_head),
        ("tstate_next", layout.tstate_next),
        ("tstate_native_thread_id", layout.tstate_native_thread_id),
        ("tstate_cframe", layout.tstate_cframe),
        ("frame_code", layout.frame_code),
        ("frame_previous", layout.frame_previous),
        ("frame_prev_instr", layout.frame_prev_instr),
        ("code_firstlineno", layout.code_firstlineno),
        ("code_filename", layout.code_filename),
        ("code_qualname", layout.code_qualname),
        ("code_linetable", layout.code_linetable),
        ("code_adaptive", layout.code_adaptive),
        ("bytes_data", layout.bytes_data),
        ("ascii_data", layout.ascii_data),
        ("ascii_length", layout.ascii_length),
        ("ascii_state", layout.ascii_state),
    ] {
        let candidates: Vec<u64> = fields[name]
            .as_array()
            .unwrap_or_else(|| panic!("{name} missing from {found}"))
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert!(
            candidates.contains(&u64::from(value)),
            "{name}: the table says {value}, a live {} interpreter has it at {candidates:?}",
            found["python"]
        );
    }
}

/// A code record as the kernel side sends it: names, first line, table.
fn code_record(
    pid: u32,
    code: u64,
    file: &str,
    function: &str,
    first: i32,
    table: &[u8],
) -> PythonCode {
    let mut record = PythonCode::from_bytes(&[0; size_of::<PythonCode>()]).expect("zeroed");
    record.header.kind = tracer_common::EventKind::PythonCode as u16;
    record.header.pid = pid;
    record.code = code;
    record.first_line = first;
    record.file[..file.len()].copy_from_slice(file.as_bytes());
    record.function[..function.len()].copy_from_slice(function.as_bytes());
    record.table[..table.len()].copy_from_slice(table);
    record.table_len = table.len() as u32;
    record.table_size = table.len() as u64;
    record
}

/// A process whose memory cannot be read (it exited): what its code objects say can come
/// only from the kernel side's records.
fn exited(lines: &mut PythonLines, pid: u32) {
    lines.processes.insert(
        pid,
        Process {
            layout: layout(3, 11).expect("3.11"),
            mem: File::open("/dev/null").expect("/dev/null"),
            codes: HashMap::new(),
            last: HashMap::new(),
        },
    );
}

/// Two location entries (CPython's "no columns" form): code units 0-1 at the first line + 2,
/// unit 2 at the first line + 5.
const TABLE: [u8; 4] = [0xE9, 0x04, 0xE8, 0x06];

#[test]
fn frames_are_named_from_code_records_once_the_process_is_gone() {
    let (pid, code, other) = (4_000_001, 0x7f00_0000_1000, 0x7f00_0000_2000);
    let mut lines = PythonLines::default();
    exited(&mut lines, pid);
    let site = |sites: &[CallSite]| {
        sites
            .iter()
            .map(|s| {
                (
                    s.module.clone(),
                    s.offset,
                    s.symbol.clone().unwrap_or_default(),
                )
            })
            .collect::<Vec<_>>()
    };
    // The frames come first, their code's record after them: named when the call takes them.
    lines.frames(
        pid,
        (7, false),
        &[
            tracer_common::python::pack(code, 2),
            tracer_common::python::pack(code, 0),
        ],
    );
    lines.code(&code_record(
        pid,
        code,
        "/srv/train.py",
        "Step.run",
        40,
        &TABLE,
    ));
    let file = format!("{PYTHON_MODULE}/srv/train.py");
    assert_eq!(
        site(&lines.take(pid, (7, false))),
        [
            (file.clone(), 45, "Step.run".to_owned()),
            (file.clone(), 42, "Step.run".to_owned())
        ]
    );
    // Frames sent for a mapping are the mapping's, not the next call's, and the other way.
    lines.frames(pid, (7, true), &[tracer_common::python::pack(code, 0)]);
    assert!(lines.take(pid, (7, false)).is_empty());
    assert_eq!(
        site(&lines.take(pid, (7, true))),
        [(file.clone(), 42, "Step.run".to_owned())]
    );
    // A record whose file name the kernel side could not read names nothing: the process
    // would be read, and cannot be.
    lines.code(&code_record(pid, other, "", "f", 1, &TABLE));
    lines.frames(pid, (7, false), &[tracer_common::python::pack(other, 0)]);
    assert!(lines.take(pid, (7, false)).is_empty());
    // A later record for an address replaces what was kept for it (a freed code object's).
    lines.code(&code_record(pid, code, "/srv/eval.py", "main", 10, &TABLE));
    lines.frames(pid, (7, false), &[tracer_common::python::pack(code, 0)]);
    assert_eq!(
        site(&lines.take(pid, (7, false))),
        [(
            format!("{PYTHON_MODULE}/srv/eval.py"),
            12,
            "main".to_owned()
        )]
    );
}

/// A full cache of code objects keeps those that frames not yet taken name: the kernel side
/// does not send them again.
#[test]
fn a_full_code_cache_keeps_the_codes_of_frames_not_yet_taken() {
    let (pid, first) = (4_000_002, 0x7f00_0000_0000u64);
    let mut lines = PythonLines::default();
    exited(&mut lines, pid);
    lines.frames(pid, (7, false), &[tracer_common::python::pack(first, 0)]);
    for n in 0..=MAX_CODES as u64 {
        let code = first + 0x100 * n;
        lines.code(&code_record(pid, code, "/srv/train.py", "f", 1, &TABLE));
    }
    assert_eq!(
        lines.take(pid, (7, false)).len(),
        1,
        "the pending frame's code was kept"
    );
    assert!(lines.processes[&pid].codes.len() < MAX_CODES);
}
