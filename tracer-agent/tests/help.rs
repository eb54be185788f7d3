//! `tracer --help` and each subcommand's help, as snapshots (insta): a change to what users
//! read shows up in review. Update with `INSTA_UPDATE=always cargo test --test help` and read
//! the diff. Needs no root.

use std::process::Command;

fn help(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .args(args)
        .env("COLUMNS", "100")
        .output()
        .expect("run tracer");
    assert!(output.status.success(), "{args:?}: {output:?}");
    String::from_utf8(output.stdout).expect("UTF-8 help")
}

#[test]
fn the_help_of_tracer_and_each_subcommand_reads_as_recorded() {
    for (name, args) in [
        ("tracer", &["--help"][..]),
        ("tracer-record", &["record", "--help"]),
        ("tracer-probes", &["probes", "--help"]),
        ("tracer-report", &["report", "--help"]),
        ("tracer-export", &["export", "--help"]),
        ("tracer-daemon", &["daemon", "--help"]),
    ] {
        insta::assert_snapshot!(name, help(args));
    }
}
