//! Auto runs sharing one `--history` at once (the ranks of one job on a node): what each
//! learned is kept, not only the last writer's (#41 item 12; with 8 at once, the learning of
//! one survived). The file's stamp is taken when a run starts; at its end, under a lock on
//! the file's directory, a file another run wrote since is read, and what it learned that
//! this run did not (blocks of another call site, Python line or size) is carried into this
//! run's history before that is written. A run that started from the file and finds it
//! unchanged replaces it, as one run after another always did. Also how a learned block's
//! copies are put in a history ([`record_copies`]), for this run's blocks and those carried.

use std::{
    collections::HashSet,
    os::{fd::AsRawFd as _, unix::fs::MetadataExt as _},
    path::Path,
};

use hotpin_history::history::{AllocKind, Allocation, Copies, MemHistory, TransferStats};
use hotpin_registry::registry::CopyDirection;

/// What a file was: device, inode, modification time (ns) and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp(u64, u64, i128, u64);

/// `path`'s stamp; none where there is no file (or it cannot be looked at).
pub fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp(
        meta.dev(),
        meta.ino(),
        i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        meta.len(),
    ))
}

/// An exclusive lock on a file's directory while it is read and written over, released when
/// dropped; none where it cannot be taken (the write goes on without it, as before).
pub struct DirectoryLock(#[allow(dead_code)] Option<std::fs::File>);

pub fn lock_directory_of(path: &Path) -> DirectoryLock {
    let directory = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    DirectoryLock(std::fs::File::open(directory).ok().filter(|dir| {
        // SAFETY: flock on a descriptor this function owns; released when it is closed.
        unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX) == 0 }
    }))
}

/// A block's identity across runs: its call site, its Python lines, its size.
type Key = (Option<(String, u64)>, Vec<(String, u64)>, u64);

fn key(history: &MemHistory, block: &Allocation) -> Key {
    let site = |id| {
        history
            .call_site(id)
            .map(|site| (site.module.clone(), site.offset))
    };
    (
        block.call_site.and_then(site),
        history
            .callers(block.id)
            .iter()
            .filter_map(|&id| site(id))
            .collect(),
        block.size,
    )
}

/// Made-up addresses of the blocks carried over, apart from those of this run's own.
const CARRIED_BASE: u64 = 0x4000_0000_0000;

/// Carries into `ours` the host blocks of `theirs` whose identity `ours` has none of, with
/// their call sites, Python lines, copies and frees, under their own processes. Returns how
/// many were carried.
pub fn keep_theirs(ours: &mut MemHistory, theirs: &MemHistory) -> usize {
    let known: HashSet<Key> = ours
        .allocations()
        .iter()
        .map(|block| key(ours, block))
        .collect();
    let mut carried = 0u64;
    for block in theirs.allocations() {
        if !matches!(block.kind, AllocKind::Pageable | AllocKind::Pinned)
            || known.contains(&key(theirs, block))
        {
            continue;
        }
        let start = CARRIED_BASE + carried * 0x1_0000_0000;
        carried += 1;
        let site = block
            .call_site
            .and_then(|id| theirs.call_site(id))
            .cloned()
            .map(|site| ours.intern_call_site(site));
        let id = ours.alloc(
            block.pid,
            start,
            block.size,
            block.kind,
            site,
            block.alloc_ns,
        );
        let callers = theirs
            .callers(block.id)
            .iter()
            .filter_map(|&caller| theirs.call_site(caller).cloned())
            .map(|site| ours.intern_call_site(site))
            .collect();
        ours.record_callers(id, callers);
        record_copies(
            ours,
            block.pid,
            start,
            &block.stats,
            block.stats.first_transfer_ns.unwrap_or(block.alloc_ns),
        );
        if let Some(free_ns) = block.free_ns {
            ours.free(block.pid, start, free_ns);
        }
        if !ours.meta().pids.contains(&block.pid) {
            ours.meta_mut().pids.push(block.pid);
        }
    }
    carried as usize
}

/// Puts `stats`' copies, by direction, on process `pid`'s block at the made-up address
/// `start` of `history`, as one run of copies each way at `ts_ns`.
pub(crate) fn record_copies(
    history: &mut MemHistory,
    pid: u32,
    start: u64,
    stats: &TransferStats,
    ts_ns: u64,
) {
    for (count, bytes, direction, dst, src) in [
        (
            stats.h2d_count,
            stats.h2d_bytes,
            CopyDirection::HostToDevice,
            0,
            start,
        ),
        (
            stats.d2h_count,
            stats.d2h_bytes,
            CopyDirection::DeviceToHost,
            start,
            0,
        ),
    ] {
        if let Some(each) = bytes.checked_div(count) {
            history.transfers_on(Copies {
                pid,
                dst,
                src,
                bytes: each,
                direction,
                ts_ns,
                count,
                queue: Default::default(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hotpin_history::history::CallSite;

    fn run(pid: u32, size: u64, line: u64) -> MemHistory {
        let mut history = MemHistory::new();
        let site = history.intern_call_site(CallSite {
            module: "libc10.so".into(),
            offset: 0x8982b,
            symbol: None,
        });
        let python = history.intern_call_site(CallSite {
            module: "python:loop.py".into(),
            offset: line,
            symbol: Some("<module>".into()),
        });
        let id = history.alloc(pid, 0x1000, size, AllocKind::Pageable, Some(site), 1);
        history.record_callers(id, vec![python]);
        history.transfers_on(Copies {
            pid,
            dst: 0,
            src: 0x1000,
            bytes: size,
            direction: CopyDirection::HostToDevice,
            ts_ns: 2,
            count: 30,
            queue: Default::default(),
        });
        history
    }

    #[test]
    fn what_another_run_learned_and_this_one_did_not_is_kept_once() {
        let mut ours = run(1, 8 << 20, 9);
        // Another line, another size: kept, with its copies and its line.
        assert_eq!(keep_theirs(&mut ours, &run(2, 4 << 20, 12)), 1);
        // What this run knows already: not doubled.
        assert_eq!(keep_theirs(&mut ours, &run(3, 8 << 20, 9)), 0);
        assert_eq!(ours.allocations().len(), 2);
        let kept = &ours.allocations()[1];
        assert_eq!((kept.pid, kept.size), (2, 4 << 20));
        assert_eq!(kept.stats.h2d_count, 30);
        assert_eq!(kept.stats.h2d_bytes, 30 * (4 << 20));
        let line = ours.callers(kept.id)[0];
        assert_eq!(ours.call_site(line).map(|s| s.offset), Some(12));
        assert_eq!(ours.meta().pids, vec![2]);
    }
}
