//! `tracer daemon`: traces every process that opens a CUDA library, from its first CUDA call
//! (the kernel makes it a target at the open and holds it until the probes are in), one
//! history per program run; writes each run's history to the store when its last process
//! exits; serves metrics over HTTP; grants the node's pinned memory to `hotpin run` processes
//! on its lease socket (`tracer_agent::daemon::lease`). SIGTERM or SIGINT ends it, writing
//! the runs still going (marked as checkpoints); SIGHUP reloads the configuration file (the
//! node budget and caps included).

mod config;

use std::{
    net::SocketAddr,
    process::ExitCode,
    sync::{Arc, PoisonError, RwLock},
    time::Duration,
};

use anyhow::{Context as _, Result};
use hotpin_history::store::{ProgramKey, Store};
use hotpin_policy::hot::HotPolicy;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    signal::unix::{SignalKind, signal},
};
use tracer_agent::{
    AgentConfig, TracerAgent,
    daemon::{
        lease::LeaseServer,
        metrics::{self, FinishedPrograms, RunningRun, Sample, TracerNumbers, Traffic},
        otlp,
    },
    filter::ProcessFilter,
    privileges,
    sessions::Session,
};

pub use self::config::Settings;

mod fleet;
use super::DaemonArgs;

/// How often ended runs are written to the store.
const COLLECT_EVERY: Duration = Duration::from_millis(200);
/// How often the lease arbiter learns what the tracer sees pinned.
const LEASE_TICK: Duration = Duration::from_millis(250);
/// How long a metrics client has to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// What the daemon counts besides what the agent does.
struct Daemon {
    settings: Settings,
    store: Store,
    filter: Arc<RwLock<tracer_agent::filter::ProcessFilter>>,
    policy: HotPolicy,
    finished: FinishedPrograms,
    written: u64,
    store_errors: u64,
    /// Runs that ended without a CUDA call.
    without_calls: u64,
    /// Puts each history written in the fleet's store too, where there is one.
    fleet: Option<fleet::Uploader>,
    /// The node's pinned-memory arbiter, unless leases are off.
    leases: Option<LeaseServer>,
}

/// A store another user may write is refused (#41 item 5): a link planted there (a folder
/// named as a program, a history swapped for a link as it is written) would have the daemon
/// write, or give a user, files that are not theirs. The daemon writes as its own user, so
/// the store must be that user's and writable by no one else.
fn private_store(root: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::symlink_metadata(root)
        .with_context(|| format!("the history store {}", root.display()))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.file_type().is_symlink() {
        anyhow::bail!(
            "the history store {} is a symbolic link: give the folder itself",
            root.display()
        );
    }
    if meta.uid() != me || meta.mode() & 0o022 != 0 {
        anyhow::bail!(
            "the history store {} is {} (owner uid {}): another user could plant links in it; \
             make it this user's alone (chown {me} and chmod go-w) or give --store another folder",
            root.display(),
            format_args!("mode {:o}", meta.mode() & 0o7777),
            meta.uid()
        );
    }
    Ok(())
}

pub fn run(args: DaemonArgs) -> Result<ExitCode> {
    privileges::check()?;
    let settings = Settings::load(&args)?;
    let store = Store::open(&settings.store, settings.retention)
        .context("the history store cannot be used")?;
    private_store(store.root())?;
    let policy = HotPolicy::configured().unwrap_or_else(|error| {
        eprintln!(
            "tracer daemon: the cost file cannot be used ({:#}); judging by the built-in costs",
            anyhow::Error::from(error)
        );
        HotPolicy::default()
    });
    let filter = Arc::new(RwLock::new(settings.filter.clone()));
    let config = agent_config(&settings, &filter);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _guard = runtime.enter();
    // Before anything else: a SIGTERM, SIGINT or SIGHUP that comes while the daemon starts
    // (or right after it said it traces) is seen by the loop, never the default action
    // (a daemon stopped and continued just after its start was killed by SIGTERM so).
    let signals = Signals::new()?;
    // Bound before anything is attached: an address in use is said at once.
    let listener = bind_metrics(&runtime, settings.metrics)?;
    let leases = match &settings.leases {
        Some(lease) => {
            let (server, listener) = LeaseServer::bind(&lease.socket, lease.limits.clone())
                .context("the lease socket")?;
            runtime.spawn(server.clone().accept(listener));
            Some(server)
        }
        None => None,
    };
    let mut agent = TracerAgent::with_config(config);
    agent.start().context("starting the tracer")?;
    let running_already = agent.sessions().running().count();
    eprintln!("{}", banner(&settings, running_already));
    let fleet = match &settings.fleet {
        Some(url) => Some(
            fleet::Uploader::start(
                url,
                settings.host_name.clone(),
                settings.retention.max_histories,
            )
            .with_context(|| format!("the fleet's store {url}"))?,
        ),
        None => None,
    };
    let mut daemon = Daemon {
        fleet,
        leases,
        settings,
        store,
        filter,
        policy,
        finished: FinishedPrograms::default(),
        written: 0,
        store_errors: 0,
        without_calls: 0,
    };
    runtime.block_on(daemon.serve(&agent, listener, &args, signals))?;
    daemon.finish(agent)
}

