//! Loading the kernel programs and attaching them, from the one registry, to the CUDA
//! libraries a process maps.

pub mod kernel;
mod multi;
pub mod symbols;
pub mod tracefs;

use hotpin_history::KernelCounters;
use hotpin_registry::registry;

use std::{
    collections::HashSet,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf},
    programs::{
        KProbe, ProgramError, TracePoint, UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLinkId, UProbeScope},
    },
};
use serde::Serialize;
use tracer_common::{
    BuildIdFrame, FaultRun, STACK_FRAMES, config, counter, field, maps, python::Offsets,
};

use self::{
    registry::{CALL_PROBES, KPROBE_PROBES, Library, TRACEPOINT_PROBES},
    symbols::SymbolTable,
};
use crate::error::TracerError;

/// The compiled `tracer-ebpf` object, embedded at build time.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer-ebpf"));

const ENTRY_PROGRAM: &str = "api_call_entry";
const RETURN_PROGRAM: &str = "api_call_return";

/// Whether a probe is in place, and if not, why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum ProbeState {
    Attached,
    Unavailable { reason: String },
}

/// Where a probe sits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProbeTarget {
    /// A uprobe and uretprobe pair on a function of a library file.
    Call { library: Library, path: PathBuf },
    /// A kernel tracepoint.
    Tracepoint {
        category: &'static str,
        name: &'static str,
    },
    /// A kprobe on a kernel function.
    Kprobe { function: &'static str },
}

impl ProbeTarget {
    /// "cuda-runtime /path/libcudart.so.13" or "tracepoint syscalls:sys_enter_openat".
    pub fn describe(&self) -> String {
        match self {
            ProbeTarget::Call { library, path } => format!("{} {}", library.name(), path.display()),
            ProbeTarget::Tracepoint { category, name } => format!("tracepoint {category}:{name}"),
            ProbeTarget::Kprobe { function } => format!("kprobe {function}"),
        }
    }

    /// The library file, for a uprobe.
    pub fn path(&self) -> Option<&Path> {
        match self {
            ProbeTarget::Call { path, .. } => Some(path),
            ProbeTarget::Tracepoint { .. } | ProbeTarget::Kprobe { .. } => None,
        }
    }
}

/// One line of `tracer probes`.
#[derive(Clone, Debug, Serialize)]
pub struct ProbeStatus {
    /// The function or the program.
    pub symbol: String,
    pub target: ProbeTarget,
    #[serde(flatten)]
    pub state: ProbeState,
}

/// Which probes that are off by default to attach as well, and what the allocation probes
/// read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeOptions {
    /// The Python lines of allocations in CPython processes ([`crate::python`]): on by
    /// default; each allocation of such a process then sends one more event.
    pub python_lines: bool,
    /// `exceptions:page_fault_user`: user page faults, attributed to allocations. Off by
    /// default: a process that faults a lot (a Python start) sends many events.
    pub page_faults: bool,
    /// libc's allocator (malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign,
    /// free) with this size floor in bytes, applied in the kernel: a uprobe costs about 1 µs a
    /// hit, too much for every malloc of a Python process, so it is off by default.
    pub libc_malloc: Option<u64>,
    /// The runtime's cudaMemcpy and cudaMemcpyAsync, besides the driver copy each makes.
    pub runtime_copies: bool,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            python_lines: true,
            page_faults: false,
            libc_malloc: None,
            runtime_copies: false,
        }
    }
}

impl ProbeOptions {
    /// Whether the registry's call probe is to be attached.
    fn wants_call(self, probe: &registry::CallProbe) -> bool {
        match probe.library {
            Library::Libc => self.libc_malloc.is_some(),
            Library::CudaRuntime if !probe.default_on => self.runtime_copies,
            _ => probe.default_on,
        }
    }

    fn wants(self, probe: &registry::TracepointProbe) -> bool {
        probe.default_on
            || (self.page_faults && probe.program == registry::PAGE_FAULT_PROGRAM)
            || (self.python_lines && probe.program == registry::MAPPING_LINES_PROGRAM)
    }
}

/// A call probe waiting to be attached with the others of its file (multi links).
/// What attaching one file's probes decided so far.
#[derive(Default)]
struct FilePlan {
    /// The offsets probed, and the symbol first probed at each: aliases (libc's memalign and
    /// aligned_alloc are one function) are probed once.
    probed: std::collections::HashMap<u64, &'static str>,
    /// With multi links: the probes to attach together once every symbol is decided.
    batch: Vec<BatchedProbe>,
}

struct BatchedProbe {
    offset: u64,
    cookie: u64,
    /// Its line in `attach_file`'s report.
    report_index: usize,
    /// Probed at return too (all but the driver's copies).
    with_return: bool,
}

