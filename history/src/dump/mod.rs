//! Writing and reading histories: readable JSON and compact binary (bincode, zstd-compressed),
//! with the same content. A history file is untrusted input: reading checks the magic bytes,
//! the version, sizes and consistency, and says what is wrong with which file.

use std::{
    fs,
    io::{self, Read as _, Write as _},
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize, Serializer, ser::SerializeStruct as _};

use crate::files;
use crate::history::{HistoryData, InvalidHistory, MemHistory, PinnedAccount};

/// First bytes of a binary dump.
pub const MAGIC: &[u8; 8] = b"HOTPINH\0";
/// Version of the binary layout and of the JSON schema; bumped on any incompatible change.
/// Versions 1 (no host memory counters), 2 (no checkpoint time), 3 (no device memory) and 4
/// (no unread copies, no thread or stream per copy) are still read.
pub const FORMAT_VERSION: u32 = 8;
/// The JSON document's `format` field.
pub const JSON_FORMAT: &str = "hotpin-history";
/// Largest history file read, compressed or not (a history of 1M allocations is far below).
pub const MAX_FILE_BYTES: u64 = 1 << 30;
/// Largest decompressed content accepted from a binary dump, whatever its compressed size.
pub const MAX_DECOMPRESSED_BYTES: u64 = 4 << 30;

/// How much a binary dump of `compressed` bytes may expand to: far above what real histories
/// compress by (3-30x measured), far below what a zstd bomb would make us allocate.
pub fn decompressed_limit(compressed: usize) -> u64 {
    (compressed as u64)
        .saturating_mul(256)
        .clamp(64 << 20, MAX_DECOMPRESSED_BYTES)
}

/// The two dump formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Binary,
}

impl Format {
    /// From a file name: `.json` is JSON, anything else binary.
    pub fn from_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("json") => Format::Json,
            _ => Format::Binary,
        }
    }
}

/// Why a history could not be written or read; always names the file.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("{}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: not a hotpin history ({what})", path.display())]
    NotAHistory { path: PathBuf, what: String },
    #[error("{}: format version {found} is newer than this tracer reads ({FORMAT_VERSION}); upgrade hotpin", path.display())]
    NewerVersion { path: PathBuf, found: u32 },
    #[error("{}: holds over {limit} bytes, the limit for history files (counted as read: a device or a pipe has no size to check first)", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{}: decompresses to over {limit} bytes; refusing it as a decompression bomb", path.display())]
    Decompressed { path: PathBuf, limit: u64 },
    #[error("{}: truncated or corrupted ({what})", path.display())]
    Corrupted { path: PathBuf, what: String },
    #[error("{}: the history is inconsistent", path.display())]
    Invalid {
        path: PathBuf,
        #[source]
        source: InvalidHistory,
    },
}

#[derive(Serialize)]
struct JsonOut<'a> {
    format: &'static str,
    schema_version: u32,
    verbose: bool,
    #[serde(flatten)]
    data: Dumped<'a>,
}

/// A history's content as a dump holds it: its fields as they are, and `pinned`, the accounts
/// computed from them as it is written ([`HistoryData::pinned_accounts`]). Serialized field by
/// field in `HistoryData`'s order, which its derived `Deserialize` reads back, so that a
/// history is not copied to be written (a verbose one is written in place). The round-trip
/// tests (dump/tests.rs) hold the two to the same layout.
struct Dumped<'a> {
    data: &'a HistoryData,
    pinned: Vec<PinnedAccount>,
}

impl<'a> Dumped<'a> {
    fn of(data: &'a HistoryData) -> Self {
        Self {
            data,
            pinned: data.pinned_accounts(),
        }
    }
}

impl Serialize for Dumped<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// The callers as a list of pairs, as `HistoryData` writes them.
        struct Pairs<'a, K, V>(&'a std::collections::BTreeMap<K, V>);
        impl<K: Serialize, V: Serialize> Serialize for Pairs<'_, K, V> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_seq(self.0.iter())
            }
        }
        let data = self.data;
        let mut out = serializer.serialize_struct("HistoryData", 8)?;
        out.serialize_field("meta", &data.meta)?;
        out.serialize_field("call_sites", &data.call_sites)?;
        out.serialize_field("allocations", &data.allocations)?;
        out.serialize_field("stats", &data.stats)?;
        out.serialize_field("callers", &Pairs(&data.callers))?;
        out.serialize_field("compacted", &data.compacted)?;
        out.serialize_field("pinned", &self.pinned)?;
        out.serialize_field("copied_extents", &data.gathered_extents())?;
        out.end()
    }
}

#[derive(Deserialize)]
struct JsonIn {
    format: String,
    schema_version: u32,
    #[serde(flatten)]
    data: HistoryData,
}

