//! What to pin from a saved history: each allocation's identity across runs ([`SiteKey`],
//! ordinal, size) and the verdict the history gives it ([`HotSet`]).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    path::Path,
};

use hotpin_history::{
    dump::{self, DumpError},
    history::{AllocId, AllocKind, Allocation, CallSiteId, MemHistory},
};

use crate::{
    Mode,
    hot::{Grouped, HotPolicy},
    online::LARGEST_AT_BIRTH,
};

/// An allocation's identity across runs: its call site as the module's file name and the
/// offset in it (stable under ASLR), then which allocation from that site it is, and its size.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteKey {
    pub module: String,
    pub offset: u64,
}

impl SiteKey {
    /// Keys on the file name, so a history recorded with the program at one path applies to
    /// it at another.
    pub fn new(module: &str, offset: u64) -> Self {
        let name = hotpin_history::history::module_file_name(module);
        Self {
            module: name.to_string(),
            offset,
        }
    }
}

/// What the history says of one allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Hot, and within the pinned budget (pin it).
    Pin,
    /// Hot, but the budget went to allocations with more transfers.
    OverBudget,
    /// Cold itself, but it hands its pinned block on: freed while the program went on, and
    /// the next block it serves was hot (`handing_on`). Auto mode pins it at its first copy,
    /// and its registration then serves that block through the cache.
    HandOn,
    Cold,
}

/// The Python line that made an allocation (file, line), where one was recorded: with the
/// call site, what tells apart the buffers a program makes through one C call site (PyTorch's
/// allocator, a bytearray).
pub type Line = Option<(String, u32)>;

/// The hot set of a history, looked up by (call site, ordinal, size) where the Python line
/// agrees, then by (call site, Python line, size) for recycled groups, then by call site and
/// Python line.
#[derive(Debug, Default)]
pub struct HotSet {
    /// With the Python line the allocation was made at in the history.
    allocations: HashMap<(SiteKey, u32, u64), (Line, Verdict)>,
    /// Recycled groups (see `HotPolicy::recycled_groups`): every allocation of this size from
    /// this site and Python line, however many the program makes.
    groups: HashMap<(SiteKey, Line, u64), Verdict>,
    /// Per call site and Python line: (hot allocations, all allocations).
    sites: HashMap<(SiteKey, Line), (u32, u32)>,
    /// Anonymous mappings the history knows only by the Python line that made them (a
    /// recording's view of a large malloc, which no allocation call names, such as the
    /// daemon's): per line, each mapping's length and whether it was hot.
    mapped: HashMap<(String, u32), Vec<(u64, bool)>>,
    /// The sizes of the allocations and groups it pins, sorted: what a freed block may be
    /// kept warm for ([`HotSet::pins_size_served_by`]).
    pinned_sizes: Vec<u64>,
}

/// A mapping of `length` bytes holds a malloc of `size` bytes: malloc's header and its
/// alignment (PyTorch asks 64 bytes) round it up to whole pages, within this much.
const MAPPING_SLACK: u64 = 64 << 10;

/// How an allocation was judged, for the statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judged {
    /// The history knows this allocation.
    Known(Verdict),
    /// It belongs to a recycled group: a buffer of this size allocated again and again at
    /// its call site, pinned blocks reused through the cache.
    Recycled(Verdict),
    /// The history does not know it, but its call site was hot for most of its allocations.
    SiteHot,
    /// Neither it nor its call site is in the history.
    Unknown,
}

/// What the program asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Pageable memory (malloc and its kin).
    Pageable,
    /// Pinned memory (cudaHostAlloc, cudaHostRegister, the driver's). `lazy`: in auto mode,
    /// a request nothing is known of may be served pageable and pinned once its copies repay
    /// it (an allocation can be; a registration of memory the program has cannot).
    Pinned { lazy: bool },
}

/// Why an allocation was pinned or not: the decision log's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The history knows it (pinned if it was hot).
    Known,
    /// Of a recycled group the history knows.
    Recycled,
    /// Hot, but the history's budget went to denser allocations.
    OverBudget,
    /// Unknown to the history, at a call site that was hot.
    SiteHot,
    /// The history found it cold but handing its pinned block on ([`Verdict::HandOn`]): left
    /// pageable at birth; auto mode pins it before its first copy where that copy repays it
    /// (the other modes leave it pageable, as a cold one).
    HandsOn,
    /// Auto mode: its group's freed blocks together repaid a pin.
    GroupHot,
    /// Auto mode: not known; its copies will tell.
    Learning,
    /// Auto mode: a large block (a pinned request served pageable), pinned only later, and
    /// only the part its copies touch.
    Large,
    /// Use mode: not in the history; what the program asked for.
    Unknown,
    PinAll,
    PinNone,
    /// Kept as asked whatever the history says: the program's flags need it pinned (mapped,
    /// portable, write-combined).
    Flags,
    /// Profile mode (the interposer's): what the program asked for, so that the history
    /// records the program as it is.
    Profile,
    /// Auto and use modes: a pinned request (or registration) smaller than
    /// [`SMALLEST_JUDGED_REQUEST`], kept as asked whatever the history says.
    Small,
}

/// Auto and use modes keep a pinned request (or a registration) smaller than this as the
/// program asked it, whatever the history says of it. Served pageable, it would spare a page
/// of pinned memory, and until it is freed every copy and every question about host memory
/// the process makes would be looked up against it under the interposer's lock: PyTorch's
/// `.item()` reads a scalar through a pinned buffer of 1 to 8 bytes from its caching host
/// allocator, kept for the rest of the run, and auto mode served it pageable in every
/// PyTorch program (#40 item 1; docs/benchmarks.md, section 2). Copies this small gain little
/// from pinned memory (CUDA stages pageable copies under 64 KiB cheaply).
pub const SMALLEST_JUDGED_REQUEST: u64 = 64 << 10;

