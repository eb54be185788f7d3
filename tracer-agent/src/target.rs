//! The traced process as `/proc` shows it: its memory map, the CUDA libraries in it, and call
//! sites as module + offset.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use hotpin_history::maps::ProcessMaps;

use crate::{error::TracerError, probes::symbols::FunctionIndex};
use hotpin_history::history::CallSite;
use hotpin_registry::events::RawSite;

/// The memory map of `pid`, or an error that says the process is gone.
pub fn read_maps(pid: u32) -> Result<ProcessMaps, TracerError> {
    ProcessMaps::read(pid).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            TracerError::NoSuchProcess { pid }
        } else {
            TracerError::Io {
                what: format!("reading /proc/{pid}/maps"),
                source,
            }
        }
    })
}

/// Whether a file's name says it may be a library the tracer probes: the CUDA runtime
/// (`libcudart.so*`), the driver (`libcuda.so*`), hotpin's allocator (`libhotpin*`) or libc
/// (`libc.so*`, probed with `--libc-malloc` only). What it really carries is told by its
/// symbols (`Probes::attach_file`).
pub fn is_candidate_name(path: &str) -> bool {
    is_cuda_library_name(path) || file_name(path).starts_with("libc.so")
}

/// Whether a file's name says it is a CUDA runtime, a CUDA driver or hotpin's library: what
/// makes a process a CUDA process.
pub fn is_cuda_library_name(path: &str) -> bool {
    let name = file_name(path);
    name.starts_with("libcudart.so")
        || name.starts_with("libcuda.so")
        || name.starts_with("libhotpin")
}

fn file_name(path: &str) -> &str {
    Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("")
}

/// The command line of `pid` (its arguments, the program's name first), if it still runs.
pub fn command_line(pid: u32) -> Option<Vec<String>> {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        bytes
            .split(|&b| b == 0)
            .filter(|arg| !arg.is_empty())
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect(),
    )
}

/// The path under which this tracer can open a file the target maps: through
/// `/proc/PID/root`, so a process in another mount namespace (a container) works too.
/// When the file there is the one this tracer sees at `path` itself (the same mount
/// namespace), that path: it outlives the process.
pub fn host_path(pid: u32, path: &str) -> PathBuf {
    use std::os::unix::fs::MetadataExt as _;
    let through_root = PathBuf::from(format!("/proc/{pid}/root{path}"));
    match (std::fs::metadata(&through_root), std::fs::metadata(path)) {
        (Ok(theirs), Ok(ours)) if (theirs.dev(), theirs.ino()) == (ours.dev(), ours.ino()) => {
            PathBuf::from(path)
        }
        (Ok(_), _) => through_root,
        (Err(_), _) => PathBuf::from(path),
    }
}

/// Where the heap (`[heap]` in /proc/PID/maps) of `pid` starts, if it has one now.
pub fn heap_start(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let line = text.lines().find(|line| line.ends_with("[heap]"))?;
    let (start, _) = line.split_once('-')?;
    u64::from_str_radix(start, 16).ok()
}

/// Whether process `pid` is gone or a zombie (it runs no more; its parent has not reaped it).
/// A leader that ended with `pthread_exit` is a zombie too while its other threads run: that
/// process has not exited.
pub fn has_exited(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // The state follows the command name in parentheses, which may itself hold ") ".
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next());
    let threads = || std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |dir| dir.count());
    matches!(state, Some('Z' | 'X')) && threads() <= 1
}

/// The files of `pid` worth examining for probes: its executable (which may carry the CUDA
/// runtime or hotpin statically, as nvcc's default does for the runtime) and the mapped files
/// named like a CUDA library or hotpin.
pub fn candidate_files(pid: u32) -> Result<Vec<PathBuf>, TracerError> {
    Ok(candidate_files_in(pid, &read_maps(pid)?))
}

/// [`candidate_files`] from the memory map the caller read already.
pub fn candidate_files_in(pid: u32, maps: &ProcessMaps) -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from(format!("/proc/{pid}/exe"))];
    files.extend(
        maps.files()
            .filter(|p| is_candidate_name(p))
            .map(|p| host_path(pid, p)),
    );
    files
}

/// Turns call sites the kernel could only give as addresses into (build id, file offset)
/// while the process still exists, keeping each process's last memory map so that events
/// read after it exited still resolve.
#[derive(Debug, Default)]
pub struct AddressSites {
    maps: HashMap<u32, ProcessMaps>,
    build_ids: HashMap<String, Option<[u8; 20]>>,
    /// Build ids of allocator interposers, whose frames never name a call site.
    interposers: Vec<[u8; 20]>,
}

