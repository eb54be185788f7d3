//! The recording thread: reads the ring buffer in batches, decodes, and feeds the MemHistory
//! through a bounded channel; attaches CUDA libraries the targets load after the start.

use std::{
    sync::{
        Arc, Mutex, RwLock,
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
    events::{self, CudaCall, Op, RawSite, TraceEvent},
    history::MemHistory,
    probes::registry::CopyDirection,
    probes::{KernelCounters, ProbeStatus, Probes},
    target::{self, AddressSites, CallSiteResolver},
};

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
}

impl Default for RecorderConfig {
    fn default() -> Self {
        Self {
            drain_interval: Duration::from_millis(10),
            rescan_interval: Duration::from_millis(100),
            interposers: Vec::new(),
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
    pub history: RwLock<MemHistory>,
    pub live: LiveCounters,
}

/// Everything the thread owns.
pub(crate) struct Recorder {
    pub resolver: CallSiteResolver,
    pub probes: Probes,
    pub ring: RingBuf<MapData>,
    pub shared: Arc<Shared>,
    pub targets: Vec<u32>,
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
            mut probes,
            ring,
            shared,
            mut targets,
            config,
        } = self;
        let (tx, rx) = mpsc::channel::<Vec<Record>>(CHANNEL_BATCHES);
        // Shared with the reader, which learns a process's modules while the kernel holds it
        // stopped at a library open: a short program may be gone before the writer looks.
        let resolver = Arc::new(Mutex::new(resolver));
        let writer = tokio::spawn(write_batches(
            rx,
            Arc::clone(&shared),
            Arc::clone(&resolver),
        ));
        // SAFETY: the RingBuf owns its map's descriptor, keeps it open while it lives, and
        // always returns the same one; it is moved into the AsyncFd and never swapped.
        let mut ring = unsafe { AsyncFd::register(ring) }.map_err(|error| TracerError::Io {
            what: "polling the ring buffer".into(),
            source: error.into(),
        })?;
        let mut drain_tick = tokio::time::interval(config.drain_interval);
        drain_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut address_sites = AddressSites::new(config.interposers.clone());
        let mut rescan_tick = tokio::time::interval(config.rescan_interval);
        rescan_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);

        loop {
            tokio::select! {
                guard = ring.readable_mut() => {
                    let mut guard = guard.map_err(|source| TracerError::Io {
                        what: "polling the ring buffer".into(),
                        source,
                    })?;
                    drain(guard.get_inner_mut(), &tx, &shared, &mut probes, &mut address_sites, &mut targets, &resolver).await;
                    guard.clear_ready();
                }
                _ = drain_tick.tick() => {
                    drain(ring.get_mut(), &tx, &shared, &mut probes, &mut address_sites, &mut targets, &resolver).await
                }
                _ = rescan_tick.tick() => {
                    rescan(&mut probes, &mut targets, &shared);
                    publish_counters(&probes, &shared);
                }
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        break;
                    }
                }
            }
        }
        // End the recording: take the targets out of the kernel's filter first, so the
        // programs stop emitting at once, and keep the loss counters as they stand; then take
        // everything the ring holds. The probes stay attached, emitting nothing for lack of
        // targets, until the caller releases them (it writes the history first: releasing
        // the links waits for the kernel).
        for &pid in &targets {
            if let Err(error) = probes.remove_target(pid) {
                tracing::warn!(pid, error = %crate::error::chain(&error), "cannot remove a target from the kernel filter");
            }
        }
        let counters = probes.counters()?;
        drain(
            ring.get_mut(),
            &tx,
            &shared,
            &mut probes,
            &mut address_sites,
            &mut targets,
            &resolver,
        )
        .await;
        // Children forked while the ring was drained joined the filter meanwhile.
        for &pid in &targets {
            let _ = probes.remove_target(pid);
        }
        // Runs of identical copies and of page faults the threads had not sent yet: after
        // everything else they did.
        match probes.take_copy_runs() {
            Ok(runs) if !runs.is_empty() => {
                let mut calls = Vec::new();
                for run in &runs {
                    match events::decode_event(run) {
                        Ok(call) => calls.push((TraceEvent::Cuda(call), Vec::new())),
                        Err(error) => {
                            shared.live.decode_errors.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(%error, "dropping a copy run that does not decode");
                        }
                    }
                }
                let _ = tx.send(calls).await;
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(error = %crate::error::chain(&error), "cannot read the last copy runs")
            }
        }
        match probes.take_fault_runs() {
            Ok(runs) if !runs.is_empty() => {
                let runs = runs.into_iter().map(|run| (run, Vec::new())).collect();
                let _ = tx.send(runs).await;
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(error = %crate::error::chain(&error), "cannot read the last page-fault runs")
            }
        }
        drop(tx);
        writer.await.map_err(|error| {
            TracerError::Recorder(format!(
                "history writer failed: {}",
                crate::error::chain(&error)
            ))
        })?;
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
}

/// An event on its way to the history, with the callers beyond its call site (allocations).
type Record = (TraceEvent, Vec<RawSite>);

