//! `tracer record`: trace processes or a command until they exit or a signal, then write the
//! history.
//!
//! A command is started held before `exec` (see `target::spawn_paused`), attached, then let
//! go, so its first CUDA call is seen; child processes are followed. SIGINT or SIGTERM to the
//! tracer is passed on to the command it started; the recording ends when the command exits,
//! so its last events are kept. With `--pid`, a signal ends the recording and the processes
//! run on untraced.

use std::{
    io::{IsTerminal as _, Write as _},
    path::{Path, PathBuf},
    process::ExitCode,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use hotpin_history::dump::{self, Format};
use hotpin_history::history::Retention;
use hotpin_history::units::bytes;
use hotpin_policy::hot::HotPolicy;
use hotpin_report::Report;
use tokio::signal::unix::{SignalKind, signal};
use tracer_agent::{
    AgentConfig, TracerAgent, privileges,
    probes::ProbeState,
    target::{self, PausedChild},
};

use super::RecordArgs;

/// The largest ring buffer `--ring-mib` takes, in MiB.
const MAX_RING_MIB: u32 = 1024;

/// How long a started command has to exit after the tracer passed it a signal.
const CHILD_GRACE: Duration = Duration::from_secs(10);

/// Whether `path` starts like an ELF file (not a script).
fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut magic))
        .is_ok_and(|()| magic == *b"\x7fELF")
}

fn default_output(args: &RecordArgs, pid: u32) -> PathBuf {
    let name = args
        .command
        .first()
        .and_then(|c| {
            Path::new(c)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .or_else(|| std::fs::read_to_string(format!("/proc/{pid}/comm")).ok())
        .unwrap_or_else(|| "process".into());
    let name: String = name
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    PathBuf::from(format!("hotpin-{name}-{pid}.hotpin"))
}

pub fn run(args: RecordArgs) -> Result<ExitCode> {
    let protect = check_args(&args)?;
    let (config, mut child) = agent_config(&args)?;
    for &pid in &config.pids {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            bail!("process {pid} does not exist");
        }
    }
    let Some(&pid) = config.pids.first() else {
        bail!("no process to trace");
    };
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| default_output(&args, pid));
    let checkpoints = Checkpoints {
        path: output.clone(),
        format: Format::from_path(&output),
        verbose: args.verbose,
        every: (args.checkpoint > 0.0).then(|| Duration::from_secs_f64(args.checkpoint)),
        protect,
    };

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Before the start is said or the command resumed: a SIGINT or SIGTERM from then on ends
    // the recording with its history written, never the default action.
    let signals = {
        let _guard = runtime.enter();
        Signals::new()?
    };
    let mut agent = TracerAgent::with_config(config);
    agent.start().context("starting the tracer")?;
    report_probes(&agent, child.is_some());
    if let Some(child) = &mut child {
        child.resume()?;
    } else {
        announce(&agent, &args);
    }
    let child_status = runtime.block_on(wait(
        &agent,
        child.as_mut(),
        args.duration,
        &checkpoints,
        signals,
    ))?;
    if std::io::stderr().is_terminal() {
        eprintln!();
    }
    agent.stop_keeping_probes().context("stopping the tracer")?;
    finish(agent, &output, child_status, &args, protect)
}

/// The recording stopped: its history written (or an empty one kept from replacing `output`),
/// summarized, the probes let go; the traced command's failure passed on.
fn finish(
    mut agent: TracerAgent,
    output: &Path,
    child_status: Option<std::process::ExitStatus>,
    args: &RecordArgs,
    protect: bool,
) -> Result<ExitCode> {
    if protect && agent.history().stats().calls == 0 {
        eprintln!(
            "tracer: the recording saw no CUDA call, so {} is left as it was (--replace-empty \
             writes the empty history over it)",
            output.display()
        );
        agent.detach_uprobes();
        release_after_exit();
        drop(agent);
        return Ok(match child_status {
            Some(status) if !status.success() => exit_code(status),
            _ => ExitCode::FAILURE,
        });
    }
    let (output, write_failed) = write_history(&agent, output, args.verbose)?;
    summarize(&agent, &output, args.report);
    // The history is whole: the uprobes go now (one wait with uprobe_multi links), the
    // tracepoints (each ~75 ms to release, serialised) after this process has exited.
    agent.detach_uprobes();
    release_after_exit();
    drop(agent);
    if write_failed {
        return Ok(ExitCode::FAILURE);
    }
    // The traced command's failure is the caller's to see.
    Ok(match child_status {
        Some(status) if !status.success() => {
            eprintln!("tracer: the traced command exited with {status}");
            exit_code(status)
        }
        _ => ExitCode::SUCCESS,
    })
}