impl Why {
    /// Whether a block left pageable for this reason is one the history found cold: known
    /// (or of a known recycled group) and not pinned. Such a block is not pinned before its
    /// first copy on its group's trust (`online`, "Trusted groups"): the history says its
    /// copies do not repay it.
    pub fn cold_by_history(self) -> bool {
        matches!(self, Why::Known | Why::Recycled)
    }

    /// Whether a block left pageable for this reason is pinned before its first copy (where
    /// that copy alone repays it) whatever its group's trust: [`Why::HandsOn`].
    pub fn pinned_at_first_copy(self) -> bool {
        self == Why::HandsOn
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Why::Known => "known",
            Why::Recycled => "recycled",
            Why::OverBudget => "over-budget",
            Why::SiteHot => "site-hot",
            Why::HandsOn => "hands-on",
            Why::GroupHot => "group-hot",
            Why::Learning => "learning",
            Why::Large => "large",
            Why::Unknown => "unknown",
            Why::PinAll => "pin-all",
            Why::PinNone => "pin-none",
            Why::Flags => "flags",
            Why::Profile => "profile",
            Why::Small => "small",
        }
    }

    /// The history knew the allocation (by itself, its group or its site).
    pub fn matched(self) -> bool {
        matches!(
            self,
            Why::Known | Why::Recycled | Why::OverBudget | Why::SiteHot | Why::HandsOn
        )
    }
}

/// The decision for one allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub pin: bool,
    pub why: Why,
}

/// Whether to pin one allocation of `size` bytes at birth, and why: the one place the
/// allocator and the interposer decide it. `judged`: what the history says of it (none
/// without a history); `group_hot`: auto mode's live verdict on its recycled group. A pinned
/// request under [`SMALLEST_JUDGED_REQUEST`] is kept as asked in auto and use modes.
pub fn decide(
    mode: Mode,
    judged: Option<Judged>,
    group_hot: bool,
    request: Request,
    size: u64,
) -> Decision {
    let asked_pinned = matches!(request, Request::Pinned { .. });
    let lazy = matches!(request, Request::Pinned { lazy: true });
    let from_history = |judged: Option<Judged>| match judged {
        Some(Judged::Known(Verdict::Pin)) => Some((true, Why::Known)),
        Some(Judged::Recycled(Verdict::Pin)) => Some((true, Why::Recycled)),
        Some(Judged::SiteHot) => Some((true, Why::SiteHot)),
        Some(Judged::Known(Verdict::OverBudget) | Judged::Recycled(Verdict::OverBudget)) => {
            Some((false, Why::OverBudget))
        }
        Some(Judged::Known(Verdict::HandOn)) => Some((false, Why::HandsOn)),
        Some(Judged::Known(Verdict::Cold)) => Some((false, Why::Known)),
        // (A recycled group is never judged `HandOn`: only single allocations are.)
        Some(Judged::Recycled(Verdict::Cold | Verdict::HandOn)) => Some((false, Why::Recycled)),
        Some(Judged::Unknown) | None => None,
    };
    let small_request = asked_pinned && size < SMALLEST_JUDGED_REQUEST;
    let (pin, why) = match mode {
        Mode::PinAll => (true, Why::PinAll),
        Mode::PinNone => (false, Why::PinNone),
        Mode::Profile => (asked_pinned, Why::Profile),
        Mode::Use | Mode::Auto if small_request => (true, Why::Small),
        Mode::Use => from_history(judged).unwrap_or((asked_pinned, Why::Unknown)),
        Mode::Auto => {
            let (pin, why) = match from_history(judged) {
                Some((true, why)) => (true, why),
                _ if group_hot => (true, Why::GroupHot),
                Some(known) => known,
                None => (asked_pinned && !lazy, Why::Learning),
            };
            // A large block is not pinned at birth even when known hot (a pinned request is
            // served pageable): its copies then pin only the part of it they touch, and
            // allocating never waits long on a registration.
            if pin && (lazy || !asked_pinned) && size > LARGEST_AT_BIRTH as u64 {
                (false, Why::Large)
            } else {
                (pin, why)
            }
        }
    };
    Decision { pin, why }
}

/// What competes for the pinned budget: one hot allocation, or one recycled group.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Unit {
    One(SiteKey, u32, u64),
    Group(SiteKey, Line, u64),
}

/// What one run says of each allocation and recycled group: whether it is hot, its merit (net
/// saving per pinned byte, or transfers per block) and the bytes pinning it takes.
#[derive(Debug, Default)]
struct RunJudgement {
    units: HashMap<Unit, (bool, f64, u64)>,
    /// The Python line of each allocation unit.
    lines: HashMap<Unit, Line>,
    /// Per call site and Python line: (hot allocations, all allocations).
    sites: HashMap<(SiteKey, Line), (u32, u32)>,
    /// Cold allocations that hand their pinned block on ([`handing_on`]), each with the unit
    /// of the block it hands it to.
    handing_on: HashMap<Unit, Unit>,
}

