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
/// are skipped. Read byte by byte, with a string made only for a file-backed line: a CUDA
/// process's map has a thousand lines and more, most of them anonymous, and auto mode reads it
/// again in the program's thread whenever a caller lies in a module loaded since (as
/// [`parse_map_lines`] read it, about 3,700 instructions a line).
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    parse_maps_bytes(text.as_bytes())
}

/// [`parse_maps`] of the map's bytes: a path that is not UTF-8 (a file named in another
/// encoding) is read lossily, and the rest of the map as it is.
fn parse_maps_bytes(text: &[u8]) -> Vec<Mapping> {
    text.split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .filter_map(file_mapping)
        .collect()
}

/// One line of the map, if it parses and a file is mapped there (an inode, a path).
fn file_mapping(bytes: &[u8]) -> Option<Mapping> {
    let mut at = 0;
    let mut field = || -> Option<&[u8]> {
        while bytes.get(at)?.is_ascii_whitespace() {
            at += 1;
        }
        let start = at;
        while at < bytes.len() && !bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        Some(&bytes[start..at])
    };
    let range = field()?;
    let _perms = field()?;
    let offset = field()?;
    let _dev = field()?;
    let inode = field()?;
    if inode == b"0" || !inode.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let dash = range.iter().position(|&b| b == b'-')?;
    let start = hex(&range[..dash])?;
    let end = hex(&range[dash + 1..])?;
    let file_offset = hex(offset)?;
    // The path is the rest of the line and may contain spaces.
    while bytes.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    let path = &bytes[at..];
    if !path.starts_with(b"/") {
        return None;
    }
    let path = path.strip_suffix(b" (deleted)").unwrap_or(path);
    Some(Mapping {
        start,
        end,
        file_offset,
        path: String::from_utf8_lossy(path).into_owned(),
    })
}

/// A hexadecimal number of at most 16 digits.
fn hex(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    digits.iter().try_fold(0u64, |value, &digit| {
        let nibble = (digit as char).to_digit(16)?;
        Some(value << 4 | u64::from(nibble))
    })
}

/// A process's file mappings, sorted by address.
#[derive(Clone, Debug, Default)]
pub struct ProcessMaps {
    mappings: Vec<Mapping>,
}

impl ProcessMaps {
    /// Reads `/proc/PID/maps` (NotFound: no such process).
    pub fn read(pid: u32) -> std::io::Result<Self> {
        use std::io::Read as _;
        // Room for a large process's map from the start: reading a file of no stated size
        // into an empty buffer reads 32 bytes first and doubles, a system call each.
        // Bytes, not a string: one mapped path that is not UTF-8 would lose the whole map.
        let mut text = Vec::with_capacity(64 << 10);
        std::fs::File::open(format!("/proc/{pid}/maps"))?.read_to_end(&mut text)?;
        Ok(Self::from_bytes(&text))
    }

    pub fn from_text(text: &str) -> Self {
        Self::from_bytes(text.as_bytes())
    }

    pub fn from_bytes(text: &[u8]) -> Self {
        let mut mappings = parse_maps_bytes(text);
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

    /// Where `file_offset` of file `path` is mapped, if it is (the inverse of
    /// [`Self::module_offset`]).
    pub fn address_of(&self, path: &str, file_offset: u64) -> Option<u64> {
        self.mappings
            .iter()
            .find(|m| {
                m.path == path
                    && m.file_offset <= file_offset
                    && file_offset < m.file_offset + (m.end - m.start)
            })
            .map(|m| m.start + (file_offset - m.file_offset))
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

/// One line of `/proc/PID/maps`, file-backed or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapLine {
    pub start: u64,
    pub end: u64,
    pub readable: bool,
    pub writable: bool,
    pub shared: bool,
    /// Offset of `start` in the file mapped (0 for anonymous memory).
    pub file_offset: u64,
    /// The file's inode; 0 for anonymous memory and pseudo-paths.
    pub inode: u64,
    /// The path or pseudo-path (`[heap]`, `[stack]`, `[anon:...]`); empty for an anonymous
    /// mapping.
    pub path: String,
}

/// Parses every line of `/proc/PID/maps`; lines that do not parse are skipped.
pub fn parse_map_lines(text: &str) -> Vec<MapLine> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_ascii_whitespace();
            let (start, end) = fields.next()?.split_once('-')?;
            let perms = fields.next()?.as_bytes();
            let offset = fields.next()?;
            let _dev = fields.next()?;
            let inode = fields.next()?;
            // The path is the rest of the line and may contain spaces.
            let path = line
                .splitn(6, |c: char| c.is_ascii_whitespace())
                .nth(5)
                .unwrap_or("")
                .trim_start();
            Some(MapLine {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                readable: perms.first() == Some(&b'r'),
                writable: perms.get(1) == Some(&b'w'),
                shared: perms.get(3) == Some(&b's'),
                file_offset: u64::from_str_radix(offset, 16).ok()?,
                inode: inode.parse().ok()?,
                path: path.to_string(),
            })
        })
        .collect()
}

