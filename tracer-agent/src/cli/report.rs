//! `tracer report FILE` and `tracer report PROGRAM`.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::{Context as _, Result, bail};
use hotpin_history::dump::{self, DumpError};
use hotpin_history::history::MemHistory;
use hotpin_history::store::Store;
use hotpin_policy::cost::CostModel;
use hotpin_policy::hot::HotPolicy;
use hotpin_report::{RenderOptions, Report, html};

use super::ReportArgs;

pub fn run(args: ReportArgs) -> Result<ExitCode> {
    if let Some(html) = &args.html
        && hotpin_history::files::same_file(html, &args.file)
    {
        bail!(
            "--html {} is the history being reported: give another output file",
            html.display()
        );
    }
    let history = load(&args.file, &args.store)?;
    let policy = match (args.min_transfers, &args.costs) {
        (Some(min_transfers), _) => HotPolicy {
            min_transfers_per_mib: args.min_transfers_per_mib,
            ..HotPolicy::transfers(min_transfers)
        },
        (None, Some(path)) => HotPolicy::with_cost(CostModel::load(path)?.model),
        // The calibrated file the allocator reads, when there is one: report and use mode agree.
        (None, None) => HotPolicy::configured()?,
    };
    let mut report = Report::new(&history, policy, args.top);
    if let Some(limit) = args.budget {
        report = report.under_budget(limit);
    }
    let options = RenderOptions {
        all: args.all,
        full_names: args.full_names,
    };
    if let Some(path) = &args.html {
        write_html(&report, &history, &options, path)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render_with(&options));
    }
    Ok(ExitCode::SUCCESS)
}

/// `--html FILE`: the report as one self-contained page, written whole (a temporary file
/// renamed over `path`, never through a link), said on stderr.
fn write_html(
    report: &Report,
    history: &MemHistory,
    options: &RenderOptions,
    path: &Path,
) -> Result<()> {
    let page = html::render(report, history, options);
    hotpin_history::files::write_atomically(path, page.as_bytes(), 0o644)
        .with_context(|| format!("cannot write the HTML report to {}", path.display()))?;
    eprintln!(
        "tracer: the HTML report written to {} (it opens in a browser with no network)",
        path.display()
    );
    Ok(())
}

/// The history to report: the file `file`, else the latest history in the store at `store`
/// of the program `file` names. A file that is not a history (`tracer report train.py` beside
/// the script) is looked up in the store by its name too, and stays the error when the store
/// has no program of that name.
fn load(file: &Path, store: &Path) -> Result<MemHistory> {
    if !file.exists() {
        let program = file.to_string_lossy();
        return match latest_in_store(&program, store)? {
            Some(path) => Ok(dump::read(&path)?),
            None => bail!(
                "{program}: no such file, and no history of a program {program} in the store {} \
                 (`tracer daemon` writes them there)",
                store.display()
            ),
        };
    }
    match dump::read(file) {
        Err(not_history @ DumpError::NotAHistory { .. }) => {
            let program = file
                .file_name()
                .map_or_else(|| file.to_string_lossy(), |name| name.to_string_lossy());
            match latest_in_store(&program, store)? {
                Some(path) => Ok(dump::read(&path)?),
                None => Err(not_history.into()),
            }
        }
        read => Ok(read?),
    }
}

/// The latest history in the store at `store` of the program a user names `program`, said
/// on stderr when there is one.
fn latest_in_store(program: &str, store: &Path) -> Result<Option<PathBuf>> {
    let store = Store::open_existing(store);
    let Some(key) = store.find_program(program)? else {
        return Ok(None);
    };
    let latest = store.latest_of(&key)?;
    if let Some(path) = &latest {
        eprintln!("tracer: the latest history of {key}: {}", path.display());
    }
    Ok(latest)
}