impl RunJudgement {
    fn of(history: &MemHistory, policy: HotPolicy) -> Self {
        let mut run = RunJudgement::default();
        let site_key = |id| {
            history
                .call_site(id)
                .map(|site| SiteKey::new(&site.module, site.offset))
        };
        let line = |site: Option<CallSiteId>| -> Line {
            site.and_then(|site| history.python_file_line(site))
                .map(|(file, line)| (file.to_string(), line))
        };
        let groups = policy.recycled_groups(history);
        let grouped = Grouped::of(&groups);
        let hot = |a: &Allocation| policy.is_hot(a) || grouped.holds(history, a);
        let handing_on = handing_on(history, &hot);
        // The unit an allocation is judged as: its hot group's, else its own.
        let unit_of = |a: &Allocation| -> Option<Unit> {
            let key = site_key(a.call_site?)?;
            Some(if grouped.holds(history, a) {
                Unit::Group(key, line(history.python_line(a.id)), a.size)
            } else {
                Unit::One(key, a.ordinal, a.size)
            })
        };
        for group in &groups {
            let Some(key) = site_key(group.call_site) else {
                continue;
            };
            let line = line(group.python);
            let counts = run.sites.entry((key.clone(), line.clone())).or_default();
            counts.0 += group.allocations as u32;
            counts.1 += group.allocations as u32;
            let merit = policy.merit(&group.stats, group.size, group.peak_live);
            run.units.insert(
                Unit::Group(key, line, group.size),
                (true, merit, group.pinned_bytes()),
            );
        }
        for allocation in history.allocations() {
            if !allocation.kind.is_host() || allocation.kind == AllocKind::Untracked {
                continue;
            }
            let Some(site) = allocation.call_site else {
                continue;
            };
            let python = history.python_line(allocation.id);
            // An allocation of a hot group's site, line and size is judged with the group (a
            // long-lived process's folded members count whether or not each was hot).
            if grouped.holds(history, allocation) {
                continue;
            }
            let hot = policy.is_hot(allocation);
            let Some(key) = site_key(site) else {
                continue;
            };
            let line = line(python);
            let counts = run.sites.entry((key.clone(), line.clone())).or_default();
            counts.1 += 1;
            counts.0 += u32::from(hot);
            let merit = policy.merit(&allocation.stats, allocation.size, 1);
            let unit = Unit::One(key, allocation.ordinal, allocation.size);
            run.lines.insert(unit.clone(), line);
            if let Some(next) = handing_on
                .get(&allocation.id)
                .and_then(|&id| history.allocation(id))
                .and_then(unit_of)
            {
                run.handing_on.insert(unit.clone(), next);
            }
            // A key seen twice (a forked child's allocations): hot if either is.
            let entry = run
                .units
                .entry(unit)
                .or_insert((false, 0.0, allocation.size));
            if hot && (!entry.0 || merit > entry.1) {
                *entry = (true, merit, allocation.size);
            }
        }
        run
    }
}

/// Blocks smaller than this are not looked at by [`handing_on`]: one copy never repays
/// registering them (the run-time check, `Online::one_copy_repays`, says the same).
const HAND_ON_FLOOR: u64 = 1 << 20;

/// The allocations of `history` that were not `hot` themselves but hand a pinned block on:
/// malloc'd blocks (`Pageable`: what the cache of freed pinned blocks serves) of at least
/// [`HAND_ON_FLOOR`], copied, then freed while the process went on, whose freed block the
/// next malloc'd block it serves (`crate::reuse::serves`) would have taken, that block being
/// hot. Pinned at its first copy, such a block's registration serves that successor through
/// the cache: its copies are fast and the successor is not registered anew, at no more pinned
/// bytes than the successor holds (`module.to("cuda")` frees each layer's first weights, and
/// `.to("cpu")` makes the block the history pins next). One sweep per process in time order
/// pairs them one to one: a birth takes the smallest freed block waiting that serves it (the
/// latest freed of that size), as the cache would, and ends the wait of every other block
/// it would have taken, which hands nothing on (several layers freed before one fresh block
/// is made: one of them). A block kept alive to the end hands nothing on and stays cold.
fn handing_on(
    history: &MemHistory,
    hot: &dyn Fn(&Allocation) -> bool,
) -> HashMap<AllocId, AllocId> {
    const PAGE: usize = 4096;
    /// A birth (its id, size, whether hot) or a candidate's free, at a time, per process.
    enum Event {
        Freed(AllocId, u64),
        Born(AllocId, u64, bool),
    }
    let mut events: BTreeMap<u32, Vec<(u64, u8, Event)>> = BTreeMap::new();
    for a in history.allocations() {
        if a.kind != AllocKind::Pageable {
            continue;
        }
        let is_hot = hot(a);
        let list = events.entry(a.pid).or_default();
        list.push((a.alloc_ns, 1, Event::Born(a.id, a.size, is_hot)));
        if let Some(freed) = a.free_ns
            && a.size >= HAND_ON_FLOOR
            && a.stats.transfers > 0
            && a.call_site.is_some()
            && !is_hot
        {
            // A free sorts before a birth at the same instant (its block is free to take).
            list.push((freed, 0, Event::Freed(a.id, a.size)));
        }
    }
    let mut handing = HashMap::new();
    for mut list in events.into_values() {
        list.sort_by_key(|&(at, order, _)| (at, order));
        // Freed blocks waiting for their next birth: (size, when freed, id).
        let mut waiting: BTreeSet<(u64, u64, AllocId)> = BTreeSet::new();
        for (at, _, event) in list {
            match event {
                Event::Freed(id, size) => {
                    waiting.insert((size, at, id));
                }
                Event::Born(born, size, hot) => {
                    let limit = crate::reuse::reuse_limit(size as usize, PAGE) as u64;
                    let served: Vec<(u64, u64, AllocId)> = waiting
                        .range((size, 0, 0)..=(limit, u64::MAX, AllocId::MAX))
                        .copied()
                        .collect();
                    let Some(&(smallest, _, _)) = served.first() else {
                        continue;
                    };
                    if hot
                        && let Some(&(_, _, id)) =
                            served.iter().rev().find(|(size, _, _)| *size == smallest)
                    {
                        handing.insert(id, born);
                    }
                    for entry in &served {
                        waiting.remove(entry);
                    }
                }
            }
        }
    }
    handing
}

