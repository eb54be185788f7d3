//! Builds `tracer-ebpf` for the BPF target with aya-build; the agent embeds the object.
use anyhow::Context as _;
use aya_build::{Package, Toolchain};

fn main() -> anyhow::Result<()> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?;
    let workspace = std::path::Path::new(&manifest_dir)
        .parent()
        .context("tracer-agent has a parent directory")?;
    let ebpf_dir = workspace.join("tracer-ebpf");
    let common_dir = workspace.join("tracer-common");
    println!("cargo:rerun-if-changed={}", common_dir.display());
    let ebpf_dir = ebpf_dir.to_str().context("workspace path is not UTF-8")?;
    aya_build::build_ebpf(
        [Package {
            name: "tracer-ebpf",
            root_dir: ebpf_dir,
            ..Default::default()
        }],
        Toolchain::default(),
    )
    .context("building tracer-ebpf (run `cargo xtask setup` if bpf-linker or nightly rust-src is missing)")
}
