//! ELF symbol tables: a library is parsed once, and each probed symbol becomes a file offset.
//!
//! aya can resolve a symbol by name itself, but it re-reads and re-parses the whole file for
//! every symbol; libcuda is tens of megabytes and the registry names dozens of symbols.

use std::{collections::HashMap, fs, path::Path};

use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

use crate::error::TracerError;

/// Function symbols of one ELF file as file offsets (what uprobes attach to), by name and by
/// address.
#[derive(Debug, Default)]
pub struct SymbolTable {
    offsets: HashMap<String, u64>,
    /// Functions whose probe goes past their first bytes (`endbr64`, a 5-byte nop), by file
    /// offset: how many bytes; see [`entry_skip`].
    skips: HashMap<u64, u64>,
    /// (file offset, size, name), sorted by offset.
    functions: Vec<(u64, u64, String)>,
    build_id: Option<Vec<u8>>,
}

impl SymbolTable {
    /// Reads the dynamic and static symbol tables of `path`.
    pub fn read(path: &Path) -> Result<Self, TracerError> {
        let io_error = |source| TracerError::Io {
            what: format!("reading {}", path.display()),
            source,
        };
        let file = fs::File::open(path).map_err(io_error)?;
        // Mapped, not read: libraries such as libtorch_cuda are gigabytes, and only the ELF
        // headers, the symbol tables and the build-id note are touched.
        // SAFETY: the mapping is read-only and dropped before this function returns; a file
        // truncated meanwhile could fault, as with any reader of shared libraries.
        let data = unsafe { memmap2::Mmap::map(&file) }.map_err(io_error)?;
        let file = object::File::parse(&*data).map_err(|source| TracerError::Elf {
            path: path.to_path_buf(),
            source,
        })?;
        let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
        let x86_64 = file.architecture() == object::Architecture::X86_64;
        let mut skips = HashMap::new();
        let mut offsets = HashMap::new();
        let mut functions = Vec::new();
        for symbol in file.dynamic_symbols().chain(file.symbols()) {
            if symbol.kind() != object::SymbolKind::Text || !symbol.is_definition() {
                continue;
            }
            let (Ok(name), Some(index)) = (symbol.name(), symbol.section_index()) else {
                continue;
            };
            let Ok(section) = file.section_by_index(index) else {
                continue;
            };
            let Some((section_offset, _)) = section.file_range() else {
                continue;
            };
            let Some(offset) = symbol
                .address()
                .checked_sub(section.address())
                .and_then(|delta| delta.checked_add(section_offset))
            else {
                continue;
            };
            if x86_64 {
                let code = data.get(offset as usize..).unwrap_or(&[]);
                let skip = entry_skip(&code[..code.len().min(16)]);
                if skip > 0 {
                    skips.insert(offset, skip);
                }
            }
            // A versioned name ("cudaMemcpy@@libcudart.so.13") is found under its base name too.
            let base = name.split('@').next().unwrap_or(name);
            offsets.entry(base.to_string()).or_insert(offset);
            // Rust names are shown demangled, without the hash.
            let shown = format!("{:#}", rustc_demangle::demangle(base));
            functions.push((offset, symbol.size(), shown));
        }
        functions.sort();
        functions.dedup_by_key(|f| f.0);
        Ok(Self {
            offsets,
            skips,
            functions,
            build_id,
        })
    }

    /// The ELF build id (the GNU build-id note), if the file has one.
    pub fn build_id(&self) -> Option<&[u8]> {
        self.build_id.as_deref()
    }

    /// The function whose code contains the file offset `offset`.
    pub fn function_at(&self, offset: u64) -> Option<&str> {
        let index = self
            .functions
            .partition_point(|f| f.0 <= offset)
            .checked_sub(1)?;
        let (start, size, name) = &self.functions[index];
        (offset - start < (*size).max(1)).then_some(name.as_str())
    }

    /// The file offset of `name`, if the file defines it.
    pub fn offset(&self, name: &str) -> Option<u64> {
        self.offsets.get(name).copied()
    }

    /// Where to probe `name`: its first instruction, or the one after a leading `endbr64`
    /// and 5-byte nop ([`entry_skip`]).
    pub fn probe_offset(&self, name: &str) -> Option<u64> {
        let offset = self.offset(name)?;
        Some(offset + self.skips.get(&offset).copied().unwrap_or(0))
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }
}

