//! `tracer report`: what a history says a user should do, as data ([`Report`], also its JSON),
//! as text ([`Report::render_with`]) and as one self-contained HTML page with charts over time
//! ([`html::render`]). What is worth pinning is the policy's to say (`hotpin_policy`); this
//! crate only gathers and shows it.

mod budget;
pub mod html;
pub mod names;
mod partly;

pub use partly::{LEAST_UNTOUCHED_BYTES, PartlyCopied};

use std::{collections::BTreeMap, fmt::Write as _};

use hotpin_history::history::{AllocKind, Allocation, CallSiteId, MemHistory};
use hotpin_history::units::{bytes, seconds};
use hotpin_policy::{cost::Weighing, hot::HotPolicy};
use serde::Serialize;

/// One allocation in the report.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ReportRow {
    pub id: u64,
    pub pid: u32,
    /// `file+0xOFFSET function`, or what the memory is where no call site made it.
    pub call_site: String,
    /// Whether a call site made it (else it is a mapping, the heap, or untracked memory).
    pub has_call_site: bool,
    /// The call site's callers: the Python lines that made it first (CPython programs), then
    /// the native frames beyond the call site; each innermost first, where the stack could be
    /// walked.
    pub callers: Vec<String>,
    pub ordinal: u32,
    pub size: u64,
    pub kind: AllocKind,
    pub transfers: u64,
    pub h2d_bytes: u64,
    pub d2h_bytes: u64,
}

use hotpin_history::history::PinnedAccount;

/// One line of a process's pinned memory: `pid 7: 14.0 MiB pinned (6.0 MiB by the program,
/// 8.0 MiB by hotpin); ...`, and what the node's arbiter leased it, if it did.
pub fn pinned_summary(account: &PinnedAccount) -> String {
    let mut line = format!(
        "pid {}: {} pinned ({} by the program, {} by hotpin); {} of it copied, {} never",
        account.pid,
        bytes(account.pinned_bytes),
        bytes(account.pinned_bytes - account.by_hotpin_bytes),
        bytes(account.by_hotpin_bytes),
        bytes(account.copied_bytes),
        bytes(account.never_copied_bytes)
    );
    if let Some(leases) = &account.leases {
        line.push_str(&format!(
            "; leased up to {} by the node ({} granted, {} denied, {} asked back{})",
            bytes(leases.peak_leased_bytes),
            leases.granted,
            leases.denied,
            leases.reclaimed,
            if leases.distrusted {
                ", distrusted"
            } else {
                ""
            }
        ));
    }
    line
}

/// A recycled group in the report.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RecycledRow {
    pub pid: u32,
    pub call_site: String,
    pub size: u64,
    pub allocations: u64,
    pub transfers: u64,
    pub peak_live: u64,
}

/// A framework's pinned staging buffer that is hot (CuPy copies a NumPy array on the CPU into
/// a block of its pinned pool, then copies that block): the change is upstream of it, in the
/// program's own arrays.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Staging {
    /// The framework, as its folder under `site-packages` names it (`cupy`).
    pub framework: String,
    /// The program's own Python line that passed its arrays to the framework.
    pub user_line: String,
    /// Bytes copied on the CPU into the staging buffer before going to the GPU.
    pub cpu_copy_bytes: u64,
}

/// Where a Python file of an installed package lives, and the package: the folder after
/// `site-packages` or `dist-packages`.
fn installed_package(file: &str) -> Option<&str> {
    let rest = ["/site-packages/", "/dist-packages/"]
        .iter()
        .find_map(|folder| file.split_once(folder).map(|(_, rest)| rest))?;
    let package = rest.split('/').next()?;
    Some(package.strip_suffix(".py").unwrap_or(package))
}

/// If `a` is a framework's staging buffer (pinned, made by an installed package's code
/// called from the program's own): that framework and the program's line.
fn staging_of(history: &MemHistory, a: &Allocation) -> Option<(String, CallSiteId)> {
    if !a.kind.is_pinned() {
        return None;
    }
    let python: Vec<(CallSiteId, &str)> = history
        .callers(a.id)
        .iter()
        .filter_map(|&id| history.python_file_line(id).map(|(file, _)| (id, file)))
        .collect();
    let framework = installed_package(python.first()?.1)?;
    let user = python
        .iter()
        .find(|(_, file)| installed_package(file).is_none())?;
    Some((framework.to_owned(), user.0))
}

impl Staging {
    /// What to change: the program's arrays, pinned where they are made.
    pub fn advice(&self) -> String {
        let how = match self.framework.as_str() {
            "cupy" => "cupyx.empty_pinned, or `hotpin run`",
            _ => "or run it under `hotpin run`",
        };
        format!(
            "Put the arrays passed at {} in pinned memory ({how}): they reach the GPU through \
             {}'s pinned staging buffer, copied once more on the CPU ({} in all)",
            self.user_line,
            self.framework,
            bytes(self.cpu_copy_bytes)
        )
    }
}

/// A call site the report recommends pinning (or no longer pinning).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct SiteAdvice {
    /// The call site, or what the memory is where none made it ("anonymous mappings").
    pub call_site: String,
    /// The innermost Python line that made these allocations (CPython programs): what the
    /// user changes. Allocations of one call site made at different lines are advised apart.
    pub python_line: Option<String>,
    pub allocations: u64,
    pub bytes: u64,
    pub transfers: u64,
    /// Under a cost model: the copy time pinning them saves over the run, in seconds...
    pub saving_s: f64,
    /// ... and what pinning and unpinning them costs.
    pub cost_s: f64,
    /// Of `bytes`, what the program pins already (its own pinned requests): advice to keep,
    /// not to act on, unless it is a framework's staging buffer.
    pub pinned_already_bytes: u64,
    /// Where these are a framework's pinned staging buffer: what to change instead.
    pub staging: Option<Staging>,
    /// The largest of these allocations: what pinning one of them takes of a budget.
    pub block_bytes: u64,
    /// Whether hotpin's use mode can recognise these allocations when the program runs again:
    /// by their call site, or mappings by the Python line that made them; not memory with
    /// neither (a mapping outside Python, untracked memory), which no allocation call names.
    pub use_mode_matches: bool,
}

impl SiteAdvice {
    /// Nothing counted yet; recognisable by use mode until something says otherwise.
    fn empty() -> Self {
        Self {
            call_site: String::new(),
            python_line: None,
            pinned_already_bytes: 0,
            staging: None,
            block_bytes: 0,
            allocations: 0,
            bytes: 0,
            transfers: 0,
            saving_s: 0.0,
            cost_s: 0.0,
            use_mode_matches: true,
        }
    }

    /// Counts `allocations` allocations of `bytes` in all, copied `transfers` times, and what
    /// pinning them saves and costs.
    fn count(
        &mut self,
        allocations: u64,
        bytes: u64,
        transfers: u64,
        weighing: Option<Weighing>,
        block: u64,
    ) {
        self.block_bytes = self.block_bytes.max(block);
        self.allocations += allocations;
        self.bytes += bytes;
        self.transfers += transfers;
        if let Some(w) = weighing {
            self.saving_s += w.saving_s;
            self.cost_s += w.cost_s;
        }
    }

    /// Where these allocations are made, as the user finds it: the Python line first.
    pub fn place(&self) -> String {
        self.place_named(str::to_owned)
    }

    /// [`Self::place`], the call site named by `name` (the text report's shortening).
    fn place_named(&self, name: impl Fn(&str) -> String) -> String {
        place_of(&self.call_site, self.python_line.as_deref(), name)
    }

    /// "saves 12.3 ms of copies for 4.0 ms of pinning", under a cost model.
    fn why(&self, policy: &HotPolicy) -> String {
        if policy.cost.is_none() {
            return String::new();
        }
        format!(
            ": saves {} of copies for {} of pinning",
            seconds(self.saving_s),
            seconds(self.cost_s)
        )
    }
}

/// Where memory was made, as advice names it: the Python line first, then the call site
/// named by `name`.
fn place_of(call_site: &str, python_line: Option<&str>, name: impl Fn(&str) -> String) -> String {
    match python_line {
        Some(line) => format!("{line} ({})", name(call_site)),
        None => name(call_site),
    }
}

