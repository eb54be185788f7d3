//! What the interposer's integration tests share: the CUDA stand-in (a test fixture, not
//! CUDA) installed in a folder of the test's own, and a C program of tests/c compiled
//! against it.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

pub struct Setup {
    pub dir: PathBuf,
    pub program: PathBuf,
    /// Last, so the folder goes after everything else: removed when the test passes.
    pub standin: cuda_standin::Scratch,
}

/// Fails at once where the interposer `hotpin run` would load is older than the sources it is
/// built from: `cargo test` rebuilds the `hotpin` binary but not the cdylib next to it, so a
/// test would run the interposer of an earlier build and prove nothing about this one.
/// `cargo build -p preload` (or `cargo xtask test`, which builds first) mends it.
pub fn interposer_is_current() {
    let hotpin = Path::new(env!("CARGO_BIN_EXE_hotpin"));
    let library = hotpin.with_file_name("libhotpin_preload.so");
    let built = std::fs::metadata(&library)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}: run `cargo build -p preload` first",
                library.display()
            )
        });
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let newest = [
        "preload/src",
        "policy/src",
        "allocator/src",
        "history/src",
        "lease/src",
    ]
    .iter()
    .filter_map(|dir| newest_source(&root.join(dir)))
    .max();
    if let Some((when, file)) = newest {
        assert!(
            when <= built,
            "{} is older than {}: run `cargo build -p preload` before these tests",
            library.display(),
            file.display()
        );
    }
}

/// The most recently changed `.rs` file under `dir`: when, and which.
fn newest_source(dir: &Path) -> Option<(std::time::SystemTime, PathBuf)> {
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).ok()?.filter_map(Result::ok) {
        let path = entry.path();
        let found = if path.is_dir() {
            newest_source(&path)
        } else if path.extension().is_some_and(|e| e == "rs") {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .map(|t| (t, path))
        } else {
            None
        };
        if let Some(found) = found
            && newest.as_ref().is_none_or(|n| found.0 > n.0)
        {
            newest = Some(found);
        }
    }
    newest
}

/// Installs the stand-in into a fresh folder named for `name` and compiles
/// tests/c/PROGRAM.c against its runtime.
pub fn compile(name: &str, program: &str) -> Setup {
    interposer_is_current();
    let standin = cuda_standin::Scratch::new(name).expect("install the CUDA stand-in");
    let dir = standin.dir.clone();
    let source = format!("{}/tests/c/{program}.c", env!("CARGO_MANIFEST_DIR"));
    let program = dir.join(program);
    let status = Command::new("cc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&program)
        .arg(&source)
        .arg(&standin.runtime)
        .arg("-ldl")
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .status()
        .expect("run cc");
    assert!(status.success(), "compiling {source} failed");
    Setup {
        dir,
        program,
        standin,
    }
}

/// The program's own verdict (its last line of stdout): it checked every copy's data, and
/// found nothing wrong.
#[allow(dead_code, reason = "each test binary uses a different part")]
pub fn assert_computed_right(output: &std::process::Output) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let verdict: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default())
            .expect("the program's verdict");
    assert!(verdict["checks"].as_u64().unwrap_or(0) > 0, "{verdict}");
    assert_eq!(
        verdict["mismatches"],
        0,
        "{verdict}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The interposer's reports of a run given `--report PREFIX`: every `PREFIX.<pid>.json`, one
/// per process that wrote one.
#[allow(dead_code, reason = "each test binary uses a different part")]
pub fn reports(prefix: &Path) -> Vec<serde_json::Value> {
    let dir = prefix.parent().expect("a folder");
    let stem = format!("{}.", prefix.file_name().expect("a name").to_string_lossy());
    std::fs::read_dir(dir)
        .expect("list the folder")
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(&stem) && name.ends_with(".json")
        })
        .map(|e| {
            serde_json::from_slice(&std::fs::read(e.path()).expect("read the report"))
                .expect("the report is JSON")
        })
        .collect()
}
