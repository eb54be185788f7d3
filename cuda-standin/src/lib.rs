//! TEST FIXTURE: a stand-in for the CUDA runtime (`libcudart.so.13`) and driver
//! (`libcuda.so.1`), for machines without a GPU: CI, the build machine, and the no-GPU demo.
//!
//! It is not CUDA and is never shipped as CUDA. It exports the entry points the tracer probes
//! with their real signatures and return codes; device memory is host memory, pinned memory
//! is page-aligned and mlocked, and each runtime call goes through the driver function
//! beneath it (the runtime dlopens `libcuda.so.1`, as the real one does).
//!
//! It models CUDA's synchronisation rules (`c/standin.h` has the details), so that a program
//! whose results are right only because its "pageable" memory makes copies synchronous
//! computes wrong results here once that memory is secretly pinned:
//!
//! - it knows every pinned (allocated or registered) and device block; any other host
//!   address is pageable, and the pointer questions (`cuPointerGetAttribute(s)`,
//!   `cudaPointerGetAttributes`, `cudaHostGetFlags`, ...) answer accordingly;
//! - streams (legacy, per-thread, created) run their operations in order on worker threads,
//!   each no earlier than `HOTPIN_STANDIN_ASYNC_DELAY_US` microseconds (default 20000) after
//!   it was enqueued unless someone waits for it (then at once), so unsynchronised races
//!   show every time while synchronised programs stay fast; the legacy stream and blocking
//!   streams wait for each other;
//! - an async copy of pinned (or device) memory happens later, on the stream; one from
//!   pageable memory is staged at the call; one into pageable memory is synchronous;
//!   synchronous copies wait for the legacy stream and every blocking stream;
//! - events, host functions (`cuLaunchHostFunc`, the tests' kernels) and linear stream
//!   capture into graphs, which refuses pageable copies and synchronisation (error 900) and
//!   is then invalidated (901).
//!
//! Configuration, read from the environment of the process that loads it:
//! `HOTPIN_STANDIN_NO_DEVICE=1` makes every call fail with "no device";
//! `HOTPIN_STANDIN_FAIL_PIN_EVERY=N` makes every Nth pinning call fail with "out of memory";
//! `HOTPIN_STANDIN_ASYNC_DELAY_US=N` sets the delay above (0: none);
//! `HOTPIN_STANDIN_PAGEABLE_GBPS=G` makes a copy to or from pageable memory spend at least
//! its bytes / G GB/s in the call, as a host with slow pageable copies would (unset: as fast
//! as memcpy).

use std::{
    fs, io,
    ops::Deref,
    path::{Path, PathBuf},
};

/// File name of the runtime stand-in.
pub const RUNTIME_NAME: &str = "libcudart.so.13";
/// File name of the driver stand-in.
pub const DRIVER_NAME: &str = "libcuda.so.1";

const BUILD_DIR: &str = env!("CUDA_STANDIN_BUILD_DIR");

/// Where the two stand-in libraries were installed.
#[derive(Clone, Debug)]
pub struct Installed {
    /// The directory holding both: put it on `LD_LIBRARY_PATH` so the runtime finds the driver.
    pub dir: PathBuf,
    pub runtime: PathBuf,
    pub driver: PathBuf,
}

/// Copies the stand-in libraries into `dir` (created if missing) under their CUDA names.
pub fn install(dir: &Path) -> io::Result<Installed> {
    fs::create_dir_all(dir)?;
    let installed = Installed {
        dir: dir.to_path_buf(),
        runtime: dir.join(RUNTIME_NAME),
        driver: dir.join(DRIVER_NAME),
    };
    for (name, to) in [
        (RUNTIME_NAME, &installed.runtime),
        (DRIVER_NAME, &installed.driver),
    ] {
        let from = Path::new(BUILD_DIR).join(name);
        // Copy to a temporary name and rename, so a process mapping the old file keeps it.
        let tmp = to.with_extension("tmp");
        fs::copy(&from, &tmp).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("copying {} to {}: {e}", from.display(), tmp.display()),
            )
        })?;
        fs::rename(&tmp, to)?;
    }
    Ok(installed)
}

/// The stand-in installed in a fresh folder of one test's own under the temporary directory,
/// `hotpin-NAME-PID`. The folder goes when the guard drops: a passing test leaves nothing behind
/// (copies of programs and histories add up to gigabytes over a test run). A failing test's
/// folder is kept, and named on stderr, for its evidence.
#[derive(Debug)]
pub struct Scratch {
    installed: Installed,
}

impl Scratch {
    pub fn new(name: &str) -> io::Result<Scratch> {
        let dir = std::env::temp_dir().join(format!("hotpin-{name}-{}", std::process::id()));
        match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        Ok(Scratch {
            installed: install(&dir)?,
        })
    }
}

impl Deref for Scratch {
    type Target = Installed;

    fn deref(&self) -> &Installed {
        &self.installed
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {} for the failing test", self.installed.dir.display());
        } else if let Err(e) = fs::remove_dir_all(&self.installed.dir) {
            eprintln!("could not remove {}: {e}", self.installed.dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_puts_both_libraries_under_their_cuda_names() {
        let dir = std::env::temp_dir().join(format!("standin-test-{}", std::process::id()));
        let installed = install(&dir).expect("install into a temp dir");
        for path in [&installed.runtime, &installed.driver] {
            let bytes = fs::read(path).expect("installed library is readable");
            assert_eq!(
                &bytes[..4],
                b"\x7fELF",
                "{} is not an ELF file",
                path.display()
            );
        }
        fs::remove_dir_all(&dir).expect("clean up");
    }
}
