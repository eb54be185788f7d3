//! Auto mode's knowledge of the program, kept under the state's lock: every block at or
//! above the floor with its heat and whether it is pinned, the budget, the recycled groups,
//! and the record of every judged block written as a history at exit. The rules (when a
//! block repays pinning, how dense it is, what the budget keeps) are
//! `hotpin_policy::online`'s; the CUDA calls they lead to are made by `state`, outside the
//! lock.
//!
//! A block is pinned whole, or, when it is large and its copies touched only a small part of
//! it, in one registration of that part (the over-pinned program's dataset, of which one
//! slice is copied). CUDA refuses (`invalid argument`) a copy whose host range crosses a
//! registration's edge, so a copy that would cross the part's edge lets the part go first
//! (`state::unpin_straddled`); the part is then weighed again with that copy in it.

use std::{collections::BTreeMap, path::Path, sync::Arc, time::Instant};

use crate::python::PyFrame;
use hotpin_history::history::PYTHON_MODULE;
use hotpin_history::{
    dump::Format,
    history::{AllocKind, CallSite, MemHistory, TransferStats},
};
use hotpin_policy::{
    cost::CostModel,
    online::{Admission, Budget, Groups, Heat, Online, TRUST_IDLE_NS},
    set::SiteKey,
};

/// Blocks recorded for the history, at most (a long-lived program's later blocks are
/// learned from but not written).
const MAX_LEARNED: usize = 200_000;
/// A block the budget refused (or let go) is weighed again after this many more copies of
/// it, or this long, whichever comes first: not at every copy.
const REWEIGH_COPIES: u64 = 4;
const REWEIGH_NS: u64 = 100_000_000;
/// A part of a block is registered on its own only where the block is larger than this and
/// the part at most half of it; parts are rounded out to this alignment.
pub const PART_ABOVE: usize = hotpin_policy::online::LARGEST_AT_BIRTH;
const PART_ALIGN: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pin {
    Pageable,
    /// Reserved in the budget, being registered by the thread that decided it.
    Registering,
    Pinned,
    /// Let go (the budget, the node's arbiter, a copy crossing its edge), being unregistered
    /// by the thread that let it go: neither weighed again nor freed until it is, then
    /// pageable.
    Unpinning,
    /// CUDA refused it: never tried again.
    Failed,
}

/// A recycled group's identity: the call site and, in CPython, the innermost Python line
/// that made the block. One C++ call site makes every PyTorch CPU tensor; the line tells a
/// step's `.cpu()` result from a check's temporary of the same size, and it is the steadier
/// identity when the program changes (docs/benchmarks.md, "Is the Python line a steadier
/// identity than the C++ call site?").
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupKey {
    pub site: SiteKey,
    pub line: Option<(Arc<str>, u32)>,
}

impl GroupKey {
    /// The group of a block from `site` whose Python frames (innermost first) are `python`.
    pub fn new(site: &SiteKey, python: &[PyFrame]) -> Self {
        Self {
            site: site.clone(),
            line: python.first().map(|frame| (frame.file.clone(), frame.line)),
        }
    }
}

#[derive(Debug)]
pub struct Block {
    pub size: usize,
    pub group: GroupKey,
    /// A pinned request served pageable: pinned, it is what the program asked for (not
    /// hidden from it).
    pub asked_pinned: bool,
    pub heat: Heat,
    pub pin: Pin,
    refused_until_ns: u64,
    refused_until_copies: u64,
    learned: Option<usize>,
    /// The bytes its copies touched: `[lo, hi)`, absolute addresses (empty: none yet).
    copied_lo: usize,
    copied_hi: usize,
    /// Registered (or being registered) as this part alone: `(start, len)`.
    pub part: Option<(usize, usize)>,
    /// To be pinned at birth, but the budget or the node's lease had no room: kept warm
    /// (`shelf`) when freed, for the next of its group.
    pub no_room: bool,
    /// A copy that cannot be cut crossed its chunks (`chunks`): registered in one call from
    /// then on.
    pub one_call: bool,
    /// Pinned before its first copy on its group's trust, or served a pinned block on spec
    /// (`on_spec`), at this time (let go if it is not copied twice within `TRUST_IDLE_NS`).
    trusted_ns: Option<u64>,
    /// What the history says of its first copy (set at its birth).
    first_copy: FirstCopy,
    /// Served a pinned block from the cache though not judged worth pinning
    /// ([`Learner::on_spec`]).
    on_spec: bool,
    /// Registered whole, and a framework was told so (`hotpin_policy::callers`): it may go on
    /// using it as pinned memory, so it is never let go while the program holds it.
    pub exposed: bool,
    /// A framework was told it is pinned ([`Learner::expose`]).
    shown: bool,
    /// Held registered for a registration of the program's on top of it, pinned on demand
    /// ([`Learner::hold_for_program`]): exposed until the program lets its registration go.
    program_hold: bool,
    /// Claimed to be registered on demand, its bytes reserved in the budget already
    /// ([`Learner::room_on_demand`]): taken once, not again when the registration ends.
    reserved: bool,
}

impl Block {
    /// What pinning it would register, for a block at `base`: the part its copies touched
    /// (rounded out to [`PART_ALIGN`]), where the block is large and that part at most half
    /// of it; else the whole block.
    fn pin_range(&self, base: usize) -> (usize, usize) {
        let end = base + self.size;
        if self.size > PART_ABOVE && self.copied_hi > self.copied_lo {
            let lo = (self.copied_lo / PART_ALIGN * PART_ALIGN).max(base);
            let hi = self
                .copied_hi
                .div_ceil(PART_ALIGN)
                .saturating_mul(PART_ALIGN)
                .min(end);
            if (hi - lo) * 2 <= self.size {
                return (lo, hi - lo);
            }
        }
        (base, self.size)
    }

    /// The bytes it holds pinned (its part, or all of it).
    pub fn pinned_len(&self) -> usize {
        self.part.map_or(self.size, |(_, len)| len)
    }

    /// Widens what its copies touched by `[start, end)` (clamped to the block at `base`).
    fn touched(&mut self, base: usize, start: usize, end: usize) {
        let (lo, hi) = (start.max(base), end.min(base + self.size));
        if lo >= hi {
            return;
        }
        if self.copied_hi <= self.copied_lo {
            (self.copied_lo, self.copied_hi) = (lo, hi);
        } else {
            self.copied_lo = self.copied_lo.min(lo);
            self.copied_hi = self.copied_hi.max(hi);
        }
    }