/// The loaded kernel programs and what they are attached to.
pub struct Probes {
    ebpf: Ebpf,
    /// Files already attached, by (device, inode): a library mapped by several targets, or
    /// under several paths, is attached once.
    attached_files: HashSet<(u64, u64)>,
    status: Vec<ProbeStatus>,
    links: Vec<(&'static str, UProbeLinkId)>,
    /// Whether the call programs were loaded for `uprobe_multi` links (Linux 6.6+), and those
    /// links: two per file (entry and return), closed to detach.
    multi: bool,
    multi_links: Vec<std::os::fd::OwnedFd>,
    stop_on_library_open: bool,
    /// Lets held programs go if this agent stops answering (while it stops them).
    watchdog: Option<crate::watchdog::Watchdog>,
    options: ProbeOptions,
}

impl Probes {
    /// Loads the embedded object with a ring buffer of `ring_bytes` (a power of two, at least
    /// one page) and loads both programs into the kernel.
    pub fn load(ring_bytes: u32, options: ProbeOptions) -> Result<Self, TracerError> {
        kernel::check()?;
        let mut ebpf = EbpfLoader::new()
            .map_max_entries(maps::EVENTS, ring_bytes)
            .load(EBPF_OBJECT)
            .map_err(|source| TracerError::Load { source })?;
        let multi = load_call_programs(&mut ebpf)?;
        let mut probes = Self {
            ebpf,
            attached_files: HashSet::new(),
            status: Vec::new(),
            links: Vec::new(),
            multi,
            multi_links: Vec::new(),
            stop_on_library_open: false,
            watchdog: None,
            options,
        };
        if let Some(floor) = options.libc_malloc {
            probes.set_config(config::MALLOC_FLOOR, floor)?;
        }
        probes.set_config(config::PAGE_FAULTS, u64::from(options.page_faults))?;
        for descriptor in registry::Descriptor::ALL {
            probes.set_array(
                maps::DESCRIPTORS,
                u32::from(descriptor.index()),
                descriptor.layout(),
            )?;
        }
        let unknown = probes.set_fields();
        probes.attach_tracepoints(options, &unknown);
        probes.attach_kprobes();
        Ok(probes)
    }

    /// Tells the kernel programs where the fields they read lie in this kernel's tracepoint
    /// records (tracefs format files). Returns, for each field whose place could not be had,
    /// why: the programs reading it are not attached.
    fn set_fields(&mut self) -> std::collections::HashMap<u32, String> {
        let root = tracefs::mount();
        let mut unknown = std::collections::HashMap::new();
        for spec in tracefs::FIELDS {
            let offset = tracefs::offset_of(&root, spec)
                .map_err(|error| crate::error::chain(&error))
                .and_then(|offset| {
                    self.set_array(maps::FIELDS, spec.index, offset)
                        .map_err(|error| crate::error::chain(&error))
                        .map(|()| offset)
                });
            match offset {
                Ok(offset) if spec.index == field::SYSCALL_ARGS => {
                    // The host memory programs read every argument from this one base.
                    for event in [
                        "sys_enter_mmap",
                        "sys_enter_munmap",
                        "sys_enter_mremap",
                        "sys_enter_brk",
                    ] {
                        if let Err(why) = tracefs::check_syscall_layout(&root, event, offset) {
                            unknown.insert(spec.index, why);
                        }
                    }
                }
                Ok(_) => {}
                Err(why) => {
                    unknown.insert(spec.index, why);
                }
            }
        }
        unknown
    }

    /// Loads and attaches every tracepoint of the registry; one the kernel refuses, or one
    /// reading a field whose place is unknown (`unknown`), is reported and skipped.
    fn attach_tracepoints(
        &mut self,
        options: ProbeOptions,
        unknown: &std::collections::HashMap<u32, String>,
    ) {
        for probe in TRACEPOINT_PROBES.iter().filter(|p| options.wants(p)) {
            let target = ProbeTarget::Tracepoint {
                category: probe.category,
                name: probe.name,
            };
            if let Some(why) = probe.fields.iter().find_map(|f| unknown.get(f)) {
                tracing::warn!(reason = why, program = probe.program, "probe unavailable");
                self.status.push(ProbeStatus {
                    symbol: probe.program.to_string(),
                    target,
                    state: ProbeState::Unavailable {
                        reason: format!("record layout unknown: {why}"),
                    },
                });
                continue;
            }
            self.attach_kernel_program(probe.program, target, |program| {
                let program: &mut TracePoint = program.try_into()?;
                // One program serves several tracepoints (the four host memory syscalls).
                if program.fd().is_err() {
                    program.load()?;
                }
                program.attach(probe.category, probe.name).map(drop)
            });
        }
    }

