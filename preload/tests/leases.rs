//! The node's pinned-memory leases (#27): `tracer daemon` as the arbiter, `hotpin run`
//! processes (auto mode) as its clients, on the CUDA stand-in (a test fixture, not CUDA). The
//! program is `online steady`, whose period sets how dense its hot set is; every run checks
//! what it computed. Needs root (the daemon loads eBPF programs). The daemons of this file run
//! one at a time (a lock), each on a socket of its own.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{TcpListener, TcpStream},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::{Mutex, mpsc},
    time::{Duration, Instant},
};

use common::Setup;
use serde_json::Value;

mod common;

const MIB: u64 = 1 << 20;
/// One daemon at a time: they share the machine's two cores with the programs.
static ONE_DAEMON: Mutex<()> = Mutex::new(());

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

fn setup(name: &str) -> Setup {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the daemon loads eBPF programs: run as root"
    );
    let setup = common::compile(&format!("leases-{name}"), "online");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&setup.dir, std::fs::Permissions::from_mode(0o755))
        .expect("let other users in");
    setup
}

/// A `tracer daemon` granting leases on `socket`, tracing only this test's programs.
struct Daemon {
    child: Child,
    port: u16,
    lines: mpsc::Receiver<String>,
}

impl Daemon {
    fn start(setup: &Setup, socket: &Path, args: &[&str]) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut child = Command::new(workspace().join("target/debug/tracer"))
            .arg("daemon")
            .arg("--store")
            .arg(setup.dir.join("store"))
            .args(["--metrics", &format!("127.0.0.1:{port}")])
            .arg("--lease-socket")
            .arg(socket)
            .args(["--command", &format!("*{}*", setup.dir.display())])
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tracer daemon");
        let (tx, lines) = mpsc::channel();
        let stderr = child.stderr.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("daemon: {line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let daemon = Self { child, port, lines };
        daemon.wait_for_line("tracing every CUDA process", Duration::from_secs(60));
        daemon
    }