impl AddressSites {
    pub fn new(interposers: Vec<[u8; 20]>) -> Self {
        Self {
            interposers,
            ..Self::default()
        }
    }

    /// Whether `site` lies in an interposer.
    pub fn is_interposer(&self, site: &RawSite) -> bool {
        matches!(site, RawSite::BuildId { build_id, .. } if self.interposers.contains(build_id))
    }

    pub fn to_build_id(&mut self, pid: u32, addr: u64) -> Option<RawSite> {
        let known = self
            .maps
            .get(&pid)
            .is_some_and(|m| m.module_offset(addr).is_some());
        if !known && let Ok(maps) = ProcessMaps::read(pid) {
            self.maps.insert(pid, maps);
        }
        let (module, offset) = self.maps.get(&pid)?.module_offset(addr)?;
        let build_id = *self.build_ids.entry(module.to_string()).or_insert_with(|| {
            let id = hotpin_history::store::read_elf_build_id(&host_path(pid, module))
                .ok()
                .flatten()?;
            id.try_into().ok()
        });
        Some(RawSite::BuildId {
            build_id: build_id?,
            offset,
        })
    }

    /// Drops the map kept of `pid` (it exited, and its events were read).
    pub fn forget(&mut self, pid: u32) {
        self.maps.remove(&pid);
    }
}

/// Turns the call sites the kernel resolved into module paths and function names.
///
/// The kernel gives (build id, file offset). The module with that build id is found among the
/// files the traced processes map (their maps are read when a build id is new, and the files
/// seen are remembered, so a process that has exited resolves too when its modules were seen
/// before); failing that, the module is named `build-id:<hex>`, which still identifies it.
#[derive(Debug, Default)]
pub struct CallSiteResolver {
    /// Files known, by build id: the name shown, where to open it, and its symbols once a call
    /// site has needed them.
    by_build_id: HashMap<Vec<u8>, KnownModule>,
    /// Files whose build id was read already (so each is read once), by the name shown.
    seen_files: HashMap<String, Option<Vec<u8>>>,
    /// Each process's file mappings as last read, and when: frames the kernel gave as
    /// addresses are placed with them. Reading `/proc/PID/maps` for every such frame (a
    /// Python program's ctypes calls have one in anonymous memory under every allocation)
    /// took most of the agent's time, and the 2 cores it shares with the program.
    maps: HashMap<u32, (ProcessMaps, Instant)>,
    /// Build ids that learning their process's files did not find, and when: not looked for
    /// again within [`MAPS_KEPT`].
    missing: HashMap<Vec<u8>, Instant>,
}

/// How long a process's mappings as read place an address in a file. An address in no file
/// reads them again after [`MAPS_FRESH`] (a library mapped since).
const MAPS_KEPT: Duration = Duration::from_secs(1);
const MAPS_FRESH: Duration = Duration::from_millis(50);
/// Missing build ids kept before they are all forgotten.
const MISSING_KEPT: usize = 4096;

#[derive(Debug)]
struct KnownModule {
    name: String,
    /// Where to open it, through the processes that mapped it last, latest first: a
    /// process's /proc/PID/root path goes with the process.
    paths: Vec<PathBuf>,
    /// The file's length: a frame past it is a walk gone wrong.
    len: u64,
    /// Loaded when a call site first needs them; a file that cannot be opened now is tried
    /// again next time.
    symbols: Option<FunctionIndex>,
}

/// Paths kept per file.
const PATHS_KEPT: usize = 4;

impl CallSiteResolver {
    pub fn new() -> Self {
        Self::default()
    }

    /// Learns the build ids of every file `pid` maps now.
    pub fn learn_process(&mut self, pid: u32) {
        if let Ok(maps) = ProcessMaps::read(pid) {
            let files: Vec<String> = maps.files().map(str::to_string).collect();
            for file in files {
                self.learn_file(&host_path(pid, &file), &file);
            }
        }
    }

    /// `pid` exited, and its records were applied: its mappings as read are dropped.
    pub fn forget(&mut self, pid: u32) {
        self.maps.remove(&pid);
    }