    /// The frames of user stack `id` as the kernel resolved them: the call site first, then
    /// its callers, as far as the walk went.
    pub fn stack_frames(&self, id: u32) -> Result<Vec<BuildIdFrame>, TracerError> {
        const MAP: &str = maps::CALLER_STACKS;
        let frames = self
            .hash_map::<[BuildIdFrame; STACK_FRAMES]>(MAP)?
            .get(&id, 0)
            .map_err(|source| TracerError::Map { map: MAP, source })?;
        Ok(frames
            .into_iter()
            .take_while(|frame| frame.status != 0)
            .collect())
    }

    /// The threads' runs of identical driver copies not sent yet, as the events that stand
    /// for them (each run is sent before its thread's next event; the last ones wait here for
    /// the end of the recording).
    pub fn take_copy_runs(&mut self) -> Result<Vec<tracer_common::Event>, TracerError> {
        let mut events = Vec::new();
        for runs in self.hash_map_values::<tracer_common::CopyRuns>(maps::COPY_RUNS)? {
            events.extend(runs.runs.into_iter().take(runs.used as usize));
        }
        Ok(events)
    }

    /// Takes process `pid`'s runs of identical driver copies not sent yet (its threads' last
    /// ones), once it has exited: its history ends with them.
    pub fn take_copy_runs_of(
        &mut self,
        pid: u32,
    ) -> Result<Vec<tracer_common::Event>, TracerError> {
        let taken = self
            .take_entries_where::<tracer_common::CopyRuns>(maps::COPY_RUNS, |runs| {
                runs.runs.first().is_some_and(|run| run.header.pid == pid)
            })?;
        Ok(taken
            .into_iter()
            .flat_map(|runs| runs.runs.into_iter().take(runs.used as usize))
            .collect())
    }

    /// Takes process `pid`'s runs of page faults not sent yet, once it has exited.
    pub fn take_fault_runs_of(
        &mut self,
        pid: u32,
    ) -> Result<Vec<hotpin_registry::events::TraceEvent>, TracerError> {
        Ok(self
            .take_entries_where::<FaultRun>(maps::FAULT_RUNS, |run| run.pid == pid)?
            .into_iter()
            .filter(|run| run.pages > 0)
            .map(|run| hotpin_registry::events::TraceEvent::PageFaults {
                pid: run.pid,
                ts_ns: run.ts_ns,
                addr: run.start,
                pages: run.pages,
            })
            .collect())
    }

    /// Removes and returns the entries of hash map `name` (keyed by thread) that `wanted`
    /// picks.
    fn take_entries_where<V: aya::Pod>(
        &mut self,
        name: &'static str,
        wanted: impl Fn(&V) -> bool,
    ) -> Result<Vec<V>, TracerError> {
        let map = self
            .ebpf
            .map_mut(name)
            .expect("the object defines its maps");
        let mut map = BpfHashMap::<_, u32, V>::try_from(map)
            .map_err(|source| TracerError::Map { map: name, source })?;
        let mut taken = Vec::new();
        let entries: Vec<(u32, V)> = map.iter().filter_map(Result::ok).collect();
        for (key, value) in entries {
            if wanted(&value) {
                // Gone already (the thread sent it meanwhile) is fine: it is in the ring.
                if map.remove(&key).is_ok() {
                    taken.push(value);
                }
            }
        }
        Ok(taken)
    }

    /// Takes the runs of page faults the kernel side holds unsent (each thread's last), as
    /// events to apply after everything else.
    pub fn take_fault_runs(
        &mut self,
    ) -> Result<Vec<hotpin_registry::events::TraceEvent>, TracerError> {
        Ok(self
            .hash_map_values::<FaultRun>(maps::FAULT_RUNS)?
            .into_iter()
            .filter(|run| run.pages > 0)
            .map(|run| hotpin_registry::events::TraceEvent::PageFaults {
                pid: run.pid,
                ts_ns: run.ts_ns,
                addr: run.start,
                pages: run.pages,
            })
            .collect())
    }

    /// The object's hash map `name`, keyed by thread or stack id.
    fn hash_map<V: aya::Pod>(
        &self,
        name: &'static str,
    ) -> Result<BpfHashMap<&MapData, u32, V>, TracerError> {
        let map = self.ebpf.map(name).expect("the object defines its maps");
        BpfHashMap::try_from(map).map_err(|source| TracerError::Map { map: name, source })
    }