/// The signals the daemon's loop answers, registered before its start.
struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Self> {
        Ok(Self {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }
}

impl Daemon {
    /// Ending: the targets leave the kernel's filter, the last events are read, and every
    /// run, ended or not, is written before the probes are released. Fails the exit status
    /// where a history could not be written.
    fn finish(mut self, mut agent: TracerAgent) -> Result<ExitCode> {
        agent.stop_keeping_probes().context("stopping the tracer")?;
        let sessions = agent.sessions().take_all();
        let unfinished = sessions.iter().filter(|s| !s.complete).count();
        for session in sessions {
            self.write(session);
        }
        eprintln!(
            "tracer daemon: stopped; {} histories written to {} ({unfinished} runs still going, \
             marked as checkpoints), {} could not be written",
            self.written,
            self.settings.store.display(),
            self.store_errors
        );
        if let Some(server) = &self.leases {
            // Clients keep their pins and reconnect to the next daemon.
            let _ = std::fs::remove_file(&server.path);
        }
        if let Some(uploader) = self.fleet.take() {
            let (put, failed) = uploader.finish();
            eprintln!(
                "tracer daemon: {put} histories put in the fleet's store {}, {failed} could not be",
                self.settings.fleet.as_deref().unwrap_or_default()
            );
        }
        Ok(if self.store_errors == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }
}

/// What the agent traces for the daemon: every process the kernel makes a target, none by
/// pid, into per-run histories bounded as the settings say.
fn agent_config(settings: &Settings, filter: &Arc<RwLock<ProcessFilter>>) -> AgentConfig {
    let mut config = AgentConfig::new(0);
    config.pids = Vec::new();
    config.ring_bytes = settings.ring_mib << 20;
    config.stop_on_library_open = settings.stop_on_load;
    config.seed_existing_memory = false;
    config.recorder.watch = Some(Arc::clone(filter));
    config.recorder.retention = settings.history_retention();
    config
}

/// The metrics listener, bound now (an address in use is said at once), or none when off.
fn bind_metrics(
    runtime: &tokio::runtime::Runtime,
    address: Option<SocketAddr>,
) -> Result<Option<TcpListener>> {
    let Some(address) = address else {
        return Ok(None);
    };
    runtime
        .block_on(TcpListener::bind(address))
        .map(Some)
        .with_context(|| {
            format!("cannot serve metrics on {address} (set another with --metrics, or off)")
        })
}

/// The line the daemon says once it traces: what, where histories go, what it serves.
fn banner(settings: &Settings, running_already: usize) -> String {
    let filtered = !(settings.filter.users.is_empty()
        && settings.filter.cgroups.is_empty()
        && settings.filter.commands.is_empty());
    let mut line = format!(
        "tracer daemon: tracing every CUDA process{} ({running_already} running already); \
         histories go to {}",
        if filtered { " the filters admit" } else { "" },
        settings.store.display(),
    );
    if let Some(address) = settings.metrics {
        line += &format!("; metrics on http://{address}/metrics");
    }
    if let Some((endpoint, every)) = &settings.otlp {
        line += &format!(" and every {}s to {endpoint}", every.as_secs());
    }
    if let Some(lease) = &settings.leases {
        line += &format!(
            "; pinned-memory leases on {} within {} MiB",
            lease.socket.display(),
            lease.limits.node >> 20
        );
    }
    line
}

impl Daemon {
    async fn serve(
        &mut self,
        agent: &TracerAgent,
        listener: Option<TcpListener>,
        args: &DaemonArgs,
        signals: Signals,
    ) -> Result<()> {
        let Signals {
            mut terminate,
            mut interrupt,
            mut hangup,
        } = signals;
        let mut collect = tokio::time::interval(COLLECT_EVERY);
        let mut lease_tick = tokio::time::interval(LEASE_TICK);
        let started_unix_ns = unix_ns();
        let mut next_export = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = collect.tick() => {
                    for session in agent.take_ended_sessions() {
                        self.write(session);
                    }
                }
                _ = tokio::time::sleep_until(next_export), if self.settings.otlp.is_some() => {
                    if let Some((endpoint, every)) = self.settings.otlp.clone() {
                        next_export = tokio::time::Instant::now() + every;
                        let request = otlp::request(&self.samples(agent), started_unix_ns, unix_ns());
                        // Off the loop: a slow collector delays no history and no scrape.
                        tokio::task::spawn_blocking(move || {
                            if let Err(error) = otlp::send(&endpoint, &request) {
                                tracing::warn!(error = format!("{:#}", anyhow::Error::from(error)), "OTLP export failed");
                            }
                        });
                    }
                }
                _ = lease_tick.tick(), if self.leases.is_some() => self.tick_leases(agent),
                accepted = accept(listener.as_ref()) => match accepted {
                    Ok((stream, _)) => {
                        tokio::spawn(respond(stream, self.samples(agent)));
                    }
                    Err(error) => tracing::warn!(%error, "cannot accept a metrics connection"),
                },
                _ = hangup.recv() => self.reload(args, agent),
                _ = terminate.recv() => break,
                _ = interrupt.recv() => break,
            }
        }
        Ok(())
    }

    /// Writes a run's history to the store; a run still going is marked as a checkpoint. A
    /// run that made no CUDA call (a helper that only looked at a CUDA library, as `ldd`
    /// does) has nothing to keep: it is counted, not stored.
    fn write(&mut self, mut session: Session) {
        let program = session.program();
        if session.history.stats().calls == 0 && session.complete {
            self.without_calls += 1;
            tracing::info!(
                pid = session.info.root,
                program,
                "a run without CUDA calls: not stored"
            );
            return;
        }
        let traffic = Traffic::of(&session.history, &self.policy);
        self.finished.add(&program, &traffic);
        if !session.complete {
            session.history.meta_mut().checkpoint_unix_s = Some(hotpin_history::dump::unix_now());
        }
        // What the node's arbiter leased each of its processes goes into its history.
        if let Some(server) = &self.leases {
            let mut pids = session.history.meta().pids.clone();
            pids.push(session.info.root);
            pids.sort_unstable();
            pids.dedup();
            for pid in pids {
                if let Some(account) = server.account_of(pid) {
                    session.history.set_leases(pid, account);
                }
            }
        }
        // A process gone before it could be named is stored as "unknown-PID".
        let key = match &session.info.program {
            Some(key) => Ok(key.clone()),
            None => ProgramKey::try_from(program.clone()).map_err(anyhow::Error::from),
        };
        let saved = key.and_then(|key| {
            self.store
                .save(
                    &key,
                    &session.history,
                    session.info.root,
                    self.settings.verbose,
                )
                .map(|path| (key, path))
                .map_err(anyhow::Error::from)
        });
        match saved {
            Ok((key, path)) => {
                self.written += 1;
                if let Some(uploader) = &self.fleet {
                    uploader.put(&key, path.clone());
                }
                // Readable by the user whose run it is (`hotpin run --mode use` as that user),
                // and still by no one else: it holds that process's addresses.
                // The file itself, never what a link put in its place points at.
                if let Some(uid) = session.info.uid
                    && let Err(error) = std::os::unix::fs::lchown(&path, Some(uid), None)
                {
                    tracing::warn!(path = %path.display(), %error, "cannot give the history to its user");
                }
                tracing::info!(
                    pid = session.info.root,
                    program,
                    path = %path.display(),
                    transfers = session.history.stats().transfers,
                    "history written"
                );
            }
            Err(error) => {
                self.store_errors += 1;
                eprintln!(
                    "tracer daemon: cannot write the history of {program} (pid {}): {:#}",
                    session.info.root, error
                );
            }
        }
    }

    /// Rereads the configuration file (the command line still overrides it): the filters,
    /// the store and its retention, the other settings. The metrics address and the ring size
    /// stay as they were until a restart.
    fn reload(&mut self, args: &DaemonArgs, agent: &TracerAgent) {
        let settings = match Settings::load(args) {
            Ok(settings) => settings,
            Err(error) => {
                eprintln!("tracer daemon: SIGHUP: keeping the configuration in force: {error:#}");
                return;
            }
        };
        let store = match Store::open(&settings.store, settings.retention)
            .map_err(anyhow::Error::from)
            .and_then(|store| private_store(store.root()).map(|()| store))
        {
            Ok(store) => store,
            Err(error) => {
                eprintln!(
                    "tracer daemon: SIGHUP: keeping the configuration in force: the store: {error:#}"
                );
                return;
            }
        };
        if settings.metrics != self.settings.metrics || settings.ring_mib != self.settings.ring_mib
        {
            eprintln!(
                "tracer daemon: SIGHUP: the metrics address and the ring size change at the \
                 next start"
            );
        }
        match (&self.leases, &settings.leases) {
            (Some(server), Some(lease)) if lease.socket == server.path => {
                server.set_limits(lease.limits.clone());
            }
            (None, None) => {}
            _ => eprintln!(
                "tracer daemon: SIGHUP: turning leases on or off, or moving their socket, \
                 takes a restart"
            ),
        }
        *self.filter.write().unwrap_or_else(PoisonError::into_inner) = settings.filter.clone();
        // Runs that start from now on.
        agent.sessions().retention = settings.history_retention();
        self.store = store;
        let metrics = self.settings.metrics;
        let ring_mib = self.settings.ring_mib;
        self.settings = Settings {
            metrics,
            ring_mib,
            ..settings
        };
        eprintln!(
            "tracer daemon: SIGHUP: configuration reloaded{}",
            self.settings
                .file
                .as_ref()
                .map(|p| format!(" from {}", p.display()))
                .unwrap_or_default()
        );
    }

    /// Tells the lease arbiter what the tracer sees pinned per process now, and checks the
    /// releases due against it.
    fn tick_leases(&self, agent: &TracerAgent) {
        let Some(server) = &self.leases else { return };
        let sessions = agent.sessions();
        let mut pinned: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
        for session in sessions.running() {
            for allocation in session.history.allocations() {
                if allocation.is_live() && allocation.kind.is_pinned() {
                    *pinned.entry(allocation.pid).or_default() += allocation.size;
                }
            }
        }
        server.tick(pinned, |pid, start, len| {
            sessions.running().any(|session| {
                session.history.find(pid, start).is_some_and(|a| {
                    a.start == start && a.size == len && a.is_live() && a.kind.is_pinned()
                })
            })
        });
    }

    /// The metrics as things stand.
    fn samples(&self, agent: &TracerAgent) -> Vec<Sample> {
        let leases = self.leases.as_ref().map(LeaseServer::figures);
        let running: Vec<RunningRun> = agent
            .sessions()
            .running()
            .map(|session| RunningRun {
                program: session.program(),
                pid: session.info.root,
                traffic: Traffic::of(&session.history, &self.policy),
                leased_bytes: leases.as_ref().map_or(0, |figures| {
                    figures
                        .clients
                        .iter()
                        .filter(|(pid, _)| session.live.contains(pid) || *pid == session.info.root)
                        .map(|(_, bytes)| bytes)
                        .sum()
                }),
            })
            .collect();
        let status = agent.live_status();
        let attached = agent.attached_probes() as u64;
        let numbers = TracerNumbers {
            lost_events: status.lost_events,
            events: status.events,
            probes_attached: attached,
            probes_unavailable: agent.probes().len() as u64 - attached,
            histories_written: self.written,
            runs_without_calls: self.without_calls,
            store_errors: self.store_errors,
        };
        let mut samples = metrics::samples(&running, &self.finished, &numbers);
        if let Some(figures) = &leases {
            samples.extend(metrics::lease_samples(figures));
        }
        samples
    }
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The next metrics connection, or never when metrics are off.
async fn accept(listener: Option<&TcpListener>) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

/// Answers one HTTP/1.x request: `GET /metrics` (or `/`) with the samples, anything else
/// 404. OpenMetrics to a scraper that accepts it (Prometheus asks for it), else Prometheus's
/// classic text format (curl, `promtool check metrics`).
async fn respond(mut stream: TcpStream, samples: Vec<Sample>) {
    let mut request = Vec::new();
    let mut buffer = [0u8; 1024];
    let read = tokio::time::timeout(REQUEST_TIMEOUT, async {
        while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => request.extend_from_slice(buffer.get(..n).unwrap_or_default()),
            }
        }
        true
    })
    .await;
    if !matches!(read, Ok(true)) {
        return;
    }
    let line = request
        .split(|&b| b == b'\r')
        .next()
        .map(String::from_utf8_lossy)
        .unwrap_or_default();
    let mut words = line.split_whitespace();
    let (method, path) = (words.next(), words.next());
    let openmetrics = String::from_utf8_lossy(&request)
        .lines()
        .filter_map(|line| line.split_once(':'))
        .any(|(name, value)| {
            name.eq_ignore_ascii_case("accept") && value.contains("application/openmetrics-text")
        });
    let (status, content_type, body) = match (method, path) {
        (Some("GET"), Some("/metrics" | "/")) if openmetrics => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics::render(&samples),
        ),
        (Some("GET"), Some("/metrics" | "/")) => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            metrics::render_classic(&samples),
        ),
        _ => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "only GET /metrics is served\n".to_owned(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
