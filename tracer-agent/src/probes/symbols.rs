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
    build_id: Option<Vec<u8>>,
}

/// The functions `file` defines (dynamic symbols, then static ones), as (name, file offset,
/// size); call sites are named by [`FunctionIndex`], which reads the same entries more
/// lightly.
fn functions<'data, 'file>(
    file: &'file object::File<'data>,
) -> impl Iterator<Item = (&'data str, u64, u64)> + 'file {
    file.dynamic_symbols()
        .chain(file.symbols())
        .filter(|symbol| symbol.kind() == object::SymbolKind::Text && symbol.is_definition())
        .filter_map(|symbol| {
            let name = symbol.name().ok()?;
            let section = file.section_by_index(symbol.section_index()?).ok()?;
            let (section_offset, _) = section.file_range()?;
            let offset = symbol
                .address()
                .checked_sub(section.address())?
                .checked_add(section_offset)?;
            Some((name, offset, symbol.size()))
        })
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
        for (name, offset, _) in functions(&file) {
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
        }
        Ok(Self {
            offsets,
            skips,
            build_id,
        })
    }

    /// The ELF build id (the GNU build-id note), if the file has one.
    pub fn build_id(&self) -> Option<&[u8]> {
        self.build_id.as_deref()
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

/// The functions of a 64-bit ELF file by code offset, to name call sites. Lighter than
/// [`SymbolTable`] for a large library (libtorch_cuda): the scan reads only the symbol
/// entries (24 bytes each), no name and no code, and keeps 24 bytes per function; a name is
/// read from the mapped file when a call site asks for it, and kept (shown) for the next.
pub struct FunctionIndex {
    data: memmap2::Mmap,
    /// Sorted by start, one per start.
    functions: Vec<IndexedFunction>,
    /// Names shown so far, by position in `functions`: a call site is asked for again and
    /// again (every allocation it makes, every frame of a walk), and demangling costs
    /// microseconds.
    shown: HashMap<usize, String>,
}

#[derive(Clone, Copy)]
struct IndexedFunction {
    /// File offset of the first instruction.
    start: u64,
    /// Where its NUL-terminated name starts in the file, and where that string table ends.
    name: u64,
    names_end: u64,
    size: u64,
}

impl std::fmt::Debug for FunctionIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FunctionIndex")
            .field("functions", &self.functions.len())
            .finish()
    }
}