/// Everything `tracer report` shows.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Report {
    /// What to change, in one line: the report's first ([`headline`]).
    pub headline: String,
    pub policy: HotPolicy,
    pub pids: Vec<u32>,
    pub command: Vec<String>,
    /// When the history is a checkpoint of an unfinished recording: when it was written.
    pub checkpoint_unix_s: Option<u64>,
    pub calls: u64,
    pub transfers: u64,
    pub h2d_bytes: u64,
    pub d2h_bytes: u64,
    pub lost_events: u64,
    /// Host allocations, folded ones included.
    pub host_allocations: u64,
    /// Freed allocations folded to bound the history (a long-lived process), and the groups
    /// (process, call site, kind, size) they were folded into: counted in the totals and in
    /// `recycled` and the site advice, not listed one by one.
    pub folded_allocations: u64,
    pub folded_groups: u64,
    pub hot: Vec<ReportRow>,
    /// Cold memory worth acting on: pinned and not hot (unpin it), or at least
    /// [`LARGE_BYTES`] and never copied; largest first.
    pub cold: Vec<ReportRow>,
    /// Of the memory never copied: mappings and heaps no call site made (the text report
    /// lists them only with `--all`), and their bytes.
    pub hidden_mappings: u64,
    pub hidden_mapping_bytes: u64,
    /// Copies whose direction could not be known (counted in `transfers`, in neither
    /// direction's bytes).
    pub unresolved_copies: u64,
    /// The most device memory the traced processes held at once, together.
    pub device_peak_bytes: u64,
    /// Device memory still allocated when the recording ended, and its allocations, largest
    /// first: leaks, for a program that had exited.
    pub device_live_bytes: u64,
    pub device_leaks: Vec<ReportRow>,
    /// Per process, the pinned memory: by the program or by hotpin, copied or never.
    pub pinned: Vec<PinnedAccount>,
    /// Pinned memory transferred fewer times than the policy asks: pinned for nothing.
    pub wasted_pinned_bytes: u64,
    pub wasted_pinned: Vec<ReportRow>,
    /// Pinned memory kept pinned for its copies, of which they touched only a part: most
    /// untouched first ([`PartlyCopied`]).
    pub partly_copied: Vec<PartlyCopied>,
    /// Pageable memory transferred often: what pinning would speed up.
    pub candidate_bytes: u64,
    pub candidates: Vec<ReportRow>,
    /// Groups of rarely transferred buffers from one call site that reuse a few pinned blocks
    /// between them (a batch buffer allocated every step): hot as a group.
    pub recycled: Vec<RecycledRow>,
    /// Call sites with hot allocations or hot recycled groups (pinned already or not): pin
    /// these, and only their hot allocations (`pin_bytes`: a group counts its peak alive).
    pub pin_sites: Vec<SiteAdvice>,
    /// Bytes pinning `pin_sites` costs (their hot allocations).
    pub pin_bytes: u64,
    /// With `tracer report --budget`: the budget the advice is held to, and the places it
    /// leaves out (hot, but less dense than those that fit).
    pub budget: Option<u64>,
    pub over_budget_sites: Vec<SiteAdvice>,
    /// Call sites that pinned and were never hot: stop pinning these.
    pub unpin_sites: Vec<SiteAdvice>,
    /// Hot memory with no allocating call site: memory no probe saw allocated, and anonymous
    /// mappings and heaps (seen, but not who in the program asked for them).
    pub untracked_hot_bytes: u64,
}

/// A call site, module first, its function demangled (folded when rendered).
/// An allocation's callers by name, its Python lines first: the line of the user's own code
/// is what a report's reader acts on, and it sits past tens of native frames.
fn python_first(history: &MemHistory, callers: &[CallSiteId]) -> Vec<String> {
    let is_python = |id: &CallSiteId| {
        history.call_site(*id).is_some_and(|site| {
            site.module
                .starts_with(hotpin_history::history::PYTHON_MODULE)
        })
    };
    let (python, native): (Vec<CallSiteId>, Vec<CallSiteId>) =
        callers.iter().copied().partition(is_python);
    python
        .into_iter()
        .chain(native)
        .map(|site| site_name(history, Some(site)))
        .collect()
}

fn site_name(history: &MemHistory, site: Option<CallSiteId>) -> String {
    match site.and_then(|id| history.call_site(id)) {
        Some(site) => names::call_site(&site.module, site.offset, site.symbol.as_deref(), true),
        None => "(unknown)".into(),
    }
}

/// Memory at least this large that was never copied is listed as cold.
pub const LARGE_BYTES: u64 = 1 << 20;

/// A pinned block smaller than this that copies use is not listed as wasted, however little
/// its copies save: it holds a few pages at most, and a program rarely chooses it (PyTorch
/// copies a scalar result for `.item()` or a `non_blocking` copy into such a block).
pub const SMALL_PINNED_BYTES: u64 = 64 << 10;

/// Whether `a` is a small pinned block that copies use ([`SMALL_PINNED_BYTES`]).
fn small_and_used(a: &Allocation) -> bool {
    a.kind.is_pinned() && a.size < SMALL_PINNED_BYTES && a.stats.transfers > 0
}

/// What to call an allocation: its call site, or for memory with none, what it is.
fn allocation_name(history: &MemHistory, a: &Allocation) -> String {
    if a.call_site.is_some() {
        return site_name(history, a.call_site);
    }
    let what = match a.kind {
        AllocKind::Heap => "heap".to_owned(),
        AllocKind::Mmap => format!("anonymous mapping of {}", bytes(a.size)),
        AllocKind::Untracked => "untracked (no allocation seen)".to_owned(),
        kind => format!("{kind:?} memory").to_lowercase(),
    };
    if a.pre_existing {
        format!("{what}, there before the tracer attached")
    } else {
        what
    }
}

fn row(history: &MemHistory, a: &Allocation) -> ReportRow {
    ReportRow {
        id: a.id,
        pid: a.pid,
        call_site: allocation_name(history, a),
        has_call_site: a.call_site.is_some(),
        callers: python_first(history, history.callers(a.id)),
        ordinal: a.ordinal,
        size: a.size,
        kind: a.kind,
        transfers: a.stats.transfers,
        h2d_bytes: a.stats.h2d_bytes,
        d2h_bytes: a.stats.d2h_bytes,
    }
}

/// Where allocations are advised together: their call site and their innermost Python line.
type SiteKey = (Option<CallSiteId>, Option<CallSiteId>);

/// The host allocations sorted into what the report advises: per call site, what to pin and
/// what to stop pinning; the wasted pinned memory and the pageable memory copied often.
struct HostAdvice<'a> {
    wasted: Vec<&'a Allocation>,
    candidates: Vec<&'a Allocation>,
    pin: BTreeMap<SiteKey, SiteAdvice>,
    unpin: BTreeMap<SiteKey, SiteAdvice>,
    untracked_hot_bytes: u64,
    folded_host: Vec<&'a hotpin_history::history::SiteAggregate>,
}

/// The advice for each recycled group found hot: its place, the most of it alive at once.
fn group_advice(
    policy: &HotPolicy,
    groups: &[hotpin_policy::hot::RecycledGroup],
) -> BTreeMap<SiteKey, SiteAdvice> {
    let mut pin: BTreeMap<SiteKey, SiteAdvice> = BTreeMap::new();
    for g in groups {
        pin.entry((Some(g.call_site), g.python))
            .or_insert_with(SiteAdvice::empty)
            .count(
                g.allocations,
                g.pinned_bytes(),
                g.transfers,
                policy.weigh(&g.stats, g.size, g.peak_live),
                g.size,
            );
    }
    pin
}

/// The program's own pinned allocations, per place: what is pinned there and whether any of
/// it is hot (for the folded history), and apart what of it is wasted: a place that pins 8
/// buffers of which 2 are hot wastes the other 6.
#[derive(Default)]
struct PinnedTally<'a> {
    wasted: Vec<&'a Allocation>,
    unpin: BTreeMap<SiteKey, SiteAdvice>,
    sites: BTreeMap<SiteKey, (SiteAdvice, bool)>,
}

impl<'a> PinnedTally<'a> {
    fn count(
        &mut self,
        policy: &HotPolicy,
        a: &'a Allocation,
        line: Option<CallSiteId>,
        hot: bool,
    ) {
        let weight = policy.weigh(&a.stats, a.size, 1);
        if !hot {
            self.wasted.push(a);
            self.unpin
                .entry((a.call_site, line))
                .or_insert_with(SiteAdvice::empty)
                .count(1, a.size, a.stats.transfers, weight, a.size);
        }
        let (entry, any_hot) = self
            .sites
            .entry((a.call_site, line))
            .or_insert_with(|| (SiteAdvice::empty(), false));
        entry.count(1, a.size, a.stats.transfers, weight, a.size);
        *any_hot |= hot;
    }
}

/// Sorts the host allocations into what the report advises (see [`HostAdvice`]).
fn judge_host<'a>(
    history: &'a MemHistory,
    policy: &HotPolicy,
    host: &[&'a Allocation],
    groups: &[hotpin_policy::hot::RecycledGroup],
) -> HostAdvice<'a> {
    let mut candidates = Vec::new();
    let mut pin = group_advice(policy, groups);
    let mut pinned = PinnedTally::default();
    let mut untracked_hot_bytes = 0;
    // The hot allocations advised one by one, per place: they count the most of them alive
    // at once, not their sum (a fresh buffer every step needs one or two pinned at a time).
    let mut one_by_one: BTreeMap<SiteKey, Vec<&Allocation>> = BTreeMap::new();
    // Keyed by Python line too, as `hotpin run` judges them (`Grouped`).
    let in_group = hotpin_policy::hot::Grouped::of(groups);
    for a in host {
        let grouped = in_group.holds(history, a);
        let hot = policy.is_hot(a) || grouped;
        let line = history.python_line(a.id);
        if hot && !grouped && a.kind != AllocKind::Untracked {
            one_by_one.entry((a.call_site, line)).or_default().push(*a);
            let entry = pin
                .entry((a.call_site, line))
                .or_insert_with(SiteAdvice::empty);
            count_hot(entry, history, policy, a, line);
        }
        if a.kind.is_pinned() {
            pinned.count(policy, a, line, hot || small_and_used(a));
        } else if hot && !grouped {
            candidates.push(*a);
            if a.call_site.is_none() && line.is_none() {
                untracked_hot_bytes += a.size;
            }
        }
    }
    at_peak(&mut pin, one_by_one);
    let PinnedTally {
        mut wasted,
        mut unpin,
        mut sites,
    } = pinned;
    let folded_host = folded_host(history, policy, &in_group, &mut sites);
    // A place nothing of which is hot wastes all it pinned, folded history included.
    for (k, (v, hot)) in sites {
        if !hot {
            unpin.insert(k, v);
        }
    }
    candidates.sort_by_key(|a| std::cmp::Reverse(a.stats.transfers));
    wasted.sort_by_key(|a| std::cmp::Reverse(a.size));
    HostAdvice {
        wasted,
        candidates,
        pin,
        unpin,
        untracked_hot_bytes,
        folded_host,
    }
}

