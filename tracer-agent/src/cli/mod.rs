//! The `tracer` command line.

// Nothing here may panic on what a user, a program, the environment or a file hands it:
// checked by these lints outside tests (an index or an unwrap needs a written reason).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

mod daemon;
mod export;
mod probes;
mod record;
mod report;

use std::{ffi::OsString, path::PathBuf, process::ExitCode};

use clap::{Args, Parser, Subcommand};

/// hotpin's tracer: sees every host<->device copy of a CUDA program through eBPF uprobes on
/// its CUDA runtime and driver, and records which host allocations are hot (copied often) and
/// which are cold.
#[derive(Parser, Debug)]
#[command(name = "tracer", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// `tracer --pid PID` is `tracer record --pid PID`.
    #[command(flatten)]
    record: RecordArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Trace running processes (--pid) or a command (-- CMD ARGS) and write its history.
    Record(RecordArgs),
    /// List every probe: attached, or unavailable and why.
    Probes(ProbesArgs),
    /// Show the hot/cold report of a saved history.
    Report(ReportArgs),
    /// Write a verbose history's timelines for ui.perfetto.dev or chrome://tracing.
    Export(ExportArgs),
    /// Trace every CUDA process on this host, from its first CUDA call; write each run's
    /// history to the store when it ends; serve metrics for Prometheus.
    Daemon(DaemonArgs),
}

#[derive(Args, Debug, Default)]
struct DaemonArgs {
    /// The configuration file (TOML; the command line overrides it). Default:
    /// /etc/hotpin/tracer.toml if it exists.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The history store (default: $HOTPIN_STORE, else /var/lib/hotpin/histories).
    #[arg(long, value_name = "DIR")]
    store: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics (default 127.0.0.1:9464), or "off".
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Also send the metrics to an OpenTelemetry collector (OTLP/HTTP, protobuf), e.g.
    /// http://127.0.0.1:4318 (path /v1/metrics unless given; no TLS). Off by default.
    #[arg(long, value_name = "URL")]
    otlp: Option<String>,
    /// Seconds between OTLP exports (default 10).
    #[arg(long, value_name = "SECONDS")]
    otlp_every: Option<u64>,
    /// Trace only processes of this user id (repeat for several).
    #[arg(long = "user", value_name = "UID")]
    users: Vec<u32>,
    /// Trace only processes whose cgroup path matches this glob (repeat for several).
    #[arg(long = "cgroup", value_name = "GLOB")]
    cgroups: Vec<String>,
    /// Trace only processes whose command line matches this glob (repeat for several).
    #[arg(long = "command", value_name = "GLOB")]
    commands: Vec<String>,
    /// Keep every allocation's event timeline in the histories (larger files).
    #[arg(long)]
    verbose: bool,
    /// Do not hold a process at its first CUDA library open while the probes attach (its
    /// first calls may then be missed; its parent does not see it stop).
    #[arg(long)]
    no_stop_on_load: bool,
    /// Kernel ring buffer size in MiB (a power of two; default 16).
    #[arg(long, value_name = "MIB")]
    ring_mib: Option<u32>,
    /// Most allocation entries each run's history keeps: past it, the oldest freed
    /// allocations are folded into one aggregate per call site and size, counts kept
    /// (default 100000; 0: no bound).
    #[arg(long, value_name = "N")]
    max_allocations: Option<usize>,
    /// Keep at most this many histories in the store (default 1000).
    #[arg(long, value_name = "N")]
    max_histories: Option<usize>,
    /// Keep at most this many bytes of histories in the store (default 10G; suffixes K, M, G).
    #[arg(long, value_parser = hotpin_history::units::parse_bytes, value_name = "BYTES")]
    max_store_bytes: Option<u64>,
    /// Also put each history written in a fleet's store, s3://BUCKET/PREFIX (credentials
    /// and endpoint from the usual AWS environment), keeping there the --max-histories latest
    /// of each program; `hotpin run --fleet` on any node starts from them.
    #[arg(long, value_name = "URL")]
    fleet: Option<String>,
    /// The name this node writes its histories under in the fleet's store (default: the host
    /// name).
    #[arg(long, value_name = "NAME")]
    host_name: Option<String>,
    /// Grant pinned-memory leases to `hotpin run` processes on this Unix socket (default
    /// /run/hotpin/lease.sock), or "off".
    #[arg(long, value_name = "PATH")]
    lease_socket: Option<String>,
    /// The node's pinned-memory budget for leases: bytes (suffixes K, M, G) or a share of
    /// MemTotal such as "25%" (the default).
    #[arg(long, value_name = "SIZE")]
    node_budget: Option<String>,
    /// Cap what one user's processes may lease, UID=SIZE (repeat for several).
    #[arg(long = "user-cap", value_name = "UID=SIZE")]
    user_caps: Vec<String>,
    /// Cap what the processes in a cgroup (or under it) may lease, PATH=SIZE (repeat for
    /// several).
    #[arg(long = "cgroup-cap", value_name = "PATH=SIZE")]
    cgroup_caps: Vec<String>,
}

