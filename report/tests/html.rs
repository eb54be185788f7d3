//! `tracer report --html FILE`: the page holds the text report's sections as sortable tables
//! and the charts over time, computed from the history's timelines; it references nothing on
//! the network; and it loads in headless Chromium with no console message, its script run to
//! the end and its tables sorting right, its screenshot not blank. That test fails, not skips,
//! without Chromium (`cargo xtask setup` installs it).

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use hotpin_history::{
    MemHistory,
    history::{AllocKind, CallSite, Retention},
};
use hotpin_policy::hot::HotPolicy;
use hotpin_registry::registry::CopyDirection;
use hotpin_report::{
    RenderOptions, Report,
    html::{self, CopyBin, Span},
};

const MIB: u64 = 1 << 20;

/// A run with something in every section, and pinned memory that changes over time:
/// - 24 MiB pinned at 0, freed at 200 (copied never: wasted);
/// - 8 MiB pageable at 50, registered at 60, unregistered at 80 (never copied: listed);
/// - 4 MiB registered at 100, freed at 120;
/// - 64 MiB pageable at 0 copied 10 times from 1000 to 1900 (hot);
/// - 32 MiB of device memory left at the end, a 16 MiB mapping nobody copied.
fn history(retention: Retention) -> MemHistory {
    let mut h = MemHistory::with_retention(retention);
    h.meta_mut().command = vec!["python".into(), "train.py".into(), "--note=<b>&".into()];
    let site = h.intern_call_site(CallSite {
        module: "/lib/libc10.so".into(),
        offset: 0x40,
        symbol: Some("_ZN3c109alloc_cpuEm".into()),
    });
    h.alloc(1, 0x10_0000, 64 * MIB, AllocKind::Pageable, Some(site), 0);
    h.alloc(1, 0x4000_0000, 24 * MIB, AllocKind::Pinned, Some(site), 0);
    h.alloc(1, 0xe000_0000, 32 * MIB, AllocKind::Device, Some(site), 0);
    h.map(1, 0x7000_0000, 16 * MIB, 0);
    h.alloc(1, 0x5000_0000, 8 * MIB, AllocKind::Pageable, Some(site), 50);
    h.register(1, 0x5000_0000, 8 * MIB, Some(site), 60);
    h.unregister(1, 0x5000_0000, 80);
    h.register(1, 0x6000_0000, 4 * MIB, Some(site), 100);
    h.free(1, 0x6000_0000, 120);
    h.free(1, 0x4000_0000, 200);
    for i in 0..10 {
        h.transfer(
            1,
            0xd000_0000,
            0x10_0000,
            64 * MIB,
            CopyDirection::HostToDevice,
            1000 + 100 * i,
        );
    }
    h
}

fn html_of(h: &MemHistory) -> String {
    let report = Report::new(h, HotPolicy::default(), 10);
    html::render(&report, h, &RenderOptions::default())
}

#[test]
fn the_pinned_memory_over_time_follows_allocations_frees_and_registrations() {
    let h = history(Retention::default());
    let span = Span::of(&h).expect("a span");
    assert_eq!((span.start_ns, span.end_ns), (0, 1900));
    let series = html::pinned_series(&h, span);
    assert_eq!(
        series.points,
        vec![
            (0, 24 * MIB),
            (60, 32 * MIB),
            (80, 24 * MIB),
            (100, 28 * MIB),
            (120, 24 * MIB),
            (200, 0)
        ]
    );
    assert_eq!(series.peak_bytes, 32 * MIB);
    assert!(series.from_timelines && !series.merged);

    // Without timelines: each pinned allocation's life, its allocation to its free; the
    // registration undone before the free is not seen.
    let h = history(Retention {
        timelines: false,
        max_allocations: None,
    });
    let series = html::pinned_series(&h, Span::of(&h).expect("a span"));
    assert_eq!(
        series.points,
        vec![(0, 24 * MIB), (100, 28 * MIB), (120, 24 * MIB), (200, 0)]
    );
    assert!(!series.from_timelines);
}

