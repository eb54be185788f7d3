//! [`TracerAgent`]: the library API. Attach to a process, record its CUDA memory traffic into
//! a [`MemHistory`], and query hot and cold allocations while it runs.

use std::{
    path::PathBuf,
    sync::{Arc, RwLockReadGuard, atomic::Ordering},
    thread::JoinHandle,
};

use tokio::sync::watch;

use crate::{
    address_space,
    error::TracerError,
    probes::{ProbeOptions, ProbeState, ProbeStatus, Probes},
    recorder::{LiveStatus, Recorder, RecorderConfig, RecorderEnd, Shared},
    sessions::{Session, SessionInfo, Sessions},
    target::{self, CallSiteResolver},
};
use hotpin_history::history::{Allocation, MemHistory};

/// How an agent traces.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The processes to trace.
    pub pids: Vec<u32>,
    /// Files to attach to besides what the targets map (a CUDA runtime, driver, or hotpin).
    pub libraries: Vec<PathBuf>,
    /// Files whose call sites should be named even if the process exits before its memory
    /// map is read (the program `tracer record -- CMD` starts).
    pub modules: Vec<PathBuf>,
    /// Kernel ring buffer size in bytes: a power of two, at least a page.
    pub ring_bytes: u32,
    pub recorder: RecorderConfig,
    /// The command line that was started, recorded in the history's metadata.
    pub command: Vec<String>,
    /// Stop a target that opens a CUDA library until its probes are attached (SIGSTOP from the
    /// kernel, SIGCONT from the agent), so not even its first call is missed. Without it, a
    /// library loaded after the start is attached as soon as its opening is seen, and calls in
    /// between are missed.
    pub stop_on_library_open: bool,
    /// Probes that are off by default to attach too.
    pub probes: ProbeOptions,
    /// Record the memory the targets already have when the tracer attaches (their heap,
    /// anonymous mappings, pinned and managed memory, from /proc/PID/maps), so copies from
    /// it are credited to it. On for processes already running; a command the tracer starts
    /// itself has nothing yet.
    pub seed_existing_memory: bool,
}

impl AgentConfig {
    pub fn new(pid: u32) -> Self {
        Self {
            pids: vec![pid],
            libraries: Vec::new(),
            modules: Vec::new(),
            ring_bytes: crate::DEFAULT_RING_BYTES,
            recorder: RecorderConfig::default(),
            command: Vec::new(),
            stop_on_library_open: false,
            probes: ProbeOptions::default(),
            seed_existing_memory: true,
        }
    }
}

struct Running {
    stop: watch::Sender<bool>,
    thread: JoinHandle<Result<RecorderEnd, TracerError>>,
}

/// The tracer as a library.
pub struct TracerAgent {
    config: AgentConfig,
    shared: Arc<Shared>,
    running: Option<Running>,
    probes: Vec<ProbeStatus>,
    /// After a stop: the kernel programs and their links, which emit nothing more (no target
    /// is left in the kernel's filter). Released when the agent is dropped: a perf-event link
    /// (tracepoints, and uprobes before Linux 6.6) waits about 75 ms for the kernel,
    /// serialised, so a caller writes the history first.
    stopped: Option<crate::probes::Probes>,
}

impl TracerAgent {
    /// An agent for process `pid`; nothing is attached until [`Self::start`].
    pub fn new(pid: u32) -> Self {
        Self::with_config(AgentConfig::new(pid))
    }

    pub fn with_config(config: AgentConfig) -> Self {
        Self {
            config,
            shared: Arc::default(),
            running: None,
            probes: Vec::new(),
            stopped: None,
        }
    }

