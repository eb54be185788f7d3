//! `hotpin run`: the command, with the interposer preloaded in the chosen mode, or in profile
//! mode recorded by the tracer.
//!
//! The settings travel as environment variables (`LD_PRELOAD`, `HOTPIN_MODE`,
//! `HOTPIN_HISTORY`, `HOTPIN_PINNED_BUDGET`), so child processes inherit the mode (and the
//! history: in use mode without --history, the program's latest in the store). Everything
//! that can be checked is checked before the command starts: the history loads, the budget
//! parses, the interposer and the tracer are where they should be.

use std::{
    ffi::{OsStr, OsString},
    os::unix::{fs::DirBuilderExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Command, ExitCode},
};

use anyhow::{Context as _, Result, bail};
use hotpin::Mode;
use hotpin_history::store::{self, ProgramKey, Store};

/// The interposer's file name, looked for beside the `hotpin` binary.
const PRELOAD: &str = "libhotpin_preload.so";

/// `--floor` when not given.
const DEFAULT_FLOOR: &str = "1M";

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// auto: learn while the program runs what its copies make worth pinning, starting from
    /// what the last run learned, and pin that (no root, no tracer); use: pin what a
    /// recorded history says pays, nothing more; profile: record the program as it is with
    /// the tracer (`tracer record --libc-malloc`); pin-all, pin-none: the baselines. In every
    /// mode the program computes what it computes without hotpin (docs/transparency.md).
    #[arg(long, default_value = "auto", value_parser = ["auto", "profile", "use", "pin-all", "pin-none"])]
    mode: String,
    /// The history. Auto mode starts from it if it exists and writes what it learned there
    /// at exit (default: one per program under $XDG_STATE_HOME/hotpin, else
    /// ~/.local/state/hotpin). Profile mode writes it (default: the tracer's name for it);
    /// use mode reads it (default: the program's latest history in the store).
    #[arg(long, value_name = "FILE")]
    history: Option<PathBuf>,
    /// The history store `tracer daemon` writes, where use mode finds the program's latest
    /// history when --history is not given.
    #[arg(long, value_name = "DIR", default_value_os_t = store::default_root())]
    store: PathBuf,
    /// A fleet's store of histories, s3://BUCKET/PREFIX (credentials and endpoint from the
    /// usual AWS environment). Without --history, auto and use mode start from the program's
    /// latest history there (cached under ~/.cache/hotpin/fleet), and auto mode first puts
    /// there what this node's last run learned. An unreachable or slow store is said once
    /// and the run goes on without it, after --fleet-wait seconds at most.
    /// ($HOTPIN_FLEET when not given.)
    #[arg(long, value_name = "URL")]
    fleet: Option<String>,
    /// The most the fleet's store may hold the program's start, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0, value_parser = hotpin_history::units::parse_seconds)]
    fleet_wait: f64,
    /// Without --history, start from the N latest runs of the program in the fleet's store
    /// (or the local store), merged: an allocation or recycled group is hot where most of the
    /// runs that made it found it hot (docs/online.md). 1: the latest alone.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    merge_runs: u16,
    /// Most memory pinned at once by the interposer's promotions (bytes like 512M, or 25%).
    #[arg(long, value_name = "BYTES")]
    budget: Option<String>,
    /// Auto mode asks the node's arbiter (`tracer daemon`) for a lease before each pin, at
    /// this Unix socket (default /run/hotpin/lease.sock; $HOTPIN_LEASE_SOCKET), or "off".
    /// Without a daemon there, the process keeps to its own budget, and says so once where
    /// the socket was given (this flag or $HOTPIN_LEASE_SOCKET) or with --verbose.
    #[arg(long, value_name = "PATH")]
    lease_socket: Option<String>,
    /// Write the interposer's decisions and counters to FILE.<pid>.json per process.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Make what would only be said an error, exit status 125 (as from `env` or `timeout`
    /// when they, not the command, failed; stderr says why): a setting the interposer cannot
    /// use stops the program before it starts, and a use-mode history that matched none of
    /// the program's allocations fails the run after the program ran whole.
    #[arg(long)]
    strict: bool,
    /// Say what is only worth knowing when something is amiss: where auto mode found no node
    /// arbiter at the default socket ($HOTPIN_VERBOSE=1).
    #[arg(long)]
    verbose: bool,
    /// Allocations below this size go straight to libc (suffixes K, M, G).
    #[arg(long, default_value = DEFAULT_FLOOR, value_name = "BYTES")]
    floor: String,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

