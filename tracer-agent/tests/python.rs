//! The Python lines of allocations, read by the kernel side from a real CPython (the build
//! machine's `python3`, 3.11) running a program of ours that calls the CUDA stand-in (a test
//! fixture, not CUDA) through ctypes: `tracer record -- python3 ...` and `tracer record --pid`
//! after its set-up. Needs root (the tracer loads eBPF).

mod common;

use std::{
    io::{BufRead as _, BufReader, Read as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use hotpin_history::history::{AllocKind, MemHistory, PYTHON_MODULE};

fn program() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/pinned_lines.py")
}

/// Every pinned allocation the program made carries its line and function, then its
/// caller's, as the program says; every copy is counted.
fn assert_lines(history: &MemHistory, truth: &serde_json::Value) {
    // Every copy counted, by direction: all of them are from or into the pinned buffers.
    let mut copies = hotpin_history::history::TransferStats::default();
    for allocation in history.allocations() {
        if allocation.kind.is_host() {
            copies.add(&allocation.stats);
        }
    }
    let number = |key: &str| truth[key].as_u64().unwrap();
    assert_eq!(
        (
            copies.h2d_count,
            copies.d2h_count,
            copies.h2d_bytes,
            copies.d2h_bytes
        ),
        (
            number("h2d"),
            number("d2h"),
            number("h2d_bytes"),
            number("d2h_bytes")
        ),
        "{:?}",
        history.stats()
    );
    let made = truth["allocations"].as_array().expect("allocations");
    let pinned: Vec<_> = history
        .allocations()
        .iter()
        .filter(|a| a.kind == AllocKind::Pinned)
        .collect();
    assert_eq!(pinned.len(), made.len(), "{pinned:?}");
    for (allocation, truth) in pinned.iter().zip(made) {
        assert_eq!(allocation.size, truth["size"].as_u64().unwrap());
        let python = python_lines(history, allocation.id);
        let file = truth["file"].as_str().unwrap().to_owned();
        let expected = [
            (
                file.clone(),
                truth["line"].as_u64().unwrap(),
                truth["function"].as_str().unwrap().to_owned(),
            ),
            (
                file,
                truth["caller_line"].as_u64().unwrap(),
                truth["caller"].as_str().unwrap().to_owned(),
            ),
        ];
        assert!(
            python.len() >= 3 && python[..2] == expected,
            "allocation {allocation:?}: Python lines {python:?}, the program says {expected:?}"
        );
    }
}

/// The Python lines among allocation `id`'s callers: file, line and function, innermost
/// first.
fn python_lines(history: &MemHistory, id: u64) -> Vec<(String, u64, String)> {
    history
        .callers(id)
        .iter()
        .filter_map(|&id| history.call_site(id))
        .filter_map(|site| {
            let file = site.module.strip_prefix(PYTHON_MODULE)?;
            Some((file.to_owned(), site.offset, site.symbol.clone()?))
        })
        .collect()
}

/// `tracer record FLAGS -- python3 SCRIPT` (pinned_lines.py, or a copy of it): the history it
/// wrote, and the run.
fn record_program(
    standin: &cuda_standin::Installed,
    flags: &[&str],
    script: &Path,
) -> (MemHistory, std::process::Output) {
    record_program_env(standin, flags, script, &[])
}

/// [`record_program`] with more environment variables for the program.
fn record_program_env(
    standin: &cuda_standin::Installed,
    flags: &[&str],
    script: &Path,
    env: &[(&str, &str)],
) -> (MemHistory, std::process::Output) {
    let history = standin.dir.join("python.hotpin");
    let output = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .arg("record")
        .args(flags)
        .arg("-o")
        .arg(&history)
        .args(["--", "python3"])
        .arg(script)
        .arg(&standin.runtime)
        .env("LD_LIBRARY_PATH", &standin.dir)
        .envs(env.iter().copied())
        .output()
        .expect("run tracer record");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let saved = hotpin_history::dump::read(&history).expect("history");
    (saved, output)
}

/// `tracer record -o H -- python3 tests/python/SCRIPT LIBCUDART`, no flags: the history's
/// path, and the program's ground truth.
fn record_plainly(standin: &cuda_standin::Installed, script: &str) -> (PathBuf, serde_json::Value) {
    let history = standin.dir.join(format!("{script}.hotpin"));
    let program = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let output = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .args(["record", "-o"])
        .arg(&history)
        .args(["--", "python3"])
        .arg(&program)
        .arg(&standin.runtime)
        .env("LD_LIBRARY_PATH", &standin.dir)
        .output()
        .expect("run tracer record");
    assert!(output.status.success(), "{output:?}");
    (history, truth_of(&output.stdout))
}

/// `tracer report ARGS HISTORY`'s output.
fn report_of(history: &Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .arg("report")
        .args(args)
        .arg(history)
        .output()
        .expect("run tracer report");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn truth_of(stdout: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(stdout);
    serde_json::from_str(text.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the program's ground truth ({e}): {text}"))
}

#[test]
fn a_recorded_python_program_has_its_lines() {
    common::require_root();
    let standin = common::standin("python-record");
    let (saved, output) = record_program(&standin, &[], &program());
    assert_lines(&saved, &truth_of(&output.stdout));
}

/// A program whose file name is longer than the kernel side's record holds (deep trees of a
/// build system or a virtualenv): named whole, from the process, not cut. Such a name is read
/// from `/proc/PID/mem` while the process lives (`python.rs`), so the program lingers 2 s after
/// its last copy: exiting at once, it lost its lines in 3 runs of 3 on the build machine on
/// 2026-12-07 (the agent read its records after it was gone), where it had kept them before.
/// That is what a program that short and that deep gets: no lines for those frames.
#[test]
fn a_file_name_longer_than_the_kernel_record_is_named_whole() {
    common::require_root();
    let standin = common::standin("python-long");
    let mut dir = standin.dir.clone();
    while dir.as_os_str().len() < 300 {
        dir.push("a_folder_of_a_deep_tree_of_a_build_system");
    }
    std::fs::create_dir_all(&dir).expect("the deep folder");
    let script = dir.join("pinned_lines.py");
    std::fs::copy(program(), &script).expect("copy the program");
    let (saved, output) = record_program_env(&standin, &[], &script, &[("LINGER_S", "2")]);
    let truth = truth_of(&output.stdout);
    assert!(truth["allocations"][0]["file"].as_str().unwrap().len() > 300);
    assert_lines(&saved, &truth);
}

#[test]
fn a_python_program_traced_by_pid_after_its_set_up_has_its_lines() {
    common::require_root();
    let standin = common::standin("python-pid");
    let go = standin.dir.join("go");
    let mut program = Command::new("python3")
        .arg(program())
        .arg(&standin.runtime)
        .arg(&go)
        .env("LD_LIBRARY_PATH", &standin.dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start python3");
    let mut stdout = BufReader::new(program.stdout.take().expect("stdout"));
    let mut ready = String::new();
    stdout.read_line(&mut ready).expect("read READY");
    assert_eq!(ready.trim(), "READY");
    let history = standin.dir.join("python-pid.json");
    let mut tracer = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .args(["record", "--pid", &program.id().to_string(), "-o"])
        .arg(&history)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tracer");
    let mut stderr = BufReader::new(tracer.stderr.take().expect("stderr"));
    let said = common::until_recording(&mut stderr);
    // The tracer is stopped while the program allocates, copies and exits: what its code
    // objects say can then only come from the kernel side's records (as on a loaded machine,
    // where the agent reads the ring after a short program has ended).
    let stopped = Stopped::new(tracer.id());
    std::fs::write(&go, b"").expect("open the gate");
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).expect("the program's output");
    assert!(program.wait().expect("wait").success());
    drop(stopped);
    let mut tail = String::new();
    stderr.read_to_string(&mut tail).expect("read the tracer");
    assert!(tracer.wait().expect("wait").success(), "{said}{tail}");
    let saved = hotpin_history::dump::read(&history).expect("history");
    assert_lines(&saved, &truth_of(&rest));
}

/// A process stopped (SIGSTOP) until this is dropped, whether the test goes on or panics:
/// a stopped tracer is never left behind.
struct Stopped(String);

impl Stopped {
    fn new(pid: u32) -> Self {
        let stopped = Self(pid.to_string());
        stopped.signal("-STOP");
        stopped
    }

    fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .args([name, &self.0])
            .status()
            .expect("kill");
        assert!(sent.success(), "kill {name} {}", self.0);
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // No assertion here: this may run while a failed test unwinds.
        let _ = Command::new("kill").args(["-CONT", &self.0]).status();
    }
}

/// `tracer daemon` gives the Python program's allocations their lines too, in the history it
/// stores for the run.
#[test]
fn the_daemon_stores_a_python_program_with_its_lines() {
    common::require_root();
    let _alone = common::one_at_a_time();
    let standin = common::standin("python-daemon");
    let store = standin.dir.join("store");
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .arg("daemon")
        .arg("--store")
        .arg(&store)
        .args(["--metrics", "off", "--lease-socket", "off", "--command"])
        .arg(format!("*{}*", standin.dir.display()))
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tracer daemon");
    let mut said = BufReader::new(daemon.stderr.take().expect("stderr"));
    let mut lines = String::new();
    while !lines.contains("tracing every CUDA process") {
        if said.read_line(&mut lines).expect("read the daemon") == 0 {
            panic!("the daemon ended: {lines}");
        }
    }
    let output = Command::new("python3")
        .arg(program())
        .arg(&standin.runtime)
        .env("LD_LIBRARY_PATH", &standin.dir)
        .output()
        .expect("run python3");
    assert!(output.status.success(), "{output:?}");
    let started = std::time::Instant::now();
    let history = loop {
        if let Some(found) = histories(&store).pop() {
            break found;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "no history stored: {lines}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    // SAFETY: kill has no memory preconditions; the pid is our child.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    assert!(daemon.wait().expect("wait for the daemon").success());
    let saved = hotpin_history::dump::read(&history).expect("history");
    assert_lines(&saved, &truth_of(&output.stdout));
}

/// Every history file under `dir`.
fn histories(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(histories(&path));
        } else if path.extension().is_some_and(|e| e == "hotpin") {
            found.push(path);
        }
    }
    found
}

/// `--no-python-lines`: the same recording without them.
#[test]
fn python_lines_can_be_turned_off() {
    common::require_root();
    let standin = common::standin("python-off");
    let (saved, _) = record_program(&standin, &["--no-python-lines"], &program());
    let pinned = saved
        .allocations()
        .iter()
        .filter(|a| a.kind == AllocKind::Pinned)
        .count();
    assert_eq!(pinned, 3);
    assert!(
        saved
            .call_sites()
            .iter()
            .all(|site| !site.module.starts_with(PYTHON_MODULE)),
        "{:?}",
        saved.call_sites()
    );
}

/// A plain `tracer record` of a Python program whose hot buffer is an anonymous mapping (a
/// large bytearray: malloc maps it, as it maps PyTorch's and NumPy's large arrays) names the
/// line that made it (#42 item 1): in the report's first line, and in section 1 of the
/// text, the JSON and the HTML; the cold buffer's line is advised nowhere. (Before: the hot
/// row read `(…) 1 allocations` and "32.0 MiB of hot memory has no allocating call site".)
#[test]
fn a_plain_recording_names_the_line_of_a_hot_mapping_first() {
    common::require_root();
    let standin = common::standin("python-mapped");
    let (history, truth) = record_plainly(&standin, "mapped_lines.py");
    let hot = format!("mapped_lines.py:{} in main", truth["hot"]["line"]);
    let cold = format!("mapped_lines.py:{} in main", truth["cold"]["line"]);
    let report = |args: &[&str]| report_of(&history, args);
    let text = report(&[]);
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("Pin the allocation made at ") && first.contains(&hot),
        "{text}"
    );
    let section = text
        .split("\n1. ")
        .nth(1)
        .and_then(|rest| rest.split("\n2. ").next())
        .expect("section 1");
    assert!(section.contains(&hot), "{section}");
    assert!(!section.contains("no allocating call site"), "{section}");
    let json: serde_json::Value = serde_json::from_str(&report(&["--json"])).expect("JSON");
    assert!(
        json["headline"].as_str().is_some_and(|h| h.contains(&hot)),
        "{json}"
    );
    let sites = json["pin_sites"].as_array().expect("pin sites");
    assert_eq!(sites.len(), 1, "{sites:?}");
    assert_eq!(sites[0]["python_line"], hot.as_str());
    assert_eq!(sites[0]["transfers"], truth["hot"]["transfers"]);
    assert_eq!(json["untracked_hot_bytes"], 0);
    let page = standin.dir.join("mapped.html");
    report(&["--html", page.to_str().expect("a path")]);
    let html = std::fs::read_to_string(&page).expect("the page");
    let pin = html
        .split("1. What to pin")
        .nth(1)
        .and_then(|rest| rest.split("2. Pinned and wasted").next())
        .expect("section 1 of the page");
    assert!(pin.contains(&hot), "{pin}");
    assert!(html.contains("class=\"headline\">Pin the allocation made at "));
    for advice in [section, pin] {
        assert!(!advice.contains(&format!("{cold} (")), "{advice}");
    }
}

/// With `--libc-malloc`, a large `malloc` is a libc block and the mapping malloc makes for
/// it: both carry the program's line (the frames sent for the mapping are kept apart from
/// those the call's entry sent, which the mapping took before: PyTorch's `torch.empty`
/// tensors had no line on the H200).
#[test]
fn a_libc_block_and_the_mapping_it_makes_both_have_the_programs_line() {
    common::require_root();
    let standin = common::standin("python-libc");
    let history = standin.dir.join("libc.hotpin");
    let output = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .args(["record", "--libc-malloc", "-o"])
        .arg(&history)
        .args(["--", "python3"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/mapped_lines.py"))
        .arg(&standin.runtime)
        .env("LD_LIBRARY_PATH", &standin.dir)
        .output()
        .expect("run tracer record");
    assert!(output.status.success(), "{output:?}");
    let truth = truth_of(&output.stdout);
    let saved = hotpin_history::dump::read(&history).expect("history");
    let file = truth["file"].as_str().expect("file");
    for buffer in ["hot", "cold"] {
        let size = truth[buffer]["size"].as_u64().expect("size");
        let line = (
            file.to_owned(),
            truth[buffer]["line"].as_u64().expect("line"),
            "main".to_owned(),
        );
        for kind in [AllocKind::Pageable, AllocKind::Mmap] {
            // bytearray asks for one byte more; malloc maps a page more.
            let made: Vec<_> = saved
                .allocations()
                .iter()
                .filter(|a| a.kind == kind && (size..=size + 8192).contains(&a.size))
                .collect();
            assert_eq!(made.len(), 1, "{buffer} {kind:?}: {made:?}");
            let python = python_lines(&saved, made[0].id);
            assert_eq!(python.first(), Some(&line), "{buffer} {kind:?}: {python:?}");
        }
    }
}

/// A framework's pinned staging buffer that is hot (CuPy copies a NumPy array on the CPU into
/// its pinned pool's block, then copies that) is advised where the change is: the program's
/// line that passes its arrays, their bytes copied once more on the CPU (#42 item 4), first in
/// the report and in section 1 of the text, JSON and HTML. (Before: the first line asked to
/// pin the staging buffer, pinned already.)
#[test]
fn a_hot_framework_staging_buffer_names_the_programs_line() {
    common::require_root();
    let standin = common::standin("python-staged");
    let (history, truth) = record_plainly(&standin, "staged_lines.py");
    let user = format!("staged_lines.py:{} in main", truth["line"]);
    let advice = format!("Put the arrays passed at {user} in pinned memory");
    let report = |args: &[&str]| report_of(&history, args);
    let text = report(&[]);
    assert!(text.starts_with(&advice), "{text}");
    assert!(text.contains("stager's pinned staging buffer"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&report(&["--json"])).expect("JSON");
    let staging = json["pin_sites"]
        .as_array()
        .expect("pin sites")
        .iter()
        .find_map(|site| site.get("staging").filter(|s| !s.is_null()))
        .cloned()
        .unwrap_or_else(|| panic!("no staging advice: {json}"));
    assert_eq!(staging["framework"], "stager");
    assert_eq!(staging["user_line"], user.as_str());
    assert_eq!(staging["cpu_copy_bytes"], truth["bytes"]);
    let page = standin.dir.join("staged.html");
    report(&["--html", page.to_str().expect("a path")]);
    let html = std::fs::read_to_string(&page).expect("the page");
    assert!(html.contains(&advice), "the HTML report says it too");
}