/// Checks what can be checked before anything is attached, started or written; whether a
/// history already at the output is to be kept from an empty recording.
fn check_args(args: &RecordArgs) -> Result<bool> {
    privileges::check()?;
    if !args.ring_mib.is_power_of_two() {
        bail!("--ring-mib must be a power of two, not {}", args.ring_mib);
    }
    // The ring's size in bytes must fit the kernel's u32 (and what it will map): 1 GiB at most.
    if args.ring_mib > MAX_RING_MIB {
        bail!(
            "--ring-mib {} is too large: at most {MAX_RING_MIB} (1 GiB)",
            args.ring_mib
        );
    }
    if !args.pids.is_empty() && !args.command.is_empty() {
        bail!("give either --pid or a command, not both");
    }
    if args.pids.is_empty() && args.command.is_empty() {
        bail!("give a process to trace (--pid PID) or a command to start (after `--`)");
    }
    // A command that cannot be started is said before anything is attached or written.
    if let Some(program) = args.command.first()
        && !hotpin_history::store::find_executable(std::ffi::OsStr::new(program))
            .is_some_and(|path| path.is_file())
    {
        bail!(
            "cannot find the command {}: nothing was started or recorded",
            Path::new(program).display()
        );
    }
    // Where the history goes is checked before anything is attached or started: a recording
    // must not be made only to be lost at the end.
    match &args.output {
        Some(output) => dump::check_writable(output),
        // The default name (hotpin-<program>-<pid>.hotpin) goes in the current directory.
        None => dump::check_directory(Path::new(".")),
    }
    .context("the history could not be written there")?;
    // A history already there is not replaced by a recording that saw no CUDA call.
    let protect = !args.replace_empty
        && args
            .output
            .as_deref()
            .and_then(|path| std::fs::metadata(path).ok())
            .is_some_and(|metadata| metadata.len() > 0);
    Ok(protect)
}

/// The agent's configuration; for a command, the command started and held before its first
/// instruction.
fn agent_config(args: &RecordArgs) -> Result<(AgentConfig, Option<PausedChild>)> {
    let mut child: Option<PausedChild> = None;
    let mut config = AgentConfig::new(0);
    config.pids = args.pids.clone();
    config.libraries = args.target.files();
    config.ring_bytes = args.ring_mib << 20;
    config.stop_on_library_open = args.stop_on_load;
    config.probes.page_faults = args.page_faults;
    config.probes.python_lines = !args.no_python_lines;
    config.probes.libc_malloc = args.libc_malloc.then_some(args.malloc_floor);
    config.probes.runtime_copies = args.runtime_copies;
    config.recorder.retention = Retention {
        timelines: args.verbose,
        max_allocations: Some(args.max_allocations).filter(|&n| n > 0),
    };
    if let Some((program, rest)) = args.command.split_first() {
        let preload = args.preload.as_deref().map(interposer).transpose()?;
        if let Some((_, build_id)) = &preload {
            config.recorder.interposers.push(*build_id);
        }
        let paused = target::spawn_paused(program, rest, |command| {
            if let Some((preloads, _)) = &preload {
                command.env("LD_PRELOAD", preloads);
            }
        })?;
        config.pids = vec![paused.pid()];
        config.modules = hotpin_history::store::find_executable(std::ffi::OsStr::new(program))
            .into_iter()
            .collect();
        // The program itself may carry the CUDA runtime or hotpin statically; at this point
        // the child is still the trampoline shell, so /proc/PID/exe is not the program yet.
        // A script (a pyenv shim, `#!`) carries nothing: its interpreter is found once it runs.
        config
            .libraries
            .extend(config.modules.iter().filter(|p| is_elf(p)).cloned());
        config.command = args
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        // Our own child: holding it while a CUDA library's probes attach is safe and exact.
        config.stop_on_library_open = true;
        // Held before exec: what it maps now is the tracer's, not the program's.
        config.seed_existing_memory = false;
        child = Some(paused);
    }
    Ok((config, child))
}

/// Says what is being recorded, for processes already running.
fn announce(agent: &TracerAgent, args: &RecordArgs) {
    let seeded = agent
        .history()
        .allocations()
        .iter()
        .filter(|a| a.pre_existing)
        .count();
    let pids: Vec<String> = args.pids.iter().map(u32::to_string).collect();
    let ends = match args.duration {
        Some(seconds) => {
            format!("after {seconds} s, or earlier if the process exits or on Ctrl-C")
        }
        None => "when the process exits, or on Ctrl-C".to_string(),
    };
    eprintln!(
        "tracer: recording {} ({seeded} mappings that existed already recorded as \
         pre-existing); it ends {ends}",
        pids.join(", ")
    );
}