/// A hot allocation advised on its own, counted into its place's advice: its bytes (pinned
/// already, or not), the framework staging buffer it is, if one, and whether use mode can
/// match it.
fn count_hot(
    entry: &mut SiteAdvice,
    history: &MemHistory,
    policy: &HotPolicy,
    a: &Allocation,
    line: Option<CallSiteId>,
) {
    if a.kind.is_pinned() {
        entry.pinned_already_bytes += a.size;
    }
    if let Some((framework, user)) = staging_of(history, a) {
        let staging = entry.staging.get_or_insert_with(|| Staging {
            framework,
            user_line: site_name(history, Some(user)),
            cpu_copy_bytes: 0,
        });
        staging.cpu_copy_bytes += a.stats.h2d_bytes;
    }
    // Use mode names an allocation by its call site, or a mapping by its Python line.
    entry.use_mode_matches &= if a.kind == AllocKind::Mmap {
        line.is_some()
    } else {
        a.call_site.is_some()
    };
    entry.count(
        1,
        a.size,
        a.stats.transfers,
        policy.weigh(&a.stats, a.size, 1),
        a.size,
    );
}

/// Each place's hot allocations advised one by one counted at the most of them alive at once,
/// not their sum (a fresh buffer every step needs one or two pinned at a time).
fn at_peak(
    pin: &mut BTreeMap<SiteKey, SiteAdvice>,
    one_by_one: BTreeMap<SiteKey, Vec<&Allocation>>,
) {
    for (key, blocks) in one_by_one {
        if let Some(entry) = pin.get_mut(&key) {
            let sum: u64 = blocks.iter().map(|a| a.size).sum();
            let peak = peak_live_bytes(&blocks);
            entry.bytes = entry.bytes - sum + peak;
            entry.pinned_already_bytes = entry.pinned_already_bytes.min(peak);
        }
    }
}

/// The most bytes of `blocks` alive at once (one still alive at the end counts to the end).
fn peak_live_bytes(blocks: &[&Allocation]) -> u64 {
    let mut changes: Vec<(u64, bool, u64)> = Vec::with_capacity(blocks.len() * 2);
    for a in blocks {
        changes.push((a.alloc_ns, true, a.size));
        if let Some(free) = a.free_ns {
            changes.push((free, false, a.size));
        }
    }
    // At one instant, frees before allocations: a block freed and another made then are not
    // both alive.
    changes.sort_by_key(|&(at, born, _)| (at, born));
    let (mut live, mut peak) = (0u64, 0u64);
    for (_, born, size) in changes {
        if born {
            live += size;
            peak = peak.max(live);
        } else {
            live = live.saturating_sub(size);
        }
    }
    peak
}

/// The history's folded host allocations; its folded pinned ones are counted in
/// `pinned_sites`, hot where a recycled group (`in_group`) made them.
fn folded_host<'a>(
    history: &'a MemHistory,
    policy: &HotPolicy,
    in_group: &hotpin_policy::hot::Grouped,
    pinned_sites: &mut BTreeMap<SiteKey, (SiteAdvice, bool)>,
) -> Vec<&'a hotpin_history::history::SiteAggregate> {
    let folded_host: Vec<&hotpin_history::history::SiteAggregate> = history
        .compacted()
        .iter()
        .filter(|g| g.kind.is_host() && g.kind != AllocKind::Untracked)
        .collect();
    for g in folded_host.iter().filter(|g| g.kind.is_pinned()) {
        let grouped = g
            .call_site
            .is_some_and(|site| in_group.holds_folded(g.pid, site, g.size));
        let (entry, any_hot) = pinned_sites
            .entry((g.call_site, None))
            .or_insert_with(|| (SiteAdvice::empty(), false));
        let live = g.peak_live.max(1);
        entry.count(
            g.allocations,
            g.size * live,
            g.stats.transfers,
            policy.weigh(&g.stats, g.size, live),
            g.size,
        );
        *any_hot |= grouped;
    }
    folded_host
}

/// Memory worth a line among the cold: pinned and not hot, or large and never copied; pinned
/// first, then memory a call site made, then mappings and heaps nobody copied (listed only on
/// request), largest first within each. With the count and bytes of those mappings and heaps.
fn cold_list<'a>(host: &[&'a Allocation], policy: &HotPolicy) -> (Vec<&'a Allocation>, u64, u64) {
    let mut cold: Vec<&'a Allocation> = host
        .iter()
        .copied()
        .filter(|a| a.kind != AllocKind::Untracked && !policy.is_hot(a) && !small_and_used(a))
        .filter(|a| a.kind.is_pinned() || (a.size >= LARGE_BYTES && a.stats.transfers == 0))
        .collect();
    // Pinned first, then memory a call site made, then mappings and heaps nobody copied
    // (listed only on request): largest first within each.
    cold.sort_by_key(|a| {
        (
            !a.kind.is_pinned(),
            a.call_site.is_none(),
            std::cmp::Reverse(a.size),
        )
    });
    let unnamed: Vec<&&Allocation> = cold
        .iter()
        .filter(|a| !a.kind.is_pinned() && a.call_site.is_none())
        .collect();
    let hidden_mappings = unnamed.len() as u64;
    let hidden_mapping_bytes = unnamed.iter().map(|a| a.size).sum();
    (cold, hidden_mappings, hidden_mapping_bytes)
}

/// What the advice calls hot memory with neither a call site nor a Python line: the heap,
/// memory no probe saw allocated.
const UNSEEN: &str = "memory no allocation call was seen making (the heap, untracked memory)";

fn advice(history: &MemHistory, sites: BTreeMap<SiteKey, SiteAdvice>) -> Vec<SiteAdvice> {
    let mut list: Vec<_> = sites
        .into_iter()
        .map(|((site, line), mut advice)| {
            advice.call_site = match site {
                Some(_) => site_name(history, site),
                None if line.is_some() => "anonymous mappings".to_owned(),
                None => UNSEEN.to_owned(),
            };
            advice.python_line = line.map(|line| site_name(history, Some(line)));
            advice
        })
        .collect();
    list.sort_by(most_copied_first);
    list
}

/// The order advice is listed in: the most copied first, then the largest.
fn most_copied_first(a: &SiteAdvice, b: &SiteAdvice) -> std::cmp::Ordering {
    b.transfers.cmp(&a.transfers).then(b.bytes.cmp(&a.bytes))
}

/// The first `top` recycled groups, as the report lists them.
fn recycled_rows(
    history: &MemHistory,
    groups: &[hotpin_policy::hot::RecycledGroup],
    top: usize,
) -> Vec<RecycledRow> {
    groups
        .iter()
        .take(top)
        .map(|g| RecycledRow {
            pid: g.pid,
            call_site: site_name(history, Some(g.call_site)),
            size: g.size,
            allocations: g.allocations,
            transfers: g.transfers,
            peak_live: g.peak_live,
        })
        .collect()
}

/// "the allocation", or "the N allocations".
fn these(n: u64) -> String {
    match n {
        1 => "the allocation".to_owned(),
        n => format!("the {n} allocations"),
    }
}

/// The report's first line: what to change, where (the Python line first), and what it
/// brings; where nothing is worth pinning, the largest waste: what to stop pinning, or a
/// pinned block of which copies use only a part; else that nothing is.
fn headline(
    pin_sites: &[SiteAdvice],
    unpin_sites: &[SiteAdvice],
    partly: Option<&PartlyCopied>,
    costed: bool,
) -> String {
    if let Some(line) = pin_line(pin_sites, costed) {
        return line;
    }
    let worst = unpin_sites.iter().max_by_key(|site| site.bytes);
    if let Some(partly) = partly
        && worst.is_none_or(|worst| partly.untouched_bytes() > worst.bytes)
    {
        return partly.advice();
    }
    if let Some(worst) = worst {
        return format!(
            "Stop pinning {} made at {} that {} copied too rarely to repay it: {} pinned",
            these(worst.allocations),
            worst.place(),
            if worst.allocations == 1 { "is" } else { "are" },
            bytes(worst.bytes)
        );
    }
    if let Some(kept) = pin_sites
        .iter()
        .max_by(|a, b| a.saving_s.total_cmp(&b.saving_s))
    {
        return format!(
            "Nothing to change: the memory copied often is pinned already ({} made at {}, {})",
            these(kept.allocations),
            kept.place(),
            bytes(kept.bytes)
        );
    }
    "Nothing to change: no host memory is copied often enough to repay pinning it, and none \
     is pinned for nothing"
        .to_owned()
}

