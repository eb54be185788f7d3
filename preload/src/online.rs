//! Auto mode's knowledge of the program, kept under the state's lock: every block at or
//! above the floor with its windows' heat and whether each is pinned, the budget, the
//! recycled groups, and the record of every judged block written as a history at exit. The
//! rules (when a window repays pinning, how dense it is, what the budget keeps) are
//! `hotpin::online`'s; the CUDA calls they lead to are made by `state`, outside the lock.

use std::{collections::BTreeMap, path::Path, time::Instant};

use hotpin::{
    online::{self, Admission, Budget, Groups, Heat, Online},
    policy::SiteKey,
};
use hotpin_history::{
    cost::CostModel,
    dump::Format,
    history::{AllocKind, CallSite, MemHistory, TransferStats},
    registry::CopyDirection,
};

/// Blocks recorded for the history, at most (a long-lived program's later blocks are
/// learned from but not written).
const MAX_LEARNED: usize = 200_000;
/// A window the budget refused (or let go) is weighed again after this many more copies of
/// it, or this long, whichever comes first: not at every copy.
const REWEIGH_COPIES: u64 = 4;
const REWEIGH_NS: u64 = 100_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pin {
    Pageable,
    /// Reserved in the budget, being registered by the thread that decided it.
    Registering,
    Pinned,
    /// CUDA refused it: never tried again.
    Failed,
}

#[derive(Debug)]
pub struct Window {
    pub start: usize,
    pub len: usize,
    pub heat: Heat,
    pub pin: Pin,
    refused_until_ns: u64,
    refused_until_copies: u64,
}

#[derive(Debug)]
pub struct Block {
    pub size: usize,
    pub site: SiteKey,
    /// A pinned request served pageable: its windows, pinned, are what the program asked
    /// for (not hidden from it).
    pub asked_pinned: bool,
    pub windows: Vec<Window>,
    learned: Option<usize>,
}

/// What the lock holder decided; carried out by `state` once the lock is let go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowRef {
    pub block: usize,
    pub start: usize,
    pub len: usize,
    pub asked_pinned: bool,
}

#[derive(Debug, Default)]
pub struct Decisions {
    pub pin: Vec<WindowRef>,
    pub unpin: Vec<WindowRef>,
}

struct Learned {
    site: SiteKey,
    size: u64,
    asked_pinned: bool,
    alloc_ns: u64,
    free_ns: Option<u64>,
    stats: TransferStats,
}

pub struct Learner {
    pub online: Online,
    pub budget: Budget,
    pub blocks: BTreeMap<usize, Block>,
    groups: Groups<SiteKey>,
    learned: Vec<Learned>,
    started: Instant,
    pub refusals: u64,
}

impl Learner {
    pub fn new(model: CostModel, budget: Option<u64>) -> Self {
        Self {
            online: Online::new(model),
            budget: Budget::new(budget),
            blocks: BTreeMap::new(),
            groups: Groups::new(),
            learned: Vec::new(),
            started: Instant::now(),
            refusals: 0,
        }
    }

    pub fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// A new block at `ptr`; `pinned`: registered whole already (at birth, or from the
    /// cache), its bytes taken from the budget by the caller.
    pub fn track(
        &mut self,
        ptr: usize,
        size: usize,
        site: &SiteKey,
        asked_pinned: bool,
        pinned: bool,
    ) {
        let now = self.now_ns();
        if let Some(old) = self.blocks.remove(&ptr) {
            // Its free was not seen (a block libc reused): nothing of it is pinned by us.
            drop(old);
        }
        let learned = (self.learned.len() < MAX_LEARNED).then(|| {
            self.learned.push(Learned {
                site: site.clone(),
                size: size as u64,
                asked_pinned,
                alloc_ns: now,
                free_ns: None,
                stats: TransferStats::default(),
            });
            self.learned.len() - 1
        });
        let windows = if pinned {
            vec![(ptr, size)]
        } else {
            online::windows(ptr, size)
        };
        self.blocks.insert(
            ptr,
            Block {
                size,
                site: site.clone(),
                asked_pinned,
                windows: windows
                    .into_iter()
                    .map(|(start, len)| Window {
                        start,
                        len,
                        heat: Heat::default(),
                        pin: if pinned { Pin::Pinned } else { Pin::Pageable },
                        refused_until_ns: 0,
                        refused_until_copies: 0,
                    })
                    .collect(),
                learned,
            },
        );
    }

