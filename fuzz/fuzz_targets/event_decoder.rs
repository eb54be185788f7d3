//! Ring-buffer records as the kernel could write them, any bytes at all: decoding never
//! panics, and a history fed the decoded events stays consistent (it reloads from its own
//! data unchanged).
#![no_main]

use libfuzzer_sys::fuzz_target;
use hotpin_history::history::MemHistory;
use hotpin_registry::events;
use tracer_common::EVENT_SIZE;

fuzz_target!(|bytes: &[u8]| {
    // One record of the length the first byte says (short ones too), then whole events.
    let Some((&first, rest)) = bytes.split_first() else {
        return;
    };
    let one = &rest[..usize::from(first).min(rest.len())];
    let _ = events::decode(one);
    let _ = events::python_code(one);
    let mut history = MemHistory::new();
    for record in rest.chunks(EVENT_SIZE) {
        match events::decode(record) {
            Ok(events::TraceEvent::Call(call)) => history.apply(&call, None),
            Ok(event) => history.apply_kernel(&event, |_| None),
            Err(_) => {}
        }
    }
    let data = history.into_data();
    let reloaded = MemHistory::from_data(data.clone()).expect("a history it built is consistent");
    assert_eq!(reloaded.data(), &data);
});
