//! `tracer daemon` with the CUDA stand-in (a test fixture, not CUDA): started first, it finds
//! the programs started after it, writes one history per run to the store, serves metrics
//! that a real HTTP client scrapes and sends them to an OTLP collector, and ends on SIGTERM
//! with whole histories.

mod common;

use std::{
    collections::HashMap,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, mpsc},
    time::{Duration, Instant},
};

use opentelemetry_proto::tonic::{
    collector::metrics::v1::ExportMetricsServiceRequest,
    common::v1::any_value,
    metrics::v1::{metric, number_data_point},
};
use prost::Message as _;

use hotpin_history::dump;
use hotpin_history::history::MemHistory;
use hotpin_history::store::Store;
use hotpin_policy::hot::HotPolicy;
use tracer_agent::daemon::metrics::Traffic;

/// A running daemon and the lines it wrote to stderr.
struct Daemon {
    child: Child,
    port: u16,
    lines: mpsc::Receiver<String>,
    /// The line it said once tracing.
    ready: String,
}

impl Daemon {
    /// Starts `tracer daemon` tracing only commands that mention `only` (the stand-in's
    /// folder of this test: other tests' processes are left out), and waits until it traces.
    fn start(store: &Path, only: &Path) -> Self {
        Self::start_with(
            store,
            &["--command".into(), format!("*{}*", only.display())],
        )
    }

    fn start_with(store: &Path, args: &[String]) -> Self {
        // Leases are tested in preload/tests/leases.rs, each daemon on a socket of its own.
        Self::start_leasing(store, Path::new("off"), args)
    }

    /// [`Self::start_with`], granting leases at `socket` (or "off").
    fn start_leasing(store: &Path, socket: &Path, args: &[String]) -> Self {
        let port = free_port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_tracer"))
            .arg("daemon")
            .arg("--store")
            .arg(store)
            .args(["--metrics", &format!("127.0.0.1:{port}")])
            .arg("--lease-socket")
            .arg(socket)
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
        let mut daemon = Self {
            child,
            port,
            lines,
            ready: String::new(),
        };
        daemon.ready = daemon.wait_for_line("tracing every CUDA process", Duration::from_secs(60));
        daemon
    }

    fn wait_for_line(&self, text: &str, limit: Duration) -> String {
        let start = Instant::now();
        while start.elapsed() < limit {
            match self.lines.recv_timeout(Duration::from_millis(200)) {
                Ok(line) if line.contains(text) => return line,
                Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        panic!("the daemon never said {text:?}");
    }

    /// Scrapes the metrics over loopback and parses them.
    fn metrics(&self) -> Metrics {
        let url = format!("http://127.0.0.1:{}/metrics", self.port);
        let text = ureq::get(&url)
            .header("Accept", "application/openmetrics-text; version=1.0.0")
            .call()
            .expect("scrape the metrics endpoint")
            .body_mut()
            .read_to_string()
            .expect("the metrics are text");
        Metrics::parse(&text)
    }

    /// Scrapes the metrics as curl does (Prometheus's classic text format) and has
    /// `promtool check metrics` lint them.
    fn promtool_check(&self) {
        let url = format!("http://127.0.0.1:{}/metrics", self.port);
        let text = ureq::get(&url)
            .call()
            .expect("scrape the metrics endpoint")
            .body_mut()
            .read_to_string()
            .expect("the metrics are text");
        assert!(
            !text.contains("# EOF"),
            "the classic format, not OpenMetrics"
        );
        let promtool = common::promtool();
        let mut child = Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run promtool");
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(text.as_bytes())
            .expect("feed promtool");
        let check = child.wait_with_output().expect("promtool's verdict");
        assert!(
            check.status.success(),
            "promtool check metrics: {}{}\n{text}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
    }

    /// SIGTERM, then its exit status.
    fn terminate(self) -> std::process::ExitStatus {
        self.stop().0
    }

    /// SIGTERM, then its exit status and the summary it said last.
    fn stop(mut self) -> (std::process::ExitStatus, String) {
        // SAFETY: kill has no memory preconditions; the pid is our child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the daemon") {
                return (
                    status,
                    self.wait_for_line("stopped", Duration::from_secs(5)),
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the daemon did not end on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A stand-in OpenTelemetry collector on loopback: takes OTLP/HTTP protobuf exports, answers
/// 200, and keeps each request, decoded with opentelemetry-proto.
struct Collector {
    port: u16,
    received: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
}

impl Collector {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the collector");
        let port = listener.local_addr().expect("its address").port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let keep = Arc::clone(&received);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut request_line = String::new();
                reader
                    .read_line(&mut request_line)
                    .expect("the request line");
                assert!(
                    request_line.starts_with("POST /v1/metrics "),
                    "{request_line}"
                );
                let mut length = 0;
                loop {
                    let mut header = String::new();
                    reader.read_line(&mut header).expect("a header");
                    let header = header.trim();
                    if header.is_empty() {
                        break;
                    }
                    if let Some((name, value)) = header.split_once(':') {
                        if name.eq_ignore_ascii_case("content-length") {
                            length = value.trim().parse().expect("a length");
                        }
                        if name.eq_ignore_ascii_case("content-type") {
                            assert_eq!(value.trim(), "application/x-protobuf");
                        }
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).expect("the body");
                let request =
                    ExportMetricsServiceRequest::decode(body.as_slice()).expect("OTLP protobuf");
                keep.lock().unwrap().push(request);
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
            }
        });
        Collector { port, received }
    }

    /// The value of metric `name` with these attributes in the latest export, if any.
    fn latest(&self, name: &str, attributes: &[(&str, &str)]) -> Option<i64> {
        let received = self.received.lock().unwrap();
        let request = received.last()?;
        let metric = request.resource_metrics[0].scope_metrics[0]
            .metrics
            .iter()
            .find(|m| m.name == name)?;
        let points = match metric.data.as_ref()? {
            metric::Data::Sum(sum) => &sum.data_points,
            metric::Data::Gauge(gauge) => &gauge.data_points,
            _ => return None,
        };
        points
            .iter()
            .find(|point| {
                attributes.iter().all(|(key, value)| {
                    point.attributes.iter().any(|kv| {
                        kv.key == *key
                            && matches!(
                                kv.value.as_ref().and_then(|v| v.value.as_ref()),
                                Some(any_value::Value::StringValue(s)) if s == value
                            )
                    })
                })
            })
            .and_then(|point| match point.value {
                Some(number_data_point::Value::AsInt(value)) => Some(value),
                _ => None,
            })
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Samples of the Prometheus text format: `name{label="value",...} number`, parsed.
struct Metrics(Vec<(String, HashMap<String, String>, f64)>);

impl Metrics {
    fn parse(text: &str) -> Self {
        let mut samples = Vec::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
            let value: f64 = value.parse().expect("a sample's value is a number");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let body = rest.strip_suffix('}').expect("labels end with }");
                    let labels = body
                        .split(',')
                        .filter(|pair| !pair.is_empty())
                        .map(|pair| {
                            let (key, quoted) = pair.split_once('=').expect("label=value");
                            let value = quoted
                                .strip_prefix('"')
                                .and_then(|v| v.strip_suffix('"'))
                                .expect("a quoted label value");
                            (key.to_owned(), value.to_owned())
                        })
                        .collect();
                    (name.to_owned(), labels)
                }
                None => (series.to_owned(), HashMap::new()),
            };
            samples.push((name, labels, value));
        }
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
        Self(samples)
    }

    /// The value of the one sample of `name` whose labels include `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<f64> = self
            .0
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(v))
            })
            .map(|(_, _, v)| *v)
            .collect();
        assert!(found.len() <= 1, "{name} {labels:?} matches {found:?}");
        found.first().copied()
    }
}