    /// Not weighed against the budget again until a few more copies or a while have passed.
    fn set_aside(&mut self, now: u64) {
        self.refused_until_ns = now + REWEIGH_NS;
        self.refused_until_copies = self.heat.stats.transfers + REWEIGH_COPIES;
    }
}

/// What the history says of a pageable block's first copy, set at its birth.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FirstCopy {
    /// Nothing: pinned before it only where its group is trusted.
    #[default]
    OnTrust,
    /// The history found it cold (`Why::cold_by_history`): never pinned on its group's trust.
    Cold,
    /// The history found it handing its pinned block on (`Why::pinned_at_first_copy`):
    /// pinned before its first whole copy whatever its group's trust, where that copy repays
    /// it.
    HandsOn,
    /// The history pins it, and it was left pageable at birth to be registered whole at its
    /// first copy instead (`HOTPIN_AT_FIRST_COPY`, the default): memory the program writes
    /// first is then registered with its pages in.
    Whole,
}

/// Why the history had a block registered, counted once its registration succeeded.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Counted {
    /// Not because of the history's first-copy rule (counted elsewhere, if at all).
    #[default]
    Plain,
    /// At its first copy (`first_copy_pins`).
    FirstCopy,
    /// Ahead of its first copy, on the pinner thread (`ahead_pins`).
    Ahead,
}

/// A block to pin or unpin, decided under the lock; carried out by `state` once it is let go.
/// `[start, start + len)` is what is (un)registered: the whole block at `block`, or its part.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockRef {
    pub block: usize,
    pub start: usize,
    pub len: usize,
    pub asked_pinned: bool,
    /// A part of the block, not all of it.
    pub part: bool,
    /// To be registered in one call, never in chunks.
    pub one_call: bool,
    /// Its density when decided (what the node's arbiter weighs it by).
    pub score: f64,
    /// Which counter the registration counts in once it succeeded
    /// ([`Learner::registered`]).
    pub counted: Counted,
}

/// What [`Learner::claim_on_demand`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnDemand {
    /// Marked as being registered by the caller.
    Claimed,
    /// Being registered or let go by another thread.
    Busy,
    /// Not the learner's to mark (untracked, or pinned in part).
    Free,
}

#[derive(Debug, Default)]
pub struct Decisions {
    pub pin: Vec<BlockRef>,
    pub unpin: Vec<BlockRef>,
}

struct Learned {
    site: SiteKey,
    /// The Python frames that made it, innermost first (none outside CPython).
    python: Vec<PyFrame>,
    size: u64,
    asked_pinned: bool,
    alloc_ns: u64,
    free_ns: Option<u64>,
    stats: TransferStats,
}

impl Learned {
    /// Puts this block in `history` as process `pid`'s allocation at the made-up address
    /// `start`: its call site, its Python lines as its callers (`tracer report` shows them as
    /// `file.py:LINE in function`), its copies by direction, and its free.
    fn record_in(&self, history: &mut MemHistory, pid: u32, start: u64) {
        let site = history.intern_call_site(CallSite {
            module: self.site.module.clone(),
            offset: self.site.offset,
            symbol: None,
        });
        let kind = if self.asked_pinned {
            AllocKind::Pinned
        } else {
            AllocKind::Pageable
        };
        let id = history.alloc(pid, start, self.size, kind, Some(site), self.alloc_ns);
        let callers = self
            .python
            .iter()
            .map(|frame| {
                history.intern_call_site(CallSite {
                    module: format!("{PYTHON_MODULE}{}", frame.file),
                    offset: u64::from(frame.line),
                    symbol: Some(frame.function.to_string()),
                })
            })
            .collect();
        history.record_callers(id, callers);
        crate::shared_history::record_copies(history, pid, start, &self.stats, self.alloc_ns);
        // Addresses are never reused here, so a block may be closed at once.
        if let Some(free_ns) = self.free_ns {
            history.free(pid, start, free_ns);
        }
    }
}