pub fn run(mut args: RunArgs) -> Result<ExitCode> {
    if args.fleet.is_none() {
        args.fleet = std::env::var("HOTPIN_FLEET")
            .ok()
            .filter(|url| !url.is_empty());
    }
    let mode = Mode::from_name(&args.mode).with_context(|| {
        format!(
            "--mode {} is not one of auto, profile, use, pin-all, pin-none",
            args.mode
        )
    })?;
    let floor = hotpin_history::units::parse_bytes(&args.floor)
        .map_err(|e| anyhow::anyhow!("--floor {}: {e}", args.floor))?;
    let (program, rest) = args
        .command
        .split_first()
        .context("give the command to run after `--`")?;
    let static_runtime = static_runtime(program, mode);
    if let Some(report) = &args.report
        && (report.is_dir() || report.as_os_str().to_string_lossy().ends_with('/'))
    {
        bail!(
            "--report {} names a directory: give a file name prefix (each process writes \
             PREFIX.<pid>.json)",
            report.display()
        );
    }
    if mode == Mode::Profile {
        if args.budget.is_some() {
            eprintln!("hotpin: --budget has no effect in profile mode, which pins nothing");
        }
        return profile(&args, floor, static_runtime.is_none(), program, rest);
    }
    if let Some(budget) = &args.budget
        && hotpin::parse_budget(budget).with_context(|| format!("--budget {budget}"))? == 0
    {
        eprintln!(
            "hotpin: --budget {budget}: nothing will be pinned (the program runs as written)"
        );
    }
    let mut command = Command::new(program);
    command.args(rest);
    hand_down(&args, &mut command, mode, floor, program, rest)?;
    if static_runtime.is_some() {
        let error = command.env_remove("HOTPIN_MODE").exec();
        cannot_start(program, &error);
    }
    let preload = sibling(PRELOAD)?;
    let mut preloads = OsString::from(preload.as_os_str());
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preloads.push(" ");
        preloads.push(existing);
    }
    command.env("LD_PRELOAD", preloads);
    // Replaces this process: the program's exit status and signals are its own.
    let error = command.exec();
    cannot_start(program, &error)
}

/// Hands `hotpin run`'s settings to the interposer in the program's environment (the
/// `HOTPIN_*` variables `state::init` reads at load), the history auto and use modes start
/// from among them.
fn hand_down(
    args: &RunArgs,
    command: &mut Command,
    mode: Mode,
    floor: u64,
    program: &OsStr,
    rest: &[OsString],
) -> Result<()> {
    command.env("HOTPIN_MODE", mode.name());
    if args.strict {
        command.env("HOTPIN_STRICT", "1");
    }
    if args.verbose {
        command.env("HOTPIN_VERBOSE", "1");
    }
    // The user's own HOTPIN_MALLOC_FLOOR stands unless --floor says otherwise (#41 item 13:
    // it was always set over); a --floor equal to the default cannot be told from none.
    if args.floor != DEFAULT_FLOOR || std::env::var_os("HOTPIN_MALLOC_FLOOR").is_none() {
        command.env("HOTPIN_MALLOC_FLOOR", floor.to_string());
    }
    if mode == Mode::Auto {
        auto(args, command, program, rest)?;
    }
    if mode == Mode::Use {
        use_mode(args, command, program, rest)?;
    }
    if let Some(socket) = &args.lease_socket {
        command.env("HOTPIN_LEASE_SOCKET", socket);
    }
    if let Some(budget) = &args.budget {
        command.env("HOTPIN_PINNED_BUDGET", budget);
    }
    if let Some(report) = &args.report {
        command.env("HOTPIN_REPORT", absolute(report)?);
    }
    Ok(())
}

/// A command that cannot be run ends `hotpin run` as a shell would: 127 when it is not
/// found, 126 when it cannot be run (#41 item 13; it was 1, as for any error of hotpin's).
fn cannot_start(program: &OsStr, error: &std::io::Error) -> ! {
    eprintln!(
        "hotpin: cannot start {}: {error}",
        program.to_string_lossy()
    );
    std::process::exit(if error.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    })
}

