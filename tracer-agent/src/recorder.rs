//! The recording thread: reads the ring buffer in batches, decodes, and feeds the MemHistory
//! through a bounded channel; attaches CUDA libraries the targets load after the start. When
//! it watches every process (`tracer daemon`), a process that opens a CUDA library becomes a
//! target and gets a history of its own (a [`Session`](crate::sessions::Session)).

use std::{
    path::PathBuf,
    sync::{
        Arc, Mutex, PoisonError, RwLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use aya::maps::{MapData, RingBuf};
use serde::Serialize;
use tokio::{io::unix::AsyncFd, sync::mpsc, sync::watch, time::MissedTickBehavior};
use tracer_common::BuildIdFrame;

use crate::{
    address_space::AddressSpaces,
    error::TracerError,
    filter::ProcessFilter,
    probes::{ProbeStatus, Probes},
    python::PythonLines,
    sessions::{SessionInfo, Sessions},
    target::{self, AddressSites, CallSiteResolver},
};
use hotpin_history::history::{CallSite, MemHistory, Retention};
use hotpin_registry::events::{self, ApiCall, HostOp, Op, RawSite, TraceEvent};
use hotpin_registry::registry::CopyDirection;

/// Records per batch sent to the history writer.
const BATCH: usize = 4096;
/// Batches in flight between reader and writer; when full the reader waits and the kernel
/// ring buffer absorbs the burst (and counts what it cannot).
const CHANNEL_BATCHES: usize = 64;

/// Tuning of the recording thread.
#[derive(Clone, Debug)]
pub struct RecorderConfig {
    /// How often the ring buffer is drained when the kernel has not woken the reader.
    pub drain_interval: Duration,
    /// How often the targets' memory maps are checked for new CUDA libraries and exits.
    pub rescan_interval: Duration,
    /// Build ids of interposers standing in front of libc's allocator: an allocation's call
    /// site is the first frame outside them.
    pub interposers: Vec<[u8; 20]>,
    /// Watch every process: one that opens a CUDA library and passes the filter becomes a
    /// target, with a history of its own in [`Shared::sessions`] (`tracer daemon`). The
    /// filter may be replaced while recording.
    pub watch: Option<Arc<RwLock<ProcessFilter>>>,
    /// What each history keeps in memory: timelines, and the bound past which freed
    /// allocations are folded (applied between batches).
    pub retention: Retention,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        Self {
            drain_interval: Duration::from_millis(10),
            rescan_interval: Duration::from_millis(100),
            interposers: Vec::new(),
            watch: None,
            retention: Retention {
                timelines: true,
                max_allocations: Some(crate::DEFAULT_MAX_ALLOCATIONS),
            },
        }
    }
}

/// Counters readable at any time while recording.
#[derive(Debug, Default)]
pub struct LiveCounters {
    pub events: AtomicU64,
    pub lost: AtomicU64,
    pub decode_errors: AtomicU64,
    /// Set when every target has exited.
    pub targets_exited: AtomicBool,
}

/// A snapshot of [`LiveCounters`] plus what the history holds.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct LiveStatus {
    pub events: u64,
    pub transfers: u64,
    pub allocations: u64,
    pub lost_events: u64,
}

/// State shared between the recording thread and the agent's readers.
#[derive(Debug, Default)]
pub struct Shared {
    /// The history of the targets (when not watching every process).
    pub history: RwLock<MemHistory>,
    /// One history per program run (when watching every process).
    pub sessions: Mutex<Sessions>,
    pub live: LiveCounters,
}

impl Shared {
    /// The sessions, even if a thread panicked holding them (they stay consistent: every
    /// change is one call).
    pub fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Everything the thread owns.
pub(crate) struct Recorder {
    pub resolver: CallSiteResolver,
    pub probes: Probes,
    pub ring: RingBuf<MapData>,
    pub shared: Arc<Shared>,
    pub targets: Vec<u32>,
    /// The targets running CPython found so far.
    pub python: PythonLines,
    pub config: RecorderConfig,
}

/// What the recording thread hands back when it ends.
pub(crate) struct RecorderEnd {
    pub status: Vec<ProbeStatus>,
    /// The programs and their links, still in the kernel but no longer emitting (no target
    /// is left in the filter).
    pub probes: Probes,
}

impl Recorder {
    /// Runs until `stop` turns true, then drains what is left.
    pub fn run(self, stop: watch::Receiver<bool>) -> Result<RecorderEnd, TracerError> {
        prefer_this_thread();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| TracerError::Io {
                what: "starting the tokio runtime".into(),
                source,
            })?;
        runtime.block_on(self.record(stop))
    }