#[test]
fn each_hot_allocation_has_its_copies_over_time() {
    let h = history(Retention::default());
    let report = Report::new(&h, HotPolicy::default(), 10);
    let charts = html::charts(&report, &h);
    assert_eq!(charts.copies.len(), report.hot.len());
    let row = &charts.copies[0];
    assert_eq!(row.id, report.hot[0].id);
    assert_eq!(row.bins.len(), html::COPY_BINS);
    let copied: Vec<&CopyBin> = row.bins.iter().filter(|b| b.copies > 0).collect();
    assert_eq!(copied.len(), 10, "one copy every 100 ns: a bin each");
    let each = CopyBin {
        copies: 1,
        bytes: 64 * MIB,
    };
    assert!(copied.iter().all(|&&bin| bin == each), "{copied:?}");
    // The first copy at 1000 of 1900 ns: past the middle of the 200 intervals.
    let first = row.bins.iter().position(|b| b.copies > 0);
    assert_eq!(first, Some(1000 * html::COPY_BINS / 1901));
}

#[test]
fn the_page_holds_every_section_as_sortable_tables_and_the_charts() {
    let page = html_of(&history(Retention::default()));
    let at = |needle: &str| {
        page.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not in\n{page}"))
    };
    assert!(at("1. What to pin, and what it saves") < at("2. Pinned and wasted"));
    assert!(at("2. Pinned and wasted") < at("3. Pageable and copied often"));
    assert!(at("3. Pageable and copied often") < at("4. Device memory"));
    assert!(at("4. Device memory") < at("5. Never copied"));
    assert!(at("5. Never copied") < at("Pinned memory over time"));
    assert!(at("Pinned memory over time") < at("Copies of the most transferred"));
    at("mappings and heaps nobody copied, not listed: 1 (16.0 MiB)");
    at("still allocated at the end 32.0 MiB");
    // Each acting section's command, the recorded command escaped.
    assert_eq!(page.matches("<p class=\"act\">").count(), 3, "{page}");
    at("<code>hotpin run -- python train.py --note=&lt;b&gt;&amp;</code>");
    assert!(!page.contains("<b>&"), "unescaped text: {page}");
    // Names as the text report has them: demangled and folded, whole on hover.
    at("libc10.so+0x40 c10::alloc_cpu(…)");
    at("title=\"libc10.so+0x40 c10::alloc_cpu(unsigned long)\"");
    assert!(!page.contains("_ZN3c10"), "{page}");
    // Sortable tables: every header says how it sorts, every number cell what it sorts by.
    let tables = page.matches("<table class=\"sortable\">").count();
    assert!(tables >= 5, "{tables} tables: {page}");
    let heads = page.matches("<th ").count();
    assert!(heads > 0);
    assert_eq!(
        page.matches("<th scope=\"col\" data-type=\"").count(),
        heads
    );
    assert!(page.contains("<td class=\"num\" data-v=\"67108864\">64.0 MiB</td>"));
    // The charts, drawn by plotters: a step line of pinned memory over its filled area, a
    // bar per interval with copies, a point per call site weighed.
    assert_eq!(page.matches("<svg ").count(), 3, "{page}");
    assert!(
        at("Pinned memory over time")
            < at("<polyline fill=\"none\" opacity=\"1\" stroke=\"#2B6CB0\"")
    );
    at("<polygon");
    let bars = page
        .lines()
        .filter(|l| l.starts_with("<rect ") && l.contains("fill=\"#2B6CB0\""))
        .count();
    assert_eq!(bars, 10, "{page}");
    assert!(at("What pinning saves, against what it costs") < at("<circle "));
    at("aria-label=\"what pinning each call site saves against what it costs\"");
    // Well formed where it counts.
    for tag in ["section", "table", "tr", "svg", "script", "style"] {
        assert_eq!(
            page.matches(&format!("<{tag}")).count(),
            page.matches(&format!("</{tag}>")).count(),
            "<{tag}> opened and closed as often"
        );
    }
}

#[test]
fn the_page_references_nothing_on_the_network() {
    let page = html_of(&history(Retention::default()));
    for network in ["http://", "https://", "//cdn", "url(", "@import", " src="] {
        assert!(!page.contains(network), "{network:?} in the page:\n{page}");
    }
    for link in page.split("href=\"").skip(1) {
        assert!(link.starts_with('#'), "a link off the page: {link:.80}");
    }
    assert!(
        page.contains("content=\"default-src 'none'; style-src 'unsafe-inline'"),
        "the page's policy lets it fetch nothing"
    );
}

