//! `hotpin --help` and each subcommand's help, as snapshots (insta), as `tracer`'s are: a
//! change to what users read shows up in review. Update with `INSTA_UPDATE=always cargo test
//! -p preload --test help` and read the diff. Needs no root.

use std::process::Command;

fn help(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_hotpin"))
        .args(args)
        .env("COLUMNS", "100")
        .output()
        .expect("run hotpin");
    assert!(output.status.success(), "{args:?}: {output:?}");
    String::from_utf8(output.stdout).expect("UTF-8 help")
}

#[test]
fn the_help_of_hotpin_and_each_subcommand_reads_as_recorded() {
    for (name, args) in [
        ("hotpin", &["--help"][..]),
        ("hotpin-run", &["run", "--help"]),
        ("hotpin-calibrate", &["calibrate", "--help"]),
    ] {
        insta::assert_snapshot!(name, help(args));
    }
}