    async fn record(self, mut stop: watch::Receiver<bool>) -> Result<RecorderEnd, TracerError> {
        let Recorder {
            resolver,
            probes,
            ring,
            shared,
            targets,
            python,
            config,
        } = self;
        let (tx, rx) = mpsc::channel::<Vec<Record>>(CHANNEL_BATCHES);
        // Shared with the reader, which learns a process's modules while the kernel holds it
        // stopped at a library open: a short program may be gone before the writer looks.
        let resolver = Arc::new(Mutex::new(resolver));
        let per_session = config.watch.is_some();
        shared
            .history
            .write()
            .expect("history lock poisoned")
            .set_retention(config.retention);
        shared.sessions().retention = config.retention;
        let writer = tokio::spawn(write_batches(
            rx,
            Arc::clone(&shared),
            Arc::clone(&resolver),
            per_session,
        ));
        // SAFETY: the RingBuf owns its map's descriptor, keeps it open while it lives, and
        // always returns the same one; it is moved into the AsyncFd and never swapped.
        let mut ring = unsafe { AsyncFd::register(ring) }.map_err(|error| TracerError::Io {
            what: "polling the ring buffer".into(),
            source: error.into(),
        })?;
        let mut drain_tick = tokio::time::interval(config.drain_interval);
        drain_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut rescan_tick = tokio::time::interval(config.rescan_interval);
        rescan_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut reader = Reader {
            address_sites: AddressSites::new(config.interposers.clone()),
            shared,
            probes,
            targets,
            ignored: Vec::new(),
            resolver,
            watch: config.watch.clone(),
            python,
            held: crate::hold::Held::default(),
            identities: crate::identity::Identities::default(),
            rescans: 0,
            maps_due: std::collections::HashSet::new(),
        };

        loop {
            tokio::select! {
                guard = ring.readable_mut() => {
                    let mut guard = guard.map_err(|source| TracerError::Io {
                        what: "polling the ring buffer".into(),
                        source,
                    })?;
                    reader.drain(guard.get_inner_mut(), &tx).await;
                    guard.clear_ready();
                }
                _ = drain_tick.tick() => reader.drain(ring.get_mut(), &tx).await,
                _ = rescan_tick.tick() => reader.rescan_tick(ring.get_mut(), &tx).await,
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        break;
                    }
                }
            }
        }
        reader.finish(ring.get_mut(), tx, writer).await
    }
}

/// What goes from the reader to the history writer, in ring order.
enum Record {
    /// An event, with the callers beyond its call site (allocations): native frames, then the
    /// Python lines the thread was at (CPython processes), innermost first.
    Event(TraceEvent, Vec<RawSite>, Vec<CallSite>),
    /// A process began a session of its own (watching every process).
    Started(SessionInfo),
    /// A target exited, and every event it sent is before this.
    Exited(u32),
}

/// The callers beyond an allocation call's site, from the user stack the kernel resolved. The
/// first frame is the call site itself; the walk ends where frame pointers do. A call that
/// went through an interposer (hotpin's, in front of libc's malloc) is named by the first
/// frame outside it instead, as the interposer names it.
fn callers(probes: &Probes, call: &mut ApiCall, sites: &mut AddressSites) -> Vec<RawSite> {
    let Some(id) = call.stack else {
        return Vec::new();
    };
    if call.nested {
        return Vec::new();
    }
    let frames = match probes.stack_frames(id) {
        Ok(frames) => frames,
        Err(error) => {
            tracing::debug!(error = %crate::error::chain(&error), id, "user stack gone");
            return Vec::new();
        }
    };
    let raw = |frame: BuildIdFrame| match frame.status {
        1 => RawSite::BuildId {
            build_id: frame.build_id,
            offset: frame.offset,
        },
        _ => RawSite::Address(frame.offset),
    };
    if !call.site.is_some_and(|site| sites.is_interposer(&site)) {
        return frames.into_iter().skip(1).map(raw).collect();
    }
    // Frames the kernel gave as addresses alone (it could not read a build id without
    // waiting) are placed by the process's map, to tell the interposer's apart.
    let mut frames = frames.into_iter();
    for frame in frames.by_ref() {
        let site = match raw(frame) {
            RawSite::Address(addr) => sites
                .to_build_id(call.pid, addr)
                .unwrap_or(RawSite::Address(addr)),
            site => site,
        };
        if !sites.is_interposer(&site) {
            call.site = Some(site);
            return frames.map(raw).collect();
        }
    }
    Vec::new()
}