/// What a mapping that existed before the tracer attached holds, as the history records it
/// (`MemHistory::seed`), if it may hold host buffers or CUDA memory:
/// - the heap, and private writable anonymous mappings (malloc's large blocks and arenas,
///   Python's and the frameworks' own buffers, thread stacks, the main stack): regions;
/// - a shared writable mapping of `/dev/zero` (what cudaHostAlloc / cudaMallocHost make with
///   the driver on the GPU machine, platform.md): pinned. A program's own
///   `MAP_SHARED|MAP_ANONYMOUS` memory looks the same and is taken as pinned too;
/// - a mapping of `/dev/nvidia-uvm`: managed memory.
///
/// The driver's own small mappings of `/dev/nvidiactl` and `/dev/nvidia0`, `PROT_NONE`
/// reservations (device address ranges, guard pages) and files are not seeded.
pub fn seed_kind(line: &MapLine) -> Option<crate::history::AllocKind> {
    use crate::history::AllocKind;
    if !line.readable || !line.writable || line.end <= line.start {
        return None;
    }
    let path = line.path.as_str();
    match path {
        "[heap]" => Some(AllocKind::Heap),
        "" | "[stack]" if !line.shared => Some(AllocKind::Mmap),
        _ if path.starts_with("[anon") && !line.shared => Some(AllocKind::Mmap),
        _ if path.starts_with("/dev/zero") && line.shared => Some(AllocKind::Pinned),
        _ if path.starts_with("/dev/nvidia-uvm") => Some(AllocKind::Managed),
        _ => None,
    }
}