/// Writes the history to `output`, or where it falls back to; the path written and whether
/// the output asked for failed.
fn write_history(agent: &TracerAgent, output: &Path, verbose: bool) -> Result<(PathBuf, bool)> {
    let written =
        dump::write_or_fall_back(&agent.history(), output, Format::from_path(output), verbose);
    let output = match written {
        Ok(path) => path,
        Err((error, Some(fallback))) => {
            eprintln!(
                "tracer: cannot write {}: {:#}; the history was written to {} instead",
                output.display(),
                anyhow::Error::from(error),
                fallback.display()
            );
            return Ok((fallback, true));
        }
        Err((error, None)) => {
            return Err(anyhow::Error::from(error).context(
                "writing the history failed here, in the current directory and in $TMPDIR",
            ));
        }
    };
    Ok((output, false))
}

/// What was recorded, on stderr; the report too when asked for.
fn summarize(agent: &TracerAgent, output: &Path, report: bool) {
    let history = agent.history();
    let stats = history.stats();
    eprintln!(
        "tracer: {} CUDA calls, {} transfers ({} to GPU, {} from GPU), {} host allocations, {} events lost",
        stats.calls,
        stats.transfers,
        bytes(stats.h2d_bytes),
        bytes(stats.d2h_bytes),
        history
            .allocations()
            .iter()
            .filter(|a| a.kind.is_host())
            .count(),
        stats.lost_events(),
    );
    eprintln!(
        "tracer: history written to {}  (see: tracer report {})",
        output.display(),
        output.display()
    );
    if report {
        print!(
            "{}",
            Report::new(&history, HotPolicy::default(), 10).render()
        );
    }
}

/// The exit code that passes a failed command's status on as a shell does: its code, or
/// 128 + the signal that killed it.
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt as _;
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    };
    ExitCode::from(code.clamp(1, 255) as u8)
}

fn report_probes(agent: &TracerAgent, started: bool) {
    let on_files = || agent.probes().iter().filter(|p| p.target.path().is_some());
    let mut libraries: Vec<_> = on_files()
        .filter(|p| p.state == ProbeState::Attached)
        .filter_map(|p| p.target.path().map(|path| path.display().to_string()))
        .collect();
    libraries.dedup();
    let attached = on_files()
        .filter(|p| p.state == ProbeState::Attached)
        .count();
    let calls = on_files().count();
    if libraries.is_empty() {
        eprintln!(
            "tracer: no CUDA library is mapped {}yet; probes attach when one is opened",
            if started {
                "by the command "
            } else {
                "in the target "
            }
        );
    } else {
        eprintln!(
            "tracer: attached {attached} probes to {} file{} ({} functions not found or \
             refused: `tracer probes` says why): {}",
            libraries.len(),
            if libraries.len() == 1 { "" } else { "s" },
            calls - attached,
            libraries.join(", ")
        );
    }
    for probe in agent.probes() {
        if let ProbeState::Unavailable { reason } = &probe.state {
            tracing::info!(symbol = probe.symbol, reason, "probe unavailable");
        }
    }
}

/// Where and how often the history so far is written while the recording goes on.
struct Checkpoints {
    path: PathBuf,
    format: Format,
    verbose: bool,
    every: Option<Duration>,
    /// A history was at `path` before: no checkpoint replaces it until a CUDA call is seen.
    protect: bool,
}

impl Checkpoints {
    /// Writes a checkpoint if one is due; a failed one is said and the recording goes on.
    fn write_if_due(&self, agent: &TracerAgent, last: &mut Instant) {
        let Some(every) = self.every else { return };
        if last.elapsed() < every {
            return;
        }
        *last = Instant::now();
        let history = agent.history();
        if self.protect && history.stats().calls == 0 {
            return;
        }
        if let Err(error) = dump::write_checkpoint(&history, &self.path, self.format, self.verbose)
        {
            tracing::warn!(error = %anyhow::Error::from(error), "checkpoint not written");
        }
    }
}

/// The signals the recording answers, registered before it starts.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    /// The command's exit wakes the loop at once (the tick is for checkpoints and --pid).
    child_exited: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            child_exited: signal(SignalKind::child())?,
        })
    }
}