    /// Every value of the hash map `name`.
    fn hash_map_values<V: aya::Pod>(&self, name: &'static str) -> Result<Vec<V>, TracerError> {
        self.hash_map::<V>(name)?
            .iter()
            .map(|entry| {
                entry
                    .map(|(_, value)| value)
                    .map_err(|source| TracerError::Map { map: name, source })
            })
            .collect()
    }

    /// Attaches the registry's kprobes. A kernel without kprobes (ours) is detected, said once,
    /// and every kprobe is reported unavailable; tracing goes on without them.
    fn attach_kprobes(&mut self) {
        const NO_KPROBES: &str = "this kernel has no kprobes (CONFIG_KPROBES is off)";
        let kprobes = Path::new("/sys/bus/event_source/devices/kprobe").exists();
        if !kprobes {
            tracing::info!("{NO_KPROBES}: driver page pinning is not seen");
        }
        let functions = if kprobes {
            kernel_functions(KPROBE_PROBES.iter().map(|p| p.function))
        } else {
            HashSet::new()
        };
        for probe in KPROBE_PROBES.iter().filter(|p| p.default_on) {
            let target = ProbeTarget::Kprobe {
                function: probe.function,
            };
            let missing = if !kprobes {
                Some(NO_KPROBES.to_string())
            } else if !functions.contains(probe.function) {
                Some(format!(
                    "the kernel has no function {} (/proc/kallsyms): the NVIDIA driver \
                     module is not loaded",
                    probe.function
                ))
            } else {
                None
            };
            if let Some(reason) = missing {
                self.status.push(ProbeStatus {
                    symbol: probe.program.to_string(),
                    target,
                    state: ProbeState::Unavailable { reason },
                });
                continue;
            }
            self.attach_kernel_program(probe.program, target, |program| {
                let program: &mut KProbe = program.try_into()?;
                program.load()?;
                program.attach(probe.function, 0).map(drop)
            });
        }
    }

    /// Attaches a kprobe program of the registry to another kernel function than its own, and
    /// says whether it took. It proves the kprobe path on kernels without the NVIDIA module
    /// (tests/kprobe.rs, run by `cargo xtask vm-test` on kernels that have kprobes).
    pub fn attach_kprobe_program_to(
        &mut self,
        program: &'static str,
        function: &'static str,
    ) -> ProbeState {
        self.attach_kernel_program(program, ProbeTarget::Kprobe { function }, |program| {
            let program: &mut KProbe = program.try_into()?;
            if program.fd().is_err() {
                program.load()?;
            }
            program.attach(function, 0).map(drop)
        });
        self.status
            .last()
            .map(|status| status.state.clone())
            .expect("attach_kernel_program records a status")
    }

    /// Loads and attaches one kernel-side program with `attach`, and records whether it took;
    /// one the kernel refuses is reported and skipped.
    fn attach_kernel_program(
        &mut self,
        name: &'static str,
        target: ProbeTarget,
        attach: impl FnOnce(&mut aya::programs::Program) -> Result<(), ProgramError>,
    ) {
        let program = self
            .ebpf
            .program_mut(name)
            .expect("the object defines every registry program");
        let state = match attach(program) {
            Ok(()) => ProbeState::Attached,
            Err(source) => {
                let reason = short_reason(&crate::error::chain(&TracerError::Program {
                    program: name,
                    source,
                }));
                tracing::warn!(reason, program = name, "probe unavailable");
                ProbeState::Unavailable { reason }
            }
        };
        self.status.push(ProbeStatus {
            symbol: name.to_string(),
            target,
            state,
        });
    }

    /// Whether a target that opens a CUDA library is stopped until its probes are attached.
    pub fn set_stop_on_library_open(&mut self, stop: bool) -> Result<(), TracerError> {
        self.heartbeat()?;
        if stop && self.watchdog.is_none() {
            let (held, settings) = (self.map_fd(maps::HELD), self.map_fd(maps::CONFIG));
            self.watchdog = Some(crate::watchdog::Watchdog::start(held, settings).map_err(
                |source| TracerError::Io {
                    what: "starting the watchdog of held programs".into(),
                    source,
                },
            )?);
        }
        self.set_config(config::STOP_ON_LIBRARY_OPEN, u64::from(stop))?;
        self.stop_on_library_open = stop;
        Ok(())
    }

    /// Tells the kernel side the agent is alive (`config::HEARTBEAT_NS`): targets are stopped
    /// on library opens only while this was written lately.
    pub fn heartbeat(&mut self) -> Result<(), TracerError> {
        self.set_config(config::HEARTBEAT_NS, crate::address_space::monotonic_ns())
    }