impl HotSet {
    /// Reads a history (either format) and judges its host allocations with `policy`. Under a
    /// `budget`, hot allocations and recycled groups are admitted by the most net saving per
    /// pinned byte first (transfers per block under a fixed bar) until the budget is spent;
    /// the rest are `OverBudget`. A group costs its peak of live blocks.
    pub fn load(path: &Path, policy: HotPolicy, budget: Option<u64>) -> Result<Self, DumpError> {
        Ok(Self::from_history(&dump::read(path)?, policy, budget))
    }

    /// [`Self::load`] of several runs of one program, merged by [`Self::from_histories`].
    pub fn load_merged(
        paths: &[&Path],
        policy: HotPolicy,
        budget: Option<u64>,
    ) -> Result<Self, DumpError> {
        let histories = paths
            .iter()
            .map(|path| dump::read(path))
            .collect::<Result<Vec<_>, _>>()?;
        let runs: Vec<&MemHistory> = histories.iter().collect();
        Ok(Self::from_histories(&runs, policy, budget))
    }

    pub fn from_history(history: &MemHistory, policy: HotPolicy, budget: Option<u64>) -> Self {
        Self::from_histories(&[history], policy, budget)
    }

    /// Several runs of one program merged, per allocation (call site, ordinal, size) and per
    /// recycled group (call site, size): hot where a majority of the runs that made it found
    /// it hot (one run that did something unusual does not decide), worth the mean of its
    /// merits in those runs, taking the most bytes any run's took. Then admitted under the
    /// budget as one run's are. One run merges to itself.
    pub fn from_histories(runs: &[&MemHistory], policy: HotPolicy, budget: Option<u64>) -> Self {
        let mut set = HotSet::default();
        // unit -> (runs that made it, runs that found it hot, merit sum over those, bytes)
        let mut merged: HashMap<Unit, (u32, u32, f64, u64)> = HashMap::new();
        // An allocation's Python line, as the latest run that made it recorded it.
        let mut lines: HashMap<Unit, Line> = HashMap::new();
        // Per allocation, the runs in which it handed its pinned block on, and the units it
        // handed it to.
        let mut handing: HashMap<Unit, (u32, HashSet<Unit>)> = HashMap::new();
        for history in runs {
            let run = RunJudgement::of(history, policy);
            lines.extend(run.lines);
            for (unit, next) in run.handing_on {
                let entry = handing.entry(unit).or_default();
                entry.0 += 1;
                entry.1.insert(next);
            }
            for (key, (hot, all)) in run.sites {
                let counts = set.sites.entry(key).or_default();
                counts.0 += hot;
                counts.1 += all;
            }
            for (unit, (hot, merit, bytes)) in run.units {
                let entry = merged.entry(unit).or_default();
                entry.0 += 1;
                if hot {
                    entry.1 += 1;
                    entry.2 += merit;
                }
                entry.3 = entry.3.max(bytes);
            }
        }
        set.add_mapped(runs, policy);
        // The hot units, each with its mean merit and bytes.
        let mut units: Vec<(f64, u64, Unit)> = Vec::new();
        for (unit, (made, hot, merits, bytes)) in merged {
            match &unit {
                Unit::One(key, ordinal, size) => {
                    let line = lines.get(&unit).cloned().flatten();
                    // Hands on where most runs that made it saw it do so (and not hot: a
                    // hot one is judged below).
                    let verdict = if 2 * handing.get(&unit).map_or(0, |h| h.0) > made {
                        Verdict::HandOn
                    } else {
                        Verdict::Cold
                    };
                    set.allocations
                        .insert((key.clone(), *ordinal, *size), (line, verdict));
                }
                Unit::Group(key, line, size) => {
                    set.groups
                        .insert((key.clone(), line.clone(), *size), Verdict::Cold);
                }
            }
            if 2 * hot > made {
                units.push((merits / f64::from(hot), bytes, unit));
            }
        }
        set.admit(units, budget);
        set.hand_on_only_to_pins(&handing);
        set
    }

    /// A block hands its pin on only to a block the history pins: one whose successors were all
    /// left cold or over the budget is judged cold (its registration would serve nothing).
    fn hand_on_only_to_pins(&mut self, handing: &HashMap<Unit, (u32, HashSet<Unit>)>) {
        let pinned = |unit: &Unit| match unit {
            Unit::One(key, ordinal, size) => self
                .allocations
                .get(&(key.clone(), *ordinal, *size))
                .is_some_and(|(_, verdict)| *verdict == Verdict::Pin),
            Unit::Group(key, line, size) => self
                .groups
                .get(&(key.clone(), line.clone(), *size))
                .is_some_and(|verdict| *verdict == Verdict::Pin),
        };
        let cold: Vec<(SiteKey, u32, u64)> = self
            .allocations
            .iter()
            .filter(|(_, (_, verdict))| *verdict == Verdict::HandOn)
            .filter(|((key, ordinal, size), _)| {
                let unit = Unit::One(key.clone(), *ordinal, *size);
                !handing
                    .get(&unit)
                    .is_some_and(|(_, next)| next.iter().any(pinned))
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in cold {
            if let Some(entry) = self.allocations.get_mut(&key) {
                entry.1 = Verdict::Cold;
            }
        }
    }

    /// Gives each hot unit (merit, bytes, unit) its verdict: pinned while `budget` has room,
    /// most merit first, else over budget; then notes the sizes pinned.
    fn admit(&mut self, mut units: Vec<(f64, u64, Unit)>, budget: Option<u64>) {
        // Most merit first; ties in a stable order, so that a budget admits the same units
        // whatever the order the runs were read in.
        units.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.2.cmp(&b.2)));
        let mut spent = 0u64;
        for (_, bytes, unit) in units {
            let verdict = match budget {
                Some(budget) if spent + bytes > budget => Verdict::OverBudget,
                _ => {
                    spent += bytes;
                    Verdict::Pin
                }
            };
            match unit {
                Unit::One(key, ordinal, size) => {
                    if let Some(entry) = self.allocations.get_mut(&(key, ordinal, size)) {
                        entry.1 = verdict;
                    }
                }
                Unit::Group(key, line, size) => {
                    self.groups.insert((key, line, size), verdict);
                }
            };
        }
        self.pinned_sizes = self
            .allocations
            .iter()
            .filter(|(_, (_, verdict))| *verdict == Verdict::Pin)
            .map(|((_, _, size), _)| *size)
            .chain(
                self.groups
                    .iter()
                    .filter(|(_, verdict)| **verdict == Verdict::Pin)
                    .map(|((_, _, size), _)| *size),
            )
            .collect();
        self.pinned_sizes.sort_unstable();
        self.pinned_sizes.dedup();
    }

