//! The targets' address spaces as /proc/PID/maps shows them: memory that existed before the
//! tracer attached, and which side of a unified-addressing copy a pointer is on when no
//! allocation the history knows says so.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use hotpin_history::{
    MemHistory,
    maps::{MapLine, is_device_address, parse_map_lines, seed_kind},
};
use hotpin_registry::registry::CopyDirection;

/// CLOCK_MONOTONIC in ns, the clock of the kernel side's timestamps.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

fn read_lines(pid: u32) -> Option<Vec<MapLine>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let mut lines = parse_map_lines(&text);
    lines.sort_by_key(|l| l.start);
    Some(lines)
}

/// Seeds `history` with the memory `pid` has now (see [`seed_kind`]), marked pre-existing.
/// Returns how many mappings were seeded; a process that is gone seeds nothing.
pub fn seed_existing_memory(history: &mut MemHistory, pid: u32) -> usize {
    let Some(lines) = read_lines(pid) else {
        return 0;
    };
    let now = monotonic_ns();
    let mut seeded = 0;
    for line in &lines {
        if let Some(kind) = seed_kind(line) {
            history.seed(pid, line.start, line.end - line.start, kind, now);
            seeded += 1;
        }
    }
    seeded
}

/// How long a read of a process's map is trusted for a pointer it covers.
const FRESH: Duration = Duration::from_millis(200);

/// Each target's map, read when a copy's direction needs it and kept a short while: a range
/// the driver reserves or malloc grows changes the answer only for addresses in it.
#[derive(Default)]
pub struct AddressSpaces {
    maps: HashMap<u32, (Instant, Vec<MapLine>)>,
}

impl AddressSpaces {
    /// The direction of a copy from `src` to `dst` in `pid` as its address space tells it,
    /// if the process is still there and the map says.
    pub fn direction(&mut self, pid: u32, dst: u64, src: u64) -> Option<CopyDirection> {
        let fresh = self
            .maps
            .get(&pid)
            .is_some_and(|(read, _)| read.elapsed() < FRESH);
        if !fresh {
            let lines = read_lines(pid)?;
            self.maps.insert(pid, (Instant::now(), lines));
        }
        let lines = &self.maps.get(&pid)?.1;
        match (
            is_device_address(lines, dst)?,
            is_device_address(lines, src)?,
        ) {
            (true, false) => Some(CopyDirection::HostToDevice),
            (false, true) => Some(CopyDirection::DeviceToHost),
            (true, true) => Some(CopyDirection::DeviceToDevice),
            (false, false) => Some(CopyDirection::HostToHost),
        }
    }

    /// Drops what is kept of `pid`'s map (it exited).
    pub fn forget(&mut self, pid: u32) {
        self.maps.remove(&pid);
    }
}