impl FunctionIndex {
    /// Indexes the function symbols of `path` (its dynamic and static symbol tables).
    pub fn read(path: &Path) -> Result<Self, TracerError> {
        use object::{
            elf,
            read::elf::{FileHeader as _, SectionHeader as _, Sym as _},
        };
        let io_error = |source| TracerError::Io {
            what: format!("reading {}", path.display()),
            source,
        };
        let elf_error = |source| TracerError::Elf {
            path: path.to_path_buf(),
            source,
        };
        let file = fs::File::open(path).map_err(io_error)?;
        // SAFETY: read-only; a file truncated meanwhile could fault, as with any reader of
        // shared libraries.
        let data = unsafe { memmap2::Mmap::map(&file) }.map_err(io_error)?;
        let mut functions = Vec::new();
        {
            let bytes: &[u8] = &data;
            let header =
                elf::FileHeader64::<object::Endianness>::parse(bytes).map_err(elf_error)?;
            let endian = header.endian().map_err(elf_error)?;
            let sections = header.sections(endian, bytes).map_err(elf_error)?;
            for kind in [elf::SHT_DYNSYM, elf::SHT_SYMTAB] {
                let table = sections.symbols(endian, bytes, kind).map_err(elf_error)?;
                let Some((names, names_size)) = sections
                    .section(table.string_section())
                    .ok()
                    .and_then(|s| s.file_range(endian))
                else {
                    continue;
                };
                for symbol in table.symbols() {
                    let kind = symbol.st_type();
                    let index = symbol.st_shndx(endian);
                    if (kind != elf::STT_FUNC && kind != elf::STT_GNU_IFUNC)
                        || index == elf::SHN_UNDEF
                        || index >= elf::SHN_LORESERVE
                    {
                        continue;
                    }
                    let Some((section_offset, section_address)) = sections
                        .section(object::SectionIndex(index.into()))
                        .ok()
                        .and_then(|s| Some((s.file_range(endian)?.0, s.sh_addr(endian))))
                    else {
                        continue;
                    };
                    let Some(start) = symbol
                        .st_value(endian)
                        .checked_sub(section_address)
                        .and_then(|delta| delta.checked_add(section_offset))
                    else {
                        continue;
                    };
                    functions.push(IndexedFunction {
                        start,
                        name: names + u64::from(symbol.st_name(endian)),
                        names_end: names + names_size,
                        size: symbol.st_size(endian),
                    });
                }
            }
        }
        functions.sort_by_key(|f| f.start);
        functions.dedup_by_key(|f| f.start);
        functions.shrink_to_fit();
        // The symbol entries were read once: give their pages back (the file keeps them in
        // the page cache); a name read later brings in only its own page.
        // SAFETY: the mapping is read-only and shared with the file, so dropping its pages
        // loses nothing: they are read again from the file when touched.
        let _ = unsafe { data.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
        Ok(Self {
            data,
            functions,
            shown: HashMap::new(),
        })
    }

    /// The name of the function whose code contains the file offset `offset` (a Rust name
    /// demangled, without its hash; a versioned name without its version).
    pub fn function_at(&mut self, offset: u64) -> Option<String> {
        let index = self
            .functions
            .partition_point(|f| f.start <= offset)
            .checked_sub(1)?;
        let function = self.functions[index];
        if offset - function.start >= function.size.max(1) {
            return None;
        }
        if let Some(shown) = self.shown.get(&index) {
            return Some(shown.clone());
        }
        let names = self
            .data
            .get(function.name as usize..function.names_end as usize)?;
        let name = &names[..names.iter().position(|&b| b == 0)?];
        let name = std::str::from_utf8(name).ok()?;
        let base = name.split('@').next().unwrap_or(name);
        let shown = format!("{:#}", rustc_demangle::demangle(base));
        self.shown.insert(index, shown.clone());
        Some(shown)
    }

    pub fn len(&self) -> usize {
        self.functions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
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
        let mut index = FunctionIndex::read(&installed.runtime).expect("index the stand-in");
        assert_eq!(index.function_at(offset).as_deref(), Some("cudaMemcpy"));
        assert_eq!(index.function_at(offset + 1).as_deref(), Some("cudaMemcpy"));
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

    /// The light index (object's low-level ELF reader) names every function as object's
    /// high-level reader does: the stand-in runtime (C, endbr64) and this test binary (Rust,
    /// thousands of functions).
    #[test]
    fn the_function_index_names_functions_as_the_high_level_reader_does() {
        let dir = std::env::temp_dir().join(format!("index-test-{}", std::process::id()));
        let installed = cuda_standin::install(&dir).expect("install the stand-in");
        let exe = std::env::current_exe().expect("this test binary");
        for path in [installed.runtime.as_path(), exe.as_path()] {
            let table = SymbolTable::read(path).expect("symbol table");
            let mut index = FunctionIndex::read(path).expect("function index");
            let data = std::fs::read(path).expect("read the file");
            let file = object::File::parse(&*data).expect("ELF");
            // (file offset, size, name shown), one per start: what the table used to keep.
            let mut expected: Vec<(u64, u64, String)> = functions(&file)
                .map(|(name, offset, size)| {
                    let base = name.split('@').next().unwrap_or(name);
                    (
                        offset,
                        size,
                        format!("{:#}", rustc_demangle::demangle(base)),
                    )
                })
                .collect();
            expected.sort();
            expected.dedup_by_key(|f| f.0);
            assert_eq!(index.len(), expected.len(), "{}", path.display());
            // Functions folded into one (identical code) share a start: any of their names
            // is right.
            let mut names_at: HashMap<u64, Vec<String>> = HashMap::new();
            for (name, &at) in &table.offsets {
                let shown = format!("{:#}", rustc_demangle::demangle(name));
                names_at.entry(at).or_default().push(shown);
            }
            for &(start, size, ref name) in &expected {
                for at in [start, start + size.max(1) - 1] {
                    let found = index.function_at(at).expect("named");
                    assert!(
                        found == *name || names_at.get(&start).is_some_and(|n| n.contains(&found)),
                        "{at:#x}: {found} for {name}"
                    );
                }
            }
            // Nothing is named in the ELF header, as before.
            let named_at = |at: u64| {
                let i = expected.partition_point(|f| f.0 <= at).checked_sub(1)?;
                let (start, size, name) = &expected[i];
                (at - start < (*size).max(1)).then(|| name.clone())
            };
            assert_eq!(index.function_at(0), named_at(0));
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
        let error = FunctionIndex::read(&path).expect_err("not ELF");
        assert!(
            error.to_string().contains(&path.display().to_string()),
            "{error}"
        );
        std::fs::remove_file(&path).expect("clean up");
    }
}