    /// The file and offset `addr` is at in `pid`, from its mappings as read last if they are
    /// recent enough ([`MAPS_KEPT`], [`MAPS_FRESH`]), else read now.
    fn place(&mut self, pid: u32, addr: u64) -> Option<(String, u64)> {
        let now = Instant::now();
        if let Some((maps, read)) = self.maps.get(&pid) {
            let age = now.saturating_duration_since(*read);
            if age < MAPS_KEPT {
                if let Some((module, offset)) = maps.module_offset(addr) {
                    return Some((module.to_string(), offset));
                }
                if age < MAPS_FRESH {
                    return None;
                }
            }
        }
        let maps = ProcessMaps::read(pid).unwrap_or_default();
        let found = maps
            .module_offset(addr)
            .map(|(module, offset)| (module.to_string(), offset));
        self.maps.insert(pid, (maps, now));
        found
    }

    /// Drops the symbol tables loaded to name call sites (a large library's is hundreds of
    /// MiB): the daemon does so when no run is left, and loads them again when one needs them.
    pub fn release_symbols(&mut self) {
        for module in self.by_build_id.values_mut() {
            module.symbols = None;
        }
    }

    /// Learns the build id of a file (shown as `name`).
    pub fn learn_file(&mut self, path: &Path, name: &str) {
        if let Some(known) = self.seen_files.get(name) {
            // Known already, maybe through a process that exits before the symbols are
            // needed: open it through this one too.
            if let Some(module) = known.as_ref().and_then(|id| self.by_build_id.get_mut(id))
                && module.paths.first().is_none_or(|first| first != path)
            {
                module.paths.retain(|p| p != path);
                module.paths.insert(0, path.to_path_buf());
                module.paths.truncate(PATHS_KEPT);
            }
            return;
        }
        let build_id = hotpin_history::store::read_elf_build_id(path)
            .ok()
            .flatten();
        self.seen_files.insert(name.to_string(), build_id.clone());
        if let Some(id) = build_id {
            let module = KnownModule {
                name: name.to_string(),
                paths: vec![path.to_path_buf()],
                len: std::fs::metadata(path).map_or(0, |m| m.len()),
                symbols: None,
            };
            self.by_build_id.insert(id, module);
        }
    }

    /// A caller's frame as a call site, or `None` where the frame-pointer walk went wrong (a
    /// frame of code built without frame pointers leaves garbage above it): an address in no
    /// mapped file, or an offset past the end of the file it names. The walk is cut there.
    pub fn resolve_caller(&mut self, pid: u32, frame: RawSite) -> Option<CallSite> {
        let site = self.resolve(pid, frame);
        if site.module == ANONYMOUS {
            return None;
        }
        if let RawSite::BuildId { build_id, offset } = frame
            && let Some(module) = self.by_build_id.get(&build_id[..])
            && module.len > 0
            && offset >= module.len
        {
            return None;
        }
        Some(site)
    }

    /// The call site of a call of `pid`.
    pub fn resolve(&mut self, pid: u32, site: RawSite) -> CallSite {
        match site {
            RawSite::Address(addr) => match self.place(pid, addr) {
                Some((module, offset)) => CallSite {
                    module,
                    offset,
                    symbol: None,
                },
                None => CallSite {
                    module: ANONYMOUS.into(),
                    offset: addr,
                    symbol: None,
                },
            },
            RawSite::BuildId { build_id, offset } => {
                let looked = |missing: &HashMap<Vec<u8>, Instant>| {
                    missing
                        .get(&build_id[..])
                        .is_some_and(|at| at.elapsed() < MAPS_KEPT)
                };
                if !self.by_build_id.contains_key(&build_id[..]) && !looked(&self.missing) {
                    self.learn_process(pid);
                    if !self.by_build_id.contains_key(&build_id[..]) {
                        if self.missing.len() >= MISSING_KEPT {
                            self.missing.clear();
                        }
                        self.missing.insert(build_id.to_vec(), Instant::now());
                    }
                }
                match self.by_build_id.get_mut(&build_id[..]) {
                    Some(module) => {
                        if module.symbols.is_none() {
                            module.symbols = module
                                .paths
                                .iter()
                                .find_map(|path| FunctionIndex::read(path).ok());
                        }
                        CallSite {
                            module: module.name.clone(),
                            offset,
                            symbol: module.symbols.as_mut().and_then(|t| t.function_at(offset)),
                        }
                    }
                    None => CallSite {
                        module: format!("build-id:{}", hex(&build_id)),
                        offset,
                        symbol: None,
                    },
                }
            }
        }
    }
}

/// The module of a call site in no mapped file.
const ANONYMOUS: &str = "[anon]";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The real user id of `pid`.
pub fn process_uid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Processes running now that map a CUDA runtime, driver or hotpin library (every CUDA
/// program maps the driver, statically linked runtime or not), except this one.
pub fn running_cuda_processes() -> Vec<u32> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| read_maps(pid).is_ok_and(|maps| maps.files().any(is_cuda_library_name)))
        .collect();
    pids.sort_unstable();
    pids
}

