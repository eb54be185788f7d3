//! `tracer report --html FILE`: the report as one HTML page that opens with no network (its
//! style and script inline; a Content-Security-Policy that lets it fetch nothing): the text
//! report's sections as tables sorted by a click on a column's header, the pinned memory over
//! time, when each hot allocation was copied, and what pinning each call site saves against
//! what it costs (the charts drawn as SVG by plotters, in `plots`).
//!
//! What the charts show is computed first, as plain data ([`Charts`]: [`PinnedSeries`],
//! [`CopyRow`]), from the history's timelines; [`render_page`] only draws it. Every text put
//! in the page goes through [`escape`].

mod plots;

use std::fmt::Write as _;

use hotpin_history::history::{AllocEvent, AllocKind, Allocation, MemHistory};

use crate::{
    CALLERS_SHOWN, LARGE_BYTES, RenderOptions, Report, ReportRow, SiteAdvice, bytes, names, seconds,
};

/// The page's style and script, kept beside this file.
const CSS: &str = include_str!("html/report.css");
const SCRIPT: &str = include_str!("html/report.js");
/// Nothing fetched, nothing but the page's own style and script run.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'";

/// Intervals a hot allocation's copies are counted in, across the recording.
pub const COPY_BINS: usize = 200;
/// Steps of the pinned memory drawn at most; past it, each of half as many intervals shows
/// the most pinned within it.
pub const MAX_POINTS: usize = 2000;

/// The time the charts share: from the first thing the history saw to the last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Span {
    /// From the first timestamp of the history's allocations to the last (allocations,
    /// frees, copies, every timeline event); `None` for a history with no allocation.
    pub fn of(history: &MemHistory) -> Option<Span> {
        let mut times = history.allocations().iter().flat_map(|a| {
            [
                Some(a.alloc_ns),
                a.free_ns,
                a.stats.first_transfer_ns,
                a.stats.last_transfer_ns,
            ]
            .into_iter()
            .flatten()
            .chain(a.events.iter().map(AllocEvent::ts_ns))
        });
        let first = times.next()?;
        let (start_ns, end_ns) = times.fold((first, first), |(lo, hi), t| (lo.min(t), hi.max(t)));
        Some(Span { start_ns, end_ns })
    }

    pub fn len_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// Which of `bins` equal intervals of the span `ts_ns` falls in.
    fn bin(&self, ts_ns: u64, bins: usize) -> usize {
        let width = u128::from(self.len_ns()) + 1;
        let at = u128::from(ts_ns.saturating_sub(self.start_ns)).min(width - 1);
        usize::try_from(at * bins as u128 / width)
            .unwrap_or(usize::MAX)
            .min(bins.saturating_sub(1))
    }
}

/// Pinned (and registered) host memory over the recording: a step function.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PinnedSeries {
    /// (ns from the span's start, bytes pinned from then on), in time order, from (0, _).
    pub points: Vec<(u64, u64)>,
    pub peak_bytes: u64,
    /// Whether the history has timelines (registrations and unregistrations seen), or only
    /// each allocation's allocation and free times.
    pub from_timelines: bool,
    /// Whether there were more than [`MAX_POINTS`] steps, merged to the most pinned within
    /// each of `MAX_POINTS / 2` intervals.
    pub merged: bool,
}

/// Copies counted in one interval of the recording.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyBin {
    /// Copy events (a run of identical copies the kernel counted together is one).
    pub copies: u64,
    pub bytes: u64,
}

/// One hot allocation's copies over the recording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyRow {
    pub id: u64,
    /// Its name as the report has it (demangled, whole).
    pub name: String,
    /// Its copies in each of [`COPY_BINS`] equal intervals of the span; empty where its
    /// allocation is not in the history.
    pub bins: Vec<CopyBin>,
}

/// What the page's charts show.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Charts {
    /// `None`: the history has no allocation, nothing to draw.
    pub span: Option<Span>,
    pub pinned: PinnedSeries,
    /// The report's hot allocations, most transferred first.
    pub copies: Vec<CopyRow>,
}

/// The charts of `report`, from the `history` it was made of.
pub fn charts(report: &Report, history: &MemHistory) -> Charts {
    let span = Span::of(history);
    Charts {
        span,
        pinned: span
            .map(|span| pinned_series(history, span))
            .unwrap_or_default(),
        copies: span
            .map(|span| copy_rows(report, history, span))
            .unwrap_or_default(),
    }
}

