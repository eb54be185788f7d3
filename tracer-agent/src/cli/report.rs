//! `tracer report FILE`.

use std::process::ExitCode;

use anyhow::Result;
use hotpin_history::cost::CostModel;
use tracer_agent::{
    dump,
    report::{HotPolicy, Report},
};

use super::ReportArgs;

pub fn run(args: ReportArgs) -> Result<ExitCode> {
    let history = dump::read(&args.file)?;
    let policy = match (args.min_transfers, &args.costs) {
        (Some(min_transfers), _) => HotPolicy {
            min_transfers_per_mib: args.min_transfers_per_mib,
            ..HotPolicy::transfers(min_transfers)
        },
        (None, Some(path)) => HotPolicy::with_cost(CostModel::load(path)?.model),
        // The calibrated file the allocator reads, when there is one: report and use mode agree.
        (None, None) => HotPolicy::configured()?,
    };
    let report = Report::new(&history, policy, args.top);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render());
    }
    Ok(ExitCode::SUCCESS)
}
