//! Histories shared across a fleet through an S3-compatible store (#29), against a real
//! S3-compatible server on 127.0.0.1: moto's server mode (PyPI `moto[server]`; `cargo xtask
//! test` installs it into target/wheel-tools). The program is `online` on the CUDA stand-in
//! (a test fixture, not CUDA); every run checks what it computed.
//!
//! Two "nodes" (two daemons with different host names) write histories of one program; a
//! third `hotpin run` starts from the latest; a corrupt object is refused with its key named;
//! a store that never answers holds the program's start for the bound at most; a store
//! stopped while a daemon puts to it and a program runs changes nothing the program
//! computes.

use std::{
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use common::Setup;
use hotpin_fleet::Fleet;
use hotpin_history::store::ProgramKey;

mod common;

const BUCKET: &str = "histories";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// moto's server, on a free port of 127.0.0.1, with the bucket made; killed when dropped.
struct Moto {
    child: Child,
    endpoint: String,
}

impl Moto {
    fn start() -> Self {
        let server = std::env::var_os("HOTPIN_MOTO_SERVER")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace().join("target/wheel-tools/bin/moto_server"));
        assert!(
            server.exists(),
            "no S3-compatible server to test against at {}: install it with \
             `target/wheel-tools/bin/pip install 'moto[server]'` (cargo xtask test does), or \
             name one with HOTPIN_MOTO_SERVER",
            server.display()
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(&server)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server");
        let began = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "moto_server did not listen"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let moto = Self {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        // The bucket (moto's server takes an unsigned request).
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        write!(
            stream,
            "PUT /{BUCKET} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n"
        )
        .expect("ask for the bucket");
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        moto
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The stand-in, and `online` compiled against it, in a folder of the test's own.
fn setup() -> Setup {
    common::compile("fleet", "online")
}

/// `hotpin run ARGS -- online shift` with `home` as the user's home (the state and the
/// fleet's cache go there) and the AWS environment pointing at `endpoint`.
fn hotpin_run(setup: &Setup, home: &Path, endpoint: &str, args: &[&str]) -> Output {
    std::fs::create_dir_all(home).expect("a home");
    let output = Command::new(env!("CARGO_BIN_EXE_hotpin"))
        .arg("run")
        .args(args)
        .arg("--")
        .arg(&setup.program)
        .arg("shift")
        .env("LD_LIBRARY_PATH", &setup.standin.dir)
        .env("HOME", home)
        .env_remove("XDG_STATE_HOME")
        .env_remove("XDG_CACHE_HOME")
        .envs(aws(endpoint))
        .output()
        .expect("run hotpin");
    assert!(
        output.status.success(),
        "hotpin run {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    common::assert_computed_right(&output);
    output
}

fn aws(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", endpoint.to_owned()),
        ("AWS_ACCESS_KEY_ID", "testing".into()),
        ("AWS_SECRET_ACCESS_KEY", "testing".into()),
        ("AWS_DEFAULT_REGION", "us-east-1".into()),
    ]
}

#[test]
fn histories_are_shared_across_nodes_through_an_s3_store() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the daemon loads eBPF programs: run as root"
    );
    let setup = setup();
    let moto = Moto::start();
    let url = format!("s3://{BUCKET}/fleet");
    // SAFETY: the one test of this binary; nothing else reads the environment meanwhile.
    unsafe {
        for (key, value) in aws(&moto.endpoint) {
            std::env::set_var(key, value);
        }
    }
    let fleet = Fleet::open(&url, Duration::from_secs(5)).expect("open the store");
    let key = ProgramKey::of_command(setup.program.as_os_str(), &["shift".into()])
        .expect("the program's key");

    // Two nodes: each a daemon, with its own host name, tracing one run of the program.
    for node in ["node-a", "node-b"] {
        let daemon = FleetDaemon::start(&setup, &url, node, &moto.endpoint);
        let run = Command::new(&setup.program)
            .arg("shift")
            .env("LD_LIBRARY_PATH", &setup.standin.dir)
            .output()
            .expect("run the program");
        assert!(run.status.success(), "{run:?}");
        let said = daemon.stop();
        assert!(
            said.contains("1 histories put in the fleet's store"),
            "{node}: {said}"
        );
    }
    let objects = fleet.list(&key).expect("list");
    assert_eq!(objects.len(), 2, "{objects:?}");
    assert!(
        objects[0].contains("-node-a-") && objects[1].contains("-node-b-"),
        "{objects:?}"
    );
    assert!(
        objects
            .iter()
            .all(|o| o.starts_with(&format!("fleet/{}/", key.as_str())))
    );

    // A third run, on a node of its own, starts from the latest (node b's), fetched into
    // its user's cache. (The daemon's histories know the program's pinned requests and
    // mappings, not libc's allocations: those are learned live; the data is checked.)
    let home = setup.dir.join("home-c");
    let third = hotpin_run(&setup, &home, &moto.endpoint, &["--fleet", &url]);
    let said = String::from_utf8_lossy(&third.stderr);
    assert!(
        said.contains("starting from") && said.contains("-node-b-"),
        "{said}"
    );
    let cached: Vec<_> = std::fs::read_dir(home.join(".cache/hotpin/fleet"))
        .expect("the fleet's cache")
        .filter_map(Result::ok)
        .collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    // The same, from the two runs merged (per allocation, hot where most runs found it).
    let merged = hotpin_run(
        &setup,
        &setup.dir.join("home-m"),
        &moto.endpoint,
        &["--fleet", &url, "--merge-runs", "2"],
    );
    let said = String::from_utf8_lossy(&merged.stderr);
    assert!(
        said.contains("-node-b-") && said.contains("merged with the 1 runs before it"),
        "{said}"
    );
    assert!(!said.contains("cannot start from"), "{said}");

    // A corrupt object, newest: refused with its key named; the run learns live instead.
    let garbage = setup.dir.join("garbage.hotpin");
    std::fs::write(&garbage, b"not a history").expect("write");
    let corrupt = fleet
        .put(&key, &garbage, "node-z")
        .expect("put the garbage");
    let refused = hotpin_run(
        &setup,
        &setup.dir.join("home-d"),
        &moto.endpoint,
        &["--fleet", &url],
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains(&corrupt) && said.contains("not a hotpin history"),
        "{said}"
    );
    // Retention: only the latest N of a program are kept.
    assert_eq!(fleet.retain(&key, 1).expect("retain"), 2);
    assert_eq!(fleet.list(&key).expect("list"), vec![corrupt]);
    drop(moto);

    // A store that never answers: the start is held for the bound (1 s) at most.
    let silent = TcpListener::bind("127.0.0.1:0").expect("a silent server");
    let silent_url = format!("http://{}", silent.local_addr().expect("address"));
    let home = setup.dir.join("home-e");
    let began = Instant::now();
    let plain = hotpin_run(&setup, &home, &silent_url, &[]);
    let baseline = began.elapsed();
    let began = Instant::now();
    let held = hotpin_run(
        &setup,
        &home,
        &silent_url,
        &["--fleet", &url, "--fleet-wait", "1"],
    );
    let with_store = began.elapsed();
    let said = String::from_utf8_lossy(&held.stderr);
    assert!(said.contains("did not answer within"), "{said}");
    assert!(
        with_store < baseline + Duration::from_millis(2500),
        "{with_store:?} against {baseline:?} without the store"
    );
    drop(plain);

    // The store stopped while a daemon puts to it and a program runs: the program computes
    // what it computes, and the daemon says what it could not put and ends cleanly.
    let stopping = Moto::start();
    let daemon = FleetDaemon::start(&setup, &url, "node-s", &stopping.endpoint);
    let run = Command::new(&setup.program)
        .args(["steady", "8", "1500", "20"])
        .env("LD_LIBRARY_PATH", &setup.standin.dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the program");
    std::thread::sleep(Duration::from_millis(300));
    drop(stopping);
    let run = run.wait_with_output().expect("the program");
    assert!(run.status.success(), "{run:?}");
    common::assert_computed_right(&run);
    let said = daemon.stop();
    assert!(
        said.contains("0 histories put in the fleet's store") && said.contains("1 could not be"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&setup.dir);
}

/// `tracer daemon` as one node of a fleet: its own store, the fleet's `url` at `endpoint`,
/// its host name `node`, tracing the test's program.
struct FleetDaemon {
    child: Child,
    stderr: std::process::ChildStderr,
    /// What it said until it was tracing.
    seen: Vec<u8>,
}

impl FleetDaemon {
    /// Started, and tracing once its probes are in.
    fn start(setup: &Setup, url: &str, node: &str, endpoint: &str) -> Self {
        let mut child = Command::new(workspace().join("target/debug/tracer"))
            .args(["daemon", "--metrics", "off", "--lease-socket", "off"])
            .args(["--command", "*online*", "--store"])
            .arg(setup.dir.join(format!("store-{node}")))
            .args(["--fleet", url, "--host-name", node])
            .envs(aws(endpoint))
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tracer daemon");
        let mut stderr = child.stderr.take().expect("stderr");
        let mut seen = Vec::new();
        let began = Instant::now();
        while !String::from_utf8_lossy(&seen).contains("tracing") {
            let mut byte = [0u8; 256];
            let n = stderr.read(&mut byte).expect("the daemon's stderr");
            assert!(
                n > 0 && began.elapsed() < Duration::from_secs(60),
                "the daemon did not start"
            );
            seen.extend_from_slice(&byte[..n]);
        }
        Self {
            child,
            stderr,
            seen,
        }
    }

    /// Stopped (SIGTERM) once the run's history is written; it must end cleanly. All it said.
    fn stop(mut self) -> String {
        std::thread::sleep(Duration::from_millis(600));
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let mut rest = String::new();
        let _ = self.stderr.read_to_string(&mut rest);
        let said = format!("{}{rest}", String::from_utf8_lossy(&self.seen));
        assert!(self.child.wait().expect("the daemon").success(), "{said}");
        said
    }
}