    /// The descriptor of the kernel side's map `name` (a hash or an array).
    fn map_fd(&self, name: &'static str) -> std::os::fd::RawFd {
        use std::os::fd::{AsFd as _, AsRawFd as _};
        match self.ebpf.map(name) {
            Some(
                aya::maps::Map::Array(data)
                | aya::maps::Map::HashMap(data)
                | aya::maps::Map::LruHashMap(data),
            ) => data.fd().as_fd().as_raw_fd(),
            _ => unreachable!("the object defines {name} as a hash or an array"),
        }
    }

    /// Sets one of the kernel side's settings (`config::*`).
    fn set_config(&mut self, index: u32, value: u64) -> Result<(), TracerError> {
        self.set_array(maps::CONFIG, index, value)
    }

    /// Sets slot `index` of the kernel side's array map `name`.
    fn set_array<V: aya::Pod>(
        &mut self,
        name: &'static str,
        index: u32,
        value: V,
    ) -> Result<(), TracerError> {
        let map = self
            .ebpf
            .map_mut(name)
            .expect("the object defines every array map the agent sets");
        let mut array = Array::<_, V>::try_from(map)
            .map_err(|source| TracerError::Map { map: name, source })?;
        array
            .set(index, value, 0)
            .map_err(|source| TracerError::Map { map: name, source })
    }

    /// Whether any process that opens a CUDA library becomes a target (`tracer daemon`).
    pub fn set_watch_library_opens(&mut self, watch: bool) -> Result<(), TracerError> {
        self.set_config(config::WATCH_LIBRARY_OPENS, u64::from(watch))
    }

    /// Stops tracing `pid` and keeps its later library opens from making it a target again
    /// (a process the daemon's filters leave out).
    pub fn ignore(&mut self, pid: u32) -> Result<(), TracerError> {
        self.remove_target(pid)?;
        self.insert_pid(maps::IGNORED, pid)
    }

    /// Takes `pid` out of the kernel side's held processes, before it is continued: from then
    /// on a SIGCONT from anyone lets it run on, not stopped again at its next memory syscall.
    pub fn release_hold(&mut self, pid: u32) -> Result<(), TracerError> {
        self.remove_pid(maps::HELD, pid)
    }

    /// Forgets that `pid` was ignored (it exited; the number may be used again).
    pub fn forget_ignored(&mut self, pid: u32) -> Result<(), TracerError> {
        self.remove_pid(maps::IGNORED, pid)
    }

    pub fn stops_on_library_open(&self) -> bool {
        self.stop_on_library_open
    }

    /// Traces `pid` from now on (the kernel programs ignore every other process).
    pub fn add_target(&mut self, pid: u32) -> Result<(), TracerError> {
        self.insert_pid(maps::TARGETS, pid)
    }

    /// Stops tracing `pid`.
    pub fn remove_target(&mut self, pid: u32) -> Result<(), TracerError> {
        self.remove_pid(maps::TARGETS, pid)
    }

    /// Reads `pid`'s Python frames at its allocations, with `offsets` ([`crate::python`]).
    pub fn set_python(&mut self, pid: u32, offsets: Offsets) -> Result<(), TracerError> {
        self.python_map()?
            .insert(pid, offsets, 0)
            .map_err(|source| TracerError::Map {
                map: maps::PYTHON,
                source,
            })
    }

    /// Whether Python lines are read ([`ProbeOptions::python_lines`]).
    pub fn reads_python_lines(&self) -> bool {
        self.options.python_lines
    }

    /// Stops reading `pid`'s Python frames (it exited); one not read is fine.
    pub fn remove_python(&mut self, pid: u32) -> Result<(), TracerError> {
        match self.python_map()?.remove(&pid) {
            Err(source) if !is_missing_key(&source) => Err(TracerError::Map {
                map: maps::PYTHON,
                source,
            }),
            _ => Ok(()),
        }
    }

    fn python_map(&mut self) -> Result<BpfHashMap<&mut MapData, u32, Offsets>, TracerError> {
        let map = self
            .ebpf
            .map_mut(maps::PYTHON)
            .expect("the object defines the Python offsets");
        BpfHashMap::try_from(map).map_err(|source| TracerError::Map {
            map: maps::PYTHON,
            source,
        })
    }

    /// Adds `pid` to the process set `name` (TARGETS, IGNORED, HELD: hashes keyed by tgid; aya opens
    /// an LRU hash as a `HashMap` too).
    fn insert_pid(&mut self, name: &'static str, pid: u32) -> Result<(), TracerError> {
        self.pid_set(name)?
            .insert(pid, 0, 0)
            .map_err(|source| TracerError::Map { map: name, source })
    }