/// The callers beyond an allocation call's site, from the user stack the kernel resolved. The
/// first frame is the call site itself; the walk ends where frame pointers do. A call that
/// went through an interposer (hotpin's, in front of libc's malloc) is named by the first
/// frame outside it instead, as the interposer names it.
fn callers(probes: &Probes, call: &mut CudaCall, sites: &mut AddressSites) -> Vec<RawSite> {
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

/// Takes every record in the ring, decodes it, and sends it on in batches. A CUDA library
/// being opened is handled at once: its process may be stopped until then.
async fn drain(
    ring: &mut RingBuf<MapData>,
    tx: &mpsc::Sender<Vec<Record>>,
    shared: &Shared,
    probes: &mut Probes,
    address_sites: &mut AddressSites,
    targets: &mut Vec<u32>,
    resolver: &Mutex<CallSiteResolver>,
) {
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        // The record borrows the ring: decode it and let it go before awaiting.
        let decoded = match ring.next() {
            None => break,
            Some(record) => events::decode(&record),
        };
        match decoded {
            Ok(TraceEvent::Cuda(mut call)) => {
                if let Some(RawSite::Address(addr)) = call.site {
                    call.site = address_sites.to_build_id(call.pid, addr).or(call.site);
                }
                let callers = callers(probes, &mut call, address_sites);
                batch.push((TraceEvent::Cuda(call), callers));
            }
            Ok(TraceEvent::LibraryOpen { pid, fd }) => library_opened(probes, pid, fd, resolver),
            Ok(TraceEvent::ProcessFork { pid, child }) => {
                tracing::info!(pid, child, "following a child process");
                if !targets.contains(&child) {
                    targets.push(child);
                }
                batch.push((TraceEvent::ProcessFork { pid, child }, Vec::new()));
            }
            Ok(event) => batch.push((event, Vec::new())),
            Err(error) => {
                shared.live.decode_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %crate::error::chain(&error), "dropping a ring-buffer record that does not decode");
            }
        }
        if batch.len() == BATCH {
            shared
                .live
                .events
                .fetch_add(BATCH as u64, Ordering::Relaxed);
            let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
            if tx.send(full).await.is_err() {
                return;
            }
        }
    }
    if !batch.is_empty() {
        shared
            .live
            .events
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let _ = tx.send(batch).await;
    }
}

/// Applies batches to the history in ring order, resolving allocation call sites.
async fn write_batches(
    mut rx: mpsc::Receiver<Vec<Record>>,
    shared: Arc<Shared>,
    resolver: Arc<Mutex<CallSiteResolver>>,
) {
    let mut spaces = AddressSpaces::default();
    while let Some(batch) = rx.recv().await {
        let mut history = shared.history.write().expect("history lock poisoned");
        let mut resolver = resolver.lock().unwrap_or_else(|p| p.into_inner());
        for (event, callers) in &batch {
            apply(&mut history, &mut resolver, &mut spaces, event, callers);
        }
    }
}

fn apply(
    history: &mut MemHistory,
    resolver: &mut CallSiteResolver,
    spaces: &mut AddressSpaces,
    event: &TraceEvent,
    callers: &[RawSite],
) {
    match *event {
        TraceEvent::Cuda(mut call) => {
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
            let callers = callers
                .iter()
                .map(|&raw| history.intern_call_site(resolver.resolve(call.pid, raw)))
                .collect();
            let site = match (call.op, call.site) {
                (Op::Alloc { .. } | Op::Register { .. } | Op::Realloc { .. }, Some(raw))
                    if !call.nested =>
                {
                    Some(history.intern_call_site(resolver.resolve(call.pid, raw)))
                }
                _ => None,
            };
            history.apply_with_callers(call, site, callers);
        }
        // Handled by the reader: the process may be waiting for it.
        TraceEvent::LibraryOpen { .. } => {}
        _ => history.apply_kernel(event, target::heap_start),
    }
}

/// A target opened a `libcud*` file: attach to it if it is a CUDA runtime or driver, then let
/// the process go on if the kernel stopped it.
fn library_opened(probes: &mut Probes, pid: u32, fd: i32, resolver: &Mutex<CallSiteResolver>) {
    let link = std::fs::read_link(format!("/proc/{pid}/fd/{fd}"));
    match link {
        Ok(path) => {
            let name = path.to_string_lossy().into_owned();
            if target::is_candidate_name(&name) {
                let host = target::host_path(pid, &name);
                if !probes.is_examined(&host) {
                    match probes.attach_file(&host) {
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
        // The process closed it or exited already: a later rescan still finds what it maps.
        Err(error) => {
            tracing::debug!(pid, fd, error = %crate::error::chain(&error), "opened library is gone")
        }
    }
    // While it is held (or at least alive), learn what it maps: its program and libraries, by
    // build id, so its call sites resolve even if it exits before the writer gets to them.
    resolver
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .learn_process(pid);
    if probes.stops_on_library_open() {
        // SAFETY: kill has no memory preconditions; the pid is a target the kernel stopped.
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    }
}

/// Attaches CUDA libraries the targets mapped since the last look, and notices exits.
fn rescan(probes: &mut Probes, targets: &mut Vec<u32>, shared: &Shared) {
    targets.retain(|&pid| {
        match target::candidate_files(pid) {
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
                        // The process may have exited meanwhile; its exit is noticed below.
                        Err(error) => tracing::debug!(pid, path = %path.display(), error = %crate::error::chain(&error), "cannot attach"),
                    }
                }
                true
            }
            Err(TracerError::NoSuchProcess { .. }) => {
                tracing::info!(pid, "target exited");
                let _ = probes.remove_target(pid);
                false
            }
            Err(error) => {
                tracing::warn!(pid, error = %crate::error::chain(&error), "cannot read the target's memory map");
                true
            }
        }
    });
    if targets.is_empty() {
        shared.live.targets_exited.store(true, Ordering::Relaxed);
    }
}

fn publish_counters(probes: &Probes, shared: &Shared) {
    if let Ok(KernelCounters {
        ringbuf_full,
        host_ringbuf_full,
        ..
    }) = probes.counters()
    {
        let lost =
            ringbuf_full + host_ringbuf_full + shared.live.decode_errors.load(Ordering::Relaxed);
        shared.live.lost.store(lost, Ordering::Relaxed);
    }
}