/// Which side of a copy an address is on, from the process's memory map alone: host memory
/// is readable by the process; a device address (unified addressing) lies in a range the
/// driver reserved with no access (`---p`), in a `/dev/nvidia-uvm` mapping, or outside every
/// mapping. `None` when the map shows a readable mapping of the driver's own device files.
pub fn is_device_address(lines: &[MapLine], addr: u64) -> Option<bool> {
    let index = lines.partition_point(|l| l.start <= addr).checked_sub(1);
    let Some(line) = index.map(|i| &lines[i]).filter(|l| addr < l.end) else {
        return Some(true);
    };
    if line.path.starts_with("/dev/nvidia-uvm") {
        return Some(true);
    }
    if line.path.starts_with("/dev/nvidia") {
        return None;
    }
    Some(!line.readable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::AllocKind;

    // Lines as /proc/PID/maps shows them for a CUDA process on the H100 machine.
    const MAPS: &str = "\
55d0c0a00000-55d0c0b00000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0400000000 ---p 00000000 00:00 0 
7f1000000000-7f1000200000 rw-s 00000000 00:05 12                         /dev/zero (deleted)
7f2000000000-7f2000200000 rw-s 00000000 00:05 13                         /dev/nvidia-uvm
7f3000000000-7f3000001000 rw-s 00000000 00:05 14                         /dev/nvidiactl
7f4000000000-7f4000800000 rw-p 00000000 00:00 0 
7f5000000000-7f5000010000 r-xp 00000000 08:01 99                         /usr/lib/libc.so.6
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
";

    /// What `parse_maps` read before it was read byte by byte: every line parsed, the
    /// file-backed ones kept.
    fn parse_maps_as_before(text: &str) -> Vec<Mapping> {
        parse_map_lines(text)
            .into_iter()
            .filter(|line| line.inode != 0 && line.path.starts_with('/'))
            .map(|line| Mapping {
                start: line.start,
                end: line.end,
                file_offset: line.file_offset,
                path: match line.path.strip_suffix(" (deleted)") {
                    Some(path) => path.to_string(),
                    None => line.path,
                },
            })
            .collect()
    }

    #[test]
    fn file_mappings_are_read_as_the_whole_lines_parse_reads_them() {
        let odd = "\
7f6000000000-7f6000001000 r--p 00001000 08:01 77                         /opt/a dir/lib x.so
7f6000001000-7f6000002000 r-xp 00002000 08:01 78                         /tmp/gone.so (deleted)
7f6000002000-7f6000003000 rw-p 00000000 00:00 0                          [anon:scratch]
7f6000003000-7f6000004000 rw-p 00000000 08:01 79                         [vvar]
7f6000004000-7f6000005000 rw-p 00000000 08:01 80
not a line at all
7f60000050zz-7f6000006000 rw-p 00000000 08:01 81                         /bad/start.so
7f6000006000-7f6000007000 rw-p 0000000g 08:01 82                         /bad/offset.so
7f6000007000-7f6000008000 rw-p 00000000 08:01 x3                         /bad/inode.so
";
        for text in [MAPS, odd, "", "\n\n"] {
            assert_eq!(parse_maps(text), parse_maps_as_before(text), "{text}");
        }
        let kept = parse_maps(odd);
        assert_eq!(
            kept.iter().map(|m| m.path.as_str()).collect::<Vec<_>>(),
            ["/opt/a dir/lib x.so", "/tmp/gone.so"]
        );
        assert_eq!(kept[1].file_offset, 0x2000);
    }

    #[test]
    fn a_path_that_is_not_utf8_is_read_lossily_and_the_rest_of_the_map_kept() {
        let mut text =
            b"7f7000000000-7f7000001000 r--p 00000000 08:01 91   /opt/caf\xe9/lib.so\n".to_vec();
        text.extend_from_slice(MAPS.as_bytes());
        let maps = ProcessMaps::from_bytes(&text);
        assert_eq!(
            maps.module_offset(0x7f7000000010),
            Some(("/opt/caf\u{fffd}/lib.so", 0x10))
        );
        assert_eq!(
            maps.module_offset(0x7f5000000020),
            Some(("/usr/lib/libc.so.6", 0x20))
        );
    }

    #[test]
    fn mappings_are_seeded_by_what_they_hold() {
        let lines = parse_map_lines(MAPS);
        assert_eq!(lines.len(), 8);
        let kinds: Vec<_> = lines.iter().map(seed_kind).collect();
        assert_eq!(
            kinds,
            vec![
                Some(AllocKind::Heap),
                None,
                Some(AllocKind::Pinned),
                Some(AllocKind::Managed),
                None,
                Some(AllocKind::Mmap),
                None,
                Some(AllocKind::Mmap),
            ]
        );
    }

    #[test]
    fn device_addresses_are_those_the_process_cannot_read() {
        let lines = parse_map_lines(MAPS);
        // Inside the PROT_NONE reservation, in managed memory, and outside every mapping.
        assert_eq!(is_device_address(&lines, 0x7f00_1000_0000), Some(true));
        assert_eq!(is_device_address(&lines, 0x7f20_0000_1000), Some(true));
        assert_eq!(is_device_address(&lines, 0x1000), Some(true));
        // Host memory: the heap, an anonymous mapping, pinned memory.
        assert_eq!(is_device_address(&lines, 0x55d0_c0a0_0010), Some(false));
        assert_eq!(is_device_address(&lines, 0x7f40_0000_0100), Some(false));
        assert_eq!(is_device_address(&lines, 0x7f10_0000_0100), Some(false));
        // The driver's own file: not a copy's buffer.
        assert_eq!(is_device_address(&lines, 0x7f30_0000_0010), None);
    }
}