    /// Takes `pid` out of the process set `name`; one not in it is fine.
    fn remove_pid(&mut self, name: &'static str, pid: u32) -> Result<(), TracerError> {
        match self.pid_set(name)?.remove(&pid) {
            Err(source) if !is_missing_key(&source) => Err(TracerError::Map { map: name, source }),
            _ => Ok(()),
        }
    }

    fn pid_set(
        &mut self,
        name: &'static str,
    ) -> Result<BpfHashMap<&mut MapData, u32, u32>, TracerError> {
        let map = self
            .ebpf
            .map_mut(name)
            .expect("the object defines its process sets");
        BpfHashMap::try_from(map).map_err(|source| TracerError::Map { map: name, source })
    }

    /// Whether this file was examined already.
    pub fn is_examined(&self, path: &Path) -> bool {
        file_id(path).is_some_and(|id| self.attached_files.contains(&id))
    }

    /// Examines the file at `path` once and attaches the registry probes of every library it
    /// carries, told by marker symbols (`Library::marker`): a CUDA runtime or driver, hotpin's
    /// allocator, or an executable with any of them linked statically. A symbol the file lacks
    /// or a probe the kernel refuses is reported and skipped. A file examined already (by device
    /// and inode) returns nothing.
    pub fn attach_file(&mut self, path: &Path) -> Result<Vec<ProbeStatus>, TracerError> {
        let id = file_id(path).ok_or_else(|| TracerError::Io {
            what: format!("reading {}", path.display()),
            source: std::io::Error::last_os_error(),
        })?;
        if !self.attached_files.insert(id) {
            return Ok(Vec::new());
        }
        let symbols = SymbolTable::read(path)?;
        if symbols.offset(Library::INTERPOSER_MARKER).is_some() {
            return Ok(Vec::new());
        }
        let mut report = Vec::new();
        let mut plan = FilePlan::default();
        for library in Library::ALL {
            if symbols.offset(library.marker()).is_none() {
                continue;
            }
            let options = self.options;
            for probe in CALL_PROBES
                .iter()
                .filter(|p| p.library == library && options.wants_call(p))
            {
                for &symbol in probe.symbols {
                    let offset = symbols.probe_offset(symbol);
                    let at = report.len();
                    let state = self.probe_state(path, &mut plan, (symbol, offset), probe, at);
                    if let ProbeState::Unavailable { reason } = &state {
                        tracing::debug!(symbol, reason, "probe unavailable");
                    }
                    report.push(ProbeStatus {
                        symbol: symbol.to_string(),
                        target: ProbeTarget::Call {
                            library,
                            path: path.to_path_buf(),
                        },
                        state,
                    });
                }
            }
        }
        for (index, reason) in self.attach_batch(path, &plan.batch) {
            tracing::debug!(symbol = report[index].symbol, reason, "probe unavailable");
            report[index].state = ProbeState::Unavailable { reason };
        }
        self.status.extend(report.iter().cloned());
        Ok(report)
    }

