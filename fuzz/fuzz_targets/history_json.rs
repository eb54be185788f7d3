//! A history file in JSON, as untrusted input: loading it never panics, and whatever loads
//! survives a round trip through both formats unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use hotpin_history::dump;

fuzz_target!(|bytes: &[u8]| {
    // Only inputs that take the JSON path; the binary target covers the rest.
    if bytes.starts_with(dump::MAGIC) {
        return;
    }
    hotpin_fuzz::check_loaded(bytes);
});