#[cfg(test)]
mod tests {
    use hotpin_history::maps::parse_maps;

    use super::*;

    const MAPS: &str = "\
55d0c0a00000-55d0c0a02000 r--p 00000000 fe:01 1234  /usr/bin/app
55d0c0a02000-55d0c0a05000 r-xp 00002000 fe:01 1234  /usr/bin/app
7f0000000000-7f0000100000 rw-p 00000000 00:00 0
7f1000000000-7f1000200000 r-xp 00010000 fe:01 99   /opt/cuda lib/libcudart.so.13.0.48
7f2000000000-7f2000300000 r-xp 00000000 fe:01 98   /usr/lib/libcuda.so.580.159.04 (deleted)
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0    [stack]
garbage line
";

    #[test]
    fn parses_file_mappings_with_spaces_and_deleted_marks() {
        let maps = parse_maps(MAPS);
        assert_eq!(maps.len(), 4, "{maps:?}");
        assert_eq!(maps[2].path, "/opt/cuda lib/libcudart.so.13.0.48");
        assert_eq!(maps[3].path, "/usr/lib/libcuda.so.580.159.04");
        assert_eq!(maps[1].file_offset, 0x2000);
    }

    #[test]
    fn module_offset_is_the_file_offset_so_it_survives_aslr() {
        let maps = ProcessMaps::from_text(MAPS);
        assert_eq!(
            maps.module_offset(0x55d0c0a02010),
            Some(("/usr/bin/app", 0x2010))
        );
        assert_eq!(
            maps.module_offset(0x7f1000000100),
            Some(("/opt/cuda lib/libcudart.so.13.0.48", 0x10100))
        );
        assert_eq!(
            maps.module_offset(0x7f0000000010),
            None,
            "anonymous memory has no module"
        );
        assert_eq!(maps.module_offset(0x10), None);
    }

    #[test]
    fn a_caller_frame_in_no_file_or_past_its_end_cuts_the_walk() {
        let me = std::process::id();
        let exe = std::fs::read_link("/proc/self/exe").expect("this test's executable");
        let build_id: [u8; 20] = hotpin_history::store::read_elf_build_id(&exe)
            .ok()
            .flatten()
            .expect("rustc links a build id")
            .try_into()
            .expect("20 bytes");
        let len = std::fs::metadata(&exe).expect("its size").len();
        let mut resolver = CallSiteResolver::new();
        resolver.learn_process(me);
        let inside = RawSite::BuildId {
            build_id,
            offset: 0x1000,
        };
        assert!(resolver.resolve_caller(me, inside).is_some());
        let past_the_end = RawSite::BuildId {
            build_id,
            offset: len + 0x1000,
        };
        assert_eq!(resolver.resolve_caller(me, past_the_end), None);
        // An address in no mapping (the zero page is never mapped).
        assert_eq!(resolver.resolve_caller(me, RawSite::Address(0x10)), None);
    }

    #[test]
    fn candidate_names_are_the_cuda_libraries_and_hotpin() {
        assert!(is_candidate_name("/x/libcudart.so.13"));
        assert!(is_candidate_name("/x/libcuda.so.1"));
        assert!(is_candidate_name("/x/libhotpin.so"));
        assert!(!is_candidate_name("/x/libcudnn.so.9"));
        assert!(!is_candidate_name("/x/libcublas.so.13"));
    }

    #[test]
    fn a_missing_process_is_a_clear_error() {
        let error = read_maps(u32::MAX - 1).expect_err("no such pid");
        assert!(
            matches!(error, TracerError::NoSuchProcess { .. }),
            "{error}"
        );
    }

    /// Frames given as addresses are placed by the process's mappings as read last: a file's
    /// address by its file, an address in no file as anonymous (the walk is cut there), both
    /// without reading the maps again within a moment; a process forgotten is read again.
    #[test]
    fn addresses_are_placed_by_the_mappings_as_read_last() {
        let me = std::process::id();
        let mut resolver = CallSiteResolver::new();
        let code = addresses_are_placed_by_the_mappings_as_read_last as *const () as u64;
        let site = resolver.resolve(me, RawSite::Address(code));
        let exe = std::env::current_exe().expect("this test's binary");
        assert_eq!(Path::new(&site.module), exe, "{site:?}");
        let read = resolver.maps[&me].1;
        let heap = Box::new([0u8; 64]);
        let anonymous = RawSite::Address(heap.as_ptr() as u64);
        assert_eq!(resolver.resolve_caller(me, anonymous), None);
        assert_eq!(resolver.resolve(me, RawSite::Address(code)), site);
        assert_eq!(resolver.maps[&me].1, read, "read once within a moment");
        resolver.forget(me);
        assert!(!resolver.maps.contains_key(&me));
        assert_eq!(resolver.resolve(me, RawSite::Address(code)), site);
    }
}