#[derive(Args, Debug)]
struct ExportArgs {
    /// A history written by `tracer record` (either format; `--verbose` for timelines).
    file: PathBuf,
    /// `chrome`: the timelines in the Chrome JSON trace format, which Perfetto's UI opens.
    /// `json`: the history itself as a JSON dump (what `tracer record -o X.json` writes), e.g.
    /// to read a history from the daemon's store with a JSON tool.
    #[arg(long, default_value = "chrome", value_parser = ["chrome", "json"])]
    format: String,
    /// Where to write it (default: FILE with `.trace.json`, or `.json`, in place of its
    /// extension).
    #[arg(short, long, value_name = "OUT")]
    output: Option<PathBuf>,
}

#[derive(Args, Debug, Default)]
struct TargetArgs {
    /// Attach to hotpin's allocator library (or a program linked with it) besides what the
    /// process maps.
    #[arg(long, value_name = "PATH")]
    hotpin: Option<PathBuf>,
    /// Attach to this CUDA runtime (libcudart.so* or an executable linked with it statically)
    /// besides what the process maps.
    #[arg(long, value_name = "PATH")]
    cuda_runtime: Option<PathBuf>,
    /// Attach to this CUDA driver (libcuda.so*) besides what the process maps.
    #[arg(long, value_name = "PATH")]
    cuda_driver: Option<PathBuf>,
}