/// The store's histories, by the pid in their file names.
fn stored(store: &Path) -> HashMap<u32, PathBuf> {
    let store = Store::open_existing(store);
    let mut found = HashMap::new();
    for program in store.programs().expect("list the store") {
        for path in store
            .histories(&program.key.to_string())
            .expect("list a program")
        {
            let name = path.file_stem().and_then(|s| s.to_str()).expect("a name");
            let pid = name
                .rsplit_once('-')
                .and_then(|(_, pid)| pid.parse().ok())
                .expect("<time>-<pid>.hotpin");
            found.insert(pid, path);
        }
    }
    found
}

fn wait_for_histories(store: &Path, pids: &[u32]) -> HashMap<u32, PathBuf> {
    let start = Instant::now();
    loop {
        let found = stored(store);
        if pids.iter().all(|pid| found.contains_key(pid)) {
            return found;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "histories of {pids:?} not in the store: {found:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A process's resident memory in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

fn traffic(history: &MemHistory) -> Traffic {
    Traffic::of(history, &HotPolicy::default())
}

fn bench_args(hot: &str, transfers: &str, cold: &str) -> Vec<&'static str> {
    let leak = |s: &str| -> &'static str { Box::leak(s.to_owned().into_boxed_str()) };
    vec![
        "--hot",
        leak(hot),
        "--transfers",
        leak(transfers),
        "--cold",
        leak(cold),
        "--size",
        "16K",
    ]
}

#[test]
fn the_daemon_keeps_a_history_per_run_and_serves_metrics() {
    common::require_root();
    let _alone = common::one_at_a_time();
    let standin = common::standin("daemon");
    let other = common::standin("daemon-bystander");
    let forking = common::compile_c(&standin, "forking");
    let store = standin.dir.join("store");
    let collector = Collector::start();
    let daemon = Daemon::start_with(
        &store,
        &[
            "--command".into(),
            format!("*{}*", standin.dir.display()),
            "--otlp".into(),
            format!("http://127.0.0.1:{}", collector.port),
            "--otlp-every".into(),
            "1".into(),
        ],
    );
    assert!(
        daemon.ready.contains("every 1s to http://127.0.0.1:"),
        "{}",
        daemon.ready
    );

    // Three runs the filter admits, started after the daemon, at once; one forks. And one
    // it leaves out (its stand-in lies elsewhere).
    let a = common::bench(&standin, &bench_args("2", "10", "3"));
    let b = common::bench(&standin, &bench_args("1", "25", "0"));
    let left_out = common::bench(&other, &bench_args("1", "5", "0"));
    let runs = [
        common::spawn_bench(&a),
        common::spawn_bench(&b),
        Command::new(&forking)
            .arg(&standin.runtime)
            .arg("15")
            .env("LD_LIBRARY_PATH", &standin.dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start forking"),
        common::spawn_bench(&left_out),
    ];
    let pids: Vec<u32> = runs.iter().map(Child::id).collect();
    let outputs: Vec<_> = runs
        .into_iter()
        .map(|run| common::wait_with_timeout(run, Duration::from_secs(60)))
        .collect();
    // Each program's own counts: (h2d copies, d2h copies, h2d bytes, d2h bytes).
    let truth: Vec<(u64, u64, u64, u64)> = outputs
        .iter()
        .map(|output| {
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
            let json: serde_json::Value =
                serde_json::from_slice(&output.stdout).expect("JSON counts");
            match json.get("h2d") {
                Some(h2d) => (
                    h2d.as_u64().unwrap(),
                    json["d2h"].as_u64().unwrap(),
                    json["h2d_bytes"].as_u64().unwrap(),
                    json["d2h_bytes"].as_u64().unwrap(),
                ),
                // transfer-bench: each copy there and back.
                None => {
                    let copies = json["copies"].as_u64().unwrap() / 2;
                    let bytes = json["bytes_moved"].as_u64().unwrap() / 2;
                    (copies, copies, bytes, bytes)
                }
            }
        })
        .collect();

    let found = wait_for_histories(&store, &pids[..3]);
    for (pid, &(h2d, d2h, h2d_bytes, d2h_bytes)) in pids[..3].iter().zip(&truth) {
        let history = dump::read(&found[pid]).expect("a whole history");
        let seen = traffic(&history);
        assert_eq!(
            (
                seen.h2d_transfers,
                seen.d2h_transfers,
                seen.h2d_bytes,
                seen.d2h_bytes
            ),
            (h2d, d2h, h2d_bytes, d2h_bytes),
            "pid {pid}"
        );
        let stats = history.stats();
        assert_eq!(
            (stats.transfers, stats.h2d_bytes, stats.d2h_bytes),
            (h2d + d2h, h2d_bytes, d2h_bytes)
        );
        assert_eq!(history.stats().lost_events(), 0);
        assert!(history.meta().checkpoint_unix_s.is_none(), "a finished run");
        assert_eq!(history.meta().pids[0], *pid);
    }
    // A stored history read with a JSON tool: `tracer export --format json`.
    let json_path = standin.dir.join("forking.json");
    let exported = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .args(["export", "--format", "json"])
        .arg(&found[&pids[2]])
        .arg("-o")
        .arg(&json_path)
        .output()
        .expect("run tracer export");
    assert!(exported.status.success(), "{exported:?}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json_path).expect("the JSON history"))
            .expect("JSON");
    assert_eq!(json["stats"]["h2d_bytes"], truth[2].2);
    let forked = dump::read(&found[&pids[2]]).expect("forking's history");
    assert_eq!(
        forked.meta().pids.len(),
        2,
        "the child is in its parent's history"
    );
    assert!(
        !found.contains_key(&pids[3]),
        "the filter leaves the bystander out"
    );
    assert_eq!(stored(&store).len(), 3);

    let metrics = daemon.metrics();
    let program = |pid: u32| {
        found[&pid]
            .parent()
            .and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .expect("the program's folder")
            .to_owned()
    };
    let bench_program = program(pids[0]);
    assert_eq!(bench_program, program(pids[1]), "one program, two runs");
    assert!(
        bench_program.starts_with("transfer-bench-"),
        "{bench_program}"
    );
    let forking_program = program(pids[2]);
    assert_eq!(
        metrics.value("hotpin_program_runs_total", &[("program", &bench_program)]),
        Some(2.0)
    );
    assert_eq!(
        metrics.value(
            "hotpin_program_transfers_total",
            &[("program", &forking_program), ("direction", "h2d")]
        ),
        Some(truth[2].0 as f64)
    );
    assert_eq!(
        metrics.value(
            "hotpin_program_transfer_bytes_total",
            &[("program", &bench_program), ("direction", "d2h")]
        ),
        Some((truth[0].3 + truth[1].3) as f64)
    );
    assert_eq!(
        metrics.value("hotpin_histories_written_total", &[]),
        Some(3.0)
    );
    assert_eq!(metrics.value("hotpin_lost_events_total", &[]), Some(0.0));
    assert_eq!(metrics.value("hotpin_processes_traced", &[]), Some(0.0));
    assert!(metrics.value("hotpin_probes_attached", &[]).unwrap() > 0.0);

    // The collector gets the same numbers over OTLP within a few exports.
    let deadline = Instant::now() + Duration::from_secs(10);
    while collector.latest("hotpin.histories_written", &[]) != Some(3) {
        assert!(Instant::now() < deadline, "no export with the 3 histories");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        collector.latest("hotpin.program_runs", &[("program", &bench_program)]),
        Some(2)
    );
    assert_eq!(
        collector.latest(
            "hotpin.program_transfers",
            &[("program", &forking_program), ("direction", "h2d")]
        ),
        Some(truth[2].0 as i64)
    );
    assert_eq!(collector.latest("hotpin.lost_events", &[]), Some(0));

    let status = daemon.terminate();
    assert!(status.success(), "{status}");
}

#[test]
fn a_run_going_before_the_start_is_traced_and_sigterm_leaves_its_history_whole() {
    common::require_root();
    let _alone = common::one_at_a_time();
    let standin = common::standin("daemon-sigterm");
    let store = standin.dir.join("store");
    // Running with CUDA before the daemon starts: found at the start, its memory seeded.
    let mut bench = common::spawn_bench(&common::long_bench(&standin));
    let pid = bench.id();
    let start = Instant::now();
    while !std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|maps| maps.contains("libcudart"))
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the bench never loaded CUDA"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let daemon = Daemon::start(&store, &standin.dir);
    assert!(
        daemon.ready.contains("(1 running already)"),
        "{}",
        daemon.ready
    );
    let pid_label = pid.to_string();
    let start = Instant::now();
    let running = loop {
        let metrics = daemon.metrics();
        if let Some(copies) = metrics.value(
            "hotpin_transfers_total",
            &[("pid", &pid_label), ("direction", "h2d")],
        ) && copies > 1000.0
        {
            break copies;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the running bench never showed in the metrics"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // With a run going (its labels in the text), the format lints clean.
    daemon.promtool_check();
    let status = daemon.terminate();
    assert!(status.success(), "{status}");
    assert!(
        bench.try_wait().expect("poll the bench").is_none(),
        "the traced program runs on after the daemon"
    );
    let _ = bench.kill();
    let _ = bench.wait();

    let found = stored(&store);
    assert_eq!(found.len(), 1, "{found:?}");
    let history = dump::read(&found[&pid]).expect("a whole history");
    assert!(
        history.allocations().iter().any(|a| a.pre_existing),
        "the memory it had when the daemon started is seeded"
    );
    assert!(
        history.meta().checkpoint_unix_s.is_some(),
        "a run still going is marked as such"
    );
    let seen = traffic(&history);
    assert!(seen.h2d_transfers as f64 >= running, "{seen:?} < {running}");
    // Each copy there and back, but the history is a snapshot of a process still copying:
    // the first round trip seen may be caught half-way (its H2D before the daemon attached),
    // and the copies in flight when SIGTERM stops the daemon are cut anywhere. Seen here: up
    // to 9 more H2D than D2H in 10 runs alone, and 1 more D2H (with the stand-in that makes
    // copies stream-ordered; the test used to assume at most 1 more H2D, and failed 1 run in 8
    // before that change too).
    assert!(
        seen.h2d_transfers.abs_diff(seen.d2h_transfers) <= 32,
        "{seen:?}"
    );
    assert_eq!(history.stats().lost_events(), 0);
}

/// What the daemon holds: resident bytes, open files, and of those the BPF maps.
#[derive(Debug, Clone, Copy)]
struct Held {
    rss: u64,
    files: usize,
    maps: usize,
}

fn held(pid: u32) -> Held {
    let fds: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the daemon's files")
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .collect();
    Held {
        rss: rss(pid),
        files: fds.len(),
        maps: fds
            .iter()
            .filter(|link| link.to_string_lossy() == "anon_inode:bpf-map")
            .count(),
    }
}

/// Checks the histories of `pids` (each must be there and whole, nothing lost) and removes
/// them from the store: the short runs' 8 copies each exactly, call sites named; the killed
/// runs' whatever they did before the kill.
fn check_and_clear(store: &Path, short: &[u32], killed: &[u32]) {
    let all: Vec<u32> = short.iter().chain(killed).copied().collect();
    let found = wait_for_histories(store, &all);
    for pid in &all {
        let history = dump::read(&found[pid]).expect("a whole history");
        assert_eq!(history.stats().lost_events(), 0, "pid {pid}");
        if short.contains(pid) {
            let seen = traffic(&history);
            assert_eq!(
                (seen.h2d_transfers, seen.d2h_transfers),
                (8, 8),
                "pid {pid}"
            );
            // Call sites are named in every run, not only while the first is alive (a
            // library is opened through /proc/PID/root of a process that has gone since).
            let named = history
                .allocations()
                .iter()
                .filter_map(|a| a.call_site.and_then(|id| history.call_site(id)))
                .filter(|site| site.symbol.is_some())
                .count();
            assert!(
                named > 0,
                "pid {pid}: no call site named: {:?}",
                history.call_sites()
            );
        }
        std::fs::remove_file(&found[pid]).expect("remove a checked history");
    }
}

/// The soak (#27), CI-sized: 400 rounds of two short CUDA programs at once, as a busy host
/// starts them, and every 8th round a third, killed (SIGKILL) while it copies. With
/// `HOTPIN_SOAK_SECS` set it goes on for that long instead (the hour-long soak,
/// docs/benchmarks.md). After a warm-up of 100 rounds the daemon's resident memory, open
/// files and BPF maps stay flat; every run, killed or not, gets a whole history with nothing
/// lost; the short runs' copies are exact.
#[test]
fn hundreds_of_short_runs_some_killed_leave_the_daemon_flat_and_nothing_lost() {
    const ROUNDS: usize = 400;
    const WARM: usize = 100;
    const BATCH: usize = 25;
    common::require_root();
    let _alone = common::one_at_a_time();
    let seconds: Option<u64> = std::env::var("HOTPIN_SOAK_SECS")
        .ok()
        .map(|s| s.parse().expect("HOTPIN_SOAK_SECS: seconds"));
    let standin = common::standin("daemon-soak");
    let store = standin.dir.join("store");
    let daemon = Daemon::start(&store, &standin.dir);
    let bench = common::bench(&standin, &bench_args("1", "7", "1"));
    let mut endless = bench_args("1", "1", "1");
    endless.extend(["--steps", "1000000", "--step-pause-us", "1000"]);
    let endless = common::bench(&standin, &endless);
    let began = Instant::now();
    let (mut short, mut killed) = (Vec::new(), Vec::new());
    let (mut runs, mut kills) = (0, 0);
    let mut warm = None;
    let mut round = 0;
    while match seconds {
        Some(limit) => began.elapsed() < Duration::from_secs(limit),
        None => round < ROUNDS,
    } {
        let victim = (round % 8 == 7).then(|| common::spawn_bench(&endless));
        let (x, y) = (common::spawn_bench(&bench), common::spawn_bench(&bench));
        short.extend([x.id(), y.id()]);
        for run in [x, y] {
            let output = common::wait_with_timeout(run, Duration::from_secs(30));
            assert_eq!(common::summary(&output)["copies"], 16);
        }
        runs += 2;
        if let Some(mut victim) = victim {
            // It has been copying since the two short runs started.
            std::thread::sleep(Duration::from_millis(100));
            victim.kill().expect("kill -9");
            victim.wait().expect("reap");
            killed.push(victim.id());
            kills += 1;
        }
        round += 1;
        if round % BATCH == 0 {
            check_and_clear(&store, &short, &killed);
            (short, killed) = (Vec::new(), Vec::new());
            if round == WARM {
                warm = Some(held(daemon.child.id()));
            }
        }
    }
    check_and_clear(&store, &short, &killed);
    let warm = warm.expect("past the warm-up");
    let end = held(daemon.child.id());
    eprintln!(
        "soak: {round} rounds in {:.0} s, {runs} short runs and {kills} killed; the daemon \
         after {WARM} rounds: {warm:?}; at the end: {end:?}",
        began.elapsed().as_secs_f64()
    );
    assert!(
        end.rss <= warm.rss + (4 << 20),
        "the daemon grew from {warm:?} to {end:?}"
    );
    assert!(end.files <= warm.files + 2, "{warm:?} -> {end:?}");
    assert_eq!(end.maps, warm.maps, "{warm:?} -> {end:?}");
    let metrics = daemon.metrics();
    assert_eq!(
        metrics.value("hotpin_histories_written_total", &[]),
        Some((runs + kills) as f64)
    );
    assert_eq!(metrics.value("hotpin_lost_events_total", &[]), Some(0.0));
    assert!(daemon.terminate().success());
}

/// A process that lives long and allocates a fresh pinned buffer per step (copied both ways,
/// freed): with a small bound, its history folds the freed buffers by call site and size,
/// every count stays exact, and the daemon's memory stays flat while the process runs.
/// About 20 s.
#[test]
fn a_long_lived_process_keeps_a_bounded_history_and_every_count() {
    const STEPS: u64 = 150_000;
    const BOUND: usize = 2_000;
    common::require_root();
    let _alone = common::one_at_a_time();
    let standin = common::standin("daemon-long");
    let store = standin.dir.join("store");
    let daemon = Daemon::start_with(
        &store,
        &[
            "--command".into(),
            format!("*{}*", standin.dir.display()),
            "--max-allocations".into(),
            BOUND.to_string(),
        ],
    );
    let steps = STEPS.to_string();
    let bench = common::bench(
        &standin,
        &[
            "--mode",
            "pinned",
            "--size",
            "4K",
            "--hot",
            "1",
            "--transfers",
            "1",
            "--cold",
            "1",
            "--steps",
            &steps,
            // The rest of a training step: this test is about memory, not load (the load
            // tests are), and a debug-built daemon on 2 cores lost events to a bench
            // allocating 15k buffers a second with nothing between them.
            "--step-pause-us",
            "40",
        ],
    );
    let run = common::spawn_bench(&bench);
    let pid = run.id();
    // The daemon's resident memory every 100 ms while the process runs.
    let daemon_pid = daemon.child.id();
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = Arc::clone(&sampling);
        std::thread::spawn(move || {
            let mut samples = Vec::new();
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                samples.push(rss(daemon_pid));
                std::thread::sleep(Duration::from_millis(100));
            }
            samples
        })
    };
    let output = common::wait_with_timeout(run, Duration::from_secs(300));
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let samples = sampler.join().expect("sampler");
    assert_eq!(common::summary(&output)["copies"], 2 * (STEPS + 2));
    let found = wait_for_histories(&store, &[pid]);
    let history = dump::read(&found[&pid]).expect("a whole history");

    // Every copy counted, by direction, in the entries kept and the aggregates together.
    let seen = traffic(&history);
    assert_eq!(
        (seen.h2d_transfers, seen.d2h_transfers),
        (STEPS + 2, STEPS + 2)
    );
    assert_eq!(
        (seen.h2d_bytes, seen.d2h_bytes),
        (4096 * (STEPS + 2), 4096 * (STEPS + 2))
    );
    assert_eq!(history.stats().lost_events(), 0);
    // Pinned ones only, kept and folded: the bench's one device buffer is freed at its exit,
    // and a fold after that puts it among the folded allocations too.
    let pinned = hotpin_history::history::AllocKind::Pinned;
    let pinned_kept = history
        .allocations()
        .iter()
        .filter(|a| a.kind == pinned)
        .count() as u64;
    let pinned_folded: u64 = history
        .compacted()
        .iter()
        .filter(|g| g.kind == pinned)
        .map(|g| g.allocations)
        .sum();
    assert_eq!(pinned_folded + pinned_kept, STEPS + 2);
    assert!(
        history.allocations().len() <= BOUND + BOUND / 4 + 64,
        "{} entries kept under a bound of {BOUND}",
        history.allocations().len()
    );
    // The steps' buffers: one group, one alive at a time. The hot and cold buffers (of the
    // same call site, kind and size) live through the whole run; a fold after the program's
    // exit puts them in that group too, and each then adds one to its peak.
    let steps_group = history
        .compacted()
        .iter()
        .max_by_key(|g| g.allocations)
        .expect("folded allocations");
    let long_lived_kept = history
        .allocations()
        .iter()
        .filter(|a| {
            a.kind == pinned
                && a.size == 4096
                && a.free_ns
                    .is_none_or(|free| free.saturating_sub(a.alloc_ns) > 1_000_000_000)
        })
        .count() as u64;
    assert_eq!(
        steps_group.peak_live,
        1 + 2 - long_lived_kept,
        "{long_lived_kept} long-lived buffers kept apart: {steps_group:?}"
    );
    assert!(steps_group.allocations > STEPS / 2, "{steps_group:?}");

    // Flat: from a quarter of the run on, the daemon grows by less than the entries an
    // unbounded history would add (about 240 bytes each, 25 MiB for 100k).
    let quarter = samples.len() / 4;
    assert!(samples.len() >= 8, "{} samples", samples.len());
    let grown = samples[quarter..].iter().max().unwrap() - samples[quarter];
    eprintln!(
        "daemon RSS over {} samples: at a quarter {} KiB, most after {} KiB",
        samples.len(),
        samples[quarter] / 1024,
        (samples[quarter] + grown) / 1024
    );
    assert!(
        grown <= 8 << 20,
        "the daemon grew by {grown} bytes: {samples:?}"
    );
    assert!(daemon.terminate().success());
}

#[test]
fn sighup_rereads_the_filters_from_the_configuration_file() {
    common::require_root();
    let _alone = common::one_at_a_time();
    let standin = common::standin("daemon-sighup");
    let store = standin.dir.join("store");
    let config = standin.dir.join("tracer.toml");
    std::fs::write(&config, "commands = [\"*no-such-program*\"]\n").expect("write the config");
    let daemon = Daemon::start_with(&store, &["--config".into(), config.display().to_string()]);
    let bench = common::bench(&standin, &bench_args("1", "4", "0"));
    let run = |bench: &common::Bench| {
        let child = common::spawn_bench(bench);
        let pid = child.id();
        let output = common::wait_with_timeout(child, Duration::from_secs(30));
        assert_eq!(common::summary(&output)["copies"], 8);
        pid
    };
    let left_out = run(&bench);
    std::fs::write(
        &config,
        format!("commands = [\"*{}*\"]\n", standin.dir.display()),
    )
    .expect("rewrite the config");
    // SAFETY: kill has no memory preconditions; the pid is our child.
    unsafe { libc::kill(daemon.child.id() as i32, libc::SIGHUP) };
    daemon.wait_for_line("configuration reloaded", Duration::from_secs(10));
    let admitted = run(&bench);
    let found = wait_for_histories(&store, &[admitted]);
    assert!(!found.contains_key(&left_out), "{found:?}");
    let history = dump::read(&found[&admitted]).expect("a whole history");
    assert_eq!(traffic(&history).h2d_transfers, 4);

    // A file that no longer reads keeps the filters in force.
    std::fs::write(&config, "commands = [").expect("break the config");
    // SAFETY: as above.
    unsafe { libc::kill(daemon.child.id() as i32, libc::SIGHUP) };
    daemon.wait_for_line(
        "keeping the configuration in force",
        Duration::from_secs(10),
    );
    assert!(daemon.terminate().success());
}

/// The store as another user sees it (#25): the daemon runs as root and hands each history to
/// its run's user. A run of user `nobody` gets its history, readable by that user alone; the
/// store's folders are root's, so no user can plant a link or a file there for the daemon to
/// write through, and another user cannot read the history.
#[test]
fn another_user_can_neither_read_a_history_nor_plant_a_link_in_the_store() {
    use std::os::unix::{
        fs::{MetadataExt as _, PermissionsExt as _},
        process::CommandExt as _,
    };
    common::require_root();
    let _alone = common::one_at_a_time();
    let standin = common::standin("daemon-users");
    let store = standin.dir.join("store");
    let daemon = Daemon::start(&store, &standin.dir);
    const NOBODY: u32 = 65534;
    const OTHER: u32 = 65533;
    let bench = common::bench(&standin, &bench_args("1", "10", "0"));
    let mut command = Command::new(common::workload());
    command
        .args(&bench.args)
        .envs(bench.env.iter().cloned())
        .uid(NOBODY)
        .gid(NOBODY)
        .stdout(Stdio::null());
    let status = command.status().expect("run transfer-bench as nobody");
    assert!(status.success(), "the run as nobody: {status}");
    let found = {
        let start = Instant::now();
        loop {
            let found = stored(&store);
            if !found.is_empty() {
                break found;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no history stored"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    drop(daemon);
    let history = found.values().next().expect("one history");
    let metadata = std::fs::metadata(history).expect("the history");
    assert_eq!(
        metadata.uid(),
        NOBODY,
        "the history is given to its run's user"
    );
    assert_eq!(
        metadata.permissions().mode() & 0o777,
        0o600,
        "and to no one else"
    );
    let folder = history.parent().expect("its program's folder");
    for dir in [folder, store.as_path()] {
        let metadata = std::fs::metadata(dir).expect("a store folder");
        assert_eq!(metadata.uid(), 0, "{} is root's", dir.display());
        assert_eq!(
            metadata.permissions().mode() & 0o022,
            0,
            "{} is not writable by others",
            dir.display()
        );
    }
    // As another user: no reading the history, no link planted beside it.
    let as_other = |program: &str, args: &[&std::ffi::OsStr]| {
        Command::new(program)
            .args(args)
            .uid(OTHER)
            .gid(OTHER)
            .output()
            .expect("run as another user")
    };
    let read = as_other("cat", &[history.as_os_str()]);
    assert!(!read.status.success(), "another user read the history");
    let planted = folder.join("planted.hotpin");
    let link = as_other(
        "ln",
        &["-s".as_ref(), "/etc/passwd".as_ref(), planted.as_os_str()],
    );
    assert!(
        !link.status.success() && std::fs::symlink_metadata(&planted).is_err(),
        "a link was planted in the store"
    );
}

/// A user who runs many programs under many names cannot fill the disk through the daemon:
/// the store keeps within its bounds across program folders, every run is still written
/// (the oldest give way), and the daemon's last words count what it did.
#[test]
fn many_runs_under_many_names_cannot_fill_the_store_past_its_bounds() {
    use std::os::unix::{fs::PermissionsExt as _, process::CommandExt as _};
    const RUNS: usize = 24;
    const NAMES: usize = 8;
    const MAX_HISTORIES: usize = 5;
    const MAX_BYTES: u64 = 1 << 20;
    const NOBODY: u32 = 65534;
    common::require_root();
    let _alone = common::one_at_a_time();
    let standin = common::standin("daemon-fill");
    let store = standin.dir.join("store");
    let programs: Vec<PathBuf> = (0..NAMES)
        .map(|i| {
            let copy = standin.dir.join(format!("program-{i}"));
            std::fs::copy(common::workload(), &copy).expect("copy transfer-bench");
            std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755))
                .expect("make it runnable by nobody");
            copy
        })
        .collect();
    let daemon = Daemon::start_with(
        &store,
        &[
            "--command".into(),
            format!("*{}*", standin.dir.display()),
            "--max-histories".into(),
            MAX_HISTORIES.to_string(),
            "--max-store-bytes".into(),
            MAX_BYTES.to_string(),
        ],
    );
    let bench = common::bench(&standin, &bench_args("1", "4", "1"));
    for run in 0..RUNS {
        let status = Command::new(&programs[run % NAMES])
            .args(&bench.args)
            .envs(bench.env.iter().cloned())
            .uid(NOBODY)
            .gid(NOBODY)
            .stdout(Stdio::null())
            .status()
            .expect("run a copy of transfer-bench as nobody");
        assert!(status.success(), "run {run}: {status}");
    }
    let start = Instant::now();
    while daemon
        .metrics()
        .value("hotpin_histories_written_total", &[])
        != Some(RUNS as f64)
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not every run was written: {:?}",
            daemon
                .metrics()
                .value("hotpin_histories_written_total", &[])
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, summary) = daemon.stop();
    assert!(status.success(), "{status}");
    assert!(
        summary.contains(&format!("{RUNS} histories written"))
            && summary.contains("(0 runs still going")
            && summary.contains("0 could not be written"),
        "{summary}"
    );
    let found = stored(&store);
    let bytes: u64 = found
        .values()
        .map(|path| std::fs::metadata(path).expect("a stored history").len())
        .sum();
    assert!(
        !found.is_empty() && found.len() <= MAX_HISTORIES,
        "{} histories kept: {found:?}",
        found.len()
    );
    assert!(bytes <= MAX_BYTES, "{bytes} bytes kept");
    let folders = std::fs::read_dir(&store)
        .expect("the store")
        .filter_map(Result::ok)
        .filter(|entry| entry.path().is_dir())
        .count();
    assert!(
        folders <= MAX_HISTORIES,
        "{folders} program folders left: emptied ones are removed"
    );
}

/// An OTLP endpoint that refuses connections: the daemon goes on, and its warning names the
/// cause (the connection refused), not only that the export failed.
#[test]
fn an_unreachable_otlp_endpoint_is_warned_of_with_its_cause() {
    common::require_root();
    let _alone = common::one_at_a_time();
    let standin = common::standin("daemon-otlp-down");
    let store = standin.dir.join("store");
    let closed = free_port();
    let daemon = Daemon::start_with(
        &store,
        &[
            "--command".into(),
            format!("*{}*", standin.dir.display()),
            "--otlp".into(),
            format!("http://127.0.0.1:{closed}"),
            "--otlp-every".into(),
            "1".into(),
        ],
    );
    let warning = daemon.wait_for_line("OTLP export failed", Duration::from_secs(30));
    assert!(
        warning.to_lowercase().contains("connection refused") || warning.contains("os error 111"),
        "the cause is dropped: {warning}"
    );
    assert!(
        !warning.contains('\u{1b}'),
        "colour codes off a terminal: {warning}"
    );
    assert!(
        daemon
            .metrics()
            .value("hotpin_histories_written_total", &[])
            .is_some()
    );
    assert!(daemon.terminate().success());
}

/// The copies transfer-bench says it made (its JSON report, the last line of `stdout`).
fn bench_copies(stdout: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(stdout);
    let report: serde_json::Value =
        serde_json::from_str(text.lines().last().unwrap_or_default()).expect("the bench's report");
    report["copies"].as_u64().expect("its copies")
}

/// Runs `command` to its end, or kills it after `limit`: its status, or None if it had to be
/// killed (what a frozen program gets).
fn finishes_within(mut command: Command, limit: Duration) -> Option<std::process::Output> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the program");
    let start = Instant::now();
    while start.elapsed() < limit {
        if child.try_wait().expect("poll").is_some() {
            return Some(child.wait_with_output().expect("its output"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.id() as i32;
    // SAFETY: kill has no memory preconditions; our child, and whatever it started in its
    // process group is left to the test's end.
    unsafe {
        libc::kill(pid, libc::SIGCONT);
        libc::kill(pid, libc::SIGKILL);
    }
    let _ = child.wait();
    None
}

/// A daemon that is itself stopped (SIGSTOP, a debugger, a hung node agent) must not freeze
/// the node's CUDA programs (#41 item 3): the kernel side stops a program on its library open
/// only while the daemon's heartbeat is fresh, so a new program runs untraced and finishes.
/// (Before: it stopped at its first CUDA library load until the daemon was continued.)
#[test]
fn a_stopped_daemon_freezes_no_new_cuda_program() {
    common::require_root();
    let _alone = common::one_at_a_time();
    let standin = common::standin("daemon-stopped");
    let store = standin.dir.join("store");
    let daemon = Daemon::start(&store, &standin.dir);
    let pid = daemon.child.id() as i32;
    // SAFETY: kill has no memory preconditions; the daemon is our child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // Longer than the heartbeat may be stale.
    std::thread::sleep(Duration::from_millis(800));
    let bench = common::bench(&standin, &bench_args("1", "100", "0"));
    let mut command = Command::new(common::workload());
    command.args(&bench.args).envs(bench.env.iter().cloned());
    let began = Instant::now();
    let finished = finishes_within(command, Duration::from_secs(2));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let output = finished.expect("a new CUDA program finished within 2 s beside a stopped daemon");
    assert!(output.status.success(), "{output:?}");
    assert!(began.elapsed() < Duration::from_secs(2));
    let status = daemon.terminate();
    assert!(status.success(), "{status}");
}

/// A CUDA job started through `runuser` beside the daemon finishes, and is recorded (#41 item
/// 2): `runuser` waits for its child with WUNTRACED and stops itself when the child stops for
/// the daemon's attach; the daemon continues it too. (Before: 14 of 14 such runs left
/// `runuser` stopped for good.) `setpriv`, `su`, `timeout` and `nohup` are run the same way.
#[test]
fn a_cuda_program_under_runuser_finishes_beside_the_daemon() {
    common::require_root();
    let _alone = common::one_at_a_time();
    let standin = common::standin("daemon-runuser");
    let store = standin.dir.join("store");
    // `nobody` must read the stand-in and run the bench.
    let mut open = standin.dir.clone();
    while open != Path::new("/") {
        let _ = Command::new("chmod").arg("a+rx").arg(&open).status();
        open.pop();
    }
    let daemon = Daemon::start(&store, &standin.dir);
    let bench = common::bench(&standin, &bench_args("2", "50", "1"));
    let mut copies = Vec::new();
    let job: Vec<String> = [
        "env".to_string(),
        format!("LD_LIBRARY_PATH={}", standin.dir.display()),
        common::workload().display().to_string(),
    ]
    .into_iter()
    .chain(bench.args.iter().map(|a| a.to_string_lossy().into_owned()))
    .collect();
    let wrappers: [&[&str]; 5] = [
        &["runuser", "-u", "nobody", "--"],
        &[
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--",
        ],
        // su runs a shell command line; it waits for it as runuser does.
        &["su", "-s", "/bin/sh", "nobody", "-c"],
        &["timeout", "60"],
        &["nohup"],
    ];
    for wrapper in wrappers {
        let mut command = Command::new(wrapper[0]);
        command.args(&wrapper[1..]);
        if wrapper[0] == "su" {
            command.arg(job.join(" "));
        } else {
            command.args(&job);
        }
        let output = finishes_within(command, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("{} never finished beside the daemon", wrapper[0]));
        assert!(
            output.status.success(),
            "{}: {}",
            wrapper[0],
            String::from_utf8_lossy(&output.stderr)
        );
        copies.push(bench_copies(&output.stdout));
    }
    // Both runs recorded whole: each history holds every copy its run made.
    let start = Instant::now();
    let found = loop {
        let found = stored(&store);
        if found.len() == wrappers.len() {
            break found;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{found:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    for (pid, path) in found {
        let history = dump::read(&path).expect("a whole history");
        let seen = traffic(&history);
        assert_eq!(
            seen.h2d_transfers + seen.d2h_transfers,
            copies[0],
            "pid {pid}: {seen:?}"
        );
    }
    let status = daemon.terminate();
    assert!(status.success(), "{status}");
}

/// `tracer record` beside the daemon (#41 item 1): the daemon never takes the recording
/// tracer for a CUDA process (it opens the CUDA runtime to read its symbols), so the store
/// holds no history of a tracer; the recording and the daemon's history each see every copy,
/// 5 runs of 5. (Before: the store gained a `tracer-...` folder, and 3 of 10 recordings saw
/// 0 transfers; then the daemon's own history was not always whole.)
#[test]
fn a_recording_beside_the_daemon_is_exact_and_no_tracer_is_taken_for_a_target() {
    common::require_root();
    let _alone = common::one_at_a_time();
    let standin = common::standin("daemon-record");
    let store = standin.dir.join("store");
    let daemon = Daemon::start_with(&store, &[]);
    let bench = common::bench(&standin, &bench_args("3", "250", "1"));
    let mut copies = Vec::new();
    for run in 0..5 {
        let out = standin.dir.join(format!("record-{run}.hotpin"));
        let output = Command::new(env!("CARGO_BIN_EXE_tracer"))
            .arg("record")
            .arg("-o")
            .arg(&out)
            .arg("--")
            .arg(common::workload())
            .args(&bench.args)
            .envs(bench.env.iter().cloned())
            .output()
            .expect("run tracer record");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let seen = traffic(&dump::read(&out).expect("the recording"));
        assert_eq!(
            seen.h2d_transfers + seen.d2h_transfers,
            bench_copies(&output.stdout),
            "run {run}: {seen:?}"
        );
        copies.push(bench_copies(&output.stdout));
    }
    // The daemon's own history of each run is exact too: each tracer's kernel side holds the
    // program until that tracer attached.
    let start = Instant::now();
    let found = loop {
        let found = stored(&store);
        if found.len() >= copies.len() {
            break found;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{found:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(found.len(), copies.len(), "{found:?}");
    for (pid, path) in found {
        let seen = traffic(&dump::read(&path).expect("a whole history"));
        assert_eq!(
            seen.h2d_transfers + seen.d2h_transfers,
            copies[0],
            "the daemon's history of pid {pid}: {seen:?}"
        );
    }
    let status = daemon.terminate();
    assert!(status.success(), "{status}");
    let tracers: Vec<String> = Store::open_existing(&store)
        .programs()
        .expect("list the store")
        .into_iter()
        .map(|program| program.key.to_string())
        .filter(|key| key.starts_with("tracer"))
        .collect();
    assert!(tracers.is_empty(), "the daemon filed a tracer: {tracers:?}");
}

/// A store other users may write is refused before the daemon traces anything (#41 item 5):
/// a world-writable (1777) store, one another user owns, and a store that is a symbolic
/// link. (Before: with a 1777 store, a link planted by `nobody` and swapped in as a history
/// was written had the daemon give a root-only file to `nobody`, in 1 run of 20.)
#[test]
fn a_store_other_users_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    common::require_root();
    let standin = common::standin("daemon-open-store");
    let open = standin.dir.join("open-store");
    std::fs::create_dir_all(&open).expect("a folder");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let theirs = standin.dir.join("their-store");
    std::fs::create_dir_all(&theirs).expect("a folder");
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
    let linked = standin.dir.join("linked-store");
    let real = standin.dir.join("real-store");
    std::fs::create_dir_all(&real).expect("a folder");
    std::os::unix::fs::symlink(&real, &linked).expect("a link");
    for store in [&open, &theirs, &linked] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tracer"));
        command.arg("daemon").arg("--store").arg(store).args([
            "--lease-socket",
            "off",
            "--metrics",
            "off",
        ]);
        let output = finishes_within(command, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("the daemon ran on with the store {}", store.display()));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{}: {stderr}", store.display());
        assert!(
            stderr.contains("another user could plant links") || stderr.contains("symbolic link"),
            "{}: {stderr}",
            store.display()
        );
    }
}

/// Two daemons on one host (#41 item 3): both work. Each tracer's kernel side holds a new
/// CUDA program until that tracer attached, so each keeps an exact history of every run. A
/// third daemon on the lease socket a running one serves refuses to start, and says why.
#[test]
fn two_daemons_on_one_host_each_record_every_run_and_one_more_on_a_taken_socket_is_refused() {
    common::require_root();
    let _alone = common::one_at_a_time();
    let standin = common::standin("daemon-two");
    let stores = [standin.dir.join("store-a"), standin.dir.join("store-b")];
    let socket = standin.dir.join("lease.sock");
    let first = Daemon::start_leasing(
        &stores[0],
        &socket,
        &["--command".into(), format!("*{}*", standin.dir.display())],
    );
    let second = Daemon::start(&stores[1], &standin.dir);
    let bench = common::bench(&standin, &bench_args("2", "100", "1"));
    let mut copies = Vec::new();
    for _ in 0..3 {
        let output = Command::new(common::workload())
            .args(&bench.args)
            .envs(bench.env.iter().cloned())
            .output()
            .expect("run the bench");
        assert!(output.status.success(), "{output:?}");
        copies.push(bench_copies(&output.stdout));
    }
    for store in &stores {
        let start = Instant::now();
        let found = loop {
            let found = stored(store);
            if found.len() >= copies.len() {
                break found;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "{found:?}");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(found.len(), copies.len(), "{}: {found:?}", store.display());
        for (pid, path) in found {
            let seen = traffic(&dump::read(&path).expect("a whole history"));
            assert_eq!(
                seen.h2d_transfers + seen.d2h_transfers,
                copies[0],
                "{}: pid {pid}: {seen:?}",
                store.display()
            );
        }
    }
    let third = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .arg("daemon")
        .arg("--store")
        .arg(standin.dir.join("store-c"))
        .args(["--metrics", "off", "--lease-socket"])
        .arg(&socket)
        .output()
        .expect("run a third daemon");
    let said = String::from_utf8_lossy(&third.stderr);
    assert!(!third.status.success(), "{said}");
    assert!(said.contains("another daemon grants leases at"), "{said}");
    for daemon in [first, second] {
        let status = daemon.terminate();
        assert!(status.success(), "{status}");
    }
}
