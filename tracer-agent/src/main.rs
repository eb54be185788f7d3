//! `tracer`: parses the command line and calls the library (see `cli`).

mod cli;

/// Marks this executable as a tracer (`identity::TRACER_SECTION`): a tracer watching every
/// process (`tracer daemon`) never takes another for a target when it opens a CUDA library to
/// read its symbols.
#[unsafe(link_section = ".hotpin_tracer")]
#[used]
static TRACER_MARK: [u8; 16] = *b"hotpin tracer\0\0\0";

fn main() -> std::process::ExitCode {
    // Referenced, so that no linker drops the section.
    std::hint::black_box(&TRACER_MARK);
    cli::main()
}