    /// Loads the kernel programs, attaches them to the CUDA libraries of the targets (and the
    /// configured overrides), and starts recording. Probes that cannot attach are reported in
    /// [`Self::probes`], not fatal; a missing process or an unloadable program is.
    pub fn start(&mut self) -> Result<(), TracerError> {
        if self.running.is_some() {
            return Err(TracerError::AlreadyRunning);
        }
        let mut probes = Probes::load(self.config.ring_bytes, self.config.probes)?;
        probes.set_stop_on_library_open(self.config.stop_on_library_open)?;
        let mut files: Vec<PathBuf> = self.config.libraries.clone();
        for &pid in &self.config.pids {
            probes.add_target(pid)?;
            files.extend(target::candidate_files(pid)?);
        }
        let mut targets = self.config.pids.clone();
        self.watch_running(&mut probes, &mut targets, &mut files)?;
        files.sort();
        files.dedup();
        for path in &files {
            probes.attach_file(path)?;
        }
        self.probes = probes.status().to_vec();
        {
            let mut history = self.shared.history.write().expect("history lock poisoned");
            // After the targets are added: memory mapped from here on is also seen as it is
            // mapped (the same start replaces the seed).
            if self.config.seed_existing_memory {
                for &pid in &self.config.pids {
                    address_space::seed_existing_memory(&mut history, pid);
                }
            }
            let meta = history.meta_mut();
            meta.tracer = crate::TRACER_NAME.to_owned();
            meta.started_unix_s = hotpin_history::dump::unix_now();
            meta.pids = self.config.pids.clone();
            meta.command = self.config.command.clone();
        }
        let ring = probes.take_events()?;
        let mut resolver = CallSiteResolver::new();
        for path in self.config.modules.iter().chain(&files) {
            resolver.learn_file(path, &path.display().to_string());
        }
        for &pid in &targets {
            resolver.learn_process(pid);
        }
        // Before the recording is said to start: the targets' Python lines from their first
        // allocation on.
        let mut python = crate::python::PythonLines::default();
        for &pid in &targets {
            python.examine(pid, &mut probes);
        }
        let recorder = Recorder {
            resolver,
            probes,
            ring,
            shared: Arc::clone(&self.shared),
            targets,
            python,
            config: self.config.recorder.clone(),
        };
        let (stop, stop_rx) = watch::channel(false);
        let thread = std::thread::Builder::new()
            .name(tracer_common::TRACER_THREAD.into())
            .spawn(move || recorder.run(stop_rx))
            .map_err(|source| TracerError::Io {
                what: "starting the recorder thread".into(),
                source,
            })?;
        self.running = Some(Running { stop, thread });
        Ok(())
    }

    /// Watching every process: from now on the kernel makes any process that opens a CUDA
    /// library a target; those that have one already are found here (added to `targets`,
    /// their files to `files`), each a session seeded with the memory it has.
    fn watch_running(
        &self,
        probes: &mut Probes,
        targets: &mut Vec<u32>,
        files: &mut Vec<PathBuf>,
    ) -> Result<(), TracerError> {
        let Some(filter) = &self.config.recorder.watch else {
            return Ok(());
        };
        // The agent opens CUDA libraries itself to read their symbols: never its own target
        // (the kernel would stop it at the open, waiting for itself).
        probes.ignore(std::process::id())?;
        probes.set_watch_library_opens(true)?;
        let filter = filter
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut sessions = self.shared.sessions();
        for pid in crate::target::running_cuda_processes() {
            if !filter.admits(pid) || targets.contains(&pid) {
                continue;
            }
            let Ok(found) = target::candidate_files(pid) else {
                continue;
            };
            probes.add_target(pid)?;
            files.extend(found);
            targets.push(pid);
            let session = sessions.start(SessionInfo::of_process(pid));
            address_space::seed_existing_memory(&mut session.history, pid);
        }
        Ok(())
    }

    /// Stops the targets' events, drains the last ones into the history, detaches the
    /// uprobes and keeps the history; the tracepoints go with the agent.
    pub fn stop(&mut self) -> Result<(), TracerError> {
        self.stop_keeping_probes()?;
        self.detach_uprobes();
        Ok(())
    }

    /// As [`Self::stop`], but every probe stays attached, emitting nothing (no target is left
    /// in the kernel's filter), until [`Self::detach_uprobes`] or the drop:
    /// a caller writes the history first, as detaching waits for the kernel. Meanwhile a
    /// uretprobe still borrows the return address of every process calling its function.
    pub fn stop_keeping_probes(&mut self) -> Result<(), TracerError> {
        let running = self.running.take().ok_or(TracerError::NotRunning)?;
        let _ = running.stop.send(true);
        let end = running
            .thread
            .join()
            .map_err(|_| TracerError::Recorder("the recorder thread panicked".into()))??;
        self.probes = end.status;
        self.stopped = Some(end.probes);
        Ok(())
    }

    /// Detaches the uprobes of a stopped recording.
    pub fn detach_uprobes(&mut self) {
        if let Some(probes) = &mut self.stopped {
            probes.detach_uprobes();
        }
    }

    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// True once every target process has exited (while running).
    pub fn targets_exited(&self) -> bool {
        self.shared.live.targets_exited.load(Ordering::Relaxed)
    }

    /// Each probe attach attempted: attached, or unavailable and why.
    pub fn probes(&self) -> &[ProbeStatus] {
        &self.probes
    }