/// Asks the scheduler to run this thread (the recorder) ahead of ordinary threads: a target
/// that keeps every core busy would otherwise starve it while the ring fills, and events would
/// be lost. SCHED_FIFO at the lowest real-time priority; the thread sleeps between batches, so
/// it takes only the time its events cost. Without CAP_SYS_NICE it stays as it is.
fn prefer_this_thread() {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "the recorder runs at normal priority"
        );
    }
}

/// The reading task's state: everything but the ring, which its poller borrows.
struct Reader {
    shared: Arc<Shared>,
    probes: Probes,
    address_sites: AddressSites,
    /// The processes traced now.
    targets: Vec<u32>,
    /// Processes the filter left out (watching every process), until they exit.
    ignored: Vec<u32>,
    resolver: Arc<Mutex<CallSiteResolver>>,
    watch: Option<Arc<RwLock<ProcessFilter>>>,
    /// The targets running CPython, and their threads' latest Python frames.
    python: PythonLines,
    /// Targets let go after their stop on a library open, and their parents.
    held: crate::hold::Held,
    /// Which files are CUDA libraries and which processes tracers, by their contents.
    identities: crate::identity::Identities,
    /// Rescans made: each looks for targets that exited; every [`MAPS_EVERY`]th reads their
    /// memory maps too.
    rescans: u64,
    /// Targets whose memory map the next rescan reads whatever its number: a library was
    /// opened, or the process is new.
    maps_due: std::collections::HashSet<u32>,
}

/// How many rescans (100 ms apart by default) read every target's memory map: the libraries
/// it opens are attached as they are opened, and read at the next rescan, so this is only the
/// fallback. Reading a large map 10 times a second took 2-5% of a core per target (5 ms for
/// 6,000 lines on the build machine; a PyTorch process maps thousands).
const MAPS_EVERY: u64 = 10;

impl Reader {
    /// The rescan tick: processes that exited are taken out (everything an exited process
    /// sent is in the ring: that first, then what its threads held back, then that it
    /// ended), and the counters published.
    async fn rescan_tick(&mut self, ring: &mut RingBuf<MapData>, tx: &mpsc::Sender<Vec<Record>>) {
        if self.probes.stops_on_library_open()
            && let Err(error) = self.probes.heartbeat()
        {
            tracing::warn!(error = %crate::error::chain(&error), "cannot tell the kernel side this agent is alive");
        }
        self.held.relay();
        let exited = self.rescan();
        if !exited.is_empty() {
            self.drain(ring, tx).await;
            let mut records = Vec::new();
            for pid in exited {
                self.address_sites.forget(pid);
                self.held_back_runs(Some(pid), &mut records);
                self.python.forget(pid, &mut self.probes);
                records.push(Record::Exited(pid));
            }
            let _ = tx.send(records).await;
        }
        self.publish_counters();
    }

    /// Ends the recording: the targets leave the kernel's filter first, so the programs stop
    /// emitting at once, and the loss counters are kept as they stand; then everything the
    /// ring holds is taken. The probes stay attached, emitting nothing for lack of targets,
    /// until the caller releases them (it writes the history first: releasing the links
    /// waits for the kernel).
    async fn finish(
        mut self,
        ring: &mut RingBuf<MapData>,
        tx: mpsc::Sender<Vec<Record>>,
        writer: tokio::task::JoinHandle<()>,
    ) -> Result<RecorderEnd, TracerError> {
        if self.watch.is_some()
            && let Err(error) = self.probes.set_watch_library_opens(false)
        {
            tracing::warn!(error = %crate::error::chain(&error), "cannot stop watching library opens");
        }
        for &pid in &self.targets {
            if let Err(error) = self.probes.remove_target(pid) {
                tracing::warn!(pid, error = %crate::error::chain(&error), "cannot remove a target from the kernel filter");
            }
        }
        let counters = self.probes.counters()?;
        self.drain(ring, &tx).await;
        // Children forked while the ring was drained joined the filter meanwhile.
        for &pid in &self.targets {
            let _ = self.probes.remove_target(pid);
        }
        // Runs of identical copies and of page faults the threads had not sent yet: after
        // everything else they did.
        let mut records = Vec::new();
        self.held_back_runs(None, &mut records);
        if !records.is_empty() {
            let _ = tx.send(records).await;
        }
        drop(tx);
        writer.await.map_err(|error| {
            TracerError::Recorder(format!(
                "history writer failed: {}",
                crate::error::chain(&error)
            ))
        })?;
        let Reader { shared, probes, .. } = self;
        let decode_errors = shared.live.decode_errors.load(Ordering::Relaxed);
        {
            let mut history = shared.history.write().expect("history lock poisoned");
            let stats = history.stats_mut();
            stats.kernel = counters;
            stats.decode_errors = decode_errors;
        }
        publish_counters(&probes, &shared);
        Ok(RecorderEnd {
            status: probes.status().to_vec(),
            probes,
        })
    }

