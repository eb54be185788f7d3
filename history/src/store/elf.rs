//! The GNU build id of an ELF file: what tells two builds of one program apart. A small reader
//! of 64-bit little-endian ELF files, for the store's program keys; the file is untrusted
//! input, so every offset and size it claims is checked before it is used.

use std::{fs::File, io, os::unix::fs::FileExt as _, path::Path};

/// The first bytes of an ELF file.
const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// `EI_CLASS` of a 64-bit file.
const ELFCLASS64: u8 = 2;
/// `EI_DATA` of a little-endian file.
const ELFDATA2LSB: u8 = 1;
/// Size of the ELF64 file header.
const FILE_HEADER_BYTES: usize = 64;
/// Size of an ELF64 program header and of a section header (`e_phentsize`, `e_shentsize` may
/// say more, never less).
const PROGRAM_HEADER_BYTES: usize = 56;
const SECTION_HEADER_BYTES: usize = 64;
/// A segment of notes, and a section of notes.
const PT_NOTE: u32 = 4;
const SHT_NOTE: u32 = 7;
/// The note type of a build id, with the owner name `GNU`.
const NT_GNU_BUILD_ID: u32 = 3;
const GNU_OWNER: &[u8] = b"GNU\0";
/// Most bytes of a header table read (a real one is a few KiB; a forged one may claim 4 GiB).
const MAX_TABLE_BYTES: usize = 1 << 20;
/// Most bytes of notes read from one segment or section (real ones hold a few hundred).
const MAX_NOTES_BYTES: u64 = 1 << 16;

/// The GNU build id of the ELF file at `path` (the bytes of its `NT_GNU_BUILD_ID` note), read
/// from its `PT_NOTE` segments, else from its `SHT_NOTE` sections. None when the file is not
/// a 64-bit little-endian ELF file, has no build id, or is cut short before it; an error only
/// when it cannot be opened or read.
pub fn read_elf_build_id(path: &Path) -> io::Result<Option<Vec<u8>>> {
    build_id(&File::open(path)?)
}

/// Bytes read at an offset: a file, or a slice in the tests.
pub(super) trait ReadAt {
    /// The `len` bytes at `offset`, or None when the input ends before them.
    fn bytes_at(&self, offset: u64, len: usize) -> io::Result<Option<Vec<u8>>>;
}

impl ReadAt for File {
    fn bytes_at(&self, offset: u64, len: usize) -> io::Result<Option<Vec<u8>>> {
        let mut bytes = vec![0; len];
        match self.read_exact_at(&mut bytes, offset) {
            Ok(()) => Ok(Some(bytes)),
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
            Err(error) => Err(error),
        }
    }
}

impl ReadAt for [u8] {
    fn bytes_at(&self, offset: u64, len: usize) -> io::Result<Option<Vec<u8>>> {
        let bytes = usize::try_from(offset)
            .ok()
            .and_then(|start| self.get(start..start.checked_add(len)?));
        Ok(bytes.map(<[u8]>::to_vec))
    }
}

/// Where an ELF64 little-endian file's header tables are.
pub(super) struct FileHeader {
    program_headers: Table,
    section_headers: Table,
}

/// A table of fixed-size entries: program or section headers.
struct Table {
    offset: u64,
    entry_bytes: usize,
    entries: usize,
}

/// [`read_elf_build_id`] of any input.
pub(super) fn build_id(input: &(impl ReadAt + ?Sized)) -> io::Result<Option<Vec<u8>>> {
    let Some(header) = FileHeader::read(input)? else {
        return Ok(None);
    };
    match build_id_from_segments(input, &header)? {
        Some(id) => Ok(Some(id)),
        None => build_id_from_sections(input, &header),
    }
}

impl FileHeader {
    /// None when `input` is not a 64-bit little-endian ELF file.
    pub(super) fn read(input: &(impl ReadAt + ?Sized)) -> io::Result<Option<Self>> {
        let Some(bytes) = input.bytes_at(0, FILE_HEADER_BYTES)? else {
            return Ok(None);
        };
        if !bytes.starts_with(ELF_MAGIC) || bytes[4] != ELFCLASS64 || bytes[5] != ELFDATA2LSB {
            return Ok(None);
        }
        let table = |offset_at, entry_bytes_at, entries_at| {
            Some(Table {
                offset: u64_at(&bytes, offset_at)?,
                entry_bytes: u16_at(&bytes, entry_bytes_at)?.into(),
                entries: u16_at(&bytes, entries_at)?.into(),
            })
        };
        Ok(table(0x20, 0x36, 0x38).zip(table(0x28, 0x3a, 0x3c)).map(
            |(program_headers, section_headers)| FileHeader {
                program_headers,
                section_headers,
            },
        ))
    }
}

