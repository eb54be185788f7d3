//! What a file is, by its ELF contents rather than its name (#41): a CUDA runtime or driver,
//! or hotpin's interposer, makes the process that opens it a CUDA process; a tracer (this
//! program, in any build) is never taken for one. The kernel side matches library opens by
//! name prefix (`libcud*`, `libhotpin*`), which a `rustc` opening `libhotpin_lease-*.rmeta` or
//! a program opening cuDNN first also matches: the agent looks at the file before it takes
//! the process for a target.

use std::{collections::HashMap, os::unix::fs::MetadataExt as _, path::Path};

use object::{Object as _, ObjectSymbol as _};

/// The section every build of the tracer carries (`main.rs` puts it there), by which another
/// tracer is told from a program.
pub const TRACER_SECTION: &str = ".hotpin_tracer";

/// Symbols one of which a CUDA runtime, a CUDA driver or hotpin's interposer exports.
const CUDA_SYMBOLS: [&str; 4] = ["cudaMalloc", "cudaHostAlloc", "cuInit", "cuMemHostAlloc"];

/// What a file was found to be, by (device, inode), so each file is read once.
#[derive(Debug, Default)]
pub struct Identities {
    cuda: HashMap<(u64, u64), bool>,
    tracer: HashMap<(u64, u64), bool>,
}

impl Identities {
    /// Whether `path` is a CUDA runtime or driver, or hotpin's interposer: an ELF file that
    /// exports one of their functions. A file that cannot be read is not.
    pub fn is_cuda_library(&mut self, path: &Path) -> bool {
        let Some(key) = file_key(path) else {
            return false;
        };
        *self
            .cuda
            .entry(key)
            .or_insert_with(|| elf(path, exports_cuda).unwrap_or(false))
    }

    /// Whether process `pid` runs a tracer: this very program, or any build of it (its
    /// executable carries [`TRACER_SECTION`]).
    pub fn is_tracer(&mut self, pid: u32) -> bool {
        let exe = format!("/proc/{pid}/exe");
        let Some(key) = file_key(Path::new(&exe)) else {
            return false;
        };
        if file_key(Path::new("/proc/self/exe")) == Some(key) {
            return true;
        }
        *self.tracer.entry(key).or_insert_with(|| {
            elf(Path::new(&exe), |file| {
                file.section_by_name(TRACER_SECTION).is_some()
            })
            .unwrap_or(false)
        })
    }
}

fn file_key(path: &Path) -> Option<(u64, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    meta.is_file().then(|| (meta.dev(), meta.ino()))
}

/// `look` at the ELF file at `path`, mapped (libraries may be gigabytes; only headers and
/// tables are touched); None if it is not one.
fn elf<T>(path: &Path, look: impl FnOnce(&object::File<'_>) -> T) -> Option<T> {
    let file = std::fs::File::open(path).ok()?;
    // SAFETY: read-only and dropped before returning; a file truncated meanwhile could fault,
    // as with any reader of shared libraries.
    let data = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let parsed = object::File::parse(&*data).ok()?;
    Some(look(&parsed))
}

fn exports_cuda(file: &object::File<'_>) -> bool {
    file.dynamic_symbols().any(|symbol| {
        symbol.is_definition()
            && symbol.name().is_ok_and(|name| {
                let base = name.split('@').next().unwrap_or(name);
                CUDA_SYMBOLS.contains(&base)
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_is_no_tracer_and_no_cuda_library() {
        let mut ids = Identities::default();
        // The test binary is this very process: "this program" by inode.
        assert!(ids.is_tracer(std::process::id()));
        assert!(!ids.is_cuda_library(Path::new("/proc/self/exe")));
        assert!(!ids.is_cuda_library(Path::new("/nonexistent/libcudart.so.13")));
        // A file named like a CUDA library that is not one.
        let dir = std::env::temp_dir().join(format!("identity-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a folder");
        let fake = dir.join("libcudart.so.13");
        std::fs::write(&fake, b"not an ELF").expect("a file");
        assert!(!ids.is_cuda_library(&fake));
        std::fs::remove_dir_all(&dir).ok();
    }
}