/// The program's executable, if it carries the CUDA runtime statically (its CUDA calls cannot
/// be interposed): said once, as it then runs untouched.
fn static_runtime(program: &OsString, mode: Mode) -> Option<PathBuf> {
    let executable = store::find_executable(std::ffi::OsStr::new(program))
        .filter(|exe| carries_cuda_runtime(exe))?;
    eprintln!(
        "hotpin: {} carries the CUDA runtime statically: its CUDA calls cannot be \
         interposed, so it runs untouched{}",
        executable.display(),
        if mode == Mode::Profile {
            " (and is recorded as it is)"
        } else {
            ""
        }
    );
    Some(executable)
}

/// Profile mode: the tracer records the program as it is, libc's allocations above the floor
/// included, so use mode can recognise them by call site. The interposer is loaded but
/// changes nothing: it only makes the program allocate as it will in use mode. (It used to pin
/// everything, so that JAX, which copies pageable memory through a pinned bounce buffer of
/// its own, would copy its buffers directly; since pinning is hidden from the program's
/// questions, that no longer changes what JAX does, and a profile must record the program as
/// it is: docs/transparency.md.)
fn profile(
    args: &RunArgs,
    floor: u64,
    interpose: bool,
    program: &OsStr,
    rest: &[OsString],
) -> Result<ExitCode> {
    let tracer = sibling("tracer").or_else(|_| {
        store::find_executable(std::ffi::OsStr::new("tracer"))
            .context("the tracer is neither beside hotpin nor on PATH")
    })?;
    let mut command = Command::new(tracer);
    command
        .args(["record", "--libc-malloc", "--malloc-floor"])
        .arg(floor.to_string())
        .env("HOTPIN_MALLOC_FLOOR", floor.to_string());
    if interpose {
        command.arg("--preload").arg(sibling(PRELOAD)?);
    }
    if let Some(report) = &args.report {
        command.env("HOTPIN_REPORT", absolute(report)?);
    }
    if let Some(history) = &args.history {
        command.arg("-o").arg(history);
    }
    command
        .arg("--")
        .arg(program)
        .args(rest)
        .env("HOTPIN_MODE", "profile");
    let error = command.exec();
    Err(anyhow::Error::from(error).context("cannot start the tracer"))
}

/// Use mode: the history it pins from (the one given, else the program's latest in the
/// fleet's store or the local store, with the runs before it to merge), checked now.
fn use_mode(
    args: &RunArgs,
    command: &mut Command,
    program: &OsStr,
    rest: &[OsString],
) -> Result<()> {
    let mut runs = match (&args.history, &args.fleet) {
        (None, Some(url)) => from_fleet(url, args, program, rest, None),
        _ => Vec::new(),
    };
    if args.history.is_none() && runs.is_empty() {
        let key = ProgramKey::of_command(program, rest)?;
        runs = latest_in_store(&args.store, &key, args.merge_runs.into())?;
        let Some(latest) = runs.first() else {
            bail!(
                "use mode needs --history FILE (a history `hotpin run --mode profile` \
                 wrote), or a history of {key} in the store {}: run the program under \
                 `tracer daemon` first, or give --store DIR",
                args.store.display()
            );
        };
        eprintln!(
            "hotpin: using {}, the latest history of {key} in the store{}",
            latest.display(),
            match runs.len() {
                1 => String::new(),
                n => format!(", merged with the {} runs before it", n - 1),
            }
        );
    }
    let history = match &args.history {
        Some(history) => history.clone(),
        None => runs.remove(0),
    };
    merge_with(command, &runs)?;
    if hotpin_history::files::read_once(&history) {
        bail!(
            "the history {} can be read only once (a pipe or a device), and it is read \
             twice (checked here, used by the program): give a file",
            history.display()
        );
    }
    hotpin_history::dump::read(&history)
        .with_context(|| format!("the history {} cannot be used", history.display()))?;
    command.env("HOTPIN_HISTORY", absolute(&history)?);
    Ok(())
}