    fn wait_for_line(&self, text: &str, limit: Duration) -> String {
        let began = Instant::now();
        while began.elapsed() < limit {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) if line.contains(text) => return line,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                _ => {}
            }
        }
        panic!("the daemon never said {text:?}");
    }

    /// One metric's value (the first line of that name, labels ignored).
    fn metric(&self, name: &str) -> u64 {
        self.metric_where(name, "")
    }

    /// The value of the first line of metric `name` whose labels contain `labels`.
    fn metric_where(&self, name: &str, labels: &str) -> u64 {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("scrape");
        write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .expect("ask");
        let mut text = String::new();
        stream.read_to_string(&mut text).expect("the metrics");
        text.lines()
            .find(|line| {
                line.starts_with(name)
                    && line[name.len()..].starts_with([' ', '{'])
                    && line.contains(labels)
            })
            .and_then(|line| line.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} with {labels} in the metrics"))
    }

    fn stop(mut self) {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `hotpin run --lease-socket SOCKET --report PREFIX -- online steady ARGS`, started.
fn spawn(setup: &Setup, socket: &Path, prefix: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_hotpin"))
        .arg("run")
        .arg("--lease-socket")
        .arg(socket)
        .arg("--report")
        .arg(prefix)
        .arg("--")
        .arg(&setup.program)
        .arg("steady")
        .args(args)
        .env("LD_LIBRARY_PATH", &setup.standin.dir)
        .env("XDG_STATE_HOME", &setup.dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run hotpin")
}

/// Waits for a run; asserts it succeeded and computed right.
fn finish(child: Child) -> Output {
    let output = child.wait_with_output().expect("wait for hotpin run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "hotpin run failed: {stderr}");
    common::assert_computed_right(&output);
    output
}

/// The interposer's report of the run at `prefix` (one process: the program).
fn report(prefix: &Path) -> Value {
    common::reports(prefix)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no report {}.PID.json", prefix.display()))
}

/// Two programs at once under a node budget smaller than their hot sets together (24 MiB
/// each, 40 MiB for both): the less dense one, started first, is asked to give blocks back
/// when the denser one needs the room; the budget holds at every sample.
#[test]
fn a_denser_program_reclaims_from_a_less_dense_one_within_the_node_budget() {
    let _one = ONE_DAEMON.lock().unwrap_or_else(|e| e.into_inner());
    let setup = setup("reclaim");
    let socket = setup.dir.join("lease.sock");
    let daemon = Daemon::start(&setup, &socket, &["--node-budget", "40M"]);
    assert_eq!(daemon.metric("hotpin_node_pinned_budget_bytes"), 40 * MIB);
    let (slow, fast) = (setup.dir.join("slow"), setup.dir.join("fast"));
    let slow_run = spawn(&setup, &socket, &slow, &["8", "5000", "40"]);
    std::thread::sleep(Duration::from_millis(1500));
    let fast_run = spawn(&setup, &socket, &fast, &["8", "3000", "2"]);
    let began = Instant::now();
    let (mut most, mut clients) = (0, 0);
    while began.elapsed() < Duration::from_millis(3000) {
        let used = daemon.metric("hotpin_node_pinned_bytes");
        assert!(used <= 40 * MIB, "the budget held: {used}");
        most = most.max(used);
        clients = clients.max(daemon.metric("hotpin_lease_clients"));
        std::thread::sleep(Duration::from_millis(100));
    }
    finish(fast_run);
    finish(slow_run);
    assert_eq!(clients, 2);
    assert!(most > 24 * MIB, "both held leases at once: {most}");
    assert!(daemon.metric("hotpin_lease_reclaims_total") >= 1);
    let (slow, fast) = (
        report(&slow)["leases"].clone(),
        report(&fast)["leases"].clone(),
    );
    assert!(slow["given_back"].as_u64() >= Some(1), "{slow}");
    assert!(
        fast["granted"].as_u64() >= Some(3),
        "all its hot set: {fast}"
    );
    assert_eq!(fast["link"], "connected", "{fast}");
    daemon.stop();
    // Each program's history, as the daemon stored it, says what the node leased it.
    let accounts = stored_accounts(&setup.dir.join("store"));
    let account = |prefix: &Path| {
        let pid = report(prefix)["pid"].as_u64().expect("pid") as u32;
        accounts
            .iter()
            .find(|a| a.pid == pid)
            .and_then(|a| a.leases)
            .unwrap_or_else(|| panic!("no leases in the history of pid {pid}: {accounts:?}"))
    };
    let (slow, fast) = (
        account(&setup.dir.join("slow")),
        account(&setup.dir.join("fast")),
    );
    assert!(slow.reclaimed >= 1 && slow.granted >= 1, "{slow:?}");
    assert!(
        fast.granted >= 3 && fast.peak_leased_bytes >= 24 * MIB,
        "{fast:?}"
    );
}

/// The node's budget is a ceiling for requests kept pinned too (#40): two programs whose
/// pinned requests (a pinned pool, 2 x 16 MiB each) their history keeps pinned, under a 40 MiB
/// node budget. Each kept request asks for a lease; one that finds no room is given back to
/// CUDA and served pageable. The node's pinned bytes stay within the budget and one block at
/// every sample, and both programs compute right. (Before, kept requests were never leased:
/// 64 MiB pinned against 40 MiB.)
#[test]
fn requests_kept_pinned_are_leased_and_the_node_budget_holds() {
    kept_requests_are_leased("pool", Setting::AtBirth);
}

/// As [`requests_kept_pinned_are_leased_and_the_node_budget_holds`], with the default
/// `HOTPIN_AT_FIRST_COPY`: the requests the history pins are served pageable and registered at
/// their first copy, each registration leased; the node's budget holds all the same.
#[test]
fn requests_the_history_pins_at_their_first_copy_are_leased_and_the_node_budget_holds() {
    kept_requests_are_leased("pool", Setting::Default);
}

/// As [`requests_kept_pinned_are_leased_and_the_node_budget_holds`], for portable requests
/// (CuPy's pinned memory pool makes them so): one that finds no lease is served pageable
/// too, and `cudaHostGetFlags` still answers portable for it. (Before, a portable request
/// was kept pinned without a lease: the node's budget did not hold.) With the default
/// `HOTPIN_AT_FIRST_COPY`: a portable request is kept for its flag, not because the history
/// pins it, so it is kept pinned (leased) whatever that setting says.
#[test]
fn portable_requests_kept_pinned_are_leased_too() {
    kept_requests_are_leased("portable", Setting::Default);
}

/// `HOTPIN_AT_FIRST_COPY` in [`kept_requests_are_leased`].
#[derive(PartialEq)]
enum Setting {
    /// Unset (on).
    Default,
    /// 0: requests the history pins are kept pinned at birth.
    AtBirth,
}

/// Two programs of `mode` (online.c's `pool` or `portable`) under a 40 MiB node budget, from
/// their history, `HOTPIN_AT_FIRST_COPY` as `setting` says. The pool's requests, which the
/// history pins, are then registered at their first copy; else (and portable requests,
/// kept for their flag) kept pinned at birth.
fn kept_requests_are_leased(mode: &str, setting: Setting) {
    let at_first_copy = mode == "pool" && setting == Setting::Default;
    let _one = ONE_DAEMON.lock().unwrap_or_else(|e| e.into_inner());
    let setup = setup(&format!("kept-{mode}"));
    let socket = setup.dir.join("lease.sock");
    // A first run without a daemon learns that both requests pay: its history keeps them.
    let learned = setup.dir.join("learned.hotpin");
    let learn = Command::new(env!("CARGO_BIN_EXE_hotpin"))
        .args(["run", "--lease-socket", "off", "--history"])
        .arg(&learned)
        .arg("--")
        .arg(&setup.program)
        .args([mode, "16", "1500", "5"])
        .env("LD_LIBRARY_PATH", &setup.standin.dir)
        .env("XDG_STATE_HOME", &setup.dir)
        .output()
        .expect("run hotpin");
    assert!(
        learn.status.success(),
        "{}",
        String::from_utf8_lossy(&learn.stderr)
    );
    common::assert_computed_right(&learn);
    let daemon = Daemon::start(&setup, &socket, &["--node-budget", "40M"]);
    let run = |name: &str| {
        let history = setup.dir.join(format!("history-{name}.hotpin"));
        std::fs::copy(&learned, &history).expect("copy the history");
        Command::new(env!("CARGO_BIN_EXE_hotpin"))
            .arg("run")
            .arg("--lease-socket")
            .arg(&socket)
            .arg("--history")
            .arg(&history)
            .arg("--report")
            .arg(setup.dir.join(name))
            .arg("--")
            .arg(&setup.program)
            // A second for the daemon to attach before the requests are made.
            .args([mode, "16", "3000", "5", "1000"])
            .envs((setting == Setting::AtBirth).then_some(("HOTPIN_AT_FIRST_COPY", "0")))
            .env("LD_LIBRARY_PATH", &setup.standin.dir)
            .env("XDG_STATE_HOME", &setup.dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run hotpin")
    };
    let (first, second) = (run("first"), run("second"));
    let began = Instant::now();
    let mut most = 0;
    while began.elapsed() < Duration::from_millis(3800) {
        let used = daemon.metric("hotpin_node_pinned_bytes");
        assert!(used <= 40 * MIB + 16 * MIB, "the node budget held: {used}");
        most = most.max(used);
        std::thread::sleep(Duration::from_millis(100));
    }
    finish(first);
    finish(second);
    daemon.stop();
    assert!(most >= 32 * MIB, "the kept requests were pinned: {most}");
    let (a, b) = (
        report(&setup.dir.join("first")),
        report(&setup.dir.join("second")),
    );
    let sum = |field: &str| {
        a["counters"][field].as_u64().unwrap_or(0) + b["counters"][field].as_u64().unwrap_or(0)
    };
    if at_first_copy {
        // Both served their requests pageable and registered them at their first copy, each
        // registration leased.
        for r in [&a, &b] {
            let deferred = r["decisions"]
                .as_array()
                .expect("decisions")
                .iter()
                .filter(|d| d["action"] == "pin-at-first-copy" && d["call"] == "cudaHostAlloc")
                .count();
            assert_eq!(deferred, 2, "{r}");
            assert_eq!(r["counters"]["kept_pinned"], 0, "{r}");
            // Registered as the learner decided, at a copy: not on demand, which asks no
            // question of the budget's.
            assert_eq!(r["counters"]["pinned_on_demand"], 0, "{r}");
        }
        // Registered at their first copy or, a block the program made (not a request), ahead
        // of it (`HOTPIN_AHEAD`, the default): each leased all the same.
        assert!(sum("first_copy_pins") + sum("ahead_pins") >= 2, "{a}\n{b}");
        // Four 16 MiB requests against 40 MiB: the arbiter refused at least one.
        assert!(sum("node_refusals") >= 1, "{a}\n{b}");
        assert_eq!(sum("kept_without_lease"), 0, "{a}\n{b}");
        return;
    }
    // Both kept their requests from the history, and asked leases for them: those refused
    // were served pageable (and pinned later, under leases, as their copies repaid it).
    for r in [&a, &b] {
        let kept = r["decisions"]
            .as_array()
            .expect("decisions")
            .iter()
            .filter(|d| d["action"] == "kept-pinned")
            .count();
        assert_eq!(kept, 2, "{r}");
    }
    assert!(sum("node_refusals") >= 1, "{a}\n{b}");
    assert!(sum("demoted") >= 1, "{a}\n{b}");
    assert_eq!(sum("kept_without_lease"), 0, "{a}\n{b}");
}

/// The pinned-memory accounts in every history of the store at `store`.
fn stored_accounts(store: &Path) -> Vec<hotpin_history::history::PinnedAccount> {
    let mut accounts = Vec::new();
    let mut folders = vec![store.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder)
            .expect("the store")
            .map_while(Result::ok)
        {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "hotpin") {
                let history = hotpin_history::dump::read(&path).expect("a whole history");
                accounts.extend(history.pinned_accounts());
            }
        }
    }
    accounts
}

/// Without a daemon at the default socket, a run wrapped around every job is quiet: nothing
/// on stderr, the report says it (`no-daemon`, and why). `--verbose` says it once.
#[test]
fn without_a_daemon_at_the_default_socket_nothing_is_said_unless_verbose() {
    let _one = ONE_DAEMON.lock().unwrap_or_else(|e| e.into_inner());
    let default = Path::new(hotpin_lease::DEFAULT_SOCKET);
    assert!(
        !default.exists(),
        "{} exists: stop the daemon listening there before running this test",
        default.display()
    );
    let setup = setup("quiet");
    for verbose in [false, true] {
        let name = if verbose { "verbose" } else { "quiet" };
        let prefix = setup.dir.join(name);
        let output = Command::new(env!("CARGO_BIN_EXE_hotpin"))
            .arg("run")
            .args(verbose.then_some("--verbose"))
            // A first run each: it pins what it learns, and so asks for leases.
            .arg("--history")
            .arg(setup.dir.join(format!("{name}.hotpin")))
            .arg("--report")
            .arg(&prefix)
            .arg("--")
            .arg(&setup.program)
            .args(["steady", "8", "600", "5"])
            .env("LD_LIBRARY_PATH", &setup.standin.dir)
            .env("XDG_STATE_HOME", &setup.dir)
            .env_remove("HOTPIN_LEASE_SOCKET")
            .env_remove("HOTPIN_VERBOSE")
            .output()
            .expect("run hotpin");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "hotpin run failed: {stderr}");
        common::assert_computed_right(&output);
        let said = stderr.matches("no node arbiter").count();
        assert_eq!(said, usize::from(verbose), "verbose {verbose}: {stderr}");
        let r = report(&prefix);
        assert!(r["counters"]["learned_pins"].as_u64() >= Some(3), "{r}");
        assert_eq!(r["leases"]["link"], "no-daemon", "{r}");
        assert!(r["leases"]["no_daemon"].is_string(), "{r}");
    }
}

/// Without a daemon, auto mode keeps to its own budget and says so once. Under a daemon, a
/// program's pins are accounted as they are (by hotpin under leases, each copied), and killed
/// with SIGKILL its leases end within a second.
#[test]
fn without_a_daemon_the_process_budget_holds_and_a_killed_holder_frees_its_leases() {
    let _one = ONE_DAEMON.lock().unwrap_or_else(|e| e.into_inner());
    let setup = setup("fallback");
    let socket = setup.dir.join("lease.sock");
    let prefix = setup.dir.join("alone");
    let output = finish(spawn(&setup, &socket, &prefix, &["8", "600", "5"]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.matches("no node arbiter").count(), 1, "{stderr}");
    let r = report(&prefix);
    assert_eq!(r["leases"]["link"], "no-daemon", "{r}");
    assert!(r["counters"]["learned_pins"].as_u64() >= Some(3), "{r}");

    let daemon = Daemon::start(&setup, &socket, &["--node-budget", "64M"]);
    let mut run = spawn(
        &setup,
        &socket,
        &setup.dir.join("killed"),
        // The daemon attaches once the program has loaded the CUDA libraries; pins made
        // before that it cannot see (nothing in /proc shows registered memory): a second
        // for it to attach before the first copy, even on a loaded machine.
        &["8", "20000", "5", "1000"],
    );
    let began = Instant::now();
    while daemon.metric("hotpin_node_leased_bytes") < 24 * MIB {
        assert!(began.elapsed() < Duration::from_secs(15), "no leases taken");
        std::thread::sleep(Duration::from_millis(50));
    }
    // What is pinned, by whom, and whether copied, as the daemon accounts it: the program's
    // three hot 8 MiB blocks, pinned by hotpin under leases, each copied; nothing else.
    let pid = format!("pid=\"{}\"", run.id());
    let accounting = [
        ("hotpin_pinned_bytes", "by=\"lease\"", 24 * MIB),
        ("hotpin_pinned_bytes", "by=\"program\"", 0),
        ("hotpin_pinned_copied_bytes", "copied=\"yes\"", 24 * MIB),
        ("hotpin_pinned_copied_bytes", "copied=\"never\"", 0),
    ];
    let began = Instant::now();
    while !accounting
        .iter()
        .all(|(name, label, value)| daemon.metric_where(name, &format!("{pid},{label}")) == *value)
    {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "the accounting of {pid}: {:?}",
            accounting.map(|(name, label, _)| daemon.metric_where(name, &format!("{pid},{label}")))
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    run.kill().expect("SIGKILL");
    let killed = Instant::now();
    let _ = run.wait();
    while daemon.metric("hotpin_lease_clients") > 0 || daemon.metric("hotpin_node_leased_bytes") > 0
    {
        assert!(
            killed.elapsed() < Duration::from_secs(1),
            "the leases of a killed program outlived it by a second"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    daemon.stop();
}

/// The daemon restarts while a program holds leases: the program keeps its pins, pins
/// nothing new meanwhile, and hands what it holds to the new daemon.
#[test]
fn a_restarted_daemon_gets_back_the_leases_its_clients_kept() {
    let _one = ONE_DAEMON.lock().unwrap_or_else(|e| e.into_inner());
    let setup = setup("restart");
    let socket = setup.dir.join("lease.sock");
    let prefix = setup.dir.join("kept");
    let first = Daemon::start(&setup, &socket, &["--node-budget", "64M"]);
    let run = spawn(&setup, &socket, &prefix, &["8", "8000", "5"]);
    let began = Instant::now();
    while first.metric("hotpin_node_leased_bytes") < 24 * MIB {
        assert!(began.elapsed() < Duration::from_secs(15), "no leases taken");
        std::thread::sleep(Duration::from_millis(50));
    }
    first.stop();
    std::thread::sleep(Duration::from_millis(500));
    let second = Daemon::start(&setup, &socket, &["--node-budget", "64M"]);
    let began = Instant::now();
    while second.metric("hotpin_node_leased_bytes") < 24 * MIB {
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "the program did not hand its leases over"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(second.metric("hotpin_lease_clients"), 1);
    let output = finish(run);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("went away"), "{stderr}");
    let leases = report(&prefix)["leases"].clone();
    assert!(leases["reconnects"].as_u64() >= Some(1), "{leases}");
    assert_eq!(leases["link"], "connected", "{leases}");
    second.stop();
}

/// Who asks is known from the socket: a user's cap holds for a program run as that user, a
/// client naming another pid is refused, and one that says it released a block the tracer
/// still sees pinned is refused from then on.
#[test]
fn caps_hold_per_user_and_a_lying_client_is_refused() {
    use std::os::unix::process::CommandExt as _;
    const NOBODY: u32 = 65534;
    let _one = ONE_DAEMON.lock().unwrap_or_else(|e| e.into_inner());
    let setup = setup("trust");
    let socket = setup.dir.join("lease.sock");
    let daemon = Daemon::start(
        &setup,
        &socket,
        &["--node-budget", "1G", "--user-cap", &format!("{NOBODY}=2M")],
    );
    // As nobody (1 MiB buffers: the stand-in pins with mlock, bound for users to 8 MiB):
    // two of the three hot blocks fit the cap.
    let home = setup.dir.join("home");
    std::fs::create_dir_all(&home).expect("a home");
    std::os::unix::fs::chown(&home, Some(NOBODY), Some(NOBODY)).expect("give it to nobody");
    let prefix = home.join("capped");
    let run = Command::new(env!("CARGO_BIN_EXE_hotpin"))
        .arg("run")
        .arg("--lease-socket")
        .arg(&socket)
        .arg("--report")
        .arg(&prefix)
        .arg("--")
        .arg(&setup.program)
        .args(["steady", "1", "800", "5"])
        .env("LD_LIBRARY_PATH", &setup.standin.dir)
        .env("HOME", &home)
        .env_remove("XDG_STATE_HOME")
        .uid(NOBODY)
        .gid(NOBODY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run as nobody");
    finish(run);
    let leases = report(&prefix)["leases"].clone();
    assert_eq!(leases["granted"], 2, "{leases}");
    assert!(leases["denied"]["user-cap"].as_u64() >= Some(1), "{leases}");

    // A client naming a pid not its own.
    let mut stream = UnixStream::connect(&socket).expect("connect");
    stream
        .write_all(b"{\"op\":\"hello\",\"version\":1,\"pid\":1}\n")
        .expect("say hello");
    let mut answer = String::new();
    BufReader::new(&stream)
        .read_line(&mut answer)
        .expect("an answer");
    assert!(answer.contains("is not yours"), "{answer}");
    // Malformed and oversized lines are refused, and the daemon goes on.
    let mut stream = UnixStream::connect(&socket).expect("connect");
    stream.write_all(b"{\"op\":\"nonsense\"}\n").expect("send");
    stream.write_all(&vec![b'x'; 10_000]).expect("send");
    stream.write_all(b"\n").expect("send");
    let mut reader = BufReader::new(&stream);
    for _ in 0..2 {
        let mut answer = String::new();
        reader.read_line(&mut answer).expect("an answer");
        assert!(answer.contains("\"refused\""), "{answer}");
    }

    // A client that pins a block itself (the tracer sees it), leases it, says it released
    // it, and asks again.
    let script = setup.dir.join("liar.py");
    std::fs::write(&script, LIAR).expect("write the script");
    let liar = Command::new("python3")
        .arg(&script)
        .arg(&setup.standin.driver)
        .arg(&socket)
        .output()
        .expect("run python3");
    let said = String::from_utf8_lossy(&liar.stdout);
    assert!(
        liar.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&liar.stderr)
    );
    let said: Value = serde_json::from_str(said.trim()).expect("the client's JSON");
    assert_eq!(said["first"]["op"], "granted", "{said}");
    assert_eq!(said["after"]["reason"], "distrusted", "{said}");
    daemon.wait_for_line("still sees pinned", Duration::from_secs(5));
    assert!(daemon.metric("hotpin_lease_clients_distrusted_total") >= 2);
    assert!(daemon.metric("hotpin_lease_messages_refused_total") >= 3);
    daemon.stop();
}

/// The lying client: python3 LIAR DRIVER SOCKET.
const LIAR: &str = r#"
import ctypes, json, mmap, os, socket, sys, time
cuda = ctypes.CDLL(sys.argv[1])
assert cuda.cuInit(0) == 0
size = 1 << 20
block = mmap.mmap(-1, size)
start = ctypes.addressof(ctypes.c_char.from_buffer(block))
register = cuda.cuMemHostRegister_v2
register.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
assert register(start, size, 0) == 0
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[2])
lines = s.makefile("r")
def send(message):
    s.sendall((json.dumps(message) + "\n").encode())
def ask(i, at):
    send({"op": "ask", "id": i, "lease": {"start": at, "len": size, "score": 1.0}})
    return json.loads(lines.readline())
send({"op": "hello", "version": 1, "pid": os.getpid()})
json.loads(lines.readline())
first = ask(1, start)
send({"op": "release", "starts": [start]})
time.sleep(4.0)
after = ask(2, start + (1 << 30))
print(json.dumps({"first": first, "after": after}))
"#;

/// The soak test, CI-sized: for 12 s (and 1,000 asks), 6 clients connect, ask, release and
/// disconnect without pause, each ask checked against the budget, while 2 others send garbage,
/// oversized lines and floods. The budget holds at every sample, no lease outlives its client, the daemon's memory
/// stays flat, and an honest client is still served at the end.
#[test]
fn the_arbiter_holds_under_churn_and_garbage_and_its_memory_stays_flat() {
    use std::sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    };
    let _one = ONE_DAEMON.lock().unwrap_or_else(|e| e.into_inner());
    let setup = setup("soak");
    let socket = setup.dir.join("lease.sock");
    let daemon = Daemon::start(&setup, &socket, &["--node-budget", "64M"]);
    let stop = Arc::new(AtomicBool::new(false));
    let (asked, granted) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut threads = Vec::new();
    for client in 0..6u64 {
        let (socket, stop) = (socket.clone(), Arc::clone(&stop));
        let (asked, granted) = (Arc::clone(&asked), Arc::clone(&granted));
        threads.push(std::thread::spawn(move || {
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                let stream = UnixStream::connect(&socket).expect("connect");
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut writer = stream;
                let mut line = String::new();
                let hello = format!(
                    "{{\"op\":\"hello\",\"version\":1,\"pid\":{}}}\n",
                    std::process::id()
                );
                writer.write_all(hello.as_bytes()).expect("hello");
                reader.read_line(&mut line).expect("welcome");
                for i in 0..20u64 {
                    let start = (client << 40) + (round << 24) + (i << 20);
                    let ask = format!(
                        "{{\"op\":\"ask\",\"id\":{i},\"lease\":{{\"start\":{start},\"len\":{},\"score\":{}}}}}\n",
                        4 * MIB,
                        (client + 1) as f64 * 0.5
                    );
                    writer.write_all(ask.as_bytes()).expect("ask");
                    // Answers, and reclaims of this client's blocks, which it honours.
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let reply: Value = serde_json::from_str(&line).expect("JSON");
                        if reply["op"] == "reclaim" {
                            let release =
                                format!("{{\"op\":\"release\",\"starts\":{}}}\n", reply["starts"]);
                            writer.write_all(release.as_bytes()).expect("release");
                            continue;
                        }
                        asked.fetch_add(1, Ordering::Relaxed);
                        if reply["op"] == "granted" {
                            granted.fetch_add(1, Ordering::Relaxed);
                        }
                        break;
                    }
                    if i % 3 == 2 {
                        let release = format!("{{\"op\":\"release\",\"starts\":[{start}]}}\n");
                        writer.write_all(release.as_bytes()).expect("release");
                    }
                }
                // Gone without releasing the rest: the daemon ends them.
            }
        }));
    }
    for kind in 0..2 {
        let (socket, stop) = (socket.clone(), Arc::clone(&stop));
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut stream) = UnixStream::connect(&socket) else {
                    continue;
                };
                let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
                let junk: Vec<u8> = if kind == 0 {
                    (0..3000u32).map(|i| (i * 7919 % 251) as u8).collect()
                } else {
                    b"{\"op\":\"scores\",\"scores\":[]}\n".repeat(5000)
                };
                let _ = stream.write_all(&junk);
                if kind == 1 {
                    // Floods, then holds the connection without reading the answers.
                    std::thread::sleep(Duration::from_millis(300));
                }
            }
        }));
    }
    let began = Instant::now();
    let rss = |pid: u32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmRSS")
    };
    let mut rss_at_2s = 0;
    let mut samples = 0;
    // 12 s, and on until the honest clients made 1,000 asks: on a slower 2-core machine the
    // two flooding threads take most of the CPU, and 12 s held 960 asks (each honest ask
    // waited up to 50 ms behind them). Not past a minute.
    while began.elapsed() < Duration::from_secs(12) || asked.load(Ordering::Relaxed) <= 1000 {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "1,000 asks within a minute: {}",
            asked.load(Ordering::Relaxed)
        );
        let used = daemon.metric("hotpin_node_pinned_bytes");
        assert!(used <= 64 * MIB, "the budget held under churn: {used}");
        if rss_at_2s == 0 && began.elapsed() > Duration::from_secs(2) {
            rss_at_2s = rss(daemon.child.id());
        }
        samples += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let rss_at_end = rss(daemon.child.id());
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().expect("a client thread");
    }
    let (asked, granted) = (
        asked.load(Ordering::Relaxed),
        granted.load(Ordering::Relaxed),
    );
    assert!(
        asked > 1000 && granted > 100,
        "asked {asked}, granted {granted}"
    );
    // Every client gone: no lease outlives one.
    let began = Instant::now();
    while daemon.metric("hotpin_lease_clients") > 0 || daemon.metric("hotpin_node_leased_bytes") > 0
    {
        assert!(
            began.elapsed() < Duration::from_secs(2),
            "leases outlived their clients"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(daemon.metric("hotpin_lease_messages_refused_total") > 100);
    assert!(
        rss_at_end < rss_at_2s + 8 * 1024,
        "the daemon's memory grew from {rss_at_2s} KiB to {rss_at_end} KiB over {samples} samples"
    );
    // Still serving: an honest client is answered.
    let mut stream = UnixStream::connect(&socket).expect("connect");
    let hello = format!(
        "{{\"op\":\"hello\",\"version\":1,\"pid\":{}}}\n",
        std::process::id()
    );
    stream.write_all(hello.as_bytes()).expect("hello");
    stream
        .write_all(
            b"{\"op\":\"ask\",\"id\":1,\"lease\":{\"start\":4096,\"len\":4096,\"score\":1}}\n",
        )
        .expect("ask");
    let mut reader = BufReader::new(&stream);
    let (mut welcome, mut answer) = (String::new(), String::new());
    reader.read_line(&mut welcome).expect("welcome");
    reader.read_line(&mut answer).expect("an answer");
    assert!(answer.contains("\"granted\""), "{welcome} {answer}");
    daemon.stop();
}

/// A client that says it holds far more than the budget, and one that keeps a lease asked
/// back, cannot take the node's budget (#41 item 6): the first is distrusted at once (its
/// word counted as nothing), the second once it kept the lease 5 s; a program under `hotpin
/// run` beside them then gets its leases, and both are said on the daemon's stderr. (Before:
/// a `hold` of 256 GiB against 6 GiB had every other ask answered `reclaiming` for as long as
/// its client stayed, 12 of 12, and nothing was said.)
#[test]
fn a_hold_past_the_budget_and_a_client_deaf_to_reclaims_are_distrusted() {
    let _one = ONE_DAEMON.lock().unwrap_or_else(|e| e.into_inner());
    let setup = setup("hoard");
    let socket = setup.dir.join("lease.sock");
    let daemon = Daemon::start(&setup, &socket, &["--node-budget", "40M"]);
    let hello = format!(
        "{{\"op\":\"hello\",\"version\":1,\"pid\":{}}}\n",
        std::process::id()
    );
    let connect = || {
        let mut stream = UnixStream::connect(&socket).expect("connect");
        stream.write_all(hello.as_bytes()).expect("say hello");
        let mut welcome = String::new();
        BufReader::new(stream.try_clone().expect("clone"))
            .read_line(&mut welcome)
            .expect("welcome");
        stream
    };
    // 256 GiB said held, against 40 MiB.
    let mut hoarder = connect();
    hoarder
        .write_all(b"{\"op\":\"hold\",\"holding\":[{\"start\":4096,\"len\":274877906944,\"score\":1.0}]}\n")
        .expect("hold");
    daemon.wait_for_line("more than the", Duration::from_secs(5));
    // A lease of 32 MiB, barely dense, never given back when asked.
    let mut deaf = connect();
    deaf.write_all(
        b"{\"op\":\"ask\",\"id\":1,\"lease\":{\"start\":1048576,\"len\":33554432,\"score\":1e-12}}\n",
    )
    .expect("ask");
    let mut granted = String::new();
    BufReader::new(deaf.try_clone().expect("clone"))
        .read_line(&mut granted)
        .expect("an answer");
    assert!(granted.contains("granted"), "{granted}");
    let prefix = setup.dir.join("beside");
    let run = spawn(&setup, &socket, &prefix, &["16", "9000", "5"]);
    daemon.wait_for_line("asked back more than", Duration::from_secs(15));
    finish(run);
    let leases = report(&prefix)["leases"].clone();
    assert_eq!(leases["granted"], 2, "{leases}");
    assert!(daemon.metric("hotpin_lease_clients_distrusted_total") >= 2);
    drop((hoarder, deaf));
    daemon.stop();
}

/// A user who opens thousands of idle lease connections cannot blind the daemon (#41 item
/// 7): past 256 of one user's, connections are closed at once (said once), so the daemon
/// keeps the files recording needs, and another user's CUDA run beside the flood is recorded
/// and leased. (Before: 20,000 idle connections used up the daemon's open-file limit; the
/// other run was not recorded, and nothing was said.)
#[test]
fn a_connection_flood_leaves_others_runs_recorded_and_leased() {
    use std::os::unix::process::CommandExt as _;
    const NOBODY: u32 = 65534;
    let _one = ONE_DAEMON.lock().unwrap_or_else(|e| e.into_inner());
    let setup = setup("flood");
    let socket = setup.dir.join("lease.sock");
    let daemon = Daemon::start(&setup, &socket, &["--node-budget", "1G"]);
    // As nobody: as many connections as its open-file limit lets it open, held 20 s.
    let mut flood = Command::new("python3")
        .args([
            "-c",
            "import socket, sys, time\n\
             held = []\n\
             try:\n\
             \x20   while len(held) < 30000:\n\
             \x20       s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); held.append(s)\n\
             except OSError as e:\n\
             \x20   pass\n\
             print(len(held), flush=True)\n\
             time.sleep(20)\n",
        ])
        .arg(&socket)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the flood as nobody");
    let mut opened = String::new();
    let mut flood_out = BufReader::new(flood.stdout.take().expect("piped"));
    flood_out
        .read_line(&mut opened)
        .expect("how many it opened");
    let opened: usize = opened.trim().parse().expect("a count");
    assert!(opened > 1000, "the flood opened {opened}");
    let prefix = setup.dir.join("beside");
    let run = spawn(&setup, &socket, &prefix, &["4", "1500", "5"]);
    finish(run);
    let leases = report(&prefix)["leases"].clone();
    assert!(leases["granted"].as_u64() >= Some(1), "{leases}");
    let began = Instant::now();
    while stored_accounts(&setup.dir.join("store")).is_empty() {
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "the run beside the flood was not recorded"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    daemon.wait_for_line("further ones are closed", Duration::from_secs(10));
    let _ = flood.kill();
    let _ = flood.wait();
    daemon.stop();
}
