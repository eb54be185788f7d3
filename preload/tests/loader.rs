//! `hotpin run` beside the dynamic loader (#40): a program loads, with dlopen, libraries that
//! have thread-local storage of their own and whose initialisers allocate above the floor and
//! grow that block with realloc (what importing scikit-learn's extensions does). The loader
//! then calls the allocator from inside itself, to grow each thread's table of thread-local
//! blocks. On glibc 2.39 the interposer's answer to such a call touched its own thread-local
//! state, which made the loader grow the table again, until the stack ran out (SIGSEGV in
//! ld-linux, `import sklearn` in auto mode). Every mode must run the program to the end with
//! its results right, and the loader's calls must reach libc untouched (`loader_calls`).
//! Against the CUDA stand-in (a test fixture, not CUDA); needs no root.

use std::{path::Path, process::Command};

use serde_json::Value;

mod common;

/// Libraries loaded: far past the loader's spare room in each thread's table (14), so it is
/// grown several times, from both threads.
const LIBRARIES: usize = 48;

/// Builds tests/c/dlopen_tls_lib.c as DIR/libtls_0.so ... libtls_{N-1}.so.
fn build_libraries(dir: &Path) {
    let source = format!("{}/tests/c/dlopen_tls_lib.c", env!("CARGO_MANIFEST_DIR"));
    for id in 0..LIBRARIES {
        let status = Command::new("cc")
            .args(["-O1", "-shared", "-fPIC", &format!("-DID={id}"), "-o"])
            .arg(dir.join(format!("libtls_{id}.so")))
            .arg(&source)
            .status()
            .expect("run cc");
        assert!(
            status.success(),
            "compiling {source} as library {id} failed"
        );
    }
}

/// The report of the one process a run made.
fn report(prefix: &Path) -> Value {
    common::reports(prefix)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no report {}.<pid>.json", prefix.display()))
}

#[test]
fn libraries_that_allocate_while_dlopen_loads_them_run_under_every_mode() {
    let setup = common::compile("loader", "dlopen_tls");
    build_libraries(&setup.dir);
    let history = setup.dir.join("learned.hotpin");
    // (Use mode is left out: it needs a recorded history, and auto mode writes none for a
    // program that copies nothing.)
    let runs: [(&str, &[&str]); 4] = [
        ("auto-first", &["--mode", "auto"]),
        ("auto-again", &["--mode", "auto"]),
        ("pin-all", &["--mode", "pin-all"]),
        ("pin-none", &["--mode", "pin-none"]),
    ];
    for (name, args) in runs {
        let prefix = setup.dir.join(name);
        let output = Command::new(env!("CARGO_BIN_EXE_hotpin"))
            .arg("run")
            .args(args)
            .arg("--history")
            .arg(&history)
            .arg("--report")
            .arg(&prefix)
            .arg("--")
            .arg(&setup.program)
            .arg(&setup.dir)
            .arg(LIBRARIES.to_string())
            .env("LD_LIBRARY_PATH", &setup.standin.dir)
            .env("XDG_STATE_HOME", &setup.dir)
            .env_remove("HOTPIN_LEASE_SOCKET")
            .output()
            .expect("run hotpin");
        assert!(
            output.status.success(),
            "{name}: {:?}, stderr: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        common::assert_computed_right(&output);
        let verdict: Value = serde_json::from_str(
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .last()
                .unwrap_or_default(),
        )
        .expect("the verdict");
        assert_eq!(verdict["checks"], LIBRARIES, "{name}: {verdict}");
        let counters = &report(&prefix)["counters"];
        assert!(
            counters["loader_calls"].as_u64() > Some(0),
            "{name}: the loader's own allocator calls were not told apart: {counters}"
        );
        if name == "auto-first" {
            // Each library's block was judged: the program's own allocations still are.
            assert!(
                counters["pageable"].as_u64() >= Some(LIBRARIES as u64),
                "{name}: {counters}"
            );
        }
    }
}
