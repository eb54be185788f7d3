//! A binary history file (magic, version, zstd, bincode) as untrusted input: loading it never
//! panics, and whatever loads survives a round trip through both formats unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use hotpin_history::dump;

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    let mut bytes = dump::MAGIC.to_vec();
    if mode & 1 == 0 {
        // The file as it is after the magic bytes: version, zstd frame, checksum.
        bytes.extend_from_slice(rest);
    } else {
        // A well-formed frame around any body, so the mutations reach the bincode decoder
        // (the frame checksum rejects almost every mutated frame before it).
        bytes.extend_from_slice(&dump::FORMAT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&zstd::bulk::compress(rest, 1).expect("compresses"));
    }
    hotpin_fuzz::check_loaded(&bytes);
});
