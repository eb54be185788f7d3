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
    /// Functions that begin with `endbr64` (x86-64 code built for CET, as NVIDIA's libraries
    /// are): a probe goes after it, see [`Self::probe_offset`].
    endbr: std::collections::HashSet<u64>,
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
        let mut endbr = std::collections::HashSet::new();
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
            const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
            if x86_64 && data.get(offset as usize..offset as usize + 4) == Some(&ENDBR64[..]) {
                endbr.insert(offset);
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
            endbr,
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

    /// Where to probe `name`: its first instruction, or the one after a leading `endbr64`.
    /// The kernel steps an instruction it cannot emulate out of line, a second trap on every
    /// hit; `endbr64` is one of those, while the `push` that usually follows it is emulated
    /// (Linux 6.x). Arguments and the return address are where they were at entry: `endbr64`
    /// changes no register and no memory.
    pub fn probe_offset(&self, name: &str) -> Option<u64> {
        let offset = self.offset(name)?;
        Some(if self.endbr.contains(&offset) {
            offset + 4
        } else {
            offset
        })
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }
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