/// When `a` became pinned (+ its size) and stopped being (- its size). From its timeline:
/// pinned from its allocation when made pinned (or registered, with no registration event),
/// from a registration, until an unregistration or its free. Without a timeline: from its
/// allocation to its free when it is pinned or registered.
fn pinned_changes(a: &Allocation, out: &mut Vec<(u64, i128)>) {
    let size = i128::from(a.size);
    if a.events.is_empty() {
        if a.kind.is_pinned() {
            out.push((a.alloc_ns, size));
            out.extend(a.free_ns.map(|free| (free, -size)));
        }
        return;
    }
    let registered_later = a
        .events
        .iter()
        .any(|e| matches!(e, AllocEvent::Register { .. }));
    let mut pinned = false;
    for event in &a.events {
        let now = match event {
            AllocEvent::Alloc { .. } => {
                a.kind == AllocKind::Pinned
                    || (a.kind == AllocKind::Registered && !registered_later)
            }
            AllocEvent::Register { .. } => true,
            AllocEvent::Unregister { .. } | AllocEvent::Free { .. } => false,
            AllocEvent::Transfer { .. } | AllocEvent::PageFault { .. } => pinned,
        };
        if now != pinned {
            out.push((event.ts_ns(), if now { size } else { -size }));
            pinned = now;
        }
    }
}

/// The level after each time of `changes`, from 0 at `start_ns`; one point per time.
fn step_points(mut changes: Vec<(u64, i128)>, start_ns: u64) -> Vec<(u64, u64)> {
    changes.sort_by_key(|&(ts, _)| ts);
    let mut points = vec![(0, 0)];
    let mut level: i128 = 0;
    for (ts, delta) in changes {
        level += delta;
        let at = ts.saturating_sub(start_ns);
        let pinned = u64::try_from(level.max(0)).unwrap_or(u64::MAX);
        match points.last_mut() {
            Some(last) if last.0 == at => last.1 = pinned,
            _ => points.push((at, pinned)),
        }
    }
    points
}

/// `points` merged into `bins` intervals of `span`, each the most pinned within it, then the
/// level at the end.
fn merge_points(points: &[(u64, u64)], span: Span, bins: usize) -> Vec<(u64, u64)> {
    let mut merged: Vec<(usize, u64, u64)> = Vec::new();
    for &(at, pinned) in points {
        let bin = span.bin(span.start_ns.saturating_add(at), bins);
        match merged.last_mut() {
            Some(last) if last.0 == bin => last.2 = last.2.max(pinned),
            _ => merged.push((bin, at, pinned)),
        }
    }
    let mut out: Vec<(u64, u64)> = merged.into_iter().map(|(_, at, b)| (at, b)).collect();
    if let Some(&(at, pinned)) = points.last()
        && out
            .last()
            .is_some_and(|&(last_at, last)| last_at < at && last != pinned)
    {
        out.push((at, pinned));
    }
    out
}

/// The pinned host memory of `history` over `span`.
pub fn pinned_series(history: &MemHistory, span: Span) -> PinnedSeries {
    let mut changes = Vec::new();
    let mut from_timelines = false;
    for a in history.allocations().iter().filter(|a| a.kind.is_host()) {
        from_timelines |= !a.events.is_empty();
        pinned_changes(a, &mut changes);
    }
    let points = step_points(changes, span.start_ns);
    let peak_bytes = points.iter().map(|&(_, b)| b).max().unwrap_or(0);
    let merged = points.len() > MAX_POINTS;
    let points = if merged {
        merge_points(&points, span, MAX_POINTS / 2)
    } else {
        points
    };
    PinnedSeries {
        points,
        peak_bytes,
        from_timelines,
        merged,
    }
}

/// `a`'s copies (its timeline's transfer events) in [`COPY_BINS`] intervals of `span`.
fn copy_bins(a: &Allocation, span: Span) -> Vec<CopyBin> {
    let mut bins = vec![CopyBin::default(); COPY_BINS];
    for event in &a.events {
        if let AllocEvent::Transfer { ts_ns, bytes, .. } = *event
            && let Some(bin) = bins.get_mut(span.bin(ts_ns, COPY_BINS))
        {
            bin.copies += 1;
            bin.bytes = bin.bytes.saturating_add(bytes);
        }
    }
    bins
}