#[test]
fn a_history_without_timelines_says_so_in_place_of_the_copies_chart() {
    let page = html_of(&history(Retention {
        timelines: false,
        max_allocations: None,
    }));
    assert!(page.contains("this history keeps no timelines"), "{page}");
    assert_eq!(
        page.matches("<svg ").count(),
        2,
        "the pinned memory and what pinning saves, no copies: {page}"
    );
    let empty = html_of(&MemHistory::new());
    assert!(empty.contains("nothing was pinned"), "{empty}");
    assert!(empty.contains("no host allocation was copied"), "{empty}");
}

#[test]
fn text_is_escaped() {
    assert_eq!(
        html::escape("<a href=\"x\">'&"),
        "&lt;a href=&quot;x&quot;&gt;&#39;&amp;"
    );
}

/// The browsers looked for, in order.
const BROWSERS: [&str; 3] = ["chromium", "chromium-browser", "google-chrome"];

fn browser() -> &'static str {
    BROWSERS
        .into_iter()
        .find(|name| {
            Command::new(name)
                .arg("--version")
                .output()
                .is_ok_and(|out| out.status.success())
        })
        .unwrap_or_else(|| {
            panic!(
                "no headless browser: none of {BROWSERS:?} runs, and the HTML report's test \
                 needs one. `cargo xtask setup` installs chromium (or: apt-get install \
                 chromium)"
            )
        })
}

/// What a headless browser made of `page`: the DOM after its script ran, its log (stderr),
/// and the size of its screenshot.
struct Loaded {
    dom: String,
    log: String,
    screenshot_bytes: u64,
}

/// Loads `page` (written to `dir`) in a headless browser, 1200x2000, with `#selftest`.
fn load(dir: &Path, name: &str, page: &str) -> Loaded {
    let file = dir.join(format!("{name}.html"));
    std::fs::write(&file, page).expect("write the page");
    let screenshot = dir.join(format!("{name}.png"));
    let (dom_path, log_path) = (
        dir.join(format!("{name}.dom")),
        dir.join(format!("{name}.log")),
    );
    let output = |path: &PathBuf| Stdio::from(std::fs::File::create(path).expect("an output"));
    let mut child = Command::new(browser())
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--hide-scrollbars",
        ])
        .args([
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1200,2000",
        ])
        .arg(format!(
            "--user-data-dir={}",
            dir.join(format!("{name}-profile")).display()
        ))
        .arg(format!("--screenshot={}", screenshot.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}#selftest", file.display()))
        .stdin(Stdio::null())
        .stdout(output(&dom_path))
        .stderr(output(&log_path))
        .spawn()
        .expect("start the browser");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the browser") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the browser did not finish loading {} in 120 s",
                file.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = std::fs::read_to_string(log_path).unwrap_or_default();
    assert!(status.success(), "the browser failed ({status}):\n{log}");
    Loaded {
        dom: std::fs::read_to_string(dom_path).expect("the DOM"),
        log,
        screenshot_bytes: std::fs::metadata(screenshot).map_or(0, |m| m.len()),
    }
}

#[test]
fn the_page_loads_in_headless_chromium_with_no_console_message() {
    let dir = std::env::temp_dir().join(format!("hotpin-html-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let loaded = load(&dir, "report", &html_of(&history(Retention::default())));
    // Any console message (an uncaught error, a resource the page's policy refused) fails.
    let console: Vec<&str> = loaded
        .log
        .lines()
        .filter(|line| line.contains(":CONSOLE"))
        .collect();
    assert!(console.is_empty(), "console messages: {console:#?}");
    assert!(
        loaded.dom.contains("data-js=\"ready\""),
        "the page's script did not run to its end:\n{}\n{}",
        loaded.dom,
        loaded.log
    );
    let selftest = loaded
        .dom
        .split("data-selftest=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or("(not run)");
    assert!(
        selftest.starts_with("pass: ") && !selftest.starts_with("pass: 0 "),
        "sorting every column both ways: {selftest}"
    );
    // Not blank: a page with nothing in it, shot the same way, is an eighth of its size.
    let blank = load(
        &dir,
        "blank",
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>blank</title></head>\
         <body></body></html>",
    );
    assert!(
        loaded.screenshot_bytes > 2 * blank.screenshot_bytes.max(1000),
        "the screenshot is blank: {} bytes, a blank page's {}",
        loaded.screenshot_bytes,
        blank.screenshot_bytes
    );
    let _ = std::fs::remove_dir_all(dir);
}
