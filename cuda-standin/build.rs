//! Builds the stand-in libraries (C, see c/standin.h) into OUT_DIR as real shared objects.
use std::{env, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let compiler = cc::Build::new().get_compiler();
    for (source, soname, libs) in [
        ("c/driver.c", "libcuda.so.1", &["-lpthread"][..]),
        ("c/runtime.c", "libcudart.so.13", &["-ldl", "-lpthread"][..]),
    ] {
        println!("cargo:rerun-if-changed={source}");
        let status = compiler
            .to_command()
            .args(["-O2", "-g", "-fPIC", "-shared", "-fvisibility=hidden"])
            .args(["-fno-omit-frame-pointer", "-Wall", "-Wextra", "-Werror"])
            // Functions start with endbr64, as NVIDIA's libraries do (built for CET): the
            // tracer's probes go after it, and the tests run that path.
            .args(cet_flags())
            .arg(format!("-Wl,-soname,{soname}"))
            .arg("-o")
            .arg(out.join(soname))
            .arg(source)
            .args(libs)
            .status()
            .unwrap_or_else(|e| panic!("cannot run the C compiler for {source}: {e}"));
        assert!(status.success(), "building {source} failed: {status}");
    }
    println!("cargo:rerun-if-changed=c/standin.h");
    println!("cargo:rustc-env=CUDA_STANDIN_BUILD_DIR={}", out.display());
}

/// `-fcf-protection=full` where the target is x86-64 (the only one with endbr64).
fn cet_flags() -> &'static [&'static str] {
    match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => &["-fcf-protection=full"],
        _ => &[],
    }
}