    /// Whether the next block of `size` bytes from `site` is to be pinned at birth.
    pub fn group_hot(&self, site: &SiteKey, size: usize) -> bool {
        self.groups.hot(&self.online, site, size as u64)
    }

    /// A block freed: forgotten, its saving retired into its group. Returns it (the caller
    /// unpins its pinned windows and gives their bytes back to the budget).
    pub fn untrack(&mut self, ptr: usize) -> Option<Block> {
        let block = self.blocks.remove(&ptr)?;
        let now = self.now_ns();
        let mut stats = TransferStats::default();
        for window in &block.windows {
            stats.add(&window.heat.stats);
        }
        let saving = self.online.model.copy_saving(&stats);
        self.groups.retire(&block.site, block.size as u64, saving);
        if let Some(entry) = block.learned.and_then(|i| self.learned.get_mut(i)) {
            entry.free_ns = Some(now);
        }
        Some(block)
    }

    /// The copy of `[start, start + len)` (`reads`: to the device) completed: heat counted
    /// for every window it touched, and what that decides.
    pub fn copied(&mut self, start: usize, len: usize, reads: bool, out: &mut Decisions) {
        let now = self.now_ns();
        let end = start.saturating_add(len.max(1));
        let Some((&base, block)) = self.blocks.range_mut(..end).next_back() else {
            return;
        };
        if base.saturating_add(block.size) <= start {
            return;
        }
        let mut candidates = Vec::new();
        let mut total = TransferStats::default();
        for (index, window) in block.windows.iter_mut().enumerate() {
            let (w_start, w_end) = (window.start, window.start + window.len);
            if w_end <= start || w_start >= end {
                continue;
            }
            let bytes = (w_end.min(end) - w_start.max(start)) as u64;
            let before = window.heat.stats;
            window.heat.copy(&self.online, bytes, reads, now);
            let mut delta = window.heat.stats;
            delta.transfers -= before.transfers;
            delta.h2d_count -= before.h2d_count;
            delta.d2h_count -= before.d2h_count;
            delta.h2d_bytes -= before.h2d_bytes;
            delta.d2h_bytes -= before.d2h_bytes;
            total.add(&delta);
            let reweigh = window.refused_until_ns <= now
                || window.refused_until_copies <= window.heat.stats.transfers;
            if window.pin == Pin::Pageable
                && reweigh
                && self.online.repays(&window.heat, window.len)
            {
                candidates.push(index);
            }
        }
        // The history counts the copy once per block, as the tracer does.
        total.transfers = total.transfers.min(1);
        total.h2d_count = total.h2d_count.min(1);
        total.d2h_count = total.d2h_count.min(1);
        if let Some(entry) = block.learned.and_then(|i| self.learned.get_mut(i)) {
            entry.stats.add(&total);
        }
        for index in candidates {
            self.consider(base, index, now, out);
        }
    }