    /// Whether a freed block of `block` bytes would serve an allocation the history pins
    /// (`crate::reuse::serves`, pages of `page` bytes): worth keeping warm for it, so that
    /// registering it at birth finds its pages in.
    pub fn pins_size_served_by(&self, block: u64, page: usize) -> bool {
        let low = crate::reuse::smallest_served_at_least(block as usize, page) as u64;
        let from = self.pinned_sizes.partition_point(|&size| size < low);
        self.pinned_sizes[from..]
            .iter()
            .take_while(|&&size| size <= block)
            .any(|&size| crate::reuse::serves(block as usize, size as usize, page))
    }

    /// The runs' anonymous mappings made at a Python line with no allocating call site, by
    /// that line: each one's size and whether it was hot.
    fn add_mapped(&mut self, runs: &[&MemHistory], policy: HotPolicy) {
        for history in runs {
            for a in history.allocations() {
                if a.kind != AllocKind::Mmap || a.call_site.is_some() {
                    continue;
                }
                let Some((file, line)) = history
                    .python_line(a.id)
                    .and_then(|site| history.python_file_line(site))
                else {
                    continue;
                };
                self.mapped
                    .entry((file.to_string(), line))
                    .or_default()
                    .push((a.size, policy.is_hot(a)));
            }
        }
    }

    /// Judges the `ordinal`th allocation of `size` bytes from `site`, made at the Python line
    /// `line` (None outside Python). An allocation the history knows by its ordinal is that
    /// one only if it was made at the same line: where a C call site serves several lines,
    /// its ordinals shift from run to run, and the line is what names the buffer.
    pub fn judge(
        &self,
        site: &SiteKey,
        line: Option<(&str, u32)>,
        ordinal: u32,
        size: u64,
    ) -> Judged {
        let same_line = |known: &Line| match (known, line) {
            (Some((file, at)), Some((now_file, now_at))) => file == now_file && *at == now_at,
            _ => true,
        };
        if let Some((known, verdict)) = self.allocations.get(&(site.clone(), ordinal, size))
            && same_line(known)
        {
            return Judged::Known(*verdict);
        }
        let line: Line = line.map(|(file, at)| (file.to_string(), at));
        if let Some(&verdict) = self.groups.get(&(site.clone(), line.clone(), size)) {
            return Judged::Recycled(verdict);
        }
        match self.sites.get(&(site.clone(), line.clone())) {
            Some(&(hot, total)) if 2 * hot > total => Judged::SiteHot,
            Some(_) => Judged::Unknown,
            None => self.judge_by_mapping(line, size),
        }
    }

    /// Whether the history judges some allocations by the Python lines that made them: those
    /// must then be read as the program allocates.
    pub fn knows_lines(&self) -> bool {
        !self.mapped.is_empty()
            || self.allocations.values().any(|(line, _)| line.is_some())
            || self.groups.keys().any(|(_, line, _)| line.is_some())
    }

    /// An allocation the history knows only as mappings made at its Python line (the
    /// history names no allocation call, as the daemon's): hot where most of that line's
    /// mappings that could hold it were.
    fn judge_by_mapping(&self, line: Line, size: u64) -> Judged {
        let Some(mappings) = line.and_then(|line| self.mapped.get(&line)) else {
            return Judged::Unknown;
        };
        let (hot, total) = mappings
            .iter()
            .filter(|&&(length, _)| length >= size && length - size <= MAPPING_SLACK)
            .fold((0, 0), |(hot, total), &(_, is_hot)| {
                (hot + u32::from(is_hot), total + 1)
            });
        if 2 * hot > total {
            Judged::SiteHot
        } else {
            Judged::Unknown
        }
    }

    /// How many allocations the history says to pin.
    #[cfg(test)]
    pub fn pinned_count(&self) -> usize {
        self.allocations
            .values()
            .filter(|(_, v)| *v == Verdict::Pin)
            .count()
    }

    /// How many recycled groups the history says to pin.
    #[cfg(test)]
    pub fn pinned_groups(&self) -> usize {
        self.groups.values().filter(|v| **v == Verdict::Pin).count()
    }
}

#[cfg(test)]
mod tests {
    use hotpin_history::history::CallSite;
    use hotpin_registry::registry::CopyDirection;

    use super::*;

    const MIB: u64 = 1 << 20;

    /// Site A: two hot 4 MiB buffers and one cold; site B: one cold buffer.
    fn history() -> MemHistory {
        let mut h = MemHistory::new();
        let a = h.intern_call_site(CallSite {
            module: "/old/path/app".into(),
            offset: 0x100,
            symbol: None,
        });
        let b = h.intern_call_site(CallSite {
            module: "/old/path/app".into(),
            offset: 0x200,
            symbol: None,
        });
        let sizes_transfers = [(a, 100), (a, 300), (a, 2), (b, 1)];
        for (i, (site, transfers)) in sizes_transfers.into_iter().enumerate() {
            let start = 0x1000_0000 * (i as u64 + 1);
            h.alloc(1, start, 4 * MIB, AllocKind::Pageable, Some(site), 0);
            for t in 0..transfers {
                h.transfer(
                    1,
                    0xd000_0000,
                    start,
                    4 * MIB,
                    CopyDirection::HostToDevice,
                    t,
                );
            }
        }
        h
    }