/// Auto mode: where it starts from (the history given, else what the last run of this
/// program learned, else the program's latest in the store) and where it writes what it
/// learns. A history that cannot inform it is said, not fatal: the run learns from scratch;
/// where that file is the one it would write, it is left as it is and nothing is written.
fn auto(args: &RunArgs, command: &mut Command, program: &OsStr, rest: &[OsString]) -> Result<()> {
    let learned = match &args.history {
        Some(history) => Some(absolute(history)?),
        None => state_file(program, rest),
    };
    let mut start = learned.clone().filter(|path| path.exists());
    if args.history.is_none()
        && let Some(url) = &args.fleet
    {
        let mut runs = from_fleet(url, args, program, rest, learned.as_deref());
        if !runs.is_empty() {
            start = Some(runs.remove(0));
            merge_with(command, &runs)?;
        }
    }
    if start.is_none() && args.history.is_none() {
        start = from_store(args, command, program, rest)?;
    }
    if let Some(history) = start {
        if hotpin_history::files::read_once(&history) {
            bail!(
                "the history {} can be read only once (a pipe or a device): give a file",
                history.display()
            );
        }
        match hotpin_history::dump::read(&history) {
            Ok(_) => {
                command.env("HOTPIN_HISTORY", &history);
            }
            Err(error) => {
                command.env_remove("HOTPIN_MERGE");
                let error = anyhow::Error::from(error);
                if learned.as_deref() == Some(history.as_path()) {
                    // Where this run would write what it learned: a file that is not a
                    // history hotpin can read (notes, a configuration, a program) is never
                    // written over (#41 item 9).
                    if args.strict {
                        bail!(
                            "{} is not a history hotpin can read ({error:#}): it would be \
                             written over; give --history another file",
                            history.display()
                        );
                    }
                    eprintln!(
                        "hotpin: {} is not a history hotpin can read ({error:#}): it is left \
                         as it is, and what this run learns is not kept (give --history \
                         another file)",
                        history.display()
                    );
                    return Ok(());
                }
                eprintln!(
                    "hotpin: the history {} cannot be used ({error:#}); learning from scratch",
                    history.display(),
                );
            }
        }
    }
    learn_to(command, learned)
}

/// Auto mode with no history given or learned before: the program's latest in the store, the
/// runs to merge with it handed down, said (the daemon's histories match less).
fn from_store(
    args: &RunArgs,
    command: &mut Command,
    program: &OsStr,
    rest: &[OsString],
) -> Result<Option<PathBuf>> {
    let Ok(key) = ProgramKey::of_command(program, rest) else {
        return Ok(None);
    };
    let Ok(mut stored) = latest_in_store(&args.store, &key, args.merge_runs.into()) else {
        return Ok(None);
    };
    if stored.is_empty() {
        return Ok(None);
    }
    let latest = stored.remove(0);
    merge_with(command, &stored)?;
    eprintln!(
        "hotpin: starting from {}, the latest history of {key} in the store (the \
         daemon's histories know no libc allocations: only pinned requests and mappings \
         of it can be matched; the rest is learned live)",
        latest.display()
    );
    Ok(Some(latest))
}

/// Where auto mode writes what it learns (checked now), or why nowhere.
fn learn_to(command: &mut Command, learned: Option<PathBuf>) -> Result<()> {
    match learned {
        Some(path) => {
            hotpin_history::files::check_output(&path).with_context(|| {
                format!(
                    "what this run learns cannot be written to {}",
                    path.display()
                )
            })?;
            command.env("HOTPIN_LEARN_TO", path);
        }
        None => eprintln!(
            "hotpin: no place to keep what this run learns (no $HOME, or its state folder \
             cannot be made): give --history FILE; learning for this run only"
        ),
    }
    Ok(())
}