pub struct Learner {
    pub online: Online,
    pub budget: Budget,
    pub blocks: BTreeMap<usize, Block>,
    groups: Groups<GroupKey>,
    learned: Vec<Learned>,
    started: Instant,
    pub refusals: u64,
    /// Blocks pinned before their first copy on their group's trust, not copied since.
    trusting: Vec<usize>,
    /// Of those, how many were pinned, and let go idle (the report's counters).
    pub trusted_pins: u64,
    /// Blocks pinned before their first copy because the history found them handing their
    /// pin on.
    pub hands_on_pins: u64,
    /// Blocks the history pins registered at their first copy rather than at birth
    /// (`HOTPIN_AT_FIRST_COPY`).
    pub first_copy_pins: u64,
    /// Blocks the history pins registered ahead, off the program's thread (`HOTPIN_AHEAD`).
    pub ahead_pins: u64,
    pub trusted_let_go: u64,
    /// Blocks served from the cache on spec let go idle.
    pub spares_let_go: u64,
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
            trusting: Vec::new(),
            trusted_pins: 0,
            hands_on_pins: 0,
            first_copy_pins: 0,
            ahead_pins: 0,
            trusted_let_go: 0,
            spares_let_go: 0,
        }
    }

    pub fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// A new block at `ptr`; `pinned`: registered already (at birth, or from the cache), its
    /// bytes taken from the budget by the caller. A block at `ptr` whose free was not seen
    /// (libc reused it) is replaced: nothing of it was pinned by us.
    pub fn track(
        &mut self,
        ptr: usize,
        size: usize,
        site: &SiteKey,
        asked_pinned: bool,
        pinned: bool,
        python: Vec<PyFrame>,
    ) {
        let group = GroupKey::new(site, &python);
        let learned = (self.learned.len() < MAX_LEARNED).then(|| {
            self.learned.push(Learned {
                site: site.clone(),
                python,
                size: size as u64,
                asked_pinned,
                alloc_ns: self.started.elapsed().as_nanos() as u64,
                free_ns: None,
                stats: TransferStats::default(),
            });
            self.learned.len() - 1
        });
        self.groups.born(&group, size as u64);
        let replaced = self.blocks.insert(
            ptr,
            Block {
                size,
                group,
                asked_pinned,
                heat: Heat::default(),
                pin: if pinned { Pin::Pinned } else { Pin::Pageable },
                refused_until_ns: 0,
                refused_until_copies: 0,
                learned,
                copied_lo: 0,
                copied_hi: 0,
                part: None,
                no_room: false,
                one_call: false,
                trusted_ns: None,
                first_copy: FirstCopy::OnTrust,
                on_spec: false,
                exposed: false,
                shown: false,
                program_hold: false,
                reserved: false,
            },
        );
        crate::regions::TRACKED.add(ptr, size);
        if let Some(old) = replaced {
            crate::regions::TRACKED.remove(ptr, old.size);
            let saving = self.online.model.copy_saving(&old.heat.stats);
            self.groups.retire(&old.group, old.size as u64, saving);
        }
    }

    /// What a block is worth per pinned byte now, over `len` bytes: its own density, or
    /// that of its place in a hot recycled group, whichever is more.
    fn worth(&self, block: &Block, len: usize, now: u64) -> f64 {
        let own = self.online.density(&block.heat, len, now);
        self.groups
            .place_density(&self.online, &block.group, block.size as u64, now)
            .map_or(own, |place| place.max(own))
    }

    /// The block at `ptr` was to be pinned at birth but found no room.
    pub fn no_room(&mut self, ptr: usize) {
        if let Some(block) = self.blocks.get_mut(&ptr) {
            block.no_room = true;
        }
    }

    /// What the history says of the first copy of the block at `ptr`.
    pub fn first_copy(&mut self, ptr: usize, first_copy: FirstCopy) {
        if let Some(block) = self.blocks.get_mut(&ptr) {
            block.first_copy = first_copy;
        }
    }

    /// Whether a freed pinned block of `block` bytes is wanted by a hot group that makes
    /// blocks again and again (`Groups::claims`).
    pub fn claims(&self, block: usize) -> bool {
        self.groups
            .claims(&self.online, block as u64, hotpin::pool::page_size())
    }

    /// Whether the next block of `size` bytes from `site` is to be pinned at birth.
    pub fn group_hot(&self, group: &GroupKey, size: usize) -> bool {
        self.groups.hot(&self.online, group, size as u64)
    }

    /// A block freed: forgotten, its saving retired into its group. Returns it (the caller
    /// unpins it if pinned and gives its bytes back to the budget).
    pub fn untrack(&mut self, ptr: usize) -> Option<Block> {
        let block = self.blocks.remove(&ptr)?;
        crate::regions::TRACKED.remove(ptr, block.size);
        let now = self.now_ns();
        let saving = self.online.model.copy_saving(&block.heat.stats);
        self.groups.retire(&block.group, block.size as u64, saving);
        if let Some(entry) = block.learned.and_then(|i| self.learned.get_mut(i)) {
            entry.free_ns = Some(now);
        }
        Some(block)
    }

    /// The copy of `[start, start + len)` (`reads`: to the device) completed: the heat of
    /// the block it touched counted, and what that decides. `measured`: the block whose first
    /// copy was timed (`before_first_copy` says which) and the seconds the copy took, where it
    /// was (its stream idle before it). False where it touched no block tracked (nothing
    /// counted).
    pub fn copied(
        &mut self,
        start: usize,
        len: usize,
        reads: bool,
        measured: Option<(usize, f64)>,
        out: &mut Decisions,
    ) -> bool {
        let now = self.now_ns();
        let end = start.saturating_add(len.max(1));
        let Some((&base, block)) = self.blocks.range_mut(..end).next_back() else {
            return false;
        };
        let block_end = base.saturating_add(block.size);
        if block_end <= start {
            return false;
        }
        let bytes = (block_end.min(end) - base.max(start)) as u64;
        block.touched(base, start, end);
        let one = block.heat.copy(&self.online, bytes, reads, now);
        if block.heat.stats.transfers == 1 {
            // The seconds this copy took, where it was this block's that was timed.
            let took = measured.and_then(|(timed, seconds)| (timed == base).then_some(seconds));
            let repaid = self.online.one_copy_repays(bytes, reads, block.size)
                || block.pin == Pin::Pageable
                    && took.is_some_and(|seconds| {
                        self.online
                            .measured_copy_repays(seconds, bytes, reads, block.size)
                    });
            if repaid {
                self.groups
                    .first_copy_repaid(&block.group, block.size as u64);
            } else if took.is_some() {
                // Timed, and its time says no as the model does: counted against the group's
                // trust, which a copy that waited on other work and read slow may have given.
                // A copy not timed (its stream busy) says nothing either way.
                self.groups
                    .first_copy_not_repaid(&block.group, block.size as u64);
            }
        }
        let saving = self.online.model.copy_saving(&one);
        self.groups
            .copied(&self.online, &block.group, block.size as u64, saving, now);
        if let Some(entry) = block.learned.and_then(|i| self.learned.get_mut(i)) {
            entry.stats.add(&one);
        }
        let reweigh = block.refused_until_ns <= now
            || block.refused_until_copies <= block.heat.stats.transfers;
        // A block the history pins, left for its first copy, is pinned whole after it (a copy
        // too small to be looked at before it was made: `before_first_copy`).
        let first_copy = std::mem::take(&mut block.first_copy) == FirstCopy::Whole;
        if block.pin == Pin::Pageable
            && (first_copy || reweigh && self.online.repays(&block.heat, block.pin_range(base).1))
        {
            let counted = if first_copy {
                Counted::FirstCopy
            } else {
                Counted::Plain
            };
            self.consider(base, now, out, counted, false);
        }
        if !self.trusting.is_empty() {
            self.let_idle_trust_go(now, out);
        }
        true
    }

    /// Before the copy of `[start, start + len)` (`reads`: to the device) is made: the block
    /// it copies whole for the first time is pinned first (decided into `out`, for the
    /// caller to register before it lets the copy go), where its group is trusted (or the
    /// history found it handing its pin on, and this copy alone repays the pin by the cost
    /// model) (`hotpin_policy::online`, "Trusted groups"). Returns the block whose first copy
    /// this is worth timing, if any: a pageable block whose group is not trusted, where the
    /// cost model says that one copy does not repay the pin. Its measured time may say
    /// otherwise ([`Learner::copied`]): the model is one machine's.
    pub fn before_first_copy(
        &mut self,
        start: usize,
        len: usize,
        reads: bool,
        out: &mut Decisions,
    ) -> Option<usize> {
        let (&base, block) = self.blocks.range(..=start).next_back()?;
        if block.first_copy == FirstCopy::Whole {
            // The history pins the whole block: any first copy of it pins it, before it.
            if start < base + block.size
                && block.pin == Pin::Pageable
                && block.heat.stats.transfers == 0
            {
                let now = self.now_ns();
                if self.consider(base, now, out, Counted::FirstCopy, false)
                    && let Some(block) = self.blocks.get_mut(&base)
                {
                    block.first_copy = FirstCopy::OnTrust;
                }
            }
            return None;
        }
        if start >= base + block.size
            || block.pin != Pin::Pageable
            || block.heat.stats.transfers != 0
            || block.first_copy == FirstCopy::Cold
        {
            return None;
        }
        let size = block.size;
        // A trusted group earned it with first copies of blocks of this size that each
        // repaid the pin, by the model or by their measured time.
        let trusted = self.groups.trusted(&block.group, size as u64);
        if !trusted && block.first_copy != FirstCopy::HandsOn {
            let bytes = len.min(base + size - start) as u64;
            return (!self.online.one_copy_repays(bytes, reads, size)).then_some(base);
        }
        // Copied whole: a slice would pin what it does not copy.
        if start != base
            || len < size
            || !(trusted || self.online.one_copy_repays(size as u64, reads, size))
        {
            return None;
        }
        let now = self.now_ns();
        if self.consider(base, now, out, Counted::Plain, false)
            && let Some(block) = self.blocks.get_mut(&base)
        {
            block.trusted_ns = Some(now);
            self.trusting.push(base);
            if block.first_copy == FirstCopy::HandsOn {
                self.hands_on_pins += 1;
            } else {
                self.trusted_pins += 1;
            }
        }
        None
    }

    /// From a history (`HOTPIN_AHEAD`), on the pinner thread shortly after the block of
    /// `size` bytes at `at` was born: a block left for its first copy (`FirstCopy::Whole`) or
    /// handing its pin on (`FirstCopy::HandsOn`), still pageable and not copied yet, is
    /// pinned now (decided into `out`), so that its first copy finds it registered. A block
    /// already copied, being registered, freed or pinned, a pinned request served pageable,
    /// or another block made at that address since (of another size) is left as it is.
    /// Counted once registered ([`Counted::Ahead`]). A block handing its pin on is not
    /// watched on trust here, as it is when pinned at its first copy (let go unless copied
    /// again within `TRUST_IDLE_NS`): pinned ahead of a first copy that comes seconds later
    /// (a model built before it runs), it would be let go first.
    pub fn ahead(&mut self, at: usize, size: usize, out: &mut Decisions) {
        let Some(block) = self.blocks.get(&at) else {
            return;
        };
        if block.size != size
            || block.asked_pinned
            || block.pin != Pin::Pageable
            || block.heat.stats.transfers != 0
            || !matches!(block.first_copy, FirstCopy::Whole | FirstCopy::HandsOn)
        {
            return;
        }
        // What the history says of its first copy is kept: let go before that copy (room made
        // for a registration on demand), it is pinned at that copy as without this. On the
        // pinner thread, at any time: no pinned request of the program's is displaced for it
        // (its unregistration would synchronize the context, maybe during a capture).
        let now = self.now_ns();
        self.consider(at, now, out, Counted::Ahead, true);
    }

    /// The block at `ptr` was served a pinned block from the cache though not judged worth
    /// pinning: watched as a block pinned on trust is, let go unless copied twice within
    /// `TRUST_IDLE_NS`.
    pub fn on_spec(&mut self, ptr: usize) {
        // Only copies look at the list: a program that allocates without copying must not
        // grow it, so entries whose block is gone or watched no more are dropped here too.
        let blocks = &self.blocks;
        self.trusting
            .retain(|at| blocks.get(at).is_some_and(|b| b.trusted_ns.is_some()));
        let now = self.now_ns();
        if let Some(block) = self.blocks.get_mut(&ptr) {
            block.trusted_ns = Some(now);
            block.on_spec = true;
            self.trusting.push(ptr);
        }
    }

    /// Lets go (into `out.unpin`) each block pinned on its group's trust that was not copied
    /// again within `TRUST_IDLE_NS`; forgets those copied again (they repaid) or gone.
    fn let_idle_trust_go(&mut self, now: u64, out: &mut Decisions) {
        let mut kept = Vec::with_capacity(self.trusting.len());
        for base in std::mem::take(&mut self.trusting) {
            let Some(block) = self.blocks.get_mut(&base) else {
                continue;
            };
            let Some(since) = block.trusted_ns else {
                continue;
            };
            if block.heat.stats.transfers > 1
                || !matches!(block.pin, Pin::Pinned | Pin::Registering)
            {
                block.trusted_ns = None;
                block.on_spec = false;
                continue;
            }
            if block.pin == Pin::Registering || now.saturating_sub(since) < TRUST_IDLE_NS {
                kept.push(base);
                continue;
            }
            block.trusted_ns = None;
            // Let go as a registration a copy would cross is, with no copy to widen it by.
            let on_spec = std::mem::take(&mut block.on_spec);
            if let Some(let_go) = self.let_crossed_go(base, base, 0, false) {
                if on_spec {
                    self.spares_let_go += 1;
                } else {
                    self.trusted_let_go += 1;
                }
                out.unpin.push(let_go);
            }
        }
        self.trusting = kept;
    }

    /// A copy of `[start, start + len)` is about to cross the edge of the part registered of
    /// the block at `base`: the part is let go (returned, for the caller to unregister) and
    /// what the copies touched widened by this one, so that it is weighed again with it.
    pub fn let_part_go(&mut self, base: usize, start: usize, len: usize) -> Option<BlockRef> {
        self.blocks.get(&base)?.part?;
        self.let_crossed_go(base, start, len, false)
    }

    /// A copy of `[start, start + len)` is about to cross an edge of the registration of the
    /// block at `base` (its part's edge; `chunks`: an edge between its chunks, the copy being
    /// one that cannot be cut there): the registration is let go (returned, for the caller to
    /// unregister), what the copies touched widened by this one, and the block weighed again
    /// later (after `chunks`, to be registered in one call).
    pub fn let_crossed_go(
        &mut self,
        base: usize,
        start: usize,
        len: usize,
        chunks: bool,
    ) -> Option<BlockRef> {
        let now = self.now_ns();
        let block = self.blocks.get_mut(&base)?;
        if block.pin != Pin::Pinned || block.exposed {
            return None;
        }
        let part = block.part.take();
        let (at, size) = part.unwrap_or((base, block.size));
        block.one_call |= chunks;
        block.touched(base, start, start.saturating_add(len));
        block.pin = Pin::Unpinning;
        block.set_aside(now);
        self.budget.release(size as u64);
        Some(BlockRef {
            block: base,
            start: at,
            len: size,
            asked_pinned: block.asked_pinned,
            part: part.is_some(),
            one_call: block.one_call,
            score: 0.0,
            counted: Counted::Plain,
        })
    }

    /// Weighs a block that repays pinning against the budget: true where that decided to pin
    /// it (into `out`, to be counted as `counted` once registered). `hidden_only`: displacing
    /// only blocks hidden from the program (not its pinned requests, whose unregistration
    /// synchronizes the context).
    fn consider(
        &mut self,
        base: usize,
        now: u64,
        out: &mut Decisions,
        counted: Counted,
        hidden_only: bool,
    ) -> bool {
        let Some((density, (start, len))) = self.blocks.get(&base).map(|b| {
            let range = b.pin_range(base);
            (self.worth(b, range.1, now), range)
        }) else {
            return false;
        };
        let held = self.held(now, hidden_only);
        let Some(block) = self.blocks.get_mut(&base) else {
            return false;
        };
        let displaced = match self.budget.admit(len as u64, density, held) {
            Admission::Admitted => Vec::new(),
            Admission::Displacing(keys) => keys,
            Admission::Refused => {
                block.set_aside(now);
                self.refusals += 1;
                return false;
            }
        };
        block.pin = Pin::Registering;
        let part = (start, len) != (base, block.size);
        block.part = part.then_some((start, len));
        out.pin.push(BlockRef {
            block: base,
            start,
            len,
            asked_pinned: block.asked_pinned,
            part,
            one_call: block.one_call,
            score: density,
            counted,
        });
        self.let_go(displaced, now, out);
        true
    }

    /// What the budget may let go to make room: the pinned blocks (or parts) the program was
    /// not shown pinned, each with its worth now and its bytes (none without a limit).
    /// `hidden_only`: not the program's pinned requests either (letting one go synchronizes
    /// the context, as the program may have copies of it in flight).
    fn held(&self, now: u64, hidden_only: bool) -> Vec<(usize, f64, u64)> {
        if self.budget.limit.is_none() {
            return Vec::new();
        }
        self.blocks
            .iter()
            .filter(|(_, b)| b.pin == Pin::Pinned && !b.exposed)
            .filter(|(_, b)| !(hidden_only && b.asked_pinned))
            .map(|(&at, b)| {
                let len = b.pinned_len();
                (at, self.worth(b, len, now), len as u64)
            })
            .collect()
    }

    /// The pinned blocks at `displaced`, displaced under the budget (their bytes let go from
    /// it already): to be unregistered (decided into `out`), weighed again later.
    fn let_go(&mut self, displaced: Vec<usize>, now: u64, out: &mut Decisions) {
        for at in displaced {
            if let Some(held) = self.blocks.get_mut(&at) {
                let (start, len) = held.part.unwrap_or((at, held.size));
                out.unpin.push(BlockRef {
                    block: at,
                    start,
                    len,
                    asked_pinned: held.asked_pinned,
                    part: held.part.is_some(),
                    one_call: held.one_call,
                    score: 0.0,
                    counted: Counted::Plain,
                });
                held.pin = Pin::Unpinning;
                held.part = None;
                held.set_aside(now);
            }
        }
    }

    /// Room under the budget for the block at `ptr`, claimed to be registered on demand
    /// ([`Self::claim_on_demand`]: a registration the program's use needs, which the budget
    /// cannot refuse), reserved until the registration ends ([`Self::pinned_on_demand`]), so
    /// that no other decision takes it meanwhile. Where the budget has none, the least dense
    /// of the blocks the learner pinned by its own choice and hid from the program (not shown
    /// to a framework, not a pinned request) are let go first (decided into `out`), so that
    /// the budget stays a ceiling. Where letting all of them go would not make room, none is,
    /// nothing is reserved, and the block is registered all the same (its bytes taken then).
    pub fn room_on_demand(&mut self, ptr: usize, out: &mut Decisions) {
        let Some(size) = self
            .blocks
            .get(&ptr)
            .filter(|b| b.pin == Pin::Registering && !b.reserved)
            .map(|b| b.size as u64)
        else {
            return;
        };
        let now = self.now_ns();
        let held = self.held(now, true);
        // Denser than anything held: the program's use comes before every choice of ours.
        let reserved = match self.budget.admit(size, f64::INFINITY, held) {
            Admission::Admitted => true,
            Admission::Displacing(displaced) => {
                self.let_go(displaced, now, out);
                true
            }
            Admission::Refused => false,
        };
        if let Some(block) = self.blocks.get_mut(&ptr) {
            block.reserved = reserved;
        }
    }

    /// The program is about to use the pinned request served pageable at `ptr` as only
    /// pinned memory can be used, and another thread is to register it for that: marked
    /// `Registering` (so that no decision of the learner's registers it too, and a free
    /// waits), unless it is being registered or let go already (`Busy`: the caller waits and
    /// asks again) or is not tracked, or pinned in part (`Free`: the caller goes on).
    pub fn claim_on_demand(&mut self, ptr: usize) -> OnDemand {
        match self.blocks.get_mut(&ptr) {
            Some(block) if matches!(block.pin, Pin::Registering | Pin::Unpinning) => OnDemand::Busy,
            Some(block) if matches!(block.pin, Pin::Pageable | Pin::Failed) => {
                block.pin = Pin::Registering;
                OnDemand::Claimed
            }
            _ => OnDemand::Free,
        }
    }

    /// The registration on demand of the block at `ptr` ended (`ok`: pinned, its bytes
    /// counted in the budget, and with `keep` held for the program: neither let go for the
    /// budget nor given back to the node's arbiter; else refused, `Failed`). `claimed`: marked
    /// `Registering` for it by [`Self::claim_on_demand`]; unclaimed (a skipped registration),
    /// only a pageable block is the caller's, not one the learner is registering itself.
    /// Whether the learner holds the block pinned now, by this registration (and so undoes it
    /// when the block is freed).
    pub fn pinned_on_demand(&mut self, ptr: usize, ok: bool, claimed: bool, keep: bool) -> bool {
        let Some(block) = self.blocks.get_mut(&ptr) else {
            return false;
        };
        let ours = if claimed {
            block.pin == Pin::Registering
        } else {
            matches!(block.pin, Pin::Pageable | Pin::Failed)
        };
        if !ours {
            return false;
        }
        let reserved = std::mem::take(&mut block.reserved);
        if ok {
            block.pin = Pin::Pinned;
            block.exposed |= keep;
            if !reserved {
                self.budget.take(block.size as u64);
            }
        } else if reserved {
            self.budget.release(block.size as u64);
        }
        if !ok && claimed {
            // CUDA refused it: as a refused registration of the learner's, not tried again.
            block.pin = Pin::Failed;
        }
        ok
    }

    /// Whether the block at `ptr` is tracked, `len` bytes long: a registration of that whole
    /// block may be held as the learner's.
    pub fn tracks_whole(&self, ptr: usize, len: usize) -> bool {
        self.blocks.get(&ptr).is_some_and(|block| block.size == len)
    }

    /// The program registered the pageable block at `ptr` itself (a skipped registration
    /// carried out on demand that the learner cannot hold: part of the block, or flags of
    /// its own): never the learner's to register or let go, as a refused one.
    pub fn registered_by_program(&mut self, ptr: usize) {
        if let Some(block) = self.blocks.get_mut(&ptr)
            && block.pin == Pin::Pageable
        {
            block.pin = Pin::Failed;
        }
    }

    /// A framework is to be told that the block registered at `start` (`len` bytes) is pinned:
    /// whether it may be, because the block is pinned whole (not a part, not being let go);
    /// if so it is exposed from now on.
    pub fn expose(&mut self, start: usize, len: usize) -> bool {
        match self.blocks.get_mut(&start) {
            Some(block)
                if block.pin == Pin::Pinned && block.part.is_none() && block.size == len =>
            {
                block.exposed = true;
                block.shown = true;
                true
            }
            _ => false,
        }
    }

    /// The block at `ptr`, pinned on demand under a registration of the program's
    /// ([`Self::pinned_on_demand`]), is held for the program's use until it lets that
    /// registration go ([`Self::program_let_go`]).
    pub fn hold_for_program(&mut self, ptr: usize) {
        if let Some(block) = self.blocks.get_mut(&ptr) {
            block.program_hold = true;
        }
    }

    /// The program unregistered its registration on top of the block at `ptr`: a hold for it
    /// ends, and the block may be let go for the budget again, unless a framework was told it
    /// is pinned (which may go on using it so).
    pub fn program_let_go(&mut self, ptr: usize) {
        if let Some(block) = self.blocks.get_mut(&ptr)
            && std::mem::take(&mut block.program_hold)
            && !block.shown
        {
            block.exposed = false;
        }
    }

    /// The tracked block holding `ptr` that is pageable now (start, size), not a pinned
    /// request served pageable (the program believes that one pinned): what a framework
    /// asking about `ptr` will copy through its own staging buffer.
    pub fn pageable_at(&self, ptr: usize) -> Option<(usize, usize)> {
        let (&base, block) = self.blocks.range(..=ptr).next_back()?;
        (block.pin == Pin::Pageable && !block.asked_pinned && base + block.size > ptr)
            .then_some((base, block.size))
    }

    /// The block at `base`, let go, is unregistered: pageable, to be weighed again.
    pub fn unpinned(&mut self, base: usize) {
        if let Some(block) = self.blocks.get_mut(&base)
            && block.pin == Pin::Unpinning
        {
            block.pin = Pin::Pageable;
        }
    }

    /// The registration of a block decided by [`Self::copied`] ended.
    pub fn registered(&mut self, block: &BlockRef, ok: bool) {
        match self.blocks.get_mut(&block.block) {
            Some(b) if b.pin == Pin::Registering => {
                if ok {
                    match block.counted {
                        Counted::Plain => {}
                        Counted::FirstCopy => self.first_copy_pins += 1,
                        Counted::Ahead => self.ahead_pins += 1,
                    }
                }
                b.pin = if ok { Pin::Pinned } else { Pin::Failed };
                if !ok {
                    b.part = None;
                    self.budget.release(block.len as u64);
                }
            }
            // Gone meanwhile (frees wait for a registration to end, so only when replaced).
            _ => self.budget.release(block.len as u64),
        }
    }

    /// A block decided by [`Self::copied`] is not pinned now (the node's arbiter did not
    /// lease it, or the pinner thread put it off): pageable again, weighed again after a few
    /// more copies or a while.
    pub fn put_off(&mut self, block: &BlockRef) {
        let now = self.now_ns();
        self.budget.release(block.len as u64);
        if let Some(b) = self.blocks.get_mut(&block.block)
            && b.pin == Pin::Registering
        {
            b.pin = Pin::Pageable;
            b.part = None;
            b.set_aside(now);
        }
    }

    /// The node's arbiter reclaims the pinned block (or part) registered at `start`: it is
    /// pageable again (returned, for the caller to unregister), weighed again later.
    pub fn give_back(&mut self, start: usize) -> Option<BlockRef> {
        let now = self.now_ns();
        let (base, len) = self.pinned_at(start)?;
        let block = self.blocks.get_mut(&base).filter(|b| !b.exposed)?;
        let part = block.part.take().is_some();
        block.pin = Pin::Unpinning;
        block.set_aside(now);
        self.budget.release(len as u64);
        Some(BlockRef {
            block: base,
            start,
            len,
            asked_pinned: block.asked_pinned,
            part,
            one_call: block.one_call,
            score: 0.0,
            counted: Counted::Plain,
        })
    }

    /// The block whose registration (whole, or its part) starts at `start`, whatever its
    /// state: its base and its state.
    pub fn registered_at(&self, start: usize) -> Option<(usize, Pin)> {
        let (&base, block) = self.blocks.range(..=start).next_back()?;
        let (at, _) = block.part.unwrap_or((base, block.size));
        (at == start).then_some((base, block.pin))
    }

    /// The block whose pinned registration (whole, or its part) starts at `start`: its base
    /// and the length registered.
    fn pinned_at(&self, start: usize) -> Option<(usize, usize)> {
        let (&base, block) = self.blocks.range(..=start).next_back()?;
        let (pin_start, len) = block.part.unwrap_or((base, block.size));
        (block.pin == Pin::Pinned && pin_start == start).then_some((base, len))
    }

    /// The density of the pinned block (or part) registered at each of `starts`, now.
    pub fn scores(&self, starts: &[u64]) -> Vec<(u64, f64)> {
        let now = self.now_ns();
        starts
            .iter()
            .filter_map(|&start| {
                let (base, len) = self.pinned_at(start as usize)?;
                Some((start, self.worth(self.blocks.get(&base)?, len, now)))
            })
            .collect()
    }

    /// What a block of `size` bytes from `site` pinned at birth is worth per byte: its
    /// place in its hot group (as [`Self::scores`] weighs a held one).
    pub fn birth_score(&self, group: &GroupKey, size: usize) -> f64 {
        self.groups
            .place_density(&self.online, group, size as u64, self.now_ns())
            .unwrap_or(0.0)
    }

    /// Writes what was learned as a history (`tracer report` and the next run read it):
    /// every judged block in allocation order, its call site, size and copies.
    /// `at_start`: the file's stamp when this run started; another run that wrote it since
    /// had what it learned and this run did not kept ([`crate::shared_history`]).
    pub fn write_history(
        &self,
        path: &Path,
        at_start: Option<crate::shared_history::Stamp>,
    ) -> Result<(), String> {
        if !self.learned.iter().any(|entry| entry.stats.transfers > 0) {
            // A process that copied nothing (a helper the program ran, say) has nothing to
            // teach, and must not replace what the program wrote.
            return Ok(());
        }
        let mut history = MemHistory::new();
        let pid = std::process::id();
        // Who learned it: the report names the command that acts on it.
        let meta = history.meta_mut();
        meta.tracer = format!("hotpin run (auto mode) {}", env!("CARGO_PKG_VERSION"));
        meta.pids = vec![pid];
        meta.command = std::env::args().collect();
        meta.started_unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| {
                d.as_secs().saturating_sub(self.started.elapsed().as_secs())
            });
        for (i, entry) in self.learned.iter().enumerate() {
            // Distinct made-up addresses: the history keys live blocks by address.
            let start = 0x1000_0000_0000u64 + (i as u64) * 0x1_0000_0000;
            entry.record_in(&mut history, pid, start);
        }
        let _alone = crate::shared_history::lock_directory_of(path);
        let now = crate::shared_history::stamp(path);
        if now.is_some() && now != at_start {
            let theirs = hotpin_history::dump::read(path).map_err(|e| {
                format!(
                    "another program wrote it while this one ran, and it is no history hotpin \
                     can read ({:#}): left as it is",
                    anyhow::Error::from(e)
                )
            })?;
            crate::shared_history::keep_theirs(&mut history, &theirs);
        }
        hotpin_history::dump::write(&history, path, Format::from_path(path), false)
            .map_err(|e| format!("{:#}", anyhow::Error::from(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks served on spec by a program that allocates and frees without copying (only
    /// copies look at the watch list): the list holds the blocks still watched, not one entry
    /// for every block ever served.
    #[test]
    fn blocks_served_on_spec_without_copies_do_not_pile_up_in_the_watch_list() {
        let mut learner = Learner::new(CostModel::default(), None);
        let site = SiteKey::new("app", 0x10);
        for _ in 0..1000 {
            learner.track(0x1000_0000, 1 << 20, &site, false, true, Vec::new());
            learner.on_spec(0x1000_0000);
            learner.untrack(0x1000_0000);
        }
        assert!(learner.trusting.len() <= 1, "{}", learner.trusting.len());
    }

    /// A pinned request served pageable is registered on demand by one thread at a time: a
    /// block the learner is registering (or letting go of) is waited for (`Busy`), one claimed
    /// is not decided by the learner meanwhile, and its bytes are counted in the budget once,
    /// when the registration succeeded; one CUDA refused is `Failed`, nothing counted.
    #[test]
    fn a_block_pinned_on_demand_is_claimed_by_one_thread_and_counted_once() {
        let mut learner = Learner::new(CostModel::default(), None);
        let site = SiteKey::new("app", 0x10);
        let (ptr, size) = (0x1000_0000, 1 << 20);
        learner.track(ptr, size, &site, true, false, Vec::new());
        let pin = |learner: &Learner| learner.blocks[&ptr].pin;

        learner.blocks.get_mut(&ptr).expect("tracked").pin = Pin::Registering;
        assert_eq!(learner.claim_on_demand(ptr), OnDemand::Busy);
        learner.blocks.get_mut(&ptr).expect("tracked").pin = Pin::Unpinning;
        assert_eq!(learner.claim_on_demand(ptr), OnDemand::Busy);
        learner.blocks.get_mut(&ptr).expect("tracked").pin = Pin::Pageable;

        assert_eq!(learner.claim_on_demand(ptr), OnDemand::Claimed);
        assert_eq!(pin(&learner), Pin::Registering);
        assert_eq!(learner.claim_on_demand(ptr), OnDemand::Busy, "claimed once");
        learner.pinned_on_demand(ptr, false, true, true);
        assert_eq!(pin(&learner), Pin::Failed, "refused by CUDA");
        assert_eq!(learner.budget.used, 0);
        // The program may ask again (a failed block is still the caller's to try).
        assert_eq!(learner.claim_on_demand(ptr), OnDemand::Claimed);
        learner.pinned_on_demand(ptr, false, true, true);

        // Unclaimed (a skipped registration's path), a block the learner is registering is
        // not the caller's: left as it is, nothing counted.
        learner.blocks.get_mut(&ptr).expect("tracked").pin = Pin::Registering;
        learner.pinned_on_demand(ptr, true, false, true);
        assert_eq!(pin(&learner), Pin::Registering);
        assert_eq!(learner.budget.used, 0);
        learner.blocks.get_mut(&ptr).expect("tracked").pin = Pin::Pageable;

        assert_eq!(learner.claim_on_demand(ptr), OnDemand::Claimed);
        learner.pinned_on_demand(ptr, true, true, true);
        assert_eq!(pin(&learner), Pin::Pinned);
        assert_eq!(learner.budget.used, size as u64);
        // Held for the program: not given back to the node's arbiter.
        assert!(learner.blocks[&ptr].exposed);
        assert!(learner.give_back(ptr).is_none());
        // Pinned whole: nothing for a second thread to claim, and nothing counted twice.
        assert_eq!(learner.claim_on_demand(ptr), OnDemand::Free);
        learner.pinned_on_demand(ptr, true, false, true);
        assert_eq!(learner.budget.used, size as u64);
        assert_eq!(
            learner.claim_on_demand(0x2000_0000),
            OnDemand::Free,
            "untracked"
        );
    }

    /// A block held pinned for a registration of the program's (a skipped one, pinned on
    /// demand for a capture) is exposed until the program unregisters, then may be let go
    /// for the budget again; one a framework was also told is pinned stays exposed.
    #[test]
    fn a_hold_for_the_program_ends_with_its_registration_unless_a_framework_was_shown() {
        let mut learner = Learner::new(CostModel::default(), None);
        let site = SiteKey::new("app", 0x10);
        let (ptr, size) = (0x1000_0000, 1 << 20);
        for shown in [false, true] {
            learner.track(ptr, size, &site, false, false, Vec::new());
            assert!(learner.tracks_whole(ptr, size) && !learner.tracks_whole(ptr, size / 2));
            assert!(
                learner.pinned_on_demand(ptr, true, false, true),
                "unclaimed, pageable"
            );
            learner.hold_for_program(ptr);
            if shown {
                assert!(learner.expose(ptr, size));
            }
            assert!(learner.blocks[&ptr].exposed);
            learner.program_let_go(ptr);
            assert_eq!(
                learner.blocks[&ptr].exposed, shown,
                "shown to a framework: {shown}"
            );
            learner.untrack(ptr);
        }
        // Registered by the program as part of a block: never the learner's to pin.
        learner.track(ptr, size, &site, false, false, Vec::new());
        learner.registered_by_program(ptr);
        assert_eq!(learner.blocks[&ptr].pin, Pin::Failed);
    }

    /// A block registered on demand keeps the budget a ceiling: where there is no room, the
    /// learner's own pinned blocks the program was not shown pinned are let go first, least
    /// dense first and no more than needed; a block shown pinned is not; where letting all go
    /// would not make room, nothing is, and the block is registered all the same.
    #[test]
    fn room_is_made_under_the_budget_before_a_registration_on_demand() {
        const MIB: usize = 1 << 20;
        let mut learner = Learner::new(CostModel::default(), Some(25 * MIB as u64));
        // The denser block first in address order: least dense first is not map order.
        let (shown, other, own, asked) = (0x1000_0000, 0x2000_0000, 0x3000_0000, 0x4000_0000);
        // Each from a call site of its own (a group's worth is its blocks' best).
        for (k, at) in [shown, own, other].into_iter().enumerate() {
            let site = SiteKey::new("app", 0x10 + k as u64);
            learner.track(at, 8 * MIB, &site, false, true, Vec::new());
            let block = learner.blocks.get_mut(&at).expect("tracked");
            block.pin = Pin::Pinned;
            learner.budget.take(8 * MIB as u64);
        }
        learner.blocks.get_mut(&shown).expect("tracked").exposed = true;
        // The third, copied since it was pinned, is worth more than the second, never copied.
        let (online, now) = (learner.online, learner.now_ns());
        for _ in 0..4 {
            let block = learner.blocks.get_mut(&other).expect("tracked");
            block.heat.copy(&online, 8 * MIB as u64, true, now);
        }
        let site = SiteKey::new("app", 0x20);
        learner.track(asked, 8 * MIB, &site, true, false, Vec::new());

        assert_eq!(learner.claim_on_demand(asked), OnDemand::Claimed);
        let mut room = Decisions::default();
        learner.room_on_demand(asked, &mut room);
        let let_go: Vec<usize> = room.unpin.iter().map(|b| b.block).collect();
        assert_eq!(let_go, [own], "the least dense, and only it");
        assert_eq!(learner.blocks[&own].pin, Pin::Unpinning);
        // Reserved before the registration: no other decision can take the room meanwhile.
        assert_eq!(learner.budget.used, 24 * MIB as u64);
        assert!(!learner.budget.has_room(8 * MIB as u64));
        learner.unpinned(own);
        learner.pinned_on_demand(asked, true, true, true);
        assert_eq!(
            learner.budget.used,
            24 * MIB as u64,
            "within the 25 MiB, counted once"
        );

        // A pinned request the learner registered by its own choice is not let go for one
        // (its unregistration would synchronize the context), nor one shown to a framework:
        // with only those held, no room is made and nothing is reserved.
        learner
            .blocks
            .get_mut(&other)
            .expect("tracked")
            .asked_pinned = true;
        let late = 0x6000_0000;
        learner.track(late, 8 * MIB, &site, true, false, Vec::new());
        assert_eq!(learner.claim_on_demand(late), OnDemand::Claimed);
        let mut room = Decisions::default();
        learner.room_on_demand(late, &mut room);
        assert!(room.unpin.is_empty(), "{:?}", room.unpin.len());
        assert_eq!(learner.budget.used, 24 * MIB as u64);
        learner.pinned_on_demand(late, true, true, true);
        assert_eq!(
            learner.budget.used,
            32 * MIB as u64,
            "over: nothing could be let go"
        );
        learner
            .blocks
            .get_mut(&other)
            .expect("tracked")
            .asked_pinned = false;

        // Where there is room, it is reserved at once, and given back if CUDA refuses.
        learner.budget.release(32 * MIB as u64);
        let refused = 0x7000_0000;
        learner.track(refused, 8 * MIB, &site, true, false, Vec::new());
        assert_eq!(learner.claim_on_demand(refused), OnDemand::Claimed);
        learner.room_on_demand(refused, &mut Decisions::default());
        assert_eq!(learner.budget.used, 8 * MIB as u64);
        learner.pinned_on_demand(refused, false, true, true);
        assert_eq!(learner.budget.used, 0);
        learner.budget.take(24 * MIB as u64);

        // No room even with every hidden block let go (20 MiB where 1 MiB is free and the
        // one hidden block, 8 MiB, would free too little): nothing let go for it.
        let huge = 0x5000_0000;
        learner.track(huge, 20 * MIB, &site, true, false, Vec::new());
        assert_eq!(learner.claim_on_demand(huge), OnDemand::Claimed);
        let mut room = Decisions::default();
        learner.room_on_demand(huge, &mut room);
        assert!(room.unpin.is_empty());
        assert_eq!(learner.blocks[&other].pin, Pin::Pinned);
    }
}