    /// Takes every record in the ring, decodes it, and sends it on in batches. A CUDA library
    /// being opened is handled at once: its process may be stopped until then.
    /// A probed call's record: its call site named by build id while the process's map is
    /// there, its callers, and the Python frames its thread sent at entry (an allocation's).
    fn call_record(&mut self, mut call: ApiCall) -> Record {
        if let Some(RawSite::Address(addr)) = call.site {
            call.site = self.address_sites.to_build_id(call.pid, addr).or(call.site);
        }
        let callers = callers(&self.probes, &mut call, &mut self.address_sites);
        let python = if call.site.is_some() && !call.nested {
            self.python.take(call.pid, (call.tid, false))
        } else {
            Vec::new()
        };
        Record::Event(TraceEvent::Call(call), callers, python)
    }

    async fn drain(&mut self, ring: &mut RingBuf<MapData>, tx: &mpsc::Sender<Vec<Record>>) {
        let mut batch = Vec::with_capacity(BATCH);
        let mut events = 0u64;
        loop {
            // The record borrows the ring: decode it and let it go before awaiting.
            let decoded = match ring.next() {
                None => break,
                Some(record) => match events::python_code(&record) {
                    Some(Ok(code)) => {
                        events += 1;
                        self.python.code(&code);
                        continue;
                    }
                    Some(Err(error)) => Err(error),
                    None => events::decode(&record),
                },
            };
            events += 1;
            match decoded {
                Ok(TraceEvent::Call(call)) => batch.push(self.call_record(call)),
                Ok(TraceEvent::PythonFrames {
                    pid,
                    tid,
                    for_mapping,
                    count,
                    frames,
                }) => self
                    .python
                    .frames(pid, (tid, for_mapping), &frames[..usize::from(count)]),
                Ok(TraceEvent::LibraryOpen { pid, fd }) => {
                    let opened = std::fs::read_link(format!("/proc/{pid}/fd/{fd}"));
                    if self.watch.is_some() && !self.targets.contains(&pid) {
                        self.found(pid, opened.as_ref().ok(), &mut batch);
                    }
                    self.library_opened(pid, fd, opened);
                }
                Ok(TraceEvent::ProcessFork { pid, child }) => {
                    tracing::info!(pid, child, "following a child process");
                    if !self.targets.contains(&child) {
                        self.targets.push(child);
                    }
                    self.maps_due.insert(child);
                    batch.push(Record::Event(
                        TraceEvent::ProcessFork { pid, child },
                        Vec::new(),
                        Vec::new(),
                    ));
                }
                // A large mapping of the program's own: the Python lines its thread sent
                // just before it (taken, and dropped, by a mapping that failed too: they are
                // no later mapping's).
                Ok(
                    event @ TraceEvent::HostMemory {
                        pid,
                        tid,
                        nested: false,
                        failed,
                        op: HostOp::Map { len, .. },
                        ..
                    },
                ) => {
                    let python = self.python.take(pid, (tid, true));
                    let python = if failed || len < tracer_common::MAPPING_LINES_FLOOR {
                        Vec::new()
                    } else {
                        python
                    };
                    batch.push(Record::Event(event, Vec::new(), python));
                }
                Ok(event) => batch.push(Record::Event(event, Vec::new(), Vec::new())),
                Err(error) => {
                    self.shared
                        .live
                        .decode_errors
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %crate::error::chain(&error), "dropping a ring-buffer record that does not decode");
                }
            }
            if batch.len() >= BATCH {
                self.shared.live.events.fetch_add(events, Ordering::Relaxed);
                events = 0;
                let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                if tx.send(full).await.is_err() {
                    return;
                }
            }
        }
        self.shared.live.events.fetch_add(events, Ordering::Relaxed);
        if !batch.is_empty() {
            let _ = tx.send(batch).await;
        }
    }

    /// A process that is no target opened a CUDA library (watching every process; the kernel
    /// made it a target and may hold it stopped): it begins a session of its own, or is left
    /// out by the filter.
    fn found(&mut self, pid: u32, opened: Option<&PathBuf>, batch: &mut Vec<Record>) {
        // Another tracer (or this one) opens CUDA libraries to read their symbols: never a
        // target, nor stopped again.
        if self.identities.is_tracer(pid) {
            tracing::debug!(pid, "leaving out a tracer");
            self.leave_out(pid);
            return;
        }
        // A file named like one (`libcudnn*`, a `libhotpin_*.rmeta`) that is no CUDA runtime,
        // driver or interposer: not a CUDA process, until it opens one.
        if opened.is_some_and(|path| {
            let host = target::host_path(pid, &path.to_string_lossy());
            !self.identities.is_cuda_library(&host)
        }) {
            if let Err(error) = self.probes.remove_target(pid) {
                tracing::warn!(pid, error = %crate::error::chain(&error), "cannot leave a process out");
            }
            return;
        }
        let admitted = self.watch.as_ref().is_some_and(|filter| {
            filter
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .admits(pid)
        });
        if admitted {
            let info = SessionInfo::of_process(pid);
            tracing::info!(pid, program = ?info.program, "tracing a new CUDA process");
            self.targets.push(pid);
            batch.push(Record::Started(info));
            self.python.examine(pid, &mut self.probes);
            // While it is held: its program may carry the runtime or hotpin statically.
            for path in target::candidate_files(pid).unwrap_or_default() {
                if !self.probes.is_examined(&path)
                    && let Err(error) = self.probes.attach_file(&path)
                {
                    tracing::debug!(pid, path = %path.display(), error = %crate::error::chain(&error), "cannot attach");
                }
            }
        } else {
            tracing::info!(pid, "leaving out a CUDA process the filter does not admit");
            self.leave_out(pid);
        }
    }

    /// Stops tracing `pid` for good: its later library opens make it no target again.
    fn leave_out(&mut self, pid: u32) {
        if let Err(error) = self.probes.ignore(pid) {
            tracing::warn!(pid, error = %crate::error::chain(&error), "cannot leave a process out");
        }
        self.ignored.push(pid);
    }

    /// A target opened a `libcud*` file: attach to it if it is a CUDA runtime or driver, then
    /// let the process go on if the kernel stopped it.
    fn library_opened(&mut self, pid: u32, fd: i32, opened: std::io::Result<PathBuf>) {
        let traced = self.targets.contains(&pid);
        match opened {
            Ok(path) if traced => {
                let name = path.to_string_lossy().into_owned();
                if target::is_candidate_name(&name) {
                    let host = target::host_path(pid, &name);
                    if !self.probes.is_examined(&host) {
                        match self.probes.attach_file(&host) {
                            Ok(report) => tracing::info!(
                                pid,
                                path = %host.display(),
                                probes = report.len(),
                                "attached a CUDA library as it was opened"
                            ),
                            Err(error) => {
                                tracing::warn!(pid, error = %crate::error::chain(&error), "cannot attach a CUDA library")
                            }
                        }
                    }
                }
            }
            Ok(_) => {}
            // The process closed it or exited already: a later rescan still finds what it maps.
            Err(error) => {
                tracing::debug!(pid, fd, error = %crate::error::chain(&error), "opened library is gone")
            }
        }
        if traced {
            self.maps_due.insert(pid);
            // A Python program loads CUDA from Python: its interpreter is there by now.
            self.python.examine(pid, &mut self.probes);
            // While it is held (or at least alive), learn what it maps: its program and
            // libraries, by build id, so its call sites resolve even if it exits before the
            // writer gets to them.
            self.resolver
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .learn_process(pid);
        }
        if self.probes.stops_on_library_open() {
            // Released first: once continued, by this agent, a parent or another tracer, it
            // runs on. A program another tracer holds too (`tracer record -- prog` beside the
            // daemon) is stopped again by that tracer's kernel side until it lets it go, so
            // each tracer attaches before the program runs on.
            if let Err(error) = self.probes.release_hold(pid) {
                tracing::warn!(pid, error = %crate::error::chain(&error), "cannot release a held process");
            }
            self.held.let_go(pid);
        }
    }

    /// Attaches CUDA libraries the targets mapped since the last look; returns the targets
    /// that exited (taken out of the kernel's filter).
    fn rescan(&mut self) -> Vec<u32> {
        let Self {
            probes,
            targets,
            shared,
            python,
            rescans,
            maps_due,
            ..
        } = self;
        let mut exited = Vec::new();
        *rescans += 1;
        let every = *rescans % MAPS_EVERY == 1;
        targets.retain(|&pid| {
            // A zombie still has a map (empty): it has exited all the same.
            let gone = target::has_exited(pid);
            if !gone && !every && !maps_due.contains(&pid) {
                return true;
            }
            let maps = if gone {
                Err(TracerError::NoSuchProcess { pid })
            } else {
                target::read_maps(pid)
            };
            let files = maps.map(|maps| {
                // A program that runs Python without loading CUDA through it (yet).
                python.examine_in(pid, &maps, probes);
                target::candidate_files_in(pid, &maps)
            });
            match files {
                Ok(files) => {
                    for path in files {
                        if probes.is_examined(&path) {
                            continue;
                        }
                        match probes.attach_file(&path) {
                            Ok(report) => tracing::info!(
                                pid,
                                path = %path.display(),
                                attached = report.iter().filter(|s| s.state == crate::probes::ProbeState::Attached).count(),
                                "attached a CUDA library loaded after the start"
                            ),
                            // The process may have exited meanwhile; its exit is noticed next time.
                            Err(error) => tracing::debug!(pid, path = %path.display(), error = %crate::error::chain(&error), "cannot attach"),
                        }
                    }
                    true
                }
                Err(TracerError::NoSuchProcess { .. }) => {
                    tracing::info!(pid, "target exited");
                    let _ = probes.remove_target(pid);
                    exited.push(pid);
                    false
                }
                Err(error) => {
                    tracing::warn!(pid, error = %crate::error::chain(&error), "cannot read the target's memory map");
                    true
                }
            }
        });
        maps_due.clear();
        if targets.is_empty() {
            shared.live.targets_exited.store(true, Ordering::Relaxed);
        }
        let Self {
            probes, ignored, ..
        } = self;
        ignored.retain(|&pid| {
            let gone = target::has_exited(pid);
            if gone {
                let _ = probes.forget_ignored(pid);
            }
            !gone
        });
        exited
    }

    /// The runs of identical copies and of page faults that threads hold back (of process
    /// `pid`, or of every thread), as records.
    fn held_back_runs(&mut self, pid: Option<u32>, records: &mut Vec<Record>) {
        let copies = match pid {
            Some(pid) => self.probes.take_copy_runs_of(pid),
            None => self.probes.take_copy_runs(),
        };
        match copies {
            Ok(runs) => {
                for run in &runs {
                    match events::decode_event(run) {
                        Ok(call) => {
                            records.push(Record::Event(
                                TraceEvent::Call(call),
                                Vec::new(),
                                Vec::new(),
                            ));
                        }
                        Err(error) => {
                            self.shared
                                .live
                                .decode_errors
                                .fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(%error, "dropping a copy run that does not decode");
                        }
                    }
                }
            }
            Err(error) => {
                tracing::warn!(error = %crate::error::chain(&error), "cannot read the held-back copy runs")
            }
        }
        let faults = match pid {
            Some(pid) => self.probes.take_fault_runs_of(pid),
            None => self.probes.take_fault_runs(),
        };
        match faults {
            Ok(runs) => records.extend(
                runs.into_iter()
                    .map(|run| Record::Event(run, Vec::new(), Vec::new())),
            ),
            Err(error) => {
                tracing::warn!(error = %crate::error::chain(&error), "cannot read the held-back page-fault runs")
            }
        }
    }

    fn publish_counters(&self) {
        publish_counters(&self.probes, &self.shared);
    }
}

