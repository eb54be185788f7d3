//! Transparency: a program computes under `hotpin run` exactly what it computes without it.
//!
//! The suite in tests/c/transparency/ is unmodified C programs that check their own results,
//! each relying only on what CUDA promises for memory as the program allocated it (an async
//! copy from pageable memory may have its source overwritten at once, one into pageable
//! memory may be read at once, pinned memory may be captured into a graph and mapped, ...).
//! They run against the CUDA stand-in (a test fixture, not CUDA), which models those rules:
//! copies of pinned memory complete later on a stream worker, pageable ones are staged or
//! synchronous, stream capture refuses pageable memory. Each program runs plain, then under
//! every mode (profile, use from that profile, pin-all, pin-none), and must report no
//! mismatch and answer every question as it did plain. The interposer's counters show that
//! each mode did change the memory the checks touch (promoted or demoted it), so the checks
//! test the interposer, not a run it left alone.
//!
//! Needs root: profile mode runs the tracer, which loads eBPF programs.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use serde_json::Value;

/// The programs, and the interposer counters that must be above zero in pin-all mode (which
/// promotes all their large pageable memory) and in pin-none mode (which demotes all their
/// pinned requests): the mechanisms each one exercises.
const PROGRAMS: [(&str, &[&str], &[&str]); 8] = [
    ("h2d_reuse", &["promoted", "copies_waited"], &[]),
    ("d2h_read", &["promoted", "copies_waited"], &[]),
    ("free_reuse", &["copies_waited", "cache_hits"], &[]),
    ("cache_handoff", &["copies_waited", "cache_hits"], &[]),
    (
        "pinned_queries",
        &["questions_hidden"],
        &["demoted", "pinned_on_demand"],
    ),
    (
        "mapped_capture",
        &["captures_refused"],
        &["demoted", "pinned_on_demand"],
    ),
    ("threads", &["copies_waited"], &[]),
    ("forked", &["copies_waited"], &[]),
];

struct Suite {
    dir: PathBuf,
    standin: cuda_standin::Scratch,
}

fn suite(name: &str) -> Suite {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "profile mode runs the tracer, which loads eBPF programs: run as root"
    );
    let standin = cuda_standin::Scratch::new(&format!("transparency-{name}"))
        .expect("install the CUDA stand-in");
    Suite {
        dir: standin.dir.clone(),
        standin,
    }
}

impl Suite {
    /// Compiles tests/c/transparency/PROGRAM.c against the stand-in's runtime and driver.
    fn build(&self, program: &str) -> PathBuf {
        let source = format!(
            "{}/tests/c/transparency/{program}.c",
            env!("CARGO_MANIFEST_DIR")
        );
        let binary = self.dir.join(program);
        let status = Command::new("cc")
            .args(["-O1", "-Wall", "-Wextra", "-Werror", "-pthread", "-o"])
            .arg(&binary)
            .arg(&source)
            .arg(&self.standin.runtime)
            .arg(&self.standin.driver)
            .arg("-ldl")
            .arg(format!("-Wl,-rpath,{}", self.dir.display()))
            .status()
            .expect("run cc");
        assert!(status.success(), "compiling {source} failed");
        binary
    }

    /// The program alone, or under `hotpin run ARGS`.
    fn run(&self, binary: &Path, hotpin: Option<&[&str]>) -> Output {
        let mut command = match hotpin {
            Some(args) => {
                let mut command = Command::new(env!("CARGO_BIN_EXE_hotpin"));
                command.arg("run").args(args).arg("--").arg(binary);
                command
            }
            None => Command::new(binary),
        };
        command
            .env("LD_LIBRARY_PATH", &self.standin.dir)
            .output()
            .expect("run the program")
    }
}

/// The program's own verdict (its one JSON line), after checking it found nothing wrong.
fn verdict(program: &str, config: &str, output: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stdout
        .lines()
        .rev()
        .find(|line| line.starts_with('{'))
        .unwrap_or_else(|| panic!("{program} ({config}) printed no verdict:\n{stdout}\n{stderr}"));
    let verdict: Value = serde_json::from_str(line).expect("the verdict is JSON");
    assert!(
        output.status.success() && verdict["mismatches"] == 0,
        "{program} computed something else under {config}: {verdict:#}\nstatus {:?}\n{stderr}",
        output.status
    );
    assert!(
        verdict["checks"].as_u64().is_some_and(|n| n > 0),
        "{program} ({config}) checked nothing: {verdict}"
    );
    verdict
}

/// What a program saw: its details, less where libc put its blocks (whether the next
/// allocation got the block just freed is libc's choice, and hotpin's cache makes it too).
fn answers(verdict: &Value) -> Value {
    let mut details = verdict["details"].clone();
    if let Some(details) = details.as_object_mut() {
        details.remove("next_allocation_was_freed_block");
    }
    details
}

/// The interposer's counters from the main process's report (`PREFIX.<pid>.json`; a forked
/// child writes none).
fn counters(prefix: &Path) -> Value {
    let dir = prefix.parent().expect("a folder");
    let name = prefix
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned();
    let mut reports: Vec<Value> = std::fs::read_dir(dir)
        .expect("read the folder")
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let file = entry.file_name().to_string_lossy().into_owned();
            (file.starts_with(&format!("{name}.")) && file.ends_with(".json")).then(|| {
                serde_json::from_slice(&std::fs::read(entry.path()).expect("read the report"))
                    .expect("the report is JSON")
            })
        })
        .collect();
    assert_eq!(reports.len(), 1, "one report for {}", prefix.display());
    reports.remove(0)["counters"].clone()
}

fn counter(counters: &Value, name: &str) -> u64 {
    counters[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name} in {counters}"))
}

/// One program in every configuration: the same verdict, no mismatch, and the interposer did
/// change its memory.
fn check_program(suite: &Suite, program: &str, pin_all: &[&str], pin_none: &[&str]) {
    let binary = suite.build(program);
    let plain = verdict(program, "plain", &suite.run(&binary, None));

    let history = suite.dir.join(format!("{program}.hotpin"));
    let history_arg = history.to_str().expect("UTF-8");
    let profiled = suite.run(
        &binary,
        Some(&["--mode", "profile", "--history", history_arg]),
    );
    let profile = verdict(program, "profile", &profiled);

    for (mode, extra) in [
        ("use", &["--history", history_arg][..]),
        ("pin-all", &[][..]),
        ("pin-none", &[][..]),
    ] {
        let prefix = suite.dir.join(format!("{program}.{mode}"));
        let prefix_arg = prefix.to_str().expect("UTF-8");
        let mut args = vec!["--mode", mode, "--report", prefix_arg];
        args.extend_from_slice(extra);
        let seen = verdict(program, mode, &suite.run(&binary, Some(&args)));
        assert_eq!(
            answers(&seen),
            answers(&plain),
            "{program} saw other answers under {mode} than plain"
        );
        let counters = counters(&prefix);
        eprintln!("{program} under {mode}: {counters}");
        let exercised = match mode {
            "pin-all" => pin_all,
            "pin-none" => pin_none,
            _ => &[],
        };
        for name in exercised {
            assert!(
                counter(&counters, name) > 0,
                "{program} under {mode}: {name} is 0, so the check did not test what it is \
                 for: {counters:#}"
            );
        }
    }
    assert_eq!(answers(&profile), answers(&plain), "{program}: profile");
}

#[test]
fn programs_compute_the_same_under_every_mode() {
    let suite = suite("all");
    for (program, pin_all, pin_none) in PROGRAMS {
        check_program(&suite, program, pin_all, pin_none);
    }
}
