//! `tracer report FILE`.

use std::process::ExitCode;

use anyhow::Result;
use tracer_agent::{
    dump,
    report::{HotPolicy, Report},
};

use super::ReportArgs;

pub fn run(args: ReportArgs) -> Result<ExitCode> {
    let history = dump::read(&args.file)?;
    let policy = HotPolicy {
        min_transfers: args.min_transfers,
        min_transfers_per_mib: args.min_transfers_per_mib,
    };
    let report = Report::new(&history, policy, args.top);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render());
    }
    Ok(ExitCode::SUCCESS)
}