/// Applies batches to the history in ring order, resolving allocation call sites: to the one
/// history, or to each process's session.
async fn write_batches(
    mut rx: mpsc::Receiver<Vec<Record>>,
    shared: Arc<Shared>,
    resolver: Arc<Mutex<CallSiteResolver>>,
    per_session: bool,
) {
    let mut spaces = AddressSpaces::default();
    while let Some(batch) = rx.recv().await {
        let mut resolver = resolver.lock().unwrap_or_else(PoisonError::into_inner);
        if !per_session {
            let mut history = shared.history.write().expect("history lock poisoned");
            for record in &batch {
                match record {
                    Record::Event(event, callers, python) => apply(
                        &mut history,
                        &mut resolver,
                        &mut spaces,
                        event,
                        (callers, python),
                    ),
                    Record::Exited(pid) => resolver.forget(*pid),
                    Record::Started(_) => {}
                }
            }
            history.bound();
            continue;
        }
        let mut sessions = shared.sessions();
        for record in batch {
            match record {
                Record::Started(info) => {
                    sessions.start(info);
                }
                Record::Exited(pid) => {
                    spaces.forget(pid);
                    resolver.forget(pid);
                    sessions.exited(pid);
                    if sessions.running().next().is_none() {
                        resolver.release_symbols();
                        // Give the freed pages back to the system: glibc keeps them.
                        // SAFETY: malloc_trim has no preconditions.
                        unsafe { libc::malloc_trim(0) };
                    }
                }
                Record::Event(event, callers, python) => {
                    if let TraceEvent::ProcessFork { pid, child } = event {
                        sessions.fork(pid, child);
                    }
                    // Events of a process in no session (left out, or gone before it was
                    // found) have nowhere to go.
                    if let Some(history) = sessions.history_of(event.pid()) {
                        apply(
                            history,
                            &mut resolver,
                            &mut spaces,
                            &event,
                            (&callers, &python),
                        );
                    }
                }
            }
        }
        sessions.bound();
    }
}

