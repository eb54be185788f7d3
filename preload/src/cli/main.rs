//! `hotpin`: run an unmodified program with hotpin, and measure this machine's costs.
//!
//! ```sh
//! hotpin run --mode profile -- python train.py            # record a history (the tracer)
//! hotpin run --mode use --history H.hotpin -- python train.py
//! hotpin calibrate                                         # copy and pinning costs here
//! ```

// Nothing here may panic on what a user, a program, the environment or a file hands it:
// checked by these lints outside tests (an index or an unwrap needs a written reason).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

mod calibrate;
mod run;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// hotpin for programs nobody changed: pins, while they run, the host memory their copies make
/// worth pinning, and nothing else.
#[derive(Parser, Debug)]
#[command(name = "hotpin", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a command with hotpin's interposer (LD_PRELOAD); in profile mode, record it with
    /// the tracer instead.
    Run(run::RunArgs),
    /// Measure copy bandwidths and pinning costs on this machine's GPU and write the cost
    /// file the allocator reads.
    Calibrate(calibrate::CalibrateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Calibrate(args) => calibrate::run(args),
    };
    match result {
        Ok(code) => code,
        // hotpin's own failure, not the program's: 125, as `env` and `timeout` give.
        Err(error) => {
            eprintln!("hotpin: {error:#}");
            ExitCode::from(125)
        }
    }
}
