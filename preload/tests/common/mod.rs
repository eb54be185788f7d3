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

/// Installs the stand-in into a fresh folder named for `name` and compiles
/// tests/c/PROGRAM.c against its runtime.
pub fn compile(name: &str, program: &str) -> Setup {
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
