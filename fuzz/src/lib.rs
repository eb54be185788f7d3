//! The check every fuzz target ends in.

use hotpin_history::{
    dump::{self, Format},
    history::MemHistory,
};

/// Loads `bytes` as a history file the way `dump::read` does. Rejecting it is fine; panicking
/// is the bug the fuzzer looks for. What loads must come back unchanged from a dump in each
/// format, so a history that loads is one the tracer could have written.
pub fn check_loaded(bytes: &[u8]) {
    let Ok(data) = dump::decode_with_limit(bytes, 64 << 20) else {
        return;
    };
    let Ok(history) = MemHistory::from_data(data) else {
        return;
    };
    for format in [Format::Json, Format::Binary] {
        let encoded = dump::encode(history.data(), format, true).expect("encodes");
        let data = dump::decode(&encoded).expect("its own dump decodes");
        let reloaded = MemHistory::from_data(data).expect("its own dump is consistent");
        assert_eq!(reloaded.data(), history.data(), "{format:?} round trip");
    }
}