/// The copies over `span` of the report's hot allocations.
pub fn copy_rows(report: &Report, history: &MemHistory, span: Span) -> Vec<CopyRow> {
    report
        .hot
        .iter()
        .map(|row| CopyRow {
            id: row.id,
            name: row.call_site.clone(),
            bins: history
                .allocation(row.id)
                .filter(|a| a.id == row.id && a.pid == row.pid)
                .map(|a| copy_bins(a, span))
                .unwrap_or_default(),
        })
        .collect()
}

/// `text` safe in HTML, as an element's content or an attribute's value (quoted).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` escaped, what is between backquotes set as code.
fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, part) in escape(text).split('`').enumerate() {
        if i % 2 == 1 {
            out.push_str("<code>");
            out.push_str(part);
            out.push_str("</code>");
        } else {
            out.push_str(part);
        }
    }
    out
}

/// The report as one HTML page, its charts from the `history` it was made of.
pub fn render(report: &Report, history: &MemHistory, options: &RenderOptions) -> String {
    render_page(report, &charts(report, history), options)
}

/// The page: the header, the text report's five sections, then the charts.
pub fn render_page(report: &Report, charts: &Charts, options: &RenderOptions) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let title = if report.command.is_empty() {
        "hotpin report".to_owned()
    } else {
        format!("hotpin report: {}", report.command.join(" "))
    };
    let _ = writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n\
         <title>{}</title>\n<style>\n{CSS}</style>\n</head>\n<body>",
        escape(&title)
    );
    header(&mut out, report);
    out.push_str("<main>\n");
    pin_section(&mut out, report, options);
    wasted_section(&mut out, report, options);
    pageable_section(&mut out, report, options);
    device_section(&mut out, report, options);
    never_copied_section(&mut out, report, options);
    pinned_chart(&mut out, report, charts);
    copies_chart(&mut out, charts, options);
    saving_chart(&mut out, report, options);
    let _ = writeln!(
        out,
        "</main>\n<script>\n{SCRIPT}</script>\n</body>\n</html>"
    );
    out
}

/// What was recorded, and the links to the sections.
fn header(out: &mut String, report: &Report) {
    let _ = writeln!(
        out,
        "<header>\n<p class=\"headline\">{}</p>\n<h1>hotpin report</h1>\n<dl class=\"meta\">",
        escape(&report.headline)
    );
    let mut item = |name: &str, value: String| {
        let _ = writeln!(out, "<dt>{}</dt><dd>{}</dd>", escape(name), escape(&value));
    };
    if !report.command.is_empty() {
        item("command", report.command.join(" "));
    }
    item("processes", format!("{:?}", report.pids));
    if let Some(written) = report.checkpoint_unix_s {
        let age = hotpin_history::dump::unix_now().saturating_sub(written);
        item(
            "CHECKPOINT",
            format!(
                "written {age} s ago (at {written} s since the epoch) while the recording went \
                 on: the tracer stopped before its final write, so what came after is missing"
            ),
        );
    }
    item("CUDA calls", report.calls_text());
    item(
        "transfers",
        format!(
            "{}; host->device {}, device->host {}",
            report.transfers,
            bytes(report.h2d_bytes),
            bytes(report.d2h_bytes)
        ),
    );
    item("lost events", report.lost_events.to_string());
    item("policy", report.policy_text());
    if report.folded_allocations > 0 {
        item(
            "bounded",
            format!(
                "{} freed allocations folded into {} groups by call site and size (counted in \
                 the totals and recycled buffers, not listed)",
                report.folded_allocations, report.folded_groups
            ),
        );
    }
    let _ = writeln!(
        out,
        "</dl>\n<nav><a href=\"#pin\">what to pin</a> <a href=\"#wasted\">pinned and wasted</a> \
         <a href=\"#pageable\">pageable</a> <a href=\"#device\">device memory</a> \
         <a href=\"#never\">never copied</a> <a href=\"#pinned-over-time\">pinned over time</a> \
         <a href=\"#copies-over-time\">copies over time</a> \
         <a href=\"#saving-against-cost\">saving against cost</a></nav>\n</header>"
    );
}

fn section_start(out: &mut String, id: &str, title: &str) {
    let _ = writeln!(
        out,
        "<section id=\"{}\">\n<h2>{}</h2>",
        escape(id),
        escape(title)
    );
}

fn section_end(out: &mut String) {
    let _ = writeln!(out, "</section>");
}