    /// What becomes of `symbol` of `probe` in `path`, found at `offset` (None: not exported),
    /// the `report_index`th line of the file's report: attached now, put in the plan's batch
    /// (with multi links), or unavailable, and why.
    fn probe_state(
        &mut self,
        path: &Path,
        plan: &mut FilePlan,
        (symbol, offset): (&'static str, Option<u64>),
        probe: &registry::CallProbe,
        report_index: usize,
    ) -> ProbeState {
        let Some(offset) = offset else {
            return ProbeState::Unavailable {
                reason: format!("{} does not export {symbol}", path.display()),
            };
        };
        if let Some(first) = plan.probed.get(&offset) {
            return ProbeState::Unavailable {
                reason: format!("the same function as {first}, probed once"),
            };
        }
        if self.multi {
            plan.probed.insert(offset, symbol);
            plan.batch.push(BatchedProbe {
                offset,
                cookie: probe.cookie().0,
                report_index,
                with_return: !probe.at_entry(),
            });
            return ProbeState::Attached;
        }
        match self.attach_call(path, offset, probe.cookie().0, !probe.at_entry()) {
            Ok(()) => {
                plan.probed.insert(offset, symbol);
                ProbeState::Attached
            }
            Err(error) => ProbeState::Unavailable {
                reason: short_reason(&crate::error::chain(&error)),
            },
        }
    }

    /// Attaches the call programs to every probe of `batch` in `path` with one multi link
    /// each; if the kernel refuses the whole, each offset alone, to find which it refuses.
    /// Returns (report index, reason) for each offset left unattached.
    fn attach_batch(&mut self, path: &Path, batch: &[BatchedProbe]) -> Vec<(usize, String)> {
        if batch.is_empty() {
            return Vec::new();
        }
        if let Ok(links) = self.attach_multi(path, batch) {
            self.multi_links.extend(links);
            return Vec::new();
        }
        let mut refused = Vec::new();
        for one in batch {
            match self.attach_multi(path, std::slice::from_ref(one)) {
                Ok(links) => self.multi_links.extend(links),
                Err(error) => {
                    refused.push((one.report_index, short_reason(&crate::error::chain(&error))))
                }
            }
        }
        refused
    }

    /// The entry link for every probe of `batch` in `path`, and the return link for those
    /// that have one: all, or none.
    fn attach_multi(
        &mut self,
        path: &Path,
        batch: &[BatchedProbe],
    ) -> Result<Vec<std::os::fd::OwnedFd>, TracerError> {
        use std::os::fd::AsFd as _;
        let mut link = |name: &'static str, ret: bool| -> Result<_, TracerError> {
            let (offsets, cookies): (Vec<u64>, Vec<u64>) = batch
                .iter()
                .filter(|probe| !ret || probe.with_return)
                .map(|probe| (probe.offset, probe.cookie))
                .unzip();
            let program = program(&mut self.ebpf, name)?;
            let fd = program.fd().map_err(|source| TracerError::Program {
                program: name,
                source,
            })?;
            multi::attach(fd.as_fd(), path, &offsets, &cookies, ret).map_err(|source| {
                TracerError::Io {
                    what: format!("attaching {name} to {} (uprobe_multi)", path.display()),
                    source,
                }
            })
        };
        let mut links = vec![link(ENTRY_PROGRAM, false)?];
        if batch.iter().any(|probe| probe.with_return) {
            links.push(link(RETURN_PROGRAM, true)?);
        }
        Ok(links)
    }

    fn attach_call(
        &mut self,
        path: &Path,
        offset: u64,
        cookie: u64,
        with_return: bool,
    ) -> Result<(), TracerError> {
        let programs: &[&'static str] = if with_return {
            &[ENTRY_PROGRAM, RETURN_PROGRAM]
        } else {
            &[ENTRY_PROGRAM]
        };
        for &name in programs {
            let point = UProbeAttachPoint {
                location: UProbeAttachLocation::AbsoluteOffset(offset),
                cookie: Some(cookie),
            };
            let link = program(&mut self.ebpf, name)?
                .attach(point, path, UProbeScope::AllProcesses)
                .map_err(|source| TracerError::Program {
                    program: name,
                    source,
                })?;
            self.links.push((name, link));
        }
        Ok(())
    }

    /// Detaches every uprobe, so no event arrives after this returns and no process's return
    /// addresses are borrowed by uretprobes any more (the tracepoints and kprobes go when the
    /// programs are dropped).
    ///
    /// A perf-event uprobe link waits for the kernel on detach (about 75 ms per link measured
    /// here, serialised in the kernel: dropping links from 16 threads saved 10%), so a full
    /// registry took seconds; a `uprobe_multi` link waits once for all its offsets.
    pub fn detach_uprobes(&mut self) {
        // Each multi link's release waits for the kernel on its own (not under the lock perf
        // links take): closed from threads of their own, the waits overlap.
        std::thread::scope(|scope| {
            for link in self.multi_links.drain(..) {
                scope.spawn(move || drop(link));
            }
        });
        for (name, id) in self.links.drain(..) {
            if let Err(error) = program(&mut self.ebpf, name).and_then(|p| {
                p.detach(id).map_err(|source| TracerError::Program {
                    program: name,
                    source,
                })
            }) {
                tracing::warn!(error = %crate::error::chain(&error), "cannot detach a uprobe");
            }
        }
    }

    /// Every probe attach attempted so far.
    pub fn status(&self) -> &[ProbeStatus] {
        &self.status
    }

    /// Takes the ring buffer for reading; call once.
    pub fn take_events(&mut self) -> Result<RingBuf<MapData>, TracerError> {
        let map = self
            .ebpf
            .take_map(maps::EVENTS)
            .expect("the object defines EVENTS");
        RingBuf::try_from(map).map_err(|source| TracerError::Map {
            map: maps::EVENTS,
            source,
        })
    }