/// The first line where something is worth pinning that the program does not pin already
/// (or a framework's staging buffer is hot): the place that saves most, and what it brings.
fn pin_line(pin_sites: &[SiteAdvice], costed: bool) -> Option<String> {
    // What the program pins already is advice to keep, not a change.
    let to_pin: Vec<&SiteAdvice> = pin_sites
        .iter()
        .filter(|site| site.pinned_already_bytes < site.bytes || site.staging.is_some())
        .collect();
    let best = to_pin.iter().copied().max_by(|a, b| {
        a.saving_s
            .total_cmp(&b.saving_s)
            .then(a.transfers.cmp(&b.transfers))
    })?;
    let mut line = match &best.staging {
        Some(staging) => staging.advice(),
        // No line of the program to change: only pinning as it runs reaches it.
        None if best.call_site == UNSEEN => {
            format!("Run it under `hotpin run`, which pins hot {UNSEEN} as the program runs")
        }
        None => format!("Pin {} made at {}", these(best.allocations), best.place()),
    };
    if best.staging.is_some() {
        // What it saves is the CPU's copies, which no cost model here weighs.
    } else if costed {
        let _ = write!(
            line,
            ": saves {} of copies for {} of pinning, {} pinned",
            seconds(best.saving_s),
            seconds(best.cost_s),
            bytes(best.bytes)
        );
    } else {
        let _ = write!(
            line,
            ": copied {} times, {} pinned",
            best.transfers,
            bytes(best.bytes)
        );
    }
    match to_pin.len() - 1 {
        0 => {}
        1 => line.push_str(" (1 more place below)"),
        more => {
            let _ = write!(line, " ({more} more places below)");
        }
    }
    Some(line)
}

/// Device memory still allocated at the end of the history (leaks, for a program that had
/// exited), largest first; the reservations CUDA makes for itself left out.
fn device_leaks(history: &MemHistory) -> Vec<&Allocation> {
    let mut leaks: Vec<&Allocation> = history
        .allocations()
        .iter()
        .filter(|a| a.kind.is_device() && a.kind != AllocKind::DeviceReserved && a.is_live())
        .collect();
    leaks.sort_by_key(|a| std::cmp::Reverse(a.size));
    leaks
}

impl Report {
    /// Builds the report; `top` bounds each list.
    pub fn new(history: &MemHistory, policy: HotPolicy, top: usize) -> Self {
        let stats = history.stats();
        let host: Vec<&Allocation> = history
            .allocations()
            .iter()
            .filter(|a| a.kind.is_host())
            .collect();
        let groups = policy.recycled_groups(history);
        let host_advice = judge_host(history, &policy, &host, &groups);
        let (cold, hidden_mappings, hidden_mapping_bytes) = cold_list(&host, &policy);
        let device_leaks = device_leaks(history);
        let rows = |list: &[&Allocation]| -> Vec<ReportRow> {
            list.iter().take(top).map(|a| row(history, a)).collect()
        };
        let HostAdvice {
            wasted,
            candidates,
            pin,
            unpin,
            untracked_hot_bytes,
            folded_host,
        } = host_advice;
        let pin_sites = advice(history, pin);
        let unpin_sites = advice(history, unpin);
        let partly_copied = partly::partly_copied(history, &host, &wasted);
        Report {
            headline: headline(
                &pin_sites,
                &unpin_sites,
                partly_copied.first(),
                policy.cost.is_some(),
            ),
            policy,
            pids: history.meta().pids.clone(),
            command: history.meta().command.clone(),
            checkpoint_unix_s: history.meta().checkpoint_unix_s,
            calls: stats.calls,
            transfers: stats.transfers,
            h2d_bytes: stats.h2d_bytes,
            d2h_bytes: stats.d2h_bytes,
            lost_events: stats.lost_events(),
            host_allocations: host.len() as u64
                + folded_host.iter().map(|g| g.allocations).sum::<u64>(),
            folded_allocations: history.compacted_allocations(),
            folded_groups: history.compacted().len() as u64,
            hot: history
                .hotspots(top)
                .into_iter()
                .filter(|a| a.stats.transfers > 0)
                .map(|a| row(history, a))
                .collect(),
            cold: rows(&cold),
            hidden_mappings,
            hidden_mapping_bytes,
            unresolved_copies: stats.unresolved_copies,
            device_peak_bytes: stats.device_memory.values().map(|m| m.peak_bytes).sum(),
            device_live_bytes: device_leaks.iter().map(|a| a.size).sum(),
            device_leaks: rows(&device_leaks),
            pinned: history.pinned_accounts(),
            wasted_pinned_bytes: wasted.iter().map(|a| a.size).sum(),
            wasted_pinned: rows(&wasted),
            partly_copied: partly_copied.into_iter().take(top).collect(),
            candidate_bytes: candidates.iter().map(|a| a.size).sum(),
            candidates: rows(&candidates),
            recycled: recycled_rows(history, &groups, top),
            pin_bytes: pin_sites.iter().map(|s| s.bytes).sum(),
            budget: None,
            over_budget_sites: Vec::new(),
            pin_sites,
            unpin_sites,
            untracked_hot_bytes,
        }
    }

    /// The processes whose pinned memory wastes some (pinned and never copied, or copied too
    /// rarely to repay it): those section 2 lists. All are in [`Report::pinned`].
    pub fn wasting_accounts(&self) -> impl Iterator<Item = &PinnedAccount> {
        self.pinned.iter().filter(|account| {
            account.never_copied_bytes > 0
                || self.wasted_pinned.iter().any(|row| row.pid == account.pid)
        })
    }

    /// The report as text for a terminal, with the default options.
    pub fn render(&self) -> String {
        self.render_with(&RenderOptions::default())
    }

    /// The command that acts on the report: `hotpin run -- <the recorded command>`.
    fn act(&self) -> String {
        if self.command.is_empty() {
            "hotpin run -- CMD".to_owned()
        } else {
            format!("hotpin run -- {}", self.command.join(" "))
        }
    }

    /// The report as text for a terminal, its sections in the order a user acts on them:
    /// what to pin, what is pinned and wasted, pageable memory copied often, device memory
    /// left at the end, then memory never copied. Each section ends with the command that
    /// acts on it.
    pub fn render_with(&self, options: &RenderOptions) -> String {
        let mut out = String::new();
        self.header(&mut out);
        self.pin_section(&mut out, options);
        self.wasted_section(&mut out, options);
        self.pageable_section(&mut out, options);
        self.device_section(&mut out, options);
        self.never_copied_section(&mut out, options);
        out
    }

    /// What to pin, and what it saves (1).
    fn pin_section(&self, out: &mut String, options: &RenderOptions) {
        let table = |out: &mut String, rows: &[ReportRow]| table(out, rows, options);
        let act = self.act();
        let _ = writeln!(out, "\n1. What to pin, and what it saves");
        self.pin_sites_text(out, options);
        if let Some(summary) = self.budget_summary() {
            let left_out: Vec<String> = self
                .over_budget_sites
                .iter()
                .map(|s| {
                    let place = s.place_named(|name| options.name(name));
                    format!(" {} ({})", names::shorten(&place, 56), bytes(s.bytes))
                })
                .collect();
            let _ = writeln!(out, "  {summary}{}", left_out.join(","));
        }
        if self.untracked_hot_bytes > 0 {
            let _ = writeln!(
                out,
                "  {} of hot memory has no allocating call site (memory no probe saw allocated, \
                 anonymous mappings, the heap); run with the hotpin allocator to attribute it \
                 to call sites",
                bytes(self.untracked_hot_bytes)
            );
        }
        self.recycled_table(out, options);
        if !self.hot.is_empty() {
            let _ = writeln!(out, "  the most transferred host allocations:");
            table(out, &self.hot);
        }
        if self.unresolved_copies > 0 {
            let _ = writeln!(
                out,
                "  {} copies whose direction could not be known (in neither direction's bytes)",
                self.unresolved_copies
            );
        }
        let _ = writeln!(
            out,
            "  -> {act}   (auto mode pins these as the program runs; `hotpin run --mode use \
             --history FILE -- ...` pins exactly these from this history)"
        );
    }

    /// Section 1's places to pin: their total, what they save, and one line each.
    fn pin_sites_text(&self, out: &mut String, options: &RenderOptions) {
        let saving: f64 = self.pin_sites.iter().map(|s| s.saving_s).sum();
        let cost: f64 = self.pin_sites.iter().map(|s| s.cost_s).sum();
        if self.pin_sites.is_empty() {
            let _ = writeln!(out, "  no call site is hot: nothing to pin");
        } else {
            let unmatched = self.pin_sites.iter().any(|site| !site.use_mode_matches);
            let _ = writeln!(
                out,
                "  pin the hot allocations of these call sites: {}{}{}",
                bytes(self.pin_bytes),
                if self.policy.cost.is_some() {
                    format!(
                        ", saving {} of copies for {} of pinning",
                        seconds(saving),
                        seconds(cost)
                    )
                } else {
                    String::new()
                },
                if unmatched {
                    "; use mode recognises only those marked * when the program runs again \
                     (the others are memory known only as a mapping made outside Python, or with no \
                     call site: record with libc's allocator, `tracer record --libc-malloc`, as \
                     `hotpin run --mode profile` does)"
                } else {
                    ""
                }
            );
            for site in &self.pin_sites {
                let _ = writeln!(
                    out,
                    "  {} {:<56} {:>4} allocations {:>10} {:>8} transfers{}",
                    if unmatched && site.use_mode_matches {
                        "*"
                    } else {
                        " "
                    },
                    names::shorten(&site.place_named(|name| options.name(name)), 56),
                    site.allocations,
                    bytes(site.bytes),
                    site.transfers,
                    site.why(&self.policy)
                );
                if let Some(staging) = &site.staging {
                    let _ = writeln!(out, "      {}", staging.advice());
                }
            }
        }
    }