impl Table {
    /// The entries, each at least `min_entry_bytes` long; as many as fit in
    /// [`MAX_TABLE_BYTES`], none when the input ends before them or they are too short.
    fn entries(
        &self,
        input: &(impl ReadAt + ?Sized),
        min_entry_bytes: usize,
    ) -> io::Result<Vec<Vec<u8>>> {
        if self.entry_bytes < min_entry_bytes || self.entries == 0 {
            return Ok(Vec::new());
        }
        let entries = self.entries.min(MAX_TABLE_BYTES / self.entry_bytes);
        let Some(bytes) = input.bytes_at(self.offset, entries * self.entry_bytes)? else {
            return Ok(Vec::new());
        };
        Ok(bytes
            .chunks_exact(self.entry_bytes)
            .map(<[u8]>::to_vec)
            .collect())
    }
}

/// The build id in the file's `PT_NOTE` segments.
pub(super) fn build_id_from_segments(
    input: &(impl ReadAt + ?Sized),
    header: &FileHeader,
) -> io::Result<Option<Vec<u8>>> {
    for entry in header
        .program_headers
        .entries(input, PROGRAM_HEADER_BYTES)?
    {
        // p_type, p_offset, p_filesz, p_align.
        let fields = (
            u32_at(&entry, 0),
            u64_at(&entry, 0x08),
            u64_at(&entry, 0x20),
            u64_at(&entry, 0x30),
        );
        if let (Some(PT_NOTE), Some(offset), Some(size), Some(align)) = fields
            && let Some(id) = build_id_in_notes(input, offset, size, align)?
        {
            return Ok(Some(id));
        }
    }
    Ok(None)
}

/// The build id in the file's `SHT_NOTE` sections (a file whose segments were stripped).
pub(super) fn build_id_from_sections(
    input: &(impl ReadAt + ?Sized),
    header: &FileHeader,
) -> io::Result<Option<Vec<u8>>> {
    for entry in header
        .section_headers
        .entries(input, SECTION_HEADER_BYTES)?
    {
        // sh_type, sh_offset, sh_size, sh_addralign.
        let fields = (
            u32_at(&entry, 0x04),
            u64_at(&entry, 0x18),
            u64_at(&entry, 0x20),
            u64_at(&entry, 0x30),
        );
        if let (Some(SHT_NOTE), Some(offset), Some(size), Some(align)) = fields
            && let Some(id) = build_id_in_notes(input, offset, size, align)?
        {
            return Ok(Some(id));
        }
    }
    Ok(None)
}

/// The build id among the notes of `size` bytes at `offset`, aligned to `align` (8 or 4).
fn build_id_in_notes(
    input: &(impl ReadAt + ?Sized),
    offset: u64,
    size: u64,
    align: u64,
) -> io::Result<Option<Vec<u8>>> {
    let size = size.min(MAX_NOTES_BYTES) as usize;
    let Some(notes) = input.bytes_at(offset, size)? else {
        return Ok(None);
    };
    Ok(find_build_id(&notes, if align == 8 { 8 } else { 4 }))
}

/// Walks notes (`namesz`, `descsz`, `type`, then the name and the description, each padded
/// to `align`) to the GNU build id; None at the first note that does not fit.
fn find_build_id(notes: &[u8], align: usize) -> Option<Vec<u8>> {
    let mut at = 0;
    while let Some(name_size) = u32_at(notes, at) {
        let desc_size = u32_at(notes, at + 4)?;
        let note_type = u32_at(notes, at + 8)?;
        let name_start = at + 12;
        let name_end = name_start.checked_add(usize::try_from(name_size).ok()?)?;
        let desc_start = align_up(name_end, align)?;
        let desc_end = desc_start.checked_add(usize::try_from(desc_size).ok()?)?;
        let name = notes.get(name_start..name_end)?;
        let desc = notes.get(desc_start..desc_end)?;
        if note_type == NT_GNU_BUILD_ID && name == GNU_OWNER && !desc.is_empty() {
            return Some(desc.to_vec());
        }
        at = align_up(desc_end, align)?;
    }
    None
}

fn align_up(offset: usize, align: usize) -> Option<usize> {
    Some(offset.checked_add(align - 1)? / align * align)
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        bytes.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        bytes.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        bytes.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}