    /// The kernel side's loss counters, summed over CPUs.
    pub fn counters(&self) -> Result<KernelCounters, TracerError> {
        let map = self
            .ebpf
            .map(maps::COUNTERS)
            .expect("the object defines COUNTERS");
        let array = PerCpuArray::<_, u64>::try_from(map).map_err(|source| TracerError::Map {
            map: maps::COUNTERS,
            source,
        })?;
        let sum = |index: u32| -> Result<u64, TracerError> {
            let values = array.get(&index, 0).map_err(|source| TracerError::Map {
                map: maps::COUNTERS,
                source,
            })?;
            Ok(values.iter().sum())
        };
        Ok(KernelCounters {
            ringbuf_full: sum(counter::RINGBUF_FULL)?,
            pending_full: sum(counter::PENDING_FULL)?,
            host_ringbuf_full: sum(counter::HOST_RINGBUF_FULL)?,
            unread_copies: sum(counter::UNREAD_COPIES)?,
        })
    }
}

/// Whether a map error says the key was not there (aya gives the delete's ENOENT as a
/// syscall error).
fn is_missing_key(error: &aya::maps::MapError) -> bool {
    match error {
        aya::maps::MapError::KeyNotFound => true,
        aya::maps::MapError::SyscallError(error) => {
            error.io_error.raw_os_error() == Some(libc::ENOENT)
        }
        _ => false,
    }
}

/// Loads the two call programs: for `uprobe_multi` links where the kernel has them (6.6+,
/// unless `HOTPIN_PERF_UPROBES` is set, which benchmarks use to compare), else for perf-event
/// links. Returns whether they take multi links.
fn load_call_programs(ebpf: &mut Ebpf) -> Result<bool, TracerError> {
    let wanted = kernel::version(&kernel::release()).is_some_and(|v| v >= multi::SINCE)
        && std::env::var_os("HOTPIN_PERF_UPROBES").is_none();
    if wanted {
        let loaded = [ENTRY_PROGRAM, RETURN_PROGRAM]
            .into_iter()
            .try_for_each(|name| {
                program(ebpf, name)?
                    .load_multi()
                    .map_err(|source| TracerError::Program {
                        program: name,
                        source,
                    })
            });
        match loaded {
            Ok(()) => return Ok(true),
            Err(error) => {
                tracing::warn!(error = %crate::error::chain(&error), "uprobe_multi refused; one link per probe instead");
                for name in [ENTRY_PROGRAM, RETURN_PROGRAM] {
                    let _ = program(ebpf, name)?.unload();
                }
            }
        }
    }
    for name in [ENTRY_PROGRAM, RETURN_PROGRAM] {
        program(ebpf, name)?
            .load()
            .map_err(|source| TracerError::Program {
                program: name,
                source,
            })?;
    }
    Ok(false)
}

impl Drop for Probes {
    fn drop(&mut self) {
        self.detach_uprobes();
    }
}

fn program<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut UProbe, TracerError> {
    ebpf.program_mut(name)
        .expect("the object defines both programs")
        .try_into()
        .map_err(|source| TracerError::Program {
            program: name,
            source,
        })
}

/// An error for a one-line report: a verifier log is cut to its first line and its last lines,
/// where the verifier says why it refused.
fn short_reason(error: &str) -> String {
    let lines: Vec<&str> = error.lines().collect();
    if lines.len() <= 6 {
        return error.to_string();
    }
    format!(
        "{} [...] {}",
        lines[0],
        lines[lines.len() - 3..].join(" | ")
    )
}

/// Mounts tracefs where the kernel expects it if nothing is there (tracepoints need it; some
/// machines do not mount it at boot). Failure is left to the tracepoint attach to report.
/// Which of `wanted` the running kernel (or a loaded module) has, by /proc/kallsyms.
fn kernel_functions<'a>(wanted: impl Iterator<Item = &'a str>) -> HashSet<&'a str> {
    let wanted: Vec<&str> = wanted.collect();
    let Ok(text) = std::fs::read_to_string("/proc/kallsyms") else {
        return HashSet::new();
    };
    text.lines()
        .filter_map(|line| line.split_whitespace().nth(2))
        .filter_map(|name| wanted.iter().find(|w| **w == name).copied())
        .collect()
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

    use super::*;

    /// The user side opens maps by the names in `tracer_common::maps`; the kernel side names
    /// each map by its static. Every shared name must be a map of the object this crate
    /// embeds (needs no BPF: the object is only read).
    #[test]
    fn every_shared_map_name_is_a_map_of_the_object() {
        let file = object::File::parse(EBPF_OBJECT).expect("the embedded eBPF object parses");
        let maps_section = file
            .section_by_name("maps")
            .expect("the object has a maps section")
            .index();
        let names: Vec<&str> = file
            .symbols()
            .filter(|symbol| symbol.section_index() == Some(maps_section))
            .filter_map(|symbol| symbol.name().ok())
            .collect();
        for name in maps::ALL {
            assert!(
                names.contains(&name),
                "{name} is not a map of the object: {names:?}"
            );
        }
    }
}
