//! Builds `tracer-ebpf` for the BPF target with aya-build; the agent embeds the object.
//!
//! `HOTPIN_EBPF_OBJECT=PATH` embeds an object built already instead: `cargo xtask test` builds
//! it once and every build of the run (clippy, debug, test, fuzz) takes that one, where
//! aya-build would compile the kernel programs and `core` again for each (about 40 s each on
//! two cores).
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use aya_build::{Package, Toolchain};

/// The variable naming a prebuilt object.
const PREBUILT: &str = "HOTPIN_EBPF_OBJECT";

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-env-changed={PREBUILT}");
    if let Some(object) = std::env::var_os(PREBUILT) {
        let object = PathBuf::from(object);
        println!("cargo:rerun-if-changed={}", object.display());
        let out = PathBuf::from(std::env::var_os("OUT_DIR").context("OUT_DIR")?);
        std::fs::copy(&object, out.join("tracer-ebpf"))
            .with_context(|| format!("{PREBUILT}={}: cannot copy it", object.display()))?;
        return Ok(());
    }
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?;
    let workspace = Path::new(&manifest_dir)
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
