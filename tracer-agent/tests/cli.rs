//! The `tracer` binary as a user runs it: record a command, then report on the dump. Needs
//! root (the tracer loads eBPF). Uses the CUDA stand-in (a test fixture, not CUDA).

mod common;

use std::process::{Command, Output};

use hotpin_history::history::AllocKind;

#[test]
fn record_a_command_then_report_on_its_history() {
    common::require_root();
    let standin = common::standin("cli");
    let dir = standin.dir.clone();
    let history = dir.join("run.hotpin");
    let bench = common::bench(
        &standin,
        &[
            "--mode",
            "profile",
            "--hot",
            "2",
            "--cold",
            "4",
            "--size",
            "64K",
            "--transfers",
            "20",
        ],
    );
    let output = record_bench(&bench, &[], &history);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("the command's own output passes through");
    assert_eq!(summary["copies"], 2 * (2 * 20 + 4));
    assert!(
        stderr.contains("88 transfers") && stderr.contains("0 events lost"),
        "{stderr}"
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&history)
        .expect("history written")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o600,
        "the dump holds another process's addresses"
    );

    let report = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .args(["report", "--json"])
        .arg(&history)
        .output()
        .expect("run tracer report");
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).expect("JSON report");
    assert_eq!(report["transfers"], 88);
    assert_eq!(
        report["pin_sites"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
    assert_eq!(report["pin_bytes"], 2 * 64 * 1024, "the two hot buffers");
    assert!(
        report["pin_sites"][0]["call_site"]
            .as_str()
            .is_some_and(|s| s.contains("alloc_host")),
        "{report}"
    );

    let bad = dir.join("bad.hotpin");
    std::fs::write(&bad, b"not a history").expect("write");
    let refused = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .arg("report")
        .arg(&bad)
        .output()
        .expect("run");
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && message.contains("not a hotpin history"),
        "{message}"
    );

    let missing = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .args(["--pid", "999999999"])
        .output()
        .expect("run");
    let message = String::from_utf8_lossy(&missing.stderr);
    assert!(
        !missing.status.success() && message.contains("does not exist"),
        "{message}"
    );
}

#[test]
fn sigterm_while_events_stream_leaves_a_whole_history() {
    common::require_root();
    let standin = common::standin("cli-sigterm");
    // A workload copying for minutes, traced by --pid and stopped with SIGTERM mid-stream.
    let mut workload = common::spawn_bench(&common::long_bench(&standin));
    let history = standin.dir.join("streaming.hotpin");
    let mut tracer = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .args(["--pid", &workload.id().to_string(), "-o"])
        .arg(&history)
        .arg("--cuda-runtime")
        .arg(&standin.runtime)
        .arg("--cuda-driver")
        .arg(&standin.driver)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start tracer");
    // Recording (its start takes 1-2 s, the verifier's), then streaming for a second.
    let mut said = std::io::BufReader::new(tracer.stderr.take().expect("stderr"));
    let mut stderr = common::until_recording(&mut said);
    std::thread::sleep(std::time::Duration::from_secs(1));
    // SAFETY: kill has no memory preconditions; the pid is our child.
    unsafe { libc::kill(tracer.id() as i32, libc::SIGTERM) };
    std::io::Read::read_to_string(&mut said, &mut stderr).expect("read the tracer");
    let output = tracer.wait_with_output().expect("wait for tracer");
    if let Some(status) = workload.try_wait().expect("poll") {
        let output = workload.wait_with_output();
        panic!(
            "the workload must run on untraced after the tracer stops; it ended: {status:?}, {output:?}"
        );
    }
    workload.kill().expect("stop the workload");
    let _ = workload.wait();
    assert!(
        output.status.success(),
        "tracer failed on SIGTERM: {stderr}"
    );
    let saved = hotpin_history::dump::read(&history).expect("a whole, loadable history");
    let stats = saved.stats();
    assert!(
        stats.transfers > 1000,
        "events streamed before the signal: {stats:?}"
    );
    assert_eq!(stats.lost_events(), 0, "{stats:?}");
    assert_eq!(stats.partial_calls, 0, "{stats:?}");
    let leftovers: Vec<_> = std::fs::read_dir(&standin.dir)
        .expect("list")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "no temporary dump left: {leftovers:?}"
    );
}