/// Waits for the end of the recording, writing checkpoints meanwhile; returns the started
/// command's exit status.
async fn wait(
    agent: &TracerAgent,
    mut child: Option<&mut PausedChild>,
    duration: Option<f64>,
    checkpoints: &Checkpoints,
    signals: Signals,
) -> Result<Option<std::process::ExitStatus>> {
    let mut checkpointed = Instant::now();
    let Signals {
        mut interrupt,
        mut terminate,
        mut child_exited,
    } = signals;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let started = Instant::now();
    let deadline = duration.map(|s| started + Duration::from_secs_f64(s));
    let mut signalled: Option<Instant> = None;
    let live = std::io::stderr().is_terminal();
    let mut last = (Instant::now(), 0u64);
    loop {
        tokio::select! {
            _ = interrupt.recv() => signalled = Some(forward(child.as_deref(), libc::SIGINT)),
            _ = terminate.recv() => signalled = Some(forward(child.as_deref(), libc::SIGTERM)),
            _ = child_exited.recv() => {}
            _ = tick.tick() => {}
        }
        if let Some(child) = child.as_deref_mut() {
            if let Some(status) = child.child.try_wait()? {
                return Ok(Some(status));
            }
            if signalled.is_some_and(|at| at.elapsed() > CHILD_GRACE) {
                eprintln!("\ntracer: the command did not exit after the signal; stopping anyway");
                return Ok(None);
            }
        } else if signalled.is_some() || agent.targets_exited() {
            return Ok(None);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
        checkpoints.write_if_due(agent, &mut checkpointed);
        if live {
            let status = agent.live_status();
            let elapsed = last.0.elapsed().as_secs_f64().max(1e-3);
            let rate = (status.events - last.1) as f64 / elapsed;
            last = (Instant::now(), status.events);
            eprint!(
                "\r\x1b[2Ktracer: {:>9} events {:>9.0}/s  {:>8} transfers  {:>6} allocations  {} lost",
                status.events, rate, status.transfers, status.allocations, status.lost_events
            );
            let _ = std::io::stderr().flush();
        }
    }
}

/// Passes a signal to the command the tracer started.
fn forward(child: Option<&PausedChild>, signal: i32) -> Instant {
    if let Some(child) = child {
        // SAFETY: kill has no memory preconditions; the pid is our own child.
        unsafe { libc::kill(child.pid() as i32, signal) };
    }
    Instant::now()
}

/// `--preload LIB`: the LD_PRELOAD value that puts LIB first, and LIB's build id (its frames
/// are told apart by it).
fn interposer(lib: &Path) -> Result<(std::ffi::OsString, [u8; 20])> {
    let lib = std::path::absolute(lib).with_context(|| format!("--preload {}", lib.display()))?;
    if !lib.is_file() {
        bail!("--preload {}: no such file", lib.display());
    }
    let build_id = hotpin_history::store::read_elf_build_id(&lib)
        .ok()
        .flatten()
        .and_then(|id| <[u8; 20]>::try_from(id).ok())
        .with_context(|| {
            format!(
                "--preload {}: no 20-byte GNU build id, so its frames cannot be told apart",
                lib.display()
            )
        })?;
    let mut preloads = lib.into_os_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preloads.push(" ");
        preloads.push(existing);
    }
    Ok((preloads, build_id))
}

/// Hands this process's remaining kernel links to a child that drops them once this process
/// has exited, so the caller gets its prompt back as soon as the history is written. Releasing
/// a tracepoint link waits about 75 ms for the kernel, under a kernel-wide lock (about 0.9 s
/// for the registry's tracepoints; docs/benchmarks.md). The child holds a copy of every
/// descriptor, so this process's own closes are not the last; it keeps no standard stream,
/// waits for the end of a pipe whose other end only this process holds, and exits, which
/// releases the links in the background. Nothing else happens in it. If the fork fails, the
/// links are released here, as before.
fn release_after_exit() {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return;
    }
    let [read_end, write_end] = fds;
    // SAFETY: the child calls only async-signal-safe functions (close, read, _exit) before
    // it exits; the parent goes on as if nothing happened.
    match unsafe { libc::fork() } {
        0 => unsafe {
            libc::close(write_end);
            for fd in 0..3 {
                libc::close(fd);
            }
            let mut byte = 0u8;
            // End of file once the parent is gone; EINTR is retried.
            while libc::read(read_end, (&raw mut byte).cast(), 1) < 0
                && *libc::__errno_location() == libc::EINTR
            {}
            libc::_exit(0)
        },
        -1 => unsafe {
            libc::close(read_end);
            libc::close(write_end);
        },
        // The write end stays open until this process exits.
        _ => unsafe {
            libc::close(read_end);
        },
    }
}