    /// Weighs a window that repays pinning against the budget.
    fn consider(&mut self, base: usize, index: usize, now: u64, out: &mut Decisions) {
        let Some((len, density)) = self.blocks.get(&base).and_then(|b| {
            let w = b.windows.get(index)?;
            Some((w.len, self.online.density(&w.heat, w.len, now)))
        }) else {
            return;
        };
        let held: Vec<((usize, usize), f64, u64)> = if self.budget.limit.is_some() {
            self.blocks
                .iter()
                .flat_map(|(&b, block)| {
                    block
                        .windows
                        .iter()
                        .enumerate()
                        .filter(|(_, w)| w.pin == Pin::Pinned)
                        .map(move |(i, w)| ((b, i), w, block.asked_pinned))
                })
                .map(|(key, w, _)| (key, self.online.density(&w.heat, w.len, now), w.len as u64))
                .collect()
        } else {
            Vec::new()
        };
        let admission = self.budget.admit(len as u64, density, held);
        let Some(block) = self.blocks.get_mut(&base) else {
            return;
        };
        let asked_pinned = block.asked_pinned;
        let Some(window) = block.windows.get_mut(index) else {
            return;
        };
        let displaced = match admission {
            Admission::Admitted => Vec::new(),
            Admission::Displacing(keys) => keys,
            Admission::Refused => {
                window.refused_until_ns = now + REWEIGH_NS;
                window.refused_until_copies = window.heat.stats.transfers + REWEIGH_COPIES;
                self.refusals += 1;
                return;
            }
        };
        window.pin = Pin::Registering;
        out.pin.push(WindowRef {
            block: base,
            start: window.start,
            len: window.len,
            asked_pinned,
        });
        for (b, i) in displaced {
            if let Some(block) = self.blocks.get_mut(&b)
                && let Some(w) = block.windows.get_mut(i)
            {
                w.pin = Pin::Pageable;
                w.refused_until_ns = now + REWEIGH_NS;
                w.refused_until_copies = w.heat.stats.transfers + REWEIGH_COPIES;
                out.unpin.push(WindowRef {
                    block: b,
                    start: w.start,
                    len: w.len,
                    asked_pinned: block.asked_pinned,
                });
            }
        }
    }

    /// The registration of a window decided by [`Self::copied`] ended.
    pub fn registered(&mut self, window: &WindowRef, ok: bool) {
        let found = self
            .blocks
            .get_mut(&window.block)
            .and_then(|b| b.windows.iter_mut().find(|w| w.start == window.start));
        match found {
            Some(w) if w.pin == Pin::Registering => {
                w.pin = if ok { Pin::Pinned } else { Pin::Failed };
                if !ok {
                    self.budget.release(window.len as u64);
                }
            }
            // Freed meanwhile: the freeing thread found it registering and left it to us.
            _ => self.budget.release(window.len as u64),
        }
    }

    /// Writes what was learned as a history (`tracer report` and the next run read it):
    /// every judged block in allocation order, its call site, size and copies.
    pub fn write_history(&self, path: &Path) -> Result<(), String> {
        if !self.learned.iter().any(|entry| entry.stats.transfers > 0) {
            // A process that copied nothing (a helper the program ran, say) has nothing to
            // teach, and must not replace what the program wrote.
            return Ok(());
        }
        let mut history = MemHistory::new();
        let pid = std::process::id();
        let mut lives: Vec<(u64, u64)> = Vec::new();
        for (i, entry) in self.learned.iter().enumerate() {
            let site = history.intern_call_site(CallSite {
                module: entry.site.module.clone(),
                offset: entry.site.offset,
                symbol: None,
            });
            // Distinct made-up addresses: the history keys live blocks by address.
            let start = 0x1000_0000_0000u64 + (i as u64) * 0x1_0000_0000;
            let kind = if entry.asked_pinned {
                AllocKind::Pinned
            } else {
                AllocKind::Pageable
            };
            history.alloc(pid, start, entry.size, kind, Some(site), entry.alloc_ns);
            let s = &entry.stats;
            let at = entry.alloc_ns;
            if let Some(each) = s.h2d_bytes.checked_div(s.h2d_count) {
                history.transfers_on(
                    pid,
                    0,
                    start,
                    each,
                    CopyDirection::HostToDevice,
                    at,
                    s.h2d_count,
                    Default::default(),
                );
            }
            if let Some(each) = s.d2h_bytes.checked_div(s.d2h_count) {
                history.transfers_on(
                    pid,
                    start,
                    0,
                    each,
                    CopyDirection::DeviceToHost,
                    at,
                    s.d2h_count,
                    Default::default(),
                );
            }
            lives.push((start, entry.free_ns.unwrap_or(u64::MAX)));
        }
        for (start, free_ns) in lives {
            if free_ns != u64::MAX {
                history.free(pid, start, free_ns);
            }
        }
        hotpin_history::dump::write(&history, path, Format::from_path(path), false)
            .map_err(|e| format!("{:#}", anyhow::Error::from(e)))
    }
}