/// A paragraph of `text` (backquoted parts as code).
fn para(out: &mut String, text: &str) {
    let _ = writeln!(out, "<p>{}</p>", prose(text));
}

/// A remark on what is shown, set apart.
fn note(out: &mut String, text: &str) {
    let _ = writeln!(out, "<p class=\"note\">{}</p>", prose(text));
}

/// The command that acts on a section, and why.
fn act(out: &mut String, report: &Report, why: &str) {
    let _ = writeln!(
        out,
        "<p class=\"act\">&rarr; <code>{}</code> {}</p>",
        escape(&report.act()),
        prose(why)
    );
}

/// What to pin, and what it saves (1).
fn pin_section(out: &mut String, report: &Report, options: &RenderOptions) {
    section_start(out, "pin", "1. What to pin, and what it saves");
    if report.pin_sites.is_empty() {
        para(out, "no call site is hot: nothing to pin");
    } else {
        let unmatched = report.pin_sites.iter().any(|site| !site.use_mode_matches);
        para(out, &pin_summary(report, unmatched));
        site_table(out, report, &report.pin_sites, unmatched, options);
        for staging in report
            .pin_sites
            .iter()
            .filter_map(|site| site.staging.as_ref())
        {
            para(out, &staging.advice());
        }
    }
    if let Some(summary) = report.budget_summary() {
        para(out, &summary);
        if !report.over_budget_sites.is_empty() {
            site_table(out, report, &report.over_budget_sites, false, options);
        }
    }
    if report.untracked_hot_bytes > 0 {
        para(
            out,
            &format!(
                "{} of hot memory has no allocating call site (memory no probe saw allocated, \
                 anonymous mappings, the heap); run with the hotpin allocator to attribute it \
                 to call sites",
                bytes(report.untracked_hot_bytes)
            ),
        );
    }
    recycled_table(out, report, options);
    if !report.hot.is_empty() {
        para(out, "the most transferred host allocations:");
        allocation_table(out, &report.hot, options);
    }
    if report.unresolved_copies > 0 {
        para(
            out,
            &format!(
                "{} copies whose direction could not be known (in neither direction's bytes)",
                report.unresolved_copies
            ),
        );
    }
    act(
        out,
        report,
        "(auto mode pins these as the program runs; `hotpin run --mode use --history FILE -- \
         ...` pins exactly these from this history)",
    );
    section_end(out);
}

/// "pin the hot allocations of these call sites: 64.0 MiB, saving ...".
fn pin_summary(report: &Report, unmatched: bool) -> String {
    let saving: f64 = report.pin_sites.iter().map(|s| s.saving_s).sum();
    let cost: f64 = report.pin_sites.iter().map(|s| s.cost_s).sum();
    let mut text = format!(
        "pin the hot allocations of these call sites: {}",
        bytes(report.pin_bytes)
    );
    if report.policy.cost.is_some() {
        let _ = write!(
            text,
            ", saving {} of copies for {} of pinning",
            seconds(saving),
            seconds(cost)
        );
    }
    if unmatched {
        text.push_str(
            "; use mode recognises only those marked * when the program runs again (the others \
             are memory known only as a mapping made outside Python, or with no call site: \
             record with libc's allocator, `tracer record --libc-malloc`, as `hotpin run --mode \
             profile` does)",
        );
    }
    text
}

/// The recycled groups: buffers each rarely copied, hot as a group.
fn recycled_table(out: &mut String, report: &Report, options: &RenderOptions) {
    if report.recycled.is_empty() {
        return;
    }
    para(
        out,
        "recycled buffers (each rarely transferred, hot as a group: few alive at once):",
    );
    let rows: Vec<Vec<Cell>> = report
        .recycled
        .iter()
        .map(|g| {
            vec![
                Cell::site(&g.call_site, &[], options),
                Cell::size(g.size),
                Cell::number(g.allocations),
                Cell::number(g.transfers),
                Cell::number(g.peak_live),
            ]
        })
        .collect();
    let heads = [
        ("call site", false),
        ("size", true),
        ("allocations", true),
        ("transfers", true),
        ("peak alive", true),
    ];
    table(out, &heads, &rows);
}