    /// A pinned request (or registration) under 64 KiB is kept as asked in auto and use
    /// modes, whatever the history says (PyTorch's `.item()` buffers); at 64 KiB and above,
    /// one nothing is known of is served pageable in auto mode, and a cold one in both; a
    /// pageable allocation of any size is not pinned for its size; pin-none still pins nothing.
    #[test]
    fn a_small_pinned_request_is_kept_as_asked() {
        let cold = Some(Judged::Known(Verdict::Cold));
        let lazy = Request::Pinned { lazy: true };
        let small = SMALLEST_JUDGED_REQUEST - 1;
        for mode in [Mode::Auto, Mode::Use] {
            for judged in [None, cold, Some(Judged::Unknown)] {
                let decision = decide(mode, judged, false, lazy, 4);
                assert_eq!(
                    (decision.pin, decision.why),
                    (true, Why::Small),
                    "{mode:?} {judged:?}"
                );
                let decision = decide(mode, judged, false, lazy, small);
                assert_eq!(
                    (decision.pin, decision.why),
                    (true, Why::Small),
                    "{mode:?} {judged:?}"
                );
            }
            let decision = decide(mode, cold, false, lazy, SMALLEST_JUDGED_REQUEST);
            assert_eq!(
                (decision.pin, decision.why),
                (false, Why::Known),
                "{mode:?}"
            );
            let decision = decide(mode, cold, false, Request::Pinned { lazy: false }, 4);
            assert_eq!(
                (decision.pin, decision.why),
                (true, Why::Small),
                "a registration"
            );
            let decision = decide(mode, cold, false, Request::Pageable, 4);
            assert!(
                !decision.pin,
                "{mode:?}: malloc is never pinned for being small"
            );
        }
        let decision = decide(Mode::Auto, None, false, lazy, SMALLEST_JUDGED_REQUEST);
        assert_eq!((decision.pin, decision.why), (false, Why::Learning));
        let decision = decide(Mode::PinNone, None, false, lazy, 4);
        assert_eq!((decision.pin, decision.why), (false, Why::PinNone));
    }

    #[test]
    fn judges_by_site_ordinal_and_size_whatever_the_path() {
        let set = HotSet::from_history(&history(), HotPolicy::transfers(4), None);
        let a = SiteKey::new("/new/place/app", 0x100);
        assert_eq!(set.judge(&a, None, 0, 4 * MIB), Judged::Known(Verdict::Pin));
        assert_eq!(set.judge(&a, None, 1, 4 * MIB), Judged::Known(Verdict::Pin));
        assert_eq!(
            set.judge(&a, None, 2, 4 * MIB),
            Judged::Known(Verdict::Cold)
        );
        assert_eq!(set.pinned_count(), 2);
    }

    /// A freed block is worth keeping warm only for a size the history pins, which it serves
    /// (at most a tenth more than that size).
    #[test]
    fn a_freed_block_serves_a_pinned_size_only_within_a_tenth() {
        let set = HotSet::from_history(&history(), HotPolicy::transfers(4), None);
        let page = 4096;
        assert!(set.pins_size_served_by(4 * MIB, page));
        assert!(set.pins_size_served_by(4 * MIB + 4 * MIB / 10, page));
        assert!(!set.pins_size_served_by(4 * MIB + 4 * MIB / 10 + 1, page));
        assert!(
            !set.pins_size_served_by(4 * MIB - 1, page),
            "smaller never serves"
        );
        assert!(!set.pins_size_served_by(0, page));
        let cold = HotSet::from_history(&history(), HotPolicy::transfers(1000), None);
        assert!(!cold.pins_size_served_by(4 * MIB, page), "nothing pinned");
    }

    /// A block copied once and freed, after which the program makes a hot block its size
    /// serves, hands its pinned block on (`module.to("cuda")` then `.to("cpu")`); one kept to
    /// the end, or followed by a cold block, stays cold. Decided pageable at birth either way,
    /// the first is to be pinned at its first copy.
    #[test]
    fn a_cold_block_freed_before_a_hot_one_it_serves_hands_its_pin_on() {
        let mut h = MemHistory::new();
        let site = |h: &mut MemHistory, offset| {
            h.intern_call_site(CallSite {
                module: "/app".into(),
                offset,
                symbol: None,
            })
        };
        let (layers, fresh) = (site(&mut h, 0x300), site(&mut h, 0x400));
        let size = 64 * MIB;
        let copy = |h: &mut MemHistory, at: u64, ts: u64| {
            h.transfer(1, 0xd000_0000, at, size, CopyDirection::HostToDevice, ts);
        };
        // Three first weights, each copied once: A freed before a hot block is made, C kept,
        // D freed before a cold one.
        let (a, c, d) = (0x1_0000_0000, 0x2_0000_0000, 0x3_0000_0000);
        for (i, at) in [a, c, d].into_iter().enumerate() {
            h.alloc(1, at, size, AllocKind::Pageable, Some(layers), i as u64);
            copy(&mut h, at, 10 + i as u64);
        }
        h.free(1, a, 20);
        let b = 0x4_0000_0000;
        h.alloc(1, b, size, AllocKind::Pageable, Some(fresh), 25);
        for t in 0..5 {
            copy(&mut h, b, 26 + t);
        }
        h.free(1, d, 35);
        h.alloc(1, 0x5_0000_0000, size, AllocKind::Pageable, Some(fresh), 40);
        copy(&mut h, 0x5_0000_0000, 41);
        let set = HotSet::from_history(&h, HotPolicy::transfers(4), None);
        let key = SiteKey::new("app", 0x300);
        assert_eq!(
            set.judge(&key, None, 0, size),
            Judged::Known(Verdict::HandOn)
        );
        assert_eq!(set.judge(&key, None, 1, size), Judged::Known(Verdict::Cold));
        assert_eq!(set.judge(&key, None, 2, size), Judged::Known(Verdict::Cold));
        let fresh = SiteKey::new("app", 0x400);
        assert_eq!(
            set.judge(&fresh, None, 0, size),
            Judged::Known(Verdict::Pin)
        );
        let judged = Some(Judged::Known(Verdict::HandOn));
        let decision = decide(Mode::Auto, judged, false, Request::Pageable, size);
        assert_eq!((decision.pin, decision.why), (false, Why::HandsOn));
        assert!(Why::HandsOn.pinned_at_first_copy() && !Why::HandsOn.cold_by_history());
        assert_eq!(set.pinned_count(), 1, "handing on takes none of the budget");
        // Under a budget that leaves the hot block out, its predecessor hands nothing on.
        let tight = HotSet::from_history(&h, HotPolicy::transfers(4), Some(size / 2));
        assert_eq!(
            tight.judge(&fresh, None, 0, size),
            Judged::Known(Verdict::OverBudget)
        );
        assert_eq!(
            tight.judge(&key, None, 0, size),
            Judged::Known(Verdict::Cold)
        );
    }