    /// The recycled groups: buffers each rarely copied, hot as a group.
    fn recycled_table(&self, out: &mut String, options: &RenderOptions) {
        if !self.recycled.is_empty() {
            let _ = writeln!(
                out,
                "  recycled buffers (each rarely transferred, hot as a group: few alive at once):"
            );
            let _ = writeln!(
                out,
                "  {:<56} {:>10} {:>11} {:>9} {:>10}",
                "call site", "size", "allocations", "transfers", "peak alive"
            );
            for g in &self.recycled {
                let _ = writeln!(
                    out,
                    "  {:<56} {:>10} {:>11} {:>9} {:>10}",
                    names::shorten(&options.name(&g.call_site), 56),
                    bytes(g.size),
                    g.allocations,
                    g.transfers,
                    g.peak_live
                );
            }
        }
    }

    /// What is pinned and wasted (2).
    fn wasted_section(&self, out: &mut String, options: &RenderOptions) {
        let table = |out: &mut String, rows: &[ReportRow]| table(out, rows, options);
        let act = self.act();
        let _ = writeln!(
            out,
            "\n2. Pinned and wasted: {} pinned and copied too rarely to repay it (largest first)",
            bytes(self.wasted_pinned_bytes)
        );
        for account in self.wasting_accounts() {
            let _ = writeln!(out, "  {}", pinned_summary(account));
        }
        if !self.wasted_pinned.is_empty() {
            table(out, &self.wasted_pinned);
        }
        for partly in &self.partly_copied {
            let _ = writeln!(out, "  {}", partly.listed(|name| options.name(name)));
        }
        for site in &self.unpin_sites {
            let _ = writeln!(
                out,
                "  stop pinning {} ({} allocations, {}, {} transfers{})",
                site.place_named(|name| options.name(name)),
                site.allocations,
                bytes(site.bytes),
                site.transfers,
                site.why(&self.policy)
            );
        }
        if self.wasted_pinned_bytes > 0 {
            let _ = writeln!(
                out,
                "  -> {act}   (serves pinned requests pageable and pins only what their copies \
                 repay, unseen by the program: docs/transparency.md)"
            );
        }
    }

    /// Pageable memory copied often (3).
    fn pageable_section(&self, out: &mut String, options: &RenderOptions) {
        let table = |out: &mut String, rows: &[ReportRow]| table(out, rows, options);
        let act = self.act();
        let _ = writeln!(
            out,
            "\n3. Pageable and copied often: {} (what pinning would speed up)",
            bytes(self.candidate_bytes)
        );
        if !self.candidates.is_empty() {
            table(out, &self.candidates);
            let _ = writeln!(out, "  -> {act}");
        }
    }

    /// Device memory still allocated at the end (4).
    fn device_section(&self, out: &mut String, options: &RenderOptions) {
        let table = |out: &mut String, rows: &[ReportRow]| table(out, rows, options);
        let _ = writeln!(
            out,
            "\n4. Device memory: peak {}, still allocated at the end {}",
            bytes(self.device_peak_bytes),
            bytes(self.device_live_bytes)
        );
        if !self.device_leaks.is_empty() {
            table(out, &self.device_leaks);
        }
    }

    /// The rows of section 5, memory never copied: pageable memory with a call site, and
    /// with `all` the mappings and heaps nobody copied too.
    pub fn never_copied(&self, all: bool) -> Vec<ReportRow> {
        self.cold
            .iter()
            .filter(|r| !r.kind.is_pinned())
            .filter(|r| all || r.has_call_site)
            .cloned()
            .collect()
    }

    /// Memory never copied (5): mappings and heaps nobody copied only with `--all`.
    fn never_copied_section(&self, out: &mut String, options: &RenderOptions) {
        let table = |out: &mut String, rows: &[ReportRow]| table(out, rows, options);
        let never = self.never_copied(options.all);
        let _ = writeln!(
            out,
            "\n5. Never copied, {} and more (largest first)",
            bytes(LARGE_BYTES)
        );
        if !never.is_empty() {
            table(out, &never);
        }
        if !options.all && self.hidden_mappings > 0 {
            let _ = writeln!(
                out,
                "  mappings and heaps nobody copied, not listed: {} ({}); `tracer report --all` \
                 lists them",
                self.hidden_mappings,
                bytes(self.hidden_mapping_bytes)
            );
        }
    }

    /// The policy in words: "hot = at least 4 transfers and 2 per MiB".
    /// The CUDA calls seen, or `-` for a history that counts copies but no calls (what
    /// `hotpin run`'s auto mode learned: #41 item 13, it read "CUDA calls 0" beside
    /// "transfers 1100").
    pub fn calls_text(&self) -> String {
        if self.calls == 0 && self.transfers > 0 {
            "- (not counted: copies only)".to_string()
        } else {
            self.calls.to_string()
        }
    }

    fn policy_text(&self) -> String {
        format!(
            "{}{}",
            self.policy.describe(),
            if self.policy.cost.is_none() && self.policy.min_transfers_per_mib > 0.0 {
                format!(" and {} per MiB", self.policy.min_transfers_per_mib)
            } else {
                String::new()
            }
        )
    }

    fn header(&self, out: &mut String) {
        let _ = writeln!(out, "{}", self.headline);
        let _ = writeln!(out, "\nhotpin report");
        if !self.command.is_empty() {
            let _ = writeln!(out, "  command      {}", self.command.join(" "));
        }
        let _ = writeln!(out, "  processes    {:?}", self.pids);
        if let Some(written) = self.checkpoint_unix_s {
            let age = hotpin_history::dump::unix_now().saturating_sub(written);
            let _ = writeln!(
                out,
                "  CHECKPOINT   written {age} s ago (at {written} s since the epoch) while the \
                 recording went on: the tracer stopped before its final write, so what came \
                 after is missing"
            );
        }
        let _ = writeln!(
            out,
            "  CUDA calls   {}   transfers {}   host->device {}   device->host {}   lost events {}",
            self.calls_text(),
            self.transfers,
            bytes(self.h2d_bytes),
            bytes(self.d2h_bytes),
            self.lost_events
        );
        let _ = writeln!(out, "  policy       {}", self.policy_text());
        if self.folded_allocations > 0 {
            let _ = writeln!(
                out,
                "  bounded      {} freed allocations folded into {} groups by call site and \
                 size (counted in the totals and recycled buffers, not listed)",
                self.folded_allocations, self.folded_groups
            );
        }
    }
}

/// How the text report is shown (`tracer report --all --full-names`).
#[derive(Clone, Copy, Debug, Default)]
pub struct RenderOptions {
    /// List mappings and heaps nobody copied too.
    pub all: bool,
    /// Names whole: templates and argument lists not folded.
    pub full_names: bool,
}

impl RenderOptions {
    fn name(&self, name: &str) -> String {
        if self.full_names {
            name.to_owned()
        } else {
            names::fold(name)
        }
    }
}

/// Callers shown after a row, at most.
const CALLERS_SHOWN: usize = 3;