/// A child process started and held before its program runs until [`PausedChild::resume`],
/// so probes can be in place before its first instruction.
///
/// The child is `/bin/sh` waiting to read one line from a pipe, then `exec`ing the program:
/// the pid stays the same. (A plain `pre_exec` hook cannot wait, because `Command::spawn`
/// itself waits for the child's `exec`.)
#[derive(Debug)]
pub struct PausedChild {
    pub child: std::process::Child,
    release: Option<std::fs::File>,
}

impl PausedChild {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lets the child `exec` its program.
    pub fn resume(&mut self) -> Result<(), TracerError> {
        use std::io::Write as _;
        if let Some(mut release) = self.release.take() {
            release
                .write_all(b"go\n")
                .map_err(|source| TracerError::Io {
                    what: format!("resuming child {}", self.child.id()),
                    source,
                })?;
        }
        Ok(())
    }
}

/// The fd on which the paused child reads its start signal.
const START_FD: i32 = 3;
/// Waits for the start line, closes the pipe, and becomes the program; exits 126 without
/// running it if the tracer went away first.
const TRAMPOLINE: &str = "read _ <&3 || exit 126; exec 3<&-; exec \"$0\" \"$@\"";

/// Spawns `program args...` held before it runs. Environment, working directory and stdio
/// come from `configure`, applied to the command that starts the child. Dropping the
/// [`PausedChild`] without resuming ends the child without running the program.
pub fn spawn_paused(
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
    configure: impl FnOnce(&mut std::process::Command),
) -> Result<PausedChild, TracerError> {
    use std::os::{fd::FromRawFd as _, unix::process::CommandExt as _};
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(TracerError::Io {
            what: "creating the start pipe".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    let (read_fd, write_fd) = (fds[0], fds[1]);
    let mut command = std::process::Command::new("/bin/sh");
    command.arg("-c").arg(TRAMPOLINE).arg(program).args(args);
    configure(&mut command);
    // SAFETY: between fork and exec the hook calls only dup2 and fcntl, which are
    // async-signal-safe. dup2 clears close-on-exec on the copy; when the pipe already is fd 3
    // there is no copy, so the flag is cleared directly. Only fd 3 reaches the shell.
    unsafe {
        command.pre_exec(move || {
            let ok = if read_fd == START_FD {
                libc::fcntl(START_FD, libc::F_SETFD, 0) >= 0
            } else {
                libc::dup2(read_fd, START_FD) >= 0
            };
            if ok {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let spawned = command.spawn();
    // SAFETY: the read end is ours and only the child needs it.
    unsafe { libc::close(read_fd) };
    // SAFETY: `write_fd` is an open descriptor nothing else owns.
    let release = unsafe { std::fs::File::from_raw_fd(write_fd) };
    let child = spawned.map_err(|source| TracerError::Io {
        what: format!("starting {}", program.to_string_lossy()),
        source,
    })?;
    Ok(PausedChild {
        child,
        release: Some(release),
    })
}

#[cfg(test)]
mod spawn_tests {
    use super::*;

    #[test]
    fn a_paused_child_runs_its_program_only_after_resume_and_keeps_its_pid() {
        let mut child = spawn_paused("sh".as_ref(), &["-c".into(), "echo $$".into()], |c| {
            c.stdout(std::process::Stdio::piped());
        })
        .expect("spawn");
        let pid = child.pid();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            child.child.try_wait().expect("poll").is_none(),
            "it waits for resume"
        );
        child.resume().expect("resume");
        let output = child.child.wait_with_output().expect("wait");
        assert!(output.status.success());
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            pid.to_string()
        );
    }

    #[test]
    fn a_child_never_resumed_does_not_run_its_program() {
        let child =
            spawn_paused("sh".as_ref(), &["-c".into(), "exit 0".into()], |_| {}).expect("spawn");
        let PausedChild { mut child, release } = child;
        drop(release);
        assert_eq!(child.wait().expect("wait").code(), Some(126));
    }
}