    /// Several blocks freed before one hot block is made: only one of them can hand it its
    /// registration (the others would sit in the cache), and a pinned request (served by
    /// CUDA, not the cache) takes none.
    #[test]
    fn one_hot_block_takes_one_freed_block_and_a_pinned_request_none() {
        let mut h = MemHistory::new();
        let layers = h.intern_call_site(CallSite {
            module: "/app".into(),
            offset: 0x300,
            symbol: None,
        });
        let size = 64 * MIB;
        let copy = |h: &mut MemHistory, at: u64, ts: u64| {
            h.transfer(1, 0xd000_0000, at, size, CopyDirection::HostToDevice, ts);
        };
        // Four layers copied once and freed, then one hot block; then one more freed and a
        // hot pinned request.
        for i in 0..5u64 {
            let at = 0x1_0000_0000 * (i + 1);
            h.alloc(1, at, size, AllocKind::Pageable, Some(layers), i);
            copy(&mut h, at, 10 + i);
        }
        for i in 0..4u64 {
            h.free(1, 0x1_0000_0000 * (i + 1), 20 + i);
        }
        let hot = 0x10_0000_0000;
        h.alloc(1, hot, size, AllocKind::Pageable, Some(layers), 30);
        let pinned = 0x20_0000_0000;
        h.free(1, 0x5_0000_0000, 40);
        h.alloc(1, pinned, size, AllocKind::Pinned, Some(layers), 41);
        for t in 0..5 {
            copy(&mut h, hot, 50 + t);
            copy(&mut h, pinned, 60 + t);
        }
        let set = HotSet::from_history(&h, HotPolicy::transfers(4), None);
        let key = SiteKey::new("app", 0x300);
        let verdicts: Vec<Judged> = (0..5).map(|i| set.judge(&key, None, i, size)).collect();
        let handing = verdicts
            .iter()
            .filter(|v| **v == Judged::Known(Verdict::HandOn))
            .count();
        assert_eq!(handing, 1, "{verdicts:?}");
        assert_eq!(
            verdicts[3],
            Judged::Known(Verdict::HandOn),
            "the latest freed: {verdicts:?}"
        );
        assert_eq!(verdicts[4], Judged::Known(Verdict::Cold), "{verdicts:?}");
    }

    #[test]
    fn an_unknown_allocation_falls_back_to_its_call_site_then_to_unknown() {
        let set = HotSet::from_history(&history(), HotPolicy::transfers(4), None);
        let a = SiteKey::new("app", 0x100);
        assert_eq!(
            set.judge(&a, None, 7, 4 * MIB),
            Judged::SiteHot,
            "2 of 3 at this site were hot"
        );
        assert_eq!(
            set.judge(&a, None, 0, 8 * MIB),
            Judged::SiteHot,
            "a changed size is not the same allocation"
        );
        let b = SiteKey::new("app", 0x200);
        assert_eq!(
            set.judge(&b, None, 5, 4 * MIB),
            Judged::Unknown,
            "site B was cold"
        );
        let new_site = SiteKey::new("app", 0x999);
        assert_eq!(set.judge(&new_site, None, 0, 4 * MIB), Judged::Unknown);
    }

    /// A batch buffer allocated fresh for each of 10 steps and copied once, beside site A's
    /// hot buffers: pinned as a group, also for steps past those the history saw.
    #[test]
    fn a_buffer_allocated_every_step_is_pinned_as_a_recycled_group() {
        let mut h = history();
        let batch = h.intern_call_site(CallSite {
            module: "/old/path/app".into(),
            offset: 0x300,
            symbol: None,
        });
        for step in 0..10 {
            let ts = 1000 + 3 * step;
            h.alloc(
                1,
                0x9000_0000,
                2 * MIB,
                AllocKind::Pageable,
                Some(batch),
                ts,
            );
            h.transfer(
                1,
                0xd000_0000,
                0x9000_0000,
                2 * MIB,
                CopyDirection::HostToDevice,
                ts + 1,
            );
            h.free(1, 0x9000_0000, ts + 2);
        }
        let set = HotSet::from_history(&h, HotPolicy::transfers(4), None);
        let site = SiteKey::new("app", 0x300);
        assert_eq!(
            set.judge(&site, None, 3, 2 * MIB),
            Judged::Recycled(Verdict::Pin)
        );
        assert_eq!(
            set.judge(&site, None, 500, 2 * MIB),
            Judged::Recycled(Verdict::Pin)
        );
        assert_eq!(
            set.judge(&site, None, 3, 4 * MIB),
            Judged::SiteHot,
            "another size: the site"
        );
        assert_eq!((set.pinned_count(), set.pinned_groups()), (2, 1));

        // 10 copies on one 2 MiB block rank below site A's 300 and 100 on 4 MiB blocks.
        let set = HotSet::from_history(&h, HotPolicy::transfers(4), Some(10 * MIB));
        assert_eq!(
            set.judge(&site, None, 0, 2 * MIB),
            Judged::Recycled(Verdict::Pin)
        );
        let set = HotSet::from_history(&h, HotPolicy::transfers(4), Some(9 * MIB));
        assert_eq!(
            set.judge(&site, None, 0, 2 * MIB),
            Judged::Recycled(Verdict::OverBudget)
        );
    }