/// The program's latest history in the fleet's store at `url`, fetched into the user's
/// cache; first, what this node's last auto run learned (`learned`) is put there if it is
/// newer than what was put before. All within `wait` seconds; a store that fails or is slow
/// is said once, and the run goes on without it.
fn from_fleet(
    url: &str,
    args: &RunArgs,
    program: &OsStr,
    rest: &[OsString],
    learned: Option<&Path>,
) -> Vec<PathBuf> {
    let began = std::time::Instant::now();
    let bound = std::time::Duration::from_secs_f64(args.fleet_wait.max(0.0));
    let Ok(key) = ProgramKey::of_command(program, rest) else {
        return Vec::new();
    };
    let said = |error: &dyn std::fmt::Display| {
        eprintln!("hotpin: the fleet's store: {error}; going on without it");
    };
    let fleet = match hotpin_fleet::Fleet::open(url, bound) {
        Ok(fleet) => fleet,
        Err(error) => {
            said(&error);
            return Vec::new();
        }
    };
    if let Some(learned) = learned.filter(|path| path.exists()) {
        let marker = learned.with_extension("hotpin.shared");
        let newer = match (std::fs::metadata(learned), std::fs::metadata(&marker)) {
            (Ok(file), Ok(mark)) => file.modified().ok() > mark.modified().ok(),
            (Ok(_), Err(_)) => true,
            _ => false,
        };
        if newer {
            match fleet.put(&key, learned, &hotpin_fleet::host_name()) {
                Ok(_) => {
                    let _ = std::fs::write(&marker, b"");
                }
                Err(error) => {
                    said(&error);
                    return Vec::new();
                }
            }
        }
    }
    let Some(cache) = user_dir("XDG_CACHE_HOME", ".cache").map(|dir| dir.join("hotpin/fleet"))
    else {
        return Vec::new();
    };
    match fleet.latest_runs(&key, &cache, args.merge_runs.into()) {
        Ok(runs) => {
            if let Some(latest) = runs.first() {
                eprintln!(
                    "hotpin: starting from {}, the latest history of {key} in {url}{} ({:.2} s)",
                    latest.display(),
                    match runs.len() {
                        1 => String::new(),
                        n => format!(", merged with the {} runs before it", n - 1),
                    },
                    began.elapsed().as_secs_f64()
                );
            }
            runs
        }
        Err(error) => {
            said(&error);
            Vec::new()
        }
    }
}

/// Tells the interposer the earlier runs to merge with the history it starts from
/// (`HOTPIN_MERGE`, `:`-separated); a path that cannot be put in such a list is said.
fn merge_with(command: &mut Command, earlier: &[PathBuf]) -> Result<()> {
    if earlier.is_empty() {
        return Ok(());
    }
    let absolute: Vec<PathBuf> = earlier.iter().map(|p| absolute(p)).collect::<Result<_>>()?;
    match std::env::join_paths(&absolute) {
        Ok(list) => {
            command.env("HOTPIN_MERGE", list);
        }
        Err(error) => eprintln!(
            "hotpin: the earlier runs cannot be merged ({error}: a path with ':'); starting from \
             the latest alone"
        ),
    }
    Ok(())
}

/// A user's XDG folder: `$VARIABLE` if it is an absolute path, else `$HOME/fallback`.
fn user_dir(variable: &str, fallback: &str) -> Option<PathBuf> {
    std::env::var_os(variable)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(fallback)))
}

/// Where auto mode keeps what a program's runs learned, per user:
/// `$XDG_STATE_HOME/hotpin/<program>.hotpin`, else `~/.local/state/hotpin/...`, the folder
/// made (0700) if missing.
fn state_file(program: &OsStr, args: &[OsString]) -> Option<PathBuf> {
    let folder = user_dir("XDG_STATE_HOME", ".local/state")?.join("hotpin");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&folder)
        .ok()?;
    let key = ProgramKey::of_command(program, args).ok()?;
    Some(folder.join(format!("{}.hotpin", key.as_str())))
}

/// Use mode without --history: the latest history in the store at `root` of the program
/// `program` with `args` starts (its executable, build id and script), said on stderr.
/// The program's `runs` latest histories in the store at `root` that this user may start
/// from (its own, then root's: `Store::histories_for_user`), newest first (none: empty).
fn latest_in_store(root: &Path, key: &ProgramKey, runs: usize) -> Result<Vec<PathBuf>> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let mut histories = Store::open_existing(root).histories_for_user(key, uid)?;
    histories.truncate(runs);
    Ok(histories)
}

fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("{}", path.display()))
}

/// A file installed beside the running `hotpin`.
fn sibling(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe().context("where is hotpin")?;
    let path = exe.with_file_name(name);
    if !path.exists() {
        bail!("{} is missing (it is built with hotpin)", path.display());
    }
    Ok(path)
}

/// Whether an executable defines the CUDA runtime itself (nvcc links it statically by
/// default): an LD_PRELOAD definition cannot stand in front of calls made inside one file.
fn carries_cuda_runtime(executable: &Path) -> bool {
    use object::{Object as _, ObjectSymbol as _};
    let Ok(bytes) = std::fs::read(executable) else {
        return false;
    };
    let Ok(file) = object::File::parse(&*bytes) else {
        return false;
    };
    file.symbols()
        .chain(file.dynamic_symbols())
        .any(|s| s.is_definition() && s.name() == Ok("cudaHostAlloc"))
}