/// Writes `history` to `path` atomically (a temporary file in the same directory, then a
/// rename: no half-written file ever has the final name), readable by the owner only: it holds
/// another process's addresses. `verbose` keeps each allocation's event timeline.
pub fn write(
    history: &MemHistory,
    path: &Path,
    format: Format,
    verbose: bool,
) -> Result<(), DumpError> {
    // As the history is marked: a run still going when it was taken (the daemon stopping)
    // says so.
    write_marked(
        history,
        path,
        format,
        verbose,
        history.meta().checkpoint_unix_s,
    )
}

/// Writes a checkpoint of a recording still going on: the history so far, marked with the
/// time it was written (`RecordingMeta::checkpoint_unix_s`), atomically like [`write`], so
/// the file at `path` is always a whole history, whenever the tracer is killed.
pub fn write_checkpoint(
    history: &MemHistory,
    path: &Path,
    format: Format,
    verbose: bool,
) -> Result<(), DumpError> {
    write_marked(history, path, format, verbose, Some(unix_now()))
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn write_marked(
    history: &MemHistory,
    path: &Path,
    format: Format,
    verbose: bool,
    checkpoint_unix_s: Option<u64>,
) -> Result<(), DumpError> {
    let io_error = |source| DumpError::Io {
        path: path.to_path_buf(),
        source,
    };
    let copy;
    let data = if verbose && checkpoint_unix_s.is_none() {
        history.data()
    } else {
        let mut data = history.data().clone();
        if !verbose {
            for allocation in &mut data.allocations {
                allocation.events = Vec::new();
            }
        }
        data.meta.checkpoint_unix_s = checkpoint_unix_s;
        copy = data;
        &copy
    };
    let bytes = encode(data, format, verbose).map_err(io_error)?;
    files::write_atomically(path, &bytes, 0o600).map_err(io_error)
}

/// Checks, before anything is recorded, that a history can be written to `path`: nothing is
/// there or a regular file is (never a link, a device or a directory: [`files::check_output`]),
/// it is not immutable or otherwise unwritable, and its directory exists and takes a new file
/// (one is created and removed).
pub fn check_writable(path: &Path) -> Result<(), DumpError> {
    let error = |source| DumpError::Io {
        path: path.to_path_buf(),
        source,
    };
    files::check_output(path).map_err(error)?;
    if path.exists() {
        // Opened for writing, not truncated: an immutable or read-only file fails here.
        fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(error)?;
    }
    check_directory(directory_of(path))
}

/// Checks that `dir` exists, is a directory and takes a new file (one is created and
/// removed): where a history of a name not known yet is to be written.
pub fn check_directory(dir: &Path) -> Result<(), DumpError> {
    let error = |source| DumpError::Io {
        path: dir.to_path_buf(),
        source,
    };
    if !fs::metadata(dir).map_err(error)?.is_dir() {
        return Err(error(io::Error::from(io::ErrorKind::NotADirectory)));
    }
    let probe = dir.join(format!(".hotpin-write-check-{}", std::process::id()));
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&probe)
        .map_err(error)?;
    let _ = fs::remove_file(&probe);
    Ok(())
}

/// Writes `history` to `path`, or, if that fails, to the same file name in the current
/// directory or else in `$TMPDIR` (or /tmp): a recording is never lost to a full disk or a
/// directory removed meanwhile. Returns where it was written; the error of the first try comes
/// with a fallback path.
pub fn write_or_fall_back(
    history: &MemHistory,
    path: &Path,
    format: Format,
    verbose: bool,
) -> Result<PathBuf, (DumpError, Option<PathBuf>)> {
    let first = match write(history, path, format, verbose) {
        Ok(()) => return Ok(path.to_path_buf()),
        Err(error) => error,
    };
    let name = path
        .file_name()
        .map_or_else(|| "hotpin-history.hotpin".into(), |n| n.to_os_string());
    let tmp = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    for dir in [PathBuf::from("."), tmp] {
        let fallback = dir.join(&name);
        if fallback != path && write(history, &fallback, format, verbose).is_ok() {
            return Err((first, Some(fallback)));
        }
    }
    Err((first, None))
}

fn directory_of(path: &Path) -> &Path {
    files::directory_of(path)
}