/// What is pinned and wasted (2).
fn wasted_section(out: &mut String, report: &Report, options: &RenderOptions) {
    section_start(out, "wasted", "2. Pinned and wasted");
    para(
        out,
        &format!(
            "{} pinned and copied too rarely to repay it (largest first)",
            bytes(report.wasted_pinned_bytes)
        ),
    );
    for account in report.wasting_accounts() {
        para(out, &crate::pinned_summary(account));
    }
    if !report.wasted_pinned.is_empty() {
        allocation_table(out, &report.wasted_pinned, options);
    }
    for partly in &report.partly_copied {
        para(out, &partly.listed(str::to_owned));
    }
    if !report.unpin_sites.is_empty() {
        para(out, "stop pinning these call sites:");
        site_table(out, report, &report.unpin_sites, false, options);
    }
    if report.wasted_pinned_bytes > 0 {
        act(
            out,
            report,
            "(serves pinned requests pageable and pins only what their copies repay, unseen by \
             the program: docs/transparency.md)",
        );
    }
    section_end(out);
}

/// Pageable memory copied often (3).
fn pageable_section(out: &mut String, report: &Report, options: &RenderOptions) {
    section_start(out, "pageable", "3. Pageable and copied often");
    para(
        out,
        &format!(
            "{} (what pinning would speed up)",
            bytes(report.candidate_bytes)
        ),
    );
    if !report.candidates.is_empty() {
        allocation_table(out, &report.candidates, options);
        act(out, report, "");
    }
    section_end(out);
}

/// Device memory still allocated at the end (4).
fn device_section(out: &mut String, report: &Report, options: &RenderOptions) {
    section_start(out, "device", "4. Device memory");
    para(
        out,
        &format!(
            "peak {}, still allocated at the end {}",
            bytes(report.device_peak_bytes),
            bytes(report.device_live_bytes)
        ),
    );
    if !report.device_leaks.is_empty() {
        allocation_table(out, &report.device_leaks, options);
    }
    section_end(out);
}

/// Memory never copied (5): mappings and heaps nobody copied only with `--all`.
fn never_copied_section(out: &mut String, report: &Report, options: &RenderOptions) {
    section_start(out, "never", "5. Never copied");
    para(
        out,
        &format!("{} and more (largest first)", bytes(LARGE_BYTES)),
    );
    let never = report.never_copied(options.all);
    if !never.is_empty() {
        allocation_table(out, &never, options);
    }
    if !options.all && report.hidden_mappings > 0 {
        para(
            out,
            &format!(
                "mappings and heaps nobody copied, not listed: {} ({}); `tracer report --all` \
                 lists them",
                report.hidden_mappings,
                bytes(report.hidden_mapping_bytes)
            ),
        );
    }
    section_end(out);
}

/// A table cell: what it shows (HTML) and what it sorts by (its text where `None`).
struct Cell {
    html: String,
    key: Option<String>,
    class: &'static str,
}

impl Cell {
    fn text(text: &str) -> Cell {
        Cell {
            html: escape(text),
            key: None,
            class: "",
        }
    }

    fn number(n: u64) -> Cell {
        Cell {
            html: n.to_string(),
            key: Some(n.to_string()),
            class: "num",
        }
    }

    fn size(n: u64) -> Cell {
        Cell {
            html: escape(&bytes(n)),
            key: Some(n.to_string()),
            class: "num",
        }
    }

    fn duration(s: f64) -> Cell {
        Cell {
            html: escape(&seconds(s)),
            key: Some(s.to_string()),
            class: "num",
        }
    }

    /// A name as the text report shows it (folded unless `--full-names`), whole on hover,
    /// its callers under it; sorted by the name shown.
    fn site(name: &str, callers: &[String], options: &RenderOptions) -> Cell {
        let shown = options.name(name);
        let mut html = format!("<span title=\"{}\">{}</span>", escape(name), escape(&shown));
        if !callers.is_empty() {
            let limit = if options.full_names {
                usize::MAX
            } else {
                CALLERS_SHOWN
            };
            let listed: Vec<String> = callers
                .iter()
                .take(limit)
                .map(|c| options.name(c))
                .collect();
            let more = callers.len() - listed.len();
            let rest = if more > 0 {
                format!(" <- ({more} more)")
            } else {
                String::new()
            };
            let _ = write!(
                html,
                "<div class=\"callers\">called from {}{}</div>",
                escape(&listed.join(" <- ")),
                escape(&rest)
            );
        }
        Cell {
            html,
            key: Some(shown),
            class: "site",
        }
    }
}