/// How many bytes at the start of an x86-64 function a probe goes past: a leading `endbr64`,
/// then a 5-byte nop (`nopl 0x0(%rax,%rax,1)`, what `-fpatchable-function-entry` and
/// tracing hooks put there). Neither changes a register or memory, so arguments and the
/// return address are where they were at entry.
/// - `endbr64`: the kernel cannot emulate it and steps it out of line, a second trap on every
///   hit; the `push` that usually follows is emulated (Linux 6.x).
/// - The 5-byte nop: Linux 6.18 optimises a uprobe there into a call through a trampoline,
///   and a process forked after such a probe was hit dies of SIGSEGV at its next call of the
///   function (docs/benchmarks.md, "Uprobes on a 5-byte nop"). A probe is never placed on one.
pub fn entry_skip(code: &[u8]) -> u64 {
    const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
    const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
    let mut skip = 0;
    if code.starts_with(&ENDBR64) {
        skip += ENDBR64.len();
    }
    if code[skip..].starts_with(&NOP5) {
        skip += NOP5.len();
    }
    skip as u64
}

/// The ELF build id of a file, reading only its headers and notes.
pub fn read_build_id(path: &Path) -> Option<Vec<u8>> {
    let file = fs::File::open(path).ok()?;
    // SAFETY: as in `SymbolTable::read`.
    let data = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let file = object::File::parse(&*data).ok()?;
    file.build_id().ok().flatten().map(<[u8]>::to_vec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_functions_of_the_standin_runtime_at_their_file_offsets() {
        let dir = std::env::temp_dir().join(format!("symbols-test-{}", std::process::id()));
        let installed = cuda_standin::install(&dir).expect("install the stand-in");
        let table = SymbolTable::read(&installed.runtime).expect("parse the stand-in runtime");
        let offset = table.offset("cudaMemcpy").expect("cudaMemcpy is exported");
        assert!(offset > 0, "a function cannot sit at offset 0");
        assert!(table.offset("cudaMemcpy2DAsync_ptsz").is_some());
        assert_eq!(table.function_at(offset), Some("cudaMemcpy"));
        assert_eq!(table.function_at(offset + 1), Some("cudaMemcpy"));
        assert_eq!(
            table.build_id().map(<[u8]>::len),
            Some(20),
            "gcc links a build id"
        );
        assert_eq!(table.offset("noSuchFunction"), None);
        // Built for CET like NVIDIA's libraries: the probe goes after the leading endbr64.
        #[cfg(target_arch = "x86_64")]
        {
            let bytes = std::fs::read(&installed.runtime).expect("read the stand-in");
            let at = offset as usize;
            assert_eq!(
                &bytes[at..at + 4],
                &[0xf3, 0x0f, 0x1e, 0xfa],
                "endbr64 first"
            );
            assert_eq!(table.probe_offset("cudaMemcpy"), Some(offset + 4));
        }
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn a_probe_goes_past_endbr64_and_a_five_byte_nop_never_onto_them() {
        let endbr = [0xf3, 0x0f, 0x1e, 0xfa];
        let nop5 = [0x0f, 0x1f, 0x44, 0x00, 0x00];
        let push = [0x55];
        assert_eq!(entry_skip(&[&endbr[..], &push].concat()), 4);
        assert_eq!(entry_skip(&[&endbr[..], &nop5, &push].concat()), 9);
        assert_eq!(entry_skip(&[&nop5[..], &push].concat()), 5);
        assert_eq!(entry_skip(&push), 0);
        // A 4-byte nop (`nopl 0x0(%rax)`) is stepped out of line, not optimised: left alone.
        assert_eq!(entry_skip(&[0x0f, 0x1f, 0x40, 0x00, 0x55]), 0);
        assert_eq!(entry_skip(&endbr[..3]), 0, "cut short");
        assert_eq!(entry_skip(&[]), 0);
    }

    #[test]
    fn a_file_that_is_not_elf_is_a_clear_error() {
        let path = std::env::temp_dir().join(format!("not-elf-{}", std::process::id()));
        std::fs::write(&path, b"hello").expect("write a temp file");
        let error = SymbolTable::read(&path).expect_err("not ELF");
        assert!(
            error.to_string().contains(&path.display().to_string()),
            "{error}"
        );
        std::fs::remove_file(&path).expect("clean up");
    }
}
