//! `tracer`: parses the command line and calls the library (see `cli`).

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