/// `tracer record FLAGS -o HISTORY -- transfer-bench ...`, which must succeed.
fn record_bench(bench: &common::Bench, flags: &[&str], history: &std::path::Path) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .arg("record")
        .args(flags)
        .arg("-o")
        .arg(history)
        .arg("--")
        .arg(common::workload())
        .args(&bench.args)
        .envs(bench.env.iter().cloned())
        .output()
        .expect("run tracer record");
    assert!(
        output.status.success(),
        "tracer record failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Ends this test's long_bench, found by its stand-in directory (unique to the test) on its
/// command line: a pattern shared by other tests' commands (their tracers included) would
/// kill those too, and did.
fn kill_workload(standin: &cuda_standin::Installed) {
    let pattern = format!("--cudart {}", standin.runtime.display());
    let killed = Command::new("pkill")
        .args(["-KILL", "-f", "--", &pattern])
        .status()
        .expect("run pkill");
    assert!(
        killed.success(),
        "the workload ran on and was ended: {killed}"
    );
}

/// `tracer record -- long_bench` with these arguments, started with stderr captured.
fn record_long_bench(standin: &cuda_standin::Installed, args: &[&std::ffi::OsStr]) -> Command {
    let bench = common::long_bench(standin);
    let mut tracer = Command::new(env!("CARGO_BIN_EXE_tracer"));
    tracer
        .arg("record")
        .args(args)
        .arg("--")
        .arg(common::workload())
        .args(&bench.args)
        .envs(bench.env.iter().cloned())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    tracer
}

#[test]
fn an_unwritable_output_is_refused_before_the_command_starts() {
    common::require_root();
    let standin = common::standin("cli-bad-output");
    let marker = standin.dir.join("the-command-ran");
    let _ = std::fs::remove_file(&marker);
    let blocker = standin.dir.join("a-file");
    std::fs::write(&blocker, b"not a directory").expect("write a file");
    let cases = [
        (standin.dir.join("no/such/dir/x.json"), "no such file"),
        (standin.dir.clone(), "is a directory"),
        (blocker.join("x.hotpin"), "not a directory"),
    ];
    for (output, why) in cases {
        let run = Command::new(env!("CARGO_BIN_EXE_tracer"))
            .args(["record", "-o"])
            .arg(&output)
            .args(["--", "touch"])
            .arg(&marker)
            .output()
            .expect("run tracer");
        let stderr = String::from_utf8_lossy(&run.stderr).to_lowercase();
        assert!(!run.status.success(), "{}: {stderr}", output.display());
        assert!(
            stderr.contains(why) && stderr.contains("could not be written"),
            "a clear error naming the cause: {stderr}"
        );
        assert_eq!(
            stderr.matches(why).count(),
            1,
            "the cause is printed once: {stderr}"
        );
        assert!(
            !marker.exists(),
            "the command must not start when its recording could not be saved"
        );
    }
}

#[test]
fn a_failed_final_write_falls_back_to_the_current_directory() {
    common::require_root();
    let standin = common::standin("cli-fallback");
    let gone = standin.dir.join("removed-during-the-run");
    let cwd = standin.dir.join("cwd");
    for dir in [&gone, &cwd] {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    let output = gone.join("run.hotpin");
    let mut tracer = record_long_bench(
        &standin,
        &[
            "-o".as_ref(),
            output.as_os_str(),
            "--duration".as_ref(),
            "3".as_ref(),
        ],
    );
    let mut tracer = tracer.current_dir(&cwd).spawn().expect("start tracer");
    std::thread::sleep(std::time::Duration::from_secs(1));
    std::fs::remove_dir_all(&gone).expect("remove the output directory mid-run");
    // After --duration the command runs on untraced, holding the tracer's stderr: it is
    // ended once the tracer has exited, so the output can be read to its end.
    let started = std::time::Instant::now();
    while tracer.try_wait().expect("poll the tracer").is_none() {
        assert!(
            started.elapsed().as_secs() < 60,
            "the tracer ran over a minute"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    kill_workload(&standin);
    let run = tracer.wait_with_output().expect("the tracer's output");
    let stderr = String::from_utf8_lossy(&run.stderr);
    let fallback = cwd.join("run.hotpin");
    assert!(
        !run.status.success(),
        "the requested file was not written: not a success: {stderr}"
    );
    assert!(
        stderr.contains("was written to ./run.hotpin instead"),
        "the fallback is named: {stderr}"
    );
    let saved = hotpin_history::dump::read(&fallback).expect("the fallback loads");
    assert!(saved.stats().transfers > 0, "{:?}", saved.stats());
    assert_eq!(saved.meta().checkpoint_unix_s, None, "a final history");
}

#[test]
fn a_tracer_killed_with_sigkill_leaves_its_last_checkpoint() {
    common::require_root();
    let standin = common::standin("cli-sigkill");
    let history = standin.dir.join("killed.hotpin");
    let _ = std::fs::remove_file(&history);
    let mut tracer = record_long_bench(
        &standin,
        &[
            "-o".as_ref(),
            history.as_os_str(),
            "--checkpoint".as_ref(),
            "1".as_ref(),
        ],
    )
    .spawn()
    .expect("start tracer");
    // Killed once a checkpoint was written, and a second later (its start takes 1-2 s, the
    // verifier's: a fixed wait raced it).
    let start = std::time::Instant::now();
    while !history.exists() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "no checkpoint was written"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    tracer.kill().expect("SIGKILL the tracer");
    let _ = tracer.wait();
    // The workload it started runs on; the kernel detached the probes with the tracer.
    kill_workload(&standin);
    let saved = hotpin_history::dump::read(&history).expect("the last checkpoint loads");
    let written = saved
        .meta()
        .checkpoint_unix_s
        .expect("marked as a checkpoint");
    assert!(
        hotpin_history::dump::unix_now().saturating_sub(written) < 30,
        "written moments ago: {written}"
    );
    assert!(
        saved.stats().transfers > 1000,
        "copies recorded before the kill: {:?}",
        saved.stats()
    );
    let report = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .arg("report")
        .arg(&history)
        .output()
        .expect("tracer report");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(report.status.success(), "{report:?}");
    assert!(
        text.contains("CHECKPOINT") && text.contains("s ago"),
        "the report says it is a checkpoint and how old: {text}"
    );
}

#[test]
fn a_verbose_recording_exports_as_a_trace_a_json_parser_reads() {
    common::require_root();
    let standin = common::standin("cli-export");
    let history = standin.dir.join("timeline.json");
    let bench = common::bench(
        &standin,
        &[
            "--mode",
            "pinned",
            "--hot",
            "2",
            "--cold",
            "3",
            "--size",
            "64K",
            "--transfers",
            "10",
        ],
    );
    record_bench(&bench, &["--verbose"], &history);
    let trace_path = standin.dir.join("timeline.trace.json");
    let exported = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .arg("export")
        .arg(&history)
        .output()
        .expect("run tracer export");
    assert!(exported.status.success(), "{exported:?}");

    let saved = hotpin_history::dump::read(&history).expect("the history");
    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&trace_path).expect("the trace is written"))
            .expect("the trace is JSON");
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    for event in events {
        assert!(event["ph"].is_string() && event["pid"].is_u64(), "{event}");
        if event["ph"] != "M" {
            assert!(event["ts"].as_f64().is_some_and(|ts| ts >= 0.0), "{event}");
            assert!(event["tid"].as_u64().is_some_and(|tid| tid > 0), "{event}");
        }
    }
    // A track per allocation with a timeline (its life, one slice), and one per thread that
    // copied, named for it.
    let allocation_tracks: std::collections::BTreeSet<u64> = events
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| e["tid"].as_u64().expect("tid"))
        .collect();
    let lives = events.iter().filter(|e| e["ph"] == "X").count();
    assert_eq!(lives, allocation_tracks.len());
    assert!(lives >= 5, "the 5 pinned buffers at least: {lives}");
    let thread_tracks: Vec<u64> = events
        .iter()
        .filter(|e| {
            e["name"] == "thread_name"
                && e["args"]["name"]
                    .as_str()
                    .is_some_and(|n| n == format!("thread {}", e["tid"]))
        })
        .map(|e| e["tid"].as_u64().expect("tid"))
        .collect();
    assert_eq!(thread_tracks.len(), 1, "the bench copies from one thread");
    // Every copy is on its allocation's track and on its thread's: the bytes on each add up
    // to the history's.
    let copied_on = |tracks: &dyn Fn(u64) -> bool| -> u64 {
        events
            .iter()
            .filter(|e| {
                e["ph"] == "i"
                    && e["name"].as_str().is_some_and(|n| n.starts_with("copy"))
                    && tracks(e["tid"].as_u64().expect("tid"))
            })
            .map(|e| e["args"]["bytes"].as_u64().expect("bytes"))
            .sum()
    };
    let stats = saved.stats();
    let on_memory = copied_on(&|tid| allocation_tracks.contains(&tid));
    assert_eq!(on_memory, stats.h2d_bytes + stats.d2h_bytes, "{stats:?}");
    assert_eq!(on_memory, 2 * (2 * 10 + 3) * 64 * 1024);
    assert_eq!(copied_on(&|tid| tid == thread_tracks[0]), on_memory);

    // A summary history has no timelines: a clear error, no file.
    let summary = standin.dir.join("summary.hotpin");
    record_bench(&bench, &[], &summary);
    let refused = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .arg("export")
        .arg(&summary)
        .output()
        .expect("run tracer export");
    assert_refused(&refused, "--verbose");
}

/// A program that allocated everything before `tracer --pid` attached: its copies are credited
/// to the memory the tracer found in its map (the heap, a malloc'd mapping), not untracked.
#[test]
fn memory_from_before_a_pid_attach_is_credited_with_its_copies() {
    use std::io::{BufRead, BufReader};
    common::require_root();
    let standin = common::standin("cli-pre-attach");
    let program = common::compile_c(&standin, "pre_attach");
    let go = standin.dir.join("go");
    let mut workload = Command::new(&program)
        .arg(&standin.runtime)
        .arg(&go)
        .env("LD_LIBRARY_PATH", &standin.dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the workload");
    let mut ready = String::new();
    BufReader::new(workload.stdout.take().expect("stdout"))
        .read_line(&mut ready)
        .expect("read READY");
    assert_eq!(ready.trim(), "READY");
    let history = standin.dir.join("pre-attach.json");
    let mut tracer = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .args(["record", "--pid", &workload.id().to_string(), "-o"])
        .arg(&history)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start tracer");
    let mut stderr = BufReader::new(tracer.stderr.take().expect("stderr"));
    let said = common::until_recording(&mut stderr);
    std::fs::write(&go, b"").expect("open the gate");
    let status = workload.wait().expect("wait for the workload");
    assert!(status.success(), "workload failed: {status}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).expect("read the tracer");
    let ended = tracer.wait().expect("wait for tracer");
    assert!(ended.success(), "tracer failed: {said}{rest}");

    let saved = hotpin_history::dump::read(&history).expect("history");
    let stats = saved.stats();
    assert_eq!(stats.transfers, 25, "{stats:?}");
    assert_eq!(
        stats.untracked_transfers, 0,
        "every copy credited: {stats:?}"
    );
    assert_eq!(stats.h2d_bytes, 10 * (1 << 20) + 10 * 4096);
    assert_eq!(stats.d2h_bytes, 5 * (1 << 20));
    let credited = |count: u64| {
        saved
            .allocations()
            .iter()
            .find(|a| a.stats.transfers == count)
            .unwrap_or_else(|| panic!("an allocation with {count} copies: {stats:?}"))
    };
    let big = credited(15);
    assert!(
        big.pre_existing && big.kind == AllocKind::Mmap && big.size >= 8 << 20,
        "the large block's mapping, seeded: {big:?}"
    );
    let little = credited(10);
    assert!(
        little.pre_existing && little.kind == AllocKind::Heap,
        "the small block's heap, seeded: {little:?}"
    );
}

/// A pinned block of which copies use one slice (#42): the recording keeps the part they
/// touched, and the report's first line says to pin only that part.
#[test]
fn a_pinned_block_copied_in_one_slice_is_named_first_with_the_part_copied() {
    common::require_root();
    let standin = common::standin("cli-partly-copied");
    let program = common::compile_c(&standin, "partly_copied");
    let history = standin.dir.join("partly.hotpin");
    let recorded = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .args(["record", "-o"])
        .arg(&history)
        .arg("--")
        .arg(&program)
        .arg(&standin.runtime)
        .env("LD_LIBRARY_PATH", &standin.dir)
        .output()
        .expect("run tracer record");
    assert!(
        recorded.status.success(),
        "{}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    let saved = hotpin_history::dump::read(&history).expect("history");
    let dataset = saved
        .allocations()
        .iter()
        .find(|a| a.kind == AllocKind::Pinned && a.size == 128 << 20)
        .expect("the pinned dataset");
    assert_eq!(dataset.stats.transfers, 20);
    assert_eq!(saved.copied_extent(dataset.id), Some((64 << 20, 80 << 20)));
    let report = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .arg("report")
        .arg(&history)
        .output()
        .expect("run tracer report");
    assert!(report.status.success());
    let text = String::from_utf8_lossy(&report.stdout);
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(
            "Pin only the part that is copied of the allocation made at partly_copied+0x"
        ) && first.ends_with(
            "128.0 MiB pinned, its 20 copies touched 16.0 MiB of it (at 64.0 MiB), 112.0 MiB \
                 pinned and never copied"
        ),
        "{text}"
    );
    assert!(
        text.contains("128.0 MiB pinned (128.0 MiB by the program, 0 B by hotpin); 16.0 MiB of it copied, 112.0 MiB never"),
        "{text}"
    );
}

/// Asserts that `run` failed and said `why` on stderr.
fn assert_refused(run: &Output, why: &str) {
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        !run.status.success() && stderr.contains(why),
        "expected a failure saying {why:?}: {stderr}"
    );
}

/// `tracer ARGS`, as a user runs it.
fn tracer(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tracer"))
        .args(args)
        .output()
        .expect("run tracer")
}

#[test]
fn outputs_that_are_not_regular_files_are_refused_and_left_as_they_are() {
    common::require_root();
    let standin = common::standin("cli-not-regular");
    let dir = standin.dir.clone();
    let marker = dir.join("the-command-ran");
    let target = dir.join("target.hotpin");
    std::fs::write(&target, b"keep").expect("write the link's target");
    let link = dir.join("link.hotpin");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    // A device of our own (the machine's /dev/null is not put at risk by the test).
    let device = dir.join("mynull");
    let _ = std::fs::remove_file(&device);
    let name = std::ffi::CString::new(device.as_os_str().as_encoded_bytes()).expect("C path");
    // SAFETY: a NUL-terminated path; makedev(1, 3) is the null device.
    let made = unsafe { libc::mknod(name.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)) };
    assert_eq!(made, 0, "mknod: {}", std::io::Error::last_os_error());
    for (output, why) in [(&link, "symbolic link"), (&device, "character device")] {
        let run = tracer(&[
            "record".as_ref(),
            "-o".as_ref(),
            output.as_os_str(),
            "--".as_ref(),
            "touch".as_ref(),
            marker.as_os_str(),
        ]);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(
            !run.status.success() && stderr.contains(why),
            "{why}: {stderr}"
        );
        assert!(!marker.exists(), "nothing started for an output refused");
    }
    let link_type = std::fs::symlink_metadata(&link).expect("link").file_type();
    assert!(link_type.is_symlink(), "the link is still a link");
    assert_eq!(std::fs::read(&target).expect("target"), b"keep");
    use std::os::unix::fs::FileTypeExt as _;
    let device_type = std::fs::symlink_metadata(&device)
        .expect("device")
        .file_type();
    assert!(device_type.is_char_device(), "the device is still a device");
}

#[test]
fn an_immutable_output_is_refused_before_the_command_starts() {
    common::require_root();
    let standin = common::standin("cli-immutable");
    let marker = standin.dir.join("the-command-ran");
    let output = standin.dir.join("immutable.hotpin");
    std::fs::write(&output, b"a good history").expect("write");
    let chattr = |flag: &str| {
        let status = Command::new("chattr")
            .arg(flag)
            .arg(&output)
            .status()
            .expect("run chattr (e2fsprogs)");
        assert!(
            status.success(),
            "chattr {flag} {}: this test needs a file system with the immutable attribute",
            output.display()
        );
    };
    chattr("+i");
    let run = tracer(&[
        "record".as_ref(),
        "-o".as_ref(),
        output.as_os_str(),
        "--".as_ref(),
        "touch".as_ref(),
        marker.as_os_str(),
    ]);
    chattr("-i");
    assert_refused(&run, "could not be written");
    assert!(!marker.exists(), "the command must not start");
    assert_eq!(std::fs::read(&output).expect("output"), b"a good history");
}

#[test]
fn a_bad_command_line_gets_an_error_and_loses_nothing() {
    common::require_root();
    let standin = common::standin("cli-bad-line");
    let keep = standin.dir.join("keep.hotpin");
    std::fs::write(&keep, b"a good history").expect("write");
    let keep_arg = keep.as_os_str();
    for args in [
        &["record".as_ref()][..],
        &["record".as_ref(), "-o".as_ref(), keep_arg][..],
        &["record".as_ref(), "--report".as_ref(), "--".as_ref()][..],
    ] {
        let run = tracer(args);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_ne!(run.status.code(), Some(101), "no panic: {stderr}");
        assert!(!run.status.success(), "{args:?}: {stderr}");
        assert!(
            stderr.contains("--pid") && !stderr.contains("panicked"),
            "{stderr}"
        );
    }
    let run = tracer(&[
        "record".as_ref(),
        "-o".as_ref(),
        keep_arg,
        "--".as_ref(),
        "no-such-command-hotpin".as_ref(),
    ]);
    assert_refused(&run, "cannot find the command");
    assert_eq!(std::fs::read(&keep).expect("keep"), b"a good history");
}

/// Durations that are not a finite number of seconds within a year are refused before the
/// command starts, never a panic (#41 item 8: `--duration inf`, `NaN`, `1e20` and
/// `--checkpoint inf` exited 101, and `--duration inf` left the command running untraced).
#[test]
fn durations_that_cannot_be_waited_are_refused_before_the_command_starts() {
    let dir = std::env::temp_dir().join(format!("hotpin-durations-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a folder");
    let ran = dir.join("ran");
    for (option, value) in [
        ("--duration", "inf"),
        ("--duration", "NaN"),
        ("--duration", "1e20"),
        ("--duration=-1", ""),
        ("--checkpoint", "inf"),
    ] {
        let mut args: Vec<&std::ffi::OsStr> = vec!["record".as_ref(), option.as_ref()];
        if !value.is_empty() {
            args.push(value.as_ref());
        }
        args.extend([
            std::ffi::OsStr::new("--"),
            "touch".as_ref(),
            ran.as_os_str(),
        ]);
        let run = tracer(&args);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_ne!(
            run.status.code(),
            Some(101),
            "{option} {value}: a panic: {stderr}"
        );
        assert_refused(&run, "give a number of seconds");
        assert!(!ran.exists(), "{option} {value}: the command ran");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An output that is the history being read is refused, and the history kept (#41 item 10:
/// `tracer export -o H H` and `tracer report --html H H` wrote over it).
#[test]
fn an_output_that_is_its_own_input_is_refused_and_the_history_kept() {
    let dir = std::env::temp_dir().join(format!("hotpin-self-output-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a folder");
    let h = dir.join("h.hotpin");
    let history = hotpin_history::history::MemHistory::new();
    hotpin_history::dump::write(&history, &h, hotpin_history::dump::Format::Binary, false)
        .expect("write a history");
    let before = std::fs::read(&h).expect("read");
    for args in [
        vec![
            "export".as_ref(),
            "--format".as_ref(),
            "json".as_ref(),
            "-o".as_ref(),
            h.as_os_str(),
            h.as_os_str(),
        ],
        vec![
            "export".as_ref(),
            "-o".as_ref(),
            h.as_os_str(),
            h.as_os_str(),
        ],
        vec![
            "report".as_ref(),
            "--html".as_ref(),
            h.as_os_str(),
            h.as_os_str(),
        ],
    ] {
        let run = tracer(&args);
        assert_refused(&run, "is the history being");
        assert_eq!(
            std::fs::read(&h).expect("read"),
            before,
            "{args:?} changed the history"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tracer export -o -` and `-o /dev/stdout` write to standard output, in both formats
/// (#41 item 13: `/dev/stdout` was refused as a symbolic link, and `-` wrote a file named
/// `-`).
#[test]
fn export_writes_to_standard_output_for_a_dash_or_dev_stdout() {
    let dir = std::env::temp_dir().join(format!("hotpin-export-stdout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a folder");
    let h = dir.join("h.hotpin");
    // A verbose history: one buffer copied twice, its timeline kept.
    let mut history = hotpin_history::history::MemHistory::new();
    history.alloc(
        1,
        0x10000,
        4096,
        hotpin_history::history::AllocKind::Pageable,
        None,
        0,
    );
    for t in 0..2 {
        history.transfer(
            1,
            0xd000_0000,
            0x10000,
            4096,
            hotpin_registry::registry::CopyDirection::HostToDevice,
            t,
        );
    }
    hotpin_history::dump::write(&history, &h, hotpin_history::dump::Format::Binary, true)
        .expect("write a history");
    for output in ["-", "/dev/stdout"] {
        for format in ["json", "chrome"] {
            let run = Command::new(env!("CARGO_BIN_EXE_tracer"))
                .args(["export", "--format", format, "-o", output])
                .arg(&h)
                .current_dir(&dir)
                .output()
                .expect("run tracer");
            assert!(run.status.success(), "{output} {format}: {run:?}");
            let text: serde_json::Value =
                serde_json::from_slice(&run.stdout).expect("JSON on standard output");
            if format == "json" {
                hotpin_history::dump::decode(&run.stdout).expect("a history");
            } else {
                assert!(text.get("traceEvents").is_some(), "{text}");
            }
        }
    }
    assert!(!dir.join("-").exists(), "a file named - was written");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_ring_too_large_is_said_as_such() {
    common::require_root();
    let run = tracer(&[
        "record".as_ref(),
        "--ring-mib".as_ref(),
        "65536".as_ref(),
        "--".as_ref(),
        "true".as_ref(),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        !run.status.success() && stderr.contains("too large") && !stderr.contains("CAP_BPF"),
        "{stderr}"
    );
}

#[test]
fn a_recording_that_saw_no_cuda_call_leaves_an_existing_history() {
    common::require_root();
    let standin = common::standin("cli-empty");
    let keep = standin.dir.join("keep.hotpin");
    std::fs::write(&keep, b"a good history").expect("write");
    let record = |extra: &[&str]| {
        let mut args: Vec<&std::ffi::OsStr> = vec!["record".as_ref(), "-o".as_ref()];
        args.push(keep.as_os_str());
        args.extend(extra.iter().map(|a| std::ffi::OsStr::new(*a)));
        args.extend([std::ffi::OsStr::new("--"), std::ffi::OsStr::new("true")]);
        tracer(&args)
    };
    let run = record(&[]);
    assert_refused(&run, "left as it was");
    assert_eq!(std::fs::read(&keep).expect("keep"), b"a good history");
    let run = record(&["--replace-empty"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let history = hotpin_history::dump::read(&keep).expect("asked for: the empty history");
    assert_eq!(history.stats().calls, 0);
}

#[test]
fn a_command_killed_by_a_signal_passes_its_status_on() {
    common::require_root();
    let standin = common::standin("cli-signal");
    let out = standin.dir.join("killed.hotpin");
    let run = tracer(&[
        "record".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        "--".as_ref(),
        "sh".as_ref(),
        "-c".as_ref(),
        "kill -KILL $$".as_ref(),
    ]);
    assert_eq!(
        run.status.code(),
        Some(128 + libc::SIGKILL),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

/// An endless input is refused: one that is plainly no history from its first bytes
/// (`/dev/zero`, #41 item 13: it used to be read to the limit first), and one that begins as
/// a JSON history and never ends, at the limit.
#[test]
fn an_endless_input_is_refused_at_the_limit() {
    let run = tracer(&["report".as_ref(), "/dev/zero".as_ref()]);
    assert_refused(&run, "not a hotpin history");
    let dir = std::env::temp_dir().join(format!("hotpin-endless-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a folder");
    let fifo = dir.join("endless.json");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let mut writer = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{{ printf '{{'; exec yes ' '; }} > '{}'",
            fifo.display()
        ))
        .spawn()
        .expect("a writer that never ends");
    let run = tracer(&["report".as_ref(), fifo.as_os_str()]);
    let _ = writer.kill();
    let _ = writer.wait();
    assert_refused(&run, "limit");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn log_lines_carry_no_colour_codes_off_a_terminal() {
    common::require_root();
    let pid = std::process::id().to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .args(["probes", "--pid", &pid])
        .env("HOTPIN_LOG", "debug")
        .output()
        .expect("run tracer probes");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("DEBUG"), "some log lines: {stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "no ANSI escape in a pipe: {stderr:?}"
    );
}

#[test]
fn a_pid_recording_with_a_duration_says_when_it_ends() {
    common::require_root();
    let standin = common::standin("cli-duration");
    let mut bench = common::spawn_bench(&common::long_bench(&standin));
    let history = standin.dir.join("duration.hotpin");
    let run = tracer(&[
        "record".as_ref(),
        "--pid".as_ref(),
        bench.id().to_string().as_ref(),
        "--duration".as_ref(),
        "1".as_ref(),
        "-o".as_ref(),
        history.as_os_str(),
    ]);
    let _ = bench.kill();
    let _ = bench.wait();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains("it ends after 1 s"), "{stderr}");
}