    /// How many probes are in place.
    pub fn attached_probes(&self) -> usize {
        self.probes
            .iter()
            .filter(|p| p.state == ProbeState::Attached)
            .count()
    }

    /// The sessions (watching every process): one history per program run. Recording waits
    /// while the guard is held, so keep it short.
    pub fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.shared.sessions()
    }

    /// The sessions that ended since the last call, each with its whole history.
    pub fn take_ended_sessions(&self) -> Vec<Session> {
        self.shared.sessions().take_ended()
    }

    /// Read access to the history; recording waits while the guard is held, so keep it short.
    pub fn history(&self) -> RwLockReadGuard<'_, MemHistory> {
        self.shared.history.read().expect("history lock poisoned")
    }

    /// Events, transfers, allocations and lost events so far.
    pub fn live_status(&self) -> LiveStatus {
        let history = self.history();
        LiveStatus {
            events: self.shared.live.events.load(Ordering::Relaxed),
            transfers: history.stats().transfers,
            allocations: history.allocations().len() as u64,
            lost_events: self.shared.live.lost.load(Ordering::Relaxed),
        }
    }

    /// The `n` host allocations copied most, most first (cloned out of the lock).
    pub fn hotspots(&self, n: usize) -> Vec<Allocation> {
        self.history().hotspots(n).into_iter().cloned().collect()
    }

    /// The `n` host allocations copied least, least first.
    pub fn coldspots(&self, n: usize) -> Vec<Allocation> {
        self.history().coldspots(n).into_iter().cloned().collect()
    }

    /// Host allocations copied at least `min_transfers` times.
    pub fn hotspots_threshold(&self, min_transfers: u64) -> Vec<Allocation> {
        self.history()
            .hotspots_threshold(min_transfers)
            .into_iter()
            .cloned()
            .collect()
    }

    /// Host allocations copied at most `max_transfers` times.
    pub fn coldspots_threshold(&self, max_transfers: u64) -> Vec<Allocation> {
        self.history()
            .coldspots_threshold(max_transfers)
            .into_iter()
            .cloned()
            .collect()
    }

    /// Writes the history (see [`hotpin_history::dump::write`]).
    pub fn dump(
        &self,
        path: &std::path::Path,
        format: hotpin_history::dump::Format,
        verbose: bool,
    ) -> Result<(), hotpin_history::dump::DumpError> {
        hotpin_history::dump::write(&self.history(), path, format, verbose)
    }
}

impl Drop for TracerAgent {
    fn drop(&mut self) {
        if self.running.is_some() {
            let _ = self.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::EventKind;

    use super::*;
    use hotpin_history::history::{AllocKind, CallSite};
    use hotpin_registry::events::{ApiCall, Op};
    use hotpin_registry::registry::CopyDirection;

    #[test]
    fn the_queries_answer_from_the_history() {
        // Never started: the queries need no kernel programs.
        let agent = TracerAgent::new(7);
        let mut history = MemHistory::new();
        let site = CallSite {
            module: "/bin/app".into(),
            offset: 0x40,
            symbol: None,
        };
        let site = history.intern_call_site(site);
        for (i, addr) in [0x1000u64, 0x9000].into_iter().enumerate() {
            history.alloc(7, addr, 4096, AllocKind::Pageable, Some(site), i as u64);
        }
        let copy = |ts_ns| ApiCall {
            kind: EventKind::CudaMemcpy,
            pid: 7,
            tid: 7,
            ts_ns,
            duration_ns: 0,
            caller: 0,
            site: None,
            stack: None,
            result: 0,
            nested: false,
            partial: false,
            repeat: 1,
            stream: 0,
            op: Op::Copy {
                dst: 0xd000,
                src: 0x1010,
                bytes: 64,
                direction: CopyDirection::HostToDevice,
            },
        };
        for ts in 10..15 {
            history.apply(&copy(ts), None);
        }
        history.free(7, 0x9000, 20);
        *agent.shared.history.write().expect("history lock") = history;
        let hot = agent.hotspots(1);
        assert_eq!(
            (hot[0].start, hot[0].stats.transfers, hot[0].ordinal),
            (0x1000, 5, 0)
        );
        assert_eq!(agent.hotspots_threshold(5).len(), 1);
        let cold = agent.coldspots_threshold(0);
        assert_eq!(cold.len(), 1);
        assert_eq!((cold[0].ordinal, cold[0].free_ns), (1, Some(20)));
    }
}