    /// A long-lived process's history, bounded while recorded: the step buffers folded into
    /// an aggregate (each hot alone, copied 5 times) are judged as a group by site and size,
    /// for the ordinals folded, those kept, and those of a longer run.
    #[test]
    fn folded_allocations_are_judged_as_a_group_by_site_and_size() {
        let mut h = MemHistory::with_retention(hotpin_history::history::Retention {
            timelines: false,
            max_allocations: Some(100),
        });
        let step = h.intern_call_site(CallSite {
            module: "/opt/train".into(),
            offset: 0x400,
            symbol: None,
        });
        for i in 0..1000u64 {
            let ts = 10 * i;
            h.alloc(1, 0x9000_0000, MIB, AllocKind::Pageable, Some(step), ts);
            for c in 0..5 {
                h.transfer(
                    1,
                    0xd000_0000,
                    0x9000_0000,
                    MIB,
                    CopyDirection::HostToDevice,
                    ts + 1 + c,
                );
            }
            h.free(1, 0x9000_0000, ts + 9);
            if i % 10 == 9 {
                h.bound();
            }
        }
        assert!(h.compacted_allocations() + 150 > 1000, "most steps folded");
        let set = HotSet::from_history(&h, HotPolicy::transfers(4), Some(2 * MIB));
        let site = SiteKey::new("train", 0x400);
        for ordinal in [3, 999, 5000] {
            assert_eq!(
                set.judge(&site, None, ordinal, MIB),
                Judged::Recycled(Verdict::Pin),
                "{ordinal}"
            );
        }
        assert_eq!(
            set.pinned_groups(),
            1,
            "one block alive at a time fits the budget"
        );
    }

    #[test]
    fn a_budget_admits_the_most_transferred_first() {
        let set = HotSet::from_history(&history(), HotPolicy::transfers(4), Some(5 * MIB));
        let a = SiteKey::new("app", 0x100);
        assert_eq!(
            set.judge(&a, None, 1, 4 * MIB),
            Judged::Known(Verdict::Pin),
            "300 transfers"
        );
        assert_eq!(
            set.judge(&a, None, 0, 4 * MIB),
            Judged::Known(Verdict::OverBudget),
            "100 transfers"
        );
    }

    /// One run of site A's allocations, copied `transfers[i]` times each (4 MiB each).
    fn run_of(transfers: &[u64]) -> MemHistory {
        let mut h = MemHistory::new();
        let a = h.intern_call_site(CallSite {
            module: "/app".into(),
            offset: 0x100,
            symbol: None,
        });
        for (i, &count) in transfers.iter().enumerate() {
            let start = 0x1000_0000 * (i as u64 + 1);
            h.alloc(1, start, 4 * MIB, AllocKind::Pageable, Some(a), 0);
            for t in 0..count {
                h.transfer(
                    1,
                    0xd000_0000,
                    start,
                    4 * MIB,
                    CopyDirection::HostToDevice,
                    t,
                );
            }
        }
        h
    }

    #[test]
    fn runs_merge_by_majority_per_allocation_and_one_run_merges_to_itself() {
        let policy = HotPolicy::default();
        let a = SiteKey::new("/app", 0x100);
        // Allocation 0 hot in every run; 1 hot in the first two only; 2 hot only in the
        // latest (an unusual last run); 3 never.
        let runs = [
            run_of(&[200, 200, 0, 0]),
            run_of(&[200, 200, 1, 1]),
            run_of(&[200, 1, 200, 0]),
        ];
        let all: Vec<&MemHistory> = runs.iter().collect();
        let merged = HotSet::from_histories(&all, policy, None);
        let verdict = |set: &HotSet, ordinal| set.judge(&a, None, ordinal, 4 * MIB);
        assert_eq!(verdict(&merged, 0), Judged::Known(Verdict::Pin));
        assert_eq!(verdict(&merged, 1), Judged::Known(Verdict::Pin), "2 of 3");
        assert_eq!(verdict(&merged, 2), Judged::Known(Verdict::Cold), "1 of 3");
        assert_eq!(verdict(&merged, 3), Judged::Known(Verdict::Cold));
        // The latest alone follows its own oddity.
        let latest = HotSet::from_history(&runs[2], policy, None);
        assert_eq!(verdict(&latest, 1), Judged::Known(Verdict::Cold));
        assert_eq!(verdict(&latest, 2), Judged::Known(Verdict::Pin));
        // The order the runs come in changes nothing, budget included.
        let reversed: Vec<&MemHistory> = runs.iter().rev().collect();
        let budget = Some(4 * MIB);
        let one = HotSet::from_histories(&all, policy, budget);
        let other = HotSet::from_histories(&reversed, policy, budget);
        for ordinal in 0..4 {
            assert_eq!(
                verdict(&one, ordinal),
                verdict(&other, ordinal),
                "{ordinal}"
            );
        }
        assert_eq!(one.pinned_count(), 1, "the budget holds one 4 MiB block");
    }
}