fn apply(
    history: &mut MemHistory,
    resolver: &mut CallSiteResolver,
    spaces: &mut AddressSpaces,
    event: &TraceEvent,
    (callers, python): (&[RawSite], &[CallSite]),
) {
    match *event {
        TraceEvent::Call(mut call) => {
            // A unified-addressing copy whose pointers no known allocation places: the
            // process's address space does, while the process is there.
            if let Op::Copy {
                dst,
                src,
                bytes,
                direction: CopyDirection::Unresolved,
            } = call.op
                && !call.nested
                && history.resolve_direction(call.pid, dst, src) == CopyDirection::Unresolved
                && let Some(direction) = spaces.direction(call.pid, dst, src)
            {
                call.op = Op::Copy {
                    dst,
                    src,
                    bytes,
                    direction,
                };
            }
            let call = &call;
            let mut callers: Vec<_> = callers
                .iter()
                .map_while(|&raw| {
                    history.intern_raw_site(raw, || resolver.resolve_caller(call.pid, raw))
                })
                .collect();
            callers.extend(
                python
                    .iter()
                    .map(|site| history.intern_call_site(site.clone())),
            );
            let site = match (call.op, call.site) {
                (Op::Alloc { .. } | Op::Register { .. } | Op::Realloc { .. }, Some(raw))
                    if !call.nested =>
                {
                    history.intern_raw_site(raw, || Some(resolver.resolve(call.pid, raw)))
                }
                _ => None,
            };
            history.apply_with_callers(call, site, callers);
        }
        // Handled by the reader: the process may be waiting for it.
        TraceEvent::LibraryOpen { .. } => {}
        TraceEvent::HostMemory {
            pid,
            op: HostOp::Map { addr, .. },
            ..
        } if !python.is_empty() => {
            history.apply_kernel(event, target::heap_start);
            let python = python
                .iter()
                .map(|site| history.intern_call_site(site.clone()))
                .collect();
            history.record_mapping_lines(pid, addr, python);
        }
        _ => history.apply_kernel(event, target::heap_start),
    }
}

/// Publishes the kernel's loss counters to the live counters and the sessions.
fn publish_counters(probes: &Probes, shared: &Shared) {
    if let Ok(counters) = probes.counters() {
        let lost = counters.lost() + shared.live.decode_errors.load(Ordering::Relaxed);
        shared.live.lost.store(lost, Ordering::Relaxed);
        shared.sessions().counters = counters;
    }
}