/// The bytes of a dump, each process's pinned-memory account computed from `data` included.
pub fn encode(data: &HistoryData, format: Format, verbose: bool) -> io::Result<Vec<u8>> {
    match format {
        Format::Json => {
            let out = JsonOut {
                format: JSON_FORMAT,
                schema_version: FORMAT_VERSION,
                verbose,
                data: Dumped::of(data),
            };
            let mut bytes = serde_json::to_vec_pretty(&out).map_err(io::Error::other)?;
            bytes.push(b'\n');
            Ok(bytes)
        }
        Format::Binary => {
            let body = bincode::serde::encode_to_vec(Dumped::of(data), bincode::config::standard())
                .map_err(io::Error::other)?;
            let mut bytes = Vec::with_capacity(body.len() / 4 + 16);
            bytes.extend_from_slice(MAGIC);
            bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
            // The frame checksum makes any corruption of the body an error, not a different
            // history.
            let mut encoder = zstd::stream::write::Encoder::new(bytes, 9)?;
            encoder.include_checksum(true)?;
            encoder.write_all(&body)?;
            encoder.finish()
        }
    }
}

/// Reads a dump of either format (told apart by its first bytes, not its name).
pub fn read(path: &Path) -> Result<MemHistory, DumpError> {
    let io_error = |source| DumpError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Its first bytes first: what is not a history is refused before the rest is held
    // (#41 item 13: `tracer report /dev/zero` held 1 GB before refusing). One handle for
    // both reads: a pipe can be read once.
    let file = fs::File::open(path).map_err(io_error)?;
    let mut bytes = Vec::new();
    (&file)
        .take(HEAD_BYTES)
        .read_to_end(&mut bytes)
        .map_err(io_error)?;
    if !could_be_a_history(&bytes) {
        return Err(DumpError::NotAHistory {
            path: path.to_path_buf(),
            what: "neither the binary magic bytes nor a JSON object".into(),
        });
    }
    // Bounded by what is read: a device or a pipe has no size to check first.
    files::read_rest_bounded(&file, &mut bytes, MAX_FILE_BYTES).map_err(|error| {
        if error.kind() == io::ErrorKind::FileTooLarge {
            DumpError::TooLarge {
                path: path.to_path_buf(),
                limit: MAX_FILE_BYTES,
            }
        } else {
            io_error(error)
        }
    })?;
    let data = decode(&bytes).map_err(|error| error.at(path))?;
    MemHistory::from_data(data).map_err(|source| DumpError::Invalid {
        path: path.to_path_buf(),
        source,
    })
}

/// Bytes read first to tell a history from anything else.
const HEAD_BYTES: u64 = 4096;

/// Whether a file beginning with `head` may be a dump: the binary magic bytes (or the start
/// of them, in a file shorter), or a JSON object after white space (or white space alone).
fn could_be_a_history(head: &[u8]) -> bool {
    if head.starts_with(MAGIC) || MAGIC.starts_with(head) {
        return true;
    }
    head.iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_none_or(|&first| first == b'{')
}

/// A decoding failure before the file name is attached.
#[derive(Debug)]
pub enum DecodeFailure {
    NotAHistory(String),
    NewerVersion(u32),
    /// Decompressed content over this limit.
    TooLarge(u64),
    Corrupted(String),
}

impl DecodeFailure {
    fn at(self, path: &Path) -> DumpError {
        let path = path.to_path_buf();
        match self {
            DecodeFailure::NotAHistory(what) => DumpError::NotAHistory { path, what },
            DecodeFailure::NewerVersion(found) => DumpError::NewerVersion { path, found },
            DecodeFailure::TooLarge(limit) => DumpError::Decompressed { path, limit },
            DecodeFailure::Corrupted(what) => DumpError::Corrupted { path, what },
        }
    }
}

/// Decodes the bytes of a dump of either format.
pub fn decode(bytes: &[u8]) -> Result<HistoryData, DecodeFailure> {
    decode_with_limit(bytes, decompressed_limit(bytes.len()))
}

/// [`decode`] with an explicit limit on the decompressed size of a binary dump. The copied
/// extents it holds are moved into their allocations (`HistoryData::spread_extents`).
pub fn decode_with_limit(bytes: &[u8], limit: u64) -> Result<HistoryData, DecodeFailure> {
    let mut data = decode_either(bytes, limit)?;
    data.spread_extents()
        .map_err(|e| DecodeFailure::Corrupted(e.to_string()))?;
    Ok(data)
}

