//! A process's memory map as `/proc/PID/maps` gives it: what an address is, as a module file
//! and an offset in it (stable across runs, unlike the address).

/// One file-backed mapping of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Offset of `start` in the file.
    pub file_offset: u64,
    pub path: String,
}

/// Parses the text of `/proc/PID/maps`, keeping file-backed mappings; lines that do not parse
/// are skipped.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_ascii_whitespace();
            let range = fields.next()?;
            let _perms = fields.next()?;
            let offset = fields.next()?;
            let _dev = fields.next()?;
            let inode = fields.next()?;
            // The path is the rest of the line and may contain spaces.
            let path = line
                .splitn(6, |c: char| c.is_ascii_whitespace())
                .nth(5)?
                .trim_start();
            if inode == "0" || !path.starts_with('/') {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                file_offset: u64::from_str_radix(offset, 16).ok()?,
                path: path.strip_suffix(" (deleted)").unwrap_or(path).to_string(),
            })
        })
        .collect()
}

/// A process's file mappings, sorted by address.
#[derive(Clone, Debug, Default)]
pub struct ProcessMaps {
    mappings: Vec<Mapping>,
}

impl ProcessMaps {
    /// Reads `/proc/PID/maps` (NotFound: no such process).
    pub fn read(pid: u32) -> std::io::Result<Self> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
        Ok(Self::from_text(&text))
    }

    pub fn from_text(text: &str) -> Self {
        let mut mappings = parse_maps(text);
        mappings.sort_by_key(|m| m.start);
        Self { mappings }
    }

    /// The module and file offset of an address, if a file is mapped there.
    pub fn module_offset(&self, addr: u64) -> Option<(&str, u64)> {
        let index = self
            .mappings
            .partition_point(|m| m.start <= addr)
            .checked_sub(1)?;
        let mapping = &self.mappings[index];
        (addr < mapping.end).then(|| {
            (
                mapping.path.as_str(),
                addr - mapping.start + mapping.file_offset,
            )
        })
    }

    /// Distinct mapped files.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        let mut seen = std::collections::HashSet::new();
        self.mappings
            .iter()
            .map(|m| m.path.as_str())
            .filter(move |p| seen.insert(*p))
    }
}