/// A table sorted by a click on a column's header; `heads`: each column's name and whether
/// it sorts as a number.
fn table(out: &mut String, heads: &[(&str, bool)], rows: &[Vec<Cell>]) {
    out.push_str("<table class=\"sortable\">\n<thead><tr>");
    for &(head, numeric) in heads {
        let kind = if numeric { "num" } else { "text" };
        let head = escape(head);
        let _ = write!(
            out,
            "<th scope=\"col\" data-type=\"{kind}\" title=\"sort by {head}\">{head}</th>"
        );
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let class = if cell.class.is_empty() {
                String::new()
            } else {
                format!(" class=\"{}\"", cell.class)
            };
            let key = cell
                .key
                .as_ref()
                .map(|key| format!(" data-v=\"{}\"", escape(key)))
                .unwrap_or_default();
            let _ = write!(out, "<td{class}{key}>{}</td>", cell.html);
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
}

/// Allocations, with the text report's columns.
fn allocation_table(out: &mut String, rows: &[ReportRow], options: &RenderOptions) {
    let heads = [
        ("id", true),
        ("call site", false),
        ("nth", true),
        ("size", true),
        ("kind", false),
        ("transfers", true),
        ("to GPU", true),
        ("from GPU", true),
    ];
    let cells: Vec<Vec<Cell>> = rows
        .iter()
        .map(|r| {
            vec![
                Cell::number(r.id),
                Cell::site(&r.call_site, &r.callers, options),
                Cell::number(u64::from(r.ordinal)),
                Cell::size(r.size),
                Cell::text(&kind_name(r.kind)),
                Cell::number(r.transfers),
                Cell::size(r.h2d_bytes),
                Cell::size(r.d2h_bytes),
            ]
        })
        .collect();
    table(out, &heads, &cells);
}

/// `pinned`, `device`, ...: the kind as the JSON report names it.
fn kind_name(kind: AllocKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Call sites to pin or to stop pinning; `marked`: a column with `*` for those use mode
/// recognises.
fn site_table(
    out: &mut String,
    report: &Report,
    sites: &[SiteAdvice],
    marked: bool,
    options: &RenderOptions,
) {
    let costed = report.policy.cost.is_some();
    let mut heads = Vec::new();
    if marked {
        heads.push(("use mode", false));
    }
    heads.extend([
        ("call site", false),
        ("allocations", true),
        ("bytes", true),
        ("transfers", true),
    ]);
    if costed {
        heads.extend([("saves", true), ("costs", true)]);
    }
    let rows: Vec<Vec<Cell>> = sites
        .iter()
        .map(|site| {
            let mut row = Vec::new();
            if marked {
                row.push(Cell::text(if site.use_mode_matches { "*" } else { "" }));
            }
            row.extend([
                Cell::site(&site.call_site, site.python_line.as_slice(), options),
                Cell::number(site.allocations),
                Cell::size(site.bytes),
                Cell::number(site.transfers),
            ]);
            if costed {
                row.extend([Cell::duration(site.saving_s), Cell::duration(site.cost_s)]);
            }
            row
        })
        .collect();
    table(out, &heads, &rows);
}

/// Puts a chart drawn by [`plots`] in the page, named `label` for screen readers, or says
/// why it could not be drawn. In HTML an inline SVG needs no namespace: it is left out, so
/// the page names no other address at all.
fn embed(out: &mut String, label: &str, drawn: Result<String, String>) {
    match drawn {
        Ok(svg) => {
            let named = format!("<svg role=\"img\" aria-label=\"{}\" ", escape(label));
            out.push_str(
                &svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1)
                    .replacen("<svg ", &named, 1),
            );
            out.push('\n');
        }
        Err(why) => note(out, &format!("the chart could not be drawn: {why}")),
    }
}

/// The pinned memory over time: a step chart, its area filled.
fn pinned_chart(out: &mut String, report: &Report, charts: &Charts) {
    section_start(out, "pinned-over-time", "Pinned memory over time");
    let series = &charts.pinned;
    let Some(span) = charts.span.filter(|_| series.peak_bytes > 0) else {
        para(out, "nothing was pinned while the recording went on");
        section_end(out);
        return;
    };
    para(out, &pinned_caption(report, series, span));
    let points: Vec<(f64, u64)> = series
        .points
        .iter()
        .map(|&(at, pinned)| (at as f64 / 1e9, pinned))
        .collect();
    embed(
        out,
        "pinned host memory over time",
        plots::pinned(&points, span.len_ns() as f64 / 1e9, series.peak_bytes),
    );
    section_end(out);
}

/// What the pinned chart shows, and what it leaves out.
fn pinned_caption(report: &Report, series: &PinnedSeries, span: Span) -> String {
    let mut text = format!(
        "pinned and registered host memory over the {} recorded, at most {}",
        seconds(span.len_ns() as f64 / 1e9),
        bytes(series.peak_bytes)
    );
    text.push_str(if series.from_timelines {
        ": from the allocations' timelines (allocations, frees, registrations, \
         unregistrations)"
    } else {
        ": from each pinned allocation's allocation and free times (this history keeps no \
         timelines, `tracer record --verbose` does: a registration undone before the free is \
         not seen)"
    });
    if series.merged {
        text.push_str("; each step is the most pinned within its interval");
    }
    if report.folded_allocations > 0 {
        text.push_str("; the freed allocations folded to bound the history are not drawn");
    }
    text
}

/// When each hot allocation was copied: a row each, a bar per interval with copies, as
/// high as its bytes (against the most bytes of any interval).
fn copies_chart(out: &mut String, charts: &Charts, options: &RenderOptions) {
    section_start(
        out,
        "copies-over-time",
        "Copies of the most transferred allocations over time",
    );
    let rows = &charts.copies;
    let bins = || rows.iter().flat_map(|row| &row.bins);
    let copied = bins().any(|bin| bin.copies > 0);
    let most = bins().map(|bin| bin.bytes).max().unwrap_or(0).max(1);
    let Some(span) = charts.span.filter(|_| copied) else {
        para(
            out,
            if rows.is_empty() {
                "no host allocation was copied"
            } else {
                "this history keeps no timelines, only totals: `tracer record --verbose` keeps \
                 when each copy was made"
            },
        );
        section_end(out);
        return;
    };
    let span_s = span.len_ns() as f64 / 1e9;
    note(
        out,
        &format!(
            "each row an allocation, most transferred first; each bar its copies within one \
             of {COPY_BINS} intervals of the {} recorded, as high as their bytes (the tables \
             above have each allocation's numbers)",
            seconds(span_s)
        ),
    );
    let width = span_s / COPY_BINS as f64;
    let bars: Vec<plots::CopyBars> = rows
        .iter()
        .map(|row| plots::CopyBars {
            label: format!(
                "#{} {}",
                row.id,
                names::shorten(&options.name(&row.name), 50)
            ),
            bars: row
                .bins
                .iter()
                .enumerate()
                .filter(|(_, bin)| bin.copies > 0)
                .map(|(j, bin)| (width * j as f64, width * (j + 1) as f64, bin.bytes))
                .collect(),
        })
        .collect();
    embed(
        out,
        "copies of the most transferred allocations over time",
        plots::copies(&bars, span_s, most),
    );
    section_end(out);
}

/// Call sites named on the saving-against-cost chart at most.
const SITES_NAMED: usize = 8;

/// What pinning each call site saves against what it costs (the sites the report advises
/// pinning, and those it advises to stop pinning), under the cost model.
fn saving_chart(out: &mut String, report: &Report, options: &RenderOptions) {
    section_start(
        out,
        "saving-against-cost",
        "What pinning saves, against what it costs",
    );
    let sites: Vec<plots::SitePoint> = report
        .pin_sites
        .iter()
        .chain(&report.unpin_sites)
        .filter(|site| site.saving_s > 0.0 || site.cost_s > 0.0)
        .map(|site| plots::SitePoint {
            label: names::shorten(&options.name(&site.call_site), 40),
            saving_s: site.saving_s,
            cost_s: site.cost_s,
        })
        .collect();
    if report.policy.cost.is_none() || sites.is_empty() {
        para(
            out,
            "no call site to weigh: the report was made without a cost model, or nothing was \
             copied from pinned or hot memory",
        );
        section_end(out);
        return;
    }
    note(
        out,
        &format!(
            "each point a call site: the copy time pinning its hot allocations saves over the \
             run, against what registering and unregistering them costs; above the diagonal \
             pinning pays (blue), below it does not (red); the {SITES_NAMED} that save most \
             are named"
        ),
    );
    embed(
        out,
        "what pinning each call site saves against what it costs",
        plots::saving_against_cost(&sites, SITES_NAMED),
    );
    section_end(out);
}