/// The history a dump of either format holds, as written.
fn decode_either(bytes: &[u8], limit: u64) -> Result<HistoryData, DecodeFailure> {
    if bytes.starts_with(MAGIC) {
        return decode_binary(&bytes[MAGIC.len()..], limit);
    }
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(DecodeFailure::NotAHistory(
            "neither the binary magic bytes nor a JSON object".into(),
        ));
    }
    // Check the envelope first so a newer schema is reported as such, not as a field error.
    #[derive(Deserialize)]
    struct Envelope {
        format: Option<String>,
        schema_version: Option<u32>,
    }
    let envelope: Envelope = serde_json::from_slice(bytes)
        .map_err(|e| DecodeFailure::Corrupted(format!("JSON: {e}")))?;
    if envelope.format.as_deref() != Some(JSON_FORMAT) {
        return Err(DecodeFailure::NotAHistory(format!(
            "the JSON \"format\" field is {:?}, not {JSON_FORMAT:?}",
            envelope.format
        )));
    }
    match envelope.schema_version {
        Some(v) if v > FORMAT_VERSION => return Err(DecodeFailure::NewerVersion(v)),
        Some(_) => {}
        None => return Err(DecodeFailure::Corrupted("no schema_version".into())),
    }
    let json: JsonIn = serde_json::from_slice(bytes)
        .map_err(|e| DecodeFailure::Corrupted(format!("JSON: {e}")))?;
    debug_assert_eq!(json.format, JSON_FORMAT);
    let _ = json.schema_version;
    Ok(json.data)
}

fn decode_binary(rest: &[u8], limit: u64) -> Result<HistoryData, DecodeFailure> {
    let version = rest
        .get(..4)
        .ok_or_else(|| DecodeFailure::Corrupted("ends inside the header".into()))?;
    let version = u32::from_le_bytes(version.try_into().expect("4 bytes"));
    if version > FORMAT_VERSION {
        return Err(DecodeFailure::NewerVersion(version));
    }
    if version == 0 {
        return Err(DecodeFailure::Corrupted("format version 0".into()));
    }
    let decoder = zstd::stream::read::Decoder::new(&rest[4..])
        .map_err(|e| DecodeFailure::Corrupted(format!("zstd: {e}")))?;
    let mut body = Vec::new();
    decoder
        .take(limit + 1)
        .read_to_end(&mut body)
        .map_err(|e| DecodeFailure::Corrupted(format!("zstd: {e}")))?;
    if body.len() as u64 > limit {
        return Err(DecodeFailure::TooLarge(limit));
    }
    let corrupted =
        |e: bincode::error::DecodeError| DecodeFailure::Corrupted(format!("bincode: {e}"));
    let (data, used) = if version == 1 {
        let (old, used) = decode_body::<legacy::v1::HistoryData>(&body).map_err(corrupted)?;
        (old.into(), used)
    } else if version == 2 {
        let (old, used) = decode_body::<legacy::v2::HistoryData>(&body).map_err(corrupted)?;
        (old.into(), used)
    } else if version == 3 {
        let (old, used) = decode_body::<legacy::v3::HistoryData>(&body).map_err(corrupted)?;
        (old.into(), used)
    } else if version == 4 {
        let (old, used) = decode_body::<legacy::v4::HistoryData>(&body).map_err(corrupted)?;
        (old.into(), used)
    } else if version == 5 {
        let (old, used) = decode_body::<legacy::v5::HistoryData>(&body).map_err(corrupted)?;
        (old.into(), used)
    } else if version == 6 {
        let (old, used) = decode_body::<legacy::v6::HistoryData>(&body).map_err(corrupted)?;
        (old.into(), used)
    } else if version == 7 {
        let (old, used) = decode_body::<legacy::v7::HistoryData>(&body).map_err(corrupted)?;
        (old.into(), used)
    } else {
        decode_body::<HistoryData>(&body).map_err(corrupted)?
    };
    if used != body.len() {
        return Err(DecodeFailure::Corrupted(format!(
            "{} bytes left over after the history",
            body.len() - used
        )));
    }
    Ok(data)
}

/// Decodes a bincode body under a limit near its own length. bincode allocates a string's bytes
/// before reading them, trusting the length in front; its limit (a constant) caps what such
/// lengths may claim in all, counted in memory (a `u64` that took one byte as a varint
/// claims eight). So the limit is the first of a few steps (16x apart) at or above 64 times
/// the body's length: a real history claims a few times its length (a CuPy program's
/// history claimed over 16 times and was refused when the bound was the body's length), and
/// a crafted 3 KB body that claims a 4 GB string is still refused, not allocated (found by
/// the fuzzer).
fn decode_body<T: serde::de::DeserializeOwned>(
    body: &[u8],
) -> Result<(T, usize), bincode::error::DecodeError> {
    macro_rules! first_limit_above {
        ($($bits:literal)*) => {$(
            if body.len().saturating_mul(64) <= 1 << $bits {
                let config = bincode::config::standard().with_limit::<{ 1 << $bits }>();
                return bincode::serde::decode_from_slice(body, config);
            }
        )*};
    }
    first_limit_above!(20 24 28);
    let config = bincode::config::standard().with_limit::<{ MAX_DECOMPRESSED_BYTES as usize }>();
    bincode::serde::decode_from_slice(body, config)
}

mod legacy;
#[cfg(test)]
mod tests;