#[derive(Args, Debug, Default)]
struct RecordArgs {
    /// A process to trace (repeat for several). Child processes it makes from now on are
    /// followed from their first instruction.
    #[arg(short, long = "pid", value_name = "PID")]
    pids: Vec<u32>,
    #[command(flatten)]
    target: TargetArgs,
    /// Where to write the history: `.json` for JSON, anything else for compact binary.
    /// Default: hotpin-<program>-<pid>.hotpin in the current directory.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Write the history over an existing output file even if the recording saw no CUDA
    /// call (by default such a file is left as it was: a typo must not lose a good history).
    #[arg(long)]
    replace_empty: bool,
    /// Keep every allocation's event timeline in the dump (larger files).
    #[arg(long)]
    verbose: bool,
    /// Write the history so far to the output file every this many seconds while recording
    /// (atomically: a tracer killed with SIGKILL leaves the last checkpoint, which `tracer
    /// report` marks as such). 0 turns checkpoints off.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS", value_parser = hotpin_history::units::parse_seconds)]
    checkpoint: f64,
    /// Stop after this many seconds (default: when the targets exit, or on Ctrl-C/SIGTERM).
    #[arg(long, value_name = "SECONDS", value_parser = hotpin_history::units::parse_seconds)]
    duration: Option<f64>,
    /// Kernel ring buffer size in MiB (a power of two).
    #[arg(long, default_value_t = 16, value_name = "MIB")]
    ring_mib: u32,
    /// With --pid: stop a target for the moment it takes to attach to a CUDA library it opens
    /// (exact, but its parent sees it stop and continue). A started command always is.
    #[arg(long)]
    stop_on_load: bool,
    /// Print the hot/cold report when the recording ends.
    #[arg(long)]
    report: bool,
    /// Also count user page faults per allocation (exceptions:page_fault_user). Off by
    /// default: faults on consecutive pages are sent as one event, but a process that faults
    /// all over (a Python start) still sends many.
    #[arg(long)]
    page_faults: bool,
    /// Also probe libc's allocator (malloc, calloc, realloc, posix_memalign, aligned_alloc,
    /// memalign, free), so pageable allocations get call sites. Each call costs about 1 µs
    /// even when dropped; allocations under --malloc-floor are dropped in the kernel.
    #[arg(long)]
    libc_malloc: bool,
    /// Also probe the runtime's cudaMemcpy and cudaMemcpyAsync (by default only the driver
    /// copy each makes is, at one probe hit per copy instead of three): copies that fail in
    /// the driver are then told apart.
    #[arg(long)]
    runtime_copies: bool,
    /// Do not read the Python lines of allocations in CPython 3.11 to 3.13 programs (read by
    /// default: each allocation of such a program sends one more event).
    #[arg(long)]
    no_python_lines: bool,
    /// Most allocation entries the history keeps: past it, the oldest freed allocations are
    /// folded into one aggregate per call site and size, counts kept (0: no bound).
    #[arg(long, default_value_t = tracer_agent::DEFAULT_MAX_ALLOCATIONS, value_name = "N")]
    max_allocations: usize,
    /// Smallest libc allocation recorded with --libc-malloc (suffixes K, M, G).
    #[arg(long, default_value = "1M", value_parser = hotpin_history::units::parse_bytes, value_name = "BYTES")]
    malloc_floor: u64,
    /// Start the command with this library preloaded (LD_PRELOAD), an allocator interposer
    /// such as hotpin's: the call site of an allocation that goes through it is the first
    /// frame outside it (it must keep frame pointers).
    #[arg(long, value_name = "LIB", requires = "command")]
    preload: Option<PathBuf>,
    /// The command to start and trace from its first instruction.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

#[derive(Args, Debug)]
struct ProbesArgs {
    /// List the probes for the CUDA libraries this process maps.
    #[arg(short, long)]
    pid: Option<u32>,
    #[command(flatten)]
    target: TargetArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct ReportArgs {
    /// A history file (either format), or a program name whose latest history in the store is
    /// shown: its executable's or its script's name (`my_app`, `train.py`), or its key there.
    file: PathBuf,
    /// The history store `tracer daemon` writes, where a program name is looked up.
    #[arg(long, value_name = "DIR", default_value_os_t = hotpin_history::store::default_root())]
    store: PathBuf,
    /// Rows per list.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Judge by a fixed bar instead of the cost model: hot with at least this many
    /// transfers.
    #[arg(long, value_name = "N")]
    min_transfers: Option<u64>,
    /// With --min-transfers: and at least this many transfers per MiB of its size.
    #[arg(long, default_value_t = 0.0)]
    min_transfers_per_mib: f64,
    /// The cost model's numbers from this file (`hotpin calibrate` writes one); default: the
    /// file the allocator reads ($HOTPIN_COSTS, else ~/.config/hotpin/costs.json), else our
    /// H100's, stated in docs/bench/history.md.
    #[arg(long, value_name = "FILE", conflicts_with = "min_transfers")]
    costs: Option<PathBuf>,
    /// Hold the advice to a pinned-memory budget (`300M`, `2G`): the places `hotpin run
    /// --budget` would pin, densest first, and those left over it.
    #[arg(long, value_name = "BYTES", value_parser = hotpin_history::units::parse_bytes)]
    budget: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Also write the report to FILE as one HTML page (besides the text or JSON printed):
    /// the same sections as tables sorted by a click on a column, the pinned memory over time
    /// and when each hot allocation was copied (timelines: `tracer record --verbose`).
    /// Self-contained: it opens with no network.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// List mappings and heaps nobody copied too (hidden by default, with a count).
    #[arg(long)]
    all: bool,
    /// Show names whole: C++ templates and argument lists unfolded, every caller.
    #[arg(long)]
    full_names: bool,
}

impl TargetArgs {
    /// The files named on the command line.
    fn files(&self) -> Vec<PathBuf> {
        [&self.cuda_runtime, &self.cuda_driver, &self.hotpin]
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }
}

pub fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HOTPIN_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: a log file or journald gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Record(args)) => record::run(args),
        Some(Command::Probes(args)) => probes::run(args),
        Some(Command::Report(args)) => report::run(args),
        Some(Command::Export(args)) => export::run(args),
        Some(Command::Daemon(args)) => daemon::run(args),
        None if !cli.record.pids.is_empty() || !cli.record.command.is_empty() => {
            record::run(cli.record)
        }
        None => {
            eprintln!("tracer: nothing to trace; see `tracer --help`");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("tracer: {error:#}");
            ExitCode::FAILURE
        }
    }
}