fn table(out: &mut String, rows: &[ReportRow], options: &RenderOptions) {
    let _ = writeln!(
        out,
        "  {:>5} {:<56} {:>4} {:>10} {:<10} {:>9} {:>10} {:>10}",
        "id", "call site", "nth", "size", "kind", "transfers", "to GPU", "from GPU"
    );
    for r in rows {
        let kind = serde_json::to_value(r.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string));
        let _ = writeln!(
            out,
            "  {:>5} {:<56} {:>4} {:>10} {:<10} {:>9} {:>10} {:>10}",
            r.id,
            names::shorten(&options.name(&r.call_site), 56),
            r.ordinal,
            bytes(r.size),
            kind.unwrap_or_default(),
            r.transfers,
            bytes(r.h2d_bytes),
            bytes(r.d2h_bytes)
        );
        if !r.callers.is_empty() {
            let shown: Vec<String> = r
                .callers
                .iter()
                .take(if options.full_names {
                    usize::MAX
                } else {
                    CALLERS_SHOWN
                })
                .map(|c| options.name(c))
                .collect();
            let more = r.callers.len() - shown.len();
            let _ = writeln!(
                out,
                "        called from {}{}",
                shown.join(" <- "),
                if more > 0 {
                    format!(" <- ({more} more)")
                } else {
                    String::new()
                }
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hotpin_history::history::CallSite;
    use hotpin_registry::registry::CopyDirection;

    /// A history that counts copies but no CUDA calls (auto mode's) does not say "CUDA
    /// calls 0" beside its transfers (#41 item 13).
    #[test]
    fn copies_without_counted_calls_say_so() {
        let mut h = MemHistory::new();
        h.alloc(1, 0x10000, 1 << 20, AllocKind::Pageable, None, 0);
        for t in 0..3 {
            h.transfer(
                1,
                0xd0000000,
                0x10000,
                1 << 20,
                CopyDirection::HostToDevice,
                t,
            );
        }
        let text = Report::new(&h, HotPolicy::default(), 10).render();
        assert!(
            text.contains("CUDA calls   - (not counted: copies only)   transfers 3"),
            "{text}"
        );
    }

    /// The first line names what to change (#42 item 5): the fresh mappings made at one
    /// Python line every step, pinned at most four at a time (not their sum), before the
    /// program's own pinned buffers, which are advice to keep; with only those, nothing to
    /// change.
    #[test]
    fn the_first_line_names_the_line_to_change_and_what_is_pinned_at_once() {
        const MIB: u64 = 1 << 20;
        let line = |h: &mut MemHistory, n: u64| {
            h.intern_call_site(CallSite {
                module: format!("{}offload.py", hotpin_history::history::PYTHON_MODULE),
                offset: n,
                symbol: Some("<module>".into()),
            })
        };
        let pinned_buffers = |h: &mut MemHistory| {
            let site = h.intern_call_site(CallSite {
                module: "libtorch_cuda.so".into(),
                offset: 0xcc0bd3,
                symbol: Some("allocate_host_memory_slowpath".into()),
            });
            let at = line(h, 50);
            for i in 0..5u64 {
                let host = 0x1000_0000 + i * 64 * MIB;
                let id = h.alloc(1, host, 32 * MIB, AllocKind::Pinned, Some(site), 0);
                h.record_callers(id, vec![at]);
                for t in 0..48 {
                    h.transfer(
                        1,
                        0xd000_0000,
                        host,
                        32 * MIB,
                        CopyDirection::HostToDevice,
                        t,
                    );
                }
            }
        };
        let mut h = MemHistory::new();
        pinned_buffers(&mut h);
        let fresh = line(&mut h, 52);
        let mut t = 100;
        for step in 0..20u64 {
            for i in 0..4u64 {
                let host = 0x7f00_0000_0000 + (step * 4 + i) * 64 * MIB;
                h.map(1, host, 32 * MIB, t);
                h.record_mapping_lines(1, host, vec![fresh]);
                h.transfer(
                    1,
                    host,
                    0xd000_0000,
                    32 * MIB,
                    CopyDirection::DeviceToHost,
                    t + 1,
                );
                h.transfer(
                    1,
                    0xd000_0000,
                    host,
                    32 * MIB,
                    CopyDirection::HostToDevice,
                    t + 2,
                );
            }
            for i in 0..4u64 {
                h.unmap(
                    1,
                    0x7f00_0000_0000 + (step * 4 + i) * 64 * MIB,
                    32 * MIB,
                    t + 3,
                );
            }
            t += 10;
        }
        let report = Report::new(&h, HotPolicy::default(), 10);
        assert!(
            report
                .headline
                .starts_with("Pin the 80 allocations made at offload.py:52 in <module> (anonymous mappings): saves "),
            "{}",
            report.headline
        );
        assert!(
            report.headline.contains(", 128.0 MiB pinned"),
            "{}",
            report.headline
        );
        assert!(report.render().starts_with(&report.headline));
        let mut kept = MemHistory::new();
        pinned_buffers(&mut kept);
        let report = Report::new(&kept, HotPolicy::default(), 10);
        assert!(
            report.headline.starts_with(
                "Nothing to change: the memory copied often is pinned already (the 5 allocations made at offload.py:50"
            ),
            "{}",
            report.headline
        );
    }

    /// The report advises the recycled groups `hotpin run` pins (`policy::hot::Grouped`):
    /// keyed by Python line too, so pinned buffers never copied, made at another line through
    /// the same call site and of the same size as a hot group's, are pinned for nothing.
    /// (Before: keyed by call site and size alone, they counted as the group's, hot.)
    #[test]
    fn pinned_buffers_of_a_hot_groups_size_made_at_another_line_are_wasted() {
        const MIB: u64 = 1 << 20;
        let mut h = MemHistory::new();
        let site = torch_pinned_site(&mut h);
        let (fresh, kept) = (over_pinned_line(&mut h, 60), over_pinned_line(&mut h, 70));
        for step in 0..10u64 {
            let host = 0x1000_0000 + step * 64 * MIB;
            let id = h.alloc(1, host, 32 * MIB, AllocKind::Pinned, Some(site), step * 10);
            h.record_callers(id, vec![fresh]);
            for (t, direction) in [CopyDirection::DeviceToHost, CopyDirection::HostToDevice]
                .into_iter()
                .enumerate()
            {
                h.transfer(
                    1,
                    host,
                    0xd000_0000,
                    32 * MIB,
                    direction,
                    step * 10 + 1 + t as u64,
                );
            }
            h.free(1, host, step * 10 + 5);
        }
        pinned_never_copied(&mut h, site, kept, 0x9000_0000, 4);
        let report = Report::new(&h, HotPolicy::transfers(4), 10);
        assert_eq!(report.recycled.len(), 1, "{:?}", report.recycled);
        assert_eq!(report.wasted_pinned_bytes, 4 * 32 * MIB);
    }

    /// PyTorch's pinned allocation call site, as over_pinned.py's report names it.
    fn torch_pinned_site(h: &mut MemHistory) -> CallSiteId {
        h.intern_call_site(CallSite {
            module: "libtorch_cuda.so".into(),
            offset: 0xcc0bd3,
            symbol: Some("allocate_host_memory_slowpath".into()),
        })
    }

    /// `count` pinned 32 MiB buffers made at `site` from Python line `line`, 64 MiB apart from
    /// `base`, never copied.
    fn pinned_never_copied(
        h: &mut MemHistory,
        site: CallSiteId,
        line: CallSiteId,
        base: u64,
        count: u64,
    ) {
        const MIB: u64 = 1 << 20;
        for i in 0..count {
            let id = h.alloc(
                1,
                base + i * 64 * MIB,
                32 * MIB,
                AllocKind::Pinned,
                Some(site),
                0,
            );
            h.record_callers(id, vec![line]);
        }
    }

    /// Line `n` of over_pinned.py, at module level.
    fn over_pinned_line(h: &mut MemHistory, n: u64) -> CallSiteId {
        h.intern_call_site(CallSite {
            module: format!("{}over_pinned.py", hotpin_history::history::PYTHON_MODULE),
            offset: n,
            symbol: Some("<module>".into()),
        })
    }

    /// over_pinned.py's pinned dataset (#42): hot, so not "pinned and wasted", yet nearly all
    /// of it pinned for nothing.
    #[test]
    fn a_pinned_dataset_copied_in_one_slice_is_named_first_and_only_its_slice_counts_copied() {
        // over_pinned.py's shape (#42): a 4 GiB pinned dataset of which one 64 MiB slice is
        // copied every step, and 6 pinned 32 MiB buffers never copied.
        const MIB: u64 = 1 << 20;
        let mut h = MemHistory::new();
        let site = torch_pinned_site(&mut h);
        let line = over_pinned_line;
        let (dataset_line, staging_line) = (line(&mut h, 57), line(&mut h, 59));
        let dataset = h.alloc(
            1,
            0x1_0000_0000,
            4096 * MIB,
            AllocKind::Pinned,
            Some(site),
            0,
        );
        h.record_callers(dataset, vec![dataset_line]);
        for t in 0..150 {
            h.transfer(
                1,
                0xd000_0000,
                0x1_0000_0000 + 1536 * MIB,
                64 * MIB,
                CopyDirection::HostToDevice,
                t,
            );
        }
        pinned_never_copied(&mut h, site, staging_line, 0x8000_0000, 6);
        let report = Report::new(&h, HotPolicy::default(), 10);
        assert!(
            report.headline.starts_with(
                "Pin only the part that is copied of the allocation made at over_pinned.py:57 \
                 in <module> ("
            ) && report.headline.ends_with(
                "4.0 GiB pinned, its 150 copies touched 64.0 MiB of it (at 1.5 GiB), 3.9 GiB \
                 pinned and never copied"
            ),
            "{}",
            report.headline
        );
        assert_eq!(report.partly_copied.len(), 1);
        assert_eq!(report.partly_copied[0].untouched_bytes(), 4032 * MIB);
        // The process's account: only the slice copied.
        assert_eq!(report.pinned[0].copied_bytes, 64 * MIB);
        assert_eq!(
            report.pinned[0].never_copied_bytes,
            4032 * MIB + 6 * 32 * MIB
        );
        let text = report.render();
        assert!(
            text.contains("its 150 copies touched 64.0 MiB of it (at 1.5 GiB), 3.9 GiB never: pin only that part"),
            "{text}"
        );
        // The six never copied are still what to stop pinning.
        assert!(text.contains("stop pinning over_pinned.py:59"), "{text}");

        // Copied whole, the same dataset is not partly copied.
        let mut whole = MemHistory::new();
        let a = whole.alloc(1, 0x1_0000_0000, 256 * MIB, AllocKind::Pinned, None, 0);
        for t in 0..20 {
            whole.transfer(
                1,
                0xd000_0000,
                0x1_0000_0000,
                256 * MIB,
                CopyDirection::HostToDevice,
                t,
            );
        }
        let report = Report::new(&whole, HotPolicy::default(), 10);
        assert!(
            report.partly_copied.is_empty(),
            "{:?}",
            report.partly_copied
        );
        assert!(whole.copied_extent(a).is_some());
    }

    /// The first line of an over-pinned program (#42): of 8 pinned buffers made at one line,
    /// 2 hot, the 6 cold ones are the waste to name, not a 1-byte pinned scalar copied often
    /// elsewhere; the hot ones are advice to keep.
    #[test]
    fn the_first_line_names_the_largest_waste_even_beside_hot_buffers_of_its_line() {
        const MIB: u64 = 1 << 20;
        let mut h = MemHistory::new();
        let site = torch_pinned_site(&mut h);
        let line = over_pinned_line;
        let staging = line(&mut h, 59);
        for i in 0..8u64 {
            let host = 0x1000_0000 + i * 64 * MIB;
            let id = h.alloc(1, host, 32 * MIB, AllocKind::Pinned, Some(site), 0);
            h.record_callers(id, vec![staging]);
            let copies = match i {
                0 | 1 => 150,
                2..=4 => 1,
                _ => 0,
            };
            for t in 0..copies {
                h.transfer(
                    1,
                    0xd000_0000,
                    host,
                    32 * MIB,
                    CopyDirection::HostToDevice,
                    t,
                );
            }
        }
        let scalar = line(&mut h, 91);
        let id = h.alloc(1, 0x9000_0000, 1, AllocKind::Pinned, Some(site), 0);
        h.record_callers(id, vec![scalar]);
        for t in 0..43 {
            h.transfer(
                1,
                0x9000_0000,
                0xd000_0000,
                1,
                CopyDirection::DeviceToHost,
                t,
            );
        }
        let report = Report::new(&h, HotPolicy::default(), 10);
        assert!(
            report.headline.starts_with(
                "Stop pinning the 6 allocations made at over_pinned.py:59 in <module> ("
            ) && report
                .headline
                .ends_with("that are copied too rarely to repay it: 192.0 MiB pinned"),
            "{}",
            report.headline
        );
        // The scalar, copied 43 times, is not waste worth a line.
        assert_eq!(report.wasted_pinned.len(), 6, "{:?}", report.wasted_pinned);
        assert!(report.wasted_pinned.iter().all(|row| row.size == 32 * MIB));
        assert!(
            report.cold.iter().all(|row| row.size == 32 * MIB),
            "{:?}",
            report.cold
        );
        assert!(
            !report.unpin_sites.iter().any(|site| site
                .python_line
                .as_deref()
                .is_some_and(|l| l.contains(":91"))),
            "{:?}",
            report.unpin_sites
        );
    }

    #[test]
    fn hot_memory_use_mode_cannot_recognise_is_said_so() {
        let mut h = MemHistory::new();
        let site = h.intern_call_site(CallSite {
            module: "/bin/app".into(),
            offset: 0x10,
            symbol: Some("load_batch".into()),
        });
        // A buffer from malloc with its call site, and a mapping known only from mmap (a
        // history recorded without libc's allocator), both copied often.
        h.alloc(1, 0x10000, 1 << 20, AllocKind::Pageable, Some(site), 0);
        h.alloc(1, 0x7f0000000000, 4 << 20, AllocKind::Mmap, None, 0);
        for t in 0..10 {
            for host in [0x10000, 0x7f0000000000] {
                h.transfer(1, 0xd0000000, host, 1 << 20, CopyDirection::HostToDevice, t);
            }
        }
        let text = Report::new(&h, HotPolicy::default(), 10).render();
        assert!(text.contains("recognises only those marked *"), "{text}");
        let marked: Vec<_> = text
            .lines()
            .filter(|l| l.trim_start().starts_with('*'))
            .collect();
        assert_eq!(
            marked.len(),
            1,
            "only the malloc site is use mode's: {text}"
        );
        assert!(marked[0].contains("load_batch"), "{text}");
    }

    #[test]
    fn recommends_hot_pageable_sites_and_flags_pinned_waste() {
        let mut h = MemHistory::new();
        let hot_site = h.intern_call_site(CallSite {
            module: "/bin/app".into(),
            offset: 0x10,
            symbol: Some("load_batch".into()),
        });
        let cold_site = h.intern_call_site(CallSite {
            module: "/bin/app".into(),
            offset: 0x20,
            symbol: None,
        });
        let pin_site = h.intern_call_site(CallSite {
            module: "/bin/app".into(),
            offset: 0x30,
            symbol: None,
        });
        let hot = h.alloc(1, 0x10000, 1 << 20, AllocKind::Pageable, Some(hot_site), 0);
        let cold = h.alloc(
            1,
            0x200000,
            1 << 20,
            AllocKind::Pageable,
            Some(cold_site),
            0,
        );
        let pinned = h.alloc(1, 0x400000, 2 << 20, AllocKind::Pinned, Some(pin_site), 0);
        for t in 0..10 {
            h.transfer(
                1,
                0xd0000000,
                0x10000,
                1 << 20,
                CopyDirection::HostToDevice,
                t,
            );
        }
        h.transfer(
            1,
            0xd0000000,
            0x200000,
            1 << 20,
            CopyDirection::HostToDevice,
            20,
        );
        h.transfer(
            1,
            0x400000,
            0xd0000000,
            1 << 20,
            CopyDirection::DeviceToHost,
            21,
        );
        for t in 0..5 {
            h.transfer(
                1,
                0xd0000000,
                0x900000,
                4096,
                CopyDirection::HostToDevice,
                30 + t,
            );
        }

        // The first version's bar: 5 copies of 4 KiB are hot (the cost model would not pin
        // 4 KiB for them).
        let report = Report::new(&h, HotPolicy::transfers(4), 10);
        assert_eq!(report.hot[0].id, hot);
        assert_eq!(report.pin_sites.len(), 1);
        assert!(
            report.pin_sites[0].call_site.ends_with(" load_batch"),
            "{:?}",
            report.pin_sites
        );
        assert_eq!(report.pin_bytes, 1 << 20);
        assert_eq!(report.wasted_pinned_bytes, 2 << 20);
        assert_eq!(report.wasted_pinned[0].id, pinned);
        assert_eq!(report.unpin_sites.len(), 1);
        assert_eq!(report.untracked_hot_bytes, 4096);
        // Cold and worth acting on: the pinned buffer copied once. The pageable one copied
        // once is cold too but costs nothing to leave as it is.
        assert_eq!(
            report.cold.iter().map(|r| r.id).collect::<Vec<_>>(),
            vec![pinned]
        );
        assert!(!report.cold.iter().any(|r| r.id == cold));
        let text = report.render();
        assert!(
            text.contains("load_batch")
                && text.contains("pin the hot allocations of these call sites"),
            "{text}"
        );
    }

    /// A long-lived process allocating a fresh buffer per step: bounded, its history folds
    /// most steps, and the report and the recycled group are what the whole history gives.
    #[test]
    fn a_bounded_history_reports_the_same_recycled_group_as_the_whole_one() {
        use hotpin_history::history::Retention;
        const MIB: u64 = 1 << 20;
        let steps = |retention| {
            let mut h = MemHistory::with_retention(retention);
            let site = h.intern_call_site(CallSite {
                module: "/bin/train".into(),
                offset: 0x10,
                symbol: None,
            });
            for i in 0..3000 {
                let ts = 10 * i;
                h.alloc(1, 0x1000_0000, 8 * MIB, AllocKind::Pageable, Some(site), ts);
                h.transfer(
                    1,
                    0xd000_0000,
                    0x1000_0000,
                    8 * MIB,
                    CopyDirection::HostToDevice,
                    ts + 1,
                );
                h.free(1, 0x1000_0000, ts + 2);
                if i % 100 == 99 {
                    h.bound();
                }
            }
            h
        };
        let whole = steps(Retention::default());
        let bounded = steps(Retention {
            timelines: false,
            max_allocations: Some(200),
        });
        assert!(bounded.allocations().len() <= 300);
        let policy = HotPolicy::transfers(4);
        assert_eq!(
            policy.recycled_groups(&bounded),
            policy.recycled_groups(&whole)
        );
        let (a, b) = (
            Report::new(&whole, policy, 5),
            Report::new(&bounded, policy, 5),
        );
        assert_eq!(b.host_allocations, 3000);
        assert_eq!(
            b.folded_allocations + bounded.allocations().len() as u64,
            3000
        );
        assert_eq!(
            (b.pin_bytes, b.transfers, b.h2d_bytes),
            (a.pin_bytes, a.transfers, a.h2d_bytes)
        );
        assert!(
            b.render()
                .contains("freed allocations folded into 1 groups")
        );
    }

    /// One site allocates a fresh 8 MiB batch buffer each of 12 steps (copied once, freed
    /// before the next): a recycled group of 12 transfers on one block. Another allocates 25
    /// buffers that live together, each copied twice: 50 transfers on 25 blocks, not a group.
    /// A third makes two buffers that live together, one copied 10 times (hot alone) and one
    /// once: the hot one is judged alone, the other is no group on its own.
    #[test]
    fn buffers_reused_one_after_another_are_hot_as_a_group() {
        const MIB: u64 = 1 << 20;
        let mut h = MemHistory::new();
        let site = |h: &mut MemHistory, offset| {
            h.intern_call_site(CallSite {
                module: "/bin/train".into(),
                offset,
                symbol: None,
            })
        };
        let (batch, together, mixed) = (site(&mut h, 0x10), site(&mut h, 0x20), site(&mut h, 0x30));
        let mut ts = 0;
        let mut tick = || {
            ts += 1;
            ts
        };
        for _ in 0..12 {
            h.alloc(
                1,
                0x1000_0000,
                8 * MIB,
                AllocKind::Pinned,
                Some(batch),
                tick(),
            );
            h.transfer(
                1,
                0xd000_0000,
                0x1000_0000,
                8 * MIB,
                CopyDirection::HostToDevice,
                tick(),
            );
            h.free(1, 0x1000_0000, tick());
        }
        for i in 0..25 {
            let at = 0x2000_0000 + i * 8 * MIB;
            h.alloc(1, at, 8 * MIB, AllocKind::Pinned, Some(together), tick());
            h.transfer(
                1,
                0xd000_0000,
                at,
                8 * MIB,
                CopyDirection::HostToDevice,
                tick(),
            );
            h.transfer(
                1,
                at,
                0xd000_0000,
                8 * MIB,
                CopyDirection::DeviceToHost,
                tick(),
            );
        }
        for (at, copies) in [(0x4000_0000, 10), (0x5000_0000, 1)] {
            h.alloc(1, at, MIB, AllocKind::Pageable, Some(mixed), tick());
            for _ in 0..copies {
                h.transfer(1, 0xd000_0000, at, MIB, CopyDirection::HostToDevice, tick());
            }
        }

        // Under the first version's bar (4 transfers): the batch buffers are hot as a group,
        // the 25 alive together with 2 copies each are cold.
        let bar = HotPolicy::transfers(4);
        let groups = bar.recycled_groups(&h);
        assert_eq!(groups.len(), 1, "{groups:?}");
        let group = &groups[0];
        assert_eq!(
            (
                group.call_site,
                group.size,
                group.allocations,
                group.transfers,
                group.peak_live
            ),
            (batch, 8 * MIB, 12, 12, 1)
        );
        assert_eq!(group.stats.h2d_bytes, 12 * 8 * MIB);
        let report = Report::new(&h, bar, 10);
        assert_eq!(report.recycled.len(), 1);
        assert_eq!(
            report.pin_bytes,
            8 * MIB + MIB,
            "one block for the group, the mixed site's hot buffer"
        );
        assert_eq!(
            report.wasted_pinned_bytes,
            25 * 8 * MIB,
            "the batch buffers are pinned for a reason; the 25 together are not"
        );
        assert!(report.render().contains("recycled buffers"));

        // Under the cost model (our H100's numbers): one round trip repays pinning an 8 MiB
        // buffer in place, so each of the 25 is hot alone; one copy of 8 MiB does not, but
        // 12 through one reused block do; a 1 MiB buffer copied once does not repay pinning.
        let cost = HotPolicy::default();
        let groups = cost.recycled_groups(&h);
        assert_eq!(groups.len(), 1, "{groups:?}");
        assert_eq!(groups[0].call_site, batch);
        let report = Report::new(&h, cost, 10);
        assert_eq!(report.pin_bytes, 8 * MIB + 25 * 8 * MIB + MIB);
        assert_eq!(report.wasted_pinned_bytes, 0);
        let text = report.render();
        assert!(
            text.contains("saves") && text.contains("of pinning"),
            "the report says what each site saves and costs: {text}"
        );
    }

    /// The text report a user acts on: sections in the order of what to do, each ending
    /// with its command; names demangled and folded, module first and whole; mappings
    /// nobody copied counted, listed only with `--all`.
    #[test]
    fn the_text_report_reads_in_the_order_a_user_acts_on_it() {
        let mut h = MemHistory::new();
        h.meta_mut().command = vec!["python".into(), "train.py".into()];
        let site = h.intern_call_site(CallSite {
            module: "/usr/lib/python3/dist-packages/torch/lib/libc10.so".into(),
            offset: 0x3c1f0,
            symbol: Some("_ZN3c109alloc_cpuEm".into()),
        });
        let hot = h.alloc(1, 0x10_0000, 64 << 20, AllocKind::Pageable, Some(site), 0);
        for t in 0..10 {
            h.transfer(
                1,
                0xd000_0000,
                0x10_0000,
                64 << 20,
                CopyDirection::HostToDevice,
                t,
            );
        }
        let pinned_site = h.intern_call_site(CallSite {
            module: "/usr/lib/python3/dist-packages/torch/lib/libtorch_cuda.so".into(),
            offset: 0x99,
            symbol: Some("_ZN2at4cuda12_GLOBAL__N_121CUDAHostAllocatorImpl8allocateEm".into()),
        });
        let wasted = h.alloc(
            1,
            0x4000_0000,
            256 << 20,
            AllocKind::Pinned,
            Some(pinned_site),
            0,
        );
        h.map(1, 0x7000_0000, 512 << 20, 0);
        let text = Report::new(&h, HotPolicy::default(), 10).render();
        let at = |needle: &str| {
            text.find(needle)
                .unwrap_or_else(|| panic!("{needle:?} not in\n{text}"))
        };
        assert!(at("1. What to pin") < at("2. Pinned and wasted"));
        assert!(at("2. Pinned and wasted") < at("3. Pageable and copied often"));
        assert!(at("3. Pageable") < at("4. Device memory"));
        assert!(at("4. Device memory") < at("5. Never copied"));
        assert!(
            text.contains("libc10.so+0x3c1f0 c10::alloc_cpu(…)"),
            "{text}"
        );
        assert!(!text.contains("_ZN3c10"), "{text}");
        assert!(text.contains("-> hotpin run -- python train.py"), "{text}");
        assert_eq!(text.matches("-> hotpin run").count(), 3, "{text}");
        assert!(
            text.contains("mappings and heaps nobody copied, not listed: 1 (512.0 MiB)"),
            "{text}"
        );
        assert!(!text.contains("anonymous mapping of 512.0 MiB"), "{text}");
        let report = Report::new(&h, HotPolicy::default(), 10);
        assert_eq!(report.hot[0].id, hot);
        assert_eq!(report.wasted_pinned[0].id, wasted);
        let all = report.render_with(&RenderOptions {
            all: true,
            full_names: true,
        });
        assert!(all.contains("anonymous mapping of 512.0 MiB"), "{all}");
        assert!(all.contains("c10::alloc_cpu(unsigned long)"), "{all}");
    }

    #[test]
    fn memory_without_a_call_site_is_named_and_device_leaks_are_listed() {
        let mut h = MemHistory::new();
        let site = h.intern_call_site(CallSite {
            module: "/bin/app".into(),
            offset: 0x40,
            symbol: Some("make_weights".into()),
        });
        // A large mapping never copied, a heap, a mapping there before the attach.
        let mapping = h.map(1, 0x7000_0000, 8 << 20, 0);
        h.seed(1, 0x1000_0000, 64 << 20, AllocKind::Mmap, 0);
        let small = h.map(1, 0x7100_0000, 8192, 0);
        let leak = h.alloc(1, 0xd000_0000, 32 << 20, AllocKind::Device, Some(site), 0);
        let freed = h.alloc(1, 0xe000_0000, 4 << 20, AllocKind::Device, Some(site), 0);
        h.free(1, 0xe000_0000, 5);
        let report = Report::new(&h, HotPolicy::transfers(4), 10);
        let names: Vec<&str> = report.cold.iter().map(|r| r.call_site.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "anonymous mapping of 64.0 MiB, there before the tracer attached",
                "anonymous mapping of 8.0 MiB"
            ],
            "largest first; the 8 KiB mapping is not worth a line"
        );
        assert!(report.cold.iter().any(|r| r.id == mapping));
        assert!(!report.cold.iter().any(|r| r.id == small));
        assert_eq!(
            report.device_leaks.iter().map(|r| r.id).collect::<Vec<_>>(),
            vec![leak]
        );
        assert!(!report.device_leaks.iter().any(|r| r.id == freed));
        assert_eq!(report.device_live_bytes, 32 << 20);
        let text = report.render();
        assert!(
            text.contains("still allocated at the end 32.0 MiB"),
            "{text}"
        );
        assert!(text.contains("make_weights"), "{text}");
    }

    #[test]
    fn pinned_memory_is_accounted_per_process_by_who_pinned_it_and_whether_copied() {
        let mut h = MemHistory::new();
        let program = h.intern_call_site(CallSite {
            module: "/lib/libc10.so".into(),
            offset: 0x40,
            symbol: None,
        });
        let hotpin = h.intern_call_site(CallSite {
            module: "/opt/hotpin/libhotpin_preload.so".into(),
            offset: 0x80,
            symbol: None,
        });
        let mib = 1u64 << 20;
        for (start, size, kind, site, copies) in [
            (0x1000_0000, 4 * mib, AllocKind::Pinned, program, 10),
            (0x2000_0000, 2 * mib, AllocKind::Pinned, program, 0),
            (0x3000_0000, 8 * mib, AllocKind::Registered, hotpin, 3),
            (0x4000_0000, 16 * mib, AllocKind::Pageable, program, 5),
        ] {
            h.alloc(7, start, size, kind, Some(site), 0);
            for t in 0..copies {
                h.transfer(7, 0xd000_0000, start, size, CopyDirection::HostToDevice, t);
            }
        }
        // A process whose pinned memory is all copied often wastes none: not in section 2
        // (#42 item 3: a CuPy program's 64 MiB, all copied, was listed there).
        h.alloc(8, 0x5000_0000, 4 * mib, AllocKind::Pinned, Some(program), 0);
        for t in 0..10 {
            h.transfer(
                8,
                0xd000_0000,
                0x5000_0000,
                4 * mib,
                CopyDirection::HostToDevice,
                t,
            );
        }
        let report = Report::new(&h, HotPolicy::default(), 10);
        assert_eq!(
            report
                .pinned
                .iter()
                .find(|a| a.pid == 8)
                .map(|a| a.never_copied_bytes),
            Some(0)
        );
        assert_eq!(
            report.pinned[..1],
            [PinnedAccount {
                pid: 7,
                pinned_bytes: 14 * mib,
                by_hotpin_bytes: 8 * mib,
                copied_bytes: 12 * mib,
                never_copied_bytes: 2 * mib,
                leases: None,
            }]
        );
        let line = "pid 7: 14.0 MiB pinned (6.0 MiB by the program, 8.0 MiB by hotpin); 12.0 MiB \
                    of it copied, 2.0 MiB never";
        let text = report.render();
        assert!(text.contains(line), "{text}");
        assert!(!text.contains("pid 8:"), "{text}");
        let page = crate::html::render(&report, &h, &RenderOptions::default());
        assert!(page.contains(line), "the HTML report says the same");
        assert!(
            !page.contains("pid 8:"),
            "the HTML report leaves it out too"
        );
    }
}
